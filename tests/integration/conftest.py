"""Fixtures of the integration tests (the broker itself is tests/conftest.py's kafka_broker)."""

from __future__ import annotations

import pytest

from stream_nb.kafka.cluster import LocalKafkaCluster

from corpora import load_sms_spam
from worker_support import run_cli


@pytest.fixture(scope="module")
def sms() -> list[tuple[str, str]]:
    """The SMS Spam Collection as (label, text) in file order."""
    return load_sms_spam()


@pytest.fixture(params=["kafka-python", "confluent-kafka"])
def transport(request) -> str:
    """kafka.transport: every test that takes it runs once with each client library."""
    return request.param


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> LocalKafkaCluster:
    """Three brokers, started and listed by the command a user runs: one for the test process
    (the modules that use it share an xdist group, so one process runs them all)."""
    directory = tmp_path_factory.mktemp("cluster")
    try:
        started = run_cli("kafka", "start", "--brokers", "3", "--dir", str(directory), timeout=400)
        assert started.returncode == 0, started.stderr[-4000:]
        cluster = LocalKafkaCluster(directory)
        servers = started.stdout.splitlines()[-1].removeprefix("bootstrap=").split(",")
        assert servers == cluster.bootstrap.split(",") and len(set(servers)) == 3, started.stdout
        yield cluster
    finally:
        if (directory / "cluster.json").is_file():
            LocalKafkaCluster(directory).stop(kill=True)
