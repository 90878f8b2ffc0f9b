"""stream_nb.events: exact decoding of good events, an exact reason for every kind of bad one,
exact prediction bytes and dead-letter headers."""

from __future__ import annotations

import json
import random
import re

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from stream_nb.events import (
    REASONS,
    Event,
    Rejected,
    SourcePosition,
    codec,
    dead_letter_headers,
    dead_letter_record,
    decode_record,
    decode_records,
    encode_prediction,
    event_from_object,
)
from stream_nb.events.codec import record_bytes_bound

SRC = SourcePosition("sms-labeled", 3, 1234)
HEADERS = [("trace-id", b"abc"), ("empty", None)]


def decode(value: bytes | None, *, labeled: bool = True, **kwargs) -> Event | Rejected:
    return decode_record(value, b"key", HEADERS, SRC, labeled=labeled, **kwargs)


# ------------------------------------------------------------------------------------------
# Good records


def test_labeled_event_with_text_and_features_decodes_field_by_field():
    value = (
        '{"id":"sms-1","text":"Free entry: £1000 prize!","features":'
        '{"channel":"sms","hour":23,"length":24.5,"known_sender":false},"label":"spam"}'
    ).encode()
    event = decode(value)
    assert type(event) is Event
    assert event.id == "sms-1"
    assert event.text == "Free entry: £1000 prize!"
    assert event.features == {"channel": "sms", "hour": 23, "length": 24.5, "known_sender": False}
    assert type(event.features["hour"]) is int
    assert type(event.features["length"]) is float
    assert event.features["known_sender"] is False
    assert event.label == "spam"
    assert event.source == SRC


def test_unlabeled_event_decodes_with_label_none():
    assert decode(b'{"id":"u-7","text":"see you at 5"}', labeled=False) == Event(
        "u-7", "see you at 5", None, None, SRC
    )


@pytest.mark.parametrize(
    "value, labeled, expected",
    [
        # int labels keep their type, any size and sign
        (b'{"id":"a","text":"x","label":0}', True, ("a", "x", None, 0)),
        (b'{"id":"a","text":"x","label":-12}', True, ("a", "x", None, -12)),
        (b'{"id":"a","text":"x","label":123456789012345678901234567890}', True,
         ("a", "x", None, 123456789012345678901234567890)),
        # features only; text only; empty text and empty features count as present
        (b'{"id":"a","features":{"k":"v"},"label":"ham"}', True, ("a", None, {"k": "v"}, "ham")),
        (b'{"id":"a","text":"","label":"ham"}', True, ("a", "", None, "ham")),
        (b'{"id":"a","features":{},"label":"ham"}', True, ("a", None, {}, "ham")),
        # null is absence for top-level fields
        (b'{"id":"a","text":null,"features":{"k":1},"label":"ham"}', True,
         ("a", None, {"k": 1}, "ham")),
        (b'{"id":"a","text":"x","features":null,"label":"ham"}', True, ("a", "x", None, "ham")),
        (b'{"id":"a","text":"x","label":null}', False, ("a", "x", None, None)),
        # unknown fields are ignored, whatever they hold
        (b'{"id":"a","text":"x","label":"ham","v":2,"meta":{"deep":[1,{"z":null}]}}', True,
         ("a", "x", None, "ham")),
        # whitespace around the JSON text is allowed by RFC 8259
        (b' \n\t{"id":"a","text":"x","label":"ham"}\r\n ', True, ("a", "x", None, "ham")),
        # escapes: control characters, a valid surrogate pair, an escaped backslash before "ud800"
        (b'{"id":"a","text":"nul\\u0000 tab\\t nl\\n","label":"ham"}', True,
         ("a", "nul\x00 tab\t nl\n", None, "ham")),
        (b'{"id":"a","text":"\\ud83d\\ude00","label":"ham"}', True,
         ("a", "\U0001F600", None, "ham")),
        (b'{"id":"a","text":"\\\\ud800","label":"ham"}', True, ("a", "\\ud800", None, "ham")),
        (b'{"id":"a","text":"\\uDBFF\\uDFFF","label":"ham"}', True,
         ("a", "\U0010FFFF", None, "ham")),
        # non-ASCII everywhere, whitespace-only label and id are non-empty
        ('{"id":"ид","text":"日本","features":{"ñ":"ü"},"label":"é"}'.encode(), True,
         ("ид", "日本", {"ñ": "ü"}, "é")),
        (b'{"id":" ","text":"x","label":" "}', True, (" ", "x", None, " ")),
        # feature edge values: -0.0, big finite floats and ints, empty name and empty value
        (b'{"id":"a","features":{"z":-0.0,"m":1.7976931348623157e308,"i":-1000000000000000000000,'
         b'"":""},"label":1}', True,
         ("a", None, {"z": -0.0, "m": 1.7976931348623157e308, "i": -10**21, "": ""}, 1)),
    ],
)
def test_good_records(value, labeled, expected):
    event = decode(value, labeled=labeled)
    assert type(event) is Event, event
    assert (event.id, event.text, event.features, event.label) == expected
    assert event.source == SRC
    if event.label is not None:
        assert type(event.label) is type(expected[3])


@pytest.mark.parametrize("key", [None, b"", b"someone-else", b"\xff\xfe"])
def test_key_is_not_checked_against_id(key):
    event = decode_record(b'{"id":"a","text":"x","label":"l"}', key, None, SRC, labeled=True)
    assert event == Event("a", "x", None, "l", SRC)
    # nor against the event's "key" field, which is what Event.key holds
    keyed = decode_record(b'{"id":"a","key":"user-7","text":"x","label":"l"}', key, None, SRC, labeled=True)
    assert keyed == Event("a", "x", None, "l", SRC, key="user-7")


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("value, labeled, expected", [
    (b'{"id":"a","key":"user-7","text":"x","label":"ham"}', True, ("user-7", "x", "ham")),
    (b'{"key":"user-7","text":"x","id":"a"}', False, ("user-7", "x", None)),  # both topics
    (b'{"id":"a","key":"1","text":"x","label":1}', True, ("1", "x", 1)),
    (b'{"id":"a","key":" ","text":"x"}', False, (" ", "x", None)),  # whitespace is not empty
    ('{"id":"a","key":"Zoë \\ud83d\\ude00 日本","text":"x"}'.encode(), False,
     ("Zo\u00eb \U0001F600 \u65e5\u672c", "x", None)),  # escaped and raw non-ASCII, a surrogate pair
    (b'{"id":"a","key":"a","text":"x"}', False, ("a", "x", None)),  # the key may equal the id
    (b'{"id":"a","key":null,"text":"x","label":"ham"}', True, (None, "x", "ham")),  # null is absence
    (b'{"id":"a","text":"x","label":"ham"}', True, (None, "x", "ham")),
    (b'{"id":"a","key":"box-2","features":{"n":1},"label":"ham","unlearn":"spam"}', True, ("box-2", None, "ham")),
])
def test_an_event_key_is_kept_on_the_event(native, value, labeled, expected, monkeypatch):
    monkeypatch.setenv("STREAM_NB_NATIVE", native)
    event = decode(value, labeled=labeled)
    assert type(event) is Event, event
    assert (event.key, event.text, event.label) == expected
    assert event.key is None or type(event.key) is str


