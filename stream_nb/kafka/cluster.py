"""A KRaft cluster of Apache Kafka brokers on 127.0.0.1, for production-shaped tests.

Each node is one JVM with both roles (broker and controller), so three nodes make a controller
quorum that survives one dead node, as a small production cluster does. The internal topics are
replicated to every node (at most three) with `min.insync.replicas` one less, and so are the
topics created without an explicit replication factor.

    <dir>/cluster.json    the cluster id and every node's two ports, chosen once: each node's
                          controller.quorum.voters names every controller, so a node that comes
                          back must come back where the others expect it; the ports lie outside
                          the kernel's ephemeral range, where no other socket takes them meanwhile
    <dir>/broker-<id>/    one LocalKafkaBroker directory per node (its own data, log, state)

`stream-nb kafka start --brokers 3` makes one; `stop --broker ID [--kill]` and `start --broker
ID` take one node away and bring it back, which is what the failover tests do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from stream_nb.kafka.broker import (
    DEFAULT_JVM_OPTIONS,
    BrokerError,
    LocalKafkaBroker,
    _new_cluster_id,
    _stable_port,
)

CLUSTER_FILE = "cluster.json"
MAX_BROKERS = 9  # a loopback cluster on one machine; more is a typo
# Partitions of __consumer_offsets and __transaction_state: enough that the group and the
# transactional ids of a test spread over brokers, few enough to create fast on two cores.
INTERNAL_TOPIC_PARTITIONS = 3


class ClusterError(BrokerError):
    """The cluster's directory or one of its nodes is not as asked."""


@dataclasses.dataclass(frozen=True)
class NodeStatus:
    node_id: int
    running: bool
    pid: int | None
    address: str  # 127.0.0.1:<port>, running or not
    directory: Path


