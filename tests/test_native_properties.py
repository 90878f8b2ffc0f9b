"""Each C extension against its Python definition on inputs hypothesis generates.

Beside the seeded generators of the other test_native_* files (which stay: they pin measured
counts), these draw inputs from strategies and, when a comparison fails, shrink it to the
smallest input that still fails. Compared: the event decoder on arbitrary bytes and JSON-like
values (codec.py), the prediction encoder on generated predictions (PredictionEncoder.encode),
the featuriser on arbitrary text (text.py, specials.py), its one reading of a text for several
feature views against each view alone (featurize_views), NewNames.find against a dict of the
names, the multinomial kernel's `settle` on
small generated models and batches (the per-event loop with the kernel off) and its `clues`
(strongest_clues event by event), and the mail helpers on generated markup, headers and
Content-Type lines (html.py, parse.py). `make sanitize` runs this file with the extensions
built under ASan and UBSan.

Profiles: "dev" (random examples, no deadline: the machine is shared) and "ci" (derandomized,
so a CI run is reproducible), chosen by CI=true. Only this file uses hypothesis.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_nb.events import codec
from stream_nb.events.codec import Event, PredictionEncoder, Rejected, SourcePosition
from stream_nb.features import text as text_module
from stream_nb.features.text import TextFeaturizer
from stream_nb.mail import html, parse
from stream_nb.model import counting
from stream_nb.model.base import SparseBatch
from stream_nb.model.counting import MultinomialNB
from stream_nb.model.explain import strongest_clues, strongest_clues_many
from stream_nb.model.training import predict_learn
from stream_nb.model.vocabulary import Vocabulary

from native import SANITIZED, require_extension
from test_mail_native import (
    BOUNDING_PIECES,
    CHARACTERS,
    CONTENT_TYPE_PIECES,
    HEADER_PIECES,
    MORE_PIECES,
    READER_PIECES,
    RELAY_PIECES,
    python_tokens,
)
from test_mail_parse import MARKUP_PIECES
from test_native_featurizer import FUZZ_OPTIONS, PIECES

REPO = Path(__file__).resolve().parents[1]

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", **_COMMON)
settings.register_profile("ci", derandomize=True, print_blob=True, **_COMMON)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")


def examples(count: int) -> int:
    """A test's number of examples: `count`, or a quarter of it (at least 100) under make
    sanitize, where the C runs several times slower: six of its tests took 251 s there (the
    decoder on JSON-like values 84 s), beside the suite (the plain suite draws every example)."""
    return max(100, count // 4) if SANITIZED else count

SOURCE = SourcePosition("events", 3, 17)
MAX_BYTES = 1_048_576


@contextmanager
def native_switched_off():
    """STREAM_NB_NATIVE=0 for the block: the definitions run (read each call by native_allowed)."""
    before = os.environ.get("STREAM_NB_NATIVE")
    os.environ["STREAM_NB_NATIVE"] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["STREAM_NB_NATIVE"]
        else:
            os.environ["STREAM_NB_NATIVE"] = before


# ---- the event decoder (_codec.c decode_event; codec.py) --------------------------------------

def decoder():
    require_extension(codec._native_codec, "stream_nb.events._codec")
    return codec._native_codec.decode_event


def decoded_alike(value: bytes, labeled: bool) -> Event | None:
    """The C decoder declines `value` (None) or makes the Python decoder's Event, field for field
    and type for type."""
    made = decoder()(value, labeled, MAX_BYTES, SOURCE, Event)
    expected = codec._decode_or_reject(value, b"k", (), SOURCE, labeled, MAX_BYTES)
    if made is not None:
        assert type(expected) is Event, (value, expected)
        for name in ("id", "text", "features", "label", "source", "mail", "unlearn", "key"):
            got, want = getattr(made, name), getattr(expected, name)
            assert got == want and type(got) is type(want), (value, name, got, want)
    else:
        assert type(expected) in (Event, Rejected)
    return made


# no surrogates: json.dumps would write them as escapes a valid event may not hold
plain_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
any_text = st.text(max_size=30)
labels = st.one_of(plain_text, st.integers(), st.integers(min_value=-10**40, max_value=10**40))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**25, max_value=10**25),
              st.floats(allow_nan=False, allow_infinity=False), any_text),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(any_text, children, max_size=3),
    max_leaves=6)
field_names = st.sampled_from(["id", "text", "label", "unlearn", "features", "extra", "ID", "mail", "key"])


@st.composite
def json_events(draw) -> bytes:
    """A JSON object of fields mostly the contract's, each of any JSON type, written compact or
    spaced, escaped to ASCII or not."""
    fields = draw(st.dictionaries(field_names, st.one_of(json_values, labels), max_size=5))
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]))
    written = json.dumps(fields, ensure_ascii=draw(st.booleans()), separators=separators)
    return (draw(st.sampled_from(["", " ", "\n\t"])) + written + draw(st.sampled_from(["", " ", "\r\n"]))).encode()


@settings(max_examples=examples(800))
@given(st.binary(max_size=120), st.booleans())
def test_decoder_on_arbitrary_bytes(value, labeled):
    decoded_alike(value, labeled)


@settings(max_examples=examples(800))
@given(st.one_of(json_events(), json_events().map(lambda value: value[: len(value) // 2])), st.booleans())
def test_decoder_on_json_like_values(value, labeled):
    decoded_alike(value, labeled)


@st.composite
def keyed_events(draw) -> tuple[bytes, bool]:
    """The common shape ({"id", "text"} and a label on the labeled topic) with a "key" field of
    any JSON type, or none, in any position: (value, labeled)."""
    labeled = draw(st.booleans())
    fields = {"id": draw(plain_text), "text": draw(plain_text)}
    if labeled:
        fields["label"] = draw(labels)
    if draw(st.booleans()):
        fields["key"] = draw(st.one_of(plain_text, st.none(), labels, json_values))
    order = draw(st.permutations(list(fields)))
    return json.dumps({name: fields[name] for name in order}, ensure_ascii=draw(st.booleans())).encode(), labeled


@settings(max_examples=examples(500))
@given(st.one_of(keyed_events(), st.tuples(json_events(), st.booleans())))
def test_a_record_decodes_alike_with_the_switch_on_and_off(case):
    """decode_record with the C decoder allowed and with it switched off: the same Event (its key
    too) or the same refusal. An event with "key" is declined by C, so codec.py decides it."""
    value, labeled = case
    on = codec.decode_record(value, b"k", (), SOURCE, labeled=labeled, max_bytes=MAX_BYTES)
    with native_switched_off():
        off = codec.decode_record(value, b"k", (), SOURCE, labeled=labeled, max_bytes=MAX_BYTES)
    assert on == off, (value, on, off)
    if type(on) is Event:
        assert type(on.key) is type(off.key)
        fields = json.loads(value)
        assert on.key == fields.get("key")


@settings(max_examples=examples(500))
@given(plain_text.filter(bool), plain_text, labels, st.booleans())
def test_decoder_takes_the_common_shape(id_, text, label, ascii_only):
    """{"id", "text", "label"} with a non-empty id, and a label that is a non-empty str or an
    int of at most 18 digits: the C decoder must take it (not only decline alike)."""
    value = json.dumps({"id": id_, "text": text, "label": label}, ensure_ascii=ascii_only).encode()
    made = decoded_alike(value, True)
    taken = label != "" and (isinstance(label, str) or len(str(abs(label))) <= 18)
    assert (made is not None) == taken, value
    if taken:
        assert made.label == label and made.text == text and made.id == id_


def test_the_comparison_catches_a_label_of_the_wrong_type(monkeypatch):
    """What a plausible bug would give (the label's digits as a str): decoded_alike fails."""
    require_extension(codec._native_codec, "stream_nb.events._codec")
    value = b'{"id":"a","text":"t","label":7}'

    class WrongLabel:
        @staticmethod
        def decode_event(*args):
            return Event("a", "t", None, "7", SOURCE)

    monkeypatch.setattr(codec, "_native_codec", WrongLabel)
    with pytest.raises(AssertionError):
        decoded_alike(value, True)


# ---- the prediction encoder (_codec.c encode_predictions; PredictionEncoder.encode) -----------

classes = st.one_of(st.text(max_size=6), st.integers(-3, 3), st.booleans())
probabilities = st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 1) | st.integers(0, 1)
predictions = st.one_of(st.none(), st.dictionaries(classes, probabilities, max_size=4))
clue_lists = st.one_of(st.none(), st.lists(st.tuples(any_text, st.floats() | st.integers(-5, 5)), max_size=3))
verdicts = st.one_of(st.none(), any_text, st.integers(0, 3))