def test_a_keyed_mail_event_keeps_its_key_and_an_object_gives_the_same_event():
    value = b'{"id":"m","key":"mailbox-3","mail":"Subject: hi\\r\\n\\r\\nbody","label":"ham"}'
    event = decode(value)
    assert (event.key, event.mail, event.text) == ("mailbox-3", b"Subject: hi\r\n\r\nbody", None)
    assert event_from_object(json.loads(value), SRC, labeled=True) == event
    refused = event_from_object({"id": "x", "key": 3, "text": "t"}, SRC, labeled=False)
    assert (refused.reason, refused.detail) == ("key_not_string", "key is integer, expected a string")
    assert event_from_object({"id": "x", "key": "", "text": "t"}, SRC, labeled=False).detail == \
        "key is the empty string"


def test_event_key_is_the_last_field_with_a_default():
    from dataclasses import fields

    assert [field.name for field in fields(Event)] == ["id", "text", "features", "label", "source", "mail",
                                                       "unlearn", "key"]
    assert Event("a", "x", None, "l", SRC).key is None
    assert Event("a", "x", None, "l", SRC, None, "m").key is None  # positional constructions stay valid
    assert Event("a", "x", None, "l", SRC, None, None, "u").key == "u"
    assert Event("a", "x", None, "l", SRC, key="u") != Event("a", "x", None, "l", SRC)


def test_a_key_of_1024_characters_is_kept_and_one_more_is_refused():
    """The bound counts characters, not bytes: 1,024 astral characters (4 KiB of UTF-8) pass."""
    longest = "\U0001f600" * 1024
    event = decode(json.dumps({"id": "a", "key": longest, "text": "x"}).encode(), labeled=False)
    assert type(event) is Event and event.key == longest
    refused = decode(json.dumps({"id": "a", "key": longest + "x", "text": "x"}).encode(), labeled=False)
    assert (refused.reason, refused.detail) == ("key_too_long", "key of 1025 characters, more than 1024")


def test_the_key_reasons_come_right_after_empty_id():
    at = REASONS.index("empty_id")
    assert REASONS[at - 2: at + 5] == ("missing_id", "id_not_string", "empty_id", "key_not_string", "empty_key",
                                       "key_too_long", "text_not_string")
    assert len(REASONS) == 34


def test_long_text_under_the_limit_is_fine_and_the_limit_is_inclusive():
    text = "word " * 199_990
    value = json.dumps({"id": "big", "text": text, "label": "ham"}).encode()
    assert len(value) < 1_000_000
    assert decode(value) == Event("big", text, None, "ham", SRC)
    assert decode(value, max_bytes=len(value)) == Event("big", text, None, "ham", SRC)
    rejected = decode(value, max_bytes=len(value) - 1)
    assert (rejected.reason, rejected.value) == ("too_large", value)


def test_moderate_nesting_in_an_unknown_field_is_accepted():
    value = b'{"id":"a","text":"x","label":"l","x":' + b"[" * 200 + b"]" * 200 + b"}"
    assert decode(value) == Event("a", "x", None, "l", SRC)


# ------------------------------------------------------------------------------------------
# Bad records: one parametrized case per kind, with the exact reason

