"""The labeled order: one topic of one partition holding the labeled events of every labeled
partition in the one order the models learn them (stream_nb.worker.forwarding writes it).

It is the log the global model and every key's state are a function of, so it is kept for ever
(retention.ms = -1): a worker relearning a partition's keys, or a new replica, may read it from
its beginning. Each forwarded record carries the labeled record's value, key and headers, and
three headers more that say where it came from.
"""

from __future__ import annotations

from stream_nb.kafka.clients import KafkaSetupError, ensure_own_topic

ORIGIN_TOPIC = "stream-nb-origin-topic"
ORIGIN_PARTITION = "stream-nb-origin-partition"
ORIGIN_OFFSET = "stream-nb-origin-offset"


def labeled_order_topic(kafka: dict) -> str:
    """`<group_id>-labeled-order`: one per group, as the group's state is one."""
    return f"{kafka['group_id']}-labeled-order"


def ensure_labeled_order(kafka: dict, client: dict) -> str:
    """Create the labeled order's topic (one partition, kept for ever) if missing; refuse one of
    more partitions (it would have no order). Returns its name."""
    topic = labeled_order_topic(kafka)
    ensure_own_topic(kafka, client, topic, 1, {"retention.ms": "-1"}, "the labeled order's topic",
                     lambda count: KafkaSetupError(
                         f"kafka: the labeled order's topic {topic} has {count} partitions; it must have one"))
    return topic


def origin_headers(record) -> list[tuple[str, bytes]]:
    """The headers of a labeled record forwarded: its own, then its topic, partition and offset."""
    return [*(record.headers or ()), (ORIGIN_TOPIC, record.topic.encode()),
            (ORIGIN_PARTITION, str(record.partition).encode()), (ORIGIN_OFFSET, str(record.offset).encode())]
