"""The score of a prediction: log-odds of a positive class and log posteriors (model.posterior).

Figures are computed here independently of the module: from the joint log likelihoods the model
reports (joint_log_likelihood, the kernel's s_c) with the plain formula, and against logit(P)."""

from __future__ import annotations

import math
import struct

import pytest

from stream_nb import BernoulliNB, CategoricalNB, ComplementNB, GaussianNB, MultinomialNB
from stream_nb.model.decision import band_verdict, obvious_positive, score_verdict, verdict
from stream_nb.model.posterior import Posterior, log_odds_of, log_posteriors_of, positive_score
from stream_nb.model.training import predict_learn

from streams import gaussian_stream, prequential_loop, text_stream

MODELS = [
    lambda: MultinomialNB(),
    lambda: MultinomialNB(alpha=0),
    lambda: MultinomialNB(alpha=0.5, prior_alpha=1.0, unknown="smooth"),
    lambda: BernoulliNB(),
    lambda: BernoulliNB(alpha=0),
    lambda: ComplementNB(),
    lambda: ComplementNB(alpha=0),
    lambda: CategoricalNB(),
    lambda: GaussianNB(),
]


def model_id(make) -> str:
    model = make()
    return f"{type(model).__name__}{model._params()}"


def stream_for(model, seed: int, n_events: int, n_classes: int):
    if isinstance(model, GaussianNB):
        return gaussian_stream(seed=seed, n_events=n_events, n_classes=n_classes)
    return text_stream(seed=seed, n_events=n_events, n_classes=n_classes)


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


def plain_log_odds(joint: dict, positive) -> float:
    """s_pos - log sum_{c != pos} exp(s_c), by math.fsum over the other classes, with the
    infinite cases as the module documents them (only one side possible: +-inf; +inf scores
    share the mass)."""
    own = joint.get(positive, -math.inf)
    others = [s for label, s in joint.items() if label != positive]
    if own == math.inf:
        tied = others.count(math.inf)
        return -math.log(tied) if tied else math.inf
    if math.inf in others or own == -math.inf:
        return -math.inf
    finite = [s for s in others if s != -math.inf]
    if not finite:
        return math.inf
    top = max(finite)
    return own - (top + math.log(math.fsum(math.exp(s - top) for s in finite)))


def logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("make", MODELS, ids=model_id)
def test_log_odds_equal_the_plain_formula_on_the_joint_log_likelihoods_and_logit_of_p(make, n_classes):
    X, y = stream_for(make(), seed=7, n_events=600, n_classes=n_classes)
    model = make()
    checked = unsaturated = 0
    for x, label in zip(X, y):
        proba = model.predict_proba_one(x)
        if proba:
            joint = model.joint_log_likelihood(x)
            for positive in list(proba) + ["never_a_class"]:
                score = proba.log_odds(positive)
                assert score == score  # never NaN
                if positive not in proba:  # P(positive) = 0
                    assert score == -math.inf
                    continue
                if len(proba) == 1:  # the only class: P(positive) = 1
                    assert score == math.inf
                    continue
                if all(s == -math.inf for s in joint.values()):  # hopeless (alpha = 0): the prior decides
                    assert math.isfinite(score) and score == pytest.approx(logit(proba[positive]), abs=1e-9)
                    continue
                expected = plain_log_odds(joint, positive)
                if n_classes == 2 and math.isfinite(expected):
                    assert bits(score) == bits(expected)  # exactly s_pos - s_neg
                else:
                    assert score == pytest.approx(expected, rel=1e-12, abs=1e-12)
                p = proba.get(positive, 0.0)
                if 1e-9 < p < 1 - 1e-9:
                    assert score == pytest.approx(logit(p), abs=1e-6)
                    unsaturated += 1
                checked += 1
        if label is not None:
            model.learn_one(x, label)
    assert checked > 500 and unsaturated > 50


@pytest.mark.parametrize("make", MODELS, ids=model_id)
def test_batch_scores_equal_one_at_a_time_to_the_bit(make):
    X, y = stream_for(make(), seed=11, n_events=900, n_classes=3)
    loop = prequential_loop(make(), X, y)
    batch = make().predict_learn_many(X, y)
    assert batch == loop
    scored = 0
    for one, many in zip(loop, batch):
        if not one:
            assert many == {}
            continue
        assert type(one) is Posterior and type(many) is Posterior
        assert list(map(bits, one.log_scores)) == list(map(bits, many.log_scores))
        for positive in one:
            assert bits(one.log_odds(positive)) == bits(many.log_odds(positive))
        assert {c: bits(v) for c, v in one.log_proba().items()} == {c: bits(v) for c, v in many.log_proba().items()}
        scored += 1
    assert scored > 850


