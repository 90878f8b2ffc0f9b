"""PersonalMultinomialNB.predict_learn_batch in C: a part of a batch (the events between two
maintenance points) run by `_kernel.keyed_events`, with the per-event definition
(`PersonalMultinomialNB._keyed_step`) taking the events the kernel leaves to it.

Names become integers once a batch (`BatchNames`): the batch's distinct names are numbered
(`uid`) by their vocabulary column or, for a name the global model has not learned, by the
featuriser's numbering of new names, with no dict per event; each name's hash() and length
come in the same pass. Each key of a part is a slot: its counts' matrix (rows reserved for
every name of its events it may add), its row of each of its names in the part (found by hash,
`rows_by_hash`), N_c,k and T_c,k as arrays. The kernel changes them in place; `KeyedPart._flush`
hands what changed back to each KeyCounts (`_Slots.give_back`: its new names in row order, its
touched names; then its remembered ids) and to the table (changed, then each labeled event's
clock tick), in the events' order.

The kernel leaves to the definition, after a flush: an event whose id the key's memory may
hold or that carries "unlearn" (the rules of corrections), and a labeled event of a key with no
counts yet (its decision is on the global model's prediction; a key may be created). A key past
its feature budget stops the kernel after that event: it is cut, then the part goes on.
Without the C extension, with idle eviction (a key may go in the middle of a part), or for a
batch of dicts, the definition runs every event.
"""

from __future__ import annotations

import numpy as np

from stream_nb.model.base import ColumnNames, SparseBatch
from stream_nb.model.counting import _MODE_NUMBERS, native_kernel
from stream_nb.model.personal import FEATURE_KEEP_SHARE, MAX_KEY_NAME_CHARS, _PartState, _pick

NEEDS_PYTHON, OVER_BUDGET = 1, 2  # _kernel.keyed_events' statuses


def native_keyed(personal, X) -> object | None:
    """The kernel module when it can run this batch: a SparseBatch, no idle eviction; else None."""
    kernel = native_kernel()
    if kernel is None or not isinstance(X, SparseBatch) or personal.idle_after is not None:
        return None
    if not all(hasattr(kernel, name) for name in ("keyed_events", "rows_of_hashes", "number_pairs", "name_facts")):
        return None  # an extension built before these (pip install -e . builds it again)
    return kernel


class BatchNames:
    """A SparseBatch's names numbered: event i's non-zero features are names[uid[o]] with value
    value[o], o in starts[i]:starts[i + 1]; `columns` their vocabulary columns at the batch's
    start (-1: not learned then)."""

    def __init__(self, kernel, X: SparseBatch, vocabulary) -> None:
        n_occurrences = int(X.lengths.sum())
        columns = X.columns_in(vocabulary)
        numbered = X.unknown_in(vocabulary) if hasattr(vocabulary, "by_column") else None
        size = numbered_at = len(vocabulary)
        if numbered is None and isinstance(X.names, ColumnNames) and hasattr(vocabulary, "by_column") \
                and X.names._by_column is vocabulary.by_column():
            # the featuriser's own numbering, of the vocabulary as it was (a name it lacked then may
            # be in it now, if it has grown since: columns_now looks those up again)
            columns, numbered = X.names._columns, (X.names._ranks, X.names._unknown)
            size, numbered_at = len(vocabulary.by_column()), X.names.numbered_at
        if numbered is not None:
            ranks, unknown = numbered
            codes = np.where(columns >= 0, columns, size + ranks)
            present = np.zeros(size + len(unknown), dtype=bool)
            present[codes] = True
            distinct = np.flatnonzero(present)
            number = np.cumsum(present) - 1
            uid = number[codes]
            self.columns = np.where(distinct < size, distinct, -1)
            names, hashes, addable = kernel.name_facts(vocabulary.by_column(), self.columns, unknown,
                                                       np.where(distinct < size, -1, distinct - size),
                                                       MAX_KEY_NAME_CHARS)
        else:  # names without the featuriser's numbering: a dict
            index: dict = {}
            uid = np.fromiter((index.setdefault(name, len(index)) for name in X.names), dtype=np.int64,
                              count=n_occurrences)
            self.columns = vocabulary.lookup(list(index))
            names, hashes, addable = kernel.name_facts(list(index), np.arange(len(index), dtype=np.int64), [],
                                                       np.full(len(index), -1, dtype=np.int64), MAX_KEY_NAME_CHARS)
        self.names = names
        self.hashes = np.frombuffer(hashes, dtype=np.int64)
        self.addable = np.frombuffer(addable, dtype=np.uint8)
        lengths = X.lengths.astype(np.int64)
        value = np.ones(n_occurrences) if X.values is None else np.asarray(X.values, dtype=np.float64)
        if not X.distinct and n_occurrences:  # a name's values in an event add up, at its first place
            event = np.repeat(np.arange(len(lengths)), lengths)
            pairs, first, inverse = np.unique(event * len(self.names) + uid, return_index=True, return_inverse=True)
            sums = np.bincount(inverse, weights=value)  # added in the events' order, from 0, as to_dicts adds
            order = np.argsort(first)
            uid, value = pairs[order] % len(self.names), sums[order]
            lengths = np.bincount(event[first[order]], minlength=len(lengths))
        nonzero = value != 0
        if not nonzero.all():  # a zero is no occurrence (the checked event drops it)
            lengths = np.bincount(np.repeat(np.arange(len(lengths)), lengths)[nonzero], minlength=len(lengths))
            uid, value = uid[nonzero], value[nonzero]
        self.starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        self.uid, self.value = np.ascontiguousarray(uid, dtype=np.int64), np.ascontiguousarray(value)
        self.vocabulary, self.vocabulary_size = vocabulary, numbered_at

    def columns_now(self, vocabulary) -> np.ndarray:
        """The names' columns in the vocabulary as it is now (it has only grown, or is new)."""
        if vocabulary is self.vocabulary and len(vocabulary) == self.vocabulary_size:
            return self.columns
        if vocabulary is self.vocabulary:
            columns = self.columns.copy()
            absent = np.flatnonzero(columns < 0)
            columns[absent] = vocabulary.lookup([self.names[u] for u in absent.tolist()])
            return columns
        return vocabulary.lookup(self.names)

    def part(self, g, start: int, stop: int) -> _PartState:
        lo, hi = int(self.starts[start]), int(self.starts[stop])
        return _PartState(g, self.names, self.starts[start:stop + 1] - lo, self.uid[lo:hi], self.value[lo:hi],
                          self.columns_now(g._vocabulary))


