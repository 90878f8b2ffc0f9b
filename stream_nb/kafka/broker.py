"""A real single-node Apache Kafka broker (KRaft, broker+controller in one JVM) on 127.0.0.1.

Used by the `stream-nb kafka` commands, the test suite and the demo. Nothing is installed system
wide: Maven resolves Kafka's jars once into a cache folder, and every broker lives in a directory
of its own that holds its configuration, data, log and a small state file:

    <dir>/server.properties   rewritten on every start (ports may change)
    <dir>/data/               KRaft metadata and topic data; formatted once, kept across restarts
    <dir>/broker.log          the JVM's stdout and stderr, appended across restarts
    <dir>/state.json          pid, ports and bootstrap address of the last start

Topic auto-creation is left at Kafka's default (on) so that ad-hoc producers and the demo work
without ceremony; stream_nb's worker creates its own topics explicitly with the admin client, and
tests that want to prove it can pass `properties={"auto.create.topics.enable": "false"}`.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Set
from importlib import resources
from pathlib import Path

# Must match <kafka.version> in resources/pom.xml. 4.3.1 is the newest 4.x whose whole dependency
# tree is on Maven Central: 4.4.0 is listed there but kafka-tools-api:4.4.0 is missing.
KAFKA_VERSION = "4.3.1"

READY_LOG_LINE = "Kafka Server started"
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    # Small machine, one node: a modest heap, and Kafka's own G1 settings from kafka-run-class.
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    # C1 only: on a loaded 2-core machine this halves start-to-ready (measured 8 s -> 4-5 s) and
    # leaves the cores to the Python worker; a local broker's throughput is not the bottleneck.
    # Pass jvm_options without it for a long-running benchmark of the broker itself.
    "-XX:TieredStopAtLevel=1",
)

_STATE_FILE = "state.json"
_LOG_FILE = "broker.log"
_PROPERTIES_FILE = "server.properties"
_DATA_DIR = "data"
_JARS_COMPLETE_MARKER = ".complete"
# "org.apache.kafka.common.KafkaException: Socket server failed to bind ..." and the like.
_EXCEPTION_LINE = re.compile(r"^(Caused by: )?[\w.$]+(Exception|Error)(: .*)?$")


class BrokerError(RuntimeError):
    """The broker could not be prepared, started or stopped.

    `summary` is one line fit for a command line; `str()` adds the tail of the broker log.
    """

    def __init__(self, summary: str, log_path: Path | None = None, log_tail: str = "") -> None:
        self.summary = summary
        self.log_path = log_path
        self.log_tail = log_tail
        message = summary
        if log_tail:
            source = log_path if log_path is not None else "output"
            message += f"\n--- last lines of {source} ---\n{log_tail}"
        super().__init__(message)


@dataclasses.dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str | None
    directory: Path


# ---------------------------------------------------------------------------------------------
# Jars


def default_cache_dir() -> Path:
    """Where resolved jars live: $STREAM_NB_CACHE_DIR, else $XDG_CACHE_HOME/stream_nb, else
    ~/.cache/stream_nb."""
    if explicit := os.environ.get("STREAM_NB_CACHE_DIR"):
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "stream_nb"


def _resource_bytes(name: str) -> bytes:
    return resources.files(__package__).joinpath("resources", name).read_bytes()


def resolve_jars(cache_dir: Path | None = None, *, timeout: float = 900.0) -> Path:
    """Return a folder holding every jar the broker needs, resolving them with Maven if needed.

    The folder is reused while the completion marker names the same pom; the marker is written
    only after Maven finished, so an interrupted download is redone from scratch.
    """
    version_dir = (cache_dir or default_cache_dir()) / f"kafka-{KAFKA_VERSION}"
    libs_dir = version_dir / "libs"
    marker = version_dir / _JARS_COMPLETE_MARKER
    pom = _resource_bytes("pom.xml")
    pom_digest = hashlib.sha256(pom).hexdigest()

    def is_complete() -> bool:
        return marker.is_file() and marker.read_text().strip() == pom_digest and libs_dir.is_dir()

    if is_complete():
        return libs_dir
    version_dir.mkdir(parents=True, exist_ok=True)
    # Two processes (a test session and a CLI call, say) must not download into the same folder.
    with open(version_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete():
            return libs_dir
        maven = shutil.which("mvn")
        if maven is None:
            raise BrokerError("Maven ('mvn') is not on PATH; it is needed once to fetch Kafka's jars")
        marker.unlink(missing_ok=True)
        partial_dir = version_dir / "libs.partial"
        shutil.rmtree(partial_dir, ignore_errors=True)
        # A private copy of the pom: Maven may write next to it, and the package can be read-only.
        pom_path = version_dir / "pom.xml"
        pom_path.write_bytes(pom)
        command = [
            maven, "-B", "-q", "-Dstyle.color=never", "-f", str(pom_path),
            "dependency:copy-dependencies", f"-DoutputDirectory={partial_dir}",
        ]
        try:
            result = subprocess.run(
                command, cwd=version_dir, capture_output=True, text=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired as error:
            raise BrokerError(f"Maven did not resolve Kafka's jars within {timeout:.0f}s") from error
        jars = list(partial_dir.glob("*.jar")) if partial_dir.is_dir() else []
        if result.returncode != 0 or not jars:
            output = (result.stdout + result.stderr).strip().splitlines()
            raise BrokerError(
                f"Maven failed to resolve Kafka {KAFKA_VERSION} jars (exit {result.returncode}): "
                + (output[0] if output else "no output"),
                log_tail="\n".join(output[-20:]),
            )
        shutil.rmtree(libs_dir, ignore_errors=True)
        partial_dir.rename(libs_dir)
        marker.write_text(pom_digest + "\n")
    return libs_dir


def _java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (candidate := Path(java_home) / "bin" / "java").is_file():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise BrokerError("Java is not on PATH (Kafka 4 needs Java 17 or newer)")
    return found


# ---------------------------------------------------------------------------------------------
# Ports and processes


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Kafka binds with SO_REUSEADDR, so a port in TIME_WAIT from our last run counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port(exclude: Set[int] = frozenset()) -> int:
    """A free port from the kernel's ephemeral range: right for a listener that may move when it
    restarts, wrong for one that must come back on the same port (see `_stable_port`)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port not in exclude:
            return port


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
STABLE_PORTS = 12_000  # how far below the ephemeral range a stable port is looked for


