"""A key's counts as bytes (stream_nb.keyed.codec): exact round trips on generated states, and
untrusted bytes refused with one line, never allocated before they are sized."""

from __future__ import annotations

import math
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_nb.keyed.codec import decode_key_counts, encode_key_counts
from stream_nb.model.personal import InvalidKeyState, KeyCounts

counts = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)


@st.composite
def key_counts(draw, max_classes=4):
    n = draw(st.integers(1, max_classes))
    names = draw(st.lists(st.text(min_size=0, max_size=12).filter(lambda t: t.encode("utf-8", "surrogatepass") and
                                                                  not any(0xD800 <= ord(ch) <= 0xDFFF for ch in t)),
                          max_size=20, unique=True))
    own = KeyCounts(n, draw(st.integers(0, 2**63 - 1)))
    for name in names:
        own.features[name] = [draw(counts) for _ in range(n)]
    own.class_totals = [math.fsum(row[c] for row in own.features.values()) for c in range(n)]
    own.class_counts = [draw(counts) + (1.0 if own.class_totals[c] > 0 else 0.0) for c in range(n)]
    return own


def same(a: KeyCounts, b: KeyCounts) -> bool:
    return (list(a.features.items()) == list(b.features.items()) and a.class_counts == b.class_counts
            and a.class_totals == b.class_totals and a.last_labeled == b.last_labeled)


@settings(max_examples=300, deadline=None)
@given(key_counts())
def test_a_round_trip_gives_back_the_same_counts_to_the_bit(own):
    data = encode_key_counts(own)
    back = decode_key_counts(data, len(own.class_counts))
    assert same(back, own)
    assert encode_key_counts(back) == data


def test_the_layout_is_the_documented_one():
    own = KeyCounts(2, 7)
    own.features = {"fun": [2.0, 0.0], "né": [0.5, 1.0]}
    own.class_counts, own.class_totals = [1.0, 1.0], [2.5, 1.0]
    data = encode_key_counts(own)
    expected = (b"SNK1" + struct.pack("<IIQ", 2, 2, 7) + struct.pack("<2d", 1.0, 1.0) + struct.pack("<2d", 2.5, 1.0)
                + struct.pack("<4d", 2.0, 0.0, 0.5, 1.0) + struct.pack("<I", 3) + b"fun" + struct.pack("<I", 3)
                + "né".encode())
    assert data == expected


def test_a_key_written_before_a_class_was_added_is_widened():
    own = KeyCounts(2, 3)
    own.features = {"a": [1.0, 2.0]}
    own.class_counts, own.class_totals = [1.0, 1.0], [1.0, 2.0]
    back = decode_key_counts(encode_key_counts(own), 3)
    assert back.features == {"a": [1.0, 2.0, 0.0]} and back.class_counts == [1.0, 1.0, 0.0]
    with pytest.raises(InvalidKeyState, match="has 2 classes; the model has 1"):
        decode_key_counts(encode_key_counts(own), 1)


def valid() -> bytes:
    own = KeyCounts(2, 5)
    own.features = {"offer": [3.0, 1.0], "lunch": [0.0, 2.0]}
    own.class_counts, own.class_totals = [2.0, 1.0], [3.0, 3.0]
    return encode_key_counts(own)


def test_every_truncation_and_every_trailing_byte_is_refused():
    data = valid()
    for end in range(len(data)):
        with pytest.raises(InvalidKeyState):
            decode_key_counts(data[:end], 2)
    with pytest.raises(InvalidKeyState, match="1 bytes after its last feature name"):
        decode_key_counts(data + b"\0", 2)


def patched(offset: int, fmt: str, *values) -> bytes:
    data = bytearray(valid())
    struct.pack_into(fmt, data, offset, *values)
    return bytes(data)


@pytest.mark.parametrize("data, message", [
    (b"SNK2" + valid()[4:], "starts with"),
    (patched(4, "<I", 0), "has 0 classes"),
    (patched(8, "<I", 2**32 - 1), "more than its"),
    (patched(20, "<d", math.nan), "finite"),
    (patched(20, "<d", -1.0), "finite"),
    (patched(36, "<d", 99.0), "is not the sum"),
    (patched(52, "<d", math.inf), "finite"),
    (patched(20, "<d", 0.0), "feature counts but no events"),
    (valid().replace(b"lunch", b"offer"), "twice"),
    (valid().replace(b"lunch", b"lu\xffch"), "not UTF-8"),
    (patched(len(valid()) - 9, "<I", 2**31), "feature name of"),
    ("text", "is bytes"),
])
def test_hostile_values_are_refused_with_one_line(data, message):
    with pytest.raises(InvalidKeyState, match=message) as refused:
        decode_key_counts(data, 2)
    assert "\n" not in str(refused.value)


def test_a_declared_size_allocates_nothing_before_it_is_checked():
    data = patched(8, "<I", 2**32 - 1)  # 4 billion features: 64 GiB of counts if believed
    tracemalloc.start()
    try:
        with pytest.raises(InvalidKeyState):
            decode_key_counts(data, 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 255))
def test_a_flipped_byte_is_refused_or_reads_back_as_exactly_those_bytes(position, value):
    data = bytearray(valid())
    data[position % len(data)] = value
    try:
        own = decode_key_counts(bytes(data), 2)
    except InvalidKeyState:
        return
    assert encode_key_counts(own) == bytes(data)


