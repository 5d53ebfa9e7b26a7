"""The per-call host work of a decomposed format, compiled: A's values into the parts' slots, an
SDDMM's results back to A's order, and the inf/NaN check on the rows of B that padding reads.

    gather(data, index, out)       # out[s] = data[index[s]], or 0 where index[s] < 0 (padding)
    rows_finite(B, rows)           # whether every entry of B[rows] is finite (no copy of B[rows])
    all_finite(X)                  # whether every entry of X is finite (no temporary)

What they replace: `np.take` by an `np.intp` index (8 bytes a slot) then zeroing the padding by
a second index, and `np.isfinite(B[rows]).all()` (a copy of those rows and a boolean temporary).
Measured on bcsstk16 in BSR 3 x 3 (296k slots, float32, one thread, paired): `np.take` 0.25-0.5
ms, `gather` 0.2 ms. The gather loads unconditionally (index clamped at 0) and selects 0 for
padding: a branch on 20% random padding (blocks-b8) mispredicts, 35-43 ms against 16-18 ms.
One thread: a parallel region per helper measured slower on this shared 2-core machine.
"""

from __future__ import annotations

import numba
import numpy as np

_FLAGS = {"boundscheck": False, "error_model": "numpy", "cache": True, "nogil": True}


@numba.njit(**_FLAGS)
def _gather(data, index, out):
    zero = out.dtype.type(0)
    for s in range(index.size):
        j = index[s]
        v = data[np.uint64(max(j, 0))]
        out[s] = v if j >= 0 else zero


def gather(data: np.ndarray, index: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`out[s] = data[index[s]]`, 0 where `index[s] < 0`; every index must lie below `len(data)`,
    and `data` must not be empty (the caller's: a conversion's slot index, computed once).
    Returns `out`."""
    _gather(data, index, out)
    return out


@numba.njit(**_FLAGS)
def _rows_finite(B, rows):
    for t in range(rows.size):
        r = rows[t]
        for k in range(B.shape[1]):
            if not np.isfinite(B[r, k]):
                return False
    return True


def rows_finite(B: np.ndarray, rows: np.ndarray) -> bool:
    """Whether every entry of the rows `rows` (in range) of the 2-D array `B` is finite."""
    return bool(_rows_finite(B, rows))


@numba.njit(**_FLAGS)
def _all_finite(flat):
    for t in range(flat.size):  # noqa: SIM110 (Numba compiles the loop, not a generator)
        if not np.isfinite(flat[t]):
            return False
    return True


def all_finite(X: np.ndarray) -> bool:
    """Whether every entry of the C-contiguous array `X` is finite."""
    return bool(_all_finite(X.reshape(-1)))


@numba.njit(**_FLAGS)
def _scaled(data, flat, index, out):
    held = flat.size - 1  # the last slot of `flat` is the extra one of a nonzero no part holds
    zero = out.dtype.type(0)
    for t in range(index.size):
        s = index[t]
        out[t] = data[t] * flat[s] if s < held else zero


def scaled(data: np.ndarray, flat: np.ndarray, index: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`out[t] = data[t] * flat[index[t]]`, 0 where `index[t]` is `flat`'s last (extra) slot:
    an SDDMM computed on a mask of ones, A's values applied while its results come back in A's
    order (`parts.Conversion.scaled_values`). Returns `out`."""
    _scaled(data, flat, index, out)
    return out


#: Elements per chunk of `same` (a temporary of this many booleans, not of the arrays' size).
SAME_CHUNK = 1 << 16


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the 1-D contiguous arrays `a` and `b` hold the same bytes (NaNs compare by bits),
    in chunks that stop at the first difference. (numpy's vectorised compare: 0.1 ms on 290k
    float32 where a Numba loop with an early exit ran at scalar speed, 0.27 ms.)"""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize, np.uint8)
    a, b = a.view(view), b.view(view)
    return all(np.array_equal(a[c : c + SAME_CHUNK], b[c : c + SAME_CHUNK]) for c in range(0, a.size, SAME_CHUNK))
