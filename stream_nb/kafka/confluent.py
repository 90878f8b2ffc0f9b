"""The confluent-kafka transport: librdkafka behind the kafka-python calls stream_nb makes.

The worker, replay, snapshots and publish speak a small part of kafka-python's client API
(assign/seek/poll/position/end_offsets, subscribe with a rebalance listener, send with a
future, transactions through `clients.commit_transaction`). These classes give that part over
confluent-kafka, so `[kafka] transport = "confluent-kafka"` changes the clients and nothing
above them. Partitions are kafka-python's TopicPartition and errors kafka-python's classes
(by broker error code), so fencing, refused commits and retries are handled in one place.

Imported only when that transport is chosen: confluent-kafka is an optional extra.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from typing import NamedTuple

import confluent_kafka as ck
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as RdPartition
from kafka import TopicPartition
from kafka.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    for_code,
)
from kafka.structs import OffsetAndTimestamp

_RD = ck.KafkaError
# A commit of a generation the group has left behind: the outputs are redone, not retried.
_STALE_GROUP_CODES = {_RD.ILLEGAL_GENERATION, _RD.UNKNOWN_MEMBER_ID, _RD.REBALANCE_IN_PROGRESS}
_FENCED_CODES = {_RD._FENCED, 90, _RD.INVALID_PRODUCER_EPOCH}  # 90: PRODUCER_FENCED
_CONNECTION_CODES = {_RD._TRANSPORT, _RD._ALL_BROKERS_DOWN, _RD._RESOLVE}
_TIMEOUT_CODES = {_RD._TIMED_OUT, _RD._MSG_TIMED_OUT}
TRANSACTION_GRACE_S = 5.0  # past a transactional call's own timeout: see Producer._call_within
# librdkafka's own log lines (connection failures, ...) through Python's logging, under "kafka" as
# kafka-python's are, instead of straight to stderr.
LIBRDKAFKA_LOG = logging.getLogger("kafka.librdkafka")
log = logging.getLogger(__name__)

# kafka-python option -> librdkafka property, for the [kafka.client] keys stream_nb accepts.
_RENAMED = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "sasl_kerberos_service_name": "sasl.kerberos.service.name",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "ssl_crlfile": "ssl.crl.location",
    "ssl_ciphers": "ssl.cipher.suites",
    "client_id": "client.id",
    "request_timeout_ms": "socket.timeout.ms",
    "connections_max_idle_ms": "connections.max.idle.ms",
    "reconnect_backoff_ms": "reconnect.backoff.ms",
    "reconnect_backoff_max_ms": "reconnect.backoff.max.ms",
    "metadata_max_age_ms": "topic.metadata.refresh.interval.ms",
    "delivery_timeout_ms": "delivery.timeout.ms",
    "transaction_timeout_ms": "transaction.timeout.ms",
    "linger_ms": "linger.ms",
    "batch_size": "batch.size",
    "compression_type": "compression.type",
    "max_in_flight_requests_per_connection": "max.in.flight.requests.per.connection",
    "session_timeout_ms": "session.timeout.ms",
    "heartbeat_interval_ms": "heartbeat.interval.ms",
    "max_poll_interval_ms": "max.poll.interval.ms",
    "fetch_max_bytes": "fetch.max.bytes",
    "fetch_max_wait_ms": "fetch.wait.max.ms",
    "fetch_min_bytes": "fetch.min.bytes",
    "max_partition_fetch_bytes": "max.partition.fetch.bytes",
    "max_request_size": "message.max.bytes",
    "group_id": "group.id",
    "group_instance_id": "group.instance.id",
    "isolation_level": "isolation.level",
    "auto_offset_reset": "auto.offset.reset",
    "enable_auto_commit": "enable.auto.commit",
}
# Options that mean something to the adapter, not to librdkafka.
_OWN = {"bootstrap_timeout_ms", "max_block_ms", "max_poll_records", "acks", "transactional_id",
        "partition_assignment_strategy", "buffer_memory", "ssl_check_hostname"}


def librdkafka_config(options: dict) -> dict:
    """kafka-python-style options (stream_nb's [kafka.client] keys and the factories' own) as
    librdkafka properties."""
    config = {}
    for key, value in options.items():
        if key == "bootstrap_servers":
            config["bootstrap.servers"] = value if isinstance(value, str) else ",".join(value)
        elif key == "ssl_check_hostname":
            config["ssl.endpoint.identification.algorithm"] = "https" if value else "none"
        elif key == "buffer_memory":
            config["queue.buffering.max.kbytes"] = max(1, int(value) // 1024)
        elif key == "transactional_id" and value is not None:
            config["transactional.id"] = value
        elif key == "acks":
            config["acks"] = value
        elif key == "group_id" and value is None:
            continue
        elif key in _OWN or value is None:
            continue
        elif key in _RENAMED:
            config[_RENAMED[key]] = value
        else:
            raise ValueError(f"kafka.client.{key}: not known to the confluent-kafka transport")
    if config.get("group.instance.id") is None:
        config.pop("group.instance.id", None)
    config["logger"] = LIBRDKAFKA_LOG
    return config


def ends_the_producer(exception: BaseException, error: KafkaError) -> bool:
    """Whether a producer call's failure leaves the producer unusable: librdkafka calls it fatal,
    or a newer producer of our transactional id fenced it (a stale epoch included). Not a
    FENCED_INSTANCE_ID from TxnOffsetCommit: that fences the group member whose metadata the
    offsets carried, and librdkafka makes it an abortable error of the transaction; the worker
    aborts, rejoins and lets the producer prove it is still the newest."""
    rd = exception.args[0] if exception.args else None
    fatal = isinstance(rd, ck.KafkaError) and (rd.fatal() or rd.code() == _RD._FATAL)
    return fatal or isinstance(error, ProducerFencedError)


def kafka_error(exception: BaseException, *, committing: bool = False) -> KafkaError:
    """A confluent-kafka exception as the kafka-python error of the same meaning."""
    error = exception.args[0] if exception.args and isinstance(exception.args[0], ck.KafkaError) else None
    if error is None:
        return KafkaError(str(exception))
    code = error.code()
    text = error.str()
    if code in _FENCED_CODES:
        return ProducerFencedError(text)
    if code == _RD.FENCED_INSTANCE_ID:
        return FencedInstanceIdError(text)
    if code == _RD._FATAL and "fenced" in text.lower():
        # librdkafka reports a fencing as a fatal error whose text names its cause
        return FencedInstanceIdError(text) if "instance" in text else ProducerFencedError(text)
    if committing and code in _STALE_GROUP_CODES:
        return CommitFailedError(text)
    if code in _TIMEOUT_CODES:
        return KafkaTimeoutError(text)
    if code in _CONNECTION_CODES:
        return KafkaConnectionError(text)
    if code >= 0:
        return for_code(code)(text)
    return KafkaError(f"{error.name()}: {text}")


def topic_id_text(topic_id) -> str:
    """librdkafka's topic id (base64, as Kafka's Java tools print it) in kafka-python's form (a
    UUID), so a checkpoint names a topic the same way whichever transport wrote it."""
    text = str(topic_id)
    return str(uuid.UUID(bytes=base64.b64decode(text + "=" * (-len(text) % 4))))


class Record:
    """One consumed record, with the attributes of kafka-python's ConsumerRecord that we read."""

    __slots__ = ("topic", "partition", "offset", "key", "value", "headers", "timestamp")

    def __init__(self, topic, partition, offset, key, value, headers, timestamp) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.key, self.value, self.headers, self.timestamp = key, value, headers, timestamp