_BAD = [
    # --- bytes level
    ("tombstone", None, True, "empty_value"),
    ("zero bytes", b"", True, "empty_value"),
    ("invalid UTF-8 byte", b'{"id":"a","text":"\xff","label":"l"}', True, "invalid_utf8"),
    ("truncated multibyte", b'{"id":"a","text":"caf\xc3","label":"l"}', True, "invalid_utf8"),
    ("overlong encoding", b'{"id":"a","text":"\xc0\xaf","label":"l"}', True, "invalid_utf8"),
    ("encoded surrogate", b'{"id":"a","text":"\xed\xa0\x80","label":"l"}', True, "invalid_utf8"),
    ("latin-1 text", '{"id":"a","text":"café","label":"l"}'.encode("latin-1"), True,
     "invalid_utf8"),
    ("UTF-16 with BOM", '{"id":"a"}'.encode("utf-16"), True, "invalid_utf8"),
    ("UTF-8 BOM", b'\xef\xbb\xbf{"id":"a","text":"x","label":"l"}', True, "utf8_bom"),
    # --- JSON syntax
    ("UTF-16 without BOM", '{"id":"a"}'.encode("utf-16-le"), True, "invalid_json"),
    ("truncated JSON", b'{"id":"a","text":"hi"', True, "invalid_json"),
    ("truncated string", b'{"id":"a","text":"hi', True, "invalid_json"),
    ("trailing data", b'{"id":"a","text":"x","label":"l"} {}', True, "invalid_json"),
    ("two objects per line", b'{"id":"a"}\n{"id":"b"}', True, "invalid_json"),
    ("single quotes", b"{'id':'a','text':'x','label':'l'}", True, "invalid_json"),
    ("trailing comma", b'{"id":"a","text":"x","label":"l",}', True, "invalid_json"),
    ("unquoted key", b'{id:"a","text":"x","label":"l"}', True, "invalid_json"),
    ("whitespace only", b" \n ", True, "invalid_json"),
    ("raw control char in string", b'{"id":"a","text":"a\x01b","label":"l"}', True,
     "invalid_json"),
    ("raw newline in string", b'{"id":"a","text":"a\nb","label":"l"}', True, "invalid_json"),
    ("bad escape", b'{"id":"a","text":"\\x41","label":"l"}', True, "invalid_json"),
    ("short unicode escape", b'{"id":"a","text":"\\u12","label":"l"}', True, "invalid_json"),
    ("integer beyond the digit limit", b'{"id":"a","text":"x","label":1' + b"0" * 5000 + b"}",
     True, "invalid_json"),
    ("NaN feature", b'{"id":"a","features":{"x":NaN},"label":"l"}', True, "nan_or_infinity"),
    ("Infinity feature", b'{"id":"a","features":{"x":Infinity},"label":"l"}', True,
     "nan_or_infinity"),
    ("-Infinity label", b'{"id":"a","text":"x","label":-Infinity}', True, "nan_or_infinity"),
    ("NaN in an unknown field", b'{"id":"a","text":"x","label":"l","score":NaN}', True,
     "nan_or_infinity"),
    ("duplicate top-level key", b'{"id":"a","text":"x","label":"l","label":"m"}', True,
     "duplicate_key"),
    ("duplicate id", b'{"id":"a","id":"b","text":"x","label":"l"}', True, "duplicate_key"),
    ("duplicate feature name", b'{"id":"a","features":{"k":1,"k":2},"label":"l"}', True,
     "duplicate_key"),
    ("deeply nested arrays", b"[" * 100_000, True, "too_deep"),
    ("deeply nested objects in a field",
     b'{"id":"a","text":"x","label":"l","x":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001,
     True, "too_deep"),
    # --- shape
    ("top-level array", b'[{"id":"a","text":"x","label":"l"}]', True, "not_an_object"),
    ("top-level string", b'"hello"', True, "not_an_object"),
    ("top-level number", b"42", True, "not_an_object"),
    ("top-level float", b"4.5e1", True, "not_an_object"),
    ("top-level null", b"null", True, "not_an_object"),
    ("top-level true", b"true", True, "not_an_object"),
    # --- id
    ("missing id", b'{"text":"x","label":"l"}', True, "missing_id"),
    ("null id", b'{"id":null,"text":"x","label":"l"}', True, "missing_id"),
    ("int id", b'{"id":17,"text":"x","label":"l"}', True, "id_not_string"),
    ("float id", b'{"id":1.5,"text":"x","label":"l"}', True, "id_not_string"),
    ("bool id", b'{"id":true,"text":"x","label":"l"}', True, "id_not_string"),
    ("list id", b'{"id":["a"],"text":"x","label":"l"}', True, "id_not_string"),
    ("object id", b'{"id":{"v":"a"},"text":"x","label":"l"}', True, "id_not_string"),
    ("empty id", b'{"id":"","text":"x","label":"l"}', True, "empty_id"),
    # --- key (after the id's checks, before the text's)
    ("int key", b'{"id":"a","key":1,"text":"x","label":"l"}', True, "key_not_string"),
    ("float key", b'{"id":"a","key":1.5,"text":"x"}', False, "key_not_string"),
    ("bool key", b'{"id":"a","key":false,"text":"x","label":"l"}', True, "key_not_string"),
    ("list key", b'{"id":"a","key":["u"],"text":"x"}', False, "key_not_string"),
    ("object key", b'{"id":"a","key":{"u":1},"text":"x","label":"l"}', True, "key_not_string"),
    ("empty key", b'{"id":"a","key":"","text":"x","label":"l"}', True, "empty_key"),
    ("empty key, unlabeled", b'{"id":"a","key":"","text":"x"}', False, "empty_key"),
    ("int id before int key", b'{"id":1,"key":1,"text":"x","label":"l"}', True, "id_not_string"),
    ("missing id before empty key", b'{"key":"","text":"x","label":"l"}', True, "missing_id"),
    ("empty id before empty key", b'{"id":"","key":"","text":"x","label":"l"}', True, "empty_id"),
    ("int key before int text", b'{"id":"a","key":7,"text":7,"label":"l"}', True, "key_not_string"),
    ("empty key before no text or features", b'{"id":"a","key":""}', False, "empty_key"),
    ("empty key before a label on the unlabeled topic", b'{"id":"a","key":"","text":"x","label":"l"}', False,
     "empty_key"),
    ("key of 1,025 characters", b'{"id":"a","key":"' + b"k" * 1025 + b'","text":"x","label":"l"}', True,
     "key_too_long"),
    # --- text and features
    ("int text", b'{"id":"a","text":5,"label":"l"}', True, "text_not_string"),
    ("list text", b'{"id":"a","text":["x"],"label":"l"}', True, "text_not_string"),
    ("bool text", b'{"id":"a","text":false,"label":"l"}', True, "text_not_string"),
    ("list features", b'{"id":"a","features":[["k","v"]],"label":"l"}', True,
     "features_not_object"),
    ("string features", b'{"id":"a","features":"k=v","label":"l"}', True, "features_not_object"),
    ("number features", b'{"id":"a","features":3,"label":"l"}', True, "features_not_object"),
    ("feature value list", b'{"id":"a","features":{"k":[1]},"label":"l"}', True,
     "feature_value_type"),
    ("feature value dict", b'{"id":"a","features":{"k":{"v":1}},"label":"l"}', True,
     "feature_value_type"),
    ("feature value null", b'{"id":"a","features":{"k":null},"label":"l"}', True,
     "feature_value_type"),
    ("feature float overflow", b'{"id":"a","features":{"k":1e400},"label":"l"}', True,
     "feature_value_not_finite"),
    ("feature negative float overflow", b'{"id":"a","features":{"k":-1e400},"label":"l"}', True,
     "feature_value_not_finite"),
    ("feature int beyond float range", b'{"id":"a","features":{"k":' + b"9" * 400 + b'},'
     b'"label":"l"}', True, "feature_value_not_finite"),
    # --- mail (checks in table order: type, both fields, beside text, base64)
    ("int mail", b'{"id":"a","mail":5,"label":"l"}', True, "mail_not_string"),
    ("object mail_base64", b'{"id":"a","mail_base64":{"b":"QQ=="},"label":"l"}', True, "mail_not_string"),
    ("mail and mail_base64", b'{"id":"a","mail":"Subject: x","mail_base64":"QQ==","label":"l"}', True,
     "mail_and_mail_base64"),
    ("mail beside text", b'{"id":"a","text":"x","mail":"Subject: x","label":"l"}', True, "mail_with_text"),
    ("mail_base64 beside text", b'{"id":"a","text":"x","mail_base64":"QQ==","label":"l"}', True,
     "mail_with_text"),
    ("base64 without padding", b'{"id":"a","mail_base64":"QQ","label":"l"}', True, "invalid_base64"),
    ("base64 with a line break", b'{"id":"a","mail_base64":"QUJD\\nREVG","label":"l"}', True, "invalid_base64"),
    ("base64 of the URL alphabet", b'{"id":"a","mail_base64":"-_-_","label":"l"}', True, "invalid_base64"),
    ("base64 with data after padding", b'{"id":"a","mail_base64":"QQ==QUJD","label":"l"}', True,
     "invalid_base64"),
    ("base64 with a non-ASCII character", '{"id":"a","mail_base64":"QUJé","label":"l"}'.encode(), True,
     "invalid_base64"),
    ("text and features absent", b'{"id":"a","label":"l"}', True, "no_text_or_features"),
    ("mail and mail_base64 null", b'{"id":"a","mail":null,"mail_base64":null,"label":"l"}', True,
     "no_text_or_features"),
    ("text and features null", b'{"id":"a","text":null,"features":null,"label":"l"}', True,
     "no_text_or_features"),
    ("nothing but an id, unlabeled", b'{"id":"a"}', False, "no_text_or_features"),
    # --- label
    ("label missing on labeled topic", b'{"id":"a","text":"x"}', True, "missing_label"),
    ("label null on labeled topic", b'{"id":"a","text":"x","label":null}', True,
     "missing_label"),
    ("bool label", b'{"id":"a","text":"x","label":true}', True, "label_type"),
    ("float label", b'{"id":"a","text":"x","label":1.0}', True, "label_type"),
    ("list label", b'{"id":"a","text":"x","label":["spam"]}', True, "label_type"),
    ("dict label", b'{"id":"a","text":"x","label":{"c":"spam"}}', True, "label_type"),
    ("empty label", b'{"id":"a","text":"x","label":""}', True, "empty_label"),
    ("label on unlabeled topic", b'{"id":"a","text":"x","label":"spam"}', False,
     "label_on_unlabeled_topic"),
    ("falsy label on unlabeled topic", b'{"id":"a","text":"x","label":0}', False,
     "label_on_unlabeled_topic"),
    ("empty label on unlabeled topic", b'{"id":"a","text":"x","label":""}', False,
     "label_on_unlabeled_topic"),
    # --- lone surrogates (Python's json accepts them; UTF-8 cannot carry them)
    ("lone high surrogate in text", b'{"id":"a","text":"x\\ud800y","label":"l"}', True,
     "lone_surrogate"),
    ("lone low surrogate in text", b'{"id":"a","text":"\\uDC00","label":"l"}', True,
     "lone_surrogate"),
    ("reversed surrogate pair", b'{"id":"a","text":"\\ude00\\ud83d","label":"l"}', True,
     "lone_surrogate"),
    ("lone surrogate in id", b'{"id":"\\ud800","text":"x","label":"l"}', True, "lone_surrogate"),
    ("lone surrogate in key", b'{"id":"a","key":"u\\udc00","text":"x","label":"l"}', True, "lone_surrogate"),
    ("lone surrogate in label", b'{"id":"a","text":"x","label":"\\udfff"}', True,
     "lone_surrogate"),
    ("lone surrogate in feature name", b'{"id":"a","features":{"\\ud800":1},"label":"l"}', True,
     "lone_surrogate"),
    ("lone surrogate in feature value", b'{"id":"a","features":{"k":"\\udbff"},"label":"l"}',
     True, "lone_surrogate"),
    ("lone surrogate in mail", b'{"id":"a","mail":"Subject: \\ud800","label":"l"}', True, "lone_surrogate"),
    # --- corrections (unlearn)
    ("null label, null unlearn", b'{"id":"a","text":"x","label":null,"unlearn":null}', True, "missing_label"),
    ("float unlearn", b'{"id":"a","text":"x","label":"ham","unlearn":1.0}', True, "invalid_unlearn"),
    ("bool unlearn", b'{"id":"a","text":"x","label":"ham","unlearn":false}', True, "invalid_unlearn"),
    ("list unlearn", b'{"id":"a","text":"x","unlearn":["spam"]}', True, "invalid_unlearn"),
    ("empty unlearn", b'{"id":"a","text":"x","label":"ham","unlearn":""}', True, "invalid_unlearn"),
    ("bad label before bad unlearn", b'{"id":"a","text":"x","label":1.5,"unlearn":1.5}', True, "label_type"),
    ("unlearn equal to label", b'{"id":"a","text":"x","label":"ham","unlearn":"ham"}', True, "unlearn_is_label"),
    ("int unlearn equal to label", b'{"id":"a","text":"x","label":-3,"unlearn":-3}', True, "unlearn_is_label"),
    ("unlearn on unlabeled topic", b'{"id":"a","text":"x","unlearn":"spam"}', False, "unlearn_on_unlabeled_topic"),
    ("label before unlearn on unlabeled topic", b'{"id":"a","text":"x","label":"s","unlearn":"h"}', False,
     "label_on_unlabeled_topic"),
    ("lone surrogate in unlearn", b'{"id":"a","text":"x","label":"l","unlearn":"\\ud800"}', True,
     "lone_surrogate"),
]


