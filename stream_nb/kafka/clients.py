"""Kafka clients configured from a stream_nb configuration, and topic set-up: the one seam
between stream_nb and a Kafka client library.

`[kafka] transport` picks the library: kafka-python (the default) or confluent-kafka
(`stream_nb.kafka.confluent`, which offers the same calls). Nothing outside this package
creates a client or reaches into one.

The worker uses three clients, one per job:
- the labeled reader: the labeled partitions by assignment (no group), so every worker reads the
  whole labeled log and its model is a function of the offsets it has consumed;
- the group consumer: the unlabeled topics through the consumer group, so N workers split them
  (static membership, cooperative-sticky assignment);
- the producer: predictions and dead letters, transactional under exactly-once.
"""

from __future__ import annotations

import logging

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import (
    FencedInstanceIdError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    TransactionalIdAuthorizationFailedError,
)
from kafka.structs import MemberState, OffsetAndMetadata

from stream_nb.config import KAFKA_CONSUMER_KEYS, KAFKA_PRODUCER_KEYS, min_insync_replicas

log = logging.getLogger(__name__)

# How often clients refresh topic metadata unless [kafka.client] says otherwise: a partition
# added to a topic is seen (and read) within this long. kafka-python's default is 5 minutes.
METADATA_MAX_AGE_MS = 5_000
BOOTSTRAP_TIMEOUT_MS = 10_000


# kafka-python 3.0.12's sender waits up to request_timeout_ms for a dead transaction coordinator
# before it asks again who coordinates (30 s by default). Measured on a 3-broker cluster with the
# coordinator killed: a commit waited over 60 s at 30 s, 12.6 s at 5 s (the controller fences the
# dead broker after 9 s). A request that times out is sent again; the producer is idempotent.
KAFKA_PYTHON_PRODUCER_REQUEST_TIMEOUT_MS = 5_000


# The errors that mean a newer producer or member holds this worker's ids (or the coordinator
# aborted a transaction that outlived its timeout, a stale epoch): the worker stops, never fences back.
FENCING_ERRORS = (ProducerFencedError, InvalidProducerEpochError, FencedInstanceIdError,
                  TransactionalIdAuthorizationFailedError)


class KafkaSetupError(RuntimeError):
    """The broker cannot be reached or the topics are not as configured; one clear line."""


class TransactionTimeout(KafkaError):
    """A transaction's commit or abort got no answer in time (kafka-python would wait for ever)."""

    retriable = True


def client_options(kafka: dict, client: dict, role: str = "admin") -> dict:
    """Options for one client: the bootstrap servers and the [kafka.client] keys that apply to
    `role` ("producer", "consumer" or "admin")."""
    foreign = {"producer": KAFKA_CONSUMER_KEYS, "consumer": KAFKA_PRODUCER_KEYS}.get(
        role, KAFKA_CONSUMER_KEYS | KAFKA_PRODUCER_KEYS)
    options = {key: value for key, value in client.items() if key not in foreign}
    # a client that cannot reach the broker says so in bounded time (kafka-python would wait on)
    options.setdefault("bootstrap_timeout_ms", BOOTSTRAP_TIMEOUT_MS)
    if role != "admin":
        options.setdefault("metadata_max_age_ms", METADATA_MAX_AGE_MS)
    return {"bootstrap_servers": kafka["bootstrap_servers"], **options}


def _connect(factory, kafka: dict, what: str, *args, **options):
    try:
        return factory(*args, **options)
    except KafkaTimeoutError as error:
        raise KafkaSetupError(f"kafka.bootstrap_servers: cannot reach {kafka['bootstrap_servers']!r} ({error})") from None
    except (KafkaError, ValueError) as error:  # ValueError: an option the transport cannot take
        raise KafkaSetupError(f"kafka: cannot start the {what}: {error}") from None


