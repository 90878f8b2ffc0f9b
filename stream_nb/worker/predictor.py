"""The predictor: unlabeled records decoded, featurised and scored with the model as it stands,
each prediction naming the labeled offsets its model reflects (so a replay reproduces it), sent
into the open outputs with the dead letters (stream_nb.worker.commits commits them)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from stream_nb.events import Event, PredictionEncoder, Rejected, dead_letter_record
from stream_nb.events.codec import ORIGINAL_BYTES_HEADER
from stream_nb.verdicts.rules import VerdictRules
from stream_nb.worker.records import (
    batch_or_one_by_one,
    count_consumed,
    decode,
    featurise_or_reject,
    rejected_by_us,
)

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker

log = logging.getLogger("stream_nb.worker")


class Predictor:
    """Predicts unlabeled records and publishes predictions and dead letters into worker.outputs."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.rules = VerdictRules.of(worker.config, worker.mail_featurizer.max_bytes)
        self._single_partition: dict[str, bool] = {}

    def count_output_partitions(self, group) -> None:
        """Which output topics have one partition (their sends need no key hash), as `group` sees them."""
        kafka = self.worker.kafka
        self._single_partition = {
            topic: len(group.partitions_for_topic(topic) or ()) == 1
            for topic in (kafka["predictions_topic"], kafka["dead_letter_topic"])}

    def _predict_only(self, events: list[Event], X) -> list[dict]:
        """The model's prediction of each event; with per-key state, by each event's key's model
        (stream_nb.model.personal; a key with no counts gets exactly the global model's)."""
        keyed = self.worker.keyed
        if keyed is None:
            return self.worker.model.predict_proba_many(X)
        return keyed.personal.predict_many(X, [event.key for event in events],
                                           [keyed.table_of(event.key) for event in events])

    def predict(self, records: list) -> None:
        """Decode and predict unlabeled records with the model as it stands; publish."""
        w = self.worker
        count_consumed(w.telemetry, records)
        events, origin = decode(records, labeled=False, rejected=self.dead_letter, kafka=w.kafka,
                                classes=w.config.classes, keyed=w.keyed is not None)
        if events:
            events, origin, X = featurise_or_reject(events, origin, self.dead_letter, w.featurise, learning=False)
        if events and w.keyed is not None:
            events, origin, X = self._routed(events, origin, X)
        if events:
            probabilities = batch_or_one_by_one(w.model, events, origin, X, self._predict_only, self.dead_letter,
                                                "scoring")
            self.publish_predictions(events, origin, probabilities, X)
        w._processed += len(records)

    def _routed(self, events: list[Event], origin: list, X) -> tuple[list, list, object]:
        """Events whose key belongs to the partition they came on; the others are dead letters
        (their key's state is on another partition: another worker may own it)."""
        keyed = self.worker.keyed
        kept = []
        for i, (event, record) in enumerate(zip(events, origin)):
            expected = keyed.misrouted(event.key, record.partition)
            if expected is None:
                kept.append(i)
                continue
            self.dead_letter(rejected_by_us(
                event, "misrouted_key", f"key {event.key!r} belongs to partition {expected} (Kafka's default "
                f"partitioner, murmur2), not {record.partition}: its state is there", record))
        if len(kept) == len(events):
            return events, origin, X
        events, origin = [events[i] for i in kept], [origin[i] for i in kept]
        return events, origin, (self.worker.featurise(events, learning=False) if events else [])

    def publish_predictions(self, events: list[Event], origin: list, probabilities: list, X) -> None:
        w = self.worker
        model = w.model
        encoder = PredictionEncoder(events_learned=int(model.events_learned), checkpoint=w.checkpoints.checkpoint_id,
                                    labeled_offsets=w.labeled.offsets())
        # the score (always a number in the message), the band's verdict, the clues, and whether mail
        # longer than what is read of it was predicted on what was read
        judged = self.rules.judge(model, events, X, probabilities)
        messages = encoder.encode_many(events, probabilities, judged.verdicts, judged.clues, judged.published,
                                       judged.truncated or None)
        # The latency histogram costs ~1 us a prediction: only when metrics are served.
        sent, timed = 0, w.reporting.server is not None
        for event, record, encoded in zip(events, origin, messages):
            if encoded is None:
                continue  # dead-lettered above
            if isinstance(encoded, Exception):
                self.dead_letter(rejected_by_us(event, "prediction_not_encodable", str(encoded), record))
                continue
            key, value = encoded
            self.send(w.kafka["predictions_topic"], value, key, None)
            sent += 1
            if timed and record.timestamp and record.timestamp > 0:  # source append (or create) time, ms
                w.telemetry.latency.observe(max(0.0, time.time() - record.timestamp / 1000))
        w.telemetry.predictions.inc(sent)

    def dead_letter(self, rejected: Rejected) -> None:
        log.debug("dead letter %s:%d:%d %s", rejected.source.topic, rejected.source.partition,
                  rejected.source.offset, rejected.reason)
        value, key, headers = dead_letter_record(rejected, self.worker.dead_letter_bytes)
        if headers and headers[-1][0] == ORIGINAL_BYTES_HEADER:  # cut to fit its topic
            self.worker.telemetry.dead_letters_cut.inc()
            log.warning("the dead letter of %s:%d:%d (%s) is cut to the dead-letter topic's %d bytes (%s)",
                        rejected.source.topic, rejected.source.partition, rejected.source.offset, rejected.reason,
                        self.worker.dead_letter_bytes, headers[-1][1].decode("ascii"))
        self.send(self.worker.kafka["dead_letter_topic"], value, key, headers)
        self.worker.telemetry.dead_letters.labels(rejected.reason).inc()

    def send(self, topic: str, value, key, headers) -> None:
        # A one-partition topic needs no key hash: kafka-python's murmur2 is pure Python and
        # cost about a fifth of each send; with more partitions the key decides, as usual.
        self.worker.outputs.send(topic, value, key, headers, 0 if self._single_partition.get(topic) else None)
