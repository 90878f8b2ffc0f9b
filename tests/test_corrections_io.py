"""Corrections ("unlearn") along every path that reads or writes events: JSONL files (replay,
publish), publish's JSON and raw-mail messages read back by the worker's decoders, a message
piped in. What is written is read back with the worker's own decoder, so a field dropped
anywhere on the way shows."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from stream_nb.events import Event, SourcePosition, decode_record
from stream_nb.events.raw_mail import raw_mail_decoder
from stream_nb.kafka.publish import PublishError, encode_event, encode_raw_mail, iter_messages, stdin_event
from stream_nb.replay.sources import read_events

SRC = SourcePosition("t", 0, 0)
MAIL = b"Subject: win\r\nMessage-ID: <m1@x>\r\n\r\ncash now\r\n"

LINES = [
    {"id": "a", "text": "win cash", "label": "ham"},
    {"id": "a", "text": "win cash", "label": "spam", "unlearn": "ham"},
    {"id": "a", "text": "win cash", "label": None, "unlearn": "spam"},  # a take-back only
    {"id": "b", "features": {"n": 1}, "unlearn": 2},  # label absent: a take-back only too
    {"id": "c", "text": "hi", "label": 1, "unlearn": "1"},
]


def write_jsonl(path, lines) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_a_jsonl_file_keeps_unlearn_and_takes_a_null_label_beside_it(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", LINES)
    events = list(read_events(tmp_path / "c.jsonl"))  # labels required: a take-back has its unlearn
    assert [(e["id"], e["label"], e.get("unlearn")) for e in events] == [
        ("a", "ham", None), ("a", "spam", "ham"), ("a", None, "spam"), ("b", None, 2), ("c", 1, "1")]
    assert "unlearn" not in events[0]  # a plain event's dict stays as it was
    assert type(events[3]["unlearn"]) is int and type(events[4]["unlearn"]) is str
    dropped = list(read_events(tmp_path / "c.jsonl", labels="dropped"))
    assert all(e["label"] is None and "unlearn" not in e for e in dropped)


def test_a_jsonl_file_refuses_what_the_contract_refuses(tmp_path):
    write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "text": "x", "label": "ham", "unlearn": "ham"},
                                         {"id": "b", "text": "x", "label": "ham", "unlearn": 1.5},
                                         {"id": "c", "text": "x", "label": "ham"}])
    rejected = Counter()
    kept = list(read_events(tmp_path / "bad.jsonl", rejected=rejected))
    assert [e["id"] for e in kept] == ["c"] and rejected == {"unlearn_is_label": 1, "invalid_unlearn": 1}
    write_jsonl(tmp_path / "stray.jsonl", [{"id": "d", "text": "x", "label": "ham", "unlearn": "eggs"}])
    undeclared = Counter()
    assert list(read_events(tmp_path / "stray.jsonl", rejected=undeclared, classes=frozenset({"ham", "spam"}))) == []
    assert undeclared == {"undeclared_unlearn": 1}
    write_jsonl(tmp_path / "none.jsonl", [{"id": "a", "text": "x", "label": None}])
    with pytest.raises(ValueError, match="missing"):
        list(read_events(tmp_path / "none.jsonl"))


@pytest.mark.parametrize("native", ["1", "0"])
def test_published_corrections_read_back_as_the_events_they_were(tmp_path, monkeypatch, native):
    monkeypatch.setenv("STREAM_NB_NATIVE", native)
    write_jsonl(tmp_path / "c.jsonl", LINES)
    values = [value for _, value in iter_messages(tmp_path / "c.jsonl", file_format=None, with_labels=True,
                                                  limit=None, keys="id")]
    read = [decode_record(value, None, None, SRC, labeled=True) for value in values]
    assert all(type(event) is Event for event in read), read
    assert [(e.id, e.label, e.unlearn) for e in read] == [
        (line["id"], line.get("label"), line.get("unlearn")) for line in LINES]
    assert [type(e.unlearn) for e in read] == [type(None), str, str, int, str]
    # unlabeled: neither label nor unlearn is sent
    unlabeled = [value for _, value in iter_messages(tmp_path / "c.jsonl", file_format=None, with_labels=False,
                                                     limit=None, keys="id")]
    assert all(not {"label", "unlearn"} & set(json.loads(value)) for value in unlabeled)


def test_a_mail_correction_goes_as_json_or_as_a_raw_record_with_its_headers():
    event = stdin_event(MAIL, event_id=None, label="spam", with_labels=True, unlearn="ham")
    assert (event["id"], event["label"], event["unlearn"]) == ("m1@x", "spam", "ham")
    as_json = decode_record(encode_event(event, with_labels=True), None, None, SRC, labeled=True)
    assert as_json == Event("m1@x", None, None, "spam", SRC, MAIL, "ham")
    value, headers = encode_raw_mail(event, with_labels=True, label_header="label", unlearn_header="X-Was")
    assert headers == [("label", b"spam"), ("X-Was", b"ham")]
    raw = raw_mail_decoder(labeled=True, unlearn_header="X-Was")(value, b"m1@x", headers, SRC)
    assert raw == Event("m1@x", None, None, "spam", SRC, MAIL, "ham")
    take_back = stdin_event(MAIL, event_id="m1", label=None, with_labels=True, unlearn="spam")
    value, headers = encode_raw_mail(take_back, with_labels=True, label_header="label")
    assert headers == [("unlearn", b"spam")]  # no label header at all
    assert raw_mail_decoder(labeled=True)(value, b"m1", headers, SRC).unlearn == "spam"
    assert json.loads(encode_event(take_back, with_labels=True))["label"] is None


def test_a_piped_correction_needs_the_labeled_topic():
    assert stdin_event(MAIL, event_id="m", label=None, with_labels=True, unlearn="ham")["label"] is None
    with pytest.raises(PublishError, match="--unlearn"):
        stdin_event(MAIL, event_id="m", label=None, with_labels=False, unlearn="ham")
    with pytest.raises(PublishError, match="needs --label LABEL, or --unlearn CLASS"):
        stdin_event(MAIL, event_id="m", label=None, with_labels=True)
    assert "unlearn" not in stdin_event(MAIL, event_id="m", label="ham", with_labels=True)
