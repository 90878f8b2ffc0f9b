"""How a worker stops, against a real broker: the one line a clean stop prints (why, what it
did, its final checkpoint), an idle worker fenced by another with its instance id stopping at
once, and a topic with fewer partitions than kafka.partitions said at start."""

from __future__ import annotations

import json
import re
import signal

import pytest

from stream_nb.worker.cli import EXIT_FENCED

from worker_support import (
    Message,
    Topics,
    WorkerProcess,
    committed_offset,
    create_topics,
    labeled_event,
    latest_summary,
    produce,
    read_topic,
    unlabeled_event,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka

STOP_LINE = re.compile(r"stopped \((?P<why>[^)]*)\): (?P<read>\d+) events read, (?P<learned>\d+) learned, "
                       r"(?P<predictions>\d+) predictions and (?P<dead>\d+) dead letters published; "
                       r"final checkpoint (?P<id>\d+) in (?P<path>\S+) at labeled offsets (?P<offsets>.*)$")


def stop_lines(log_path) -> list[re.Match]:
    lines = [line for line in log_path.read_text().splitlines() if "stopped (" in line]
    return [STOP_LINE.search(line) for line in lines]


@pytest.mark.parametrize("stop", ["idle", "SIGTERM", "SIGINT"])
def test_a_clean_stop_says_why_what_was_done_and_which_checkpoint_was_written(kafka_broker, tmp_path, sms, stop,
                                                                              transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("stop")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    messages = []
    for i in range(150):
        label, text = sms[i]
        if i % 3 == 0:
            messages.append(Message(topics.unlabeled, unlabeled_event(f"u{i}", text), f"u{i}".encode()))
        else:
            messages.append(Message(topics.labeled, labeled_event(f"l{i}", text, label), f"l{i}".encode()))
    messages += [Message(topics.unlabeled, b"{not json", b"bad-u"), Message(topics.labeled, b"[]", b"bad-l")]
    produce(bootstrap, messages)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               worker={"labels_first_wait_s": 600}, transport=transport)
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=2 if stop == "idle" else None)
    try:
        if stop != "idle":
            wait_until(lambda: len(read_topic(bootstrap, topics.predictions)) == 50
                       and len(read_topic(bootstrap, topics.dead_letters)) == 2, 120, "every output", worker)
            worker.process.send_signal(getattr(signal, stop))
        assert worker.wait(120) == 0
    finally:
        worker.kill()

    (line,) = stop_lines(worker.log_path)
    assert line is not None, worker.log_tail()
    assert line["why"] == ("idle for 2 s with nothing left to read" if stop == "idle" else stop)
    summary = latest_summary(tmp_path / "checkpoints")
    assert int(line["read"]) == 152
    assert int(line["learned"]) == summary.events_learned > 0
    assert (int(line["predictions"]), int(line["dead"])) == (50, 2)
    assert line["id"] == summary.checkpoint_id
    assert line["path"] == str(tmp_path / "checkpoints" / f"checkpoint-{summary.checkpoint_id}.ckpt")
    assert line["offsets"] == f"{topics.labeled}[0]@101"
    assert summary.offsets == {(topics.labeled, 0): 101}


def test_an_idle_worker_fenced_by_another_with_its_instance_id_stops_at_once(kafka_broker, tmp_path, sms, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("zombie")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    produce(bootstrap, [Message(topics.labeled, labeled_event(f"l{i}", text, label)) for i, (label, text) in
                        enumerate(sms[:100])]
            + [Message(topics.unlabeled, unlabeled_event(f"u{i}", text), f"u{i}".encode())
               for i, (_, text) in enumerate(sms[100:150])])
    group_id = f"group-{topics.labeled[:-8]}"
    # the clients' own timeouts: the zombie must not wait for a session or transaction to expire
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "unused", group_id=group_id,
                               transport=transport)

    def start(directory: str) -> WorkerProcess:
        return WorkerProcess(config_path, tmp_path / f"{directory}.log", stop_when_idle=None,
                             overrides=('worker.instance_id="a"', f'checkpoint.dir="{tmp_path / directory}"'))

    first = start("first")
    second = None
    try:
        wait_until(lambda: committed_offset(bootstrap, group_id, topics.unlabeled) == 50, 120,
                   "every prediction committed", (first,))
        second = start("second")  # one instance id given to two workers: the second takes its place
        wait_until(lambda: "assigns this worker" in (tmp_path / "second.log").read_text(), 60,
                   "the second worker to join", (second,))
        # a deadline on the condition, far below the 49 s the idle zombie went on until the next message
        assert first.wait(25) == EXIT_FENCED, first.log_tail()
        # the second goes on (the zombie's last rejoin may have fenced its consumer: it rejoins)
        produce(bootstrap, [Message(topics.unlabeled, unlabeled_event(f"u{i}", text), f"u{i}".encode())
                            for i, (_, text) in enumerate(sms[150:160], start=50)])
        wait_until(lambda: committed_offset(bootstrap, group_id, topics.unlabeled) == 60, 120,
                   "the second worker's predictions", (second,))
        second.process.terminate()
        assert second.wait(60) == 0, second.log_tail()
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.kill()
    assert (tmp_path / "first.log").read_text().splitlines()[-1].startswith("stream-nb run: fenced")
    ids = [json.loads(record.value)["id"] for record in read_topic(bootstrap, topics.predictions)]
    assert sorted(ids) == sorted(f"u{i}" for i in range(60))  # each once


