"""Per-key state on partitioned Kafka state ([personal], issue 26 part 2), on a real broker.

The keyed events flow into four labeled and four unlabeled partitions (keyed, so the key decides
the partition). The owners of the labeled partitions forward them into the labeled order, one
partition that every worker learns; workers own the per-key state of the unlabeled partitions the
group gives them and write it to the changelog inside their transactions. Whatever happens to the workers (one
calm worker; or one, then three, then one killed with SIGKILL), each changelog partition, read
back read_committed, holds exactly the state computed here without Kafka from the labeled order
as it was written: each labeled event of the partition's keys decided by its key's model with the
global model of its offset
(stream_nb.model.personal, the same steps as replay), every unlabeled id is predicted once, and
each prediction of a key that has counts is the key's model's, not the global model's.
configs/personal.toml as shipped (mail.toml's [model], [features] and [training]: thick threshold per
sqrt(feature), a per-key budget of 20,000 features).
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
import tomllib
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from keyed_support import changelog_tables, labeled_order, reference_tables

from stream_nb.config import load_config
from stream_nb.kafka.labeled_order import labeled_order_topic
from stream_nb.keyed.changelog import changelog_topic, read_changelog
from stream_nb.worker.keyed import key_partition

from client_matrix import with_client
from corpora import load_spamassassin_2003
from worker_support import (
    Message,
    Topics,
    WorkerProcess,
    create_topics,
    hermetic_environment,
    predictions_by_id,
    produce,
    read_topic,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4
USERS = [f"user-{i}" for i in range(24)]


def keyed_stream(sms, n_labeled: int, n_unlabeled: int, seed: int = 11):
    """Labeled and unlabeled keyed events over the SMS texts, each user with a taste of its own
    (a third of the users call some ham spam), so that per-key counts change predictions."""
    rng = random.Random(seed)
    contrary = set(rng.sample(USERS, len(USERS) // 3))
    labeled, unlabeled = [], []
    for i in range(n_labeled):
        label, text = sms[i]
        key = rng.choice(USERS)
        if key in contrary and label == "ham" and "call" in text.lower():
            label = "spam"
        labeled.append({"id": f"l{i}", "text": text, "label": label, "key": key})
    for i in range(n_unlabeled):
        _, text = sms[n_labeled + i]
        unlabeled.append({"id": f"u{i}", "text": text, "key": rng.choice(USERS)})
    return labeled, unlabeled


def messages(topics: Topics, events: list[dict], labeled: bool) -> list[Message]:
    topic = topics.labeled if labeled else topics.unlabeled
    return [Message(topic, json.dumps(event).encode(), event["key"].encode()) for event in events]


def personal_config(tmp_path: Path, bootstrap: str, topics: Topics, name: str, transport: str,
                    group_id: str, instance: str, *, model: dict | None = None, training: dict | None = None,
                    personal: dict | None = None, views: dict | None = None, client: dict | None = None) -> Path:
    """configs/personal.toml as shipped: mail.toml's [model], [features], [training] and
    [evaluation], its own [personal] (each table updated by the arguments), for this test's
    topics; `views`: [views] (several feature views, each with its keys' counts)."""
    shipped = tomllib.loads((REPO / "configs" / "personal.toml").read_text())["personal"]
    mail = tomllib.loads((REPO / "configs" / "mail.toml").read_text())
    tables = {"model": {**mail["model"], **(model or {})}, "features": mail["features"],
              "training": {**mail["training"], **(training or {})}, "evaluation": mail["evaluation"],
              "personal": {**shipped, **(personal or {})}, **({"views": views} if views else {})}
    return write_config(tmp_path / f"{name}.toml", bootstrap, topics, tmp_path / f"checkpoints-{name}",
                        group_id=group_id, transport=transport, kafka={"partitions": PARTITIONS},
                        worker={"instance_id": instance}, client=client, replace=tables)


def assert_state_is_the_logs(bootstrap: str, config_path: Path, labeled: list[dict], unlabeled: list[dict],
                             predictions: dict[str, dict], tmp_path: Path, complete: bool,
                             labels_before_predictions: bool, users: list[str] = USERS) -> None:
    """The labeled order holds every labeled record once, each key's in its order; each
    changelog partition is the log's state at the labeled offset it names, which is at or past
    every prediction of its keys (their flush was in the predictions' transaction). `complete`:
    every partition's state reflects the whole labeled order (a clean stop with nothing left).
    `labels_before_predictions`: the stream was produced before the workers started."""
    order, log_end = labeled_order(bootstrap, config_path)
    assert sorted(event["id"] for _, event in order if "unlearn" not in event) == sorted(e["id"] for e in labeled)
    for key in users:
        assert ([event["id"] for _, event in order if event["key"] == key and "unlearn" not in event]
                == [event["id"] for event in labeled if event["key"] == key])
    restored = changelog_tables(config_path, tmp_path / "restored", PARTITIONS)
    positions = {p: table.position for p, table in restored.items()}
    by_id = {event["id"]: event for event in unlabeled}
    for prediction in predictions.values():
        ((_, _, named),) = prediction["model"]["labeled_offsets"]
        p = key_partition(by_id[prediction["id"]]["key"], PARTITIONS)
        assert named <= positions[p], (prediction["id"], named, p, positions[p])
    if complete:
        assert positions == {p: log_end for p in range(PARTITIONS)}
    expected, digests, (personal_differs, informed) = reference_tables(
        config_path, order, log_end, tmp_path / "expected", predictions, by_id, positions, PARTITIONS)
    # the keys' own counts did change predictions: at least half of those made when the key had
    # counts; with labels first on a stream produced before the worker starts, that is at least
    # half of all (how many labels a worker scaled mid-stream had learned at each prediction is
    # a matter of timing, and the load on the machine)
    assert informed > 0 and personal_differs >= informed // 2, (personal_differs, informed)
    if labels_before_predictions:
        assert personal_differs >= len(predictions) // 2, (personal_differs, informed)
    assert sum(len(table) for table in expected.values()) == len(users)  # every user has counts
    for p in range(PARTITIONS):
        assert restored[p].digest() == digests[p], f"partition {p}"


def predictions_once(bootstrap: str, topics: Topics, unlabeled: list[dict]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for record in read_topic(bootstrap, topics.predictions, timeout=120):
        prediction = json.loads(record.value)
        assert prediction["id"] not in found, f"{prediction['id']} predicted twice"
        found[prediction["id"]] = prediction
    assert set(found) == {event["id"] for event in unlabeled}
    return found


def run_keyed_stream(tmp_path: Path, bootstrap: str, transport: str, sms, choreography,
                     complete: bool = True, labels_before_predictions: bool = True, stream=None,
                     users: list[str] = USERS, **settings) -> dict[str, dict]:
    """`choreography` runs the workers over the stream's three parts (`stream`: (labeled,
    unlabeled) keyed events of `users`, else 900 and 600 SMS); then every unlabeled id is
    predicted once, each as the key's model at its offset, and the changelog is the log's state.
    `settings`: personal_config's table updates."""
    topics = Topics.new("keyed")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled], partitions=PARTITIONS)
    labeled, unlabeled = stream or keyed_stream(sms, 900, 600)
    group_id = f"keyed-{uuid.uuid4().hex[:8]}"
    configs = [personal_config(tmp_path, bootstrap, topics, f"w{i}", transport, group_id, f"keyed-w{i}", **settings)
               for i in range(3)]
    third_l, third_u = len(labeled) // 3, len(unlabeled) // 3
    parts = [(labeled[:third_l], unlabeled[:third_u]), (labeled[third_l:2 * third_l], unlabeled[third_u:2 * third_u]),
             (labeled[2 * third_l:], unlabeled[2 * third_u:])]
    choreography(SimpleNamespace(tmp_path=tmp_path, bootstrap=bootstrap, topics=topics, configs=configs,
                                 parts=parts, labeled=labeled, unlabeled=unlabeled))
    predictions = predictions_once(bootstrap, topics, unlabeled)
    assert_state_is_the_logs(bootstrap, configs[0], labeled, unlabeled, predictions, tmp_path, complete,
                             labels_before_predictions, users)
    return predictions


