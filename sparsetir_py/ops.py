"""Ready-made operators on scipy sparse matrices, compiled through the project's own pipeline.

    C = sp.ops.spmm(A, B)                  # A @ B, a numpy array
    S = sp.ops.sddmm(A, X, Y)              # A's structure, values A * (X @ Y.T) (explicit zeros kept)

Kernels are cached per (operator, format, value dtype, index dtype, target, schedule, and the
feature width on CUDA, where it is specialised), so calling again with new values does not
recompile.

Inputs are checked as stored, before any scipy routine that assumes a valid structure (format
conversion, `sum_duplicates`) sees them: a broken indptr, out-of-range indices, arrays of the
wrong length or dtype, or a shape the arrays do not fit raise `sp.InputError`. Unsorted or
duplicated entries, other scipy formats, explicit zeros and NaN values are valid and give
scipy's answer. The O(nnz) structure check runs once per matrix structure: a record keyed on the
identity of `indptr`/`indices` (held weakly) and the shape remembers what was checked. Mutating
those arrays in place afterwards is not detected.

Results never share memory with an input: `spmm` returns a new array, and `sddmm`'s matrix owns
copies of A's `indptr`/`indices` (as scipy's `A.multiply` does), so changing it in place
(`eliminate_zeros`, `sort_indices`) leaves A alone.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Callable

import numpy as np
import scipy.sparse

from . import script as T
from .driver import compile as compile_pipeline
from .errors import InputError
from .ir.func import PrimFunc
from .runtime.kernel import Kernel

_KERNELS: dict[tuple, Kernel] = {}
_CHECKED: dict[tuple, tuple] = {}

# Below this many multiply-adds (nnz x feature width) a CPU call runs on one thread: waking
# Numba's pool costs about 70 us (OpenMP, passive wait), more than such a call computes (cora,
# width 32: 97 us on one thread, 169 us on two), as torch's grain size does.
PARALLEL_GRAIN = 1 << 21


def spmm_script(idtype: str = "int32", dtype: str = "float32") -> PrimFunc:
    """C = A @ B with A in CSR (the script of DESIGN.md §3)."""

    @T.prim_func
    def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
              m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, K), dtype)
        with T.sp_iter([I, J, K], "SRS", "csrmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return csrmm


def sddmm_script(idtype: str = "int32", dtype: str = "float32") -> PrimFunc:
    """C[i, j] = A[i, j] * sum_k X[i, k] * Y[j, k] over A's nonzeros."""

    @T.prim_func
    def sddmm(a: T.handle, x: T.handle, y: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
              m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        X = T.match_sparse_buffer(x, (I, K), dtype)
        Y = T.match_sparse_buffer(y, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, J), dtype)
        with T.sp_iter([I, J, K], "SSR", "sddmm") as [i, j, k]:
            with T.init():
                C[i, j] = 0.0
            C[i, j] = C[i, j] + A[i, j] * X[i, k] * Y[j, k]

    return sddmm


SCRIPTS = {"spmm": spmm_script, "sddmm": sddmm_script}


# -------------------------------------------------------------------- inputs
def _value_dtype(*dtypes) -> np.dtype:
    for d in dtypes:
        if np.issubdtype(d, np.complexfloating):
            raise InputError(f"complex values ({d}) are not supported")
        if np.dtype(d).kind not in "biuf":
            raise InputError(f"values must be real numbers, got dtype {d}")
    if all(np.dtype(d) == np.float32 for d in dtypes):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _as_csr(A, name: str = "A") -> scipy.sparse.csr_matrix:
    """A canonical CSR view of `A` (sorted, no duplicates); `A` itself when it already is one.

    The raw arrays are checked first (`_check_raw`), so that no scipy routine that assumes a valid
    structure (conversion, `sum_duplicates`, written in C++) ever sees a broken one: those crash or
    answer wrongly instead of raising."""
    if not (scipy.sparse.issparse(A)):
        raise InputError(f"`{name}` must be a scipy sparse matrix, got {type(A).__name__}")
    if A.ndim != 2:
        raise InputError(f"`{name}` must be 2-D, got {A.ndim}-D")
    if not (A.format == "csr" and _structure_checked(A)):
        _check_raw(A, name)
    csr = A.tocsr()
    if len(csr.indices) != csr.nnz or len(csr.data) != csr.nnz:  # storage past indptr[-1]: not stored
        csr = scipy.sparse.csr_matrix((csr.data[: csr.nnz], csr.indices[: csr.nnz], csr.indptr), shape=csr.shape)
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    if csr.indptr.dtype != csr.indices.dtype:
        csr = scipy.sparse.csr_matrix((csr.data, csr.indices.astype(np.int64), csr.indptr.astype(np.int64)),
                                      shape=csr.shape)  # fmt: skip
    return csr


