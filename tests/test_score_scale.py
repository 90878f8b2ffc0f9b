"""[evaluation] score_scale = "sqrt_features": the score is the log-odds divided by the square
root of the event's distinct features, in the worker's messages and verdicts and in replay's
scores, ROC, TREC measures, scores.csv, predictions.jsonl and unsure summary.

The reference figures are computed here apart from the code under test: a per-event loop over
the same model and featuriser, score = (s_spam - s_ham) / math.sqrt(max(len(x), 1)) with x the
event's feature dict, and the Mann-Whitney AUC and sm% at hm% 0.1% by plain counting
(tests/test_replay_score.py's helpers)."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest

from stream_nb.config import ConfigError, load_config
from stream_nb.events import Event, SourcePosition
from stream_nb.features import TextFeaturizer
from stream_nb.model.decision import score_verdict
from stream_nb.model.scale import scaled_scores
from stream_nb.replay.cli import replay_and_report

from test_replay_score import mann_whitney, saturating_stream, spam_missed_at_one_ham_in_a_thousand

REPO = Path(__file__).resolve().parents[1]
SPAM = REPO / "configs" / "spam.toml"
MAIL = REPO / "configs" / "mail.toml"
SCALED = ['evaluation.positive="spam"', 'evaluation.score_scale="sqrt_features"']


def reference_scaled_scores(config, events: list[dict]) -> list[tuple[str, str | None, float, int]]:
    """(id, label, score per sqrt(feature), n) per event the loop predicts, predicting then
    learning one event at a time."""
    model, featurizer = config.build_model(), config.build_featurizer()
    out = []
    for event in events:
        x = featurizer.transform_one(event["text"])
        joint = model.joint_log_likelihood(x)
        if joint:
            log_odds = (joint["spam"] - joint["ham"] if len(joint) == 2 else math.inf if "spam" in joint
                        else -math.inf)
            out.append((event["id"], event["label"], log_odds / math.sqrt(max(len(x), 1)), len(x)))
        if event["label"] is not None:
            model.learn_one(x, event["label"])
    return out


def test_score_scale_is_none_by_default_checked_and_named_in_errors():
    assert load_config(SPAM).evaluation["score_scale"] == "none"
    assert load_config(None).evaluation["score_scale"] == "none"
    assert load_config(MAIL).evaluation["score_scale"] == "sqrt_features"
    with pytest.raises(ConfigError, match=r"^evaluation.score_scale: 'sqrt' is not one of none, sqrt_features"):
        load_config(SPAM, ['evaluation.score_scale="sqrt"'])
    with pytest.raises(ConfigError, match=r"^evaluation.score_scale: expected str"):
        load_config(SPAM, ["evaluation.score_scale=1"])
    assert "evaluation" not in load_config(MAIL).resolved()  # the learning fingerprint does not move


@pytest.mark.parametrize("binary", [True, False], ids=["distinct-batch", "counts-batch"])
def test_scaled_scores_divide_by_the_root_of_the_distinct_features_of_the_batch(binary):
    featurizer = TextFeaturizer(binary=binary, ngram_range=(1, 2))
    texts = ["free free free prize", "", "lunch at noon with the team, the team", "ok"]
    X = featurizer.transform_sparse(texts)
    sizes = [len(featurizer.transform_one(text)) for text in texts]
    assert sizes == [4, 0, 12, 1]  # "free free free prize": free, prize, free free, free prize; "" none
    scores = [10.0, -3.0, None, math.inf]
    assert scaled_scores(scores, X, "sqrt_features") == [5.0, -3.0, None, math.inf]  # n = 0 counts as 1
    assert scaled_scores([7.0] * 4, X, "sqrt_features") == [7.0 / 2.0, 7.0, 7.0 / math.sqrt(12), 7.0]
    dicts = [featurizer.transform_one(text) for text in texts]
    assert scaled_scores([7.0] * 4, dicts, "sqrt_features") == scaled_scores([7.0] * 4, X, "sqrt_features")
    assert scaled_scores(scores, X, "none") is scores
    with pytest.raises(ValueError, match="score scale must be one of none, sqrt_features"):
        scaled_scores(scores, X, "per_feature")


@pytest.mark.parametrize("binary", ["true", "false"])
def test_replay_ranks_and_reports_on_the_score_per_sqrt_feature(tmp_path, binary):
    events = saturating_stream(700, seed=3)
    config = load_config(None, [*SCALED, f"features.binary={binary}"])
    reference = reference_scaled_scores(config, events)
    _, _, reports = replay_and_report(events, [("t", config)], tmp_path, batch_size=64, scores=True)
    report = reports[0]
    assert report["score_scale"] == "sqrt_features"

    labeled = [(label, score) for _, label, score, _ in reference if label is not None]
    # an event scored while the model knew one class (+-inf) ranks as the neutral 0
    scores = [score if math.isfinite(score) else 0.0 for _, score in labeled]
    is_spam = [label == "spam" for label, _ in labeled]
    assert scores.count(0.0) == 1
    assert len({n for *_, n in reference}) > 10  # events of many sizes: the scale reorders them
    auc = mann_whitney(scores, is_spam)
    assert report["roc_auc"] == float(auc)
    trec = report["trec"]
    assert trec["one_minus_roca_percent"] == pytest.approx(100 * float(1 - auc), abs=1e-12)
    assert trec["sm_at_hm_0_1_percent"] == pytest.approx(
        100 * float(spam_missed_at_one_ham_in_a_thousand(scores, is_spam)), abs=1e-12)
    plain = load_config(None, ['evaluation.positive="spam"', f"features.binary={binary}"])
    _, _, plain_reports = replay_and_report(events, [("t", plain)], tmp_path / "plain", batch_size=64)
    assert plain_reports[0]["roc_auc"] != report["roc_auc"] and "score_scale" not in plain_reports[0]
    assert plain_reports[0]["accuracy"] == report["accuracy"]  # the same predictions, another score

    with (tmp_path / "scores.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(row["score"]) for row in rows] == scores  # the very floats, to the bit
    predicted = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    unlabeled = {event_id: score for event_id, label, score, _ in reference if label is None}
    assert len(predicted) == 70 and {line["id"]: line["score"] for line in predicted} == unlabeled


def test_the_unsure_band_is_on_the_scaled_score_in_replay(tmp_path):
    events = saturating_stream(400, seed=8)
    low, high = -2.0, 1.5
    config = load_config(None, [*SCALED, f"evaluation.unsure_score_band=[{low}, {high}]"])
    reference = reference_scaled_scores(config, events)
    _, _, reports = replay_and_report(events, [("t", config)], tmp_path, batch_size=50)
    summary = reports[0]["unsure_score_band"]
    labeled = [(label, score) for _, label, score, _ in reference if label is not None]
    unsure = sum(1 for _, score in labeled if low < score < high)
    sure = [("spam" if score >= high else "ham", label) for label, score in labeled if not low < score < high]
    assert summary["unsure"] == unsure > 0
    assert summary["sure_accuracy"] == sum(v == t for v, t in sure) / len(sure)
    assert summary["unsure_share"] == unsure / len(labeled)


def test_replay_around_a_refused_event_keeps_each_score_with_its_own_size(tmp_path):
    events = saturating_stream(300, seed=4)
    events.insert(40, {"id": "bad", "text": "too many", "label": "eggs"})  # a third class: refused
    config = load_config(None, [*SCALED, 'model.classes=["ham", "spam"]', "model.max_classes=2"])
    kept = [event for event in events if event["id"] != "bad"]
    reference = reference_scaled_scores(config, kept)
    _, contenders, reports = replay_and_report(events, [("t", config)], tmp_path, batch_size=32, scores=True)
    with (tmp_path / "scores.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(row["score"]) for row in rows] == [score if math.isfinite(score) else 0.0  # one class known
                                                     for _, label, score, _ in reference if label is not None]
    assert list(contenders[0].recorder.sizes) == [n for _, label, _, n in reference if label is not None]


@pytest.fixture
def scaled_worker(tmp_path):
    from stream_nb.worker.loop import Worker

    path = tmp_path / "spam-scaled.toml"  # spam.toml with its P band on the score's scale instead
    path.write_text(SPAM.read_text(encoding="utf-8").replace("unsure_band = [0.1, 0.9]",
                                                             "unsure_score_band = [-1.0, 0.5]"), encoding="utf-8")
    worker = Worker(load_config(path, [*SCALED, f'checkpoint.dir="{tmp_path}"',
                                       'kafka.bootstrap_servers="127.0.0.1:9"']))
    sent = []
    worker.predictor.send = lambda topic, value, key, headers: sent.append(json.loads(value))  # no broker is reached
    worker.labeled = type("NoLabeledLog", (), {"offsets": lambda self: []})()
    return worker, sent


def test_the_workers_message_carries_the_score_per_sqrt_feature_and_its_verdict(scaled_worker):
    worker, sent = scaled_worker
    rng = random.Random(1)
    train = saturating_stream(200, seed=5)
    texts = [event["text"] for event in train if event["label"] is not None]
    labels = [event["label"] for event in train if event["label"] is not None]
    featurizer = worker.text_featurizer
    worker.learner.predict_then_learn([Event(id=str(i), text=t, features=None, label=y, source=SourcePosition("t", 0, i))
                                       for i, (t, y) in enumerate(zip(texts, labels))],
                                      featurizer.transform_sparse(texts, vocabulary=worker.model.vocabulary))
    unseen = [" ".join(rng.choices(["free", "prize", "lunch", "team", "zebra", "quux", "the"], k=rng.randint(1, 40)))
              for _ in range(60)]
    events = [Event(id=f"u{i}", text=text, features=None, label=None, source=SourcePosition("u", 0, i))
              for i, text in enumerate(unseen)]
    X = featurizer.transform_sparse(unseen, vocabulary=worker.model.vocabulary, number_unknown=False)
    worker.predictor.publish_predictions(events, [None] * len(events), worker.model.predict_proba_many(X), X)

    assert len(sent) == 60
    verdicts = set()
    for text, message in zip(unseen, sent):
        x = featurizer.transform_one(text)  # unknown words ("zebra") count in n, as in training's margin
        joint = worker.model.joint_log_likelihood(x)
        expected = (joint["spam"] - joint["ham"]) / math.sqrt(max(len(x), 1))
        assert message["score"] == expected  # bit for bit, through the JSON text
        assert message["verdict"] == score_verdict(message["proba"], expected, "spam", (-1.0, 0.5))
        verdicts.add(message["verdict"])
    assert verdicts == {"ham", "spam", "unsure"}