def first_worker_on_part_0(run) -> WorkerProcess:
    """The stream's first part produced, and a first worker that owns every partition."""
    produce_part(run, 0)
    log = run.tmp_path / "w0.log"
    first = WorkerProcess(run.configs[0], log, stop_when_idle=None)
    wait_until(lambda: "keyed state of partition 3 restored" in log.read_text(errors="replace"),
               120, "the first worker owning every partition", first)
    return first


def every_label_in_the_order(run, workers: list) -> None:
    """Wait until a read_committed reader of the labeled order sees every label. Predictions do
    not wait for labels, and a worker killed with a transaction open on the order holds every
    reader's view of it back until the broker aborts that transaction (transaction_timeout_ms,
    60 s): seen once under two busy loops, when the order was read at 300 of 900 labels."""
    topic = labeled_order_topic(load_config(run.configs[0], []).require_kafka())
    wait_until(lambda: len(read_topic(run.bootstrap, topic, timeout=60)) >= len(run.labeled), 240,
               "every label in the labeled order", workers)


def produce_part(run, part: int) -> None:
    labeled, unlabeled = run.parts[part]
    produce(run.bootstrap, messages(run.topics, labeled, True))
    produce(run.bootstrap, messages(run.topics, unlabeled, False))


def test_one_calm_worker_writes_the_state_of_the_labeled_log(kafka_broker, sms, tmp_path):
    """With corrections: users press "not spam" / "spam" on 60 of their learned messages and
    take 20 back, after the stream; the changelog is the state of the rules run on the log."""
    bad = {}

    def calm(run):
        for part in range(3):
            produce_part(run, part)
        rng = random.Random(5)
        picked = rng.sample(run.labeled, 80)
        other = {"ham": "spam", "spam": "ham"}
        corrections = [dict(event, label=other[event["label"]], unlearn=event["label"]) for event in picked[:60]]
        corrections += [dict(event, label=None, unlearn=event["label"]) for event in picked[60:]]
        produce(run.bootstrap, messages(run.topics, corrections, True))
        wrong = (key_partition("user-1", PARTITIONS) + 1) % PARTITIONS
        bad.update({  # each must be a dead letter once, with its reason; none changes the state
            b"{not json": ("invalid_json", Message(run.topics.unlabeled, b"{not json", b"user-1")),
            b'{"id": "m1", "text": "hi", "key": "user-1"}': ("misrouted_key", Message(
                run.topics.unlabeled, b'{"id": "m1", "text": "hi", "key": "user-1"}', b"user-1", partition=wrong)),
            b'{"id": "l1", "text": "x", "label": "ham", "unlearn": "ham", "key": "user-2"}': (
                "unlearn_is_label", Message(
                    run.topics.labeled, b'{"id": "l1", "text": "x", "label": "ham", "unlearn": "ham", "key": "user-2"}',
                    b"user-2")),
        })
        produce(run.bootstrap, [message for _, message in bad.values()])
        worker = WorkerProcess(run.configs[0], run.tmp_path / "w0.log", stop_when_idle=3.0)
        assert worker.wait(240) == 0, worker.log_tail()
        dead = read_topic(run.bootstrap, run.topics.dead_letters, timeout=60)
        assert {record.value: dict(record.headers)["stream-nb-reason"].decode() for record in dead} == {
            value: reason for value, (reason, _) in bad.items()}
        assert len(dead) == len(bad)

    predictions = run_keyed_stream(tmp_path, kafka_broker.bootstrap, "kafka-python", sms, calm)
    assert len(predictions) == 600


