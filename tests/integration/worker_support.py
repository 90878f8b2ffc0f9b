"""Helpers for the worker's integration tests against a real Kafka broker.

Topics with unique names, configuration files, producing with chosen timestamps, reading a
topic to its end, the worker as a subprocess (`stream-nb run`), checkpoint summaries and the
model core's answer for the same events (the reference every worker figure is compared with).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from stream_nb.checkpoint import CheckpointError, CheckpointStore, read_checkpoint, state_digest
from stream_nb.config import Config, load_config
from stream_nb.model.registry import model_from_state

REPO_ROOT = Path(__file__).resolve().parents[2]
SPAM_CONFIG = REPO_ROOT / "configs" / "spam.toml"


# ---------------------------------------------------------------------------------------------
# Topics and configuration


@dataclass(frozen=True)
class Topics:
    labeled: str
    unlabeled: str
    predictions: str
    dead_letters: str

    @classmethod
    def new(cls, prefix: str) -> Topics:
        tag = f"{prefix}-{uuid.uuid4().hex[:10]}"
        return cls(f"{tag}-labeled", f"{tag}-unlabeled", f"{tag}-predictions", f"{tag}-dead")

    def outputs(self, suffix: str) -> Topics:
        """The same inputs with outputs of their own (for a second, reference run)."""
        return Topics(self.labeled, self.unlabeled, f"{self.predictions}-{suffix}", f"{self.dead_letters}-{suffix}")


def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="stream-nb-tests")
    try:
        admin.create_topics([NewTopic(name, partitions, 1) for name in names], wait_for_metadata=True)
    finally:
        admin.close()


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string of ASCII text is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):  # an inline table (e.g. a view of [views])
        return "{" + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + "}"
    return repr(value)


def write_config(path: Path, bootstrap: str, topics: Topics, checkpoint_dir: Path, *,
                 group_id: str | None = None, kafka: dict | None = None, client: dict | None = None,
                 checkpoint: dict | None = None, model: dict | None = None, training: dict | None = None,
                 worker: dict | None = None, transport: str = "kafka-python",
                 replace: dict | None = None) -> Path:
    """configs/spam.toml as shipped ([model], [features], [training], [worker], [evaluation]),
    then [kafka], [kafka.client] and [checkpoint] for this test (spam.toml's own [kafka] and
    [checkpoint] are replaced). `training={"mode": "all"}` gives the plain settings; `transport`
    is kafka.transport (the client library); `replace` gives whole tables instead of spam.toml's
    (e.g. {"model": {"kind": "gaussian"}, "features": {}} for a model without text)."""
    spam = tomllib.loads(SPAM_CONFIG.read_text())
    tables = {
        "model": {**spam["model"], **(model or {})},
        "features": spam["features"],
        "training": {**spam["training"], **(training or {})},
        "evaluation": spam["evaluation"],
        "kafka": {
            "bootstrap_servers": bootstrap,
            "group_id": group_id or f"group-{uuid.uuid4().hex[:10]}",
            "labeled_topics": [topics.labeled],
            "unlabeled_topics": [topics.unlabeled],
            "predictions_topic": topics.predictions,
            "dead_letter_topic": topics.dead_letters,
            "transport": transport,
            **(kafka or {}),
        },
        "kafka.client": client or {},
        "checkpoint": {"dir": str(checkpoint_dir), "interval_s": 30.0, "every_events": 0, "keep": 3,
                       **(checkpoint or {})},
        "worker": {**spam["worker"], "log_interval_s": 1.0, "instance_id": f"worker-{uuid.uuid4().hex[:8]}",
                   **(worker or {})},
    }
    tables.update(replace or {})
    lines = []
    for name, table in tables.items():
        if table:
            lines += [f"[{name}]"] + [f"{key} = {_toml(value)}" for key, value in table.items()] + [""]
    path.write_text("\n".join(lines))
    return path


# ---------------------------------------------------------------------------------------------
# Events in and out


def labeled_event(event_id: str, text: str, label) -> bytes:
    return json.dumps({"id": event_id, "text": text, "label": label}, ensure_ascii=False).encode()


def unlabeled_event(event_id: str, text: str) -> bytes:
    return json.dumps({"id": event_id, "text": text}, ensure_ascii=False).encode()


def planned_message(i: int, rows, topics: Topics, labeled_offset: int) -> tuple[Message, str, dict | None]:
    """The i-th message of a test stream over `rows` ((label, text) pairs), keyed by its id, with
    its kind: "labeled" (odd i; the event with its offset on the labeled topic, `labeled_offset`),
    "unlabeled" (even i; {"id", "text"}), or "bad" (every 997th a labeled event the model must
    refuse, every 1009th unlabeled bytes that are not JSON: each must reach the dead letters once)."""
    label, text = rows[i % len(rows)]
    event_id = f"e{i}"
    if i % 997 == 500:
        value = b'{"id":"bad-%d","text":"x","features":{"x":-1},"label":"spam"}' % i
        return Message(topics.labeled, value, event_id.encode()), "bad", None
    if i % 1009 == 700:
        return Message(topics.unlabeled, b"not json %d" % i, event_id.encode()), "bad", None
    if i % 2:
        event = {"id": event_id, "text": text, "label": label, "offset": labeled_offset}
        return Message(topics.labeled, labeled_event(event_id, text, label), event_id.encode()), "labeled", event
    return Message(topics.unlabeled, unlabeled_event(event_id, text), event_id.encode()), "unlabeled", \
        {"id": event_id, "text": text}


@dataclass(frozen=True)
class Message:
    topic: str
    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: tuple = ()
    partition: int | None = None  # None: the key decides


def produce(bootstrap: str, messages: list[Message]) -> None:
    """Send in list order (one producer, so each partition keeps that order) and wait for all."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024,
                             max_request_size=4 * 1024 * 1024, acks="all")
    try:
        futures = [producer.send(m.topic, value=m.value, key=m.key, timestamp_ms=m.timestamp_ms,
                                 headers=list(m.headers) or None, partition=m.partition) for m in messages]
        producer.flush(timeout=120)
        for future in futures:
            future.get(timeout=30)  # raises if any send failed
    finally:
        producer.close(timeout=10)


