"""HTML part -> its visible text plus the evidence in its markup.

`read_html` reads one HTML body and returns the text a reader would see (script, style and
hidden text left out) and '#html:' features: link domains, links whose visible text names
another domain than their href, image count, hidden text (display:none, visibility:hidden,
tiny fonts, text coloured as its background), forms, password inputs, scripts, iframes.

The markup is tokenised here (`_scan`) exactly as the standard library's `html.parser` of
CPython 3.11 tokenises it when fed the whole text then closed, with `convert_charrefs`: the
same tags, attributes and text chunks (tests/test_mail_parse.py holds it to that parser on
the corpus, on hostile mail and on generated markup), without that parser's per-token
position bookkeeping and method dispatch, several times faster. Work is linear in the
markup: the open-element stack is bounded, and `_bounded_markup` first turns into text every
'<' whose construct does not close nearby (`html.parser` rescans to the end of the input for
each unclosed '<a', '<!--', '</' or '<?': quadratic on hostile mail before 3.13.4).

The C extension stream_nb.mail._native repeats `_bounded_markup`, `_scan` (for documents
whose every construct it knows, which is nearly all mail: it gives any other document up) and
`_MarkupReader` (asking this module's functions for links, anchors and styles), several times
faster again; without it, or with STREAM_NB_NATIVE=0, the Python definitions here run, with
the same results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from html import unescape

from stream_nb.native import native_allowed

try:  # the C reader (setup.py builds it; the functions here are its definition)
    from stream_nb.mail import _native
except ImportError:  # not compiled: `_scan` and `_MarkupReader` read every document
    _native = None

__all__ = ["HtmlEvidence", "read_html", "host_of_url", "registered_domain"]

# Deeper elements inherit their parent's state without being pushed: a stack of thousands of
# unclosed tags would make every end tag's search for its start quadratic.
MAX_OPEN_ELEMENTS = 64
# An anchor's text beyond this is not searched for a domain name (it is still visible text).
MAX_ANCHOR_TEXT = 400

_VOID_ELEMENTS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
     "source", "track", "wbr"}
)
# "head" is not among them: spam often opens <head> and never closes it before <body>.
_UNSEEN_ELEMENTS = frozenset({"script", "style", "title", "noscript", "template"})
_EVIDENCE_ELEMENTS = {
    "form": "#html:form",
    "script": "#html:script",
    "iframe": "#html:iframe",
    "object": "#html:object",
    "embed": "#html:embed",
    "map": "#html:image_map",
    "base": "#html:base",
}
# Start tags `_MarkupReader.start` does more with than push their parent's state.
_MARKED_STARTS = frozenset(_EVIDENCE_ELEMENTS) | _VOID_ELEMENTS | {"img", "input", "a"}
_URL_SCHEME = re.compile("https?://|ftp://")
_HOST_END = re.compile(r"[/?#\\ ]")
_HOST = re.compile(r"[a-z0-9.\-]+")  # what a host is made of (lower-cased)
# A tag longer than this, or a comment longer than MAX_COMMENT_CHARS, is read as text.
MAX_TAG_CHARS = 4096
MAX_COMMENT_CHARS = 65536
MAX_LT_IN_TAG = 4
# A '<' whose '>' comes within MAX_TAG_CHARS with no other '<' between: a tag left as it is.
_CLOSED_NEARBY = re.compile("<[^<>]{0,%d}>" % (MAX_TAG_CHARS - 1))


class _NextFinder:
    """`text.find(needle, start)` for starts that only grow: a found position is reused until
    passed and 'none left' is remembered, so all calls together scan the text about once."""

    def __init__(self, text: str, needle: str) -> None:
        self.text, self.needle = text, needle
        self.found = -2  # not searched yet

    def __call__(self, start: int) -> int:
        if self.found == -2 or (self.found != -1 and self.found < start):
            self.found = self.text.find(self.needle, start)
        return self.found


def _few_lt_before(markup: str, opening: int, end: int) -> bool:
    """True when at most MAX_LT_IN_TAG '<' stand between a tag's '<' and its '>' (sloppy spam
    writes '<form action=... <input>'); each '<' is looked at by at most that many tags."""
    probe = opening
    for _ in range(MAX_LT_IN_TAG + 1):
        probe = markup.find("<", probe + 1, end)
        if probe == -1:
            return True
    return False


def _bounded_markup(markup: str) -> str:
    """`markup` with '&lt;' for each '<' that does not open a construct closed nearby: a tag
    whose '>' comes within MAX_TAG_CHARS after at most MAX_LT_IN_TAG other '<', or a comment
    whose '-->' comes within MAX_COMMENT_CHARS. Marked sections ('<![') are always text. What
    the parser then reads of each construct is bounded, so its work is linear."""
    if _native is not None and native_allowed():  # the same, in C
        return _native.bounded_markup(markup, MAX_TAG_CHARS, MAX_COMMENT_CHARS, MAX_LT_IN_TAG)
    if "<!--" not in markup and "<![" not in markup:
        # most mail: every '<' has its '>' nearby before any other '<', and nothing changes
        if len(_CLOSED_NEARBY.findall(markup)) == markup.count("<"):
            return markup
    next_lt, next_gt, next_comment_end = (_NextFinder(markup, s) for s in ("<", ">", "-->"))
    pieces: list[str] = []
    copied = position = 0
    while (opening := next_lt(position)) != -1:
        if markup.startswith("<!--", opening):
            end = next_comment_end(opening + 4)
            if end != -1 and end - opening <= MAX_COMMENT_CHARS:
                position = end + 3
                continue
        elif not markup.startswith("<![", opening):
            end = next_gt(opening + 1)
            near = end != -1 and end - opening <= MAX_TAG_CHARS
            if near and _few_lt_before(markup, opening, end):
                position = end + 1
                continue
        pieces.append(markup[copied:opening])
        pieces.append("&lt;")
        copied = position = opening + 1
    pieces.append(markup[copied:])
    return "".join(pieces)


@dataclass
class HtmlEvidence:
    """What one HTML part gave: its visible text and its '#html:' features (first-seen order)."""

    text: str
    features: list[str] = field(default_factory=list)


def count_bucket(count: int) -> str:
    """A count as a coarse bucket (1, 2-3, 4-7, 8-15, 16+), so a feature stays a few values."""
    if count >= 16:
        return "16+"
    low = 1
    while low * 2 <= count:
        low *= 2
    return str(low) if low == 1 else f"{low}-{low * 2 - 1}"


@lru_cache(maxsize=512)  # a link's target is read at its start and again at its end
def host_of_url(url: str) -> str | None:
    """The lower-cased host of an absolute http(s)/ftp URL (or 'www.' link), else None."""
    url = url.strip().lower()
    scheme = _URL_SCHEME.match(url)
    if scheme is not None:
        url = url[scheme.end():]
    elif not url.startswith("www."):
        return None
    end = _HOST_END.search(url)  # the first of '/', '?', '#', '\\', ' '
    host = (url if end is None else url[:end.start()]).rpartition("@")[2].partition(":")[0].strip(".")
    if "." not in host or _HOST.fullmatch(host) is None:
        return None
    return host


@lru_cache(maxsize=1024)  # relays and link targets recur from message to message
def registered_domain(host: str) -> str:
    """The last two labels of a host (three when the second-level one is short, as co.uk);
    an IPv4 address stands as itself. An approximation without a public-suffix list."""
    labels = host.split(".")
    if all(label.isdigit() for label in labels):
        return host
    if len(labels) >= 3 and len(labels[-2]) <= 3 and len(labels[-1]) == 2:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def _domain_named_in(text: str) -> str | None:
    """The first domain a link's visible text names ('www.bank.com', 'http://bank.com/x')."""
    for word in text[:MAX_ANCHOR_TEXT].split():
        if "." not in word:  # (a host has one, and lower-casing makes none)
            continue
        word = word.strip("<>()[]\"',;")
        host = host_of_url(word)
        if host is None and "." in word and word.lower().endswith((".com", ".net", ".org")):
            host = host_of_url("http://" + word)
        if host is not None:
            return host
    return None


