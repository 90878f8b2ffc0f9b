"""One key's counts <-> bytes: the value of a per-key store and of its changelog topic.

A key's state (stream_nb.model.personal.KeyCounts) is written in a fixed binary layout rather
than JSON: in a first measurement of 1,000,000 keys of 50 features (a layout like this one,
names joined by NUL), 3.9 us to encode and 4.9 us to decode against 27.7 and 27.6 for compact
JSON, about the same size (1,556 bytes against 1,382, and 2,353 for JSON once counts are
fractional), and the counts come back as the same float64 bits. Layout, little-endian, nothing between the parts:

    magic      4 bytes  b"SNK1" (the layout's version)
    n_classes  u32      C: the global model's classes when written (a key may have fewer
                        classes than the model has now: new classes come last)
    n_features u32      F
    last       u64      the labeled clock at the key's latest labeled event
    counts     f64 * C  N_c,k
    totals     f64 * C  T_c,k
    features   f64 * F*C  N_fc,k, row after row, in the order of the names
    names      F times: u32 length, then that many bytes of UTF-8

The bytes come from a topic or a disk and are untrusted: every length is checked against the
bytes left before anything is allocated, the names must be UTF-8 and distinct, and the state
must pass the key's invariants (stream_nb.model.personal: finite counts >= 0, T_c,k the sum
of its feature counts, ...). A refusal is an InvalidKeyState with one line.

That whole-key layout is the canonical form (a store's digest hashes it). What a store and its
changelog hold is a key split into records of bounded size, so that a key of millions of
features is never one record larger than a topic takes, and a flush writes what changed rather
than the whole key:

    head   record key  key + b"\0" + u64 2**64-1 (big-endian)
           value       magic b"SNH1", n_classes u32, last u64, first u64, next u64, base u64,
                       n_rows u32, counts f64*C, totals f64*C, rows f64*R*C, names
    rows   record key  key + b"\0" + u64 s for first <= s < next
           value       magic b"SNR1", n_classes u32, n_rows u32, rows f64*R*C, names

    ids    record key  key + b"\0" + u64 s for first <= s < next (the same run as the rows)
           value       magic b"SNI1", n_ids u32, classes i32*n, weights f64*n, lengths u32*n, ids

where names are R u32 lengths, then the R names' UTF-8 one after another (so a decoder reads the
lengths as one array and, for ASCII names, cuts one decoded string: a key of millions of features
is restored at array speed). An ids record holds part of the key's memory of learned ids (the
class index each id was learned as, TAKEN_BACK = -1 once taken back, and its weight), in the
order first learned; a later entry of an id replaces an earlier one in its place.

A key's rows are the head's own (a small key: one record, nothing else) and those of the
row records first .. next-1 applied in that order, a later row of a name replacing an earlier
one. `base` is the bytes of the last full write, after which row records only add; the
store writes the key whole again (new row records, the old ones' tombstones) once those
records outgrow it, so a restore reads at most about twice a key's size. A row record holds
at most ROWS_BYTES of rows, or a single row larger than that (a name is at most
MAX_KEY_NAME_CHARS characters, so a row, and every record, has a bounded size).
"""

from __future__ import annotations

import struct

import numpy as np

from stream_nb.model.personal import (
    MAX_KEY_ID_CHARS,
    MAX_KEY_NAME_CHARS,
    TAKEN_BACK,
    InvalidKeyState,
    KeyCounts,
    key_counts_of_arrays,
)

MAGIC = b"SNK1"
_HEADER = struct.Struct("<4sIIQ")
_LENGTH = struct.Struct("<I")
MAX_CLASSES = 10_000  # [model] max_classes' highest value
MAX_NAME_BYTES = 4 * MAX_KEY_NAME_CHARS  # the UTF-8 of the longest name a key keeps

HEAD_MAGIC, ROWS_MAGIC, IDS_MAGIC = b"SNH1", b"SNR1", b"SNI1"
HEAD_PART = 2**64 - 1  # the part number of a key's head record
_HEAD = struct.Struct("<4sIQQQQI")  # magic, n_classes, last, first, next, base, n_rows
_ROWS = struct.Struct("<4sII")  # magic, n_classes, n_rows
_IDS = struct.Struct("<4sI")  # magic, n_ids
_PART = struct.Struct(">Q")  # big-endian: a key's records sort by part, the head last
ROWS_BYTES = 256 * 1024  # a row record's rows, about (one row larger than this is a record alone)


