"""docker/ as far as this machine can check it without a Docker engine: what the compose file asks
the worker to run is a command stream-nb accepts, and the settings the issue found wrong stay right."""

from __future__ import annotations

import json
import re
from pathlib import Path

from stream_nb.cli import build_parser
from stream_nb.config import with_bootstrap

DOCKER = Path(__file__).resolve().parents[1] / "docker"
REPO = DOCKER.parent


def service(name: str) -> str:
    """The text of one service of compose.yaml (two-space indented under services:)."""
    text = (DOCKER / "compose.yaml").read_text()
    start = text.index(f"\n  {name}:\n")
    following = re.search(r"\n  [a-z][\w-]*:\n|\n[a-z]", text[start + 1:])
    return text[start: start + 1 + following.start()] if following else text[start:]


def test_the_worker_command_of_compose_is_one_stream_nb_accepts():
    block = service("worker")
    command = block[block.index("    command:\n"):]
    args = []
    for line in command.splitlines()[1:]:
        if line.strip().startswith("#"):
            continue
        if not line.startswith("      - "):
            break
        args.append(line[len("      - "):])
    parsed = build_parser().parse_args(args)
    assert parsed.command == "run"
    config_path = REPO / "configs" / Path(parsed.config).name  # /app/configs is the repository's configs/
    config, bootstrap = with_bootstrap(config_path, parsed.set, parsed.bootstrap)
    assert (bootstrap.servers, bootstrap.source) == ("kafka:9092", "--set kafka.bootstrap_servers")
    assert (config.worker["metrics_port"], config.worker["metrics_host"]) == (9100, "0.0.0.0")
    assert config.kafka["partitions"] == 6


def test_the_worker_healthcheck_asks_healthz_on_the_metrics_port():
    block = service("worker")
    test = json.loads(re.search(r"healthcheck:\n\s+#[^\n]*\n(?:\s+#[^\n]*\n)*\s+test: (\[.*\])", block).group(1))
    assert test[:3] == ["CMD", "python", "-c"] and "http://127.0.0.1:9100/healthz" in test[3]


def test_the_broker_settings_the_review_found_wrong():
    block = service("kafka")
    assert "HOST://127.0.0.1:9094" in block and "localhost" not in block.split("KAFKA_ADVERTISED_LISTENERS")[1].split("\n")[0]
    healthcheck = block[block.index("healthcheck:"):]
    assert "KAFKA_HEAP_OPTS='-Xms16m -Xmx64m'" in healthcheck  # not the broker's 256-512 MB heap per check
    assert "interval: 30s" in healthcheck


def test_the_dockerfile_does_not_offer_a_demo_that_needs_java():
    text = (DOCKER / "Dockerfile").read_text()
    assert "demo --no-kafka" in text
    assert not re.search(r"docker run --rm stream-nb demo(?! --no-kafka)", text)


def dockerfile_instruction(name: str) -> str:
    """The argument of one instruction of the Dockerfile, continuation lines joined."""
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    return re.search(rf"^{name} (.*)$", text, re.MULTILINE).group(1)


def test_the_default_command_keeps_checkpoints_per_container_in_the_declared_volume():
    command = json.loads(dockerfile_instruction("CMD"))
    parsed = build_parser().parse_args(command)
    assert parsed.command == "run"
    config, bootstrap = with_bootstrap(REPO / "configs" / Path(parsed.config).name, parsed.set, parsed.bootstrap)
    assert bootstrap.servers == "kafka:9092"
    # as compose.yaml and docker/README say: one directory per container, under the volume
    assert config.checkpoint["dir"] == "/data/checkpoints/{instance_id}"
    assert 'checkpoint.dir="/data/checkpoints/{instance_id}"' in service("worker")
    assert "`/data/checkpoints/<host name>`" in (DOCKER / "README.md").read_text()
    assert json.loads(dockerfile_instruction("VOLUME")) == ["/data"]
