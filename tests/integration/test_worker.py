"""The worker against a real Kafka broker: exact predictions, exact recovery after SIGKILL and
after a broker restart, dead letters for every kind of malformed message, a truncated
checkpoint, and configuration errors. No mocks: every figure is read back from Kafka or from
the checkpoint files and compared with the model core's answer for the same events.
"""

from __future__ import annotations

import json
import random
import time
import tomllib
from itertools import chain
from pathlib import Path

import pytest

from stream_nb.checkpoint import CheckpointStore
from stream_nb.config import load_config
from stream_nb.events import REASONS

from client_matrix import scenarios_with_clients, with_client
from worker_support import (
    SPAM_CONFIG,
    Message,
    Topics,
    WorkerProcess,
    assert_predictions_reproduced,
    create_topics,
    end_offset,
    error_line,
    labeled_event,
    latest_summary,
    newest_learned,
    newest_position,
    predictions_by_id,
    produce,
    read_summary,
    read_topic,
    reference_config,
    reference_digest,
    reference_digest_events,
    run_cli,
    set_client_quota,
    unlabeled_event,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka


def run_in_process(config_path: Path, idle_s: float = 1.5, overrides: tuple[str, ...] = ()) -> None:
    """The worker in this process (Worker(config).run), until `idle_s` without a record."""
    from stream_nb.worker.loop import Worker

    Worker(load_config(config_path, list(overrides))).run(stop_when_idle_s=idle_s, install_signal_handlers=False)


def interleaved_stream(rows, topics: Topics, n_labeled: int, n_unlabeled: int, seed: int, prefix: str):
    """`n_labeled` labeled and `n_unlabeled` unlabeled SMS events, shuffled together (seeded).
    Returns (messages in produce order, [(text, label)] labeled, [id] unlabeled)."""
    rng = random.Random(seed)
    kinds = ["l"] * n_labeled + ["u"] * n_unlabeled
    rng.shuffle(kinds)
    messages, labeled, unlabeled = [], [], []
    for i, kind in enumerate(kinds):
        label, text = rows[i % len(rows)]
        event_id = f"{prefix}-{i}"
        if kind == "l":
            messages.append(Message(topics.labeled, labeled_event(event_id, text, label), event_id.encode()))
            labeled.append((text, label))
        else:
            messages.append(Message(topics.unlabeled, unlabeled_event(event_id, text), event_id.encode()))
            unlabeled.append(event_id)
    return messages, labeled, unlabeled


def assert_predictions_cover(predictions: dict[str, list[dict]], unlabeled_ids: list[str], topic: str) -> int:
    """Every unlabeled id predicted at least once, nothing else predicted, and every copy of a
    prediction names the same source (the unlabeled topic, partition 0, the id's own offset:
    ids were produced in order, so the i-th unlabeled id sits at offset i). Returns duplicates."""
    assert set(predictions) == set(unlabeled_ids)
    for offset, event_id in enumerate(unlabeled_ids):
        for prediction in predictions[event_id]:
            assert prediction["id"] == event_id
            assert prediction["source"] == {"topic": topic, "partition": 0, "offset": offset}, prediction
    return sum(len(copies) - 1 for copies in predictions.values())


# ---------------------------------------------------------------------------------------------
# 1. End to end: labels first, and each prediction is the model core's at the offsets it names

SHIPPED, PLAIN = None, {"mode": "all"}  # configs/spam.toml's [training] (thick-threshold), or learn all


@pytest.mark.parametrize("training", [SHIPPED, PLAIN], ids=["spam.toml", "mode-all"])
def test_predictions_reflect_every_label_in_the_log_and_equal_the_model_core(kafka_broker, tmp_path, sms, training,
                                                                             transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("e2e")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    rng = random.Random(7)
    labeled, unlabeled, messages = [], {}, []
    for i in range(700):
        label, text = sms[(i * 7) % len(sms)]
        event_id = f"e{i}"
        if i >= 3 and rng.random() < 0.3:  # the first three are labeled; so is ~70% of the rest
            unlabeled[event_id] = text
            messages.append(Message(topics.unlabeled, unlabeled_event(event_id, text), event_id.encode()))
        else:
            labeled.append({"text": text, "label": label, "offset": len(labeled)})
            messages.append(Message(topics.labeled, labeled_event(event_id, text, label), event_id.encode()))
    produce(bootstrap, messages)

    # labels first with no time limit: the figures below must not depend on how fast the labels are read
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints", training=training,
                               worker={"labels_first_wait_s": 600}, transport=transport)
    run_in_process(config_path)

    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert assert_predictions_cover(predictions, list(unlabeled), topics.unlabeled) == 0  # exactly one each
    once = {event_id: copies[0] for event_id, copies in predictions.items()}
    # Labels first: every label was in the log before the worker started, so every prediction
    # reflects all 466 of them, whatever the polls looked like.
    assert assert_predictions_reproduced(once, labeled, unlabeled, topics.labeled, training) == 1
    assert {tuple(p["model"]["labeled_offsets"][0]) for p in once.values()} == {(topics.labeled, 0, 466)}
    assert len(once) == 234
    assert read_topic(bootstrap, topics.dead_letters) == []

    summary = latest_summary(tmp_path / "checkpoints")
    expected_digest, expected_learned = reference_digest_events(labeled, training)
    assert (summary.digest, summary.events_learned) == (expected_digest, expected_learned)
    assert expected_learned == 466 if training == PLAIN else 0 < expected_learned < 466
    assert summary.offsets == {(topics.labeled, 0): 466}  # a checkpoint holds the labeled offsets only


def test_both_transports_publish_the_same_outputs_on_the_same_topics(kafka_broker, tmp_path, sms):
    """kafka-python and confluent-kafka workers read the same input topics, each into outputs of
    its own: the same predictions (bytes, but the checkpoint id) on the same partitions (keys
    hash alike), the same dead letters."""
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("both")
    create_topics(bootstrap, [topics.labeled])
    create_topics(bootstrap, [topics.unlabeled], partitions=2)
    messages = []
    for i in range(1_500):
        label, text = sms[(i * 3) % len(sms)]
        messages.append(Message(topics.labeled, labeled_event(f"l{i}", text, label), f"l{i}".encode()))
    messages.append(Message(topics.labeled, b'{"id": "bad", "text": "no label"}', b"bad"))
    for i in range(600):
        label, text = sms[(i * 11 + 1) % len(sms)]
        messages.append(Message(topics.unlabeled, unlabeled_event(f"u{i}", text), f"u{i}".encode()))
    messages.append(Message(topics.unlabeled, b"{not json", b"broken"))
    produce(bootstrap, messages)

    outputs = {}
    for transport in ("kafka-python", "confluent-kafka"):
        mine = topics.outputs(transport)
        create_topics(bootstrap, [mine.predictions], partitions=3)
        config_path = write_config(tmp_path / f"{transport}.toml", bootstrap, mine, tmp_path / transport,
                                   transport=transport)
        run_in_process(config_path)
        predictions = []
        for record in read_topic(bootstrap, mine.predictions):
            value = json.loads(record.value)
            value["model"].pop("checkpoint", None)
            predictions.append((record.key, record.partition, value))
        dead = [(record.key, record.value, sorted(record.headers)) for record in read_topic(bootstrap, mine.dead_letters)]
        outputs[transport] = sorted(predictions, key=lambda p: p[0]), sorted(dead)
    (python_predictions, python_dead), (confluent_predictions, confluent_dead) = outputs.values()
    assert len(python_predictions) == 600 and {p[1] for p in python_predictions} == {0, 1, 2}
    assert python_predictions == confluent_predictions
    assert [key for key, _, _ in python_dead] == [b"bad", b"broken"]
    assert python_dead == confluent_dead


# ---------------------------------------------------------------------------------------------
# 2. SIGKILL at random points, restarted each time: the state ends exactly as an uninterrupted run


# A feature budget that evicts several times over the run (SMS x4 under spam.toml holds ~52,000
# features): the checks must fall at the same labeled events across kills and restarts.
BUDGET = {"max_features": 20_000, "evict_every": 500}


@scenarios_with_clients("guarantee, training, model", [
    (("exactly_once", SHIPPED, None), "confluent-kafka"), (("at_least_once", SHIPPED, None), "kafka-python"),
    (("exactly_once", PLAIN, None), "kafka-python"), (("exactly_once", SHIPPED, BUDGET), "confluent-kafka"),
], ids=["exactly-once-spam.toml", "at-least-once-spam.toml", "exactly-once-mode-all", "exactly-once-spam.toml-budget"])
def test_sigkill_and_restart_ends_with_the_uninterrupted_state(kafka_broker, tmp_path, sms, guarantee, training, model,
                                                               transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("kill")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    n_labeled, n_unlabeled = 4 * len(sms), 2_000  # 22,296 labeled
    messages, labeled, unlabeled_ids = interleaved_stream(sms, topics, n_labeled, n_unlabeled, seed=11, prefix="k")
    produce(bootstrap, messages)

    checkpoints = tmp_path / "checkpoints"
    settings = {"checkpoint": {"every_events": 1500, "interval_s": 0.5}, "training": training, "model": model,
                "kafka": {"processing_guarantee": guarantee}}
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, checkpoints, **settings, transport=transport)
    log_path = tmp_path / "worker.log"
    rng = random.Random(20240611)
    # Kill once the newest checkpoint has read >= target labeled records (or, the last time, once
    # predictions are being published), after a random 0-150 ms more: mid-batch, mid-transaction
    # or mid-checkpoint, wherever that falls. Each worker is killed only after it has started.
    targets = [2_500 + 4_500 * i + rng.randint(0, 2_000) for i in range(4)]
    kills = []
    for target in [*targets, "predicting"]:
        starts = log_path.read_text().count(" checkpoint") if log_path.exists() else 0
        worker = WorkerProcess(config_path, log_path, stop_when_idle=3)
        try:
            wait_until(lambda: log_path.read_text().count(" checkpoint") > starts, 60, "the worker's start", worker)
            if target == "predicting":
                wait_until(lambda: end_offset(bootstrap, topics.predictions) >= 300, 90, "predictions", worker)
            else:
                wait_until(lambda: newest_position(checkpoints)[1].get((topics.labeled, 0), 0) >= target, 90,
                           f"a checkpoint at labeled offset {target}", worker)
            time.sleep(rng.uniform(0.0, 0.15))
            assert worker.alive(), "the worker finished before it could be killed"
            worker.kill()
            kills.append((target, newest_position(checkpoints)[1].get((topics.labeled, 0), 0)))
        finally:
            worker.kill()
    worker = WorkerProcess(config_path, log_path, stop_when_idle=3)
    try:
        assert worker.wait(120) == 0, worker.log_tail()
    finally:
        worker.kill()
    log = log_path.read_text()
    assert log.count("restored checkpoint") == 5  # every restart resumed from a checkpoint

    # The uninterrupted run: same input topics, its own outputs, group and checkpoint directory.
    reference_topics = topics.outputs("reference")
    reference_path = write_config(tmp_path / "reference.toml", bootstrap, reference_topics, tmp_path / "reference",
                                  **settings, transport=transport)
    run_in_process(reference_path)

    killed, reference = latest_summary(checkpoints), latest_summary(tmp_path / "reference")
    expected_digest, expected_learned = reference_digest(labeled, training, model)
    assert killed.events_learned == reference.events_learned == expected_learned
    assert killed.digest == reference.digest == expected_digest
    assert killed.offsets == reference.offsets == {(topics.labeled, 0): n_labeled}
    # The CLI's view of the same checkpoint directory.
    inspected = run_cli("inspect", str(checkpoints), "--json")
    assert inspected.returncode == 0, inspected.stderr
    summary = json.loads(inspected.stdout)
    assert (summary["events_learned"], summary["state_digest"]) == (expected_learned, reference.digest)
    if model:  # evictions happened in between (the unbounded vocabulary is larger), within the budget
        featurize = reference_config(training).build_featurizer().transform_one
        unbounded = len(set(chain.from_iterable(featurize(text) for text, _ in labeled)))
        since_last_check = labeled[len(labeled) - len(labeled) % model["evict_every"]:]
        room = model["max_features"] + sum(len(featurize(text)) for text, _ in since_last_check)
        assert 0.9 * model["max_features"] <= summary["vocabulary_size"] <= room < unbounded

    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    duplicates = assert_predictions_cover(predictions, unlabeled_ids, topics.unlabeled)
    aborted = len(read_topic(bootstrap, topics.predictions, committed=False)) - n_unlabeled - duplicates
    if guarantee == "exactly_once":
        assert duplicates == 0  # what a kill left in an open transaction was aborted on restart
    reference_predictions = predictions_by_id(read_topic(bootstrap, reference_topics.predictions))
    assert assert_predictions_cover(reference_predictions, unlabeled_ids, topics.unlabeled) == 0
    assert read_topic(bootstrap, topics.dead_letters) == []
    print(f"\nkill targets and newest checkpoint at each kill: {kills}; "
          f"predictions {sum(map(len, predictions.values()))} for {n_unlabeled} ids, {duplicates} duplicates, "
          f"{aborted} aborted")


# ---------------------------------------------------------------------------------------------
# 3. The broker stopped and restarted under a running worker


@pytest.mark.timeout(900)  # minutes of faults and recovery by design; 300 s is the default
@with_client("kafka-python")  # confluent-kafka meets lost brokers in test_cluster_failover
def test_worker_rides_out_a_broker_restart(tmp_path, sms, transport):
    from stream_nb.kafka.broker import LocalKafkaBroker

    broker = LocalKafkaBroker(tmp_path / "kafka")
    worker = None
    try:
        broker.start()
        bootstrap = broker.bootstrap
        topics = Topics.new("restart")
        create_topics(bootstrap, [topics.labeled, topics.unlabeled])
        before, labeled_before, unlabeled_before = interleaved_stream(sms, topics, 2 * len(sms), 1_000, seed=3, prefix="a")
        produce(bootstrap, before)
        checkpoints = tmp_path / "checkpoints"
        # A broker quota on the worker's reads (~1.4 MB of labels at 60 kB/s: over 20 s on any
        # machine), so the broker goes away while the worker is still reading.
        client_id = f"slow-reader-{topics.labeled}"
        set_client_quota(bootstrap, client_id, "consumer_byte_rate", 60_000)
        config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, checkpoints,
                                   checkpoint={"every_events": 1000, "interval_s": 0.5},
                                   client={"client_id": client_id}, transport=transport)
        # Polls during the outage are empty and count as idle (measured ~10 s from stop to
        # ready again), so the idle stop is only a guard here; the worker is stopped with
        # SIGTERM once its checkpoint shows it caught up, which must end in a clean exit.
        worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=120,
                               overrides=("kafka.poll_max_records=100",))
        wait_until(lambda: newest_learned(checkpoints) >= 1_000, 60, "the first checkpoint", worker)
        broker.stop()
        learned_at_stop = newest_learned(checkpoints)
        read_at_stop = newest_position(checkpoints)[1].get((topics.labeled, 0), 0)
        time.sleep(1.0)
        broker.start()
        assert broker.bootstrap == bootstrap  # same port: the worker's configuration still holds
        after, labeled_after, unlabeled_after = interleaved_stream(sms, topics, 2_000, 500, seed=4, prefix="b")
        produce(bootstrap, after)
        n_labeled = len(labeled_before) + len(labeled_after)
        ends = {(topics.labeled, 0): n_labeled}

        def caught_up() -> bool:
            return (newest_position(checkpoints)[1] == ends
                    and len(read_topic(bootstrap, topics.predictions)) >= 1_500)

        wait_until(caught_up, 120, "the worker to catch up", worker)
        worker.process.terminate()
        assert worker.wait(60) == 0, worker.log_tail()

        summary = latest_summary(checkpoints)
        assert n_labeled == 2 * len(sms) + 2_000
        assert (summary.digest, summary.events_learned) == reference_digest(labeled_before + labeled_after)
        assert summary.offsets == ends
        # offsets, not events learned: thick-threshold training learns fewer events than it reads
        assert read_at_stop < len(labeled_before), "the broker went away after the worker had caught up"
        predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
        assert assert_predictions_cover(predictions, unlabeled_before + unlabeled_after, topics.unlabeled) == 0
        assert read_topic(bootstrap, topics.dead_letters) == []
        log = (tmp_path / "worker.log").read_text()
        # An outage is a few lines of ours (it starts, it ends), not kafka-python's every retry
        # (the probe: ~57 ERROR lines a second).
        # (kafka-python's "Node paused: {'throttle'}" errors are the read quota's, not the outage's)
        assert [line for line in log.splitlines() if " kafka." in line and " ERROR " in line
                and "throttle" not in line] == []
        assert "Kafka is back after" in log
        warnings = [line for line in log.splitlines() if " WARNING " in line]
        print("\n" + "\n".join(warnings))
        assert len(warnings) <= 10, warnings
        print(f"\nread at the broker stop: {read_at_stop} of {n_labeled} labeled (learned {learned_at_stop}); "
              f"outputs redone: {log.count('dropped and redone')}")
    finally:
        if worker is not None:
            worker.kill()
        broker.stop()