def encode_key_counts(own: KeyCounts) -> bytes:
    """The bytes of one key's counts (see the module docstring)."""
    names = list(own.index)
    n_classes = len(own.class_counts)
    return b"".join([_HEADER.pack(MAGIC, n_classes, len(names), own.last_labeled),
                     np.asarray(own.class_counts, dtype="<f8").tobytes(),
                     np.asarray(own.class_totals, dtype="<f8").tobytes(), *_rows_parts(names, own, n_classes)])


def decode_key_counts(data: bytes, n_classes: int | None) -> KeyCounts:
    """The KeyCounts of `encode_key_counts`'s bytes, checked, widened to the model's
    `n_classes` (None: as many classes as written, up to MAX_CLASSES, e.g. to check a changelog
    before the model has learned its classes); InvalidKeyState (one line) for anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidKeyState(f"a key's state is bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < _HEADER.size:
        raise InvalidKeyState(f"a key's state of {len(view)} bytes is shorter than its {_HEADER.size}-byte header")
    magic, classes, features, last = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise InvalidKeyState(f"a key's state starts with {bytes(magic)!r}, not {MAGIC!r}")
    if not 1 <= classes <= min(MAX_CLASSES if n_classes is None else n_classes, MAX_CLASSES):
        raise InvalidKeyState(f"a key's state has {classes} classes; the model has {n_classes}")
    position = _HEADER.size
    numbers = classes * (2 + features)
    if numbers * 8 > len(view) - position:  # checked before anything is allocated
        raise InvalidKeyState(f"a key's state declares {features} features of {classes} classes, more than its "
                              f"{len(view)} bytes hold")
    values = np.frombuffer(view, dtype="<f8", count=numbers, offset=position)
    position += numbers * 8
    names = []
    for _ in range(features):
        if len(view) - position < _LENGTH.size:
            raise InvalidKeyState("a key's state ends inside its feature names")
        (length,) = _LENGTH.unpack_from(view, position)
        position += _LENGTH.size
        if length > MAX_NAME_BYTES or length > len(view) - position:
            raise InvalidKeyState(f"a key's state declares a feature name of {length} bytes, more than it holds")
        try:
            names.append(str(view[position:position + length], "utf-8"))
        except UnicodeDecodeError:
            raise InvalidKeyState("a key's state holds a feature name that is not UTF-8") from None
        position += length
    if position != len(view):
        raise InvalidKeyState(f"a key's state has {len(view) - position} bytes after its last feature name")
    if len(set(names)) != len(names):
        raise InvalidKeyState("a key's state names a feature twice")
    own = key_counts_of_arrays(values[:classes], values[classes:2 * classes], names,
                               values[2 * classes:].reshape(features, classes), last)
    if n_classes is not None:
        own.widen(n_classes)
    return own


# ---- a key in records of bounded size ------------------------------------------------------------


def record_key(key: bytes, part: int) -> bytes:
    """The store's and the changelog's key of one record of `key` (HEAD_PART: its head)."""
    return key + b"\0" + _PART.pack(part)


def split_record_key(raw: bytes) -> tuple[bytes, int]:
    """(key, part) of a record key; InvalidKeyState for bytes no record key has."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) < 1 + _PART.size or raw[-1 - _PART.size] != 0:
        raise InvalidKeyState(f"a keyed-state record key ends in b'\\0' and an 8-byte part, got {bytes(raw[-16:])!r}")
    return bytes(raw[:-1 - _PART.size]), _PART.unpack_from(raw, len(raw) - _PART.size)[0]


class KeyHead:
    """A key's head record, decoded and checked: the class counts and totals, the labeled
    clock, its row records `first` .. `next`-1, the bytes `base` of its last full write, and its
    own rows (how many bytes of row records came since is not stored: the records' sizes say)."""

    __slots__ = ("n_classes", "last", "first", "next", "base", "counts", "totals", "names", "rows")

    def __init__(self, n_classes, last, first, next_, base, counts, totals, names, rows) -> None:
        self.n_classes, self.last, self.first, self.next, self.base = n_classes, last, first, next_, base
        self.counts, self.totals, self.names, self.rows = counts, totals, names, rows


def row_bytes(name: str, n_classes: int) -> int:
    """The bytes one row takes in a record: its name's length, its name, its counts."""
    return _LENGTH.size + len(name.encode("utf-8")) + 8 * n_classes


