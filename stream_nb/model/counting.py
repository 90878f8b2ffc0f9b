"""Count-based variants over a vocabulary: multinomial, complement and Bernoulli naive Bayes.

All three keep one (features x classes) table of counts N_fc. Scoring an event needs, for
each of its features, N_fc *as of that event*; inside a batch those are exclusive prefix sums
over the batch's earlier labeled events, so a batch is scored in a handful of array passes.

A single event (learn_one, predict_proba_one) takes a shorter path with no prefix sums: N_fc
is the table as it is. It repeats the kernel's floating point operations for a batch of one
on Python floats (`_score_event`, `_learn_event`; see base.py), so both paths agree to the
last bit.

The multinomial's batches whose counts are exact run in C when the optional extension is built
(_kernel.c: event after event, the same operations as the kernel for a batch of one), which is
what makes order-dependent training (thick-threshold, train on error) as fast as learning all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stream_nb.model._numerics import (
    exclusive_cumsum,
    exclusive_prefix_by_group,
    first_occurrences,
    per_event_sum,
    row_sums,
    row_total,
    sequential_sum,
    weighted_column_sums,
)
from stream_nb.model.base import (
    GRID_BITS,
    GRID_LIMIT,
    ClassPrefix,
    EncodedBatch,
    EncodedEvent,
    NaiveBayes,
    NotLearned,
    SparseBatch,
    _check_smoothing,
    _check_unknown,
    decayed_alone,
)
from stream_nb.model.training import learn_decisions
from stream_nb.model.vocabulary import HashedVocabulary, Vocabulary, vocabulary_from_state
from stream_nb.native import native_allowed

try:  # the multinomial's prequential loop in C (setup.py builds it when it can; optional)
    from stream_nb.model import _kernel as _native_kernel
except ImportError:
    _native_kernel = None

_MODE_NUMBERS = {"all": 0, "on_error": 1, "thick_threshold": 2}  # as _kernel.c numbers them


def native_kernel():
    """The C kernel module, or None: not built, or switched off (STREAM_NB_NATIVE=0)."""
    if _native_kernel is None or not native_allowed():
        return None
    return _native_kernel


DEFAULT_EVICT_EVERY = 100  # labeled events between maintenance points (budget checks, decay)
EVICT_TO = 0.9  # a check over the budget evicts down to this share of it (not one feature a check)


def _check_maintenance_options(max_features, evict_every, n_hash_buckets, half_life) -> None:
    def positive_whole(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1

    if half_life is not None and (isinstance(half_life, bool) or not isinstance(half_life, (int, float))
                                  or not math.isfinite(half_life) or half_life <= 0):
        raise ValueError(f"half_life must be a positive number of labeled events, got {half_life!r}")

    if max_features is not None and not positive_whole(max_features):
        raise ValueError(f"max_features must be a positive whole number, got {max_features!r}")
    if not positive_whole(evict_every):
        raise ValueError(f"evict_every must be a positive whole number, got {evict_every!r}")
    if max_features is not None and n_hash_buckets is not None:
        raise ValueError("max_features and n_hash_buckets are two ways to bound memory; set one")
    if max_features is not None and int(max_features * EVICT_TO) < 1:
        raise ValueError(f"max_features must leave at least one feature after eviction, got {max_features}")


_DOT_BLOCK = 8192
MAX_COUNT = 2.0**53  # beyond this float64 no longer holds every whole number


def _blocked_dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) in fixed blocks: each block stays under BLAS's threading threshold (threads
    cost more than they give on small, busy machines) and the result depends only on the data."""
    total = 0.0
    for start in range(0, len(a), _DOT_BLOCK):
        total += float(np.dot(a[start : start + _DOT_BLOCK], b[start : start + _DOT_BLOCK]))
    return total


def _event_range(batch: EncodedBatch, lo: int, hi: int, learned: np.ndarray | None = None) -> EncodedBatch:
    """Events lo..hi-1 of a batch as a batch of their own; with `learned` (a flag per event of the
    whole batch) only the flagged ones keep their labels."""
    a, b = np.searchsorted(batch.event, [lo, hi])
    label = batch.label[lo:hi].copy()
    if learned is not None:
        label[~learned[lo:hi]] = -1
    return EncodedBatch(hi - lo, batch.event[a:b] - lo, batch.column[a:b], batch.value[a:b], label, batch.weight[lo:hi],
                        unit_values=batch.unit_values)


@dataclass
class FeaturePrefix:
    """Per-occurrence view of the feature counts, as each event sees them."""

    rows: np.ndarray  # indices into the batch's occurrences that have a column
    event: np.ndarray  # (m,) event of each such occurrence
    column: np.ndarray  # (m,) its feature column
    counts_before: np.ndarray  # (m, C) N_fc before the event
    seen_before: np.ndarray  # (m,) the feature had been learned before the event
    vocabulary_before: np.ndarray  # (n,) |V|: features learned before each event
    learned: np.ndarray  # (m, C) what each occurrence adds to N_fc
    newly_seen_at: np.ndarray  # event index at which each newly seen feature was first learned


