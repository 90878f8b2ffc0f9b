"""The documentation's Kafka examples (`<!-- run: kafka, ... -->`, tests/docs_support.py), run as
a reader runs them: each page's blocks in order in a directory of its own, laid out as a
checkout after `make setup`, whose `./.kafka` is the suite's broker (so `stream-nb kafka start`
finds it running and every command finds it as it finds a broker the reader started), with the
files the page says the reader has. The shipped configurations name fixed topics and groups
(messages-labeled, stream-nb-spam, ...), which no other test uses; they are deleted before each
page, so a page starts on an empty broker as a reader's first run does, and the pages run in
one process, one after another."""

from __future__ import annotations

import json
import os
import time
import tomllib
from pathlib import Path

import pytest
from docs_support import ROOT, blocks, prepare, run_block

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("docs-kafka-examples")]

PAGES: dict[Path, list] = {}
for _block in blocks():
    if _block.kafka:
        PAGES.setdefault(_block.path, []).append(_block)


def shipped_names() -> tuple[set[str], set[str]]:
    """The topics and groups the shipped configurations name (and the topics a worker makes
    from its group: the labeled order and the keys' changelog of per-user models)."""
    topics, groups = set(), set()
    for path in (ROOT / "configs").glob("*.toml"):
        kafka = tomllib.loads(path.read_text()).get("kafka", {})
        topics.update(kafka.get("labeled_topics", []), kafka.get("unlabeled_topics", []))
        topics.update(name for name in (kafka.get("predictions_topic"), kafka.get("dead_letter_topic")) if name)
        if "group_id" in kafka:
            group = kafka["group_id"]
            groups.add(group)
            topics.update({f"{group}-labeled-order", f"{group}-keys-changelog"})
    return topics, groups


def start_empty(bootstrap: str) -> None:
    """Delete the shipped configurations' topics and groups, and wait until they are gone."""
    from kafka import KafkaAdminClient

    topics, groups = shipped_names()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="stream-nb-docs-tests")
    try:
        present = set(admin.list_topics()) & topics
        if present:
            admin.delete_topics(sorted(present))
        live = {group["group_id"] for group in admin.list_groups()} & groups
        if live:
            admin.delete_groups(sorted(live))
        deadline = time.monotonic() + 30
        while set(admin.list_topics()) & topics:
            assert time.monotonic() < deadline, "the shipped configurations' topics were not deleted within 30 s"
            time.sleep(0.1)
    finally:
        admin.close()


def read_topic(bootstrap: str, topic: str) -> list[dict]:
    """Every committed record of `topic` (one partition), as JSON."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        records = []
        while consumer.position(partition) < end:
            records += [json.loads(record.value) for batch in consumer.poll(1000).values() for record in batch]
        return records
    finally:
        consumer.close()


def readme_predictions(bootstrap: str, scratch: Path) -> None:
    """README's first worker: "the topic "predictions" now holds" the one prediction its comment
    shows (the id is the file's name and the line's number)."""
    [prediction] = read_topic(bootstrap, "predictions")
    assert list(prediction)[:4] == ["id", "label", "proba", "score"], prediction
    shown = (prediction["id"], prediction["label"], round(prediction["proba"]["ham"], 4),
             round(prediction["proba"]["spam"], 4), round(prediction["score"], 3), prediction["verdict"])
    assert shown == ("new:1", "spam", 0.0018, 0.9982, 6.308, "spam"), prediction
    assert len(prediction["clues"]) == 3  # spam.toml's [worker] clues


# checks of what a block left behind, beyond what it prints: (page, its n-th Kafka block) -> check
AFTER = {(Path("README.md"), 0): readme_predictions}


@pytest.mark.parametrize("page", sorted(PAGES), ids=str)
def test_a_pages_kafka_examples_run(page, kafka_broker, tmp_path):
    start_empty(kafka_broker.bootstrap)
    (tmp_path / ".kafka").symlink_to(Path(os.environ["STREAM_NB_TEST_BROKER_DIR"]) / "kafka")
    for n, block in enumerate(PAGES[page]):
        prepare(tmp_path, block.needs)
        run_block(block, tmp_path, {"STREAM_NB_BOOTSTRAP": ""})
        if (page, n) in AFTER:
            AFTER[page, n](kafka_broker.bootstrap, tmp_path)


def test_the_pages_with_kafka_examples():
    """The pages this module runs (a marker misspelt would leave a page out silently)."""
    assert sorted(map(str, PAGES)) == ["README.md", "docs/evaluation.md", "docs/kafka.md",
                                       "docs/mail-delivery.md", "docs/mail.md"]