def test_an_unlabeled_topic_with_fewer_partitions_than_configured_is_said_at_start(kafka_broker, tmp_path, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("fewer")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])  # one partition each
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               transport=transport)
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=1, overrides=("kafka.partitions=6",))
    try:
        assert worker.wait(120) == 0
    finally:
        worker.kill()
    lines = [line for line in worker.log_path.read_text().splitlines() if "kafka.partitions" in line]
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        f"WARNING kafka.partitions = 6, but topic {topics.unlabeled} exists with 1 partition, and the setting applies "
        f"only to topics the worker creates: at most 1 worker of group {group_of(config_path)} can get its events; add "
        f"partitions (kafka-topics.sh --bootstrap-server {bootstrap} --alter --topic {topics.unlabeled} "
        f"--partitions 6) "
        f"or use a new topic"), lines[0]

    # as many partitions as configured, or more: nothing to say; the outputs it creates get 6
    create_topics(bootstrap, [f"{topics.unlabeled}-wide"], partitions=6)
    worker = WorkerProcess(config_path, tmp_path / "wide.log", stop_when_idle=1,
                           overrides=("kafka.partitions=6", f'kafka.unlabeled_topics=["{topics.unlabeled}-wide"]',
                                      f'kafka.predictions_topic="{topics.predictions}-wide"'))
    try:
        assert worker.wait(120) == 0
    finally:
        worker.kill()
    log = worker.log_path.read_text()
    assert "WARNING kafka.partitions" not in log and f"{topics.predictions}-wide (6 partitions)" in log


def group_of(config_path) -> str:
    import tomllib

    return tomllib.loads(config_path.read_text())["kafka"]["group_id"]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_broker_is_away_ends_cleanly_with_its_stop_line(tmp_path, sms, stop):
    """Found in use: Ctrl-C while the worker waited for a broker raised AttributeError ('NoneType'
    object has no attribute 'abort') from the final commit, with no stop line. The clients are
    closed then; the stop writes its checkpoint, says so and exits 0."""
    from stream_nb.kafka.broker import LocalKafkaBroker

    broker = LocalKafkaBroker(tmp_path / "kafka").start()
    worker = None
    try:
        topics = Topics.new("away")
        create_topics(broker.bootstrap, [topics.labeled, topics.unlabeled])
        produce(broker.bootstrap, [Message(topics.labeled, labeled_event(f"l{i}", text, label))
                                   for i, (label, text) in enumerate(sms[:300])])
        config_path = write_config(tmp_path / "worker.toml", broker.bootstrap, topics, tmp_path / "checkpoints",
                                   training={"mode": "all"})
        worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=None)
        wait_until(lambda: "300 learned" in worker.log_path.read_text()
                   or "learned 300," in worker.log_path.read_text(), 120, "the labels learned", worker)
        broker.stop()
        wait_until(lambda: "Kafka unreachable" in worker.log_path.read_text(), 60, "the outage seen", worker)
        worker.process.send_signal(stop)
        assert worker.wait(60) == 0, worker.log_tail()
    finally:
        if worker is not None:
            worker.kill()
        broker.stop()
    log = worker.log_path.read_text()
    assert "Traceback" not in log, log
    assert "stopping while Kafka is unreachable" in log
    (line,) = stop_lines(worker.log_path)
    assert line is not None and line["why"] == stop.name and line["learned"] == "300", log
    assert latest_summary(tmp_path / "checkpoints").events_learned == 300
