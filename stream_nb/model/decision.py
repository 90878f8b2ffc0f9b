"""The ham/spam/unsure band: a three-way decision on P(positive | x), as SpamBayes and
Bogofilter make it."""

from __future__ import annotations


def verdict(probabilities: dict, positive, band: tuple[float, float]) -> str | None:
    """"positive" (e.g. spam) when P(positive | x) >= high, "negative" (ham) when <= low, and
    "unsure" between; the positive label itself and the other class's label are returned as
    their own strings. None when the model knows no class yet.

        low, high = band;  0 <= low <= high <= 1
    """
    if not probabilities:
        return None
    low, high = band
    p = probabilities.get(positive, 0.0)
    if p >= high:
        return str(positive)
    if p <= low:
        others = [label for label in probabilities if label != positive]
        return str(others[0]) if len(others) == 1 else "not " + str(positive)
    return "unsure"
