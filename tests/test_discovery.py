"""Which broker a command uses: one order for every command (an address someone wrote down before the
local development broker), and one line when nobody answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stream_nb.config import ConfigError, with_bootstrap
from stream_nb.kafka.discovery import Bootstrap, NoBroker, check_reachable, find_bootstrap

SPAM = str(Path(__file__).resolve().parents[1] / "configs" / "spam.toml")


def fake_local_broker(directory: Path, bootstrap: str) -> None:
    """The state `stream-nb kafka start` leaves, for a "broker" that is this test process."""
    directory.mkdir()
    port = int(bootstrap.rsplit(":", 1)[1])
    (directory / "state.json").write_text(json.dumps({"pid": os.getpid(), "port": port, "controller_port": port,
                                                      "bootstrap": bootstrap}))


@pytest.fixture
def listening():
    """A TCP port with a listener (reachable), closed afterwards."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_order_is_command_line_environment_configuration_local_broker(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAM_NB_BOOTSTRAP", raising=False)
    local = tmp_path / ".kafka"
    assert find_bootstrap(None, "conf:1", "c.toml", local) == Bootstrap("conf:1", "kafka.bootstrap_servers in c.toml")
    with pytest.raises(NoBroker, match="no Kafka broker named: pass --bootstrap"):
        find_bootstrap(None, None, "c.toml", local)
    from stream_nb.kafka.broker import LocalKafkaBroker

    monkeypatch.setattr(LocalKafkaBroker, "status",
                        lambda self: type("S", (), {"running": True, "bootstrap": "local:2"})())
    fake_local_broker(local, "local:2")
    assert find_bootstrap(None, None, "c.toml", local) == Bootstrap("local:2", f"the broker `stream-nb kafka start` "
                                                                                f"runs in {local}")
    assert find_bootstrap(None, "conf:1", "c.toml", local) == \
        Bootstrap("conf:1", f"kafka.bootstrap_servers in c.toml; not the local broker at local:2 in {local}")
    assert find_bootstrap(None, "local:2", "c.toml", local) == Bootstrap("local:2", "kafka.bootstrap_servers in c.toml")
    monkeypatch.setenv("STREAM_NB_BOOTSTRAP", "env:3")
    assert find_bootstrap(None, "conf:1", "c.toml", local) == Bootstrap("env:3", "$STREAM_NB_BOOTSTRAP")
    assert find_bootstrap("cli:4", "conf:1", "c.toml", local) == Bootstrap("cli:4", "--bootstrap")


def test_the_shipped_spam_filter_names_no_broker_so_a_checkout_finds_its_local_one(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAM_NB_BOOTSTRAP", raising=False)
    monkeypatch.chdir(tmp_path)
    from stream_nb.kafka.broker import LocalKafkaBroker

    monkeypatch.setattr(LocalKafkaBroker, "status",
                        lambda self: type("S", (), {"running": True, "bootstrap": "127.0.0.1:2"})())
    fake_local_broker(tmp_path / ".kafka", "127.0.0.1:2")
    config, found = with_bootstrap(SPAM, [], None)
    assert found.servers == config.kafka["bootstrap_servers"] == "127.0.0.1:2"
    production = tmp_path / "production.toml"
    production.write_text(Path(SPAM).read_text(encoding="utf-8").replace(
        "[kafka]\n", '[kafka]\nbootstrap_servers = "kafka-1:9092,kafka-2:9092"\n'), encoding="utf-8")
    config, found = with_bootstrap(production, [], None)
    assert found.servers == config.kafka["bootstrap_servers"] == "kafka-1:9092,kafka-2:9092"
    assert found.source == f"kafka.bootstrap_servers in {production}; not the local broker at 127.0.0.1:2 in .kafka"


def test_a_worker_whose_configuration_names_a_broker_does_not_talk_to_the_local_one(tmp_path):
    # a stand-in for the broker `stream-nb kafka start` runs: a live process naming its properties
    local = tmp_path / ".kafka"
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(local / "server.properties")])
    try:
        local_address, configured_address = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        local.mkdir()
        (local / "state.json").write_text(json.dumps({"pid": stand_in.pid, "port": int(local_address.split(":")[1]),
                                                      "controller_port": 1, "bootstrap": local_address}))
        named = tmp_path / "named.toml"
        named.write_text(Path(SPAM).read_text(encoding="utf-8").replace(
            "[kafka]\n", f'[kafka]\nbootstrap_servers = "{configured_address}"\n'), encoding="utf-8")
        environment = {key: value for key, value in os.environ.items() if key != "STREAM_NB_BOOTSTRAP"}
        environment["PYTHONPATH"] = str(Path(SPAM).parents[1])  # this checkout's stream_nb, from any directory
        said = {}
        for config in (named, SPAM):
            done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "run", "--config", str(config)],
                                  capture_output=True, text=True, timeout=60, cwd=tmp_path, env=environment)
            assert done.returncode == 2, done.stderr
            said[config] = done.stderr.strip()
        assert said[named].startswith(f"stream-nb run: no Kafka broker answers at {configured_address} (kafka.bootstrap_servers "
                                      f"in {named}; not the local broker at {local_address} in .kafka) within")
        assert said[SPAM].startswith(f"stream-nb run: no Kafka broker answers at {local_address} (the broker `stream-nb kafka "
                                     "start` runs in .kafka) within")
    finally:
        stand_in.kill()
        stand_in.wait()


