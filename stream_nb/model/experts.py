"""Several feature views of one stream, each an exact count-based naive Bayes expert, combined
online by weights the labels teach (issue 35).

Every expert is a whole model of its own (its counts, its vocabulary, its training regime over
its own scores): expert v after a stream equals the model one would get by replaying the stream
with view v alone, bit for bit. The combination reads the experts' predictions and nothing else,
so it never changes what an expert learns.

The combination: log-linear pooling with learned weights
---------------------------------------------------------
Expert v says log P_v(c | x) for each class c. Its input to the combination is

    l_v(c) = max(log P_v(c | x), -INPUT_FLOOR) / sqrt(max(n_v(x), 1))

n_v(x) being the event's number of distinct features in view v: naive Bayes' log posteriors
grow with the number of features it counts as independent, so a view with many features per
event (character n-grams) would shout down one with few; per sqrt(feature) they speak on one
scale (training.log_odds_per_sqrt_feature; `scale = "none"` feeds the plain log posteriors).
The floor keeps an excluded class (alpha = 0) from bringing -inf into the sums.

The combined prediction is a softmax over the classes every expert knows:

    z_c = b_c + sum_v w_v l_v(c),        Q(c | x) = exp(z_c) / sum_k exp(z_k)

For two classes its log-odds are  b + sum_v w_v (l_v(pos) - l_v(neg)): a logistic regression
over the experts' log-odds (each per sqrt of its features). With w = (1, 0, ..., 0) and b = 0 it
is expert 0 on that scale; with w_v = 1/k the geometric mean of the experts (a product of
experts). Weights start at 1/k each.

Learning the weights: after predicting a labeled event of class y, one step of online gradient
descent on its log loss -log Q(y | x), whose gradient is

    d/dw_v = sum_c (Q(c | x) - [c = y]) l_v(c),        d/db_c = Q(c | x) - [c = y]

with AdaGrad's per-coordinate step (Duchi, Hazan, Singer 2011):

    G_j <- G_j + g_j^2,        theta_j <- theta_j - eta g_j / sqrt(G_j)      (G_j > 0)

which needs no knowledge of the inputs' scale (a step is at most eta in each weight) and shrinks
as evidence piles up, so the weights settle on a stationary stream and still move when one view
starts being wrong. Its regret against the best fixed weights in hindsight grows as sqrt(T).

Alternatives measured (benchmarks/experts_combiners.py): a fixed average; plain SGD at several
rates; the exponentially weighted forecaster (Hedge) over the experts' log loss, whose mixture
converges to the single best expert and so never beats it, where a weighted product can.

Determinism: the weights move once per labeled event, in labeled order, by a fixed sequence of
float operations; the experts' predictions are those of the prequential step whatever the batch
size (training.predict_learn), so the combination is a function of the labeled stream alone, as
the counts are: every replica, restore and batch size gets the same weights bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stream_nb.model._numerics import normalise_log_row
from stream_nb.model.base import ViewBatch
from stream_nb.model.posterior import Posterior, log_posteriors_of
from stream_nb.model.training import event_sizes, predict_learn

INPUT_FLOOR = 1e6  # nats: far below any finite log posterior of a message; stands in for -inf
INPUT_SCALES = ("sqrt_features", "none")
DEFAULT_LEARNING_RATE = 0.1
_NAME_MAX = 64


class LogLinearPool:
    """The weights of the combination (see the module doc) and their AdaGrad accumulators.

    State (plain JSON): {"learning_rate", "scale", "weights": [k floats], "weight_squares": [k],
    "biases": [[class, bias, square], ...] in the order classes met the pool, "updates": int}."""

    def __init__(self, experts: int, learning_rate: float = DEFAULT_LEARNING_RATE,
                 scale: str = "sqrt_features") -> None:
        if type(experts) is not int or experts < 1:
            raise ValueError(f"a pool needs at least one expert, got {experts!r}")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) or not (
                math.isfinite(learning_rate) and learning_rate > 0):
            raise ValueError(f"learning_rate must be a finite number > 0, got {learning_rate!r}")
        if scale not in INPUT_SCALES:
            raise ValueError(f"scale must be one of {', '.join(INPUT_SCALES)}, got {scale!r}")
        self.learning_rate = float(learning_rate)
        self.scale = scale
        self.weights = [1.0 / experts] * experts
        self.weight_squares = [0.0] * experts
        self.biases: dict = {}  # class -> [bias, squared gradients]
        self.updates = 0

    def inputs(self, log_posteriors: list[float], n_features: int) -> list[float]:
        """l_v(c) for one expert's log posteriors of one event (its n distinct features)."""
        floored = [value if value > -INPUT_FLOOR else -INPUT_FLOOR for value in log_posteriors]
        if self.scale == "none":
            return floored
        root = math.sqrt(max(n_features, 1))
        return [value / root for value in floored]

    def logits(self, inputs: list[list[float]], classes: Sequence) -> list[float]:
        """z_c for each of `classes`, from each expert's inputs over those classes."""
        biases = self.biases
        logits = []
        for c, label in enumerate(classes):
            total = biases[label][0] if label in biases else 0.0
            for weight, row in zip(self.weights, inputs):
                total += weight * row[c]
            logits.append(total)
        return logits

    def update(self, inputs: list[list[float]], classes: Sequence, label, logits: list[float]) -> None:
        """One AdaGrad step on -log Q(label | x) (the event's `logits`, computed before)."""
        if label not in classes or len(classes) < 2:
            return
        q = normalise_log_row(logits, [True] * len(logits), logits)
        residual = [p - (1.0 if c == label else 0.0) for p, c in zip(q, classes)]
        rate = self.learning_rate
        for v, row in enumerate(inputs):
            gradient = 0.0
            for r, value in zip(residual, row):
                gradient += r * value
            if gradient != 0.0:
                self.weight_squares[v] += gradient * gradient
                self.weights[v] -= rate * gradient / math.sqrt(self.weight_squares[v])
        biases = self.biases
        for r, c in zip(residual, classes):
            entry = biases.setdefault(c, [0.0, 0.0])
            if r != 0.0:
                entry[1] += r * r
                entry[0] -= rate * r / math.sqrt(entry[1])
        self.updates += 1

    def to_state(self) -> dict:
        return {"learning_rate": self.learning_rate, "scale": self.scale, "weights": list(self.weights),
                "weight_squares": list(self.weight_squares),
                "biases": [[label, bias, square] for label, (bias, square) in self.biases.items()],
                "updates": self.updates}

    @classmethod
    def from_state(cls, state, experts: int) -> LogLinearPool:
        """The pool a state holds; ValueError naming the first broken invariant."""
        if not isinstance(state, dict):
            raise ValueError("the combination's state must be a dict")
        expected = {"learning_rate", "scale", "weights", "weight_squares", "biases", "updates"}
        if set(state) != expected:
            raise ValueError(f"the combination's state must have exactly the keys {sorted(expected)}, "
                             f"got {sorted(state)}")
        pool = cls(experts, state["learning_rate"], state["scale"])
        for name in ("weights", "weight_squares"):
            values = state[name]
            if not isinstance(values, list) or len(values) != experts or not all(_finite(v) for v in values):
                raise ValueError(f"the combination's {name} must be {experts} finite numbers, got {values!r}"[:200])
        if any(v < 0 for v in state["weight_squares"]):
            raise ValueError("the combination's weight_squares must be >= 0")
        pool.weights = [float(v) for v in state["weights"]]
        pool.weight_squares = [float(v) for v in state["weight_squares"]]
        biases = state["biases"]
        if not isinstance(biases, list):
            raise ValueError("the combination's biases must be a list of [class, bias, square]")
        for entry in biases:
            if (not isinstance(entry, list) or len(entry) != 3 or not _label(entry[0]) or not _finite(entry[1])
                    or not _finite(entry[2]) or entry[2] < 0):
                raise ValueError(f"a bias of the combination must be [class, finite bias, square >= 0], "
                                 f"got {entry!r}"[:200])
            if entry[0] in pool.biases:
                raise ValueError(f"class {entry[0]!r} has two biases in the combination")
            pool.biases[entry[0]] = [float(entry[1]), float(entry[2])]
        updates = state["updates"]
        if type(updates) is not int or updates < 0:
            raise ValueError(f"the combination's updates must be an int >= 0, got {updates!r}")
        pool.updates = updates
        return pool


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _label(value) -> bool:
    return type(value) is int or (type(value) is str and bool(value))


