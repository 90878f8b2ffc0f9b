"""The worker loop: poll -> decode -> featurise -> predict_learn_many -> publish -> checkpoint.

Exactly-once state, at-least-once outputs: a checkpoint holds the model state together with the
next offset of every partition, written atomically; on start the worker loads the newest valid
checkpoint and seeks every partition to its offsets, so each labeled event is counted exactly
once however the process ended. Predictions and dead letters made after the last checkpoint may
be published again after a crash (same id, same source offset).

Order at a checkpoint (as Flink and Quix Streams do it): flush and confirm every output, write
the checkpoint, then commit the same offsets to the consumer group (for lag monitoring only).
"""

from __future__ import annotations

import heapq
import logging
import signal
import time

from kafka import TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from stream_nb.checkpoint import CheckpointStore, config_fingerprint
from stream_nb.config import Config
from stream_nb.events import Event, Rejected, SourcePosition, dead_letter_headers, decode_record, encode_prediction
from stream_nb.kafka.clients import assign_all_partitions, ensure_topics, make_consumer, make_producer
from stream_nb.model.registry import model_from_state
from stream_nb.model.decision import verdict
from stream_nb.model.explain import strongest_clues
from stream_nb.model.training import predict_learn
from stream_nb.replay.metrics import PrequentialMetrics

log = logging.getLogger("stream_nb.worker")


class DeliveryError(RuntimeError):
    """An output could not be delivered; the worker rewinds to its last checkpoint."""


def _rejected_by_us(event: Event, reason: str, detail: str, record) -> Rejected:
    """A decoded event the model cannot take (e.g. a negative count), for the dead-letter topic."""
    return Rejected(reason=reason, detail=detail[:200], value=record.value, key=record.key,
                    headers=tuple(record.headers or ()), source=event.source)


