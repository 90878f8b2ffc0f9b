"""`stream-nb demo`: the whole product on one machine, end to end.

Starts (or reuses) the local Kafka broker, creates fresh topics, starts the worker, streams a
spam/ham stream with drift into them (a share of it labeled, the rest to be predicted), shows
live progress, then prints a summary (events, throughput, prequential accuracy, the accuracy of
the published predictions, a few predictions with their strongest clues), writes a report with
plots, and shuts everything down. Ctrl-C at any moment stops the worker and, if the demo
started it, the broker: nothing is left running.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import signal
import sys
import threading
import time
from itertools import islice
from pathlib import Path

from stream_nb.replay.sources import add_field_options, field_options

DEFAULT_CONFIG = Path("configs/spam.toml")


def register(subparsers) -> None:
    demo = subparsers.add_parser("demo", help="the main job: a local broker, a stream, the worker, predictions, a report")
    demo.add_argument("--events", type=int, default=20_000, help="events to stream (default 20000)")
    demo.add_argument("--data", type=Path, default=None,
                      help="a real corpus instead (TSV, CSV, JSONL; labeled events: text, features or both)")
    demo.add_argument("--config", type=Path, default=None,
                      help=f"TOML configuration (default {DEFAULT_CONFIG} when present); its [kafka] topics are replaced")
    demo.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                      help="override one configuration key (repeatable), e.g. --set model.alpha=0.5")
    demo.add_argument("--labeled-share", type=float, default=0.5, help="share of events sent with their label")
    demo.add_argument("--kafka-dir", type=Path, default=Path(".kafka"), help="the local broker's directory")
    demo.add_argument("--report", type=Path, default=Path("reports/demo"), help="directory for the report")
    demo.add_argument("--resume", action="store_true",
                      help="continue from the model in REPORT/checkpoints (default: a fresh model each run); the "
                           "generated stream is new messages each run, a --data file's ids are its own (sent "
                           "again, they are duplicates the model does not learn twice)")
    demo.add_argument("--no-kafka", action="store_true", help="replay the stream in-process instead (no broker)")
    demo.add_argument("--batch-size", type=int, default=1000, help="(--no-kafka) events per batch")
    add_field_options(demo)
    demo.set_defaults(func=run_demo)


def _events(args, rejected) -> list[dict]:
    """The stream: the generated one, or the file's events; its bad lines are counted in
    `rejected` (Rejections) and skipped, as replay --input does."""
    from stream_nb.replay.generator import spam_ham_stream
    from stream_nb.replay.sources import read_events

    if args.data is not None:  # the demo hides a share of the labels itself; unlabeled events are predicted
        return list(islice(read_events(args.data, **field_options(args), labels="optional", rejected=rejected),
                           args.events))
    return list(spam_ham_stream(args.events))


def run_demo(args) -> int:
    from stream_nb.config import ConfigError, load_config
    from stream_nb.replay.sources import Rejections, SourceError

    config_path = args.config if args.config is not None else (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    rejected = Rejections()
    try:
        events = _events(args, rejected)
        if args.no_kafka:
            from stream_nb.replay.cli import run_in_process_demo

            return run_in_process_demo(events, load_config(config_path, args.set), args, rejected)
        return _run_on_kafka(events, config_path, args, rejected)
    except (ConfigError, SourceError, ValueError) as error:
        print(f"stream-nb demo: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nstream-nb demo: interrupted; worker and broker stopped", file=sys.stderr)
        return 130


def _run_on_kafka(events: list[dict], config_path, args, rejected) -> int:
    from kafka import KafkaConsumer

    from stream_nb.config import load_config
    from stream_nb.kafka.broker import BrokerError, LocalKafkaBroker
    from stream_nb.replay.evaluation import EvaluationRecorder
    from stream_nb.worker import Worker

    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    broker = LocalKafkaBroker(args.kafka_dir)
    started_here = not broker.is_running()
    print(f"stream-nb demo: {'starting' if started_here else 'reusing'} the local Kafka broker in {args.kafka_dir} ...",
          flush=True)
    try:
        broker.start()
    except BrokerError as error:
        print(f"stream-nb demo: the broker did not start: {error}", file=sys.stderr)
        return 2
    worker = thread = None
    ctrl_c = _CtrlC()
    try:
        ctrl_c.check()  # pressed while the broker started
        run = time.strftime("%Y%m%d-%H%M%S")
        if args.data is None:
            # the generated stream is new traffic each run: ids of its own, so that a --resume'd
            # model does not take it for the last run's messages re-sent (duplicates, not learned)
            events = [dict(event, id=f"{event['id']}-{run}") for event in events]
        topics = {name: f"demo-{run}-{name}" for name in ("labeled", "unlabeled", "predictions", "dead-letter")}
        overrides = [
            *args.set,
            f'kafka.bootstrap_servers="{broker.bootstrap}"', f'kafka.group_id="demo-{run}"',
            f'kafka.labeled_topics=["{topics["labeled"]}"]', f'kafka.unlabeled_topics=["{topics["unlabeled"]}"]',
            f'kafka.predictions_topic="{topics["predictions"]}"', f'kafka.dead_letter_topic="{topics["dead-letter"]}"',
            "kafka.partitions=1", f'checkpoint.dir="{(args.report / "checkpoints").as_posix()}"',
        ]
        config = load_config(config_path, overrides)
        checkpoints = args.report / "checkpoints"
        if not args.resume and checkpoints.exists():
            # a fresh model: a run repeats the last one's figures (--resume continues instead)
            shutil.rmtree(checkpoints)
        worker = Worker(config, recorder=EvaluationRecorder(score_scale=config.evaluation["score_scale"]))
        worker.start()
        this_run = _ThisRun(worker)  # with --resume the worker's counts start at the last run's
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
        thread.start()
        truth, started = _stream(events, topics, broker.bootstrap, args.labeled_share, this_run, ctrl_c)
        _wait_until_processed(this_run, len(events), started, ctrl_c)
        seconds = time.perf_counter() - started
        worker.request_stop()
        thread.join(timeout=60)
        predictions = _read_predictions(KafkaConsumer, broker.bootstrap, topics["predictions"])
        ctrl_c.check()
        _summary(events, truth, predictions, worker, seconds, config, args.report, config_path, rejected)
        return 0
    finally:
        ctrl_c.restore()
        if worker is not None and thread is not None and thread.is_alive():
            worker.request_stop()
            thread.join(timeout=60)
        if started_here:
            broker.stop()


class _ThisRun:
    """The worker's progress in this run: what it processed and its prequential accuracy since
    it started (a resumed worker restores its counts from the checkpoint of the last run)."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.processed_before = worker._processed
        self.scored_before, self.correct_before = worker.metrics.events, worker.metrics.correct

    @property
    def processed(self) -> int:
        return self.worker._processed - self.processed_before

    @property
    def accuracy(self) -> float:
        scored = self.worker.metrics.events - self.scored_before
        return (self.worker.metrics.correct - self.correct_before) / scored if scored else 0.0