def _link_features(href: str) -> list[str]:
    """'#html:link:<registered domain>' of a link's target, and '#html:link_to_ip'."""
    host = host_of_url(href)
    if host is None:
        return []
    features = [f"#html:link:{registered_domain(host)}"]
    if all(label.isdigit() for label in host.split(".")):
        features.append("#html:link_to_ip")
    return features


def _names_other_domain(anchor_text: list[str], href: str) -> bool:
    """Whether a link's visible text names a domain other than the one it leads to."""
    named = _domain_named_in(" ".join(anchor_text))
    target = host_of_url(href)
    return bool(named and target and registered_domain(named) != registered_domain(target))


def _style_hides(style: str) -> bool:
    """True when an inline style hides its text: display:none, visibility:hidden, a font size
    of at most 2px/pt (or 0)."""
    declarations = style.lower().replace(" ", "").split(";")
    for declaration in declarations:
        name, _, value = declaration.partition(":")
        if (name, value) in (("display", "none"), ("visibility", "hidden")):
            return True
        if name == "font-size":
            digits = value.rstrip("ptxem%")
            if digits.replace(".", "", 1).isdigit() and float(digits) <= 2:
                return True
    return False


def _style_colours(style: str) -> tuple[str | None, str | None]:
    """(colour, background colour) an inline style declares, lower-cased, else None."""
    colour = background = None
    for declaration in style.lower().replace(" ", "").split(";"):
        name, _, value = declaration.partition(":")
        if name == "color":
            colour = value
        elif name in ("background-color", "background"):
            background = value
    return colour, background


