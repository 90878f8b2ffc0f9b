"""The ids the worker learned, and as what: a bounded memory in labeled order.

`LearnedIds` maps an event's id to what its learning added to the model, `Learned(label,
learned_at, weight, by)`: the class it was learned as, the model's forgetting epoch when it was
(`model.forgetting_epoch`, so a take-back removes what decay has left of it), its weight, and,
for a model of several experts (stream_nb.model.experts) of which only some learned it, which:
`by`, a bit mask of the experts (None: the whole model).
It plays the part of SpamAssassin's seen-database: the rules of `stream_nb.lessons.rules` read
it to tell a duplicate from a correction, and the caller writes back what was actually learned.

Order and eviction
------------------
Entries are kept in the order they were learned (labeled order). Learning an id again (under
another class: a correction, a relabel) moves it to the end. When an entry would make the
memory hold more than `capacity` ids, the entry learned longest ago goes first. Nothing but the
sequence of `record_learned` / `forget` calls decides what is kept, so replicas that read the
same labeled log hold the same memory. Epochs never decrease along that order (each entry is
learned at the model's epoch of its time, which only grows), which `record_learned` and
`from_state` check. ``capacity = 0`` remembers nothing.

State
-----
`to_state()` is plain JSON-able data (no pickle)::

    {"capacity": int, "ids": [str], "labels": [str | int], "learned_at": [int],
     "weights": [float], "learned_by": [int | null]}

the lists in labeled order (oldest first); "learned_by" only when some entry has a mask. `from_state` checks every invariant before it
builds anything and raises `LearnedIdsStateError` naming the first one broken.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["DEFAULT_REMEMBER_IDS", "Learned", "LearnedIds", "LearnedIdsStateError", "STATE_KEYS", "id_of_keyed"]

#: [training] remember_ids when the configuration does not set it. A remembered id costs about
#: 245 bytes plus the id in memory and 22 plus the id in a checkpoint's JSON (measured with
#: 35-character Message-IDs: 279 and 57 bytes; 100,000 ids: 28 MB and 5.7 MB).
DEFAULT_REMEMBER_IDS = 100_000

STATE_KEYS = ("capacity", "ids", "labels", "learned_at", "weights")
LEARNED_BY = "learned_by"  # the optional column of experts' masks
MAX_EXPERTS = 62  # bits of a mask (a JSON number stays an exact int far beyond)
_DIGEST_VERSION = b"stream-nb learned ids 1\n"


def id_of_keyed(key: str | None, event_id: str) -> str:
    """The id a memory knows a keyed event by in a per-key deployment ([personal]): the key and
    the id as a JSON pair, so that one message sent to two users (one Message-ID, two keys) is
    two lessons, each its user's, and no key's id can pass for another's."""
    return json.dumps([key, event_id], ensure_ascii=False, separators=(",", ":"))


class LearnedIdsStateError(ValueError):
    """A saved memory that breaks an invariant; the message names it."""


class Learned(NamedTuple):
    """What learning one id added: its class, the forgetting epoch it was learned at, its weight,
    and the experts that learned it (a bit mask; None: the whole model)."""

    label: str | int
    learned_at: int
    weight: float
    by: int | None = None


def _label_problem(label) -> str | None:
    if type(label) is int or (type(label) is str and label):
        return None
    return f"a class must be a non-empty str or an int, got {label!r}"


def _id_problem(event_id) -> str | None:
    if type(event_id) is not str or not event_id:
        return f"an id must be a non-empty str, got {event_id!r}"
    try:
        event_id.encode("utf-8")
    except UnicodeEncodeError:
        return f"id {event_id!a} holds an unpaired surrogate"
    return None


def _epoch_problem(epoch) -> str | None:
    if type(epoch) is not int or epoch < 0:
        return f"an epoch must be an int >= 0, got {epoch!r}"
    return None


def _weight_problem(weight) -> str | None:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        return f"a weight must be a finite number > 0, got {weight!r}"
    return None


def _mask_problem(mask) -> str | None:
    if mask is None or (type(mask) is int and 0 < mask < 2**MAX_EXPERTS):
        return None
    return f"the experts that learned an id must be a bit mask from 1 to 2**{MAX_EXPERTS} - 1 or null, got {mask!r}"


def _capacity_problem(capacity) -> str | None:
    if type(capacity) is not int or capacity < 0:
        return f"capacity must be an int >= 0, got {capacity!r}"
    return None


