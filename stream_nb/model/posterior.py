"""Posteriors that keep their log scores: P(c | x) as River gives it, plus the log-odds and log
posteriors, which do not saturate where P rounds to 0.0 or 1.0 in float64.

Every prediction of a variant is a softmax of per-class log scores

    s_c = log P(c) + log P(x | c)        (the joint log likelihood the kernel computes)

over the classes learned so far (the active ones). From those, without leaving log space:

    log P(c | x)  = s_c - logsumexp_k s_k
    score(x)      = log P(pos | x) - log P(not pos | x) = s_pos - logsumexp_{c != pos} s_c

For two classes the score is exactly s_pos - s_neg, a difference of two finite numbers: it keeps
ranking events whose P(pos) is 1.0 (or 0.0) to the last bit. `Posterior` is the dict of P(c | x)
every prediction path returns, with the row of s_c it was computed from, so probabilities and
scores come from one kernel run.

Edge cases, decided as `normalise_log_scores` decides the probabilities, so score and P agree:
- no class learned yet: P is {} and the score None;
- the positive class not learned yet (P(pos) = 0): -inf; only the positive class learned
  (P(pos) = 1): +inf;
- alpha = 0, every active s_c = -inf (a "hopeless" event): the log priors stand in for s_c, as
  they do for P; one class at -inf and another finite: +-inf, the evidence excludes a class;
- some s_c = +inf (complement NB with alpha = 0): the classes at +inf share the mass, the others
  have none; the positive at +inf with k others there scores -log k (0 for a two-way tie).
No NaN comes out of a row without NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_INF = math.inf


def logsumexp(values: Sequence[float]) -> float:
    """log sum_k exp(v_k) = m + log sum_k exp(v_k - m), m = max_k v_k; -inf for no value or all
    -inf, +inf when any value is +inf."""
    if not values:
        return -_INF
    if len(values) == 1:
        return values[0]
    best = max(values)
    if math.isinf(best):
        return best
    return best + math.log(math.fsum(math.exp(v - best) for v in values))


def log_odds_of(log_scores: Sequence[float], positive: int | None) -> float:
    """s_pos - logsumexp_{c != pos} s_c for the row `log_scores` (the active classes' scores),
    `positive` the positive class's place in it (None: not among them, -inf). See the module
    docstring for the infinite cases."""
    if positive is None:
        return -_INF
    own = log_scores[positive]
    others = [s for i, s in enumerate(log_scores) if i != positive]
    if own == _INF:  # shared by the classes at +inf: odds 1 : k
        tied = others.count(_INF)
        return -math.log(tied) if tied else _INF
    rest = others[0] if len(others) == 1 else logsumexp(others)
    if rest == -_INF:  # no other class, or every other one excluded by the evidence
        return 0.0 if own == -_INF else _INF
    if rest == _INF or own == -_INF:
        return -_INF
    return own - rest


def log_posteriors_of(log_scores: Sequence[float]) -> list[float]:
    """log P(c | x) = s_c - logsumexp_k s_k for each class of the row (+inf scores share the mass:
    -log k for each of the k classes at +inf, -inf for the others)."""
    if _INF in log_scores:
        k = list(log_scores).count(_INF)
        return [-math.log(k) if s == _INF else -_INF for s in log_scores]
    total = logsumexp(log_scores)
    if total == -_INF:
        return [-_INF] * len(log_scores)
    return [s - total for s in log_scores]


class Posterior(dict):
    """P(c | x) by class (a dict, River's `predict_proba_one`), holding `log_scores`: the s_c of
    its classes in the dict's order (the log priors for a hopeless event, see the module
    docstring). Equal to the plain dict of its probabilities."""

    __slots__ = ("log_scores",)

    def log_odds(self, positive) -> float | None:
        """score = s_pos - logsumexp_{c != pos} s_c, in nats; None before any class is learned."""
        scores = self.log_scores
        if len(scores) == 2:  # the common case, without the general machinery (~0.2 us, not ~0.9)
            first, second = self
            if first == positive:
                own, other = scores
            elif second == positive:
                other, own = scores
            else:
                return -_INF
            difference = own - other
            if difference - difference == 0.0:  # finite, so both are
                return difference
            return log_odds_of((own, other), 0)
        if not self:
            return None
        if positive not in self:  # a dict look-up, as P(pos) = probabilities.get(pos, 0.0)
            return log_odds_of(scores, None)
        place = next(i for i, label in enumerate(self) if label == positive)
        return log_odds_of(scores, place)

    def log_proba(self) -> dict:
        """log P(c | x) by class."""
        return dict(zip(self, log_posteriors_of(self.log_scores)))


def positive_score(probabilities: dict | None, positive) -> float | None:
    """The log-odds of `positive` for any prediction: a `Posterior`'s own, or, for a plain dict of
    probabilities (made elsewhere), the same formula on log P(c | x) (log-odds up to float
    rounding, saturating where P does). None for no prediction, no class, or no positive class."""
    if type(probabilities) is Posterior:
        return None if positive is None else probabilities.log_odds(positive)
    if not probabilities or positive is None:
        return None
    if isinstance(probabilities, Posterior):
        return probabilities.log_odds(positive)
    row = Posterior(probabilities)
    row.log_scores = [math.log(p) if p > 0 else -_INF for p in probabilities.values()]
    return row.log_odds(positive)