# ---------------------------------------------------------------------------------------------
# 4. Malformed messages: each in the dead-letter topic, with its reason and its original bytes

MAX_BYTES = 16_384  # --set kafka.max_message_bytes: small, so "too large" costs little

# (topic: "L" labeled / "U" unlabeled, value, expected reason). Every decode reason appears, most
# more than once, plus the worker's own label_type_conflict and rejected_by_model.
# spam.toml's [model] without its declared classes: for the tests of labels beyond ham and spam
SPAM_MODEL_ANY_LABEL = {key: value for key, value in tomllib.loads(SPAM_CONFIG.read_text())["model"].items()
                        if key != "classes"}

MALFORMED: list[tuple[str, bytes | None, str]] = [
    ("L", None, "empty_value"),  # a tombstone
    ("U", b"", "empty_value"),
    ("L", json.dumps({"id": "big", "text": "w " * 9000, "label": "ham"}).encode(), "too_large"),
    ("U", b"x" * (MAX_BYTES + 1), "too_large"),  # refused before any decoding
    ("L", b'\xff\xfe{"id":"a","text":"x","label":"ham"}', "invalid_utf8"),
    ("U", b'{"id":"a","text":"\xed\xa0\x80"}', "invalid_utf8"),  # an encoded surrogate
    ("L", b'\xef\xbb\xbf{"id":"a","text":"x","label":"ham"}', "utf8_bom"),
    ("L", b'{"id":"a","text":"x","label":"ham"', "invalid_json"),  # truncated
    ("U", b'{"id":"a","text":"x"} {}', "invalid_json"),  # trailing data
    ("L", b'{"id":"a","text":"x\ny","label":"ham"}', "invalid_json"),  # raw control character
    ("U", b"{'id':'a','text':'x'}", "invalid_json"),
    ("L", b'{"id":"a","features":{"x":NaN},"label":"ham"}', "nan_or_infinity"),
    ("U", b'{"id":"a","text":"x","extra":-Infinity}', "nan_or_infinity"),  # in an unknown field
    ("L", b'{"id":"a","id":"b","text":"x","label":"ham"}', "duplicate_key"),
    ("U", b'{"id":"a","features":{"k":1,"k":2}}', "duplicate_key"),
    ("L", b"[" * 3000, "too_deep"),
    ("U", b'{"id":"a","text":"x","x":' + b'{"a":' * 1500 + b"1" + b"}" * 1501, "too_deep"),
    ("L", b'[{"id":"a","text":"x","label":"ham"}]', "not_an_object"),
    ("U", b'"hello"', "not_an_object"),
    ("L", b"null", "not_an_object"),
    ("L", b'{"text":"x","label":"ham"}', "missing_id"),
    ("U", b'{"id":null,"text":"x"}', "missing_id"),
    ("L", b'{"id":1,"text":"x","label":"ham"}', "id_not_string"),
    ("U", b'{"id":"","text":"x"}', "empty_id"),
    ("L", b'{"id":"a","key":7,"text":"x","label":"ham"}', "key_not_string"),
    ("U", b'{"id":"a","key":"","text":"x"}', "empty_key"),
    ("L", b'{"id":"a","key":"' + b"k" * 1025 + b'","text":"x","label":"ham"}', "key_too_long"),
    ("L", b'{"id":"a","text":5,"label":"ham"}', "text_not_string"),
    ("U", b'{"id":"a","features":["x"]}', "features_not_object"),
    ("L", b'{"id":"a","features":{"x":null},"label":"ham"}', "feature_value_type"),
    ("U", b'{"id":"a","features":{"x":[1]}}', "feature_value_type"),
    ("L", b'{"id":"a","features":{"x":1e400},"label":"ham"}', "feature_value_not_finite"),
    ("U", b'{"id":"a","features":{"x":1' + b"0" * 400 + b"}}", "feature_value_not_finite"),
    ("L", b'{"id":"a","label":"ham"}', "no_text_or_features"),
    ("U", b'{"id":"a","text":null,"features":null}', "no_text_or_features"),
    ("L", b'{"id":"a","text":"an unlabeled event on the labeled topic"}', "missing_label"),
    ("L", b'{"id":"a","text":"x","label":null}', "missing_label"),
    ("L", b'{"id":"a","text":"x","label":true}', "label_type"),
    ("L", b'{"id":"a","text":"x","label":1.0}', "label_type"),
    ("L", b'{"id":"a","text":"x","label":""}', "empty_label"),
    ("U", b'{"id":"a","text":"a labeled event on the unlabeled topic","label":"spam"}', "label_on_unlabeled_topic"),
    ("U", b'{"id":"a","text":"x \\ud800 y"}', "lone_surrogate"),
    ("L", b'{"id":"a","text":"x","label":"\\udc00"}', "lone_surrogate"),
    # Corrections the contract refuses (valid ones wait for the worker to apply them: issue 24).
    ("L", b'{"id":"a","text":"x","label":"ham","unlearn":0.5}', "invalid_unlearn"),
    ("L", b'{"id":"a","text":"x","label":"ham","unlearn":"ham"}', "unlearn_is_label"),
    ("U", b'{"id":"a","text":"x","unlearn":"spam"}', "unlearn_on_unlabeled_topic"),
    # After the good events labeled "1" and 7 below have been learned:
    ("L", b'{"id":"c1","text":"int one after string one","label":1}', "label_type_conflict"),
    ("L", b'{"id":"c7","text":"string seven after int seven","label":"7"}', "label_type_conflict"),
    # Valid events the model cannot take: a negative count.
    ("L", b'{"id":"n1","text":"x","features":{"x":-1},"label":"ham"}', "rejected_by_model"),
    ("U", b'{"id":"n2","features":{"x":-2.5}}', "rejected_by_model"),
    # Mail events the contract refuses, and one of which nothing can be read.
    ("L", b'{"id":"m1","mail":5,"label":"ham"}', "mail_not_string"),
    ("U", b'{"id":"m2","mail":"Subject: x\\r\\n\\r\\nb","mail_base64":"QQ=="}', "mail_and_mail_base64"),
    ("L", b'{"id":"m3","text":"x","mail":"Subject: x","label":"ham"}', "mail_with_text"),
    ("U", b'{"id":"m4","mail_base64":"not base64!"}', "invalid_base64"),
    ("L", b'{"id":"m5","mail":" \\r\\n","label":"ham"}', "unreadable_mail"),
]