class Worker:
    def __init__(self, config: Config, recorder=None) -> None:
        self.config = config
        self.recorder = recorder  # optional EvaluationRecorder of the labeled traffic (the demo's plots)
        self.kafka = config.require_kafka()
        self.labeled_topics = frozenset(self.kafka["labeled_topics"])
        self.topics = list(dict.fromkeys([*self.kafka["labeled_topics"], *self.kafka["unlabeled_topics"]]))
        self.text_featurizer = config.build_featurizer()
        self.event_featurizer = config.build_event_featurizer()
        self.fingerprint = config_fingerprint(config.resolved())
        self.store = CheckpointStore(config.checkpoint["dir"], keep=config.checkpoint["keep"])
        self.model = config.build_model()
        self.positions: dict[tuple[str, int], int] = {}  # next offset to read, per partition
        self.metrics = PrequentialMetrics()
        self.checkpoint_id: str | None = None
        self.consumer = None
        self.producer = None
        self.partitions: list[TopicPartition] = []
        self._pending: list = []  # delivery futures since the last checkpoint
        self._single_partition: dict[str, bool] = {}
        self._changed_since_checkpoint = False
        self._stopping = False
        self._processed = 0
        self._learned_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()

    # ---- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        ensure_topics(self.kafka, self.config.kafka_client)
        self.consumer = make_consumer(self.kafka, self.config.kafka_client)
        self.producer = make_producer(self.kafka, self.config.kafka_client)
        self.partitions = assign_all_partitions(self.consumer, self.topics)
        self._single_partition = {
            topic: len(self.consumer.partitions_for_topic(topic) or ()) == 1
            for topic in (self.kafka["predictions_topic"], self.kafka["dead_letter_topic"])}
        self._restore()

    def _restore(self) -> None:
        """Load the newest valid checkpoint (or start empty) and seek every partition to it."""
        checkpoint = self.store.load_latest(self.fingerprint)
        if checkpoint is None:
            self.model = self.config.build_model()
            self.positions = {}
            self.metrics = PrequentialMetrics()
            self.checkpoint_id = None
            log.info("no checkpoint in %s: starting from the beginning of every partition", self.store.directory)
        else:
            self.model = model_from_state(checkpoint.model_state)
            self.positions = dict(checkpoint.offsets)
            self.metrics = _metrics_from(checkpoint.extra.get("metrics"))
            self.checkpoint_id = checkpoint.id
            log.info("restored checkpoint %s: %d events learned", checkpoint.id, int(self.model.events_learned))
        for partition in self.partitions:
            offset = self.positions.get((partition.topic, partition.partition))
            if offset is None:
                self.consumer.seek_to_beginning(partition)
            else:
                self.consumer.seek(partition, offset)
        self._pending = []
        self._learned_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._changed_since_checkpoint = False

    def request_stop(self, *_signal) -> None:
        self._stopping = True

    def run(self, *, stop_when_idle_s: float | None = None, install_signal_handlers: bool = True) -> None:
        """Process until SIGTERM/SIGINT (or `stop_when_idle_s` seconds without a record), then
        write a final checkpoint and close."""
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self.request_stop)
            signal.signal(signal.SIGINT, self.request_stop)
        if self.consumer is None:
            self.start()
        idle_since = time.monotonic()
        last_log, processed_at_log = time.monotonic(), self._processed
        try:
            while not self._stopping:
                try:
                    had_records = self._poll_once()
                    if self._checkpoint_due():
                        self.checkpoint()
                except (KafkaError, DeliveryError) as error:
                    self._rewind(error)
                    continue
                now = time.monotonic()
                if had_records:
                    idle_since = now
                elif stop_when_idle_s is not None and now - idle_since >= stop_when_idle_s:
                    break
                if now - last_log >= self.config.worker["log_interval_s"]:
                    self._log_progress(now - last_log, self._processed - processed_at_log)
                    last_log, processed_at_log = now, self._processed
            self.checkpoint()
        finally:
            self.close()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=10)
        if self.consumer is not None:
            self.consumer.close(autocommit=False)
        self.consumer = self.producer = None

    def _rewind(self, error: Exception) -> None:
        """Ride out a broker outage: back to the last checkpoint, then carry on."""
        log.warning("%s: rewinding to checkpoint %s and retrying in 2 s", error, self.checkpoint_id)
        time.sleep(2.0)
        self._restore()

    # ---- one poll ---------------------------------------------------------------------------

    def _poll_once(self) -> bool:
        polled = self.consumer.poll(timeout_ms=self.kafka["poll_timeout_ms"], max_records=self.kafka["poll_max_records"])
        if not polled:
            return False
        # Each partition in offset order; partitions merged by timestamp (arrival order).
        records = list(heapq.merge(*polled.values(), key=lambda record: record.timestamp))
        self.process(records)
        return True

    def process(self, records: list) -> None:
        """Decode, learn and predict (prequentially, in the given order), publish."""
        events: list[Event] = []
        origin = []
        max_bytes = self.kafka["max_message_bytes"]
        for record in records:
            source = SourcePosition(record.topic, record.partition, record.offset)
            decoded = decode_record(record.value, record.key, record.headers or (), source,
                                    labeled=record.topic in self.labeled_topics, max_bytes=max_bytes)
            if isinstance(decoded, Rejected):
                self._dead_letter(decoded)
            else:
                events.append(decoded)
                origin.append(record)
        if events:
            self._learn_and_predict(events, origin)
        for record in records:
            self.positions[(record.topic, record.partition)] = record.offset + 1
        self._processed += len(records)
        self._changed_since_checkpoint = True

    def _learn_and_predict(self, events: list[Event], origin: list) -> None:
        events, origin = self._screen_labels(events, origin)
        training = self.config.training
        learned_at_start = int(self.model.events_learned)
        try:
            features = self._featurise(events)
            labels = [event.label for event in events]
            probabilities, learned = predict_learn(self.model, features, labels, **training)
        except (TypeError, ValueError):
            # One bad event fails the whole batch before anything is learned: go one by one so
            # only the bad ones are set aside (the results are the same, bit for bit).
            probabilities, learned, kept, kept_origin = [], [], [], []
            for event, record in zip(events, origin):
                try:
                    one, one_learned = predict_learn(self.model, self._featurise([event]), [event.label], **training)
                except (TypeError, ValueError) as error:
                    self._dead_letter(_rejected_by_us(event, "rejected_by_model", str(error), record))
                    continue
                probabilities.extend(one)
                learned.extend(one_learned)
                kept.append(event)
                kept_origin.append(record)
            events, origin = kept, kept_origin
        learned_before = learned_at_start
        band, positive = self.config.evaluation["unsure_band"], self.config.evaluation["positive"]
        n_clues = self.config.worker["clues"]
        for event, record, proba, was_learned in zip(events, origin, probabilities, learned):
            if event.label is None:
                try:
                    key, value = encode_prediction(
                        event, proba, events_learned=learned_before, checkpoint=self.checkpoint_id,
                        verdict=None if band is None else verdict(proba, positive, band),
                        clues=self._clues(event, n_clues) if n_clues and proba else None)
                except (TypeError, ValueError) as error:
                    self._dead_letter(_rejected_by_us(event, "prediction_not_encodable", str(error), record))
                    continue
                self._send(self.kafka["predictions_topic"], value, key, None)
            else:
                if proba:  # as River and replay: an event predicted before any class is not scored
                    predicted = max(proba, key=proba.get)
                    self.metrics.update(event.label, predicted, proba)
                    if self.recorder is not None:
                        self.recorder.update(event.label, predicted, proba)
                if was_learned:
                    learned_before += 1
                    self._learned_since_checkpoint += 1

    def _clues(self, event: Event, top: int) -> list:
        """The strongest clues of an event, computed with the model as it stands after the poll
        batch (so they may reflect up to poll_max_records more labeled events than its P(c|x))."""
        if event.features is None:
            x = self.text_featurizer.transform_one(event.text or "")
        else:
            x = self.event_featurizer.transform_one({"text": event.text, "features": event.features})
        return strongest_clues(self.model, x, top=top)

    def _screen_labels(self, events: list[Event], origin: list) -> tuple[list, list]:
        """Labels 1 and "1" would be two classes with one JSON name: keep the first type seen."""
        known = {str(label): label for label in self.model.classes_}
        kept, kept_origin = [], []
        for event, record in zip(events, origin):
            label = event.label
            if label is not None:
                existing = known.setdefault(str(label), label)
                if type(existing) is not type(label):
                    self._dead_letter(_rejected_by_us(
                        event, "label_type_conflict",
                        f"label {label!r} clashes with the class {existing!r} already learned", record))
                    continue
            kept.append(event)
            kept_origin.append(record)
        return kept, kept_origin

    def _featurise(self, events: list[Event]):
        if all(event.features is None for event in events):  # text only: no dict per message
            return self.text_featurizer.transform_sparse([event.text or "" for event in events])
        return self.event_featurizer.transform_many(
            [{"text": event.text, "features": event.features} for event in events])

    def _dead_letter(self, rejected: Rejected) -> None:
        log.debug("dead letter %s:%d:%d %s", rejected.source.topic, rejected.source.partition,
                  rejected.source.offset, rejected.reason)
        self._send(self.kafka["dead_letter_topic"], rejected.value, rejected.key, dead_letter_headers(rejected))

    def _send(self, topic: str, value, key, headers) -> None:
        # A one-partition topic needs no key hash: kafka-python's murmur2 is pure Python and
        # cost about a fifth of each send; with more partitions the key decides, as usual.
        partition = 0 if self._single_partition.get(topic) else None
        self._pending.append(self.producer.send(topic, value=value, key=key, headers=headers, partition=partition))

    # ---- checkpoints --------------------------------------------------------------------------

    def _checkpoint_due(self) -> bool:
        if not self._changed_since_checkpoint:
            return False  # an idle worker writes no copies of the same checkpoint
        every = self.config.checkpoint["every_events"]
        interval = self.config.checkpoint["interval_s"]
        return bool((every and self._learned_since_checkpoint >= every)
                    or (interval and time.monotonic() - self._last_checkpoint >= interval))

    def checkpoint(self) -> None:
        """Flush and confirm outputs, save state with offsets, then commit offsets to the group."""
        if not self._changed_since_checkpoint:
            return
        self.producer.flush()
        failed = [future for future in self._pending if future.failed()]
        if failed:
            raise DeliveryError(f"{len(failed)} outputs were not delivered: {failed[0].exception}")
        checkpoint = self.store.save(self.model.to_state(), self.positions, self.fingerprint,
                                     extra={"metrics": _metrics_to(self.metrics), "events_processed": self._processed})
        self.checkpoint_id = checkpoint.id
        self._changed_since_checkpoint = False
        self._pending = []
        self._learned_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        offsets = {TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
                   for (topic, partition), offset in self.positions.items()}
        if offsets:
            try:
                self.consumer.commit(offsets)
            except KafkaError as error:  # monitoring only: the checkpoint is the truth
                log.warning("could not commit offsets to group %s: %s", self.kafka["group_id"], error)
        log.info("checkpoint %s: %d events learned", checkpoint.id, int(self.model.events_learned))

    # ---- reporting ------------------------------------------------------------------------------

    def lag(self) -> int:
        ends = self.consumer.end_offsets(self.partitions)
        return sum(max(0, end - self.positions.get((tp.topic, tp.partition), 0)) for tp, end in ends.items())

    def _log_progress(self, seconds: float, processed: int) -> None:
        try:
            lag = self.lag()
        except KafkaError:
            lag = -1
        log.info("events %d (%.0f/s), learned %d, lag %s, prequential accuracy %.4f",
                 self._processed, processed / seconds if seconds > 0 else 0.0, int(self.model.events_learned),
                 lag if lag >= 0 else "unknown", self.metrics.accuracy)


def _metrics_to(metrics: PrequentialMetrics) -> dict:
    return {"events": metrics.events, "correct": metrics.correct, "log_loss_sum": metrics.log_loss_sum,
            "confusion": [[true, predicted, count] for (true, predicted), count in metrics.confusion.items()]}


def _metrics_from(saved: dict | None) -> PrequentialMetrics:
    metrics = PrequentialMetrics()
    if saved:
        metrics.events, metrics.correct = saved["events"], saved["correct"]
        metrics.log_loss_sum = saved["log_loss_sum"]
        for true, predicted, count in saved["confusion"]:
            metrics.confusion[(true, predicted)] = count
    return metrics
