"""The C featuriser (stream_nb.features._native) against the Python definition in text.py.

The extension is optional: where it is not built these tests skip (under CI=true, where
`pip install -e .` builds it with the machine's compiler, they fail instead). Equality is checked
name for name on both corpora and on generated texts that hit the edge cases, with the Python
fallback watched so that a text meant for C does not pass by going to Python: every exact str
does (texts beyond Latin-1 on the wide path), only a str subclass goes to the fallback.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stream_nb.checkpoint.digest import state_digest
from stream_nb.config import load_config
from stream_nb.features import text as text_module
from stream_nb.features.text import SPAM_TOKEN_PATTERN, TextFeaturizer
from stream_nb.model.vocabulary import Vocabulary

from corpora import load_enron_texts, load_sms_spam
from native import corpus_sample, replay_spam_toml, require_extension

REPO = Path(__file__).resolve().parents[1]


def _require_native() -> None:
    require_extension(text_module._native, "stream_nb.features._native")


def spam_featurizer() -> TextFeaturizer:
    _require_native()
    featurizer = load_config(REPO / "configs" / "spam.toml", []).build_featurizer()
    assert featurizer._native_plan is not None, "configs/spam.toml should take the native path"
    return featurizer


def native_lists(featurizer: TextFeaturizer, texts: list[str], fallback=None) -> list[list[str]]:
    """Each text's feature list as the extension makes it (`fallback`: what takes the texts it
    passes on; by default the Python feature list)."""
    names, lengths, *_ = text_module._native.featurize(
        texts, featurizer._native_plan, featurizer._native_spans, fallback or featurizer._feature_list, None)
    bounds = np.concatenate(([0], np.cumsum(np.frombuffer(lengths, dtype=np.int64)))).tolist()
    return [names[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


def assert_same_lists(featurizer: TextFeaturizer, texts: list[str], *, native_only: bool) -> int:
    """Native lists equal the Python ones; returns how many texts went to the Python fallback
    (none allowed with native_only)."""
    passed_on = []

    def fallback(text: str) -> list[str]:
        if native_only:
            raise AssertionError(f"went to the Python path: {text!r}")
        passed_on.append(text)
        return featurizer._feature_list(text)

    got = native_lists(featurizer, texts, fallback)
    for text, native in zip(texts, got):
        assert native == featurizer._feature_list(text), text
    return len(passed_on)


def one_byte_per_character(text: str) -> bool:
    return max(map(ord, text), default=0) < 256


def test_sms_corpus_every_message():
    featurizer = spam_featurizer()
    texts = [text for _, text in load_sms_spam()]
    # texts beyond Latin-1 too (the wide path)
    assert any(not one_byte_per_character(text) for text in texts)
    assert_same_lists(featurizer, texts, native_only=True)


def test_enron_corpus_every_message():
    featurizer = spam_featurizer()
    assert_same_lists(featurizer, corpus_sample(load_enron_texts()), native_only=True)


PIECES = [
    "word", "Word", "WORD", "a", "I", "u", "2", "42", "3.14", "1,000", "10:30", "_", "__init__", "snake_case",
    "x_1", "$", "$5", "5$", "$$", "£", "£10", "café", "Ünïcödé", "ß", "µ", "ÿ", "ª", "²", "½", "\xa0", "\x85",
    " ", "  ", "\t", "\n", "\r\n", "\n\n", ".", ",", "!", "?", "...", "-", "--", "'", '"', "(", ")", "<", ">",
    "[", "]", "{", "}", "/", "\\", ":", ";", "#", "#url", "#s:x", "@", "@@", "a@b", "://", "www.", "WWW.",
    "wWw.", "www", "http://example.com", "HTTP://Example.COM:8080/Path?q=1&r=2#frag", "https://a.b/c.",
    "ftp://files.example.org/x,y", "www.Foo.org", "WWW.BAR.CO.UK/x!", "(www.paren.com)", "<http://angle.net>",
    "http://user:pw@host.example.com:99/p", "http://", "www.", "john.doe+tag@mail.example.com",
    "Jane-Doe@Sub.Example.co.uk", "x@y", "first.last@host", "<me@there.org>", "a.b@c.d.e", "e-mail@x-y.z",
    "mailto:who@where.com", "see:http://x.y", "Subject:", "subject:", "SUBJECT:", "SuBjEcT:",
]


def generated_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    texts = ["", " ", "\n", "Subject:", "Subject:\n", "SUBJECT: Hi\nthere", "subject:no newline $5",
             "Subject: a www.x.com b\nbody http://y.org/z c@d.ef", "Subject:\nSubject: twice\nbody"]
    for _ in range(count):
        n = rng.randint(0, 40)
        parts = [rng.choice(PIECES) for _ in range(n)]
        joiners = [rng.choice(["", " ", " ", "\n", ",", "  "]) for _ in range(n)]
        text = "".join(part + joiner for part, joiner in zip(parts, joiners))
        if rng.random() < 0.3:
            text = rng.choice(["Subject:", "subject: ", "SUBJECT:", "Subject: re:"]) + text
        texts.append(text)
    return texts


FUZZ_OPTIONS = [
    {},  # configs/spam.toml (below)
    {"max_tokens": 1},
    {"max_tokens": 3},
    {"max_tokens": 7},
    {"binary": False},
    {"binary": False, "max_tokens": 4},
    {"ngram_range": (1, 1)},
    {"ngram_range": (1, 1), "max_tokens": None, "subject_features": False},  # the plain path
    {"subject_features": False},
    {"url_domains": False},
    {"normalize_urls": False},
    {"normalize_emails": False},
    {"normalize_urls": False, "normalize_emails": False},
    # OSB word pairs and character n-grams (the other options' combinations: test_pairs_and_grams_*)
    {"ngram_range": (1, 1), "osb_window": 5},
    {"ngram_range": (1, 1), "char_ngrams": (4, 4)},
    {"osb_window": 3, "char_ngrams": (1, 3), "binary": False, "max_tokens": 7},
    {"osb_window": 4, "char_ngrams": (2, 4), "normalize_emails": False, "url_domains": False},
]


@pytest.mark.parametrize("options", FUZZ_OPTIONS, ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()) or "spam.toml")
def test_generated_texts(options):
    base = spam_featurizer().to_config()
    featurizer = TextFeaturizer.from_config({**base, **options})
    assert featurizer._native_plan is not None
    texts = generated_texts(seed=8, count=3000)
    assert_same_lists(featurizer, texts, native_only=True)  # every one of them is Latin-1


@pytest.mark.parametrize("options", FUZZ_OPTIONS[:3] + [
    {"ngram_range": (1, 1), "osb_window": 5, "max_tokens": None},
    {"ngram_range": (1, 1), "char_ngrams": (4, 4), "max_tokens": None},
    {"osb_window": 10, "char_ngrams": (1, 20), "binary": False},
], ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()) or "spam.toml")
def test_hostile_texts_give_the_python_lists(options):
    from hostile import FAMILIES

    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), **options})
    texts = [make_text(n) for make_text in FAMILIES.values() for n in (7, 90, 400, 20_000)]
    assert any(not one_byte_per_character(text) for text in texts)  # "ā": beyond Latin-1, the wide path
    assert_same_lists(featurizer, texts, native_only=True)


@pytest.mark.parametrize("options", FUZZ_OPTIONS, ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()) or "spam.toml")
def test_an_empty_first_text_of_a_call(options):
    """An empty text (or an empty subject line) first in a call, before the scratch space holds a
    byte: no features, and the texts after it featurised as alone (the C code once searched
    a null pointer for '@' there, undefined behaviour that `make sanitize` reports)."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), **options})
    for texts in ([""], ["", "Mail a@b.co now"], ["", "", "www.x.org"], ["Subject:\nHello there"],
                  ["Subject:"], ["subject:", "x"]):
        got = native_lists(featurizer, texts, fallback=lambda text: pytest.fail(f"went to Python: {text!r}"))
        assert got == [featurizer._feature_list(text) for text in texts]
        for text, features in zip(texts, got):
            if text == "" or (text.lower() == "subject:" and featurizer.subject_features):
                assert features == []
    spam = spam_featurizer()
    assert native_lists(spam, ["", "Mail a@b.co now"]) == [[], ["mail", "#email", "now", "mail #email", "#email now"]]


