"""Forwarding: labeled topics of many partitions made one labeled order ([personal]).

Why: the global model and every key's state depend on the order of the labeled events (thick-
threshold training and forgetting learn by what the model predicts just before; each key's event
is decided with the global model of its offset), so every worker must learn them in one order.
A topic of many partitions is ordered only within each partition, and two workers reading it
would interleave its partitions as their fetches happen to return.

So the order is written once, in Kafka. The labeled topics are co-partitioned with the unlabeled
topic (the same partition count; producers key both by the event key), and the worker the group
gives unlabeled partition p forwards labeled partition p: it reads it by assignment from the
group's committed offset and writes its records, in their order, into the labeled order
(stream_nb.kafka.labeled_order: one partition, kept for ever) inside the transaction that commits
their source offsets in the group, with the group's generation. So each record is forwarded
exactly once (a rewind aborts the forwards with the offsets; a former owner's commit is refused),
a key's labels keep their order (they share a partition), and the interleaving of partitions is
fixed once written. Every worker reads the labeled order as its labeled log (stream_nb.worker.
labeled), so replicas agree, and a replay of it is the same run again. Kafka Streams' repartition
topics are the same device; a merge by timestamps would wait on idle partitions, and thick-
threshold training does not commute. The labeled partitions are not members of the group's
subscription: the assignor balances the unlabeled partitions (the keyed state) alone.

Labels first (worker.labels_first_wait_s, at most): a poll's unlabeled records wait while a
labeled partition this worker forwards has records not yet forwarded; the forwards are committed and
the worker learns the labeled order past the last of them (`reach`) before it predicts. Labels in
partitions that other workers own reach the order at their owners' next commit
(kafka.commit_interval_ms later at most, when they are not stalled).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from kafka import TopicPartition

from stream_nb.kafka.clients import KafkaSetupError, make_reader, offset_after
from stream_nb.kafka.labeled_order import origin_headers
from stream_nb.worker.records import first_offsets

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker

log = logging.getLogger("stream_nb.worker")



class Forwarding:
    """The worker's forwarding role: `sources` are the labeled topics, `topic` the labeled order."""

    def __init__(self, worker: Worker, sources: frozenset[str], topic: str) -> None:
        self.worker = worker
        self.sources = sources
        self.topic = topic
        self.reader = None  # the labeled partitions forwarded, by assignment (open/close)
        self.partitions: set[int] = set()  # the unlabeled partitions owned, so the labeled ones forwarded
        self.forwarded = 0  # records forwarded and committed since start
        self.reach = 0  # the labeled order's offset just past this worker's last committed forward
        self._open: list = []  # the open transaction's forwards (send futures)
        self._open_from: Counter = Counter()  # how many of them each source partition gave
        # per forwarded partition, the offset after the last record forwarded (what the commit
        # commits); a record below it would be one delivered again, and is not forwarded twice
        self._next: dict[TopicPartition, int] = {}
        self._held_since: float | None = None
        self._held_for_forwards: set[tuple[str, int, int]] = set()  # first records held once

    def reset(self) -> None:
        """New clients: nothing is forwarded until the group assigns partitions."""
        self.close()
        self.partitions = set()
        self._open = []
        self._open_from.clear()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close(autocommit=False)
        self.reader = None

    @property
    def assigned(self) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for topic in sorted(self.sources) for p in sorted(self.partitions)]

    def start(self, partitions: int, admin_partitions: dict[str, int]) -> None:
        """Refuse labeled topics not co-partitioned with the unlabeled topic (`partitions`)."""
        other = {topic: count for topic, count in admin_partitions.items() if topic in self.sources and count != partitions}
        if other:
            listing = ", ".join(f"{topic} ({count})" for topic, count in sorted(other.items()))
            raise KafkaSetupError(
                f"personal: the labeled topics must have the unlabeled topic's {partitions} partitions (a key's "
                f"labels and events on partition p alike); {listing}. The worker creates them so (kafka.partitions, "
                f"not kafka.labeled_partitions, under [personal]) and adds partitions to an empty one; one that "
                f"holds records must be recreated with {partitions} partitions (adding partitions would move "
                f"its keys)")

    def on_assignment(self, partitions: set[int]) -> None:
        """Forward the labeled partitions of the unlabeled partitions owned, each from the group's
        committed offset (what earlier owners forwarded and committed)."""
        self.partitions = set(partitions)
        self.rewind()

    def rewind(self) -> None:
        """Every forwarded partition back to the group's committed offset; the open forwards are
        dropped (the transaction that held them is aborted). A new reader: records an old one
        fetched before a seek were seen delivered after it (librdkafka), and a record read twice
        would be forwarded twice."""
        group = self.worker.group
        self.close()
        self._open, self._next = [], {}
        self._open_from.clear()
        if not self.assigned:
            return
        self.reader = make_reader(self.worker.kafka, self.worker.config.kafka_client)
        self.reader.assign(self.assigned)
        for tp in self.assigned:
            committed = group.committed(tp)
            if committed is None:
                self.reader.seek_to_beginning(tp)
                committed = self.reader.position(tp)
            else:
                self.reader.seek(tp, committed)
            self._next[tp] = committed

    def poll(self) -> list:
        """Labeled records of the forwarded partitions ready now (no wait)."""
        if not self.partitions:
            return []
        polled = self.reader.poll(timeout_ms=0, max_records=self.worker.kafka["poll_max_records"])
        records = []
        for tp in sorted(polled):
            for record in polled[tp]:
                if tp in self._next and record.offset >= self._next[tp]:
                    records.append(record)
                    self._next[tp] = record.offset + 1
        return records

    def lags(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): records of a forwarded labeled partition not yet forwarded and
        committed} (forwards in the open transaction count until it commits: the labeled order
        has them only then)."""
        assigned = self.assigned
        if not assigned or self.reader is None:
            return {}
        return {(tp.topic, tp.partition): max(0, end - self._next.get(tp, self.reader.position(tp)))
                + self._open_from[(tp.topic, tp.partition)] for tp, end in self.reader.end_offsets(assigned).items()}

    def positions(self) -> dict[TopicPartition, int]:
        """The source offsets to commit with the open forwards."""
        return dict(self._next)

    def forward(self, records: list) -> None:
        """Into the open transaction, in their order."""
        outputs = self.worker.outputs
        for record in records:
            self._open.append(outputs.send(self.topic, record.value, record.key, origin_headers(record), 0))
            self._open_from[(record.topic, record.partition)] += 1

    def committed(self) -> None:
        """The transaction with the open forwards committed: `reach` moves past the last of them."""
        if self._open:
            end = offset_after(self._open[-1])
            if end is not None:
                self.reach = max(self.reach, end)
            self.forwarded += len(self._open)
        self._open = []
        self._open_from.clear()

    def hold_back(self, records: list, forwarded_now: bool) -> bool:
        """Whether a poll's unlabeled `records` wait (labels first): this step forwarded labels, or
        a forwarded partition has records not yet read (for worker.labels_first_wait_s at most).
        Records already held once while labels were forwarded are not held again, whatever came
        since: with labels flowing all the time, every step forwards some, and predictions would
        wait the whole labels_first_wait_s at every poll."""
        firsts = {(r.topic, r.partition, r.offset) for r in records}
        if firsts & self._held_for_forwards:
            self._held_for_forwards = set()
            self._held_since = None
            return False
        if forwarded_now:
            self._held_for_forwards = {(tp.topic, tp.partition, offset) for tp, offset in first_offsets(records).items()}
            self._held_since = None
            return True
        w = self.worker
        assigned = self.assigned
        behind = bool(assigned) and any(
            max(self._next.get(tp, 0), self.reader.position(tp)) < end  # the reader's passes markers
            for tp, end in self.reader.end_offsets(assigned).items())
        now = time.monotonic()
        if not behind:
            self._held_since = None
            return False
        if self._held_since is None:
            self._held_since = now
        if now - self._held_since >= w.config.worker["labels_first_wait_s"]:
            log.debug("labels first: labels still to forward after the wait; predicting anyway")
            self._held_since = None
            return False
        return True
