#!/usr/bin/env python
"""Prediction latency of `stream-nb run` with a large state checkpointed every 5 s: written in the
background (the default), written by the loop itself (`[checkpoint] background = false`), and no
scheduled checkpoint at all, side by side in one run.

A worker of configs/spam.toml (the transport --transport, confluent-kafka by default) first learns
and predicts a warm-up of --warmup events (every fifth labeled) of a growing vocabulary: SMS texts,
each carrying --fresh never-seen words, so the state reaches hundreds of thousands of features
(the issue's 0.9 M-feature checkpoint took 0.7-1.4 s to write). Then events of the same kind are
produced at --rate for --seconds, and for each unlabeled one latency = its prediction's CreateTime
- its own CreateTime (both stamped at send, on this machine's clock). Each variant runs with a
fresh worker and fresh topics; variants alternate, repeated --repeats times; medians of each
percentile over the repeats are printed, with min - max.

    .venv/bin/python benchmarks/checkpoint_latency.py            # ~10 minutes
    .venv/bin/python benchmarks/checkpoint_latency.py --quick    # one repeat, a smaller state
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_throughput as bench  # noqa: E402  (its worker process, topics and latency phase)

SMS = REPO.parent / "shared" / "data" / "sms_spam_collection" / "SMSSpamCollection"
VARIANTS = {
    "background": {"checkpoint.interval_s": 5, "checkpoint.every_events": 0, "checkpoint.background": True},
    "in the loop": {"checkpoint.interval_s": 5, "checkpoint.every_events": 0, "checkpoint.background": False},
    "none": {"checkpoint.interval_s": 0, "checkpoint.every_events": 0},
}
PERCENTILES = (0.5, 0.9, 0.99, 1.0)


def growing_rows(rows: list[tuple[str, str]], n: int, fresh: int) -> list[tuple[str, str]]:
    """n (label, text) rows: the corpus repeated, row i with `fresh` words no other row has."""
    return [(rows[i % len(rows)][0], rows[i % len(rows)][1] + " " + " ".join(f"zq{i}x{k}" for k in range(fresh)))
            for i in range(n)]


def checkpoints_written(log: list[str]) -> list[str]:
    return [line for line in log if "stream_nb.worker INFO checkpoint " in line]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="a running broker (default: a local one started here)")
    parser.add_argument("--transport", default="confluent-kafka", choices=bench.TRANSPORTS)
    parser.add_argument("--warmup", type=int, default=150_000)
    parser.add_argument("--fresh", type=int, default=8)
    parser.add_argument("--rate", type=float, default=2_000.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.warmup, args.seconds, args.repeats = 30_000, 12.0, 1
    if not SMS.is_file():
        print(f"corpus missing: {SMS} (see ../shared/data/README)", file=sys.stderr)
        return 2
    rows = growing_rows(bench.load_sms_spam(SMS), args.warmup + int(args.rate * args.seconds) + 10_000, args.fresh)
    workdir = Path(tempfile.mkdtemp(prefix="stream-nb-checkpoint-latency-"))
    broker = None
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            from stream_nb.kafka.broker import LocalKafkaBroker

            broker = LocalKafkaBroker(workdir / "broker")
            broker.start()
            bootstrap = broker.bootstrap
        print(f"checkpoint latency: {args.transport}, warm-up {args.warmup:,} events ({args.fresh} fresh words each), "
              f"then {args.rate:,.0f} ev/s for {args.seconds:g} s; load average {bench.load_average()}")
        results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
        for repeat in range(args.repeats):
            for name, overrides in VARIANTS.items():
                tag = f"ckpt{repeat}-{name.replace(' ', '-')}"
                run = bench.run_latency(bootstrap, workdir, rows, args.rate, args.seconds, tag, args.transport,
                                        extra_overrides=overrides, warmup_events=args.warmup)
                run["checkpoints"] = len(checkpoints_written(run["worker_log"]))
                sizes = [path.stat().st_size for path in (workdir / f"bench-{tag}-latency-checkpoints").glob("*.ckpt")]
                run["size"] = max(sizes, default=0)
                results[name].append(run)
                values = run["latencies"]
                print(f"  repeat {repeat + 1} {name:>11}: p50 {bench.nearest_rank(values, 0.5):5.0f} ms  "
                      f"p99 {bench.nearest_rank(values, 0.99):6.0f} ms  max {values[-1] if values else 0:6.0f} ms  "
                      f"{run['checkpoints']} checkpoints of up to {run['size'] / 1e6:.1f} MB, "
                      f"{run['missing']} missing", flush=True)
        print(f"\n  {'checkpoints':>11}  " + "  ".join(f"{f'p{q * 100:g}':>21}" for q in PERCENTILES))
        for name, runs in results.items():
            cells = []
            for q in PERCENTILES:
                values = [bench.nearest_rank(run["latencies"], q) for run in runs]
                spread = f"[{min(values):.0f}-{max(values):.0f}]" if len(values) > 1 else ""
                cells.append(f"{statistics.median(values):7.0f} ms {spread:>11}")
            print(f"  {name:>11}  " + "  ".join(cells))
        return 0
    except bench.BenchmarkError as error:
        print(f"checkpoint_latency: error: {error}", file=sys.stderr)
        return 1
    finally:
        for worker in list(bench.WorkerProcess.running):
            worker.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
