"""The examples of README.md and docs/ against the code (the markers: tests/docs_support.py).
Every fenced `python` block is run and every `toml` block parsed; a `sh` block marked
`<!-- run -->` is run here, one marked `<!-- run: kafka, ... -->` by
tests/integration/test_docs_examples_kafka.py, and any other must say why it is not run
(`<!-- not run: ... -->`); and every `stream-nb` command in any `sh` block, run or not, is parsed
by the real command line, so a renamed command or option fails here."""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
from pathlib import Path

import pytest
from docs_support import (
    ROOT,
    SOURCES,
    Block,
    blocks,
    check_output,
    iris_split,
    line_pattern,
    prepare,
    run_block,
)

BLOCKS = blocks()


def ids(block):
    return str(block)


def test_the_examples_are_found():
    languages = {block.language for block in BLOCKS}
    assert {"python", "sh", "toml"} <= languages
    sh = [block for block in BLOCKS if block.language == "sh"]
    assert any(block.mark == "run" and not block.kafka for block in sh)
    assert any(block.kafka for block in sh)
    assert any(block.output for block in sh)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python"], ids=ids)
def test_python_examples_run(block, tmp_path, monkeypatch):
    if block.mark == "not run":
        pytest.skip(block.detail)
    monkeypatch.chdir(tmp_path)
    tree = ast.parse(block.code)
    shown = dict(shown_values(block.code, tree))
    namespace = {"__name__": "__docs__"}
    for statement in tree.body:
        if statement in shown:  # an expression whose value the page shows: evaluated and compared
            value = eval(compile(ast.Expression(statement.value), str(block), "eval"), namespace)
            assert line_pattern(shown[statement]).fullmatch(repr(value)), \
                f"{block}: the page shows {shown[statement]} for line {statement.lineno}, the code gives {value!r}"
        else:
            exec(compile(ast.Module([statement], type_ignores=[]), str(block), "exec"), namespace)


def shown_values(code: str, tree: ast.Module):
    """(statement, value) of each expression statement followed by a comment that shows its value
    (`model.predict_one(x)   # 'spam'`, or the comment on the next line): a comment opening as a
    Python value does ({, [, (, a quote, a digit); `...` in it stands for any text."""
    lines = code.split("\n")
    for statement in tree.body:
        if not isinstance(statement, ast.Expr) or isinstance(statement.value, ast.Constant):
            continue
        comment = lines[statement.end_lineno - 1][statement.end_col_offset:].strip()
        if not comment and statement.end_lineno < len(lines):
            comment = lines[statement.end_lineno].strip()
        value = comment[1:].strip() if comment.startswith("#") else ""
        if value[:1] and value[0] in "{[('\"-0123456789":
            yield statement, value


def test_a_shown_value_that_the_code_does_not_give_fails():
    code = "x = {'ham': 0.25}\nx   # {'ham': 0.333...}\n"
    (statement, value), = shown_values(code, ast.parse(code))
    assert value == "{'ham': 0.333...}" and not line_pattern(value).fullmatch(repr({"ham": 0.25}))
    assert line_pattern(value).fullmatch(repr({"ham": 1 / 3}))


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "sh"], ids=ids)
def test_sh_examples_run_or_say_why_not(block, tmp_path):
    assert block.mark in ("run", "not run"), \
        f"{block}: a sh example must be marked <!-- run -->, <!-- run: needs --> or <!-- not run: why -->"
    if block.mark == "not run":
        assert block.detail, f"{block}: say why it is not run"
        return  # its commands are still parsed below
    if block.kafka:
        return  # tests/integration/test_docs_examples_kafka.py runs it
    prepare(tmp_path, block.needs)
    run_block(block, tmp_path, {"STREAM_NB_BOOTSTRAP": ""})
    if block.path in AFTER:
        AFTER[block.path](tmp_path)


