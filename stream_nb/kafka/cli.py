"""`stream-nb kafka start|stop|status`: a local broker, or a cluster, that outlives the command.

    stream-nb kafka start [--dir DIR] [--port N]   last line printed: bootstrap=127.0.0.1:<port>
    stream-nb kafka start --brokers 3 [--dir DIR]  a KRaft cluster; bootstrap=HOST:PORT,HOST:PORT,HOST:PORT
    stream-nb kafka start --broker ID              one node of the cluster back
    stream-nb kafka stop [--broker ID] [--kill]    the broker (cluster), or one node; --kill: SIGKILL
    stream-nb kafka status [--dir DIR]             exit 0 when every broker runs, 1 when not; a
                                                   cluster's status lists which partitions each leads

It also registers `stream-nb publish FILE --topic T` (stream_nb.kafka.publish).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from stream_nb.kafka import publish
from stream_nb.kafka.broker import KAFKA_VERSION, BrokerError, LocalKafkaBroker
from stream_nb.kafka.cluster import LocalKafkaCluster, is_cluster_directory

DEFAULT_DIR = Path(".kafka")
EXIT_NOT_RUNNING = 1
EXIT_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    kafka = subparsers.add_parser(
        "kafka",
        help="run a local Apache Kafka broker or cluster (resolved with Maven, run with Java 17+)",
        description=f"Run Apache Kafka {KAFKA_VERSION} on 127.0.0.1: one broker, or a KRaft cluster of several "
                    "(start --brokers N).",
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

    start = add_action("start", "start the broker or cluster in the background (or find it running)", _start)
    start.add_argument(
        "--port", type=int, default=None,
        help="client port of a single broker (default: the previous one if free, else any free port)",
    )
    start.add_argument(
        "--brokers", type=int, default=None, metavar="N",
        help="a KRaft cluster of N brokers, each also a controller (the directory must be new or hold "
             "that cluster)",
    )
    start.add_argument("--broker", type=int, default=None, metavar="ID", help="start one broker of the cluster")
    stop = add_action("stop", "stop the broker, the whole cluster or one of its brokers "
                              "(SIGTERM, then SIGKILL after a deadline)", _stop)
    stop.add_argument("--broker", type=int, default=None, metavar="ID", help="stop one broker of the cluster")
    stop.add_argument("--kill", action="store_true", help="SIGKILL at once: a crash, not a controlled shutdown")
    add_action("status", "exit 0 if every broker is running, 1 if not; lists the partitions each leads", _status)

    publish.register(subparsers)


def _fail(action: str, error: BrokerError) -> int:
    where = f" (log: {error.log_path})" if error.log_path else ""
    print(f"stream-nb kafka {action}: error: {error.summary}{where}", file=sys.stderr)
    return EXIT_ERROR


def _start(args: argparse.Namespace) -> int:
    if args.brokers is not None or args.broker is not None or is_cluster_directory(args.dir):
        if args.port is not None:
            print("stream-nb kafka start: error: --port is for a single broker; a cluster chooses its "
                  "ports once (see cluster.json)", file=sys.stderr)
            return EXIT_ERROR
        return _start_cluster(args)
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


def _start_cluster(args: argparse.Namespace) -> int:
    try:
        cluster = LocalKafkaCluster(args.dir, args.brokers if args.broker is None else None)
        if args.broker is not None:
            print(f"starting broker {args.broker} of the cluster in {cluster.directory} ...", file=sys.stderr)
            cluster.start_broker(args.broker)
        else:
            print(f"starting a Kafka {KAFKA_VERSION} cluster of {len(cluster.node_ids)} brokers in "
                  f"{cluster.directory} ...", file=sys.stderr)
            cluster.start()
    except BrokerError as error:
        return _fail("start", error)
    for node in cluster.status():
        print(f"broker {node.node_id}: {'running, pid ' + str(node.pid) if node.running else 'stopped'}, "
              f"{node.address}, log {node.directory / 'broker.log'}")
    print(f"bootstrap={cluster.bootstrap}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    if args.broker is not None or is_cluster_directory(args.dir):
        try:
            cluster = LocalKafkaCluster(args.dir)
            if args.broker is not None:
                stopped = [args.broker] if cluster.stop_broker(args.broker, kill=args.kill) else []
            else:
                stopped = cluster.stop(kill=args.kill)
        except BrokerError as error:
            return _fail("stop", error)
        how = "killed" if args.kill else "stopped"
        print(f"{how} broker{'s' if len(stopped) != 1 else ''} {', '.join(map(str, stopped))} of the cluster in "
              f"{cluster.directory}" if stopped else f"no broker of those asked runs in {cluster.directory}")
        return 0
    broker = LocalKafkaBroker(args.dir)
    try:
        stopped = broker.stop(kill=args.kill)
    except BrokerError as error:
        return _fail("stop", error)
    print(f"stopped the broker in {broker.directory}" if stopped else f"no broker running in {broker.directory}")
    return 0


def _status(args: argparse.Namespace) -> int:
    if is_cluster_directory(args.dir):
        return _cluster_status(args.dir)
    status = LocalKafkaBroker(args.dir).status()
    if status.running:
        print(f"running: pid {status.pid}, bootstrap={status.bootstrap}")
        return 0
    print(f"not running ({status.directory})")
    return EXIT_NOT_RUNNING


def _cluster_status(directory: Path) -> int:
    try:
        cluster = LocalKafkaCluster(directory)
        nodes = cluster.status()
    except BrokerError as error:
        return _fail("status", error)
    led: dict[int, dict[str, list[int]]] = {}
    if any(node.running for node in nodes):
        try:
            for (topic, partition), state in sorted(cluster.partition_leaders().items()):
                led.setdefault(state["leader"], {}).setdefault(topic, []).append(partition)
        except Exception as error:  # the status of the processes is still worth printing
            print(f"(partition leaders unknown: {error})", file=sys.stderr)
    for node in nodes:
        state = f"running, pid {node.pid}" if node.running else "stopped"
        topics = led.get(node.node_id, {})
        leads = "; ".join(f"{topic}[{','.join(map(str, partitions))}]" for topic, partitions in topics.items())
        count = sum(map(len, topics.values()))
        print(f"broker {node.node_id}: {state}, {node.address}, leads {count} partition{'' if count == 1 else 's'}"
              + (f": {leads}" if leads else ""))
    if leaderless := led.get(-1):
        print("no leader: " + "; ".join(f"{topic}[{','.join(map(str, p))}]" for topic, p in leaderless.items()))
    print(f"bootstrap={cluster.bootstrap}")
    return 0 if all(node.running for node in nodes) else EXIT_NOT_RUNNING