def _rows_parts(names: list, own: KeyCounts, n_classes: int) -> list[bytes]:
    """SNK1's rows: the counts, then each name as u32 length and UTF-8."""
    if not names:
        return []
    parts = [np.ascontiguousarray(own.matrix[own.rows_of(names)], dtype="<f8").tobytes()]
    for name in names:
        encoded = name.encode("utf-8")
        parts.append(_LENGTH.pack(len(encoded)))
        parts.append(encoded)
    return parts


def _packed_rows(names: list, encoded: list, own: KeyCounts) -> bytes:
    """A head's or row record's rows: the counts, the names' lengths, the names."""
    if not names:
        return b""
    return b"".join([np.ascontiguousarray(own.matrix[own.rows_of(names)], dtype="<f8").tobytes(),
                     np.fromiter(map(len, encoded), dtype="<u4", count=len(encoded)).tobytes(), *encoded])


def encode_head(own: KeyCounts, first: int, next_: int, base: int, names: list) -> bytes:
    """The head record of `own`, holding the rows of `names` (all of a small key's, or none)."""
    n_classes = len(own.class_counts)
    encoded = [name.encode("utf-8") for name in names]
    return b"".join([_HEAD.pack(HEAD_MAGIC, n_classes, own.last_labeled, first, next_, base, len(names)),
                     np.asarray(own.class_counts, dtype="<f8").tobytes(),
                     np.asarray(own.class_totals, dtype="<f8").tobytes(), _packed_rows(names, encoded, own)])


def encode_rows(own: KeyCounts, names: list) -> list[bytes]:
    """The row records of `names` (rows of `own`), in that order, each at most ROWS_BYTES of
    rows or one row alone."""
    if not names:
        return []
    n_classes = len(own.class_counts)
    encoded = [name.encode("utf-8") for name in names]
    ends = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)) + (_LENGTH.size + 8 * n_classes))
    records, start, taken = [], 0, 0
    while start < len(names):
        stop = max(start + 1, int(np.searchsorted(ends, taken + ROWS_BYTES, side="right")))
        records.append(_ROWS.pack(ROWS_MAGIC, n_classes, stop - start)
                       + _packed_rows(names[start:stop], encoded[start:stop], own))
        taken, start = int(ends[stop - 1]), stop
    return records


def encode_ids(own: KeyCounts, ids: list) -> list[bytes]:
    """The ids records of `ids` (entries of own.learned), in that order, each at most
    ROWS_BYTES of entries."""
    if not ids:
        return []
    encoded = [event_id.encode("utf-8") for event_id in ids]
    entries = [own.learned[event_id] for event_id in ids]
    ends = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)) + 16)
    records, start, taken = [], 0, 0
    while start < len(ids):
        stop = max(start + 1, int(np.searchsorted(ends, taken + ROWS_BYTES, side="right")))
        part = entries[start:stop]
        records.append(b"".join([
            _IDS.pack(IDS_MAGIC, stop - start),
            np.fromiter((c for c, _ in part), dtype="<i4", count=len(part)).tobytes(),
            np.fromiter((w for _, w in part), dtype="<f8", count=len(part)).tobytes(),
            np.fromiter(map(len, encoded[start:stop]), dtype="<u4", count=len(part)).tobytes(),
            *encoded[start:stop]]))
        taken, start = int(ends[stop - 1]), stop
    return records


