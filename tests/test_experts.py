"""Feature views as experts (stream_nb.model.experts): each expert is the model its view alone
would give, bit for bit; the combination is a function of the labeled stream alone (batch
sizes, restores); its AdaGrad step is the formula of the module's docstring; hostile states
and configurations are refused with the key named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stream_nb.checkpoint.digest import state_digest
from stream_nb.config import ConfigError, load_config
from stream_nb.model.base import ViewBatch
from stream_nb.model.experts import Experts, LogLinearPool
from stream_nb.model.posterior import Posterior
from stream_nb.model.registry import model_from_state
from stream_nb.model.state_check import InvalidState
from stream_nb.replay.cli import _contender
from stream_nb.replay.evaluation import EvaluationRecorder
from stream_nb.replay.prequential import replay_contenders
from tests.corpora import load_sms_spam

# mail.toml's own views replaced by two others (osb, chars)
VIEWS = ["views={}", "views.osb.ngram_range=[1, 1]", "views.osb.osb_window=5", "views.chars.char_ngrams=[4, 4]",
         "views.chars.ngram_range=[1, 1]"]


@pytest.fixture(scope="module")
def sms():
    return [{"id": str(i), "text": text, "label": label} for i, (label, text) in enumerate(load_sms_spam()[:1500])]


def _replay(config, events, batch_size=1000, delay=0):
    contender = _contender("c", config, EvaluationRecorder)
    replay_contenders(events, [contender], batch_size=batch_size, delay=delay)
    return contender


def _scores(contender) -> list:
    return contender.recorder.scores("spam").tolist()


def test_each_expert_is_the_model_of_its_view_alone_bit_for_bit(sms):
    """mail.toml's thick threshold, forgetting and per-sqrt margins, in three views at once."""
    config = load_config("configs/mail.toml", VIEWS)
    combined = _replay(config, sms, batch_size=300)
    assert combined.model.names == ["base", "osb", "chars"]
    alone = {
        "base": load_config("configs/mail.toml", ["views={}"]),
        "osb": load_config("configs/mail.toml", ["views={}", "features.ngram_range=[1, 1]", "features.osb_window=5"]),
        "chars": load_config("configs/mail.toml", ["views={}", "features.char_ngrams=[4, 4]",
                                                   "features.ngram_range=[1, 1]"]),
    }
    for expert, name in zip(combined.model.models, combined.model.names):
        single = _replay(alone[name], sms, batch_size=1000)
        assert state_digest(expert.to_state()) == state_digest(single.model.to_state()), name
    # the experts learned different events (their own regimes), so the combination has something to weigh
    learned = [expert.events_learned for expert in combined.model.models]
    assert len(set(learned)) == 3 and all(0 < n < len(sms) for n in learned)


def test_shipped_mail_toml_reads_three_views():
    config = load_config("configs/mail.toml")
    assert config.view_names == ["base", "chars", "words"]
    assert config.view_features("chars")["char_ngrams"] == [4, 4] and config.view_features("words")["ngram_range"] == [1, 1]
    assert load_config("configs/personal.toml").view_names == ["base", "chars", "words"]  # per-key models over each


def test_one_view_is_todays_model_and_fingerprint():
    plain = load_config("configs/mail.toml", ["views={}"])
    assert not isinstance(plain.build_model(), Experts)
    assert "views" not in plain.resolved() and "combine" not in plain.resolved()
    with_views = load_config("configs/mail.toml", VIEWS[:3])
    assert with_views.resolved()["views"]["osb"]["text"]["osb_window"] == 5
    assert with_views.resolved()["combine"] == {"learning_rate": 0.03, "share": 0.001, "soft_clip": 10.0,
                                                "scale": "sqrt_features", "offset_step": 0.03}


