"""URL, e-mail address and number spans of a text, found in time linear in its length.

The spans are defined by one regular expression, `SpecialSpans.definition`:

    (?P<url>URL) | (?P<email>EMAIL) | (?P<num>NUMBER)      (the options' parts only)

    URL    = (?: \\b[a-zA-Z][a-zA-Z0-9+.\\-]*(?=://):// | \\b[wW]{3}\\. ) [^\\s<>"']*[^\\s<>"'.,;:!?)\\]}]
    EMAIL  = (?<![\\w.+\\-]) [\\w.+\\-]+ @ [\\w\\-]+ (?:\\.[\\w\\-]+)+
    NUMBER = \\b\\d+(?:[.,:]\\d+)*\\b

and the spans of a text are ``definition.finditer(text)``'s. Searched as written, that is
quadratic on hostile text: at every word boundary inside a long run of scheme characters
(``"a." * n + "~://"``, ``"a-" * n + "@"``) the scheme part runs to the end of the run before it
fails, so a 64 KB message took 8.75 s. `SpecialSpans.find` gives the same spans with every
character read a bounded number of times:

- A scheme's ``[a-zA-Z0-9+.\\-]*(?=://)`` can only end where the *maximal* run of scheme
  characters around its start ends (the next character is then not a scheme character, and
  ":" is not one), so every scheme URL belongs to a run of scheme characters followed by
  "://". Each such run is found once (`_SCHEME_RUN`, which starts only at a run's first
  character); its URL starts at the first letter after a word boundary that no earlier match
  covers, and ends where the run's URL body ends (the same for every start in the run).
- The rest of the pattern (a ``www.`` URL, an e-mail address, a number) is linear as written:
  each attempt either starts a run (of ``[\\w.+\\-]`` for an e-mail, of digits for a number) that
  no other attempt starts, or reads a constant number of characters before it fails.
- The two are merged by position, the scheme URL first at a tie, as the alternation orders them.

Neither a URL nor an e-mail address crosses white space, and white space looks the same as a
text's ends to every look-around of the patterns, so without numbers only the white-space-free
segments that hold an anchor ("://", "www." in any case, "@") are searched.
"""

from __future__ import annotations

import re

__all__ = ["EMAIL_PATTERN", "NUMBER_PATTERN", "URL_PATTERN", "SpecialSpans"]

_SCHEME_CHARS = r"a-zA-Z0-9+.\-"
_URL_BODY = r"[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]"  # trailing sentence punctuation is not part of it
# Explicit letter cases instead of re.IGNORECASE, which made the scan about 1.8x slower.
_WWW_URL_PATTERN = r"\b[wW]{3}\." + _URL_BODY
URL_PATTERN = rf"(?:\b[a-zA-Z][{_SCHEME_CHARS}]*(?=://)://|\b[wW]{{3}}\.){_URL_BODY}"
# The look-behind stops the scan from retrying inside a word (same matches, about 2x faster).
EMAIL_PATTERN = r"(?<![\w.+\-])[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+"
# A whole number token, with decimal/thousands/time separators: 42, 3.14, 1,000, 10:30 (not 2nd).
NUMBER_PATTERN = r"\b\d+(?:[.,:]\d+)*\b"

# The same languages as EMAIL_PATTERN and NUMBER_PATTERN, without backtracking: possessive runs
# (a run of domain characters can only end before "." or the end, a number only where a word
# boundary follows, or else before its last separator). Same matches, and the regex engine keeps
# no backtracking state per repeat, which grew out of the caches (3.6x slower per character).
_EMAIL_LINEAR = r"(?<![\w.+\-])[\w.+\-]++@[\w\-]++(?:\.[\w\-]++)++"
_NUMBER_LINEAR = r"\b\d++(?:[.,:]\d++(?=[.,:]\d|\b))*+\b"
_SCHEME_RUN = re.compile(rf"(?<![{_SCHEME_CHARS}])[{_SCHEME_CHARS}]+(?=://)")
_SCHEME_START = re.compile(r"\b[a-zA-Z]")
_URL_BODY_RUN = re.compile(r"[^\s<>\"']*")
_URL_TRAILING = ".,;:!?)]}"
_NON_SPACE_RUN = re.compile(r"\S*")
_MIXED_CASE_WWW = re.compile(r"[wW]{3}\.")

WALK_BACK = 40  # characters looked at one by one before a segment's start is looked for in C
ANCHORED_FROM = 200  # characters: shorter texts are searched whole (as fast, no set-up)


