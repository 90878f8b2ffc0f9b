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
from stream_nb.worker.records import batch_or_one_by_one, featurise_or_reject

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
    worker.learner.predict_then_learn(events, X)
    expected = worker.model.predict_proba_many(X)

    def scoring(some, X_some):
        if any(event.id == "e1" for event in some):
            raise IndexError("index 9 is out of bounds")
        return worker.model.predict_proba_many(X_some)

    rejected = []
    results = batch_or_one_by_one(worker.model, events, origin, X, scoring, rejected.append, "scoring")
    assert results == [expected[0], None, expected[2]]
    (dead,) = rejected
    assert (dead.reason, dead.detail) == ("processing_failed", "scoring raised IndexError: index 9 is out of bounds")
    assert (dead.value, dead.key, dead.source) == (b"v1", b"k1", SourcePosition("t", 0, 1))


def test_a_refusal_of_the_model_stays_rejected_by_model(worker):
    events, origin, X = batch(worker, ["a", "b"])

    def scoring(some, X_some):
        raise ValueError("MultinomialNB needs feature values >= 0")

    rejected = []
    assert batch_or_one_by_one(worker.model, events, origin, X, scoring, rejected.append, "scoring") == [None, None]
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
        batch_or_one_by_one(worker.model, events, origin, X, scoring, rejected.append, "scoring")
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
    kept, kept_origin, X = featurise_or_reject(events, origin, rejected.append, worker.featurise, learning=False)
    assert [event.id for event in kept] == ["e0", "e2"] and [r.offset for r in kept_origin] == [0, 2]
    assert X.to_dicts() == featurizer.transform_sparse(["win cash", "hello"]).to_dicts()
    assert [(r.reason, r.detail) for r in rejected] == [
        ("processing_failed", "featurising raised RecursionError: maximum recursion depth exceeded")]


def test_a_labeled_batch_that_raised_after_learning_part_of_itself_is_not_redone_event_by_event(worker):
    events, origin, X = batch(worker, ["free prize", "lunch at one", "cash now"], ["spam", "ham", "spam"])

    def learning_then_failing(some, X_some):
        worker.learner.predict_then_learn(some[:1], X_some[:1])  # the first is learned, then the batch fails
        raise IndexError("counts and vocabulary disagree")

    with pytest.raises(ModelStateUnknown, match="learning of a batch raised IndexError: counts and vocabulary "
                                                "disagree after learning part of it"):
        batch_or_one_by_one(worker.model, events, origin, X, learning_then_failing, [].append, "learning")
    assert worker.model.events_learned == 1  # learned once, not again one at a time


class _ReaderCutShort:
    """A labeled reader whose broker goes away in the middle of LabeledLog.start (after the
    partitions were found, before their offsets were read), as a broker killed during a
    reconnect does."""

    closed = 0
    confluent = True  # speaks the transport seam's calls (stream_nb.kafka.confluent's shape)

    def topic_ids(self, topics):
        return {}

    def partitions_for_topic(self, topic):
        return {0}

    def assign(self, partitions):
        pass

    def beginning_offsets(self, partitions):
        raise KafkaError("the broker went away")

    def close(self, autocommit=True):
        _ReaderCutShort.closed += 1


class _Reader(_ReaderCutShort):
    def __init__(self) -> None:
        self.sought = {}

    def beginning_offsets(self, partitions):
        return {tp: 0 for tp in partitions}

    def end_offsets(self, partitions):
        return {tp: 5_000 for tp in partitions}

    def seek(self, tp, offset):
        self.sought[tp] = offset


def test_a_reconnect_cut_short_keeps_the_models_labeled_positions(worker, monkeypatch):
    """Found on a 3-broker cluster (a coordinator killed): a reconnect whose labeled reader
    failed half way through its start left the worker with a log of no positions, so the next
    attempt read the labeled log from its beginning and learned again what thick-threshold
    training had skipped. The positions must survive any number of failed starts."""
    import stream_nb.worker.membership as membership

    topic = worker.config.kafka["labeled_topics"][0]
    worker._restored = {"offsets": {(topic, 0): 1234}, "topic_ids": {}}  # the checkpoint's, at start
    readers = [_Reader(), _ReaderCutShort(), _ReaderCutShort(), _Reader()]
    monkeypatch.setattr(membership, "make_labeled_reader", lambda kafka, client: readers.pop(0))
    monkeypatch.setattr(membership, "make_producer", lambda *args, **kwargs: (_ for _ in ()).throw(KafkaError("later")))
    with pytest.raises(KafkaError, match="later"):  # the first start: the reader stands, the producer not
        worker.membership.open_clients()
    worker.labeled.positions[(topic, 0)] = 1500  # the model learned on before the broker went away
    for attempt in range(2):
        with pytest.raises(KafkaError, match="the broker went away"):
            worker.membership.open_clients()
    with pytest.raises(KafkaError, match="later"):
        worker.membership.open_clients()
    assert worker.labeled.positions == {(topic, 0): 1500}
    assert list(worker.labeled.consumer.sought.values()) == [1500]
    assert _ReaderCutShort.closed == 2  # each reader cut short is closed, not leaked
