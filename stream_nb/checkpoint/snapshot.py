"""Snapshots on a compacted topic: a checkpoint's bytes cut into chunks under the broker's message
size limit, so a worker that starts with an empty checkpoint directory loads the model instead
of re-learning the whole labeled topic. No Kafka here: records are (key, value) pairs.

Records of one snapshot (written in one transaction, so read_committed readers see all or none):

    key b"chunk/<i>"   value b"<snapshot id>\\n" + the i-th slice of the checkpoint bytes
    key b"manifest"    value JSON {"format": 1, "id", "chunks", "bytes", "sha256"}

Compaction keeps the newest value of every key: the newest manifest and, for i < its "chunks",
the newest chunk i, which must carry the manifest's id. Chunks of an older, longer snapshot
(i >= "chunks") are removed with tombstones by the writer that knows their count.
"""

from __future__ import annotations

import hashlib
import json

MANIFEST_KEY = b"manifest"
FORMAT = 1


class SnapshotError(ValueError):
    """No usable snapshot in the records; the message says why."""


def chunk_key(index: int) -> bytes:
    return f"chunk/{index}".encode("ascii")


def snapshot_records(data: bytes, snapshot_id: str, chunk_bytes: int) -> list[tuple[bytes, bytes]]:
    """The records of one snapshot: its chunks, then the manifest that names them."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    prefix = snapshot_id.encode("ascii") + b"\n"
    chunks = [data[start:start + chunk_bytes] for start in range(0, len(data), chunk_bytes)] or [b""]
    records = [(chunk_key(i), prefix + chunk) for i, chunk in enumerate(chunks)]
    manifest = {"format": FORMAT, "id": snapshot_id, "chunks": len(chunks), "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}
    records.append((MANIFEST_KEY, json.dumps(manifest, sort_keys=True).encode("ascii")))
    return records


def assemble_snapshot(latest: dict[bytes, bytes | None]) -> tuple[dict, bytes]:
    """(manifest, checkpoint bytes) from the newest value of every key of the topic.
    Raises SnapshotError when there is no manifest, or a chunk is missing, of another snapshot,
    or the whole does not match the manifest's length and sha256."""
    raw = latest.get(MANIFEST_KEY)
    if raw is None:
        raise SnapshotError("no snapshot manifest")
    try:
        manifest = json.loads(raw)
        snapshot_id, count, length, digest = manifest["id"], manifest["chunks"], manifest["bytes"], manifest["sha256"]
    except (ValueError, KeyError, TypeError) as error:
        raise SnapshotError(f"unreadable manifest ({error})") from None
    if manifest.get("format") != FORMAT:
        raise SnapshotError(f"manifest format {manifest.get('format')!r} (this version reads {FORMAT})")
    prefix = str(snapshot_id).encode("ascii") + b"\n"
    parts = []
    for index in range(int(count)):
        value = latest.get(chunk_key(index))
        if value is None or not value.startswith(prefix):
            raise SnapshotError(f"snapshot {snapshot_id}: chunk {index} of {count} is missing or of another snapshot")
        parts.append(value[len(prefix):])
    data = b"".join(parts)
    if len(data) != length or hashlib.sha256(data).hexdigest() != digest:
        raise SnapshotError(f"snapshot {snapshot_id}: {len(data)} bytes that do not match the manifest's checksum")
    return manifest, data
