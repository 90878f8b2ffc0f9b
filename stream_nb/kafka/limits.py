"""Record sizes: what a topic takes, and room on the dead-letter topic for what the worker sends.

A dead letter carries the refused record's bytes plus our headers, so on a topic with the input's
limit the dead letter of a record near that limit does not fit, and a worker that retried it
would retry for ever. At start the worker asks for room on its dead-letter topic (the inputs'
largest `max.message.bytes` plus `DEAD_LETTER_HEADROOM`): it creates the topic so, or raises an
existing topic's limit when it may manage topics (`kafka.create_topics`). What the topic still
cannot take is cut to fit (stream_nb.events.codec.dead_letter_record), never retried.
"""

from __future__ import annotations

import logging
import time

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import KafkaError

from stream_nb.kafka.clients import KafkaSetupError, _connect, client_options

log = logging.getLogger("stream_nb.worker")

LIMIT_CONFIG = "max.message.bytes"
BROKER_DEFAULT_LIMIT = 1_048_588  # Kafka's message.max.bytes default, a topic's when not set
# Our headers (reason, a bounded detail, source position, sizes) need well under this.
DEAD_LETTER_HEADROOM = 65_536
# Below this a dead letter is not worth sending cut (our headers and a first screen of the value).
MIN_DEAD_LETTER_BYTES = 16_384


def topic_limits(admin: KafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """{topic: its max.message.bytes, as the broker applies it (the topic's own or the broker's)}."""
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic, configs={LIMIT_CONFIG: None})
                 for topic in dict.fromkeys(topics)]
    described = admin.describe_configs(resources, config_filter="all").get("topic", {})
    limits = {}
    for topic in dict.fromkeys(topics):
        entry = (described.get(topic) or {}).get(LIMIT_CONFIG) or {}
        try:
            limits[topic] = int(entry["value"])
        except (KeyError, TypeError, ValueError):
            limits[topic] = BROKER_DEFAULT_LIMIT
    return limits


def dead_letter_room_needed(input_limits: dict[str, int]) -> int:
    """The limit a dead-letter topic needs for the dead letter of any record the inputs take whole."""
    return max(input_limits.values(), default=BROKER_DEFAULT_LIMIT) + DEAD_LETTER_HEADROOM


def ensure_dead_letter_room(kafka: dict, client: dict) -> int:
    """Give the dead-letter topic room for the dead letter of any input record (raising its
    max.message.bytes when kafka.create_topics allows the worker to manage topics) and return
    the limit it has then: the most a dead letter may take. A topic left smaller is one warning
    here, and its letters are cut to fit."""
    topic = kafka["dead_letter_topic"]
    have, needed, why = _ensure_room(kafka, client, topic, [*kafka["labeled_topics"], *kafka["unlabeled_topics"]],
                                     "dead-letter topic")
    if have < needed:
        log.warning("dead-letter topic %s takes records up to %d bytes, the inputs up to %d: larger dead letters "
                    "are cut to fit (headers %s, %s); raise its max.message.bytes to %d to keep them whole (%s)",
                    topic, have, needed - DEAD_LETTER_HEADROOM, "stream-nb-truncated", "stream-nb-original-bytes",
                    needed, why)
    return have


def ensure_labeled_order_room(kafka: dict, client: dict, topic: str) -> int:
    """Give the labeled order's topic ([personal]) room for any labeled record with its origin
    headers, as the dead-letter topic gets room. A label cannot be cut or left out of the order,
    so a topic left smaller stops the worker at start (KafkaSetupError naming the setting)."""
    have, needed, why = _ensure_room(kafka, client, topic, list(kafka["labeled_topics"]), "labeled order's topic")
    if have < needed:
        raise KafkaSetupError(f"kafka: the labeled order's topic {topic} takes records up to {have} bytes, the "
                              f"labeled topics up to {needed - DEAD_LETTER_HEADROOM}: raise its max.message.bytes to "
                              f"{needed} ({why})")
    return have


def _shows(admin: KafkaAdminClient, topic: str, limit: int, within_s: float = 15.0) -> bool:
    """Whether the brokers describe `topic` with a limit of at least `limit` within `within_s`
    (a change of a topic's config reaches every broker of a cluster a moment after it is taken)."""
    deadline = time.monotonic() + within_s
    while topic_limits(admin, [topic])[topic] < limit:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _ensure_room(kafka: dict, client: dict, topic: str, inputs: list[str], what: str) -> tuple[int, int, str]:
    """(the limit `topic` has then, the limit it needs, why it was not raised): it needs the
    largest of the `inputs`' limits plus DEAD_LETTER_HEADROOM, and is raised to that when
    kafka.create_topics allows the worker to manage topics."""
    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        limits = topic_limits(admin, [*inputs, topic])
        needed = dead_letter_room_needed({name: limits[name] for name in inputs})
        have = limits[topic]
        if have >= needed:
            return have, needed, ""
        why = "kafka.create_topics is false"
        if kafka["create_topics"]:
            try:
                answer = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                             configs={LIMIT_CONFIG: str(needed)})])
                outcome = (answer.get("topic") or {}).get(topic)
                if outcome in ("OK", None) and _shows(admin, topic, needed):
                    log.info("%s %s: max.message.bytes raised from %d to %d (the inputs take records up to %d bytes)",
                             what, topic, have, needed, needed - DEAD_LETTER_HEADROOM)
                    return needed, needed, ""
                why = f"the broker answered {outcome}"
            except (KafkaError, ValueError) as error:
                why = f"{type(error).__name__}: {error}"
        return have, needed, why
    except KafkaError as error:
        raise KafkaSetupError(f"kafka: cannot read the topics' record size limits: {error}") from None
    finally:
        admin.close()


def dead_letter_limit(kafka: dict, client: dict) -> int:
    """The dead-letter topic's max.message.bytes as the broker applies it now."""
    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        return topic_limits(admin, [kafka["dead_letter_topic"]])[kafka["dead_letter_topic"]]
    finally:
        admin.close()
