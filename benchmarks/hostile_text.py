#!/usr/bin/env python
"""Hostile text at the largest message a worker takes: how long configs/spam.toml featurises it.

Every family of tests/hostile.py is made at --chars characters (default: the worker's default
kafka.max_message_bytes, 1,000,000; these texts are one byte per character, "ā" two), featurised
by configs/spam.toml's featuriser with the C extension and without it, medians of --repeats.
Beside them, the same length of ordinary text (SMS messages joined by spaces) and, for the worst
family, the patterns as first written (the definition searched as a regex) at 16 KB and 64 KB:
the growth between the two shows the quadratic work the linear finder removed.

    .venv/bin/python benchmarks/hostile_text.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
SMS = REPO.parent / "shared" / "data" / "sms_spam_collection" / "SMSSpamCollection"

from stream_nb.config import load_config  # noqa: E402

from hostile import FAMILIES  # noqa: E402  (tests/hostile.py: the families the tests use)


def median_seconds(work, text: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work(text)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def ordinary_text(chars: int) -> str:
    if not SMS.exists():
        return ("the quick brown fox jumps over the lazy dog " * (chars // 44 + 1))[:chars]
    lines = [line.partition("\t")[2] for line in SMS.read_text(encoding="utf-8").splitlines()]
    text = " ".join(lines)
    return (text * (chars // len(text) + 1))[:chars]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    featurizer = load_config(REPO / "configs" / "spam.toml", []).build_featurizer()
    python_path = load_config(REPO / "configs" / "spam.toml", []).build_featurizer()
    python_path._native_plan = None
    paths = {"C": featurizer, "Python": python_path}
    if featurizer._native_plan is None:
        print("(the C featuriser is not built: both columns are the Python path)")

    rows = [("ordinary text (SMS)", ordinary_text(args.chars))]
    rows += [(family, make_text(args.chars)) for family, make_text in FAMILIES.items()]
    print(f"configs/spam.toml featurising one text of {args.chars:,} characters, median of {args.repeats}")
    print(f"{'text':32s} {'C':>10s} {'Python':>10s}")
    worst = ("", 0.0)
    for name, text in rows:
        seconds = {path: median_seconds(lambda t, f=f: f.transform_sparse([t]), text, args.repeats)
                   for path, f in paths.items()}
        print(f"{name:32s} {seconds['C'] * 1000:8.1f}ms {seconds['Python'] * 1000:8.1f}ms", flush=True)
        if name != rows[0][0] and max(seconds.values()) > worst[1]:
            worst = (name, max(seconds.values()))
    print(f"worst family: {worst[0]}, {worst[1] * 1000:.1f} ms at {args.chars:,} characters")

    definition = featurizer._specials.definition
    make_text = FAMILIES["dots_before_scheme"]
    as_written = {size: median_seconds(lambda t: list(definition.finditer(t)), make_text(size), 1)
                  for size in (16_000, 64_000)}
    growth = as_written[64_000] / as_written[16_000]
    projected = as_written[64_000] * (args.chars / 64_000) ** 2
    print(f"the patterns as first written, dots_before_scheme: 16 KB {as_written[16_000]:.2f} s, "
          f"64 KB {as_written[64_000]:.2f} s ({growth:.1f}x for 4x the text); "
          f"{args.chars:,} characters projected {projected / 60:.0f} min")


if __name__ == "__main__":
    main()
