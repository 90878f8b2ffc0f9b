"""Corrections and duplicates (issue 24) through the worker on a real broker.

A labeled topic carries SMS messages, ~10% of them under the wrong label, then their
corrections ({"id", "text", "label": true, "unlearn": wrong}), a few take-backs only
("label": null) and re-sent duplicates. Every figure is read back from the worker's checkpoints
and its /metrics, and compared with an answer computed another way: the model core fed the
corrected stream directly (plain settings), or replay's contender fed the same stream through
the same rules (configs/spam.toml as shipped: thick threshold, forgetting). Each test also
shows that a plausible bug (duplicates learned again, take-backs ignored, the epoch of a
take-back ignored, the memory of learned ids lost on restart) gives another digest.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stream_nb.checkpoint import CheckpointStore, state_digest
from stream_nb.config import load_config
from stream_nb.lessons import DEFAULT_REMEMBER_IDS, LabeledLessons, Learned, LearnedIds
from stream_nb.model.registry import model_from_state

from worker_support import (
    Message,
    Topics,
    WorkerProcess,
    create_topics,
    end_offset,
    latest_summary,
    newest_position,
    produce,
    read_topic,
    reference_digest_events,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka

PLAIN_TRAINING, NO_FORGETTING = {"mode": "all"}, {"half_life": 0}  # half_life = 0: no forgetting
OTHER = {"ham": "spam", "spam": "ham"}


# ---------------------------------------------------------------------------------------------
# The stream


@dataclass(frozen=True)
class CorrectedStream:
    """A labeled topic's events in produce order, each with its kind (by construction):
    "message" (first sending, its label wrong for the ids in `flipped`), "correction",
    "take_back", "duplicate" (a message or a correction sent again)."""

    events: list[dict]
    kinds: list[str]
    truth: dict[str, tuple[str, str]]  # id -> (true label, text), in first-sending order
    flipped: list[str]
    taken_back: list[str]
    held_back: list[str]  # flipped ids whose correction the stream does not carry

    def direct(self) -> list[dict]:
        """The same messages under their true labels, the taken-back ones absent, in first-sending order."""
        return [{"id": event_id, "text": text, "label": label} for event_id, (label, text) in self.truth.items()
                if event_id not in self.taken_back]

    def count(self, kind: str) -> int:
        return self.kinds.count(kind)


def corrected_stream(rows, prefix: str, *, seed: int, take_backs: int, duplicates: int, repeated_corrections: int,
                     held_back: int = 0, held_back_within: int = 0) -> CorrectedStream:
    """`rows` (label, text) as messages <prefix><i>, 10% of them (seeded) first sent under the
    other label; each extra event (correction, take-back, duplicate) goes in at a seeded random
    place after its message's first sending. `duplicates` messages of correct, kept ids are sent
    twice; `repeated_corrections` corrections are sent twice; `held_back` flipped ids among the
    first `held_back_within` messages get no correction."""
    rng = random.Random(seed)
    ids = [f"{prefix}{i}" for i in range(len(rows))]
    truth = {event_id: (label, text) for event_id, (label, text) in zip(ids, rows)}
    flipped = sorted(rng.sample(ids, round(0.1 * len(ids))), key=ids.index)
    kept_back = rng.sample([event_id for event_id in flipped if ids.index(event_id) < held_back_within], held_back)
    corrected = [event_id for event_id in flipped if event_id not in kept_back]
    right = [event_id for event_id in ids if event_id not in set(flipped)]
    taken_back = rng.sample(right, take_backs)
    resent = rng.sample([event_id for event_id in right if event_id not in set(taken_back)], duplicates)

    def message(event_id):
        label, text = truth[event_id]
        return {"id": event_id, "text": text, "label": OTHER[label] if event_id in flipped else label}

    def correction(event_id):
        label, text = truth[event_id]
        return {"id": event_id, "text": text, "label": label, "unlearn": OTHER[label]}

    def take_back(event_id):
        label, text = truth[event_id]
        return {"id": event_id, "text": text, "label": None, "unlearn": label}

    placed = [(float(k), "message", message(event_id)) for k, event_id in enumerate(ids)]
    extras = ([("correction", correction(event_id)) for event_id in corrected]
              + [("duplicate", correction(event_id)) for event_id in rng.sample(corrected, repeated_corrections)]
              + [("take_back", take_back(event_id)) for event_id in taken_back]
              + [("duplicate", message(event_id)) for event_id in resent])
    for kind, event in extras:
        placed.append((rng.uniform(ids.index(event["id"]) + 0.5, len(ids)), kind, event))
    placed.sort(key=lambda item: item[0])
    # of a correction sent twice, the copy that comes first is the correction, the other the duplicate
    seen_corrections, kinds = set(), []
    for _, kind, event in placed:
        if "unlearn" in event and event["label"] is not None:
            kind = "duplicate" if event["id"] in seen_corrections else "correction"
            seen_corrections.add(event["id"])
        kinds.append(kind)
    return CorrectedStream([event for _, _, event in placed], kinds, truth, flipped, taken_back, kept_back)


def to_messages(topic: str, events: list[dict]) -> list[Message]:
    return [Message(topic, json.dumps(event).encode(), event["id"].encode()) for event in events]


def produce_flowing(bootstrap: str, messages: list[Message], hold_at: int, go_on: threading.Event,
                    chunk: int = 100, pause_s: float = 0.05) -> None:
    """`messages` in order, `chunk` at a time with a pause after each (a stream still coming
    in); from message `hold_at` on, only once `go_on` is set."""
    for start in range(0, len(messages), chunk):
        if start >= hold_at:
            go_on.wait(120)
        produce(bootstrap, messages[start:start + chunk])
        time.sleep(pause_s)


# ---------------------------------------------------------------------------------------------
# What the worker exposes: /metrics and its checkpoints


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> tuple[Counter, float] | None:
    """(stream_nb_labeled_outcomes_total by outcome, stream_nb_events_learned_total) of one
    scrape; None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
    outcomes, learned = Counter(), 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "stream_nb_labeled_outcomes_total":
                outcomes[sample.labels["outcome"]] = int(sample.value)
            elif sample.name == "stream_nb_events_learned_total":
                learned = sample.value
    return outcomes, learned


