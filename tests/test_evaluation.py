"""Evaluation of a replay: hand-computed TREC measures, scikit-learn parity, string labels, plots,
and a recorder of a million events."""

from __future__ import annotations

import csv
import gc
import json
import math
import struct

import numpy as np
import pytest

from stream_nb.replay.evaluation import (
    EvaluationRecorder,
    evaluate,
    miss_rate_at_false_positive_rate,
    resolve_positive,
    roc_auc,
    rolling_series,
    write_scores_csv,
)
from stream_nb.replay.metrics import PrequentialMetrics

# The fixed set: (true label, P(spam)); the prediction is the more probable class.
#
#  #  true  P(spam)  predicted
#  1  spam  0.95     spam      TP
#  2  spam  0.80     spam      TP   (tied score with #3)
#  3  ham   0.80     spam      FP   ham misclassified
#  4  spam  0.60     spam      TP
#  5  ham   0.55     spam      FP   ham misclassified
#  6  spam  0.30     ham       FN   spam misclassified
#  7  ham   0.20     ham       TN
#  8  ham   0.10     ham       TN
#  9  ham   0.05     ham       TN
# 10  spam  0.70     spam      TP
FIXED = [("spam", 0.95), ("spam", 0.80), ("ham", 0.80), ("spam", 0.60), ("ham", 0.55),
         ("spam", 0.30), ("ham", 0.20), ("ham", 0.10), ("ham", 0.05), ("spam", 0.70)]


def _record(rows, positive="spam", negative="ham") -> EvaluationRecorder:
    recorder = EvaluationRecorder()
    for true, p in rows:
        recorder.update(true, positive if p > 0.5 else negative, {positive: p, negative: 1 - p})
    return recorder


def test_fixed_binary_set_against_hand_computed_values():
    report = evaluate(_record(FIXED))
    json.dumps(report, allow_nan=False)  # JSON-ready as it is
    trec = report["trec"]
    # 5 spam, 5 ham; TP 4, FN 1 (#6), FP 2 (#3, #5), TN 3.
    assert (trec["spam"], trec["ham"], trec["positive"], report["positive"]) == (5, 5, "spam", "spam")
    assert report["confusion_matrix"] == {"spam": {"spam": 4, "ham": 1}, "ham": {"spam": 2, "ham": 3}}
    # hm% = 2/5 = 40 %; sm% = 1/5 = 20 %.
    assert trec["hm_percent"] == pytest.approx(40.0)
    assert trec["sm_percent"] == pytest.approx(20.0)
    # lam: logit(0.4) = ln(2/3), logit(0.2) = ln(1/4); the mean logit is ln(sqrt(1/6)), so the
    # odds of lam are 1/sqrt(6) = 0.408248 and lam = 0.408248 / 1.408248 = 28.9898 %.
    assert trec["lam_percent"] == pytest.approx(100 * (1 / math.sqrt(6)) / (1 + 1 / math.sqrt(6)))
    assert trec["lam_percent"] == pytest.approx(28.98979, abs=1e-5)
    assert trec["lam_continuity_corrected"] is False
    # AUC over the 25 (spam, ham) pairs, hams scored 0.80 0.55 0.20 0.10 0.05:
    #   spam 0.95 beats 5; 0.80 beats 4 and ties 1 (0.5) = 4.5; 0.70 beats 4; 0.60 beats 4;
    #   0.30 beats 3.  (5 + 4.5 + 4 + 4 + 3) / 25 = 20.5 / 25 = 0.82, so 1-ROCA% = 18 %.
    assert report["roc_auc"] == pytest.approx(0.82)
    assert trec["one_minus_roca_percent"] == pytest.approx(18.0)
    # sm% at hm% <= 0.1 %: with 5 hams no ham may be called spam, so the threshold must sit above
    # the highest ham score 0.80: only the spam at 0.95 is caught, 4 of 5 missed = 80 %.
    assert trec["sm_at_hm_0_1_percent"] == pytest.approx(80.0)
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (12 - 2) / sqrt(6*5*5*4)
    #     = 10 / sqrt(600) = 0.408248.
    assert report["mcc"] == pytest.approx(10 / math.sqrt(600))
    # accuracy 7/10; spam P = 4/6, R = 4/5, F1 = 16/22; ham P = 3/4, R = 3/5, F1 = 2/3.
    assert report["events"] == 10
    assert report["accuracy"] == pytest.approx(0.7)
    assert report["per_class"]["spam"] == pytest.approx(
        {"precision": 4 / 6, "recall": 0.8, "f1": 16 / 22, "support": 5})
    assert report["per_class"]["ham"] == pytest.approx(
        {"precision": 0.75, "recall": 0.6, "f1": 2 / 3, "support": 5})
    assert report["macro_f1"] == pytest.approx((16 / 22 + 2 / 3) / 2)
    # log loss: P(true) = .95 .80 .20 .60 .45 .30 .80 .90 .95 .70 ->
    #   -ln: 0.051293 0.223144 1.609438 0.510826 0.798508 1.203973 0.223144 0.105361 0.051293
    #        0.356675; sum 5.133653, mean 0.5133653.
    assert report["log_loss"] == pytest.approx(0.5133653, abs=1e-7)


