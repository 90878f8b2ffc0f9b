#!/usr/bin/env python
"""End-to-end throughput and latency of `stream-nb run` over Kafka, against the loop a user would
write with River, and against kafka-python with no model at all, side by side in one run.

Against a local broker (started in a temporary directory unless --bootstrap names a running one),
on a mixed SMS stream: the SMS Spam Collection repeated in file order to --events events (default
200,000), every fifth event labeled ({"id","text","label"} on a labeled topic) and the rest
unlabeled ({"id","text"} on an unlabeled topic), key = id, both topics one partition. The events
are published once; every side then reads the same messages:

  (a) `stream-nb run` itself, once per transport (--transports, default kafka-python and
      confluent-kafka): a subprocess (`python -m stream_nb.cli run --config configs/spam.toml
      --stop-when-idle 2`), the configuration users run (word bigrams, subject and URL features,
      thick-threshold training, clues in every prediction, exactly-once), with only the
      transport, bootstrap, topics, group and checkpoint directory overridden (--set), a fresh
      checkpoint directory and fresh output topics per repeat, so it starts from the beginning of
      both partitions. `--config configs/river_like.toml` gives the like-for-like model of (b).
  (b) the baseline a user would write today: River `BagOfWords() | MultinomialNB()` in a plain
      kafka-python loop (KafkaConsumer/KafkaProducer with default settings, assign +
      seek_to_beginning): json.loads, learn_one for a labeled event, predict_proba_one + argmax
      and a JSON prediction {"id","label","proba"} produced (key = id) for an unlabeled one.
  (c) the ceiling of each transport: the same consume -> produce loop with no decoding and no
      model, the value produced as it came to an output topic, through the worker's own clients
      (stream_nb.kafka.clients.make_consumer/make_producer: 1000 records a poll, 20 ms linger,
      256 KiB batches, acks=all) and its one-partition shortcut (partition=0, no key hash).
  Targets: a >= 8 b with confluent-kafka, a >= 3 b with kafka-python, a >= 0.5 c of its transport.

Two more figures, same stream and same measure, with the last transport named: (a) with
`processing_guarantee = "at_least_once"` against (a) with the default exactly-once (one
transaction per ~100 ms), and one worker against two started together on a 6-partition unlabeled topic (the same events,
unlabeled ones keyed by id; each worker learns the whole labeled topic; rate = all events / (the
last prediction's CreateTime - the earliest worker's "started:" line)). The broker and the
workers share this machine's cores.

How throughput is measured (alike for all three sides): events processed up to the side's last
output, divided by the time from the moment the side began consuming to that last output's send.
  begin  (a) the worker's "started: ..." log line, the last thing Worker.start() does (topics
             created, clients connected, transactions initialised, labeled partitions assigned and
             sought, the group subscribed; its next call is the first poll, which joins the group);
             logging's asctime, wall clock, 1 ms.
         (b), (c) perf_counter just before the first poll, after assign + seek_to_beginning.
  end    (a) the last prediction's Kafka CreateTime, which both clients stamp at send() from the
             worker's wall clock (1 ms; read back from the broker after the run).
         (b), (c) perf_counter just after the last send().
  count  (a) from the last prediction itself: it carries model.events_learned (labeled events
             learned before it) and its source offset, so events_learned + offset + 1 events had
             been taken up to it (the whole stream unless the worker ended on labeled-only polls);
             no dead letters and no rewinds are checked. (b), (c): records consumed at the last send.
So the interpreter start, imports, topic creation and connecting (and the worker's --stop-when-idle
tail, final checkpoint and flush) are out, and the first fetch is in, on every side; millisecond
stamps over spans of seconds are < 0.1%. The shipped configuration checkpoints every 30 s or 100,000
learned events, so a run of 50,000 events takes no checkpoint before its idle tail: a long-running
worker also pays a checkpoint (flush + state save) every 30 s, which this does not measure.
Why not simply first-to-last prediction: kafka-python drains the labeled partition in long runs
first (thousands of records before the first unlabeled one), so that span holds a skewed mix; it is
printed for reference. Each side is repeated --repeats times, interleaved c, a, b so that background
load spreads over all three; medians give the ratios, min - max is printed as the spread.

Latency: a fresh pair of input topics and a fresh worker (the same subprocess, no backlog). A
warm-up of 500 events is sent and its predictions awaited, then events (the same 20/80 mix) are
produced at a fixed rate of half of (a)'s median for --latency-seconds, paced against a monotonic
clock, by a default-settings KafkaProducer. For every unlabeled event: latency = prediction
record's CreateTime - source record's CreateTime (both read back from the broker; same host
clock; 1 ms resolution). The prediction's CreateTime is stamped when the worker calls send(), so
the figure is source-send -> prediction-send; a consumer of the predictions topic sees it up to
the worker's linger (20 ms) plus a broker round trip later. p50, p99 (nearest rank), max, count,
missing predictions, and the achieved produce rate are printed.

Exit status: 0 when the run completes, whether or not the targets are met (PASS/FAIL is printed);
2 if the corpus is missing; 1 on any error (a worker that fails, outputs missing or duplicated,
dead letters); 130 when interrupted. The broker this script started, and any worker it started,
are stopped on every exit path (Ctrl-C and SIGTERM included).

    .venv/bin/python benchmarks/kafka_throughput.py            # full run (a few minutes)
    .venv/bin/python benchmarks/kafka_throughput.py --quick    # smoke run (about a minute)
    .venv/bin/python benchmarks/kafka_throughput.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "sms_spam_collection" / "SMSSpamCollection"
CONFIG = REPO / "configs" / "spam.toml"  # --config: what the worker runs (river_like.toml: River's model)
TRANSPORTS = ("kafka-python", "confluent-kafka")

TARGET_VS_RIVER = {"kafka-python": 3.0, "confluent-kafka": 8.0}  # (a) / (b), at least
TARGET_VS_CEILING = 0.5  # (a) / (c) of the same transport, at least
LABELED_EVERY = 5  # every fifth event labeled: 20% labeled / 80% unlabeled
WARMUP_EVENTS = 500
WORKER_TIMEOUT_S = 900.0


class BenchmarkError(RuntimeError):
    """The run cannot give a trustworthy figure; the message says why."""


class Interrupted(BaseException):
    """SIGTERM, turned into an exception so that every finally block runs."""


# ---- data -------------------------------------------------------------------------------------


def load_sms_spam(path: Path) -> list[tuple[str, str]]:
    """(label, text) pairs in file order, read by the project's corpus loader."""
    from stream_nb.replay.corpora import sms_spam

    try:
        return [(event["label"], event["text"]) for event in sms_spam(path)]
    except ValueError as error:
        raise BenchmarkError(str(error)) from None


