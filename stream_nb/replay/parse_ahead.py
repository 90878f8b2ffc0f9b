"""Raw mail read ahead of the learner, in other processes or in a thread, so that reading mail
and learning from it overlap on a machine of several cores.

By default (one fewer than the CPUs, at most MAX_PROCESSES: one on a machine of two) the readers
are processes of their own (stream_nb.replay.mail_reader): fresh interpreters that import the
mail parser alone, ready in about 60 ms, sharing no memory with the learner and holding no GIL
of its. A chunk's readings come back as bytes of their four fields (`mail_reader.encode_readings`:
counts, lengths and the UTF-8 of every str, lone surrogates too), checked as they are read
(`readings_of`: the C extension's `readings`, else `decode_readings`). On raw mail
with mail.toml one reader made the replay 7% faster than the thread (0.891 s against 0.959 s),
with spam.toml 18% (0.545 s against 0.668 s): the thread holds the GIL while it parses, and the
learner's Python waits for it.

A thread (`threads=True`, with `--parse-processes 0`) reads while the learner's thread runs
without the GIL: the featuriser's C loop over a batch of plain texts and the model's kernel
release it (stream_nb.features._native, stream_nb.model._kernel). Its readings are the objects
parse_mail made, shared, not copied.

A message's reading (`stream_nb.mail.parse_mail`) depends on its bytes alone, so any process
may make it: replay hands the mail of the events it pulls, in chunks of CHUNK, to the readers,
one batch ahead of the one it learns (replay_contenders pulls the next batch before it learns
the current one). When a batch's messages are featurised (`prepare`), the chunks no reader has
started are taken back one at a time, the last first, and read here, while the readers go on
from the front: the two ends of a batch are read at once, and meet. (The first batch is read
mostly here: the readers are starting.) A chunk the readers could not read (a process died, an
answer of the wrong shape) is read here instead, so the replay's results never depend on the
readers, only its speed does.

The readers start once the stream is longer than `start_after` mails (a short replay pays no
start-up), or at once with `start()`, before a source read whole is read (a shuffled replay).
A chunk goes to a reader process in one write, through pipes that hold a chunk or its answer at
once (`_enlarge`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from stream_nb.mail import DEFAULT_MAX_BYTES, ParsedMail, parse_mail
from stream_nb.native import native_allowed, usable_cpus
from stream_nb.replay import mail_reader
from stream_nb.replay.mail_reader import decode_readings, parse_chunk

try:  # the C twin of decode_readings
    from stream_nb.mail import _native as _mail_native
except ImportError:
    _mail_native = None

__all__ = ["CHUNK", "ParseAhead", "ReaderProcesses", "default_parse_processes", "parse_chunk", "readings_of"]

log = logging.getLogger(__name__)

# chunks a reader process holds at once: the one it reads and the next ones, so that it need not wait
# for this process's threads (and they for the GIL) between two; 4 against 2: the learner read 608
# messages of a raw-mail replay instead of 704, 0.719 s against 0.731 (10 rounds). A chunk sent is
# the reader's, no longer taken back.
AHEAD = 4
CHUNK = 64  # messages a process reads at a time: ~13 ms of work, small beside a batch of 1,000
CHUNK_BYTES = 4 << 20  # and at most this much mail (a chunk's answer is a few times its text at most)
KEEP_BYTES = 64 << 20  # the mail of the readings kept, at most (besides `keep` messages)
PIPE_BYTES = 1 << 20  # each pipe to and from a reader holds this much (Linux's default cap for it)
MAX_PROCESSES = 2  # the default's cap: one reader keeps 2.5x ahead of the learner; a second reads the first batch too


def default_parse_processes() -> int:
    """The processes that read mail beside a replay by default: one fewer than the CPUs this
    process may run on, at most MAX_PROCESSES; 0 on one CPU (then a thread reads, which gains
    nothing there but costs nothing either)."""
    return max(0, min(usable_cpus() - 1, MAX_PROCESSES))


def _parse_list(mails: list[bytes], max_bytes: int) -> list[ParsedMail]:
    """What a parse thread answers for a chunk: each mail's reading, in order. The GIL is given
    up after each message, so that the learner, back from a stretch without it, waits for one
    message's reading at most, not for the interpreter's switch interval (5 ms)."""
    readings = []
    for mail in mails:
        readings.append(parse_mail(mail, max_bytes=max_bytes))
        time.sleep(0)
    return readings


def readings_of(answer: bytes, count: int) -> list[ParsedMail]:
    """The ParsedMail of each of `count` messages from `parse_chunk`'s answer (`decode_readings`,
    in C where the mail extension is built); ValueError for an answer of any other shape."""
    if _mail_native is not None and native_allowed():
        return _mail_native.readings(answer, count, ParsedMail)
    return decode_readings(answer, count)


def _enlarge(pipe) -> None:
    """Let `pipe` hold PIPE_BYTES (Linux's F_SETPIPE_SZ; elsewhere, or refused, it stays as it
    is): a chunk or an answer then passes in one write and one read, where through the default
    64 KB the reader waited on every piece for this process's receiving or sending thread, and
    each of those for the GIL (up to the interpreter's 5 ms switch interval while the learner's
    Python runs)."""
    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):  # (no such call here, or more than the system allows)
        pass


class _ReaderProcess:
    """One reader process (stream_nb.replay.mail_reader) and the two threads that talk to it:
    a sender, which hands it the executor's waiting chunks while it holds fewer than AHEAD, and
    a receiver, which settles each chunk's future with its answer, in the order sent."""

    def __init__(self, executor: ReaderProcesses, command: list[str]) -> None:
        self.executor = executor
        # the child imports the package this process runs, wherever that is
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        for pipe in (self.process.stdin, self.process.stdout):
            _enlarge(pipe)
        self.sent: deque[tuple[Future, int]] = deque()  # (future, answer bound) of the chunks it holds
        self.sender = threading.Thread(target=self._send, name="mail-reader-send", daemon=True)
        self.receiver = threading.Thread(target=self._receive, name="mail-reader-receive", daemon=True)
        self.sender.start()
        self.receiver.start()

    def _send(self) -> None:
        executor, stdin = self.executor, self.process.stdin
        try:
            while True:
                with executor.changed:
                    while not executor.closed and (not executor.waiting or len(self.sent) >= AHEAD):
                        executor.changed.wait()
                    if not executor.waiting:  # closed, nothing left to hand over
                        break
                    future, mails, max_bytes = executor.waiting.popleft()
                    if not future.set_running_or_notify_cancel():  # taken back
                        continue
                    self.sent.append((future, mail_reader.answer_bound(mails, max_bytes)))
                # one write: each of a buffered writer's 8 KB flushes would wait for the GIL again
                frames = [mail_reader.CHUNK_FRAME.pack(len(mails), max_bytes)]
                for mail in mails:
                    frames += (mail_reader.LENGTH_FRAME.pack(len(mail)), mail)
                stdin.write(b"".join(frames))
                stdin.flush()
        except (OSError, ValueError) as error:  # the child is gone (a broken pipe), or stdin was closed
            self._fail(f"a mail reader could not be given mail: {error}")
        finally:
            try:
                stdin.close()  # the end of its chunks: the child ends once it has answered them
            except OSError:
                pass

    def _receive(self) -> None:
        stdout = self.process.stdout
        try:
            while (header := mail_reader.read_exactly(stdout, mail_reader.LENGTH_FRAME.size)) is not None:
                size = mail_reader.LENGTH_FRAME.unpack(header)[0]
                with self.executor.changed:
                    if not self.sent:
                        raise ValueError("an answer for no chunk")
                    future, bound = self.sent[0]
                if size > bound:
                    raise ValueError(f"an answer of {size:,} bytes, over its bound of {bound:,}")
                text = mail_reader.read_within(stdout, size, "an answer")  # (before the chunk leaves `sent`: a failure fails it too)
                with self.executor.changed:
                    if not self.sent or self.sent[0][0] is not future:  # failed meanwhile (`_fail`)
                        return
                    self.sent.popleft()
                    self.executor.changed.notify_all()
                future.set_result(text)
            if self.sent:
                raise EOFError(f"the mail reader ended (exit status {self.process.wait()}) with "
                               f"{len(self.sent)} chunks unanswered")
        except (OSError, ValueError, EOFError) as error:
            self._fail(str(error))

    def _fail(self, reason: str) -> None:
        """Every chunk this child holds, and every one waiting, fails: the replay reads them."""
        self.process.kill()
        with self.executor.changed:
            failed = [future for future, _ in self.sent]
            self.sent.clear()
            self.executor.broken = reason
            failed += [future for future, _, _ in self.executor.waiting]
            self.executor.waiting.clear()
            self.executor.changed.notify_all()
        for future in failed:
            if not future.done() and (future.running() or future.set_running_or_notify_cancel()):
                future.set_exception(BrokenProcessPool(reason))

    def join(self) -> None:
        self.sender.join()
        self.receiver.join()
        self.process.wait()