@settings(max_examples=examples(500))
@given(st.lists(st.tuples(any_text, predictions, verdicts, clue_lists,
                          st.one_of(st.none(), st.floats())), min_size=1, max_size=6),
       st.integers(0, 10**6), st.one_of(st.none(), any_text))
def test_encoder_on_generated_predictions(rows, learned, checkpoint):
    require_extension(codec._native_codec, "stream_nb.events._codec")
    encoder = PredictionEncoder(events_learned=learned, checkpoint=checkpoint)
    events = [Event(id_, "text", None, None, SourcePosition("messages", 0, i)) for i, (id_, *_) in enumerate(rows)]
    probas = [row[1] for row in rows]
    with_verdicts, with_clues, with_scores = [row[2] for row in rows], [row[3] for row in rows], [row[4] for row in rows]
    made = codec._native_codec.encode_predictions(events, probas, encoder._model_json, with_verdicts, with_clues,
                                                  with_scores)
    for i, written in enumerate(made):
        if written is not None:  # what C writes, the definition writes byte for byte
            assert written == encoder.encode(events[i], probas[i], verdict=with_verdicts[i], clues=with_clues[i],
                                             score=with_scores[i])
    got = encoder.encode_many(events, probas, with_verdicts, with_clues, with_scores)
    with native_switched_off():
        expected = encoder.encode_many(events, probas, with_verdicts, with_clues, with_scores)
    for a, b in zip(got, expected, strict=True):
        assert (type(a), str(a)) == (type(b), str(b)) if isinstance(b, Exception) else a == b