class LearnedIds:
    """A bounded map id -> `Learned`, in labeled order (see the module's doc)."""

    def __init__(self, capacity: int) -> None:
        problem = _capacity_problem(capacity)
        if problem:
            raise ValueError(problem)
        self._capacity = capacity
        self._entries: OrderedDict[str, Learned] = OrderedDict()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, event_id) -> bool:
        return event_id in self._entries

    def __iter__(self) -> Iterator[str]:
        """The ids, oldest learned first."""
        return iter(self._entries)

    def items(self) -> Iterator[tuple[str, Learned]]:
        """(id, Learned), oldest learned first."""
        return iter(self._entries.items())

    def get(self, event_id: str) -> Learned | None:
        """What `event_id` was learned as, or None when it is not remembered."""
        return self._entries.get(event_id)

    def last_epoch(self) -> int:
        """The epoch of the entry learned last (0 when empty): the next one may not be earlier."""
        return next(reversed(self._entries.values())).learned_at if self._entries else 0

    def record_learned(self, event_id: str, label: str | int, learned_at: int, weight: float = 1.0,
                       by: int | None = None) -> list[str]:
        """Remember that `event_id` was learned as `label` at epoch `learned_at` with `weight`
        (by the experts of mask `by`; None: the whole model): a new entry, or one moved to the
        end. Returns the ids evicted to stay within capacity (oldest first; [] mostly). Raises
        ValueError, changing nothing, for a bad argument or an epoch before the last entry's
        (labeled order is epoch order)."""
        problem = (_id_problem(event_id) or _label_problem(label) or _epoch_problem(learned_at)
                   or _weight_problem(weight) or _mask_problem(by))
        if problem:
            raise ValueError(problem)
        if self._capacity == 0:
            return []
        last = self.last_epoch()
        if learned_at < last:
            raise ValueError(f"id {event_id!r} learned at epoch {learned_at}, before the last remembered "
                             f"one ({last}): entries are recorded in labeled order")
        self._entries.pop(event_id, None)
        self._entries[event_id] = Learned(label, learned_at, float(weight), by)
        return self._evict()

    def none_of(self, event_ids: list) -> bool:
        """Whether no id of `event_ids` is remembered."""
        return self._entries.keys().isdisjoint(event_ids)

    def record_new(self, event_ids: list, labels: list, learned_at: list, *, known_new: bool = False,
                   by: list | None = None) -> list[str]:
        """`record_learned` of ids not remembered, each once, in labeled order, with weight 1:
        the learned events of a batch the rules left alone, at batch speed (one check of the
        lists, then one insert an id; the evictions at the end, which keep the same entries as
        one call at a time would). Returns the ids evicted. ValueError, changing nothing, for an
        id already remembered or repeated, a bad id, class or epoch, epochs out of order.
        `known_new`: the caller has just proved the ids new and distinct (LabeledLessons'
        plain run), so that check is not made twice. `by`: each id's experts' mask (None: every
        id by the whole model)."""
        if not (len(event_ids) == len(labels) == len(learned_at)) or (by is not None and len(by) != len(event_ids)):
            raise ValueError("event_ids, labels, learned_at (and by) must have one entry per id")
        if not event_ids:
            return []
        if not known_new and (len(set(event_ids)) != len(event_ids) or not self.none_of(event_ids)):
            raise ValueError("record_new takes ids that are not remembered, each once")
        problem = None
        try:  # the ids as a whole first (C speed), one by one only to name a bad one
            ids_fine = set(map(type, event_ids)) == {str} and "" not in event_ids
            "".join(event_ids).encode("utf-8") if ids_fine else None
        except UnicodeEncodeError:
            ids_fine = False
        if not ids_fine:
            problem = next(filter(None, map(_id_problem, event_ids)), None)
        pairs = list(zip(labels, learned_at))
        if not set(map(type, labels)) <= {str, int}:  # (a bool would pass for 1 in the set below)
            problem = problem or next(filter(None, map(_label_problem, labels)))
        kinds = set(pairs)
        problem = problem or next(filter(None, (_label_problem(label) or _epoch_problem(epoch)
                                                for label, epoch in kinds)), None)
        if by is not None:
            problem = problem or next(filter(None, map(_mask_problem, set(by))), None)
        if not problem and (learned_at[0] < self.last_epoch() or learned_at != sorted(learned_at)):
            problem = "epochs must not decrease in labeled order"
        if problem:
            raise ValueError(problem)
        if self._capacity == 0:
            return []
        if by is not None and by.count(None) != len(by):
            self._entries.update((event_id, Learned(label, epoch, 1.0, mask))
                                 for event_id, label, epoch, mask in zip(event_ids, labels, learned_at, by))
            return self._evict()
        # one (immutable) entry per (class, epoch), shared; inserted in order at C speed
        shared = {(label, epoch): Learned(label, epoch, 1.0) for label, epoch in kinds}
        self._entries.update(zip(event_ids, map(shared.__getitem__, pairs)))
        return self._evict()

    def forget(self, event_id: str) -> Learned | None:
        """Drop `event_id` (its learning was taken back, and nothing learned in its place);
        returns what it held, or None when it was not remembered."""
        return self._entries.pop(event_id, None)

    def set_capacity(self, capacity: int) -> list[str]:
        """A new capacity (a configuration changed between runs): entries beyond it are evicted,
        the oldest first, and returned. ValueError, changing nothing, for a bad capacity."""
        problem = _capacity_problem(capacity)
        if problem:
            raise ValueError(problem)
        self._capacity = capacity
        return self._evict()

    def _evict(self) -> list[str]:
        evicted = []
        while len(self._entries) > self._capacity:
            evicted.append(self._entries.popitem(last=False)[0])
        return evicted

    # --- state -----------------------------------------------------------------------------

    def to_state(self) -> dict:
        """The memory as JSON-able lists (the module's doc), oldest first."""
        values = list(self._entries.values())
        state = {"capacity": self._capacity, "ids": list(self._entries),
                 "labels": [entry.label for entry in values],
                 "learned_at": [entry.learned_at for entry in values],
                 "weights": [entry.weight for entry in values]}
        masks = [entry.by for entry in values]
        if masks.count(None) != len(masks):  # only then, so states of before stay as they were
            state[LEARNED_BY] = masks
        return state

    @classmethod
    def from_state(cls, state: dict, *, classes=None, max_epoch: int | None = None) -> LearnedIds:
        """The memory `to_state` gave, after checking it: the keys, equal lengths, capacity
        respected, non-empty unique str ids, classes a non-empty str or an int (and among
        `classes` when given: the model's classes, or the declared ones), epochs ints >= 0
        not decreasing in labeled order (and none after `max_epoch` when given: the model's
        forgetting_epoch, which no entry can have been learned after), weights finite and > 0.
        LearnedIdsStateError names the first broken invariant."""
        problem = _state_problem(state, classes, max_epoch)
        if problem:
            raise LearnedIdsStateError(f"learned ids: {problem}")
        memory = cls(state["capacity"])
        masks = state.get(LEARNED_BY) or [None] * len(state["ids"])
        memory._entries = OrderedDict(
            (event_id, Learned(label, epoch, float(weight), mask))
            for event_id, label, epoch, weight, mask in zip(state["ids"], state["labels"], state["learned_at"],
                                                            state["weights"], masks))
        return memory

    def digest(self) -> str:
        """sha256 hex of the state: equal for replicas that hold the same entries in the same
        order with the same capacity (labels keep their type: 1 and "1" differ)."""
        data = json.dumps(self.to_state(), ensure_ascii=True, separators=(",", ":")).encode("ascii")
        return hashlib.sha256(_DIGEST_VERSION + data).hexdigest()

    def __eq__(self, other) -> bool:
        if not isinstance(other, LearnedIds):
            return NotImplemented
        if self._capacity != other._capacity or list(self._entries) != list(other._entries):
            return False
        # type-strict on labels: 1 == True and 1 == 1.0 in Python, but not here
        return all(type(a.label) is type(b.label) and a == b
                   for a, b in zip(self._entries.values(), other._entries.values()))

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return f"LearnedIds(capacity={self._capacity}, remembered={len(self._entries)})"