def ensure_topics(kafka: dict, client: dict, compacted: tuple[str, ...] = (), copartitioned: bool = False) -> None:
    """Create missing topics (kafka.partitions, kafka.replication_factor, kafka.min_insync_replicas)
    or report them; labeled topics get kafka.labeled_partitions, or kafka.partitions when
    `copartitioned` ([personal]: a key's labels and events on one partition number);
    `compacted` topics (snapshots) get one partition and cleanup.policy=compact."""
    wanted = [*kafka["labeled_topics"], *kafka["unlabeled_topics"], kafka["predictions_topic"], kafka["dead_letter_topic"],
              *compacted]
    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        existing = set(admin.list_topics())
        _warn_of_fewer_partitions(admin, kafka, [topic for topic in kafka["unlabeled_topics"] if topic in existing])
        _warn_of_weaker_outputs(admin, kafka, [topic for topic in (kafka["predictions_topic"], kafka["dead_letter_topic"])
                                               if topic in existing])
        missing = [topic for topic in dict.fromkeys(wanted) if topic not in existing]
        if not missing:
            return
        if not kafka["create_topics"]:
            raise KafkaSetupError(f"kafka: topics {', '.join(missing)} do not exist and kafka.create_topics is false")
        labeled = set(kafka["labeled_topics"])
        # With replicas, a write acknowledged (acks=all) is on min.insync.replicas brokers before
        # the worker counts it done, so a broker lost afterwards loses none of it.
        replicated = {"min.insync.replicas": str(min_insync_replicas(kafka))} if kafka["replication_factor"] > 1 else {}
        labeled_partitions = kafka["partitions"] if copartitioned else kafka["labeled_partitions"]
        spec = {topic: {"num_partitions": labeled_partitions if topic in labeled else kafka["partitions"],
                        "replication_factor": kafka["replication_factor"], "configs": dict(replicated)}
                for topic in missing}
        for topic in set(compacted) & set(missing):
            spec[topic].update(num_partitions=1, configs={**replicated, "cleanup.policy": "compact"})
        try:
            admin.create_topics(spec, wait_for_metadata=True)
        except TopicAlreadyExistsError:
            pass  # created by someone else meanwhile
        log.info("created topics %s", ", ".join(f"{topic} ({spec[topic]['num_partitions']} partitions)"
                                                for topic in missing))
    except KafkaError as error:
        raise KafkaSetupError(f"kafka: cannot create topics: {error}") from None
    finally:
        admin.close()


def ensure_own_topic(kafka: dict, client: dict, topic: str, partitions: int, configs: dict[str, str],
                     what: str, refuse) -> None:
    """Create a topic the worker keeps for itself (`what` names it in errors), with `partitions`
    partitions, the replication of the worker's topics and `configs`; one that exists with
    another partition count is refused: `refuse(count)` is the exception to raise."""
    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        if topic in set(admin.list_topics()):
            count = len(admin.describe_topics([topic])[0].get("partitions") or ())
            if count != partitions:
                raise refuse(count)
            return
        if kafka["replication_factor"] > 1:
            configs = {**configs, "min.insync.replicas": str(min_insync_replicas(kafka))}
        try:
            admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": kafka["replication_factor"],
                                         "configs": configs}}, wait_for_metadata=True)
        except TopicAlreadyExistsError:
            pass  # created by another worker meanwhile
    except KafkaError as error:
        raise KafkaSetupError(f"kafka: cannot create {what} {topic}: {error}") from None
    finally:
        admin.close()


def add_partitions_to_empty(kafka: dict, client: dict, counts: dict[str, int], wanted: int) -> dict[str, int]:
    """Raise each topic of `counts` ({topic: partitions}) with fewer than `wanted` partitions to
    `wanted`, if it holds no record yet (then no key has a partition to keep). Returns the counts
    after; a topic with records is left as it is (the caller refuses it)."""
    short = [topic for topic, count in counts.items() if count < wanted]
    if not short:
        return counts
    reader = _connect(KafkaConsumer, kafka, "consumer", **client_options(kafka, client, "consumer"))
    try:
        ends = reader.end_offsets([TopicPartition(topic, p) for topic in short for p in range(counts[topic])])
    finally:
        reader.close()
    empty = [topic for topic in short if not any(ends.get(TopicPartition(topic, p)) for p in range(counts[topic]))]
    if not empty:
        return counts
    from kafka.admin import NewPartitions

    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        admin.create_partitions({topic: NewPartitions(total_count=wanted) for topic in empty})
    except KafkaError as error:
        raise KafkaSetupError(f"kafka: cannot add partitions to {', '.join(empty)}: {error}") from None
    finally:
        admin.close()
    log.info("partitions added to the empty topics %s: %d each, as the unlabeled topic has", ", ".join(empty), wanted)
    return {**counts, **{topic: wanted for topic in empty}}


