"""Why a prediction came out as it did: the features that pushed it hardest."""

from __future__ import annotations

import math

import numpy as np

from stream_nb.model.counting import BernoulliNB, CountingNB


def strongest_clues(model: CountingNB, x: dict, top: int = 5, proba: dict | None = None) -> list[tuple[str, float]]:
    """The `top` features of x with the largest evidence for the predicted class.

    For the predicted class c and the runner-up k, a feature's evidence is its share of the
    difference of their joint log likelihoods:

        multinomial / complement:  x_f [log P(f | c) - log P(f | k)]
        Bernoulli (present f):     log p_fc - log p_fk

    with the smoothed estimates of the model (alpha). Features never learned carry none.
    Returns [(feature, evidence in nats)], largest first; [] with fewer than two classes.
    `proba`, x's P(c | x) from the same state, ranks the classes without scoring x again (the
    joint log likelihoods rank them when two probabilities tie for second place).
    """
    ranked = _ranked_classes(proba)
    if ranked is None:
        jll = model.joint_log_likelihood(x)
        ranked = sorted(jll, key=jll.get, reverse=True)
    if len(ranked) < 2:
        return []
    c, k = model._class_index[ranked[0]], model._class_index[ranked[1]]
    names = [name for name in x if x[name]]
    columns = model._vocabulary.lookup(names)
    counts = model._feature_counts
    alpha = model.alpha
    if isinstance(model, BernoulliNB):
        docs = model._class_counts
        denominators = (docs[c] + 2 * alpha, docs[k] + 2 * alpha)
    else:
        vocabulary = model._features_seen
        totals = model._class_totals
        denominators = (totals[c] + alpha * vocabulary, totals[k] + alpha * vocabulary)
    clues = []
    for name, column in zip(names, columns.tolist()):
        if column < 0 or not counts[column].any():
            continue
        weight = 1.0 if isinstance(model, BernoulliNB) else float(x[name])
        numerator_c, numerator_k = counts[column, c] + alpha, counts[column, k] + alpha
        if numerator_c <= 0 or numerator_k <= 0 or min(denominators) <= 0:
            evidence = math.inf if numerator_k <= 0 < numerator_c else -math.inf if numerator_c <= 0 else 0.0
        else:
            evidence = weight * (math.log(numerator_c / denominators[0]) - math.log(numerator_k / denominators[1]))
        clues.append((name, evidence))
    clues.sort(key=lambda clue: clue[1], reverse=True)
    return [(name, float(np.round(evidence, 6))) for name, evidence in clues[:top]]


def _ranked_classes(proba: dict | None) -> list | None:
    """Classes by P(c | x), largest first, or None when P cannot tell the first two from the
    rest (equal probabilities may hide different log likelihoods: 0.0 and 0.0)."""
    if proba is None:
        return None
    ranked = sorted(proba, key=proba.get, reverse=True)
    values = [proba[c] for c in ranked]
    if len(values) >= 2 and (values[0] == values[1] or (len(values) >= 3 and values[1] == values[2])):
        return None
    return ranked
