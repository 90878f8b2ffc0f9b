#!/usr/bin/env python
"""Does forgetting pay under drift? Prequential quality of configs/spam.toml with [model]
half_life (exponential decay of the counts, in labeled events) against no decay.

The stream is Enron-Spam's six mailboxes one after another (33,716 mails): six users, six
years of mail, each switch a real drift in both the ham (another person's business) and the
spam (another era's campaigns). Each configuration replays it as `stream-nb replay` does
(predict each mail, then learn it under thick-threshold training, batches of 1,000); the
model carries over from one mailbox to the next, while the scores are kept per mailbox.
The SMS Spam Collection (one source, no drift) shows what forgetting costs where nothing
drifts.

Printed per half-life: accuracy and log loss over the whole stream, events learned, accuracy
in each mailbox, and the features in the final state. One run each: the results do not depend
on timing, so repeats would print the same figures.

    .venv/bin/python benchmarks/forgetting_quality.py                 # ~3 minutes
    .venv/bin/python benchmarks/forgetting_quality.py --half-lives 1000 3000 --evict-every 100
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import budget_quality as budget  # noqa: E402  (the shipped contender, the corpus arguments)

from stream_nb.replay.corpora import ENRON_SUBSETS, enron_spam, sms_spam  # noqa: E402
from stream_nb.replay.metrics import PrequentialMetrics  # noqa: E402
from stream_nb.replay.prequential import replay_contenders  # noqa: E402

HALF_LIVES = (5000, 10000, 20000)


def replay_segments(segments: list[list[dict]], overrides: list[str]) -> dict:
    """One contender through the segments in order; (events, correct, log loss) per segment."""
    contender = budget.shipped_contender(overrides)
    per_segment = []
    for events in segments:
        contender.metrics = PrequentialMetrics()
        replay_contenders(events, [contender], batch_size=1000)
        metrics = contender.metrics
        per_segment.append((metrics.events, metrics.correct, metrics.log_loss_sum))
    events = sum(n for n, _, _ in per_segment)
    return {"accuracy": sum(c for _, c, _ in per_segment) / events,
            "log_loss": sum(loss for _, _, loss in per_segment) / events,
            "segments": [c / n for n, c, _ in per_segment],
            "learned": contender.learned, "features": contender.model.n_features}


def measure(name: str, segments: list[list[dict]], segment_names: list[str], half_lives, every: int | None) -> None:
    print(f"\n{name}: {sum(map(len, segments)):,} events")
    header = "".join(f"  {segment:>7}" for segment in segment_names) if len(segments) > 1 else ""
    print(f"  {'half_life':>9}  {'accuracy':>8}  {'log loss':>8}  {'learned':>7}  {'features':>8}{header}")
    for half_life in (None, *half_lives):
        overrides = [f"model.half_life={half_life or 0}"]  # 0: none (spam.toml ships with one)
        if every is not None:
            overrides.append(f"model.evict_every={every}")
        row = replay_segments(segments, overrides)
        cells = "".join(f"  {accuracy:7.4f}" for accuracy in row["segments"]) if len(segments) > 1 else ""
        label = "none" if half_life is None else f"{half_life:,}"
        print(f"  {label:>9}  {row['accuracy']:8.4f}  {row['log_loss']:8.4f}  {row['learned']:7,}  "
              f"{row['features']:8,}{cells}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    budget.add_corpus_arguments(parser)
    parser.add_argument("--half-lives", type=int, nargs="+", default=list(HALF_LIVES))
    parser.add_argument("--evict-every", type=int, default=None,
                        help="labeled events between decay points (default: the configuration's)")
    args = parser.parse_args(argv)
    if budget.corpora_missing(args):
        return 2
    mailboxes = [list(enron_spam(args.enron, [subset])) for subset in ENRON_SUBSETS]
    measure("Enron-Spam, the six mailboxes in turn", mailboxes, list(ENRON_SUBSETS), args.half_lives, args.evict_every)
    measure("SMS Spam Collection (no drift)", [list(sms_spam(args.sms))], ["sms"], args.half_lives, args.evict_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
