"""Categorical naive Bayes: each feature takes one of a finite set of values."""

from __future__ import annotations

import numpy as np

from stream_nb.model.base import NotLearned, SequentialNB, _check_smoothing, _check_unknown


class CategoricalNB(SequentialNB):
    """Naive Bayes over categorical features (x = {feature: value}).

        log P(c) P(x | c) = log P(c) + sum_j log P(x_j = a | c)
        P(x_j = a | c) = (N_jac + lambda) / (N_jc + S_j lambda)

    N_jac: class-c events with feature j = a; N_jc: class-c events in which feature j was
    observed (equal to N_c when no value is ever missing); S_j: the number of values of j with
    a count (seen in training, and not all taken back by unlearning), or the declared ones (`categories={feature: [values]}`), which are then
    the only values accepted for learning. lambda = alpha; alpha = 0 is the MLE.

    At prediction a feature never learned is dropped; a value never learned for a known feature
    is dropped (`unknown="ignore"`) or counts as lambda / (N_jc + S_j lambda) (`"smooth"`).
    With alpha = 0, a class that has never observed feature j (0/0) takes no term for j.
    """

    def __init__(self, alpha: float = 1.0, prior_alpha: float = 0.0, unknown: str = "ignore",
                 categories: dict | None = None):
        super().__init__(prior_alpha=prior_alpha)
        _check_smoothing("alpha", alpha)
        _check_unknown(unknown)
        self.alpha = alpha
        self.unknown = unknown
        self.categories = categories
        self._feature_index: dict = {}  # feature -> j
        self._value_index: dict = {}  # (feature, value) -> column
        self._value_feature = np.zeros(0, dtype=np.int64)  # column -> j
        self._value_counts = np.zeros((0, 0))  # (columns, C): N_jac
        self._feature_counts = np.zeros((0, 0))  # (features, C): N_jc
        self._n_values = np.zeros(0)  # S_j
        if categories is not None:
            if not isinstance(categories, dict):
                raise TypeError("categories must be a dict {feature: [values]}")
            for feature, values in categories.items():
                values = list(values)
                if not values or len(set(values)) != len(values):
                    raise ValueError(f"categories[{feature!r}] must list distinct values, got {values!r}")
                for value in values:
                    self._add_value(feature, value)

    @property
    def n_features(self) -> int:
        """Columns of the state: distinct (feature, value) pairs."""
        return len(self._value_index)

    def _add_value(self, feature, value) -> int:
        j = self._feature_index.get(feature)
        if j is None:
            j = self._feature_index[feature] = len(self._feature_index)
            self._feature_counts = np.vstack((self._feature_counts,
                                              np.zeros((1, len(self._classes)))))
            self._n_values = np.append(self._n_values, 0.0)
        column = self._value_index[(feature, value)] = len(self._value_index)
        self._value_feature = np.append(self._value_feature, j)
        self._value_counts = np.vstack((self._value_counts,
                                        np.zeros((1, len(self._classes)))))
        self._n_values[j] += 1
        return column

    def _insert_class_columns(self, insert_at: np.ndarray) -> None:
        self._value_counts = np.insert(self._value_counts, insert_at, 0.0, axis=1)
        self._feature_counts = np.insert(self._feature_counts, insert_at, 0.0, axis=1)

    # Events are kept as they come: values are categories, not numbers.
    def _check_event(self, i: int, x: dict, label) -> None:
        for feature, value in x.items():
            if value is None or isinstance(value, (dict, list, set)) or (isinstance(value, float) and value != value):
                raise ValueError(f"event {i}: feature {feature!r} has no usable category ({value!r})")
            if self.categories is not None and label is not None and (feature, value) not in self._value_index:
                raise ValueError(f"event {i}: {feature!r}={value!r} is not among the declared categories")

    def _score_one(self, x: dict):
        counts = self._class_counts
        active, log_prior = self._current_log_prior()
        alpha = self.alpha
        score = log_prior.copy()
        for feature, value in x.items():
            j = self._feature_index.get(feature)
            if j is None:
                continue
            denominator = self._feature_counts[j] + self._n_values[j] * alpha
            column = self._value_index.get((feature, value))
            if column is not None and self._value_counts[column].any() or column is not None and self.categories:
                numerator = self._value_counts[column] + alpha
            elif self.unknown == "smooth":
                numerator = np.full(len(counts), float(alpha))
            else:
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                term = np.log(numerator) - np.log(denominator)
            score += np.where(denominator > 0, term, 0.0)
        return score, active, log_prior

    def _learn_one(self, x: dict, c: int, w: float) -> None:
        for feature, value in x.items():
            column = self._value_index.get((feature, value))
            if column is None:
                column = self._add_value(feature, value)
            elif self.categories is None and not self._value_counts[column].any():
                self._n_values[self._value_feature[column]] += 1  # a value unlearned to 0 counts again
            self._value_counts[column, c] += w
            self._feature_counts[self._value_feature[column], c] += w
        self._class_counts[c] += w

    # ---- unlearning -------------------------------------------------------------------

    def _plan_unlearning(self, X, y, weights, steps, name_events):
        """Per labeled event (w > 0): (class, N_c after, [(value column, N_jac after, j, N_jc
        after)]), each count checked against what the events before it leave."""
        held_values, held_features, plans = {}, {}, []
        for x, label, where, w, c, new_class in self._class_take_backs(X, y, weights, name_events):
            writes = []
            for feature, value in x.items():
                column = self._value_index.get((feature, value))
                if column is None:
                    raise NotLearned(f"{where}{feature!r}={value!r} was never learned (class {label!r})")
                j = int(self._value_feature[column])
                what = f"{where}{feature!r}={value!r} in class {label!r}"
                held_values[column, c] = self._take_back(
                    held_values.get((column, c), float(self._value_counts[column, c])), w, what)
                held_features[j, c] = self._take_back(
                    held_features.get((j, c), float(self._feature_counts[j, c])), w, f"{where}feature {feature!r}'s "
                    f"count N_jc in class {label!r}")
                writes.append((column, held_values[column, c], j, held_features[j, c]))
            plans.append((c, new_class, writes))
        return plans

    def _apply_unlearning(self, plan) -> None:
        c, new_class, writes = plan
        for column, value_count, j, feature_count in writes:
            self._value_counts[column, c] = value_count
            self._feature_counts[j, c] = feature_count
        self._class_counts[c] = new_class

    def _after_unlearning(self) -> None:
        self._count_values()

    def _count_values(self) -> None:
        """S_j = values of j with a count in some class (declared categories: fixed)."""
        if self.categories is None:
            counted = self._value_feature[self._value_counts.any(axis=1)]
            self._n_values = np.bincount(counted, minlength=len(self._feature_index)).astype(np.float64)

    def _class_is_empty(self, c: int) -> bool:
        return not (self._value_counts[:, c].any() or self._feature_counts[:, c].any())

    def _delete_class_columns(self, classes: list[int]) -> None:
        self._value_counts = np.delete(self._value_counts, classes, axis=1)
        self._feature_counts = np.delete(self._feature_counts, classes, axis=1)

    # ---- state ------------------------------------------------------------------------

    def _params(self) -> dict:
        categories = None if self.categories is None else {k: list(v) for k, v in self.categories.items()}
        return {"alpha": self.alpha, "prior_alpha": self.prior_alpha, "unknown": self.unknown,
                "categories": categories}

    def _state_meta(self) -> dict:
        return {"values": [[feature, value] for feature, value in self._value_index]}

    def _state_arrays(self) -> dict:
        return {"class_counts": self._class_counts, "value_counts": self._value_counts,
                "feature_counts": self._feature_counts}

    def _restore(self, meta: dict, arrays: dict) -> None:
        C = len(self._classes)
        self._feature_index, self._value_index = {}, {}
        self._value_feature = np.zeros(0, dtype=np.int64)
        self._value_counts, self._feature_counts, self._n_values = np.zeros((0, C)), np.zeros((0, C)), np.zeros(0)
        for feature, value in meta["values"]:
            self._add_value(feature, value)
        # shapes checked (state_check): (values, C) and (features, C), even with C = 0
        self._value_counts = np.array(arrays["value_counts"], dtype=np.float64).reshape(len(self._value_index), C)
        self._feature_counts = np.array(arrays["feature_counts"], dtype=np.float64).reshape(len(self._feature_index), C)
        self._count_values()  # a value unlearned to 0 keeps its column but not its place in S_j

    def _merge_from(self, other, class_into) -> None:
        for (feature, value), column in other._value_index.items():
            own = self._value_index.get((feature, value))
            if own is None:
                own = self._add_value(feature, value)
            self._value_counts[own, class_into] += other._value_counts[column]
        for feature, j in other._feature_index.items():
            self._feature_counts[self._feature_index[feature], class_into] += other._feature_counts[j]
        self._count_values()
