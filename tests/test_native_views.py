"""Several feature views of one batch read each text once (_native.featurize_views, through
text.transform_sparse_views and MailFeaturizer.transform_batch_views): every view's batch is the
one it makes alone, name for name and column for column, on the corpora and raw mail, and the
views that cannot share the reading take their own path. The generated-input comparison is in
test_native_properties.py; `make sanitize` runs this file too."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from stream_nb.config import load_config
from stream_nb.events import Event, SourcePosition
from stream_nb.features import text as text_module
from stream_nb.features.mail import MailFeaturizer
from stream_nb.features.text import TextFeaturizer, transform_sparse_views
from stream_nb.model.base import PendingView, SparseBatch, ViewBatch
from stream_nb.model.vocabulary import Vocabulary
from stream_nb.replay.prequential import Contender, replay_contenders
from stream_nb.worker.records import featurise_views, more_views

from corpora import load_enron_texts, load_sms_spam, load_spamassassin_2003
from native import corpus_sample, require_extension
from test_native_featurizer import generated_extra, generated_texts, generated_wide_texts

REPO = Path(__file__).resolve().parents[1]
MAIL_TOML = REPO / "configs" / "mail.toml"


def mail_views() -> list[TextFeaturizer]:
    """configs/mail.toml's three views' text featurisers: words and bigrams, words and character
    4-grams, words alone."""
    require_extension(text_module._native, "stream_nb.features._native")
    config = load_config(MAIL_TOML, [])
    featurizers = [config.build_featurizer()] + [config.build_featurizer(view) for view in config.views]
    assert len(featurizers) == 3 and all(featurizer._native_plan is not None for featurizer in featurizers)
    return featurizers


class CountedCalls:
    """Counts the calls of `_native.featurize_views` (the shared reading) for the block."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        shared = text_module._native.featurize_views

        def counted(*args):
            self.calls += 1
            return shared(*args)

        monkeypatch.setattr(text_module._native, "featurize_views", counted)


def batch_figures(batch, vocabulary: Vocabulary) -> dict:
    """What a model reads of a batch: names, lengths, `distinct`, columns and, when the batch
    numbered them, the new names' ranks."""
    numbered = batch.unknown_in(vocabulary)
    return {"names": list(batch.names), "lengths": batch.lengths.tolist(), "distinct": batch.distinct,
            "columns": batch.columns_in(vocabulary).tolist(),
            "unknown": None if numbered is None else (numbered[0].tolist(), list(numbered[1]))}


def figures_alone(featurizers, texts, vocabularies, number_unknown=True, extra_names=None) -> list[dict]:
    """Each view's batch figures as it makes them alone (fresh featurisers: their own C indexes)."""
    alone = [TextFeaturizer.from_config(featurizer.to_config()) for featurizer in featurizers]
    return [batch_figures(featurizer.transform_sparse(texts, vocabulary, number_unknown, extra_names), vocabulary)
            for featurizer, vocabulary in zip(alone, vocabularies)]


def filled_vocabularies(featurizers, texts) -> list[Vocabulary]:
    """A vocabulary a view holding its features of `texts` and some evidence names."""
    vocabularies = [Vocabulary.from_names(["#hdr:date:missing", "#s:word", "kůň"]) for _ in featurizers]
    for featurizer, vocabulary in zip(featurizers, vocabularies):
        vocabulary.add([name for text in texts for name in featurizer._feature_list(text)])
    return vocabularies


def split_views(monkeypatch, split: bool) -> None:
    """Whether transform_sparse_views hands a group of views to its helper thread (as it does
    from SPLIT_AT_TEXTS texts on, on two CPUs or more), whatever this machine has."""
    monkeypatch.setattr(text_module, "SPLIT_AT_TEXTS", 1 if split else 1 << 62)
    monkeypatch.setattr(text_module, "_cpus", lambda: 2)


