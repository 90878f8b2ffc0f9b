"""Model snapshots on a compacted topic ([checkpoint] snapshot_topic): read at start by a worker
with an empty checkpoint directory, written on a schedule by one worker (the one the group
assigns the first labeled partition to), in a transaction of its own."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from kafka import TopicPartition

from stream_nb.checkpoint.snapshot import (
    MANIFEST_KEY,
    SnapshotError,
    assemble_snapshot,
    chunk_key,
    snapshot_records,
)
from stream_nb.checkpoint.store import Checkpoint, CheckpointError, encode_checkpoint, parse_checkpoint
from stream_nb.kafka.clients import make_reader

log = logging.getLogger("stream_nb.worker")

READ_TIMEOUT_S = 120.0


def load_snapshot(kafka: dict, client: dict, topic: str) -> tuple[Checkpoint, dict] | None:
    """(checkpoint, manifest) of the newest complete snapshot on `topic`, or None when it holds
    none (an empty topic, or a damaged snapshot or one whose state is refused: said in a warning)."""
    consumer = make_reader(kafka, client)
    try:
        partitions = [TopicPartition(topic, n) for n in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            return None
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        # the newest value of each key by offset, not by arrival: a client may deliver a fetch
        # made before its seek after newer records (a key keeps its partition, so offsets compare)
        newest: dict[bytes, tuple[int, bytes | None]] = {}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise CheckpointError(f"snapshot topic {topic}: not read to its end in {READ_TIMEOUT_S:.0f} s")
            for batch in consumer.poll(timeout_ms=500).values():
                for record in batch:
                    seen = newest.get(record.key)
                    if seen is None or record.offset > seen[0]:
                        newest[record.key] = (record.offset, record.value)
    finally:
        consumer.close(autocommit=False)
    if not newest:
        return None
    latest = {key: value for key, (_, value) in newest.items()}
    try:
        manifest, data = assemble_snapshot(latest)
    except SnapshotError as error:
        log.warning("snapshot topic %s holds no usable snapshot (%s): learning the labeled log instead", topic, error)
        return None
    try:  # every new worker is handed these bytes: a refused state must not stop them all
        checkpoint = parse_checkpoint(data, Path(f"{topic}@{manifest['id']}"))
    except CheckpointError as error:
        log.warning("snapshot topic %s holds no usable snapshot (%s): learning the labeled log instead", topic, error)
        return None
    return checkpoint, manifest


class SnapshotWriter:
    """Publishes the worker's model to the snapshot topic every `interval_s`, when it changed."""

    def __init__(self, topic: str, interval_s: float, max_message_bytes: int, instance_id: str) -> None:
        self.topic = topic
        self.interval_s = interval_s
        self.chunk_bytes = max(1024, min(max_message_bytes, 1_000_000) - 4096)
        self.instance = re.sub(r"[^A-Za-z0-9._-]", "_", instance_id)[:64] or "worker"
        self.known_chunks = 0  # chunk count of the newest snapshot on the topic, as far as we know
        self._last_at = time.monotonic()
        self._last_learned = None

    def due(self, events_learned: float) -> bool:
        return time.monotonic() - self._last_at >= self.interval_s and events_learned != self._last_learned

    def records(self, model_state: dict, offsets: dict, fingerprint: str, extra: dict,
                events_learned: float) -> list[tuple[bytes, bytes | None]]:
        """The records of a new snapshot, then tombstones for the chunks of the previous one
        that it does not overwrite."""
        snapshot_id = f"{time.time_ns() // 1_000_000:013d}-{self.instance}"
        header, body, _ = encode_checkpoint(snapshot_id, model_state, offsets, fingerprint, extra)
        records: list[tuple[bytes, bytes | None]] = list(snapshot_records(header + body, snapshot_id, self.chunk_bytes))
        chunks = len(records) - 1
        records[-1:-1] = [(chunk_key(i), None) for i in range(chunks, self.known_chunks)]
        assert records[-1][0] == MANIFEST_KEY
        self.known_chunks = chunks
        self._last_at, self._last_learned = time.monotonic(), events_learned
        return records
