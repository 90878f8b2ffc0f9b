"""Texts an attacker would send a featuriser: each family makes a text of about n characters.

Each family aims at one pattern or loop: long runs of the characters a URL scheme, an e-mail
address's local part or domain, or a number is made of, ended so that the match fails (or
succeeds) only at the far end; many anchors ("://", "www.", "@") in one segment; nested
brackets; no spaces at all; a subject line; texts the C featuriser hands to the Python path.
`dots_before_scheme` is the case of issue 22: quadratic in the patterns as first written.
"""

from __future__ import annotations

from typing import Callable


def _repeat(unit: str, n: int, tail: str = "", head: str = "") -> str:
    return head + unit * max(1, (n - len(head) - len(tail)) // len(unit)) + tail


FAMILIES: dict[str, Callable[[int], str]] = {
    "dots_before_scheme": lambda n: _repeat("a.", n, "~://"),
    "hyphens_before_at": lambda n: _repeat("a-", n, "@"),
    "pluses_before_at": lambda n: _repeat("+a", n, "@"),
    "scheme_chars_then_at": lambda n: _repeat("a+", n, "://") + "@b" * 50,
    "one_long_word": lambda n: _repeat("a", n),
    "one_long_word_then_scheme": lambda n: _repeat("a", n, "://"),
    "one_long_number": lambda n: _repeat("1", n, "a"),
    "dotted_number": lambda n: _repeat("1.", n, "a"),
    "schemes_only": lambda n: _repeat("://", n),
    "short_schemes": lambda n: _repeat("a://", n),
    "url_then_trailing_dots": lambda n: _repeat(".", n, head="http://"),
    "url_then_trailing_brackets": lambda n: _repeat(")", n, head="http://a"),
    "www_only": lambda n: _repeat("www.", n),
    "www_mixed_case": lambda n: _repeat("WwW.", n),
    "www_inside_words": lambda n: _repeat("a.www.", n),
    "at_signs_only": lambda n: _repeat("@", n),
    "short_addresses": lambda n: _repeat("a@", n),
    "address_chain": lambda n: _repeat("a.b@c.d", n),
    "dots_after_at": lambda n: _repeat("a.", n, "!", head="x@"),
    "hyphens_after_at": lambda n: _repeat("a-", n, "!", head="x@"),
    "address_then_scheme": lambda n: _repeat("((a@b.c://", n),
    "every_anchor": lambda n: _repeat("a.b-c+d@e:/f", n, "://"),
    "colons": lambda n: _repeat("a:", n),
    "slashes": lambda n: _repeat("a//", n),
    "nested_brackets": lambda n: _repeat("(", n // 2) + _repeat(")", n // 2),
    "nested_mixed_brackets": lambda n: _repeat("([{<", n // 2) + _repeat(">}])", n // 2),
    "underscores": lambda n: _repeat("_1", n),
    "hyphen_runs": lambda n: _repeat("a-", n, "-"),
    "many_short_words": lambda n: _repeat("ab cd ", n),
    "one_word_many_times": lambda n: _repeat("spam ", n),
    "newlines": lambda n: _repeat("\n", n),
    "subject_line_of_dots": lambda n: "Subject: " + _repeat("a.", n // 2, "~://") + "\n" + _repeat("a-", n // 2, "@"),
    "latin1_before_scheme": lambda n: _repeat("é.", n, "~://"),
    "beyond_latin1_before_scheme": lambda n: _repeat("ā.", n, "~://"),
    "upper_case_before_scheme": lambda n: _repeat("A.", n, "~://"),
}
