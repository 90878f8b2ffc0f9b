"""Topics that change under the worker, and checkpoints that count only labeled events: each a
finding of a reliability probe on a real broker, kept as a regression test.

- A labeled topic deleted and created again while the worker was down: never a silent skip.
- Partitions added to running topics: read, and the lag says so.
- A topic deleted under a running worker: no crash.
- Count-only checkpoints with unlabeled traffic only: outputs are still committed as they go.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions

from worker_support import (
    Message,
    Topics,
    WorkerProcess,
    committed_offset,
    create_topics,
    error_line,
    labeled_event,
    latest_summary,
    newest_offsets,
    predictions_by_id,
    produce,
    read_topic,
    reference_digest_events,
    run_cli,
    set_client_quota,
    unlabeled_event,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka


def labeled_messages(topic: str, rows, start: int, count: int, partition: int | None = None) -> tuple[list, list]:
    events = [{"id": f"l{i}", "text": rows[i % len(rows)][1], "label": rows[i % len(rows)][0]}
              for i in range(start, start + count)]
    return events, [Message(topic, labeled_event(e["id"], e["text"], e["label"]), e["id"].encode(), partition=partition)
                    for e in events]


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()


def recreate_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> None:
    """Create `topic` again once its deletion has gone through."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            create_topics(bootstrap, [topic])
            return
        except Exception:  # still being deleted
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_labeled_topic_recreated_while_the_worker_was_down_is_never_silently_skipped(kafka_broker, tmp_path, sms, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("recreate")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    before, messages = labeled_messages(topics.labeled, sms, 0, 4_000)
    produce(bootstrap, messages)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints", transport=transport)
    first = run_cli("run", "--config", str(config_path), "--stop-when-idle", "1")
    assert first.returncode == 0, first.stderr
    assert latest_summary(tmp_path / "checkpoints").offsets == {(topics.labeled, 0): 4_000}

    delete_topic(bootstrap, topics.labeled)
    recreate_topic(bootstrap, topics.labeled)
    after, messages = labeled_messages(topics.labeled, sms, 4_000, 6_000)
    produce(bootstrap, messages)

    refused = run_cli("run", "--config", str(config_path), "--stop-when-idle", "1")
    assert refused.returncode == 2
    line = error_line(refused.stderr)
    assert re.match(rf"stream-nb run: labeled topic {topics.labeled} was deleted and created again "
                    r"\(topic id [\w-]+ -> [\w-]+\); refusing to go on", line), line
    assert 'kafka.on_lost_position = "from_beginning"' in line
    assert latest_summary(tmp_path / "checkpoints").offsets == {(topics.labeled, 0): 4_000}  # nothing changed

    anew = run_cli("run", "--config", str(config_path), "--set", 'kafka.on_lost_position="from_beginning"',
                   "--stop-when-idle", "1")
    assert anew.returncode == 0, anew.stderr
    summary = latest_summary(tmp_path / "checkpoints")
    assert summary.offsets == {(topics.labeled, 0): 6_000}
    # all 6,000 new events on top of the 4,000 old ones (the probe found 4,000 of them skipped)
    assert (summary.digest, summary.events_learned) == reference_digest_events(before + after)


def test_partitions_added_to_running_topics_are_read(kafka_broker, tmp_path, sms, transport):
    # Under load kafka-python 3.0.12 dropped the rebalance the added partitions asked for (see
    # kafka/clients.py, _finish_rebalances_left_pending): no unlabeled record of them was read.
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("grow")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled], partitions=2)
    # several labeled partitions: learning every event, without spam.toml's forgetting (its decay
    # would make the state depend on how the partitions interleave)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               training={"mode": "all"}, model={"half_life": 0}, checkpoint={"interval_s": 0.5},
                               transport=transport)
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(config_path, log_path, stop_when_idle=None)
    try:
        first, messages = labeled_messages(topics.labeled, sms, 0, 1_000)
        produce(bootstrap, messages)
        wait_until(lambda: sum(newest_offsets(tmp_path / "checkpoints").values()) == 1_000, 60, "the first events", worker)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_partitions({topics.labeled: NewPartitions(3), topics.unlabeled: NewPartitions(3)})
        finally:
            admin.close()
        added, messages = labeled_messages(topics.labeled, sms, 1_000, 1_300, partition=2)
        unlabeled = {f"u{i}": sms[i][1] for i in range(1_300)}
        produce(bootstrap, messages + [Message(topics.unlabeled, unlabeled_event(event_id, text), event_id.encode(),
                                               partition=2) for event_id, text in unlabeled.items()])
        wait_until(lambda: newest_offsets(tmp_path / "checkpoints").get((topics.labeled, 2)) == 1_300
                   and len(read_topic(bootstrap, topics.predictions)) >= 1_300, 180,
                   "the added partitions to be read", worker)

        def last_progress_line() -> str:
            return ([line for line in log_path.read_text().splitlines() if ", lag " in line] or [""])[-1]

        # the lag it reports counts the added partitions, and comes down to 0 (a progress line
        # every log_interval_s, whenever the loaded worker gets to it)
        wait_until(lambda: ", lag 0," in last_progress_line(), 60, "a progress line with lag 0", worker)
        worker.process.terminate()
        assert worker.wait(60) == 0, worker.log_tail()
    finally:
        worker.kill()
    summary = latest_summary(tmp_path / "checkpoints")
    assert (summary.digest, summary.events_learned) == reference_digest_events(first + added, {"mode": "all"}, {"half_life": 0})
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert set(predictions) == set(unlabeled) and all(len(copies) == 1 for copies in predictions.values())
    assert {copies[0]["source"]["partition"] for copies in predictions.values()} == {2}


