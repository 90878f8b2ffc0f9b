"""The changelog of per-key state: a compacted topic whose partition p holds the flushes of
partition p's store (stream_nb.keyed.store: each changed key's bytes, a tombstone for a key that
went, the partition's metadata under the empty key), written in the worker's transaction with
its outputs and offsets, and read back by the partition's next owner.

Compaction keeps the last record of each key, which is all a restore needs: the store is the
last value of every key, and the metadata's last value says the labeled position it reflects.
Read with isolation_level=read_committed, to the partition's high watermark (an open
transaction is waited for, see ChangelogRead): a flush whose transaction was aborted (the
writer died mid-commit) is never restored.
"""

from __future__ import annotations

import time
from typing import Iterator

from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import KafkaError

from stream_nb.kafka.clients import _connect, _consumer, client_options, ensure_own_topic, make_reader

READ_TIMEOUT_S = 300.0  # a restore that makes no progress for this long stops with one line
# Set on the changelog it creates (Kafka's default, said explicitly: the client reads back only
# settings a topic has of its own, and a restart reuses a local store only within it)
TOMBSTONES_KEPT_MS = 86_400_000


class ChangelogError(RuntimeError):
    """The changelog cannot be read or written as the keyed state needs; one line."""


class ChangelogRangeError(ChangelogError):
    """The changelog does not hold the offset a local store stopped at (recreated, truncated)."""


def changelog_topic(kafka: dict) -> str:
    """The changelog of the group's per-key store (Kafka Streams names it <app>-<store>-changelog)."""
    return f"{kafka['group_id']}-keys-changelog"


def ensure_changelog(kafka: dict, client: dict, topic: str, partitions: int) -> None:
    """Create the compacted changelog with `partitions` partitions (the unlabeled topics'), with
    the replication of the worker's topics; refuse one that exists with another partition count
    (the keys of a partition would be restored from another's records)."""
    ensure_own_topic(kafka, client, topic, partitions,
                     {"cleanup.policy": "compact", "delete.retention.ms": str(TOMBSTONES_KEPT_MS)}, "the changelog topic",
                     lambda count: ChangelogError(
                         f"changelog topic {topic} has {count} partitions, but the unlabeled topics have {partitions}: "
                         f"delete it (the state is restored from the labeled log then) or give the topics the same "
                         f"partition count"))


def send_flush(outputs, topic: str, partition: int, records: list[tuple[bytes, bytes | None]]):
    """A store's flush as changelog records of `partition`, inside the open transaction; returns
    the last send's future (the metadata's: where the flush ends)."""
    future = None
    for key, value in records:
        future = outputs.send(topic, value, key, None, partition)
    return future


def tombstones_kept_ms(kafka: dict, client: dict, topic: str) -> int:
    """The changelog's delete.retention.ms: how long compaction keeps a tombstone at least. A
    local store closed longer ago than this may have missed a key's deletion; 0 when the topic
    has no such setting of its own (the broker's default is not known here)."""
    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entry = next(iter(described.values()))[topic]["delete.retention.ms"]
        return max(0, int(entry["value"]))
    except (KafkaError, LookupError, TypeError, ValueError, StopIteration, AttributeError):
        return 0
    finally:
        admin.close()


def read_changelog(kafka: dict, client: dict, topic: str, partition: int,
                   start: int | None = None, offsets=None) -> "ChangelogRead":
    """The (key, value) records of one changelog partition in offset order, from `start` (None:
    its beginning) to its high watermark when the read begins: iterate the result (once); then
    its `end` is the offset to restore from next time, `records` how many were read. `offsets`:
    a client of make_offsets_client that outlives the read (restores of several partitions ask
    through one; None: the read makes its own)."""
    return ChangelogRead(kafka, client, topic, partition, start, offsets)


def make_offsets_client(kafka: dict, client: dict):
    """A consumer of no group and no assignment that only asks partitions' first offsets and
    high watermarks (read_uncommitted: see ChangelogRead). A fresh client's first ask waits for a
    metadata refresh (retry_backoff_ms after its bootstrap: about 120 ms measured), so restores
    share one rather than making two clients a partition."""
    return _consumer(kafka, client, "offsets client", group_id=None, isolation_level="read_uncommitted")


class ChangelogRead:
    """One pass over a changelog partition (see read_changelog); `end` is the next offset after it.

    The read goes to the partition's high watermark, not its last stable offset: a transaction
    of the previous owner still open (it died mid-commit, or stalls) is waited for until it is
    committed or aborted (at most the transaction timeout), so that a commit landing after the
    read began is never missed. The records come through a read_committed reader, made only when
    there is something to read."""

    def __init__(self, kafka: dict, client: dict, topic: str, partition: int, start: int | None, offsets=None) -> None:
        self.kafka, self.client = kafka, client
        self.tp = TopicPartition(topic, partition)
        self.start = start
        self.offsets = offsets
        self.end: int | None = None
        self.records = 0

    def __iter__(self) -> Iterator[tuple[bytes, bytes | None]]:
        beginning, end = self._range()
        start = beginning if self.start is None else self.start
        if not beginning <= start <= end:
            raise ChangelogRangeError(f"changelog {self.tp.topic}[{self.tp.partition}] holds offsets {beginning}.."
                                      f"{end}, not the {start} a local store stopped at")
        if start < end:
            yield from self._records(start, end)
        self.end = end

    def _range(self) -> tuple[int, int]:
        """(first offset, high watermark) of the partition."""
        offsets = self.offsets if self.offsets is not None else make_offsets_client(self.kafka, self.client)
        try:
            return offsets.beginning_offsets([self.tp])[self.tp], offsets.end_offsets([self.tp])[self.tp]
        finally:
            if offsets is not self.offsets:
                offsets.close(autocommit=False)

    def _records(self, start: int, end: int) -> Iterator[tuple[bytes, bytes | None]]:
        consumer = make_reader(self.kafka, self.client)
        try:
            consumer.assign([self.tp])
            consumer.seek(self.tp, start)
            position = start
            progress_at = time.monotonic()
            while position < end:
                if time.monotonic() - progress_at > READ_TIMEOUT_S:
                    raise ChangelogError(f"changelog {self.tp.topic}[{self.tp.partition}]: no progress for "
                                         f"{READ_TIMEOUT_S:.0f} s at offset {position} of {end} (a "
                                         f"transaction left open longer than its timeout?)")
                polled = consumer.poll(timeout_ms=500)
                for record in polled.get(self.tp, ()):
                    if record.offset < position or record.offset >= end:  # before the seek; after the end
                        continue
                    self.records += 1
                    yield record.key if record.key is not None else b"", record.value
                # the consumer's position also steps over transaction markers and aborted records
                position = max(position, consumer.position(self.tp))
                if polled:
                    progress_at = time.monotonic()
        finally:
            consumer.close(autocommit=False)
