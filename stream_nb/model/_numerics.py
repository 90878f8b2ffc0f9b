"""Numerics shared by every variant: exact prefix counts, log-space normalisation."""

from __future__ import annotations

import math

import numpy as np


def exclusive_prefix_by_group(group: np.ndarray, contributions: np.ndarray) -> np.ndarray:
    """For each row r: the sum of `contributions` over earlier rows with the same `group`.

        out[r] = sum_{r' < r, group[r'] == group[r]} contributions[r']

    Rows are in stream order; contributions is (rows, columns). The result is exact when
    contributions are integers (float64 holds integers exactly up to 2**53, so the order of
    summation does not matter).
    """
    n_rows = len(group)
    if n_rows == 0:
        return np.zeros_like(contributions)
    # A stable sort by group, done as one plain sort of (group, row) packed into an int64:
    # about ten times faster than argsort(kind="stable") on token streams.
    shift = max(int(n_rows - 1).bit_length(), 1)
    packed = np.sort((group << shift) | np.arange(n_rows, dtype=np.int64))
    order = packed & ((1 << shift) - 1)
    sorted_group = packed >> shift
    is_first = np.empty(n_rows, dtype=bool)
    is_first[0] = True
    np.not_equal(sorted_group[1:], sorted_group[:-1], out=is_first[1:])
    group_start = np.flatnonzero(is_first)
    group_number = np.cumsum(is_first) - 1
    # Work column by column on contiguous rows: cumsum along a strided axis is several times slower.
    out = np.empty_like(contributions)
    for column in range(contributions.shape[1]):
        sorted_contrib = contributions[order, column]
        exclusive = np.cumsum(sorted_contrib)
        exclusive -= sorted_contrib
        exclusive -= exclusive[group_start][group_number]
        out[order, column] = exclusive
    return out


