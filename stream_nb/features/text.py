"""Text -> token-count features for the naive Bayes models.

`TextFeaturizer` turns one message into a `dict[str, int]` of feature counts. Processing order:

1. strip accents (optional): NFKD decomposition, then combining marks are dropped;
2. lowercase (optional);
3. URLs, e-mail addresses and numbers are replaced by placeholder tokens (each optional);
4. the token pattern is applied (first ``max_tokens`` tokens only, if set);
5. stop words are dropped;
6. word n-grams (joined by a single space) and character n-grams are formed and counted;
7. counts are clipped to 1 if ``binary``.

Steps 1, 2, 4 and 6 follow the order of River's ``BagOfWords``, so
`TextFeaturizer.river_compatible()` gives exactly River's output.

Synthetic feature keys all start with ``#`` so that, with any token pattern that cannot match
``#`` (the default ones cannot), they never collide with a word:

- ``#url``, ``#email``, ``#num``: placeholders for a URL, an e-mail address, a number;
- ``#url:<domain>``: the lower-cased domain of a URL without a leading ``www.``, counted once per
  URL (``url_domains=True``);
- ``#c:<chars>``: a character n-gram of a word padded with one space on each side
  (e.g. ``#c: fr``);
- ``#s:<feature>``: a feature of an e-mail's subject line (``subject_features=True``).

Placeholders are inserted as finished tokens (they are not lowercased nor matched against the
token pattern), so they survive any configuration.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable

import numpy as np
from river import base as river_base

from stream_nb.features.specials import SpecialSpans
from stream_nb.model.base import ColumnNames, PendingView, SparseBatch
from stream_nb.native import native_allowed, usable_cpus

try:  # the optional C extension (setup.py); without it the Python path below runs, same results
    from stream_nb.features import _native
except ImportError:
    _native = None


__all__ = [
    "CHAR_NGRAM_PREFIX",
    "DEFAULT_TOKEN_PATTERN",
    "EMAIL_TOKEN",
    "NUMBER_TOKEN",
    "RIVER_TOKEN_PATTERN",
    "SUBJECT_PREFIX",
    "TextFeaturizer",
    "URL_DOMAIN_PREFIX",
    "URL_TOKEN",
    "strip_accents",
    "transform_sparse_views",
]

DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
RIVER_TOKEN_PATTERN = r"(?u)\b\w[\w\-]+\b"

URL_TOKEN = "#url"
EMAIL_TOKEN = "#email"
NUMBER_TOKEN = "#num"
URL_DOMAIN_PREFIX = "#url:"
CHAR_NGRAM_PREFIX = "#c:"
SUBJECT_PREFIX = "#s:"
_PLACEHOLDERS = frozenset({URL_TOKEN, EMAIL_TOKEN, NUMBER_TOKEN})

# `\b\w\w+\b` and `\w{2,}` find exactly the same tokens (a leftmost-greedy `\w{2,}` match can only
# start at the first character of a run of word characters and always runs to its end), and the
# second is about 30% faster in CPython's `re`; it is used whenever the default is asked for.
# Likewise River's pattern without its leading `\b`: a scan can only try a start inside a word
# after the word's first character failed, and that happens only when no later character of the
# word is a word character either; 24% faster on SMS texts.
# And configs/spam.toml's words of any length plus currency signs: at a word character the
# leading `\b` always holds (the scan reaches it only after a non-word character, a currency
# sign or the start), and the trailing one after a greedy `\w+` too; 40% faster on SMS texts.
SPAM_TOKEN_PATTERN = r"(?u)\b\w+\b|[£$€]"
_EQUIVALENT_FASTER_PATTERNS = {
    DEFAULT_TOKEN_PATTERN: r"\w{2,}",
    r"\b\w\w+\b": r"\w{2,}",
    RIVER_TOKEN_PATTERN: r"\w[\w\-]+\b",
    SPAM_TOKEN_PATTERN: r"(?u)\w+|[£$€]",
}

# On ASCII text the two built-in patterns find the runs of word characters ([A-Za-z0-9_], plus
# "-" for River's) of length >= 2, River's with hyphens trimmed from both ends. bytes.translate
# and split find those runs in C, about 40% faster than the regex; other text takes the regex.
def _ascii_byte_table(keep: str) -> bytes:
    return bytes(code if chr(code) in keep else 0x20 for code in range(256))


_ASCII_WORD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
@dataclass(frozen=True)
class _AsciiSplitter:
    table: bytes  # word bytes to themselves, every other byte to a space
    trim_hyphens: bool  # strip "-" from both ends of each run
    min_length: int  # shorter runs are not tokens
    regex_if: str  # an ASCII character that is a token of its own (the split drops it): "" or one


_ASCII_SPLITTERS = {
    r"\w{2,}": _AsciiSplitter(_ascii_byte_table(_ASCII_WORD), False, 2, ""),
    r"\w[\w\-]+\b": _AsciiSplitter(_ascii_byte_table(_ASCII_WORD + "-"), True, 2, ""),
    r"(?u)\w+|[£$€]": _AsciiSplitter(_ascii_byte_table(_ASCII_WORD), False, 1, "$"),
}


def _token_finder(pattern: re.Pattern) -> Callable[[str], list[str]]:
    """`pattern.findall`, with the C-level split for ASCII text where the pattern allows it."""
    findall = pattern.findall
    splitter = _ASCII_SPLITTERS.get(pattern.pattern)
    if splitter is None:
        return findall
    table, trim_hyphens, min_length, regex_if = (splitter.table, splitter.trim_hyphens, splitter.min_length,
                                                 splitter.regex_if)

    def find_tokens(text: str) -> list[str]:
        if not text.isascii() or (regex_if and regex_if in text):
            return findall(text)
        chunks = text.encode("ascii").translate(table).decode("ascii").split()
        if trim_hyphens and "-" in text:
            chunks = [chunk.strip("-") for chunk in chunks]
        if min_length <= 1:
            return chunks
        return [chunk for chunk in chunks if len(chunk) >= min_length]

    return find_tokens


_OPTION_NAMES = (
    "lowercase",
    "strip_accents",
    "token_pattern",
    "ngram_range",
    "char_ngrams",
    "stop_words",
    "normalize_urls",
    "normalize_emails",
    "normalize_numbers",
    "url_domains",
    "max_tokens",
    "binary",
    "subject_features",
    "osb_window",
)


def strip_accents(text: str) -> str:
    """Return `text` in NFKD form with every combining mark removed ("café" -> "cafe")."""
    if text.isascii():  # NFKD leaves ASCII unchanged; skip the per-character pass
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    combining = unicodedata.combining
    return "".join([char for char in decomposed if not combining(char)])


def _url_domain(url: str) -> str | None:
    """Lower-cased host of `url` without userinfo, port, trailing dot or leading "www."."""
    scheme_end = url.find("://")
    rest = url[scheme_end + 3 :] if scheme_end >= 0 else url
    host = re.split(r"[/?#\\]", rest, maxsplit=1)[0]
    host = host.rpartition("@")[2].partition(":")[0].rstrip(".").lower()
    if host.startswith("www."):
        host = host[4:]
    return host or None


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _check_range(name: str, value: Any) -> tuple[int, int]:
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in value)
    ):
        raise ValueError(f"{name} must be a pair of integers (min_n, max_n), got {value!r}")
    low, high = value
    if not 1 <= low <= high:
        raise ValueError(f"{name} must satisfy 1 <= min_n <= max_n, got {value!r}")
    return (low, high)


# The native featuriser's character tables, over the 256 Latin-1 codes (texts stored one byte per
# character): its lowercase, and its class as the spam token pattern sees it.
_NATIVE_WORD, _NATIVE_SIGN, _NATIVE_FOREIGN = 1, 2, 4  # as CH_* in _native.c


@functools.cache
def _native_tables() -> tuple[bytes, bytes]:
    """(lowercase, classes) for _native.c, taken from str.lower and `re` themselves so that they
    agree with the Python path by construction. A code whose lowercase is not one Latin-1
    character on the same side of ASCII is foreign: texts holding one take the C wide path."""
    word = re.compile(r"(?u)\w")
    sign = re.compile(r"[£$€]")
    lower, classes = bytearray(256), bytearray(256)
    for code in range(256):
        low = chr(code).lower()
        if len(low) != 1 or ord(low) > 255 or (ord(low) < 128) != (code < 128):
            lower[code], classes[code] = code, _NATIVE_FOREIGN
            continue
        lower[code] = ord(low)
        # classes[] is read at lowercased characters (WORD, SIGN), at original ones (FOREIGN)
        if word.fullmatch(chr(code)):
            classes[code] |= _NATIVE_WORD
        elif sign.fullmatch(chr(code)):
            classes[code] |= _NATIVE_SIGN
    return bytes(lower), bytes(classes)


FINDALL_SPAN = 8  # characters per token under which findall + slice beats a bounded finditer


class TextFeaturizer(river_base.Transformer):
    """Turns a text into a dict of feature counts (words, word n-grams, character n-grams).

    Parameters
    ----------
    lowercase
        Lowercase the text before tokenising.
    strip_accents
        Decompose the text (NFKD) and drop combining marks before lowercasing, like River's
        ``BagOfWords(strip_accents=True)``.
    token_pattern
        Regular expression whose matches are the tokens. If it has one capturing group, the group
        is the token (the whole match when the group did not take part), as in River.
    ngram_range
        ``(min_n, max_n)``: word n-grams for every n in the range, joined with one space.
    char_ngrams
        ``None`` or ``(min_n, max_n)``: character n-grams of each word (after stop-word removal,
        placeholders excluded), the word padded with one space on each side, keyed
        ``#c:<chars>``. A padded word shorter than ``min_n`` yields itself once (as
        scikit-learn's ``char_wb`` analyser does).
    stop_words
        Tokens to drop (compared with tokens after lowercasing/accent stripping, before n-grams).
    normalize_urls, normalize_emails, normalize_numbers
        Replace URLs (``scheme://...`` or ``www....``), e-mail addresses, numbers by the tokens
        ``#url``, ``#email``, ``#num``.
    url_domains
        With ``normalize_urls``, also count ``#url:<domain>`` for each URL.
    max_tokens
        ``None`` or a positive int: only the first ``max_tokens`` tokens (placeholders included,
        stop words included) of a message are used, bounding the work on huge messages.
    binary
        Clip counts to 1 (presence features for Bernoulli naive Bayes).
    subject_features
        When a text starts with ``Subject:`` (any case), featurise its first line on its own
        and count each of its features twice: as itself and as ``#s:<feature>``; the rest of
        the text is featurised as usual (no n-gram spans the line break). Texts without a
        subject line are unaffected. ``max_tokens`` applies to the subject and the body apart.
    osb_window
        ``None`` or an int ``w >= 3``: orthogonal sparse bigrams (CRM114's OSB, rspamd's
        tokeniser) beside the n-grams: every pair of tokens ``t_i``, ``t_{i+d}`` with
        ``2 <= d < w``, keyed ``"t_i <k> t_{i+d}"`` where ``k = d - 1`` is the number of
        tokens skipped (pairs at distance 1 are the word bigrams of ``ngram_range``). A
        pair keeps its distance, so "click <1> here" and "click <2> here" are two features.
        Per token that is ``w - 2`` more features; tokens are taken after stop-word removal,
        placeholders included, within one line group as for n-grams (the subject apart).
    """

    def __init__(
        self,
        *,
        lowercase: bool = True,
        strip_accents: bool = False,
        token_pattern: str = DEFAULT_TOKEN_PATTERN,
        ngram_range: tuple[int, int] = (1, 1),
        char_ngrams: tuple[int, int] | None = None,
        stop_words: Iterable[str] | None = None,
        normalize_urls: bool = True,
        normalize_emails: bool = True,
        normalize_numbers: bool = False,
        url_domains: bool = True,
        max_tokens: int | None = None,
        binary: bool = False,
        subject_features: bool = False,
        osb_window: int | None = None,
    ) -> None:
        self.lowercase = _check_bool("lowercase", lowercase)
        self.strip_accents = _check_bool("strip_accents", strip_accents)
        self.normalize_urls = _check_bool("normalize_urls", normalize_urls)
        self.normalize_emails = _check_bool("normalize_emails", normalize_emails)
        self.normalize_numbers = _check_bool("normalize_numbers", normalize_numbers)
        self.url_domains = _check_bool("url_domains", url_domains)
        self.binary = _check_bool("binary", binary)
        self.subject_features = _check_bool("subject_features", subject_features)
        self.ngram_range = _check_range("ngram_range", ngram_range)
        self.char_ngrams = None if char_ngrams is None else _check_range("char_ngrams", char_ngrams)

        if not isinstance(token_pattern, str):
            raise ValueError(f"token_pattern must be a regex string, got {token_pattern!r}")
        try:
            compiled = re.compile(_EQUIVALENT_FASTER_PATTERNS.get(token_pattern, token_pattern))
        except re.error as error:
            raise ValueError(f"token_pattern {token_pattern!r} is not a valid regex: {error}") from None
        if compiled.groups > 1:
            raise ValueError(
                f"token_pattern may have at most one capturing group, {token_pattern!r} has "
                f"{compiled.groups}"
            )
        self.token_pattern = token_pattern
        self._pattern = compiled
        self._find_tokens = _token_finder(compiled)

        if stop_words is None:
            self.stop_words: frozenset[str] | None = None
        else:
            if isinstance(stop_words, (str, bytes)) or not isinstance(stop_words, Iterable):
                raise ValueError(
                    f"stop_words must be None or an iterable of words (not a single string), "
                    f"got {stop_words!r}"
                )
            words = list(stop_words)
            if not all(isinstance(word, str) for word in words):
                raise ValueError("stop_words must contain only strings")
            self.stop_words = frozenset(words) or None

        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be None or a positive integer, got {max_tokens!r}")
        self.max_tokens = max_tokens

        if osb_window is not None and (
            not isinstance(osb_window, int) or isinstance(osb_window, bool) or osb_window < 3
        ):
            raise ValueError(f"osb_window must be None or an integer >= 3, got {osb_window!r}")
        self.osb_window = osb_window

        if any(token == "" for token in self._tokenize("ab cd, ef-gh 12", None)):
            raise ValueError(f"token_pattern {token_pattern!r} matches the empty string")

        wanted = (normalize_urls, normalize_emails, normalize_numbers)
        self._specials = SpecialSpans(*wanted) if any(wanted) else None

        plain = (
            self.ngram_range == (1, 1)
            and self.char_ngrams is None
            and self.stop_words is None
            and self.max_tokens is None
            and compiled.groups == 0
            and not normalize_numbers
            and not subject_features
            and osb_window is None
        )
        self._featurize: Callable[[str], dict[str, int]] = (
            self._build_plain_featurizer() if plain else self._featurize_general
        )
        self._feature_list: Callable[[str], list[str]] = (
            self._build_plain_feature_list() if plain else self._build_general_feature_list()
        )
        self._native_plan = self._build_native_plan()
        # the C featuriser's copy of one vocabulary's names (made at first use; see _native.c)
        self._name_index = None

    # ----------------------------------------------------------------------------------------
    # Public API

    @classmethod
    def river_compatible(cls) -> TextFeaturizer:
        """The configuration equal to River's ``BagOfWords()`` with its default options."""
        return cls(
            token_pattern=RIVER_TOKEN_PATTERN,
            strip_accents=True,
            normalize_urls=False,
            normalize_emails=False,
        )

    def transform_one(self, text: str) -> dict[str, int]:
        """Feature counts of one text; ``{}`` for a text without tokens."""
        if not isinstance(text, str):
            raise TypeError(f"TextFeaturizer expects a str, got {type(text).__name__}")
        return self._featurize(text)

    __call__ = transform_one

    def transform_many(self, texts: Iterable[str]) -> list[dict[str, int]]:
        """Feature counts of each text, in order."""
        featurize = self._featurize
        results = []
        append = results.append
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"TextFeaturizer expects a str, got {type(text).__name__}")
            append(featurize(text))
        return results

    def transform_sparse(self, texts: Iterable[str], vocabulary=None, number_unknown: bool = True,
                         extra_names: Sequence[Sequence[str]] | None = None) -> SparseBatch:
        """The features of every text as one SparseBatch, for the models' batch methods.

        Names come in token order with repeats kept (the model adds them up), so no dict is
        built per message; the model's answers equal those for `transform_many(texts)` exactly.

        `extra_names`, one list or tuple of str per text (a mail's '#...' evidence), puts those
        names after the text's own: event i is feature_list(text_i) + extra_names[i], so a name
        in both counts twice, and the batch is `distinct` only when the featuriser is binary and
        no text's extra names meet its own (they are taken to be distinct among themselves).

        With the C extension and a configuration it takes, the names are made in C (the same
        names: see `_native_plan`); given the model's exact `vocabulary` too, their columns are
        looked up as they are made and remembered in the batch (`SparseBatch.columns_in`), and
        the names not in it numbered (`SparseBatch.unknown_in`) unless `number_unknown` is
        False (a batch that only predicts never adds them). The look-ups go to a C index of the
        vocabulary's names that this featuriser keeps in step with it, and the batch holds its
        names as columns (`ColumnNames`): a str is made only for a name the vocabulary lacks, and
        only when it is read (`NewNames`), as a new name that is learned is.
        """
        texts, extra_names = _batch_inputs(texts, extra_names)
        if self._native_plan is not None:
            view = self._native_view(vocabulary, number_unknown)
            return _native_batch(_native.featurize(texts, *view, extra_names), view, vocabulary)
        feature_list = self._feature_list
        names: list[str] = []
        extend = names.extend
        lengths: list[int] = []
        append = lengths.append
        distinct = self.binary
        for i, text in enumerate(texts):
            if type(text) is not str and not isinstance(text, str):
                raise TypeError(f"TextFeaturizer expects a str, got {type(text).__name__}")
            features = feature_list(text)
            extend(features)
            extra = () if extra_names is None else extra_names[i]
            if not isinstance(extra, (list, tuple)):
                raise TypeError(f"each text's extra names must be a list or tuple of str, got {type(extra).__name__}")
            if not extra:
                append(len(features))
                continue
            for name in extra:
                if not isinstance(name, str):
                    raise TypeError(f"an extra name must be a str, got {type(name).__name__}")
            if distinct and not set(extra).isdisjoint(features):
                distinct = False  # a token pattern that makes '#...' names: let the counts add up
            extend(extra)
            append(len(features) + len(extra))
        return SparseBatch(names, np.array(lengths, dtype=np.int64), distinct=distinct)

    def to_config(self) -> dict[str, Any]:
        """Every option as JSON-able values; `from_config` rebuilds an identical featuriser."""
        return {
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            "token_pattern": self.token_pattern,
            "ngram_range": list(self.ngram_range),
            "char_ngrams": None if self.char_ngrams is None else list(self.char_ngrams),
            "stop_words": None if self.stop_words is None else sorted(self.stop_words),
            "normalize_urls": self.normalize_urls,
            "normalize_emails": self.normalize_emails,
            "normalize_numbers": self.normalize_numbers,
            "url_domains": self.url_domains,
            "max_tokens": self.max_tokens,
            "binary": self.binary,
            # only when set, so the configurations (and checkpoint fingerprints) of before stay as they were
            **({"subject_features": True} if self.subject_features else {}),
            **({"osb_window": self.osb_window} if self.osb_window is not None else {}),
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TextFeaturizer:
        """Rebuild from `to_config` output. Unknown keys are an error; absent ones take defaults."""
        if not isinstance(config, Mapping):
            raise ValueError(f"TextFeaturizer config must be a mapping, got {type(config).__name__}")
        unknown = sorted(set(config) - set(_OPTION_NAMES))
        if unknown:
            raise ValueError(f"unknown TextFeaturizer config keys: {unknown}")
        options = dict(config)
        for name in ("ngram_range", "char_ngrams"):
            if isinstance(options.get(name), list):
                options[name] = tuple(options[name])
        return cls(**options)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TextFeaturizer):
            return NotImplemented
        return self.to_config() == other.to_config()

    __hash__ = None  # type: ignore[assignment]  # mutable attributes; equality is by options

    def __repr__(self) -> str:
        defaults = TextFeaturizer().to_config()
        # subject_features and osb_window are in the config only when set
        changed = {k: v for k, v in self.to_config().items() if defaults.get(k) != v}
        return f"TextFeaturizer({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    # ----------------------------------------------------------------------------------------
    # Implementation

    def _build_native_plan(self) -> tuple | None:
        """The C extension's settings (see _native.c), or None where it does not apply: not
        built, switched off (STREAM_NB_NATIVE=0), or options it does not implement. It implements
        the spam token pattern on lowercased text, with unigrams or unigrams and bigrams, OSB word
        pairs, character n-grams, subject features, URL and e-mail placeholders and URL domains
        (in a one-byte segment found and made in C, as `_native_spans` gives them; in a wider one
        by `_native_spans`), max_tokens and binary; no accent stripping, stop words or numbers.

        max_tokens, OSB's window and the character n-gram lengths go to C as Py_ssize_t (0 for
        no window or n-grams), capped at sys.maxsize: a segment has fewer tokens than that and a
        padded token fewer characters, so the cap changes no feature."""
        if _native is None or not native_allowed():  # read by each TextFeaturizer as it is made
            return None
        if (
            self.token_pattern != SPAM_TOKEN_PATTERN
            or not self.lowercase
            or self.strip_accents
            or self.stop_words is not None
            or self.normalize_numbers
            or self.ngram_range not in ((1, 1), (1, 2))
        ):
            return None
        lower, classes = _native_tables()
        osb_window = 0 if self.osb_window is None else min(self.osb_window, sys.maxsize)
        char_min, char_max = (0, 0) if self.char_ngrams is None else (min(n, sys.maxsize) for n in self.char_ngrams)
        return (lower, classes, self.ngram_range == (1, 2), self.binary, self.subject_features,
                -1 if self.max_tokens is None else min(self.max_tokens, sys.maxsize), self.normalize_emails,
                self.normalize_urls, self.url_domains, osb_window, char_min, char_max)

    def _native_view(self, vocabulary, number_unknown: bool) -> tuple:
        """`_native.featurize`'s arguments after the texts and before the extra names (a view of
        `featurize_views`): the plan, the callbacks and, for an exact `vocabulary`, the look-ups
        in it through this featuriser's C index of its names."""
        column_of, index, by_column = None, None, None
        if vocabulary is not None and not vocabulary.hashed:
            column_of, by_column = vocabulary.native_mapping(), vocabulary.by_column()
            index = self._name_index = self._name_index or _native.NameIndex()
        return (self._native_plan, self._native_spans, self._feature_list, column_of, number_unknown, index, by_column)

    def _special_spans(self, text: str) -> Iterator[tuple[int, int, str, str | None]]:
        """(start, end, placeholder, URL domain feature or None) of each special match of a
        lowercased text, in order: what `_tokens_with_placeholders` reads. Lazy, so a token cap
        reached early takes no domain beyond it."""
        return self._placeholders(text, self._specials.find(text))  # type: ignore[union-attr]

    def _native_spans(self, text: str) -> Iterator[tuple[int, int, str, str | None]]:
        """`_special_spans` as the C extension asks for them (a segment that holds an anchor),
        the spans found by `_native.special_spans` (held to SpecialSpans.find), which takes a
        str of one byte a character and no numbers (the native plan has none)."""
        found = _native.special_spans(text, self.normalize_urls, self.normalize_emails)
        return self._placeholders(text, self._specials.find(text) if found is None else found)  # type: ignore[union-attr]

    def _placeholders(self, text: str, spans) -> Iterator[tuple[int, int, str, str | None]]:
        for start, end, kind in spans:
            domain = None
            if kind == "url":
                placeholder = URL_TOKEN
                if self.url_domains:
                    host = _url_domain(text[start:end])
                    domain = URL_DOMAIN_PREFIX + host if host else None
            else:
                placeholder = EMAIL_TOKEN if kind == "email" else NUMBER_TOKEN
            yield start, end, placeholder, domain

    def _normalize(self, text: str) -> str:
        if self.strip_accents:
            text = strip_accents(text)
        if self.lowercase:
            text = text.lower()
        return text

    def _may_contain_special(self, text: str) -> bool:
        """Cheap test that is False only if the special pattern cannot match `text`."""
        if self.normalize_numbers:
            return True
        if self.normalize_emails and "@" in text:
            return True
        if self.normalize_urls:
            if "://" in text:
                return True
            lowered = text if self.lowercase else text.lower()
            return "www." in lowered
        return False

    def _tokenize(self, text: str, limit: int | None) -> list[str]:
        """Tokens of `text` by the token pattern, at most `limit` of them."""
        pattern = self._pattern
        if pattern.groups == 0:
            # findall is C; a token takes at least one character, so a text of at most
            # FINDALL_SPAN * limit characters costs findall little more than the limit needs
            if limit is None:
                return self._find_tokens(text)
            if len(text) <= FINDALL_SPAN * limit:
                tokens = self._find_tokens(text)
                return tokens if len(tokens) <= limit else tokens[:limit]
            return [match.group() for match in islice(pattern.finditer(text), limit)]
        matches = pattern.finditer(text)
        if limit is not None:
            matches = islice(matches, limit)
        return [match[1] if match.lastindex else match.group() for match in matches]

    def _tokens_with_placeholders(self, text: str) -> tuple[list[str], list[str]]:
        """Tokens with URLs/e-mails/numbers replaced by placeholders, and the URL domain keys.

        The text between two special matches is tokenised on its own, so a token never spans a
        URL, e-mail address or number.
        """
        limit = self.max_tokens
        tokens: list[str] = []
        domains: list[str] = []
        position = 0
        for start, end, placeholder, domain in self._special_spans(text):
            if start > position:
                remaining = None if limit is None else limit - len(tokens)
                tokens.extend(self._tokenize(text[position:start], remaining))
            if limit is not None and len(tokens) >= limit:
                return tokens[:limit], domains
            tokens.append(placeholder)
            if domain is not None:
                domains.append(domain)
            position = end
        remaining = None if limit is None else limit - len(tokens)
        if remaining is None or remaining > 0:
            tokens.extend(self._tokenize(text[position:], remaining))
        return tokens, domains

    def _build_plain_featurizer(self) -> Callable[[str], dict[str, int]]:
        """Fast path for unigram counts without stop words, n-grams or a token cap: the plain
        token list, counted (a plain dict loop measured faster than Counter on SMS texts)."""
        feature_list = self._build_plain_feature_list()
        if self.binary:
            return lambda text: dict.fromkeys(feature_list(text), 1)

        def featurize_plain(text: str) -> dict[str, int]:
            counts: dict[str, int] = {}
            for token in feature_list(text):
                if token in counts:
                    counts[token] += 1
                else:
                    counts[token] = 1
            return counts

        return featurize_plain

    def _build_plain_feature_list(self) -> Callable[[str], list[str]]:
        """The plain path's tokens of one text, uncounted (deduplicated when binary).

        A closure over local variables, because attribute look-ups per message cost a measurable
        share (about 10%) of featurising an SMS-length text. Placeholders are only looked for
        when the text could hold one ('@', '://', 'www.').
        """
        do_strip_accents = self.strip_accents
        do_lowercase = self.lowercase
        find_tokens = self._find_tokens
        gate_emails = self.normalize_emails
        gate_urls = self.normalize_urls
        tokens_with_placeholders = self._tokens_with_placeholders
        binary = self.binary

        def plain_feature_list(text: str) -> list[str]:
            if do_strip_accents:
                text = strip_accents(text)
            if do_lowercase:
                text = text.lower()
            if (gate_emails and "@" in text) or (
                gate_urls
                and ("://" in text or "www." in (text if do_lowercase else text.lower()))
            ):
                tokens, domains = tokens_with_placeholders(text)
                tokens.extend(domains)
            else:
                tokens = find_tokens(text)
            return list(dict.fromkeys(tokens)) if binary else tokens

        return plain_feature_list

    def _build_general_feature_list(self) -> Callable[[str], list[str]]:
        """Every feature of one text in order, uncounted (deduplicated when binary): tokens, word
        n-grams, URL domains, character n-grams; with subject features, a leading "Subject:"
        line's features prefixed and then counted again with the body's. A closure over local
        variables (attribute look-ups and method calls per message cost about half the time on
        SMS texts), word bigrams (spam.toml's n-grams) joined in one map."""
        do_strip_accents = self.strip_accents
        do_lowercase = self.lowercase
        special = self._specials
        may_contain_special = self._may_contain_special
        tokens_with_placeholders = self._tokens_with_placeholders
        tokenize = self._tokenize
        limit = self.max_tokens
        stop_words = self.stop_words
        min_n, max_n = self.ngram_range
        char_ngrams = self._char_ngrams if self.char_ngrams is not None else None
        binary = self.binary
        subject_features = self.subject_features
        osb_distances = range(2, self.osb_window) if self.osb_window is not None else None
        join = " ".join

        def all_features_of(text: str) -> list[str]:
            if do_strip_accents:
                text = strip_accents(text)
            if do_lowercase:
                text = text.lower()
            domains = None
            if special is not None and may_contain_special(text):
                tokens, domains = tokens_with_placeholders(text)
            else:
                tokens = tokenize(text, limit)
            if stop_words is not None:
                tokens = [token for token in tokens if token not in stop_words]
            if min_n == 1 and max_n == 2:
                features = tokens + list(map(join, zip(tokens, islice(tokens, 1, None))))
            elif min_n == max_n == 1:
                features = list(tokens)
            else:
                features = []
                for n in range(min_n, max_n + 1):
                    if n == 1:
                        features.extend(tokens)
                    else:
                        features.extend(map(join, zip(*(islice(tokens, i, None) for i in range(n)))))
            if osb_distances is not None:
                for distance in osb_distances:
                    skip = f" <{distance - 1}> "
                    features.extend([a + skip + b for a, b in zip(tokens, islice(tokens, distance, None))])
            if domains:
                features.extend(domains)
            if char_ngrams is not None:
                features.extend(char_ngrams(tokens))
            return features

        def feature_list(text: str) -> list[str]:
            if subject_features and text[:8].lower() == "subject:":
                first_line, _, body = text.partition("\n")
                subject = all_features_of(first_line[8:])
                # deduplicated once, here: first appearances keep their order either way
                features = [SUBJECT_PREFIX + feature for feature in subject] + subject + all_features_of(body)
            else:
                features = all_features_of(text)
            return list(dict.fromkeys(features)) if binary else features

        return feature_list

    def _featurize_general(self, text: str) -> dict[str, int]:
        features = self._feature_list(text)
        if self.binary:
            return dict.fromkeys(features, 1)
        counts: dict[str, int] = {}
        for feature in features:
            if feature in counts:
                counts[feature] += 1
            else:
                counts[feature] = 1
        return counts

    def _char_ngrams(self, tokens: list[str]) -> list[str]:
        """Prefixed character n-grams of each space-padded word token."""
        min_n, max_n = self.char_ngrams  # type: ignore[misc]
        grams: list[str] = []
        for token in tokens:
            if token in _PLACEHOLDERS:
                continue
            padded = f" {token} "
            length = len(padded)
            if length < min_n:
                grams.append(CHAR_NGRAM_PREFIX + padded)
                continue
            for n in range(min_n, min(max_n, length) + 1):
                grams.extend(CHAR_NGRAM_PREFIX + padded[i : i + n] for i in range(length - n + 1))
        return grams