@pytest.mark.parametrize("mode", ["on_error", "thick_threshold"])
def test_training_regimes_give_the_loops_scores_to_the_bit(mode):
    X, y = text_stream(seed=4, n_events=1200, n_classes=2, class_names=["ham", "spam"])
    batch, _ = predict_learn(MultinomialNB(), X, y, mode=mode, margin=3.0)
    single = MultinomialNB()
    loop = []
    for x, label in zip(X, y):  # the per-event definition, one event a batch
        loop.extend(predict_learn(single, [x], [label], mode=mode, margin=3.0)[0])
    assert [p.log_odds("spam") if p else None for p in batch] == [p.log_odds("spam") if p else None for p in loop]
    assert sum(1 for p in batch if p) > 1100


def test_log_odds_keep_ranking_where_p_saturates():
    model = MultinomialNB()
    model.learn_many([{"cheap": 3, "pills": 2}, {"meeting": 2, "notes": 1}] * 5, ["spam", "ham"] * 5)
    strong, stronger = {"cheap": 200, "pills": 100}, {"cheap": 400, "pills": 200}
    assert model.predict_proba_one(strong)["spam"] == model.predict_proba_one(stronger)["spam"] == 1.0
    a, b = model.log_odds_one(strong, "spam"), model.log_odds_one(stronger, "spam")
    joint_a, joint_b = model.joint_log_likelihood(strong), model.joint_log_likelihood(stronger)
    assert a == joint_a["spam"] - joint_a["ham"] and b == joint_b["spam"] - joint_b["ham"]
    assert 40 < a < b < math.inf  # P ties at 1.0; the scores do not
    assert model.log_odds_one(stronger, "ham") == -b
    log_proba = model.predict_log_proba_one(stronger)
    assert log_proba["spam"] == 0.0 or log_proba["spam"] > -1e-300  # log 1.0, up to rounding
    assert log_proba["ham"] == pytest.approx(-b, rel=1e-15)  # finite where P(ham) is 0.0
    assert model.predict_proba_one(stronger)["ham"] == 0.0


def test_edge_cases_are_decided_on_purpose_and_never_nan():
    model = MultinomialNB()
    assert model.log_odds_one({"a": 1}, "spam") is None  # no class yet
    assert model.predict_log_proba_one({"a": 1}) == {}
    assert model.log_odds_many([{"a": 1}], "spam") == [None]
    model.learn_one({"a": 1}, "ham")  # only one class: P(spam) = 0, P(ham) = 1
    assert model.log_odds_one({"a": 1}, "spam") == -math.inf
    assert model.log_odds_one({"a": 1}, "ham") == math.inf
    assert model.predict_log_proba_one({"a": 1}) == {"ham": 0.0}

    exact = MultinomialNB(alpha=0)
    exact.learn_many([{"spam_word": 1}, {"ham_word": 1}, {"ham_word": 1}], ["spam", "ham", "ham"])
    assert exact.log_odds_one({"spam_word": 1}, "spam") == math.inf  # the evidence rules ham out
    assert exact.log_odds_one({"ham_word": 1}, "spam") == -math.inf
    # every class ruled out (hopeless): the prior decides, as for P: log(1/3) - log(2/3)
    assert exact.log_odds_one({"spam_word": 1, "ham_word": 1}, "spam") == pytest.approx(-math.log(2), abs=1e-15)
    log_proba = exact.predict_log_proba_one({"spam_word": 1, "ham_word": 1})
    assert log_proba == pytest.approx({"ham": math.log(2 / 3), "spam": math.log(1 / 3)}, abs=1e-15)

    # +inf scores share the mass (complement NB, alpha = 0): k others at +inf give odds 1 : k
    assert log_odds_of([math.inf, math.inf, 0.0], 0) == 0.0
    assert log_odds_of([math.inf, math.inf, math.inf], 0) == -math.log(2)
    assert log_odds_of([1.0, math.inf], 0) == -math.inf
    assert log_posteriors_of([math.inf, math.inf, -3.0]) == [-math.log(2), -math.log(2), -math.inf]
    assert log_odds_of([-math.inf, -math.inf], 0) == 0.0  # no evidence either way (P is 0 and 0)
    for row in ([0.0, -math.inf], [-math.inf, 0.0], [math.inf, -math.inf], [-math.inf, math.inf], [5.0]):
        for place in range(len(row)):
            assert log_odds_of(row, place) == log_odds_of(row, place)  # not NaN


