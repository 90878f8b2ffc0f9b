"""The outage filter: which of the Kafka clients' log lines are an outage (one warning of ours)
and which pass as they are."""

import logging

import pytest
from kafka import errors as kafka_errors

from stream_nb.worker.outage import OutageLog


def record(name: str, level: int, message: str, *args) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, args, None)


@pytest.fixture
def outage(caplog):
    caplog.set_level(logging.WARNING, logger="stream_nb.worker")
    return OutageLog()


@pytest.mark.parametrize("line", [
    record("kafka.cluster", logging.ERROR, "Metadata refresh: failed %s", kafka_errors.Cancelled()),
    record("kafka.cluster", logging.ERROR, "Metadata refresh: failed %s", kafka_errors.NodeNotReadyError("metadata")),
    record("kafka.coordinator.base", logging.ERROR, "Error sending %s to node %s [%s]", "OffsetCommit", 1,
           kafka_errors.KafkaConnectionError("111 ECONNREFUSED")),
    record("kafka.net.connection", logging.ERROR, "Connection lost: %s", "reset by peer"),
    record("kafka.librdkafka", logging.ERROR, "%s", "localhost:9092/1: Connect to ipv4#127.0.0.1:9092 failed"),
], ids=["cancelled-refresh", "node-not-ready", "connection-error-arg", "connection-logger", "librdkafka"])
def test_an_outage_line_is_dropped_and_said_once(outage, caplog, line):
    assert outage.filter(line) is False
    assert outage.filter(line) is False
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("Kafka unreachable (")
    outage.back()
    assert caplog.records[-1].getMessage().startswith("Kafka is back after")
    assert outage.since is None


def test_other_client_errors_pass_and_start_no_outage(outage, caplog):
    assert outage.filter(record("kafka.cluster", logging.ERROR, "Topic %s not found in cluster metadata", "x")) is True
    assert outage.filter(record("kafka.cluster", logging.ERROR, "Metadata refresh: failed %s",
                                kafka_errors.TopicAuthorizationFailedError())) is True
    assert outage.since is None and caplog.records == []


def test_a_fencing_over_a_connection_logger_passes_and_starts_no_outage(outage, caplog):
    line = record("kafka.librdkafka", logging.ERROR, "%s",
                  "TXNERR [rdkafka#producer-3] [thrd:main]: Current transaction failed in state InTransaction: "
                  "Failed to commit offsets to transaction on broker 127.0.0.1:56425/1: t[0](Broker: Static "
                  "consumer fenced by other consumer with same group.instance.id) (FENCED_INSTANCE_ID)")
    assert outage.filter(line) is True
    assert outage.since is None and caplog.records == []


def test_client_lines_below_error_are_dropped_and_ours_pass(outage):
    assert outage.filter(record("kafka.cluster", logging.WARNING, "No node available")) is False
    assert outage.filter(record("stream_nb.worker", logging.INFO, "progress")) is True
    outage.passthrough = True
    assert outage.filter(record("kafka.cluster", logging.DEBUG, "anything")) is True


def test_an_unstable_offset_after_a_rebalance_is_dropped_and_starts_no_outage(outage, caplog):
    """kafka-python's ERROR line after every rebalance under exactly-once (the committed offset is
    pending until the previous owner's transaction ends; the client retries): not a fault."""
    from kafka.structs import TopicPartition

    line = record("kafka.coordinator.consumer", logging.ERROR, "Unknown error fetching offsets for %s: %s",
                  TopicPartition("in", 0), kafka_errors.UnstableOffsetCommitError())
    assert outage.filter(line) is False
    assert caplog.records == [] and outage.since is None
    # the same words with another error pass as they are
    other = record("kafka.coordinator.consumer", logging.ERROR, "Unknown error fetching offsets for %s: %s",
                   TopicPartition("in", 0), kafka_errors.GroupAuthorizationFailedError())
    assert outage.filter(other) is True


def test_connections_closing_after_the_worker_stopped_are_no_outage(outage, caplog):
    """The worker's clients close after its stop line: a socket closed under a request in flight
    is logged by kafka-python at ERROR, and must not say "Kafka unreachable" (seen in CI)."""
    closing = record("kafka.net.transport", logging.ERROR, "%s: Error receiving network data closing socket",
                     "<KafkaTCPTransport [none] (closed)>")
    outage.closing = True
    assert outage.filter(closing) is False
    assert outage.since is None and caplog.records == []
    outage.closing = False
    assert outage.filter(closing) is False and caplog.records[-1].getMessage().startswith("Kafka unreachable (")