@dataclass(slots=True)
class _Element:
    tag: str
    hidden: bool
    unseen: bool
    colour: str | None
    background: str | None


# The grammar of CPython 3.11's html.parser (its tolerant start tag, attribute and end tag
# patterns), which `_scan` follows construct by construct.
_TAG_NAME = re.compile(r"([a-zA-Z][^\t\n\r\f />\x00]*)(?:\s|/(?!>))*")
_ATTRIBUTE = re.compile(
    r"((?<=['\"\s/])[^\s/>][^\s/=>]*)(\s*=+\s*('[^']*'|\"[^\"]*\"|(?!['\"])[^>\s]*))?(?:\s|/(?!>))*"
)
_START_TAG_END = re.compile(
    r"""<[a-zA-Z][^\t\n\r\f />\x00]*(?:[\s/]*(?:(?<=['"\s/])[^\s/>][^\s/=>]*"""
    r"""(?:\s*=+\s*(?:'[^']*'|"[^"]*"|(?!['"])[^>\s]*)\s*)?(?:\s|/(?!>))*)*)?\s*"""
)
_END_TAG = re.compile(r"</\s*([a-zA-Z][-.a-zA-Z0-9:_]*)\s*>")
# A start or end tag of a plain name and nothing else, read alike by every rule below.
_SIMPLE_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)>")
_COMMENT_CLOSE = re.compile(r"--\s*>")
_DECLARATION_NAME = re.compile(r"[a-zA-Z][-_.a-zA-Z0-9]*\s*")
_MARKED_SECTION_CLOSE = re.compile(r"]\s*]\s*>")
_MS_MARKED_SECTION_CLOSE = re.compile(r"]\s*>")
# Inside script and style only their own end tag ends the raw text.
_RAW_TEXT_END = {tag: re.compile(r"</\s*%s\s*>" % tag, re.I) for tag in ("script", "style")}
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_INCOMPLETE_AFTER = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ=/")
_NEEDED_ATTRIBUTES = frozenset({"href", "style", "color", "bgcolor", "size", "type"})


def _start_tag_end(markup: str, opening: int) -> int:
    """Where the start tag opening at `opening` ends (after its '>'), or -1 when html.parser
    would call it unfinished."""
    end = _START_TAG_END.match(markup, opening).end()
    following = markup[end:end + 1]
    if following == ">":
        return end + 1
    if following == "/":
        return end + 2 if markup.startswith("/>", end) else -1
    if following == "" or following in _INCOMPLETE_AFTER:
        return -1
    return end


def _end_tag(markup: str, opening: int, raw_text_tag: str | None) -> tuple[int, str | None]:
    """(end, tag name or None) of the end tag (or what stands for one) opening at `opening`;
    end is -1 when unfinished. In raw text (script, style) anything but its own end tag is
    text, given as the name ''."""
    close = markup.find(">", opening + 1)
    if close == -1:
        return -1, None
    match = _END_TAG.match(markup, opening)
    if match is None:
        if raw_text_tag is not None:
            return close + 1, ""
        name = _TAG_NAME.match(markup, opening + 2)
        if name is None:
            if markup.startswith("</>", opening):
                return opening + 3, None
            return close + 1, None  # a bogus comment, ended by the same '>'
        return markup.find(">", name.end()) + 1, name.group(1).lower()
    tag = match.group(1).lower()
    if raw_text_tag is not None and tag != raw_text_tag:
        return close + 1, ""
    return close + 1, tag