@pytest.mark.timeout(900)  # minutes of faults and recovery by design; 300 s is the default
@with_client("kafka-python")
def test_workers_scaled_1_3_2_with_a_kill_keep_each_partition_exact(kafka_broker, transport, sms, tmp_path):
    def scaled(run):
        logs = run.tmp_path
        first = first_worker_on_part_0(run)
        others = [WorkerProcess(config, logs / f"w{i}.log", stop_when_idle=None)
                  for i, config in enumerate(run.configs[1:], start=1)]
        workers = [first, *others]
        wait_until(lambda: all("group" in (logs / f"w{i}.log").read_text(errors="replace") for i in (1, 2)),
                   120, "three workers in the group", workers)
        produce_part(run, 1)
        wait_until(lambda: sum((logs / f"w{i}.log").read_text(errors="replace").count("restored from")
                               for i in range(3)) >= 6, 180, "partitions moved to the new workers", workers)
        others[0].kill()  # SIGKILL mid-stream: its partitions move to the two left
        produce_part(run, 2)
        wait_until(lambda: len(read_topic(run.bootstrap, run.topics.predictions, timeout=60)) >= len(run.unlabeled),
                   240, "every unlabeled event predicted", [first, others[1]])
        every_label_in_the_order(run, [first, others[1]])
        for worker in (first, others[1]):
            worker.process.terminate()
            assert worker.wait(120) == 0, worker.log_tail()

    # stopped by SIGTERM as the last predictions come: a worker may not have learned the labels
    # that another forwarded last (its successor would relearn them from its position)
    run_keyed_stream(tmp_path, kafka_broker.bootstrap, transport, sms, scaled, complete=False,
                     labels_before_predictions=False)


