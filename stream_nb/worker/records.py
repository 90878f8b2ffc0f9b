"""From records to events to features, for learning and predicting alike: decoding, featurising,
and the per-event fallback that sets one failing event aside as a dead letter (Rejected) while
the others keep the results their batch would have given."""

from __future__ import annotations

from kafka import TopicPartition
from kafka.errors import KafkaError

from stream_nb.events import Event, Rejected, SourcePosition, record_decoder
from stream_nb.events.raw_mail import decoder_for
from stream_nb.features.mail import MailFeaturizer, UnreadableMail
from stream_nb.features.text import transform_sparse_views
from stream_nb.model.base import ViewBatch
from stream_nb.worker.outputs import Fenced

# One event's decoding, featurising or scoring that raises anything but these is that event's
# failure alone: it is dead-lettered and the worker goes on. These stop the step instead: no
# memory left, and Kafka's errors (a fenced transaction among them), which Membership.recover or
# the caller handles. (KeyboardInterrupt and SystemExit are no Exception: they always propagate.)
NOT_ONE_EVENTS_FAILURE = (MemoryError, KafkaError, Fenced)


# The reasons the worker gives a dead letter after the decoder accepted the record (the
# decoder's own are stream_nb.events.codec's REASONS), one line each, for the reference
# (docs/reference/dead-letters.md, written by stream_nb.reference; tests/test_reference_docs.py
# fails when the code gives a reason that is not here).
WORKER_REASONS = {
    "too_many_classes": "a labeled event whose label would be a class beyond `[model] max_classes`",
    "label_type_conflict": "a label whose name is a class already learned with another type (`1` and `\"1\"`)",
    "rejected_by_model": "the model refused the event (a negative count, text for a Gaussian model, a take-back "
                         "the model refuses)",
    "unreadable_mail": "a message of which nothing can be read (empty or only whitespace, or one the MIME parser "
                       "could not read at all)",
    "processing_failed": "decoding, featurising or scoring raised anything but the model's refusal; the exception "
                         "is named in `stream-nb-detail`",
    "misrouted_key": "under `[personal]`, an unlabeled record on another partition than its key's (produced with "
                     "a non-default partitioner)",
    "prediction_not_encodable": "the event's prediction could not be encoded as the prediction message",
}


class ModelStateUnknown(RuntimeError):
    """A labeled batch raised after part of it was learned: the model no longer matches its
    labeled offsets; the worker stops (its checkpoint and the log restore it)."""


def rejected_by_us(event: Event, reason: str, detail: str, record) -> Rejected:
    """A decoded event the model cannot take (e.g. a negative count), for the dead-letter topic."""
    return Rejected(reason=reason, detail=detail[:200], value=record.value, key=record.key,
                    headers=tuple(record.headers or ()), source=event.source)


def refusal(event: Event, error: Exception, stage: str, record) -> Rejected:
    """The dead letter of an event whose `stage` raised `error`: a TypeError or ValueError is
    the model refusing the event (rejected_by_model); anything else is processing_failed, the
    exception named (e.g. an IndexError of an inconsistent model)."""
    if isinstance(error, (TypeError, ValueError)):
        return rejected_by_us(event, error.reason if isinstance(error, UnreadableMail) else "rejected_by_model",
                              str(error), record)
    return rejected_by_us(event, "processing_failed", f"{stage} raised {type(error).__name__}: {error}", record)


def count_consumed(telemetry, records: list) -> None:
    counts: dict = {}
    for record in records:
        counts[record.topic] = counts.get(record.topic, 0) + 1
    for topic, count in counts.items():
        telemetry.consumed.labels(topic).inc(count)


def decode(records: list, labeled: bool, rejected, kafka: dict, classes, keyed: bool = False) -> tuple[list[Event], list]:
    """(events, their records); each message that is not a valid event goes to `rejected`.
    `keyed` ([personal]): raw mail gets its event key (`raw_mail.decoder_for`)."""
    events, origin = [], []
    decoder = (decoder_for(kafka, labeled=labeled, classes=classes, keyed=keyed)  # raw mail
               if kafka["value_format"] == "mail" else
               record_decoder(labeled=labeled, max_bytes=kafka["max_message_bytes"], classes=classes))
    for record in records:
        source = SourcePosition(record.topic, record.partition, record.offset)
        try:
            decoded = decoder(record.value, record.key, record.headers or (), source)
        except NOT_ONE_EVENTS_FAILURE:
            raise
        except Exception as error:  # the decoder's own failure, not a verdict on the message
            decoded = Rejected(reason="processing_failed", detail=f"decoding raised {type(error).__name__}: "
                               f"{error}"[:200], value=record.value, key=record.key,
                               headers=tuple(record.headers or ()), source=source)
        if type(decoded) is Rejected:
            rejected(decoded)
        else:
            events.append(decoded)
            origin.append(record)
    return events, origin


