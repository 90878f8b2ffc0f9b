"""Per-key models over several feature views on a real broker ([personal] with [views], issue 35).

configs/personal.toml with mail.toml's three views (words and bigrams with mail evidence, character
4-grams, words): each worker keeps a store per view for each partition it owns, and writes them to
one changelog partition. Two workers share the keyed SMS stream; one is killed with SIGKILL halfway
and its partitions move; users correct 40 of their messages and take 15 back (600 labeled SMS, 300 unlabeled). Then, as with one
view (test_worker_keyed): every unlabeled id is predicted once, each prediction is its key's views
combined by the pool at the labeled offset it names, bit for bit, and each changelog partition,
restored as a new owner restores it, is exactly the state the rules give on the labeled order
(stream_nb.model.personal_experts, the same steps as replay).
"""

from __future__ import annotations

import random
import tomllib

import pytest
from test_worker_keyed import (
    PARTITIONS,
    REPO,
    every_label_in_the_order,
    first_worker_on_part_0,
    keyed_stream,
    messages,
    produce_part,
    run_keyed_stream,
)

from stream_nb.config import load_config

from worker_support import WorkerProcess, produce, read_topic, wait_until

pytestmark = pytest.mark.kafka

VIEWS = tomllib.loads((REPO / "configs" / "mail.toml").read_text())["views"]


@pytest.mark.timeout(900)
def test_two_workers_a_kill_and_corrections_keep_every_views_keys_exact(kafka_broker, sms, tmp_path):
    assert len(VIEWS) == 2  # mail.toml's views beside [features]' own

    def two_workers(run):
        logs = run.tmp_path
        first = first_worker_on_part_0(run)
        second = WorkerProcess(run.configs[1], logs / "w1.log", stop_when_idle=None)
        wait_until(lambda: "restored from" in (logs / "w1.log").read_text(errors="replace"), 180,
                   "partitions moved to the second worker", [first, second])
        produce_part(run, 1)
        wait_until(lambda: len(read_topic(run.bootstrap, run.topics.predictions, timeout=60)) >= 2 * len(run.unlabeled) // 3,
                   240, "the first two thirds predicted", [first, second])
        second.kill()  # SIGKILL: its partitions, stores and open transaction go to the first
        produce_part(run, 2)
        rng = random.Random(8)
        picked = rng.sample(run.labeled[:400], 55)
        other = {"ham": "spam", "spam": "ham"}
        corrections = [dict(event, label=other[event["label"]], unlearn=event["label"]) for event in picked[:40]]
        corrections += [dict(event, label=None, unlearn=event["label"]) for event in picked[40:]]
        produce(run.bootstrap, messages(run.topics, corrections, True))
        run.labeled_corrections = corrections
        wait_until(lambda: len(read_topic(run.bootstrap, run.topics.predictions, timeout=60)) >= len(run.unlabeled),
                   240, "every unlabeled event predicted", [first])
        every_label_in_the_order(run, [first])
        first.process.terminate()
        assert first.wait(120) == 0, first.log_tail()
        last = WorkerProcess(run.configs[0], logs / "w0-last.log", stop_when_idle=3.0)  # learns the order to its end
        assert last.wait(300) == 0, last.log_tail()

    # 600 labeled and 300 unlabeled SMS (the one-view tests' 900 and 600: three views cost the suite time)
    predictions = run_keyed_stream(tmp_path, kafka_broker.bootstrap, "kafka-python", sms, two_workers,
                                   stream=keyed_stream(sms, 600, 300), views=VIEWS)
    assert len(predictions) == 300
    # each prediction's clues open with each view's share of its score
    some = next(iter(predictions.values()))
    assert [clue[0] for clue in some["clues"][:3]] == ["@base", "@chars", "@words"], some["clues"][:4]
    config = load_config(tmp_path / "w0.toml", [])
    assert config.view_names == ["base", "chars", "words"] and config.personal is not None
    assert PARTITIONS == 4