def produce_null_record(bootstrap: str, topic: str, partition: int = 0) -> None:
    """One record with neither key nor value (`kcat -K x -Z` of an empty line). kafka-python's
    producer refuses to send one; confluent-kafka sends it as Kafka allows."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failures = []
    producer.produce(topic, None, None, partition=partition,
                     on_delivery=lambda error, _message: error and failures.append(error))
    assert producer.flush(30) == 0 and not failures, failures


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0, committed: bool = True) -> list:
    """Every record of every partition of `topic`, from the beginning to its current end offset,
    as a downstream reader sees them: read_committed (records of open or aborted transactions
    are not there), unless `committed=False`. Partitions in order, each in offset order."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=8 * 1024 * 1024,
                             isolation_level="read_committed" if committed else "read_uncommitted")
    try:
        partitions = [TopicPartition(topic, number) for number in sorted(consumer.partitions_for_topic(topic) or [0])]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        consumer.seek_to_beginning(*partitions)
        records: dict = {tp: [] for tp in partitions}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"read {sum(map(len, records.values()))} records of {topic} (ends {ends}) "
                                     f"in {timeout}s")
            for tp, batch in consumer.poll(timeout_ms=500, max_records=5000).items():
                records[tp].extend(batch)
        return [record for tp in partitions for record in records[tp]]
    finally:
        consumer.close()


def predictions_by_id(records: list) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for record in records:
        prediction = json.loads(record.value)
        assert record.key == prediction["id"].encode(), (record.key, prediction["id"])
        found.setdefault(prediction["id"], []).append(prediction)
    return found


