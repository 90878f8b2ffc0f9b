"""Shared pytest fixtures. Keep each one small and lazy: a test pays only for what it asks for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stream_nb.kafka.broker import LocalKafkaBroker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kafka: needs a real local Apache Kafka broker (Java 17+, and Maven on the first run)",
    )


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    """One real Kafka broker for the whole session, started on first use; `.bootstrap` is
    "127.0.0.1:<port>". It is stopped at the end of the session, whatever the outcome."""
    from stream_nb.kafka.broker import LocalKafkaBroker  # only sessions that use Kafka pay

    broker = LocalKafkaBroker(tmp_path_factory.mktemp("kafka"))
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
