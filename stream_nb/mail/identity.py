"""One identity for a message on every route (issue 33): a folder publish, an mbox, a Maildir, an
.eml, `publish -` and a raw record all name a message by its Message-ID, so a correction sent one
way finds the message learned another way, and a copy is known for one.

    mail_id(data) = the normalised Message-ID of `data`, else "sha256:" + the first 16 hex
                    digits of sha256(data)

Normalised: the first Message-ID field of the header block (before the first empty line; folded
lines unfolded), the first ``<...>`` of its value (the whole value without brackets), whitespace
removed, the part after the last "@" lower-cased (a domain is case-insensitive, the local part
is not: RFC 5322 3.6.4), without the angle brackets. A value longer than MAX_ID_CHARS (a hostile
header) is named by its digest: "msgid-sha256:" + 16 hex digits of its normalised text.
Pure functions over bytes (the hot one also in C: stream_nb.mail._native).
"""

from __future__ import annotations

import functools
import hashlib
import re

from stream_nb.native import native_allowed

try:
    from stream_nb.mail import _native
except ImportError:  # (not built: the definition runs)
    _native = None

__all__ = ["MAX_ID_CHARS", "mail_id", "mailbox_of", "message_id_of"]

MAX_ID_CHARS = 500
HEADER_BLOCK_LIMIT = 256 * 1024  # a header block is read this far for the field, no further
_BLANK_LINE = re.compile(rb"\r?\n\r?\n")  # the definition of `_header_block_end`
_FIELD = re.compile(rb"^Message-ID[ \t]*:(.*(?:\r?\n[ \t].*)*)", re.IGNORECASE | re.MULTILINE)
_ADDRESS = re.compile(r"[^\s<>(),;:\"]+@[^\s<>(),;:\"]+")
_BRACKETED = re.compile(r"<([^<>]*)>")
_SPACE = re.compile(r"\s+")


def _header_block_end(head: bytes) -> int | None:
    """Where `_BLANK_LINE.search(head)` starts (None: no match), by two substring searches: the
    first '\n' followed by an empty line ('\n' or '\r\n'), from its '\r' when one comes before
    it (the regular expression, whose leading '\r?' gives it no literal to look for, scanned
    every byte in Python's matcher). The kind of break the first line ends with is looked for
    first, and the other only before it: one of them is most often not in the message at all."""
    first_break = head.find(b"\n")
    kinds = (b"\n\r\n", b"\n\n") if first_break > 0 and head[first_break - 1] == 0x0D else (b"\n\n", b"\n\r\n")
    end = head.find(kinds[0])
    # a match of the other kind counts only when it starts before `end` (it has 2 or 3 bytes)
    other = head.find(kinds[1], 0, len(head) if end == -1 else end + len(kinds[1]) - 1)
    if other != -1 and (end == -1 or other < end):
        end = other
    if end == -1:
        return None
    return end - 1 if end > 0 and head[end - 1] == 0x0D else end


def _first_field(data: bytes, field: re.Pattern, name: bytes) -> str | None:
    """The unfolded value of the first `field` (a pattern ``^<name>...`` matched without case)
    of the header block of `data`, or None. The pattern is tried only where the lower-cased
    `name` starts a line: it has no literal the matcher could look for without case."""
    head = data[:HEADER_BLOCK_LIMIT]
    end = _header_block_end(head)
    block = head if end is None else head[:end]
    lowered = block.lower()
    at = lowered.find(name)
    while at != -1:
        if at == 0 or block[at - 1] == 0x0A:
            found = field.match(block, at)
            if found is not None:
                return found.group(1).decode("utf-8", "replace")
        at = lowered.find(name, at + 1)
    return None


@functools.lru_cache(maxsize=16)
def _header_field(header: str) -> re.Pattern:
    """The pattern of a header field (compiled once: the decoder asks for it per message)."""
    return re.compile(rb"^" + re.escape(header.encode("ascii", "replace")) + rb"[ \t]*:(.*(?:\r?\n[ \t].*)*)",
                      re.IGNORECASE | re.MULTILINE)


def mailbox_of(data: bytes, header: str) -> str | None:
    """The mailbox a message was delivered to, from its first `header` field (Delivered-To,
    X-Original-To, ...): the first address in it, lower-cased, or the trimmed value when it holds
    no address; None without the field or with an empty one. Up to MAX_ID_CHARS characters."""
    value = _first_field(data, _header_field(header), header.encode("ascii", "replace").lower())
    if value is None:
        return None
    address = _ADDRESS.search(value)
    text = address.group(0).lower() if address else _SPACE.sub(" ", value).strip()
    return text[:MAX_ID_CHARS] or None


def message_id_of(data: bytes) -> str | None:
    """The normalised Message-ID of the message `data` (see the module doc), or None. The C
    extension reads a value of ASCII (`_native.message_id`); the definition, any other."""
    if _native is not None and native_allowed():
        found = _native.message_id(data)
        if found is not False:
            return found
    return _message_id_of(data)


def _message_id_of(data: bytes) -> str | None:
    """`message_id_of`'s definition."""
    value = _first_field(data, _FIELD, b"message-id")
    if value is None:
        return None
    bracketed = _BRACKETED.search(value)
    text = _SPACE.sub("", bracketed.group(1) if bracketed else value)
    if not text:
        return None
    local, at, domain = text.rpartition("@")
    text = f"{local}@{domain.lower()}" if at else text
    if len(text) > MAX_ID_CHARS:
        return "msgid-sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return text


def mail_id(data: bytes) -> str:
    """The id of the message `data` on every route: its Message-ID, else a digest of its bytes."""
    return message_id_of(data) or "sha256:" + hashlib.sha256(data).hexdigest()[:16]
