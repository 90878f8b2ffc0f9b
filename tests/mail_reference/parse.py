"""Raw RFC 5322 bytes -> `ParsedMail`: subject, body text, '#' evidence features, defects.

MIME is read by the standard library's `email` with the `compat32` policy: it keeps headers as
strings and never parses them on access, where `email.policy.default`'s header objects raise
on some malformed headers and cost more (measured on SpamAssassin 2003: reading every header
and body raised on 25 of 2,796 messages with `default`, on none with `compat32`, and took 15x
as long); decoding is done here, with our own fallbacks.

What is read of one message is bounded, so a hostile or huge message costs at most a fixed
amount of work: the first `max_bytes` bytes (1 MiB by default), the part of it before the
`MAX_CONTENT_TYPES + 1`-th Content-Type header (which bounds how many multiparts and nested
messages the parser keeps open), `MAX_PARTS` parts, `MAX_DEPTH` levels of nesting, the first
`MAX_RECEIVED` Received headers and `MAX_HEADER_CHARS` characters of any header. Whatever was
cut or wrong is in `defects` and, as '#defect:<name>', in `features`.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from email.header import Header, decode_header
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from email.utils import parseaddr

from stream_nb.events.codec import has_lone_surrogate
from tests.mail_reference.html import count_bucket, read_html, registered_domain

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_CONTENT_TYPES",
    "MAX_DEPTH",
    "MAX_HEADER_CHARS",
    "MAX_PARTS",
    "MAX_RECEIVED",
    "ParsedMail",
    "parse_mail",
]

DEFAULT_MAX_BYTES = 1 << 20
MAX_CONTENT_TYPES = 64
MAX_PARTS = 64
MAX_DEPTH = 8
MAX_RECEIVED = 6
MAX_HEADER_CHARS = 2000

# Codecs that are not a charset a mail could mean, or whose decoder is not linear (punycode).
_REFUSED_CODECS = frozenset(
    {"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape", "unicode_escape",
     "raw_unicode_escape"}
)
_FALLBACK_CHARSET = "cp1252"


@dataclass(frozen=True)
class ParsedMail:
    """One message as the featuriser will read it.

    `body` is the text parts and the visible text of the HTML parts, joined; `features` the
    '#'-prefixed header, MIME, markup, attachment and defect evidence, each once, in a fixed
    order; `defects` what was wrong or cut, each once (also present as '#defect:<name>').
    """

    subject: str
    body: str
    features: list[str]
    defects: list[str]


class _Evidence:
    """Features and defects in first-seen order, each once."""

    def __init__(self) -> None:
        self.features: dict[str, None] = {}
        self.defects: dict[str, None] = {}

    def feature(self, name: str) -> None:
        # one token each: whitespace from a header value would split it in a featuriser
        self.features["_".join(name.split())] = None

    def defect(self, name: str) -> None:
        self.defects[name] = None
        self.features[f"#defect:{name}"] = None


def _snake_case(name: str) -> str:
    """'StartBoundaryNotFoundDefect' -> 'start_boundary_not_found'."""
    if name.endswith("Defect"):
        name = name[: -len("Defect")]
    return "".join("_" + char.lower() if char.isupper() else char for char in name).lstrip("_")


def _cut_before_nth_content_type(data: bytes, limit: int) -> bytes | None:
    """`data` up to the line of its `limit + 1`-th Content-Type header, or None if it has fewer.

    The parser keeps one end-of-part check per open multipart and one generator per nested
    message; cutting here bounds both, so a message of deeply nested parts stays linear."""
    lowered = data.lower()
    position = 0
    for _ in range(limit + 1):
        found = lowered.find(b"\ncontent-type:", position)
        if found == -1:
            return None
        position = found + 1
    return data[:position]


def _header_text(raw: str | None, evidence: _Evidence) -> str:
    """A header value as text: encoded words decoded, 8-bit bytes read as UTF-8 or cp1252,
    cut to MAX_HEADER_CHARS (a bound on decode_header's work too)."""
    if raw is None:
        return ""
    if isinstance(raw, Header):  # compat32's wrapping of a value with 8-bit bytes
        evidence.defect("header_8bit")
        pieces = decode_header(raw)
        texts = []
        for piece, charset in pieces:
            if isinstance(piece, bytes):
                charset = "utf-8" if charset in (None, "unknown-8bit") else charset
                piece = _decode_bytes(piece[:MAX_HEADER_CHARS], charset, evidence)
            texts.append(piece[:MAX_HEADER_CHARS])
        return "".join(texts)
    if len(raw) > MAX_HEADER_CHARS:
        raw = raw[:MAX_HEADER_CHARS]
        evidence.defect("header_cap")
    try:
        raw.encode("ascii")
    except UnicodeEncodeError:
        evidence.defect("header_8bit")
        if has_lone_surrogate(raw):  # undecoded 8-bit bytes
            return _decode_bytes(raw.encode("ascii", "surrogateescape"), "utf-8", evidence)
        return raw
    try:
        pieces = decode_header(raw)
    except Exception:  # a malformed encoded word: keep the header as written
        evidence.defect("bad_encoded_word")
        return raw
    text = []
    for piece, charset in pieces:
        if isinstance(piece, str):
            text.append(piece)
        else:
            text.append(_decode_bytes(piece, charset or "us-ascii", evidence))
    return "".join(text)


def _plain_header(part: Message, name: str) -> str:
    """A header as a plain string for a keyword check ('' when absent); compat32 hands back a
    `Header` object, not a string, for a value with 8-bit bytes."""
    value = part.get(name)
    return "" if value is None else value if isinstance(value, str) else str(value)


def _codec_for(charset: str) -> str | None:
    try:
        info = codecs.lookup(charset)
    except (LookupError, ValueError, TypeError):
        return None
    if info.name in _REFUSED_CODECS or not getattr(info, "_is_text_encoding", True):
        return None
    return info.name


def _decode_bytes(payload: bytes, charset: str, evidence: _Evidence) -> str:
    """Bytes in their declared charset; an unknown one, or bytes the declared one cannot read,
    fall back to UTF-8 then cp1252 (then Latin-1, which reads anything), recorded as defects."""
    codec = _codec_for(charset.strip().strip('"').lower() or "us-ascii")
    if codec is None:
        evidence.defect("unknown_charset")
    else:
        try:
            return payload.decode(codec)
        except (UnicodeDecodeError, ValueError):
            if codec not in ("ascii", "utf-8"):
                evidence.defect("charset_mismatch")
        except Exception:
            evidence.defect("unknown_charset")
    for fallback in ("utf-8", _FALLBACK_CHARSET):
        try:
            return payload.decode(fallback)
        except UnicodeDecodeError:
            continue
    return payload.decode("latin-1")


def _address_features(name: str, value: str, evidence: _Evidence) -> str | None:
    """'#hdr:<name>:addr:<address>' and ':domain:<domain>' for the first address of a header;
    returns the domain."""
    try:
        address = parseaddr(value)[1].strip().lower()
    except Exception:  # a hostile address list; the value is already capped in length
        address = ""
    if "@" not in address or " " in address:
        if value.strip():
            evidence.feature(f"#hdr:{name}:no_address")
        return None
    domain = address.rpartition("@")[2].strip(".")
    evidence.feature(f"#hdr:{name}:addr:{address}")
    evidence.feature(f"#hdr:{name}:domain:{domain}")
    return domain


def _received_features(values: list[str], evidence: _Evidence) -> None:
    """Relays of the first MAX_RECEIVED Received headers: the hosts after 'from' and 'by',
    their domains, and the /24 of bracketed IPv4 addresses."""
    for value in values[:MAX_RECEIVED]:
        words = value[:MAX_HEADER_CHARS].lower().replace("(", " ").replace(")", " ").split()
        for index, word in enumerate(words):
            if word in ("from", "by") and index + 1 < len(words):
                host = words[index + 1].strip(";[]")
                if "." in host and not host.replace(".", "").isdigit():
                    evidence.feature(f"#hdr:received:host:{host}")
                    evidence.feature(f"#hdr:received:domain:{registered_domain(host)}")
            if word.startswith("[") and word.count(".") == 3:
                octets = word.strip("[];").split(".")
                if all(octet.isdigit() for octet in octets):
                    evidence.feature("#hdr:received:ip:" + ".".join(octets[:3]))
    if len(values) > MAX_RECEIVED:
        evidence.feature("#hdr:received:many")
    evidence.feature(f"#hdr:received:count:{count_bucket(len(values)) if values else 0}")


def _shape(text: str) -> str:
    """A token's shape: letters as 'a', digits as '9', runs of the same class collapsed
    ('----=_NextPart_000_0001' -> '-=_a_9_9')."""
    shape = []
    for char in text[:200]:
        kind = "a" if char.isalpha() else "9" if char.isdigit() else char
        if not shape or shape[-1] != kind:
            shape.append(kind)
    return "".join(shape)[:40]


def _mailer_feature(value: str) -> str:
    words = value.lower().replace("(", " ").replace(")", " ").split()[:4]
    return "_".join("".join("9" if c.isdigit() else c for c in word) for word in words)[:60]


def _header_features(message: Message, evidence: _Evidence) -> str:
    """The top-level headers' features; returns the decoded subject."""
    subject = " ".join(_header_text(message.get("subject"), evidence).split())
    domains = {}
    for name in ("from", "reply-to", "return-path", "to"):
        value = message.get(name)
        if value is not None:
            domains[name] = _address_features(name, _header_text(value, evidence), evidence)
        elif name in ("from", "to"):
            evidence.feature(f"#hdr:{name}:missing")
    if domains.get("reply-to") and domains.get("from") and domains["reply-to"] != domains["from"]:
        evidence.feature("#hdr:reply-to:other_domain")
    received_raw = (message.get_all("received") or [])[: MAX_RECEIVED + 1]
    received = [_header_text(value, evidence) for value in received_raw]
    _received_features(received, evidence)
    message_id = _header_text(message.get("message-id"), evidence).strip()
    if not message_id:
        evidence.feature("#hdr:message-id:missing")
    elif "@" in message_id:
        domain = message_id.rpartition("@")[2].strip("<> ").lower()[:100]
        evidence.feature(f"#hdr:message-id:domain:{domain}")
    else:
        evidence.feature("#hdr:message-id:no_domain")
    for name in ("x-mailer", "user-agent"):
        value = _header_text(message.get(name), evidence)
        if value.strip():
            evidence.feature(f"#hdr:mailer:{_mailer_feature(value)}")
    if message.get("date") is None:
        evidence.feature("#hdr:date:missing")
    return subject


@dataclass
class _Reading:
    evidence: _Evidence
    texts: list[str]
    parts: int = 0


def _read_part(part: Message, depth: int, reading: _Reading) -> None:
    """One MIME part: containers recurse (bounded), leaves are decoded into text or recorded as
    attachments."""
    evidence = reading.evidence
    if reading.parts >= MAX_PARTS:
        evidence.defect("part_cap")
        return
    reading.parts += 1
    for defect in part.defects:
        evidence.defect(_snake_case(type(defect).__name__))
    content_type = part.get_content_type().split()[0].rstrip(";")[:80]
    evidence.feature(f"#mime:type:{content_type}")
    boundary = part.get_param("boundary") if part.get_content_maintype() == "multipart" else None
    if isinstance(boundary, str):
        evidence.feature(f"#mime:boundary:{_shape(boundary)}")
    if part.is_multipart():
        if depth >= MAX_DEPTH:
            evidence.defect("depth_cap")
            return
        payload = part.get_payload()
        if content_type == "message/rfc822" and payload:
            inner_subject = _header_text(payload[0].get("subject"), evidence)
            if inner_subject.strip():
                reading.texts.append(inner_subject)
        for child in payload:
            _read_part(child, depth + 1, reading)
        return
    filename = part.get_filename()
    disposition = _plain_header(part, "content-disposition").strip().lower()
    if filename or disposition.startswith("attachment"):
        evidence.feature(f"#att:type:{content_type}")
        if isinstance(filename, str) and "." in filename:
            extension = filename.rpartition(".")[2].strip().lower()[:10]
            evidence.feature(f"#att:ext:{extension}")
        return
    # A multipart whose boundary never came is one string: read it as text, as far as it goes.
    unsplit_multipart = part.get_content_maintype() == "multipart"
    if part.get_content_maintype() != "text" and not unsplit_multipart:
        return
    encoding = (_plain_header(part, "content-transfer-encoding") or "7bit").strip().lower()[:20]
    if encoding not in ("7bit", "8bit", "binary"):
        evidence.feature(f"#mime:cte:{encoding}")
    payload = part.get_payload(decode=True)
    for defect in part.defects:  # decoding may have added some (bad base64)
        evidence.defect(_snake_case(type(defect).__name__))
    if not isinstance(payload, bytes):
        return
    charset = part.get_content_charset() or "us-ascii"
    if charset not in ("us-ascii", "utf-8"):
        evidence.feature(f"#mime:charset:{charset[:30]}")
    text = _decode_bytes(payload, charset, evidence)
    if part.get_content_subtype() == "html" and not unsplit_multipart:
        try:
            html = read_html(text)
        except Exception as error:  # html.parser has asserted on odd markup: lose one part only
            evidence.defect(f"html_error:{type(error).__name__}")
            return
        for feature in html.features:
            evidence.feature(feature)
        text = html.text
    if text.strip():
        reading.texts.append(text)


def parse_mail(data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ParsedMail:
    """Read one raw message. Never raises on bad mail: what cannot be read is a defect; a
    message of which nothing can be read (empty input) has no body or features but a defect."""
    evidence = _Evidence()
    if len(data) > max_bytes:  # first, so nothing below touches more than max_bytes
        data = data[:max_bytes]
        evidence.defect("byte_cap")
    if not data.strip():
        return ParsedMail(subject="", body="", features=[], defects=["empty"])
    cut = _cut_before_nth_content_type(data, MAX_CONTENT_TYPES)
    if cut is not None:
        data = cut
        evidence.defect("content_type_cap")
    try:
        message = BytesParser(policy=compat32).parsebytes(data)
    except Exception as error:  # the parser is meant never to raise; if it does, say so
        evidence.defect(f"unreadable:{type(error).__name__}")
        return ParsedMail(subject="", body="", features=[], defects=list(evidence.defects))
    reading = _Reading(evidence=evidence, texts=[])
    subject = ""
    steps = (lambda: _header_features(message, evidence), lambda: _read_part(message, 0, reading))
    for step in steps:
        try:
            result = step()
        except Exception as error:  # never raise on bad mail: keep what was read, name what broke
            evidence.defect(f"read_error:{type(error).__name__}")
            continue
        if isinstance(result, str):
            subject = result
    body = "\n".join(reading.texts)
    return ParsedMail(
        subject=subject, body=body, features=list(evidence.features), defects=list(evidence.defects)
    )
