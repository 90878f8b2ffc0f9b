"""Which Kafka client library each integration test runs with.

Most tests take the `transport` fixture (conftest.py) and run once with each client. The longest
fault tests (a minute or more each) run with one client per scenario instead, the clients
alternating across scenarios, so each client still meets every kind of fault (a broker lost, a
coordinator lost, a worker killed) somewhere and the suite stays within its 25 minutes.
STREAM_NB_FULL_MATRIX=1 runs every such scenario with both clients."""

from __future__ import annotations

import os

import pytest

CLIENTS = ("kafka-python", "confluent-kafka")
FULL_MATRIX = os.environ.get("STREAM_NB_FULL_MATRIX") == "1"


def with_client(client: str):
    """Mark a test taking `transport` to run with `client` only (with both under the full matrix)."""
    assert client in CLIENTS, client
    return pytest.mark.parametrize("transport", CLIENTS if FULL_MATRIX else (client,))


def scenarios_with_clients(names: str, pairs: list[tuple[object, str]], ids: list[str]):
    """Mark a test parametrized by `names` (as pytest.mark.parametrize takes them) and `transport`:
    each scenario in `pairs` with its client, or with both under the full matrix. Ids read
    `client-scenario`."""
    assert len(pairs) == len(ids) and all(client in CLIENTS for _, client in pairs), pairs
    chosen = ([(scenario, client, name) for (scenario, _), name in zip(pairs, ids) for client in CLIENTS]
              if FULL_MATRIX else [(scenario, client, name) for (scenario, client), name in zip(pairs, ids)])
    single = "," not in names
    values = [((scenario,) if single else tuple(scenario)) + (client,) for scenario, client, _ in chosen]
    return pytest.mark.parametrize(f"{names},transport", values, ids=[f"{c}-{n}" for _, c, n in chosen])
