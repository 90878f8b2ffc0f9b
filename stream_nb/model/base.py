"""Machinery every naive Bayes variant shares: River's protocol, the class book, batching.

A variant supplies one kernel, `_kernel(batch, predict, learn)`, that scores a batch of events
*prequentially* (event i is scored with the state after events 0..i-1 of the batch) and then,
if asked, learns the labeled ones; `predict_learn_many` runs it on a whole batch. The two paths
perform the same floating point operations per event, which is why their results are equal to
the last bit.

`learn_one`/`predict_proba_one`/`joint_log_likelihood` run the kernel on a batch of one, unless
the variant has a single-event path (`_event_path`: `_score_event`, `_learn_event`), which
performs the kernel's operations for a batch of one without the batch machinery: the same
additions, subtractions, multiplications and divisions in the same order, on Python floats
(IEEE 754 double, like numpy's), and logarithms and exponentials by np.log / np.exp on arrays,
as in the kernel (never math.log / math.exp: numpy's vectorised versions can differ from the C
library's in the last bit).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat

import numpy as np
from river import base as river_base

from stream_nb.model._numerics import (
    effective_log_row,
    effective_log_scores,
    exclusive_cumsum,
    first_occurrences,
    log_list,
    normalise_effective,
    normalise_log_row,
)
from stream_nb.model.posterior import Posterior
from stream_nb.native import native_allowed

try:
    from stream_nb.model import _kernel as _native_kernel
except ImportError:  # (not built: numpy does it)
    _native_kernel = None

# Events per kernel call: bounds the (events x classes) work arrays and keeps the per-batch
# temporaries in cache (1,024 measured ~7% faster per event than 8,192 on SMS-length messages).
BATCH_CHUNK = 1024


def class_sort_key(label) -> tuple:
    """Canonical class order: integers (and bools) by value, then strings.

    Arrays are kept in this order rather than order of arrival, so a merged or restored model
    lays its classes out exactly like one trained on the whole stream.
    """
    if isinstance(label, str):
        return (1, 0, label)
    if isinstance(label, (int, np.integer)):
        return (0, int(label), "")
    raise TypeError(f"class labels must be str or int, got {type(label).__name__}: {label!r}")


def _while_unchanged(remembered: tuple | None, vocabulary) -> tuple | None:
    """The answer part of `remembered` = (vocabulary, its length then, *answer), while that
    vocabulary stays as it was, else None: a vocabulary only ever appends names, so the same
    object at the same length maps every name as before."""
    if remembered is not None and remembered[0] is vocabulary and remembered[1] == len(vocabulary):
        return remembered[2:]
    return None


def _looked_up_since(vocabulary, size: int, unknown: Sequence) -> np.ndarray:
    """vocabulary.lookup(unknown) for distinct names none of which was in the vocabulary when it
    had `size` names: a vocabulary only appends, so a name it has gained since is one of its
    names from column `size` on. When those are fewer, they are found among the unknown names
    (the featuriser's NewNames.find), and no str is made for the unknown names never learned."""
    find, by_column = getattr(unknown, "find", None), getattr(vocabulary, "by_column", None)
    if find is not None and by_column is not None and len(vocabulary) - size < len(unknown):
        found = find(by_column()[size:])
        if found is not None:
            position = np.frombuffer(found, dtype=np.int64)
            column_of_rank = np.full(len(unknown), -1, dtype=np.int64)
            gained = np.flatnonzero(position >= 0)
            column_of_rank[position[gained]] = size + gained
            return column_of_rank
    return vocabulary.lookup(unknown)


def _number_by_first_appearance(ranks: np.ndarray, unknown: Sequence) -> tuple[np.ndarray, Sequence]:
    """(ranks, unknown) renumbered 0, 1, ... by first appearance in `ranks` (-1 stays -1), and
    unknown cut to the names still numbered, in that order (a slice of it when they are a run of
    it, as after a catch-up whose gained names were the first numbered: no name read)."""
    order = first_occurrences(ranks[ranks >= 0], len(unknown))
    new_rank = np.full(len(unknown) + 1, -1, dtype=np.int64)  # the last stays -1: ranks[i] = -1 reads it
    run = np.arange(len(order))
    new_rank[order] = run
    renumbered = new_rank[ranks]
    renumbered.flags.writeable = False
    start = int(order[0]) if len(order) else 0
    if np.array_equal(order - start, run):
        return renumbered, unknown[start : start + len(order)]
    return renumbered, list(map(unknown.__getitem__, order.tolist()))


class ColumnNames(Sequence):
    """A batch's feature names kept as columns of a vocabulary: name i is by_column[columns[i]],
    or unknown[ranks[i]] where columns[i] is -1. The C featuriser hands names over this way, and
    its `unknown` (NewNames) makes a name's str when it is read; the list is made when somebody
    reads it.
    `by_column` only grows (a vocabulary never renumbers in place), so the names stay right;
    `numbered_at` is its length when the columns were given (while it is unchanged, a name
    without a column still has none)."""

    __slots__ = ("_by_column", "_columns", "_ranks", "_unknown", "_list", "numbered_at")

    def __init__(self, by_column: list, columns: np.ndarray, ranks: np.ndarray, unknown: Sequence,
                 numbered_at: int | None = None) -> None:
        if len(columns) != len(ranks):
            raise ValueError(f"{len(columns)} columns for {len(ranks)} ranks")
        self._by_column, self._columns, self._ranks, self._unknown = by_column, columns, ranks, unknown
        self.numbered_at = len(by_column) if numbered_at is None else numbered_at
        self._list: list | None = None

    def __len__(self) -> int:
        return len(self._columns)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ColumnNames(self._by_column, self._columns[i], self._ranks[i], self._unknown, self.numbered_at)
        if self._list is not None:
            return self._list[i]
        column = int(self._columns[i])
        return self._by_column[column] if column >= 0 else self._unknown[int(self._ranks[i])]

    def as_list(self) -> list:
        if self._list is None:
            by_column, unknown = self._by_column, self._unknown
            self._list = [by_column[c] if c >= 0 else unknown[r]
                          for c, r in zip(self._columns.tolist(), self._ranks.tolist())]
        return self._list

    def __iter__(self):
        return iter(self.as_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ColumnNames):
            other = other.as_list()
        return isinstance(other, list) and self.as_list() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ColumnNames({self.as_list()!r})"


@dataclass
class SparseBatch:
    """Events in compressed form: event i's features are names[offset_i : offset_i + lengths[i]]
    with values[...] (None: every value is 1). A name may repeat within an event; its values add
    up, so a list of tokens is a valid event. Equal, result for result, to the list of dicts
    {name: summed value} with names in order of first appearance.
    """

    names: list | ColumnNames
    lengths: np.ndarray
    values: np.ndarray | None = None
    distinct: bool = False  # no name repeats within an event (a featuriser that deduplicates says so)
    _columns: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _unknown: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.lengths)

    def columns_in(self, vocabulary) -> np.ndarray:
        """`vocabulary.lookup(self.names)` (read-only), remembered while the vocabulary stays as
        it was (`_while_unchanged`), and brought up to date when it has only grown since
        (`_catch_up`). A prediction and its clues look the batch up once."""
        remembered = _while_unchanged(self._columns, vocabulary) or self._catch_up(vocabulary)
        if remembered is not None:
            return remembered[0]
        columns = vocabulary.lookup(self.names)
        columns.flags.writeable = False
        self._columns = (vocabulary, len(vocabulary), columns)
        self._unknown = None
        return columns

    def remember_columns(self, vocabulary, columns: np.ndarray, ranks: np.ndarray | None = None,
                         unknown: Sequence | None = None) -> None:
        """Take `columns` as `vocabulary.lookup(self.names)` at the vocabulary's present length
        (the featuriser looked them up as it made the names); with `ranks` and `unknown`, the
        names not in the vocabulary numbered by first appearance (`unknown_in`)."""
        if len(columns) != len(self.names) or (ranks is not None and len(ranks) != len(self.names)):
            raise ValueError(f"{len(columns)} columns for {len(self.names)} names")
        columns.flags.writeable = False
        self._columns = (vocabulary, len(vocabulary), columns)
        self._unknown = None
        if ranks is not None:
            ranks.flags.writeable = False
            self._unknown = (vocabulary, len(vocabulary), ranks, unknown, True)

    def unknown_in(self, vocabulary) -> tuple[np.ndarray, Sequence] | None:
        """(ranks, unknown) while the vocabulary stays as it was or has only grown (then brought
        up to date), else None: unknown[ranks[i]] is name i when it is not in the vocabulary
        (ranks[i] = -1 when it is), unknown in order of first appearance in the batch, and every
        rank up to the largest one occurs."""
        remembered = _while_unchanged(self._unknown, vocabulary)
        if remembered is not None and not remembered[2]:  # a part's ranks: number them afresh
            ranks, unknown = _number_by_first_appearance(remembered[0], remembered[1])
            self._unknown = (vocabulary, len(vocabulary), ranks, unknown, True)
            return ranks, unknown
        if remembered is None and self._catch_up(vocabulary) is None:
            return None
        return self._unknown[2:4]

    def _catch_up(self, vocabulary) -> tuple | None:
        """Bring the remembered look-up and numbering up to `vocabulary` when it is the same
        object grown longer (learning in between added names), and return `_columns`' answer;
        None when there is nothing to bring up. A vocabulary only appends, so a name it had
        keeps its column: only the names it lacked then are looked up again, once each."""
        remembered, numbered = self._columns, self._unknown
        if (remembered is None or numbered is None or remembered[0] is not vocabulary
                or numbered[0] is not vocabulary or remembered[1] != numbered[1]
                or remembered[1] > len(vocabulary)):
            return None
        columns, ranks, unknown = remembered[2], numbered[2], numbered[3]
        column_of_rank = _looked_up_since(vocabulary, remembered[1], unknown)
        gained = np.flatnonzero(column_of_rank >= 0)
        if len(gained):  # only the names' occurrences that have a column now change (usually few)
            has_gained = np.zeros(len(unknown) + 1, dtype=bool)  # the last stays False: ranks[i] = -1 reads it
            has_gained[gained] = True
            at = np.flatnonzero(has_gained[ranks])
            columns, still = columns.copy(), ranks.copy()
            columns[at] = column_of_rank[ranks[at]]
            still[at] = -1
        else:
            still = ranks
        still, unknown = _number_by_first_appearance(still, unknown)
        columns.flags.writeable = False
        self._columns = (vocabulary, len(vocabulary), columns)
        self._unknown = (vocabulary, len(vocabulary), still, unknown, True)
        return (columns,)

    def __getitem__(self, events: slice) -> SparseBatch:
        if not isinstance(events, slice) or events.step not in (None, 1):
            raise TypeError("a SparseBatch is sliced by a contiguous range of events")
        start, stop, _ = events.indices(len(self.lengths))
        offsets = np.concatenate(([0], np.cumsum(self.lengths)))
        lo, hi = int(offsets[start]), int(offsets[max(stop, start)])
        values = None if self.values is None else self.values[lo:hi]
        part = SparseBatch(self.names[lo:hi], self.lengths[start:stop], values, self.distinct)
        if self._columns is not None:  # a look-up remembered holds for the part (same names)
            vocabulary, size, columns = self._columns
            part._columns = (vocabulary, size, columns[lo:hi])
        if self._unknown is not None:  # a prefix keeps the numbering; another part numbers afresh
            vocabulary, size, ranks, unknown, ordered = self._unknown
            part._unknown = (vocabulary, size, ranks[lo:hi], unknown, ordered and lo == 0)
        return part

    def to_dicts(self) -> list[dict]:
        if self.distinct and self.values is None:
            bounds = np.concatenate(([0], np.cumsum(self.lengths))).tolist()
            names = self.names
            return [dict.fromkeys(names[lo:hi], 1.0) for lo, hi in zip(bounds, bounds[1:])]
        values = np.ones(len(self.names)) if self.values is None else self.values
        result, position = [], 0
        for length in self.lengths.tolist():
            event: dict = {}
            for name, value in zip(self.names[position : position + length], values[position : position + length].tolist()):
                event[name] = event.get(name, 0) + value
            result.append(event)
            position += length
        return result


