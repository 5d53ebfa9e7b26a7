"""Checks of a sparse matrix's raw arrays, shared by `sp.ops` (operands) and `sp.data` (files).

scipy's constructors and conversions (compiled code) assume a valid structure: handed a falling
indptr or an index past the shape, they crash the process, write out of bounds or return an
invalid matrix instead of raising. So every array is checked here as stored, before any scipy
routine sees it, and a problem raises `sp.InputError` naming the array and the offending value.
`sp.ops` checks the matrices it is given (`check_matrix`); `sp.data.load_matrix` checks the
arrays it reads from a file before it builds a matrix of them (`check_compressed`, `check_coo`,
`check_dia`). Both then make a canonical CSR matrix with `native` and `canonical`.
"""

from __future__ import annotations

import functools
import numbers
import os

import numpy as np
import scipy.sparse

from .errors import InputError

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: The largest row or column count `sp.ops` takes: the operators' sizes are int32 scalars.
MAX_EXTENT = int(np.iinfo(np.int32).max)


def check_matrix(A, name: str):
    """`A` (or, for LIL/DOK/DIA, its COO form) after checking its raw arrays; `InputError`."""
    check_shape(A.shape, name)
    if A.format == "lil":
        check_lil(A, name)
    if A.format not in ("csr", "csc", "bsr", "coo"):
        # LIL/DOK/DIA are Python-level structures that scipy converts with numpy (LIL's row lengths
        # were checked above); a failure here is a broken matrix, and the COO result is checked.
        try:
            A = A.tocoo()
        except (TypeError, ValueError, IndexError, OverflowError, AttributeError) as e:
            raise InputError(f"`{name}` ({A.format}) cannot be read as a sparse matrix: {e}") from None
    if A.format == "coo":
        check_coo(A.shape, A.coords if hasattr(A, "coords") else (A.row, A.col), A.data, name)
    else:
        check_compressed(A.format, A.shape, A.indptr, A.indices, A.data, name)
    return A


