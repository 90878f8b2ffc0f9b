"""Recorded streams from files: TSV, CSV or JSON Lines, read in file order.

Every event is checked by the event contract of the Kafka path (`stream_nb.events.codec`), so
a file and the topic it was published to hold the same events, and a bad event is named by the
reason code a worker would dead-letter it with.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from stream_nb.events import DEFAULT_MAX_BYTES, Rejected, SourcePosition, event_from_object, parse_json
from stream_nb.mail.sources import is_mail_source, parse_label_folders, read_mail

LABELS = ("required", "optional", "dropped")

# A line of a TSV file without a tab: no message a worker could receive, so a reason of its own.
MISSING_TAB = "missing_tab"
# A CSV record the csv module cannot parse (not one a worker could receive either).
INVALID_CSV = "invalid_csv"
# Bytes that are not UTF-8, read with errors="surrogateescape", become U+DC80..U+DCFF; valid
# UTF-8 never decodes to them (strict UTF-8 refuses encoded surrogates, as the worker does).
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


class SourceError(ValueError):
    """A file that cannot be read as a stream of events; the message names file and line."""


class Rejections(Counter):
    """Events refused and skipped, counted by reason, with where and why the first of each
    reason was refused (`first[reason]`: "FILE:LINE: detail" or "TOPIC[PARTITION]@OFFSET: detail")."""

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[str, str] = {}

    def add(self, reason: str, where: str) -> None:
        self[reason] += 1
        self.first.setdefault(reason, where)


def read_events(path: str | Path, *, text_field: str = "text", label_field: str = "label",
                id_field: str = "id", features_field: str = "features", feature_columns: str | None = None,
                file_format: str | None = None,
                labels: str = "required", rejected: Counter | None = None,
                classes: frozenset | None = None, label_folders: list[str] | None = None,
                key_field: str = "key") -> Iterator[dict]:
    """Yield events {"id", "text", "features", "label"} (and "mail", bytes, of a mail event,
    "unlearn" of a correction and "key" of a keyed event) from a file, in file order.

    Formats (by extension unless `file_format` says):
    - `.tsv`/no extension: `label<TAB>text` without header (the SMS Spam Collection's layout),
      so no key;
    - `.csv`: a header row; the `text_field` column is the text, the `key_field` column (if the
      header has one) the event's key, and the `feature_columns` (comma-separated names, or "*"
      for every column but the id, key, label and text) are features: a cell that reads as a
      finite number is that number, others are strings, an empty cell is absent (an empty key
      cell: no key);
    - `.jsonl`: one JSON object per line; text, features ({name: value}) or both, or a mail
      event ("mail" or "mail_base64", with or without features: the event contract's rules);
      a correction's "unlearn" (the class to take back) is kept, and its label may be null;
      the `key_field` field is the event's key (a non-empty string, or null: no key);
    - mail where it lives (`file_format` "mail", or a directory, a .tar/.tar.gz or an mbox):
      one mail event per message, labeled by folder (`label_folders`: ["LABEL=FOLDER", ...],
      default spam=spam and ham=ham): `stream_nb.mail.sources`. A file passed over (not a
      message, unreadable) is counted in `rejected`, never an error.

    `labels`: "required" (an event without a label is an error: a labeled topic; a take-back,
    "unlearn" with a null label, has none), "optional" (it is an unlabeled event: predicted, not
    scored) or "dropped" (every event unlabeled: labels and "unlearn" are left out).
    Events without an id get `<file stem>:<line>`; a numeric id becomes its string. A key is
    never converted: a number, or "" (in JSONL), is refused (key_not_string, empty_key). A
    `key_field` that names the id, text, label or features field is that field only (no key).

    An event the contract refuses is a `SourceError` naming the line and the reason code, or,
    with `rejected` given, counted there by reason and skipped (as a worker dead-letters it).
    So is a line that is not UTF-8 (`invalid_utf8`, as the worker's), a TSV line without a tab
    (`missing_tab`) and a CSV record the csv module refuses (`invalid_csv`, or `too_large` for a
    cell over the worker's 1 MB message limit): one bad line never ends the file.
    `classes`: the only labels an event may carry ([model] classes; None: any).
    """
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {', '.join(LABELS)}, got {labels!r}")
    path = Path(path)
    if not path.exists():  # (before its name is read for a format: x.tar.gz is no "gz" file)
        raise SourceError(f"{path}: no such file")
    if file_format == "mail" or (file_format is None and is_mail_source(path)):
        yield from _read_mail_events(path, labels, rejected, classes, label_folders)
        return
    kind = (file_format or path.suffix.lstrip(".").lower() or "tsv")
    readers = {"tsv": _read_tsv, "txt": _read_tsv, "csv": _read_csv, "jsonl": _read_jsonl, "json": _read_jsonl}
    if kind not in readers:
        raise SourceError(f"{path}: unknown format {kind!r} (expected tsv, csv or jsonl)")
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    fields = {"text": text_field, "label": label_field, "id": id_field, "features": features_field,
              "columns": feature_columns, "key": _key_field(key_field, text_field, label_field, id_field,
                                                            features_field)}
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
            record.pop("unlearn", None)
        elif labels == "required" and record.get("label") in (None, "") and record.get("unlearn") is None:
            raise SourceError(f"{path}:{line_number}: field {label_field!r} is missing")
        labeled = record.get("label") is not None or record.get("unlearn") is not None
        event = event_from_object(record, source, labeled=labeled, classes=classes)
        if isinstance(event, Rejected):
            _refuse(event, path, line_number, rejected)
            continue
        yield event_dict(event)


def _read_mail_events(path: Path, labels: str, rejected: Counter | None, classes: frozenset | None,
                      label_folders: list[str] | None) -> Iterator[dict]:
    """`read_events` of mail where it lives: the label rules of `labels` and `classes` as for any file."""
    try:
        folders = parse_label_folders(label_folders)
    except ValueError as error:
        raise SourceError(str(error)) from None
    if not path.exists():
        raise SourceError(f"{path}: no such file")
    read = labeled = 0
    for event in read_mail(path, label_folders=folders, skipped=rejected if rejected is not None else Counter()):
        read += 1
        labeled += event["label"] is not None
        where = f"{path}: {event.get('path', event['id'])}"
        if labels == "dropped":
            event["label"] = None
        elif labels == "required" and event["label"] is None:
            named = ", ".join(f"{label}={folder}" for folder, label in folders.items())
            raise SourceError(f"{where}: under no label folder ({named}; --label-folder LABEL=FOLDER names them)")
        if event["label"] is not None and classes is not None and event["label"] not in classes:
            refused = Rejected("undeclared_label", f"label {event['label']!r} is not a declared class", None, None, (),
                               SourcePosition(str(path), 0, 0))
            if rejected is None:
                raise SourceError(f"{where}: not a valid event: undeclared_label ({refused.detail})")
            count_rejection(rejected, refused.reason, f"{where}: {refused.detail}")
            continue
        yield event
    if read and not labeled and labels != "dropped":
        print(f"stream-nb replay: note: {unlabeled_mail_hint(path, folders)}", file=sys.stderr, flush=True)


def unlabeled_mail_hint(path: Path, folders: dict[str, str]) -> str:
    """Why a mail source gave no labeled message, and the folder names that could give labels."""
    named = ", ".join(f"{label}={folder}" for folder, label in sorted(folders.items(), key=lambda item: item[1]))
    found = sorted(entry.name for entry in path.iterdir() if entry.is_dir()) if path.is_dir() else []
    shown = ", ".join(found[:20]) + (f" and {len(found) - 20} more" if len(found) > 20 else "")
    return (f"no message of {path} is under a label folder ({named})"
            + (f"; its folders: {shown}" if found else "")
            + "; --label-folder LABEL=FOLDER names the folder of a label (e.g. --label-folder spam=spam_2)")


def _key_field(key_field: str, *others: str) -> str | None:
    """The field read as the event's key: `key_field`, unless another role already reads it."""
    return None if key_field in others else key_field


def event_dict(event) -> dict:
    """The dict replay reads of an `Event`: {"id", "text", "features", "label"}, and "mail" (bytes)
    for a mail event only, "unlearn" for a correction only, "key" for a keyed event only (any
    other event's dict stays as it was)."""
    item = {"id": event.id, "text": event.text, "features": event.features, "label": event.label}
    if event.mail is not None:
        item["mail"] = event.mail
    if event.unlearn is not None:
        item["unlearn"] = event.unlearn
    if event.key is not None:
        item["key"] = event.key
    return item


def add_field_options(parser) -> None:
    """--text-field, --label-field, --id-field and --features-field, for every command that reads
    a file of events (publish, replay, demo)."""
    parser.add_argument("--text-field", default="text", help="CSV/JSONL field of the text (default: text)")
    parser.add_argument("--label-field", default="label", help="CSV/JSONL field of the label (default: label)")
    parser.add_argument("--id-field", default="id",
                        help="CSV/JSONL field of the id (default: id; missing ids become FILE-STEM:LINE)")
    parser.add_argument("--features-field", default="features",
                        help="JSONL field of the structured features, an object {name: value} (default: features)")
    parser.add_argument("--key-field", default="key",
                        help="CSV/JSONL field of the event's key, who it belongs to: a non-empty string "
                             "(default: key; absent or empty CSV cell: no key)")
    parser.add_argument("--feature-columns", default=None, metavar="A,B,...|*",
                        help="CSV columns that are features (numbers where a cell reads as one); "
                             "'*': every column but the id, label and text")
    parser.add_argument("--label-folder", dest="label_folders", action="append", default=None,
                        metavar="LABEL=FOLDER",
                        help="mail (a directory, Maildir, mbox or .tar.gz): messages under a folder named FOLDER "
                             "are labeled LABEL; repeat for each (default: spam=spam, ham=ham)")


def field_options(args) -> dict:
    """The keyword arguments of `read_events` that `add_field_options` set."""
    return {"text_field": args.text_field, "label_field": args.label_field, "id_field": args.id_field,
            "features_field": args.features_field, "feature_columns": args.feature_columns,
            "label_folders": args.label_folders, "key_field": args.key_field}


def _refuse(rejected_event: Rejected, path: Path, line_number: int, rejected: Counter | None) -> None:
    where = f"{path}:{line_number}"
    if rejected is None:
        raise SourceError(f"{where}: not a valid event: {rejected_event.reason} ({rejected_event.detail})")
    count_rejection(rejected, rejected_event.reason, f"{where}: {rejected_event.detail}")


def count_rejection(rejected: Counter, reason: str, where: str) -> None:
    """One refused event in `rejected` (with where, if it is a Rejections)."""
    if isinstance(rejected, Rejections):
        rejected.add(reason, where)
    else:
        rejected[reason] += 1


def _refused(reason: str, detail: str, path: Path, line_number: int) -> Rejected:
    return Rejected(reason, detail, None, None, (), SourcePosition(str(path), 0, line_number))


def _lines(path: Path):
    """(line number, line) of a text file split on "\n" (as the SMS Spam Collection is), each
    decoded on its own: a line that is not UTF-8 is a `Rejected` (invalid_utf8), not the end."""
    with path.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                yield line_number, _refused("invalid_utf8", f"invalid UTF-8 at byte {error.start}: {error.reason}",
                                            path, line_number)


def _read_tsv(path: Path, fields: dict):
    for line_number, line in _lines(path):
        if isinstance(line, Rejected):
            yield line_number, line
            continue
        line = line.rstrip("\r\n")
        if not line:
            continue
        label, separator, text = line.partition("\t")
        if not separator:
            yield line_number, _refused(MISSING_TAB, "expected 'label<TAB>text'", path, line_number)
            continue
        yield line_number, {"label": label, "text": text}


def _invalid_utf8_cell(row: dict, path: Path, line_number: int) -> Rejected | None:
    """invalid_utf8 when a cell of the row holds bytes that are not UTF-8 (see _ESCAPED_BYTE)."""
    for name, cell in row.items():
        if isinstance(cell, str) and _ESCAPED_BYTE.search(cell):
            try:
                cell.encode("utf-8", "surrogateescape").decode("utf-8")
            except UnicodeDecodeError as error:
                return _refused("invalid_utf8", f"column {name!r}: invalid UTF-8 at byte {error.start}: "
                                                f"{error.reason}", path, line_number)
    return None


def _csv_rows(rows: csv.DictReader, path: Path):
    """(line number, row or Rejected) of a CSV file, numbered as records (the header is line 1);
    a record the csv module refuses is one too (the module reads on from the next line)."""
    for line_number in itertools.count(2):
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as error:
            reason = "too_large" if "field limit" in str(error) else INVALID_CSV
            yield line_number, _refused(reason, str(error), path, line_number)
            continue
        yield line_number, _invalid_utf8_cell(row, path, line_number) or row


def _read_csv(path: Path, fields: dict):
    # a text cell may be as long as a message the worker takes (the csv module's default: 128 KB)
    csv.field_size_limit(max(csv.field_size_limit(), DEFAULT_MAX_BYTES))
    with path.open(encoding="utf-8", errors="surrogateescape", newline="") as handle:
        rows = csv.DictReader(handle)
        if rows.fieldnames is None:
            raise SourceError(f"{path}: no header row")
        header = rows.fieldnames
        text_column = fields["text"] if fields["text"] in header else None
        key_column = fields["key"] if fields["key"] in header else None
        wanted = fields["columns"]
        if wanted == "*":
            columns = [name for name in header if name not in (fields["label"], fields["id"], text_column, key_column)]
        else:
            columns = [name.strip() for name in wanted.split(",") if name.strip()] if wanted else []
            missing = [name for name in columns if name not in header]
            if missing:
                raise SourceError(f"{path}: the header has no column {missing[0]!r} (--feature-columns)")
        if text_column is None and not columns:
            raise SourceError(f"{path}: the header has no {fields['text']!r} column (--text-field names it; "
                              "--feature-columns '*' reads the other columns as features)")
        for line_number, row in _csv_rows(rows, path):
            if isinstance(row, Rejected):
                yield line_number, row
                continue
            record = {"label": row.get(fields["label"]) or None, "id": row.get(fields["id"])}
            if text_column is not None:
                record["text"] = row.get(text_column)
            if key_column is not None and row.get(key_column):  # an empty cell is absent, as for every column
                record["key"] = row[key_column]
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
    for line_number, line in _lines(path):
        if isinstance(line, Rejected):
            yield line_number, line
            continue
        if not line.strip():
            continue
        record = parse_json(line, SourcePosition(str(path), 0, line_number))
        if isinstance(record, dict):
            kept = {name: record[name] for name in ("mail", "mail_base64", "unlearn") if name in record}
            if fields["key"] is not None and fields["key"] in record:
                kept["key"] = record[fields["key"]]
            record = {name: record.get(fields[name]) for name in ("text", "label", "id", "features")}
            record.update(kept)
        yield line_number, record
