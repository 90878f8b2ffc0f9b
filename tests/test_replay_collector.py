"""A replay runs with the objects older than it frozen for the cyclic collector
(stream_nb.replay.prequential._older_objects_frozen): frozen while it runs, as they were after,
left alone when something else froze objects first, and no garbage kept past the end."""

from __future__ import annotations

import gc
import threading
import weakref

from stream_nb import MultinomialNB
from stream_nb.features import TextFeaturizer
from stream_nb.replay import replay_events
from stream_nb.replay.generator import spam_ham_stream
from stream_nb.replay.prequential import _older_objects_frozen


class Node:
    """An object that can sit in a reference cycle (freed by the collector only)."""

    def __init__(self) -> None:
        self.other = None


def cycle() -> weakref.ref:
    """A reference cycle nothing else holds, and a weak reference to one of its objects."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_replay_freezes_the_older_objects_while_it_runs_and_only_then():
    events = list(spam_ham_stream(300, seed=3))
    assert gc.get_freeze_count() == 0
    during, made_during = [], []

    def on_batch(result) -> None:
        during.append(gc.get_freeze_count())
        made_during.append(cycle())  # a cycle made during the replay: collected as always
        gc.collect()

    result = replay_events(events, MultinomialNB(), TextFeaturizer(), batch_size=50, on_batch=on_batch)
    assert result.events == 300
    assert len(during) == 6 and min(during) > 1000  # (the interpreter's objects, the model's)
    assert all(ref() is None for ref in made_during[:-1])  # each collected by the next batch's collection
    assert gc.get_freeze_count() == 0  # as it was


def test_an_old_cycle_dropped_during_a_replay_is_collected_after_it():
    events = list(spam_ham_stream(100, seed=4))
    holder = [Node()]
    holder[0].other = Node()
    holder[0].other.other = holder[0]
    old = weakref.ref(holder[0])

    def on_batch(result) -> None:
        holder.clear()  # the old cycle becomes garbage while frozen
        gc.collect()

    replay_events(events, MultinomialNB(), TextFeaturizer(), batch_size=50, on_batch=on_batch)
    assert old() is not None  # frozen, so not collected during the replay
    gc.collect()
    assert old() is None  # back in the collector's care at its end


def test_objects_frozen_by_the_program_stay_frozen_and_are_not_unfrozen():
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        during = []
        replay_events(list(spam_ham_stream(100, seed=5)), MultinomialNB(), TextFeaturizer(), batch_size=50,
                      on_batch=lambda result: during.append(gc.get_freeze_count()))
        # nothing more frozen (a frozen object that dies leaves the count)
        assert len(during) == 2 and before - 100 < min(during) and max(during) <= before
        assert before - 100 < gc.get_freeze_count() <= before  # and the program's frozen objects left frozen
    finally:
        gc.unfreeze()


def test_overlapping_replays_unfreeze_when_the_last_one_ends():
    first_in, second_out, release = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first() -> None:
        with _older_objects_frozen():
            first_in.set()
            second_out.wait(10)
            seen["first, after the second ended"] = gc.get_freeze_count()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_in.wait(10)
    frozen = gc.get_freeze_count()
    with _older_objects_frozen():
        seen["second"] = gc.get_freeze_count()
    second_out.set()
    release.set()
    thread.join(10)
    assert frozen > 1000 and seen["second"] == frozen  # the second froze nothing more
    assert seen["first, after the second ended"] > 1000  # still frozen for the first
    assert gc.get_freeze_count() == 0