# Edge cases that are valid events and must be learned or predicted (the contract's "decisions").
GOOD_LABELED_EDGES: list[dict] = [
    {"id": "one", "text": "the string label one", "label": "1"},
    {"id": "seven", "text": "the int label seven", "label": 7},
    {"id": "empty-text", "text": "", "label": "ham"},
    {"id": "features-only", "features": {"colour": "red", "n": 2, "ok": True}, "label": "spam"},
    {"id": "both", "text": "win cash now", "features": {"colour": "blue"}, "label": "spam", "unknown": [1, {"a": None}]},
    {"id": "escaped-nul", "text": "nul \u0000 inside", "label": "ham"},
]
GOOD_UNLABELED_EDGES: list[dict] = [
    {"id": "u-null-label", "text": "label null is absence", "label": None},
    {"id": "u-empty-features", "features": {}},
    {"id": "u-non-ascii", "text": "caf\u00e9 \u2603 \U0001f600"},
]


def test_malformed_messages_go_to_the_dead_letter_topic(kafka_broker, tmp_path, sms, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("bad")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    # undeclared_label and undeclared_unlearn need declared classes, which this stream's labels 1 and 7 are not
    # (test_declared_classes.py); label_type_conflict needs classes learned as they come
    assert set(REASONS) - {"undeclared_label", "undeclared_unlearn"} | {"label_type_conflict", "rejected_by_model", "unreadable_mail"} == \
        {reason for _, _, reason in MALFORMED}
    assert len(MALFORMED) >= 30

    # Good events first where order matters ("1" and 7 before their conflicts), then SMS
    # events with a bad message after every third good one (every fourth left no room past 52 kinds).
    good: list[tuple[str, dict]] = [("L", event) for event in GOOD_LABELED_EDGES]
    good += [("U", event) for event in GOOD_UNLABELED_EDGES]
    for i in range(204):
        label, text = sms[i]
        if i % 3 == 2:
            good.append(("U", {"id": f"g{i}", "text": text}))
        else:
            good.append(("L", {"id": f"g{i}", "text": text, "label": label}))
    topic_of = {"L": topics.labeled, "U": topics.unlabeled}
    messages: list[Message] = []
    bad_at: dict[tuple[str, int], tuple[bytes | None, bytes | None, str, tuple]] = {}  # (topic, offset) -> ...
    next_offset = {"L": 0, "U": 0}
    bad = iter(enumerate(MALFORMED))

    def send(kind: str, value, key, headers=()) -> int:
        messages.append(Message(topic_of[kind], value, key, None, headers))
        next_offset[kind] += 1
        return next_offset[kind] - 1

    for position, (kind, event) in enumerate(good):
        # A key that differs from the id, and no key at all, are both fine.
        key = None if position % 10 == 0 else f"key-{position}".encode()
        send(kind, json.dumps(event).encode(), key)
        if position >= len(GOOD_LABELED_EDGES) and position % 3 == 0:
            number, (bad_kind, value, reason) = next(bad, (None, (None, None, None)))
            if number is None:
                continue
            key = None if number == 2 else f"bad-{number}".encode()  # (a tombstone needs a key)
            # Original headers stay; a stale stream-nb header of ours is replaced.
            headers = (("trace", f"t-{number}".encode()), ("stream-nb-reason", b"stale")) if number % 5 == 1 else ()
            offset = send(bad_kind, value, key, headers)
            bad_at[(topic_of[bad_kind], offset)] = (value, key, reason, headers)
    assert next(bad, None) is None, "every malformed message was sent"
    produce(bootstrap, messages)

    # every label before any prediction, however slowly they are read (the classes asserted below)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               worker={"labels_first_wait_s": 600}, transport=transport,
                               replace={"model": SPAM_MODEL_ANY_LABEL})
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=2,
                           overrides=(f"kafka.max_message_bytes={MAX_BYTES}",))
    try:
        assert worker.wait(120) == 0, worker.log_tail()
    finally:
        worker.kill()

    dead = read_topic(bootstrap, topics.dead_letters)
    assert len(dead) == len(MALFORMED) == len(bad_at)
    seen = set()
    for record in dead:
        headers = dict(record.headers)
        source = (headers["stream-nb-source-topic"].decode(), int(headers["stream-nb-source-offset"]))
        assert headers["stream-nb-source-partition"] == b"0"
        value, key, reason, original_headers = bad_at[source]
        assert headers["stream-nb-reason"].decode() == reason, (source, value[:80] if value else value)
        assert headers["stream-nb-detail"]  # one line saying what is wrong
        assert record.value == value  # the original bytes, untouched (None for the tombstone)
        assert record.key == key
        names = [name for name, _ in record.headers]
        assert names == [name for name, _ in original_headers if name != "stream-nb-reason"] + [
            "stream-nb-reason", "stream-nb-detail", "stream-nb-source-topic",
            "stream-nb-source-partition", "stream-nb-source-offset"]
        seen.add(source)
    assert seen == set(bad_at)

    good_labeled = [event for kind, event in good if kind == "L"]
    good_unlabeled = [event["id"] for kind, event in good if kind == "U"]
    summary = latest_summary(tmp_path / "checkpoints")
    assert len(good_labeled) == 142
    assert (summary.digest, summary.events_learned) == reference_digest_events(good_labeled)
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert set(predictions) == set(good_unlabeled) and len(good_unlabeled) == 71
    assert all(len(copies) == 1 for copies in predictions.values())
    # The classes the model holds are exactly the good labels, with their types.
    assert set(predictions["u-non-ascii"][0]["proba"]) == {"1", "7", "ham", "spam"}


