"""The confluent-kafka transport's pure parts: option names, error meanings, topic ids."""

from __future__ import annotations

import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")  # the [test] extra installs it

from kafka.errors import (  # noqa: E402
    CommitFailedError,
    FencedInstanceIdError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NotCoordinatorError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)

from stream_nb.kafka.confluent import ends_the_producer, kafka_error, librdkafka_config, topic_id_text  # noqa: E402


def test_kafka_python_option_names_become_librdkafka_properties():
    config = librdkafka_config({
        "bootstrap_servers": ["a:9092", "b:9092"], "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u", "sasl_plain_password": "p", "ssl_cafile": "/ca.pem", "ssl_check_hostname": False,
        "transaction_timeout_ms": 10_000, "session_timeout_ms": 6_000, "buffer_memory": 64 * 1024 * 1024,
        "group_id": None, "group_instance_id": None, "bootstrap_timeout_ms": 2_000, "max_poll_records": 500,
    })
    config.pop("logger")
    assert config == {
        "bootstrap.servers": "a:9092,b:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "none", "transaction.timeout.ms": 10_000,
        "session.timeout.ms": 6_000, "queue.buffering.max.kbytes": 65_536,
    }


def test_an_option_the_transport_does_not_know_is_refused_by_name():
    with pytest.raises(ValueError, match="kafka.client.ssl_magic: not known to the confluent-kafka transport"):
        librdkafka_config({"bootstrap_servers": "a:9092", "ssl_magic": 1})


def _raised(code: int, text: str = "why", fatal: bool = False):
    return ck.KafkaException(ck.KafkaError(code, text, fatal=fatal))


@pytest.mark.parametrize("code, text, fatal, committing, expected", [
    (90, "fenced", True, False, ProducerFencedError),  # PRODUCER_FENCED
    (ck.KafkaError._FENCED, "fenced", True, False, ProducerFencedError),
    (ck.KafkaError.INVALID_PRODUCER_EPOCH, "old epoch", False, False, ProducerFencedError),
    (ck.KafkaError.FENCED_INSTANCE_ID, "instance", False, False, FencedInstanceIdError),
    (ck.KafkaError._FATAL, "Static consumer fenced by other consumer with same group.instance.id", True, False,
     FencedInstanceIdError),
    (ck.KafkaError.ILLEGAL_GENERATION, "stale", False, True, CommitFailedError),
    (ck.KafkaError.REBALANCE_IN_PROGRESS, "rebalancing", False, True, CommitFailedError),
    (ck.KafkaError._TIMED_OUT, "slow", False, False, KafkaTimeoutError),
    (ck.KafkaError._TRANSPORT, "down", False, False, KafkaConnectionError),
    (ck.KafkaError.NOT_COORDINATOR, "moved", False, False, NotCoordinatorError),
    (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, "gone", False, False, UnknownTopicOrPartitionError),
])
def test_librdkafka_errors_become_the_kafka_python_errors_the_worker_handles(code, text, fatal, committing, expected):
    error = kafka_error(_raised(code, text, fatal), committing=committing)
    assert type(error) is expected
    assert text in str(error)


@pytest.mark.parametrize("code, text, fatal, abortable, ends", [
    # A static member with our instance id rejoined: the transaction must be aborted, the producer
    # goes on (CI saw the replacement worker stop here when this counted as the producer's end).
    (ck.KafkaError.FENCED_INSTANCE_ID, "Failed to commit offsets to transaction: Static consumer fenced", False,
     True, False),
    (ck.KafkaError._FATAL, "Static consumer fenced by other consumer with same group.instance.id", True, False, True),
    (90, "Producer fenced by newer instance", True, False, True),
    (ck.KafkaError.INVALID_PRODUCER_EPOCH, "old epoch", False, False, True),
    (ck.KafkaError.ILLEGAL_GENERATION, "stale", False, True, False),
    (ck.KafkaError._TRANSPORT, "down", False, False, False),
])
def test_only_a_fatal_or_fenced_producer_error_ends_the_producer(code, text, fatal, abortable, ends):
    exception = ck.KafkaException(ck.KafkaError(code, text, fatal=fatal, txn_requires_abort=abortable))
    assert ends_the_producer(exception, kafka_error(exception)) is ends


def test_a_stale_generation_outside_a_commit_is_not_a_refused_commit():
    assert not isinstance(kafka_error(_raised(ck.KafkaError.ILLEGAL_GENERATION)), CommitFailedError)


def test_topic_ids_read_alike_from_either_transport():
    # Kafka's Java tools and librdkafka print a topic id in base64; kafka-python as a UUID
    topic_id = uuid.UUID("ae8ed31f-e9f2-426f-9b76-49e0365a2927")
    assert topic_id_text("ro7TH+nyQm+bdkngNlopJw") == str(topic_id)