def test_a_stopped_local_broker_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAM_NB_BOOTSTRAP", raising=False)
    from stream_nb.kafka.broker import LocalKafkaBroker

    monkeypatch.setattr(LocalKafkaBroker, "status",
                        lambda self: type("S", (), {"running": False, "bootstrap": "local:2"})())
    fake_local_broker(tmp_path / ".kafka", "local:2")
    assert find_bootstrap(None, "conf:1", "c.toml", tmp_path / ".kafka").servers == "conf:1"


def test_set_on_the_command_line_counts_as_the_command_line(monkeypatch):
    monkeypatch.setenv("STREAM_NB_BOOTSTRAP", "env:3")
    config, found = with_bootstrap(SPAM, ['kafka.bootstrap_servers="set:5"'], None)
    assert found == Bootstrap("set:5", "--set kafka.bootstrap_servers")
    config, found = with_bootstrap(SPAM, [], None)
    assert found.servers == config.kafka["bootstrap_servers"] == "env:3"  # written into the configuration
    monkeypatch.setenv("STREAM_NB_BOOTSTRAP", "h:0")
    with pytest.raises(ConfigError, match=r"\$STREAM_NB_BOOTSTRAP: 'h:0' is not host:port"):
        with_bootstrap(SPAM, [], None)


def test_reachable_means_something_listens(listening):
    check_reachable(Bootstrap(listening, "test"), within_s=2)
    port = free_port()
    started = time.monotonic()
    with pytest.raises(NoBroker, match=rf"no Kafka broker answers at 127.0.0.1:{port},127.0.0.1:{port} \(test\) "
                                       r"within 1 s \(Connection refused\)"):
        check_reachable(Bootstrap(f"127.0.0.1:{port},127.0.0.1:{port}", "test"), within_s=1)
    assert time.monotonic() - started < 5  # tried until the deadline, not a client's 30 s


def test_every_command_says_in_one_line_that_nobody_answers(tmp_path):
    (tmp_path / "a.tsv").write_text("ham\thello\n", encoding="utf-8")
    address = f"127.0.0.1:{free_port()}"
    environment = {**os.environ, "STREAM_NB_BOOTSTRAP": address,  # found the way a user would set it
                   "PYTHONPATH": str(Path(SPAM).parents[1])}  # this checkout's stream_nb
    for args in (("run", "--config", SPAM),
                 ("replay", "--topic", "t", "--config", SPAM, "--report", str(tmp_path / "r")),
                 ("publish", str(tmp_path / "a.tsv"), "--topic", "t")):
        done = subprocess.run([sys.executable, "-m", "stream_nb.cli", *args], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env=environment)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and f"no Kafka broker answers at {address} ($STREAM_NB_BOOTSTRAP) within" in lines[0], \
            (args, done.stderr)
