#!/usr/bin/env python
"""Prediction latency when only questions flow: the global model against per-user models.

A mail system's labels are sparse (a user presses "spam" now and then) while new mail flows all
the time, so this measures what kafka_throughput.py's mixed stream does not: a paced stream of
unlabeled events alone, after a warm-up of 2,000 SMS events (every LABELED_EVERY-th labeled),
each side from an empty state on its own topics of one local broker this script starts:

  global    configs/mail.toml's worker over one partition
  per-user  configs/personal.toml's over four partitions, the events keyed by four users
            (labels forwarded into one labeled order: the labels-first check runs every step)

Latency: a prediction's CreateTime minus its question's, per event; p50 / p90 / p99 of the paced
phase (--rate events/s for --seconds), medians over --repeats of the sides alternated.

    .venv/bin/python benchmarks/quiet_latency.py [--rate 50] [--seconds 15] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import kafka_throughput as kt  # noqa: E402

SIDES = {"global": ("mail.toml", 1), "per-user": ("personal.toml", 4)}
USERS = 4


def wait_for_answers(bootstrap: str, topic: str, prefix: str, count: int, worker) -> None:
    """Until `count` predictions of events whose id starts with `prefix` are on `topic` (read
    committed, every partition: the per-user side's outputs have four)."""
    deadline = time.monotonic() + 300
    while True:
        answered = sum(json.loads(record.value)["id"].startswith(prefix) for record in kt.read_topic(bootstrap, topic))
        if answered >= count:
            return
        if worker.process.poll() is not None:
            raise kt.BenchmarkError(f"the worker exited ({worker.process.returncode}) with {answered} of {count} "
                                    f"predictions:\n{worker.tail()}")
        if time.monotonic() > deadline:
            raise kt.BenchmarkError(f"{topic}: {answered} of {count} predictions after 300 s")
        time.sleep(0.5)


def one_side(bootstrap: str, workdir: Path, side: str, run: int, rows, rate: float, seconds: float) -> list[int]:
    """The paced phase's latencies (ms) of one side from an empty state."""
    from kafka import KafkaProducer

    config, partitions = SIDES[side]
    kt.CONFIG = REPO / "configs" / config
    name = f"{side}-{run}"
    labeled, unlabeled = f"{name}-labeled", f"{name}-unlabeled"
    kt.create_topics(bootstrap, [labeled, unlabeled], partitions=partitions)
    overrides = {**kt.worker_overrides(bootstrap, name, labeled, unlabeled, workdir), "kafka.partitions": partitions}
    worker = kt.WorkerProcess(workdir, name, overrides, stop_when_idle=60)
    try:
        _, warm = kt.publish(bootstrap, kt.mixed_events(rows, 2000, "w"), labeled, unlabeled)
        wait_for_answers(bootstrap, overrides["kafka.predictions_topic"], "w", warm, worker)
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        sent, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            due = int((time.monotonic() - started) * rate) + 1
            while sent < due:
                user = f"user{sent % USERS}"
                label, text = rows[sent % len(rows)]
                producer.send(unlabeled, key=user.encode(),
                              value=json.dumps({"id": f"q{sent}", "key": user, "text": text}).encode())
                sent += 1
            time.sleep(0.005)
        producer.flush()
        producer.close()
        wait_for_answers(bootstrap, overrides["kafka.predictions_topic"], "q", sent, worker)
    finally:
        worker.stop()
    asked = {json.loads(record.value)["id"]: record.timestamp for record in kt.read_topic(bootstrap, unlabeled)}
    answered = [(json.loads(record.value)["id"], record.timestamp)
                for record in kt.read_topic(bootstrap, overrides["kafka.predictions_topic"])]
    return sorted(at - asked[event_id] for event_id, at in answered if event_id.startswith("q"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="questions per second (default 50)")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the paced phase (default 15)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows = kt.load_sms_spam(kt.DEFAULT_CORPUS)
    try:
        with kt.benchmark_broker("stream-nb-quiet-latency-") as (broker, workdir):
            print(f"latency of questions alone: {args.rate:g}/s for {args.seconds:g} s after a 2,000-event warm-up, "
                  f"load average {kt.load_average()}")
            found: dict[str, list[tuple[int, int, int]]] = {side: [] for side in SIDES}
            for run in range(args.repeats):
                for side in SIDES:
                    latencies = one_side(broker.bootstrap, workdir, side, run, rows, args.rate, args.seconds)
                    quantiles = tuple(latencies[min(len(latencies) - 1, int(len(latencies) * q))]
                                      for q in (0.5, 0.9, 0.99))
                    found[side].append(quantiles)
                    print(f"  {side:9s} run {run + 1}: {len(latencies)} predictions, p50 {quantiles[0]} ms, "
                          f"p90 {quantiles[1]} ms, p99 {quantiles[2]} ms", flush=True)
    except kt.BenchmarkError as error:
        print(f"quiet_latency: error: {error}", file=sys.stderr)
        return 1
    for side, (config, partitions) in SIDES.items():
        p50, p90, p99 = (statistics.median(run[i] for run in found[side]) for i in range(3))
        print(f"  {side:9s} ({config}, {partitions} partition{'s' if partitions > 1 else ''}): median p50 {p50:g} ms, "
              f"p90 {p90:g} ms, p99 {p99:g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
