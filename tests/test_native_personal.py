"""Per-key models in C (_kernel.keyed_events, _kernel.rows_of_hashes; stream_nb.model.personal_batch)
against their definition: PersonalMultinomialNB's per-event path (predict_and_decide, the global
model's step, learn_key, observe_labeled), bit for bit, on generated streams that reach the
kernel's edges: keys new in a batch, keyless events, one key name in two tables, corrections and
duplicates (the events the kernel hands back), budget cuts in the middle of a part, memory cuts,
names too long for a key, counts above 1, maintenance between parts, zero weights (beta = 0: the
key's own MLE and its infinite scores), "class" shrinkage, unknown="smooth", alpha = 0. A spy on
the C entry points makes sure the C path is the one compared. Where the extension is not built
these tests skip (under CI=true they fail).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from stream_nb.checkpoint.digest import state_digest
from stream_nb.config import load_config
from stream_nb.model import counting, personal_batch
from stream_nb.model.base import SparseBatch
from stream_nb.model.personal import KeyTable
from stream_nb.model.training import predict_learn

from native import require_extension

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
WORDS = {"ham": "meeting report lunch schedule project budget call notes agenda minutes".split(),
         "spam": "cheap offer win prize click free money pills casino bonus".split(),
         "news": "headline election market weather sport score league".split()}
LONG = "x" * 1030  # longer than a key keeps (MAX_KEY_NAME_CHARS): the global model's alone


class KernelSpy:
    """Stands in for the extension module: counts the events keyed_events ran."""

    def __init__(self, module) -> None:
        self.module, self.events, self.lookups = module, 0, 0
        self.statuses = [0, 0, 0]  # done, an event handed back, a key over its budget

    def keyed_events(self, start, stop, *rest):
        reached, status, seen = self.module.keyed_events(start, stop, *rest)
        self.events += reached - start
        self.statuses[status] += 1
        return reached, status, seen

    def rows_of_hashes(self, row_hashes, hashes, out, *names):
        self.lookups += len(hashes)
        return self.module.rows_of_hashes(row_hashes, hashes, out, *names)

    def number_pairs(self, slot, uid, n_slots):
        return self.module.number_pairs(slot, uid, n_slots)

    def name_facts(self, *args):
        return self.module.name_facts(*args)


@pytest.fixture
def spy(monkeypatch):
    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    spy = KernelSpy(counting._native_kernel)
    monkeypatch.setattr(personal_batch, "native_kernel", lambda: spy)
    return spy


def generated(seed: int, n: int, classes=("ham", "spam"),
              keys=("ann", "bob", "cid", "dan", "eve", "fay", "gus", "hal")) -> list[dict]:
    """Keyed texts with each key's own words, some unlabeled, some keyless, a few with a name too
    long for a key; later events repeat earlier ids (a duplicate, or a correction: "unlearn" the
    label the id came with, sent with another)."""
    rng = random.Random(seed)
    events, sent = [], []
    for i in range(n):
        # keys come along the stream: a key's first lessons are decided on the global model's prediction
        key = rng.choice(keys[:1 + i * len(keys) // n] + (None,))
        label = rng.choice(classes)
        pool = WORDS[label] + [f"{key}w{k}" for k in range(4)] + [f"r{rng.randrange(400)}" for _ in range(3)]
        words = [rng.choice(pool) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.03:
            words.append(LONG)
        event = {"id": f"e{i}", "text": " ".join(words), "key": key, "label": label, "unlearn": None}
        if rng.random() < 0.15:
            event["label"] = None
        elif sent and rng.random() < 0.12:  # an id again: a duplicate or a correction
            earlier = rng.choice(sent)
            event["id"], event["key"], event["text"] = earlier["id"], earlier["key"], earlier["text"]
            if rng.random() < 0.6:
                event["unlearn"] = earlier["label"]
                event["label"] = rng.choice([c for c in classes if c != earlier["label"]])
            else:
                event["label"] = earlier["label"]
        if event["label"] is not None:
            sent.append(event)
        events.append(event)
    return events


def run_both(config, events: list[dict], batch_size: int, *, counts: bool = False):
    """The events through predict_learn_batch (SparseBatch X: the C path) and through the
    per-event definition, each with its own global model and two key tables (keys "ann" and
    "bob" live in both: one name, two keys). Returns both sides' (results, tables, model)."""
    featurizer = config.build_featurizer()
    sides = []
    for fast in (True, False):
        model = config.build_model()
        personal = config.build_personal(model)
        tables = (KeyTable(), KeyTable())
        results = []
        for start in range(0, len(events), batch_size):
            batch = events[start:start + batch_size]
            labels = [e["label"] for e in batch]
            keys = [e["key"] for e in batch]
            ids = [e["id"] for e in batch]
            unlearns = [e["unlearn"] if e["label"] is not None else None for e in batch]
            where = [None if key is None else tables[(start + i) % 2 if key in ("ann", "bob") else 0]
                     for i, key in enumerate(keys)]
            got = None
            if fast and model.classes_ and all(label is None or label in model._class_index for label in labels):
                X = sparse(featurizer, model, [e["text"] for e in batch], counts)
                got = personal.predict_learn_batch(
                    X, None, labels, keys, where, dict(config.training),
                    lambda i, keys=keys, where=where: where[i] is not None and personal.observe_labeled(keys[i], where[i]),
                    ids, unlearns)
                assert got is not None
            if got is None:
                rows = sparse(featurizer, model, [e["text"] for e in batch], counts).to_dicts()
                got = [definition(personal, x, e["label"], key, table, e["id"], unlearn, config.training)
                       for x, e, key, table, unlearn in zip(rows, batch, keys, where, unlearns)]
            results.extend(got)
        sides.append((results, tables, model, personal))
    return sides


