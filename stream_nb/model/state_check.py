"""A state (from `to_state()`, or from bytes somebody else wrote) checked against the model's
invariants before anything is built from it. Pure: plain dicts and arrays in, InvalidState out.

Every variant's state holds `meta` (kind, format, params, classes, integral, the forgetting
record) and float64 `arrays`; each check names one broken invariant in one line:

    classes       distinct str or int labels (no bool, no null), in canonical order
    N_c           shape (C,), finite, >= 0
    integral      every count a whole number;  on_grid: every count a multiple of 2^-GRID_BITS
    cached sums   equal to the sums they cache: exactly while the counts are whole or on the
                  grid (sums of such numbers are exact), else within SUM_RELATIVE_SLACK
    names         distinct str or int (or finite float) feature names, in the vocabulary's order
    hashed        n_buckets a whole number in 1..MAX_HASH_BUCKETS, the params' n_hash_buckets

Counting variants:  N_fc shape (|V|, C) >= 0; T_c = sum_f N_fc (Bernoulli: N_fc <= N_c instead).
Categorical:        N_jac shape (values, C), N_jc shape (features, C), N_jc = sum_a N_jac <= N_c.
Gaussian:           n, mean, M2 shape (F, C), pooled (F, 3); n, M2 >= 0; n_fc <= N_c;
                    pooled n = sum_c n_fc; a moment with n = 0 is (0, 0, 0).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from stream_nb.model.base import GRID_BITS, _checked_decay_record, class_sort_key
from stream_nb.model.vocabulary import MAX_HASH_BUCKETS

# Cached sums of fractional counts are kept incrementally (learning, unlearning, eviction each
# round once): they may differ from the sum taken afresh by this share of the counts' mass.
SUM_RELATIVE_SLACK = 2.0**-24


class InvalidState(ValueError):
    """A model state that breaks the model's invariants; nothing was built from it."""


_COUNTING = ("MultinomialNB", "BernoulliNB", "ComplementNB")


def check_state(cls, state) -> None:
    """Raise InvalidState naming the first broken invariant of `state` for model class `cls`."""
    if not isinstance(state, dict) or not isinstance(state.get("meta"), dict) or not isinstance(state.get("arrays"), dict):
        raise InvalidState("state must be {'meta': dict, 'arrays': dict}")
    meta, arrays = state["meta"], state["arrays"]
    if meta.get("kind") != cls.__name__:
        raise InvalidState(f"state holds a {meta.get('kind')!r}, not a {cls.__name__}")
    if meta.get("format") != 1 or isinstance(meta.get("format"), bool):
        raise InvalidState(f"unsupported state format {meta.get('format')!r}")
    params = meta.get("params")
    if not isinstance(params, dict):
        raise InvalidState("state's params must be a dict")
    buckets = params.get("n_hash_buckets")
    if buckets is not None and not _whole(buckets, 1, MAX_HASH_BUCKETS):
        raise InvalidState(f"n_hash_buckets must be a whole number in 1..{MAX_HASH_BUCKETS}, got {buckets!r}")
    try:
        cls(**params)  # the constructor's own checks of every parameter (an empty model: no state)
    except (TypeError, ValueError) as error:
        raise InvalidState(f"state's params are refused: {error}") from None
    classes = _checked_classes(meta.get("classes"))
    for flag in ("integral", "on_grid"):
        if flag in meta and not isinstance(meta[flag], bool):
            raise InvalidState(f"state's {flag} must be true or false, got {meta[flag]!r}")
    if "integral" not in meta:
        raise InvalidState("state lacks 'integral'")
    try:
        _checked_decay_record(meta)
    except ValueError as error:
        raise InvalidState(str(error)) from None
    expected = {"MultinomialNB": _COUNTING_ARRAYS, "BernoulliNB": _COUNTING_ARRAYS, "ComplementNB": _COUNTING_ARRAYS,
                "CategoricalNB": ("class_counts", "value_counts", "feature_counts"),
                "GaussianNB": ("class_counts", "n", "mean", "m2", "pooled")}.get(cls.__name__)
    if expected is None:
        raise InvalidState(f"no state check for model class {cls.__name__}")
    if sorted(arrays) != sorted(expected):
        raise InvalidState(f"state's arrays are {sorted(map(str, arrays))}, a {cls.__name__} has {sorted(expected)}")
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray) or array.dtype != np.float64:
            raise InvalidState(f"array {name!r} must be float64, got {getattr(array, 'dtype', type(array).__name__)}")
        if not np.isfinite(array).all():
            raise InvalidState(f"array {name!r} holds NaN or infinity")
    n_classes = len(classes)
    class_counts = arrays["class_counts"]
    _check_shape("class_counts", class_counts, (n_classes,))
    _check_non_negative("class_counts", class_counts)
    if cls.__name__ in _COUNTING:
        _check_counting(meta, arrays, n_classes, buckets, bernoulli=cls.__name__ == "BernoulliNB")
    elif cls.__name__ == "CategoricalNB":
        _check_categorical(meta, arrays, n_classes)
    else:
        _check_gaussian(meta, arrays, n_classes)