def decode_ids(data, n_classes: int) -> list[tuple[str, int, float]]:
    """(id, class index, weight) of an ids record, checked (InvalidKeyState, one line): class
    indexes below `n_classes` or TAKEN_BACK, weights finite and > 0, ids UTF-8 of at most
    MAX_KEY_ID_CHARS characters, distinct."""
    what = "a key's ids record"
    view = _bytes_view(data, what)
    if len(view) < _IDS.size:
        raise InvalidKeyState(f"{what} of {len(view)} bytes is shorter than its {_IDS.size}-byte header")
    magic, n = _IDS.unpack_from(view, 0)
    if magic != IDS_MAGIC:
        raise InvalidKeyState(f"{what} starts with {bytes(magic)!r}, not {IDS_MAGIC!r}")
    position = _IDS.size
    if 16 * n > len(view) - position:  # checked before anything is allocated
        raise InvalidKeyState(f"{what} declares {n} ids, more than its {len(view)} bytes hold")
    classes = np.frombuffer(view, dtype="<i4", count=n, offset=position)
    weights = np.frombuffer(view, dtype="<f8", count=n, offset=position + 4 * n)
    lengths = np.frombuffer(view, dtype="<u4", count=n, offset=position + 12 * n).astype(np.int64)
    position += 16 * n
    if n and (int(classes.min()) < TAKEN_BACK or int(classes.max()) >= n_classes):
        raise InvalidKeyState(f"{what} names a class outside the key's {n_classes}")
    if n and not (np.isfinite(weights).all() and (weights > 0).all()):
        raise InvalidKeyState(f"{what}: weights are finite numbers > 0")
    ids = _read_strings(view, position, lengths, MAX_KEY_ID_CHARS, what, "an id")
    if n and int(lengths.min()) == 0:
        raise InvalidKeyState(f"{what} holds an id that is empty")
    return list(zip(ids, classes.tolist(), weights.tolist()))


def _read_rows(view: memoryview, position: int, classes: int, features: int, what: str) -> tuple[list, np.ndarray]:
    """(names, counts F x C) of the rows at `position`, which must end the bytes; checked."""
    numbers = classes * features
    if (numbers * 8 + features * _LENGTH.size) > len(view) - position:  # checked before anything is allocated
        raise InvalidKeyState(f"{what} declares {features} rows of {classes} classes, more than its "
                              f"{len(view)} bytes hold")
    values = np.frombuffer(view, dtype="<f8", count=numbers, offset=position).reshape(features, classes)
    position += numbers * 8
    lengths = np.frombuffer(view, dtype="<u4", count=features, offset=position).astype(np.int64)
    position += features * _LENGTH.size
    names = _read_strings(view, position, lengths, MAX_KEY_NAME_CHARS, what, "a feature name")
    bad = ~(np.isfinite(values) & (values >= 0))
    if bad.any():
        raise InvalidKeyState(f"{what}: counts are finite numbers >= 0, got {values[bad][0]!r}")
    return names, values


def _read_strings(view: memoryview, position: int, lengths: np.ndarray, max_chars: int, what: str,
                  noun: str) -> list[str]:
    """The strings whose UTF-8 `lengths` (int64) give, from `position` to the end of the bytes,
    checked: the lengths fill the bytes exactly, each string is UTF-8 of at most `max_chars`
    characters, none is there twice (InvalidKeyState naming `noun`)."""
    if len(lengths) and int(lengths.max()) > 4 * max_chars:
        raise InvalidKeyState(f"{what} declares {noun} of {int(lengths.max())} bytes, more than a key keeps")
    if int(lengths.sum()) != len(view) - position:
        raise InvalidKeyState(f"{what}: the lengths add up to {int(lengths.sum())} bytes, it holds "
                              f"{len(view) - position} after them")
    blob = bytes(view[position:])
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    if blob.isascii():  # one decode, cut where the lengths say (an ASCII byte is one character)
        longest = int(lengths.max()) if len(lengths) else 0
        text = blob.decode("ascii")
        strings = [text[a:b] for a, b in zip(starts, ends)]
    else:
        try:
            strings = [blob[a:b].decode("utf-8") for a, b in zip(starts, ends)]
        except UnicodeDecodeError:
            raise InvalidKeyState(f"{what} holds {noun} that is not UTF-8") from None
        longest = max(map(len, strings), default=0)
    if longest > max_chars:
        raise InvalidKeyState(f"{what} holds {noun} of {longest} characters; a key keeps at most {max_chars}")
    if len(set(strings)) != len(strings):
        raise InvalidKeyState(f"{what} holds {noun} twice")
    return strings


def _bytes_view(data, what: str) -> memoryview:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidKeyState(f"{what} is bytes, got {type(data).__name__}")
    return memoryview(data).cast("B")


def _checked_classes(classes: int, n_classes: int | None, what: str) -> None:
    if not 1 <= classes <= min(MAX_CLASSES if n_classes is None else n_classes, MAX_CLASSES):
        raise InvalidKeyState(f"{what} has {classes} classes; the model has {n_classes}")