@pytest.mark.parametrize("batch_size", [1, 7, 256])
def test_the_combination_is_the_same_whatever_the_batch_size(sms, batch_size):
    config = load_config("configs/mail.toml", VIEWS)
    whole = _replay(config, sms[:600], batch_size=1000)
    cut = _replay(config, sms[:600], batch_size=batch_size)
    assert _scores(cut) == _scores(whole)
    assert cut.model.pool.to_state() == whole.model.pool.to_state()
    assert state_digest(cut.model.to_state()) == state_digest(whole.model.to_state())
    # a step for every event after the first of the second class (before it, one class: nothing to weigh)
    second_class = next(i for i, event in enumerate(sms) if event["label"] != sms[0]["label"])
    assert whole.model.pool.updates == 600 - second_class - 1


def test_a_restored_state_goes_on_as_if_never_stopped(sms):
    config = load_config("configs/mail.toml", VIEWS)
    straight = _replay(config, sms[:800])
    first = _replay(config, sms[:500])
    restored = model_from_state(first.model.to_state())
    assert isinstance(restored, Experts) and restored.names == first.model.names
    resumed = _contender("c", config, EvaluationRecorder)
    resumed.model = restored
    resumed.__post_init__()
    replay_contenders(sms[500:800], [resumed], batch_size=1000)
    assert _scores(first) + _scores(resumed) == _scores(straight)
    assert state_digest(resumed.model.to_state()) == state_digest(straight.model.to_state())


def test_the_pool_step_is_exponentiated_gradient_on_the_log_loss():
    pool = LogLinearPool(2, learning_rate=0.5, share=0.1, soft_clip=4.0, scale="none")
    # each expert's log P(c | x) over [ham, spam]: centred, then soft-clipped at +-2 nats
    inputs = [pool.inputs([-0.1, -2.4], 1), pool.inputs([-1.3, -0.3], 1)]
    assert inputs[0] == pytest.approx([2 * math.tanh(1.15 / 2), -2 * math.tanh(1.15 / 2)], rel=1e-15)
    assert inputs[1] == pytest.approx([-2 * math.tanh(0.5 / 2), 2 * math.tanh(0.5 / 2)], rel=1e-15)
    logits = pool.logits(inputs, ["ham", "spam"])
    assert logits == [0.5 * inputs[0][0] + 0.5 * inputs[1][0], 0.5 * inputs[0][1] + 0.5 * inputs[1][1]]
    p_spam = 1 / (1 + math.exp(logits[0] - logits[1]))
    pool.update(inputs, ["ham", "spam"], "spam", logits)
    x = [row[1] - row[0] for row in inputs]  # each expert's soft-clipped log-odds
    g = [(p_spam - 1.0) * value for value in x]  # two classes: (p - y) x_v
    moved = [0.5 * math.exp(-0.5 * gv) for gv in g]
    expected = [0.9 * m / sum(moved) + 0.1 / 2 for m in moved]
    assert pool.weights == pytest.approx(expected, rel=1e-14) and math.fsum(pool.weights) == pytest.approx(1.0)
    assert pool.weights[1] > pool.weights[0]  # the expert that said spam gains
    # the pool said ham (a mistake): the offsets move the decision a step towards spam
    assert logits[0] > logits[1] and pool.offsets == {"spam": 0.015, "ham": -0.015}
    assert pool.logits(inputs, ["ham", "spam"])[1] == 0.015 + pool.weights[0] * inputs[0][1] + pool.weights[1] * inputs[1][1]
    now = pool.logits(inputs, ["ham", "spam"])
    assert now[1] > now[0]
    pool.update(inputs, ["ham", "spam"], "spam", now)  # right this time: the offsets stay
    assert pool.offsets == {"spam": 0.015, "ham": -0.015}
    # the gradient is the log loss's, by central differences
    def loss(w):
        z = [w[0] * inputs[0][c] + w[1] * inputs[1][c] for c in range(2)]
        return -(z[1] - math.log(math.exp(z[0]) + math.exp(z[1])))
    h = 1e-6
    numeric = [(loss([0.5 + h, 0.5]) - loss([0.5 - h, 0.5])) / (2 * h),
               (loss([0.5, 0.5 + h]) - loss([0.5, 0.5 - h])) / (2 * h)]
    assert numeric == pytest.approx(g, rel=1e-6)


