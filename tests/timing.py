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
