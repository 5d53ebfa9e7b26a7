"""Steps shared by the schedules of several operators."""

from __future__ import annotations

import functools

from sparsetir_py.ir.axis import DENSE_FIXED, Axis
from sparsetir_py.ir.expr import BufferLoad, Var
from sparsetir_py.ir.stmt import Block, For, SeqStmt, SparseIteration
from sparsetir_py.ir.visit import walk
from sparsetir_py.schedule import LoopRV, Schedule


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
        raise ValueError(f"unknown target {target!r}: expected 'cpu' or 'cuda'")
    fuse_reductions = target == "cuda" or not shared_rows

    def stage1(sch: Schedule) -> None:
        fuse_layers_and_rows(sch, reductions=fuse_reductions)

    def schedule(sch: Schedule) -> None:
        func = sch.mod["main"]
        nests = func.body.stmts if isinstance(func.body, SeqStmt) else (func.body,)
        scalars = {p for p in func.params if p.dtype != "handle"}
        for nest in nests:
            blocks = [n for n in walk(nest) if isinstance(n, Block)]
            if len(blocks) == 1 and blocks[0].name.endswith("_fuse_search"):
                if target == "cuda":
                    bind_row_search(sch, blocks[0].name)
                else:
                    sch.parallel(sch.get_loops(sch.get_block(blocks[0].name))[0])
                continue
            rows = _fused_rows_loop(nest, scalars)
            if rows is not None and len(blocks) == 1:
                _schedule_fused_part(sch, blocks[0].name, rows, target, shared_rows, threads, rows_per_block)
                continue
            _schedule_nest(sch, nest, scalars, target, threads)

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
    func = sch.mod["main"]
    for it in [n for n in walk(func.body) if isinstance(n, SparseIteration)]:
        if len(it.axes) < 2 or (it.init is not None and it.kinds[:2] != "SS"):
            continue
        # "RS": SpMM over an ELL part (layers reduce, rows are outputs); "SS": SDDMM, whose parts
        # write their own outputs (the fused loop walks all of a part's slots or blocks). "SR" (a
        # BSR part's block rows and their blocks in SpMM): the root is the unit already.
        if it.kinds[:2] not in ("RS", "SS") or (it.kinds[:2] == "RS" and not reductions):
            continue
        first, second = it.axes[0], it.axes[1]
        if not (isinstance(first, Axis) and isinstance(second, Axis)):
            continue
        if first.kind != DENSE_FIXED or first.parent is not None or second.parent is not first:
            continue
        rv = sch.get_sparse_iteration(it.name)
        o, i, *_ = sch.get_sp_iters(rv)
        sch.sparse_fuse(rv, [o, i])


def _schedule_fused_part(sch, name, rows, target, shared_rows, threads, rows_per_block) -> None:
    block = sch.get_block(name)
    node = next(n for n in walk(rows) if isinstance(n, Block))
    reduce_rows = any(iv.kind == "R" and iv.value is rows.loop_var for iv in node.iter_vars)
    if reduce_rows:
        sch.annotate(block, "atomic" if shared_rows else "disjoint_writes", True)
    loops = sch.get_loops(block)
    if target == "cpu":
        sch.parallel(loops[0])
        return
    outer, inner = sch.split(loops[0], [None, rows_per_block])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.y")
    spatial = _spatial_loops(rows)
    if spatial and spatial[-1] is not rows:
        _, lanes = sch.split(LoopRV(spatial[-1].loop_var), [None, threads])
        sch.bind(lanes, "threadIdx.x")


def _schedule_nest(sch, nest, scalars, target, threads) -> None:
    spatial = _spatial_loops(nest)
    if not spatial:
        return
    outer, inner = spatial[0], spatial[-1]
    if target == "cpu":
        sch.parallel(LoopRV(outer.loop_var))
        return
    if inner is not outer or not _launch_computable(outer.extent, scalars):
        _, lanes = sch.split(LoopRV(inner.loop_var), [None, threads])
        sch.bind(lanes, "threadIdx.x")
    if _launch_computable(outer.extent, scalars):
        sch.bind(LoopRV(outer.loop_var), "blockIdx.x")


parts_cpu = parts("cpu")
parts_cuda = parts("cuda")


def _fused_rows_loop(nest, scalars) -> For | None:
    """The nest's outermost loop when it walks a part's fused layers and rows (lowering names the
    loop after both iterators, and its extent, the part's row count, is a scalar)."""
    if not isinstance(nest, For) or not _launch_computable(nest.extent, scalars):
        return None
    blocks = [n for n in walk(nest) if isinstance(n, Block)]
    if len(blocks) != 1 or blocks[0].init is not None:
        return None
    bound = [iv for iv in blocks[0].iter_vars if iv.value is nest.loop_var]
    return nest if bound and _spatial_loops(nest) else None


def _spatial_loops(nest) -> list[For]:
    """The loops (pre-order) whose variables a block binds to spatial iterators."""
    spatial = {iv.value for n in walk(nest) if isinstance(n, Block) for iv in n.iter_vars if iv.kind == "S"}
    return [n for n in walk(nest) if isinstance(n, For) and n.loop_var in spatial]


def _launch_computable(extent, scalars) -> bool:
    """An extent made of constants and scalar parameters (no buffer loads, no enclosing loop)."""
    return not any(isinstance(n, BufferLoad) or (isinstance(n, Var) and n not in scalars) for n in walk(extent))
