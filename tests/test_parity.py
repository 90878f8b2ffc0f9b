"""Parity of stream_nb's naive Bayes with River 0.26.1 and scikit-learn, and the seed 001 example.

River parity runs River's own per-event loop (predict_proba_one, then learn_one if labeled) and
ours in one `predict_learn_many` call on seeded streams of mixed learn/predict events.

Deliberate differences, and what each River model computes (read from River 0.26.1's source):

- MultinomialNB: River scores a feature never learned as alpha / (T_c + alpha |V|) in every
  class. That is our `unknown="smooth"`; our default `unknown="ignore"` drops such features
  (the textbook rule, and scikit-learn's, whose vocabulary is fixed). The two rules agree on
  every event whose features were all learned before it, and only there (asserted below).
- ComplementNB: river/naive_bayes/complement.py computes, for each class c,
      score_c = - sum_{f in x} x_f log( (F_f + alpha - N_fc) / sum_{g in V} (F_g + alpha - N_gc) )
  with F_f = sum_k N_fk, i.e. theta_~c,f = (N_~c,f + alpha) / (T_~c + alpha |V|), no prior, and a
  feature never learned counted as alpha / (T_~c + alpha |V|). That is Rennie et al.'s complement
  score exactly as ours with `unknown="smooth"`: it is not a different formula, and it matches to
  1e-9 on every event (asserted below). Our default `unknown="ignore"` drops unseen features
  instead, which is where ours and River's differ (measured: up to 0.91 in probability).
- BernoulliNB: River adds 10e-10 (= 1e-9) inside every log and drops features never learned
  (our default, `unknown="ignore"`). Hence within 1e-4, not 1e-9.
- GaussianNB: River 0.26.1 uses the population variance (it sets ddof = 0 on its Gaussians), as
  we do, and log(1e-9 + pdf) with no variance floor; it gives pdf 0 to a class that has seen a
  feature only once. We add the scikit-learn floor var_smoothing * max_f var_f. Hence within 1e-4
  once every class has seen 5 events.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from river import naive_bayes as river_nb
from sklearn import naive_bayes as sk_nb
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split

from stream_nb import BernoulliNB, CategoricalNB, ComplementNB, GaussianNB, MultinomialNB
from tests.streams import gaussian_stream, prequential_loop, text_stream

SEEDS = [11, 2024]
N_EVENTS = 2000  # mixed learn/predict events per stream (60% labeled)
N_CLASSES = 3
WARM_UP = 5  # River-approximate comparisons start once every class has seen this many events


# ---- River ------------------------------------------------------------------------------


def warmed_up(y) -> list[int]:
    """Indices of events at which every one of the N_CLASSES classes has seen >= WARM_UP events."""
    counts: dict = {}
    indices = []
    for i, label in enumerate(y):
        if len(counts) == N_CLASSES and min(counts.values()) >= WARM_UP:
            indices.append(i)
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    return indices


def worst_gap(theirs: list[dict], ours: list[dict], indices) -> float:
    return max(abs(theirs[i][c] - ours[i][c]) for i in indices for c in theirs[i])


def argmax_agreement(theirs: list[dict], ours: list[dict], indices) -> float:
    agree = sum(max(theirs[i], key=theirs[i].get) == max(ours[i], key=ours[i].get) for i in indices)
    return agree / len(indices)


def assert_same_class_sets(theirs: list[dict], ours: list[dict]) -> None:
    assert len(theirs) == len(ours)
    mismatched = [i for i, (a, b) in enumerate(zip(theirs, ours)) if set(a) != set(b)]
    assert not mismatched, f"class sets differ at events {mismatched[:10]}"


@pytest.fixture(scope="module", params=SEEDS, ids=lambda s: f"seed{s}")
def text_run(request):
    """A seeded text stream and River MultinomialNB's per-event probabilities on it."""
    X, y = text_stream(request.param, N_EVENTS, n_classes=N_CLASSES)
    river_model = river_nb.MultinomialNB()
    river_proba = prequential_loop(river_model, X, y)
    held_out, _ = text_stream(request.param + 1000, 300, n_classes=N_CLASSES)
    return {"seed": request.param, "X": X, "y": y, "river_model": river_model,
            "river_proba": river_proba, "held_out": held_out}


def test_multinomial_smooth_matches_river_on_every_event_to_1e9(text_run):
    X, y, theirs = text_run["X"], text_run["y"], text_run["river_proba"]
    ours = MultinomialNB(unknown="smooth").predict_learn_many(X, y)
    assert_same_class_sets(theirs, ours)
    scored = [i for i, p in enumerate(theirs) if p]
    assert len(scored) > 0.95 * N_EVENTS
    assert worst_gap(theirs, ours, scored) <= 1e-9