TRAINING_MODES = [{"mode": "all"}, {"mode": "on_error"}, {"mode": "thick_threshold", "margin": 50.0}]


@pytest.mark.parametrize("training", TRAINING_MODES, ids=lambda training: training["mode"])
@pytest.mark.parametrize("n_good", [200, 1_500], ids=["after-200", "after-a-1024-chunk"])
def test_a_rejected_event_after_good_ones_in_one_poll_leaves_each_learned_once(kafka_broker, tmp_path, sms,
                                                                              training, n_good, transport):
    # The double count of issue 7: a refused event after the first labeled events of a poll made
    # the one-by-one retry learn those earlier events again, in every mode but "all".
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("chunk")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    events = [{"id": f"c{i}", "text": sms[i][1], "label": sms[i][0]} for i in range(n_good)]
    bad = {"id": "negative", "text": "x", "features": {"x": -1}, "label": "ham"}
    produce(bootstrap, [Message(topics.labeled, json.dumps(event).encode(), event["id"].encode())
                        for event in [*events, bad]])
    # poll_max_records 5000: all records (~200 kB at most, one fetch) come in one poll.
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               kafka={"poll_max_records": 5_000}, training=training, transport=transport)
    run_in_process(config_path)
    dead = read_topic(bootstrap, topics.dead_letters)
    assert [dict(record.headers)["stream-nb-reason"] for record in dead] == [b"rejected_by_model"]
    summary = latest_summary(tmp_path / "checkpoints")
    expected_digest, expected_learned = reference_digest_events(events, training)
    # measured before the fix, thick-threshold after 200: 341 learned against 195
    assert (summary.digest, summary.events_learned) == (expected_digest, expected_learned)
    assert expected_learned == n_good if training["mode"] == "all" else expected_learned < n_good


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_counts_beyond_float_exactness_go_to_the_dead_letter_topic(kafka_broker, tmp_path, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("huge")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    # A "count" of 1e308 is finite, but it would make class totals and the evidence overflow
    # (NaN probabilities): the model refuses counts above 2**53, so those events are set aside
    # and everything else is learned and predicted.
    base_ms = int(time.time() * 1000) - 60_000
    produce(bootstrap, [
        Message(topics.labeled, b'{"id":"h","features":{"x":1e308},"label":"ham"}', b"h", base_ms),
        Message(topics.labeled, b'{"id":"s","features":{"y":1},"label":"spam"}', b"s", base_ms + 1),
        Message(topics.unlabeled, b'{"id":"q","features":{"x":1e308,"y":1e308}}', b"q", base_ms + 2),
        Message(topics.unlabeled, b'{"id":"r","text":"hello"}', b"r", base_ms + 3),
    ])
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               worker={"labels_first_wait_s": 600}, transport=transport)
    run_in_process(config_path)
    dead = read_topic(bootstrap, topics.dead_letters)
    # (in no particular order: a labeled event's dead letter goes out with the next commit)
    assert sorted((record.value, dict(record.headers)["stream-nb-reason"]) for record in dead) == [
        (b'{"id":"h","features":{"x":1e308},"label":"ham"}', b"rejected_by_model"),
        (b'{"id":"q","features":{"x":1e308,"y":1e308}}', b"rejected_by_model")]
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert list(predictions) == ["r"]
    assert predictions["r"][0]["proba"] == {"spam": 1.0}
    assert latest_summary(tmp_path / "checkpoints").events_learned == 1


