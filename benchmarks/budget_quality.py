#!/usr/bin/env python
"""What a feature budget costs: prequential quality of configs/spam.toml with [model]
max_features at 100%, 50% and 20% of the vocabulary an unbounded run ends with.

Each stream is replayed as `stream-nb replay` does (predict each message, then learn it under
thick-threshold training, batches of 1,000): first without a budget, which gives the unbounded
vocabulary V; then with max_features = 0.5 V and 0.2 V (evict_every as configured: spam.toml's
1,000 labeled events, at which it also decays). Printed per run: accuracy, spam F1, log loss,
events learned, the largest vocabulary (sampled between batches of 1,000, so up to a batch below
the true peak), the final one, and replay speed (a single run; speed is not what this measures).

Streams: the SMS Spam Collection in file order (5,574), and Enron-Spam's six mailboxes one after
another (33,716 mails). Exit status 0 when the runs complete, 2 when a corpus is missing.

    .venv/bin/python benchmarks/budget_quality.py          # ~3 minutes
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stream_nb.config import load_config  # noqa: E402
from stream_nb.replay.corpora import ENRON_SUBSETS, enron_spam, sms_spam  # noqa: E402
from stream_nb.replay.prequential import Contender, replay_contenders  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
SHIPPED_CONFIG = REPO / "configs" / "spam.toml"


class LargestVocabulary:
    """Wraps a model's predict path to note the vocabulary's largest size between batches."""

    def __init__(self, contender: Contender) -> None:
        self.largest = 0
        model = contender.model
        learn = contender.predict_learn

        def predict_learn(items, labels):
            result = learn(items, labels)
            self.largest = max(self.largest, model.n_features)
            return result

        contender.predict_learn = predict_learn


def shipped_contender(overrides: list[str]) -> Contender:
    """configs/spam.toml with `overrides` (--set syntax) as a replay contender, as `stream-nb replay` runs it."""
    config = load_config(SHIPPED_CONFIG, overrides)
    return Contender("spam.toml", config.build_model(), config.build_featurizer(),
                     config.build_event_featurizer(), training=dict(config.training))


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sms", type=Path, default=SHARED / "sms_spam_collection" / "SMSSpamCollection")
    parser.add_argument("--enron", type=Path, default=SHARED / "enron_spam.tar.gz")


def corpora_missing(args) -> bool:
    """Whether --sms or --enron is missing (said on stderr)."""
    missing = [path for path in (args.sms, args.enron) if not path.exists()]
    if missing:
        print(f"corpus missing: {', '.join(map(str, missing))} (see ../shared/data/README)", file=sys.stderr)
    return bool(missing)


def replay(events: list[dict], overrides: list[str]) -> dict:
    contender = shipped_contender(overrides)
    largest = LargestVocabulary(contender)
    started = time.perf_counter()
    replay_contenders(events, [contender], batch_size=1000)
    seconds = time.perf_counter() - started
    metrics = contender.metrics
    return {"accuracy": metrics.accuracy, "f1": metrics.per_class().get("spam", {}).get("f1", 0.0), "log_loss": metrics.log_loss,
            "learned": contender.learned, "largest": largest.largest, "final": contender.model.n_features,
            "events_per_s": len(events) / seconds}


def measure(name: str, events: list[dict]) -> None:
    print(f"\n{name}: {len(events):,} events")
    print(f"  {'budget':>22}  {'accuracy':>8}  {'spam F1':>7}  {'log loss':>8}  {'learned':>7}  "
          f"{'largest V':>9}  {'final V':>8}  {'ev/s':>7}")
    unbounded = replay(events, [])
    vocabulary = unbounded["final"]
    rows = [("none (100%)", unbounded)]
    for share in (0.5, 0.2):
        budget = int(vocabulary * share)
        rows.append((f"{budget:,} ({share:.0%})", replay(events, [f"model.max_features={budget}"])))
    for label, row in rows:
        print(f"  {label:>22}  {row['accuracy']:8.4f}  {row['f1']:7.4f}  {row['log_loss']:8.4f}  "
              f"{row['learned']:7,}  {row['largest']:9,}  {row['final']:8,}  {row['events_per_s']:7,.0f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_corpus_arguments(parser)
    args = parser.parse_args(argv)
    if corpora_missing(args):
        return 2
    measure("SMS Spam Collection", list(sms_spam(args.sms)))
    measure("Enron-Spam " + "+".join(ENRON_SUBSETS), list(enron_spam(args.enron, ENRON_SUBSETS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
