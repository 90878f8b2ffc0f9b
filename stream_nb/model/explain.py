"""Why a prediction came out as it did: the features that pushed it hardest."""

from __future__ import annotations

import math

import numpy as np

from stream_nb.model.base import SparseBatch, ViewBatch
from stream_nb.model.counting import BernoulliNB, CountingNB, native_kernel
from stream_nb.model.experts import CombinedPosterior, Experts
from stream_nb.model.training import event_sizes


def expert_clues(model: Experts, views: list[dict], top: int = 5, proba: dict | None = None) -> list[tuple[str, float]]:
    """The clues of an `Experts` prediction, in nats of the combined score: first each expert's
    share ("@<view>": w_v (l_v(c) - l_v(k)), and "@(bias)"), then the `top` features with the
    largest evidence across the views, each expert's evidence (`strongest_clues`) times
    `evidence_scale`, named "<view>:<feature>" outside the first view."""
    if not isinstance(proba, CombinedPosterior):
        proba = model.predict_proba_one(views)
    ranked = sorted(proba, key=proba.get, reverse=True)
    if len(ranked) < 2:
        return []
    best, runner_up = ranked[0], ranked[1]
    by_view = [strongest_clues(expert, x, top, {best: 1.0, runner_up: 0.0}) for expert, x in zip(model.models, views)]
    return _expert_clue_list(model, proba, [len(x) for x in views], by_view, top)


def _expert_clue_list(model: Experts, proba: CombinedPosterior, sizes: list, by_view: list, top: int) -> list:
    """The shares of `proba`, then the `top` of each view's clues (`by_view`, in its expert's
    nats) in combined nats, named "<view>:<feature>" outside the first view."""
    ranked = sorted(proba, key=proba.get, reverse=True)
    shares = [("@" + name, _round6(part)) for name, part in proba.shares(model.names, ranked[0], ranked[1])]
    clues = []
    for v, (name, n, found) in enumerate(zip(model.names, sizes, by_view)):
        scale = model.evidence_scale(v, n, proba.weights)
        prefix = "" if v == 0 else name + ":"
        clues.extend((prefix + feature, evidence * scale) for feature, evidence in found or ())
    clues.sort(key=lambda clue: clue[1], reverse=True)
    return shares + [(name, _round6(evidence)) for name, evidence in clues[:top]]


def expert_clues_many(model: Experts, X: ViewBatch, probabilities: list, top: int = 5) -> list:
    """`expert_clues` of every event of a ViewBatch, each view's clues by its expert's batch path
    (`strongest_clues_many`, in C where it can), ranked by the combined prediction; None where
    probabilities[i] is empty or None."""
    ranked = [None if not p else sorted(p, key=p.get, reverse=True) for p in probabilities]
    if any(p and not isinstance(p, CombinedPosterior) for p in probabilities):
        dicts = X.to_dicts()
        return [expert_clues(model, dicts[i], top, p) if p else None for i, p in enumerate(probabilities)]
    pairs = [None if r is None or len(r) < 2 else {r[0]: 1.0, r[1]: 0.0} for r in ranked]
    by_view = []
    for expert, view in zip(model.models, X.views):
        if isinstance(view, SparseBatch):
            by_view.append(strongest_clues_many(expert, view, pairs, top))
        else:
            by_view.append([strongest_clues(expert, x, top, pair) if pair else None for x, pair in zip(view, pairs)])
    sizes = [event_sizes(view) for view in X.views]
    results: list = []
    for i, proba in enumerate(probabilities):
        if not proba:
            results.append(None)
        elif pairs[i] is None:
            results.append([])
        else:
            results.append(_expert_clue_list(model, proba, [s[i] for s in sizes], [found[i] for found in by_view], top))
    return results


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
    if isinstance(model, Experts):
        return expert_clues(model, x, top, proba)
    ranked = _ranked_classes(proba)
    if ranked is None:
        jll = model.joint_log_likelihood(x)
        ranked = sorted(jll, key=jll.get, reverse=True)
    if len(ranked) < 2:
        return []
    if not isinstance(model, CountingNB):
        return _clues_of_any_model(model, x, ranked[0], ranked[1], top)
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
    # The rows of x's learned features as Python floats in one step: the same float64 sums and
    # logs as numpy scalars would give, without a numpy call per feature (the cost of a clue).
    in_vocabulary = columns >= 0
    rows = counts[columns[in_vocabulary]]
    learned = rows.any(axis=1).tolist()
    pairs = rows[:, [c, k]].tolist()
    known = [name for name, present in zip(names, in_vocabulary.tolist()) if present]
    bernoulli = isinstance(model, BernoulliNB)
    denominator_c, denominator_k = float(denominators[0]), float(denominators[1])
    degenerate = min(denominator_c, denominator_k) <= 0
    clues = []
    for name, (count_c, count_k), seen in zip(known, pairs, learned):
        if not seen:
            continue
        weight = 1.0 if bernoulli else float(x[name])
        numerator_c, numerator_k = count_c + alpha, count_k + alpha
        if numerator_c <= 0 or numerator_k <= 0 or degenerate:
            evidence = math.inf if numerator_k <= 0 < numerator_c else -math.inf if numerator_c <= 0 else 0.0
        else:
            evidence = weight * (math.log(numerator_c / denominator_c) - math.log(numerator_k / denominator_k))
        clues.append((name, evidence))
    clues.sort(key=lambda clue: clue[1], reverse=True)
    return [(name, _round6(evidence)) for name, evidence in clues[:top]]


