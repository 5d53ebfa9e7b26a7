"""The CPU schedule of `format_rules.colparts`: column part 0 as CSR, then each thread owns row
blocks and walks the other column parts in order inside each, so the slice of B a part reads
stays in cache, and no two threads write the same row of C (no atomics).

After `lower_sparse_iter`, SpMM over the format is two nests. Part 0 (`csrmm_colpart00` over all
rows, `csrmm_colpart01` over a row's nonzeros and the features) carries the output's init
(`decompose_format` gives it to the part that visits every row once), so C is written once by a
CSR pass, as CSR's own schedule writes it, and not zeroed in a pass of its own. The other parts
are units (row block, part) numbered block-major (`csrmm_colparts0` over units, `csrmm_colparts1`
over a unit's rows, `csrmm_colparts2` over a row's nonzeros and the features); the units' loop
of extent `blocks * (parts - 1)` splits into row blocks (parallel) and parts (serial, in order):

    for i in T.parallel(m):                   # split by nonzeros: one range of rows per thread
        C[i, :] = 0; C[i, :] += A0[i, j] * B[col, :] ...   # column part 0, four nonzeros a time
    for block in T.parallel(blocks):          # one thread: its rows of A, parts 1, 2, ...
        for part in T.serial(parts - 1):      # B's columns [(part + 1) * w, (part + 2) * w)
            for row in T.serial(rows of (block, part)):
                for j, k in ...:              # 4 (8 on wide rows) nonzeros a time, features vectorised
                    C[row, k] += A[...] * B[col, k]

Each row of A lies in exactly one row block (the converter's contract), so the parallel loop's
iterations write disjoint rows of C: annotated `disjoint_writes`.

What it can gain on the project's 2-core machine (2 MiB of L2 per core; an L3 that sysfs reports
as 300 MiB, shared with other tenants), measured on rmat-large (200k rows, 2.7M nonzeros,
permuted) with CSR's own `csr_cpu_rows_split_x8_fixed` over the same rows, every column folded
into the first S (`indices % S`: the gather of a part whose slice of B has S rows, without the
passes over C), against S = all 200k columns:

    S rows (slice of B)    width 128          width 512
    2048                   2.30x (1 MiB)      1.65x (4 MiB)
    12500                  1.30x (6 MiB)      1.40x (24 MiB)
    25000                  1.23x (12 MiB)     1.34x (49 MiB)
    50000                  1.20x (24 MiB)     1.17x (98 MiB)
    100000                 1.11x (49 MiB)     -

Only a slice in the L2 gathers much faster; one in the L3 gains 1.1-1.4x, since a core reads the
L3 at about the rate it reads memory. A slice in the L2 needs 50-200 parts here, and each part
reads and writes its rows of C again (a row of C per (row, part) pair holding a nonzero: with
13.5 nonzeros a row, nearly every row in every part). With 2 or 4 parts the L3's gain is spent on
those passes: paired against the best CSR schedule (`out=` given), 0.93-1.11x on rmat-large and
1.05-1.08x on an R-MAT of 300k rows and 4M nonzeros, widths 128 and 512. Eight nonzeros at a
time on rows of B of 512 bytes or more (`X8_MIN_ROW_BYTES`; CSR's best there is eight at a time
too) then measured, 4 parts against `csr_cpu_rows_split_x8_fixed`: rmat-large 1.12x at width 128
and 1.26-1.29x at 512 (4 and 8 parts), a 100k-row Chung-Lu graph of 1.6M nonzeros 1.43x at 128;
at width 32 (four at a time) 0.91-0.98x, and a 9-point mesh of 90k rows 0.55x at 128.

Tried in hand-written Numba kernels and not better: the top 512-4096 columns by degree (22-56% of the nonzeros) as a
part of their own, 0.85-0.92x one CSR pass (a serial zeroing of C included, about a tenth of
it); feature tiles of 16-64 with 8-32 parts, so that a slice fits the L2, 0.27-0.55x (each tile
walks A and its (row, part) pairs of C again).
"""

from __future__ import annotations

import functools

from sparsetir_py import tuning
from sparsetir_py.errors import ScheduleError, TargetError
from sparsetir_py.schedule import Schedule

from .common import fixed_width, row_bytes

