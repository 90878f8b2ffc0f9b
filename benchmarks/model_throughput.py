#!/usr/bin/env python
"""Throughput and memory of stream_nb's naive Bayes models against River, side by side.

The benchmark of the issue: on the SMS Spam Collection, repeated in file order to >= 50,000
events, prequential (predict, then learn, every event), with River measured in the same run
(medians of repeats, both sides tokenising their own input), printing both rates and the ratio.

Sections
  1. end to end, MultinomialNB: ours = TextFeaturizer.river_compatible().transform_sparse +
     MultinomialNB(unknown="smooth").predict_learn_many on chunks of raw texts (poll-sized
     batches), against River's BagOfWords() | MultinomialNB() one event at a time
     (predict_proba_one, then learn_one, on the raw string).           target: ours >= 20x River
  2. same predictions: argmax of ours (configured alike) against River's on every event of
     section 1's first repeat; exact ties are counted apart.            target: 0 disagreements
  3. pre-tokenised, MultinomialNB: the same feature dicts handed to both; River's per-event loop
     against our predict_learn_many.                                    target: ours >= 20x River
  4. BernoulliNB and 5. ComplementNB: River's per-event cost grows with the vocabulary (it loops
     over every known feature), so both sides run on the same prefix of the stream for the ratio;
     ours is also reported on the whole stream.                        target: ours >= 100x River
  6. memory per distinct feature (state + vocabulary), tracemalloc, MultinomialNB, 2 classes.
                                                                       target: ours <= 0.5x River

Rates are events per second (events / wall time of the whole prequential pass, perf_counter),
median over --repeats fresh models, gc.collect() before every timed pass. On the River side the
timed loop calls predict_proba_one (predict_one is predict_proba_one plus an argmax, so this is,
if anything, generous to River) and learn_one.

Exit status: 0 when the run completes, whether or not the speed/memory targets are met (FAIL is
printed); 1 if predictions of the alike-configured models disagree or the tokenisers disagree;
2 if the corpus is missing; anything else non-zero on an error.

    .venv/bin/python benchmarks/model_throughput.py            # full run (~5 minutes)
    .venv/bin/python benchmarks/model_throughput.py --quick    # smoke run (seconds)
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "sms_spam_collection" / "SMSSpamCollection"

MNB_TARGET = 20.0  # ours / River, MultinomialNB (end to end and pre-tokenised)
OTHER_TARGET = 100.0  # ours / River, BernoulliNB and ComplementNB
MEMORY_TARGET = 0.5  # ours / River bytes per distinct feature (at most)
TIE_TOLERANCE = 0.0  # a prediction is a tie when its two best probabilities are exactly equal


# ---- data -------------------------------------------------------------------------------------


def load_sms_spam(path: Path) -> list[tuple[str, str]]:
    """(label, text) pairs in file order, read by the project's corpus loader."""
    from stream_nb.replay.corpora import sms_spam

    return [(event["label"], event["text"]) for event in sms_spam(path)]


