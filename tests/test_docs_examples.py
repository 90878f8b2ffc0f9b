"""The examples of README.md and docs/ against the code. Every fenced `python` block is run and
every `toml` block parsed; a `sh` block is run when the line before it is `<!-- run -->`, and
otherwise must say why it is not (`<!-- not run: needs a Kafka broker -->`); and every
`stream-nb` command in any `sh` block, run or not, is parsed by the real command line, so a
renamed command or option fails here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(run|not run:\s*(.+?))\s*-->\s*$")


def blocks():
    """(file, line, language, marker or None, code) of every fenced block."""
    found = []
    for path in SOURCES:
        lines = path.read_text(encoding="utf-8").split("\n")
        i = 0
        while i < len(lines):
            opening = FENCE.match(lines[i])
            if not opening or not opening.group(2):
                i += 1
                continue
            indent, language = opening.group(1), opening.group(2)
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            code = "\n".join(line[len(indent):] for line in lines[i + 1:end])
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            mark = MARK.match(before)
            found.append((path.relative_to(ROOT), i + 1, language, mark, code))
            i = end + 1
    return found


BLOCKS = blocks()


def ids(block):
    return f"{block[0]}:{block[1]}"


def test_the_examples_are_found():
    languages = {block[2] for block in BLOCKS}
    assert {"python", "sh"} <= languages
    assert any(block[3] and block[3].group(1) == "run" for block in BLOCKS if block[2] == "sh")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "python"], ids=ids)
def test_python_examples_run(block, tmp_path, monkeypatch):
    path, line, _, mark, code = block
    if mark and mark.group(2):
        pytest.skip(mark.group(2))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{path}:{line}", "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "sh"], ids=ids)
def test_sh_examples_run_or_say_why_not(block, tmp_path):
    path, line, _, mark, code = block
    assert mark, f"{path}:{line}: a sh example must be marked <!-- run --> or <!-- not run: why -->"
    if mark.group(2):
        return  # its commands are still parsed below
    # run in a scratch directory that sees the project's .venv and configs as a checkout does
    for name in (".venv", "configs"):
        (tmp_path / name).symlink_to(ROOT / name)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "STREAM_NB_BOOTSTRAP": ""})
    assert done.returncode == 0, f"{path}:{line}\n{done.stdout}\n{done.stderr}"


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


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "sh"], ids=ids)
def test_every_stream_nb_command_in_an_example_parses(block, capsys):
    from stream_nb.cli import build_parser

    path, line, _, _, code = block
    for argv in commands(code):
        try:
            build_parser().parse_args(argv)
        except SystemExit as stop:
            pytest.fail(f"{path}:{line}: `stream-nb {shlex.join(argv)}` is refused by the command line "
                        f"(exit {stop.code}): {capsys.readouterr().err.strip()}")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "toml"], ids=ids)
def test_toml_examples_are_toml(block):
    import tomllib

    path, line, _, _, code = block
    tomllib.loads(code)  # a configuration excerpt as a file would hold it
