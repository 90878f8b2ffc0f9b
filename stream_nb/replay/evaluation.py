"""Evaluation of a prequential replay: exact metrics over every labeled prediction, kept compactly.

`EvaluationRecorder` stores, in stream order, what a replay predicted for each labeled event: the
true label, the predicted label, the probability the model gave every class and the log scores
it computed them from (the score of a class is read off those: model.posterior), as numpy arrays
(labels as small integer indices), so millions of events cost tens of megabytes, not Python
objects. `evaluate` turns a recorder into a JSON-ready dict; `rolling_series` gives the curves to
plot; `write_scores_csv` writes the per-event scores.

Labels may be anything hashable (strings included). Binary measures are computed against an
explicitly named positive class, never against a guessed 1/True (River's binary metrics silently
read 0 with string labels); `resolve_positive` only guesses for {"spam", "ham"}, {True, False}
and {0, 1}.

Definitions used (n = labeled events, "positive" = spam in TREC's vocabulary):

* accuracy = correct / n; a prediction of None (no class known yet) is an error.
* per_class precision/recall/F1 are 0 where a ratio is 0/0; macro_f1 averages F1 over the classes
  with support > 0 (as `PrequentialMetrics`).
* mcc: Gorodkin's R_K on the K x K confusion matrix (equal to the usual MCC for two classes, and
  to scikit-learn's `matthews_corrcoef`); 0 when its denominator is 0. None predictions are one
  more predicted category that is never true.
* log_loss: mean of -ln P(true class), P clipped below at 1e-15 (NaN counts as 1e-15).
* roc_auc: the exact Mann-Whitney statistic: the fraction of (positive, negative) pairs where
  the positive is scored higher, ties counting 0.5. The score of class c is its log-odds,
  log P(c|x) - log P(not c|x) = s_c - logsumexp_{k != c} s_k from the joint log likelihoods
  s_k (`EvaluationRecorder.scores`): it orders events as P(c|x) does, and keeps ordering them
  where P(c|x) rounds to 0.0 or 1.0 (naive Bayes saturates: on mail, a third of the events tie
  at P = 1.0 or 0.0); under [evaluation] score_scale = "sqrt_features", the log-odds divided
  by sqrt(the event's distinct features) (stream_nb.model.scale). Binary: the positive class's
  score. More classes: the unweighted mean over classes of the one-vs-rest AUC with each
  class's score, over the classes that occur both as true and not (scikit-learn's
  multi_class="ovr", average="macro"). A class the model did not know yet scores -inf; NaN
  scores rank lowest.
* trec (exactly two classes), after Cormack & Lynam, "TREC 2005 Spam Track Overview" and
  "On-line Supervised Spam Filter Evaluation" (ACM TOIS 25(3), 2007):
  - hm_percent = 100 * hams predicted positive / hams;
  - sm_percent = 100 * spams not predicted positive / spams (a None prediction is not spam);
  - lam_percent = 100 * logit^-1((logit(hm) + logit(sm)) / 2), logit(p) = ln(p / (1 - p)) on
    fractions, i.e. the odds of lam are the geometric mean of the two odds. logit is infinite
    at 0 and 1; there (only there) the rate is replaced by the empirical-logit continuity
    correction (errors + 0.5) / (count + 1) and `lam_continuity_corrected` is true. The TREC
    papers define lam on the raw rates; this correction is our convention for the degenerate
    case, not a reproduction of the TREC toolkit's handling of it.
  - one_minus_roca_percent = 100 * (1 - roc_auc) with the spam score (log-odds), the area computed
    exactly as above (TREC reports the area under the ROC curve as (1-ROCA)%).
  - sm_at_hm_0_1_percent: the ROC curve as a step function, no interpolation. A threshold t
    calls spam every event with score >= t; t runs over every distinct score and +inf (nothing
    called spam). Among the thresholds whose ham misclassification rate is <= 0.1 % (exactly:
    misclassified hams * 1000 <= hams), the lowest spam misclassification rate, in percent.
    With fewer than 1,000 hams this means no ham may be misclassified.
  A measure whose denominator is 0 (no ham, or no spam) is None.
"""