def test_lam_uses_the_continuity_correction_only_at_a_zero_rate():
    # 4 hams all right (hm = 0), 5 spams with one missed (sm = 1/5). hm becomes
    # (0 + 0.5) / (4 + 1) = 0.1; odds 1/9 and 1/4, geometric mean 1/6, lam = 1/7 = 14.2857 %.
    rows = [("ham", 0.1)] * 4 + [("spam", 0.9)] * 4 + [("spam", 0.2)]
    trec = evaluate(_record(rows))["trec"]
    assert trec["hm_percent"] == 0.0
    assert trec["sm_percent"] == pytest.approx(20.0)
    assert trec["lam_continuity_corrected"] is True
    assert trec["lam_percent"] == pytest.approx(100 / 7)


def test_sm_at_hm_allows_exactly_one_ham_in_a_thousand():
    # 1,000 hams: 999 scored in [0, 0.4), one at 0.9. Spam: 10 at 0.95, 10 at 0.85, 10 at 0.3.
    # hm <= 0.1 % allows exactly 1 ham (1 * 1000 <= 1000) at or above the threshold: threshold
    # 0.85 catches 20 spams with the 0.9 ham as its one false positive; any lower threshold
    # (0.399 and below) adds hams. sm = 10 / 30 = 33.33 %. With a second ham above 0.85 the
    # threshold has to climb above both (0.95): sm = 20 / 30.
    hams = np.r_[np.linspace(0.0, 0.399, 999), 0.9]
    spams = np.r_[np.full(10, 0.95), np.full(10, 0.85), np.full(10, 0.3)]
    scores = np.r_[hams, spams]
    is_spam = np.r_[np.zeros(1000, bool), np.ones(30, bool)]
    assert miss_rate_at_false_positive_rate(scores, is_spam, 0.001) == pytest.approx(10 / 30)
    hams[0] = 0.92  # a second ham above 0.85: now only the spams at 0.95 are caught
    assert miss_rate_at_false_positive_rate(np.r_[hams, spams], is_spam, 0.001) == pytest.approx(20 / 30)
    # The same through evaluate (string labels, predicted at 0.5).
    rows = [("ham", float(s)) for s in np.r_[np.linspace(0.0, 0.399, 999), 0.9]] + [("spam", float(s)) for s in spams]
    assert evaluate(_record(rows))["trec"]["sm_at_hm_0_1_percent"] == pytest.approx(100 / 3)


def test_auc_of_ties_is_the_mann_whitney_statistic():
    # Everything tied: every pair counts 0.5.
    assert roc_auc(np.full(6, 0.5), np.array([1, 0, 1, 0, 0, 1], bool)) == 0.5
    # One side empty: undefined.
    assert roc_auc(np.array([0.1, 0.2]), np.array([True, True])) is None


def _random_binary(seed: int, n: int = 2000):
    rng = np.random.default_rng(seed)
    true = np.where(rng.random(n) < 0.35, "spam", "ham")
    signal = np.where(true == "spam", 0.8, -0.8) + rng.normal(0, 1, n)
    p_spam = np.round(1 / (1 + np.exp(-signal)), 2)  # rounded: many tied scores
    predicted = np.where(p_spam > 0.5, "spam", "ham")
    return true, predicted, p_spam


