"""Unlearning (issue 24, part 1): unlearn_one / unlearn_many take back what learning added.

The reference is always computed another way: a model that learned only the events kept, a
model that learned the corrected label in the first place, or (forgetting) each event's part
decayed alone by the definition written out here."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from stream_nb import BernoulliNB, CategoricalNB, ComplementNB, GaussianNB, MultinomialNB
from stream_nb.checkpoint.digest import state_digest
from stream_nb.model import NotLearned, SparseBatch
from stream_nb.model.registry import model_from_state

from streams import SEED_004_TRAIN, gaussian_stream, text_stream, word_counts

Q = 2.0**-20  # the forgetting grid

COUNT_MODELS = [
    lambda: MultinomialNB(),
    lambda: MultinomialNB(unknown="smooth", alpha=0.5, prior_alpha=1.0),
    lambda: MultinomialNB(alpha=0),
    lambda: MultinomialNB(n_hash_buckets=64),
    lambda: ComplementNB(),
    lambda: BernoulliNB(),
    lambda: BernoulliNB(alpha=0),
    lambda: BernoulliNB(unknown="smooth", true_threshold=1.0, n_hash_buckets=50),
]
EXACT_MODELS = COUNT_MODELS + [lambda: CategoricalNB(), lambda: CategoricalNB(unknown="smooth", alpha=0.5)]


def model_id(make) -> str:
    model = make()
    return f"{type(model).__name__}{model._params()}"


def stream(seed: int, n_events: int = 400):
    """Four classes, integral weights 1..3, every event labeled; class3 is the rarest."""
    X, y = text_stream(seed=seed, n_events=n_events, n_classes=4, vocabulary=250, labeled_fraction=1.0)
    rng = random.Random(seed)
    w = [float(rng.randint(1, 3)) for _ in X]
    return X, y, w


def split(y, seed: int):
    """A random third of the events, and every event of class3 (so a class leaves the model)."""
    rng = random.Random(seed + 1)
    return sorted(i for i in range(len(y)) if y[i] == "class3" or rng.random() < 0.33)


def learned(make, X, y, w, rows=None):
    model = make()
    rows = range(len(y)) if rows is None else rows
    model.learn_many([X[i] for i in rows], [y[i] for i in rows], w=[w[i] for i in rows])
    return model


def same_model(got, want, X) -> None:
    assert state_digest(got.to_state()) == state_digest(want.to_state())
    assert got.classes_ == want.classes_
    assert got.events_learned == want.events_learned
    if hasattr(want, "n_terms"):
        assert got.n_terms == want.n_terms
    assert got.predict_proba_many(X) == want.predict_proba_many(X)
    for x in X[:40]:
        assert got.joint_log_likelihood(x) == want.joint_log_likelihood(x)
        assert got.predict_proba_one(x) == want.predict_proba_one(x)


# ---- taking back == never having learned -------------------------------------------------


@pytest.mark.parametrize("make", EXACT_MODELS, ids=model_id)
def test_unlearning_a_subset_equals_learning_only_the_rest(make):
    X, y, w = stream(seed=3)
    gone = split(y, seed=3)
    kept = [i for i in range(len(y)) if i not in set(gone)]
    model = learned(make, X, y, w)
    reference = learned(make, X, y, w, kept)
    # not vacuous: the events taken back hold features and a class the rest never has
    assert "class3" in model.classes_ and "class3" not in reference.classes_
    if hasattr(model, "n_terms") and not model.vocabulary.hashed:
        assert model.n_terms > reference.n_terms
    for i in random.Random(0).sample(gone, len(gone)):  # any order
        model.unlearn_one(X[i], y[i], w[i])
    same_model(model, reference, X)


@pytest.mark.parametrize("make", EXACT_MODELS, ids=model_id)
def test_unlearn_many_equals_the_unlearn_one_loop_bit_for_bit(make):
    X, y, w = stream(seed=4)
    gone = split(y, seed=4)
    fractional = [weight / 3 for weight in w]  # off the integers: float sums round
    for weights in (w, fractional):
        one, many = learned(make, X, y, weights), learned(make, X, y, weights)
        for i in gone:
            one.unlearn_one(X[i], y[i], weights[i])
        many.unlearn_many([X[i] for i in gone], [y[i] for i in gone], w=[weights[i] for i in gone])
        assert_states_equal(one, many)
        assert one.predict_proba_many(X[:60]) == many.predict_proba_many(X[:60])


def assert_states_equal(a, b) -> None:
    """Bit for bit: every array of the state (NaN-free, so array_equal is exact) and the meta."""
    sa, sb = a.to_state(), b.to_state()
    assert sa["meta"] == sb["meta"]
    assert sa["arrays"].keys() == sb["arrays"].keys()
    for name in sa["arrays"]:
        assert np.array_equal(sa["arrays"][name], sb["arrays"][name]), name
        assert np.asarray(sa["arrays"][name]).tobytes() == np.asarray(sb["arrays"][name]).tobytes(), name


@pytest.mark.parametrize("make", COUNT_MODELS, ids=model_id)
def test_a_sparse_batch_is_taken_back_as_its_dicts(make):
    names = ["a", "b", "a", "c", "b", "b", "d"]  # repeats within an event add up, as learning adds them
    batch = SparseBatch(names, np.array([4, 3]), np.array([1.0, 2.0, 1.0, 3.0, 1.0, 1.0, 2.0]))
    dicts = batch.to_dicts()
    X, y, w = stream(seed=5, n_events=100)
    model, reference = learned(make, X, y, w), learned(make, X, y, w)
    model.learn_many(batch, ["class0", "class1"])
    model.unlearn_many(batch, ["class0", "class1"])
    same_model(model, reference, X[:50])
    model.learn_many(dicts, ["class0", "class1"], w=[2, 3])
    model.unlearn_many(batch, ["class0", "class1"], w=[2, 3])
    same_model(model, reference, X[:50])


@pytest.mark.parametrize("make", EXACT_MODELS, ids=model_id)
def test_a_correction_equals_learning_the_right_label_in_the_first_place(make):
    X, y, w = stream(seed=6)
    wrong = [("class0" if label != "class0" else "class2") for label in y]
    fixed = set(random.Random(6).sample(range(len(y)), 120))
    first = [wrong[i] if i in fixed else y[i] for i in range(len(y))]
    model = learned(make, X, first, w)
    for i in sorted(fixed):
        model.unlearn_one(X[i], wrong[i], w[i])  # taken back as A ...
        model.learn_one(X[i], y[i], w[i])  # ... learned as B
    same_model(model, learned(make, X, y, w), X)


def test_the_seed_004_worked_example_holds_after_an_event_is_taken_back():
    model = MultinomialNB()
    for label, text in SEED_004_TRAIN:
        model.learn_one(word_counts(text), label)
    model.learn_one(word_counts("an utterly new review with fun"), "?", w=2)
    assert model.n_terms == 25 and "?" in model.classes_
    model.unlearn_one(word_counts("an utterly new review with fun"), "?", w=2)
    # the figures of test_model's worked example: "with" is unknown again, |V| = 20
    query = word_counts("predictable with no fun")
    likelihood = {c: math.exp(v) for c, v in model.joint_log_likelihood(query).items()}
    assert likelihood["-"] == pytest.approx(3 / 5 * 4 / 34**3, rel=1e-9)
    assert likelihood["+"] == pytest.approx(2 / 5 * 2 / 29**3, rel=1e-9)
    assert model.predict_proba_one(query)["-"] == pytest.approx(0.65054, abs=5e-6)
    assert model.n_terms == 20 and model.classes_ == ["+", "-"] and model.events_learned == 5


def test_a_feature_taken_back_to_zero_scores_as_an_unseen_one_under_smoothing():
    # unknown="smooth" scores an unseen feature at alpha / (T_c + alpha |V|): a zero row kept in
    # the vocabulary must not count in |V|, nor be read as known
    model, reference = MultinomialNB(unknown="smooth"), MultinomialNB(unknown="smooth")
    for m in (model, reference):
        m.learn_one({"a": 2, "b": 1}, "s")
        m.learn_one({"b": 1, "c": 1}, "h")
    model.learn_one({"zz": 3, "a": 1}, "h")
    model.unlearn_one({"zz": 3, "a": 1}, "h")
    assert "zz" in model.vocabulary.mapping()  # kept (names are only appended) ...
    assert model.n_terms == reference.n_terms == 3  # ... and not counted
    for x in ({"zz": 1}, {"zz": 2, "a": 1}, {}):
        assert model.joint_log_likelihood(x) == reference.joint_log_likelihood(x)


def test_categorical_values_taken_back_leave_the_value_count_s_j():
    model, reference = CategoricalNB(unknown="smooth"), CategoricalNB(unknown="smooth")
    for m in (model, reference):
        m.learn_one({"colour": "red", "size": "s"}, "a")
        m.learn_one({"colour": "blue", "size": "m"}, "b")
    model.learn_one({"colour": "green", "shape": "round"}, "a")
    model.unlearn_one({"colour": "green", "shape": "round"}, "a")
    # S_colour = 2 again: P(red | a) = (1 + 1) / (1 + 2), not (1 + 1) / (1 + 3)
    assert math.exp(model.joint_log_likelihood({"colour": "red"})["a"]) == pytest.approx(0.5 * 2 / 3, rel=1e-12)
    for x in ({"colour": "green"}, {"shape": "round", "size": "m"}, {"colour": "red"}):
        assert model.joint_log_likelihood(x) == reference.joint_log_likelihood(x)
    assert state_digest(model.to_state()) == state_digest(reference.to_state())
    model.learn_one({"colour": "green"}, "b")  # a value taken back to 0 counts again when relearned
    reference.learn_one({"colour": "green"}, "b")
    assert model.joint_log_likelihood({"colour": "red"}) == reference.joint_log_likelihood({"colour": "red"})
    restored = model_from_state(model.to_state())
    assert restored.joint_log_likelihood({"colour": "blue"}) == reference.joint_log_likelihood({"colour": "blue"})


# ---- refusals ------------------------------------------------------------------------------


def refusals():
    return [
        ({"w1": 1}, "nobody", 1.0, None, "class 'nobody' was never learned"),
        ({"never-seen": 1}, "class0", 1.0, None, "feature 'never-seen' was never learned"),
        ({"w1": 1}, "class0", 1e6, None, "class 'class0'"),  # more weight than learned
        ({"w1": 1}, "class0", 1.0, 1, "learned_at=1 is not an epoch"),  # the future: no decay yet
        ({"w1": 1}, "class0", 1.0, -1, "learned_at=-1 is not an epoch"),
    ]


@pytest.mark.parametrize("make", COUNT_MODELS, ids=model_id)
@pytest.mark.parametrize("x, label, w, learned_at, message", refusals())
def test_refusals_name_what_was_not_learned_and_change_nothing(make, x, label, w, learned_at, message):
    if make().vocabulary.hashed and "never-seen" in x:
        pytest.skip("a hashed bucket is a feature: the name lands in a bucket that may hold counts")
    X, y, weights = stream(seed=7, n_events=150)
    model = learned(make, X, y, weights)
    before = model.to_state()
    with pytest.raises(NotLearned, match=message):
        model.unlearn_one(x, label, w, learned_at=learned_at)
    with pytest.raises(NotLearned):  # the same event at the end of a batch of good ones
        model.unlearn_many(X[:20] + [x], y[:20] + [label], w=weights[:20] + [w], learned_at=learned_at)
    assert_states_equal(model, model_from_state(before))
    assert issubclass(NotLearned, ValueError)


def test_a_feature_the_class_never_counted_is_refused_by_name():
    model = MultinomialNB()
    model.learn_one({"a": 1}, "s")
    model.learn_one({"b": 1}, "h")
    with pytest.raises(NotLearned, match="feature 'b' in class 's' holds 0.0, less than the 1.0"):
        model.unlearn_one({"a": 1, "b": 1}, "s")
    with pytest.raises(NotLearned, match="feature 'a' in class 's' holds 1.0, less than the 2.0"):
        model.unlearn_one({"a": 2}, "s")


@pytest.mark.parametrize("make", EXACT_MODELS + [lambda: GaussianNB()], ids=model_id)
def test_taking_back_an_event_twice_in_one_batch_is_refused_whole(make):
    """unlearn_many checks each event against what the events before it leave: two take-backs
    of an event learned once overdraw, though each alone would pass."""
    if make().__class__ is GaussianNB:
        X, y = gaussian_stream(seed=8, n_events=60, labeled_fraction=1.0)
        extra, label = {"f0": 1.5, "new": 2.0}, 9
    else:
        X, y = text_stream(seed=8, n_events=60, labeled_fraction=1.0)
        extra, label = {"w1": 1, "only-once": 2}, "fresh"  # N_c = 1: twice overdraws it (hashed too)
    model = make()
    model.learn_many(X, y)
    model.learn_one(extra, label)
    before = model.to_state()
    with pytest.raises(NotLearned):
        model.unlearn_many([X[0], extra, extra], [y[0], label, label])
    assert_states_equal(model, model_from_state(before))
    model.unlearn_many([X[0], extra], [y[0], label])  # once is fine


@pytest.mark.parametrize("make", [lambda: MultinomialNB(), lambda: BernoulliNB(), lambda: CategoricalNB(),
                                  lambda: GaussianNB()], ids=model_id)
def test_bad_input_is_refused_as_learning_refuses_it_and_changes_nothing(make):
    model = make()
    model.learn_many([{"a": 1.0, "b": 2.0}, {"a": 3.0}], ["s", "h"])
    before = model.to_state()
    for call, error in [
        (lambda: model.unlearn_one({"a": 1.0}, None), ValueError),
        (lambda: model.unlearn_one({"a": 1.0}, "s", w=-1), ValueError),
        (lambda: model.unlearn_one({"a": math.nan}, "s"), ValueError),
        (lambda: model.unlearn_one({"a": 1.0}, "s", learned_at=0.5), TypeError),
        (lambda: model.unlearn_many([{"a": 1.0}], ["s", "h"]), ValueError),
        (lambda: model.unlearn_many([{"a": 1.0, "b": 2.0}, "not a dict"], ["s", "h"]), TypeError),
    ]:
        with pytest.raises(error):
            call()
        assert_states_equal(model, model_from_state(before))


def test_zero_weight_and_unlabeled_events_take_back_nothing():
    model = MultinomialNB()
    model.learn_many([{"a": 1}, {"b": 1}], ["s", None])  # the unlabeled event learned nothing
    before = model.to_state()
    model.unlearn_one({"a": 1}, "s", w=0)
    model.unlearn_many([{"a": 1}, {"b": 1}], ["s", None], w=[0, 1])
    assert_states_equal(model, model_from_state(before))
    model.unlearn_many([{"a": 1}, {"b": 1}], ["s", None])
    assert model.classes_ == [] and model.n_terms == 0 and model.events_learned == 0


# ---- Gaussian: reverse Welford, within its stated tolerance -------------------------------


def test_gaussian_unlearning_equals_learning_the_rest_within_rounding():
    X, y = gaussian_stream(seed=9, n_events=600, n_classes=4, n_features=5, labeled_fraction=1.0)
    rng = random.Random(9)
    w = [float(rng.randint(1, 3)) for _ in X]
    X = [dict(x, rare=rng.gauss(0, 1)) if label == 3 else x for x, label in zip(X, y)]  # class 3's own feature
    gone = [i for i in range(len(y)) if y[i] == 3 or rng.random() < 0.4]
    kept = [i for i in range(len(y)) if i not in set(gone)]
    model, reference = learned(GaussianNB, X, y, w), learned(GaussianNB, X, y, w, kept)
    m2_before = model._m2[:, :3].copy()
    model.unlearn_many([X[i] for i in gone], [y[i] for i in gone], w=[w[i] for i in gone])
    assert model.classes_ == reference.classes_ == [0, 1, 2]
    assert model.events_learned == reference.events_learned
    got, want = model.to_state()["arrays"], reference.to_state()["arrays"]
    j = {f: k for k, f in enumerate(model.to_state()["meta"]["features"])}
    rows = [j[f] for f in reference.to_state()["meta"]["features"]]
    assert not got["n"][j["rare"]].any() and not got["pooled"][j["rare"]].any()  # reset exactly
    assert np.array_equal(got["n"][rows], want["n"])  # whole weights: exact
    # the stated limit (GaussianNB._unwelford): a few eps of the moments before the take-backs
    eps = np.finfo(float).eps
    assert np.abs(got["m2"][rows] - want["m2"]).max() <= 64 * eps * m2_before[rows].max()
    assert np.allclose(got["mean"][rows], want["mean"], rtol=0, atol=1e-12)
    assert np.allclose(got["m2"][rows], want["m2"], rtol=1e-10, atol=0)
    assert np.allclose(got["pooled"][rows], want["pooled"], rtol=1e-10, atol=1e-12)
    for x in X[:100]:
        p, r = model.predict_proba_one(x), reference.predict_proba_one(x)
        assert p.keys() == r.keys()
        assert all(p[c] == pytest.approx(r[c], rel=1e-9, abs=1e-12) for c in r)
    # a class and feature taken back whole leave the digest as if never learned
    other = learned(GaussianNB, X, y, w, kept)
    other.learn_one({"solo": 4.0, "solo2": -1.0}, 7)
    other.unlearn_one({"solo": 4.0, "solo2": -1.0}, 7)
    assert other.classes_ == [0, 1, 2]
    assert state_digest(other.to_state()) == state_digest(reference.to_state())
    assert other.joint_log_likelihood({"solo": 1.0}) == reference.joint_log_likelihood({"solo": 1.0})


def test_gaussian_reverse_welford_takes_back_one_observation_by_hand():
    model = GaussianNB()
    for value in (1.0, 2.0, 6.0):
        model.learn_one({"f": value}, "a")
    model.unlearn_one({"f": 6.0}, "a")
    # {1, 2}: mean 1.5, M2 = 0.25 + 0.25
    n, mean, m2 = model._n[0, 0], model._mean[0, 0], model._m2[0, 0]
    assert (n, mean, m2) == (2.0, 1.5, 0.5)
    model.unlearn_one({"f": 1.0}, "a", w=2)  # weights are checked, not values: n = 2 - 2 = 0 ...
    assert model.classes_ == [] and not model._pooled.any()  # ... so the moments reset exactly


# ---- forgetting: the part decay left, per event ---------------------------------------------


def decayed_part(amount: float, factors: list[float]) -> float:
    """The per-event definition: an event's contribution decayed alone, step by step on the grid
    of q = 2^-20: c <- q round(factor c / q) (half to even, as rint)."""
    for factor in factors:
        if factor != 1:
            amount = round(factor * amount / Q) * Q
    return amount


@pytest.mark.parametrize("cls", [MultinomialNB, BernoulliNB, ComplementNB])
def test_with_forgetting_what_decay_left_of_each_part_is_taken_back(cls):
    X, y = text_stream(seed=12, n_events=500, n_classes=3, vocabulary=120, labeled_fraction=1.0)
    every, half_life = 20, 70.0
    model = cls(half_life=half_life, evict_every=every)
    epochs = []
    for i, (x, label) in enumerate(zip(X, y)):
        epochs.append(model.forgetting_epoch)
        model.learn_one(x, label, w=1 + i % 2)
        if i == 250:
            model.decay(0.75)  # a step of another factor, between maintenance points
    assert model.forgetting_epoch == 500 // every + 1
    assert epochs[:251] == [i // every for i in range(251)]  # labeled_seen // evict_every before each
    factor = 0.5 ** (every / half_life)
    step_factors = [factor] * 12 + [0.75] + [factor] * 13  # epoch 12 was the direct decay
    assert model.to_state()["meta"]["decay_factors"] == [[factor, 12], [0.75, 1], [factor, 13]]
    names = model.vocabulary.names()
    for i in [3, 40, 77, 260, 333, 499]:
        x, label, w = X[i], y[i], 1 + i % 2
        factors = step_factors[epochs[i]:]
        c = model.classes_.index(label)
        counts_before, class_before = model._counts.copy(), float(model._class_counts[c])
        events_before = model.events_learned
        model.unlearn_one(x, label, w, learned_at=epochs[i])
        assert model._class_counts[c] == max(class_before - decayed_part(float(w), factors), 0.0)
        assert model.events_learned == events_before - w  # events, not decayed weight
        for name, value in x.items():
            f = names.index(name)
            part = decayed_part(float(w if cls is BernoulliNB else value * w), factors)
            assert model._counts[f, c] == max(counts_before[f, c] - part, 0.0), (i, name)
        untouched = [names.index(name) for name in x]
        mask = np.ones(len(names), dtype=bool)
        mask[untouched] = False
        assert np.array_equal(model._counts[mask], counts_before[mask])
    assert model.n_terms == int((model._counts.sum(axis=1) > 0).sum())  # |V| follows the counts


def test_the_aggregate_may_hold_a_grid_step_less_than_its_parts_which_is_clamped_not_refused():
    # q round(f / q) with f / q = 2^19 + 1.5: each part of 1 rounds up to 2^19 + 2 steps (half to
    # even), the aggregate of 2 rounds 2^20 + 3 exactly: one step less than its two parts
    factor = 0.5 + 3 * 2.0**-21
    model = MultinomialNB()
    model.learn_one({"a": 1}, "s")
    model.learn_one({"a": 1}, "s")
    model.decay(factor)
    part = decayed_part(1.0, [factor])
    assert part == (2**19 + 2) * Q and model._counts[0, 0] == (2**20 + 3) * Q == 2 * part - Q
    model.unlearn_one({"a": 1}, "s", learned_at=0)
    assert model._counts[0, 0] == part - Q  # the second part finds one grid step less ...
    model.unlearn_one({"a": 1}, "s", learned_at=0)
    assert model.classes_ == [] and model.n_terms == 0 and model._counts.sum() == 0  # ... and takes all there is
    fresh = MultinomialNB()
    fresh.learn_one({"a": 1}, "s")
    fresh.decay(0.5)
    with pytest.raises(NotLearned, match="class 's'"):  # more than rounding: 2 x 0.5 against 0.5
        fresh.unlearn_one({"a": 1}, "s", w=2, learned_at=0)
    with pytest.raises(NotLearned, match="learned_at=2"):
        fresh.unlearn_one({"a": 1}, "s", learned_at=2)
    fresh.unlearn_one({"a": 1}, "s", w=0.5)  # learned_at=None: now, what it adds today (0.5)
    assert fresh.classes_ == []


def test_forgetting_epoch_is_part_of_the_state_and_old_states_read_as_zero():
    model = MultinomialNB(half_life=10, evict_every=5)
    X, y = text_stream(seed=13, n_events=60, labeled_fraction=1.0)
    model.learn_many(X, y)
    assert model.forgetting_epoch == model.labeled_seen // 5 == 12  # maintenance alone: the clock's decay points
    model.decay(0.9)
    state = model.to_state()
    assert model.forgetting_epoch == 13 and state["meta"]["forgetting_epoch"] == 13
    restored = model_from_state(state)
    assert restored.forgetting_epoch == 13 and restored._decay_factors == model._decay_factors
    restored.unlearn_one(X[0], y[0], learned_at=0)
    model.unlearn_one(X[0], y[0], learned_at=0)
    assert_states_equal(restored, model)
    plain = MultinomialNB()
    plain.learn_many(X, y)
    old = plain.to_state()
    assert "forgetting_epoch" not in old["meta"]  # states of before stay as they were
    assert model_from_state(old).forgetting_epoch == 0
    for bad in ({"forgetting_epoch": 2, "decay_factors": [[0.5, 1]]}, {"forgetting_epoch": -1},
                {"forgetting_epoch": 1, "decay_factors": [[1.5, 1]]}):
        broken = model.to_state()
        broken["meta"].pop("decay_factors")
        broken["meta"].update(bad)
        with pytest.raises(ValueError, match="forgetting_epoch|decay_factors"):
            model_from_state(broken)


# ---- the feature budget ---------------------------------------------------------------------


def test_a_feature_evicted_by_the_budget_is_taken_back_as_far_as_it_goes():
    model = MultinomialNB(max_features=10, evict_every=5)
    for label, text in SEED_004_TRAIN:
        model.learn_one(word_counts(text), label)
    # the check after the 5th evicted "just", "plain", "boring", ... (see test_budget)
    assert "boring" not in model.feature_log_counts()
    model.unlearn_one(word_counts("just plain boring"), "-")  # its words are gone: nothing to take
    assert model.classes_ == ["+", "-"] and model._class_counts.tolist() == [2.0, 2.0]
    model.learn_one({"boring": 1}, "+")  # evicted, then learned again in another class
    model.unlearn_one({"boring": 3, "fun": 1}, "+")  # takes the 1 there is, and "fun"'s 1
    assert "boring" not in model.feature_log_counts() and "fun" not in model.feature_log_counts()
    with pytest.raises(NotLearned, match="class 'x'"):  # the class count is still checked
        model.unlearn_one({"fun": 1}, "x")