class CountingNB(NaiveBayes):
    """Shared machinery of the vocabulary-based variants."""

    ZERO_IS_ABSENT = True  # a DataFrame is a document-term matrix: a word counted 0 times is absent

    def __init__(self, alpha: float = 1.0, prior_alpha: float = 0.0, unknown: str = "ignore",
                 n_hash_buckets: int | None = None, max_features: int | None = None,
                 evict_every: int = DEFAULT_EVICT_EVERY, half_life: float | None = None):
        super().__init__(prior_alpha=prior_alpha)
        _check_smoothing("alpha", alpha)
        _check_unknown(unknown)
        if unknown == "smooth" and alpha == 0:
            raise ValueError("unknown='smooth' gives an unseen feature alpha / (...) = 0 when alpha = 0; "
                             "use unknown='ignore' with alpha = 0")
        _check_maintenance_options(max_features, evict_every, n_hash_buckets, half_life)
        self.alpha = alpha
        self.unknown = unknown
        self.n_hash_buckets = n_hash_buckets
        self.max_features = max_features
        self.evict_every = evict_every
        self.half_life = half_life
        self.features_evicted = 0  # by the budget, since this object was made (a running figure, not state)
        self._learned_weight = 0.0  # sum of the weights learned, never decayed: events_learned when forgetting
        self._vocabulary = Vocabulary() if n_hash_buckets is None else HashedVocabulary(n_hash_buckets)
        self._feature_counts = np.zeros((0, 0))  # rows beyond len(vocabulary) are spare capacity
        self._class_totals = np.zeros(0)  # sum over features of N_fc
        self._features_seen = 0  # |V|: features with a positive count in some class
        self._grow_features()  # hashed: every bucket has its row from the start

    # ---- bookkeeping ------------------------------------------------------------------

    @property
    def n_features(self) -> int:
        """Columns of the state: distinct feature names (hash buckets with n_hash_buckets)."""
        return len(self._vocabulary)

    @property
    def n_terms(self) -> int:
        return self._features_seen

    @property
    def vocabulary(self) -> Vocabulary | HashedVocabulary:
        """Feature name -> column. Read it (a featuriser looks names up in it as it makes them);
        only learning adds to it."""
        return self._vocabulary

    def _insert_class_columns(self, insert_at: np.ndarray) -> None:
        self._feature_counts = np.insert(self._feature_counts, insert_at, 0.0, axis=1)
        self._class_totals = np.insert(self._class_totals, insert_at, 0.0)

    def _grow_features(self, pending: int = 0) -> None:
        needed = len(self._vocabulary) + pending
        capacity = len(self._feature_counts)
        if needed > capacity:
            grown = max(needed, capacity + capacity // 2, 64)
            if self._vocabulary.hashed:
                grown = needed
            counts = np.zeros((grown, len(self._classes)))
            counts[:capacity] = self._feature_counts
            self._feature_counts = counts

    @property
    def _counts(self) -> np.ndarray:
        return self._feature_counts[: len(self._vocabulary)]

    @property
    def events_learned(self) -> float:
        """Events learned (their weights added up); with forgetting, N_c decays and no longer
        counts them."""
        return self._learned_weight if self.half_life is not None else super().events_learned

    # ---- maintenance: forgetting, the feature budget ------------------------------------

    def _maintenance_may_act(self, X, labeled: list) -> bool:
        if self.half_life is not None:
            return True  # every point decays
        # An upper bound on the features the batch's labeled events can add: their occurrences.
        if isinstance(X, SparseBatch):
            occurrences = int(X.lengths[labeled].sum())
        else:
            occurrences = sum(len(X[i]) for i in labeled)
        return len(self._vocabulary) + occurrences > self.max_features

    def _maintain(self) -> None:
        if self.half_life is not None:
            self.decay(0.5 ** (self.evict_every / self.half_life))
        if self.max_features is not None and len(self._vocabulary) > self.max_features:
            self.evict_features(int(self.max_features * EVICT_TO))

    def decay(self, factor: float) -> None:
        """Forget: multiply every count by `factor` (0 < factor <= 1), rounded to the grid of
        multiples of q = 2^-GRID_BITS (about 1e-6):

            N_fc <- q round(factor N_fc / q),   N_c <- q round(factor N_c / q),   T_c <- sum_f N_fc

        With half-life h (labeled events), factor = 2^(-k/h) after every k = evict_every labeled
        events, so an event learned t labeled events ago weighs about 2^(-t/h): the estimates
        follow the recent stream, while alpha and lambda keep their full weight. On the grid,
        counts still add up exactly in any order, so batches keep to the per-event loop bit for
        bit at batch speed (Bernoulli's histograms need whole numbers: it goes one event at a
        time). Rounding is monotone, so N_fc <= N_c holds on. A count that rounds to 0 leaves V
        (|V| counts the features with a positive count), in the same deterministic way.
        Every call is one step of `forgetting_epoch`, its factor recorded (unlearning decays an
        event's part by the factors of the steps since it was learned).
        """
        if not 0 < factor <= 1:
            raise ValueError(f"decay factor must be in (0, 1], got {factor!r}")
        self._record_decay(factor)  # a step of forgetting_epoch, even at factor 1 (which changes nothing)
        if factor == 1:
            return
        scale = factor * 2.0**GRID_BITS
        size = len(self._vocabulary)
        counts = self._feature_counts[:size]
        counts[:] = np.rint(counts * scale) / 2.0**GRID_BITS
        self._class_counts = np.rint(self._class_counts * scale) / 2.0**GRID_BITS
        # Column by column: numpy's row-wise reductions over a few classes are ~15x slower.
        columns = [counts[:, c] for c in range(counts.shape[1])]
        self._class_totals = np.array([column.sum() for column in columns])  # exact: every term is on the grid
        row_totals = sum(columns[1:], columns[0].copy()) if columns else np.zeros(size)
        self._features_seen = int(np.count_nonzero(row_totals))  # counts are >= 0
        self._integral = False
        self._on_grid = self._count_mass() < GRID_LIMIT
        self._after_restore()

    def _count_mass(self) -> float:
        return float(self._class_counts.sum()) + float(self._class_totals.sum())

    def evict_features(self, keep: int) -> int:
        """Drop all but `keep` features from the state, the least used first; returns how many.

        Order of eviction (bogofilter's and SpamBayes' expiry of rare, stale tokens):
          1. the smallest total count sum_c N_fc (a feature never counted goes first);
          2. among equal totals, the feature learned first: columns are in order of first
             learning, so for the features counted once (most of them) this is the one seen
             longest ago.
        A dropped feature leaves no trace: N_fc and its share of T_c go, |V| shrinks, and it
        is unknown at prediction until learned again (then as a new feature). N_c stays: the
        events were learned. Survivors keep their order.
        """
        size = len(self._vocabulary)
        if self._vocabulary.hashed or keep >= size:
            return 0
        counts = self._counts
        totals = counts.sum(axis=1)
        n_drop = size - keep
        threshold = np.partition(totals, n_drop - 1)[n_drop - 1]
        drop = totals < threshold
        tied = np.flatnonzero(totals == threshold)[: n_drop - int(drop.sum())]
        drop[tied] = True
        survivors = np.flatnonzero(~drop)
        self._class_totals = self._class_totals - counts[drop].sum(axis=0)
        names = self._vocabulary.names()
        self._vocabulary = Vocabulary.from_names([names[i] for i in survivors.tolist()])
        kept = counts[survivors]
        self._feature_counts = np.zeros((max(len(kept), 64), len(self._classes)))
        self._feature_counts[: len(kept)] = kept
        self._features_seen = int((kept.sum(axis=1) > 0).sum())
        self._after_restore()
        self.features_evicted += n_drop
        return n_drop

    # ---- prefix counts ----------------------------------------------------------------

    def _occurrence_learning(self, batch: EncodedBatch, rows: np.ndarray) -> np.ndarray:
        """What each occurrence adds to its feature's count when its event is learned."""
        raise NotImplementedError

    def _feature_prefix(self, batch: EncodedBatch) -> FeaturePrefix:
        rows = np.flatnonzero(batch.column >= 0)
        event, column = batch.event[rows], batch.column[rows]
        label = batch.label[event]
        learned = np.zeros((len(rows), len(self._classes)))
        learning = np.flatnonzero(label >= 0)
        learned[learning, label[learning]] = self._occurrence_learning(batch, rows[learning])
        start = self._feature_counts[column]
        if batch.n_events == 1 or len(learning) == 0:
            counts_before = start  # nothing earlier in the batch was learned: the prefix is 0
        else:
            counts_before = start + exclusive_prefix_by_group(column, learned)
        seen_before = row_sums(counts_before) > 0
        # Features whose first count arrives in this batch, and the event that brings it.
        first_learned = (row_sums(start) == 0) & (label >= 0)
        if first_learned.any():
            _, first_row = np.unique(column[first_learned], return_index=True)
            newly_seen_at = np.sort(event[first_learned][first_row])
        else:
            newly_seen_at = np.zeros(0, dtype=np.int64)
        vocabulary_before = self._features_seen + np.searchsorted(
            newly_seen_at, np.arange(batch.n_events), side="left"
        )
        return FeaturePrefix(rows, event, column, counts_before, seen_before, vocabulary_before,
                             learned, newly_seen_at)

    def _learn_counts(self, batch: EncodedBatch, features: FeaturePrefix, classes: ClassPrefix) -> None:
        learning = np.flatnonzero(features.learned.any(axis=1))
        label = batch.label[features.event[learning]]
        np.add.at(self._feature_counts, (features.column[learning], label),
                  features.learned[learning, label])
        self._add_labeled(batch, np.flatnonzero(batch.labeled))
        self._features_seen += len(features.newly_seen_at)

    def _add_labeled(self, batch: EncodedBatch, labeled: np.ndarray) -> None:
        """N_c += w for the batch's events `labeled`, and the weight learned (which never decays)."""
        weights = batch.weight[labeled]
        np.add.at(self._class_counts, batch.label[labeled], weights)
        self._learned_weight += float(weights.sum())

    def _add_totals(self, batch: EncodedBatch, totals_added: np.ndarray) -> None:
        if self._batch_is_exact(batch):  # whole numbers: any order of addition is exact
            self._class_totals += totals_added.sum(axis=0)
            return
        # Row by row, so T_c accumulates in the same order as one learn_one at a time.
        for row in totals_added[np.flatnonzero(totals_added.any(axis=1))]:
            self._class_totals += row

    def _token_totals_prefix(self, batch: EncodedBatch, features: FeaturePrefix) -> tuple:
        """T_c before each event, and what each event adds to T_c."""
        added = per_event_sum(features.event, features.learned, batch.n_events)
        return self._class_totals + exclusive_cumsum(added), added

    # ---- order-dependent training at batch speed ---------------------------------------

    def _settle_in_windows(self, X, y, decide, guessing) -> tuple[list, list] | None:
        """predict, decide, learn if decided: event by event in meaning, a window at a time in
        work; (probabilities, learned flags). `decide(scores, active, labels)` gives the learn
        flag of every row of a window (a training.LearnRule: its mode and margin). None (nothing changed) when
        prefix sums would not be exact; every label must be a class learned.

        A window is scored in one kernel pass under a guess of which of its labeled events are
        learned (prefix sums over those). Row i is exactly the per-event loop's score as long as
        the guess was right for every labeled event before i, so the events up to the first
        wrong guess are settled: their probabilities taken, their learning done from the same
        prefix sums. The decisions the pass computed after that point are not exact, but they
        are the next pass's guess, and nearly always right: a window takes a few passes, not one
        per decision that differs from its neighbours. The first guess comes from the recent
        learn rate (`guessing`).

        The batch is encoded once: its labeled events' new features get columns up front (at
        zero counts they change no score), and the vocabulary is put in the order learning
        gives it at the end.
        """
        size = len(self._vocabulary)
        batch = self._encode(X, y, pending=True)
        if not self._batch_is_exact(batch):
            return None
        n = batch.n_events
        probabilities: list[dict] = []
        learned = np.zeros(n, dtype=bool)
        guess = batch.labeled & (guessing.rate >= 0.5)
        start = 0
        while start < n:
            stop = min(n, start + guessing.WINDOW)
            window = _event_range(batch, start, stop, learned=guess)
            scores, active, log_prior, learn_before = self._score_run(window)
            decisions = decide(scores, active, batch.label[start:stop], start)  # False where unlabeled
            wrong_guesses = np.flatnonzero(decisions != guess[start:stop])
            wrong = int(wrong_guesses[0]) if len(wrong_guesses) else None
            settled = stop - start if wrong is None else wrong + 1
            learned[start : start + settled] = decisions[:settled]
            guessing.record_many(decisions[:settled][batch.labeled[start : start + settled]])
            guess[start:stop] = decisions  # after a wrong guess: the next pass's guess
            probabilities.extend(self._probabilities(scores[:settled], active[:settled], log_prior[:settled]))
            if wrong is None:
                learn_before(settled)
            else:
                learn_before(wrong)  # this pass's sums hold up to the wrong guess
                if learned[start + wrong]:
                    at = start + wrong
                    self._kernel(_event_range(batch, at, at + 1), predict=False, learn=True)
            start += settled
        learned_flags = learned.tolist()
        self._order_new_features(size, X, batch, learned_flags)
        return probabilities, learned_flags

    def _score_run(self, batch: EncodedBatch):
        """(scores, active, log_prior, learn_before): the kernel's scores with prefix sums, and
        learn_before(h), which learns the labeled events before h from those same sums."""
        raise NotImplementedError

    def _order_new_features(self, size: int, X, batch: EncodedBatch, learned: list[bool]) -> None:
        """Add to the vocabulary, of the batch's pending names (columns `size` on), those of
        learned events, in the order learn_one would have added them (first appearance among
        learned events), and move their counts to those columns."""
        pending = batch.pending_names
        if not pending:
            return
        if isinstance(X, SparseBatch) and (X.values is None or X.values.all()):
            # every name is an occurrence of the encoded batch (no zero value was dropped)
            kernel = native_kernel()
            if kernel is not None:  # (the same rows in one pass, no array the size of the batch's)
                rows = np.frombuffer(kernel.learned_new_rows(
                    np.ascontiguousarray(batch.event, dtype=np.int64), np.ascontiguousarray(batch.column, dtype=np.int64),
                    bytes(learned), size, len(pending)), dtype=np.int64)
            else:
                learned_occurrence = np.array(learned, dtype=bool)[batch.event] & (batch.column >= size)
                rows = size + first_occurrences(batch.column[learned_occurrence] - size, len(pending))
        else:  # learn_one adds every name of an event, zero values included
            column_of = dict(zip(pending, range(size, size + len(pending))))
            order = dict.fromkeys(name for x, was_learned in zip(X, learned) if was_learned
                                  for name in x if name in column_of)
            rows = np.array([column_of[name] for name in order], dtype=np.int64)
        kept = self._feature_counts[rows]
        self._feature_counts[size : size + len(pending)] = 0.0
        self._feature_counts[size : size + len(rows)] = kept
        self._vocabulary.add_new_at(pending, rows - size)  # each row once

    # ---- single events ----------------------------------------------------------------

    _event_path = True

    def _event_features(self, event: EncodedEvent) -> tuple[list, list, list]:
        """(N_fc of the event's features learned before, row after row in one flat list, their
        values, the values of the other features), in the event's order: the kernel's
        `seen_before` split (N_fc >= 0, so "sum over c > 0" is "some N_fc != 0")."""
        counts = self._feature_counts
        column = event.column
        rows = counts.take(column, axis=0).tolist() if len(counts) else [[0.0]] * len(column)
        known, values, unseen = [], [], []
        for c, value, row in zip(column, event.value, rows):
            if c >= 0 and any(row):  # (c = -1 took the last row: a feature never learned)
                known.extend(row)
                values.append(value)
            else:
                unseen.append(value)
        return known, values, unseen

    def _learn_event(self, event: EncodedEvent) -> None:
        """N_fc += (what each feature adds), N_c += w, |V| += features seen for the first time."""
        if not self._event_is_exact(event):
            self._lose_exact_sums()
        column, c = event.column, event.label
        before = self._feature_counts.take(column, axis=0)
        newly_seen = sum(1 for row in before.tolist() if not any(row))  # N_fc = 0 in every class
        learned = self._event_learning(event)
        np.add.at(self._feature_counts, (column, c), learned)
        self._class_counts[c] += event.weight
        self._learned_weight += event.weight
        self._features_seen += newly_seen
        self._learned_event(event, before, newly_seen, learned)

    def _event_learning(self, event: EncodedEvent):
        """`_occurrence_learning` for one event: a list, or one number for every feature."""
        raise NotImplementedError

    def _learned_event(self, event: EncodedEvent, before: np.ndarray, newly_seen: int, learned) -> None:
        """What the variant keeps besides N_fc, N_c and |V| (before: N_fc before the event)."""

    # ---- unlearning -------------------------------------------------------------------

    def _unlearn_amounts(self, values: list[float], weight: float) -> list[float]:
        """What learning added to each kept feature's count: `_event_learning`'s figures."""
        raise NotImplementedError

    def _plan_unlearning(self, X, y, weights, steps, name_events):
        """Per labeled event (w > 0): (class index, N_c after, w, feature rows, their counts
        after, what was taken from each, exact, on grid). An event's occurrences are combined
        as learning combines them (names repeated in a SparseBatch, names sharing a hash
        bucket: values added from 0.0 in order), then its parts are `_unlearn_amounts`, decayed
        alone over `steps`. A name not in the vocabulary was never learned (refused) or, with a
        budget, evicted (nothing of it is left to take back); with a budget a feature's count is
        taken back as far as it goes, since eviction may have taken any share of it."""
        _, names, value, _, lengths, weight, labeled_rows, _ = self._validate(X, y, weights)
        columns = self._vocabulary.lookup(names).tolist()
        values = value.tolist()
        offsets = np.concatenate(([0], np.cumsum(lengths))).tolist()
        budget = self.max_features is not None
        counts, held_counts, held_class = self._feature_counts, {}, {}
        plans = []
        for i in labeled_rows:
            where = f"event {i}: " if name_events else ""
            label, w = y[i], float(weight[i])
            c = self._class_to_unlearn(label, where)
            summed: dict = {}  # combined occurrences: key -> [name, column, value]
            for name, column, v in zip(names[offsets[i]:offsets[i + 1]], columns[offsets[i]:offsets[i + 1]],
                                       values[offsets[i]:offsets[i + 1]]):
                key = (0, column) if column >= 0 else (1, name)
                entry = summed.setdefault(key, [name, column, 0.0])
                entry[2] = entry[2] + v
            entries = list(summed.values())
            keep = self._check_values(np.array([entry[2] for entry in entries], dtype=np.float64)).tolist()
            entries = [entry for entry, kept in zip(entries, keep) if kept]
            parts = self._unlearn_amounts([entry[2] for entry in entries], w)
            decayed = decayed_alone(np.array(parts + [w], dtype=np.float64), steps[i]).tolist()
            held = held_class.get(c, float(self._class_counts[c]))
            new_class = self._take_back(held, decayed[-1], f"{where}class {label!r}'s count N_c")
            held_class[c] = new_class
            rows, after, taken = [], [], []
            for (name, column, _), amount in zip(entries, decayed):
                if column < 0:
                    if budget:
                        continue
                    raise NotLearned(f"{where}feature {name!r} was never learned (class {label!r})")
                held = held_counts.get((column, c))
                if held is None:
                    held = float(counts[column, c])
                what = f"{where}feature {name!r} in class {label!r}"
                rest = self._take_back(held, min(amount, held) if budget else amount, what)
                held_counts[(column, c)] = rest
                rows.append(column)
                after.append(rest)
                taken.append(held - rest)
            figures = decayed + [w]
            exact = all(map(float.is_integer, figures))
            on_grid = all(float(f * 2.0**GRID_BITS).is_integer() for f in figures)
            plans.append((c, new_class, w, rows, after, taken, exact, on_grid))
        return plans

    def _apply_unlearning(self, plan) -> None:
        c, new_class, w, rows, after, taken, exact, on_grid = plan
        if not exact:  # as learning such an event would
            if on_grid and self._on_grid:
                self._integral = False
            else:
                self._lose_exact_sums()
        if rows:
            counts = self._feature_counts
            was_seen = counts[rows].any(axis=1)
            counts[rows, c] = after
            self._features_seen -= int(np.count_nonzero(was_seen & ~counts[rows].any(axis=1)))
        self._class_counts[c] = new_class
        self._learned_weight = max(self._learned_weight - w, 0.0)
        self._unlearned_event(c, taken)

    def _unlearned_event(self, c: int, taken: list[float]) -> None:
        """What the variant keeps besides N_fc, N_c and |V| (taken: what left each N_fc)."""

    def _class_is_empty(self, c: int) -> bool:
        return not self._counts[:, c].any()

    def _delete_class_columns(self, classes: list[int]) -> None:
        self._feature_counts = np.ascontiguousarray(np.delete(self._feature_counts, classes, axis=1))
        self._class_totals = np.delete(self._class_totals, classes)

    # ---- state ------------------------------------------------------------------------

    def _params(self) -> dict:
        params = {"alpha": self.alpha, "prior_alpha": self.prior_alpha, "unknown": self.unknown,
                  "n_hash_buckets": self.n_hash_buckets}
        # only when set, so states and digests of before stay as they were
        if self.max_features is not None:
            params.update(max_features=self.max_features, evict_every=self.evict_every)
        if self.half_life is not None:
            params.update(half_life=self.half_life, evict_every=self.evict_every)
        return params

    def _state_arrays(self) -> dict:
        return {"class_counts": self._class_counts, "feature_counts": self._counts,
                "class_totals": self._class_totals}

    def _state_meta(self) -> dict:
        meta = {"vocabulary": self._vocabulary.to_state()}
        if self._maintained:
            meta["labeled_seen"] = self.labeled_seen  # where the next maintenance point falls
        if self.half_life is not None:
            meta["events_learned"] = self._learned_weight
        return meta

    def _restore(self, meta: dict, arrays: dict) -> None:
        self.labeled_seen = int(meta.get("labeled_seen", 0))
        self._learned_weight = float(meta.get("events_learned", 0.0))
        self._vocabulary = vocabulary_from_state(meta["vocabulary"])
        self._feature_counts = np.array(arrays["feature_counts"], dtype=np.float64).reshape(
            len(self._vocabulary), len(self._classes))
        self._class_totals = np.array(arrays["class_totals"], dtype=np.float64)
        self._features_seen = int((self._feature_counts.sum(axis=1) > 0).sum())
        self._after_restore()

    def _after_restore(self) -> None:
        """Rebuild what is derived from the counts."""

    def _merge_from(self, other: CountingNB, class_into: np.ndarray) -> None:
        if self._vocabulary.hashed:  # same parameters, so the same buckets
            rows = np.arange(len(self._vocabulary))
        else:
            other_names = other._vocabulary.names()
            self._vocabulary.add(other_names)
            self._grow_features()
            rows = self._vocabulary.lookup(other_names)
        self._feature_counts[np.ix_(rows, class_into)] += other._counts
        self._class_totals[class_into] += other._class_totals
        self._features_seen = int((self._counts.sum(axis=1) > 0).sum())
        self._after_restore()

    def feature_log_counts(self) -> dict:
        """{feature: {class: N_fc}} for features with a positive count (for inspection)."""
        names = self._vocabulary.names()
        counts = self._counts
        return {names[f]: {c: float(counts[f, k]) for k, c in enumerate(self._classes) if counts[f, k]}
                for f in np.flatnonzero(counts.sum(axis=1) > 0)}


class MultinomialNB(CountingNB):
    """Multinomial naive Bayes over feature counts (words in a message).

        log P(c) P(x | c) = log P(c) + sum_f x_f log P(f | c)
        P(f | c) = (N_fc + alpha) / (T_c + alpha |V|)

    N_fc: count of feature f in class c; T_c = sum_f N_fc; |V|: features learned so far, in
    any class. alpha = 1 is Laplace, 0 < alpha < 1 Lidstone, alpha = 0 the MLE (a feature never
    seen in c then makes P(x | c) = 0: its log is -inf on purpose, never NaN).

    Features never learned are dropped (`unknown="ignore"`, the textbook rule) or, with
    `unknown="smooth"` (River's rule), count as alpha / (T_c + alpha |V|).
    Feature values must be >= 0; zeros carry nothing and are skipped.
    """

    def _check_values(self, values: np.ndarray) -> np.ndarray:
        keep = super()._check_values(values)
        if (values < 0).any():
            raise ValueError("MultinomialNB needs feature values >= 0 (counts); got a negative value")
        if (values > MAX_COUNT).any():
            raise ValueError("feature values above 2**53 are not counts (float64 stops being exact there)")
        return keep

    def _event_keep(self, values):
        if values and (min(values) < 0 or max(values) > MAX_COUNT):
            return None  # the general encoder raises the error
        return super()._event_keep(values)

    def _occurrence_learning(self, batch, rows):
        return batch.value[rows] * batch.weight[batch.event[rows]]

    def _event_learning(self, event):
        weight = event.weight
        return [value * weight for value in event.value]

    def _learned_event(self, event, before, newly_seen, learned):
        self._class_totals[event.label] += sequential_sum(learned)  # T_c, as _add_totals adds it

    def _unlearn_amounts(self, values, weight):
        return [value * weight for value in values]

    def _unlearned_event(self, c, taken):
        total = self._class_totals[c] - sequential_sum(taken)
        # T_c = sum_f N_fc: 0 when they all are (no float residue of fractional weights)
        self._class_totals[c] = max(total, 0.0) if self._counts[:, c].any() else 0.0

    def _event_evidence(self, log_numerators: list, values: list, unseen: list) -> tuple[list, float]:
        """(sum_f x_f log_numerator_fc for each class c, sum_f x_f) over the event's known
        features (log_numerators row after row), with the unseen ones at log(alpha) when
        unknown="smooth": the kernel's sums for a batch of one, in the same order."""
        evidence = weighted_column_sums(log_numerators, len(self._classes), values)
        n_counted = sequential_sum(values)
        if self.unknown == "smooth":
            n_unseen = sequential_sum(unseen)
            unseen_part = n_unseen * math.log(self.alpha)
            evidence = [total + unseen_part for total in evidence]
            n_counted = n_counted + n_unseen
        return evidence, n_counted

    def _score_event(self, event):
        """The kernel's score for a batch of one (see the class docstring)."""
        alpha, vocabulary = self.alpha, self._features_seen
        counts, values, unseen = self._event_features(event)
        denominators = [total + alpha * vocabulary for total in self._class_totals.tolist()]
        active, log_prior, logs = self._event_prior([n + alpha for n in counts] + denominators)
        evidence, n_counted = self._event_evidence(logs, values, unseen)
        scores = [
            (-math.inf if n_counted > 0 else prior) if denominator == 0 else prior + e - n_counted * log_d
            for prior, e, denominator, log_d in zip(log_prior, evidence, denominators, logs[len(counts) :])
        ]
        return scores, active, log_prior

    _native = True  # its kernel has a C twin (_kernel.c); ComplementNB scores otherwise

    def _kernel(self, batch: EncodedBatch, predict: bool, learn: bool):
        if (learn or not batch.labeled.any()) and self._takes_native(batch):
            scores, active, log_prior, _ = self._settle_natively(batch, "all", np.zeros(batch.n_events), predict)
            return (scores, active, log_prior) if predict else None
        return self._array_kernel(batch, predict, learn)

    def _array_kernel(self, batch: EncodedBatch, predict: bool, learn: bool):
        """The kernel in array passes over prefix sums: the definition the C kernel repeats."""
        classes = self._class_prefix(batch)
        features = self._feature_prefix(batch)
        totals_before, totals_added = self._token_totals_prefix(batch, features)
        result = None
        if predict:
            result = (self._score(batch, classes, features, totals_before), classes.active, classes.log_prior)
        if learn:
            self._learn_counts(batch, features, classes)
            self._add_totals(batch, totals_added)
        return result

    # ---- the C kernel -----------------------------------------------------------------

    def _native_on(self) -> bool:
        """This variant's kernel has a C twin, built and not switched off."""
        return self._native and native_kernel() is not None

    def _takes_native(self, batch: EncodedBatch) -> bool:
        """Whether the C kernel may run the batch: built and on, this variant's scores, a class
        to score, and exact counts (the state's, and the batch's if it learns) so that no sum
        depends on its order of addition."""
        if not self._native_on() or not self._classes:
            return False
        if batch.labeled.any():
            exact = self._batch_is_exact(batch)
        else:
            exact = self._integral or (self._on_grid and self._count_mass() < GRID_LIMIT)
        return exact and self._feature_counts.flags.c_contiguous

    def _settle_natively(self, batch: EncodedBatch, mode: str, margins: np.ndarray, predict: bool):
        """Predict (if predict), decide by the training mode and learn, event after event, in C
        (_kernel.c repeats `_array_kernel` for a batch of one); (scores, active, log_prior,
        learned). A labeled event whose active scores are not all finite is decided here by
        the definition (learn_decisions hands such rows to should_learn), and the C loop goes
        on after it. margins: each event's thick-threshold margin (float64, one per event)."""
        n, n_classes = batch.n_events, len(self._classes)
        margins = np.ascontiguousarray(margins, dtype=np.float64)
        scores, log_prior = np.zeros((n, n_classes)), np.zeros((n, n_classes))
        active, learned = np.zeros((n, n_classes), dtype=bool), np.zeros(n, dtype=bool)
        arrays = (np.ascontiguousarray(batch.event, dtype=np.int64), np.ascontiguousarray(batch.column, dtype=np.int64),
                  np.ascontiguousarray(batch.value, dtype=np.float64), np.ascontiguousarray(batch.label, dtype=np.int64),
                  np.ascontiguousarray(batch.weight, dtype=np.float64))
        log_alpha = math.log(self.alpha) if self.unknown == "smooth" else None  # as _evidence takes it
        start = 0
        while True:
            settings = (self._features_seen, float(self.alpha), float(self.prior_alpha), log_alpha,
                        _MODE_NUMBERS[mode], predict)
            stop, self._features_seen, weight = native_kernel().settle(
                start, *arrays, self._feature_counts, self._class_counts, self._class_totals, settings,
                scores, active, log_prior, learned, margins)
            self._learned_weight += weight
            if stop == n:
                return scores, active, log_prior, learned
            one = _event_range(batch, stop, stop + 1)
            row_scores, row_active, row_prior = self._array_kernel(one, predict=True, learn=False)
            scores[stop], active[stop], log_prior[stop] = row_scores[0], row_active[0], row_prior[0]
            learned[stop] = learn_decisions(row_scores, row_active, one.label, mode, margins[stop : stop + 1])[0]
            if learned[stop]:
                self._array_kernel(one, predict=False, learn=True)
            start = stop + 1

    def _settle_in_windows(self, X, y, decide, guessing):
        """The window path's results (see CountingNB), from the C kernel when it runs: event by
        event in work too, so no guess and no pass is ever repeated."""
        if not self._native_on():
            return super()._settle_in_windows(X, y, decide, guessing)
        size = len(self._vocabulary)
        batch = self._encode(X, y, pending=True)
        if not self._takes_native(batch):
            return None
        scores, active, log_prior, learned = self._settle_natively(batch, decide.mode, decide.margins(batch.n_events), predict=True)
        learned_flags = learned.tolist()
        self._order_new_features(size, X, batch, learned_flags)
        return self._probabilities(scores, active, log_prior), learned_flags

    def _score_run(self, batch: EncodedBatch):
        classes = self._class_prefix(batch)
        features = self._feature_prefix(batch)
        totals_before, totals_added = self._token_totals_prefix(batch, features)
        scores = self._score(batch, classes, features, totals_before)

        def learn_before(h: int) -> None:
            """N_fc, N_c, T_c and |V| after the labeled events before h: the kernel's own
            additions, cut at h (whole numbers, so the order of addition does not matter)."""
            if h <= 0:
                return
            m = int(np.searchsorted(features.event, h))
            learning = np.flatnonzero(features.learned[:m].any(axis=1))
            label = batch.label[features.event[learning]]
            np.add.at(self._feature_counts, (features.column[learning], label), features.learned[learning, label])
            self._add_labeled(batch, np.flatnonzero(batch.labeled[:h]))
            self._features_seen += int(np.searchsorted(features.newly_seen_at, h))
            self._class_totals += totals_added[:h].sum(axis=0)

        return scores, classes.active, classes.log_prior, learn_before

    def _numerator_counts(self, counts_before: np.ndarray) -> np.ndarray:
        """The counts in the numerator of P(f | c): N_fc (complement NB: N_~c,f)."""
        return counts_before

    def _evidence(self, batch, features) -> tuple[np.ndarray, np.ndarray]:
        """Per event and class, sum_f x_f log(numerator count + alpha), and sum_f x_f over the
        features counted (known ones; unseen ones too with unknown="smooth", at count 0)."""
        n, alpha = batch.n_events, self.alpha
        known = np.flatnonzero(features.seen_before)
        occ_event = features.event[known]
        value = batch.value[features.rows[known]]
        with np.errstate(divide="ignore"):
            log_numerator = np.log(self._numerator_counts(features.counts_before[known]) + alpha)
        evidence = per_event_sum(occ_event, value[:, None] * log_numerator, n)
        n_counted = per_event_sum(occ_event, value, n)
        if self.unknown == "smooth":
            unseen = np.ones(len(batch.event), dtype=bool)
            unseen[features.rows[known]] = False
            n_unseen = per_event_sum(batch.event[unseen], batch.value[unseen], n)
            evidence = evidence + n_unseen[:, None] * math.log(alpha)
            n_counted = n_counted + n_unseen
        return evidence, n_counted

    def _score(self, batch, classes, features, totals_before):
        evidence, n_counted = self._evidence(batch, features)
        denominator = totals_before + self.alpha * features.vocabulary_before[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = classes.log_prior + evidence - n_counted[:, None] * np.log(denominator)
        empty = denominator == 0  # alpha = 0 and a class with no tokens yet: 0/0, decided here
        if empty.any():
            scores = np.where(empty, np.where(n_counted[:, None] > 0, -np.inf, classes.log_prior), scores)
        return scores


class ComplementNB(MultinomialNB):
    """Complement naive Bayes (Rennie, Shih, Teevan and Karger, 2003).

    Each class is scored by how badly its *complement* (all other classes) explains the event:

        score_c = - sum_f x_f log theta_~c,f
        theta_~c,f = (N_~c,f + alpha) / (T_~c + alpha |V|)

    with N_~c,f = sum_{k != c} N_kf and T_~c = sum_{k != c} T_k. As in scikit-learn and Rennie
    et al., there is no prior term and no weight normalisation. Cost per event is O(|x| C): the
    complement counts come from the per-feature totals, not from a |V| x C table.
    With alpha = 0 a feature never seen outside c gives score_c = +inf (certain); a class whose
    complement has no tokens yet scores 0 (no evidence either way).
    """

    _native = False  # _kernel.c scores the multinomial only

    def _numerator_counts(self, counts_before: np.ndarray) -> np.ndarray:
        return row_sums(counts_before)[:, None] - counts_before  # N_~c,f

    def _score(self, batch, classes, features, totals_before):
        evidence, n_counted = self._evidence(batch, features)
        complement_totals = row_sums(totals_before)[:, None] - totals_before
        denominator = complement_totals + self.alpha * features.vocabulary_before[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = n_counted[:, None] * np.log(denominator) - evidence
        return np.where(denominator == 0, 0.0, scores)

    def _score_event(self, event):
        """The kernel's complement score for a batch of one (see the class docstring)."""
        alpha, vocabulary, n_classes = self.alpha, self._features_seen, len(self._classes)
        counts, values, unseen = self._event_features(event)
        numerators = []
        for start in range(0, len(counts), n_classes):
            row = counts[start : start + n_classes]
            all_classes = row_total(row)
            numerators += [all_classes - n + alpha for n in row]
        totals = self._class_totals.tolist()
        all_totals = row_total(totals)
        denominators = [all_totals - total + alpha * vocabulary for total in totals]
        active, log_prior, logs = self._event_prior(numerators + denominators)
        evidence, n_counted = self._event_evidence(logs, values, unseen)
        scores = [0.0 if denominator == 0 else n_counted * log_d - e
                  for e, denominator, log_d in zip(evidence, denominators, logs[len(numerators) :])]
        return scores, active, log_prior


class BernoulliNB(CountingNB):
    """Bernoulli naive Bayes over feature presence (x_f > true_threshold).

        log P(c) P(x | c) = log P(c) + sum_{f in V} [ b_f log p_fc + (1 - b_f) log(1 - p_fc) ]
        p_fc = (N_fc + alpha) / (N_c + 2 alpha)

    N_fc: documents of class c containing f; N_c: documents of class c. Every feature of the
    vocabulary V takes part, absent ones through log(1 - p_fc). Rewritten as

        sum_{f in V} log(1 - p_fc) + sum_{f present} [log p_fc - log(1 - p_fc)]

    the first sum is a per-class quantity A_c. With integer counts it is kept from a histogram
    H_c[k] = #{f in V : N_fc = k}:

        A_c = sum_k H_c[k] log(N_c - k + alpha) - |V| log(N_c + 2 alpha)

    so a prediction costs O(|x| C), and learning a document updates H_c in O(|x|) and A_c in
    O(number of distinct counts in c). (Fractional sample weights fall back to summing over V.)
    With alpha = 0, zero-probability factors are counted rather than logged; any left makes
    the class's likelihood exactly 0 (score -inf).
    """

    def __init__(self, alpha: float = 1.0, prior_alpha: float = 0.0, unknown: str = "ignore",
                 true_threshold: float = 0.0, n_hash_buckets: int | None = None, max_features: int | None = None,
                 evict_every: int = DEFAULT_EVICT_EVERY, half_life: float | None = None):
        super().__init__(alpha=alpha, prior_alpha=prior_alpha, unknown=unknown, n_hash_buckets=n_hash_buckets,
                         max_features=max_features, evict_every=evict_every, half_life=half_life)
        self.true_threshold = true_threshold
        self._histograms: list[np.ndarray] = []  # per class: H_c[k], as floats
        self._top_counts: list[int] = []  # per class: largest k with H_c[k] > 0 (counts only grow)
        self._histogram_versions: list[int] = []  # per class: bumped whenever H_c[k >= 1] changes
        self._count_part_cache: dict[int, tuple[int, int, float]] = {}  # c -> (N_c, version, sum)
        self._log_table = np.zeros(0)  # log(j + alpha), stored from the top j down to 0

    def _params(self) -> dict:
        return {**super()._params(), "true_threshold": self.true_threshold}

    def _check_values(self, values: np.ndarray) -> np.ndarray:
        super()._check_values(values)
        return values > self.true_threshold

    def _event_keep(self, values):
        threshold = self.true_threshold
        return None if super()._event_keep(values) is None else [value > threshold for value in values]

    def _occurrence_learning(self, batch, rows):
        return batch.weight[batch.event[rows]]

    def _batch_is_exact(self, batch: EncodedBatch) -> bool:
        # Presence, not the values, is counted: only the weights must be whole numbers.
        return self._integral and bool(np.all(np.floor(batch.weight) == batch.weight))

    def _event_is_exact(self, event: EncodedEvent) -> bool:
        return self._integral and event.weight.is_integer()

    def _event_learning(self, event):
        return event.weight

    def _unlearn_amounts(self, values, weight):
        return [weight] * len(values)  # presence: each present feature's N_fc took w

    def _after_unlearning(self) -> None:
        self._rebuild_histograms()  # H_c from the counts as they are now (corrections are rare)

    def _learned_event(self, event, before, newly_seen, learned):
        if self._integral:
            self._step_histograms(event.label, before[:, event.label].astype(np.int64), int(event.weight),
                                  newly_seen)

    def _insert_class_columns(self, insert_at: np.ndarray) -> None:
        super()._insert_class_columns(insert_at)
        for offset, position in enumerate(insert_at.tolist()):
            histogram = np.zeros(8)
            histogram[0] = self._features_seen  # every known feature is absent from a new class
            self._histograms.insert(position + offset, histogram)
            self._top_counts.insert(position + offset, 0)
            self._histogram_versions.insert(position + offset, 0)
        self._count_part_cache.clear()  # class positions moved

    def _after_restore(self) -> None:
        self._rebuild_histograms()

    def _rebuild_histograms(self) -> None:
        counts = self._counts[self._counts.sum(axis=1) > 0]
        self._histograms = []
        self._top_counts = []
        self._histogram_versions = [0] * len(self._classes)
        self._count_part_cache.clear()
        for c in range(len(self._classes)):
            if self._integral:
                column = counts[:, c].astype(np.int64)
                self._histograms.append(np.bincount(column, minlength=8).astype(np.float64))
                self._top_counts.append(int(column.max()) if len(column) else 0)
            else:
                self._histograms.append(np.zeros(8))
                self._top_counts.append(0)

    def _reversed_logs(self, n: int) -> np.ndarray:
        """[log(n + alpha), log(n - 1 + alpha), ..., log(alpha)], contiguous (fast dot).

        The table is stored top-down, table[i] = log(top - i + alpha); each value comes from
        math.log(j + alpha), so it does not depend on the table's size.
        """
        top = len(self._log_table) - 1
        if n > top:
            top = max(2 * (top + 1), n + 1, 64) - 1
            alpha = self.alpha
            self._log_table = np.array(
                [math.log(j + alpha) if j + alpha > 0 else -math.inf for j in range(top, -1, -1)])
        return self._log_table[top - n:]

    def _absent_sum(self, c: int, n_docs: float, vocabulary: int) -> tuple[float, int]:
        """A_c as (finite part, number of zero factors) for class c with n_docs documents.

        With whole-number counts, A_c = H_c[0] log(N_c + alpha) + sum_{k>=1} H_c[k] log(N_c - k + alpha)
        - |V| log(N_c + 2 alpha). The sum over k >= 1 changes only when class c learns, so it is
        cached per (N_c, histogram version); features joining V only move H_c[0].
        """
        alpha = self.alpha
        if self._integral:
            n = int(n_docs)
            histogram = self._histograms[c]
            if len(histogram) <= n:  # grow geometrically: N_c rises by one per document
                histogram = self._histograms[c] = np.concatenate((histogram, np.zeros(max(n + 1, 2 * len(histogram)))))
            logs = self._reversed_logs(n)  # logs[k] = log(n - k + alpha)
            finite = float(histogram[0]) * float(logs[0]) + self._count_part(c, n, histogram, logs)
            zeros = int(histogram[n]) if alpha == 0 else 0  # k = n with alpha = 0: log(0), counted apart
        else:
            counts = self._counts[self._counts.sum(axis=1) > 0, c]
            remaining = n_docs - counts + alpha
            zeros = int(np.count_nonzero(remaining <= 0))
            finite = float(np.log(remaining[remaining > 0]).sum())
        return finite - vocabulary * math.log(n_docs + 2 * alpha), zeros

    def _count_part(self, c: int, n: int, histogram: np.ndarray, logs: np.ndarray) -> float:
        """sum_{k=1}^{top} H_c[k] log(n - k + alpha), without k = n when alpha = 0."""
        version = self._histogram_versions[c]
        cached = self._count_part_cache.get(c)
        if cached is not None and cached[0] == n and cached[1] == version:
            return cached[2]
        end = min(self._top_counts[c], n) + 1
        if self.alpha == 0:
            end = min(end, n)
        value = _blocked_dot(histogram[1:end], logs[1:end]) if end > 1 else 0.0
        self._count_part_cache[c] = (n, version, value)
        return value

    def _kernel(self, batch: EncodedBatch, predict: bool, learn: bool):
        classes = self._class_prefix(batch)
        features = self._feature_prefix(batch)
        n, alpha = batch.n_events, self.alpha
        result = None
        if predict:
            known = np.flatnonzero(features.seen_before)
            occ_event = features.event[known]
            present = features.counts_before[known]
            absent = classes.counts_before[occ_event] - present
            with np.errstate(divide="ignore", invalid="ignore"):
                if alpha > 0:
                    odds = np.log(present + alpha) - np.log(absent + alpha)
                    zero_shift = None
                else:
                    odds = np.log(np.where(present > 0, present, 1.0)) - np.log(np.where(absent > 0, absent, 1.0))
                    # present with N_fc = 0 adds a zero factor; present with N_fc = N_c removes one
                    zero_shift = per_event_sum(occ_event, (present == 0).astype(float) - (absent == 0), n)
            evidence = per_event_sum(occ_event, odds, n)
            if self.unknown == "smooth":
                unseen = np.ones(len(batch.event), dtype=bool)
                unseen[features.rows[known]] = False
                n_unseen = per_event_sum(batch.event[unseen], np.ones(int(unseen.sum())), n)
                with np.errstate(divide="ignore"):
                    evidence += n_unseen[:, None] * (math.log(alpha) - np.log(classes.counts_before + 2 * alpha))
            absent_part, zero_factors = self._absent_sums(batch, classes, features, predict=True)
            if zero_shift is not None:
                zero_factors = zero_factors + zero_shift
            scores = classes.log_prior + absent_part + evidence
            scores = np.where(zero_factors > 0, -np.inf, scores)
            result = (scores, classes.active, classes.log_prior)
        elif learn:
            self._absent_sums(batch, classes, features, predict=False)  # steps the histograms
        if learn:
            self._learn_counts(batch, features, classes)
        return result

    def _settle_in_windows(self, X, y, decide, guessing):
        return None  # scoring a labeled batch steps the histograms H_c: it is not free of effects

    def _absent_sums(self, batch, classes, features, predict: bool) -> tuple[np.ndarray, np.ndarray]:
        """A_c as each event sees it, stepping the histograms through the batch."""
        n, n_classes = batch.n_events, len(self._classes)
        absent_part = np.zeros((n, n_classes))
        zero_factors = np.zeros((n, n_classes))
        labels = batch.label.tolist()
        integral = self._integral
        # What each labeled event moves in its class's histogram, gathered once for the batch.
        learn_rows = np.flatnonzero(features.learned.any(axis=1))
        learn_class = batch.label[features.event[learn_rows]]
        old_counts = features.counts_before[learn_rows, learn_class].astype(np.int64)
        steps = features.learned[learn_rows, learn_class].astype(np.int64).tolist()
        bounds = np.searchsorted(features.event[learn_rows], np.arange(n + 1)).tolist()
        new_at = np.bincount(features.newly_seen_at, minlength=n).tolist() if len(features.newly_seen_at) else [0] * n
        if predict:
            active_rows = classes.active.tolist()
            counts_rows = classes.counts_before.tolist()
            vocabulary = features.vocabulary_before.tolist()
        absent_sum = self._absent_sum
        for i in range(n):
            if predict:
                row_part, row_zeros, counts, size = absent_part[i], zero_factors[i], counts_rows[i], vocabulary[i]
                for c, on in enumerate(active_rows[i]):
                    if on:
                        row_part[c], row_zeros[c] = absent_sum(c, counts[c], size)
            c = labels[i]
            if c < 0 or not integral:
                continue
            lo, hi = bounds[i], bounds[i + 1]
            self._step_histograms(c, old_counts[lo:hi], steps[lo] if hi > lo else 0, new_at[i])
        return absent_part, zero_factors

    def _step_histograms(self, c: int, old: np.ndarray, step: int, newly_seen: int) -> None:
        """H after a class-c document: `newly_seen` features join V (at count 0 in every class),
        and the document's features move from their counts `old` to old + step in class c."""
        if newly_seen:
            for histogram in self._histograms:
                histogram[0] += newly_seen
        if len(old):
            histogram = self._histograms[c]
            top = int(old.max()) + step + 1
            if len(histogram) < top:
                histogram = self._histograms[c] = np.concatenate((histogram, np.zeros(2 * top - len(histogram))))
            np.subtract.at(histogram, old, 1.0)
            np.add.at(histogram, old + step, 1.0)
            self._top_counts[c] = max(self._top_counts[c], top - 1)
            self._histogram_versions[c] += 1

    def _score_event(self, event):
        """The kernel's Bernoulli score for a batch of one: log P(c) + A_c + the sum over present
        features of log p_fc - log(1 - p_fc) (see the class docstring)."""
        alpha, n_classes = self.alpha, len(self._classes)
        class_counts = self._class_counts.tolist()
        present, _, unseen = self._event_features(event)
        absent = [n_docs - n for n_docs, n in zip(class_counts * (len(present) // n_classes), present)]
        smooth = self.unknown == "smooth"
        if alpha > 0:
            log_args = ([n + alpha for n in present] + [n + alpha for n in absent]
                        + ([n + 2 * alpha for n in class_counts] if smooth else []))
        else:  # a zero count is a zero factor, counted apart (present: one more; absent: one fewer)
            log_args = [n if n > 0 else 1.0 for n in present] + [n if n > 0 else 1.0 for n in absent]
        active, log_prior, logs = self._event_prior(log_args)
        ones = [1.0] * (len(present) // n_classes)  # x 1.0 is exact: plain sums of the rows
        evidence = weighted_column_sums([p - a for p, a in zip(logs, logs[len(present) :])], n_classes, ones)
        zero_shift = [0.0] * n_classes
        if alpha == 0:
            shifts = [float(p == 0) - (a == 0) for p, a in zip(present, absent)]
            zero_shift = weighted_column_sums(shifts, n_classes, ones)
        if smooth:
            n_unseen, log_alpha = float(len(unseen)), math.log(alpha)
            log_denominators = logs[2 * len(present) :]
            evidence = [total + n_unseen * (log_alpha - log_d) for total, log_d in zip(evidence, log_denominators)]
        scores = []
        for c, (prior, total, shift) in enumerate(zip(log_prior, evidence, zero_shift)):
            absent_part, zero_factors = (0.0, 0)
            if active[c]:
                absent_part, zero_factors = self._absent_sum(c, class_counts[c], self._features_seen)
            scores.append(-math.inf if zero_factors + shift > 0 else prior + absent_part + total)
        return scores, active, log_prior
