"""`stream-nb run --config FILE`: the worker, in the foreground."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path

from stream_nb.checkpoint import CheckpointError, FingerprintMismatch
from stream_nb.config import ConfigError, with_bootstrap
from stream_nb.kafka.clients import KafkaSetupError
from stream_nb.kafka.discovery import NoBroker, check_reachable
from stream_nb.worker import outage

EXIT_FENCED = 3  # a newer worker with the same instance id took over


def register(subparsers) -> None:
    run = subparsers.add_parser("run", help="run the worker: learn, predict, publish, checkpoint")
    run.add_argument("--config", type=Path, required=True, help="TOML configuration (see configs/spam.toml)")
    run.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override one configuration key (repeatable)")
    run.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                     help="the broker (default: $STREAM_NB_BOOTSTRAP, else kafka.bootstrap_servers, else the one "
                          "`stream-nb kafka start` runs in ./.kafka)")
    run.add_argument("--stop-when-idle", type=float, default=None, metavar="SECONDS",
                     help="checkpoint and exit once caught up and this long without a message (catch-up runs, tests)")
    run.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                     help="the least severe log lines written to stderr")
    run.set_defaults(func=run_worker)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line, for log shippers: time (ISO 8601, UTC), level, logger, message
    (and the exception's traceback, when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if log_format == "json"
                         else logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kafka-python reports every failed connection attempt (~57 ERROR lines a second while a
    # broker is away); our own lines say what matters: a warning when an outage starts, each
    # minute, and when it ends. Its own only at DEBUG.
    outage.install(handler, debug=level == "DEBUG")


def run_worker(args) -> int:
    from stream_nb.keyed.changelog import ChangelogError
    from stream_nb.worker.keyed import KeyedStateError
    from stream_nb.worker.labeled import LabeledLogError
    from stream_nb.worker.loop import ModelStateUnknown, Worker  # imports kafka-python only when needed
    from stream_nb.worker.outputs import Fenced, OutputRefused

    configure_logging(args.log_level, "text")
    try:
        config, bootstrap = with_bootstrap(args.config, args.set, args.bootstrap)
        configure_logging(args.log_level, config.worker["log_format"])
        Worker.check_config(config)  # the worker's own keys, before any network wait
        check_reachable(bootstrap)
        logging.getLogger("stream_nb.worker").info("broker %s", bootstrap)
        worker = Worker(config)
        worker.install_signal_handlers()
        worker.start()
    except (ConfigError, NoBroker, KafkaSetupError, FingerprintMismatch, CheckpointError, LabeledLogError,
            KeyedStateError, ChangelogError) as error:
        print(f"stream-nb run: {error}", file=sys.stderr)
        return 2
    try:
        worker.run(stop_when_idle_s=args.stop_when_idle)
    # a partition added under thick-threshold; the last checkpoint; a labeled batch half learned
    except (LabeledLogError, CheckpointError, ModelStateUnknown, KeyedStateError, ChangelogError,
            OutputRefused) as error:
        print(f"stream-nb run: {error}", file=sys.stderr)
        return 2
    except Fenced as error:
        print(f"stream-nb run: {error}", file=sys.stderr)
        return EXIT_FENCED
    return 0
