"""Replay ranks by the score (log-odds), not by P(positive): ROC AUC, TREC's measures,
scores.csv, predictions.jsonl and the unsure band on the score.

The reference figures are computed here, apart from the code under test: a per-event loop over
the same model and featuriser for the scores (s_spam - s_ham from joint_log_likelihood), and the
Mann-Whitney AUC and sm% at hm% 0.1% by plain counting."""

from __future__ import annotations

import csv
import json
import math
import random
from fractions import Fraction

import pytest

from stream_nb.config import ConfigError, load_config
from stream_nb.events.codec import published_score
from stream_nb.replay.cli import replay_and_report

SPAM_WORDS = "cash prize claim free winner pills cheap offer credit loan".split()
HAM_WORDS = "meeting lunch project report budget agenda review draft schedule team".split()
SHARED = "the a to and you for your is this on with".split()


def saturating_stream(n_events: int, seed: int) -> list[dict]:
    """Long two-class messages, so P(spam) rounds to 0.0 or 1.0 for most of them; a fifth of the
    hams carry spam words and a fifth of the spams ham words (hard cases among the saturated
    ones); every tenth event is unlabeled."""
    rng = random.Random(seed)
    events = []
    for i in range(n_events):
        spam = rng.random() < 0.4 if i > 1 else i == 1  # a ham, then a spam: both classes from the start
        own, other = (SPAM_WORDS, HAM_WORDS) if spam else (HAM_WORDS, SPAM_WORDS)
        length = rng.randint(40, 160)
        mixed = rng.uniform(0.35, 0.6) if rng.random() < 0.2 else rng.uniform(0.0, 0.2)
        words = [rng.choice(other if rng.random() < mixed else own) for _ in range(length)]
        words += rng.choices(SHARED, k=rng.randint(5, 30))
        events.append({"id": f"m{i}", "text": " ".join(words),
                       "label": None if i % 10 == 3 else ("spam" if spam else "ham")})
    return events


def reference_scores(config, events: list[dict]) -> list[tuple[str, float, float | None, float]]:
    """(id, P(spam), label, score) per event the loop predicts, predicting then learning one
    event at a time: score = s_spam - s_ham, or +-inf while only one class is known."""
    model, featurizer = config.build_model(), config.build_featurizer()
    out = []
    for event in events:
        x = featurizer.transform_one(event["text"])
        joint = model.joint_log_likelihood(x)
        if joint:
            score = (joint["spam"] - joint["ham"] if len(joint) == 2 else math.inf if "spam" in joint
                     else -math.inf)
            out.append((event["id"], model.predict_proba_one(x).get("spam", 0.0), event["label"], score))
        if event["label"] is not None:
            model.learn_one(x, event["label"])
    return out


def mann_whitney(scores: list[float], positive: list[bool]) -> Fraction:
    spams = [s for s, p in zip(scores, positive) if p]
    hams = [s for s, p in zip(scores, positive) if not p]
    wins = sum(2 if s > h else 1 if s == h else 0 for s in spams for h in hams)
    return Fraction(wins, 2 * len(spams) * len(hams))


def spam_missed_at_one_ham_in_a_thousand(scores: list[float], positive: list[bool]) -> Fraction:
    spams = sum(positive)
    hams = len(positive) - spams
    best = Fraction(1)
    for threshold in sorted(set(scores)) + [math.inf]:
        false_positives = sum(1 for s, p in zip(scores, positive) if not p and s >= threshold)
        if false_positives * 1000 <= hams:
            best = min(best, Fraction(sum(1 for s, p in zip(scores, positive) if p and s < threshold), spams))
    return best


