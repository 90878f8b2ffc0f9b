"""A model per key (a user, a mailbox, a tenant) centred on one global model.

The seed's Bayesian estimate of a multinomial likelihood is an interpolation between the
maximum-likelihood estimate and the uniform distribution:

    P_lambda(f | c) = (N_fc + lambda) / (T_c + lambda |V|)
                    = (1 - w_c) N_fc / T_c + w_c / |V|,      w_c = lambda |V| / (T_c + lambda |V|),

the posterior mean under a symmetric Dirichlet prior (lambda pseudo-counts per feature), whose
weight w_c falls as the class's data T_c grows. A key k has little data of its own, and a better
prior than the uniform distribution: what every key together says, the global model's
theta_fc = P_lambda(f | c). Putting theta_fc in place of 1/|V|, with a prior weight of beta
pseudo-occurrences, gives the key's estimate. Two ways to let the weight fall (`shrinkage`):

    "class":  theta_fc,k = (N_fc,k + beta theta_fc) / (T_c,k + beta)
              (the Dirichlet posterior mean, w_c,k = beta / (T_c,k + beta): the textbook form)
    "key":    theta_fc,k = (1 - w_k) N_fc,k / T_c,k + w_k theta_fc,   w_k = beta / (T_k + beta)
              for a class the key has counts in (T_c,k > 0), else theta_fc; T_k = sum_c T_c,k

With "class", a feature the key has never seen costs log((T_c,k + beta) / beta) in class c: more
in the class the key has learned more of, so every new word pushes a message towards the class the
key has seen less (measured on Enron-Spam's first 3,000 mails: 1-ROCA% 2.06 against the global
model's 0.30). With "key", one weight per key, a word new to the key costs the same log(1/w_k) in
every class it has data in, and the classes are compared as the global model compares them except
where the key has evidence of its own (0.23 on the same mails). "key" is the default.

The class prior, one number per class, takes the Dirichlet form:

    pi_c,k = (N_c,k + prior_beta pi_c) / (N_k + prior_beta)          N_k = sum_c N_c,k

Limits, each tested:
- a key with no counts: theta_fc,k = theta_fc and pi_c,k = pi_c; it predicts exactly as the
  global model (the global model's own path is taken, to the last bit);
- beta, prior_beta -> infinity: the global model, whatever the key has seen;
- a key with many counts (T_k >> beta): its own maximum-likelihood estimate N_fc,k / T_c,k;
- beta = prior_beta = 0: exactly the key's own MLE, the seed's lambda = 0 on its own events.

Scoring is the multinomial's, in log space:

    s_c,k(x) = log pi_c,k + sum_f x_f log theta_fc,k,    theta_fc,k = a_c N_fc,k + b_c theta_fc

with (a_c, b_c) = ((T_k / (T_k + beta)) / T_c,k, beta / (T_k + beta)) for "key" and
(1 / (T_c,k + beta), beta / (T_c,k + beta)) for "class"; a class with no data of the key's
(T_c,k = 0 under "key", T_c,k + beta = 0 under "class") takes (0, 1): theta_fc. Both parts are
probabilities of a feature (>= alpha / (T_c + alpha |V|) for theta_fc, >= 1 / T_c,k for the
key's own), so their weighted sum is formed in linear space without underflow and its log taken
once: never NaN, -inf only where both parts are 0 (the MLE's verdict). A feature counts when the global model knows it or
the key does (with the global `unknown="smooth"`, every feature), and some class still in the
key's prior gives it a positive theta_fc,k; otherwise it is unknown and dropped, as the seed
drops unknown words.

The global model learns as it always has (its own training regime, every key's labels). A key's
counts learn the events of that key that the same regime picks on the key's own prediction
(`decide`): measured on Enron-Spam, following the global model's decisions instead did worse
(1-ROCA% 0.52 against 0.23 on the first 3,000 mails). Key counts are not forgotten (the global
model's half-life decays the global counts only).

Corrections: since a key decides for itself, it remembers the ids its counts learned (KeyCounts
.learned: class and weight, at most `remember_ids` of them). A labeled event whose id the key
remembers, or that carries "unlearn", goes through the rules of duplicates and corrections
(stream_nb.lessons.rules) on that memory (`key_rules`): what the key learned of it is taken back
(N_fc,k -= w x_f, N_c,k -= w, T_c,k -= what the rows gave back), a duplicate is not learned
again, and the corrected label is decided on as any label.
"""

from __future__ import annotations

import math
from itertools import chain, compress, islice, repeat
from operator import itemgetter

import numpy as np

from stream_nb.lessons.memory import Learned
from stream_nb.lessons.rules import Plan, plan
from stream_nb.model._numerics import effective_log_row, normalise_log_row, sequential_sum
from stream_nb.model.base import GRID_LIMIT, SparseBatch, _as_records, log_prior_of
from stream_nb.model.counting import MAX_COUNT, MultinomialNB
from stream_nb.model.posterior import Posterior
from stream_nb.model.training import (
    _predict_learn_in_windows,
    event_sizes,
    margin_per_sqrt_feature,
    predict_learn,
    should_learn,
)

_INF = math.inf
_PLAIN_NUMBERS = frozenset((int, float))
SHRINKAGES = ("key", "class")
# A key over its feature budget is cut to this share of it, so that a cut (which renumbers its
# rows) comes once in budget/2 new features, not at every event. Measured on Enron's six
# mailboxes (benchmarks/personal_quality.py, budget 20,000): cutting to 10,000 ranks as well as
# cutting to 18,000 (1-ROCA% 0.024 against 0.025, accuracy 0.9945 against 0.9939) and keeps the
# per-key replay twice as fast.
FEATURE_KEEP_SHARE = 0.5
MEMORY_KEEP_SHARE = 0.9  # a key's memory of ids over its capacity keeps its newest share
# A key's counts keep feature names of at most this many characters (4 KiB of UTF-8), so that
# one row of a key's state has a bounded size on disk and in its changelog; a longer name (a
# token of base64 or a URL run on) still counts in the global model, which a key's estimate
# falls back to for any feature it has no row of.
MAX_KEY_NAME_CHARS = 1024
# A key remembers the ids its counts learned (to take a correction back) when they are at most
# this long; a mail's Message-ID is at most 500 (stream_nb.mail.identity)
MAX_KEY_ID_CHARS = 1024
TAKEN_BACK = -1  # the class of a remembered id whose learning was taken back
# Ids a key remembers when [personal] remember_ids is not set: about 100 days of a user's mail at
# 100 a day; some 70 bytes each on disk with a Message-ID (700 KB a key when full)
DEFAULT_KEY_REMEMBER_IDS = 10_000