def test_the_share_keeps_every_weight_above_share_over_k():
    pool = LogLinearPool(3, learning_rate=50.0, share=0.03, scale="none")
    for _ in range(200):  # expert 2 always wrong, loudly
        inputs = [pool.inputs([-5.0, 0.0], 1), pool.inputs([-5.0, 0.0], 1), pool.inputs([0.0, -5.0], 1)]
        pool.update(inputs, ["ham", "spam"], "spam", pool.logits(inputs, ["ham", "spam"]))
    assert min(pool.weights) >= 0.03 / 3 - 1e-15 and pool.weights[2] < 0.011
    assert math.fsum(pool.weights) == pytest.approx(1.0, abs=1e-12)


def test_sqrt_features_inputs_and_floor():
    pool = LogLinearPool(1, soft_clip=1000.0)
    # per sqrt(16 features), centred: [-1, -inf] -> [-1, -250000] -> +-124999.5, then soft-clipped at 500
    assert pool.inputs([-4.0, -math.inf], 16) == pytest.approx([500 * math.tanh(124999.5 / 500),
                                                                -500 * math.tanh(124999.5 / 500)])
    assert LogLinearPool(1, scale="none", soft_clip=1000.0).inputs([-4.0, 0.0], 16) == pytest.approx(
        [-500 * math.tanh(2 / 500), 500 * math.tanh(2 / 500)])


def test_combined_posterior_is_the_softmax_of_the_logits(sms):
    contender = _replay(load_config("configs/mail.toml", VIEWS), sms[:300])
    X = contender.featurise(sms[300:310])
    assert isinstance(X, ViewBatch) and len(X) == 10 and len(X[2:5]) == 3
    for p in contender.model.predict_proba_many(X):
        assert isinstance(p, Posterior)
        z = np.array(p.log_scores)
        assert list(p.values()) == pytest.approx((np.exp(z - z.max()) / np.exp(z - z.max()).sum()).tolist())
        assert sum(p.values()) == pytest.approx(1.0)


def test_clues_name_each_experts_share_and_add_up_to_the_score(sms):
    contender = _replay(load_config("configs/mail.toml", VIEWS), sms[:400])
    model = contender.model
    views = contender.featurise_one(sms[450])
    proba = model.predict_proba_one(views)
    best, runner_up = sorted(proba, key=proba.get, reverse=True)
    from stream_nb.model.explain import strongest_clues

    clues = strongest_clues(model, views, top=4)
    shares = [(name, value) for name, value in clues if name.startswith("@")]
    assert [name for name, _ in shares] == ["@base", "@osb", "@chars", "@(offset)"]
    assert sum(value for _, value in shares) == pytest.approx(proba.log_odds(best), abs=1e-5)
    assert len(clues) == 4 + 4


@pytest.mark.parametrize("broken, message", [
    (lambda s: s["meta"].update(views=["base", "base"]), "share a name"),
    (lambda s: s["meta"]["pool"].update(weights=[0.5, float("nan")]), "distribution"),
    (lambda s: s["meta"]["pool"].update(weights=[1.0]), "distribution over the 2"),
    (lambda s: s["meta"]["pool"].update(weights=[0.7, 0.7]), "adding up to 1"),
    (lambda s: s["meta"]["pool"].update(weights=[1.5, -0.5]), "distribution"),
    (lambda s: s["meta"]["pool"].update(share=2.0), "share"),
    (lambda s: s["meta"]["pool"].update(offsets=[["spam", float("inf")]]), "offset"),
    (lambda s: s["meta"]["pool"].update(offsets=[["spam", 1.0], ["spam", 2.0]]), "two offsets"),
    (lambda s: s["meta"]["pool"].update(offset_step=-1), "offset_step"),
    (lambda s: s["meta"]["pool"].update(updates=-1), "updates"),
    (lambda s: s["meta"]["pool"].update(extra=1), "exactly the keys"),
    (lambda s: s["arrays"].update({"7/class_counts": np.zeros(2)}), "belongs to no expert"),
    (lambda s: s["arrays"].update({"01/class_counts": np.zeros(2)}), "belongs to no expert"),
    (lambda s: s["meta"]["experts"].pop(), "one expert per view"),
    (lambda s: s["arrays"].update({"1/class_counts": np.array([1.0, -3.0])}), "expert 'osb'"),
    (lambda s: s["meta"]["experts"][1].update(labeled_seen=s["meta"]["experts"][1]["labeled_seen"] + 1),
     "share its labeled clock"),
])
def test_a_hostile_state_is_refused_naming_what_is_wrong(sms, broken, message):
    state = _replay(load_config("configs/mail.toml", VIEWS[:3]), sms[:100]).model.to_state()
    broken(state)
    with pytest.raises(InvalidState, match=message):
        model_from_state(state)


