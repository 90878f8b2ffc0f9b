"""A real local Apache Kafka broker for development, tests and the demo (see broker.py)."""

from stream_nb.kafka.broker import (
    KAFKA_VERSION,
    BrokerError,
    BrokerStatus,
    LocalKafkaBroker,
    resolve_jars,
    running_broker,
)

__all__ = [
    "KAFKA_VERSION",
    "BrokerError",
    "BrokerStatus",
    "LocalKafkaBroker",
    "resolve_jars",
    "running_broker",
]
