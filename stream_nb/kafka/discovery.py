"""Which broker a command talks to, found the same way by every command, and whether it answers.

Order (the first that gives an address wins):

1. ``--bootstrap HOST:PORT[,...]`` (or ``--set kafka.bootstrap_servers=...``) on the command line;
2. ``$STREAM_NB_BOOTSTRAP``;
3. ``kafka.bootstrap_servers`` of the configuration;
4. the broker (or the live brokers of the cluster) ``stream-nb kafka start`` left running in ``./.kafka``.

An address someone wrote down wins over the development broker: a production configuration run
from a checkout talks to its own cluster, and its start line says which local broker it passed over.

Each command prints the address and where it came from at start, and checks that something
listens there (a TCP connection to any of the servers) before it does anything else, so an
unreachable broker is one line and exit 2 within `REACHABLE_WITHIN_S`, not a client's timeout.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

BOOTSTRAP_ENV = "STREAM_NB_BOOTSTRAP"
LOCAL_BROKER_DIR = Path(".kafka")
REACHABLE_WITHIN_S = 5.0


class NoBroker(RuntimeError):
    """No address found, or nothing answers at it; the message is the one line printed."""


@dataclass(frozen=True)
class Bootstrap:
    servers: str
    source: str  # where the address came from, in words

    def __str__(self) -> str:
        return f"{self.servers} ({self.source})"


def find_bootstrap(command_line: str | None = None, configured: str | list | None = None,
                   config_source: str = "the configuration", local_dir: Path = LOCAL_BROKER_DIR) -> Bootstrap:
    """The broker to use, by the module's order; NoBroker when none of them names one."""
    if command_line:
        return Bootstrap(command_line, "--bootstrap")
    if from_env := os.environ.get(BOOTSTRAP_ENV, "").strip():
        return Bootstrap(from_env, f"${BOOTSTRAP_ENV}")
    local = _local_broker(local_dir)
    if configured:
        servers = configured if isinstance(configured, str) else ",".join(configured)
        passed_over = f"; not the local broker at {local} in {local_dir}" if local not in (None, servers) else ""
        return Bootstrap(servers, f"kafka.bootstrap_servers in {config_source}{passed_over}")
    if local is not None:
        return Bootstrap(local, f"the broker `stream-nb kafka start` runs in {local_dir}")
    raise NoBroker(f"no Kafka broker named: pass --bootstrap HOST:PORT, set ${BOOTSTRAP_ENV}, start one with "
                   "`stream-nb kafka start`, or set kafka.bootstrap_servers in the configuration")


def _local_broker(directory: Path) -> str | None:
    from stream_nb.kafka.cluster import LocalKafkaCluster, is_cluster_directory

    if is_cluster_directory(directory):
        try:
            nodes = LocalKafkaCluster(directory).status()
        except RuntimeError:  # not a cluster stream_nb wrote: no local broker to offer
            return None
        live = [node.address for node in nodes if node.running]
        return ",".join(live) or None
    if not (directory / "state.json").is_file():
        return None
    from stream_nb.kafka.broker import LocalKafkaBroker

    status = LocalKafkaBroker(directory).status()
    return status.bootstrap if status.running else None


def check_reachable(bootstrap: Bootstrap, within_s: float = REACHABLE_WITHIN_S) -> None:
    """NoBroker unless a TCP connection to one of the servers opens within `within_s` (tried
    again until then: a broker that is just starting gets the time)."""
    deadline = time.monotonic() + within_s
    last_error: OSError | None = None
    while True:
        for server in bootstrap.servers.split(","):
            host, port = _host_port(server.strip())
            remaining = max(0.1, min(1.0, deadline - time.monotonic()))
            try:
                with socket.create_connection((host, port), timeout=remaining):
                    return
            except OSError as error:
                last_error = error
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
    reason = getattr(last_error, "strerror", None) or str(last_error)
    raise NoBroker(f"no Kafka broker answers at {bootstrap} within {within_s:g} s ({reason}); start one with "
                   "`stream-nb kafka start` or name another with --bootstrap HOST:PORT")


def _host_port(server: str) -> tuple[str, int]:
    """host[:port] (IPv6 in brackets) -> (host, port); port 9092 when absent, as the clients do."""
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else 9092
    host, separator, port = server.rpartition(":")
    if not separator:
        return server, 9092
    return host, int(port)
