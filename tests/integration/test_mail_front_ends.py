"""The mail front ends (stream_nb.verdicts) with a real worker on a real broker: `stream-nb learn`
teaches and corrects from a pipe (through the shipped Dovecot pipe script), `stream-nb filter`
judges from the worker's checkpoint and gives each message the verdict the worker's prediction
of it carries."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stream_nb.checkpoint import CheckpointStore
from stream_nb.mail.identity import mail_id

from corpora import load_spamassassin_2003
from worker_support import (
    REPO_ROOT,
    Topics,
    WorkerProcess,
    create_topics,
    hermetic_environment,
    read_topic,
    write_config,
)

pytestmark = pytest.mark.kafka

MAIL_TOML = REPO_ROOT / "configs" / "mail.toml"


def stream_nb(*args: str, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stream_nb.cli", *args], input=stdin, capture_output=True,
                          timeout=120, cwd=REPO_ROOT, env=hermetic_environment())


def sieve_pipe(config_path, *args: str, stdin: bytes) -> subprocess.CompletedProcess:
    """examples/dovecot/sieve-pipe/stream-nb-learn, as Dovecot's sieve pipe runs it (this
    checkout's stream-nb on the PATH, the configuration in STREAM_NB_CONFIG)."""
    env = hermetic_environment()
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}", STREAM_NB_CONFIG=str(config_path))
    return subprocess.run([str(REPO_ROOT / "examples" / "dovecot" / "sieve-pipe" / "stream-nb-learn"), *args],
                          input=stdin, capture_output=True, timeout=120, cwd=REPO_ROOT, env=env)


@pytest.fixture(scope="module")
def corpus() -> list[tuple[bytes, str]]:
    """(raw bytes, label) of 260 SpamAssassin 2003 messages in a fixed shuffled order."""
    messages = [(data, "spam" if folder.startswith("spam") else "ham") for folder, data in load_spamassassin_2003()]
    random.Random(11).shuffle(messages)
    return messages[:260]


def mail_worker_config(path, bootstrap: str, topics: Topics, checkpoints) -> object:
    """configs/mail.toml as shipped (model, features, training, evaluation, worker) on raw-mail
    topics of this test."""
    shipped = tomllib.loads(MAIL_TOML.read_text())
    tables = {name: shipped[name] for name in ("model", "features", "training", "evaluation")}
    return write_config(path, bootstrap, topics, checkpoints, kafka={"value_format": "mail"},
                        worker={**shipped["worker"], "labels_first_wait_s": 10.0}, replace=tables)


def headers_of(output: bytes) -> dict[str, str]:
    head = output.split(b"\n\n", 1)[0].decode("ascii").replace("\n\t", " ")
    return dict(line.split(": ", 1) for line in head.split("\n") if line.startswith("X-Spam-"))


