"""The clients of stream_nb.kafka.clients against a real broker: what they ask of it and what
the broker answers, where kafka-python alone would answer otherwise."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaProducer, TopicPartition

from stream_nb.config import load_config
from stream_nb.kafka.clients import make_reader

from worker_support import create_topics

pytestmark = pytest.mark.kafka


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"clients-{uuid.uuid4().hex[:12]}"
    create_topics(bootstrap, [name], partitions)
    return name


def read_to_the_end(reader, partitions: list[TopicPartition], counts: dict[TopicPartition, int]) -> dict:
    """Poll until each partition's position reaches `counts`; the records read by partition."""
    read = {tp: [] for tp in partitions}
    deadline = time.monotonic() + 60
    while any(reader.position(tp) < counts[tp] for tp in partitions):
        assert time.monotonic() < deadline, {tp: reader.position(tp) for tp in partitions}
        for tp, records in reader.poll(timeout_ms=200).items():
            read[tp].extend(record.value for record in records)
    return read


def test_end_offsets_answer_beside_an_open_fetch_and_stop_at_an_open_transaction(kafka_broker) -> None:
    """A reader polled to the end of its partitions holds a fetch the broker keeps open for
    fetch_max_wait_ms (here 20 s): its end offsets come at once all the same, from a connection
    of their own, and under read_committed they are the last stable offset (an open transaction's
    records are past it), as the reader itself reads."""
    bootstrap = kafka_broker.bootstrap
    topic = create_topic(bootstrap, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    for n in range(30):
        plain.send(topic, value=b"committed %d" % n, partition=n % 2)
    plain.flush()
    plain.close()
    open_transaction = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"open-{topic}")
    open_transaction.init_transactions()
    open_transaction.begin_transaction()
    for n in range(7):
        open_transaction.send(topic, value=b"not yet %d" % n, partition=0)
    open_transaction.flush()

    config = load_config(None, [f"kafka.bootstrap_servers={bootstrap!r}"])
    client = {**config.kafka_client, "fetch_max_wait_ms": 20_000, "request_timeout_ms": 40_000}
    reader = make_reader(config.kafka, client)
    try:
        reader.assign([tp0, tp1])
        reader.seek_to_beginning(tp0, tp1)
        read = read_to_the_end(reader, [tp0, tp1], {tp0: 15, tp1: 15})
        assert read[tp0] == [b"committed %d" % n for n in range(0, 30, 2)]
        assert read[tp1] == [b"committed %d" % n for n in range(1, 30, 2)]
        reader.poll(timeout_ms=0)  # the next fetch, which the broker holds: nothing is committed past 15

        started = time.monotonic()
        ends = reader.end_offsets([tp0, tp1])
        waited = time.monotonic() - started
        assert ends == {tp0: 15, tp1: 15}
        assert waited < 10, f"end_offsets waited {waited:.1f} s: behind the reader's open fetch (20 s)"
        assert reader.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}

        open_transaction.commit_transaction()  # its markers are written after it returns
        deadline = time.monotonic() + 30
        while (end := reader.end_offsets([tp0])[tp0]) == 15 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert end == 23  # seven records and the commit marker
        assert len(read_to_the_end(reader, [tp0], {tp0: 23})[tp0]) == 7
    finally:
        reader.close()
        open_transaction.close()
