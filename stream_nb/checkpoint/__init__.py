"""Checkpoints: the model state, the next offset of every partition and the configuration's
fingerprint, written atomically to one self-checking file each. No Kafka here: the worker hands
over plain values ({(topic, partition): next offset}).

File format 1 (`checkpoint-<12-digit id>.ckpt`, one file per checkpoint)
------------------------------------------------------------------------
A one-line ASCII header, then a body:

    STREAM-NB-CHECKPOINT 1 <body length in bytes> <sha256 hex>\\n
    <body>

The sha256 is taken over the header line *without* its checksum field (the text
"STREAM-NB-CHECKPOINT 1 <length>\\n") followed by the body, so it covers every other byte of
the file. The body is an uncompressed numpy .npz archive (a zip of .npy members) holding

    checkpoint.json      uint8 array: UTF-8 JSON {
                             "format": 1, "id": "000000000042", "created_at": <unix time>,
                             "fingerprint": "<config fingerprint>",
                             "offsets": [[topic, partition, next offset], ...] (sorted),
                             "extra": {...},             (JSON-able, e.g. live metrics)
                             "model_meta": {...},        (to_state()["meta"])
                             "arrays": ["class_counts", ...]   (the model's array names)
                         }
    array.<name>         one numeric array per model array (to_state()["arrays"][name])

Reading checks the header, the length (a truncated file is reported as such) and the checksum
before parsing anything, then reads the members itself: stored (never compressed) members whose
sizes add up to at most the body's, .npy headers of bool/integer/float dtypes whose shape x
itemsize equals the member's bytes, checked before an array is allocated: loading a checkpoint
never runs code and never allocates more than the file holds. The model state is then checked
against the model's invariants (stream_nb.model.state_check); a file that fails is refused. `tail -c +<header length + 1>`
of a file is a plain .npz.

Writing goes to a hidden temporary file in the same directory (`.checkpoint-<id>.*.tmp`), which is
flushed and fsynced, renamed over the final name with os.replace, and the directory fsynced;
then all but the newest `keep` checkpoints are deleted. Ids are sequence numbers that keep
increasing across restarts (the next is one past the highest id in the directory). One writer
per directory.
"""

from stream_nb.checkpoint.digest import config_fingerprint, state_digest
from stream_nb.checkpoint.store import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    DirectoryLocked,
    FingerprintMismatch,
    read_checkpoint,
)

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "DirectoryLocked",
    "FingerprintMismatch",
    "config_fingerprint",
    "read_checkpoint",
    "state_digest",
]
