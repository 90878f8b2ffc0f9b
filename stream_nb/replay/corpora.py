"""Loaders for the public spam corpora used by tests and benchmarks (read in place, never copied).

- `sms_spam(path)`: the SMS Spam Collection v.1 (TSV ``label<TAB>text``), in file order.
- `enron_spam(path)`: Enron-Spam (preprocessed), read straight from ``enron_spam.tar.gz``; each
  subset in arrival order (the ``NNNN`` of ``NNNN.YYYY-MM-DD.<owner>.{ham,spam}.txt`` counts
  across ham and spam), subsets in the order asked for.

Both yield events ``{"id", "text", "label"}`` with label ``"ham"`` or ``"spam"``, the shape
`stream_nb.replay.replay_events` takes.

Decoding of Enron files: UTF-8 when the bytes are valid UTF-8; otherwise (1,078 files hold raw
8-bit bytes) Latin-1, which maps every byte to one character, so no byte is lost and accented
words stay words for the tokeniser (``errors="replace"`` would turn each such byte into U+FFFD, a
non-word character that splits the word). ``fallback="replace"`` gives UTF-8 with replacement
instead. Text is the whole file, subject line included, with line endings as they are.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["ENRON_SUBSETS", "decode_message", "enron_spam", "enron_spam_names", "sms_spam"]

ENRON_SUBSETS = ("enron1", "enron2", "enron3", "enron4", "enron5", "enron6")
LABELS = ("ham", "spam")

# enron_spam/enron3/spam/1944.2004-12-19.BG.spam.txt
_ENRON_NAME = re.compile(
    r"^(?:.*/)?(?P<subset>enron\d+)/(?P<folder>ham|spam)/"
    r"(?P<file>(?P<number>\d+)\.(?P<date>[^./]+)\.(?P<owner>[^/]+)\.(?P<label>ham|spam)\.txt)$"
)


def sms_spam(path: str | Path) -> Iterator[dict]:
    """Events of the SMS Spam Collection in file order; id ``sms-<line number>`` (1-based).

    Lines are split on "\\n" only (the file has no "\\r"); empty lines are skipped; a line
    without a tab, or a label other than ham/spam, raises ValueError naming the line.
    """
    text = Path(path).read_text(encoding="utf-8")
    for line_number, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        label, separator, message = line.partition("\t")
        if not separator:
            raise ValueError(f"{path}: line {line_number} has no tab")
        if label not in LABELS:
            raise ValueError(f"{path}: line {line_number} has label {label!r} (expected ham or spam)")
        yield {"id": f"sms-{line_number}", "text": message, "label": label}


def decode_message(data: bytes, fallback: str = "latin-1") -> str:
    """UTF-8 if valid; otherwise Latin-1 (``fallback="latin-1"``) or UTF-8 with U+FFFD
    replacement characters (``fallback="replace"``)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        if fallback == "latin-1":
            return data.decode("latin-1")
        if fallback == "replace":
            return data.decode("utf-8", errors="replace")
        raise ValueError(f"fallback must be 'latin-1' or 'replace', got {fallback!r}") from None


def _check_subsets(subsets: Iterable[str]) -> tuple[str, ...]:
    if isinstance(subsets, str):
        subsets = (subsets,)
    subsets = tuple(subsets)
    unknown = [s for s in subsets if s not in ENRON_SUBSETS]
    if unknown:
        raise ValueError(f"unknown Enron-Spam subsets {unknown} (expected some of {ENRON_SUBSETS})")
    if len(set(subsets)) != len(subsets):
        raise ValueError(f"Enron-Spam subsets repeated: {subsets}")
    return subsets


def _arrival_key(item: tuple) -> tuple:
    match = item[0]
    return (int(match["number"]), match["file"])


def enron_spam_names(path_to_tar_gz: str | Path,
                     subsets: Iterable[str] = ENRON_SUBSETS) -> dict[str, list[tuple[str, str]]]:
    """{subset: [(id, label), ...] in arrival order} from the archive's member names only
    (no file contents read): the cheap way to check counts and order."""
    wanted = _check_subsets(subsets)
    found: dict[str, list] = {subset: [] for subset in wanted}
    with tarfile.open(path_to_tar_gz, mode="r:gz") as archive:
        for member in archive:
            match = _ENRON_NAME.match(member.name)
            if member.isfile() and match and match["subset"] in found:
                found[match["subset"]].append((match, None))
    return {subset: [(_event_id(m), m["label"]) for m, _ in sorted(items, key=_arrival_key)]
            for subset, items in found.items()}


def _event_id(match: re.Match) -> str:
    return f"{match['subset']}/{match['file'][: -len('.txt')]}"


def enron_spam(path_to_tar_gz: str | Path, subsets: Iterable[str] = ENRON_SUBSETS, *,
               fallback: str = "latin-1") -> Iterator[dict]:
    """Events of Enron-Spam: each subset in arrival order, subsets in the order given.

    The archive is gzip-compressed and its members are in no useful order, so it is read once,
    whole (the wanted subsets' files, about 50 MB for all six), before the first event is
    yielded. id: ``enron1/0001.1999-12-10.farmer.ham``; label: "ham" or "spam" (the folder and
    the file name must agree, else ValueError). Files other than messages (Summary.txt) are
    ignored.
    """
    wanted = _check_subsets(subsets)
    decode_message(b"", fallback)  # validates `fallback` before the archive is read
    found: dict[str, list] = {subset: [] for subset in wanted}
    with tarfile.open(path_to_tar_gz, mode="r:gz") as archive:
        for member in archive:
            if not member.isfile():
                continue
            match = _ENRON_NAME.match(member.name)
            if match is None or match["subset"] not in found:
                continue
            if match["folder"] != match["label"]:
                raise ValueError(f"{member.name}: file labelled {match['label']} in folder {match['folder']}")
            data = archive.extractfile(member).read()  # type: ignore[union-attr]
            found[match["subset"]].append((match, data))
    for subset in wanted:
        items = sorted(found[subset], key=_arrival_key)
        found[subset] = []  # let the bytes go as soon as the subset is handed out
        for match, data in items:
            yield {"id": _event_id(match), "text": decode_message(data, fallback), "label": match["label"]}