def test_multinomial_smooth_joint_log_likelihood_matches_river_on_held_out_to_1e9_relative(text_run):
    ours = MultinomialNB(unknown="smooth")
    ours.learn_many(text_run["X"], text_run["y"])
    river_model = text_run["river_model"]
    worst = 0.0
    for x in text_run["held_out"]:
        theirs, mine = river_model.joint_log_likelihood(x), ours.joint_log_likelihood(x)
        assert set(theirs) == set(mine)
        worst = max(worst, max(abs(theirs[c] - mine[c]) / abs(theirs[c]) for c in theirs))
    assert worst <= 1e-9


def test_multinomial_default_ignore_differs_from_river_only_on_events_with_unseen_features(text_run):
    X, y, theirs = text_run["X"], text_run["y"], text_run["river_proba"]
    ours = MultinomialNB().predict_learn_many(X, y)
    assert_same_class_sets(theirs, ours)
    vocabulary: set = set()
    all_known, some_unseen = [], []
    for i, (x, label) in enumerate(zip(X, y)):
        if theirs[i]:
            (all_known if vocabulary.issuperset(x) else some_unseen).append(i)
        if label is not None:
            vocabulary.update(x)
    assert worst_gap(theirs, ours, all_known) <= 1e-9
    differing = [i for i in some_unseen if max(abs(theirs[i][c] - ours[i][c]) for c in theirs[i]) > 1e-6]
    assert len(some_unseen) > 100 and len(differing) > 0.5 * len(some_unseen)


@pytest.mark.parametrize("seed", SEEDS[:1])  # one seed: River's complement loop is the slowest
def test_complement_smooth_matches_river_complement_on_every_event_to_1e9(seed):
    X, y = text_stream(seed, N_EVENTS, n_classes=N_CLASSES)
    theirs = prequential_loop(river_nb.ComplementNB(), X, y)
    ours = ComplementNB(unknown="smooth").predict_learn_many(X, y)
    assert_same_class_sets(theirs, ours)
    scored = [i for i, p in enumerate(theirs) if p]
    assert len(scored) > 0.95 * N_EVENTS
    assert worst_gap(theirs, ours, scored) <= 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_bernoulli_matches_river_within_1e4_and_same_argmax_once_each_class_has_5_events(seed):
    X, y = text_stream(seed, N_EVENTS, n_classes=N_CLASSES)
    theirs = prequential_loop(river_nb.BernoulliNB(), X, y)
    ours = BernoulliNB().predict_learn_many(X, y)
    assert_same_class_sets(theirs, ours)
    compared = warmed_up(y)
    assert len(compared) > 0.95 * N_EVENTS
    assert worst_gap(theirs, ours, compared) <= 1e-4
    assert argmax_agreement(theirs, ours, compared) >= 0.995


@pytest.fixture(scope="module", params=SEEDS, ids=lambda s: f"seed{s}")
def gaussian_run(request):
    """River GaussianNB's per-event probabilities on a seeded stream and, at every warmed-up
    event, two River figures: its joint log likelihood without the 1e-9 pdf epsilon (log P(c)
    + sum_f Gaussian.log_pdf, River's own exact log density) and how far the epsilon spreads
    the classes' joint log likelihoods (max_c - min_c of jll_c - exact_c)."""
    X, y = gaussian_stream(request.param, N_EVENTS, n_classes=N_CLASSES)
    model = river_nb.GaussianNB()
    compared = warmed_up(y)
    at = set(compared)
    proba, exact, epsilon_spread = [], {}, {}
    for i, (x, label) in enumerate(zip(X, y)):
        proba.append(model.predict_proba_one(x))
        if i in at:
            total = sum(model.class_counts.values())
            exact[i] = {c: math.log(n / total) + sum(model.gaussians[c][f].log_pdf(v) for f, v in x.items())
                        for c, n in model.class_counts.items()}
            jll = model.joint_log_likelihood(x)
            shift = [jll[c] - exact[i][c] for c in jll]
            epsilon_spread[i] = max(shift) - min(shift)
        if label is not None:
            model.learn_one(x, label)
    return {"X": X, "y": y, "river_proba": proba, "compared": compared, "exact": exact,
            "epsilon_spread": epsilon_spread}


