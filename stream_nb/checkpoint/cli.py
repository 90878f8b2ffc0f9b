"""`stream-nb inspect DIR [--json] [--top N]`: what the newest valid checkpoint holds."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from stream_nb.checkpoint.digest import state_digest
from stream_nb.checkpoint.store import Checkpoint, CheckpointError, CheckpointStore
from stream_nb.checkpoint.store import log as store_log
from stream_nb.model.experts import Experts
from stream_nb.model.registry import kind_of

_PROG = "stream-nb inspect"


def register(subparsers) -> None:
    inspect = subparsers.add_parser("inspect", help="summarise the newest valid checkpoint in a directory")
    inspect.add_argument("directory", type=Path, metavar="DIR", help="checkpoint directory")
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    inspect.add_argument("--top", type=int, default=10, metavar="N", help="top features per class (default 10)")
    inspect.set_defaults(func=run_inspect)


def _number(value) -> int | float:
    # Counts are whole numbers unless sample weights were fractional; print them as such.
    value = float(value)
    return int(value) if value.is_integer() else value


def _top_rows(counts: np.ndarray, labels: list, top: int) -> list[tuple[object, float]]:
    """The `top` largest positive entries of `counts`, ties broken by label (deterministic)."""
    if top <= 0 or not len(counts):
        return []
    positive = np.flatnonzero(counts > 0)
    if len(positive) > top:
        threshold = np.partition(counts[positive], len(positive) - top)[len(positive) - top]
        positive = positive[counts[positive] >= threshold]  # keeps every tie at the threshold
    ranked = sorted(positive.tolist(), key=lambda row: (-counts[row], json.dumps(labels[row], sort_keys=True)))
    return [(labels[row], float(counts[row])) for row in ranked[:top]]


def _telling_features(counts: np.ndarray, class_counts: np.ndarray, names: list, classes: list, bernoulli: bool,
                      alpha: float, top: int) -> list[dict]:
    """Per class c, the features that told c apart from the other classes most, over all it learned:

        N_fc * [log P(f | c) - log P(f | not c)]

    the evidence a clue gives (x_f times the log-ratio), summed over c's events. Multinomial:
    P(f | c) = (N_fc + a) / (N_c + a |V|), N_c the class's total count; Bernoulli:
    (N_fc + a) / (D_c + 2a), D_c its events; "not c" pools the other classes. a is the model's
    alpha, or 1 when alpha = 0 (an MLE ratio is infinite for any feature one side never had)."""
    if len(classes) < 2 or not counts.size or top <= 0:
        return []
    a = alpha if alpha > 0 else 1.0
    totals = class_counts if bernoulli else counts.sum(axis=0)
    width = 2 * a if bernoulli else a * len(names)
    row_numbers = list(range(len(names)))
    result = []
    for c, label in enumerate(classes):
        own, rest = counts[:, c], counts.sum(axis=1) - counts[:, c]
        own_total, rest_total = totals[c], totals.sum() - totals[c]
        evidence = own * (np.log((own + a) / (own_total + width)) - np.log((rest + a) / (rest_total + width)))
        rows = _top_rows(np.where(evidence > 0, evidence, 0.0), row_numbers, top)
        result.append({"class": label, "features": [{"feature": names[row], "count": _number(own[row]),
                                                     "evidence": round(float(weight), 3)} for row, weight in rows]})
    return result


def _model_class(kind_name: str):
    try:
        return kind_of(kind_name)
    except ValueError as error:
        raise CheckpointError(f"{error} in the checkpoint") from None


def summarise(checkpoint: Checkpoint, top: int = 10) -> dict:
    """Everything `inspect` prints, as one JSON-able dict."""
    state = checkpoint.model_state
    if state["meta"].get("kind") == "Experts":
        model = _summarise_experts(state, checkpoint.path, top)
    else:
        model = _summarise_model(state, checkpoint.path, top)
    return {
        "id": checkpoint.id,
        "path": str(checkpoint.path),
        "created_at": checkpoint.created_at,
        "created_at_utc": datetime.fromtimestamp(checkpoint.created_at, timezone.utc).isoformat(timespec="seconds"),
        "fingerprint": checkpoint.fingerprint,
        **model,
        "offsets": [{"topic": topic, "partition": partition, "offset": offset}
                    for (topic, partition), offset in sorted(checkpoint.offsets.items())],
        "state_digest": state_digest(state),
        "extra": _summarise_extra(checkpoint.extra),
    }


def _summarise_experts(state: dict, path, top: int) -> dict:
    """An Experts state (several feature views): each expert summarised as a model of its own,
    with its view's name and weight, and the combination's state."""
    try:
        model = Experts.from_state(state)
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: the model state does not restore: {error}") from None
    experts = []
    for v, (name, weight) in enumerate(zip(model.names, model.pool.weights)):
        prefix = f"{v}/"
        expert_state = {"meta": state["meta"]["experts"][v],
                        "arrays": {key[len(prefix):]: array for key, array in state["arrays"].items()
                                   if key.startswith(prefix)}}
        experts.append({"view": name, "weight": weight, **_summarise_model(expert_state, path, top)})
    return {"kind": "experts", "model_class": "Experts", "params": experts[0]["params"], "classes": model.classes_,
            "class_counts": experts[0]["class_counts"], "events_learned": _number(model.events_learned),
            "vocabulary_size": sum(expert["vocabulary_size"] for expert in experts),
            "vocabulary": {"kind": "views", "size": sum(expert["vocabulary_size"] for expert in experts)},
            "top_features": [], "telling_features": [], "experts": experts, "combination": model.pool.to_state()}


def _summarise_model(state: dict, path, top: int) -> dict:
    """The model part of `summarise` for one model's state."""
    meta, arrays = state["meta"], state["arrays"]
    registry_name, cls = _model_class(meta.get("kind"))
    try:
        model = cls.from_state(state)  # proves the state restores, and gives the model's own view
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: the model state does not restore: {error}") from None
    classes = model.classes_
    class_counts = [_number(n) for n in np.asarray(arrays["class_counts"]).tolist()]
    top_features: list[dict] = []
    telling_features: list[dict] = []
    vocabulary: dict
    if "vocabulary" in meta:  # count models: N_fc per (feature, class)
        counts = np.asarray(arrays["feature_counts"]).reshape(-1, len(classes)) if classes else np.zeros((0, 0))
        vocab = meta["vocabulary"]
        names = vocab["names"] if vocab["kind"] == "exact" else [f"#bucket{b}" for b in range(vocab["n_buckets"])]
        vocabulary = {"kind": vocab["kind"], "size": len(names),
                      "with_counts": int(np.count_nonzero(counts.any(axis=1))) if counts.size else 0}
        for c, label in enumerate(classes):
            rows = _top_rows(counts[:, c], names, top)
            top_features.append({"class": label, "features": [{"feature": name, "count": _number(n)} for name, n in rows]})
        telling_features = _telling_features(counts, np.asarray(arrays["class_counts"], dtype=float), names, classes,
                                             meta.get("kind") == "BernoulliNB", float(meta.get("params", {}).get("alpha", 1.0)),
                                             top)
    elif meta.get("kind") == "CategoricalNB":  # N_jac per (feature = value, class)
        pairs = [tuple(pair) for pair in meta["values"]]
        counts = np.asarray(arrays["value_counts"]).reshape(len(pairs), -1)
        vocabulary = {"kind": "categorical", "size": len(dict.fromkeys(f for f, _ in pairs)), "values": len(pairs)}
        for c, label in enumerate(classes):
            rows = _top_rows(counts[:, c], pairs, top)
            top_features.append({"class": label, "features": [{"feature": feature, "value": value, "count": _number(n)}
                                                              for (feature, value), n in rows]})
    else:  # Gaussian: moments, not counts; nothing to rank
        vocabulary = {"kind": "features", "size": len(meta.get("features", []))}
    return {
        "kind": registry_name,
        "model_class": cls.__name__,
        "params": meta.get("params", {}),
        "classes": classes,
        "class_counts": class_counts,
        "events_learned": _number(model.events_learned),
        "vocabulary_size": vocabulary["size"],
        "vocabulary": vocabulary,
        "top_features": top_features,
        "telling_features": telling_features,
    }


