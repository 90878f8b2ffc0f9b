"""The examples of README.md and docs/: how they are found, what they are given, how they run.

A fenced block is marked by the line before it:

- `<!-- run -->`: a `sh` block the suite runs as it is (tests/test_docs_examples.py);
- `<!-- run: kafka, corpus.tsv -->`: run too, given what the page says its reader has (NEEDS,
  below); with `kafka`, it runs against the suite's broker (tests/integration/
  test_docs_examples_kafka.py, which runs a page's Kafka blocks in order in one directory);
- `<!-- not run: why -->`: not run, the reason naming what the suite cannot start; its
  `stream-nb` commands are still parsed;
- `<!-- output -->` before a `text` block that follows a run block: what that block prints.
  Each of its lines must be a line of the output (stdout and stderr together), in that order;
  `...` stands for any text, so a line may leave out what changes from run to run (times,
  rates, ids), and a run of spaces for any run of spaces.

A worker runs until it is stopped: a `stream-nb run` without `--stop-when-idle` is run with
`--stop-when-idle 3` (it checkpoints and exits once it has read everything and 3 s passed
without a record; 12 s in the background), and a block ends by waiting for the workers it
started in the background.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import random
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(run|not run|output)\s*(?::\s*(.+?))?\s*-->\s*$")
WORKER_IDLE_S = 12  # long enough for the `publish` commands after a background worker, on a busy machine


@dataclass
class Block:
    path: Path  # relative to ROOT
    line: int  # of the opening fence
    language: str
    mark: str | None  # "run", "not run" or "output"
    detail: str | None  # the reason of "not run", the needs of "run"
    code: str
    output: str | None = None  # the text of the `<!-- output -->` block that follows it

    @property
    def needs(self) -> list[str]:
        if self.mark != "run" or not self.detail:
            return []
        return [need.strip() for need in self.detail.split(",") if need.strip()]

    @property
    def kafka(self) -> bool:
        return "kafka" in self.needs

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def blocks() -> list[Block]:
    """Every fenced block with a language, an output block attached to the block before it."""
    found: list[Block] = []
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
            block = Block(path.relative_to(ROOT), i + 1, language, mark and mark.group(1),
                          mark and mark.group(2), code)
            if block.mark == "output":
                owner = found[-1] if found and found[-1].path == block.path else None
                assert owner is not None and owner.mark == "run" and owner.output is None, \
                    f"{block}: an output block must follow a run block"
                owner.output = code
            found.append(block)
            i = end + 1
    return found


# ---------------------------------------------------------------------------------------------
# What a reader has: each need, made in the scratch directory (HOME is its home/)


@functools.lru_cache(maxsize=None)
def _spamassassin(count_per_folder: int, skip: int = 0) -> dict[str, list[tuple[str, bytes]]]:
    """The first messages (after `skip`) of each SpamAssassin 2003 folder, (name, bytes), in
    archive order."""
    from corpora import spamassassin_2003_path

    folders: dict[str, list[tuple[str, bytes]]] = {"spam-2": [], "easy-ham-2": []}
    seen = {name: 0 for name in folders}
    with tarfile.open(spamassassin_2003_path()) as archive:
        for member in archive:
            if not (member.isfile() and member.name.endswith(".txt")):
                continue
            folder = member.name.split("/")[1]
            if folder not in folders or len(folders[folder]) == count_per_folder:
                continue
            seen[folder] += 1
            if seen[folder] > skip:
                folders[folder].append((member.name.rsplit("/", 1)[1], archive.extractfile(member).read()))
            if all(len(kept) == count_per_folder for kept in folders.values()):
                break
    return folders


def _mail_corpus(directory: Path) -> None:
    """~/mail-corpus: Junk/ and INBOX/, 40 messages each (SpamAssassin 2003's first spams and hams)."""
    folders = _spamassassin(40)
    for folder, name in (("spam-2", "Junk"), ("easy-ham-2", "INBOX")):
        (directory / name).mkdir(parents=True)
        for file, raw in folders[folder]:
            (directory / name / file).write_bytes(raw)


def _maildir(directory: Path) -> None:
    """~/Maildir: 6 new hams in new/, 6 read ones in cur/ and one in tmp/ (being delivered)."""
    hams = _spamassassin(13, skip=40)["easy-ham-2"]
    for sub, mails in (("new", hams[:6]), ("cur", hams[6:12]), ("tmp", hams[12:])):
        (directory / sub).mkdir(parents=True)
        for file, raw in mails:
            (directory / sub / file).write_bytes(raw)


def _message(path: Path) -> None:
    """message: one spam that is not in ~/mail-corpus."""
    path.write_bytes(_spamassassin(1, skip=40)["spam-2"][0][1])


def _corpus_tsv(path: Path) -> None:
    """corpus.tsv: the first 300 messages of the SMS Spam Collection, label<TAB>text."""
    from corpora import load_sms_spam

    path.write_text("".join(f"{label}\t{text}\n" for label, text in load_sms_spam()[:300]), encoding="utf-8")


def _mail_jsonl(path: Path) -> None:
    """mail.jsonl: 240 SpamAssassin messages in one shuffled order (seed 1), each the mail of
    one of four users ("key"), with its label."""
    folders = _spamassassin(120)
    mails = [("spam", raw) for _, raw in folders["spam-2"]] + [("ham", raw) for _, raw in folders["easy-ham-2"]]
    random.Random(1).shuffle(mails)
    with path.open("w", encoding="utf-8") as out:
        for i, (label, raw) in enumerate(mails):
            event = {"id": f"m{i}", "key": f"user{i % 4}@example.org", "label": label,
                     "mail_base64": base64.b64encode(raw).decode("ascii")}
            out.write(json.dumps(event) + "\n")


def iris_split():
    """Seed 001's Iris protocol: scikit-learn's copy of Iris (it ships in the package) split by
    train_test_split(test_size=0.5, random_state=0); (X_train, X_test, y_train, y_test)."""
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    X, y = load_iris(return_X_y=True)
    return train_test_split(X, y, test_size=0.5, random_state=0)


def _iris_jsonl(path: Path) -> None:
    """iris.jsonl: seed 001's train half labeled, then its test half unlabeled."""
    X_train, X_test, y_train, _ = iris_split()
    lines = [{"id": f"train{i}", "features": {str(j): float(v) for j, v in enumerate(row)}, "label": int(label)}
             for i, (row, label) in enumerate(zip(X_train, y_train))]
    lines += [{"id": f"test{i}", "features": {str(j): float(v) for j, v in enumerate(row)}}
              for i, row in enumerate(X_test)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _mail_toml(path: Path) -> None:
    """mail.toml: the shipped configs/mail.toml, where an installed filter keeps its configuration."""
    path.write_text((ROOT / "configs" / "mail.toml").read_text(encoding="utf-8"), encoding="utf-8")


def _shared_archive() -> Path:
    """spamassassin_2003.tar.gz: the archive itself, as ../shared/data holds it."""
    from corpora import spamassassin_2003_path

    return spamassassin_2003_path()


def _mail_checkpoint(scratch: Path) -> None:
    """checkpoints/mail: a worker's checkpoint of mail.toml, made as README.md makes one (a
    catch-up run over ~/mail-corpus published to its labeled topic; needs the broker)."""
    prepare(scratch, ["~/mail-corpus", "mail.toml"])
    environment = {**os.environ, "HOME": str(scratch / "home")}
    environment.pop("STREAM_NB_BOOTSTRAP", None)
    stream_nb = str(ROOT / ".venv" / "bin" / "stream-nb")
    for argv in ([stream_nb, "publish", "home/mail-corpus", "--topic", "mail-labeled", "--label-folder", "spam=Junk",
                  "--label-folder", "ham=INBOX"],
                 [stream_nb, "run", "--config", "mail.toml", "--stop-when-idle", "2"]):
        done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=120, env=environment)
        assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


NEEDS = {
    "~/mail-corpus": lambda scratch: _mail_corpus(scratch / "home" / "mail-corpus"),
    "~/Maildir": lambda scratch: _maildir(scratch / "home" / "Maildir"),
    "message": lambda scratch: _message(scratch / "message"),
    "corpus.tsv": lambda scratch: _corpus_tsv(scratch / "corpus.tsv"),
    "mail.jsonl": lambda scratch: _mail_jsonl(scratch / "mail.jsonl"),
    "iris.jsonl": lambda scratch: _iris_jsonl(scratch / "iris.jsonl"),
    "spamassassin_2003.tar.gz": lambda scratch: (scratch / "spamassassin_2003.tar.gz").symlink_to(_shared_archive()),
    "mail.toml": lambda scratch: _mail_toml(scratch / "mail.toml"),
    "checkpoints/mail": _mail_checkpoint,
}


def prepare(scratch: Path, needs: list[str]) -> None:
    """A scratch directory as a checkout after `make setup` (.venv, configs), with the needs
    a block names that it does not have yet."""
    for name in (".venv", "configs"):
        if not (scratch / name).exists():
            (scratch / name).symlink_to(ROOT / name)
    (scratch / "home").mkdir(exist_ok=True)
    for need in needs:
        if need == "kafka":
            continue
        assert need in NEEDS, f"unknown need {need!r} (known: kafka, {', '.join(NEEDS)})"
        target = scratch / need.replace("~/", "home/")
        if not target.exists():
            NEEDS[need](scratch)


# ---------------------------------------------------------------------------------------------
# Running a block and reading its output


def runnable(code: str) -> str:
    """The block as bash runs it: continuation lines joined, each `stream-nb run` given
    --stop-when-idle unless it has one (3 s, or 12 s for one started in the background, as
    the `publish` commands after it start meanwhile), and a `wait` for the background ones at
    the end."""
    lines = []
    for line in re.sub(r"\\\n\s*", " ", code).split("\n"):
        command = line.split("#")[0]
        if re.search(r"stream-nb run\b", command) and "--stop-when-idle" not in command:
            idle = WORKER_IDLE_S if command.rstrip().endswith("&") else 3
            line = re.sub(r"(stream-nb run)\b", rf"\1 --stop-when-idle {idle}", line, count=1)
        lines.append(line)
    return "\n".join(lines) + "\nwait\n"


def run_block(block: Block, scratch: Path, env: dict[str, str], timeout: float = 240) -> str:
    """Run `block` in `scratch`; its output (stdout and stderr as they came). Fails on a
    non-zero exit or an output that is not the one the page shows."""
    environment = {**os.environ, **env, "HOME": str(scratch / "home"),
                   "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", runnable(block.code)], cwd=scratch,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=environment)
    assert done.returncode == 0, f"{block}: exit {done.returncode}\n{done.stdout}"
    if block.output is not None:
        check_output(block, done.stdout)
    return done.stdout


def line_pattern(expected: str) -> re.Pattern:
    """`expected` as a pattern: `...` any text, a run of spaces any run of spaces."""
    parts = [r"\s+".join(map(re.escape, part.split())) for part in expected.strip().split("...")]
    return re.compile(".*".join(parts))


def check_output(block: Block, printed: str) -> None:
    """Each line of the block's output text is a line of `printed`, in order."""
    lines = [line.rstrip() for line in printed.split("\n")]
    at = 0
    for expected in block.output.split("\n"):
        if not expected.strip():
            continue
        pattern = line_pattern(expected)
        found = next((i for i in range(at, len(lines)) if pattern.fullmatch(lines[i].strip())), None)
        assert found is not None, (f"{block}: the page shows the line\n    {expected.strip()}\nwhich the "
                                   f"command did not print (after line {at} of its output):\n{printed}")
        at = found + 1
