"""`stream-nb publish` message keys (no broker): --key event (the event's "key" field, else its
id), id and none; the value carries "key"; raw mail stays keyed by its id."""

from __future__ import annotations

import argparse
import json

import pytest

from stream_nb.events import SourcePosition, decode_record
from stream_nb.kafka.publish import (
    KEY_CHOICES,
    PublishError,
    encode_event,
    iter_messages,
    message_key,
    register,
)

SRC = SourcePosition("events", 0, 0)
LINES = [
    {"id": "e1", "key": "user-1", "text": "first", "label": "ham"},
    {"id": "e2", "text": "no key", "label": "spam"},
    {"id": "e3", "key": "Zoë", "features": {"n": 1}, "label": 1},
    {"id": "e4", "key": None, "text": "null key", "label": "ham"},
]


def write_jsonl(path, lines) -> None:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")


def messages(path, **options) -> list[tuple]:
    options.setdefault("with_labels", True)
    return list(iter_messages(path, file_format=None, limit=None, **options))


def test_the_key_choices_and_the_default_is_event():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert KEY_CHOICES == ("event", "id", "none")
    assert parser.parse_args(["publish", "f.jsonl", "--topic", "t"]).key == "event"
    assert parser.parse_args(["publish", "f.jsonl", "--topic", "t", "--key", "id"]).key == "id"
    assert parser.parse_args(["publish", "f.jsonl", "--topic", "t", "--key-field", "user"]).key_field == "user"
    with pytest.raises(SystemExit):
        parser.parse_args(["publish", "f.jsonl", "--topic", "t", "--key", "user"])


@pytest.mark.parametrize("event, keys, value_format, expected", [
    ({"id": "e1", "key": "user-1"}, "event", "json", b"user-1"),
    ({"id": "e1"}, "event", "json", b"e1"),
    ({"id": "e1", "key": None}, "event", "json", b"e1"),
    ({"id": "e1", "key": "Zoë"}, "event", "json", "Zoë".encode()),
    ({"id": "e1", "key": "user-1"}, "id", "json", b"e1"),
    ({"id": "e1", "key": "user-1"}, "none", "json", None),
    ({"id": "e1", "key": "user-1"}, "event", "mail", b"e1"),  # the raw-mail decoder reads the id from the key
    ({"id": "e1", "key": "user-1"}, "id", "mail", b"e1"),
    ({"id": "e1", "key": "user-1"}, "none", "mail", None),
])
def test_message_key(event, keys, value_format, expected):
    assert message_key(event, keys, value_format) == expected


def test_an_unknown_key_choice_is_refused():
    with pytest.raises(ValueError, match="keys must be one of event, id, none"):
        message_key({"id": "e1"}, "user")


def test_the_value_carries_the_key_right_after_the_id():
    assert encode_event({"id": "e1", "key": "u", "text": "t", "features": None, "label": "ham"}, with_labels=True) \
        == b'{"id":"e1","key":"u","text":"t","label":"ham"}'
    assert encode_event({"id": "e1", "key": "u", "text": "t", "label": "ham"}, with_labels=False) == \
        b'{"id":"e1","key":"u","text":"t"}'  # the key is allowed on the unlabeled topic too
    assert encode_event({"id": "e1", "text": "t", "label": "ham"}, with_labels=True) == \
        b'{"id":"e1","text":"t","label":"ham"}'  # no key: the value is as before


def test_a_keyed_file_is_published_with_event_keys_by_default(tmp_path):
    write_jsonl(tmp_path / "k.jsonl", LINES)
    assert messages(tmp_path / "k.jsonl") == [
        (b"user-1", b'{"id":"e1","key":"user-1","text":"first","label":"ham"}'),
        (b"e2", b'{"id":"e2","text":"no key","label":"spam"}'),
        ("Zoë".encode(), '{"id":"e3","key":"Zoë","features":{"n":1},"label":1}'.encode()),
        (b"e4", b'{"id":"e4","text":"null key","label":"ham"}'),
    ]
    assert [key for key, _ in messages(tmp_path / "k.jsonl", keys="id")] == [b"e1", b"e2", b"e3", b"e4"]
    assert [key for key, _ in messages(tmp_path / "k.jsonl", keys="none")] == [None] * 4
    # unlabeled: the key stays in the value and the message key
    assert messages(tmp_path / "k.jsonl", with_labels=False)[0] == (b"user-1",
                                                                    b'{"id":"e1","key":"user-1","text":"first"}')