def owned_partitions(log: Path) -> set[int]:
    """The unlabeled partitions the worker's last assignment gave it."""
    lines = re.findall(r"assigns this worker (.*)", log.read_text(errors="replace"))
    return {int(p) for p in re.findall(r"-unlabeled\[(\d+)\]", lines[-1])} if lines else set()


@pytest.mark.timeout(600)
def test_a_partition_moved_on_without_its_keys_is_flushed_at_the_labeled_end(kafka_broker, sms, tmp_path):
    """Two workers idle at the labeled order's end E0 have every partition's changelog at E0,
    though a partition's keys may have had no label since its last flush (the order's
    interleaving decides: under load, once, w1's keys all came before w0's, and its partitions
    stayed at 129 of 302 until a flush of their position alone was made due). w1 then stalls
    (SIGSTOP); the labels after E0 are all of w0's users. w1 is killed; w0 takes its partitions
    and relearns them from E0 to its own position E1, which changes none of their keys, only how
    far they go. w0 then stops at once, with its labeled cursor already committed at E1 (its own
    partitions' flush): the changelog of w1's partitions must say E1 all the same (seen missing
    once in the mail deployment's test, where a catch-up run left a partition two labels behind
    the order's end)."""
    probes = iter(range(1_000_000))

    def positions(run) -> dict[int, int]:
        time.sleep(0.5)  # a restore of every partition a probe
        restored = changelog_tables(run.configs[0], run.tmp_path / f"probe-{next(probes)}", PARTITIONS)
        return {p: table.position for p, table in restored.items()}

    def order_end(run, labels: int, workers) -> int:
        """The labeled order's end offset once it holds `labels` labels (its transactions' markers
        take offsets too)."""
        wait_until(lambda: len(labeled_order(run.bootstrap, run.configs[0])[0]) >= labels, 180,
                   f"{labels} labels in the labeled order", workers)
        return labeled_order(run.bootstrap, run.configs[0])[1]

    def stalled(run):
        logs = run.tmp_path
        labeled, unlabeled = run.parts[0]
        produce(run.bootstrap, messages(run.topics, labeled, True) + messages(run.topics, unlabeled, False))
        workers = [WorkerProcess(config, logs / f"w{i}.log", stop_when_idle=None)
                   for i, config in enumerate(run.configs[:2])]
        owners = [logs / "w0.log", logs / "w1.log"]
        wait_until(lambda: all(owned_partitions(log) for log in owners)
                   and owned_partitions(owners[0]) | owned_partitions(owners[1]) == set(range(PARTITIONS)), 180,
                   "two workers sharing the partitions", workers)
        first_end = order_end(run, len(labeled), workers)
        seen: dict = {}

        def flushed_at_first_end() -> bool:
            seen.update(positions(run))
            return set(seen.values()) == {first_end}

        try:
            wait_until(flushed_at_first_end, 180, "every partition flushed at E0", workers)
        except AssertionError as error:  # (say where each stood)
            raise AssertionError(f"E0 {first_end}, the order's end now {labeled_order(run.bootstrap, run.configs[0])[1]}, "
                                 f"the partitions' changelogs at {seen}\n{error}") from None
        # every question answered before w1 stalls: w0 stops once it has relearned w1's partitions,
        # which need not be after it has answered w1's backlog (under load, most of it once)
        wait_until(lambda: len(read_topic(run.bootstrap, run.topics.predictions, timeout=60)) >= len(unlabeled), 180,
                   "every prediction of the first part", workers)
        mine, theirs = owned_partitions(owners[0]), owned_partitions(owners[1])
        workers[1].process.send_signal(signal.SIGSTOP)
        stalled_at = len(owners[0].read_bytes())  # w0's restores from here on are of w1's partitions
        # labels of w0's users only (the stream's next texts, keyed to them)
        users = [user for user in USERS if key_partition(user, PARTITIONS) in mine]
        later = [{**event, "key": users[i % len(users)]} for i, event in enumerate(run.parts[1][0][:30])]
        run.labeled[len(labeled):] = later  # the stream the final checks hold the log to
        del run.unlabeled[len(unlabeled):]
        produce(run.bootstrap, messages(run.topics, later, True))
        end = order_end(run, len(labeled) + len(later), workers[:1])
        wait_until(lambda: all(positions(run)[p] == end for p in mine), 180, "w0's partitions flushed at E1",
                   workers[0])
        workers[1].kill()  # stalled: its partitions go to w0 when its session times out
        # (w0's own partitions may have been restored with a relearning too, when the group gave
        # them to it after it had learned the log: only the restores since w1 stalled count)
        restored = re.compile(r"keyed state of partition (\d) restored from \S+ \(\d+ records, \d+ keys\) at "
                              r"labeled offset (\d+)(?:, relearned to (\d+))?")

        def restores_since_the_stall() -> list[tuple[str, str, str]]:
            return restored.findall(owners[0].read_bytes()[stalled_at:].decode(errors="replace"))

        wait_until(lambda: {int(p) for p, _, _ in restores_since_the_stall()} == theirs, 180,
                   "w0 restoring w1's partitions", workers[0])
        # relearned from E0 to where w0 was then: E1, or short of it when w1's session timed out
        # before w0 had learned the later labels (none at all: restored at E0 with nothing to relearn)
        assert all(int(at) == first_end and (not until or first_end < int(until) <= end)
                   for _, at, until in restores_since_the_stall()), owners[0].read_text()
        workers[0].process.terminate()
        assert workers[0].wait(120) == 0, workers[0].log_tail()

    run_keyed_stream(tmp_path, kafka_broker.bootstrap, "kafka-python", sms, stalled,
                     stream=keyed_stream(sms, 900, 300), client={"session_timeout_ms": 10_000,
                                                                "heartbeat_interval_ms": 1_000})


