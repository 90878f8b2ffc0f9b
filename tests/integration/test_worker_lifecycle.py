"""How a worker stops, against a real broker: the one line a clean stop prints (why, what it
did, its final checkpoint), an idle worker fenced by another with its instance id stopping at
once, and a topic with fewer partitions than kafka.partitions said at start."""

from __future__ import annotations

import json
import re
import signal

import pytest

from worker_support import (
    Message,
    Topics,
    WorkerProcess,
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
