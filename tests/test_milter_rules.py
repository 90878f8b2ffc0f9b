"""The milter's decisions without an MTA (stream_nb.verdicts.milter): [milter] as configured
(action, threshold, no_model, reply), the message as a milter hands it over, the listen address;
its decisions by a model learned from SpamAssassin mail under configs/mail.toml as shipped. The
milter in a real Postfix: tests/integration/test_milter.py."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from stream_nb.config import ConfigError, load_config
from stream_nb.replay.prequential import Contender, replay_contenders
from stream_nb.verdicts.filter import MessageJudge
from stream_nb.verdicts.milter import MilterVerdicts, parse_listen, reassembled
from stream_nb.worker.metrics import WorkerMetrics

from corpora import load_spamassassin_2003

MAIL_TOML = Path(__file__).resolve().parents[1] / "configs" / "mail.toml"


@pytest.fixture(scope="module")
def learned():
    """configs/mail.toml's model learned from 600 SpamAssassin messages; 40 held out."""
    config = load_config(MAIL_TOML)
    messages = [(folder, data) for folder, data in load_spamassassin_2003() if folder in ("spam-2", "easy-ham-2")]
    random.Random(7).shuffle(messages)
    contender = Contender.of("mail.toml", config)  # learned as the worker learns: by its regime, view by view
    replay_contenders([{"id": f"m{i}", "mail": data, "label": "spam" if folder == "spam-2" else "ham"}
                       for i, (folder, data) in enumerate(messages[:600])], [contender], batch_size=100)
    return contender.model, [data for _, data in messages[600:640]]


def verdicts(model, *settings: str) -> MilterVerdicts:
    config = load_config(MAIL_TOML, list(settings))
    replica = SimpleNamespace(lock=threading.RLock(), model=model, has_model=bool(model.classes_), keyed=None,
                              telemetry=WorkerMetrics())
    return MilterVerdicts(config, replica)


def test_tag_accepts_every_message_with_the_filters_headers(learned):
    model, held_out = learned
    tag = verdicts(model)
    judge = MessageJudge(load_config(MAIL_TOML), model)
    statuses = set()
    for message in held_out:
        decision = tag.decide(message)
        status, score, headers = judge.verdict(message)
        assert (decision.action, decision.headers, decision.status, decision.score) == ("accept", headers, status, score)
        statuses.add(status)
    assert statuses >= {"Yes", "No"}  # both sides of the corpus seen


