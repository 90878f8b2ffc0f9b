"""Hostile checkpoints: real checkpoints of every model kind, mutated one invariant at a time,
each refused with one line naming what is wrong (reader, model, load_latest, snapshots, inspect);
files that declare huge sizes refused before anything is allocated; every good state still loads."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import logging
import random
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from stream_nb.checkpoint import CheckpointError, CheckpointStore, read_checkpoint
from stream_nb.checkpoint import cli as checkpoint_cli
from stream_nb.checkpoint.snapshot import assemble_snapshot, snapshot_records
from stream_nb.checkpoint.store import encode_checkpoint, parse_checkpoint
from stream_nb.config import BOUNDS
from stream_nb.model import (
    BernoulliNB,
    CategoricalNB,
    ComplementNB,
    GaussianNB,
    InvalidState,
    MultinomialNB,
    state_check,
)
from stream_nb.model.registry import model_from_state

from streams import gaussian_stream, text_stream

FP = "fingerprint-hostile"
OFFSETS = {("labeled", 0): 7}


def _categorical_stream(seed: int, n_events: int):
    rng = random.Random(seed)
    X, y = [], []
    for _ in range(n_events):
        label = rng.choice(["a", "b", "c"])
        x = {"colour": rng.choice(["red", "blue", label]), "size": rng.randint(1, 3)}
        if rng.random() < 0.3:
            del x["size"]  # a missing value: N_jc < N_c
        X.append(x)
        y.append(label)
    return X, y


def _text(model, seed=7, n=300):
    return _trained(model, text_stream(seed, n))


def _trained(model, stream):
    X, y = stream
    model.learn_many(X, y)
    return model


MODELS = {
    "multinomial": lambda: _text(MultinomialNB()),
    "multinomial_forgetting": lambda: _text(MultinomialNB(half_life=40, evict_every=20)),
    "multinomial_budget": lambda: _text(MultinomialNB(max_features=60, evict_every=20)),
    "multinomial_forgetting_budget": lambda: _text(MultinomialNB(half_life=40, max_features=60, evict_every=20)),
    "hashed": lambda: _text(MultinomialNB(n_hash_buckets=64)),
    "bernoulli": lambda: _text(BernoulliNB()),
    "complement": lambda: _text(ComplementNB()),
    "categorical": lambda: _trained(CategoricalNB(), _categorical_stream(3, 200)),
    "gaussian": lambda: _trained(GaussianNB(), gaussian_stream(5, 200)),
}


def _model(kind: str):
    return MODELS[kind]()


@pytest.fixture(scope="module")
def states() -> dict:
    models = {kind: _model(kind) for kind in MODELS}
    found = {kind: model.to_state() for kind, model in models.items()}
    # the fixtures are what they claim to be (else a mutation below would test nothing)
    assert found["multinomial_forgetting"]["meta"]["forgetting_epoch"] > 0
    assert found["multinomial_forgetting"]["meta"].get("on_grid") is True
    assert models["multinomial_budget"].features_evicted > 0
    assert found["hashed"]["meta"]["vocabulary"] == {"kind": "hashed", "n_buckets": 64}
    return found


COUNTING = {"multinomial", "multinomial_forgetting", "multinomial_budget", "multinomial_forgetting_budget",
            "hashed", "bernoulli", "complement"}
EXACT_VOCABULARY = COUNTING - {"hashed"}
ALL = set(MODELS)


# ---- mutations: (name, kinds it applies to, mutate(meta, arrays), phrase of the refusal) ---------

def _set(arrays, name, index, value):
    arrays[name] = arrays[name].copy()
    arrays[name][index] = value


def _feature_plus(delta):
    """N_fc of the first counted (feature, class) + delta, T_c moved along (so only the flag can object)."""
    def mutate(meta, arrays):
        counts = arrays["feature_counts"].copy()
        f, c = (int(i) for i in np.argwhere(counts > 0)[0])
        counts[f, c] += delta
        arrays["feature_counts"] = counts
        _set(arrays, "class_totals", c, arrays["class_totals"][c] + delta)
    return mutate


def _class_counts_to(values):
    def mutate(meta, arrays):
        arrays["class_counts"] = values(arrays["class_counts"])
    return mutate


def _meta(key, value):
    def mutate(meta, arrays):
        meta[key] = value
    return mutate


def _classes(change):
    def mutate(meta, arrays):
        meta["classes"] = change(list(meta["classes"]))
    return mutate


def _names(change):
    def mutate(meta, arrays):
        meta["vocabulary"]["names"] = change(list(meta["vocabulary"]["names"]))
    return mutate


def _hashed_buckets(n):
    def mutate(meta, arrays):
        meta["params"]["n_hash_buckets"] = n
        meta["vocabulary"]["n_buckets"] = n
    return mutate


def _first_nonzero_plus(name, delta):
    def mutate(meta, arrays):
        array = arrays[name].copy()
        at = tuple(int(i) for i in np.argwhere(array != 0)[0])
        array[at] += delta
        arrays[name] = array
    return mutate


def _gaussian_n_over_class(meta, arrays):
    n, pooled = arrays["n"].copy(), arrays["pooled"].copy()
    n[0, 0] = arrays["class_counts"][0] + 5
    pooled[0, 0] = n[0].sum()
    arrays["n"], arrays["pooled"] = n, pooled


def _gaussian_zero_weight_with_mean(meta, arrays):
    n, m2, pooled = arrays["n"].copy(), arrays["m2"].copy(), arrays["pooled"].copy()
    pooled[0, 0] -= n[0, 0]
    n[0, 0] = 0.0
    m2[0, 0] = 0.0
    arrays["n"], arrays["m2"], arrays["pooled"] = n, m2, pooled  # mean[0, 0] stays non-zero


def _drop(name):
    def mutate(meta, arrays):
        del arrays[name]
    return mutate


def _add_array(meta, arrays):
    arrays["surprise"] = np.zeros(3)


def _off_grid(meta, arrays):
    _feature_plus(2.0**-30)(meta, arrays)


MUTATIONS = [
    # the list
    ("class_counts shorter than classes", ALL, _class_counts_to(lambda a: a[:-1]), "'class_counts' has shape"),
    ("feature_counts transposed", COUNTING, lambda m, a: a.update(feature_counts=a["feature_counts"].T.copy()),
     "'feature_counts' has shape"),
    ("a negative count", COUNTING, _feature_plus(-1000.0), "negative counts"),
    ("NaN class count", ALL, lambda m, a: _set(a, "class_counts", 0, np.nan), "NaN or infinity"),
    ("infinite class count", ALL, lambda m, a: _set(a, "class_counts", 0, np.inf), "NaN or infinity"),
    ("NaN feature count", COUNTING, lambda m, a: _set(a, "feature_counts", (0, 0), np.nan), "NaN or infinity"),
    ("all class counts negative", ALL, _class_counts_to(lambda a: -a - 1.0), "negative counts"),
    ("duplicate class names", ALL, _classes(lambda c: [c[0]] + c[:-1]), "duplicate class labels"),
    ("boolean class name", ALL, _classes(lambda c: [True] + c[1:]), "class labels must be str or int"),
    ("null class name", ALL, _classes(lambda c: c[:-1] + [None]), "class labels must be str or int"),
    ("class_totals not the column sums", COUNTING - {"bernoulli"},
     lambda m, a: _set(a, "class_totals", 0, a["class_totals"][0] + 1.0), "class_totals T_c = sum_f N_fc"),
    ("fractional counts marked integral", {"multinomial", "multinomial_budget", "hashed", "complement",
                                           "bernoulli"}, _feature_plus(0.5), "fractional counts"),
    ("null feature name", EXACT_VOCABULARY, _names(lambda n: [None] + n[1:]), "feature name must be"),
    ("hashed n_buckets = 10^10", {"hashed"}, _hashed_buckets(10**10), "n_hash_buckets must be a whole number"),
    # and more
    ("classes out of order", ALL, _classes(lambda c: c[::-1]), "canonical order"),
    ("float class name", ALL, _classes(lambda c: [1.5] + c[1:]), "class labels must be str or int"),
    ("duplicate feature names", EXACT_VOCABULARY, _names(lambda n: [n[1]] + n[1:]), "duplicate feature names"),
    ("boolean feature name", EXACT_VOCABULARY, _names(lambda n: [False] + n[1:]), "feature name must be"),
    ("counts off the grid marked on_grid", {"multinomial_forgetting", "multinomial_forgetting_budget"},
     _off_grid, "off the 2^-20 grid"),
    ("hashed vocabulary of another size", {"hashed"}, lambda m, a: m["vocabulary"].update(n_buckets=65),
     "hashed with n_buckets"),
    ("hashed vocabulary declared exact", {"hashed"}, lambda m, a: m.update(vocabulary={"kind": "exact", "names": []}),
     "hashed with n_buckets"),
    ("class_counts of int64", ALL, _class_counts_to(lambda a: a.astype(np.int64)), "must be float64"),
    ("class_counts of bool", ALL, _class_counts_to(lambda a: a > 0), "must be float64"),
    ("class_counts 0-d", ALL, _class_counts_to(lambda a: np.array(a.sum())), "'class_counts' has shape"),
    ("class_counts 3-d", ALL, _class_counts_to(lambda a: a[:, None, None].copy()), "'class_counts' has shape"),
    ("class_counts big-endian", ALL, _class_counts_to(lambda a: a.astype(">f8")), "must be float64"),
    ("an array missing", ALL, _drop("class_counts"), "state's arrays are"),
    ("an array too many", ALL, _add_array, "state's arrays are"),
    ("unknown parameter", ALL, lambda m, a: m["params"].update(bogus=1), "params are refused"),
    ("negative prior_alpha", ALL, lambda m, a: m["params"].update(prior_alpha=-1.0), "params are refused"),
    ("epoch without its decay factors", ALL, _meta("forgetting_epoch", 5), "decay_factors"),
    ("integral as a string", ALL, _meta("integral", "yes"), "true or false"),
    ("integral missing", ALL, lambda m, a: m.pop("integral"), "lacks 'integral'"),
    ("negative labeled_seen", {"multinomial_budget", "multinomial_forgetting"}, _meta("labeled_seen", -3),
     "labeled_seen"),
    ("negative events_learned", {"multinomial_forgetting"}, _meta("events_learned", -1.0), "events_learned"),
    ("infinite events_learned", {"multinomial_forgetting"}, _meta("events_learned", float("inf")), "events_learned"),
    ("unknown kind", ALL, _meta("kind", "PerceptronNB"), "unknown model kind"),
    ("format 2", ALL, _meta("format", 2), "unsupported state format"),
    ("classes not a list", ALL, _meta("classes", "ab"), "classes must be a list"),
    ("Bernoulli N_fc above N_c", {"bernoulli"},
     lambda m, a: _set(a, "feature_counts", (0, 0), a["class_counts"][0] + 1.0), "exceeds the class count"),
    ("categorical duplicate value pair", {"categorical"},
     lambda m, a: m.update(values=[m["values"][0]] + m["values"][:-1]), "duplicate [feature, value] pairs"),
    ("categorical null value", {"categorical"},
     lambda m, a: m.update(values=[[m["values"][0][0], None]] + m["values"][1:]), "unusable pair"),
    ("categorical N_jc not the sum of N_jac", {"categorical"}, _first_nonzero_plus("feature_counts", 1.0),
     "N_jc = sum_a N_jac"),
    ("categorical value_counts transposed", {"categorical"},
     lambda m, a: a.update(value_counts=a["value_counts"].T.copy()), "'value_counts' has shape"),
    ("gaussian duplicate feature", {"gaussian"}, lambda m, a: m.update(features=[m["features"][1]] + m["features"][1:]),
     "duplicate feature names"),
    ("gaussian pooled n not the sum", {"gaussian"}, _first_nonzero_plus("pooled", 1.0), "pooled n = sum_c n_fc"),
    ("gaussian negative M2", {"gaussian"}, lambda m, a: _set(a, "m2", (0, 0), -1.0), "negative counts"),
    ("gaussian n_fc above N_c", {"gaussian"}, _gaussian_n_over_class, "exceeds the class count"),
    ("gaussian weight 0 with a mean", {"gaussian"}, _gaussian_zero_weight_with_mean, "(0, 0, 0)"),
    ("gaussian pooled of 2 columns", {"gaussian"}, lambda m, a: a.update(pooled=a["pooled"][:, :2].copy()),
     "'pooled' has shape"),
]

CASES = [(kind, name, mutate, phrase) for name, kinds, mutate, phrase in MUTATIONS for kind in sorted(kinds)]


def _mutated(states, kind, mutate) -> dict:
    state = {"meta": copy.deepcopy(states[kind]["meta"]),
             "arrays": {name: array.copy() for name, array in states[kind]["arrays"].items()}}
    mutate(state["meta"], state["arrays"])
    return state


def _write(directory: Path, number: int, state: dict) -> Path:
    """A checkpoint file holding `state` as given (the encoder does not check states)."""
    checkpoint_id = f"{number:012d}"
    header, body, _ = encode_checkpoint(checkpoint_id, state, OFFSETS, FP)
    path = directory / f"checkpoint-{checkpoint_id}.ckpt"
    path.write_bytes(header + body)
    return path


def _one_line(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message


def test_every_mutation_applies_to_some_kind_and_every_kind_is_mutated():
    assert {kind for kind, *_ in CASES} == ALL
    assert len(CASES) > 150


@pytest.mark.parametrize("kind,name,mutate,phrase", CASES, ids=[f"{k}-{n}" for k, n, *_ in CASES])
def test_mutated_state_is_refused_with_one_line(tmp_path, states, kind, name, mutate, phrase):
    state = _mutated(states, kind, mutate)
    with pytest.raises(InvalidState) as refused:
        model_from_state(state)
    assert phrase in str(refused.value)
    _one_line(str(refused.value))
    path = _write(tmp_path, 1, state)
    with pytest.raises(CheckpointError) as unread:
        read_checkpoint(path)
    message = str(unread.value)
    assert message.startswith(f"{path}: refused: ") and phrase in message
    _one_line(message)


def test_without_the_check_the_old_restore_accepts_broken_states(monkeypatch, states):
    """The refusals above come from the check: with it switched off, from_state builds models
    out of these states without a word (the bugs of issue 25)."""
    monkeypatch.setattr(state_check, "check_state", lambda cls, state: None)
    silently_built = []
    for name, kinds, mutate, _ in MUTATIONS:
        if name in ("feature_counts transposed", "class_totals not the column sums", "duplicate class names",
                    "fractional counts marked integral", "NaN class count", "all class counts negative"):
            MultinomialNB.from_state(_mutated(states, "multinomial", mutate))
            silently_built.append(name)
    assert len(silently_built) == 6


def _npz(members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compress) as archive:
        for name, data in members.items():
            archive.writestr(name + ".npy", data)
    return buffer.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _framed(body: bytes) -> bytes:
    # Built from the documented format, independently of the writer.
    prefix = f"STREAM-NB-CHECKPOINT 1 {len(body)}".encode()
    return prefix + b" " + hashlib.sha256(prefix + b"\n" + body).hexdigest().encode() + b"\n" + body


def _document(state: dict) -> bytes:
    document = {"format": 1, "id": "000000000001", "created_at": 0.0, "fingerprint": FP, "offsets": [],
                "extra": {}, "model_meta": state["meta"], "arrays": list(state["arrays"])}
    return _npy(np.frombuffer(json.dumps(document).encode(), dtype=np.uint8))


def _huge_declaration(states) -> tuple[bytes, str]:
    # a class_counts member whose .npy header declares 10^12 float64 (7.3 TiB) over 8 bytes of data
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    members = {"checkpoint.json": _document(states["multinomial"])}
    members.update({f"array.{name}": _npy(array) for name, array in states["multinomial"]["arrays"].items()})
    members["array.class_counts"] = header.getvalue() + b"\0" * 8
    return _framed(_npz(members)), "declares shape (1000000000000,)"


def _compressed(states) -> tuple[bytes, str]:
    # a deflated member: 2 MB of zeros in the file would be gigabytes read back
    members = {"checkpoint.json": _document(states["multinomial"])}
    members.update({f"array.{name}": _npy(array) for name, array in states["multinomial"]["arrays"].items()})
    return _framed(_npz(members, zipfile.ZIP_DEFLATED)), "is compressed"


def _hashed_huge(states) -> tuple[bytes, str]:
    # a hashed vocabulary of 10^10 buckets and no class: (10^10, 0) counts hold no byte
    state = MultinomialNB(n_hash_buckets=64).to_state()
    state["meta"]["params"]["n_hash_buckets"] = state["meta"]["vocabulary"]["n_buckets"] = 10**10
    state["arrays"]["feature_counts"] = np.zeros((10**10, 0))
    header, body, _ = encode_checkpoint("000000000001", state, {}, FP)
    return header + body, "n_hash_buckets must be a whole number in 1..67108864"


def _nested_json(states) -> tuple[bytes, str]:
    members = {"checkpoint.json": _npy(np.frombuffer(b"[" * 200_000, dtype=np.uint8))}
    return _framed(_npz(members)), "is not valid JSON"


def _overlapping_members(states) -> tuple[bytes, str]:
    # many central-directory entries all pointing at one stored member: read back n times
    body = bytearray(_npz({"checkpoint.json": _document(states["multinomial"])}))
    with zipfile.ZipFile(io.BytesIO(bytes(body))) as archive:
        info = archive.infolist()[0]
    central = body.index(b"PK\x01\x02")
    end = body.index(b"PK\x05\x06")
    entry = bytes(body[central:end])
    copies = [entry.replace(b"checkpoint.json.npy", f"a{i:04d}checkpoint.npy".encode()) for i in range(200)]
    directory = entry + b"".join(copies)
    record = bytearray(body[end:])
    total = 1 + len(copies)
    record[8:10] = total.to_bytes(2, "little")
    record[10:12] = total.to_bytes(2, "little")
    record[12:16] = len(directory).to_bytes(4, "little")
    assert info.compress_type == zipfile.ZIP_STORED
    return _framed(bytes(body[:central]) + directory + bytes(record)), "declare more bytes than the archive holds"


HUGE = [_huge_declaration, _compressed, _hashed_huge, _nested_json, _overlapping_members]


@pytest.mark.parametrize("build", HUGE, ids=[build.__name__ for build in HUGE])
def test_declared_sizes_are_bounded_before_allocation(tmp_path, states, build):
    data, phrase = build(states)
    path = tmp_path / "checkpoint-000000000001.ckpt"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as refused:
            read_checkpoint(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert phrase in str(refused.value)
    _one_line(str(refused.value))
    assert peak < 20 * len(data) + (8 << 20)  # a few copies of the file, never what it declares


def test_hashed_bound_is_the_configuration_bound():
    assert BOUNDS["model.n_hash_buckets"][1] == state_check.MAX_HASH_BUCKETS == 2**26
    at_bound = MultinomialNB(n_hash_buckets=2**26).to_state()  # no class: (2^26, 0) counts, no bytes
    state_check.check_state(MultinomialNB, at_bound)
    at_bound["meta"]["params"]["n_hash_buckets"] = at_bound["meta"]["vocabulary"]["n_buckets"] = 2**26 + 1
    with pytest.raises(InvalidState, match="n_hash_buckets must be a whole number in 1..67108864, got 67108865"):
        state_check.check_state(MultinomialNB, at_bound)


# ---- what the worker and inspect do with them ----------------------------------------------------

def test_load_latest_falls_back_to_the_previous_good_checkpoint(tmp_path, states, caplog):
    store = CheckpointStore(tmp_path, keep=5)
    good = store.save(states["multinomial"], OFFSETS, FP)
    bad = _write(tmp_path, 2, _mutated(states, "multinomial", MUTATIONS[0][2]))
    with caplog.at_level(logging.WARNING, logger="stream_nb.checkpoint"):
        loaded = store.load_latest(FP)
    assert loaded.id == good.id
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and bad.name in warnings[0] and "'class_counts' has shape" in warnings[0]
    model = model_from_state(loaded.model_state)
    assert model.classes_ == states["multinomial"]["meta"]["classes"]


def test_a_snapshot_is_checked_the_same_way(states):
    header, body, _ = encode_checkpoint("000000000009", _mutated(states, "gaussian", _gaussian_n_over_class),
                                        OFFSETS, FP)
    records = dict(snapshot_records(header + body, "000000000009", chunk_bytes=4096))
    _, data = assemble_snapshot(records)  # checksum and manifest are fine: the state is not
    with pytest.raises(CheckpointError, match=r"^snapshots@000000000009: refused: .*exceeds the class count"):
        parse_checkpoint(data, Path("snapshots@000000000009"))


def test_a_refused_snapshot_is_a_warning_and_the_worker_learns_the_log(monkeypatch, states, caplog):
    from kafka import TopicPartition

    from stream_nb.worker import snapshots

    header, body, _ = encode_checkpoint("3-a", _mutated(states, "hashed", _hashed_buckets(10**10)), OFFSETS, FP)
    records = [(key, value, offset) for offset, (key, value)
               in enumerate(snapshot_records(header + body, "3-a", chunk_bytes=1 << 16))]
    tp = TopicPartition("snapshots", 0)

    class ScriptedReader:  # the snapshot's records, once
        def partitions_for_topic(self, topic):
            return {0}

        def assign(self, partitions):
            pass

        def seek_to_beginning(self, *partitions):
            pass

        def end_offsets(self, partitions):
            return {tp: len(records)}

        def position(self, partition):
            return len(records) if self.polled else 0

        polled = False

        def poll(self, timeout_ms):
            self.polled = True
            return {tp: [type("Record", (), {"key": k, "value": v, "offset": o}) for k, v, o in records]}

        def close(self, autocommit):
            pass

    monkeypatch.setattr(snapshots, "make_reader", lambda kafka, client: ScriptedReader())
    with caplog.at_level(logging.WARNING, logger="stream_nb.worker"):
        assert snapshots.load_snapshot({}, {}, "snapshots") is None
    assert "snapshots@3-a: refused: n_hash_buckets must be a whole number" in caplog.text


INSPECTED = [("class_counts of bool", "multinomial"), ("class_counts 0-d", "categorical"),
             ("class_counts 3-d", "gaussian"), ("class_counts shorter than classes", "bernoulli"),
             ("duplicate class names", "complement")]


@pytest.mark.parametrize("name,kind", INSPECTED)
def test_inspect_prints_one_line_per_bad_file_never_a_traceback(tmp_path, capsys, states, name, kind):
    mutate = next(m for n, _, m, _ in MUTATIONS if n == name)
    path = _write(tmp_path, 1, _mutated(states, kind, mutate))
    assert checkpoint_cli.main(["inspect", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and "Traceback" not in err
    assert lines == [lines[0], f"stream-nb inspect: no valid checkpoint in {tmp_path}"]
    assert lines[0].startswith(f"stream-nb inspect: warning: skipping checkpoint {path}: refused: ")


def test_inspect_of_huge_declarations_is_one_line(tmp_path, capsys, states):
    for number, build in enumerate(HUGE, start=1):
        data, _ = build(states)
        (tmp_path / f"checkpoint-{number:012d}.ckpt").write_bytes(data)
    assert checkpoint_cli.main(["inspect", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == len(HUGE) + 1


# ---- no false refusals -----------------------------------------------------------------------------

def _learn_one_by_one(model, X, y, w=None):
    """learn_one each event, with the forgetting epoch it was learned at."""
    epochs = []
    for i, (x, label) in enumerate(zip(X, y)):
        epochs.append(model.forgetting_epoch)
        model.learn_one(x, label, **({} if w is None else {"w": w[i]}))
    return epochs


GOOD = {
    **{kind: (lambda kind=kind: _model(kind)) for kind in MODELS},
    "multinomial_fractional_weights": lambda: _learn_fraction(MultinomialNB()),
    "complement_fractional_forgetting": lambda: _learn_fraction(ComplementNB(half_life=30, evict_every=10)),
    "gaussian_fractional_weights": lambda: _learn_fraction(GaussianNB(), gaussian=True),
}


def _learn_fraction(model, gaussian=False):
    X, y = gaussian_stream(2, 150) if gaussian else text_stream(2, 150)
    rng = random.Random(1)
    model.learn_many(X, y, [rng.choice([0.1, 0.25, 1.7, 3.0]) for _ in y])
    return model


def _round_trip(tmp_path, model):
    store = CheckpointStore(tmp_path / type(model).__name__ / str(id(model)))
    store.save(model.to_state(), OFFSETS, FP)
    restored = model_from_state(store.load_latest(FP).model_state)
    assert restored.to_state()["meta"] == model.to_state()["meta"]
    for name, array in model.to_state()["arrays"].items():
        np.testing.assert_array_equal(restored.to_state()["arrays"][name], array)
    return restored


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_every_good_state_loads(tmp_path, kind):
    model = GOOD[kind]()
    _round_trip(tmp_path, model)


UNLEARNED = {
    "multinomial": lambda: MultinomialNB(),
    "multinomial_forgetting": lambda: MultinomialNB(half_life=30, evict_every=10),
    "multinomial_forgetting_budget": lambda: MultinomialNB(half_life=30, max_features=40, evict_every=10),
    "multinomial_budget": lambda: MultinomialNB(max_features=40, evict_every=10),
    "hashed": lambda: MultinomialNB(n_hash_buckets=32),
    "bernoulli": lambda: BernoulliNB(),
    "complement": lambda: ComplementNB(),
    "categorical": lambda: CategoricalNB(),
    "gaussian": lambda: GaussianNB(),
}


@pytest.mark.parametrize("kind", sorted(UNLEARNED))
def test_states_after_forgetting_eviction_and_unlearning_load(tmp_path, kind):
    model = UNLEARNED[kind]()
    if kind == "categorical":
        X, y = _categorical_stream(4, 120)
    elif kind == "gaussian":
        X, y = gaussian_stream(4, 120)
    else:
        X, y = text_stream(4, 120)
    labeled = [i for i, label in enumerate(y) if label is not None]
    X, y = [X[i] for i in labeled], [y[i] for i in labeled]
    weights = [1.0 + (i % 3) for i in range(len(y))]
    epochs = _learn_one_by_one(model, X, y, weights)
    budget = kind.endswith("budget")
    for i in range(0, len(y), 3):  # take back every third event, as learned (at its epoch)
        model.unlearn_one(X[i], y[i], weights[i], learned_at=epochs[i] if model.half_life else None)
    if "forgetting" in kind:
        assert model.forgetting_epoch > 0
    if budget:
        assert model.features_evicted > 0
    restored = _round_trip(tmp_path, model)
    probe = X[1]
    assert restored.predict_proba_one(probe) == model.predict_proba_one(probe)
    # everything taken back at once empties the model, which loads too (no classes)
    if kind in ("multinomial", "gaussian", "categorical"):
        rest = [i for i in range(len(y)) if i % 3]
        model.unlearn_many([X[i] for i in rest], [y[i] for i in rest], [weights[i] for i in rest])
        assert model.classes_ == []
        _round_trip(tmp_path, model)
