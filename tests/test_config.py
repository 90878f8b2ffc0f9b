"""Configuration files: the shipped configs load, overrides apply, errors name the key."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from stream_nb import ComplementNB, MultinomialNB
from stream_nb.config import BOUNDS, MAX_MESSAGE_BYTES, ConfigError, load_config
from stream_nb.features import TextFeaturizer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
KAFKA = '[kafka]\nbootstrap_servers = "h:9092"\npredictions_topic = "p"\ndead_letter_topic = "d"\nunlabeled_topics = ["u"]\n'


def test_shipped_configs_load_and_build():
    spam = load_config(CONFIGS / "spam.toml")
    model = spam.build_model()
    assert isinstance(model, MultinomialNB) and model.alpha == 0.2 and model.unknown == "ignore"
    assert model.half_life == 10000 and model.evict_every == 1000
    featurizer = spam.build_featurizer()
    assert featurizer.max_tokens == 5000 and featurizer.binary and featurizer.ngram_range == (1, 2)
    assert featurizer.subject_features
    assert spam.training == {"mode": "thick_threshold", "margin": 50.0}
    assert spam.evaluation["positive"] == "spam"


def test_river_like_config_gives_rivers_tokens():
    config = load_config(CONFIGS / "river_like.toml")
    assert config.build_featurizer() == TextFeaturizer.river_compatible()
    assert config.build_model().unknown == "smooth"


def test_overrides_are_read_as_toml_values():
    config = load_config(CONFIGS / "spam.toml", ["model.kind=complement", "model.alpha=0.25",
                                                 "features.ngram_range=[1, 2]", "features.lowercase=false"])
    model = config.build_model()
    assert isinstance(model, ComplementNB) and model.alpha == 0.25
    featurizer = config.build_featurizer()
    assert featurizer.ngram_range == (1, 2) and featurizer.lowercase is False


@pytest.mark.parametrize(
    "content, overrides, message",
    [
        ("[model]\nalhpa = 1\n", [], "model: unknown option\\(s\\) alhpa"),
        ("[model]\nalpha = -1\n", [], "model: alpha must be a finite number >= 0"),
        ("[model]\nkind = 'gaussian'\n[features]\nlowercase = true\n", [],
         "features.lowercase: a text option, but model.kind = 'gaussian' reads no text"),
        ("[model]\nkind = 'categorical'\n[features]\nnumeric = ['x']\n", [],
         "features.numeric: model.kind = 'categorical' reads categories only; list its fields under features.categorical"),
        ("[model]\nkind = 'gaussian'\n[features]\ncategorical = ['x']\n", [],
         "features.categorical: model.kind = 'gaussian' reads numbers only; list its fields under features.numeric"),
        ("[features]\nngram_range = [2, 1]\n", [], "features: .*ngram_range"),
        ("[featurse]\nbinary = true\n", [], "featurse: unknown section"),
        ("[model\n", [], "not valid TOML"),
        ("", ["alpha=1"], "expected section.key=value"),
        ("", ["model.unknown=drop"], "model: unknown must be 'ignore' or 'smooth'"),
        (KAFKA, ['kafka.transport="librdkafka"'], "kafka.transport: 'librdkafka' is not one of kafka-python, confluent-kafka"),
        (KAFKA + 'client = "confluent-kafka"\n', [], "kafka.client: a table of client options; the client library is "
                                                   "chosen with kafka.transport = 'confluent-kafka'"),
    ],
)
def test_bad_configuration_names_the_key(tmp_path, content, overrides, message):
    path = tmp_path / "bad.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_config(path, overrides)


def test_missing_file_is_reported():
    with pytest.raises(ConfigError, match="no such file"):
        load_config("does/not/exist.toml")


def test_fingerprint_ignores_spelled_out_defaults_but_not_real_changes():
    from stream_nb.checkpoint import config_fingerprint

    plain = load_config(CONFIGS / "spam.toml")
    spelled = load_config(CONFIGS / "spam.toml", ["features.strip_accents=false", "model.prior_alpha=0"])
    changed = load_config(CONFIGS / "spam.toml", ["model.alpha=0.5"])
    assert config_fingerprint(plain.resolved()) == config_fingerprint(spelled.resolved())
    assert config_fingerprint(plain.resolved()) != config_fingerprint(changed.resolved())


def test_half_life_zero_turns_a_configurations_forgetting_off():
    from stream_nb.checkpoint import config_fingerprint

    off = load_config(CONFIGS / "spam.toml", ["model.half_life=0"])
    assert off.build_model().half_life is None
    assert "half_life" not in off.resolved()["model"] and "half_life" in load_config(CONFIGS / "spam.toml").resolved()["model"]
    # 0 is "none", the same configuration as leaving it out: a checkpoint taken without it still loads
    river = load_config(CONFIGS / "river_like.toml")
    assert config_fingerprint(load_config(CONFIGS / "river_like.toml", ["model.half_life=0"]).resolved()) \
        == config_fingerprint(river.resolved())
    with pytest.raises(ConfigError, match="half_life must be a positive number"):
        load_config(CONFIGS / "spam.toml", ["model.half_life=-5"]).build_model()
    with pytest.raises(ConfigError, match="half_life must be a positive number"):
        load_config(CONFIGS / "spam.toml", ["model.half_life=false"]).build_model()


@pytest.mark.parametrize("overrides, why", [
    ([], "training.mode is order-dependent"),
    (['training.mode="all"'], "model.half_life decays on the labeled-event clock"),
    (['training.mode="all"', "model.half_life=0", "model.max_features=1000"],
     "model.max_features evicts on the labeled-event clock"),
    (['training.mode="all"', "model.half_life=0", "model.n_hash_buckets=1024"], None),
    (['training.mode="all"', "model.half_life=0"], None),
])
def test_what_makes_the_state_depend_on_the_order_of_the_labeled_events(overrides, why):
    config = load_config(CONFIGS / "spam.toml", overrides)
    assert (config.order_dependence or (None,))[0] == why
    assert config.order_dependent is (why is not None)


def test_the_transport_is_kafka_python_unless_chosen(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text(KAFKA, encoding="utf-8")
    assert load_config(path).kafka["transport"] == "kafka-python"
    chosen = load_config(path, ['kafka.transport="confluent-kafka"'])
    assert chosen.kafka["transport"] == "confluent-kafka"
    # the model's fingerprint does not depend on the client library: a checkpoint moves across
    from stream_nb.checkpoint import config_fingerprint

    assert config_fingerprint(chosen.resolved()) == config_fingerprint(load_config(path).resolved())


def test_a_featuriser_error_names_its_section_once():
    with pytest.raises(ConfigError) as raised:
        load_config(None, ["features.ngram_range=[3, 1]"])
    assert str(raised.value) == "features: ngram_range must satisfy 1 <= min_n <= max_n, got (3, 1)"


@pytest.mark.parametrize("servers, bad", [
    ("127.0.0.1:9092", None), ("localhost", None), ("a:1,b:65535", None), (["h:9092", "g:9093"], None),
    ("[::1]:9092", None), ("127.0.0.1:PORT", "127.0.0.1:PORT"), ("h:0", "h:0"), ("h:70000", "h:70000"),
    (":9092", ":9092"), ("a:1,b:x", "b:x"),
])
def test_bootstrap_servers_are_host_and_port(servers, bad):
    from stream_nb.config import bootstrap_problem

    problem = bootstrap_problem(servers)
    assert problem == (None if bad is None else
                       f"{bad!r} is not host:port with a port from 1 to 65535 (a local broker's address: "
                       "`stream-nb kafka start` or `stream-nb kafka status`)")


def test_every_command_refuses_the_readmes_placeholder_port_in_one_line(tmp_path):
    """The README's `--set kafka.bootstrap_servers='"127.0.0.1:PORT"'`, copied as printed."""
    import subprocess
    import sys

    (tmp_path / "a.tsv").write_text("ham\thello\n", encoding="utf-8")
    spam = str(Path(__file__).resolve().parents[1] / "configs" / "spam.toml")
    why = ("'127.0.0.1:PORT' is not host:port with a port from 1 to 65535 (a local broker's address: "
           "`stream-nb kafka start` or `stream-nb kafka status`)")
    commands = {
        ("run", "--config", spam, "--set", 'kafka.bootstrap_servers="127.0.0.1:PORT"'):
            f"stream-nb run: kafka.bootstrap_servers: {why}",
        ("replay", "--topic", "t", "--config", spam, "--bootstrap", "127.0.0.1:PORT", "--report", str(tmp_path / "r")):
            f"stream-nb replay: --bootstrap: {why}",
        ("publish", str(tmp_path / "a.tsv"), "--topic", "t", "--bootstrap", "127.0.0.1:PORT"):
            f"stream-nb publish: error: --bootstrap: {why}",
    }
    for args, line in commands.items():
        done = subprocess.run([sys.executable, "-m", "stream_nb.cli", *args], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(CONFIGS.parent)})
        assert (done.returncode, done.stderr.strip()) == (2, line), args