def featurise(events: list[Event], learning: bool, *, models: list, reads_text: bool, views: list[tuple]) -> list:
    """Each view's batch of `events` by its (text, mail) featurisers, for the model of the same place
    (several views read each text once for all: transform_sparse_views, transform_batch_views)."""
    # no dict per message: the C featuriser looks the names up in the model's vocabulary (and
    # numbers the new ones only for a batch that may learn them)
    vocabularies = [getattr(model, "vocabulary", None) for model in models]
    if reads_text and all(event.features is None and event.mail is None for event in events):
        return transform_sparse_views([text for text, _ in views], [event.text or "" for event in events],
                                      vocabularies, number_unknown=learning)
    return MailFeaturizer.transform_batch_views(  # mail events, structured features, or both
        [mail for _, mail in views],
        [{"text": event.text, "features": event.features, "mail": event.mail} for event in events],
        vocabularies, number_unknown=learning)


def more_views(config, first: MailFeaturizer) -> list[tuple]:
    """(text featuriser, mail featuriser) of each [views.NAME] of the configuration, in order: the
    views beyond [features]'s own, each reading a message through `first`'s parse (once)."""
    return [(config.build_featurizer(name), MailFeaturizer(config.build_event_featurizer(name), reader=first))
            for name in config.views]


def featurise_views(events: list[Event], learning: bool, *, model, reads_text: bool, views: list[tuple]):
    """`featurise` by each view's (text, mail) featurisers: one view, the batch itself; several
    (an `Experts` model), a ViewBatch of each view's batch, looked up in its expert's vocabulary."""
    return ViewBatch.by_view(model, views, lambda views, experts: featurise(
        events, learning, models=experts, reads_text=reads_text, views=views))


def featurise_or_reject(events: list[Event], origin: list, reject, featurise,
                        learning: bool = True) -> tuple[list, list, object]:
    """(events, their records, their features by `featurise(events, learning)`): an event the
    featuriser refuses (text sent to a categorical or gaussian model, a string where a number is
    needed), or fails on, goes to `reject`."""
    try:
        return events, origin, featurise(events, learning)
    except NOT_ONE_EVENTS_FAILURE:
        raise
    except Exception:
        kept, kept_origin = [], []
        for event, record in zip(events, origin):
            try:
                featurise([event], learning)
            except NOT_ONE_EVENTS_FAILURE:
                raise
            except Exception as error:
                reject(refusal(event, error, "featurising", record))
                continue
            kept.append(event)
            kept_origin.append(record)
        return kept, kept_origin, featurise(kept, learning) if kept else []


def batch_or_one_by_one(model, events: list[Event], origin: list, X, compute, reject, stage: str) -> list:
    """compute(events, their features X), one result per event. One bad event makes the
    model refuse the whole batch before anything is learned (in every training mode), so on
    a refusal, or any failure of one event (NOT_ONE_EVENTS_FAILURE aside), the events go
    one at a time: each failing one goes to `reject` (its result is None), the others get
    the results the batch would have given. A batch that failed after learning part of
    itself cannot be redone event by event (those would be learned twice): ModelStateUnknown."""
    learned_before = model.events_learned
    try:
        return compute(events, X)
    except NOT_ONE_EVENTS_FAILURE:
        raise
    except Exception as batch_error:
        _stop_if_half_learned(model, learned_before, f"{stage} of a batch", batch_error)
        results = []
        for i, (event, record) in enumerate(zip(events, origin)):
            learned_before = model.events_learned
            try:
                results.extend(compute([event], X[i : i + 1]))
            except NOT_ONE_EVENTS_FAILURE:
                raise
            except Exception as error:
                _stop_if_half_learned(model, learned_before, f"{stage} of event {event.id!r}", error)
                reject(refusal(event, error, stage, record))
                results.append(None)
        return results


def _stop_if_half_learned(model, learned_before: int, what: str, error: Exception) -> None:
    """ModelStateUnknown when `what` raised `error` after the model had learned part of it."""
    if model.events_learned != learned_before:
        raise ModelStateUnknown(f"{what} raised {type(error).__name__}: {error} after learning part of it; "
                                f"stopping (a restart resumes from the last checkpoint)") from error


def first_offsets(records: list) -> dict[TopicPartition, int]:
    """Each partition's first offset among polled `records`."""
    first: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        first[tp] = min(first.get(tp, record.offset), record.offset)
    return first