def partition_counts(kafka: dict, client: dict, topics: list[str]) -> dict[str, int]:
    """{topic: its partition count} of the topics that exist (KafkaSetupError, one line, when the
    broker cannot say)."""
    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        return {described["name"]: len(described.get("partitions") or ())
                for described in admin.describe_topics(list(dict.fromkeys(topics)))}
    except KafkaError as error:
        raise KafkaSetupError(f"kafka: cannot count the partitions of {', '.join(topics)}: {error}") from None
    finally:
        admin.close()


def durability_shortfall(topic: str, replicas: int, min_insync: int, kafka: dict) -> str | None:
    """What an existing output topic lacks against kafka.replication_factor and the
    min.insync.replicas the worker would give it (a topic the broker made by itself, when a
    reader asked for it before the worker made it, has the broker's defaults), or None."""
    wanted_replicas, wanted_insync = kafka["replication_factor"], min_insync_replicas(kafka)
    if wanted_replicas <= 1 or (replicas >= wanted_replicas and min_insync >= wanted_insync):
        return None
    return (f"topic {topic} has {replicas} replica{'s' if replicas != 1 else ''} and min.insync.replicas "
            f"{min_insync}, not the {wanted_replicas} and {wanted_insync} the worker gives the topics it makes "
            f"(kafka.replication_factor): an output acknowledged on fewer brokers can be lost with one. Raise them "
            f"(kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
            f"min.insync.replicas={wanted_insync}; kafka-reassign-partitions.sh for replicas)")


def _warn_of_weaker_outputs(admin: KafkaAdminClient, kafka: dict, topics: list[str]) -> None:
    """One warning for each existing output topic weaker than the worker would make it."""
    if not topics or kafka["replication_factor"] <= 1:
        return
    try:
        replicas = {t["name"]: min((len(p["replica_nodes"]) for p in t.get("partitions") or ()), default=0)
                    for t in admin.describe_topics(topics)}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                           configs={"min.insync.replicas": None}) for topic in topics],
                                           config_filter="all").get("topic", {})
    except (KafkaError, KeyError, TypeError) as error:  # only a warning: the worker starts anyway
        log.debug("could not read the replication of %s: %s", ", ".join(topics), error)
        return
    for topic in topics:
        try:
            min_insync = int(described[topic]["min.insync.replicas"]["value"])
        except (KeyError, TypeError, ValueError):
            min_insync = 1
        problem = durability_shortfall(topic, replicas.get(topic, 0), min_insync, kafka)
        if problem:
            log.warning("%s", problem)


def _warn_of_fewer_partitions(admin: KafkaAdminClient, kafka: dict, topics: list[str]) -> None:
    """kafka.partitions applies to the topics the worker creates: an unlabeled topic that
    exists with fewer leaves workers beyond its partition count idle. Said in one line each."""
    wanted = kafka["partitions"]
    if not topics or wanted <= 1:
        return
    try:
        described_topics = admin.describe_topics(list(dict.fromkeys(topics)))
    except KafkaError as error:  # only a warning: the worker starts anyway
        log.debug("could not count the partitions of %s: %s", ", ".join(topics), error)
        return
    for described in described_topics:
        topic, have = described["name"], len(described.get("partitions") or ())
        if 0 < have < wanted:
            log.warning("kafka.partitions = %d, but topic %s exists with %d partition%s, and the setting applies "
                        "only to topics the worker creates: at most %d worker%s of group %s can get its events; add "
                        "partitions (kafka-topics.sh --bootstrap-server %s --alter --topic %s --partitions %d) or "
                        "use a new topic",
                        wanted, topic, have, "" if have == 1 else "s", have, "" if have == 1 else "s",
                        kafka["group_id"], kafka["bootstrap_servers"], topic, wanted)


