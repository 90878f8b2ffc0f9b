"""Outputs and the commit protocol: where predictions and dead letters become visible, together
with the consumer group's offsets that say they are done.

exactly_once: one transactional producer per worker (transactional id from the group and the
    instance id, so a restarted worker fences its zombie). A transaction opens with the first
    output after a commit, holds every prediction and dead letter of about commit_interval_ms of
    traffic, and commits with the group's offsets (send_offsets_to_transaction, KIP-447 group
    metadata taken *before* the records were polled, so a rebalance in between makes the broker
    refuse the commit instead of committing offsets of a partition that has moved). Readers with
    isolation_level=read_committed see each output once.
at_least_once: outputs are sent as they come; a commit flushes them, checks every delivery, then
    commits the offsets. A crash between the two repeats outputs, never loses one.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from kafka import TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from stream_nb.kafka.clients import (
    FENCING_ERRORS,
    abort_transaction,
    commit_transaction,
    send_null_record,
    transaction_lost,
)

log = logging.getLogger("stream_nb.worker")

TRANSACTION_CALL_TIMEOUT_S = 30.0


def transaction_call_timeout_s(transaction_timeout_s: float) -> float:
    """How long a commit or abort may wait for the broker: 30 s, but a third of the transaction
    timeout when that is less. A call stuck on a coordinator that died (kafka-python 3.0.12 may
    wait on the dead one until its producer is replaced) then gives up while the transaction is
    still young enough that the worker reconnects instead of stopping as if it had been paused
    and replaced (Membership.recover stops once the open transaction outlived the timeout)."""
    return min(TRANSACTION_CALL_TIMEOUT_S, transaction_timeout_s / 3)


class DeliveryError(KafkaError):
    """An output could not be delivered; the worker rewinds its outputs to the last commit."""

    retriable = True


class OutputRefused(RuntimeError):
    """The broker refuses an output as too large, and a smaller dead letter cannot help: one
    line, and the worker stops (a non-retriable error is never retried for ever)."""


# How a broker (or the client, before sending) says a record exceeds a limit: kafka-python's
# classes, and librdkafka's local error by name.
TOO_LARGE_SIGNS = ("MessageSizeTooLargeError", "RecordListTooLargeError", "MSG_SIZE_TOO_LARGE")


def refused_as_too_large(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) says a record was too large."""
    while error is not None:
        if type(error).__name__ in TOO_LARGE_SIGNS or any(sign in str(error) for sign in TOO_LARGE_SIGNS):
            return True
        error = error.__cause__ or error.__context__
    return False


class Fenced(RuntimeError):
    """A newer worker with the same instance id (transactional id) has taken over."""


def fenced_by(error: BaseException, producer=None) -> bool:
    """Whether `error` means another worker has (or may have) taken this one's place: a newer
    producer or group member with our ids, or a transaction of ours that the broker aborted
    because it outlived transaction_timeout_ms (the process was paused or stuck). Such a worker
    stops: reconnecting would fence its replacement in turn."""
    if transaction_lost(producer):
        return True
    while error is not None:
        if isinstance(error, FENCING_ERRORS):
            return True
        error = error.__cause__ or error.__context__
    return False


class Outputs:
    def __init__(self, producer, group_consumer, *, exactly_once: bool, commit_interval_s: float,
                 transactional_id: str | None, published: Counter | None = None,
                 call_timeout_s: float = TRANSACTION_CALL_TIMEOUT_S) -> None:
        self.producer = producer
        self.call_timeout_s = call_timeout_s
        self.group = group_consumer
        self.exactly_once = exactly_once
        self.commit_interval_s = commit_interval_s
        self.transactional_id = transactional_id
        self._open = False  # a transaction is open (exactly_once) / sends are unconfirmed (at_least_once)
        self._metadata = None
        self._opened_at = 0.0
        self._pending: list = []  # at_least_once: delivery futures since the last commit
        self.sent = 0
        # {topic: outputs committed}: the caller's, so that it outlives a replaced Outputs
        self.published = Counter() if published is None else published
        self._uncommitted: Counter = Counter()

    @property
    def open(self) -> bool:
        return self._open

    def begin(self, group_metadata) -> None:
        """Open a transaction whose offsets will be committed under `group_metadata` (taken
        before the poll whose records it will hold)."""
        if self._open:
            return
        if self.exactly_once:
            self.producer.begin_transaction()
        self._metadata = group_metadata
        self._opened_at = time.monotonic()
        self._open = True

    def stale(self, group_metadata) -> bool:
        """Whether the group has rebalanced since the open transaction's metadata was taken."""
        return self._open and self._metadata is not None and (
            group_metadata.generation_id != self._metadata.generation_id
            or group_metadata.member_id != self._metadata.member_id)

    def send(self, topic: str, value, key, headers, partition: int | None):
        """Send one output in the open transaction; returns the send's future."""
        if not self._open:
            raise RuntimeError("an output outside a transaction (begin() first)")
        if value is None and key is None:  # a dead letter of a record with neither
            future = send_null_record(self.producer, topic, headers, partition)
        else:
            future = self.producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        if not self.exactly_once:
            self._pending.append(future)
        self.sent += 1
        self._uncommitted[topic] += 1
        return future

    def outlived(self, timeout_s: float) -> bool:
        """Whether the open transaction has been open for `timeout_s` (transaction_timeout_ms) or
        longer: the coordinator has aborted it, and another worker may have taken this one's
        place meanwhile (the process was paused or stuck)."""
        return self._open and self.exactly_once and time.monotonic() - self._opened_at >= timeout_s

    def due(self) -> bool:
        return self._open and time.monotonic() - self._opened_at >= self.commit_interval_s

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Make the outputs since the last commit visible together with the group's `offsets`."""
        if not self._open:
            return
        if self.exactly_once:
            commit_transaction(self.producer, offsets, self._metadata, self.call_timeout_s)
        else:
            self.producer.flush(timeout=self.call_timeout_s)
            failed = [future for future in self._pending if future.failed() or not future.is_done]
            if failed:
                raise DeliveryError(f"{len(failed)} outputs were not delivered: {failed[0].exception}")
            if offsets:
                self.group.commit({tp: OffsetAndMetadata(offset, "", -1) for tp, offset in offsets.items()})
        self.published.update(self._uncommitted)
        self._uncommitted.clear()
        self._pending = []
        self._open = False

    def abort(self) -> None:
        """Drop the open transaction's outputs (at_least_once: forget them; they may be out)."""
        if self._open and self.exactly_once:
            try:
                abort_transaction(self.producer, self.call_timeout_s)
            except KafkaError as error:
                if fenced_by(error, self.producer):
                    raise
                # A producer that cannot abort is replaced; its successor's init_transactions
                # aborts whatever it left open.
                log.warning("could not abort the open transaction (%s); the producer will be replaced", error)
                raise
        self._uncommitted.clear()
        self._pending = []
        self._open = False