def is_cluster_directory(directory: str | os.PathLike[str]) -> bool:
    return (Path(directory) / CLUSTER_FILE).is_file()


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (an int32 over UTF-16 code units), which Kafka uses to place a group
    on a __consumer_offsets partition and a transactional id on a __transaction_state one."""
    value = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        value = (31 * value + int.from_bytes(encoded[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int = INTERNAL_TOPIC_PARTITIONS) -> int:
    """The internal-topic partition that holds `key`: Kafka's Utils.abs(hashCode) % partitions,
    where Utils.abs is Math.abs but for Integer.MIN_VALUE, which it maps to 0 (not a mask of the
    sign bit: -5 is 5, not 2**31 - 5)."""
    code = java_string_hash(key)
    return (0 if code == -(2**31) else abs(code)) % partitions


class LocalKafkaCluster:
    """Brokers 1..N of one KRaft cluster on 127.0.0.1, owned by a directory.

    `start()` launches every node that is not running and waits until each serves metadata;
    `stop()` ends them all. A node alone: `stop_broker(id, kill=...)`, `start_broker(id)`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        brokers: int | None = None,
        *,
        properties: Mapping[str, str] | None = None,
        jvm_options: tuple[str, ...] = DEFAULT_JVM_OPTIONS,
        cache_dir: Path | None = None,
        ready_timeout: float = 180.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.extra_properties = dict(properties or {})
        self.jvm_options = jvm_options
        self.cache_dir = cache_dir
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self._spec = self._read_or_plan(brokers)

    # -- the plan: ids and ports ------------------------------------------------------------------

    def _read_or_plan(self, brokers: int | None) -> dict:
        path = self.directory / CLUSTER_FILE
        if path.is_file():
            try:
                spec = json.loads(path.read_text())
                nodes = {int(node_id): (int(ports["port"]), int(ports["controller_port"]))
                         for node_id, ports in spec["nodes"].items()}
                cluster_id = str(spec["cluster_id"])
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                raise ClusterError(f"{path} is not a cluster description stream_nb wrote: {error}") from None
            if brokers is not None and brokers != len(nodes):
                raise ClusterError(f"{self.directory} holds a cluster of {len(nodes)} brokers, not {brokers}; "
                                   "stop it and use another --dir")
            return {"cluster_id": cluster_id, "nodes": nodes, "written": True}
        if brokers is None:
            raise ClusterError(f"no cluster in {self.directory} (start one with --brokers N)")
        if not 1 <= brokers <= MAX_BROKERS:
            raise ClusterError(f"--brokers must be between 1 and {MAX_BROKERS}, not {brokers}")
        if (self.directory / "state.json").is_file() or (self.directory / "data").is_dir():
            raise ClusterError(f"{self.directory} holds a single broker; a cluster needs a directory of its own")
        taken: set[int] = set()
        nodes = {}
        for node_id in range(1, brokers + 1):
            port = _stable_port(taken)
            taken.add(port)
            controller_port = _stable_port(taken)
            taken.add(controller_port)
            nodes[node_id] = (port, controller_port)
        return {"cluster_id": _new_cluster_id(), "nodes": nodes, "written": False}

    def _write_spec(self) -> None:
        if self._spec["written"]:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        body = {"cluster_id": self._spec["cluster_id"],
                "nodes": {str(node_id): {"port": port, "controller_port": controller_port}
                          for node_id, (port, controller_port) in self._spec["nodes"].items()}}
        temporary = self.directory / (CLUSTER_FILE + ".tmp")
        temporary.write_text(json.dumps(body, indent=2) + "\n")
        temporary.replace(self.directory / CLUSTER_FILE)
        self._spec["written"] = True

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._spec["nodes"])

    @property
    def cluster_id(self) -> str:
        return self._spec["cluster_id"]

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self._ports(node_id)[0]}"

    @property
    def bootstrap(self) -> str:
        """Every node's address, comma-separated: a client finds the cluster through any live one."""
        return ",".join(self.address(node_id) for node_id in self.node_ids)

    def _ports(self, node_id: int) -> tuple[int, int]:
        try:
            return self._spec["nodes"][node_id]
        except KeyError:
            raise ClusterError(f"the cluster in {self.directory} has brokers {self.node_ids}, not {node_id}") from None

    def node(self, node_id: int) -> LocalKafkaBroker:
        port, controller_port = self._ports(node_id)
        return LocalKafkaBroker(
            self.directory / f"broker-{node_id}", port=port, controller_port=controller_port,
            properties={**self._node_properties(node_id), **self.extra_properties},
            jvm_options=self.jvm_options, cache_dir=self.cache_dir, ready_timeout=self.ready_timeout,
            stop_timeout=self.stop_timeout, cluster_id=self.cluster_id,
        )

    def _node_properties(self, node_id: int) -> dict[str, str]:
        replicas = min(3, len(self.node_ids))
        in_sync = max(1, replicas - 1)
        voters = ",".join(f"{other}@127.0.0.1:{self._ports(other)[1]}" for other in self.node_ids)
        internal = str(INTERNAL_TOPIC_PARTITIONS)
        return {
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "offsets.topic.replication.factor": str(replicas),
            "offsets.topic.num.partitions": internal,
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(in_sync),
            "transaction.state.log.num.partitions": internal,
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(in_sync),
            "default.replication.factor": str(replicas),
            "min.insync.replicas": str(in_sync),
        }

    # -- the whole cluster ------------------------------------------------------------------------

    def start(self) -> LocalKafkaCluster:
        """Launch every node that is not running, then wait for each: a node of a new quorum is
        not ready before a majority of controllers runs, so none is waited for alone."""
        self._write_spec()
        launched: dict[int, int | None] = {}
        try:
            for node_id in self.node_ids:
                launched[node_id] = self.node(node_id).launch()
            for node_id, log_offset in launched.items():
                self.node(node_id).wait_until_ready(log_offset)
        except BrokerError:
            self.stop()
            raise
        return self

    def stop(self, *, kill: bool = False) -> list[int]:
        """Stop every node at once (one by one, the last ones would wait for a quorum that is
        gone); returns the ids of the nodes that were running."""
        if not (self.directory / CLUSTER_FILE).is_file():
            return []
        stopped: list[int] = []
        errors: list[BaseException] = []

        def stop_one(node_id: int) -> None:
            try:
                if self.node(node_id).stop(kill=kill):
                    stopped.append(node_id)
            except BaseException as error:  # reported after every node had its turn
                errors.append(error)

        threads = [threading.Thread(target=stop_one, args=(node_id,)) for node_id in self.node_ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return sorted(stopped)

    def status(self) -> list[NodeStatus]:
        found = []
        for node_id in self.node_ids:
            status = self.node(node_id).status()
            found.append(NodeStatus(node_id, status.running, status.pid, self.address(node_id), status.directory))
        return found

    # -- one node -----------------------------------------------------------------------------------

    def start_broker(self, node_id: int) -> LocalKafkaBroker:
        """Bring one node back (the rest of the quorum is running) and wait until it serves."""
        self._write_spec()
        return self.node(node_id).start()

    def stop_broker(self, node_id: int, *, kill: bool = False) -> bool:
        """Stop one node: a controlled shutdown (leadership handed over first), or SIGKILL with
        `kill` (its partitions wait for the controller to notice the lost session)."""
        return self.node(node_id).stop(kill=kill)

    # -- who leads what -----------------------------------------------------------------------------

    def partition_leaders(self, topics: list[str] | None = None) -> dict[tuple[str, int], dict]:
        """(topic, partition) -> {"leader", "replicas", "isr"} as the cluster's metadata says
        (internal topics included); leader -1 while a partition has none."""
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        # Until the controller fences a killed node (broker.session.timeout.ms, 9 s by default) the
        # metadata still lists it, and a request sent there is refused: ask again, on the live ones.
        deadline = time.monotonic() + 30.0
        while True:
            admin = None
            try:
                admin = KafkaAdminClient(bootstrap_servers=self._live_bootstrap(), client_id="stream-nb-cluster",
                                         request_timeout_ms=10_000, bootstrap_timeout_ms=10_000)
                described = admin.describe_topics(topics)
                break
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
            finally:
                if admin is not None:
                    admin.close()
        leaders = {}
        for topic in described:
            for partition in topic.get("partitions") or ():
                leaders[(topic["name"], partition["partition_index"])] = {
                    "leader": partition["leader_id"],
                    "replicas": list(partition["replica_nodes"]),
                    "isr": list(partition["isr_nodes"]),
                }
        return leaders

    def leader_of(self, topic: str, partition: int = 0) -> int:
        return self.partition_leaders([topic])[(topic, partition)]["leader"]

    def group_coordinator(self, group_id: str) -> int:
        """The node that coordinates a consumer group: the leader of its __consumer_offsets partition."""
        return self.leader_of("__consumer_offsets", coordinator_partition(group_id))

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node that coordinates a transactional producer: the leader of its
        __transaction_state partition."""
        return self.leader_of("__transaction_state", coordinator_partition(transactional_id))

    def wait_until_in_sync(self, timeout: float = 120.0, topics: list[str] | None = None) -> None:
        """Until every partition has a leader and every replica in sync (after a node came
        back, before the next one may go: what a rolling restart waits for)."""
        deadline = time.monotonic() + timeout
        behind: list = []
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # a node just back may not answer yet
                leaders = self.partition_leaders(topics)
                behind = [key for key, state in leaders.items()
                          if state["leader"] < 0 or sorted(state["isr"]) != sorted(state["replicas"])]
                if not behind:  # (a new cluster may have no partition yet)
                    return
            time.sleep(0.25)
        raise ClusterError(f"partitions not in sync within {timeout:.0f}s: {behind[:10]}")

    def prefer_leaders(self, timeout: float = 60.0) -> None:
        """Move every partition's leadership back to its preferred replica (the first of its
        assignment) and wait until it is there.

        After a node came back it leads nothing; the controller's own rebalance moves leaders
        back later (leader.imbalance.check.interval.seconds, 300 s by default), at a moment no
        one chose. Electing now gives a layout that stays put.
        """
        from kafka import KafkaAdminClient

        deadline = time.monotonic() + timeout
        displaced: list = []
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # a controller just elected may not answer yet
                admin = KafkaAdminClient(bootstrap_servers=self._live_bootstrap(), client_id="stream-nb-cluster",
                                         request_timeout_ms=10_000)
                try:
                    admin.elect_leaders(0, None, timeout_ms=10_000)  # 0: preferred; None: every partition
                finally:
                    admin.close()
            leaders = self.partition_leaders()
            displaced = [key for key, state in leaders.items()
                         if state["replicas"] and state["leader"] != state["replicas"][0]]
            if not displaced:
                return
            time.sleep(0.5)
        raise ClusterError(f"partitions not led by their preferred replica within {timeout:.0f}s: {displaced[:10]}")

    def _live_bootstrap(self) -> str:
        live = [status.address for status in self.status() if status.running]
        if not live:
            raise ClusterError(f"no broker of the cluster in {self.directory} is running")
        return ",".join(live)


@contextlib.contextmanager
def running_cluster(directory: str | os.PathLike[str], brokers: int = 3, **options) -> Iterator[LocalKafkaCluster]:
    """A cluster for the duration of a with-block, every node stopped even on error."""
    cluster = LocalKafkaCluster(directory, brokers, **options)
    try:
        yield cluster.start()
    finally:
        cluster.stop(kill=True)
