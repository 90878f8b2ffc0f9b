"""The local broker's process bookkeeping, without a JVM: which pid in state.json is its broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from stream_nb.kafka import broker as broker_module
from stream_nb.kafka.broker import LocalKafkaBroker


def with_pid(tmp_path, pid: int) -> LocalKafkaBroker:
    broker = LocalKafkaBroker(tmp_path / "kafka")
    broker.directory.mkdir(parents=True, exist_ok=True)
    (broker.directory / "state.json").write_text(json.dumps({"pid": pid, "port": 1, "controller_port": 2}))
    return broker


def test_a_process_between_exec_and_its_arguments_is_taken_for_the_broker(tmp_path, monkeypatch):
    """Found in a flake run under load: right after the launch, the JVM's /proc cmdline was still
    empty (its new memory is in place before its arguments are), it was taken for a recycled pid,
    the start said 'exited during startup' and a second JVM was started in the same directory."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        broker = with_pid(tmp_path, child.pid)
        monkeypatch.setattr(broker_module, "_process_command_line", lambda pid: "")
        assert broker._running_pid() == child.pid
        # a command line that names another program is a recycled pid, not ours
        monkeypatch.setattr(broker_module, "_process_command_line", lambda pid: "/usr/bin/vim notes.txt")
        assert broker._running_pid() is None
        monkeypatch.setattr(broker_module, "_process_command_line",
                            lambda pid: f"java -cp x kafka.Kafka {broker.properties_path}")
        assert broker._running_pid() == child.pid
    finally:
        child.kill()
        child.wait()
    assert broker._running_pid() is None  # gone


def test_no_pid_or_a_dead_one_is_no_broker(tmp_path):
    assert with_pid(tmp_path, 0)._running_pid() is None
    dead = max(os.getpid(), 2) + 10_000_000  # beyond pid_max: never alive
    assert with_pid(tmp_path, dead)._running_pid() is None
