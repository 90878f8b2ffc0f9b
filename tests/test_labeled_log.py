"""The labeled log's reading rules, on a scripted consumer: a record below a partition's position
is already in the model and is never handed on to be learned again, and a position never moves
back. (A worker's model is a function of the labeled offsets it has consumed; a client that
delivers records from before its seek would otherwise count them twice.)"""

from __future__ import annotations

import logging
from collections import namedtuple

from kafka import TopicPartition

from stream_nb.worker.labeled import LabeledLog

Record = namedtuple("Record", "topic partition offset timestamp")
TOPIC = "labeled"
TP = TopicPartition(TOPIC, 0)


class ScriptedConsumer:
    """poll() gives the scripted batches in turn; position() what it is told; seeks are kept."""

    def __init__(self, batches: list[list[int]], position: int) -> None:
        self.batches = batches
        self.at = position
        self.seeks: list[tuple[TopicPartition, int]] = []

    def poll(self, timeout_ms: int, max_records: int) -> dict:
        if not self.batches:
            return {}
        offsets = self.batches.pop(0)
        if offsets:
            self.at = offsets[-1] + 1
        return {TP: [Record(TOPIC, 0, offset, 1_000 + offset) for offset in offsets]}

    def position(self, tp: TopicPartition) -> int:
        return self.at

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.at = offset


def labeled_log(consumer: ScriptedConsumer, position: int) -> LabeledLog:
    log = LabeledLog(consumer, [TOPIC], one_order=None, on_lost_position="fail")
    log.partitions = [TP]
    log.positions = {(TOPIC, 0): position}
    return log


def offsets(records) -> list[int]:
    return [record.offset for record in records]


def test_records_below_the_position_are_dropped_and_said(caplog):
    caplog.set_level(logging.WARNING, logger="stream_nb.worker")
    consumer = ScriptedConsumer([[97, 98, 99, 100, 101], [102, 103]], position=97)
    log = labeled_log(consumer, 100)
    assert offsets(log.poll(100, 500)) == [100, 101]
    log.advance()
    assert log.positions == {(TOPIC, 0): 102}
    assert offsets(log.poll(100, 500)) == [102, 103]
    assert consumer.seeks == []
    (line,) = [record.getMessage() for record in caplog.records]
    assert line == ("the labeled reader returned 3 records of labeled[0] below offset 100, which the model has "
                    "learned (offsets 97..99): dropped, not learned twice")


def test_a_poll_of_learned_records_only_sends_the_consumer_back_to_the_position():
    consumer = ScriptedConsumer([[10, 11, 12], [100, 101]], position=10)
    log = labeled_log(consumer, 100)
    assert log.poll(100, 500) == []
    assert consumer.seeks == [(TP, 100)]
    log.advance()
    assert log.positions == {(TOPIC, 0): 100}
    assert offsets(log.poll(100, 500)) == [100, 101]


def test_a_position_never_moves_back():
    consumer = ScriptedConsumer([], position=40)
    log = labeled_log(consumer, 100)
    log.advance()
    assert log.positions == {(TOPIC, 0): 100}
    consumer.at = 130  # past transaction markers, say
    log.advance()
    assert log.positions == {(TOPIC, 0): 130}


def test_records_at_and_past_the_position_pass_untouched():
    consumer = ScriptedConsumer([[100, 101, 102]], position=100)
    log = labeled_log(consumer, 100)
    assert offsets(log.poll(100, 500)) == [100, 101, 102]
    assert consumer.seeks == []
