"""Per-key models over several feature views: a PersonalMultinomialNB per view, combined by the
global pool (issue 35 with [personal]).

View v of key k is today's per-key model over expert v, the global model of that view
(stream_nb.model.personal): its own key counts N_fc,k^v, its own decisions (the training regime
on its own prediction), its own memory of learned ids, its own table of keys. So view v's keys
after a stream equal what replaying the stream with view v alone and [personal] gives, bit for
bit. The views of a key see the same labeled events in the same order, so their tables tick
alike and evict a key's counts at the same event.

The combination is the global pool's (stream_nb.model.experts.LogLinearPool) applied to the
key's predictions: with P_v,k(c | x) the prediction of view v for key k,

    s_c = b_c + sum_v w_v u_v,k(c),      Q_k(c | x) = softmax_c(s_c)

The pool learns as it does without keys, from the global experts' predictions: one
exponentiated-gradient step per labeled event, in labeled order. Every worker learns the whole
labeled log into the global models but only the keys of the partitions it owns, so only a pool
taught by the global predictions is the same function of the labeled log on every worker (and
in replay); its weights then say how far each view is to be trusted on this stream, and a key's
counts sharpen each view's prediction for that key. There is no pool per key: a key's few
events would teach its own weights little. A key with no counts in any view predicts exactly
as the global Experts model does, since each view's key model is then its global expert.
"""

from __future__ import annotations

from collections.abc import Sequence

from stream_nb.model.base import ViewBatch
from stream_nb.model.experts import Experts
from stream_nb.model.personal import PersonalMultinomialNB
from stream_nb.model.posterior import Posterior
from stream_nb.model.training import event_sizes, predict_learn