def _fetch_options(kafka: dict) -> dict:
    return {"enable_auto_commit": False, "auto_offset_reset": "earliest",
            "max_poll_records": kafka["poll_max_records"],
            "max_partition_fetch_bytes": max(1_048_576, kafka["max_message_bytes"] + 1024)}


def _confluent():
    try:
        from stream_nb.kafka import confluent
    except ImportError as error:
        raise KafkaSetupError(f"kafka.transport = \"confluent-kafka\" needs the confluent-kafka package "
                              f"(pip install 'stream_nb[confluent]'): {error}") from None
    return confluent


def _uses_confluent(kafka: dict) -> bool:
    return kafka.get("transport", "kafka-python") == "confluent-kafka"


class OffsetsApartConsumer(KafkaConsumer):
    """kafka-python's consumer, asking partitions' first and end offsets on connections of their
    own once it has polled (a consumer with no group nor assignment, made at the first such ask).

    Why: the broker answers one request of a connection at a time, and once the consumer polls,
    its connection usually holds a fetch the broker keeps open up to fetch_max_wait_ms when the
    partition has nothing new. Measured on the local broker: end_offsets of a consumer polled to
    the end 503 ms a call (median of 30), 0.9 ms on a connection of its own. The worker asks
    every step (labels first), so a per-user worker spent 2 s of 8 waiting there. A consumer that
    has not polled has no fetch open, and asks on its own connection: a second client costs a
    bootstrap (0.5 s under load), which readers that ask once before reading would pay for
    nothing. (The confluent transport asks through an admin client for the same reason.)"""

    _GROUP_OPTIONS = ("group_id", "group_instance_id", "partition_assignment_strategy")

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._offsets_options = {key: value for key, value in options.items() if key not in self._GROUP_OPTIONS}
        self._offsets_client: KafkaConsumer | None = None
        self._polled = False

    def poll(self, timeout_ms=0, max_records=None, update_offsets=True):
        self._polled = True  # from here on a fetch may be open on its connections
        return super().poll(timeout_ms=timeout_ms, max_records=max_records, update_offsets=update_offsets)

    def _offsets(self) -> KafkaConsumer:
        if not self._polled:
            return super()
        if self._offsets_client is None:
            self._offsets_client = KafkaConsumer(group_id=None, **self._offsets_options)
        return self._offsets_client

    def beginning_offsets(self, partitions, timeout_ms=None):
        return self._offsets().beginning_offsets(partitions, timeout_ms)

    def end_offsets(self, partitions, timeout_ms=None):
        """The end this consumer may read: the last stable offset under read_committed (the
        offsets client has the consumer's isolation level)."""
        return self._offsets().end_offsets(partitions, timeout_ms)

    def close(self, autocommit=True, timeout_ms=None):
        if self._offsets_client is not None:
            self._offsets_client.close(autocommit=False)
            self._offsets_client = None
        super().close(autocommit=autocommit, timeout_ms=timeout_ms)


def _consumer(kafka: dict, client: dict, what: str, *, cooperative: bool = False, **options):
    options = {**_fetch_options(kafka), **options, **client_options(kafka, client, "consumer")}
    if _uses_confluent(kafka):
        return _connect(_confluent().Consumer, kafka, what, options, cooperative=cooperative,
                        max_poll_records=kafka["poll_max_records"])
    if cooperative:
        options["partition_assignment_strategy"] = (CooperativeStickyAssignor,)
    return _connect(OffsetsApartConsumer, kafka, what, **options)


def make_consumer(kafka: dict, client: dict):
    """A consumer in kafka.group_id that commits nothing by itself (the benchmarks' plain loop)."""
    return _consumer(kafka, client, "consumer", group_id=kafka["group_id"])


def make_labeled_reader(kafka: dict, client: dict):
    """The labeled log, read by assignment with no group; committed records only, so an aborted
    transaction upstream is never learned."""
    return _consumer(kafka, client, "labeled reader", group_id=None, isolation_level="read_committed")


def make_reader(kafka: dict, client: dict):
    """A topic read by assignment with no group, committed records only (replay, snapshots)."""
    return _consumer(kafka, client, "reader", group_id=None, isolation_level="read_committed")


