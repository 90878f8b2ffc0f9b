"""`stream-nb publish` against a real broker: exact values and keys read back, errors, the corpus."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from corpora import load_sms_spam, sms_spam_path

pytestmark = pytest.mark.kafka

REPO_ROOT = Path(__file__).resolve().parents[2]


def unique_topic(prefix: str = "publish") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def run_publish(*args: str, env: dict | None = None, cwd: Path | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "STREAM_NB_BOOTSTRAP"}
    environment.update(env or {})
    environment["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "stream_nb.cli", "publish", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=environment, cwd=cwd or REPO_ROOT,
    )


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of every record of every partition, partition by partition in offset order;
    asserts the topic holds exactly `expected` records."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        assert partitions, f"topic {topic} has no partitions"
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        assert sum(ends.values()) == expected, f"topic holds {sum(ends.values())} records, expected {expected}"
        records: dict[TopicPartition, list] = {partition: [] for partition in partitions}
        deadline = time.monotonic() + timeout
        while sum(map(len, records.values())) < expected and time.monotonic() < deadline:
            for partition, batch in consumer.poll(timeout_ms=500).items():
                records[partition].extend((record.offset, record.key, record.value) for record in batch)
    finally:
        consumer.close()
    result = []
    for partition in partitions:
        result.extend((key, value) for _, key, value in sorted(records[partition]))
    assert len(result) == expected
    return result


def topic_exists(bootstrap: str, topic: str) -> bool:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return topic in admin.list_topics()
    finally:
        admin.close()


def compact(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def assert_published(result: subprocess.CompletedProcess, count: int, topic: str) -> None:
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"published {count} events to {topic}"


# ---------------------------------------------------------------------------------------------


def test_tsv_values_and_keys_are_exact(kafka_broker, tmp_path, transport):
    path = tmp_path / "small.tsv"
    path.write_text("ham\tHello there\nspam\tWIN £1000 now! \"quoted\"\tand a tab\n\nham\tcafé ✓\n",
                    encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap,
                         "--create-topic", "--partitions", "1", "--transport", transport)
    assert_published(result, 3, topic)
    expected = [
        ("small:1", {"id": "small:1", "text": "Hello there", "label": "ham"}),
        ("small:2", {"id": "small:2", "text": 'WIN £1000 now! "quoted"\tand a tab', "label": "spam"}),
        ("small:4", {"id": "small:4", "text": "café ✓", "label": "ham"}),
    ]
    records = read_topic(kafka_broker.bootstrap, topic, 3)
    assert records == [(key.encode(), compact(body)) for key, body in expected]
    # compact, UTF-8, non-ASCII not escaped, key order id, text, label
    assert records[2][1] == '{"id":"small:4","text":"café ✓","label":"ham"}'.encode()


def test_csv_with_named_fields(kafka_broker, tmp_path):
    path = tmp_path / "messages.csv"
    path.write_text('msg_id,body,klass,extra\nm-1,"hello, world",ham,x\nm-2,"line one\nline two",spam,y\n'
                    ',no id here,ham,z\n', encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic",
                         "--id-field", "msg_id", "--text-field", "body", "--label-field", "klass")
    assert_published(result, 3, topic)
    assert read_topic(kafka_broker.bootstrap, topic, 3) == [
        (b"m-1", compact({"id": "m-1", "text": "hello, world", "label": "ham"})),
        (b"m-2", compact({"id": "m-2", "text": "line one\nline two", "label": "spam"})),
        # a CSV id falls back to the record's number (header = 1), not its physical line
        (b"messages:4", compact({"id": "messages:4", "text": "no id here", "label": "ham"})),
    ]


def test_jsonl_keeps_int_labels_and_features_and_drops_other_fields(kafka_broker, tmp_path):
    path = tmp_path / "events.jsonl"
    lines = [
        {"id": "e1", "text": "first", "label": 1, "features": {"f": 1}, "note": "not part of the contract"},
        {"id": "e2", "text": "second", "label": "0"},
        {"text": "no id", "label": 0},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic")
    assert_published(result, 3, topic)
    assert read_topic(kafka_broker.bootstrap, topic, 3) == [
        (b"e1", b'{"id":"e1","text":"first","features":{"f":1},"label":1}'),
        (b"e2", b'{"id":"e2","text":"second","label":"0"}'),
        (b"events:3", b'{"id":"events:3","text":"no id","label":0}'),
    ]


def test_no_label_omits_labels_and_key_none_sends_no_key(kafka_broker, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"id":"a","text":"one","label":"ham"}\n{"id":"b","text":"two"}\n', encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic",
                         "--no-label")
    assert_published(result, 2, topic)
    assert read_topic(kafka_broker.bootstrap, topic, 2) == [
        (b"a", b'{"id":"a","text":"one"}'),
        (b"b", b'{"id":"b","text":"two"}'),
    ]
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic",
                         "--no-label", "--key", "none", "--limit", "1")
    assert_published(result, 1, topic)
    assert read_topic(kafka_broker.bootstrap, topic, 1) == [(None, b'{"id":"a","text":"one"}')]


def test_keyed_events_are_published_under_their_key(kafka_broker, tmp_path, transport):
    path = tmp_path / "keyed.jsonl"
    path.write_text('{"id":"a","key":"user-1","text":"one","label":"ham"}\n{"id":"b","text":"two","label":"spam"}\n'
                    '{"id":"c","key":"Zoë","text":"three","label":"ham"}\n', encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic",
                         "--partitions", "1", "--transport", transport)
    assert_published(result, 3, topic)
    assert read_topic(kafka_broker.bootstrap, topic, 3) == [
        (b"user-1", b'{"id":"a","key":"user-1","text":"one","label":"ham"}'),
        (b"b", b'{"id":"b","text":"two","label":"spam"}'),  # no key: the id, as before
        ("Zoë".encode(), '{"id":"c","key":"Zoë","text":"three","label":"ham"}'.encode()),
    ]
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic",
                         "--partitions", "1", "--transport", transport, "--key", "id", "--no-label")
    assert_published(result, 3, topic)
    assert read_topic(kafka_broker.bootstrap, topic, 3) == [
        (b"a", b'{"id":"a","key":"user-1","text":"one"}'),
        (b"b", b'{"id":"b","text":"two"}'),
        (b"c", '{"id":"c","key":"Zoë","text":"three"}'.encode()),
    ]


def test_bootstrap_from_the_environment(kafka_broker, tmp_path):
    path = tmp_path / "one.tsv"
    path.write_text("ham\thi\n", encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--create-topic",
                         env={"STREAM_NB_BOOTSTRAP": kafka_broker.bootstrap}, cwd=tmp_path)
    assert_published(result, 1, topic)
    assert read_topic(kafka_broker.bootstrap, topic, 1) == [(b"one:1", b'{"id":"one:1","text":"hi","label":"ham"}')]


@pytest.mark.parametrize("name, content, message", [
    ("bad.tsv", "ham\tfine\nno tab on this line\n", "bad.tsv:2: not a valid event: missing_tab (expected 'label<TAB>text')"),
    ("bad.jsonl", '{"id":"a","text":"x","label":"ham"}\n{"id": "b", "text": \n', "bad.jsonl:2: not a valid event: invalid_json"),
    ("bad.csv", "id,text,label\n1,hello,\n", "bad.csv:2: field 'label' is missing"),
    ("bool.jsonl", '{"id":"a","text":"x","label":true}\n', "bool.jsonl:1: not a valid event: label_type"),
    ("none.jsonl", '{"id":"a","label":"ham"}\n', "none.jsonl:1: not a valid event: no_text_or_features"),
    ("list.jsonl", '{"id":"a","features":{"f":[1]},"label":"ham"}\n', "not a valid event: feature_value_type"),
])
def test_malformed_file_is_one_line_exit_2_and_nothing_sent(kafka_broker, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("stream-nb publish: error: ") and message in lines[0]
    # the whole file is checked before anything happens: no topic, no partial publish
    assert not topic_exists(kafka_broker.bootstrap, topic)


def test_missing_file_and_unreachable_broker(tmp_path, transport):
    result = run_publish(tmp_path / "nope.tsv", "--topic", "t", "--bootstrap", "127.0.0.1:9")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"stream-nb publish: error: {tmp_path / 'nope.tsv'}: no such file"]

    path = tmp_path / "one.tsv"
    path.write_text("ham\thi\n", encoding="utf-8")
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = run_publish(path, "--topic", "t", "--bootstrap", f"127.0.0.1:{port}", "--connect-timeout", "2",
                         "--transport", transport)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"stream-nb publish: error: no Kafka broker answers at 127.0.0.1:{port} (--bootstrap) "
                               "within 2 s")
    assert time.monotonic() - started < 30


def test_sms_corpus_publishes_5574_events(kafka_broker, transport):
    path = sms_spam_path()
    pairs = load_sms_spam()
    assert len(pairs) == 5574
    topic = unique_topic("sms")
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap,
                         "--create-topic", "--partitions", "1", "--transport", transport)
    assert_published(result, 5574, topic)
    assert "events/s" in result.stderr
    records = read_topic(kafka_broker.bootstrap, topic, 5574)
    for line_number, ((label, text), (key, value)) in enumerate(zip(pairs, records), start=1):
        event_id = f"{path.stem}:{line_number}"
        assert key == event_id.encode()
        assert json.loads(value) == {"id": event_id, "text": text, "label": label}


def test_text_features_or_both_are_published_and_replay_reads_the_topic_as_the_file(kafka_broker, tmp_path,
                                                                                     transport):
    # One event contract: the JSONL's events reach the topic with their features, and replay of
    # the topic gives the report, scores and learned count that replay of the file gives, with
    # the shipped spam.toml.
    rows = load_sms_spam()[:600]
    lines = []
    for i, (label, text) in enumerate(rows):
        words = text.lower().split()[:6]
        kind = i % 3  # text only, features only, both
        line = {"id": f"m{i}", "label": label}
        if kind != 1:
            line["text"] = text
        if kind != 0:
            line["features"] = {"length": len(text), "first": words[0] if words else "", "caps": text.isupper()}
        lines.append(line)
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    topic = unique_topic("mixed")
    result = run_publish(path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--create-topic",
                         "--transport", transport)
    assert_published(result, 600, topic)
    published = [json.loads(value) for _, value in read_topic(kafka_broker.bootstrap, topic, 600)]
    assert published == lines  # features kept, nothing added

    def replay(*source: str, report: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "replay", *source, "--config",
                               str(REPO_ROOT / "configs" / "spam.toml"), "--scores", "--report", str(tmp_path / report),
                               "--set", f'kafka.transport="{transport}"'],
                              capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
        assert done.returncode == 0, done.stderr
        return json.loads((tmp_path / report / "report.json").read_text())

    from_file = replay("--input", str(path), report="file")
    from_topic = replay("--topic", topic, "--bootstrap", kafka_broker.bootstrap, report="topic")
    for key in ("events", "labeled_events_scored", "events_learned", "accuracy", "confusion_matrix", "log_loss",
                "roc_auc", "trec", "rejected_messages"):
        assert from_topic[key] == from_file[key], key
    assert from_file["events"] == 600 and from_file["rejected_messages"] == {}
    assert (tmp_path / "topic" / "scores.csv").read_bytes() == (tmp_path / "file" / "scores.csv").read_bytes()


def test_the_broker_kafka_start_left_in_dot_kafka_is_found(kafka_broker, tmp_path):
    # As a user: `stream-nb kafka start` in a directory, then commands there without --bootstrap.
    (tmp_path / ".kafka").symlink_to(kafka_broker.directory, target_is_directory=True)
    path = tmp_path / "one.tsv"
    path.write_text("ham\thi\n", encoding="utf-8")
    topic = unique_topic()
    result = run_publish(path, "--topic", topic, "--create-topic", cwd=tmp_path)
    assert_published(result, 1, topic)
    assert (f"stream-nb publish: broker {kafka_broker.bootstrap} (the broker `stream-nb kafka start` runs in .kafka)"
            in result.stderr.splitlines())