class PersonalExperts:
    """`personals[v]` is the per-key model over `experts.models[v]`; tables of keys are given
    as one table per view (a list), or None for each view's own."""

    def __init__(self, experts: Experts, personals: Sequence[PersonalMultinomialNB]) -> None:
        self.experts = experts
        self.personals = list(personals)
        if len(self.personals) != len(experts.models) or any(
                personal.global_model is not model for personal, model in zip(self.personals, experts.models)):
            raise ValueError("per-key views: one PersonalMultinomialNB over each expert, in the experts' order")

    @property
    def global_model(self) -> Experts:
        return self.experts

    @global_model.setter
    def global_model(self, experts: Experts) -> None:
        """Another Experts model of the same views (a worker's model replaced by a checkpoint)."""
        if len(experts.models) != len(self.personals):
            raise ValueError(f"per-key views: an Experts model of {len(experts.models)} views for {len(self.personals)}")
        self.experts = experts
        for personal, model in zip(self.personals, experts.models):
            personal.global_model = model

    @property
    def classes_(self) -> list:
        return self.experts.classes_

    @property
    def table(self) -> list:
        """Each view's own table of keys (replay's)."""
        return [personal.table for personal in self.personals]

    # the [personal] settings, every view's
    @property
    def idle_after(self) -> int | None:
        return self.personals[0].idle_after

    @property
    def remember_ids(self) -> int:
        return self.personals[0].remember_ids

    def _tables(self, table) -> list:
        """A table per view from `table`: a list of them, or a store holding them as `views`
        (stream_nb.keyed.view_tables.ViewTables); None: each view's own."""
        if table is None:
            return [None] * len(self.personals)
        tables = list(getattr(table, "views", table))
        if len(tables) != len(self.personals):
            raise ValueError(f"per-key views: {len(tables)} tables of keys for {len(self.personals)} views")
        return tables

    def _views(self, x) -> list:
        if not isinstance(x, (list, tuple)) or len(x) != len(self.personals):
            raise TypeError(f"per-key views read one feature dict per view ({len(self.personals)})")
        return list(x)

    # ---- the prequential step -------------------------------------------------------------

    def predict_learn_one(self, x, y, key, training: dict, table=None, *, event_id: str | None = None,
                          unlearn=None) -> tuple[Posterior | dict, bool | int]:
        """The prequential step of one event: each view's key prediction (and its rules), their
        combination by the pool as it stands; then each global expert's step under `training`
        and the pool's step on the experts' predictions (the Experts model's own step), each
        view's key learning when the regime on its prediction says so, the event observed.
        Returns (the key's combined prediction, the experts' learned flag: Experts.learned_flag)."""
        views, tables = self._views(x), self._tables(table)
        for personal, view in zip(self.personals, views):  # a bad event refuses it before any view learns
            personal.global_model.validate([view], [y])
        decided = [personal.predict_and_decide(view, y, key, own, event_id=event_id, unlearn=unlearn)
                   for personal, view, own in zip(self.personals, views, tables)]
        sizes = [len(view) for view in views]
        combined = self.experts._combined([prediction for prediction, _ in decided], sizes)
        steps = [predict_learn(personal.global_model, [view], [y], **training)
                 for personal, view in zip(self.personals, views)]
        self.experts._combined([probas[0] for probas, _ in steps], sizes, y, learn=True)
        for personal, view, own, (_, key_learns) in zip(self.personals, views, tables, decided):
            if key_learns and key is not None:
                personal.learn_key(view, y, key, table=own, event_id=event_id)
            if y is not None:
                personal.observe_labeled(key, own)
        return combined, self.experts.learned_flag([learned[0] for _, learned in steps])

    def predict_learn_batch(self, X: ViewBatch, rows: list | None, labels: list, keys: list, tables: list,
                            training: dict, observe=None, ids: list | None = None,
                            unlearns: list | None = None) -> list[tuple] | None:
        """predict_learn_one of each event at batch speed: every view's batch is checked first
        (PersonalMultinomialNB.prepared_batch), then each runs whole, then the pool combines and
        steps through the events in order. Exact because a view's steps never read the pool or
        another view. None when some view's batch path cannot take the batch (nothing learned).
        `tables[i]`: event i's table per view, or None (the event is the global models' alone).
        `observe(i, v)` is called after view v's step of each labeled event i (None: each view
        observes the event in its own table)."""
        self.experts._check_batch(X)
        k = len(self.personals)
        checked_rows = None if rows is None else [self._views(row) for row in rows]
        per_view_rows = [None if checked_rows is None else [row[v] for row in checked_rows] for v in range(k)]
        runs = [personal.prepared_batch(view, view_rows, labels, training)
                for personal, view, view_rows in zip(self.personals, X.views, per_view_rows)]
        if any(run is None for run in runs):
            return None
        # each event's tables split by view once: view v's pass reads column v
        split = [[None] * k if table is None else self._tables(table) for table in tables]
        results, global_predictions = [], []
        for v, run in enumerate(runs):
            view_tables = [event_tables[v] for event_tables in split]
            global_predictions.append([])
            results.append(run(keys, view_tables, None if observe is None else lambda i, v=v: observe(i, v),
                               ids, unlearns, global_predictions[v]))
        sizes = [event_sizes(view) for view in X.views]
        combined = []
        for i, label in enumerate(labels):
            event_sizes_i = [s[i] for s in sizes]
            prediction = self.experts._combined([r[i][0] for r in results], event_sizes_i)
            self.experts._combined([g[i] for g in global_predictions], event_sizes_i, label, learn=True)
            combined.append((prediction, self.experts.learned_flag([r[i][1] for r in results])))
        return combined

    def key_lesson(self, x, y, unlearn, event_id: str, key, table=None) -> bool:
        """Each view's own rules and learning of an event the global models learn nothing of
        (PersonalMultinomialNB.key_lesson). Whether some view's counts learned it."""
        views, tables = self._views(x), self._tables(table)
        learned = [personal.key_lesson(view, y, unlearn, event_id, key, own)
                   for personal, view, own in zip(self.personals, views, tables)]
        return any(learned)

    def observe_labeled(self, key, table=None) -> None:
        for personal, own in zip(self.personals, self._tables(table)):
            personal.observe_labeled(key, own)

    def predict_many(self, X: ViewBatch, keys: list, tables: list) -> list:
        """Each event's combined P(c | x): of its key's views where `tables[i]` is a table (each
        view's PersonalMultinomialNB.predict_batch over its expert's prediction, so a key without
        counts gets the global Experts model's), else the global Experts model's. Each expert
        scores the batch once, for both."""
        self.experts._check_batch(X)
        split = [[None] * len(self.personals) if table is None else self._tables(table) for table in tables]
        per_view = []
        for v, (personal, view) in enumerate(zip(self.personals, X.views)):
            own = personal.global_model.predict_proba_many(view)
            per_view.append(personal.predict_batch(view, keys, [event_tables[v] for event_tables in split], own))
        sizes = [event_sizes(view) for view in X.views]
        return [self.experts._combined([p[i] for p in per_view], [s[i] for s in sizes]) for i in range(len(X))]

    def predict_proba_one(self, x, key, table=None) -> Posterior | dict:
        """The combined prediction of key's views, learning nothing."""
        views, tables = self._views(x), self._tables(table)
        predictions = [personal.predict_proba_one(view, key, own)
                       for personal, view, own in zip(self.personals, views, tables)]
        return self.experts._combined(predictions, [len(view) for view in views])
