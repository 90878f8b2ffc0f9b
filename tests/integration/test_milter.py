"""`stream-nb milter` in a real Postfix (tests/integration/postfix_support.py) with mail sent by
swaks, its replica following a real broker: verdict headers on delivered mail, 5xx for spam over
the threshold, Postfix's milter_default_action when the milter is killed (no accepted message
lost), a restart from the snapshot topic with the same verdicts, the worker's prediction of each
message equal to the milter's verdict, and a correction that reaches the replica."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from postfix_support import Postfix, free_port, require_postfix

from stream_nb.mail.identity import mail_id
from stream_nb.verdicts.headers import status_of, verdict_headers

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
REJECT_ABOVE = 3.0  # [milter] threshold of the deployment test: a score the corpus has on both sides


@pytest.fixture(scope="module")
def corpus() -> list[tuple[bytes, str]]:
    """(raw bytes, label) of SpamAssassin 2003 messages that carry a Message-ID (Postfix would
    add one to the others, and the tests name messages by it), in a fixed shuffled order."""
    messages = [(raw, "spam" if folder.startswith("spam") else "ham") for folder, raw in load_spamassassin_2003()
                if re.search(rb"(?im)^message-id:[ \t]*<[^>\s]+>", raw.split(b"\n\n", 1)[0]) and len(raw) < 200_000]
    random.Random(5).shuffle(messages)
    return messages[:300]


class MilterProcess:
    """`python -m stream_nb.cli milter --config FILE`, its log in `log_path`."""

    def __init__(self, config_path: Path, log_path: Path, *overrides: str) -> None:
        self.log_path = log_path
        command = [sys.executable, "-m", "stream_nb.cli", "milter", "--config", str(config_path)]
        for override in overrides:
            command += ["--set", override]
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT,
                                            env={**hermetic_environment(), "PYTHONUNBUFFERED": "1"})
        self.metrics_port = int(tomllib.loads(config_path.read_text())["milter"]["metrics_port"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> None:
        """Listening, and /readyz 200: the replica has a model and stood at the log's end."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()[-3000:]
            if "milter listening on" in self.log():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=5) as answer:
                        if answer.status == 200:
                            return
                except (urllib.error.URLError, ConnectionError):
                    pass
            time.sleep(0.2)
        raise AssertionError(f"the milter is not ready within {timeout} s:\n{self.log()[-3000:]}")

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
        for line in text.splitlines():
            if line.startswith(f"{name}{{{wanted}}} " if labels else f"{name} "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


def milter_config(path: Path, bootstrap: str, topics: Topics, checkpoints: Path, **milter) -> Path:
    """configs/mail.toml as shipped (model, features, training, evaluation, worker) on raw-mail
    topics of this test, with a [milter] on free loopback ports and a snapshot topic."""
    shipped = tomllib.loads(MAIL_TOML.read_text())
    tables = {name: shipped[name] for name in ("model", "features", "training", "evaluation")}
    tables["milter"] = {"listen": f"inet:127.0.0.1:{free_port()}", "metrics_port": free_port(), **milter}
    return write_config(path, bootstrap, topics, checkpoints, kafka={"value_format": "mail"},
                        checkpoint={"snapshot_topic": f"{topics.labeled}-snapshots", "snapshot_interval_s": 1.0},
                        worker={**shipped["worker"], "labels_first_wait_s": 10.0}, replace=tables)


def teach(bootstrap: str, topic: str, messages: list[tuple[bytes, str]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000)
    for raw, label in messages:
        producer.send(topic, value=raw, key=mail_id(raw).encode(), headers=[("label", label.encode())])
    producer.flush()
    producer.close()


def verdict_of(delivered: bytes) -> tuple[str, str, list[str]]:
    """(its id, as mail_id gives it on every route: the Message-ID; its header block unfolded;
    the X-Spam-* header lines of it, in order) of a delivered message."""
    head = delivered.split(b"\n\n", 1)[0].decode("utf-8", "replace")
    unfolded = re.sub(r"\r?\n[ \t]", " ", head)
    spam = [line for line in unfolded.split("\n") if line.lower().startswith("x-spam-")]
    return mail_id(delivered), unfolded, spam


def send_all(postfix: Postfix, messages: list[bytes], to: str, threads: int = 1, on_answer=None) -> list[int]:
    """Each message through swaks, `threads` at a time; the SMTP code of each."""
    codes: list[int | None] = [None] * len(messages)
    lock = threading.Lock()
    answered = [0]

    def run(start: int) -> None:
        for i in range(start, len(messages), threads):
            code, transcript = postfix.send(messages[i], to=to)
            assert code, transcript
            with lock:
                codes[i] = code
                answered[0] += 1
                if on_answer is not None:
                    on_answer(answered[0])

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return codes


def test_the_milter_tags_and_rejects_as_the_worker_predicts_and_survives_a_kill(kafka_broker, tmp_path, corpus):
    """200 messages taught; 40 others sent through Postfix to ann with the milter (action reject
    over REJECT_ABOVE, publish on): each answered 250 is delivered with its verdict headers, each
    over the threshold refused 550 at end of data. The worker then predicts what the milter
    published: every prediction's headers are the delivered ones, bit for bit, and its score
    is over the threshold exactly for the refused. The milter is killed (-9) in the middle of
    the same 40 sent to bob: Postfix answers 451 (milter_default_action = tempfail) and every
    message answered 250 is in bob's Maildir. Restarted with no checkpoint directory, it loads
    the worker's snapshot; the messages refused for the kill, sent again, get the verdicts ann's
    copies got."""
    require_postfix()
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("milter")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    config = milter_config(tmp_path / "mail.toml", bootstrap, topics, tmp_path / "checkpoints", action="reject",
                           threshold=REJECT_ABOVE, publish=True)
    teach(bootstrap, topics.labeled, corpus[:200])
    asked = [raw for raw, _ in corpus[200:240]]
    milter = MilterProcess(config, tmp_path / "milter.log")
    postfix = Postfix(tomllib.loads(config.read_text())["milter"]["listen"], default_action="tempfail").start()
    try:
        milter.wait_ready()
        assert "learning the labeled log from its beginning" in milter.log()
        codes = send_all(postfix, asked, "ann@example.test")
        assert set(codes) <= {250, 550}, codes
        delivered = {verdict_of(message)[0]: verdict_of(message)[2] for message in
                     postfix.wait_delivered(codes.count(250), "ann")}
        assert len(delivered) == codes.count(250) >= 10 and codes.count(550) >= 3, codes  # both sides tested
        assert all(len(headers) >= 2 for headers in delivered.values())
        assert milter.metric("stream_nb_milter_messages_total", action="reject") == codes.count(550)

        # the worker's prediction of each message the milter published is the milter's verdict
        worker = WorkerProcess(config, tmp_path / "worker.log", stop_when_idle=3)
        assert worker.wait(240) == 0, worker.log_tail()
        predictions = {json.loads(r.value)["id"]: json.loads(r.value) for r in read_topic(bootstrap, topics.predictions)}
        assert len(predictions) == len(asked)
        for raw, code in zip(asked, codes):
            prediction = predictions[mail_id(raw)]
            assert prediction["model"]["labeled_offsets"] == [[topics.labeled, 0, 200]]
            assert (prediction["score"] >= REJECT_ABOVE) == (code == 550), (prediction["score"], code)
            if code == 250:
                status = status_of(prediction["verdict"], prediction["label"], "spam")
                expected = verdict_headers(status, prediction["score"], prediction["verdict"],
                                           [tuple(clue) for clue in prediction["clues"]])
                assert delivered[mail_id(raw)] == [f"{name}: {value}" for name, value in expected]

        # `filter --from-snapshot` (a delivery host with no worker) judges by the worker's snapshot: the same
        # verdict of the message as the milter had it (Postfix's Received line on top: what it published)
        as_judged = {mail_id(record.value): record.value for record in read_topic(bootstrap, topics.unlabeled)}
        for raw in [raw for raw, code in zip(asked, codes) if code == 250][:3]:
            done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "filter", "--config", str(config),
                                   "--from-snapshot", "-v"], input=as_judged[mail_id(raw)], capture_output=True,
                                  timeout=120, cwd=REPO_ROOT, env=hermetic_environment())
            assert done.stdout.decode().splitlines() == delivered[mail_id(raw)], done.stderr

        # killed mid-stream: Postfix's milter_default_action, and no message answered 250 lost
        killed = threading.Event()

        def kill_after_ten(answered: int) -> None:
            if answered == 10 and not killed.is_set():
                killed.set()
                milter.kill()

        codes_bob = send_all(postfix, asked, "bob@example.test", threads=3, on_answer=kill_after_ten)
        assert killed.is_set()
        assert set(codes_bob) <= {250, 550, 451}, codes_bob
        refused_for_kill = [raw for raw, code in zip(asked, codes_bob) if code == 451]
        assert len(refused_for_kill) >= 20, codes_bob
        first = postfix.wait_delivered(codes_bob.count(250), "bob")
        time.sleep(1)
        assert len(postfix.delivered("bob")) == codes_bob.count(250)  # each accepted one, once

        # restarted from the snapshot topic (no checkpoint directory): the same verdicts
        milter = MilterProcess(config, tmp_path / "milter-2.log", f'checkpoint.dir="{tmp_path / "none"}"')
        milter.wait_ready()
        assert re.search(r"bootstrapped from snapshot \S+ on \S+-snapshots", milter.log()), milter.log()[-2000:]
        again = send_all(postfix, refused_for_kill, "bob@example.test")
        expected_codes = dict(zip(map(mail_id, asked), codes))
        assert again == [expected_codes[mail_id(raw)] for raw in refused_for_kill]
        bob = postfix.wait_delivered(len(first) + again.count(250), "bob")
        for message in bob:
            message_id, _, headers = verdict_of(message)
            assert headers == delivered[message_id], message_id
    finally:
        milter.stop()
        postfix.stop()