from __future__ import annotations

import csv
import math
from fractions import Fraction

import numpy as np

from stream_nb.model.decision import obvious_positive
from stream_nb.model.posterior import Posterior, log_odds_of
from stream_nb.model.scale import check_score_scale, scaled_score_array

_NONE = -1  # predicted index of "no prediction" (the model knew no class yet)
_MIN_PROBABILITY = 1e-15


def _label_order(label):
    return (isinstance(label, str), str(label))


class EvaluationRecorder:
    """Per labeled event, in stream order: true label, predicted label, P(class) for every class
    and the log scores s_c behind them.

    Stored as numpy arrays that grow geometrically: true and predicted label indices (int32),
    P(true) (float64, for log loss, exactly as given) and two events x classes float64 matrices:
    the probabilities (0 for a class absent from an event's dict, e.g. one not yet seen) and the
    log scores (a `Posterior`'s log_scores; log P for a plain dict of probabilities; -inf for an
    absent class), and which classes the model knew at each event (bool): 8 * (2 + 2K) + K + 8
    bytes per event, 58 for two classes.

    `score_scale` ([evaluation] score_scale, stream_nb.model.scale): "sqrt_features" keeps each
    event's number of distinct features too (8 bytes more; `update` takes it), and `scores`
    divides the log-odds by its square root, so every measure ranked on the score does.
    """

    def __init__(self, capacity: int = 1024, score_scale: str = "none") -> None:
        self.labels: list = []  # index -> label, in order of first appearance
        self._index: dict = {}
        self._size = 0
        self.score_scale = check_score_scale(score_scale)
        capacity = max(int(capacity), 16)
        self._true = np.empty(capacity, dtype=np.int32)
        self._predicted = np.empty(capacity, dtype=np.int32)
        self._p_true = np.empty(capacity, dtype=np.float64)
        self._probabilities = np.zeros((capacity, 0), dtype=np.float64)
        self._log_scores = np.full((capacity, 0), -np.inf)
        self._known = np.zeros((capacity, 0), dtype=bool)  # the classes the model knew at each event
        self._sizes = np.zeros(capacity if self.score_scale != "none" else 0, dtype=np.int64)

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (capacity included)."""
        return (self._true.nbytes + self._predicted.nbytes + self._p_true.nbytes
                + self._probabilities.nbytes + self._log_scores.nbytes + self._known.nbytes
                + self._sizes.nbytes)

    def _label_index(self, label) -> int:
        index = self._index.get(label)
        if index is None:
            index = self._index[label] = len(self.labels)
            self.labels.append(label)
            rows, columns = self._probabilities.shape
            grown = np.zeros((rows, columns + 1), dtype=np.float64)
            grown[:, :columns] = self._probabilities
            self._probabilities = grown
            grown = np.full((rows, columns + 1), -np.inf)
            grown[:, :columns] = self._log_scores
            self._log_scores = grown
            grown = np.zeros((rows, columns + 1), dtype=bool)
            grown[:, :columns] = self._known
            self._known = grown
        return index

    def _grow(self) -> None:
        capacity = 2 * len(self._true)
        self._true = np.resize(self._true, capacity)
        self._predicted = np.resize(self._predicted, capacity)
        self._p_true = np.resize(self._p_true, capacity)
        if self.score_scale != "none":
            self._sizes = np.resize(self._sizes, capacity)
        grown = np.zeros((capacity, self._probabilities.shape[1]), dtype=np.float64)
        grown[: self._size] = self._probabilities[: self._size]
        self._probabilities = grown
        grown = np.full((capacity, self._log_scores.shape[1]), -np.inf)
        grown[: self._size] = self._log_scores[: self._size]
        self._log_scores = grown
        grown = np.zeros((capacity, self._known.shape[1]), dtype=bool)
        grown[: self._size] = self._known[: self._size]
        self._known = grown

    def update(self, true, predicted, probabilities: dict, n_features: int | None = None) -> None:
        """Record one labeled event: its label, the predicted label (None if no class was known)
        and the probabilities the model gave (class -> p, possibly empty); under score_scale
        "sqrt_features", its number of distinct features (training.event_sizes), required."""
        if true is None:
            raise ValueError("EvaluationRecorder.update needs a label; unlabeled events are not scored")
        if self.score_scale != "none" and n_features is None:
            raise ValueError(f"EvaluationRecorder.update needs n_features under score_scale {self.score_scale!r}")
        if self._size == len(self._true):
            self._grow()
        row = self._size
        true_index = self._label_index(true)
        self._true[row] = true_index
        self._predicted[row] = _NONE if predicted is None else self._label_index(predicted)
        if isinstance(probabilities, Posterior):
            log_scores = probabilities.log_scores
        else:  # log P: the log scores up to a constant per event, which no score depends on
            log_scores = [math.log(p) if p > 0 else -math.inf for p in probabilities.values()]
        for (label, p), log_score in zip(probabilities.items(), log_scores):
            index = self._index.get(label)
            if index is None:
                index = self._label_index(label)
            self._probabilities[row, index] = p
            self._log_scores[row, index] = log_score
            self._known[row, index] = True
        self._p_true[row] = probabilities.get(true, 0.0)
        if self.score_scale != "none":
            self._sizes[row] = n_features
        self._size += 1

    # Read-only views of what was recorded (length len(self)).
    @property
    def true_indices(self) -> np.ndarray:
        return self._true[: self._size]

    @property
    def predicted_indices(self) -> np.ndarray:
        return self._predicted[: self._size]

    @property
    def p_true(self) -> np.ndarray:
        return self._p_true[: self._size]

    @property
    def probabilities(self) -> np.ndarray:
        """events x classes, columns in the order of `labels`."""
        return self._probabilities[: self._size]

    @property
    def log_scores(self) -> np.ndarray:
        """events x classes: the log scores s_c (-inf for a class the event had not)."""
        return self._log_scores[: self._size]

    @property
    def sizes(self) -> np.ndarray | None:
        """Each event's number of distinct features (score_scale "sqrt_features"), else None."""
        return None if self.score_scale == "none" else self._sizes[: self._size]

    def scores(self, label) -> np.ndarray:
        """Per event, the score of `label` on the recorder's score_scale, as the ranking
        measures read it: the log-odds s_c - logsumexp_{k != c} s_k (`log_odds_of`, the very
        function a prediction message's score comes from), divided by sqrt(max(n, 1)) under
        "sqrt_features" (stream_nb.model.scale); and 0, the neutral middle, at an event the
        model scored before it knew `label` and some other class (its message says -inf or
        +inf: a model that knows one class cannot rank, as bogofilter's empty database gives
        every message 0.5). Without that, the first spam of a stream, predicted when only ham
        was known, would rank below every ham and weigh on 1-ROCA% for the whole stream."""
        scores = self.log_odds(label)
        if self.score_scale != "none":
            scores = scaled_score_array(scores, self.sizes)
        known = self._known[: self._size]
        blind = ~known[:, self._index[label]] | (known.sum(axis=1) < 2)
        if blind.any():
            scores = np.where(blind, 0.0, scores)
        return scores

    def log_odds(self, label) -> np.ndarray:
        """Per event, the log-odds of `label`, whatever the score's scale (see `scores`)."""
        index = self._index[label]
        rows = self.log_scores
        if rows.shape[1] == 2:  # s_c - s_other where both are finite (the same float subtraction)
            own, other = rows[:, index], rows[:, 1 - index]
            with np.errstate(invalid="ignore"):
                scores = own - other
            odd = np.flatnonzero(~(np.isfinite(own) & np.isfinite(other)))
        else:
            scores, odd = np.empty(len(rows)), np.arange(len(rows))
        for i in odd.tolist():
            scores[i] = log_odds_of(rows[i].tolist(), index)
        return scores

    def sorted_labels(self) -> list:
        return sorted(self.labels, key=_label_order)