def test_max_tokens_with_placeholders_in_play():
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), "max_tokens": 3})
    cases = [
        "a b http://x.com/1 c d",    # the URL is the third token
        "a b c http://x.com/1",      # the URL is beyond the cap: no #url, no domain
        "a http://x.com b@c.de d",   # placeholders count as tokens
        "http://a.com http://b.com http://c.com http://d.com",
        "Subject: one two three four\nfive six seven eight",  # subject and body capped apart
    ]
    assert_same_lists(featurizer, cases, native_only=True)
    assert featurizer._feature_list("a b c http://x.com/1") == ["a", "b", "c", "a b", "b c"]


def test_beyond_latin1_takes_the_wide_path_with_the_same_result():
    featurizer = spam_featurizer()
    texts = ["pay 10€ now", "it’s free", "naïve café £5", "日本語 text", "emoji 😀 http://x.y"]
    assert assert_same_lists(featurizer, texts, native_only=True) == 0


# Pieces beyond Latin-1 that the wide path turns on: the signs ('€' alone is one), letters whose
# lowercase is two characters ('İ') or depends on the neighbours (final sigma), title case, other
# scripts' letters, digits and punctuation, combining marks, astral characters, wide URLs and
# addresses (placeholders and domains from the Python spans), wide subject lines.
WIDE_PIECES = [
    "€", "10€", "€5", "＄", "﹩", "’", "“quoted”", "—", "…", "•", "İstanbul", "İ", "ΣΑΣ", "ΌΣΟΣ", "Σ", "aΣ",
    "ǅungla", "ǈ", "K", "Å", "日本語", "中文，标点。", "学", "２３", "٣٤", "Ⅻ", "x\u0300y", "\u0301", "😀", "𝔘𝔫𝔦",
    "\ud800", "ﬁ", "ŉ", "http://例子.测试/路径", "www.例子.com/x", "用户@例子.com", "a@b.c€", "Subject:日本",
    "SUBJECT: Ω", "Ｓubject:", "ſubject:",
]


def generated_wide_texts(seed: int, count: int) -> list[str]:
    """Texts of PIECES and WIDE_PIECES, each with at least one character beyond Latin-1."""
    rng = random.Random(seed)
    texts = []
    while len(texts) < count:
        n = rng.randint(1, 30)
        parts = [rng.choice(WIDE_PIECES if rng.random() < 0.4 else PIECES) for _ in range(n)]
        joiners = [rng.choice(["", " ", " ", "\n", ",", "\u3000"]) for _ in range(n)]
        text = "".join(part + joiner for part, joiner in zip(parts, joiners))
        if rng.random() < 0.3:
            text = rng.choice(["Subject:", "subject: ", "SUBJECT:", "Subject: Σ "]) + text
        if not one_byte_per_character(text):
            texts.append(text)
    return texts


@pytest.mark.parametrize("options", FUZZ_OPTIONS, ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()) or "spam.toml")
def test_wide_texts_give_the_python_lists(options):
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), **options})
    assert_same_lists(featurizer, generated_wide_texts(seed=9, count=600), native_only=True)