class ReaderProcesses:
    """An executor of `parse_chunk` over `processes` reader processes (stream_nb.replay.mail_reader):
    `submit(mails, max_bytes)` is the future of the chunk's answer, a str; `shutdown()` ends the
    children once they have answered what they hold. After a child failed, a submit raises
    BrokenProcessPool."""

    def __init__(self, processes: int, command: list[str] | None = None) -> None:
        if type(processes) is not int or processes < 1:
            raise ValueError(f"reader processes must be a positive integer, got {processes!r}")
        self.changed = threading.Condition()
        self.waiting: deque[tuple[Future, list[bytes], int]] = deque()
        self.closed = False
        self.broken: str | None = None
        command = mail_reader.reader_command() if command is None else command
        self._children: list[_ReaderProcess] = []
        try:
            for _ in range(processes):
                self._children.append(_ReaderProcess(self, command))
        except BaseException:  # (OSError: the command cannot run) the ones started end
            self.shutdown(wait=True, cancel_futures=True)
            raise

    def submit(self, mails: list[bytes], max_bytes: int) -> Future:
        future: Future = Future()
        with self.changed:
            if self.broken is not None:
                raise BrokenProcessPool(self.broken)
            if self.closed:
                raise RuntimeError("the mail readers were shut down")
            self.waiting.append((future, mails, max_bytes))
            self.changed.notify_all()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self.changed:
            self.closed = True
            if cancel_futures:
                for future, _, _ in self.waiting:
                    future.cancel()
                self.waiting.clear()
            self.changed.notify_all()
        if wait:
            for child in self._children:
                child.join()


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
                 chunk: int = CHUNK, keep: int = 4_000, start_after: int = 256,
                 reader_command: list[str] | None = None) -> None:
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
        self.reader_command = reader_command  # a reader process's command (None: mail_reader.reader_command())
        self._pool: ReaderProcesses | ThreadPoolExecutor | None = None
        self._broken = False
        self._waiting: list[bytes] = []  # pulled, not yet a chunk
        self._pulled = 0
        self._chunks: deque[_Chunk] = deque()  # handed over, oldest first
        self._held = 0  # messages in self._chunks
        self._held_bytes = 0  # and their bytes
        self._waiting_bytes = 0
        self._where: dict[int, tuple[bytes, _Chunk, int]] = {}  # id(mail) -> (mail, its chunk, its place)
        self.handed_over = 0  # messages handed to the pool
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

    def start(self) -> None:
        """Start the readers now rather than once `start_after` mails have passed: for a caller
        about to read a mail source whole before its first event (a shuffled replay), so that
        they start while it reads (a reader process takes 60-80 ms to be ready); every chunk is
        then handed over, the first included."""
        self.start_after = 0
        if self._pool is None and not self._broken:
            self._start_pool()

    def _start_pool(self) -> None:
        try:
            self._pool = (ThreadPoolExecutor(self.processes, thread_name_prefix="parse-ahead") if self.threads
                          else ReaderProcesses(self.processes, self.reader_command))
        except OSError as error:  # a reader process could not start
            self._give_up(error)

    def _hand_over(self) -> None:
        mails, self._waiting, size = self._waiting, [], self._waiting_bytes
        self._waiting_bytes = 0
        if self._pool is None:
            if self._pulled <= self.start_after:
                return  # (a short stream: read here, no process started)
            self._start_pool()
            if self._pool is None:
                return
        try:
            future = (self._pool.submit(_parse_list, mails, self.max_bytes) if self.threads else
                      self._pool.submit(mails, self.max_bytes))
        except (BrokenProcessPool, RuntimeError) as error:
            self._give_up(error)
            return
        chunk = _Chunk(mails, future)
        self._chunks.append(chunk)
        self.handed_over += len(mails)
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
        waiting = list(chunks.values())
        # the pool starts chunks in order: take them back from the end one at a time, each read
        # here at once, until the pool has started the last one left (it reads from the front)
        while waiting and waiting[-1].future.cancel():
            chunk = waiting.pop()
            chunk.readings = [parse_mail(mail, max_bytes=self.max_bytes) for mail in chunk.mails]
            self.read_here += len(chunk.mails)
        for chunk in waiting:
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
