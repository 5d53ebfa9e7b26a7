"""SDDMM schedules (`sddmm`: Stage II blocks `sddmm0` over rows and `sddmm1` over (j, k)).

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
    """Rows in parallel over CPU threads; the init of each nonzero moved out of the feature loop
    (`decompose_reduction`), so the dot product is a plain reduction that runs in a register
    (the code generator's scalar replacement) and that LLVM vectorises. Measured on the 2M-nnz
    R-MAT: 1.2x (width 32) to 1.7x (width 128) faster than with the init inside the loop."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    block = sch.get_block("sddmm1")
    _, k = sch.get_loops(block)
    sch.decompose_reduction(block, k)
    sch.parallel(i)


def csr_cpu_rows_balanced(sch: Schedule, chunk: int = 64) -> None:
    """Rows in parallel, handed out dynamically in chunks of `chunk` rows (power-law balance)."""
    csr_cpu_rows(sch)
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    sch.annotate(i, "chunk_size", chunk)


def csr_cpu_rows_split(sch: Schedule) -> None:
    """Rows in parallel, split statically into one range of equal nonzeros per thread."""
    csr_cpu_rows(sch)
    split_rows_by_nonzeros(sch, "sddmm0")


def csr_cpu_rows_dot8(sch: Schedule) -> None:
    """Rows in parallel; the init out of the feature loop (`decompose_reduction`), the dot product
    split by 8 and tensorized into an unrolled 8-wide dot. A demonstration of `tensorize` on the
    CPU, not a fast schedule: LLVM vectorises the plain loop of `csr_cpu_rows` better (pubmed,
    width 128, one call: 1.9 ms vs 4.0 ms with the width specialised, 15.6 ms with it left at run
    time, where every term is guarded)."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    block = sch.get_block("sddmm1")
    _, k = sch.get_loops(block)
    sch.decompose_reduction(block, k)
    sch.parallel(i)
    _, k_inner = sch.split(k, [None, 8])
    sch.tensorize(k_inner, "dot_8", "cpu")


def csr_cpu_rows_x4(sch: Schedule, factor: int = 4, chunk: int | None = None) -> None:
    """Rows in parallel; each row's nonzeros taken `factor` at a time, their dot products in one
    sweep over the features: split `j` by `factor`, the feature loop moved between the halves,
    the inner loop unrolled (`unroll_loops`), so the `factor` accumulators live in registers
    (`promote_accumulators`) and every element of X's row is loaded once for `factor` products
    instead of once per nonzero. `partition_loops` gives full chunks a loop without guards and
    the partial chunk a copy per remainder. With `chunk`, rows are handed out dynamically in
    chunks of that many (power-law balance).

    Measured against `csr_cpu_rows` (2 threads, paired calls, float32, width 128 / 512):
    citeseer 1.02x / 1.19x, wiki-Vote 1.16x / 1.29x, bcsstk13 1.16x / 1.33x; at width 32 it is
    slower on most graphs (the sweep is too short to pay for the remainder copies)."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    block = sch.get_block("sddmm1")
    j, k = sch.get_loops(block)
    sch.parallel(i)
    if chunk is not None:
        sch.annotate(i, "chunk_size", chunk)
    j_outer, j_inner = sch.split(j, [None, factor])
    sch.reorder(j_outer, k, j_inner)
    init = sch.decompose_reduction(block, k)
    sch.unroll(j_inner)
    sch.unroll(sch.get_loops(init)[-1])


def csr_cpu_rows_balanced_x4(sch: Schedule) -> None:
    """`csr_cpu_rows_x4` with rows handed out dynamically in chunks of 64."""
    csr_cpu_rows_x4(sch, chunk=64)


def csr_cpu_rows_split_x4(sch: Schedule) -> None:
    """`csr_cpu_rows_x4` with rows split statically into one range of equal nonzeros per thread."""
    csr_cpu_rows_x4(sch)
    split_rows_by_nonzeros(sch, "sddmm0")


def csr_cpu_rows_split_x4_prefetch(sch: Schedule) -> None:
    """`csr_cpu_rows_split_x4` with the rows of Y that later chunks of four nonzeros read
    prefetched at the top of each chunk (`common.prefetch_gathered_rows`), as SpMM's schedule of
    the same name does for B."""
    csr_cpu_rows_split_x4(sch)
    prefetch_gathered_rows(sch, "sddmm1", "Y")


# The width as a constant (`fixed_width`): LLVM then sizes the feature loop's vectors and
# unrolling to it. Measured (2 threads, one process, kernel calls; width 32 / 128 / 512, ms):
# bcsstk13 x4 0.153 / 0.320 / 1.086 -> fixed 0.121 / 0.259 / 1.050; polblogs rows
# 0.117 / 0.181 / 0.490 -> fixed 0.320 / 0.157 / 0.330 (a plain dot of a constant 32 is unrolled
# into scalar code: slow), x4 fixed 0.113 / 0.156 / 0.403. `sp.tune` times them against the rest.
csr_cpu_rows_fixed = fixed_width(csr_cpu_rows)
csr_cpu_rows_balanced_fixed = fixed_width(csr_cpu_rows_balanced)
csr_cpu_rows_x4_fixed = fixed_width(csr_cpu_rows_x4)
csr_cpu_rows_balanced_x4_fixed = fixed_width(csr_cpu_rows_balanced_x4)
csr_cpu_rows_split_fixed = fixed_width(csr_cpu_rows_split)
csr_cpu_rows_split_x4_fixed = fixed_width(csr_cpu_rows_split_x4)
csr_cpu_rows_split_x4_prefetch_fixed = fixed_width(csr_cpu_rows_split_x4_prefetch)


def _fuse_rows_and_nonzeros(sch: Schedule) -> None:
    fuse_rows_and_nonzeros(sch, "sddmm")


def csr_cpu_nonzeros(sch: Schedule, chunk: int = 256) -> None:
    """(i, j) fused into one loop over the nonzeros, in parallel in chunks of `chunk` nonzeros:
    the work per thread does not depend on row lengths, so a row holding a third of the
    nonzeros (an arrowhead matrix, a hub of a power-law graph) is shared by all threads. Each
    nonzero's row comes from a parallel search over indptr first (block `sddmm_fuse_search`); the
    dot product runs in a register as in `csr_cpu_rows`."""
    (p,) = sch.get_loops(sch.get_block("sddmm_fuse_search"))
    sch.parallel(p)
    block = sch.get_block("sddmm0")
    ij, k = sch.get_loops(block)
    sch.decompose_reduction(block, k)
    sch.parallel(ij)
    sch.annotate(ij, "chunk_size", chunk)


csr_cpu_nonzeros.stage1 = _fuse_rows_and_nonzeros


def csr_cuda_rows(sch: Schedule, threads: int = 32) -> None:
    """One row per thread block, the row's nonzeros across `threadIdx.x`."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    j, _ = sch.get_loops(sch.get_block("sddmm1"))
    sch.bind(i, "blockIdx.x")
    _, j_inner = sch.split(j, [None, threads])
    sch.bind(j_inner, "threadIdx.x")


def csr_cuda_fused_warp(sch: Schedule, nnz_per_block: int = 4) -> None:
    """Fused (i, j) over nonzeros: `nnz_per_block` nonzeros per thread block on `threadIdx.y`,
    each nonzero's dot product over 32 lanes of a warp (`threadIdx.x`) reduced with
    `shfl_down_sync` (the `warp_sum_32` intrinsic). The row search gets its own launch."""
    bind_row_search(sch, "sddmm_fuse_search")
    ij, k = sch.get_loops(sch.get_block("sddmm0"))
    outer, inner = sch.split(ij, [None, nnz_per_block])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.y")
    _, k_inner = sch.split(k, [None, 32])
    sch.tensorize(k_inner, "warp_sum_32", "cuda")


csr_cuda_fused_warp.stage1 = _fuse_rows_and_nonzeros


def csr_cuda_fused_rfactor(sch: Schedule, nnz_per_block: int = 4, lanes: int = 32) -> None:
    """Fused (i, j) over nonzeros, `nnz_per_block` per thread block on `threadIdx.y`; each
    nonzero's dot product split by 32 and factored (`rfactor`) over the 32 lanes of a warp
    (`threadIdx.x`): every lane sums its strided features in a register (the rf buffer, `local`,
    one element per thread after buffer compaction), then one `warp_sum_32` shuffle tree per
    nonzero adds the 32 partial sums (`csr_cuda_fused_warp` shuffles once per 32 features). The
    row search gets its own launch.

    `lanes=8` or `16` gives each nonzero a group of that many lanes of a warp instead (more
    features a lane, a shuffle tree of 3 or 4 steps: `warp_sum_8` / `warp_sum_16`), for narrow
    features: on an H200 at width 32 the 32-lane tree made this schedule 0.43-0.53x torch's
    `sampled_addmm` on graphs of 2M nonzeros. `csr_cuda_fused_rfactor_lanes8` is not yet timed
    on a GPU."""
    bind_row_search(sch, "sddmm_fuse_search")
    ij, k = sch.get_loops(sch.get_block("sddmm0"))
    k_outer, k_inner = sch.split(k, [None, lanes])
    rf = sch.rfactor(k_inner, 1)
    sch.set_scope(rf, 0, "local")
    sch.reorder(k_inner, k_outer)
    # CUDA local memory starts undefined: the partial sums are zeroed before the reduction loop
    # (else a lane with no feature, feat < 32, would add garbage).
    sch.decompose_reduction(rf, k_outer)
    outer, inner = sch.split(ij, [None, nnz_per_block])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.y")
    sch.bind(k_inner, "threadIdx.x")
    write_back = sch.get_block("sddmm0")
    sch.reverse_compute_at(write_back, inner)
    sch.tensorize(sch.get_loops(write_back)[-1], f"warp_sum_{lanes}", "cuda")


csr_cuda_fused_rfactor.stage1 = _fuse_rows_and_nonzeros


def csr_cuda_fused_rfactor_lanes8(sch: Schedule) -> None:
    """`csr_cuda_fused_rfactor` with 8 lanes a nonzero (`warp_sum_8`), 16 nonzeros a block."""
    csr_cuda_fused_rfactor(sch, nnz_per_block=16, lanes=8)


csr_cuda_fused_rfactor_lanes8.stage1 = _fuse_rows_and_nonzeros

DEFAULT = {"cpu": csr_cpu_rows, "cuda": csr_cuda_fused_rfactor}
# Any decomposition into parts (sp.decompose_format: BSR, ELL buckets, hyb, padding).
hyb_cpu = parts_cpu
hyb_cuda = parts_cuda

SCHEDULES = {
    "csr_cpu_rows": csr_cpu_rows,
    "csr_cpu_rows_balanced": csr_cpu_rows_balanced,
    "csr_cpu_rows_dot8": csr_cpu_rows_dot8,
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
    "csr_cpu_rows_split_x4_prefetch_fixed": csr_cpu_rows_split_x4_prefetch_fixed,
    "csr_cpu_nonzeros": csr_cpu_nonzeros,
    "csr_cuda_rows": csr_cuda_rows,
    "csr_cuda_fused_warp": csr_cuda_fused_warp,
    "csr_cuda_fused_rfactor": csr_cuda_fused_rfactor,
    "csr_cuda_fused_rfactor_lanes8": csr_cuda_fused_rfactor_lanes8,
    "hyb_cpu": hyb_cpu,
    "hyb_cuda": hyb_cuda,
}
