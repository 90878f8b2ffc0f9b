"""The switch of the optional C extensions (setup.py builds them where a compiler is found).

Each extension repeats a Python definition bit for bit, for speed: the featuriser
(features/_native.c), the multinomial's kernel (model/_kernel.c) and the prediction messages
(events/_codec.c). STREAM_NB_NATIVE=0 in the environment keeps all of them out, so the Python
definitions run: to compare against, or to fall back on.
"""

from __future__ import annotations

import os

NATIVE_ENV = "STREAM_NB_NATIVE"


def native_allowed() -> bool:
    """Whether the environment lets the C extensions run (read at each use)."""
    return os.environ.get(NATIVE_ENV, "1") != "0"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says, else the count):
    what the work run beside the C loops, which give the GIL up, can count on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        return os.cpu_count() or 1
