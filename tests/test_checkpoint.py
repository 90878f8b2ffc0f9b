"""Checkpoints: round trips, retention, damaged files, fingerprints, no pickle, digests, inspect."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stream_nb.checkpoint import (
    CheckpointError,
    CheckpointStore,
    FingerprintMismatch,
    config_fingerprint,
    read_checkpoint,
    state_digest,
)
from stream_nb.checkpoint import cli as checkpoint_cli
from stream_nb.checkpoint import store as store_module
from stream_nb.model import BernoulliNB, CategoricalNB, ComplementNB, GaussianNB, MultinomialNB

from streams import gaussian_stream, text_stream

FP = config_fingerprint({"model": {"kind": "multinomial", "alpha": 1.0}, "features": {}})
OFFSETS = {("labeled", 0): 250, ("labeled", 1): 150, ("unlabeled", 0): 42}


def trained(cls, seed: int = 7, n_events: int = 400, **options):
    model = cls(**options)
    X, y = text_stream(seed, n_events)
    model.learn_many(X, y)
    return model


def saved_ids(store: CheckpointStore) -> list[str]:
    return [path.name for path in store.list()]


# ---- round trip -------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [MultinomialNB, BernoulliNB])
def test_round_trip_restores_predictions_exactly(tmp_path, cls):
    model = trained(cls)
    labeled = sum(label is not None for label in text_stream(7, 400)[1])
    assert labeled == 252 and model.events_learned == labeled  # about 60% of 400 are labeled
    store = CheckpointStore(tmp_path)
    extra = {"accuracy": 0.8125, "events_seen": 400, "note": "grün"}
    written = store.save(model.to_state(), OFFSETS, FP, extra)
    assert written.id == "000000000001"
    assert written.path == tmp_path / "checkpoint-000000000001.ckpt"

    loaded = store.load_latest(FP)
    assert loaded is not None and loaded.id == "000000000001" and loaded.path == written.path
    assert loaded.offsets == OFFSETS
    assert loaded.extra == extra
    assert loaded.fingerprint == FP
    assert loaded.created_at == written.created_at
    for name, array in model.to_state()["arrays"].items():
        assert loaded.model_state["arrays"][name].dtype == array.dtype
        assert np.array_equal(loaded.model_state["arrays"][name], array)

    restored = cls.from_state(loaded.model_state)
    probe, _ = text_stream(8, 200)
    probe.append({"never-seen": 3})
    assert restored.predict_proba_many(probe) == model.predict_proba_many(probe)
    assert [restored.predict_proba_one(x) for x in probe[:20]] == [model.predict_proba_one(x) for x in probe[:20]]
    # ... and it goes on learning exactly like the original
    X, y = text_stream(9, 300)
    assert restored.predict_learn_many(X, y) == model.predict_learn_many(X, y)
    assert state_digest(restored.to_state()) == state_digest(model.to_state())


@pytest.mark.parametrize("make", [
    lambda: trained(ComplementNB),
    lambda: trained(MultinomialNB, n_hash_buckets=64),
    lambda: trained(BernoulliNB, n_hash_buckets=32),
])
def test_round_trip_other_count_models(tmp_path, make):
    model = make()
    store = CheckpointStore(tmp_path)
    store.save(model.to_state(), {}, FP)
    restored = type(model).from_state(store.load_latest().model_state)
    probe, _ = text_stream(8, 100)
    assert restored.predict_proba_many(probe) == model.predict_proba_many(probe)


def test_round_trip_gaussian_and_categorical(tmp_path):
    gaussian = GaussianNB()
    X, y = gaussian_stream(3, 300)
    gaussian.learn_many(X, y)
    categorical = CategoricalNB()
    categorical.learn_many([{"colour": "red", "size": 1}, {"colour": "blue"}, {"colour": "red", "size": 2}],
                           ["a", "b", "a"])
    for index, model in enumerate((gaussian, categorical)):
        store = CheckpointStore(tmp_path / str(index))
        store.save(model.to_state(), {("t", 0): 1}, FP)
        restored = type(model).from_state(store.load_latest(FP).model_state)
        probe = X[:50] if model is gaussian else [{"colour": "red"}, {"colour": "blue", "size": 2}]
        assert [restored.predict_proba_one(x) for x in probe] == [model.predict_proba_one(x) for x in probe]


def test_empty_directory_and_missing_directory_have_no_checkpoint(tmp_path):
    assert CheckpointStore(tmp_path).load_latest() is None
    missing = CheckpointStore(tmp_path / "not-yet")
    assert missing.list() == [] and missing.load_latest(FP) is None
    missing.save(MultinomialNB().to_state(), {}, FP)  # save creates the directory
    assert saved_ids(missing) == ["checkpoint-000000000001.ckpt"]


def test_save_validates_its_input(tmp_path):
    store = CheckpointStore(tmp_path)
    state = MultinomialNB().to_state()
    with pytest.raises(TypeError):
        store.save(state, {"labeled": 3}, FP)  # key is not (topic, partition)
    with pytest.raises(TypeError):
        store.save(state, {("labeled", 0): 1.5}, FP)
    with pytest.raises(ValueError):
        store.save(state, {("labeled", 0): -1}, FP)
    with pytest.raises(TypeError):
        store.save({"meta": state["meta"], "arrays": {"x": np.array([object()])}}, {}, FP)
    with pytest.raises(TypeError):
        store.save(state, {}, FP, extra={"not json": object()})
    with pytest.raises(TypeError, match="JSON"):
        store.save(state, {}, FP, extra={1: "int key would come back as '1'"})
    assert store.list() == []  # nothing half-written
    assert list(tmp_path.iterdir()) == []
    # numpy integers are fine (what a consumer may hand over)
    saved = store.save(state, {("labeled", np.int64(2)): np.int64(7)}, FP)
    assert read_checkpoint(saved.path).offsets == {("labeled", 2): 7}


# ---- retention and ids ------------------------------------------------------------------


def test_keep_retains_newest_and_ids_continue_across_restarts(tmp_path):
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep=0)
    store = CheckpointStore(tmp_path, keep=3)
    state = trained(MultinomialNB, n_events=50).to_state()
    for offset in range(5):
        store.save(state, {("labeled", 0): offset}, FP)
    assert saved_ids(store) == [f"checkpoint-00000000000{n}.ckpt" for n in (3, 4, 5)]
    assert store.load_latest(FP).offsets == {("labeled", 0): 4}

    again = CheckpointStore(tmp_path, keep=3)  # a restarted worker
    assert again.save(state, {("labeled", 0): 5}, FP).id == "000000000006"
    assert saved_ids(again) == [f"checkpoint-00000000000{n}.ckpt" for n in (4, 5, 6)]
    ids = [read_checkpoint(path).id for path in again.list()]
    assert ids == sorted(ids) == ["000000000004", "000000000005", "000000000006"]


def test_ids_never_reuse_a_number_even_if_files_vanish(tmp_path):
    store = CheckpointStore(tmp_path, keep=1)
    state = MultinomialNB().to_state()
    store.save(state, {}, FP)
    store.save(state, {}, FP)
    for path in store.list():
        path.unlink()
    assert store.save(state, {}, FP).id == "000000000003"


# ---- damaged files ----------------------------------------------------------------------


def _truncate(path: Path) -> str:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return "truncated"


def _flip_byte(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return "checksum mismatch"


def _empty(path: Path) -> str:
    path.write_bytes(b"")
    return "empty file"


def _garbage_header(path: Path) -> str:
    path.write_bytes(os.urandom(5000))
    return "not a stream-nb checkpoint"


@pytest.mark.parametrize("damage", [_truncate, _flip_byte, _empty, _garbage_header])
def test_damaged_newest_is_skipped_with_a_warning(tmp_path, caplog, damage):
    store = CheckpointStore(tmp_path, keep=3)
    state = trained(MultinomialNB, n_events=100).to_state()
    store.save(state, {("labeled", 0): 10}, FP)
    newest = store.save(state, {("labeled", 0): 20}, FP)
    reason = damage(newest.path)
    with caplog.at_level(logging.WARNING, logger="stream_nb.checkpoint"):
        loaded = store.load_latest(FP)
    assert loaded.id == "000000000001" and loaded.offsets == {("labeled", 0): 10}
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert newest.path.name in warnings[0] and reason in warnings[0]
    with pytest.raises(CheckpointError, match=reason):
        read_checkpoint(newest.path)


def test_garbage_file_with_a_checkpoint_name_is_skipped(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    store.save(MultinomialNB().to_state(), {("labeled", 0): 10}, FP)
    garbage = tmp_path / "checkpoint-000000000099.ckpt"
    garbage.write_text("STREAM-NB-CHECKPOINT 1 12 deadbeef\nhello world\n")
    with caplog.at_level(logging.WARNING, logger="stream_nb.checkpoint"):
        loaded = store.load_latest(FP)
    assert loaded.id == "000000000001"
    assert any("checkpoint-000000000099.ckpt" in r.getMessage() and "checksum mismatch" in r.getMessage()
               for r in caplog.records)
    # ids continue past it, so nothing is ever written over it
    assert store.save(MultinomialNB().to_state(), {}, FP).id == "000000000100"


def test_all_damaged_gives_none(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    saved = store.save(MultinomialNB().to_state(), {}, FP)
    _truncate(saved.path)
    with caplog.at_level(logging.WARNING, logger="stream_nb.checkpoint"):
        assert store.load_latest(FP) is None
    assert "truncated" in caplog.text


def test_file_renamed_over_another_id_is_refused(tmp_path):
    store = CheckpointStore(tmp_path)
    first = store.save(MultinomialNB().to_state(), {}, FP)
    copy = tmp_path / "checkpoint-000000000007.ckpt"
    copy.write_bytes(first.path.read_bytes())
    with pytest.raises(CheckpointError, match="holds id 000000000001"):
        read_checkpoint(copy)


# ---- fingerprints -----------------------------------------------------------------------


def test_fingerprint_mismatch_is_refused_naming_both(tmp_path):
    store = CheckpointStore(tmp_path)
    other = config_fingerprint({"model": {"kind": "multinomial", "alpha": 0.5}, "features": {}})
    store.save(MultinomialNB().to_state(), {}, other)  # older one matches...
    newest = store.save(MultinomialNB().to_state(), {}, FP)  # ...the newest does not
    with pytest.raises(FingerprintMismatch) as raised:
        store.load_latest(other)
    message = str(raised.value)
    assert FP in message and other in message and newest.path.name in message
    assert isinstance(raised.value, ValueError)
    assert (raised.value.found, raised.value.expected) == (FP, other)
    assert store.load_latest().id == newest.id  # no fingerprint given: no check


def test_config_fingerprint_is_canonical():
    a = config_fingerprint({"model": {"kind": "multinomial", "alpha": 1}, "features": {"lowercase": True}})
    b = config_fingerprint({"features": {"lowercase": True}, "model": {"alpha": 1.0, "kind": "multinomial"}})
    assert a == b and len(a) == 64
    assert a != config_fingerprint({"model": {"kind": "multinomial", "alpha": 0.5}, "features": {"lowercase": True}})
    assert a != config_fingerprint({"model": {"kind": "bernoulli", "alpha": 1}, "features": {"lowercase": True}})
    assert a != config_fingerprint({"model": {"kind": "multinomial", "alpha": 1}, "features": {"lowercase": 1}})


# ---- no pickle --------------------------------------------------------------------------

UNPICKLED: list[str] = []


def _record(text: str) -> str:
    UNPICKLED.append(text)
    return text


class _Trap:
    """Unpickling this runs _record: proof that the reader never unpickles."""

    def __reduce__(self):
        return (_record, ("unpickled!",))


def _framed(body: bytes) -> bytes:
    # Built from the documented format, independently of the writer.
    prefix = f"STREAM-NB-CHECKPOINT 1 {len(body)}".encode()
    checksum = hashlib.sha256(prefix + b"\n" + body).hexdigest()
    return prefix + b" " + checksum.encode() + b"\n" + body


def test_pickled_object_array_is_refused_never_unpickled(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    store.save(MultinomialNB().to_state(), {("labeled", 0): 10}, FP)
    document = {"format": 1, "id": "000000000002", "created_at": 0.0, "fingerprint": FP, "offsets": [],
                "extra": {}, "model_meta": MultinomialNB().to_state()["meta"], "arrays": ["class_counts"]}
    buffer = io.BytesIO()
    np.savez(buffer, **{"checkpoint.json": np.frombuffer(json.dumps(document).encode(), dtype=np.uint8),
                        "array.class_counts": np.array([_Trap()], dtype=object)}, allow_pickle=True)
    crafted = tmp_path / "checkpoint-000000000002.ckpt"
    crafted.write_bytes(_framed(buffer.getvalue()))

    UNPICKLED.clear()
    with pytest.raises(CheckpointError, match="pickle"):
        read_checkpoint(crafted)
    with caplog.at_level(logging.WARNING, logger="stream_nb.checkpoint"):
        loaded = store.load_latest(FP)
    assert loaded.id == "000000000001"
    assert "checkpoint-000000000002.ckpt" in caplog.text and "pickle" in caplog.text
    assert UNPICKLED == []
    # a whole pickle as the body is refused too
    crafted.write_bytes(_framed(b"\x80\x04" + b"not a zip"))
    with pytest.raises(CheckpointError, match="not an .npz"):
        read_checkpoint(crafted)


def test_hand_built_file_in_the_documented_format_is_read(tmp_path):
    model = trained(MultinomialNB, n_events=60)
    state = model.to_state()
    document = {"format": 1, "id": "000000000005", "created_at": 1.5, "fingerprint": "f",
                "offsets": [["t", 0, 9]], "extra": {}, "model_meta": state["meta"], "arrays": list(state["arrays"])}
    buffer = io.BytesIO()
    np.savez(buffer, **{"checkpoint.json": np.frombuffer(json.dumps(document).encode(), dtype=np.uint8)},
             **{f"array.{name}": array for name, array in state["arrays"].items()})
    path = tmp_path / "checkpoint-000000000005.ckpt"
    path.write_bytes(_framed(buffer.getvalue()))
    loaded = read_checkpoint(path)
    assert loaded.offsets == {("t", 0): 9}
    assert state_digest(loaded.model_state) == state_digest(state)


# ---- state digest -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", [MultinomialNB, BernoulliNB, ComplementNB])
def test_state_digest_does_not_depend_on_first_seen_order(cls):
    X, y = text_stream(11, 500)
    forward, backward = cls(), cls()
    forward.learn_many(X, y)
    backward.learn_many(X[::-1], y[::-1])
    names_forward = forward.to_state()["meta"]["vocabulary"]["names"]
    names_backward = backward.to_state()["meta"]["vocabulary"]["names"]
    assert sorted(names_forward) == sorted(names_backward) and names_forward != names_backward
    assert state_digest(forward.to_state()) == state_digest(backward.to_state())


def test_state_digest_of_categorical_does_not_depend_on_order():
    events = [({"colour": "red", "size": 1}, "a"), ({"colour": "blue"}, "b"), ({"shape": "round", "size": 2}, "a")]
    forward, backward = CategoricalNB(), CategoricalNB()
    forward.learn_many([x for x, _ in events], [y for _, y in events])
    backward.learn_many([x for x, _ in events[::-1]], [y for _, y in events[::-1]])
    assert forward.to_state()["meta"]["values"] != backward.to_state()["meta"]["values"]
    assert state_digest(forward.to_state()) == state_digest(backward.to_state())


def test_state_digest_changes_with_any_count_and_is_stable_across_restore():
    model = trained(MultinomialNB)
    state = model.to_state()
    digest = state_digest(state)
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert state_digest(MultinomialNB.from_state(state).to_state()) == digest
    assert state_digest(model.to_state()) == digest  # computing it changes nothing

    for name, index in (("feature_counts", (17, 1)), ("class_counts", 2), ("class_totals", 0)):
        changed = model.to_state()
        changed["arrays"][name][index] += 1
        assert state_digest(changed) != digest, name
    one_more = trained(MultinomialNB)
    one_more.learn_one({"w3": 1}, "class0")
    assert state_digest(one_more.to_state()) != digest
    # same counts, other parameters: another model
    assert state_digest(trained(MultinomialNB, alpha=0.5).to_state()) != digest
    # a name with no count (a zero value) changes no prediction and no digest
    with_zero = trained(MultinomialNB)
    with_zero.learn_one({"w3": 1, "zero-valued": 0}, "class0")
    assert "zero-valued" in with_zero.to_state()["meta"]["vocabulary"]["names"]
    assert state_digest(with_zero.to_state()) == state_digest(one_more.to_state())


def test_state_digest_keeps_int_and_str_names_apart():
    as_int, as_str, reordered = MultinomialNB(), MultinomialNB(), MultinomialNB()
    as_int.learn_one({1: 1, "b": 2}, "x")
    as_str.learn_one({"1": 1, "b": 2}, "x")
    reordered.learn_one({"b": 2, 1: 1}, "x")
    assert state_digest(as_int.to_state()) != state_digest(as_str.to_state())
    assert state_digest(as_int.to_state()) == state_digest(reordered.to_state())


def test_state_digest_covers_gaussian_and_unknown_kinds():
    model = GaussianNB()
    X, y = gaussian_stream(2, 200)
    model.learn_many(X, y)
    digest = state_digest(model.to_state())
    assert state_digest(GaussianNB.from_state(model.to_state()).to_state()) == digest
    changed = model.to_state()
    changed["arrays"]["mean"][0, 0] = np.nextafter(changed["arrays"]["mean"][0, 0], np.inf)  # one ulp
    assert state_digest(changed) != digest
    unknown = {"meta": {"kind": "SomethingNB", "params": {}, "classes": []}, "arrays": {"a": np.arange(3.0)}}
    assert state_digest(unknown) != state_digest({**unknown, "arrays": {"a": np.arange(4.0)}})


# ---- atomicity --------------------------------------------------------------------------


def test_crash_before_rename_leaves_previous_checkpoint(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    state = trained(MultinomialNB, n_events=100).to_state()
    store.save(state, {("labeled", 0): 10}, FP)

    def crash(source, destination):
        raise OSError("simulated crash between write and rename")

    monkeypatch.setattr(store_module.os, "replace", crash)
    with pytest.raises(CheckpointError, match="simulated crash"):
        store.save(state, {("labeled", 0): 20}, FP)
    monkeypatch.undo()
    assert saved_ids(store) == ["checkpoint-000000000001.ckpt"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-000000000001.ckpt"]  # temp removed
    assert store.load_latest(FP).offsets == {("labeled", 0): 10}


def test_a_full_disk_is_one_line_that_says_how_much_room_a_save_needs(tmp_path, monkeypatch):
    import errno

    store = CheckpointStore(tmp_path, keep=3)
    state = trained(MultinomialNB, n_events=100).to_state()
    store.save(state, {("labeled", 0): 10}, FP)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module.os, "fsync", full)
    with pytest.raises(CheckpointError) as raised:
        store.save(state, {("labeled", 0): 20}, FP)
    monkeypatch.undo()
    assert str(raised.value) == (f"cannot write a checkpoint in {tmp_path} (No space left on device); it needs room "
                                 "for keep + 1 = 4 checkpoint files, as the oldest is deleted only after a new one "
                                 "is written")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-000000000001.ckpt"]  # nothing half-written


def test_the_directory_is_tried_when_the_worker_takes_it_not_at_the_first_checkpoint(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    store = CheckpointStore(tmp_path / "a-file" / "checkpoints")
    with pytest.raises(CheckpointError, match="checkpoint directory .*a-file/checkpoints: cannot use it"):
        store.lock()


def test_taking_the_directory_removes_the_temp_files_of_killed_saves(tmp_path):
    store = CheckpointStore(tmp_path)
    first = store.save(trained(MultinomialNB, n_events=100).to_state(), {("labeled", 0): 10}, FP)
    for n in range(45):  # the probe: 45 kills mid-save left 15 MB for an hour
        (tmp_path / f".checkpoint-000000000002.k{n}.tmp").write_bytes(b"x" * 1000)
    store.lock()
    try:
        assert sorted(path.name for path in tmp_path.iterdir()) == [".lock", first.path.name]
    finally:
        store.unlock()


def test_leftover_temp_file_of_a_killed_save_is_ignored(tmp_path):
    store = CheckpointStore(tmp_path)
    state = trained(MultinomialNB, n_events=100).to_state()
    first = store.save(state, {("labeled", 0): 10}, FP)
    # what a process killed mid-write leaves: half a file under the temporary name
    partial = tmp_path / ".checkpoint-000000000002.abc123.tmp"
    partial.write_bytes(first.path.read_bytes()[:1000])
    assert store.list() == [first.path]
    assert store.load_latest(FP).id == "000000000001"
    assert store.save(state, {("labeled", 0): 20}, FP).id == "000000000002"
    assert partial.exists()  # recent: maybe still being written; only stale ones are removed
    old = 2 * store_module._STALE_TEMP_S
    os.utime(partial, (partial.stat().st_atime - old, partial.stat().st_mtime - old))
    store.save(state, {("labeled", 0): 30}, FP)
    assert not partial.exists()


# ---- inspect ----------------------------------------------------------------------------


def _inspect(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stream-nb")
    checkpoint_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def _expected_top(model, label, n):
    counts = model.to_state()["arrays"]["feature_counts"][:, model.classes_.index(label)]
    names = model.to_state()["meta"]["vocabulary"]["names"]
    ranked = sorted(((-count, json.dumps(name), name) for name, count in zip(names, counts.tolist()) if count > 0))
    return [name for _, _, name in ranked[:n]]


def test_inspect_json(tmp_path, capsys):
    model = trained(MultinomialNB)
    store = CheckpointStore(tmp_path)
    store.save(model.to_state(), OFFSETS, FP, {"accuracy": 0.8})
    assert _inspect(["inspect", str(tmp_path), "--json", "--top", "3"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out)
    assert summary["classes"] == ["class0", "class1", "class2"]
    assert summary["events_learned"] == 252
    assert summary["class_counts"] == [int(n) for n in model.to_state()["arrays"]["class_counts"]]
    assert sum(summary["class_counts"]) == 252
    assert summary["offsets"] == [{"topic": "labeled", "partition": 0, "offset": 250},
                                  {"topic": "labeled", "partition": 1, "offset": 150},
                                  {"topic": "unlabeled", "partition": 0, "offset": 42}]
    assert summary["state_digest"] == state_digest(model.to_state())
    assert summary["id"] == "000000000001" and summary["fingerprint"] == FP
    assert summary["kind"] == "multinomial" and summary["params"]["alpha"] == 1.0
    assert summary["vocabulary_size"] == len(model.to_state()["meta"]["vocabulary"]["names"])
    assert summary["extra"] == {"accuracy": 0.8}
    for entry in summary["top_features"]:
        assert [f["feature"] for f in entry["features"]] == _expected_top(model, entry["class"], 3)
        counts = [f["count"] for f in entry["features"]]
        assert counts == sorted(counts, reverse=True) and len(counts) == 3


def test_inspect_shows_the_remembered_ids_as_their_number_and_the_newest_few(tmp_path, capsys):
    """Found in use: 83 KB of ids for 2,500 remembered (the memory holds 100,000 by default)."""
    model = trained(MultinomialNB)
    ids = [f"<message-{i}@example.com>" for i in range(2_500)]
    extra = {"learned_ids": {"capacity": 100_000, "ids": ids, "labels": ["spam"] * 2_500,
                             "learned_at": [0] * 2_500, "weights": [1.0] * 2_500},
             "labeled_rejections": [{"offset": i} for i in range(30)], "events_processed": 9}
    CheckpointStore(tmp_path).save(model.to_state(), OFFSETS, FP, extra)
    assert _inspect(["inspect", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["extra"] == {
        "learned_ids": {"remembered": 2_500, "capacity": 100_000, "newest": ids[:-6:-1]},
        "labeled_rejections": {"count": 30, "first": [{"offset": i} for i in range(10)]},
        "events_processed": 9}
    assert _inspect(["inspect", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert len(text) < 4_000 and '"remembered": 2500' in text and ids[0] not in text and ids[-1] in text


def test_inspect_ranks_the_features_that_tell_classes_apart(tmp_path, capsys):
    # "the" is the most frequent word of both classes and tells them apart not at all; "prize"
    # and "lunch" are the telling ones. By hand, alpha = 1, |V| = 3, N_spam = 4 + 3 = 7,
    # N_ham = 4 + 2 = 6: prize (3 in spam, 0 in ham) 3 * [log(4/10) - log(1/9)], lunch (2 in
    # ham) 2 * [log(3/9) - log(1/10)], the: 4 * [log(5/10) - log(5/9)] < 0 for spam and
    # 4 * [log(5/9) - log(5/10)] > 0 for ham.
    model = MultinomialNB(alpha=1.0)
    model.learn_many([{"the": 4, "prize": 3}, {"the": 4, "lunch": 2}], ["spam", "ham"])
    CheckpointStore(tmp_path).save(model.to_state(), OFFSETS, FP)
    assert _inspect(["inspect", str(tmp_path), "--json", "--top", "3"]) == 0
    telling = {entry["class"]: entry["features"] for entry in json.loads(capsys.readouterr().out)["telling_features"]}
    assert telling["spam"] == [{"feature": "prize", "count": 3, "evidence": round(3 * (math.log(4 / 10) - math.log(1 / 9)), 3)}]
    assert telling["ham"] == [
        {"feature": "lunch", "count": 2, "evidence": round(2 * (math.log(3 / 9) - math.log(1 / 10)), 3)},
        {"feature": "the", "count": 4, "evidence": round(4 * (math.log(5 / 9) - math.log(5 / 10)), 3)}]
    assert _inspect(["inspect", str(tmp_path), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "top 3 telling features per class" in text and "  spam  prize 3.8" in text


def test_inspect_text_reports_skipped_and_errors(tmp_path, capsys):
    model = trained(BernoulliNB, n_events=100)
    store = CheckpointStore(tmp_path)
    store.save(model.to_state(), {("labeled", 0): 7}, FP)
    broken = store.save(model.to_state(), {("labeled", 0): 9}, FP)
    _flip_byte(broken.path)
    assert _inspect(["inspect", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "000000000001" in captured.out and "labeled [0]  next offset 7" in captured.out
    assert state_digest(model.to_state()) in captured.out
    assert captured.err.count("\n") == 1 and broken.path.name in captured.err and "checksum" in captured.err

    assert _inspect(["inspect", str(tmp_path / "missing")]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "no such directory" in captured.err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _inspect(["inspect", str(empty), "--json"]) == 1
    assert "no valid checkpoint" in capsys.readouterr().err


def test_inspect_as_a_module(tmp_path):
    model = trained(MultinomialNB, n_events=100)
    CheckpointStore(tmp_path).save(model.to_state(), {("labeled", 0): 3}, FP)
    result = subprocess.run([sys.executable, "-m", "stream_nb.checkpoint.cli", "inspect", str(tmp_path), "--json"],
                            capture_output=True, text=True, check=True)
    summary = json.loads(result.stdout)
    assert summary["state_digest"] == state_digest(model.to_state())
    assert summary["offsets"] == [{"topic": "labeled", "partition": 0, "offset": 3}]


def test_a_second_process_on_the_same_directory_is_refused_naming_the_holder(tmp_path):
    import subprocess
    import sys

    from stream_nb.checkpoint import DirectoryLocked

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from stream_nb.checkpoint import CheckpointStore; "
         f"CheckpointStore({str(tmp_path)!r}).lock(); print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirectoryLocked, match=f"in use by process {holder.pid};"):
            CheckpointStore(tmp_path).lock()
    finally:
        holder.kill()
        holder.wait()
    store = CheckpointStore(tmp_path)  # the holder died without cleaning up: free again
    store.lock()
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    store.unlock()


# ---- snapshots on a compacted topic (the chunking; the topic itself is an integration test) ----


def test_a_snapshot_cut_into_chunks_comes_back_whole_from_the_newest_value_of_each_key():
    from stream_nb.checkpoint.snapshot import MANIFEST_KEY, SnapshotError, assemble_snapshot, snapshot_records

    data = bytes(range(256)) * 41  # 10,496 bytes
    old = snapshot_records(b"old" * 9000, "1-a", chunk_bytes=1000)  # 27 chunks
    new = snapshot_records(data, "2-b", chunk_bytes=1000)
    assert [key for key, _ in new[:-1]] == [f"chunk/{i}".encode() for i in range(11)]
    assert all(len(value) <= 1000 + len(b"2-b\n") for _, value in new)
    latest = {}
    for key, value in old + new:  # compaction keeps the newest value of every key
        latest[key] = value
    manifest, whole = assemble_snapshot(latest)
    assert whole == data and (manifest["id"], manifest["chunks"], manifest["bytes"]) == ("2-b", 11, len(data))
    # A chunk of another snapshot where this one's should be, a missing chunk, a damaged one:
    for damage, message in ((lambda d: d.__setitem__(b"chunk/3", b"1-a\n" + b"x" * 1000), "chunk 3 of 11"),
                            (lambda d: d.pop(b"chunk/10"), "chunk 10 of 11"),
                            (lambda d: d.__setitem__(b"chunk/0", d[b"chunk/0"][:-1] + b"?"), "checksum"),
                            (lambda d: d.pop(MANIFEST_KEY), "no snapshot manifest")):
        broken = dict(latest)
        damage(broken)
        with pytest.raises(SnapshotError, match=message):
            assemble_snapshot(broken)


def test_a_checkpoint_travels_as_a_snapshot_and_parses_to_the_same_state():
    from stream_nb.checkpoint.snapshot import assemble_snapshot, snapshot_records
    from stream_nb.checkpoint.store import encode_checkpoint, parse_checkpoint

    model = MultinomialNB(alpha=0.5)
    model.learn_many([{"win": 2, "cash": 1}, {"lunch": 1}, {"cash": 3}], ["spam", "ham", "spam"])
    header, body, _ = encode_checkpoint("7-w", model.to_state(), {("labeled", 0): 3}, "fp", {"note": "x"})
    manifest, data = assemble_snapshot(dict(snapshot_records(header + body, "7-w", chunk_bytes=300)))
    checkpoint = parse_checkpoint(data, Path("topic@7-w"))
    assert (checkpoint.id, checkpoint.offsets, checkpoint.fingerprint, checkpoint.extra) == (
        "7-w", {("labeled", 0): 3}, "fp", {"note": "x"})
    assert state_digest(checkpoint.model_state) == state_digest(model.to_state())


def test_a_snapshot_read_back_takes_each_keys_newest_offset_whatever_the_order_of_arrival(monkeypatch):
    """librdkafka was seen to deliver a fetch made before a seek after newer records: a reader
    that kept the last value to arrive would assemble chunks of an older snapshot into the newer
    one's and refuse it (the worker then learns the whole labeled log instead)."""
    from collections import namedtuple

    from kafka import TopicPartition

    from stream_nb.checkpoint.snapshot import snapshot_records
    from stream_nb.checkpoint.store import encode_checkpoint
    from stream_nb.worker import snapshots

    model = MultinomialNB(alpha=0.5)
    model.learn_many([{"win": 2, "cash": 1}, {"lunch": 1}], ["spam", "ham"])
    old_header, old_body, _ = encode_checkpoint("1-a", model.to_state(), {("labeled", 0): 2}, "fp")
    model.learn_many([{"cash": 3}], ["spam"])
    new_header, new_body, _ = encode_checkpoint("2-a", model.to_state(), {("labeled", 0): 3}, "fp")
    Record = namedtuple("Record", "key value offset")
    log = [Record(key, value, offset) for offset, (key, value) in enumerate(
        snapshot_records(old_header + old_body, "1-a", chunk_bytes=300)
        + snapshot_records(new_header + new_body, "2-a", chunk_bytes=300))]
    half = len(log) // 2
    tp = TopicPartition("snapshots", 0)

    class ScriptedReader:  # the whole topic, then its older half again (fetched before the seek)
        batches = [log, log[:half]]

        def partitions_for_topic(self, topic):
            return {0}

        def assign(self, partitions):
            pass

        def seek_to_beginning(self, *partitions):
            pass

        def end_offsets(self, partitions):
            return {tp: len(log)}

        def position(self, partition):
            return len(log) if not self.batches else 0

        def poll(self, timeout_ms):
            return {tp: self.batches.pop(0)}

        def close(self, autocommit):
            pass

    monkeypatch.setattr(snapshots, "make_reader", lambda kafka, client: ScriptedReader())
    checkpoint, manifest = snapshots.load_snapshot({}, {}, "snapshots")
    assert (checkpoint.id, manifest["id"], checkpoint.offsets) == ("2-a", "2-a", {("labeled", 0): 3})
    assert state_digest(checkpoint.model_state) == state_digest(model.to_state())


