"""The worker's per-event fallback, without a broker: one event whose featurising or scoring
raises is set aside with its reason and the others keep the results the batch would have
given; what is no one event's failure propagates; a labeled batch that raised after learning
part of itself is never redone event by event."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.errors import KafkaError

from stream_nb.config import load_config
from stream_nb.events import Event, SourcePosition
from stream_nb.worker.loop import ModelStateUnknown, Worker
from stream_nb.worker.outputs import Fenced

SPAM = Path(__file__).resolve().parents[1] / "configs" / "spam.toml"


class Record:
    def __init__(self, offset: int) -> None:
        self.topic, self.partition, self.offset = "t", 0, offset
        self.value, self.key, self.headers = f"v{offset}".encode(), f"k{offset}".encode(), []


@pytest.fixture
def worker(tmp_path) -> Worker:
    # spam.toml names no broker; this one is never contacted (no step here reaches Kafka)
    return Worker(load_config(SPAM, [f'checkpoint.dir="{tmp_path}"', 'kafka.bootstrap_servers="127.0.0.1:9"']))


def batch(worker: Worker, texts: list[str], labels=None):
    labels = labels or [None] * len(texts)
    events = [Event(id=f"e{i}", text=text, features=None, label=label, source=SourcePosition("t", 0, i))
              for i, (text, label) in enumerate(zip(texts, labels))]
    X = worker.text_featurizer.transform_sparse(texts, vocabulary=worker.model.vocabulary, number_unknown=True)
    return events, [Record(i) for i in range(len(texts))], X


def test_one_event_whose_scoring_raises_is_set_aside_and_the_others_keep_their_results(worker):
    events, origin, X = batch(worker, ["free prize now", "see you at lunch", "call me later"],
                              ["spam", "ham", "ham"])
    worker._predict_then_learn(events, X)
    expected = worker.model.predict_proba_many(X)

    def scoring(some, X_some):
        if any(event.id == "e1" for event in some):
            raise IndexError("index 9 is out of bounds")
        return worker.model.predict_proba_many(X_some)

    rejected = []
    results = worker._batch_or_one_by_one(events, origin, X, scoring, rejected.append, "scoring")
    assert results == [expected[0], None, expected[2]]
    (dead,) = rejected
    assert (dead.reason, dead.detail) == ("processing_failed", "scoring raised IndexError: index 9 is out of bounds")
    assert (dead.value, dead.key, dead.source) == (b"v1", b"k1", SourcePosition("t", 0, 1))


def test_a_refusal_of_the_model_stays_rejected_by_model(worker):
    events, origin, X = batch(worker, ["a", "b"])

    def scoring(some, X_some):
        raise ValueError("MultinomialNB needs feature values >= 0")

    rejected = []
    assert worker._batch_or_one_by_one(events, origin, X, scoring, rejected.append, "scoring") == [None, None]
    refusal = ("rejected_by_model", "MultinomialNB needs feature values >= 0")
    assert [(r.reason, r.detail) for r in rejected] == [refusal] * 2


@pytest.mark.parametrize("error", [MemoryError(), KafkaError("broker away"), Fenced("fenced"), KeyboardInterrupt()],
                         ids=lambda error: type(error).__name__)
def test_what_is_no_one_events_failure_propagates(worker, error):
    events, origin, X = batch(worker, ["a", "b"])

    def scoring(some, X_some):
        raise error

    rejected = []
    with pytest.raises(type(error)):
        worker._batch_or_one_by_one(events, origin, X, scoring, rejected.append, "scoring")
    assert rejected == []


def test_an_event_whose_featurising_raises_is_set_aside_and_the_others_featurised(worker):
    events, origin, _ = batch(worker, ["win cash", "poison here", "hello"])
    featurizer = worker.text_featurizer

    class Failing:
        def transform_sparse(self, texts, **options):
            if any("poison" in text for text in texts):
                raise RecursionError("maximum recursion depth exceeded")
            return featurizer.transform_sparse(texts, **options)

    worker.text_featurizer = Failing()
    rejected = []
    kept, kept_origin, X = worker._featurise_or_reject(events, origin, rejected.append, learning=False)
    assert [event.id for event in kept] == ["e0", "e2"] and [r.offset for r in kept_origin] == [0, 2]
    assert X.to_dicts() == featurizer.transform_sparse(["win cash", "hello"]).to_dicts()
    assert [(r.reason, r.detail) for r in rejected] == [
        ("processing_failed", "featurising raised RecursionError: maximum recursion depth exceeded")]


def test_a_labeled_batch_that_raised_after_learning_part_of_itself_is_not_redone_event_by_event(worker):
    events, origin, X = batch(worker, ["free prize", "lunch at one", "cash now"], ["spam", "ham", "spam"])

    def learning_then_failing(some, X_some):
        worker._predict_then_learn(some[:1], X_some[:1])  # the first is learned, then the batch fails
        raise IndexError("counts and vocabulary disagree")

    with pytest.raises(ModelStateUnknown, match="learning of a batch raised IndexError: counts and vocabulary "
                                                "disagree after learning part of it"):
        worker._batch_or_one_by_one(events, origin, X, learning_then_failing, [].append, "learning")
    assert worker.model.events_learned == 1  # learned once, not again one at a time
