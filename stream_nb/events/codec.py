"""Kafka message values <-> events and predictions, as pure functions over plain values.

The worker hands in what the consumer gave it (value bytes, key bytes, headers, position) and
gets back either an `Event` ready for the featuriser or a `Rejected` carrying everything the
dead-letter producer needs. Nothing here imports Kafka, does I/O or raises on bad input.

Event contract (JSON object, UTF-8; the message key by convention the ``key`` field, else the id)::

    {"id": str, "text": str, "features": {str: str | number}, "label": str | int}
    {"id": str, "key": str, "text": str, ...}                          (a keyed event: any shape)
    {"id": str, "mail": str, "features": {...}, "label": ...}          (a mail event)
    {"id": str, "mail_base64": str, "features": {...}, "label": ...}   (a mail event, exact bytes)
    {"id": str, ..., "label": str | int | null, "unlearn": str | int}  (a correction)

``key`` is optional on both topics: who the event belongs to (a user, a mailbox, a tenant), a
non-empty string, for what is kept per key; absent or null, the event has none (`Event.key`
None). ``text`` and ``features`` are each optional but not both absent; ``label`` is required on the
labeled topic (null only beside ``unlearn``) and forbidden on the unlabeled one. A *mail event* carries an RFC 5322 message
instead of ``text``: ``mail`` (a JSON string; the message is its UTF-8 encoding) or
``mail_base64`` (the message's exact bytes in standard base64, for 8-bit mail that is not
UTF-8). Either becomes `Event.mail` (bytes); ``features`` may accompany it. What is read of the
message is the featuriser's business (`stream_nb.features.mail`), which refuses a message of
which nothing can be read (``unreadable_mail``, a reason of the featurising stage).

A *correction* is a labeled event that also carries ``unlearn``, the class (str or int, as
``label``) the same message (same id, same text / features / mail) was learned as earlier: what
that learning added is taken back, then the event is learned as ``label``; with ``"label":
null`` it is only taken back. `Event.unlearn` holds it (None on every other event). What is
taken back, and what is done when the id was learned as another class or not at all, is the
rule of `stream_nb.lessons`; the decoder checks only the value.

Reason codes
------------
Checks run in this order and the first that fails names the reason (so the code of a message
with several faults is deterministic):

==============================  ==============================================================
code                            meaning
==============================  ==============================================================
``empty_value``                 value is ``None`` (a tombstone) or zero bytes
``too_large``                   ``len(value) > max_bytes`` (checked before any decoding)
``invalid_utf8``                value is not strict UTF-8 (includes encoded surrogates)
``utf8_bom``                    value starts with a UTF-8 byte-order mark (RFC 8259 §8.1
                                forbids it; named apart so the producer sees the exact fault)
``invalid_json``                not one JSON text: syntax error, truncation, trailing data,
                                raw control character inside a string, an integer literal
                                longer than Python's 4300-digit limit
``nan_or_infinity``             a ``NaN`` / ``Infinity`` / ``-Infinity`` literal anywhere
                                (Python accepts them, JSON does not)
``duplicate_key``               an object anywhere in the value repeats a key
``too_deep``                    nesting deep enough to exhaust the parser's recursion limit
``not_an_object``               top level is an array, string, number, boolean or null
``missing_id``                  ``id`` absent or null
``id_not_string``               ``id`` is not a string (an int id is refused, not converted)
``empty_id``                    ``id`` is ``""``
``key_not_string``              ``key`` present, not null and not a string (an int key is
                                refused, not converted)
``empty_key``                   ``key`` is ``""``
``key_too_long``                ``key`` longer than ``MAX_KEY_CHARS`` (1,024) characters: a
                                user, mailbox or tenant, never a document; its per-key state
                                is stored under it
``text_not_string``             ``text`` present, not null and not a string
``features_not_object``         ``features`` present, not null and not an object
``feature_value_type``          a feature value is not a string, number or boolean
                                (null, array and object are refused)
``feature_value_not_finite``    a numeric feature value that is not a finite float: a float
                                literal that overflows (``1e400``) or an int beyond float range
``mail_not_string``             ``mail`` or ``mail_base64`` present, not null and not a string
``mail_and_mail_base64``        both ``mail`` and ``mail_base64`` present (which one is the
                                message? we do not guess)
``mail_with_text``              ``mail`` or ``mail_base64`` present beside ``text``: a mail
                                event's text is read from the message, so a second text is
                                refused rather than silently dropped or merged
``invalid_base64``              ``mail_base64`` is not strict standard base64 (RFC 4648 §4:
                                alphabet ``A-Za-z0-9+/``, ``=`` padding only at the end, no
                                whitespace or line breaks, length a multiple of 4)
``no_text_or_features``         none of ``text``, ``features``, ``mail`` and ``mail_base64``
                                present (or all null)
``missing_label``               labeled topic, ``label`` absent or null and no ``unlearn``
                                (a null label is accepted only on a take-back)
``label_type``                  labeled topic, ``label`` not a string or int (bool, float,
                                array and object are refused)
``empty_label``                 labeled topic, ``label`` is ``""``
``undeclared_label``            labeled topic, the configuration declares its classes
                                (``[model] classes``) and ``label`` is none of them (exact
                                value and type: ``1`` is not ``"1"``)
``invalid_unlearn``             labeled topic, ``unlearn`` present, not null, and not a
                                non-empty str or an int (bool, float, ``""`` are refused)
``undeclared_unlearn``          labeled topic, classes declared and ``unlearn`` is none of them
                                (no event could have been learned as it)
``unlearn_is_label``            labeled topic, ``unlearn`` equals ``label`` (value and type):
                                a correction that corrects nothing is refused, not taken as a
                                duplicate (see Decisions)
``label_on_unlabeled_topic``    unlabeled topic, ``label`` present and not null
``unlearn_on_unlabeled_topic``  unlabeled topic, ``unlearn`` present and not null (nothing is
                                learned from that topic, so nothing can be taken back)
``lone_surrogate``              ``id``, ``key``, ``text``, ``mail``, a string ``label`` or
                                ``unlearn``, a feature name or a string feature value holds an
                                unpaired ``\\uD800``-``\\uDFFF``
                                escape: it decodes to a Python str that cannot be encoded as
                                UTF-8, so it could never be re-published or checkpointed
==============================  ==============================================================

Decisions
---------
- **null is absence.** A top-level field whose value is ``null`` is treated exactly as if the
  field were absent (many serialisers write ``null`` for an unset optional). So ``"id": null``
  is ``missing_id``, ``"label": null`` on the unlabeled topic is accepted, and on the labeled
  topic it is ``missing_label`` (unless ``unlearn`` makes the event a take-back only). Inside ``features`` a null value is refused
  (``feature_value_type``): the contract says ``str | number`` and "null" is ambiguous there.
- **Feature values** are str, int, float (finite) or bool. A boolean is not a number; it is
  kept as ``True``/``False`` and the featurisers turn it into the category ``"true"`` /
  ``"false"`` (`stream_nb.features.fields`), so a producer writing JSON booleans loses nothing.
  An empty string value and an empty feature name are accepted.
- **Empty is present.** ``"text": ""`` and ``"features": {}`` each count as present, so an event
  with only one of them is valid (it simply carries no evidence). ``"mail": ""`` is present
  too, and valid here; the mail featuriser refuses it (``unreadable_mail``).
- **Mail** is bytes on the event whichever field carried it, so the featuriser reads one thing:
  ``"mail": "..."`` gives ``mail.encode("utf-8")``, ``"mail_base64"`` its decoded bytes.
- **Labels** are a non-empty str or an int (not bool, not float: ``1.0`` vs ``1`` would be two
  classes by accident). The type is kept: ``1`` and ``"1"`` are different labels.
- **Corrections.** ``unlearn`` follows ``label``'s rules (a non-empty str or an int, the type
  kept, a declared class when classes are declared). ``"unlearn": X`` with ``"label": X`` is
  refused (``unlearn_is_label``) rather than read as a duplicate: taking back X to learn X
  again changes nothing when X was learned and learns X when it was not, so the producer
  meant something else (a stale correction, a copied field); the refusal depends on the
  message alone, so every replica makes it, and the producer is told. ``"label": null``
  with ``unlearn`` is a take-back only; null without ``unlearn`` stays ``missing_label``.
- **Ids** are non-empty strings; an int id is refused rather than converted, because ``1``,
  ``1.0`` and ``"1"`` would otherwise collide on the prediction key.
- **Keys** (the ``"key"`` field) follow the id's rule: a non-empty string, an int refused rather
  than converted (``1`` and ``"1"`` would name one key). Null is absence, as for any field.
- **Key vs id.** Two keys, two jobs. The Kafka *message* key steers partitioning only; the
  event's ``"key"`` field is the one per-key models use (`Event.key`). Neither is checked
  against the id, nor the message key against the ``"key"`` field: the id in the value is
  authoritative and predictions are keyed by it, and a producer may legitimately key its
  messages by something else (a user, to keep their events ordered) or not at all
  (`stream-nb publish --key` sends the ``"key"`` field, else the id). Refusing those would drop
  good events for a routing choice. The message key is kept on `Rejected` only, to re-publish
  the original message.
- **Unknown fields** are accepted and ignored (forward compatible); they are still parsed, so a
  NaN literal, a duplicate key or excessive nesting inside one still rejects the message.
- **Duplicate keys** are refused rather than "last wins": two values for one field means the
  producer is confused and we should not guess which one it meant.
- **BOM**: refused (``utf8_bom``), not stripped; RFC 8259 says a sender must not add one.
- **Escaped control characters** (``"\\u0000"``) are valid JSON and are kept; *raw* control
  characters inside a string are ``invalid_json`` (the JSON grammar forbids them).
- **Size**: ``max_bytes`` bounds ``len(value)`` before decoding, so an oversized value costs no
  parsing; any text under the limit is fine however long.
"""