def test_overflowing_feature_values_do_not_crash_the_worker(kafka_broker, tmp_path, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("poison")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    base_ms = int(time.time() * 1000) - 60_000
    produce(bootstrap, [
        Message(topics.labeled, b'{"id":"h1","text":"hi","features":{"x":1e308},"label":"ham"}', b"h1", base_ms),
        Message(topics.labeled, b'{"id":"h2","text":"hi","features":{"x":1e308},"label":"ham"}', b"h2", base_ms + 1),
        Message(topics.labeled, b'{"id":"s","text":"win","label":"spam"}', b"s", base_ms + 2),
        Message(topics.unlabeled, b'{"id":"r","text":"hello"}', b"r", base_ms + 3),
    ])
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               worker={"labels_first_wait_s": 600}, transport=transport)
    for attempt in range(2):  # a restart must not fall into the same hole
        worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=1)
        try:
            assert worker.wait(60) == 0, worker.log_tail()
        finally:
            worker.kill()
    # Every message is accounted for: learned, predicted or dead-lettered, and "r" predicted.
    learned = latest_summary(tmp_path / "checkpoints").events_learned
    dead = read_topic(bootstrap, topics.dead_letters)
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert "r" in predictions
    assert learned + len(dead) + len(predictions) == 4


# ---------------------------------------------------------------------------------------------
# 5. A truncated newest checkpoint: fall back to the previous one, say so, end exact


