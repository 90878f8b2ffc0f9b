"""CPU time of one piece of work, for tests that compare two sizes of the same input.

Measured in this thread's CPU time with the garbage collector paused, the fastest of a few runs:
wall time counted the machine's other work (75x for 16x the input once, under busy loops); the
process's CPU time still counted threads that earlier tests leave running in the process (82x
once in CI, where the same parse alone grows 19x); a collection landing in one run is noise of
the same kind. A quadratic path still shows: it is the work of this thread.
"""

from __future__ import annotations

import gc
import time
from typing import Callable


def least_cpu_time(work: Callable[[], object], repeats: int = 5) -> float:
    """The fastest of `repeats` calls of `work`, in seconds of this thread's CPU time."""
    best = float("inf")
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            started = time.thread_time()
            work()
            best = min(best, time.thread_time() - started)
    finally:
        if collecting:
            gc.enable()
    return best


def times_in_turns(small: Callable[[], object], large: Callable[[], object], most_growth: float, attempts: int,
                   turns: int = 5, floor: float = 1e-6) -> tuple[float, float]:
    """(small, large): the CPU times of two sizes of one piece of work, each the fastest of
    `turns` runs taken in turns (so a busy spell on a shared machine stretches both, not one);
    measured again, up to `attempts` times in all, while the large one takes more than
    `most_growth` times the small one's (`floor` at least)."""
    for _ in range(attempts):
        fastest_small = fastest_large = float("inf")
        for _ in range(turns):
            fastest_small = min(fastest_small, least_cpu_time(small, repeats=1))
            fastest_large = min(fastest_large, least_cpu_time(large, repeats=1))
        if fastest_large / max(fastest_small, floor) <= most_growth:
            break
    return fastest_small, fastest_large
