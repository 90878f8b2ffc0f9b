"""Structured events end to end on a real broker: files of features published with
`stream-nb publish`, predicted by `stream-nb run` with a categorical and a Gaussian model named
in the configuration, as a user would run them."""

from __future__ import annotations

import json
import tomllib

import pytest
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB

from worker_support import Topics, create_topics, predictions_by_id, read_topic, run_cli, write_config

pytestmark = pytest.mark.kafka


def publish_iris(tmp_path, bootstrap: str, topics: Topics, transport: str) -> list:
    """Seed 001's split: the train half to the labeled topic, the test half (labels dropped by
    publish --no-label) to the unlabeled one, features {"0".."3": value}. Returns the test half's
    true labels by id."""
    X, y = load_iris(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)
    for name, rows, labels in (("train", X_train, y_train), ("test", X_test, y_test)):
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"id": f"{name}{i}", "features": {str(j): float(v) for j, v in enumerate(row)},
                        "label": int(label)}) + "\n" for i, (row, label) in enumerate(zip(rows, labels))),
            encoding="utf-8")
    for name, topic, extra in (("train", topics.labeled, ()), ("test", topics.unlabeled, ("--no-label",))):
        done = run_cli("publish", str(tmp_path / f"{name}.jsonl"), "--topic", topic, "--bootstrap", bootstrap,
                       "--transport", transport, *extra)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == f"published 75 events to {topic}"
    return {f"test{i}": int(label) for i, label in enumerate(y_test)}


def run_worker(tmp_path, bootstrap: str, topics: Topics, model: dict, transport: str, *,
               features: dict | None = None, training: dict | None = None) -> dict:
    # Every label before any prediction (labels first, no time limit): the seed's protocol.
    config = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                          training=training or {"mode": "all"}, worker={"labels_first_wait_s": 600},
                          transport=transport, replace={"model": model, "features": features or {}, "evaluation": {}})
    done = run_cli("run", "--config", str(config), "--stop-when-idle", "2", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_topic(bootstrap, topics.dead_letters) == []
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert all(len(copies) == 1 for copies in predictions.values())
    return {event_id: copies[0] for event_id, copies in predictions.items()}


def test_iris_as_categories_through_publish_and_run_predicts_68_of_75(kafka_broker, tmp_path, transport):
    topics = Topics.new("iris-cat")
    create_topics(kafka_broker.bootstrap, [topics.labeled, topics.unlabeled])
    truth = publish_iris(tmp_path, kafka_broker.bootstrap, topics, transport)
    predictions = run_worker(tmp_path, kafka_broker.bootstrap, topics,
                             {"kind": "categorical", "alpha": 1.0, "prior_alpha": 1.0}, transport)
    assert set(predictions) == set(truth)
    right = sum(predictions[event_id]["label"] == label for event_id, label in truth.items())
    assert (right, len(truth)) == (68, 75)  # the seed's "accuracy 0.9"
    # each prediction explains itself by the features that told the two best classes apart
    clues = [p["clues"] for p in predictions.values()]
    assert all({name for name, _ in c} <= {"0", "1", "2", "3"} and all(w > 0 for _, w in c[:1]) for c in clues)
    print(f"\npredictions with clues: {sum(map(bool, clues))} of 75")
    assert sum(map(bool, clues)) == 75


def test_iris_numbers_through_publish_and_run_predict_as_scikit_learn(kafka_broker, tmp_path, transport):
    topics = Topics.new("iris-gauss")
    create_topics(kafka_broker.bootstrap, [topics.labeled, topics.unlabeled])
    truth = publish_iris(tmp_path, kafka_broker.bootstrap, topics, transport)
    predictions = run_worker(tmp_path, kafka_broker.bootstrap, topics, {"kind": "gaussian"}, transport)
    X, y = load_iris(return_X_y=True)
    X_train, X_test, y_train, _ = train_test_split(X, y, test_size=0.5, random_state=0)
    expected = GaussianNB().fit(X_train, y_train).predict(X_test).tolist()
    assert [predictions[f"test{i}"]["label"] for i in range(75)] == expected
    right = sum(predictions[event_id]["label"] == label for event_id, label in truth.items())
    print(f"\nGaussian naive Bayes on seed 001's Iris split: {right} of 75 right")


@pytest.mark.parametrize("kind", ["bernoulli", "complement"])
def test_bernoulli_and_complement_from_configuration_through_publish_and_run(kafka_broker, tmp_path, sms, kind,
                                                                             transport):
    # configs/spam.toml as shipped ([training] thick-threshold included) with another count model:
    # each prediction equals, bit for bit, the model core's after the same labels one at a time.
    from stream_nb.config import load_config
    from stream_nb.model.training import predict_learn

    from worker_support import SPAM_CONFIG

    topics = Topics.new(f"kind-{kind}")
    create_topics(kafka_broker.bootstrap, [topics.labeled, topics.unlabeled])
    labeled, unlabeled = sms[:1_500], sms[1_500:1_800]
    (tmp_path / "labeled.tsv").write_text("".join(f"{label}\t{text}\n" for label, text in labeled), encoding="utf-8")
    (tmp_path / "unlabeled.tsv").write_text("".join(f"{label}\t{text}\n" for label, text in unlabeled),
                                            encoding="utf-8")
    for name, topic, extra in (("labeled", topics.labeled, ()), ("unlabeled", topics.unlabeled, ("--no-label",))):
        done = run_cli("publish", str(tmp_path / f"{name}.tsv"), "--topic", topic, "--bootstrap",
                       kafka_broker.bootstrap, "--transport", transport, *extra)
        assert done.returncode == 0, done.stderr
    spam = tomllib.loads(SPAM_CONFIG.read_text())
    predictions = run_worker(tmp_path, kafka_broker.bootstrap, topics, {**spam["model"], "kind": kind}, transport,
                             features=spam["features"], training=spam["training"])
    assert len(predictions) == 300

    config = load_config(SPAM_CONFIG, [f'model.kind="{kind}"'])
    model, featurizer = config.build_model(), config.build_featurizer()
    for label, text in labeled:
        predict_learn(model, [featurizer.transform_one(text)], [label], **config.training)
    for i, (_, text) in enumerate(unlabeled):
        expected = model.predict_proba_one(featurizer.transform_one(text))
        assert predictions[f"unlabeled:{1 + i}"]["proba"] == {str(c): p for c, p in expected.items()}
    right = sum(predictions[f"unlabeled:{1 + i}"]["label"] == label for i, (label, _) in enumerate(unlabeled))
    assert right / 300 > 0.9, right  # a spam filter, not a coin