def _clues_of_any_model(model, x: dict, best, runner_up, top: int) -> list[tuple[str, float]]:
    """Clues of a categorical or Gaussian model: naive Bayes scores add up feature by feature, so
    feature f's evidence is its own term's difference,

        [log P(x_f | c) - log P(x_f | k)] = jll_{f}(c) - jll_{f}(k) - [log P(c) - log P(k)],

    with jll_{f} the joint log likelihood of x restricted to f (a feature the model drops, never
    learned, carries none)."""
    prior = model.joint_log_likelihood({})
    base = prior[best] - prior[runner_up]
    clues = []
    for name, value in x.items():
        jll = model.joint_log_likelihood({name: value})
        evidence = jll[best] - jll[runner_up] - base
        if evidence != 0.0 and not math.isnan(evidence):
            clues.append((name, evidence))
    clues.sort(key=lambda clue: clue[1], reverse=True)
    return [(name, _round6(evidence)) for name, evidence in clues[:top]]


def clue_text(name: str, evidence: float | str) -> str:
    """A clue for people: 'cash (+2.24)' (nats for the predicted class), or, for the infinite
    evidence of alpha = 0 (also as the JSON strings "Infinity" / "-Infinity"), what it means."""
    value = float(evidence)  # float("Infinity") is inf
    if math.isinf(value):
        return f"{name} ({'never seen in the runner-up class' if value > 0 else 'never seen in the predicted class'})"
    return f"{name} ({value:+.2f})"


def _round6(value: float) -> float:
    """np.round(value, 6), computed as numpy does (times 1e6, round half to even, divided by
    1e6) without a numpy call."""
    if not math.isfinite(value):
        return value
    return math.copysign(round(value * 1e6) / 1e6, value)  # numpy keeps the sign of a zero: -0.0


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


