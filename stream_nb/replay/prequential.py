"""Prequential (test-then-train) replay of a stream through one or more models, in batches."""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice

from stream_nb.config import beyond_max_classes
from stream_nb.features.fields import EventFeaturizer
from stream_nb.features.mail import MailFeaturizer, UnreadableMail
from stream_nb.features.text import transform_sparse_views
from stream_nb.lessons import DEFAULT_REMEMBER_IDS, LEARNED, LabeledLessons, LearnedIds, id_of_keyed
from stream_nb.model.base import SparseBatch, ViewBatch
from stream_nb.model.decision import band_verdict
from stream_nb.model.posterior import positive_score
from stream_nb.model.scale import check_score_scale
from stream_nb.model.training import event_sizes, log_odds_per_sqrt_feature, predict_learn
from stream_nb.replay.metrics import PrequentialMetrics


@dataclass
class Contender:
    """One configuration in a replay: its model, its featurisers and its score sheet."""

    name: str
    model: object
    text_featurizer: object  # TextFeaturizer: events with text only
    event_featurizer: object | None = None  # EventFeaturizer: events with structured features
    metrics: PrequentialMetrics = field(default_factory=PrequentialMetrics)
    recorder: object | None = None  # EvaluationRecorder, when a full report is wanted
    unscored: int = 0  # labeled events predicted before any class existed (not scored, as River)
    scored_ids: list = field(default_factory=list)  # ids of the recorded events, in order
    scored_keys: list = field(default_factory=list)  # their "key" (None: none), in the same order
    training: dict = field(default_factory=lambda: {"mode": "all", "margin": 0.0})
    learned: int = 0  # labeled events learned (fewer than labeled with a selective training mode)
    band: list | None = None  # the unsure band on P(positive), when reported
    score_band: list | None = None  # the unsure band on the score (log-odds, nats), instead of `band`
    positive: object = None
    verdicts: list = field(default_factory=list)  # (verdict, true label) of scored events, with a band
    reads_text: bool = True  # the model kind reads text (count models); else only the event featuriser
    refused: Counter = field(default_factory=Counter)  # events the featuriser or model refused, by reason
    first_refusal: str | None = None  # why the first of them was refused
    seconds: float = 0.0  # this contender's own time (featurise + predict + learn + scoring)
    # (event, probabilities, n distinct features or None) of each unlabeled event
    on_unlabeled: Callable[[dict, dict, int | None], None] | None = None
    max_classes: int | None = None  # a label beyond this many classes is refused (too_many_classes)
    mail_read: int = 0  # mail events read (parsed), the unreadable ones included
    mail_defects: Counter = field(default_factory=Counter)  # what was wrong in them, by defect
    # "sqrt_features": scores are the log-odds per sqrt(distinct features) (stream_nb.model.scale),
    # for the recorder, the unsure band and on_unlabeled; each event's size is then kept
    score_scale: str = "none"
    # the memory of learned ids and the rules of duplicates and corrections, as the worker's
    lessons: LabeledLessons = field(default_factory=lambda: LabeledLessons(LearnedIds(DEFAULT_REMEMBER_IDS)))
    # per-key models over `model` ([personal], stream_nb.model.personal): an event with a "key" is
    # predicted by its key's model; None: one global model
    personal: object | None = None
    # [views]: (text featuriser, event featuriser) of each view after the first (the first is
    # text_featurizer/event_featurizer), for an `Experts` model; empty: one view
    more_views: list = field(default_factory=list)
    # with several views and a recorder: each recorded event's combination inputs, a row per event
    # (each expert's centred, scaled, soft-clipped log posteriors by class), for each view's own measures
    view_inputs: list = field(default_factory=list)
    # mail readings made ahead in other processes (stream_nb.replay.parse_ahead.ParseAhead), for
    # this contender's mail featuriser; None: every message is read here
    parse_ahead: object | None = None

    @classmethod
    def of(cls, name: str, config, **fields) -> Contender:
        """The contender of a configuration: its model (one per view for [views]), featurisers,
        training regime and memory of learned ids; `fields` set or replace any other field."""
        model = fields.pop("model", None) or config.build_model()
        made = {"training": dict(config.training), "reads_text": config.reads_text,
                "max_classes": config.max_classes, "lessons": LabeledLessons(LearnedIds(config.remember_ids)),
                "more_views": [(config.build_featurizer(view), config.build_event_featurizer(view))
                               for view in config.views]}
        if "personal" not in fields:
            made["personal"] = config.build_personal(model)
        return cls(name, model, config.build_featurizer() if config.reads_text else None,
                   config.build_event_featurizer(), **{**made, **fields})

    def __post_init__(self) -> None:
        experts = len(getattr(self.model, "models", None) or [self.model])
        if experts != 1 + len(self.more_views):
            raise ValueError(f"a model of {experts} feature views needs the featurisers of each (more_views: "
                             f"{len(self.more_views)} beyond the first); Contender.of builds them from a configuration")
        check_score_scale(self.score_scale)
        if self.recorder is not None and getattr(self.recorder, "score_scale", "none") != self.score_scale:
            raise ValueError(f"the recorder's score_scale {self.recorder.score_scale!r} is not the "
                             f"contender's {self.score_scale!r}")
        featurizer = self.event_featurizer if self.event_featurizer is not None else EventFeaturizer(
            text=self.text_featurizer)
        self.mail_featurizer = MailFeaturizer(featurizer, on_parsed=self._count_mail, ahead=self.parse_ahead)
        self._views = [(self.text_featurizer, self.event_featurizer, self.mail_featurizer)]
        for text, event in self.more_views:  # one parse of a message for every view
            mail = MailFeaturizer(event if event is not None else EventFeaturizer(text=text),
                                  reader=self.mail_featurizer)
            self._views.append((text, event, mail))

    def _count_mail(self, parsed) -> None:
        self.mail_read += 1
        self.mail_defects.update(parsed.defects)

    def featurise(self, events: list[dict]):
        return ViewBatch.by_view(self.model, self._views, lambda views, experts: self._featurise_views(views, experts,
                                                                                                       events))

    def _featurise_views(self, views: list[tuple], models: list, events: list[dict]) -> list:
        """Each view's batch of `events`, for the model of the same place: views that read the
        events alike read each text once for all (transform_sparse_views, transform_batch_views)."""
        by_text = [self.reads_text and all(event.get("mail") is None for event in events) and (
            event_featurizer is None or all(event.get("features") is None for event in events))
            for _, event_featurizer, _ in views]
        if len(set(by_text)) > 1:  # (views without an event featuriser, events with structured features)
            return [self._featurise_views([view], [model], events)[0] for view, model in zip(views, models)]
        # the models' vocabularies: the C featuriser looks the names up as it makes them
        vocabularies = [getattr(model, "vocabulary", None) for model in models]
        # (pending: the experts whose views are made learn while the featuriser's helper makes the others)
        if by_text[0]:
            return transform_sparse_views([text for text, _, _ in views], [event.get("text") or "" for event in events],
                                          vocabularies, pending=True)
        # mail, structured features, or both
        return MailFeaturizer.transform_batch_views([mail for _, _, mail in views], events, vocabularies, pending=True)

    def featurise_one(self, event: dict) -> dict | list[dict]:
        """The features of one event as a dict, as the model sees them (for its clues); for an
        Experts model, one dict per view."""
        dicts = [self._featurise_view_one(view, event) for view in self._views]
        return dicts if len(dicts) > 1 else dicts[0]

    def _featurise_view_one(self, view: tuple, event: dict) -> dict:
        text_featurizer, event_featurizer, mail_featurizer = view
        if self.reads_text and event.get("mail") is None and (event_featurizer is None
                                                               or event.get("features") is None):
            return text_featurizer.transform_one(event.get("text") or "")
        return mail_featurizer.transform_event(event)

    def _beyond_max_classes(self, labels: list) -> set[int]:
        """Positions of the labels that would be a class beyond max_classes (counted, refused)."""
        if self.max_classes is None:
            return set()
        known = {str(label) for label in self.model.classes_}
        beyond = set()
        for i, label in enumerate(labels):
            if label is None:
                continue
            refusal = beyond_max_classes(label, known, self.max_classes)
            if refusal is None:
                known.add(str(label))
                continue
            beyond.add(i)
            self.refused["too_many_classes"] += 1
            if self.first_refusal is None:
                self.first_refusal = refusal
        return beyond

    def predict_learn(self, items: list[dict], labels: list) -> tuple[list, list]:
        """(predictions, learned) of `predict_learn_sized`."""
        predictions, learned, _ = self.predict_learn_sized(items, labels)
        return predictions, learned

    def predict_learn_sized(self, items: list[dict], labels: list,
                            unlearns: list | None = None) -> tuple[list, list, list | None]:
        """`_predict_learn_plain` of the batch through the rules of duplicates and corrections
        (stream_nb.lessons, as the worker runs them; `unlearns` each event's "unlearn", None
        for none): an event is predicted and learned as it comes unless the memory of learned
        ids says otherwise. Only an unlabeled event or a labeled one seen for the first time
        (outcome "learned") keeps its prediction; a duplicate or correction gets None, as a
        refused event does, and is not scored (it was when it first came). Third: as
        `_predict_learn_plain`'s (None for those events)."""
        n = len(items)
        if unlearns is None:
            unlearns = [None] * n
        sized = self.score_scale != "none"
        sizes: list | None = [None] * n if sized else None

        def learn(start: int, stop: int) -> list:
            answers = []
            for lo, hi in _class_pieces(self.model, labels, start, stop):
                predictions, learned, some_sizes = self._predict_learn_plain(items[lo:hi], labels[lo:hi])
                if sized:
                    sizes[lo:hi] = some_sizes
                answers += [None if p is None else (p, flag) for p, flag in zip(predictions, learned)]
            return answers

        def reject(i: int, error: Exception) -> None:
            self.refused["rejected_by_model"] += 1
            if self.first_refusal is None:
                self.first_refusal = f"event {items[i].get('id')!r}: {error}"

        ids = [item.get("id") for item in items]
        if set(map(type, ids)) != {str} or "" in ids:  # else every id is its own key
            ids = [_memory_key(event_id) for event_id in ids]
        aside = None
        if self.personal is not None:  # one lesson a user: ids scoped by key; a key's rules of its own
            ids = [None if event_id is None else id_of_keyed(item.get("key"), event_id)
                   for event_id, item in zip(ids, items)]

            def aside(i: int) -> None:
                key, event_id = items[i].get("key"), _memory_key(items[i].get("id"))
                if key is not None and event_id is not None:
                    self.personal.key_lesson(self.featurise_one(items[i]), labels[i], unlearns[i], event_id, key)

        lessons = self.lessons.run(self.model, ids, labels, unlearns,
                                   _Featurised(self, items), learn, reject, aside)
        predictions = lessons.probas
        for i, outcome in enumerate(lessons.outcomes):
            if outcome is not None and outcome != LEARNED:  # not a first sending, or refused
                predictions[i] = None
                if sized:
                    sizes[i] = None
        return predictions, lessons.learned, sizes

    def _predict_learn_keyed(self, items: list[dict], labels: list) -> tuple[list, list, list | None]:
        """The prequential step with per-key models, event by event: each event is predicted by
        its key's model (the global model's for an event without a key, or a key not seen yet);
        then the global model learns it under the training regime as `predict_learn` would, and
        the key's counts learn it when the same regime on the key's own prediction says so.
        Refusals as `_predict_learn_plain`'s."""
        sized = self.score_scale != "none"
        personal = self.personal
        predictions, learned, sizes = [], [], [] if sized else None
        ids = [_memory_key(item.get("id")) for item in items]  # a key's rules know a message by its own id
        # (a question of a delayed replay is unlabeled, and its "unlearn" is not yet asked)
        unlearns = [item.get("unlearn") if label is not None else None for item, label in zip(items, labels)]
        try:
            X = self.featurise(items)
        except (TypeError, ValueError):
            X = None  # some event refuses: find it event by event
        tried = X is None
        # the batch path takes events of classes the global model has: the rest of the batch goes
        # to it once every class first seen in the batch has been learned event by event
        new_classes = {}
        for i, label in enumerate(labels):
            if label is not None and label not in self.model.classes_:
                new_classes.setdefault(label, i)
        ready_at = max(new_classes.values()) + 1 if new_classes else 0
        for i, (item, label) in enumerate(zip(items, labels)):
            if not tried and i >= ready_at and self.model.classes_:  # the rest at batch speed
                tried = True
                done = self._keyed_batch(X, items, labels, ids, unlearns, i)
                if done is not None:
                    predictions.extend(p for p, _ in done)
                    learned.extend(flag for _, flag in done)
                    if sized:
                        sizes.extend(event_sizes(X[i:]))
                    return predictions, learned, sizes
            try:
                # this event's row alone (the batch path may take the rest); a dict per view for views
                one = self.featurise([item]) if X is None else X[i:i + 1]
                x = one.to_dicts()[0] if isinstance(one, (SparseBatch, ViewBatch)) else one[0]
                probabilities, was_learned = personal.predict_learn_one(x, label, item.get("key"), self.training,
                                                                        event_id=ids[i], unlearn=unlearns[i])
            except (TypeError, ValueError) as error:
                self._refuse_one(item, error, predictions, learned, sizes)
                continue
            predictions.append(probabilities)
            learned.append(was_learned)
            if sized:
                sizes.append(1 if isinstance(x, list) else len(x))  # (event_sizes: a ViewBatch's events count 1)
        return predictions, learned, sizes

    def _keyed_batch(self, X, items: list[dict], labels: list, ids: list, unlearns: list, start: int) -> list | None:
        """PersonalMultinomialNB.predict_learn_batch of events start.. (None: it did not take them,
        and nothing was learned)."""
        personal = self.personal
        keys = [item.get("key") for item in items[start:]]
        tables = [personal.table if key is not None else None for key in keys]
        part = X[start:] if start else X
        try:  # (observe None: each labeled event observed in the replay's one table)
            return personal.predict_learn_batch(part, None if isinstance(part, (SparseBatch, ViewBatch)) else list(part),
                                                list(labels[start:]), keys, tables, self.training, None,
                                                ids[start:], unlearns[start:])
        except (TypeError, ValueError):  # refused before anything was learned: event by event
            return None

    def _predict_learn_plain(self, items: list[dict], labels: list) -> tuple[list, list, list | None]:
        """`predict_learn` of the batch, refusing what a worker would dead-letter: a label that
        would be a class beyond max_classes ("too_many_classes"), and, when the featuriser or the
        model refuses the batch (which it does before anything is learned), each event it
        refuses, found event by event ("rejected_by_model"). A refused event gets None and is
        counted; the others get exactly what the batch would have given them without it.
        Third: each event's number of distinct features (training.event_sizes of the batch the
        model read; None for a refused event) under score_scale "sqrt_features", else None."""
        sized = self.score_scale != "none"
        beyond = self._beyond_max_classes(labels)
        if beyond:
            kept = [i for i in range(len(items)) if i not in beyond]
            some, learned, sizes = (self._predict_learn_plain([items[i] for i in kept], [labels[i] for i in kept])
                                    if kept else ([], [], [] if sized else None))
            predictions, was_learned = [None] * len(items), [False] * len(items)
            all_sizes = [None] * len(items) if sized else None
            for j, (i, prediction, flag) in enumerate(zip(kept, some, learned)):
                predictions[i], was_learned[i] = prediction, flag
                if sized:
                    all_sizes[i] = sizes[j]
            return predictions, was_learned, all_sizes
        if self.personal is not None:
            return self._predict_learn_keyed(items, labels)
        try:
            X = self.featurise(items)
            predictions, learned = predict_learn(self.model, X, labels, **self.training)
            return predictions, learned, event_sizes(X) if sized else None
        except (TypeError, ValueError):
            pass
        predictions, learned, sizes = [], [], [] if sized else None
        for item, label in zip(items, labels):
            try:
                X = self.featurise([item])
                one, was_learned = predict_learn(self.model, X, [label], **self.training)
            except (TypeError, ValueError) as error:
                self._refuse_one(item, error, predictions, learned, sizes)
                continue
            predictions.extend(one)
            learned.extend(was_learned)
            if sized:
                sizes.extend(event_sizes(X))
        return predictions, learned, sizes

    def _refuse_one(self, item: dict, error: Exception, predictions: list, learned: list, sizes: list | None) -> None:
        """Count an event the featuriser or the model refused, and give it no prediction."""
        self.refused[error.reason if isinstance(error, UnreadableMail) else "rejected_by_model"] += 1
        if self.first_refusal is None:
            self.first_refusal = f"event {item.get('id')!r}: {error}"
        predictions.append(None)
        learned.append(False)
        if sizes is not None:
            sizes.append(None)

    def score(self, probabilities: dict, n_features: int | None):
        """The score of the positive class on this contender's score_scale (None without one)."""
        score = positive_score(probabilities, self.positive)
        if score is None or self.score_scale == "none":
            return score
        return log_odds_per_sqrt_feature(score, n_features)


