"""A recorded stream from a Kafka topic: every partition, read directly, merged in time order."""

from __future__ import annotations

import heapq
from collections import Counter
from datetime import datetime

from kafka import TopicPartition

from stream_nb.events import DEFAULT_MAX_BYTES, Rejected, SourcePosition
from stream_nb.events.raw_mail import decoder_for
from stream_nb.kafka.clients import KafkaSetupError, make_reader
from stream_nb.replay.sources import SourceError, count_rejection, event_dict


def parse_time(text: str) -> int:
    """ISO 8601 -> milliseconds since the epoch (a time without zone is taken as UTC)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SourceError(f"--from-time {text!r}: not an ISO 8601 time") from None
    if moment.tzinfo is None:
        from datetime import timezone

        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def read_topic(bootstrap: str | list, topic: str, *, from_offset: int | None = None, from_time_ms: int | None = None,
               max_events: int | None = None, client: dict | None = None, rejected: Counter | None = None,
               transport: str = "kafka-python", labeled: bool | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
               classes: frozenset | None = None, value_format: str = "json", label_header: str = "label",
               unlearn_header: str = "unlearn"):
    """Yield events {"id", "text", "features", "label"} (and "mail", bytes, of a mail event) of
    `topic`, in timestamp order.

    Reads every partition by assignment (no consumer group: nothing is committed, a running
    worker is undisturbed) from the beginning, from `from_offset` in every partition, or from
    the first record at or after `from_time_ms`, up to the end offsets seen at the start.
    Partitions are merged by record timestamp (ties: partition, then offset). Messages that are
    not valid events are counted by reason in `rejected` and skipped, decided by the worker's
    own decoder (`record_decoder`): `labeled` True is a labeled topic (an event without a label
    is `missing_label`), False an unlabeled one (a label is `label_on_unlabeled_topic`), None a
    topic of neither kind, where labeled and unlabeled events may be mixed.
    Labels beyond `classes` ([model] classes; None: any) are rejected as `undeclared_label`.
    `value_format` "mail": the records are raw messages, labeled by the `label_header` header
    (a correction's class to take back: `unlearn_header`; `stream_nb.events.raw_mail`), as the
    worker reads them. A correction's dict carries "unlearn", a keyed event's "key" (the event's
    "key" field; never the message key) (`event_dict`).
    """
    # read_committed, as every downstream reader of a transactional producer (the worker's
    # outputs) must: records of open or aborted transactions are not events
    try:
        consumer = make_reader({"bootstrap_servers": bootstrap, "transport": transport, "poll_max_records": 5_000,
                                "max_message_bytes": 1_000_000}, client or {})
    except KafkaSetupError as error:
        raise SourceError(str(error)) from None
    try:
        numbers = consumer.partitions_for_topic(topic)
        if not numbers:
            raise SourceError(f"topic {topic!r} does not exist or has no partitions")
        partitions = [TopicPartition(topic, number) for number in sorted(numbers)]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        starts = consumer.beginning_offsets(partitions)
        if from_time_ms is not None:
            found = consumer.offsets_for_times({tp: from_time_ms for tp in partitions})
            starts = {tp: (found[tp].offset if found.get(tp) else ends[tp]) for tp in partitions}
        elif from_offset is not None:
            starts = {tp: max(starts[tp], min(from_offset, ends[tp])) for tp in partitions}
        records: dict[TopicPartition, list] = {tp: [] for tp in partitions}
        for tp in partitions:
            consumer.seek(tp, starts[tp])
        remaining = {tp for tp in partitions if starts[tp] < ends[tp]}
        while remaining:
            for tp, batch in consumer.poll(timeout_ms=500).items():
                if tp in remaining:
                    records[tp].extend(r for r in batch if r.offset < ends[tp])
            # by position, not by the last record: a transaction marker takes an offset too
            for tp in list(remaining):
                if consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
                    consumer.pause(tp)
    finally:
        consumer.close(autocommit=False)
    merged = heapq.merge(*records.values(), key=lambda r: (r.timestamp, r.partition, r.offset))
    kafka = {"max_message_bytes": max_bytes, "value_format": value_format, "label_header": label_header,
             "unlearn_header": unlearn_header}
    decode = decoder_for(kafka, labeled=labeled is not False, classes=classes)
    decode_unlabeled = decoder_for(kafka, labeled=False) if labeled is None else None
    produced = 0
    for record in merged:
        if max_events is not None and produced >= max_events:
            return
        source = SourcePosition(record.topic, record.partition, record.offset)
        event = decode(record.value, record.key, record.headers or (), source)
        if decode_unlabeled is not None and isinstance(event, Rejected) and event.reason == "missing_label":
            event = decode_unlabeled(record.value, record.key, record.headers or (), source)
        if isinstance(event, Rejected):
            if rejected is not None:
                count_rejection(rejected, event.reason,
                                f"{record.topic}[{record.partition}]@{record.offset}: {event.detail}")
            continue
        produced += 1
        yield event_dict(event)
