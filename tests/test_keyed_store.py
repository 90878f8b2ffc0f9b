"""A partition's keys on disk (stream_nb.keyed.store) held to the in-memory KeyTable: the same
counts, clock, evictions and predictions at every flush on generated labeled streams, a restore
from the changelog records equal to the store that wrote them, a crash that leaves no trusted
store, and hostile changelog bytes refused."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

pytest.importorskip("rocksdict", reason="rocksdict is a core dependency: `make setup` installs it")

from stream_nb.config import load_config  # noqa: E402
from stream_nb.keyed.codec import (  # noqa: E402
    _HEAD,
    HEAD_PART,
    encode_head,
    encode_key_counts,
    encode_rows,
    record_key,
)
from stream_nb.keyed.store import META_KEY, StoredKeyTable  # noqa: E402
from stream_nb.model.personal import InvalidKeyState, KeyCounts, KeyTable  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(60)] + ["free", "money", "meeting", "lunch"]


def personal_model(**personal):
    """configs/personal.toml (mail.toml's [model] and [training]) over one view, [personal]
    overridden (a store holds one view's keys: stream_nb.keyed.view_tables keeps one a view)."""
    overrides = ["views={}", *(f"personal.{name}={value}" for name, value in personal.items())]
    config = load_config(REPO / "configs" / "personal.toml", overrides)
    return config.build_personal(config.build_model())


def labeled_stream(seed: int, n: int, keys: int) -> list[tuple[dict, str, str | None]]:
    rng = random.Random(seed)
    events = []
    for _ in range(n):
        label = rng.choice(["ham", "spam"])
        bias = WORDS[:32] if label == "ham" else WORDS[28:]
        x = {word: 1.0 for word in rng.sample(bias, rng.randint(1, 8))}
        key = None if rng.random() < 0.1 else f"user-{rng.randrange(keys)}"
        events.append((x, label, key))
    return events


def with_lessons(events: list, seed: int) -> list[tuple[dict, str, str | None, str, str | None]]:
    """(x, label, key, id, unlearn): the events with ids, and a sixth of them followed later by a
    lesson on the same message: a correction to the other label, or the same label again."""
    rng = random.Random(seed)
    out, later = [], []
    for i, (x, label, key) in enumerate(events):
        out.append((x, label, key, f"m{i}", None))
        if key is not None and rng.random() < 1 / 6:
            other = "spam" if label == "ham" else "ham"
            later.append((i + rng.randint(1, 60), (x, other, key, f"m{i}", label) if rng.random() < 0.7
                          else (x, label, key, f"m{i}", None)))
        while later and later[0][0] <= i:
            out.append(later.pop(0)[1])
            later.sort(key=lambda item: item[0])
    return out + [event for _, event in later]


def learn(personal, table, x, label, key, event_id=None, unlearn=None):
    """The worker's step for one labeled event: the key's rules, prediction and decision, then learning."""
    _, key_learns = personal.predict_and_decide(x, label, key, table, event_id=event_id, unlearn=unlearn)
    personal.global_model.learn_one(x, label)
    if key is not None and key_learns:
        personal.learn_key(x, label, key, table=table, event_id=event_id)
    personal.observe_labeled(key, table)


def same_counts(a: KeyCounts, b: KeyCounts) -> bool:
    return (a.features == b.features and a.class_counts == b.class_counts and a.class_totals == b.class_totals
            and a.last_labeled == b.last_labeled and list(a.learned.items()) == list(b.learned.items()))


@pytest.mark.parametrize("settings", [{}, {"idle_after": 40}, {"max_key_features": 12, "idle_after": 150},
                                      {"remember_ids": 15}])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_store_holds_what_the_memory_table_holds_at_every_flush(tmp_path, settings, seed):
    in_memory, on_disk = personal_model(**settings), personal_model(**settings)
    memory = KeyTable()
    stored = StoredKeyTable(tmp_path / "p0", lambda: len(on_disk.classes_), idle_after=settings.get("idle_after"),
                            cache_keys=3)  # a cache smaller than the keys: reads go to disk
    rng = random.Random(seed)
    records = []
    events = with_lessons(labeled_stream(seed, 900, keys=25), seed)
    for i, (x, label, key, event_id, unlearn) in enumerate(events):
        probe = {word: 1.0 for word in rng.sample(WORDS, 5)}
        assert (in_memory.predict_proba_one(probe, key, memory) == on_disk.predict_proba_one(probe, key, stored))
        learn(in_memory, memory, x, label, key, event_id, unlearn)
        learn(on_disk, stored, x, label, key, event_id, unlearn)
        if rng.random() < 0.05 or i == len(events) - 1:
            records.extend(stored.flush(position=i + 1))
            assert stored.clock == memory.clock == i + 1
            assert len(stored._cache) <= 3  # the cache's bound holds once nothing is left unflushed
            assert stored.evicted == memory.evicted
            assert len(stored) == len(memory.keys)
            for key_name, own in memory.keys.items():
                assert same_counts(stored.get(key_name), own), key_name
    if "idle_after" in settings:
        assert memory.evicted > 0  # the streams do evict: the comparison covered it
    if "max_key_features" in settings:
        assert max(len(own.features) for own in memory.keys.values()) <= 12
    first = {event_id: label for _, label, _, event_id, unlearn in reversed(events) if unlearn is None}
    classes = in_memory.classes_
    corrected = sum(c >= 0 and classes[c] != first[event_id]
                    for own in memory.keys.values() for event_id, (c, _) in own.learned.items())
    assert corrected > 10  # corrections reached the keys' memories: the comparison covered them
    if "remember_ids" in settings:
        assert max(len(own.learned) for own in memory.keys.values()) <= 15

    restored = StoredKeyTable(tmp_path / "restored", lambda: len(on_disk.classes_),
                              idle_after=settings.get("idle_after"))
    assert restored.restore(records) == len(records)
    assert restored.digest() == stored.digest()
    assert (restored.clock, restored.position) == (len(events), len(events))

    compacted = {}  # what a compacted changelog keeps: the last record of each key
    for key, value in records:
        compacted.pop(key, None)
        compacted[key] = value
    from_compacted = StoredKeyTable(tmp_path / "compacted", lambda: len(on_disk.classes_),
                                    idle_after=settings.get("idle_after"))
    from_compacted.restore(compacted.items())
    assert from_compacted.digest() == stored.digest()


def test_a_store_closed_cleanly_is_kept_and_one_that_was_not_is_rebuilt(tmp_path):
    personal = personal_model()
    store = StoredKeyTable(tmp_path / "p", lambda: len(personal.classes_))
    for x, label, key in labeled_stream(3, 200, keys=10):
        learn(personal, store, x, label, key)
    store.flush(position=200)
    digest, keys = store.digest(), len(store)
    store.close(changelog_offset=57)

    before = int(time.time() * 1000)
    reopened = StoredKeyTable(tmp_path / "p", lambda: len(personal.classes_))
    assert reopened.clean_offset == 57  # restore the changelog from here only
    assert before - 60_000 <= reopened.clean_at_ms <= before  # closed just now (tombstones' window)
    assert (reopened.digest(), len(reopened), reopened.position) == (digest, keys, 200)
    assert keys > 0
    reopened.db.close()  # a crash: no close(), no marker

    after_crash = StoredKeyTable(tmp_path / "p", lambda: len(personal.classes_))
    assert after_crash.clean_offset is None and len(after_crash) == 0 and after_crash.clock == 0


def test_hostile_changelog_records_are_refused_with_one_line(tmp_path):
    good = KeyCounts(2, 0)
    good.add({"a": 1.0}, 0, 1.0)
    head = encode_head(good, 0, 0, 0, ["a"])
    chunked_head = encode_head(good, 0, 1, 0, [])
    rows = encode_rows(good, ["a"])[0]
    u, row0 = record_key(b"u", HEAD_PART), record_key(b"u", 0)
    other = KeyCounts(2, 0)
    other.add({"b": 1.0}, 0, 1.0)
    nan = head[:_HEAD.size] + b"\x00\x00\x00\x00\x00\x00\xf8\x7f" + head[_HEAD.size + 8:]  # a NaN class count
    hostile = [
        [(u, b"junk")], [(u, head[:-1])], [(u, head.replace(b"SNH1", b"SNH9"))], [(u, nan)],
        [(b"u", head)],  # a record key without its part
        [(u, rows)], [(row0, head)],  # a row record as a head, and the other way round
        [(u, chunked_head)],  # a head naming a row record that is not there
        [(row0, rows)],  # a row record no head names
        [(row0, encode_rows(good, ["a"])[0].replace(b"SNR1", b"SNR0")), (u, chunked_head)],
        [(row0, encode_rows(other, ["b"])[0]), (u, encode_head(good, 0, 1, 0, ["a"]))],  # T_c is not the rows' sum
        [(u, encode_key_counts(good))],  # the layout of one record a key, from before
    ]
    for i, records in enumerate(hostile):
        store = StoredKeyTable(tmp_path / f"p{i}", lambda: 2)
        with pytest.raises(InvalidKeyState) as refused:
            store.restore(records)
        assert "\n" not in str(refused.value), records
        store.db.close()
    assert "delete the changelog topic" in str(refused.value)
    store = StoredKeyTable(tmp_path / "meta", lambda: 2)
    for meta in (b'{"clock": -1, "evicted": 0, "position": null}', b'{"clock": 1}', b"[]"):
        with pytest.raises(InvalidKeyState):
            store.restore([(META_KEY, meta)])
    with pytest.raises(InvalidKeyState):
        store.restore([(META_KEY, None)])
    assert store.restore([(u, head)]) == 1
    assert same_counts(store.get("u"), good)
    assert store.restore([(row0, rows), (u, chunked_head)]) == 2
    assert same_counts(store.get("u"), good)


def test_a_key_loaded_ahead_of_the_clock_is_refused(tmp_path):
    store = StoredKeyTable(tmp_path / "p", lambda: 2)
    ahead = KeyCounts(2, 5)
    with pytest.raises(InvalidKeyState, match="ahead of the labeled clock"):
        store.put("u", ahead)


def test_a_store_left_on_disk_is_restored_on_only_within_the_changelogs_tombstone_window(tmp_path):
    """A key deleted in the changelog after the store closed is a tombstone there for
    delete.retention.ms at least; later, compaction may have removed it, and the store would keep
    the key. So the worker restores on from a local copy only within that window (a minute
    spare), else anew."""
    from types import SimpleNamespace

    from stream_nb.worker.keyed import KeyedState

    personal = personal_model()
    store = StoredKeyTable(tmp_path / "p", lambda: len(personal.classes_))
    store.flush(position=0)
    store.close(changelog_offset=12)
    reopened = StoredKeyTable(tmp_path / "p", lambda: len(personal.classes_))
    day = 86_400_000
    assert KeyedState._reusable(SimpleNamespace(tombstones_kept_ms=day), reopened) == 12
    assert KeyedState._reusable(SimpleNamespace(tombstones_kept_ms=60_000), reopened) is None  # the minute spare
    assert KeyedState._reusable(SimpleNamespace(tombstones_kept_ms=0), reopened) is None  # the broker did not say
    reopened.clean_at_ms -= day  # closed a day ago
    assert KeyedState._reusable(SimpleNamespace(tombstones_kept_ms=day), reopened) is None
    reopened.clean_at_ms += 2 * day  # closed "tomorrow": a clock gone wrong
    assert KeyedState._reusable(SimpleNamespace(tombstones_kept_ms=day), reopened) is None
    reopened.db.close()
    unmarked = StoredKeyTable(tmp_path / "p", lambda: len(personal.classes_))
    assert KeyedState._reusable(SimpleNamespace(tombstones_kept_ms=day), unmarked) is None


def test_a_hostile_clean_marker_only_makes_the_store_rebuilt(tmp_path):
    """clean.json is a file on disk: anything in it (bytes, wrong JSON, wrong types, negative
    or boolean numbers, a missing time) means "not closed cleanly": the store is emptied, to be
    restored from the whole changelog, and nothing raises."""
    from stream_nb.keyed.store import CLEAN

    personal = personal_model()
    rng = random.Random(26)
    hostile = [b"", b"\xff\xfe\x00", b"null", b"[]", b'"x"', b"{}", b'{"changelog_offset": 5}',
               b'{"changelog_offset": -1, "closed_at_ms": 1}', b'{"changelog_offset": true, "closed_at_ms": 1}',
               b'{"changelog_offset": 5, "closed_at_ms": "now"}', b'{"changelog_offset": 1.5, "closed_at_ms": 1}',
               b'{"changelog_offset": 5, "closed_at_ms": null}', b'{"changelog_offset": 1e999, "closed_at_ms": 1}']
    hostile += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))) for _ in range(20)]
    for i, content in enumerate(hostile):
        store = StoredKeyTable(tmp_path / f"p{i}", lambda: len(personal.classes_))
        for x, label, key in labeled_stream(i, 20, keys=4):
            learn(personal, store, x, label, key)
        store.flush(position=20)
        store.close(changelog_offset=9)
        (tmp_path / f"p{i}" / CLEAN).write_bytes(content)
        reopened = StoredKeyTable(tmp_path / f"p{i}", lambda: len(personal.classes_))
        assert (reopened.clean_offset, reopened.clean_at_ms) == (None, None), content
        assert len(reopened) == 0 and reopened.clock == 0 and not (tmp_path / f"p{i}" / CLEAN).exists(), content
        reopened.db.close()