@pytest.mark.parametrize("value, labeled, reason", [c[1:] for c in _BAD], ids=[c[0] for c in _BAD])
def test_bad_record_is_rejected_with_its_reason_and_original_message(value, labeled, reason):
    rejected = decode(value, labeled=labeled)
    assert type(rejected) is Rejected
    assert rejected.reason == reason, rejected.detail
    assert rejected.value is value  # the very bytes object, untouched
    assert rejected.key == b"key"
    assert rejected.headers == (("trace-id", b"abc"), ("empty", None))
    assert rejected.source == SRC
    # one short ASCII line, fit for a log line and a header
    assert rejected.detail and rejected.detail.isascii() and "\n" not in rejected.detail
    assert len(rejected.detail) <= 200


def test_too_large_is_checked_before_decoding():
    value = b"\xff" * 11  # would be invalid_utf8 if it were decoded
    rejected = decode(value, max_bytes=10)
    assert (rejected.reason, rejected.detail, rejected.value) == (
        "too_large",
        "value is 11 bytes, limit 10",
        value,
    )


def test_the_first_failing_check_names_the_reason():
    # missing id and no label and no text: the id check runs first
    assert decode(b'{"features":"bad"}').reason == "missing_id"
    # bad text type and bad features: text first
    assert decode(b'{"id":"a","text":1,"features":2}').reason == "text_not_string"
    # no text or features and no label: the content check runs before the label check
    assert decode(b'{"id":"a"}').reason == "no_text_or_features"


def test_every_reason_code_is_tested_and_documented():
    # too_large and undeclared_label need an argument (max_bytes, classes): tested on their own
    assert {reason for *_, reason in _BAD} | {"too_large", "undeclared_label", "undeclared_unlearn"} == set(REASONS)
    assert len(set(REASONS)) == len(REASONS)
    table = set(re.findall(r"^``([a-z0-9_]+)``  ", codec.__doc__, flags=re.MULTILINE))
    assert table == set(REASONS)


def test_at_least_thirty_kinds_of_malformed_message():
    assert len(_BAD) >= 30


