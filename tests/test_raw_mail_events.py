"""Raw-mail records ([kafka] value_format = "mail"): the message's bytes as the value, the id
the key, the label a header; every refusal with its reason, in table order; configuration."""

from __future__ import annotations

import hashlib
import re

import pytest

from stream_nb.config import ConfigError, load_config
from stream_nb.events import Event, Rejected, SourcePosition, raw_mail
from stream_nb.events.raw_mail import RAW_MAIL_REASONS, decoder_for, raw_mail_decoder

SRC = SourcePosition("mail-in", 2, 41)
RAW = b"From: a@example.com\r\nSubject: caf\xe9\r\n\r\n\xff body\r\n"  # 8-bit, not UTF-8: kept as is
RAW_ID = "sha256:" + hashlib.sha256(RAW).hexdigest()[:16]  # no Message-ID: named by its bytes


def decode(value, key=b"msg-1", headers=(("label", b"spam"),), labeled=True, **options):
    return raw_mail_decoder(labeled=labeled, **options)(value, key, headers, SRC)


def test_a_labeled_raw_message_is_a_mail_event_with_its_exact_bytes():
    assert decode(RAW) == Event(RAW_ID, None, None, "spam", SRC, RAW)
    assert decode(RAW, headers=(("x-trace", b"t"), ("label", b"ham"), ("label", b"spam"))).label == "spam"  # last wins
    assert decode(RAW, headers=(("x-label", b"ham"), ("label", b"ham")), label_header="x-label").label == "ham"
    assert decode(RAW, headers=(), labeled=False) == Event(RAW_ID, None, None, None, SRC, RAW)
    assert decode(RAW, headers=(("label", None),), labeled=False).label is None  # a null header is absence


def test_a_correction_names_the_class_to_take_back_in_its_own_header():
    assert decode(RAW, headers=(("label", b"spam"), ("unlearn", b"ham"))) == \
        Event(RAW_ID, None, None, "spam", SRC, RAW, "ham")
    take_back = decode(RAW, headers=(("unlearn", b"ham"),))  # no label header: a take-back only
    assert (take_back.label, take_back.unlearn) == (None, "ham")
    assert decode(RAW, headers=(("unlearn", b"ham"), ("unlearn", b"spam"), ("label", b"x"))).unlearn == "spam"
    assert decode(RAW, headers=(("label", b"spam"), ("was", b"ham")), unlearn_header="was").unlearn == "ham"
    assert decode(RAW, headers=(("label", b"spam"), ("unlearn", None))).unlearn is None  # null is absence
    assert decode(RAW).unlearn is None
    as_mail = decoder_for({"value_format": "mail", "unlearn_header": "X-Was"}, labeled=True)
    assert as_mail(RAW, b"k", (("label", b"spam"), ("X-Was", b"ham")), SRC).unlearn == "ham"


def test_a_raw_message_has_no_event_key_whatever_its_headers():
    """The id is the message's own (its Message-ID, else its digest), never the record key, which
    only partitions; no header is read as the JSON events' "key" field (not yet)."""
    event = decode(RAW, key=b"user-7", headers=(("label", b"spam"), ("key", b"user-7")))
    assert (event.id, event.key) == (RAW_ID, None)
    with_id = b"Message-ID: <M.1@Example.net>\r\n" + RAW
    assert decode(with_id, key=b"queue-9").id == "M.1@example.net"
    assert decode(RAW, key=None, headers=(), labeled=False).key is None


@pytest.mark.parametrize("key", [None, b"", b"\xff\xfe"])
def test_a_record_without_a_usable_key_is_named_by_its_message(key):
    assert decode(RAW, key=key).id == RAW_ID


BAD = [  # (value, headers, labeled, options, reason): one per code, in table order
    (None, (("label", b"spam"),), True, {}, "empty_value"),
    (b"", (("label", b"spam"),), True, {}, "empty_value"),
    (RAW, (), True, {}, "missing_label"),
    (RAW, (("label", None),), True, {}, "missing_label"),
    (RAW, (("Label", b"spam"),), True, {}, "missing_label"),  # header names are case-sensitive
    (RAW, (("label", b"sp\xe4m"),), True, {}, "invalid_utf8"),
    (RAW, (("label", b""),), True, {}, "empty_label"),
    (RAW, (("label", b"eggs"),), True, {"classes": frozenset({"ham", "spam"})}, "undeclared_label"),
    (RAW, (("label", b"spam"), ("unlearn", b"\xff")), True, {}, "invalid_unlearn"),
    (RAW, (("label", b"spam"), ("unlearn", b"")), True, {}, "invalid_unlearn"),
    (RAW, (("unlearn", b"eggs"),), True, {"classes": frozenset({"ham", "spam"})}, "undeclared_unlearn"),
    (RAW, (("label", b"spam"), ("unlearn", b"spam")), True, {}, "unlearn_is_label"),
    (RAW, (("label", b"spam"),), False, {}, "label_on_unlabeled_topic"),
    (RAW, (("label", b"spam"), ("unlearn", b"ham")), False, {}, "label_on_unlabeled_topic"),
    (RAW, (("unlearn", b"ham"),), False, {}, "unlearn_on_unlabeled_topic"),
    (RAW, (("label", b"spam"),), True, {"keyed": True, "record_key": "ü".encode() * 1025}, "key_too_long"),
]


