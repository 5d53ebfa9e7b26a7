"""Steps shared by the schedules of several operators."""

from __future__ import annotations

from sparsetir_py.schedule import Schedule


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
