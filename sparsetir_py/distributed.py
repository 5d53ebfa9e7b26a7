"""Scale-out on Dask distributed: `sp.ops.spmm` / `sp.ops.sddmm` over row blocks of A on a cluster.

    from dask.distributed import Client
    client = Client("tcp://scheduler:8786")           # or Client(LocalCluster(n_workers=4))
    C = sp.distributed.spmm(A, B, client)             # a numpy array, as sp.ops.spmm(A, B)
    S = sp.distributed.sddmm(A, X, Y, client)         # a scipy CSR matrix, as sp.ops.sddmm(A, X, Y)

    dA = sp.distributed.DistributedMatrix(A, client)  # A is split and scattered once ...
    for layer in layers:                              # ... and reused: only B and C cross the network
        H = dA.spmm(H @ W, format="auto")             # each row block in the format tuned for it
    dA.formats                                        # {("spmm", width): [format of each piece]}

Needs `pip install "sparsetir_py[distributed]"` (dask and distributed); `sp.distributed` is
imported on first use, so `import sparsetir_py` never loads Dask.

How a call runs:
- **Partition.** A is cut into row blocks of balanced nonzeros (not of balanced rows: on a
  power-law graph a block of hub rows holds most of the work); by default one block per worker.
  Optionally each row block is cut again into `col_blocks` column blocks (A's columns, which are
  B's rows): the pieces then form a grid, and B is sent in row slabs instead of whole.
- **Placement.** Each piece is scattered once, straight from the client to the worker that
  keeps it (the least loaded live worker; on `replicas` workers when asked), and stays there
  until the `DistributedMatrix` is closed. A call sends only the dense operands: B (or Y) to
  every worker holding a piece (a broadcast; one slab per column block), X's rows to the
  holders of each row block.
- **Formats.** `format="csr"` (the default) runs CSR with the default schedule (or the one
  given) on every piece; `format="auto"` lets each piece have its own format and schedule, the
  one `sp.tune` chooses for that piece's structure at the call's width, tuned on the worker that
  holds the piece (once per structure and width: `sp.tune`'s memory and disk cache there) and
  remembered by the matrix for later calls; `DistributedMatrix.formats` shows the choices.
- **Compute.** Each task calls `sp.ops.spmm` / `sp.ops.sddmm` on its piece inside the worker: the
  project's own kernel, compiled once per worker process (the in-process kernel cache) and loaded
  from the on-disk kernel cache when the worker's machine compiled it before. With column
  blocks, one task per row block adds the partial products (SpMM, in column order, so the result
  does not depend on which task finished first) or joins the pieces' values (SDDMM).
- **Result.** Row blocks are gathered in row order into a numpy array (SpMM) or a CSR matrix with
  A's canonical structure (SDDMM), or, with `gather=False`, left on the workers as a `dask.array`
  whose chunks are the row blocks (CSR chunks for SDDMM).
- **Operands on the cluster.** B, X and Y may be `dask.array`s (e.g. the previous layer's
  `gather=False` output): they are rechunked to the blocks and computed on the cluster, so their
  rows move from worker to worker and never through the client.

Inputs are checked on the client with `sp.ops`' own checks, before anything is scattered or
submitted: the same `sp.InputError`s.

Faults. A call runs in rounds under one deadline (`timeout` seconds from its start). Every
round asks the scheduler which workers are alive now (a worker it still lists but that sent no
heartbeat for `HANG_SECONDS` counts as hung: nothing is sent to it and nothing is waited on
from it), re-scatters from the client's copy of A every piece that no live worker holds, sends
the operands that no live worker holds, and submits the row blocks not finished yet. Every
blocking exchange with the cluster (scatters, questions to the scheduler, gathers) waits at
most until the deadline and is abandoned early when a worker it involves dies or hangs; a
failed round (a worker died or hung before, while or after data was sent to it, a connection
closed, a task's input was lost) leads to a new one. Each row block's result is stored once, so
a result is never lost nor counted twice, and it is the same bit for bit as with no fault. A
call either returns that result or raises `sp.errors.DistributedError` naming the step that
could not finish, by its deadline; never a raw Dask or network exception. A task that raised
raises its own exception here (an `InputError` stays one). A `DistributedMatrix` whose worker
died or hung keeps working: its next call re-scatters what was lost, and `placement` shows
where the pieces live now.

The client keeps a reference to A's canonical CSR form for that re-scatter: do not change A's
arrays in place while a `DistributedMatrix` of it is open.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import numbers
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from . import ops
from .errors import DistributedError, InputError
from .inputs import check_kind, positive_int
from .operands import as_csr, check_dense, dense_operand, dense_operands
from .ops.kernels import resolve_schedule

try:
    import dask.array as da
    import distributed
    from distributed.client import FutureCancelledError, FuturesCancelledError
except ImportError as e:  # pragma: no cover - the extra is part of `[test]`
    raise ImportError(f"sp.distributed needs Dask distributed: pip install 'sparsetir_py[distributed]' ({e})") from None

__all__ = [
    "DEFAULT_TIMEOUT",
    "HANG_SECONDS",
    "DistributedError",
    "DistributedMatrix",
    "col_bounds",
    "row_bounds",
    "sddmm",
    "spmm",
]

#: Seconds a call (or building a `DistributedMatrix`) may take, all its waits together, before
#: `DistributedError`.
DEFAULT_TIMEOUT = 600.0
#: Seconds without a heartbeat (workers send one every 0.5 s on clusters of up to ten) after
#: which a worker the scheduler still lists is treated as hung: its pieces are scattered again
#: elsewhere and its tasks run again elsewhere. A worker's heartbeats also pause while one of our
#: kernels holds the GIL: a row block whose kernel runs longer than this (about 10^10
#: multiply-adds on one core) is taken for a hang; cut A into more row blocks, or raise this.
HANG_SECONDS = 20.0
#: Seconds between looks at the cluster while a call waits for its tasks or for a transfer.
POLL_SECONDS = 1.0
#: Rounds a call allows after failures (a worker died or hung, a connection closed), within its
#: deadline (Dask's own retries of a task whose inputs survived are not counted).
MAX_RECOVERIES = 50
#: Formats a call may ask for.
FORMATS = ("csr", "auto")


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


def _configuration(schedule, chosen: dict | None) -> dict:
    """`sp.ops` keyword arguments of a piece: the format `sp.tune` chose for it, or CSR with the
    call's schedule."""
    if chosen is not None:
        return chosen
    return {"format": "csr", "schedule": _worker_schedule(schedule)}


