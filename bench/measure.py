"""What is measured and how: references, result checks, timing, the bandwidth model.

Everything here runs inside a worker process (see `bench.worker`), except the bandwidth model
and the geometric mean, which the parent applies to the workers' numbers. The STREAM triad is in
`bench.stream`.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import scipy.sparse

from .graphs import package_dir

#: Relative tolerance of a result, against the magnitude `sum |a| * |b|` of each output entry.
#: A float32 sum of L terms in any order is within about L * 6e-8 of it (worst case); rows and
#: dot products here have L <= ~10^4 terms, and typical errors grow like sqrt(L) * 6e-8.
RTOL = 1e-4
#: Entries of a dense operand are uniform in [-1, 1), seeded by (seed, width, operand).
VALUE_RANGE = (-1.0, 1.0)


# -------------------------------------------------------------------- inputs and references
def dense_operand(rows: int, width: int, seed: int, which: int) -> np.ndarray:
    """A seeded C-contiguous float32 `rows x width` operand; `which` tells B, X, Y apart."""
    rng = np.random.default_rng([seed, width, which])
    return rng.uniform(*VALUE_RANGE, size=(rows, width)).astype(np.float32)


def row_ids(A: scipy.sparse.csr_matrix) -> np.ndarray:
    """The row of every stored entry of A, in storage order."""
    return np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))


def sampled_dot(
    A: scipy.sparse.csr_matrix,
    X: np.ndarray,
    Y: np.ndarray,
    rows: np.ndarray | None = None,
    chunk_elems: int = 1 << 22,
) -> np.ndarray:
    """`sum_k X[i, k] * Y[j, k]` for every stored (i, j) of A, in storage order (A's values unused).

    Gathers rows of X and Y per chunk of nonzeros and reduces with einsum: O(nnz * width) work and
    O(chunk_elems) extra memory, never an `m x n` dense product. `rows` is `row_ids(A)` when the
    caller has it already. The result has the dtype of `X * Y`.
    """
    rows = row_ids(A) if rows is None else rows
    cols = A.indices
    out = np.empty(A.nnz, dtype=np.result_type(X, Y))
    step = max(1, chunk_elems // max(1, X.shape[1]))
    for lo in range(0, A.nnz, step):
        hi = min(A.nnz, lo + step)
        out[lo:hi] = np.einsum("ij,ij->i", X[rows[lo:hi]], Y[cols[lo:hi]])
    return out


@dataclass
class Reference:
    """The float64 scipy result of an operation and the magnitude of each of its entries."""

    value: np.ndarray
    scale: np.ndarray  # sum of |terms| per entry: what the rounding error is proportional to


def spmm_reference(A: scipy.sparse.csr_matrix, B: np.ndarray) -> Reference:
    """`A @ B` in float64 (scipy), with `|A| @ |B|` as the scale."""
    A64 = A.astype(np.float64)
    B64 = B.astype(np.float64)
    value = np.asarray(A64 @ B64)
    A64.data = np.abs(A64.data)
    return Reference(value, np.asarray(A64 @ np.abs(B64)))


def sddmm_reference(A: scipy.sparse.csr_matrix, X: np.ndarray, Y: np.ndarray) -> Reference:
    """`A.multiply(X @ Y.T)` at A's stored entries (storage order) in float64, with its scale."""
    a = A.data.astype(np.float64)
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
    value = a * sampled_dot(A, X64, Y64)
    scale = np.abs(a) * sampled_dot(A, np.abs(X64), np.abs(Y64))
    return Reference(value, scale)


def operands_and_reference(op: str, A: scipy.sparse.csr_matrix, width: int, seed: int) -> tuple[dict, Reference]:
    """The seeded dense operands of `op` on A at `width` (`{"B"}` for SpMM, `{"X", "Y"}` for
    SDDMM, in call order) and the float64 reference they give."""
    m, n = A.shape
    if op == "spmm":
        operands = {"B": dense_operand(n, width, seed, 0)}
        return operands, spmm_reference(A, operands["B"])
    operands = {"X": dense_operand(m, width, seed, 1), "Y": dense_operand(n, width, seed, 2)}
    return operands, sddmm_reference(A, operands["X"], operands["Y"])


# -------------------------------------------------------------------- checks
@dataclass
class Check:
    """Outcome of comparing a result with the reference."""

    ok: bool
    max_rel_err: float  # max |got - ref| / scale over entries with a nonzero scale
    message: str = ""


def check_result(got: np.ndarray, ref: Reference, rtol: float = RTOL) -> Check:
    """Whether `got` equals the reference within `rtol * scale` (plus the smallest float32) everywhere."""
    got = np.asarray(got)
    if got.shape != ref.value.shape:
        return Check(False, math.inf, f"shape {got.shape}, expected {ref.value.shape}")
    if not np.all(np.isfinite(got)):
        return Check(False, math.inf, f"{np.count_nonzero(~np.isfinite(got))} entries are not finite")
    err = np.abs(got.astype(np.float64) - ref.value)
    tol = rtol * ref.scale + np.finfo(np.float32).tiny
    bad = err > tol
    nonzero = ref.scale > 0
    rel = float(np.max(err[nonzero] / ref.scale[nonzero])) if np.any(nonzero) else float(np.max(err, initial=0.0))
    if np.any(bad):
        first = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return Check(
            False,
            rel,
            f"{np.count_nonzero(bad)} of {bad.size} entries differ; first at {tuple(int(i) for i in first)}: "
            f"got {got[first]!r}, expected {ref.value[first]!r} (tolerance {tol[first]:.3g})",
        )
    return Check(True, rel)


# -------------------------------------------------------------------- timing
#: A paired run's calls: at least this many rounds of one call of each library.
MIN_ROUNDS = 10


@dataclass
class Timing:
    """Wall-clock times of repeated calls (seconds), after warm-up."""

    times: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def best(self) -> float:
        return float(np.min(self.times))


def time_calls(
    fn: Callable[[], object],
    repeat: int,
    budget: float,
    min_repeat: int = 3,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
) -> Timing:
    """Time `fn()` after `warmup` calls: up to `repeat` calls, stopping early once `budget`
    seconds are spent (but never before `min_repeat` calls, nor before the first). The garbage
    collector is off while timing, as in `timeit`; `sync` (e.g. a device synchronisation) ends
    every timed call. The package's timer with one candidate."""
    most = max(1, repeat)
    times = timing().time_interleaved(
        {"fn": fn}, budget=budget, min_rounds=max(1, min(min_repeat, most)), max_rounds=most, warmup=warmup, sync=sync
    )
    return Timing(times["fn"])


def interleaved(calls: dict, repeat: int, budget: float, min_rounds: int = MIN_ROUNDS) -> tuple[dict, int]:
    """Median seconds per call of each of `calls`, timed in rounds (one call of each, in turn),
    after two untimed rounds: at least `min_rounds` rounds, then until `budget` seconds or
    `repeat` rounds; and the number of rounds. The package's timer with a paired run's policy."""
    clock = timing()
    times = clock.time_interleaved(calls, budget=budget, min_rounds=min_rounds, max_rounds=repeat, warmup=2)
    return clock.medians(times), len(next(iter(times.values()), []))


@functools.cache
def timing() -> ModuleType:
    """`sparsetir_py.runtime.timing`, the one interleaved-median timer, loaded from its file: an
    import would run `sparsetir_py/__init__` and load Numba in a worker that times a baseline."""
    spec = importlib.util.spec_from_file_location("bench._timing", package_dir() / "runtime" / "timing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# -------------------------------------------------------------------- bandwidth model
@dataclass(frozen=True)
class Traffic:
    """What one call reads and writes, in elements (bytes come from `bytes`): the traffic model
    of one storage format of A.

    `values`: value slots of A read (padding included); `indices`: index entries read (a column
    per slot, or per block in BSR, and the row pointers); `gathers`: rows of the gathered dense
    operand read (B in SpMM, Y in SDDMM: one per slot, or `b` per b x b block); `row_reads`: rows
    of the other dense operand read (X in SDDMM); `row_writes`: rows of C written in SpMM (a part
    that adds into rows another part wrote reads them too: counted twice); `outputs`: values
    written (SDDMM: one per slot).
    """

    values: int
    indices: int
    gathers: int
    row_reads: int
    row_writes: int
    outputs: int

    def bytes(self, width: int, index_bytes: int = 4, value_bytes: int = 4, gathered: int | None = None) -> int:
        """Bytes moved at `width` features; `gathered` replaces the gathered rows (reuse)."""
        rows = self.gathers if gathered is None else gathered
        dense = (rows + self.row_reads + self.row_writes) * width * value_bytes
        return (self.values + self.outputs) * value_bytes + self.indices * index_bytes + dense

    @classmethod
    def csr(cls, op: str, m: int, nnz: int) -> Traffic:
        """CSR: each nonzero's value and column, the row pointers, a row of B (or Y) per nonzero;
        SpMM writes each row of C once, SDDMM reads each row of X once and writes a value per nonzero."""
        if op == "spmm":
            return cls(nnz, nnz + m + 1, nnz, 0, m, 0)
        if op == "sddmm":
            return cls(nnz, nnz + m + 1, nnz, m, 0, nnz)
        raise ValueError(f"in `Traffic.csr`: expected op 'spmm' or 'sddmm', but got {op!r}")

    @classmethod
    def of_parts(cls, op: str, parts: Iterable[tuple[int, ...]], block_size: int = 1) -> Traffic:
        """A decomposed format from its parts' `(slots, rows[, shared])` (`sp.format.decompose(...)
        .parts`: `Part.slots`, the rows the part stores, and how many of them an earlier part
        wrote: SpMM reads those rows of C back). With `block_size` b > 1 each part is BSR: a
        column index and b gathered rows per b x b block, `rows` counted in block rows of b rows.
        Otherwise (ELL, hyb buckets, CSR parts) every slot reads an index and a gathered row, the
        padding's included: what padding costs."""
        if op not in ("spmm", "sddmm"):
            raise ValueError(f"in `Traffic.of_parts`: expected op 'spmm' or 'sddmm', but got {op!r}")
        values = indices = gathers = reads = writes = outputs = 0
        for slots, rows, *shared in parts:
            units = slots // (block_size * block_size)  # blocks (or slots when block_size is 1)
            values += slots
            indices += units + rows // block_size + 1
            gathers += units * block_size
            outputs += slots if op == "sddmm" else 0
            reads += rows if op == "sddmm" else 0
            writes += rows + sum(shared) if op == "spmm" else 0
        return cls(values, indices, gathers, reads, writes, outputs)


def bytes_moved(op: str, m: int, n: int, nnz: int, width: int, index_bytes: int = 4, value_bytes: int = 4) -> int:
    """Bytes a kernel moves in the benchmark's traffic model (no cache reuse of gathered rows).

    - SpMM `C = A @ B`: A's values, column indices and row pointers; one row of B (`width`
      values) gathered per nonzero; C written once: `nnz*(v+i) + (m+1)*i + nnz*w*v + m*w*v`.
    - SDDMM: A's values, indices and row pointers; X read once per row; one row of Y gathered
      per nonzero; one output value per nonzero: `nnz*(v+i) + (m+1)*i + m*w*v + nnz*w*v + nnz*v`.

    The gathers dominate. Caches can serve repeated rows, so the achieved rate in this model may
    exceed the STREAM rate on graphs whose dense operand fits in cache. (`Traffic.csr`.)
    """
    return Traffic.csr(op, m, nnz).bytes(width, index_bytes, value_bytes)


def bytes_with_reuse(
    op: str,
    m: int,
    n: int,
    nnz: int,
    width: int,
    touched: int,
    col_parts: int = 1,
    cache_bytes: int = 32 << 20,
    index_bytes: int = 4,
    value_bytes: int = 4,
    traffic: Traffic | None = None,
) -> int:
    """The traffic of the format that runs (`traffic`, CSR's by default) with the reuse it allows:
    when the slice of the gathered operand (B for SpMM, Y for SDDMM) that one column partition
    reads fits in the last-level cache (`n * width * v / col_parts <= cache_bytes`), each of its
    `touched` rows (distinct columns of A) comes from memory once; otherwise every gather does
    (no reuse). This is the roofline's traffic: the time it takes at the STREAM rate bounds a
    kernel from below unless the lower cache levels serve more than the model counts."""
    traffic = traffic or Traffic.csr(op, m, nnz)
    fits = n * width * value_bytes / max(1, col_parts) <= cache_bytes
    return traffic.bytes(width, index_bytes, value_bytes, gathered=min(touched, traffic.gathers) if fits else None)


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive numbers (nan when there are none)."""
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan
