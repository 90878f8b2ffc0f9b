"""A read-only replica of the workers' model, for front ends that judge mail where it is decided
(stream_nb.verdicts.milter): the same state as every worker's, with no outputs.

A worker's model is a function of the labeled log: every worker learns it whole, in one order
(stream_nb.worker.labeled), from its newest checkpoint on. A replica does the same with the same
code (Learner, LabeledLog, Checkpoints.restore) and commits nothing: no group, no predictions, no
dead letters, no checkpoints. It starts from the newest checkpoint of the configuration's
checkpoint.dir (read, not locked: a worker on this host may own it), else from the newest
snapshot on checkpoint.snapshot_topic, else from the log's beginning, and follows the log as it
grows. So at each labeled offset it holds exactly the model a worker held there, and its verdict
of a message is the worker's prediction of it at that offset (stream_nb.verdicts.rules).

Threads: one thread follows the log (`follow`); any number judge. One lock covers the model and
the featurisers (the C featuriser's name index follows the vocabulary); the follower learns in
batches of at most `follow_batch` records, so a verdict waits at most one such batch.

With [personal] the replica follows the labeled order (the log the workers forward their labeled
partitions into) and holds every key's state: each changelog partition restored (relearned from
the log where the changelog is behind, stream_nb.worker.keyed), then learned on as the workers
learn it, into stores of its own (`keys_directory`, never the workers'), written locally now and
then and never to the changelog. A message is judged by its key's model (a key with no counts of
its own: exactly the global model).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from stream_nb.checkpoint import config_fingerprint
from stream_nb.config import Config
from stream_nb.features.mail import MailFeaturizer
from stream_nb.kafka.clients import make_labeled_reader
from stream_nb.kafka.labeled_order import labeled_order_topic
from stream_nb.lessons import LabeledLessons, LearnedIds
from stream_nb.replay.metrics import PrequentialMetrics
from stream_nb.worker.checkpoints import Checkpoints
from stream_nb.worker.labeled import LabeledLog, one_order_rule
from stream_nb.worker.learner import Learner
from stream_nb.worker.metrics import WorkerMetrics
from stream_nb.worker.records import featurise_views, more_views

log = logging.getLogger("stream_nb.replica")
TELEMETRY_INTERVAL_S = 2.0
KEYS_WRITTEN_EVERY_S = 5.0  # the keys' changes kept in memory at most this long


class Replica:
    """The state Learner and Checkpoints.restore read and write (as a Worker's), a LabeledLog
    that feeds it, and the lock that judging shares with learning."""

    def __init__(self, config: Config, follow_batch: int = 100, keys_directory: Path | None = None) -> None:
        self.config = config
        self.kafka = config.require_kafka()
        self.labeled_topics = (frozenset([labeled_order_topic(self.kafka)]) if config.personal is not None
                               else frozenset(self.kafka["labeled_topics"]))
        self.instance_id = config.instance_id()
        self.fingerprint = config_fingerprint(config.resolved())
        self.model = config.build_model()
        self.lessons = LabeledLessons(LearnedIds(config.remember_ids))
        self.metrics = PrequentialMetrics()
        self.labeled_rejections: list = []  # a worker publishes them; a replica only passes them
        self.recorder = None
        self.keyed = None  # with [personal]: every partition's keys, restored at start
        self.keys_directory = keys_directory
        self.unlabeled_topics = list(dict.fromkeys(self.kafka["unlabeled_topics"]))
        self._processed = 0
        self._restored: dict | None = None
        self.telemetry = WorkerMetrics()
        self.text_featurizer = config.build_featurizer()
        self.event_featurizer = config.build_event_featurizer()
        self.mail_featurizer = MailFeaturizer(self.event_featurizer)
        # [views]: each further view's featurisers (an Experts model); a message is parsed once
        self.more_views = more_views(config, self.mail_featurizer)
        self.checkpoints = Checkpoints(self)
        self.learner = Learner(self)
        self.labeled: LabeledLog | None = None
        self.follow_batch = follow_batch
        self.lock = threading.RLock()
        self._telemetry_at = 0.0

    def featurise(self, events: list, learning: bool = True):
        return featurise_views(events, learning, model=self.model, reads_text=self.config.reads_text,
                               views=[(self.text_featurizer, self.mail_featurizer), *self.more_views])

    def start(self) -> None:
        """The newest checkpoint or snapshot, then the labeled log opened at its offsets."""
        self.checkpoints.restore()
        restored = self._restored or {"offsets": {}, "topic_ids": {}}
        self._restored = None
        labeled = LabeledLog(make_labeled_reader(self.kafka, self.config.kafka_client), sorted(self.labeled_topics),
                             one_order=one_order_rule(self.config), on_lost_position=self.kafka["on_lost_position"])
        labeled.start(restored["offsets"], restored["topic_ids"])
        self.labeled = labeled
        if self.config.personal is not None:
            self._restore_keys()
        log.info("replica of %s at labeled offsets %s", ", ".join(sorted(self.labeled_topics)),
                 ", ".join(f"{t}[{p}]@{o}" for t, p, o in labeled.offsets()) or "none")

    def _restore_keys(self) -> None:
        """Every partition's key state from the changelog, into stores under keys_directory."""
        from stream_nb.kafka.clients import partition_counts
        from stream_nb.worker.keyed import KeyedState

        if self.keys_directory is None:
            raise ValueError("a replica with [personal] needs a directory of its own for the keys' stores")
        keyed = KeyedState(self)
        keyed.directory = Path(self.keys_directory)  # never the workers' stores
        keyed.start(partition_counts(self.kafka, self.config.kafka_client, self.unlabeled_topics))
        keyed.on_assignment(set(range(keyed.partitions)))
        self.keyed = keyed

    def _write_keys_locally(self) -> None:
        """The keys' changes since the last time into the replica's own stores (bounded memory);
        nothing goes to the changelog: the workers write it."""
        keyed = self.keyed
        keyed.advance(self.labeled.next_offset())
        for owned in keyed.owned.values():
            owned.table.flush(position=owned.position)
        keyed._changed_at = None

    @property
    def has_model(self) -> bool:
        return bool(self.model.classes_)

    def follow(self, timeout_ms: int = 200) -> int:
        """Learn what the labeled log has now, `follow_batch` records at a time; the records
        read. Every TELEMETRY_INTERVAL_S, the lag and readiness for /metrics and /readyz."""
        records = self.labeled.poll(timeout_ms, self.follow_batch)
        if records:
            with self.lock:
                self.learner.learn(records)
                self.labeled.advance()
                self.labeled_rejections.clear()
                if self.keyed is not None and self.keyed.due(KEYS_WRITTEN_EVERY_S):
                    self._write_keys_locally()
        else:
            self.labeled.advance()
            self.labeled.refresh()
        now = time.monotonic()
        self.telemetry.last_step = now
        if now - self._telemetry_at >= TELEMETRY_INTERVAL_S:  # a lag query is a broker round trip
            self._telemetry_at = now
            lags = self.labeled.partition_lags()
            self.telemetry.observe_progress(dict(self.labeled.positions), lags, now)
            for (topic, number), lag in lags.items():
                self.telemetry.lag.labels(topic, str(number)).set(lag)
            if not any(lags.values()):
                self.telemetry.ready = self.has_model  # verdicts from the log as it stands
        return len(records)

    def close(self) -> None:
        if self.keyed is not None:
            self.keyed.close()
            self.keyed = None
        if self.labeled is not None:
            self.labeled.consumer.close(autocommit=False)
            self.labeled = None


class Follower(threading.Thread):
    """Runs Replica.follow until stopped; an error is kept for the front end to report."""

    def __init__(self, replica: Replica) -> None:
        super().__init__(name="stream-nb-replica", daemon=True)
        self.replica = replica
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.replica.follow()
            except Exception as error:  # a broker away: the model stays, reading resumes
                self.error = error
                log.warning("replica: reading the labeled log failed (%s); retrying", error)
                self.stopping.wait(1.0)
            else:
                self.error = None

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