def test_a_correction_reaches_the_replica_and_changes_the_next_verdict(kafka_broker, tmp_path, corpus):
    """A ham message the milter tags No is taught as spam with `stream-nb learn --spam` (what
    IMAPSieve runs when a user moves it into Junk): once the replica has read that record, the
    same message gets a higher score and the Yes status."""
    require_postfix()
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("milter-learn")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    config = milter_config(tmp_path / "mail.toml", bootstrap, topics, tmp_path / "checkpoints")
    teach(bootstrap, topics.labeled, corpus[:120])
    milter = MilterProcess(config, tmp_path / "milter.log")
    postfix = Postfix(tomllib.loads(config.read_text())["milter"]["listen"], users=("ann", "bob", "carol")).start()
    try:
        milter.wait_ready()
        # a sender's own verdict headers are taken out (each by its occurrence), ours go in
        forged = b"X-Spam-Status: No, score=-100 forged\nX-Spam-Flag: NO\nx-spam-score: -100\n" + corpus[239][0]
        assert send_all(postfix, [forged], "carol@example.test") == [250]
        _, head, spam_lines = verdict_of(postfix.wait_delivered(1, "carol")[0])
        assert "-100" not in head and [line.split(":")[0] for line in spam_lines] in (
            ["X-Spam-Score", "X-Spam-Status"], ["X-Spam-Flag", "X-Spam-Score", "X-Spam-Status"]), spam_lines
        hams = [raw for raw, label in corpus[240:300] if label == "ham"][:5]
        codes = send_all(postfix, hams, "ann@example.test")
        assert codes == [250] * len(hams)
        before = {verdict_of(m)[0]: verdict_of(m)[2] for m in postfix.wait_delivered(len(hams), "ann")}
        message = next(raw for raw in hams if any(h.startswith("X-Spam-Status: No") for h in before[mail_id(raw)]))
        score_before = float(next(h for h in before[mail_id(message)] if h.startswith("X-Spam-Score")).split()[1])
        read_before = milter.metric("stream_nb_events_consumed_total", topic=topics.labeled)
        done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "learn", "--config", str(config), "--spam"],
                              input=message, capture_output=True, timeout=120, cwd=REPO_ROOT, env=hermetic_environment())
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 60
        while milter.metric("stream_nb_events_consumed_total", topic=topics.labeled) < read_before + 1:
            assert time.monotonic() < deadline, milter.log()[-2000:]
            time.sleep(0.2)
        assert send_all(postfix, [message], "bob@example.test") == [250]
        after = verdict_of(postfix.wait_delivered(1, "bob")[0])[2]
        score_after = float(next(h for h in after if h.startswith("X-Spam-Score")).split()[1])
        assert score_after > score_before, (score_before, score_after)
        assert after[0] == "X-Spam-Flag: YES" and any(h.startswith("X-Spam-Status: Yes") for h in after), after
    finally:
        milter.stop()
        postfix.stop()