def test_a_take_back_naming_no_subset_of_the_experts_is_refused(sms):
    contender = _replay(load_config("configs/mail.toml"), sms[:50])
    X = contender.featurise(sms[:1])
    for mask in (0, 8, -1, "3", 1.0):
        with pytest.raises(ValueError, match="names no subset"):
            contender.model.unlearn_many(X, [sms[0]["label"]], learned_by=mask)


@pytest.mark.parametrize("overrides, message", [
    (["views.base.osb_window=5"], "views.base: 'base' is the view of"),
    (["views.osb.categorical=['a']"], "views.osb.categorical"),
    (["views.osb.osb_window=50"], "views.osb.osb_window: 50 is outside"),
    (["views.osb.no_such_key=1"], "views.osb"),
    (["views.osb=5"], "expected views.NAME.KEY=value"),
    (["views.osb.osb_window=5", "combine.learning_rate=-1"], "combine.learning_rate"),
    (["views.osb.osb_window=5", "combine.share=1.5"], "combine.share"),
    (["views.osb.osb_window=5", "combine.soft_clip=0"], "combine.soft_clip"),
    (["views.osb.osb_window=5", "combine.offset_step=1000"], "combine.offset_step"),
    (["views.osb.osb_window=5", "combine.scale='cubic'"], "combine.scale"),
    (["views.osb.osb_window=5", "model.kind='gaussian'"], "views: feature views are text views"),
])
def test_configuration_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config("configs/mail.toml", overrides)


def test_a_view_that_is_not_a_table_is_refused(tmp_path):
    path = tmp_path / "views.toml"
    path.write_text('extends = "%s"\n[views]\nosb = 5\n' % (Path("configs/mail.toml").resolve()))
    with pytest.raises(ConfigError, match="views.osb: must be a table"):
        load_config(path)


def test_a_correction_takes_back_from_exactly_the_experts_that_learned(sms):
    """Under mail.toml's thick threshold each expert learns other events: taking every message
    back leaves every expert empty, and no take-back is refused (an expert that did not learn an
    event is not asked to unlearn it)."""
    config = load_config("configs/mail.toml", [*VIEWS, "model.half_life=0"])
    stream = sms[:600]
    takebacks = [{"id": event["id"], "text": event["text"], "label": None, "unlearn": event["label"]}
                 for event in stream]
    contender = _replay(config, stream + takebacks, batch_size=250)
    model = contender.model
    learned_by = [entry.by for _, entry in contender.lessons.memory.items()]
    assert contender.refused == {}
    assert all(expert.events_learned == 0 for expert in model.models)
    assert all(not expert._feature_counts.any() for expert in model.models)
    assert len(contender.lessons.memory) == 0
    # the mixed case was exercised: some events were learned by some experts only
    partial = _replay(config, stream, batch_size=250).lessons.memory
    masks = [entry.by for _, entry in partial.items()]
    assert learned_by == [] and any(mask is not None for mask in masks) and None in masks
    restored = type(partial).from_state(partial.to_state())
    assert restored == partial and [e.by for _, e in restored.items()] == masks