def test_many_classes_log_odds_and_log_posteriors_are_the_plain_formulas():
    row = [-1000.0, -1001.5, -1003.25, -990.0]
    for place in range(4):
        others = [s for i, s in enumerate(row) if i != place]
        expected = row[place] - math.log(math.fsum(math.exp(s) for s in [t + 1000 for t in others])) + 1000
        assert log_odds_of(row, place) == pytest.approx(expected, rel=1e-14)
    total = math.log(math.fsum(math.exp(s + 1000) for s in row)) - 1000
    assert log_posteriors_of(row) == pytest.approx([s - total for s in row], rel=1e-14)


def test_batch_api_equals_the_one_event_api():
    X, y = text_stream(seed=9, n_events=300, n_classes=2, class_names=["ham", "spam"])
    model = MultinomialNB()
    model.learn_many(X, y)
    assert model.log_odds_many(X, "spam") == [model.log_odds_one(x, "spam") for x in X]
    assert model.predict_log_proba_many(X) == [model.predict_log_proba_one(x) for x in X]


def test_positive_score_reads_a_posterior_or_a_plain_dict():
    posterior = Posterior({"ham": 0.25, "spam": 0.75})
    posterior.log_scores = [-10.0, -7.5]
    assert positive_score(posterior, "spam") == 2.5
    assert positive_score({"ham": 0.25, "spam": 0.75}, "spam") == pytest.approx(math.log(3), rel=1e-15)
    assert positive_score({"ham": 1.0}, "spam") == -math.inf
    assert positive_score({}, "spam") is None and positive_score(None, "spam") is None
    assert positive_score(posterior, None) is None


def test_score_band_verdicts_and_the_obvious_positive():
    proba = {"ham": 0.5, "spam": 0.5}
    band = (-math.log(9), math.log(9))
    assert score_verdict(proba, 2.5, "spam", band) == "spam"
    assert score_verdict(proba, -2.5, "spam", band) == "ham"
    assert score_verdict(proba, 0.3, "spam", band) == "unsure"
    assert score_verdict(proba, math.inf, "spam", band) == "spam"
    assert score_verdict({}, None, "spam", band) is None
    assert score_verdict({"a": 0.2, "b": 0.3, "c": 0.5}, -40.0, "a", (-1, 1)) == "not a"
    assert band_verdict(proba, 0.3, "spam", score_band=(0, 0.2)) == "spam"
    assert band_verdict(proba, 0.3, "spam", band=(0.1, 0.9)) == verdict(proba, "spam", (0.1, 0.9)) == "unsure"
    assert band_verdict(proba, 0.3, "spam") is None
    assert obvious_positive(["ham", "spam"]) == "spam"
    assert obvious_positive([0, 1]) == 1 and obvious_positive([False, True]) is True
    assert obvious_positive(["a", "b"]) is None and obvious_positive(["spam"]) is None


def test_batch_api_takes_a_sparse_batch_and_a_data_frame():
    pd = pytest.importorskip("pandas")
    from stream_nb.features import TextFeaturizer

    featurize = TextFeaturizer()
    model = MultinomialNB()
    model.learn_many(featurize.transform_sparse(["free cash now", "lunch at noon"]), ["spam", "ham"])
    texts = ["free lunch", "cash cash cash", "noon"]
    assert model.log_odds_many(featurize.transform_sparse(texts), "spam") == [
        model.log_odds_one(featurize.transform_one(text), "spam") for text in texts]
    frame = pd.DataFrame([{"free": 1, "lunch": 0}, {"free": 0, "lunch": 1}])
    assert model.predict_log_proba_many(frame) == [model.predict_log_proba_one({"free": 1}),
                                                   model.predict_log_proba_one({"lunch": 1})]
