"""Replay with per-key models ([personal], configs/personal.toml): keyed events predicted by their
key's model, the global model learning as it does without [personal], and configs/personal.toml
itself (corrections: tests/test_personal_corrections.py)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from stream_nb.checkpoint.digest import state_digest
from stream_nb.config import ConfigError, load_config
from stream_nb.model.personal import PersonalMultinomialNB
from stream_nb.model.training import predict_learn
from stream_nb.replay.prequential import Contender, replay_contenders

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
WORDS = {"ham": "meeting report lunch schedule project budget call notes".split(),
         "spam": "cheap offer win prize click free money viagra".split()}
SHARED = "hello thanks today please".split()


def keyed_stream(seed: int, n: int, keys=("ann", "bob", "cid")) -> list[dict]:
    """Mail-like texts; each key has its own habits: "bob" writes about prizes in his ham."""
    rng = random.Random(seed)
    events = []
    for i in range(n):
        key = rng.choice(keys)
        label = rng.choice(["ham", "spam"])
        pool = WORDS[label] + SHARED + ([f"{key}word{k}" for k in range(3)] if label == "ham" else [])
        if key == "bob" and label == "ham":
            pool = pool + ["prize", "win"] * 4
        text = " ".join(rng.choice(pool) for _ in range(rng.randint(3, 9)))
        event = {"id": f"e{i}", "text": text, "key": key}
        if rng.random() < 0.8:
            event["label"] = label
        events.append(event)
    return events


def contender(config_path: Path, overrides=()) -> Contender:
    return Contender.of(config_path.stem, load_config(config_path, list(overrides)), positive="spam")


# The per-key machinery of one view (stream_nb.model.personal): personal.toml over mail.toml's
# [features] view alone. personal.toml as shipped (three views): tests/test_personal_experts.py.
ONE_VIEW = ["views={}"]


def test_personal_toml_is_mail_toml_plus_per_key_models():
    spam, personal = load_config(CONFIGS / "mail.toml"), load_config(CONFIGS / "personal.toml")
    assert personal.personal == {"beta": 30000, "prior_beta": 10, "shrinkage": "key", "max_key_features": 20000,
                                 "idle_after": 0, "remember_ids": 10000}
    assert spam.personal is None
    for section in ("model", "features", "training", "evaluation", "worker"):
        assert getattr(personal, section) == getattr(spam, section), section
    assert personal.kafka["group_id"] == "stream-nb-personal" != spam.kafka["group_id"]
    assert personal.kafka["labeled_topics"] == spam.kafka["labeled_topics"]
    resolved = personal.resolved()
    assert resolved["personal"] == personal.personal and "personal" not in spam.resolved()


def test_the_global_model_learns_as_without_keys_and_keyless_events_are_predicted_as_before():
    events = keyed_stream(1, 600)
    keyed, plain = contender(CONFIGS / "personal.toml", ONE_VIEW), contender(CONFIGS / "mail.toml", ONE_VIEW)
    replay_contenders(events, [keyed, plain], batch_size=97)
    assert state_digest(keyed.model.to_state()) == state_digest(plain.model.to_state())
    assert keyed.learned == plain.learned
    assert set(keyed.personal.keys) == {"ann", "bob", "cid"}
    assert keyed.metrics.accuracy != plain.metrics.accuracy or keyed.metrics.log_loss != plain.metrics.log_loss

    keyless = [{k: v for k, v in event.items() if k != "key"} for event in events]
    keyed, plain = contender(CONFIGS / "personal.toml", ONE_VIEW), contender(CONFIGS / "mail.toml", ONE_VIEW)
    replay_contenders(keyless, [keyed, plain], batch_size=50)
    assert keyed.personal.keys == {}
    assert (keyed.metrics.correct, keyed.metrics.log_loss_sum) == (plain.metrics.correct, plain.metrics.log_loss_sum)


def test_replay_predicts_each_event_by_its_keys_model_as_the_per_event_definition():
    events = keyed_stream(2, 300)
    keyed = contender(CONFIGS / "personal.toml", [*ONE_VIEW, "personal.beta=20", "personal.prior_beta=2"])
    seen = []
    keyed.on_unlabeled = lambda event, probabilities, _: seen.append((event["id"], dict(probabilities)))
    replay_contenders(events, [keyed], batch_size=64)

    config = load_config(CONFIGS / "personal.toml", [*ONE_VIEW, "personal.beta=20", "personal.prior_beta=2"])
    featurizer, model = config.build_featurizer(), config.build_model()
    definition = PersonalMultinomialNB(model, 20, 2, training=dict(config.training))
    expected = []
    for event in events:
        x = featurizer.transform_one(event["text"])
        probabilities = definition.predict_proba_one(x, event["key"])
        label = event.get("label")
        if label is None:
            expected.append((event["id"], dict(probabilities)))
            continue
        learns = definition.decide(x, label, event["key"])
        predict_learn(model, [x], [label], **config.training)
        if learns:
            definition.learn_key(x, label, event["key"])
        definition.observe_labeled(event["key"])
    assert seen == expected
    assert {k: keyed.personal.key_state(k) for k in keyed.personal.keys} == {
        k: definition.key_state(k) for k in definition.keys}


def test_a_key_that_writes_about_prizes_in_its_ham_is_learned():
    events = keyed_stream(3, 1500)
    # every label learned: thick-threshold training learns bob's ham, which the global model gets
    # wrong, and little of the spam, so "prize win" would be ham to it too
    every = 'training.mode="all"'
    keyed, plain = contender(CONFIGS / "personal.toml", [*ONE_VIEW, "personal.beta=50", every]), \
        contender(CONFIGS / "mail.toml", [*ONE_VIEW, every])
    replay_contenders(events, [keyed, plain])
    query = keyed.featurise_one({"text": "prize win"})
    bob = keyed.personal.predict_proba_one(query, "bob")["spam"]
    ann = keyed.personal.predict_proba_one(query, "ann")["spam"]
    assert bob < 0.5 < ann  # bob's ham talks of prizes; for ann they are spam
    assert plain.model.predict_proba_one(query)["spam"] > 0.5  # and for the global model


def test_personal_settings_are_checked_on_load(tmp_path):
    cases = [
        ("[personal]\nbeta = -1\n", "personal.beta"),
        ("[personal]\nprior_beta = nan\n", "personal.prior_beta"),
        ("[personal]\nbeta = 1e13\n", "personal.beta"),
        ("[personal]\nshrinkage = \"both\"\n", "personal.shrinkage"),
        ("[personal]\ngamma = 1\n", "personal.gamma: unknown key"),
        ("[personal]\nmax_key_features = -1\n", "personal.max_key_features"),
        ("[personal]\nidle_after = 2.5\n", "personal.idle_after: expected int"),
        ("[model]\nkind = \"bernoulli\"\n[personal]\n", "multinomial"),
        ('extends = "missing.toml"\n', "no such file"),
        ('extends = "loop.toml"\n', "a loop"),
        ("extends = 3\n", "extends: expected the path"),
    ]
    (tmp_path / "loop.toml").write_text('extends = "case.toml"\n')
    for text, expected in cases:
        (tmp_path / "case.toml").write_text(text)
        with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
            load_config(tmp_path / "case.toml")


def test_extends_replaces_key_by_key_and_set_comes_last(tmp_path):
    (tmp_path / "base.toml").write_text('[model]\nalpha = 0.5\nhalf_life = 100\n[kafka.client]\nclient_id = "a"\n'
                                        'request_timeout_ms = 5000\n[kafka]\ngroup_id = "g"\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "top.toml").write_text('extends = "../base.toml"\n[model]\nalpha = 0.1\n'
                                               '[kafka.client]\nclient_id = "b"\n')
    config = load_config(tmp_path / "sub" / "top.toml", ["model.half_life=7"])
    assert config.model["alpha"] == 0.1 and config.model["half_life"] == 7
    assert config.kafka_client == {"client_id": "b", "request_timeout_ms": 5000}
    assert config.kafka["group_id"] == "g"


@pytest.mark.parametrize("override, refusal", [
    ('kafka.processing_guarantee="at_least_once"', 'kafka.processing_guarantee must be "exactly_once"'),
    ('kafka.unlabeled_topics=["a", "b"]', "follows the partitions of one unlabeled topic; kafka.unlabeled_topics has 2"),
])
def test_the_worker_refuses_per_key_models_it_cannot_keep_exactly_with_one_line(override, refusal):
    from stream_nb.worker.loop import Worker

    config = load_config(CONFIGS / "personal.toml", ["kafka.bootstrap_servers=\"127.0.0.1:9\"", override])
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        Worker.check_config(config)


def test_per_key_models_take_raw_mail_keyed_by_the_record_key_or_a_mail_header():
    """Issue 33: [personal] with value_format = "mail" was refused ("raw mail carries no event key")."""
    from stream_nb.events import SourcePosition
    from stream_nb.events.raw_mail import decoder_for
    from stream_nb.worker.loop import Worker

    config = load_config(CONFIGS / "personal.toml", ['kafka.bootstrap_servers="127.0.0.1:9"', 'kafka.value_format="mail"'])
    Worker.check_config(config)  # no refusal
    mail = b"Delivered-To: Ann <Ann@Example.org>\r\nMessage-ID: <m1@x>\r\nSubject: hi\r\n\r\nbody\r\n"
    where = SourcePosition("mail", 0, 1)
    by_record = decoder_for({"value_format": "mail"}, labeled=False, keyed=True)
    assert by_record(mail, b"ann-queue", (), where).key == "ann-queue"
    assert by_record(mail, None, (), where).key is None and by_record(mail, b"\xff", (), where).key is None
    by_header = decoder_for({"value_format": "mail", "mail_key_header": "Delivered-To"}, labeled=False, keyed=True)
    assert by_header(mail, b"ignored", (), where).key == "ann@example.org"
    assert by_header(b"Subject: no header\r\n\r\nx", b"k", (), where).key is None
    unkeyed = decoder_for({"value_format": "mail", "mail_key_header": "Delivered-To"}, labeled=False)
    assert unkeyed(mail, b"ann-queue", (), where).key is None  # without [personal] no key is read
    with pytest.raises(ConfigError, match="kafka.mail_key_header: 'Delivered-To:' is not a mail header name"):
        load_config(CONFIGS / "personal.toml", ['kafka.mail_key_header="Delivered-To:"'])


def test_the_replay_report_lists_each_keys_figures(tmp_path):
    from stream_nb.replay.cli import replay_and_report
    from stream_nb.replay.evaluation import roc_auc

    events = keyed_stream(5, 900, keys=("ann", "bob", "cid", "dan"))
    events[5] = {k: v for k, v in events[5].items() if k != "key"}  # one keyless event
    named = [("mail", load_config(CONFIGS / "mail.toml")), ("personal", load_config(CONFIGS / "personal.toml"))]
    _, contenders, reports = replay_and_report(events, named, tmp_path / "report", batch_size=100)
    for contender_, report in zip(contenders, reports):
        by_key = report["by_key"]
        assert by_key["keys"] == 5 and set(by_key["listed"]) == {"ann", "bob", "cid", "dan", "(no key)"}
        assert sum(row["events"] for row in by_key["listed"].values()) == report["labeled_events_scored"]
        # bob's figures from the recorder's own arrays, by hand
        recorder = contender_.recorder
        mask = [key == "bob" for key in contender_.scored_keys]
        import numpy as np
        mask = np.array(mask)
        correct = (recorder.true_indices == recorder.predicted_indices)[mask]
        assert by_key["listed"]["bob"]["accuracy"] == correct.mean()
        spam = (recorder.true_indices == recorder.labels.index("spam"))[mask]
        auc = roc_auc(recorder.log_odds("spam")[mask], spam)
        assert by_key["listed"]["bob"]["one_minus_roca_percent"] == pytest.approx(100 * (1 - auc))
    keyless = [{k: v for k, v in event.items() if k != "key"} for event in events]
    _, _, reports = replay_and_report(keyless, named[:1], tmp_path / "keyless", batch_size=100)
    assert "by_key" not in reports[0]


def test_stream_nb_replay_compares_one_global_model_with_per_key_models(tmp_path):
    import json
    import subprocess
    import sys

    events = keyed_stream(6, 400)
    (tmp_path / "keyed.jsonl").write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "replay", "--input", str(tmp_path / "keyed.jsonl"),
                           "--config", str(CONFIGS / "mail.toml"), "--compare", str(CONFIGS / "personal.toml"),
                           "--report", str(tmp_path / "r")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    personal = report["compared"][0]
    assert personal["configuration"]["personal"] == {"beta": 30000, "prior_beta": 10, "shrinkage": "key",
                                                     "max_key_features": 20000, "idle_after": 0,
                                                     "remember_ids": 10000}
    assert "personal" not in report["configuration"]
    assert set(report["by_key"]["listed"]) == set(personal["by_key"]["listed"]) == {"ann", "bob", "cid"}
    # the same events through the Python API give the same figures
    keyed, plain = contender(CONFIGS / "personal.toml"), contender(CONFIGS / "mail.toml")  # as shipped: three views
    replay_contenders(events, [plain, keyed])
    assert personal["accuracy"] == keyed.metrics.accuracy and report["accuracy"] == plain.metrics.accuracy
    assert personal["events_learned"] == keyed.learned


def test_budgets_and_idle_keys_leave_a_function_of_the_stream_whatever_the_batches():
    events = keyed_stream(7, 700, keys=tuple(f"k{i}" for i in range(12)))
    settings = ["personal.beta=40", "personal.max_key_features=12", "personal.idle_after=60"]
    runs = []
    for batch_size in (1, 33, 700):
        keyed = contender(CONFIGS / "personal.toml", [*ONE_VIEW, *settings])
        replay_contenders(events, [keyed], batch_size=batch_size)
        runs.append(({k: keyed.personal.key_state(k) for k in keyed.personal.keys}, keyed.personal.keys_evicted,
                     keyed.metrics.correct, keyed.metrics.log_loss_sum))
    assert runs[0] == runs[1] == runs[2]
    states, evicted, _, _ = runs[0]
    assert evicted > 0 and all(len(state["features"]) <= 12 for state in states.values())


def test_stream_nb_run_refuses_per_key_models_it_cannot_keep_before_looking_for_a_broker():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "run", "--config", str(CONFIGS / "personal.toml"),
                           "--bootstrap", "127.0.0.1:9", "--set", "kafka.processing_guarantee=at_least_once"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "stream-nb run: personal: per-key state is written to its changelog in the transaction of the outputs: "
        'kafka.processing_guarantee must be "exactly_once"']


@pytest.mark.parametrize("settings", [
    ["personal.beta=40", "personal.max_key_features=12", "personal.idle_after=60"],  # the definition, event by event
    [],  # personal.toml as shipped: the batch path
])
def test_the_workers_partitioned_steps_leave_each_key_as_replay_does(tmp_path, monkeypatch, settings):
    """The worker's learning step (stream_nb.worker.keyed.PartitionedKeys: a store per partition
    of the keys, the global model batched between owned keys' events) against replay's one table:
    each key's counts, and which keys were evicted, alike, with a budget and idle eviction on (the
    idle clock counts every labeled event in both, keyless ones too, whatever the partition), and
    as shipped. As shipped, only the first batch's events up to the first of each class go event
    by event: the rest of that batch and every later one take the batch path."""
    from stream_nb.events.codec import Event, SourcePosition
    from stream_nb.keyed.store import StoredKeyTable
    from stream_nb.worker.keyed import OwnedPartition, PartitionedKeys, key_partition

    one_by_one = []
    definition = PartitionedKeys._one_by_one

    def counted(self, model, events, X, offsets, tables, training, begin, end=None):
        one_by_one.append((events[0].source.offset, begin, len(events) if end is None else end))
        return definition(self, model, events, X, offsets, tables, training, begin, end)

    monkeypatch.setattr(PartitionedKeys, "_one_by_one", counted)
    keys = tuple(f"k{i}" for i in range(12))
    events = [event for event in keyed_stream(7, 900, keys=keys) if "label" in event]
    for event in events[::10]:
        del event["key"]  # keyless: the global model's, and a tick of every clock
    replayed = contender(CONFIGS / "personal.toml", [*ONE_VIEW, *settings])
    replay_contenders(events, [replayed], batch_size=50)

    config = load_config(CONFIGS / "personal.toml", [*ONE_VIEW, *settings])
    model = config.build_model()
    personal = config.build_personal(model)
    featurizer = config.build_featurizer()
    partitions = 4
    tables = {p: StoredKeyTable(tmp_path / f"p{p}", lambda: len(personal.classes_), idle_after=personal.idle_after,
                                cache_keys=2) for p in range(partitions)}
    steps = PartitionedKeys(personal, partitions, {p: OwnedPartition(table, 0) for p, table in tables.items()})
    for start in range(0, len(events), 37):
        batch = [Event(e["id"], e["text"], None, e["label"], SourcePosition("labeled", 0, start + i), key=e.get("key"))
                 for i, e in enumerate(events[start:start + 37])]
        X = featurizer.transform_sparse([event.text for event in batch], vocabulary=model.vocabulary,
                                        number_unknown=True)
        steps.predict_then_learn(model, batch, X, [event.source.offset for event in batch], dict(config.training))
    for table in tables.values():
        table.flush(position=len(events))
    assert state_digest(model.to_state()) == state_digest(replayed.model.to_state())
    assert sum(table.evicted for table in tables.values()) == replayed.personal.keys_evicted
    assert (replayed.personal.keys_evicted > 0) == bool(settings)
    for key in keys:
        table = tables[key_partition(key, partitions)]
        assert personal.key_state(key, table=table) == replayed.personal.key_state(key), key
    if not settings:
        labels = [event["label"] for event in events]
        second_class_at = next(i for i, label in enumerate(labels) if label != labels[0])
        assert second_class_at < 37
        assert one_by_one == [(0, 0, second_class_at + 1)]


@pytest.mark.parametrize("overrides", [
    [],  # personal.toml as shipped: thick threshold per sqrt(feature), a key budget
    ['training.mode="all"', "personal.max_key_features=0"],
    ["model.evict_every=50", "model.half_life=300", "personal.max_key_features=15"],  # decay inside batches
    ["model.max_features=40", "model.evict_every=25", "model.half_life=0"],  # the global budget evicts in batches
])
def test_the_batch_path_is_the_per_event_loop_to_the_bit(overrides):
    """predict_learn_batch (the global model's batch path, its state at each event rebuilt from
    what the events before it added) against the per-event loop it replaces: the same prediction
    for every event, the same learned flags, the same key counts and global state, bit for bit;
    and it does take the batches (no silent fall-back)."""
    from stream_nb.checkpoint.digest import state_digest

    events = keyed_stream(12, 700, keys=("ann", "bob", "cid", "dan"))
    config = load_config(CONFIGS / "personal.toml", [*ONE_VIEW, *overrides])
    featurizer = config.build_featurizer()
    fast_model, slow_model = config.build_model(), config.build_model()
    fast, slow = config.build_personal(fast_model), config.build_personal(slow_model)
    fast_results, slow_results, taken = [], [], 0
    for start in range(0, len(events), 50):
        batch = events[start:start + 50]
        rows = [featurizer.transform_one(event["text"]) for event in batch]
        labels, keys = [event.get("label") for event in batch], [event["key"] for event in batch]
        got = fast.predict_learn_batch(rows, rows, labels, keys, [fast.table] * len(batch), dict(config.training),
                                       lambda i, keys=keys: fast.observe_labeled(keys[i]))
        if got is None:  # the first batch: no class yet
            got = []
            for x, label, key in zip(rows, labels, keys):
                got.append(step(fast, x, label, key, config.training))
        else:
            taken += 1
        fast_results.extend(got)
        slow_results.extend(step(slow, x, label, key, config.training) for x, label, key in zip(rows, labels, keys))
    assert taken >= 12
    assert [(dict(p), getattr(p, "log_scores", None), flag) for p, flag in fast_results] == \
        [(dict(p), getattr(p, "log_scores", None), flag) for p, flag in slow_results]
    assert {k: fast.key_state(k) for k in fast.keys} == {k: slow.key_state(k) for k in slow.keys}
    assert fast.labeled_clock == slow.labeled_clock and fast.keys_evicted == slow.keys_evicted
    assert state_digest(fast_model.to_state()) == state_digest(slow_model.to_state())


def step(personal, x, label, key, training):
    """The per-event definition: the key's prediction and decision, the global model's step, the
    key's learning, the clock."""
    prediction, key_learns = personal.predict_and_decide(x, label, key)
    _, learned = predict_learn(personal.global_model, [x], [label], **training)
    if label is not None:
        if key_learns:
            personal.learn_key(x, label, key)
        personal.observe_labeled(key)
    return prediction, learned[0]
