"""Raw mail read ahead in other processes (stream_nb.replay.parse_ahead): every reading equals
parse_mail's, a replay's figures are the same with any number of processes, any batch size and
a pool that fails, and an answer of the wrong shape is refused."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import logging
import os
import random
import struct
import subprocess
import sys

import pytest

from stream_nb.cli import build_parser
from stream_nb.config import load_config
from stream_nb.features.fields import EventFeaturizer
from stream_nb.features.mail import MailFeaturizer
from stream_nb.features.text import TextFeaturizer
from stream_nb.mail import ParsedMail, parse_mail
from stream_nb.replay import mail_reader, parse_ahead
from stream_nb.replay.cli import replay_and_report
from stream_nb.replay.parse_ahead import ParseAhead, default_parse_processes, parse_chunk, readings_of
from tests.native import REPO

WORDS = ["free", "prize", "meeting", "lunch", "invoice", "viagra", "report", "caf\u00e9", "na\u00efve", "click",
         "unsubscribe", "tomorrow", "\u20ac100", "http://a.example/x", "bob@b.example"]


def generated_mail(rng: random.Random, n: int) -> list[bytes]:
    """n raw messages: plain, 8-bit, multipart with HTML and base64, cut short, garbage, empty."""
    made = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 60)))
        kind = i % 7
        if kind == 0:
            raw = f"From: a{i}@x.example\r\nTo: b@y.example\r\nSubject: {words[:40]}\r\n\r\n{words}\r\n".encode()
        elif kind == 1:
            raw = f"Subject: {words[:30]}\r\nFrom: \u00e9 <c@z.example>\r\n\r\n{words}\r\n".encode("latin-1", "replace")
        elif kind == 2:
            html = f"<html><body><p>{words}</p><a href='http://evil.example'>http://bank.example</a></body></html>"
            raw = (f"Subject: multi {i}\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b{i}\""
                   f"\r\n\r\n--b{i}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{words}\r\n--b{i}\r\n"
                   f"Content-Type: text/html\r\n\r\n{html}\r\n--b{i}--\r\n").encode()
        elif kind == 3:
            body = base64.b64encode(words.encode()).decode()
            raw = f"Subject: b64\r\nContent-Transfer-Encoding: base64\r\n\r\n{body}\r\n".encode()
        elif kind == 4:
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
        elif kind == 5:
            full = f"Subject: cut {words}\r\nReceived: from x ([10.0.0.{i % 255}])\r\n\r\n{words}".encode()
            raw = full[: rng.randint(1, len(full))]
        else:
            raw = b"" if i % 2 else b"  \r\n"
        made.append(raw)
    return made


def test_a_chunk_s_answer_gives_back_parse_mail_s_readings_exactly():
    mails = generated_mail(random.Random(1), 140)
    assert readings_of(parse_chunk(mails, 10_000), len(mails)) == [parse_mail(m, max_bytes=10_000) for m in mails]
    # any str is carried, lone surrogates (alone, or two in a row) and NULs included
    odd = ParsedMail(subject="\ud800x", body="caf\u00e9\n\udfff\0\ud83d\ude00\U0001f600",
                     features=["#a:\u20ac", ""], defects=["x"])
    answer = mail_reader.encode_readings([odd, ParsedMail("", "", [], [])])
    assert readings_of(answer, 2) == mail_reader.decode_readings(answer, 2) == [odd, ParsedMail("", "", [], [])]


def mail_featurizer(ahead) -> MailFeaturizer:
    return MailFeaturizer(EventFeaturizer(text=TextFeaturizer()), ahead=ahead)


def read_through(ahead: ParseAhead, mails: list[bytes], batch: int) -> list[ParsedMail]:
    """Each mail's reading by a MailFeaturizer given `ahead`, the stream pulled a batch ahead of
    the batch read, as replay_contenders pulls it."""
    featurizer = mail_featurizer(ahead)
    events = ahead.events({"mail": mail} for mail in mails)
    readings, pulled = [], []
    for event in events:
        pulled.append(event)
        if len(pulled) == 2 * batch:
            readings += [featurizer.parse(e["mail"]) for e in _prepared(ahead, pulled[:batch])]
            pulled = pulled[batch:]
    while pulled:
        readings += [featurizer.parse(e["mail"]) for e in _prepared(ahead, pulled[:batch])]
        pulled = pulled[batch:]
    return readings


def _prepared(ahead: ParseAhead, events: list[dict]) -> list[dict]:
    ahead.prepare([event["mail"] for event in events])
    return events


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("batch", [1, 7, 100])
def test_readings_made_ahead_equal_parse_mail_s_for_any_batch(batch, threads):
    mails = generated_mail(random.Random(batch), 500)
    with ParseAhead(1, threads=threads, chunk=8, keep=64, start_after=16) as ahead:
        readings = read_through(ahead, mails, batch)
        read_here = ahead.read_here
        pool = type(ahead._pool).__name__
    assert readings == [parse_mail(mail) for mail in mails]
    assert read_here < len(mails) - 16  # the pool read some: more than the messages before it started
    assert pool == ("ThreadPoolExecutor" if threads else "ReaderProcesses")


def test_a_short_stream_starts_no_process():
    mails = generated_mail(random.Random(3), 40)
    with ParseAhead(2, chunk=8, start_after=64) as ahead:
        assert read_through(ahead, mails, 10) == [parse_mail(mail) for mail in mails]
        assert ahead._pool is None


@pytest.mark.parametrize("threads", [False, True])
def test_readers_started_first_read_a_short_stream_from_its_first_chunk(threads):
    """`start()` (a source about to be read whole): the pool is there before any mail passes,
    and it is handed every chunk, the first included, of a stream shorter than `start_after`."""
    mails = generated_mail(random.Random(5), 40)
    with ParseAhead(1, threads=threads, chunk=8, start_after=64) as ahead:
        ahead.start()
        pool = type(ahead._pool).__name__
        events = list(ahead.events({"mail": mail} for mail in mails))
        handed_over = ahead.handed_over
        featurizer = mail_featurizer(ahead)
        readings = [featurizer.parse(event["mail"]) for event in _prepared(ahead, events)]
    assert pool == ("ThreadPoolExecutor" if threads else "ReaderProcesses")
    assert handed_over == 40  # five chunks of 8 (whichever side then reads them)
    assert readings == [parse_mail(mail) for mail in mails]


def test_readers_that_cannot_start_first_leave_the_reading_here(caplog):
    mails = generated_mail(random.Random(6), 30)
    with caplog.at_level(logging.WARNING, logger="stream_nb.replay.parse_ahead"):
        with ParseAhead(1, chunk=8, start_after=0, reader_command=["/nonexistent/python"]) as ahead:
            ahead.start()
            readings = read_through(ahead, mails, 10)
            read_here, pool = ahead.read_here, ahead._pool
    assert readings == [parse_mail(mail) for mail in mails]
    assert pool is None and read_here == 0  # (nothing was handed over: every message read as it came)
    assert "parse processes failed" in caplog.text


def test_the_pipes_to_and_from_a_reader_hold_a_chunk_and_its_answer():
    """(Linux) each pipe holds PIPE_BYTES, a chunk of mail or its answer at once, and the
    readings that come through are parse_mail's."""
    import fcntl
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("no F_GETPIPE_SZ here")
    mails = generated_mail(random.Random(12), 30)
    executor = parse_ahead.ReaderProcesses(1)
    try:
        child = executor._children[0].process
        sizes = [fcntl.fcntl(pipe.fileno(), fcntl.F_GETPIPE_SZ) for pipe in (child.stdin, child.stdout)]
        answer = executor.submit(mails, 1 << 20).result(timeout=60)
    finally:
        executor.shutdown()
    assert sizes == [parse_ahead.PIPE_BYTES] * 2
    assert readings_of(answer, len(mails)) == [parse_mail(mail) for mail in mails]