# ---- written in the background ------------------------------------------------------------------


def test_long_lists_are_encoded_a_slice_at_a_time_to_the_same_text_and_still_checked():
    names = [f"w{i} é" for i in range(3 * store_module._JSON_SLICE + 5)]
    document = {"model_meta": {"vocabulary": {"kind": "exact", "names": names}}, "n": 1.5, "none": None}
    assert store_module._checked_json(document) == json.dumps(document, ensure_ascii=False)
    long_with_a_tuple = {"names": names[:-1] + [("a", "b")]}  # a tuple in the last slice comes back a list
    with pytest.raises(TypeError, match="does not survive JSON unchanged"):
        store_module._checked_json(long_with_a_tuple)
    with pytest.raises(TypeError, match="does not survive JSON unchanged"):
        store_module._checked_json({"extra": {1: "int key"}})


def test_a_background_save_writes_the_state_handed_over_not_the_one_after(tmp_path):
    from stream_nb.checkpoint.background import BackgroundSaver

    model = trained(MultinomialNB, n_events=300)
    saver = BackgroundSaver(CheckpointStore(tmp_path, keep=2))
    state = model.to_state()
    expected, learned = state_digest(state), model.events_learned
    saver.submit(state, {("labeled", 0): 300}, "fp", {"events_processed": 300}, learned)
    assert saver.busy
    with pytest.raises(RuntimeError, match="already under way"):
        saver.submit(state, {}, "fp", {}, 0.0)
    model.learn_one({"changed": 1}, "after")  # the loop goes on while the write runs
    saved = saver.wait()
    assert not saver.busy and saver.finished() is None
    on_disk = read_checkpoint(saved.checkpoint.path)
    assert state_digest(on_disk.model_state) == expected != state_digest(model.to_state())
    assert on_disk.offsets == {("labeled", 0): 300} and on_disk.extra == {"events_processed": 300}
    assert saved.events_learned == learned > 0 and saved.seconds > 0
    saver.close()


def test_a_background_save_that_fails_raises_its_checkpoint_error_in_the_caller(tmp_path, monkeypatch):
    import errno

    from stream_nb.checkpoint.background import BackgroundSaver

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module.os, "fsync", full)
    saver = BackgroundSaver(CheckpointStore(tmp_path))
    saver.submit(trained(MultinomialNB).to_state(), {}, "fp", {}, 0.0)
    with pytest.raises(CheckpointError, match="No space left on device"):
        saver.wait()
    assert not saver.busy and not list(tmp_path.glob("*.ckpt")) and not list(tmp_path.glob(".checkpoint-*.tmp"))
    saver.close()