def sparse(featurizer, model, texts: list[str], counts: bool) -> SparseBatch:
    """The featuriser's batch (its names as vocabulary columns and numbered unknown names); with
    `counts`, every value doubled and some tripled instead (the counts of a featuriser of counts)."""
    X = featurizer.transform_sparse(texts, vocabulary=model.vocabulary, number_unknown=True)
    if counts:
        values = np.ones(len(X.names)) if X.values is None else np.array(X.values, dtype=np.float64)
        values *= 2.0
        values[::3] = 3.0
        X = SparseBatch(list(X.names), X.lengths, values, X.distinct)
    return X


def definition(personal, x, label, key, table, event_id, unlearn, training) -> tuple:
    """One event by the per-event path."""
    prediction, key_learns = personal.predict_and_decide(x, label, key, table, event_id=event_id, unlearn=unlearn)
    _, learned = predict_learn(personal.global_model, [x], [label], **training)
    if label is not None and table is not None:
        if key_learns:
            personal.learn_key(x, label, key, table=table, event_id=event_id)
        personal.observe_labeled(key, table)
    return prediction, learned[0]


def assert_same(sides) -> None:
    (fast, fast_tables, fast_model, fast_personal), (slow, slow_tables, slow_model, slow_personal) = sides
    assert len(fast) == len(slow)
    for i, ((p, flag), (q, other)) in enumerate(zip(fast, slow)):
        assert (dict(p), getattr(p, "log_scores", None), flag) == (dict(q), getattr(q, "log_scores", None), other), i
    for mine, theirs in zip(fast_tables, slow_tables):
        assert mine.clock == theirs.clock
        assert list(mine.keys) == list(theirs.keys)
        for key in theirs.keys:
            assert fast_personal.key_state(key, mine) == slow_personal.key_state(key, theirs), key
            assert mine.keys[key].learned == theirs.keys[key].learned, key
            assert_row_caches_hold(mine.keys[key])
    assert state_digest(fast_model.to_state()) == state_digest(slow_model.to_state())