from __future__ import annotations

import binascii
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from stream_nb.native import native_allowed

try:  # the optional C extension (setup.py): the common predictions' bytes, as encode writes them
    from stream_nb.events import _codec as _native_codec
except ImportError:
    _native_codec = None

__all__ = [
    "DEFAULT_MAX_BYTES",
    "REASONS",
    "Event",
    "FeatureValue",
    "Header",
    "Label",
    "Rejected",
    "SourcePosition",
    "dead_letter_headers",
    "dead_letter_record",
    "record_bytes_bound",
    "decode_record",
    "decode_records",
    "record_decoder",
    "event_from_object",
    "parse_json",
    "PredictionEncoder",
    "encode_prediction",
]

DEFAULT_MAX_BYTES = 1_000_000
MAX_KEY_CHARS = 1024  # an event's key names a user, mailbox or tenant; per-key records are stored under it


def key_too_long(key: str) -> str | None:
    """The detail of a `key_too_long` refusal of `key` (either decoder's), None for a key that fits."""
    return f"key of {len(key)} characters, more than {MAX_KEY_CHARS}" if len(key) > MAX_KEY_CHARS else None

#: Every reason code `decode_record` can give, in the order the checks run.
REASONS: tuple[str, ...] = (
    "empty_value",
    "too_large",
    "invalid_utf8",
    "utf8_bom",
    "invalid_json",
    "nan_or_infinity",
    "duplicate_key",
    "too_deep",
    "not_an_object",
    "missing_id",
    "id_not_string",
    "empty_id",
    "key_not_string",
    "empty_key",
    "key_too_long",
    "text_not_string",
    "features_not_object",
    "feature_value_type",
    "feature_value_not_finite",
    "mail_not_string",
    "mail_and_mail_base64",
    "mail_with_text",
    "invalid_base64",
    "no_text_or_features",
    "missing_label",
    "label_type",
    "empty_label",
    "undeclared_label",
    "invalid_unlearn",
    "undeclared_unlearn",
    "unlearn_is_label",
    "label_on_unlabeled_topic",
    "unlearn_on_unlabeled_topic",
    "lone_surrogate",
)