def test_binary_auc_and_mcc_match_scikit_learn_on_2000_events():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    true, predicted, p_spam = _random_binary(7)
    recorder = EvaluationRecorder()
    for t, p, s in zip(true, predicted, p_spam):
        recorder.update(str(t), str(p), {"spam": float(s), "ham": 1 - float(s)})
    report = evaluate(recorder)
    assert len(np.unique(p_spam)) < 150  # the ties are really there
    assert report["roc_auc"] == pytest.approx(sklearn_metrics.roc_auc_score(true == "spam", p_spam), abs=1e-12)
    assert report["trec"]["one_minus_roca_percent"] == pytest.approx(
        100 * (1 - sklearn_metrics.roc_auc_score(true == "spam", p_spam)), abs=1e-9)
    assert report["mcc"] == pytest.approx(sklearn_metrics.matthews_corrcoef(true, predicted), abs=1e-12)
    assert report["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(true, predicted))
    for label in ("spam", "ham"):
        assert report["per_class"][label]["f1"] == pytest.approx(
            sklearn_metrics.f1_score(true, predicted, pos_label=label), abs=1e-12)
    assert report["macro_f1"] == pytest.approx(sklearn_metrics.f1_score(true, predicted, average="macro"))
    p_true = np.where(true == "spam", p_spam, 1 - p_spam)
    assert report["log_loss"] == pytest.approx(float(np.mean(-np.log(np.maximum(p_true, 1e-15)))))
    # hm% and sm% from scikit-learn's confusion matrix (labels ham, spam).
    (tn, fp), (fn, tp) = sklearn_metrics.confusion_matrix(true, predicted, labels=["ham", "spam"])
    assert report["trec"]["hm_percent"] == pytest.approx(100 * fp / (tn + fp))
    assert report["trec"]["sm_percent"] == pytest.approx(100 * fn / (fn + tp))


def test_three_class_macro_ovr_auc_and_mcc_match_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(11)
    classes = ["alpha", "beta", "gamma"]
    n = 2000
    true = rng.integers(0, 3, n)
    logits = rng.normal(0, 1, (n, 3))
    logits[np.arange(n), true] += 1.2
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    predicted = probabilities.argmax(axis=1)
    recorder = EvaluationRecorder()
    for t, p, row in zip(true, predicted, probabilities):
        recorder.update(classes[t], classes[p], dict(zip(classes, map(float, row))))
    report = evaluate(recorder)
    assert "trec" not in report
    assert report["roc_auc_kind"] == "macro one-vs-rest"
    expected_auc = sklearn_metrics.roc_auc_score(true, probabilities, multi_class="ovr", average="macro")
    assert report["roc_auc"] == pytest.approx(expected_auc, abs=1e-12)
    assert report["mcc"] == pytest.approx(sklearn_metrics.matthews_corrcoef(true, predicted), abs=1e-12)
    assert report["macro_f1"] == pytest.approx(sklearn_metrics.f1_score(true, predicted, average="macro"))


def test_none_predictions_are_errors_and_an_extra_category_for_mcc():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    recorder = EvaluationRecorder()
    rows = [("a", None, {}), ("a", "a", {"a": 1.0}), ("b", "a", {"a": 0.6, "b": 0.4}),
            ("b", "b", {"a": 0.3, "b": 0.7}), ("a", "a", {"a": 0.8, "b": 0.2})]
    for true, predicted, probabilities in rows:
        recorder.update(true, predicted, probabilities)
    report = evaluate(recorder, positive="a")
    assert report["accuracy"] == pytest.approx(3 / 5)
    assert report["confusion_matrix"]["a"] == {"a": 2, "None": 1}
    assert report["mcc"] == pytest.approx(sklearn_metrics.matthews_corrcoef(
        [t for t, _, _ in rows], [p or "<none>" for _, p, _ in rows]), abs=1e-12)
    # The event scored before any class had P(a) = 0 (missing) and counts as a spam (a) missed.
    assert report["trec"]["sm_percent"] == pytest.approx(100 / 3)


def test_agrees_with_prequential_metrics():
    true, predicted, p_spam = _random_binary(3, 500)
    recorder, metrics = EvaluationRecorder(), PrequentialMetrics()
    for t, p, s in zip(true, predicted, p_spam):
        probabilities = {"spam": float(s), "ham": 1 - float(s)}
        recorder.update(str(t), str(p), probabilities)
        metrics.update(str(t), str(p), probabilities)
    report, expected = evaluate(recorder), metrics.to_dict()
    for key in ("events", "accuracy", "macro_f1", "log_loss"):
        assert report[key] == pytest.approx(expected[key], abs=1e-12), key
    assert report["confusion_matrix"] == expected["confusion_matrix"]
    for label, values in expected["per_class"].items():
        assert report["per_class"][label] == pytest.approx(values)


def test_string_labels_need_a_named_positive_class_unless_obvious():
    rows = [("yes", 0.9), ("no", 0.2), ("yes", 0.4), ("no", 0.6)]
    recorder = _record(rows, positive="yes", negative="no")
    with pytest.raises(ValueError, match="name the positive class"):
        evaluate(recorder)
    report = evaluate(recorder, positive="yes")
    # Not River's silent 0: the string positive class has its real F1 (P = 1/2, R = 1/2).
    assert report["per_class"]["yes"]["f1"] == pytest.approx(0.5)
    assert report["trec"]["positive"] == "yes"
    assert report["trec"]["sm_percent"] == pytest.approx(50.0)
    assert report["roc_auc"] == pytest.approx(0.75)  # pairs: 0.9>0.2, 0.9>0.6, 0.4>0.2, 0.4<0.6
    with pytest.raises(ValueError, match="not among the labels"):
        evaluate(recorder, positive="maybe")
    assert resolve_positive(["ham", "spam"]) == "spam"
    assert resolve_positive([False, True]) is True
    assert evaluate(_record([(True, 0.9), (False, 0.2)], positive=True, negative=False))["positive"] is True
    assert resolve_positive([0, 1]) == 1
    assert resolve_positive(["a", "b", "c"]) is None


def test_rolling_series_by_hand():
    # window 2 over: right, wrong, right, right (labels a/b, positive a)
    recorder = EvaluationRecorder()
    for true, predicted in [("a", "a"), ("b", "a"), ("a", "a"), ("b", "b")]:
        recorder.update(true, predicted, {predicted: 1.0})
    series = rolling_series(recorder, window=2, positive="a")
    assert list(series["index"]) == [1, 2, 3, 4]
    assert list(series["accuracy"]) == pytest.approx([1.0, 0.5, 0.5, 1.0])
    # F1(a): [1]: P=R=1 -> 1; [1,2]: P=1/2, R=1 -> 2/3; [2,3]: P=1/2, R=1 -> 2/3; [3,4]: 1.
    assert list(series["f1"]) == pytest.approx([1.0, 2 / 3, 2 / 3, 1.0])
    assert series["f1_label"] == "F1 (a)"


def test_scores_csv_round_trip(tmp_path):
    recorder = _record(FIXED[:3])
    path = tmp_path / "scores.csv"
    write_scores_csv(recorder, path, ids=["m1", "m2", "m3"])
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["id"] for row in rows] == ["m1", "m2", "m3"]
    assert rows[2] == {"position": "2", "id": "m3", "true": "ham", "predicted": "spam", "correct": "0",
                       "p_ham": repr(1 - 0.80), "p_spam": "0.8"}


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plots_are_png_files(tmp_path):
    pytest.importorskip("matplotlib")
    from stream_nb.replay.plots import plot_curve, plot_roc

    true, predicted, p_spam = _random_binary(5)
    recorder = EvaluationRecorder()
    for t, p, s in zip(true, predicted, p_spam):
        recorder.update(str(t), str(p), {"spam": float(s), "ham": 1 - float(s)})
    curve, roc = tmp_path / "curve.png", tmp_path / "roc.png"
    plot_curve(rolling_series(recorder, window=200), curve, "Prequential replay")
    plot_roc(recorder, roc)
    for path in (curve, roc):
        width, height = _png_size(path)
        assert 400 <= width <= 3000 and 300 <= height <= 2000, (path, width, height)
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(roc) as image:
        image.verify()
    # Multiclass ROC (one vs rest) too.
    classes = ["x", "y", "z"]
    three = EvaluationRecorder()
    for i in range(300):
        three.update(classes[i % 3], classes[(i * 7) % 3], {c: (0.5 if c == classes[i % 3] else 0.25) for c in classes})
    plot_roc(three, tmp_path / "roc3.png")
    _png_size(tmp_path / "roc3.png")


