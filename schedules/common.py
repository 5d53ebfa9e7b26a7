"""Steps shared by the schedules of several operators."""

from __future__ import annotations

import functools

import numpy as np

from sparsetir_py import tuning
from sparsetir_py.errors import TargetError
from sparsetir_py.schedule import NestInfo, Schedule, sparse_iterations, top_level_nests


def fixed_width(schedule):
    """`schedule` for kernels compiled for one feature width: marked `fixed_width`, so that
    `sp.ops` specialises `feat` (one kernel per width) and LLVM sizes the feature loop's vectors
    and unrolling to it; named after it with `_fixed`. A plain loop of a constant 32 is unrolled
    into scalar code (slow); loops that keep several accumulators or rows of B in flight (`*_x4`)
    stay vectorised."""

    def fixed(sch: Schedule) -> None:
        schedule(sch)

    fixed.__name__ = fixed.__qualname__ = f"{schedule.__name__}_fixed"
    fixed.__doc__ = f"`{schedule.__name__}` compiled for one feature width (`fixed_width`)."
    fixed.fixed_width = True
    return fixed


def buffer_itemsize(sch: Schedule, name: str) -> int:
    """Bytes of an element of the function's buffer `name` (4 for float32)."""
    for buf in sch.func.buffer_map.values():
        if buf.name == name:
            return np.dtype(buf.dtype).itemsize
    raise KeyError(f"no buffer {name!r} in `{sch.func_name}`")


def row_bytes(sch: Schedule, features, buffer: str) -> int | None:
    """Bytes of a row of `buffer` that the feature loop `features` walks, where its width is
    compiled in (`fixed_width`); None where the width is a run-time value."""
    width = sch.loop_extent(features)
    return None if width is None else width * buffer_itemsize(sch, buffer)


#: `prefetch_gathered_rows`: a gathered row of at most `PREFETCH_WHOLE_ROW` bytes is hinted whole,
#: `PREFETCH_AHEAD` chunks of nonzeros ahead; a wider row gets its first cache line hinted,
#: `PREFETCH_AHEAD_WIDE` chunks ahead (the hardware's own prefetcher streams the rest: hinting
#: every line of a 512-byte row measured 0.80-0.95x of no hints, filling the core's miss queue).
PREFETCH_WHOLE_ROW = tuning.PREFETCH_WHOLE_ROW  # 128
PREFETCH_AHEAD = 4
PREFETCH_AHEAD_WIDE = 2


def prefetch_gathered_rows(sch: Schedule, block: str, buffer: str) -> None:
    """Prefetch (`sch.prefetch`) the rows of `buffer` (B of SpMM, Y of SDDMM: gathered through
    the column indices) that later chunks of `block`'s outer nonzero loop read, at the top of
    each chunk: loops (chunk of nonzeros, features) after `*_x4`'s split."""
    j_outer, k = sch.get_loops(sch.get_block(block))[:2]
    row = row_bytes(sch, k, buffer)
    if row is not None and row <= PREFETCH_WHOLE_ROW:
        sch.prefetch(j_outer, buffer, PREFETCH_AHEAD)
    else:
        sch.prefetch(j_outer, buffer, PREFETCH_AHEAD_WIDE, lines=1)


def split_rows_by_nonzeros(sch: Schedule, block: str, indptr: str = "J_indptr") -> None:
    """The parallel row loop of `block` split statically into one contiguous range of rows per
    thread, of equal nonzeros (`split_by`: a row weighs its nonzeros plus one), as torch's and
    MKL's CSR kernels split rows: balanced like dynamic chunks, but each thread streams one long
    range of rows (measured, SDDMM on an arrowhead matrix at width 128: 1.36 ms vs 1.50 ms
    static by rows, 1.59 ms dynamic chunks of 64 rows), and the kernel stays cacheable
    (`chunk_size` kernels are compiled again in every process)."""
    (i,) = sch.get_loops(sch.get_block(block))
    sch.annotate(i, "split_by", indptr)


def fuse_rows_and_nonzeros(sch: Schedule, iteration: str) -> None:
    """Stage I: fuse the row iterator and the row's nonzeros (the first two iterators of
    `iteration`) into one iterator over the nonzeros."""
    it = sch.get_sparse_iteration(iteration)
    i, j, *_ = sch.get_sp_iters(it)
    sch.sparse_fuse(it, [i, j])


def bind_row_search(sch: Schedule, block: str, threads: int = 256) -> None:
    """Bind the loop of a fused iteration's row search (block `<iteration>_fuse_search`: the row
    of every nonzero, by binary search over indptr) across thread blocks of `threads` threads.
    Left unbound, every CUDA thread would run the whole O(nnz log m) search. It is a top-level
    nest of its own, so it gets its own launch, finished before the nests that read its rows."""
    (p,) = sch.get_loops(sch.get_block(block))
    outer, inner = sch.split(p, [None, threads])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")