def test_inspect_summarises_each_expert_and_the_weights(sms, tmp_path, capsys):
    from stream_nb.checkpoint.cli import main as checkpoint_main
    from stream_nb.checkpoint.store import CheckpointStore

    model = _replay(load_config("configs/mail.toml", VIEWS), sms[:300]).model
    CheckpointStore(tmp_path).save(model.to_state(), {("labeled", 0): 300}, "f" * 64)
    assert checkpoint_main(["inspect", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [expert["view"] for expert in summary["experts"]] == ["base", "osb", "chars"]
    assert [expert["weight"] for expert in summary["experts"]] == model.pool.weights
    assert [expert["events_learned"] for expert in summary["experts"]] == [m.events_learned for m in model.models]
    assert summary["vocabulary_size"] == model.n_features == sum(m.n_features for m in model.models)
    assert summary["state_digest"] == state_digest(model.to_state())
    assert checkpoint_main(["inspect", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "view 'chars': weight" in text and f"combination   {model.pool.updates} updates" in text


def test_a_whole_section_is_replaced_on_the_command_line():
    config = load_config("configs/mail.toml", [*VIEWS, "views={}"])
    assert load_config("configs/mail.toml").views
    assert config.views == {} and not isinstance(config.build_model(), Experts)
    with pytest.raises(ConfigError, match="inline table"):
        load_config("configs/mail.toml", ["views=5"])


def test_the_clues_of_a_batch_are_each_events_clues_by_the_definition(sms):
    """The worker's path (each view's clues by its expert's batch path, shares from what the
    prediction was combined from) against expert_clues of each event scored again."""
    from stream_nb.model.explain import expert_clues_many, strongest_clues

    contender = _replay(load_config("configs/mail.toml"), sms[:500])
    events = [dict(event, label=None) for event in sms[500:700]]
    X = contender.featurise(events)
    probabilities = contender.model.predict_proba_many(X)
    batch = expert_clues_many(contender.model, X, probabilities, top=5)
    one_by_one = [strongest_clues(contender.model, contender.featurise_one(event), top=5) for event in events]
    assert batch == one_by_one
    assert all(len(clues) == 4 + 5 for clues in batch)  # three shares and the offset's, then five features
    assert any(name.startswith("chars:#c:") for clues in batch for name, _ in clues)


def test_replay_reports_each_views_own_figures_beside_the_combination(sms, tmp_path):
    from stream_nb.replay.cli import replay_and_report

    events = sms[:800]
    _, (contender,), (report,) = replay_and_report(events, [("mail", load_config("configs/mail.toml"))],
                                                   tmp_path / "views", batch_size=200)
    views = report["views"]
    assert [entry["view"] for entry in views] == ["base", "chars", "words"]
    assert [entry["weight"] for entry in views] == contender.model.pool.weights
    for entry, expert in zip(views, contender.model.models):
        assert entry["events_learned"] == expert.events_learned
    # each view's own figures equal that view replayed alone (its sign and its order are its score's)
    alone = {"base": ["views={}"], "chars": ["views={}", "features.ngram_range=[1, 1]", "features.char_ngrams=[4, 4]"],
             "words": ["views={}", "features.ngram_range=[1, 1]"]}
    for entry in views:
        _, _, (single,) = replay_and_report(events, [(entry["view"], load_config("configs/mail.toml", alone[entry["view"]]))],
                                            tmp_path / entry["view"], batch_size=200)
        assert entry["accuracy"] == single["accuracy"], entry["view"]
        assert entry["one_minus_roca_percent"] == pytest.approx(single["trec"]["one_minus_roca_percent"], abs=1e-9)


def test_the_worker_serves_each_views_weight_and_the_budgets_evictions(sms):
    from stream_nb.worker.metrics import WorkerMetrics

    contender = _replay(load_config("configs/mail.toml", ["model.max_features=3000", "model.evict_every=100"]),
                        sms[:600])
    model = contender.model
    telemetry = WorkerMetrics()
    telemetry.observe_views(model)
    served = [telemetry.registry.get_sample_value("stream_nb_view_weight", {"view": name}) for name in model.names]
    assert served == model.pool.weights and math.fsum(served) == pytest.approx(1.0)
    assert model.features_evicted == sum(expert.features_evicted for expert in model.models) > 0
    assert all(expert.n_features <= 3000 for expert in model.models)  # the budget is each view's
    one_view = WorkerMetrics()
    one_view.observe_views(model.models[0])
    assert one_view.registry.get_sample_value("stream_nb_view_weight", {"view": "base"}) is None


MERGEABLE = ['training.mode="all"', "model.half_life=0"]  # counts that add up: no thick threshold, no forgetting


def test_two_halves_merge_into_the_counts_of_the_whole_and_the_pools_steps(sms):
    """Each expert's counts after merge are the whole stream's to the bit; the weights are the
    normalised product of the halves' (EG's steps add in the exponent), floored by the share once,
    the offsets and updates the sums."""
    config = load_config("configs/mail.toml", MERGEABLE)
    first, second, whole = _replay(config, sms[:700]), _replay(config, sms[700:]), _replay(config, sms)
    a, b = first.model.pool, second.model.pool
    product = [x * y for x, y in zip(a.weights, b.weights)]
    share, k = a.share, len(product)
    expected = [(1 - share) * p / sum(product) + share / k for p in product]
    offsets = {label: a.offsets.get(label, 0.0) + b.offsets.get(label, 0.0) for label in {*a.offsets, *b.offsets}}
    updates = a.updates + b.updates
    merged = first.model.merge(second.model)
    assert merged is first.model
    for expert, entire in zip(merged.models, whole.model.models):
        assert state_digest(expert.to_state()) == state_digest(entire.to_state())
    assert merged.pool.weights == pytest.approx(expected, rel=1e-12) and math.isclose(math.fsum(merged.pool.weights), 1)
    assert merged.pool.offsets == pytest.approx(offsets)
    assert merged.pool.updates == updates > 1400
    assert merged.pool.weights != whole.model.pool.weights  # each half's steps were taken at its own weights


def test_a_merge_that_cannot_be_exact_is_refused_before_anything_changes(sms):
    config = load_config("configs/mail.toml", MERGEABLE)
    mine = _replay(config, sms[:300]).model
    before = state_digest(mine.to_state())
    forgetting = _replay(load_config("configs/mail.toml", ['training.mode="all"']), sms[300:600]).model
    with pytest.raises(ValueError, match="half_life"):
        mine.merge(forgetting)
    other_views = _replay(load_config("configs/mail.toml", [*MERGEABLE, *VIEWS]), sms[300:600]).model
    with pytest.raises(TypeError, match="cannot merge"):
        mine.merge(other_views)
    other_pool = _replay(load_config("configs/mail.toml", [*MERGEABLE, "combine.learning_rate=0.01"]), sms[300:600]).model
    with pytest.raises(ValueError, match="different settings"):
        mine.merge(other_pool)
    assert state_digest(mine.to_state()) == before


def test_the_worker_log_says_a_views_count_of_events_learned_is_their_sum():
    """An event is learned once in each view that takes it: 80 mails may be "205 events learned"."""
    from stream_nb.worker.checkpoints import events_learned_phrase

    root = Path(__file__).resolve().parents[1] / "configs"
    three = load_config(root / "mail.toml").build_model()
    one = load_config(root / "spam.toml").build_model()
    assert events_learned_phrase(three, 205.0) == "205 events learned (summed over its 3 views)"
    assert events_learned_phrase(one, 70.0) == "70 events learned"


def _bits(values) -> list[str]:
    """Each float's exact bits (== would equate -0.0 with 0.0 and fail on NaN)."""
    return [float(value).hex() for value in values]


def _generated_predictions(rng, n: int) -> list[Posterior | dict]:
    """Predictions of every shape an expert gives: mostly two finite classes, some far apart (the
    floor), equal, at +-0.0, with infinities or NaN, one class, none, three, the other order."""
    made: list[Posterior | dict] = []
    for _ in range(n):
        shape = rng.integers(12)
        if shape == 0:
            made.append({})
            continue
        classes = ["ham", "spam", "other"][: 1 if shape == 1 else 3 if shape == 2 else 2]
        if shape == 3:
            classes = ["spam", "ham"]
        scores = (rng.normal(-300.0, 200.0, len(classes)) * rng.choice([1e-3, 1.0, 1e4])).tolist()
        if shape == 4:
            scores[-1] = scores[0]
        elif shape == 5:
            scores[: 2] = rng.choice([0.0, -0.0, 1e-300, -1e-300], 2).tolist()
        elif shape == 6:
            scores[rng.integers(len(scores))] = float(rng.choice([math.inf, -math.inf, math.nan]))
        elif shape == 7:
            scores[0] = scores[-1] - 2e6  # beyond the input floor
        prediction = Posterior(zip(classes, [1.0 / len(classes)] * len(classes)))
        prediction.log_scores = scores
        made.append(prediction)
    return made


@pytest.mark.parametrize("scale", ["sqrt_features", "none"])
def test_the_batch_combination_is_the_definition_event_by_event_bit_for_bit(scale):
    """_combined_many (its two-class path and the rest) against `_combined` called event by event,
    on generated predictions: the same combined posteriors, log scores, inputs, weights and
    offsets, to the last bit, learning or not."""
    rng = np.random.default_rng(35)
    n, experts = 3000, 3
    per_expert = [_generated_predictions(rng, n) for _ in range(experts)]
    # mostly well-formed events, where the two-class path runs: the same two classes in every expert
    for i in range(n):
        if rng.random() < 0.7:
            for v in range(experts):
                prediction = Posterior(zip(["ham", "spam"], [0.5, 0.5]))
                prediction.log_scores = (rng.normal(-500.0, 300.0, 2) * rng.choice([1e-6, 1.0, 1e3])).tolist()
                per_expert[v][i] = prediction
    sizes = [rng.integers(0, 5000, n).tolist() for _ in range(experts)]
    labels = rng.choice(np.array(["ham", "spam", "other", None], dtype=object), n, p=[0.45, 0.45, 0.05, 0.05]).tolist()

    def expert_pool():
        return Experts(["a", "b", "c"], [None] * experts, LogLinearPool(experts, learning_rate=0.5, scale=scale,
                                                                          soft_clip=6.0, offset_step=0.2))

    for learning in (labels, None):
        batch, definition = expert_pool(), expert_pool()
        combined = batch._combined_many(per_expert, sizes, learning)
        expected = [definition._combined([p[i] for p in per_expert], [s[i] for s in sizes],
                                         None if learning is None else learning[i], learn=learning is not None)
                    for i in range(n)]
        assert len(combined) == n
        for got, want in zip(combined, expected):
            assert type(got) is type(want) and list(got) == list(want)
            assert _bits(got.values()) == _bits(want.values())
            if want:
                assert _bits(got.log_scores) == _bits(want.log_scores)
                assert [_bits(row) for row in got.inputs] == [_bits(row) for row in want.inputs]
                assert _bits(got.weights) == _bits(want.weights) and got.offsets == want.offsets
        assert batch.pool.to_state() == definition.pool.to_state()
        assert _bits(batch.pool.weights) == _bits(definition.pool.weights)
        assert batch.pool.updates > (n // 2 if learning is not None else -1)
    assert batch.pool.updates == 0  # the last round only predicted


@pytest.mark.parametrize("scale", ["sqrt_features", "none"])
def test_two_class_inputs_are_the_pools_inputs_of_the_log_posteriors_bit_for_bit(scale):
    from stream_nb.model.experts import _two_class_inputs
    from stream_nb.model.posterior import log_posteriors_of

    rng = np.random.default_rng(7)
    pool = LogLinearPool(3, scale=scale, soft_clip=float(rng.choice([0.5, 10.0, 1e4])))
    rows = (rng.normal(-500.0, 300.0, (20000, 2)) * rng.choice([1e-9, 1e-3, 1.0, 1e3, 1e6], (20000, 1))).tolist()
    rows += [[0.0, 0.0], [-0.0, -0.0], [0.0, -0.0], [-0.0, 0.0], [-1e-300, 1e-300], [5.0, 5.0], [-3e6, 0.0],
             [0.0, -3e6], [-1.7e308, 1.7e308], [1e308, 1e308], [-1e308, -1e308]]
    for row in rows:
        n = int(rng.integers(0, 100000))
        assert _bits(_two_class_inputs(pool, [row], [n])[0]) == _bits(pool.inputs(log_posteriors_of(row), n)), (row, n)
