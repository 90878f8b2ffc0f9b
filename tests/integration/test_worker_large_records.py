"""Records at the broker's size limit against a real broker (issue 33): a record of 1,048,400
bytes, which a default topic takes, is too large for the worker's events; its dead letter (the
same bytes plus our headers) must not stop the worker. The worker gives its dead-letter topic
room at start, cuts what a topic still cannot take, and never retries a refusal for ever."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from stream_nb.kafka.limits import DEAD_LETTER_HEADROOM

from worker_support import (
    Message,
    Topics,
    WorkerProcess,
    create_topics,
    labeled_event,
    predictions_by_id,
    produce,
    read_topic,
    unlabeled_event,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka

AT_THE_LIMIT = 1_048_400  # a default topic (max.message.bytes 1,048,588) takes it with its batch header
DEFAULT_TOPIC_LIMIT = 1_048_588
ALL = {"mode": "all"}  # every labeled event learned: the stop line's count is exact


def limit_of(bootstrap: str, topic: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                           configs={"max.message.bytes": None})], config_filter="all")
        return int(described["topic"][topic]["max.message.bytes"]["value"])
    finally:
        admin.close()


def set_limit(bootstrap: str, topic: str, limit: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": str(limit)})])
    finally:
        admin.close()


def create(bootstrap: str, topics: Topics, dead_letter_limit: int | None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        dead = {"max.message.bytes": str(dead_letter_limit)} if dead_letter_limit else {}
        admin.create_topics([NewTopic(topics.labeled, 1, 1), NewTopic(topics.unlabeled, 1, 1),
                             NewTopic(topics.predictions, 1, 1), NewTopic(topics.dead_letters, 1, 1, topic_configs=dead)],
                            wait_for_metadata=True)
    finally:
        admin.close()


def traffic(topics: Topics, sms, big: bytes) -> tuple[list[Message], dict[str, str]]:
    """200 labeled and 100 unlabeled events, with a record of `big` bytes on each input topic in
    the middle: everything after it must still be learned and predicted."""
    labeled = [Message(topics.labeled, labeled_event(f"l{i}", text, label)) for i, (label, text) in enumerate(sms[:200])]
    unlabeled = {f"u{i}": text for i, (_, text) in enumerate(sms[200:300])}
    messages = [Message(topics.unlabeled, unlabeled_event(i, text), key=i.encode()) for i, text in unlabeled.items()]
    return [*labeled[:100], Message(topics.labeled, big, key=b"big-labeled"), *labeled[100:],
            *messages[:50], Message(topics.unlabeled, big, key=b"big-unlabeled"), *messages[50:]], unlabeled


def run_to_the_end(config_path, tmp_path, name: str) -> WorkerProcess:
    worker = WorkerProcess(config_path, tmp_path / f"{name}.log", stop_when_idle=4)
    assert worker.wait(240) == 0, worker.log_tail()
    return worker


def assert_every_prediction_once(bootstrap: str, topics: Topics, unlabeled: dict[str, str]) -> None:
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert sorted(predictions) == sorted(unlabeled)
    assert all(len(copies) == 1 for copies in predictions.values())


def test_a_record_at_the_limit_is_dead_lettered_whole_on_a_topic_the_worker_made_room_on(kafka_broker, tmp_path, sms):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("large")
    big = b"a" * AT_THE_LIMIT
    messages, unlabeled = traffic(topics, sms, big)
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])  # the worker creates its outputs
    produce(bootstrap, messages)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints", training=ALL)
    worker = run_to_the_end(config_path, tmp_path, "worker")
    # the worker created its dead-letter topic and gave it room for the inputs' largest records
    assert limit_of(bootstrap, topics.dead_letters) == DEFAULT_TOPIC_LIMIT + DEAD_LETTER_HEADROOM
    assert_every_prediction_once(bootstrap, topics, unlabeled)
    dead = read_topic(bootstrap, topics.dead_letters)
    assert sorted((record.key, len(record.value), dict(record.headers)["stream-nb-reason"]) for record in dead) == [
        (b"big-labeled", AT_THE_LIMIT, b"too_large"), (b"big-unlabeled", AT_THE_LIMIT, b"too_large")]
    assert all(record.value == big and "stream-nb-truncated" not in dict(record.headers) for record in dead)
    log = worker.log_path.read_text()
    assert "MessageSizeTooLarge" not in log and "unreachable" not in log, worker.log_tail()
    assert "200 learned, 100 predictions and 2 dead letters published" in log, worker.log_tail()


@pytest.mark.parametrize("when", ["before-start", "while-running"])
def test_a_dead_letter_topic_that_stays_small_gets_letters_cut_to_fit_and_the_worker_goes_on(
        kafka_broker, tmp_path, sms, when, transport):
    """before-start: the operator's topic of 200,000 bytes and kafka.create_topics = false (the
    worker may not change topics): one warning at start, letters cut. while-running: the limit
    lowered after start; the broker's refusal makes the worker cut its letters and redo, once."""
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new(f"cut-{when}")
    big = b"\xff" * AT_THE_LIMIT  # not UTF-8 either: too_large is checked first
    messages, unlabeled = traffic(topics, sms, big)
    small = 200_000
    create(bootstrap, topics, small if when == "before-start" else None)
    produce(bootstrap, messages[:100])  # the first 100 labeled: the worker runs before the rest comes
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               kafka={"create_topics": when == "while-running"}, training=ALL, transport=transport)
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=4)
    try:
        wait_until(lambda: "started: instance" in worker.log_path.read_text(), 120, "the start", worker)
        if when == "while-running":
            assert limit_of(bootstrap, topics.dead_letters) == DEFAULT_TOPIC_LIMIT + DEAD_LETTER_HEADROOM
            set_limit(bootstrap, topics.dead_letters, small)
        produce(bootstrap, messages[100:])
        assert worker.wait(240) == 0, worker.log_tail()
    finally:
        worker.kill()
    assert_every_prediction_once(bootstrap, topics, unlabeled)
    dead = read_topic(bootstrap, topics.dead_letters)
    assert sorted(record.key for record in dead) == [b"big-labeled", b"big-unlabeled"]
    for record in dead:
        headers = dict(record.headers)
        assert headers["stream-nb-reason"] == b"too_large"
        assert headers["stream-nb-truncated"] == b"value"
        assert headers["stream-nb-original-bytes"] == f"value={AT_THE_LIMIT} key={len(record.key)} headers=0".encode()
        assert big.startswith(record.value) and small - 2_048 < len(record.value) < small
    log = worker.log_path.read_text()
    warnings = [line for line in log.splitlines() if "larger dead letters are cut to fit" in line]
    refusals = [line for line in log.splitlines() if "refused an output as too large" in line]
    if when == "before-start":
        assert (len(warnings), len(refusals)) == (1, 0), log
    else:
        assert (len(warnings), len(refusals)) == (0, 1), log
    assert "200 learned, 100 predictions and 2 dead letters published" in log, worker.log_tail()