def checkpointed(directory: Path, topic: str) -> int:
    """The labeled offset of the newest checkpoint in `directory` (0: none yet)."""
    return newest_position(directory)[1].get((topic, 0), 0)


def wait_for_checkpoint(directory: Path, topic: str, offset: int, port: int, worker: WorkerProcess) -> None:
    """Until a checkpoint holds the labeled topic up to `offset` and /metrics answers: every
    record before it has been through the rules and counted (a refused one, as a dead letter)."""
    wait_until(lambda: checkpointed(directory, topic) == offset and scrape(port) is not None, 120,
               f"a checkpoint at labeled offset {offset}", worker)


def stop(worker: WorkerProcess) -> None:
    """SIGTERM: a clean stop, which writes the final checkpoint."""
    worker.process.terminate()
    assert worker.wait(60) == 0, worker.log_tail()


def learned_ids(directory: Path) -> LearnedIds:
    checkpoint = CheckpointStore(directory).load_latest()
    assert checkpoint is not None, f"no valid checkpoint in {directory}"
    return LearnedIds.from_state(checkpoint.extra["learned_ids"])


def contender(config_path: Path):
    """Replay's contender for the worker's own configuration (stream_nb.replay.cli._contender)."""
    from stream_nb.replay.cli import _contender
    from stream_nb.replay.evaluation import EvaluationRecorder

    return _contender("reference", load_config(config_path), EvaluationRecorder)


def replayed(reference, events: list[dict]):
    """`reference` (a contender) after `events`, as replay runs a stream (replay_contenders)."""
    from stream_nb.replay.prequential import replay_contenders

    replay_contenders([dict(event) for event in events], [reference])
    return reference


def watch_take_backs(reference, instead=None) -> list[tuple[int, int]]:
    """(epoch learned at, the model's epoch) of each take-back the contender's model is asked
    for, appended as they come; `instead(model)` gives the epoch to pass on in their place
    (a careless take-back), if given."""
    model, asked = reference.model, []
    unlearn_many = model.unlearn_many

    def take_back(X, labels, weights, learned_at):
        asked.append((learned_at, model.forgetting_epoch))
        return unlearn_many(X, labels, weights, learned_at=learned_at if instead is None else instead(model))

    model.unlearn_many = take_back
    return asked


def digest_of(contender) -> str:
    return state_digest(contender.model.to_state())


# ---------------------------------------------------------------------------------------------
# 1. Plain settings: the corrected stream and the stream of corrected labels end alike


