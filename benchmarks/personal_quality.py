#!/usr/bin/env python
"""Do per-key models pay? Enron-Spam's six mailboxes as six keys, flowing at once.

The six subsets are interleaved round-robin (one mail of enron1, one of enron2, ..., while each
lasts; 33,715 mails), each mail keyed by its mailbox, and replayed prequentially as `stream-nb
replay --config configs/spam.toml --compare configs/personal.toml` does, in one run:
configs/spam.toml (one global model) beside configs/personal.toml (the same global model, and
each mailbox's model: its own counts with the global model as prior; stream_nb.model.personal)
at each (beta, prior_beta, shrinkage) asked for. Every mail is scored with its spam log-odds.

Printed: accuracy and 1-ROCA% of each, overall and per mailbox, and the ratio of 1-ROCA% to the
global model's. One run: the figures do not depend on timing. SMS and the SpamAssassin corpus
have no users to key by (a keyless event is predicted exactly as by the global model).

    .venv/bin/python benchmarks/personal_quality.py                       # ~6 minutes
    .venv/bin/python benchmarks/personal_quality.py --beta 3000 30000 --prior-beta 1 10 --shrinkage key class
    .venv/bin/python benchmarks/personal_quality.py --limit 3000          # the first 3,000 mails
    .venv/bin/python benchmarks/personal_quality.py --views               # per-key models over three views too
    .venv/bin/python benchmarks/personal_quality.py --speed 3             # replay speed, each alone
    .venv/bin/python benchmarks/personal_quality.py --speed 3 --raw-mail 4

--raw-mail USERS (speed only): the SpamAssassin 2003 raw messages instead, in `replay --shuffle
23` order, keyed round-robin by USERS made-up users, so that the per-key path parses real mail
(the corpus has no users to rank by, so no quality figures).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stream_nb.config import load_config  # noqa: E402
from stream_nb.model.training import log_odds_per_sqrt_feature  # noqa: E402
from stream_nb.replay.corpora import ENRON_SUBSETS, enron_spam  # noqa: E402
from stream_nb.replay.evaluation import roc_auc  # noqa: E402
from stream_nb.replay.prequential import Contender, replay_contenders  # noqa: E402

CONFIGS = REPO / "configs"
SHARED = REPO.parent / "shared" / "data"


def round_robin(path: Path) -> list[dict]:
    """The six mailboxes interleaved, one mail of each in turn while it lasts; key = mailbox."""
    by_subset: dict[str, list] = {subset: [] for subset in ENRON_SUBSETS}
    for event in enron_spam(path, ENRON_SUBSETS):
        subset = event["id"].split("/", 1)[0]
        by_subset[subset].append(dict(event, key=subset))
    return [event for turn in itertools.zip_longest(*by_subset.values()) for event in turn if event is not None]


class ScoreSheet:
    """A recorder for replay: each scored event's spam log-odds (per sqrt(distinct features)
    under score_scale "sqrt_features", the scale mail.toml's operator thresholds), in order."""

    def __init__(self, score_scale: str = "none") -> None:
        self.score_scale = score_scale
        self.scores: list[float] = []

    def update(self, label, predicted, probabilities, n_features=None) -> None:
        score = probabilities.log_odds("spam")
        if self.score_scale == "sqrt_features":
            score = log_odds_per_sqrt_feature(score, n_features)
        self.scores.append(score)


def contender(name: str, config_path: Path, overrides: list[str]) -> Contender:
    config = load_config(config_path, overrides)
    scale = config.evaluation.get("score_scale", "none")
    return Contender.of(name, config, recorder=ScoreSheet(scale), positive="spam", score_scale=scale)


def mail_views() -> str:
    """configs/mail.toml's [views] as one --set (the per-key models over its three views)."""
    import tomllib

    views = tomllib.loads((CONFIGS / "mail.toml").read_text())["views"]

    def inline(value) -> str:
        if isinstance(value, dict):
            return "{" + ", ".join(f"{key} = {inline(item)}" for key, item in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(map(inline, value)) + "]"
        return repr(value) if not isinstance(value, str) else f'"{value}"'

    return f"views={inline(views)}"


def report(events: list[dict], contenders: list[Contender]) -> None:
    key_of = {event["id"]: event["key"] for event in events}
    label_of = {event["id"]: event["label"] for event in events}
    print(f"  {'model':<36} {'accuracy':>8} {'1-ROCA%':>8} {'ratio':>6}   "
          + "  ".join(f"{subset:>13}" for subset in ENRON_SUBSETS))
    global_roca = None
    for one in contenders:
        scores = np.array(one.recorder.scores, dtype=np.float64)
        spam = np.array([label_of[i] == "spam" for i in one.scored_ids])
        keys = np.array([key_of[i] for i in one.scored_ids])
        accuracy = float(np.mean((scores > 0) == spam))
        roca = 100 * (1 - roc_auc(scores, spam))
        global_roca = roca if global_roca is None else global_roca
        parts = []
        for subset in ENRON_SUBSETS:
            mask = keys == subset
            parts.append(f"{np.mean((scores[mask] > 0) == spam[mask]):.4f}/{100 * (1 - roc_auc(scores[mask], spam[mask])):.3f}")
        print(f"  {one.name:<36} {accuracy:>8.4f} {roca:>8.3f} {roca / global_roca:>6.2f}   "
              + "  ".join(f"{part:>13}" for part in parts))
    for one in contenders:
        if one.personal is not None:
            for personal in getattr(one.personal, "personals", [one.personal]):  # each view's keys
                sizes = sorted(len(own.index) for own in personal.keys.values())
                print(f"  {one.name}: features a key at the end {sizes} (the global model: "
                      f"{personal.global_model.n_features})")


def speed(events: list[dict], args, contenders: list[Contender]) -> int:
    """Events/s of each contender replayed alone (a fresh model each repeat), medians."""
    import statistics

    rates: dict[str, list[float]] = {one.name: [] for one in contenders}
    for _ in range(args.speed):
        for one in contenders:
            config_path, overrides = (args.base, []) if one.personal is None else (args.personal, list(one.overrides))
            fresh = contender(one.name, config_path, overrides)
            started = time.perf_counter()
            replay_contenders(events, [fresh], batch_size=1000)
            rates[one.name].append(len(events) / (time.perf_counter() - started))
    base = statistics.median(rates[contenders[0].name])
    corpus = (f"SpamAssassin 2003 raw mail keyed by {args.raw_mail} users" if args.raw_mail
              else "Enron's six mailboxes round-robin")
    print(f"replay speed, {corpus}, {len(events):,} mails, median of {args.speed} (each alone, from an empty model):")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"  {name:<40} {median:>9,.0f} events/s   {median / base:.3f}x   "
              f"({', '.join(f'{v:,.0f}' for v in values)})")
    return 0