def check_view_names(names: Sequence[str]) -> list[str]:
    """The views' names, or ValueError: at least one, distinct, short, printable."""
    names = list(names)
    if not names:
        raise ValueError("an Experts model needs at least one view")
    for name in names:
        if type(name) is not str or not name or len(name) > _NAME_MAX or not name.isprintable() or "/" in name:
            raise ValueError(f"a view's name must be 1 to {_NAME_MAX} printable characters without '/', "
                             f"got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"two views share a name: {names}")
    return names


class Experts:
    """Experts over named views, one count model each, and their `LogLinearPool`.

    The models are handed in (built by the caller from one [model] configuration); `views[v]`
    names expert v, and a batch for it is a ViewBatch whose view v that expert reads."""

    def __init__(self, names: Sequence[str], models: Sequence, pool: LogLinearPool | None = None) -> None:
        self.names = check_view_names(names)
        self.models = list(models)
        if len(self.models) != len(self.names):
            raise ValueError(f"{len(self.names)} views but {len(self.models)} models")
        self.pool = pool if pool is not None else LogLinearPool(len(self.models))
        if len(self.pool.weights) != len(self.models):
            raise ValueError(f"the combination weighs {len(self.pool.weights)} experts, not {len(self.models)}")

    # ---- what callers read of a model ---------------------------------------------------

    @property
    def classes_(self) -> list:
        """The classes every expert knows, in the first expert's order."""
        known = [set(model.classes_) for model in self.models[1:]]
        return [label for label in self.models[0].classes_ if all(label in k for k in known)]

    @property
    def _class_index(self) -> dict:
        return {label: i for i, label in enumerate(self.classes_)}

    @property
    def events_learned(self) -> float:
        """Labeled events learned, summed over the experts (each learns by its own regime)."""
        return float(sum(model.events_learned for model in self.models))

    @property
    def n_features(self) -> int:
        """Distinct features over every expert's vocabulary (each view names its own)."""
        return sum(model.n_features for model in self.models)

    # The labeled clock (forgetting, maintenance) is every expert's: they see the same labeled
    # events, and maintenance runs on labeled events seen, not learned, so the first speaks for all.
    @property
    def forgetting_epoch(self) -> int:
        return self.models[0].forgetting_epoch

    @property
    def labeled_seen(self) -> int:
        return self.models[0].labeled_seen

    @property
    def half_life(self):
        return self.models[0].half_life

    @property
    def evict_every(self):
        return self.models[0].evict_every

    def learned_flag(self, flags: Sequence[bool]) -> bool | int:
        """One event's learned flag from each expert's: True when all learned it, False when none,
        else the bit mask of those that did (bit v: expert v), which the memory of learned ids
        keeps so that a correction takes back exactly what each expert learned."""
        if all(flags):
            return True
        if not any(flags):
            return False
        return sum(1 << v for v, flag in enumerate(flags) if flag)

    def unlearn_many(self, X: ViewBatch, y, w=None, *, learned_at=None, learned_by: int | None = None) -> None:
        """Take labeled events back from the experts that learned them (`learned_by`, a mask as
        `learned_flag` gives; None: every expert): each expert's own unlearn_many on its view.
        Every expert checks first (`prepared_unlearning`), so a refused take-back changes none."""
        self._check_batch(X)
        chosen = [v for v in range(len(self.models)) if learned_by is None or learned_by >> v & 1]
        if learned_by is not None and (type(learned_by) is not int or learned_by <= 0
                                       or learned_by >= 1 << len(self.models)):
            raise ValueError(f"learned_by {learned_by!r} names no subset of the {len(self.models)} experts")
        takers = [self.models[v].prepared_unlearning(X.views[v], y, w, learned_at=learned_at) for v in chosen]
        for take_back in takers:
            take_back()

    # ---- prediction and learning ----------------------------------------------------------

    def _combined(self, predictions: list, sizes: list, label=None, learn: bool = False) -> Posterior | dict:
        """The combination of one event's expert predictions (`sizes`: its distinct features in
        each view); with `learn`, then one step of the pool on `label`."""
        if any(not p for p in predictions):
            return {}
        classes = [c for c in predictions[0] if all(c in p for p in predictions[1:])]
        if not classes:
            return {}
        inputs = []
        for prediction, n in zip(predictions, sizes):
            by_class = dict(zip(prediction, log_posteriors_of(prediction.log_scores)))
            inputs.append(self.pool.inputs([by_class[c] for c in classes], n))
        logits = self.pool.logits(inputs, classes)
        combined = Posterior(zip(classes, normalise_log_row(logits, [True] * len(logits), logits)))
        combined.log_scores = logits
        if learn and label is not None:
            self.pool.update(inputs, classes, label, logits)
        return combined

    def predict_learn_views(self, X: ViewBatch, labels: list, mode: str, margin: float,
                            margin_scale: str) -> tuple[list, list[bool]]:
        """Each expert's prequential step on its view (training.predict_learn, its own regime),
        then, event by event in order, their combination (predicted before its pool step). Each
        event's learned flag is `learned_flag` of the experts' (truthy when some learned it)."""
        self._check_batch(X)
        for model, view in zip(self.models, X.views):  # a bad event refuses the batch before any expert learns
            model.validate(view, labels)
        per_expert = [predict_learn(model, view, labels, mode, margin, margin_scale)
                      for model, view in zip(self.models, X.views)]
        sizes = [event_sizes(view) for view in X.views]
        combined, learned = [], []
        for i, label in enumerate(labels):
            predictions = [probabilities[i] for probabilities, _ in per_expert]
            combined.append(self._combined(predictions, [s[i] for s in sizes], label, learn=True))
            learned.append(self.learned_flag([flags[i] for _, flags in per_expert]))
        return combined, learned

    def predict_proba_one(self, views: Sequence[dict]) -> Posterior | dict:
        """The combined P(c | x) of one event given as each view's feature dict."""
        return self._combined(*self._expert_predictions(views))

    def _expert_predictions(self, views: Sequence[dict]) -> tuple[list, list]:
        if len(views) != len(self.models):
            raise TypeError(f"an Experts model of {len(self.models)} views reads one feature dict per view")
        return [model.predict_proba_one(x) for model, x in zip(self.models, views)], [len(x) for x in views]

    def shares(self, views: Sequence[dict], best, runner_up) -> list[tuple[str, float]]:
        """Each expert's part of the combined score of class `best` over `runner_up` for one event
        (each view's feature dict): w_v (l_v(best) - l_v(runner_up)), named by its view, and the
        biases' part as "(bias)"; they add up to z_best - z_runner_up."""
        predictions, sizes = self._expert_predictions(views)
        parts = []
        for name, weight, prediction, n in zip(self.names, self.pool.weights, predictions, sizes):
            if best not in prediction or runner_up not in prediction:
                continue
            by_class = dict(zip(prediction, log_posteriors_of(prediction.log_scores)))
            own, other = self.pool.inputs([by_class[best], by_class[runner_up]], n)
            parts.append((name, weight * (own - other)))
        biases = self.pool.biases
        parts.append(("(bias)", (biases[best][0] if best in biases else 0.0)
                      - (biases[runner_up][0] if runner_up in biases else 0.0)))
        return parts

    def evidence_scale(self, v: int, n_features: int) -> float:
        """What one nat of expert v's log-odds is worth in the combined score: w_v / sqrt(n_v(x))
        (w_v on scale "none")."""
        weight = self.pool.weights[v]
        return weight if self.pool.scale == "none" else weight / math.sqrt(max(n_features, 1))

    def predict_proba_many(self, X: ViewBatch) -> list:
        """The combined P(c | x) of each event, learning nothing."""
        self._check_batch(X)
        per_expert = [model.predict_proba_many(view) for model, view in zip(self.models, X.views)]
        sizes = [event_sizes(view) for view in X.views]
        return [self._combined([p[i] for p in per_expert], [s[i] for s in sizes]) for i in range(len(X))]

    def validate(self, X: ViewBatch, y, w=None) -> None:
        self._check_batch(X)
        for model, view in zip(self.models, X.views):
            model.validate(view, y, w)

    def _check_batch(self, X) -> None:
        if not isinstance(X, ViewBatch) or len(X.views) != len(self.models):
            raise TypeError(f"an Experts model of {len(self.models)} views reads a ViewBatch of as many views")

    # ---- state ------------------------------------------------------------------------------

    def to_state(self) -> dict:
        """{"meta", "arrays"} as every model's: the experts' arrays under "<v>/<name>"."""
        metas, arrays = [], {}
        for v, model in enumerate(self.models):
            state = model.to_state()
            metas.append(state["meta"])
            for name, array in state["arrays"].items():
                arrays[f"{v}/{name}"] = array
        meta = {"kind": "Experts", "format": 1, "views": list(self.names), "experts": metas,
                "pool": self.pool.to_state()}
        return {"meta": meta, "arrays": arrays}

    @classmethod
    def from_state(cls, state: dict) -> Experts:
        """The Experts a state holds; InvalidState naming the first broken invariant, each expert
        checked as its own kind checks a state (registry.model_from_state)."""
        from stream_nb.model.registry import model_from_state
        from stream_nb.model.state_check import InvalidState

        meta, arrays = state.get("meta"), state.get("arrays")
        if not isinstance(meta, dict) or not isinstance(arrays, dict):
            raise InvalidState("state must be {'meta': dict, 'arrays': dict}")
        if meta.get("format") != 1 or set(meta) != {"kind", "format", "views", "experts", "pool"}:
            raise InvalidState("an Experts state's meta must be format 1 with kind, format, views, experts, pool")
        try:
            names = check_view_names(meta["views"] if isinstance(meta["views"], list) else [])
        except ValueError as error:
            raise InvalidState(f"state's views: {error}") from None
        metas = meta["experts"]
        if not isinstance(metas, list) or len(metas) != len(names):
            raise InvalidState(f"state must hold one expert per view ({len(names)})")
        by_expert: list[dict] = [{} for _ in names]
        for key, array in arrays.items():
            v, slash, name = str(key).partition("/")
            if not slash or not v.isdigit() or int(v) >= len(names) or str(int(v)) != v:
                raise InvalidState(f"state's array {key!r} belongs to no expert")
            by_expert[int(v)][name] = array
        models = []
        for v, (expert_meta, expert_arrays) in enumerate(zip(metas, by_expert)):
            if isinstance(expert_meta, dict) and expert_meta.get("kind") == "Experts":
                raise InvalidState("an expert cannot itself be an Experts model")
            try:
                models.append(model_from_state({"meta": expert_meta, "arrays": expert_arrays}))
            except InvalidState as error:
                raise InvalidState(f"expert {names[v]!r}: {error}") from None
        try:
            pool = LogLinearPool.from_state(meta["pool"], len(models))
        except ValueError as error:
            raise InvalidState(str(error)) from None
        return cls(names, models, pool)

