"""The corpus loaders of stream_nb.replay.corpora against the shared data's README.

The whole Enron archive is read once per test session (module fixture): about 4 s here.
A missing corpus fails under CI=true and skips elsewhere (tests/corpora.py).
"""

from __future__ import annotations

import tarfile
from collections import Counter

import pytest

from stream_nb.replay.corpora import (
    ENRON_SUBSETS,
    decode_message,
    enron_spam,
    enron_spam_names,
    sms_spam,
)
from tests.corpora import SHARED_DATA, _require, sms_spam_path

# ham/spam per subset, as /work/shared/data/README.md states them
ENRON_COUNTS = {
    "enron1": (3672, 1500),
    "enron2": (4361, 1496),
    "enron3": (4012, 1500),
    "enron4": (1500, 4499),
    "enron5": (1500, 3675),
    "enron6": (1500, 4500),
}
ENRON_FIRST_LAST = {
    "enron1": ("enron1/0001.1999-12-10.farmer.ham", "enron1/5172.2002-01-11.farmer.ham"),
    "enron2": ("enron2/0001.1999-12-10.kaminski.ham", "enron2/5857.2005-07-22.SA_and_HP.spam"),
    "enron3": ("enron3/0001.2001-02-07.kitchen.ham", "enron3/5512.2002-02-06.kitchen.ham"),
    "enron4": ("enron4/0001.2001-04-02.williams.ham", "enron4/6000.2005-09-06.GP.spam"),
    "enron5": ("enron5/0001.2000-01-17.beck.ham", "enron5/5175.2005-07-22.SA_and_HP.spam"),
    "enron6": ("enron6/0001.2000-06-06.lokay.ham", "enron6/6000.2005-07-31.BG.spam"),
}


def enron_path():
    return _require(SHARED_DATA / "enron_spam.tar.gz", "Enron-Spam archive")


def _number(event_id: str) -> int:
    return int(event_id.split("/", 1)[1].split(".", 1)[0])


@pytest.fixture(scope="module")
def enron_events():
    return list(enron_spam(enron_path()))


# ---- SMS ------------------------------------------------------------------------------------

def test_sms_counts_order_and_ids():
    events = list(sms_spam(sms_spam_path()))
    assert len(events) == 5574
    assert Counter(e["label"] for e in events) == {"ham": 4827, "spam": 747}
    assert [e["id"] for e in events[:2]] == ["sms-1", "sms-2"]
    assert events[0]["text"].startswith("Go until jurong point, crazy..")
    assert events[0]["label"] == "ham"
    assert events[2]["label"] == "spam" and events[2]["text"].startswith("Free entry in 2 a wkly comp")
    assert events[-1] == {"id": "sms-5574", "text": "Rofl. Its true to its name", "label": "ham"}
    assert all(set(e) == {"id", "text", "label"} and e["text"] for e in events)


def test_sms_bad_lines_are_named(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("ham\tok\n\nspam no tab\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 3 has no tab"):
        list(sms_spam(path))
    path.write_text("junk\ttext\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1 has label 'junk'"):
        list(sms_spam(path))


# ---- Enron ----------------------------------------------------------------------------------

def test_enron_counts_per_subset(enron_events):
    counts = Counter((e["id"].split("/")[0], e["label"]) for e in enron_events)
    for subset, (ham, spam) in ENRON_COUNTS.items():
        assert (counts[(subset, "ham")], counts[(subset, "spam")]) == (ham, spam), subset
    assert len(enron_events) == 33715
    assert Counter(e["label"] for e in enron_events) == {"ham": 16545, "spam": 17170}


def test_enron_arrival_order_and_ids(enron_events):
    subsets_seen = list(dict.fromkeys(e["id"].split("/")[0] for e in enron_events))
    assert subsets_seen == list(ENRON_SUBSETS)  # subsets in order, each contiguous
    for subset in ENRON_SUBSETS:
        ids = [e["id"] for e in enron_events if e["id"].startswith(subset + "/")]
        assert (ids[0], ids[-1]) == ENRON_FIRST_LAST[subset]
        numbers = [_number(i) for i in ids]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
        expected = set(range(1, numbers[-1] + 1)) - ({3111} if subset == "enron4" else set())
        assert set(numbers) == expected  # 1..N without gaps (enron4 #3111 is missing)
    assert all(e["id"].endswith("." + e["label"]) for e in enron_events)


def test_enron_text_is_the_whole_file(enron_events):
    first = enron_events[0]
    assert first["text"] == "Subject: christmas tree farm pictures\n"
    assert all(e["text"].startswith("Subject:") for e in enron_events)
    assert not any("\ufffd" in e["text"] for e in enron_events)  # Latin-1 fallback loses no byte
    with tarfile.open(enron_path()) as archive:
        member = next(m for m in archive if m.name.endswith("enron1/ham/0001.1999-12-10.farmer.ham.txt"))
        assert archive.extractfile(member).read().decode("utf-8") == first["text"]


def test_enron_names_agree_with_events_and_subset_selection(enron_events):
    names = enron_spam_names(enron_path(), subsets=("enron4", "enron2"))
    assert list(names) == ["enron4", "enron2"]
    for subset in ("enron4", "enron2"):
        expected = [(e["id"], e["label"]) for e in enron_events if e["id"].startswith(subset + "/")]
        assert names[subset] == expected
    with pytest.raises(ValueError, match="unknown Enron-Spam subsets"):
        enron_spam_names(enron_path(), subsets=("enron7",))


def test_decode_message_fallbacks():
    assert decode_message("café".encode("utf-8")) == "café"
    assert decode_message(b"caf\xe9") == "café"
    assert decode_message(b"caf\xe9", fallback="replace") == "caf\ufffd"
    with pytest.raises(ValueError, match="fallback"):
        decode_message(b"\xff", fallback="strict")