def test_a_reader_process_answers_a_chunk_as_parse_chunk_and_imports_the_parser_alone():
    """The child's loop over frames: each chunk's answer is parse_chunk's, in order; the end of
    its input ends it; and it runs at a lower priority, without numpy, river or Kafka's client
    (it starts in milliseconds, not the program's whole import)."""
    mails = generated_mail(random.Random(8), 30)
    chunks = [mails[:7], [], mails[7:]]
    frames = b"".join(frame_of(chunk, 5_000) for chunk in chunks)
    shown = ("import os, sys, runpy; runpy.run_module('stream_nb.replay.mail_reader', run_name='__main__'); "
             "sys.stderr.write(repr((sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'river', 'kafka'}), "
             "os.nice(0))))")
    done = subprocess.run([sys.executable, "-c", shown], cwd=REPO, input=frames, capture_output=True, timeout=120)
    niceness = min(os.nice(0) + mail_reader.NICENESS, 19)  # (the learner's threads first)
    assert done.returncode == 0 and done.stderr == repr(([], niceness)).encode(), done.stderr
    out, answers = io.BytesIO(done.stdout), []
    while header := out.read(8):
        answers.append(out.read(struct.unpack("<Q", header)[0]))
    assert answers == [parse_chunk(chunk, 5_000) for chunk in chunks]
    # served in this process too, and a chunk cut short is an error, not a reading
    served = io.BytesIO()
    mail_reader.serve(io.BytesIO(frames), served)
    assert served.getvalue() == done.stdout
    with pytest.raises(EOFError):
        mail_reader.serve(io.BytesIO(frames[:-3]), io.BytesIO())


