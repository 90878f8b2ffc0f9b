"""Helpers of the tests on the three-broker cluster (tests/integration/conftest.py's `cluster`)."""

from __future__ import annotations

import time

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from stream_nb.kafka.cluster import LocalKafkaCluster

from worker_support import run_cli


def whole(cluster: LocalKafkaCluster) -> LocalKafkaCluster:
    """Every broker running, every replica in sync (a case that failed may have left one down) and
    every partition led by its preferred replica, so that the controller's own rebalance does not
    move a leader in the middle of a case."""
    cluster.start()
    cluster.wait_until_in_sync(timeout=180)
    cluster.prefer_leaders()
    return cluster


# ---------------------------------------------------------------------------------------------
# The stream and what a downstream reader sees of it


def kill_and_restart(cluster: LocalKafkaCluster, broker: int, down_s: float) -> None:
    """SIGKILL one broker with the command a user runs, keep it down, bring it back the same way."""
    killed = run_cli("kafka", "stop", "--broker", str(broker), "--kill", "--dir", str(cluster.directory))
    assert killed.returncode == 0 and f"killed broker {broker} " in killed.stdout, killed.stdout + killed.stderr
    time.sleep(down_s)
    status = run_cli("kafka", "status", "--dir", str(cluster.directory))
    assert status.returncode == 1 and f"broker {broker}: stopped" in status.stdout, status.stdout + status.stderr
    started = run_cli("kafka", "start", "--broker", str(broker), "--dir", str(cluster.directory), timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    cluster.wait_until_in_sync(timeout=180)


def topic_settings(bootstrap: str, topics: list[str]) -> dict[str, tuple[int, str]]:
    """topic -> (replicas of partition 0, min.insync.replicas) as the cluster has them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        replicas = {t["name"]: len(t["partitions"][0]["replica_nodes"]) for t in admin.describe_topics(topics)}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics])
    finally:
        admin.close()
    by_topic = next(iter(described.values()))  # {resource type: {topic: {key: {"value", ...}}}}
    return {topic: (replicas[topic], (by_topic.get(topic, {}).get("min.insync.replicas") or {}).get("value"))
            for topic in topics}