def test_every_code_point_is_lowered_and_classed_as_python_does():
    """Each code point in words, alone and doubled: its lowercase (str.lower) and whether re's
    \\w takes it, as the Python path reads them (the wide path's tokens)."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), "ngram_range": (1, 1),
                                             "char_ngrams": (2, 3)})
    texts = [" ".join(f"a{chr(c)}b {chr(c)}{chr(c)}" for c in range(low, min(low + 4096, 0x110000)))
             for low in range(0, 0x110000, 4096)]
    assert_same_lists(featurizer, corpus_sample(texts), native_only=True)


def test_str_subclass_and_wrong_types():
    featurizer = spam_featurizer()

    class Text(str):
        pass

    assert native_lists(featurizer, [Text("Hello World")]) == [["hello", "world", "hello world"]]
    for bad in (None, b"bytes", 3):
        with pytest.raises(TypeError, match=f"TextFeaturizer expects a str, got {type(bad).__name__}"):
            featurizer.transform_sparse(["fine", bad])
        python = TextFeaturizer.from_config(featurizer.to_config())
        python._native_plan = None
        with pytest.raises(TypeError, match=f"TextFeaturizer expects a str, got {type(bad).__name__}"):
            python.transform_sparse(["fine", bad])


def assert_look_ups_equal_the_vocabulary_s(batch, vocabulary, whole: bool = True) -> list[int]:
    """The batch's columns are `vocabulary.lookup`'s, and its new names are numbered by first
    appearance (whole=False: a prefix of a batch, whose list goes on with the rest's names).
    Returns the columns."""
    names = list(batch.names)
    columns = batch.columns_in(vocabulary)
    assert np.array_equal(columns, vocabulary.lookup(names))
    ranks, unknown = batch.unknown_in(vocabulary)
    absent = [name for name in names if name not in vocabulary.mapping()]
    numbered = int(ranks.max()) + 1 if len(ranks) else 0
    assert (unknown if whole else unknown[:numbered]) == list(dict.fromkeys(absent))
    assert [unknown[rank] for rank in ranks.tolist() if rank >= 0] == absent
    assert all((rank < 0) == (name in vocabulary.mapping()) for name, rank in zip(names, ranks.tolist()))
    return columns.tolist()


def test_look_ups_equal_the_vocabulary_s():
    featurizer = spam_featurizer()
    texts = [text for _, text in load_sms_spam()]
    vocabulary = Vocabulary()
    vocabulary.add(featurizer.transform_sparse(texts[:2000]).names)
    batch = featurizer.transform_sparse(texts[2000:3000], vocabulary=vocabulary)
    assert_look_ups_equal_the_vocabulary_s(batch, vocabulary)
    # a prefix keeps the numbering; another part numbers its own names by first appearance
    assert_look_ups_equal_the_vocabulary_s(batch[:10], vocabulary, whole=False)
    for part in (batch[10:], batch[400:600]):
        assert_look_ups_equal_the_vocabulary_s(part, vocabulary)
    # the vocabulary grows (learning between featurising and encoding): the batch catches up
    later_part = batch[500:]
    vocabulary.add(list(batch[:500].names)[::3] + ["a name never seen before"])
    assert later_part._catch_up(vocabulary) is not None
    assert_look_ups_equal_the_vocabulary_s(later_part, vocabulary)
    assert_look_ups_equal_the_vocabulary_s(batch, vocabulary)
    # it grows by names the batch does not hold: nothing moves, the numbering stands
    vocabulary.add(["a second name never seen", "a third"])
    assert batch[600:]._catch_up(vocabulary) is not None
    assert_look_ups_equal_the_vocabulary_s(batch[600:], vocabulary)
    assert_look_ups_equal_the_vocabulary_s(batch, vocabulary)
    # the events before a part learned (a batch's one-by-one start): the part's names still
    # unknown are a run of the numbering, kept as a slice of the featuriser's names
    fresh = featurizer.transform_sparse(texts[3000:3400], vocabulary=vocabulary)
    rest = fresh[3:]
    vocabulary.add(list(fresh[:3].names))
    assert rest._catch_up(vocabulary) is not None
    assert type(rest.unknown_in(vocabulary)[1]) is type(fresh.unknown_in(vocabulary)[1]) is not list
    assert_look_ups_equal_the_vocabulary_s(rest, vocabulary)
    # another vocabulary (an eviction renumbers into a new one): looked up afresh, no numbering
    other = Vocabulary.from_names(vocabulary.names()[::-1])
    assert np.array_equal(batch.columns_in(other), other.lookup(list(batch.names)))
    assert batch.unknown_in(other) is None


def test_look_ups_without_numbering_predict_the_same():
    """A batch that only predicts (the worker's unlabeled poll) skips numbering the new names:
    the same columns, no numbering remembered, the same probabilities and clues."""
    from stream_nb.model.explain import strongest_clues_many

    featurizer = spam_featurizer()
    rows = load_sms_spam()
    model = load_config(REPO / "configs" / "spam.toml", []).build_model()
    model.learn_many(featurizer.transform_sparse([text for _, text in rows[:2000]]), [label for label, _ in rows[:2000]])
    texts = [text for _, text in rows[2000:3000]]
    numbered = featurizer.transform_sparse(texts, vocabulary=model._vocabulary)
    plain = featurizer.transform_sparse(texts, vocabulary=model._vocabulary, number_unknown=False)
    assert plain.names == numbered.names
    assert np.array_equal(plain.columns_in(model._vocabulary), numbered.columns_in(model._vocabulary))
    assert (plain.columns_in(model._vocabulary) < 0).sum() > 1000  # names the model never learned
    assert plain.unknown_in(model._vocabulary) is None and numbered.unknown_in(model._vocabulary) is not None
    probabilities = model.predict_proba_many(plain)
    assert probabilities == model.predict_proba_many(numbered)
    assert strongest_clues_many(model, plain, probabilities, 3) == strongest_clues_many(model, numbered, probabilities, 3)


def _replay(texts_labels, native: bool, unlabeled_every: int | None, mode: str):
    contender, predictions = replay_spam_toml(texts_labels, mode, unlabeled_every, 700, python_featurizer=not native)
    model = contender.model
    return (predictions, contender.metrics.accuracy, contender.learned, state_digest(model.to_state()),
            model._vocabulary.names(), model._counts.tolist())


@pytest.mark.parametrize("mode", ["thick_threshold", "all"])
@pytest.mark.parametrize("unlabeled_every", [None, 5])
def test_replay_is_the_same_with_the_extension_off(unlabeled_every, mode):
    spam_featurizer()
    rows = load_sms_spam()
    on = _replay(rows, True, unlabeled_every, mode)
    off = _replay(rows, False, unlabeled_every, mode)
    assert on[2] and (on[0] or not unlabeled_every)  # events learned, predictions made
    for part_on, part_off in zip(on, off):  # vocabulary columns in the same order too
        assert part_on == part_off


def test_environment_switches_it_off():
    code = ("from stream_nb.features.text import TextFeaturizer, SPAM_TOKEN_PATTERN;"
            "print(TextFeaturizer(token_pattern=SPAM_TOKEN_PATTERN, ngram_range=(1, 2))._native_plan is None)")
    env = {**os.environ, "STREAM_NB_NATIVE": "0", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_the_tables_hash_is_seeded_anew_in_every_process():
    """Names written to fall in one run of a table's slots need the hash: it is not the same twice."""
    _require_native()
    names = [b"", b"a", b"free", b"#url:example.com", b"a name longer than sixteen bytes"]
    code = ("from stream_nb.features import _native;"
            f"print([_native._name_hash(name) for name in {names!r}])")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
            for _ in range(3)]
    assert len(set(runs)) == 3, runs
    here = [text_module._native._name_hash(name) for name in names]
    assert here == [text_module._native._name_hash(name) for name in names]  # one process, one seed
    assert len(set(here)) == len(names)


def test_options_it_does_not_implement_keep_the_python_path():
    _require_native()
    assert TextFeaturizer()._native_plan is None  # the default token pattern
    assert TextFeaturizer.river_compatible()._native_plan is None
    for options in ({"strip_accents": True}, {"lowercase": False}, {"stop_words": ["a"]},
                    {"normalize_numbers": True}, {"ngram_range": (1, 3)}, {"char_ngrams": (2, 3), "stop_words": ["a"]},
                    {"osb_window": 5, "normalize_numbers": True}):
        assert TextFeaturizer(token_pattern=SPAM_TOKEN_PATTERN, **options)._native_plan is None, options
    assert TextFeaturizer(token_pattern=SPAM_TOKEN_PATTERN, ngram_range=(1, 2))._native_plan is not None
    for options in ({"char_ngrams": (2, 3)}, {"osb_window": 5}, {"osb_window": 3, "char_ngrams": (4, 4)}):
        assert TextFeaturizer(token_pattern=SPAM_TOKEN_PATTERN, **options)._native_plan is not None, options


def _names_and_look_ups(featurizer: TextFeaturizer, texts: list[str], vocabulary: Vocabulary):
    """(names as a list, columns, ranks, unknown) of a batch made with the vocabulary."""
    batch = featurizer.transform_sparse(texts, vocabulary=vocabulary)
    ranks, unknown = batch.unknown_in(vocabulary)
    return list(batch.names), batch.columns_in(vocabulary).tolist(), ranks.tolist(), unknown


def test_the_index_follows_the_vocabulary_as_it_grows_and_is_replaced():
    """The C index of the vocabulary's names answers as the dict does after every change: names
    added between calls, a vocabulary replaced (eviction, a restore), one that lacks names the
    index held, and names stored beyond one byte a character (never made in C, so never indexed)."""
    featurizer = spam_featurizer()
    texts = [text for _, text in load_sms_spam()]
    python = TextFeaturizer.from_config(featurizer.to_config())
    python._native_plan = None

    def check(batch_texts: list[str], vocabulary: Vocabulary) -> int:
        batch = featurizer.transform_sparse(batch_texts, vocabulary=vocabulary)
        assert list(batch.names) == list(python.transform_sparse(batch_texts).names)
        return sum(column >= 0 for column in assert_look_ups_equal_the_vocabulary_s(batch, vocabulary))

    vocabulary = Vocabulary()
    assert check(texts[:300], vocabulary) == 0
    known = []
    for start in range(0, 1500, 300):  # grows between calls: the index takes the new names in
        vocabulary.add(python.transform_sparse(texts[start : start + 300]).names)
        known.append(check(texts[start + 150 : start + 450], vocabulary))
    assert min(known) > 1000 and featurizer._name_index.indexed() == len(vocabulary)
    # another vocabulary (as after an eviction): only its names, at its columns
    smaller = Vocabulary.from_names(vocabulary.names()[::7])
    assert check(texts[:600], smaller) > 0 and featurizer._name_index.indexed() == len(smaller)
    assert check(texts[:600], vocabulary) > 0  # and back
    # names beyond Latin-1 take columns too; the texts that make them go to the Python path
    wide = Vocabulary.from_names(["žluťoučký", "kůň", "a", "žluťoučký kůň", "kůň a"])
    assert check(["Žluťoučký kůň a kůň", "a kůň"], wide) == 7  # all but "a kůň"
    assert featurizer._name_index.indexed() == 1  # "a" only


def test_a_second_call_while_the_index_is_in_use_looks_names_up_in_the_dict():
    """The index serves one call at a time. A call made while another holds it (here from the
    special-span callback, as another thread could while a callback runs) gets the same answers
    from the vocabulary's dict. (The callback is asked for a wide segment's spans: the texts with
    links are made wide by a '€'.)"""
    featurizer = spam_featurizer()
    texts = [text for _, text in load_sms_spam()]
    vocabulary = Vocabulary()
    vocabulary.add(featurizer.transform_sparse(texts[:2000]).names)
    with_links = [text + " 10€" for text in texts[2000:] if "http" in text or "www." in text][:40]
    assert len(with_links) >= 20
    expected = _names_and_look_ups(featurizer, with_links, vocabulary)
    inner_results = []
    spans = featurizer._native_spans
    inner = texts[2000:2100]

    depth = [0]

    def spans_calling_again(segment):
        if depth[0] == 0:  # (not from the inner call's own links)
            depth[0] += 1
            try:
                inner_results.append(_names_and_look_ups(featurizer, inner, vocabulary))
            finally:
                depth[0] -= 1
        return spans(segment)

    featurizer._native_spans = spans_calling_again
    try:
        assert _names_and_look_ups(featurizer, with_links, vocabulary) == expected
    finally:
        featurizer._native_spans = spans
    assert len(inner_results) >= 20
    assert all(result == _names_and_look_ups(featurizer, inner, vocabulary) for result in inner_results)


def test_names_are_made_only_for_the_names_the_vocabulary_lacks():
    """With an exact vocabulary the batch holds its names as columns (ColumnNames): the list,
    its parts and single names are those of the Python path."""
    from stream_nb.model.base import ColumnNames

    featurizer = spam_featurizer()
    texts = [text for _, text in load_sms_spam()]
    vocabulary = Vocabulary()
    vocabulary.add(featurizer.transform_sparse(texts[:1000]).names)
    batch = featurizer.transform_sparse(texts[500:1500], vocabulary=vocabulary)
    plain = featurizer.transform_sparse(texts[500:1500])
    assert isinstance(batch.names, ColumnNames) and isinstance(plain.names, list)
    assert batch.names == plain.names and len(batch.names) == len(plain.names)
    assert [batch.names[i] for i in (0, 1, -1, len(plain.names) // 2)] == [plain.names[i] for i in (0, 1, -1, len(plain.names) // 2)]
    assert isinstance(batch[100:200].names, ColumnNames) and batch[100:200].names == plain[100:200].names


def test_the_new_names_read_as_the_list_they_stand_for():
    """The names a vocabulary lacks come back as NewNames, made into a str when first read:
    in rank order, sliced into views, compared with lists, names from the Python fallback
    (beyond Latin-1) kept as the str it made."""
    featurizer = spam_featurizer()
    vocabulary = Vocabulary.from_names(["hello", "world"])
    texts = ["Hello brave new world", "new world order", "Привет world, hello café", "brave café"]
    batch = featurizer.transform_sparse(texts, vocabulary=vocabulary)
    ranks, unknown = batch.unknown_in(vocabulary)
    absent = [name for text in texts for name in featurizer._feature_list(text) if name not in ("hello", "world")]
    expected = list(dict.fromkeys(absent))
    assert type(unknown).__name__ == "NewNames" and len(unknown) == len(expected) == 13
    assert list(unknown) == expected and unknown == expected and unknown != expected[1:]
    assert unknown[0] == "brave" and unknown[-1] == "brave café" and unknown[expected.index("привет")] == "привет"
    assert unknown[0] is unknown[0]  # made once
    view = unknown[2:6]
    assert type(view) is type(unknown) and view == expected[2:6] and view[-1] == expected[5] and len(view) == 4
    assert view[1:] == expected[3:6] and unknown[::-2] == expected[::-2] and unknown[5:2] == []
    assert [unknown[rank] for rank in ranks.tolist() if rank >= 0] == absent
    with pytest.raises(IndexError):
        unknown[13]
    with pytest.raises(IndexError):
        view[-5]
    with pytest.raises(TypeError):
        unknown["brave"]
    assert repr(unknown[:2]) == "NewNames(['brave', 'new'])"
    del unknown, batch  # a view keeps the names it shows
    assert list(view) == expected[2:6]


def new_names_of(texts: list[str], known: list[str]):
    """The NewNames of spam.toml's features of `texts` against a vocabulary of `known`."""
    vocabulary = Vocabulary.from_names(known)
    return spam_featurizer().transform_sparse(texts, vocabulary=vocabulary).unknown_in(vocabulary)[1]


def vocabulary_state(vocabulary: Vocabulary) -> tuple[dict, list]:
    return dict(vocabulary.mapping()), vocabulary.by_column()[:]


def test_new_names_are_added_to_a_vocabulary_in_c_as_add_new_adds_them():
    """Vocabulary.add_new_at through NewNames.add_to (C) leaves the vocabulary add_new leaves
    with the names at the positions, in their order: some names read already, some never, some
    beyond Latin-1 (the Python fallback's strs), from a view of the names too."""
    texts = [text for _, text in load_sms_spam()[:300]] + ["Привет world, hello café", "žluťoučký kůň"]
    unknown = new_names_of(texts, ["hello", "world"])
    rng = random.Random(5)
    for _ in range(20):
        names = unknown[rng.randrange(0, 50):] if rng.random() < 0.5 else unknown
        positions = np.array(rng.sample(range(len(names)), rng.randrange(0, min(len(names), 400))), dtype=np.int64)
        for position in rng.sample(range(len(names)), 30):
            names[position]  # read: its str is made and kept
        known = ["hello", "world", *rng.sample(list(unknown), 5)]
        fresh = [position for position in positions.tolist() if names[position] not in known]
        positions = np.array(fresh, dtype=np.int64)
        in_c, in_python = Vocabulary.from_names(known), Vocabulary.from_names(known)
        in_c.add_new_at(names, positions)
        in_python.add_new([names[position] for position in positions.tolist()])
        assert vocabulary_state(in_c) == vocabulary_state(in_python)
        assert in_c.lookup([names[position] for position in positions.tolist()]).tolist() == list(
            range(len(known), len(known) + len(positions)))
    listed = Vocabulary.from_names(["hello"])
    listed.add_new_at(list(unknown), np.array([3, 1], dtype=np.int64))  # any sequence: the Python definition
    assert listed.by_column() == ["hello", unknown[3], unknown[1]]


def test_adding_new_names_in_c_is_all_or_nothing():
    """NewNames.add_to refuses a name given twice, or one its dict holds already (ValueError), a
    position out of range (IndexError), arguments of the wrong type or shape, and leaves the
    vocabulary as it was; with each of its allocations failing in turn (_testcapi.set_nomemory)
    it adds every name or raises MemoryError having added none. (A vocabulary's own dict may lag
    its list: a one-byte name it holds already is refused by the featuriser's index, below.)"""
    _testcapi = pytest.importorskip("_testcapi")
    known, texts = ["hello", "world"], [text for _, text in load_sms_spam()[:8]] + ["žluťoučký kůň"]
    unknown = new_names_of(texts, known)
    positions = np.arange(len(unknown), dtype=np.int64)[::-1]

    def refused(error, names, *arguments) -> None:
        vocabulary = Vocabulary.from_names(known)
        before = vocabulary_state(vocabulary)
        with pytest.raises(error):
            if arguments:
                names.add_to(*arguments)
            else:
                vocabulary.add_new_at(names[1], names[0])
        assert vocabulary_state(vocabulary) == before

    refused(ValueError, (np.array([0, 5, 0], dtype=np.int64), unknown))  # twice
    wide = [position for position in range(len(unknown)) if max(map(ord, unknown[position])) > 255]
    assert wide and max(map(ord, unknown[7])) <= 255
    for held in (7, wide[0]):  # the dict holds it: the ones before it go back
        vocabulary = Vocabulary.from_names(known + [unknown[held]])
        before = vocabulary_state(vocabulary)
        with pytest.raises(ValueError, match="already"):
            if held == 7:  # (a vocabulary's dict takes a one-byte name later: given whole here)
                unknown.add_to(vocabulary.mapping(), vocabulary.by_column(), positions.tobytes())
            else:
                vocabulary.add_new_at(unknown, positions)
        assert vocabulary_state(vocabulary) == before
    refused(IndexError, (np.array([0, len(unknown)], dtype=np.int64), unknown))
    refused(IndexError, (np.array([-1], dtype=np.int64), unknown))
    refused(TypeError, unknown, {"hello": 0}, ("hello",), b"")
    refused(TypeError, unknown, {"hello": 0}, ["hello"], positions)  # an array, not bytes
    refused(ValueError, unknown, {"hello": 0}, ["hello"], b"\0" * 7)
    refused(ValueError, unknown, {"hello": 0, "x": 1}, ["hello"], b"")  # the dict and list disagree
    refused(ValueError, unknown, {"hello": 0, "x": 1}, ["hello"], b"", False)  # a dict that lags holds fewer
    refused(ValueError, unknown, {}, [], np.array([2, 2], dtype=np.int64).tobytes(), False)  # twice

    expected = Vocabulary.from_names(known)
    expected.add_new([unknown[position] for position in positions.tolist()])
    outcomes, fail_from, in_a_row = [], 0, 0
    while in_a_row < 3 and fail_from < 2_000:
        fail_from += 1
        names = new_names_of(texts, known) if fail_from % 2 else unknown  # (its strs not made yet, or made)
        vocabulary = Vocabulary.from_names(known)
        before = vocabulary_state(vocabulary)
        _testcapi.set_nomemory(fail_from, 0)
        try:
            vocabulary.add_new_at(names, positions)
            outcome = "added"
        except MemoryError:
            outcome = "MemoryError"
        finally:
            _testcapi.remove_mem_hooks()
        outcomes.append(outcome)
        assert vocabulary_state(vocabulary) == (vocabulary_state(expected) if outcome == "added" else before), fail_from
        in_a_row = in_a_row + 1 if outcome == "added" else 0
    assert in_a_row == 3 and outcomes.count("MemoryError") > 50, (len(unknown), outcomes[-10:])


def test_a_vocabulary_whose_dict_lags_its_list_looks_up_every_name_and_refuses_one_held_twice():
    """Names added in C go to a vocabulary's list alone (but for those stored wider than a byte
    a character): the featuriser finds the others in its index of the list, the dict takes them
    when read, and the index refuses a list that holds a one-byte name twice, naming it."""
    texts = [text for _, text in load_sms_spam()[:200]] + ["Привет world, hello café", "žluťoučký kůň"]
    featurizer = spam_featurizer()
    vocabulary = Vocabulary.from_names(["hello"])
    batch = featurizer.transform_sparse(texts[:100], vocabulary=vocabulary)
    ranks, unknown = batch.unknown_in(vocabulary)
    vocabulary.add_new_at(unknown, np.arange(len(unknown), dtype=np.int64))
    assert len(vocabulary._column_of) < len(vocabulary)  # (the dict lags: one-byte names wait)
    later = featurizer.transform_sparse(texts, vocabulary=vocabulary)  # through the index
    plain = Vocabulary.from_names(vocabulary.by_column()[:])  # the same names, the dict whole
    assert later.columns_in(vocabulary).tolist() == featurizer.transform_sparse(texts, vocabulary=plain).columns_in(plain).tolist()
    assert vocabulary.lookup(list(vocabulary.by_column())).tolist() == list(range(len(vocabulary)))
    assert len(vocabulary._column_of) == len(vocabulary)  # read whole: taken in
    one_byte = next(name for name in unknown if max(map(ord, name)) <= 255)
    doubled = Vocabulary.from_names(["hello"])
    doubled._by_column.append(one_byte)  # as a lagging dict would let a second add_new_at do
    doubled._by_column.append(one_byte)
    with pytest.raises(ValueError, match="twice"):
        featurizer.transform_sparse(texts[:5], vocabulary=doubled)


def test_a_vocabulary_of_a_million_names_added_in_c_looks_up_checkpoints_and_corrects_as_a_whole_one():
    """A real user's size: 1,000,000 names added through NewNames in batches of spam.toml's
    words and bigrams (the dict lagging them all along). A batch of known and new names gets
    the columns and ranks a vocabulary of the same names with its dict whole gets; a
    correction's look-up (Vocabulary.lookup) finds every name at its column; the checkpoint's
    state restores the same mapping."""
    featurizer = spam_featurizer()
    rng = random.Random(57)
    vocabulary = Vocabulary()
    serial = iter(range(10**7))
    while len(vocabulary) < 1_000_000:
        texts = [" ".join(f"t{next(serial)}" for _ in range(500)) for _ in range(100)]
        _, unknown = featurizer.transform_sparse(texts, vocabulary=vocabulary).unknown_in(vocabulary)
        vocabulary.add_new_at(unknown, np.arange(len(unknown), dtype=np.int64))
    assert len(vocabulary) >= 1_000_000 and len(vocabulary._column_of) == 0  # (the dict never read)
    names = vocabulary.by_column()[:]
    whole = Vocabulary.from_names(names)
    known = rng.sample(names, 2_000)
    batch_texts = [" ".join(rng.sample(known, 40) + [f"new{i}-{k}" for k in range(5)]) for i in range(50)]
    lagging_batch = featurizer.transform_sparse(batch_texts, vocabulary=vocabulary)
    whole_batch = spam_featurizer().transform_sparse(batch_texts, vocabulary=whole)
    assert lagging_batch.columns_in(vocabulary).tolist() == whole_batch.columns_in(whole).tolist()
    lagging_ranks, lagging_unknown = lagging_batch.unknown_in(vocabulary)
    whole_ranks, whole_unknown = whole_batch.unknown_in(whole)
    assert lagging_ranks.tolist() == whole_ranks.tolist() and list(lagging_unknown) == list(whole_unknown)
    assert vocabulary.lookup(known).tolist() == [whole.mapping()[name] for name in known]  # a correction's look-up
    assert len(vocabulary._column_of) == len(vocabulary)  # taken in whole by that look-up
    restored = Vocabulary.from_names(vocabulary.to_state()["names"])
    assert restored.mapping() == whole.mapping() == vocabulary.mapping()


# ---- extra names after each text's own (a mail's evidence) -------------------------------------

EXTRA_PIECES = ["#hdr:date:missing", "#mime:multipart", "#html:link", "#defect:x", "#s:word", "#s:a",
                "word", "a", "42", "café", "#url", "#žluť", "kůň", "word a", "#hdr:from:" + "x" * 40,
                "#c:wor", "#c: a ", "#s:#c:ord", "word <1> a", "a <2> word"]


def generated_extra(seed: int, texts: list[str]) -> list:
    """Each text's extra names: none, '#...' evidence, or names its own features may hold
    ("#s:word" from a subject, "word", a bigram), some beyond Latin-1; each once, as
    parse_mail gives them, in a list or a tuple."""
    rng = random.Random(seed)
    extra = []
    for _ in texts:
        names = list(dict.fromkeys(rng.choice(EXTRA_PIECES) for _ in range(rng.choice([0, 0, 1, 3, 8]))))
        extra.append(tuple(names) if rng.random() < 0.5 else names)
    return extra


def expected_with_extra(featurizer: TextFeaturizer, texts: list[str], extra: list, vocabulary: Vocabulary):
    """The definition, worked out here from the Python feature list: event i is
    feature_list(text_i) + extra_i; distinct when binary and no extra name is one of its text's;
    columns from the vocabulary's dict, the absent names numbered by first appearance."""
    names, lengths, distinct = [], [], featurizer.binary
    for text, more in zip(texts, extra):
        own = featurizer._feature_list(text)
        distinct = distinct and not any(name in own for name in more)
        names += own + list(more)
        lengths.append(len(own) + len(more))
    column_of = vocabulary.mapping()
    absent = list(dict.fromkeys(name for name in names if name not in column_of))
    rank_of = {name: rank for rank, name in enumerate(absent)}
    return {"names": names, "lengths": lengths, "distinct": distinct,
            "columns": [column_of.get(name, -1) for name in names],
            "ranks": [-1 if name in column_of else rank_of[name] for name in names], "unknown": absent}


def batch_figures(batch, vocabulary: Vocabulary) -> dict:
    ranks, unknown = batch.unknown_in(vocabulary)
    return {"names": list(batch.names), "lengths": batch.lengths.tolist(), "distinct": batch.distinct,
            "columns": batch.columns_in(vocabulary).tolist(), "ranks": ranks.tolist(), "unknown": list(unknown)}


@pytest.mark.parametrize("options", [{}, {"binary": False}, {"max_tokens": 3}, {"subject_features": False},
                                     {"ngram_range": (1, 1), "osb_window": 5},
                                     {"ngram_range": (1, 1), "char_ngrams": (4, 4)},
                                     {"osb_window": 3, "char_ngrams": (3, 5), "binary": False}],
                         ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()) or "spam.toml")
def test_extra_names_are_the_python_definition_s(options):
    """featurize's `extra` against the definition worked out from the Python feature list, on
    generated texts (some beyond Latin-1, so the fallback's lists meet extra names too) and
    generated extra names, with a vocabulary holding part of the names (some wide ones): names,
    lengths, distinct, columns, ranks and the new names, with and without the C index."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), **options})
    python = TextFeaturizer.from_config(featurizer.to_config())
    python._native_plan = None
    texts = generated_texts(seed=23, count=1500) + ["Žluťoučký kůň word a", "kůň", "Subject: word a\nkůň"]
    extra = generated_extra(24, texts)
    vocabulary = Vocabulary.from_names(["kůň", "#žluť", "#hdr:date:missing", "#s:word", "word a"])
    vocabulary.add(python.transform_sparse(texts[::3]).names)
    outcomes = set()  # (distinct, any extra names) of each batch
    start, sizes = 0, [1, 2, 5, 250]  # small batches too, so that some stay distinct
    for k in range(len(texts)):
        if start >= len(texts):
            break
        size = sizes[k % len(sizes)]
        part, more = texts[start : start + size], extra[start : start + size]
        start += size
        expected = expected_with_extra(python, part, more, vocabulary)
        outcomes.add((expected["distinct"], any(more)))
        with_index = featurizer.transform_sparse(part, vocabulary=vocabulary, extra_names=more)
        assert batch_figures(with_index, vocabulary) == expected
        in_python = python.transform_sparse(part, vocabulary=vocabulary, extra_names=more)  # names only
        assert in_python.names == expected["names"] and in_python.distinct == expected["distinct"]
        assert in_python.lengths.tolist() == expected["lengths"]
        plain = featurizer.transform_sparse(part, extra_names=more)  # names as strs, no look-ups
        assert plain.names == expected["names"] and plain.distinct == expected["distinct"]
        assert plain.lengths.tolist() == expected["lengths"]
        predicting = featurizer.transform_sparse(part, vocabulary=vocabulary, number_unknown=False, extra_names=more)
        assert predicting.columns_in(vocabulary).tolist() == expected["columns"]
    if featurizer.binary:  # extra names met their text's own, and batches with extra names stayed distinct too
        assert {(False, True), (True, True)} <= outcomes


@pytest.mark.parametrize("options", FUZZ_OPTIONS, ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()) or "spam.toml")
def test_wide_texts_looked_up_in_the_index_are_the_python_definition_s(options):
    """The wide path with the C index (names of code points below 256 looked up by their bytes,
    without a str; the others in the dict; an extra name checked against the text's own code
    points) against the definition, on generated wide texts with extra names and a vocabulary
    holding part of their names, wide ones among them: names, lengths, distinct, columns, ranks
    and the new names."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), **options})
    python = TextFeaturizer.from_config(featurizer.to_config())
    python._native_plan = None
    generated = generated_wide_texts(seed=31, count=400)
    texts = generated + ["Subject: word a\nkůň word", "word a kůň"]
    extra = generated_extra(32, generated) + [["#s:word", "kůň", "#hdr:x"], ["word a", "#žluť"]]
    vocabulary = Vocabulary.from_names(["kůň", "#žluť", "#hdr:date:missing", "word"])
    vocabulary.add(python.transform_sparse(texts[::2]).names)
    distinct = set()
    for start in range(0, len(texts), 40):
        part, more = texts[start : start + 40], extra[start : start + 40]
        expected = expected_with_extra(python, part, more, vocabulary)
        distinct.add(expected["distinct"])
        assert batch_figures(featurizer.transform_sparse(part, vocabulary=vocabulary, extra_names=more),
                             vocabulary) == expected
    assert featurizer._name_index is not None and featurizer._name_index.indexed() > 0
    if featurizer.binary:  # some batches' extra names met their text's own
        assert False in distinct


def test_the_extra_names_check_would_catch_a_plausible_bug():
    """Mutants of the C batch that a careless implementation would give each fail the comparison:
    distinct kept when an extra name is one of its text's (the counts would not add up), an extra
    name dropped as a repeat of its text's, the extra names before the text's, and the new names
    numbered again in each event."""
    featurizer = spam_featurizer()
    texts = ["Subject: word a\nword café", "a word", "nothing here"]
    extra = [["#s:word", "#hdr:x"], ["word", "#hdr:x"], []]
    vocabulary = Vocabulary.from_names(["word", "#hdr:x"])
    expected = expected_with_extra(featurizer, texts, extra, vocabulary)
    got = batch_figures(featurizer.transform_sparse(texts, vocabulary=vocabulary, extra_names=extra), vocabulary)
    assert got == expected and expected["distinct"] is False
    own = [featurizer._feature_list(text) for text in texts]
    kept_distinct = {**got, "distinct": True}
    deduplicated = {**got, "names": [name for o, e in zip(own, extra) for name in dict.fromkeys(o + e)]}
    extra_first = {**got, "names": [name for o, e in zip(own, extra) for name in e + o]}
    absent_per_event = [[name for name in o + e if name not in ("word", "#hdr:x")] for o, e in zip(own, extra)]
    renumbered = {**got, "ranks": [-1 if name in ("word", "#hdr:x") else list(dict.fromkeys(event)).index(name)
                                   for event, o, e in zip(absent_per_event, own, extra) for name in o + e]}
    for mutant in (kept_distinct, deduplicated, extra_first, renumbered):
        assert mutant != expected


def test_bad_extra_names_are_refused_alike_and_change_nothing():
    featurizer = spam_featurizer()
    python = TextFeaturizer.from_config(featurizer.to_config())
    python._native_plan = None
    vocabulary = Vocabulary.from_names(["word"])
    for maker in (featurizer, python):
        with pytest.raises(ValueError, match="2 entries for 1 texts"):
            maker.transform_sparse(["word"], vocabulary=vocabulary, extra_names=[[], []])
        for bad in (["#x", 3], "#x", None, {"#x"}):
            with pytest.raises(TypeError):
                maker.transform_sparse(["word"], vocabulary=vocabulary, extra_names=[bad])
    assert vocabulary.names() == ["word"]


def test_extra_names_meet_the_names_of_a_text_the_python_path_takes():
    """A text beyond Latin-1 takes the wide path; its extra names are checked against its names
    (a wide name, a one-byte one), as a Latin-1 text's are against C's."""
    featurizer = spam_featurizer()
    vocabulary = Vocabulary.from_names(["kůň"])
    cases = [("Žluťoučký kůň a", ["kůň"], False), ("Žluťoučký kůň a", ["a"], False),
             ("Žluťoučký kůň a", ["#žluť", "kůň a b"], True),
             ("word a", ["a"], False), ("word a", ["#a"], True),
             ("word", ["word"], False), ("", ["word"], True)]
    for text, extra, distinct in cases:
        for options in ({}, {"vocabulary": vocabulary}):
            batch = featurizer.transform_sparse([text], extra_names=[extra], **options)
            assert batch.distinct is distinct, (text, extra, options)
            assert list(batch.names) == featurizer._feature_list(text) + extra


# ---- special_spans: SpecialSpans.find in C ---------------------------------------------------

SPAN_ALPHABET = "aAwW.:/@+-_ \t\n<>\"',;!?)]}x1é²ß\xa0\x85\x1c\x00"


def generated_span_texts(seed: int, count: int) -> list[str]:
    """Strings of the characters the URL and e-mail patterns turn on (classes, anchors, the
    trailing punctuation, Latin-1 letters, digits and white space that \\w and \\s take), and
    strings of PIECES, kept to one byte a character."""
    rng = random.Random(seed)
    texts = []
    while len(texts) < count:
        if len(texts) % 2:
            text = "".join(rng.choice(SPAN_ALPHABET) for _ in range(rng.randint(0, 60)))
        else:
            text = "".join(rng.choice(PIECES) + rng.choice(["", " ", "\n", ",", "."]) for _ in range(rng.randint(0, 20)))
        if one_byte_per_character(text):
            texts.append(text)
    return texts


def definition_spans(specials, text: str) -> list[tuple[int, int, str]]:
    return [(match.start(), match.end(), match.lastgroup) for match in specials.definition.finditer(text)]


URL_ALPHABET = "aAwW.:/@?#\\-_1é² xyz%"


def generated_url_texts(seed: int, count: int) -> list[str]:
    """Texts of URLs of characters the domain rule turns on (the first '://', '/', '?', '#', '\\',
    the last '@', the first ':', trailing '.', a leading 'www.', any case), between words."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        urls = []
        for _ in range(rng.randint(1, 4)):
            start = rng.choice(["http://", "HTTP://", "www.", "WwW.", "a+b.c://", "x://www.", "http://www.", ""])
            body = "".join(rng.choice(URL_ALPHABET) for _ in range(rng.randint(0, 25)))
            urls.append(start + body)
        texts.append(" ".join(urls + [rng.choice(PIECES) for _ in range(rng.randint(0, 3))]))
    return texts


@pytest.mark.parametrize("options", [{}, {"url_domains": False}, {"max_tokens": 2}, {"normalize_emails": False}],
                         ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()) or "spam.toml")
def test_url_placeholders_and_domains_made_in_c_are_the_python_ones(options):
    """A one-byte segment's spans are found and its URL domains made in C (`push_url_domain`):
    the Python lists (`_url_domain`) on 5,000 generated texts of URLs."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), **options})
    texts = generated_url_texts(seed=12, count=5000)
    assert_same_lists(featurizer, texts, native_only=True)
    if featurizer.url_domains:  # the generated URLs make domains of every shape, and empty ones
        lists = [featurizer._feature_list(text) for text in texts]
        assert sum(name.startswith("#url:") for names in lists for name in names) > 3000
        assert sum("#url" in names and not any(name.startswith("#url:") for name in names) for names in lists) > 10


@pytest.mark.parametrize("urls,emails", [(True, True), (True, False), (False, True)])
def test_special_spans_in_c_are_the_definition_s(urls, emails):
    """_native.special_spans against specials.py's regular expression (finditer) on 40,000
    generated strings and the hostile families; None for a str beyond Latin-1."""
    from stream_nb.features.specials import SpecialSpans

    from hostile import FAMILIES

    _require_native()
    specials = SpecialSpans(urls, emails, False)
    texts = generated_span_texts(31, 40_000)
    texts += [make_text(n) for make_text in FAMILIES.values() for n in (7, 90, 2_000)]
    found = 0
    for text in texts:
        if not one_byte_per_character(text):
            assert text_module._native.special_spans(text, urls, emails) is None
            continue
        expected = definition_spans(specials, text)
        assert text_module._native.special_spans(text, urls, emails) == expected, repr(text)
        found += len(expected)
    assert found > 10_000
    assert text_module._native.special_spans("kůň a@b.cz", urls, emails) is None


@pytest.mark.parametrize("urls,emails", [(True, True), (True, False), (False, True)])
def test_special_spans_in_long_texts_of_many_runs_are_the_definition_s(urls, emails):
    """The C scan reads only the runs without white space that hold an anchor ('@', "://",
    "www." in any case), found by memchr: on 2,000 texts each of up to 60 generated strings
    joined by every kind of white space and by none (anchors many to a run, runs many to a
    text, anchors at a run's ends and the text's), the definition's spans."""
    from stream_nb.features.specials import SpecialSpans

    _require_native()
    specials = SpecialSpans(urls, emails, False)
    rng = random.Random(44)
    pieces = [text for text in generated_span_texts(32, 6_000) if text]
    blanks = ["", " ", "\t", "\n", "\xa0", "\x85", "\x1c", "  \r\n"]
    found = 0
    for _ in range(2_000):
        chosen = rng.sample(pieces, rng.randint(1, 60))
        text = "".join(piece + rng.choice(blanks) for piece in chosen)
        expected = definition_spans(specials, text)
        assert text_module._native.special_spans(text, urls, emails) == expected, repr(text)
        found += len(expected)
    assert found > 20_000


def test_the_generated_span_texts_tell_plausible_mistakes_apart():
    """Patterns a port could plausibly get wrong (no word boundary before a scheme, trailing
    punctuation kept in a URL, no look-behind before an address, one-label domains) find
    other spans than the definition on the generated strings."""
    import re

    from stream_nb.features.specials import EMAIL_PATTERN, URL_PATTERN, SpecialSpans

    definition = SpecialSpans(True, True, False)
    texts = generated_span_texts(31, 5_000)
    mutants = [
        (URL_PATTERN.replace(r"\b[a-zA-Z]", "[a-zA-Z]", 1), EMAIL_PATTERN),
        (URL_PATTERN.replace(r"[^\s<>\"'.,;:!?)\]}]", r"[^\s<>\"']"), EMAIL_PATTERN),
        (URL_PATTERN, EMAIL_PATTERN.replace(r"(?<![\w.+\-])", "")),
        (URL_PATTERN, EMAIL_PATTERN.replace(r"(?:\.[\w\-]+)+", r"(?:\.[\w\-]+)*")),
    ]
    for url, email in mutants:
        assert (url, email) != (URL_PATTERN, EMAIL_PATTERN)
        mutant = re.compile(f"(?P<url>{url})|(?P<email>{email})")
        assert any([(m.start(), m.end(), m.lastgroup) for m in mutant.finditer(text)]
                   != definition_spans(definition, text) for text in texts), (url, email)


# ---- OSB word pairs and character n-grams ------------------------------------------------------

OSB_WINDOWS = [None, 3, 5, 10]
CHAR_RANGES = [None, (4, 4), (1, 3), (3, 5)]
# what the other options take in the combinations (max_tokens 1: no pairs at all; 4: some)
OTHER_OPTIONS = [{"ngram_range": ngram_range, "subject_features": subject, "binary": binary, "max_tokens": cap}
                 for ngram_range in ((1, 1), (1, 2)) for subject in (True, False) for binary in (True, False)
                 for cap in (None, 1, 4)]

# Tokens around the C code's 16-byte copies (15, 16, 17 bytes and a padded token of 16),
# one-character ones, long ones, Latin-1 ones (upper case too), and such tokens in URLs and
# e-mail addresses (placeholders: no character n-grams) and subject lines; no "€", beyond Latin-1
# (such a text goes to the Python path: test_beyond_latin1_goes_to_python_with_the_same_result).
WORD_CHARACTERS = "abcxyzABCÉéßÿøÆÞµª²½09_"
LONG_PIECES = ["a" * 14, "b" * 15, "c" * 16, "d" * 17, "é" * 16, "Ø" * 17, "ÿ" * 15, "x" * 100, "Ünïcödé" * 9,
               "q", "7", "ß", "£", "$", "_", "w" + "é" * 20 + "1", "http://" + "l" * 30 + ".com/" + "p" * 20,
               "www." + "Ö" * 18 + ".de", "x" * 20 + "@" + "y" * 20 + ".org", "Subject: " + "s" * 17,
               "£" * 5, "$1", "1$", "a b c d e f g h i j k l", "é ß ÿ"]


def pair_and_gram_texts(seed: int, count: int) -> list[str]:
    """generated_texts' texts (PIECES: Latin-1 words, URLs, e-mails, currency signs, subject
    lines, empty texts) and as many again of random words of 1 to 80 characters (Latin-1 ones
    among them) mixed with PIECES and LONG_PIECES."""
    rng = random.Random(seed)
    texts = generated_texts(seed, count // 2)
    for _ in range(count - count // 2):
        parts = []
        for _ in range(rng.randint(0, 30)):
            pick = rng.random()
            if pick < 0.4:
                parts.append(rng.choice(PIECES))
            elif pick < 0.85:
                length = rng.choice([1, 1, 2, 3, 4, 5, 13, 14, 15, 16, 17, 18, 30, rng.randint(1, 80)])
                parts.append("".join(rng.choice(WORD_CHARACTERS) for _ in range(length)))
            else:
                parts.append(rng.choice(LONG_PIECES))
        text = "".join(part + rng.choice([" ", " ", "\n", ", ", "", "-"]) for part in parts)
        if rng.random() < 0.3:
            text = rng.choice(["Subject:", "subject: ", "SUBJECT: Re: "]) + text
        texts.append(text)
    return texts


def _options_id(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items())


@pytest.mark.parametrize("char_ngrams", CHAR_RANGES, ids=lambda value: f"char_ngrams={value}")
@pytest.mark.parametrize("osb_window", OSB_WINDOWS, ids=lambda value: f"osb_window={value}")
def test_pairs_and_grams_are_the_python_lists(osb_window, char_ngrams):
    """Every combination of osb_window x char_ngrams x ngram_range x subject_features x binary x
    max_tokens (configs/spam.toml's other options) takes the native path, and its lists on the
    generated texts, every one of them made in C, are the Python definition's (300 texts: the
    kinds below all occur in them; 16 x 24 configurations, also under the sanitizer)."""
    texts = pair_and_gram_texts(seed=41, count=300)
    assert all(one_byte_per_character(text) for text in texts)
    base = spam_featurizer().to_config()
    for other in OTHER_OPTIONS:
        options = {**other, "osb_window": osb_window, "char_ngrams": char_ngrams}
        featurizer = TextFeaturizer.from_config({**base, **options})
        assert featurizer._native_plan is not None, f"the C path refuses {_options_id(options)}"
        assert assert_same_lists(featurizer, texts, native_only=True) == 0


def test_the_generated_texts_make_pairs_and_grams_of_every_kind():
    """The texts above are not vacuous: they make pairs at every distance, character n-grams
    of Latin-1 words, of one-character tokens and of tokens longer than the copies' 16 bytes,
    subject features of both, and placeholders that make neither."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), "osb_window": 10,
                                             "char_ngrams": (3, 5), "max_tokens": None})
    names = set(name for name in native_lists(featurizer, pair_and_gram_texts(seed=41, count=300)) for name in name)
    assert all(any(f" <{k}> " in name for name in names) for k in range(1, 9))
    assert not any(" <9> " in name for name in names)
    for expected in ("#c:é", "#c: q ", "#c: $ ", "#c: £ ", "#s:#c:", "#s:", "#url", "#email", "#url:"):
        assert any(name.startswith(expected) for name in names), expected
    assert any(name.startswith("#c:") and len(name) == 3 + 5 and "ÿ" in name for name in names)
    assert any(len(name.split(" <")[0]) > 16 for name in names if " <" in name)  # a pair of long tokens
    assert not any(name.startswith(("#c:#", "#c: #")) for name in names)  # placeholders make no n-grams


def test_pairs_and_grams_of_a_small_text():
    """The C lists spelled out for one text: pairs by distance, then the URL's domain, then
    each word's padded n-grams (Latin-1 letters and a currency sign as one character each; the
    placeholder none); the subject line apart, counted again as #s:."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), "ngram_range": (1, 1),
                                             "osb_window": 4, "char_ngrams": (4, 5)})
    text = "Subject: Café £\nÉté www.x.fr go ab"
    subject = ["café", "£", "#c: caf", "#c:café", "#c:afé ", "#c: café", "#c:café ", "#c: £ "]
    body = ["été", "#url", "go", "ab", "été <1> go", "#url <1> ab", "été <2> ab", "#url:x.fr",
            "#c: été", "#c:été ", "#c: été ", "#c: go ", "#c: ab "]
    expected = ["#s:" + name for name in subject] + subject + body
    assert featurizer._feature_list(text) == expected
    # _native.c spells these out: the prefix and the placeholders that make no n-grams
    assert text_module.CHAR_NGRAM_PREFIX == "#c:" and text_module._PLACEHOLDERS == {"#url", "#email", "#num"}
    assert native_lists(featurizer, [text], fallback=lambda text: pytest.fail("went to Python")) == [expected]


@pytest.mark.parametrize("options", [
    {"char_ngrams": (1, 20)}, {"char_ngrams": (17, 20)}, {"char_ngrams": (25, 30)},
    {"char_ngrams": (5, 10**30)}, {"char_ngrams": (10**30, 10**31)},
    {"osb_window": 1003, "char_ngrams": (2, 2), "binary": False, "max_tokens": None},
], ids=_options_id)
def test_pairs_and_grams_beyond_the_configuration_s_ranges(options):
    """Windows and n-gram lengths beyond what the configuration allows (3..10, 1..20): grams of
    more than 16 characters, padded tokens shorter than the shortest gram, lengths beyond
    Py_ssize_t (capped, which changes nothing), and skips of four digits."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), **options})
    assert featurizer._native_plan is not None
    texts = pair_and_gram_texts(seed=43, count=300) + [" ".join(f"w{i % 50}" for i in range(1010))]
    assert assert_same_lists(featurizer, texts, native_only=True) == 0


def test_a_window_beyond_py_ssize_t_is_capped_and_changes_nothing():
    """osb_window 10**30 goes to C capped at sys.maxsize; a text has fewer tokens than either,
    so its pairs are those of any window wider than the text (the Python definition itself
    walks every distance of its window, so it is asked with a window of 2,000)."""
    options = {**spam_featurizer().to_config(), "max_tokens": None, "char_ngrams": (3, 3)}
    huge = TextFeaturizer.from_config({**options, "osb_window": 10**30})
    wide = TextFeaturizer.from_config({**options, "osb_window": 2_000})
    assert huge._native_plan[-3:] == (sys.maxsize, 3, 3)
    texts = pair_and_gram_texts(seed=45, count=200) + [" ".join(f"w{i % 50}" for i in range(1_500))]
    assert native_lists(huge, texts, fallback=lambda text: pytest.fail("went to Python")) == [
        wide._feature_list(text) for text in texts]


def test_pairs_and_grams_with_look_ups_in_the_index():
    """With an exact vocabulary (the C index of its names), the pairs' and n-grams' columns and
    the new names, Latin-1 ones among them, are those of the Python path's names."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), "ngram_range": (1, 1),
                                             "osb_window": 5, "char_ngrams": (4, 4)})
    python = TextFeaturizer.from_config(featurizer.to_config())
    python._native_plan = None
    texts = pair_and_gram_texts(seed=47, count=600)
    vocabulary = Vocabulary()
    vocabulary.add(python.transform_sparse(texts[:300]).names)
    batch = featurizer.transform_sparse(texts[200:], vocabulary=vocabulary)
    assert list(batch.names) == list(python.transform_sparse(texts[200:]).names)
    columns = assert_look_ups_equal_the_vocabulary_s(batch, vocabulary)
    assert sum(column >= 0 for column in columns) > 1000
    assert any(name.startswith("#c:") and max(map(ord, name)) > 127 for name in batch.unknown_in(vocabulary)[1])