def test_an_answer_stays_within_the_bound_a_reader_is_held_to():
    """answer_bound over messages made to make long answers: every byte one that JSON escapes
    (control characters, 8-bit text read as Latin-1), in the subject, the body, addresses,
    Received headers and mailer names; and generated mail. Cut at max_bytes too."""
    escaped = bytes(range(1, 32)).replace(b"\r", b"").replace(b"\n", b"") + bytes(range(128, 256))
    hostile = [
        b"Subject: " + escaped * 40 + b"\r\n\r\n" + escaped * 400,
        b"From: " + escaped * 30 + b" <a" + escaped + b"@b.example>\r\nTo: x@" + escaped * 20 + b".example\r\n"
        b"Reply-To: r@" + escaped * 10 + b"\r\nX-Mailer: " + escaped * 50 + b"\r\n\r\nbody",
        b"".join(b"Received: from h%d.%s.example (h [10.0.0.%d]) by %s.example\r\n" % (i, escaped, i, escaped)
                 for i in range(60)) + b"\r\n" + escaped,
        b"Content-Type: text/html; charset=latin-1\r\n\r\n<a href='http://" + escaped + b".example/'>" + escaped * 99,
        b"", b"x",
    ]
    for max_bytes in (100, 1 << 20):
        for mail in hostile + generated_mail(random.Random(9), 200):
            assert len(parse_chunk([mail], max_bytes)) <= mail_reader.answer_bound([mail], max_bytes)


def frame_of(mails: list[bytes], max_bytes: int) -> bytes:
    """A chunk as the parent writes it to a reader (mail_reader's frames)."""
    return struct.pack("<QQ", len(mails), max_bytes) + b"".join(struct.pack("<Q", len(m)) + m for m in mails)


DEATH_MARK = b"Subject: the parse process dies on this one\r\n\r\nx"

# A reader whose parse_chunk is replaced by one of the faults below (by name), as a command.
FAULTY_READER = """
import os, sys
from stream_nb.replay import mail_reader
real, mark = mail_reader.parse_chunk, {mark!r}
def dies_on_the_mark(mails, max_bytes):  # the process ends at once on the chunk holding the mark (a crash)
    if mark in mails:
        os._exit(3)
    return real(mails, max_bytes)
def answers_short(mails, max_bytes):  # one reading short for a chunk of more than one message
    return real(mails[: max(1, len(mails) - 1)], max_bytes)
def answers_too_long(mails, max_bytes):  # an answer longer than a chunk's can be
    return b" " * (mail_reader.answer_bound(mails, max_bytes) + 1) if mark in mails else real(mails, max_bytes)
mail_reader.parse_chunk = {fault}
mail_reader.serve(sys.stdin.buffer, sys.stdout.buffer)
"""


@pytest.mark.parametrize("fault, expected_log", [("dies_on_the_mark", "parse processes failed"),
                                                 ("answers_short", "came back as"),
                                                 ("answers_too_long", "over its bound"),
                                                 (None, "parse processes failed")])
