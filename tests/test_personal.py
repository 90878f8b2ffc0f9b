"""Per-key models centred on the global model: the formula on the seed's example, its limits,
its edge cases, and a key's state as plain values checked on load."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from stream_nb import BernoulliNB, MultinomialNB
from stream_nb.checkpoint.digest import state_digest
from stream_nb.model.personal import InvalidKeyState, PersonalMultinomialNB

from streams import SEED_004_TRAIN, word_counts

QUERY = "predictable with no fun"  # seed 004's query; "with" is unknown to every model here
KEY_EVENTS = [("+", "fun and predictable fun"), ("-", "no energy"), ("+", "very predictable")]


def seed_004_global() -> MultinomialNB:
    model = MultinomialNB(alpha=1.0)
    for label, text in SEED_004_TRAIN:
        model.learn_one(word_counts(text), label)
    return model


def personal_on_seed(beta, prior_beta, shrinkage="key") -> PersonalMultinomialNB:
    personal = PersonalMultinomialNB(seed_004_global(), beta, prior_beta, shrinkage=shrinkage)
    for label, text in KEY_EVENTS:
        personal.learn_key(word_counts(text), label, "u")
    return personal


def counted(events, label) -> tuple[dict, int, int]:
    """({word: N_w,label}, T_label, events of label) counted from the texts."""
    words: dict = {}
    for own_label, text in events:
        if own_label == label:
            for word in text.split():
                words[word] = words.get(word, 0) + 1
    return words, sum(words.values()), sum(1 for own_label, _ in events if own_label == label)


def expected_scores(beta: Fraction, prior_beta: Fraction, shrinkage: str) -> dict:
    """s_c,u of QUERY by the module docstring's formulas in exact fractions, from the texts."""
    vocabulary = {word for _, text in SEED_004_TRAIN for word in text.split()}
    key_totals = {c: counted(KEY_EVENTS, c)[1] for c in "-+"}
    key_events = sum(counted(KEY_EVENTS, c)[2] for c in "-+")
    scores = {}
    for c in "-+":
        words, total, n_c = counted(SEED_004_TRAIN, c)
        own_words, own_total, own_n = counted(KEY_EVENTS, c)
        prior = Fraction(n_c, len(SEED_004_TRAIN))
        key_prior = (own_n + prior_beta * prior) / (key_events + prior_beta)
        log_score = math.log(key_prior)
        for word in QUERY.split():
            if word not in vocabulary and word not in own_words:
                continue  # unknown to the global model and to the key
            theta = Fraction(words.get(word, 0) + 1, total + len(vocabulary))
            if shrinkage == "class":
                theta_k = (own_words.get(word, 0) + beta * theta) / (own_total + beta)
            else:
                all_own = sum(key_totals.values())
                weight = beta / (all_own + beta)
                theta_k = (1 - weight) * Fraction(own_words.get(word, 0), own_total) + weight * theta
            log_score += math.log(theta_k)
        scores[c] = log_score
    return scores


@pytest.mark.parametrize("shrinkage", ["key", "class"])
@pytest.mark.parametrize("beta, prior_beta", [(Fraction(5), Fraction(2)), (Fraction(1, 2), Fraction(0)), (Fraction(40), Fraction(7))])
def test_the_seed_example_through_a_key_matches_the_formula_in_fractions(shrinkage, beta, prior_beta):
    personal = personal_on_seed(float(beta), float(prior_beta), shrinkage)
    got = personal.joint_log_likelihood(word_counts(QUERY), "u")
    want = expected_scores(beta, prior_beta, shrinkage)
    assert got.keys() == want.keys()
    for c in want:
        assert got[c] == pytest.approx(want[c], rel=1e-13, abs=1e-13)
    # the global model's own figures are untouched by what the key learned
    assert personal.global_model.predict_proba_one(word_counts(QUERY))["-"] == pytest.approx(0.65054, abs=5e-6)


def test_a_key_with_no_counts_predicts_exactly_as_the_global_model():
    personal = personal_on_seed(5.0, 2.0)
    query = word_counts(QUERY)
    for key in ("never-seen", None, 7):
        got, want = personal.predict_proba_one(query, key), personal.global_model.predict_proba_one(query)
        assert got == want and got.log_scores == want.log_scores  # to the last bit
    assert personal.predict_proba_one(query, "u") != personal.global_model.predict_proba_one(query)


def test_an_infinite_prior_weight_is_the_global_model():
    for shrinkage in ("key", "class"):
        personal = personal_on_seed(1e15, 1e15, shrinkage)
        got = personal.joint_log_likelihood(word_counts(QUERY), "u")
        want = personal.global_model.joint_log_likelihood(word_counts(QUERY))
        for c in want:
            assert got[c] == pytest.approx(want[c], rel=1e-9)


def own_mle(events) -> MultinomialNB:
    model = MultinomialNB(alpha=0.0, prior_alpha=0.0)
    for label, text in events:
        model.learn_one(word_counts(text), label)
    return model