def rows_by_hash(kernel, own, names: list, uids: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """own.rows_of([names[u] for u in uids]), `hashes` being those names' hash(): a name whose
    hash none of the key's names has is not the key's (most of a message's names, for a key
    with a budget), found in C (_kernel.rows_of_hashes) with no string compared; a row whose
    name hashes alike is the name's when the names are equal; the rest (a hash of two rows, or
    equal hashes of different names) by the key's dict."""
    found = np.full(len(uids), -1, dtype=np.int64)
    if not len(own.index) or not len(uids):
        return found
    kernel.rows_of_hashes(own.row_hashes(), hashes, found, own.row_names(), names, uids)
    unsure = np.flatnonzero(found == -2)
    if len(unsure):
        found[unsure] = [own.index.get(names[u], -1) for u in uids[unsure].tolist()]
    return found


class _Slots:
    """The keys of a part as the kernel reads them (the module docstring). A slot's names in the
    part are its pairs (number_pairs): pair_uid[offsets[s]:offsets[s + 1]], with the key's row
    of each in row_of and a mark in touched at the same places."""

    def __init__(self, personal, kernel, state: _PartState, names: BatchNames, pairs: list, offsets: np.ndarray,
                 pair_uid: np.ndarray) -> None:
        self.personal, self.kernel, self.state = personal, kernel, state
        self.addable, self.hashes = names.addable, names.hashes
        self.pairs, self.offsets, self.pair_uid = pairs, offsets, pair_uid  # (table, key) of each slot
        n, C = len(pairs), len(personal.classes_)
        self.owns: list = [None] * n
        self.matrices: list = [np.zeros((0, C))] * n
        self.capacity = np.zeros(n, dtype=np.int64)
        self.exists = np.zeros(n, dtype=np.uint8)
        self.counts = np.zeros((n, C))
        self.totals = np.zeros((n, C))
        self.rows = np.zeros(n, dtype=np.int64)
        self.row_of = np.full(len(pair_uid), -1, dtype=np.int64)
        self.touched = np.zeros(len(pair_uid), dtype=np.uint8)

    def _span(self, s: int) -> slice:
        return slice(int(self.offsets[s]), int(self.offsets[s + 1]))

    def load(self, s: int) -> None:
        """Slot s from its key's counts as the table has them now."""
        table, key = self.pairs[s]
        span = self._span(s)
        own = self.personal._own(table, key)
        self.owns[s] = own
        self.row_of[span] = -1
        self.touched[span] = 0
        if own is None:
            self.exists[s], self.rows[s], self.capacity[s] = 0, 0, 0
            self.matrices[s] = np.zeros((0, self.counts.shape[1]))
            self.counts[s] = self.totals[s] = 0.0
            return
        own.widen(self.counts.shape[1])
        uids = self.pair_uid[span]
        self.row_of[span] = rows_by_hash(self.kernel, own, self.state.names, uids, self.hashes[uids])
        self._reserve(s, own)

    def renumber(self, s: int, kept: np.ndarray) -> None:
        """Slot s after its key was cut to its budget: `kept`, the old rows that stayed, in order,
        are its rows now (no name looked up again)."""
        span = self._span(s)
        new_row = np.full(int(self.rows[s]) + 1, -1, dtype=np.int64)  # the last: -1 stays -1
        new_row[kept] = np.arange(len(kept))
        self.row_of[span] = new_row[self.row_of[span]]
        self._reserve(s, self.owns[s])

    def _reserve(self, s: int, own) -> None:
        """Room in the key's matrix for every name of the slot it may add; the slot's arrays
        from its KeyCounts."""
        span = self._span(s)
        fresh = int(np.count_nonzero((self.row_of[span] < 0) & (self.addable[self.pair_uid[span]] != 0)))
        own._reserve(len(own.index) + fresh)
        self.matrices[s] = own._matrix
        self.exists[s], self.rows[s], self.capacity[s] = 1, len(own.index), len(own._matrix)
        self.counts[s], self.totals[s] = own.class_counts, own.class_totals

    def give_back(self, s: int) -> None:
        """What the kernel changed in slot s into its KeyCounts: new names in row order, N_c,k,
        T_c,k, touched names."""
        own = self.owns[s]
        if own is None:
            return
        names, span = self.state.names, self._span(s)
        rows, uids = self.row_of[span], self.pair_uid[span]
        before = len(own.index)
        if self.rows[s] > before:
            fresh = np.flatnonzero(rows >= before)
            fresh = uids[fresh[np.argsort(rows[fresh])]]
            fresh_names = _pick(names, fresh)
            own.index.update(zip(fresh_names, range(before, int(self.rows[s]))))
            own.added_rows(before, self.hashes[fresh], fresh_names)
        own.class_counts, own.class_totals = self.counts[s].tolist(), self.totals[s].tolist()
        touched = self.touched[span]
        if own.touched is not None:
            own.touched.update(_pick(names, uids[np.flatnonzero(touched)]))
        touched[:] = 0


class KeyedPart:
    """One part of predict_learn_batch through the kernel."""

    def __init__(self, personal, kernel, state: _PartState, names: BatchNames, batch: dict, start: int,
                 stop: int, probas: list, learned: list) -> None:
        self.personal, self.kernel, self.state = personal, kernel, state
        self.batch, self.start, self.stop = batch, start, stop
        self.probas, self.learned = probas, learned
        g = personal.global_model
        n, C = stop - start, len(personal.classes_)
        labels, keys, tables = batch["labels"], batch["keys"], batch["tables"]
        ids, unlearns = batch["ids"], batch["unlearns"]
        class_index = g._class_index
        slot_of: dict = {}
        pairs: list = []
        slot = np.full(n, -1, dtype=np.int64)
        key_label = np.full(n, -1, dtype=np.int64)
        global_label = np.full(n, -1, dtype=np.int64)
        for j in range(n):
            i = start + j
            label = labels[i]
            if label is not None and learned[j]:
                global_label[j] = class_index[label]
            table = tables[i]
            if table is None:
                continue
            pair = (id(table), keys[i])
            s = slot_of.get(pair)
            if s is None:
                s = slot_of[pair] = len(pairs)
                pairs.append((table, keys[i]))
            slot[j] = s
            if label is not None:
                key_label[j] = class_index[label]
        self.slot, self.key_label, self.global_label = slot, key_label, global_label
        sizes = np.diff(state.starts)
        training = personal.training
        margin = float(training.get("margin", 0.0))
        self.margin = (margin * np.sqrt(np.maximum(sizes, 1).astype(np.float64))
                       if training.get("margin_scale") == "sqrt_features" else np.full(n, margin))
        self.mode = _MODE_NUMBERS[training.get("mode", "all")]
        # each slot's names in the part, numbered slot after slot
        pair, offsets, pair_uid = (np.frombuffer(a, dtype=np.int64) for a in kernel.number_pairs(
            np.repeat(slot, np.diff(state.starts)), state.uid, len(pairs)))
        self.pair = pair
        self.slots = slots = _Slots(personal, kernel, state, names, pairs, offsets, pair_uid)
        learning = set(np.unique(slot[key_label >= 0]).tolist())
        for s, (table, key) in enumerate(pairs):
            slots.load(s)
            own = slots.owns[s]
            if own is not None and s in learning:
                table.changed(key, own)  # held by the table until its flush: this very object is changed below
        # events the rules of corrections may act on: the definition takes them
        self.rules = set()
        seen: set = set()
        for j in np.flatnonzero(slot >= 0).tolist():
            i = start + j
            event_id = None if ids is None else ids[i]
            if event_id is None:
                continue
            unlearn = None if unlearns is None else unlearns[i]
            own = slots.owns[slot[j]]
            lesson = (int(slot[j]), event_id)
            if unlearn is not None or lesson in seen or (own is not None and event_id in own.learned):
                self.rules.add(j)
            seen.add(lesson)
        self.scores = np.zeros((n, C))
        self.log_prior = np.zeros((n, C))
        self.active = np.zeros((n, C), dtype=np.uint8)
        self.scored = np.zeros(n, dtype=np.uint8)
        self.key_learned = np.zeros(n, dtype=np.uint8)
        self.results: list = [None] * n
        self.done = 0  # events whose results and clock ticks are handed back

    def run(self) -> list:
        n = self.stop - self.start
        j = 0
        rules = sorted(self.rules)
        r = 0
        while j < n:
            while r < len(rules) and rules[r] < j:
                r += 1
            if r < len(rules) and rules[r] == j:
                self._by_definition(j)
                j += 1
                continue
            bound = rules[r] if r < len(rules) else n
            reached, status = self._kernel(j, bound)
            if status == NEEDS_PYTHON:
                self._by_definition(reached)
                j = reached + 1
            elif status == OVER_BUDGET:
                self._flush(reached)
                s = int(self.slot[reached - 1])
                own = self.slots.owns[s]
                budget = self.personal.max_key_features
                kept = own.keep_features(max(1, int(budget * FEATURE_KEEP_SHARE)))
                table, key = self.slots.pairs[s]
                table.changed(key, own)
                self.slots.renumber(s, kept)
                j = reached
            else:
                j = reached
        self._flush(n)
        return self.results

    def _kernel(self, j: int, bound: int) -> tuple[int, int]:
        personal, state, slots = self.personal, self.state, self.slots
        g = personal.global_model
        settings = (float(g.alpha), float(g.prior_alpha), g.unknown == "smooth", personal.beta, personal.prior_beta,
                    0 if personal.shrinkage == "key" else 1, self.mode, personal.max_key_features or 0)
        reached, status, seen = self.kernel.keyed_events(
            j, bound, state.features_seen, state.starts, state.uid, self.pair, state.value, self.slot, self.key_label,
            self.global_label, self.margin, slots.addable, state.counts, state.class_counts, state.class_totals,
            tuple(slots.matrices), slots.capacity, slots.exists, slots.counts, slots.totals, slots.rows,
            slots.row_of, slots.touched, settings, self.scores, self.active, self.log_prior, self.scored,
            self.key_learned)
        state.features_seen = seen
        return reached, status

    def _by_definition(self, j: int) -> None:
        """Event j by PersonalMultinomialNB._keyed_step, after a flush; its key's slot then
        reloaded (the definition may have created, corrected or cut it)."""
        self._flush(j)
        i = self.start + j
        batch = self.batch
        ids, unlearns = batch["ids"], batch["unlearns"]
        label = batch["labels"][i]
        self.results[j] = self.personal._keyed_step(
            self.state, j, self.state.event(j), label, batch["keys"][i], batch["tables"][i], self.probas[j],
            self.learned[j], None if ids is None else ids[i], None if unlearns is None else unlearns[i])
        if label is not None:
            batch["observe"](i)
        self.done = j + 1
        if self.slot[j] >= 0:
            self.slots.load(int(self.slot[j]))

    def _flush(self, upto: int) -> None:
        """Hand back the kernel's events done..upto-1: each slot's counts to its KeyCounts, then
        in the events' order their predictions, the ids their keys learned, their clock ticks."""
        lo = self.done
        if upto <= lo:
            return
        slots = self.slots
        for s in range(len(slots.pairs)):
            slots.give_back(s)
        batch = self.batch
        labels, ids, observe = batch["labels"], batch["ids"], batch["observe"]
        results, probas, learned = self.results, self.probas, self.learned
        results[lo:upto] = zip(probas[lo:upto], learned[lo:upto])
        picked = np.flatnonzero(self.scored[lo:upto]) + lo
        if len(picked):  # the keys' posteriors, made as the global model makes its own (_probabilities)
            posteriors = self.personal.global_model._probabilities(
                self.scores[picked], self.active[picked].astype(bool), self.log_prior[picked])
            for j, posterior in zip(picked.tolist(), posteriors):
                results[j] = (posterior, learned[j])
        remember = self.personal.remember_ids
        if ids is not None:
            for j in (np.flatnonzero(self.key_learned[lo:upto]) + lo).tolist():
                if ids[self.start + j] is not None:
                    slots.owns[self.slot[j]].remember(ids[self.start + j], int(self.key_label[j]), 1.0, remember)
        if observe is not None:
            for i in range(self.start + lo, self.start + upto):
                if labels[i] is not None:
                    observe(i)
        self.done = upto