def test_a_million_events_are_kept_in_arrays():
    recorder = EvaluationRecorder()
    gc.collect()
    objects_before = len(gc.get_objects())
    for i in range(1_000_000):
        p = (i % 1000) / 1000
        # a fresh dict per event, as a model returns: none of them may be kept
        recorder.update("spam" if i % 7 == 0 else "ham", "spam" if p > 0.5 else "ham", {"spam": p, "ham": 1 - p})
    gc.collect()
    assert len(gc.get_objects()) - objects_before < 1000
    assert len(recorder) == 1_000_000
    # 4 + 4 + 8 + 2 * 8 (probabilities) + 2 * 8 (log scores) + 2 (classes known) = 50 bytes per
    # event, capacity at most doubled: 2**20 rows.
    assert recorder.nbytes <= 50 * 2**20
    report = evaluate(recorder)
    assert report["events"] == 1_000_000
    assert report["per_class"]["spam"]["support"] == 142_858
    # The score is independent of the label (i % 1000 vs i % 7 are uncorrelated over a full
    # cycle of 7,000), so the AUC is exactly 1/2.
    assert report["roc_auc"] == pytest.approx(0.5, abs=1e-3)


def test_an_empty_recorder_evaluates_to_zeros_and_nones():
    recorder = EvaluationRecorder()
    report = evaluate(recorder)
    assert (report["events"], report["accuracy"], report["mcc"], report["roc_auc"]) == (0, 0.0, 0.0, None)
    assert report["per_class"] == {} and report["confusion_matrix"] == {}
    assert len(rolling_series(recorder)["index"]) == 0
