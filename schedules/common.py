"""Steps shared by the schedules of several operators."""

from __future__ import annotations

from sparsetir_py.ir.expr import BufferLoad, Var
from sparsetir_py.ir.stmt import Block, For, SeqStmt
from sparsetir_py.ir.visit import walk
from sparsetir_py.schedule import LoopRV, Schedule


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


def parts_cpu(sch: Schedule) -> None:
    """CPU schedule of any format decomposition (`sp.decompose_format`): in every top-level loop
    nest (the init, then one nest per part), the outermost loop bound to a spatial block iterator
    runs in parallel; everything else stays as lowering made it.

    A spatial iterator's points write distinct outputs, so that loop is safe to parallelise: a
    BSR part's block rows, the rows of one layer of a hyb/ELL part (its layer loop is a reduction:
    a split row appears once per layer), the rows of the init. Parts run one after another, so
    parts that share rows (column partitions) never race."""
    func = sch.mod["main"]
    nests = func.body.stmts if isinstance(func.body, SeqStmt) else (func.body,)
    for nest in nests:
        loop = _outermost_spatial_loop(nest)
        if loop is not None:
            sch.parallel(LoopRV(loop))


def _outermost_spatial_loop(nest) -> Var | None:
    """The first loop (pre-order) whose variable a block binds to a spatial iterator."""
    loops = _spatial_loops(nest)
    return loops[0].loop_var if loops else None


def parts_cuda(sch: Schedule, threads: int = 32) -> None:
    """CUDA schedule of any format decomposition: every top-level nest (the init, then one nest
    per part) is a launch of its own, so parts that share rows never race. In each nest, the
    outermost loop bound to a spatial block iterator goes to `blockIdx.x` when its extent is known
    at launch (BSR's block rows, the init's rows), and the innermost such loop (the features) is
    split by `threads` across `threadIdx.x`, so that a warp reads consecutive columns of B.

    A hyb/ELL part's rows lie under its layer loop (a reduction, with a row count per layer read
    from the structure), so there the rows stay a serial loop of one thread block: correct, but
    one block per part; `horizontal_fusion` and tuned hyb schedules are the next step."""
    func = sch.mod["main"]
    nests = func.body.stmts if isinstance(func.body, SeqStmt) else (func.body,)
    scalars = {p for p in func.params if p.dtype != "handle"}
    for nest in nests:
        spatial = _spatial_loops(nest)
        if not spatial:
            continue
        outer, inner = spatial[0], spatial[-1]
        if inner is not outer or not _launch_computable(outer.extent, scalars):
            _, lanes = sch.split(LoopRV(inner.loop_var), [None, threads])
            sch.bind(lanes, "threadIdx.x")
        if _launch_computable(outer.extent, scalars):
            sch.bind(LoopRV(outer.loop_var), "blockIdx.x")


def _spatial_loops(nest) -> list[For]:
    """The loops (pre-order) whose variables a block binds to spatial iterators."""
    spatial = {iv.value for n in walk(nest) if isinstance(n, Block) for iv in n.iter_vars if iv.kind == "S"}
    return [n for n in walk(nest) if isinstance(n, For) and n.loop_var in spatial]


def _launch_computable(extent, scalars) -> bool:
    """An extent made of constants and scalar parameters (no buffer loads, no enclosing loop)."""
    return not any(isinstance(n, BufferLoad) or (isinstance(n, Var) and n not in scalars) for n in walk(extent))
