"""`stream-nb replay` as a user meets it: labels of any name, an empty stream, --set for every
compared configuration, Ctrl-C. The report is always written; nothing fails after the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stream_nb.replay.generator import spam_ham_stream

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SPAM_TOML = str(CONFIGS / "spam.toml")
# spam.toml names "spam" the positive class; these labels are not spam and ham
FOUR_EVENTS = "a\thello there friend\nb\twin cash now\na\tlunch later?\nb\tfree cash prize\n"
# spam.toml declares its classes, ham and spam: these tests declare theirs
AB = ("--set", 'model.classes=["a", "b"]')
SKIPPED = ("positive class 'spam' is not among the labels ['a', 'b']: the binary measures (TREC, the positive "
           "class's ROC and F1) are skipped; name the positive class with [evaluation] positive")


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stream_nb.cli", "replay", *args], capture_output=True, text=True,
                          timeout=300)


def test_labels_other_than_the_configured_positive_class_still_give_the_report(tmp_path):
    (tmp_path / "ab.tsv").write_text(FOUR_EVENTS, encoding="utf-8")
    done = replay("--input", str(tmp_path / "ab.tsv"), "--config", SPAM_TOML, *AB, "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    # 1st event: no class yet (unscored); 2nd: only "a" known, wrong; 3rd: every word unknown,
    # equal priors, the first class; 4th: "cash" was seen in "b" only
    assert report["events"] == 4 and report["labeled_events_scored"] == 3
    assert report["accuracy"] == 2 / 3
    assert report["confusion_matrix"] == {"a": {"a": 1}, "b": {"a": 1, "b": 1}}
    assert report["binary_measures_skipped"] == SKIPPED
    assert report["positive"] is None and report["roc_auc_kind"] == "macro one-vs-rest"
    assert "trec" not in report and "unsure_band" not in report
    assert f"note             {SKIPPED}" in done.stdout.splitlines()
    assert (tmp_path / "r" / "curve.png").stat().st_size > 0 and (tmp_path / "r" / "roc.png").stat().st_size > 0

    named = replay("--input", str(tmp_path / "ab.tsv"), "--config", SPAM_TOML, *AB, "--set", 'evaluation.positive="b"',
                   "--report", str(tmp_path / "named"))
    assert named.returncode == 0, named.stderr
    report = json.loads((tmp_path / "named" / "report.json").read_text())
    assert report["positive"] == "b" and "binary_measures_skipped" not in report
    # TREC: ham misclassification 0 of 1 "a", spam misclassification 1 of 2 "b"
    assert (report["trec"]["hm_percent"], report["trec"]["sm_percent"]) == (0.0, 50.0)


def test_an_empty_stream_gives_an_empty_report_not_an_error(tmp_path):
    (tmp_path / "empty.tsv").write_text("", encoding="utf-8")
    done = replay("--input", str(tmp_path / "empty.tsv"), "--config", SPAM_TOML, "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert (report["events"], report["labeled_events_scored"], report["events_learned"]) == (0, 0, 0)
    assert report["binary_measures_skipped"] == "no labeled event was scored: there is nothing to measure"
    assert "last predictions" not in done.stdout


def test_set_applies_to_the_compared_configurations_too(tmp_path):
    lines = [f"{event['label']}\t{event['text']}" for event in spam_ham_stream(300)]
    (tmp_path / "s.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = replay("--input", str(tmp_path / "s.tsv"), "--config", SPAM_TOML, "--compare",
                  str(CONFIGS / "river_like.toml"), "--set", "model.alpha=0.5", "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (compared,) = report["compared"]
    assert report["configuration"]["model"]["alpha"] == 0.5
    assert compared["configuration"]["model"]["alpha"] == 0.5
    assert compared["configuration"]["model"]["unknown"] == "smooth"  # river_like.toml's own settings stay
    # each configuration's own rate (one rate for all was printed before), and its spam-filter figures
    assert report["events_per_s"] != compared["events_per_s"] and min(report["events_per_s"],
                                                                       compared["events_per_s"]) > 0
    table = done.stdout[done.stdout.index("configurations side by side"):].splitlines()[1:3]
    for line, shown in zip(table, (report, compared)):
        trec = shown["trec"]
        assert f"1-ROCA% {trec['one_minus_roca_percent']:.3f}" in line and f"sm% {trec['sm_percent']:.3f}" in line
        assert line.endswith(f"  {shown['events_per_s']:,.0f} events/s"), line
    spam_filter = next(line for line in done.stdout.splitlines() if line.startswith("spam filter "))
    assert f"1-ROCA% {report['trec']['one_minus_roca_percent']:.3f}" in spam_filter
    assert f"hm% {report['trec']['hm_percent']:.3f}" in spam_filter


def test_ctrl_c_ends_the_replay_at_a_batch_boundary_with_a_partial_report(tmp_path):
    total = 300_000
    lines = [f"{event['label']}\t{event['text']}" for event in spam_ham_stream(total)]
    (tmp_path / "big.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "stream_nb.cli", "replay", "--input", str(tmp_path / "big.tsv"),
                                "--config", SPAM_TOML, "--batch-size", "500", "--report", str(tmp_path / "r")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        while not (seen and seen[-1].startswith("events ")):  # the progress line after the first batch
            seen.append(process.stderr.readline())
            assert seen[-1], "".join(seen)  # the replay ended before it showed progress
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted; finishing this batch and writing the report" in stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["interrupted"] is True
    assert 0 < report["events"] < total and report["events"] % 500 == 0
    assert stdout.startswith("interrupted ")
    assert f"events           {report['events']:,} " in stdout


def test_a_pre_tokenised_jsonl_scores_as_rivers_progressive_val_score_on_the_same_dicts(tmp_path):
    # The event contract's features-only events {"id", "features": {token: count}, "label"}
    # through `stream-nb replay --input`, against River's MultinomialNB evaluated by River's own
    # progressive_val_score on the same dicts (which, as replay, does not score the first event).
    from river import evaluate, metrics
    from river.naive_bayes import MultinomialNB

    from stream_nb.features import TextFeaturizer

    tokens = TextFeaturizer.river_compatible()
    stream = [(tokens.transform_one(event["text"]), event["label"]) for event in spam_ham_stream(1_500, seed=5)]
    (tmp_path / "tokens.jsonl").write_text(
        "".join(json.dumps({"id": f"e{i}", "features": x, "label": y}) + "\n" for i, (x, y) in enumerate(stream)),
        encoding="utf-8")
    (tmp_path / "nb.toml").write_text('[model]\nkind = "multinomial"\nalpha = 1.0\nunknown = "smooth"\n',
                                      encoding="utf-8")
    done = replay("--input", str(tmp_path / "tokens.jsonl"), "--config", str(tmp_path / "nb.toml"),
                  "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())

    river_accuracy = evaluate.progressive_val_score(stream, MultinomialNB(alpha=1.0), metrics.Accuracy())
    assert (report["events"], report["labeled_events_scored"]) == (1_500, 1_499)
    assert report["accuracy"] == river_accuracy.get()
    assert 0.8 < report["accuracy"] < 1.0  # a stream with drift: neither trivial nor broken
    assert "last predictions, with their strongest clues:" in done.stdout  # clues from the features


def test_features_only_events_with_unlabeled_ones_mixed_in(tmp_path):
    lines = [{"id": "1", "features": {"cash": 2, "win": 1}, "label": "spam"},
             {"id": "2", "features": {"lunch": 1}, "label": "ham"},
             {"id": "3", "features": {"cash": 1}},  # unlabeled: predicted, not scored
             {"id": "4", "features": {"cash": 1, "prize": 1}, "label": "spam"},
             {"id": "5", "text": "lunch at noon", "label": "ham"}]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = replay("--input", str(tmp_path / "mixed.jsonl"), "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    # 1: no class yet; 2: only spam known, wrong; 4: cash seen in spam only, right; 5: lunch, right
    assert (report["events"], report["labeled_events_scored"], report["events_learned"]) == (5, 3, 4)
    assert report["accuracy"] == 2 / 3
    assert "'lunch at noon'" in done.stdout and '{"cash":1,"prize":1}' in done.stdout


def iris_jsonl(path: Path) -> list:
    """Seed 001's protocol as a stream: the train half of train_test_split(test_size=0.5,
    random_state=0) labeled, then the test half unlabeled. Returns the test half's labels."""
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    X, y = load_iris(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)
    lines = [{"id": f"train{i}", "features": {str(j): float(v) for j, v in enumerate(row)}, "label": int(label)}
             for i, (row, label) in enumerate(zip(X_train, y_train))]
    lines += [{"id": f"test{i}", "features": {str(j): float(v) for j, v in enumerate(row)}}
              for i, row in enumerate(X_test)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return y_test.tolist()


def predictions_right(report_dir: Path, truth: list) -> int:
    lines = [json.loads(line) for line in (report_dir / "predictions.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == [f"test{i}" for i in range(len(truth))]
    return sum(line["label"] == label for line, label in zip(lines, truth))


def test_seed_001_iris_as_categories_from_configuration_predicts_68_of_75(tmp_path):
    truth = iris_jsonl(tmp_path / "iris.jsonl")
    (tmp_path / "cat.toml").write_text('[model]\nkind = "categorical"\nalpha = 1.0\nprior_alpha = 1.0\n',
                                       encoding="utf-8")
    done = replay("--input", str(tmp_path / "iris.jsonl"), "--config", str(tmp_path / "cat.toml"),
                  "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    assert predictions_right(tmp_path / "r", truth) == 68 and len(truth) == 75  # the seed's 0.9
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert (report["events"], report["events_learned"]) == (150, 75)


def test_iris_gaussian_from_configuration_predicts_as_scikit_learn(tmp_path):
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split
    from sklearn.naive_bayes import GaussianNB

    truth = iris_jsonl(tmp_path / "iris.jsonl")
    X, y = load_iris(return_X_y=True)
    X_train, X_test, y_train, _ = train_test_split(X, y, test_size=0.5, random_state=0)
    expected = GaussianNB().fit(X_train, y_train).predict(X_test).tolist()
    done = replay("--input", str(tmp_path / "iris.jsonl"), "--set", 'model.kind="gaussian"',
                  "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (tmp_path / "r" / "predictions.jsonl").read_text().splitlines()]
    assert [line["label"] for line in lines] == expected
    assert predictions_right(tmp_path / "r", truth) == sum(p == t for p, t in zip(expected, truth))


def test_a_model_that_cannot_read_the_events_says_so(tmp_path):
    # Known up front: text options for a model without text, one line naming the key.
    (tmp_path / "ab.tsv").write_text(FOUR_EVENTS, encoding="utf-8")
    done = replay("--input", str(tmp_path / "ab.tsv"), "--config", SPAM_TOML, "--set", 'model.kind="gaussian"',
                  "--report", str(tmp_path / "r"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()] and "model.kind = 'gaussian' reads no text" in done.stderr
    # Known per event: text into a Gaussian model, a negative count into a multinomial one. Each
    # refused event is skipped and counted under the worker's dead-letter reason; the rest run.
    lines = [{"id": "1", "features": {"x": 1.0}, "label": "a"}, {"id": "2", "text": "words", "label": "b"},
             {"id": "3", "features": {"x": 5.0}, "label": "b"}, {"id": "4", "features": {"x": 1.2}, "label": "a"}]
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = replay("--input", str(tmp_path / "g.jsonl"), "--set", 'model.kind="gaussian"', "--report", str(tmp_path / "g"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "g" / "report.json").read_text())
    assert report["rejected_messages"] == {"rejected_by_model": 1} and report["events_learned"] == 3
    assert "event '2': the event has text, but model.kind = 'gaussian'" in report["refused_by_model"]
    lines = [{"id": "1", "features": {"cash": 2}, "label": "spam"}, {"id": "2", "features": {"cash": -1}, "label": "ham"},
             {"id": "3", "text": "lunch", "label": "ham"}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = replay("--input", str(tmp_path / "m.jsonl"), "--report", str(tmp_path / "m"))
    assert done.returncode == 0, done.stderr  # the probe: a traceback, and no report
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert report["rejected_messages"] == {"rejected_by_model": 1} and report["events_learned"] == 2
    assert "note             1 events refused and skipped" in done.stdout


def test_the_demo_without_kafka_takes_features_only_events(tmp_path):
    lines = [{"id": f"e{i}", "features": {"cash": i % 3, "lunch": 2 - i % 3, "tone": "loud" if i % 2 else "calm"},
              "label": "spam" if i % 3 else "ham"} for i in range(60)]
    lines += [{"id": f"u{i}", "features": {"cash": 2}} for i in range(5)]  # unlabeled: predicted
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "demo", "--no-kafka", "--data", str(tmp_path / "f.jsonl"),
                           "--report", str(tmp_path / "r")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["events"] == 65 and report["labeled_events_scored"] == 59 and report["rejected_messages"] == {}
    predicted = [json.loads(line) for line in (tmp_path / "r" / "predictions.jsonl").read_text().splitlines()]
    assert [(p["id"], p["label"]) for p in predicted] == [(f"u{i}", "spam") for i in range(5)]
    assert report["accuracy"] > 0.9  # cash says spam, lunch says ham
    assert '{"cash":' in done.stdout  # its last predictions, shown by their features


def test_the_demo_with_a_file_counts_its_bad_lines_and_replays_the_others_with_spam_toml(tmp_path):
    # the probe: one Latin-1 line ended `demo --data` with "'utf-8' codec can't decode byte 0xe9"
    good = [f"{event['label']}\t{event['text']}".encode() for event in spam_ham_stream(200)]
    lines = good[:50] + [b"ham\tcaf\xe9 at noon", b"a line without a tab"] + good[50:]
    (tmp_path / "mixed.tsv").write_bytes(b"\n".join(lines) + b"\n")
    done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "demo", "--no-kafka", "--config", SPAM_TOML,
                           "--data", str(tmp_path / "mixed.tsv"), "--report", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["events"] == 200 and report["labeled_events_scored"] == 199
    assert report["rejected_messages"] == {"invalid_utf8": 1, "missing_tab": 1}
    assert report["rejected_first"]["missing_tab"] == f"{tmp_path / 'mixed.tsv'}:52: expected 'label<TAB>text'"
    assert "rejected         2 skipped" in done.stdout
    assert f"  invalid_utf8             1  first: {tmp_path / 'mixed.tsv'}:51: invalid UTF-8 at byte 7" in done.stdout


def test_labels_beyond_max_classes_are_refused_and_counted(tmp_path):
    # The probe: 1,000 labels grew a 117 MB checkpoint and 34 KB predictions. Beyond [model]
    # max_classes a new label is set aside; known labels go on being learned.
    labels = ["a", "b", "c", "d", "a", "e", "b", "d"]
    lines = [{"id": str(i), "features": {f"w{label}": 1}, "label": label} for i, label in enumerate(labels)]
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = replay("--input", str(tmp_path / "l.jsonl"), "--set", "model.max_classes=3", "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["rejected_messages"] == {"too_many_classes": 3}  # d, e, d
    assert report["events_learned"] == 5 and set(report["per_class"]) == {"a", "b", "c"}
    assert "label 'd' would be class 4; [model] max_classes = 3" in report["refused_by_model"]
    bad = replay("--input", str(tmp_path / "l.jsonl"), "--set", "model.max_classes=1", "--report", str(tmp_path / "x"))
    assert bad.returncode == 2 and "model.max_classes: must be a whole number >= 2, got 1" in bad.stderr


def test_the_command_line_collects_the_young_generation_less_often():
    import gc

    from stream_nb.cli import YOUNG_GENERATION_THRESHOLD, tune_garbage_collector

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_garbage_collector()
        assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, 10, 10)
        gc.set_threshold(0, 10, 10)  # collection switched off by the user: left off
        tune_garbage_collector()
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*saved)


def test_replay_of_a_topic_requires_only_the_kafka_keys_it_uses_and_the_worker_still_requires_its_own():
    # The probe: `replay --topic T --set kafka.bootstrap_servers=...` without --config failed with
    # "kafka.predictions_topic: required", a key replay does not use. Now it gets as far as the
    # broker (none answers on port 9 here: one line saying so).
    done = replay("--topic", "T", "--set", 'kafka.bootstrap_servers="127.0.0.1:9"', "--report", "unused")
    assert done.returncode == 2
    assert "predictions_topic" not in done.stderr and "127.0.0.1:9" in done.stderr.strip().splitlines()[-1]
    from stream_nb.config import ConfigError, load_config

    config = load_config(None, ['kafka.bootstrap_servers="127.0.0.1:9"', 'kafka.labeled_topics=["T"]'])
    with pytest.raises(ConfigError, match=r"^kafka.predictions_topic: required \(defaults\)$"):
        config.require_kafka()
    config.kafka["predictions_topic"] = "p"
    with pytest.raises(ConfigError, match=r"^kafka.dead_letter_topic: required"):
        config.require_kafka()
    config = load_config(None, ['kafka.bootstrap_servers="127.0.0.1:9"', 'kafka.predictions_topic="p"',
                                'kafka.dead_letter_topic="d"'])
    with pytest.raises(ConfigError, match="kafka.labeled_topics: no topic to read"):
        config.require_kafka()
    # and `stream-nb run` says so before it looks for a broker
    run = subprocess.run([sys.executable, "-m", "stream_nb.cli", "run", "--config", SPAM_TOML, "--set",
                          'kafka.predictions_topic=""', "--bootstrap", "127.0.0.1:9"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == f"stream-nb run: kafka.predictions_topic: required ({SPAM_TOML})"


def test_a_second_ctrl_c_stops_the_replay_at_once_with_one_line_and_no_traceback(tmp_path):
    total, batch = 300_000, 100_000  # a batch takes a second or more: the second Ctrl-C lands in one
    lines = [f"{event['label']}\t{event['text']}" for event in spam_ham_stream(total)]
    (tmp_path / "big.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "stream_nb.cli", "replay", "--input", str(tmp_path / "big.tsv"),
                                "--config", SPAM_TOML, "--batch-size", str(batch), "--report", str(tmp_path / "r")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        while not (seen and seen[-1].startswith("events ")):  # the progress line after the first batch
            seen.append(process.stderr.readline())
            assert seen[-1], "".join(seen)
        process.send_signal(signal.SIGINT)
        while "interrupted; finishing this batch" not in seen[-1]:  # the first one was taken
            seen.append(process.stderr.readline())
            assert seen[-1], "".join(seen)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stderr.strip().splitlines()[-1] == "stream-nb replay: interrupted again; stopped at once, the report is not written"
    assert not (tmp_path / "r" / "report.json").exists() and stdout == ""


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered as in the docker image"])
def test_a_reader_that_went_away_ends_the_replay_quietly_as_unix_tools_do(tmp_path, unbuffered):
    # `stream-nb replay ... | head -1` ended in a BrokenPipeError traceback. Here the pipe's read end
    # is closed before the replay writes a line, so every write to stdout fails.
    (tmp_path / "ab.tsv").write_text(FOUR_EVENTS, encoding="utf-8")
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    try:
        done = subprocess.run([sys.executable, "-m", "stream_nb.cli", "replay", "--input", str(tmp_path / "ab.tsv"),
                               "--report", str(tmp_path / "r")], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              env=env, timeout=300)
    finally:
        os.close(write_end)
    assert done.returncode == 141  # 128 + SIGPIPE, as a shell reports a tool that SIGPIPE ended
    assert done.stderr.startswith("events 4  ")  # the progress line, and nothing after it:
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr  # nor "Exception ignored"
    assert json.loads((tmp_path / "r" / "report.json").read_text())["events"] == 4  # written before the summary


def test_the_demo_counts_what_the_worker_did_in_this_run_not_what_it_restored():
    # The probe: `demo --resume` waited on the count the worker restored from the last run's
    # checkpoint ("processed 20,000 (202,107/s)") and read the predictions before they were made.
    from types import SimpleNamespace

    from stream_nb.demo import _ThisRun
    from stream_nb.replay.metrics import PrequentialMetrics

    metrics = PrequentialMetrics()
    for _ in range(10):
        metrics.update("spam", "ham", {"ham": 0.6, "spam": 0.4})  # the last run's: all wrong
    worker = SimpleNamespace(_processed=20_000, metrics=metrics)
    this_run = _ThisRun(worker)
    assert (this_run.processed, this_run.accuracy) == (0, 0.0)
    worker._processed += 300
    for _ in range(4):
        metrics.update("spam", "spam", {"spam": 0.9, "ham": 0.1})
    assert (this_run.processed, this_run.accuracy) == (300, 1.0)
def test_a_stray_label_is_counted_as_undeclared_label_and_makes_no_class(tmp_path):
    # spam.toml declares ham and spam: the label 1 is refused, as a worker dead-letters it
    lines = [{"id": "h", "text": "lunch at noon", "label": "ham"}, {"id": "x", "text": "t", "label": 1},
             {"id": "s", "text": "win cash now", "label": "spam"}, {"id": "y", "text": "hello", "label": "eggs"},
             {"id": "u", "text": "free cash"}]
    (tmp_path / "stray.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = replay("--input", str(tmp_path / "stray.jsonl"), "--config", SPAM_TOML, "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["rejected_messages"] == {"undeclared_label": 2}
    assert report["events_learned"] == 2 and set(report["per_class"]) == {"ham", "spam"}
    predicted = [json.loads(line) for line in (tmp_path / "r" / "predictions.jsonl").read_text().splitlines()]
    assert [(p["id"], set(p["proba"])) for p in predicted] == [("u", {"ham", "spam"})]
