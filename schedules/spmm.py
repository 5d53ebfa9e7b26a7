"""SpMM schedules (`csrmm`: Stage II blocks `csrmm0` over rows and `csrmm1` over (j, k)).

A schedule is `fn(sch)` applied at Stage II; one with a `stage1` attribute also gets
`fn.stage1(sch)` on the Stage I function first (e.g. to fuse `i` and `j`).
"""

from __future__ import annotations

from sparsetir_py.schedule import Schedule

from .common import (
    bind_row_search,
    fixed_width,
    fuse_rows_and_nonzeros,
    parts_cpu,
    parts_cuda,
    prefetch_gathered_rows,
    split_rows_by_nonzeros,
)


def csr_cpu_rows(sch: Schedule) -> None:
    """Rows in parallel over CPU threads; each row's output zeroed once before its nonzeros
    (`decompose_reduction`: no "first nonzero?" test in the feature loop), then accumulated
    feature by feature.

    With flat offsets indexed unsigned and the feature width left at run time, LLVM vectorises
    the feature loop; the feature loop stays innermost so B's rows are read contiguously.
    Measured against the same schedule without `decompose_reduction` (one call, 2 threads):
    facebook_combined width 32 0.66 -> 0.48 ms, ca-CondMat width 32 0.81 -> 0.39-0.63 ms,
    bcsstk16 width 512 5.2 -> 4.3 ms; others within noise.
    """
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    block = sch.get_block("csrmm1")
    j, _ = sch.get_loops(block)
    sch.decompose_reduction(block, j)
    sch.parallel(i)


def csr_cpu_rows_balanced(sch: Schedule, chunk: int = 64) -> None:
    """`csr_cpu_rows` with rows handed out dynamically in chunks of `chunk` rows: on power-law
    graphs a static split gives one thread most of the nonzeros; dynamic chunks balance them."""
    csr_cpu_rows(sch)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.annotate(i, "chunk_size", chunk)


def csr_cpu_rows_split(sch: Schedule) -> None:
    """`csr_cpu_rows` with rows split statically into one range of equal nonzeros per thread."""
    csr_cpu_rows(sch)
    split_rows_by_nonzeros(sch, "csrmm0")


def csr_cpu_rows_x4(sch: Schedule, factor: int = 4, chunk: int | None = None) -> None:
    """`csr_cpu_rows` with each row's nonzeros taken `factor` at a time: split by `factor`, the
    feature loop moved between the halves, and the `factor` products summed as a balanced tree
    (`tensorize` with `dot_<factor>`) before one update of `C[i, k]`: a row of C is loaded and
    stored once per `factor` nonzeros instead of once per nonzero, and the `factor` gathered rows
    of B are independent loads. `partition_loops` (run by `sp.compile` on the CPU) gives the full
    chunks a loop without guards and the partial one a copy per remainder. With `chunk`, rows
    are handed out dynamically in chunks of that many (power-law balance).

    Measured against `csr_cpu_rows` (2 threads, paired calls, float32): bcsstk13 (42 nonzeros per
    row) 1.6x / 1.3x / 1.5x at widths 32 / 128 / 512; ca-CondMat 0.94x / 1.34x / 1.30x; 4elt (6
    per row) 0.88x / 1.10x / 1.17x; short rows gain least (`sp.tune` chooses per matrix)."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    block = sch.get_block("csrmm1")
    j, k = sch.get_loops(block)
    sch.decompose_reduction(block, j)
    sch.parallel(i)
    if chunk is not None:
        sch.annotate(i, "chunk_size", chunk)
    j_outer, j_inner = sch.split(j, [None, factor])
    sch.reorder(j_outer, k, j_inner)
    sch.tensorize(j_inner, f"dot_{factor}", "cpu")


def csr_cpu_rows_split_x8(sch: Schedule) -> None:
    """`csr_cpu_rows_split_x4` with eight nonzeros at a time: a row of C updated once per eight
    nonzeros, twice the independent gathers of B in flight, and a row of up to eight nonzeros in
    one sweep (its remainder copy) where four take two or three (the zeroing, a full chunk, the
    remainder). Pays where B outgrows the L2 and the gathers wait on memory; `sp.tune` times it
    there against the four-wide schedules. Measured (2 threads, paired, width compiled in, ms,
    x8 vs x4): mesh2d (200k rows, 5 per row) 11.0 vs 16.2 at width 32; a uniform random graph
    (160k rows, 10 per row) 39.5 vs 42.6 at 32, 183 vs 218 at 128; small graphs 2-10% slower.
    Its kernel has seven remainder copies: about twice x4's compile time."""
    csr_cpu_rows_x4(sch, factor=8)
    split_rows_by_nonzeros(sch, "csrmm0")