def assert_row_caches_hold(own) -> None:
    """The names and hashes a key keeps beside its index (extended as rows come, carried through
    cuts) are those of its rows, in row order."""
    cached = own._hashes
    if cached is None or cached[0] is not own.index or cached[1] != len(own.index):
        return  # stale: made again when next asked
    names = list(own.index)
    assert cached[2].tolist() == [hash(name) for name in names]
    if cached[3] is not None and len(cached[3]) == len(names):
        assert cached[3] == names
    assert own.row_names() == names and own.row_hashes().tolist() == [hash(name) for name in names]


# the kernel runs one view's per-key models (each view's, with [views]): personal.toml over one view
ONE_VIEW = ["views={}"]
SETTINGS = {
    "personal.toml, cuts": ["personal.max_key_features=40", "personal.remember_ids=30"],
    "all, class, own MLE": ['training.mode="all"', 'personal.shrinkage="class"', "personal.beta=0",
                            "personal.prior_beta=0", "personal.max_key_features=0"],
    "on_error, smooth": ['training.mode="on_error"', 'model.unknown="smooth"', "model.alpha=0.5",
                         "personal.beta=5", "personal.max_key_features=25"],
    "thick, alpha 0, maintenance": ["model.alpha=0", "model.evict_every=20", "model.half_life=200",
                                    "personal.beta=0", "personal.prior_beta=3", 'personal.shrinkage="key"'],
    "global budget": ["model.max_features=60", "model.evict_every=15", "model.half_life=0",
                      "personal.max_key_features=30"],
}


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("batch_size", [1, 37, 400])
def test_the_kernel_is_the_per_event_definition_to_the_bit(spy, name, batch_size):
    config = load_config(CONFIGS / "personal.toml", [*ONE_VIEW, *SETTINGS[name]])
    events = generated(sum(map(ord, name)), 800)
    sides = run_both(config, events, batch_size)
    assert_same(sides)
    # all but the first batch (before any class) and the events handed back
    assert spy.events >= 0.7 * (800 - batch_size) and spy.lookups > 0
    if "cuts" in name:  # keys cut in the middle of a part, new keys' first lessons handed back
        assert spy.statuses[2] >= 5 and spy.statuses[1] >= 3


def test_counts_above_one_and_three_classes(spy):
    config = load_config(CONFIGS / "personal.toml", [*ONE_VIEW, 'model.classes=["ham", "news", "spam"]', "features.binary=false",
                                                     "personal.max_key_features=50"])
    events = generated(5, 700, classes=("ham", "news", "spam"))
    sides = run_both(config, events, 60, counts=True)
    assert_same(sides)
    assert spy.events >= 500


def test_the_shipped_settings_take_every_plain_event_in_c(spy):
    """personal.toml's settings (over one view: the kernel is each view's), no corrections: only
    the first labeled event of each key (whose decision is the global model's) is left to the
    definition."""
    config = load_config(CONFIGS / "personal.toml", ONE_VIEW)
    events = [dict(e, unlearn=None, id=f"u{i}") for i, e in enumerate(generated(9, 900))]
    sides = run_both(config, events, 300)
    assert_same(sides)
    assert spy.events >= 900 - 300 - 8