@functools.cache
def parts(target: str, shared_rows: bool = True, threads: int = 32, rows_per_block: int = 4):
    """The schedule of any format decomposition (`sp.decompose_format`: ELL buckets, hyb, BSR,
    padding) for `target`, as a schedule function with its Stage I step (`.stage1`).

    `shared_rows` says whether two parts (or two layers of one part) may write one output row:
    column partitions, or a row longer than the largest bucket split over layers. The default
    (True) is always correct; `sp.ops` passes False when the conversion shows that no row is
    shared, which lets parts run together without atomic updates.

    Stage I (`fuse_layers_and_rows`): a part's layers and rows become one loop over its rows of
    all layers (extent `nrows`, known at launch), which threads can split - on the CPU only where
    rows are not shared (else its layers stay a serial loop around parallel rows) or where the
    part's output is its own (SDDMM). Stage II, per top-level nest:

    - CUDA, a part with fused rows: rows to `threadIdx.y` (`rows_per_block` per thread block) and
      `blockIdx.x`, features split by `threads` across `threadIdx.x` (a warp reads consecutive
      columns of B: coalesced), the row's slots serial; its update atomic when rows are shared,
      else annotated `disjoint_writes` (SparseTIR's hyb schedule).
    - CPU, a part with fused rows: the rows loop parallel (annotated `disjoint_writes` for SpMM).
    - A row search (`<part>_fuse_search`): CUDA one row per thread, 256 per block; CPU parallel.
    - Any other nest (the output's init, a BSR part, a part whose layers stay serial): the
      outermost loop bound to a spatial block iterator goes to `blockIdx.x` (CUDA, when its extent
      is known at launch) or runs in parallel (CPU); on CUDA the innermost such loop (features) is
      split by `threads` across `threadIdx.x`.

    `horizontal_fusion` (run by `sp.compile`) then gives: the init and the searches in one
    launch / parallel loop, the parts in another, whatever the number of parts.
    """
    if target not in ("cpu", "cuda"):
        raise TargetError(f"unknown target {target!r}: expected 'cpu' or 'cuda'")
    fuse_reductions = target == "cuda" or not shared_rows

    def stage1(sch: Schedule) -> None:
        fuse_layers_and_rows(sch, reductions=fuse_reductions)

    def schedule(sch: Schedule) -> None:
        for nest in top_level_nests(sch.func):
            if len(nest.blocks) == 1 and nest.blocks[0].endswith("_fuse_search"):
                if target == "cuda":
                    bind_row_search(sch, nest.blocks[0])
                else:
                    sch.parallel(sch.get_loops(sch.get_block(nest.blocks[0]))[0])
                continue
            if nest.fused_rows is not None:
                _schedule_fused_part(sch, nest, target, shared_rows, threads, rows_per_block)
                continue
            _schedule_nest(sch, nest, target, threads)

    schedule.stage1 = stage1
    schedule.__name__ = schedule.__qualname__ = f"parts_{target}" + ("" if shared_rows else "_disjoint")
    schedule.__doc__ = parts.__doc__
    return schedule


def fuse_layers_and_rows(sch: Schedule, reductions: bool = True) -> None:
    """Stage I: in every part (for SpMM a sparse iteration without init) whose first two iterators walk a
    dense root and its child (an ELL/hyb part's layers and rows), fuse the two into one iterator
    over the part's rows of all layers; lowering adds a search for each row's layer (block
    `<part>_fuse_search`). Where the layers are a reduction (SpMM: a split row appears once per
    layer) only with `reductions`."""
    for it in sparse_iterations(sch.func):
        # "RS": SpMM over an ELL part (layers reduce, rows are outputs); "SS": SDDMM, whose parts
        # write their own outputs (the fused loop walks all of a part's slots or blocks), with or
        # without init. "SR" (a BSR part's block rows and their blocks in SpMM): the root is the
        # unit already.
        pair = it.kinds[:2]
        if pair not in ("RS", "SS") or (pair == "RS" and (it.has_init or not reductions)):
            continue
        if not it.over_root_and_child:
            continue
        rv = sch.get_sparse_iteration(it.name)
        o, i, *_ = sch.get_sp_iters(rv)
        sch.sparse_fuse(rv, [o, i])


def _schedule_fused_part(sch: Schedule, nest: NestInfo, target, shared_rows, threads, rows_per_block) -> None:
    block = sch.get_block(nest.blocks[0])
    if nest.reduces_rows:
        sch.annotate(block, "atomic" if shared_rows else "disjoint_writes", True)
    loops = sch.get_loops(block)
    if target == "cpu":
        sch.parallel(loops[0])
        return
    outer, inner = sch.split(loops[0], [None, rows_per_block])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.y")
    if nest.spatial[-1] != nest.fused_rows:
        _, lanes = sch.split(nest.spatial[-1], [None, threads])
        sch.bind(lanes, "threadIdx.x")


def _schedule_nest(sch: Schedule, nest: NestInfo, target, threads) -> None:
    if not nest.spatial:
        return
    outer, inner = nest.spatial[0], nest.spatial[-1]
    if target == "cpu":
        sch.parallel(outer)
        return
    if inner != outer or not nest.launch_known:
        _, lanes = sch.split(inner, [None, threads])
        sch.bind(lanes, "threadIdx.x")
    if nest.launch_known:
        sch.bind(outer, "blockIdx.x")


parts_cpu = parts("cpu")
parts_cuda = parts("cuda")
