"""SpMM (`csrmm`: blocks `csrmm0` over rows, `csrmm1` over (j, k)) schedules."""

from __future__ import annotations

import sparsetir_py as sp


def csr_cpu_rows(sch: sp.Schedule) -> None:
    """Rows in parallel over CPU threads; each row accumulates its features in order."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.parallel(i)


def csr_cuda_rows(sch: sp.Schedule, threads: int = 32) -> None:
    """Row-split: one row per thread block, features across `threadIdx.x` (coalesced reads of B)."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    sch.bind(i, "blockIdx.x")
    _, k_inner = sch.split(k, [None, threads])
    sch.bind(k_inner, "threadIdx.x")


DEFAULT = {"cpu": csr_cpu_rows, "cuda": csr_cuda_rows}