class PendingView:
    """A view's batch that is still being made elsewhere (by the featuriser's helper thread):
    its number of events now, the batch itself from `result()`, which waits for it (and raises
    what making it raised)."""

    __slots__ = ("_events", "_make", "_made")

    def __init__(self, events: int, make: Callable[[], object]) -> None:
        self._events = events
        self._make = make
        self._made = None

    def __len__(self) -> int:
        return self._events

    def result(self):
        if self._made is None:
            self._made = self._make()
        return self._made


class ViewBatch:
    """One batch of events as each feature view of an `Experts` model reads it: `views[v]` is
    the batch featurised by view v (a SparseBatch or a list of dicts), one entry per event in
    every view. Sliced by a contiguous range of events, every view alike.

    A view may come as a `PendingView`, still being made: `views` (and anything that reads every
    view) waits for it; `made()` and `view(v)` let a reader take the views made first."""

    __slots__ = ("_views",)

    def __init__(self, views: Sequence) -> None:
        views = list(views)
        if not views:
            raise ValueError("a ViewBatch needs at least one view")
        if len({len(view) for view in views}) != 1:
            raise ValueError(f"every view must hold the batch's events, got {[len(view) for view in views]}")
        self._views = views

    @property
    def views(self) -> list:
        """Each view's batch, in place order (once every view is made)."""
        for v in range(len(self._views)):
            self.view(v)
        return self._views

    @property
    def width(self) -> int:
        """The number of views."""
        return len(self._views)

    def made(self) -> list[int]:
        """The places of the views whose batches are made (the others are still being made)."""
        return [v for v, view in enumerate(self._views) if not isinstance(view, PendingView)]

    def view(self, v: int):
        """View v's batch (waiting for it if it is still being made)."""
        view = self._views[v]
        if isinstance(view, PendingView):
            view = self._views[v] = view.result()
        return view

    def __len__(self) -> int:
        return len(self._views[0])

    def __getitem__(self, events: slice) -> ViewBatch:
        if not isinstance(events, slice):
            raise TypeError("a ViewBatch is sliced by a range of events")
        return ViewBatch([view[events] for view in self.views])

    @staticmethod
    def by_view(model, views: Sequence, featurise):
        """`featurise(views, experts)`: each view's batch, for the model that reads it (one call
        for all, so that the views may share their reading of the events). One view, its batch
        itself (the model is the expert); several, a ViewBatch of each view's batch for the
        `Experts` model's expert of the same place."""
        if len(views) == 1:
            return featurise(list(views), [model])[0]
        experts = [expert for _, expert in zip(views, model.models, strict=True)]
        return ViewBatch(featurise(list(views), experts))

    def to_dicts(self) -> list[list[dict]]:
        """Each event as its feature dict in every view, in the views' order."""
        per_view = [view.to_dicts() if isinstance(view, SparseBatch) else list(view) for view in self.views]
        return [list(dicts) for dicts in zip(*per_view)]


@dataclass
class EncodedBatch:
    """A batch of events as flat arrays: one row per (event, feature) occurrence."""

    n_events: int
    event: np.ndarray  # occurrence -> event index, non-decreasing
    column: np.ndarray  # occurrence -> feature column, -1 if the feature was never learned
    value: np.ndarray  # occurrence -> feature value (never 0)
    label: np.ndarray  # event -> class index, -1 for an unlabeled event
    weight: np.ndarray  # event -> sample weight (> 0 where labeled)
    pending_names: list | None = None  # names of the columns after the vocabulary's (_encode(pending=True))
    unit_values: bool = False  # every value is 1 (a SparseBatch's without values): whole numbers, unread

    def event_slice(self, i: int) -> EncodedBatch:
        lo, hi = np.searchsorted(self.event, [i, i + 1])
        return EncodedBatch(
            1,
            self.event[lo:hi] - i,
            self.column[lo:hi],
            self.value[lo:hi],
            self.label[i : i + 1],
            self.weight[i : i + 1],
            unit_values=self.unit_values,
        )

    @property
    def labeled(self) -> np.ndarray:
        return self.label >= 0