def test_the_plan_s_pairs_and_grams_are_checked():
    """featurize refuses a plan whose window or n-gram range C cannot take."""
    featurizer = TextFeaturizer.from_config({**spam_featurizer().to_config(), "osb_window": 5})
    for window, low, high in ((-1, 0, 0), (0, -1, 0), (0, 3, 2), (0, 0, -5)):
        plan = featurizer._native_plan[:-3] + (window, low, high)
        if (window, low, high) == (0, 0, -5):  # no n-grams: the maximum is not read
            text_module._native.featurize(["a b"], plan, featurizer._native_spans, featurizer._feature_list, None)
            continue
        with pytest.raises(ValueError, match="osb_window"):
            text_module._native.featurize(["a b"], plan, featurizer._native_spans, featurizer._feature_list, None)


MAIL_VIEWS = {  # configs/mail.toml's feature views (tests/test_experts.py): OSB pairs, character 4-grams
    "osb": ["features.ngram_range=[1, 1]", "features.osb_window=5"],
    "chars": ["features.ngram_range=[1, 1]", "features.char_ngrams=[4, 4]"],
}


@pytest.mark.parametrize("view", list(MAIL_VIEWS))
def test_mail_views_on_the_corpora(view):
    """configs/mail.toml's OSB and character 4-gram views take the native path and give the
    Python lists on every SMS message and every tenth Enron-Spam one."""
    _require_native()
    featurizer = load_config(REPO / "configs" / "mail.toml", MAIL_VIEWS[view]).build_featurizer()
    assert featurizer._native_plan is not None
    texts = [text for _, text in load_sms_spam()] + load_enron_texts()[::10]
    assert_same_lists(featurizer, corpus_sample(texts), native_only=True)