def _state_problem(state, classes, max_epoch) -> str | None:
    """The first invariant `state` breaks, or None."""
    if not isinstance(state, dict):
        return f"expected an object, got {type(state).__name__}"
    if set(state) - {LEARNED_BY} != set(STATE_KEYS):
        return (f"expected the keys {', '.join(STATE_KEYS)} (and {LEARNED_BY}), got "
                f"{', '.join(map(str, sorted(state, key=str)))}")
    if LEARNED_BY in state:
        masks = state[LEARNED_BY]
        if type(masks) is not list or type(state["ids"]) is not list or len(masks) != len(state["ids"]):
            return f"{LEARNED_BY} must be a list with one entry per id"
        problem = next(filter(None, map(_mask_problem, masks)), None)
        if problem:
            return problem
    problem = _capacity_problem(state["capacity"])
    if problem:
        return problem
    columns = [state[key] for key in STATE_KEYS[1:]]
    if not all(type(column) is list for column in columns):
        return "ids, labels, learned_at and weights must be lists"
    lengths = {len(column) for column in columns}
    if len(lengths) != 1:
        return f"ids, labels, learned_at and weights differ in length ({', '.join(str(len(c)) for c in columns)})"
    size = lengths.pop()
    if size > state["capacity"]:
        return f"{size} ids remembered, over the capacity of {state['capacity']}"
    seen: set[str] = set()
    last = 0
    for position, (event_id, label, epoch, weight) in enumerate(zip(*columns)):
        problem = _id_problem(event_id) or _label_problem(label) or _epoch_problem(epoch) or _weight_problem(weight)
        if problem:
            return f"entry {position}: {problem}"
        if event_id in seen:
            return f"entry {position}: id {event_id!r} is remembered twice"
        seen.add(event_id)
        if classes is not None and not any(type(label) is type(known) and label == known for known in classes):
            return f"entry {position}: class {label!r} is not one of the model's ({', '.join(map(repr, classes))})"
        if epoch < last:
            return f"entry {position}: epoch {epoch} is before the previous entry's ({last}): not in labeled order"
        if max_epoch is not None and epoch > max_epoch:
            return f"entry {position}: learned at epoch {epoch}, after the model's forgetting epoch ({max_epoch})"
        last = epoch
    return None
