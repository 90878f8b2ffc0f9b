"""The score on a real broker: every prediction the worker publishes carries the log-odds of the
positive class (configured, or spam of spam/ham), computed apart here from the model core's joint
log likelihoods (divided by sqrt(distinct features) under [evaluation] score_scale =
"sqrt_features"), and an unsure band in nats decides the verdicts on it."""

from __future__ import annotations

import math

import pytest

from stream_nb.config import load_config
from stream_nb.model.decision import score_verdict

from worker_support import (
    Message,
    Topics,
    create_topics,
    labeled_event,
    predictions_by_id,
    produce,
    read_topic,
    reference_score,
    unlabeled_event,
    write_config,
)

pytestmark = pytest.mark.kafka

BAND = [-4.0, 3.0]
SCALED_BAND = [-0.6, 0.4]  # nats per sqrt(distinct feature)


@pytest.mark.parametrize("evaluation", [{"positive": "spam", "unsure_score_band": BAND}, {},
                                        {"positive": "spam", "unsure_score_band": SCALED_BAND,
                                         "score_scale": "sqrt_features"}],
                         ids=["score-band", "positive-guessed", "sqrt-features"])
def test_predictions_carry_the_score_and_a_score_band_decides_the_verdict(kafka_broker, tmp_path, sms, transport,
                                                                          evaluation):
    from stream_nb.worker.loop import Worker

    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("score")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    labeled, unlabeled = sms[:300], sms[300:400]
    messages = [Message(topics.labeled, labeled_event(f"l{i}", text, label), f"l{i}".encode())
                for i, (label, text) in enumerate(labeled)]
    messages += [Message(topics.unlabeled, unlabeled_event(f"u{i}", text), f"u{i}".encode())
                 for i, (_, text) in enumerate(unlabeled)]
    produce(bootstrap, messages)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               training={"mode": "all"}, worker={"labels_first_wait_s": 600}, transport=transport,
                               replace={"evaluation": evaluation})
    config = load_config(config_path)
    Worker(config).run(stop_when_idle_s=1.5, install_signal_handlers=False)

    # labels first: every prediction was made by the model of all 300 labels
    model, featurizer = config.build_model(), config.build_featurizer()
    model.learn_many([featurizer.transform_one(text) for _, text in labeled], [label for label, _ in labeled])
    predictions = {event_id: copies[0] for event_id, copies in predictions_by_id(
        read_topic(bootstrap, topics.predictions)).items()}
    assert len(predictions) == 100
    verdicts = set()
    for i, (_, text) in enumerate(unlabeled):
        prediction = predictions[f"u{i}"]
        x = featurizer.transform_one(text)
        expected = reference_score(model, x, config if evaluation else load_config(None))
        band = BAND
        if evaluation.get("score_scale") == "sqrt_features":  # per sqrt(the message's distinct features)
            expected, band = expected / math.sqrt(max(len(x), 1)), SCALED_BAND
        score = prediction["score"]
        assert score == expected and math.isfinite(score)  # s_spam - s_ham, bit for bit
        if evaluation:
            assert prediction["verdict"] == score_verdict(prediction["proba"], score, "spam", band)
            verdicts.add(prediction["verdict"])
        else:
            assert "verdict" not in prediction
    assert verdicts == ({"ham", "spam"} if evaluation else set())