# ---------------------------------------------------------------------------------------------
# Ranking measures


def _rank_groups(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct scores, highest first, with the number of positives and negatives at each."""
    scores = np.where(np.isnan(scores), -np.inf, scores)
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    is_positive = positive[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    positives = np.add.reduceat(is_positive.astype(np.int64), starts) if len(ordered) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(ordered)])
    return ordered[starts], positives, sizes - positives


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Exact Mann-Whitney AUC (ties 0.5) of `scores` for the boolean mask `positive`; None when
    either side is empty."""
    positive = np.asarray(positive, dtype=bool)
    n_positive = int(positive.sum())
    n_negative = len(positive) - n_positive
    if n_positive == 0 or n_negative == 0:
        return None
    _, pos, neg = _rank_groups(np.asarray(scores, dtype=np.float64), positive)
    negatives_below = n_negative - np.cumsum(neg)
    # Twice the Mann-Whitney U, an exact integer: 2 per pair ranked right, 1 per tie.
    twice_u = int(np.sum(2 * pos * negatives_below + pos * neg, dtype=np.int64))
    return twice_u / (2 * n_positive * n_negative)


def roc_curve(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(false positive rate, true positive rate, threshold) at every distinct score, from the
    threshold +inf (nothing called positive, the point (0, 0)) down to the lowest score (1, 1)."""
    positive = np.asarray(positive, dtype=bool)
    thresholds, pos, neg = _rank_groups(np.asarray(scores, dtype=np.float64), positive)
    n_positive, n_negative = int(positive.sum()), int((~positive).sum())
    tp = np.r_[0, np.cumsum(pos)]
    fp = np.r_[0, np.cumsum(neg)]
    fpr = fp / n_negative if n_negative else np.zeros(len(fp))
    tpr = tp / n_positive if n_positive else np.zeros(len(tp))
    return fpr, tpr, np.r_[np.inf, thresholds]


def miss_rate_at_false_positive_rate(scores: np.ndarray, positive: np.ndarray,
                                     max_false_positive_rate: float = 0.001) -> float | None:
    """The lowest fraction of positives scored below the threshold, over the thresholds (every
    distinct score, and +inf) whose fraction of negatives at or above it is <= the bound.

    The bound is compared exactly (as a fraction), so 0.001 with 1,000 negatives allows one.
    None when either side is empty.
    """
    positive = np.asarray(positive, dtype=bool)
    n_positive, n_negative = int(positive.sum()), int((~positive).sum())
    if n_positive == 0 or n_negative == 0:
        return None
    bound = Fraction(str(max_false_positive_rate))
    _, pos, neg = _rank_groups(np.asarray(scores, dtype=np.float64), positive)
    fp = np.r_[0, np.cumsum(neg)]
    tp = np.r_[0, np.cumsum(pos)]
    allowed = fp * bound.denominator <= bound.numerator * n_negative  # a prefix: fp only grows
    best_tp = int(tp[allowed].max())
    return (n_positive - best_tp) / n_positive


# ---------------------------------------------------------------------------------------------
# Positive class


def resolve_positive(labels, positive=None, binary: bool = True):
    """The positive class of a two-class problem: `positive` if given (it must be one of the
    labels), else "spam" for {"spam", "ham"} and True/1 for {True, False} / {0, 1}; anything else
    raises ValueError asking for it. Returns None when there are not exactly two classes, or
    when `binary` is False (the binary measures are skipped: see binary_measures_of)."""
    if not binary:
        return None
    labels = list(labels)
    if positive is not None:
        if positive not in labels:
            raise ValueError(f"positive class {positive!r} is not among the labels {labels!r}")
        return positive
    if len(labels) != 2:
        return None
    obvious = obvious_positive(labels)
    if obvious is not None:
        return obvious
    raise ValueError(f"two classes {sorted(labels, key=_label_order)!r}: name the positive class "
                     "(the one TREC calls spam) explicitly; it is not guessed")


def binary_measures_of(labels, positive=None) -> tuple[object, str | None]:
    """(the positive class, None), or (None, why the binary measures are skipped) when it cannot
    be resolved: a named class that is not among the labels (none at all for an empty stream),
    or two classes of which neither is obviously the positive one. A replay's labels are known
    only once it has run: its report is written either way, with the reason in it."""
    labels = list(labels)
    if not labels:
        return None, "no labeled event was scored: there is nothing to measure"
    try:
        return resolve_positive(labels, positive), None
    except ValueError as error:
        return None, (f"{error}: the binary measures (TREC, the positive class's ROC and F1) are skipped; "
                      "name the positive class with [evaluation] positive")


# ---------------------------------------------------------------------------------------------
# Counting measures


def _confusion(recorder: EvaluationRecorder) -> np.ndarray:
    """K x (K + 1) counts: rows true index, columns predicted index, last column None."""
    k = len(recorder.labels)
    predicted = np.where(recorder.predicted_indices == _NONE, k, recorder.predicted_indices)
    flat = recorder.true_indices.astype(np.int64) * (k + 1) + predicted
    return np.bincount(flat, minlength=k * (k + 1)).reshape(k, k + 1)


def _mcc(confusion: np.ndarray) -> float:
    """Gorodkin's R_K; the None column is a predicted category that is never true."""
    k = confusion.shape[0]
    square = np.zeros((k + 1, k + 1), dtype=np.int64)
    square[:k, :] = confusion
    total = int(square.sum())
    correct = int(np.trace(square))
    predicted = [int(x) for x in square.sum(axis=0)]
    actual = [int(x) for x in square.sum(axis=1)]
    covariance = correct * total - sum(p * t for p, t in zip(predicted, actual))
    variance_predicted = total * total - sum(p * p for p in predicted)
    variance_actual = total * total - sum(t * t for t in actual)
    if variance_predicted == 0 or variance_actual == 0:
        return 0.0
    return covariance / math.sqrt(variance_predicted) / math.sqrt(variance_actual)


def _f1(true_positive: int, predicted: int, actual: int) -> tuple[float, float, float]:
    precision = true_positive / predicted if predicted else 0.0
    recall = true_positive / actual if actual else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _lam(hm_errors: int, hams: int, sm_errors: int, spams: int) -> tuple[float, bool]:
    corrected = False
    rates = []
    for errors, count in ((hm_errors, hams), (sm_errors, spams)):
        if errors == 0 or errors == count:
            rates.append((errors + 0.5) / (count + 1))
            corrected = True
        else:
            rates.append(errors / count)
    mean_logit = (_logit(rates[0]) + _logit(rates[1])) / 2
    return 100 / (1 + math.exp(-mean_logit)), corrected


def _trec(recorder: EvaluationRecorder, positive) -> dict:
    spam = recorder._index[positive]
    true = recorder.true_indices
    is_spam = true == spam
    called_spam = recorder.predicted_indices == spam
    spams = int(is_spam.sum())
    hams = len(true) - spams
    hm_errors = int((~is_spam & called_spam).sum())
    sm_errors = int((is_spam & ~called_spam).sum())
    scores = recorder.scores(positive)
    auc = roc_auc(scores, is_spam)
    at_hm = miss_rate_at_false_positive_rate(scores, is_spam, 0.001)
    result = {
        "positive": str(positive),
        "spam": spams,
        "ham": hams,
        "hm_percent": 100 * hm_errors / hams if hams else None,
        "sm_percent": 100 * sm_errors / spams if spams else None,
        "lam_percent": None,
        "lam_continuity_corrected": None,
        "one_minus_roca_percent": 100 * (1 - auc) if auc is not None else None,
        "sm_at_hm_0_1_percent": 100 * at_hm if at_hm is not None else None,
    }
    if hams and spams:
        result["lam_percent"], result["lam_continuity_corrected"] = _lam(hm_errors, hams, sm_errors, spams)
    return result


def evaluate(recorder: EvaluationRecorder, positive=None, binary: bool = True) -> dict:
    """All measures of a recorded replay as a JSON-ready dict (labels as strings, None where a
    measure is undefined). See the module docstring for the exact definitions.

    Keys: events, accuracy, per_class {label: precision, recall, f1, support}, macro_f1, mcc,
    log_loss, roc_auc, positive (the resolved positive label itself), roc_auc_kind,
    confusion_matrix {true: {predicted: count}} (zero cells left out, "None" for events
    predicted before any class), and with exactly two classes trec. `positive` names the
    positive class; with two classes it is required unless obvious (see `resolve_positive`);
    with more it makes roc_auc that class's one-vs-rest AUC instead of the macro average.
    `binary=False` measures two classes as any number (macro ROC AUC, no trec).
    """
    labels = recorder.sorted_labels()
    positive = resolve_positive(labels, positive, binary)
    n = len(recorder)
    confusion = _confusion(recorder)
    k = len(recorder.labels)
    per_class = {}
    for label in labels:
        i = recorder._index[label]
        actual = int(confusion[i].sum())
        precision, recall, f1 = _f1(int(confusion[i, i]), int(confusion[:k, i].sum()), actual)
        per_class[str(label)] = {"precision": precision, "recall": recall, "f1": f1, "support": actual}
    supported = [c["f1"] for c in per_class.values() if c["support"]]
    p_true = recorder.p_true
    clipped = np.where(p_true > _MIN_PROBABILITY, p_true, _MIN_PROBABILITY)  # NaN -> 1e-15

    if positive is not None:
        spam = recorder._index[positive]
        auc = roc_auc(recorder.scores(positive), recorder.true_indices == spam)
    else:
        aucs = []
        for label in labels:
            i = recorder._index[label]
            value = roc_auc(recorder.scores(label), recorder.true_indices == i)
            if value is not None:
                aucs.append(value)
        auc = sum(aucs) / len(aucs) if aucs else None

    matrix: dict = {}
    for label in labels:
        row = confusion[recorder._index[label]]
        cells = {str(p): int(row[recorder._index[p]]) for p in labels if row[recorder._index[p]]}
        if row[k]:
            cells["None"] = int(row[k])
        if cells:
            matrix[str(label)] = cells

    report = {
        "events": n,
        "accuracy": float(np.trace(confusion[:, :k]) / n) if n else 0.0,
        "per_class": per_class,
        "macro_f1": sum(supported) / len(supported) if supported else 0.0,
        "mcc": _mcc(confusion),
        "log_loss": float(np.mean(-np.log(clipped))) if n else 0.0,
        "roc_auc": auc,
        "positive": positive,  # the label itself (None with more classes), to pass on to the plots
        "roc_auc_kind": ("binary, positive " + repr(positive)) if positive is not None else "macro one-vs-rest",
        "confusion_matrix": matrix,
    }
    if len(labels) == 2 and positive is not None:
        report["trec"] = _trec(recorder, positive)
    return report


# ---------------------------------------------------------------------------------------------
# Curves and per-event output


BY_KEY_LIMIT = 100  # keys listed in a report (the most frequent); a million users make no report


def by_key(recorder: EvaluationRecorder, keys: list, positive=None, limit: int = BY_KEY_LIMIT) -> dict | None:
    """Accuracy (and, with a positive class, 1-ROCA%) of the scored events of each key, for the
    `limit` keys with the most scored events (ties by key), plus how many keys there were; None
    when no event had a key. `keys` runs parallel to the recorder's events (None: no key)."""
    if len(keys) != len(recorder) or all(key is None for key in keys):
        return None
    counts: dict = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    listed = sorted(counts, key=lambda key: (-counts[key], key is None, str(key)))[:limit]
    key_array = np.array(["" if key is None else key for key in keys], dtype=object)
    correct = recorder.true_indices == recorder.predicted_indices
    scores = None
    if positive is not None and positive in recorder.labels:
        scores = recorder.log_odds(positive)
        spam = recorder.true_indices == recorder._index[positive]
    rows = {}
    for key in listed:
        mask = key_array == ("" if key is None else key)
        row = {"events": int(mask.sum()), "accuracy": float(correct[mask].mean())}
        if scores is not None:
            auc = roc_auc(scores[mask], spam[mask])
            row["one_minus_roca_percent"] = None if auc is None else 100 * (1 - auc)
        rows["(no key)" if key is None else str(key)] = row
    return {"keys": len(counts), "listed": rows}


def rolling_series(recorder: EvaluationRecorder, window: int = 500, positive=None,
                   max_points: int = 2000, binary: bool = True) -> dict:
    """Accuracy and F1 over the last `window` labeled events (fewer at the start), at up to
    `max_points` evenly spaced events. F1 is the positive class's for two classes (see
    `resolve_positive`), else the macro F1 over the classes with support in the window.

    Returns {"index": 1-based event number, "accuracy", "f1", "f1_label", "window"}.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    n = len(recorder)
    labels = recorder.sorted_labels()
    positive = resolve_positive(labels, positive, binary)
    index = np.unique(np.linspace(1, n, min(n, max_points)).round().astype(np.int64)) if n else np.zeros(0, np.int64)
    start = np.maximum(index - window, 0)
    size = index - start

    def windowed(mask: np.ndarray) -> np.ndarray:
        cumulative = np.r_[0, np.cumsum(mask, dtype=np.int64)]
        return cumulative[index] - cumulative[start]

    true, predicted = recorder.true_indices, recorder.predicted_indices
    accuracy = windowed(true == predicted) / np.maximum(size, 1)

    def class_f1(i: int) -> tuple[np.ndarray, np.ndarray]:
        tp = windowed((true == i) & (predicted == i))
        called = windowed(predicted == i)
        actual = windowed(true == i)
        precision = np.divide(tp, called, out=np.zeros(len(tp)), where=called > 0)
        recall = np.divide(tp, actual, out=np.zeros(len(tp)), where=actual > 0)
        total = precision + recall
        f1 = np.divide(2 * precision * recall, total, out=np.zeros(len(tp)), where=total > 0)
        return f1, actual

    if positive is not None:
        f1, _ = class_f1(recorder._index[positive])
        f1_label = f"F1 ({positive})"
    else:
        f1_sum = np.zeros(len(index))
        supported = np.zeros(len(index))
        for label in labels:
            f1, actual = class_f1(recorder._index[label])
            f1_sum += f1
            supported += actual > 0
        f1 = np.divide(f1_sum, supported, out=np.zeros(len(index)), where=supported > 0)
        f1_label = "macro F1"
    return {"index": index, "accuracy": accuracy, "f1": f1, "f1_label": f1_label, "window": window}


def write_scores_csv(recorder: EvaluationRecorder, path, ids=None, positive=None) -> None:
    """One row per recorded event: position (0-based, among labeled events), id (if `ids` is
    given, one per event), true, predicted (empty for None), correct (0/1), then p_<label> per
    class in `sorted_labels()` order, written with repr precision, then, when `positive` is
    given, score: the log-odds of the positive class on the recorder's score_scale
    (`EvaluationRecorder.scores`; "inf" or "-inf" where one side had no class learned), which
    ranks events P ties at 0.0 or 1.0."""
    labels = recorder.sorted_labels()
    if ids is not None and len(ids) != len(recorder):
        raise ValueError(f"{len(ids)} ids for {len(recorder)} recorded events")
    columns = [recorder._index[label] for label in labels]
    header = ["position"] + (["id"] if ids is not None else []) + ["true", "predicted", "correct"]
    header += [f"p_{label}" for label in labels]
    scores = None if positive is None else recorder.scores(positive).tolist()
    if scores is not None:
        header.append("score")
    true, predicted, probabilities = recorder.true_indices, recorder.predicted_indices, recorder.probabilities
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in range(len(recorder)):
            t, p = int(true[row]), int(predicted[row])
            cells = [row] + ([ids[row]] if ids is not None else [])
            cells += [recorder.labels[t], "" if p == _NONE else recorder.labels[p], int(t == p)]
            cells += [repr(float(probabilities[row, c])) for c in columns]
            if scores is not None:
                cells.append(repr(scores[row]))
            writer.writerow(cells)