def test_gaussian_without_floor_equals_river_exact_gaussian_log_density_to_1e12_relative(gaussian_run):
    # Same population-variance Welford estimates as River: with var_smoothing = 0 the joint log
    # likelihood is River's own exact log density to rounding (measured 4.4e-16 relative).
    X, y = gaussian_run["X"], gaussian_run["y"]
    model = GaussianNB(var_smoothing=0.0)
    worst = 0.0
    compared = set(gaussian_run["compared"])
    for i, (x, label) in enumerate(zip(X, y)):
        if i in compared:
            exact, ours = gaussian_run["exact"][i], model.joint_log_likelihood(x)
            assert set(exact) == set(ours)
            worst = max(worst, max(abs(ours[c] - exact[c]) / abs(exact[c]) for c in exact))
        if label is not None:
            model.learn_one(x, label)
    assert worst <= 1e-12


def test_gaussian_matches_river_within_1e4_once_each_class_has_5_events_where_rivers_epsilon_is_small(gaussian_run):
    # River scores log(1e-9 + pdf). Where that epsilon moves the classes' joint log likelihoods
    # apart by at most 2e-4 (so, to first order, any probability by at most 2e-4 / 4), we agree
    # within 1e-4. Elsewhere the epsilon itself exceeds the bar: on seed 11, event 52, a class-1
    # density of 8.6e-8 gains 1.2% (+0.0116 nats) and River's probabilities differ from ours by
    # 1.1e-4 -- while our scores there are River's exact log density (test above). Measured over
    # all warmed-up events: worst 1.1e-4 (seed 11) and 1.2e-5 (seed 2024); 49 and 75 of ~1960
    # events are left out by the epsilon criterion. The floor (var_smoothing) moves our joint
    # log likelihood by < 1e-7 relative.
    X, y, theirs = gaussian_run["X"], gaussian_run["y"], gaussian_run["river_proba"]
    ours = GaussianNB().predict_learn_many(X, y)
    assert_same_class_sets(theirs, ours)
    compared = gaussian_run["compared"]
    assert len(compared) > 0.95 * N_EVENTS
    small_epsilon = [i for i in compared if gaussian_run["epsilon_spread"][i] <= 2e-4]
    assert len(small_epsilon) > 0.9 * len(compared)
    assert worst_gap(theirs, ours, small_epsilon) <= 1e-4
    assert argmax_agreement(theirs, ours, compared) >= 0.995


# ---- scikit-learn -----------------------------------------------------------------------
# A fixed feature set on which both libraries define the same model: every feature column is
# nonzero in some training row, so our vocabulary is sklearn's n_features and no held-out
# feature is unknown. Rows are fed to us as dicts {f"f{j}": value}, zeros skipped.
# Held-out rows are scored with predict_proba_one / joint_log_likelihood one at a time.

N_TRAIN = 450


def as_records(matrix: np.ndarray) -> list[dict]:
    return [{f"f{j}": int(v) for j, v in enumerate(row) if v} for row in matrix]


def count_data():
    """600 x 40 Poisson counts, class-dependent rates, 3 classes."""
    rng = np.random.default_rng(20240601)
    y = rng.integers(0, N_CLASSES, 600)
    rates = rng.uniform(0.1, 3.0, (N_CLASSES, 40))
    X = rng.poisson(rates[y])
    assert (X[:N_TRAIN].sum(axis=0) > 0).all(), "every feature must be learned"
    return X, y


def binary_data():
    """600 x 30 presence bits, class-dependent rates, 3 classes."""
    rng = np.random.default_rng(20240602)
    y = rng.integers(0, N_CLASSES, 600)
    rates = rng.uniform(0.05, 0.6, (N_CLASSES, 30))
    X = (rng.random((600, 30)) < rates[y]).astype(np.int64)
    assert (X[:N_TRAIN].sum(axis=0) > 0).all(), "every feature must be present in training"
    return X, y