def test_decoding_never_raises_on_mutated_records():
    rng = random.Random(20240531)
    seeds = [
        b'{"id":"sms-1","text":"Free \\u00a3 prize","features":{"h":23,"f":1.5,"b":true},'
        b'"label":"spam"}',
        b'{"id":"x","features":{"k":"v"},"label":0}',
    ]
    for _ in range(3000):
        value = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(value))
            action = rng.randrange(3)
            if action == 0:
                value[position] = rng.randrange(256)
            elif action == 1:
                del value[position]
            else:
                value.insert(position, rng.choice(b'{}[]",:\\0nNtu\xff\xc3 '))
        value = bytes(value)
        for labeled in (True, False):
            outcome = decode(value, labeled=labeled)
            if type(outcome) is Rejected:
                assert outcome.reason in REASONS and outcome.value is value
                dead_letter_headers(outcome)  # always encodable
            else:
                assert type(outcome) is Event
                # anything accepted can be re-published
                encode_prediction(outcome, {"spam": 0.5}, events_learned=0, checkpoint=None)


# ------------------------------------------------------------------------------------------
# Batches


def test_batch_keeps_every_good_record_in_order_and_rejects_every_bad_one_with_its_position():
    values = [
        b'{"id":"0","text":"a","label":"ham"}',
        b"\xff",
        b'{"id":"2","text":"b","label":"spam"}',
        None,
        b'{"id":"4","text":"c"}',
        b'{"id":"5","features":{"n":1},"label":1}',
        b'{"id":"6","text":"d","label":"ham"',
        b'{"id":"7","text":"e","label":"ham"}',
    ]
    records = [
        (value, str(i).encode(), [("n", str(i).encode())], SourcePosition("t", 1, 100 + i))
        for i, value in enumerate(values)
    ]
    events, rejected = decode_records(iter(records), labeled=True)
    assert events == [
        Event("0", "a", None, "ham", SourcePosition("t", 1, 100)),
        Event("2", "b", None, "spam", SourcePosition("t", 1, 102)),
        Event("5", None, {"n": 1}, 1, SourcePosition("t", 1, 105)),
        Event("7", "e", None, "ham", SourcePosition("t", 1, 107)),
    ]
    assert [(r.reason, r.source.offset, r.value, r.key, r.headers) for r in rejected] == [
        ("invalid_utf8", 101, b"\xff", b"1", (("n", b"1"),)),
        ("empty_value", 103, None, b"3", (("n", b"3"),)),
        ("missing_label", 104, b'{"id":"4","text":"c"}', b"4", (("n", b"4"),)),
        ("invalid_json", 106, b'{"id":"6","text":"d","label":"ham"', b"6", (("n", b"6"),)),
    ]
    # none lost: the offsets of both lists partition the input
    offsets = sorted([e.source.offset for e in events] + [r.source.offset for r in rejected])
    assert offsets == list(range(100, 108))


def test_batch_equals_record_by_record():
    values = [value for _, value, _, _ in _BAD] + [b'{"id":"a","text":"x","label":"l"}']
    records = [(v, None, None, SourcePosition("t", 0, i)) for i, v in enumerate(values)]
    singles = [decode_record(*record, labeled=True, max_bytes=500) for record in records]
    events, rejected = decode_records(records, labeled=True, max_bytes=500)
    assert events == [s for s in singles if type(s) is Event]
    assert rejected == [s for s in singles if type(s) is Rejected]


def test_empty_batch():
    assert decode_records([], labeled=False) == ([], [])


# ------------------------------------------------------------------------------------------
# Predictions


def _event(event_id: str = "sms-9") -> Event:
    return Event(event_id, "hi", None, None, SourcePosition("sms-unlabeled", 2, 77))


def test_prediction_bytes_are_compact_utf8_json_keyed_by_id():
    key, value = encode_prediction(
        _event("ид-1"), {"ham": 0.25, "spam": 0.75}, events_learned=5574, checkpoint="ck-000012"
    )
    assert key == "ид-1".encode()
    assert value == (
        '{"id":"ид-1","label":"spam","proba":{"ham":0.25,"spam":0.75},'
        '"model":{"events_learned":5574,"checkpoint":"ck-000012"},'
        '"source":{"topic":"sms-unlabeled","partition":2,"offset":77}}'
    ).encode()


def test_prediction_int_labels_keep_their_type_and_proba_keys_are_strings():
    key, value = encode_prediction(_event(), {0: 0.1, 1: 0.6, 2: 0.3}, events_learned=3,
                                   checkpoint=None)  # fmt: skip
    assert key == b"sms-9"
    assert json.loads(value) == {
        "id": "sms-9",
        "label": 1,
        "proba": {"0": 0.1, "1": 0.6, "2": 0.3},
        "model": {"events_learned": 3, "checkpoint": None},
        "source": {"topic": "sms-unlabeled", "partition": 2, "offset": 77},
    }


def test_prediction_tie_goes_to_the_first_class_in_dict_order():
    _, value = encode_prediction(_event(), {"b": 0.5, "a": 0.5}, events_learned=2, checkpoint=None)
    assert json.loads(value)["label"] == "b"
    _, value = encode_prediction(_event(), {"a": 0.5, "b": 0.5}, events_learned=2, checkpoint=None)
    assert json.loads(value)["label"] == "a"
    _, value = encode_prediction(_event(), {"z": 0.0}, events_learned=1, checkpoint=None)
    assert json.loads(value)["label"] == "z"


def test_prediction_before_any_class_is_known():
    _, value = encode_prediction(_event(), {}, events_learned=0, checkpoint=None)
    assert json.loads(value) == {
        "id": "sms-9",
        "label": None,
        "proba": {},
        "model": {"events_learned": 0, "checkpoint": None},
        "source": {"topic": "sms-unlabeled", "partition": 2, "offset": 77},
    }


def test_prediction_probabilities_become_python_floats():
    np = pytest.importorskip("numpy")
    _, value = encode_prediction(
        _event(), {"ham": np.float64(0.125), "spam": np.float32(0.875), "x": 0},
        events_learned=2, checkpoint=None,
    )  # fmt: skip
    assert value.count(b'"x":0.0') == 1
    assert json.loads(value)["proba"] == {"ham": 0.125, "spam": 0.875, "x": 0.0}


@pytest.mark.parametrize(
    "probabilities, error",
    [
        ({True: 0.5}, TypeError),
        ({1.0: 0.5}, TypeError),
        ({None: 0.5}, TypeError),
        ({1: 0.5, "1": 0.5}, ValueError),
        ({"a": float("nan")}, ValueError),
        ({"a": float("inf")}, ValueError),
    ],
)
def test_prediction_refuses_what_json_cannot_say(probabilities, error):
    with pytest.raises(error):
        encode_prediction(_event(), probabilities, events_learned=1, checkpoint=None)


