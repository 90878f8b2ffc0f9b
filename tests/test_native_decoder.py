"""The C event decoder (stream_nb.events._codec.decode_event) against codec.py's decoder.

The C decoder takes the values of the common shape and must make the Event the Python decoder
makes of them, field for field and type for type; every other value it declines (None) and
codec.py decides it, so a value the contract refuses is never taken. Each test compares with the
Python decoder run with the extensions switched off. Where the extension is not built these tests
skip (under CI=true they fail).
"""

from __future__ import annotations

import json
import random

import pytest

from stream_nb.events import codec
from stream_nb.events.codec import Event, Rejected, SourcePosition, decode_record

from corpora import load_sms_spam
from native import require_extension

SOURCE = SourcePosition("events", 3, 17)
MAX_BYTES = 1_048_576


@pytest.fixture
def native():
    require_extension(codec._native_codec, "stream_nb.events._codec")
    return codec._native_codec


def in_python(value: bytes, labeled: bool, max_bytes: int = MAX_BYTES) -> Event | Rejected:
    return codec._decode_or_reject(value, b"k", (), SOURCE, labeled, max_bytes)


def in_c(native, value, labeled: bool, max_bytes: int = MAX_BYTES) -> Event | None:
    return native.decode_event(value, labeled, max_bytes, SOURCE, Event)


def same_event(got: Event, expected: Event) -> bool:
    fields = ("id", "text", "features", "label", "source", "mail", "unlearn", "key")
    return type(got) is Event and all(
        getattr(got, name) == getattr(expected, name) and type(getattr(got, name)) is type(getattr(expected, name))
        for name in fields)


def check(native, value: bytes, labeled: bool) -> Event | None:
    """The C decoder declines `value` or makes exactly the Python decoder's Event of it."""
    made, expected = in_c(native, value, labeled), in_python(value, labeled)
    if made is not None:
        assert type(expected) is Event, (value, expected)
        assert same_event(made, expected), (value, made, expected)
    return made


def test_every_sms_message_is_taken_and_made_alike(native):
    rows = load_sms_spam()
    taken = 0
    for i, (label, text) in enumerate(rows):
        for ascii_only in (True, False):
            labeled = json.dumps({"id": f"sms-{i}", "text": text, "label": label}, ensure_ascii=ascii_only).encode()
            unlabeled = json.dumps({"text": text, "id": f"sms-{i}"}, ensure_ascii=ascii_only).encode()
            taken += check(native, labeled, True) is not None
            taken += check(native, unlabeled, False) is not None
    assert taken == 4 * len(rows) == 22_296


@pytest.mark.parametrize("value, labeled, label", [
    (b'{"id":"a","text":"t","label":"spam"}', True, "spam"),
    (b'{"id":"a","text":"t","label":7}', True, 7),
    (b'{"id":"a","text":"t","label":-12}', True, -12),
    (b'{"id":"a","text":"t","label":-0}', True, 0),
    (b'{"id":"a","text":"t","label":999999999999999999}', True, 999_999_999_999_999_999),
    (b' \t\r\n{ "label" : "ham" , "text" :"" ,"id": "a" }\n ', True, "ham"),
    (b'{"id":"\\u00e9\\ud83d\\ude00\\"\\\\\\/\\b\\f\\n\\r\\t","text":"\\u0000"}', False, None),
    ('{"id":"é😀","text":"日本語 \x7f"}'.encode(), False, None),
    (b'{"id":"a","text":"t","label":"spam","unlearn":"ham"}', True, "spam"),
    (b'{"unlearn":-7,"id":"a","text":"t"}', True, None),  # a take-back only
    (b'{"id":"a","text":"t","label":1,"unlearn":"1"}', True, 1),
])
def test_what_the_c_decoder_takes(native, value, labeled, label):
    made = check(native, value, labeled)
    assert made is not None and made.label == label and type(made.label) is type(label)


@pytest.mark.parametrize("value, unlearn", [
    (b'{"id":"a","text":"t","label":"spam","unlearn":"ham"}', "ham"),
    (b'{"unlearn":-7,"id":"a","text":"t"}', -7),
    (b'{"id":"a","text":"t","label":1,"unlearn":"1"}', "1"),
    (b'{"id":"a","text":"t","label":"ham"}', None),
])
def test_the_c_decoder_keeps_unlearn_with_its_type(native, value, unlearn):
    made = check(native, value, True)
    assert made is not None and made.unlearn == unlearn and type(made.unlearn) is type(unlearn)


