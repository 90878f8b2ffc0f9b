"""Corrections and duplicates with per-key models ([personal]): the global model takes a lesson
back by its memory of learned ids (scoped by key), each key's counts by the key's own memory;
and a key's memory kept by a store and its changelog records, checked as untrusted bytes."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from stream_nb.checkpoint import state_digest
from stream_nb.config import load_config
from stream_nb.keyed.codec import (
    IDS_MAGIC,
    ROWS_BYTES,
    decode_head,
    decode_ids,
    encode_ids,
    key_counts_of_records,
)
from stream_nb.keyed.store import StoredKeyTable
from stream_nb.lessons import LEARNED, id_of_keyed
from stream_nb.model.personal import TAKEN_BACK, InvalidKeyState, KeyCounts, KeyTable
from stream_nb.replay.prequential import Contender, replay_contenders
from tests.corpora import load_sms_spam
from tests.test_corrections_replay import _noisy_with_corrections

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
USERS = ("ann", "bob", "cid", "dee")
# every label learned, nothing forgotten, no budget: the state is then order-free, so a stream
# of corrections must end exactly where the corrected stream does
ORDER_FREE = ['training.mode="all"', "model.half_life=0", "personal.max_key_features=0"]


@pytest.fixture(scope="module")
def sms() -> list[dict]:
    rng = random.Random(7)
    return [{"id": f"sms-{i}", "text": text, "label": label, "key": rng.choice(USERS)}
            for i, (label, text) in enumerate(load_sms_spam()[:1200])]


# the per-key machinery of one view: personal.toml over mail.toml's [features] view alone
ONE_VIEW = ("views={}",)


def contender(overrides=ONE_VIEW, config_path: Path = CONFIGS / "personal.toml") -> Contender:
    """personal.toml with `overrides` (one view unless they name [views])."""
    overrides = list(overrides)
    if not any(item.startswith("views") for item in overrides):
        overrides = [*ONE_VIEW, *overrides]
    return Contender.of(config_path.stem, load_config(config_path, overrides), positive="spam")


def shipped() -> Contender:
    """personal.toml as shipped: mail.toml's three views, each with its keys' counts."""
    return Contender.of("personal", load_config(CONFIGS / "personal.toml"), positive="spam")


def counts_of(keyed: Contender, user: str) -> tuple:
    """A key's counts as the model reads them, by class name (a stream's first label decides
    the class order): rows a take-back emptied are no rows."""
    own, classes = keyed.personal.keys[user], keyed.model.classes_
    rows = {name: dict(zip(classes, row)) for name, row in own.features.items() if any(row)}
    return rows, dict(zip(classes, own.class_counts)), dict(zip(classes, own.class_totals))


def live_memory(keyed: Contender, user: str, personal=None) -> dict:
    """The ids a key holds learned, and as what (in `personal`: one view's per-key models)."""
    classes = keyed.model.classes_
    personal = keyed.personal if personal is None else personal
    return {event_id: classes[c] for event_id, (c, _) in personal.keys[user].learned.items() if c != TAKEN_BACK}


@pytest.mark.parametrize("batch_size", [1, 97])
def test_order_free_corrections_end_in_the_corrected_streams_global_and_key_counts(sms, batch_size):
    stream, corrected, n_wrong, n_gone, n_resent = _noisy_with_corrections(sms, 11, take_back_only=25, duplicates=30)
    fixed, direct = contender(ORDER_FREE), contender(ORDER_FREE)
    replay_contenders(stream, [fixed], batch_size=batch_size)
    replay_contenders(corrected, [direct], batch_size=batch_size)
    assert fixed.refused == {}
    assert state_digest(fixed.model.to_state()) == state_digest(direct.model.to_state())
    assert set(fixed.personal.keys) == set(direct.personal.keys) == set(USERS)
    for user in USERS:
        assert counts_of(fixed, user) == counts_of(direct, user), user
        # what the key remembers is what it holds: one live id a message learned, as its last label
        expected = {event["id"]: event["label"] for event in corrected if event["key"] == user}
        assert live_memory(fixed, user) == expected, user
    outcomes = fixed.lessons.outcomes
    assert (outcomes["corrected"], outcomes["duplicate"], outcomes[LEARNED]) == (n_wrong + n_gone, n_resent, len(sms))
    # the global memory knows each message by its user and id
    assert id_of_keyed(sms[0]["key"], sms[0]["id"]) in fixed.lessons.memory
    # the noisy stream without its corrections ends elsewhere, in every key: the test can tell
    noisy = contender(ORDER_FREE)
    replay_contenders([event for event in stream if event.get("unlearn") is None], [noisy], batch_size=batch_size)
    for user in USERS:
        assert counts_of(noisy, user) != counts_of(direct, user), user


def test_one_message_to_two_users_is_a_lesson_for_each():
    first = {"id": "<m1@x>", "text": "cheap prize offer click", "label": "spam", "key": "ann"}
    events = [first, dict(first, key="bob"), dict(first, key="bob"),  # the last: bob's duplicate
              {"id": "<m1@x>", "text": "cheap prize offer click", "label": "ham", "unlearn": "spam", "key": "ann"}]
    keyed = contender(ORDER_FREE)
    replay_contenders(events, [keyed], batch_size=10)
    assert live_memory(keyed, "ann") == {"<m1@x>": "ham"}  # corrected
    assert counts_of(keyed, "ann")[1] == {"spam": 0.0, "ham": 1.0}
    assert live_memory(keyed, "bob") == {"<m1@x>": "spam"} and counts_of(keyed, "bob")[1] == {"spam": 1.0, "ham": 0.0}
    assert dict(keyed.lessons.outcomes) == {"learned": 2, "duplicate": 1, "corrected": 1}
    assert keyed.model.events_learned == 2  # ann's as ham, bob's as spam


@pytest.mark.parametrize("batch_size", [1, 64, 1000])
@pytest.mark.parametrize("views", ["one view", "as shipped"])
def test_shipped_personal_toml_keys_hold_exactly_what_their_memory_says(sms, batch_size, views):
    """personal.toml (thick-threshold decisions per key, forgetting in the global model), over
    one view and as shipped (three): each view's key counts are, to the bit, the sum of the
    events its memory says it holds under their remembered classes; no corrected message stays
    under its wrong label; the batch paths agree with each other."""
    stream, corrected, _, _, _ = _noisy_with_corrections(sms, 12, take_back_only=20, duplicates=20)
    keyed = contender() if views == "one view" else shipped()
    replay_contenders(stream, [keyed], batch_size=batch_size)
    assert keyed.refused == {}
    truth = {event["id"]: event["label"] for event in corrected}
    texts = {event["id"]: event for event in sms}
    classes = keyed.model.classes_
    per_view = getattr(keyed.personal, "personals", [keyed.personal])
    assert len(per_view) == (1 if views == "one view" else 3)
    for v, personal in enumerate(per_view):
        featurise = keyed.featurise_one if len(per_view) == 1 else lambda event, v=v: keyed.featurise_one(event)[v]
        held = _check_keys_hold_their_memory(keyed, personal, featurise, texts, truth, classes)
        assert 100 < held < len(corrected)  # keys skip what they already predict well: thick threshold
    assert keyed.lessons.outcomes["corrected"] > 100
    if batch_size != 1:
        one = contender() if views == "one view" else shipped()
        replay_contenders(stream, [one], batch_size=1)
        assert state_digest(one.model.to_state()) == state_digest(keyed.model.to_state())
        for mine, its in zip(getattr(one.personal, "personals", [one.personal]), per_view, strict=True):
            for user, own in its.keys.items():
                assert mine.key_state(user) == its.key_state(user) and mine.keys[user].learned == own.learned


def _check_keys_hold_their_memory(keyed, personal, featurise, texts, truth, classes) -> int:
    held = 0
    for user, own in personal.keys.items():
        memory = live_memory(keyed, user, personal)
        held += len(memory)
        for event_id, label in memory.items():
            assert label == truth[event_id], (user, event_id)  # the right label, or not held
        expected = np.zeros_like(own.matrix)
        class_counts = [0.0, 0.0]
        for event_id, label in memory.items():
            c = classes.index(label)
            x = featurise(texts[event_id])
            rows = own.rows_of(list(x))
            assert (rows >= 0).all()
            expected[rows, c] += np.fromiter(x.values(), dtype=np.float64)
            class_counts[c] += 1.0
        assert np.array_equal(own.matrix, expected), user
        assert own.class_counts == class_counts and own.class_totals == expected.sum(axis=0).tolist(), user
    return held


# ---- a key's memory on disk and in its changelog ---------------------------------------------


def _key_with_memory(n_ids: int, rng: random.Random) -> KeyCounts:
    own = KeyCounts(2)
    for i in range(n_ids):
        x = {f"w{rng.randrange(3000)}": 1.0, f"v{rng.randrange(50)}": 2.0}
        c = rng.randrange(2)
        own.add(x, c, 1.0)
        own.remember(f"<{i}.{rng.random()}@example.com>", c, 1.0, 10_000)
    return own


def _stored_key_with_memory(path: Path, n_ids: int, seed: int) -> tuple[StoredKeyTable, KeyCounts]:
    """A store holding one key, "ann", of `n_ids` remembered messages (not flushed yet)."""
    table = StoredKeyTable(path, lambda: 2)
    own = table.create("ann", 2)
    built = _key_with_memory(n_ids, random.Random(seed))
    own.features, own.class_counts, own.class_totals = built.features, built.class_counts, built.class_totals
    own.learned = dict(built.learned)
    return table, own


def test_a_stored_keys_memory_survives_flush_restore_and_deltas_stay_small(tmp_path):
    table, own = _stored_key_with_memory(tmp_path / "a", 6000, 3)
    first = table.flush(position=1)
    whole = sum(len(value) for _, value in first if value)
    assert whole > 300_000 and max(len(value) for _, value in first if value) <= ROWS_BYTES + 100  # bounded records

    x = {"w1": 1.0, "new": 1.0}
    own.add(x, 1, 1.0)
    own.remember("<late@example.com>", 1, 1.0, 10_000)
    victim = next(iter(own.learned))
    own.take_back(victim, {})
    table.changed("ann", own)
    second = table.flush(position=2)
    ids_written = [value for _, value in second if value and value[:4] == IDS_MAGIC]
    assert sum(map(len, ids_written)) < 200 and len(second) <= 4  # the two changed ids, not 6,000

    records = first + second
    restored = StoredKeyTable(tmp_path / "b", lambda: 2)
    restored.restore(records)
    back = restored.get("ann")
    assert back.learned == own.learned and list(back.learned) == list(own.learned)
    assert back.learned[victim][0] == TAKEN_BACK and back.learned["<late@example.com>"] == (1, 1.0)
    assert back.features == own.features and back.class_counts == own.class_counts
    assert restored.digest() == table.digest()
    own.remember("<one more>", 0, 1.0, 10_000)
    table.changed("ann", own)
    table.flush(position=3)
    assert restored.digest() != table.digest()  # the memory is in the digest


def test_a_memory_over_its_capacity_keeps_its_newest_share_in_every_replica(tmp_path):
    replay, stored = KeyTable(), StoredKeyTable(tmp_path / "s", lambda: 2)
    records = []
    for table in (replay, stored):
        own = table.create("k", 2)
        for i in range(250):
            own.add({f"f{i % 7}": 1.0}, i % 2, 1.0)
            own.remember(f"id{i}", i % 2, 1.0, 100)
            if i == 5:
                own.take_back("id3", {"f3": 1.0})
            table.changed("k", own)
            if table is stored and i % 40 == 0:
                records += stored.flush(position=i)
    records += stored.flush(position=250)
    restored = StoredKeyTable(tmp_path / "r", lambda: 2)
    restored.restore(records)
    for own in (replay.get("k"), restored.get("k")):
        assert 90 <= len(own.learned) <= 100 and list(own.learned)[-1] == "id249"
        assert list(own.learned) == list(replay.get("k").learned)


@pytest.mark.parametrize("mangle, message", [
    (lambda data: data[:-1], "lengths add up"),
    (lambda data: data[:6], "shorter than its 8-byte header"),
    (lambda data: data[:4] + (10**6).to_bytes(4, "little") + data[8:], "more than its"),
    (lambda data: data[:8] + (7).to_bytes(4, "little", signed=True) + data[12:], "class outside"),
    (lambda data: data[:8] + (-2).to_bytes(4, "little", signed=True) + data[12:], "class outside"),
    (lambda data: data[:12] + np.array([np.nan]).tobytes() + data[20:], "weights are finite"),
    (lambda data: data[:12] + np.array([0.0]).tobytes() + data[20:], "weights are finite"),
    (lambda data: data[:-3] + b"\xff\xfe\xfd", "not UTF-8"),
])
def test_hostile_ids_records_are_refused_with_one_line(mangle, message):
    own = KeyCounts(2)
    own.remember("abc", 1, 1.0, 10)
    (data,) = encode_ids(own, ["abc"])
    assert decode_ids(data, 2) == [("abc", 1, 1.0)]
    with pytest.raises(InvalidKeyState, match=message):
        decode_ids(mangle(data), 2)


def test_ids_records_refuse_repeated_overlong_and_empty_ids():
    own = KeyCounts(2)
    own.learned = {"a": (0, 1.0), "b" * 1025: (1, 1.0)}
    with pytest.raises(InvalidKeyState, match="a key keeps at most 1024"):
        decode_ids(encode_ids(own, list(own.learned))[0], 2)
    own.learned = {"a": (0, 1.0), "b": (1, 1.0)}
    (data,) = encode_ids(own, ["a", "b"])
    with pytest.raises(InvalidKeyState, match="holds an id twice"):
        decode_ids(data.replace(b"ab", b"aa"), 2)
    own.learned = {"": (0, 1.0)}
    with pytest.raises(InvalidKeyState, match="empty"):
        decode_ids(encode_ids(own, [""])[0], 2)
    # an id longer than a key keeps is not remembered at all (its correction finds nothing to take)
    own = KeyCounts(2)
    own.remember("x" * 1025, 0, 1.0, 10)
    assert own.learned == {}


def test_a_key_whose_ids_record_is_missing_or_foreign_is_refused(tmp_path):
    table, _ = _stored_key_with_memory(tmp_path / "a", 50, 5)
    records = table.flush(position=1)
    head = next(value for key, value in records if key.endswith(b"\xff" * 8))
    ids = [value for _, value in records if value and value[:4] == IDS_MAGIC]
    assert len(ids) == 1 and decode_head(head, 2).next - decode_head(head, 2).first == 1
    with pytest.raises(InvalidKeyState, match="missing"):
        key_counts_of_records(decode_head(head, 2), [None], 2)
    foreign = ids[0][:8] + (2).to_bytes(4, "little") + ids[0][12:]  # a third class the key has no column of
    with pytest.raises(InvalidKeyState, match="class outside"):
        key_counts_of_records(decode_head(head, 2), [foreign], 2)


# ---- the class order: the global model keeps its classes sorted ------------------------------


def test_a_keys_counts_follow_their_class_when_a_later_class_sorts_first(tmp_path):
    """The global model's first label is "spam", its second "ham", which sorts first: every key's
    columns move with their labels (before, a key's spam counts became ham's)."""
    events = [{"id": "1", "text": "cheap prize offer", "label": "spam", "key": "ann"},
              {"id": "2", "text": "cheap prize today", "label": "spam", "key": "bob"},
              {"id": "3", "text": "lunch meeting notes", "label": "ham", "key": "ann"},
              {"id": "2", "text": "cheap prize today", "label": "ham", "unlearn": "spam", "key": "bob"}]
    keyed = contender(ORDER_FREE)
    replay_contenders(events[:2], [keyed])
    assert keyed.model.classes_ == ["spam"]
    replay_contenders(events[2:], [keyed])
    assert keyed.model.classes_ == ["ham", "spam"]
    rows, counts, _ = counts_of(keyed, "ann")
    assert counts == {"ham": 1.0, "spam": 1.0}
    assert rows["cheap"] == {"ham": 0.0, "spam": 1.0} and rows["lunch"] == {"ham": 1.0, "spam": 0.0}
    assert live_memory(keyed, "ann") == {"1": "spam", "3": "ham"}
    rows, counts, _ = counts_of(keyed, "bob")  # corrected after the classes moved
    assert counts == {"ham": 1.0, "spam": 0.0} and rows["cheap"] == {"ham": 1.0, "spam": 0.0}
    assert live_memory(keyed, "bob") == {"2": "ham"}


def test_a_store_moves_its_keys_columns_with_the_classes_and_its_changelog_says_their_order(tmp_path):
    classes = ["spam"]
    table = StoredKeyTable(tmp_path / "a", lambda: len(classes))
    table.align(classes)
    own = table.create("ann", 1)
    own.add({"cheap": 1.0}, 0, 1.0)
    own.remember("m1", 0, 1.0, 10)
    table.changed("ann", own)
    records = table.flush(position=1)
    classes = ["ham", "spam"]
    table.align(classes)
    records += table.flush(position=2)
    restored = StoredKeyTable(tmp_path / "b", lambda: len(classes))
    restored.restore(records)
    assert restored.classes == ["ham", "spam"]
    back = restored.get("ann")
    assert back.features == {"cheap": [0.0, 1.0]} and back.class_counts == [0.0, 1.0] and back.learned == {"m1": (1, 1.0)}
    # a store closed cleanly keeps its class order on disk
    table.close(changelog_offset=len(records))
    reopened = StoredKeyTable(tmp_path / "a", lambda: 2)
    assert reopened.classes == ["ham", "spam"] and reopened.get("ann").features == {"cheap": [0.0, 1.0]}