class SpecialSpans:
    """The URL, e-mail and number spans of texts, for one choice of the three kinds."""

    def __init__(self, urls: bool, emails: bool, numbers: bool) -> None:
        if not (urls or emails or numbers):
            raise ValueError("SpecialSpans needs at least one of urls, emails, numbers")
        parts = [(urls, "url", URL_PATTERN), (emails, "email", EMAIL_PATTERN), (numbers, "num", NUMBER_PATTERN)]
        self.definition = re.compile("|".join(f"(?P<{kind}>{pattern})" for wanted, kind, pattern in parts if wanted))
        self._schemes = urls
        others = [(urls, "url", _WWW_URL_PATTERN), (emails, "email", _EMAIL_LINEAR), (numbers, "num", _NUMBER_LINEAR)]
        wanted = [f"(?P<{kind}>{pattern})" for on, kind, pattern in others if on]
        self._others = re.compile("|".join(wanted))
        # numbers have no anchor: with them, the whole text is searched
        self._anchors = None if numbers else (("://", "www.") if urls else ()) + (("@",) if emails else ())
        self._mixed_case_www = urls

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of every span, in order: exactly ``definition.finditer(text)``'s,
        kind being the name of the group that matched ("url", "email" or "num")."""
        spans: list[tuple[int, int, str]] = []
        if self._anchors is None or len(text) < ANCHORED_FROM:
            self._find_between(text, 0, len(text), spans)
            return spans
        # each kind of anchor's next position (str.find runs in C), looked for again only once
        # the segments searched have passed it; -1: no more of that kind
        kinds: list[str | None] = list(self._anchors)
        if self._mixed_case_www and "W" in text:  # "WWW.", "wWw.": the pattern takes either case
            kinds.append(None)
        upcoming = [_next_anchor(text, kind, 0) for kind in kinds]
        reversed_text = None
        length = len(text)
        while True:
            at = -1
            for next_at in upcoming:
                if next_at >= 0 and (at < 0 or next_at < at):
                    at = next_at
            if at < 0:
                return spans
            # the white-space-free segment around the anchor: a few steps back find its start,
            # else the reversed text (made once) does, in C
            start, floor = at, max(at - WALK_BACK, 0)
            while start > floor and not text[start - 1].isspace():
                start -= 1
            if start == floor and start > 0 and not text[start - 1].isspace():
                if reversed_text is None:
                    reversed_text = text[::-1]
                start = at - (_NON_SPACE_RUN.match(reversed_text, length - at).end() - (length - at))  # type: ignore[union-attr]
            searched_to = _NON_SPACE_RUN.match(text, at).end()  # type: ignore[union-attr]
            self._find_between(text, start, searched_to, spans)
            for i, next_at in enumerate(upcoming):
                if 0 <= next_at < searched_to:
                    upcoming[i] = _next_anchor(text, kinds[i], searched_to)

    def _find_between(self, text: str, low: int, high: int, spans: list[tuple[int, int, str]]) -> None:
        """The definition's matches of ``finditer(text, low, high)``, appended to `spans`."""
        if not self._schemes or text.find("://", low, high) < 0:  # the rest of the pattern alone
            spans.extend([(match.start(), match.end(), match.lastgroup)  # type: ignore[misc]
                          for match in self._others.finditer(text, low, high)])
            return
        search_other = self._others.search
        runs = _SCHEME_RUN.finditer(text, low, high)
        run = next(runs, None)
        run_end = -1  # where the current run's URL ends, -1: not yet known; None: it has none
        body = _UrlBodies(text, high)

        def next_scheme_url(position: int) -> tuple[int, int] | None:
            """The first scheme URL that starts at or after `position`, as (start, end)."""
            nonlocal run, run_end
            while run is not None:
                colon = run.end()
                if colon > position and run_end is not None:
                    start = _SCHEME_START.search(text, max(run.start(), position), colon)
                    if start is not None:
                        if run_end == -1:
                            run_end = body.end(colon + 3)
                        if run_end is not None:
                            return start.start(), run_end
                run = next(runs, None)
                run_end = -1
            return None

        scheme_url = next_scheme_url(low)
        other = search_other(text, low, high)
        while scheme_url is not None or other is not None:
            if other is None or (scheme_url is not None and scheme_url[0] <= other.start()):
                start, position = scheme_url  # type: ignore[misc]
                spans.append((start, position, "url"))
            else:
                position = other.end()
                spans.append((other.start(), position, other.lastgroup))  # type: ignore[arg-type]
            if scheme_url is not None and scheme_url[0] < position:
                scheme_url = next_scheme_url(position)
            if other is not None and other.start() < position:
                other = search_other(text, position, high)


def _next_anchor(text: str, anchor: str | None, position: int) -> int:
    """Where `anchor` next stands in `text` from `position` on (None: "www." in any case), -1 if nowhere."""
    if anchor is not None:
        return text.find(anchor, position)
    found = _MIXED_CASE_WWW.search(text, position)
    return -1 if found is None else found.start()


class _UrlBodies:
    """Where ``[^\\s<>"']*[^\\s<>"'.,;:!?)\\]}]`` matched at a position of one text ends.

    Every start inside one run of body characters ends at the same place (the run's last
    character that is not trailing punctuation), so each run is read once, whatever the number
    of URLs that start in it (``"((a@b.c://" * n`` starts a scheme in every repeat)."""

    def __init__(self, text: str, high: int) -> None:
        self._text, self._high = text, high
        self._run = (0, -1, -1)  # (read from, run end, end of its last kept character)

    def end(self, start: int) -> int | None:
        """The end of the body that starts at `start`, None where there is none."""
        read_from, run_end, kept_end = self._run
        if not read_from <= start < run_end:
            text = self._text
            run_end = _URL_BODY_RUN.match(text, start, self._high).end()  # type: ignore[union-attr]
            kept_end = start + len(text[start:run_end].rstrip(_URL_TRAILING))
            self._run = (start, run_end, kept_end)
        return kept_end if kept_end > start else None