def _spmm_task(piece, B: np.ndarray, target: str, schedule, chosen: dict | None = None) -> np.ndarray:
    return ops.spmm(piece, B, target=target, **_configuration(schedule, chosen))


def _sddmm_task(piece, X: np.ndarray, Y: np.ndarray, target: str, schedule, values_only: bool, chosen=None):
    S = ops.sddmm(piece, X, Y, target=target, **_configuration(schedule, chosen))
    return S.data if values_only else S


def _choose_task(piece, op: str, width: int, dtype: str, target: str) -> tuple[dict, str]:
    """What `sp.tune` chooses for this piece at this width, tuned here (on the worker that holds
    the piece, with its threads) once per structure and width: `sp.ops` keyword arguments and
    the choice's label."""
    from . import tune

    try:
        result = tune.tune(op, piece, width, target, progress=False, dtype=np.dtype(dtype))
    except Exception as e:  # a search that failed costs this piece its tuning, not the call
        return {"format": "csr", "schedule": None}, f"csr (tuning failed: {type(e).__name__}: {e})"
    return result.ops_kwargs(), result.table.winner.label


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


# -------------------------------------------------------------------- talking to the cluster
class _Retry(Exception):
    """A step of a call failed in a way a new round may get past (a worker died or hung, a
    connection closed, a task's input was lost, the deadline came): `phase` names the step."""

    def __init__(self, phase: str, detail):
        super().__init__(f"{phase}: {detail}")
        self.phase = phase
        self.detail = detail if isinstance(detail, str) else f"{type(detail).__name__}: {detail}"


#: Test seam of the fault-injection suite: when set, called with the name of each step of a
#: call (see `_PHASES`) just before the step talks to the cluster.
_phase_hook: Callable[[str], None] | None = None
_PHASES = ("asking the scheduler", "scattering A's pieces", "scattering the operands", "choosing formats",
           "running the tasks", "gathering the results")  # fmt: skip


def _enter(phase: str) -> None:
    if _phase_hook is not None:
        _phase_hook(phase)


