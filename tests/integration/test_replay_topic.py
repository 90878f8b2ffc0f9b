"""Replay from a topic on a real broker: the same events give the same report as from a file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from corpora import load_sms_spam

pytestmark = pytest.mark.kafka

METRIC_KEYS = ("accuracy", "per_class", "confusion_matrix", "macro_f1", "mcc", "log_loss", "roc_auc", "trec")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "stream_nb.cli", *args], capture_output=True, text=True, timeout=300)


def test_topic_replay_and_file_replay_of_the_same_events_give_identical_reports(kafka_broker, tmp_path, transport):
    rows = load_sms_spam()[:2000]
    topic = f"replay-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}}, wait_for_metadata=True)
    admin.close()
    # Spread over three partitions with increasing timestamps: the merge must restore file order.
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    base_ms = int(time.time() * 1000) - 3_600_000
    for i, (label, text) in enumerate(rows):
        value = json.dumps({"id": f"sms:{i + 1}", "text": text, "label": label}).encode()
        producer.send(topic, value=value, key=f"sms:{i + 1}".encode(), partition=i % 3, timestamp_ms=base_ms + i)
    producer.send(topic, value=b"{broken", partition=0, timestamp_ms=base_ms + 5000)  # skipped, counted
    producer.flush()
    producer.close()
    tsv = tmp_path / "sms.tsv"
    tsv.write_text("".join(f"{label}\t{text}\n" for label, text in rows), encoding="utf-8")

    from_file = run_cli("replay", "--input", str(tsv), "--config", "configs/spam.toml", "--report", str(tmp_path / "f"))
    assert from_file.returncode == 0, from_file.stderr
    from_topic = run_cli("replay", "--topic", topic, "--from-beginning", "--until-end", "--bootstrap",
                         kafka_broker.bootstrap, "--config", "configs/spam.toml", "--report", str(tmp_path / "t"),
                         "--set", f'kafka.transport="{transport}"')
    assert from_topic.returncode == 0, from_topic.stderr
    file_report = json.loads((tmp_path / "f" / "report.json").read_text())
    topic_report = json.loads((tmp_path / "t" / "report.json").read_text())
    assert file_report["events"] == topic_report["events"] == 2000
    for key in METRIC_KEYS:
        assert topic_report[key] == file_report[key], key
    assert topic_report["rejected_messages"] == {"invalid_json": 1}
    assert set(file_report["per_class"]) == {"ham", "spam"}
    assert (tmp_path / "t" / "curve.png").stat().st_size > 1000
    assert (tmp_path / "t" / "roc.png").stat().st_size > 1000

    # --max-events and --from-offset cut the stream where they say
    partial = run_cli("replay", "--topic", topic, "--from-offset", "100", "--max-events", "500", "--bootstrap",
                      kafka_broker.bootstrap, "--config", "configs/spam.toml", "--report", str(tmp_path / "p"),
                      "--set", f'kafka.transport="{transport}"')
    assert partial.returncode == 0, partial.stderr
    assert json.loads((tmp_path / "p" / "report.json").read_text())["events"] == 500


def test_an_event_without_a_label_on_a_labeled_topic_is_rejected_as_the_worker_rejects_it(kafka_broker, tmp_path,
                                                                                          transport):
    # The probe: replay predicted such an event where the worker dead-letters it as missing_label.
    from stream_nb.replay.generator import spam_ham_stream

    topic = f"labels-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    unlabeled = 0
    for i, event in enumerate(spam_ham_stream(300)):
        producer.send(topic, value=json.dumps(event).encode(), key=event["id"].encode())
        if i % 60 == 30:
            producer.send(topic, value=json.dumps({"id": f"u{i}", "text": event["text"]}).encode())
            unlabeled += 1
    producer.flush()
    producer.close()

    def replay_topic(name, *settings):
        done = run_cli("replay", "--topic", topic, "--report", str(tmp_path / name), "--set",
                       f'kafka.bootstrap_servers="{kafka_broker.bootstrap}"', "--set", f'kafka.transport="{transport}"',
                       *settings)
        assert done.returncode == 0, done.stderr
        return json.loads((tmp_path / name / "report.json").read_text()), done

    # a labeled topic of the configuration, as shipped (spam.toml) and from plain settings (no
    # --config: replay needs no predictions or dead-letter topic to read one)
    for name, settings in (("shipped", ("--config", "configs/spam.toml")), ("plain", ())):
        report, done = replay_topic(name, *settings, "--set", f'kafka.labeled_topics=["{topic}"]')
        assert report["rejected_messages"] == {"missing_label": unlabeled}, name
        assert report["events"] == 300 and not (tmp_path / name / "predictions.jsonl").exists()
        assert f"topic {topic}: labeled (kafka.labeled_topics)" in done.stderr
        assert f"  missing_label            {unlabeled}  first: {topic}[0]@" in done.stdout
    # an unlabeled topic of the configuration: a label is the fault there, as for the worker
    report, _ = replay_topic("unlabeled", "--set", f'kafka.unlabeled_topics=["{topic}"]')
    assert report["rejected_messages"] == {"label_on_unlabeled_topic": 300} and report["events"] == unlabeled
    # a topic the configuration does not name: both kinds, the unlabeled ones predicted
    report, done = replay_topic("mixed")
    assert report["rejected_messages"] == {} and report["events"] == 300 + unlabeled
    assert len((tmp_path / "mixed" / "predictions.jsonl").read_text().splitlines()) == unlabeled
    assert "not a topic of the configuration" in done.stderr