def _batch_inputs(texts: Iterable[str], extra_names) -> tuple[list, list | None]:
    """`transform_sparse`'s texts and extra names as lists, one entry of extra names per text."""
    texts = texts if type(texts) is list else list(texts)
    if extra_names is not None:
        extra_names = extra_names if type(extra_names) is list else list(extra_names)
        if len(extra_names) != len(texts):
            raise ValueError(f"extra_names has {len(extra_names)} entries for {len(texts)} texts")
    return texts, extra_names


def _native_batch(made: tuple, view: tuple, vocabulary) -> SparseBatch:
    """The SparseBatch of what `_native.featurize` returned for `view` (`_native_view`'s)."""
    names, lengths, columns, ranks, unknown, distinct = made
    number_unknown, by_column = view[4], view[6]
    if columns is not None:
        columns = np.frombuffer(columns, dtype=np.int64)
        ranks = None if ranks is None else np.frombuffer(ranks, dtype=np.int64)
    if names is None:  # only the names the vocabulary lacks were made
        names = ColumnNames(by_column, columns, ranks, unknown)
    batch = SparseBatch(names, np.frombuffer(lengths, dtype=np.int64), distinct=distinct)
    if columns is not None:  # (ColumnNames numbers the new names even when not asked to)
        batch.remember_columns(vocabulary, columns, ranks if number_unknown else None, unknown)
    return batch