# ---- a key in records of bounded size --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(key_counts(), st.integers(0, 3), st.data())
def test_a_key_split_into_a_head_and_row_records_comes_back_to_the_bit(own, rewrites, data):
    """Any split of the names between the head and row records, with rows written again later
    (a later row replaces an earlier one), gives back the same counts; every record is within
    ROWS_BYTES or one row."""
    from stream_nb.keyed import codec

    names = list(own.features)
    in_head = data.draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    rest = [name for name in names if name not in in_head]
    again = [data.draw(st.lists(st.sampled_from(names), unique=True)) if names else [] for _ in range(rewrites)]
    records = codec.encode_rows(own, rest)
    for chosen in again:
        records += codec.encode_rows(own, chosen)
    head = codec.decode_head(codec.encode_head(own, 5, 5 + len(records), 0, in_head), len(own.class_counts))
    back = codec.key_counts_of_records(head, records, len(own.class_counts))
    assert back.features == own.features and back.class_counts == own.class_counts
    assert back.class_totals == own.class_totals and back.last_labeled == own.last_labeled
    assert back.touched == set()  # as on disk: nothing to write
    n = len(own.class_counts)
    for record in records:
        names_in, _ = codec.decode_rows(record, n)
        assert len(record) <= codec.ROWS_BYTES + 12 or len(names_in) == 1


def test_row_records_are_cut_at_rows_bytes_and_a_longer_row_is_a_record_alone(monkeypatch):
    from stream_nb.keyed import codec

    monkeypatch.setattr(codec, "ROWS_BYTES", 100)
    own = KeyCounts(2, 0)
    for name in ("a" * 10, "b" * 10, "c" * 10, "d" * 200, "e"):
        own.add({name: 1.0}, 0, 1.0)
    records = codec.encode_rows(own, list(own.features))
    # rows of 4 + 10 + 16 = 30 bytes: three fit in 100; the 220-byte row is alone
    assert [codec.decode_rows(r, 2)[0] for r in records] == [["a" * 10, "b" * 10, "c" * 10], ["d" * 200], ["e"]]


def test_record_keys_name_their_key_and_part_whatever_the_key_holds():
    from stream_nb.keyed.codec import HEAD_PART, record_key, split_record_key

    for key in (b"u", "ü\x00\x00\x00\x00\x00\x00\x00\x00\x01".encode(), b"\x00" * 12):
        for part in (0, 1, 2**40, HEAD_PART):
            assert split_record_key(record_key(key, part)) == (key, part)
    for bad in (b"", b"u", b"u" + b"\x01" * 9, b"\x00" * 8):
        with pytest.raises(InvalidKeyState):
            split_record_key(bad)


def test_hostile_heads_and_row_records_are_refused_before_anything_is_allocated():
    from stream_nb.keyed import codec

    own = KeyCounts(2, 3)
    own.add({"offer": 2.0, "lunch": 1.0}, 0, 1.0)
    head = codec.encode_head(own, 0, 0, 0, list(own.features))
    rows = codec.encode_rows(own, list(own.features))[0]
    for end in range(len(head)):
        with pytest.raises(InvalidKeyState):
            codec.decode_head(head[:end], 2)
    for end in range(len(rows)):
        with pytest.raises(InvalidKeyState):
            codec.decode_rows(rows[:end], 2)
    huge = struct.pack("<4sIQQQQI", b"SNH1", 2, 0, 0, 0, 0, 2**32 - 1) + b"\x00" * 32
    tracemalloc.start()
    with pytest.raises(InvalidKeyState, match="more than its"):
        codec.decode_head(huge, 2)
    with pytest.raises(InvalidKeyState, match="more than its"):
        codec.decode_rows(struct.pack("<4sII", b"SNR1", 2, 2**32 - 1), 2)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 100_000
    with pytest.raises(InvalidKeyState, match="out of range"):
        codec.decode_head(struct.pack("<4sIQQQQI", b"SNH1", 2, 0, 5, 4, 0, 0) + b"\x00" * 32, 2)
    with pytest.raises(InvalidKeyState, match="names 2 row records, 1 are there"):
        codec.key_counts_of_records(codec.decode_head(codec.encode_head(own, 0, 2, 0, []), 2), [rows], 2)
    name = "n" * 4097  # one byte over what a key keeps
    long_name = struct.pack("<4sII", b"SNR1", 2, 1) + struct.pack("<2d", 1.0, 0.0) + struct.pack("<I", 4097) + name.encode()
    with pytest.raises(InvalidKeyState, match="more than a key keeps"):
        codec.decode_rows(long_name, 2)
    split_char = struct.pack("<4sII", b"SNR1", 2, 2) + struct.pack("<4d", 1.0, 0.0, 1.0, 0.0) + struct.pack("<2I", 1, 1) \
        + "é".encode()  # two names cut inside one character
    with pytest.raises(InvalidKeyState, match="not UTF-8"):
        codec.decode_rows(split_char, 2)
    non_ascii = struct.pack("<4sII", b"SNR1", 2, 2) + struct.pack("<4d", 1.0, 0.0, 1.0, 0.0) + struct.pack("<2I", 1, 2) \
        + "aé".encode()
    assert codec.decode_rows(non_ascii, 2)[0] == ["a", "é"]


def test_a_key_keeps_no_name_longer_than_1024_characters():
    """A longer name (a run-on token) counts in the global model only, so a row has a bounded size."""
    own = KeyCounts(2, 0)
    own.add({"x" * 1025: 3.0, "y" * 1024: 2.0, "z": 1.0}, 1, 1.0)
    assert list(own.features) == ["y" * 1024, "z"] and own.class_totals == [0.0, 3.0]
