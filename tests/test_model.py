"""The model core: seed figures, exactness of the batch path, merge, state and edge cases."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from stream_nb import BernoulliNB, CategoricalNB, ComplementNB, GaussianNB, MultinomialNB

from streams import SEED_004_TRAIN, gaussian_stream, prequential_loop, text_stream, word_counts

SEED_004_QUERY = "predictable with no fun"


def seed_004_model(**options) -> MultinomialNB:
    model = MultinomialNB(**options)
    for label, text in SEED_004_TRAIN:
        model.learn_one(word_counts(text), label)
    return model


# ---- seed 004: the worked example -----------------------------------------------------


def test_seed_004_drops_unknown_word_and_reproduces_the_worked_example():
    model = seed_004_model()
    likelihood = {c: math.exp(v) for c, v in model.joint_log_likelihood(word_counts(SEED_004_QUERY)).items()}
    # 3/5 * 2/34 * 2/34 * 1/34 and 2/5 * 1/29 * 1/29 * 2/29, "with" dropped
    assert likelihood["-"] == pytest.approx(6.106e-05, rel=1e-3)
    assert likelihood["+"] == pytest.approx(3.280e-05, rel=1e-3)
    assert likelihood["-"] == pytest.approx(3 / 5 * 4 / 34**3, rel=1e-9)
    assert likelihood["+"] == pytest.approx(2 / 5 * 2 / 29**3, rel=1e-9)
    proba = model.predict_proba_one(word_counts(SEED_004_QUERY))
    assert proba["-"] == pytest.approx(0.65054, abs=5e-6)
    assert model.predict_one(word_counts(SEED_004_QUERY)) == "-"


def test_seed_004_with_rivers_unknown_rule_smooths_the_unseen_word():
    model = seed_004_model(unknown="smooth")
    likelihood = {c: math.exp(v) for c, v in model.joint_log_likelihood(word_counts(SEED_004_QUERY)).items()}
    assert likelihood["-"] == pytest.approx(1.796e-06, rel=1e-3)
    assert likelihood["+"] == pytest.approx(1.131e-06, rel=1e-3)
    assert likelihood["-"] == pytest.approx(3 / 5 * 4 / 34**4, rel=1e-9)
    assert likelihood["+"] == pytest.approx(2 / 5 * 2 / 29**4, rel=1e-9)
    assert model.predict_proba_one(word_counts(SEED_004_QUERY))["-"] == pytest.approx(0.61357, abs=5e-6)


def test_seed_004_vocabulary_and_token_totals_match_the_text():
    model = seed_004_model()
    assert model.n_terms == 20
    state = model.to_state()
    totals = dict(zip(state["meta"]["classes"], state["arrays"]["class_totals"]))
    assert totals == {"-": 14.0, "+": 9.0}


def test_prior_smoothing_follows_lidstone_formula():
    model = seed_004_model(prior_alpha=0.5)
    # empty message: the posterior is the prior (N_c + l) / (N + K l)
    assert model.predict_proba_one({}) == pytest.approx({"-": 3.5 / 6, "+": 2.5 / 6}, rel=1e-12)


# ---- batch path == per-event loop, exactly -------------------------------------------

COUNT_MODELS = [
    lambda: MultinomialNB(),
    lambda: MultinomialNB(unknown="smooth"),
    lambda: MultinomialNB(alpha=0),
    lambda: MultinomialNB(alpha=0.3, prior_alpha=1.0),
    lambda: MultinomialNB(n_hash_buckets=64),
    lambda: ComplementNB(),
    lambda: ComplementNB(alpha=0),
    lambda: BernoulliNB(),
    lambda: BernoulliNB(alpha=0),
    lambda: BernoulliNB(unknown="smooth", prior_alpha=1.0, true_threshold=1.0),
]
ALL_MODELS = COUNT_MODELS + [lambda: CategoricalNB(), lambda: CategoricalNB(alpha=0)]


def model_id(make) -> str:
    model = make()
    return f"{type(model).__name__}{model._params()}"


@pytest.mark.parametrize("make", ALL_MODELS, ids=model_id)
def test_predict_learn_many_equals_the_per_event_loop_exactly(make):
    X, y = text_stream(seed=11, n_events=1500)
    expected = prequential_loop(make(), X, y)
    batched = make().predict_learn_many(X, y)
    assert batched == expected  # exact float equality, every event
    assert sum(1 for p in batched if p) > 1400


def test_gaussian_predict_learn_many_equals_the_per_event_loop_exactly():
    X, y = gaussian_stream(seed=5, n_events=800)
    assert GaussianNB().predict_learn_many(X, y) == prequential_loop(GaussianNB(), X, y)


@pytest.mark.parametrize("make", COUNT_MODELS[:1] + COUNT_MODELS[5:6] + COUNT_MODELS[7:8], ids=model_id)
def test_fractional_weights_keep_batch_and_loop_equal(make):
    X, y = text_stream(seed=3, n_events=400)
    a, b = make(), make()
    a.learn_one({"w1": 1}, "class0", w=0.3)  # counts are no longer whole numbers
    b.learn_one({"w1": 1}, "class0", w=0.3)
    X = [{k: v * 0.7 for k, v in x.items()} for x in X] if not isinstance(a, BernoulliNB) else X
    assert b.predict_learn_many(X, y) == prequential_loop(a, X, y)


def test_predict_learn_many_across_chunk_boundaries_equals_loop(monkeypatch):
    import stream_nb.model.base as base

    monkeypatch.setattr(base, "BATCH_CHUNK", 97)
    X, y = text_stream(seed=2, n_events=500)
    assert MultinomialNB().predict_learn_many(X, y) == prequential_loop(MultinomialNB(), X, y)


@pytest.mark.parametrize("make", ALL_MODELS + [lambda: GaussianNB()], ids=model_id)
def test_learn_many_equals_repeated_learn_one(make):
    X, y = (gaussian_stream if make().__class__ is GaussianNB else text_stream)(seed=4, n_events=600)
    X, y = [x for x, c in zip(X, y) if c is not None], [c for c in y if c is not None]
    one, many = make(), make()
    for x, label in zip(X, y):
        one.learn_one(x, label)
    many.learn_many(X, y)
    probe, _ = (gaussian_stream if isinstance(one, GaussianNB) else text_stream)(seed=99, n_events=200)
    assert many.predict_proba_many(probe) == [one.predict_proba_one(x) for x in probe]
    assert _state_equal(one.to_state(), many.to_state())


@pytest.mark.parametrize("make", ALL_MODELS + [lambda: GaussianNB()], ids=model_id)
def test_predict_and_joint_one_is_the_two_calls_it_replaces(make):
    """The prequential step scores an event once for both its prediction and its training
    decision: the same Posterior (its log scores too) and the same joint as the two calls."""
    stream = gaussian_stream if make().__class__ is GaussianNB else text_stream
    X, y = stream(seed=8, n_events=300)
    model = make()
    assert model.predict_and_joint_one(X[0]) == ({}, {})
    for x, label in zip(X, y):
        proba, joint = model.predict_and_joint_one(x)
        alone = model.predict_proba_one(x)
        assert proba == alone and joint == model.joint_log_likelihood(x)
        assert getattr(proba, "log_scores", None) == getattr(alone, "log_scores", None)
        if label is not None:
            model.learn_one(x, label)


# ---- single-event path == kernel, bit for bit ------------------------------------------

EVENT_PATH_MODELS = [
    lambda: MultinomialNB(),
    lambda: MultinomialNB(unknown="smooth"),
    lambda: MultinomialNB(alpha=0),
    lambda: MultinomialNB(alpha=0.3, prior_alpha=1),
    lambda: MultinomialNB(n_hash_buckets=16, unknown="smooth", prior_alpha=0.5),
    lambda: ComplementNB(),
    lambda: ComplementNB(alpha=0),
    lambda: ComplementNB(unknown="smooth", prior_alpha=0.5),
    lambda: ComplementNB(alpha=0.3, n_hash_buckets=16),
    lambda: BernoulliNB(),
    lambda: BernoulliNB(alpha=0),
    lambda: BernoulliNB(unknown="smooth", prior_alpha=1.0, true_threshold=1.0),
    lambda: BernoulliNB(alpha=0, true_threshold=1.0),
    lambda: BernoulliNB(alpha=0.5, n_hash_buckets=16, true_threshold=0.5),
]


def _mixed_stream(seed: int, n_events: int) -> list[tuple[dict, object, float]]:
    """(x, label, weight): four classes (the last arriving late), fractional and zero values,
    empty and unlabeled events, unknown words; whole weights first, fractional ones later."""
    rng = np.random.default_rng(seed)
    events = []
    for i in range(n_events):
        n_classes = 3 if i < n_events // 3 else 4
        label = int(rng.integers(n_classes))
        x: dict = {}
        for _ in range(int(rng.integers(0, 9))):
            word = f"w{int(rng.integers(60)) if rng.random() < 0.8 else 60 + i}"
            x[word] = [1, 2, 3, 0, 0.5, 1.7, 2.25][int(rng.integers(7))]
        weight = 1.0 if i < n_events // 2 else [1.0, 2, 0.3, 1.25, 0.0][int(rng.integers(5))]
        events.append((x, f"class{label}" if rng.random() < 0.75 else None, weight))
    return events


def _bits(mapping: dict) -> dict:
    return {label: float(value).hex() for label, value in mapping.items()}


def _state_bits(model) -> tuple:
    state = model.to_state()
    arrays = {name: array.tobytes() for name, array in state["arrays"].items()}
    extra = ()
    if isinstance(model, BernoulliNB):
        extra = ([h.tobytes() for h in model._histograms], list(model._top_counts))
    return json.dumps(state["meta"], sort_keys=True), arrays, extra


@pytest.mark.parametrize("make", EVENT_PATH_MODELS, ids=model_id)
def test_single_event_path_equals_the_kernel_bit_for_bit(make):
    fast, kernel = make(), make()
    assert fast._event_path
    kernel._event_path = False  # every call through the batch kernel, on a batch of one
    for x, label, weight in _mixed_stream(seed=5, n_events=300):
        expected = kernel.predict_proba_one(x)
        assert _bits(fast.predict_proba_one(x)) == _bits(expected)
        assert _bits(fast.predict_proba_many([x])[0]) == _bits(expected)
        assert _bits(fast.joint_log_likelihood(x)) == _bits(kernel.joint_log_likelihood(x))
        if label is not None:
            fast.learn_one(x, label, w=weight)
            kernel.learn_one(x, label, w=weight)
            assert _state_bits(fast) == _state_bits(kernel)
    assert not fast._integral and fast.n_terms >= 16  # both regimes were exercised


# ---- merge and state ------------------------------------------------------------------


def _state_equal(a: dict, b: dict) -> bool:
    if json.dumps(a["meta"], sort_keys=True) != json.dumps(b["meta"], sort_keys=True):
        return False
    return a["arrays"].keys() == b["arrays"].keys() and all(
        np.array_equal(a["arrays"][k], b["arrays"][k]) for k in a["arrays"]
    )


@pytest.mark.parametrize("make", ALL_MODELS, ids=model_id)
def test_merge_of_two_halves_equals_the_whole(make):
    X, y = text_stream(seed=21, n_events=1200, labeled_fraction=1.0)
    whole, first, second = make(), make(), make()
    whole.learn_many(X, y)
    first.learn_many(X[:500], y[:500])
    second.learn_many(X[500:], y[500:])
    merged = first.merge(second)
    probe, _ = text_stream(seed=77, n_events=300)
    assert merged.predict_proba_many(probe) == whole.predict_proba_many(probe)
    assert merged.events_learned == whole.events_learned == 1200


def test_gaussian_merge_uses_the_parallel_variance_formula():
    X, y = gaussian_stream(seed=8, n_events=1000, labeled_fraction=1.0)
    whole, first, second = GaussianNB(), GaussianNB(), GaussianNB()
    whole.learn_many(X, y)
    first.learn_many(X[:400], y[:400])
    second.learn_many(X[400:], y[400:])
    merged = first.merge(second)
    # Welford and Chan's formula round differently: equal to ~1e-12, not bit for bit.
    for p, q in zip(merged.predict_proba_many(X[:200]), whole.predict_proba_many(X[:200])):
        assert p.keys() == q.keys()
        assert max(abs(p[c] - q[c]) for c in p) < 1e-12
    assert np.allclose(merged.to_state()["arrays"]["m2"], whole.to_state()["arrays"]["m2"], rtol=1e-12)


def _through_files(state: dict) -> dict:
    """Round-trip a state through JSON text and an .npz without pickle, as a checkpoint would."""
    meta = json.loads(json.dumps(state["meta"]))
    buffer = io.BytesIO()
    np.savez(buffer, **state["arrays"])
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as arrays:
        return {"meta": meta, "arrays": {k: arrays[k] for k in arrays.files}}


@pytest.mark.parametrize("make", ALL_MODELS + [lambda: GaussianNB()], ids=model_id)
def test_from_state_of_to_state_restores_the_model_exactly(make):
    model = make()
    stream = gaussian_stream if isinstance(model, GaussianNB) else text_stream
    X, y = stream(seed=31, n_events=700)
    model.predict_learn_many(X[:500], y[:500])
    restored = type(model).from_state(_through_files(model.to_state()))
    assert _state_equal(restored.to_state(), model.to_state())
    # the restored model goes on exactly as the original does
    assert restored.predict_learn_many(X[500:], y[500:]) == model.predict_learn_many(X[500:], y[500:])


def test_from_state_refuses_another_kind():
    state = MultinomialNB().to_state()
    with pytest.raises(ValueError, match="MultinomialNB"):
        BernoulliNB.from_state(state)


# ---- edge cases -----------------------------------------------------------------------


def test_untrained_model_answers_empty_like_river():
    model = MultinomialNB()
    assert model.predict_proba_one({"a": 1}) == {}
    assert model.predict_one({"a": 1}) is None
    assert model.joint_log_likelihood({"a": 1}) == {}
    assert model.predict_learn_many([{"a": 1}, {"b": 1}], [None, "x"]) == [{}, {}]


@pytest.mark.parametrize("make", COUNT_MODELS, ids=model_id)
def test_mle_alpha_zero_never_gives_nan(make):
    model = make()
    model.learn_many([{"only_a": 1, "shared": 1}, {"only_b": 2, "shared": 1}, {}], ["a", "b", "b"])
    for x in ({"only_a": 1}, {"only_b": 1}, {"only_a": 1, "only_b": 1}, {}, {"never": 3}, {"shared": 2}):
        proba = model.predict_proba_one(x)
        assert set(proba) == {"a", "b"}
        assert all(math.isfinite(p) and 0 <= p <= 1 for p in proba.values())
        assert sum(proba.values()) == pytest.approx(1.0)


def test_mle_feature_seen_in_one_class_decides_and_contradiction_falls_back_to_prior():
    model = MultinomialNB(alpha=0)
    model.learn_many([{"spam_word": 1}, {"ham_word": 1}, {"ham_word": 1}], ["spam", "ham", "ham"])
    assert model.predict_proba_one({"spam_word": 1}) == {"ham": 0.0, "spam": 1.0}
    jll = model.joint_log_likelihood({"spam_word": 1, "ham_word": 1})
    assert jll == {"ham": -math.inf, "spam": -math.inf}  # honest zero likelihood
    # every class has zero likelihood: the posterior is the prior, not NaN
    assert model.predict_proba_one({"spam_word": 1, "ham_word": 1}) == pytest.approx({"ham": 2 / 3, "spam": 1 / 3})


def test_single_class_gives_probability_one():
    for model in (MultinomialNB(), BernoulliNB(), ComplementNB(), CategoricalNB(), GaussianNB()):
        model.learn_one({"a": 1.0}, "only")
        assert model.predict_proba_one({"a": 1.0}) == {"only": 1.0}
        assert model.predict_one({"b": 2.0}) == "only"


def test_empty_message_scores_with_the_prior_alone():
    model = seed_004_model()
    assert model.predict_proba_one({}) == pytest.approx({"-": 0.6, "+": 0.4})
    model.learn_one({}, "+")  # an empty labeled message counts as a document with no words
    assert model.predict_proba_one({}) == pytest.approx({"-": 0.5, "+": 0.5})


def test_zero_weight_learns_nothing():
    model = seed_004_model()
    before = model.to_state()
    model.learn_one({"new": 5}, "brand-new-class", w=0)
    model.learn_one({"fun": 5}, "+", w=0.0)
    assert _state_equal(model.to_state(), before)
    assert "brand-new-class" not in model.predict_proba_one({"fun": 1})


def test_sample_weight_counts_like_repetition():
    weighted, repeated = MultinomialNB(), MultinomialNB()
    weighted.learn_one({"a": 1, "b": 2}, "x", w=3)
    weighted.learn_one({"c": 1}, "y")
    for _ in range(3):
        repeated.learn_one({"a": 1, "b": 2}, "x")
    repeated.learn_one({"c": 1}, "y")
    assert weighted.predict_proba_one({"a": 1, "c": 1}) == repeated.predict_proba_one({"a": 1, "c": 1})


def test_classes_appear_dynamically_and_in_canonical_order():
    model = MultinomialNB()
    X = [{"a": 1}, {"b": 1}, {"c": 1}, {"a": 1}]
    out = model.predict_learn_many(X, ["zeta", None, "alpha", None])
    assert out[0] == {} and list(out[1]) == ["zeta"] and set(out[3]) == {"alpha", "zeta"}
    assert model.classes_ == ["alpha", "zeta"]
    mixed = MultinomialNB()
    mixed.learn_many([{"a": 1}, {"b": 1}, {"c": 1}], ["b", 2, 1])
    assert mixed.classes_ == [1, 2, "b"]


def test_unknown_feature_in_unlabeled_event_does_not_grow_the_vocabulary():
    model = seed_004_model()
    model.predict_learn_many([{"never-seen": 1}] * 5, [None] * 5)
    assert model.n_terms == 20
    assert len(model.to_state()["meta"]["vocabulary"]["names"]) == 20


def test_feature_hashing_bounds_the_state():
    model = MultinomialNB(n_hash_buckets=32)
    X, y = text_stream(seed=1, n_events=500, vocabulary=2000, labeled_fraction=1.0)
    model.learn_many(X, y)
    assert model.to_state()["arrays"]["feature_counts"].shape == (32, 3)
    restored = MultinomialNB.from_state(_through_files(model.to_state()))
    assert restored.predict_proba_many(X[:50]) == model.predict_proba_many(X[:50])


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda m: m.learn_one({"a": -1}, "x"), "negative"),
        (lambda m: m.learn_one({"a": float("nan")}, "x"), "finite"),
        (lambda m: m.learn_one({"a": "3"}, "x"), "real numbers"),
        (lambda m: m.learn_one(["a"], "x"), "dict"),
        (lambda m: m.learn_one({"a": 1}, 1.5), "labels"),
        (lambda m: m.learn_one({"a": 1}, None), "label"),
        (lambda m: m.learn_one({"a": 1}, "x", w=-1), "weights"),
        (lambda m: m.predict_learn_many([{"a": 1}], ["x", "y"]), "labels"),
    ],
)
def test_bad_input_raises_a_clear_error_and_changes_nothing(call, error):
    model = seed_004_model()
    before = model.to_state()
    with pytest.raises((TypeError, ValueError), match=error):
        call(model)
    assert _state_equal(model.to_state(), before)


def test_bad_batch_rejected_whole_even_after_good_events():
    model = seed_004_model()
    before = model.to_state()
    with pytest.raises(ValueError):
        model.predict_learn_many([{"good": 1}, {"bad": -2}], ["+", "-"])
    assert _state_equal(model.to_state(), before)


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: MultinomialNB(alpha=-1), "alpha"),
        (lambda: MultinomialNB(alpha=float("nan")), "alpha"),
        (lambda: MultinomialNB(prior_alpha="1"), "prior_alpha"),
        (lambda: MultinomialNB(unknown="drop"), "unknown"),
        (lambda: MultinomialNB(alpha=0, unknown="smooth"), "alpha = 0"),
        (lambda: MultinomialNB(n_hash_buckets=0), "n_hash_buckets"),
        (lambda: CategoricalNB(categories={"f": []}), "categories"),
        (lambda: GaussianNB(var_smoothing=-1), "var_smoothing"),
    ],
)
def test_bad_options_are_refused_naming_the_option(make, error):
    with pytest.raises(ValueError, match=error):
        make()


def test_categorical_declared_categories_fix_the_value_count_and_refuse_others():
    model = CategoricalNB(categories={"colour": ["red", "green", "blue"]})
    model.learn_one({"colour": "red"}, "a")
    model.learn_one({"colour": "green"}, "b")
    # P(red | a) = (1 + 1) / (1 + 3), P(red | b) = 1 / 4, priors 1/2
    assert model.predict_proba_one({"colour": "red"}) == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    with pytest.raises(ValueError, match="declared"):
        model.learn_one({"colour": "purple"}, "a")


def test_gaussian_variance_floor_keeps_a_single_observation_finite():
    model = GaussianNB()
    model.learn_one({"x": 1.0}, "a")
    model.learn_one({"x": 1.0}, "b")
    model.learn_one({"x": 3.0}, "b")
    proba = model.predict_proba_one({"x": 1.0})
    assert all(math.isfinite(p) for p in proba.values())
    assert proba["a"] > 0.999  # zero-variance class at its own mean wins
    assert model.variance_floor() == pytest.approx(1e-9 * (8 / 3 - 25 / 9 + 1 - 0))  # 1e-9 * pooled var


def test_works_inside_river_evaluate_and_pipelines():
    from river import evaluate, feature_extraction, metrics

    texts = [({"text": text}, label) for label, text in SEED_004_TRAIN] * 4
    pipeline = feature_extraction.BagOfWords(on="text") | MultinomialNB()
    accuracy = evaluate.progressive_val_score(texts, pipeline, metrics.Accuracy()).get()
    # the same stream by hand: predict (River skips the untrained first event), then learn
    tokens = feature_extraction.BagOfWords(on="text")
    model, hits, scored = MultinomialNB(), 0, 0
    for x, label in texts:
        guess = model.predict_one(tokens.transform_one(x))
        if guess is not None:
            hits, scored = hits + (guess == label), scored + 1
        model.learn_one(tokens.transform_one(x), label)
    assert scored == 19
    assert accuracy == hits / scored
    assert hits == 17


# ---- SparseBatch: the columnar input of the batch methods ------------------------------


def test_sparse_batch_with_repeated_names_equals_the_dicts_exactly():
    from stream_nb.model import SparseBatch

    X, y = text_stream(seed=13, n_events=900)
    names, lengths = [], []
    for x in X:  # each count c becomes c repeats of the name, order of first appearance kept
        tokens = [name for name, count in x.items() for _ in range(count)]
        names.extend(tokens)
        lengths.append(len(tokens))
    batch = SparseBatch(names, np.array(lengths))
    assert batch.to_dicts() == [{k: float(v) for k, v in x.items()} for x in X]
    for make in (MultinomialNB, ComplementNB, BernoulliNB):
        assert make().predict_learn_many(batch, y) == make().predict_learn_many(X, y)
        assert make().predict_learn_many(batch, y) == prequential_loop(make(), X, y)


def test_sparse_batch_slices_by_events():
    from stream_nb.model import SparseBatch

    batch = SparseBatch(["a", "b", "a", "c", "d"], np.array([2, 0, 3]), np.array([1.0, 2, 3, 4, 5]))
    assert batch[1:3].to_dicts() == [{}, {"a": 3.0, "c": 4.0, "d": 5.0}]
    assert len(batch[0:1]) == 1 and batch[0:1].names == ["a", "b"]


def test_sparse_batch_shape_errors_are_clear():
    from stream_nb.model import SparseBatch

    model = MultinomialNB()
    with pytest.raises(ValueError, match="lengths add up"):
        model.predict_learn_many(SparseBatch(["a"], np.array([2])), ["x"])
    with pytest.raises(ValueError, match="one number per name"):
        model.predict_learn_many(SparseBatch(["a", "b"], np.array([2]), np.array([1.0])), ["x"])
    assert model.classes_ == []


def test_text_featurizer_sparse_output_gives_the_same_answers_as_its_dicts():
    from stream_nb.features import TextFeaturizer

    from corpora import load_sms_spam

    rows = load_sms_spam()[:3000]
    texts, labels = [text for _, text in rows], [label for label, _ in rows]
    labels = [label if i % 5 else None for i, label in enumerate(labels)]  # some unlabeled
    for featurizer in (TextFeaturizer.river_compatible(), TextFeaturizer(binary=True, ngram_range=(1, 2))):
        dicts = featurizer.transform_many(texts)
        for make in (MultinomialNB, BernoulliNB, ComplementNB):
            in_chunks = make()
            chunked = []
            for start in range(0, len(texts), 500):
                chunked += in_chunks.predict_learn_many(featurizer.transform_sparse(texts[start:start + 500]),
                                                        labels[start:start + 500])
            assert chunked == make().predict_learn_many(dicts, labels)


# ---- training regimes -------------------------------------------------------------------------


@pytest.mark.parametrize("mode, margin", [("on_error", 0.0), ("thick_threshold", 3.0)])
def test_selective_training_equals_its_per_event_definition(mode, margin):
    from stream_nb.model.training import predict_learn, should_learn

    X, y = text_stream(seed=17, n_events=800)
    model = MultinomialNB()
    probabilities, learned = predict_learn(model, X, y, mode=mode, margin=margin)
    reference, expected_learned = MultinomialNB(), []
    for x, label, p in zip(X, y, probabilities):
        assert p == reference.predict_proba_one(x)
        decision = label is not None and should_learn(reference.joint_log_likelihood(x), label, mode, margin)
        if decision:
            reference.learn_one(x, label)
        expected_learned.append(decision)
    assert learned == expected_learned
    assert _state_equal(model.to_state(), reference.to_state())
    labeled = sum(label is not None for label in y)
    assert 0 < sum(learned) < labeled  # it skipped some, and learned some


@pytest.mark.parametrize("mode, margin", [("on_error", 0.0), ("thick_threshold", 50.0), ("thick_threshold", 5.0)])
@pytest.mark.parametrize("make", [MultinomialNB, ComplementNB, BernoulliNB])
def test_order_dependent_training_in_runs_equals_the_per_event_loop_on_sms(make, mode, margin):
    # The batch path scores runs of events under a guess (all learned, or none) and settles up
    # to the first decision that breaks it; every probability, decision and count must be the
    # per-event loop's. spam.toml's features, as the worker gives them (a SparseBatch), with
    # unlabeled events mixed in, in uneven batches.
    from stream_nb.config import load_config
    from stream_nb.model.training import predict_learn, should_learn

    from corpora import load_sms_spam

    rows = load_sms_spam()[:2500]
    featurizer = load_config("configs/spam.toml").build_featurizer()
    texts = [text for _, text in rows]
    labels = [label if i % 7 else None for i, (label, _) in enumerate(rows)]
    model, probabilities, learned = make(alpha=0.2), [], []
    for start, stop in [(0, 1), (1, 40), (40, 1000), (1000, 1003), (1003, 2500)]:
        got, flags = predict_learn(model, featurizer.transform_sparse(texts[start:stop]), labels[start:stop],
                                   mode=mode, margin=margin)
        probabilities += got
        learned += flags
    reference = make(alpha=0.2)
    for i, (x, label) in enumerate(zip(featurizer.transform_many(texts), labels)):
        assert probabilities[i] == reference.predict_proba_one(x), i
        decision = label is not None and should_learn(reference.joint_log_likelihood(x), label, mode, margin)
        assert learned[i] == decision, i
        if decision:
            reference.learn_one(x, label)
    assert _state_equal(model.to_state(), reference.to_state())
    assert 0 < sum(learned) < sum(label is not None for label in labels)


@pytest.mark.parametrize("make", [MultinomialNB, ComplementNB])
def test_runs_keep_the_vocabulary_learn_one_builds_zero_values_included(make):
    # learn_one puts every name of a learned event in the vocabulary, zero values too, in order
    # of first learning; the runs encode the whole batch up front and must end with the same.
    from stream_nb.model.training import predict_learn, should_learn

    X, y = text_stream(seed=23, n_events=600)
    X = [{**x, f"zero{i % 13}": 0, f"late{i // 50}": 1} for i, x in enumerate(X)]
    model = make()
    predict_learn(model, X, y, mode="thick_threshold", margin=4.0)
    reference = make()
    for x, label in zip(X, y):
        if label is not None and should_learn(reference.joint_log_likelihood(x), label, "thick_threshold", 4.0):
            reference.learn_one(x, label)
    assert model.to_state()["meta"]["vocabulary"] == reference.to_state()["meta"]["vocabulary"]
    assert _state_equal(model.to_state(), reference.to_state())


def test_thick_threshold_decision_follows_the_log_odds_margin():
    from stream_nb.model.training import should_learn

    jll = {"ham": -10.0, "spam": -14.0}  # log-odds for ham: 4 nats
    assert should_learn(jll, "ham", "thick_threshold", 5.0) is True  # right, but within the margin
    assert should_learn(jll, "ham", "thick_threshold", 4.0) is False  # right, and sure enough
    assert should_learn(jll, "spam", "thick_threshold", 0.0) is True  # wrong
    assert should_learn(jll, "ham", "on_error", 100.0) is False
    assert should_learn(jll, "new", "on_error", 0.0) is True  # a class never seen
    assert should_learn({"ham": float("nan"), "spam": float("nan")}, "ham", "thick_threshold", 1.0) is True
    assert should_learn({}, "ham", "on_error", 0.0) is True


def test_thick_threshold_per_sqrt_feature_divides_the_log_odds_by_the_root_of_the_event_size():
    from stream_nb.model.training import log_odds_per_sqrt_feature, should_learn

    jll = {"ham": -10.0, "spam": -30.0}  # log-odds for ham: 20 nats
    assert log_odds_per_sqrt_feature(20.0, 25) == 4.0
    assert log_odds_per_sqrt_feature(-3.0, 0) == -3.0  # an event without features: as if one
    assert should_learn(jll, "ham", "thick_threshold", 5.0, n_features=25) is True  # 4 < 5
    assert should_learn(jll, "ham", "thick_threshold", 4.0, n_features=25) is False  # 4 >= 4
    assert should_learn(jll, "ham", "thick_threshold", 5.0, n_features=16) is False  # 5 >= 5
    assert should_learn(jll, "ham", "thick_threshold", 5.0) is False  # 20 nats, unscaled
    assert should_learn(jll, "spam", "thick_threshold", 0.0, n_features=4) is True  # wrong


@pytest.mark.parametrize("make", [MultinomialNB, ComplementNB])
def test_margin_per_sqrt_feature_equals_its_per_event_definition_on_sms_in_batches(make):
    # spam.toml's features as the worker gives them (a SparseBatch) and as dicts, uneven batches,
    # unlabeled events mixed in: every probability, decision and count is the per-event loop's,
    # whose margin is the log-odds over sqrt(len(x)) written out here.
    from stream_nb.config import load_config
    from stream_nb.model.training import predict_learn

    from corpora import load_sms_spam

    rows = load_sms_spam()[:1500]
    featurizer = load_config("configs/spam.toml").build_featurizer()
    texts = [text for _, text in rows]
    labels = [label if i % 7 else None for i, (label, _) in enumerate(rows)]
    learned_by_input = []
    for sparse in (True, False):
        model, probabilities, learned = make(alpha=0.2), [], []
        for start, stop in [(0, 1), (1, 40), (40, 1000), (1000, 1500)]:
            X = (featurizer.transform_sparse(texts[start:stop]) if sparse
                 else featurizer.transform_many(texts[start:stop]))
            got, flags = predict_learn(model, X, labels[start:stop], mode="thick_threshold", margin=3.0,
                                       margin_scale="sqrt_features")
            probabilities += got
            learned += flags
        reference = make(alpha=0.2)
        for i, (x, label) in enumerate(zip(featurizer.transform_many(texts), labels)):
            assert probabilities[i] == reference.predict_proba_one(x), i
            decision = False
            if label is not None:
                joint = reference.joint_log_likelihood(x)
                others = [score for cls, score in joint.items() if cls != label]
                decision = (label not in joint or not others or max(joint, key=joint.get) != label
                            or not joint[label] - max(others) >= 3.0 * math.sqrt(len(x)))
            assert learned[i] == decision, i
            if decision:
                reference.learn_one(x, label)
        assert _state_equal(model.to_state(), reference.to_state())
        learned_by_input.append(learned)
    assert learned_by_input[0] == learned_by_input[1]
    _, unscaled = predict_learn(make(alpha=0.2), featurizer.transform_many(texts), labels, mode="thick_threshold",
                                margin=3.0)
    assert sum(learned_by_input[0]) > sum(unscaled)  # 3 nats per sqrt(feature) learns more than 3 nats
    with pytest.raises(ValueError, match="margin scale"):
        predict_learn(make(), [], [], mode="thick_threshold", margin=3.0, margin_scale="sqrt")


@pytest.mark.parametrize("mode, margin", [("all", 0.0), ("on_error", 0.0), ("thick_threshold", 50.0)])
@pytest.mark.parametrize("make", [MultinomialNB, BernoulliNB, ComplementNB])
def test_a_bad_event_at_the_end_refuses_the_batch_before_anything_is_learned(make, mode, margin):
    from stream_nb.model.training import predict_learn

    X, y = text_stream(seed=5, n_events=300)
    model = make()
    model.learn_many(X[:50], y[:50])
    before, learned_before = model.to_state(), model.events_learned
    with pytest.raises(ValueError, match="finite"):  # every variant refuses an infinite value
        predict_learn(model, [*X[50:], {"x": math.inf}], [*y[50:], "spam"], mode=mode, margin=margin)
    assert _state_equal(model.to_state(), before)
    # The good events, one batch after the refusal, are learned exactly once.
    _, learned = predict_learn(model, X[50:], y[50:], mode=mode, margin=margin)
    reference = make()
    reference.learn_many(X[:50], y[:50])
    predict_learn(reference, X[50:], y[50:], mode=mode, margin=margin)
    assert _state_equal(model.to_state(), reference.to_state())
    assert model.events_learned == learned_before + sum(learned) > learned_before


@pytest.mark.parametrize("mode", ["all", "on_error", "thick_threshold"])
def test_learn_decisions_of_a_window_equal_should_learn_row_by_row(mode):
    from stream_nb.model.training import learn_decisions, should_learn

    rng = np.random.default_rng(5)
    n, n_classes = 4_000, 3
    # Scores on a coarse grid, so ties (the first largest class is predicted) and log-odds equal
    # to the margin occur; some rows with infinities and NaN; classes missing for some events.
    scores = rng.integers(-8, 2, size=(n, n_classes)).astype(float)
    odd = rng.random((n, n_classes))
    scores[odd < 0.02] = -np.inf
    scores[(odd >= 0.02) & (odd < 0.03)] = np.inf
    scores[(odd >= 0.03) & (odd < 0.04)] = np.nan
    active = rng.random((n, n_classes)) < 0.85
    labels = rng.integers(-1, n_classes, size=n)
    for margin in (0.0, 1.0, 2.5):
        flags = learn_decisions(scores, active, labels, mode, margin)
        expected = [label >= 0 and should_learn({c: float(scores[i, c]) for c in range(n_classes) if active[i, c]},
                                                 int(label), mode, margin)
                    for i, label in enumerate(labels.tolist())]
        assert flags.tolist() == expected
        assert 0 < sum(expected) < (labels >= 0).sum() or mode == "all"  # both decisions occur


# ---- pandas DataFrames (River's batch protocol) -------------------------------------------


def test_a_dataframe_gives_what_its_rows_as_dicts_give():
    import pandas as pd
    from sklearn.datasets import load_iris

    from stream_nb.checkpoint.digest import state_digest

    # Gaussian: every cell is a measurement, 0.0 included; NaN is a missing value
    X, y = load_iris(return_X_y=True)
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    frame.loc[3, "a"] = 0.0
    frame.loc[5, "b"] = float("nan")
    rows = [{k: v for k, v in row.items() if v == v} for row in frame.to_dict(orient="records")]
    from_frame, from_rows = GaussianNB(), GaussianNB()
    from_frame.learn_many(frame, pd.Series(y))
    from_rows.learn_many(rows, y.tolist())
    assert state_digest(from_frame.to_state()) == state_digest(from_rows.to_state())
    proba = from_frame.predict_proba_many(frame)
    assert isinstance(proba, pd.DataFrame) and list(proba.index) == list(frame.index)
    assert proba.to_dict(orient="records") == from_rows.predict_proba_many(rows)

    # Multinomial: a document-term matrix, where a 0 count is an absent word
    counts = pd.DataFrame({"cash": [2, 0, 1, 0], "lunch": [0, 1, 0, 3], "win": [1, 0, 0, 0]})
    labels = ["spam", "ham", "spam", "ham"]
    from_frame, from_rows = MultinomialNB(), MultinomialNB()
    from_frame.learn_many(counts, labels)
    from_rows.learn_many([{k: v for k, v in row.items() if v} for row in counts.to_dict(orient="records")], labels)
    assert state_digest(from_frame.to_state()) == state_digest(from_rows.to_state())
    assert list(from_frame.predict_many(counts)) == ["spam", "ham", "spam", "ham"]


def test_column_names_read_as_the_list_they_stand_for():
    from stream_nb.model.base import ColumnNames

    by_column = ["spam", "ham", "eggs"]
    names = ColumnNames(by_column, np.array([2, -1, 0, -1, 2]), np.array([-1, 0, -1, 1, -1]), ["new", "newer"])
    assert list(names) == ["eggs", "new", "spam", "newer", "eggs"] and len(names) == 5
    assert names[1] == "new" and names[-1] == "eggs" and names[-2] == "newer"
    assert names[1:4] == ["new", "spam", "newer"] and isinstance(names[1:4], ColumnNames)
    assert names == ColumnNames(by_column, np.array([2, -1, 0, -1, 2]), np.array([-1, 0, -1, 1, -1]), ["new", "newer"])
    assert names != ["eggs"] and names != "eggs"
    by_column.append("later")  # a vocabulary only appends: the names stay right
    assert list(names[0:3]) == ["eggs", "new", "spam"]
    with pytest.raises(ValueError, match="2 columns for 1 ranks"):
        ColumnNames(by_column, np.array([0, 1]), np.array([-1]), [])


def test_a_vocabulary_of_repeated_names_is_refused():
    from stream_nb.model.vocabulary import Vocabulary

    with pytest.raises(ValueError, match="distinct"):
        Vocabulary.from_names(["a", "b", "a"])
    vocabulary = Vocabulary.from_names(["a", "b"])
    vocabulary.add(["c", "a", "d", "c"])
    assert vocabulary.names() == vocabulary.by_column() == ["a", "b", "c", "d"]
    assert vocabulary.add_unknown(["e", "f", "e"]) == {"e": 4, "f": 5}
    assert vocabulary.by_column()[4:] == ["e", "f"] and vocabulary.lookup(["f", "x"]).tolist() == [5, -1]
    vocabulary.add_new(["g", "h"])
    assert vocabulary.by_column()[6:] == ["g", "h"] and vocabulary.mapping() == dict(zip("abcdefgh", range(8)))


def test_first_occurrences_are_uniques_values_in_order_of_first_appearance():
    """_numerics.first_occurrences against its definition (np.unique's values by return_index),
    on generated keys: empty, one, all alike, few distinct among many, most distinct; and keys
    numbered by first appearance (a featuriser's ranks), whole and as subsequences, which take
    the path without np.minimum.at, beside near misses that must not ([0, 2, 1]: a first
    occurrence below the running maximum)."""
    from stream_nb.model._numerics import first_occurrences

    rng = np.random.default_rng(11)
    cases = [np.zeros(0, dtype=np.int64), np.array([3]), np.full(50, 2), np.array([0, 2, 1]), np.array([1, 0, 1]),
             np.array([0, 1, 1, 0, 3, 2]), np.array([5, 5, 6, 5, 7])]
    for length, n_keys in [(1000, 7), (1000, 5000), (200000, 150000), (30, 30)]:
        cases.append(rng.integers(0, n_keys, length))
    for length, fresh in [(1000, 0.3), (200000, 0.35), (40, 0.9)]:
        ranks, next_rank = [], 0
        for is_new, pick in zip((rng.random(length) < fresh).tolist(), rng.random(length).tolist()):
            ranks.append(next_rank if is_new or next_rank == 0 else int(pick * next_rank))
            next_rank += ranks[-1] == next_rank
        ranks = np.array(ranks)
        cases += [ranks, ranks[rng.random(length) < 0.6], ranks[::-1].copy()]
    for keys in cases:
        keys = keys.astype(np.int64)
        n_keys = int(keys.max()) + 1 + int(rng.integers(0, 5)) if len(keys) else 0
        values, first_at = np.unique(keys, return_index=True)
        got = first_occurrences(keys, n_keys)
        assert got.dtype == np.int64 and got.tolist() == values[np.argsort(first_at, kind="stable")].tolist()


@pytest.mark.parametrize("make", [lambda: MultinomialNB(alpha=0.5), lambda: ComplementNB(alpha=0.5),
                                  lambda: BernoulliNB(), lambda: BernoulliNB(true_threshold=1.0)])
def test_a_batch_of_ones_checks_as_its_values_written_out(make):
    """A SparseBatch without values (every value 1, checked by checking one) and the same batch
    with its ones written out: the same predictions and the same state, bit for bit (for a
    Bernoulli threshold of 1, every feature absent alike)."""
    from stream_nb.checkpoint.digest import state_digest
    from stream_nb.model import SparseBatch

    rng = np.random.default_rng(5)
    names = [f"w{k}" for k in rng.integers(0, 40, 600).tolist()]
    lengths = np.array([6] * 100)
    labels = rng.choice(["ham", "spam"], 100).tolist()
    models = [make(), make()]
    results = []
    for model, values in zip(models, [None, np.ones(len(names))]):
        batch = SparseBatch(names, lengths, values)
        model.learn_many(batch[:50], labels[:50])
        results.append([sorted(p.items()) for p in model.predict_proba_many(batch[50:])])
        model.learn_many(batch[50:], labels[50:])
    assert results[0] == results[1]
    assert state_digest(models[0].to_state()) == state_digest(models[1].to_state())
