"""How this process's OpenMP threads (Numba's `omp` threading layer) wait between parallel
regions, which decides the operators' parallel grains (`ops.threads`, `coiteration.host`)."""

from __future__ import annotations

import os


def threads_sleep() -> bool:
    """Whether this process's idle OpenMP threads sleep (`OMP_WAIT_POLICY=passive` or
    `GOMP_SPINCOUNT=0`): then waking Numba's pool for a parallel region costs 45-70 us here,
    where threads that spin a while after each region (OpenMP's default) start one in about
    1.5 us. The operators' parallel grains depend on it."""
    env = os.environ
    return env.get("OMP_WAIT_POLICY", "").strip().lower() == "passive" or env.get("GOMP_SPINCOUNT", "").strip() == "0"
