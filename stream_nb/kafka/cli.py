"""`stream-nb kafka start|stop|status`: a local broker that outlives the command.

    stream-nb kafka start [--dir DIR] [--port N]   last line printed: bootstrap=127.0.0.1:<port>
    stream-nb kafka stop [--dir DIR]
    stream-nb kafka status [--dir DIR]             exit 0 when running, 1 when not

It also registers `stream-nb publish FILE --topic T` (stream_nb.kafka.publish).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from stream_nb.kafka import publish
from stream_nb.kafka.broker import KAFKA_VERSION, BrokerError, LocalKafkaBroker

DEFAULT_DIR = Path(".kafka")
EXIT_NOT_RUNNING = 1
EXIT_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    kafka = subparsers.add_parser(
        "kafka",
        help="run a local Apache Kafka broker (resolved with Maven, run with Java 17+)",
        description=f"Run a single-node Apache Kafka {KAFKA_VERSION} broker on 127.0.0.1.",
    )
    actions = kafka.add_subparsers(dest="kafka_command", metavar="ACTION", required=True)

    def add_action(
        name: str, help_text: str, func: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text, description=help_text)
        parser.add_argument(
            "--dir", type=Path, default=DEFAULT_DIR,
            help="the broker's directory: config, data, log, state (default: ./.kafka)",
        )
        parser.set_defaults(func=func)
        return parser

    start = add_action("start", "start the broker in the background (or find it running)", _start)
    start.add_argument(
        "--port", type=int, default=None,
        help="client port (default: the previous one if free, else any free port)",
    )
    add_action("stop", "stop the broker (SIGTERM, then SIGKILL after a deadline)", _stop)
    add_action("status", "exit 0 if the broker is running, 1 if not", _status)

    publish.register(subparsers)


def _fail(action: str, error: BrokerError) -> int:
    where = f" (log: {error.log_path})" if error.log_path else ""
    print(f"stream-nb kafka {action}: error: {error.summary}{where}", file=sys.stderr)
    return EXIT_ERROR


def _start(args: argparse.Namespace) -> int:
    broker = LocalKafkaBroker(args.dir, port=args.port)
    was_running = broker.is_running()
    if not was_running:
        print(f"starting Kafka {KAFKA_VERSION} in {broker.directory} ...", file=sys.stderr)
    try:
        broker.start()
    except BrokerError as error:
        return _fail("start", error)
    status = broker.status()
    verb = "already running" if was_running else "running"
    print(f"Kafka {KAFKA_VERSION} {verb}: pid {status.pid}, log {broker.log_path}")
    print(f"bootstrap={broker.bootstrap}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    broker = LocalKafkaBroker(args.dir)
    try:
        stopped = broker.stop()
    except BrokerError as error:
        return _fail("stop", error)
    print(f"stopped the broker in {broker.directory}" if stopped else f"no broker running in {broker.directory}")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = LocalKafkaBroker(args.dir).status()
    if status.running:
        print(f"running: pid {status.pid}, bootstrap={status.bootstrap}")
        return 0
    print(f"not running ({status.directory})")
    return EXIT_NOT_RUNNING
