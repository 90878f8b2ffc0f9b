#!/usr/bin/env python
"""The soak test of the suite (tests/integration/test_soak.py) on a longer stream: a worker
with configs/spam.toml and [model] max_features = 50,000 on SMS messages that each bring two
words never seen before, killed once in the middle and restarted. Prints the series (labeled
offset, checkpoint bytes, vocabulary, worker RSS) and checks what the test checks: the same
state as a replay of the log, checkpoints and memory flat once the budget is reached.

    .venv/bin/python benchmarks/soak.py                 # 2,000,000 events, ~10 minutes quiet
    .venv/bin/python benchmarks/soak.py --events 600000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="events in the stream (default 2,000,000)")
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
               "tests/integration/test_soak.py"]
    return subprocess.call(command, cwd=REPO, env={**os.environ, "STREAM_NB_SOAK_EVENTS": str(args.events)})


if __name__ == "__main__":
    sys.exit(main())
