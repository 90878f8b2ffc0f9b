"""Forgetting ([model] half_life): what decay does to the estimates, that it equals learning the
older events with smaller weights, and that the decay points fall at the same labeled events
whatever the batching (so replicas, restarts and replays agree)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stream_nb import BernoulliNB, ComplementNB, MultinomialNB
from stream_nb.checkpoint.digest import state_digest
from stream_nb.model.registry import model_from_state
from stream_nb.model.training import predict_learn

from streams import SEED_004_TRAIN, maintained_loop, text_stream, word_counts

QUERY = {"predictable": 1, "with": 1, "no": 1, "fun": 1}


def likelihoods(model, x) -> dict:
    return {c: math.exp(v) for c, v in model.joint_log_likelihood(x).items()}


def test_a_half_life_of_one_period_halves_every_count_but_not_the_smoothing():
    model = MultinomialNB(half_life=5, evict_every=5)
    for label, text in SEED_004_TRAIN:  # five reviews: the decay point falls after the fifth
        model.learn_one(word_counts(text), label)
    # Before: T_- = 14, T_+ = 9, |V| = 20; of the query's known words "-" counts 1, 1, 0 and "+"
    # counts 0, 0, 1. Halved: T_- = 7, T_+ = 4.5, N_- = 1.5, N_+ = 1, alpha = 1 unchanged.
    got = likelihoods(model, QUERY)
    assert got["-"] == pytest.approx(3 / 5 * (1.5 / 27) ** 2 * (1 / 27), rel=1e-12)
    assert got["+"] == pytest.approx(2 / 5 * (1 / 24.5) ** 2 * (1.5 / 24.5), rel=1e-12)
    assert sum(model._class_counts) == 2.5 and model.events_learned == 5  # N_c forgets; the count of events does not
    assert model.labeled_seen == 5 and model.n_features == 20


def test_before_the_first_decay_point_nothing_is_forgotten():
    decayed, plain = MultinomialNB(half_life=5, evict_every=5), MultinomialNB()
    for label, text in SEED_004_TRAIN[:4]:
        decayed.learn_one(word_counts(text), label)
        plain.learn_one(word_counts(text), label)
    assert decayed.joint_log_likelihood(QUERY) == plain.joint_log_likelihood(QUERY)


@pytest.mark.parametrize("cls", [MultinomialNB, ComplementNB, BernoulliNB])
def test_decay_equals_learning_older_events_with_smaller_weights(cls):
    """An event learned t periods before now weighs 2^(-t k / h): decay is exponentially
    weighted counting, not a heuristic (to the grid's rounding: counts are kept to 2^-20)."""
    X, y = text_stream(seed=11, n_events=90, vocabulary=60, labeled_fraction=1.0)
    every, half_life = 30, 45.0
    factor = 0.5 ** (every / half_life)
    decayed = cls(alpha=0.5, half_life=half_life, evict_every=every)
    for x, label in zip(X, y):
        decayed.learn_one(x, label)
    weighted = cls(alpha=0.5)
    for i, (x, label) in enumerate(zip(X, y)):
        periods_after = 3 - i // every  # decay points at 30, 60 and 90 labeled events
        weighted.learn_one(x, label, w=factor**periods_after)
    for x in X[:20]:
        got, want = decayed.predict_proba_one(x), weighted.predict_proba_one(x)
        assert got.keys() == want.keys()
        for label in want:
            assert got[label] == pytest.approx(want[label], rel=1e-5, abs=1e-12)


@pytest.mark.parametrize("cls", [MultinomialNB, ComplementNB, BernoulliNB])
@pytest.mark.parametrize("mode, margin", [("all", 0.0), ("thick_threshold", 5.0), ("on_error", 0.0)])
@pytest.mark.parametrize("budget", [None, 300])
def test_batches_of_any_size_equal_the_per_event_definition(cls, mode, margin, budget):
    X, y = text_stream(seed=5, n_events=1200, vocabulary=900, labeled_fraction=0.7)
    options = dict(alpha=0.5, half_life=120.0, evict_every=25, max_features=budget)
    reference = cls(**options)
    expected = maintained_loop(reference, X, y, mode, margin)
    assert sum(reference._class_counts) < sum(label is not None for label in y) / 2  # forgetting happened
    for size in (1, 13, 1000):
        model = cls(**options)
        assert run_in_batches(model, X, y, size, mode, margin) == expected, size
        assert state_digest(model.to_state()) == state_digest(reference.to_state())
        assert model.events_learned == reference.events_learned


def run_in_batches(model, X, y, size: int, mode: str, margin: float) -> list[dict]:
    out = []
    for start in range(0, len(y), size):
        out += predict_learn(model, X[start : start + size], y[start : start + size], mode=mode, margin=margin)[0]
    return out


def test_forgetting_restored_from_its_state_goes_on_as_if_never_stopped():
    X, y = text_stream(seed=3, n_events=1000, vocabulary=400)
    whole = BernoulliNB(half_life=200, evict_every=30)
    whole.learn_many(X, y)
    first = BernoulliNB(half_life=200, evict_every=30)
    first.learn_many(X[:433], y[:433])  # stopped between two decay points
    restored = model_from_state(first.to_state())
    assert restored.half_life == 200 and restored.labeled_seen == first.labeled_seen
    restored.learn_many(X[433:], y[433:])
    assert state_digest(restored.to_state()) == state_digest(whole.to_state())
    assert restored.predict_proba_many(X[:50]) == whole.predict_proba_many(X[:50])


def test_the_half_life_is_part_of_the_state_and_its_digest():
    X, y = text_stream(seed=2, n_events=300, vocabulary=100, labeled_fraction=1.0)
    slow, fast = MultinomialNB(half_life=1000), MultinomialNB(half_life=100)
    slow.learn_many(X, y)
    fast.learn_many(X, y)
    assert slow.to_state()["meta"]["params"]["half_life"] == 1000
    assert state_digest(slow.to_state()) != state_digest(fast.to_state())
    plain = MultinomialNB()
    plain.learn_many(X, y)
    assert "half_life" not in plain.to_state()["meta"]["params"]


@pytest.mark.parametrize("half_life", [0, -5, math.nan, math.inf, True, "100"])
def test_a_bad_half_life_is_refused(half_life):
    with pytest.raises(ValueError, match="half_life must be a positive number of labeled events"):
        MultinomialNB(half_life=half_life)


def test_events_learned_counts_the_events_not_the_decayed_class_counts():
    X, y = text_stream(seed=4, n_events=500, vocabulary=200, labeled_fraction=1.0)
    model = MultinomialNB(half_life=50, evict_every=10)
    predict_learn(model, X, y, mode="thick_threshold", margin=3.0)
    decisions = maintained_loop(MultinomialNB(half_life=50, evict_every=10), X, y, "thick_threshold", 3.0)
    assert len(decisions) == 500
    learned = model.events_learned
    assert learned == int(learned) and 100 < learned < 500  # thick-threshold skips some
    assert sum(model._class_counts) < learned / 5  # N_c decayed well below it
    assert model_from_state(model.to_state()).events_learned == learned


def test_models_that_forget_refuse_to_merge():
    a, b = MultinomialNB(half_life=100), MultinomialNB(half_life=100)
    a.learn_one({"x": 1}, "s")
    b.learn_one({"y": 1}, "h")
    with pytest.raises(ValueError, match="cannot merge models that forget"):
        a.merge(b)


def test_decayed_counts_stay_on_the_grid_so_batches_stay_exact_and_fast():
    X, y = text_stream(seed=8, n_events=400, vocabulary=150, labeled_fraction=1.0)
    model = MultinomialNB(half_life=70, evict_every=20)
    model.learn_many(X, y)
    counts = model._counts
    assert not np.array_equal(counts, np.floor(counts))  # fractions, after 20 decay points
    assert np.array_equal(counts * 2**20, np.rint(counts * 2**20))  # ... on the grid of 2^-20
    assert np.array_equal(model._class_totals, counts.sum(axis=0))
    assert model._on_grid and model._batch_is_exact(model._encode(X[:50], y[:50]))


def test_rounding_to_the_grid_keeps_bernoulli_presences_within_their_class_counts():
    X, y = text_stream(seed=9, n_events=600, vocabulary=80, labeled_fraction=1.0, max_count=1)
    model = BernoulliNB(half_life=33.3, evict_every=7)
    model.learn_many(X, y)
    assert (model._counts <= model._class_counts[None, :]).all()
    assert all(0 < p < 1 for p in model.predict_proba_one(X[0]).values())


def test_fractional_weights_or_huge_counts_leave_the_grid_and_stay_exact_one_event_at_a_time():
    X, y = text_stream(seed=10, n_events=300, vocabulary=100, labeled_fraction=1.0)
    for weight in (0.3, 2.0**33):
        weights = [weight if i == 150 else 1.0 for i in range(300)]
        batch, one_by_one = MultinomialNB(half_life=100, evict_every=200), MultinomialNB(half_life=100, evict_every=200)
        batch.learn_many(X[:180], y[:180], w=weights[:180])
        assert not batch._on_grid  # the weight of event 150 took the counts off the grid (no decay yet)
        batch_results = batch.predict_learn_many(X[180:], y[180:])
        for x, label, w in zip(X[:180], y[:180], weights[:180]):
            one_by_one.learn_one(x, label, w)
        expected = []
        for x, label in zip(X[180:], y[180:]):
            expected.append(one_by_one.predict_proba_one(x))
            one_by_one.learn_one(x, label)
        assert batch_results == expected
        assert state_digest(batch.to_state()) == state_digest(one_by_one.to_state())
        assert batch._on_grid == (weight == 0.3)  # the decay at 200 rounds 0.3 onto the grid; 2^33 is too big
