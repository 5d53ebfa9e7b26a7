"""Scale-out on Dask distributed: `sp.ops.spmm` / `sp.ops.sddmm` over row blocks of A on a cluster.

    from dask.distributed import Client
    client = Client("tcp://scheduler:8786")           # or Client(LocalCluster(n_workers=4))
    C = sp.distributed.spmm(A, B, client)             # a numpy array, as sp.ops.spmm(A, B)
    S = sp.distributed.sddmm(A, X, Y, client)         # a scipy CSR matrix, as sp.ops.sddmm(A, X, Y)

    dA = sp.distributed.DistributedMatrix(A, client)  # A is split and scattered once ...
    for layer in layers:                              # ... and reused: only B and C cross the network
        H = dA.spmm(H @ W)

Needs `pip install "sparsetir_py[distributed]"` (dask and distributed); `sp.distributed` is
imported on first use, so `import sparsetir_py` never loads Dask.

How a call runs:
- **Partition.** A is cut into row blocks of balanced nonzeros (not of balanced rows: on a
  power-law graph a block of hub rows holds most of the work); by default one block per worker.
  Optionally each row block is cut again into `col_blocks` column blocks (A's columns, which are
  B's rows): the pieces then form a grid, and B is sent in row slabs instead of whole.
- **Placement.** Each piece is scattered once, straight from the client to the worker that
  keeps it (round robin; on `replicas` workers when asked), and stays there until the
  `DistributedMatrix` is closed. A call sends only the dense operands: B (or Y) to every worker
  holding a piece (a broadcast; one slab per column block), X's rows to the holders of each row
  block.
- **Compute.** Each task calls `sp.ops.spmm` / `sp.ops.sddmm` on its piece inside the worker: the
  project's own kernel, compiled once per worker process (the in-process kernel cache) and loaded
  from the on-disk kernel cache when the worker's machine compiled it before; the piece's
  structure is checked on its first call only, as `sp.ops` does. With column blocks, one task per
  row block adds the partial products (SpMM, in column order, so the result does not depend on
  which task finished first) or joins the pieces' values (SDDMM).
- **Result.** Row blocks are gathered in row order into a numpy array (SpMM) or a CSR matrix with
  A's canonical structure (SDDMM), or, with `gather=False`, left on the workers as a `dask.array`
  whose chunks are the row blocks (CSR chunks for SDDMM).
- **Operands on the cluster.** B, X and Y may be `dask.array`s (e.g. the previous layer's
  `gather=False` output): they are rechunked to the blocks and computed on the cluster, so their
  rows move from worker to worker and never through the client.

Inputs are checked on the client with `sp.ops`' own checks, before anything is scattered or
submitted: the same `sp.InputError`s. A worker that dies during a call is survived: Dask runs its
tasks again on another worker; a piece that lived only on the dead worker (scattered data has
no lineage to recompute it from) is scattered again from the client's copy of A and the row
blocks that needed it are resubmitted. The result is the same bit for bit. A call that cannot
finish (no workers, or a wait past `timeout`) raises `sp.errors.DistributedError`.

The client keeps a reference to A's canonical CSR form for that re-scatter: do not change A's
arrays in place while a `DistributedMatrix` of it is open.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import numbers
import time
import uuid
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse

from . import ops
from .errors import DistributedError, InputError

try:
    import dask.array as da
    import distributed
    from distributed.client import FutureCancelledError, FuturesCancelledError
except ImportError as e:  # pragma: no cover - the extra is part of `[test]`
    raise ImportError(f"sp.distributed needs Dask distributed: pip install 'sparsetir_py[distributed]' ({e})") from None

__all__ = ["DEFAULT_TIMEOUT", "DistributedError", "DistributedMatrix", "col_bounds", "row_bounds", "sddmm", "spmm"]

#: Seconds a call may wait for workers, scatters and results before `DistributedError`.
DEFAULT_TIMEOUT = 600.0
#: Rounds of re-scatter and resubmission a call allows after workers died (each round handles
#: every loss seen so far; Dask's own retries of a task whose inputs survived are not counted).
MAX_RECOVERIES = 3


# -------------------------------------------------------------------- partitions
def row_bounds(indptr: np.ndarray, blocks: int) -> np.ndarray:
    """Row boundaries `[0, r1, ..., m]` of at most `blocks` row blocks with balanced nonzeros.

    Boundary k is the row where the running count of nonzeros comes closest to `k * nnz /
    blocks`; blocks that would hold no rows are dropped (a matrix with no rows has no block, one
    with no nonzeros has one). A single row is never split, so a row with more than `nnz /
    blocks` nonzeros makes its block heavier than the rest.

    >>> row_bounds(np.array([0, 5, 5, 6, 7, 8, 9, 10]), 2).tolist()   # row 0 holds half the nonzeros
    [0, 1, 7]
    """
    m = len(indptr) - 1
    if m <= 0:
        return np.zeros(1, np.int64)
    nnz = int(indptr[-1])
    targets = nnz * np.arange(1, blocks, dtype=np.float64) / blocks
    right = np.searchsorted(indptr, targets, side="left").clip(1, m)
    # The nearer of the two rows around each target.
    left = right - 1
    take_left = (targets - indptr[left]) < (indptr[right] - targets)
    cuts = np.where(take_left, left, right)
    return np.unique(np.concatenate([[0], cuts, [m]]).astype(np.int64))


def col_bounds(n: int, blocks: int) -> np.ndarray:
    """Column boundaries of at most `blocks` column blocks of equal width (each holds an equal
    slab of B's rows, which is what they are for); one block when A has no columns."""
    if n == 0:
        return np.zeros(2, np.int64)
    blocks = max(1, min(blocks, n))
    return (np.arange(blocks + 1, dtype=np.int64) * n) // blocks


def _bounds(spec, extent: int, name: str, balanced: Callable[[int], np.ndarray]) -> np.ndarray:
    """Boundaries from a block count (`balanced(count)`) or an explicit non-decreasing sequence
    `[0, ..., extent]` (repeated boundaries, blocks of no rows or columns, are dropped)."""
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool | np.bool_):
        if spec < 1:
            raise InputError(f"`{name}` must be a positive number of blocks, got {spec}")
        return balanced(int(spec))
    try:
        bounds = np.asarray(spec)
    except (TypeError, ValueError) as e:
        raise InputError(f"`{name}` must be a block count or a sequence of boundaries: {e}") from None
    if bounds.ndim != 1 or bounds.dtype.kind not in "iu" or len(bounds) < 2:
        raise InputError(
            f"`{name}` must be a block count or a sequence of integer boundaries [0, ..., {extent}], got {spec!r}"
        )
    if bounds[0] != 0 or bounds[-1] != extent:
        raise InputError(f"`{name}` must start at 0 and end at {extent}, got {bounds[0]} .. {bounds[-1]}")
    if np.any(np.diff(bounds) < 0):
        raise InputError(f"`{name}` must be non-decreasing, got {bounds.tolist()}")
    return np.unique(bounds.astype(np.int64))


