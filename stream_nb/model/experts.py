"""Several feature views of one stream, each an exact count-based naive Bayes expert, combined
online by weights the labels teach (issue 35).

Every expert is a whole model of its own (its counts, its vocabulary, its training regime over
its own scores): expert v after a stream equals the model one would get by replaying the stream
with view v alone, bit for bit. The combination reads the experts' predictions and nothing else,
so it never changes what an expert learns.

The combination: a weighted product of experts, weights by exponentiated gradient
---------------------------------------------------------------------------------
Expert v says log P_v(c | x) for each class c. Its input to the combination is, per class,

    l_v(c) = log P_v(c | x) / sqrt(max(n_v(x), 1)),     u_v(c) = h tanh((l_v(c) - mean_k l_v(k)) / h)

n_v(x) being the event's number of distinct features in view v. Naive Bayes' log posteriors grow
with the number of features it counts as independent, so a view with many features per event
(character n-grams) would shout down one with few; per sqrt(feature) they speak on one scale
(training.log_odds_per_sqrt_feature; `scale = "none"` reads them as they are). The soft clip at
h = soft_clip / 2 nats keeps one expert's certainty from deciding alone: for two classes the
input is the log-odds per sqrt(feature), z_v, soft-clipped to +-soft_clip:

    x_v = u_v(pos) - u_v(neg) = soft_clip tanh(z_v / soft_clip)

The combined prediction is the softmax of the weighted inputs, the weights a distribution,
plus an offset per class:

    s_c = b_c + sum_v w_v u_v(c),   Q(c | x) = exp(s_c) / sum_k exp(s_k),   w_v >= 0,  sum_v w_v = 1

For two classes its log-odds are b + sum_v w_v x_v: a weighted geometric mean of the experts'
odds, on one scale all stream long (no weight can grow the score). With one weight 1 it is
that expert on this scale; weights start at 1/k, the plain product of experts.

The offsets are the decision's zero point. Dividing by sqrt(n) and the soft clip shrink each
expert's prior log-odds with the rest, so 0 is not where the classes part, and where they part
drifts with the stream's class balance (Enron-Spam's mailboxes go from 29% to 75% spam). The
offsets move like a perceptron's threshold, only on a mistake: when the predicted class k is
not the label y, b_y += step / 2 and b_k -= step / 2. A log-loss gradient on them would chase
calibration instead and drift with every confident event (measured: it lowered SMS accuracy
below one view's and ranked Enron worse).

Learning the weights: after predicting a labeled event of class y, one step of exponentiated
gradient (Kivinen and Warmuth 1997) on its log loss -log Q(y | x), whose gradient is

    g_v = d(-log Q(y | x)) / d w_v = sum_c (Q(c | x) - [c = y]) u_v(c)       (two classes: (p - y) x_v)

    w_v <- w_v exp(-eta g_v) / sum_k w_k exp(-eta g_k),   then   w_v <- (1 - share) w_v + share / k

(Q including the offsets).

EG's multiplicative step keeps the weights a distribution; its regret against the best fixed
weighting grows as sqrt(T log k). The share (Herbster and Warmuth's fixed share) keeps every
weight at least share / k, so an expert that was poor for a while can return when the stream
drifts back to it. The constants were measured on every corpus here and on eleven more streams
(SpamAssassin in five orders, each Enron-Spam mailbox alone; benchmarks/mail_quality.py and
docs/views.md): eta from 0.003 to 0.03 ranks alike; per-sqrt inputs matter
most (plain log-odds, even clipped, rank 2-3x worse); an unconstrained logistic layer with a
bias (AdaGrad or SGD) drifted and ranked worse on raw mail (1-ROCA% 0.048 against 0.032); a
Hedge mixture of the experts' probabilities converges to the single best expert and so never
beats it; the fixed 1/k product ranks within 1-2% of the learned weights.

Determinism: the weights move once per labeled event, in labeled order, by a fixed sequence of
float operations; the experts' predictions are those of the prequential step whatever the batch
size (training.predict_learn), so the combination is a function of the labeled stream alone, as
the counts are: every replica, restore and batch size gets the same weights bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from stream_nb.model._numerics import normalise_log_row
from stream_nb.model.base import ViewBatch
from stream_nb.model.posterior import Posterior, log_posteriors_of
from stream_nb.model.training import event_sizes, predict_learn

INPUT_FLOOR = 1e6  # nats: far below any finite log posterior of a message; stands in for -inf
INPUT_SCALES = ("sqrt_features", "none")
DEFAULT_LEARNING_RATE = 0.03
DEFAULT_SHARE = 0.001
DEFAULT_SOFT_CLIP = 10.0
DEFAULT_OFFSET_STEP = 0.03
_NAME_MAX = 64


def _positive_number(name: str, value, low: float = 0.0, high: float = math.inf, *, low_inclusive=False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not (
            (low <= value if low_inclusive else low < value) and value <= high):
        bound = f"{'>=' if low_inclusive else '>'} {low:g}" + ("" if high == math.inf else f" and <= {high:g}")
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


class CombinedPosterior(Posterior):
    """A combined prediction (a `Posterior` of the combined log scores) that keeps what it was
    combined from, for its clues without scoring the event again: the classes, each expert's
    inputs over them, and the weights and offsets of the moment."""

    __slots__ = ("classes", "inputs", "weights", "offsets")

    def shares(self, names: Sequence[str], best, runner_up) -> list[tuple[str, float]]:
        """Each expert's part w_v (u_v(best) - u_v(runner_up)) of the combined score, named by its
        view, and the offsets' part "(offset)": they add up to s_best - s_runner_up."""
        c, k = self.classes.index(best), self.classes.index(runner_up)
        parts = [(name, weight * (row[c] - row[k])) for name, weight, row in zip(names, self.weights, self.inputs)]
        return [*parts, ("(offset)", self.offsets.get(best, 0.0) - self.offsets.get(runner_up, 0.0))]


