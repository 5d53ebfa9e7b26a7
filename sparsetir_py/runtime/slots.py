"""The per-call host passes of `sp.ops`, compiled: A's values into a decomposed format's slots (or a
converted input's into CSR's order, `operands.Reordered`), an
SDDMM's results back to A's order, and the inf/NaN check on the rows of B that padding reads.

    gather(data, index, out)       # out[s] = data[index[s]], or 0 where index[s] < 0 (padding)
    rows_finite(B, rows)           # whether every entry of B[rows] is finite (no copy of B[rows])
    all_finite(X)                  # whether every entry of X is finite (no temporary)

What they replace: `np.take` by an `np.intp` index (8 bytes a slot) then zeroing the padding by
a second index, and `np.isfinite(B[rows]).all()` (a copy of those rows and a boolean temporary).
Measured on bcsstk16 in BSR 3 x 3 (296k slots, float32, one thread, paired): `np.take` 0.25-0.5
ms, `gather` 0.2 ms. The gather loads unconditionally (index clamped at 0) and selects 0 for
padding: a branch on 20% random padding (blocks-b8) mispredicts, 35-43 ms against 16-18 ms.
From `PARALLEL_ELEMENTS` on, `gather`, `scaled` and `same` run on the call's threads (a parallel
region costs 2-45 us, by how idle OpenMP threads wait): quiet, 2 threads, mesh-b3's 1.6M
float32 values, `same` 0.44 -> 0.2x ms.
"""

from __future__ import annotations

import numba
import numpy as np

from ..omp import current_threads
from .kernel import run_capped

_FLAGS = {"boundscheck": False, "error_model": "numpy", "cache": True, "nogil": True}
#: Below this many elements a helper runs on one thread, whatever the call's `threads`.
PARALLEL_ELEMENTS = 1 << 17


def _pieces(size: int, threads: int | None) -> int | None:
    """The thread count a helper over `size` elements runs on: None for one thread (below
    `PARALLEL_ELEMENTS`, or `threads=1`), else `threads` (None: Numba's setting)."""
    if size < PARALLEL_ELEMENTS or threads == 1:
        return None
    count = current_threads(threads)
    return count if count > 1 else None


def _run(serial, parallel, threads: int | None, *args):
    """`serial(*args)` on one thread, or `parallel(*args)` on `threads` (`_pieces`)."""
    if threads is None:
        return serial(*args)
    # The count is an argument: `numba.get_num_threads()` inside would keep Numba from caching.
    return run_capped(parallel, [*args, threads], threads)


@numba.njit(inline="always", **_FLAGS)
def _gather_piece(data, index, out, lo, hi):
    zero = out.dtype.type(0)
    for s in range(lo, hi):
        j = index[s]
        v = data[np.uint64(max(j, 0))]
        out[s] = v if j >= 0 else zero


@numba.njit(**_FLAGS)
def _gather(data, index, out):
    _gather_piece(data, index, out, 0, index.size)


