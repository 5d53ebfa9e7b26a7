"""`sp.tune`: per-matrix search of format, parameters and schedule (docs/design.md §3c).

    result = sp.tune.spmm(A, 128)          # ranks candidates, times the best few, caches the winner
    print(result.table)                    # every candidate: predicted and measured ms
    C = sp.ops.spmm(A, B, **result.ops_kwargs())
    C = sp.ops.spmm(A, B, format="auto")   # the same, through the cache

The search itself (cost model, candidates, timing, the on-disk cache) is `sparsetir_py.tuning`;
this module runs it with `sp.ops`' operators timing the candidates.
"""

from __future__ import annotations

from . import ops
from .tuning import (
    BLOCK_SIZES,
    BSR_MIN_FILL,
    MAX_ENTRY_BYTES,
    TIMING_GRAIN,
    TUNE_FORMAT,
    Candidate,
    Machine,
    Structure,
    Table,
    TuneResult,
    candidates,
    fingerprint,
    machine,
)
from .tuning import tune as search

__all__ = [
    "BLOCK_SIZES",
    "BSR_MIN_FILL",
    "MAX_ENTRY_BYTES",
    "TIMING_GRAIN",
    "TUNE_FORMAT",
    "Candidate",
    "Machine",
    "Structure",
    "Table",
    "TuneResult",
    "candidates",
    "fingerprint",
    "machine",
    "sddmm",
    "spmm",
    "tune",
]


def tune(op: str, A, feat: int, target: str = "cpu", **options) -> TuneResult:
    """Search `op` ("spmm" or "sddmm") for matrix `A` at width `feat`, timing candidates with
    `sp.ops`' operator (`sparsetir_py.tuning.tune` has the options: `top`, `budget`, `progress`,
    `cache`, `dtype`)."""
    run = {"spmm": ops.spmm, "sddmm": ops.sddmm}.get(op, ops.spmm)  # an unknown `op` is the search's error
    return search(op, A, feat, target, run=run, **options)


def spmm(A, feat: int, target: str = "cpu", **options) -> TuneResult:
    """Tune `A @ B` for a `feat`-wide B: see `tune`."""
    return tune("spmm", A, feat, target, **options)


def sddmm(A, feat: int, target: str = "cpu", **options) -> TuneResult:
    """Tune `A * (X @ Y.T)` for `feat`-wide X and Y: see `tune`."""
    return tune("sddmm", A, feat, target, **options)