def expected_memory(stream: CorrectedStream) -> list[tuple[str, str]]:
    """(id, class) the memory holds after the stream under mode "all" with room for every id,
    oldest first, from what each event is by construction: a message is learned, a
    correction learns its id again (moved last), a take-back forgets it, a duplicate does nothing."""
    memory: dict[str, str] = {}
    for kind, event in zip(stream.kinds, stream.events):
        if kind == "take_back":
            del memory[event["id"]]
        elif kind in ("message", "correction"):
            memory.pop(event["id"], None)
            memory[event["id"]] = event["label"]
    return list(memory.items())


def test_plain_settings_corrected_stream_equals_the_stream_of_corrected_labels(kafka_broker, tmp_path, sms, transport):
    bootstrap = kafka_broker.bootstrap
    stream = corrected_stream(sms[:400], "c", seed=24, take_backs=5, duplicates=22, repeated_corrections=8)
    kinds = Counter(stream.kinds)
    assert kinds == {"message": 400, "correction": 40, "take_back": 5, "duplicate": 30}
    direct = stream.direct()
    assert len(direct) == 395
    corrections, plain = Topics.new("corrections"), Topics.new("corrected")
    create_topics(bootstrap, [corrections.labeled, corrections.unlabeled, plain.labeled, plain.unlabeled])
    produce(bootstrap, to_messages(corrections.labeled, stream.events) + to_messages(plain.labeled, direct))

    port = free_port()
    settings = {"training": PLAIN_TRAINING, "model": NO_FORGETTING, "kafka": {"poll_max_records": 50},
                "checkpoint": {"every_events": 100, "interval_s": 0.5}, "transport": transport}
    corrections_path = write_config(tmp_path / "corrections.toml", bootstrap, corrections, tmp_path / "corrections",
                                    worker={"metrics_port": port}, **settings)
    plain_path = write_config(tmp_path / "corrected.toml", bootstrap, plain, tmp_path / "corrected", **settings)
    # write_config's defaults are configs/spam.toml's (thick threshold, forgetting): the plain
    # settings are these overrides, as the worker reads them
    config = load_config(corrections_path)
    assert config.training["mode"] == "all" and config.build_model().half_life is None
    assert config.remember_ids == DEFAULT_REMEMBER_IDS > len(stream.events)

    plain_worker = WorkerProcess(plain_path, tmp_path / "corrected.log", stop_when_idle=2)
    worker = WorkerProcess(corrections_path, tmp_path / "corrections.log", stop_when_idle=None)
    try:
        wait_for_checkpoint(tmp_path / "corrections", corrections.labeled, len(stream.events), port, worker)
        outcomes, learned = scrape(port)
        stop(worker)
        assert plain_worker.wait(120) == 0, plain_worker.log_tail()
    finally:
        worker.kill()
        plain_worker.kill()

    # the counters: what was sent (a take-back is a correction with nothing to learn)
    assert +outcomes == {"learned": 400, "corrected": 40 + 5, "duplicate": 30}
    assert learned == 400 + 40  # nothing learned for a duplicate or a take-back
    assert read_topic(bootstrap, corrections.dead_letters) == read_topic(bootstrap, plain.dead_letters) == []

    # the state: both workers, and the model core fed the corrected labels one at a time
    from_corrections = latest_summary(tmp_path / "corrections")
    from_direct = latest_summary(tmp_path / "corrected")
    expected_digest, expected_learned = reference_digest_events(direct, PLAIN_TRAINING, NO_FORGETTING)
    assert from_corrections.digest == from_direct.digest == expected_digest
    assert from_corrections.events_learned == from_direct.events_learned == expected_learned == 395
    assert from_corrections.offsets == {(corrections.labeled, 0): len(stream.events)}
    assert from_direct.offsets == {(plain.labeled, 0): 395}

    # the memory: each kept id under its true class, in the order it was last learned
    memory = learned_ids(tmp_path / "corrections")
    assert list(memory.items()) == [(event_id, Learned(label, 0, 1.0)) for event_id, label in expected_memory(stream)]
    assert dict(memory.items()) == dict(learned_ids(tmp_path / "corrected").items())

    # the prequential figures score each message once, under the label it was first sent with:
    # no correction, take-back or duplicate (the first message came before any class was known)
    scored = CheckpointStore(tmp_path / "corrections").load_latest().extra["metrics"]
    first_sent = Counter(event["label"] for kind, event in zip(stream.kinds, stream.events) if kind == "message")
    first_sent[stream.events[0]["label"]] -= 1
    scored_by_label = Counter()
    for true, _predicted, count in scored["confusion"]:
        scored_by_label[true] += count
    assert scored["events"] == 399 and scored_by_label == first_sent

    # plausible bugs each give another digest: duplicates learned again, take-backs ignored,
    # the wrong labels left in
    def digest_if_learned(events):
        return reference_digest_events(events, PLAIN_TRAINING, NO_FORGETTING)[0]

    resent = [{**event, "label": stream.truth[event["id"]][0]}
              for kind, event in zip(stream.kinds, stream.events) if kind == "duplicate"]
    assert digest_if_learned(direct + resent) != from_corrections.digest
    kept_too = [{"id": i, "text": stream.truth[i][1], "label": stream.truth[i][0]} for i in stream.taken_back]
    assert digest_if_learned(direct + kept_too) != from_corrections.digest
    as_sent = [event for kind, event in zip(stream.kinds, stream.events) if kind == "message"]
    assert digest_if_learned(as_sent) != from_corrections.digest


