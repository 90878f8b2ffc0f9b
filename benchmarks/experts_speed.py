#!/usr/bin/env python
"""The cost of feature views as experts (issue 35): k views against one, in replay and in the
worker, on the same events, in one run. The target: k views keep at least 1/k of one view's rate.

Sides (each from an empty model; alternated, --repeats each, medians):
  one view   configs/mail.toml with its views removed (--set views = {}): [features] alone
  k views    configs/mail.toml as shipped (or --config), its [views] each an expert

Streams:
  enron        Enron-Spam 1-6 (33,715) as mail events, as benchmarks/mail_quality.py reads them
  spamassassin SpamAssassin 2003 raw mail (2,796), mail_quality's shuffle

Replay: replay_and_report (the code `stream-nb replay` runs), the stream in memory, the report
written; rate = events / seconds of the call.
Worker: `stream-nb run` over a local broker this script starts: the stream published once
(every other event labeled, one labeled partition), each side's worker from an empty state with
fresh outputs; rate = all events / (the last prediction's CreateTime - the worker's start).
The broker and the worker share the machine's cores.

    .venv/bin/python benchmarks/experts_speed.py [--repeats 3] [--worker-events 12000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import kafka_throughput as kt  # noqa: E402
from mail_quality import Message, load_stream, mail_events  # noqa: E402
from personal_worker_speed import publish, timed_run  # noqa: E402

from stream_nb.config import load_config  # noqa: E402
from stream_nb.replay.cli import replay_and_report  # noqa: E402

SIDES = ("one view", "k views")


def side_overrides(side: str) -> list[str]:
    return ["views={}"] if side == "one view" else []


def replay_rate(config_path: Path, side: str, events: list[dict], workdir: Path) -> float:
    config = load_config(config_path, side_overrides(side))
    report = Path(tempfile.mkdtemp(prefix="replay_", dir=workdir))
    started = time.perf_counter()
    replay_and_report(events, [(side, config)], report, batch_size=1000)
    return len(events) / (time.perf_counter() - started)


def worker_events(stream: str, messages: list[Message]) -> list[dict]:
    """The stream as personal_worker_speed.publish takes it: raw mail (its bytes, the record's
    key its id), one key for all (one user)."""
    return [{"id": m.id, "key": "all", "mail": m.data, "label": m.label} for m in messages]


def worker_rate(bootstrap: str, workdir: Path, config_path: Path, side: str, run: int, stream: str,
                n_events: int, n_unlabeled: int) -> float:
    kt.CONFIG = config_path
    name = f"{stream}-{side.replace(' ', '')}-{run}"
    overrides = {**kt.worker_overrides(bootstrap, name, f"{stream}-labeled-1", f"{stream}-unlabeled", workdir),
                 "kafka.value_format": "mail"}
    if side == "one view":
        overrides["views"] = {}
    return timed_run(bootstrap, workdir, name, overrides, n_events, n_unlabeled)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "mail.toml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker-events", type=int, default=12_000, help="of each stream (0: no worker runs)")
    args = parser.parse_args(argv)
    config_path = args.config.resolve()
    k = len(load_config(config_path).view_names)
    if k < 2:
        print(f"experts_speed: {config_path} has one view: nothing to compare", file=sys.stderr)
        return 2
    streams = {name: load_stream(name, quick=False) for name in ("enron", "spamassassin")}
    print(f"experts speed: {config_path.name}, {k} views against one; medians of {args.repeats}; "
          f"target k views >= 1/{k} = {1 / k:.3f}x; load average {kt.load_average()}")
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="experts-speed-") as tmp:
        for stream, messages in streams.items():
            events = mail_events(stream, messages)
            rates = results.setdefault(("replay", stream), {side: [] for side in SIDES})
            for _ in range(args.repeats):
                for side in SIDES:
                    rates[side].append(replay_rate(config_path, side, events, Path(tmp)))
            print(f"  replay {stream:13s} " + "  ".join(f"{side} {statistics.median(r):,.0f}/s"
                                                        for side, r in rates.items()), flush=True)
    if args.worker_events:
        try:
            with kt.benchmark_broker("stream-nb-experts-speed-") as (broker, workdir):
                for stream, messages in streams.items():
                    chosen = worker_events(stream, messages)[:args.worker_events]
                    kt.create_topics(broker.bootstrap, [f"{stream}-labeled-1", f"{stream}-unlabeled"])
                    labeled, unlabeled = publish(broker.bootstrap, chosen, labeled_topics=(f"{stream}-labeled-1",),
                                                 unlabeled_topic=f"{stream}-unlabeled")
                    rates = results.setdefault(("worker", stream), {side: [] for side in SIDES})
                    for run in range(args.repeats):
                        for side in SIDES:
                            rates[side].append(worker_rate(broker.bootstrap, workdir, config_path, side, run, stream,
                                                           len(chosen), unlabeled))
                    print(f"  worker {stream:13s} " + "  ".join(f"{side} {statistics.median(r):,.0f}/s"
                                                                for side, r in rates.items()), flush=True)
        except kt.BenchmarkError as error:
            print(f"experts_speed: error: {error}", file=sys.stderr)
            return 1
    print(f"\n{'path':7s} {'stream':13s} {'one view':>10s} {'k views':>10s} {'ratio':>7s}  target >= {1 / k:.3f}")
    for (path, stream), rates in results.items():
        one, many = statistics.median(rates["one view"]), statistics.median(rates["k views"])
        verdict = "PASS" if many / one >= 1 / k else "FAIL"
        print(f"{path:7s} {stream:13s} {one:10,.0f} {many:10,.0f} {many / one:7.3f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