class LogLinearPool:
    """The weights of the combination (see the module doc).

    State (plain JSON): {"learning_rate", "share", "soft_clip", "offset_step", "scale",
    "weights": [k floats, a distribution], "offsets": [[class, offset], ...] in the order classes
    met the pool, "updates": int}."""

    def __init__(self, experts: int, learning_rate: float = DEFAULT_LEARNING_RATE, share: float = DEFAULT_SHARE,
                 soft_clip: float = DEFAULT_SOFT_CLIP, scale: str = "sqrt_features",
                 offset_step: float = DEFAULT_OFFSET_STEP) -> None:
        if type(experts) is not int or experts < 1:
            raise ValueError(f"a pool needs at least one expert, got {experts!r}")
        self.learning_rate = _positive_number("learning_rate", learning_rate, 0.0, 100.0, low_inclusive=True)
        self.share = _positive_number("share", share, 0.0, 1.0, low_inclusive=True)
        self.soft_clip = _positive_number("soft_clip", soft_clip)
        self.offset_step = _positive_number("offset_step", offset_step, 0.0, 100.0, low_inclusive=True)
        if scale not in INPUT_SCALES:
            raise ValueError(f"scale must be one of {', '.join(INPUT_SCALES)}, got {scale!r}")
        self.scale = scale
        self.weights = [1.0 / experts] * experts
        # class -> b_c (0 for a class not met yet); replaced by a step, never changed in place once
        # built, so a prediction holds the dict of its moment without a copy (as it holds the weights)
        self.offsets: dict = {}
        self.updates = 0

    def inputs(self, log_posteriors: list[float], n_features: int) -> list[float]:
        """u_v(c) for one expert's log posteriors of one event (its n distinct features)."""
        floored = [value if value > -INPUT_FLOOR else -INPUT_FLOOR for value in log_posteriors]
        if self.scale == "sqrt_features":
            root = math.sqrt(max(n_features, 1))
            floored = [value / root for value in floored]
        mean = math.fsum(floored) / len(floored)
        half = self.soft_clip / 2
        return [half * math.tanh((value - mean) / half) for value in floored]

    def logits(self, inputs: list[list[float]], classes: Sequence) -> list[float]:
        """s_c for each of `classes`, from each expert's inputs over those classes."""
        logits = []
        offsets = self.offsets
        for c, label in enumerate(classes):
            total = offsets.get(label, 0.0)
            for weight, row in zip(self.weights, inputs):
                total += weight * row[c]
            logits.append(total)
        return logits

    def update(self, inputs: list[list[float]], classes: Sequence, label, logits: list[float],
               q: list[float] | None = None) -> None:
        """One exponentiated-gradient step on -log Q(label | x) (the event's `logits`, computed
        before, and `q`, their softmax, when the caller has it), then the share; on a mistake,
        the offsets' step."""
        if label not in classes or len(classes) < 2:
            return
        if len(classes) == 2 and q is not None:
            self.update_two(inputs, classes, label, logits, q)
            return
        predicted = classes[max(range(len(logits)), key=logits.__getitem__)]  # the first largest, as Q's argmax
        if predicted != label and self.offset_step:
            self._move_offsets(label, predicted)
        if q is None:
            q = normalise_log_row(logits, [True] * len(logits), logits)
        residual = [p - (1.0 if c == label else 0.0) for p, c in zip(q, classes)]
        rate = self.learning_rate
        moved = []
        for weight, row in zip(self.weights, inputs):
            gradient = 0.0
            for r, value in zip(residual, row):
                gradient += r * value
            moved.append(weight * math.exp(-rate * gradient))
        total = math.fsum(moved)
        k = len(moved)
        self.weights = [(1.0 - self.share) * (weight / total) + self.share / k for weight in moved]
        self.updates += 1

    def _move_offsets(self, label, predicted) -> None:
        """The offsets' step on a mistake (`predicted` for `label`), into a new dict."""
        half = self.offset_step / 2
        offsets = dict(self.offsets)
        offsets[label] = offsets.get(label, 0.0) + half
        offsets[predicted] = offsets.get(predicted, 0.0) - half
        self.offsets = offsets

    def update_two(self, inputs: list[list[float]], classes: Sequence, label, logits: list[float],
                   q: list[float]) -> None:
        """`update` of an event of two classes (`label` one of them) with its softmax `q`, by
        the same float operations without the general loops (`update` takes this path)."""
        first_class, second_class = classes
        if label != first_class and label != second_class:
            return
        predicted = second_class if logits[1] > logits[0] else first_class  # the first largest
        if predicted != label and self.offset_step:
            self._move_offsets(label, predicted)
        first_residual = q[0] - (1.0 if first_class == label else 0.0)
        second_residual = q[1] - (1.0 if second_class == label else 0.0)
        rate, exp = self.learning_rate, math.exp
        moved = [weight * exp(-rate * (0.0 + first_residual * a + second_residual * b))
                 for weight, (a, b) in zip(self.weights, inputs)]
        total = math.fsum(moved)
        share = self.share
        keep, floor = 1.0 - share, share / len(moved)
        self.weights = [keep * (weight / total) + floor for weight in moved]
        self.updates += 1

    def settings(self) -> tuple:
        return self.learning_rate, self.share, self.soft_clip, self.offset_step, self.scale

    def merge(self, other: LogLinearPool) -> None:
        """Take in the steps of a pool taught on another part of the stream (in place).

        Without the share, exponentiated gradient from the uniform start leaves
        w_v = exp(-eta G_v) / Z, G_v the sum of its gradients: the steps of two parts add up in
        the exponent, so their weights combine as the normalised product

            w_v = w_v,A w_v,B / sum_k w_k,A w_k,B

        (each part's gradients taken at its own weights, so not the weights one stream of both
        would reach, as no online learner's are), then the share floor once. The offsets, sums of
        +-step/2 moves from 0, add up; so do the updates."""
        if other.settings() != self.settings() or len(other.weights) != len(self.weights):
            raise ValueError(f"cannot merge combinations with different settings or experts: "
                             f"{self.settings()} over {len(self.weights)} vs {other.settings()} over {len(other.weights)}")
        product = [a * b for a, b in zip(self.weights, other.weights)]
        total = math.fsum(product)
        k = len(product)
        self.weights = [(1.0 - self.share) * (p / total) + self.share / k for p in product]
        offsets = dict(self.offsets)
        for label, offset in other.offsets.items():
            offsets[label] = offsets.get(label, 0.0) + offset
        self.offsets = offsets
        self.updates += other.updates

    def to_state(self) -> dict:
        return {"learning_rate": self.learning_rate, "share": self.share, "soft_clip": self.soft_clip,
                "offset_step": self.offset_step, "scale": self.scale, "weights": list(self.weights),
                "offsets": [[label, offset] for label, offset in self.offsets.items()], "updates": self.updates}

    @classmethod
    def from_state(cls, state, experts: int) -> LogLinearPool:
        """The pool a state holds; ValueError naming the first broken invariant."""
        if not isinstance(state, dict):
            raise ValueError("the combination's state must be a dict")
        expected = {"learning_rate", "share", "soft_clip", "offset_step", "scale", "weights", "offsets", "updates"}
        if set(state) != expected:
            raise ValueError(f"the combination's state must have exactly the keys {sorted(expected)}, "
                             f"got {sorted(state)}")
        pool = cls(experts, state["learning_rate"], state["share"], state["soft_clip"], state["scale"],
                   state["offset_step"])
        weights = state["weights"]
        if (not isinstance(weights, list) or len(weights) != experts or not all(_finite(w) and w >= 0 for w in weights)
                or abs(math.fsum(weights) - 1.0) > 1e-9):
            raise ValueError(f"the combination's weights must be a distribution over the {experts} experts "
                             f"(finite, >= 0, adding up to 1), got {weights!r}"[:200])
        pool.weights = [float(w) for w in weights]
        offsets = state["offsets"]
        if not isinstance(offsets, list):
            raise ValueError("the combination's offsets must be a list of [class, offset]")
        for entry in offsets:
            if not isinstance(entry, list) or len(entry) != 2 or not _label(entry[0]) or not _finite(entry[1]):
                raise ValueError(f"an offset of the combination must be [class, finite number], got {entry!r}"[:200])
            if entry[0] in pool.offsets:
                raise ValueError(f"class {entry[0]!r} has two offsets in the combination")
            pool.offsets[entry[0]] = float(entry[1])
        updates = state["updates"]
        if type(updates) is not int or updates < 0:
            raise ValueError(f"the combination's updates must be an int >= 0, got {updates!r}")
        pool.updates = updates
        return pool