SHOWN_IDS = 5  # of the remembered ids, the newest this many (the memory holds 100,000 by default)
SHOWN_ITEMS = 10  # of any other list in a checkpoint's extra


def _summarise_extra(extra: dict) -> dict:
    """The worker's extra state as a person reads it: the remembered ids as their number, the
    memory's capacity and the newest few; any other long list as its length and first items."""
    summary = {}
    for key, value in extra.items():
        if key == "learned_ids" and isinstance(value, dict) and isinstance(value.get("ids"), list):
            ids = value["ids"]
            summary[key] = {"remembered": len(ids), "capacity": value.get("capacity"),
                            "newest": ids[-SHOWN_IDS:][::-1]}
        elif isinstance(value, list) and len(value) > SHOWN_ITEMS:
            summary[key] = {"count": len(value), "first": value[:SHOWN_ITEMS]}
        else:
            summary[key] = value
    return summary


def _format_text(summary: dict, top: int) -> str:
    lines = [
        f"checkpoint    {summary['id']}  {summary['created_at_utc']}  {summary['path']}",
        f"fingerprint   {summary['fingerprint']}",
        f"model         {summary['kind']} ({summary['model_class']})  "
        + " ".join(f"{key}={value!r}" for key, value in summary["params"].items()),
        f"events        {summary['events_learned']:,} learned",
        f"classes       {len(summary['classes'])}",
    ]
    width = max((len(str(label)) for label in summary["classes"]), default=0)
    for label, count in zip(summary["classes"], summary["class_counts"]):
        lines.append(f"  {str(label):<{width}}  {count:,} events")
    vocabulary = summary["vocabulary"]
    detail = {"exact": f"exact, {vocabulary.get('with_counts', 0):,} with counts",
              "hashed": f"hashed buckets, {vocabulary.get('with_counts', 0):,} used",
              "categorical": f"categorical features, {vocabulary.get('values', 0):,} values",
              "views": f"over {len(summary.get('experts', []))} feature views"}.get(vocabulary["kind"], "features")
    lines.append(f"vocabulary    {vocabulary['size']:,} ({detail})")
    for expert in summary.get("experts", []):
        lines.append(f"  view {expert['view']!r}: weight {expert['weight']:.4f}, {expert['events_learned']:,} learned, "
                     f"vocabulary {expert['vocabulary_size']:,}")
    if "combination" in summary:
        combination = summary["combination"]
        lines.append(f"combination   {combination['updates']:,} updates, learning rate {combination['learning_rate']}, "
                     f"share {combination['share']}, soft clip {combination['soft_clip']}, inputs {combination['scale']}, "
                     "offsets " + (", ".join(f"{label} {offset:+.4f}" for label, offset in combination["offsets"]) or "none"))
    if summary["top_features"]:
        lines.append(f"top {top} features per class (count)")
        for entry in summary["top_features"]:
            shown = ", ".join(
                (f"{f['feature']}={f['value']}" if "value" in f else str(f["feature"])) + f" {f['count']:,}"
                for f in entry["features"])
            lines.append(f"  {str(entry['class']):<{width}}  {shown or '(none)'}")
    if summary["telling_features"]:
        lines.append(f"top {top} telling features per class (count x log-ratio against the other classes, in nats)")
        for entry in summary["telling_features"]:
            shown = ", ".join(f"{f['feature']} {f['evidence']:,.1f}" for f in entry["features"])
            lines.append(f"  {str(entry['class']):<{width}}  {shown or '(none)'}")
    lines.append(f"offsets       {len(summary['offsets'])} partition(s)")
    for entry in summary["offsets"]:
        lines.append(f"  {entry['topic']} [{entry['partition']}]  next offset {entry['offset']:,}")
    if summary["extra"]:
        lines.append(f"extra         {json.dumps(summary['extra'], sort_keys=True)}")
    lines.append(f"state digest  {summary['state_digest']}")
    return "\n".join(lines)