def _native_reading(plan: tuple) -> tuple:
    """What a native plan says of reading a text's tokens: its tables, subject features,
    max_tokens, e-mail, URL and URL domain settings (the rest is what it makes of them)."""
    return plan[:2] + plan[4:9]


def transform_sparse_views(featurizers: Sequence[TextFeaturizer], texts: Iterable[str], vocabularies: Sequence,
                           number_unknown: bool = True,
                           extra_names: Sequence[Sequence[str]] | None = None,
                           pending: bool = False) -> list[SparseBatch | PendingView]:
    """Each featuriser's `transform_sparse(texts, vocabulary, number_unknown, extra_names)`, the
    same batches (every name, column, rank and length), in order, for several feature views of
    one batch: `vocabularies[v]` is featuriser v's model's vocabulary (or None).

    Where every featuriser takes the C path and their plans read tokens alike (see
    `_native_reading`), each text is lowered and tokenised once for them all
    (`_native.featurize_views`) and each view's names are made of those tokens; otherwise (no
    C extension, STREAM_NB_NATIVE=0, an option C lacks, tokens read differently, one view)
    each featuriser runs on its own.

    `pending`: the views the helper thread makes (see SPLIT_AT_TEXTS) may come back as
    `PendingView`s, as soon as this thread's are made, so that the caller uses those meanwhile;
    only for texts and extra names that are all exact strs, for which the helper's C call can
    fail only where this thread's could (out of memory), never on the events. Their
    vocabularies must not grow before their batches are taken (RuntimeError)."""
    featurizers, vocabularies = list(featurizers), list(vocabularies)
    if len(vocabularies) != len(featurizers):
        raise ValueError(f"{len(vocabularies)} vocabularies for {len(featurizers)} featurisers")
    texts, extra_names = _batch_inputs(texts, extra_names)
    plans = [featurizer._native_plan for featurizer in featurizers] if len(featurizers) > 1 else [None]
    if any(plan is None for plan in plans) or len({_native_reading(plan) for plan in plans}) > 1:
        return [featurizer.transform_sparse(texts, vocabulary=vocabulary, number_unknown=number_unknown,
                                            extra_names=extra_names)
                for featurizer, vocabulary in zip(featurizers, vocabularies)]
    views = [featurizer._native_view(vocabulary, number_unknown)
             for featurizer, vocabulary in zip(featurizers, vocabularies)]
    groups = _view_groups(plans) if len(texts) >= SPLIT_AT_TEXTS and _cpus() > 1 else None
    if groups is None:
        made = _native.featurize_views(texts, views, extra_names)
    else:  # the second group in the helper thread while this one makes the first
        mine, helpers = groups
        theirs = _helper().submit(_native.featurize_views, texts, [views[v] for v in helpers], extra_names)
        made = [None] * len(views)
        try:
            for v, one in zip(mine, _native.featurize_views(texts, [views[v] for v in mine], extra_names)):
                made[v] = one
        except BaseException:
            theirs.exception()  # (the helper's views are its until it is done)
            raise
        if pending and _exact_strs(texts, extra_names):
            batches: list = [None] * len(views)
            for v in mine:
                batches[v] = _native_batch(made[v], views[v], vocabularies[v])
            for place, v in enumerate(helpers):
                batches[v] = _pending_batch(theirs, place, views[v], vocabularies[v], len(texts))
            return batches
        for v, one in zip(helpers, theirs.result()):
            made[v] = one
    return [_native_batch(one, view, vocabulary) for one, view, vocabulary in zip(made, views, vocabularies)]


