"""Duplicates and corrections: what one labeled event asks of the model, given what was learned.

`plan(event_id, label, unlearn, learned)` reads a labeled event (its `label`, and `unlearn` on
a correction) and what the memory (`LearnedIds`) holds for its id, and returns a `Plan`: what
to take back (a `Learned`: class, epoch, weight), what to learn, and an outcome for the
counters. The caller runs it on the model in this order:

    1. ``take_back``: ``model.unlearn_one(x, take_back.label, take_back.weight,
       learned_at=take_back.learned_at)`` (the message's own features: same id, same message);
    2. ``learn``: the training mode decides, against the model as step 1 left it, whether to
       learn the event as ``learn`` (mode ``all``: always), as for any labeled event;

then hands back what was actually learned with `settle`, which updates the memory. Under
``on_error`` and ``thick_threshold`` a corrected message is thus decided as a message the model
has not learned: its earlier learning, which pulls toward the wrong class, is out first. Plans are
made one event at a time in labeled order, each after the previous one was settled (an id may
come twice in one batch). Nothing here touches a model: the rules are pure, so every replica
that reads the same labeled log makes the same plans.

The rules (``R`` the class the memory holds for the id, ``-`` none)
--------------------------------------------------------------------
==========  ===========  =====  ========================  =========  ========================
``label``   ``unlearn``  ``R``  outcome                   take back  learn
==========  ===========  =====  ========================  =========  ========================
L           --           --     ``learned``               nothing    L
L           --           L      ``duplicate``             nothing    nothing
L           --           M      ``relearned``             M          L
L or null   U            U      ``corrected``             U          L (null: nothing)
L           U            L      ``duplicate``             nothing    nothing
L or null   U            M      ``correction_mismatch``   M          L (null: nothing)
L or null   U            --     ``correction_of_unknown`` nothing    L (null: nothing)
==========  ===========  =====  ========================  =========  ========================

- **Outcomes are what was planned**: ``learned``, ``relearned`` and the corrections with a
  label are learned if the training mode decides so (counted as learned events as before).
- **Only what was learned is taken back**, and exactly what was (its class, epoch and weight
  as remembered). The producer's ``unlearn`` names what it believes was learned; where the
  memory says otherwise (``correction_mismatch``) the memory wins, since taking back a class
  that was never added would leave counts below zero. An id the memory does not hold (never
  learned: a thick threshold skipped it; fallen out of the memory; ``remember_ids = 0``) has
  nothing taken back (``correction_of_unknown``) and is learned as ``label``.
- **A duplicate is not learned again**: the same label again, or a correction whose ``label``
  the id is already learned as (a correction delivered twice changes the state once).
- **A plain labeled event of an id learned as another class is a relabel** (``relearned``), as
  sa-learn forgets a message and learns it again when told its other class: the latest label
  wins, so the state is as if the message had only ever been learned as it; counted apart
  from explicit corrections so that a producer sending conflicting labels shows.
- **``unlearn`` equal to ``label``** never reaches the rules: the decoder refuses it
  (``unlearn_is_label``); `plan` raises ValueError for it, as for an event with neither
  ``label`` nor ``unlearn``.
- With ``mode = "all"`` and no forgetting, running the plans of a stream ends in the state of
  the same messages learned once each under their last label (their corrected one), skipped
  where the last word was a take-back; with fewer remembered ids than the stream needs, a
  correction of a forgotten id is ``correction_of_unknown`` and the old class stays learned.
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_nb.lessons.memory import Learned, LearnedIds

__all__ = ["OUTCOMES", "Plan", "plan", "settle",
           "LEARNED", "DUPLICATE", "RELEARNED", "CORRECTED", "CORRECTION_MISMATCH", "CORRECTION_OF_UNKNOWN"]

LEARNED = "learned"
DUPLICATE = "duplicate"
RELEARNED = "relearned"
CORRECTED = "corrected"
CORRECTION_MISMATCH = "correction_mismatch"
CORRECTION_OF_UNKNOWN = "correction_of_unknown"
#: Every outcome `plan` gives (a counter each: worker metrics, replay's report).
OUTCOMES = (LEARNED, DUPLICATE, RELEARNED, CORRECTED, CORRECTION_MISMATCH, CORRECTION_OF_UNKNOWN)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one labeled event asks: take back `take_back` (None: nothing), then learn the event
    as `learn` if the training mode decides so (None: learn nothing); `outcome` is one of
    OUTCOMES. `take_back` is the memory's record, so it carries the epoch and weight to undo."""

    outcome: str
    take_back: Learned | None
    learn: str | int | None


def _same_class(a, b) -> bool:
    return type(a) is type(b) and a == b  # 1 and "1" are two classes


def _label_problem(name: str, value) -> str | None:
    if value is None or type(value) is int or (type(value) is str and value):
        return None
    return f"{name} must be a non-empty str, an int or None, got {value!r}"


def plan(event_id: str, label: str | int | None, unlearn: str | int | None, learned: Learned | None) -> Plan:
    """The plan for a labeled event (the module's table): `label` (None only on a take-back),
    `unlearn` (None: not a correction), `learned` the memory's record of `event_id` (None: not
    remembered). ValueError for an event the decoder refuses: no label and no unlearn, or
    unlearn equal to label."""
    problem = (_label_problem("label", label) or _label_problem("unlearn", unlearn)
               or (None if type(event_id) is str and event_id else f"an id must be a non-empty str, got {event_id!r}"))
    if problem:
        raise ValueError(problem)
    if learned is not None and not isinstance(learned, Learned):
        raise TypeError(f"learned must be a Learned or None, got {type(learned).__name__}")
    if unlearn is None:
        if label is None:
            raise ValueError(f"event {event_id!r} has neither label nor unlearn: nothing to learn or take back")
        if learned is None:
            return Plan(LEARNED, None, label)
        if _same_class(learned.label, label):
            return Plan(DUPLICATE, None, None)
        return Plan(RELEARNED, learned, label)
    if label is not None and _same_class(unlearn, label):
        raise ValueError(f"event {event_id!r}: unlearn and label are both {label!r} (refused as unlearn_is_label)")
    if learned is None:
        return Plan(CORRECTION_OF_UNKNOWN, None, label)
    if label is not None and _same_class(learned.label, label):
        return Plan(DUPLICATE, None, None)
    if _same_class(learned.label, unlearn):
        return Plan(CORRECTED, learned, label)
    return Plan(CORRECTION_MISMATCH, learned, label)


def settle(memory: LearnedIds, event_id: str, planned: Plan, *, learned: bool, epoch: int,
           weight: float = 1.0, by: int | None = None) -> list[str]:
    """The memory after `planned` ran: `learned` says whether the event was learned as
    `planned.learn` (the training mode may have skipped it), at forgetting epoch `epoch` with
    `weight` (by the experts of mask `by`; None: the whole model). Learned: the id is remembered as that class (moved to the end). Not learned after
    a take-back: the id is forgotten (nothing of it is in the model any more). Otherwise the
    memory stays as it was (a duplicate keeps its place: it was not learned again). Returns
    the ids evicted. ValueError, changing nothing, for `learned` without a class to learn."""
    if learned and planned.learn is None:
        raise ValueError(f"event {event_id!r}: the plan ({planned.outcome}) learns nothing, so it cannot have been learned")
    if learned:
        return memory.record_learned(event_id, planned.learn, epoch, weight, by)
    if planned.take_back is not None:
        memory.forget(event_id)
    return []
