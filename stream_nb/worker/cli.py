"""`stream-nb run --config FILE`: the worker, in the foreground."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from stream_nb.checkpoint import CheckpointError, FingerprintMismatch
from stream_nb.config import ConfigError, with_bootstrap
from stream_nb.kafka.clients import KafkaSetupError
from stream_nb.kafka.discovery import NoBroker, check_reachable


EXIT_FENCED = 3  # a newer worker with the same instance id took over


def register(subparsers) -> None:
    run = subparsers.add_parser("run", help="run the worker: learn, predict, publish, checkpoint")
    run.add_argument("--config", type=Path, required=True, help="TOML configuration (see configs/spam.toml)")
    run.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override one configuration key (repeatable)")
    run.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                     help="the broker (default: $STREAM_NB_BOOTSTRAP, else the one `stream-nb kafka start` runs "
                          "in ./.kafka, else kafka.bootstrap_servers)")
    run.add_argument("--stop-when-idle", type=float, default=None, metavar="SECONDS",
                     help="checkpoint and exit once caught up and this long without a message (catch-up runs, tests)")
    run.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    run.set_defaults(func=run_worker)


def run_worker(args) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    # kafka-python reports every failed connection attempt; our own lines say what matters
    # (one line for an unreachable broker, a warning per rewind), its own only at DEBUG.
    kafka_logger = logging.getLogger("kafka")
    kafka_logger.setLevel(logging.DEBUG if args.log_level == "DEBUG" else logging.CRITICAL)
    from stream_nb.worker.loop import Worker  # imports kafka-python only when needed

    from stream_nb.worker.labeled import LabeledLogError
    from stream_nb.worker.outputs import Fenced

    try:
        config, bootstrap = with_bootstrap(args.config, args.set, args.bootstrap)
        check_reachable(bootstrap)
        logging.getLogger("stream_nb.worker").info("broker %s", bootstrap)
        worker = Worker(config)
        worker.install_signal_handlers()
        worker.start()
    except (ConfigError, NoBroker, KafkaSetupError, FingerprintMismatch, CheckpointError, LabeledLogError) as error:
        print(f"stream-nb run: {error}", file=sys.stderr)
        return 2
    if args.log_level != "DEBUG":
        kafka_logger.setLevel(logging.ERROR)
    try:
        worker.run(stop_when_idle_s=args.stop_when_idle)
    except (LabeledLogError, CheckpointError) as error:  # a partition added under thick-threshold; the last checkpoint
        print(f"stream-nb run: {error}", file=sys.stderr)
        return 2
    except Fenced as error:
        print(f"stream-nb run: {error}", file=sys.stderr)
        return EXIT_FENCED
    return 0
