"""Training regimes: learn every labeled event, or only those the model gets wrong or nearly so.

Train-on-error and thick-threshold training come from the statistical spam filters (CRM114,
OSBF, DSPAM): a filter that already classifies a message confidently learns little from it, and
skipping it keeps frequent, easy messages from swamping the counts.
"""

from __future__ import annotations

import math

from stream_nb.model.base import SparseBatch

TRAINING_MODES = ("all", "on_error", "thick_threshold")


def should_learn(joint_log_likelihood: dict, label, mode: str, margin: float) -> bool:
    """Whether a labeled event is learned, given its joint log likelihoods before learning.

        all:              always
        on_error:         the predicted class (largest log P(c) P(x|c)) is not the label
        thick_threshold:  on error, or  log P(label|x) - max_{c != label} log P(c|x) < margin

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
    return not (log_odds >= margin) or math.isnan(log_odds)


def predict_learn(model, X, y, mode: str = "all", margin: float = 0.0) -> tuple[list[dict], list[bool]]:
    """Prequential batch under a training regime: P(c | x) for each event with the state so far,
    and whether each event was learned.

    mode "all" is `model.predict_learn_many` (every labeled event learned, batch speed). The
    other modes decide event by event, since a decision depends on the prediction just made;
    runs of unlabeled events between labeled ones still go through the batch path. Results equal
    the per-event loop exactly in every mode, and in every mode a batch with a bad event raises
    before anything is learned.
    """
    if mode not in TRAINING_MODES:
        raise ValueError(f"training mode must be one of {', '.join(TRAINING_MODES)}, got {mode!r}")
    labels = list(y)
    if mode == "all":
        return model.predict_learn_many(X, labels), [label is not None for label in labels]
    # The loop below learns as it goes: a bad event must refuse the batch before the first learn,
    # as predict_learn_many does, or a caller that retries event by event counts the rest twice.
    model.validate(X, labels)
    events = X.to_dicts() if isinstance(X, SparseBatch) else list(X)
    probabilities: list[dict] = []
    learned: list[bool] = []
    unlabeled_run: list[dict] = []
    for x, label in zip(events, labels):
        if label is None:
            unlabeled_run.append(x)
            continue
        if unlabeled_run:
            probabilities.extend(model.predict_proba_many(unlabeled_run))
            learned.extend([False] * len(unlabeled_run))
            unlabeled_run = []
        probabilities.append(model.predict_proba_one(x))
        decision = should_learn(model.joint_log_likelihood(x), label, mode, margin)
        if decision:
            model.learn_one(x, label)
        learned.append(decision)
    if unlabeled_run:
        probabilities.extend(model.predict_proba_many(unlabeled_run))
        learned.extend([False] * len(unlabeled_run))
    return probabilities, learned