def assert_each_output_once(bootstrap: str, topics: Topics, stream) -> dict[str, dict]:
    """What a read_committed reader sees: every unlabeled id predicted exactly once, each from its
    own source record, and every bad message dead-lettered exactly once. `stream` has
    `unlabeled` ({id: text}) and `bad` (the values that must be dead letters)."""
    predictions: dict[str, dict] = {}
    for record in read_topic(bootstrap, topics.predictions, timeout=120):
        prediction = json.loads(record.value)
        assert prediction["id"] not in predictions, f"{prediction['id']} predicted twice"
        assert prediction["source"]["topic"] == topics.unlabeled
        predictions[prediction["id"]] = prediction
    assert set(predictions) == set(stream.unlabeled)
    dead = [record.value for record in read_topic(bootstrap, topics.dead_letters, timeout=60)]
    assert sorted(dead) == sorted(stream.bad)
    return predictions


# ---------------------------------------------------------------------------------------------
# The worker as a subprocess


class WorkerProcess:
    """`python -m stream_nb.cli run --config FILE ...` with stdout+stderr appended to `log_path`.
    One still running at the test's end is killed (tests/conftest.py)."""

    def __init__(self, config_path: Path, log_path: Path, *, stop_when_idle: float | None = 3.0,
                 overrides: tuple[str, ...] = (), log_level: str = "INFO") -> None:
        command = [sys.executable, "-m", "stream_nb.cli", "run", "--config", str(config_path),
                   "--log-level", log_level, *pinned_bootstrap(config_path)]
        for override in overrides:
            command += ["--set", override]
        if stop_when_idle is not None:
            command += ["--stop-when-idle", str(stop_when_idle)]
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            env={**hermetic_environment(), "PYTHONUNBUFFERED": "1"})

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL (no clean-up of any kind) and reap."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"worker did not exit within {timeout}s; log:\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_until(condition, timeout: float, what: str, workers=()) -> None:
    """Poll `condition` until it holds. Fails at once if a worker (one WorkerProcess or several)
    exited other than by the test's own SIGKILL or SIGTERM, and after `timeout` seconds with
    each worker's log tail, so a failure under load says where the worker was."""
    workers = [workers] if isinstance(workers, WorkerProcess) else list(workers)
    deadline = time.monotonic() + timeout
    while not condition():
        for worker in workers:
            if not worker.alive() and worker.process.returncode not in (0, -signal.SIGKILL):
                raise AssertionError(f"a worker exited with {worker.process.returncode} before {what}:\n"
                                     f"{worker.log_tail()}")
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {worker.log_path.name}:\n{worker.log_tail()}" for worker in workers)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")
        time.sleep(0.05)


