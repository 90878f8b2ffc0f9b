"""`stream-nb replay` and `stream-nb demo`: prequential evaluation of a stream through a model."""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import islice
from pathlib import Path

from stream_nb.config import Config, ConfigError, load_config
from stream_nb.model.explain import strongest_clues
from stream_nb.replay.generator import spam_ham_stream
from stream_nb.replay.prequential import PrequentialResult, replay_events
from stream_nb.replay.sources import SourceError, read_events


def register(subparsers) -> None:
    replay = subparsers.add_parser("replay", help="replay a recorded stream prequentially and report")
    replay.add_argument("--input", required=True, type=Path, help="TSV (label<TAB>text), CSV or JSONL file")
    _add_model_options(replay)
    replay.add_argument("--max-events", type=int, default=None)
    replay.add_argument("--report", type=Path, default=None, help="directory for report.json")
    replay.set_defaults(func=run_replay)

    demo = subparsers.add_parser("demo", help="the main job: a spam/ham stream through the learner")
    demo.add_argument("--events", type=int, default=20_000, help="events to generate (default 20000)")
    demo.add_argument("--data", type=Path, default=None, help="a real corpus instead (TSV, CSV, JSONL)")
    _add_model_options(demo)
    demo.add_argument("--report", type=Path, default=Path("reports/demo"), help="directory for report.json")
    demo.set_defaults(func=run_demo)


def _add_model_options(parser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help="TOML configuration ([model], [features]); defaults when absent")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one configuration key (repeatable), e.g. --set model.alpha=0.5")
    parser.add_argument("--batch-size", type=int, default=1000)


class _Progress:
    """One rewritten line on a terminal; a plain log line every few seconds otherwise."""

    def __init__(self, total: int | None, stream=sys.stderr):
        self.total, self.stream = total, stream
        self.interactive = stream.isatty()
        self.last_line = 0.0

    def __call__(self, result: PrequentialResult) -> None:
        done = f"{result.events:,}" + (f"/{self.total:,}" if self.total else "")
        text = (f"events {done}  {result.events_per_s:,.0f} events/s  "
                f"prequential accuracy {result.metrics.accuracy:.4f}")
        if self.interactive:
            print("\r" + text, end="", file=self.stream, flush=True)
        elif time.monotonic() - self.last_line >= 2.0:
            print(text, file=self.stream, flush=True)
            self.last_line = time.monotonic()

    def close(self) -> None:
        if self.interactive:
            print(file=self.stream)


def _replay(events, config: Config, args, total: int | None):
    model, featurizer = config.build_model(), config.build_featurizer()
    progress = _Progress(total)
    try:
        result = replay_events(events, model, featurizer, batch_size=args.batch_size, on_batch=progress)
    finally:
        progress.close()
    return model, featurizer, result


def _write_report(directory: Path | None, result: PrequentialResult, configuration: dict) -> Path | None:
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    report = {**result.metrics.to_dict(), "events": result.events, "labeled_events": result.metrics.events,
              "events_per_s": result.events_per_s, "configuration": configuration}
    path = directory / "report.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _summary(model, featurizer, result: PrequentialResult, report: Path | None) -> None:
    metrics = result.metrics
    print(f"events           {result.events:,} ({metrics.events:,} labeled)")
    print(f"throughput       {result.events_per_s:,.0f} events/s (featurise + predict + learn)")
    print(f"accuracy         {metrics.accuracy:.4f} prequential (predict, then learn)")
    for label, scores in metrics.per_class().items():
        print(f"  {str(label):14s} precision {scores['precision']:.4f}  recall {scores['recall']:.4f}  "
              f"F1 {scores['f1']:.4f}  ({scores['support']:,} events)")
    print("last predictions, with their strongest clues:")
    for event, probabilities in result.last_predictions[-3:]:
        if not probabilities:
            continue
        label = max(probabilities, key=probabilities.get)
        clues = strongest_clues(model, featurizer.transform_one(event["text"]), top=3)
        text = event["text"] if len(event["text"]) <= 60 else event["text"][:57] + "..."
        print(f"  {label:5s} p={probabilities[label]:.3f}  {text!r}")
        print("        clues: " + ", ".join(f"{name} (+{weight:.2f})" for name, weight in clues))
    if report is not None:
        print(f"report           {report}")


def _configuration(config: Config, args, **extra) -> dict:
    return {**extra, "config": config.source, **config.to_dict(), "batch_size": args.batch_size}


def run_replay(args) -> int:
    try:
        config = load_config(args.config, args.set)
        events = read_events(args.input)
        if args.max_events is not None:
            events = islice(events, args.max_events)
        model, featurizer, result = _replay(events, config, args, args.max_events)
    except (SourceError, ConfigError, ValueError) as error:
        print(f"stream-nb replay: {error}", file=sys.stderr)
        return 2
    report = _write_report(args.report, result, _configuration(config, args, input=str(args.input)))
    _summary(model, featurizer, result, report)
    return 0


def run_demo(args) -> int:
    try:
        config = load_config(args.config, args.set)
    except ConfigError as error:
        print(f"stream-nb demo: {error}", file=sys.stderr)
        return 2
    if args.data is not None:
        source = f"{args.data} (first {args.events:,} events)"
        events = islice(read_events(args.data), args.events)
    else:
        source = f"generated spam/ham stream with drift, {args.events:,} events"
        events = spam_ham_stream(args.events)
    print(f"stream-nb demo: {source}, model {config.model['kind']} (config: {config.source})")
    try:
        model, featurizer, result = _replay(events, config, args, args.events)
    except (SourceError, ValueError) as error:
        print(f"stream-nb demo: {error}", file=sys.stderr)
        return 2
    _summary(model, featurizer, result, _write_report(args.report, result, _configuration(config, args, source=source)))
    return 0
