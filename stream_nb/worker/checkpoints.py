"""Checkpoints and snapshots: the model with the labeled offsets it reflects (and the labeled dead
letters not yet published, the prequential metrics, the memory of learned ids), restored at start
from the newest valid checkpoint in checkpoint.dir (else from the newest snapshot on
checkpoint.snapshot_topic), written on a schedule (every_events, interval_s; in the background
when configured) and at a clean stop; snapshots published by one worker to the snapshot topic.
Outputs are not part of it: their progress is the group's offsets."""

from __future__ import annotations

import base64
import logging
import time
from typing import TYPE_CHECKING

from kafka import TopicPartition
from kafka.errors import CommitFailedError, KafkaError

from stream_nb.checkpoint import CheckpointError, CheckpointStore
from stream_nb.checkpoint.background import BackgroundSaver, SavedCheckpoint
from stream_nb.checkpoint.store import read_checkpoint
from stream_nb.events import Rejected, SourcePosition
from stream_nb.lessons import LabeledLessons, LearnedIds, LearnedIdsStateError
from stream_nb.model.registry import model_from_state
from stream_nb.replay.metrics import PrequentialMetrics
from stream_nb.worker.snapshots import SnapshotWriter, load_snapshot

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker

log = logging.getLogger("stream_nb.worker")


def events_learned_phrase(model, learned) -> str:
    """"N events learned" for the log; a model of several views learns an event once in each
    view that takes it, so its N is the views' sum, and the line says so (the stop line counts
    the labeled events themselves)."""
    views = len(getattr(model, "models", ()))
    return f"{int(learned)} events learned" + (f" (summed over its {views} views)" if views > 1 else "")


