"""The memory of learned ids and the rules for duplicates and corrections (stream_nb.lessons).

The rules are checked row by row against the table written out here by hand, and as a whole:
a generated stream of events with duplicates, relabels and corrections, planned by the rules
and run on a tiny count model written in this file, must end in the state of the same model fed
each message once under its last label (mode all, no forgetting), a reference that never
looks at the rules. Two plausible bugs in the rules are shown to break that equality.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict

import pytest

from stream_nb.lessons import (
    CORRECTED,
    CORRECTION_MISMATCH,
    CORRECTION_OF_UNKNOWN,
    DEFAULT_REMEMBER_IDS,
    DUPLICATE,
    LEARNED,
    OUTCOMES,
    RELEARNED,
    Learned,
    LearnedIds,
    LearnedIdsStateError,
    Plan,
    plan,
    settle,
)

# ------------------------------------------------------------------------------------------
# The rules, row by row

HAM = Learned("ham", 3, 1.0)
SPAM = Learned("spam", 5, 2.0)
ONE = Learned(1, 0, 1.0)


@pytest.mark.parametrize("label, unlearn, learned, expected", [
    # a plain labeled event
    ("spam", None, None, Plan(LEARNED, None, "spam")),
    ("spam", None, SPAM, Plan(DUPLICATE, None, None)),
    ("spam", None, HAM, Plan(RELEARNED, HAM, "spam")),
    ("1", None, ONE, Plan(RELEARNED, ONE, "1")),  # 1 and "1" are two classes
    (1, None, ONE, Plan(DUPLICATE, None, None)),
    # a correction, the memory agreeing with unlearn
    ("spam", "ham", HAM, Plan(CORRECTED, HAM, "spam")),
    (None, "ham", HAM, Plan(CORRECTED, HAM, None)),  # a take-back only
    # a correction the memory says was already applied
    ("spam", "ham", SPAM, Plan(DUPLICATE, None, None)),
    # a correction naming a class the id was not learned as: what was learned is taken back
    ("spam", "eggs", HAM, Plan(CORRECTION_MISMATCH, HAM, "spam")),
    (None, "spam", HAM, Plan(CORRECTION_MISMATCH, HAM, None)),
    ("spam", 1, Learned("1", 0, 1.0), Plan(CORRECTION_MISMATCH, Learned("1", 0, 1.0), "spam")),
    # a correction of an id not remembered: nothing to take back
    ("spam", "ham", None, Plan(CORRECTION_OF_UNKNOWN, None, "spam")),
    (None, "ham", None, Plan(CORRECTION_OF_UNKNOWN, None, None)),
])
def test_each_rule(label, unlearn, learned, expected):
    made = plan("m-1", label, unlearn, learned)
    assert made == expected and made.outcome in OUTCOMES
    assert type(made.learn) is type(expected.learn)


@pytest.mark.parametrize("label, unlearn, learned, error", [
    (None, None, None, "neither label nor unlearn"),
    ("ham", "ham", HAM, "unlearn_is_label"),
    (3, 3, None, "unlearn_is_label"),
    ("", None, None, "label must be"),
    ("ham", True, None, "unlearn must be"),
    ("ham", 1.5, None, "unlearn must be"),
])
def test_what_the_decoder_refuses_the_rules_refuse(label, unlearn, learned, error):
    with pytest.raises(ValueError, match=error):
        plan("m-1", label, unlearn, learned)


def test_a_plan_needs_an_id_and_a_record():
    with pytest.raises(ValueError, match="id"):
        plan("", "ham", None, None)
    with pytest.raises(TypeError):
        plan("m", "ham", None, ("ham", 0, 1.0))


# ------------------------------------------------------------------------------------------
# settle: the memory after a plan ran


def test_settle_remembers_what_was_learned_and_forgets_what_was_only_taken_back():
    memory = LearnedIds(10)
    memory.record_learned("a", "ham", 0)
    memory.record_learned("b", "ham", 1)
    # a correction of a learned: learned as spam -> remembered as spam, moved to the end
    corrected = plan("a", "spam", "ham", memory.get("a"))
    settle(memory, "a", corrected, learned=True, epoch=2, weight=3.0)
    assert list(memory.items()) == [("b", Learned("ham", 1, 1.0)), ("a", Learned("spam", 2, 3.0))]
    # thick threshold skipped the corrected message: b was taken back and nothing learned
    skipped = plan("b", "spam", "ham", memory.get("b"))
    settle(memory, "b", skipped, learned=False, epoch=2)
    assert "b" not in memory and len(memory) == 1
    # ... so a later correction of b has nothing to take back
    assert plan("b", "ham", "spam", memory.get("b")).outcome == CORRECTION_OF_UNKNOWN
    # a duplicate keeps its place and its epoch: it was not learned again
    memory.record_learned("c", "ham", 4)
    settle(memory, "a", plan("a", "spam", None, memory.get("a")), learned=False, epoch=9)
    assert list(memory) == ["a", "c"] and memory.get("a").learned_at == 2
    # a plan that learns nothing cannot have been learned
    with pytest.raises(ValueError, match="learns nothing"):
        settle(memory, "a", Plan(DUPLICATE, None, None), learned=True, epoch=9)
    assert list(memory) == ["a", "c"]


# ------------------------------------------------------------------------------------------
# The memory: order, eviction, capacity


def test_the_entry_learned_longest_ago_is_evicted_first_and_a_relearn_moves_to_the_end():
    memory = LearnedIds(3)
    assert memory.record_learned("a", "ham", 0) == []
    memory.record_learned("b", "spam", 0)
    memory.record_learned("c", "ham", 1)
    memory.record_learned("a", "spam", 1)  # relearned: a is now the newest
    assert memory.record_learned("d", "ham", 2) == ["b"]
    assert list(memory) == ["c", "a", "d"]
    assert memory.record_learned("e", 7, 2) == ["c"]
    assert list(memory) == ["a", "d", "e"] and len(memory) == 3 == memory.capacity
    assert memory.get("e") == Learned(7, 2, 1.0) and memory.get("b") is None


def test_capacity_zero_remembers_nothing_and_every_correction_is_of_an_unknown_id():
    memory = LearnedIds(0)
    assert memory.record_learned("a", "ham", 0) == []
    assert len(memory) == 0 and memory.get("a") is None
    assert plan("a", "spam", "ham", memory.get("a")) == Plan(CORRECTION_OF_UNKNOWN, None, "spam")
    assert plan("a", "ham", None, memory.get("a")) == Plan(LEARNED, None, "ham")


def test_a_smaller_capacity_evicts_the_oldest():
    memory = LearnedIds(5)
    for i in range(5):
        memory.record_learned(f"m{i}", "ham", i)
    assert memory.set_capacity(2) == ["m0", "m1", "m2"]
    assert list(memory) == ["m3", "m4"] and memory.capacity == 2
    with pytest.raises(ValueError, match="capacity"):
        memory.set_capacity(-1)
    assert memory.capacity == 2


@pytest.mark.parametrize("args, error", [
    (("", "ham", 0), "id"),
    ((5, "ham", 0), "id"),
    (("\ud800", "ham", 0), "surrogate"),
    (("a", "", 0), "class"),
    (("a", True, 0), "class"),
    (("a", 1.0, 0), "class"),
    (("a", "ham", -1), "epoch"),
    (("a", "ham", 1.0), "epoch"),
    (("a", "ham", 2, 0.0), "weight"),
    (("a", "ham", 2, float("nan")), "weight"),
    (("a", "ham", 2, float("inf")), "weight"),
    (("x", "ham", 1), "before the last"),  # the last entry was learned at epoch 2
])
def test_bad_records_are_refused_and_change_nothing(args, error):
    memory = LearnedIds(2)
    memory.record_learned("a", "spam", 0)
    memory.record_learned("b", "ham", 2)
    before = memory.to_state()
    with pytest.raises(ValueError, match=error):
        memory.record_learned(*args)
    assert memory.to_state() == before


@pytest.mark.parametrize("capacity", [-1, 1.5, True, "10", None])
def test_a_bad_capacity_is_refused(capacity):
    with pytest.raises(ValueError, match="capacity"):
        LearnedIds(capacity)


def test_the_default_capacity():
    assert DEFAULT_REMEMBER_IDS == 100_000


# ------------------------------------------------------------------------------------------
# State: plain JSON, checked on load


def filled() -> LearnedIds:
    memory = LearnedIds(4)
    memory.record_learned("m-1", "ham", 0, 1.0)
    memory.record_learned("m-2", 1, 0, 0.5)
    memory.record_learned("m-3", "1", 3, 2.0)
    memory.record_learned("é-4", "spam", 3, 1.0)
    return memory


def test_the_state_round_trips_through_json_with_label_types_kept():
    memory = filled()
    state = memory.to_state()
    assert state == {"capacity": 4, "ids": ["m-1", "m-2", "m-3", "é-4"], "labels": ["ham", 1, "1", "spam"],
                     "learned_at": [0, 0, 3, 3], "weights": [1.0, 0.5, 2.0, 1.0]}
    loaded = LearnedIds.from_state(json.loads(json.dumps(state)))
    assert loaded == memory and loaded.digest() == memory.digest()
    assert type(loaded.get("m-2").label) is int and type(loaded.get("m-3").label) is str
    assert LearnedIds.from_state(LearnedIds(0).to_state()) == LearnedIds(0)


def test_the_digest_and_equality_see_order_capacity_and_label_types():
    memory = filled()
    other = LearnedIds.from_state({**memory.to_state(), "labels": ["ham", "1", "1", "spam"]})  # 1 -> "1"
    assert other != memory and other.digest() != memory.digest()
    bigger = LearnedIds.from_state({**memory.to_state(), "capacity": 5})
    assert bigger != memory and bigger.digest() != memory.digest()
    moved = LearnedIds.from_state(memory.to_state())
    moved.record_learned("m-1", "ham", 3)  # same entries, another order
    assert sorted(moved.to_state()["ids"]) == sorted(memory.to_state()["ids"])
    assert moved != memory and moved.digest() != memory.digest()


def _broken(**changes) -> dict:
    return {**filled().to_state(), **changes}


@pytest.mark.parametrize("state, error", [
    ([], "expected an object"),
    ({k: v for k, v in filled().to_state().items() if k != "weights"}, "expected the keys"),
    ({**filled().to_state(), "extra": 1}, "expected the keys"),
    (_broken(capacity=-1), "capacity must be"),
    (_broken(capacity=3), "4 ids remembered, over the capacity of 3"),
    (_broken(ids=("m-1", "m-2", "m-3", "é-4")), "must be lists"),
    (_broken(weights=[1.0, 1.0, 1.0]), "differ in length"),
    (_broken(ids=["m-1", "m-2", "m-1", "é-4"]), "entry 2: id 'm-1' is remembered twice"),
    (_broken(ids=["m-1", "", "m-3", "é-4"]), "entry 1: an id must be"),
    (_broken(labels=["ham", 1, None, "spam"]), "entry 2: a class must be"),
    (_broken(labels=["ham", 1.0, "1", "spam"]), "entry 1: a class must be"),
    (_broken(learned_at=[0, -1, 3, 3]), "entry 1: an epoch must be"),
    (_broken(learned_at=[0, 4, 3, 3]), "entry 2: epoch 3 is before the previous entry's \\(4\\)"),
    (_broken(weights=[1.0, 0.5, float("nan"), 1.0]), "entry 2: a weight must be"),
    (_broken(weights=[1.0, 0.5, -2.0, 1.0]), "entry 2: a weight must be"),
])
def test_a_state_that_breaks_an_invariant_is_refused(state, error):
    with pytest.raises(LearnedIdsStateError, match=error):
        LearnedIds.from_state(state)


def test_a_state_learned_after_the_models_epoch_is_refused():
    state = filled().to_state()  # the last entries were learned at epoch 3
    assert LearnedIds.from_state(state, max_epoch=3) == filled()
    with pytest.raises(LearnedIdsStateError, match="entry 2: learned at epoch 3, after the model's forgetting epoch"):
        LearnedIds.from_state(state, max_epoch=2)


def test_a_state_with_a_class_the_model_does_not_have_is_refused():
    state = filled().to_state()
    assert LearnedIds.from_state(state, classes=["ham", "spam", 1, "1"]) == filled()
    with pytest.raises(LearnedIdsStateError, match="entry 1: class 1 is not one of"):
        LearnedIds.from_state(state, classes=["ham", "spam", "1"])  # the int 1 is not the str "1"


# ------------------------------------------------------------------------------------------
# A generated stream: the rules end where the corrected labels lead


class CountModel:
    """A count model small enough to trust: count of each class and of each (class, token)."""

    def __init__(self) -> None:
        self.counts: defaultdict = defaultdict(float)

    def learn(self, tokens, label, weight) -> None:
        self.counts[("#class", type(label).__name__, label)] += weight
        for token in tokens:
            self.counts[(token, type(label).__name__, label)] += weight

    def unlearn(self, tokens, label, weight) -> None:
        self.learn(tokens, label, -weight)

    def state(self) -> dict:
        return {key: value for key, value in self.counts.items() if value != 0.0}


CLASSES = ["ham", "spam", 2]


def generated_stream(seed: int, n_messages: int = 60, n_events: int = 800):
    """(events, last word): events (id, label, unlearn), and each id's label by its producer's
    last word (None: taken back). Corrections name the class the producer last gave, or with a
    quarter of them, a wrong one; every message keeps its tokens and its weight."""
    rng = random.Random(seed)
    messages = {f"m{i}": ([f"w{rng.randrange(25)}" for _ in range(rng.randint(1, 6))], float(1 + i % 3))
                for i in range(n_messages)}
    last_word: dict = {}
    events = []
    for _ in range(n_events):
        event_id = rng.choice(list(messages))
        current = last_word.get(event_id)
        action = rng.random()
        if current is None and event_id not in last_word:
            label, unlearn = rng.choice(CLASSES), None  # its first labeled event
        elif action < 0.25:
            label, unlearn = current, None  # a duplicate (a take-back's id sent again: learned anew)
            if label is None:
                label = rng.choice(CLASSES)
        elif action < 0.45:
            label, unlearn = rng.choice([c for c in CLASSES if c != current]), None  # a relabel
        else:  # a correction: of the class last given, or of a wrong one; sometimes a take-back only
            unlearn = current if current is not None and rng.random() < 0.75 else rng.choice(CLASSES)
            label = None if rng.random() < 0.2 else rng.choice([c for c in CLASSES if c != unlearn])
        events.append((event_id, label, unlearn))
        last_word[event_id] = label
    return messages, events, last_word


def run_rules(messages, events, capacity: int, planner=plan) -> tuple[dict, Counter]:
    model, memory, outcomes = CountModel(), LearnedIds(capacity), Counter()
    for position, (event_id, label, unlearn) in enumerate(events):
        tokens, weight = messages[event_id]
        made = planner(event_id, label, unlearn, memory.get(event_id))
        outcomes[made.outcome] += 1
        if made.take_back is not None:
            model.unlearn(tokens, made.take_back.label, made.take_back.weight)
        if made.learn is not None:  # mode all: every event the plan learns is learned
            model.learn(tokens, made.learn, weight)
        settle(memory, event_id, made, learned=made.learn is not None, epoch=position // 7, weight=weight)
    return model.state(), outcomes


def reference(messages, last_word) -> dict:
    model = CountModel()
    for event_id, label in last_word.items():
        if label is not None:
            model.learn(messages[event_id][0], label, messages[event_id][1])
    return model.state()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_stream_of_corrections_and_duplicates_ends_as_the_corrected_labels_learned_once(seed):
    messages, events, last_word = generated_stream(seed)
    state, outcomes = run_rules(messages, events, capacity=len(messages))
    assert state == reference(messages, last_word)
    assert set(outcomes) == set(OUTCOMES) and min(outcomes.values()) >= 10, outcomes  # every rule ran
    assert all(value > 0 for value in state.values())  # nothing taken back that was not learned


def test_the_stream_check_fails_on_plausible_bugs():
    messages, events, last_word = generated_stream(1)
    expected = reference(messages, last_word)

    def learns_duplicates(event_id, label, unlearn, learned):
        made = plan(event_id, label, unlearn, learned)
        return Plan(LEARNED, None, label) if made.outcome == DUPLICATE and unlearn is None else made

    def trusts_unlearn(event_id, label, unlearn, learned):
        made = plan(event_id, label, unlearn, learned)
        if made.outcome == CORRECTION_MISMATCH:
            return Plan(made.outcome, Learned(unlearn, learned.learned_at, learned.weight), label)
        return made

    for buggy in (learns_duplicates, trusts_unlearn):
        assert run_rules(messages, events, capacity=len(messages), planner=buggy)[0] != expected, buggy.__name__


def test_a_memory_too_small_for_the_stream_leaves_old_classes_learned():
    messages, events, last_word = generated_stream(2)
    state, outcomes = run_rules(messages, events, capacity=5)
    assert state != reference(messages, last_word)
    assert outcomes[CORRECTION_OF_UNKNOWN] > run_rules(messages, events, capacity=len(messages))[1][
        CORRECTION_OF_UNKNOWN]


def test_a_hand_worked_stream():
    # m learned as ham (2 tokens), its duplicate, corrected to spam, the correction again, then taken back;
    # n learned as spam, relabelled ham
    messages = {"m": (["free", "cash"], 1.0), "n": (["hi"], 2.0)}
    events = [("m", "ham", None), ("m", "ham", None), ("n", "spam", None), ("m", "spam", "ham"),
              ("m", "spam", "ham"), ("n", "ham", None)]
    state, outcomes = run_rules(messages, events, capacity=10)
    # m: ham learned, then taken back for spam; n: spam (weight 2) taken back for ham; zeros left out
    assert state == {("#class", "str", "spam"): 1.0, ("free", "str", "spam"): 1.0, ("cash", "str", "spam"): 1.0,
                     ("#class", "str", "ham"): 2.0, ("hi", "str", "ham"): 2.0}
    assert outcomes == Counter({LEARNED: 2, DUPLICATE: 2, CORRECTED: 1, RELEARNED: 1})
    state, outcomes = run_rules(messages, events + [("m", None, "spam")], capacity=10)
    assert state == {("#class", "str", "ham"): 2.0, ("hi", "str", "ham"): 2.0}
    assert outcomes[CORRECTED] == 2


def test_record_new_equals_record_learned_one_at_a_time_and_refuses_what_it_must():
    """The batch insert of a plain run keeps the same entries, order and evictions as the
    per-id definition; bad input changes nothing."""
    rng = random.Random(5)
    for capacity in (0, 7, 50, 1000):
        one, batch = LearnedIds(capacity), LearnedIds(capacity)
        epoch = 0
        for run in range(20):
            ids = [f"r{run}-{k}" for k in range(rng.randrange(0, 15))]
            labels = [rng.choice(["ham", "spam", 3]) for _ in ids]
            epochs = []
            for _ in ids:
                epoch += rng.random() < 0.2
                epochs.append(epoch)
            evicted_one = [gone for i, l, e in zip(ids, labels, epochs) for gone in one.record_learned(i, l, e)]
            assert batch.record_new(ids, labels, epochs) == evicted_one
            assert list(batch.items()) == list(one.items())
    memory = LearnedIds(100)
    memory.record_new(["a", "b"], ["ham", "spam"], [2, 2])
    before = memory.to_state()
    for ids, labels, epochs in ([["a"], ["ham"], [2]],            # remembered already
                                [["c", "c"], ["ham", "ham"], [2, 2]],  # repeated
                                [[""], ["ham"], [2]], [[7], ["ham"], [2]], [["\udc80"], ["ham"], [2]],
                                [["c"], [True], [2]], [["c"], [""], [2]], [["c"], ["ham"], [-1]],
                                [["c"], ["ham"], [1]],            # before the last entry's epoch
                                [["c", "d"], ["ham", "ham"], [3, 2]]):  # out of order
        with pytest.raises(ValueError):
            memory.record_new(ids, labels, epochs)
        assert memory.to_state() == before