def _marked_section_end(markup: str, opening: int) -> int:
    """Where the marked section ('<![CDATA[ ... ]]>', '<![if ...]>') opening at `opening`
    ends, or -1 when unfinished. html.parser gives up on the whole document with an
    AssertionError at a section without a name or with a name it does not know; so does this
    (the caller records it), so the reading stays the same."""
    start = opening + 3
    if start == len(markup):
        return -1
    name = _DECLARATION_NAME.match(markup, start)
    if name is None:
        raise AssertionError(f"expected name token at {markup[opening:opening + 20]!r}")
    if name.end() == len(markup):
        return -1
    keyword = name.group().strip().lower()
    if keyword in ("temp", "cdata", "ignore", "include", "rcdata"):
        close = _MARKED_SECTION_CLOSE.search(markup, start)
    elif keyword in ("if", "else", "endif"):
        close = _MS_MARKED_SECTION_CLOSE.search(markup, start)
    else:
        raise AssertionError(f"unknown status keyword {keyword!r} in marked section")
    return -1 if close is None else close.end()


def _scan(markup: str, reader: _MarkupReader) -> None:
    """Hand `reader` the start tags (name, {attribute: value}), end tags and text chunks of
    `markup` in order, as html.parser (3.11, convert_charrefs) hands them to its handlers when
    fed the whole markup and closed. Comments, declarations and processing instructions give
    nothing; a construct left unfinished is text up to its next '>' (or '<')."""
    position, size = 0, len(markup)
    raw_text_tag: str | None = None  # inside script or style
    while position < size:
        if raw_text_tag is None:
            opening = markup.find("<", position)
            if opening == -1:
                opening = size
        else:
            found = _RAW_TEXT_END[raw_text_tag].search(markup, position)
            if found is None:
                return  # unclosed raw text: html.parser drops it
            opening = found.start()
        if position < opening:
            # raw text is never seen: the reader is inside an unseen element
            if raw_text_tag is None:
                reader.text(unescape(markup[position:opening]))
        position = opening
        if position == size:
            return
        if raw_text_tag is None:
            simple = _SIMPLE_TAG.match(markup, position)
            if simple is not None:  # '<p>', '</p>': no attributes, nothing to judge
                closing, tag = simple.groups()
                tag = tag.lower()
                if closing:
                    reader.end(tag)
                else:
                    reader.start(tag, {})
                    if tag in _RAW_TEXT_END:
                        raw_text_tag = tag
                position = simple.end()
                continue
        following = markup[position + 1:position + 2]
        if following in _ASCII_LETTERS and following:
            end = _start_tag_end(markup, position)
            if end != -1:
                name = _TAG_NAME.match(markup, position + 1)
                tag = name.group(1).lower()
                attributes: dict[str, str] = {}
                cursor = name.end()
                while cursor < end:
                    attribute = _ATTRIBUTE.match(markup, cursor)
                    if attribute is None:
                        break
                    key = attribute.group(1).lower()
                    if key in _NEEDED_ATTRIBUTES:
                        value = attribute.group(3) if attribute.group(2) else None
                        quote = value[:1] if value else ""
                        if quote in ("'", '"') and value[-1:] == quote:
                            value = value[1:-1]
                        attributes[key] = unescape(value) if value else ""
                    else:
                        attributes[key] = ""
                    cursor = attribute.end()
                rest = markup[cursor:end].strip()
                if rest == ">":
                    reader.start(tag, attributes)
                    if tag in _RAW_TEXT_END:
                        raw_text_tag = tag
                elif rest == "/>":
                    reader.start(tag, attributes)
                    reader.end(tag)
                else:
                    reader.text(markup[position:end])
                position = end
                continue
        elif following == "/":
            end, tag = _end_tag(markup, position, raw_text_tag)
            if end != -1:
                if tag:
                    reader.end(tag)
                    if raw_text_tag is not None:
                        raw_text_tag = None
                position = end
                continue
        elif markup.startswith("<!--", position):
            found = _COMMENT_CLOSE.search(markup, position + 4)
            if found is not None:
                position = found.end()
                continue
        elif markup.startswith("<![", position):
            end = _marked_section_end(markup, position)
            if end != -1:
                position = end
                continue
        elif following == "?" or following == "!":
            # a processing instruction, <!doctype ...> or a bogus comment: up to the next '>'
            doctype = markup[position:position + 9].lower() == "<!doctype"
            start = position + 9 if doctype else position + 2
            close = markup.find(">", start)
            if close != -1:
                position = close + 1
                continue
        elif position + 1 < size:
            reader.text("<")
            position += 1
            continue
        else:
            reader.text("<")
            return
        # unfinished: text up to the next '>' (or '<')
        close = markup.find(">", position + 1)
        if close == -1:
            close = markup.find("<", position + 1)
            end = position + 1 if close == -1 else close
        else:
            end = close + 1
        chunk = markup[position:end]
        reader.text(unescape(chunk) if raw_text_tag is None else chunk)
        position = end