class Checkpoints:
    """The worker's checkpoint directory (store, background saver), its schedule, and its snapshots."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        config = worker.config
        # "{instance_id}" in the directory gives each replica its own (docker compose --scale)
        directory = config.checkpoint["dir"].replace("{instance_id}", worker.instance_id)
        self.store = CheckpointStore(directory, keep=config.checkpoint["keep"])
        self.saver = BackgroundSaver(self.store) if config.checkpoint["background"] else None
        self.snapshot_topic = config.checkpoint["snapshot_topic"]
        self.snapshots = SnapshotWriter(self.snapshot_topic, config.checkpoint["snapshot_interval_s"],
                                        worker.kafka["max_message_bytes"], worker.instance_id) if self.snapshot_topic else None
        self.checkpoint_id: str | None = None
        self.checkpoint_path = None  # of the newest checkpoint this worker wrote or restored
        self.learned_since_checkpoint = 0
        self.changed_since_checkpoint = False
        self._last_checkpoint = time.monotonic()

    def close(self) -> None:
        if self.saver is not None:
            self.saver.close()  # no write may outlive the directory lock
        self.store.unlock()

    # ---- restoring ------------------------------------------------------------------------------

    def restore(self) -> None:
        w = self.worker
        checkpoint = self.store.load_latest(w.fingerprint)
        if checkpoint is None and self.snapshot_topic:
            checkpoint = self._bootstrap_from_snapshot()
        if checkpoint is None:
            log.info("no checkpoint in %s: learning the labeled log from its beginning", self.store.directory)
            w._restored = {"offsets": {}, "topic_ids": {}}
            return
        w.model = model_from_state(checkpoint.model_state)
        w.metrics = _metrics_from(checkpoint.extra.get("metrics"))
        self.checkpoint_id = checkpoint.id
        self.checkpoint_path = checkpoint.path  # a snapshot's: topic@id
        w._processed = int(checkpoint.extra.get("events_processed", 0))
        w.labeled_rejections = [_rejection_from(saved) for saved in checkpoint.extra.get("labeled_rejections", [])]
        w.lessons = LabeledLessons(self._learned_ids_from(checkpoint.extra.get("learned_ids"), checkpoint.id))
        # Checkpoints hold the labeled offsets only (older ones held every topic's).
        offsets = {key: offset for key, offset in checkpoint.offsets.items() if key[0] in w.labeled_topics}
        w._restored = {"offsets": offsets, "topic_ids": checkpoint.extra.get("topic_ids", {})}
        log.info("restored checkpoint %s: %s", checkpoint.id, events_learned_phrase(w.model, w.model.events_learned))

    def learned_at_or_before(self, offset: int):
        """(model, lessons, labeled offset) of the newest checkpoint in the directory at or before
        labeled `offset` of a one-partition labeled log, written with this configuration; None
        when there is none (a relearning pass then starts at the log's beginning). A checkpoint
        that cannot be read or is refused is passed over."""
        w = self.worker
        for path in reversed(self.store.list()):
            try:
                checkpoint = read_checkpoint(path)
                if checkpoint.fingerprint != w.fingerprint:
                    continue
                positions = [at for (topic, _), at in checkpoint.offsets.items() if topic in w.labeled_topics]
                if len(positions) != 1 or positions[0] > offset:
                    continue
                model = model_from_state(checkpoint.model_state)
                saved = checkpoint.extra.get("learned_ids")
                memory = (LearnedIds(w.config.remember_ids) if saved is None else
                          LearnedIds.from_state(saved, classes=model.classes_,
                                                max_epoch=getattr(model, "forgetting_epoch", 0)))
                memory.set_capacity(w.config.remember_ids)
                return model, LabeledLessons(memory), positions[0]
            except (CheckpointError, LearnedIdsStateError, ValueError) as error:
                log.warning("relearning does not start from checkpoint %s: %s", path.name, error)
        return None

    def _learned_ids_from(self, saved: dict | None, checkpoint_id: str) -> LearnedIds:
        """The memory of learned ids a checkpoint holds, checked against the model restored with
        it, at this configuration's capacity (a smaller one evicts the oldest now). A checkpoint
        from before the memory existed holds none: an empty memory (its ids are then unknown to
        corrections, which take back nothing)."""
        w = self.worker
        if saved is None:
            return LearnedIds(w.config.remember_ids)
        try:
            memory = LearnedIds.from_state(saved, classes=w.model.classes_,
                                           max_epoch=getattr(w.model, "forgetting_epoch", 0))
        except LearnedIdsStateError as error:
            raise CheckpointError(f"checkpoint {checkpoint_id}: its learned ids are not sound: {error}") from error
        memory.set_capacity(w.config.remember_ids)
        return memory

    def _bootstrap_from_snapshot(self):
        """The newest snapshot on the snapshot topic (None if it has none); one made with another
        configuration is refused."""
        w = self.worker
        loaded = load_snapshot(w.kafka, w.config.kafka_client, self.snapshot_topic)
        if loaded is None:
            log.info("no snapshot on %s", self.snapshot_topic)
            return None
        checkpoint, manifest = loaded
        if checkpoint.fingerprint != w.fingerprint:
            raise CheckpointError(f"snapshot {manifest['id']} on {self.snapshot_topic} was written for configuration "
                                  f"fingerprint {checkpoint.fingerprint}, but this configuration's is {w.fingerprint}; "
                                  f"refusing to mix them (use the configuration it was written with, or another "
                                  f"checkpoint.snapshot_topic)")
        self.snapshots.known_chunks = manifest["chunks"]
        log.info("no checkpoint in %s: bootstrapped from snapshot %s on %s (%d bytes), labeled offsets %s",
                 self.store.directory, manifest["id"], self.snapshot_topic, manifest["bytes"],
                 ", ".join(f"{topic}[{partition}]@{offset}"
                           for (topic, partition), offset in sorted(checkpoint.offsets.items())))
        return checkpoint

    # ---- writing --------------------------------------------------------------------------------

    def due(self) -> bool:
        w = self.worker
        if not self.changed_since_checkpoint:
            return False  # an idle worker writes no copies of the same checkpoint
        every = w.config.checkpoint["every_events"]
        interval = w.config.checkpoint["interval_s"]
        return bool((every and self.learned_since_checkpoint >= every)
                    or (interval and time.monotonic() - self._last_checkpoint >= interval))

    def checkpoint_or_carry_on(self) -> None:
        """A scheduled checkpoint: in the background, the loop only copies the state (a write
        still under way puts it off to the next step). One that cannot be written (a full disk)
        is one error line and a retry in due course: the outputs stay exact (their progress is
        the group's offsets), only a restart would re-learn more of the labeled log. The final
        checkpoint's failure stops the worker (exit 2)."""
        w = self.worker
        if self.saver is None:
            try:
                self.checkpoint()
            except CheckpointError as error:
                self._failed(error)
            return
        if self.saver.busy:
            return
        started = time.perf_counter()
        model_state, offsets, extra = self._copy()
        self.saver.submit(model_state, offsets, w.fingerprint, extra, w.model.events_learned)
        w.telemetry.checkpoint_pause.observe(time.perf_counter() - started)
        self.changed_since_checkpoint = False
        self._restart_schedule()

    def collect(self, wait: bool = False) -> None:
        """Take note of a background write that has completed (with `wait`, of the one under way)."""
        if self.saver is None or not self.saver.busy:
            return
        try:
            saved = self.saver.wait() if wait else self.saver.finished()
        except CheckpointError as error:
            self.changed_since_checkpoint = True  # the state it held is not saved: try again in due course
            self._failed(error)
            return
        if saved is not None:
            self._written(saved)

    def _failed(self, error: CheckpointError) -> None:
        w = self.worker
        w.telemetry.checkpoint_failures.inc()
        log.error("%s; going on, the next checkpoint is tried in due course", error)
        self._restart_schedule()

    def _restart_schedule(self) -> None:
        """The next scheduled checkpoint falls every_events learned events or interval_s seconds from now."""
        self.learned_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()

    def checkpoint(self) -> None:
        """Save the model with the labeled offsets it reflects (and the labeled dead letters not
        yet published), now, in this thread (after a background write under way). Outputs are
        not part of it: their progress is the group's offsets."""
        w = self.worker
        self.collect(wait=True)
        if not self.changed_since_checkpoint:
            return
        started = time.perf_counter()
        model_state, offsets, extra = self._copy()
        events_learned = w.model.events_learned
        checkpoint = self.store.save(model_state, offsets, w.fingerprint, extra=extra)
        seconds = time.perf_counter() - started
        w.telemetry.checkpoint_pause.observe(seconds)
        self.changed_since_checkpoint = False
        self._restart_schedule()
        self._written(SavedCheckpoint(checkpoint, seconds, events_learned))

    def _copy(self) -> tuple[dict, dict, dict]:
        """(model state, labeled offsets, extra) as they are now, copies the loop no longer changes."""
        w = self.worker
        not_owned = [TopicPartition(*key) for key in w.labeled.positions
                     if TopicPartition(*key) not in w.commits.cursors]
        if w.labeled_rejections and not_owned:
            try:  # drop what the owners have published meanwhile
                w.commits.prune_rejections({tp: w.group.committed(tp) or 0 for tp in not_owned})
            except KafkaError as error:
                log.debug("could not read the labeled dead-letter cursors: %s", error)
        return w.model.to_state(), dict(w.labeled.positions), self._state_extra()

    def _written(self, saved: SavedCheckpoint) -> None:
        w = self.worker
        w.telemetry.checkpoint_seconds.observe(saved.seconds)
        try:
            w.telemetry.checkpoint_bytes.set(saved.checkpoint.path.stat().st_size)
        except OSError:  # pruned by another look already; the size is only a gauge
            pass
        self.checkpoint_id = saved.checkpoint.id
        self.checkpoint_path = saved.checkpoint.path
        log.info("checkpoint %s: %s", saved.checkpoint.id, events_learned_phrase(w.model, saved.events_learned))

    def _state_extra(self) -> dict:
        w = self.worker
        return {"metrics": _metrics_to(w.metrics), "events_processed": w._processed,
                "topic_ids": dict(w.labeled.ids),
                "labeled_rejections": [_rejection_to(r) for r in w.labeled_rejections],
                "learned_ids": w.lessons.memory.to_state()}

    # ---- snapshots ------------------------------------------------------------------------------

    def snapshot_due(self) -> bool:
        return (self.snapshots is not None and self._holds_snapshot_role()
                and self.snapshots.due(self.worker.model.events_learned))

    def _holds_snapshot_role(self) -> bool:
        """One worker writes snapshots: the owner of the first labeled partition."""
        w = self.worker
        first = min(w.labeled.positions, default=None)
        return first is not None and TopicPartition(*first) in w.commits.cursors

    def publish_snapshot(self) -> None:
        """The model with its labeled offsets to the snapshot topic, in a transaction of its own."""
        w = self.worker
        w.commits.commit_or_rewind()
        if w.outputs.open:
            return
        records = self.snapshots.records(w.model.to_state(), w.labeled.positions, w.fingerprint,
                                         self._state_extra(), w.model.events_learned)
        w.outputs.begin(w.group.group_metadata())
        for key, value in records:
            w.outputs.send(self.snapshot_topic, value, key, None, 0)
        try:
            w.outputs.commit({})
        except CommitFailedError as error:
            w.commits.rewind(f"snapshot refused ({error})")
            return
        log.info("snapshot with %s published to %s (%d records)", events_learned_phrase(w.model, w.model.events_learned),
                 self.snapshot_topic, len(records))


def _metrics_to(metrics: PrequentialMetrics) -> dict:
    return {"events": metrics.events, "correct": metrics.correct, "log_loss_sum": metrics.log_loss_sum,
            "confusion": [[true, predicted, count] for (true, predicted), count in metrics.confusion.items()]}


def _metrics_from(saved: dict | None) -> PrequentialMetrics:
    metrics = PrequentialMetrics()
    if saved:
        metrics.events, metrics.correct = saved["events"], saved["correct"]
        metrics.log_loss_sum = saved["log_loss_sum"]
        for true, predicted, count in saved["confusion"]:
            metrics.confusion[(true, predicted)] = count
    return metrics


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _rejection_to(rejected: Rejected) -> dict:
    source = rejected.source
    return {"reason": rejected.reason, "detail": rejected.detail, "value": _b64(rejected.value),
            "key": _b64(rejected.key), "headers": [[name, _b64(data)] for name, data in rejected.headers],
            "source": [source.topic, source.partition, source.offset]}


def _rejection_from(saved: dict) -> Rejected:
    return Rejected(reason=saved["reason"], detail=saved["detail"], value=_unb64(saved["value"]),
                    key=_unb64(saved["key"]), headers=tuple((name, _unb64(data)) for name, data in saved["headers"]),
                    source=SourcePosition(*saved["source"]))
