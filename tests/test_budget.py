"""The feature budget ([model] max_features): which features go, what the state is after, and
that the checks fall at the same labeled events whatever the batching (so replicas, restarts
and replays agree)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stream_nb import BernoulliNB, ComplementNB, MultinomialNB
from stream_nb.checkpoint.digest import state_digest
from stream_nb.config import load_config
from stream_nb.model.base import SparseBatch
from stream_nb.model.registry import model_from_state
from stream_nb.model.training import predict_learn

from corpora import load_sms_spam
from streams import SEED_004_TRAIN, maintained_loop, text_stream, word_counts

QUERY = {"predictable": 1, "with": 1, "no": 1, "fun": 1}


def likelihoods(model, x) -> dict:
    return {c: math.exp(v) for c, v in model.joint_log_likelihood(x).items()}


def test_eviction_drops_the_least_counted_oldest_feature_and_its_share_of_the_totals():
    model = MultinomialNB()
    for label, text in SEED_004_TRAIN:
        model.learn_one(word_counts(text), label)
    assert model.n_features == 20
    # "and", "very", "the" are counted twice, the 17 others once; of those "just" was learned first
    assert model.evict_features(keep=19) == 1
    assert "just" not in model.feature_log_counts() and model.n_features == 19
    # T_- = 14 - 1, |V| = 19: P(w|-) = (N + 1) / 32, P(w|+) = (N + 1) / 28
    got = likelihoods(model, QUERY)
    assert got["-"] == pytest.approx(3 / 5 * (2 / 32) * (2 / 32) * (1 / 32), rel=1e-12)
    assert got["+"] == pytest.approx(2 / 5 * (1 / 28) * (1 / 28) * (2 / 28), rel=1e-12)
    assert model.evict_features(keep=19) == 0  # nothing over: nothing goes


def test_the_budget_checks_every_evict_every_labeled_events_and_evicts_to_nine_tenths():
    model = MultinomialNB(max_features=10, evict_every=5)
    for label, text in SEED_004_TRAIN[:4]:
        model.learn_one(word_counts(text), label)
    assert model.n_features == 14  # over the budget, but no check yet (4 labeled events)
    model.learn_one(word_counts(SEED_004_TRAIN[4][1]), "+")
    # the check after the 5th: 20 > 10, down to 9; the 11 oldest of the count-1 features go
    assert sorted(model.feature_log_counts()) == ["and", "film", "fun", "most", "of", "powerful", "summer", "the",
                                                  "very"]
    got = likelihoods(model, QUERY)  # only "fun" is known now: T_- = 3, T_+ = 9, |V| = 9
    assert got["-"] == pytest.approx(3 / 5 * (1 / 12), rel=1e-12)
    assert got["+"] == pytest.approx(2 / 5 * (2 / 18), rel=1e-12)
    assert model.labeled_seen == 5 and model.events_learned == 5


def run_in_batches(model, X, y, size: int, mode: str, margin: float) -> list[dict]:
    out = []
    for start in range(0, len(y), size):
        out += predict_learn(model, X[start : start + size], y[start : start + size], mode=mode, margin=margin)[0]
    return out


@pytest.mark.parametrize("cls", [MultinomialNB, ComplementNB, BernoulliNB])
@pytest.mark.parametrize("mode, margin", [("all", 0.0), ("thick_threshold", 5.0), ("on_error", 0.0)])
def test_batches_of_any_size_equal_the_per_event_definition(cls, mode, margin):
    X, y = text_stream(seed=7, n_events=1500, vocabulary=900, labeled_fraction=0.7)
    reference = cls(alpha=0.5, max_features=300, evict_every=25)
    expected = maintained_loop(reference, X, y, mode, margin)
    assert reference.n_features <= 300 + 25 * max(map(len, X))
    evictions_happened = reference.n_features < len({w for x, label in zip(X, y) if label is not None for w in x})
    assert evictions_happened
    for size in (1, 13, 1000):
        model = cls(alpha=0.5, max_features=300, evict_every=25)
        assert run_in_batches(model, X, y, size, mode, margin) == expected, size
        assert state_digest(model.to_state()) == state_digest(reference.to_state())
        assert model.labeled_seen == reference.labeled_seen == sum(label is not None for label in y)


def test_a_budget_restored_from_its_state_goes_on_as_if_never_stopped():
    X, y = text_stream(seed=3, n_events=1200, vocabulary=700)
    whole = MultinomialNB(max_features=200, evict_every=30)
    whole.learn_many(X, y)
    first = MultinomialNB(max_features=200, evict_every=30)
    first.learn_many(X[:517], y[:517])  # stopped between two checks
    restored = model_from_state(first.to_state())
    assert restored.labeled_seen == first.labeled_seen
    restored.learn_many(X[517:], y[517:])
    assert state_digest(restored.to_state()) == state_digest(whole.to_state())
    one_by_one = MultinomialNB(max_features=200, evict_every=30)
    for x, label in zip(X, y):
        if label is not None:
            one_by_one.learn_one(x, label)
    assert state_digest(one_by_one.to_state()) == state_digest(whole.to_state())


def test_without_a_budget_the_state_is_as_before():
    model = MultinomialNB()
    model.learn_one({"a": 1}, "x")
    state = model.to_state()
    assert "labeled_seen" not in state["meta"] and "max_features" not in state["meta"]["params"]


@pytest.mark.parametrize("options, message", [
    ({"max_features": 0}, "max_features must be a positive whole number"),
    ({"max_features": 1.5}, "max_features must be a positive whole number"),
    ({"max_features": 100, "evict_every": 0}, "evict_every must be a positive whole number"),
    ({"max_features": 100, "n_hash_buckets": 64}, "set one"),
    ({"max_features": 1}, "at least one feature"),
])
def test_bad_budget_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        MultinomialNB(**options)


def test_spam_toml_with_a_budget_on_sms_stays_within_it_and_equal_across_batch_sizes():
    sms = load_sms_spam()
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "spam.toml",
                         ["model.max_features=8000", "model.evict_every=200"])
    featurizer = config.build_featurizer()
    texts = [text for _, text in sms]
    labels = [label if i % 4 else None for i, (label, _) in enumerate(sms)]
    digests = set()
    for size in (1, 500):
        model = config.build_model()
        seen = []
        for start in range(0, len(texts), size):
            batch: SparseBatch = featurizer.transform_sparse(texts[start : start + size])
            predict_learn(model, batch, labels[start : start + size], **config.training)
            seen.append(model.n_features)
        # never more than the budget plus what 200 labeled SMS can add between two checks
        assert max(seen) <= 8000 + 200 * 120
        digests.add(state_digest(model.to_state()))
    assert len(digests) == 1
    assert 0.9 * 8000 <= model.n_features <= 8000 + 200 * 120
