"""Fixtures of the integration tests (the broker itself is tests/conftest.py's kafka_broker)."""

from __future__ import annotations

import pytest

from corpora import load_sms_spam
from worker_support import WorkerProcess


@pytest.fixture(scope="module")
def sms() -> list[tuple[str, str]]:
    """The SMS Spam Collection as (label, text) in file order."""
    return load_sms_spam()


@pytest.fixture(params=["kafka-python", "confluent-kafka"])
def transport(request) -> str:
    """kafka.transport: every test that takes it runs once with each client library."""
    return request.param


@pytest.fixture(autouse=True)
def no_worker_outlives_its_test():
    """A test that fails before it stops its workers left them running, retrying a broker that
    is gone and loading the machine under the tests after it (seen: three for 70 minutes)."""
    yield
    left, WorkerProcess.started[:] = list(WorkerProcess.started), []
    for worker in left:
        if worker.alive():
            worker.kill()