def test_partitions_added_under_spam_toml_unlabeled_are_read_labeled_stop_the_worker(kafka_broker, tmp_path, sms,
                                                                                        transport):
    # spam.toml as shipped: thick-threshold training needs the labeled log in one partition, so a
    # partition added to the labeled topic stops the worker with one line (exit 2); one added to
    # the unlabeled topic is read like the others.
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("grow-spam")
    create_topics(bootstrap, [topics.labeled])
    create_topics(bootstrap, [topics.unlabeled], partitions=2)
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               checkpoint={"interval_s": 0.5}, transport=transport)
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(config_path, log_path, stop_when_idle=None)
    try:
        first, messages = labeled_messages(topics.labeled, sms, 0, 1_000)
        produce(bootstrap, messages)
        wait_until(lambda: sum(newest_offsets(tmp_path / "checkpoints").values()) == 1_000, 60, "the first events", worker)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_partitions({topics.unlabeled: NewPartitions(3)})
            unlabeled = {f"u{i}": sms[i][1] for i in range(1_300)}
            produce(bootstrap, [Message(topics.unlabeled, unlabeled_event(event_id, text), event_id.encode(),
                                        partition=2) for event_id, text in unlabeled.items()])
            wait_until(lambda: len(read_topic(bootstrap, topics.predictions)) >= 1_300, 180,
                       "the added unlabeled partition to be read", worker)
            admin.create_partitions({topics.labeled: NewPartitions(2)})
        finally:
            admin.close()
        assert worker.wait(120) == 2, worker.log_tail()
    finally:
        worker.kill()
    assert error_line(log_path.read_text()).startswith(
        f"stream-nb run: kafka.labeled_topics: 2 labeled partitions ({topics.labeled} (2)), but training.mode is "
        f"order-dependent and needs one partition in total")
    summary = latest_summary(tmp_path / "checkpoints")
    assert (summary.digest, summary.events_learned) == reference_digest_events(first)
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert set(predictions) == set(unlabeled) and all(len(copies) == 1 for copies in predictions.values())
    assert {copies[0]["source"]["partition"] for copies in predictions.values()} == {2}