def compare_with_sklearn(ours, theirs, X, y, records) -> tuple[float, float]:
    """Train both on the first N_TRAIN rows; (worst |dP|, worst relative |dJLL|) on the rest."""
    ours.learn_many(records[:N_TRAIN], y[:N_TRAIN].tolist())
    theirs.fit(X[:N_TRAIN], y[:N_TRAIN])
    proba = theirs.predict_proba(X[N_TRAIN:])
    jll = theirs.predict_joint_log_proba(X[N_TRAIN:])
    classes = theirs.classes_.tolist()
    worst_p = worst_j = 0.0
    for i, x in enumerate(records[N_TRAIN:]):
        p, j = ours.predict_proba_one(x), ours.joint_log_likelihood(x)
        assert sorted(p) == classes and sorted(j) == classes
        worst_p = max(worst_p, max(abs(p[c] - proba[i, k]) for k, c in enumerate(classes)))
        worst_j = max(worst_j, max(abs(j[c] - jll[i, k]) / abs(jll[i, k]) for k, c in enumerate(classes)))
    return worst_p, worst_j


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_complement_matches_sklearn_probabilities_and_joint_log_likelihood_to_1e9(alpha):
    # sklearn's ComplementNB (norm=False) scores X @ feature_log_prob_.T with
    # feature_log_prob_[c, f] = -log((N_~c,f + alpha) / (T_~c + alpha * n_features)) and adds the
    # class log prior only when there is a single class. With 3 classes its joint log likelihood
    # is therefore exactly our complement score (no prior either): no per-row constant is needed.
    X, y = count_data()
    worst_p, worst_j = compare_with_sklearn(ComplementNB(alpha=alpha), sk_nb.ComplementNB(alpha=alpha),
                                            X, y, as_records(X))
    assert worst_p <= 1e-9
    assert worst_j <= 1e-9


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_multinomial_ignore_matches_sklearn_probabilities_and_joint_log_likelihood_to_1e9(alpha):
    X, y = count_data()
    worst_p, worst_j = compare_with_sklearn(MultinomialNB(alpha=alpha, unknown="ignore"),
                                            sk_nb.MultinomialNB(alpha=alpha, fit_prior=True),
                                            X, y, as_records(X))
    assert worst_p <= 1e-9
    assert worst_j <= 1e-9


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_bernoulli_matches_sklearn_probabilities_and_joint_log_likelihood_to_1e9(alpha):
    X, y = binary_data()
    worst_p, worst_j = compare_with_sklearn(BernoulliNB(alpha=alpha), sk_nb.BernoulliNB(alpha=alpha),
                                            X, y, as_records(X))
    assert worst_p <= 1e-9
    assert worst_j <= 1e-9


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_categorical_matches_sklearn_probabilities_and_joint_log_likelihood_to_1e9(alpha):
    # 500 rows x 6 integer-coded features with 2..5 values each; sklearn counts max + 1 values
    # per feature, so every value must appear in training for S_j to agree.
    rng = np.random.default_rng(20240603)
    n_values = rng.integers(2, 6, 6)
    y = rng.integers(0, N_CLASSES, 500)
    X = np.stack([rng.integers(0, k, 500) for k in n_values], axis=1)
    for j, k in enumerate(n_values):
        assert set(X[:N_TRAIN, j].tolist()) == set(range(k)), "every value must appear in training"
    records = [{j: int(v) for j, v in enumerate(row)} for row in X]
    worst_p, worst_j = compare_with_sklearn(CategoricalNB(alpha=alpha), sk_nb.CategoricalNB(alpha=alpha),
                                            X, y, records)
    assert worst_p <= 1e-9
    assert worst_j <= 1e-9


# ---- seed 001 worked example ------------------------------------------------------------


def test_seed_001_iris_categorical_with_declared_categories_and_smoothed_prior_scores_68_of_75():
    # CategoricalNB, alpha = 1 and prior_alpha = 1 (P(y) = (N_y + 1) / (N + K)), every raw float
    # value of the whole Iris data declared as a category, trained on the train half of
    # train_test_split(test_size=0.5, random_state=0), predicting the test half.
    #
    # Without declared categories (only the values seen in training; S_j = 30, 20, 34, 21 instead
    # of 35, 23, 43, 22, and the 31 test values never seen in training dropped) it is also 68/75,
    # with the same 75 predictions (same 7 errors) on this split; prior_alpha = 0 also gives 68.
    # Not asserted: the two models' scores differ by a class-dependent shift of up to 0.27 nats,
    # larger than some top-2 margins (smallest 0.025), so the agreement is an observation about
    # this split, not something that follows from the formulas.
    X, y = load_iris(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)
    categories = {str(j): sorted(set(X[:, j].tolist())) for j in range(4)}

    def records(matrix):
        return [{str(j): float(v) for j, v in enumerate(row)} for row in matrix]

    model = CategoricalNB(alpha=1, prior_alpha=1, categories=categories)
    model.learn_many(records(X_train), y_train.tolist())
    predictions = [model.predict_one(x) for x in records(X_test)]
    correct = sum(p == t for p, t in zip(predictions, y_test.tolist()))
    assert len(y_test) == 75
    assert correct == 68