@dataclass
class EncodedEvent:
    """One event as `_encode` encodes it in a batch of one: its kept features in order."""

    column: list[int]  # feature column, -1 if the feature was never learned
    value: list[float]  # feature value (never 0)
    label: int  # class index, -1 when the event is not learned (no label, or weight 0)
    weight: float


@dataclass
class ClassPrefix:
    """Per-event view of the class counts, as each event sees them (before it is learned)."""

    counts_before: np.ndarray  # (n, C) N_c
    active: np.ndarray  # (n, C) classes seen so far
    log_prior: np.ndarray  # (n, C) log P(c)
    learned: np.ndarray  # (n, C) weight each event adds to its class


_PLAIN_NUMBERS = {int, float, bool}
_BAD_WEIGHTS = "sample weights must be finite and >= 0"


def _is_integral(values: np.ndarray) -> bool:
    return bool(np.all(np.floor(values) == values))


# Counts on the grid of multiples of 2^-GRID_BITS (forgetting rounds decayed counts to it) add up
# exactly in any order while every sum stays below 2^(53 - GRID_BITS): then prefix sums equal
# sequential sums, as for whole numbers, and batches stay exact.
GRID_BITS = 20
GRID_LIMIT = 2.0 ** (52 - GRID_BITS)  # one bit of room below 2^33

# Unlearning: how far what is taken back may exceed what a count holds and still be rounding.
# A remainder within UNLEARN_RELATIVE_SLACK of the larger of the two is float rounding (sums of
# fractional weights) and is 0. After forgetting, each decay step rounded the aggregate once and
# each event's part once, so the parts can add up to a little more than the count: up to
# UNLEARN_GRID_SLACK (2^10 grid steps) more is taken back as all there is (the count goes to 0).
UNLEARN_RELATIVE_SLACK = 2.0**-32
UNLEARN_GRID_SLACK = 2.0**-10


class NotLearned(ValueError):
    """Taking back what the model never learned, or more than it holds. Nothing was changed."""


# The ones of batches without values, shared: a view of this read-only array. A fresh array of
# a million ones a view's batch met a page fault a page (15 ms of a replay's learner thread);
# batches beyond UNIT_VALUES_KEPT names get an array of their own (read-only alike).
UNIT_VALUES_KEPT = 1 << 22
_unit_values = np.ones(0)
_unit_values.flags.writeable = False


def unit_values(n: int) -> np.ndarray:
    """n ones (float64), read-only."""
    global _unit_values
    ones = _unit_values
    if len(ones) < n:
        ones = np.ones(n if n > UNIT_VALUES_KEPT else min(max(n, 2 * len(ones)), UNIT_VALUES_KEPT))
        ones.flags.writeable = False
        if n <= UNIT_VALUES_KEPT:
            _unit_values = ones
    return ones[:n]


def decayed_alone(amounts: np.ndarray, factors: list[float]) -> np.ndarray:
    """What `decay` leaves of contributions decayed alone, step by step on the grid:

        a <- q round(factor a / q)  for each step's factor,   q = 2^-GRID_BITS

    with `decay`'s own arithmetic (a factor of 1 leaves counts as they are)."""
    for factor in factors:
        if factor == 1:
            continue
        amounts = np.rint(amounts * (factor * 2.0**GRID_BITS)) / 2.0**GRID_BITS
        if not amounts.any():
            break
    return amounts


def _batch_mass(batch) -> float:
    """An upper bound on what learning a batch adds to any count or sum of counts."""
    weights = batch.weight[batch.labeled]
    if not len(weights):
        return 0.0
    values = len(batch.value) if batch.unit_values else np.abs(batch.value).sum()  # (ones: their number, unread)
    return float(values + len(weights)) * float(weights.max())