def _two_class_inputs(pool: LogLinearPool, log_scores: Sequence[Sequence[float]], sizes: Sequence[int]) -> list[list[float]]:
    """pool.inputs(log_posteriors_of(scores), n) for each row of two finite log scores (its
    event's n distinct features), by the same float operations: math.fsum of two finite terms is
    their rounded sum, which is a + b except that fsum gives 0.0 for -0.0 + -0.0 (hence the + 0.0
    of the mean; the log-sum-exp's terms add up to at least 1); max(a, b) is the first largest."""
    log, exp, sqrt, tanh = math.log, math.exp, math.sqrt, math.tanh
    rooted = pool.scale == "sqrt_features"
    half = pool.soft_clip / 2
    inputs = []
    for (first, second), n in zip(log_scores, sizes):
        best = second if second > first else first
        total = best + log(exp(first - best) + exp(second - best))
        first, second = first - total, second - total
        first = first if first > -INPUT_FLOOR else -INPUT_FLOOR
        second = second if second > -INPUT_FLOOR else -INPUT_FLOOR
        if rooted:
            root = sqrt(n if n > 1 else 1)
            first, second = first / root, second / root
        mean = (first + second + 0.0) / 2
        inputs.append([half * tanh((first - mean) / half), half * tanh((second - mean) / half)])
    return inputs