def _class_pieces(model, labels: list, start: int, stop: int) -> list[tuple[int, int]]:
    """[start, stop) cut around each event whose label is a class the model has not learned yet
    (nor an event before it): such an event is learned on its own (training.predict_learn), and
    the events after it are featurised once it is, with the names it brought in the vocabulary,
    rather than before (their look-ups then brought up to date, a pass over all their names).
    Where a batch is cut changes no result (`replay_contenders`)."""
    known = set(getattr(model, "_class_index", ()))
    pieces, lo = [], start
    for i in range(start, stop):
        label = labels[i]
        if label is not None and label not in known:
            known.add(label)
            if i > lo:
                pieces.append((lo, i))
            pieces.append((i, i + 1))
            lo = i + 1
    if lo < stop:
        pieces.append((lo, stop))
    return pieces


def _view_inputs(probabilities) -> dict | None:
    """{class: each expert's input for it} of a combined prediction (None when it kept none)."""
    inputs = getattr(probabilities, "inputs", None)
    if inputs is None:
        return None
    return {label: [row[c] for row in inputs] for c, label in enumerate(probabilities.classes)}


def _memory_key(event_id) -> str | None:
    """The id the memory of learned ids knows an event by: ids are strings on topics and in files
    (replay's readers make them so); an event of the Python API may carry 7 for "7". No id (or
    an empty one): never remembered."""
    if event_id is None or event_id == "":
        return None
    return event_id if type(event_id) is str else str(event_id)


