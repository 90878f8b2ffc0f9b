"""Per-key state through its changelog on a real broker: flushes written in transactions (one of
them aborted), read back by a new owner with read_committed, restore the store that wrote the
committed ones, bit for bit; a store closed cleanly restores only the tail. Both transports,
configs/personal.toml over one view (a store per view: tests/test_personal_experts.py)."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

pytest.importorskip("rocksdict", reason="rocksdict is a core dependency: `make setup` installs it")

from stream_nb.config import load_config  # noqa: E402
from stream_nb.kafka.clients import make_producer  # noqa: E402
from stream_nb.keyed.changelog import (  # noqa: E402
    ChangelogError,
    ensure_changelog,
    read_changelog,
    send_flush,
    tombstones_kept_ms,
)
from stream_nb.keyed.store import StoredKeyTable  # noqa: E402
from stream_nb.worker.outputs import Outputs  # noqa: E402

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3
WORDS = [f"w{i}" for i in range(40)]


def keyed_setup(bootstrap: str, transport: str):
    group = f"keyed-{uuid.uuid4().hex[:10]}"
    config = load_config(REPO / "configs" / "personal.toml",
                         ["views={}", f"kafka.bootstrap_servers={bootstrap}", f"kafka.group_id={group}",
                          f"kafka.transport={transport}", "personal.idle_after=60"])
    return config, config.require_kafka(), config.build_personal(config.build_model())


def learn_some(personal, table, rng: random.Random, n: int) -> None:
    for _ in range(n):
        label = rng.choice(["ham", "spam"])
        x = {word: 1.0 for word in rng.sample(WORDS[:24] if label == "ham" else WORDS[16:], rng.randint(1, 6))}
        key = f"user-{rng.randrange(30)}"
        _, learns = personal.predict_and_decide(x, label, key, table)
        personal.global_model.learn_one(x, label)
        if learns:
            personal.learn_key(x, label, key, table=table)
        personal.observe_labeled(key, table)


def transactional_outputs(kafka: dict, config) -> Outputs:
    producer = make_producer(kafka, config.kafka_client, f"keyed-test-{uuid.uuid4().hex[:8]}")
    return Outputs(producer, None, exactly_once=True, commit_interval_s=0.1, transactional_id="keyed-test")


def test_a_partition_is_restored_from_its_committed_flushes_only(kafka_broker, transport, tmp_path):
    config, kafka, personal = keyed_setup(kafka_broker.bootstrap, transport)
    topic = f"{kafka['group_id']}-keys-changelog"
    ensure_changelog(kafka, config.kafka_client, topic, PARTITIONS)
    n_classes = lambda: len(personal.classes_)  # noqa: E731
    table = StoredKeyTable(tmp_path / "owner", n_classes, idle_after=60, cache_keys=5)
    rng = random.Random(7)
    outputs = transactional_outputs(kafka, config)
    try:
        for flush in range(6):
            learn_some(personal, table, rng, 40)
            outputs.begin(None)
            send_flush(outputs, topic, 1, table.flush(position=(flush + 1) * 40))
            if flush == 5:  # the writer dies mid-commit: its flush must not come back
                outputs.abort()
                break
            outputs.commit({})
            committed_digest, committed_clock = table.digest(), table.clock
    finally:
        outputs.producer.close()
    assert table.evicted > 0 and table.digest() != committed_digest

    restored = StoredKeyTable(tmp_path / "new-owner", n_classes, idle_after=60)
    read = read_changelog(kafka, config.kafka_client, topic, 1)
    assert restored.restore(read) == read.records > 0
    assert restored.digest() == committed_digest
    assert (restored.clock, restored.position) == (committed_clock, 5 * 40)
    assert read.end > read.records  # the aborted flush and the transaction markers take offsets too
    empty = StoredKeyTable(tmp_path / "empty", n_classes, idle_after=60)
    assert empty.restore(read_changelog(kafka, config.kafka_client, topic, 0)) == 0  # nothing of partition 0

    # The owner goes on from the restored state and commits one more flush.
    outputs = transactional_outputs(kafka, config)
    try:
        learn_some(personal, restored, rng, 50)
        outputs.begin(None)
        send_flush(outputs, topic, 1, restored.flush(position=250))
        outputs.commit({})
    finally:
        outputs.producer.close()
    latest = restored.digest()

    # A store closed cleanly at the first read's end reads only the tail, and ends the same as
    # a store restored from the whole changelog.
    partial = StoredKeyTable(tmp_path / "local-copy", n_classes, idle_after=60)
    partial.restore(read_changelog(kafka, config.kafka_client, topic, 1))
    whole = partial.digest()
    assert whole == latest
    earlier = StoredKeyTable(tmp_path / "earlier-copy", n_classes, idle_after=60)
    first = read_changelog(kafka, config.kafka_client, topic, 1)
    records = list(first)
    earlier.restore(records[:read.records])  # what the first read held
    earlier.close(changelog_offset=read.end)
    reopened = StoredKeyTable(tmp_path / "earlier-copy", n_classes, idle_after=60)
    assert reopened.clean_offset == read.end and reopened.digest() == committed_digest
    tail = read_changelog(kafka, config.kafka_client, topic, 1, start=reopened.clean_offset)
    reopened.restore(tail)
    assert 0 < tail.records < len(records) and reopened.digest() == latest


def test_a_changelog_with_another_partition_count_is_refused(kafka_broker, tmp_path):
    config, kafka, _ = keyed_setup(kafka_broker.bootstrap, "kafka-python")
    topic = f"{kafka['group_id']}-keys-changelog"
    ensure_changelog(kafka, config.kafka_client, topic, 2)
    ensure_changelog(kafka, config.kafka_client, topic, 2)  # again: nothing to do
    # how long its tombstones are kept, as the broker says (Kafka's default: a day)
    assert tombstones_kept_ms(kafka, config.kafka_client, topic) == 86_400_000
    assert tombstones_kept_ms(kafka, config.kafka_client, "no-such-topic-" + topic) == 0
    with pytest.raises(ChangelogError, match="has 2 partitions, but the unlabeled topics have 4"):
        ensure_changelog(kafka, config.kafka_client, topic, 4)