def test_a_failing_reader_costs_speed_not_a_reading(caplog, fault, expected_log):
    """A reader that dies, answers short, answers longer than its bound, or cannot start: every
    reading is still parse_mail's (read here), and the log says why."""
    command = ([sys.executable, "-c", FAULTY_READER.format(mark=DEATH_MARK, fault=fault)] if fault else
               [str(REPO / "no-such-interpreter")])
    mails = generated_mail(random.Random(5), 300)
    mails[150] = DEATH_MARK
    featurizer = mail_featurizer(None)
    with caplog.at_level(logging.WARNING, logger="stream_nb.replay.parse_ahead"):
        with ParseAhead(1, chunk=8, keep=400, start_after=16, reader_command=command) as ahead:
            featurizer._ahead = ahead
            events = list(ahead.events({"mail": mail} for mail in mails))  # every chunk handed over
            marked = ahead._where.get(id(DEATH_MARK))  # (none: the reader did not start)
            if marked is not None:  # the reader meets the mark before any chunk is taken back
                concurrent.futures.wait([marked[1].future], timeout=60)
            readings = [featurizer.parse(event["mail"]) for event in _prepared(ahead, events)]
            read_here, pool = ahead.read_here, ahead._pool
    assert readings == [parse_mail(mail) for mail in mails]
    assert expected_log in caplog.text
    assert (pool is None) == (fault != "answers_short")  # given up, but for a chunk of the wrong shape
    assert (read_here > 0) == (fault is not None)  # chunks the reader held, read here (none without a reader)


def test_a_reading_is_taken_once_and_old_ones_are_dropped():
    mails = generated_mail(random.Random(6), 200)
    with ParseAhead(1, chunk=10, keep=40, start_after=0) as ahead:
        events = list(ahead.events({"mail": mail} for mail in mails))
        assert len(ahead._where) <= 40 and ahead._held <= 40  # keep, however long the stream
        last = events[-5]["mail"]  # (in the last whole chunk)
        ahead._where[id(last)][1].future.result(timeout=60)  # read by the pool, not taken back
        ahead.prepare([last])
        assert ahead.take(last) == parse_mail(last)
        assert ahead.take(last) is None  # once
        assert ahead.take(mails[0]) is None  # dropped long ago: read here


def test_chunks_and_what_is_kept_are_bounded_in_bytes_too(monkeypatch):
    monkeypatch.setattr(parse_ahead, "CHUNK_BYTES", 10_000)
    monkeypatch.setattr(parse_ahead, "KEEP_BYTES", 50_000)
    mails = [b"Subject: big\r\n\r\n" + bytes([65 + i % 26]) * 4_000 for i in range(100)]
    with ParseAhead(1, chunk=64, keep=1_000, start_after=0) as ahead:
        events = list(ahead.events({"mail": mail} for mail in mails))
        sizes = [sum(map(len, chunk.mails)) for chunk in ahead._chunks]
        assert all(size <= 10_000 + 4_100 for size in sizes)  # closed at the first message past 10,000 bytes
        assert ahead._held_bytes == sum(sizes) <= 50_000
        ahead._chunks[-1].future.result(timeout=60)
        ahead.prepare([events[-2]["mail"]])
        assert ahead.take(events[-2]["mail"]) == parse_mail(mails[-2])


def test_parse_processes_must_be_a_positive_number():
    with pytest.raises(ValueError, match="positive integer"):
        ParseAhead(0)
    with pytest.raises(ValueError, match="keep >= chunk"):
        ParseAhead(1, chunk=10, keep=5)
    assert 0 <= default_parse_processes() <= parse_ahead.MAX_PROCESSES
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "--input", "x", "--report", "r", "--parse-processes", "-1"])
    # a parse thread unless turned off
    assert build_parser().parse_args(["replay", "--input", "x", "--report", "r"]).parse_thread is True
    assert build_parser().parse_args(["replay", "--input", "x", "--report", "r", "--no-parse-thread"]).parse_thread is False


def report_figures(report: dict) -> dict:
    """report.json without the figures of time."""
    return {key: value for key, value in report.items() if key != "events_per_s"}


@pytest.mark.parametrize("batch_size, processes", [(1, 1), (7, 1), (1000, 2)])
def test_a_replay_of_mail_gives_the_same_figures_with_any_number_of_parse_processes(tmp_path, batch_size, processes):
    config = load_config(REPO / "configs" / "mail.toml")
    rng = random.Random(7)
    mails = generated_mail(rng, 400)  # (the pool starts after 256 messages)
    events = [{"id": f"m{i}", "mail": mail, "label": rng.choice(["ham", "spam"])} for i, mail in enumerate(mails)]
    reports = {}
    for count, thread in ((0, False), (0, True), (processes, False)):  # none, a parse thread, processes
        _, contenders, made = replay_and_report(list(events), [("mail.toml", config)], tmp_path / f"{count}-{thread}",
                                                batch_size=batch_size, parse_processes=count, parse_thread=thread)
        reports[count, thread] = (report_figures(made[0]), contenders[0].mail_read, dict(contenders[0].mail_defects))
    assert reports[processes, False] == reports[0, True] == reports[0, False]
    assert reports[0, False][1] == len({id(mail) for mail in mails})  # (a bytes object repeated is read once)