def _ephemeral_port_range() -> tuple[int, int]:
    """(low, high) of the ports the kernel picks for bind(0) and outgoing connections."""
    try:
        low, high = (int(field) for field in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def _stable_port(exclude: Set[int] = frozenset(), *, attempts: int = 500) -> int:
    """A free port outside the ephemeral range, for a node that must come back where its peers
    expect it (KRaft voters are addressed by port). While such a node is down, a port of the
    ephemeral range can be handed to any process's outgoing connection or bind(0), and the node
    then cannot start again; the kernel never hands out a port outside the range on its own.
    Drawn at random (from STABLE_PORTS below the range and whatever lies above it) so that
    clusters planned at the same time rarely pick alike."""
    low, high = _ephemeral_port_range()
    spans = [span for span in (range(max(1024, low - STABLE_PORTS), low), range(high + 1, 65536)) if span]
    draw = random.SystemRandom()
    for _ in range(attempts if spans else 0):
        port = draw.choice(draw.choices(spans, weights=[len(span) for span in spans])[0])
        if port not in exclude and _port_is_free(port):
            return port
    return _free_port(exclude)  # no room outside the range on this machine


def _new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, like Kafka's Uuid.
    Kafka avoids ids starting with '-' (they read as options on a command line)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _process_alive(pid: int) -> bool:
    # Reap it first if it is our own exited child; a zombie would otherwise look alive.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # Field 3, after the parenthesised command name, is the state; Z means zombie.
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: fall back to a signal probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _process_command_line(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            text = log.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------
# The broker


class LocalKafkaBroker:
    """One Kafka broker+controller on 127.0.0.1, owned by a directory.

    `start()` formats storage the first time and (re)starts the broker, reusing the previous
    ports when they are still free; `stop()` ends it; a later `start()` on the same directory
    brings back the same broker with its data. The broker runs detached, so it outlives the
    Python process that started it (that is what `stream-nb kafka start` needs).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        port: int | None = None,
        controller_port: int | None = None,
        properties: Mapping[str, str] | None = None,
        jvm_options: tuple[str, ...] = DEFAULT_JVM_OPTIONS,
        cache_dir: Path | None = None,
        ready_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        cluster_id: str | None = None,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.cluster_id = cluster_id  # None: a new one when the storage is formatted
        self.requested_port = port
        self.requested_controller_port = controller_port
        self.extra_properties = dict(properties or {})
        self.jvm_options = jvm_options
        self.cache_dir = cache_dir
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout

    # -- paths and state ----------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.directory / _LOG_FILE

    @property
    def data_dir(self) -> Path:
        return self.directory / _DATA_DIR

    @property
    def state_path(self) -> Path:
        return self.directory / _STATE_FILE

    @property
    def properties_path(self) -> Path:
        return self.directory / _PROPERTIES_FILE

    def _read_state(self) -> dict:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def _write_state(self, state: dict) -> None:
        temporary = self.state_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(state, indent=2) + "\n")
        temporary.replace(self.state_path)  # atomic: a reader never sees half a file

    @property
    def port(self) -> int | None:
        return self._read_state().get("port")

    @property
    def bootstrap(self) -> str:
        """"127.0.0.1:<port>" of the running broker."""
        state = self._read_state()
        if not state.get("port"):
            raise BrokerError(f"no broker has been started in {self.directory}")
        return f"127.0.0.1:{state['port']}"

    def _running_pid(self) -> int | None:
        """The pid of this directory's broker if it is alive (and really is our java)."""
        pid = self._read_state().get("pid")
        if not pid or not _process_alive(pid):
            return None
        command_line = _process_command_line(pid)
        # A recycled pid belongs to some other program; ours names our server.properties. An empty
        # command line says nothing: a process in the middle of exec has none yet (its new memory
        # is in place before its arguments are), and a JVM just launched was once taken for dead
        # here under load, so a second one was started in the same directory.
        if command_line and str(self.properties_path) not in command_line:
            return None
        return pid

    def status(self) -> BrokerStatus:
        pid = self._running_pid()
        return BrokerStatus(
            running=pid is not None,
            pid=pid,
            bootstrap=self.bootstrap if pid is not None else None,
            directory=self.directory,
        )

    def is_running(self) -> bool:
        return self._running_pid() is not None

    # -- start --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _directory_lock(self) -> Iterator[None]:
        # Two `stream-nb kafka start` on one directory must not launch two JVMs on one data dir.
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def start(self) -> LocalKafkaBroker:
        """Start the broker (or find it already running) and wait until clients can use it."""
        with self._directory_lock():
            return self._start_locked()

    def launch(self) -> int | None:
        """Start the JVM without waiting for it (a cluster's nodes wait for each other's quorum);
        returns the log offset to pass to `wait_until_ready`, None when it was already running.
        Uses the requested ports, with no retry."""
        with self._directory_lock():
            if self.is_running():
                return None
            classpath = str(resolve_jars(self.cache_dir) / "*")
            java = _java_executable()
            return self._launch(java, classpath, *self._configure(java, classpath, avoid_previous=False))

    def wait_until_ready(self, log_offset: int | None) -> None:
        """Wait for a `launch()`ed broker; BrokerError (with the log's first exception) if it exits
        or is not ready within `ready_timeout`."""
        self._wait_until_ready(log_offset=log_offset or 0, pid=self._running_pid())

    def _start_locked(self) -> LocalKafkaBroker:
        if self.is_running():
            self._wait_until_ready(log_offset=0, pid=self._running_pid())
            return self
        classpath = str(resolve_jars(self.cache_dir) / "*")
        java = _java_executable()
        # A loaded machine sometimes loses a start (a port taken between probe and bind, a slow
        # quorum); one retry with fresh ports covers that before failing loudly. A new broker's
        # retry starts from fresh storage: the first JVM, killed while starting, may have left its
        # metadata log half written (seen once under heavy load: a CRC mismatch at offset 0).
        fresh = not (self.data_dir / "meta.properties").is_file()
        for attempt in (1, 2):
            port, controller_port = self._configure(java, classpath, avoid_previous=attempt > 1)
            try:
                self._launch_and_wait(java, classpath, port, controller_port)
                return self
            except BrokerError:
                self._stop_locked()
                if attempt == 2:
                    raise
                if fresh:
                    shutil.rmtree(self.data_dir, ignore_errors=True)
        raise AssertionError("unreachable")

    def _configure(self, java: str, classpath: str, *, avoid_previous: bool) -> tuple[int, int]:
        """Ports chosen, server.properties written, storage formatted (the first time): what a
        launch needs. Returns (port, controller_port)."""
        port, controller_port = self._choose_ports(avoid_previous=avoid_previous)
        self._write_properties(port, controller_port)
        self._format_storage_once(java, classpath)
        return port, controller_port

    def _choose_ports(self, *, avoid_previous: bool) -> tuple[int, int]:
        previous = self._read_state()
        chosen: list[int] = []
        for requested, key in (
            (self.requested_port, "port"),
            (self.requested_controller_port, "controller_port"),
        ):
            if requested:  # asked for explicitly: use it or fail, never silently move
                if not _port_is_free(requested):
                    raise BrokerError(f"port {requested} on 127.0.0.1 is already in use")
                chosen.append(requested)
                continue
            last = previous.get(key)
            if last and not avoid_previous and last not in chosen and _port_is_free(last):
                chosen.append(last)  # keep the address clients already know
            else:
                # outside the ephemeral range, so that the next start finds it free again
                chosen.append(_stable_port(exclude=set(chosen)))
        return chosen[0], chosen[1]

    def _write_properties(self, port: int, controller_port: int) -> None:
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            # A static voter set (not a --standalone dynamic quorum) so that a restart may move
            # the controller to another port when the old one is taken.
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            # One node: internal topics cannot have more than one replica, and few partitions
            # make them quick to create on a small machine.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            # Consumers join at once instead of waiting 3 s for more members.
            "group.initial.rebalance.delay.ms": "0",
            # Fewer threads and a smaller cleaner buffer (default 128 MiB) for a 512 MiB heap.
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        }
        properties.update(self.extra_properties)
        lines = ["# Written by stream_nb.kafka.broker on every start; edits are overwritten."]
        lines += [f"{key}={value}" for key, value in properties.items()]
        self.properties_path.write_text("\n".join(lines) + "\n")

    def _format_storage_once(self, java: str, classpath: str) -> None:
        # `format` writes meta.properties into the data dir; once it is there the storage is
        # formatted, and formatting again would mean a new cluster id and the data lost.
        if (self.data_dir / "meta.properties").is_file():
            return
        command = [
            # A short-lived tool run: small heap, C1 only, serial GC start fastest.
            java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            "-cp", classpath, self._log4j_option(),
            "kafka.tools.StorageTool", "format",
            "--config", str(self.properties_path),
            "--cluster-id", self.cluster_id or _new_cluster_id(),
            "--ignore-formatted",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            causes = [line for line in output.splitlines() if "Exception" in line or "Error" in line]
            raise BrokerError(
                f"formatting Kafka storage in {self.data_dir} failed (exit {result.returncode})"
                + (f": {causes[0].strip()[:300]}" if causes else ""),
                log_tail="\n".join(output.splitlines()[-20:]),
            )

    def _log4j_option(self) -> str:
        config = self.directory / "log4j2.properties"
        config.write_bytes(_resource_bytes("log4j2.properties"))
        return f"-Dlog4j2.configurationFile={config}"

    def _launch_and_wait(self, java: str, classpath: str, port: int, controller_port: int) -> None:
        log_offset = self._launch(java, classpath, port, controller_port)
        self._wait_until_ready(log_offset=log_offset, pid=self._read_state()["pid"])  # the one just launched

    def _launch(self, java: str, classpath: str, port: int, controller_port: int) -> int:
        command = [
            java, *self.jvm_options, self._log4j_option(),
            "-cp", classpath, "kafka.Kafka", str(self.properties_path),
        ]
        with open(self.log_path, "ab") as log:
            log_offset = log.tell()  # readiness counts only lines written by this start
            process = subprocess.Popen(
                command,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: Ctrl-C in the starting shell does not reach it, and stop()
                # can signal the whole process group.
                start_new_session=True,
                close_fds=True,
            )
        self._write_state({
            "pid": process.pid,
            "port": port,
            "controller_port": controller_port,
            "bootstrap": f"127.0.0.1:{port}",
            "kafka_version": KAFKA_VERSION,
            "started_at": time.time(),
            "log": str(self.log_path),
        })
        return log_offset

    def _wait_until_ready(self, *, log_offset: int, pid: int | None) -> None:
        deadline = time.monotonic() + self.ready_timeout
        logged_started = False
        while time.monotonic() < deadline:
            if pid is None or not _process_alive(pid):
                raise self._startup_error("exited during startup", log_offset)
            if not logged_started:
                logged_started = self._log_contains(READY_LOG_LINE, log_offset)
            if logged_started and self._metadata_request_succeeds(deadline):
                return
            time.sleep(0.2)
        raise self._startup_error(f"was not ready within {self.ready_timeout:.0f}s", log_offset)

    def _startup_error(self, what: str, log_offset: int) -> BrokerError:
        """An error naming the first exception this start logged (the tail alone often shows
        only the shutdown that followed it), with those error lines and the log tail."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(log_offset)
                lines = log.read().decode(errors="replace").splitlines()
        except OSError:
            lines = []
        error_lines = [
            line for line in lines
            if " ERROR " in line or line.startswith("Caused by:") or _EXCEPTION_LINE.match(line)
        ]
        causes = [line for line in error_lines if _EXCEPTION_LINE.match(line)]
        summary = f"Kafka broker in {self.directory} {what}"
        if causes:
            summary += f": {causes[0].strip()[:300]}"
        details = ""
        if error_lines:
            details = "errors logged:\n" + "\n".join(error_lines[:10]) + "\n--- tail ---\n"
        return BrokerError(summary, self.log_path, details + _tail(self.log_path, 30))

    def _log_contains(self, needle: str, offset: int) -> bool:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                return needle.encode() in log.read()
        except OSError:
            return False

    def _metadata_request_succeeds(self, deadline: float) -> bool:
        # Imported here so that `stream-nb kafka status` and the jar resolver stay light.
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        remaining_ms = int(max(1.0, min(10.0, deadline - time.monotonic())) * 1000)
        try:
            admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap,
                client_id="stream-nb-readiness",
                request_timeout_ms=remaining_ms,
                bootstrap_timeout_ms=remaining_ms,
            )
        except (KafkaError, OSError):
            return False
        try:
            admin.describe_cluster()
            return True
        except (KafkaError, OSError):
            return False
        finally:
            admin.close()

    # -- stop ---------------------------------------------------------------------------------

    def stop(self, *, kill: bool = False) -> bool:
        """Stop the broker: SIGTERM (a clean, controlled shutdown: its partitions' leadership is
        handed over first), SIGKILL after `stop_timeout` seconds, or SIGKILL at once with `kill`
        (a crash: the cluster notices only when the broker's session times out). Returns whether
        a running broker was found. The data and ports are kept for a restart."""
        if not self.directory.is_dir():
            return False
        with self._directory_lock():
            return self._stop_locked(kill=kill)

    def _stop_locked(self, *, kill: bool = False) -> bool:
        pid = self._running_pid()
        if pid is None:
            return False
        if not kill:
            self._signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + (0.0 if kill else self.stop_timeout)
        while time.monotonic() < deadline and _process_alive(pid):
            time.sleep(0.1)
        if _process_alive(pid):
            self._signal_group(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10.0
            while time.monotonic() < kill_deadline and _process_alive(pid):
                time.sleep(0.05)
            if _process_alive(pid):
                raise BrokerError(f"Kafka broker pid {pid} survived SIGKILL")
        state = self._read_state()
        state["pid"] = None
        self._write_state(state)
        return True

    @staticmethod
    def _signal_group(pid: int, signal_number: int) -> None:
        # The broker leads its own process group (start_new_session), so the group id is its pid.
        try:
            os.killpg(pid, signal_number)
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(pid, signal_number)

    # -- context manager ----------------------------------------------------------------------

    def __enter__(self) -> LocalKafkaBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_broker(directory: str | os.PathLike[str], **options) -> Iterator[LocalKafkaBroker]:
    """Start a broker in `directory` for the duration of a with-block, stopping it even on error."""
    broker = LocalKafkaBroker(directory, **options)
    try:
        yield broker.start()
    finally:
        broker.stop()


if __name__ == "__main__":  # handy for debugging: python -m stream_nb.kafka.broker DIR
    with running_broker(sys.argv[1] if len(sys.argv) > 1 else ".kafka") as broker:
        print(f"bootstrap={broker.bootstrap}; Ctrl-C to stop")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