def mixed_events(rows: list[tuple[str, str]], n_events: int, prefix: str, start: int = 0):
    """(labeled?, id, value bytes) for events start..start+n_events-1 of the repeated corpus."""
    for i in range(start, start + n_events):
        label, text = rows[i % len(rows)]
        event_id = f"{prefix}{i}"
        if i % LABELED_EVERY == 0:
            yield True, event_id, json.dumps({"id": event_id, "text": text, "label": label}).encode()
        else:
            yield False, event_id, json.dumps({"id": event_id, "text": text}).encode()


# ---- kafka helpers ----------------------------------------------------------------------------


def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kafka-throughput-bench")
    try:
        admin.create_topics([NewTopic(name, partitions, 1) for name in names], timeout_ms=30_000)
    finally:
        admin.close()
    deadline = time.monotonic() + 30
    from kafka import KafkaConsumer

    probe = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        while any(not probe.partitions_for_topic(name) for name in names):
            if time.monotonic() > deadline:
                raise BenchmarkError(f"topics {names} not visible 30 s after creation")
            time.sleep(0.2)
    finally:
        probe.close()


def read_topic(bootstrap: str, topic: str) -> list:
    """Every committed record of a topic (all partitions, each in offset order), from the
    beginning to its end offsets now: read_committed, as every reader of the worker's
    transactional outputs must."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=5000,
                             max_partition_fetch_bytes=8 * 1024 * 1024, isolation_level="read_committed")
    try:
        partitions = [TopicPartition(topic, n) for n in sorted(consumer.partitions_for_topic(topic) or [0])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        records = {tp: [] for tp in partitions}
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise BenchmarkError(f"reading {topic}: stuck before its end offsets {ends}")
            for tp, batch in consumer.poll(timeout_ms=500).items():
                records[tp].extend(batch)
        return [record for tp in partitions for record in records[tp]]
    finally:
        consumer.close(autocommit=False)


def end_offset(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partition = TopicPartition(topic, 0)
        return consumer.end_offsets([partition])[partition]
    finally:
        consumer.close(autocommit=False)


def publish(bootstrap: str, events, labeled_topic: str, unlabeled_topic: str,
            keyed_unlabeled: bool = False) -> tuple[int, int]:
    """Publish (labeled?, id, value) events, as fast as possible: to partition 0, or the unlabeled
    ones by their key's hash (`keyed_unlabeled`, for a topic of several partitions)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=262_144)
    counts = [0, 0]
    try:
        for labeled, event_id, value in events:
            partition = None if keyed_unlabeled and not labeled else 0
            producer.send(labeled_topic if labeled else unlabeled_topic, key=event_id.encode(), value=value,
                          partition=partition)
            counts[labeled] += 1
        producer.flush()
    finally:
        producer.close(timeout=10)
    return counts[1], counts[0]  # labeled, unlabeled


