"""A spam filter has the classes it declares: on a real broker, a label beyond configs/spam.toml's
[model] classes goes to the dead-letter topic as undeclared_label and never becomes a class."""

from __future__ import annotations

import json

import pytest

from worker_support import (
    Message,
    Topics,
    WorkerProcess,
    create_topics,
    labeled_event,
    latest_summary,
    predictions_by_id,
    produce,
    read_topic,
    reference_digest,
    unlabeled_event,
    write_config,
)

pytestmark = pytest.mark.kafka

STRAY = [b'{"id": "x", "text": "t", "label": 1}',  # the example
         labeled_event("y", "free cash now", "Spam"),
         labeled_event("z", "see you at lunch", "1")]


@pytest.mark.parametrize("settings", ["spam.toml as shipped", "plain"])
def test_a_stray_label_is_dead_lettered_as_undeclared_label_and_makes_no_class(kafka_broker, tmp_path, sms,
                                                                             transport, settings):
    training = {"mode": "all"} if settings == "plain" else None
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("classes")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    good = sms[:60]
    labeled = [labeled_event(f"g{i}", text, label) for i, (label, text) in enumerate(good)]
    values = labeled[:20] + STRAY[:1] + labeled[20:40] + STRAY[1:] + labeled[40:]
    messages = [Message(topics.labeled, value, f"k{i}".encode()) for i, value in enumerate(values)]
    messages += [Message(topics.unlabeled, unlabeled_event(f"u{i}", text), f"u{i}".encode())
                 for i, (_, text) in enumerate(sms[60:80])]
    produce(bootstrap, messages)

    # every label before any prediction, however slowly they are read
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               worker={"labels_first_wait_s": 600}, transport=transport, training=training)
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=2)
    try:
        assert worker.wait(180) == 0, worker.log_tail()
    finally:
        worker.kill()

    dead = read_topic(bootstrap, topics.dead_letters)
    assert [record.value for record in dead] == STRAY  # the original bytes, in offset order
    assert [dict(record.headers)["stream-nb-reason"] for record in dead] == [b"undeclared_label"] * 3
    assert [dict(record.headers)["stream-nb-detail"] for record in dead] == [
        f"label {label} is not a declared class ('ham', 'spam')".encode() for label in ("1", "'Spam'", "'1'")]
    assert [int(dict(record.headers)["stream-nb-source-offset"]) for record in dead] == [20, 41, 42]

    # the model learned the good events only, and its classes are the declared ones
    summary = latest_summary(tmp_path / "checkpoints")
    assert (summary.digest, summary.events_learned) == reference_digest([(text, label) for label, text in good],
                                                                        training)
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert sorted(predictions) == sorted(f"u{i}" for i in range(20))
    for (prediction,) in predictions.values():
        assert set(prediction["proba"]) == {"ham", "spam"} and prediction["label"] in ("ham", "spam")
        assert prediction["verdict"] in ("ham", "spam", "unsure")
    assert json.loads(dead[0].value)["label"] == 1