def make_group_consumer(kafka: dict, client: dict, instance_id: str):
    """The consumer of kafka.group_id: static membership (a restart keeps its partitions with no
    rebalance), cooperative-sticky assignment (a rebalance moves only what must move)."""
    consumer = _consumer(kafka, client, "group consumer", group_id=kafka["group_id"], group_instance_id=instance_id,
                         isolation_level="read_committed", cooperative=True)
    if not _is_confluent(consumer):
        _finish_rebalances_left_pending(consumer)
        _note_instance_fencing(consumer)
    return consumer


def _note_instance_fencing(consumer: KafkaConsumer) -> None:
    """Keep the FencedInstanceIdError of a heartbeat, for raise_if_fenced.

    kafka-python 3.0.12's heartbeat thread logs it and stops heartbeating, and that is all: an
    idle member whose instance id another process has taken goes on polling nothing, and learns
    it is a zombie only when its next transaction is refused (49 s later in one trial, when a
    message came). librdkafka raises it from the next poll."""
    coordinator = consumer._coordinator
    send_heartbeat = coordinator._send_heartbeat_request

    async def noting_fencing():
        try:
            return await send_heartbeat()
        except FencedInstanceIdError as error:
            consumer.stream_nb_fenced = error
            raise

    consumer.stream_nb_fenced = None
    coordinator._send_heartbeat_request = noting_fencing


def raise_if_fenced(consumer) -> None:
    """Raise the FencedInstanceIdError of a group consumer whose static instance id another
    member has taken, as librdkafka's poll does (there a no-op)."""
    error = getattr(consumer, "stream_nb_fenced", None)
    if error is not None:
        raise error


def _finish_rebalances_left_pending(consumer: KafkaConsumer) -> None:
    """A rebalance goes on until it is applied, as in the Java client (rejoinNeededOrPending).

    kafka-python 3.0.12 drives a join only while need_rejoin() holds. When a metadata change
    (partitions added) asks for it and the poll that starts it times out, the leader's own
    assignment then makes the metadata snapshots agree, need_rejoin() turns False and the
    SyncGroup's answer is never applied: the added partitions are never read (seen here in about
    half the runs on a loaded machine). `rejoining` is True from the join's start to its end."""
    coordinator = consumer._coordinator
    asks_for_a_join = coordinator.need_rejoin
    coordinator.need_rejoin = lambda: coordinator.rejoining or asks_for_a_join()


def rebalance_pending(consumer) -> bool:
    """A join of the group is under way (started, not yet applied). librdkafka joins in its
    own thread: never pending from here."""
    return not _is_confluent(consumer) and bool(consumer._coordinator.rejoining)


def _is_confluent(client) -> bool:
    return getattr(client, "confluent", False)


def make_producer(kafka: dict, client: dict, transactional_id: str | None = None, max_record_bytes: int = 0):
    """acks=all and idempotence; large batches and 20 ms of lingering, because every new batch
    wakes kafka-python's sender thread through a socket write (measured: a third of the
    producer's cost with the defaults). With `transactional_id`, transactions are initialised
    (which fences an older producer of the same id and aborts its open transaction).
    `max_record_bytes`: the largest record it must send (a dead letter, up to its topic's limit)."""
    options = {"acks": "all", "linger_ms": 20, "batch_size": 262_144,
               # a dead letter carries the original bytes, which may be up to the size limit and more
               "max_request_size": max(1_048_576, 2 * kafka["max_message_bytes"] + 65_536, max_record_bytes + 1024),
               **client_options(kafka, client, "producer")}
    if transactional_id is not None:
        options["transactional_id"] = transactional_id
    if _uses_confluent(kafka):
        producer = _connect(_confluent().Producer, kafka, "producer", options)
    else:
        options.setdefault("request_timeout_ms", KAFKA_PYTHON_PRODUCER_REQUEST_TIMEOUT_MS)
        producer = _connect(KafkaProducer, kafka, "producer", **options)
        if transactional_id is not None:
            _stale_epoch_means_fenced(producer)
    if transactional_id is not None:
        try:
            producer.init_transactions()
        except KafkaError as error:
            close_producer(producer, timeout_s=0)
            raise KafkaSetupError(f"kafka: cannot initialise transactions for {transactional_id!r}: {error}") from None
    return producer


