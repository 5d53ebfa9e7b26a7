"""The threads of this process's parallel regions: how many a call runs on (`current_threads`,
Numba's count read without its checks), and how idle OpenMP threads (Numba's `omp` threading
layer) wait between regions, which decides the operators' parallel grains (`ops.threads`,
`coiteration.host`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable


def threads_sleep() -> bool:
    """Whether this process's idle OpenMP threads sleep (`OMP_WAIT_POLICY=passive` or
    `GOMP_SPINCOUNT=0`): then waking Numba's pool for a parallel region costs 45-70 us here,
    where threads that spin a while after each region (OpenMP's default) start one in about
    1.5 us. The operators' parallel grains depend on it."""
    env = os.environ
    return env.get("OMP_WAIT_POLICY", "").strip().lower() == "passive" or env.get("GOMP_SPINCOUNT", "").strip() == "0"


def grain(override: int | None, sleeping: int, spinning: int) -> int:
    """A parallel grain: `override` where set, else `sleeping` or `spinning` by `threads_sleep()`."""
    if override is not None:
        return override
    return sleeping if threads_sleep() else spinning


def current_threads(cap: int | None = None) -> int:
    """Numba's thread count for the calling thread (`numba.get_num_threads()`, without its
    checks after the first call), at most `cap` where given: the threads a call capped at `cap`
    runs on."""
    current = thread_accessors()[0]()
    return current if cap is None else min(cap, current)


@functools.cache
def thread_accessors() -> tuple[Callable[[], int], Callable[[int], None]]:
    """`(get, set)`: the calling thread's Numba thread count. Called from Python,
    `numba.set_num_threads` and `get_num_threads` check their argument and the threading layer
    each time: the pair around a small call cost 16-28 us here, more than a 1k-nonzero SDDMM
    computes (fs_183_1, width 32: 22 us a call, 15 us without). After the public functions have
    started the threading layer once, its own two functions (what they call after their checks)
    are called directly; a Numba without them keeps the public pair."""
    import numba

    numba.set_num_threads(numba.get_num_threads())  # starts the threading layer once
    layer = getattr(numba.np.ufunc, "parallel", None)
    get = getattr(layer, "_get_num_threads", None)
    set_ = getattr(layer, "_set_num_threads", None)
    if get is None or set_ is None:
        return numba.get_num_threads, numba.set_num_threads
    return get, set_
