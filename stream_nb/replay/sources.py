"""Recorded streams from files: TSV, CSV or JSON Lines, read in file order."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path


class SourceError(ValueError):
    """A file that cannot be read as a stream of events; the message names file and line."""


def read_events(path: str | Path, *, text_field: str = "text", label_field: str = "label",
                id_field: str = "id", file_format: str | None = None,
                with_labels: bool = True) -> Iterator[dict]:
    """Yield events {"id", "text", "label"} from a file, in file order.

    Formats (by extension unless `file_format` says): `.tsv`/no extension -> `label<TAB>text`
    without header (the SMS Spam Collection's layout); `.csv` -> a header row naming the fields;
    `.jsonl` -> one JSON object per line with the named fields. Events without an id get
    `<file stem>:<line>`. With `with_labels=False` labels are dropped (an unlabeled stream).
    """
    path = Path(path)
    kind = (file_format or path.suffix.lstrip(".").lower() or "tsv")
    readers = {"tsv": _read_tsv, "txt": _read_tsv, "csv": _read_csv, "jsonl": _read_jsonl, "json": _read_jsonl}
    if kind not in readers:
        raise SourceError(f"{path}: unknown format {kind!r} (expected tsv, csv or jsonl)")
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    for line_number, record in readers[kind](path, text_field, label_field, id_field):
        text = record.get("text")
        if not isinstance(text, str):
            raise SourceError(f"{path}:{line_number}: field {text_field!r} is missing or not text")
        label = record.get("label") if with_labels else None
        if with_labels and label in (None, ""):
            raise SourceError(f"{path}:{line_number}: field {label_field!r} is missing")
        event_id = record.get("id")
        yield {"id": str(event_id) if event_id not in (None, "") else f"{path.stem}:{line_number}",
               "text": text, "label": label}


def _read_tsv(path: Path, text_field: str, label_field: str, id_field: str):
    with path.open(encoding="utf-8", newline="") as lines:
        for line_number, line in enumerate(lines, start=1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            label, separator, text = line.partition("\t")
            if not separator:
                raise SourceError(f"{path}:{line_number}: expected 'label<TAB>text'")
            yield line_number, {"label": label, "text": text}


def _read_csv(path: Path, text_field: str, label_field: str, id_field: str):
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle)
        if rows.fieldnames is None or text_field not in rows.fieldnames:
            raise SourceError(f"{path}: the header has no {text_field!r} column")
        for line_number, row in enumerate(rows, start=2):
            yield line_number, {"text": row.get(text_field), "label": row.get(label_field), "id": row.get(id_field)}


def _read_jsonl(path: Path, text_field: str, label_field: str, id_field: str):
    with path.open(encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SourceError(f"{path}:{line_number}: not JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise SourceError(f"{path}:{line_number}: expected a JSON object")
            yield line_number, {"text": record.get(text_field), "label": record.get(label_field),
                                "id": record.get(id_field)}