#: `factor="auto"`: eight nonzeros at a time where a row of B holds at least this many bytes, else
#: four. Paired (2 threads, `out=` given, 7 interleaved rounds), eight against four at 4 parts:
#: rmat-large (200k rows, 2.7M nonzeros) 1.06x at width 128 and 1.11x at 512, a 100k-row
#: Chung-Lu graph 1.27x at 128; at width 32 (128-byte rows) 0.97x.
X8_MIN_ROW_BYTES = tuning.COLPARTS_X8_ROW_BYTES  # 512: the tuner's model prices the same switch


def colparts_cpu(sch: Schedule, parts: int, factor: int | str | None = "auto") -> None:
    """SpMM over `format_rules.colparts` of `parts` column parts (see the module docstring): part
    0 as `csr_cpu_rows_split_x4` (rows split by nonzeros, each row zeroed once then accumulated,
    `factor` nonzeros at a time), then row blocks in parallel with the other parts in order
    inside (`factor` nonzeros at a time; None: one at a time; "auto": eight where the width is
    compiled in and a row of B holds at least `X8_MIN_ROW_BYTES`, else four)."""
    head = sch.get_block("csrmm_colpart01")
    (i,) = sch.get_loops(sch.get_block("csrmm_colpart00"))
    j, k = sch.get_loops(head)
    if factor == "auto":
        row = row_bytes(sch, k, "B")
        factor = 8 if row is not None and row >= X8_MIN_ROW_BYTES else 4
    sch.decompose_reduction(head, j)
    sch.parallel(i)
    sch.annotate(i, "split_by", "J_colpart0_indptr")
    if factor is not None:
        _by_factor(sch, j, k, factor)
    if parts == 1:
        return
    units = sch.get_block("csrmm_colparts0")
    (o,) = sch.get_loops(units)
    # The units loop runs `blocks * (parts - 1)` units, the count of parts a constant of the
    # format: split by anything else, one parallel iteration would hold units of two row blocks,
    # or two iterations units of one, and threads would write the same rows of C.
    others = sch.loop_extent_factor(o)
    if others != parts - 1:
        raise ScheduleError(
            f"in `colparts_cpu`: expected a format of {parts} column parts, but its units loop runs "
            f"{others + 1} parts per row block (pass the format's num_col_parts)"
        )
    blocks, _ = sch.split(o, [None, parts - 1])
    # Each row of A lies in one row block (the converter's contract): the blocks write disjoint
    # rows of C, so the loop over them may run in parallel without atomics.
    sch.annotate(units, "disjoint_writes", True)
    sch.parallel(blocks)
    if factor is not None:
        j, k = sch.get_loops(sch.get_block("csrmm_colparts2"))
        _by_factor(sch, j, k, factor)


def _by_factor(sch: Schedule, j, k, factor: int) -> None:
    """A row's nonzeros `factor` at a time: one update of C's row per `factor` products."""
    j_outer, j_inner = sch.split(j, [None, factor])
    sch.reorder(j_outer, k, j_inner)
    sch.tensorize(j_inner, f"dot_{factor}", "cpu")


@functools.cache
def colparts(target: str, parts: int, factor: int | str | None = "auto"):
    """`colparts_cpu` for `parts` column parts, compiled for one feature width (`fixed_width`), as
    a schedule function (one object per arguments, so `sp.ops` caches one kernel per width).

        sp.ops.spmm(A, B, format="colparts", num_col_parts=4, row_blocks=2,
                    schedule=schedules.colparts.colparts("cpu", 4))
    """
    if target != "cpu":
        raise TargetError(f"schedules.colparts: no schedule for target {target!r} (the CPU only)")

    def schedule(sch: Schedule) -> None:
        colparts_cpu(sch, parts, factor)

    suffix = "" if factor == "auto" else f"_x{factor}" if factor else "_x1"
    schedule.__name__ = schedule.__qualname__ = f"colparts_cpu_p{parts}{suffix}"
    schedule.__doc__ = colparts_cpu.__doc__
    return fixed_width(schedule)


def default(op: str, target: str, num_col_parts: int = 2, **params):
    """The schedule `sp.ops` gives `format="colparts"`: `colparts` for SpMM on the CPU; None
    elsewhere (then the schedule of any decomposition, `schedules.common.parts`)."""
    if op != "spmm" or target != "cpu":
        return None
    return colparts(target, int(num_col_parts))