def make_stream(rows: list[tuple[str, str]], n_events: int) -> tuple[list[str], list[str]]:
    """The corpus repeated in file order, cut at n_events."""
    repeats = -(-n_events // len(rows))
    stream = (rows * repeats)[:n_events]
    return [text for _, text in stream], [label for label, _ in stream]


# ---- helpers ----------------------------------------------------------------------------------


def fmt_rate(rate: float) -> str:
    return f"{rate:>12,.0f}"


def argmax(proba: dict):
    """(label, is_tie): the most probable class; ties broken by sorted label, flagged."""
    if not proba:
        return None, False
    ranked = sorted(proba.items(), key=lambda item: (-item[1], str(item[0])))
    tie = len(ranked) > 1 and ranked[0][1] - ranked[1][1] <= TIE_TOLERANCE
    return ranked[0][0], tie


def timed(fn):
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


class Results:
    """Rows of the final summary table."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str, str]] = []

    def add(self, name, ours, river, ratio, target, verdict) -> None:
        self.rows.append((name, ours, river, ratio, target, verdict))

    def print(self) -> None:
        headers = ("check", "ours", "river", "ratio", "target", "result")
        widths = [max(len(str(row[i])) for row in [headers, *self.rows]) for i in range(6)]
        line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))
        print(line)
        print("-" * len(line))
        for row in self.rows:
            print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))))


def print_comparison(results: Results, name: str, ours_rate: float, river_rate: float, target: float,
                     detail: str = "") -> bool:
    ratio = ours_rate / river_rate
    ok = ratio >= target
    print(f"  ours   events/s {fmt_rate(ours_rate)}" + (f"   ({detail})" if detail else ""))
    print(f"  river  events/s {fmt_rate(river_rate)}")
    print(f"  ratio           {ratio:>12.1f}x")
    print(f"  target          {'>= ' + format(target, 'g') + 'x':>12}   {'PASS' if ok else 'FAIL'}")
    results.add(name, f"{ours_rate:,.0f}/s", f"{river_rate:,.0f}/s", f"{ratio:.1f}x", f">= {target:g}x",
                "PASS" if ok else "FAIL")
    return ok


def median_rate(n_events: int, seconds: list[float]) -> float:
    return n_events / statistics.median(seconds)


# ---- prequential passes -----------------------------------------------------------------------


def ours_end_to_end(model, featurizer, texts, labels, chunk):
    out = []
    for start in range(0, len(texts), chunk):
        stop = start + chunk
        # transform_sparse: token lists straight to the model, no dict per message
        out.extend(model.predict_learn_many(featurizer.transform_sparse(texts[start:stop]), labels[start:stop]))
    return out


def ours_pretokenised(model, X, labels, chunk):
    out = []
    for start in range(0, len(X), chunk):
        stop = start + chunk
        out.extend(model.predict_learn_many(X[start:stop], labels[start:stop]))
    return out


def river_loop(model, inputs, labels):
    """River's per-event prequential loop (model may be a Pipeline taking raw strings)."""
    out = []
    predict, learn, append = model.predict_proba_one, model.learn_one, out.append
    for x, y in zip(inputs, labels):
        append(predict(x))
        learn(x, y)
    return out


# ---- sections ---------------------------------------------------------------------------------


def section_multinomial(args, texts, labels, X, results) -> int:
    from river import compose, feature_extraction
    from river import naive_bayes as river_nb

    from stream_nb import MultinomialNB
    from stream_nb.features import TextFeaturizer

    n = len(texts)
    chunks = [args.chunk, n] if args.chunk < n else [n]
    e2e = {c: [] for c in chunks}
    pre = {c: [] for c in chunks}
    river_e2e, river_pre = [], []
    ours_first = river_first = river_pre_first = ours_pre_first = None

    for repeat in range(args.repeats):
        for c in chunks:
            seconds, out = timed(lambda: ours_end_to_end(
                MultinomialNB(unknown="smooth"), TextFeaturizer.river_compatible(), texts, labels, c))
            e2e[c].append(seconds)
            if repeat == 0 and c == args.chunk:
                ours_first = out
        pipeline = compose.Pipeline(feature_extraction.BagOfWords(), river_nb.MultinomialNB(alpha=1.0))
        seconds, out = timed(lambda: river_loop(pipeline, texts, labels))
        river_e2e.append(seconds)
        if repeat == 0:
            river_first = out

        for c in chunks:
            seconds, out = timed(lambda: ours_pretokenised(MultinomialNB(unknown="smooth"), X, labels, c))
            pre[c].append(seconds)
            if repeat == 0 and c == args.chunk:
                ours_pre_first = out
        seconds, out = timed(lambda: river_loop(river_nb.MultinomialNB(alpha=1.0), X, labels))
        river_pre.append(seconds)
        if repeat == 0:
            river_pre_first = out
        print(f"  (repeat {repeat + 1}/{args.repeats} done)", file=sys.stderr, flush=True)

    print(f"\n[1] end to end, MultinomialNB: {n:,} events, prequential, median of {args.repeats}")
    print("    ours : TextFeaturizer.river_compatible().transform_sparse + MultinomialNB(unknown='smooth')"
          f".predict_learn_many, {args.chunk:,} events per call")
    print("    river: Pipeline(BagOfWords(), MultinomialNB()) per event: predict_proba_one(text), learn_one(text, y)")
    river_rate = median_rate(n, river_e2e)
    print_comparison(results, f"[1] MNB end to end (chunk {args.chunk:,})", median_rate(n, e2e[args.chunk]),
                     river_rate, MNB_TARGET, f"chunk {args.chunk:,}")
    for c in chunks[1:]:
        rate = median_rate(n, e2e[c])
        print(f"  ours, one call of {c:,} events: {fmt_rate(rate)} events/s = {rate / river_rate:.1f}x River")
        results.add(f"[1] MNB end to end (one call of {c:,})", f"{rate:,.0f}/s", f"{river_rate:,.0f}/s",
                    f"{rate / river_rate:.1f}x", f">= {MNB_TARGET:g}x", "PASS" if rate / river_rate >= MNB_TARGET else "FAIL")

    print(f"\n[2] same predictions (ours alike: river_compatible tokens, unknown='smooth', alpha=1), {n:,} events")
    status = 0
    for name, ours_out, river_out in (("end to end", ours_first, river_first),
                                      ("pre-tokenised", ours_pre_first, river_pre_first)):
        disagree, ties, max_diff = 0, 0, 0.0
        first_bad = None
        for i, (p, q) in enumerate(zip(ours_out, river_out)):
            (a, tie_a), (b, tie_b) = argmax(p), argmax(q)
            if tie_a or tie_b:
                ties += 1
                continue
            if a != b:
                disagree += 1
                if first_bad is None:
                    first_bad = (i, p, q)
            for label in set(p) | set(q):
                max_diff = max(max_diff, abs(p.get(label, 0.0) - q.get(label, 0.0)))
        if len(ours_out) != len(river_out):
            disagree += abs(len(ours_out) - len(river_out))
        ok = disagree == 0
        print(f"  {name:<14} disagreements {disagree:>6,}   ties (set apart) {ties:>4,}   "
              f"max |P_ours - P_river| {max_diff:.3g}   {'PASS' if ok else 'FAIL'}")
        if first_bad is not None:
            print(f"    first disagreement at event {first_bad[0]}: ours {first_bad[1]} river {first_bad[2]}")
        results.add(f"[2] MNB same predictions ({name})", f"{disagree} disagree", f"{ties} ties",
                    f"max dP {max_diff:.2g}", "0 disagree", "PASS" if ok else "FAIL")
        if not ok:
            status = 1

    print(f"\n[3] pre-tokenised, MultinomialNB: {n:,} events, the same feature dicts to both, median of {args.repeats}")
    print(f"    ours : MultinomialNB(unknown='smooth').predict_learn_many, {args.chunk:,} events per call")
    print("    river: MultinomialNB() per event: predict_proba_one(x), learn_one(x, y)")
    river_rate = median_rate(n, river_pre)
    print_comparison(results, f"[3] MNB pre-tokenised (chunk {args.chunk:,})", median_rate(n, pre[args.chunk]),
                     river_rate, MNB_TARGET, f"chunk {args.chunk:,}")
    for c in chunks[1:]:
        rate = median_rate(n, pre[c])
        print(f"  ours, one call of {c:,} events: {fmt_rate(rate)} events/s = {rate / river_rate:.1f}x River")
        results.add(f"[3] MNB pre-tokenised (one call of {c:,})", f"{rate:,.0f}/s", f"{river_rate:,.0f}/s",
                    f"{rate / river_rate:.1f}x", f">= {MNB_TARGET:g}x", "PASS" if rate / river_rate >= MNB_TARGET else "FAIL")
    return status


def section_other(args, number, variant, texts, labels, X, results) -> None:
    from river import compose, feature_extraction
    from river import naive_bayes as river_nb

    import stream_nb
    from stream_nb.features import TextFeaturizer

    ours_cls = getattr(stream_nb, variant)
    river_cls = getattr(river_nb, variant)
    # Configured like River: River's BernoulliNB sums over known features only (unknown ones are
    # ignored); River's ComplementNB gives an unknown feature alpha (our unknown="smooth").
    params = {"alpha": 1.0, "unknown": "smooth" if variant == "ComplementNB" else "ignore"}
    n = len(texts)
    prefix = min(args.prefix, n)
    chunk = args.chunk
    p_texts, p_labels, p_X = texts[:prefix], labels[:prefix], X[:prefix]

    ours_pre_prefix, ours_e2e_prefix, ours_pre_full, ours_e2e_full = [], [], [], []
    river_pre_prefix, river_e2e_prefix = [], []
    agree_out = None
    for repeat in range(args.repeats):
        seconds, out = timed(lambda: ours_pretokenised(ours_cls(**params), p_X, p_labels, chunk))
        ours_pre_prefix.append(seconds)
        ours_first = out
        seconds, _ = timed(lambda: ours_end_to_end(ours_cls(**params), TextFeaturizer.river_compatible(),
                                                   p_texts, p_labels, chunk))
        ours_e2e_prefix.append(seconds)
        seconds, out = timed(lambda: river_loop(river_cls(alpha=1.0), p_X, p_labels))
        river_pre_prefix.append(seconds)
        if repeat == 0:
            agree_out = (ours_first, out)
        pipeline = compose.Pipeline(feature_extraction.BagOfWords(), river_cls(alpha=1.0))
        seconds, _ = timed(lambda: river_loop(pipeline, p_texts, p_labels))
        river_e2e_prefix.append(seconds)
        if repeat < args.full_repeats:  # information only; not part of the ratio
            seconds, _ = timed(lambda: ours_pretokenised(ours_cls(**params), X, labels, chunk))
            ours_pre_full.append(seconds)
            seconds, _ = timed(lambda: ours_end_to_end(ours_cls(**params), TextFeaturizer.river_compatible(),
                                                       texts, labels, chunk))
            ours_e2e_full.append(seconds)
        print(f"  ({variant} repeat {repeat + 1}/{args.repeats} done)", file=sys.stderr, flush=True)

    print(f"\n[{number}] {variant}: ratio on the same prefix, the first {prefix:,} events of the stream "
          f"(River's cost per event grows with the vocabulary), median of {args.repeats}")
    print(f"    ours : {variant}({', '.join(f'{k}={v!r}' for k, v in params.items())}).predict_learn_many, "
          f"{chunk:,} events per call")
    print(f"    river: {variant}(alpha=1.0) per event: predict_proba_one, learn_one")
    print(f"  pre-tokenised, {prefix:,} events:")
    print_comparison(results, f"[{number}] {variant} pre-tokenised ({prefix:,} ev)",
                     median_rate(prefix, ours_pre_prefix), median_rate(prefix, river_pre_prefix), OTHER_TARGET)
    print(f"  end to end (each side tokenising), {prefix:,} events:")
    print_comparison(results, f"[{number}] {variant} end to end ({prefix:,} ev)",
                     median_rate(prefix, ours_e2e_prefix), median_rate(prefix, river_e2e_prefix), OTHER_TARGET)
    full_pre, full_e2e = median_rate(n, ours_pre_full), median_rate(n, ours_e2e_full)
    print(f"  ours on the whole stream, {n:,} events (median of {len(ours_pre_full)}): "
          f"pre-tokenised {fmt_rate(full_pre).strip()} events/s, end to end {fmt_rate(full_e2e).strip()} events/s "
          f"(River not run on {n:,} events: too slow)")
    results.add(f"[{number}] {variant} ours only, pre-tok. ({n:,} ev)", f"{full_pre:,.0f}/s", "-", "-", "-", "info")
    results.add(f"[{number}] {variant} ours only, end to end ({n:,} ev)", f"{full_e2e:,.0f}/s", "-", "-", "-", "info")
    ours_out, river_out = agree_out
    disagree = ties = 0
    for p, q in zip(ours_out, river_out):
        (a, tie_a), (b, tie_b) = argmax(p), argmax(q)
        if tie_a or tie_b:
            ties += 1
        elif a != b:
            disagree += 1
    print(f"  (info) argmax disagreements with River on the {prefix:,}-event prefix: {disagree:,} "
          f"(ties set apart: {ties:,}); not a target: the formulas differ"
          + (" (River adds 1e-9 to every Bernoulli factor)" if variant == "BernoulliNB" else ""))


def traced_growth(build):
    """(bytes retained, peak bytes above the start, result) of build() under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    result = build()
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return current - base, peak - base, result


def section_memory(args, labels, X, results) -> None:
    from river import naive_bayes as river_nb

    from stream_nb import MultinomialNB

    chunk = args.chunk

    def ours_learn(X_in):
        model = MultinomialNB(unknown="smooth")
        for start in range(0, len(X_in), chunk):
            model.learn_many(X_in[start:start + chunk], labels[start:start + chunk])
        return model

    def river_learn(X_in):
        model = river_nb.MultinomialNB(alpha=1.0)
        for x, y in zip(X_in, labels):
            model.learn_one(x, y)
        return model

    def fresh_names(X_in):
        """Copies of the dicts whose keys are new string objects (allocated while traced)."""
        return [{(k + " ")[:-1]: v for k, v in x.items()} for x in X_in]

    def with_fresh_names(learn):
        def build():
            X_fresh = fresh_names(X)
            model = learn(X_fresh)
            del X_fresh  # the model now holds the only reference to one string per feature
            return model
        return build

    n = len(X)
    print(f"\n[6] memory per distinct feature, MultinomialNB, all {n:,} events learned, tracemalloc")
    ours_bytes, ours_peak, ours_model = traced_growth(lambda: ours_learn(X))
    river_bytes, river_peak, river_model = traced_growth(lambda: river_learn(X))
    n_ours, n_river = ours_model.n_terms, river_model.n_terms
    classes = len(ours_model.classes_), len(river_model.classes_)
    if n_ours != n_river:
        raise RuntimeError(f"vocabulary sizes differ: ours {n_ours} river {n_river}")
    ours_pf, river_pf = ours_bytes / n_ours, river_bytes / n_river
    print(f"    distinct features {n_ours:,}, classes {classes[0]} (ours) / {classes[1]} (river)")
    print("    (a) dicts built before tracing: feature-name strings are shared with the input, counted on neither side")
    ratio = ours_pf / river_pf
    ok = ratio <= MEMORY_TARGET
    print(f"  ours   bytes/feature {ours_pf:>10.1f}   (retained {ours_bytes:,} B, peak {ours_peak:,} B)")
    print(f"  river  bytes/feature {river_pf:>10.1f}   (retained {river_bytes:,} B, peak {river_peak:,} B)")
    print(f"  ratio                {ratio:>10.2f}x")
    print(f"  target               {'<= ' + format(MEMORY_TARGET, 'g') + 'x':>10}   {'PASS' if ok else 'FAIL'}")
    results.add("[6] MNB bytes/feature (names shared)", f"{ours_pf:.0f} B", f"{river_pf:.0f} B", f"{ratio:.2f}x",
                f"<= {MEMORY_TARGET:g}x", "PASS" if ok else "FAIL")
    results.add("[6] MNB peak while learning", f"{ours_peak / 1e6:.1f} MB", f"{river_peak / 1e6:.1f} MB",
                f"{ours_peak / river_peak:.2f}x", "-", "info")
    del ours_model, river_model

    ours_bytes, ours_peak, ours_model = traced_growth(with_fresh_names(ours_learn))
    river_bytes, river_peak, river_model = traced_growth(with_fresh_names(river_learn))
    ours_pf, river_pf = ours_bytes / ours_model.n_terms, river_bytes / river_model.n_terms
    ratio = ours_pf / river_pf
    print("    (b) feature names allocated while traced (the model keeps one string per feature), "
          "input dicts freed before measuring")
    print(f"  ours   bytes/feature {ours_pf:>10.1f}   (retained {ours_bytes:,} B)")
    print(f"  river  bytes/feature {river_pf:>10.1f}   (retained {river_bytes:,} B)")
    print(f"  ratio                {ratio:>10.2f}x   {'PASS' if ratio <= MEMORY_TARGET else 'FAIL'} (same target)")
    results.add("[6] MNB bytes/feature (names counted)", f"{ours_pf:.0f} B", f"{river_pf:.0f} B", f"{ratio:.2f}x",
                f"<= {MEMORY_TARGET:g}x", "PASS" if ratio <= MEMORY_TARGET else "FAIL")


def code_version(package_dir: Path) -> str:
    """git commit of the imported stream_nb, and whether its files differ from that commit."""
    import subprocess

    try:
        run = lambda *cmd: subprocess.run(["git", *cmd], cwd=package_dir, capture_output=True, text=True,
                                          timeout=10, check=True).stdout.strip()
        commit = run("rev-parse", "--short", "HEAD")
        dirty = run("status", "--porcelain", "--", ".")
        return f"git {commit}" + (", with uncommitted changes" if dirty else ", clean")
    except Exception:  # not a git checkout (an installed copy, an archive)
        return "not a git checkout"


# ---- main -------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=50_000, help="events in the stream (default 50,000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; medians are reported (default 5)")
    parser.add_argument("--chunk", type=int, default=1_000,
                        help="events per predict_learn_many call on our side (default 1,000, a poll batch)")
    parser.add_argument("--prefix", type=int, default=2_000,
                        help="stream prefix on which BernoulliNB/ComplementNB are compared with River (default 2,000)")
    parser.add_argument("--full-repeats", type=int, default=1,
                        help="repeats of our BernoulliNB/ComplementNB on the whole stream, reported for "
                             "information only (default 1: our BernoulliNB slows down as the stream grows)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="path of SMSSpamCollection")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5,000 events, 1 repeat, prefix 500")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip, e.g. 4,5,6")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.repeats, args.prefix = 5_000, 1, 500
    if args.events < 1 or args.repeats < 1 or args.chunk < 1 or args.prefix < 1 or args.full_repeats < 1:
        parser.error("--events, --repeats, --chunk, --prefix and --full-repeats must be >= 1")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}

    if not args.corpus.is_file():
        print(f"error: SMS Spam Collection not found at {args.corpus}\n"
              "       (expected the shared data next to the repository: ../shared/data/sms_spam_collection/"
              "SMSSpamCollection; or pass --corpus PATH)", file=sys.stderr)
        return 2

    import numpy
    import river
    from river import feature_extraction

    import stream_nb
    from stream_nb.features import TextFeaturizer

    rows = load_sms_spam(args.corpus)
    texts, labels = make_stream(rows, args.events)
    print("stream_nb model throughput vs River")
    print(f"  python {platform.python_version()}, numpy {numpy.__version__}, river {river.__version__}, "
          f"stream_nb {stream_nb.__version__}, {platform.machine()}")
    print(f"  stream_nb imported from {Path(stream_nb.__file__).parent} ({code_version(Path(stream_nb.__file__).parent)})")
    print(f"  corpus {args.corpus} ({len(rows):,} messages), stream {len(texts):,} events "
          f"(corpus repeated in file order), repeats {args.repeats}, chunk {args.chunk:,}")

    # The pre-tokenised dicts (sections 3-6), and a check that both tokenisers agree.
    X = TextFeaturizer.river_compatible().transform_many(texts)
    bow = feature_extraction.BagOfWords()
    unique = min(len(rows), len(texts))
    token_mismatch = sum(bow.transform_one(texts[i]) != X[i] for i in range(unique))
    print(f"  tokens: TextFeaturizer.river_compatible() vs River BagOfWords() differ on {token_mismatch} of "
          f"the first {unique:,} messages")
    status = 1 if token_mismatch else 0

    results = Results()
    if "1" not in skip:
        status = max(status, section_multinomial(args, texts, labels, X, results))
    if "4" not in skip:
        section_other(args, 4, "BernoulliNB", texts, labels, X, results)
    if "5" not in skip:
        section_other(args, 5, "ComplementNB", texts, labels, X, results)
    if "6" not in skip:
        section_memory(args, labels, X, results)

    print("\nsummary")
    results.print()
    if status:
        print("\nERROR: predictions or tokens of the alike-configured models disagree (exit 1)")
    return status


if __name__ == "__main__":
    sys.exit(main())
