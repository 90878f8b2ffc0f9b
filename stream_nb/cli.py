"""The `stream-nb` command line.

Each subcommand lives next to the code it drives and registers itself here through a
`register(subparsers)` function that sets `func` on its parser; this module only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute subcommands, in the order they appear in --help.
_COMMAND_MODULES = (
    "stream_nb.demo",
    "stream_nb.worker.cli",
    "stream_nb.replay.cli",
    "stream_nb.checkpoint.cli",
    "stream_nb.kafka.cli",
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