def test_truncated_newest_checkpoint_falls_back_to_the_previous_one(kafka_broker, tmp_path, sms, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("trunc")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    messages, labeled, unlabeled_ids = interleaved_stream(sms, topics, len(sms), 400, seed=5, prefix="t")
    checkpoints = tmp_path / "checkpoints"
    # Checkpoints only at the end of a run (every_events 0, interval 0): one run over the first
    # 3,000 messages, another over the rest, so the previous checkpoint is well behind the newest.
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, checkpoints,
                               checkpoint={"every_events": 0, "interval_s": 0}, transport=transport)
    produce(bootstrap, messages[:3_000])
    run_in_process(config_path)
    produce(bootstrap, messages[3_000:])
    run_in_process(config_path)
    files = CheckpointStore(checkpoints).list()
    assert len(files) == 2
    previous, newest = files  # oldest first
    previous_summary = read_summary(previous)
    expected_digest, expected_learned = reference_digest(labeled)
    assert read_summary(newest).digest == expected_digest
    assert previous_summary.offsets == {(topics.labeled, 0): sum(m.topic == topics.labeled for m in messages[:3_000])}
    size = newest.stat().st_size
    with open(newest, "r+b") as file:
        file.truncate(size // 2)

    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(config_path, log_path, stop_when_idle=2)
    try:
        assert worker.wait(60) == 0, worker.log_tail()
    finally:
        worker.kill()
    log = log_path.read_text()
    assert f"skipping checkpoint {newest}: truncated" in log
    assert f"restored checkpoint {previous_summary.checkpoint_id}: {previous_summary.events_learned} events learned" in log

    inspected = run_cli("inspect", str(checkpoints), "--json")
    assert inspected.returncode == 0, inspected.stderr
    summary = json.loads(inspected.stdout)
    assert (summary["events_learned"], summary["state_digest"]) == (expected_learned, expected_digest)
    assert latest_summary(checkpoints).offsets == {(topics.labeled, 0): len(sms)}
    # The model went back to the previous checkpoint; the outputs did not: their progress is the
    # group's committed offsets, so nothing was predicted twice.
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert assert_predictions_cover(predictions, unlabeled_ids, topics.unlabeled) == 0


# ---------------------------------------------------------------------------------------------
# 6. Configuration errors: one clear line on stderr, a non-zero exit


def _config_case(tmp_path: Path, bootstrap: str, case: str, transport: str = "kafka-python") -> tuple[list[str], str]:
    """(arguments after `stream-nb run`, text the one stderr line must hold) for `case`."""
    topics = Topics.new("config")
    checkpoints = tmp_path / "checkpoints"
    path = tmp_path / "worker.toml"
    if case == "unknown key":
        write_config(path, bootstrap, topics, checkpoints, kafka={"bootstrap_server": bootstrap})
        return ["--config", str(path)], "kafka.bootstrap_server: unknown key"
    if case == "wrong type":
        write_config(path, bootstrap, topics, checkpoints, checkpoint={"keep": "3"})
        return ["--config", str(path)], "checkpoint.keep: expected int, got str '3'"
    if case == "unreachable broker":
        write_config(path, "127.0.0.1:1", topics, checkpoints, client={"bootstrap_timeout_ms": 2000}, transport=transport)
        return ["--config", str(path)], "no Kafka broker answers at 127.0.0.1:1 (--bootstrap) within 5 s"
    if case == "missing file":
        return ["--config", str(tmp_path / "absent.toml")], f"{tmp_path / 'absent.toml'}: no such file"
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "unknown key",
    "wrong type",
    "unreachable broker",
    "missing file",
])
def test_configuration_error_is_one_clear_line(tmp_path, case):
    arguments, message = _config_case(tmp_path, "127.0.0.1:9", case)  # no broker is needed
    result = run_cli("run", *arguments, "--stop-when-idle", "1", timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"stream-nb run: {message}")
    assert not (tmp_path / "checkpoints").exists()