def toml_with(key: str, value) -> str:
    """A configuration with [kafka] (the worker's), and `key` ("section.key" or
    "kafka.client.key") set to `value`."""
    tables = {"kafka": {"bootstrap_servers": "h:9092", "predictions_topic": "p", "dead_letter_topic": "d",
                        "unlabeled_topics": ["u"]}, "kafka.client": {}}
    if key == "kafka.commit_interval_ms":  # exactly-once also keeps it below the transaction timeout
        tables["kafka"]["processing_guarantee"] = "at_least_once"
    if key == "evaluation.unsure_score_band":  # a band is about the positive class
        tables["evaluation"] = {"positive": "spam"}
    section, name = key.rsplit(".", 1)
    tables.setdefault(section, {})[name] = value
    return "".join(f"[{section}]\n" + "".join(f"{name} = {toml_value(v)}\n" for name, v in table.items())
                   for section, table in tables.items())


def toml_value(value) -> str:
    return f'"{value}"' if isinstance(value, str) else "[" + ", ".join(map(toml_value, value)) + "]" \
        if isinstance(value, list) else repr(value)


def with_item(key: str, value):
    """A value of `key` whose (largest) number is `value`: [1, value] for the n-gram ranges,
    [value, value] for a band."""
    if key == "evaluation.unsure_score_band":
        return [value, value]
    return [1, value] if key in ("features.ngram_range", "features.char_ngrams") else value


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_every_size_and_count_takes_its_bounds_and_refuses_beyond_them_naming_the_key(tmp_path, key):
    low, high, why = BOUNDS[key]
    path = tmp_path / "c.toml"
    for accepted in (low, high):
        path.write_text(toml_with(key, with_item(key, accepted)), encoding="utf-8")
        load_config(path)
    path.write_text(toml_with(key, with_item(key, high + 1)), encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value) == f"{key}: {with_item(key, high + 1)!r} is outside {low:,} to {high:,} ({why})"
    if not (key.startswith("features.") and low == 1):  # [1, 0] is the featuriser's own refusal
        path.write_text(toml_with(key, with_item(key, low - 1)), encoding="utf-8")
        with pytest.raises(ConfigError, match=key.rsplit(".", 1)[1]):
            load_config(path)