def _piece(csr: scipy.sparse.csr_matrix, r0: int, r1: int, c0: int, c1: int, whole_width: bool):
    """Rows [r0, r1) and columns [c0, c1) of a canonical CSR matrix, columns renumbered from 0,
    with A's index dtype kept (scipy's constructor would narrow int64 indices)."""
    lo, hi = int(csr.indptr[r0]), int(csr.indptr[r1])
    indptr = csr.indptr[r0 : r1 + 1] - csr.indptr[r0]
    indices, data = csr.indices[lo:hi], csr.data[lo:hi]
    if not whole_width:
        keep = (indices >= c0) & (indices < c1)
        rows = np.repeat(np.arange(r1 - r0), np.diff(indptr))
        counts = np.bincount(rows[keep], minlength=r1 - r0)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(csr.indices.dtype)
        indices, data = indices[keep] - csr.indices.dtype.type(c0), data[keep]
    piece = scipy.sparse.csr_matrix((r1 - r0, c1 - c0), dtype=csr.dtype)
    piece.data, piece.indices, piece.indptr = np.array(data), np.array(indices), np.array(indptr, csr.indices.dtype)
    return piece


# -------------------------------------------------------------------- what runs on the workers
_SCHEDULES: dict[str, Callable] = {}


def _worker_schedule(schedule):
    """A callable schedule arrives as `(token, fn)`: every task unpickles a new function object,
    and `sp.ops` caches kernels per schedule object, so the first object of each token is kept and
    reused (one compile per worker process, not one per task)."""
    if isinstance(schedule, tuple):
        token, fn = schedule
        return _SCHEDULES.setdefault(token, fn)
    return schedule


