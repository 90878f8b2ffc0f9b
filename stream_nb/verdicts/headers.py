"""The verdict as mail headers, and a message with them.

    X-Spam-Flag: YES                       (spam only, as SpamAssassin writes it)
    X-Spam-Score: 3.214                    (the published score: log-odds, per sqrt(feature) under
                                            score_scale "sqrt_features"; what an operator thresholds)
    X-Spam-Status: Yes, score=3.214 verdict=spam clues="viagra":1.520,"free money":0.981

Status is Yes when the verdict (the band's, else the most probable class) is the positive class,
Unsure inside the band, No otherwise. Headers of these names already in a message are taken out
before ours go in: a sender could otherwise write "X-Spam-Status: No" itself, and a rule that
reads the first such header would believe it. The message is otherwise returned byte for byte:
its line ending, its "From " line, its body untouched; ours go at the end of its header block.
"""

from __future__ import annotations

import re

VERDICT_HEADERS = ("X-Spam-Flag", "X-Spam-Score", "X-Spam-Status")
FOLD_AT = 78  # RFC 5322's recommended line length; longer header lines are folded

_FIELD_NAME = re.compile(rb"^([!-9;-~]+)[ \t]*:")
_PLAIN_CLUE = re.compile(r"[!#-+\--9;-\[\]-~]+")  # printable ASCII but for space, '"', ',', ':' and '\'
CLUE_CHARACTERS = 64  # a clue's name is cut to this many characters in a header ("..." marks a cut)
# a separator (a space or none) and a piece up to the next space or after the next comma; a
# quoted clue is never split
_FOLDABLE = re.compile(r'( ?)((?:"(?:[^"\\]|\\.)*"|[^ ,"])+,?|,)')


def status_of(verdict: str | None, label, positive) -> str:
    """"Yes", "No" or "Unsure" of a prediction: `verdict` the band's (None: no band), `label`
    the most probable class (None: the model knows no class), `positive` the spam class."""
    decided = verdict if verdict is not None else (None if label is None else str(label))
    if decided == "unsure":
        return "Unsure"
    return "Yes" if positive is not None and decided == str(positive) else "No"


def clue_text(name: str) -> str:
    """A feature name as it can stand in a header: quoted, with any character outside printable
    ASCII written as a backslash escape (a feature may be any Unicode text, and header bytes are
    ASCII); a name of plain characters stands bare. Cut to CLUE_CHARACTERS (a header line stays
    within RFC 5322's 998)."""
    if len(name) > CLUE_CHARACTERS:
        name = name[:CLUE_CHARACTERS] + "..."
    if _PLAIN_CLUE.fullmatch(name):
        return name
    escaped = name.encode("unicode_escape").decode("ascii").replace('"', '\\"')
    return f'"{escaped}"'


def verdict_headers(status: str, score: float | None, verdict: str | None,
                    clues: list[tuple[str, float]] | None) -> list[tuple[str, str]]:
    """The (name, value) headers of one verdict, in VERDICT_HEADERS' order."""
    headers = []
    if status == "Yes":
        headers.append(("X-Spam-Flag", "YES"))
    if score is not None:
        headers.append(("X-Spam-Score", f"{score:.3f}"))
    parts = [f"{status},"]
    if score is not None:
        parts.append(f"score={score:.3f}")
    if verdict is not None:
        parts.append(f"verdict={clue_text(verdict)}")
    if clues:
        parts.append("clues=" + ",".join(f"{clue_text(name)}:{weight:.3f}" for name, weight in clues))
    headers.append(("X-Spam-Status", " ".join(parts)))
    return headers


def folded(name: str, value: str, newline: bytes) -> bytes:
    """`name: value` as header lines of at most FOLD_AT characters where the value has a space or
    a comma to fold at (RFC 5322 folding: a continuation line starts with white space, which
    unfolding keeps; a reader of the clues splits them at commas and strips)."""
    lines, line = [], f"{name}:"
    for at, match in enumerate(_FOLDABLE.finditer(value)):
        separator, piece = (" " if at == 0 else match.group(1)), match.group(2)
        if len(line) + len(separator) + len(piece) > FOLD_AT and at:
            lines.append(line)
            line = "\t" + piece
        else:
            line += separator + piece
    lines.append(line)
    return newline.join(part.encode("ascii") for part in lines) + newline


def _header_end(message: bytes) -> tuple[int, bytes]:
    """(offset of the blank line that ends the header block, or len(message) when there is none;
    the message's line ending)."""
    first = message.find(b"\n")
    newline = b"\r\n" if first > 0 and message[first - 1:first] == b"\r" else b"\n"
    if message.startswith(newline):
        return 0, newline
    end = message.find(newline + newline)
    return (len(message) if end < 0 else end + len(newline)), newline


def with_verdict_headers(message: bytes, headers: list[tuple[str, str]]) -> bytes:
    """`message` with the VERDICT_HEADERS fields it carried taken out (each with its folded
    lines) and `headers` added at the end of its header block."""
    end, newline = _header_end(message)
    head, rest = message[:end], message[end:]
    kept, dropping = [], False
    names = {name.lower().encode() for name in VERDICT_HEADERS}
    for line in head.splitlines(keepends=True):
        if line[:1] in (b" ", b"\t"):  # a folded line belongs to the field above it
            if not dropping:
                kept.append(line)
            continue
        field = _FIELD_NAME.match(line)
        dropping = field is not None and field.group(1).lower() in names
        if not dropping:
            kept.append(line)
    if kept and not kept[-1].endswith(b"\n"):  # a message that is all header, with no last newline
        kept.append(newline)
    ours = b"".join(folded(name, value, newline) for name, value in headers)
    if not rest:  # no blank line: the header block ends the message, and one ends it now
        return b"".join(kept) + ours + newline
    return b"".join(kept) + ours + rest