def _check_strength(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0 (pseudo-counts of the global model), got {value!r}")
    return float(value)


def _ordered_dots(values: np.ndarray, logs: np.ndarray) -> list[float]:
    """sum_f x_f log_fc for each class c, added in feature order (-inf when a log is -inf; never
    NaN: x_f > 0). A cumulative sum adds one term at a time, so the result is the loop's
    `total = 0.0; total += x_f * log_fc` to the bit, whatever numpy's pairwise sum would do."""
    if not len(values):
        return [0.0] * logs.shape[1]
    return (np.cumsum(values[:, None] * logs, axis=0)[-1] + 0.0).tolist()


def _pick(items: list, rows: np.ndarray) -> list:
    """[items[i] for i in rows], at C speed."""
    if len(rows) == 0:
        return []
    if len(rows) == 1:
        return [items[int(rows[0])]]
    return list(itemgetter(*rows.tolist())(items))


def exact_column_sums(matrix: np.ndarray) -> list[float]:
    """math.fsum of each column (the correctly rounded sum): numpy's sum where every partial
    sum is exact (whole numbers whose total stays below 2**53), fsum otherwise."""
    if not len(matrix):
        return [0.0] * matrix.shape[1]
    if np.all(np.floor(matrix) == matrix) and float(np.abs(matrix).sum()) < 2.0 ** 53:
        return matrix.sum(axis=0).tolist()
    return [math.fsum(column) for column in matrix.T.tolist()]


def _log(value: float) -> float:
    return math.log(value) if value > 0 else -_INF


class KeyCounts:
    """One key's own counts: N_fc,k as rows of a float64 matrix (one column per class, in the
    global class order), `index` giving each feature name's row; N_c,k and T_c,k.

    Rows are added at the end as names come (the matrix grows by doubling); they leave only when
    the key is cut to its feature budget, which builds the matrix anew. `features` gives the same
    counts as a dict of name -> list (a copy: for tests, state dumps and small keys)."""

    __slots__ = ("index", "_matrix", "class_counts", "class_totals", "last_labeled", "touched", "learned",
                 "learned_touched", "_hashes")

    def __init__(self, n_classes: int, last_labeled: int = 0) -> None:
        self.index: dict[str, int] = {}
        self._matrix = np.zeros((0, n_classes))
        self.class_counts = [0.0] * n_classes
        self.class_totals = [0.0] * n_classes
        self.last_labeled = last_labeled  # the labeled clock at the key's latest labeled event
        # Names whose counts changed since a store last wrote the key, for a store that writes
        # only those; None: every row is to be written (a new key, a trimmed one, or no store)
        self.touched: set[str] | None = None
        # The key's memory of learned ids: id -> (class index, weight) of what its counts learned,
        # in the order first learned; class TAKEN_BACK: learned, then taken back (kept until the
        # next cut, so that a store and a table in memory keep the same order). Changed ids since
        # a store last wrote the key in learned_touched (None: write the whole memory).
        self.learned: dict[str, tuple[int, float]] = {}
        self.learned_touched: set[str] | None = None
        self._hashes: tuple | None = None  # (index, its length, hash() of each row's name, the names or None)

    @property
    def matrix(self) -> np.ndarray:
        """N_fc,k: row index[name] of this (n_features x C) view."""
        return self._matrix[:len(self.index)]

    def set_rows(self, names: list, matrix: np.ndarray, index: dict | None = None) -> None:
        """The counts become `matrix` (float64, one row per name of `names`, distinct; `index`,
        when given, is {name: row} of them already)."""
        self.index = dict(zip(names, range(len(names)))) if index is None else index
        self._matrix = np.array(matrix, dtype=np.float64, copy=True, order="C").reshape(len(names),
                                                                                      len(self.class_counts))

    @property
    def features(self) -> dict[str, list[float]]:
        return dict(zip(self.index, self.matrix.tolist()))

    @features.setter
    def features(self, rows: dict) -> None:
        self.set_rows(list(rows), np.array(list(rows.values()), dtype=np.float64).reshape(len(rows),
                                                                                       len(self.class_counts)))

    def row_hashes(self) -> np.ndarray:
        """hash() of each row's name (int64), kept while the index only grows (and carried
        through a cut to the budget)."""
        cached = self._hashes
        index = self.index
        if cached is not None and cached[0] is index and cached[1] == len(index):
            return cached[2]
        if cached is not None and cached[0] is index and cached[1] < len(index):  # rows added since
            added = len(index) - cached[1]
            by_row = np.concatenate((cached[2], np.fromiter(map(hash, islice(index, cached[1], None)), dtype=np.int64,
                                                            count=added)))
        else:
            by_row = np.fromiter(map(hash, index), dtype=np.int64, count=len(index))
        self._hashes = (index, len(index), by_row, None)
        return by_row

    def added_rows(self, before: int, hashes: np.ndarray, names: list) -> None:
        """Rows before.. were added to the index, `names` (in row order) with their hash()
        `hashes`: row_hashes then needs no hashing of them, nor row_names a new list."""
        cached = self._hashes
        if cached is not None and cached[0] is self.index and cached[1] == before == len(self.index) - len(hashes):
            by_name = cached[3]
            if by_name is not None and len(by_name) == before:
                by_name.extend(names)
            else:
                by_name = None
            self._hashes = (self.index, len(self.index), np.concatenate((cached[2], hashes)), by_name)

    def row_names(self) -> list:
        """The name of each row (a list made once, and extended by added_rows while the index
        only grows: rows are added at its end)."""
        cached = self._hashes
        if cached is None or cached[0] is not self.index or cached[1] != len(self.index):
            self.row_hashes()
            cached = self._hashes
        if cached[3] is None or len(cached[3]) != cached[1]:
            self._hashes = cached = cached[:3] + (list(self.index),)
        return cached[3]

    def rows_of(self, names: list) -> np.ndarray:
        """The row of each name, -1 for a name the key has no row of (int64)."""
        return np.array(list(map(self.index.get, names, repeat(-1))), dtype=np.int64)

    @property
    def events(self) -> float:
        return math.fsum(self.class_counts)

    def realign(self, old: list, new: list) -> None:
        """Columns in the class order `new` from the order `old` (the global model keeps its
        classes sorted, so a class that comes later may go first; one that every lesson of was
        taken back leaves it): each class's counts move with its label; a class `new` lacks
        goes, with what the memory says was learned as it."""
        where = {label: i for i, label in enumerate(old[:len(self.class_counts)])}
        take = [where.get(label, -1) for label in new]
        moved = np.zeros((len(self._matrix), len(new)))
        for j, i in enumerate(take):
            if i >= 0:
                moved[:, j] = self._matrix[:, i]
        self._matrix = moved
        self.class_counts = [self.class_counts[i] if i >= 0 else 0.0 for i in take]
        self.class_totals = [self.class_totals[i] if i >= 0 else 0.0 for i in take]
        to_new = {i: j for j, i in enumerate(take) if i >= 0}
        self.learned = {event_id: (to_new.get(c, TAKEN_BACK) if c != TAKEN_BACK else c, w)
                        for event_id, (c, w) in self.learned.items()}
        self.touched = self.learned_touched = None  # every row and id is to be written anew

    def widen(self, n_classes: int) -> None:
        """Room for classes the global model learned since (new classes come last)."""
        extra = n_classes - len(self.class_counts)
        if extra > 0:
            self.class_counts.extend([0.0] * extra)
            self.class_totals.extend([0.0] * extra)
            self._matrix = np.hstack([self._matrix, np.zeros((len(self._matrix), extra))])

    def add(self, x: dict, c: int, w: float, rows: np.ndarray | None = None) -> None:
        """N_fc,k += w x_f for each feature a key keeps (a name of at most MAX_KEY_NAME_CHARS;
        a longer one is the global model's alone), N_c,k += w, T_c,k += w sum of those x_f.
        `rows`: rows_of(list(x)) when the caller has it."""
        names = list(x)
        total = 0.0
        if names:
            values = np.array(list(x.values()), dtype=np.float64)
            rows = self.rows_of(names) if rows is None else rows.copy()
            keep = values != 0
            new = np.flatnonzero((rows < 0) & keep)
            if len(new):  # names the key has no row of yet: checked here alone
                fresh = []
                for i in new.tolist():
                    if len(names[i]) <= MAX_KEY_NAME_CHARS:
                        fresh.append(i)
                    else:
                        keep[i] = False
                index = self.index
                start = len(index)
                index.update(zip([names[i] for i in fresh], range(start, start + len(fresh))))
                rows[fresh] = np.arange(start, start + len(fresh))
                self._reserve(len(index))
            added = values[keep] * w
            self._matrix[rows[keep], c] += added  # names are distinct: one update a row
            total = math.fsum(added.tolist())
            if self.touched is not None:
                self.touched.update(compress(names, keep.tolist()))
        self.class_counts[c] += w
        self.class_totals[c] += total

    def remember(self, event_id: str, c: int, w: float, capacity: int) -> None:
        """The key's counts learned `event_id` as class c with weight w. Over `capacity` ids,
        the memory is cut to its newest MEMORY_KEEP_SHARE of them (taken-back entries go first), so that
        a cut is rare and the same in every replica: it depends on the sequence of ids alone."""
        if capacity <= 0 or len(event_id) > MAX_KEY_ID_CHARS:
            return
        learned = self.learned
        learned[event_id] = (c, w)
        if self.learned_touched is not None:
            self.learned_touched.add(event_id)
        if len(learned) > capacity:
            live = [(i, entry) for i, entry in learned.items() if entry[0] != TAKEN_BACK]
            self.learned = dict(live[len(live) - max(1, int(capacity * MEMORY_KEEP_SHARE)):])
            self.learned_touched = None

    def take_back(self, event_id: str, x: dict) -> None:
        """Undo what learning `event_id` added (the event's own features `x`, checked): N_fc,k
        -= w x_f for each row the key still has (a row cut by the budget has nothing left to
        take), never below 0; N_c,k -= w; T_c,k -= what the rows gave back. The memory then
        says the id was taken back. Exact for the whole-number counts a featuriser makes."""
        c, w = self.learned[event_id]
        names = list(x)
        given_back = 0.0
        if names:
            rows = self.rows_of(names)
            has = rows >= 0
            if has.any():
                rows = rows[has]
                before = self._matrix[rows, c]
                after = np.maximum(before - w * np.fromiter(x.values(), dtype=np.float64, count=len(names))[has], 0.0)
                self._matrix[rows, c] = after
                given_back = math.fsum((before - after).tolist())
                if self.touched is not None:
                    self.touched.update(compress(names, has.tolist()))
        self.class_counts[c] = max(0.0, self.class_counts[c] - w)
        self.class_totals[c] = max(0.0, self.class_totals[c] - given_back)
        self.learned[event_id] = (TAKEN_BACK, w)
        if self.learned_touched is not None:
            self.learned_touched.add(event_id)

    def _reserve(self, rows: int) -> None:
        if rows > len(self._matrix):
            grown = np.zeros((max(rows, 2 * len(self._matrix), 16), self._matrix.shape[1]))
            grown[:len(self._matrix)] = self._matrix
            self._matrix = grown

    def keep_features(self, budget: int) -> np.ndarray:
        """Down to `budget` features: those with the largest total count stay, ties by name (so
        the result depends on the counts alone), in the order they had; T_c,k becomes the sum of
        what stays. Returns the rows that stayed (their old numbers, in order)."""
        matrix = self.matrix
        if self._hashes is not None and self._hashes[0] is not self.index:
            self._hashes = None
        cached = self._hashes
        names = (cached[3] if cached is not None and cached[3] is not None and len(cached[3]) == len(self.index)
                 else list(self.index))
        if len(matrix.T) <= 2:  # fsum of two numbers is their rounded sum: numpy's, at array speed
            totals = matrix.sum(axis=1) if len(names) else np.zeros(0)
        else:
            totals = np.array([math.fsum(row) for row in matrix.tolist()])
        keep = np.ones(len(names), dtype=bool)
        if budget < len(names):
            cut = -np.partition(-totals, budget - 1)[budget - 1]  # the budget-th largest total
            keep = totals > cut
            tied = np.flatnonzero(totals == cut)
            tied_names = np.array(_pick(names, tied), dtype=object)
            # the names that stay are the smallest (names are distinct): those up to the last one
            last = sorted(tied_names.tolist())[budget - int(keep.sum()) - 1]
            keep[tied] = tied_names <= last
        rows = np.flatnonzero(keep)
        hashes = self._hashes
        kept = _pick(names, rows)
        self.set_rows(kept, matrix[rows])
        if hashes is not None and hashes[1] == len(names):  # carried over
            self._hashes = (self.index, len(rows), hashes[2][rows], kept)
        self.class_totals = exact_column_sums(self.matrix)
        self.touched = None  # rows went: the whole key is written anew
        return rows


class KeyTable:
    """Keys' counts, least recently labeled first, and the labeled clock of idleness, in memory
    (replay's table, and the contract of stream_nb.keyed.store.StoredKeyTable, which keeps one
    partition's keys on disk). A table's state is a function of the labeled events it observed,
    in their order; `clock` counts them. `classes`: the class order of its keys' columns."""

    def __init__(self) -> None:
        self.keys: dict = {}
        self.clock = 0
        self.evicted = 0
        self.classes: list = []

    def align(self, classes: list) -> None:
        """Every key's columns in the class order `classes` (the global model's now)."""
        if self.classes != classes:
            for own in self.keys.values():
                own.realign(self.classes, classes)
            self.classes = list(classes)

    def get(self, key) -> KeyCounts | None:
        return self.keys.get(key)

    def create(self, key, n_classes: int) -> KeyCounts:
        own = self.keys[key] = KeyCounts(n_classes, self.clock)
        return own

    def changed(self, key, own: KeyCounts) -> None:
        """`own`, the key's counts, changed in place (a stored table writes it back)."""

    def observe(self, key, idle_after: int | None) -> None:
        """One labeled event went by (of `key`, or of no key: None): the clock ticks, the key
        becomes the most recently labeled, keys idle for `idle_after` labeled events go."""
        self.clock += 1
        own = self.keys.pop(key, None) if key is not None else None
        if own is not None:
            own.last_labeled = self.clock
            self.keys[key] = own
        if idle_after is None:
            return
        horizon = self.clock - idle_after
        while self.keys:
            oldest = next(iter(self.keys))
            if self.keys[oldest].last_labeled > horizon:
                break
            del self.keys[oldest]
            self.evicted += 1

    def put(self, key, own: KeyCounts) -> None:
        """A key's counts loaded from elsewhere (checked by the caller)."""
        if own.last_labeled > self.clock:
            raise InvalidKeyState(f"last_labeled {own.last_labeled} is ahead of the labeled clock {self.clock}")
        self.keys.pop(key, None)
        self.keys[key] = own
        # keep least recently labeled first
        if len(self.keys) > 1 and own.last_labeled < max(k.last_labeled for k in self.keys.values()):
            self.keys = dict(sorted(self.keys.items(), key=lambda item: item[1].last_labeled))

    def forget(self, key) -> None:
        self.keys.pop(key, None)


def _theta_of(counts: np.ndarray, class_totals: np.ndarray, alpha: float, features_seen) -> tuple:
    """(theta_fc, whether the global model knows each feature) of rows of N_fc:
    theta_fc = (N_fc + alpha) / (T_c + alpha |V|); a class whose denominator is 0 has no
    likelihood yet (0)."""
    known = counts.any(axis=1)
    denominators = class_totals + alpha * features_seen
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = (counts + alpha) / denominators
    theta[:, denominators == 0] = 0.0
    return theta, known


def _global_counts(g: MultinomialNB, columns: np.ndarray) -> np.ndarray:
    """N_fc of the global model at vocabulary `columns` (a row of zeros where a column is -1)."""
    n_classes = len(g.classes_)
    counts = np.zeros((len(columns), n_classes))
    inside = columns >= 0
    if inside.any() and len(g._feature_counts):
        counts[inside] = g._feature_counts[columns[inside], :n_classes]
    return counts


class _PartState:
    """The global model's estimates at each event of a part of a batch (predict_learn_batch):
    N_fc of the part's names, N_c, T_c and |V| as they were at its start, plus what each event
    the global model learned added, in order. Event j's features are names[uid[o]] with value
    value[o] for o in starts[j]:starts[j + 1] (its non-zero values, in the event's order); the
    arrays are what the C kernel (_kernel.keyed_events) reads and changes too."""

    def __init__(self, g: MultinomialNB, names: list, starts: np.ndarray, uid: np.ndarray, value: np.ndarray,
                 columns: np.ndarray | None = None) -> None:
        self.g = g
        self.names = names
        self.starts, self.uid, self.value = starts, uid, value
        n_classes = len(g.classes_)
        if columns is None:
            columns = g._vocabulary.lookup(names)
        self.counts = _global_counts(g, columns)
        self.class_counts = np.array(g._class_counts[:n_classes], dtype=np.float64)
        self.class_totals = np.array(g._class_totals[:n_classes], dtype=np.float64)
        self.features_seen = int(g._features_seen)

    @classmethod
    def of_rows(cls, g: MultinomialNB, rows: list) -> _PartState:
        """The state over events given as dicts."""
        names = list(dict.fromkeys(chain.from_iterable(rows)))
        index = dict(zip(names, range(len(names))))
        uid = np.fromiter(map(index.__getitem__, chain.from_iterable(rows)), dtype=np.int64)
        value = np.array(list(chain.from_iterable(map(dict.values, rows))), dtype=np.float64)
        lengths = np.array([len(row) for row in rows], dtype=np.int64)
        nonzero = value != 0
        if not nonzero.all():  # a zero is no occurrence: the checked event drops it
            lengths = np.bincount(np.repeat(np.arange(len(rows)), lengths)[nonzero], minlength=len(rows))
            uid, value = uid[nonzero], value[nonzero]
        starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        return cls(g, names, starts, uid, value)

    def theta_of(self, j: int):
        """PersonalMultinomialNB._global_theta at event j of the part, for its own non-zero
        names (the checked event's, in its order)."""
        rows = self.uid[self.starts[j]:self.starts[j + 1]]
        return lambda names: self._theta(rows)

    def _theta(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _theta_of(self.counts[rows], self.class_totals, self.g.alpha, self.features_seen)

    def log_prior(self) -> np.ndarray:
        return log_prior_of(self.class_counts, self.g.prior_alpha)[1]

    def event(self, j: int) -> dict:
        """Event j's non-zero features as a dict."""
        lo, hi = int(self.starts[j]), int(self.starts[j + 1])
        names = self.names
        return dict(zip([names[u] for u in self.uid[lo:hi].tolist()], self.value[lo:hi].tolist()))

    def learned(self, j: int, c: int) -> None:
        """Event j of the part was learned as class c (weight 1): N_fc += x_f, N_c += 1,
        T_c += sum x_f, |V| += its features no class had counted."""
        lo, hi = self.starts[j], self.starts[j + 1]
        rows, amounts = self.uid[lo:hi], self.value[lo:hi]
        self.features_seen += int(np.count_nonzero(~self.counts[rows].any(axis=1)))
        self.counts[rows, c] += amounts
        self.class_counts[c] += 1.0
        self.class_totals[c] += float(amounts.sum())


class PersonalMultinomialNB:
    """Per-key multinomial naive Bayes with the global model as each key's prior (module docstring).

    `global_model` is a MultinomialNB that this object teaches every label; `beta` is the weight,
    in feature occurrences, of the global likelihoods in a key's; `prior_beta`, in events, of the
    global class prior in the key's.
    """

    def __init__(self, global_model: MultinomialNB, beta: float = 30_000.0, prior_beta: float = 10.0,
                 *, training: dict | None = None, shrinkage: str = "key", max_key_features: int | None = None,
                 idle_after: int | None = None, remember_ids: int = DEFAULT_KEY_REMEMBER_IDS) -> None:
        if type(global_model) is not MultinomialNB:
            raise ValueError(f"per-key models are defined over a multinomial global model, not "
                             f"{type(global_model).__name__}")
        self.global_model = global_model
        self.beta = _check_strength("beta", beta)
        self.prior_beta = _check_strength("prior_beta", prior_beta)
        self.training = dict(training or {"mode": "all", "margin": 0.0})
        if shrinkage not in SHRINKAGES:
            raise ValueError(f"shrinkage must be one of {', '.join(SHRINKAGES)}, got {shrinkage!r}")
        self.shrinkage = shrinkage
        for name, value in (("max_key_features", max_key_features), ("idle_after", idle_after)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1 (or None: no bound), got {value!r}")
        self.max_key_features = max_key_features
        self.idle_after = idle_after
        if isinstance(remember_ids, bool) or not isinstance(remember_ids, int) or remember_ids < 0:
            raise ValueError(f"remember_ids must be a whole number >= 0, got {remember_ids!r}")
        self.remember_ids = remember_ids  # ids a key remembers, to take a correction back from its counts
        # every key's counts (a worker passes the table of the key's partition instead)
        self.table = KeyTable()

    @property
    def keys(self) -> dict:
        return self.table.keys

    @property
    def labeled_clock(self) -> int:
        return self.table.clock

    @property
    def keys_evicted(self) -> int:
        return self.table.evicted

    # ---- scoring -------------------------------------------------------------------------

    @property
    def classes_(self) -> list:
        return self.global_model.classes_

    def _checked(self, x: dict) -> dict:
        """The event's non-zero feature values, checked as the multinomial checks them."""
        if not isinstance(x, dict):
            raise ValueError(f"an event's features are a dict of name -> count, got {type(x).__name__}")
        values = list(x.values())
        if set(map(type, values)) <= _PLAIN_NUMBERS:  # a featuriser's floats: checked at array speed
            array = np.array(values, dtype=np.float64)
            if np.isfinite(array).all() and (array >= 0).all() and (array <= MAX_COUNT).all():
                return x if array.all() else {name: value for name, value in x.items() if value}
        kept = {}
        for name, value in x.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"feature {name!r}: a count is a number, got {type(value).__name__}")
            value = float(value)
            if not math.isfinite(value) or value < 0 or value > MAX_COUNT:
                raise ValueError(f"feature {name!r}: a count is finite, >= 0 and <= 2**53, got {value!r}")
            if value:
                kept[name] = value
        return kept

    def _global_theta(self, names: list) -> tuple[np.ndarray, np.ndarray]:
        """(theta_fc for each name and class, whether the global model knows each name):
        theta_fc = (N_fc + alpha) / (T_c + alpha |V|); a class whose denominator is 0 has no
        likelihood yet (0)."""
        g = self.global_model
        n_classes = len(g.classes_)
        columns = np.asarray(g._vocabulary.columns(names), dtype=np.int64) if names else np.zeros(0, np.int64)
        counts = _global_counts(g, columns)
        return _theta_of(counts, g._class_totals[:n_classes], g.alpha, g._features_seen)

    def joint_log_likelihood(self, x: dict, key, table: KeyTable | None = None) -> dict:
        """s_c,k(x) for every class the key's prior gives a positive probability."""
        scores, active, _ = self._scores(self._checked(x), key, table)
        return {label: s for label, s, on in zip(self.classes_, scores, active) if on}

    def _scores(self, x: dict, key, table: KeyTable | None) -> tuple[list, list, list]:
        """(s_c,k, active, log pi_c,k) in the global class order; a key with no counts takes
        the global model's own path."""
        g = self.global_model
        own = self._own(table, key)
        if own is None or own.events == 0:
            return g._event_scores(x) if g.classes_ else ([], [], [])
        return self._key_scores(x, own, self._global_theta, g._current_log_prior()[1])

    def _key_scores(self, x: dict, own: KeyCounts, global_theta, log_prior_global: np.ndarray,
                    rows: np.ndarray | None = None) -> tuple:
        """_scores of a key with counts, over the global model's theta (a function of the names)
        and log prior as they are at the event; `rows`: own.rows_of(list(x)), if known.
        (_kernel.keyed_events repeats these operations in this order.)"""
        g = self.global_model
        n_classes = len(g.classes_)
        own.widen(n_classes)
        log_prior = self._log_prior(own, log_prior_global)
        active = np.array([value > -_INF for value in log_prior])

        names = list(x)
        values = np.array(list(x.values()), dtype=np.float64)
        theta, known_global = global_theta(names)
        if rows is None:
            rows = own.rows_of(names)
        has_row = rows >= 0
        key_counts = np.zeros((len(names), n_classes))
        if has_row.any():
            key_counts[has_row] = own.matrix[rows[has_row]]
        own_scale, global_scale = self._mixing_weights(own)
        with np.errstate(divide="ignore"):
            numerators = np.log(own_scale * key_counts + global_scale * theta)
        # a row a take-back emptied scores as no row: the feature is unknown to the key again
        counts = key_counts.any(axis=1) | known_global | (g.unknown == "smooth")  # else unknown to both: dropped
        counts &= (numerators[:, active] > -_INF).any(axis=1)  # else no class can produce it: unknown
        values, numerators = values[counts], numerators[counts]
        evidence = _ordered_dots(values, numerators)
        scores = [prior + e for prior, e in zip(log_prior, evidence)]
        return scores, active.tolist(), log_prior

    def _log_prior(self, own: KeyCounts, log_prior_global: np.ndarray) -> list[float]:
        """log pi_c,k = log(N_c,k + prior_beta pi_c) - log(N_k + prior_beta), N_k = N_0,k + N_1,k
        + ... added in class order."""
        log_prior_beta = _log(self.prior_beta)
        log_total = _log(sequential_sum(own.class_counts) + self.prior_beta)
        return [float(np.logaddexp(_log(n), log_prior_beta + lp)) - log_total
                for n, lp in zip(own.class_counts, log_prior_global.tolist())]

    def _mixing_weights(self, own: KeyCounts) -> tuple[np.ndarray, np.ndarray]:
        """(a_c, b_c) per class: theta_fc,k = a_c N_fc,k + b_c theta_fc (the module docstring;
        T_k added in class order)."""
        totals = own.class_totals
        if self.shrinkage == "class":  # (N_fc,k + beta theta_fc) / (T_c,k + beta)
            own_scale = [1.0 / (t + self.beta) if t + self.beta > 0 else 0.0 for t in totals]
            global_scale = [self.beta / (t + self.beta) if t + self.beta > 0 else 1.0 for t in totals]
        else:  # (T_k / (T_k + beta)) N_fc,k / T_c,k + (beta / (T_k + beta)) theta_fc
            total = sequential_sum(totals)
            denominator = total + self.beta
            own_scale = [total / denominator / t if t > 0 else 0.0 for t in totals]
            global_scale = [self.beta / denominator if t > 0 else 1.0 for t in totals]
        return np.array(own_scale), np.array(global_scale)

    def predict_proba_one(self, x: dict, key, table: KeyTable | None = None) -> Posterior | dict:
        """P(c | x) under key's model ({} before any class), a Posterior holding its log scores."""
        if not self.classes_:
            return {}
        return self._posterior(*self._scores(self._checked(x), key, table))

    def predict_batch(self, X, keys: list, tables: list, probabilities: list) -> list:
        """predict_proba_one(x_i, keys[i], tables[i]) for each event i with a table (the others, and
        events whose `probabilities[i]` is None or empty, keep `probabilities[i]`: the global
        model's prediction, which a key without counts gets too), through the C kernel when it
        can take the batch, else event by event. `X`: the events as the global model reads them."""
        from stream_nb.model.personal_batch import BatchNames, KeyedPart, native_keyed

        g = self.global_model
        tables = [table if table is not None and probabilities[i] else None for i, table in enumerate(tables)]
        if not any(table is not None for table in tables):
            return list(probabilities)
        kernel = native_keyed(self, X)
        if (kernel is None or g.n_hash_buckets is not None
                or not (g._integral or (g._on_grid and g._count_mass() < GRID_LIMIT))):
            rows = X.to_dicts() if isinstance(X, SparseBatch) else list(X)
            return [probabilities[i] if table is None or table.get(keys[i]) is None
                    else self.predict_proba_one(rows[i], keys[i], table) for i, table in enumerate(tables)]
        names = BatchNames(kernel, X, g._vocabulary)
        n = len(keys)
        batch = {"labels": [None] * n, "keys": keys, "tables": tables, "ids": None, "unlearns": None,
                 "observe": None}
        results = KeyedPart(self, kernel, names.part(g, 0, n), names, batch, 0, n, probabilities, [False] * n).run()
        return [prediction for prediction, _ in results]

    def predict_many(self, X, keys: list, tables: list) -> list:
        """Each event's P(c | x): by its key's model where `tables[i]` is a table (a key
        without counts there gets the global model's), else the global model's."""
        return self.predict_batch(X, keys, tables, self.global_model.predict_proba_many(X))

    def predict_and_decide(self, x: dict, y, key, table: KeyTable | None = None, *, event_id: str | None = None,
                           unlearn=None) -> tuple[Posterior | dict, bool]:
        """(predict_proba_one(x, key), decide(x, y, key)) from one scoring of the event: the
        prequential step's prediction and whether the key's counts then learn it. With the
        event's id (and `unlearn` on a correction), the key's own memory first applies the
        rules of duplicates and corrections (`key_rules`): what it planned to take back is
        taken back before the prediction, and a duplicate is not learned."""
        if not self.classes_:
            return {}, y is not None
        x = self._checked(x)
        table = self.table if table is None else table
        planned = self.key_rules(x, y, unlearn, event_id, key, table)
        posterior = self._posterior(*self._scores(x, key, table))
        if y is None or (planned is not None and planned.learn is None):
            return posterior, False
        return posterior, self._learns_on(posterior, y, len(x))

    def predict_learn_one(self, x: dict, y, key, training: dict, table: KeyTable | None = None, *,
                          event_id: str | None = None, unlearn=None) -> tuple[Posterior | dict, bool]:
        """The prequential step of one event, as predict_learn_batch takes each: the key's
        prediction (and its rules), the global model's learning under `training`, the key's
        learning when the regime on its prediction says so, the labeled event observed.
        Returns (the prediction, whether the global model learned it)."""
        prediction, key_learns = self.predict_and_decide(x, y, key, table, event_id=event_id, unlearn=unlearn)
        _, learned = predict_learn(self.global_model, [x], [y], **training)
        if key_learns and key is not None:
            self.learn_key(x, y, key, table=table, event_id=event_id)
        if y is not None:
            self.observe_labeled(key, table)
        return prediction, learned[0]

    def key_rules(self, x: dict, y, unlearn, event_id, key, table) -> Plan | None:
        """The rules of duplicates and corrections (stream_nb.lessons.rules) on the key's own
        memory of learned ids, with what they take back taken back from the key's counts (`x`
        checked). None: an event the rules leave alone (no id, or an id the key does not
        remember, and no unlearn): learned as any labeled event. The key's memory is its own,
        as its decisions are: a message the global model skipped the key may have learned."""
        if event_id is None:
            return None
        own = self._own(table, key)
        entry = own.learned.get(event_id) if own is not None else None
        if unlearn is None and entry is None:
            return None
        known = None if entry is None or entry[0] == TAKEN_BACK else Learned(self.classes_[entry[0]], 0, entry[1])
        planned = plan(event_id, y, unlearn, known)
        if planned.take_back is not None:
            own.take_back(event_id, x)
            table.changed(key, own)
        return planned

    def _learns_on(self, posterior: Posterior, y, n_features: int) -> bool:
        """Whether the key learns an event, decided on its prediction: the training regime on
        the log scores the posterior is the softmax of (the joint log likelihoods wherever one
        is finite; a row with none takes the prior's, as the prediction does)."""
        if self.training.get("mode", "all") == "all":
            return True
        return self._learns(dict(zip(posterior, posterior.log_scores)), y, n_features)

    def _posterior(self, scores: list, active: list, log_prior: list) -> Posterior:
        probabilities = normalise_log_row(scores, active, log_prior)
        log_scores, _ = effective_log_row(scores, active, log_prior)
        result = Posterior((label, p) for label, p, on in zip(self.classes_, probabilities, active) if on)
        result.log_scores = [s for s, on in zip(log_scores, active) if on]
        return result

    # ---- a batch at batch speed ---------------------------------------------------------

    def predict_learn_batch(self, X, rows: list, labels: list, keys: list, tables: list, training: dict,
                            observe, ids: list | None = None, unlearns: list | None = None) -> list[tuple] | None:
        """The prequential step of a batch with per-key models, as the per-event loop does it
        (each event predicted by its key's model with the global model as it stands just before
        it, the global model then learning it under `training`, the key's counts learning it when
        the regime on the key's prediction says so), at batch speed; None when the batch is not
        one it can take exactly (the caller then goes event by event).

        The global model runs the whole batch through its own batch path (`predict_learn`'s,
        maintenance included). Its state at each event is then known without running it again:
        every count it adds is a whole number (or on the forgetting grid) below GRID_LIMIT, so
        N_fc, N_c, T_c and |V| before event i are the batch's starting values plus what the
        events before i that it learned added, to the bit in any order of addition. Those give
        each keyed event theta_fc and pi_c at its offset; a key without counts predicts as the
        global model did.

        `X`: the batch as the global model reads it, `rows` the same events as dicts (None: made
        from X when needed; a SparseBatch goes through the C kernel, stream_nb.model.personal_batch,
        where it is built); `tables`
        each event's key table (None: the event is the global model's alone: no key, or a key
        this caller does not hold); `observe(i)` is called after each labeled event i is learned
        (None: `observe_labeled(keys[i], tables[i])`).
        `ids` and `unlearns` (None: none) go to each key's rules (`key_rules`).
        Returns (prediction, learned by the global model) per event."""
        batch = self.prepared_batch(X, rows, labels, training)
        if batch is None:
            return None
        return batch(keys, tables, observe, ids, unlearns)

    def prepared_batch(self, X, rows: list | None, labels: list, training: dict):
        """The checks of predict_learn_batch, done before anything is learned: None when the
        batch path cannot take the batch exactly; ValueError for a bad event (as the global
        model's validate); else run(keys, tables, observe, ids, unlearns), the step itself.
        `observe` None: each labeled event observed in its own table (`observe_labeled`).
        Several models check their batches first and then run them all, or none; `run` appends
        each event's prediction by the global model to `global_predictions` when given a list."""
        g = self.global_model
        if not g.classes_ or g.n_hash_buckets is not None or not labels:
            return None
        known = g._class_index
        if any(label is not None and label not in known for label in labels):
            return None
        from stream_nb.model.personal_batch import BatchNames, KeyedPart, native_keyed

        kernel = native_keyed(self, X)
        if kernel is None and rows is None:
            rows = X.to_dicts() if isinstance(X, SparseBatch) else list(X)
        if rows is not None:
            values = np.array(list(chain.from_iterable(map(dict.values, rows))), dtype=np.float64)
        else:
            values = np.ones(int(X.lengths.sum())) if X.values is None else np.asarray(X.values, dtype=np.float64)
        if len(values) and not (np.all(np.floor(values) == values) and np.all(np.abs(values) <= 2.0 ** 20)):
            return None
        mass = float(np.abs(values).sum()) + len(labels)
        if not (g._integral or (g._on_grid and g._count_mass() + mass < GRID_LIMIT)):
            return None
        mode, margin = training.get("mode", "all"), float(training.get("margin", 0.0))
        g.validate(X, labels)  # a bad event refuses the batch before anything is learned
        margins = None
        if mode == "thick_threshold" and training.get("margin_scale", "none") == "sqrt_features":
            margins = np.array([margin_per_sqrt_feature(margin, n) for n in event_sizes(X)], dtype=np.float64)

        def run(keys: list, tables: list, observe, ids: list | None = None, unlearns: list | None = None,
                global_predictions: list | None = None) -> list:
            # global_predictions: given a list, each event's prediction by the global model is appended
            if observe is None:
                def observe(i: int) -> None:
                    self.observe_labeled(keys[i], tables[i])
            records = _as_records(X, g.ZERO_IS_ABSENT) if mode == "all" else None
            names = BatchNames(kernel, X, g._vocabulary) if kernel is not None else None
            batch = {"labels": labels, "keys": keys, "tables": tables, "ids": ids, "unlearns": unlearns,
                     "observe": observe}
            results: list[tuple] = []

            def part(start: int, stop: int) -> None:
                view = names.part(g, start, stop) if names is not None else _PartState.of_rows(g, rows[start:stop])
                if mode == "all":
                    probas = g._predict_records(records[start:stop], labels[start:stop])
                    learned = [label is not None for label in labels[start:stop]]
                else:
                    probas, learned = _predict_learn_in_windows(g, X[start:stop], labels[start:stop], mode, margin,
                                                                None if margins is None else margins[start:stop])
                if global_predictions is not None:
                    global_predictions.extend(probas)
                if names is not None:
                    results.extend(KeyedPart(self, kernel, view, names, batch, start, stop, probas, learned).run())
                    return
                for i in range(start, stop):
                    results.append(self._keyed_step(view, i - start, rows[i], labels[i], keys[i], tables[i],
                                                    probas[i - start], learned[i - start],
                                                    None if ids is None else ids[i],
                                                    None if unlearns is None else unlearns[i]))
                    if labels[i] is not None:
                        observe(i)

            g._with_maintenance(X, labels, lambda start, stop: part(start, stop))
            return results

        return run

    def _keyed_step(self, view: _PartState, j: int, x: dict, label, key, table, global_proba, learned: bool,
                    event_id, unlearn) -> tuple:
        """One event of predict_learn_batch: the key's rules, prediction and learning, then the
        global model's learning of it (if it did) added to `view`."""
        prediction = global_proba
        if table is not None:
            checked = self._checked(x)
            planned = self.key_rules(checked, label, unlearn, event_id, key, table)
            # a duplicate for the key, or a take-back alone: its counts learn nothing
            key_label = None if planned is not None and planned.learn is None else label
            own = self._own(table, key)
            known = None
            if own is not None and own.events > 0:
                known = (own, own.rows_of(list(checked)))
                prediction = self._posterior(*self._key_scores(checked, own, view.theta_of(j), view.log_prior(),
                                                               known[1]))
            x = checked
            if key_label is not None and prediction and self._learns_on(prediction, key_label, len(x)):
                self._learn_checked(x, key_label, key, 1.0, table, known, event_id)
        if learned and label is not None:
            view.learned(j, self.global_model._class_index[label])
        return prediction, learned

    # ---- learning ------------------------------------------------------------------------

    def decide(self, x: dict, y, key, table: KeyTable | None = None) -> bool:
        """Whether key's counts learn this labeled event: the training regime on the key's own
        prediction before learning (predict_and_decide's)."""
        return self.predict_and_decide(x, y, key, table)[1]

    def _learns(self, joint: dict, y, n_features: int) -> bool:
        mode = self.training.get("mode", "all")
        if mode == "all":
            return True
        scaled = n_features if self.training.get("margin_scale") == "sqrt_features" else None
        return should_learn(joint, y, mode, float(self.training.get("margin", 0.0)), scaled)

    def learn_key(self, x: dict, y, key, w: float = 1.0, table: KeyTable | None = None, *,
                  event_id: str | None = None) -> None:
        """N_fc,k += w x_f, N_c,k += w, T_c,k += w sum_f x_f (the class must be the global model's);
        the key remembers `event_id` as learned so (when given)."""
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"a weight is a finite number >= 0, got {w!r}")
        x = self._checked(x)
        if w == 0:
            return
        if y not in self.global_model._class_index:
            raise ValueError(f"class {y!r} is not one the global model has learned")
        self._learn_checked(x, y, key, float(w), self.table if table is None else table, event_id=event_id)

    def _learn_checked(self, x: dict, y, key, w: float, table, known: tuple | None = None,
                       event_id: str | None = None) -> None:
        """learn_key of a checked event; `known` = (the key's counts, rows_of(list(x)) in them)
        when the caller found them (used only if the table still holds those counts)."""
        n_classes = len(self.classes_)
        own = self._own(table, key)
        if own is None:
            own = table.create(key, n_classes)
        own.widen(n_classes)
        rows = known[1] if known is not None and known[0] is own else None
        c = self.global_model._class_index[y]
        own.add(x, c, w, rows)
        if event_id is not None:
            own.remember(event_id, c, w, self.remember_ids)
        if self.max_key_features is not None and len(own.index) > self.max_key_features:
            own.keep_features(max(1, int(self.max_key_features * FEATURE_KEEP_SHARE)))
        table.changed(key, own)

    def key_lesson(self, x: dict, y, unlearn, event_id: str, key, table: KeyTable | None = None) -> bool:
        """A labeled event the global model learns nothing of (to it a duplicate, or a take-back
        alone): the key's own rules on it, then its learning when they plan one and the key's
        prediction decides so. Returns whether the key's counts learned it."""
        table = self.table if table is None else table
        _, learns = self.predict_and_decide(x, y, key, table, event_id=event_id, unlearn=unlearn)
        if learns:
            self.learn_key(x, y, key, table=table, event_id=event_id)
        return learns

    def _own(self, table: KeyTable | None, key):
        """The key's counts (None: it has none), in the global model's class order."""
        table = self.table if table is None else table
        table.align(self.classes_)
        return table.get(key)

    def observe_labeled(self, key, table: KeyTable | None = None) -> None:
        """One labeled event went by (of `key`, or of no key: None), learned or not: the clock
        ticks, the key is the most recently labeled, and keys idle for `idle_after` labeled events
        are evicted (they predict as the global model again). Called after the event's learning."""
        (self.table if table is None else table).observe(key, self.idle_after)

    def learn_one(self, x: dict, y, key, w: float = 1.0, table: KeyTable | None = None) -> None:
        """Learn a labeled event everywhere: the global model, then the key's counts."""
        self._checked(x)  # a bad event changes neither
        self.global_model.learn_one(x, y, w)
        self.learn_key(x, y, key, w, table)
        self.observe_labeled(key, table)

    # ---- a key's state: plain values, checked on load ------------------------------------

    def key_state(self, key, table: KeyTable | None = None) -> dict | None:
        """The key's counts as plain JSON values (None for a key never learned); features sorted."""
        own = self._own(table, key)
        if own is None:
            return None
        return {"classes": list(self.classes_),
                "features": {name: list(row) for name, row in sorted(own.features.items())},
                "class_counts": list(own.class_counts), "class_totals": list(own.class_totals),
                "last_labeled": own.last_labeled}

    def load_key_state(self, key, state: dict, table: KeyTable | None = None) -> None:
        """Take a key's counts from `key_state`'s form after checking them (InvalidKeyState, one
        line, nothing changed): the global model's classes, C finite counts >= 0 everywhere,
        N_fc,k <= T_c,k, T_c,k the sum of the feature counts, a clock not ahead of the table's."""
        table = self.table if table is None else table
        table.align(self.classes_)
        table.put(key, _checked_key_state(state, list(self.classes_)))

    def forget_key(self, key, table: KeyTable | None = None) -> None:
        (self.table if table is None else table).forget(key)


class InvalidKeyState(ValueError):
    """A key's state that breaks the invariants of its counts."""


def _finite_counts(values, n: int, what: str) -> list[float]:
    if not isinstance(values, list) or len(values) != n:
        raise InvalidKeyState(f"{what}: expected a list of {n} counts")
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise InvalidKeyState(f"{what}: counts are finite numbers >= 0, got {value!r}")
        out.append(float(value))
    return out


def _checked_key_state(state, classes: list) -> KeyCounts:
    if not isinstance(state, dict) or set(state) != {"classes", "features", "class_counts", "class_totals",
                                                     "last_labeled"}:
        raise InvalidKeyState("a key's state is a dict of classes, features, class_counts, class_totals and "
                              "last_labeled")
    if state["classes"] != classes:
        raise InvalidKeyState(f"a key's classes {state['classes']!r} are not the global model's {classes!r}")
    return checked_key_counts(len(classes), state["class_counts"], state["class_totals"], state["features"],
                              state["last_labeled"])


def checked_key_counts(n: int, class_counts, class_totals, features, last_labeled) -> KeyCounts:
    """KeyCounts of n classes from plain values after checking a key's invariants
    (InvalidKeyState, one line): lists of n finite counts >= 0 everywhere, T_c,k the sum of the
    feature counts of c, no class with feature counts and no events, a whole labeled clock."""
    if not isinstance(features, dict):
        raise InvalidKeyState("features: expected a dict of name -> counts per class")
    rows = []
    for name, row in features.items():
        if not isinstance(name, str):
            raise InvalidKeyState(f"a feature name is a string, got {type(name).__name__}")
        rows.append(_finite_counts(row, n, f"feature {name!r}"))
    matrix = np.array(rows, dtype=np.float64).reshape(len(rows), n)
    return key_counts_of_arrays(_finite_counts(class_counts, n, "class_counts"),
                                _finite_counts(class_totals, n, "class_totals"), list(features), matrix, last_labeled)


def key_counts_of_arrays(class_counts, class_totals, names: list, matrix: np.ndarray, last_labeled, *,
                         index: dict | None = None, names_checked: bool = False) -> KeyCounts:
    """`checked_key_counts` for counts already in float64 arrays (a decoder's): the same
    invariants, checked at array speed; `names` distinct strings, one per row of `matrix`.
    `index`: {name: row} of those names when the caller has it (it is kept, not copied);
    `names_checked`: the caller checked the names' lengths."""
    if isinstance(last_labeled, bool) or not isinstance(last_labeled, int) or last_labeled < 0:
        raise InvalidKeyState(f"last_labeled: a labeled clock, a whole number >= 0, got {last_labeled!r}")
    counts, totals = np.asarray(class_counts, dtype=np.float64), np.asarray(class_totals, dtype=np.float64)
    for what, values in (("class_counts", counts), ("class_totals", totals), ("feature counts", matrix)):
        bad = ~(np.isfinite(values) & (values >= 0))
        if bad.any():
            raise InvalidKeyState(f"{what}: counts are finite numbers >= 0, got {values[bad][0]!r}")
    n = len(counts)
    sums = [math.fsum(column) for column in matrix.T.tolist()] if len(matrix) else [0.0] * n
    for c in range(n):
        if not math.isclose(sums[c], float(totals[c]), rel_tol=1e-9, abs_tol=1e-9):
            raise InvalidKeyState(f"class_totals[{c}] = {float(totals[c])!r} is not the sum of its "
                                  f"feature counts ({sums[c]!r})")
        if totals[c] > 0 and counts[c] == 0:
            raise InvalidKeyState(f"class {c} has feature counts but no events")
    long_name = None if names_checked else next((name for name in names if len(name) > MAX_KEY_NAME_CHARS), None)
    if long_name is not None:
        raise InvalidKeyState(f"a key keeps feature names of at most {MAX_KEY_NAME_CHARS} characters, got one of "
                              f"{len(long_name)}")
    own = KeyCounts(n, last_labeled)
    own.class_counts, own.class_totals = counts.tolist(), totals.tolist()
    own.set_rows(names, matrix, index)
    return own
