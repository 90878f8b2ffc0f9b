"""Membership and recovery: the worker's Kafka clients (the labeled log's reader, the producer,
the group consumer) opened and closed, the group joined (the labeled partitions held paused, for
the dead-letter role only), assignment changes, and the proof that this worker's transactional
id is still its own after a stall or a new member id. A Kafka error is ridden out by reopening
every client (the model stays); a sign that another worker with this instance id has taken over
stops this one (Fenced) instead of fencing it back."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

from kafka import ConsumerRebalanceListener
from kafka.errors import CommitFailedError, FencedInstanceIdError, KafkaError

from stream_nb.config import TRANSACTION_TIMEOUT_MS
from stream_nb.kafka.clients import (
    close_producer,
    instance_holder,
    make_group_consumer,
    make_labeled_reader,
    make_producer,
    transaction_lost,
)
from stream_nb.kafka.limits import MIN_DEAD_LETTER_BYTES, dead_letter_limit
from stream_nb.worker.labeled import LabeledLog, one_order_rule
from stream_nb.worker.outage import OUTAGE
from stream_nb.worker.outputs import (
    Fenced,
    OutputRefused,
    Outputs,
    fenced_by,
    refused_as_too_large,
    transaction_call_timeout_s,
)

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker

log = logging.getLogger("stream_nb.worker")

RETRY_AFTER_ERROR_S = 2.0

SESSION_TIMEOUT_MS = 10_000  # kafka-python's default session_timeout_ms (librdkafka's is longer)


class _PauseLabeled(ConsumerRebalanceListener):
    """The group consumer holds labeled partitions only as the dead-letter role: never fetch them.
    (Runs on kafka-python's network thread: pause is a flag, nothing here blocks.)"""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def on_partitions_revoked(self, revoked) -> None:
        self.worker._assignment_changed = True

    def on_partitions_assigned(self, assigned) -> None:
        labeled = [tp for tp in assigned if tp.topic in self.worker.labeled_topics]
        if labeled:
            self.worker.group.pause(*labeled)
        self.worker._assignment_changed = True

    def on_partitions_lost(self, lost) -> None:
        self.worker._assignment_changed = True


class Membership:
    """Opens, closes and reopens the worker's clients (worker.labeled, worker.producer, worker.group,
    worker.outputs) and keeps track of its place in the group."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._member_id = ""  # the last member id the group gave this worker
        self._unconfirmed: str | None = None  # why its transactional id must be shown to be its own
        self._instance_fencings: list[float] = []  # when our consumer was fenced (and rejoined)
        self._last_step_at: float | None = None
        client = worker.config.kafka_client
        self.transaction_timeout_s = client.get("transaction_timeout_ms", TRANSACTION_TIMEOUT_MS) / 1000
        # a longer gap between two steps may have let a process with our instance id take over
        self.stall_limit_s = min(client.get("session_timeout_ms", SESSION_TIMEOUT_MS) / 1000,
                                 self.transaction_timeout_s)

    def open_clients_retrying(self) -> None:
        """open_clients, again after a retriable Kafka error (a broker that answers slowly: the
        probe saw a watermark query time out under a read quota and the worker exit with a
        traceback). Anything else stops the start."""
        w = self.worker
        while True:
            try:
                self.open_clients()
                OUTAGE.back()
                return
            except KafkaError as error:
                if not error.retriable or w._stopping or fenced_by(error):
                    raise
                OUTAGE.begin(f"starting: {error}")
                self.close_clients(timeout_s=0)
                time.sleep(RETRY_AFTER_ERROR_S)

    def open_clients(self) -> None:
        w = self.worker
        client = w.config.kafka_client
        # From the checkpoint at start; after a Kafka error, from where the model in memory stands.
        saved = w._restored if w._restored is not None else {
            "offsets": dict(w.labeled.positions), "topic_ids": dict(w.labeled.ids)}
        # The log that holds the model's positions is replaced only once its successor stands at
        # them: a start cut short by the broker (the next attempt copies worker.labeled's positions)
        # must not leave a log with none, which would send the model back to the beginning.
        labeled = LabeledLog(make_labeled_reader(w.kafka, client), sorted(w.labeled_topics),
                             one_order=one_order_rule(w.config), on_lost_position=w.kafka["on_lost_position"])
        try:
            labeled.start(saved["offsets"], saved["topic_ids"])
        except BaseException:
            with contextlib.suppress(Exception):
                labeled.consumer.close(autocommit=False)
            raise
        w.labeled = labeled
        w._restored = None
        w.producer = make_producer(w.kafka, client, w.transactional_id, max_record_bytes=w.dead_letter_bytes)
        w.group = self._join_group()
        w.outputs = Outputs(w.producer, w.group, exactly_once=w.exactly_once,
                            commit_interval_s=w.kafka["commit_interval_ms"] / 1000,
                            transactional_id=w.transactional_id, published=w._published,
                            call_timeout_s=transaction_call_timeout_s(self.transaction_timeout_s))
        w.commits.cursors = {}
        w.commits.held = []  # a new consumer starts from the committed offsets
        if w.forwarding is not None:  # the old producer's transaction is gone, and its forwards
            w.forwarding.reset()
        w._assignment_changed = True
        w.predictor.count_output_partitions(w.group)

    def _join_group(self):
        w = self.worker
        group = make_group_consumer(w.kafka, w.config.kafka_client, w.instance_id)
        group.subscribe([*w.unlabeled_topics, *sorted(w.labeled_topics)], listener=_PauseLabeled(w))
        return group

    def close_clients(self, timeout_s: float = 10.0) -> None:
        w = self.worker
        for client in (w.producer, w.group, w.labeled.consumer if w.labeled else None):
            if client is None:
                continue
            try:
                if client is w.producer:
                    close_producer(client, timeout_s)
                else:
                    client.close(autocommit=False)
            except Exception as error:  # closing is best effort; a new client replaces it
                log.debug("closing %s: %s", client, error)
        if w.forwarding is not None:
            try:
                w.forwarding.close()
            except Exception as error:
                log.debug("closing the forwarding reader: %s", error)
        w.producer = w.group = w.outputs = None
        if w.labeled is not None:
            w.labeled.consumer = None

    def on_assignment_change(self) -> None:
        """Learn where the labeled dead letters of newly owned labeled partitions stand."""
        w = self.worker
        w._assignment_changed = False
        member_id = w.group.group_metadata().member_id
        if member_id and self._member_id and member_id != self._member_id:
            # A static member keeps its member id through rebalances: a new one means the old was
            # dropped, or taken by a process with our instance id while this one stalled.
            self._unconfirmed = f"the group gave this worker a new member id ({self._member_id} -> {member_id})"
        self._member_id = member_id or self._member_id
        if self._unconfirmed is not None:
            self._confirm_ownership()
        assignment = w.group.assignment()
        log.info("group %s assigns this worker %s", w.kafka["group_id"],
                 ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(assignment)) or "no partition")
        unlabeled = {tp.partition for tp in assignment if tp.topic in w.unlabeled_topics}
        if w.keyed is not None:  # before any record of a new partition is predicted
            w.keyed.on_assignment(unlabeled)
        if w.forwarding is not None:  # the labeled partitions of the unlabeled ones owned
            w.forwarding.on_assignment(unlabeled)
        owned = {tp for tp in assignment if tp.topic in w.labeled_topics}  # paused by _PauseLabeled
        w.commits.cursors = {tp: offset for tp, offset in w.commits.cursors.items() if tp in owned}
        for tp in owned - set(w.commits.cursors):
            w.commits.cursors[tp] = w.group.committed(tp) or 0
        if owned:
            log.info("publishing the dead letters of labeled partitions %s",
                     ", ".join(f"{tp.topic}[{tp.partition}] from offset {offset}"
                               for tp, offset in w.commits.cursors.items()))

    def recover(self, error: KafkaError) -> None:
        """Ride out a Kafka error: drop the open outputs, reopen every client, go on from the
        group's committed offsets. The model stays: it holds exactly the labeled offsets read."""
        w = self.worker
        if self._rejoined_after_instance_fencing(error):
            return
        if fenced_by(error, w.producer) or (w.outputs is not None
                                           and w.outputs.outlived(self.transaction_timeout_s)):
            # Not reconnecting: a new producer would fence the worker that took this one's place.
            raise Fenced(f"fenced: another worker with transactional id {w.transactional_id!r} (instance "
                         f"{w.instance_id!r}) has taken over, or this one's transaction outlived "
                         f"transaction_timeout_ms (paused?); stopping so as not to fence it back ({error})") from None
        w.telemetry.last_error = f"{type(error).__name__}: {error}"
        if refused_as_too_large(error):
            self._cut_dead_letters(error)
        else:
            OUTAGE.begin(f"{error}: outputs since the last commit are dropped and redone")
        member_id = w.group.group_metadata().member_id if w.group is not None else ""
        self.close_clients(timeout_s=0)
        while not w._stopping:
            time.sleep(RETRY_AFTER_ERROR_S)
            w.telemetry.last_step = time.monotonic()  # alive: waiting for the broker is its job
            w.telemetry.refresh_stalls()  # but not advancing: /readyz and the gauge say so in time
            try:
                # A new producer fences every older one of its transactional id: first make sure
                # no newer member holds this instance id (a replacement started while this
                # process was paused or cut off).
                holder = instance_holder(w.kafka, w.config.kafka_client, w.instance_id)
                if member_id and holder not in (None, member_id):
                    raise Fenced(f"fenced: another worker with instance id {w.instance_id!r} joined group "
                                 f"{w.kafka['group_id']!r} while this one was cut off ({error}); stopping "
                                 f"so as not to fence it back")
                self.open_clients()
                OUTAGE.back()
                return
            except Fenced:
                raise
            except Exception as reopen_error:  # the broker may still be away
                if fenced_by(reopen_error):
                    raise Fenced(f"fenced while reconnecting: {reopen_error}") from None
                OUTAGE.begin(str(reopen_error))  # a line a minute at most while it lasts
                log.debug("still cannot reach Kafka (%s)", reopen_error)
                self.close_clients(timeout_s=0)

    def _cut_dead_letters(self, error: KafkaError) -> None:
        """The broker refused an output as too large. When the dead-letter topic now takes less
        than the worker sends there (its limit lowered since start), dead letters are cut to it
        and the outputs redone. Otherwise no cut helps (a prediction is what the broker refuses,
        the predictions topic's limit is the operator's to fix): OutputRefused, one line. When
        the broker cannot say its limit, letters are halved, down to MIN_DEAD_LETTER_BYTES."""
        w = self.worker
        topic = w.kafka["dead_letter_topic"]
        try:
            limit = dead_letter_limit(w.kafka, w.config.kafka_client)
        except Exception as describe_error:  # the broker answered just now; halving alone is bounded
            log.debug("reading %s's max.message.bytes: %s", topic, describe_error)
            limit = w.dead_letter_bytes // 2
        if limit >= w.dead_letter_bytes or limit < MIN_DEAD_LETTER_BYTES:
            raise OutputRefused(f"kafka: the broker refuses the worker's outputs as too large ({error}), although "
                                f"dead letters fit {topic}'s {w.dead_letter_bytes} bytes: check max.message.bytes of "
                                f"{w.kafka['predictions_topic']} and {topic}") from None
        log.warning("the broker refused an output as too large (%s): dead letters are cut to %d bytes from now "
                    "on (%s's max.message.bytes), and the outputs since the last commit are redone", error, limit, topic)
        w.dead_letter_bytes = limit

    def _rejoined_after_instance_fencing(self, error: KafkaError) -> bool:
        """Our consumer was fenced by another member with our instance id, but our producer is
        not: let the producer decide who stays. On librdkafka a process resumed after a pause
        rejoins under the static instance id in the background, fencing the consumer of the
        replacement that took its place, although the replacement's producer is the newer one.
        So: a new consumer (which fences the other's in turn), then the ownership probe, which
        only the newest producer passes (_confirm_ownership); the stale process stops there.
        Bounded: a fourth fencing within 5 minutes stops this worker (two processes that both
        believe they own the id, e.g. one instance id given to two workers)."""
        w = self.worker
        if not (w.exactly_once and isinstance(error, FencedInstanceIdError) and w.group is not None
                and not transaction_lost(w.producer)):
            return False
        now = time.monotonic()
        self._instance_fencings = [at for at in self._instance_fencings if now - at < 300] + [now]
        if len(self._instance_fencings) > 3:
            return False
        log.warning("another member with instance id %r fenced this worker's consumer, but not its producer: "
                    "rejoining, then confirming the transactional id", w.instance_id)
        try:
            w.outputs.abort()  # asks the coordinator: a fenced producer shows here
        except KafkaError as abort_error:
            if fenced_by(abort_error, w.producer):
                return False
            raise
        try:
            w.group.close()
        except Exception as close_error:  # a fatal consumer may refuse a clean close; it is replaced
            log.debug("closing the fenced consumer: %s", close_error)
        w.group = w.outputs.group = self._join_group()
        w.commits.cursors = {}
        w.commits.held = []  # a new consumer starts from the committed offsets
        if w.forwarding is not None:  # the old producer's transaction is gone, and its forwards
            w.forwarding.reset()
        w._assignment_changed = True
        self._unconfirmed = f"its consumer was fenced by another member with instance id {w.instance_id!r}"
        return True

    def confirm_ownership_after_a_stall(self) -> None:
        """Start to start: a pause that lands inside a step shows in the gap before the next."""
        now = time.monotonic()
        stalled_s, self._last_step_at = (now - self._last_step_at if self._last_step_at else 0.0), now
        if stalled_s >= self.stall_limit_s:
            self._unconfirmed = f"this worker stalled for {stalled_s:.1f} s (paused?)"
        if self._unconfirmed is not None:
            self._confirm_ownership()

    def _confirm_ownership(self) -> None:
        """Prove that no newer producer holds this worker's transactional id before going on.

        A worker that stalled (SIGSTOP, a frozen VM) may have been replaced meanwhile, and on
        resume its consumer can rejoin under the static instance id before this loop runs
        (librdkafka does so in the background). Its producer is then fenced, but says so only
        when it next asks the coordinator, which an idle worker might never do. So: the group's
        own committed offsets, committed again in a transaction (no change for a rightful owner;
        refused with a fencing error for a stale one, which stops this worker: exit 3). Stays
        pending (self._unconfirmed) while the worker holds no partition with a committed offset."""
        w = self.worker
        why = self._unconfirmed
        if not w.exactly_once or why is None:
            self._unconfirmed = None
            return
        if w.outputs.open:
            if w.outputs.outlived(self.transaction_timeout_s):
                raise Fenced(f"fenced: {why}, and its open transaction outlived transaction_timeout_ms: another "
                             f"worker with instance id {w.instance_id!r} may hold its place; stopping so as "
                             f"not to fence it back")
            self._unconfirmed = None  # the open transaction's commit or abort asks the coordinator anyway
            return
        committed = {tp: w.group.committed(tp) for tp in w.group.assignment()}
        committed = {tp: offset for tp, offset in committed.items() if offset is not None}
        if not committed:
            return
        log.info("%s: confirming that transactional id %r is still this worker's", why, w.transactional_id)
        w.outputs.begin(w.group.group_metadata())
        try:
            w.outputs.commit(committed)
        except CommitFailedError:
            # The transaction coordinator took our epoch (it answers before the group does): ours.
            w.commits.rewind(None)
        self._unconfirmed = None
