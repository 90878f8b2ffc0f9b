"""Text written by an attacker costs the featuriser time linear in its length, and the linear
span finder finds exactly the spans of the patterns' definition.

Time is compared within one process, between two sizes of the same text (16x apart), with a
generous margin: linear work grows about 16x, the quadratic patterns of before grew about 256x
(`test_the_growth_check_catches_the_quadratic_definition` shows the check would have caught them).
No figure depends on the machine's speed.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from stream_nb.config import load_config
from stream_nb.features import text as text_module
from stream_nb.features.specials import SpecialSpans
from stream_nb.features.text import TextFeaturizer

from hostile import FAMILIES
from native import require_extension
from timing import least_cpu_time, times_in_turns

REPO = Path(__file__).resolve().parents[1]
# characters; LARGE / SMALL = 16, both past the lengths where a path changes (a token cap of
# max_tokens = 5,000 switches the tokeniser from findall to a bounded scan at 40,000). Linear work
# does not grow exactly 16x: the regex engine's backtracking stack outgrows the caches on some
# families (25x measured, at 8x the length, on a run of ".a" after "@")
SMALL, LARGE = 48_000, 768_000
MOST_GROWTH = 64.0  # 4x the linear 16x; quadratic work would grow 256x


def least_time(work, text: str, repeats: int = 3) -> float:
    """The fastest of `repeats` runs, in CPU time of this thread (see tests/timing.py)."""
    return least_cpu_time(lambda: work(text), repeats)


def growth(work, make_text) -> float:
    """How much longer `work` takes on a text LARGE / SMALL times as long (tests/timing.py's
    times_in_turns: three runs of each, up to three times while over MOST_GROWTH). The large
    text's work is memory-bound (a character 4-gram view writes some 30 bytes a character):
    other processes contending for the memory and the shared cache slow it more than the small
    one's, which stays in the cache, so the sizes take turns (69.6x once in CI for mail.toml's
    chars view, measured back to back, where 20-37x is usual)."""
    small, large = make_text(SMALL), make_text(LARGE)
    work(small)  # warm: first-use set-up is not the text's cost
    fastest_small, fastest_large = times_in_turns(lambda: work(small), lambda: work(large), MOST_GROWTH, attempts=3,
                                                  turns=3)
    return fastest_large / max(fastest_small, 1e-6)


def featurizers() -> dict[str, TextFeaturizer]:
    spam = load_config(REPO / "configs" / "spam.toml", []).build_featurizer()
    spam_python = load_config(REPO / "configs" / "spam.toml", []).build_featurizer()
    spam_python._native_plan = None
    mail = load_config(REPO / "configs" / "mail.toml", [])
    return {
        "spam.toml (C)": spam,
        "spam.toml (Python)": spam_python,
        # mail.toml's views beside its [features]: character 4-grams within words, words alone
        **{f"mail.toml view {view} (C)": mail.build_featurizer(view) for view in mail.views},
        "defaults": TextFeaturizer(),
        "every option": TextFeaturizer(normalize_numbers=True, char_ngrams=(2, 4), ngram_range=(1, 3),
                                       stop_words=["a", "b"], strip_accents=True, subject_features=True,
                                       max_tokens=5_000),
        "River's tokens, cased": TextFeaturizer(token_pattern=r"(?u)\b\w[\w\-]+\b", lowercase=False),
    }


@pytest.mark.parametrize("name", list(featurizers()))
def test_featurising_hostile_text_grows_linearly_with_its_length(name):
    featurizer = featurizers()[name]
    if name == "spam.toml (C)" or name.startswith("mail.toml view"):
        require_extension(text_module._native, "stream_nb.features._native")
        assert featurizer._native_plan is not None
    work = lambda text: featurizer.transform_sparse([text])  # noqa: E731
    slow = {}
    for family, make_text in FAMILIES.items():
        grew = growth(work, make_text)
        if grew > MOST_GROWTH:
            slow[family] = round(grew, 1)
    assert slow == {}, f"{LARGE // SMALL}x the text took this many times as long: {slow}"


def test_the_growth_check_catches_the_quadratic_definition():
    definition = SpecialSpans(urls=True, emails=True, numbers=False).definition
    quadratic = lambda text: list(definition.finditer(text))  # noqa: E731
    make_text = FAMILIES["dots_before_scheme"]
    small, large = make_text(SMALL // 32), make_text(LARGE // 32)  # the definition is slow: smaller texts
    grew = least_time(quadratic, large, repeats=1) / least_time(quadratic, small, repeats=3)
    assert grew > MOST_GROWTH * 2
    linear = SpecialSpans(urls=True, emails=True, numbers=False).find
    assert linear(large) == quadratic(large) == []  # ("~://" ends no URL)


def spans_of_the_definition(finder: SpecialSpans, text: str) -> list[tuple[int, int, str]]:
    return [(match.start(), match.end(), match.lastgroup) for match in finder.definition.finditer(text)]


OPTION_SETS = [options for options in itertools.product([True, False], repeat=3) if any(options)]


@pytest.mark.parametrize("urls,emails,numbers", OPTION_SETS)
def test_spans_are_those_of_the_definition_on_hostile_and_generated_text(urls, emails, numbers):
    finder = SpecialSpans(urls=urls, emails=emails, numbers=numbers)
    texts = [make_text(n) for make_text in FAMILIES.values() for n in (10, 150, 700)]
    rng = random.Random(22)
    pieces = ["http://a.b/c?d=1", "WWW.x.org", "wWw.y.com.", "a.b@c-d.e.f", "@", "://", "www.", "x@y", "ftp://h",
              "(see https://q.r/s).", "<u@v.w>", "\u00a0", "\t", " ", "a", "Z", "1", "2.3", ",", ":", "/", ".", "-",
              "+", "_", "é", "\u0663", "'", ")", "!", "w", "~", "1,000", "10:30", "7.", "9a", "3_"]
    characters = "a1.:/@-+_wW ,)é!'<~"
    for _ in range(6_000):
        texts.append("".join(rng.choice(pieces) for _ in range(rng.randint(0, 90))))
        texts.append("".join(rng.choice(characters) for _ in range(rng.randint(0, 40))))
    found = 0
    for text in texts:
        expected = spans_of_the_definition(finder, text)
        assert finder.find(text) == expected, repr(text)
        found += len(expected)
    assert found > 5_000  # the generated texts do hold spans of every kind
    kinds = {kind for text in texts[-200:] for _, _, kind in finder.find(text)}
    assert kinds == {kind for on, kind in zip((urls, emails, numbers), ("url", "email", "num")) if on}
