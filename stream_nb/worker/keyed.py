"""Keyed state: the per-key models ([personal]) of the unlabeled partitions this worker owns.

Which keys: a key belongs to partition p = murmur2(key) mod P of the unlabeled topics (Kafka's
default partitioner; P their partition count), so the owner of p sees both its predictions and
its state. The group assigns the partitions; the state of p lives in a StoredKeyTable
(stream_nb.keyed.store) under the checkpoint directory.

What the state is: every worker learns the whole labeled log in one order (the labeled order,
stream_nb.worker.forwarding, read by stream_nb.worker.labeled), so it holds the global model at
every labeled offset as it passes. Only the owner of p
learns the key counts of p's keys: each labeled event of such a key is decided on the key's own
prediction with the global model as it stands just before that event (stream_nb.model.personal;
keys that learned every event instead measured 1-ROCA% 1.23x the global model's on Enron-Spam,
against 0.61x). A partition's state is thus a function of the labeled log: its keys' events in
log order, each with the global model at its offset, and `position` (the labeled offset it
reflects) says how far.

Its changelog: at each commit the changes of every owned partition go to partition p of the
changelog topic (stream_nb.keyed.changelog) inside the transaction that holds the predictions
and the group's offsets, the metadata last with the position. A flush whose transaction is
aborted is sent again with the next one (`_unconfirmed`), so the changelog's last values are
always a state the log produced. A commit is due a commit interval after a key changed, or after
an owned partition's changelog fell behind the worker's labeled position (relearned, or passed by
events of other keys only: its metadata alone then says how far it goes). So a worker that has
caught up leaves every partition's changelog at its position, and the next owner never relearns
more than the last commit interval's stretch (a clean stop flushes them the same way).

A partition that moves is restored by its new owner from the changelog before any of its
records is predicted (on the assignment, synchronously). A store this worker closed cleanly on
its disk (a restart) is restored on from the changelog offset its close recorded, when that was
within the changelog's delete.retention.ms (so no deletion since has lost its tombstone to
compaction); any other is restored anew. It is then at position M; the worker's own labeled
position is G:
- G <= M: events of p below M are in the state already; they are passed over as the log is read;
- G > M: events of p in [M, G) went by without p's state: they are learned again by a second
  pass over the labeled log with a global model of its own, relearned from the newest of the
  worker's checkpoints at or before M, else from the log's beginning (the global model is a
  function of the log), so each is decided with the model of its offset.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from kafka import TopicPartition
from kafka.partitioner.default import murmur2

from stream_nb.kafka.clients import make_labeled_reader, offset_after
from stream_nb.keyed.changelog import (
    ChangelogRangeError,
    changelog_topic,
    ensure_changelog,
    make_offsets_client,
    read_changelog,
    send_flush,
    tombstones_kept_ms,
)
from stream_nb.keyed.store import META_KEY, StoredKeyTable
from stream_nb.keyed.view_tables import ViewTables
from stream_nb.lessons import LabeledLessons, LearnedIds
from stream_nb.model.base import SparseBatch, ViewBatch
from stream_nb.model.personal import InvalidKeyState
from stream_nb.model.personal_experts import PersonalExperts
from stream_nb.model.training import predict_learn
from stream_nb.replay.metrics import PrequentialMetrics
from stream_nb.worker.learner import Learner
from stream_nb.worker.metrics import WorkerMetrics
from stream_nb.worker.records import featurise_views

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker

log = logging.getLogger("stream_nb.worker")


def key_partition(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record keyed `key` (UTF-8)."""
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


class OwnedPartition:
    """One owned partition's table and how far its state goes in the labeled log."""

    def __init__(self, table: StoredKeyTable, position: int) -> None:
        self.table = table
        self.position = position  # events of the partition's keys below this offset are in the table


