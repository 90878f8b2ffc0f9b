"""Prequential (test-then-train) replay of a stream through a model, in batches."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from stream_nb.replay.metrics import PrequentialMetrics


@dataclass
class PrequentialResult:
    metrics: PrequentialMetrics
    events: int = 0
    seconds: float = 0.0
    last_predictions: list = field(default_factory=list)  # (event, probabilities) of the last batch

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def _batches(events: Iterable[dict], size: int) -> Iterator[list[dict]]:
    iterator = iter(events)
    while batch := list(islice(iterator, size)):
        yield batch


def replay_events(events: Iterable[dict], model, featurizer, *, batch_size: int = 1000,
                  on_batch: Callable[[PrequentialResult], None] | None = None) -> PrequentialResult:
    """Predict each event with the state so far, then learn it if it has a label.

    Events are {"id", "text", "label"}; a batch goes through `model.predict_learn_many`, which
    equals the per-event loop exactly, so the batch size changes speed, never results.
    Metrics count the labeled events; the predicted class is the most probable one (ties: the
    first class in the model's order, as `predict_one`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    result = PrequentialResult(PrequentialMetrics())
    started = time.perf_counter()
    for batch in _batches(events, batch_size):
        features = featurizer.transform_sparse([event["text"] for event in batch])
        labels = [event.get("label") for event in batch]
        predictions = model.predict_learn_many(features, labels)
        for label, probabilities in zip(labels, predictions):
            if label is not None:
                predicted = max(probabilities, key=probabilities.get) if probabilities else None
                result.metrics.update(label, predicted, probabilities)
        result.events += len(batch)
        result.seconds = time.perf_counter() - started
        result.last_predictions = list(zip(batch, predictions))
        if on_batch is not None:
            on_batch(result)
    return result
