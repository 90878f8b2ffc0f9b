"""Replay for evaluation: read a recorded stream, predict then learn each event, report."""

__all__ = ["PrequentialMetrics", "PrequentialResult", "read_events", "replay_events"]

_HOME = {"PrequentialMetrics": "stream_nb.replay.metrics", "PrequentialResult": "stream_nb.replay.prequential",
         "read_events": "stream_nb.replay.sources", "replay_events": "stream_nb.replay.prequential"}


def __getattr__(name: str):
    """The package's names, imported when first asked for: a replay's mail reader
    (stream_nb.replay.mail_reader) starts without the model."""
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'stream_nb.replay' has no attribute {name!r}")