@settings(max_examples=examples(300))
@given(st.lists(st.tuples(st.text(st.characters(max_codepoint=255), max_size=12),
                          st.dictionaries(st.text(max_size=4), st.floats(0, 1), min_size=1, max_size=3)),
                min_size=1, max_size=5))
def test_encoder_writes_the_common_shape_in_c(rows):
    """Latin-1 ids, str classes, finite probabilities: every message is written in C."""
    require_extension(codec._native_codec, "stream_nb.events._codec")
    encoder = PredictionEncoder(events_learned=1, checkpoint=None)
    events = [Event(id_, "t", None, None, SourcePosition("messages", 0, i)) for i, (id_, _) in enumerate(rows)]
    probas = [proba for _, proba in rows]
    made = codec._native_codec.encode_predictions(events, probas, encoder._model_json, None, None, None)
    assert all(written is not None for written in made)
    assert made == [encoder.encode(event, proba) for event, proba in zip(events, probas)]


# ---- the featuriser (features/_native.c; text.py, specials.py) --------------------------------

def featurizer_with(options: dict) -> TextFeaturizer:
    require_extension(text_module._native, "stream_nb.features._native")
    from stream_nb.config import load_config

    base = load_config(REPO / "configs" / "spam.toml", []).build_featurizer().to_config()
    featurizer = TextFeaturizer.from_config({**base, **options})
    assert featurizer._native_plan is not None
    return featurizer