class _NullKey:
    """Stands for the null key of a record with neither key nor value, past kafka-python's
    `Need at least one: key or value` check (Kafka itself takes such a record, and a dead letter
    copies the original's null key and value); it serialises to None."""

    def serialize(self, topic, headers, data):
        return None if data is self else data


_NULL_KEY = _NullKey()


def delivered_offset(future) -> int | None:
    """The offset a send's record was written at, once delivered (kafka-python's future holds
    RecordMetadata; stream_nb.kafka.confluent's DeliveryFuture the offset); None before that
    or after a failure."""
    if not future.is_done or future.exception is not None:
        return None
    metadata = getattr(future, "value", None)
    return metadata.offset if metadata is not None else future.offset


DELIVERY_REPORT_WAIT_S = 10.0  # bounds the wait for a committed send's report


def offset_after(future, wait_s: float = DELIVERY_REPORT_WAIT_S) -> int | None:
    """The offset just past a committed send's record (where what it ended ends): a committed
    transaction's records are delivered, but the report may lag, so wait up to `wait_s` for it."""
    if not future.is_done:
        future.get(timeout=wait_s)
    offset = delivered_offset(future)
    return None if offset is None else offset + 1


def send_null_record(producer, topic: str, headers, partition: int | None):
    """Send a record with a null key and a null value (only its headers carry anything), as
    confluent-kafka does; returns the send's future."""
    if _is_confluent(producer):
        return producer.send(topic, value=None, key=None, headers=headers, partition=partition)
    kept = producer.config["key_serializer"]
    producer.config["key_serializer"] = _NULL_KEY  # for this one send (the worker sends from one thread)
    try:
        return producer.send(topic, value=None, key=_NULL_KEY, headers=headers, partition=partition)
    finally:
        producer.config["key_serializer"] = kept


def _stale_epoch_means_fenced(producer: KafkaProducer) -> None:
    """A write refused for a stale producer epoch stops the producer; it never bumps the epoch.

    Under a transactional id, a newer epoch means a newer producer took over (or the coordinator
    aborted our transaction for outliving transaction_timeout_ms). kafka-python 3.0.12 answers
    INVALID_PRODUCER_EPOCH with a KIP-360 bump (InitProducerId with its old id and epoch), and the
    coordinator aborts whatever transaction is open before checking that epoch: a paused worker
    resumed would abort its replacement's transaction and fence it, then be fenced itself. The
    worker stops on either cause (outputs.fenced_by), so the bump would buy nothing."""
    manager = producer._transaction_manager
    manager._NEEDS_EPOCH_BUMP_ERRORS = manager._NEEDS_EPOCH_BUMP_ERRORS - {InvalidProducerEpochError}
    manager._FATAL_ERRORS = manager._FATAL_ERRORS | {InvalidProducerEpochError}


def commit_transaction(producer: KafkaProducer, offsets: dict[TopicPartition, int], group_metadata,
                       timeout_s: float) -> None:
    """Add the consumer group's `offsets` to the open transaction and commit it, each step
    bounded by `timeout_s` (kafka-python's own calls wait without a limit)."""
    if _is_confluent(producer):
        producer.commit_transaction_with(offsets, group_metadata, timeout_s)
        return
    manager = producer._transaction_manager
    if offsets:
        marked = {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in offsets.items()}
        _wait(producer, manager.send_offsets_to_transaction(marked, group_metadata), timeout_s, "sending offsets")
    _wait(producer, manager.begin_commit(), timeout_s, "committing")


def abort_transaction(producer: KafkaProducer, timeout_s: float) -> None:
    if _is_confluent(producer):
        producer.abort_transaction(timeout_s)
        return
    _wait(producer, producer._transaction_manager.begin_abort(), timeout_s, "aborting")


def _wait(producer: KafkaProducer, result, timeout_s: float, what: str) -> None:
    producer._sender.wakeup()
    if not result.wait(timeout_ms=timeout_s * 1000):
        raise TransactionTimeout(f"no answer from the transaction coordinator after {timeout_s:.0f} s {what}")


