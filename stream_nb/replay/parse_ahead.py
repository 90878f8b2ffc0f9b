"""Raw mail parsed in other processes, or in a thread, while the replay learns, so that reading
mail and learning from it overlap on a machine of several cores.

A thread (`threads=True`, replay's default on two CPUs) reads while the learner's thread runs
without the GIL: the featuriser's C loop over a batch of plain texts and the model's kernel
release it (stream_nb.features._native, stream_nb.model._kernel). Its readings are the objects
parse_mail made, shared, not copied; a process's readings cost a copy each way (JSON) and more
CPU time than a thread's.

A message's reading (`stream_nb.mail.parse_mail`) depends on its bytes alone, so any process
may make it: replay hands the mail of the events it pulls, in chunks of CHUNK, to a pool of
processes, one batch ahead of the one it learns (replay_contenders pulls the next batch before
it learns the current one). When a batch's messages are featurised (`prepare`), the chunks no
process has started yet are taken back, the last first, and read here, while the processes
finish the ones they have begun: the two ends of a batch are read at once. A reading comes back
exactly as `parse_mail` made it in the other process (JSON of its four fields, strs and lists of
strs; lone surrogates survive JSON's escapes); a chunk the pool could not read (a process died,
an answer of the wrong shape) is read here instead, so the replay's results never depend on
the pool, only its speed does.

The pool starts once the stream is longer than `start_after` mails (a short replay pays no
process start-up). Its processes are forked when this process runs one thread (a replay of
files: a copy of the process in milliseconds, with everything imported), spawned otherwise (a
replay from a topic has client threads, which a fork would copy in whatever state they were).
The pool's transport carries only the chunks' bytes there and one str back.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from stream_nb.mail import DEFAULT_MAX_BYTES, ParsedMail, parse_mail

__all__ = ["CHUNK", "ParseAhead", "default_parse_processes", "parse_chunk", "readings_of"]

log = logging.getLogger(__name__)

CHUNK = 64  # messages a process reads at a time: ~13 ms of work, small beside a batch of 1,000
CHUNK_BYTES = 4 << 20  # and at most this much mail (a chunk's answer is a few times its text at most)
KEEP_BYTES = 64 << 20  # the mail of the readings kept, at most (besides `keep` messages)
MAX_PROCESSES = 8  # the default's cap: beyond it the learner, not the reading, sets the pace


def default_parse_processes() -> int:
    """The processes that read mail beside a replay by default: two fewer than the CPUs this
    process may run on, at most MAX_PROCESSES; 0 on one or two CPUs. The learner keeps one, the
    rest of the machine (a broker, the system) another: on 2 CPUs a reader beside the learner
    made a replay of raw mail 4% faster for 17% more CPU time (the two contend for the memory
    the featuriser's tables live in; benchmarks/mail_replay_speed.py)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cpus = os.cpu_count() or 1
    return max(0, min(cpus - 2, MAX_PROCESSES))


def _parse_list(mails: list[bytes], max_bytes: int) -> list[ParsedMail]:
    """What a parse thread answers for a chunk: each mail's reading, in order. The GIL is given
    up after each message, so that the learner, back from a stretch without it, waits for one
    message's reading at most, not for the interpreter's switch interval (5 ms)."""
    readings = []
    for mail in mails:
        readings.append(parse_mail(mail, max_bytes=max_bytes))
        time.sleep(0)
    return readings


def parse_chunk(mails: list[bytes], max_bytes: int) -> str:
    """What a pool process answers for a chunk: JSON of [subject, body, features, defects] of
    `parse_mail(mail, max_bytes=max_bytes)` for each mail, in order."""
    return json.dumps([[parsed.subject, parsed.body, parsed.features, parsed.defects]
                       for parsed in (parse_mail(mail, max_bytes=max_bytes) for mail in mails)])


def readings_of(answer: str, count: int) -> list[ParsedMail]:
    """The ParsedMail of each of `count` messages from `parse_chunk`'s answer; ValueError when the
    answer is not `count` readings of [str, str, list of str, list of str]."""
    rows = json.loads(answer)
    if type(rows) is not list or len(rows) != count:
        raise ValueError(f"a chunk of {count} messages came back as {type(rows).__name__} of "
                         f"{len(rows) if isinstance(rows, list) else '?'} readings")
    readings = []
    for row in rows:
        if (type(row) is not list or len(row) != 4 or type(row[0]) is not str or type(row[1]) is not str
                or not _strs(row[2]) or not _strs(row[3])):
            raise ValueError("a reading came back not as [subject, body, features, defects]")
        readings.append(ParsedMail(subject=row[0], body=row[1], features=row[2], defects=row[3]))
    return readings


def _strs(value) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def _process_context():
    """fork when this process runs one thread and the platform forks, else spawn (module doc)."""
    one_thread = threading.active_count() == 1
    return multiprocessing.get_context("fork" if one_thread and "fork" in multiprocessing.get_all_start_methods()
                                       else "spawn")


class _Chunk:
    """Mails handed to the pool together, and what became of them: `readings` once known (None
    in a slot: read here when asked)."""

    __slots__ = ("mails", "future", "readings")

    def __init__(self, mails: list[bytes], future: Future) -> None:
        self.mails = mails
        self.future = future
        self.readings: list[ParsedMail | None] | None = None


class ParseAhead:
    """Readings of the mail of a stream of events, made ahead by `processes` other processes,
    or threads with `threads` (see the module doc). `events(stream)` passes the stream
    through, handing its mail to the pool; `prepare(mails)` before a batch is featurised;
    `take(mail)` is a message's reading, or None for one to read here (the pool never had it,
    or could not read it). A reading is taken once; the readings of at most `keep` messages
    (and KEEP_BYTES of mail) handed over and not taken are kept (older ones are dropped, to be
    read here if ever asked for). A chunk is `chunk` messages or CHUNK_BYTES of mail,
    whichever comes first.

    Use it as a context manager: leaving it stops the pool."""

    def __init__(self, processes: int, *, threads: bool = False, max_bytes: int = DEFAULT_MAX_BYTES,
                 chunk: int = CHUNK, keep: int = 4_000, start_after: int = 256) -> None:
        if type(processes) is not int or processes < 1:
            raise ValueError(f"parse processes must be a positive integer, got {processes!r}")
        self.threads = threads
        if chunk < 1 or keep < chunk:
            raise ValueError(f"chunk must be >= 1 and keep >= chunk, got chunk {chunk}, keep {keep}")
        self.processes = processes
        self.max_bytes = max_bytes
        self.chunk = chunk
        self.keep = keep
        self.start_after = start_after
        self._pool: ProcessPoolExecutor | ThreadPoolExecutor | None = None
        self._broken = False
        self._waiting: list[bytes] = []  # pulled, not yet a chunk
        self._pulled = 0
        self._chunks: deque[_Chunk] = deque()  # handed over, oldest first
        self._held = 0  # messages in self._chunks
        self._held_bytes = 0  # and their bytes
        self._waiting_bytes = 0
        self._where: dict[int, tuple[bytes, _Chunk, int]] = {}  # id(mail) -> (mail, its chunk, its place)
        self.read_here = 0  # messages of handed-over chunks read in this process (taken back or failed)

    def __enter__(self) -> ParseAhead:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the pool: chunks not started are cancelled, the processes end once their chunk
        is read (a chunk's time); nothing more is read ahead."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._broken = True
        self._chunks.clear()
        self._where.clear()
        self._waiting.clear()
        self._waiting_bytes = 0

    def events(self, stream: Iterable[dict]) -> Iterator[dict]:
        """The events of `stream`, in order, the mail of each handed to the pool as it passes."""
        for event in stream:
            mail = event.get("mail") if isinstance(event, dict) else None
            if type(mail) is bytes and not self._broken:
                self._waiting.append(mail)
                self._waiting_bytes += len(mail)
                self._pulled += 1
                if len(self._waiting) >= self.chunk or self._waiting_bytes >= CHUNK_BYTES:
                    self._hand_over()
            yield event

    def _hand_over(self) -> None:
        mails, self._waiting, size = self._waiting, [], self._waiting_bytes
        self._waiting_bytes = 0
        if self._pool is None:
            if self._pulled <= self.start_after:
                return  # (a short stream: read here, no process started)
            self._pool = (ThreadPoolExecutor(self.processes, thread_name_prefix="parse-ahead") if self.threads else
                          ProcessPoolExecutor(self.processes, mp_context=_process_context()))
        try:
            future = self._pool.submit(_parse_list if self.threads else parse_chunk, mails, self.max_bytes)
        except (BrokenProcessPool, RuntimeError) as error:
            self._give_up(error)
            return
        chunk = _Chunk(mails, future)
        self._chunks.append(chunk)
        self._held += len(mails)
        self._held_bytes += size
        for place, mail in enumerate(mails):
            self._where[id(mail)] = (mail, chunk, place)
        while len(self._chunks) > 1 and (self._held > self.keep or self._held_bytes > KEEP_BYTES):
            self._drop(self._chunks.popleft())

    def _drop(self, chunk: _Chunk) -> None:
        chunk.future.cancel()
        self._held -= len(chunk.mails)
        self._held_bytes -= sum(map(len, chunk.mails))
        for mail in chunk.mails:
            entry = self._where.get(id(mail))
            if entry is not None and entry[1] is chunk:
                del self._where[id(mail)]

    def _give_up(self, error: BaseException) -> None:
        if not self._broken:
            log.warning("mail is read in this process from here on: the parse processes failed (%s)", error)
        self._broken = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def prepare(self, mails: Iterable[bytes]) -> None:
        """Make the readings of `mails` (a batch about to be featurised) ready: each chunk of them
        that no process has started is taken back and read here, the last first, while the
        processes read theirs; then wait for those."""
        chunks: dict[int, _Chunk] = {}
        for mail in mails:
            entry = self._where.get(id(mail))
            if entry is not None and entry[0] is mail and entry[1].readings is None:
                chunks[id(entry[1])] = entry[1]
        started = False
        for chunk in reversed(list(chunks.values())):  # the pool starts chunks in order: take back from the end
            if not started and chunk.future.cancel():
                chunk.readings = [None] * len(chunk.mails)  # each read here by whoever asks (take gives None)
                self.read_here += len(chunk.mails)
                continue
            started = True
            self._resolve(chunk)

    def _resolve(self, chunk: _Chunk) -> None:
        try:
            answer = chunk.future.result()
            chunk.readings = answer if self.threads else readings_of(answer, len(chunk.mails))
        except Exception as error:  # (a process died, an answer of the wrong shape, a thread's failure)
            chunk.readings = [None] * len(chunk.mails)
            self.read_here += len(chunk.mails)
            if isinstance(error, BrokenProcessPool):
                self._give_up(error)
            else:
                log.warning("a chunk of %d messages is read in this process: %s", len(chunk.mails), error)

    def take(self, mail: bytes) -> ParsedMail | None:
        """The reading of `mail` made ahead (once), or None: read it here."""
        entry = self._where.get(id(mail))
        if entry is None or entry[0] is not mail:
            return None
        _, chunk, place = entry
        del self._where[id(mail)]
        if chunk.readings is None:
            self.prepare([mail])
        return chunk.readings[place]