@numba.njit(parallel=True, **_FLAGS)
def _gather_parallel(data, index, out, pieces):
    for p in numba.prange(pieces):
        _gather_piece(data, index, out, index.size * p // pieces, index.size * (p + 1) // pieces)


def gather(data: np.ndarray, index: np.ndarray, out: np.ndarray, threads: int | None = 1) -> np.ndarray:
    """`out[s] = data[index[s]]`, 0 where `index[s] < 0`; every index must lie below `len(data)`,
    and `data` must not be empty (the caller's: a conversion's slot index, computed once).
    `threads`: as a kernel's (None: Numba's setting; one thread below `PARALLEL_ELEMENTS`).
    Returns `out`."""
    _run(_gather, _gather_parallel, _pieces(index.size, threads), data, index, out)
    return out


@numba.njit(**_FLAGS)
def _rows_finite(bits, rows, exponent):
    for t in range(rows.size):
        row = bits[rows[t]]
        bad = 0
        for k in range(row.size):  # no exit inside: vectorised (a count of all-ones exponents)
            bad += (row[k] & exponent) == exponent
        if bad:
            return False
    return True


#: The exponent bits of a float by its size: all ones for inf and NaN only.
EXPONENT = {4: (np.uint32, np.uint32(0x7F800000)), 8: (np.uint64, np.uint64(0x7FF0000000000000))}


def rows_finite(B: np.ndarray, rows: np.ndarray) -> bool:
    """Whether every entry of the rows `rows` (in range) of the 2-D array `B` is finite. A float32
    or float64 C-contiguous `B` is read as integers (an entry is inf or NaN where its exponent
    bits are all ones), a row at a time without an exit inside it: vectorised (bcsstk16's 557
    rows that BSR 3 x 3 padding reads, width 512: 165 us -> 20-30 us with `np.isfinite` per entry)."""
    exponent = EXPONENT.get(B.dtype.itemsize) if B.dtype.kind == "f" and B.flags.c_contiguous else None
    if exponent is None:
        return bool(np.isfinite(B[rows]).all())
    view, mask = exponent
    return bool(_rows_finite(B.view(view), rows, mask))


@numba.njit(**_FLAGS)
def _all_finite(flat):
    for t in range(flat.size):  # noqa: SIM110 (Numba compiles the loop, not a generator)
        if not np.isfinite(flat[t]):
            return False
    return True


def all_finite(X: np.ndarray) -> bool:
    """Whether every entry of the C-contiguous array `X` is finite."""
    return bool(_all_finite(X.reshape(-1)))


@numba.njit(inline="always", **_FLAGS)
def _scaled_piece(data, flat, index, out, lo, hi):
    held = flat.size - 1  # the last slot of `flat` is the extra one of a nonzero no part holds
    zero = out.dtype.type(0)
    for t in range(lo, hi):
        s = index[t]
        out[t] = data[t] * flat[s] if s < held else zero


@numba.njit(**_FLAGS)
def _scaled(data, flat, index, out):
    _scaled_piece(data, flat, index, out, 0, index.size)


@numba.njit(parallel=True, **_FLAGS)
def _scaled_parallel(data, flat, index, out, pieces):
    for p in numba.prange(pieces):
        _scaled_piece(data, flat, index, out, index.size * p // pieces, index.size * (p + 1) // pieces)


def scaled(
    data: np.ndarray, flat: np.ndarray, index: np.ndarray, out: np.ndarray, threads: int | None = 1
) -> np.ndarray:
    """`out[t] = data[t] * flat[index[t]]`, 0 where `index[t]` is `flat`'s last (extra) slot:
    an SDDMM computed on a mask of ones, A's values applied while its results come back in A's
    order (`parts.Conversion.scaled_values`). `threads` as `gather`'s. Returns `out`."""
    _run(_scaled, _scaled_parallel, _pieces(index.size, threads), data, flat, index, out)
    return out


#: Elements per chunk of `same`: the compare stops at the end of the first chunk that differs.
SAME_CHUNK = 1 << 12


@numba.njit(inline="always", **_FLAGS)
def _same_chunks(a, b, first, last):
    """Whether chunks [first, last) of `a` and `b` are equal, stopping at the first that is not."""
    for c in range(first, last):
        base = c * SAME_CHUNK
        acc = np.uint64(0)
        for t in range(SAME_CHUNK):  # a constant trip count: vectorised, no exit inside
            acc |= np.uint64(a[np.uint64(base + t)] ^ b[np.uint64(base + t)])
        if acc != 0:
            return False
    return True


@numba.njit(inline="always", **_FLAGS)
def _same_tail(a, b):
    acc = np.uint64(0)
    for t in range(a.size // SAME_CHUNK * SAME_CHUNK, a.size):
        acc |= np.uint64(a[t] ^ b[t])
    return acc == 0


@numba.njit(**_FLAGS)
def _same(a, b):
    return _same_chunks(a, b, 0, a.size // SAME_CHUNK) and _same_tail(a, b)


@numba.njit(parallel=True, **_FLAGS)
def _same_parallel(a, b, pieces):
    full = a.size // SAME_CHUNK
    differ = np.zeros(pieces, np.uint8)
    for p in numba.prange(pieces):  # each piece stops at its first differing chunk
        differ[p] = not _same_chunks(a, b, full * p // pieces, full * (p + 1) // pieces)
    return differ.sum() == 0 and _same_tail(a, b)


def same(a: np.ndarray, b: np.ndarray, threads: int | None = 1) -> bool:
    """Whether the 1-D contiguous arrays `a` and `b` hold the same bytes (NaNs compare by bits),
    in chunks of `SAME_CHUNK` that stop at the first difference (on several threads, each at the
    first of its range; `threads` as `gather`'s). Measured on 290k float32 (bcsstk16's values),
    one thread: 60 us, where numpy's `array_equal` in chunks took 90 us and a loop that exits at
    the first differing element (not vectorised) 270 us; on mesh-b3's 1.6M, 0.44 ms on one thread."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize, np.uint8)
    return bool(_run(_same, _same_parallel, _pieces(a.size, threads), a.view(view), b.view(view)))
