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
from itertools import compress
from typing import NamedTuple

from stream_nb.lessons.memory import LearnedIds
from stream_nb.lessons.rules import LEARNED, plan, settle

__all__ = ["REFUSED", "LabeledLessons", "Lessons", "learning_epochs"]


REFUSED = "refused"  # the outcome of an event the model refused (dead-lettered by the caller)


class Lessons(NamedTuple):
    """What became of a batch's events, one entry an event in three columns (lists, made at
    batch speed): `probas` each prediction (None when the event was not predicted: a
    duplicate, a take-back only, a refused event), `learned` whether it was learned,
    `outcomes` one of rules.OUTCOMES, None for an unlabeled event (only predicted), or REFUSED.
    Only a `learned` outcome (a message seen for the first time) is scored by the prequential
    metrics: the others were scored when they first came."""

    probas: list
    learned: list
    outcomes: list

    def scored(self, i: int) -> bool:
        return self.outcomes[i] == LEARNED and bool(self.probas[i])


def _mask(flag) -> int | None:
    """The experts' mask of a learned flag: an `Experts` model says which of its experts learned
    an event with an int mask when only some did (True: all of them, or the one model); else None."""
    return flag if type(flag) is int else None


def _masks(flags: list) -> list | None:
    """`_mask` of each of a run's learned flags; None when no flag is a mask."""
    if all(type(flag) is bool for flag in flags):
        return None
    return list(map(_mask, flags))


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
        if start == 0 and unlearns.count(None) == len(unlearns):  # the common batch, at C speed
            remembered = ids if None not in labels and None not in ids else [
                event_id for event_id, label in zip(ids, labels) if label is not None and event_id is not None]
            if len(set(remembered)) == len(remembered) and self.memory.none_of(remembered):
                return len(ids)
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
            learn: Callable[[int, int], list], reject: Callable[[int, Exception], None],
            aside: Callable[[int], None] | None = None) -> Lessons:
        """The Lessons of a batch. `learn(start, stop)` predicts the events [start, stop) and
        learns the labeled ones as the caller's training mode says (their own labels; an event
        it refuses gets None, as the caller dead-letters it) and returns a (proba, learned) per
        event. A take-back the model refuses (NotLearned: the memory and the model disagree,
        e.g. a state restored without its memory) goes to `reject`, and the event is not
        learned either: its id is forgotten, so the memory holds no claim the model cannot honour.
        `aside(i)`: an event the model learns nothing of by the plan (a duplicate, a take-back
        alone) after its take-back, for state beside the model with rules of its own (a key's
        counts, stream_nb.model.personal); a ValueError from it goes to `reject`."""
        n = len(ids)
        if not (len(labels) == len(unlearns) == len(X) == n):
            raise ValueError("ids, labels, unlearns and X must have one entry per event")
        lessons = Lessons([None] * n, [False] * n, [REFUSED] * n)
        start = 0
        while start < n:
            stop = self.plain_run(ids, labels, unlearns, start)
            if stop > start:
                self._plain(model, ids, labels, start, stop, learn, lessons)
                start = stop
                continue
            proba, learned, outcome = self._one(model, start, ids[start], labels[start], unlearns[start], X, learn,
                                                reject, aside)
            lessons.probas[start], lessons.learned[start], lessons.outcomes[start] = proba, learned, outcome
            start += 1
        return lessons

    def _plain(self, model, ids, labels, start: int, stop: int, learn, lessons: Lessons) -> None:
        """Events [start, stop) of a plain run through the caller's batch path, their lessons
        into `lessons`, the learned ones remembered (in one call: the run's ids are new)."""
        run_labels = labels[start:stop]
        # the clock before the run: the epoch of its k-th labeled event that the model counts
        epochs = learning_epochs(model, len(run_labels) - run_labels.count(None))
        results = learn(start, stop)
        if None not in results and None not in run_labels:  # every event labeled and read: list operations
            probas = [result[0] for result in results]
            flags = [result[1] for result in results]
            learned = [bool(flag) for flag in flags]
            lessons.probas[start:stop], lessons.learned[start:stop] = probas, learned
            lessons.outcomes[start:stop] = [LEARNED] * (stop - start)
            run_ids = ids[start:stop]
            if None in run_ids:  # an event without an id is never remembered
                keep = [flag and event_id is not None for flag, event_id in zip(learned, run_ids)]
            else:
                keep = learned
            if any(keep):
                masks = _masks(flags)
                self.memory.record_new(list(compress(run_ids, keep)), list(compress(run_labels, keep)),
                                       list(compress(epochs, keep)), known_new=True,
                                       by=None if masks is None else list(compress(masks, keep)))
            self.outcomes[LEARNED] += stop - start
            return
        epochs = iter(epochs)
        learned_ids, learned_labels, learned_at, learned_by = [], [], [], []
        n_labeled = 0
        for k, result in enumerate(results, start):
            if result is None:  # refused before the model counted it: no place on the labeled clock
                continue
            label = labels[k]
            proba, learned = result
            lessons.probas[k], lessons.learned[k] = proba, bool(learned) and label is not None
            if label is None:
                lessons.outcomes[k] = None
                continue
            epoch = next(epochs)
            n_labeled += 1
            lessons.outcomes[k] = LEARNED
            if learned and ids[k] is not None:
                learned_ids.append(ids[k])
                learned_labels.append(label)
                learned_at.append(epoch)
                learned_by.append(_mask(learned))
        if learned_ids:
            self.memory.record_new(learned_ids, learned_labels, learned_at, known_new=True, by=learned_by)
        self.outcomes[LEARNED] += n_labeled

    def _one(self, model, i: int, event_id: str, label, unlearn, X, learn, reject, aside) -> tuple:
        """(proba, learned, outcome) of one event the rules act on."""
        if event_id is None:
            reject(i, ValueError("a correction (unlearn) needs the id its message was learned under"))
            return None, False, REFUSED
        planned = plan(event_id, label, unlearn, self.memory.get(event_id))
        back = planned.take_back
        if back is not None:
            try:
                model.unlearn_many(X[i:i + 1], [back.label], [back.weight], learned_at=back.learned_at,
                                   **({} if back.by is None else {"learned_by": back.by}))
            except ValueError as error:  # NotLearned, or features the model cannot read
                self.memory.forget(event_id)
                reject(i, error)
                return None, False, REFUSED
        proba, learned = None, False
        if planned.learn is not None:
            epoch = learning_epochs(model, 1)[0]
            result = learn(i, i + 1)[0]
            if result is None:  # refused by the model: what was taken back stays out
                if back is not None:
                    self.memory.forget(event_id)
                return None, False, REFUSED
            proba, learned = result
            settle(self.memory, event_id, planned, learned=bool(learned), epoch=epoch,
                   by=_mask(learned))
        else:
            settle(self.memory, event_id, planned, learned=False, epoch=0)
            if aside is not None:
                try:
                    aside(i)
                except ValueError as error:
                    reject(i, error)
                    return None, False, REFUSED
        self.outcomes[planned.outcome] += 1
        return proba, bool(learned), planned.outcome
