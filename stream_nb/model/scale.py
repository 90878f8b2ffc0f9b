"""The scale of the score an operator thresholds and replay ranks on: the log-odds as they are,
or per square root of the event's distinct features ([evaluation] score_scale).

    "none":           score(x) = log P(pos | x) - log P(not pos | x)
    "sqrt_features":  z(x)     = score(x) / sqrt(max(n(x), 1))     (training.log_odds_per_sqrt_feature)

n(x) is the event's number of distinct features as training.event_sizes counts them, the n the
thick threshold of margin_scale "sqrt_features" is on: read off the featurised batch (a
SparseBatch's lengths when its names are distinct), never by featurising again. Both scales keep
the order of the log-odds within an event of a given size; across events of different sizes z
compares long and short messages on one footing (benchmarks/mail_quality.py: it ranks better
on SMS, Enron-Spam and raw mail). An infinite score stays infinite, None (no class learned yet)
stays None.
"""

from __future__ import annotations

import numpy as np

from stream_nb.model.training import event_sizes, log_odds_per_sqrt_feature

SCORE_SCALES = ("none", "sqrt_features")


def check_score_scale(score_scale: str) -> str:
    """`score_scale` itself, or ValueError naming the accepted ones."""
    if score_scale not in SCORE_SCALES:
        raise ValueError(f"score scale must be one of {', '.join(SCORE_SCALES)}, got {score_scale!r}")
    return score_scale


def scaled_scores(scores: list, X, score_scale: str) -> list:
    """The scores of the events of the featurised batch `X` on `score_scale` (`scores` itself
    for "none": nothing is computed). None stays None."""
    if check_score_scale(score_scale) == "none":
        return scores
    return [None if score is None else log_odds_per_sqrt_feature(score, n)
            for score, n in zip(scores, event_sizes(X), strict=True)]


def scaled_score_array(scores: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """`log_odds_per_sqrt_feature` for arrays of scores and event sizes: score / sqrt(max(n, 1)),
    the same two IEEE operations (a correctly rounded square root, then a division), so the
    same floats as the per-event function."""
    return scores / np.sqrt(np.maximum(np.asarray(sizes, dtype=np.int64), 1).astype(np.float64))
