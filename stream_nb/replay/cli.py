"""`stream-nb replay` and `stream-nb demo`: prequential evaluation of a stream through a model."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from contextlib import nullcontext
from functools import partial
from itertools import islice
from pathlib import Path

import numpy as np

from stream_nb.config import Config, ConfigError, load_config
from stream_nb.events import DEFAULT_MAX_BYTES
from stream_nb.events.codec import published_score
from stream_nb.kafka.discovery import NoBroker
from stream_nb.lessons import LEARNED, OUTCOMES
from stream_nb.mail.sources import is_mail_source
from stream_nb.model.decision import obvious_positive
from stream_nb.model.explain import clue_text, strongest_clues
from stream_nb.model.posterior import positive_score
from stream_nb.model.training import log_odds_per_sqrt_feature
from stream_nb.replay.parse_ahead import ParseAhead, default_parse_processes
from stream_nb.replay.prequential import Contender, PrequentialResult, replay_contenders
from stream_nb.replay.sources import Rejections, SourceError, add_field_options, field_options, read_events


def register(subparsers) -> None:
    replay = subparsers.add_parser("replay", help="replay a topic or a file prequentially and report")
    source = replay.add_mutually_exclusive_group(required=True)
    source.add_argument("--topic", help="a Kafka topic: every partition, merged in timestamp order")
    source.add_argument("--input", type=Path, help="a file: TSV (label<TAB>text), CSV or JSONL, in file order; or "
                                                   "mail: a directory, Maildir, mbox or .tar.gz of messages")
    start = replay.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="(topic) from the first record (default)")
    start.add_argument("--from-offset", type=int, metavar="N", help="(topic) from offset N in every partition")
    start.add_argument("--from-time", metavar="ISO8601", help="(topic) from the first record at or after this time")
    end = replay.add_mutually_exclusive_group()
    end.add_argument("--until-end", action="store_true", help="up to the end seen at the start (default)")
    end.add_argument("--max-events", type=int, metavar="N", help="stop after N events")
    replay.add_argument("--delay", type=int, default=0, metavar="N",
                        help="learn each label N events after its prediction (labels arrive late)")
    replay.add_argument("--bootstrap", metavar="HOST:PORT[,...]",
                        help="(topic) the broker (default: $STREAM_NB_BOOTSTRAP, else kafka.bootstrap_servers, else "
                             "the one `stream-nb kafka start` runs in ./.kafka)")
    replay.add_argument("--compare", type=Path, nargs="+", default=[], metavar="OTHER.toml",
                        help="replay once through these configurations too, and report side by side")
    replay.add_argument("--scores", action="store_true", help="also write the per-event scores as scores.csv")
    replay.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                        help="(file) replay the events in one shuffled order, seeded (a corpus stored by class)")
    replay.add_argument("--parse-processes", type=_process_count, default=None, metavar="N",
                        help="processes that read raw mail ahead of the learner, for a stream of over 256 "
                             "messages (default: one fewer than the CPUs, at most 2; 0: none, a thread reads "
                             "instead); the figures are the same with any number")
    replay.add_argument("--no-parse-thread", dest="parse_thread", action="store_false",
                        help="without parse processes, read raw mail in the learner's thread, not in a thread "
                             "beside it (which reads while the featuriser runs without the GIL)")
    add_field_options(replay)
    _add_model_options(replay)
    replay.add_argument("--report", type=Path, required=True, help="directory for report.json and the plots")
    replay.set_defaults(func=run_replay)



def _process_count(text: str) -> int:
    """--parse-processes: a whole number >= 0."""
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return count


def _add_model_options(parser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help="TOML configuration ([model], [features]); defaults when absent")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one configuration key (repeatable), e.g. --set model.alpha=0.5")
    parser.add_argument("--batch-size", type=int, default=1000,
                        help="events predicted and learned together (any size gives the same figures)")


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


class _StopAtBatchEnd:
    """Ctrl-C (SIGINT) ends the replay after the batch under way, so the report of what was
    replayed is still written (exit 130); a second Ctrl-C, while that batch ends or the report
    is written, exits at once with one line (no traceback, no cleanup: the user asked twice)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def __enter__(self) -> _StopAtBatchEnd:
        try:
            self._previous = signal.signal(signal.SIGINT, self._interrupt)
        except ValueError:  # not the main thread: Ctrl-C keeps its default meaning
            self._previous = None
        return self

    def _interrupt(self, *_signal) -> None:
        if self.requested:
            print("\nstream-nb replay: interrupted again; stopped at once, the report is not written",
                  file=sys.stderr, flush=True)
            os._exit(EXIT_INTERRUPTED)
        self.requested = True
        print("\nstream-nb replay: interrupted; finishing this batch and writing the report "
              "(Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    def __exit__(self, *_exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def __call__(self) -> bool:
        return self.requested


def event_in_one_line(event: dict, width: int = 60) -> str:
    """An event in one line: its text, else its mail's id, else its features as JSON, shortened
    to `width`."""
    text = event.get("text")
    if text is None and event.get("mail") is not None:
        text = f"mail {event.get('id')} ({len(event['mail']):,} bytes)"
    if text is None:
        text = json.dumps(event.get("features"), ensure_ascii=False, separators=(",", ":"))
    shown = repr(text)
    return shown if len(shown) <= width else shown[: width - 4] + "...'"


def print_rejected(rejected: dict, first: dict) -> None:
    """The events skipped, by reason, with where the first of each was: what report.json's
    rejected_messages holds, on stdout too."""
    if not rejected:
        return
    print(f"rejected         {sum(rejected.values()):,} skipped, as a worker dead-letters them "
          "(report.json: rejected_messages)")
    for reason, count in sorted(rejected.items()):
        where = f"  first: {first[reason]}" if reason in first else ""
        print(f"  {reason:24s} {count:,}{where}")


def _summary(model, featurise_one, result: PrequentialResult, report: dict, report_path: Path | None,
             first_rejected: dict) -> None:
    """The replay's figures on stdout. `featurise_one(event)` gives the model's features of one
    event (for the clues of the last predictions)."""
    metrics = result.metrics
    if result.stopped_early:
        print("interrupted      the figures below are of the events replayed before Ctrl-C")
    print(f"events           {result.events:,} ({metrics.events:,} labeled)")
    print(f"throughput       {result.events_per_s:,.0f} events/s (featurise + predict + learn)")
    print(f"accuracy         {metrics.accuracy:.4f} prequential (predict, then learn)")
    trec = report.get("trec")
    if trec is not None:
        print(f"spam filter      {_trec_line(trec)} (positive {trec['positive']}; report.json: trec)")
    for entry in report.get("views", []):  # several views: each one's own figures, and its weight at the end
        own = ("" if entry.get("accuracy") is None else
               f"  alone: accuracy {entry['accuracy']:.4f}, 1-ROCA% {entry['one_minus_roca_percent']:.3f}")
        print(f"  view {entry['view']:10s} weight {entry['weight']:.3f}, {entry['events_learned']:,.0f} learned{own}")
    for label, scores in metrics.per_class().items():
        print(f"  {str(label):14s} precision {scores['precision']:.4f}  recall {scores['recall']:.4f}  "
              f"F1 {scores['f1']:.4f}  ({scores['support']:,} events)")
    shown = [(event, probabilities) for event, probabilities in result.last_predictions[-3:] if probabilities]
    if shown:
        print("last predictions, with their strongest clues:")
    for event, probabilities in shown:
        label = max(probabilities, key=probabilities.get)
        clues = strongest_clues(model, featurise_one(event), top=3)
        print(f"  {str(label):5s} p={probabilities[label]:.3f}  {event_in_one_line(event)}")
        print("        clues: " + ", ".join(clue_text(name, weight) for name, weight in clues))
    print_rejected(report["rejected_messages"], first_rejected)
    if "mail" in report:
        mail = report["mail"]
        print(f"mail             {mail['read']:,} messages read as mail, {mail['unreadable']:,} unreadable")
        for defect, count in sorted(mail["defects"].items(), key=lambda item: (-item[1], item[0]))[:10]:
            print(f"  {defect:24s} {count:,}")
    if "lessons" in report:
        print("lessons          " + ", ".join(f"{outcome} {count:,}" for outcome, count in report["lessons"].items()))
    for note in _notes(report):
        print(f"note             {note}")
    if report_path is not None:
        print(f"report           {report_path}")


def _mail_read_whole(args) -> bool:
    """Whether the source is raw mail read whole before its first event (shuffled): then the mail
    readers start before it is read (replay_and_report)."""
    return args.input is not None and getattr(args, "shuffle", None) is not None and is_mail_source(args.input)


def _events_of(args, config: Config, rejected: Rejections):
    if args.input is not None:
        # events without a label are predicted, not scored; bad ones are counted by reason and
        # skipped, as a worker dead-letters them and replay --topic skips them
        events = read_events(args.input, **field_options(args), labels="optional", rejected=rejected,
                             classes=config.classes)
        if getattr(args, "shuffle", None) is not None:  # Fisher-Yates of the whole file, by Python's Mersenne twister
            events = list(events)
            random.Random(args.shuffle).shuffle(events)
        return events if args.max_events is None else islice(events, args.max_events)
    from stream_nb.config import with_bootstrap
    from stream_nb.kafka.discovery import check_reachable
    from stream_nb.replay.topic import parse_time, read_topic

    _, bootstrap = with_bootstrap(args.config, args.set, args.bootstrap)
    check_reachable(bootstrap)
    print(f"stream-nb replay: broker {bootstrap}", file=sys.stderr, flush=True)
    labeled = topic_is_labeled(config, args.topic)
    print(f"stream-nb replay: topic {args.topic}: {_TOPIC_RULES[labeled]}", file=sys.stderr, flush=True)
    kafka = config.kafka or {}
    return read_topic(bootstrap.servers, args.topic, from_offset=args.from_offset,
                      from_time_ms=None if args.from_time is None else parse_time(args.from_time),
                      max_events=args.max_events, client=config.kafka_client, rejected=rejected,
                      transport=kafka.get("transport", "kafka-python"), labeled=labeled,
                      max_bytes=kafka.get("max_message_bytes", DEFAULT_MAX_BYTES), classes=config.classes,
                      value_format=kafka.get("value_format", "json"), label_header=kafka.get("label_header", "label"),
                      unlearn_header=kafka.get("unlearn_header", "unlearn"))


def topic_is_labeled(config: Config, topic: str) -> bool | None:
    """The worker's rule: a topic of kafka.labeled_topics is labeled, one of unlabeled_topics is
    not; None for a topic the configuration does not name (labeled and unlabeled events mixed)."""
    kafka = config.kafka or {}
    if topic in kafka.get("labeled_topics", ()):
        return True
    if topic in kafka.get("unlabeled_topics", ()):
        return False
    return None


_TOPIC_RULES = {
    True: "labeled (kafka.labeled_topics): an event without a label is rejected as missing_label, as the worker does",
    False: "unlabeled (kafka.unlabeled_topics): every event is predicted; one with a label is rejected as "
           "label_on_unlabeled_topic, as the worker does",
    None: "not a topic of the configuration: events with a label are scored, events without one predicted",
}


def _contender(name: str, config: Config, recorder_class, ahead=None):
    score_scale = config.evaluation["score_scale"]
    return Contender.of(name, config, recorder=recorder_class(score_scale=score_scale), parse_ahead=ahead,
                        band=config.evaluation.get("unsure_band"), positive=config.evaluation.get("positive"),
                        score_band=config.evaluation.get("unsure_score_band"), score_scale=score_scale)


class _PredictionsFile:
    """predictions.jsonl in the report directory: the first configuration's prediction of each
    unlabeled event, {"id", "label", "proba", "score"}, as the worker publishes them: "score" the
    log-odds of the positive class ([evaluation] positive, else the obvious one of two classes;
    absent with neither) on [evaluation] score_scale, as `published_score` makes it a number
    (made only when the stream has unlabeled events; an older one is removed)."""

    def __init__(self, path: Path, positive=None, model=None, score_scale: str = "none") -> None:
        self.path, self.handle = path, None
        self.positive, self.model = positive, model
        self.score_scale = score_scale
        path.unlink(missing_ok=True)

    def write(self, event: dict, probabilities: dict, n_features: int | None = None) -> None:
        if self.handle is None:
            self.handle = self.path.open("w", encoding="utf-8")
        best = max(probabilities, key=probabilities.get) if probabilities else None
        prediction = {"id": event.get("id"), "label": best,
                      "proba": {str(label): p for label, p in probabilities.items()}}
        positive = self.positive
        if positive is None and self.model is not None:
            positive = obvious_positive(self.model.classes_)
        if positive is not None:  # as the worker publishes it: always a number
            score = positive_score(probabilities, positive)
            if score is not None and self.score_scale == "sqrt_features":
                score = log_odds_per_sqrt_feature(score, n_features)
            prediction["score"] = published_score(score)
        self.handle.write(json.dumps(prediction, ensure_ascii=False) + "\n")

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def replay_and_report(events, named_configs: list[tuple[str, Config]], report_dir: Path, *, batch_size: int,
                      delay: int = 0, scores: bool = False, source: dict | None = None,
                      rejected: Rejections | None = None, total: int | None = None,
                      parse_processes: int | None = None, parse_thread: bool = True):
    """Replay events through every configuration at once and write the report (report.json with
    the first configuration's figures and the others under "compared", curve.png, roc.png,
    predictions.jsonl when some events are unlabeled and, if asked, scores.csv). Raw mail is
    read ahead by `parse_processes` other processes (None: `default_parse_processes()`), else,
    with `parse_thread`, by one thread beside the learner; which changes the speed, never a result.
    `events` may be a function that returns them, for raw mail read whole before the first event
    (a shuffled source): the readers are started first, so that they start while it reads.
    Returns (result, contenders, reports)."""
    processes = default_parse_processes() if parse_processes is None else parse_processes
    ahead = ParseAhead(processes) if processes > 0 else ParseAhead(1, threads=True) if parse_thread else nullcontext()
    with ahead as ahead:
        if callable(events):
            if ahead is not None:
                ahead.start()
            events = events()
        if ahead is not None:
            events = ahead.events(events)
        return _replay_and_report(events, named_configs, report_dir, batch_size=batch_size, delay=delay,
                                  scores=scores, source=source, rejected=rejected, total=total, ahead=ahead)


def _replay_and_report(events, named_configs: list[tuple[str, Config]], report_dir: Path, *, batch_size: int,
                       delay: int, scores: bool, source: dict | None, rejected: Rejections | None,
                       total: int | None, ahead):
    from stream_nb.replay.evaluation import EvaluationRecorder

    contenders = [_contender(name, config, EvaluationRecorder, ahead) for name, config in named_configs]
    progress = _Progress(total)
    report_dir.mkdir(parents=True, exist_ok=True)
    first = named_configs[0][1]
    predictions = _PredictionsFile(report_dir / "predictions.jsonl", first.evaluation.get("positive"),
                                   contenders[0].model, first.evaluation["score_scale"])
    contenders[0].on_unlabeled = predictions.write
    with _StopAtBatchEnd() as stop:  # until the report is written: a second Ctrl-C then stops at once
        try:
            result = replay_contenders(events, contenders, batch_size=batch_size, delay=delay, on_batch=progress,
                                       should_stop=stop)
        finally:
            progress.close()
            predictions.close()
        configs = [config for _, config in named_configs]
        reports = [_full_report(contender, config, result, rejected or Rejections(), source or {}, delay)
                   for contender, config in zip(contenders, configs)]
        _write_full_reports(report_dir, reports, contenders, configs, scores)
    return result, contenders, reports


def run_replay(args) -> int:
    rejected = Rejections()
    try:
        config = load_config(args.config, args.set)
        named = [(str(args.config or "defaults"), config)]
        named += [(str(path), load_config(path, args.set)) for path in args.compare]
        source = {"topic": args.topic, "input": None if args.input is None else str(args.input),
                  "from_offset": args.from_offset, "from_time": args.from_time, "max_events": args.max_events}
        events = partial(_events_of, args, config, rejected)
        result, contenders, reports = replay_and_report(
            events if _mail_read_whole(args) else events(), named, args.report, batch_size=args.batch_size, delay=args.delay,
            scores=args.scores, source=source, rejected=rejected, total=args.max_events,
            parse_processes=args.parse_processes, parse_thread=args.parse_thread)
    except (SourceError, ConfigError, NoBroker, ValueError) as error:
        print(f"stream-nb replay: {error}", file=sys.stderr)
        return 2
    _summary(contenders[0].model, contenders[0].featurise_one, result, reports[0], args.report / "report.json",
             rejected.first)
    if len(contenders) > 1:
        _compare_table(reports)
    return EXIT_INTERRUPTED if result.stopped_early else 0


EXIT_INTERRUPTED = 130  # as a shell reports a process ended by SIGINT


def _notes(report: dict) -> list[str]:
    return [note for note in (report.get("binary_measures_skipped"), report.get("refused_by_model")) if note]


def _full_report(contender, config: Config, result, rejected: Rejections, source: dict, delay: int) -> dict:
    from stream_nb.replay.evaluation import binary_measures_of, by_key, evaluate

    positive, skipped = binary_measures_of(contender.recorder.sorted_labels(), config.evaluation.get("positive"))
    report = evaluate(contender.recorder, positive=positive, binary=skipped is None)
    if skipped is not None:
        report["binary_measures_skipped"] = skipped
    if contender.refused:
        report["refused_by_model"] = (f"{sum(contender.refused.values()):,} events refused and skipped, as a worker "
                                      f"dead-letters them ({', '.join(sorted(contender.refused))}); the first: "
                                      f"{contender.first_refusal}")
    if contender.score_scale != "none":  # what ROC, 1-ROCA% and the score band were measured on
        report["score_scale"] = contender.score_scale
    band = config.evaluation.get("unsure_band")
    score_band = config.evaluation.get("unsure_score_band")
    if score_band is not None and skipped is None:
        report["unsure_score_band"] = _unsure_summary(contender, score_band, config.evaluation["positive"])
    elif band is not None and skipped is None:
        report["unsure_band"] = _unsure_summary(contender, band, config.evaluation["positive"])
    report.update({
        "events": result.events,
        "interrupted": result.stopped_early,
        "labeled_events_scored": contender.metrics.events,
        "unscored": contender.unscored,
        "events_learned": contender.learned,
        # with --compare, each configuration's own rate (the replay's reading of the events aside)
        "events_per_s": (result.events / contender.seconds if len(result.contenders) > 1 and contender.seconds > 0
                         else result.events_per_s),
        "delay": delay,
        "source": source,
        "rejected_messages": dict(rejected + contender.refused),
        "rejected_first": dict(rejected.first),  # reason -> where and why the first was refused
        "configuration": {"name": contender.name, **config.resolved()},
    })
    keyed = by_key(contender.recorder, contender.scored_keys, positive if skipped is None else None)
    if keyed is not None:  # keyed events only: the report of a keyless stream stays as it was
        report["by_key"] = keyed
    if contender.mail_read:  # mail events only: the report of a text stream stays as it was
        report["mail"] = {"read": contender.mail_read, "unreadable": contender.refused.get("unreadable_mail", 0),
                          "defects": dict(sorted(contender.mail_defects.items()))}
    if contender.more_views:  # several views: each one's own figures beside the combination's
        report["views"] = _view_figures(contender, positive if skipped is None else None)
    outcomes = contender.lessons.outcomes
    if any(count for outcome, count in outcomes.items() if outcome != LEARNED):
        # duplicates and corrections (stream_nb.lessons): a stream without them reports as before
        report["lessons"] = {outcome: outcomes.get(outcome, 0) for outcome in OUTCOMES}
    return report


def _view_figures(contender, positive) -> list[dict]:
    """Each view's weight at the end, events learned, and, with a positive class of two, its own
    accuracy and 1-ROCA% over the scored events: its input to the combination for the positive
    class less the other's (its log-odds per sqrt of its features, soft-clipped: the same order
    and sign), 0 where the combination had not both classes yet (as the recorder ranks them)."""
    from stream_nb.replay.evaluation import roc_auc

    model = contender.model
    figures = [{"view": name, "weight": weight, "events_learned": expert.events_learned}
               for name, weight, expert in zip(model.names, model.pool.weights, model.models)]
    labels = contender.recorder.sorted_labels()
    if positive is None or len(labels) != 2:
        return figures
    other = next(label for label in labels if label != positive)
    recorder = contender.recorder
    true = recorder.true_indices == recorder.labels.index(positive)
    for v, entry in enumerate(figures):
        scores = np.array([0.0 if row is None or positive not in row or other not in row
                           else row[positive][v] - row[other][v] for row in contender.view_inputs])
        entry["accuracy"] = float(np.mean((scores > 0) == true)) if len(true) else None
        auc = roc_auc(scores, true)
        entry["one_minus_roca_percent"] = None if auc is None else 100 * (1 - auc)
    return figures


def _unsure_summary(contender, band, positive) -> dict:
    """Share of scored events in the unsure band, and the accuracy of the sure ones."""
    verdicts = contender.verdicts
    unsure = sum(1 for v, _ in verdicts if v == "unsure")
    sure = [(v, true) for v, true in verdicts if v != "unsure"]
    right = sum(1 for v, true in sure if v == str(true))
    return {"band": list(band), "positive": positive, "unsure": unsure,
            "unsure_share": unsure / len(verdicts) if verdicts else 0.0,
            "sure_accuracy": right / len(sure) if sure else None}


def _write_full_reports(report_dir: Path, reports: list[dict], contenders, configs, scores: bool) -> None:
    from stream_nb.replay.evaluation import rolling_series, write_scores_csv
    from stream_nb.replay.plots import plot_curve, plot_roc

    report_dir.mkdir(parents=True, exist_ok=True)
    document = dict(reports[0])
    if len(reports) > 1:
        document["compared"] = reports[1:]
    (report_dir / "report.json").write_text(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n",
                                            encoding="utf-8")
    first, config = contenders[0], configs[0]
    positive = reports[0].get("positive")
    binary = "binary_measures_skipped" not in reports[0]
    plot_curve(rolling_series(first.recorder, window=config.evaluation["window"], positive=positive, binary=binary),
               report_dir / "curve.png", title=f"Prequential replay: {first.name}")
    plot_roc(first.recorder, report_dir / "roc.png", positive=positive, binary=binary)
    if scores:
        write_scores_csv(first.recorder, report_dir / "scores.csv", ids=first.scored_ids,
                         positive=positive if binary else None)


def _percent(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _trec_line(trec: dict) -> str:
    """TREC's spam-filter measures in one line: the ranking (1-ROCA%, sm% at hm% 0.1) and the
    errors at the model's own decision (hm%, sm%)."""
    return (f"1-ROCA% {_percent(trec['one_minus_roca_percent'])}  sm%@hm0.1% {_percent(trec['sm_at_hm_0_1_percent'])}"
            f"  hm% {_percent(trec['hm_percent'])}  sm% {_percent(trec['sm_percent'])}")


def _compare_table(reports: list[dict]) -> None:
    print("configurations side by side (same events; events/s: each one's own featurise + predict + learn):")
    for report in reports:
        name = report["configuration"]["name"]
        trec = report.get("trec")
        print(f"  {name:40s} accuracy {report['accuracy']:.4f}  macro F1 {report.get('macro_f1', 0):.4f}"
              + (f"  {_trec_line(trec)}" if trec else "") + f"  {report['events_per_s']:,.0f} events/s")


def run_in_process_demo(events: list[dict], config: Config, args, rejected: Rejections | None = None) -> int:
    """`stream-nb demo --no-kafka`: the stream replayed in-process, reported as `replay` does;
    `rejected`: the lines of the file that were skipped."""
    rejected = rejected if rejected is not None else Rejections()
    print(f"stream-nb demo (in-process): {len(events):,} events, model {config.model['kind']} ({config.source})")
    result, contenders, reports = replay_and_report(events, [(config.source, config)], args.report,
                                              batch_size=args.batch_size, source={"demo": "--no-kafka"},
                                              rejected=rejected, total=len(events))
    _summary(contenders[0].model, contenders[0].featurise_one, result, reports[0], args.report / "report.json",
             rejected.first)
    return EXIT_INTERRUPTED if result.stopped_early else 0