def csr_cpu_rows_split_x4_prefetch(sch: Schedule) -> None:
    """`csr_cpu_rows_split_x4` with the rows of B that later chunks gather prefetched at the top
    of each chunk of four nonzeros (`common.prefetch_gathered_rows`): the gathers
    of a graph whose B outgrows the caches overlap instead of each waiting for memory in turn.
    Near a row's end the hints run on into the next rows' nonzeros (rows of power-law graphs are
    mostly shorter than the distance). Measured (2 threads, paired medians of 9, float32, width
    compiled in; against `csr_cpu_rows_split_x4_fixed`), width 32: an R-MAT of 200k rows and
    2.7M nonzeros 1.23x, a Chung-Lu graph of 100k rows and 2M nonzeros 1.21x, an R-MAT of 65k
    rows 1.15x, a Watts-Strogatz graph of 50k rows 1.33x, a Delaunay mesh of 50k rows 1.28x.
    Wider rows gain less and not everywhere (widths 128 and 512, first line only: 0.95-1.16x),
    where every line hinted lost (0.80-0.95x): `sp.tune` times it against the others where B
    outgrows the L2."""
    csr_cpu_rows_split_x4(sch)
    prefetch_gathered_rows(sch, "csrmm1", "B")


def csr_cpu_rows_balanced_x4(sch: Schedule) -> None:
    """`csr_cpu_rows_x4` with rows handed out dynamically in chunks of 64."""
    csr_cpu_rows_x4(sch, chunk=64)


def csr_cpu_rows_split_x4(sch: Schedule) -> None:
    """`csr_cpu_rows_x4` with rows split statically into one range of equal nonzeros per thread."""
    csr_cpu_rows_x4(sch)
    split_rows_by_nonzeros(sch, "csrmm0")


def csr_cpu_rows_tiled(sch: Schedule, tile: int = 8) -> None:
    """Rows in parallel, the feature loop split into vector-width tiles (the inner one vectorised)."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    sch.parallel(i)
    _, k_inner = sch.split(k, [None, tile])
    sch.vectorize(k_inner)


def csr_cuda_rows(sch: Schedule, threads: int = 32) -> None:
    """Row-split: one row per thread block, features across `threadIdx.x` (coalesced reads of B)."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    sch.bind(i, "blockIdx.x")
    _, k_inner = sch.split(k, [None, threads])
    sch.bind(k_inner, "threadIdx.x")


