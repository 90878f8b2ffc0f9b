"""Fixtures of the integration tests (the broker itself is tests/conftest.py's kafka_broker)."""

from __future__ import annotations

import pytest

from corpora import load_sms_spam


@pytest.fixture(scope="module")
def sms() -> list[tuple[str, str]]:
    """The SMS Spam Collection as (label, text) in file order."""
    return load_sms_spam()


@pytest.fixture(params=["kafka-python", "confluent-kafka"])
def transport(request) -> str:
    """kafka.transport: every test that takes it runs once with each client library."""
    return request.param