@pytest.mark.parametrize("value, headers, labeled, options, reason", BAD)
def test_a_bad_record_is_refused_with_its_reason_and_kept_whole(value, headers, labeled, options, reason):
    options = dict(options)
    key = options.pop("record_key", b"msg-1")
    refused = decode(value, key=key, headers=headers, labeled=labeled, **options)
    assert type(refused) is Rejected and refused.reason == reason, refused
    assert (refused.value, refused.key, refused.headers, refused.source) == (value, key, headers, SRC)
    assert refused.detail.isascii() and len(refused.detail) <= 200


def test_a_key_of_1024_characters_is_kept_from_the_record_or_a_header():
    longest = "ü" * 1024
    assert decode(RAW, key=longest.encode(), keyed=True).key == longest
    delivered = b"Delivered-To: " + b"u" * 1100 + b"@example.com\r\n" + RAW
    assert len(decode(delivered, keyed=True, key_header="Delivered-To").key) == 500  # a header's: MAX_ID_CHARS


def test_every_reason_is_tested_in_table_order_and_documented():
    assert list(dict.fromkeys(reason for *_, reason in BAD)) == list(RAW_MAIL_REASONS)
    table = re.findall(r"^``([a-z0-9_]+)``  ", raw_mail.__doc__, flags=re.MULTILINE)
    assert table == list(RAW_MAIL_REASONS)
    # no size is refused: the topic bounds a record, the featuriser reads the first 1 MiB
    assert decode(b"x" * 11, headers=(), max_bytes=10).reason == "missing_label"
    assert decode(b"x" * 11, headers=(("label", b"spam"),), max_bytes=10).mail == b"x" * 11


def test_the_value_format_picks_the_decoder():
    json_value = b'{"id":"j","text":"hello","label":"ham"}'
    as_json = decoder_for({"value_format": "json"}, labeled=True)(json_value, None, (), SRC)
    assert as_json == Event("j", "hello", None, "ham", SRC)
    as_mail = decoder_for({"value_format": "mail", "label_header": "l", "max_message_bytes": 100}, labeled=True)
    json_id = "sha256:" + hashlib.sha256(json_value).hexdigest()[:16]  # raw: JSON text is a message too
    assert as_mail(json_value, None, (("l", b"ham"),), SRC) == Event(json_id, None, None, "ham", SRC, json_value)
    assert as_mail(b"x" * 101, None, (("l", b"ham"),), SRC).mail == b"x" * 101  # any size: read up to the cap


@pytest.mark.parametrize("override, error", [
    ('kafka.value_format="raw"', "kafka.value_format: 'raw' is not one of json, mail"),
    ("kafka.value_format=1", "kafka.value_format: expected str, got int 1"),
    ('kafka.label_header=""', "kafka.label_header: '' is not a header name"),
    ('kafka.label_header=" label"', "kafka.label_header: ' label' is not a header name"),
    ('kafka.unlearn_header=""', "kafka.unlearn_header: '' is not a header name"),
    ('kafka.unlearn_header="label"', "kafka.unlearn_header: 'label' is also kafka.label_header"),
])
def test_bad_value_format_settings_are_one_clear_error(override, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config("configs/spam.toml", [override])


def test_value_format_defaults_to_json_and_label_header_to_label():
    kafka = load_config("configs/spam.toml").kafka
    assert (kafka["value_format"], kafka["label_header"]) == ("json", "label")
    kafka = load_config("configs/spam.toml", ['kafka.value_format="mail"', 'kafka.label_header="X-Spam-Class"']).kafka
    assert (kafka["value_format"], kafka["label_header"]) == ("mail", "X-Spam-Class")
    assert kafka["unlearn_header"] == "unlearn"