def _reference_prediction(event, probabilities, events_learned, checkpoint, labeled_offsets, verdict, clues):
    """The prediction message as the json module writes it (the contract's definition)."""
    proba = {str(cls): float(p) for cls, p in probabilities.items()}
    best = max(probabilities, key=lambda cls: probabilities[cls]) if probabilities else None
    model = {"events_learned": events_learned, "checkpoint": checkpoint}
    if labeled_offsets is not None:
        model["labeled_offsets"] = labeled_offsets
    message = {"id": event.id, "label": best, "proba": proba, "model": model,
               "source": {"topic": event.source.topic, "partition": event.source.partition,
                          "offset": event.source.offset}}
    if verdict is not None:
        message["verdict"] = verdict
    if clues is not None:
        message["clues"] = [[name, float(weight)] for name, weight in clues]
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def test_a_batch_encoder_writes_the_json_modules_bytes():
    import random

    from stream_nb.events import PredictionEncoder

    generator = random.Random(7)
    awkward = ['plain', 'quote " and \\ back', 'tab\tnew\nline\x00\x1f', 'ид-1', '\u2028 sep', '😀 wide', '', '/']
    floats = [0.0, -0.0, 1e-320, 5e-324, 1.0, 0.1, 1 / 3, 1e22, 1.7976931348623157e308, -12.5]
    for case in range(400):
        labels = generator.sample(awkward, 2) if case % 3 else [generator.randrange(-5, 10**12), 7]
        probabilities = {label: generator.choice(floats + [generator.random()]) for label in labels}
        offsets = None if case % 4 == 0 else [[generator.choice(awkward), 0, generator.randrange(10**15)]]
        clues = None if case % 5 == 0 else [(generator.choice(awkward), generator.choice(floats))
                                            for _ in range(generator.randrange(4))]
        verdict = None if case % 2 else generator.choice(["spam", "ham", "unsure"])
        checkpoint = None if case % 6 else "000000000042"
        event = Event(generator.choice(awkward), "x", None, None,
                      SourcePosition(generator.choice(awkward), generator.randrange(64), generator.randrange(10**15)))
        encoder = PredictionEncoder(events_learned=case, checkpoint=checkpoint, labeled_offsets=offsets)
        key, value = encoder.encode(event, probabilities, verdict=verdict, clues=clues)
        assert key == event.id.encode()
        assert value == _reference_prediction(event, probabilities, case, checkpoint, offsets, verdict, clues)
    # infinite evidence (alpha = 0) is written as protobuf's JSON strings; NaN is refused
    encoder = PredictionEncoder(events_learned=1, checkpoint=None)
    _, value = encoder.encode(_event(), {"ham": 0.5, "spam": 0.5}, clues=[("free", float("inf")), ("hi", -float("inf"))])
    assert json.loads(value)["clues"] == [["free", "Infinity"], ["hi", "-Infinity"]]
    with pytest.raises(ValueError, match="not a number"):
        encoder.encode(_event(), {"ham": 0.5, "spam": 0.5}, clues=[("free", float("nan"))])


# ------------------------------------------------------------------------------------------
# Dead-letter headers


def test_dead_letter_headers_are_the_originals_plus_ours():
    rejected = decode_record(
        b'{"id":"a","text":"x"}', b"a", [("trace-id", b"abc"), ("empty", None)],
        SourcePosition("sms-labeled", 3, 1234), labeled=True,
    )  # fmt: skip
    assert dead_letter_headers(rejected) == [
        ("trace-id", b"abc"),
        ("empty", None),
        ("stream-nb-reason", b"missing_label"),
        ("stream-nb-detail", b"no label on the labeled topic"),
        ("stream-nb-source-topic", b"sms-labeled"),
        ("stream-nb-source-partition", b"3"),
        ("stream-nb-source-offset", b"1234"),
    ]