def log_prior_of(counts: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(active, log P(c)) of class counts N_c: log((N_c + lam) / (N + K lam)) over the K classes
    with N_c > 0, -inf for the others."""
    active = counts > 0
    if not active.any():
        return active, np.full(len(counts), -np.inf)
    with np.errstate(divide="ignore"):
        log_prior = np.log(counts + lam) - math.log(counts.sum() + active.sum() * lam)
    return active, np.where(active, log_prior, -np.inf)


class NaiveBayes(river_base.Classifier):
    """Base of every variant: class bookkeeping, the River protocol and batch processing.

    Prior, with smoothing prior_alpha = lambda and K classes seen so far:

        P(c) = (N_c + lambda) / (N + K lambda)      (lambda = 0: the MLE N_c / N)
    """

    ZERO_IS_ABSENT = False  # a DataFrame's 0 is a value (a measurement, a category)
    # Maintenance of the counts (the vocabulary variants set it), after every `evict_every`-th
    # labeled event: a feature budget (None keeps every feature) and forgetting (None: none).
    max_features: int | None = None
    half_life: float | None = None
    evict_every = 0

    def __init__(self, prior_alpha: float = 0.0):
        self.prior_alpha = prior_alpha
        _check_smoothing("prior_alpha", prior_alpha)
        self._classes: list = []
        self._class_index: dict = {}
        self._class_counts = np.zeros(0)
        self._integral = True  # every count so far is a whole number
        self._on_grid = False  # every count is a multiple of 2^-GRID_BITS (after forgetting)
        self.labeled_seen = 0  # with maintenance: labeled events offered to training (learned or not), its clock
        self.forgetting_epoch = 0  # decay steps applied so far (unlearning's learned_at counts in them)
        self._decay_factors: list[list] = []  # [[factor, steps], ...]: the factor of every step, run-length coded

    # ---- class book -------------------------------------------------------------------

    @property
    def classes_(self) -> list:
        return list(self._classes)

    @property
    def _multiclass(self):
        return True

    @property
    def events_learned(self) -> float:
        return float(self._class_counts.sum())

    def _add_classes(self, labels) -> None:
        new = {label for label in labels if label not in self._class_index}
        if not new:
            return
        for label in new:
            class_sort_key(label)  # raises TypeError on an unsupported label
        keys = [class_sort_key(label) for label in self._classes]
        insert_at = []
        for label in sorted(new, key=class_sort_key):
            insert_at.append(bisect.bisect_left(keys, class_sort_key(label)))
        merged = sorted(self._classes + list(new), key=class_sort_key)
        self._insert_class_columns(np.array(insert_at, dtype=np.int64))
        self._class_counts = np.insert(self._class_counts, insert_at, 0.0)
        self._classes = merged
        self._class_index = {label: index for index, label in enumerate(merged)}

    def _insert_class_columns(self, insert_at: np.ndarray) -> None:
        """Add zero columns for new classes to the variant's per-class arrays."""

    def _class_prefix(self, batch: EncodedBatch) -> ClassPrefix:
        n, n_classes = batch.n_events, len(self._classes)
        learned = np.zeros((n, n_classes))
        labeled = np.flatnonzero(batch.labeled)
        learned[labeled, batch.label[labeled]] = batch.weight[labeled]
        if n == 1 or len(labeled) == 0:
            counts_before = np.repeat(self._class_counts[None, :], n, axis=0)
        else:
            counts_before = self._class_counts + exclusive_cumsum(learned)
        active = counts_before > 0
        lam = self.prior_alpha
        total = counts_before.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_prior = np.log(counts_before + lam) - np.log(total + active.sum(axis=1) * lam)[:, None]
        log_prior = np.where(active, log_prior, -np.inf)  # no class yet: -inf, not 0/0
        return ClassPrefix(counts_before, active, log_prior, learned)

    def _event_prior(self, log_args: list[float]) -> tuple[list[bool], list[float], list[float]]:
        """(active, log P(c), the logs of log_args) for a batch of one, as `_class_prefix` has them:
        log(N_c + lambda) - log(N + K lambda), -inf for a class not learned yet. The variant's
        own logarithms (log_args) are taken in the same np.log call."""
        counts = self._class_counts.tolist()
        active = [n > 0 for n in counts]
        lam = self.prior_alpha
        total = float(self._class_counts.sum())  # numpy's summation order, as in the kernel
        logs = log_list(log_args + [n + lam for n in counts] + [total + active.count(True) * lam])
        log_total = logs.pop()
        log_prior = [log_n - log_total if on else -math.inf for log_n, on in zip(logs[len(log_args) :], active)]
        return active, log_prior, logs[: len(log_args)]

    def _current_log_prior(self) -> tuple[np.ndarray, np.ndarray]:
        """(active, log P(c)) for the state as it is now; -inf for classes not yet learned."""
        return log_prior_of(self._class_counts, self.prior_alpha)

    # ---- encoding ---------------------------------------------------------------------

    def _check_values(self, values: np.ndarray) -> np.ndarray:
        """Validate feature values; return the mask of occurrences that carry information.
        Element by element (a value's mask and whether it is refused depend on it alone), so a
        batch of ones is checked by checking one."""
        if not np.isfinite(values).all():
            raise ValueError("feature values must be finite numbers (got NaN or infinity)")
        return values != 0

    def _event_keep(self, values: list[float]) -> list[bool] | None:
        """`_check_values` on one event's floats: the kept mask, or None when `_check_values`
        might object (the general encoder then checks the event and raises its error)."""
        if not math.isfinite(sum(values)):  # NaN or infinity (or a sum that overflows)
            return None
        return [value != 0 for value in values]

    def _encode(self, X: Sequence, y: Sequence, weights: Sequence | None = None,
                validated: tuple | None = None, pending: bool = False) -> EncodedBatch:
        """Validate a batch and turn it into flat arrays; nothing is mutated until it is valid.
        pending: the labeled events' new features get the columns after the vocabulary's but stay
        out of it (batch.pending_names); the caller adds those that are learned."""
        n = len(X)
        sparse, names, value, keep, lengths, weight, labeled_rows, X = (
            validated if validated is not None else self._validate(X, y, weights))
        event = np.repeat(np.arange(n, dtype=np.int64), lengths)
        column = X.columns_in(self._vocabulary) if sparse else self._vocabulary.lookup(names)  # (read-only, shared)
        return self._encode_valid(n, y, sparse, names, value, keep, lengths, weight, labeled_rows, X, event, column,
                                  pending)

    def _validate(self, X: Sequence, y: Sequence, weights: Sequence | None = None) -> tuple:
        """Every check of `_encode`, with no change to the model: a bad batch is refused whole."""
        n = len(X)
        if len(y) != n:
            raise ValueError(f"X has {n} events but y has {len(y)} labels")
        sparse = isinstance(X, SparseBatch)
        if sparse:
            names, lengths = X.names, np.asarray(X.lengths, dtype=np.int64)
            if len(names) != int(lengths.sum()):
                raise ValueError(f"SparseBatch has {len(names)} names but its lengths add up to {int(lengths.sum())}")
            if X.values is None:
                value = unit_values(len(names))
            else:
                value = np.asarray(X.values, dtype=np.float64)
                if value.shape != (len(names),):
                    raise ValueError("SparseBatch values must be one number per name")
        else:
            if not all(type(x) is dict for x in X):
                for i, x in enumerate(X):
                    if not isinstance(x, Mapping):
                        raise TypeError(f"event {i}: x must be a dict feature -> value, got {type(x).__name__}")
                X = [dict(x) for x in X]
            names = list(chain.from_iterable(X))
            values = list(chain.from_iterable(map(dict.values, X)))
            lengths = np.fromiter(map(len, X), dtype=np.int64, count=n)
            value_types = set(map(type, values))
            if not value_types <= _PLAIN_NUMBERS:
                bad = next((t for t in value_types if not issubclass(t, (int, float, np.number)) or issubclass(t, np.complexfloating)), None)
                if bad is not None:
                    raise TypeError(f"feature values must be real numbers, got {bad.__name__}")
            value = np.array(values, dtype=np.float64)
        if sparse and X.values is None and len(value):  # every value 1: one check tells (it is elementwise)
            keep = np.full(len(value), bool(self._check_values(np.ones(1))[0]))
        else:
            keep = self._check_values(value)
        weight = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
        if weights is not None and (not np.all(np.isfinite(weight)) or np.any(weight < 0)):
            raise ValueError(_BAD_WEIGHTS)
        if weights is None:
            labeled_rows = [i for i, label in enumerate(y) if label is not None]
        else:
            labeled_rows = [i for i, (label, w) in enumerate(zip(y, weight.tolist())) if label is not None and w > 0]
        for label in {y[i] for i in labeled_rows}:
            class_sort_key(label)
        return sparse, names, value, keep, lengths, weight, labeled_rows, X

    def _encode_valid(self, n, y, sparse, names, value, keep, lengths, weight, labeled_rows, X, event, column,
                      pending: bool = False):
        # Everything is valid: only now may the vocabulary and the class book grow.
        pending_names = None
        if labeled_rows:
            self._add_classes([y[i] for i in labeled_rows])
            # every event is learned: the new names in order of first appearance are those the
            # featuriser numbered, up to the largest rank (a batch's prefix has them all)
            fresh = X.unknown_in(self._vocabulary) if sparse and len(labeled_rows) == n else None
            kernel = _native_kernel if _native_kernel is not None and native_allowed() else None
            if fresh is not None and kernel is not None:
                # each missing column is size + its rank, filled in one pass (numpy's five below)
                filled, missing, largest = kernel.filled_columns(column, fresh[0], len(self._vocabulary))
                if missing:
                    column = np.frombuffer(filled, dtype=np.int64)
                    pending_names = self._numbered_names_in(fresh[1][: largest + 1], pending)
            else:
                column = column.copy()
                missing = np.flatnonzero(column < 0)
                learned_missing = missing
                if len(missing) and len(labeled_rows) < n:
                    is_labeled = np.zeros(n, dtype=bool)
                    is_labeled[labeled_rows] = True
                    learned_missing = missing[is_labeled[event[missing]]]
                if len(learned_missing) and fresh is not None:
                    size = len(self._vocabulary)
                    ranks = fresh[0][missing]
                    pending_names = self._numbered_names_in(fresh[1][: int(ranks.max()) + 1], pending)
                    column[missing] = size + ranks
                elif len(learned_missing):
                    name_at = names.__getitem__
                    new_names = map(name_at, learned_missing.tolist())  # in order of first appearance
                    if pending:
                        added = self._vocabulary.number_unknown(new_names)
                        pending_names = list(added)
                    else:
                        added = self._vocabulary.add_unknown(new_names)
                    # unlabeled events may name them too (the prefix sums decide when they are known)
                    column[missing] = np.fromiter(map(added.get, map(name_at, missing.tolist()), repeat(-1)),
                                                  dtype=np.int64, count=len(missing))
            self._grow_features(len(pending_names) if pending_names else 0)
        label = np.full(n, -1, dtype=np.int64)
        if labeled_rows:
            index = self._class_index
            label[labeled_rows] = [index[y[i]] for i in labeled_rows]
        unit_values = sparse and X.values is None
        if (sparse and not X.distinct) or self._vocabulary.hashed:
            # One occurrence per (event, feature): names repeated within an event, or sharing a
            # hash bucket, add their values; first appearance order is kept.
            event, column, value = _combine_repeats(event, column, value, names)
            keep = self._check_values(value)
            unit_values = False
        if not keep.all():
            event, column, value = event[keep], column[keep], value[keep]
        return EncodedBatch(n, event, column, value, label, weight, pending_names, unit_values)

    def _numbered_names_in(self, new_names, pending: bool):
        """The featuriser's numbered new names (each once) taken in: returned as the batch's
        pending names with `pending`, else added to the vocabulary now (None)."""
        if pending:
            return new_names
        self._vocabulary.add_new(new_names)
        return None

    def _encode_one(self, x: dict, y=None, w: float | None = None) -> EncodedEvent | None:
        """`_encode([x], [y], [w])` for one event of plain numbers, with the same checks in the
        same order, the same errors and the same growth of the class book and vocabulary.
        None when x is not a dict of int/float/bool (or w not a plain number): the general
        encoder then takes the event, and raises its errors.
        """
        if type(x) is not dict or (w is not None and type(w) not in _PLAIN_NUMBERS):
            return None
        values = list(x.values())
        if not set(map(type, values)) <= _PLAIN_NUMBERS:
            return None
        value = list(map(float, values))  # numpy's conversion of these types, OverflowError alike
        keep = self._event_keep(value)
        if keep is None:
            return None
        weight = 1.0 if w is None else float(w)
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(_BAD_WEIGHTS)
        names = list(x)
        label = -1
        if y is not None and weight > 0:
            class_sort_key(y)
            column = self._vocabulary.columns(names)
            self._add_classes([y])
            if -1 in column:
                self._vocabulary.add(names)  # the new names, in order of appearance
                column = self._vocabulary.columns(names)
            self._grow_features()
            label = self._class_index[y]
        else:
            column = self._vocabulary.columns(names)
        if self._vocabulary.hashed:
            column, value = _combine_buckets(column, value)
            keep = self._check_values(np.array(value, dtype=np.float64)).tolist()
        if not all(keep):
            column = [c for c, k in zip(column, keep) if k]
            value = [v for v, k in zip(value, keep) if k]
        return EncodedEvent(column, value, label, weight)

    def _grow_features(self, pending: int = 0) -> None:
        """Make the variant's per-feature arrays as long as the vocabulary (plus `pending`
        columns of names not in it yet)."""

    # ---- running kernels --------------------------------------------------------------

    def _batch_is_exact(self, batch: EncodedBatch) -> bool:
        """Whether prefix sums inside a batch reproduce the sequential counts exactly: whole
        numbers added to whole numbers, or to counts on the grid with room below GRID_LIMIT."""
        weights = batch.weight[batch.labeled]
        if not (_is_integral(weights) and (batch.unit_values or _is_integral(batch.value))):
            return False
        if self._integral:
            return True
        return self._on_grid and self._count_mass() + _batch_mass(batch) < GRID_LIMIT

    def _count_mass(self) -> float:
        """An upper bound on every count and every sum of counts of the state."""
        return float(self._class_counts.sum())

    def _lose_exact_sums(self) -> None:
        self._integral = False
        self._on_grid = False

    def _run(self, batch: EncodedBatch, predict: bool, learn: bool):
        """Score (if predict) and learn (if learn) a batch; returns (scores, active, log_prior)."""
        has_labels = learn and bool(batch.labeled.any())
        if predict and has_labels and batch.n_events > 1 and not self._batch_is_exact(batch):
            parts = [self._run(batch.event_slice(i), predict, learn) for i in range(batch.n_events)]
            return tuple(np.concatenate([part[k] for part in parts]) for k in range(3))
        if has_labels and not self._batch_is_exact(batch):
            self._lose_exact_sums()
        return self._kernel(batch, predict, learn and has_labels)

    def _kernel(self, batch: EncodedBatch, predict: bool, learn: bool):
        raise NotImplementedError

    def _settle_in_windows(self, X, y, decide, guessing) -> tuple[list, list] | None:
        """Order-dependent training at batch speed (see CountingNB); None where the variant has
        no exact way to do it, and the caller goes one event at a time."""
        return None

    # ---- single events (variants with `_event_path`) ----------------------------------

    _event_path = False

    def _event_is_exact(self, event: EncodedEvent) -> bool:
        """`_batch_is_exact` for one labeled event."""
        if not (event.weight.is_integer() and all(map(float.is_integer, event.value))):
            return False
        if self._integral:
            return True
        return self._on_grid and self._count_mass() + event.weight * (sum(event.value) + 1) < GRID_LIMIT

    def _score_event(self, event: EncodedEvent) -> tuple[list, list, list]:
        """(scores, active, log_prior) of one event with the state as it is, as lists: the
        kernel's row for a batch of one, by the same operations."""
        raise NotImplementedError

    def _learn_event(self, event: EncodedEvent) -> None:
        """Learn one labeled event: the state the kernel leaves for a batch of one, bit for bit."""
        raise NotImplementedError

    def _event_scores(self, x: dict) -> tuple[list, list, list]:
        """(scores, active, log_prior) of one unlabeled event, as lists, by the fastest exact path."""
        event = self._encode_one(x) if self._event_path else None
        if event is None:
            scores, active, log_prior = self._run(self._encode([x], [None]), predict=True, learn=False)
            return scores[0].tolist(), active[0].tolist(), log_prior[0].tolist()
        return self._score_event(event)

    def _probabilities(self, scores, active, log_prior) -> list[Posterior]:
        """A `Posterior` per row: P(c | x) over the classes active at the event, with the log
        scores they are the softmax of (probabilities and scores from one kernel run)."""
        log_scores, best = effective_log_scores(scores, active, log_prior)
        proba = normalise_effective(log_scores, best)
        classes = self._classes
        results = list(map(Posterior, map(zip, repeat(classes), proba.tolist())))
        for result, row in zip(results, log_scores.tolist()):
            result.log_scores = row
        for i in np.flatnonzero(~active.all(axis=1)).tolist():  # classes not seen yet at event i
            on = active[i].tolist()
            result = Posterior((label, p) for label, p, kept in zip(classes, results[i].values(), on) if kept)
            result.log_scores = [s for s, kept in zip(results[i].log_scores, on) if kept]
            results[i] = result
        return results

    # ---- maintenance: the feature budget, forgetting -----------------------------------

    @property
    def _maintained(self) -> bool:
        return self.max_features is not None or self.half_life is not None

    def _maintain(self) -> None:
        """At a maintenance point: decay the counts and evict features over the budget (variants
        with a vocabulary)."""

    def _with_maintenance(self, X, y: list, run) -> list:
        """`run(start, stop)` over consecutive parts [start, stop) of a batch, with maintenance
        right after every labeled event whose rank in the labeled stream (`labeled_seen`) is a
        multiple of `evict_every`; the runs' results in order. The points fall at the same
        labeled events however the stream is cut into batches, so the state is a function of
        the labeled stream alone. Without forgetting, a batch that cannot take the vocabulary
        past the budget (its labeled events hold fewer features than the room left) runs whole:
        maintenance in it would do nothing."""
        if not self._maintained:
            return [run(0, len(y))]
        labeled = [i for i, label in enumerate(y) if label is not None]
        if not labeled or not self._maintenance_may_act(X, labeled):
            results = [run(0, len(y))]
            self.labeled_seen += len(labeled)
            return results
        every = self.evict_every
        results, start, done = [], 0, 0
        while start < len(y):
            due = every - self.labeled_seen % every  # labeled events up to the next maintenance
            if done + due <= len(labeled):
                stop = labeled[done + due - 1] + 1
                results.append(run(start, stop))
                self.labeled_seen += due
                done += due
                self._maintain()
            else:
                stop = len(y)
                results.append(run(start, stop))
                self.labeled_seen += len(labeled) - done
            start = stop
        return results

    def _maintenance_may_act(self, X, labeled: list) -> bool:
        return True

    # ---- River's protocol -------------------------------------------------------------

    def learn_one(self, x: dict, y, w: float = 1.0) -> None:
        """Learn one labeled event with sample weight w (w = 0 learns nothing)."""
        if y is None:
            raise ValueError("learn_one needs a label; y is None")
        self._learn_labeled(x, y, w)
        if self._maintained:
            self.labeled_seen += 1
            if self.labeled_seen % self.evict_every == 0:
                self._maintain()

    def _learn_labeled(self, x: dict, y, w: float = 1.0) -> None:
        """learn_one without the maintenance clock (a training regime keeps the clock itself)."""
        event = self._encode_one(x, y, w) if self._event_path else None
        if event is None:
            self._run(self._encode([x], [y], [w]), predict=False, learn=True)
        elif event.label >= 0:
            self._learn_event(event)

    def joint_log_likelihood(self, x: dict) -> dict:
        """log P(c) + log P(x | c) for every class seen so far."""
        if not self._classes:
            return {}
        scores, active, _ = self._event_scores(x)
        return {label: score for label, score, on in zip(self._classes, scores, active) if on}

    def predict_proba_one(self, x: dict) -> Posterior | dict:
        """P(c | x) for every class seen so far; {} before anything is learned. A `Posterior`:
        its log_odds(positive) and log_proba() come from the same scores, see model.posterior."""
        if not self._classes:
            return {}
        return self._posterior_row(*self._event_scores(x))

    def predict_and_joint_one(self, x: dict) -> tuple[Posterior | dict, dict]:
        """(predict_proba_one(x), joint_log_likelihood(x)) from one scoring of the event: the
        prequential step's prediction and what its training decision reads."""
        if not self._classes:
            return {}, {}
        scores, active, log_prior = self._event_scores(x)
        joint = {label: score for label, score, on in zip(self._classes, scores, active) if on}
        return self._posterior_row(scores, active, log_prior), joint

    def _posterior_row(self, scores: list, active: list, log_prior: list) -> Posterior:
        proba = normalise_log_row(scores, active, log_prior)
        log_scores, _ = effective_log_row(scores, active, log_prior)
        if all(active):
            result = Posterior(zip(self._classes, proba))
            result.log_scores = log_scores
            return result
        result = Posterior((label, p) for label, p, on in zip(self._classes, proba, active) if on)
        result.log_scores = [s for s, on in zip(log_scores, active) if on]
        return result

    def predict_log_proba_one(self, x: dict) -> dict:
        """log P(c | x) = s_c - logsumexp_k s_k for every class seen so far ({} before any),
        s_c = log P(c) + log P(x | c); finite where P(c | x) rounds to 0.0."""
        proba = self.predict_proba_one(x)
        return proba.log_proba() if proba else {}

    def log_odds_one(self, x: dict, positive) -> float | None:
        """score(x) = log P(pos | x) - log P(not pos | x) = s_pos - logsumexp_{c != pos} s_c, in
        nats (exactly s_pos - s_neg for two classes, so it does not saturate as P does); +-inf
        when only one side has a class learned; None before any class. See model.posterior."""
        proba = self.predict_proba_one(x)
        return proba.log_odds(positive) if proba else None

    def _encoded_chunks(self, X, y, w=None):
        """The batch as encoded chunks of BATCH_CHUNK events. Every chunk is validated before the
        first is encoded, so a bad event anywhere refuses the whole batch and changes nothing."""
        for part, checked in list(self._validated_chunks(X, y, w)):
            yield self._encode(*part, validated=checked)

    def validate(self, X, y, w=None) -> None:
        """Raise the error `learn_many(X, y, w)` would raise on this batch, changing nothing.

        A caller that learns a batch in pieces (an order-dependent training regime) checks the
        whole batch first, so a bad event at its end cannot leave the pieces before it learned.
        """
        for _ in self._validated_chunks(_as_records(X, self.ZERO_IS_ABSENT), _as_labels(y), w):
            pass

    def _validated_chunks(self, X, y, w=None):
        if len(y) != len(X):
            raise ValueError(f"X has {len(X)} events but y has {len(y)} labels")
        weights = None if w is None else list(w)
        for start in range(0, len(X), BATCH_CHUNK):
            end = min(start + BATCH_CHUNK, len(X))
            part = (X[start:end], y[start:end], None if weights is None else weights[start:end])
            yield part, self._validate(*part)

    def learn_many(self, X, y, w=None) -> None:
        """Learn a batch, exactly as repeated learn_one would. X: dicts or a pandas DataFrame."""
        records, labels = _as_records(X, self.ZERO_IS_ABSENT), _as_labels(y)
        if not self._maintained:
            self._learn_records(records, labels, w)
            return
        weights = None if w is None else list(w)
        self.validate(records, labels, weights)  # a bad event refuses the batch before any part is learned
        self._with_maintenance(records, labels, lambda start, stop: self._learn_records(
            records[start:stop], labels[start:stop], None if weights is None else weights[start:stop]))

    def _learn_records(self, X, y, w=None) -> None:
        for batch in self._encoded_chunks(X, y, w):
            self._run(batch, predict=False, learn=True)

    def predict_proba_many(self, X):
        """P(c | x) for each event of X (dicts -> list of dicts; a DataFrame -> a DataFrame)."""
        records = _as_records(X, self.ZERO_IS_ABSENT)
        results = self._predict_records(records, [None] * len(records))
        if _is_data_frame(X):
            import pandas as pd

            return pd.DataFrame(results, index=X.index, columns=self.classes_).fillna(0.0)
        return results

    def predict_log_proba_many(self, X) -> list[dict]:
        """`predict_log_proba_one` for each event of X (dicts, a DataFrame, a SparseBatch), from
        one batch run."""
        records = _as_records(X, self.ZERO_IS_ABSENT)
        return [p.log_proba() if p else {} for p in self._predict_records(records, [None] * len(records))]

    def log_odds_many(self, X, positive) -> list[float | None]:
        """`log_odds_one` for each event of X, from one batch run. For a prequential batch, read
        them off `predict_learn_many`'s results: `result.log_odds(positive)`."""
        records = _as_records(X, self.ZERO_IS_ABSENT)
        return [p.log_odds(positive) if p else None for p in self._predict_records(records, [None] * len(records))]

    def predict_many(self, X):
        probabilities = self.predict_proba_many(X)
        if hasattr(probabilities, "idxmax"):
            return probabilities.idxmax(axis=1) if len(probabilities.columns) else None
        return [max(p, key=p.get) if p else None for p in probabilities]

    def predict_learn_many(self, X: Sequence, y: Sequence) -> list[dict]:
        """Prequential batch: for each event in order, predict it with the state so far, then
        learn it if its label is not None. Each result is a `Posterior` ({} before any class):
        its log_odds(positive) and log_proba() come from the same kernel run, nothing is scored
        twice. Equal, to the last bit, to the per-event loop

            for x, label in zip(X, y):
                results.append(predict_proba_one(x))
                if label is not None:
                    learn_one(x, label)

        A batch with a bad event anywhere raises before anything is learned.
        """
        records, labels = _as_records(X, self.ZERO_IS_ABSENT), _as_labels(y)
        if not self._maintained:
            return self._predict_records(records, labels)
        self.validate(records, labels)  # a bad event refuses the batch before any part is learned
        parts = self._with_maintenance(records, labels,
                                    lambda start, stop: self._predict_records(records[start:stop], labels[start:stop]))
        return [p for part in parts for p in part]

    def _predict_records(self, X: list, y: list) -> list[dict]:
        results: list[dict] = []
        for batch in self._encoded_chunks(X, y):
            if not self._classes:
                self._run(batch, predict=False, learn=True)
                results.extend({} for _ in range(batch.n_events))
                continue
            results.extend(self._probabilities(*self._run(batch, predict=True, learn=True)))
        return results

    # ---- unlearning ---------------------------------------------------------------------

    def unlearn_one(self, x: dict, y, w: float = 1.0, *, learned_at: int | None = None) -> None:
        """Take back what `learn_one(x, y, w)` added, learned at forgetting epoch `learned_at`
        (None: now, no decay since). With forgetting, what is taken back from each count is the
        event's part decayed alone (`decayed_alone`) over the steps since learned_at, clamped at 0
        within UNLEARN_GRID_SLACK. A count or class that returns to 0 is as if never seen.

        Raises NotLearned (a ValueError), changing nothing, when the class was never learned or
        a count holds less than its part (a feature the class never counted, more weight than
        learned), or learned_at is negative or in the future. See docs/models.md, "Unlearning".
        """
        if y is None:
            raise ValueError("unlearn_one needs the label the event was learned with; y is None")
        self._unlearn([x], [y], [w], [learned_at], name_events=False)

    def unlearn_many(self, X, y, w=None, *, learned_at=None) -> None:
        """unlearn_one of each event in order (an unlabeled event learned nothing: skipped), all
        or nothing: every event is checked against the counts the events before it leave, then
        the state changes; on refusal nothing has. learned_at: None, one epoch for all, or one
        per event. X: what learn_many takes."""
        records, labels = _as_records(X, self.ZERO_IS_ABSENT), _as_labels(y)
        n = len(labels)
        if len(records) != n:
            raise ValueError(f"X has {len(records)} events but y has {n} labels")
        weights = [1.0] * n if w is None else list(w)
        if learned_at is None or isinstance(learned_at, (int, np.integer)):
            epochs = [learned_at] * n
        else:
            epochs = list(learned_at)
        if len(weights) != n or len(epochs) != n:
            raise ValueError(f"{n} events but {len(weights)} weights and {len(epochs)} learned_at")
        self._unlearn(records, labels, weights, epochs, name_events=True)

    def prepared_unlearning(self, X, y, w=None, *, learned_at=None):
        """`unlearn_many`'s checks, changing nothing: raises as it would, else returns the
        function that takes the events back. Several models taking one event back (the experts
        of stream_nb.model.experts) check all before any changes."""
        records, labels = _as_records(X, self.ZERO_IS_ABSENT), _as_labels(y)
        n = len(labels)
        if len(records) != n:
            raise ValueError(f"X has {len(records)} events but y has {n} labels")
        weights = [1.0] * n if w is None else list(w)
        epochs = [learned_at] * n if learned_at is None or isinstance(learned_at, (int, np.integer)) else list(learned_at)
        if len(weights) != n or len(epochs) != n:
            raise ValueError(f"{n} events but {len(weights)} weights and {len(epochs)} learned_at")
        plans = self._plan_unlearning(records, labels, weights, [self._decay_steps(e) for e in epochs], True)
        return lambda: self._apply_plans(plans)

    def _unlearn(self, X, y, weights, epochs, name_events: bool) -> None:
        steps = [self._decay_steps(epoch) for epoch in epochs]
        plans = self._plan_unlearning(X, y, weights, steps, name_events)  # every check: nothing changes before
        self._apply_plans(plans)

    def _apply_plans(self, plans: list) -> None:
        for plan in plans:
            self._apply_unlearning(plan)
        self._drop_emptied_classes({plan[0] for plan in plans})
        if plans:
            self._after_unlearning()

    def _decay_steps(self, learned_at) -> list[float]:
        """The factors of the decay steps since epoch `learned_at` (None: now, none)."""
        if learned_at is None:
            return []
        if isinstance(learned_at, bool) or not isinstance(learned_at, (int, np.integer)):
            raise TypeError(f"learned_at must be a whole number (a forgetting epoch) or None, got {learned_at!r}")
        learned_at = int(learned_at)
        if not 0 <= learned_at <= self.forgetting_epoch:
            raise NotLearned(f"learned_at={learned_at} is not an epoch of this model (it has decayed "
                             f"{self.forgetting_epoch} times: 0..{self.forgetting_epoch})")
        factors, epoch = [], 0
        for factor, count in self._decay_factors:
            factors += [factor] * max(0, epoch + count - max(epoch, learned_at))
            epoch += count
        return factors

    def _record_decay(self, factor: float) -> None:
        self.forgetting_epoch += 1
        if self._decay_factors and self._decay_factors[-1][0] == factor:
            self._decay_factors[-1][1] += 1
        else:
            self._decay_factors.append([float(factor), 1])

    def _take_back(self, held: float, amount: float, what: str) -> float:
        """What a count holding `held` holds after `amount` is taken back; NotLearned (naming
        `what`) when amount exceeds held beyond rounding (UNLEARN_*_SLACK)."""
        larger = max(held, amount)
        slack = 0.0 if (held.is_integer() and amount.is_integer()) else UNLEARN_RELATIVE_SLACK * larger
        if self.forgetting_epoch:
            slack += UNLEARN_GRID_SLACK
        if amount - held > slack:
            raise NotLearned(f"{what} holds {held!r}, less than the {amount!r} to take back")
        rest = held - amount
        return 0.0 if rest <= UNLEARN_RELATIVE_SLACK * larger else rest

    def _class_to_unlearn(self, label, where: str) -> int:
        c = self._class_index.get(label)
        if c is None:
            class_sort_key(label)  # TypeError on an unsupported label, as learning gives
            raise NotLearned(f"{where}class {label!r} was never learned (classes: {self._classes!r})")
        return c

    def _class_take_backs(self, X, y, weights, name_events: bool):
        """For each event that learning counted (labeled, w > 0): (x, label, where, w, c, N_c
        after), N_c checked against what the events before it leave (the part of
        _plan_unlearning every variant shares; `where` names the event in a refusal)."""
        weight = self._validate(X, y, weights)
        held_class = {}
        for i, x in enumerate(X):
            if y[i] is None or weight[i] == 0:
                continue
            where, w = (f"event {i}: " if name_events else ""), weight[i]
            c = self._class_to_unlearn(y[i], where)
            held_class[c] = self._take_back(held_class.get(c, float(self._class_counts[c])), w,
                                            f"{where}class {y[i]!r}'s count N_c")
            yield x, y[i], where, w, c, held_class[c]

    def _plan_unlearning(self, X, y, weights, steps, name_events: bool) -> list[tuple]:
        """Check every event against the counts the events before it leave and return what to
        write, one tuple per event (its class index first); changes nothing."""
        raise NotImplementedError

    def _apply_unlearning(self, plan: tuple) -> None:
        raise NotImplementedError

    def _after_unlearning(self) -> None:
        """Rebuild what is derived from the counts."""

    def _class_is_empty(self, c: int) -> bool:
        """Every count of class c (besides N_c) is 0."""
        raise NotImplementedError

    def _delete_class_columns(self, classes: list[int]) -> None:
        """Remove the columns of `classes` from the variant's per-class arrays."""

    def _drop_emptied_classes(self, touched) -> None:
        """A class whose N_c and counts all returned to 0 leaves the model, as if never learned."""
        emptied = sorted(c for c in touched if self._class_counts[c] == 0 and self._class_is_empty(c))
        if not emptied:
            return
        self._delete_class_columns(emptied)
        self._class_counts = np.delete(self._class_counts, emptied)
        gone = set(emptied)
        self._classes = [label for c, label in enumerate(self._classes) if c not in gone]
        self._class_index = {label: index for index, label in enumerate(self._classes)}

    # ---- state ------------------------------------------------------------------------

    def _params(self) -> dict:
        return {"prior_alpha": self.prior_alpha}

    def _state_arrays(self) -> dict:
        return {"class_counts": self._class_counts}

    def to_state(self) -> dict:
        """The whole model as plain data: {"meta": JSON-able dict, "arrays": {name: ndarray}}."""
        meta = {
            "kind": type(self).__name__,
            "format": 1,
            "params": self._params(),
            "classes": list(self._classes),
            "integral": self._integral,
        }
        if self._on_grid:  # only then, so states of before stay as they were
            meta["on_grid"] = True
        if self.forgetting_epoch:  # likewise
            meta["forgetting_epoch"] = self.forgetting_epoch
            meta["decay_factors"] = [list(run) for run in self._decay_factors]
        meta.update(self._state_meta())
        arrays = {name: np.array(array, copy=True) for name, array in self._state_arrays().items()}
        return {"meta": meta, "arrays": arrays}

    def _state_meta(self) -> dict:
        return {}

    @classmethod
    def from_state(cls, state: dict):
        """The model a state holds; InvalidState (a ValueError) naming the broken invariant when
        it breaks one of the model's (`state_check`), before anything is built from it."""
        from stream_nb.model.state_check import check_state  # it imports this module

        check_state(cls, state)
        meta, arrays = state["meta"], state["arrays"]
        model = cls(**meta["params"])
        model._classes = list(meta["classes"])
        model._class_index = {label: index for index, label in enumerate(model._classes)}
        model._integral = bool(meta["integral"])
        model._on_grid = bool(meta.get("on_grid", False))
        model.forgetting_epoch, model._decay_factors = _checked_decay_record(meta)
        model._class_counts = np.array(arrays["class_counts"], dtype=np.float64)
        model._restore(meta, arrays)
        return model

    def _restore(self, meta: dict, arrays: dict) -> None:
        raise NotImplementedError

    def _check_mergeable(self, other) -> None:
        if type(other) is not type(self):
            raise TypeError(f"cannot merge a {type(other).__name__} into a {type(self).__name__}")
        if other._params() != self._params():
            raise ValueError(f"cannot merge models with different parameters: {self._params()} vs {other._params()}")
        if self.half_life is not None:  # each count's weight depends on where it fell in its own stream
            raise ValueError("cannot merge models that forget (half_life): their decayed counts do not add up "
                             "to the counts of one stream")

    def merge(self, other) -> NaiveBayes:
        """Add another model's counts to this one (in place; returns self).

        For models trained on disjoint parts of a stream, the result equals the model trained
        on the whole stream.
        """
        self._check_mergeable(other)
        self._add_classes(other._classes)
        into = np.array([self._class_index[label] for label in other._classes], dtype=np.int64)
        self._merge_from(other, into)
        self._class_counts[into] += other._class_counts
        self._integral = self._integral and other._integral
        return self

    def _merge_from(self, other, class_into: np.ndarray) -> None:
        raise NotImplementedError


def _combine_repeats(event: np.ndarray, column: np.ndarray, value: np.ndarray, names: list):
    """Merge occurrences of the same feature within an event, keeping first appearance order."""
    if len(event) == 0:
        return event, column, value
    feature = column.copy()
    unknown = np.flatnonzero(column < 0)
    if len(unknown):  # names never learned have no column: number them apart, below -1
        numbering: dict = {}
        feature[unknown] = [-2 - numbering.setdefault(names[i], len(numbering)) for i in unknown.tolist()]
    offset = -int(feature.min())
    width = int(feature.max()) + offset + 1
    row_bits = max(int(len(event) - 1).bit_length(), 1)
    # Sort (event, feature, row) packed in one int64: groups come out with their first row first.
    packed = np.sort(((event * width + (feature + offset)) << row_bits) | np.arange(len(event), dtype=np.int64))
    row = packed & ((1 << row_bits) - 1)
    group_key = packed >> row_bits
    starts = np.empty(len(event), dtype=bool)
    starts[0] = True
    np.not_equal(group_key[1:], group_key[:-1], out=starts[1:])
    group = np.cumsum(starts) - 1
    summed = np.bincount(group, weights=value[row])
    first = row[starts]
    order = np.argsort(first)  # first rows are distinct: back to order of first appearance
    first = first[order]
    return event[first], column[first], summed[order]


def _combine_buckets(column: list[int], value: list[float]) -> tuple[list[int], list[float]]:
    """`_combine_repeats` for one event: values sharing a column add up (from 0.0, in order of
    appearance, as np.bincount adds them); columns keep their order of first appearance."""
    summed: dict = {}
    for c, v in zip(column, value):
        summed[c] = summed.get(c, 0.0) + v
    return list(summed), list(summed.values())


def _checked_decay_record(meta: dict) -> tuple[int, list[list]]:
    """(forgetting_epoch, decay factors) of a state, checked: a state without them has decayed
    0 times (states of before unlearning)."""
    epoch = meta.get("forgetting_epoch", 0)
    runs = meta.get("decay_factors", [])
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"state's forgetting_epoch must be a whole number >= 0, got {epoch!r}")
    if not isinstance(runs, list) or not all(
            isinstance(run, (list, tuple)) and len(run) == 2 and isinstance(run[0], (int, float))
            and not isinstance(run[0], bool) and 0 < run[0] <= 1 and isinstance(run[1], int)
            and not isinstance(run[1], bool) and run[1] >= 1 for run in runs):
        raise ValueError(f"state's decay_factors must be [[factor in (0, 1], steps >= 1], ...], got {runs!r}")
    if sum(run[1] for run in runs) != epoch:
        raise ValueError(f"state's decay_factors count {sum(run[1] for run in runs)} steps, "
                         f"its forgetting_epoch {epoch}")
    return epoch, [[float(factor), count] for factor, count in runs]