Label: TypeAlias = str | int
FeatureValue: TypeAlias = str | int | float | bool
#: A Kafka header as kafka-python gives it: (name, value); the value may be None.
Header: TypeAlias = tuple[str, bytes | None]

REASON_HEADER = "stream-nb-reason"
DETAIL_HEADER = "stream-nb-detail"
SOURCE_TOPIC_HEADER = "stream-nb-source-topic"
SOURCE_PARTITION_HEADER = "stream-nb-source-partition"
SOURCE_OFFSET_HEADER = "stream-nb-source-offset"
# A dead letter cut to fit its topic: the original value's (key's, headers') size, and what was cut.
ORIGINAL_BYTES_HEADER = "stream-nb-original-bytes"
TRUNCATED_HEADER = "stream-nb-truncated"
_OUR_HEADERS = frozenset(
    (
        REASON_HEADER,
        DETAIL_HEADER,
        SOURCE_TOPIC_HEADER,
        SOURCE_PARTITION_HEADER,
        SOURCE_OFFSET_HEADER,
        ORIGINAL_BYTES_HEADER,
        TRUNCATED_HEADER,
    )
)

_FLOAT_MAX = sys.float_info.max
_DETAIL_MAX_CHARS = 200  # a header, not a dump: keep it to one short line


@dataclass(frozen=True, slots=True)
class SourcePosition:
    """Where a message was read: topic, partition and offset."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Event:
    """A valid event. `features` is the parsed object ({str: str | int | float | bool}) or None;
    `mail` the bytes of the RFC 5322 message of a mail event (then `text` is None), else None;
    `text`, `features` and `mail` are never all None; `label` is None on the unlabeled topic and
    on a take-back only; `unlearn` is the class a correction takes back (labeled topic only),
    else None; `key` the event's "key" field (who it belongs to: a user, a mailbox), else None."""

    id: str
    text: str | None
    features: dict[str, FeatureValue] | None
    label: Label | None
    source: SourcePosition
    mail: bytes | None = None  # last, with a default: Event(id, text, features, label, source) stays
    unlearn: Label | None = None
    key: str | None = None  # last, with a default, as mail and unlearn: positional constructions stay


@dataclass(frozen=True, slots=True)
class Rejected:
    """A message that is not a valid event. `reason` is one of `REASONS`; `detail` is one line
    of ASCII for logs and the dead-letter header; `value`, `key` and `headers` are the original
    message, untouched, for re-publishing to the dead-letter topic."""

    reason: str
    detail: str
    value: bytes | None
    key: bytes | None
    headers: tuple[Header, ...]
    source: SourcePosition


class _Refused(Exception):
    """Internal: one check failed. Raised from the parser hooks as well as from the field
    checks, so every bad path leaves through a single `except` in `decode_record`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail


def _short(text: str) -> str:
    """`text` as one ASCII line of bounded length (user data may be long or non-ASCII)."""
    # backslashreplace escapes only the non-ASCII characters, never an existing backslash
    line = text if text.isascii() else text.encode("ascii", "backslashreplace").decode("ascii")
    line = line.replace("\r", " ").replace("\n", " ")
    if len(line) > _DETAIL_MAX_CHARS:
        line = line[: _DETAIL_MAX_CHARS - 3] + "..."
    return line


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # cheap test; only a bad message pays for finding the name
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise _Refused("duplicate_key", _short(f"duplicate key {name!a}"))
            seen.add(name)
    return obj


def _refuse_constant(name: str) -> Any:
    raise _Refused("nan_or_infinity", f"{name} is not a JSON number")


# One decoder built once: json.loads(**kwargs) would build a new one per call.
_DECODER = json.JSONDecoder(object_pairs_hook=_object_from_pairs, parse_constant=_refuse_constant)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)  # fmt: skip


def has_lone_surrogate(text: str) -> bool:
    """True when `text` holds an unpaired surrogate (U+D800-U+DFFF), which UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_surrogates(
    id_: str, text: str | None, features: dict[str, Any] | None, label: Any, mail: Any = None,
    unlearn: Any = None, key: str | None = None,
) -> None:
    """Refuse a lone surrogate in any string the event carries onward (see the module table)."""
    if has_lone_surrogate(id_):
        raise _Refused("lone_surrogate", "id holds an unpaired surrogate escape")
    if key is not None and has_lone_surrogate(key):
        raise _Refused("lone_surrogate", "key holds an unpaired surrogate escape")
    if text is not None and has_lone_surrogate(text):
        raise _Refused("lone_surrogate", "text holds an unpaired surrogate escape")
    if type(mail) is str and has_lone_surrogate(mail):
        raise _Refused("lone_surrogate", "mail holds an unpaired surrogate escape")
    if type(label) is str and has_lone_surrogate(label):
        raise _Refused("lone_surrogate", "label holds an unpaired surrogate escape")
    if type(unlearn) is str and has_lone_surrogate(unlearn):
        raise _Refused("lone_surrogate", "unlearn holds an unpaired surrogate escape")
    if features:
        for name, value in features.items():
            if has_lone_surrogate(name) or (type(value) is str and has_lone_surrogate(value)):
                raise _Refused(
                    "lone_surrogate", _short(f"feature {name!a} holds an unpaired surrogate escape")
                )