class _MarkupReader:
    """The evidence a reader of the rendered page would not see: what `_scan` hands it, kept
    as visible text, hidden chunks, images and '#html:' features."""

    def __init__(self) -> None:
        root = _Element("#root", hidden=False, unseen=False, colour=None, background=None)
        self.stack: list[_Element] = [root]
        self.visible: list[str] = []
        self.features: dict[str, None] = {}
        self.images = 0
        self.hidden_chunks = 0
        self.anchor_href: str | None = None
        self.anchor_text: list[str] = []
        self.anchor_text_length = 0

    def start(self, tag: str, attributes: dict[str, str]) -> None:
        if not attributes and tag not in _MARKED_STARTS:
            # most tags: no evidence, and the element takes its parent's state as it stands
            parent = self.stack[-1]
            element = _Element(tag, parent.hidden, parent.unseen or tag in _UNSEEN_ELEMENTS,
                               parent.colour, parent.background)
            if len(self.stack) < MAX_OPEN_ELEMENTS:
                self.stack.append(element)
            else:
                self.stack[-1] = element
            return
        if tag in _EVIDENCE_ELEMENTS:
            self.features[_EVIDENCE_ELEMENTS[tag]] = None
        if tag == "img":
            self.images += 1
        elif tag == "input" and attributes.get("type", "").lower() == "password":
            self.features["#html:password_input"] = None
        elif tag == "a":
            self.close_anchor()
            self.anchor_href = attributes.get("href", "")
            for feature in _link_features(self.anchor_href):
                self.features[feature] = None
        if tag in _VOID_ELEMENTS:
            return
        parent = self.stack[-1]
        style = attributes.get("style", "")
        colour, background = _style_colours(style) if style else (None, None)
        colour = colour or attributes.get("color", "").lower() or parent.colour
        background = background or attributes.get("bgcolor", "").lower() or parent.background
        tiny_font = tag == "font" and attributes.get("size", "").strip() in ("0", "-2", "-3")
        hidden = parent.hidden or (style and _style_hides(style)) or tiny_font
        if colour and background and colour == background:
            hidden = True
        unseen = parent.unseen or tag in _UNSEEN_ELEMENTS
        element = _Element(tag, hidden, unseen, colour, background)
        if len(self.stack) < MAX_OPEN_ELEMENTS:
            self.stack.append(element)
        else:
            self.stack[-1] = element  # past the bound the innermost state is replaced, not stacked

    def end(self, tag: str) -> None:
        if tag == "a":
            self.close_anchor()
        stack = self.stack
        for depth in range(len(stack) - 1, 0, -1):
            if stack[depth].tag == tag:
                del stack[depth:]
                return

    def text(self, data: str) -> None:
        element = self.stack[-1]
        if element.unseen or not data.strip():
            return
        if element.hidden:
            self.hidden_chunks += 1
            return
        self.visible.append(data)
        if self.anchor_href is not None and self.anchor_text_length < MAX_ANCHOR_TEXT:
            self.anchor_text.append(data)
            self.anchor_text_length += len(data)

    def close_anchor(self) -> None:
        if self.anchor_href is None:
            return
        if _names_other_domain(self.anchor_text, self.anchor_href):
            self.features["#html:link_text_names_other_domain"] = None
        self.anchor_href = None
        self.anchor_text = []
        self.anchor_text_length = 0


def read_html(markup: str) -> HtmlEvidence:
    """The visible text of an HTML document and the '#html:' evidence in its markup."""
    bounded = _bounded_markup(markup)
    native = _native is not None and native_allowed()
    read = _native.read(bounded, _NATIVE_HELPERS) if native else None
    if read is not None:  # the C scanner and reader took the whole document
        visible, features, images, hidden_chunks = read
    else:  # not compiled, switched off, or a construct only `_scan` judges
        parser = _MarkupReader()
        _scan(bounded, parser)
        parser.close_anchor()
        visible, features = parser.visible, parser.features
        images, hidden_chunks = parser.images, parser.hidden_chunks
    features = list(features)
    if images:
        features.append(f"#html:images:{count_bucket(images)}")
    if hidden_chunks:
        features.append("#html:hidden_text")
    return HtmlEvidence(text=" ".join(" ".join(visible).split()), features=features)


# What _native.read asks of this module (its definitions of the reader's judgements).
_NATIVE_HELPERS = (
    unescape, _EVIDENCE_ELEMENTS, _VOID_ELEMENTS, _UNSEEN_ELEMENTS, _link_features,
    _names_other_domain, _style_colours, _style_hides, MAX_OPEN_ELEMENTS, MAX_ANCHOR_TEXT,
)
