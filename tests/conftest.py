"""Shared pytest fixtures. Keep each one small and lazy: a test pays only for what it asks for.

The suite runs in parallel processes (pytest-xdist, `--dist loadgroup`, see the Makefile) on one
broker, started on first use, and every test makes its own topics and groups, so tests share
nothing but the broker. Tests that must share more (a module's 3-broker cluster) are marked
with one `xdist_group` and run in one process."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stream_nb.kafka.broker import LocalKafkaBroker

# The tests' helper modules assert too: pytest rewrites their asserts as it does a test's, so a
# failure in one says what differed, not a bare AssertionError (CI once printed only that).
pytest.register_assert_rewrite("corpora", "docs_support", "hostile", "mail_reference", "native", "streams", "timing",
                               "worker_support")

@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand out the longest work first: the tests of a group (a module's 3-broker cluster), then
    the other broker tests, then the rest. xdist's loadgroup scheduler deals work units in this
    order, so the long ones do not start last on a busy process."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("xdist_group"):
            return 0
        return 1 if item.get_closest_marker("kafka") or "kafka_broker" in item.fixturenames else 2

    items.sort(key=rank)  # stable: each file keeps its own order


UNGROUPED: set[str] = set()  # tests marked with an xdist_group that xdist did not group


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under --dist loadgroup, xdist names each grouped test `<id>@<group>`. A marked test
    without it was not grouped: it would start a cluster in each process, silently (pytest-xdist
    3.8 on pytest 9, pytest-xdist issue 1386). Such tests fail, saying so (pytest_runtest_setup)."""
    if session.config.getoption("loadgroup", default=False):
        UNGROUPED.update(item.nodeid for item in session.items
                         if item.get_closest_marker("xdist_group") and "@" not in item.nodeid)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.nodeid in UNGROUPED:
        pytest.fail("--dist loadgroup did not group this test: pytest-xdist and pytest do not agree on node "
                    "ids (see the pytest pin in pyproject.toml)", pytrace=False)


# STREAM_NB_TEST_CPU=FILE: each test's wall and CPU seconds (its process's, and its waited-for
# children's: the workers and commands it ran, not detached brokers) appended to FILE, a line a
# test, so the suite's CPU can be found by test when it outgrows its 25 minutes.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    path = os.environ.get("STREAM_NB_TEST_CPU")
    if not path:
        yield
        return
    import resource

    def cpu() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                      resource.getrusage(resource.RUSAGE_CHILDREN)))

    wall, used = time.monotonic(), cpu()
    yield
    with open(path, "a") as out:
        out.write(f"{time.monotonic() - wall:.2f}\t{cpu() - used:.2f}\t{item.nodeid}\n")


# The one broker of a pytest run: its directory is made by the controlling process and named to
# the xdist processes (which inherit the environment); the first test that asks starts it, the
# others find it running (LocalKafkaBroker.start holds a lock on the directory), and the
# controlling process stops it when the run ends, whatever the outcome.
SHARED_BROKER_DIR = "STREAM_NB_TEST_BROKER_DIR"


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")  # xdist gives its worker processes `workerinput`


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kafka: needs a real local Apache Kafka broker (Java 17+, and Maven on the first run)",
    )
    if _is_controller(config):
        os.environ[SHARED_BROKER_DIR] = tempfile.mkdtemp(prefix="stream-nb-test-broker-")
        # SIGTERM (a CI runner's cancel, `kill`) ends the run as Ctrl-C does, so that
        # pytest_unconfigure still stops the detached broker instead of leaving it running.
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signal_number: int, frame) -> None:
    raise KeyboardInterrupt(f"signal {signal_number}")


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = os.environ.get(SHARED_BROKER_DIR)
    if not _is_controller(config) or directory is None:
        return
    broker_dir = Path(directory) / "kafka"
    if broker_dir.is_dir():
        from stream_nb.kafka.broker import LocalKafkaBroker

        LocalKafkaBroker(broker_dir).stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_broker() -> LocalKafkaBroker:
    """The run's one real Kafka broker, shared by every test process and started on first use;
    `.bootstrap` is "127.0.0.1:<port>". Tests make topics and groups of their own on it."""
    from stream_nb.kafka.broker import LocalKafkaBroker  # only sessions that use Kafka pay

    return LocalKafkaBroker(Path(os.environ[SHARED_BROKER_DIR]) / "kafka").start()


# ---------------------------------------------------------------------------------------------
# No process outlives the test that started it


def _process_tree() -> dict[int, list[tuple[int, bool]]]:
    """parent pid -> [(child pid, whether it leads its own session)] of live processes, from /proc
    (zombies left out: they are already ended)."""
    children: dict[int, list[tuple[int, bool]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        state, parent, session = fields[0], int(fields[1]), int(fields[3])
        if state not in ("Z", "X"):
            children.setdefault(parent, []).append((int(entry.name), session == int(entry.name)))
    return children


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, parents before their children, less the detached ones
    (session leaders, with what runs under them): brokers, which LocalKafkaBroker starts in a
    session of their own to outlive their starter and whose owner stops them, as a module's
    cluster restarts a broker that a test stopped."""
    tree, found, todo = _process_tree(), [], [pid]
    while todo:
        for child, detached in tree.get(todo.pop(), []):
            if not detached:
                found.append(child)
                todo.append(child)
    return found


@pytest.fixture(autouse=True)
def no_process_outlives_its_test() -> Iterator[None]:
    """Kill what a test started and left running, pass or fail: a worker retrying a vanished
    broker (three once did, for 70 minutes), a CLI call whose test timed out. Processes that
    higher-scoped fixtures started before the test, and detached brokers (see `descendants`),
    are their owners' to stop. Each kill is reported as a warning that names the process."""
    before = set(descendants(os.getpid()))
    yield
    left = [pid for pid in descendants(os.getpid()) if pid not in before]
    if not left:
        return
    from stream_nb.kafka.broker import _process_command_line

    named = [f"{pid}: {(_process_command_line(pid) or '?').strip()[:200]}" for pid in left]
    for pid in reversed(left):  # children first, so none is reparented out of sight
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and set(left) & set(descendants(os.getpid())):
        time.sleep(0.05)
    warnings.warn("killed at the test's end, still running: " + "; ".join(named), stacklevel=1)