def take_part_in_rebalances(consumer: KafkaConsumer, join_wait_ms: int = 100) -> None:
    """Let a group consumer join, sync and answer a rebalance without fetching records (what
    its poll does first). A member that is busy elsewhere for seconds would otherwise hold up
    every other member's rebalance. While a join is under way it gets up to `join_wait_ms` to
    finish: a join that completes between two polls is sent again by kafka-python."""
    if _is_confluent(consumer):
        consumer.serve_rebalances()
        return
    raise_if_fenced(consumer)
    consumer._coordinator.poll(timeout_ms=join_wait_ms if rebalance_pending(consumer) else 0)


def group_is_stable(consumer: KafkaConsumer) -> bool:
    """Joined, synced and heartbeating: its assignment is the group's answer, not a placeholder
    of a rebalance still under way (whose generation may already be set)."""
    if _is_confluent(consumer):
        return consumer.group_is_stable()
    return consumer.group_metadata().state == MemberState.STABLE


def transaction_lost(producer: KafkaProducer | None) -> bool:
    """Whether the broker ended this producer's transaction behind its back: it failed fatally
    (fenced, or a stale epoch after the coordinator aborted a transaction that outlived
    transaction_timeout_ms: see _stale_epoch_means_fenced), or it is bumping its epoch."""
    # Both libraries also end a producer for what is no fencing, seen on a 3-broker cluster with
    # a coordinator killed: kafka-python for a transactional request that timed out ("could not
    # execute transactional request for unknown reasons"), librdkafka for INVALID_TXN_STATE from
    # the coordinator that took over. Such a producer is lost, not fenced: the worker replaces it.
    if _is_confluent(producer):
        return isinstance(producer.fatal_error, FENCING_ERRORS)
    manager = getattr(producer, "_transaction_manager", None)
    if manager is None:
        return False
    fenced = manager.has_fatal_error() and isinstance(manager.last_error, FENCING_ERRORS)
    return manager.is_bumping_epoch() or fenced


def close_producer(producer: KafkaProducer, timeout_s: float) -> None:
    """Close, waiting at most `timeout_s` for buffered records; past that they are dropped
    (kafka-python's close raises instead and leaves the producer half open)."""
    if _is_confluent(producer):
        producer.close(timeout_s)
        return
    try:
        producer.close(timeout=timeout_s)
    except KafkaTimeoutError:
        producer._sender.force_close()
        producer._closed = True


def topic_ids(consumer: KafkaConsumer, topics) -> dict[str, str]:
    """{topic: its id as text} for the topics the consumer has metadata of; a topic deleted and
    created again under the same name gets a new id."""
    if _is_confluent(consumer):
        return consumer.topic_ids(topics)
    cluster = consumer._client.cluster
    found = {}
    for topic in topics:
        topic_id = cluster.topic_id(topic)
        if topic_id is not None:
            found[topic] = str(topic_id)
    return found


def instance_holder(kafka: dict, client: dict, instance_id: str) -> str | None:
    """The member id that holds static `instance_id` in kafka.group_id now, or None (no such
    member: its session ended, or it left). Raises KafkaError/KafkaSetupError when the broker
    cannot say."""
    admin = _connect(KafkaAdminClient, kafka, "admin client", **client_options(kafka, client))
    try:
        group = admin.describe_groups([kafka["group_id"]]).get(kafka["group_id"]) or {}
    finally:
        admin.close()
    return next((member["member_id"] for member in group.get("members") or ()
                 if member.get("group_instance_id") == instance_id), None)


def leave_group(kafka: dict, client: dict, instance_id: str) -> None:
    """Remove this static member from the group now, so its partitions move at once (a static
    member's close does not leave the group; the session timeout would)."""
    from kafka.admin import MemberToRemove

    admin = None
    try:
        admin = KafkaAdminClient(**client_options(kafka, client))
        admin.remove_group_members(kafka["group_id"], [MemberToRemove(group_instance_id=instance_id)])
    except KafkaError as error:
        log.warning("could not leave group %s (its partitions move after the session timeout): %s",
                    kafka["group_id"], error)
    finally:
        if admin is not None:
            admin.close()