@pytest.mark.parametrize("shrinkage", ["key", "class"])
def test_zero_weights_are_the_keys_own_maximum_likelihood(shrinkage):
    personal = personal_on_seed(0.0, 0.0, shrinkage)
    mle = own_mle(KEY_EVENTS)
    for text in (QUERY, "fun fun", "no predictable", "energy fun", "boring"):
        got, want = personal.predict_proba_one(word_counts(text), "u"), mle.predict_proba_one(word_counts(text))
        assert got.keys() == want.keys(), text
        for c in want:
            assert got[c] == pytest.approx(want[c], abs=1e-12), text
            assert not math.isnan(got[c])


def test_a_key_with_many_counts_follows_its_own_estimate():
    personal = PersonalMultinomialNB(seed_004_global(), 3.0, 3.0)
    for label, text in KEY_EVENTS:
        personal.learn_key(word_counts(text), label, "u", w=1e9)
    mle = own_mle(KEY_EVENTS)
    for text in ("fun predictable", "no energy", "fun fun and", "predictable"):  # (events the MLE does not find hopeless)
        got, want = personal.predict_proba_one(word_counts(text), "u"), mle.predict_proba_one(word_counts(text))
        for c in want:
            assert got[c] == pytest.approx(want[c], abs=1e-7), text


def test_the_global_model_learns_every_label_and_the_key_only_its_own():
    personal = PersonalMultinomialNB(MultinomialNB(alpha=1.0), 5.0, 2.0)
    plain = MultinomialNB(alpha=1.0)
    rng = random.Random(4)
    words = "cheap offer meeting report fun lunch win prize".split()
    for i in range(60):
        x = {rng.choice(words): rng.randint(1, 3) for _ in range(3)}
        y, key = rng.choice(["ham", "spam"]), rng.choice(["a", "b", "c"])
        personal.learn_one(x, y, key)
        plain.learn_one(x, y)
    assert state_digest(personal.global_model.to_state()) == state_digest(plain.to_state())
    assert sum(personal.keys[k].events for k in personal.keys) == 60


def test_no_nan_where_the_estimates_are_zero():
    personal = personal_on_seed(0.0, 0.0)
    # "lacks" is known only to the global model's "-", "and" to the key's "+" and the global "-"
    for text in ("lacks", "and lacks", "fun no", "summer very"):
        probabilities = personal.predict_proba_one(word_counts(text), "u")
        assert not any(math.isnan(p) for p in probabilities.values()), text
        assert sum(probabilities.values()) == pytest.approx(1.0), text
        assert not any(math.isnan(s) for s in probabilities.log_scores), text


def test_bad_settings_and_events_are_refused_with_one_line():
    for bad in (-1.0, math.nan, math.inf, True, "5"):
        with pytest.raises(ValueError, match="beta must be a finite number >= 0"):
            PersonalMultinomialNB(MultinomialNB(), bad, 1.0)
        with pytest.raises(ValueError, match="prior_beta must be a finite number >= 0"):
            PersonalMultinomialNB(MultinomialNB(), 1.0, bad)
    with pytest.raises(ValueError, match="over a multinomial global model, not BernoulliNB"):
        PersonalMultinomialNB(BernoulliNB(), 1.0, 1.0)
    with pytest.raises(ValueError, match="shrinkage"):
        PersonalMultinomialNB(MultinomialNB(), 1.0, 1.0, shrinkage="both")
    personal = personal_on_seed(1.0, 1.0)
    before = personal.key_state("u")
    for x in ({"a": -1}, {"a": math.nan}, {"a": "2"}, {"a": True}, ["a"]):
        with pytest.raises(ValueError, match="count|dict"):
            personal.learn_key(x, "+", "u")
        with pytest.raises(ValueError, match="count|dict"):
            personal.predict_proba_one(x, "u")
    with pytest.raises(ValueError, match="not one the global model has learned"):
        personal.learn_key({"a": 1}, "unheard", "u")
    with pytest.raises(ValueError, match="weight"):
        personal.learn_key({"a": 1}, "+", "u", w=-1)
    assert personal.key_state("u") == before  # nothing learned by a refused event


def test_a_keys_state_round_trips_as_plain_values_and_is_checked_on_load():
    personal = personal_on_seed(5.0, 2.0)
    state = personal.key_state("u")
    restored = PersonalMultinomialNB(seed_004_global(), 5.0, 2.0)
    restored.load_key_state("u", state)
    query = word_counts(QUERY)
    assert restored.predict_proba_one(query, "u").log_scores == personal.predict_proba_one(query, "u").log_scores
    assert restored.key_state("u") == state
    broken = [
        ("class_counts", [1.0]),
        ("class_counts", [-1.0, 3.0]),
        ("class_counts", [math.nan, 2.0]),
        ("class_totals", [99.0, 5.0]),
        ("features", {"fun": [0.0]}),
        ("features", {"fun": [0.0, -2.0]}),
        ("features", {"": "x"}),
        ("classes", list(reversed(state["classes"]))),
    ]
    for field, value in broken:
        bad = dict(state, **{field: value})
        with pytest.raises(InvalidKeyState):
            restored.load_key_state("v", bad)
        assert "v" not in restored.keys