def test_a_topic_deleted_under_a_running_worker_does_not_crash_it(kafka_broker, tmp_path, sms, transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("vanish")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    labeled, messages = labeled_messages(topics.labeled, sms, 0, 500)
    produce(bootstrap, messages + [Message(topics.unlabeled, unlabeled_event(f"u{i}", sms[i][1]), f"u{i}".encode())
                                   for i in range(200)])
    log_path = tmp_path / "worker.log"
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               checkpoint={"interval_s": 0.5}, transport=transport)
    worker = WorkerProcess(config_path, log_path, stop_when_idle=None)
    try:
        wait_until(lambda: len(read_topic(bootstrap, topics.predictions)) == 200, 60, "the predictions", worker)
        lines_before = log_path.read_text().count("/s), learned ")
        delete_topic(bootstrap, topics.unlabeled)
        # several progress lines after the deletion (each asks for the lag of the vanished topic)
        wait_until(lambda: log_path.read_text().count("/s), learned ") >= lines_before + 5, 60,
                   "five progress lines after the deletion", worker)
        assert worker.alive(), worker.log_tail()
        more, messages = labeled_messages(topics.labeled, sms, 500, 300)
        produce(bootstrap, messages)  # it still learns
        wait_until(lambda: newest_offsets(tmp_path / "checkpoints") == {(topics.labeled, 0): 800}, 60, "the later labels", worker)
        worker.process.terminate()
        assert worker.wait(60) == 0, worker.log_tail()
    finally:
        worker.kill()
    log = log_path.read_text()
    assert "Traceback" not in log and "KeyError" not in log, log[-3000:]
    summary = latest_summary(tmp_path / "checkpoints")
    assert (summary.digest, summary.events_learned) == reference_digest_events(labeled + more)


def finish_after_kill(bootstrap: str, topics: Topics, config_path, log_path, ids: list[str]) -> int:
    """After a SIGKILL: a new worker runs to its idle stop; every id must have a prediction.
    Returns how many predictions were published twice."""
    restarted = WorkerProcess(config_path, log_path, stop_when_idle=3)
    try:
        assert restarted.wait(180) == 0, restarted.log_tail()
    finally:
        restarted.kill()
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert set(predictions) == set(ids)
    return sum(len(copies) - 1 for copies in predictions.values())

@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_count_only_checkpoints_with_unlabeled_traffic_commit_outputs_as_they_go(kafka_broker, tmp_path, sms,
                                                                                 guarantee, transport):
    # The probe: interval_s = 0 and every_events = 1000 with unlabeled traffic only wrote no
    # checkpoint at all, and a kill -9 republished every prediction.
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("count")
    group_id = f"group-{topics.labeled}"
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    _, messages = labeled_messages(topics.labeled, sms, 0, 200)
    ids = [f"u{i}" for i in range(8_000)]
    produce(bootstrap, messages + [Message(topics.unlabeled, unlabeled_event(event_id, sms[i % len(sms)][1]),
                                           event_id.encode()) for i, event_id in enumerate(ids)])
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints", group_id=group_id,
                               checkpoint={"interval_s": 0, "every_events": 1_000},
                               kafka={"processing_guarantee": guarantee}, transport=transport)
    log_path = tmp_path / "worker.log"
    # No idle stop: with the probe's fault the first commit came only at the stop, so the wait
    # below times out instead of passing once everything is done.
    worker = WorkerProcess(config_path, log_path, stop_when_idle=None)
    try:
        # Killed once some outputs are committed: how many predictions are out by then is a
        # matter of speed (a fast machine publishes all 8,000 within a few commits).
        wait_until(lambda: (committed_offset(bootstrap, group_id, topics.unlabeled) or 0) > 0
                   and len(read_topic(bootstrap, topics.predictions)) >= 3_000, 120,
                   "3,000 predictions and a commit", worker)
        assert worker.alive(), worker.log_tail()
        worker.kill()
    finally:
        worker.kill()
    committed_at_kill, published_at_kill = settled_after_kill(bootstrap, group_id, topics)
    duplicates = finish_after_kill(bootstrap, topics, config_path, log_path, ids)
    print(f"\n{guarantee}: {duplicates} predictions published twice after a kill -9 "
          f"({published_at_kill} published, {committed_at_kill} unlabeled offsets committed)")
    if guarantee == "exactly_once":
        assert duplicates == 0
    else:
        assert_repeats_exactly_what_followed_the_commit(bootstrap, topics, committed_at_kill, published_at_kill)
    assert json.loads(read_topic(bootstrap, topics.predictions)[-1].value)["model"]["events_learned"] > 0


