"""The ham/spam/unsure band: a three-way decision on P(positive | x), as SpamBayes and
Bogofilter make it, or on the score (the log-odds, which does not saturate); and which class is
the positive one when none is named."""

from __future__ import annotations

# Two classes whose positive one is obvious; {0, 1} == {False, True}, so 1 counts as True.
OBVIOUS_POSITIVES = (({"spam", "ham"}, "spam"), ({True, False}, True))


def obvious_positive(labels):
    """The positive class of exactly two labels when it is obvious ("spam" of {"spam", "ham"},
    True/1 of {True, False} / {0, 1}), as the label itself; None otherwise."""
    labels = list(labels)
    if len(labels) != 2:
        return None
    for pair, obvious in OBVIOUS_POSITIVES:
        if set(labels) == pair:
            return next(label for label in labels if label == obvious)
    return None


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
        return _negative(probabilities, positive)
    return "unsure"


def score_verdict(probabilities: dict, score: float | None, positive, band: tuple[float, float]) -> str | None:
    """`verdict` on the score, score = log P(pos | x) - log P(not pos | x) in nats: positive when
    score >= high, negative when score <= low, "unsure" between. None when the model knows no
    class yet (score None).

        low, high = band;  low <= high, any real numbers (a P band [p, 1 - p] is the score band
        [-ln((1 - p) / p), ln((1 - p) / p)]: [0.1, 0.9] is [-ln 9, ln 9])
    """
    if not probabilities or score is None:
        return None
    low, high = band
    if score >= high:
        return str(positive)
    if score <= low:
        return _negative(probabilities, positive)
    return "unsure"


def _negative(probabilities: dict, positive) -> str:
    others = [label for label in probabilities if label != positive]
    return str(others[0]) if len(others) == 1 else "not " + str(positive)


def band_verdict(probabilities: dict, score: float | None, positive, band=None, score_band=None) -> str | None:
    """The verdict of the band that is set: `score_verdict` with a score band, else `verdict`
    with a P band (a configuration sets at most one); None with neither."""
    if score_band is not None:
        return score_verdict(probabilities, score, positive, score_band)
    if band is not None:
        return verdict(probabilities, positive, band)
    return None