MAILBOXES = ["enron1", "enron2", "enron3", "enron4", "enron5", "enron6"]


@pytest.mark.timeout(900)
@with_client("confluent-kafka")
def test_enron_mailboxes_learning_everything_recover_exactly_at_real_size(kafka_broker, transport, tmp_path):
    """Issue 33: Enron-Spam's six mailboxes keyed by mailbox, order-free training (mode "all", no
    forgetting) and no per-key budget, so each mailbox's model grows past what one Kafka record
    takes (the issue's workers looped on MessageSizeTooLargeError here). One worker, then two, one
    SIGKILLed: every message predicted once, each partition's changelog the labeled log's state."""
    from stream_nb.replay.corpora import enron_spam

    from corpora import enron_spam_path

    by_box: dict[str, list[dict]] = {box: [] for box in MAILBOXES}
    for event in enron_spam(enron_spam_path(), MAILBOXES):
        box = event["id"].split("/", 1)[0]
        if len(by_box[box]) < 450:
            by_box[box].append(dict(event, key=box))
    mails = [event for turn in zip(*by_box.values()) for event in turn]  # round-robin, 2,700 mails
    labeled = [event for i, event in enumerate(mails) if i % 5]
    unlabeled = [{"id": event["id"], "text": event["text"], "key": event["key"]}
                 for i, event in enumerate(mails) if not i % 5]

    def killed(run):
        logs = run.tmp_path
        first = first_worker_on_part_0(run)
        second = WorkerProcess(run.configs[1], logs / "w1.log", stop_when_idle=None)
        produce_part(run, 1)
        wait_until(lambda: "restored from" in (logs / "w1.log").read_text(errors="replace"), 180,
                   "partitions moved to the second worker", [first, second])
        first.kill()  # SIGKILL mid-stream: its partitions and its open transaction go to the second
        produce_part(run, 2)
        wait_until(lambda: len(read_topic(run.bootstrap, run.topics.predictions, timeout=60)) >= len(unlabeled),
                   360, "every unlabeled event predicted", [second])
        every_label_in_the_order(run, [second])
        second.process.terminate()
        assert second.wait(120) == 0, second.log_tail()

    run_keyed_stream(tmp_path, kafka_broker.bootstrap, transport, None, killed, complete=False,
                     labels_before_predictions=False, stream=(labeled, unlabeled), users=MAILBOXES,
                     model={"half_life": 0}, training={"mode": "all"}, personal={"max_key_features": 0})
    config = load_config(tmp_path / "w1.toml", [])
    kafka = config.require_kafka()
    largest = max(len(value or b"") for p in range(PARTITIONS)
                  for _, value in read_changelog(kafka, config.kafka_client, changelog_topic(kafka), p))
    restored = changelog_tables(tmp_path / "w1.toml", tmp_path / "sizes", PARTITIONS)
    from stream_nb.keyed.codec import encode_key_counts

    whole = max(len(encode_key_counts(table.get(box))) for table in restored.values() for box in MAILBOXES
                if table.get(box) is not None)
    assert whole > 1_048_588 > largest, (whole, largest)  # a mailbox is more than a record; no record is