texts = st.one_of(
    st.text(max_size=60),  # any code point: beyond Latin-1 takes the wide path
    st.text(st.characters(max_codepoint=255), max_size=60),
    st.lists(st.one_of(st.sampled_from(PIECES), st.sampled_from([" ", "\n", ",", ""]), st.text(max_size=3)),
             max_size=25).map("".join),
    st.lists(st.sampled_from(PIECES), max_size=10).map(lambda parts: "Subject:" + " ".join(parts)),
)


@settings(max_examples=examples(500))
@given(st.sampled_from(range(len(FUZZ_OPTIONS))), st.lists(texts, min_size=1, max_size=5))
def test_featuriser_on_arbitrary_text(option, batch):
    """Several texts a call (the first may be empty): each text's list is the Python list, and
    none goes to the fallback (texts beyond Latin-1 take the wide path)."""
    featurizer = featurizer_with(FUZZ_OPTIONS[option])
    passed_on = []

    def fallback(text: str) -> list[str]:
        passed_on.append(text)
        return featurizer._feature_list(text)

    names, lengths, *_ = text_module._native.featurize(batch, featurizer._native_plan, featurizer._native_spans,
                                                       fallback, None)
    bounds = np.concatenate(([0], np.cumsum(np.frombuffer(lengths, dtype=np.int64)))).tolist()
    assert [names[lo:hi] for lo, hi in zip(bounds, bounds[1:])] == [featurizer._feature_list(t) for t in batch]
    assert passed_on == []


@settings(max_examples=examples(500))
@given(texts.map(str.lower), st.booleans(), st.booleans())
def test_special_spans_are_those_of_specials_py(text, urls, emails):
    """_native.special_spans finds SpecialSpans.find's spans, or declines (None)."""
    featurizer = featurizer_with({"normalize_urls": urls, "normalize_emails": emails})
    if not (urls or emails) or max(map(ord, text), default=0) > 255:
        return
    found = text_module._native.special_spans(text, urls, emails)
    if found is not None:
        assert [tuple(span) for span in found] == [tuple(span) for span in featurizer._specials.find(text)]


# ---- the shared reading of several views (_native.c featurize_views) ----------------------------

# What the views of one pass make of the tokens (each view's own), and how they all read them
VIEW_GRAMS = [{"ngram_range": (1, 1)}, {"ngram_range": (1, 2)}, {"ngram_range": (1, 1), "char_ngrams": (4, 4)},
              {"ngram_range": (1, 2), "osb_window": 4}, {"ngram_range": (1, 1), "char_ngrams": (1, 3)},
              {"ngram_range": (1, 2), "osb_window": 3, "char_ngrams": (2, 5)}]
READINGS = st.fixed_dictionaries({"subject_features": st.booleans(), "max_tokens": st.sampled_from([None, 1, 3, 7, 40]),
                                  "normalize_urls": st.booleans(), "normalize_emails": st.booleans(),
                                  "url_domains": st.booleans()})
EXTRA_NAMES = ["#hdr:date:missing", "#mime:multipart", "#s:word", "word", "a", "café", "#url", "#žluť", "kůň",
               "word a", "#c: a ", "#c:word"]


class Text(str):
    """A str subclass: each view's Python feature list takes it."""


def raw(made: tuple) -> tuple:
    """featurize's result as plain values (names, lengths, columns, ranks, unknown, distinct)."""
    names, lengths, columns, ranks, unknown, distinct = made
    return (names, bytes(lengths), None if columns is None else bytes(columns),
            None if ranks is None else bytes(ranks), None if unknown is None else list(unknown), distinct)


@settings(max_examples=examples(300))
@given(READINGS, st.lists(st.tuples(st.sampled_from(range(len(VIEW_GRAMS))), st.booleans()), min_size=1, max_size=4),
       st.lists(st.one_of(texts, texts.map(Text)), max_size=5),
       st.one_of(st.none(), st.lists(st.lists(st.sampled_from(EXTRA_NAMES), max_size=4, unique=True)
                                     .map(lambda names: tuple(names) if len(names) % 2 else names), max_size=5)),
       st.sampled_from(["none", "dict", "index"]), st.booleans(), st.integers(0, 5))
