"""Timing calls against each other: one call of each candidate per round, then medians.

A machine's speed drifts while it is measured: other processes wake up, the clock changes
frequency, a neighbour fills the cache. Timing candidate A for a second and then B for the next
lets that drift choose between them. Interleaved rounds (one call of each candidate per round,
in turn) spread a slow stretch over every candidate alike, and the median of each candidate's
calls ignores the rounds that were disturbed most. `sp.tune` ranks formats and schedules this
way; the benchmark (`bench`) times sparsetir_py against the baselines this way (`--paired`), and
one library alone with the same loop (one candidate).

The module imports the standard library only: `bench` loads it from its file in the workers that
time a baseline, which must not import `sparsetir_py` (and Numba with it).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def time_interleaved(
    calls: Mapping[K, Callable[[], object]],
    *,
    budget: float,
    min_rounds: int = 5,
    max_rounds: int = 400,
    warmup: int = 0,
    sync: Callable[[], None] | None = None,
) -> dict[K, list[float]]:
    """The seconds of every timed call of each of `calls`, timed in rounds of one call of each.

    `warmup` untimed rounds first; then at least `min_rounds` rounds, and more while fewer than
    `max_rounds` have run and fewer than `budget` seconds (all candidates together) have passed.
    `sync` (a device synchronisation) ends every call, inside its time. The garbage collector is
    off while timing, as in `timeit`.

    >>> times = time_interleaved({"a": lambda: None, "b": lambda: None}, budget=0.0, min_rounds=3)
    >>> {key: len(seconds) for key, seconds in times.items()}
    {'a': 3, 'b': 3}
    """
    sync = sync or _nothing
    for _ in range(warmup):
        for call in calls.values():
            call()
            sync()
    times: dict[K, list[float]] = {key: [] for key in calls}
    enabled = gc.isenabled()
    gc.disable()
    try:
        start, rounds = time.perf_counter(), 0
        while rounds < min_rounds or (rounds < max_rounds and time.perf_counter() - start < budget):
            for key, call in calls.items():
                t0 = time.perf_counter()
                call()
                sync()
                times[key].append(time.perf_counter() - t0)
            rounds += 1
    finally:
        if enabled:
            gc.enable()
    return times


def medians(times: Mapping[K, list[float]]) -> dict[K, float]:
    """The median of each candidate's times.

    >>> medians({"a": [3.0, 1.0, 2.0], "b": [4.0, 1.0]})
    {'a': 2.0, 'b': 2.5}
    """
    return {key: statistics.median(seconds) for key, seconds in times.items()}


def _nothing() -> None:
    return None
