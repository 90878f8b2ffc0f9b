"""Per-key models over several feature views ([personal] with [views]; stream_nb.model.personal_experts):
each view's keys are what that view alone with [personal] gives, the pool combines the keys'
predictions, the same at every batch size; each view's keys in a store of their own, one changelog."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from test_personal_replay import keyed_stream

from stream_nb.checkpoint.digest import state_digest
from stream_nb.config import load_config
from stream_nb.keyed.store import META_KEY
from stream_nb.keyed.view_tables import VIEW_MARK, ViewTables, view_prefix
from stream_nb.model.personal import TAKEN_BACK, InvalidKeyState
from stream_nb.model.personal_experts import PersonalExperts
from stream_nb.replay.prequential import Contender, replay_contenders

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CHARS = {"ngram_range": [1, 1], "char_ngrams": [4, 4]}
WORDS = {"ngram_range": [1, 1]}
VIEWS = ["views={chars = {ngram_range = [1, 1], char_ngrams = [4, 4]}, words = {ngram_range = [1, 1]}}"]
# each view alone, as [features] (personal.toml's [features] with the view's keys replaced)
ALONE = {"base": [], "chars": ["features.ngram_range=[1, 1]", "features.char_ngrams=[4, 4]"],
         "words": ["features.ngram_range=[1, 1]"]}


def with_corrections(events: list[dict], seed: int) -> list[dict]:
    """The stream with some labeled events sent again (duplicates) and some corrected (the
    other label, `unlearn` the first) or taken back alone, later in the stream."""
    rng = random.Random(seed)
    out = list(events)
    labeled = [e for e in events if "label" in e]
    for event in rng.sample(labeled, 40):
        other = "ham" if event["label"] == "spam" else "spam"
        kind = rng.choice(["again", "correct", "take_back"])
        change = ({} if kind == "again" else {"label": other, "unlearn": event["label"]} if kind == "correct"
                  else {"unlearn": event["label"]})
        copy = {**{k: v for k, v in event.items() if k != "label" or kind != "take_back"}, **change}
        out.insert(rng.randint(out.index(event) + 1, len(out)), copy)
    return out


def contender(overrides: list[str]) -> Contender:
    return Contender.of("c", load_config(CONFIGS / "personal.toml", overrides), positive="spam")


def figures(c: Contender) -> tuple:
    return c.metrics.correct, c.metrics.log_loss_sum, c.learned, list(c.model.pool.weights), dict(c.model.pool.offsets)


def key_states(personal) -> dict:
    return {key: personal.key_state(key) for key in personal.keys}


def memories(personal) -> dict:
    """Each key's memory of learned ids: {id: (class index or TAKEN_BACK, weight)}."""
    return {key: dict(personal.table.get(key).learned) for key in personal.keys}


PLAIN = keyed_stream(5, 700, keys=("ann", "bob", "cid", "dan"))
STREAM = with_corrections(PLAIN, 6)


def test_the_config_builds_a_per_key_model_over_each_view():
    config = load_config(CONFIGS / "personal.toml", VIEWS)
    model = config.build_model()
    personal = config.build_personal(model)
    assert isinstance(personal, PersonalExperts)
    assert [p.global_model for p in personal.personals] == model.models
    assert {(p.beta, p.prior_beta, p.shrinkage, p.max_key_features, p.remember_ids) for p in personal.personals} == \
        {(30000.0, 10.0, "key", 20000, 10000)}
    assert len({id(p.table) for p in personal.personals}) == 3  # a table of keys per view


@pytest.mark.parametrize("batch_size", [1, 7, 256])
def test_each_views_keys_are_what_that_view_alone_with_personal_gives(batch_size):
    """On a stream of first sendings. (With duplicates and corrections the views share one
    memory of learned ids, which remembers an id some view learned: a view that did not learn a
    message takes its second sending as a duplicate, where that view alone would decide on it
    again.)"""
    combined = contender(VIEWS)
    replay_contenders(PLAIN, [combined], batch_size=batch_size)
    assert combined.metrics.events > 500
    for v, name in enumerate(combined.model.names):
        alone = contender(["views={}", *ALONE[name]])
        replay_contenders(PLAIN, [alone], batch_size=batch_size)
        assert state_digest(combined.model.models[v].to_state()) == state_digest(alone.model.to_state()), name
        mine, its = combined.personal.personals[v], alone.personal
        assert sorted(mine.keys) == ["ann", "bob", "cid", "dan"]
        assert key_states(mine) == key_states(its), name
        assert mine.labeled_clock == its.labeled_clock
        assert memories(mine) == memories(its), name