def test_rows_of_hashes_is_its_definition():
    """rows_of_hashes against a dict of the row hashes: a hash no row has is -1, a hash of one
    row is that row (when its name is the one asked for, if names are given), a hash of several
    rows is -2; on generated hashes, repeated and colliding."""
    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    rng = np.random.default_rng(3)
    for n, m in [(0, 5), (1, 3), (50, 400), (3000, 9000)]:
        row_hashes = rng.integers(-2 ** 63, 2 ** 63 - 1, n, dtype=np.int64)
        if n > 10:
            row_hashes[5] = row_hashes[7]  # two rows of one hash
            row_hashes[-1] = row_hashes[2] ^ (1 << 40)  # differ in a high bit only
        queries = np.concatenate([rng.choice(row_hashes, m // 2) if n else np.zeros(0, dtype=np.int64),
                                  rng.integers(-2 ** 63, 2 ** 63 - 1, m - (m // 2 if n else 0), dtype=np.int64)])
        rng.shuffle(queries)
        out = np.zeros(len(queries), dtype=np.int64)
        counting._native_kernel.rows_of_hashes(row_hashes, queries, out)
        rows_of: dict = {}
        for row, value in enumerate(row_hashes.tolist()):
            rows_of[value] = -2 if value in rows_of else row
        assert out.tolist() == [rows_of.get(value, -1) for value in queries.tolist()]
        # with names: a row of the hash whose name differs is -2 (looked up by name), as is a shared hash
        row_names = [f"n{row % 7}" if row % 5 else f"row{row}" for row in range(n)]
        names = [f"n{i % 7}" for i in range(m)]
        picks = np.arange(m, dtype=np.int64)
        counting._native_kernel.rows_of_hashes(row_hashes, queries, out, row_names, names, picks)
        expected = [rows_of.get(value, -1) for value in queries.tolist()]
        expected = [r if r < 0 or row_names[r] == names[i] else -2 for i, r in enumerate(expected)]
        assert out.tolist() == expected


def test_number_pairs_is_its_definition():
    """number_pairs against a dict: each slot's distinct names in the order they first come,
    slots one after another; occurrences of no slot have none."""
    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    rng = np.random.default_rng(4)
    for m, n_slots, n_names in [(0, 0, 1), (1, 1, 1), (40, 3, 5), (20000, 50, 3000)]:
        slot = rng.integers(-1, n_slots, m) if n_slots else np.full(m, -1)
        uid = rng.integers(0, n_names, m)
        pair, offsets, pair_uid = (np.frombuffer(a, dtype=np.int64)
                                   for a in counting._native_kernel.number_pairs(slot, uid, n_slots))
        numbered: list[dict] = [{} for _ in range(n_slots)]
        for s, u in zip(slot.tolist(), uid.tolist()):
            if s >= 0:
                numbered[s].setdefault(u, len(numbered[s]))
        starts = np.cumsum([0] + [len(d) for d in numbered])
        assert offsets.tolist() == starts.tolist()
        assert pair_uid.tolist() == [u for d in numbered for u in d]
        assert pair.tolist() == [-1 if s < 0 else int(starts[s]) + numbered[s][u] for s, u in zip(slot.tolist(),
                                                                                                   uid.tolist())]
    with pytest.raises(ValueError, match="has slot 2 of 2"):
        counting._native_kernel.number_pairs(np.array([2]), np.array([0]), 2)


def test_name_facts_is_its_definition():
    """name_facts against names picked by column or rank, their hash() and length."""
    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    by_column = ["a", "bé", "x" * 1030, "日本"]
    unknown = ["zz", "y" * 1024, "ü" * 1025]
    columns = np.array([3, -1, 0, -1, 2, -1, 1], dtype=np.int64)
    ranks = np.array([-1, 2, -1, 0, -1, 1, -1], dtype=np.int64)
    names, hashes, addable = counting._native_kernel.name_facts(by_column, columns, unknown, ranks, 1024)
    expected = ["日本", "ü" * 1025, "a", "zz", "x" * 1030, "y" * 1024, "bé"]
    assert names == expected
    assert np.frombuffer(hashes, dtype=np.int64).tolist() == [hash(name) for name in expected]
    assert np.frombuffer(addable, dtype=np.uint8).tolist() == [len(name) <= 1024 for name in expected]
    with pytest.raises(TypeError, match="a name is a str, got int"):
        counting._native_kernel.name_facts([7], np.array([0]), [], np.array([-1]), 1024)
    with pytest.raises(ValueError, match="column 4 of 4"):
        counting._native_kernel.name_facts(by_column, np.array([4]), [], np.array([-1]), 1024)


def test_the_kernel_refuses_arrays_that_break_its_shapes_with_one_line():
    """keyed_events reads arrays a caller built: a slot beyond the slots, a name beyond the
    names, a pair beyond the pairs or a row beyond a key's rows are refused (ValueError) before
    anything is read or changed."""
    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    kernel = counting._native_kernel
    C, U = 2, 3

    def call(slot=0, uid=(0, 1), pair=(0, 1), row_of=(-1, -1), rows=0):
        counts = np.zeros((U, C))
        return kernel.keyed_events(
            0, 1, 0, np.array([0, len(uid)], dtype=np.int64), np.array(uid, dtype=np.int64),
            np.array(pair, dtype=np.int64), np.ones(len(uid)), np.array([slot], dtype=np.int64),
            np.array([0], dtype=np.int64), np.array([-1], dtype=np.int64), np.zeros(1), np.ones(U, dtype=np.uint8),
            counts, np.ones(C), np.ones(C), (np.zeros((4, C)),), np.array([4], dtype=np.int64),
            np.ones(1, dtype=np.uint8), np.ones((1, C)), np.ones((1, C)), np.array([rows], dtype=np.int64),
            np.array(row_of, dtype=np.int64), np.zeros(len(row_of), dtype=np.uint8),
            (1.0, 0.0, False, 10.0, 1.0, 0, 0, 0), np.zeros((1, C)), np.zeros((1, C), dtype=np.uint8),
            np.zeros((1, C)), np.zeros(1, dtype=np.uint8), np.zeros(1, dtype=np.uint8))

    assert call()[:2] == (1, 0)
    for bad, message in [({"slot": 1}, "bad bounds, slot or class"), ({"uid": (0, 3)}, "names 3 of 3 names"),
                         ({"pair": (0, 2)}, "names pair 2 of 2"), ({"row_of": (0, -1)}, r"\(row 0 of the slot's 0\)")]:
        with pytest.raises(ValueError, match=message):
            call(**bad)


@pytest.mark.parametrize("name", ["personal.toml, cuts", "all, class, own MLE", "on_error, smooth"])
def test_predictions_of_a_batch_are_predict_proba_one(spy, name):
    """The worker's predictions (PersonalMultinomialNB.predict_batch: keys' models over the global
    model as it stands) against predict_proba_one event by event: keys with counts, keys never
    seen, keyless events and events the global model refused (None) alike."""
    config = load_config(CONFIGS / "personal.toml", [*ONE_VIEW, *SETTINGS[name]])
    (_, tables, model, personal), _ = run_both(config, generated(11, 600), 50)
    featurizer = config.build_featurizer()
    questions = [e for e in generated(12, 300, keys=("ann", "bob", "cid", "dan", "eve", "fay", "gus", "hal", "new"))]
    texts = [e["text"] for e in questions]
    # as the worker featurises what it only predicts: new names numbered by the featuriser alone
    X = featurizer.transform_sparse(texts, vocabulary=model.vocabulary, number_unknown=False)
    assert X.unknown_in(model.vocabulary) is None
    keys = [e["key"] for e in questions]
    where = [None if key is None else tables[i % 2 if key in ("ann", "bob") else 0] for i, key in enumerate(keys)]
    probabilities = [None if i % 17 == 0 else dict(p) for i, p in enumerate(model.predict_proba_many(X))]
    before = spy.events
    got = personal.predict_batch(X, keys, where, list(probabilities))
    assert spy.events - before == len(questions)
    rows = X.to_dicts()
    expected = [probabilities[i] if where[i] is None or not probabilities[i] or where[i].get(keys[i]) is None
                else personal.predict_proba_one(rows[i], keys[i], where[i]) for i in range(len(questions))]
    assert [(dict(p) if p is not None else None, getattr(p, "log_scores", None)) for p in got] == \
        [(dict(p) if p is not None else None, getattr(p, "log_scores", None)) for p in expected]
    assert sum(getattr(p, "log_scores", None) is not None for p in got) > 100
