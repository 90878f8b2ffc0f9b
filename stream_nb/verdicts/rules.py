"""What a prediction says beside its probabilities, by the configuration's rules: one place for
the worker's predictions and the mail front ends, so a message gets the same verdict from both.

For a batch of events and the model's probabilities:
- score: the log-odds of the positive class, log P(pos | x) - log P(not pos | x) in nats (per
  sqrt(distinct features) under evaluation.score_scale = "sqrt_features"); None without a
  positive class (evaluation.positive, or the obvious one of two classes: spam of spam/ham);
- published: the score as a finite number (0.0 before any class, +-SCORE_LIMIT for an infinite
  log-odds), what an operator thresholds;
- verdict: the band's decision (evaluation.unsure_band on P, or unsure_score_band on the
  score): the positive label, the other label, or "unsure"; None without a band;
- clues: the worker.clues strongest features of the predicted class, with their weights;
- truncated: mail longer than the parser reads was judged on what was read.
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_nb.events.codec import published_score
from stream_nb.model.base import SparseBatch, ViewBatch
from stream_nb.model.decision import band_verdict, obvious_positive
from stream_nb.model.explain import expert_clues_many, strongest_clues, strongest_clues_many
from stream_nb.model.posterior import positive_score
from stream_nb.model.scale import scaled_scores


@dataclass
class Judged:
    """The per-event lists of one batch (each None where the configuration gives no such field),
    and the positive class they are about (None: none)."""

    positive: object
    scores: list | None
    published: list | None
    verdicts: list | None
    clues: list | None
    truncated: set[int]


class VerdictRules:
    """The rules of a configuration: its [evaluation] (positive class, score scale, bands), its
    worker.clues, and the mail parser's read cap (None: events carry no mail)."""

    def __init__(self, evaluation: dict, clues: int, mail_cap: int | None = None) -> None:
        self.positive = evaluation["positive"]
        self.score_scale = evaluation["score_scale"]
        self.band = evaluation["unsure_band"]
        self.score_band = evaluation.get("unsure_score_band")
        self.clues = clues
        self.mail_cap = mail_cap

    @classmethod
    def of(cls, config, mail_cap: int | None = None) -> VerdictRules:
        return cls(config.evaluation, config.worker["clues"], mail_cap)

    def positive_of(self, model):
        """The score's positive class: the configured one, else the obvious one of two classes."""
        return self.positive if self.positive is not None else obvious_positive(model.classes_)

    def judge(self, model, events: list, X, probabilities: list) -> Judged:
        """The fields of each event's prediction; `X` the features its probabilities came from
        (the clues read them: no second featurising). A None probability (an event refused)
        gets None in every list."""
        positive = self.positive_of(model)
        scores = None if positive is None else [positive_score(proba, positive) for proba in probabilities]
        if scores is not None and self.score_scale != "none":  # per sqrt(distinct features) of X
            scores = scaled_scores(scores, X, self.score_scale)
        clues = None
        if self.clues:
            clues = (strongest_clues_many(model, X, probabilities, top=self.clues) if isinstance(X, SparseBatch)
                     else expert_clues_many(model, X, probabilities, top=self.clues) if isinstance(X, ViewBatch)
                     else [strongest_clues(model, x, top=self.clues, proba=proba) if proba else None
                           for x, proba in zip(X.to_dicts() if isinstance(X, ViewBatch) else X, probabilities)])
        verdicts = None if self.band is None and self.score_band is None else [
            band_verdict(proba, None if scores is None else scores[i], positive, self.band, self.score_band)
            if proba is not None else None for i, proba in enumerate(probabilities)]
        published = None if scores is None else [published_score(score) if proba is not None else None
                                                 for score, proba in zip(scores, probabilities)]
        cap = self.mail_cap
        truncated = set() if cap is None else {
            i for i, event in enumerate(events) if getattr(event, "mail", None) is not None and len(event.mail) > cap}
        return Judged(positive, scores, published, verdicts, clues, truncated)