def test_one_reading_for_several_views_is_each_view_s_own(reading, grams, batch, extra, lookups, number_unknown, known):
    """featurize_views gives every view what featurize gives it alone, field for field: names,
    lengths, columns, ranks, the new names and `distinct`, over views that make different
    features of one reading (generated texts, wide ones and str subclasses among them, empty
    ones, extra names, token caps), with no vocabulary, its dict alone, or its C index, holding
    the features of some of the texts and some extra names."""
    if extra is not None:
        extra = (extra + [[]] * len(batch))[:len(batch)]
    featurizers = [featurizer_with({**VIEW_GRAMS[g], **reading, "binary": binary}) for g, binary in grams]
    views = []
    for featurizer in featurizers:
        vocabulary = Vocabulary.from_names(EXTRA_NAMES[::2])
        vocabulary.add([name for text in batch[:known] for name in featurizer._feature_list(text)])
        column_of, index, by_column = None, None, None
        if lookups != "none":
            column_of = vocabulary.mapping()
        if lookups == "index":
            index, by_column = text_module._native.NameIndex(), vocabulary.by_column()
        views.append((featurizer._native_plan, featurizer._native_spans, featurizer._feature_list, column_of,
                      number_unknown, index, by_column))
    alone = [raw(text_module._native.featurize(batch, *view, extra)) for view in views]
    together = [raw(made) for made in text_module._native.featurize_views(batch, views, extra)]
    assert together == alone


def found_by_definition(unknown: list, names: list) -> list[int] | None:
    """NewNames.find's definition: each name's first position among `unknown` (-1: none); None
    when a name or an entry is not an exact str."""
    if any(type(name) is not str for name in [*unknown, *names]):
        return None
    first: dict = {}
    for position, name in enumerate(unknown):
        first.setdefault(name, position)
    return [first.get(name, -1) for name in names]


@settings(max_examples=examples(300))
@given(st.sampled_from(range(len(VIEW_GRAMS))), st.lists(st.one_of(texts, texts.map(Text)), max_size=5),
       st.one_of(st.none(), st.lists(st.lists(st.sampled_from(EXTRA_NAMES), max_size=4, unique=True), max_size=5)),
       st.integers(0, 5), st.data())
def test_new_names_find_is_the_first_equal_position(grams, batch, extra, known, data):
    """NewNames.find (the names a vocabulary gained, looked for among a batch's new names: those
    kept as bytes, those given as strs, wide ones, some already read, in a view or the whole)
    gives each name's first equal position, as a dict of the names would; None for a str
    subclass."""
    featurizer = featurizer_with(VIEW_GRAMS[grams])
    if extra is not None:
        extra = (extra + [[]] * len(batch))[:len(batch)]
    vocabulary = Vocabulary.from_names(EXTRA_NAMES[::2])
    vocabulary.add([name for text in batch[:known] for name in featurizer._feature_list(text)])
    *_, unknown, _ = text_module._native.featurize(batch, featurizer._native_plan, featurizer._native_spans,
                                                   featurizer._feature_list, vocabulary.mapping(), True, None, None,
                                                   extra)
    for position in data.draw(st.lists(st.integers(0, max(len(unknown) - 1, 0)), max_size=4)):
        if position < len(unknown):
            unknown[position]  # read: its str is made, and kept
    start = data.draw(st.integers(0, len(unknown)))
    names = unknown[start : data.draw(st.integers(start, len(unknown)))]
    listed = list(names)
    asked = data.draw(st.lists(st.one_of(st.sampled_from([*list(unknown), *EXTRA_NAMES, ""]), texts,
                                         st.sampled_from(["word", "café"]).map(Text)), max_size=12))
    found = names.find(asked)
    expected = found_by_definition(listed, asked)
    assert (found if found is None else np.frombuffer(found, dtype=np.int64).tolist()) == expected
    with pytest.raises(TypeError):
        names.find(tuple(asked))