def test_published_values_read_back_with_their_key(tmp_path):
    write_jsonl(tmp_path / "k.jsonl", LINES)
    read = [decode_record(value, key, None, SRC, labeled=True) for key, value in messages(tmp_path / "k.jsonl")]
    assert [(event.id, event.key) for event in read] == [("e1", "user-1"), ("e2", None), ("e3", "Zoë"), ("e4", None)]


def test_a_csv_key_column_and_key_field(tmp_path):
    (tmp_path / "k.csv").write_text("id,tenant,text,label\na,t-1,hi,ham\nb,,bye,spam\n", encoding="utf-8")
    assert messages(tmp_path / "k.csv", fields={"key_field": "tenant"}) == [
        (b"t-1", b'{"id":"a","key":"t-1","text":"hi","label":"ham"}'),
        (b"b", b'{"id":"b","text":"bye","label":"spam"}'),
    ]
    # without --key-field tenant, "tenant" is a column like any other: not read
    assert [key for key, _ in messages(tmp_path / "k.csv")] == [b"a", b"b"]


def test_raw_mail_is_keyed_by_its_id_and_sends_no_event_key(tmp_path):
    write_jsonl(tmp_path / "m.jsonl", [{"id": "m1", "key": "box-1", "mail": "Subject: x\r\n\r\nbody",
                                        "label": "spam"}])
    assert messages(tmp_path / "m.jsonl", value_format="mail") == [
        (b"m1", b"Subject: x\r\n\r\nbody", [("label", b"spam")])]
    assert messages(tmp_path / "m.jsonl", value_format="mail", keys="none")[0][0] is None
    # as JSON the same event is keyed by its key and carries it
    assert messages(tmp_path / "m.jsonl") == [
        (b"box-1", b'{"id":"m1","key":"box-1","mail":"Subject: x\\r\\n\\r\\nbody","label":"spam"}')]


def test_raw_mail_keyed_by_a_header_goes_to_the_partition_of_that_users_state(tmp_path):
    """--key-header: the key is the mailbox the worker's mail_key_header reads (first address,
    lower-cased); a message without that header keeps its id as key; --key none wins."""
    from stream_nb.events.raw_mail import raw_mail_decoder

    mails = [{"id": "m1", "mail": "Delivered-To: Ann <Ann@Example.ORG>\r\nSubject: x\r\n\r\nbody", "label": "spam"},
             {"id": "m2", "mail": "Subject: y\r\n\r\nno delivery header", "label": "ham"}]
    write_jsonl(tmp_path / "m.jsonl", mails)
    sent = messages(tmp_path / "m.jsonl", value_format="mail", key_header="Delivered-To")
    assert [key for key, *_ in sent] == [b"ann@example.org", b"m2"]
    decode = raw_mail_decoder(labeled=True, keyed=True, key_header="Delivered-To")
    assert decode(sent[0][1], sent[0][0], sent[0][2], SRC).key == sent[0][0].decode()
    assert messages(tmp_path / "m.jsonl", value_format="mail", key_header="Delivered-To", keys="none")[0][0] is None


def test_key_header_is_for_raw_mail_only(tmp_path, capsys):
    write_jsonl(tmp_path / "k.jsonl", LINES)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["publish", str(tmp_path / "k.jsonl"), "--topic", "t", "--key-header", "Delivered-To"])
    assert args.func(args) == 2
    assert "--key-header keys raw mail (--value-format mail)" in capsys.readouterr().err


@pytest.mark.parametrize("line, message", [
    ({"id": "b", "key": 7, "text": "t", "label": "ham"},
     "k.jsonl:2: not a valid event: key_not_string (key is integer, expected a string)"),
    ({"id": "b", "key": "", "text": "t", "label": "ham"}, "k.jsonl:2: not a valid event: empty_key (key is the empty string)"),
])
def test_a_bad_key_stops_the_publish_naming_the_line(tmp_path, line, message):
    write_jsonl(tmp_path / "k.jsonl", [LINES[0], line, LINES[1]])
    with pytest.raises(PublishError) as raised:
        messages(tmp_path / "k.jsonl")
    assert str(raised.value) == f"{tmp_path}/{message}"
