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
import re
from dataclasses import dataclass
from email import errors
from email.header import Header, decode_header
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from email.utils import collapse_rfc2231_value, parseaddr, quote, unquote
from functools import lru_cache

from stream_nb.events.codec import has_lone_surrogate
from stream_nb.mail.html import count_bucket, read_html, registered_domain
from stream_nb.native import native_allowed

try:  # the C loops (setup.py builds them; the Python functions here are their definition)
    from stream_nb.mail import _native
except ImportError:
    _native = None

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
_MISSING = object()

# A header as the feed parser reads one: a name of printable ASCII but ':', then ':', its value
# (blanks after the ':' left out, as compat32 leaves them) and its continuation lines.
_HEADER_FIELD = re.compile(r"([\041-\071\073-\176]+):[ \t]*([^\n]*\n(?:[ \t][^\n]*\n)*)")
# The end of the header block: a line that is only a line break, after a '\n'.
_BLANK_LINE = re.compile(r"\n\r?\n")
# One plain address, bare or in '<>' after a plain or quoted name: parseaddr reads it as the
# address as written (a name with '@', '.' or ',' may mean otherwise: those go to parseaddr).
_ADDRESS_SPEC = r"[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
_PLAIN_ADDRESS = re.compile(
    r'[ \t]*(?:(%s)|(?:"[^"\\\r\n]*"[ \t]*|[A-Za-z0-9 \t]*)<(%s)>)[ \t]*'
    % (_ADDRESS_SPEC, _ADDRESS_SPEC)
)


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
    message; cutting here bounds both, so a message of deeply nested parts stays linear. (The
    C extension's `content_type_cut` repeats it.)"""
    lowered = data.lower()
    position = 0
    for _ in range(limit + 1):
        found = lowered.find(b"\ncontent-type:", position)
        if found == -1:
            return None
        position = found + 1
    return data[:position]


def _header_fields(block: str, position: int) -> list[str] | None:
    """[name, value, ...] of the header lines of `block` from `position` on (each ended by
    '\n'), the value as header_source_parse makes it, when every line is a plain header line
    or a continuation of one; None when one is not. (The C extension's `header_fields`
    repeats it.)"""
    fields = []
    match_field = _HEADER_FIELD.match
    while position < len(block):
        field = match_field(block, position)
        if field is None:  # not a plain header line, or a continuation with nothing before it
            return None
        fields += [field.group(1), field.group(2).rstrip("\r\n")]
        position = field.end()
    return fields


def _lowered_names(headers: list) -> list[str]:
    """[name.lower() for name, _ in headers], lower-cased in one piece when all are ASCII."""
    names = "\n".join([name for name, _ in headers])
    if not names.isascii():
        return [name.lower() for name, _ in headers]
    lowered = names.lower().split("\n")
    return lowered if len(lowered) == len(headers) else [name.lower() for name, _ in headers]


def _field_index(headers: list) -> tuple[dict, list[str]]:
    """({lower-cased name: the position of its first field}, the lower-cased names) of `headers`."""
    lowered = _lowered_names(headers)
    # reversed: the first position of a name is the one the dict keeps
    return dict(zip(reversed(lowered), range(len(headers) - 1, -1, -1))), lowered


class _ReadMessage(Message):
    """The fast paths' Message: `get` (which Message's own methods call too) finds the first
    field of a name through an index of the lower-cased names, instead of lower-casing every
    name at every look-up; the answer is Message.get's. The index is made at the first look-up
    and again when the header list is another (a removal) or longer (an addition); a field
    replaced in place keeps its name, and so its place in the index."""

    # (the header list indexed, its length, {lower-cased name: position}, the lower-cased names)
    _first_field = None

    def field_index(self) -> tuple[dict, list[str]]:
        """({lower-cased name: the position of its first field}, the lower-cased names) of the
        header list as it is now."""
        headers = self._headers
        index = self._first_field
        if index is None or index[0] is not headers or index[1] != len(headers):
            index = self._first_field = (headers, len(headers), *_field_index(headers))
        return index[2], index[3]

    def get(self, name, failobj=None):
        position = self.field_index()[0].get(name.lower())
        if position is None:
            return failobj
        return _fetched(*self._headers[position])  # (the policy is compat32)

    def _get_params_preserve(self, failobj, header):
        """Message's, from a cache of the parameters of string values: Content-Type values
        recur from message to message, and every get_param, get_boundary, get_filename and
        get_content_charset parses them again."""
        value = self.get(header, _MISSING)
        if value is _MISSING:
            return failobj
        if type(value) is not str:
            return Message._get_params_preserve(self, failobj, header)
        return list(_params_of(value))


class _OneValue:
    """A stand-in message whose every header is `value`, for Message's parameter parsing."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def get(self, name, failobj=None):
        return self.value


@lru_cache(maxsize=256)
def _params_of(value: str) -> tuple:
    """Message._get_params_preserve of a header whose value is `value` (`_plain_params` for the
    common value; a boundary makes most multipart values new ones, so they are often not in
    the cache)."""
    plain = _plain_params(value)
    if plain is not None:
        return plain
    return tuple(Message._get_params_preserve(_OneValue(value), None, "content-type"))


def _plain_params(value: str) -> tuple | None:
    """Message._get_params_preserve of a value without '\\' or '*' whose every ';'-separated
    piece holds an even number of '"' (None for any other): its pieces are then
    `value.split(";")` (no ';' is quoted), each (name, value) as `_parseparam` and
    `_get_params_preserve` strip and lower-case them, the first as it stands, the others
    `(name, '"%s"' % quote(unquote(value)))` as `decode_params` makes them (no '*': no RFC 2231
    name)."""
    if "\\" in value or "*" in value:
        return None
    params = []
    for piece in value.split(";"):
        if piece.count('"') % 2:
            return None
        name, equals, piece_value = piece.partition("=")
        if equals:
            params.append((name.strip().lower().strip(), piece_value.strip()))
        else:
            params.append((piece.strip(), ""))
    return (params[0], *[(name, '"%s"' % quote(unquote(piece_value))) for name, piece_value in params[1:]])


def _native_loops():
    """The C extension when it is built and the environment allows it (`native_allowed`), else
    None: parse_mail asks once per message (the environment is slow to read), and hands the
    answer down."""
    return _native if _native is not None and native_allowed() else None


def _header_table(block: str, position: int) -> tuple[list, dict, list[str]] | None:
    """(the fields as (name, value) pairs, {lower-cased name: the position of its first field},
    the lower-cased names) of `_header_fields(block, position)`, None when that is None. (The C
    extension's `header_table` repeats it, in one pass.)"""
    fields = _header_fields(block, position)
    if fields is None:
        return None
    flat = iter(fields)
    headers = list(zip(flat, flat))
    return (headers, *_field_index(headers))


def _with_plain_headers(block: str, position: int, message: Message, native) -> Message | None:
    """`message` given the header lines of `block` from `position` on, as the parser sets
    them, when they are all plain (`_header_table`, or its C twin from `native`); None when
    one is not. A message without headers yet takes the table's index of its names too."""
    table = (_header_table if native is None else native.header_table)(block, position)
    if table is None:
        return None
    headers, first, lowered = table
    if message._headers:
        message._headers += headers  # what Message.set_raw does, field by field
    else:
        message._headers = headers
        message._first_field = (headers, len(headers), first, lowered)  # as field_index makes it
    return message


def _has_lone_carriage_return(text: str, start: int = 0) -> bool:
    """Whether `text[start:]` holds a '\\r' not followed by '\\n': one ends a line for the parser,
    which the fast paths do not read. (Most mail has no '\\r': looking for one is a byte search,
    where counting '\\r\\n' reads the text a character at a time.)"""
    return text.find("\r", start) != -1 and text.count("\r", start) != text.count("\r\n", start)


def _simple_message(data: bytes, native=_MISSING) -> Message | None:
    """The `Message` compat32's parser would build, for the common shapes it reads without
    judgement: plain 'Name: value' header lines (continuations, a first 'From ' envelope line)
    ended by a blank line, then either a body of a type that is neither multipart nor
    message/* (the rest of the input, as it stands) or a plain multipart (`_simple_multipart`).
    None for anything else: the parser reads it. `native`: `_native_loops()`, asked when not given."""
    if native is _MISSING:
        native = _native_loops()
    text = data.decode("ascii", "surrogateescape")  # as BytesParser decodes
    blank = _BLANK_LINE.search(text)
    if blank is None or text[:1] in ("\r", "\n"):
        return None
    block = text[: blank.start() + 1]
    if _has_lone_carriage_return(block):
        return None
    message = _ReadMessage(policy=compat32)
    position = 0
    if block.startswith("From "):
        position = block.index("\n") + 1
        message.set_unixfrom(block[: position - 1].rstrip("\r"))
    if _with_plain_headers(block, position, message, native) is None:
        return None
    maintype = message.get_content_maintype()
    if maintype == "multipart":
        return _simple_multipart(message, text, blank.end(), native)
    if maintype == "message":
        return None
    message.set_payload(text[blank.end():])
    return message


def _boundary_lines(text: str, boundary: str, position: int, limit: int | None = None) -> list[tuple[int, int, bool]]:
    """(start, end, closing) of each line the parser takes for a boundary, from `position` on
    (and, with a `limit`, starting before it): what `re.compile(r"^--%s(--)?[ \t]*\r?$" %
    re.escape(boundary), re.MULTILINE).finditer(text, position)` finds, (match.start(),
    match.end(), group 1 matched), without compiling a pattern for every boundary: '--' and the
    boundary at the start of a line, '--' for the closing one, blanks, and the line's end (an
    '\r' before it is the match's)."""
    marker = "--" + boundary
    if limit is None:
        limit = len(text)
    lines = []
    while (at := text.find(marker, position, limit + len(marker) - 1)) != -1:
        position = at + 1
        if at > 0 and text[at - 1] != "\n":  # '^': not the start of a line
            continue
        end = at + len(marker)
        closing = text.startswith("--", end)  # (without it the line would end at a '-': no match)
        if closing:
            end += 2
        while end < len(text) and text[end] in " \t":
            end += 1
        if text.startswith("\r", end) and (end + 1 == len(text) or text[end + 1] == "\n"):
            end += 1
        elif end < len(text) and text[end] != "\n":  # '$': the line goes on
            continue
        lines.append((at, end, closing))
        position = end
    return lines


def _simple_multipart(
    message: Message, text: str, body_start: int, native, body_end: int | None = None, depth: int = 0
) -> Message | None:
    """`message` (a multipart's headers) given the parts the parser would attach to it, for
    the plain layout of its body, `text[body_start:body_end]` (to the end without `body_end`):
    a boundary, lines broken by '\n' or '\r\n' only; a preamble, then parts each of plain
    header lines (or none), a blank line and a body (its last line break belongs to the
    boundary), each of a type that is not message/* and, for a multipart (fewer than MAX_DEPTH
    levels down), of this layout itself within its part, the closing boundary, an epilogue.
    Two slips the parser only notes as defects, and so are noted here too: a transfer encoding
    a multipart may not have, and a closing boundary that never comes (the last part, not a
    multipart, then runs to the end). None for anything else (a missing or doubled boundary, a
    boundary with a line break in it, a part the parser would find other defects in, a digest):
    the parser reads it. Preamble and epilogue, which nothing here reads, stay None.

    A nested multipart ends where its part does: the parser ends every line of a part at an
    enclosing boundary line before its own boundaries are looked at, and a part holds no line
    of the enclosing boundary."""
    if message.get_content_type() == "multipart/digest":  # its parts default to message/rfc822
        return None
    boundary = message.get_boundary()
    cte = str(message.get("content-transfer-encoding", "8bit")).lower()
    if not boundary:
        return None
    if cte not in ("7bit", "8bit", "binary"):  # as the parser notes it, before reading the parts
        message.defects.append(errors.InvalidMultipartContentTransferEncodingDefect())
    if "\n" in boundary:  # (a folded quoted value) the parser matches it within one line only
        return None
    if body_end is None:  # the outermost multipart: its body holds every nested one's
        body_end = len(text)
        if _has_lone_carriage_return(text, body_start):
            return None
    marks = _boundary_lines(text, boundary, body_start, body_end)
    if not marks or marks[0][2]:  # no opening boundary before the closing one
        return None
    for mark, following in zip(marks, marks[1:] + [None]):
        if mark[2]:  # the closing boundary: the rest is the epilogue
            return message
        # without a closing boundary the last part runs to the end of the multipart
        start, end = mark[1] + 1, body_end if following is None else following[0]
        if start >= end:  # two boundary lines in a row: the parser swallows the second
            return None
        if text.startswith("\n", start) or text.startswith("\r\n", start):  # a part without headers
            headers, part_body = "", text.index("\n", start) + 1
        else:
            blank = _BLANK_LINE.search(text, start, end)
            if blank is None:  # headers up to the boundary, or a body without a blank line
                return None
            headers, part_body = text[start: blank.start() + 1], blank.end()
        part = _with_plain_headers(headers, 0, _ReadMessage(policy=compat32), native)
        if part is None:
            return None
        maintype = part.get_content_maintype()
        if maintype == "multipart":
            if following is None or depth + 1 >= MAX_DEPTH:
                return None
            if _simple_multipart(part, text, part_body, native, end, depth + 1) is None:
                return None
        elif maintype == "message":
            return None
        else:
            # The line break before a boundary belongs to it (RFC 2046); the parser takes off a
            # last part's last line break at the end of the input too, when it has one.
            body = text[part_body:end]
            line_break = 2 if body.endswith("\r\n") else 1 if body.endswith("\n") else 0
            part.set_payload(body[: len(body) - line_break])
        message.attach(part)
        if following is None:
            message.defects.append(errors.CloseBoundaryNotFoundDefect())
            return message
    return None


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
    if "=?" not in raw:  # no encoded word: decode_header would give the value as it stands
        return raw
    try:
        pieces = decode_header(raw)
    except MemoryError:  # the machine's, not the mail's (as at every `except Exception` here)
        raise
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
    """A header as a plain string for a keyword check ('' when absent)."""
    return _as_string(part.get(name))


def _as_string(value: str | Header | None) -> str:
    """A header value as a string ('' for None); compat32 hands back a `Header` object, not a
    string, for a value with 8-bit bytes."""
    return "" if value is None else value if isinstance(value, str) else str(value)


def _content_type(part: Message, raw: str | Header | None) -> str:
    """`part.get_content_type()` given its Content-Type value, `raw` (None: absent)."""
    if raw is None:
        return part.get_default_type()
    full_type = str(raw).partition(";")[0].strip().lower()
    return full_type if full_type.count("/") == 1 else "text/plain"


def _params(part: Message, name: str, raw: str | Header | None) -> list | None:
    """`part.get_params(None, name, unquote=False)` given the header's value, `raw` (None:
    absent): a string's parameters straight from `_params_of` (what Message would parse them
    into), without Message looking the header up again."""
    if raw is None:
        return None
    if type(raw) is str:
        return list(_params_of(raw))
    return part.get_params(None, name, unquote=False)


# The transfer encodings Message.get_payload(decode=True) decodes (compared lower-cased, unstripped).
_DECODED_ENCODINGS = frozenset({"quoted-printable", "base64", "x-uuencode", "uuencode", "uue", "x-uue"})


def _decoded_payload(part: Message, raw_encoding: str) -> bytes | None:
    """`part.get_payload(decode=True)` of a part that is not a multipart, given its
    Content-Transfer-Encoding as a string (`raw_encoding`, '' when absent): an ASCII string
    payload in an encoding Message does not decode is its ASCII bytes (what Message makes of
    it, without looking the header up again); anything else is Message's to decode."""
    payload = part._payload
    if type(payload) is str and payload.isascii() and raw_encoding.lower() not in _DECODED_ENCODINGS:
        return payload.encode("ascii")
    return part.get_payload(decode=True)


def _param(params: list | None, name: str, failobj: object) -> object:
    """`Message.get_param(name, failobj)` over a header's parameters as `get_params(None,
    header, unquote=False)` gave them (None: no such header): each header's are read once."""
    if params is None:
        return failobj
    for key, value in params:
        if key.lower() == name:
            if isinstance(value, tuple):  # RFC 2231: (charset, language, value)
                return value[0], value[1], unquote(value[2])
            return unquote(value)
    return failobj


def _filename(disposition_params: list | None, read_type_params) -> str | None:
    """`Message.get_filename()`: the Content-Disposition's 'filename', else the Content-Type's
    'name' (its parameters read only then, by `read_type_params`, as get_filename would)."""
    filename = _param(disposition_params, "filename", _MISSING)
    if filename is _MISSING:
        filename = _param(read_type_params(), "name", _MISSING)
    if filename is _MISSING:
        return None
    return collapse_rfc2231_value(filename).strip()


def _content_charset(type_params: list | None) -> str | None:
    """`Message.get_content_charset()` over the Content-Type's parameters."""
    charset = _param(type_params, "charset", _MISSING)
    if charset is _MISSING:
        return None
    if isinstance(charset, tuple):  # RFC 2231 encoded: decoded, and it must end up ASCII
        try:
            charset = str(charset[2].encode("raw-unicode-escape"), charset[0] or "us-ascii")
        except (LookupError, UnicodeError):
            charset = charset[2]
    try:
        charset.encode("us-ascii")
    except UnicodeError:
        return None
    return charset.lower()


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
        except MemoryError:
            raise
        except Exception:
            evidence.defect("unknown_charset")
    for fallback in ("utf-8", _FALLBACK_CHARSET):
        try:
            return payload.decode(fallback)
        except UnicodeDecodeError:
            continue
    return payload.decode("latin-1")


@lru_cache(maxsize=512)  # lists and commented addresses recur (a mailing list's To, a sender)
def _parsed_address(value: str) -> str:
    """The address parseaddr reads first in a header value, lower-cased ('' for none)."""
    try:
        return parseaddr(value)[1].strip().lower()
    except MemoryError:
        raise
    except Exception:  # a hostile address list; the value is already capped in length
        return ""


def _address_features(name: str, value: str, evidence: _Evidence) -> str | None:
    """'#hdr:<name>:addr:<address>' and ':domain:<domain>' for the first address of a header;
    returns the domain."""
    plain = _PLAIN_ADDRESS.fullmatch(value)
    if plain is not None:  # an address of the pattern's characters: '@', no blank, one word each
        address = (plain.group(1) or plain.group(2)).lower()
        domain = address.rpartition("@")[2].strip(".")
        evidence.features[f"#hdr:{name}:addr:{address}"] = None
        evidence.features[f"#hdr:{name}:domain:{domain}"] = None
        return domain
    address = _parsed_address(value)
    if "@" not in address or " " in address:
        if value.strip():
            evidence.feature(f"#hdr:{name}:no_address")
        return None
    domain = address.rpartition("@")[2].strip(".")
    evidence.feature(f"#hdr:{name}:addr:{address}")
    evidence.feature(f"#hdr:{name}:domain:{domain}")
    return domain


def _relay_words(spaced: str) -> list:
    """[is_ip, text, ...] of a Received value lower-cased with '(' and ')' made spaces, in the
    order its words come: after each word 'from' or 'by', the next word (';[]' stripped) when it
    is a host (it has a '.' and is not all digits); for each word '[a.b.c.d]' of four digit
    octets, 'a.b.c'. (The C extension's `relay_words` repeats it.)"""
    found: list = []
    words = spaced.split()
    # only these words give a feature; looked at in order, as they came
    marked = [i for i, w in enumerate(words) if w == "from" or w == "by" or w[:1] == "["]
    for index in marked:
        word = words[index]
        if word[:1] != "[":
            if index + 1 < len(words):
                host = words[index + 1].strip(";[]")
                if "." in host and not host.replace(".", "").isdigit():
                    found += [False, host]
        elif word.count(".") == 3:
            octets = word.strip("[];").split(".")
            if all(octet.isdigit() for octet in octets):
                found += [True, ".".join(octets[:3])]
    return found


def _received_features(values: list[str], evidence: _Evidence, native) -> None:
    """Relays of the first MAX_RECEIVED Received headers: the hosts after 'from' and 'by',
    their domains, and the /24 of bracketed IPv4 addresses (`_relay_words`, or its C twin
    from `native`)."""
    relay_words = _relay_words if native is None else native.relay_words
    features = evidence.features  # each name below is one word already: no re-splitting
    # All values in one string, for one replace and one call: a word '\0' between two (no
    # blank, and neither 'from', 'by', '[...]' nor a host) keeps a value's last 'from' or 'by'
    # from taking the next value's first word; the words and their order are each value's.
    spaced = " \0 ".join([value[:MAX_HEADER_CHARS].lower() for value in values[:MAX_RECEIVED]])
    found = iter(relay_words(spaced.replace("(", " ").replace(")", " ")))
    for is_ip, text in zip(found, found):
        if is_ip:
            features["#hdr:received:ip:" + text] = None
        else:
            features["#hdr:received:host:" + text] = None
            features["#hdr:received:domain:" + registered_domain(text)] = None
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


_ASCII_DIGITS_AS_9 = str.maketrans("0123456789", "9" * 10)


def _mailer_feature(value: str) -> str:
    words = value.lower().replace("(", " ").replace(")", " ").split()[:4]
    joined = "_".join(words)
    if joined.isascii():  # the common case: only ASCII digits are digits
        return joined.translate(_ASCII_DIGITS_AS_9)[:60]
    return "_".join("".join("9" if c.isdigit() else c for c in word) for word in words)[:60]


def _fetched(name: str, value: str) -> str | Header:
    """A header value as compat32 hands it out: an ASCII string as it stands (the common
    case, checked first), else what `header_fetch_parse` makes of it (8-bit: a Header)."""
    if isinstance(value, str) and value.isascii():
        return value
    return compat32.header_fetch_parse(name, value)


def _field_text(name: str, value: str, evidence: _Evidence) -> str:
    """`_header_text(_fetched(name, value), evidence)`: a plain ASCII value without an encoded
    word, within the cap (most are), is its own text, told without either call."""
    if type(value) is str and len(value) <= MAX_HEADER_CHARS and value.isascii() and "=?" not in value:
        return value
    return _header_text(_fetched(name, value), evidence)


def _header_features(message: Message, evidence: _Evidence, native) -> str:
    """The top-level headers' features; returns the decoded subject. `native`: `_native_loops()`."""
    # The names lower-cased once instead of at each look-up (Message.get scans them all); the
    # fast paths' message has them indexed already (its look-ups while it was built).
    headers = message._headers  # (what raw_items gives a copy of)
    # {name: the position of its first field}, the names
    first, lowered = message.field_index() if isinstance(message, _ReadMessage) else _field_index(headers)
    received_fields = []
    at = -1
    while len(received_fields) <= MAX_RECEIVED:
        try:
            at = lowered.index("received", at + 1)
        except ValueError:
            break
        received_fields.append(headers[at])

    def text(name: str) -> str:  # _header_text(Message.get(name), evidence)
        position = first.get(name)
        return "" if position is None else _field_text(*headers[position], evidence)

    subject = " ".join(text("subject").split())
    domains = {}
    for name in ("from", "reply-to", "return-path", "to"):
        if name in first:
            domains[name] = _address_features(name, text(name), evidence)
        elif name in ("from", "to"):
            evidence.feature(f"#hdr:{name}:missing")
    if domains.get("reply-to") and domains.get("from") and domains["reply-to"] != domains["from"]:
        evidence.feature("#hdr:reply-to:other_domain")
    received = [_field_text(*field, evidence) for field in received_fields]
    _received_features(received, evidence, native)
    message_id = text("message-id").strip()
    if not message_id:
        evidence.feature("#hdr:message-id:missing")
    elif "@" in message_id:
        domain = message_id.rpartition("@")[2].strip("<> ").lower()[:100]
        evidence.feature(f"#hdr:message-id:domain:{domain}")
    else:
        evidence.feature("#hdr:message-id:no_domain")
    for name in ("x-mailer", "user-agent"):
        value = text(name)
        if value.strip():
            evidence.feature(f"#hdr:mailer:{_mailer_feature(value)}")
    if "date" not in first:
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
    # Content-Type and Content-Disposition are each looked up once (Message.get scans every
    # header) and their parameters parsed only when present.
    raw_type = part.get("content-type")
    full_type = _content_type(part, raw_type)  # the maintype and subtype are its halves
    maintype, _, subtype = full_type.partition("/")
    content_type = full_type.split()[0].rstrip(";")[:80]
    evidence.feature(f"#mime:type:{content_type}")
    boundary = part.get_param("boundary") if maintype == "multipart" else None
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
    type_params = _MISSING  # read at first need, in the order Message's methods read them

    def read_type_params():
        nonlocal type_params
        if type_params is _MISSING:
            type_params = _params(part, "content-type", raw_type)
        return type_params

    raw_disposition = part.get("content-disposition")
    disposition_params = _params(part, "content-disposition", raw_disposition)
    filename = _filename(disposition_params, read_type_params)
    disposition = _as_string(raw_disposition).strip().lower()
    if filename or disposition.startswith("attachment"):
        evidence.feature(f"#att:type:{content_type}")
        if isinstance(filename, str) and "." in filename:
            extension = filename.rpartition(".")[2].strip().lower()[:10]
            evidence.feature(f"#att:ext:{extension}")
        return
    # A multipart whose boundary never came is one string: read it as text, as far as it goes.
    unsplit_multipart = maintype == "multipart"
    if maintype != "text" and not unsplit_multipart:
        return
    raw_encoding = _plain_header(part, "content-transfer-encoding")
    encoding = (raw_encoding or "7bit").strip().lower()[:20]
    if encoding not in ("7bit", "8bit", "binary"):
        evidence.feature(f"#mime:cte:{encoding}")
    payload = _decoded_payload(part, raw_encoding)
    for defect in part.defects:  # decoding may have added some (bad base64)
        evidence.defect(_snake_case(type(defect).__name__))
    if not isinstance(payload, bytes):
        return
    charset = _content_charset(read_type_params()) or "us-ascii"
    if charset not in ("us-ascii", "utf-8"):
        evidence.feature(f"#mime:charset:{charset[:30]}")
    text = _decode_bytes(payload, charset, evidence)
    if subtype == "html" and not unsplit_multipart:
        try:
            html = read_html(text)
        except MemoryError:
            raise
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
    message of which nothing can be read (empty input) has no body or features but a defect.
    MemoryError is raised, never made a defect: it is the machine's, and a reading cut short by
    it would be learned as the message's, or the message dead-lettered as unreadable."""
    evidence = _Evidence()
    if len(data) > max_bytes:  # first, so nothing below touches more than max_bytes
        data = data[:max_bytes]
        evidence.defect("byte_cap")
    if not data or data.isspace():  # (data.strip() is empty: the same ASCII blanks, no copy)
        return ParsedMail(subject="", body="", features=[], defects=["empty"])
    native = _native_loops()
    cut_content_types = _cut_before_nth_content_type if native is None else native.content_type_cut
    cut = cut_content_types(data, MAX_CONTENT_TYPES)
    if cut is not None:
        data = cut
        evidence.defect("content_type_cap")
    try:
        message = _simple_message(data, native)
        if message is None:
            message = BytesParser(policy=compat32).parsebytes(data)
    except MemoryError:
        raise
    except Exception as error:  # the parser is meant never to raise; if it does, say so
        evidence.defect(f"unreadable:{type(error).__name__}")
        return ParsedMail(subject="", body="", features=[], defects=list(evidence.defects))
    reading = _Reading(evidence=evidence, texts=[])
    subject = ""
    steps = (lambda: _header_features(message, evidence, native), lambda: _read_part(message, 0, reading))
    for step in steps:
        try:
            result = step()
        except MemoryError:
            raise
        except Exception as error:  # never raise on bad mail: keep what was read, name what broke
            evidence.defect(f"read_error:{type(error).__name__}")
            continue
        if isinstance(result, str):
            subject = result
    body = "\n".join(reading.texts)
    return ParsedMail(
        subject=subject, body=body, features=list(evidence.features), defects=list(evidence.defects)
    )