# ---------------------------------------------------------------------------------------------
# 2. configs/spam.toml as shipped: the worker ends where replay's rules end


def test_shipped_settings_end_in_the_state_replay_gives_for_the_same_stream(kafka_broker, tmp_path, sms):
    bootstrap = kafka_broker.bootstrap
    # 2,400 messages: the shipped forgetting decays every 1,000 labeled events, so corrections
    # take back what was learned one or two epochs earlier
    stream = corrected_stream(sms[400:2800], "s", seed=7, take_backs=20, duplicates=30, repeated_corrections=10)
    # and two labeled events the model refuses (an overflowing feature value): dead-lettered,
    # nothing else refused (tests/test_lessons_apply.py pins the epochs around a refusal)
    refused = [{"id": f"refused{n}", "text": "x", "features": {"x": 1e308}, "label": "ham"} for n in range(2)]
    events = stream.events[:990] + refused[:1] + stream.events[990:1985] + refused[1:] + stream.events[1985:]
    topics = Topics.new("shipped")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    produce(bootstrap, to_messages(topics.labeled, events))

    port = free_port()
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               checkpoint={"every_events": 300, "interval_s": 0.5}, kafka={"poll_max_records": 200},
                               worker={"metrics_port": port})
    config = load_config(config_path)
    shipped = load_config(Path(__file__).resolve().parents[2] / "configs" / "spam.toml")
    assert config.training == shipped.training and config.training["mode"] == "thick_threshold"
    assert config.model == shipped.model and config.model["half_life"] == 10_000
    assert config.remember_ids == DEFAULT_REMEMBER_IDS

    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=None)
    try:
        wait_for_checkpoint(tmp_path / "checkpoints", topics.labeled, len(events), port, worker)
        outcomes, learned = scrape(port)
        stop(worker)
    finally:
        worker.kill()

    reference = contender(config_path)
    take_backs = watch_take_backs(reference)
    replayed(reference, events)
    summary = latest_summary(tmp_path / "checkpoints")
    assert summary.digest == digest_of(reference)
    assert summary.offsets == {(topics.labeled, 0): len(events)}
    assert learned_ids(tmp_path / "checkpoints") == reference.lessons.memory
    assert +outcomes == +reference.lessons.outcomes and learned == reference.learned
    dead = read_topic(bootstrap, topics.dead_letters)
    assert sorted((record.key, dict(record.headers)["stream-nb-reason"]) for record in dead) == [
        (b"refused0", b"rejected_by_model"), (b"refused1", b"rejected_by_model")]  # no take-back refused
    assert reference.refused == {"rejected_by_model": 2}
    # what makes this run more than the plain one: take-backs of what decay has reduced
    model = model_from_state(CheckpointStore(tmp_path / "checkpoints").load_latest().model_state)
    assert model.forgetting_epoch == 2
    assert {entry.learned_at for _, entry in reference.lessons.memory.items()} == {0, 1, 2}
    epochs_back = Counter(now - then for then, now in take_backs)
    assert epochs_back[1] >= 20 and epochs_back[2] >= 10 and epochs_back.total() == outcomes["corrected"], epochs_back
    assert outcomes["corrected"] >= 100 and outcomes["duplicate"] >= 30
    assert outcomes.total() == len(events) - 2
    print(f"\noutcomes {dict(outcomes)}, learned {learned:g} of {len(events)} labeled events; "
          f"take-backs by epochs since learned {dict(epochs_back)}")

    # a take-back that ignored the epoch its event was learned at (decay not applied to what
    # is taken back) ends elsewhere
    careless = contender(config_path)
    watch_take_backs(careless, instead=lambda model: model.forgetting_epoch)
    assert digest_of(replayed(careless, events)) != summary.digest


