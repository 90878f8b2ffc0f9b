"""HTML part -> its visible text plus the evidence in its markup.

`read_html` runs the standard library's `html.parser` over one HTML body and returns the text a
reader would see (script, style and hidden text left out) and '#html:' features: link domains,
links whose visible text names another domain than their href, image count, hidden text
(display:none, visibility:hidden, tiny fonts, text coloured as its background), forms, password
inputs, scripts, iframes. Work is linear in the markup: the open-element stack is bounded, and
`_bounded_markup` first turns into text every '<' the parser would search far for its end
(CPython's `html.parser` rescans to the end of the input for each unclosed '<a', '<!--', '</'
or '<?': quadratic on hostile mail before 3.13.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

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
_DOMAIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
# A tag longer than this, or a comment longer than MAX_COMMENT_CHARS, is read as text.
MAX_TAG_CHARS = 4096
MAX_COMMENT_CHARS = 65536
MAX_LT_IN_TAG = 4


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


def host_of_url(url: str) -> str | None:
    """The lower-cased host of an absolute http(s)/ftp URL (or 'www.' link), else None."""
    url = url.strip().lower()
    for scheme in ("http://", "https://", "ftp://"):
        if url.startswith(scheme):
            url = url[len(scheme):]
            break
    else:
        if not url.startswith("www."):
            return None
    end = len(url)
    for stop in "/?#\\ ":
        position = url.find(stop)
        if position != -1 and position < end:
            end = position
    host = url[:end].rpartition("@")[2].partition(":")[0].strip(".")
    if not host or "." not in host or not set(host) <= _DOMAIN_CHARS:
        return None
    return host


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
        word = word.strip("<>()[]\"',;")
        host = host_of_url(word)
        if host is None and "." in word and word.lower().endswith((".com", ".net", ".org")):
            host = host_of_url("http://" + word)
        if host is not None:
            return host
    return None


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


@dataclass
class _Element:
    tag: str
    hidden: bool
    unseen: bool
    colour: str | None
    background: str | None


class _EvidenceParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        root = _Element("#root", hidden=False, unseen=False, colour=None, background=None)
        self.stack: list[_Element] = [root]
        self.visible: list[str] = []
        self.features: dict[str, None] = {}
        self.images = 0
        self.hidden_chunks = 0
        self.anchor_href: str | None = None
        self.anchor_text: list[str] = []
        self.anchor_text_length = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag in _EVIDENCE_ELEMENTS:
            self.features[_EVIDENCE_ELEMENTS[tag]] = None
        if tag == "img":
            self.images += 1
        elif tag == "input" and attributes.get("type", "").lower() == "password":
            self.features["#html:password_input"] = None
        elif tag == "a":
            self._close_anchor()
            self.anchor_href = attributes.get("href", "")
            host = host_of_url(self.anchor_href)
            if host is not None:
                self.features[f"#html:link:{registered_domain(host)}"] = None
                if all(label.isdigit() for label in host.split(".")):
                    self.features["#html:link_to_ip"] = None
        if tag in _VOID_ELEMENTS:
            return
        parent = self.stack[-1]
        style = attributes.get("style", "")
        colour, background = _style_colours(style)
        colour = colour or attributes.get("color", "").lower() or parent.colour
        background = background or attributes.get("bgcolor", "").lower() or parent.background
        tiny_font = tag == "font" and attributes.get("size", "").strip() in ("0", "-2", "-3")
        hidden = parent.hidden or _style_hides(style) or tiny_font
        if colour and background and colour == background:
            hidden = True
        unseen = parent.unseen or tag in _UNSEEN_ELEMENTS
        element = _Element(tag, hidden, unseen, colour, background)
        if len(self.stack) < MAX_OPEN_ELEMENTS:
            self.stack.append(element)
        else:
            self.stack[-1] = element  # past the bound the innermost state is replaced, not stacked

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._close_anchor()
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
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

    def _close_anchor(self) -> None:
        if self.anchor_href is None:
            return
        named = _domain_named_in(" ".join(self.anchor_text))
        target = host_of_url(self.anchor_href)
        if named and target and registered_domain(named) != registered_domain(target):
            self.features["#html:link_text_names_other_domain"] = None
        self.anchor_href = None
        self.anchor_text = []
        self.anchor_text_length = 0


def read_html(markup: str) -> HtmlEvidence:
    """The visible text of an HTML document and the '#html:' evidence in its markup."""
    parser = _EvidenceParser()
    parser.feed(_bounded_markup(markup))
    parser.close()
    parser._close_anchor()
    features = list(parser.features)
    if parser.images:
        features.append(f"#html:images:{count_bucket(parser.images)}")
    if parser.hidden_chunks:
        features.append("#html:hidden_text")
    return HtmlEvidence(text=" ".join(" ".join(parser.visible).split()), features=features)