def test_outputs_the_broker_refuses_whatever_their_size_stop_the_worker_with_one_line(kafka_broker, tmp_path, sms,
                                                                                       transport):
    """A predictions topic that takes 100 bytes: no cut helps; exit 2 naming the topics, not a loop."""
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("refused")
    create(bootstrap, topics, None)
    set_limit(bootstrap, topics.predictions, 100)
    messages, _ = traffic(topics, sms, b"x")
    produce(bootstrap, messages)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints", training=ALL,
                               transport=transport)
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=4)
    try:
        assert worker.wait(180) == 2, worker.log_tail()
    finally:
        worker.kill()
    last = worker.log_path.read_text().splitlines()[-1]
    assert last.startswith("stream-nb run: kafka: the broker refuses the worker's outputs as too large"), last
    assert topics.predictions in last and topics.dead_letters in last, last


def big_mail(subject: str, body_line: bytes, size: int) -> bytes:
    head = f"Subject: {subject}\r\nFrom: a@example.com\r\n\r\n".encode()
    return head + body_line * ((size - len(head)) // len(body_line) + 1)


def test_mail_larger_than_what_is_read_gets_a_verdict_on_what_is_read(kafka_broker, tmp_path, transport):
    """Raw mail (value_format = "mail", configs/mail.toml): a 3 MB message on topics an operator
    raised to 4 MB and a 1,048,400-byte one on a default topic get a prediction, marked
    "truncated" and equal to the model's prediction of their first 1 MiB (as SpamAssassin and
    rspamd give large mail a verdict on what they scan); small mail is not marked."""
    from stream_nb.features.mail import MailFeaturizer
    from stream_nb.mail.identity import mail_id
    from stream_nb.mail.parse import DEFAULT_MAX_BYTES as READ

    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("bigmail")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        raised = {"max.message.bytes": str(4 * 1024 * 1024)}
        admin.create_topics([NewTopic(topics.labeled, 1, 1, topic_configs=raised),
                             NewTopic(topics.unlabeled, 1, 1, topic_configs=raised)], wait_for_metadata=True)
    finally:
        admin.close()
    spammy, hammy = b"win cash prize now free offer click here\r\n", b"meeting agenda lunch tomorrow project notes\r\n"
    labeled = [(big_mail(f"offer {i}", spammy, 2_000), "spam") for i in range(20)]
    labeled += [(big_mail(f"notes {i}", hammy, 2_000), "ham") for i in range(20)]
    unlabeled = {"three-mb": big_mail("offer", spammy, 3_000_000), "at-the-limit": big_mail("notes", hammy, AT_THE_LIMIT),
                 "small": big_mail("offer", spammy, 3_000)}
    messages = [Message(topics.labeled, raw, f"l{i}".encode(), headers=(("label", label.encode()),))
                for i, (raw, label) in enumerate(labeled)]
    messages += [Message(topics.unlabeled, raw, key.encode()) for key, raw in unlabeled.items()]
    produce(bootstrap, messages)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               kafka={"value_format": "mail"}, worker={"labels_first_wait_s": 600},
                               replace=mail_tables(), transport=transport)
    run_to_the_end(config_path, tmp_path, "worker")
    # a raw message's id is its own (here, no Message-ID: the digest of its bytes), not its record key
    by_id = {key: copies[0] for key, copies in predictions_by_id(read_topic(bootstrap, topics.predictions)).items()}
    assert sorted(by_id) == sorted(mail_id(raw) for raw in unlabeled.values())
    assert read_topic(bootstrap, topics.dead_letters) == []
    predictions = {key: by_id[mail_id(raw)] for key, raw in unlabeled.items()}
    # the reference: the model core over the first 1 MiB of each message
    from stream_nb.config import load_config
    from stream_nb.model.training import predict_learn

    config = load_config(config_path)
    model, featurizer = config.build_model(), MailFeaturizer(config.build_event_featurizer())
    for raw, label in labeled:
        predict_learn(model, [featurizer.transform_one(raw)], [label], **config.training)
    for key, raw in unlabeled.items():
        prediction = predictions[key]
        assert prediction.get("truncated", False) is (len(raw) > READ), key
        expected = model.predict_proba_one(featurizer.transform_one(raw))  # it reads the first 1 MiB
        assert prediction["proba"] == {str(c): p for c, p in expected.items()}, key
    assert (predictions["three-mb"]["label"], predictions["at-the-limit"]["label"]) == ("spam", "ham")


def mail_tables() -> dict:
    """configs/mail.toml's [model], [features], [training] and [evaluation], as shipped."""
    import tomllib
    from pathlib import Path

    shipped = tomllib.loads((Path(__file__).resolve().parents[2] / "configs" / "mail.toml").read_text())
    return {name: shipped[name] for name in ("model", "features", "training", "evaluation") if name in shipped}
