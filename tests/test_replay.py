"""Replay: file sources, prequential metrics, the runner and the `replay`/`demo` commands."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stream_nb import MultinomialNB
from stream_nb.features import TextFeaturizer
from stream_nb.replay import PrequentialMetrics, read_events, replay_events
from stream_nb.replay.generator import spam_ham_stream
from stream_nb.replay.sources import SourceError


def test_tsv_csv_and_jsonl_give_the_same_events(tmp_path):
    rows = [("ham", "see you at lunch"), ("spam", "WIN a prize, txt now"), ("ham", "tab\\tless")]
    (tmp_path / "s.tsv").write_text("".join(f"{l}\t{t}\n" for l, t in rows), encoding="utf-8")
    (tmp_path / "s.csv").write_text("label,text\n" + "".join(f'{l},"{t}"\n' for l, t in rows), encoding="utf-8")
    (tmp_path / "s.jsonl").write_text("".join(json.dumps({"label": l, "text": t}) + "\n" for l, t in rows),
                                      encoding="utf-8")
    parsed = {kind: [(e["label"], e["text"]) for e in read_events(tmp_path / f"s.{kind}")] for kind in ("tsv", "csv", "jsonl")}
    assert parsed["tsv"] == parsed["csv"] == parsed["jsonl"] == rows
    assert [e["id"] for e in read_events(tmp_path / "s.tsv")] == ["s:1", "s:2", "s:3"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("bad.tsv", "no tab here\n", "bad.tsv:1: not a valid event: missing_tab (expected 'label<TAB>text'"),
        ("bad.jsonl", '{"text": "a", "label": "x"}\n{oops\n', "bad.jsonl:2: not a valid event: invalid_json"),
        ("bad.jsonl", '["a"]\n', "bad.jsonl:1: not a valid event: not_an_object (top level is array"),
        ("bad.jsonl", '{"label": "x"}\n', "bad.jsonl:1: not a valid event: no_text_or_features"),
        ("bad.jsonl", '{"text": "a", "label": true}\n', "not a valid event: label_type"),
        ("bad.jsonl", '{"features": {"x": NaN}, "label": "a"}\n', "not a valid event: nan_or_infinity"),
        ("bad.jsonl", '{"features": {"x": [1]}, "label": "a"}\n', "not a valid event: feature_value_type"),
        ("bad.csv", "label,body\nham,hi\n", "no 'text' column"),
        ("bad.jsonl", '{"text": "a"}\n', "field 'label' is missing"),
        ("bad.xml", "<a/>", "unknown format 'xml'"),
    ],
)
def test_malformed_files_name_the_file_and_line(tmp_path, name, content, message):
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(SourceError, match=message.replace("(", r"\(").replace("[", r"\[")):
        list(read_events(tmp_path / name))


@pytest.mark.parametrize("name", ["corpus.tsv", "mail.tar.gz", "folder", "mail.mbox", "x.xml"])
def test_a_missing_input_is_named_missing_whatever_its_name_says(tmp_path, name):
    with pytest.raises(SourceError, match=f"{name}: no such file$"):
        list(read_events(tmp_path / name))


def test_jsonl_events_carry_text_features_or_both_as_the_topic_contract_says(tmp_path):
    lines = [{"id": "a", "text": "hello there", "label": "ham"},
             {"id": "b", "features": {"w": 2, "colour": "red", "ok": True}, "label": "spam"},
             {"id": "c", "text": "both", "features": {"x": 1.5}, "label": 3},
             {"id": "d", "text": "no label yet"}]
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    events = list(read_events(tmp_path / "e.jsonl", labels="optional"))
    assert events == [{"id": "a", "text": "hello there", "features": None, "label": "ham"},
                      {"id": "b", "text": None, "features": {"w": 2, "colour": "red", "ok": True}, "label": "spam"},
                      {"id": "c", "text": "both", "features": {"x": 1.5}, "label": 3},
                      {"id": "d", "text": "no label yet", "features": None, "label": None}]
    with pytest.raises(SourceError, match="e.jsonl:4: field 'label' is missing"):
        list(read_events(tmp_path / "e.jsonl"))  # labels required by default
    assert all(event["label"] is None for event in read_events(tmp_path / "e.jsonl", labels="dropped"))


def test_bad_events_in_a_file_are_counted_by_the_workers_reasons_and_skipped(tmp_path):
    from collections import Counter

    (tmp_path / "e.jsonl").write_text(
        '{"id": "a", "text": "fine", "label": "x"}\n'
        '{"id": "b", "label": "x"}\n'                          # no_text_or_features
        '{"id": "c", "text": 5, "label": "x"}\n'               # text_not_string
        '{oops\n'                                             # invalid_json
        '{"id": "d", "text": "t", "text": "u", "label": "x"}\n'  # duplicate_key
        '{"id": "e", "features": {"n": 1e400}, "label": "x"}\n'  # feature_value_not_finite
        '{"id": "f", "text": "fine too", "label": "y"}\n', encoding="utf-8")
    rejected = Counter()
    events = list(read_events(tmp_path / "e.jsonl", labels="optional", rejected=rejected))
    assert [event["id"] for event in events] == ["a", "f"]
    assert rejected == {"no_text_or_features": 1, "text_not_string": 1, "invalid_json": 1, "duplicate_key": 1,
                        "feature_value_not_finite": 1}


def test_a_csv_table_of_features(tmp_path):
    (tmp_path / "iris.csv").write_text("sepal,petal,colour,label\n5.1,2,red,setosa\n6.0,,blue,virginica\n",
                                       encoding="utf-8")
    with pytest.raises(SourceError, match="no 'text' column .*--feature-columns"):
        list(read_events(tmp_path / "iris.csv"))
    events = list(read_events(tmp_path / "iris.csv", feature_columns="*"))
    assert [(event["features"], event["label"], event["text"]) for event in events] == [
        ({"sepal": 5.1, "petal": 2, "colour": "red"}, "setosa", None),
        ({"sepal": 6.0, "colour": "blue"}, "virginica", None)]  # an empty cell is absent
    assert [event["id"] for event in events] == ["iris:2", "iris:3"]
    only = list(read_events(tmp_path / "iris.csv", feature_columns="sepal, colour"))
    assert [event["features"] for event in only] == [{"sepal": 5.1, "colour": "red"}, {"sepal": 6.0, "colour": "blue"}]


def test_field_names_are_options(tmp_path):
    (tmp_path / "e.jsonl").write_text(json.dumps({"key": 7, "body": "hi", "cls": "ham", "f": {"a": "b"}}) + "\n",
                                      encoding="utf-8")
    events = list(read_events(tmp_path / "e.jsonl", id_field="key", text_field="body", label_field="cls",
                              features_field="f"))
    assert events == [{"id": "7", "text": "hi", "features": {"a": "b"}, "label": "ham"}]


def test_jsonl_events_keep_their_key(tmp_path):
    lines = [{"id": "a", "key": "user-1", "text": "hi", "label": "ham"},
             {"id": "b", "text": "no key", "label": "spam"},
             {"id": "c", "key": None, "text": "null is no key"},
             {"id": "d", "key": "user-1", "features": {"n": 1}, "label": "spam", "unlearn": "ham"}]
    (tmp_path / "k.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    events = list(read_events(tmp_path / "k.jsonl", labels="optional"))
    assert events == [{"id": "a", "text": "hi", "features": None, "label": "ham", "key": "user-1"},
                      {"id": "b", "text": "no key", "features": None, "label": "spam"},
                      {"id": "c", "text": "null is no key", "features": None, "label": None},
                      {"id": "d", "text": None, "features": {"n": 1}, "label": "spam", "unlearn": "ham",
                       "key": "user-1"}]
    # the key is no label: an unlabeled reading keeps it
    assert [event.get("key") for event in read_events(tmp_path / "k.jsonl", labels="dropped")] == \
        ["user-1", None, None, "user-1"]
    # --key-field names another field; one that another role reads is that role's only
    (tmp_path / "u.jsonl").write_text(json.dumps({"id": "a", "user": "u-9", "key": "ignored", "text": "t"}) + "\n",
                                      encoding="utf-8")
    assert [event["key"] for event in read_events(tmp_path / "u.jsonl", labels="optional", key_field="user")] == \
        ["u-9"]
    assert list(read_events(tmp_path / "u.jsonl", labels="optional", key_field="id")) == \
        [{"id": "a", "text": "t", "features": None, "label": None}]


@pytest.mark.parametrize("line, reason, detail", [
    ('{"id": "b", "key": 7, "text": "t", "label": "ham"}', "key_not_string", "key is integer, expected a string"),
    ('{"id": "b", "key": "", "text": "t", "label": "ham"}', "empty_key", "key is the empty string"),
    ('{"id": "b", "key": ["u"], "text": "t", "label": "ham"}', "key_not_string", "key is array, expected a string"),
    ('{"id": "b", "key": "\\udc00", "text": "t", "label": "ham"}', "lone_surrogate",
     "key holds an unpaired surrogate escape"),
])
def test_a_bad_key_in_a_file_is_refused_naming_its_line(tmp_path, line, reason, detail):
    from collections import Counter

    good = json.dumps({"id": "a", "key": "u", "text": "t", "label": "ham"})
    (tmp_path / "k.jsonl").write_text(f"{good}\n{line}\n{good}\n", encoding="utf-8")
    with pytest.raises(SourceError) as raised:
        list(read_events(tmp_path / "k.jsonl"))
    assert str(raised.value) == f"{tmp_path / 'k.jsonl'}:2: not a valid event: {reason} ({detail})"
    rejected = Counter()
    assert len(list(read_events(tmp_path / "k.jsonl", rejected=rejected))) == 2
    assert rejected == {reason: 1}


def test_the_event_dict_of_a_topic_record_carries_the_event_key_only():
    """read_topic yields event_dict of the decoded record: the "key" field, never the message key."""
    from stream_nb.events import SourcePosition, decode_record
    from stream_nb.replay.sources import event_dict

    source = SourcePosition("t", 0, 5)
    keyed = decode_record(b'{"id":"a","key":"user-1","text":"t"}', b"message-key", None, source, labeled=False)
    plain = decode_record(b'{"id":"b","text":"t"}', b"message-key", None, source, labeled=False)
    assert event_dict(keyed) == {"id": "a", "text": "t", "features": None, "label": None, "key": "user-1"}
    assert event_dict(plain) == {"id": "b", "text": "t", "features": None, "label": None}


def test_a_csv_key_column_gives_the_key(tmp_path):
    (tmp_path / "k.csv").write_text("id,key,text,label\na,user-1,hi,ham\nb,,no key,spam\nc,7,seven,ham\n",
                                    encoding="utf-8")
    events = list(read_events(tmp_path / "k.csv"))
    assert [event.get("key") for event in events] == ["user-1", None, "7"]  # a cell is a string: "7" stays "7"
    assert "key" not in events[1]  # an empty cell is absent
    # "*" takes every column but the id, key, label and text
    (tmp_path / "f.csv").write_text("tenant,colour,n,label\nt1,red,2,ham\nt2,blue,3,spam\n", encoding="utf-8")
    events = list(read_events(tmp_path / "f.csv", feature_columns="*", key_field="tenant"))
    assert [(event["key"], event["features"]) for event in events] == [
        ("t1", {"colour": "red", "n": 2}), ("t2", {"colour": "blue", "n": 3})]
    # a file without the column, and a TSV file (no columns), have no keys
    assert all("key" not in event for event in read_events(tmp_path / "f.csv", feature_columns="*"))
    (tmp_path / "s.tsv").write_text("ham\thi\n", encoding="utf-8")
    assert list(read_events(tmp_path / "s.tsv")) == [{"id": "s:1", "text": "hi", "features": None, "label": "ham"}]


def test_metrics_match_hand_counts_with_string_labels():
    metrics = PrequentialMetrics()
    outcomes = [("spam", "spam", 0.9), ("spam", "ham", 0.2), ("ham", "ham", 0.7), ("ham", "ham", 0.6), ("ham", "spam", 0.1)]
    for true, predicted, p_true in outcomes:
        metrics.update(true, predicted, {true: p_true})
    assert metrics.accuracy == 3 / 5
    per_class = metrics.per_class()
    assert per_class["spam"] == {"precision": 1 / 2, "recall": 1 / 2, "f1": 1 / 2, "support": 2}
    assert per_class["ham"]["precision"] == 2 / 3 and per_class["ham"]["recall"] == 2 / 3
    assert metrics.macro_f1() == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert metrics.log_loss == pytest.approx(-sum(math.log(p) for *_, p in outcomes) / 5)
    assert metrics.confusion_matrix() == {"ham": {"ham": 2, "spam": 1}, "spam": {"ham": 1, "spam": 1}}


def test_replay_equals_a_hand_written_prequential_loop_for_any_batch_size():
    events = list(spam_ham_stream(1500, seed=3))
    featurizer = TextFeaturizer()
    model = MultinomialNB()
    hits = 0
    for event in events:
        guess = model.predict_one(featurizer.transform_one(event["text"]))
        hits += guess == event["label"]
        model.learn_one(featurizer.transform_one(event["text"]), event["label"])
    for batch_size in (1, 7, 1000):
        result = replay_events(events, MultinomialNB(), featurizer, batch_size=batch_size)
        assert result.metrics.correct == hits
        assert result.events == 1500


def test_generated_stream_drifts_and_is_deterministic():
    first = list(spam_ham_stream(4000, seed=1))
    assert first == list(spam_ham_stream(4000, seed=1))
    spam_words = [set(e["text"].split()) for e in first if e["label"] == "spam"]
    assert "bitcoin" not in set().union(*spam_words[:100]) and "bitcoin" in set().union(*spam_words[-100:])
    share = sum(e["label"] == "spam" for e in first) / len(first)
    assert 0.25 < share < 0.35


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "stream_nb.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_in_process_demo_runs_and_writes_a_report(tmp_path):
    done = run_cli("demo", "--no-kafka", "--events", "3000", "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["events"] == 3000
    assert report["accuracy"] > 0.9
    assert set(report["per_class"]) == {"ham", "spam"}
    assert "clues:" in done.stdout


def test_replay_command_reports_the_sms_corpus(tmp_path):
    from corpora import sms_spam_path

    done = run_cli("replay", "--input", str(sms_spam_path()), "--report", str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["events"] == 5574
    assert report["per_class"]["spam"]["support"] == 747
    assert report["accuracy"] > 0.975


# One bad line among good ones, in every format read_events reads: (file name, its bytes, the
# reason the bad line is counted under, and the start of the first one's detail)
GOOD = [("ham", "see you at lunch"), ("spam", "WIN a cash prize now"), ("ham", "call me later"),
        ("spam", "free entry txt WIN")]
BAD_LINE_FILES = [
    ("latin1.tsv", b"ham\tsee you at lunch\nspam\tWIN a cash prize now\nham\tcaf\xe9 at noon\n"
                   b"ham\tcall me later\nspam\tfree entry txt WIN\n", "invalid_utf8", ":3: invalid UTF-8 at byte 7"),
    ("no_tab.tsv", b"ham\tsee you at lunch\nspam\tWIN a cash prize now\nno tab on this line\n"
                   b"ham\tcall me later\nspam\tfree entry txt WIN\n", "missing_tab", ":3: expected 'label<TAB>text'"),
    ("latin1.txt", b"ham\tsee you at lunch\nspam\tWIN a cash prize now\nham\tna\xefve\n"
                   b"ham\tcall me later\nspam\tfree entry txt WIN\n", "invalid_utf8", ":3: invalid UTF-8 at byte 6"),
    ("latin1.csv", b"label,text\nham,see you at lunch\nspam,WIN a cash prize now\nham,caf\xe9 at noon\n"
                   b"ham,call me later\nspam,\"free entry txt WIN\"\n", "invalid_utf8",
     ":4: column 'text': invalid UTF-8 at byte 3"),
    ("huge_cell.csv", b"label,text\nham,see you at lunch\nspam,WIN a cash prize now\nham,\"" + b"x" * 1_000_001
                      + b"\"\nham,call me later\nspam,free entry txt WIN\n", "too_large", ":4: field larger than field limit"),
    ("latin1.jsonl", b'{"label": "ham", "text": "see you at lunch"}\n{"label": "spam", "text": "WIN a cash prize now"}\n'
                     b'{"label": "ham", "text": "caf\xe9"}\n{"label": "ham", "text": "call me later"}\n'
                     b'{"label": "spam", "text": "free entry txt WIN"}\n', "invalid_utf8", ":3: invalid UTF-8 at byte 29"),
    ("latin1.json", b'{"label": "ham", "text": "see you at lunch"}\n{"label": "spam", "text": "WIN a cash prize now"}\n'
                    b'{"label": "ham", "text": "na\xefve"}\n{"label": "ham", "text": "call me later"}\n'
                    b'{"label": "spam", "text": "free entry txt WIN"}\n', "invalid_utf8", ":3: invalid UTF-8 at byte 28"),
]


@pytest.mark.parametrize("name, content, reason, first", BAD_LINE_FILES, ids=[case[0] for case in BAD_LINE_FILES])
def test_one_bad_line_is_counted_under_its_reason_and_every_good_one_is_replayed(tmp_path, name, content, reason,
                                                                                  first):
    (tmp_path / name).write_bytes(content)
    done = run_cli("replay", "--input", str(tmp_path / name), "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["events"] == len(GOOD)  # every good line, before and after the bad one
    assert report["labeled_events_scored"] == len(GOOD) - 1  # the first is predicted by an empty model
    assert sum(scores["support"] for scores in report["per_class"].values()) == len(GOOD) - 1
    assert report["rejected_messages"] == {reason: 1}
    assert report["rejected_first"][reason].startswith(f"{tmp_path / name}{first}")
    # and the summary says so, not only report.json
    assert "rejected         1 skipped, as a worker dead-letters them" in done.stdout
    assert f"  {reason:24s} 1  first: {tmp_path / name}{first}" in done.stdout


def test_without_a_rejected_counter_a_line_that_is_not_utf8_is_an_error_naming_line_and_reason(tmp_path):
    # publish (no `rejected` counter) refuses the file instead, naming line and reason
    (tmp_path / "latin1.tsv").write_bytes(BAD_LINE_FILES[0][1])
    with pytest.raises(SourceError, match=r"latin1.tsv:3: not a valid event: invalid_utf8 \(invalid UTF-8 at byte 7"):
        list(read_events(tmp_path / "latin1.tsv"))


def test_strongest_clues_are_the_per_word_log_likelihood_ratios_of_seed_004():
    from stream_nb.model.explain import strongest_clues

    model = MultinomialNB()
    for label, text in [("-", "just plain boring"), ("-", "entirely predictable and lacks energy"),
                        ("-", "no surprises and very few laughs"), ("+", "very powerful"),
                        ("+", "the most fun film of the summer")]:
        model.learn_one({w: text.split().count(w) for w in text.split()}, label)
    clues = strongest_clues(model, {"predictable": 1, "with": 1, "no": 1, "fun": 1}, top=5)
    # predicted "-" against "+": log(2/34) - log(1/29) for predictable and no, log(1/34) - log(2/29) for fun
    assert [name for name, _ in clues] == ["predictable", "no", "fun"]
    assert clues[0][1] == pytest.approx(math.log(2 / 34) - math.log(1 / 29), abs=1e-6)
    assert clues[2][1] == pytest.approx(math.log(1 / 34) - math.log(2 / 29), abs=1e-6)


def test_build_model_names_unknown_kinds_and_options():
    from stream_nb.model.registry import build_model

    assert build_model("bernoulli", {"alpha": 0.5}).alpha == 0.5
    with pytest.raises(ValueError, match="unknown model kind 'svm'"):
        build_model("svm")
    with pytest.raises(ValueError, match="unknown option\\(s\\) alhpa for model kind 'multinomial'"):
        build_model("multinomial", {"alhpa": 1})


def test_replay_command_takes_a_config_and_overrides(tmp_path):
    from corpora import sms_spam_path

    config = Path(__file__).resolve().parents[1] / "configs" / "river_like.toml"
    done = run_cli("replay", "--input", str(sms_spam_path()), "--config", str(config), "--set", "model.alpha=0.5",
                   "--max-events", "2000", "--report", str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["events"] == 2000
    # the configuration as resolved: every model option, defaults filled in
    assert report["configuration"]["model"] == {"kind": "multinomial", "alpha": 0.5, "unknown": "smooth",
                                                "prior_alpha": 0.0, "n_hash_buckets": None}
    bad = run_cli("replay", "--input", str(sms_spam_path()), "--set", "model.alhpa=1", "--report", str(tmp_path / "b"))
    assert bad.returncode == 2
    assert bad.stderr.strip() == "stream-nb replay: model: unknown option(s) alhpa for model kind 'multinomial'; " \
                                 "accepted: alpha, evict_every, half_life, max_features, n_hash_buckets, prior_alpha, unknown"


@pytest.mark.parametrize("delay", [0, 1, 50])
def test_replay_equals_rivers_progressive_val_score_exactly(delay):
    from river import evaluate, feature_extraction, metrics, naive_bayes

    from stream_nb.replay.prequential import replay_events

    from corpora import load_sms_spam

    rows = load_sms_spam()
    accuracy, confusion = metrics.Accuracy(), metrics.ConfusionMatrix()
    river_model = feature_extraction.BagOfWords() | naive_bayes.MultinomialNB()
    evaluate.progressive_val_score([(text, label) for label, text in rows], river_model, accuracy + confusion,
                                   delay=delay or None)
    events = [{"id": str(i), "text": text, "label": label} for i, (label, text) in enumerate(rows)]
    result = replay_events(events, MultinomialNB(unknown="smooth"), TextFeaturizer.river_compatible(),
                           batch_size=700, delay=delay)
    ours = result.metrics
    assert ours.accuracy == accuracy.get()
    assert dict(ours.confusion) == {(t, p): confusion[t][p] for t in confusion.classes for p in confusion.classes
                                    if confusion[t][p]}
    assert ours.events + result.contenders[0].unscored == len(rows)
    if delay == 0:
        assert round(ours.accuracy, 4) == 0.9724  # River's figure in ANCHORS.md


def test_unsure_band_verdicts_follow_the_cutoffs():
    from stream_nb.model.decision import verdict

    band = (0.1, 0.9)
    assert verdict({"ham": 0.05, "spam": 0.95}, "spam", band) == "spam"
    assert verdict({"ham": 0.95, "spam": 0.05}, "spam", band) == "ham"
    assert verdict({"ham": 0.5, "spam": 0.5}, "spam", band) == "unsure"
    assert verdict({"ham": 0.1, "spam": 0.9}, "spam", band) == "spam"  # the cutoffs belong to the sure side
    assert verdict({}, "spam", band) is None


def test_clues_ranked_by_the_probabilities_equal_the_clues_of_a_second_scoring():
    # The worker ranks classes by the probabilities it already has; the definition scores the
    # event again. Equal on real SMS, and on three classes where two runner-ups tie at 0.0.
    from stream_nb.config import load_config
    from stream_nb.model.explain import strongest_clues

    from corpora import load_sms_spam

    rows = load_sms_spam()[:1200]
    featurizer = load_config(Path(__file__).parents[1] / "configs" / "spam.toml").build_featurizer()
    model = MultinomialNB(alpha=0.2)
    model.learn_many(featurizer.transform_many([text for _, text in rows[:1000]]), [label for label, _ in rows[:1000]])
    compared = 0
    for _, text in rows[1000:]:
        x = featurizer.transform_one(text)
        clues = strongest_clues(model, x, top=3, proba=model.predict_proba_one(x))
        assert clues == strongest_clues(model, x, top=3)
        compared += bool(clues)
    assert compared > 150
    three = MultinomialNB(alpha=0.0)
    three.learn_many([{"a": 5}, {"b": 1}, {"c": 1}], ["x", "y", "z"])
    x = {"a": 40}
    proba = three.predict_proba_one(x)
    assert proba["y"] == proba["z"] == 0.0  # alpha 0: both impossible, the ranking needs the scores
    assert strongest_clues(three, x, proba=proba) == strongest_clues(three, x)


@pytest.mark.parametrize("kind, alpha", [("multinomial", 0.2), ("complement", 0.5), ("bernoulli", 1.0),
                                         ("multinomial", 0.0)])
def test_clues_of_a_batch_equal_the_clues_of_each_event(kind, alpha):
    # The worker takes a poll's clues at once (strongest_clues_many); each list must be the one
    # strongest_clues gives for that event alone, to the last digit and in the same order.
    from stream_nb.config import load_config
    from stream_nb.model.explain import strongest_clues, strongest_clues_many
    from stream_nb.model.registry import build_model

    from corpora import load_sms_spam

    rows = load_sms_spam()[:1600]
    featurizer = load_config(Path(__file__).parents[1] / "configs" / "spam.toml").build_featurizer()
    model = build_model(kind, {"alpha": alpha})
    labels = [label if i % 7 else "other" for i, (label, _) in enumerate(rows)]  # three classes
    model.learn_many(featurizer.transform_sparse([text for _, text in rows[:1000]]), labels[:1000])
    X = featurizer.transform_sparse([text for _, text in rows[1000:]] + ["", "zzzunknownword qqq"])
    probabilities = model.predict_proba_many(X)
    probabilities[3] = None  # a dead-lettered event: no clues
    batch = strongest_clues_many(model, X, probabilities, top=4)
    assert batch[3] is None
    dicts = X.to_dicts()
    expected = [strongest_clues(model, dicts[i], top=4, proba=proba) if proba else None
                for i, proba in enumerate(probabilities)]
    assert batch == expected
    assert sum(len(clues) == 4 for clues in batch if clues) > 400
    # learned after the prediction (names of X added to the vocabulary): the batch's remembered
    # look-up is stale, and the clues must read the model as it is now
    vocabulary_before = len(model._vocabulary)
    model.learn_many(X[:300], labels[1000:1300])
    assert len(model._vocabulary) > vocabulary_before
    expected = [strongest_clues(model, dicts[i], top=4, proba=proba) if proba else None
                for i, proba in enumerate(probabilities)]
    assert strongest_clues_many(model, X, probabilities, top=4) == expected
    # one event alone: fewer logs per occurrence than per distinct feature and class
    one = X[10:11]
    assert strongest_clues_many(model, one, probabilities[10:11], top=4) == expected[10:11]


def test_clues_equal_the_formula_computed_over_arrays_and_rounded_by_numpy():
    # strongest_clues walks Python floats for speed; here the same definition over numpy arrays
    # (x_f [log P(f|c) - log P(f|k)], smoothed with alpha, learned features only), np.round'ed.
    from stream_nb.config import load_config
    from stream_nb.model.explain import _round6, strongest_clues

    from corpora import load_sms_spam

    rows = load_sms_spam()[:1500]
    featurizer = load_config(Path(__file__).parents[1] / "configs" / "spam.toml").build_featurizer()
    model = MultinomialNB(alpha=0.2)
    model.learn_many(featurizer.transform_many([text for _, text in rows[:1000]]), [label for label, _ in rows[:1000]])
    counts, totals, alpha = model._feature_counts, model._class_totals, model.alpha
    seen = model._features_seen
    compared = 0
    for _, text in rows[1000:]:
        x = featurizer.transform_one(text)
        proba = model.predict_proba_one(x)
        c, k = (model._class_index[label] for label in sorted(proba, key=proba.get, reverse=True)[:2])
        names = [name for name in x if x[name] and model._vocabulary.lookup([name])[0] >= 0]
        names = [name for name in names if counts[model._vocabulary.lookup([name])[0]].any()]
        if not names:
            continue
        columns = model._vocabulary.lookup(names)
        values = np.array([x[name] for name in names], dtype=float)
        evidence = values * (np.log((counts[columns, c] + alpha) / (totals[c] + alpha * seen))
                             - np.log((counts[columns, k] + alpha) / (totals[k] + alpha * seen)))
        order = sorted(range(len(names)), key=lambda i: -evidence[i])[:3]
        expected = [(names[i], float(np.round(evidence[i], 6))) for i in order]
        got = strongest_clues(model, x, top=3, proba=proba)
        assert [name for name, _ in got] == [name for name, _ in expected]
        assert np.allclose([v for _, v in got], [v for _, v in expected], rtol=0, atol=2e-6)
        compared += 1
    assert compared > 400
    edges = [0.0, -0.0, -4e-7, 4e-7, 5e-7, -5e-7, 1.5e-6, 2.5e-6, -2.5e-6, 123.4567895, 1e300, np.inf, -np.inf]
    rng = np.random.default_rng(4)
    for value in [*edges, *rng.uniform(-60, 60, 20_000).tolist(), *rng.uniform(-1e-5, 1e-5, 20_000).tolist()]:
        assert repr(_round6(value)) == repr(float(np.round(value, 6))), value


def test_predictions_carry_verdict_and_clues_only_when_asked():
    from stream_nb.events import Event, SourcePosition, encode_prediction

    event = Event("e1", "win cash", None, None, SourcePosition("t", 0, 7))
    _, plain = encode_prediction(event, {"ham": 0.2, "spam": 0.8}, events_learned=3, checkpoint=None)
    assert set(json.loads(plain)) == {"id", "label", "proba", "model", "source"}
    _, full = encode_prediction(event, {"ham": 0.2, "spam": 0.8}, events_learned=3, checkpoint=None,
                                verdict="unsure", clues=[("cash", 2.5), ("win", 1.25)])
    message = json.loads(full)
    assert message["verdict"] == "unsure" and message["clues"] == [["cash", 2.5], ["win", 1.25]]


def test_replay_report_gives_the_unsure_share_and_sure_accuracy(tmp_path):
    from corpora import sms_spam_path

    done = run_cli("replay", "--input", str(sms_spam_path()), "--config", "configs/spam.toml",
                   "--max-events", "1500", "--report", str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    band = report["unsure_band"]
    assert band["band"] == [0.1, 0.9] and band["positive"] == "spam"
    assert 0 < band["unsure"] < 0.1 * report["labeled_events_scored"]
    assert band["sure_accuracy"] > report["accuracy"]  # the unsure ones are the hard ones


@pytest.mark.parametrize("mode, delay", [("thick_threshold", 0), ("thick_threshold", 30), ("on_error", 0), ("all", 30)])
def test_replay_with_spam_toml_is_the_same_byte_for_byte_at_any_batch_size(tmp_path, mode, delay):
    # Order-dependent training goes a window at a time in batches and one event at a time at
    # --batch-size 1; scores.csv and every figure must not tell them apart. Real SMS, with
    # unlabeled events mixed in and labels arriving late.
    from stream_nb.config import load_config
    from stream_nb.replay.cli import replay_and_report

    from corpora import load_sms_spam

    rows = load_sms_spam()[:1500]
    events = [{"id": f"s{i}", "text": text, "label": None if i % 9 == 4 else label}
              for i, (label, text) in enumerate(rows)]
    config = load_config(Path(__file__).parents[1] / "configs" / "spam.toml", [f'training.mode="{mode}"'])
    figures = {}
    for batch_size in (1, 500):
        report_dir = tmp_path / f"batch-{batch_size}"
        _, _, reports = replay_and_report(iter(events), [("spam", config)], report_dir, batch_size=batch_size,
                                          delay=delay, scores=True)
        figures[batch_size] = ((report_dir / "scores.csv").read_bytes(),
                               {key: reports[0][key] for key in ("accuracy", "events_learned", "log_loss", "roc_auc")})
    assert figures[1] == figures[500]
    learned = figures[500][1]["events_learned"]
    labeled = sum(event["label"] is not None for event in events)
    assert (learned == labeled) if mode == "all" else (0 < learned < labeled)


def test_a_batch_is_cut_around_each_event_that_brings_a_class_the_model_lacks():
    """The pieces replay learns a batch in: each event whose label is a class the model has not
    learned (nor an earlier event of the batch) alone, the stretches between whole; a model
    that knows every class takes the batch in one piece."""
    from stream_nb.replay.prequential import _class_pieces

    model = MultinomialNB()
    labels = ["ham", "ham", None, "spam", "ham", "spam", "eggs", None]
    assert _class_pieces(model, labels, 0, 8) == [(0, 1), (1, 3), (3, 4), (4, 6), (6, 7), (7, 8)]
    assert _class_pieces(model, labels, 2, 6) == [(2, 3), (3, 4), (4, 5), (5, 6)]
    assert _class_pieces(model, [None, None], 0, 2) == [(0, 2)]
    model.learn_one({"a": 1}, "ham")
    assert _class_pieces(model, labels, 0, 8) == [(0, 3), (3, 4), (4, 6), (6, 7), (7, 8)]
    model.learn_one({"b": 1}, "spam")
    model.learn_one({"c": 1}, "eggs")
    assert _class_pieces(model, labels, 0, 8) == [(0, 8)]
    assert _class_pieces(model, labels, 3, 3) == []

