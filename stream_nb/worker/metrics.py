"""The worker's Prometheus metrics, and its liveness and readiness, over HTTP.

`[worker] metrics_port` (0: off) serves

    /metrics   Prometheus exposition (prometheus_client's text format)
    /healthz   200 while the loop turns (a step started within `alive_within_s`), else 503
    /readyz    200 once the worker is in its group and has learned the labeled log up to the
               end it saw (it then predicts with every label already appended), and while no
               partition with records left to read has stood still for `stall_after_s`; else
               503, naming the stalled partitions and the last Kafka error

on `[worker] metrics_host` (127.0.0.1 by default; 0.0.0.0 in a container that is scraped).
Each worker has a registry of its own (several workers in one process, as the tests run them,
do not share counters). Counters count what was sent or done, including outputs that a rewind
then redid (a rewind is counted too).
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger("stream_nb.worker")

# Prediction latency (source append -> prediction send): ms to tens of seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PAUSE_BUCKETS = (0.001, 0.0025, 0.005, *CHECKPOINT_BUCKETS)  # a state copy takes milliseconds


class WorkerMetrics:
    def __init__(self) -> None:
        registry = self.registry = CollectorRegistry(auto_describe=True)
        self.consumed = Counter("stream_nb_events_consumed", "Records read, by topic", ["topic"], registry=registry)
        self.learned = Counter("stream_nb_events_learned", "Labeled events learned", registry=registry)
        self.predictions = Counter("stream_nb_predictions", "Predictions sent", registry=registry)
        self.dead_letters = Counter("stream_nb_dead_letters", "Events sent to the dead-letter topic, by reason",
                                    ["reason"], registry=registry)
        self.dead_letters_cut = Counter("stream_nb_dead_letters_truncated", "Dead letters cut to fit the dead-letter "
                                        "topic's max.message.bytes (headers stream-nb-truncated, "
                                        "stream-nb-original-bytes)", registry=registry)
        self.rewinds = Counter("stream_nb_rewinds", "Outputs since the last commit dropped and redone",
                               registry=registry)
        self.checkpoint_seconds = Histogram("stream_nb_checkpoint_duration_seconds", "Time to write a checkpoint",
                                            buckets=CHECKPOINT_BUCKETS, registry=registry)
        self.checkpoint_pause = Histogram("stream_nb_checkpoint_pause_seconds",
                                          "Time the loop stood still for a checkpoint (the state copy, "
                                          "or the whole write when not in the background)",
                                          buckets=PAUSE_BUCKETS, registry=registry)
        self.checkpoint_failures = Counter("stream_nb_checkpoint_failures", "Checkpoints that could not be written",
                                           registry=registry)
        self.checkpoint_bytes = Gauge("stream_nb_checkpoint_size_bytes", "Size of the newest checkpoint file",
                                      registry=registry)
        self.vocabulary = Gauge("stream_nb_vocabulary_size", "Distinct features (columns) of the model",
                                registry=registry)
        self.evicted = Counter("stream_nb_features_evicted", "Features dropped by the feature budget "
                               "([model] max_features)", registry=registry)
        self.classes = Gauge("stream_nb_classes", "Classes the model knows", registry=registry)
        self.view_weight = Gauge("stream_nb_view_weight", "Weight of each feature view in the combination "
                                 "([views]; a distribution)", ["view"], registry=registry)
        self.lag = Gauge("stream_nb_consumer_lag", "Records not yet read, per partition",
                         ["topic", "partition"], registry=registry)
        self.latency = Histogram("stream_nb_prediction_latency_seconds",
                                 "From the event's append to the source topic to its prediction's send",
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.accuracy = Gauge("stream_nb_prequential_accuracy",
                              "Accuracy of the labeled events predicted before they were learned", registry=registry)
        self.f1 = Gauge("stream_nb_prequential_f1", "Prequential F1 per class", ["label"], registry=registry)
        self.mail_read = Counter("stream_nb_mail_read", "Mail events read (parsed), the unreadable ones included",
                                 registry=registry)
        self.mail_defects = Counter("stream_nb_mail_defects", "Faults found or caps hit in the mail read, by defect "
                                    "(stream_nb.mail.parse; a message counts each of its defects once)",
                                    ["defect"], registry=registry)
        self.lessons = Counter("stream_nb_labeled_outcomes", "Labeled events by what the rules of duplicates "
                               "and corrections made of them (stream_nb.lessons: learned, duplicate, relearned, "
                               "corrected, correction_mismatch, correction_of_unknown)", ["outcome"], registry=registry)
        self.stalled = Gauge("stream_nb_partition_stalled_seconds", "How long a partition with records left to "
                             "read has not advanced (0 while it advances or is caught up)", ["topic", "partition"],
                             registry=registry)
        self.last_step = time.monotonic()
        self.ready = False
        self.stall_after_s = 120.0
        self.last_error: str | None = None  # the last Kafka error the worker rode out, for /readyz
        # {(topic, partition): (position, since when it stands there with records left to read)}
        self._progress: dict[tuple[str, int], tuple[int, float]] = {}
        self._lags: dict[tuple[str, int], int] = {}

    def observe_progress(self, positions: dict[tuple[str, int], int], lags: dict[tuple[str, int], int],
                         now: float | None = None) -> None:
        """Note each partition's position: one that moved, or has nothing left to read, advances."""
        now = time.monotonic() if now is None else now
        progress = {}
        for partition, position in positions.items():
            previous = self._progress.get(partition)
            moving = previous is None or previous[0] != position or lags.get(partition, 0) == 0
            progress[partition] = (position, now) if moving else previous
        for topic, number in set(self._progress) - set(progress):  # no longer this worker's
            self.stalled.remove(topic, str(number))
        self._progress, self._lags = progress, dict(lags)
        self.refresh_stalls(now)

    def stalls(self, now: float | None = None) -> dict[tuple[str, int], float]:
        """{(topic, partition): seconds without advancing} of the partitions stalled for
        stall_after_s or longer with records left to read."""
        now = time.monotonic() if now is None else now
        return {partition: now - since for partition, (_, since) in self._progress.items()
                if self._lags.get(partition, 0) > 0 and now - since >= self.stall_after_s}

    def refresh_stalls(self, now: float | None = None) -> None:
        """The stalled-seconds gauge, as of `now` (also while the worker waits for the broker)."""
        now = time.monotonic() if now is None else now
        for (topic, number), (_, since) in self._progress.items():
            self.stalled.labels(topic, str(number)).set(now - since if self._lags.get((topic, number), 0) > 0 else 0.0)

    def readiness(self, now: float | None = None) -> tuple[bool, str]:
        """(ready, the reason when not) for /readyz."""
        stalls = self.stalls(now)
        if stalls:
            named = ", ".join(f"{topic}[{number}] at offset {self._progress[(topic, number)][0]} (lag "
                              f"{self._lags[(topic, number)]}) for {seconds:.0f} s"
                              for (topic, number), seconds in sorted(stalls.items()))
            return False, f"stalled: {named}; last error: {self.last_error or 'none'}"
        if not self.ready:
            return False, "catching up with the labeled log"
        return True, "ready"

    def count_mail(self, parsed) -> None:
        """One message read (a `ParsedMail`): counted, and each of its defects."""
        self.mail_read.inc()
        for defect in parsed.defects:
            self.mail_defects.labels(defect).inc()

    def observe_views(self, model) -> None:
        """Each feature view's weight in the combination, for a model of several views (nothing
        for one view)."""
        pool = getattr(model, "pool", None)
        if pool is not None:
            for name, weight in zip(model.names, pool.weights):
                self.view_weight.labels(name).set(weight)

    def events_learned(self) -> float:
        """The stream_nb_events_learned counter's value, read through the registry's public API."""
        return self.registry.get_sample_value("stream_nb_events_learned_total") or 0.0

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """The HTTP endpoints of the module docstring, on a daemon thread."""

    def __init__(self, metrics: WorkerMetrics, host: str, port: int, alive_within_s: float) -> None:
        self.metrics = metrics
        self.alive_within_s = alive_within_s
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server protocol)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._answer(200, server.metrics.exposition(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    idle = time.monotonic() - server.metrics.last_step
                    alive = idle < server.alive_within_s
                    self._answer(200 if alive else 503, (b"ok\n" if alive else
                                 f"the loop has not turned for {idle:.0f} s\n".encode()))
                elif path == "/readyz":
                    ready, why = server.metrics.readiness()
                    self._answer(200 if ready else 503, f"{why}\n".encode("utf-8", "backslashreplace"))
                else:
                    self._answer(404, b"not found: /metrics, /healthz, /readyz\n")

            def _answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # a scrape every few seconds is not news
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="stream-nb-metrics", daemon=True)
        self.thread.start()
        log.info("metrics on http://%s:%d/metrics (health /healthz, readiness /readyz)", host, self.port)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
