"""A reader of mail in a process of its own, beside a replay (stream_nb.replay.parse_ahead's
`ReaderProcesses`): the loop it runs, `serve`, and the frames it reads and writes.

A reader is a fresh interpreter running `python -m stream_nb.replay.mail_reader`. This module
imports the mail parser and nothing else (no numpy, no model, no multiprocessing), so a reader
is ready in about 60 ms where a multiprocessing spawn, which imports the whole program again,
took 250 ms; and it shares no memory with the replay, where a fork's copy-on-write faults
slowed the learner's own work. A chunk comes on its stdin as frames: (messages, max_bytes),
then each message as (length, bytes); its answer goes to stdout as (length, `parse_chunk`'s
readings, `encode_readings`). The end of stdin between two chunks ends it.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from itertools import accumulate
from typing import BinaryIO

from stream_nb.mail import ParsedMail, parse_mail

__all__ = ["CHUNK_FRAME", "LENGTH_FRAME", "NICENESS", "answer_bound", "decode_readings", "encode_readings",
           "parse_chunk", "read_exactly", "read_within", "reader_command", "run", "serve"]

# A reader runs at this niceness, so that where it and the learner's own threads want the same
# CPU, theirs come first: what a reader has not started when a batch is featurised, the learner
# reads itself (parse_ahead's take-back), so a reader that falls behind costs the learner only
# what it would have read anyway. On 2 CPUs, with mail.toml's views featurised by two threads,
# the replay took 0.85 s against 0.92 s at the learner's niceness; spam.toml's (one thread) the same.
NICENESS = 10

LENGTH_FRAME = struct.Struct("<Q")  # a message's length, an answer's length
CHUNK_FRAME = struct.Struct("<QQ")  # a chunk's messages, max_bytes


READINGS_HEAD = struct.Struct("=qq")  # readings, strs
_INT64 = array("q").itemsize == 8  # (array's "q" is 8 bytes wherever Python runs; checked, not assumed)


def parse_chunk(mails: list[bytes], max_bytes: int) -> bytes:
    """What a reader answers for a chunk: `encode_readings` of `parse_mail(mail,
    max_bytes=max_bytes)` for each mail, in order."""
    return encode_readings([parse_mail(mail, max_bytes=max_bytes) for mail in mails])


def encode_readings(readings: list[ParsedMail]) -> bytes:
    """Readings as bytes for a process of this machine (native byte order): (readings, strs),
    then each reading's (features, defects), then each str's length in code points, then the
    UTF-8 of the strs joined ('surrogatepass': every str is carried, lone surrogates too); a
    reading's strs are its subject, its body, its features and its defects, in that order.
    About half the time of JSON's writing and, in C, a fifth of its reading (JSON escapes every
    line break of a body, and its reader reads the escapes one by one)."""
    strings: list[str] = []
    counts: list[int] = []
    for reading in readings:
        strings += (reading.subject, reading.body)
        strings += reading.features
        strings += reading.defects
        counts += (len(reading.features), len(reading.defects))
    return b"".join((READINGS_HEAD.pack(len(readings), len(strings)), array("q", counts).tobytes(),
                     array("q", map(len, strings)).tobytes(), "".join(strings).encode("utf-8", "surrogatepass")))


def decode_readings(answer: bytes, count: int) -> list[ParsedMail]:
    """The `count` readings `encode_readings` made `answer` of (the definition: the C
    extension's `readings` repeats it); ValueError for any other bytes."""
    if not _INT64 or len(answer) < READINGS_HEAD.size:
        raise ValueError(f"a chunk of {count} messages came back as {len(answer)} bytes")
    n, n_strings = READINGS_HEAD.unpack_from(answer)
    if n != count or n_strings < 0:
        raise ValueError(f"a chunk of {count} messages came back as {n} readings")
    lengths_at = READINGS_HEAD.size + 16 * n
    text_at = lengths_at + 8 * n_strings
    if len(answer) < text_at:
        raise ValueError(f"a chunk's readings cut short: {len(answer)} bytes")
    counts, lengths = array("q"), array("q")
    counts.frombytes(answer[READINGS_HEAD.size:lengths_at])
    lengths.frombytes(answer[lengths_at:text_at])
    if min(counts, default=0) < 0 or 2 * n + sum(counts) != n_strings or min(lengths, default=0) < 0:
        raise ValueError("a chunk's readings do not add up")
    text = answer[text_at:].decode("utf-8", "surrogatepass")  # (UnicodeDecodeError is a ValueError)
    ends = list(accumulate(lengths))
    if (ends[-1] if ends else 0) != len(text):
        raise ValueError("a chunk's readings do not add up")
    strings = [text[start:end] for start, end in zip([0, *ends], ends)]
    readings, at = [], 0
    for features, defects in zip(counts[::2], counts[1::2]):
        readings.append(ParsedMail(strings[at], strings[at + 1], strings[at + 2:at + 2 + features],
                                   strings[at + 2 + features:at + 2 + features + defects]))
        at += 2 + features + defects
    return readings


def answer_bound(mails: list[bytes], max_bytes: int) -> int:
    """The longest answer a reader may give for a chunk of `mails`, beyond which it is refused:
    parse_mail reads at most `max_bytes` of a message, UTF-8 writes a character in at most 4
    bytes, each str has 8 bytes of length, and a message's evidence repeats some of its
    header's characters in a few names; 32 bytes a byte read, and 4,096 more a message for the
    names of an empty one. It only bounds what a broken reader can make this process hold."""
    return sum(32 * min(len(mail), max_bytes) + 4096 for mail in mails) + 64


def read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    """`size` bytes of `stream`; None at its end before the first; EOFError if it ends after."""
    data = stream.read(size)
    if not data:
        return None
    while len(data) < size:
        more = stream.read(size - len(data))
        if not more:
            raise EOFError(f"a frame cut short: {len(data)} of {size} bytes")
        data += more
    return data


def read_within(stream: BinaryIO, size: int, what: str) -> bytes:
    """`size` bytes of `stream` (none for 0) that must be there: EOFError naming `what` if the
    stream ends before them."""
    data = read_exactly(stream, size) if size else b""
    if data is None:
        raise EOFError(f"{what} cut short")
    return data


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """A child's loop: each chunk read from `stdin`, its answer written to `stdout`, until
    `stdin` ends between two chunks."""
    while (header := read_exactly(stdin, CHUNK_FRAME.size)) is not None:
        count, max_bytes = CHUNK_FRAME.unpack(header)
        mails = []
        for _ in range(count):
            size = LENGTH_FRAME.unpack(read_within(stdin, LENGTH_FRAME.size, "a chunk"))[0]
            mails.append(read_within(stdin, size, "a chunk"))
        answer = parse_chunk(mails, max_bytes)
        stdout.write(LENGTH_FRAME.pack(len(answer)))
        stdout.write(answer)
        stdout.flush()


def reader_command() -> list[str]:
    """The command of a child: this interpreter, running this module."""
    return [sys.executable, "-m", __name__]


def run() -> None:
    """A reader's life: at a lower priority, then `serve` on its stdin and stdout."""
    try:
        os.nice(NICENESS)
    except OSError:  # (a system that will not have it: the same readings, the learner's pace less kept)
        pass
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    run()
