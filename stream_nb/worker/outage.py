"""A broker outage in the log: one warning when it starts, one a minute while it lasts, one when
it ends; not kafka-python's line per retry (~57 ERROR lines a second while a broker is away)."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("stream_nb.worker")

REMINDER_S = 60.0
# The client loggers of connections to brokers (kafka-python 3's kafka.net.*, librdkafka's lines
# as our confluent seam logs them), and the words of a connection error in any other client
# logger ("Metadata refresh: failed KafkaConnectionError: 111 ECONNREFUSED"): an outage's retries.
CONNECTION_LOGGERS = ("kafka.net.", "kafka.conn", "kafka.client", "kafka.librdkafka")
CONNECTION_SIGNS = ("KafkaConnectionError", "ECONNREFUSED", "Connection refused", "Connect to ")
# A fencing (librdkafka's "TXNERR ... Static consumer fenced by other consumer") comes over a
# connection logger but is no outage: the line passes as it is.
FENCING_SIGN = "fenced"
# The errors a client request fails with when its connection is down or closes under it, by class
# name (kafka-python's): "Metadata refresh: failed Cancelled" is a refresh in flight when the
# broker went away.
CONNECTION_ERRORS = frozenset({"KafkaConnectionError", "Cancelled", "NodeNotReadyError"})
# Errors kafka-python logs at ERROR and then retries itself, which are expected, not faults: after
# a rebalance under exactly-once the committed offsets of a partition are "unstable" until the
# previous owner's transaction ends ("Unknown error fetching offsets for ...: [Error 88]
# UnstableOffsetCommitError"), once per rebalance; a log alert must not fire on it.
EXPECTED_RETRIES = frozenset({"UnstableOffsetCommitError"})


class OutageLog(logging.Filter):
    """A filter of the log handler: it drops the lines of kafka-python's loggers ("kafka.*") and
    turns the first error of an outage into `begin`; the worker calls `begin` on an error it
    catches and `back` whenever the broker answers it again."""

    def __init__(self) -> None:
        super().__init__()
        self.since: float | None = None
        self._said_at = 0.0
        self.passthrough = False  # DEBUG: every line of the client, as it is
        # The worker has stopped and closes its clients: a connection closing under a request in
        # flight is no outage (kafka-python logs "Error receiving network data" for it)
        self.closing = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.passthrough or not (record.name == "kafka" or record.name.startswith("kafka.")):
            return True
        if record.levelno < logging.ERROR:
            return False
        if _carries(record, EXPECTED_RETRIES):
            return False
        message = record.getMessage()
        if FENCING_SIGN in message.lower():
            return True  # not an outage: the worker says what it does about it
        if (record.name.startswith(CONNECTION_LOGGERS) or any(sign in message for sign in CONNECTION_SIGNS)
                or _carries(record, CONNECTION_ERRORS)):
            if not self.closing:
                self.begin(f"{record.name}: {message}")  # a broker that does not answer: our lines say it
            return False
        return True  # any other error of the client, as it is

    def begin(self, why: str) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = self._said_at = now
            log.warning("Kafka unreachable (%s); retrying until it is back", why)
        elif now - self._said_at >= REMINDER_S:
            self._said_at = now
            log.warning("Kafka still unreachable after %.0f s (%s)", now - self.since, why)

    def back(self) -> None:
        if self.since is not None:
            log.warning("Kafka is back after %.0f s", time.monotonic() - self.since)
            self.since = None


def _carries(record: logging.LogRecord, names: frozenset[str]) -> bool:
    """Whether the record's arguments or exception hold an error of a class named in `names`."""
    args = record.args if isinstance(record.args, tuple) else ()
    errors = [*args, record.exc_info[1] if record.exc_info else None]
    return any(isinstance(error, BaseException) and type(error).__name__ in names for error in errors)


OUTAGE = OutageLog()


def install(handler: logging.Handler, debug: bool) -> None:
    """Route kafka-python's log through OUTAGE on `handler` (all of it, as it is, at DEBUG)."""
    logging.getLogger("kafka").setLevel(logging.DEBUG if debug else logging.ERROR)
    OUTAGE.passthrough = debug
    handler.addFilter(OUTAGE)
