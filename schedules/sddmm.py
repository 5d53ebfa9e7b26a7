"""SDDMM (`sddmm`: blocks `sddmm0` over rows, `sddmm1` over (j, k)) schedules."""

from __future__ import annotations

import sparsetir_py as sp


def csr_cpu_rows(sch: sp.Schedule) -> None:
    """Rows in parallel over CPU threads; each nonzero's dot product runs in order."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    sch.parallel(i)


def csr_cuda_rows(sch: sp.Schedule, threads: int = 32) -> None:
    """One row per thread block, the row's nonzeros across `threadIdx.x`."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    j, _ = sch.get_loops(sch.get_block("sddmm1"))
    sch.bind(i, "blockIdx.x")
    _, j_inner = sch.split(j, [None, threads])
    sch.bind(j_inner, "threadIdx.x")


DEFAULT = {"cpu": csr_cpu_rows, "cuda": csr_cuda_rows}