@pytest.mark.parametrize("number_unknown, split", [(True, False), (False, True)])  # (each way once: the suite's time)
def test_mail_toml_views_read_once_equal_each_view_alone_on_the_corpora(monkeypatch, number_unknown, split):
    """Every SMS message and every fifth Enron-Spam one, in batches of 500, each with generated
    evidence names, against vocabularies that hold the features of a third of the texts: one
    shared reading a batch (one a group of views, when two threads featurise), and each view's
    names, lengths, columns, ranks, new names and `distinct` those of the view alone."""
    featurizers = mail_views()
    texts = corpus_sample([text for _, text in load_sms_spam()] + load_enron_texts()[::5])
    extra = generated_extra(7, texts)
    vocabularies = filled_vocabularies(featurizers, texts[::3])
    split_views(monkeypatch, split)
    counted = CountedCalls(monkeypatch)
    for start in range(0, len(texts), 500):
        part, more = texts[start : start + 500], extra[start : start + 500]
        together = transform_sparse_views(featurizers, part, vocabularies, number_unknown, more)
        got = [batch_figures(batch, vocabulary) for batch, vocabulary in zip(together, vocabularies)]
        assert got == figures_alone(featurizers, part, vocabularies, number_unknown, more)
    assert counted.calls == -(-len(texts) // 500) * (2 if split else 1)


def test_a_view_s_index_reused_call_after_call_gives_what_a_fresh_index_gives(monkeypatch):
    """A view's index keeps, from one call to the next, its table of the batch's absent names
    (emptied) and room for as many names as the call looked up (the lists handed out as they
    are, not copied). Batches of sizes that rise and fall (room left over, then too little),
    plain and wide texts with evidence names, and the vocabularies growing between calls by the
    new names of every other event, as learning grows them: each call's names, lengths,
    columns, ranks and new names are those of a fresh featuriser's (a new index), and the
    columns and lengths come as writable buffers of int64."""
    featurizers = mail_views()
    texts = corpus_sample([text for _, text in load_sms_spam()])[:1500]
    texts[::7] = generated_wide_texts(seed=41, count=len(texts[::7]))
    extra = generated_extra(43, texts)
    vocabularies = filled_vocabularies(featurizers, texts[:100])
    split_views(monkeypatch, True)
    n = len(texts)  # (make sanitize samples the corpus: every 8th message)
    bounds = [0, n * 4 // 15, n * 4 // 15 + 30, n * 11 // 15, n * 11 // 15 + 1, n * 11 // 15 + 1, n - 119, n]
    for start, stop in zip(bounds, bounds[1:]):
        part, more = texts[start:stop], extra[start:stop]
        expected = figures_alone(featurizers, part, vocabularies, True, more)
        together = transform_sparse_views(featurizers, part, vocabularies, True, more)
        assert [batch_figures(batch, vocabulary) for batch, vocabulary in zip(together, vocabularies)] == expected
        for batch, vocabulary in zip(together, vocabularies):
            assert batch.lengths.flags.writeable and batch.lengths.dtype == np.int64
            names, ends = list(batch.names), np.cumsum(batch.lengths).tolist()
            vocabulary.add([name for event, (lo, hi) in enumerate(zip([0, *ends], ends)) if event % 2
                            for name in names[lo:hi]])
    assert n > 600 and bounds == sorted(bounds)  # (sizes that rise and fall: the room left over, then too little)
    assert all(featurizer._name_index is not None and featurizer._name_index.indexed() > 0
               for featurizer in featurizers)


def test_views_are_split_in_two_groups_of_about_even_work():
    """The groups the two threads take: every view once, the costliest view's group first, and
    each group a reading of the texts plus its views' names a token (_names_per_token)."""
    mail = [featurizer._native_plan for featurizer in mail_views()]  # words and bigrams, 4-grams, words
    assert [text_module._names_per_token(plan) for plan in mail] == [2.0, 5.0, 1.0]
    assert text_module._view_groups(mail) == ([1], [0, 2])
    assert text_module._view_groups(mail[:1]) is None
    assert text_module._view_groups([mail[2], mail[2]]) == ([0], [1])
    assert text_module._view_groups([mail[2]] * 5) == ([0, 2, 4], [1, 3])
    assert text_module._view_groups([mail[2], mail[0], mail[2], mail[1]]) == ([3], [0, 1, 2])


def test_a_failure_in_either_thread_reaches_the_caller_after_both_are_done(monkeypatch):
    """A view the helper featurises that fails, or one this thread does: the error is raised
    here, once the other thread's call has ended (its views are not left busy)."""
    featurizers = mail_views()
    split_views(monkeypatch, True)
    texts = generated_texts(seed=3, count=100)
    shared = text_module._native.featurize_views
    for failing in (1, 0):  # the helper's group ([base, words]), this thread's ([chars])
        def fails_for_one_group(texts, views, extra=None, failing=failing):
            if (len(views) == 1) == (failing == 0):
                raise MemoryError("made to fail")
            return shared(texts, views, extra)

        monkeypatch.setattr(text_module._native, "featurize_views", fails_for_one_group)
        with pytest.raises(MemoryError, match="made to fail"):
            transform_sparse_views(featurizers, texts, [Vocabulary() for _ in featurizers])
    monkeypatch.setattr(text_module._native, "featurize_views", shared)
    vocabularies = [Vocabulary() for _ in featurizers]
    got = transform_sparse_views(featurizers, texts, vocabularies)
    assert [batch_figures(b, v) for b, v in zip(got, vocabularies)] == figures_alone(featurizers, texts, vocabularies)


def test_views_the_helper_makes_can_come_back_pending_and_are_then_each_view_alone(monkeypatch):
    """transform_sparse_views(pending=True) with two threads: this thread's view ([chars]) made,
    the helper's ([base, words]) as PendingViews whose batches are each view's alone; a text
    that is a str subclass, or one thread, and nothing is pending."""
    featurizers = mail_views()
    texts = generated_texts(seed=5, count=120)
    extra = generated_extra(5, texts)
    vocabularies = filled_vocabularies(featurizers, texts[::3])
    split_views(monkeypatch, True)
    got = transform_sparse_views(featurizers, texts, vocabularies, True, extra, pending=True)
    assert [isinstance(batch, PendingView) for batch in got] == [True, False, True]
    assert [len(batch) for batch in got] == [len(texts)] * 3
    batches = ViewBatch(got)
    assert batches.made() == [1]
    assert [batch_figures(b, v) for b, v in zip(batches.views, vocabularies)] == figures_alone(
        featurizers, texts, vocabularies, True, extra)
    assert batches.made() == [0, 1, 2]

    class Text(str):
        pass

    for some_texts, some_extra in (([Text(texts[0])] + texts[1:], extra), (texts, [[Text("#x")]] + extra[1:])):
        assert not any(isinstance(b, PendingView)
                       for b in transform_sparse_views(featurizers, some_texts, vocabularies, True, some_extra,
                                                       pending=True))
    monkeypatch.setattr(text_module, "_cpus", lambda: 1)
    assert not any(isinstance(b, PendingView)
                   for b in transform_sparse_views(featurizers, texts, vocabularies, True, extra, pending=True))


def test_a_pending_view_fails_when_taken_with_the_helper_s_error_or_a_grown_vocabulary(monkeypatch):
    featurizers = mail_views()
    split_views(monkeypatch, True)
    texts = generated_texts(seed=6, count=80)
    shared = text_module._native.featurize_views

    def helper_fails(texts, views, extra=None):
        if len(views) == 2:  # the helper's group
            raise MemoryError("made to fail")
        return shared(texts, views, extra)

    monkeypatch.setattr(text_module._native, "featurize_views", helper_fails)
    got = transform_sparse_views(featurizers, texts, [Vocabulary() for _ in featurizers], pending=True)
    assert isinstance(got[1], SparseBatch) and isinstance(got[0], PendingView)
    with pytest.raises(MemoryError, match="made to fail"):
        got[0].result()
    monkeypatch.setattr(text_module._native, "featurize_views", shared)
    vocabularies = [Vocabulary() for _ in featurizers]
    got = transform_sparse_views(featurizers, texts, vocabularies, pending=True)
    vocabularies[2].add(["grown"])
    with pytest.raises(RuntimeError, match="vocabulary grew"):
        got[2].result()
    assert got[0].result().names[0] is not None  # (the other pending view is as it was made)


@pytest.mark.parametrize("batch_size", [64, 1000])
def test_a_replay_whose_experts_learn_while_the_helper_featurises_is_the_replay_without(monkeypatch, batch_size):
    """mail.toml over SpamAssassin messages, two threads featurising (the experts of the views
    made first learn while the helper makes the others) against one: every prediction, flag
    and the experts' whole state the same."""
    mail_views()
    events = spamassassin_events(400, seed=8)
    pending = []
    made_pending = text_module._pending_batch
    monkeypatch.setattr(text_module, "_pending_batch", lambda *args: pending.append(1) or made_pending(*args))
    outcomes = []
    for split in (True, False):
        split_views(monkeypatch, split)
        contender = Contender.of("mail", load_config(MAIL_TOML, []))
        predictions = []
        for start in range(0, len(events), batch_size):
            part = events[start : start + batch_size]
            made, learned, _ = contender.predict_learn_sized(part, [event["label"] for event in part])
            predictions += [(dict(p), list(getattr(p, "log_scores", [])), flag) for p, flag in zip(made, learned)]
        state = contender.model.to_state()
        outcomes.append((predictions, state["meta"], {k: v.tolist() for k, v in state["arrays"].items()}))
    assert outcomes[0] == outcomes[1]
    assert len(pending) >= 2 * -(-len(events) // batch_size)  # the helper's two views, every batch (or piece of one)
    assert sum(flag for _, _, flag in outcomes[0][0]) > 50  # (experts learned, batch after batch)


def test_generated_texts_without_a_vocabulary_make_each_view_s_names():
    """No vocabulary (names as strs, no look-ups), texts that hit the edge cases: empty ones,
    subject lines, URLs and addresses, texts beyond Latin-1, and a str subclass."""
    featurizers = mail_views()

    class Text(str):
        pass

    texts = generated_texts(seed=5, count=400) + ["", Text("Subject: a str subclass\nwww.x.org"), "Žluťoučký kůň"]
    together = transform_sparse_views(featurizers, texts, [None] * 3)
    for featurizer, batch in zip(featurizers, together):
        alone = TextFeaturizer.from_config(featurizer.to_config()).transform_sparse(texts)
        assert list(batch.names) == list(alone.names) and batch.distinct == alone.distinct
        assert batch.lengths.tolist() == alone.lengths.tolist()


def test_views_that_read_tokens_differently_or_not_in_c_each_take_their_own_path(monkeypatch):
    """A token cap, subject features or URL setting of its own, an option C lacks, the extension
    switched off, or one view: no shared reading, the same batches."""
    base = mail_views()[0].to_config()
    texts = generated_texts(seed=9, count=200)
    counted = CountedCalls(monkeypatch)
    for other in ({"max_tokens": 3}, {"subject_features": False}, {"url_domains": False}, {"strip_accents": True}):
        featurizers = [TextFeaturizer.from_config(base), TextFeaturizer.from_config({**base, **other})]
        vocabularies = filled_vocabularies(featurizers, texts[::2])
        together = transform_sparse_views(featurizers, texts, vocabularies)
        assert [batch_figures(batch, vocabulary) for batch, vocabulary in zip(together, vocabularies)] == \
            figures_alone(featurizers, texts, vocabularies)
    vocabulary = Vocabulary()
    assert batch_figures(transform_sparse_views([TextFeaturizer.from_config(base)], texts, [vocabulary])[0],
                         vocabulary) == figures_alone([TextFeaturizer.from_config(base)], texts, [vocabulary])[0]
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    python = [TextFeaturizer.from_config(base), TextFeaturizer.from_config({**base, "char_ngrams": (4, 4)})]
    assert all(featurizer._native_plan is None for featurizer in python)
    together = transform_sparse_views(python, texts, [None, None])
    assert [list(batch.names) for batch in together] == [list(f.transform_sparse(texts).names) for f in python]
    assert counted.calls == 0


def test_one_featuriser_given_to_two_views_serves_both():
    """The same featuriser (one C index) for two vocabularies: the second view looks its names up
    in its dict, with the same figures."""
    featurizer = mail_views()[1]
    texts = generated_texts(seed=11, count=300)
    vocabularies = [filled_vocabularies([featurizer], texts[::2])[0], filled_vocabularies([featurizer], texts[::5])[0]]
    together = transform_sparse_views([featurizer, featurizer], texts, vocabularies)
    assert [batch_figures(batch, vocabulary) for batch, vocabulary in zip(together, vocabularies)] == \
        figures_alone([featurizer, featurizer], texts, vocabularies)


def test_featurize_views_refuses_bad_arguments_with_type_and_value_errors():
    featurizers = mail_views()
    views = [(f._native_plan, f._native_spans, f._feature_list, None, True, None, None) for f in featurizers]
    featurize_views = text_module._native.featurize_views
    capped = TextFeaturizer.from_config({**featurizers[0].to_config(), "max_tokens": 3})
    index = text_module._native.NameIndex()
    bad = [
        ((("a",), views), TypeError, "list"),
        ((["a"], tuple(views)), TypeError, "list"),
        ((["a"], []), ValueError, "at least one view"),
        ((["a"], [list(views[0])]), TypeError, "a view must be a tuple"),
        ((["a"], [views[0][:6]]), TypeError, "7 arguments"),
        ((["a"], [("plan",) + views[0][1:]]), TypeError, "a plan must be a tuple"),
        ((["a"], [(views[0][0][:5],) + views[0][1:]]), TypeError, "12 arguments"),
        ((["a"], [(b"x" * 9,) + views[0][1:]]), TypeError, "a plan must be a tuple"),
        ((["a"], [views[0], (capped._native_plan,) + views[0][1:]]), ValueError, "reads tokens unlike"),
        ((["a"], [views[0][:3] + ([],) + views[0][4:]]), TypeError, "column_of must be a dict"),
        ((["a"], [views[0][:3] + ({}, True, index, None)]), TypeError, "index must be a NameIndex"),
        ((["a"], [views[0][:3] + ({}, True, "index", [])]), TypeError, "index must be a NameIndex"),
        ((["a"], views, [[]] * 2), TypeError, "extra must be None"),
        ((["a"], views, [["#x", 3]]), TypeError, "an extra name must be a str"),
        (([b"a"], views), TypeError, "expects a str, got bytes"),
    ]
    for args, error, message in bad:
        with pytest.raises(error, match=message):
            featurize_views(*args)
    # a fallback is called only for a str subclass: one that is not callable is then a TypeError
    assert len(featurize_views(["a"], [views[0][:2] + (None,) + views[0][3:]] * 2)) == 2
    with pytest.raises(TypeError):
        featurize_views([type("Text", (str,), {})("a")], [views[0][:2] + (None,) + views[0][3:]])
    # the index given to a view that failed is free again
    assert featurize_views(["a b"], [views[0][:3] + ({}, True, index, [])])[0][0] is None


def spamassassin_events(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    messages = rng.sample(load_spamassassin_2003(), count)
    return [{"id": f"m{i}", "mail": data, "label": "spam" if folder.startswith("spam") else "ham"}
            for i, (folder, data) in enumerate(messages)]


def view_figures(X, models) -> list[dict]:
    return [batch_figures(batch, model.vocabulary) for batch, model in zip(X.views, models)]


def test_replay_reads_raw_mail_once_for_mail_toml_s_three_views(monkeypatch):
    """Contender.featurise on SpamAssassin messages after 200 of them were learned: one shared
    reading a batch, and each view's batch the one its MailFeaturizer makes alone."""
    mail_views()
    events = spamassassin_events(320, seed=3)
    contender = Contender.of("mail", load_config(MAIL_TOML, []))
    replay_contenders(events[:200], [contender], batch_size=100)
    split_views(monkeypatch, False)  # (split, each group of views is a call of its own)
    counted = CountedCalls(monkeypatch)
    X = contender.featurise(events[200:])
    assert isinstance(X, ViewBatch) and counted.calls == 1
    models = contender.model.models
    alone = [view[2].transform_batch(events[200:], vocabulary=model.vocabulary)
             for view, model in zip(contender._views, models)]
    assert view_figures(X, models) == [batch_figures(batch, model.vocabulary) for batch, model in zip(alone, models)]
    text_events = [{"id": "t", "text": "Subject: hello\nwww.x.org £5 word", "label": "ham"}, {"id": "u", "text": ""}]
    X = contender.featurise(text_events)
    assert counted.calls == 2
    assert view_figures(X, models) == [batch_figures(view[0].transform_sparse([e["text"] for e in text_events],
                                                                              vocabulary=model.vocabulary),
                                                     model.vocabulary) for view, model in zip(contender._views, models)]


@pytest.mark.parametrize("learning", [True, False])
def test_the_worker_reads_raw_mail_once_for_mail_toml_s_three_views(monkeypatch, learning):
    """records.featurise_views (the worker's) on mail events: each view's batch is its
    MailFeaturizer's alone, numbering new names only when learning."""
    mail_views()
    config = load_config(MAIL_TOML, [])
    model = config.build_model()
    first = MailFeaturizer(config.build_event_featurizer())
    views = [(config.build_featurizer(), first)] + more_views(config, first)
    source = SourcePosition("mail", 0, 0)
    events = [Event(event["id"], None, None, event["label"], source, mail=event["mail"])
              for event in spamassassin_events(60, seed=4)]
    split_views(monkeypatch, False)  # (split, each group of views is a call of its own)
    counted = CountedCalls(monkeypatch)
    X = featurise_views(events, learning, model=model, reads_text=True, views=views)
    assert counted.calls == 1
    dicts = [{"text": None, "features": None, "mail": event.mail} for event in events]
    for batch, (_, mail), expert in zip(X.views, views, model.models):
        alone = mail.transform_batch(dicts, vocabulary=expert.vocabulary, number_unknown=learning)
        assert list(batch.names) == list(alone.names) and batch.lengths.tolist() == alone.lengths.tolist()
        assert batch.columns_in(expert.vocabulary).tolist() == alone.columns_in(expert.vocabulary).tolist()
        assert batch.distinct == alone.distinct


def test_views_that_do_not_read_mail_through_the_first_parse_each_message_themselves(monkeypatch):
    """MailFeaturizer.transform_batch_views shares the reading only when the later views read
    messages through the first (`reader`): otherwise each view runs on its own."""
    mail_views()
    config = load_config(MAIL_TOML, [])
    apart = [MailFeaturizer(config.build_event_featurizer()), MailFeaturizer(config.build_event_featurizer("words"))]
    events = spamassassin_events(20, seed=5)
    counted = CountedCalls(monkeypatch)
    batches = MailFeaturizer.transform_batch_views(apart, events, [None, None])
    assert counted.calls == 0
    assert [list(batch.names) for batch in batches] == [list(f.transform_batch(events).names) for f in apart]


def test_other_threads_run_while_plain_texts_are_featurised_and_not_while_wide_ones_are():
    """featurize_views reads a stretch of plain texts (exact strs one byte a character, their
    evidence names too, every view with its index) without the GIL, so that a thread reading the
    next batch's mail runs meanwhile (stream_nb.replay.parse_ahead). With a switch interval so long
    that a thread waiting for the GIL never gets it from Python code, a counting thread counts
    during the call on plain texts, and not once during the call on texts beyond Latin-1 (the
    wide path holds the GIL throughout). The batches are the same with the other thread running."""
    import sys
    import threading
    import time

    featurizers = mail_views()
    plain = [text for _, text in load_sms_spam()[:1500] if text.isascii()]
    wide = [text + " kůň" for text in plain[:300]]
    extra = generated_extra(3, plain)
    extra = [[name for name in names if name.isascii()] for names in extra]
    vocabularies = filled_vocabularies(featurizers, plain[::3])
    expected = figures_alone(featurizers, plain, vocabularies, True, extra)
    counted, stop = [0], [False]

    def count() -> None:
        while not stop[0]:
            counted[0] += 1
            time.sleep(0)  # gives the GIL back, so that the caller takes it again after the call

    def counts_during(texts, names) -> tuple[int, list]:
        views = [featurizer._native_view(vocabulary, True) for featurizer, vocabulary in zip(featurizers, vocabularies)]
        before = counted[0]
        made = text_module._native.featurize_views(texts, views, names)
        return counted[0] - before, made

    interval = sys.getswitchinterval()
    counter = threading.Thread(target=count, daemon=True)
    sys.setswitchinterval(1000.0)
    try:
        counter.start()
        during_plain = [counts_during(plain, extra)[0] for _ in range(5)]
        during_wide = [counts_during(wide, None)[0] for _ in range(5)]
        together = transform_sparse_views(featurizers, plain, vocabularies, True, extra)
    finally:
        stop[0] = True
        sys.setswitchinterval(interval)
        counter.join(10)
    assert max(during_plain) > 0, during_plain
    assert during_wide == [0] * 5
    assert [batch_figures(batch, vocabulary) for batch, vocabulary in zip(together, vocabularies)] == expected


def test_a_thread_replacing_the_lists_items_during_a_call_reaches_nothing_the_call_holds():
    """While featurize_views reads stretches of plain texts without the GIL, another thread
    replaces the call's texts and extra names from the last one back (each text's evidence
    first, then the text) and empties the lists of names it took out. The call holds what it
    reads (a stretch's texts, their names as tuples of their own), so each text's names are
    those of a version it could have read: the original text with its original or its new
    names, or the new text with its new names, name for name, and as many texts as were given.
    A text beyond Latin-1 every 50 ends a stretch (it is read with the GIL), so that later
    stretches are taken after the other thread has run. (`make sanitize` runs this file: a freed
    text or list read would be an error there.)"""
    import threading
    import time

    featurizers = mail_views()
    originals = [text if i % 50 != 49 else text + " kůň"
                 for i, text in enumerate(text for _, text in load_sms_spam() if text.isascii())]
    replacements = [f"Subject: replaced {i}\nnothing of the original text {i} here" for i in range(len(originals))]
    extra = [[name for name in names if name.isascii()] for names in generated_extra(11, originals)]
    new_extra = [[f"#hdr:new:{i}", "#hdr:date:missing"] for i in range(len(originals))]
    vocabularies = filled_vocabularies(featurizers, originals[::3])

    def by_text(batch) -> list[list]:
        flat, at, names = list(batch.names), 0, []
        for length in batch.lengths.tolist():
            names.append(flat[at:at + length])
            at += length
        return names

    versions = [by_text(transform_sparse_views(featurizers, texts, vocabularies, True, names)[0])
                for texts, names in [(originals, extra), (originals, new_extra), (replacements, new_extra)]]
    for _ in range(3):  # again (fresh lists) should the other thread not have run during the call
        # strs of their own, held by these lists alone: one replaced is freed unless the call holds it
        texts = [(text + ".")[:-1] for text in originals]
        names = [[(name + ".")[:-1] for name in item] for item in extra]
        started = threading.Event()

        def replace() -> None:
            started.wait()
            for i in reversed(range(len(texts))):
                taken_out, names[i] = names[i], list(new_extra[i])
                taken_out.clear()
                texts[i] = replacements[i]
                time.sleep(0.0002)

        replacer = threading.Thread(target=replace, daemon=True)
        replacer.start()
        views = [featurizer._native_view(vocabulary, True) for featurizer, vocabulary in zip(featurizers, vocabularies)]
        started.set()
        made = text_module._native.featurize_views(texts, views, names)
        replacer.join(60)
        read = by_text(text_module._native_batch(made[0], views[0], vocabularies[0]))
        assert len(read) == len(originals)
        unexplained = [i for i, names_read in enumerate(read) if all(names_read != version[i] for version in versions)]
        assert unexplained == []
        read_as = [next(v for v, version in enumerate(versions) if names_read == version[i])
                   for i, names_read in enumerate(read)]
        if read_as[0] == 0 and 2 in read_as:  # the first read as it was, some read after the other thread's change
            break
    else:
        pytest.fail(f"the other thread never changed a text before the call read it: {read_as[-5:]}")


def test_an_allocation_failing_anywhere_in_a_call_raises_memory_error_and_changes_nothing():
    """Every allocation of a featurize_views call made to fail in turn, from the first on
    (CPython's _testcapi.set_nomemory: each allocation from the n-th fails, in every domain),
    until the call no longer needs as many: each call either gives the batch or raises
    MemoryError (a batch made so is the batch: no failure was swallowed), and the next call,
    with memory, gives the same batch as before (the views' indexes and the vocabularies are as
    they were). The texts are plain (read without the GIL, where a failure is noted and raised
    once the GIL is back) and one beyond Latin-1 (read with it), with evidence names."""
    _testcapi = pytest.importorskip("_testcapi")
    featurizers = mail_views()
    texts = [text for _, text in load_sms_spam()[:40] if text.isascii()] + ["Subject: kůň\nžluťoučký kůň úpěl"]
    extra = [[f"#hdr:n{i % 3}", "#hdr:date:missing"] for i in range(len(texts))]
    vocabularies = filled_vocabularies(featurizers, texts[::3])

    def call(fail_from: int = 0) -> list[dict]:
        """Each view's batch figures of one call; with `fail_from`, every allocation of the call
        from that one on fails."""
        views = [featurizer._native_view(vocabulary, True) for featurizer, vocabulary in zip(featurizers, vocabularies)]
        if fail_from:
            _testcapi.set_nomemory(fail_from, 0)
        try:
            made = text_module._native.featurize_views(texts, views, extra)
        finally:
            if fail_from:
                _testcapi.remove_mem_hooks()
        return [batch_figures(text_module._native_batch(one, view, vocabulary), vocabulary)
                for one, view, vocabulary in zip(made, views, vocabularies)]

    expected = call()
    outcomes, start, in_a_row = [], 0, 0
    while in_a_row < 3 and start < 5_000:
        start += 1
        try:
            # a batch made while allocations failed is the batch: no failure was swallowed
            assert call(start) == expected, start
            outcomes.append("batch")
        except MemoryError:
            outcomes.append("MemoryError")
        in_a_row = in_a_row + 1 if outcomes[-1] == "batch" else 0
        assert call() == expected, start
    assert in_a_row == 3, outcomes[-10:]  # the call's allocations all failed in turn
    assert outcomes.count("MemoryError") > 50, outcomes.count("MemoryError")


def test_a_forked_child_featurises_with_a_helper_thread_of_its_own(monkeypatch):
    """A process forked after the helper thread started (its pool copied, not its thread) still
    featurises split batches, the same ones, instead of waiting for ever on the copied pool."""
    import os
    import time

    featurizers = mail_views()
    split_views(monkeypatch, True)
    texts = generated_texts(seed=4, count=100)
    vocabularies = [Vocabulary() for _ in featurizers]
    expected = [batch_figures(batch, vocabulary) for batch, vocabulary in
                zip(transform_sparse_views(featurizers, texts, vocabularies), vocabularies)]
    assert text_module._helper_pool is not None  # started
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 for the same batches
        try:
            got = transform_sparse_views(featurizers, texts, vocabularies)
            os._exit(0 if [batch_figures(b, v) for b, v in zip(got, vocabularies)] == expected else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 60
    while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if ended[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child did not finish featurising")
    assert os.waitstatus_to_exitcode(ended[1]) == 0