class _Featurised:
    """A batch's features, made when a slice is asked for (the rules take back one event's)."""

    def __init__(self, contender: Contender, items: list[dict]) -> None:
        self.contender, self.items = contender, items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, events: slice):
        return self.contender.featurise(self.items[events])


@dataclass
class PrequentialResult:
    contenders: list[Contender]
    events: int = 0
    seconds: float = 0.0
    last_predictions: list = field(default_factory=list)  # (event, probabilities), first contender
    stopped_early: bool = False  # `should_stop` ended the replay before the stream did

    @property
    def metrics(self) -> PrequentialMetrics:
        return self.contenders[0].metrics

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def _batches(events: Iterable[dict], size: int) -> Iterator[list[dict]]:
    iterator = iter(events)
    while batch := list(islice(iterator, size)):
        yield batch


def _delayed_steps(batch: list[dict], first_index: int, delay: int, pending: deque, final: bool):
    """The batch as River's simulate_qa orders it: before question i, reveal every answer j with
    j + delay <= i (oldest first); at the end of the stream, reveal the rest. Yields (event,
    is_question) pairs; labeled events wait in `pending` across batches. A correction (an
    event with "unlearn") is an answer only: its message was asked when it first came."""
    for offset, event in enumerate(batch):
        i = first_index + offset
        while pending and pending[0][0] + delay <= i:
            yield pending.popleft()[1], False
        if event.get("label") is not None or event.get("unlearn") is not None:
            pending.append((i, event))
        if event.get("unlearn") is None:
            yield event, True
    if final:
        while pending:
            yield pending.popleft()[1], False