def _exact_strs(texts: list, extra_names: list | None) -> bool:
    """Whether every text and every extra name is an exact str (no subclass whose methods a
    view's Python fallback would call)."""
    return all(type(text) is str for text in texts) and (
        extra_names is None or all(type(name) is str for names in extra_names for name in names))


def _pending_batch(theirs, place: int, view: tuple, vocabulary, events: int) -> PendingView:
    """The batch of the helper's `place`-th view, once its call is done: the vocabulary's size
    is the one its look-ups were made at (a SparseBatch remembers it, to bring names learned
    later up to date)."""
    size = None if vocabulary is None else len(vocabulary)

    def make() -> SparseBatch:
        made = theirs.result()[place]
        if vocabulary is not None and len(vocabulary) != size:
            raise RuntimeError("a view's vocabulary grew before its batch, made meanwhile, was taken")
        return _native_batch(made, view, vocabulary)

    return PendingView(events, make)


# A batch of several views is featurised by two threads at once from this many texts on (on a
# machine of two CPUs or more): each thread reads the texts for its group of views, and the C
# loop runs without the GIL. With mail.toml's three views on raw mail, 0.30 s against 0.44 s a
# replay's featurising; each group tokenises the texts again (0.04 s more CPU).
SPLIT_AT_TEXTS = 64