# ---------------------------------------------------------------------------------------------
# 3. SIGKILL while corrections flow: the restart ends exact, its memory restored


def test_sigkill_while_corrections_flow_restores_the_learned_ids(kafka_broker, tmp_path, sms):
    bootstrap = kafka_broker.bootstrap
    stream = corrected_stream(sms[2800:5200], "k", seed=31, take_backs=10, duplicates=30, repeated_corrections=8,
                              held_back=10, held_back_within=800)
    topics = Topics.new("killcorr")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    checkpoints, port = tmp_path / "checkpoints", free_port()
    settings = {"checkpoint": {"every_events": 200, "interval_s": 0.5}, "kafka": {"poll_max_records": 100}}
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, checkpoints,
                               worker={"metrics_port": port}, **settings)
    log_path = tmp_path / "worker.log"
    # The stream flows in while the worker learns, 100 events at a time, 50 ms apart; the part
    # from offset 1,800 on waits for the kill, so the kill falls mid-stream however fast the
    # worker, and events keep coming while no worker runs.
    kill_done = threading.Event()
    flowing = threading.Thread(target=produce_flowing,
                               args=(bootstrap, to_messages(topics.labeled, stream.events), 1_800, kill_done))

    worker = WorkerProcess(config_path, log_path, stop_when_idle=None)
    try:
        flowing.start()
        wait_until(lambda: checkpointed(checkpoints, topics.labeled) >= 1_200, 120,
                   "a checkpoint past labeled offset 1200", worker)
        time.sleep(random.Random(5).uniform(0.0, 0.15))
        assert worker.alive()
        worker.kill()
    finally:
        worker.kill()
        kill_done.set()
        flowing.join(120)
    assert end_offset(bootstrap, topics.labeled) == len(stream.events)
    restored = CheckpointStore(checkpoints).load_latest()  # what the restart restores
    at_kill = restored.offsets[(topics.labeled, 0)]
    assert 1_200 <= at_kill <= 1_800, at_kill
    before = LearnedIds.from_state(restored.extra["learned_ids"])

    # After the restart: duplicates of ids learned before the kill (each with no event after the
    # checkpoint, so the memory still holds them as restored), and the corrections held back
    last_event_at = {event["id"]: offset for offset, event in enumerate(stream.events)}
    quiet = [event_id for event_id, _ in before.items()
             if last_event_at[event_id] < at_kill and event_id not in stream.held_back]
    rng = random.Random(8)
    later = [{"id": event_id, "text": stream.truth[event_id][1], "label": before.get(event_id).label}
             for event_id in rng.sample(quiet, 20)]
    expected_later = Counter({"duplicate": 20})
    for event_id in stream.held_back:
        label, text = stream.truth[event_id]
        later.append({"id": event_id, "text": text, "label": label, "unlearn": OTHER[label]})
        remembered = before.get(event_id)  # learned as the wrong label, or skipped by the thick threshold
        expected_later["corrected" if remembered and remembered.label == OTHER[label] else "correction_of_unknown"] += 1
    assert expected_later["corrected"] >= 5
    everything = stream.events + later

    worker = WorkerProcess(config_path, log_path, stop_when_idle=None)
    try:
        wait_for_checkpoint(checkpoints, topics.labeled, len(stream.events), port, worker)
        outcomes_before, learned_before = scrape(port)
        produce(bootstrap, to_messages(topics.labeled, later))
        wait_for_checkpoint(checkpoints, topics.labeled, len(everything), port, worker)
        outcomes_after, learned_after = scrape(port)
        stop(worker)
    finally:
        worker.kill()
    assert log_path.read_text().count(f"restored checkpoint {restored.id}") == 1
    # none of the duplicates learned again; only corrections may learn
    assert +(outcomes_after - outcomes_before) == expected_later
    assert learned_after - learned_before <= expected_later["corrected"] + expected_later["correction_of_unknown"]
    print(f"\nkilled after a checkpoint at labeled offset {at_kill} of {len(stream.events)} ({len(before)} ids "
          f"remembered); after the restart {dict(outcomes_after - outcomes_before)}, "
          f"{learned_after - learned_before:g} learned")

    # The uninterrupted run: the same input, its own outputs, group and checkpoints.
    uninterrupted_path = write_config(tmp_path / "uninterrupted.toml", bootstrap, topics.outputs("uninterrupted"),
                                      tmp_path / "uninterrupted", **settings)
    uninterrupted = WorkerProcess(uninterrupted_path, tmp_path / "uninterrupted.log", stop_when_idle=2)
    try:
        assert uninterrupted.wait(120) == 0, uninterrupted.log_tail()
    finally:
        uninterrupted.kill()
    reference = replayed(contender(config_path), everything)
    killed, whole = latest_summary(checkpoints), latest_summary(tmp_path / "uninterrupted")
    assert killed.digest == whole.digest == digest_of(reference)
    assert killed.offsets == whole.offsets == {(topics.labeled, 0): len(everything)}
    assert learned_ids(checkpoints) == learned_ids(tmp_path / "uninterrupted") == reference.lessons.memory
    assert read_topic(bootstrap, topics.dead_letters) == []

    # had the restart lost the memory, the corrections after it would take nothing back
    forgetful = replayed(contender(config_path), stream.events[:at_kill])
    forgetful.lessons = LabeledLessons(LearnedIds(DEFAULT_REMEMBER_IDS))
    assert digest_of(replayed(forgetful, everything[at_kill:])) != killed.digest