def test_the_score_ranks_the_events_p_ties_and_replay_measures_on_it(tmp_path):
    events = saturating_stream(700, seed=3)
    config = load_config(None, ['evaluation.positive="spam"'])
    reference = reference_scores(config, events)
    _, _, reports = replay_and_report(events, [("t", config)], tmp_path, batch_size=64, scores=True)
    report = reports[0]

    labeled = [(p, label, score) for _, p, label, score in reference if label is not None]
    p_spam = [p for p, _, _ in labeled]
    # the ranking measures read an event scored while the model knew one class as the neutral 0
    # (a model that knows one class cannot rank; its message says +-inf, alpha = 1 gives no other)
    scores = [score if math.isfinite(score) else 0.0 for _, _, score in labeled]
    assert scores.count(0.0) == 1  # the first spam, predicted when only ham was known
    is_spam = [label == "spam" for _, label, _ in labeled]
    saturated = sum(1 for p in p_spam if p in (0.0, 1.0))
    assert saturated > 0.3 * len(labeled)  # P ties at 1.0 (or 0.0) for a third of the stream...
    finite = [score for score in scores if math.isfinite(score)]
    assert len(set(finite)) == len(finite) >= len(scores) - 5  # ...the scores for none of it
    by_score, by_p = mann_whitney(scores, is_spam), mann_whitney(p_spam, is_spam)
    assert by_p < by_score < 1  # ties at P = 1.0 and 0.0 cost area; the score separates them
    assert report["events"] == 700 and report["labeled_events_scored"] == len(labeled)
    assert report["roc_auc"] == float(by_score)
    trec = report["trec"]
    assert trec["one_minus_roca_percent"] == pytest.approx(100 * float(1 - by_score), abs=1e-12)
    assert trec["sm_at_hm_0_1_percent"] == pytest.approx(
        100 * float(spam_missed_at_one_ham_in_a_thousand(scores, is_spam)), abs=1e-12)
    assert trec["sm_at_hm_0_1_percent"] < 100 * float(spam_missed_at_one_ham_in_a_thousand(p_spam, is_spam))

    with (tmp_path / "scores.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0])[-1] == "score"
    assert [float(row["score"]) for row in rows] == scores  # the very floats, to the bit
    assert [float(row["p_spam"]) for row in rows] == p_spam

    predicted = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    unlabeled = {event_id: score for event_id, _, label, score in reference if label is None}
    assert len(predicted) == 70 and len(unlabeled) == 70
    assert {line["id"]: line["score"] for line in predicted} == unlabeled
    assert all(math.isfinite(score) for score in unlabeled.values())


def test_predictions_of_an_unknown_positive_or_of_many_classes_carry_no_score(tmp_path):
    events = [{"id": f"e{i}", "text": f"w{i % 3} x{i % 5}", "label": None if i % 4 == 3 else f"c{i % 3}"}
              for i in range(60)]
    replay_and_report(events, [("t", load_config(None))], tmp_path, batch_size=16)
    lines = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(lines) == 15 and not any("score" in line for line in lines)


def test_the_unsure_band_on_the_score_counts_what_lies_inside_it(tmp_path):
    events = saturating_stream(400, seed=8)
    low, high = -30.0, 20.0
    config = load_config(None, ['evaluation.positive="spam"', f"evaluation.unsure_score_band=[{low}, {high}]"])
    reference = reference_scores(config, events)
    _, _, reports = replay_and_report(events, [("t", config)], tmp_path, batch_size=50)
    summary = reports[0]["unsure_score_band"]
    assert "unsure_band" not in reports[0]
    labeled = [(label, score) for _, _, label, score in reference if label is not None]
    unsure = [1 for _, score in labeled if low < score < high]
    sure = [(("spam" if score >= high else "ham"), label) for label, score in labeled if not low < score < high]
    assert summary["band"] == [low, high] and summary["positive"] == "spam"
    assert summary["unsure"] == len(unsure) > 0
    assert summary["sure_accuracy"] == sum(v == t for v, t in sure) / len(sure)
    assert summary["unsure_share"] == len(unsure) / len(labeled)


@pytest.mark.parametrize("settings, message", [
    (['evaluation.positive="spam"', "evaluation.unsure_score_band=[1.0]"], "expected [low, high] in nats"),
    (['evaluation.positive="spam"', "evaluation.unsure_score_band=[2.0, 1.0]"], "low <= high"),
    (['evaluation.positive="spam"', "evaluation.unsure_score_band=[-inf, 1.0]"], "finite numbers"),
    (['evaluation.positive="spam"', 'evaluation.unsure_score_band=["a", 1.0]'], "expected [low, high]"),
    (["evaluation.unsure_score_band=[-2.0, 2.0]"], "needs evaluation.positive"),
    (['evaluation.positive="spam"', "evaluation.unsure_band=[0.1, 0.9]", "evaluation.unsure_score_band=[-2.0, 2.0]"],
     "not both"),
    (['evaluation.positive="spam"', "evaluation.unsure_score_band=[-2e6, 2.0]"], "is outside"),
])
def test_a_bad_score_band_is_refused_naming_the_key(settings, message):
    with pytest.raises(ConfigError, match=r"^evaluation.unsure_score_band: .*" + message.replace("[", r"\[")):
        load_config(None, settings)


def test_a_p_band_and_its_score_band_give_the_same_verdicts_away_from_the_edges():
    from stream_nb.model.decision import score_verdict, verdict

    rng = random.Random(2)
    edge = math.log(9)
    for _ in range(2000):
        score = rng.uniform(-6, 6)
        if abs(abs(score) - edge) < 1e-9:
            continue
        p = 1 / (1 + math.exp(-score))
        proba = {"ham": 1 - p, "spam": p}
        assert score_verdict(proba, score, "spam", (-edge, edge)) == verdict(proba, "spam", (0.1, 0.9))


@pytest.mark.parametrize("classes", [["ham", "spam"], ["a", "b", "c"]])
def test_the_recorders_scores_are_log_odds_of_each_recorded_row(classes):
    from stream_nb.model.posterior import Posterior, log_odds_of
    from stream_nb.replay.evaluation import EvaluationRecorder

    rng = random.Random(5)
    recorder, rows = EvaluationRecorder(), []
    for i in range(500):
        present = classes if i > 3 else classes[: 1 + i % 2]  # early events: fewer classes known
        log_scores = [rng.choice([rng.uniform(-900, 0), -math.inf, math.inf]) if rng.random() < 0.05
                      else rng.uniform(-900, 0) for _ in present]
        proba = Posterior({label: 1 / len(present) for label in present})
        proba.log_scores = log_scores
        recorder.update(rng.choice(classes), present[0], proba)
        rows.append(dict(zip(present, log_scores)))
    for label in classes:
        expected = [log_odds_of([row.get(c, -math.inf) for c in classes], classes.index(label)) for row in rows]
        got = recorder.log_odds(label).tolist()
        assert [repr(v) for v in got] == [repr(v) for v in expected]
        assert not any(v != v for v in got)
        # what the ranking measures read: 0 where the model did not know the class and another one
        ranked = [0.0 if label not in row or len(row) < 2 else score for row, score in zip(rows, expected)]
        assert [repr(v) for v in recorder.scores(label).tolist()] == [repr(v) for v in ranked]
        assert ranked.count(0.0) >= 2


def test_a_published_score_is_always_a_number(tmp_path):
    """Found in use: no "score" before anything was learned (jq: null) and the string "-Infinity"
    while only ham was known; a threshold script had to handle three types. Now 0.0 before any
    class (no evidence), -1e9 / +1e9 for the infinite log-odds, the log-odds otherwise."""
    events = [{"id": "before", "text": "win cash", "label": None},
              {"id": "h1", "text": "lunch at noon", "label": "ham"},
              {"id": "ham-only", "text": "win cash", "label": None},
              {"id": "s1", "text": "win cash now", "label": "spam"},
              {"id": "both", "text": "win cash", "label": None}]
    config = load_config(None, ['evaluation.positive="spam"'])
    replay_and_report(events, [("t", config)], tmp_path, batch_size=1)
    scores = {line["id"]: line["score"] for line in map(json.loads, (tmp_path / "predictions.jsonl").read_text().splitlines())}
    model, featurizer = config.build_model(), config.build_featurizer()
    for event in events[1:4:2]:
        model.learn_one(featurizer.transform_one(event["text"]), event["label"])
    joint = model.joint_log_likelihood(featurizer.transform_one("win cash"))
    assert scores == {"before": 0.0, "ham-only": -1e9, "both": joint["spam"] - joint["ham"]}
    assert all(type(score) is float for score in scores.values())
    assert (published_score(None), published_score(math.inf), published_score(-math.inf), published_score(2.5)) == (
        0.0, 1e9, -1e9, 2.5)
    with pytest.raises(ValueError, match="not a number"):
        published_score(math.nan)