# ---- (a) the worker, a subprocess ------------------------------------------------------------


class WorkerProcess:
    """`python -m stream_nb.cli run --config CONFIG` with --set overrides."""

    running: list["WorkerProcess"] = []

    def __init__(self, workdir: Path, name: str, overrides: dict[str, object], stop_when_idle: float) -> None:
        self.log_path = workdir / f"{name}.log"
        command = [sys.executable, "-m", "stream_nb.cli", "run", "--config", str(CONFIG),
                   "--stop-when-idle", str(stop_when_idle), "--log-level", "INFO"]
        for key, value in overrides.items():
            command += ["--set", f"{key}={json.dumps(value)}"]  # JSON strings/lists are TOML too
        self.command = command
        self.log = open(self.log_path, "wb")
        self.started = time.perf_counter()
        self.started_wall = time.time()
        self.process = subprocess.Popen(command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        WorkerProcess.running.append(self)

    def wait(self, timeout: float) -> float:
        """Wait for a clean exit; the process's wall time in seconds."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise BenchmarkError(f"stream-nb run did not finish within {timeout:.0f}s; log: {self.log_path}") from None
        wall = time.perf_counter() - self.started
        self._forget()
        if code != 0:
            raise BenchmarkError(f"stream-nb run exited with {code}; last lines of {self.log_path}:\n{self.tail()}")
        return wall

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the worker checkpoints and exits), SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._forget()

    def _forget(self) -> None:
        self.log.close()
        if self in WorkerProcess.running:
            WorkerProcess.running.remove(self)

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def consumption_began_ms(self) -> int:
        """Wall-clock ms of the worker's "started: ..." line, the last thing Worker.start() does
        (topics created, clients connected, transactions initialised, the labeled partitions
        assigned and sought, the group subscribed); its next call is the first poll, which joins
        the group. logging's asctime is local time to the millisecond."""
        for line in self.log_lines():
            if "stream_nb.worker INFO started: " in line:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                return round(stamp.timestamp() * 1000)
        raise BenchmarkError(f"no start line from the worker in {self.log_path}:\n{self.tail()}")

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def benchmark_broker(prefix: str):
    """(broker, work directory) of one benchmark run: a local broker started in a temporary
    directory; at the end every worker this module started is stopped, then the broker, and the
    directory is removed."""
    from stream_nb.kafka.broker import LocalKafkaBroker

    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    broker = LocalKafkaBroker(workdir / "broker")
    try:
        broker.start()
        yield broker, workdir
    finally:
        for worker in list(WorkerProcess.running):
            worker.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def worker_overrides(bootstrap: str, name: str, labeled: str, unlabeled: str, workdir: Path,
                     transport: str = "kafka-python") -> dict[str, object]:
    return {
        "kafka.transport": transport,
        "kafka.bootstrap_servers": bootstrap,
        "kafka.group_id": f"{name}-group",
        "kafka.labeled_topics": [labeled],
        "kafka.unlabeled_topics": [unlabeled],
        "kafka.predictions_topic": f"{name}-predictions",
        "kafka.dead_letter_topic": f"{name}-dead-letter",
        "checkpoint.dir": str(workdir / f"{name}-checkpoints"),
    }


def poll_max_records() -> int:
    from stream_nb.config import KAFKA_KEYS

    return KAFKA_KEYS["poll_max_records"][1]  # the base config leaves it at its default


def run_worker_side(bootstrap: str, workdir: Path, name: str, topics: tuple[str, str],
                    n_events: int, n_unlabeled: int, guarantee: str = "exactly_once",
                    transport: str = "kafka-python") -> dict:
    overrides = {**worker_overrides(bootstrap, name, *topics, workdir, transport),
                 "kafka.processing_guarantee": guarantee}
    worker = WorkerProcess(workdir, name, overrides, stop_when_idle=2)
    wall = worker.wait(WORKER_TIMEOUT_S)
    if end_offset(bootstrap, overrides["kafka.dead_letter_topic"]):
        raise BenchmarkError(f"{name}: the worker dead-lettered events; log {worker.log_path}")
    predictions = read_topic(bootstrap, overrides["kafka.predictions_topic"])
    ids = {record.key for record in predictions}
    if len(predictions) != n_unlabeled or len(ids) != n_unlabeled:
        raise BenchmarkError(f"{name}: {len(predictions)} predictions ({len(ids)} distinct ids) for "
                             f"{n_unlabeled} unlabeled events")
    if any("dropped and redone" in line for line in worker.log_lines()):
        raise BenchmarkError(f"{name}: the worker redid outputs after a Kafka error; log {worker.log_path}")
    first, last = predictions[0], predictions[-1]

    def taken(record) -> int:  # events processed up to and including this prediction's event
        value = json.loads(record.value)
        return value["model"]["events_learned"] + value["source"]["offset"] + 1

    began_ms = worker.consumption_began_ms()
    counted, seconds = taken(last), (last.timestamp - began_ms) / 1000
    span_counted = taken(last) - taken(first) - (poll_max_records() - 1)
    span_s = (last.timestamp - first.timestamp) / 1000
    return {"rate": counted / seconds, "counted": counted, "seconds": seconds, "tail": n_events - counted,
            "startup_s": (began_ms / 1000) - worker.started_wall, "span_rate": span_counted / span_s,
            "span_head": taken(first) + poll_max_records() - 1, "wall_s": wall}


def run_scaled_side(bootstrap: str, workdir: Path, name: str, topics: tuple[str, str], n_events: int,
                    n_unlabeled: int, n_workers: int, transport: str) -> dict:
    """`n_workers` workers started together in one group on a 6-partition unlabeled topic: each
    learns the whole labeled topic, the group splits the unlabeled one. Rate = all events /
    (the last prediction's CreateTime - the earliest start line)."""
    base = worker_overrides(bootstrap, name, *topics, workdir, transport)
    workers = [WorkerProcess(workdir, f"{name}-w{i}", {**base, "worker.instance_id": f"{name}-w{i}",
                                                       "checkpoint.dir": str(workdir / f"{name}-w{i}-checkpoints")},
                             stop_when_idle=5) for i in range(n_workers)]
    for worker in workers:
        worker.wait(WORKER_TIMEOUT_S)
    predictions = read_topic(bootstrap, base["kafka.predictions_topic"])
    ids = {record.key for record in predictions}
    if len(predictions) != n_unlabeled or len(ids) != n_unlabeled:
        raise BenchmarkError(f"{name}: {len(predictions)} predictions ({len(ids)} distinct ids) for "
                             f"{n_unlabeled} unlabeled events")
    began_ms = min(worker.consumption_began_ms() for worker in workers)
    seconds = (max(record.timestamp for record in predictions) - began_ms) / 1000
    shares = sorted(sum(1 for line in worker.log_lines() if "assigns this worker" in line) for worker in workers)
    return {"rate": n_events / seconds, "counted": n_events, "seconds": seconds, "rebalances": shares}


# ---- (b) River and (c) the ceiling, in this process -------------------------------------------


def run_loop_side(bootstrap: str, kind: str, topics: tuple[str, str], output: str, n_events: int,
                  expected: int, transport: str = "kafka-python") -> dict:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    labeled_topic, unlabeled_topic = topics
    partitions = [TopicPartition(labeled_topic, 0), TopicPartition(unlabeled_topic, 0)]
    if kind == "river":
        from river import feature_extraction, naive_bayes

        # What a user writes today: default client settings, one event at a time.
        consumer = KafkaConsumer(bootstrap_servers=bootstrap)
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        model = feature_extraction.BagOfWords() | naive_bayes.MultinomialNB()
    else:
        from stream_nb.kafka.clients import make_consumer, make_producer

        kafka = {"bootstrap_servers": bootstrap, "group_id": f"{output}-group", "poll_max_records": 1000,
                 "max_message_bytes": 1_000_000, "transport": transport}
        consumer, producer = make_consumer(kafka, {}), make_producer(kafka, {})
        model = None
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        n = 0
        first_send_at = last_send_at = None
        started = time.perf_counter()
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        while n < n_events:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{kind} loop: only {n} of {n_events} events consumed")
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    n += 1
                    if model is None:
                        producer.send(output, key=record.key, value=record.value, partition=0)
                    else:
                        event = json.loads(record.value)
                        if record.topic == labeled_topic:
                            model.learn_one(event["text"], event["label"])
                            continue
                        proba = model.predict_proba_one(event["text"])
                        label = max(proba, key=proba.get) if proba else None
                        value = json.dumps({"id": event["id"], "label": label, "proba": proba}).encode()
                        producer.send(output, key=record.key, value=value)
                    if first_send_at is None:
                        first_send_at, first_send_time = n, time.perf_counter()
                    last_send_at, last_send_time = n, time.perf_counter()
        producer.flush()
        wall = time.perf_counter() - started
    finally:
        producer.close(timeout=10)
        consumer.close(autocommit=False)
    outputs = read_topic(bootstrap, output)
    if not outputs:
        raise BenchmarkError(f"{kind} loop: no output records")
    if len(outputs) != expected or last_send_at is None:
        raise BenchmarkError(f"{kind} loop: {len(outputs)} output records, expected {expected}")
    seconds = last_send_time - started
    span_counted, span_s = last_send_at - first_send_at, last_send_time - first_send_time
    return {"rate": last_send_at / seconds, "counted": last_send_at, "seconds": seconds,
            "tail": n_events - last_send_at, "span_rate": span_counted / span_s, "span_head": first_send_at,
            "wall_s": wall}


# ---- latency ------------------------------------------------------------------------------------


def run_latency(bootstrap: str, workdir: Path, rows, rate: float, seconds: float, tag: str, transport: str,
                extra_overrides: dict | None = None, warmup_events: int = WARMUP_EVENTS) -> dict:
    """Latency of a paced stream; `extra_overrides` (--set) for the worker, `warmup_events`
    learned and predicted before the paced phase (e.g. to grow a large state first)."""
    from kafka import KafkaProducer

    name = f"bench-{tag}-latency"
    labeled, unlabeled = f"{name}-labeled", f"{name}-unlabeled"
    create_topics(bootstrap, [labeled, unlabeled])
    overrides = {**worker_overrides(bootstrap, name, labeled, unlabeled, workdir, transport), **(extra_overrides or {})}
    predictions_topic = overrides["kafka.predictions_topic"]
    # --stop-when-idle only as a safety net should this script die without stopping it.
    worker = WorkerProcess(workdir, name, overrides, stop_when_idle=60)
    try:
        # Warm-up: the worker is up, assigned and publishing once these predictions appear.
        _, warm_unlabeled = publish(bootstrap, mixed_events(rows, warmup_events, "w"), labeled, unlabeled)
        wait_for_count(bootstrap, predictions_topic, warm_unlabeled, 600, worker)

        producer = KafkaProducer(bootstrap_servers=bootstrap)  # a source application: defaults
        events = mixed_events(rows, 10**9, "l", start=warmup_events)
        sent = sent_unlabeled = 0
        started = time.monotonic()
        try:
            while True:
                elapsed = time.monotonic() - started
                if elapsed >= seconds:
                    break
                due = int(elapsed * rate) + 1
                while sent < due:
                    is_labeled, event_id, value = next(events)
                    producer.send(labeled if is_labeled else unlabeled, key=event_id.encode(), value=value)
                    sent += 1
                    sent_unlabeled += not is_labeled
                next_due = started + sent / rate
                pause = next_due - time.monotonic()
                if pause > 0:
                    time.sleep(min(pause, 0.01))
            produce_seconds = time.monotonic() - started
            producer.flush()
        finally:
            producer.close(timeout=10)
        received = wait_for_count(bootstrap, predictions_topic, warm_unlabeled + sent_unlabeled, 120, worker,
                                  fail=False)
    finally:
        worker.stop()
    sources = {record.key: record.timestamp for record in read_topic(bootstrap, unlabeled)}
    latencies = []
    seen = set()
    for record in read_topic(bootstrap, predictions_topic):
        if record.key in seen or not record.key.startswith(b"l"):
            continue  # warm-up, or a duplicate (at-least-once)
        seen.add(record.key)
        latencies.append(record.timestamp - sources[record.key])
    latencies.sort()
    worker_log = worker.log_lines()
    return {"worker_log": worker_log, "rate": rate, "sent": sent, "sent_unlabeled": sent_unlabeled, "seconds": produce_seconds,
            "achieved": sent / produce_seconds, "latencies": latencies,
            "missing": sent_unlabeled - len(latencies), "received": received}


def wait_for_count(bootstrap: str, topic: str, count: int, timeout: float, worker: WorkerProcess,
                   fail: bool = True) -> int:
    deadline = time.monotonic() + timeout
    while True:
        have = end_offset(bootstrap, topic)
        if have >= count:
            return have
        if worker.process.poll() is not None:
            raise BenchmarkError(f"the latency worker exited ({worker.process.returncode}):\n{worker.tail()}")
        if time.monotonic() > deadline:
            if fail:
                raise BenchmarkError(f"{topic}: {have} of {count} predictions after {timeout:.0f}s")
            return have
        time.sleep(0.25)


def nearest_rank(sorted_values: list, q: float):
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * q // 1))
    return sorted_values[int(rank) - 1]


# ---- reporting ----------------------------------------------------------------------------------


def rate_summary(results: list[dict]) -> tuple[float, str]:
    rates = [result["rate"] for result in results]
    median = statistics.median(rates)
    spread = f"[{min(rates):,.0f} - {max(rates):,.0f}]" if len(rates) > 1 else ""
    return median, spread


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "n/a"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ---- main -----------------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=None, help="events pre-published (default 200,000)")
    parser.add_argument("--config", type=Path, default=CONFIG, help="the worker's configuration (default configs/spam.toml)")
    parser.add_argument("--transports", default=",".join(TRANSPORTS),
                        help="kafka.transport values of the worker sides, comma-separated (default both)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats of each side (default 3)")
    parser.add_argument("--latency-seconds", type=float, default=None, help="paced phase length (default 20)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5,000 events, 1 repeat, 5 s latency")
    parser.add_argument("--bootstrap", default=None, help="use this running broker instead of starting one")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="SMSSpamCollection (TSV)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, broker)")
    args = parser.parse_args(argv)
    args.events = args.events or (5_000 if args.quick else 200_000)
    args.transports = [name.strip() for name in args.transports.split(",") if name.strip()]
    if not args.transports or any(name not in TRANSPORTS for name in args.transports):
        parser.error(f"--transports: a comma-separated list of {', '.join(TRANSPORTS)}")
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.latency_seconds = args.latency_seconds or (5.0 if args.quick else 20.0)
    if args.events < 2_000 or args.repeats < 1 or args.latency_seconds <= 0:
        parser.error("--events must be >= 2000, --repeats >= 1, --latency-seconds > 0")
    return args