def test_keys_idle_for_a_number_of_labeled_events_are_evicted_least_recent_first():
    personal = PersonalMultinomialNB(seed_004_global(), 5.0, 2.0, idle_after=3)
    for key in ("a", "b", "c"):
        personal.learn_key({"fun": 1}, "+", key)
        personal.observe_labeled(key)
    assert list(personal.keys) == ["a", "b", "c"] and personal.labeled_clock == 3
    personal.observe_labeled("a")  # a labeled again (not learned): the most recent now
    assert list(personal.keys) == ["b", "c", "a"] and personal.keys_evicted == 0
    personal.observe_labeled(None)  # clock 5: b was last labeled at 2, idle for 3
    assert list(personal.keys) == ["c", "a"] and personal.keys_evicted == 1
    personal.observe_labeled("z")  # a key without counts changes nothing but the clock; c goes
    assert list(personal.keys) == ["a"] and personal.labeled_clock == 6
    query = word_counts(QUERY)
    assert personal.predict_proba_one(query, "b").log_scores == personal.global_model.predict_proba_one(query).log_scores


def test_a_keys_feature_budget_keeps_its_most_counted_features():
    personal = PersonalMultinomialNB(seed_004_global(), 5.0, 2.0, max_key_features=10)
    personal.learn_key({f"w{i}": 1 for i in range(8)} | {"common": 3}, "+", "u")
    personal.learn_key({f"v{i}": 1 for i in range(4)} | {"common": 2, "w0": 1}, "-", "u")
    # 13 features > 10: down to half the budget, the 5 most counted (common 5, w0 2), ties of 1 by name
    state = personal.key_state("u")
    assert list(state["features"]) == sorted(["common", "w0", "v0", "v1", "v2"])
    assert state["features"]["common"] == [3.0, 2.0] and state["features"]["w0"] == [1.0, 1.0]
    assert state["features"]["v0"] == [0.0, 1.0]
    assert state["class_totals"] == [4.0, 6.0]  # what stays: T_c,k is the sum of the kept counts
    assert state["class_counts"] == [1.0, 1.0]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_key_features must be a whole number"):
            PersonalMultinomialNB(MultinomialNB(), max_key_features=bad)
        with pytest.raises(ValueError, match="idle_after must be a whole number"):
            PersonalMultinomialNB(MultinomialNB(), idle_after=bad)


def test_a_key_state_from_ahead_of_the_clock_is_refused():
    personal = personal_on_seed(5.0, 2.0)
    state = personal.key_state("u")
    with pytest.raises(InvalidKeyState, match="ahead of the labeled clock"):
        personal.load_key_state("v", dict(state, last_labeled=personal.labeled_clock + 1))
    for bad in (-1, 1.5, True, None):
        with pytest.raises(InvalidKeyState, match="last_labeled"):
            personal.load_key_state("v", dict(state, last_labeled=bad))


def test_the_ordered_sum_is_the_loops_to_the_bit():
    """_ordered_dots adds x_f log_fc one feature at a time from 0.0, as the plain loop does (a
    pairwise sum would round differently), on generated rows with -inf and zero terms."""
    import random

    import numpy as np

    from stream_nb.model.personal import _ordered_dots

    rng = random.Random(7)
    for _ in range(300):
        n, c = rng.randrange(0, 40), rng.randrange(1, 4)
        values = np.array([rng.choice([1.0, 2.0, 0.5, rng.uniform(0, 50)]) for _ in range(n)])
        logs = np.array([[rng.choice([-np.inf, 0.0, -0.0, rng.uniform(-30, 0), -1e-300]) for _ in range(c)]
                         for _ in range(n)]).reshape(n, c)
        expected = []
        for column in range(c):
            total = 0.0
            for value, log_value in zip(values.tolist(), logs[:, column].tolist()):
                total += value * log_value
            expected.append(total)
        got = _ordered_dots(values, logs)
        assert [repr(v) for v in got] == [repr(v) for v in expected]


def test_a_key_cut_to_its_budget_keeps_the_most_counted_features_ties_by_name():
    """keep_features against its definition, sorted by (-total, name), on generated keys with
    many ties, two and three classes."""
    import random

    from stream_nb.model.personal import KeyCounts

    rng = random.Random(26)
    for _ in range(200):
        n_classes = rng.choice([2, 3])
        own = KeyCounts(n_classes)
        for _ in range(rng.randrange(1, 40)):
            own.add({f"f{rng.randrange(60)}": float(rng.choice([1, 1, 2, 0.5])) for _ in range(rng.randrange(1, 8))},
                    rng.randrange(n_classes), 1.0)
        budget = rng.randrange(1, 70)
        expected = sorted(own.features.items(), key=lambda item: (-math.fsum(item[1]), item[0]))[:budget]
        own.keep_features(budget)
        assert own.features == dict(expected)
        assert own.class_totals == [math.fsum(row[c] for _, row in expected) for c in range(n_classes)]