@pytest.mark.parametrize("value, labeled, reason", [
    (b'{"id":"a","text":"t","id":"b"}', False, "duplicate_key"),
    (b'{"id":"a","text":"t","label":"x"}', False, "label_on_unlabeled_topic"),
    (b'{"id":"a","text":"t"}', True, "missing_label"),
    (b'{"id":"a","text":"t","label":""}', True, "empty_label"),
    (b'{"id":"a","text":"t","label":1.0}', True, "label_type"),
    (b'{"id":"a","text":"t","label":true}', True, "label_type"),
    (b'{"id":"","text":"t"}', False, "empty_id"),
    (b'{"id":1,"text":"t"}', False, "id_not_string"),
    (b'{"text":"t"}', False, "missing_id"),
    (b'{"id":"a"}', False, "no_text_or_features"),
    (b'{"id":"a","text":null}', False, "no_text_or_features"),
    (b'{"id":"a","text":"\\ud800"}', False, "lone_surrogate"),
    (b'{"id":"a","text":"\\udc00x"}', False, "lone_surrogate"),
    (b'{"id":"a","text":"\\ud800\\u0041"}', False, "lone_surrogate"),
    (b'{"id":"a","text":"\xff"}', False, "invalid_utf8"),
    (b'{"id":"a","text":"\xed\xa0\x80"}', False, "invalid_utf8"),  # an encoded surrogate
    (b'{"id":"a","text":"\xc3\\u00a9"}', False, "invalid_utf8"),  # a cut sequence, then an escape
    (b'\xef\xbb\xbf{"id":"a","text":"t"}', False, "utf8_bom"),
    (b'{"id":"a","text":"t\x01"}', False, "invalid_json"),
    (b'{"id":"a","text":"\\x41"}', False, "invalid_json"),
    (b'{"id":"a","text":"\\u12"}', False, "invalid_json"),
    (b'{"id":"a","text":"t",}', False, "invalid_json"),
    (b'{"id":"a","text":"t"} x', False, "invalid_json"),
    (b'{"id":"a","text":"t"', False, "invalid_json"),
    (b'{"id":"a","text":"t}', False, "invalid_json"),
    (b'{"id":"a","text":"t","label":01}', True, "invalid_json"),
    (b'{"id":"a","text":"t","label":-}', True, "invalid_json"),
    (b'{"id":"a","text":"t","label":"x","unlearn":""}', True, "invalid_unlearn"),
    (b'{"id":"a","text":"t","label":"x","unlearn":1.5}', True, "invalid_unlearn"),
    (b'{"id":"a","text":"t","label":"x","unlearn":"x"}', True, "unlearn_is_label"),
    (b'{"id":"a","text":"t","label":7,"unlearn":7}', True, "unlearn_is_label"),
    (b'{"id":"a","text":"t","unlearn":"x"}', False, "unlearn_on_unlabeled_topic"),
    (b'{"id":"a","text":"t","unlearn":"x","unlearn":"y"}', True, "duplicate_key"),
    (b'{"id":"a","text":"t","label":"x","unlearn":"\\udc00"}', True, "lone_surrogate"),
    (b'{"id":"a","key":1,"text":"t"}', False, "key_not_string"),
    (b'{"id":"a","key":"","text":"t","label":"x"}', True, "empty_key"),
    (b'{"id":"a","key":"\\ud800","text":"t"}', False, "lone_surrogate"),
    (b'[]', False, "not_an_object"),
    (b'', False, "empty_value"),
    (b'{"id":"a","text":"' + b"x" * 64 + b'"}', False, "too_large"),
])
def test_what_the_contract_refuses_the_c_decoder_declines(native, value, labeled, reason):
    assert in_c(native, value, labeled, max_bytes=64) is None
    refused = in_python(value, labeled, max_bytes=64)
    assert type(refused) is Rejected and refused.reason == reason


@pytest.mark.parametrize("value, labeled", [
    (b'{"id":"a","text":"t","extra":1}', False),  # valid, but not the common shape
    (b'{"id":"a","features":{"x":1}}', False),
    (b'{"id":"a","text":"t","label":null}', False),
    (b'{"id":"a","text":"t","label":null,"unlearn":"x"}', True),  # a null label is codec.py's to read
    (b'{"\\u0069d":"a","text":"t"}', False),  # an escaped spelling of "id"
    (b'{"id":"a","text":"t","label":1234567890123456789}', True),  # past 18 digits
    (b'{"id":"a","key":"u","text":"t"}', False),  # a keyed event
    (b'{"id":"a","text":"t","label":"x","key":"u"}', True),
])
def test_valid_events_of_other_shapes_are_left_to_codec_py(native, value, labeled):
    assert in_c(native, value, labeled) is None
    assert type(decode_record(value, None, None, SOURCE, labeled=labeled)) is Event


@pytest.mark.parametrize("value, labeled", [
    (b'{"id":"a","key":"user-7","text":"t"}', False),
    (b'{"id":"a","text":"t","label":"ham","key":"user-7"}', True),
    (b'{"key":"mailbox","id":"a","text":"t","label":3,"unlearn":"3"}', True),
    (b'{"id":"a","key":null,"text":"t"}', False),
    (b'{"id":"a","text":"t"}', False),  # no key: the C decoder takes it, its Event's key is None
])
def test_a_keyed_event_decodes_alike_with_the_switch_on_and_off(native, monkeypatch, value, labeled):
    """The C decoder declines an object with "key" (not one of its four names), so codec.py
    makes the Event with its key; an Event the C decoder makes has key None (not unset)."""
    on = decode_record(value, b"k", None, SOURCE, labeled=labeled)
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    off = decode_record(value, b"k", None, SOURCE, labeled=labeled)
    assert type(on) is Event and on == off and same_event(on, off)
    assert on.key == json.loads(value).get("key")
    made = in_c(native, value, labeled)
    assert (made is None) == (b'"key"' in value)
    if made is not None:
        assert made.key is None and made == off