def strongest_clues_many(model: CountingNB, X: SparseBatch, probabilities: list, top: int = 5) -> list:
    """`strongest_clues(model, x_i, top, probabilities[i])` for every event of a batch of
    distinct names with no values (what a deduplicating featuriser gives), None where
    probabilities[i] is empty or None: the same lists, computed for the whole batch at once.

    One vocabulary look-up and one gather of counts for the batch; the ratios
    (N_fc + alpha) / D_c in float64 arrays (each operation rounded as Python rounds it), their
    logs by math.log (as the single-event function takes them), the order by evidence, largest
    first, ties in the event's own order (a stable sort). Events whose classes P(c | x) cannot
    rank, and every event when a denominator or alpha is not positive, go through
    strongest_clues itself.
    """
    n = len(X)
    results: list = [None] * n
    if not (X.distinct and X.values is None):
        dicts = X.to_dicts()
        return [strongest_clues(model, dicts[i], top, proba) if proba else None for i, proba in enumerate(probabilities)]
    alpha = model.alpha
    if isinstance(model, BernoulliNB):
        denominators = model._class_counts + 2 * alpha
    else:
        denominators = model._class_totals + alpha * model._features_seen
    index = model._class_index
    positive = (denominators > 0).tolist()
    best, runner_up = [-1] * n, [-1] * n
    one_by_one = []
    exact = alpha > 0
    for i, proba in enumerate(probabilities):
        if not proba:
            continue
        ranked = _ranked_classes(proba)
        if ranked is None or not exact:
            one_by_one.append(i)
        elif len(ranked) < 2:
            results[i] = []
        else:
            c, k = index[ranked[0]], index[ranked[1]]
            if positive[c] and positive[k]:
                best[i], runner_up[i] = c, k
            else:
                one_by_one.append(i)
    best, runner_up = np.array(best, dtype=np.int64), np.array(runner_up, dtype=np.int64)
    if one_by_one:
        names, bounds = X.names, np.concatenate(([0], np.cumsum(X.lengths))).tolist()
        for i in one_by_one:
            x = dict.fromkeys(names[bounds[i] : bounds[i + 1]], 1.0)
            results[i] = strongest_clues(model, x, top, probabilities[i])
    columns = X.columns_in(model._vocabulary)  # as the prediction looked them up, unless learning added names since
    kernel = native_kernel()
    if kernel is not None and model._feature_counts.flags.c_contiguous and (best >= 0).any():  # the same lists, in C
        bounds = np.concatenate(([0], np.cumsum(X.lengths, dtype=np.int64)))
        # an exact vocabulary names a column itself (a batch's names may be columns only: ColumnNames)
        by_column = not model._vocabulary.hashed
        made = kernel.clues(model._vocabulary.by_column() if by_column else list(X.names), bounds,
                            np.ascontiguousarray(columns, dtype=np.int64), best, runner_up,
                            model._feature_counts, np.ascontiguousarray(denominators, dtype=np.float64),
                            float(alpha), top, by_column)
        for i in np.flatnonzero(best >= 0).tolist():
            results[i] = made[i]
        return results
    event = np.repeat(np.arange(n, dtype=np.int64), X.lengths)
    occurrence = np.flatnonzero((columns >= 0) & (best[event] >= 0))
    counts = model._feature_counts[columns[occurrence]]
    learned = counts.any(axis=1)
    occurrence, counts = occurrence[learned], counts[learned]
    owner = event[occurrence]
    c, k = best[owner], runner_up[owner]
    log = math.log
    # log((N_fc + alpha) / D_c) depends on the feature and the class only: taken once per
    # distinct feature of the batch and class (the same floats in, so the same logs out)
    # where that is fewer logs than two per occurrence, as with spam's two classes.
    distinct, at = np.unique(columns[occurrence], return_inverse=True)
    if len(distinct) * len(denominators) < 2 * len(occurrence):
        ratios = (model._feature_counts[distinct] + alpha) / denominators
        table = np.array(list(map(log, ratios.ravel().tolist()))).reshape(ratios.shape)
        evidence = table[at, c] - table[at, k]
    else:
        rows = np.arange(len(occurrence))
        log_c = np.array(list(map(log, ((counts[rows, c] + alpha) / denominators[c]).tolist())))
        log_k = np.array(list(map(log, ((counts[rows, k] + alpha) / denominators[k]).tolist())))
        evidence = log_c - log_k
    order = np.lexsort((occurrence, -evidence, owner))
    owner, occurrence, evidence = owner[order], occurrence[order], evidence[order]
    chosen = np.arange(len(owner)) - np.searchsorted(owner, owner) < top  # the first `top` of each event
    owner = owner[chosen]
    # np.round(., 6): what _round6 computes one value at a time
    clues = list(zip(map(X.names.__getitem__, occurrence[chosen].tolist()), np.round(evidence[chosen], 6).tolist()))
    starts = np.searchsorted(owner, np.arange(n + 1)).tolist()
    for i in np.flatnonzero(best >= 0).tolist():
        results[i] = clues[starts[i] : starts[i + 1]]
    return results
