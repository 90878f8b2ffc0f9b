"""The worker: consume labeled and unlabeled events, learn and predict, publish, checkpoint."""

from stream_nb.worker.loop import Worker

__all__ = ["Worker"]