def test_unreachable_broker_ends_with_a_clear_line_within_the_bootstrap_timeout(tmp_path, transport):
    arguments, message = _config_case(tmp_path, "", "unreachable broker", transport)
    started = time.monotonic()
    result = run_cli("run", *arguments, "--stop-when-idle", "1", timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(f"stream-nb run: {message}")
    assert elapsed < 15, elapsed  # 5 s to answer (stream_nb.kafka.discovery), plus the interpreter's start


def test_changed_model_configuration_is_refused_with_a_clear_message(kafka_broker, tmp_path, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("fingerprint")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    produce(bootstrap, [Message(topics.labeled, labeled_event(f"f{i}", f"text number {i}", "ham" if i % 2 else "spam"))
                        for i in range(10)])
    checkpoints = tmp_path / "checkpoints"
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, checkpoints, transport=transport)
    first = run_cli("run", "--config", str(config_path), "--stop-when-idle", "1")
    assert first.returncode == 0, first.stderr
    written = CheckpointStore(checkpoints).list()
    assert latest_summary(checkpoints).events_learned == 10

    refused = run_cli("run", "--config", str(config_path), "--set", "model.alpha=0.5", "--stop-when-idle", "1")
    assert refused.returncode == 2
    line = error_line(refused.stderr)  # after the start's INFO line naming the broker
    assert line.startswith(f"stream-nb run: checkpoint {written[-1]} was written for configuration fingerprint ")
    assert "refusing to mix them" in line
    assert CheckpointStore(checkpoints).list() == written  # nothing written, nothing deleted

    # Spelling out the same value differently (configs/spam.toml's alpha 0.2 as 0.20, and its
    # default prior_alpha) is the same configuration.
    same = run_cli("run", "--config", str(config_path), "--set", "model.alpha=0.20", "--set", "model.prior_alpha=0",
                   "--stop-when-idle", "1")
    assert same.returncode == 0, same.stderr
    assert latest_summary(checkpoints).events_learned == 10


def produce_sms_events(bootstrap: str, topics: Topics, sms, n: int) -> None:
    """The topics, with the first `n` SMS messages labeled (l<i>) and the same n unlabeled (u<i>)."""
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    produce(bootstrap, [Message(topics.labeled, labeled_event(f"l{i}", sms[i][1], sms[i][0]), f"l{i}".encode())
                        for i in range(n)]
            + [Message(topics.unlabeled, unlabeled_event(f"u{i}", sms[i][1]), f"u{i}".encode()) for i in range(n)])


def test_an_unusable_checkpoint_directory_stops_the_worker_before_any_output(kafka_broker, tmp_path, sms):
    # The probe: a directory that could not be written published ~4,300 predictions, then crashed
    # at the first checkpoint; under a supervisor, a crash loop republishing outputs.
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("nodir")
    produce_sms_events(bootstrap, topics, sms, 50)
    (tmp_path / "a-file").write_text("not a directory")
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "a-file" / "checkpoints")
    done = run_cli("run", "--config", str(config_path), "--stop-when-idle", "1")
    assert done.returncode == 2
    assert error_line(done.stderr) == (f"stream-nb run: checkpoint directory {tmp_path / 'a-file' / 'checkpoints'}: "
                                       "cannot use it (Not a directory)")
    assert read_topic(bootstrap, topics.predictions) == []