_frozen_lock = threading.Lock()
_frozen_replays = 0  # replays running in this process since the objects older than the first were frozen
_froze = False  # whether those replays froze them (not when something else had frozen objects already)


@contextmanager
def _older_objects_frozen():
    """The cyclic collector leaves the objects alive before the replay alone while it runs
    (gc.freeze; gc.unfreeze when the last replay running in this process ends): the models'
    vocabularies hold a list of every name they learned (hundreds of thousands of references
    after a few thousand mails), which each full collection would walk again, and which never
    hold a cycle. What the replay makes is collected as before; an old object it frees goes by
    its reference count as always, and only a cycle among them waits until the end. Measured on
    mail.toml's replay of the SpamAssassin mail (4 pairs, fresh processes): the full collections'
    37 ms a replay were gone, the replay 4% faster. Objects frozen already by another part of the
    program are left as they are, and nothing is frozen then."""
    global _frozen_replays, _froze
    with _frozen_lock:
        if _frozen_replays == 0:
            _froze = gc.get_freeze_count() == 0  # (objects another part of the program froze stay its own)
            if _froze:
                gc.freeze()
        _frozen_replays += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_replays -= 1
            if _frozen_replays == 0 and _froze:
                gc.unfreeze()


def replay_contenders(events: Iterable[dict], contenders: list[Contender], *, batch_size: int = 1000,
                      delay: int = 0, on_batch: Callable[[PrequentialResult], None] | None = None,
                      should_stop: Callable[[], bool] | None = None) -> PrequentialResult:
    """Predict each event with the state so far, then learn it once its label is revealed.

    With delay = 0 a label is learned right after its own prediction; with delay = d it is
    learned just before the prediction of the event d places later (River's
    progressive_val_score(delay=d)). Batches go through `predict_learn_many`, which equals the
    per-event loop exactly, so the batch size changes speed, never results. A labeled event is
    scored with its prediction unless no class existed yet (River skips those too).
    `should_stop` is asked after each batch: True ends the replay there (every contender has
    then seen the same events), with `stopped_early` set.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if delay < 0:
        raise ValueError(f"delay must be >= 0, got {delay}")
    with _older_objects_frozen():
        return _replay_contenders(events, contenders, batch_size, delay, on_batch, should_stop)


def _replay_contenders(events: Iterable[dict], contenders: list[Contender], batch_size: int, delay: int,
                       on_batch: Callable[[PrequentialResult], None] | None,
                       should_stop: Callable[[], bool] | None) -> PrequentialResult:
    result = PrequentialResult(contenders)
    started = time.perf_counter()
    pending: deque = deque()
    batches = _batches(events, batch_size)
    batch = next(batches, None)
    while batch is not None:
        following = next(batches, None)
        if delay == 0:
            steps = [(event, True) for event in batch]
            items, labels = batch, [event.get("label") for event in batch]
            unlearns = [event.get("unlearn") for event in batch]
        else:
            steps = list(_delayed_steps(batch, result.events, delay, pending, final=following is None))
            items = [event for event, _ in steps]
            labels = [None if question else event.get("label") for event, question in steps]
            unlearns = [None if question else event.get("unlearn") for event, question in steps]
        for contender in contenders:
            contender_started = time.perf_counter()
            predictions, learned, sizes = contender.predict_learn_sized(items, labels, unlearns)
            contender.learned += sum(learned)
            scored = []
            for i, ((event, question), probabilities) in enumerate(zip(steps, predictions)):
                if not question or probabilities is None:  # an answer, or refused
                    continue
                scored.append((event, probabilities))
                label = event.get("label")
                n_features = None if sizes is None else sizes[i]
                if label is None:
                    if contender.on_unlabeled is not None:
                        contender.on_unlabeled(event, probabilities, n_features)
                    continue
                if not probabilities:
                    contender.unscored += 1
                    continue
                predicted = max(probabilities, key=probabilities.get)
                contender.metrics.update(label, predicted, probabilities)
                if contender.recorder is not None:
                    contender.recorder.update(label, predicted, probabilities, n_features)
                    if contender.more_views:
                        contender.view_inputs.append(_view_inputs(probabilities))
                    contender.scored_ids.append(event.get("id"))
                    contender.scored_keys.append(event.get("key"))
                if contender.band is not None or contender.score_band is not None:
                    score = contender.score(probabilities, n_features) if contender.score_band else None
                    contender.verdicts.append((band_verdict(probabilities, score, contender.positive, contender.band,
                                                            contender.score_band), label))
            if contender is contenders[0]:
                result.last_predictions = scored
            contender.seconds += time.perf_counter() - contender_started
        result.events += len(batch)
        result.seconds = time.perf_counter() - started
        if on_batch is not None:
            on_batch(result)
        if following is not None and should_stop is not None and should_stop():
            result.stopped_early = True
            break
        batch = following
    return result


def replay_events(events: Iterable[dict], model, featurizer, *, batch_size: int = 1000, delay: int = 0,
                  on_batch: Callable[[PrequentialResult], None] | None = None) -> PrequentialResult:
    """`replay_contenders` for one model and a text featuriser."""
    return replay_contenders(events, [Contender("model", model, featurizer)], batch_size=batch_size,
                             delay=delay, on_batch=on_batch)
