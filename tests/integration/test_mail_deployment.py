"""The mail filter a company deploys (issue 33), end to end on the three-broker cluster.

Raw mail (`[kafka] value_format = "mail"`) for four users, per-user models keyed by the
Delivered-To header (configs/personal.toml as shipped: mail.toml's three feature views, each
with per-user counts), two workers. Mail is learned
from folders published with `stream-nb publish --value-format mail --key-header Delivered-To`;
users press "spam" / "not spam" and take messages back, each one message piped to `publish -`
(one id on both routes: the Message-ID). The operator raised the input topics to 4 MiB: each
topic gets a 1,048,400-byte message and a 3 MB one. Meanwhile a worker is killed with SIGKILL and
the leader of a labeled partition is killed and restarted.

At the end: every unlabeled message is predicted exactly once for read_committed readers (the
large ones too, flagged "truncated" past the 1 MiB the parser reads); nothing is dead-lettered;
each changelog partition holds exactly the state of the rules run on the labeled order as the
workers wrote it (stream_nb.lessons, each key's own memory), and every prediction is its key's
model at the labeled offset it names.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from cluster_support import kill_and_restart, topic_settings, whole
from kafka.admin import KafkaAdminClient, NewTopic
from keyed_support import changelog_tables, reference_tables

from stream_nb.config import load_config
from stream_nb.events import SourcePosition
from stream_nb.events.raw_mail import decoder_for
from stream_nb.features.mail import MailFeaturizer
from stream_nb.kafka.labeled_order import labeled_order_topic
from stream_nb.mail.identity import mail_id
from stream_nb.mail.parse import DEFAULT_MAX_BYTES as READ
from stream_nb.worker.keyed import key_partition

from corpora import load_spamassassin_2003
from worker_support import (
    Topics,
    WorkerProcess,
    end_offset,
    hermetic_environment,
    predictions_by_id,
    read_topic,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("three-broker-cluster")]

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 2
USERS = ["ann", "bob", "cid", "dee"]
RAISED = 4 * 1024 * 1024  # the operator's max.message.bytes for mail topics
AT_THE_LIMIT = 1_048_400  # what a default topic takes
FAST_CLIENT = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 1_000}
OTHER = {"ham": "spam", "spam": "ham"}


def delivered(user: str, data: bytes) -> bytes:
    return f"Delivered-To: {user}@Example.org\r\n".encode() + data


def large_mail(user: str, label: str, size: int) -> bytes:
    line = (b"win cash prize now free offer click here\r\n" if label == "spam"
            else b"meeting agenda lunch tomorrow project notes\r\n")
    head = delivered(user, f"Message-ID: <large-{label}-{size}@example.org>\r\nSubject: {label} "
                           f"{size}\r\nFrom: a@example.com\r\n\r\n".encode())
    return (head + line * ((size - len(head)) // len(line) + 1))[:size]


def write_folder(directory: Path, messages: list[tuple[str, str, bytes]]) -> Path:
    for i, (label, _, data) in enumerate(messages):
        path = directory / label / f"{i:04d}.eml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return directory


def publish(bootstrap: str, *args: str, stdin: bytes | None = None) -> None:
    done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "publish", *args, "--bootstrap", bootstrap,
                           "--value-format", "mail", "--key-header", "Delivered-To", "--max-bytes", str(RAISED)],
                          input=stdin, capture_output=True, timeout=180, env=hermetic_environment())
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def deployment_config(tmp_path: Path, bootstrap: str, topics: Topics) -> Path:
    """configs/personal.toml as shipped (mail.toml's tables, its three views, and [personal]), raw
    mail keyed by Delivered-To, replicated three times."""
    shipped = tomllib.loads((REPO / "configs" / "personal.toml").read_text())["personal"]
    mail = tomllib.loads((REPO / "configs" / "mail.toml").read_text())
    tables = {name: mail[name] for name in ("model", "features", "training", "evaluation", "views")}
    return write_config(tmp_path / "deploy.toml", bootstrap, topics, tmp_path / "unused",
                        group_id=f"deploy-{os.urandom(4).hex()}", client=FAST_CLIENT,
                        kafka={"partitions": PARTITIONS, "replication_factor": 3, "value_format": "mail",
                               "mail_key_header": "Delivered-To"},
                        checkpoint={"interval_s": 1.0}, replace={**tables, "personal": shipped})


@pytest.mark.timeout(1200)  # a broker killed and restarted, a worker killed, three topics of mail
def test_the_mail_deployment_end_to_end(cluster, tmp_path):
    bootstrap = whole(cluster).bootstrap
    topics = Topics.new("deploy")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        raised = {"max.message.bytes": str(RAISED), "min.insync.replicas": "2"}
        admin.create_topics([NewTopic(topics.labeled, PARTITIONS, 3, topic_configs=raised),
                             NewTopic(topics.unlabeled, PARTITIONS, 3, topic_configs=raised)], wait_for_metadata=True)
    finally:
        admin.close()
    rng = random.Random(2033)
    corpus, seen = [], set()
    for folder, data in rng.sample(load_spamassassin_2003(), 500):
        user = rng.choice(USERS)
        data = delivered(user, data)
        if mail_id(data) not in seen:
            seen.add(mail_id(data))
            corpus.append(("spam" if "spam" in folder else "ham", user, data))
    first, second = corpus[:150], corpus[150:250]
    questions = [corpus[250:290], corpus[290:330]]
    first += [("spam", "ann", large_mail("ann", "spam", AT_THE_LIMIT)), ("ham", "bob", large_mail("bob", "ham", 3_000_000))]
    questions[0] += [("ham", "cid", large_mail("cid", "ham", AT_THE_LIMIT)),
                     ("spam", "dee", large_mail("dee", "spam", 3_000_000))]

    config = deployment_config(tmp_path, bootstrap, topics)
    publish(bootstrap, str(write_folder(tmp_path / "labeled-1", first)), "--topic", topics.labeled)
    publish(bootstrap, str(write_folder(tmp_path / "unlabeled-1", questions[0])), "--topic", topics.unlabeled,
            "--no-label")
    logs = tmp_path / "logs"
    logs.mkdir()

    def worker(name: str, stop_when_idle: float | None = None) -> WorkerProcess:
        return WorkerProcess(config, logs / f"{name}.log", stop_when_idle=stop_when_idle,
                             overrides=(f'worker.instance_id="{name}"', f'checkpoint.dir="{tmp_path / name}"'))

    def predicted() -> int:
        return len(predictions_by_id(read_topic(bootstrap, topics.predictions, timeout=30)))

    truth = {mail_id(data): label for label, _, data in first + second}

    def correct(messages: list[tuple[str, str, bytes]], take_back: int) -> None:
        """Users press "spam" / "not spam" on `messages` (the last `take_back` only taken back)."""
        for n, (label, _, data) in enumerate(messages):
            learned_as = OTHER[label] if mail_id(data) in corrected else label
            if n < len(messages) - take_back:
                publish(bootstrap, "-", "--topic", topics.labeled, "--label", OTHER[learned_as], "--unlearn",
                        learned_as, stdin=data)
                truth[mail_id(data)] = OTHER[learned_as]
                corrected.add(mail_id(data))
            else:
                publish(bootstrap, "-", "--topic", topics.labeled, "--unlearn", learned_as, stdin=data)
                del truth[mail_id(data)]

    corrected: set[str] = set()
    workers = {"a": worker("a"), "b": worker("b")}
    try:
        # (a reader of the predictions topic before the worker made it would have the broker make it
        # with the broker's defaults)
        wait_until(lambda: all("assigns this worker" in (logs / f"{name}.log").read_text() for name in workers), 180,
                   "both workers in the group", workers.values())
        wait_until(lambda: predicted() >= len(questions[0]), 300, "the first questions predicted", workers.values())
        settings = topic_settings(bootstrap, [topics.predictions, topics.dead_letters])  # the worker's own
        assert set(settings.values()) == {(3, "2")}, settings
        picked = rng.sample(first[:150], 5)
        correct(picked, take_back=1)
        workers["b"].kill()  # SIGKILL: its partitions and open transaction go to the other
        kill_and_restart(cluster, cluster.leader_of(topics.labeled, 0), down_s=8.0)
        publish(bootstrap, str(write_folder(tmp_path / "labeled-2", second)), "--topic", topics.labeled)
        publish(bootstrap, str(write_folder(tmp_path / "unlabeled-2", questions[1])), "--topic", topics.unlabeled,
                "--no-label")
        correct([picked[0], *rng.sample(second, 4)], take_back=1)  # the first corrected again: back to its label
        # the killed "b" may have logged several assignments (rebalances under load): the restarted
        # one is in the group at its own first, which it logs with its stop handlers in place
        assigned_before = (logs / "b.log").read_text().count("assigns this worker")
        workers["b"] = worker("b")
        wait_until(lambda: (logs / "b.log").read_text().count("assigns this worker") > assigned_before, 180,
                   "the restarted worker in the group", workers.values())
        wait_until(lambda: predicted() >= sum(map(len, questions)), 300, "every question predicted",
                   workers.values())
        for running in workers.values():
            running.process.terminate()
            assert running.wait(60) == 0, running.log_tail()
        last = worker("a", stop_when_idle=3.0)  # alone: learns the labeled order to its end, flushes, stops
        assert last.wait(300) == 0, last.log_tail()
    finally:
        for running in workers.values():
            running.kill()

    # every question predicted exactly once; the large ones on what the parser reads
    by_id = predictions_by_id(read_topic(bootstrap, topics.predictions))
    asked = {mail_id(data): (user, data) for batch in questions for _, user, data in batch}
    assert sorted(by_id) == sorted(asked)
    twice = {event_id: [(copy["source"], copy.get("model")) for copy in copies]
             for event_id, copies in by_id.items() if len(copies) > 1}
    assert not twice, f"predicted more than once (source, model): {twice}"
    predictions = {event_id: copies[0] for event_id, copies in by_id.items()}
    for event_id, (_, data) in asked.items():
        assert predictions[event_id].get("truncated", False) is (len(data) > READ), event_id
    assert read_topic(bootstrap, topics.dead_letters) == []

    # each changelog partition: the rules run on the labeled order, to the bit
    loaded = load_config(config, [])
    kafka = loaded.require_kafka()
    order_topic = labeled_order_topic(kafka)
    decode = decoder_for(kafka, labeled=True, classes=frozenset(loaded.classes), keyed=True)
    order = []
    # (the last worker's last transaction is committed; its markers may still be on their way)
    wait_until(lambda: end_offset(bootstrap, order_topic, committed=True) == end_offset(bootstrap, order_topic), 120,
               "the labeled order's transactions settled")
    for record in read_topic(bootstrap, order_topic, timeout=120):
        event = decode(record.value, record.key, record.headers, SourcePosition(order_topic, 0, record.offset))
        assert not hasattr(event, "reason"), event
        order.append((record.offset, {"id": event.id, "key": event.key, "label": event.label,
                                      "unlearn": event.unlearn, "mail": event.mail}))
    assert len(order) == len(first) + len(second) + 10  # every label and correction once
    assert sum(event["unlearn"] is not None for _, event in order) == 10
    log_end = end_offset(bootstrap, order_topic)
    restored = changelog_tables(config, tmp_path / "restored", PARTITIONS)
    positions = {p: table.position for p, table in restored.items()}
    assert positions == {p: log_end for p in range(PARTITIONS)}
    assert loaded.view_names == ["base", "chars", "words"]
    reader = MailFeaturizer(loaded.build_event_featurizer())  # one parse a message, every view reads it
    featurizers = [reader, *(MailFeaturizer(loaded.build_event_featurizer(view), reader=reader) for view in loaded.views)]
    unlabeled = {event_id: {"key": f"{user}@example.org", "mail": data} for event_id, (user, data) in asked.items()}
    expected, digests, (differs, informed) = reference_tables(
        config, order, log_end, tmp_path / "expected", predictions, unlabeled, positions, PARTITIONS,
        features=lambda event: [featurizer.transform_one(event["mail"]) for featurizer in featurizers])
    for p in range(PARTITIONS):
        assert restored[p].digest() == digests[p], f"partition {p}"
    assert informed > 0 and differs > 0, (differs, informed)  # the users' own counts decided some verdicts
    # no user's counts hold a corrected message under the label taken back
    for user in USERS:
        key = f"{user}@example.org"
        for table in restored[key_partition(key, PARTITIONS)].views:  # each view's counts of the user
            own = table.get(key)
            for event_id, (c, _) in own.learned.items():
                if c >= 0:
                    assert truth[event_id] == table.classes[c], (user, event_id)