# ---------------------------------------------------------------------------------------------
# 4. Replicas and snapshots: a worker that bootstraps from another's snapshot takes its memory


def test_a_worker_bootstrapped_from_a_snapshot_corrects_what_the_snapshot_learned(kafka_broker, tmp_path, sms):
    """configs/spam.toml's settings. A first worker learns the first part of the stream and
    publishes snapshots (model, offsets and learned ids together); the rest of the stream then
    corrects and re-sends ids learned in the first part. A late worker with an empty checkpoint
    directory bootstraps from the snapshot and a replica restarts from its own checkpoint: both
    end in the state, memory and counters replay gives for the whole stream, which they can
    only reach with the snapshot's memory (without it the corrections would take nothing back)."""
    bootstrap = kafka_broker.bootstrap
    stream = corrected_stream(sms[2800:3800], "r", seed=11, take_backs=10, duplicates=20, repeated_corrections=5)
    cut = [i for i, kind in enumerate(stream.kinds) if kind == "message"][600]  # before the 601st message
    later = stream.events[cut:]
    assert sum(1 for event in later if event.get("unlearn") is not None) >= 30  # the snapshot's ids corrected
    topics = Topics.new("replica")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    produce(bootstrap, to_messages(topics.labeled, stream.events[:cut]))
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "unused",
                               checkpoint={"snapshot_topic": f"{topics.labeled}-snapshots", "snapshot_interval_s": 0.5})

    def run(name: str) -> WorkerProcess:
        return WorkerProcess(config_path, tmp_path / f"{name}.log", stop_when_idle=3,
                             overrides=(f'worker.instance_id="{name}"', f'checkpoint.dir="{tmp_path / name}"'))

    first = run("first")
    assert first.wait(120) == 0, first.log_tail()
    assert "snapshot with" in (tmp_path / "first.log").read_text()
    produce(bootstrap, to_messages(topics.labeled, later))
    late, replica = run("late"), run("first")  # the replica goes on from its own checkpoint
    assert late.wait(120) == 0, late.log_tail()
    assert replica.wait(120) == 0, replica.log_tail()
    assert "bootstrapped from snapshot" in (tmp_path / "late.log").read_text()

    reference = replayed(contender(config_path), stream.events)
    for name in ("late", "first"):
        summary = latest_summary(tmp_path / name)
        assert summary.offsets == {(topics.labeled, 0): len(stream.events)}, name
        assert summary.digest == digest_of(reference), name
        assert learned_ids(tmp_path / name) == reference.lessons.memory, name
    assert reference.lessons.outcomes["corrected"] >= 30
    # what the snapshot's memory is worth: the later part replayed on the snapshot's model
    # with an empty memory ends elsewhere
    forgetful = replayed(contender(config_path), stream.events[:cut])
    forgetful.lessons.memory = LearnedIds(DEFAULT_REMEMBER_IDS)
    assert digest_of(replayed(forgetful, later)) != digest_of(reference)
