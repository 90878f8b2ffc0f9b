"""The cluster's plan without starting a JVM: where Kafka puts a group's and a transactional id's
coordinator, and the directory rules of `stream-nb kafka start --brokers N`."""

from __future__ import annotations

import json
import socket

import pytest

from stream_nb.kafka import broker
from stream_nb.kafka.cluster import ClusterError, LocalKafkaCluster, coordinator_partition, java_string_hash


@pytest.mark.parametrize("text, java", [
    # printed by Java 17's jshell: "<text>".hashCode()
    ("hello", 99162322),
    ("stream-nb-group-abc-a", -913736644),
    ("日本語\U0001F600x", -798549378),  # a surrogate pair counts as two UTF-16 units
    ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE, whose Utils.abs Kafka makes 0
    ("", 0),
])
def test_the_hash_is_javas_string_hashcode(text, java):
    assert java_string_hash(text) == java


@pytest.mark.parametrize("key, three, fifty", [
    # printed by Java 17 with Kafka 4.3.1's own Utils.abs: Utils.abs(key.hashCode()) % 3 and % 50
    ("polygenelubricants", 0, 0),  # Integer.MIN_VALUE: 0
    ("stream-nb-group-abc-a", 1, 44),  # a negative hash: its absolute value, not the sign bit masked
    ("stream-nb-517aaf00-a", 0, 15),  # the transactional id of the CI run this was found in
    ("coordinated-2e8a46e9", 2, 11),  # the group id of the CI run before it
    ("hello", 1, 22),
])
def test_the_coordinator_partition_is_kafkas(key, three, fifty):
    assert coordinator_partition(key, 3) == three
    assert coordinator_partition(key, 50) == fifty


def test_a_new_cluster_gets_distinct_ports_and_writes_its_plan_on_start(tmp_path):
    cluster = LocalKafkaCluster(tmp_path / "c", 3)
    ports = [port for node in cluster.node_ids for port in (cluster.address(node).rsplit(":", 1)[1],)]
    assert cluster.node_ids == [1, 2, 3] and len(set(ports)) == 3
    assert cluster.bootstrap == ",".join(cluster.address(node) for node in (1, 2, 3))
    properties = cluster.node(2).extra_properties
    assert properties["node.id"] == "2"
    assert properties["controller.quorum.voters"].count("@127.0.0.1:") == 3
    assert (properties["min.insync.replicas"], properties["transaction.state.log.min.isr"]) == ("2", "2")
    assert properties["offsets.topic.replication.factor"] == "3"
    assert not (tmp_path / "c" / "cluster.json").exists()  # written by start(), not by a look


@pytest.mark.parametrize("brokers, message", [(0, "--brokers must be between 1 and 9, not 0"),
                                              (10, "--brokers must be between 1 and 9, not 10")])
def test_a_cluster_size_out_of_range_is_refused(tmp_path, brokers, message):
    with pytest.raises(ClusterError, match=message):
        LocalKafkaCluster(tmp_path, brokers)


def test_a_directory_of_a_single_broker_or_of_another_cluster_is_refused(tmp_path):
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "state.json").write_text("{}")
    with pytest.raises(ClusterError, match="holds a single broker"):
        LocalKafkaCluster(tmp_path / "single", 3)
    (tmp_path / "three").mkdir()
    (tmp_path / "three" / "cluster.json").write_text(json.dumps(
        {"cluster_id": "x", "nodes": {str(n): {"port": 9000 + n, "controller_port": 9100 + n} for n in (1, 2, 3)}}))
    with pytest.raises(ClusterError, match="holds a cluster of 3 brokers, not 2"):
        LocalKafkaCluster(tmp_path / "three", 2)
    assert LocalKafkaCluster(tmp_path / "three").bootstrap == "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"
    (tmp_path / "three" / "cluster.json").write_text("{not json")
    with pytest.raises(ClusterError, match="is not a cluster description stream_nb wrote"):
        LocalKafkaCluster(tmp_path / "three")
    with pytest.raises(ClusterError, match="no cluster in"):
        LocalKafkaCluster(tmp_path / "none")


def _ports_of(cluster: LocalKafkaCluster) -> list[int]:
    return [port for node in cluster.node_ids for port in cluster._ports(node)]


def test_a_clusters_ports_lie_outside_the_kernels_ephemeral_range(tmp_path, monkeypatch):
    """Found in CI: a node stopped for a rolling restart could not come back, because its
    controller port (from bind(0), so from the ephemeral range) had meanwhile become the source
    port of some other process's connection."""
    low, high = broker._ephemeral_port_range()
    ports = _ports_of(LocalKafkaCluster(tmp_path / "c", 3))
    assert len(set(ports)) == 6
    assert all(max(1024, low - broker.STABLE_PORTS) <= port < low or high < port for port in ports), (ports, low)
    # where the range starts at 1024, the ports lie above it
    (tmp_path / "range").write_text("1024\t60999\n")
    monkeypatch.setattr(broker, "EPHEMERAL_RANGE_FILE", tmp_path / "range")
    assert all(port > 60999 for port in _ports_of(LocalKafkaCluster(tmp_path / "d", 3)))


def test_a_stable_port_skips_a_port_in_use_and_falls_back_when_no_room_is_left(tmp_path, monkeypatch):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        # a range of one port below the ephemeral range, and that one in use: the draw skips it
        (tmp_path / "range").write_text(f"{taken + 1} 65535\n")
        monkeypatch.setattr(broker, "EPHEMERAL_RANGE_FILE", tmp_path / "range")
        monkeypatch.setattr(broker, "STABLE_PORTS", 1)
        port = broker._stable_port(attempts=20)
        assert port != taken and broker._port_is_free(port)  # from bind(0): nothing else is left
    (tmp_path / "range").write_text("1024 65535\n")
    assert broker._stable_port(exclude={port}) != port
    (tmp_path / "range").write_text("not a range\n")
    assert broker._ephemeral_port_range() == (32768, 60999)
