"""Forwarding's pure parts (stream_nb.worker.forwarding, stream_nb.kafka.labeled_order): the
co-partitioning rule, the origin headers, the filter of records read twice, the offset a delivered
send names. Its behaviour with Kafka is tested on a real broker (tests/integration/test_worker_keyed.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka import TopicPartition

from stream_nb.kafka.clients import KafkaSetupError, delivered_offset
from stream_nb.kafka.labeled_order import (
    ORIGIN_OFFSET,
    ORIGIN_PARTITION,
    ORIGIN_TOPIC,
    labeled_order_topic,
    origin_headers,
)
from stream_nb.worker.forwarding import Forwarding


def forwarding(sources=("labeled",)) -> Forwarding:
    worker = SimpleNamespace(kafka={"group_id": "g", "poll_max_records": 100})
    return Forwarding(worker, frozenset(sources), labeled_order_topic(worker.kafka))


def test_the_labeled_order_is_named_by_the_group():
    assert forwarding().topic == "g-labeled-order"


def test_labeled_topics_must_have_the_unlabeled_topics_partition_count():
    forwarding(("a", "b")).start(4, {"a": 4, "b": 4, "unlabeled": 4})
    with pytest.raises(KafkaSetupError, match=r"must have the unlabeled topic's 4 partitions .*; b \(2\)\. The worker "
                                              r"creates them so \(kafka\.partitions, not kafka\.labeled_partitions"):
        forwarding(("a", "b")).start(4, {"a": 4, "b": 2, "unlabeled": 4})


def test_a_forwarded_record_keeps_its_headers_and_names_its_origin():
    record = SimpleNamespace(topic="labeled", partition=3, offset=1234, headers=[("trace", b"x")])
    assert origin_headers(record) == [("trace", b"x"), (ORIGIN_TOPIC, b"labeled"), (ORIGIN_PARTITION, b"3"),
                                      (ORIGIN_OFFSET, b"1234")]
    assert origin_headers(SimpleNamespace(topic="t", partition=0, offset=0, headers=None))[0] == (ORIGIN_TOPIC, b"t")


def test_a_record_read_again_is_not_forwarded_again_and_gaps_pass():
    f = forwarding()
    tp = TopicPartition("labeled", 0)
    batches = [[5, 6, 7], [6, 7, 9], [9, 12]]  # a batch read twice in part; 8, 10, 11: markers, aborted
    f.reader = SimpleNamespace(poll=lambda **_: {tp: [SimpleNamespace(offset=o) for o in batches.pop(0)]})
    f.partitions, f._next = {0}, {tp: 5}
    assert [r.offset for r in f.poll()] == [5, 6, 7]
    assert [r.offset for r in f.poll()] == [9]
    assert [r.offset for r in f.poll()] == [12]
    assert f.positions() == {tp: 13}


def test_the_offset_of_a_delivered_send_on_either_transport():
    kafka_python = SimpleNamespace(is_done=True, exception=None, value=SimpleNamespace(offset=41))
    confluent = SimpleNamespace(is_done=True, exception=None, offset=7)  # DeliveryFuture has no value
    assert delivered_offset(kafka_python) == 41
    assert delivered_offset(confluent) == 7
    assert delivered_offset(SimpleNamespace(is_done=False, exception=None, offset=None)) is None
    assert delivered_offset(SimpleNamespace(is_done=True, exception=RuntimeError("x"), offset=None)) is None


def test_unlabeled_records_wait_once_for_the_labels_forwarded_with_them():
    """Labels first over forwarding: records polled with labels forwarded are put back while the
    forwards commit and are learned; polled again, they are predicted, even if more labels came
    (labels flowing all the time would otherwise hold every poll for labels_first_wait_s)."""
    f = forwarding()

    def batch(*offsets, partition=0):
        return [SimpleNamespace(topic="unlabeled", partition=partition, offset=o) for o in offsets]

    assert f.hold_back(batch(10, 11, 12), forwarded_now=True)
    assert not f.hold_back(batch(10, 11, 12, 13), forwarded_now=True)  # the same records again
    assert f.hold_back(batch(14, 15), forwarded_now=True)  # newer records wait for newer labels
    assert f.hold_back(batch(3, partition=1) + batch(16), forwarded_now=True)
    assert not f.hold_back(batch(3, 4, partition=1), forwarded_now=True)


def test_a_commit_while_records_are_held_back_commits_their_partitions_before_them():
    """Labels first holds a poll's unlabeled records in memory while the forwards commit: the
    group's offsets committed then must not pass them (a crash would lose their predictions)."""
    from stream_nb.worker.commits import Commits

    a, b, labeled = TopicPartition("unlabeled", 0), TopicPartition("unlabeled", 1), TopicPartition("labeled", 0)
    committed = []
    group = SimpleNamespace(assignment=lambda: {a, b, labeled}, position=lambda tp: {a: 40, b: 17}[tp],
                            group_metadata=lambda: None)
    outputs = SimpleNamespace(open=True, begin=lambda metadata: None, commit=committed.append)
    worker = SimpleNamespace(_assignment_changed=False, labeled=SimpleNamespace(positions={}), labeled_rejections=[],
                             keyed=None, forwarding=None, group=group, outputs=outputs,
                             labeled_topics=frozenset({"labeled"}),
                             telemetry=SimpleNamespace(rewinds=SimpleNamespace(inc=lambda: None)))
    commits = Commits(worker)
    held = [SimpleNamespace(topic="unlabeled", partition=0, offset=o) for o in (31, 32, 33)]
    commits.hold(held)
    assert commits.commit()
    assert committed[-1] == {a: 31, b: 17}  # partition 1 had nothing held: its position
    assert commits.take_held() == held and commits.held == []
    assert commits.commit()
    assert committed[-1] == {a: 40, b: 17}
    commits.hold(held)
    worker._assignment_changed = True  # a rebalance: what is held is dropped, polled again from the group's offsets
    worker.outputs = SimpleNamespace(open=False, abort=lambda: None)
    group.committed = lambda tp: 31
    group.seek = lambda tp, offset: None
    commits.rewind("the group rebalanced")
    assert commits.held == []


def test_records_held_back_before_a_rebalance_are_polled_again_not_predicted():
    """Labels first holds a poll's records to the next step. When the group rebalanced in
    between (kafka-python completes a rebalance on its network thread, between two steps), their
    partition may have moved: predicted and committed without that partition's offset, the new
    owner would predict them again (once seen on the three-broker deployment test: a prediction
    published twice). They are stale; the same generation and member keep them."""
    from stream_nb.worker.commits import Commits

    def metadata(generation: int, member: str = "m1"):
        return SimpleNamespace(generation_id=generation, member_id=member)

    commits = Commits(SimpleNamespace())
    held = [SimpleNamespace(topic="unlabeled", partition=0, offset=o) for o in (31, 32)]
    assert not commits.held_stale(metadata(7))  # nothing held
    commits.hold(held, metadata(7))
    assert not commits.held_stale(metadata(7))
    assert commits.held_stale(metadata(8))
    assert commits.held_stale(metadata(7, "m2"))
    assert commits.take_held() == held and not commits.held_stale(metadata(8))