def test_a_worker_restarted_after_new_labels_reuses_its_stores_and_relearns_from_its_checkpoint(
        kafka_broker, sms, tmp_path):
    def restarted(run):
        log = run.tmp_path / "w0.log"
        produce_part(run, 0)
        worker = WorkerProcess(run.configs[0], log, stop_when_idle=3.0)
        assert worker.wait(240) == 0, worker.log_tail()
        # its final checkpoint and flush: the labeled order's end
        stopped_at = int(re.findall(r"at labeled offsets \S+\[0\]@(\d+)", log.read_text(errors="replace"))[-1])
        # while it is down, labels reach the labeled order (as if another member of the group had
        # forwarded them) and traffic the unlabeled topic
        order_topic = labeled_order_topic(load_config(run.configs[0], []).require_kafka())
        for part in (1, 2):
            labeled, unlabeled = run.parts[part]
            produce(run.bootstrap, [Message(order_topic, message.value, message.key, partition=0)
                                    for message in messages(run.topics, labeled, True)])
            produce(run.bootstrap, messages(run.topics, unlabeled, False))
        first_text = log.read_text(errors="replace")
        worker = WorkerProcess(run.configs[0], log, stop_when_idle=3.0)
        assert worker.wait(240) == 0, worker.log_tail()
        text = log.read_text(errors="replace")[len(first_text):]
        # labels first: at its assignment the worker has learned past its partitions' state
        # its stores closed cleanly: each is restored on from its disk, the changelog's tail (no
        # record: nothing was written since) read from the offset its close recorded
        relearned = re.findall(r"keyed state of partition (\d) restored from a local copy and offset \d+ of \S+ "
                               r"\((\d+) records, \d+ keys\) at labeled offset (\d+), relearned to (\d+) from the "
                               r"checkpoint at labeled offset (\d+)", text)
        assert len(relearned) == PARTITIONS, text
        assert all(records == "0" and int(checkpoint) == stopped_at and int(until) > int(at) >= stopped_at
                   for _, records, at, until, checkpoint in relearned), relearned

    run_keyed_stream(tmp_path, kafka_broker.bootstrap, "kafka-python", sms, restarted)


