"""The labeled log: every worker reads all of it, by assignment (no group), in one order.

A worker's model is then a function of the labeled offsets it has consumed, whatever happens to
the process: replicas that reach the same offsets hold the same state. Under an order-dependent
training mode the labeled topics must have one partition in total (one order, fixed by Kafka);
under mode "all" counts commute and any number of partitions is fine.
"""

from __future__ import annotations

import heapq
import logging
import time

from kafka import TopicPartition

from stream_nb.kafka.clients import topic_ids

log = logging.getLogger("stream_nb.worker")

PARTITION_CHECK_S = 5.0  # how often the labeled topics are checked for added partitions


class LabeledLogError(RuntimeError):
    """The labeled log cannot be read as the configuration and the checkpoint require; one line."""


def one_order_rule(config) -> tuple[str, str] | None:
    """(why, remedy) when the labeled log must be one partition: an order-dependent model, or
    per-key state (each key's events in the log's order, each with the global model of its offset)."""
    if config.order_dependence is not None:
        return config.order_dependence
    if config.personal is not None:
        return "[personal] learns each key's events in one order", "remove [personal]"
    return None


class LabeledLog:
    def __init__(self, consumer, topics: list[str], *, one_order: tuple[str, str] | None,
                 on_lost_position: str) -> None:
        self.consumer = consumer
        self.topics = list(topics)
        self.one_order = one_order
        self.on_lost_position = on_lost_position
        self.partitions: list[TopicPartition] = []
        self.positions: dict[tuple[str, int], int] = {}  # next offset the model has not learned
        self.ids: dict[str, str] = {}
        self._checked_at = time.monotonic()
        self._missing_warned: set[str] = set()

    # ---- start -------------------------------------------------------------------------------

    def start(self, saved: dict[tuple[str, int], int], saved_ids: dict[str, str]) -> None:
        """Assign every labeled partition and seek each to `saved` (a checkpoint's offsets), after
        checking that the topic still holds them: a topic recreated under the same name (a new
        id) or an offset outside [earliest, end] is a lost position, never silently skipped."""
        self.partitions = self._discover(required=True)
        self.consumer.assign(self.partitions)
        self.ids = topic_ids(self.consumer, self.topics)
        beginnings = self.consumer.beginning_offsets(self.partitions)
        ends = self.consumer.end_offsets(self.partitions)
        for (topic, number), offset in saved.items():
            if topic in self.topics and TopicPartition(topic, number) not in beginnings:
                self._lost(f"labeled partition {topic}[{number}] of the checkpoint no longer exists "
                           f"(the topic was recreated with fewer partitions)")
        self.positions = {}
        for tp in self.partitions:
            key = (tp.topic, tp.partition)
            offset = saved.get(key)
            if offset is not None:
                lost = None
                old_id, new_id = saved_ids.get(tp.topic), self.ids.get(tp.topic)
                if old_id and new_id and old_id != new_id:
                    lost = f"labeled topic {tp.topic} was deleted and created again (topic id {old_id} -> {new_id})"
                elif offset > ends[tp]:
                    lost = (f"labeled partition {tp.topic}[{tp.partition}] ends at offset {ends[tp]}, before the "
                            f"checkpoint's {offset} (the topic was recreated or truncated)")
                elif offset < beginnings[tp]:
                    lost = (f"labeled partition {tp.topic}[{tp.partition}] now starts at offset {beginnings[tp]}: "
                            f"records {offset}..{beginnings[tp] - 1} were deleted (retention) before they were learned")
                if lost is not None:
                    self._lost(lost)
                    offset = None
            if offset is None:
                offset = beginnings[tp]
            self.consumer.seek(tp, offset)
            self.positions[key] = offset

    def _lost(self, what: str) -> None:
        if self.on_lost_position == "fail":
            raise LabeledLogError(f"{what}; refusing to go on with a model that does not match the log "
                                  f"(set kafka.on_lost_position = \"from_beginning\" to read it anew, or start "
                                  f"from an empty checkpoint directory)")
        log.warning("%s: reading it from its beginning (kafka.on_lost_position = from_beginning)", what)

    def _discover(self, required: bool) -> list[TopicPartition]:
        partitions = []
        for topic in self.topics:
            numbers = self.consumer.partitions_for_topic(topic)
            if not numbers:
                if required:
                    raise LabeledLogError(f"kafka: labeled topic {topic!r} has no partitions visible to this client")
                partitions.extend(tp for tp in self.partitions if tp.topic == topic)  # keep what we had
                continue
            partitions.extend(TopicPartition(topic, number) for number in sorted(numbers))
        if self.one_order is not None and len(partitions) > 1:
            why, remedy = self.one_order
            listing = ", ".join(f"{topic} ({sum(tp.topic == topic for tp in partitions)})" for topic in self.topics)
            raise LabeledLogError(
                f"kafka.labeled_topics: {len(partitions)} labeled partitions ({listing}), but {why} and needs "
                f"one partition in total, so that every worker learns the labeled events in the same order; "
                f"use one labeled topic of one partition, or {remedy}")
        return partitions

    # ---- reading -----------------------------------------------------------------------------

    def poll(self, timeout_ms: int, max_records: int) -> list:
        """The next records in one order: each partition in offset order, several partitions
        merged by timestamp (the order matters only under mode "all", where it cannot change the
        state). A record below a partition's position is already in the model: it is dropped,
        whatever the client did to deliver it, and the consumer is sent back to the position."""
        polled = self.consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        if not polled:
            return []
        batches = []
        for tp, batch in polled.items():
            position = self.positions.get((tp.topic, tp.partition))
            if position is not None and batch and batch[0].offset < position:
                batch = self._without_learned(tp, batch, position)
            if batch:
                batches.append(batch)
        if len(batches) <= 1:
            return batches[0] if batches else []
        return list(heapq.merge(*batches, key=lambda record: record.timestamp))

    def _without_learned(self, tp: TopicPartition, batch: list, position: int) -> list:
        kept = [record for record in batch if record.offset >= position]
        log.warning("the labeled reader returned %d records of %s[%d] below offset %d, which the model has "
                    "learned (offsets %d..%d): dropped, not learned twice", len(batch) - len(kept), tp.topic,
                    tp.partition, position, batch[0].offset, batch[len(batch) - len(kept) - 1].offset)
        if not kept:
            self.consumer.seek(tp, position)
        return kept

    def advance(self) -> None:
        """Positions after the records of the last poll were learned; the consumer's own position
        also steps over transaction markers, which are no records. A position never moves back:
        what is below it is in the model."""
        for tp in self.partitions:
            key = (tp.topic, tp.partition)
            self.positions[key] = max(self.positions.get(key, 0), self.consumer.position(tp))

    def end_offsets(self) -> dict[tuple[str, int], int]:
        """The last stable offset of each labeled partition (read_committed)."""
        ends = self.consumer.end_offsets(self.partitions)
        return {(tp.topic, tp.partition): end for tp, end in ends.items()}

    def behind(self, ends: dict[tuple[str, int], int]) -> bool:
        return any(self.positions.get(key, 0) < end for key, end in ends.items())

    def partition_lags(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): records not yet learned} of every labeled partition (a Kafka error
        when the broker cannot say)."""
        return {key: max(0, end - self.positions.get(key, 0)) for key, end in self.end_offsets().items()}

    def next_offset(self) -> int:
        """The next offset to learn of a log of one partition (the keyed state's order)."""
        return next(iter(self.positions.values()), 0)

    def offsets(self) -> list[list]:
        """The offsets the model reflects, as [[topic, partition, next offset], ...]."""
        return [[topic, partition, offset] for (topic, partition), offset in sorted(self.positions.items())]

    # ---- topics that change under a running worker ---------------------------------------------

    def refresh(self) -> None:
        """Every few seconds: read partitions added to a labeled topic (from their beginning), or
        stop with one line under an order-dependent mode; a deleted topic is reported once."""
        now = time.monotonic()
        if now - self._checked_at < PARTITION_CHECK_S:
            return
        self._checked_at = now
        for topic in self.topics:
            if not self.consumer.partitions_for_topic(topic):
                if topic not in self._missing_warned:
                    log.warning("labeled topic %s has vanished (deleted?); its partitions are not read", topic)
                    self._missing_warned.add(topic)
            else:
                self._missing_warned.discard(topic)
        partitions = self._discover(required=False)
        added = [tp for tp in partitions if tp not in self.partitions]
        if not added:
            return
        self.partitions = sorted(set(self.partitions) | set(added))
        self.consumer.assign(self.partitions)  # kafka-python keeps the positions of partitions it had
        for tp in added:
            self.consumer.seek_to_beginning(tp)
            self.positions[(tp.topic, tp.partition)] = 0
        log.info("labeled partitions added: %s; reading them from the beginning",
                 ", ".join(f"{tp.topic}[{tp.partition}]" for tp in added))