def _spmm_task(piece, B: np.ndarray, target: str, schedule) -> np.ndarray:
    return ops.spmm(piece, B, format="csr", target=target, schedule=_worker_schedule(schedule))


def _sddmm_task(piece, X: np.ndarray, Y: np.ndarray, target: str, schedule, values_only: bool):
    S = ops.sddmm(piece, X, Y, format="csr", target=target, schedule=_worker_schedule(schedule))
    return S.data if values_only else S


def _sum_partials(*partials: np.ndarray) -> np.ndarray:
    """Partial products of one row block added in column-block order (a fixed order: the same
    bits whichever task finished first)."""
    out = partials[0].copy()
    for p in partials[1:]:
        out += p
    return out


def _join_pieces(values_only: bool, *pieces):
    """SDDMM pieces of one row block side by side: A's row block, in its canonical order."""
    S = scipy.sparse.hstack(pieces, format="csr", dtype=pieces[0].dtype)
    return S.data if values_only else S


# -------------------------------------------------------------------- client side
def _check_client(client) -> distributed.Client:
    if not isinstance(client, distributed.Client):
        raise InputError(f"`client` must be a dask.distributed.Client, got {type(client).__name__}")
    if client.status != "running":
        raise InputError(f"`client` is not connected (status {client.status!r})")
    return client


