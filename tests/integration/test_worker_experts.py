"""Feature views as experts through the worker on a real broker (issue 35): raw SpamAssassin mail
with configs/mail.toml plus two views, corrections among the labels, SIGKILLs and restarts. The
final checkpoint equals replay's Experts state over the same labeled log (every expert's counts
and the combination's weights), each prediction is published once and equals, bit for bit,
replay's combined prediction after the labeled prefix it names, with each expert's share among
its clues."""

from __future__ import annotations

import random
import time

import pytest

from stream_nb.checkpoint import state_digest
from stream_nb.config import load_config
from stream_nb.events.codec import published_score
from stream_nb.mail.identity import mail_id
from stream_nb.model.explain import strongest_clues
from stream_nb.replay.cli import _contender
from stream_nb.replay.evaluation import EvaluationRecorder
from stream_nb.replay.prequential import replay_contenders

from corpora import load_spamassassin_2003
from worker_support import (
    REPO_ROOT,
    Message,
    Topics,
    WorkerProcess,
    create_topics,
    end_offset,
    latest_summary,
    newest_position,
    predictions_by_id,
    produce,
    read_topic,
    wait_until,
)

pytestmark = pytest.mark.kafka

OTHER = {"ham": "spam", "spam": "ham"}
VIEWS = """
[views.osb]
ngram_range = [1, 1]
osb_window = 5

[views.chars]
ngram_range = [1, 1]
char_ngrams = [4, 4]
"""


@pytest.fixture(scope="module")
def messages() -> list[tuple[bytes, str]]:
    """(raw bytes, label) of 900 SpamAssassin 2003 messages, in one fixed shuffled order."""
    found = sorted((data, "spam" if folder.startswith("spam") else "ham") for folder, data in load_spamassassin_2003())
    random.Random(35).shuffle(found)
    return found[:900]


def _config_text(bootstrap: str, topics: Topics, checkpoints) -> str:
    return (f'extends = "{REPO_ROOT / "configs" / "mail.toml"}"\n{VIEWS}\n'
            f'[kafka]\nbootstrap_servers = "{bootstrap}"\ngroup_id = "{topics.labeled}-group"\n'
            f'labeled_topics = ["{topics.labeled}"]\nunlabeled_topics = ["{topics.unlabeled}"]\n'
            f'predictions_topic = "{topics.predictions}"\ndead_letter_topic = "{topics.dead_letters}"\n'
            f'value_format = "mail"\n\n[checkpoint]\ndir = "{checkpoints}"\ninterval_s = 0.5\nevery_events = 150\n\n'
            f'[worker]\nclues = 3\nlog_interval_s = 1.0\ninstance_id = "{topics.labeled}-worker"\n')


def test_views_through_the_worker_with_corrections_and_kills_equal_replay(kafka_broker, tmp_path, messages):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("experts")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    rng = random.Random(7)
    produced, labeled_log, unlabeled = [], [], {}
    wrong = set(rng.sample(range(len(messages)), 30))
    for i, (raw, label) in enumerate(messages):
        event_id = mail_id(raw)
        if i % 7 == 3:
            unlabeled[event_id] = raw
            produced.append(Message(topics.unlabeled, raw, event_id.encode()))
            continue
        given = OTHER[label] if i in wrong else label
        produced.append(Message(topics.labeled, raw, event_id.encode(), headers=(("label", given.encode()),)))
        labeled_log.append({"id": event_id, "mail": raw, "label": given})
    for i in sorted(wrong):  # the corrections, after everything else: the true label, the wrong one taken back
        raw, label = messages[i]
        if i % 7 == 3:
            continue
        produced.append(Message(topics.labeled, raw, mail_id(raw).encode(),
                                headers=(("label", label.encode()), ("unlearn", OTHER[label].encode()))))
        labeled_log.append({"id": mail_id(raw), "mail": raw, "label": label, "unlearn": OTHER[label]})
    checkpoints = tmp_path / "checkpoints"
    config_path = tmp_path / "experts.toml"
    config_path.write_text(_config_text(bootstrap, topics, checkpoints))
    log_path = tmp_path / "worker.log"
    # three phases, a third of the traffic each: predictions at several points of the labeled log;
    # the first two workers are killed once they have checkpointed and published their phase
    thirds = [produced[: len(produced) // 3], produced[len(produced) // 3: 2 * len(produced) // 3],
              produced[2 * len(produced) // 3:]]
    sent_labeled = sent_unlabeled = 0
    for phase, part in enumerate(thirds):
        produce(bootstrap, part)
        sent_labeled += sum(1 for message in part if message.topic == topics.labeled)
        sent_unlabeled += sum(1 for message in part if message.topic == topics.unlabeled)
        if phase == 2:
            break
        worker = WorkerProcess(config_path, log_path, stop_when_idle=None)
        try:
            wait_until(lambda: len(read_topic(bootstrap, topics.predictions, timeout=5)) >= sent_unlabeled, 180,
                       f"phase {phase}'s predictions", worker)
            wait_until(lambda: newest_position(checkpoints)[1].get((topics.labeled, 0), 0) >= sent_labeled, 180,
                       f"a checkpoint of phase {phase}", worker)
            time.sleep(rng.uniform(0.0, 0.3))
            assert worker.alive()
        finally:
            worker.kill()
    worker = WorkerProcess(config_path, log_path, stop_when_idle=3)
    try:
        assert worker.wait(300) == 0, worker.log_tail()
    finally:
        worker.kill()
    assert log_path.read_text().count("restored checkpoint") == 2

    # the reference: replay of the labeled log, in offset order, through the same configuration
    config = load_config(config_path)
    reference = _contender("reference", config, EvaluationRecorder)
    predictions = predictions_by_id(read_topic(bootstrap, topics.predictions))
    assert set(predictions) == set(unlabeled) and all(len(copies) == 1 for copies in predictions.values())
    by_prefix: dict[int, list[dict]] = {}
    for (prediction,) in predictions.values():
        ((topic, _, next_offset),) = prediction["model"]["labeled_offsets"]
        by_prefix.setdefault(next_offset, []).append(prediction)
    learned_upto = 0
    for next_offset in sorted(by_prefix):
        replay_contenders(labeled_log[learned_upto:next_offset], [reference], batch_size=1000)
        learned_upto = next_offset
        for prediction in by_prefix[next_offset]:
            views = reference.featurise_one({"id": prediction["id"], "mail": unlabeled[prediction["id"]]})
            expected = reference.model.predict_proba_one(views)
            assert prediction["proba"] == {str(c): p for c, p in expected.items()}, prediction["id"]
            assert prediction["score"] == published_score(expected.log_odds("spam")), prediction["id"]
            clues = strongest_clues(reference.model, views, top=3)
            assert prediction["clues"] == [[name, evidence] for name, evidence in clues], prediction["id"]
            assert [name for name, _ in clues[:4]] == ["@base", "@osb", "@chars", "@(offset)"]
    replay_contenders(labeled_log[learned_upto:], [reference], batch_size=1000)
    summary = latest_summary(checkpoints)
    assert summary.offsets == {(topics.labeled, 0): len(labeled_log)}
    assert summary.digest == state_digest(reference.model.to_state())
    assert reference.lessons.outcomes["corrected"] == sum(1 for i in wrong if i % 7 != 3) > 20
    assert len(by_prefix) >= 3  # predictions were made at several points of the labeled log
    assert read_topic(bootstrap, topics.dead_letters) == []
    assert end_offset(bootstrap, topics.predictions) >= len(unlabeled)