def add_mail_to_big(table, rng: random.Random, features: int, mail: int, known: str = "feature-",
                    new: str = "new-") -> None:
    """A mail of 300 features learned by the key "big" of `table`: 270 of its `features` known
    ones (`known` + a number), 30 never seen (`new` + the mail's number)."""
    x = {f"{known}{rng.randrange(features)}": 1.0 for _ in range(270)}
    x.update({f"{new}{mail}-{j}": 2.0 for j in range(30)})
    own = table.get("big")
    own.add(x, mail % 2, 1.0)
    table.changed("big", own)


@pytest.mark.parametrize("features, whole_writes_expected", [(1_000_000, 0), (20_000, range(4, 9))])
def test_a_key_of_a_million_features_is_written_in_records_of_bounded_size(tmp_path, features, whole_writes_expected):
    """One user's model of 1,000,000 features (about 30 MB of counts and names): every record
    stays within ROWS_BYTES (one row alone may pass it; none here), a flush after one more mail
    writes that mail's rows, not the key; a key of 20,000 features (600 KB) is written whole
    again each time the rows written since its last whole write outgrow it, so what the
    changelog keeps of a key stays under about twice its size; a restore from the compacted
    changelog gives back the same counts."""
    from stream_nb.keyed.codec import ROWS_BYTES, decode_head

    store = StoredKeyTable(tmp_path / "p", lambda: 2)
    own = store.create("big", 2)
    step = min(features, 50_000)
    for start in range(0, features, step):
        own.add({f"feature-{i}": 1.0 for i in range(start, start + step)}, start // step % 2, 1.0)
    store.changed("big", own)
    store.observe("big", None)
    first = store.flush(position=1)
    assert max(len(value) for _, value in first if value) <= ROWS_BYTES + _HEAD.size + 16
    assert sum(len(value) for _, value in first if value) > features * 25
    changelog = dict(first)

    rng = random.Random(33)
    whole_writes = 0
    for mail in range(400):
        add_mail_to_big(store, rng, features, mail)
        store.observe("big", None)
        records = store.flush(position=mail + 2)
        written = sum(len(value) for _, value in records if value)
        head = decode_head(records[-2][1], 2)
        if any(value is None for _, value in records):  # a whole write: the old row records' tombstones
            whole_writes += 1
            assert written > features * 25
        else:
            assert written < 40_000  # the mail's rows and the head
        for key, value in records:
            changelog.pop(key, None)
            changelog[key] = value
        live = sum(len(value) for key, value in changelog.items() if value is not None and key != META_KEY)
        assert live <= 2 * head.base + 2 * ROWS_BYTES
    assert whole_writes in whole_writes_expected if isinstance(whole_writes_expected, range) else \
        whole_writes == whole_writes_expected

    restored = StoredKeyTable(tmp_path / "restored", lambda: 2)
    restored.restore([(key, value) for key, value in changelog.items() if value is not None])
    assert same_counts(restored.get("big"), store.get("big"))
    assert len(restored.get("big").features) == features + 400 * 30


def test_the_cache_is_bounded_in_rows_as_well_as_in_keys(tmp_path):
    """A few users of 100,000s of features must not fill memory as 20,000 small keys may: the
    cache drops its least recently used keys past cache_rows rows too (changed keys stay until
    flushed), and what it drops is read back from disk as it was."""
    store = StoredKeyTable(tmp_path / "p", lambda: 2, cache_keys=100, cache_rows=25_000)
    for k in range(6):
        own = store.create(f"user-{k}", 2)
        own.add({f"w{k}-{i}": 1.0 for i in range(10_000)}, k % 2, 1.0)
        store.changed(f"user-{k}", own)
        store.observe(f"user-{k}", None)
    assert len(store._cache) == 6  # all changed: none may go before the flush
    store.flush(position=6)
    assert len(store._cache) == 2 and store._cached_rows == 20_000
    assert list(store._cache) == ["user-4", "user-5"]
    again = store.get("user-0")
    assert len(again.index) == 10_000 and again.class_counts == [1.0, 0.0]
    assert list(store._cache) == ["user-5", "user-0"] and store._cached_rows == 20_000


def test_a_users_views_of_a_million_features_are_written_in_bounded_records_and_restored(tmp_path):
    """personal.toml's views at a real user's size: the character 4-grams view of one user holds
    1,000,000 features, the words-and-bigrams view 200,000, the words view 50,000 (about 40 MB
    of counts and names in all). Every changelog record stays within ROWS_BYTES plus its view's
    prefix; a flush after one more mail writes that mail's rows in each view, not the user's
    views; a restore from the compacted changelog gives each view's counts back, and the same
    position (compared count by count: digests of keys this size take a minute)."""
    from stream_nb.keyed.codec import ROWS_BYTES
    from stream_nb.keyed.view_tables import ViewTables, view_prefix

    names, sizes = ["main", "chars", "words"], [200_000, 1_000_000, 50_000]
    tables = ViewTables(tmp_path / "p", names, lambda: 2)
    for v, (table, features) in enumerate(zip(tables.views, sizes)):
        own = table.create("big", 2)
        for start in range(0, features, 50_000):
            own.add({f"v{v}-{i}": 1.0 for i in range(start, start + 50_000)}, start // 50_000 % 2, 1.0)
        table.changed("big", own)
    tables.observe("big", None)
    first = tables.flush(position=1)
    bound = ROWS_BYTES + _HEAD.size + 16
    for key, value in first:
        prefix = next((view_prefix(name) for name in names[1:] if key.startswith(view_prefix(name))), b"")
        assert value is None or len(value) <= bound + len(prefix), (key[:40], len(value))
    assert sum(len(value) for _, value in first if value) > sum(sizes) * 25
    changelog = dict(first)

    rng = random.Random(35)
    for mail in range(20):  # a mail of 300 features in each view, 30 of them new
        for v, (table, features) in enumerate(zip(tables.views, sizes)):
            add_mail_to_big(table, rng, features, mail, known=f"v{v}-", new=f"v{v}-new-")
        tables.observe("big", None)
        records = tables.flush(position=mail + 2)
        assert sum(len(value) for _, value in records if value) < 3 * 40_000  # the mail's rows and heads
        changelog.update(records)

    restored = ViewTables(tmp_path / "restored", names, lambda: 2)
    restored.restore([(key, value) for key, value in changelog.items() if value is not None])
    assert restored.position == 21 and [t.clock for t in restored.views] == [t.clock for t in tables.views]
    for v, features in enumerate(sizes):
        assert same_counts(restored.views[v].get("big"), tables.views[v].get("big"))
        assert len(restored.views[v].get("big").features) == features + 20 * 30


def test_a_partition_passed_by_other_keys_labels_is_due_a_flush_of_its_position_alone(tmp_path, monkeypatch):
    """KeyedState.due: a commit is due a commit interval after an owned partition's changelog fell
    behind the worker's labeled position with none of its keys changed (labels of other keys
    only). The flush then sends each such partition's metadata alone, at the new position, and
    nothing is due after it; the replica (no position given) counts key changes alone."""
    from types import SimpleNamespace

    from stream_nb.worker import keyed as keyed_role
    from stream_nb.worker.keyed import KeyedState, OwnedPartition

    clock = [1_000.0]
    monkeypatch.setattr(keyed_role, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    personal = personal_model()
    worker = SimpleNamespace(config=SimpleNamespace(build_personal=lambda model: personal), model=personal.global_model,
                             kafka={"group_id": "g"}, checkpoints=SimpleNamespace(store=SimpleNamespace(directory=tmp_path)))
    state = KeyedState(worker)
    tables = {p: StoredKeyTable(tmp_path / f"p{p}", lambda: len(personal.classes_)) for p in (0, 1)}
    state.owned = {p: OwnedPartition(table, 10) for p, table in tables.items()}
    state._committed_at = {0: 10, 1: 10}  # restored there

    assert not state.due(1.0, 10)  # at its position: nothing to say
    assert not state.due(1.0, 25)  # labels of other keys to 25: the interval starts
    clock[0] += 0.5
    assert not state.due(1.0, 25)
    assert not state.due(1.0)  # (the replica's question: no key changed)
    clock[0] += 0.5
    assert state.due(1.0, 25) and state.behind(25)

    sent = []

    def send(topic, value, key, headers, partition):
        sent.append((topic, partition, key))
        return SimpleNamespace(is_done=True, exception=None, value=SimpleNamespace(offset=len(sent) - 1))

    state.send_flushes(SimpleNamespace(send=send), 25)
    assert sent == [("g-keys-changelog", 0, META_KEY), ("g-keys-changelog", 1, META_KEY)]
    state.confirmed()
    assert state._committed_at == {0: 25, 1: 25} and {p: owned.position for p, owned in state.owned.items()} == {0: 25, 1: 25}
    clock[0] += 10
    assert not state.behind(25) and not state.due(1.0, 25)
    assert not state.due(1.0, 26)  # further on: a new interval
    clock[0] += 1.0
    assert state.due(1.0, 26)
    for table in tables.values():
        table.close()
