"""Recorded streams from files: TSV, CSV or JSON Lines, read in file order.

Every event is checked by the event contract of the Kafka path (`stream_nb.events.codec`), so
a file and the topic it was published to hold the same events, and a bad event is named by the
reason code a worker would dead-letter it with.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from stream_nb.events import Rejected, SourcePosition, event_from_object, parse_json

LABELS = ("required", "optional", "dropped")


class SourceError(ValueError):
    """A file that cannot be read as a stream of events; the message names file and line."""


def read_events(path: str | Path, *, text_field: str = "text", label_field: str = "label",
                id_field: str = "id", features_field: str = "features", feature_columns: str | None = None,
                file_format: str | None = None,
                labels: str = "required", rejected: Counter | None = None) -> Iterator[dict]:
    """Yield events {"id", "text", "features", "label"} from a file, in file order.

    Formats (by extension unless `file_format` says):
    - `.tsv`/no extension: `label<TAB>text` without header (the SMS Spam Collection's layout);
    - `.csv`: a header row; the `text_field` column is the text, and the `feature_columns`
      (comma-separated names, or "*" for every column but the id, label and text) are features:
      a cell that reads as a finite number is that number, others are strings, an empty cell
      is absent;
    - `.jsonl`: one JSON object per line; text, features ({name: value}) or both.

    `labels`: "required" (an event without a label is an error: a labeled topic), "optional"
    (it is an unlabeled event: predicted, not scored) or "dropped" (every event unlabeled).
    Events without an id get `<file stem>:<line>`; a numeric id becomes its string.

    An event the contract refuses is a `SourceError` naming the line and the reason code, or,
    with `rejected` given, counted there by reason and skipped (as a worker dead-letters it).
    """
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {', '.join(LABELS)}, got {labels!r}")
    path = Path(path)
    kind = (file_format or path.suffix.lstrip(".").lower() or "tsv")
    readers = {"tsv": _read_tsv, "txt": _read_tsv, "csv": _read_csv, "jsonl": _read_jsonl, "json": _read_jsonl}
    if kind not in readers:
        raise SourceError(f"{path}: unknown format {kind!r} (expected tsv, csv or jsonl)")
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    fields = {"text": text_field, "label": label_field, "id": id_field, "features": features_field,
              "columns": feature_columns}
    for line_number, record in readers[kind](path, fields):
        source = SourcePosition(str(path), 0, line_number)
        if not isinstance(record, dict):  # refused by the parser, or not a JSON object
            refused = record if isinstance(record, Rejected) else event_from_object(record, source, labeled=False)
            _refuse(refused, path, line_number, rejected)
            continue
        event_id = record.get("id")
        if event_id in (None, ""):
            record["id"] = f"{path.stem}:{line_number}"
        elif isinstance(event_id, int) and not isinstance(event_id, bool):
            record["id"] = str(event_id)
        if labels == "dropped":
            record.pop("label", None)
        elif labels == "required" and record.get("label") in (None, ""):
            raise SourceError(f"{path}:{line_number}: field {label_field!r} is missing")
        labeled = record.get("label") is not None
        event = event_from_object(record, source, labeled=labeled)
        if isinstance(event, Rejected):
            _refuse(event, path, line_number, rejected)
            continue
        yield {"id": event.id, "text": event.text, "features": event.features, "label": event.label}


def add_field_options(parser) -> None:
    """--text-field, --label-field, --id-field and --features-field, for every command that reads
    a file of events (publish, replay, demo)."""
    parser.add_argument("--text-field", default="text", help="CSV/JSONL field of the text (default: text)")
    parser.add_argument("--label-field", default="label", help="CSV/JSONL field of the label (default: label)")
    parser.add_argument("--id-field", default="id",
                        help="CSV/JSONL field of the id (default: id; missing ids become FILE-STEM:LINE)")
    parser.add_argument("--features-field", default="features",
                        help="JSONL field of the structured features, an object {name: value} (default: features)")
    parser.add_argument("--feature-columns", default=None, metavar="A,B,...|*",
                        help="CSV columns that are features (numbers where a cell reads as one); "
                             "'*': every column but the id, label and text")


def field_options(args) -> dict:
    """The keyword arguments of `read_events` that `add_field_options` set."""
    return {"text_field": args.text_field, "label_field": args.label_field, "id_field": args.id_field,
            "features_field": args.features_field, "feature_columns": args.feature_columns}


def _refuse(rejected_event: Rejected, path: Path, line_number: int, rejected: Counter | None) -> None:
    if rejected is None:
        raise SourceError(f"{path}:{line_number}: not a valid event: {rejected_event.reason} ({rejected_event.detail})")
    rejected[rejected_event.reason] += 1


def _read_tsv(path: Path, fields: dict):
    with path.open(encoding="utf-8", newline="") as lines:
        for line_number, line in enumerate(lines, start=1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            label, separator, text = line.partition("\t")
            if not separator:
                raise SourceError(f"{path}:{line_number}: expected 'label<TAB>text'")
            yield line_number, {"label": label, "text": text}


def _read_csv(path: Path, fields: dict):
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle)
        if rows.fieldnames is None:
            raise SourceError(f"{path}: no header row")
        header = rows.fieldnames
        text_column = fields["text"] if fields["text"] in header else None
        wanted = fields["columns"]
        if wanted == "*":
            columns = [name for name in header if name not in (fields["label"], fields["id"], text_column)]
        else:
            columns = [name.strip() for name in wanted.split(",") if name.strip()] if wanted else []
            missing = [name for name in columns if name not in header]
            if missing:
                raise SourceError(f"{path}: the header has no column {missing[0]!r} (--feature-columns)")
        if text_column is None and not columns:
            raise SourceError(f"{path}: the header has no {fields['text']!r} column (--text-field names it; "
                              "--feature-columns '*' reads the other columns as features)")
        for line_number, row in enumerate(rows, start=2):
            record = {"label": row.get(fields["label"]) or None, "id": row.get(fields["id"])}
            if text_column is not None:
                record["text"] = row.get(text_column)
            if columns:
                record["features"] = {name: _cell(row[name]) for name in columns if row.get(name) not in (None, "")}
            yield line_number, record


def _cell(text: str):
    """A CSV cell: an integer, a finite float, or the string as it is."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def _read_jsonl(path: Path, fields: dict):
    with path.open(encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            record = parse_json(line, SourcePosition(str(path), 0, line_number))
            if isinstance(record, dict):
                record = {key: record.get(fields[key]) for key in ("text", "label", "id", "features")}
            yield line_number, record