# ---- the multinomial kernel (_kernel.c settle and clues; counting.py, explain.py) -------------

MODELS = [
    dict(alpha=1.0),
    dict(alpha=0.3, prior_alpha=1.0),
    dict(alpha=0.0),  # infinite scores: those events go back to the definition
    dict(alpha=0.5, unknown="smooth"),
    dict(alpha=0.2, half_life=5, evict_every=3),  # forgetting: fractional counts
    dict(alpha=0.2, max_features=6, evict_every=3),  # a budget: evictions mid-batch
]
WORDS = [f"w{k}" for k in range(10)]


@contextmanager
def kernel(module):
    before = counting._native_kernel
    counting._native_kernel = module
    try:
        yield
    finally:
        counting._native_kernel = before


class Counted:
    """The extension module, counting the events its `settle` went through."""

    def __init__(self, module) -> None:
        self.module, self.events = module, 0

    def settle(self, start, *rest):
        stop, *others = self.module.settle(start, *rest)
        self.events += stop - start
        return (stop, *others)

    def __getattr__(self, name):
        return getattr(self.module, name)


def state_of(model) -> tuple:
    return (model._vocabulary.names(), model._counts.tolist(), model._class_counts.tolist(),
            model._class_totals.tolist(), model._features_seen, model._learned_weight)


events = st.dictionaries(st.sampled_from(WORDS), st.integers(1, 3), max_size=5)


@st.composite
def streams(draw):
    """(model options, X, y, mode, margin, batch size): a small stream over 2 or 3 classes."""
    names = draw(st.sampled_from([["ham", "spam"], [2, 0, 1]]))
    n = draw(st.integers(1, 40))
    X = draw(st.lists(events, min_size=n, max_size=n))
    y = draw(st.lists(st.one_of(st.none(), st.sampled_from(names)), min_size=n, max_size=n))
    mode, margin = draw(st.sampled_from([("all", 0.0), ("on_error", 0.0), ("thick_threshold", 1.5),
                                         ("thick_threshold", 0.0)]))
    return draw(st.sampled_from(MODELS)), X, y, mode, margin, draw(st.integers(1, 16))


def run(options, X, y, mode, margin, batch_size):
    model = MultinomialNB(**options)
    out, learned = [], []
    for start in range(0, len(X), batch_size):
        p, flags = predict_learn(model, X[start:start + batch_size], y[start:start + batch_size], mode, margin)
        out.extend(p)
        learned.extend(flags)
    return out, learned, state_of(model)


@settings(max_examples=examples(200))
@given(streams())
def test_settle_equals_the_per_event_loop(stream):
    """Batches through the C kernel against batches of one with the kernel off (the definition):
    probabilities, learn decisions and state, exactly."""
    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    options, X, y, mode, margin, batch_size = stream
    native = run(options, X, y, mode, margin, batch_size)
    with kernel(None):
        assert native == run(options, X, y, mode, margin, 1)


def test_the_generated_streams_run_through_c():
    """The comparisons here are of the C path: on a stream of their kind `settle` takes most
    events and `clues` is called."""
    from streams import text_stream

    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    X, y = text_stream(3, 40, 2, vocabulary=10, class_names=["ham", "spam"])
    module, calls = counting._native_kernel, []
    spy = Counted(module)
    spy.clues = lambda *args: calls.append(1) or module.clues(*args)
    model = MultinomialNB(**MODELS[0])
    with kernel(spy):
        predict_learn(model, X, y, "all", 0.0)
        sparse = SparseBatch(["w1", "w2", "w9", "unseen"], np.array([3, 1], dtype=np.int64), None, distinct=True)
        strongest_clues_many(model, sparse, model.predict_proba_many(sparse), top=2)
    assert spy.events >= 30 and calls