def _check_raw(A, name: str) -> None:
    """Check the arrays of a scipy matrix as stored, before scipy touches them; `InputError`."""
    shape = A.shape
    if len(shape) != 2 or not all(isinstance(n, numbers.Integral) and n >= 0 for n in shape):
        raise InputError(f"`{name}` has an invalid shape {shape}")
    if A.format in ("csr", "csc", "bsr"):
        _check_compressed(A, name)
    elif A.format == "coo":
        coords = A.coords if hasattr(A, "coords") else (A.row, A.col)
        _check_values(A.data, len(coords[0]), name)
        for axis, (c, n) in enumerate(zip(coords, shape)):
            _check_indices(c, n, f"`{name}`'s {('row', 'column')[axis]} indices", len(A.data))
    else:  # lil, dok, dia: Python-level structures that scipy converts safely; check the result
        csr = A.tocsr()
        _check_compressed(csr, name)


def _check_compressed(A, name: str) -> None:
    """indptr / indices / data of a CSR, CSC or BSR matrix."""
    major, minor = A.shape if A.format != "csc" else A.shape[::-1]
    if A.format == "bsr":
        r, c = A.blocksize
        if r <= 0 or c <= 0 or major % r or minor % c:
            raise InputError(f"`{name}`: block size {A.blocksize} does not divide the shape {A.shape}")
        major, minor = major // r, minor // c
    indptr, indices, data = A.indptr, A.indices, A.data
    for label, arr in (("indptr", indptr), ("indices", indices)):
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise InputError(f"`{name}.{label}` must be a 1-D integer array, got {_describe(arr)}")
    if len(indptr) != major + 1:
        raise InputError(f"`{name}.indptr` must have {major + 1} entries for shape {A.shape}, got {len(indptr)}")
    if indptr[0] != 0:
        raise InputError(f"`{name}.indptr` must start at 0, got {indptr[0]}")
    if major and np.any(indptr[1:] < indptr[:-1]):
        raise InputError(f"`{name}.indptr` must be non-decreasing")
    nnz = int(indptr[-1])
    if nnz > len(indices):
        raise InputError(f"`{name}.indptr` ends at {nnz}, but `{name}.indices` has only {len(indices)} entries")
    if A.format == "bsr":
        if not isinstance(data, np.ndarray) or data.ndim != 3 or data.shape[0] < nnz or data.shape[1:] != A.blocksize:
            raise InputError(f"`{name}.data` must have shape ({nnz}, {r}, {c}), got {_describe(data)}")
        _check_values(data[:nnz].reshape(-1), nnz * r * c, name)
    else:
        _check_values(data, len(indices), name)
    _check_indices(indices[:nnz], minor, f"`{name}.indices`", nnz)


def _check_values(data, length: int, name: str) -> None:
    if not isinstance(data, np.ndarray) or data.ndim != 1:
        raise InputError(f"`{name}.data` must be a 1-D array, got {_describe(data)}")
    if len(data) != length:
        raise InputError(f"`{name}.data` has {len(data)} entries, but the structure stores {length}")
    if not (np.issubdtype(data.dtype, np.number) or data.dtype == np.bool_):
        raise InputError(f"`{name}.data` must hold numbers, got dtype {data.dtype}")


def _check_indices(ix, extent: int, what: str, length: int) -> None:
    if not isinstance(ix, np.ndarray) or ix.ndim != 1 or not np.issubdtype(ix.dtype, np.integer):
        raise InputError(f"{what} must be a 1-D integer array, got {_describe(ix)}")
    if len(ix) != length:
        raise InputError(f"{what} has {len(ix)} entries, expected {length}")
    if len(ix) and (ix.min() < 0 or ix.max() >= extent):
        raise InputError(f"{what} must lie in [0, {extent}), got values in [{ix.min()}, {ix.max()}]")


def _describe(arr) -> str:
    if isinstance(arr, np.ndarray):
        return f"an array of dtype {arr.dtype} and shape {arr.shape}"
    return type(arr).__name__