@pytest.mark.parametrize("action, code", [("reject", "550 5.7.1"), ("tempfail", "451 4.7.1")])
def test_a_threshold_refuses_exactly_the_messages_scored_at_or_above_it(learned, action, code):
    model, held_out = learned
    scores = [verdicts(model).decide(message).score for message in held_out]
    threshold = sorted(scores)[len(scores) // 2]  # half the messages at or above it
    refusing = verdicts(model, f'milter.action="{action}"', f"milter.threshold={threshold!r}")
    for message, score in zip(held_out, scores):
        decision = refusing.decide(message)
        if score >= threshold:
            assert (decision.action, decision.reply) == (action, f"{code} Message refused as spam")
        else:
            assert decision.action == "accept" and decision.headers
    assert refusing.decided.labels(action)._value.get() == sum(score >= threshold for score in scores)


def test_without_a_threshold_the_status_yes_is_spam(learned):
    model, held_out = learned
    refusing = verdicts(model, 'milter.action="reject"', 'milter.reply="5.7.0 go away"')
    for message in held_out:
        decision = refusing.decide(message)
        assert (decision.action == "reject") == (decision.status == "Yes")
        assert decision.reply in (None, "550 5.7.0 go away")


def test_before_any_model_the_no_model_policy_answers(learned):
    empty = load_config(MAIL_TOML).build_model()
    message = learned[1][0]
    assert verdicts(empty).decide(message) == verdicts(empty).decide(message)
    accepted = verdicts(empty).decide(message)
    assert (accepted.action, accepted.headers, accepted.status) == ("accept", [], None)
    refused = verdicts(empty, 'milter.no_model="tempfail"').decide(message)
    assert refused.action == "tempfail" and refused.reply.startswith("451 4.7.1 ")


def test_the_message_is_reassembled_as_the_mta_hands_it_over():
    headers = [("Received", b"from a\n\tby b"), ("Subject", b"hi"), ("Message-ID", b"<x@y>")]
    assert reassembled(headers, [b"line 1\r\n", b"line 2\r\n"]) == (
        b"Received: from a\r\n\tby b\r\nSubject: hi\r\nMessage-ID: <x@y>\r\n\r\nline 1\r\nline 2\r\n")
    assert reassembled([], []) == b"\r\n"


def test_listen_takes_postfixs_notation_and_refuses_others():
    assert parse_listen("inet:127.0.0.1:11340") == ("inet", ("127.0.0.1", 11340))
    assert parse_listen("inet:[::1]:25") == ("inet", ("[::1]", 25))
    assert parse_listen("unix:/run/stream-nb/milter.sock") == ("unix", "/run/stream-nb/milter.sock")
    for wrong in ("inet:11340", "inet:host:0", "inet:host:x", "tcp:host:1", "unix:"):
        with pytest.raises(ConfigError, match="milter.listen"):
            parse_listen(wrong)


@pytest.mark.parametrize("setting, message", [
    ('milter.action="drop"', "milter.action: 'drop' is not one of tag, reject, tempfail"),
    ('milter.no_model="reject"', "milter.no_model: 'reject' is not one of accept, tempfail"),
    ('milter.listen="127.0.0.1:25"', "milter.listen: '127.0.0.1:25' is not inet:HOST:PORT or unix:PATH"),
    ("milter.follow_batch=0", "milter.follow_batch: 0 is outside 1 to 100,000"),
    ('milter.reply="5.7.1 ok\\r\\nX: y"', "milter.reply: one line of ASCII text"),
    ("milter.colour=1", "milter.colour: unknown key"),
])
def test_a_milter_setting_it_cannot_use_is_one_line_naming_it(setting, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(MAIL_TOML, [setting])


def test_the_milter_section_leaves_the_checkpoints_fingerprint_alone():
    from stream_nb.checkpoint import config_fingerprint

    plain = load_config(MAIL_TOML)
    with_milter = load_config(MAIL_TOML, ['milter.action="reject"', "milter.threshold=2.5"])
    assert config_fingerprint(plain.resolved()) == config_fingerprint(with_milter.resolved())


def test_with_per_user_models_one_recipient_is_the_key_and_its_header_goes_on_top(learned):
    model = learned[0]
    message = b"Subject: hi\r\n\r\nbody\r\n"
    keyed = verdicts(model, "kafka.mail_key_header=\"X-Original-To\"")
    keyed.replica.keyed = object()  # the per-user state's presence is all keyed_message asks
    assert keyed.keyed_message(message, ["<Ann@Example.TEST>"]) == (
        b"X-Original-To: ann@example.test\r\n" + message, "ann@example.test")
    assert keyed.keyed_message(message, ["<ann@example.test>", "<bob@example.test>"]) == (message, None)
    assert keyed.keyed_message(message, ["<>"]) == (message, None)
    record_keyed = verdicts(model)
    record_keyed.replica.keyed = object()
    assert record_keyed.keyed_message(message, ["<ann@example.test>"]) == (message, "ann@example.test")
    assert verdicts(model).keyed_message(message, ["<ann@example.test>"]) == (message, None)  # no [personal]


def test_a_session_answers_451_when_judging_fails(learned):
    """The protocol side (MilterSession) over an in-memory stream: an MTA's negotiation, a
    message, and a verdict that raises: the answer is 451, not a dropped connection."""
    import asyncio

    from kilter.protocol import messages as m
    from kilter.protocol.buffer import SimpleBuffer

    from stream_nb.verdicts.milter import MilterSession

    broken = verdicts(learned[0])
    broken.decide = lambda message, recipients: 1 / 0
    packed = SimpleBuffer(1 << 16)
    for message in (m.Negotiate(6, m.ActionFlags.ALL, m.ProtocolFlags(0x1FFFFF)), m.EnvelopeRecipient(b"<ann@x>"),
                    m.Header("Subject", b"hi"), m.Body(b"body\r\n"), m.EndOfMessage(b""), m.Close()):
        message.pack(packed)

    class Writer:
        data = b""

        def write(self, data):
            Writer.data += data

        async def drain(self):
            pass

        def close(self):
            pass

    async def run():
        reader = asyncio.StreamReader()
        reader.feed_data(packed[:].tobytes())
        reader.feed_eof()
        await MilterSession(broken).run(reader, Writer())

    asyncio.run(run())
    answers = SimpleBuffer(1 << 16)
    answers[:] = Writer.data
    replies = []
    while answers.filled:
        message, size = m.Message.unpack(answers)
        replies.append(message)
        del answers[:size]
    assert isinstance(replies[0], m.Negotiate) and m.ProtocolFlags.NR_HEADER in replies[0].protocol_flags
    assert [type(reply).__name__ for reply in replies[1:]] == ["ReplyCode"]
    assert bytes(replies[1].content).startswith(b"451 4.3.0 ")