def decode_head(data, n_classes: int | None) -> KeyHead:
    """A head record's KeyHead, checked (InvalidKeyState, one line); n_classes as in decode_key_counts."""
    what = "a key's head record"
    view = _bytes_view(data, what)
    if len(view) < _HEAD.size:
        raise InvalidKeyState(f"{what} of {len(view)} bytes is shorter than its {_HEAD.size}-byte header")
    magic, classes, last, first, next_, base, features = _HEAD.unpack_from(view, 0)
    if magic != HEAD_MAGIC:
        raise InvalidKeyState(f"{what} starts with {bytes(magic)!r}, not {HEAD_MAGIC!r}")
    _checked_classes(classes, n_classes, what)
    if not first <= next_ < HEAD_PART or last >= 2**63:
        raise InvalidKeyState(f"{what} names row records {first}..{next_} and clock {last}: out of range")
    if 16 * classes > len(view) - _HEAD.size:
        raise InvalidKeyState(f"{what} of {classes} classes is longer than its {len(view)} bytes")
    sums = np.frombuffer(view, dtype="<f8", count=2 * classes, offset=_HEAD.size)
    bad = ~(np.isfinite(sums) & (sums >= 0))
    if bad.any():
        raise InvalidKeyState(f"{what}: class counts are finite numbers >= 0, got {sums[bad][0]!r}")
    names, rows = _read_rows(view, _HEAD.size + 16 * classes, classes, features, what)
    return KeyHead(classes, last, first, next_, base, sums[:classes], sums[classes:], names, rows)


def decode_rows(data, n_classes: int | None) -> tuple[list, np.ndarray]:
    """(names, counts) of a row record, checked (InvalidKeyState, one line)."""
    what = "a key's row record"
    view = _bytes_view(data, what)
    if len(view) < _ROWS.size:
        raise InvalidKeyState(f"{what} of {len(view)} bytes is shorter than its {_ROWS.size}-byte header")
    magic, classes, features = _ROWS.unpack_from(view, 0)
    if magic != ROWS_MAGIC:
        raise InvalidKeyState(f"{what} starts with {bytes(magic)!r}, not {ROWS_MAGIC!r}")
    _checked_classes(classes, n_classes, what)
    return _read_rows(view, _ROWS.size, classes, features, what)


def key_counts_of_records(head: KeyHead, row_records: list, n_classes: int | None) -> KeyCounts:
    """A key's KeyCounts from its head and its row records first .. next-1 in order (bytes),
    checked as a whole: every record, then the key's invariants (T_c,k the sum of its rows, ...).
    Widened to n_classes (None: the widest record's classes)."""
    if len(row_records) != head.next - head.first:
        raise InvalidKeyState(f"a key's head names {head.next - head.first} row records, {len(row_records)} are there")
    parts = [(head.names, head.rows)]
    id_records = []
    for data in row_records:
        if data is None:
            raise InvalidKeyState("a row record a key's head names is missing")
        if bytes(data[:4]) == IDS_MAGIC:
            id_records.append(data)
        else:
            parts.append(decode_rows(data, n_classes))
    classes = max([head.n_classes] + [rows.shape[1] for _, rows in parts])
    if n_classes is not None:
        classes = max(classes, n_classes)
    learned: dict[str, tuple[int, float]] = {}  # in the order first learned, the latest entry of each id
    for data in id_records:
        learned.update((event_id, (c, w)) for event_id, c, w in decode_ids(data, classes))
    merged: dict[str, int] = {}  # name -> its latest row in the records, in order
    blocks, offset = [], 0
    for names, rows in parts:
        merged.update(zip(names, range(offset, offset + len(names))))
        blocks.append(_widened(rows, classes))
        offset += len(names)
    stacked = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
    if len(merged) == offset:  # no row written twice (a key just written whole): the rows as they are
        names, matrix, index = list(merged), stacked, merged
    else:
        names = list(merged)
        matrix = stacked[np.fromiter(merged.values(), dtype=np.int64, count=len(merged))]
        index = None
    counts = np.concatenate([head.counts, np.zeros(classes - head.n_classes)])
    totals = np.concatenate([head.totals, np.zeros(classes - head.n_classes)])
    own = key_counts_of_arrays(counts, totals, names, matrix, head.last, index=index, names_checked=True)
    own.touched = set()
    own.learned, own.learned_touched = learned, set()
    return own


def _widened(rows: np.ndarray, classes: int) -> np.ndarray:
    if rows.shape[1] == classes:
        return rows
    wide = np.zeros((rows.shape[0], classes))
    wide[:, :rows.shape[1]] = rows
    return wide
