"""The STREAM triad `a = b + s * c` (McCalpin's STREAM), with Numba's `prange` on float64 arrays.

It runs in its own worker with the benchmark's thread count, so its rate is the memory bandwidth
the benchmarked kernels can hope for on this machine, measured in the same run.
"""

from __future__ import annotations

import time

import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def _fill(a, b, c):
    # First touch by the threads that later use the pages.
    for i in numba.prange(a.size):
        a[i] = 0.0
        b[i] = 1.0
        c[i] = 2.0


@numba.njit(parallel=True, cache=True)
def _triad(a, b, c, s):
    for i in numba.prange(a.size):
        a[i] = b[i] + s * c[i]


def stream_triad(n: int, trials: int) -> dict:
    """Time `trials` triads over arrays of `n` float64 entries, after one warm-up.

    Bytes per triad follow STREAM's convention: 24 per entry (two reads, one write; the
    write-allocate read is not counted). Returns the best and the median rate in GB/s (1e9
    bytes/s); STREAM reports the best, and so does the benchmark's %STREAM.
    """
    a, b, c = np.empty(n), np.empty(n), np.empty(n)
    _fill(a, b, c)
    _triad(a, b, c, 3.0)  # compiles (or loads from Numba's cache) and warms up
    if not np.all(a[:: max(1, n // 1000)] == 7.0):
        raise RuntimeError("the STREAM triad computed a wrong result")
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        _triad(a, b, c, 3.0)
        times.append(time.perf_counter() - t0)
    nbytes = 24 * n
    return {
        "kernel": "triad a = b + s*c, float64, numba prange",
        "n": n,
        "bytes": nbytes,
        "trials": trials,
        "threads": numba.get_num_threads(),
        "best_GBps": nbytes / min(times) / 1e9,
        "median_GBps": nbytes / float(np.median(times)) / 1e9,
    }