def csr_cuda_rows_register(sch: Schedule, max_threads: int = 1024) -> None:
    """One row per thread block, one feature per thread (`threadIdx.x`: a warp reads 32
    consecutive columns of a row of B, coalesced), the row's nonzeros inner and summed in a
    register: the feature loop moved outside the nonzeros, the init decomposed before them (which
    drops lowering's empty-row initialisation), and C cached in `local` scope written back once
    per feature (`compact_buffers` makes it one register). `csr_cuda_rows` instead loops over the
    nonzeros outside the features and adds into C in global memory once per nonzero and feature.
    A width that is not a constant from 1 to `max_threads` (threads per block) runs
    `csr_cuda_rows`."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    block = sch.get_block("csrmm1")
    j, k = sch.get_loops(block)
    extent = sch.loop_extent(k)
    if not extent or extent > max_threads:  # not a constant, 0 (no feature) or past the block limit
        return csr_cuda_rows(sch)
    sch.reorder(k, j)
    sch.decompose_reduction(block, j)
    write = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write, k)
    sch.bind(i, "blockIdx.x")
    sch.bind(k, "threadIdx.x")


def csr_cuda_rows_coarse(
    sch: Schedule,
    per_thread: int = 4,
    block_threads: int = 128,
    max_threads: int = 1024,
    unroll_nonzeros: int | None = None,
) -> None:
    """Several rows per thread block (`threadIdx.y`), each row's features over `width /
    per_thread` threads (`threadIdx.x`, at least a warp), every thread summing `per_thread`
    consecutive features in registers: the nonzero's column and value are loaded once for
    `per_thread` loads of B, which keeps more loads in flight per thread (GE-SpMM's coarse-grained
    warp merging); `block_threads / (width / per_thread)` rows a block (4 at widths 32 and 128,
    1 at 512), so that narrow rows still fill a block. `per_thread` shrinks to the largest power
    of two that divides the width and keeps a warp a row. The `local` tile of `per_thread`
    accumulators is compacted to registers (its index `& (per_thread - 1)`, folded to a constant
    once the feature loop is unrolled). A width that is not a constant runs `csr_cuda_rows`.

    Measured on an H200 (kernel time, device-resident operands; `python -m bench.cuda_probe`),
    against `csr_cuda_rows_register` at widths 32 / 128 / 512: a uniform graph of 200k rows and
    2M nonzeros 0.155 / 0.265 / 0.98 ms vs 0.172 / 0.596 / 2.43 (torch.sparse.mm 0.195 / 0.333 /
    1.26); a power-law one of 100k rows and 1.8M nonzeros 0.43 / 1.01 / 1.51 vs 0.61 / 0.99 /
    2.16 (torch 0.14 / 0.21 / 0.79: long rows want more threads a row, at 128 one feature a
    thread gave 0.72); pubmed 0.024 / 0.041 / 0.069 vs 0.033 / 0.046 / 0.141.

    `unroll_nonzeros=U` splits the row's nonzeros by U and unrolls the chunk (each copy guarded),
    so that a thread issues the loads of U nonzeros before their adds: a long row is a chain of
    dependent iterations, one memory latency each, which bounds the power-law graph above (its
    longest row has 3408 nonzeros). Not yet timed on a GPU (`csr_cuda_rows_coarse_u4`)."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    block = sch.get_block("csrmm1")
    j, k = sch.get_loops(block)
    width = sch.loop_extent(k)
    if not width:
        return csr_cuda_rows(sch)
    per = 1
    while per * 2 <= per_thread and width % (per * 2) == 0 and width // (per * 2) >= 32:
        per *= 2
    threads = width // per
    if threads > max_threads:
        return csr_cuda_rows(sch)
    k_thread, k_own = sch.split(k, [threads, per])
    sch.reorder(k_thread, j, k_own)
    sch.decompose_reduction(block, j)
    write = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write, k_thread)
    if unroll_nonzeros:
        _, j_copy = sch.split(j, [None, unroll_nonzeros])
        sch.unroll(j_copy)
    rows = max(1, block_threads // threads)
    if rows > 1:
        i_block, i_thread = sch.split(i, [None, rows])
        sch.bind(i_block, "blockIdx.x")
        sch.bind(i_thread, "threadIdx.y")
    else:
        sch.bind(i, "blockIdx.x")
    sch.bind(k_thread, "threadIdx.x")


def csr_cuda_rows_coarse_u4(sch: Schedule) -> None:
    """`csr_cuda_rows_coarse` with the row's nonzeros unrolled by 4 (`unroll_nonzeros=4`)."""
    csr_cuda_rows_coarse(sch, unroll_nonzeros=4)


def _fuse_rows_and_nonzeros(sch: Schedule) -> None:
    fuse_rows_and_nonzeros(sch, "csrmm")


def csr_cuda_nnz_split(sch: Schedule, nnz_per_block: int = 8, threads: int = 32) -> None:
    """TACO's nonzero split: (i, j) fused into one loop over the nonzeros, `nnz_per_block` of
    them per thread block on `threadIdx.y`, features across `threadIdx.x` (coalesced reads of B);
    each (nonzero, feature) thread does `atomic_add(C[row, k], A * B[col, k])`. The work per
    block does not depend on row lengths (power-law graphs).

    Three launches, in order (one per top-level nest bound to threads): C = 0 over every
    (row, feature), empty rows included (block `csrmm_init0`); the row of every nonzero by binary
    search over indptr (`csrmm_fuse_search`); the atomic accumulation (`csrmm0`)."""
    i, k = sch.get_loops(sch.get_block("csrmm_init0"))
    sch.bind(i, "blockIdx.x")
    _, k_inner = sch.split(k, [None, threads])
    sch.bind(k_inner, "threadIdx.x")
    bind_row_search(sch, "csrmm_fuse_search")
    block = sch.get_block("csrmm0")
    sch.annotate(block, "atomic", True)  # nonzeros of one row, in several threads, update one C[row, k]
    ij, k = sch.get_loops(block)
    ij_outer, ij_inner = sch.split(ij, [None, nnz_per_block])
    sch.bind(ij_outer, "blockIdx.x")
    sch.bind(ij_inner, "threadIdx.y")
    _, k_inner = sch.split(k, [None, threads])
    sch.bind(k_inner, "threadIdx.x")


csr_cuda_nnz_split.stage1 = _fuse_rows_and_nonzeros

# The width as a constant (`fixed_width`). Measured (2 threads, kernel calls, ms), plcomm (a
# 60k-row power-law graph with communities, not shipped) width 32 / 128 / 512: rows
# 2.11 / 21.9 / 84.5 -> fixed 11.8 / 8.6 / 55.9; x4 3.05 / 15.4 / 60.0 -> fixed 1.80 / 9.19 / 47.4.
# `sp.tune` times them against the rest.
csr_cpu_rows_fixed = fixed_width(csr_cpu_rows)
csr_cpu_rows_balanced_fixed = fixed_width(csr_cpu_rows_balanced)
csr_cpu_rows_x4_fixed = fixed_width(csr_cpu_rows_x4)
csr_cpu_rows_balanced_x4_fixed = fixed_width(csr_cpu_rows_balanced_x4)
csr_cpu_rows_split_fixed = fixed_width(csr_cpu_rows_split)
csr_cpu_rows_split_x4_fixed = fixed_width(csr_cpu_rows_split_x4)
csr_cpu_rows_split_x8_fixed = fixed_width(csr_cpu_rows_split_x8)
csr_cpu_rows_split_x4_prefetch_fixed = fixed_width(csr_cpu_rows_split_x4_prefetch)

DEFAULT = {"cpu": csr_cpu_rows, "cuda": csr_cuda_rows_coarse}
# Any decomposition into parts (sp.decompose_format: BSR, ELL buckets, hyb, padding).
hyb_cpu = parts_cpu
hyb_cuda = parts_cuda

SCHEDULES = {
    "csr_cpu_rows": csr_cpu_rows,
    "csr_cpu_rows_balanced": csr_cpu_rows_balanced,
    "csr_cpu_rows_tiled": csr_cpu_rows_tiled,
    "csr_cpu_rows_x4": csr_cpu_rows_x4,
    "csr_cpu_rows_balanced_x4": csr_cpu_rows_balanced_x4,
    "csr_cpu_rows_fixed": csr_cpu_rows_fixed,
    "csr_cpu_rows_balanced_fixed": csr_cpu_rows_balanced_fixed,
    "csr_cpu_rows_x4_fixed": csr_cpu_rows_x4_fixed,
    "csr_cpu_rows_balanced_x4_fixed": csr_cpu_rows_balanced_x4_fixed,
    "csr_cpu_rows_split": csr_cpu_rows_split,
    "csr_cpu_rows_split_x4": csr_cpu_rows_split_x4,
    "csr_cpu_rows_split_fixed": csr_cpu_rows_split_fixed,
    "csr_cpu_rows_split_x4_fixed": csr_cpu_rows_split_x4_fixed,
    "csr_cpu_rows_split_x8_fixed": csr_cpu_rows_split_x8_fixed,
    "csr_cpu_rows_split_x4_prefetch_fixed": csr_cpu_rows_split_x4_prefetch_fixed,
    "csr_cuda_rows": csr_cuda_rows,
    "csr_cuda_nnz_split": csr_cuda_nnz_split,
    "csr_cuda_rows_register": csr_cuda_rows_register,
    "csr_cuda_rows_coarse": csr_cuda_rows_coarse,
    "csr_cuda_rows_coarse_u4": csr_cuda_rows_coarse_u4,
    "hyb_cpu": hyb_cpu,
    "hyb_cuda": hyb_cuda,
}