@pytest.mark.parametrize("made", ["by-the-worker", "labeled-short-and-empty", "labeled-short-with-records"])
def test_a_personal_worker_makes_its_topics_co_partitioned_or_names_the_setting(kafka_broker, sms, tmp_path, made):
    """Found in use: with kafka.partitions = 2 a [personal] worker created the labeled topic with
    1 partition (kafka.labeled_partitions) and then refused it. Now it creates both with 2, adds
    partitions to a short labeled topic that is still empty, and refuses one with records in a
    line that names the setting and the remedy."""
    from kafka import KafkaConsumer

    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("layout")
    if made != "by-the-worker":
        create_topics(bootstrap, [topics.unlabeled], partitions=PARTITIONS)
        create_topics(bootstrap, [topics.labeled], partitions=1)
    labeled, unlabeled = keyed_stream(sms, 200, 50)
    if made == "labeled-short-with-records":
        produce(bootstrap, messages(topics, labeled[:1], True))
    config = personal_config(tmp_path, bootstrap, topics, "w", "kafka-python", f"layout-{uuid.uuid4().hex[:8]}", "w")
    worker = WorkerProcess(config, tmp_path / "w.log", stop_when_idle=3)
    if made == "labeled-short-with-records":
        assert worker.wait(120) == 2, worker.log_tail()
        last = worker.log_path.read_text().splitlines()[-1]
        assert f"must have the unlabeled topic's {PARTITIONS} partitions" in last and "kafka.labeled_partitions" in last
        assert f"must be recreated with {PARTITIONS} partitions" in last, last
        return
    wait_until(lambda: "started: instance" in worker.log_path.read_text(), 120, "the start", worker)
    produce(bootstrap, messages(topics, labeled, True) + messages(topics, unlabeled, False))
    assert worker.wait(240) == 0, worker.log_tail()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        counts = {topic: len(consumer.partitions_for_topic(topic)) for topic in (topics.labeled, topics.unlabeled)}
    finally:
        consumer.close()
    assert counts == {topics.labeled: PARTITIONS, topics.unlabeled: PARTITIONS}
    assert len(predictions_once(bootstrap, topics, unlabeled)) == 50
    log = worker.log_path.read_text()
    assert ("partitions added to the empty topics" in log) is (made == "labeled-short-and-empty")


@pytest.mark.parametrize("keyed_by", ["record-key", "delivered-to"])
def test_per_user_models_take_raw_mail(kafka_broker, sms, tmp_path, keyed_by):
    """Issue 33: [personal] with value_format = "mail" (refused before: "raw mail carries no event
    key"). Each user's mail is keyed by the record key, or by its Delivered-To header (the MTA
    keys the record by the same address); every message is predicted once and each user's counts
    are in the changelog under that user's key."""
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new(f"keyed-mail-{keyed_by}")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled], partitions=PARTITIONS)
    labeled, unlabeled = keyed_stream(sms, 300, 60)

    def raw(event: dict, label: str | None) -> Message:
        user = f"{event['key']}@example.org"
        mail = (f"Delivered-To: {user.upper()}\r\nMessage-ID: <{event['id']}@stream-nb.test>\r\nSubject: sms\r\n\r\n"
                f"{event['text']}\r\n").encode()
        key = user if keyed_by == "delivered-to" else event["key"]
        return Message(topics.labeled if label else topics.unlabeled, mail, key.encode(),
                       headers=(("label", label.encode()),) if label else ())

    produce(bootstrap, [raw(event, event["label"]) for event in labeled] + [raw(event, None) for event in unlabeled])
    config = personal_config(tmp_path, bootstrap, topics, "w", "kafka-python", f"keyed-mail-{uuid.uuid4().hex[:8]}",
                             "w")
    extra = {"value_format": "mail", **({"mail_key_header": "Delivered-To"} if keyed_by == "delivered-to" else {})}
    text = config.read_text().replace("[kafka]\n", "[kafka]\n" + "".join(f'{k} = "{v}"\n' for k, v in extra.items()), 1)
    config.write_text(text)
    worker = WorkerProcess(config, tmp_path / "w.log", stop_when_idle=3)
    assert worker.wait(300) == 0, worker.log_tail()
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert sorted(predictions) == sorted(f"{event['id']}@stream-nb.test" for event in unlabeled)
    assert all(len(copies) == 1 for copies in predictions.values())
    assert read_topic(bootstrap, topics.dead_letters) == []
    tables = changelog_tables(config, tmp_path / "restored", PARTITIONS)
    users = {event["key"] for event in labeled}
    expected = {f"{user}@example.org" if keyed_by == "delivered-to" else user for user in users}
    found = {key for table in tables.values() for key in expected if table.get(key) is not None}
    assert found == expected