def _running_readers() -> list[int]:
    """The pids of this process's children that run a mail reader and have not ended: only
    those, since a worker of the test run may also hold other children, or one not yet reaped."""
    command = "\0".join(mail_reader.reader_command()).encode()
    pids = []
    for task in os.listdir("/proc/self/task"):
        for pid in open(f"/proc/self/task/{task}/children").read().split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline, open(f"/proc/{pid}/stat") as stat:
                    running = cmdline.read().rstrip(b"\0") == command and stat.read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:  # (ended and reaped meanwhile)
                continue
            if running:
                pids.append(int(pid))
    return pids


def test_a_source_read_whole_after_the_readers_start_gives_the_same_figures(tmp_path):
    """replay_and_report given a function that reads the events (`stream-nb replay --shuffle` of
    mail): the readers start before it is called, and read a stream too short to start them
    otherwise; the report is the one of the same events given as a list."""
    config = load_config(REPO / "configs" / "mail.toml")
    rng = random.Random(9)
    mails = generated_mail(rng, 200)  # (fewer than the 256 after which a stream starts the readers)
    events = [{"id": f"m{i}", "mail": mail, "label": rng.choice(["ham", "spam"])} for i, mail in enumerate(mails)]
    called_with = []

    def read() -> list[dict]:
        called_with.append(len(_running_readers()))
        return list(events)

    _, (listed,), (listed_report,) = replay_and_report(list(events), [("mail.toml", config)], tmp_path / "list",
                                                       batch_size=50, parse_processes=1)
    _, (read_first,), (read_report,) = replay_and_report(read, [("mail.toml", config)], tmp_path / "read",
                                                         batch_size=50, parse_processes=1)
    assert called_with == [1]  # the reader process was running when the source was read
    assert report_figures(read_report) == report_figures(listed_report)
    assert read_report["events"] == 200
    assert read_first.mail_read == listed.mail_read == len({id(mail) for mail in mails})  # (a repeat is read once)
    assert listed.parse_ahead.handed_over == 0  # (no process started: every message read here)
    assert read_first.parse_ahead.handed_over == 192  # every whole chunk of 64 (whichever side read it)


@pytest.mark.parametrize("batch_size", [7, 1000])
def test_per_user_models_with_corrections_and_duplicates_read_ahead_give_the_same_figures(tmp_path, batch_size):
    """personal.toml (mail.toml's three views, a model per key) over raw mail with keys, late
    corrections ("unlearn": the label first given) and duplicates of earlier messages: the same
    report, the same per-key figures and the same mail counted, with and without the readers."""
    config = load_config(REPO / "configs" / "personal.toml")
    rng = random.Random(11)
    mails = generated_mail(rng, 420)
    events = [{"id": f"m{i}", "mail": mail, "label": rng.choice(["ham", "spam"]), "key": f"user{i % 4}"}
              for i, mail in enumerate(mails)]
    corrections = [dict(events[i], label="spam" if events[i]["label"] == "ham" else "ham",
                        unlearn=events[i]["label"]) for i in range(0, 300, 9)]
    duplicates = [dict(events[i]) for i in range(5, 300, 13)]
    stream = events[:300] + corrections + events[300:] + duplicates
    reports = {}
    for processes, thread in ((0, False), (0, True), (2, False)):  # none, a parse thread, processes
        _, contenders, made = replay_and_report(list(stream), [("personal.toml", config)],
                                                tmp_path / f"{processes}-{thread}", batch_size=batch_size,
                                                parse_processes=processes, parse_thread=thread)
        reports[processes, thread] = (report_figures(made[0]), contenders[0].mail_read,
                                      dict(contenders[0].mail_defects))
    assert reports[2, False] == reports[0, True] == reports[0, False]
    assert reports[0, False][0]["events"] == len(stream)
    report = reports[0, False][0]
    assert report["by_key"]["keys"] == 4
    assert report["lessons"]["corrected"] > 0 and report["lessons"]["duplicate"] > 0  # both came, and counted