def _two_class_rows(pool: LogLinearPool, predictions: Sequence, sizes: Sequence[int]) -> list:
    """For each of one expert's predictions (its event's `sizes` distinct features): (its two
    classes, `_two_class_inputs` of its log scores) when it has two classes with finite log
    scores, else None."""
    rows: list = [None] * len(predictions)
    places = []
    for i, prediction in enumerate(predictions):
        scores = getattr(prediction, "log_scores", None)
        if scores is not None and len(prediction) == 2:
            first, second = scores
            if first - first == 0.0 and second - second == 0.0:  # else an infinity or NaN: the general path
                places.append(i)
    inputs = _two_class_inputs(pool, [predictions[i].log_scores for i in places], [sizes[i] for i in places])
    for i, row in zip(places, inputs):
        rows[i] = (tuple(predictions[i]), row)
    return rows


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
    def features_evicted(self) -> int:
        """Features the experts' budgets ([model] max_features, one a view) dropped."""
        return sum(getattr(model, "features_evicted", 0) for model in self.models)

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
        if learned_by is not None and (type(learned_by) is not int or learned_by <= 0
                                       or learned_by >= 1 << len(self.models)):
            raise ValueError(f"learned_by {learned_by!r} names no subset of the {len(self.models)} experts")
        chosen = [v for v in range(len(self.models)) if learned_by is None or learned_by >> v & 1]
        takers = [self.models[v].prepared_unlearning(X.views[v], y, w, learned_at=learned_at) for v in chosen]
        for take_back in takers:
            take_back()

    def merge(self, other: Experts) -> Experts:
        """Add another Experts model of the same views (trained on another part of the stream):
        each expert's counts as its own `merge` adds them (exact: the model of both parts), and
        the pools' steps (LogLinearPool.merge). Every part is checked before anything changes."""
        if type(other) is not Experts or other.names != self.names:
            raise TypeError(f"cannot merge {getattr(other, 'names', type(other).__name__)!r} into an Experts model of "
                            f"views {self.names!r}")
        if other.pool.settings() != self.pool.settings():
            raise ValueError(f"cannot merge combinations with different settings: {self.pool.settings()} vs "
                             f"{other.pool.settings()}")
        for mine, theirs in zip(self.models, other.models):
            mine._check_mergeable(theirs)
        for mine, theirs in zip(self.models, other.models):
            mine.merge(theirs)
        self.pool.merge(other.pool)
        return self

    # ---- prediction and learning ----------------------------------------------------------

    def _combined(self, predictions: list, sizes: list, label=None, learn: bool = False) -> Posterior | dict:
        """The combination of one event's expert predictions (`sizes`: its distinct features in
        each view); with `learn`, then one step of the pool on `label`."""
        classes, inputs = self._inputs(predictions, sizes)
        if not classes:
            return {}
        logits = self.pool.logits(inputs, classes)
        q = normalise_log_row(logits, [True] * len(logits), logits)
        return self._posterior(classes, inputs, logits, q, label, learn)

    def _posterior(self, classes: list, inputs: list, logits: list, q: list, label, learn: bool) -> CombinedPosterior:
        """An event's combined P(c | x) (`q` over `classes`), with what its clues read; with
        `learn`, then one step of the pool on `label`."""
        combined = CombinedPosterior(zip(classes, q))
        combined.log_scores = logits
        # what the clues read (the weights' list and the offsets' dict are replaced by a step,
        # never changed in place)
        combined.classes, combined.inputs, combined.weights = classes, inputs, self.pool.weights
        combined.offsets = self.pool.offsets
        if learn and label is not None:
            self.pool.update(inputs, classes, label, logits, q)
        return combined

    def _inputs(self, predictions: list, sizes: list) -> tuple[list, list[list[float]]]:
        """(the classes every expert predicts, each expert's inputs u_v(c) over them); no
        classes when some expert has none yet."""
        if any(not p for p in predictions):
            return [], []
        classes = [c for c in predictions[0] if all(c in p for p in predictions[1:])]
        if not classes:
            return [], []
        inputs = []
        for prediction, n in zip(predictions, sizes):
            log_posteriors = log_posteriors_of(prediction.log_scores)
            if len(prediction) != len(classes) or list(prediction) != classes:  # else in the classes' order
                by_class = dict(zip(prediction, log_posteriors))
                log_posteriors = [by_class[c] for c in classes]
            inputs.append(self.pool.inputs(log_posteriors, n))
        return classes, inputs

    def predict_learn_views(self, X: ViewBatch, labels: list, mode: str, margin: float,
                            margin_scale: str) -> tuple[list, list[bool]]:
        """Each expert's prequential step on its view (training.predict_learn, its own regime),
        then, event by event in order, their combination (predicted before its pool step). Each
        event's learned flag is `learned_flag` of the experts' (truthy when some learned it).

        The experts are independent, so the order they learn in changes nothing: those whose
        views are made go first, while the featuriser's helper thread still makes the others
        (X.made()). A bad event refuses the batch before any expert learns: the made views are
        checked first, and a view made later, featurised from the same events by the same C
        reading and carrying the same labels, is refused by nothing they passed."""
        self._check_batch(X)
        made = X.made()
        for v in made:
            self.models[v].validate(X.view(v), labels)
        per_expert: list = [None] * len(self.models)
        for v in made + [v for v in range(len(self.models)) if v not in made]:
            view = X.view(v)
            if v not in made:
                self.models[v].validate(view, labels)
            per_expert[v] = predict_learn(self.models[v], view, labels, mode, margin, margin_scale, validated=True)
        sizes = [event_sizes(view) for view in X.views]
        combined = self._combined_many([probabilities for probabilities, _ in per_expert], sizes, labels)
        learned = [self.learned_flag(flags) for flags in zip(*(flags for _, flags in per_expert))]
        return combined, learned

    def _combined_many(self, per_expert: list[list], sizes: list[list[int]], labels: Sequence | None = None) -> list:
        """`_combined` of each event in order (`per_expert[v][i]`: expert v's prediction of event
        i, `sizes[v][i]` its distinct features; with `labels`, learning each labeled one), the
        same results bit for bit: `_combined_two_classes` where it applies, else `_combined`."""
        learn = labels is not None
        # each expert's inputs, made before the batch's first step: they read the pool's
        # settings, never its weights or offsets
        view_rows = [_two_class_rows(self.pool, predictions, view_sizes)
                     for predictions, view_sizes in zip(per_expert, sizes)]
        combined = []
        for i, rows in enumerate(zip(*view_rows)):
            label = labels[i] if learn else None
            result = self._combined_two_classes(rows, label, learn)
            combined.append(result if result is not None
                            else self._combined([p[i] for p in per_expert], [s[i] for s in sizes], label, learn=learn))
        return combined

    def _combined_two_classes(self, rows: Sequence, label, learn: bool):
        """`_combined` of an event whose experts all predict the same two classes with finite log
        scores (every event once both classes are learned; `rows`: each expert's
        `_two_class_rows` entry), by the same float operations without its general glue (the
        softmax inline); None, with nothing changed, for any other event."""
        first = rows[0]
        if first is None:
            return None
        classes = first[0]
        for row in rows:
            if row is None or row[0] != classes:
                return None
        inputs = [row[1] for row in rows]
        pool = self.pool
        offsets = pool.offsets
        first_class, second_class = classes
        # pool.logits: each class's offset, then each expert's term in turn
        first_logit, second_logit = offsets.get(first_class, 0.0), offsets.get(second_class, 0.0)
        for weight, (a, b) in zip(pool.weights, inputs):
            first_logit += weight * a
            second_logit += weight * b
        if first_logit - first_logit != 0.0 or second_logit - second_logit != 0.0:
            return None
        # normalise_log_row of two finite logits: the first largest, np.exp, a sum from 0.0
        best = second_logit if second_logit > first_logit else first_logit
        first_weight, second_weight = np.exp(np.array([first_logit - best, second_logit - best])).tolist()
        total = 0.0 + first_weight + second_weight
        return self._posterior([first_class, second_class], inputs, [first_logit, second_logit],
                               [first_weight / total, second_weight / total], label, learn)

    def as_view_batch(self, X) -> ViewBatch:
        """X itself when a ViewBatch, else a list of events, each a feature dict per view (the
        per-event API: what `[f.transform_one(text) for f in view featurisers]` gives)."""
        if isinstance(X, ViewBatch):
            return X
        events = list(X)
        if not all(isinstance(views, (list, tuple)) and len(views) == len(self.models) for views in events):
            raise TypeError(f"an Experts model of {len(self.models)} views reads a ViewBatch, or events given "
                            f"as {len(self.models)} feature dicts each (one per view)")
        return ViewBatch([[views[v] for views in events] for v in range(len(self.models))])

    def unlearn_one(self, views: Sequence[dict], y, w: float = 1.0, *, learned_at=None,
                    learned_by: int | None = None) -> None:
        """`unlearn_many` of one event given as a feature dict per view."""
        self.unlearn_many(self.as_view_batch([views]), [y], [w], learned_at=learned_at, learned_by=learned_by)

    def predict_proba_one(self, views: Sequence[dict]) -> Posterior | dict:
        """The combined P(c | x) of one event given as each view's feature dict."""
        return self._combined(*self._expert_predictions(views))

    def _expert_predictions(self, views: Sequence[dict]) -> tuple[list, list]:
        if len(views) != len(self.models):
            raise TypeError(f"an Experts model of {len(self.models)} views reads one feature dict per view")
        return [model.predict_proba_one(x) for model, x in zip(self.models, views)], [len(x) for x in views]

    def shares(self, views: Sequence[dict], best, runner_up) -> list[tuple[str, float]]:
        """Each expert's part of the combined score of class `best` over `runner_up` for one event
        (each view's feature dict): w_v (u_v(best) - u_v(runner_up)), named by its view, and the
        offsets' b_best - b_runner_up as "(offset)"; they add up to s_best - s_runner_up."""
        combined = self.predict_proba_one(views)
        if best not in combined or runner_up not in combined:
            return []
        return combined.shares(self.names, best, runner_up)

    def evidence_scale(self, v: int, n_features: int, weights: Sequence[float] | None = None) -> float:
        """What one nat of expert v's log-odds is worth in the combined score before the soft
        clip: w_v / sqrt(n_v(x)) (w_v on scale "none"); the clip only lessens it. `weights`: those
        a prediction was made with (default: now)."""
        weight = (self.pool.weights if weights is None else weights)[v]
        return weight if self.pool.scale == "none" else weight / math.sqrt(max(n_features, 1))

    def predict_proba_many(self, X: ViewBatch) -> list:
        """The combined P(c | x) of each event, learning nothing."""
        self._check_batch(X)
        per_expert = [model.predict_proba_many(view) for model, view in zip(self.models, X.views)]
        sizes = [event_sizes(view) for view in X.views]
        return self._combined_many(per_expert, sizes)

    def validate(self, X: ViewBatch, y, w=None) -> None:
        self._check_batch(X)
        for model, view in zip(self.models, X.views):
            model.validate(view, y, w)

    def _check_batch(self, X) -> None:
        if not isinstance(X, ViewBatch) or X.width != len(self.models):
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
        clock = (models[0].forgetting_epoch, models[0].labeled_seen)
        for name, model in zip(names[1:], models[1:]):
            if (model.forgetting_epoch, model.labeled_seen) != clock:  # one labeled stream, one clock
                raise InvalidState(f"expert {name!r} is at labeled event {model.labeled_seen}, forgetting epoch "
                                   f"{model.forgetting_epoch}; expert {names[0]!r} at {clock[1]}, {clock[0]}: "
                                   "the experts of one stream share its labeled clock")
        try:
            pool = LogLinearPool.from_state(meta["pool"], len(models))
        except ValueError as error:
            raise InvalidState(str(error)) from None
        return cls(names, models, pool)

