#!/usr/bin/env python
"""Do corrections pay? Prequential quality of the shipped configurations when 5% of the labels
are wrong, with and without the corrections that arrive later (issue 24, part 5).

Per corpus (SMS Spam Collection, 5,574 in file order; Enron-Spam 1-6, 33,715 in arrival order)
three streams, replayed as `stream-nb replay` runs them (predict each event, then learn it by
the configuration's [training], batches of 1,000, the rules of duplicates and corrections on):
  clean        every message with its true label;
  noisy        the same messages, --noise of them (5%, drawn with --seed) with the other label;
  corrected    the noisy stream with, --after events after each wrong label, its correction
               {"id", "text", "label": <true>, "unlearn": <wrong>} (the same message again).
Each stream is scored against the TRUE labels: accuracy and 1-ROCA% (the log-odds, or the
configuration's score_scale) over the same predictions, one per message when it first comes
(a correction is not predicted again). The three streams of a corpus and configuration run in
one sitting; the results do not depend on timing.

    .venv/bin/python benchmarks/correction_quality.py                 # ~3 minutes
    .venv/bin/python benchmarks/correction_quality.py --after 2000 --configs spam.toml
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from budget_quality import add_corpus_arguments, corpora_missing  # noqa: E402

from stream_nb.config import load_config  # noqa: E402
from stream_nb.replay.cli import _contender  # noqa: E402
from stream_nb.replay.corpora import ENRON_SUBSETS, enron_spam, sms_spam  # noqa: E402
from stream_nb.replay.evaluation import EvaluationRecorder, evaluate  # noqa: E402
from stream_nb.replay.prequential import replay_contenders  # noqa: E402

OTHER = {"ham": "spam", "spam": "ham"}


def noisy_streams(events: list[dict], noise: float, after: int, seed: int) -> dict[str, list[dict]]:
    """The clean, noisy and corrected streams of `events` (the module's doc)."""
    rng = random.Random(seed)
    wrong = set(rng.sample(range(len(events)), round(noise * len(events))))
    noisy = [dict(event, label=OTHER[event["label"]]) if i in wrong else event for i, event in enumerate(events)]
    due: dict[int, list[dict]] = {}
    for i in sorted(wrong):
        due.setdefault(i + after, []).append(dict(events[i], unlearn=noisy[i]["label"]))
    corrected = []
    for i, event in enumerate(noisy):
        corrected.append(event)
        corrected.extend(due.pop(i, []))
    for position in sorted(due):  # corrections due after the end of the stream come at its end
        corrected.extend(due[position])
    return {"clean": events, "noisy": noisy, "corrected": corrected}


def scored_against_truth(config_path: Path, stream: list[dict], truth: dict[str, str]) -> dict:
    """Replay `stream` with the configuration; accuracy and 1-ROCA% of its predictions (one per
    message, the first) against the true labels, and what the rules made of the stream."""
    config = load_config(config_path)
    contender = _contender(config_path.name, config, EvaluationRecorder)
    recorder = EvaluationRecorder(score_scale=config.evaluation["score_scale"])
    seen: set = set()
    contender.on_unlabeled = None

    def collect(result) -> None:
        for event, probabilities in result.last_predictions:
            if probabilities and event["id"] not in seen:
                seen.add(event["id"])
                true = truth[event["id"]]
                recorder.update(true, max(probabilities, key=probabilities.get), probabilities,
                                len(contender.featurise_one(event)) if recorder.score_scale != "none" else None)

    replay_contenders(stream, [contender], batch_size=1000, on_batch=collect)
    report = evaluate(recorder, positive=config.evaluation.get("positive") or "spam")
    return {"accuracy": report["accuracy"], "roca": report["trec"]["one_minus_roca_percent"], "scored": len(seen),
            "learned": contender.learned, "lessons": dict(contender.lessons.outcomes)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_arguments(parser)
    parser.add_argument("--noise", type=float, default=0.05, help="share of labels made wrong (default 0.05)")
    parser.add_argument("--after", type=int, default=500, help="events between a wrong label and its correction")
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--configs", default="spam.toml,mail.toml", help="shipped configurations, comma-separated")
    parser.add_argument("--corpora", default="sms,enron")
    args = parser.parse_args()
    if corpora_missing(args):
        return 2
    corpora = {}
    if "sms" in args.corpora:
        corpora["SMS Spam Collection"] = list(sms_spam(args.sms))
    if "enron" in args.corpora:
        corpora["Enron-Spam 1-6"] = list(enron_spam(args.enron, ENRON_SUBSETS))
    print(f"noise {args.noise:.0%} of the labels, each corrected {args.after:,} events later, seed {args.seed}; "
          "scored against the true labels")
    for corpus, events in corpora.items():
        truth = {event["id"]: event["label"] for event in events}
        streams = noisy_streams(events, args.noise, args.after, args.seed)
        print(f"\n{corpus}: {len(events):,} messages, {len(streams['corrected']) - len(events):,} corrections")
        print(f"  {'configuration':14s} {'stream':10s} {'accuracy':>9s} {'1-ROCA%':>8s} {'learned':>8s}  rules")
        for name in args.configs.split(","):
            for stream_name, stream in streams.items():
                figures = scored_against_truth(REPO / "configs" / name, stream, truth)
                lessons = ", ".join(f"{k} {v:,}" for k, v in sorted(figures["lessons"].items()) if k != "learned")
                print(f"  {name:14s} {stream_name:10s} {figures['accuracy']:9.2%} {figures['roca']:8.3f} "
                      f"{figures['learned']:8,}  {lessons}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