def test_a_message_size_beyond_what_librdkafka_takes_is_refused_and_the_bound_decodes_in_c():
    from stream_nb.events import SourcePosition, codec, record_decoder

    from native import require_extension

    with pytest.raises(ConfigError, match=r"^kafka.max_message_bytes: 9223372036854775808 is outside 1 to 499,967,232 "):
        load_config(CONFIGS / "spam.toml", ["kafka.max_message_bytes=9223372036854775808"])
    require_extension(codec._native_codec, "stream_nb.events._codec")
    decode = record_decoder(labeled=False, max_bytes=MAX_MESSAGE_BYTES)
    event = decode(b'{"id": "a", "text": "t"}', None, None, SourcePosition("u", 0, 1))
    assert (event.id, event.text) == ("a", "t")  # no OverflowError: the bound fits a Py_ssize_t
    assert 2 * MAX_MESSAGE_BYTES + 65_536 <= 1_000_000_000  # the producer's request size, for librdkafka


def test_client_options_with_bounds_are_whole_numbers(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(toml_with("kafka.client.linger_ms", "20"), encoding="utf-8")
    with pytest.raises(ConfigError, match="^kafka.client.linger_ms: expected a whole number, got str '20'$"):
        load_config(path)


def test_exactly_once_refuses_a_commit_interval_the_transaction_timeout_would_abort(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(KAFKA + "commit_interval_ms = 60000\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^kafka.commit_interval_ms: 60,000 must be below "
                                          r"kafka.client.transaction_timeout_ms \(60,000\)"):
        load_config(path)
    path.write_text(KAFKA + "commit_interval_ms = 60000\n[kafka.client]\ntransaction_timeout_ms = 60001\n",
                    encoding="utf-8")
    assert load_config(path).kafka["commit_interval_ms"] == 60_000


def test_the_spam_filter_declares_ham_and_spam_and_a_configuration_without_classes_learns_any():
    assert load_config(CONFIGS / "spam.toml").classes == frozenset({"ham", "spam"})
    assert load_config(CONFIGS / "river_like.toml").classes is None
    assert load_config(CONFIGS / "spam.toml", ["model.classes=[0, 1]"]).classes == frozenset({0, 1})


@pytest.mark.parametrize("declared, message", [
    ('["ham"]', "model.classes: 1 classes, expected from 2 to model.max_classes \\(50\\)"),
    ('["ham", "ham"]', "model.classes: 'ham' is declared twice"),
    ('[1, "1"]', "model.classes: '1' is declared twice \\(1 and \"1\" are one class name\\)"),
    ('["ham", ""]', "model.classes: expected a list of labels \\(non-empty strings or integers\\)"),
    ('["ham", true]', "model.classes: expected a list of labels"),
    ('["ham", 1.5]', "model.classes: expected a list of labels"),
    ('"ham"', "model.classes: expected a list of labels"),
])
def test_declared_classes_are_checked_on_load(declared, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        load_config(CONFIGS / "spam.toml", [f"model.classes={declared}"])


def test_declaring_classes_is_part_of_the_fingerprint_and_leaves_the_others_as_they_were(tmp_path):
    from stream_nb.checkpoint import config_fingerprint

    # river_like.toml declares none: its fingerprint is the one checkpoints were taken under before
    river = load_config(CONFIGS / "river_like.toml")
    assert "classes" not in river.resolved()["model"]
    assert config_fingerprint(river.resolved()) == "37b762f2b4371f5af443934c3e1d505bef798171fec589267f4468e768dbfbab"
    undeclared = tmp_path / "spam_any_label.toml"
    undeclared.write_text((CONFIGS / "spam.toml").read_text(encoding="utf-8").replace('classes = ["ham", "spam"]', ""),
                          encoding="utf-8")
    assert config_fingerprint(load_config(undeclared).resolved()) == \
        "0f78ad8f2180819b8dd76bc854b9161dee771a7b41c4f7a77b5ea7c3ac3911aa"  # spam.toml's before it declared them
    spam = config_fingerprint(load_config(CONFIGS / "spam.toml").resolved())
    assert spam != config_fingerprint(load_config(undeclared).resolved())
    assert spam == config_fingerprint(load_config(CONFIGS / "spam.toml", ['model.classes=["spam", "ham"]']).resolved())


def test_training_margin_scale_is_checked_and_kept_only_when_set(tmp_path):
    spam = load_config("configs/spam.toml")
    assert "margin_scale" not in spam.training  # configurations of before keep their fingerprints
    assert "margin_scale" not in spam.resolved()["training"]
    scaled = load_config("configs/spam.toml", ['training.margin_scale="sqrt_features"', "training.margin=5.0"])
    assert scaled.training == {"mode": "thick_threshold", "margin": 5.0, "margin_scale": "sqrt_features"}
    assert scaled.resolved()["training"]["margin_scale"] == "sqrt_features"
    mail = load_config("configs/mail.toml")
    assert mail.training == {"mode": "thick_threshold", "margin": 5.0, "margin_scale": "sqrt_features"}
    with pytest.raises(ConfigError, match="training.margin_scale"):
        load_config("configs/spam.toml", ['training.margin_scale="sqrt"'])


def test_training_remember_ids_is_checked_and_kept_out_of_the_training_options_and_fingerprint():
    spam = load_config("configs/spam.toml")
    assert spam.remember_ids == 100_000  # the default, commented in the shipped configurations
    assert "remember_ids" not in spam.training  # predict_learn takes **training: no stray option
    assert load_config("configs/spam.toml", ["training.remember_ids=0"]).remember_ids == 0
    small = load_config("configs/spam.toml", ["training.remember_ids=10"])
    assert small.remember_ids == 10 and small.resolved() == spam.resolved()
    for text in (Path("configs/spam.toml").read_text(), Path("configs/mail.toml").read_text()):
        assert "# remember_ids = 100000" in text


@pytest.mark.parametrize("override, error", [
    ("training.remember_ids=-1", "training.remember_ids: -1 is negative"),
    ("training.remember_ids=1.5", "training.remember_ids: expected int, got float 1.5"),
    ("training.remember_ids=true", "training.remember_ids: expected int, got bool True"),
    ('training.remember_ids="100"', "training.remember_ids: expected int, got str '100'"),
    ("training.remember_ids=10000001", "training.remember_ids: 10000001 is outside 0 to 10,000,000"),
])
def test_a_bad_remember_ids_is_one_clear_error(override, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config("configs/spam.toml", [override])


@pytest.mark.parametrize("settings, expected", [
    ([], 1),  # one replica: the broker's default stands (the worker sets nothing)
    (["kafka.replication_factor=3"], 2),  # one broker may be away, every acknowledged write has two copies
    (["kafka.replication_factor=2"], 1),
    (["kafka.replication_factor=5", "kafka.min_insync_replicas=3"], 3),
])
def test_min_insync_replicas_is_one_less_than_the_replication_factor_unless_set(settings, expected):
    from stream_nb.config import min_insync_replicas

    assert min_insync_replicas(load_config(CONFIGS / "spam.toml", settings).kafka) == expected


@pytest.mark.parametrize("settings, message", [
    (["kafka.replication_factor=3", "kafka.min_insync_replicas=4"],
     "kafka.min_insync_replicas: 4 is more than kafka.replication_factor (3): no write could be acknowledged"),
    (["kafka.min_insync_replicas=-1"], "kafka.min_insync_replicas: -1 is negative (0: one less than "
                                       "kafka.replication_factor)"),
])
def test_a_min_insync_replicas_no_write_could_meet_is_refused(settings, message):
    with pytest.raises(ConfigError) as refused:
        load_config(CONFIGS / "spam.toml", settings)
    assert str(refused.value) == message


def test_an_output_topic_weaker_than_the_worker_would_make_it_is_named_with_the_remedy():
    """A predictions topic the broker made by itself (a reader asked for it first) has the
    broker's defaults: one replica or min.insync.replicas 1 under replication_factor 3 is said."""
    from stream_nb.kafka.clients import durability_shortfall

    kafka = {"replication_factor": 3, "min_insync_replicas": 0}
    assert durability_shortfall("p", 3, 2, kafka) is None
    assert durability_shortfall("p", 3, 3, kafka) is None
    weak = durability_shortfall("p", 3, 1, kafka)
    assert "topic p has 3 replicas and min.insync.replicas 1, not the 3 and 2" in weak
    assert "--add-config min.insync.replicas=2" in weak
    assert "1 replica and" in durability_shortfall("p", 1, 2, kafka)
    assert durability_shortfall("p", 1, 1, {"replication_factor": 1, "min_insync_replicas": 0}) is None
