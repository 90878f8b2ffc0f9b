"""Corrections and duplicates through replay (issue 24): the rules of stream_nb.lessons run on a
real model by `replay_contenders`, as the worker runs them, with configs/spam.toml and
configs/mail.toml as shipped and with plain settings, for text and mail events."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stream_nb.checkpoint import state_digest
from stream_nb.config import load_config
from stream_nb.lessons import LEARNED, LearnedIds
from stream_nb.model.training import predict_learn
from stream_nb.replay.cli import _contender
from stream_nb.replay.evaluation import EvaluationRecorder
from stream_nb.replay.prequential import replay_contenders
from tests.corpora import load_sms_spam, load_spamassassin_2003

REPO = Path(__file__).resolve().parents[1]
OTHER = {"ham": "spam", "spam": "ham"}
PLAIN = """
[model]
kind = "multinomial"
alpha = 0.2
[features]
binary = true
ngram_range = [1, 2]
subject_features = true
"""


@pytest.fixture(scope="module")
def sms() -> list[dict]:
    return [{"id": f"sms-{i}", "text": text, "label": label} for i, (label, text) in enumerate(load_sms_spam()[:1500])]


def _config(name: str, tmp_path: Path):
    if name == "plain":
        path = tmp_path / "plain.toml"
        path.write_text(PLAIN, encoding="utf-8")
        return load_config(path)
    return load_config(REPO / "configs" / name)


def _noisy_with_corrections(events: list[dict], seed: int, *, take_back_only: int = 0, duplicates: int = 0):
    """(stream with 10% wrong labels, their corrections 200 events later, `take_back_only`
    messages taken back and `duplicates` re-sent; the corrected stream: each message once
    under its true label, the taken-back ones absent)."""
    rng = random.Random(seed)
    wrong = set(rng.sample(range(len(events)), len(events) // 10))
    gone = set(rng.sample(sorted(set(range(len(events))) - wrong), take_back_only))
    resent = rng.sample(sorted(set(range(len(events))) - wrong - gone), duplicates)
    noisy = [dict(event, label=OTHER[event["label"]]) if i in wrong else event for i, event in enumerate(events)]
    late: dict[int, list[dict]] = {}
    for i in wrong:
        late.setdefault(i + 200, []).append(dict(events[i], unlearn=noisy[i]["label"]))
    for i in gone:
        late.setdefault(i + 50, []).append(dict(events[i], label=None, unlearn=events[i]["label"]))
    for i in resent:
        late.setdefault(i + 100, []).append(dict(events[i]))
    stream = []
    for i, event in enumerate(noisy):
        stream.append(event)
        stream.extend(late.pop(i, []))
    for position in sorted(late):
        stream.extend(late[position])
    corrected = [event for i, event in enumerate(events) if i not in gone]
    return stream, corrected, len(wrong), len(gone), len(resent)


def _replay(config, events, batch_size=1000, delay=0):
    contender = _contender("c", config, EvaluationRecorder)
    replay_contenders(events, [contender], batch_size=batch_size, delay=delay)
    return contender


@pytest.mark.parametrize("delay", [0, 37])
def test_plain_settings_a_stream_of_corrections_ends_in_the_corrected_stream_state(sms, tmp_path, delay):
    config = _config("plain", tmp_path)
    stream, corrected, n_wrong, n_gone, n_resent = _noisy_with_corrections(sms, 1, take_back_only=20, duplicates=40)
    fixed = _replay(config, stream, batch_size=256, delay=delay)
    direct = _replay(config, corrected, delay=delay)
    assert state_digest(fixed.model.to_state()) == state_digest(direct.model.to_state())
    assert fixed.model.events_learned == direct.model.events_learned == len(sms) - n_gone
    outcomes = fixed.lessons.outcomes
    assert (outcomes["corrected"], outcomes["duplicate"], outcomes[LEARNED]) == (n_wrong + n_gone, n_resent, len(sms))
    # each message scored once, when it first came: corrections and duplicates are not (under
    # --delay a re-sent message is asked again like any message: its label is not yet read)
    assert fixed.metrics.events == direct.metrics.events + n_gone + (n_resent if delay else 0)
    # the noisy stream alone (no corrections) does not end there: the test can tell
    noisy_only = _replay(config, [event for event in stream if event.get("unlearn") is None])
    assert state_digest(noisy_only.model.to_state()) != state_digest(direct.model.to_state())


@pytest.mark.parametrize("name", ["spam.toml", "mail.toml"])
def test_shipped_configurations_batches_equal_the_per_event_definition(sms, tmp_path, name):
    """The batch path (plain runs together) against a per-event loop written here: for each
    event, the rule's plan, unlearn_one of what the memory holds, predict_learn of the one event
    by the shipped [training], the memory settled."""
    config = _config(name, tmp_path)
    stream, _, _, _, _ = _noisy_with_corrections(sms, 2, take_back_only=15, duplicates=30)
    batched = _replay(config, stream, batch_size=500)

    model, memory = config.build_model(), LearnedIds(config.remember_ids)
    featurizers = [config.build_featurizer(view) for view in config.view_names]  # mail.toml: three views
    from stream_nb.lessons import learning_epochs, plan, settle
    counts = {}
    for event in stream:
        x = [featurizer.transform_one(event["text"]) for featurizer in featurizers]
        x = x if len(x) > 1 else x[0]  # an Experts model reads a dict per view
        planned = plan(event["id"], event["label"], event.get("unlearn"), memory.get(event["id"]))
        counts[planned.outcome] = counts.get(planned.outcome, 0) + 1
        if planned.take_back is not None:
            back = planned.take_back
            by = {} if back.by is None else {"learned_by": back.by}  # the experts that learned it
            model.unlearn_one(x, back.label, back.weight, learned_at=back.learned_at, **by)
        learned, epoch = False, 0
        if planned.learn is not None:
            epoch = learning_epochs(model, 1)[0]
            _, flags = predict_learn(model, [x], [planned.learn], **config.training)
            learned = flags[0]
        settle(memory, event["id"], planned, learned=bool(learned), epoch=epoch,
               by=learned if type(learned) is int else None)
    assert state_digest(batched.model.to_state()) == state_digest(model.to_state())
    assert batched.lessons.memory == memory
    assert dict(batched.lessons.outcomes) == counts
    assert counts["corrected"] + counts.get("correction_of_unknown", 0) > 100  # the stream exercised the rules


def test_mail_events_take_corrections_alike(tmp_path):
    rng = random.Random(3)
    messages = rng.sample(load_spamassassin_2003(), 400)  # raw mail, both folders
    events = [{"id": f"m{i}", "mail": data, "label": "spam" if "spam" in folder else "ham"}
              for i, (folder, data) in enumerate(messages)]
    config = _config("plain", tmp_path)
    stream, corrected, n_wrong, _, n_resent = _noisy_with_corrections(events, 4, duplicates=10)
    fixed = _replay(config, stream, batch_size=128)
    direct = _replay(config, corrected)
    assert state_digest(fixed.model.to_state()) == state_digest(direct.model.to_state())
    assert fixed.lessons.outcomes["corrected"] == n_wrong and fixed.lessons.outcomes["duplicate"] == n_resent