def positive_int(name: str, value, limit: int | None = None, why: str = "", error: type[Exception] = InputError) -> int:
    """`value` as an int: a positive integer (Python or numpy; no bool, float or string), at most
    `limit` (`why` says where that bound comes from); else `error` naming the argument `name`.
    The one such check of the package: operators, rule files and kernels call it."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral) or value < 1:
        raise error(f"{name} must be a positive integer, got {value!r}")
    if limit is not None and value > limit:
        raise error(f"{name} must be at most {limit}{f' ({why})' if why else ''}, got {value!r}")
    return int(value)


def check_shape(shape, name: str, max_extent: int = MAX_EXTENT, why: str = "the kernels' sizes are int32") -> None:
    """Two non-negative integers, each at most `max_extent` (`why` says where that bound comes from)."""
    if not isinstance(shape, tuple) or len(shape) != 2:
        raise InputError(f"`{name}` must be 2-D, got shape {shape!r}")
    if not all(isinstance(n, numbers.Integral) and not isinstance(n, bool | np.bool_) and n >= 0 for n in shape):
        raise InputError(f"`{name}` has an invalid shape {shape!r}: expected two non-negative integers")
    if max(shape) > max_extent:
        # Tiny arrays may declare a huge shape: refuse it here instead of letting an extent wrap.
        raise InputError(f"`{name}` has shape {shape}: at most {max_extent} rows and columns are supported ({why})")


def check_lil(A, name: str) -> None:
    """Each LIL row stores as many values as column indices (scipy's conversion does not check)."""
    try:
        rows, data = A.rows, A.data
        if not (isinstance(rows, np.ndarray) and isinstance(data, np.ndarray)) or rows.shape != data.shape:
            raise InputError(f"`{name}.rows` and `{name}.data` must be object arrays of one shape")
        same = np.fromiter(map(len, rows), np.int64, len(rows)) == np.fromiter(map(len, data), np.int64, len(data))
    except TypeError as e:
        raise InputError(f"`{name}` (lil) holds a row that is not a list: {e}") from None
    if len(rows) != A.shape[0]:
        raise InputError(f"`{name}.rows` has {len(rows)} rows, but the shape is {A.shape}")
    if not same.all():
        row = int(np.argmin(same))
        raise InputError(f"`{name}` (lil) row {row} has {len(rows[row])} column indices but {len(data[row])} values")


def check_coo(shape: tuple[int, int], coords, data, name: str) -> None:
    """The coordinate arrays (row, column) and values of a COO matrix of a checked `shape`."""
    if len(coords) != 2:
        raise InputError(f"`{name}` (coo) must have 2 coordinate arrays, got {len(coords)}")
    whats = [f"`{name}`'s {axis} indices" for axis in ("row", "column")]
    for c, what in zip(coords, whats):
        if not isinstance(c, np.ndarray) or c.ndim != 1 or c.dtype.kind not in "iu":
            raise InputError(f"{what} must be a 1-D integer array, got {describe(c)}")
    check_values(data, len(coords[0]), name)
    for c, n, what in zip(coords, shape, whats):
        check_indices(c, n, what, len(data))


def check_compressed(format: str, shape: tuple[int, int], indptr, indices, data, name: str) -> None:
    """indptr / indices / data of a CSR, CSC or BSR (`format`) matrix of a checked `shape`."""
    major, minor = shape if format != "csc" else shape[::-1]
    if format == "bsr":
        # scipy reads the block size off data.shape[1:]
        if not isinstance(data, np.ndarray) or data.ndim != 3:
            raise InputError(f"`{name}.data` (bsr) must be a 3-D array of blocks, got {describe(data)}")
        r, c = data.shape[1:]
        if r <= 0 or c <= 0 or major % r or minor % c:
            raise InputError(f"`{name}`: block size {(r, c)} does not divide the shape {shape}")
        major, minor = major // r, minor // c
    for label, arr in (("indptr", indptr), ("indices", indices)):
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise InputError(f"`{name}.{label}` must be a 1-D integer array, got {describe(arr)}")
    if len(indptr) != major + 1:
        raise InputError(f"`{name}.indptr` must have {major + 1} entries for shape {shape}, got {len(indptr)}")
    if indptr[0] != 0:
        raise InputError(f"`{name}.indptr` must start at 0, got {indptr[0]}")
    decreasing = indptr[1:] < indptr[:-1]
    if decreasing.any():
        row = int(np.argmax(decreasing))
        raise InputError(
            f"`{name}.indptr` must be non-decreasing, but falls from {indptr[row]} to {indptr[row + 1]} at row {row}"
        )
    nnz = int(indptr[-1])
    if nnz > len(indices):
        raise InputError(f"`{name}.indptr` ends at {nnz}, but `{name}.indices` has only {len(indices)} entries")
    if format == "bsr":
        if data.shape[0] != len(indices):
            raise InputError(f"`{name}.data` has {data.shape[0]} blocks, but `{name}.indices` has {len(indices)}")
        check_values(data[:nnz].reshape(-1), nnz * r * c, name)
    else:
        check_values(data, len(indices), name)
    check_indices(indices[:nnz], minor, f"`{name}.indices`", nnz)


def check_dia(shape: tuple[int, int], offsets, data, name: str) -> None:
    """The diagonals of a DIA matrix of a checked `shape`: `data[k]` holds diagonal `offsets[k]`
    (column j of it at row j - offsets[k]), each offset distinct and inside the matrix."""
    if not isinstance(data, np.ndarray) or data.ndim != 2:
        raise InputError(f"`{name}.data` (dia) must be a 2-D array of diagonals, got {describe(data)}")
    check_kind(data.dtype, f"`{name}.data`")
    m, n = shape
    if not isinstance(offsets, np.ndarray) or offsets.ndim != 1 or offsets.dtype.kind not in "iu":
        raise InputError(f"`{name}.offsets` must be a 1-D integer array, got {describe(offsets)}")
    if len(offsets) != data.shape[0]:
        raise InputError(f"`{name}.offsets` has {len(offsets)} entries, but `{name}.data` {data.shape[0]} diagonals")
    if len(offsets):
        # An offset outside (-m, n) stores nothing; refusing it keeps `j - offset` from overflowing.
        lo, hi = int(offsets.min()), int(offsets.max())
        if lo <= -m or hi >= n:
            raise InputError(f"`{name}.offsets` must lie in ({-m}, {n}), got values in [{lo}, {hi}]")
    if len(np.unique(offsets)) != len(offsets):
        raise InputError(f"`{name}.offsets` must be distinct, got {offsets.tolist()[:20]}")


def check_values(data, length: int, name: str) -> None:
    """O(1): a 1-D array of real numbers (bool, integer or float; NaN is a value) of `length`."""
    if not isinstance(data, np.ndarray) or data.ndim != 1:
        raise InputError(f"`{name}.data` must be a 1-D array, got {describe(data)}")
    if len(data) != length:
        raise InputError(f"`{name}.data` has {len(data)} entries, but the structure stores {length}")
    check_kind(data.dtype, f"`{name}.data`")


def check_kind(dtype: np.dtype, what: str) -> None:
    """Real numbers: bool, integer or float values."""
    if dtype.kind == "c":
        raise InputError(f"{what}: complex values ({dtype}) are not supported")
    if dtype.kind not in "biuf":
        raise InputError(f"{what} must hold real numbers, got dtype {dtype}")


def check_indices(ix, extent: int, what: str, length: int) -> None:
    """A 1-D integer array of `length` entries in [0, extent)."""
    if not isinstance(ix, np.ndarray) or ix.ndim != 1 or ix.dtype.kind not in "iu":
        raise InputError(f"{what} must be a 1-D integer array, got {describe(ix)}")
    if len(ix) != length:
        raise InputError(f"{what} has {len(ix)} entries, expected {length}")
    if len(ix):
        lo, hi = ix.min(), ix.max()
        if lo < 0 or hi >= extent:
            raise InputError(f"{what} must lie in [0, {extent}), got values in [{lo}, {hi}]")


def describe(arr) -> str:
    """An array's dtype and shape, or the type of anything else, for a message."""
    if isinstance(arr, np.ndarray):
        return f"an array of dtype {arr.dtype} and shape {arr.shape}"
    return type(arr).__name__


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype `native` gives stored values of `dtype`: float32/float64 as they are (in native
    byte order), anything else (bool, integers, float16) float64."""
    if dtype in VALUE_DTYPES:
        return dtype
    if dtype.kind == "f" and dtype.newbyteorder("=") in VALUE_DTYPES:  # non-native byte order
        return dtype.newbyteorder("=")
    return np.dtype(np.float64)


def native(A):
    """`A` (checked, CSR/CSC/BSR/COO) with storage that scipy's compiled routines and the kernels
    take: native int32/int64 index arrays of one dtype, float32/float64 values, C-contiguous, no
    storage past indptr[-1]. `A` itself when it has it already; otherwise a new matrix (O(nnz)).

    Values are cast before duplicates are summed, so that they add as in `A @ B` (bool entries
    too), and scipy's routines, which reject float16 or unsigned indices, never see those."""
    data = A.data
    values_dtype = stored_dtype(data.dtype)
    if A.format == "coo":
        index_arrays = tuple(A.coords if hasattr(A, "coords") else (A.row, A.col))
        nnz = len(data)
    else:
        index_arrays = (A.indices, A.indptr)
        nnz = int(A.indptr[-1])
    if (
        data.dtype == values_dtype
        and data.flags.c_contiguous
        and len(data) == nnz
        and len(index_arrays[0]) == nnz
        and all(ix.dtype == index_arrays[0].dtype and ix.dtype in INDEX_DTYPES for ix in index_arrays)
        and all(ix.flags.c_contiguous for ix in index_arrays)
    ):
        return A
    # int64 where an index, the nnz or an extent (indptr[-1] of a COO converted to CSR) may pass
    # int32; a shape of int32 extents keeps int32 for 32-bit indices.
    wide = nnz > MAX_EXTENT or max(A.shape) > MAX_EXTENT or any(ix.dtype.itemsize > 4 for ix in index_arrays)
    idx = np.dtype(np.int64) if wide else np.dtype(np.int32)
    values = np.ascontiguousarray(data[:nnz], dtype=values_dtype)
    # The arrays may still be the caller's (a view, or one already right): whoever modifies the
    # result copies first (`canonical`). type(A) keeps a sparse array an array.
    if A.format == "coo":
        row, col = (np.ascontiguousarray(ix, dtype=idx) for ix in index_arrays)
        return type(A)((values, (row, col)), shape=A.shape)
    indices = np.ascontiguousarray(A.indices[:nnz], dtype=idx)
    indptr = np.ascontiguousarray(A.indptr, dtype=idx)
    if A.format == "bsr":
        return type(A)((values, indices, indptr), shape=A.shape, blocksize=data.shape[1:])
    return type(A)((values, indices, indptr), shape=A.shape)


def canonical(A) -> scipy.sparse.csr_matrix:
    """CSR with entries sorted and unique within each row, from a checked, native `A`.

    Sortedness is computed from the arrays, not read from scipy's cached flags, which go stale
    when a caller changes `indices` in place or sets the flags."""
    csr = A.tocsr()
    indptr, indices = csr.indptr, csr.indices
    increasing = indices[1:] > indices[:-1]
    starts = indptr[1:-1]
    increasing[starts[(starts > 0) & (starts < len(indices))] - 1] = True  # a new row may start lower
    if not increasing.all():
        # A copy: csr's arrays may be the caller's (csr is A, or shares A's arrays), and
        # sum_duplicates works in place.
        csr = csr.copy()
        csr.has_sorted_indices = False  # also clears has_canonical_format, so that both run
        csr.sum_duplicates()
    if csr.indptr.dtype != csr.indices.dtype:  # scipy's conversions pick each array's dtype
        csr = scipy.sparse.csr_matrix(
            (csr.data, csr.indices.astype(np.int64), csr.indptr.astype(np.int64)), shape=csr.shape
        )
    return csr


@functools.cache
def half_the_memory() -> int:
    """Half this machine's physical memory in bytes (32 GiB where the system does not say): what
    one conversion or one file may make the package allocate."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return 2**35