def main(argv=None) -> int:
    global CONFIG
    args = parse_args(argv)
    CONFIG = args.config.resolve()
    if not args.corpus.is_file():
        print(f"kafka_throughput: corpus not found at {args.corpus} (the SMS Spam Collection, TSV "
              f"label<TAB>text; expected in ../shared/data/sms_spam_collection/)", file=sys.stderr)
        return 2

    def on_sigterm(*_):
        raise Interrupted()

    signal.signal(signal.SIGTERM, on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="stream-nb-kafka-bench-"))
    broker = None
    try:
        rows = load_sms_spam(args.corpus)
        print("stream_nb Kafka throughput benchmark")
        print(f"  python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs, "
              f"load average (1/5/15 min) at start: {load_average()}")
        if args.bootstrap:
            bootstrap = args.bootstrap
            print(f"  broker: {bootstrap} (given with --bootstrap)")
        else:
            from stream_nb.kafka.broker import KAFKA_VERSION, LocalKafkaBroker

            broker = LocalKafkaBroker(workdir / "broker")
            started = time.perf_counter()
            broker.start()
            bootstrap = broker.bootstrap
            print(f"  broker: local Kafka {KAFKA_VERSION} (stream_nb.kafka.broker defaults), {bootstrap}, "
                  f"started in {time.perf_counter() - started:.1f}s in {workdir / 'broker'}")
        run_benchmark(args, bootstrap, rows, workdir)
        return 0
    except BenchmarkError as error:
        print(f"kafka_throughput: error: {error}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Interrupted):
        print("kafka_throughput: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish cleaning up even if signalled again
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for worker in list(WorkerProcess.running):
            worker.stop()
        if broker is not None:
            broker.stop()
        if args.keep:
            print(f"  kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def run_benchmark(args, bootstrap: str, rows, workdir: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    labeled, unlabeled = f"bench-{tag}-labeled", f"bench-{tag}-unlabeled"
    transports = args.transports
    fastest = transports[-1]  # latency and scaling: the last transport named (confluent-kafka by default)
    outputs = [f"bench-{tag}-{side}-{r}" for side in ("river", *(f"ceiling-{t}" for t in transports))
               for r in range(args.repeats)]
    create_topics(bootstrap, [labeled, unlabeled, *outputs])
    started = time.perf_counter()
    n_labeled, n_unlabeled = publish(bootstrap, mixed_events(rows, args.events, "e"), labeled, unlabeled)
    publish_s = time.perf_counter() - started
    config = CONFIG.relative_to(REPO) if CONFIG.is_relative_to(REPO) else CONFIG
    print(f"  stream: {args.events:,} events, the SMS Spam Collection ({len(rows):,} messages) repeated in file "
          f"order; {n_labeled:,} labeled (every 5th) on {labeled}, {n_unlabeled:,} unlabeled on {unlabeled}; "
          f"one partition each; published in {publish_s:.1f}s")
    print(f"  (a) = {sys.executable} -m stream_nb.cli run --config {config} --stop-when-idle 2 "
          f"--set kafka.transport/kafka.*/checkpoint.dir (poll_max_records {poll_max_records()}); "
          f"transports: {', '.join(transports)}")
    print()
    print("Throughput = events processed up to a side's last output / (that output's send time - the moment the")
    print("side began consuming). Begins: (a) the worker's start-up log line (end of Worker.start(): topics")
    print("created, clients connected, partitions assigned; the next call is the first poll); (b)/(c) just")
    print("before the first poll after assign + seek_to_beginning. Ends: (a) the last prediction's Kafka")
    print("CreateTime (ms, stamped at send()); (b)/(c) perf_counter after the last send(). So interpreter start,")
    print("imports and connecting are out, the first fetch is in, and the idle tail / final flush are out.")
    print("No checkpoint falls inside (a)'s measured run (the default: every 30 s).")
    print(f"Repeats interleaved (c), (a), (b); {args.repeats} each. (c) goes through stream_nb.kafka.clients, as (a).")
    sides = [*(f"c:{t}" for t in transports), *(f"a:{t}" for t in transports), "alo", "b"]
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for r in range(args.repeats):
        for t in transports:
            results[f"c:{t}"].append(run_loop_side(bootstrap, "ceiling", (labeled, unlabeled),
                                                   f"bench-{tag}-ceiling-{t}-{r}", args.events, args.events, t))
        for t in transports:
            results[f"a:{t}"].append(run_worker_side(bootstrap, workdir, f"bench-{tag}-run-{t}-{r}", (labeled, unlabeled),
                                                     args.events, n_unlabeled, transport=t))
        results["alo"].append(run_worker_side(bootstrap, workdir, f"bench-{tag}-alo{r}", (labeled, unlabeled),
                                              args.events, n_unlabeled, guarantee="at_least_once", transport=fastest))
        results["b"].append(run_loop_side(bootstrap, "river", (labeled, unlabeled), f"bench-{tag}-river-{r}",
                                          args.events, n_unlabeled))
        b = results["b"][-1]["rate"]
        line = "   ".join(f"({side}) {results[side][-1]['rate']:,.0f}/s" for side in sides)
        print(f"  repeat {r + 1}: {line}   " + "   ".join(
            f"a/b[{t}] {results[f'a:{t}'][-1]['rate'] / b:.2f}x" for t in transports))
    summary = {side: rate_summary(results[side]) for side in sides}
    span = {side: statistics.median(x["span_rate"] for x in results[side]) for side in sides if side != "alo"}
    print()
    print(f"  {'side':<66} {'median':>9}  {'min - max':<19}")
    labels = {**{f"a:{t}": f"(a) stream-nb run, {config}, {t}" for t in transports},
              "alo": f"(a) the same, {fastest}, processing_guarantee = at_least_once",
              "b": "(b) River BagOfWords|MultinomialNB in a kafka-python loop",
              **{f"c:{t}": f"(c) ceiling: {t} consume -> produce, no model" for t in transports}}
    for side in (*(f"a:{t}" for t in transports), "alo", "b", *(f"c:{t}" for t in transports)):
        value, spread = summary[side]
        print(f"  {labels[side]:<66} {value:>7,.0f}/s  {spread:<19}")
    print()
    b = summary["b"][0]
    for t in transports:
        a, c = summary[f"a:{t}"][0], summary[f"c:{t}"][0]
        target = TARGET_VS_RIVER[t]
        print(f"  {t:<16} a/b = {a / b:5.2f}x (target >= {target:.0f}x) {verdict(a / b >= target)}   "
              f"a/c = {a / c:6.1%} (target >= {TARGET_VS_CEILING:.0%}) {verdict(a / c >= TARGET_VS_CEILING)}")
    print(f"  exactly-once / at-least-once ({fastest}) = {summary[f'a:{fastest}'][0] / summary['alo'][0]:.2f} "
          f"(the cost of one transaction per ~100 ms)")
    print()
    print("  For reference, first-to-last-output rates (events between the two outputs / their time apart; the")
    print("  mix is skewed: clients drain the labeled partition in large runs first): " + ", ".join(
        f"({side}) {rate:,.0f}/s" for side, rate in span.items()))
    print()

    rate = summary[f"a:{fastest}"][0] / 2
    print(f"Latency ({fastest}) at a fixed rate of half of its (a) median ({rate:,.0f} events/s, 20% labeled) for "
          f"{args.latency_seconds:g}s, fresh topics, worker subprocess with no backlog (after a {WARMUP_EVENTS}-event "
          f"warm-up):")
    print("  latency = prediction CreateTime (stamped at the worker's send()) - source CreateTime (stamped at the")
    print("  source's send()), both read back from the broker, 1 ms resolution; the worker's producer lingers")
    print("  up to 20 ms after send() before a consumer can see the prediction.")
    latency = run_latency(bootstrap, workdir, rows, rate, args.latency_seconds, tag, fastest)
    values = latency["latencies"]
    print(f"  produced {latency['sent']:,} events ({latency['sent_unlabeled']:,} unlabeled) in "
          f"{latency['seconds']:.1f}s = {latency['achieved']:,.0f}/s achieved (asked {rate:,.0f}/s)")
    if values:
        print(f"  unlabeled -> prediction: p50 {nearest_rank(values, 0.50):.0f} ms, p99 {nearest_rank(values, 0.99):.0f} ms, "
              f"max {values[-1]:.0f} ms, mean {statistics.fmean(values):.1f} ms, count {len(values):,}, "
              f"missing {latency['missing']:,}")
    else:
        print("  no predictions received")
    if latency["missing"]:
        raise BenchmarkError(f"{latency['missing']} unlabeled events got no prediction within 120 s")
    print()
    run_scaling(args, bootstrap, rows, workdir, tag, fastest)
    print(f"  load average (1/5/15 min) at end: {load_average()}")


def run_scaling(args, bootstrap: str, rows, workdir: Path, tag: str, transport: str) -> None:
    """One worker against two on a 6-partition unlabeled topic (the same events, keyed)."""
    labeled, unlabeled = f"bench-{tag}-scale-labeled", f"bench-{tag}-scale-unlabeled"
    create_topics(bootstrap, [labeled])
    create_topics(bootstrap, [unlabeled], partitions=6)
    n_labeled, n_unlabeled = publish(bootstrap, mixed_events(rows, args.events, "s"), labeled, unlabeled,
                                     keyed_unlabeled=True)
    print(f"Scaling out: {args.events:,} events, {n_labeled:,} labeled on one partition, {n_unlabeled:,} unlabeled "
          f"over 6 partitions (keyed); N {transport} workers started together in one group, each learning the whole labeled")
    print("topic; rate = events / (last prediction's CreateTime - the earliest worker's start line). The broker")
    print("and every worker share this machine's cores, so a second worker adds no core of its own here.")
    results: dict[int, list[dict]] = {1: [], 2: []}
    for r in range(args.repeats):
        for n_workers in (1, 2):
            results[n_workers].append(run_scaled_side(bootstrap, workdir, f"bench-{tag}-scale{n_workers}-{r}",
                                                      (labeled, unlabeled), args.events, n_unlabeled, n_workers,
                                                      transport))
        one, two = results[1][-1], results[2][-1]
        print(f"  repeat {r + 1}: 1 worker {one['rate']:>7,.0f}/s   2 workers {two['rate']:>7,.0f}/s   "
              f"ratio {two['rate'] / one['rate']:.2f}")
    (one, one_spread), (two, two_spread) = rate_summary(results[1]), rate_summary(results[2])
    print(f"  median: 1 worker {one:,.0f}/s {one_spread}, 2 workers {two:,.0f}/s {two_spread}, "
          f"2 / 1 = {two / one:.2f}")


if __name__ == "__main__":
    sys.exit(main())