def first_occurrences(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """The distinct values of `keys` (ints in [0, n_keys)) in order of first occurrence:

        values, first_at = np.unique(keys, return_index=True);  values[np.argsort(first_at)]

    without a sort. Keys numbered by first appearance (a featuriser's ranks, or a subsequence of
    them) first occur in increasing order, and then the answer is the distinct keys ascending:
    that holds exactly when every first occurrence is a new running maximum, that is when there
    are as many new maxima as distinct keys (a new maximum is always a first occurrence), two
    passes to check. Otherwise each key's first position by np.minimum.at, then the positions
    that are their key's first, in order (O(len(keys) + n_keys) either way)."""
    if len(keys) == 0:
        return keys.astype(np.int64)
    seen = np.zeros(n_keys, dtype=bool)
    seen[keys] = True
    distinct = np.flatnonzero(seen)
    new_maximum = keys[1:] > np.maximum.accumulate(keys[:-1])
    if np.count_nonzero(new_maximum) + 1 == len(distinct):  # (keys[0] is the first maximum)
        return distinct.astype(np.int64, copy=False)
    positions = np.arange(len(keys), dtype=np.int64)
    first_at = np.full(n_keys, len(keys), dtype=np.int64)
    np.minimum.at(first_at, keys, positions)
    return keys[first_at[keys] == positions]


def row_sums(matrix: np.ndarray) -> np.ndarray:
    """matrix.sum(axis=1), adding the (few) columns one after another: faster for narrow
    matrices, and the same order of addition whatever the number of rows."""
    if matrix.shape[1] == 0:
        return np.zeros(len(matrix))
    total = matrix[:, 0].copy()
    for column in range(1, matrix.shape[1]):
        total += matrix[:, column]
    return total


def exclusive_cumsum(rows: np.ndarray) -> np.ndarray:
    """out[i] = sum_{i' < i} rows[i'] (along axis 0)."""
    out = np.cumsum(rows, axis=0)
    out -= rows
    return out


def per_event_sum(event: np.ndarray, values: np.ndarray, n_events: int) -> np.ndarray:
    """Sum `values` (rows, or rows x columns) into their events, adding in row order.

    np.bincount accumulates sequentially, so an event's sum is formed in the same order whether
    it is computed alone or inside a batch: the batch path stays bit-identical to the per-event one.
    """
    if values.ndim == 1:
        return np.bincount(event, weights=values, minlength=n_events)
    out = np.empty((n_events, values.shape[1]))
    for column in range(values.shape[1]):
        out[:, column] = np.bincount(event, weights=values[:, column], minlength=n_events)
    return out


def row_total(row: list[float]) -> float:
    """row_sums for one row of Python floats: its entries added in column order."""
    total = row[0]
    for value in row[1:]:
        total += value
    return total


def weighted_column_sums(flat: list[float], n_columns: int, weights: list[float]) -> list[float]:
    """per_event_sum(event, weights[:, None] * matrix) for one event, the matrix given row after
    row in `flat` (rows beyond len(weights) are ignored): for each column c,
    0.0 + w_0 m_0c + w_1 m_1c + ..., in row order, as np.bincount adds them."""
    end = len(weights) * n_columns
    sums = []
    for column in range(n_columns):
        total = 0.0
        for weight, value in zip(weights, flat[column:end:n_columns]):
            total += weight * value
        sums.append(total)
    return sums


def sequential_sum(values) -> float:
    """per_event_sum for one event: 0.0 + v_0 + v_1 + ..., in order, as np.bincount adds them."""
    total = 0.0
    for value in values:
        total += value
    return total


def log_list(values: list[float]) -> list[float]:
    """np.log of each value (a non-empty list), as a list; log(0) = -inf without a warning.

    np.log, not math.log: numpy's vectorised log can differ from the C library's in the last
    bit, and the batch kernel takes np.log. It works element by element, so a value's log does
    not depend on the array it is in."""
    array = np.array(values, dtype=np.float64)
    if min(values) > 0:
        return np.log(array).tolist()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(array).tolist()


def effective_log_scores(scores: np.ndarray, active: np.ndarray, fallback: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the log scores the probabilities are the softmax of, their row maxima): `scores` with
    inactive classes at -inf, and a hopeless row (every active class at -inf) replaced by
    `fallback` (the log prior) on its active classes. A new array; `scores` is not changed."""
    scores = np.where(active, scores, -np.inf)
    best = scores.max(axis=1, initial=-np.inf)
    hopeless = np.isneginf(best) & active.any(axis=1)
    if hopeless.any():
        scores[hopeless] = np.where(active[hopeless], fallback[hopeless], -np.inf)
        best[hopeless] = scores[hopeless].max(axis=1)
    return scores, best


def normalise_log_scores(scores: np.ndarray, active: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Posterior probabilities from joint log likelihoods by log-sum-exp, row by row.

        P(c | x) = exp(s_c - m) / sum_k exp(s_k - m),   m = max_k s_k, over active classes k.

    Edge cases, on purpose:
    - every class at -inf (possible only with alpha = 0: each class gives the event zero
      probability): the evidence contradicts every class, so the row falls back to `fallback`
      (the log prior);
    - one or more classes at +inf (complement NB with alpha = 0): the mass is shared equally
      by those classes.
    Inactive classes get probability 0. The sum runs over columns in class order, so a row's
    result does not depend on how many rows are normalised together.
    """
    return normalise_effective(*effective_log_scores(scores, active, fallback))


def normalise_effective(scores: np.ndarray, best: np.ndarray) -> np.ndarray:
    """normalise_log_scores from what effective_log_scores gave (neither array is changed)."""
    best = best.copy()
    certain = np.isposinf(best)
    if certain.any():
        scores = scores.copy()
        scores[certain] = np.where(np.isposinf(scores[certain]), 0.0, -np.inf)
        best[certain] = 0.0
    best[np.isneginf(best)] = 0.0  # rows with no active class: all zeros come out below
    with np.errstate(invalid="ignore"):
        weights = np.exp(scores - best[:, None])
    total = np.zeros(len(scores))
    for column in range(scores.shape[1]):
        total += weights[:, column]
    total[total == 0.0] = 1.0
    return weights / total[:, None]


def effective_log_row(scores: list, active: list, fallback: list) -> tuple[list, float]:
    """effective_log_scores for one row of Python floats: (the row, its maximum)."""
    scores = [score if on else -math.inf for score, on in zip(scores, active)]
    best = _array_max(scores)
    if best == -math.inf and any(active):  # hopeless: back to the fallback
        scores = [value if on else -math.inf for value, on in zip(fallback, active)]
        best = _array_max(scores)
    return scores, best


def normalise_log_row(scores: list, active: list, fallback: list) -> list[float]:
    """normalise_log_scores for one row of Python floats, by the same operations in the same
    order (the exponentials by np.exp, the sum from 0.0 in class order, then the divisions)."""
    scores, best = effective_log_row(scores, active, fallback)
    if best == math.inf:  # certain: shared by the classes at +inf
        scores = [0.0 if score == math.inf else -math.inf for score in scores]
        best = 0.0
    if best == -math.inf:
        best = 0.0
    weights = np.exp(np.array([score - best for score in scores])).tolist()
    total = sequential_sum(weights)
    if total == 0.0:
        total = 1.0
    return [weight / total for weight in weights]


def _array_max(values: list[float]) -> float:
    """ndarray.max(initial=-inf) of a list: -inf when empty, NaN when any value is NaN."""
    best = -math.inf
    for value in values:
        if value != value:
            return value
        if value > best:
            best = value
    return best
