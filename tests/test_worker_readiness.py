"""Readiness from progress (stream_nb.worker.metrics): a partition with records left to read
that stands still for stall_after_s makes /readyz 503 and shows on a gauge, without a broker."""

from __future__ import annotations

from stream_nb.worker.metrics import WorkerMetrics


def gauge(metrics: WorkerMetrics, topic: str, partition: int) -> float | None:
    return metrics.registry.get_sample_value("stream_nb_partition_stalled_seconds",
                                             {"topic": topic, "partition": str(partition)})


def test_a_partition_that_stands_still_with_a_lag_unreadies_the_worker_and_moving_readies_it():
    metrics = WorkerMetrics()
    metrics.ready, metrics.stall_after_s = True, 60.0
    metrics.last_error = "MessageSizeTooLargeError: [Error 10]"
    metrics.observe_progress({("in", 0): 5, ("in", 1): 7}, {("in", 0): 3, ("in", 1): 0}, now=1000.0)
    assert metrics.readiness(now=1059.0) == (True, "ready")
    # partition 0 still at 5 with 3 to read; partition 1 caught up (not stalled however long)
    metrics.observe_progress({("in", 0): 5, ("in", 1): 7}, {("in", 0): 3, ("in", 1): 0}, now=1030.0)
    ready, why = metrics.readiness(now=1061.0)
    assert not ready
    assert why == "stalled: in[0] at offset 5 (lag 3) for 61 s; last error: MessageSizeTooLargeError: [Error 10]"
    metrics.refresh_stalls(now=1061.0)
    assert (gauge(metrics, "in", 0), gauge(metrics, "in", 1)) == (61.0, 0.0)
    # it moves: ready again, the gauge back to 0
    metrics.observe_progress({("in", 0): 6, ("in", 1): 7}, {("in", 0): 2, ("in", 1): 0}, now=1062.0)
    assert metrics.readiness(now=1100.0) == (True, "ready") and gauge(metrics, "in", 0) == 0.0
    # a partition no longer this worker's leaves the gauge
    metrics.observe_progress({("in", 1): 7}, {("in", 1): 0}, now=1101.0)
    assert gauge(metrics, "in", 0) is None and metrics.stalls(now=5000.0) == {}


def test_a_stall_outranks_catching_up_and_catching_up_is_said():
    metrics = WorkerMetrics()
    assert metrics.readiness(now=0.0) == (False, "catching up with the labeled log")
    metrics.stall_after_s = 10.0
    metrics.observe_progress({("labeled", 0): 0}, {("labeled", 0): 1}, now=0.0)
    assert metrics.readiness(now=11.0)[1].startswith("stalled: labeled[0] at offset 0 (lag 1) for 11 s; last error: none")