def _dense(X, name: str, rows: int, dtype: np.dtype) -> np.ndarray:
    """`X` as a C-contiguous 2-D array of `dtype` (a copy only where needed)."""
    if scipy.sparse.issparse(X):
        raise InputError(f"`{name}` must be a dense array, got a scipy sparse matrix")
    try:
        arr = np.asarray(X)
        if arr.dtype.kind not in "biuf":
            raise InputError(f"`{name}` must hold real numbers, got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise InputError(f"`{name}` must be a 2-D array, got shape {arr.shape}")
        if arr.shape[0] != rows:
            raise InputError(f"`{name}` must have {rows} rows, got {arr.shape[0]}")
        return np.ascontiguousarray(arr, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise InputError(f"`{name}` cannot be read as an array of {dtype}: {e}") from None


def _structure_checked(csr) -> bool:
    """Whether this exact structure (same indptr/indices objects, same shape) passed the check."""
    key = (id(csr.indptr), id(csr.indices), csr.shape)
    entry = _CHECKED.get(key)
    return entry is not None and entry[0]() is csr.indptr and entry[1]() is csr.indices


def _remember_structure(csr) -> None:
    key = (id(csr.indptr), id(csr.indices), csr.shape)
    _CHECKED[key] = (weakref.ref(csr.indptr), weakref.ref(csr.indices))


def _kernel(op: str, target: str, idtype: str, dtype: str, feat: int, schedule) -> Kernel:
    schedule = _resolve_schedule(op, target, schedule)
    key = (op, "csr", dtype, idtype, target, feat if target == "cuda" else None, schedule)
    kernel = _KERNELS.get(key)
    if kernel is None:
        func = SCRIPTS[op](idtype, dtype)
        # The feature width stays a run-time value on the CPU: a constant trip count makes LLVM
        # unroll the feature loop completely instead of vectorising it (measured: 2-3x slower).
        specialize = {"feat": feat} if target == "cuda" else None
        kernel = compile_pipeline(func, target, schedule=schedule, specialize=specialize)
        _KERNELS[key] = kernel
    return kernel


def _resolve_schedule(op: str, target: str, schedule) -> Callable:
    """`None` -> the default for (op, target); a name -> the shipped schedule; a callable as is."""
    from schedules import sddmm as sddmm_schedules
    from schedules import spmm as spmm_schedules

    module = {"spmm": spmm_schedules, "sddmm": sddmm_schedules}[op]
    if target not in module.DEFAULT:
        raise InputError(f"unknown target {target!r}: expected one of {', '.join(module.DEFAULT)}")
    if schedule is None:
        return module.DEFAULT[target]
    if isinstance(schedule, str):
        if schedule not in module.SCHEDULES:
            raise InputError(f"unknown {op} schedule {schedule!r}: expected one of {', '.join(module.SCHEDULES)}")
        return module.SCHEDULES[schedule]
    return schedule


def _run(kernel: Kernel, csr, width: int, **arrays) -> None:
    checked = _structure_checked(csr)
    small = kernel.target == "cpu" and csr.nnz * width < PARALLEL_GRAIN
    kernel(**arrays, check_structure=not checked, **({"threads": 1} if small else {}))
    if not checked:
        _remember_structure(csr)


# -------------------------------------------------------------------- operators
def spmm(A, B, format: str = "csr", target: str = "cpu", schedule: Callable | str | None = None) -> np.ndarray:
    """`A @ B` for a scipy sparse `A` and a dense `B`, with a kernel generated by the pipeline."""
    if format != "csr":
        raise InputError(f"format {format!r} is not available yet; use format='csr'")
    csr = _as_csr(A)
    dtype = _value_dtype(csr.dtype, np.asarray(B).dtype)
    m, n = csr.shape
    B = _dense(B, "B", n, dtype)
    feat = B.shape[1]
    idtype = str(csr.indices.dtype)
    kernel = _kernel("spmm", target, idtype, str(dtype), feat, schedule)
    C = np.empty((m, feat), dtype=dtype)
    data = np.ascontiguousarray(csr.data, dtype=dtype)
    sizes = {"feat": feat} if "feat" in kernel.parameters else {}
    _run(kernel, csr, feat, a=data, b=B, c=C, indptr=csr.indptr, indices=csr.indices, m=m, n=n, nnz=csr.nnz, **sizes)
    return C


def sddmm(A, X, Y, target: str = "cpu", schedule: Callable | str | None = None) -> scipy.sparse.csr_matrix:
    """A CSR matrix with A's structure (explicit zeros kept) and values `A.multiply(X @ Y.T)`."""
    csr = _as_csr(A)
    m, n = csr.shape
    dtype = _value_dtype(csr.dtype, np.asarray(X).dtype, np.asarray(Y).dtype)
    X = _dense(X, "X", m, dtype)
    Y = _dense(Y, "Y", n, dtype)
    if X.shape[1] != Y.shape[1]:
        raise InputError(f"`X` and `Y` must have the same number of columns, got {X.shape[1]} and {Y.shape[1]}")
    feat = X.shape[1]
    idtype = str(csr.indices.dtype)
    kernel = _kernel("sddmm", target, idtype, str(dtype), feat, schedule)
    out = np.empty(csr.nnz, dtype=dtype)
    data = np.ascontiguousarray(csr.data, dtype=dtype)
    sizes = {"feat": feat} if "feat" in kernel.parameters else {}
    _run(
        kernel,
        csr,
        feat,
        a=data,
        x=X,
        y=Y,
        c=out,
        indptr=csr.indptr,
        indices=csr.indices,
        m=m,
        n=n,
        nnz=csr.nnz,
        **sizes,
    )
    # The result owns its structure (copies of A's indptr/indices, as scipy's `A.multiply` gives):
    # an in-place change of the result (`eliminate_zeros`, `sort_indices`) must not reach A.
    # `_with_data` skips the constructor's structure check (~20 us), which A passed already.
    with_data = getattr(csr, "_with_data", None)
    if with_data is None:
        return scipy.sparse.csr_matrix((out, csr.indices.copy(), csr.indptr.copy()), shape=csr.shape, copy=False)
    S = with_data(out, copy=False)
    S.indices, S.indptr = csr.indices.copy(), csr.indptr.copy()
    return S
