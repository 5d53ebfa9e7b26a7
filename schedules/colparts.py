"""The CPU schedule of `format_rules.colparts`: each thread owns row blocks and walks the column
parts in order inside each, so the slice of B a part reads stays in cache, and no two threads
write the same row of C (no atomics).

After `lower_sparse_iter`, the format's computation is one nest (SpMM: blocks `csrmm_colparts0`
over the format's units, `csrmm_colparts1` over a unit's rows, `csrmm_colparts2` over a row's
nonzeros and the features). A unit is (row block, column part), numbered block-major, so the
units' loop of extent `blocks * parts` splits into row blocks (parallel) and column parts
(serial, in order):

    for block in T.parallel(blocks):          # one thread: its rows of A, all column parts
        for part in T.serial(parts):          # B's columns [part * w, (part + 1) * w)
            for row in T.serial(rows of (block, part)):
                for j, k in ...:              # four nonzeros a time, the features vectorised
                    C[row, k] += A[...] * B[col, k]

Each row of A is in exactly one row block (the converter's contract), so the parallel loop's
iterations write disjoint rows of C: annotated `disjoint_writes`. The output's init is its own
parallel nest before.
"""

from __future__ import annotations

import functools

from sparsetir_py.errors import TargetError
from sparsetir_py.schedule import Schedule

from .common import fixed_width


def colparts_cpu(sch: Schedule, parts: int, factor: int | None = 4) -> None:
    """SpMM over `format_rules.colparts` of `parts` column parts (see the module docstring): row
    blocks in parallel, column parts in order inside, each row's nonzeros `factor` at a time (as
    `csr_cpu_rows_x4`: one update of C's row per `factor` products; None: one at a time)."""
    units = sch.get_block("csrmm_colparts0")
    (o,) = sch.get_loops(units)
    blocks, _ = sch.split(o, [None, parts])
    # Each row of A lies in one row block (the converter's contract): the blocks write disjoint
    # rows of C, so the loop over them may run in parallel without atomics.
    sch.annotate(units, "disjoint_writes", True)
    sch.parallel(blocks)
    if factor is not None:
        inner = sch.get_block("csrmm_colparts2")
        j, k = sch.get_loops(inner)
        j_outer, j_inner = sch.split(j, [None, factor])
        sch.reorder(j_outer, k, j_inner)
        sch.tensorize(j_inner, f"dot_{factor}", "cpu")
    i, _ = sch.get_loops(sch.get_block("csrmm_init0"))
    sch.parallel(i)


@functools.cache
def colparts(target: str, parts: int, factor: int | None = 4):
    """`colparts_cpu` for `parts` column parts, compiled for one feature width (`fixed_width`), as
    a schedule function (one object per arguments, so `sp.ops` caches one kernel per width).

        sp.ops.spmm(A, B, format="colparts", num_col_parts=4, row_blocks=2,
                    schedule=schedules.colparts.colparts("cpu", 4))
    """
    if target != "cpu":
        raise TargetError(f"schedules.colparts: no schedule for target {target!r} (the CPU only)")

    def schedule(sch: Schedule) -> None:
        colparts_cpu(sch, parts, factor)

    suffix = "" if factor == 4 else f"_x{factor}" if factor else "_x1"
    schedule.__name__ = schedule.__qualname__ = f"colparts_cpu_p{parts}{suffix}"
    schedule.__doc__ = colparts_cpu.__doc__
    return fixed_width(schedule)


def default(op: str, target: str, num_col_parts: int = 2, **params):
    """The schedule `sp.ops` gives `format="colparts"`: `colparts` for SpMM on the CPU; None
    elsewhere (then the schedule of any decomposition, `schedules.common.parts`)."""
    if op != "spmm" or target != "cpu":
        return None
    return colparts(target, int(num_col_parts))
