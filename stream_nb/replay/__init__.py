"""Replay for evaluation: read a recorded stream, predict then learn each event, report."""

from stream_nb.replay.metrics import PrequentialMetrics
from stream_nb.replay.prequential import PrequentialResult, replay_events
from stream_nb.replay.sources import read_events

__all__ = ["PrequentialMetrics", "PrequentialResult", "read_events", "replay_events"]