_COUNTING_ARRAYS = ("class_counts", "feature_counts", "class_totals")


def _whole(value, low: int, high: int | None = None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high))


def _checked_classes(classes) -> list:
    if not isinstance(classes, list):
        raise InvalidState(f"state's classes must be a list, got {type(classes).__name__}")
    for label in classes:
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            raise InvalidState(f"class labels must be str or int, got {label!r}")
    if len(set(classes)) != len(classes):
        repeated = sorted((label for label, n in Counter(classes).items() if n > 1), key=class_sort_key)
        raise InvalidState(f"duplicate class labels {repeated!r}")
    if classes != sorted(classes, key=class_sort_key):
        raise InvalidState(f"classes are not in canonical order (ints by value, then strs): {classes!r}")
    return classes


def _checked_names(what: str, names) -> list:
    """Feature names: str, int or finite float (what JSON keeps of a dict key), distinct."""
    if not isinstance(names, list):
        raise InvalidState(f"{what} must be a list, got {type(names).__name__}")
    if not set(map(type, names)) <= {str}:  # the common case checked at C speed; else name by name
        for name in names:
            if not _is_name(name):
                raise InvalidState(f"{what}: a feature name must be str or a number, got {name!r}")
    if len(set(names)) != len(names):
        raise InvalidState(f"{what}: duplicate feature names")
    return names


def _is_name(name) -> bool:
    if isinstance(name, bool) or not isinstance(name, (str, int, float)):
        return False
    return not isinstance(name, float) or math.isfinite(name)


def _check_shape(name: str, array: np.ndarray, shape: tuple) -> None:
    if array.shape != shape:
        raise InvalidState(f"array {name!r} has shape {array.shape}, the state needs {shape}")


def _check_non_negative(name: str, array: np.ndarray) -> None:
    if (array < 0).any():
        raise InvalidState(f"array {name!r} holds negative counts (smallest {float(array.min())!r})")


def _check_grid(name: str, array: np.ndarray, meta: dict) -> None:
    """integral: whole numbers; on_grid: multiples of 2^-GRID_BITS (forgetting rounds to them)."""
    if meta["integral"] and not np.array_equal(np.floor(array), array):
        raise InvalidState(f"array {name!r} holds fractional counts but the state says integral")
    if meta.get("on_grid", False):
        scaled = array * 2.0**GRID_BITS
        if not np.array_equal(np.floor(scaled), scaled):
            raise InvalidState(f"array {name!r} holds counts off the 2^-{GRID_BITS} grid but the state says on_grid")


def _check_sums(what: str, cached: np.ndarray, sums: np.ndarray, exact: bool) -> None:
    """cached = sums (of non-negative parts): exactly (whole or grid counts), else within the slack."""
    if exact:
        wrong = cached != sums
    else:
        wrong = np.abs(cached - sums) > SUM_RELATIVE_SLACK * np.maximum(sums, 1.0)
    if wrong.any():
        at = np.unravel_index(int(np.flatnonzero(wrong)[0]), wrong.shape)
        raise InvalidState(f"{what}: at {tuple(map(int, at))} it holds {float(cached[at])!r}, "
                           f"its parts add up to {float(sums[at])!r}")


def _check_at_most(what: str, part: np.ndarray, whole: np.ndarray, exact: bool) -> None:
    slack = 0.0 if exact else SUM_RELATIVE_SLACK * np.maximum(whole, 1.0)
    if (part > whole + slack).any():
        raise InvalidState(f"{what} exceeds the class count N_c")