@pytest.mark.parametrize("digits", [18, 19, 20, 21, 25, 40])
@pytest.mark.parametrize("sign", ["", "-"])
def test_long_integer_labels_are_read_exactly(native, digits, sign):
    """Up to 18 digits the C decoder reads the label (a long long holds it); past that it declines
    before its product overflows (undefined behaviour that `make sanitize` reports) and codec.py
    reads Python's exact int. The numbers are written out digit by digit, not computed."""
    text = "9" * digits if digits % 2 else ("1234567890" * 4)[:digits]
    value = f'{{"id":"a","text":"t","label":{sign}{text}}}'.encode()
    expected = int(sign + text)
    made = in_c(native, value, True)
    if digits <= 18:
        assert made is not None and made.label == expected
    else:
        assert made is None  # a wrapped long long would be taken here, with a wrong label
    event = decode_record(value, None, None, SOURCE, labeled=True)
    assert type(event) is Event and event.label == expected and type(event.label) is int
    assert str(abs(event.label)) == text


def mutations(value: bytes, rng: random.Random, count: int):
    """`count` variants of `value` with one to three bytes deleted, replaced or inserted, the new
    bytes drawn from the ones that matter to a JSON reader."""
    alphabet = b'{}[]:,"\\ \t\n01-.eEuUdDcC8fF\x00\x1f\x7f\x80\xbf\xc3\xed\xef\xf4\xff'
    for _ in range(count):
        data = bytearray(value)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data) + 1)
            action = rng.randrange(3)
            if action == 0 and at < len(data):
                del data[at]
            elif action == 1 and at < len(data):
                data[at] = rng.choice(alphabet)
            else:
                data.insert(at, rng.choice(alphabet))
        yield bytes(data)


def test_mutated_values_are_declined_or_made_alike(native):
    rng = random.Random(20261125)
    seeds = [
        b'{"id":"a1","text":"Free entry \\u00a3100 \\ud83d\\ude00 \\"now\\"\\n","label":"spam"}',
        b'{"id":"a2","text":"caf\xc3\xa9 \xe2\x82\xac5","label":3}',
        b'{ "text" : "ok\\tthen" , "id" : "b" }',
        b'{"id":"c","text":"","label":-40}',
    ]
    taken = declined = 0
    for seed in seeds:
        for value in mutations(seed, rng, 5_000):
            for labeled in (True, False):
                made = check(native, value, labeled)
                taken += made is not None
                declined += made is None
    # both outcomes are exercised: a decoder that declined everything would pass check() alone
    assert taken > 1_500 and declined > 30_000, (taken, declined)


def test_mutated_corrections_are_declined_or_made_alike(native):
    rng = random.Random(24)
    seeds = [
        b'{"id":"c1","text":"Free \\u00a3100","label":"spam","unlearn":"ham"}',
        b'{"unlearn":12,"id":"c2","text":"t"}',
        b'{"id":"c3","text":"x","label":3,"unlearn":"3"}',
        b'{"id":"c4","text":"x","label":"ham","unlearn":"ham"}',  # refused: its mutations may be taken
    ]
    taken = declined = with_unlearn = 0
    for seed in seeds:
        for value in mutations(seed, rng, 5_000):
            for labeled in (True, False):
                made = check(native, value, labeled)
                taken += made is not None
                declined += made is None
                with_unlearn += made is not None and made.unlearn is not None
    assert with_unlearn > 1_000 and declined > 30_000, (taken, with_unlearn, declined)


def test_switched_off_it_is_not_called_and_a_batch_decodes_alike(native, monkeypatch):
    calls: list = []

    class Spy:
        @staticmethod
        def decode_event(*args):
            calls.append(args[0])
            return native.decode_event(*args)

    monkeypatch.setattr(codec, "_native_codec", Spy)
    value = b'{"id":"a","text":"t","label":"ham"}'
    records = [(value, None, None, SOURCE), (b"[]", b"k", [("h", b"v")], SOURCE)]
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    python_only = codec.decode_records(records, labeled=True)
    assert calls == []
    monkeypatch.delenv("STREAM_NB_NATIVE")
    events, rejected = codec.decode_records(records, labeled=True)
    assert calls == [value, b"[]"]
    assert same_event(events[0], python_only[0][0]) and len(events) == 1
    assert rejected == python_only[1]
    assert [(r.reason, r.key, r.headers) for r in rejected] == [("not_an_object", b"k", (("h", b"v"),))]


def test_arguments_of_the_wrong_kind_are_declined_or_refused(native):
    assert native.decode_event(None, False, MAX_BYTES, SOURCE, Event) is None
    assert native.decode_event(bytearray(b'{"id":"a","text":"t"}'), False, MAX_BYTES, SOURCE, Event) is None
    with pytest.raises(TypeError):
        native.decode_event(b"{}", False, MAX_BYTES, SOURCE)
    with pytest.raises(TypeError):
        native.decode_event(b"{}", False, "many", SOURCE, Event)