class GroupMetadata(NamedTuple):
    """What the worker compares across a poll (a local count of rebalances seen, the member id)
    and the handle librdkafka needs to commit offsets in a transaction."""

    generation_id: int
    member_id: str
    handle: object


class Consumer:
    """A consumer with kafka-python's calls: by assignment (the labeled log, replay, snapshots)
    or subscribed to a group (the unlabeled topics)."""

    confluent = True

    def __init__(self, options: dict, *, cooperative: bool = False, max_poll_records: int = 500) -> None:
        config = librdkafka_config(options)
        # A reader with no group still needs a group id for librdkafka; it never commits, and its
        # partitions are assigned at explicit offsets, so the group is never asked for any.
        self._reader = config.get("group.id") is None
        if self._reader:
            config["group.id"] = f"stream-nb-reader-{uuid.uuid4().hex[:12]}"
        if cooperative:
            config["partition.assignment.strategy"] = "cooperative-sticky"
        config["enable.partition.eof"] = False
        self._config = config
        self._timeout_s = options.get("bootstrap_timeout_ms", 10_000) / 1000
        self._max_records = max_poll_records
        self._consumer = ck.Consumer(config)
        self._positions: dict[TopicPartition, int] = {}  # set by seek, until librdkafka knows
        # The offset each partition was last sought to: no record below it is handed on (see poll)
        self._floors: dict[tuple[str, int], int] = {}
        self._buffered: list = []  # records read while only serving a rebalance
        self._partitions: dict[tuple, TopicPartition] = {}
        self._listener = None
        self._rebalances = 0
        self._admin_client = None
        try:
            self._consumer.list_topics(timeout=self._timeout_s)  # reachable, or say so now
        except KafkaException as error:
            self._consumer.close()
            raise KafkaTimeoutError(f"no broker answered in {self._timeout_s:g} s: {kafka_error(error)}") from None

    # ---- metadata and offsets ---------------------------------------------------------------

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        try:
            # the admin client's connection: the consumer's waits behind its open fetch (see end_offsets)
            metadata = self._admin().list_topics(topic, timeout=self._timeout_s).topics.get(topic)
        except KafkaException as error:
            raise kafka_error(error) from None
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return None
        return set(metadata.partitions)

    def beginning_offsets(self, partitions) -> dict[TopicPartition, int]:
        return self._list_offsets(partitions, latest=False)

    def end_offsets(self, partitions) -> dict[TopicPartition, int]:
        """The end as this consumer may read it: the last stable offset under read_committed."""
        return self._list_offsets(partitions, latest=True)

    def _list_offsets(self, partitions, latest: bool) -> dict[TopicPartition, int]:
        """Earliest or latest offsets, asked through an admin client of its own: on the
        consumer's connection the request waits behind the fetch the broker holds open
        (fetch.wait.max.ms, measured 0.5 s a call, a third of a worker's time when asked every
        step). The admin client's metadata is the one `partitions_for_topic` refreshes, so a
        partition found there is known here too (the consumer's own metadata may not know it
        for seconds: "Unknown partition")."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        partitions = list(partitions)
        if not partitions:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED if self._config.get("isolation.level") == "read_committed"
                     else IsolationLevel.READ_UNCOMMITTED)
        spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
        futures = self._admin().list_offsets({RdPartition(tp.topic, tp.partition): spec for tp in partitions},
                                             isolation_level=isolation, request_timeout=self._timeout_s)
        try:
            found = {(p.topic, p.partition): future.result().offset for p, future in futures.items()}
        except KafkaException as error:
            raise kafka_error(error) from None
        return {tp: found[(tp.topic, tp.partition)] for tp in partitions}

    def _admin(self):
        if self._admin_client is None:
            from confluent_kafka.admin import AdminClient

            self._admin_client = AdminClient({**{key: value for key, value in self._config.items() if key in _ADMIN_KEYS},
                                              "logger": LIBRDKAFKA_LOG})
        return self._admin_client

    def offsets_for_times(self, timestamps: dict) -> dict:
        asked = [RdPartition(tp.topic, tp.partition, ms) for tp, ms in timestamps.items()]
        try:
            found = self._consumer.offsets_for_times(asked, timeout=self._timeout_s)
        except KafkaException as error:
            raise kafka_error(error) from None
        return {TopicPartition(p.topic, p.partition): (OffsetAndTimestamp(p.offset, -1, None) if p.offset >= 0 else None)
                for p in found}

    def committed(self, tp: TopicPartition) -> int | None:
        try:
            (found,) = self._consumer.committed([RdPartition(tp.topic, tp.partition)], timeout=self._timeout_s)
        except KafkaException as error:
            raise kafka_error(error) from None
        return found.offset if found.offset >= 0 else None

    def topic_ids(self, topics) -> dict[str, str]:
        """{topic: id} of the topics that exist (AdminClient: librdkafka's metadata omits ids)."""
        found = {}
        for topic, future in self._admin().describe_topics(ck.TopicCollection(list(topics)),
                                                   request_timeout=self._timeout_s).items():
            try:
                found[topic] = topic_id_text(future.result().topic_id)
            except KafkaException:
                continue  # no such topic (yet)
        return found

    # ---- assignment and positions -------------------------------------------------------------

    def assign(self, partitions) -> None:
        """Exactly these partitions; those already assigned keep their positions."""
        wanted = set(partitions)
        current = {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}
        gone, new = current - wanted, wanted - current
        if gone:
            self._consumer.incremental_unassign([RdPartition(tp.topic, tp.partition) for tp in gone])
            self._forget(gone)
            self._drop_floors(gone)
        if new:
            start = ck.OFFSET_BEGINNING if self._reader else ck.OFFSET_INVALID  # invalid: the group's
            self._consumer.incremental_assign([RdPartition(tp.topic, tp.partition, start) for tp in new])

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._move(tp, offset)
        self._positions[tp] = self._floors[(tp.topic, tp.partition)] = offset

    def seek_to_beginning(self, *partitions) -> None:
        for tp in partitions or self.assignment():
            self._move(tp, ck.OFFSET_BEGINNING)
            self._positions[tp] = self._floors[(tp.topic, tp.partition)] = self.beginning_offsets([tp])[tp]

    def _move(self, tp: TopicPartition, offset: int) -> None:
        self._forget((tp,))
        target = RdPartition(tp.topic, tp.partition, offset)
        try:
            self._consumer.seek(target)
        except KafkaException:
            # A partition whose fetcher has not started yet cannot seek ("erroneous state"):
            # assigning it again at the offset is what a seek would have done.
            self._consumer.incremental_unassign([RdPartition(tp.topic, tp.partition)])
            self._consumer.incremental_assign([target])

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record to read (past transaction markers, as librdkafka's).
        Records held back by serve_rebalances are not read yet: a commit must not pass them."""
        for message in self._buffered:
            if message.partition() == tp.partition and message.topic() == tp.topic and message.error() is None:
                return message.offset()
        (found,) = self._consumer.position([RdPartition(tp.topic, tp.partition)])
        if found.offset >= 0:
            return found.offset
        if tp in self._positions:
            return self._positions[tp]
        committed = self.committed(tp) if self._listener is not None else None
        return committed if committed is not None else self.beginning_offsets([tp])[tp]

    def pause(self, *partitions) -> None:
        self._consumer.pause([RdPartition(tp.topic, tp.partition) for tp in partitions])
        self._forget(partitions)

    def _drop_floors(self, partitions) -> None:
        """A partition given up is read anew from wherever its next assignment starts."""
        for tp in partitions:
            self._floors.pop((tp.topic, tp.partition), None)

    def _forget(self, partitions) -> None:
        dropped = {(tp.topic, tp.partition) for tp in partitions}
        for tp in partitions:
            self._positions.pop(tp, None)
        if self._buffered:
            self._buffered = [m for m in self._buffered if (m.topic(), m.partition()) not in dropped]

    # ---- reading ----------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        if self._buffered:
            messages, self._buffered = self._buffered, []
        else:
            # kafka-python's poll returns as soon as records are there; librdkafka's consume waits
            # for all `max_records` until the timeout (measured: a second of latency). So: what is
            # there now, else wait for the first record only, then take what came with it.
            limit = max_records or self._max_records
            try:
                messages = self._consumer.consume(limit, 0)
                if not messages and timeout_ms > 0:
                    messages = self._consumer.consume(1, timeout_ms / 1000)
                    if messages and limit > 1:
                        messages += self._consumer.consume(limit - 1, 0)
            except KafkaException as error:
                raise kafka_error(error) from None
        polled: dict[TopicPartition, list[Record]] = {}
        partitions, floors = self._partitions, self._floors
        stale = 0
        for message in messages:
            error = message.error()
            if error is not None:
                # librdkafka recovers from what is not fatal (a broker away, a topic deleted) by
                # itself; kafka-python would only log it too
                if error.fatal() or error.code() == _RD._FATAL:  # a fencing comes as _FATAL, flag unset
                    raise kafka_error(KafkaException(error))
                log.warning("kafka (librdkafka): %s", error.str())
                continue
            topic, number = message.topic(), message.partition()
            if floors and message.offset() < floors.get((topic, number), -1):
                # Fetched before a seek and delivered after it (seen on a reader assigned at the
                # beginning, then sought: a batch from offset 0 after records past the seek).
                # kafka-python discards such a fetch; so does this.
                stale += 1
                continue
            tp = partitions.get((topic, number))
            if tp is None:
                tp = partitions[(topic, number)] = TopicPartition(topic, number)
            batch = polled.get(tp)
            if batch is None:
                batch = polled[tp] = []
            batch.append(Record(topic, number, message.offset(), message.key(), message.value(),
                                message.headers(), message.timestamp()[1]))
        for tp, batch in polled.items():
            self._positions.pop(tp, None)
        if stale:
            log.debug("dropped %d records fetched before a seek", stale)
        return polled

    # ---- the group ----------------------------------------------------------------------------------

    def subscribe(self, topics, listener=None) -> None:
        self._listener = listener
        self._consumer.subscribe(list(topics), on_assign=self._assigned, on_revoke=self._revoked,
                                 on_lost=self._lost)

    def _partitions_of(self, partitions) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition) for p in partitions]

    def _assigned(self, consumer, partitions) -> None:
        self._rebalances += 1
        consumer.incremental_assign(partitions)
        if self._listener is not None:
            self._listener.on_partitions_assigned(self._partitions_of(partitions))

    def _revoked(self, consumer, partitions) -> None:
        self._taken_away(consumer, partitions, "on_partitions_revoked")

    def _lost(self, consumer, partitions) -> None:
        self._taken_away(consumer, partitions, "on_partitions_lost")

    def _taken_away(self, consumer, partitions, callback: str) -> None:
        self._rebalances += 1
        tps = self._partitions_of(partitions)
        if self._listener is not None:
            getattr(self._listener, callback)(tps)
        consumer.incremental_unassign(partitions)
        self._forget(tps)
        self._drop_floors(tps)

    def group_metadata(self) -> GroupMetadata:
        return GroupMetadata(self._rebalances, self._consumer.memberid() or "", self._consumer.consumer_group_metadata())

    def group_is_stable(self) -> bool:
        """A member that has been given an assignment (librdkafka runs the protocol in the
        background and tells the application only through the rebalance callbacks)."""
        return self._rebalances > 0 and bool(self._consumer.memberid())

    def serve_rebalances(self) -> None:
        """Let the rebalance callbacks run without handing out records: what one consume reads
        meanwhile waits for the next poll."""
        if self._buffered:
            return
        try:
            self._buffered = self._consumer.consume(self._max_records, 0)
        except KafkaException as error:
            raise kafka_error(error) from None

    def commit(self, offsets: dict) -> None:
        """Commit {tp: OffsetAndMetadata} synchronously (at-least-once)."""
        try:
            self._consumer.commit(offsets=[RdPartition(tp.topic, tp.partition, meta.offset)
                                           for tp, meta in offsets.items()], asynchronous=False)
        except KafkaException as error:
            raise kafka_error(error, committing=True) from None

    def close(self, autocommit: bool = False) -> None:
        self._consumer.close()


# topic.metadata.refresh.interval.ms too: with librdkafka's default (5 minutes) the admin client
# answered "Unknown partition" for a partition added to a topic for minutes (lag unknown).
_ADMIN_KEYS = {"bootstrap.servers", "topic.metadata.refresh.interval.ms", "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
               "sasl.kerberos.service.name", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
               "ssl.key.password", "ssl.crl.location", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
               "client.id", "socket.timeout.ms"}


class DeliveryFuture:
    """kafka-python's send() future: get(), add_errback(), failed(), is_done, exception; and
    `offset`, the record's offset once delivered (kafka-python's future.value.offset)."""

    __slots__ = ("_producer", "is_done", "exception", "_errbacks", "offset")

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self.is_done = False
        self.exception = None
        self._errbacks = None
        self.offset: int | None = None

    def _delivered(self, error, message) -> None:
        self.is_done = True
        if error is None:
            self.offset = message.offset()
        else:
            self.exception = kafka_error(KafkaException(error))
            for errback in self._errbacks or ():
                errback(self.exception)

    def failed(self) -> bool:
        return self.is_done and self.exception is not None

    def add_errback(self, errback) -> DeliveryFuture:
        if self.failed():
            errback(self.exception)
        else:
            self._errbacks = [*(self._errbacks or ()), errback]
        return self

    def get(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_done:
            if deadline is not None and time.monotonic() > deadline:
                raise KafkaTimeoutError(f"no delivery report in {timeout} s")
            self._producer.serve(0.05)
        if self.exception is not None:
            raise self.exception
        return None


class Producer:
    """A producer with kafka-python's calls; transactional under a transactional_id."""

    confluent = True

    def __init__(self, options: dict) -> None:
        config = librdkafka_config(options)
        # Keys to partitions as the Java client and kafka-python do (murmur2), not librdkafka's
        # CRC32 default: the same key lands on the same partition whichever transport sent it.
        config.setdefault("partitioner", "murmur2_random")
        config.setdefault("enable.idempotence", True)  # as kafka-python 3's default: a retry never duplicates
        config["error_cb"] = self._on_error
        self._timeout_s = options.get("bootstrap_timeout_ms", 10_000) / 1000
        self._max_block_s = options.get("max_block_ms", 60_000) / 1000
        self.fatal_error: KafkaError | None = None
        self._producer = ck.Producer(config)
        try:
            self._producer.list_topics(timeout=self._timeout_s)
        except KafkaException as error:
            raise KafkaTimeoutError(f"no broker answered in {self._timeout_s:g} s: {kafka_error(error)}") from None

    def _on_error(self, error) -> None:
        if error.fatal():
            self.fatal_error = kafka_error(KafkaException(error))

    def partitions_for(self, topic: str) -> set[int] | None:
        metadata = self._producer.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
        return None if metadata is None or metadata.error is not None else set(metadata.partitions)

    def send(self, topic: str, value=None, key=None, headers=None, partition: int | None = None) -> DeliveryFuture:
        future = DeliveryFuture(self)
        options = {"on_delivery": future._delivered}
        if headers:
            options["headers"] = list(headers)
        if partition is not None:
            options["partition"] = partition
        deadline = None
        while True:
            try:
                self._producer.produce(topic, value, key, **options)
                break
            except BufferError:  # the local queue is full: wait for deliveries, as max_block_ms says
                deadline = deadline or time.monotonic() + self._max_block_s
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"the producer's queue stayed full for {self._max_block_s:g} s") from None
                self.serve(0.05)
            except KafkaException as error:
                raise self._failed(error) from None
        self.serve(0)
        return future

    def serve(self, timeout_s: float) -> None:
        """Run delivery reports and error callbacks (librdkafka raises a fatal error here too)."""
        self._call(self._producer.poll, timeout_s)

    def flush(self, timeout: float | None = None) -> None:
        left = self._call(self._producer.flush, -1 if timeout is None else timeout)
        if left:
            raise KafkaTimeoutError(f"{left} records not delivered in {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered for up to `timeout` seconds, then let go of librdkafka's
        handle without Producer.close(): that aborts an open transaction, and librdkafka aborts
        a failed one by bumping the producer epoch (InitProducerId), which the coordinator
        answers by aborting whatever transaction of this id is open, a successor's included.
        An open transaction is aborted by the successor's init_transactions, or by the broker
        after transaction_timeout_ms."""
        if self._producer is None:
            return
        try:
            self._producer.flush(5 if timeout is None else timeout)
        except KafkaException:
            pass
        self._producer = None  # the handle is destroyed with its last reference (no abort)

    # ---- transactions ---------------------------------------------------------------------------

    def _failed(self, exception: KafkaException, committing: bool = False) -> KafkaError:
        """The kafka-python error for `exception`; one that ends this producer is remembered
        (clients.transaction_lost)."""
        error = kafka_error(exception, committing=committing)
        if ends_the_producer(exception, error):
            self.fatal_error = self.fatal_error or error
        return error

    def _call(self, what, *args, committing: bool = False):
        try:
            return what(*args)
        except KafkaException as exception:
            raise self._failed(exception, committing) from None

    def _call_within(self, timeout_s: float, what, *args, committing: bool = False):
        """`what(*args, timeout_s)`, given up on past timeout_s + TRANSACTION_GRACE_S.

        librdkafka's transactional calls take a timeout, but after a broker restart under load
        send_offsets_to_transaction was seen to block for 2 minutes past its 30 s (1 run in 5),
        which froze the worker. The call runs on a helper thread; one that has not returned in
        time raises KafkaTimeoutError (retriable, not fatal), and the worker replaces this
        producer: the new one's init_transactions fences it and settles its transaction before
        the group's offsets are read again."""
        outcome: dict = {}

        def call() -> None:
            try:
                outcome["value"] = what(*args, timeout_s)
            except BaseException as error:  # handed to the caller's thread
                outcome["error"] = error

        worker = threading.Thread(target=call, name=f"librdkafka {what.__name__}", daemon=True)
        worker.start()
        worker.join(timeout_s + TRANSACTION_GRACE_S)
        if worker.is_alive():
            raise KafkaTimeoutError(f"librdkafka's {what.__name__} did not return within {timeout_s:g} s "
                                    f"(+{TRANSACTION_GRACE_S:g} s); the producer is replaced")
        error = outcome.get("error")
        if isinstance(error, KafkaException):
            raise self._failed(error, committing) from None
        if error is not None:
            raise error
        return outcome.get("value")

    def init_transactions(self) -> None:
        self._call_within(self._max_block_s, self._producer.init_transactions)

    def begin_transaction(self) -> None:
        self._call(self._producer.begin_transaction)

    def commit_transaction_with(self, offsets: dict, group_metadata, timeout_s: float) -> None:
        """The group's {tp: offset} into the open transaction, then its commit."""
        if offsets:
            self._call_within(timeout_s, self._producer.send_offsets_to_transaction,
                              [RdPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()],
                              group_metadata.handle, committing=True)
        self._call_within(timeout_s, self._producer.commit_transaction, committing=True)

    def abort_transaction(self, timeout_s: float) -> None:
        self._call_within(timeout_s, self._producer.abort_transaction)
