"""The `stream-nb` command line.

Each subcommand lives next to the code it drives and registers itself here through a
`register(subparsers)` function that sets `func` on its parser; this module only dispatches.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys

# Container allocations between collections of the young generation (CPython's default: 700).
# A stream allocates short-lived dicts, lists and tuples by the hundred thousand a second, and
# reference counting frees nearly all of them; collecting every 700 made the collector ~10% of a
# replay (Enron, medians of alternated runs) for nothing. 50,000 cycles of garbage at most wait.
YOUNG_GENERATION_THRESHOLD = 50_000

# Modules that contribute subcommands, in the order they appear in --help.
_COMMAND_MODULES = (
    "stream_nb.demo",
    "stream_nb.worker.cli",
    "stream_nb.replay.cli",
    "stream_nb.checkpoint.cli",
    "stream_nb.kafka.cli",
    "stream_nb.verdicts.filter",
    "stream_nb.verdicts.learn",
    "stream_nb.verdicts.milter",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stream-nb",
        description="Streaming, checkpointable naive Bayes over Kafka.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # Not written yet (the module or its package); any other missing module is a real error.
            if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
                continue
            raise
        module.register(subparsers)
    return parser


def tune_garbage_collector() -> None:
    """Collect the young generation less often (see YOUNG_GENERATION_THRESHOLD); the older
    generations keep their thresholds. What `stream-nb` does at start, for the benchmarks too."""
    young, middle, old = gc.get_threshold()
    if young and young < YOUNG_GENERATION_THRESHOLD:  # 0: collection is off; leave it so
        gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)


# How a shell reports a process ended by SIGPIPE (128 + 13): what `yes | head -1` gives `yes`.
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130  # 128 + SIGINT


def main(argv: list[str] | None = None) -> int:
    tune_garbage_collector()
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader gone away is still ours to notice
        return status
    except BrokenPipeError:
        # The reader of our output went away (`stream-nb replay ... | head -1`): stop writing and
        # end quietly, as Unix tools do. Both streams point to /dev/null from now on, so the
        # interpreter's own flush at exit finds no closed pipe to complain about.
        null = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(null, stream.fileno())
            except (OSError, ValueError):
                pass
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"\nstream-nb {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
