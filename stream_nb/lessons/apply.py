"""The rules run on a model: a labeled batch in labeled order, duplicates and corrections included.

`LabeledLessons.run` is what the worker and replay do with a batch of labeled events. Events
the memory has nothing to say about (no ``unlearn``, an id not remembered, not repeated earlier
in the run) go through the caller's batch path together, at batch speed; each other event
goes alone, in its place: its `plan` (stream_nb.lessons.rules), the take-back
(``model.unlearn_many`` of its own features), then the learning, which the caller's path
decides by its training mode, then `settle`. The memory is told the forgetting epoch each
event was learned at: under maintenance alone (decay every ``evict_every`` labeled events,
``half_life`` set) the epoch before the labeled event of rank r is
``forgetting_epoch + (labeled_seen + r) // evict_every - labeled_seen // evict_every``, so a
batch needs no per-event call to know it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stream_nb.lessons.memory import LearnedIds
from stream_nb.lessons.rules import LEARNED, plan, settle

__all__ = ["LabeledLessons", "Lesson", "learning_epochs"]


@dataclass(frozen=True, slots=True)
class Lesson:
    """What became of one event: `proba` its prediction (None when it was not predicted: a
    duplicate, a take-back only), `learned` whether it was learned, `outcome` one of
    rules.OUTCOMES (None: an unlabeled event, only predicted). Only a `learned` outcome (a
    message seen for the first time) is scored by the prequential metrics: the others were
    scored when they first came."""

    proba: dict | None
    learned: bool
    outcome: str | None

    @property
    def scored(self) -> bool:
        return self.outcome == LEARNED and bool(self.proba)


def learning_epochs(model, count: int) -> list[int]:
    """The forgetting epoch at which each of the model's next `count` labeled events is learned."""
    epoch = int(getattr(model, "forgetting_epoch", 0))
    every = getattr(model, "evict_every", None)
    if getattr(model, "half_life", None) is None or not every:
        return [epoch] * count
    seen = int(model.labeled_seen)
    base = seen // every
    return [epoch + (seen + k) // every - base for k in range(count)]


class LabeledLessons:
    """A memory of learned ids (`LearnedIds`) and the counts of what the rules decided."""

    def __init__(self, memory: LearnedIds) -> None:
        self.memory = memory
        self.outcomes: Counter = Counter()

    def plain_run(self, ids: Sequence, labels: Sequence, unlearns: Sequence, start: int) -> int:
        """The end of the run of events from `start` that the rules leave alone: unlabeled
        events (label None, no unlearn: replay's questions, only predicted) and labeled ones the
        rules would plan as `learned` (no unlearn, an id neither remembered nor earlier in the run)."""
        memory, seen, end = self.memory, set(), start
        while end < len(ids):
            event_id = ids[end]
            if unlearns[end] is not None:
                break
            if labels[end] is not None and event_id is not None:  # no id (a bare corpus): never remembered
                if event_id in seen or event_id in memory:
                    break
                seen.add(event_id)
            end += 1
        return end

    def run(self, model, ids: Sequence, labels: Sequence, unlearns: Sequence, X,
            learn: Callable[[int, int], list], reject: Callable[[int, Exception], None]) -> list[Lesson | None]:
        """One Lesson per event, None for an event refused. `learn(start, stop)` predicts the
        events [start, stop) and learns the labeled ones as the caller's training mode says
        (their own labels; an event it refuses gets None, as the caller dead-letters it) and
        returns a (proba, learned) per event. An unlabeled event's Lesson has outcome None. A
        take-back the model refuses (NotLearned: the memory and the model disagree, e.g. a
        state restored without its memory) goes to `reject`, and the event is not learned
        either: its id is forgotten, so the memory holds no claim the model cannot honour."""
        n = len(ids)
        if not (len(labels) == len(unlearns) == len(X) == n):
            raise ValueError("ids, labels, unlearns and X must have one entry per event")
        lessons: list[Lesson | None] = [None] * n
        memory, start = self.memory, 0
        while start < n:
            stop = self.plain_run(ids, labels, unlearns, start)
            if stop > start:
                epochs = iter(learning_epochs(model, sum(label is not None for label in labels[start:stop])))
                for k, result in enumerate(learn(start, stop)):
                    if result is None:  # refused before the model counted it: no place on the labeled clock
                        continue
                    label = labels[start + k]
                    epoch = next(epochs) if label is not None else None
                    proba, learned = result
                    if label is None:
                        lessons[start + k] = Lesson(proba, False, None)
                        continue
                    if learned and ids[start + k] is not None:
                        memory.record_learned(ids[start + k], label, epoch)
                    lessons[start + k] = Lesson(proba, bool(learned), LEARNED)
                    self.outcomes[LEARNED] += 1
                start = stop
                continue
            lessons[start] = self._one(model, start, ids[start], labels[start], unlearns[start], X, learn, reject)
            start += 1
        return lessons

    def _one(self, model, i: int, event_id: str, label, unlearn, X, learn, reject) -> Lesson | None:
        if event_id is None:
            reject(i, ValueError("a correction (unlearn) needs the id its message was learned under"))
            return None
        planned = plan(event_id, label, unlearn, self.memory.get(event_id))
        back = planned.take_back
        if back is not None:
            try:
                model.unlearn_many(X[i:i + 1], [back.label], [back.weight], learned_at=back.learned_at)
            except ValueError as error:  # NotLearned, or features the model cannot read
                self.memory.forget(event_id)
                reject(i, error)
                return None
        proba, learned = None, False
        if planned.learn is not None:
            epoch = learning_epochs(model, 1)[0]
            result = learn(i, i + 1)[0]
            if result is None:  # refused by the model: what was taken back stays out
                if back is not None:
                    self.memory.forget(event_id)
                return None
            proba, learned = result
            settle(self.memory, event_id, planned, learned=bool(learned), epoch=epoch)
        else:
            settle(self.memory, event_id, planned, learned=False, epoch=0)
        self.outcomes[planned.outcome] += 1
        return Lesson(proba, bool(learned), planned.outcome)