def _check_counting(meta: dict, arrays: dict, n_classes: int, buckets, bernoulli: bool) -> None:
    # The count variants track exactness: whole numbers (integral) or the grid (on_grid).
    exact = meta["integral"] or meta.get("on_grid", False)
    for name in ("class_counts", "feature_counts"):
        _check_grid(name, arrays[name], meta)
    for key, low in (("labeled_seen", 0),):
        if key in meta and not _whole(meta[key], low):
            raise InvalidState(f"state's {key} must be a whole number >= {low}, got {meta[key]!r}")
    learned = meta.get("events_learned", 0.0)
    if isinstance(learned, bool) or not isinstance(learned, (int, float)) or not math.isfinite(learned) or learned < 0:
        raise InvalidState(f"state's events_learned must be a finite number >= 0, got {learned!r}")
    vocabulary = meta.get("vocabulary")
    if not isinstance(vocabulary, dict):
        raise InvalidState("state's vocabulary must be a dict")
    if buckets is None:
        if vocabulary.get("kind") != "exact":
            raise InvalidState(f"state's vocabulary must be exact (n_hash_buckets is not set), got {vocabulary.get('kind')!r}")
        size = len(_checked_names("vocabulary names", vocabulary.get("names")))
    else:
        if vocabulary.get("kind") != "hashed" or vocabulary.get("n_buckets") != buckets \
                or isinstance(vocabulary.get("n_buckets"), bool):
            raise InvalidState(f"state's vocabulary must be hashed with n_buckets = n_hash_buckets = {buckets}, "
                               f"got {vocabulary.get('kind')!r} with {vocabulary.get('n_buckets')!r}")
        size = buckets
    counts, totals = arrays["feature_counts"], arrays["class_totals"]
    _check_shape("feature_counts", counts, (size, n_classes))
    _check_shape("class_totals", totals, (n_classes,))
    _check_non_negative("feature_counts", counts)
    if bernoulli:  # presence is counted once an event; T_c is kept but never used (not checked)
        _check_at_most("a feature's count N_fc", counts, arrays["class_counts"], exact=False)
        return
    _check_non_negative("class_totals", totals)
    _check_sums("class_totals T_c = sum_f N_fc", totals, counts.sum(axis=0), exact)


# Categorical and Gaussian learn one event at a time and do not track whole numbers (their
# integral flag stays true under fractional weights): their sums are checked within the slack.

def _check_categorical(meta: dict, arrays: dict, n_classes: int) -> None:
    pairs = meta.get("values")
    if not isinstance(pairs, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
        raise InvalidState("state's values must be a list of [feature, value] pairs")
    for feature, value in pairs:
        if not _is_name(feature) or value is None or isinstance(value, (dict, list)) \
                or (isinstance(value, float) and not math.isfinite(value)):
            raise InvalidState(f"state's values: unusable pair [{feature!r}, {value!r}]")
    keys = [(feature, value) for feature, value in pairs]
    if len(set(keys)) != len(keys):
        raise InvalidState("state's values: duplicate [feature, value] pairs")
    features = list(dict.fromkeys(feature for feature, _ in pairs))
    value_counts, feature_counts = arrays["value_counts"], arrays["feature_counts"]
    _check_shape("value_counts", value_counts, (len(pairs), n_classes))
    _check_shape("feature_counts", feature_counts, (len(features), n_classes))
    _check_non_negative("value_counts", value_counts)
    _check_non_negative("feature_counts", feature_counts)
    index = {feature: j for j, feature in enumerate(features)}
    per_feature = np.zeros_like(feature_counts)
    np.add.at(per_feature, np.array([index[f] for f, _ in pairs], dtype=np.int64), value_counts)
    _check_sums("feature_counts N_jc = sum_a N_jac", feature_counts, per_feature, exact=False)
    _check_at_most("a feature's count N_jc", feature_counts, arrays["class_counts"], exact=False)


def _check_gaussian(meta: dict, arrays: dict, n_classes: int) -> None:
    features = _checked_names("state's features", meta.get("features"))
    shape = (len(features), n_classes)
    for name in ("n", "mean", "m2"):
        _check_shape(name, arrays[name], shape)
    pooled = arrays["pooled"]
    _check_shape("pooled", pooled, (len(features), 3))
    n, mean, m2 = arrays["n"], arrays["mean"], arrays["m2"]
    for name, array in (("n", n), ("m2", m2), ("pooled", pooled[:, [0, 2]])):
        _check_non_negative(name, array)
    if ((n == 0) & ((mean != 0) | (m2 != 0))).any() or ((pooled[:, 0] == 0) & pooled[:, 1:].any(axis=1)).any():
        raise InvalidState("a moment with weight n = 0 must be (0, 0, 0)")
    _check_at_most("a feature's weight n_fc", n, arrays["class_counts"], exact=False)
    _check_sums("pooled n = sum_c n_fc", pooled[:, 0], n.sum(axis=1), exact=False)
