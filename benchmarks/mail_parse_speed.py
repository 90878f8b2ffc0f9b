#!/usr/bin/env python
"""How fast parse_mail reads raw mail, against bogofilter's bulk rate on the same messages.

Every message of ../shared/data/spamassassin_2003.tar.gz (2,796 raw messages) is parsed by
`stream_nb.mail.parse_mail` and by the frozen original (tests/mail_reference, the standard
library's `email` tree and `html.parser` for every message): messages per CPU second, best of
--repeats passes in this one process. parse_mail runs its C extension (stream_nb.mail._native)
where it is built; STREAM_NB_NATIVE=0 measures the Python definitions.

bogofilter (the Debian package: `apt-get install bogofilter`; never a test dependency) runs
in bulk mode, one process per step, into a fresh database: register the ham (`-n -B`) and the
spam (`-s -B`), then classify every message (`-v -B`: a score line per message, as a replay
needs); medians of --repeats. Issue 23's speed
target for a raw-mail replay (parse + featurise + predict + learn) is twice bogofilter's
register-then-classify rate, n / (t_register + t_classify). Without bogofilter that part is
skipped with a message.

    .venv/bin/python benchmarks/mail_parse_speed.py
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = REPO.parent / "shared" / "data" / "spamassassin_2003.tar.gz"
HAM_FOLDER, SPAM_FOLDER = "easy-ham-2", "spam-2"

from stream_nb.mail import parse_mail  # noqa: E402


def load_corpus() -> list[tuple[str, bytes]]:
    """(folder, raw bytes) of every message, in archive order (as tests/corpora.py reads it)."""
    messages = []
    with tarfile.open(CORPUS) as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(".txt"):
                messages.append((member.name.split("/")[1], archive.extractfile(member).read()))
    return messages


def forget_seen_values() -> None:
    """Empty parse_mail's memos of recurring values (link hosts, registered domains, header
    parameters, parsed address lists), so that every pass reads the corpus as the first one
    does."""
    from stream_nb.mail.html import host_of_url, registered_domain
    from stream_nb.mail.parse import _params_of, _parsed_address

    for memo in (host_of_url, registered_domain, _params_of, _parsed_address):
        memo.cache_clear()


def parse_rate(parse, messages: list[bytes], repeats: int) -> float:
    """Messages per CPU second of `parse` over all messages, best of `repeats` passes (CPU
    time, so that other work on a shared machine counts for little), each from empty memos."""
    times = []
    for _ in range(repeats):
        forget_seen_values()
        started = time.process_time()
        for data in messages:
            parse(data)
        times.append(time.process_time() - started)
    return len(messages) / min(times)


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def write_messages(corpus: list[tuple[str, bytes]], directory: Path) -> dict[str, list[str]]:
    """Each message as a file, `directory/<folder>/<index>.eml` in archive order: the paths
    of each folder's files. bogofilter reads these; a replay may read the same directory."""
    files: dict[str, list[str]] = {HAM_FOLDER: [], SPAM_FOLDER: []}
    for index, (folder, data) in enumerate(corpus):
        path = directory / folder / f"{index:05d}.eml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files[folder].append(str(path))
    return files


def bogofilter_times(files: dict[str, list[str]], repeats: int) -> tuple[float, float]:
    """Median seconds of (registering every message, classifying every message), bulk mode, of
    the messages `write_messages` wrote (`files`), each attempt into a fresh database."""
    bogofilter = shutil.which("bogofilter")
    every = [path for folder in (HAM_FOLDER, SPAM_FOLDER) for path in files[folder]]
    register, classify = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for attempt in range(repeats):
            database = Path(scratch) / f"db{attempt}"
            database.mkdir()
            base = [bogofilter, "-d", str(database)]
            register.append(
                timed(base + ["-n", "-B", *files[HAM_FOLDER]])
                + timed(base + ["-s", "-B", *files[SPAM_FOLDER]])
            )
            classify.append(timed(base + ["-v", "-B", *every]))
    return statistics.median(register), statistics.median(classify)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-reference", action="store_true", help="skip the original parser")
    args = parser.parse_args()

    if not CORPUS.is_file():
        sys.exit(f"corpus not found at {CORPUS}")
    corpus = load_corpus()
    messages = [data for _, data in corpus]
    count = len(messages)
    megabytes = sum(map(len, messages)) / 1e6
    print(f"SpamAssassin 2003: {count:,} messages, {megabytes:.1f} MB")

    fast = parse_rate(parse_mail, messages, args.repeats)
    print(f"parse_mail:                         {fast:8,.0f} msgs/s")
    if not args.no_reference:
        from tests.mail_reference import parse_mail_reference

        reference = parse_rate(parse_mail_reference, messages, args.repeats)
        print(f"parse_mail_reference (original):    {reference:8,.0f} msgs/s")
        print(f"speed-up:                           {fast / reference:8.2f}x")

    if shutil.which("bogofilter") is None:
        print("bogofilter not installed (apt-get install bogofilter): its rates are skipped")
        return
    with tempfile.TemporaryDirectory() as scratch:
        register, classify = bogofilter_times(write_messages(corpus, Path(scratch)), args.repeats)
    bulk = count / (register + classify)
    print(f"bogofilter -B register:             {count / register:8,.0f} msgs/s")
    print(f"bogofilter -B classify:             {count / classify:8,.0f} msgs/s")
    print(f"bogofilter register then classify:  {bulk:8,.0f} msgs/s")
    print(f"issue 23 replay target (2x that):   {2 * bulk:8,.0f} msgs/s")
    print(f"parse_mail / target:                {fast / (2 * bulk):8.2f}")


if __name__ == "__main__":
    main()