class SequentialNB(NaiveBayes):
    """Base of the variants that score and learn one event at a time (categorical, Gaussian).

    A batch is a plain loop, so `predict_learn_many` equals the per-event loop by construction.
    A variant supplies `_check_event(i, x, label)` (raise on a bad value), `_score_one(x)` ->
    (scores, active, log_prior) and `_learn_one(x, class_index, weight)`.
    """

    def _check_event(self, i: int, x: dict, label) -> None:
        raise NotImplementedError

    def _validate(self, X, y, weights=None) -> list[float]:
        n = len(X)
        if len(y) != n:
            raise ValueError(f"X has {n} events but y has {len(y)} labels")
        weight = [1.0] * n if weights is None else [float(w) for w in weights]
        for i, x in enumerate(X):
            if not isinstance(x, dict):
                raise TypeError(f"event {i}: x must be a dict, got {type(x).__name__}")
            self._check_event(i, x, y[i])
            if not (math.isfinite(weight[i]) and weight[i] >= 0):
                raise ValueError("sample weights must be finite and >= 0")
        return weight

    def _encode(self, X, y, weights=None, validated=None):
        weight = validated if validated is not None else self._validate(X, y, weights)
        self._add_classes([y[i] for i in range(len(X)) if y[i] is not None and weight[i] > 0])
        return list(X), list(y), weight

    def _run(self, batch, predict: bool, learn: bool):
        X, y, weight = batch
        n_classes = len(self._classes)
        scores = np.full((len(X), n_classes), -np.inf)
        active = np.zeros((len(X), n_classes), dtype=bool)
        log_prior = np.full((len(X), n_classes), -np.inf)
        for i, x in enumerate(X):
            if predict:
                scores[i], active[i], log_prior[i] = self._score_one(x)
            if learn and y[i] is not None and weight[i] > 0:
                self._learn_one(x, self._class_index[y[i]], weight[i])
        return scores, active, log_prior


def _check_smoothing(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_unknown(unknown: str) -> None:
    if unknown not in ("ignore", "smooth"):
        raise ValueError(f"unknown must be 'ignore' or 'smooth', got {unknown!r}")


def _is_data_frame(X) -> bool:
    return hasattr(X, "to_dict") and hasattr(X, "columns")


def _as_records(X, zero_is_absent: bool):
    """X as a list of dicts. A pandas DataFrame's rows lose their missing (NaN) cells and, for
    the count models (a document-term matrix), their zeros: a word counted 0 times is absent."""
    if isinstance(X, SparseBatch):
        return X
    if _is_data_frame(X):
        return [{k: v for k, v in row.items() if v == v and not (zero_is_absent and v == 0)}
                for row in X.to_dict(orient="records")]
    return list(X)


def _as_labels(y) -> list:
    if hasattr(y, "tolist"):
        y = y.tolist()
    return [None if label is None or (isinstance(label, float) and label != label) else label for label in y]
