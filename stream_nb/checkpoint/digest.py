"""Order-independent digests of a model state, and fingerprints of a configuration."""

from __future__ import annotations

import hashlib
import json

import numpy as np

_DIGEST_VERSION = b"stream-nb state digest 1\n"
_COUNT_KINDS = ("MultinomialNB", "BernoulliNB", "ComplementNB")


def _canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _float_bytes(array) -> bytes:
    # Exact: the IEEE 754 little-endian bytes; + 0.0 turns -0.0 into 0.0, which are equal counts.
    return np.ascontiguousarray(np.asarray(array, dtype=np.float64) + 0.0, dtype="<f8").tobytes()


def _sorted_rows(names: list, counts: np.ndarray, drop_zero: bool) -> tuple[list, np.ndarray]:
    """(names, rows of counts) in a canonical order: by the name when every name is a str (the
    common case, and fast), else by the JSON of the name. The names themselves are hashed, as
    JSON, so 1 and "1" stay apart whichever order was used."""
    if not names:
        return [], np.zeros(0)
    counts = np.asarray(counts).reshape(len(names), -1)
    rows = range(len(names))
    if drop_zero:
        rows = np.flatnonzero(counts.any(axis=1)).tolist()
    if all(type(name) is str for name in names):
        order = sorted(rows, key=names.__getitem__)
    else:
        keys = [json.dumps(name, sort_keys=True, ensure_ascii=True) for name in names]
        order = sorted(rows, key=keys.__getitem__)
    return [names[row] for row in order], counts[order]


class _Digest:
    def __init__(self, meta: dict) -> None:
        self._hash = hashlib.sha256(_DIGEST_VERSION)
        # What the counts mean belongs to the state: the same counts under another kind or
        # alpha are a different model. Classes are in canonical (sorted) order in the meta.
        self.part("model", _canonical_json({"kind": meta.get("kind"), "params": meta.get("params"),
                                            "classes": meta.get("classes")}))

    def part(self, name: str, data: bytes) -> None:
        # Length-prefixed, so no two different sequences of parts hash the same bytes.
        label = name.encode("ascii")
        self._hash.update(len(label).to_bytes(8, "little") + label + len(data).to_bytes(8, "little"))
        self._hash.update(data)

    def rows(self, name: str, names: list, counts: np.ndarray) -> None:
        self.part(name + ".names", _canonical_json(names))
        self.part(name, _float_bytes(counts))

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def state_digest(model_state: dict) -> str:
    """sha256 hex of the model's counts in a canonical order, independent of the order in which
    features (and classes) were first seen, so two runs over the same events can be compared.

    Hashed: kind, params and classes (canonical order), then per kind
      count models, exact vocabulary: feature names sorted (by their JSON unless all are str), rows of N_fc in that
          order (rows that are all zero are left out: a name can enter the vocabulary with no
          count, e.g. a zero value, and it changes nothing), then class_counts, class_totals, and with a
          feature budget the labeled events seen (where its next check falls);
      count models, hashed vocabulary: n_buckets and N_fc by bucket (buckets are fixed);
      CategoricalNB: (feature, value) pairs sorted by their JSON, with N_jac, features with N_jc,
          class_counts;
      GaussianNB: features sorted with n, mean, M2 and the pooled moments (rows all zero, a feature
          whose every observation was unlearned, left out), class_counts (exact
          bytes: the Welford means depend on the order of events, so only runs over the events
          in the same order compare equal);
      Experts (several feature views): the view names, each expert's digest as its kind's
          above (its arrays stored under "<v>/"), and the combination's weights (JSON);
      any other kind: a fallback over the sorted meta and every array by name, which does
          depend on first-seen order.
    Floats are hashed as their exact IEEE bytes: with whole-number counts (unit weights) the
    digest does not depend on the order of learning.
    """
    meta, arrays = model_state["meta"], model_state["arrays"]
    kind = meta.get("kind")
    digest = _Digest(meta)
    if kind in _COUNT_KINDS:
        vocabulary = meta["vocabulary"]
        counts = np.asarray(arrays["feature_counts"])
        if vocabulary["kind"] == "hashed":
            digest.part("n_buckets", _canonical_json(vocabulary["n_buckets"]))
            digest.part("feature_counts", _float_bytes(counts))
        else:
            names, rows = _sorted_rows(vocabulary["names"], counts, drop_zero=True)
            digest.rows("feature_counts", names, rows)
        digest.part("class_counts", _float_bytes(arrays["class_counts"]))
        digest.part("class_totals", _float_bytes(arrays["class_totals"]))
        if "labeled_seen" in meta:  # a budget or forgetting: where the next maintenance point falls is state too
            digest.part("labeled_seen", _canonical_json(meta["labeled_seen"]))
    elif kind == "CategoricalNB":
        pairs = [list(pair) for pair in meta["values"]]
        features = list(dict.fromkeys(feature for feature, _ in pairs))  # j = order of first appearance
        # Declared categories have rows with no count; they are part of the parameters already.
        names, rows = _sorted_rows(pairs, arrays["value_counts"], drop_zero=True)
        digest.rows("value_counts", names, rows)
        names, rows = _sorted_rows(features, arrays["feature_counts"], drop_zero=True)
        digest.rows("feature_counts", names, rows)
        digest.part("class_counts", _float_bytes(arrays["class_counts"]))
    elif kind == "Experts":
        digest.part("views", _canonical_json(meta["views"]))
        for v, expert_meta in enumerate(meta["experts"]):
            prefix = f"{v}/"
            expert = {"meta": expert_meta,
                      "arrays": {name[len(prefix):]: array for name, array in arrays.items() if name.startswith(prefix)}}
            digest.part(f"expert.{v}", state_digest(expert).encode("ascii"))
        digest.part("pool", _canonical_json(meta["pool"]))
    elif kind == "GaussianNB":
        features = meta["features"]
        stacked = np.hstack([np.asarray(arrays[name]).reshape(len(features), -1)
                             for name in ("n", "mean", "m2", "pooled")]) if features else np.zeros((0, 0))
        names, rows = _sorted_rows(features, stacked, drop_zero=True)  # all zero: every observation unlearned
        digest.rows("n|mean|m2|pooled", names, rows)
        digest.part("class_counts", _float_bytes(arrays["class_counts"]))
    else:
        # Unknown kind: no canonical order known, so hash everything as stored.
        digest.part("fallback.meta", _canonical_json(meta))
        for name in sorted(arrays):
            array = np.asarray(arrays[name])
            digest.part("fallback." + name, _canonical_json([array.dtype.str, list(array.shape)]) + array.tobytes())
    return digest.hexdigest()


def _normalise(value):
    # 1 and 1.0 configure the same model; TOML gives either. (bool is an int but stays a bool.)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _normalise(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(item) for item in value]
    return value


def config_fingerprint(config: dict) -> str:
    """sha256 hex of the canonical JSON of a configuration, e.g. {"model": ..., "features": ...}.

    Key order does not matter and integral floats equal their integers (alpha = 1 and 1.0 are
    one configuration); anything else that differs gives a different fingerprint. Pass the
    configuration with defaults filled in, so leaving a default implicit changes nothing.
    """
    return hashlib.sha256(_canonical_json(_normalise(config))).hexdigest()
