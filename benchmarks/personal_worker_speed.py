#!/usr/bin/env python
"""Per-user models in the worker against the global model, on the same keyed events, in one run.

Enron-Spam's six mailboxes round-robin (as benchmarks/personal_quality.py: one mail of each in
turn; the first --events, default 12,000), each mail a JSON event {"id","text","key"} keyed by
its mailbox, every other one labeled. Published once, to a local broker this script starts:

  labeled-1   the labeled events, one partition (the global model's thick-threshold training
              needs one labeled partition)
  labeled-4   the same labeled events, four partitions, keyed by mailbox (per-user models:
              co-partitioned with the unlabeled topic, forwarded into one labeled order)
  unlabeled   the unlabeled events, four partitions, keyed by mailbox

Sides, alternated, --repeats each (default 3), each from an empty state with fresh outputs:
  global    `stream-nb run --config configs/mail.toml` over labeled-1 and unlabeled
  per-user  `stream-nb run --config configs/personal.toml` over labeled-4 and unlabeled
Rate: all events / (the last prediction's CreateTime - the worker's "started:" line), medians
printed with the ratio. The broker and the worker share the machine's cores.

    .venv/bin/python benchmarks/personal_worker_speed.py
    .venv/bin/python benchmarks/personal_worker_speed.py --events 3000 --repeats 1
    .venv/bin/python benchmarks/personal_worker_speed.py --raw-mail 4

--raw-mail USERS: SpamAssassin 2003's raw messages instead (as `replay --shuffle 23` orders
them), each record the message's bytes with kafka.value_format = "mail", keyed by one of USERS
made-up users round-robin (the record key; the label in the "label" header), the same split.
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
from personal_quality import SHARED, raw_mail_keyed, round_robin  # noqa: E402

CONFIGS = REPO / "configs"
PARTITIONS = 4
SIDES = {"global": ("mail.toml", "labeled-1"), "per-user": ("personal.toml", "labeled-4")}


def publish(bootstrap: str, events: list[dict], labeled_topics=("labeled-1", "labeled-4"),
            unlabeled_topic: str = "unlabeled") -> tuple[int, int]:
    """Every other event labeled; JSON events, or raw mail (the event's "mail" bytes, the label in
    a header, the key the record's). Each labeled event goes to every labeled topic: the first's
    partition 0, the others' by key."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=262_144,
                             max_request_size=2_000_000)
    labeled = unlabeled = 0
    try:
        for n, event in enumerate(events):
            key = event["key"].encode()
            raw = event.get("mail")
            if n % 2 == 0:
                if raw is None:
                    value, headers = json.dumps({"id": event["id"], "text": event["text"], "key": event["key"],
                                                 "label": event["label"]}).encode(), []
                else:
                    value, headers = raw, [("label", event["label"].encode())]
                for number, topic in enumerate(labeled_topics):
                    producer.send(topic, key=key, value=value, partition=0 if number == 0 else None, headers=headers)
                labeled += 1
            else:
                value = raw if raw is not None else json.dumps(
                    {"id": event["id"], "text": event["text"], "key": event["key"]}).encode()
                producer.send(unlabeled_topic, key=key, value=value)
                unlabeled += 1
        producer.flush()
    finally:
        producer.close(timeout=10)
    return labeled, unlabeled


def run_side(bootstrap: str, workdir: Path, side: str, run: int, n_events: int, n_unlabeled: int,
             raw_mail: bool = False) -> float:
    config, labeled_topic = SIDES[side]
    kt.CONFIG = CONFIGS / config
    name = f"{side}-{run}"
    overrides = {**kt.worker_overrides(bootstrap, name, labeled_topic, "unlabeled", workdir),
                 "kafka.partitions": PARTITIONS}
    if raw_mail:
        overrides["kafka.value_format"] = "mail"
    return timed_run(bootstrap, workdir, name, overrides, n_events, n_unlabeled)


def timed_run(bootstrap: str, workdir: Path, name: str, overrides: dict, n_events: int, n_unlabeled: int) -> float:
    """A worker with `overrides` run until idle: all events / (the last prediction's CreateTime -
    the worker's start); BenchmarkError unless every unlabeled record got one prediction."""
    worker = kt.WorkerProcess(workdir, name, overrides, stop_when_idle=3)
    worker.wait(kt.WORKER_TIMEOUT_S)
    predictions = kt.read_topic(bootstrap, overrides["kafka.predictions_topic"])
    if len(predictions) != n_unlabeled:  # one a record (a corpus may hold a message twice: one id)
        raise kt.BenchmarkError(f"{name}: {len(predictions)} predictions for {n_unlabeled} unlabeled events; "
                                f"log {worker.log_path}")
    last_ms = max(record.timestamp for record in predictions)
    return n_events / ((last_ms - worker.consumption_began_ms()) / 1000)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=12_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--raw-mail", type=int, default=0, metavar="USERS",
                        help="SpamAssassin 2003's raw messages keyed round-robin by USERS users, instead of Enron")
    args = parser.parse_args(argv)
    events = (raw_mail_keyed(args.raw_mail) if args.raw_mail else round_robin(SHARED / "enron_spam.tar.gz"))[:args.events]
    corpus = (f"SpamAssassin 2003 raw messages of {args.raw_mail} users" if args.raw_mail
              else "Enron mails of six mailboxes")
    try:
        with kt.benchmark_broker("stream-nb-personal-worker-") as (broker, workdir):
            kt.create_topics(broker.bootstrap, ["labeled-1"])
            kt.create_topics(broker.bootstrap, ["labeled-4", "unlabeled"], partitions=PARTITIONS)
            labeled, unlabeled = publish(broker.bootstrap, events)
            print(f"per-user worker speed: {len(events):,} {corpus} ({labeled:,} labeled, "
                  f"{unlabeled:,} unlabeled), {PARTITIONS} unlabeled partitions, one worker, load average "
                  f"{kt.load_average()}")
            rates: dict[str, list[float]] = {side: [] for side in SIDES}
            for run in range(args.repeats):
                for side in SIDES:
                    started = time.perf_counter()
                    rates[side].append(run_side(broker.bootstrap, workdir, side, run, len(events), unlabeled,
                                                bool(args.raw_mail)))
                    print(f"  {side:9s} run {run + 1}: {rates[side][-1]:,.0f} events/s "
                          f"({time.perf_counter() - started:.0f} s)", flush=True)
    except kt.BenchmarkError as error:
        print(f"personal_worker_speed: error: {error}", file=sys.stderr)
        return 1
    medians = {side: statistics.median(values) for side, values in rates.items()}
    for side, (config, _) in SIDES.items():
        print(f"  {side:9s} ({config:13s}) {medians[side]:9,.0f} events/s  {medians[side] / medians['global']:.3f}x  "
              f"({', '.join(f'{v:,.0f}' for v in rates[side])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