def end_offset(bootstrap: str, topic: str, committed: bool = False) -> int:
    """The number of offsets a topic holds, summed over its partitions (markers included); with
    `committed`, as a read_committed reader sees it: each partition's last stable offset, which
    stops before a transaction whose markers are not written yet. (A transaction's commit
    returns to its producer once the coordinator has logged it; the markers follow, so for a
    moment after a worker ends its last transaction a reader can find the topic shorter.)"""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap,
                             isolation_level="read_committed" if committed else "read_uncommitted")
    try:
        partitions = [TopicPartition(topic, number) for number in consumer.partitions_for_topic(topic) or ()]
        return sum(consumer.end_offsets(partitions).values())
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group_id: str, topic: str, partition: int = 0) -> int | None:
    """The offset the consumer group `group_id` has committed for a partition (None: none yet,
    or the group's coordinator is not ready to say)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        found = admin.list_group_offsets({group_id: None}).get(group_id, {})
    except KafkaError as error:
        if not error.retriable:
            raise
        return None
    finally:
        admin.close()
    committed = found.get(TopicPartition(topic, partition))
    return None if committed is None or committed.offset < 0 else committed.offset


def error_line(stderr: str) -> str:
    """The one error line of a command that refused to go on: the last line of stderr, and the
    only one that starts with "stream-nb " (INFO log lines of the start may come before it)."""
    lines = stderr.splitlines()
    assert lines and sum(line.startswith("stream-nb ") for line in lines) == 1, lines[-5:]
    assert lines[-1].startswith("stream-nb "), lines[-5:]
    return lines[-1]


def hermetic_environment() -> dict:
    """os.environ without $STREAM_NB_BOOTSTRAP: a test names its broker itself."""
    return {key: value for key, value in os.environ.items() if key != "STREAM_NB_BOOTSTRAP"}


def pinned_bootstrap(config_path) -> list[str]:
    """["--bootstrap", the configuration's kafka.bootstrap_servers], so that a broker a developer
    left running in the checkout's ./.kafka (which comes before the configuration) is not used."""
    try:
        servers = tomllib.loads(Path(config_path).read_text()).get("kafka", {}).get("bootstrap_servers")
    except (OSError, tomllib.TOMLDecodeError):
        return []
    return ["--bootstrap", servers] if isinstance(servers, str) and servers else []


def run_cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """`stream-nb ARGS` from the checkout; a `run --config FILE` talks to the FILE's broker."""
    args = list(args)
    if args[:1] == ["run"] and "--config" in args and "--bootstrap" not in args:
        args += pinned_bootstrap(args[args.index("--config") + 1])
    return subprocess.run([sys.executable, "-m", "stream_nb.cli", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout, env=hermetic_environment())


# ---------------------------------------------------------------------------------------------
# Checkpoints and the reference


def newest_checkpoint_number(directory: Path) -> int:
    """Highest checkpoint id by file name in `directory` (0 when none)."""
    numbers = [int(path.stem.split("-")[1]) for path in CheckpointStore(directory).list()]
    return max(numbers, default=0)


def newest_position(directory: Path) -> tuple[int, dict]:
    """(events learned, labeled offsets) of the newest readable checkpoint in `directory`
    ((0, {}) if none). Tolerates files pruned or replaced while we look: the worker is writing."""
    for path in reversed(CheckpointStore(directory).list()):
        try:
            checkpoint = read_checkpoint(path)
        except (CheckpointError, OSError):
            continue
        return summary_of(checkpoint).events_learned, dict(checkpoint.offsets)
    return 0, {}


def newest_learned(directory: Path) -> int:
    return newest_position(directory)[0]


def newest_offsets(directory: Path) -> dict:
    return newest_position(directory)[1]


@dataclass(frozen=True)
class Summary:
    events_learned: int
    digest: str
    offsets: dict
    checkpoint_id: str


def latest_summary(directory: Path) -> Summary:
    checkpoint = CheckpointStore(directory).load_latest()
    assert checkpoint is not None, f"no valid checkpoint in {directory}"
    return summary_of(checkpoint)


def summary_of(checkpoint) -> Summary:
    # the model's own count: N_c decays when the model forgets (spam.toml's half_life), the events
    # learned do not
    learned = int(round(float(model_from_state(checkpoint.model_state).events_learned)))
    return Summary(learned, state_digest(checkpoint.model_state), dict(checkpoint.offsets), checkpoint.id)


def read_summary(path: Path) -> Summary:
    return summary_of(read_checkpoint(path))


def reference_config(training: dict | None = None, model: dict | None = None) -> Config:
    """The learning configuration of every test: configs/spam.toml as shipped, [training]
    included, or with `training` overriding it (e.g. {"mode": "all"}) and `model` adding to
    its [model] (e.g. {"max_features": 20000})."""
    overrides = [f"training.{key}={_toml(value)}" for key, value in (training or {}).items()]
    overrides += [f"model.{key}={_toml(value)}" for key, value in (model or {}).items()]
    return load_config(SPAM_CONFIG, overrides)


def reference_model(events: list[dict], training: dict | None = None, model: dict | None = None):
    """The model core after learning labeled events {"text", "features", "label"} in order, one
    at a time as the definition says (predict, decide under the training mode, learn)."""
    from stream_nb.model.training import predict_learn

    config = reference_config(training, model)
    model = config.build_model()
    featurizer = config.build_event_featurizer()
    for event in events:
        x = featurizer.transform_one({"text": event.get("text"), "features": event.get("features")})
        predict_learn(model, [x], [event["label"]], **config.training)
    return model


def assert_predictions_reproduced(predictions: dict[str, dict], labeled: list[dict], unlabeled: dict[str, str],
                                  labeled_topic: str, training: dict | None = None) -> int:
    """Each prediction equals, bit for bit, the model core's after learning the labeled log up to
    the offsets the prediction names (what a replay of that prefix gives). `labeled`: the good
    labeled events {"text", "label", "offset"} in offset order; `unlabeled`: id -> text.
    Returns the number of distinct labeled prefixes the predictions were made at."""
    from stream_nb.model.explain import strongest_clues
    from stream_nb.model.training import predict_learn

    config = reference_config(training)
    featurizer = config.build_featurizer()
    by_prefix: dict[int, list[dict]] = {}
    for prediction in predictions.values():
        ((topic, partition, next_offset),) = prediction["model"]["labeled_offsets"]
        assert (topic, partition) == (labeled_topic, 0)
        by_prefix.setdefault(next_offset, []).append(prediction)
    model = config.build_model()
    learned_upto = 0  # index into `labeled`
    for next_offset in sorted(by_prefix):
        while learned_upto < len(labeled) and labeled[learned_upto]["offset"] < next_offset:
            event = labeled[learned_upto]
            predict_learn(model, [featurizer.transform_one(event["text"])], [event["label"]], **config.training)
            learned_upto += 1
        for prediction in by_prefix[next_offset]:
            x = featurizer.transform_one(unlabeled[prediction["id"]])
            expected = model.predict_proba_one(x)
            assert prediction["proba"] == {str(c): p for c, p in expected.items()}, prediction["id"]
            assert prediction["model"]["events_learned"] == int(model.events_learned)
            assert prediction.get("score") == reference_score(model, x, config), prediction["id"]
            if "clues" in prediction:  # the definition: score x again, rank its features
                clues = strongest_clues(model, x, top=config.worker["clues"])
                assert prediction["clues"] == [[name, evidence] for name, evidence in clues], prediction["id"]
    return len(by_prefix)


def reference_score(model, x: dict, config):
    """The "score" a prediction of x carries: s_pos - s_other from the joint log likelihoods, as a
    finite number always (0.0 before any class; +-1e9 for the infinite log-odds while one class
    only is known); None (no field) without a positive class ([evaluation] positive, else spam of
    spam/ham)."""
    joint = model.joint_log_likelihood(x)
    positive = config.evaluation["positive"]
    if positive is None and set(model.classes_) == {"ham", "spam"}:
        positive = "spam"
    if positive is None:
        return None
    if not joint:
        return 0.0
    others = [score for label, score in joint.items() if label != positive]
    if len(others) > 1:
        raise AssertionError("two classes only here")
    if positive not in joint:
        return -1e9
    return joint[positive] - others[0] if others else 1e9


def reference_digest(texts_and_labels: list[tuple[str, object]], training: dict | None = None,
                     model: dict | None = None) -> tuple[str, int]:
    """(state digest, events learned) of the model core after the labeled (text, label) events."""
    return reference_digest_events([{"text": text, "label": label} for text, label in texts_and_labels], training,
                                   model)


def reference_digest_events(events: list[dict], training: dict | None = None,
                            model: dict | None = None) -> tuple[str, int]:
    model = reference_model(events, training, model)
    return state_digest(model.to_state()), int(model.events_learned)


def set_client_quota(bootstrap: str, client_id: str, quota: str, bytes_per_s: int) -> None:
    """A broker quota on a client id (quota: producer_byte_rate or consumer_byte_rate), set with
    Kafka's own ConfigCommand. Slows a worker down on any machine, fast or loaded."""
    import subprocess

    from stream_nb.kafka.broker import resolve_jars

    done = subprocess.run(["java", "-cp", str(resolve_jars() / "*"), "kafka.admin.ConfigCommand",
                           "--bootstrap-server", bootstrap, "--alter", "--add-config",
                           f"{quota}={bytes_per_s}", "--entity-type", "clients", "--entity-name", client_id],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Completed updating config" in done.stdout, done.stdout + done.stderr