def test_every_client_option_a_config_accepts_has_a_librdkafka_meaning_but_one():
    from stream_nb.config import KAFKA_CLIENT_KEYS, KAFKA_CONSUMER_KEYS, KAFKA_PRODUCER_KEYS

    refused = []
    for key in sorted(KAFKA_CLIENT_KEYS | KAFKA_PRODUCER_KEYS | KAFKA_CONSUMER_KEYS):
        try:
            librdkafka_config({"bootstrap_servers": "a:9092", key: 1})
        except ValueError:
            refused.append(key)
    assert refused == ["sasl_kerberos_domain_name"]  # librdkafka has no such setting


class _Message:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._where = (topic, partition, offset)

    def error(self):
        return None

    def topic(self):
        return self._where[0]

    def partition(self):
        return self._where[1]

    def offset(self):
        return self._where[2]

    def key(self):
        return None

    def value(self):
        return b"v"

    def headers(self):
        return None

    def timestamp(self):
        return (1, 1_000)


class _ScriptedLibrdkafka:
    """The librdkafka consumer calls the seam's reader makes, with consume() scripted."""

    def __init__(self, batches) -> None:
        self.batches = list(batches)
        self.assigned: list = []

    def assignment(self):
        return list(self.assigned)

    def incremental_assign(self, partitions):
        self.assigned += partitions

    def incremental_unassign(self, partitions):
        gone = {(p.topic, p.partition) for p in partitions}
        self.assigned = [p for p in self.assigned if (p.topic, p.partition) not in gone]

    def seek(self, partition):
        pass

    def consume(self, limit, timeout):
        return self.batches.pop(0) if self.batches else []


def _scripted_reader(batches):
    from stream_nb.kafka.confluent import Consumer

    reader = Consumer.__new__(Consumer)  # no broker: the seam's own bookkeeping around librdkafka
    reader._consumer = _ScriptedLibrdkafka(batches)
    reader._reader, reader._listener, reader._max_records = True, None, 500
    reader._positions, reader._floors, reader._buffered, reader._partitions = {}, {}, [], {}
    return reader


def test_records_fetched_before_a_seek_and_delivered_after_it_are_dropped():
    """Seen in the scale-out test: a reader assigned at the beginning, then sought to its
    checkpoint's offset, got a batch from offset 0 after records past the seek; the worker then
    learned those records a second time."""
    from kafka import TopicPartition

    tp = TopicPartition("labeled", 0)
    reader = _scripted_reader([
        [_Message("labeled", 0, offset) for offset in (1501, 1502)],
        [_Message("labeled", 0, offset) for offset in (0, 1, 2)],
        [_Message("labeled", 0, offset) for offset in (998, 999, 1503)],
    ])
    reader.assign([tp])
    reader.seek(tp, 1501)
    got = [[record.offset for record in batch] for _ in range(3) for batch in reader.poll(0).values()]
    assert got == [[1501, 1502], [1503]]


def test_a_partition_given_up_and_assigned_again_is_read_from_its_new_start():
    from kafka import TopicPartition

    tp = TopicPartition("labeled", 0)
    reader = _scripted_reader([[_Message("labeled", 0, offset) for offset in (0, 1)]])
    reader.assign([tp])
    reader.seek(tp, 1501)
    reader.assign([])
    reader.assign([tp])  # at the beginning: no floor from the seek before
    assert [record.offset for batch in reader.poll(0).values() for record in batch] == [0, 1]


@pytest.mark.parametrize("error_name, lost", [
    ("ProducerFencedError", True),
    ("InvalidProducerEpochError", True),  # the coordinator aborted a transaction that outlived its timeout
    ("TransactionalIdAuthorizationFailedError", True),
    ("RequestTimedOutError", False),  # a coordinator that died: the producer is replaced, the worker goes on
    (None, False),
])
def test_only_a_fencing_error_ends_a_kafka_python_transaction_as_lost(error_name, lost):
    import kafka.errors

    from stream_nb.kafka.clients import transaction_lost

    class Manager:
        def is_bumping_epoch(self):
            return False

        def has_fatal_error(self):
            return error_name is not None

        last_error = None if error_name is None else getattr(kafka.errors, error_name)()

    class Producer:
        _transaction_manager = Manager()

    assert transaction_lost(Producer()) is lost


@pytest.mark.parametrize("error_name, lost", [
    ("ProducerFencedError", True),  # _FENCED, PRODUCER_FENCED and INVALID_PRODUCER_EPOCH map to it
    ("FencedInstanceIdError", True),
    ("InvalidTxnStateError", False),  # librdkafka's fatal INVALID_TXN_STATE after a coordinator moved
    (None, False),
])
def test_only_a_fencing_error_ends_a_confluent_transaction_as_lost(error_name, lost):
    import kafka.errors

    from stream_nb.kafka.clients import transaction_lost

    class Producer:
        confluent = True
        fatal_error = None if error_name is None else getattr(kafka.errors, error_name)("fatal")

    assert transaction_lost(Producer()) is lost