_helper_lock = threading.Lock()
_helper_pool = None


def _helper():
    """The featurising helper thread (one, started when first needed)."""
    global _helper_pool
    with _helper_lock:
        if _helper_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _helper_pool = ThreadPoolExecutor(1, thread_name_prefix="featurise")
        return _helper_pool


def _forget_the_helper() -> None:
    """In a forked child: the helper thread was not copied, so its pool would take work and
    never do it; a new one starts when needed (and the lock, which another thread may have
    held at the fork, is new too)."""
    global _helper_pool, _helper_lock
    _helper_pool, _helper_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_the_helper)


@functools.lru_cache(maxsize=1)
def _cpus() -> int:
    return usable_cpus()


def _names_per_token(plan: tuple) -> float:
    """About how many names a view's plan makes of a token, the work that is its own beside
    the reading of the texts (1 for reading): a word, and with bigrams one more, with OSB
    pairs one for each place of the window, with character n-grams about four for each n."""
    bigrams, osb_window, char_min, char_max = plan[2], plan[9], plan[10], plan[11]
    made = 1.0 + bigrams + osb_window
    if char_max:
        made += 4.0 * (char_max - char_min + 1)
    return made


def _view_groups(plans: list[tuple]) -> tuple[list[int], list[int]] | None:
    """Two groups of the views (by place) whose work is about even, the larger first, or None
    for fewer than two views: each view, the most names a token first, to the group with less
    so far, a group costing a reading of the texts (1) besides its views' names (the longest
    processing time first rule)."""
    if len(plans) < 2:
        return None
    groups: tuple[list[int], list[int]] = ([], [])
    cost = [0.0, 0.0]
    for v in sorted(range(len(plans)), key=lambda v: -_names_per_token(plans[v])):
        g = 0 if cost[0] <= cost[1] else 1
        cost[g] += _names_per_token(plans[v]) + (0.0 if groups[g] else 1.0)
        groups[g].append(v)
    return sorted(groups[0]), sorted(groups[1])
