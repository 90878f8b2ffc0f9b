"""The global learner: labeled records from the labeled log (stream_nb.worker.labeled) decoded,
screened, featurised and learned in order, through the rules of duplicates and corrections
(stream_nb.lessons), each first sending scored before it is learned (the prequential metrics).
A refused event is a labeled dead letter, published later by the partition's owner
(stream_nb.worker.commits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stream_nb.config import beyond_max_classes
from stream_nb.events import Event
from stream_nb.lessons import LEARNED, id_of_keyed
from stream_nb.model.training import event_sizes, predict_learn
from stream_nb.worker.records import (
    batch_or_one_by_one,
    count_consumed,
    decode,
    featurise_or_reject,
    refusal,
    rejected_by_us,
)

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker


class Learner:
    """Learns labeled records into the worker's model (worker.model, worker.lessons, worker.metrics,
    worker.labeled_rejections: the state a checkpoint holds)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._offsets: dict[int, int] = {}  # id(event) -> its labeled offset, for the keyed role

    def learn(self, records: list) -> None:
        """Decode, predict (for the prequential metrics) and learn labeled records in order."""
        w = self.worker
        count_consumed(w.telemetry, records)
        events, origin = decode(records, labeled=True, rejected=w.labeled_rejections.append, kafka=w.kafka,
                                classes=w.config.classes, keyed=w.keyed is not None)
        events, origin = self._screen_labels(events, origin)
        if events:
            events, origin, X = featurise_or_reject(events, origin, w.labeled_rejections.append, w.featurise)
        if events:
            self._offsets = {id(event): record.offset for event, record in zip(events, origin)}
            lessons = self._learn_lessons(events, origin, X)
            sizes = (event_sizes(X) if w.recorder is not None and w.recorder.score_scale != "none"
                     else None)  # the recorder's scores per sqrt(distinct features)
            for i, (event, proba, outcome) in enumerate(zip(events, lessons.probas, lessons.outcomes)):
                # a first sending only (a refused event is a dead letter; duplicates and corrections were
                # scored when they first came), predicted with some class known (as River and replay)
                if outcome == LEARNED and proba:
                    predicted = max(proba, key=proba.get)
                    w.metrics.update(event.label, predicted, proba)
                    if w.recorder is not None:
                        w.recorder.update(event.label, predicted, proba, None if sizes is None else sizes[i])
            learned_now = sum(lessons.learned)
            w.checkpoints.learned_since_checkpoint += learned_now
            w.telemetry.learned.inc(learned_now)  # once a batch: a counter's lock costs ~0.5 us
        w._processed += len(records)
        w.checkpoints.changed_since_checkpoint = True

    def _learn_lessons(self, events: list[Event], origin: list, X) -> list:
        """The labeled batch through the rules of duplicates and corrections (stream_nb.lessons):
        its Lessons (a refused event is dead-lettered here)."""
        w = self.worker

        def learn(start: int, stop: int) -> list:
            return batch_or_one_by_one(w.model, events[start:stop], origin[start:stop], X[start:stop],
                                       self.predict_then_learn, w.labeled_rejections.append, "learning")

        def reject(i: int, error: Exception) -> None:
            w.labeled_rejections.append(refusal(events[i], error, "unlearning", origin[i]))

        ids = [event.id for event in events]
        aside = None
        if w.keyed is not None:  # one lesson a user: ids scoped by key; a key's rules of its own
            ids = [None if event.id is None else id_of_keyed(event.key, event.id) for event in events]

            def aside(i: int) -> None:
                w.keyed.key_lesson(events[i], X[i:i + 1], self._offsets[id(events[i])])

        before = dict(w.lessons.outcomes)
        lessons = w.lessons.run(w.model, ids, [event.label for event in events],
                                [event.unlearn for event in events], X, learn, reject, aside)
        for outcome, count in w.lessons.outcomes.items():
            if count != before.get(outcome, 0):
                w.telemetry.lessons.labels(outcome).inc(count - before.get(outcome, 0))
        return lessons

    def predict_then_learn(self, events: list[Event], X) -> list[tuple[dict, bool]]:
        w = self.worker
        if w.keyed is not None:  # each event of an owned key first decided by its key (stream_nb.worker.keyed)
            offsets = [self._offsets[id(event)] for event in events]
            return w.keyed.predict_then_learn(w.model, events, X, offsets, w.config.training)
        probabilities, learned = predict_learn(w.model, X, [event.label for event in events], **w.config.training)
        return list(zip(probabilities, learned))

    def _screen_labels(self, events: list[Event], origin: list) -> tuple[list, list]:
        """Labels 1 and "1" would be two classes with one JSON name: keep the first type seen.
        A label that would be a class beyond [model] max_classes is set aside too."""
        w = self.worker
        known = {str(label): label for label in w.model.classes_}
        kept, kept_origin = [], []
        for event, record in zip(events, origin):
            if event.label is None:  # a take-back only (unlearn): it adds no class
                kept.append(event)
                kept_origin.append(record)
                continue
            refused = beyond_max_classes(event.label, known, w.config.max_classes)
            if refused is not None:
                w.labeled_rejections.append(rejected_by_us(event, "too_many_classes", refused, record))
                continue
            existing = known.setdefault(str(event.label), event.label)
            if type(existing) is not type(event.label):
                w.labeled_rejections.append(rejected_by_us(
                    event, "label_type_conflict",
                    f"label {event.label!r} clashes with the class {existing!r} already learned", record))
                continue
            kept.append(event)
            kept_origin.append(record)
        return kept, kept_origin
