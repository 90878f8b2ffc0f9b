"""What the worker reports: its lag, the Prometheus gauges and readiness (served on
worker.metrics_port by stream_nb.worker.metrics), and the progress line of its log."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka.errors import KafkaError

from stream_nb.config import ConfigError
from stream_nb.kafka.clients import group_is_stable
from stream_nb.worker.metrics import MetricsServer
from stream_nb.worker.outage import OUTAGE

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker

log = logging.getLogger("stream_nb.worker")


class Reporting:
    """Reads the worker's state into worker.telemetry and the log; serves the metrics when configured."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.server: MetricsServer | None = None
        self._caught_up_once = False
        self._evicted_reported = 0  # of the model's features_evicted, already added to the counter

    def serve_metrics(self) -> None:
        w = self.worker
        port = w.config.worker["metrics_port"]
        if not port or self.server is not None:
            return
        host = w.config.worker["metrics_host"]
        try:
            # alive: a step within twice the longest a healthy step may take (a stall that long
            # already makes the worker confirm its transactional id), and at least a minute
            self.server = MetricsServer(w.telemetry, host, port, alive_within_s=max(60.0, 2 * w.membership.stall_limit_s))
        except OSError as error:
            raise ConfigError(f"worker.metrics_port: cannot listen on {host}:{port} ({error.strerror or error})") from None

    def caught_up(self) -> bool:
        """In the group (assigned, even if nothing), and nothing left to read."""
        w = self.worker
        return group_is_stable(w.group) and not w._assignment_changed and self.lag() == 0

    def lag(self) -> int:
        """Records not yet read: the whole labeled log's, plus this worker's unlabeled partitions'
        (-1 when the broker cannot say)."""
        lags = self.partition_lags()
        return -1 if lags is None else sum(lags.values())

    def partition_lags(self) -> dict[tuple[str, int], int] | None:
        """{(topic, partition): records not yet read} of every labeled partition, of this
        worker's unlabeled ones and of the labeled partitions it forwards ([personal]: a label
        not yet in the labeled order is not read either); None when the broker cannot say."""
        w = self.worker
        try:
            lags = w.labeled.partition_lags()
            if w.forwarding is not None:
                lags.update(w.forwarding.lags())
            assigned = [tp for tp in w.group.assignment() if tp.topic not in w.labeled_topics]
            unlabeled_ends = w.group.end_offsets(assigned) if assigned else {}
            lags.update({(tp.topic, tp.partition): max(0, end - w.group.position(tp))
                         for tp, end in unlabeled_ends.items()})
        except (KafkaError, KeyError, AssertionError):  # a partition deleted or moved meanwhile
            return None
        return lags

    def partition_positions(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): next offset to read} of the partitions `partition_lags` covers."""
        w = self.worker
        positions = dict(w.labeled.positions)
        if w.forwarding is not None:  # the labeled partitions it forwards: their next offset to forward
            positions.update({(tp.topic, tp.partition): offset for tp, offset in w.forwarding.positions().items()})
        try:
            positions.update({(tp.topic, tp.partition): w.group.position(tp) for tp in w.group.assignment()
                              if tp.topic not in w.labeled_topics})
        except (KafkaError, KeyError, AssertionError):
            pass
        return positions

    def refresh_telemetry(self, lags: dict | None) -> None:
        """The gauges (lag, model size, prequential figures) and readiness: in the group, and the
        labeled log learned up to its end as it was just now."""
        w = self.worker
        telemetry = w.telemetry
        if lags is not None:
            OUTAGE.back()  # the broker answered
            for (topic, partition), lag in lags.items():
                telemetry.lag.labels(topic, str(partition)).set(lag)
            labeled_lag = sum(lag for (topic, _), lag in lags.items() if topic in w.labeled_topics)
            in_group = group_is_stable(w.group) and not w._assignment_changed
            # ready once caught up after start; a burst of new labels later does not unready it
            self._caught_up_once = self._caught_up_once or (labeled_lag == 0 and in_group)
            telemetry.ready = self._caught_up_once and in_group
            telemetry.observe_progress(self.partition_positions(), lags)
        else:
            telemetry.refresh_stalls()
        telemetry.vocabulary.set(w.model.n_features)
        evicted = getattr(w.model, "features_evicted", 0)
        telemetry.evicted.inc(max(0, evicted - self._evicted_reported))
        self._evicted_reported = evicted
        telemetry.classes.set(len(w.model.classes_))
        telemetry.observe_views(w.model)
        telemetry.accuracy.set(w.metrics.accuracy)
        for label, scores in w.metrics.per_class().items():
            telemetry.f1.labels(str(label)).set(scores["f1"])

    def log_progress(self, seconds: float, processed: int) -> None:
        w = self.worker
        lags = self.partition_lags()
        self.refresh_telemetry(lags)
        lag = -1 if lags is None else sum(lags.values())
        log.info("events %d (%.0f/s), learned %d, lag %s, prequential accuracy %.4f",
                 w._processed, processed / seconds if seconds > 0 else 0.0, int(w.model.events_learned),
                 lag if lag >= 0 else "unknown", w.metrics.accuracy)

    def stop_serving(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