class PartitionedKeys:
    """The learning of per-key state over owned partitions, without Kafka: which table a key's
    event goes to, and the prequential step that decides and learns each owned key's event with
    the global model just before it (the worker's role below, and its relearning pass, use it)."""

    def __init__(self, personal, partitions: int, owned: dict[int, OwnedPartition] | None = None) -> None:
        self._personal = personal
        self.partitions = partitions  # P, the unlabeled topics' partition count
        self.owned: dict[int, OwnedPartition] = owned if owned is not None else {}
        self._changed_at: float | None = None  # the first key change since the last flush

    @property
    def personal(self):
        """The per-key models (stream_nb.model.personal) over the global model."""
        return self._personal

    def table_of(self, key, offset: int | None = None) -> StoredKeyTable | None:
        """The table that learns or predicts `key` here: None for no key, a partition not owned,
        or (with the labeled `offset`) an event the partition's state already holds."""
        if key is None or not self.owned:
            return None
        owned = self.owned.get(key_partition(key, self.partitions))
        if owned is None or (offset is not None and offset < owned.position):
            return None
        return owned.table

    def predict_then_learn(self, model, events: list, X, offsets: list[int], training: dict) -> list[tuple[dict, bool]]:
        """The global model's prequential step over `events` (as predict_learn), with each event of
        an owned key decided and learned by its key first, in order. Runs of events without an
        owned key go to predict_learn in one batch. The batch path takes events of classes the
        global model has: the first event of each class new to it goes event by event (as in
        replay), and the rest of the batch at batch speed."""
        tables = [self.table_of(event.key, offset) if event.label is not None else None
                  for event, offset in zip(events, offsets)]
        if not any(table is not None for table in tables):
            return self._one_by_one(model, events, X, offsets, tables, training, 0)
        new_classes: dict = {}
        for i, event in enumerate(events):
            if event.label is not None and event.label not in model.classes_:
                new_classes.setdefault(event.label, i)
        ready_at = max(new_classes.values()) + 1 if new_classes else 0
        results = self._one_by_one(model, events, X, offsets, tables, training, 0, ready_at) if ready_at else []
        if ready_at < len(events):
            rest = slice(ready_at, None)
            fast = self._batch_speed(events[rest], X[rest] if ready_at else X, offsets[rest], tables[rest], training)
            if fast is not None:
                return results + fast
            results += self._one_by_one(model, events, X, offsets, tables, training, ready_at)
        return results

    def _one_by_one(self, model, events: list, X, offsets: list[int], tables: list, training: dict, begin: int,
                    end: int | None = None) -> list[tuple[dict, bool]]:
        """predict_then_learn of events begin..end, each of an owned key by the per-event
        definition, the runs between them in batches."""
        end = len(events) if end is None else end
        results: list[tuple[dict, bool]] = []
        start = begin
        sparse = isinstance(X, (SparseBatch, ViewBatch))
        views = isinstance(self.personal, PersonalExperts)
        for i in range(begin, end):
            event, table = events[i], tables[i]
            if event.label is not None:
                self._tick(offsets[i], table)
            if table is None:
                continue
            if start < i:
                results.extend(zip(*predict_learn(model, X[start:i], [e.label for e in events[start:i]], **training)))
            x = X[i:i + 1].to_dicts()[0] if sparse else X[i]  # the rows of owned keys alone
            if views:  # (its prediction: the key's views combined)
                results.append(self.personal.predict_learn_one(x, event.label, event.key, training, table,
                                                               event_id=event.id, unlearn=event.unlearn))
                start = i + 1
                if self._changed_at is None:
                    self._changed_at = time.monotonic()
                continue
            _, key_learns = self.personal.predict_and_decide(x, event.label, event.key, table, event_id=event.id,
                                                             unlearn=event.unlearn)
            probabilities, learned = predict_learn(model, X[i:i + 1], [event.label], **training)
            if key_learns:
                self.personal.learn_key(x, event.label, event.key, table=table, event_id=event.id)
            self.personal.observe_labeled(event.key, table)
            results.append((probabilities[0], learned[0]))
            start = i + 1
            if self._changed_at is None:
                self._changed_at = time.monotonic()
        if start < end:
            results.extend(zip(*predict_learn(model, X[start:end], [e.label for e in events[start:end]], **training)))
        return results

    def _batch_speed(self, events: list, X, offsets: list[int], tables: list, training: dict):
        """predict_then_learn through PersonalMultinomialNB.predict_learn_batch (the same results
        at batch speed); None when that batch path does not take the batch."""
        rows = None if isinstance(X, (SparseBatch, ViewBatch)) else list(X)
        keys = [event.key for event in events]
        changed = []

        if isinstance(self.personal, PersonalExperts):  # each view's pass observes in its own stores
            personals = self.personal.personals

            def observe(i: int, v: int) -> None:
                self._tick(offsets[i], tables[i], view=v)
                if tables[i] is not None:
                    personals[v].observe_labeled(keys[i], tables[i].views[v])
                    changed.append(i)
        else:
            def observe(i: int) -> None:
                self._tick(offsets[i], tables[i])
                if tables[i] is not None:
                    self.personal.observe_labeled(keys[i], tables[i])
                    changed.append(i)

        try:
            results = self.personal.predict_learn_batch(X, rows, [event.label for event in events], keys, tables,
                                                        training, observe, [event.id for event in events],
                                                        [event.unlearn for event in events])
        except (TypeError, ValueError):  # refused before anything was learned: the caller finds the event
            return None
        if changed and self._changed_at is None:
            self._changed_at = time.monotonic()
        return results

    def key_lesson(self, event, X, offset: int) -> None:
        """A labeled event the global model learns nothing of (a duplicate to it, a take-back
        alone): its key's own rules and learning (PersonalMultinomialNB.key_lesson), when this
        worker holds the key's partition and its state does not hold the event yet."""
        table = self.table_of(event.key, offset)
        if table is None or event.id is None:
            return
        x = (X.to_dicts() if isinstance(X, (SparseBatch, ViewBatch)) else list(X))[0]
        self.personal.key_lesson(x, event.label, event.unlearn, event.id, event.key, table)
        if self._changed_at is None:
            self._changed_at = time.monotonic()

    def _tick(self, offset: int, own, view: int | None = None) -> None:
        """A labeled event at `offset` of a key of no owned partition, of no key, or of a key of
        the partition of `own` (whose observe_labeled ticks it): every other owned partition's
        idle clock ticks, as replay's one table does for every labeled event. So `idle_after`
        counts labeled events of all keys here too, and a key is evicted at the same event.
        `view`: only that view's stores tick (a view's pass of the views' batch path)."""
        idle_after = self._personal.idle_after
        for owned in self.owned.values():
            if owned.table is not own and offset >= owned.position:
                (owned.table if view is None else owned.table.views[view]).observe(None, idle_after)

    def advance(self, position: int) -> None:
        """The labeled log is learned up to `position`: so is every owned partition."""
        for owned in self.owned.values():
            owned.position = max(owned.position, position)


