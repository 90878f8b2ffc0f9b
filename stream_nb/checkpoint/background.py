"""Checkpoints written off the worker's hot path: the caller copies the state (cheap), a thread
of its own encodes, writes, fsyncs and prunes (the slow part)."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from stream_nb.checkpoint.store import Checkpoint, CheckpointStore


@dataclass(frozen=True)
class SavedCheckpoint:
    checkpoint: Checkpoint
    seconds: float  # encoding, writing, fsync and pruning, on the writer's thread
    events_learned: float  # of the state it holds


class BackgroundSaver:
    """One checkpoint write at a time on a thread of its own.

    The state handed to `submit` must be a copy the caller no longer changes (`to_state()`
    copies the arrays and the names). A write that fails raises its CheckpointError from
    `finished()` or `wait()`, in the caller's thread.
    """

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    @property
    def busy(self) -> bool:
        """A write is under way (or done and not yet collected)."""
        return self._pending is not None

    def submit(self, model_state: dict, offsets: dict, fingerprint: str, extra: dict, events_learned: float) -> None:
        if self._pending is not None:
            raise RuntimeError("a checkpoint write is already under way")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stream-nb-checkpoint")

        def save() -> SavedCheckpoint:
            started = time.perf_counter()
            checkpoint = self.store.save(model_state, offsets, fingerprint, extra=extra)
            return SavedCheckpoint(checkpoint, time.perf_counter() - started, events_learned)

        self._pending = self._executor.submit(save)

    def finished(self) -> SavedCheckpoint | None:
        """The write just completed, if one did since the last call (its error, if it failed)."""
        if self._pending is None or not self._pending.done():
            return None
        return self.wait()

    def wait(self) -> SavedCheckpoint | None:
        """Wait for the write under way; its result (or error), None when there is none."""
        pending, self._pending = self._pending, None
        return None if pending is None else pending.result()

    def close(self) -> None:
        """Let a write under way finish (its result is dropped), then stop the thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._pending = None
