#!/usr/bin/env python
"""Replay throughput of the shipped spam filter against River, side by side.

Prequential replay (predict each message with the state so far, then learn it), the way
`stream-nb replay` runs it: `configs/spam.toml` as shipped (word bigrams, subject and URL
features, thick-threshold training) through `replay_contenders` in batches, against River's
`BagOfWords() | MultinomialNB()` one event at a time (predict_proba_one on the raw text, then
learn_one). Both sides keep the same score sheet (PrequentialMetrics: accuracy, confusion, log
loss) and start from an empty model; each repeat is a fresh model; medians over --repeats.

Streams
  sms-x10    the SMS Spam Collection repeated 10 times in file order (55,740 events; each pass
             with ids of its own, so a repeat is a new message, not a duplicate)
  enron      Enron-Spam, the six subsets one after another, arrival order (33,716 mails)

Also printed for ours: featurising alone (spam.toml's TextFeaturizer.transform_sparse over the
stream), the floor under any model, with the C extension and without when it is built (names
only: the replay's featurising also looks them up in the vocabulary); and the same replay
learning every event (training.mode = "all"), what thick-threshold training costs.

Target (issue 8): ours >= 10x River on each stream. The exit status is 0 when the run completes
(FAIL is printed when a target is missed), 2 when a corpus is missing.

    .venv/bin/python benchmarks/replay_throughput.py            # ~5 minutes, River most of it
    .venv/bin/python benchmarks/replay_throughput.py --quick    # SMS x2 and enron1, one repeat
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stream_nb.cli import tune_garbage_collector  # noqa: E402
from stream_nb.config import load_config  # noqa: E402
from stream_nb.replay.corpora import ENRON_SUBSETS, enron_spam, sms_spam  # noqa: E402
from stream_nb.replay.metrics import PrequentialMetrics  # noqa: E402
from stream_nb.replay.prequential import Contender, replay_contenders  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
DEFAULT_SMS = SHARED / "sms_spam_collection" / "SMSSpamCollection"
DEFAULT_ENRON = SHARED / "enron_spam.tar.gz"
SHIPPED_CONFIG = REPO / "configs" / "spam.toml"
TARGET = 10.0


def run_river(events: list[dict]) -> tuple[float, PrequentialMetrics]:
    from river.feature_extraction import BagOfWords
    from river.naive_bayes import MultinomialNB

    metrics = PrequentialMetrics()
    pipeline = BagOfWords() | MultinomialNB()
    started = time.perf_counter()
    for event in events:
        text, label = event["text"], event["label"]
        probabilities = pipeline.predict_proba_one(text)
        if probabilities:
            metrics.update(label, max(probabilities, key=probabilities.get), probabilities)
        pipeline.learn_one(text, label)
    return time.perf_counter() - started, metrics


def repeated(events: list[dict], times: int) -> list[dict]:
    """The events `times` over, each pass with ids of its own ("sms-1/2"): a repeat is a new
    message, learned again as River learns it, not a duplicate the rules of stream_nb.lessons
    would leave out."""
    return [dict(event, id=f"{event['id']}/{k}") for k in range(times) for event in events]


def run_ours(events: list[dict], batch_size: int, overrides: list[str]) -> tuple[float, Contender]:
    config = load_config(SHIPPED_CONFIG, overrides)
    contender = Contender("spam.toml", config.build_model(), config.build_featurizer(),
                          config.build_event_featurizer(), training=dict(config.training))
    started = time.perf_counter()
    replay_contenders(events, [contender], batch_size=batch_size)
    return time.perf_counter() - started, contender


def run_featurising(events: list[dict], batch_size: int, native: bool = True) -> float:
    featurizer = load_config(SHIPPED_CONFIG, []).build_featurizer()
    if not native:
        featurizer._native_plan = None  # the Python path, the definition
    texts = [event["text"] for event in events]
    started = time.perf_counter()
    for start in range(0, len(texts), batch_size):
        featurizer.transform_sparse(texts[start : start + batch_size])
    return time.perf_counter() - started


def timed(repeats: int, run) -> tuple[float, object]:
    """Median wall time over `repeats` runs (gc.collect() before each), and the last result."""
    seconds, result = [], None
    for _ in range(repeats):
        gc.collect()
        elapsed, result = run()
        seconds.append(elapsed)
    return statistics.median(seconds), result


def measure(name: str, events: list[dict], args) -> bool | None:
    n = len(events)
    print(f"\n{name}: {n:,} events", flush=True)
    ours_s, contender = timed(args.repeats, lambda: run_ours(events, args.batch_size, []))
    print(f"  ours  spam.toml (thick-threshold)   {n / ours_s:10,.0f} ev/s   accuracy "
          f"{contender.metrics.accuracy:.4f}, learned {contender.learned:,}", flush=True)
    all_s, everything = timed(args.repeats, lambda: run_ours(events, args.batch_size, ['training.mode="all"']))
    print(f"  ours  spam.toml, mode all           {n / all_s:10,.0f} ev/s   accuracy "
          f"{everything.metrics.accuracy:.4f}", flush=True)
    featurise_s, _ = timed(args.repeats, lambda: (run_featurising(events, args.batch_size), None))
    native = load_config(SHIPPED_CONFIG, []).build_featurizer()._native_plan is not None
    label = f"featurising alone ({'C' if native else 'Python'})"
    print(f"  ours  {label:<30s}{n / featurise_s:10,.0f} ev/s   "
          f"({1e6 * featurise_s / n:.1f} us per event)", flush=True)
    if native:
        python_s, _ = timed(args.repeats, lambda: (run_featurising(events, args.batch_size, native=False), None))
        print(f"  ours  featurising alone (Python)    {n / python_s:10,.0f} ev/s   "
              f"({1e6 * python_s / n:.1f} us per event; the C extension is {python_s / featurise_s:.2f}x that)",
              flush=True)
    if args.no_river:
        return None  # nothing compared
    river_s, river_metrics = timed(args.river_repeats, lambda: run_river(events))
    print(f"  River BagOfWords | MultinomialNB    {n / river_s:10,.0f} ev/s   accuracy "
          f"{river_metrics.accuracy:.4f}", flush=True)
    ratio = river_s / ours_s
    ok = ratio >= TARGET
    print(f"  ratio ours / River: {ratio:.2f}x (mode all {river_s / all_s:.2f}x; featurising alone "
          f"{river_s / featurise_s:.2f}x, the ceiling for any model) -> "
          f"{'PASS' if ok else 'FAIL'} (target >= {TARGET:g}x)", flush=True)
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="SMS x2 and enron1, one repeat")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of our side (median; default 3)")
    parser.add_argument("--river-repeats", type=int, default=3, help="repeats of River's side (default 3)")
    parser.add_argument("--batch-size", type=int, default=1000, help="events per batch (stream-nb replay's default)")
    parser.add_argument("--no-river", action="store_true", help="our side only")
    parser.add_argument("--sms", type=Path, default=DEFAULT_SMS)
    parser.add_argument("--enron", type=Path, default=DEFAULT_ENRON)
    parser.add_argument("--streams", default="sms-x10,enron", help="comma-separated: sms-x10, enron")
    args = parser.parse_args(argv)
    tune_garbage_collector()  # as `stream-nb replay` runs (both sides)
    if args.quick:
        args.repeats = args.river_repeats = 1
    missing = [path for path in (args.sms, args.enron) if not path.exists()]
    if missing:
        print(f"corpus missing: {', '.join(map(str, missing))} (see ../shared/data/README)", file=sys.stderr)
        return 2
    print(f"replay throughput, {platform.python_version()} on {platform.machine()}; "
          f"ours median of {args.repeats}, River median of {args.river_repeats}; batch size {args.batch_size}")
    results = {}
    streams = args.streams.split(",")
    if "sms-x10" in streams:
        sms = list(sms_spam(args.sms))
        results["sms-x10"] = measure("SMS Spam Collection x" + ("2" if args.quick else "10"),
                                     repeated(sms, 2 if args.quick else 10), args)
    if "enron" in streams:
        subsets = ("enron1",) if args.quick else ENRON_SUBSETS
        results["enron"] = measure("Enron-Spam " + "+".join(subsets), list(enron_spam(args.enron, subsets)), args)
    print("\n" + ", ".join(f"{name}: {'not compared (--no-river)' if ok is None else 'PASS' if ok else 'FAIL'}"
                            for name, ok in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