def test_per_user_verdicts_are_each_recipients_model_as_the_worker_predicts(kafka_broker, tmp_path, corpus):
    """configs/personal.toml's per-user models on raw mail keyed by X-Original-To, two users on
    two partitions: ann taught her 100 messages as labeled, bob his 100 with spam and ham swapped
    (a user whose "spam" is others' ham). The worker learns them (the labeled order, the keys'
    changelog, a checkpoint); the milter's replica restores every key. 12 messages sent to ann and
    the same 12 to bob get each user's verdict: the worker's prediction of what the milter published
    (with X-Original-To on top, keyed by the mailbox) carries the same headers, and bob's
    scores differ from ann's."""
    require_postfix()
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("milter-personal")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled], partitions=2)
    shipped = tomllib.loads(MAIL_TOML.read_text())
    personal = tomllib.loads((REPO_ROOT / "configs" / "personal.toml").read_text())
    tables = {name: shipped[name] for name in ("model", "features", "training", "evaluation")}
    tables["personal"] = personal["personal"]
    tables["views"] = shipped["views"]  # personal.toml's: each of mail.toml's views has per-user counts
    tables["milter"] = {"listen": f"inet:127.0.0.1:{free_port()}", "metrics_port": free_port(), "publish": True}
    config = write_config(tmp_path / "personal.toml", bootstrap, topics, tmp_path / "checkpoints",
                          kafka={"value_format": "mail", "mail_key_header": "X-Original-To", "partitions": 2},
                          worker={**shipped["worker"], "labels_first_wait_s": 10.0}, replace=tables)
    swapped = {"spam": "ham", "ham": "spam"}
    taught = [("ann@example.test", raw, label) for raw, label in corpus[:100]]
    taught += [("bob@example.test", raw, swapped[label]) for raw, label in corpus[100:200]]
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000)
    for mailbox, raw, label in taught:
        producer.send(topics.labeled, value=f"X-Original-To: {mailbox}\n".encode() + raw, key=mailbox.encode(),
                      headers=[("label", label.encode())])
    producer.flush()
    producer.close()
    worker = WorkerProcess(config, tmp_path / "worker.log", stop_when_idle=3)
    assert worker.wait(240) == 0, worker.log_tail()

    milter = MilterProcess(config, tmp_path / "milter.log")
    postfix = Postfix(tomllib.loads(config.read_text())["milter"]["listen"]).start()
    try:
        milter.wait_ready()
        restored = re.findall(r"keyed state of partition \d restored from \S+ \(\d+ records, (\d+) keys\)", milter.log())
        assert len(restored) == 2 and sum(map(int, restored)) == 2, milter.log()[-3000:]  # every partition, both users
        asked = [raw for raw, _ in corpus[240:252]]
        for user in ("ann", "bob"):
            assert send_all(postfix, asked, f"{user}@example.test") == [250] * len(asked)
        delivered = {user: {verdict_of(m)[0]: verdict_of(m)[2] for m in postfix.wait_delivered(len(asked), user)}
                     for user in ("ann", "bob")}
    finally:
        milter.stop()
        postfix.stop()

    worker = WorkerProcess(config, tmp_path / "worker-2.log", stop_when_idle=3)
    assert worker.wait(240) == 0, worker.log_tail()
    published = {(r.partition, r.offset): r.value for r in read_topic(bootstrap, topics.unlabeled)}
    assert len(published) == 2 * len(asked)
    differ = 0
    for record in read_topic(bootstrap, topics.predictions):
        prediction = json.loads(record.value)
        value = published[(prediction["source"]["partition"], prediction["source"]["offset"])]
        user = value.split(b"\r\n", 1)[0].decode().split(": ")[1].split("@")[0]  # the milter's X-Original-To
        status = status_of(prediction["verdict"], prediction["label"], "spam")
        expected = verdict_headers(status, prediction["score"], prediction["verdict"],
                                   [tuple(clue) for clue in prediction["clues"]])
        assert delivered[user][prediction["id"]] == [f"{name}: {value}" for name, value in expected], user
    for message_id, headers in delivered["ann"].items():
        differ += headers != delivered["bob"][message_id]
    assert differ >= len(asked) // 2, differ  # each user's own model, not one global verdict