class _CtrlC:
    """Ctrl-C (SIGINT) sets a flag that the demo's own loops check, and KeyboardInterrupt is
    raised from there, not wherever the main thread happens to be: in a loaded test run one
    was lost (where, not pinned down: kafka-python catches BaseException in places) and the
    demo ran to its end."""

    def __init__(self) -> None:
        self.pressed = threading.Event()
        try:
            self._previous = signal.signal(signal.SIGINT, lambda *_: self.pressed.set())
        except ValueError:  # not the main thread: Ctrl-C keeps its default meaning
            self._previous = None

    def check(self) -> None:
        if self.pressed.is_set():
            raise KeyboardInterrupt

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


def _stream(events, topics, bootstrap, labeled_share: float, this_run: _ThisRun, ctrl_c: _CtrlC) -> tuple[dict, float]:
    """Publish the stream: a labeled share with labels, the rest to be predicted; show progress."""
    from kafka import KafkaProducer

    from stream_nb.kafka.publish import encode_event

    rng = random.Random(7)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=262_144)
    truth = {}
    started = time.perf_counter()
    last = 0.0
    try:
        for count, event in enumerate(events, start=1):
            # the same draw for every event, so a file's labeled events split as they always did
            labeled = rng.random() < labeled_share and event["label"] is not None
            topic = topics["labeled"] if labeled else topics["unlabeled"]
            if not labeled:
                truth[event["id"]] = event["label"]  # None: an unlabeled event of the file
            producer.send(topic, key=event["id"].encode(), value=encode_event(event, with_labels=labeled))
            if time.perf_counter() - last > 0.5:
                ctrl_c.check()
                _progress(this_run, count, len(events), started)
                last = time.perf_counter()
        producer.flush()
        ctrl_c.check()
    finally:
        producer.close()
    return truth, started


_last_plain_line = [0.0]


def _progress(this_run: _ThisRun, published: int, total: int, started: float, final: bool = False) -> None:
    """One rewritten line on a terminal; a plain line every 5 s (and the last) otherwise."""
    elapsed = max(time.perf_counter() - started, 1e-9)
    processed = this_run.processed
    text = (f"published {published:,}/{total:,}  processed {processed:,} ({processed / elapsed:,.0f}/s)"
            f"  prequential accuracy {this_run.accuracy:.4f}")
    if sys.stdout.isatty():
        print("\r" + text, end="\n" if final else "", flush=True)
    elif final or time.monotonic() - _last_plain_line[0] >= 5.0:
        print(text, flush=True)
        _last_plain_line[0] = time.monotonic()