def test_a_full_disk_is_an_error_line_per_checkpoint_and_the_outputs_go_on(kafka_broker, tmp_path, sms, monkeypatch,
                                                                           caplog):
    import errno

    from stream_nb.checkpoint import CheckpointError
    from stream_nb.checkpoint import store as store_module

    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("full")
    produce_sms_events(bootstrap, topics, sms, 300)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               checkpoint={"every_events": 50}, kafka={"poll_max_records": 50})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module.os, "fsync", full)
    with pytest.raises(CheckpointError, match="No space left on device"):
        run_in_process(config_path)  # the final checkpoint cannot be written either: exit 2 from the command
    failures = [r for r in caplog.records if "No space left on device" in r.getMessage() and r.levelname == "ERROR"]
    assert failures, "each scheduled checkpoint that fails is an error line"
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert set(predictions) == {f"u{i}" for i in range(300)} and all(len(c) == 1 for c in predictions.values())
    assert not any(path.name.endswith(".tmp") for path in (tmp_path / "checkpoints").iterdir())


def test_labels_beyond_max_classes_are_dead_lettered_with_their_reason(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("classes")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    labels = ["ham", "spam", "promo", "news", "ham", "alert", "spam"]
    produce(bootstrap, [Message(topics.labeled, labeled_event(f"l{i}", f"text number {i}", label), f"l{i}".encode())
                        for i, label in enumerate(labels)]
            + [Message(topics.unlabeled, unlabeled_event("u0", "text number 3"), b"u0")])
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               replace={"model": {**SPAM_MODEL_ANY_LABEL, "max_classes": 3}},
                               worker={"labels_first_wait_s": 600})
    run_in_process(config_path)
    dead = read_topic(bootstrap, topics.dead_letters)
    assert sorted((record.key, dict(record.headers)["stream-nb-reason"]) for record in dead) == [
        (b"l3", b"too_many_classes"), (b"l5", b"too_many_classes")]
    assert b"would be class 4; [model] max_classes = 3" in dict(dead[0].headers)["stream-nb-detail"]
    (prediction,) = predictions_by_id(read_topic(bootstrap, topics.predictions))["u0"]
    assert set(prediction["proba"]) == {"ham", "spam", "promo"}
    kept = [{"text": f"text number {i}", "label": label} for i, label in enumerate(labels)
            if label in ("ham", "spam", "promo")]
    summary = latest_summary(tmp_path / "checkpoints")
    assert (summary.digest, summary.events_learned) == reference_digest_events(kept)  # as if the rest never came


def test_json_logs_are_one_object_a_line(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("jsonlog")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    produce(bootstrap, [Message(topics.labeled, labeled_event("l0", "hello", "ham"), b"l0"),
                        Message(topics.unlabeled, b"{broken", None)])
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               worker={"log_format": "json"})
    done = run_cli("run", "--config", str(config_path), "--stop-when-idle", "1")
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in done.stderr.splitlines()]  # every line is one JSON object
    assert entries and all(set(entry) >= {"time", "level", "logger", "message"} for entry in entries)
    assert any(entry["message"].startswith("broker ") for entry in entries)
    assert any("checkpoint" in entry["message"] for entry in entries)
