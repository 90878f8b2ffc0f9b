"""Training regimes: learn every labeled event, or only those the model gets wrong or nearly so.

Train-on-error and thick-threshold training come from the statistical spam filters (CRM114,
OSBF, DSPAM): a filter that already classifies a message confidently learns little from it, and
skipping it keeps frequent, easy messages from swamping the counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stream_nb.model.base import SparseBatch, ViewBatch

TRAINING_MODES = ("all", "on_error", "thick_threshold")
MARGIN_SCALES = ("none", "sqrt_features")


def log_odds_per_sqrt_feature(log_odds: float, n_features: int) -> float:
    """The log-odds of an event divided by the square root of its number of distinct features:

        z(x) = (log P(c|x) - log P(c'|x)) / sqrt(max(n(x), 1))

    Naive Bayes adds one log ratio per feature as if the features were independent; features of
    one text are not (bigrams repeat their words, a subject repeats the body), so its log-odds
    grow about linearly with the number of features while the evidence grows more slowly. Like
    a z statistic of the mean log ratio, z(x) compares short and long messages on one scale:
    thick-threshold training on it learns long messages the model is merely loud about, and, as
    a score, it ranks better (benchmarks/mail_quality.py: 1-ROCA% halved on SMS and Enron-Spam,
    0.060 -> 0.034 on raw SpamAssassin mail)."""
    return log_odds / math.sqrt(max(n_features, 1))


def margin_per_sqrt_feature(margin: float, n_features: int) -> float:
    """The thick threshold of an event under margin_scale "sqrt_features": its log-odds must reach
    margin * sqrt(max(n, 1)), i.e. log_odds_per_sqrt_feature(log_odds, n) >= margin (compared
    in this form, so every path makes the same float operation)."""
    return margin * math.sqrt(max(n_features, 1))


def event_sizes(X) -> list[int]:
    """The number of distinct features of each event: len(x) of a dict, the names of a
    SparseBatch event (deduplicated unless the batch says they are distinct). A ViewBatch's
    events count 1 each: an `Experts` model's combined score is on its views' scale already
    (each view's log-odds per sqrt of its own features), so scaling leaves it as it is."""
    if isinstance(X, ViewBatch):
        return [1] * len(X)
    if isinstance(X, SparseBatch):
        if X.distinct:
            return X.lengths.tolist()
        return [len(x) for x in X.to_dicts()]
    return [len(x) for x in X]


def should_learn(joint_log_likelihood: dict, label, mode: str, margin: float, n_features: int | None = None) -> bool:
    """Whether a labeled event is learned, given its joint log likelihoods before learning.

        all:              always
        on_error:         the predicted class (largest log P(c) P(x|c)) is not the label
        thick_threshold:  on error, or  log P(label|x) - max_{c != label} log P(c|x) < margin
                          (with `n_features`, the event's distinct features: the log-odds
                          divided by sqrt(n_features) < margin; see log_odds_per_sqrt_feature)

    The margin is in nats of log-odds (joint log likelihoods differ from log posteriors by the
    same constant, so their difference is the log-odds): naive Bayes posteriors saturate to 1.0
    in floating point, a log-odds margin does not. An event is learned when no class or only its
    own class exists yet, or when the log-odds are undefined (NaN).
    """
    if mode == "all":
        return True
    if label not in joint_log_likelihood:
        return True
    others = [value for cls, value in joint_log_likelihood.items() if cls != label]
    if not others:
        return True
    predicted = max(joint_log_likelihood, key=joint_log_likelihood.get)
    if predicted != label:
        return True
    if mode == "on_error":
        return False
    log_odds = joint_log_likelihood[label] - max(others)
    if n_features is not None:
        margin = margin_per_sqrt_feature(margin, n_features)
    return not (log_odds >= margin) or math.isnan(log_odds)


def learn_decisions(scores: np.ndarray, active: np.ndarray, labels: np.ndarray, mode: str,
                    margin) -> np.ndarray:
    """`should_learn` for every row at once: row i holds the joint log likelihoods of event i
    (`active[i]`: the classes that exist for it) and `labels[i]` its class's column (rows with
    a label < 0 are unlabeled; their flag is False). `margin`: one for all rows, or an array
    of each row's margin.

    The same rule in the same floating-point operations: the predicted class is the first
    largest active score (Python's max over a dict in class order), the log-odds are the label's
    score minus the largest other active score. A row with a non-finite active score (a NaN, or
    infinities, where argmax and max could part from the dict's order) is decided by
    `should_learn` itself.
    """
    n = len(labels)
    labeled = labels >= 0
    if mode == "all":
        return labeled.copy()
    rows = np.arange(n)
    column = np.where(labeled, labels, 0)
    masked = np.where(active, scores, -np.inf)
    own = masked[rows, column]
    others = masked.copy()
    others[rows, column] = -np.inf
    no_label = ~active[rows, column]
    no_other = ~(active & (np.arange(active.shape[1]) != column[:, None])).any(axis=1)
    wrong = masked.argmax(axis=1) != column
    if mode == "on_error":
        learn = no_label | no_other | wrong
    else:
        with np.errstate(invalid="ignore"):
            learn = no_label | no_other | wrong | ~(own - others.max(axis=1) >= margin)
    learn &= labeled
    odd = labeled & ~np.isfinite(np.where(active, scores, 0.0)).all(axis=1)
    for i in np.flatnonzero(odd).tolist():
        joint = {c: float(score) for c, (score, on) in enumerate(zip(scores[i], active[i])) if on}
        learn[i] = should_learn(joint, int(labels[i]), mode, float(np.broadcast_to(margin, n)[i]))
    return learn


@dataclass(frozen=True)
class LearnRule:
    """A training mode and margin as a function of a window's rows: `learn_decisions`. With
    `per_event` (the batch's margins, one per event), rows first.. of the batch take theirs."""

    mode: str
    margin: float
    per_event: np.ndarray | None = None

    def __call__(self, scores: np.ndarray, active: np.ndarray, labels: np.ndarray, first: int = 0) -> np.ndarray:
        margin = self.margin if self.per_event is None else self.per_event[first : first + len(labels)]
        return learn_decisions(scores, active, labels, self.mode, margin)

    def margins(self, n: int) -> np.ndarray:
        """Each of the batch's n events' margin (float64)."""
        return np.full(n, float(self.margin)) if self.per_event is None else self.per_event


def predict_learn(model, X, y, mode: str = "all", margin: float = 0.0,
                  margin_scale: str = "none", *, validated: bool = False) -> tuple[list[dict], list[bool]]:
    """Prequential batch under a training regime: P(c | x) for each event with the state so far,
    and whether each event was learned.

    margin_scale "sqrt_features" (thick_threshold only) compares the log-odds per square root
    of the event's distinct features with the margin: each event's margin is
    margin_per_sqrt_feature(margin, n), on every path.

    mode "all" is `model.predict_learn_many` (every labeled event learned, batch speed). In the
    other modes each decision depends on the prediction just made; they go a window at a time
    where the variant can (`_predict_learn_in_windows`), one event at a time elsewhere. Results
    equal the per-event loop exactly in every mode, and in every mode a batch with a bad event
    raises before anything is learned (`validated`: the caller has checked X and y with
    `model.validate` already, as an Experts model checks every view before any expert learns).
    """
    if mode not in TRAINING_MODES:
        raise ValueError(f"training mode must be one of {', '.join(TRAINING_MODES)}, got {mode!r}")
    if margin_scale not in MARGIN_SCALES:
        raise ValueError(f"margin scale must be one of {', '.join(MARGIN_SCALES)}, got {margin_scale!r}")
    labels = list(y)
    views = getattr(model, "as_view_batch", None)
    if views is not None:  # an Experts model: each view's expert under this regime, then their combination
        return model.predict_learn_views(views(X), labels, mode, margin, margin_scale)
    if mode == "all":
        return model.predict_learn_many(X, labels), [label is not None for label in labels]
    # Learning as it goes: a bad event must refuse the batch before the first learn, as
    # predict_learn_many does, or a caller that retries event by event counts the rest twice.
    if not validated:
        model.validate(X, labels)
    margins = None
    if mode == "thick_threshold" and margin_scale == "sqrt_features":
        margins = np.array([margin_per_sqrt_feature(margin, n) for n in event_sizes(X)], dtype=np.float64)
    parts = model._with_maintenance(X, labels, lambda start, stop: _predict_learn_in_windows(
        model, X[start:stop], labels[start:stop], mode, margin, None if margins is None else margins[start:stop]))
    if len(parts) == 1:
        return parts[0]
    return [p for part in parts for p in part[0]], [flag for part in parts for flag in part[1]]


SMALLEST_WINDOW = 8


class WindowGuess:
    """The first guess of a window (learned, or not, as most recent decisions were) and the
    window's length."""

    WINDOW = 256
    MEMORY = 0.05  # weight of each new decision in the running learn rate

    def __init__(self, rate: float = 0.5) -> None:
        self.rate = rate

    def record(self, decision: bool) -> None:
        self.rate += self.MEMORY * (decision - self.rate)

    def record_many(self, decisions: np.ndarray) -> None:
        rate, memory = self.rate, self.MEMORY
        for decision in decisions.tolist():
            rate += memory * (decision - rate)
        self.rate = rate


def _predict_learn_in_windows(model, X, labels: list, mode: str, margin: float,
                              margins: np.ndarray | None = None) -> tuple[list[dict], list[bool]]:
    """The per-event loop (predict, decide, learn), with the same results bit for bit, at batch
    speed where the variant can (`_settle_in_windows`). An event of a class not learned yet is
    always learned, and goes alone through the plain loop; so do whole stretches the variant
    cannot take."""
    n = len(labels)
    probabilities: list[dict] = []
    learned: list[bool] = []
    guess = getattr(model, "_run_guess", None) or WindowGuess()
    model._run_guess = guess  # the learn rate carries over from batch to batch (not model state)

    decide = LearnRule(mode, margin)

    def one_by_one(lo: int, hi: int) -> None:
        events = X[lo:hi].to_dicts() if isinstance(X, SparseBatch) else X[lo:hi]  # one pass over the names
        for i, x in zip(range(lo, hi), events):
            one, decision = _predict_learn_one(model, x, labels[i], mode,
                                               margin if margins is None else float(margins[i]))
            probabilities.append(one)
            learned.append(bool(decision))
            if decision is not None:
                guess.record(decision)

    start = 0
    while start < n:
        known = model._class_index
        stop = start
        while stop < n and (labels[stop] is None or labels[stop] in known):
            stop += 1
        if not known or stop - start < SMALLEST_WINDOW:  # nothing learned yet, a class not learned
            # yet, or too few events for a kernel pass to pay
            one_by_one(start, start + 1)
            start += 1
            continue
        rule = decide if margins is None else LearnRule(mode, margin, margins[start:stop])
        settled = model._settle_in_windows(X[start:stop], labels[start:stop], rule, guess)
        if settled is None:  # the variant cannot take it exactly (e.g. fractional values)
            one_by_one(start, stop)
        else:
            probabilities.extend(settled[0])
            learned.extend(settled[1])
        start = stop
    return probabilities, learned


def _predict_learn_one(model, x: dict, label, mode: str, margin: float) -> tuple[dict, bool | None]:
    """The definition, for one event: predict, then (labeled) decide and learn (`margin`: this
    event's)."""
    if label is None:
        return model.predict_proba_one(x), None
    proba, joint = model.predict_and_joint_one(x)  # one scoring: the joint is the prediction's
    decision = should_learn(joint, label, mode, margin)
    if decision:
        model._learn_labeled(x, label)  # the maintenance clock is predict_learn's
    return proba, decision