def test_learn_teaches_and_corrects_and_filter_gives_the_workers_verdict(kafka_broker, tmp_path, corpus):
    """200 messages taught (the last 4, two of each class, one by one through `learn --spam/--ham`,
    a pipe each, as IMAPSieve runs it; the others produced as a folder publish sends them), 12
    others asked (5 spam, 7 ham) through the unlabeled topic; the worker learns and predicts, and
    stops idle with a checkpoint. `filter -p` of each of the 12 with that checkpoint gives the
    worker's prediction: X-Spam-Score its score, the status its verdict, and the exit status with
    it. Then a spam message is moved out of Junk (`learn --ham --unlearn spam`): the worker,
    started again, takes it back and relearns it, and the filter's score of it falls."""
    from kafka import KafkaProducer

    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("front-ends")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    config_path = mail_worker_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints")
    # a process each: a pipe or a filter costs its start-up and, for a filter, the checkpoint's
    # load (the suite's slowest minutes were 24 filters and 10 pipes)
    taught, asked = corpus[:200], corpus[200:212]
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for raw, label in taught[:196]:
        producer.send(topics.labeled, value=raw, key=mail_id(raw).encode(), headers=[("label", label.encode())])
    producer.flush()
    for raw, label in taught[196:]:  # through the shipped Dovecot pipe script, as the sieve scripts call it
        done = sieve_pipe(config_path, f"--{label}", stdin=raw)
        assert done.returncode == 0, done.stderr
    records = read_topic(bootstrap, topics.labeled)
    assert [(record.value, dict(record.headers)["label"].decode()) for record in records] == taught
    assert [record.key.decode() for record in records] == [mail_id(raw) for raw, _ in taught]
    for raw, _ in asked:
        producer.send(topics.unlabeled, value=raw, key=mail_id(raw).encode())
    producer.flush()
    producer.close()

    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=3)
    assert worker.wait(240) == 0, worker.log_tail()
    predictions = {json.loads(record.value)["id"]: json.loads(record.value)
                   for record in read_topic(bootstrap, topics.predictions)}
    assert len(predictions) == len(asked)
    # labels first: every prediction by the model of all 200 labels, the one the final checkpoint holds
    assert {json.dumps(p["model"]["labeled_offsets"]) for p in predictions.values()} == \
        {json.dumps([[topics.labeled, 0, 200]])}
    statuses = {"spam": ("Yes", 0), "ham": ("No", 1), "unsure": ("Unsure", 2)}
    right = 0
    for raw, label in asked:
        prediction = predictions[mail_id(raw)]
        done = stream_nb("filter", "--config", str(config_path), "-p", stdin=raw)
        headers = headers_of(done.stdout)
        status, code = statuses[prediction["verdict"]]
        assert done.returncode == code, (done.returncode, prediction, done.stderr)
        assert headers["X-Spam-Score"] == f"{prediction['score']:.3f}"
        assert headers["X-Spam-Status"].startswith(f"{status}, score={prediction['score']:.3f} "
                                                   f"verdict={prediction['verdict']} clues=")
        assert done.stdout.split(b"\n\n", 1)[1] == raw.split(b"\n\n", 1)[1]
        right += prediction["verdict"] == label
    assert right >= 10, right  # 200 messages learned tell the 12 apart: a figure, not only that it ran

    moved = next(raw for raw, label in taught if label == "spam")
    before = float(headers_of(stream_nb("filter", "--config", str(config_path), "-p", stdin=moved).stdout)
                   ["X-Spam-Score"])
    done = sieve_pipe(config_path, "--ham", "--unlearn", "spam", stdin=moved)  # what learn-ham.sieve pipes
    assert done.returncode == 0, done.stderr
    last = read_topic(bootstrap, topics.labeled)[-1]
    assert dict(last.headers) == {"label": b"ham", "unlearn": b"spam"} and last.value == moved
    worker = WorkerProcess(config_path, tmp_path / "worker-2.log", stop_when_idle=3)
    assert worker.wait(240) == 0, worker.log_tail()
    checkpoint = CheckpointStore(tmp_path / "checkpoints").load_latest()
    remembered = dict(zip(checkpoint.extra["learned_ids"]["ids"], checkpoint.extra["learned_ids"]["labels"]))
    assert remembered[mail_id(moved)] == "ham"
    after = float(headers_of(stream_nb("filter", "--config", str(config_path), "-p", stdin=moved).stdout)
                  ["X-Spam-Score"])
    assert after < before, (before, after)


def test_learn_refuses_what_the_worker_would_dead_letter_and_sends_nothing(kafka_broker, tmp_path):
    topics = Topics.new("front-ends-refused")
    create_topics(kafka_broker.bootstrap, [topics.labeled, topics.unlabeled])
    config_path = mail_worker_config(tmp_path / "worker.toml", kafka_broker.bootstrap, topics, tmp_path / "c")
    message = b"Message-ID: <a@b>\nSubject: s\n\nbody\n"
    done = stream_nb("learn", "--config", str(config_path), "--label", "phishing", stdin=message)
    assert done.returncode == 2 and "not one of the configuration's model.classes (ham, spam)" in done.stderr.decode()
    done = stream_nb("learn", "--config", str(config_path), "--spam", "--unlearn", "spam", stdin=message)
    assert done.returncode == 2 and "nothing to correct" in done.stderr.decode()
    done = stream_nb("learn", "--config", str(config_path), "--forget", stdin=message)
    assert done.returncode == 2 and "--unlearn CLASS" in done.stderr.decode()
    assert read_topic(kafka_broker.bootstrap, topics.labeled) == []