def _check_deadline(deadline: float, phase: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Retry(phase, "the deadline passed")
    return left


def _bounded(client, deadline: float, phase: str, make: Callable, watch: Iterable[str] = ()):
    """Run the coroutine `make()` on the client's event loop and return its result, waiting at
    most until `deadline`; while it runs, every `POLL_SECONDS` the scheduler is asked whether a
    worker of `watch` died or hung, and if one did the exchange is abandoned (cancelled). Every
    failure is a `_Retry` of `phase`: Dask's and the network's exceptions never leave here."""
    left = _check_deadline(deadline, phase)

    async def run():
        return await asyncio.wait_for(make(), left)

    try:
        future = asyncio.run_coroutine_threadsafe(run(), client.loop.asyncio_loop)
    except Exception as e:  # the client's loop is closed
        raise _Retry(phase, e) from None
    watch = frozenset(watch)
    while True:
        step = min(POLL_SECONDS, max(0.0, deadline - time.monotonic()))
        try:
            return future.result(timeout=step)
        except TimeoutError:
            if future.done():  # the exchange itself timed out
                raise _Retry(phase, f"no answer within {left:.3g} s") from None
        except Exception as e:
            raise _Retry(phase, e) from None
        if time.monotonic() >= deadline:
            future.cancel()
            raise _Retry(phase, "no answer before the deadline")
        if watch:
            try:
                gone = watch - set(_survey(client, deadline, phase).alive)
            except _Retry:
                future.cancel()
                raise
            if gone:
                future.cancel()
                raise _Retry(phase, f"worker {', '.join(sorted(gone))} died or hung")


#: Heartbeats seen per worker address: (the scheduler's `last_seen`, when this process first saw
#: that value), so that a worker whose heartbeat stopped is found by this process's clock too.
_HEARD: dict[str, tuple[float, float]] = {}


@dataclass(frozen=True)
class _View:
    """The cluster as the scheduler sees it now: `alive` (listed and heard from within
    `HANG_SECONDS`; they hold data that can be read), `targets` (alive and running: new pieces
    and tasks may go there), `hung` (listed but silent), and the alive holders of each key asked
    about."""

    alive: tuple[str, ...]
    targets: tuple[str, ...]
    hung: tuple[str, ...]
    holders: dict

    def held(self, future) -> tuple[str, ...]:
        return self.holders.get(future.key, ()) if future is not None else ()


def _survey(client, deadline: float, phase: str, futures: Iterable = ()) -> _View:
    """Ask the scheduler which workers are alive now and which of them hold `futures`' data."""
    info = _bounded(client, deadline, phase, lambda: client.scheduler.identity(n_workers=-1))
    workers = info.get("workers", {})
    now = time.monotonic()
    newest = max((w.get("last_seen", 0.0) for w in workers.values()), default=0.0)
    alive, targets, hung = [], [], []
    for address, w in sorted(workers.items()):
        seen = w.get("last_seen", 0.0)
        heard = _HEARD.get(address)
        if heard is None or heard[0] != seen:
            heard = _HEARD[address] = (seen, now)
        silent = max(newest - seen, now - heard[1])
        if silent >= HANG_SECONDS:
            hung.append(address)
            continue
        alive.append(address)
        if w.get("status", "running") == "running":
            targets.append(address)
    keys = [f.key for f in futures if f is not None]
    holders = {}
    if keys:
        who = _bounded(client, deadline, phase, lambda: client.scheduler.who_has(keys=keys))
        live = set(alive)
        holders = {k: tuple(sorted(w for w in who.get(k, ()) if w in live)) for k in keys}
    return _View(tuple(alive), tuple(targets), tuple(hung), holders)


_DATA_KEY = "sparsetir-data-"


def _scatter(client, data, workers: Sequence[str], deadline: float, phase: str, key: str | None = None):
    """`data` scattered to `workers` under a key of its own, abandoned when one of them dies or
    hangs; a scatter that failed half way is released, so that no copy stays behind.

    The client sends one copy to each worker (under the same key), at once: a broadcast through
    the scheduler would replicate under the scheduler's replication lock, which a replication to
    a worker that died holds until the connection times out (30 s), stalling every later one."""
    fresh = key is None  # else more copies of data the cluster holds (a piece whose replicas were dropped)
    key = key or f"{_DATA_KEY}{uuid.uuid4().hex}"
    left = _check_deadline(deadline, phase)

    async def send():
        sends = [
            client.scatter({key: data}, workers=[w], hash=False, timeout=min(left, 5.0), asynchronous=True)
            for w in workers
        ]
        results = await asyncio.gather(*sends, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results[0][key]

    try:
        return _bounded(client, deadline, phase, send, watch=workers)
    except _Retry:
        if fresh:
            distributed.Future(key, client).release()
        raise


def _piece_bytes(piece) -> int:
    return piece.data.nbytes + piece.indices.nbytes + piece.indptr.nbytes


def _scattered(future: distributed.Future) -> bool:
    """Whether `future` holds data the client scattered (which no worker can compute again)."""
    return str(future.key).startswith(_DATA_KEY)


def _put(client, value, workers: Sequence[str], deadline: float, phase: str) -> distributed.Future:
    """A numpy operand scattered to `workers`; a block of a dask.array computed on the cluster
    (Dask moves it to the tasks that read it, and recomputes it if a worker dies)."""
    if isinstance(value, np.ndarray):
        return _scatter(client, value, workers, deadline, phase)
    try:
        return client.compute(value)
    except Exception as e:
        raise _Retry(phase, e) from None


def _retrying(deadline: float, timeout: float, where: str, step: Callable):
    """Call `step()` until it returns, a new round after each `_Retry` (after a short pause, to
    let the scheduler notice a dead worker); `DistributedError` naming the step at the deadline."""
    rounds = 0
    while True:
        try:
            return step()
        except _Retry as e:
            last = e
        rounds += 1
        if time.monotonic() >= deadline:
            raise DistributedError(f"{where}: {last.phase}: no result within {timeout:g} s ({last.detail})")
        if rounds > MAX_RECOVERIES:
            raise DistributedError(f"{where}: {last.phase}: gave up after {MAX_RECOVERIES} rounds ({last.detail})")
        time.sleep(min(0.05 * 2 ** min(rounds, 4), max(0.0, deadline - time.monotonic())))


def _check_client(client) -> distributed.Client:
    if not isinstance(client, distributed.Client):
        raise InputError(f"`client` must be a dask.distributed.Client, got {type(client).__name__}")
    if client.status not in ("running", "connecting"):
        raise DistributedError(f"`client` is not connected to a scheduler (status {client.status!r})")
    return client


def _check_timeout(timeout) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise InputError(f"`timeout` must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _check_format(format) -> str:
    if not isinstance(format, str) or format not in FORMATS:
        raise InputError(f"`format` must be one of {', '.join(map(repr, FORMATS))}, got {format!r}")
    return format


def _schedule_ref(op: str, target: str, schedule):
    """Check the target and schedule as `sp.ops` does; a callable travels with a token of its bytes."""
    resolve_schedule(op, target, schedule)
    if schedule is None or isinstance(schedule, str):
        return schedule
    import cloudpickle

    try:
        token = hashlib.sha256(cloudpickle.dumps(schedule)).hexdigest()
    except Exception as e:
        raise InputError(f"`schedule` cannot be sent to the workers (pickling failed): {e}") from None
    return (token, schedule)


def _worker_count(client, deadline: float, timeout: float) -> int:
    """The number of workers alive now (asked of the scheduler), waiting for one if none is."""

    def step() -> int:
        _enter("asking the scheduler")
        view = _survey(client, deadline, "waiting for a worker")
        if not view.targets:
            raise _Retry("waiting for a worker", "the cluster has no live workers")
        return len(view.targets)

    return _retrying(deadline, timeout, "sp.distributed", step)


# -------------------------------------------------------------------- the matrix on the cluster
class DistributedMatrix:
    """A sparse matrix split into pieces kept on a Dask cluster's workers, for repeated calls.

    `A` is any matrix `sp.ops` accepts (checked the same way). `row_blocks`: a number of row
    blocks of balanced nonzeros (default: one piece per worker, i.e. workers // column blocks) or
    explicit row boundaries `[0, ..., m]`;
    `col_blocks`: a number of equal column blocks or column boundaries `[0, ..., n]` (default 1:
    B is broadcast whole); `replicas`: on how many workers each piece is kept (capped at the
    number of workers; 2 lets Dask retry a dead worker's tasks with no re-scatter; each call tops
    up copies that were dropped, but Dask's active memory manager, on by default, drops copies no
    task waits for within seconds: set `distributed.scheduler.active-memory-manager.start: false`
    on the scheduler to keep them, else a lost piece is sent again from the client); `timeout`:
    seconds building the matrix, and by default each call, may take.

    Attributes: `shape`, `dtype`, `index_dtype`, `nnz`, `row_bounds`, `col_bounds`, `nbytes` (bytes
    of A's pieces, each sent once per replica), `bytes_sent` (every byte the client scattered so
    far: pieces, pieces sent again after a loss, dense operands), `placement` (the live workers
    holding each piece now, asked of the scheduler), `formats` (per `(op, width)`, the format
    and schedule each piece ran in the latest call of that op and width). `close()` (or leaving a
    `with` block) frees the pieces on the workers.
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
        csr = as_csr(A)
        client, rows, cols, replicas, timeout, deadline = _partition(
            csr, client, row_blocks, col_blocks, replicas, timeout
        )
        self._scatter_all(csr, client, rows, cols, replicas, timeout, deadline)

    @classmethod
    def _from_checked(cls, csr, client, rows, cols, replicas: int, timeout: float, deadline: float):
        """A matrix from arguments `_partition` has checked (the one-shot functions check their
        dense operands in between, so that nothing is scattered before every check passed)."""
        self = cls.__new__(cls)
        self._scatter_all(csr, client, rows, cols, replicas, timeout, deadline)
        return self

    def _scatter_all(self, csr, client, rows, cols, replicas: int, timeout: float, deadline: float) -> None:
        self.client = client
        self.shape = csr.shape
        self.dtype = csr.dtype
        self.index_dtype = csr.indices.dtype
        self.nnz = csr.nnz
        self.row_bounds, self.col_bounds = rows, cols
        self.replicas = replicas
        self.timeout = timeout
        self._csr = csr  # the source of a re-scatter after a worker died
        self._pieces: list[distributed.Future | None] = [None] * self.num_pieces
        self._placement: list[tuple[str, ...]] = [()] * self.num_pieces
        self._alive: tuple[str, ...] = ()
        self._piece_nnz = [0] * self.num_pieces
        self._choices: dict[tuple, dict[int, tuple[dict, str]]] = {}
        self.formats: dict[tuple[str, int], list[str]] = {}
        self.nbytes = 0
        self.bytes_sent = 0

        def step() -> None:
            _enter("asking the scheduler")
            self._place(_survey(client, deadline, "asking the scheduler", self._pieces), deadline)

        try:
            _retrying(deadline, timeout, "sp.distributed.DistributedMatrix", step)
        except BaseException:
            self.close()
            raise

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

    @property
    def placement(self) -> list[tuple[str, ...]]:
        """The live workers holding each piece (row-major over the grid), asked of the scheduler
        now; the last known placement when it does not answer within a few seconds."""
        if self._pieces is not None:
            try:
                view = _survey(self.client, time.monotonic() + min(self.timeout, 5.0), "placement", self._pieces)
                self._placement = [view.held(f) for f in self._pieces]
            except _Retry:
                pass
        return list(self._placement)

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
                if f is not None:
                    f.release()
        self._pieces = None
        self._csr = None

    # ---- operators
    def spmm(
        self,
        B,
        target: str = "cpu",
        schedule=None,
        *,
        format: str = "csr",
        gather: bool = True,
        timeout: float | None = None,
    ):
        """`A @ B` as `sp.ops.spmm(A, B, target=..., schedule=...)` computes it, block by block on
        the workers: a numpy array, or with `gather=False` a `dask.array` of row-block chunks
        kept on the workers (already computed). B is a numpy array (anything `sp.ops` takes) or a
        `dask.array`, whose slabs are computed on the cluster and never pass through the client.
        `format="auto"`: each piece in the format `sp.tune` chose for it (see `formats`)."""
        return self._call("spmm", (B,), target, schedule, format, gather, timeout)

    def sddmm(
        self,
        X,
        Y,
        target: str = "cpu",
        schedule=None,
        *,
        format: str = "csr",
        gather: bool = True,
        timeout: float | None = None,
    ):
        """`sp.ops.sddmm(A, X, Y, ...)` block by block on the workers: a CSR matrix with A's
        canonical structure, or with `gather=False` a `dask.array` of CSR row-block chunks."""
        return self._call("sddmm", (X, Y), target, schedule, format, gather, timeout)

    def _call(self, op: str, operands, target, schedule, format, gather: bool, timeout):
        self._check_open()
        call = _call_of(
            op, self.shape, self.dtype, self.row_bounds, self.col_bounds, operands, target, schedule, format
        )
        return self._run(call, gather, self.timeout if timeout is None else _check_timeout(timeout))

    def _check_open(self) -> None:
        if self._pieces is None:
            raise InputError("this DistributedMatrix is closed")

    # ---- placing the pieces
    def _place(self, view: _View, deadline: float) -> None:
        """Scatter every piece that no live worker holds (not scattered yet, or its workers died
        or hung) from the client's copy of A, to the live workers holding the fewest pieces."""
        phase = "scattering A's pieces"
        if not view.targets:
            raise _Retry(phase, "the cluster has no live workers")
        self._placement = [view.held(f) for f in self._pieces]
        self._alive = view.alive
        load = dict.fromkeys(view.targets, 0)
        for held in self._placement:
            for w in held:
                if w in load:
                    load[w] += 1
        copies = min(self.replicas, len(view.targets))
        for p, held in enumerate(self._placement):
            if held and len(held) < copies:
                # Dask's active memory manager drops copies no task waits for: top them up.
                more = tuple(sorted((w for w in view.targets if w not in held), key=lambda w: load[w]))
                more = more[: copies - len(held)]
                _enter(phase)
                _scatter(self.client, self._piece_data(p), more, deadline, phase, key=self._pieces[p].key)
                for w in more:
                    load[w] += 1
                self._placement[p] = held + more
                self.bytes_sent += len(more) * _piece_bytes(self._piece_data(p))
            if held:
                continue
            targets = tuple(sorted(view.targets, key=lambda w: load[w])[:copies])  # stable: round robin at first
            for w in targets:
                load[w] += 1
            piece = self._piece_data(p)
            size = _piece_bytes(piece)
            _enter(phase)
            future = _scatter(self.client, piece, targets, deadline, phase)
            if self._pieces[p] is None:
                self.nbytes += len(targets) * size
            else:
                self._pieces[p].release()
            self._pieces[p] = future
            self._placement[p] = targets
            self._piece_nnz[p] = piece.nnz
            self.bytes_sent += len(targets) * size

    def _piece_data(self, p: int):
        """Piece `p` cut from the client's copy of A."""
        r, c = divmod(p, self.num_col_blocks)
        (r0, r1), (c0, c1) = self.row_bounds[r : r + 2], self.col_bounds[c : c + 2]
        return _piece(self._csr, int(r0), int(r1), int(c0), int(c1), self.num_col_blocks == 1)

    # ---- running a call
    def _run(self, call: _Call, gather: bool, timeout: float, deadline: float | None = None):
        """Rounds until every row block is stored (see the module docstring, "Faults"): each
        round places lost pieces, sends missing operands, submits the row blocks not stored yet
        and waits for them, storing each as it finishes."""
        if deadline is None:
            deadline = time.monotonic() + timeout
        call.start(self, gather)
        where = f"sp.distributed.{call.op}"

        def step() -> None:
            try:
                self._round(call, deadline)
            except _Retry:
                call.abandon()
                raise

        _retrying(deadline, timeout, where, step)
        return call.finish(self)

    def _round(self, call: _Call, deadline: float) -> None:
        _enter("asking the scheduler")
        view = _survey(self.client, deadline, "asking the scheduler", [*self._pieces, *call.operand_futures()])
        self._place(view, deadline)
        todo = [r for r in range(self.num_row_blocks) if r not in call.done]
        call.forget_lost(view)
        call.send(self, view, todo, deadline)
        self._choose(call, view, todo, deadline)
        restrict = list(view.targets) if view.hung else None  # keep new tasks off a hung worker
        for r in todo:
            call.finals[r] = call.submit(self, r, restrict)
        self._wait(call, deadline)

    def _choose(self, call: _Call, view: _View, rows: list[int], deadline: float) -> None:
        """With `format="auto"`: the configuration of each piece of `rows` that the matrix has
        not chosen yet at this op, width and dtype, tuned on a worker holding the piece."""
        if call.format != "auto":
            return
        chosen = self._choices.setdefault(call.choice_key, {})
        phase = "choosing formats"
        futures = {}
        for r in rows:
            for c in range(self.num_col_blocks):
                p = self._piece_index(r, c)
                if p in chosen:
                    continue
                if self._piece_nnz[p] == 0 or call.width == 0:
                    chosen[p] = ({"format": "csr", "schedule": None}, "csr")  # nothing to tune
                    continue
                try:
                    futures[p] = self.client.submit(
                        _choose_task, self._pieces[p], call.op, call.width, call.dtype.str, call.target,
                        key=f"sparsetir-choose-{call.token}-{p}-{uuid.uuid4().hex[:8]}", pure=False,
                    )  # fmt: skip
                except Exception as e:
                    raise _Retry(phase, e) from None
        if not futures:
            return
        _enter(phase)
        try:
            results = _bounded(
                self.client, deadline, phase, lambda: self.client.gather(list(futures.values()), asynchronous=True),
                watch=view.alive,
            )  # fmt: skip
        finally:
            for f in futures.values():
                f.release()
        for p, result in zip(futures, results):
            chosen[p] = result

    def _wait(self, call: _Call, deadline: float) -> None:
        """Wait for the submitted row blocks, storing each as it finishes; a `_Retry` when a
        block's task was lost (its input's only copy died with a worker) or runs on a worker that
        hung."""
        phase = "running the tasks"
        _enter(phase)
        look = time.monotonic() + POLL_SECONDS
        while len(call.done) < self.num_row_blocks:
            waiting = [f for r, f in call.finals.items() if r not in call.done]
            step = min(POLL_SECONDS / 4, _check_deadline(deadline, phase))
            try:
                distributed.wait(waiting, timeout=step, return_when="FIRST_COMPLETED")
            except (TimeoutError, FuturesCancelledError, FutureCancelledError):
                pass  # classified below
            except Exception as e:
                raise _Retry(phase, e) from None
            lost, finished = [], {}
            for r, f in sorted(call.finals.items()):
                if r in call.done:
                    continue
                if f.status == "finished":
                    finished[r] = f
                elif f.status == "error":
                    _raise_task_error(phase, f, deadline)
                elif f.status in ("cancelled", "lost"):
                    lost.append(r)
            if finished:
                call.store(self, finished, deadline)
            if lost:
                raise _Retry(phase, f"the tasks of row blocks {lost} were lost with a worker")
            if len(call.done) < self.num_row_blocks and time.monotonic() >= look:
                self._check_running(call, deadline)
                look = time.monotonic() + POLL_SECONDS

    def _check_running(self, call: _Call, deadline: float) -> None:
        """A `_Retry` when a waiting row block can no longer finish: a piece it reads has no live
        holder, or its task runs on a worker that hung."""
        phase = "running the tasks"
        view = _survey(self.client, deadline, phase, self._pieces)
        for r in range(self.num_row_blocks):
            if r in call.done:
                continue
            if any(not view.held(self._pieces[self._piece_index(r, c)]) for c in range(self.num_col_blocks)):
                raise _Retry(phase, f"a piece of row block {r} was lost with its worker")
        operands = [f for f in call.operand_futures() if _scattered(f)]
        if operands:
            view = _survey(self.client, deadline, phase, operands)
            if any(not view.held(f) for f in operands):
                raise _Retry(phase, "a dense operand was lost with its worker")
        if not view.hung:
            return
        processing = _bounded(self.client, deadline, phase, lambda: self.client.scheduler.processing(workers=None))
        waiting = set().union(*(call.task_keys[r] for r in call.finals if r not in call.done))
        for w in view.hung:
            if waiting & set(processing.get(w, ())):
                raise _Retry(phase, f"worker {w} hung while running a task")


def _raise_task_error(phase: str, future: distributed.Future, deadline: float) -> None:
    """Raise a failed task's exception here (an `InputError` stays one); a task that killed
    every worker it ran on becomes a `DistributedError`; a task whose failure was the cluster's
    (its input lost, a connection closed) a `_Retry`."""
    try:
        error = _bounded(future.client, deadline, phase, lambda: future.exception(asynchronous=True))
    except _Retry:
        raise
    if isinstance(error, distributed.KilledWorker):
        raise DistributedError(f"{phase}: a task killed every worker it ran on: {error}") from error
    if isinstance(error, (OSError, FutureCancelledError, FuturesCancelledError, asyncio.CancelledError)):
        raise _Retry(phase, error)
    raise error


def _sent_bytes(value) -> int:
    """Bytes the client scatters for an operand block (a dask.array's block is not sent)."""
    return value.nbytes if isinstance(value, np.ndarray) else 0


class _Call:
    """One call's dense operands (row slabs per column block; X's rows per row block for SDDMM),
    the futures they were scattered to, how tasks are built from them, and the result: the row
    blocks stored so far (`done`: each stored once, whatever round finished it)."""

    def __init__(self, op: str, dtype: np.dtype, width: int, slabs: list, rows: list | None, target: str, schedule,
                 format: str):  # fmt: skip
        self.op, self.dtype, self.width = op, dtype, width
        self.slabs, self.rows = slabs, rows
        self.target, self.schedule = target, schedule
        # A schedule of the caller's runs CSR, as in `sp.ops`.
        self.format = "csr" if schedule is not None else format
        self.choice_key = (op, width, dtype.str, target)
        self.slab_futures: dict[int, distributed.Future] = {}
        self.row_futures: dict[int, distributed.Future] = {}
        self.finals: dict[int, distributed.Future] = {}
        self.task_keys: dict[int, set[str]] = {}
        self.done: set[int] = set()
        self.token = uuid.uuid4().hex[:12]
        self.attempt = itertools.count()
        self.gather = True
        self.out = None

    def start(self, dm: DistributedMatrix, gather: bool) -> None:
        self.gather = gather
        if not gather:
            return
        m, _ = dm.shape
        self.out = np.empty((m, self.width), self.dtype) if self.op == "spmm" else np.empty(dm.nnz, self.dtype)

    def operand_futures(self) -> list[distributed.Future]:
        return [*self.slab_futures.values(), *self.row_futures.values()]

    def forget_lost(self, view: _View) -> None:
        """Drop the operands no live worker holds, so that `send` scatters them again (a block
        of a dask.array is Dask's to recompute, and is kept)."""
        for futures in (self.slab_futures, self.row_futures):
            for k, f in list(futures.items()):
                if _scattered(f) and not view.held(f):
                    futures.pop(k).release()

    def abandon(self) -> None:
        """After a failed round: release the tasks of the row blocks not stored yet (they run
        again next round, under new keys)."""
        for r in [r for r in self.finals if r not in self.done]:
            self.finals.pop(r).release()
            self.task_keys.pop(r, None)

    def send(self, dm: DistributedMatrix, view: _View, rows: list[int], deadline: float) -> None:
        """Scatter the operands the row blocks `rows` need and no live worker holds, each once,
        to the worker holding most of the pieces that read it; Dask copies it from there to the
        other workers whose tasks read it (worker to worker, not through the client)."""
        phase = "scattering the operands"
        C = dm.num_col_blocks
        placement = dm._placement
        for c in range(C):
            if c not in self.slab_futures:
                readers = [placement[dm._piece_index(r, c)] for r in rows]
                self.slab_futures[c] = self._send_one(dm, view, self.slabs[c], readers, deadline, phase)
        if self.rows is None:
            return
        for r in rows:
            if r not in self.row_futures:
                readers = [placement[dm._piece_index(r, c)] for c in range(C)]
                self.row_futures[r] = self._send_one(dm, view, self.rows[r], readers, deadline, phase)

    @staticmethod
    def _send_one(dm: DistributedMatrix, view: _View, value, readers: list[tuple[str, ...]], deadline, phase):
        count = dict.fromkeys(view.targets, 0)
        for held in readers:
            for w in held:
                if w in count:
                    count[w] += 1
        if not count:
            raise _Retry(phase, "the cluster has no live workers")
        workers = [max(count, key=lambda w: count[w])]  # the first of the most reading (sorted addresses)
        if dm.replicas > 1:  # a copy on every reader: Dask can rerun a dead worker's task on another
            workers = [w for w in count if count[w]] or workers
        _enter(phase)
        future = _put(dm.client, value, workers, deadline, phase)
        dm.bytes_sent += len(workers) * _sent_bytes(value)
        return future

    def submit(self, dm: DistributedMatrix, r: int, workers: list[str] | None) -> distributed.Future:
        """The tasks of row block `r` (on `workers` only, when given); returns the future of its
        result."""
        try:
            return self._submit(dm, r, workers)
        except Exception as e:  # the client lost its scheduler
            raise _Retry("running the tasks", e) from None

    def _submit(self, dm: DistributedMatrix, r: int, workers: list[str] | None) -> distributed.Future:
        client, C = dm.client, dm.num_col_blocks
        tag = f"{self.token}-{next(self.attempt)}"
        values_only = self.gather
        chosen = dm._choices.get(self.choice_key, {}) if self.format == "auto" else {}
        where = {"workers": workers, "allow_other_workers": False} if workers else {}
        parts, keys = [], set()
        for c in range(C):
            p = dm._piece_index(r, c)
            config = chosen[p][0] if p in chosen else None
            key = f"sparsetir-{self.op}-{tag}-{r}-{c}"
            if self.op == "spmm":
                args = (_spmm_task, dm._pieces[p], self.slab_futures[c], self.target, self.schedule, config)
            else:
                args = (_sddmm_task, dm._pieces[p], self.row_futures[r], self.slab_futures[c], self.target)
                args += (self.schedule, values_only and C == 1, config)
            parts.append(client.submit(*args, key=key, pure=False, **where))
            keys.add(key)
        self.task_keys[r] = keys
        if C == 1:
            return parts[0]
        key = f"sparsetir-{self.op}-{tag}-{r}-sum"
        keys.add(key)
        if self.op == "spmm":
            return client.submit(_sum_partials, *parts, key=key, pure=False, **where)
        return client.submit(_join_pieces, values_only, *parts, key=key, pure=False, **where)

    def store(self, dm: DistributedMatrix, finished: dict[int, distributed.Future], deadline: float) -> None:
        """Fetch the row blocks `finished` into the result, in one exchange (nothing to fetch with
        `gather=False`), and mark them done; a `_Retry` when a holder died or hung meanwhile."""
        if self.gather:
            phase = "gathering the results"
            _enter(phase)
            futures = list(finished.values())
            values = _bounded(dm.client, deadline, phase, lambda: dm.client.gather(futures, asynchronous=True),
                              watch=dm._alive)  # fmt: skip
            for r, value in zip(finished, values):
                r0, r1 = dm.row_bounds[r : r + 2]
                if self.op == "spmm":
                    self.out[r0:r1] = value
                else:
                    self.out[dm._csr.indptr[r0] : dm._csr.indptr[r1]] = value
        self.done.update(finished)

    def finish(self, dm: DistributedMatrix):
        """The gathered result, or a dask.array over the row blocks' futures (chunks stay on the
        workers)."""
        labels = [self._label(dm, p) for p in range(dm.num_pieces)]
        dm.formats[(self.op, self.width)] = labels
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
        blocks = [self.finals[r] for r in range(dm.num_row_blocks)]
        if not blocks:
            return da.zeros((m, width), dtype=self.dtype)
        meta = None if self.op == "spmm" else scipy.sparse.csr_matrix((0, 0), dtype=self.dtype)
        chunks = [
            da.from_delayed(f, shape=(int(r1 - r0), width), dtype=self.dtype, meta=meta)
            for (r0, r1), f in zip(itertools.pairwise(dm.row_bounds), blocks)
        ]
        return da.concatenate(chunks, axis=0) if len(chunks) > 1 else chunks[0]

    def _label(self, dm: DistributedMatrix, p: int) -> str:
        if self.format == "auto":
            return dm._choices[self.choice_key][p][1]
        schedule = self.schedule
        if isinstance(schedule, tuple):
            schedule = getattr(schedule[1], "__name__", "a callable schedule")
        return "csr" + (f" / {schedule}" if schedule else "")


def _operand(X, name: str):
    """A dense operand: a dask.array (checked by its metadata; its values stay on the cluster) or
    anything `sp.ops` takes (checked by `sp.ops`)."""
    if not isinstance(X, da.Array):
        return dense_operand(X, name)
    check_kind(X.dtype, f"`{name}`")
    if X.ndim != 2:
        raise InputError(f"`{name}` must be a 2-D array, got shape {X.shape}")
    if any(math.isnan(s) for s in X.shape):
        raise InputError(f"`{name}` has unknown chunk sizes: call `{name}.compute_chunk_sizes()` first")
    return X


def _dense(X, name: str, rows: int, dtype: np.dtype):
    """`sp.ops`' row check and cast, lazily for a dask.array."""
    if not isinstance(X, da.Array):
        return check_dense(X, name, rows, dtype)
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


def _call_of(op: str, shape, dtype, rows, cols, operands, target, schedule, format="csr") -> _Call:
    """Check the dense operands, the target, the schedule and the format as `sp.ops` does (the
    operator table of `sparsetir_py.operands`); the operand read by A's columns (SpMM's B,
    SDDMM's Y) in slabs per column block, SDDMM's X in rows per row block."""
    dtype, operands, feat = dense_operands(op, shape, dtype, operands, read=_operand, fit=_dense)
    ref = _schedule_ref(op, target, schedule)
    format = _check_format(format)
    by_rows = None if op == "spmm" else _blocks(operands[0], rows)
    return _Call(op, dtype, feat, _blocks(operands[-1], cols), by_rows, target, ref, format)


def _partition(csr, client, row_blocks, col_blocks, replicas, timeout):
    """Check the client and the partition arguments: (client, row and column boundaries,
    replicas, timeout, the deadline that starts now)."""
    client = _check_client(client)
    timeout = DEFAULT_TIMEOUT if timeout is None else _check_timeout(timeout)
    deadline = time.monotonic() + timeout
    replicas = positive_int("`replicas`", replicas)
    m, n = csr.shape
    cols = _bounds(col_blocks, n, "col_blocks", lambda k: col_bounds(n, k))
    if len(cols) == 1:  # no columns: one block of width 0, so that every row block has a piece
        cols = np.zeros(2, np.int64)
    if row_blocks is None:
        # One piece per worker alive now (waiting for one if there is none yet).
        row_blocks = max(1, _worker_count(client, deadline, timeout) // (len(cols) - 1))
    rows = _bounds(row_blocks, m, "row_blocks", lambda k: row_bounds(csr.indptr, k))
    return client, rows, cols, int(replicas), timeout, deadline


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
    format: str = "csr",
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
    chunks left on the workers. `format`: "csr" (every piece in CSR) or "auto" (each piece in
    the format `sp.tune` chooses for it). `row_blocks`, `col_blocks`, `replicas` and `timeout`
    (seconds for the whole call; default `DEFAULT_TIMEOUT`, or the matrix's own) as in
    `DistributedMatrix`. A call that cannot finish by its timeout raises `DistributedError`.
    """
    return _once("spmm", A, (B,), client, target, schedule, format, row_blocks, col_blocks, replicas, gather, timeout)


def sddmm(
    A,
    X,
    Y,
    client: distributed.Client | None,
    target: str = "cpu",
    schedule=None,
    *,
    format: str = "csr",
    row_blocks: int | Sequence[int] | None = None,
    col_blocks: int | Sequence[int] = 1,
    replicas: int = 1,
    gather: bool = True,
    timeout: float | None = None,
):
    """`sp.ops.sddmm(A, X, Y, target=..., schedule=...)` on a Dask cluster: a CSR matrix with A's
    canonical structure and values `A * (X @ Y.T)`, or with `gather=False` a `dask.array` of CSR
    row-block chunks. Arguments as in `spmm`."""
    return _once("sddmm", A, (X, Y), client, target, schedule, format, row_blocks, col_blocks, replicas, gather,
                 timeout)  # fmt: skip


def _once(op: str, A, operands, client, target, schedule, format, row_blocks, col_blocks, replicas, gather, timeout):
    """`op` on a DistributedMatrix, or on a scipy matrix distributed for this call and freed after."""
    dm = _distributed(A, client, row_blocks, col_blocks, replicas)
    if dm is not None:
        return dm._call(op, operands, target, schedule, format, gather, timeout)
    csr = as_csr(A)
    client, rows, cols, replicas, timeout, deadline = _partition(csr, client, row_blocks, col_blocks, replicas, timeout)
    call = _call_of(op, csr.shape, csr.dtype, rows, cols, operands, target, schedule, format)
    with DistributedMatrix._from_checked(csr, client, rows, cols, replicas, timeout, deadline) as dm:
        return dm._run(call, gather, timeout, deadline)