def test_per_user_raw_mail_takes_corrections_sent_through_publish_stdin(kafka_broker, tmp_path):
    """Issue 33, the mail system's routes together: raw SpamAssassin mail for four users, learned
    from folders published with `publish --value-format mail --key-header Delivered-To`; then
    users press "spam" / "not spam" on some of it and take some back, each one message piped to
    `publish -` (the message's id is its Message-ID on both routes). A worker with personal.toml
    keyed by Delivered-To predicts every unlabeled message once, stops, and a second one restarts
    on its store and the changelog to take the corrections. Each user's counts are then exactly
    the messages its memory holds, under the labels it holds them as, and no corrected message is
    held under the label taken back."""
    import subprocess
    import sys

    from stream_nb.mail.identity import mail_id
    from stream_nb.replay.prequential import Contender

    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("keyed-mail-routes")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled], partitions=PARTITIONS)
    rng = random.Random(33)
    users = ["ann", "bob", "cid", "dee"]
    corpus, seen = [], set()
    for folder, data in rng.sample(load_spamassassin_2003(), 600):
        user = rng.choice(users)
        data = f"Delivered-To: {user}@Example.org\r\n".encode() + data
        if mail_id(data) not in seen:
            seen.add(mail_id(data))
            corpus.append(("spam" if "spam" in folder else "ham", user, data))
    labeled, unlabeled = corpus[:240], corpus[240:300]
    for name, messages_ in (("labeled", labeled), ("unlabeled", unlabeled)):
        for i, (label, _, data) in enumerate(messages_):
            path = tmp_path / name / label / f"{i:04d}.eml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def publish(*args: str, stdin: bytes | None = None) -> None:
        done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "publish", *args, "--bootstrap", bootstrap,
                               "--value-format", "mail", "--key-header", "Delivered-To"], input=stdin,
                              capture_output=True, timeout=120, env=hermetic_environment())
        assert done.returncode == 0, done.stderr.decode(errors="replace")

    publish(str(tmp_path / "labeled"), "--topic", topics.labeled)
    publish(str(tmp_path / "unlabeled"), "--topic", topics.unlabeled, "--no-label")
    config = personal_config(tmp_path, bootstrap, topics, "w", "kafka-python", f"keyed-routes-{uuid.uuid4().hex[:8]}",
                             "w")
    config.write_text(config.read_text().replace(
        "[kafka]\n", '[kafka]\nvalue_format = "mail"\nmail_key_header = "Delivered-To"\n', 1))
    worker = WorkerProcess(config, tmp_path / "w1.log", stop_when_idle=3)
    assert worker.wait(300) == 0, worker.log_tail()

    other = {"ham": "spam", "spam": "ham"}
    picked = rng.sample(labeled, 10)
    truth = {mail_id(data): label for label, _, data in labeled}
    for label, _, data in picked[:8]:  # "this is spam" / "not spam"
        publish("-", "--topic", topics.labeled, "--label", other[label], "--unlearn", label, stdin=data)
        truth[mail_id(data)] = other[label]
    for label, _, data in picked[8:]:  # taken back, nothing learned in its place
        publish("-", "--topic", topics.labeled, "--unlearn", label, stdin=data)
        del truth[mail_id(data)]
    worker = WorkerProcess(config, tmp_path / "w2.log", stop_when_idle=3)
    assert worker.wait(300) == 0, worker.log_tail()

    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert sorted(predictions) == sorted(mail_id(data) for _, _, data in unlabeled)
    assert all(len(copies) == 1 for copies in predictions.values())
    assert read_topic(bootstrap, topics.dead_letters) == []
    loaded = load_config(config, [])
    model = loaded.build_model()
    featurise = Contender("c", model, loaded.build_featurizer(), loaded.build_event_featurizer()).featurise_one
    raw = {mail_id(data): data for _, _, data in labeled}
    tables = changelog_tables(config, tmp_path / "restored", PARTITIONS)
    held, corrected_held = 0, 0
    for user in users:
        key = f"{user}@example.org"
        (own,) = [table.get(key) for table in tables.values() if table.get(key) is not None]
        classes = tables[key_partition(key, PARTITIONS)].classes
        expected = {}
        class_counts = dict.fromkeys(classes, 0.0)
        for event_id, (c, _) in own.learned.items():
            if c < 0:
                continue
            label = classes[c]
            assert truth.get(event_id) == label, (user, event_id)  # never under a label taken back
            held += 1
            corrected_held += any(mail_id(data) == event_id for _, _, data in picked[:8])
            class_counts[label] += 1.0
            for name, value in featurise({"mail": raw[event_id]}).items():
                expected.setdefault(name, dict.fromkeys(classes, 0.0))[label] += value
        rows = {name: dict(zip(classes, row)) for name, row in own.features.items() if any(row)}
        assert rows == expected, user
        assert dict(zip(classes, own.class_counts)) == class_counts, user
    assert held > 40 and corrected_held > 0, (held, corrected_held)
