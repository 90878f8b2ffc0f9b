"""Prequential metrics that work with any label type (strings included)."""

from __future__ import annotations

import math
from collections import Counter


class PrequentialMetrics:
    """Accuracy, confusion matrix, per-class precision/recall/F1, macro F1 and log loss.

    Updated with (true, predicted, probabilities) for every labeled event that was predicted;
    events predicted before any class existed (None) count as errors of an empty prediction.
    Log loss uses P(true class), clipped at 1e-15 so a confident miss is large but finite.
    """

    def __init__(self) -> None:
        self.confusion: Counter = Counter()  # (true, predicted) -> count
        self.events = 0
        self.correct = 0
        self.log_loss_sum = 0.0

    def update(self, true, predicted, probabilities: dict) -> None:
        self.events += 1
        self.correct += predicted == true
        self.confusion[(true, predicted)] += 1
        p_true = probabilities.get(true, 0.0)
        self.log_loss_sum -= math.log(p_true if p_true > 1e-15 else 1e-15)  # NaN too: clipped

    @property
    def accuracy(self) -> float:
        return self.correct / self.events if self.events else 0.0

    @property
    def log_loss(self) -> float:
        return self.log_loss_sum / self.events if self.events else 0.0

    def labels(self) -> list:
        seen = {true for true, _ in self.confusion} | {p for _, p in self.confusion if p is not None}
        return sorted(seen, key=lambda label: (isinstance(label, str), str(label)))

    def per_class(self) -> dict:
        """{label: {"precision", "recall", "f1", "support"}}; 0 where a ratio is 0/0."""
        result = {}
        for label in self.labels():
            true_positive = self.confusion[(label, label)]
            predicted = sum(count for (_, p), count in self.confusion.items() if p == label)
            actual = sum(count for (t, _), count in self.confusion.items() if t == label)
            precision = true_positive / predicted if predicted else 0.0
            recall = true_positive / actual if actual else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            result[label] = {"precision": precision, "recall": recall, "f1": f1, "support": actual}
        return result

    def macro_f1(self) -> float:
        scores = [c["f1"] for c in self.per_class().values() if c["support"]]
        return sum(scores) / len(scores) if scores else 0.0

    def confusion_matrix(self) -> dict:
        """{true: {predicted: count}} with predicted None for events scored before any class."""
        matrix: dict = {}
        for (true, predicted), count in sorted(self.confusion.items(), key=lambda item: str(item[0])):
            matrix.setdefault(str(true), {})[str(predicted)] = count
        return matrix

    def to_dict(self) -> dict:
        return {
            "events": self.events,
            "accuracy": self.accuracy,
            "macro_f1": self.macro_f1(),
            "log_loss": self.log_loss,
            "per_class": {str(label): values for label, values in self.per_class().items()},
            "confusion_matrix": self.confusion_matrix(),
        }
