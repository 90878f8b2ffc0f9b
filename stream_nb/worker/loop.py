"""The worker: learn the whole labeled log, predict a share of the unlabeled traffic, publish.

Two jobs at two speeds, joined here:
- Learning is replicated. Every worker reads every labeled partition by assignment, in one order
  (stream_nb.worker.labeled), so its model is a function of the labeled offsets it has consumed.
  A checkpoint holds the model with those offsets and the configuration's fingerprint; on start
  the worker loads the newest valid one and reads on from its offsets, so each labeled event is
  counted exactly once however the process ended.
- Prediction is partitioned. The unlabeled topics are consumed through the consumer group
  kafka.group_id, so N workers split them. Before a batch is predicted the worker catches up
  with the labeled log (labels first), and each prediction names the labeled offsets its model
  reflects, so a replay reproduces it exactly. Outputs and the group's offsets are committed
  together (stream_nb.worker.outputs): exactly once by default, at least once if configured.

Dead letters of labeled events are published once, not once per worker: by the worker that the
group assigns the labeled partition to (the group consumer subscribes to the labeled topics too,
pauses them, and commits, with the dead letters, the offset up to which they are published).

This module is the conductor (start, run, one step, labels first, stop); each role is a module of
its own (its class, e.g. Learner, holds a reference to the Worker, whose attributes are the state
the roles share):
- labeled.py: the labeled log's partitions and positions; learner.py: learning it (the model).
- predictor.py: predicting unlabeled records, publishing predictions and dead letters.
- records.py: decoding and featurising for both, one event's failure its own (a dead letter).
- commits.py: the commit of outputs with the group's offsets (outputs.py: the transaction).
- checkpoints.py: checkpoints and snapshots, restore at start.
- membership.py: the clients, the group, assignment changes, recovery and fencing.
- keyed.py: with [personal], the per-key state of the owned partitions and its changelog.
- reporting.py: lag, gauges, readiness, the progress line.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import Counter

from kafka.errors import KafkaError

from stream_nb.checkpoint import config_fingerprint
from stream_nb.config import Config, ConfigError
from stream_nb.events import Event, Rejected
from stream_nb.features.mail import MailFeaturizer
from stream_nb.kafka.clients import (
    add_partitions_to_empty,
    ensure_topics,
    leave_group,
    partition_counts,
    raise_if_fenced,
    rebalance_pending,
    take_part_in_rebalances,
)
from stream_nb.kafka.labeled_order import ensure_labeled_order, labeled_order_topic
from stream_nb.kafka.limits import BROKER_DEFAULT_LIMIT, ensure_dead_letter_room, ensure_labeled_order_room
from stream_nb.lessons import LabeledLessons, LearnedIds
from stream_nb.replay.metrics import PrequentialMetrics
from stream_nb.worker.checkpoints import Checkpoints
from stream_nb.worker.commits import Commits
from stream_nb.worker.forwarding import Forwarding
from stream_nb.worker.keyed import KeyedState
from stream_nb.worker.labeled import LabeledLog
from stream_nb.worker.learner import Learner
from stream_nb.worker.membership import Membership
from stream_nb.worker.metrics import WorkerMetrics
from stream_nb.worker.outage import OUTAGE
from stream_nb.worker.outputs import DeliveryError, Fenced, Outputs
from stream_nb.worker.predictor import Predictor
from stream_nb.worker.records import ModelStateUnknown, featurise_views, more_views
from stream_nb.worker.reporting import Reporting

TELEMETRY_INTERVAL_S = 2.0  # gauges and readiness, when metrics are served (a lag query each time)
log = logging.getLogger("stream_nb.worker")

__all__ = ["DeliveryError", "Fenced", "ModelStateUnknown", "Worker"]


class Worker:
    """One worker process: the state its roles share, and the loop that runs them in turn."""

    def __init__(self, config: Config, recorder=None) -> None:
        self.check_config(config)
        self.config = config
        self.recorder = recorder  # optional EvaluationRecorder of the labeled traffic (the demo's plots)
        self.kafka = config.require_kafka()
        # With [personal], the labeled topics (of any partitions) are forwarded into the labeled
        # order, which is the labeled log every worker learns (stream_nb.worker.forwarding).
        self.forwarding = (Forwarding(self, frozenset(self.kafka["labeled_topics"]), labeled_order_topic(self.kafka))
                           if config.personal is not None else None)
        self.labeled_topics = (frozenset([self.forwarding.topic]) if self.forwarding is not None
                               else frozenset(self.kafka["labeled_topics"]))
        self.unlabeled_topics = list(dict.fromkeys(self.kafka["unlabeled_topics"]))
        self.instance_id = config.instance_id()
        self.exactly_once = self.kafka["processing_guarantee"] == "exactly_once"
        self.transactional_id = f"stream-nb-{self.kafka['group_id']}-{self.instance_id}" if self.exactly_once else None
        self.text_featurizer = config.build_featurizer()
        self.event_featurizer = config.build_event_featurizer()
        self.fingerprint = config_fingerprint(config.resolved())
        self.checkpoints = Checkpoints(self)
        self.model = config.build_model()
        self.keyed = KeyedState(self) if config.personal is not None else None
        self.lessons = LabeledLessons(LearnedIds(config.remember_ids))  # what was learned by id: duplicates, corrections
        self.metrics = PrequentialMetrics()
        self.labeled: LabeledLog | None = None
        self.group = None
        self.producer = None
        self.outputs: Outputs | None = None
        # Labeled dead letters not yet published by the partition's owner (offset >= its cursor).
        self.labeled_rejections: list[Rejected] = []
        self._assignment_changed = False
        self._stopping = False
        self._stop_reason = "asked to stop"
        self._published: Counter = Counter()  # {topic: outputs committed} since start
        self._processed = 0
        self._restored: dict | None = None  # the restored labeled offsets, until the clients open there
        # The most a dead letter may take (its topic's max.message.bytes, learned at start).
        self.dead_letter_bytes = BROKER_DEFAULT_LIMIT
        self.membership = Membership(self)
        self.telemetry = WorkerMetrics()  # Prometheus counters, liveness, readiness
        self.telemetry.stall_after_s = float(config.worker.get("stall_after_s", 120.0))
        self.mail_featurizer = MailFeaturizer(self.event_featurizer, on_parsed=self.telemetry.count_mail)
        # [views]: each further view's featurisers (an Experts model); a message is parsed once
        self.more_views = more_views(config, self.mail_featurizer)
        self.reporting = Reporting(self)
        self.learner = Learner(self)
        self.predictor = Predictor(self)
        self.commits = Commits(self)

    @staticmethod
    def check_config(config: Config) -> None:
        """ConfigError for what the configuration asks and the worker cannot do (before any
        network wait)."""
        kafka = config.require_kafka()
        if config.personal is None:
            return
        if kafka["processing_guarantee"] != "exactly_once":
            raise ConfigError("personal: per-key state is written to its changelog in the transaction of the "
                              "outputs: kafka.processing_guarantee must be \"exactly_once\"")
        if len(set(kafka["unlabeled_topics"])) != 1:
            raise ConfigError("personal: per-key state follows the partitions of one unlabeled topic; "
                              f"kafka.unlabeled_topics has {len(set(kafka['unlabeled_topics']))}")

    def featurise(self, events: list[Event], learning: bool = True):
        """The events' features, by this worker's featurisers and the model's vocabulary as they are now."""
        return featurise_views(events, learning, model=self.model, reads_text=self.config.reads_text,
                               views=[(self.text_featurizer, self.mail_featurizer), *self.more_views])

    # ---- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Create missing topics, lock the checkpoint directory, restore the newest checkpoint,
        open the clients. Raises (one line) on anything that stops a worker from starting."""
        # first: an unreachable broker leaves no trace
        snapshot_topic = self.checkpoints.snapshot_topic
        ensure_topics(self.kafka, self.config.kafka_client, (snapshot_topic,) if snapshot_topic else (),
                      copartitioned=self.keyed is not None)
        self.dead_letter_bytes = ensure_dead_letter_room(self.kafka, self.config.kafka_client)
        if self.keyed is not None:
            counts = partition_counts(self.kafka, self.config.kafka_client,
                                      [*self.unlabeled_topics, *sorted(self.forwarding.sources)])
            self.keyed.start(counts)
            if self.kafka["create_topics"]:  # labeled topics made short earlier, still empty: repaired
                labeled = {topic: counts[topic] for topic in self.forwarding.sources if topic in counts}
                counts.update(add_partitions_to_empty(self.kafka, self.config.kafka_client, labeled,
                                                      self.keyed.partitions))
            self.forwarding.start(self.keyed.partitions, counts)
            order = ensure_labeled_order(self.kafka, self.config.kafka_client)
            ensure_labeled_order_room(self.kafka, self.config.kafka_client, order)
        self.checkpoints.store.lock()
        try:
            self.reporting.serve_metrics()
            self.checkpoints.restore()
            self.membership.open_clients_retrying()
        except BaseException:
            self.close()
            raise
        log.info("started: instance %s in group %s, %s, labeled %s from %s", self.instance_id, self.kafka["group_id"],
                 self.kafka["processing_guarantee"].replace("_", "-"), ", ".join(sorted(self.labeled_topics)),
                 ", ".join(f"{topic}[{partition}]@{offset}" for topic, partition, offset in self.labeled.offsets()))

    def request_stop(self, signum=None, _frame=None) -> None:
        if signum is not None and not self._stopping:
            self._stop_reason = signal.Signals(signum).name
        self._stopping = True

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT ask for a clean stop (also during start(): run() then stops at once)."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def run(self, *, stop_when_idle_s: float | None = None, install_signal_handlers: bool = True) -> None:
        """Process until SIGTERM/SIGINT (or `stop_when_idle_s` seconds without a record, with
        nothing left to read), then commit the outputs, write a final checkpoint, leave the
        group and close. Raises Fenced when a newer worker with the same instance id has taken
        over."""
        if install_signal_handlers:
            self.install_signal_handlers()
        if self.group is None:
            self.start()
        idle_since = time.monotonic()
        processed_at_start, learned_at_start = self._processed, self.telemetry.events_learned()
        last_log, processed_at_log = time.monotonic(), self._processed
        last_telemetry = 0.0
        clean = False
        try:
            while True:
                while not self._stopping:
                    try:
                        had_records = self._step()
                    except KafkaError as error:
                        self.membership.recover(error)
                        continue
                    now = time.monotonic()
                    if had_records:
                        idle_since = now
                    elif stop_when_idle_s is not None and now - idle_since >= stop_when_idle_s:
                        if self.reporting.caught_up():  # not merely waiting on a slow broker or the group
                            self._stop_reason = f"idle for {stop_when_idle_s:g} s with nothing left to read"
                            break
                        idle_since = now
                    if now - last_log >= self.config.worker["log_interval_s"]:
                        self.reporting.log_progress(now - last_log, self._processed - processed_at_log)
                        last_log, processed_at_log = now, self._processed
                        last_telemetry = now
                    elif self.reporting.server is not None and now - last_telemetry >= TELEMETRY_INTERVAL_S:
                        self.reporting.refresh_telemetry(self.reporting.partition_lags())
                        last_telemetry = now
                # A stop asked for leaves redone outputs to the partitions' next owner; an idle
                # stop (a catch-up run) whose last commit was redone goes on until it is done.
                if self.commits.final_commit() or self._stopping:
                    break
                idle_since = time.monotonic()
            self.checkpoints.checkpoint()
            clean = True
            self._log_stop(self._processed - processed_at_start,
                           int(self.telemetry.events_learned() - learned_at_start))
        finally:
            OUTAGE.closing = True  # connections closing from here on are no outage
            self.membership.close_clients()
            if clean:  # a static member's close keeps its place in the group: leave it explicitly
                leave_group(self.kafka, self.config.kafka_client, self.instance_id)
            self.checkpoints.close()
            if self.keyed is not None:
                self.keyed.close()
            self.reporting.stop_serving()

    def _log_stop(self, processed: int, learned: int) -> None:
        """The one line of a clean stop: why, what this run did, the final checkpoint."""
        checkpoints = self.checkpoints
        if checkpoints.checkpoint_id is None:
            final = "no checkpoint (nothing learned)"
        else:
            where = f" in {checkpoints.checkpoint_path}" if checkpoints.checkpoint_path else ""
            offsets = ", ".join(f"{topic}[{partition}]@{offset}" for topic, partition, offset in self.labeled.offsets())
            final = f"final checkpoint {checkpoints.checkpoint_id}{where} at labeled offsets {offsets or 'none'}"
        log.info("stopped (%s): %d events read, %d learned, %d predictions and %d dead letters published; %s",
                 self._stop_reason, processed, learned, self._published[self.kafka["predictions_topic"]],
                 self._published[self.kafka["dead_letter_topic"]], final)

    def close(self) -> None:
        self.membership.close_clients()
        self.checkpoints.close()
        if self.keyed is not None:
            self.keyed.close()

    # ---- one step -----------------------------------------------------------------------------

    def _step(self) -> bool:
        """Catch up with the labeled log (labels first), predict one poll of unlabeled records,
        commit outputs when due, checkpoint when due."""
        self.telemetry.last_step = time.monotonic()
        self.membership.confirm_ownership_after_a_stall()
        learned = self._catch_up_labels()
        metadata = self.group.group_metadata()  # before the poll: see Outputs
        # A join under way gets a poll's time to finish (kafka-python resends one that completes
        # between two polls, so polls of 0 ms could keep a rebalance going).
        quick = (learned or self.commits.held) and not rebalance_pending(self.group)
        polled = self.group.poll(timeout_ms=0 if quick else self.kafka["poll_timeout_ms"],
                                 max_records=self.kafka["poll_max_records"])
        raise_if_fenced(self.group)  # kafka-python's poll does not say (an idle zombie polls on)
        if self._assignment_changed:
            self.membership.on_assignment_change()
        now = self.group.group_metadata()
        if (now.generation_id, now.member_id) != (metadata.generation_id, metadata.member_id) or self.outputs.stale(now):
            # The group changed during the poll: its records may be of partitions that have moved.
            if polled or self.outputs.open or self.commits.held:
                self.commits.rewind("the group rebalanced" if metadata.generation_id >= 0 else None)
            return bool(polled)
        if self.commits.held_stale(metadata):  # held back in a step before a rebalance (Commits.held_stale)
            self.commits.rewind("the group rebalanced while records were held back")
            return True
        if polled:
            OUTAGE.back()  # the broker answered
        forwarded = self._forward(metadata)
        records = self.commits.take_held() + [record for partition, batch in polled.items()
                                              if partition.topic not in self.labeled_topics for record in batch]
        if records and self.forwarding is not None and self.forwarding.hold_back(records, bool(forwarded)):
            # labels first: the forwards commit, and the next step learns them before predicting
            self.commits.hold(records, metadata)
            if self.outputs.open:
                self.commits.commit_or_rewind()
            return True
        if records:
            self.outputs.begin(metadata)
            self.predictor.predict(records)
        if (self.outputs.due() or self.commits.labeled_dead_letters_due()
                or (self.keyed is not None and self.keyed.due(self.kafka["commit_interval_ms"] / 1000,
                                                              self.labeled.next_offset()))):
            self.commits.commit_or_rewind()
        self.checkpoints.collect()
        if self.checkpoints.due():
            self.checkpoints.checkpoint_or_carry_on()
        if self.checkpoints.snapshot_due():
            self.checkpoints.publish_snapshot()
        self.labeled.refresh()
        return bool(learned or records or forwarded)

    def _forward(self, metadata) -> list:
        """Labeled records of the partitions this worker forwards, into the labeled order."""
        forwarded = self.forwarding.poll() if self.forwarding is not None else []
        if forwarded:
            self.outputs.begin(metadata)
            self.forwarding.forward(forwarded)
        return forwarded

    def _catch_up_labels(self) -> int:
        """Labels first: learn the labeled log up to its end as it is now, waiting at most
        labels_first_wait_s, so the predictions of the poll that follows reflect every label
        already appended. Returns the labeled records read."""
        ends = self.labeled.end_offsets()
        if self.forwarding is not None:  # its own forwards, though their commit markers may lag
            tp = (self.forwarding.topic, 0)
            ends[tp] = max(ends.get(tp, 0), self.forwarding.reach)
        deadline = time.monotonic() + self.config.worker["labels_first_wait_s"]
        read = 0
        while self.labeled.behind(ends) and not self._stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.debug("labels first: still behind the labeled log after the wait; predicting anyway")
                if self.forwarding is not None:  # not again for the same forwards (an open
                    self.forwarding.reach = 0    # transaction ahead of them may hold them back long)
                break
            records = self.labeled.poll(int(min(100, remaining * 1000)), self.kafka["poll_max_records"])
            if records:
                self.learner.learn(records)
                read += len(records)
            self.labeled.advance()
            if self.keyed is not None:
                self.keyed.advance(self.labeled.next_offset())
            take_part_in_rebalances(self.group)
            if self.outputs.due():
                # Every polled record is processed at this point, so this commit is exact; it keeps
                # a transaction from staying open through a long catch-up (transaction_timeout_ms).
                self.commits.commit_or_rewind()
            self.checkpoints.collect()
            if self.checkpoints.due():  # a long backlog keeps the schedule too (every_events)
                self.checkpoints.checkpoint_or_carry_on()
        return read