def _wait_until_processed(this_run: _ThisRun, total: int, started: float, ctrl_c: _CtrlC,
                          timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while this_run.processed < total:
        ctrl_c.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker processed {this_run.processed} of {total} events in {timeout:.0f} s")
        time.sleep(0.2)
        _progress(this_run, total, total, started)
    _progress(this_run, total, total, started, final=True)


def _read_predictions(consumer_class, bootstrap: str, topic: str, timeout_s: float = 120.0) -> dict:
    """Every committed prediction, read up to the topic's end (not until a quiet spell: a
    loaded machine can be slow to answer the first fetch)."""
    from kafka import TopicPartition

    consumer = consumer_class(bootstrap_servers=bootstrap, enable_auto_commit=False,
                              isolation_level="read_committed")  # the worker's outputs are transactional
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        predictions = {}
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not read the predictions of {topic} in {timeout_s:.0f} s")
            for batch in consumer.poll(timeout_ms=500).values():
                predictions.update((record.key.decode(), json.loads(record.value)) for record in batch)
        return predictions
    finally:
        consumer.close()


def _summary(events, truth: dict, predictions: dict, worker, seconds: float, config, report_dir: Path,
             config_path, rejected) -> None:
    from stream_nb.features.mail import MailFeaturizer
    from stream_nb.model.explain import clue_text, strongest_clues
    from stream_nb.replay.cli import event_in_one_line, print_rejected
    from stream_nb.replay.evaluation import binary_measures_of, evaluate, rolling_series
    from stream_nb.replay.plots import plot_curve, plot_roc

    # every figure printed is the report's (this run's events only, also with --resume)
    positive, skipped = binary_measures_of(worker.recorder.sorted_labels(), config.evaluation.get("positive"))
    report = evaluate(worker.recorder, positive=positive, binary=skipped is None)
    known = {event_id: label for event_id, label in truth.items() if label is not None and event_id in predictions}
    correct = sum(predictions[event_id]["label"] == label for event_id, label in known.items())
    # How many labels the worker had learned when it made each prediction: the labeled and the
    # unlabeled topic are read side by side, so it depends on timing, and so does the share of
    # predictions right (predictions made with the same labels learned are the same in every run).
    learned = sorted(prediction["model"]["events_learned"] for prediction in predictions.values())
    report.update({"events": len(events), "events_per_s": len(events) / seconds,
                   "predictions": len(predictions), "prediction_accuracy": correct / max(len(known), 1),
                   "prediction_labels_learned": {"min": learned[0], "median": learned[len(learned) // 2],
                                                 "max": learned[-1]} if learned else None,
                   "rejected_messages": dict(rejected), "rejected_first": dict(rejected.first),
                   "configuration": {"source": str(config_path), **config.resolved()}})
    if skipped is not None:
        report["binary_measures_skipped"] = skipped
    print(f"events           {report['events']:,} ({len(events) - len(truth):,} labeled, {len(truth):,} to predict)")
    print(f"throughput       {report['events_per_s']:,.0f} events/s through Kafka (publish, learn/predict, publish)")
    print(f"accuracy         {report['accuracy']:.4f} prequential on the labeled events (predict, then learn)")
    of_known = "" if len(known) == len(predictions) else f" (of the {len(known):,} whose label the file has)"
    print(f"predictions      {report['predictions']:,} published; {report['prediction_accuracy']:.4f} of them right{of_known}")
    if learned:
        spread = report["prediction_labels_learned"]
        print(f"                 made with {spread['min']:,} to {spread['max']:,} labels learned (median "
              f"{spread['median']:,}): how many depends on timing, so this share varies from run to run "
              "(the prequential accuracy does not)")
    featurizer = MailFeaturizer(config.build_event_featurizer())  # text, structured or mail events alike
    by_id = {event["id"]: event for event in events}
    print("a few predictions, with their strongest clues:")
    for event_id in list(truth)[-3:]:
        prediction = predictions.get(event_id)
        if prediction is None:
            continue
        event = by_id[event_id]
        # the worker's own clues when the configuration asks for them ([worker] clues)
        clues = prediction.get("clues") or strongest_clues(worker.model, featurizer.transform_event(event), top=3)
        shown = str(prediction.get("verdict", prediction["label"]))
        p = prediction["proba"].get(str(prediction["label"]))  # none: predicted before any label was learned
        print(f"  {shown:6s} p={'-' if p is None else f'{p:.3f}'}  {event_in_one_line(event)}")
        print("        clues: " + ", ".join(clue_text(name, weight) for name, weight in clues))
    print_rejected(report["rejected_messages"], rejected.first)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n",
                                            encoding="utf-8")
    binary = skipped is None
    plot_curve(rolling_series(worker.recorder, window=config.evaluation["window"], positive=positive, binary=binary),
               report_dir / "curve.png", title="stream-nb demo: prequential accuracy on the labeled stream")
    plot_roc(worker.recorder, report_dir / "roc.png", positive=positive, binary=binary)
    print(f"report           {report_dir / 'report.json'} (+ curve.png, roc.png)")