class _SkipReporter(logging.Handler):
    """Sends the store's 'skipping checkpoint' warnings to stderr, once, in our own words."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"{_PROG}: warning: {record.getMessage()}", file=sys.stderr)


def run_inspect(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    if not directory.exists():
        print(f"{_PROG}: no such directory: {directory}", file=sys.stderr)
        return 1
    if not directory.is_dir():
        print(f"{_PROG}: not a directory: {directory}", file=sys.stderr)
        return 1
    handler, propagate = _SkipReporter(logging.WARNING), store_log.propagate
    store_log.addHandler(handler)
    store_log.propagate = False  # the root logger would print the same warning again
    try:
        checkpoint = CheckpointStore(directory).load_latest()
        if checkpoint is None:
            print(f"{_PROG}: no valid checkpoint in {directory}", file=sys.stderr)
            return 1
        summary = summarise(checkpoint, args.top)
    except CheckpointError as error:
        print(f"{_PROG}: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - the reader checks states; a slip still gets one line
        print(f"{_PROG}: {directory}: cannot summarise the checkpoint ({type(error).__name__}: {error})",
              file=sys.stderr)
        return 1
    finally:
        store_log.removeHandler(handler)
        store_log.propagate = propagate
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(_format_text(summary, args.top))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m stream_nb.checkpoint.cli inspect DIR` (the same as `stream-nb inspect DIR`)."""
    parser = argparse.ArgumentParser(prog="stream-nb")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