@settings(max_examples=examples(200))
@given(streams(), st.lists(st.lists(st.sampled_from(WORDS + ["unseen"]), unique=True, max_size=6), min_size=1,
                           max_size=8), st.integers(0, 4))
def test_clues_equal_strongest_clues_event_by_event(stream, batch, top):
    """strongest_clues_many in C (distinct names, no values) against strongest_clues on each
    event: the same features, evidence and order."""
    require_extension(counting._native_kernel, "stream_nb.model._kernel")
    options, X, y, mode, margin, _ = stream
    model = MultinomialNB(**options)
    predict_learn(model, X, y, mode, margin)
    names = [name for event in batch for name in event]
    sparse = SparseBatch(names, np.array([len(event) for event in batch], dtype=np.int64), None, distinct=True)
    probas = model.predict_proba_many(sparse)
    native = strongest_clues_many(model, sparse, probas, top=top)
    dicts = [dict.fromkeys(event, 1) for event in batch]
    assert native == [strongest_clues(model, x, top=top, proba=proba) if proba else None
                      for x, proba in zip(dicts, probas)]
    with kernel(None):
        assert strongest_clues_many(model, sparse, probas, top=top) == native


# ---- the mail helpers (mail/_native.c; html.py, parse.py) -------------------------------------

def mail_native():
    require_extension(html._native, "stream_nb.mail._native")
    return html._native


markup = st.one_of(
    st.lists(st.sampled_from(MARKUP_PIECES + MORE_PIECES + READER_PIECES), max_size=25).map("".join),
    st.lists(st.sampled_from(CHARACTERS), max_size=40).map("".join),
    st.text(max_size=40),
)


@settings(max_examples=examples(800))
@given(markup)
def test_scan_gives_the_tokens_of_python_scan(document):
    from html import unescape

    bounded = html._bounded_markup(document)
    tokens = mail_native().scan(bounded, unescape)
    if tokens is not None:
        assert tokens == python_tokens(bounded)


def html_outcome(document):
    try:
        evidence = html.read_html(document)
        return evidence.text, evidence.features
    except Exception as error:  # html.parser's give-ups, a style float() cannot read
        return type(error).__name__, str(error)


@settings(max_examples=examples(500))
@given(markup)
def test_read_html_is_the_same_with_the_extension_off(document):
    mail_native()
    native = html_outcome(document)
    with native_switched_off():
        assert html_outcome(document) == native


@settings(max_examples=examples(500))
@given(st.lists(st.sampled_from(BOUNDING_PIECES) | st.text(max_size=3), max_size=30).map("".join))
def test_bounded_markup_is_python_s(document):
    made = mail_native().bounded_markup(document, html.MAX_TAG_CHARS, html.MAX_COMMENT_CHARS, html.MAX_LT_IN_TAG)
    with native_switched_off():
        assert made == html._bounded_markup(document)


@settings(max_examples=examples(500))
@given(st.lists(st.sampled_from(RELAY_PIECES) | st.text(max_size=3), max_size=12).map(" ".join))
def test_relay_words_are_python_s(value):
    assert mail_native().relay_words(value) == parse._relay_words(value)


@settings(max_examples=examples(500))
@given(st.lists(st.sampled_from(CONTENT_TYPE_PIECES) | st.binary(max_size=4), max_size=12).map(b"".join),
       st.integers(-2, 4))
def test_content_type_cut_is_python_s(data, limit):
    assert mail_native().content_type_cut(data, limit) == parse._cut_before_nth_content_type(data, limit)


@settings(max_examples=examples(500))
@given(st.lists(st.sampled_from(HEADER_PIECES) | st.text(max_size=4), max_size=8).map("".join), st.data())
def test_header_fields_and_table_are_python_s(block, data):
    position = data.draw(st.sampled_from([0, 0, 1, len(block)]) | st.integers(0, len(block)))
    assert mail_native().header_fields(block, position) == parse._header_fields(block, position)
    assert mail_native().header_table(block, position) == parse._header_table(block, position)