def raw_mail_keyed(users: int) -> list[dict]:
    """SpamAssassin 2003's messages as `replay --shuffle 23 --label-folder spam=spam-2
    --label-folder ham=easy-ham-2` reads them, the n-th keyed "user<n mod users>"."""
    import random

    from stream_nb.mail.sources import parse_label_folders, read_mail

    events = list(read_mail(SHARED / "spamassassin_2003.tar.gz",
                            label_folders=parse_label_folders(("spam=spam-2", "ham=easy-ham-2"))))
    random.Random(23).shuffle(events)
    return [dict(event, key=f"user{n % users}") for n, event in enumerate(events)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--enron", type=Path, default=SHARED / "enron_spam.tar.gz")
    parser.add_argument("--beta", type=float, nargs="+", default=None, help="default: configs/personal.toml's")
    parser.add_argument("--prior-beta", type=float, nargs="+", default=None, help="default: configs/personal.toml's")
    parser.add_argument("--shrinkage", nargs="+", default=None, choices=["key", "class"],
                        help="default: configs/personal.toml's")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="an override of configs/personal.toml for the per-key contenders (e.g. personal.max_key_features=20000)")
    parser.add_argument("--views", action="store_true",
                        help="also each per-key contender over mail.toml's three views ([personal] with [views])")
    parser.add_argument("--limit", type=int, default=None, help="the first N mails of the interleaved stream")
    parser.add_argument("--base", type=Path, default=CONFIGS / "mail.toml",
                        help="the global model's configuration, the one configs/personal.toml extends")
    parser.add_argument("--personal", type=Path, default=CONFIGS / "personal.toml",
                        help="the per-key configuration (its [personal] over --base)")
    parser.add_argument("--speed", type=int, default=0, metavar="REPEATS",
                        help="instead: replay speed, each contender alone from an empty model, alternating, "
                             "REPEATS times; medians and the ratio to the global model")
    parser.add_argument("--raw-mail", type=int, default=0, metavar="USERS",
                        help="with --speed: SpamAssassin 2003's raw messages keyed round-robin by USERS users")
    args = parser.parse_args(argv)
    if args.raw_mail and not args.speed:
        parser.error("--raw-mail measures speed only: add --speed REPEATS")
    if not args.enron.exists():
        print(f"missing corpus: {args.enron} (see ../shared/data/README)", file=sys.stderr)
        return 2
    shipped = load_config(CONFIGS / "personal.toml").personal
    base = args.base
    contenders = [contender(f"global ({base.name})", base, [])]
    for beta, prior_beta, shrinkage in itertools.product(args.beta or [shipped["beta"]],
                                                         args.prior_beta or [shipped["prior_beta"]],
                                                         args.shrinkage or [shipped["shrinkage"]]):
        overrides = [f"personal.beta={beta}", f"personal.prior_beta={prior_beta}", f"personal.shrinkage=\"{shrinkage}\"",
                     *args.set]
        contenders.append(contender(f"per key: beta={beta:g} prior_beta={prior_beta:g} {shrinkage}"
                                    + "".join(f" {item.split('.', 1)[-1]}" for item in args.set),
                                    args.personal, overrides))
        contenders[-1].overrides = overrides
        if args.views:
            with_views = [*overrides, mail_views()]
            contenders.append(contender(contenders[-1].name + " + mail.toml's views", args.personal, with_views))
            contenders[-1].overrides = with_views
    events = (raw_mail_keyed(args.raw_mail) if args.raw_mail else round_robin(args.enron))[: args.limit]
    if args.speed:
        return speed(events, args, contenders)
    started = time.perf_counter()
    replay_contenders(events, contenders, batch_size=1000)
    print(f"Enron-Spam's six mailboxes round-robin, keyed by mailbox: {len(events):,} mails, "
          f"{time.perf_counter() - started:.0f} s for {len(contenders)} contenders")
    print("  per mailbox: accuracy/1-ROCA%")
    report(events, contenders)
    return 0


if __name__ == "__main__":
    sys.exit(main())