def iris_predictions(scratch: Path) -> None:
    """models.md: the Iris replay "gives 68 of 75 predictions right" (its test half, unlabeled in
    iris.jsonl, is predicted into r/predictions.jsonl)."""
    truth = iris_split()[3].tolist()
    predictions = [json.loads(line) for line in (scratch / "r" / "predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in predictions] == [f"test{i}" for i in range(75)]
    assert sum(p["label"] == label for p, label in zip(predictions, truth)) == 68


# what a page's run example leaves behind, checked against what the page says of it
AFTER = {Path("docs/models.md"): iris_predictions}


def test_each_check_of_what_an_example_leaves_has_its_example():
    run = {block.path for block in BLOCKS if block.language == "sh" and block.mark == "run" and not block.kafka}
    assert set(AFTER) <= run


def test_the_output_check_fails_on_a_line_not_printed():
    block = Block(Path("page.md"), 1, "sh", "run", None, "",
                  output="events           6 (5 labeled)\nthroughput       ... events/s ...")
    check_output(block, "events           6 (5 labeled)\nthroughput       2,144 events/s (featurise)\n")
    with pytest.raises(AssertionError, match="did not print"):
        check_output(block, "events           7 (5 labeled)\nthroughput       2,144 events/s (featurise)\n")
    with pytest.raises(AssertionError, match="did not print"):  # in order
        check_output(block, "throughput       2,144 events/s (featurise)\nevents           6 (5 labeled)\n")


def commands(code: str):
    """The argv of each `stream-nb` command in a sh block (comment lines included: examples
    written as comments are examples too)."""
    joined = re.sub(r"\\\n\s*", " ", code)
    for text in joined.split("\n"):
        text = re.sub(r"^\s*#\s*\|?\s*", "", text)
        if "stream-nb" not in text:
            continue
        lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        starts = [i for i, token in enumerate(tokens) if token.endswith("stream-nb")]
        for start in starts:
            argv = []
            for token in tokens[start + 1:]:
                if token and set(token) <= set("|&;<>"):
                    break
                argv.append(token)
            yield argv


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "sh"], ids=ids)
def test_every_stream_nb_command_in_an_example_parses(block, capsys):
    from stream_nb.cli import build_parser

    for argv in commands(block.code):
        try:
            build_parser().parse_args(argv)
        except SystemExit as stop:
            pytest.fail(f"{block}: `stream-nb {shlex.join(argv)}` is refused by the command line "
                        f"(exit {stop.code}): {capsys.readouterr().err.strip()}")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "toml"], ids=ids)
def test_toml_examples_are_toml(block):
    import tomllib

    tomllib.loads(block.code)  # a configuration excerpt as a file would hold it


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "yaml"], ids=ids)
def test_yaml_examples_are_yaml(block):
    import yaml  # PyYAML comes with mkdocs (make docs)

    assert yaml.safe_load(block.code)


def test_every_example_is_of_a_language_checked_here():
    """A shell example fenced as `bash` or `console` would be neither run nor parsed."""
    assert {block.language for block in BLOCKS} <= {"python", "sh", "toml", "yaml", "text"}


def inline_commands():
    """(page, command) of every `stream-nb ...` in a page's prose (code spans, fences left out)."""
    for path in SOURCES:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for found in re.finditer(r"`((?:\.venv/bin/)?stream-nb\s[^`]+)`", text):
            yield path.relative_to(ROOT), " ".join(found.group(1).split())


def subcommand_parser(parser, words):
    """The parser of the deepest subcommand `words` names (`kafka start`), and the words left."""
    while words:
        choices = next((action.choices for action in parser._actions
                        if isinstance(action, argparse._SubParsersAction)), None)
        if not choices or words[0] not in choices:
            break
        parser, words = choices[words[0]], words[1:]
    return parser, words


@pytest.mark.parametrize("page,command", sorted(set(inline_commands())), ids=lambda value: str(value)[:60])
def test_every_option_of_a_command_in_the_prose_exists(page, command):
    """A command quoted in the prose is often a fragment (`stream-nb replay --topic`), so it is
    not parsed whole; but every option it names must be one of its command's."""
    from stream_nb.cli import build_parser

    words = shlex.split(command)[1:]
    if words and words[0].isupper():
        return  # a placeholder (`stream-nb COMMAND --help`), no command of its own
    parser, rest = subcommand_parser(build_parser(), words)
    assert parser.prog != "stream-nb" or not rest, f"{page}: `{command}` names no command"
    known = {option for action in parser._actions for option in action.option_strings}
    named = {word.strip("[]").split("=")[0] for word in rest if word.strip("[]").startswith("-")}
    assert named <= known, f"{page}: `{command}`: {sorted(named - known)} are not options of `{parser.prog}`"


def benchmark_options(script: Path) -> set[str]:
    """The options a benchmark script's parser defines, read from its source (the scripts are
    not imported: some import what only a benchmark needs)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            found |= {arg.value for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("-")}
    return found


def benchmark_mentions():
    """(page, script, options) of each line naming benchmarks/NAME.py: the options are those in
    the line's code spans after that name and before the next script's."""
    for path in SOURCES:
        for line in path.read_text(encoding="utf-8").split("\n"):
            spans = re.split(r"(benchmarks/[a-z_]+\.py)", line)
            for i in range(1, len(spans), 2):
                # the rest of the name's own code span, then the code spans after it that are options
                own, _, after = spans[i + 1].partition("`")
                code = " ".join([own, *(span for span in re.findall(r"`([^`]*)`", after) if span.startswith("-"))])
                options = set(re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", code))
                yield path.relative_to(ROOT), spans[i], options


def test_every_benchmark_named_in_the_docs_exists_with_the_options_named_and_each_has_its_row():
    mentions = list(benchmark_mentions())
    assert len({script for _, script, _ in mentions}) >= 20
    for page, script, options in mentions:
        assert (ROOT / script).is_file(), f"{page}: {script} does not exist"
        missing = options - benchmark_options(ROOT / script) - {"-h", "--help"}
        assert not missing, f"{page}: {script} has no option {sorted(missing)}"
    table = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        assert f"benchmarks/{script.name}" in table, f"docs/benchmarks.md does not say how to run {script.name}"
