"""Locating and loading the shared test corpora (kept outside the repository, in ../shared/data).

A missing corpus fails the test under CI (``CI=true``) and skips it elsewhere, with the path
that was looked for, so a fresh checkout without the data still runs the rest of the suite.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _require(path: Path, what: str) -> Path:
    if path.is_file():
        return path
    reason = f"{what} not found at {path} (expected the shared data next to the repository)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def sms_spam_path() -> Path:
    """Path of the UCI SMS Spam Collection file (TSV ``label<TAB>text``, UTF-8)."""
    return _require(
        SHARED_DATA / "sms_spam_collection" / "SMSSpamCollection", "SMS Spam Collection"
    )


def load_sms_spam() -> list[tuple[str, str]]:
    """All (label, text) pairs of the SMS Spam Collection, in file order."""
    from stream_nb.replay.corpora import sms_spam

    return [(event["label"], event["text"]) for event in sms_spam(sms_spam_path())]


def enron_spam_path() -> Path:
    """Path of the Enron-Spam archive (enron1..6, one message per file)."""
    return _require(SHARED_DATA / "enron_spam.tar.gz", "Enron-Spam")


def load_enron_texts() -> list[str]:
    """The texts of all of Enron-Spam, the six subsets one after another in arrival order."""
    from stream_nb.replay.corpora import enron_spam

    return [event["text"] for event in enron_spam(enron_spam_path())]


def spamassassin_2003_path() -> Path:
    """Path of the SpamAssassin 2003 archive (raw mail: easy-ham-2 and spam-2)."""
    return _require(SHARED_DATA / "spamassassin_2003.tar.gz", "SpamAssassin 2003 corpus")


def load_spamassassin_2003() -> list[tuple[str, bytes]]:
    """(folder, raw bytes) of every message of the SpamAssassin 2003 archive, in archive order."""
    import tarfile

    messages = []
    with tarfile.open(spamassassin_2003_path()) as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(".txt"):
                folder = member.name.split("/")[1]
                messages.append((folder, archive.extractfile(member).read()))
    return messages