def _check_timeout(timeout) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise InputError(f"`timeout` must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _schedule_ref(op: str, target: str, schedule):
    """Check the target and schedule as `sp.ops` does; a callable travels with a token of its bytes."""
    ops._resolve_schedule(op, target, schedule)
    if schedule is None or isinstance(schedule, str):
        return schedule
    import cloudpickle

    try:
        token = hashlib.sha256(cloudpickle.dumps(schedule)).hexdigest()
    except Exception as e:
        raise InputError(f"`schedule` cannot be sent to the workers (pickling failed): {e}") from None
    return (token, schedule)


def _remaining(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DistributedError(f"{what}: timed out")
    return left


def _live_workers(client: distributed.Client, deadline: float) -> list[str]:
    """Addresses of the workers alive now (asked of the scheduler), waiting for one if none is."""
    workers = sorted(client.nthreads())
    if workers:
        return workers
    try:
        client.wait_for_workers(1, timeout=_remaining(deadline, "waiting for a worker"))
    except TimeoutError:
        raise DistributedError("the cluster has no workers (none joined before the timeout)") from None
    return sorted(client.nthreads())


class DistributedMatrix:
    """A sparse matrix split into pieces kept on a Dask cluster's workers, for repeated calls.

    `A` is any matrix `sp.ops` accepts (checked the same way). `row_blocks`: a number of row
    blocks of balanced nonzeros (default: one piece per worker, i.e. workers // column blocks) or
    explicit row boundaries `[0, ..., m]`;
    `col_blocks`: a number of equal column blocks or column boundaries `[0, ..., n]` (default 1:
    B is broadcast whole); `replicas`: on how many workers each piece is kept (capped at the
    number of workers; 2 lets Dask retry a dead worker's tasks with no re-scatter); `timeout`:
    seconds any wait of the constructor or of a call may take.

    Attributes: `shape`, `dtype`, `index_dtype`, `nnz`, `row_bounds`, `col_bounds`, `nbytes` (bytes
    of A's pieces, each sent once per replica), `placement` (the workers each piece was scattered
    to). `close()` (or leaving a `with` block) frees the pieces on the workers.
    """

    def __init__(
        self,
        A,
        client: distributed.Client,
        row_blocks: int | Sequence[int] | None = None,
        col_blocks: int | Sequence[int] = 1,
        replicas: int = 1,
        timeout: float | None = None,
    ):
        csr = ops._as_csr(A)
        self._scatter_all(csr, *_partition(csr, client, row_blocks, col_blocks, replicas, timeout))

    @classmethod
    def _from_checked(cls, csr, client, rows, cols, replicas: int, timeout: float) -> DistributedMatrix:
        """A matrix from arguments `_partition` has checked (the one-shot functions check their
        dense operands in between, so that nothing is scattered before every check passed)."""
        self = cls.__new__(cls)
        self._scatter_all(csr, client, rows, cols, replicas, timeout)
        return self

    def _scatter_all(self, csr, client, rows, cols, replicas: int, timeout: float) -> None:
        self.client = client
        self.shape = csr.shape
        self.dtype = csr.dtype
        self.index_dtype = csr.indices.dtype
        self.nnz = csr.nnz
        self.row_bounds, self.col_bounds = rows, cols
        self.replicas = replicas
        self.timeout = timeout
        self._csr = csr  # the source of a re-scatter after a worker died
        self._pieces: list[distributed.Future] = []
        self.placement: list[tuple[str, ...]] = []
        self.nbytes = 0
        deadline = time.monotonic() + timeout
        workers = _live_workers(client, deadline)
        copies = min(replicas, len(workers))
        # Piece p (row-major over the grid) goes to worker p mod W: row blocks spread over the
        # workers, and with column blocks a column's pieces share workers, so each slab of B goes
        # to few of them.
        for p in range(self.num_pieces):
            targets = tuple(workers[(p + k) % len(workers)] for k in range(copies))
            self._pieces.append(self._scatter_piece(p, targets, deadline))
            self.placement.append(targets)

    # ---- layout
    @property
    def num_row_blocks(self) -> int:
        return len(self.row_bounds) - 1

    @property
    def num_col_blocks(self) -> int:
        return len(self.col_bounds) - 1

    @property
    def num_pieces(self) -> int:
        return self.num_row_blocks * self.num_col_blocks

    def _piece_index(self, r: int, c: int) -> int:
        return r * self.num_col_blocks + c

    def __repr__(self) -> str:
        state = "closed" if self._pieces is None else f"{self.num_pieces} pieces"
        return (
            f"<DistributedMatrix shape={self.shape} nnz={self.nnz} {self.num_row_blocks}x{self.num_col_blocks} "
            f"blocks, {state}>"
        )

    def __enter__(self) -> DistributedMatrix:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Free the pieces on the workers; later calls raise `InputError`."""
        if self._pieces is not None:
            for f in self._pieces:
                f.release()
        self._pieces = None
        self._csr = None

    # ---- operators
    def spmm(self, B, target: str = "cpu", schedule=None, *, gather: bool = True, timeout: float | None = None):
        """`A @ B` as `sp.ops.spmm(A, B, target=..., schedule=...)` computes it, block by block on
        the workers: a numpy array, or with `gather=False` a `dask.array` of row-block chunks
        kept on the workers (already computed). B is a numpy array (anything `sp.ops` takes) or a
        `dask.array`, whose slabs are computed on the cluster and never pass through the client."""
        self._check_open()
        call = _spmm_call(self.shape, self.dtype, self.col_bounds, B, target, schedule)
        return self._run(call, gather, self.timeout if timeout is None else _check_timeout(timeout))

    def sddmm(self, X, Y, target: str = "cpu", schedule=None, *, gather: bool = True, timeout: float | None = None):
        """`sp.ops.sddmm(A, X, Y, ...)` block by block on the workers: a CSR matrix with A's
        canonical structure, or with `gather=False` a `dask.array` of CSR row-block chunks."""
        self._check_open()
        call = _sddmm_call(self.shape, self.dtype, self.row_bounds, self.col_bounds, X, Y, target, schedule)
        return self._run(call, gather, self.timeout if timeout is None else _check_timeout(timeout))

    def _check_open(self) -> None:
        if self._pieces is None:
            raise InputError("this DistributedMatrix is closed")

    # ---- running a call
    def _scatter_piece(self, p: int, workers: tuple[str, ...], deadline: float) -> distributed.Future:
        r, c = divmod(p, self.num_col_blocks)
        (r0, r1), (c0, c1) = self.row_bounds[r : r + 2], self.col_bounds[c : c + 2]
        piece = _piece(self._csr, int(r0), int(r1), int(c0), int(c1), self.num_col_blocks == 1)
        self.nbytes += len(workers) * (piece.data.nbytes + piece.indices.nbytes + piece.indptr.nbytes)
        return _scatter(self.client, piece, workers, deadline)

    def _holders(self, deadline: float) -> list[tuple[str, ...]]:
        """The workers holding each piece now; a piece no worker holds (its workers died) is
        scattered again from the client's copy of A, to the live workers holding the fewest."""
        holders = _who_has(self.client, self._pieces, deadline)
        lost = [p for p, h in enumerate(holders) if not h]
        if not lost:
            return holders
        workers = _live_workers(self.client, deadline)
        load = dict.fromkeys(workers, 0)
        for h in holders:
            for w in h:
                if w in load:
                    load[w] += 1
        for p in lost:
            targets = tuple(sorted(workers, key=lambda w: (load[w], w))[: min(self.replicas, len(workers))])
            for w in targets:
                load[w] += 1
            self._pieces[p].release()
            self._pieces[p] = self._scatter_piece(p, targets, deadline)
            self.placement[p] = targets
            holders[p] = targets
        return holders

    def _run(self, call: _Call, gather: bool, timeout: float):
        """Submit every row block, wait, fetch; a row block whose task was cancelled because a
        worker died (taking the only copy of an input with it) is resubmitted once its inputs are
        scattered again. Dask itself retries a task whose worker died when its inputs survived."""
        deadline = time.monotonic() + timeout
        where = f"sp.distributed.{call.op}"
        finals: dict[int, distributed.Future] = {}
        done: set[int] = set()
        pending = set(range(self.num_row_blocks))
        call.start(self, gather)
        recoveries = 0
        while len(done) < self.num_row_blocks:
            if pending:
                try:
                    holders = self._holders(deadline)
                    call.send(self, holders, pending, deadline)
                except (OSError, KeyError) as e:
                    # A worker died while data was sent to it, before the scheduler removed it:
                    # ask again who holds what once it has.
                    recoveries += 1
                    if recoveries > MAX_RECOVERIES:
                        raise DistributedError(f"{where}: could not send the operands: {e}") from e
                    time.sleep(0.2)
                    call.forget_lost(deadline)
                    continue
                for r in sorted(pending):
                    finals[r] = call.submit(self, r)
                pending = set()
            waiting = [f for r, f in finals.items() if r not in done]
            try:
                distributed.wait(waiting, timeout=_remaining(deadline, where))
            except (FuturesCancelledError, FutureCancelledError):
                pass  # classified below
            except TimeoutError:
                raise DistributedError(f"{where}: the results were not ready within {timeout} s") from None
            for r, f in finals.items():
                if r in done:
                    continue
                if f.status == "error":
                    _raise_task_error(where, f, deadline)
                if f.status in ("cancelled", "lost"):
                    pending.add(r)
                elif f.status == "finished" and call.store(self, r, f, deadline):
                    done.add(r)
                elif f.status == "finished":
                    pending.add(r)  # cancelled while its result was fetched
            if pending:
                recoveries += 1
                if recoveries > MAX_RECOVERIES:
                    raise DistributedError(f"{where}: workers kept dying; gave up after {MAX_RECOVERIES} recoveries")
                call.forget_lost(deadline)
        return call.finish(self, [finals[r] for r in range(self.num_row_blocks)])


def _who_has(client, futures: list[distributed.Future], deadline: float) -> list[tuple[str, ...]]:
    """The workers holding each future's data (empty: lost, cancelled, or not computed)."""
    for _ in range(3):
        alive = [f for f in futures if f.status == "finished"]
        try:
            who = client.who_has(alive) if alive else {}
        except (FuturesCancelledError, FutureCancelledError):
            continue  # one was cancelled between the status check and the question: ask again
        return [tuple(who.get(f.key, ())) if f.status == "finished" else () for f in futures]
    return [() for _ in futures]


def _scatter(client, data, workers: Sequence[str], deadline: float) -> distributed.Future:
    try:
        return client.scatter(
            data, workers=list(workers), broadcast=True, hash=False, timeout=_remaining(deadline, "scatter")
        )
    except TimeoutError:
        raise DistributedError(f"scattering to {', '.join(workers)} timed out") from None


def _put(client, value, workers: Sequence[str], deadline: float) -> distributed.Future:
    """A numpy operand scattered to `workers`; a block of a dask.array computed on the cluster
    (Dask moves it to the tasks that read it, and recomputes it if a worker dies)."""
    if isinstance(value, np.ndarray):
        return _scatter(client, value, workers, deadline)
    return client.compute(value)


def _raise_task_error(where: str, future: distributed.Future, deadline: float) -> None:
    """Raise a failed task's exception here (an `InputError` stays one); a task that killed
    every worker it ran on becomes a `DistributedError`."""
    try:
        future.result(timeout=_remaining(deadline, where))
    except distributed.KilledWorker as e:
        raise DistributedError(f"{where}: a task killed every worker it ran on: {e}") from e
    except (FutureCancelledError, FuturesCancelledError):
        pass  # cancelled in the meantime: resubmitted by the caller


class _Call:
    """One call's dense operands (row slabs per column block; X's rows per row block for SDDMM),
    the futures they were scattered to, how tasks are built from them, and the result."""

    def __init__(self, op: str, dtype: np.dtype, width: int, slabs: list, rows: list | None, target: str, schedule):
        self.op, self.dtype, self.width = op, dtype, width
        self.slabs, self.rows = slabs, rows
        self.target, self.schedule = target, schedule
        self.slab_futures: dict[int, distributed.Future] = {}
        self.row_futures: dict[int, distributed.Future] = {}
        self.token = uuid.uuid4().hex[:12]
        self.attempt = itertools.count()
        self.gather = True
        self.out = None

    def start(self, dm: DistributedMatrix, gather: bool) -> None:
        self.gather = gather
        if not gather:
            return
        m, _ = dm.shape
        nnz = dm.nnz
        self.out = np.empty((m, self.width), self.dtype) if self.op == "spmm" else np.empty(nnz, self.dtype)

    def forget_lost(self, deadline: float) -> None:
        """Drop operand futures that the cluster lost, so that `send` scatters them again."""
        for futures in (self.slab_futures, self.row_futures):
            keys = list(futures)
            if not keys:
                continue
            client = futures[keys[0]].client
            holders = _who_has(client, [futures[k] for k in keys], deadline)
            for k, h in zip(keys, holders):
                if not h:
                    futures.pop(k).release()

    def send(self, dm: DistributedMatrix, holders, rows: set[int], deadline: float) -> None:
        """Scatter the operands the row blocks `rows` need and the cluster does not hold, each to
        the workers holding the pieces that read it."""
        C = dm.num_col_blocks
        for c in range(C):
            if c in self.slab_futures:
                continue
            workers = sorted({w for r in range(dm.num_row_blocks) for w in holders[dm._piece_index(r, c)]})
            self.slab_futures[c] = _put(dm.client, self.slabs[c], workers, deadline)
        if self.rows is None:
            return
        for r in rows:
            if r in self.row_futures:
                continue
            workers = sorted({w for c in range(C) for w in holders[dm._piece_index(r, c)]})
            self.row_futures[r] = _put(dm.client, self.rows[r], workers, deadline)

    def submit(self, dm: DistributedMatrix, r: int) -> distributed.Future:
        """The tasks of row block `r`; returns the future of its result."""
        client, C = dm.client, dm.num_col_blocks
        tag = f"{self.token}-{next(self.attempt)}"
        values_only = self.gather
        parts = []
        for c in range(C):
            piece = dm._pieces[dm._piece_index(r, c)]
            key = f"sparsetir-{self.op}-{tag}-{r}-{c}"
            if self.op == "spmm":
                args = (_spmm_task, piece, self.slab_futures[c], self.target, self.schedule)
            else:
                args = (_sddmm_task, piece, self.row_futures[r], self.slab_futures[c], self.target, self.schedule)
                args += (values_only and C == 1,)
            parts.append(client.submit(*args, key=key, pure=False))
        if C == 1:
            return parts[0]
        key = f"sparsetir-{self.op}-{tag}-{r}-sum"
        if self.op == "spmm":
            return client.submit(_sum_partials, *parts, key=key, pure=False)
        return client.submit(_join_pieces, values_only, *parts, key=key, pure=False)

    def store(self, dm: DistributedMatrix, r: int, future: distributed.Future, deadline: float) -> bool:
        """Fetch row block `r` into the result (nothing to fetch with `gather=False`); False when
        the future was cancelled meanwhile."""
        if not self.gather:
            return True
        try:
            value = future.result(timeout=_remaining(deadline, f"sp.distributed.{self.op}: gathering"))
        except (FutureCancelledError, FuturesCancelledError):
            return False
        except TimeoutError:
            raise DistributedError(f"sp.distributed.{self.op}: gathering the results timed out") from None
        r0, r1 = dm.row_bounds[r : r + 2]
        if self.op == "spmm":
            self.out[r0:r1] = value
        else:
            self.out[dm._csr.indptr[r0] : dm._csr.indptr[r1]] = value
        return True

    def finish(self, dm: DistributedMatrix, blocks: list[distributed.Future]):
        """The gathered result, or a dask.array over the row blocks' futures (chunks stay on the
        workers)."""
        m, n = dm.shape
        if self.gather and self.op == "spmm":
            return self.out
        if self.gather:
            # As sp.ops.sddmm: the result owns copies of A's structure and keeps A's class.
            csr = dm._csr
            with_data = getattr(csr, "_with_data", None)
            if with_data is None:  # pragma: no cover - scipy always has it
                return scipy.sparse.csr_matrix((self.out, csr.indices.copy(), csr.indptr.copy()), shape=csr.shape)
            return with_data(self.out, copy=True)
        width = self.width if self.op == "spmm" else n
        if not blocks:
            return da.zeros((m, width), dtype=self.dtype)
        meta = None if self.op == "spmm" else scipy.sparse.csr_matrix((0, 0), dtype=self.dtype)
        chunks = [
            da.from_delayed(f, shape=(int(r1 - r0), width), dtype=self.dtype, meta=meta)
            for (r0, r1), f in zip(itertools.pairwise(dm.row_bounds), blocks)
        ]
        return da.concatenate(chunks, axis=0) if len(chunks) > 1 else chunks[0]


def _operand(X, name: str):
    """A dense operand: a dask.array (checked by its metadata; its values stay on the cluster) or
    anything `sp.ops` takes (checked by `sp.ops`)."""
    if not isinstance(X, da.Array):
        return ops._operand(X, name)
    ops._check_kind(X.dtype, f"`{name}`")
    if X.ndim != 2:
        raise InputError(f"`{name}` must be a 2-D array, got shape {X.shape}")
    if any(math.isnan(s) for s in X.shape):
        raise InputError(f"`{name}` has unknown chunk sizes: call `{name}.compute_chunk_sizes()` first")
    return X


def _dense(X, name: str, rows: int, dtype: np.dtype):
    """`sp.ops`' row check and cast, lazily for a dask.array."""
    if not isinstance(X, da.Array):
        return ops._dense(X, name, rows, dtype)
    if X.shape[0] != rows:
        raise InputError(f"`{name}` must have {rows} rows, got {X.shape[0]}")
    return X if X.dtype == dtype else X.astype(dtype)


def _blocks(X, bounds: np.ndarray) -> list:
    """X's rows per block `[b0, b1)`: numpy views, or for a dask.array one `Delayed` per block
    (rechunked to the blocks, so the rows move worker to worker, never through the client)."""
    if not isinstance(X, da.Array):
        return [X[b0:b1] for b0, b1 in itertools.pairwise(bounds)]
    X = X.rechunk((tuple(int(s) for s in np.diff(bounds)), (X.shape[1],)))
    return list(X.to_delayed()[:, 0])


def _spmm_call(shape, dtype, cols, B, target, schedule) -> _Call:
    """Check B, the target and the schedule as `sp.ops.spmm` does; B's slabs per column block."""
    B = _operand(B, "B")
    dtype = ops._value_dtype(dtype, B.dtype)
    B = _dense(B, "B", shape[1], dtype)
    ref = _schedule_ref("spmm", target, schedule)
    return _Call("spmm", dtype, int(B.shape[1]), _blocks(B, cols), None, target, ref)


def _sddmm_call(shape, dtype, rows, cols, X, Y, target, schedule) -> _Call:
    """Check X, Y, the target and the schedule as `sp.ops.sddmm` does; Y's slabs per column
    block and X's rows per row block."""
    m, n = shape
    X, Y = _operand(X, "X"), _operand(Y, "Y")
    dtype = ops._value_dtype(dtype, X.dtype, Y.dtype)
    X, Y = _dense(X, "X", m, dtype), _dense(Y, "Y", n, dtype)
    if X.shape[1] != Y.shape[1]:
        raise InputError(f"`X` and `Y` must have the same number of columns, got {X.shape[1]} and {Y.shape[1]}")
    ref = _schedule_ref("sddmm", target, schedule)
    return _Call("sddmm", dtype, int(X.shape[1]), _blocks(Y, cols), _blocks(X, rows), target, ref)


def _partition(csr, client, row_blocks, col_blocks, replicas, timeout):
    """Check the client and the partition arguments: (client, row and column boundaries,
    replicas, timeout)."""
    client = _check_client(client)
    timeout = DEFAULT_TIMEOUT if timeout is None else _check_timeout(timeout)
    if isinstance(replicas, bool) or not isinstance(replicas, numbers.Integral) or replicas < 1:
        raise InputError(f"`replicas` must be a positive integer, got {replicas!r}")
    m, n = csr.shape
    cols = _bounds(col_blocks, n, "col_blocks", lambda k: col_bounds(n, k))
    if len(cols) == 1:  # no columns: one block of width 0, so that every row block has a piece
        cols = np.zeros(2, np.int64)
    if row_blocks is None:
        # One piece per worker alive now (waiting for one if there is none yet).
        row_blocks = max(1, len(_live_workers(client, time.monotonic() + timeout)) // (len(cols) - 1))
    rows = _bounds(row_blocks, m, "row_blocks", lambda k: row_bounds(csr.indptr, k))
    return client, rows, cols, int(replicas), timeout


def _distributed(A, client, row_blocks, col_blocks, replicas) -> DistributedMatrix | None:
    """`A` when it is a DistributedMatrix (after checking that nothing asks to change it)."""
    if not isinstance(A, DistributedMatrix):
        return None
    if client is not None and client is not A.client:
        raise InputError("`client` is not the client `A` was distributed with")
    if row_blocks is not None or not (isinstance(col_blocks, int) and col_blocks == 1) or replicas != 1:
        raise InputError("`A` is already distributed: its row_blocks, col_blocks and replicas are fixed")
    return A


def spmm(
    A,
    B,
    client: distributed.Client | None,
    target: str = "cpu",
    schedule=None,
    *,
    row_blocks: int | Sequence[int] | None = None,
    col_blocks: int | Sequence[int] = 1,
    replicas: int = 1,
    gather: bool = True,
    timeout: float | None = None,
):
    """`A @ B` on a Dask cluster, equal to `sp.ops.spmm(A, B, target=..., schedule=...)`.

    `A` is a scipy sparse matrix (split, scattered, used for this call and freed) or a
    `DistributedMatrix` (reused; `client` may then be None). Every input is checked before
    anything is sent. Returns a numpy array, or with `gather=False` a `dask.array` of row-block
    chunks left on the workers. `row_blocks`, `col_blocks`, `replicas` and `timeout` (seconds;
    default `DEFAULT_TIMEOUT`, or the matrix's own) as in `DistributedMatrix`.
    """
    dm = _distributed(A, client, row_blocks, col_blocks, replicas)
    if dm is not None:
        return dm.spmm(B, target, schedule, gather=gather, timeout=timeout)
    csr = ops._as_csr(A)
    client, rows, cols, replicas, timeout = _partition(csr, client, row_blocks, col_blocks, replicas, timeout)
    call = _spmm_call(csr.shape, csr.dtype, cols, B, target, schedule)
    with DistributedMatrix._from_checked(csr, client, rows, cols, replicas, timeout) as dm:
        return dm._run(call, gather, timeout)


def sddmm(
    A,
    X,
    Y,
    client: distributed.Client | None,
    target: str = "cpu",
    schedule=None,
    *,
    row_blocks: int | Sequence[int] | None = None,
    col_blocks: int | Sequence[int] = 1,
    replicas: int = 1,
    gather: bool = True,
    timeout: float | None = None,
):
    """`sp.ops.sddmm(A, X, Y, target=..., schedule=...)` on a Dask cluster: a CSR matrix with A's
    canonical structure and values `A * (X @ Y.T)`, or with `gather=False` a `dask.array` of CSR
    row-block chunks. Arguments as in `spmm`."""
    dm = _distributed(A, client, row_blocks, col_blocks, replicas)
    if dm is not None:
        return dm.sddmm(X, Y, target, schedule, gather=gather, timeout=timeout)
    csr = ops._as_csr(A)
    client, rows, cols, replicas, timeout = _partition(csr, client, row_blocks, col_blocks, replicas, timeout)
    call = _sddmm_call(csr.shape, csr.dtype, rows, cols, X, Y, target, schedule)
    with DistributedMatrix._from_checked(csr, client, rows, cols, replicas, timeout) as dm:
        return dm._run(call, gather, timeout)
