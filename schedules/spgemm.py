"""Schedules of the co-iterating operators (`sp.ops.spgemm`, `sp.ops.add`, `sp.ops.multiply`).

Every kernel of `sparsetir_py.coiteration` has one outer block `<kernel>0` under a loop over
row chunks (`part`): chunk `part` holds rows `bounds[part]..bounds[part + 1]`, chosen by the
operator so that the chunks carry equal work (multiply-adds of the symbolic pass for SpGEMM,
merged entries for the element-wise operators), with its workspace allocated inside the chunk.
A schedule decides how chunks map to threads; its attributes tell the operator how many chunks
to make (`parts_per_thread` per CPU thread, or `rows_per_part` rows each) and where SpGEMM's
workspaces live (`workspace`: "local", dense and allocated per chunk; "hash", hash tables per
chunk; or "global", slices of arrays the operator passes).
"""

from __future__ import annotations

from sparsetir_py.schedule import Schedule


def _chunk_loop(sch: Schedule):
    return sch.get_loops(sch.get_block(f"{sch.func.name}0"))[0]


def cpu_chunks(sch: Schedule) -> None:
    """Chunks of rows in parallel over CPU threads (`prange`, static: each thread gets the same
    number of chunks, and chunks are of equal work). Each chunk's rows are written by the thread
    that runs it: no atomics. One chunk per thread: Numba hands a `prange`'s iterations out in
    equal static blocks, so more chunks would not rebalance, only allocate more workspaces."""
    sch.parallel(_chunk_loop(sch))


cpu_chunks.parts_per_thread = 1


def cpu_hash(sch: Schedule) -> None:
    """As `cpu_chunks`, with each chunk's SpGEMM workspace a hash table sized by the widest row
    (`workspace="hash"`) instead of dense arrays of `n` columns: for very wide matrices, where
    the operator also picks it by default."""
    cpu_chunks(sch)


cpu_hash.parts_per_thread = 2
cpu_hash.workspace = "hash"


def cpu_serial(sch: Schedule) -> None:
    """One chunk, one thread: the reference the parallel schedules are timed against."""


cpu_serial.parts_per_thread = 0  # 0: one chunk whatever the threads


def cuda_chunks(sch: Schedule) -> None:
    """One chunk of `rows_per_part` rows per thread block (`blockIdx.x`), its SpGEMM workspace a
    slice of global memory the operator passes (a block cannot allocate an array of a run-time
    size): the CUDA schedule, tested under Numba's simulator."""
    sch.bind(_chunk_loop(sch), "blockIdx.x")


cuda_chunks.rows_per_part = 4
cuda_chunks.workspace = "global"

SCHEDULES = {"cpu_chunks": cpu_chunks, "cpu_hash": cpu_hash, "cpu_serial": cpu_serial, "cuda_chunks": cuda_chunks}
DEFAULT = {"cpu": cpu_chunks, "cuda": cuda_chunks}