def settled_after_kill(bootstrap: str, group_id: str, topics: Topics) -> tuple[int, int]:
    """The unlabeled offset committed and the predictions published when a worker was killed,
    read once the broker has handled what the dead process had already sent."""
    time.sleep(1.0)
    committed = None
    for _ in range(30):  # None: the coordinator cannot say yet
        committed = committed_offset(bootstrap, group_id, topics.unlabeled)
        if committed is not None:
            break
        time.sleep(1.0)
    assert committed is not None, "the group's committed offset could not be read"
    return committed, len(read_topic(bootstrap, topics.predictions))


def assert_repeats_exactly_what_followed_the_commit(bootstrap: str, topics: Topics, committed_at_kill: int,
                                                    published_at_kill: int) -> None:
    """at_least_once after a kill -9 (one unlabeled partition, event u<i> at offset i): the
    predictions published twice are those of the events after the last committed offset that
    were already out, all of them and nothing before it. How many that is depends on where the
    kill lands, so the bound is the committed offset, not a count."""
    repeated = {event_id for event_id, copies in predictions_by_id(read_topic(bootstrap, topics.predictions)).items()
                if len(copies) > 1}
    assert min((int(event_id[1:]) for event_id in repeated), default=published_at_kill) >= committed_at_kill
    assert {f"u{i}" for i in range(committed_at_kill, published_at_kill)} <= repeated


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_throttled_outputs_make_progress_and_a_kill_repeats_little(kafka_broker, tmp_path, sms, guarantee, transport):
    # The probe: with the worker's produce rate held to 4 KB/s by a broker quota and a backlog,
    # no checkpoint in 420 s, a rewind to the start every ~127 s, 6,351 duplicates in the end.
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("slow")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    client_id = f"throttled-{topics.labeled}"
    group_id = f"group-{topics.labeled}"
    set_client_quota(bootstrap, client_id, "producer_byte_rate", 30_000)  # ~100 predictions/s (with clues, ~300 B each)
    _, messages = labeled_messages(topics.labeled, sms, 0, 300)
    ids = [f"u{i}" for i in range(1_500)]
    produce(bootstrap, messages + [Message(topics.unlabeled, unlabeled_event(event_id, sms[i][1]), event_id.encode())
                                   for i, event_id in enumerate(ids)])
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints", group_id=group_id,
                               kafka={"processing_guarantee": guarantee, "poll_max_records": 100},
                               client={"client_id": client_id},
                               checkpoint={"interval_s": 1.0}, transport=transport)
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(config_path, log_path, stop_when_idle=3)
    try:
        # checkpoints and commits go on while the outputs crawl (the probe: none in 420 s)
        wait_until(lambda: newest_offsets(tmp_path / "checkpoints") == {(topics.labeled, 0): 300}, 60, "a checkpoint", worker)
        wait_until(lambda: (committed_offset(bootstrap, group_id, topics.unlabeled) or 0) >= 300
                   and len(read_topic(bootstrap, topics.predictions)) >= 500, 120,
                   "300 unlabeled offsets committed and 500 predictions", worker)
        worker.kill()
    finally:
        worker.kill()
    committed_at_kill, published_at_kill = settled_after_kill(bootstrap, group_id, topics)
    assert "dropped and redone" not in log_path.read_text()  # slow, but no delivery timeouts
    duplicates = finish_after_kill(bootstrap, topics, config_path, log_path, ids)
    print(f"\n{guarantee} at 30 kB/s: {duplicates} predictions published twice after a kill -9 "
          f"({published_at_kill} published, {committed_at_kill} unlabeled offsets committed)")
    if guarantee == "exactly_once":
        assert duplicates == 0
    else:
        # the probe: 6,351 repeats of 1,500, the start redone every ~127 s
        assert_repeats_exactly_what_followed_the_commit(bootstrap, topics, committed_at_kill, published_at_kill)