def _batch_bytes(value, key, headers) -> int:
    """The bytes of a v2 record batch holding this one record, as Kafka's clients build it (the
    largest timestamp delta and a transactional producer's fields: the worst case)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=2**62,
                                        producer_epoch=2**15 - 1, base_sequence=2**31 - 1, batch_size=2**31 - 1)
    builder.append(0, timestamp=2**62, key=key, value=value, headers=headers)
    return len(builder.build())


@pytest.mark.parametrize("seed", range(40))
def test_a_dead_letter_fits_its_limit_and_keeps_what_it_can(seed):
    """Generated records of every shape (huge value, huge key, huge or many headers, none) and
    limits: the letter, built into a batch as Kafka's client does, never exceeds the limit; what
    fits is kept whole; what was cut is named with the original sizes."""
    rng = random.Random(seed)

    def blob(limit: int) -> bytes | None:
        return None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 50, rng.randrange(limit)]))

    value, key = blob(3_000_000), blob(rng.choice([100, 400_000]))
    count = rng.choice([0, 1, 3, 200])
    headers = tuple((f"h{i}", blob(600_000 if count <= 3 and rng.random() < 0.5 else 100)) for i in range(count))
    rejected = Rejected("too_large", "value is big", value, key, headers, SourcePosition("in", 2, 10**12))
    limit = rng.choice([8_192, 65_536, 1_048_588, 3_000_000])
    letter_value, letter_key, letter_headers = dead_letter_record(rejected, limit)
    real = _batch_bytes(letter_value, letter_key, letter_headers)
    assert real <= record_bytes_bound(letter_value, letter_key, letter_headers) <= limit
    assert _batch_bytes(value, key, list(headers)) <= record_bytes_bound(value, key, headers)
    marks = dict(letter_headers)
    if record_bytes_bound(value, key, dead_letter_headers(rejected)) <= limit:
        assert (letter_value, letter_key, letter_headers) == (value, key, dead_letter_headers(rejected))
        return
    cut = marks["stream-nb-truncated"].decode().split(",")
    header_bytes = sum(10 + len(name) + len(data or b"") for name, data in headers)
    assert marks["stream-nb-original-bytes"] == (
        f"value={len(value or b'')} key={len(key or b'')} headers={header_bytes}").encode()
    assert cut and set(cut) <= {"value", "key", "headers"}
    assert (letter_value == value) == ("value" not in cut) and value.startswith(letter_value or b"")
    assert (letter_key == key) == ("key" not in cut) and (key or b"").startswith(letter_key or b"")
    kept = [header for header in letter_headers if not header[0].startswith("stream-nb-")]
    assert kept == ([] if "headers" in cut else list(headers))
    assert marks["stream-nb-reason"] == b"too_large" and marks["stream-nb-source-offset"] == b"1000000000000"
    # nothing is cut that the limit had room for: a letter cut only to fit, and close to the limit
    assert record_bytes_bound(letter_value, letter_key, letter_headers) > limit - 2_048 or "headers" in cut


def test_a_dead_letter_limit_too_small_for_our_own_headers_is_an_error():
    rejected = Rejected("too_large", "x", b"v" * 10_000, None, (), SourcePosition("in", 0, 1))
    with pytest.raises(ValueError, match="more than 600 bytes for its own headers"):
        dead_letter_record(rejected, 600)


def test_dead_letter_headers_replace_our_headers_from_an_earlier_pass():
    rejected = Rejected(
        "invalid_json",
        "Expecting value: line 1 column 1 (char 0)",
        b"?",
        None,
        (("stream-nb-reason", b"too_large"), ("a", b"1"), ("stream-nb-source-offset", b"9")),
        SourcePosition("dlq", 0, 5),
    )
    assert dead_letter_headers(rejected) == [
        ("a", b"1"),
        ("stream-nb-reason", b"invalid_json"),
        ("stream-nb-detail", b"Expecting value: line 1 column 1 (char 0)"),
        ("stream-nb-source-topic", b"dlq"),
        ("stream-nb-source-partition", b"0"),
        ("stream-nb-source-offset", b"5"),
    ]


def test_dead_letter_detail_of_non_ascii_names_is_escaped_ascii():
    rejected = decode(b'{"id":"a","features":{"\xc3\xa9\\ud800":[1]},"label":"l"}')
    assert rejected.reason == "feature_value_type"
    assert rejected.detail == "feature '\\xe9\\ud800' is array, expected string, number or boolean"
    assert dict(dead_letter_headers(rejected))["stream-nb-detail"] == rejected.detail.encode()


def test_infinite_clues_of_alpha_zero_are_json_strings_and_read_back():
    """alpha = 0 (MLE): a word the runner-up class never had is infinitely strong evidence. JSON
    has no infinity, so the prediction carries "Infinity" (protobuf's JSON form); NaN is refused."""
    from stream_nb import MultinomialNB
    from stream_nb.model.explain import clue_text, strongest_clues

    model = MultinomialNB(alpha=0.0)
    model.learn_one({"win": 1, "cash": 1, "now": 1}, "spam")
    model.learn_one({"see": 1, "you": 1, "now": 1}, "ham")
    x = {"win": 1, "now": 1}
    proba = model.predict_proba_one(x)
    assert proba == {"spam": 1.0, "ham": 0.0}  # P(win | ham) = 0/3
    clues = strongest_clues(model, x, top=3, proba=proba)
    # "now" once in each class of 3 words: log(1/3) - log(1/3) = 0
    assert clues == [("win", float("inf")), ("now", 0.0)]
    event = Event("m1", "win now", None, None, SRC)
    key, value = encode_prediction(event, proba, events_learned=2, checkpoint=None, clues=clues)
    assert json.loads(value)["clues"] == [["win", "Infinity"], ["now", 0.0]]
    assert b'"clues":[["win","Infinity"],["now",0.0]]' in value
    assert [clue_text(*clue) for clue in json.loads(value)["clues"]] == [
        "win (never seen in the runner-up class)", "now (+0.00)"]
    assert clue_text("see", float("-inf")) == "see (never seen in the predicted class)"
    with pytest.raises(ValueError, match="not a number"):
        encode_prediction(event, proba, events_learned=2, checkpoint=None, clues=[("win", float("nan"))])


# ------------------------------------------------------------------------------------------
# Declared classes ([model] classes)

HAM_SPAM = frozenset({"ham", "spam"})


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_label_that_is_not_a_declared_class_is_refused_as_undeclared_label(native, monkeypatch):
    monkeypatch.setenv("STREAM_NB_NATIVE", native)
    stray = b'{"id":"x","text":"t","label":1}'  # the common shape: the C decoder takes it
    refused = decode(stray, classes=HAM_SPAM)
    assert type(refused) is Rejected and refused.value is stray and refused.key == b"key"
    assert (refused.reason, refused.detail) == ("undeclared_label", "label 1 is not a declared class ('ham', 'spam')")
    assert decode(b'{"id":"x","text":"t","label":"hma"}', classes=HAM_SPAM).reason == "undeclared_label"
    assert decode(b'{"id":"x","text":"t","label":"1"}', classes=frozenset({1, 2})).reason == "undeclared_label"
    assert decode(b'{"id":"x","text":"t","label":"spam"}', classes=HAM_SPAM).label == "spam"
    assert decode(b'{"id":"x","text":"t","label":2}', classes=frozenset({1, 2})).label == 2
    assert decode(stray).label == 1  # no classes declared: any label, a class as it is learned
    events, rejected = decode_records([(stray, None, None, SRC), (b'{"id":"y","text":"t","label":"ham"}', None, None,
                                                                  SRC)], labeled=True, classes=HAM_SPAM)
    assert [e.id for e in events] == ["y"] and [r.reason for r in rejected] == ["undeclared_label"]


def test_declared_classes_leave_unlabeled_events_and_the_earlier_label_checks_alone():
    assert decode(b'{"id":"x","text":"t"}', labeled=False, classes=HAM_SPAM).label is None
    assert decode(b'{"id":"x","text":"t","label":"eggs"}', labeled=False, classes=HAM_SPAM).reason == \
        "label_on_unlabeled_topic"
    assert decode(b'{"id":"x","text":"t","label":1.0}', classes=HAM_SPAM).reason == "label_type"
    assert decode(b'{"id":"x","text":"t","label":""}', classes=HAM_SPAM).reason == "empty_label"
    assert decode(b'{"id":"x","text":"t"}', classes=HAM_SPAM).reason == "missing_label"


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("value, label, unlearn", [
    (b'{"id":"a","text":"t","label":"spam","unlearn":"ham"}', "spam", "ham"),
    (b'{"id":"a","text":"t","unlearn":"ham"}', None, "ham"),
    (b'{"id":"a","text":"t","label":null,"unlearn":"ham"}', None, "ham"),
    (b'{"id":"a","features":{"k":1},"label":2,"unlearn":1}', 2, 1),
    (b'{"id":"a","text":"t","label":1,"unlearn":"1"}', 1, "1"),  # the type counts: "1" is another class
    (b'{"id":"a","mail":"Subject: x\\r\\n\\r\\nhi","unlearn":"spam"}', None, "spam"),
    (b'{"id":"a","text":"t","label":"ham","unlearn":null}', "ham", None),  # null is absence
])
def test_a_correction_carries_the_class_to_take_back(native, monkeypatch, value, label, unlearn):
    monkeypatch.setenv("STREAM_NB_NATIVE", native)
    event = decode(value)
    assert type(event) is Event and (event.label, event.unlearn) == (label, unlearn)
    assert type(event.label) is type(label) and type(event.unlearn) is type(unlearn)


def test_an_event_without_unlearn_has_none():
    assert decode(b'{"id":"a","text":"t","label":"ham"}').unlearn is None
    assert decode(b'{"id":"a","text":"t"}', labeled=False).unlearn is None


@pytest.mark.parametrize("native", ["1", "0"])
def test_unlearn_must_be_a_declared_class_when_classes_are_declared(native, monkeypatch):
    monkeypatch.setenv("STREAM_NB_NATIVE", native)
    stray = b'{"id":"x","text":"t","label":"ham","unlearn":"spma"}'  # a shape the C decoder takes
    refused = decode(stray, classes=HAM_SPAM)
    assert (refused.reason, refused.detail) == ("undeclared_unlearn",
                                                "unlearn 'spma' is not a declared class ('ham', 'spam')")
    assert decode(b'{"id":"x","text":"t","unlearn":1}', classes=HAM_SPAM).reason == "undeclared_unlearn"
    # the label is checked first
    assert decode(b'{"id":"x","text":"t","label":"eggs","unlearn":"spma"}', classes=HAM_SPAM).reason == \
        "undeclared_label"
    taken = decode(b'{"id":"x","text":"t","unlearn":"spam"}', classes=HAM_SPAM)
    assert (taken.label, taken.unlearn) == (None, "spam")
    assert decode(b'{"id":"x","text":"t","label":"ham","unlearn":"spam"}', classes=HAM_SPAM).unlearn == "spam"


def test_a_parsed_event_from_a_file_follows_the_same_rule():
    refused = event_from_object({"id": "x", "text": "t", "label": 1}, SRC, labeled=True, classes=HAM_SPAM)
    assert (refused.reason, refused.detail) == ("undeclared_label", "label 1 is not a declared class ('ham', 'spam')")
    assert event_from_object({"id": "x", "text": "t", "label": "ham"}, SRC, labeled=True, classes=HAM_SPAM).label == "ham"


# ------------------------------------------------------------------------------------------
# Mail events

MESSAGE = "From: a@example.com\r\nSubject: caf\u00e9 \u00a3\r\n\r\nHello\r\n"


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_mail_event_carries_the_utf8_bytes_of_its_mail_string(native, monkeypatch):
    monkeypatch.setenv("STREAM_NB_NATIVE", native)
    value = json.dumps({"id": "m-1", "mail": MESSAGE, "label": "spam"}).encode()  # \u escapes: ASCII JSON
    event = decode(value)
    assert event == Event("m-1", None, None, "spam", SRC, MESSAGE.encode("utf-8"))
    assert event.mail[-13:] == b"\xc2\xa3\r\n\r\nHello\r\n"  # the pound sign as its 2 UTF-8 bytes


def test_a_mail_base64_event_carries_the_exact_bytes_even_when_they_are_not_utf8():
    raw = b"Subject: \xe9t\xe9\r\nX-Eight-Bit: \xff\x00\r\n\r\nbody\r\n"  # latin-1 and a NUL: not UTF-8
    value = json.dumps({"id": "m-2", "mail_base64": __import__("base64").b64encode(raw).decode(),
                        "features": {"folder": "inbox"}}).encode()
    event = decode(value, labeled=False)
    assert (event.id, event.text, event.features, event.label, event.mail) == ("m-2", None, {"folder": "inbox"}, None, raw)


def test_an_empty_mail_is_present_for_the_contract_and_a_text_event_has_no_mail():
    assert decode(b'{"id":"a","mail":"","label":"l"}').mail == b""
    assert decode(b'{"id":"a","mail_base64":"","label":"l"}').mail == b""
    assert decode(b'{"id":"a","text":"t","label":"l"}').mail is None  # the C decoder's Event too
    assert decode(b'{"id":"a","text":"t","mail":null,"label":"l"}').mail is None  # null is absence


def test_the_mail_checks_run_after_the_feature_checks_and_before_the_label_checks():
    assert decode(b'{"id":"a","features":[],"mail":1}').reason == "features_not_object"
    assert decode(b'{"id":"a","mail":1,"mail_base64":"QQ=="}').reason == "mail_not_string"
    assert decode(b'{"id":"a","text":"t","mail":"m","mail_base64":"%%"}').reason == "mail_and_mail_base64"
    assert decode(b'{"id":"a","text":"t","mail_base64":"%%"}').reason == "mail_with_text"
    assert decode(b'{"id":"a","mail_base64":"%%"}').reason == "invalid_base64"  # before missing_label
    assert decode(b'{"id":"a","mail":"m"}').reason == "missing_label"
    assert decode(b'{"id":"a","mail":"m","label":"l"}', labeled=False).reason == "label_on_unlabeled_topic"


def test_a_mail_event_read_from_a_file_follows_the_same_rules():
    assert event_from_object({"id": "x", "mail": "Subject: s\n\nb", "label": "ham"}, SRC, labeled=True).mail == \
        b"Subject: s\n\nb"
    refused = event_from_object({"id": "x", "mail": "s", "text": "t", "label": "ham"}, SRC, labeled=True)
    assert refused.reason == "mail_with_text"


def test_a_prediction_made_on_part_of_its_mail_says_truncated_and_is_otherwise_the_same_message():
    from stream_nb.events import PredictionEncoder

    encoder = PredictionEncoder(events_learned=7, checkpoint="000000000003", labeled_offsets=[["in", 0, 7]])
    events = [Event(f"m{i}", None, None, None, SourcePosition("mail", 0, i), b"Subject: x\n\nbody") for i in range(4)]
    probabilities = [{"ham": 0.25, "spam": 0.75}, None, {"ham": 1.0, "spam": 0.0}, {"ham": 0.5, "spam": 0.5}]
    plain = encoder.encode_many(events, probabilities, ["spam", None, "ham", "unsure"], None, [1.1, None, -1e9, 0.0])
    marked = encoder.encode_many(events, probabilities, ["spam", None, "ham", "unsure"], None, [1.1, None, -1e9, 0.0],
                                 {0, 2})
    assert marked[1] is None and marked[3] == plain[3]
    for i in (0, 2):
        message = json.loads(marked[i][1])
        assert list(message)[-1] == "truncated" and message.pop("truncated") is True
        assert message == json.loads(plain[i][1]) and marked[i][0] == plain[i][0]
