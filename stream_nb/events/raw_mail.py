"""Raw-mail records -> mail events, for topics a mail system publishes messages to as they are
(``[kafka] value_format = "mail"``). Pure functions over plain values, like `codec`.

A record of such a topic is::

    value    the RFC 5322 message, its exact bytes
    key      the event's id (UTF-8)
    header   ``label_header`` ("label" by default): the label, UTF-8, on the labeled topic only
    header   ``unlearn_header`` ("unlearn" by default): on a correction, the class the message
             was learned as earlier (`codec`'s ``unlearn``), UTF-8, on the labeled topic only

and becomes ``Event(id, text=None, features=None, label, source, mail=value, unlearn)``; what is read of
the message is the mail featuriser's business (which refuses an unreadable one,
``unreadable_mail``).

Decisions
---------
- **Id**: the message's own, as on every other route (`stream_nb.mail.identity.mail_id`): its
  normalised Message-ID, else ``sha256:`` and 16 hex digits of its bytes. Not the record key:
  a message published from a folder, piped to ``publish -`` or handed over by an MTA hook is
  one message, so a correction or a copy finds it whichever way it came; the key only
  partitions (a queue id, a user).
- **Label**: the last header named ``label_header`` (Kafka allows repeats; the last one set
  wins, as for HTTP-style header maps). Header labels are strings: a configuration that
  declares int classes cannot be fed by raw-mail topics (``undeclared_label``).
- **Corrections**: the last ``unlearn_header`` header, read as the label is; with it the label
  header may be left out (a take-back only), as ``"label": null`` beside ``unlearn`` in JSON.
- **Size**: none refused. The topic bounds a record (its ``max.message.bytes``); the mail
  featuriser reads the first 1 MiB of a message and the worker predicts on that, its prediction
  marked ``"truncated": true`` when there was more (SpamAssassin and rspamd likewise give large
  mail a verdict on what they scan). `max_bytes` is accepted for the decoders' one signature.
- **Event key** (`Event.key`, who the message belongs to), for per-user models (``[personal]``,
  `keyed`): the record's Kafka key (UTF-8), or with ``[kafka] mail_key_header`` the mailbox of
  that mail header (``Delivered-To``, ``X-Original-To``: its first address, lower-cased). The
  producer keys the record by the same value, so a user's mail and labels share a partition (a
  message on another partition is dead-lettered as ``misrouted_key``). Without ``[personal]``:
  None.

Reason codes
------------
Checks run in this order; the codes are the JSON contract's where the fault is the same:

==============================  ==============================================================
code                            meaning
==============================  ==============================================================
``empty_value``                 value is ``None`` (a tombstone) or zero bytes
``missing_label``               labeled topic, no ``label_header`` header (or its value null)
                                and no ``unlearn_header`` header
``invalid_utf8``                labeled topic, the label header is not strict UTF-8
``empty_label``                 labeled topic, the label header is empty
``undeclared_label``            labeled topic, ``[model] classes`` declared and the label is
                                none of them
``invalid_unlearn``             labeled topic, the unlearn header is empty or not strict UTF-8
``undeclared_unlearn``          labeled topic, classes declared and the unlearn header's class is
                                none of them
``unlearn_is_label``            labeled topic, the unlearn header says what the label header says
``label_on_unlabeled_topic``    unlabeled topic, a ``label_header`` header with a value
``unlearn_on_unlabeled_topic``  unlabeled topic, an ``unlearn_header`` header with a value
``key_too_long``                keyed, the event key is longer than 1,024 characters
==============================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from stream_nb.events.codec import (
    DEFAULT_MAX_BYTES,
    Event,
    Header,
    Rejected,
    SourcePosition,
    key_too_long,
    record_decoder,
)
from stream_nb.mail.identity import mail_id, mailbox_of

__all__ = ["DEFAULT_LABEL_HEADER", "DEFAULT_UNLEARN_HEADER", "RAW_MAIL_REASONS", "VALUE_FORMATS", "decoder_for",
           "raw_mail_decoder"]

VALUE_FORMATS = ("json", "mail")
DEFAULT_LABEL_HEADER = "label"
DEFAULT_UNLEARN_HEADER = "unlearn"
RAW_MAIL_REASONS: tuple[str, ...] = (
    "empty_value", "missing_label", "invalid_utf8", "empty_label", "undeclared_label",
    "invalid_unlearn", "undeclared_unlearn", "unlearn_is_label", "label_on_unlabeled_topic",
    "unlearn_on_unlabeled_topic", "key_too_long",
)

Decoder = Callable[[bytes | None, bytes | None, Iterable[Header] | None, SourcePosition], Event | Rejected]


def _label_value(headers: tuple[Header, ...], name: str) -> bytes | None:
    """The value of the last header called `name` (None: none, or a null value)."""
    value = None
    for header, data in headers:
        if header == name:
            value = data
    return value


def _header_class(raw: bytes, header: str, what: str, reasons: tuple[str, str, str],
                  classes: frozenset | None) -> str | tuple[str, str]:
    """The class a header names, or (reason, detail) when it names none: not UTF-8, empty, or
    not a declared class (`reasons` in that order)."""
    try:
        value = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return reasons[0], f"header {header!a}: invalid UTF-8 at byte {error.start}"
    if not value:
        return reasons[1], f"header {header!a} is empty"
    if classes is not None and value not in classes:
        declared = ", ".join(sorted(map(repr, classes)))
        return reasons[2], f"{what} {value!a} is not a declared class ({declared})"[:200]
    return value


def raw_mail_decoder(*, labeled: bool, max_bytes: int = DEFAULT_MAX_BYTES, classes: frozenset | None = None,
                     label_header: str = DEFAULT_LABEL_HEADER, unlearn_header: str = DEFAULT_UNLEARN_HEADER,
                     keyed: bool = False, key_header: str = "") -> Decoder:
    """A decoder of raw-mail records (the module's table), the same signature as
    `codec.record_decoder`'s: (value, key, headers, source) -> Event | Rejected. Never raises.
    `keyed` ([personal]): the event key is the record key (UTF-8; None without a usable one), or
    with `key_header` the mailbox of that mail header (`stream_nb.mail.identity.mailbox_of`)."""
    classes = classes if labeled else None

    def event_key(value: bytes, key: bytes | None) -> str | None:
        if not keyed:
            return None
        if key_header:
            return mailbox_of(value, key_header)
        try:
            return key.decode("utf-8") or None if key else None
        except UnicodeDecodeError:
            return None

    def decode(value: bytes | None, key: bytes | None, headers: Iterable[Header] | None,
               source: SourcePosition) -> Event | Rejected:
        kept = tuple(headers) if headers else ()

        def refuse(reason: str, detail: str) -> Rejected:
            return Rejected(reason, detail, value, key, kept, source)

        if not value:
            return refuse("empty_value", "null value (tombstone)" if value is None else "empty value")
        raw_label = _label_value(kept, label_header)
        raw_unlearn = _label_value(kept, unlearn_header)
        label = unlearn = None
        if labeled:
            if raw_label is None and raw_unlearn is None:
                return refuse("missing_label", f"no {label_header!a} header on the labeled topic")
            if raw_label is not None:
                label = _header_class(raw_label, label_header, "label", ("invalid_utf8", "empty_label",
                                                                         "undeclared_label"), classes)
                if type(label) is tuple:
                    return refuse(*label)
            if raw_unlearn is not None:
                unlearn = _header_class(raw_unlearn, unlearn_header, "unlearn", ("invalid_unlearn", "invalid_unlearn",
                                                                                 "undeclared_unlearn"), classes)
                if type(unlearn) is tuple:
                    return refuse(*unlearn)
                if unlearn == label:
                    return refuse("unlearn_is_label", f"headers {label_header!a} and {unlearn_header!a} are both "
                                                      f"{label!a}: nothing to correct"[:200])
        elif raw_label is not None:  # a null header value is absence, as null is in JSON events
            return refuse("label_on_unlabeled_topic", f"header {label_header!a} on the unlabeled topic")
        elif raw_unlearn is not None:
            return refuse("unlearn_on_unlabeled_topic", f"header {unlearn_header!a} on the unlabeled topic")
        owner = event_key(value, key)
        too_long = key_too_long(owner) if owner is not None else None
        if too_long:
            return refuse("key_too_long", too_long)
        return Event(mail_id(value), None, None, label, source, value, unlearn, owner)

    return decode


def decoder_for(kafka: dict, *, labeled: bool, classes: frozenset | None = None, keyed: bool = False) -> Decoder:
    """The decoder of a topic by ``[kafka] value_format``: JSON events (`codec.record_decoder`)
    or raw mail (`raw_mail_decoder`, its headers ``label_header`` and ``unlearn_header``),
    bounded by ``max_message_bytes``."""
    max_bytes = kafka.get("max_message_bytes", DEFAULT_MAX_BYTES)
    if kafka.get("value_format", "json") == "mail":
        return raw_mail_decoder(labeled=labeled, max_bytes=max_bytes, classes=classes,
                                label_header=kafka.get("label_header", DEFAULT_LABEL_HEADER),
                                unlearn_header=kafka.get("unlearn_header", DEFAULT_UNLEARN_HEADER),
                                keyed=keyed, key_header=kafka.get("mail_key_header", ""))
    return record_decoder(labeled=labeled, max_bytes=max_bytes, classes=classes)