class KeyedState(PartitionedKeys):
    """The keyed role of a worker (module docstring): owned partitions restored from and flushed
    to the changelog."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker.config.build_personal(worker.model), partitions=0)
        self.worker = worker
        self.topic = changelog_topic(worker.kafka)
        self.directory = worker.checkpoints.store.directory / "keys"
        self._unconfirmed: dict[int, dict[bytes, bytes | None]] = {}  # flushed, not yet committed
        self._flush_ends: dict[int, object] = {}  # the open transaction's last send of each partition
        # partition -> the changelog offset after its last committed flush, while its store on
        # disk is exactly that flush (a clean close records it: a restart reads only the tail)
        self._clean: dict[int, int] = {}
        # partition -> the labeled position its committed changelog names (restored, or the last
        # flush confirmed)
        self._committed_at: dict[int, int] = {}
        self.tombstones_kept_ms = 0  # the changelog's delete.retention.ms
        self.reused = 0  # restores that started from a local copy
        self.restores = 0
        self.relearned_from: int | None = None  # the last relearning pass's starting offset (None: the beginning)
        self._behind_since: float | None = None  # when an owned partition's changelog first fell behind (due)

    # ---- start -----------------------------------------------------------------------------

    def start(self, admin_partitions: dict[str, int]) -> None:
        """Take P from the unlabeled topics (all must have the same count) and make sure the
        changelog exists with P partitions."""
        counts = {topic: admin_partitions.get(topic, 0) for topic in self.worker.unlabeled_topics}
        if len(set(counts.values())) != 1 or 0 in counts.values():
            listing = ", ".join(f"{topic} ({count})" for topic, count in counts.items())
            raise KeyedStateError(f"personal: the unlabeled topics must have one partition count, the key's "
                                  f"partition being the same in each; they have {listing}")
        self.partitions = next(iter(counts.values()))
        ensure_changelog(self.worker.kafka, self.worker.config.kafka_client, self.topic, self.partitions)
        self.tombstones_kept_ms = tombstones_kept_ms(self.worker.kafka, self.worker.config.kafka_client, self.topic)

    @property
    def personal(self):
        """The per-key models over the worker's global model as it is now (a checkpoint restored
        at start replaces the model object)."""
        if self._personal.global_model is not self.worker.model:
            self._personal.global_model = self.worker.model
        return self._personal

    def misrouted(self, key, partition: int) -> int | None:
        """The partition `key` belongs to when an unlabeled record of it came on another."""
        if key is None:
            return None
        expected = key_partition(key, self.partitions)
        return None if expected == partition else expected

    # ---- commits -------------------------------------------------------------------------------

    def due(self, interval_s: float, position: int | None = None) -> bool:
        """Whether a commit is due for the keyed state: `interval_s` since the first key change,
        or since an owned partition's changelog first fell behind `position` (the labeled offset
        the worker has learned to; None: key changes alone count) with no key of it changed."""
        now = time.monotonic()
        if self._changed_at is not None:
            return now - self._changed_at >= interval_s
        if position is None:
            return False
        if not self.behind(position):
            self._behind_since = None
            return False
        if self._behind_since is None:
            self._behind_since = now
        return now - self._behind_since >= interval_s

    def pending(self) -> bool:
        return self._changed_at is not None or any(self._unconfirmed.values())

    def behind(self, position: int) -> bool:
        """Whether an owned partition's committed changelog names a labeled position before
        `position`: a relearning pass, or events of other keys only, moved its state on. Its next
        flush (its metadata, when none of its keys changed) says how far the state goes, so the
        next owner need not learn that stretch again."""
        return any(self._committed_at.get(number, 0) < max(position, owned.position)
                   for number, owned in self.owned.items())

    def send_flushes(self, outputs, position: int) -> None:
        """Into the open transaction: every owned partition's changes since its last committed
        flush, and its metadata at `position` (the labeled offset the model reflects)."""
        self.advance(position)
        for number, owned in sorted(self.owned.items()):
            unconfirmed = self._unconfirmed.setdefault(number, {})
            for key, value in owned.table.flush(position=owned.position):
                unconfirmed.pop(key, None)  # the newest value last, the metadata after the keys
                unconfirmed[key] = value
            meta = unconfirmed.pop(META_KEY)
            self._flush_ends[number] = send_flush(outputs, self.topic, number, [*unconfirmed.items(), (META_KEY, meta)])
            self._clean.pop(number, None)
            unconfirmed[META_KEY] = meta
        self._changed_at = self._behind_since = None

    def confirmed(self) -> None:
        """The transaction with the flushes committed: each store on disk is its changelog up to
        the end of its flush, at the position its metadata named (nothing is learned between
        the flush and its commit)."""
        self._unconfirmed.clear()
        for number, last in self._flush_ends.items():
            self._committed_at[number] = self.owned[number].position
            end = offset_after(last)
            if end is not None:
                self._clean[number] = end
        self._flush_ends.clear()

    # ---- assignment --------------------------------------------------------------------------

    def on_assignment(self, partitions: set[int]) -> None:
        """Release partitions no longer owned; restore newly owned ones before any prediction (their
        changelog ranges asked through one client)."""
        for number in sorted(set(self.owned) - partitions):
            self._release(number)
        new = sorted(partitions - set(self.owned))
        if not new:
            return
        offsets = make_offsets_client(self.worker.kafka, self.worker.config.kafka_client)
        try:
            for number in new:
                self._restore(number, offsets)
        finally:
            offsets.close(autocommit=False)

    def _release(self, number: int) -> None:
        owned = self.owned.pop(number)
        self._unconfirmed.pop(number, None)  # its next owner restores the committed state
        self._flush_ends.pop(number, None)
        self._clean.pop(number, None)
        self._committed_at.pop(number, None)
        owned.table.close()
        shutil.rmtree(owned.table.path, ignore_errors=True)
        log.info("keyed state of partition %d released", number)

    def _restore(self, number: int, offsets) -> None:
        w = self.worker
        started = time.monotonic()
        path = self.directory / f"p{number}"
        table = self._new_table(path)
        start = self._reusable(table)
        if start is None and table.clean_offset is not None:  # kept, but too old to restore on
            table = self._wiped(table)
        read = read_changelog(w.kafka, w.config.kafka_client, self.topic, number, start=start, offsets=offsets)
        try:
            try:
                table.restore(read)
            except ChangelogRangeError as error:  # recreated or truncated since: not this copy's log
                log.info("keyed state of partition %d: the local copy is not restored on (%s)", number, error)
                start, table = None, self._wiped(table)
                read = read_changelog(w.kafka, w.config.kafka_client, self.topic, number, offsets=offsets)
                table.restore(read)
        except (InvalidKeyState, ValueError) as error:  # bytes of the topic: untrusted
            table.close()
            raise KeyedStateError(f"changelog {self.topic}[{number}] holds a state that is refused: {error}") from None
        self.reused += start is not None
        here = w.labeled.next_offset()
        restored_at = table.position if table.position is not None else 0
        owned = OwnedPartition(table, restored_at)
        self._committed_at[number] = restored_at
        self.relearned_from = None
        if restored_at < here:
            self._relearn(number, owned, here)
        self.owned[number] = owned
        self.restores += 1
        relearned = ""
        if restored_at < here:
            relearned = (f", relearned to {here} from " + ("the log's beginning" if self.relearned_from is None else
                                                           f"the checkpoint at labeled offset {self.relearned_from}"))
        local = "" if start is None else f"a local copy and offset {start} of "
        log.info("keyed state of partition %d restored from %s%s[%d] (%d records, %d keys) at labeled offset %d%s "
                 "in %.1f s", number, local, self.topic, number, read.records, len(table), restored_at, relearned,
                 time.monotonic() - started)

    def _reusable(self, table: StoredKeyTable) -> int | None:
        """The changelog offset to restore a store left on disk from: the one its clean close
        recorded, if that was within the changelog's delete.retention.ms (a key deleted after it
        still has its tombstone in the changelog; a minute spare for clocks). None: restore anew."""
        if table.clean_offset is None or table.clean_at_ms is None:
            return None
        age_ms = time.time() * 1000 - table.clean_at_ms
        return table.clean_offset if -60_000 <= age_ms < self.tombstones_kept_ms - 60_000 else None

    def _wiped(self, table):
        """An empty store in place of `table` (closed, removed)."""
        table.discard()
        return self._new_table(table.path)

    def _new_table(self, path: Path):
        """A partition's store at `path`: one view's, or a store per view (ViewTables)."""
        names = self.worker.config.view_names
        if len(names) > 1:
            return ViewTables(path, names, lambda: len(self.personal.classes_), idle_after=self.personal.idle_after)
        return StoredKeyTable(path, lambda: len(self.personal.classes_), idle_after=self.personal.idle_after)

    def _relearn(self, number: int, owned: OwnedPartition, until: int) -> None:
        """Learn the events of partition `number` in [owned.position, until) with the global
        model of each one's offset: a pass over the labeled log with a model and lessons of its
        own (the worker's stay as they are), from the newest checkpoint of this worker's
        directory at or before owned.position, else from the log's beginning."""
        w = self.worker
        config = w.config
        start = w.checkpoints.learned_at_or_before(owned.position)
        model, lessons, from_offset = start or (config.build_model(), LabeledLessons(LearnedIds(config.remember_ids)),
                                                None)
        relearning = PartitionedKeys(config.build_personal(model), self.partitions, {number: owned})
        shadow = SimpleNamespace(
            config=config, kafka=w.kafka, model=model, recorder=None, metrics=PrequentialMetrics(),
            lessons=lessons, labeled_rejections=[],
            telemetry=WorkerMetrics(), checkpoints=SimpleNamespace(learned_since_checkpoint=0,
                                                                   changed_since_checkpoint=False),
            _processed=0, keyed=relearning)
        shadow.featurise = lambda events, learning=True: featurise_views(
            events, learning, model=model, reads_text=config.reads_text,
            views=[(w.text_featurizer, w.mail_featurizer), *w.more_views])
        learner = Learner(shadow)
        reader = make_labeled_reader(w.kafka, config.kafka_client)
        try:
            tp = TopicPartition(*next(iter(w.labeled.positions)))
            reader.assign([tp])
            beginning = reader.beginning_offsets([tp])[tp]
            if beginning > (from_offset or 0):
                raise KeyedStateError(
                    f"keyed state of partition {number} is at labeled offset {owned.position} and must be "
                    f"relearned to {until} from offset {from_offset or 0} (the newest checkpoint before it, or the "
                    f"beginning), but {tp.topic}[{tp.partition}] now starts at offset {beginning} (retention)")
            reader.seek(tp, from_offset or 0)
            while reader.position(tp) < until:
                batch = [record for record in reader.poll(timeout_ms=500).get(tp, ()) if record.offset < until]
                if batch:
                    learner.learn(batch)
        finally:
            reader.close(autocommit=False)
        owned.position = until
        self.relearned_from = from_offset
        if relearning._changed_at is not None and self._changed_at is None:
            self._changed_at = time.monotonic()

    def close(self) -> None:
        """Close every store; one whose last flush was committed, with nothing learned since,
        records the changelog offset it is whole at (a restart restores only the tail)."""
        for number, owned in self.owned.items():
            clean = self._clean.get(number) if not self._unconfirmed.get(number) and not owned.table.unflushed else None
            owned.table.close(changelog_offset=clean)
        self.owned.clear()


class KeyedStateError(RuntimeError):
    """The keyed state cannot run as configured; one line."""
