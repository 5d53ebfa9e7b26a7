"""How many threads an operator's call runs on (CPU target): the caller's `threads=`, else one
below the parallel grain, else Numba's setting."""

from __future__ import annotations

from ..errors import InputError
from ..inputs import positive_int
from ..omp import grain

# Below this many multiply-adds (nnz x feature width) a CPU call runs on one thread (None: from
# how idle OpenMP threads wait, `parallel_grain`).
PARALLEL_GRAIN: int | None = None
# Where idle OpenMP threads sleep (`OMP_WAIT_POLICY=passive`, `GOMP_SPINCOUNT=0`), waking Numba's
# pool costs about 45 us a call here, more than a small call computes (cora, width 32: 97 us on
# one thread, 169 us on two), as torch's grain size does. Where they spin a while after each
# parallel region (OpenMP's default), a region costs about 1.5 us and two threads win on every
# matrix measured down to karate (156 nonzeros; olm1000 width 32: 13 us vs 15 us on one).
PARALLEL_GRAIN_SLEEPING = 1 << 21
PARALLEL_GRAIN_SPINNING = 1 << 14


def parallel_grain() -> int:
    """`PARALLEL_GRAIN` if set, else the grain for how this process's OpenMP threads wait."""
    return grain(PARALLEL_GRAIN, PARALLEL_GRAIN_SLEEPING, PARALLEL_GRAIN_SPINNING)


def check_threads(threads, target: str) -> int | None:
    """`threads=` of an operator: None, or a positive integer on the CPU target; `InputError`."""
    if threads is None:
        return None
    threads = positive_int("`threads`", threads)
    if target != "cpu":
        raise InputError(f"`threads` caps the Numba threads of the CPU target; target {target!r} takes none")
    return threads


def thread_args(target: str, work: int, threads: int | None, grain: int | None = None) -> dict:
    """The kernel's `threads=`: the caller's, else 1 below the parallel grain on the CPU (`grain`
    where an operator measures its work in other units than multiply-adds)."""
    if threads is not None:
        return {"threads": threads}
    return {"threads": 1} if target == "cpu" and work < (parallel_grain() if grain is None else grain) else {}
