"""The C prediction encoder (stream_nb.events._codec) against PredictionEncoder.encode.

`encode_many` writes the messages of the common shape in C and hands every other one to
`encode`, the definition; each message must be the same bytes either way. The extension is
optional: where it is not built these tests skip (under CI=true they fail).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest

from stream_nb.events import codec
from stream_nb.events.codec import Event, PredictionEncoder, SourcePosition

from native import REPO, require_extension


@pytest.fixture
def made_in_c(monkeypatch) -> list:
    """Runs the C encoder and records what it wrote (None: declined) per call."""
    require_extension(codec._native_codec, "stream_nb.events._codec")
    native = codec._native_codec
    calls: list = []

    class Spy:
        @staticmethod
        def encode_predictions(*args):
            made = native.encode_predictions(*args)
            calls.append(made)
            return made

    monkeypatch.setattr(codec, "_native_codec", Spy)
    monkeypatch.delenv("STREAM_NB_NATIVE", raising=False)
    return calls


def one_by_one(encoder: PredictionEncoder, events, probabilities, verdicts, clues, scores=None) -> list:
    out = []
    for i, (event, proba) in enumerate(zip(events, probabilities)):
        if proba is None:
            out.append(None)
            continue
        try:
            out.append(encoder.encode(event, proba, verdict=None if verdicts is None else verdicts[i],
                                      clues=None if clues is None else clues[i],
                                      score=None if scores is None else scores[i]))
        except (TypeError, ValueError) as error:
            out.append(error)
    return out


def same(got: list, expected: list) -> bool:
    for a, b in zip(got, expected, strict=True):
        if isinstance(b, Exception):
            if not (type(a) is type(b) and str(a) == str(b)):
                return False
        elif a != b:
            return False
    return True


TRICKY = ['plain', 'quote " and backslash \\', "controls \x00\x01\x08\x0c\n\r\t\x1f\x7f", "é £ € ü", "emoji 😀",
          "line sep \u2028 para \u2029", "", "ünïcödé \\u0041 literal", "/slash/", "tab\tend"]


def event(i: int, id_: str = None, topic: str = "messages", partition=0) -> Event:
    return Event(id_ if id_ is not None else f"e{i}", "text", None, None, SourcePosition(topic, partition, 1000 + i))


def test_common_messages_are_the_same_bytes(made_in_c):
    rng = random.Random(5)
    floats = [0.5, 1.0, 0.0, 1e-08, 1.27e-08, 0.9999999873, 5e-324, 1e16, 1.5e300, 0.1 + 0.2, 2.0 / 3.0, 1e-05]
    events, probabilities, verdicts, clues = [], [], [], []
    for i in range(300):
        events.append(event(i, id_=rng.choice(TRICKY) + str(i), topic=rng.choice(["messages", "t é \"q\""])))
        p = rng.choice(floats + [rng.random()])
        classes = rng.choice([["ham", "spam"], ["a", "b", "c"], ["spam"], [], ["x\"y", "é"]])
        probabilities.append({cls: (p if k == 0 else rng.random()) for k, cls in enumerate(classes)})
        verdicts.append(rng.choice([None, "ham", "spam", "unsure", "v\u00e9rdict"]))
        clues.append(rng.choice([None, [], [(rng.choice(TRICKY), round(rng.uniform(-9, 9), 6)) for _ in range(3)]]))
    probabilities[7] = None  # dead-lettered before encoding
    for learned, checkpoint, offsets in [(0, None, None), (12345, "ckpt-000001", [["labeled", 0, 99]]),
                                         (7, "c\u00e9 \"x\"", [["l", 2, 3], ["m", 0, 1]])]:
        encoder = PredictionEncoder(events_learned=learned, checkpoint=checkpoint, labeled_offsets=offsets)
        for with_verdicts, with_clues in [(verdicts, clues), (None, None), (verdicts, None)]:
            got = encoder.encode_many(events, probabilities, with_verdicts, with_clues)
            assert got == one_by_one(encoder, events, probabilities, with_verdicts, with_clues)
            made = made_in_c[-1]
            assert sum(item is not None for item in made) == 299  # all of them written in C
    assert got[0][1].startswith(b'{"id":')


def test_other_shapes_are_left_to_the_definition(made_in_c):
    encoder = PredictionEncoder(events_learned=3, checkpoint=None)
    events = [event(i) for i in range(10)] + [event(10, partition=True), event(11, id_="lone \ud800 surrogate")]
    probabilities = [
        {1: 0.25, 2: 0.75},  # int classes: Python (their JSON keys are their str)
        {"ham": float("nan"), "spam": 0.5},  # refused: not finite
        {"ham": 1, "spam": 0.0},  # an int probability: Python converts it
        {True: 1.0},  # a bool class: refused
        {"ham": 0.5, "spam": 0.5},
        {"ham": 0.5, "spam": 0.5},
        {"ham": 0.5, "spam": 0.5},
        {1: 0.5, "1": 0.5},  # two classes with one JSON name: refused
        {"ham": 0.5, "spam": 0.5},
        {"ham": 0.5, "spam": 0.5},
        {"ham": 0.5, "spam": 0.5},
        {"ham": 0.5, "spam": 0.5},
    ]
    verdicts = [None] * 12
    verdicts[4] = 3  # not a str: the generic path
    clues = [None] * 12
    clues[5] = [("free", math.inf), ("cash", -math.inf)]  # infinite evidence: written as strings
    clues[6] = [["list", 1.5]]  # a list, not a tuple: Python
    clues[8] = [("nan", math.nan)]  # refused
    clues[9] = [("n", 2)]  # an int weight: Python converts it
    got = encoder.encode_many(events, probabilities, verdicts, clues)
    assert same(got, one_by_one(encoder, events, probabilities, verdicts, clues))
    assert made_in_c[-1] == [None] * 12  # none of them had the common shape
    kinds = [type(item).__name__ for item in got]
    assert kinds == ["tuple", "ValueError", "tuple", "TypeError", "tuple", "tuple", "tuple", "ValueError",
                     "ValueError", "tuple", "tuple", "UnicodeEncodeError"]
    assert b'"clues":[["free","Infinity"],["cash","-Infinity"]]' in got[5][1]


def test_every_character_below_256_and_random_text(made_in_c):
    encoder = PredictionEncoder(events_learned=1, checkpoint="c")
    rng = random.Random(11)
    alphabet = [chr(c) for c in range(256)] + ["\u2028", "😀", "中", "\ufeff"]
    ids = ["".join(chr(c) for c in range(0, 128)), "".join(chr(c) for c in range(128, 256))]
    ids += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(500)]
    events = [event(i, id_=id_) for i, id_ in enumerate(ids)]
    probabilities = [{"ham": rng.random(), "spam": rng.random()} for _ in ids]
    clues = [[(rng.choice(ids), rng.uniform(-1e3, 1e3))] for _ in ids]
    got = encoder.encode_many(events, probabilities, None, clues)
    assert got == one_by_one(encoder, events, probabilities, None, clues)
    assert all(item is not None for item in made_in_c[-1])


def test_switched_off_it_is_not_called(made_in_c, monkeypatch):
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    encoder = PredictionEncoder(events_learned=1, checkpoint=None)
    events, probabilities = [event(0)], [{"ham": 0.5, "spam": 0.5}]
    assert encoder.encode_many(events, probabilities) == one_by_one(encoder, events, probabilities, None, None)
    assert made_in_c == []


def test_mismatched_lengths_are_refused(made_in_c):
    with pytest.raises(ValueError, match="differ in length"):
        codec._native_codec.encode_predictions([event(0)], [], "{}", None, None)


HOSTILE_ID_PROPERTY = '''
import sys
from stream_nb.events import codec
from stream_nb.events.codec import SourcePosition

class Hostile:
    """An event whose id property empties what the encoder is reading."""
    source = SourcePosition("messages", 0, 1)

    def __init__(self, probabilities, events):
        self.probabilities, self.events = probabilities, events

    @property
    def id(self):
        self.probabilities.clear()  # drops the last reference to the best class
        self.events.clear()
        return "e1"

probabilities = {"".join(["spam", "-", "x"]): 0.75, "ham": 0.25}  # the dict holds the only "spam-x"
events = []
events.append(Hostile(probabilities, events))
print(codec._native_codec.encode_predictions(events, [probabilities], "{}", None, None))
events = []
events += [Hostile({}, events), Hostile({}, events)]
try:
    codec._native_codec.encode_predictions(events, [{"a": 1.0}, {"b": 1.0}], "{}", None, None)
except RuntimeError as error:
    print(error)
'''


def test_an_id_property_that_drops_the_best_class_or_empties_the_lists_is_survived(made_in_c):
    # PYTHONMALLOC=debug fills freed memory, so a borrowed reference to the dropped class reads
    # garbage (and crashes) rather than a stale copy of it
    done = subprocess.run([sys.executable, "-c", HOSTILE_ID_PROPERTY], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONMALLOC": "debug"}, cwd=str(REPO))
    assert done.returncode == 0, done.stderr
    written, refused = done.stdout.splitlines()
    assert written == ("[(b'e1', b'{\"id\":\"e1\",\"label\":\"spam-x\",\"proba\":{},\"model\":{},"
                       "\"source\":{\"topic\":\"messages\",\"partition\":0,\"offset\":1}}')]")
    assert refused == "encode_predictions: a list changed size while it was encoded"


def posterior(probabilities: dict, log_scores: list):
    from stream_nb.model.posterior import Posterior

    made = Posterior(probabilities)
    made.log_scores = log_scores
    return made


def test_scores_are_the_same_bytes_and_infinite_ones_are_strings(made_in_c):
    """The score of generated predictions (a model's Posterior, a plain dict), finite,
    infinite or absent, is written after "proba" alike in C and in Python."""
    rng = random.Random(23)
    specials = [math.inf, -math.inf, 0.0, -0.0, 5e-324, 1e300, -1266.359520511836, 2.5]
    events, probabilities, scores = [], [], []
    for i in range(400):
        events.append(event(i, id_=rng.choice(TRICKY) + str(i)))
        p = rng.random()
        s_ham, s_spam = rng.uniform(-3000, 0), rng.uniform(-3000, 0)
        proba = {"ham": 1 - p, "spam": p}
        probabilities.append(posterior(proba, [s_ham, s_spam]) if i % 2 else proba)
        scores.append(rng.choice([None, s_spam - s_ham, rng.choice(specials)]))
    encoder = PredictionEncoder(events_learned=9, checkpoint="c")
    got = encoder.encode_many(events, probabilities, None, None, scores)
    assert got == one_by_one(encoder, events, probabilities, None, None, scores)
    assert sum(item is not None for item in made_in_c[-1]) == 400  # every one written in C
    for (_, value), score in zip(got, scores):
        message = json.loads(value)
        assert list(message)[:4] == (["id", "label", "proba", "score"] if score is not None else
                                     ["id", "label", "proba", "model"])
        if score is not None:
            written = message["score"]
            assert written == {math.inf: "Infinity", -math.inf: "-Infinity"}.get(score, score)
            assert isinstance(written, str) or repr(written) == repr(score)


def test_a_nan_score_is_refused_and_other_types_go_to_the_definition(made_in_c):
    encoder = PredictionEncoder(events_learned=1, checkpoint=None)
    events = [event(i) for i in range(4)]
    probabilities = [{"ham": 0.5, "spam": 0.5}] * 4
    scores = [math.nan, 3, "high", 1.25]
    got = encoder.encode_many(events, probabilities, None, None, scores)
    assert same(got, one_by_one(encoder, events, probabilities, None, None, scores))
    assert [type(item).__name__ for item in got] == ["ValueError", "tuple", "TypeError", "tuple"]
    assert made_in_c[-1][:3] == [None, None, None] and made_in_c[-1][3] is not None
    assert b'"score":3.0,' in got[1][1]
