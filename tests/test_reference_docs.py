"""docs/reference/ is generated from the code (stream_nb/reference.py): each committed page must
be what the code renders now, and the data the pages are made of must cover the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stream_nb import reference

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_the_committed_reference_page_is_the_code_s(name):
    committed = (PAGES / name).read_text(encoding="utf-8") if (PAGES / name).exists() else ""
    assert committed == reference.PAGES[name](), (
        f"docs/reference/{name} differs from what the code gives: run `make reference` and commit the result")


def test_every_configuration_key_has_one_line_and_every_line_a_key():
    import stream_nb.config as config

    keys = {f"{section}.{key}" for section, name in reference.SCHEMAS for key in getattr(config, name)}
    assert set(config.KEY_DOCS) == keys
    assert all(doc and "\n" not in doc for doc in config.KEY_DOCS.values())
    # every schema of config.py is in the page
    schemas = {name for name in vars(config) if name.endswith("_KEYS") and isinstance(getattr(config, name), dict)}
    assert schemas == {name for _, name in reference.SCHEMAS}


def test_every_bound_is_in_the_configuration_page():
    from stream_nb.config import BOUNDS

    page = reference.configuration_page()
    for key in BOUNDS:
        section, name = key.split(".", 1)
        assert f"`{name.rsplit('.', 1)[-1]}`" in page, key  # under its section's heading


def test_every_model_and_feature_option_has_one_line_and_every_line_an_option():
    """[model] and [features] come from the model classes' and featurisers' signatures: a new
    option without its line in config.BUILDER_KEY_DOCS fails here, and so does a line left over."""
    import stream_nb.config as config

    keys = {f"{section}.{key}" for section, options in reference.builder_keys().items() for key in options}
    assert set(config.BUILDER_KEY_DOCS) == keys
    assert all(doc and "\n" not in doc and "<" not in doc for doc in config.BUILDER_KEY_DOCS.values())
    assert {"model.alpha", "model.half_life", "features.osb_window", "features.char_ngrams"} <= keys


def test_every_dead_letter_reason_in_the_code_is_in_the_reference():
    from stream_nb.events.codec import REASONS
    from stream_nb.events.raw_mail import RAW_MAIL_REASONS
    from stream_nb.worker.records import WORKER_REASONS

    table = dict(reference._codec_table())
    assert list(table) == list(REASONS)  # the codec's table of codes, in the order of its checks
    assert set(RAW_MAIL_REASONS) <= set(REASONS)
    documented = set(REASONS) | set(WORKER_REASONS)
    # every reason the worker's code gives a dead letter, as a literal
    given = set()
    for path in (ROOT / "stream_nb").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        given |= set(re.findall(r"rejected_by_us\(\s*\w+,\s*\"(\w+)\"", text))
        given |= set(re.findall(r"(?:_Refused|refuse)\(\"(\w+)\"", text))
        given |= set(re.findall(r"Rejected\(reason=\"(\w+)\"", text))
        given |= set(re.findall(r"^UNREADABLE_MAIL = \"(\w+)\"", text, re.M))
    assert given, "the patterns found no reason: the code changed its way of naming them"
    assert given <= documented, f"dead-letter reasons missing from the reference: {sorted(given - documented)}"
    page = reference.dead_letters_page()
    for reason in documented:
        assert f"`{reason}`" in page


def test_every_metric_is_in_the_metrics_page():
    from prometheus_client import CollectorRegistry

    from stream_nb.verdicts.milter import milter_metrics
    from stream_nb.worker.metrics import WorkerMetrics

    page = reference.metrics_page()
    worker = WorkerMetrics()
    names = [family.name for family in worker.registry.collect()]
    names += [family.name for family in CollectorRegistry().collect()]
    registry = CollectorRegistry()
    milter_metrics(registry)
    names += [family.name for family in registry.collect()]
    assert len(names) > 15
    for name in names:
        assert f"`{name}" in page, name


def test_every_command_and_option_is_in_the_cli_page():
    import argparse

    from stream_nb.cli import build_parser

    page = reference.cli_page()
    commands = reference._subcommands(build_parser())
    assert {name for name, _, _ in commands} >= {"run", "demo", "replay", "inspect", "publish", "filter", "learn",
                                                   "milter", "kafka"}

    def check(command: str, parser: argparse.ArgumentParser, level: int) -> int:
        assert f"{'#' * level} `{command}`" in page
        seen = 1
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, line, sub in reference._subcommands(parser):
                    assert line, f"{command} {name}"  # every command says what it does
                    seen += check(f"{command} {name}", sub, level + 1)
                continue
            for flag in action.option_strings:
                assert flag in page, (command, flag)
            assert action.help, (command, action.option_strings or action.dest)  # and every argument
        return seen

    assert sum(check(f"stream-nb {name}", parser, 2) for name, _, parser in commands) >= 12