def test_the_combination_is_the_same_at_every_batch_size():
    runs = []
    for batch_size in (1, 7, 256):
        c = contender(VIEWS)
        replay_contenders(STREAM, [c], batch_size=batch_size)
        runs.append((figures(c), [key_states(p) for p in c.personal.personals],
                     [memories(p) for p in c.personal.personals]))
        assert c.lessons.outcomes["corrected"] > 10 and c.lessons.outcomes["duplicate"] > 5
        # every view's keys took some correction back from their counts
        for personal in c.personal.personals:
            assert any(c == TAKEN_BACK for memory in memories(personal).values() for c, _ in memory.values())
    assert runs[0] == runs[1] == runs[2]
    weights = runs[0][0][3]
    assert math.isclose(sum(weights), 1.0) and len(set(weights)) == 3  # the pool learned


def test_the_batch_path_takes_the_batches(monkeypatch):
    """No silent fall-back to the per-event loop: after the first classes, every batch is
    taken whole by PersonalExperts.predict_learn_batch."""
    taken, refused = [], []
    original = PersonalExperts.predict_learn_batch

    def spy(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        (taken if result is not None else refused).append(len(args[2]))
        return result

    monkeypatch.setattr(PersonalExperts, "predict_learn_batch", spy)
    c = contender(VIEWS)
    replay_contenders(STREAM, [c], batch_size=50)
    assert len(taken) >= 13 and not refused


def test_a_stream_without_keys_is_the_global_combination_to_the_bit():
    keyless = [{k: v for k, v in event.items() if k != "key"} for event in STREAM]
    keyed = contender(VIEWS)
    plain = Contender.of("plain", load_config(CONFIGS / "mail.toml", VIEWS), positive="spam")
    seen: dict[str, list] = {"keyed": [], "plain": []}
    keyed.on_unlabeled = lambda event, proba, n: seen["keyed"].append((dict(proba), getattr(proba, "log_scores", None)))
    plain.on_unlabeled = lambda event, proba, n: seen["plain"].append((dict(proba), getattr(proba, "log_scores", None)))
    replay_contenders(keyless, [keyed, plain], batch_size=64)
    assert seen["keyed"] == seen["plain"] and len(seen["plain"]) > 100
    assert figures(keyed) == figures(plain)
    assert all(not p.keys for p in keyed.personal.personals)


@pytest.mark.parametrize("batch_size", [1, 64])
def test_the_global_experts_and_the_pool_learn_as_without_keys(batch_size):
    """The pool steps on the global experts' predictions, which every worker makes (it learns
    the whole labeled log, the keys of its own partitions only): the global Experts state,
    weights included, is the one replaying the stream without [personal] gives."""
    keyed = contender(VIEWS)
    plain = Contender.of("plain", load_config(CONFIGS / "mail.toml", VIEWS), positive="spam")
    replay_contenders(PLAIN, [keyed, plain], batch_size=batch_size)
    assert state_digest(keyed.model.to_state()) == state_digest(plain.model.to_state())
    assert keyed.learned == plain.learned
    assert keyed.metrics.log_loss_sum != plain.metrics.log_loss_sum  # the keys' counts did predict


def test_a_bad_event_is_refused_before_any_view_learns():
    config = load_config(CONFIGS / "personal.toml", VIEWS)
    model = config.build_model()
    personal = config.build_personal(model)
    good = [{"cheap": 1}, {"chea": 1}, {"cheap": 1}]
    for label in ("spam", "ham"):
        personal.predict_learn_one(good, label, "ann", dict(config.training))
    before = [state_digest(m.to_state()) for m in model.models], [key_states(p) for p in personal.personals]
    with pytest.raises(ValueError):
        personal.predict_learn_one([{"cheap": 1}, {"chea": 1}, {"cheap": -2}], "spam", "ann", dict(config.training))
    assert ([state_digest(m.to_state()) for m in model.models], [key_states(p) for p in personal.personals]) == before
    with pytest.raises(TypeError, match="one feature dict per view"):
        personal.predict_learn_one([{"cheap": 1}], "spam", "ann", dict(config.training))


def test_a_keys_prediction_is_the_pool_over_its_views_key_predictions():
    """Q_k(c | x) = softmax_c(b_c + sum_v w_v u_v,k(c)), u_v,k(c) = h tanh((l_v,k(c) - mean l_v,k) / h),
    l_v,k = log P_v,k(c | x) / sqrt(n_v), h = soft_clip / 2: computed here from each view's key
    prediction, against the combined one; and a key with counts is not the global combination."""
    c = contender(VIEWS)
    replay_contenders(PLAIN, [c], batch_size=64)
    personal, pool = c.personal, c.model.pool
    views = c.featurise_one({"text": "cheap prize meeting lunch win today", "key": "bob"})
    got = personal.predict_proba_one(views, "bob")
    h = pool.soft_clip / 2
    scores = dict.fromkeys(got, 0.0)
    for v, (own, x) in enumerate(zip(personal.personals, views)):
        p = own.predict_proba_one(x, "bob")
        logs = {label: math.log(p[label]) / math.sqrt(len(x)) for label in p}
        mean = sum(logs.values()) / len(logs)
        for label in scores:
            scores[label] += pool.weights[v] * h * math.tanh((logs[label] - mean) / h)
    for label in scores:
        scores[label] += pool.offsets.get(label, 0.0)
    top = max(scores.values())
    total = sum(math.exp(s - top) for s in scores.values())
    for label in scores:
        assert got[label] == pytest.approx(math.exp(scores[label] - top) / total, rel=1e-9, abs=1e-12)
    assert abs(got["spam"] - c.model.predict_proba_one(views)["spam"]) > 1e-3



def test_predict_many_is_each_events_own_prediction_by_key_or_globally():
    """PersonalExperts.predict_many over one batch (the worker's and the filter's unlabeled path):
    an event with a table gets its key's combined prediction, to the bit, a key without counts
    the global combination, an event without a table the global combination."""
    c = contender(VIEWS)
    replay_contenders(STREAM, [c], batch_size=64)
    personal, tables = c.personal, c.personal.table
    texts = ["cheap prize meeting lunch win today", "the report is attached", "WIN cash now", ""]
    events = [{"text": text, "key": key} for text in texts for key in ("ann", "bob", "nobody")]
    where = [None if i % 4 == 3 else tables for i in range(len(events))]
    X = c.featurise(events)
    got = personal.predict_many(X, [e["key"] for e in events], where)
    for event, table, prediction in zip(events, where, got):
        views = c.featurise_one(event)
        expected = (c.model.predict_proba_one(views) if table is None
                    else personal.predict_proba_one(views, event["key"]))
        assert dict(prediction) == dict(expected), event
    by_key = [dict(p) for p, t, e in zip(got, where, events) if t is not None and e["key"] != "nobody"]
    globally = [dict(c.model.predict_proba_one(c.featurise_one(e))) for t, e in zip(where, events)
                if t is not None and e["key"] != "nobody"]
    assert sum(a != b for a, b in zip(by_key, globally)) >= len(by_key) - 2  # the keys' counts count


# ---- a partition's stores: one per view, one changelog ------------------------------------------


def learned_view_tables(tmp_path: Path, name: str = "p0"):
    """A PersonalExperts that learned PLAIN's events into one partition's ViewTables."""
    config = load_config(CONFIGS / "personal.toml", VIEWS)
    model = config.build_model()
    personal = config.build_personal(model)
    table = ViewTables(tmp_path / name, config.view_names, lambda: len(personal.classes_))
    featurizers = [config.build_featurizer(), *(config.build_featurizer(v) for v in config.views)]
    for event in PLAIN[:300]:
        x = [f.transform_one(event["text"]) for f in featurizers]
        personal.predict_learn_one(x, event.get("label"), event["key"], dict(config.training), table,
                                   event_id=event["id"])
    return config, personal, table


def test_view_tables_write_each_view_under_its_prefix_and_restore_to_the_same_state(tmp_path):
    config, personal, table = learned_view_tables(tmp_path)
    records = table.flush(position=300)
    assert records[-1][0] == META_KEY  # the first view's metadata closes the flush
    by_view = {name: [key for key, _ in records if key.startswith(view_prefix(name))] for name in ("chars", "words")}
    assert all(by_view.values()) and view_prefix("chars") in by_view["chars"]  # each view's metadata too
    assert sum(map(len, by_view.values())) + sum(1 for key, _ in records if key[:1] != VIEW_MARK) == len(records)
    restored = ViewTables(tmp_path / "restored", config.view_names, lambda: 2)
    assert restored.restore(records) == len(records)
    assert restored.digest() == table.digest() and restored.position == 300
    states = [{key: own.key_state(key, restored.views[v]) for key in ("ann", "bob", "cid", "dan")}
              for v, own in enumerate(personal.personals)]
    assert states == [{key: own.key_state(key, table.views[v]) for key in ("ann", "bob", "cid", "dan")}
                      for v, own in enumerate(personal.personals)]
    assert all(state is not None for view in states for state in view.values())
    assert states[0]["ann"]["features"].keys() != states[1]["ann"]["features"].keys()  # each view its own names


def test_view_tables_refuse_a_changelog_of_other_views(tmp_path):
    config, _, table = learned_view_tables(tmp_path)
    records = table.flush(position=300)
    stranger = [(b"\xffosb\x00" + key, value) for key, value in records if key[:1] != VIEW_MARK]
    with pytest.raises(InvalidKeyState, match="a view this configuration does not have"):
        ViewTables(tmp_path / "a", config.view_names, lambda: 2).restore(records + stranger)
    one_view_only = [(key, value) for key, value in records if key[:1] != VIEW_MARK]
    with pytest.raises(InvalidKeyState, match="different labeled positions"):
        ViewTables(tmp_path / "b", config.view_names, lambda: 2).restore(one_view_only)