def _parsed(raw: str) -> Any:
    """One JSON text as the contract reads it: NaN/Infinity and duplicate keys refused."""
    try:
        return _DECODER.decode(raw)
    except RecursionError:
        raise _Refused("too_deep", "JSON nested too deeply to parse") from None
    except ValueError as exc:  # JSONDecodeError, and the int-digits limit
        raise _Refused("invalid_json", _short(str(exc))) from None


def parse_json(raw: str, source: SourcePosition) -> Any:
    """A JSON text (a line of a JSONL file) parsed by the contract's rules: the value, or
    `Rejected` with reason invalid_json, nan_or_infinity, duplicate_key or too_deep."""
    try:
        return _parsed(raw)
    except _Refused as refused:
        return Rejected(refused.reason, refused.detail, None, None, (), source)


def _decode(value: bytes | None, source: SourcePosition, labeled: bool, max_bytes: int,
            classes: frozenset | None = None) -> Event:
    """The checks of the module table, in order; raises `_Refused` at the first failure."""
    if not value:
        raise _Refused("empty_value", "null value (tombstone)" if value is None else "empty value")
    if len(value) > max_bytes:
        raise _Refused("too_large", f"value is {len(value)} bytes, limit {max_bytes}")
    try:
        raw = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refused("invalid_utf8", f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None
    if raw[0] == "\ufeff":
        raise _Refused("utf8_bom", "value starts with a UTF-8 byte-order mark")
    obj = _parsed(raw)
    # A lone surrogate can only come from a \uD800-\uDFFF escape (strict UTF-8 refuses encoded
    # ones), so two substring scans let almost every message skip the per-string check.
    return _checked(obj, source, labeled, surrogates_possible="\\ud" in raw or "\\uD" in raw, classes=classes)


def _undeclared(label: Label, classes: frozenset) -> _Refused:
    declared = ", ".join(sorted(map(repr, classes)))
    return _Refused("undeclared_label", _short(f"label {label!r} is not a declared class ({declared})"))


def _checked(obj: Any, source: SourcePosition, labeled: bool, surrogates_possible: bool,
             classes: frozenset | None = None) -> Event:
    """The field checks of the module table (from ``not_an_object`` on) on a parsed value;
    `classes`: the labels a labeled event may carry (None: any)."""
    # Exact type tests: the parser only ever builds these exact types.
    if type(obj) is not dict:
        raise _Refused("not_an_object", f"top level is {_type_name(obj)}, expected an object")

    id_ = obj.get("id")
    if id_ is None:
        raise _Refused("missing_id", "no id")
    if type(id_) is not str:
        raise _Refused("id_not_string", f"id is {_type_name(id_)}, expected a string")
    if not id_:
        raise _Refused("empty_id", "id is the empty string")

    key = obj.get("key")
    if key is not None:
        if type(key) is not str:
            raise _Refused("key_not_string", f"key is {_type_name(key)}, expected a string")
        if not key:
            raise _Refused("empty_key", "key is the empty string")
        too_long = key_too_long(key)
        if too_long:
            raise _Refused("key_too_long", too_long)

    text = obj.get("text")
    if text is not None and type(text) is not str:
        raise _Refused("text_not_string", f"text is {_type_name(text)}, expected a string")

    features = obj.get("features")
    if features is not None:
        if type(features) is not dict:
            raise _Refused(
                "features_not_object", f"features is {_type_name(features)}, expected an object"
            )
        for name, item in features.items():
            kind = type(item)
            if kind is str or kind is bool:
                continue
            if kind is float:
                if item - item != 0.0:  # inf - inf is nan; NaN literals never get this far
                    raise _Refused(
                        "feature_value_not_finite", _short(f"feature {name!a} overflows a float")
                    )
                continue
            if kind is int:
                if not -_FLOAT_MAX <= item <= _FLOAT_MAX:
                    raise _Refused(
                        "feature_value_not_finite",
                        _short(f"feature {name!a} is an integer beyond float range"),
                    )
                continue
            raise _Refused(
                "feature_value_type",
                _short(
                    f"feature {name!a} is {_type_name(item)}, expected string, number or boolean"
                ),
            )
    mail = _mail_field(obj, text)
    if text is None and features is None and mail is None:
        raise _Refused("no_text_or_features", "none of text, features, mail and mail_base64")

    label = obj.get("label")
    unlearn = obj.get("unlearn")
    if labeled:
        if label is not None:
            kind = type(label)
            if kind is str:
                if not label:
                    raise _Refused("empty_label", "label is the empty string")
            elif kind is not int:
                raise _Refused(
                    "label_type", f"label is {_type_name(label)}, expected string or integer"
                )
            if classes is not None and label not in classes:
                raise _undeclared(label, classes)
        elif unlearn is None:
            raise _Refused("missing_label", "no label on the labeled topic")
        if unlearn is not None:
            _check_unlearn(unlearn, label, classes)
    elif label is not None:
        raise _Refused("label_on_unlabeled_topic", "label present on the unlabeled topic")
    elif unlearn is not None:
        raise _Refused("unlearn_on_unlabeled_topic", "unlearn present on the unlabeled topic")

    if surrogates_possible:
        _check_surrogates(id_, text, features, label, mail, unlearn, key)

    if mail is None:
        return Event(id_, text, features, label, source, None, unlearn, key)
    return Event(id_, None, features, label, source, mail.encode("utf-8") if type(mail) is str else mail, unlearn,
                 key)


def _check_unlearn(unlearn: Any, label: Any, classes: frozenset | None) -> None:
    """The ``unlearn`` checks of the module table, in order (a labeled event, `unlearn` not None)."""
    kind = type(unlearn)
    if kind is not int and (kind is not str or not unlearn):
        shown = "the empty string" if kind is str else _type_name(unlearn)
        raise _Refused("invalid_unlearn", f"unlearn is {shown}, expected a non-empty string or an integer")
    if classes is not None and unlearn not in classes:
        declared = ", ".join(sorted(map(repr, classes)))
        raise _Refused("undeclared_unlearn", _short(f"unlearn {unlearn!r} is not a declared class ({declared})"))
    if kind is type(label) and unlearn == label:
        raise _Refused("unlearn_is_label", _short(f"unlearn and label are both {label!r}: nothing to correct"))


def _mail_field(obj: dict, text: str | None) -> str | bytes | None:
    """The message of a mail event as the value carried it: ``mail`` (str, encoded once the
    surrogate check has run), ``mail_base64`` decoded (bytes), or None. The checks of the
    module table from ``mail_not_string`` to ``invalid_base64``, in order."""
    mail = obj.get("mail")
    encoded = obj.get("mail_base64")
    if mail is None and encoded is None:  # the common event pays two lookups
        return None
    for name, value in (("mail", mail), ("mail_base64", encoded)):
        if value is not None and type(value) is not str:
            raise _Refused("mail_not_string", f"{name} is {_type_name(value)}, expected a string")
    if mail is not None and encoded is not None:
        raise _Refused("mail_and_mail_base64", "both mail and mail_base64: send one")
    if text is not None:
        raise _Refused("mail_with_text", "text beside a mail: the text of a mail event is read from the message")
    if mail is not None:
        return mail
    try:
        return binascii.a2b_base64(encoded, strict_mode=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: a non-ASCII character
        raise _Refused("invalid_base64", _short(f"mail_base64 is not strict base64: {exc}")) from None


def event_from_object(obj: Any, source: SourcePosition, *, labeled: bool,
                      classes: frozenset | None = None) -> Event | Rejected:
    """An already parsed JSON value (a line of a JSONL file, a row of a CSV file) checked by
    the same rules as a Kafka message, from ``not_an_object`` on: the `Event`, or `Rejected`
    with the same reason code a worker would dead-letter the message with. The value, key and
    headers of a `Rejected` are None / empty (there is no message)."""
    try:
        return _checked(obj, source, labeled, surrogates_possible=True, classes=classes)
    except _Refused as refused:
        return Rejected(refused.reason, refused.detail, None, None, (), source)


def decode_record(
    value: bytes | None,
    key: bytes | None,
    headers: Iterable[Header] | None,
    source: SourcePosition,
    *,
    labeled: bool,
    max_bytes: int = DEFAULT_MAX_BYTES,
    classes: frozenset | None = None,
) -> Event | Rejected:
    """One Kafka message -> `Event`, or `Rejected` with the first failing reason of the module
    table and the original value, key and headers. Never raises on any value, key or headers.

    `labeled` says which topic the message came from (labeled: label required; unlabeled:
    label forbidden). `max_bytes` bounds the value's length before decoding. `classes`, when
    given, are the only labels a labeled event may carry.
    """
    return record_decoder(labeled=labeled, max_bytes=max_bytes, classes=classes)(value, key, headers, source)


def _decode_or_reject(
    value: bytes | None,
    key: bytes | None,
    headers: Iterable[Header] | None,
    source: SourcePosition,
    labeled: bool,
    max_bytes: int,
    classes: frozenset | None = None,
) -> Event | Rejected:
    try:
        return _decode(value, source, labeled, max_bytes, classes)
    except _Refused as refused:
        return Rejected(
            refused.reason,
            refused.detail,
            value,
            key,
            tuple((name, data) for name, data in headers) if headers else (),
            source,
        )


def record_decoder(
    *, labeled: bool, max_bytes: int = DEFAULT_MAX_BYTES, classes: frozenset | None = None
) -> Callable[[bytes | None, bytes | None, Iterable[Header] | None, SourcePosition], Event | Rejected]:
    """`decode_record` with `labeled`, `max_bytes` and `classes` bound, for the records of one
    batch: the C extension's switch is read once. Its decoder takes the values of the common
    shape (a str id and text, and a label on the labeled topic: _codec.c) and makes the same
    Event; any other value, valid or not, and an undeclared label, is decided here."""
    classes = classes if labeled else None
    native = _native_codec.decode_event if _native_codec is not None and native_allowed() else None

    def decode(
        value: bytes | None, key: bytes | None, headers: Iterable[Header] | None, source: SourcePosition
    ) -> Event | Rejected:
        if native is not None:
            event = native(value, labeled, max_bytes, source, Event)
            if event is not None and (classes is None or (
                    (event.label is None or event.label in classes)
                    and (event.unlearn is None or event.unlearn in classes))):
                return event
        return _decode_or_reject(value, key, headers, source, labeled, max_bytes, classes)

    return decode


def decode_records(
    records: Iterable[tuple[bytes | None, bytes | None, Iterable[Header] | None, SourcePosition]],
    *,
    labeled: bool,
    max_bytes: int = DEFAULT_MAX_BYTES,
    classes: frozenset | None = None,
) -> tuple[list[Event], list[Rejected]]:
    """`decode_record` over (value, key, headers, source) tuples. Returns (events, rejected),
    each in input order; every record lands in exactly one of the two lists."""
    events: list[Event] = []
    rejected: list[Rejected] = []
    decode = record_decoder(labeled=labeled, max_bytes=max_bytes, classes=classes)
    for value, key, headers, source in records:
        decoded = decode(value, key, headers, source)
        (rejected if type(decoded) is Rejected else events).append(decoded)
    return events, rejected


# The generic encoder, for what is encoded once per batch (the model part) and for the rare
# prediction the fast path does not take; json.dumps with options would build one per call.
_PREDICTION_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# JSON string literals as that encoder writes them (ensure_ascii=False), in C where available.
_json_string = json.encoder.encode_basestring


class PredictionEncoder:
    """Prediction messages of one batch: `encode` gives what `encode_prediction` gives, byte for
    byte, with the part every prediction of the batch shares (events_learned, checkpoint,
    labeled_offsets) encoded once, and the rest written directly in its fixed key order, the
    numbers as the json module writes them (repr of int and of float).
    """

    def __init__(self, *, events_learned: int, checkpoint: str | None,
                 labeled_offsets: list[list] | None = None) -> None:
        if type(events_learned) is not int or events_learned < 0:
            raise ValueError(f"events_learned must be a non-negative int, got {events_learned!r}")
        if checkpoint is not None and type(checkpoint) is not str:
            raise TypeError(f"checkpoint must be str or None, got {type(checkpoint).__name__}")
        model: dict[str, Any] = {"events_learned": events_learned, "checkpoint": checkpoint}
        if labeled_offsets is not None:
            model["labeled_offsets"] = labeled_offsets
        self._model = model
        self._model_json = _PREDICTION_JSON.encode(model)

    def encode(self, event: Event, probabilities: dict[Label, float], *, verdict: str | None = None,
               clues: list[tuple[str, float]] | None = None, score: float | None = None,
               truncated: bool = False) -> tuple[bytes, bytes]:
        """(key, value) of the prediction message for `event`: see `encode_prediction`."""
        proba: dict[str, float] = {}
        best: Label | None = None
        best_p = -1.0
        # a dict subclass (a model Posterior) is read as its dict, as the C encoder reads it
        items = dict.items(probabilities) if isinstance(probabilities, dict) else probabilities.items()
        for cls, p in items:
            kind = type(cls)
            if kind is str:
                name = cls
            elif kind is int:
                name = str(cls)
            else:
                raise TypeError(f"class labels must be str or int, got {type(cls).__name__}")
            if name in proba:
                raise ValueError(f"class {cls!r} and an earlier class share the JSON key {name!r}")
            p = float(p)
            if p - p != 0.0:
                raise ValueError(f"probability of class {cls!r} is not finite: {p!r}")
            proba[name] = p
            if best is None or p > best_p:  # strict: the first of equal maxima stays
                best, best_p = cls, p
        if clues is not None:
            clues = [[name, clue_json_value(float(weight))] for name, weight in clues]
        if score is not None:
            score = score_json_value(score)
        source = event.source
        if truncated or (type(event.id) is not str or type(source.topic) is not str or type(source.partition) is not int
                or type(source.offset) is not int or (verdict is not None and type(verdict) is not str)
                or (clues is not None and not all(type(name) is str and type(weight) is float
                                                  for name, weight in clues))):
            return self._encode_generic(event, best, proba, verdict, clues, score, truncated)
        string = _json_string
        parts = ['{"id":', string(event.id), ',"label":',
                 "null" if best is None else string(best) if type(best) is str else repr(best),
                 ',"proba":{', ",".join([f"{string(name)}:{p!r}" for name, p in proba.items()]), "}",
                 "" if score is None else f',"score":{score!r}' if type(score) is float else f',"score":"{score}"',
                 ',"model":', self._model_json,
                 ',"source":{"topic":', string(source.topic), ',"partition":', repr(source.partition),
                 ',"offset":', repr(source.offset), "}"]
        if verdict is not None:
            parts += [',"verdict":', string(verdict)]
        if clues is not None:
            parts += [',"clues":[', ",".join([f"[{string(name)},{weight!r}]" for name, weight in clues]), "]"]
        parts.append("}")
        return event.id.encode("utf-8"), "".join(parts).encode("utf-8")

    def encode_many(self, events: list[Event], probabilities: list, verdicts: list | None = None,
                    clues: list | None = None, scores: list | None = None, truncated: set[int] | None = None) -> list:
        """`encode` for each event (None where probabilities[i] is None): its (key, value), or the
        TypeError or ValueError `encode` raises for it. The messages of the common shape are
        written by the C extension (_codec.c, the same bytes), the others here; `truncated`: the
        places of the events predicted on part of their mail (rare: written here)."""
        made = None
        if truncated:
            return [None if proba is None else self._encode_one(event, proba, i, verdicts, clues, scores, i in truncated)
                    for i, (event, proba) in enumerate(zip(events, probabilities))]
        if _native_codec is not None and native_allowed():
            made = _native_codec.encode_predictions(
                events if type(events) is list else list(events), probabilities if type(probabilities) is list
                else list(probabilities), self._model_json, verdicts, clues,
                scores if scores is None or type(scores) is list else list(scores))
        results: list = []
        for i, (event, proba) in enumerate(zip(events, probabilities)):
            if made is not None and made[i] is not None:
                results.append(made[i])
            elif proba is None:
                results.append(None)
            else:
                results.append(self._encode_one(event, proba, i, verdicts, clues, scores))
        return results

    def _encode_one(self, event, proba, i: int, verdicts, clues, scores, truncated: bool = False):
        try:
            return self.encode(event, proba, verdict=None if verdicts is None else verdicts[i],
                               clues=None if clues is None else clues[i], score=None if scores is None else scores[i],
                               truncated=truncated)
        except (TypeError, ValueError) as error:
            return error

    def _encode_generic(self, event, best, proba, verdict, clues, score=None, truncated=False) -> tuple[bytes, bytes]:
        """The message through the json module: for values the direct path does not write
        (a non-finite clue, which it refuses as allow_nan=False does; types other than the
        contract's)."""
        source = event.source
        message = {
            "id": event.id,
            "label": best,
            "proba": proba,
            **({} if score is None else {"score": score}),
            "model": self._model,
            "source": {"topic": source.topic, "partition": source.partition, "offset": source.offset},
        }
        if verdict is not None:
            message["verdict"] = verdict
        if clues is not None:
            message["clues"] = clues
        if truncated:
            message["truncated"] = True
        return event.id.encode("utf-8"), _PREDICTION_JSON.encode(message).encode("utf-8")


INFINITE_EVIDENCE = {float("inf"): "Infinity", float("-inf"): "-Infinity"}


# The published score's bounds: a real log-odds stays far inside them (a 1 MiB message has at
# most ~500,000 tokens, each worth a few tens of nats); they stand for an infinite one.
SCORE_LIMIT = 1e9


def published_score(score: float | None) -> float:
    """The "score" a prediction carries, always a finite JSON number so that an operator's
    threshold needs no other case: the score itself; 0.0 before any class is learned (no
    evidence either way; the model gives None); +-SCORE_LIMIT for an infinite log-odds (the
    positive class, or every other one, never learned, or ruled out by alpha = 0)."""
    if score is None:
        return 0.0
    score = float(score)
    if score != score:
        raise ValueError("a score is not a number: nan")
    return min(SCORE_LIMIT, max(-SCORE_LIMIT, score))


def score_json_value(score) -> float | str:
    """A prediction's score (log-odds of the positive class, nats) as JSON can hold it: the float,
    or "Infinity" / "-Infinity" as for clues (one side has no class learned, or alpha = 0 rules
    it out). NaN, or a value that is not a real number, is refused (ValueError, TypeError)."""
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise TypeError(f"a score must be a float, got {type(score).__name__}")
    score = float(score)
    if score - score == 0.0:
        return score
    if score in INFINITE_EVIDENCE:
        return INFINITE_EVIDENCE[score]
    raise ValueError(f"a score is not a number: {score!r}")


def clue_json_value(weight: float) -> float | str:
    """A clue's evidence as JSON can hold it: the float, or "Infinity" / "-Infinity" (the
    strings protobuf's JSON mapping uses) for the infinite evidence of alpha = 0, a feature the
    runner-up class never had (or the predicted one). NaN is refused: no clue is NaN."""
    if weight - weight == 0.0:
        return weight
    if weight in INFINITE_EVIDENCE:
        return INFINITE_EVIDENCE[weight]
    raise ValueError(f"a clue's evidence is not a number: {weight!r}")


def encode_prediction(
    event: Event,
    probabilities: dict[Label, float],
    *,
    events_learned: int,
    checkpoint: str | None,
    verdict: str | None = None,
    clues: list[tuple[str, float]] | None = None,
    labeled_offsets: list[list] | None = None,
    score: float | None = None,
) -> tuple[bytes, bytes]:
    """(key, value) of the prediction message for `event`.

    Optional fields, present only when given: "score" (right after "proba": the log-odds of the
    positive class in nats, log P(pos|x) - log P(not pos|x), computed from the joint log
    likelihoods so it keeps ranking where P(pos) rounds to 0.0 or 1.0; an infinite score, when
    one side has no class learned, as the string "Infinity" or "-Infinity"; per-class log
    posteriors are left out, model.posterior gives them), "verdict" (the ham/spam/unsure decision of an
    unsure band), "clues" ([[feature, evidence in nats], ...], the strongest first; an infinite
    evidence, possible only with alpha = 0, as the string "Infinity" or "-Infinity") and
    model.labeled_offsets ([[topic, partition, next offset], ...]: the labeled log the model had
    learned, so a replay of it up to there reproduces this prediction exactly) and "truncated"
    (true, last: the event's mail is longer than what is read of it, and was predicted on that).

    key: the id as UTF-8. value: compact UTF-8 JSON (``ensure_ascii=False``)::

        {"id", "label", "proba": {str(class): float}, "model": {"events_learned", "checkpoint"},
         "source": {"topic", "partition", "offset"}}

    "label" is the most probable class with its own type (str or int); on a tie the first in
    `probabilities`' order wins; it is null, and "proba" is {}, when `probabilities` is empty.
    Raises TypeError for a class that is not str or int (bool included), and ValueError for a
    non-finite probability or two classes with the same string form (``1`` and ``"1"``), which
    JSON object keys could not tell apart. A batch of predictions: `PredictionEncoder`.
    """
    encoder = PredictionEncoder(events_learned=events_learned, checkpoint=checkpoint,
                                labeled_offsets=labeled_offsets)
    return encoder.encode(event, probabilities, verdict=verdict, clues=clues, score=score)


def dead_letter_headers(rejected: Rejected) -> list[Header]:
    """Headers for the dead-letter copy of `rejected`: the original headers, in order, minus any
    earlier ``stream-nb-*`` headers of ours (a message re-driven from the dead-letter topic
    must not carry two reasons), then reason, detail, source topic, partition and offset, each
    as UTF-8 bytes."""
    headers = [(name, data) for name, data in rejected.headers if name not in _OUR_HEADERS]
    source = rejected.source
    headers += [
        (REASON_HEADER, rejected.reason.encode("utf-8")),
        (DETAIL_HEADER, rejected.detail.encode("utf-8", "backslashreplace")),
        (SOURCE_TOPIC_HEADER, source.topic.encode("utf-8", "backslashreplace")),
        (SOURCE_PARTITION_HEADER, str(source.partition).encode("ascii")),
        (SOURCE_OFFSET_HEADER, str(source.offset).encode("ascii")),
    ]
    return headers


# A record batch's fixed header (v2: 61 bytes) and, per record, the most its varints take
# (length, attributes, timestamp and offset deltas, key and value lengths, header count: 5 + 1 +
# 10 + 5 + 5 + 5 + 5) and a header's two length varints.
BATCH_OVERHEAD = 61
RECORD_OVERHEAD = 36
HEADER_OVERHEAD = 10
# Kept free of the topic's limit when a dead letter is cut: a header's value may grow in transit
# (none does today) and a broker counts a batch's bytes as it has them.
DEAD_LETTER_SLACK = 512


def record_bytes_bound(value: bytes | None, key: bytes | None, headers) -> int:
    """An upper bound on the bytes of one record alone in a v2 record batch, which is what a
    topic's max.message.bytes limits (uncompressed: compression only shrinks it):
    61 + 36 + |key| + |value| + sum over headers of (10 + |name| + |value|)."""
    return BATCH_OVERHEAD + RECORD_OVERHEAD + len(key or b"") + len(value or b"") + _headers_bytes(headers)


def dead_letter_record(rejected: Rejected, max_bytes: int) -> tuple[bytes | None, bytes | None, list[Header]]:
    """(value, key, headers) of the dead letter of `rejected`, at most `max_bytes` by
    `record_bytes_bound`: the original record with `dead_letter_headers` when it fits; otherwise
    cut, in this order until it fits: the original headers dropped, the value and then the key
    shortened to their first bytes. A cut letter says so: ``stream-nb-truncated`` lists what was
    cut ("value", "key", "headers") and ``stream-nb-original-bytes`` gives the original value's,
    key's and headers' sizes ("value=N key=N headers=N"). A dead letter is for a person to read
    and re-drive; its first bytes and its source position are what they need, and the source
    record stays in its topic whole. Raises ValueError when even our own headers do not fit."""
    headers = dead_letter_headers(rejected)
    value, key = rejected.value, rejected.key
    if record_bytes_bound(value, key, headers) <= max_bytes:
        return value, key, headers
    original_headers = [(name, data) for name, data in rejected.headers if name not in _OUR_HEADERS]
    ours = headers[len(original_headers):]
    sizes = (f"value={len(value or b'')} key={len(key or b'')} "
             f"headers={_headers_bytes(original_headers)}").encode("ascii")
    longest_marks = [(TRUNCATED_HEADER, b"value,key,headers"), (ORIGINAL_BYTES_HEADER, sizes)]
    # bytes left for the original headers, key and value
    room = max_bytes - DEAD_LETTER_SLACK - record_bytes_bound(None, None, [*ours, *longest_marks])
    if room < 0:
        raise ValueError(f"a dead letter needs more than {max_bytes} bytes for its own headers")
    cut: set[str] = set()
    kept = original_headers
    if _headers_bytes(kept) > room // 4:  # one may be huge: they go whole, never half a header
        kept = []
        cut.add("headers")
    room -= _headers_bytes(kept)
    key_length, value_length = len(key or b""), len(value or b"")
    if key_length + value_length > room:
        # the key keeps at most a quarter when both are long, the value the rest
        new_key_length = min(key_length, max(room // 4, room - value_length))
        new_value_length = min(value_length, room - new_key_length)
        if new_value_length < value_length:
            value = value[:new_value_length]
            cut.add("value")
        if new_key_length < key_length:
            key = key[:new_key_length]
            cut.add("key")
    what = ",".join(part for part in ("value", "key", "headers") if part in cut)
    marks = [(TRUNCATED_HEADER, what.encode("ascii")), (ORIGINAL_BYTES_HEADER, sizes)]
    return value, key, [*kept, *ours, *marks]


def _headers_bytes(headers) -> int:
    """The bytes `headers` add to a record (`record_bytes_bound`'s share of them)."""
    return sum(HEADER_OVERHEAD + len(name.encode("utf-8")) + len(data or b"") for name, data in headers)
