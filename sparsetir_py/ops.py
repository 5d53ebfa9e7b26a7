"""Ready-made operators on scipy sparse matrices, compiled through the project's own pipeline.

    C = sp.ops.spmm(A, B)                  # A @ B, a numpy array
    S = sp.ops.sddmm(A, X, Y)              # A's structure, values A * (X @ Y.T) (explicit zeros kept)

Kernels are cached per (operator, format, value dtype, index dtype, target, schedule, and the
feature width on CUDA, where it is specialised), so calling again with new values does not
recompile.

Inputs are checked as stored, before any scipy routine that assumes a valid structure (format
conversion, `sum_duplicates`) sees them: a broken indptr, out-of-range indices, arrays of the
wrong length or dtype, or a shape the arrays do not fit raise `sp.InputError`, as does a shape
past 2**31 - 1 rows or columns (the kernels' sizes are int32). Unsorted or duplicated entries,
other scipy formats, explicit zeros, NaN values, any integer index dtype (cast to int32/int64)
and bool/integer/float16 values (cast to float64) are valid and give scipy's answer. The O(nnz)
structure check runs once per matrix structure: a record keyed on the identity of
`indptr`/`indices` (held weakly, dropped with them) and the shape remembers what was checked;
`data` is re-checked (O(1)) on every call. Mutating `indptr`/`indices` in place afterwards is not
detected.

Results never share memory with an input: `spmm` returns a new array, and `sddmm`'s matrix owns
copies of A's `indptr`/`indices` (as scipy's `A.multiply` does), so changing it in place
(`eliminate_zeros`, `sort_indices`) leaves A alone.
"""

from __future__ import annotations

import numbers
import os
import weakref
from collections.abc import Callable

import numpy as np
import scipy.sparse

from . import script as T
from .driver import compile as compile_pipeline
from .errors import FormatError, InputError
from .inputs import INDEX_DTYPES as _INDEX_DTYPES
from .inputs import VALUE_DTYPES as _VALUE_DTYPES
from .inputs import canonical as _canonical
from .inputs import check_kind as _check_kind
from .inputs import check_matrix as _checked
from .inputs import check_values as _check_values
from .inputs import native as _native
from .ir.func import PrimFunc
from .runtime.kernel import Kernel

_KERNELS: dict[tuple, Kernel] = {}
_CHECKED: dict[tuple, tuple] = {}

# Below this many multiply-adds (nnz x feature width) a CPU call runs on one thread (None: from
# how idle OpenMP threads wait, `_parallel_grain`).
PARALLEL_GRAIN: int | None = None
# Where idle OpenMP threads sleep (`OMP_WAIT_POLICY=passive`, `GOMP_SPINCOUNT=0`), waking Numba's
# pool costs about 45 us a call here, more than a small call computes (cora, width 32: 97 us on
# one thread, 169 us on two), as torch's grain size does. Where they spin a while after each
# parallel region (OpenMP's default), a region costs about 1.5 us and two threads win on every
# matrix measured down to karate (156 nonzeros; olm1000 width 32: 13 us vs 15 us on one).
PARALLEL_GRAIN_SLEEPING = 1 << 21
PARALLEL_GRAIN_SPINNING = 1 << 14


def _parallel_grain() -> int:
    """`PARALLEL_GRAIN` if set, else the grain for how this process's OpenMP threads wait."""
    if PARALLEL_GRAIN is not None:
        return PARALLEL_GRAIN
    env = os.environ
    sleeping = (
        env.get("OMP_WAIT_POLICY", "").strip().lower() == "passive" or env.get("GOMP_SPINCOUNT", "").strip() == "0"
    )
    return PARALLEL_GRAIN_SLEEPING if sleeping else PARALLEL_GRAIN_SPINNING


def spmm_script(idtype: str = "int32", dtype: str = "float32") -> PrimFunc:
    """C = A @ B with A in CSR (the script of docs/design.md §3)."""

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
# str(dtype) runs Python code in numpy (~2.5 us, twice a call); the kernel key needs the names.
_DTYPE_NAMES = {d: d.name for d in _INDEX_DTYPES + _VALUE_DTYPES}


def _value_dtype(*dtypes: np.dtype) -> np.dtype:
    """float32 when every operand is float32, float64 otherwise (the kinds were checked before)."""
    if all(d == np.float32 for d in dtypes):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _as_csr(A, name: str = "A") -> scipy.sparse.csr_matrix:
    """A canonical CSR form of `A`: sorted, no duplicates, native int32/int64 index arrays of one
    dtype, float32/float64 values; `A` itself when it already is one.

    A matrix whose structure passed an earlier call (`_structure_checked`) only gets the O(1)
    checks of its values. Otherwise the raw arrays are checked first (`_checked`), so that no scipy
    routine that assumes a valid structure (conversion, `sum_duplicates`, written in C++) ever sees
    a broken one: those crash or answer wrongly instead of raising."""
    if not scipy.sparse.issparse(A):
        raise InputError(f"`{name}` must be a scipy sparse matrix, got {type(A).__name__}")
    if A.format == "csr" and _structure_checked(A):
        # The values may have been replaced since the structure was checked.
        _check_values(A.data, len(A.indices), name)
        return A
    return _canonical(_native(_checked(A, name)))


def _operand(X, name: str) -> np.ndarray:
    """A dense operand as a 2-D array of real numbers (not yet converted); `InputError`."""
    if scipy.sparse.issparse(X):
        raise InputError(f"`{name}` must be a dense array, got a scipy sparse matrix")
    if not isinstance(X, np.ndarray):
        try:
            X = np.asarray(X)
        except (TypeError, ValueError) as e:  # ragged nested lists, objects numpy cannot read
            raise InputError(f"`{name}` cannot be read as an array: {e}") from None
    _check_kind(X.dtype, f"`{name}`")
    if X.ndim != 2:
        raise InputError(f"`{name}` must be a 2-D array, got shape {X.shape}")
    return X


def _dense(X: np.ndarray, name: str, rows: int, dtype: np.dtype) -> np.ndarray:
    """A checked operand as a C-contiguous array of `dtype` (a copy only where needed)."""
    if X.shape[0] != rows:
        raise InputError(f"`{name}` must have {rows} rows, got {X.shape[0]}")
    return np.ascontiguousarray(X, dtype=dtype)


def _structure_checked(csr) -> bool:
    """Whether this exact structure (same indptr/indices objects, same shape) passed the check."""
    key = (id(csr.indptr), id(csr.indices), csr.shape)
    entry = _CHECKED.get(key)
    return entry is not None and entry[0]() is csr.indptr and entry[1]() is csr.indices


def _remember_structure(csr) -> None:
    key = (id(csr.indptr), id(csr.indices), csr.shape)

    def forget(_ref, key=key):
        # Drop the record once either array is gone: one record per live structure, not per call.
        entry = _CHECKED.get(key)
        if entry is not None and (entry[0]() is None or entry[1]() is None):
            del _CHECKED[key]

    _CHECKED[key] = (weakref.ref(csr.indptr, forget), weakref.ref(csr.indices, forget))


def _kernel(op: str, target: str, idtype: str, dtype: str, feat: int, schedule) -> Kernel:
    schedule = _resolve_schedule(op, target, schedule)
    fixed = _fixed_width(target, schedule)
    key = (op, "csr", dtype, idtype, target, feat if fixed else None, schedule)
    kernel = _KERNELS.get(key)
    if kernel is None:
        func = SCRIPTS[op](idtype, dtype)
        specialize = {"feat": feat} if fixed else None
        kernel = compile_pipeline(func, target, schedule=schedule, specialize=specialize)
        _KERNELS[key] = kernel
    return kernel


def _fixed_width(target: str, schedule) -> bool:
    """Whether kernels are compiled for one feature width (`feat` a constant): always on CUDA; on
    the CPU where the schedule asks for it (`schedule.fixed_width = True`). By default the width
    stays a run-time value on the CPU: with a constant trip count LLVM unrolls the feature loop
    of a plain dot product completely instead of vectorising it (measured: 2-4x slower at width
    32), while a schedule that keeps several accumulators (`csr_cpu_rows_x4`) gains from it."""
    return target == "cuda" or bool(getattr(schedule, "fixed_width", False))


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


def _threads(threads, target: str) -> int | None:
    """`threads=` of an operator: None, or a positive integer on the CPU target; `InputError`."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise InputError(f"`threads` must be a positive integer, got {threads!r}")
    if target != "cpu":
        raise InputError(f"`threads` caps the Numba threads of the CPU target; target {target!r} takes none")
    return int(threads)


def _thread_args(target: str, work: int, threads: int | None) -> dict:
    """The kernel's `threads=`: the caller's, else 1 below the parallel grain on the CPU."""
    if threads is not None:
        return {"threads": threads}
    return {"threads": 1} if target == "cpu" and work < _parallel_grain() else {}


def _spmm_operand(B):
    """(B as a 2-D operand, whether it was a vector): a 1-D `B` is SpMV, computed as one column."""
    if not scipy.sparse.issparse(B) and not isinstance(B, np.ndarray):
        try:
            B = np.asarray(B)
        except (TypeError, ValueError) as e:  # ragged nested lists, objects numpy cannot read
            raise InputError(f"`B` cannot be read as an array: {e}") from None
    if isinstance(B, np.ndarray) and B.ndim == 1:
        return B.reshape(-1, 1), True
    return B, False


def _output(out, shape: tuple[int, ...], dtype: np.dtype, inputs: tuple) -> np.ndarray:
    """The array `spmm` writes its result into: `out` after checking it, or a new one."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise InputError(f"`out` must be a numpy array, got {type(out).__name__}")
    if out.shape != shape:
        raise InputError(f"`out` must have shape {shape}, got {out.shape}")
    if out.dtype != dtype:
        raise InputError(f"`out` must have dtype {dtype} (the result's), got {out.dtype}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise InputError("`out` must be a writeable C-contiguous array")
    if any(isinstance(x, np.ndarray) and np.shares_memory(out, x) for x in inputs):
        raise InputError("`out` must not share memory with an input")
    return out


def _run(kernel: Kernel, csr, width: int, threads: int | None, repeat: bool, **args) -> Callable[[dict], None] | None:
    """Run `kernel` on `args`; with `repeat` (CPU), return a runner for later calls whose arguments
    have the same signature (`Kernel.runner`), else None."""
    checked = _structure_checked(csr)
    thread_args = _thread_args(kernel.target, csr.nnz * width, threads)
    run = None
    if repeat and kernel.target == "cpu":
        run = kernel.runner(check_structure=not checked, **thread_args, **args)
        run(args)
    else:
        kernel(**args, check_structure=not checked, **thread_args)
    if not checked:
        _remember_structure(csr)
    return run


# -------------------------------------------------------------------- repeated calls
# A call that converted nothing (A a canonical CSR matrix, the dense operands C-contiguous arrays
# of the result's dtype) leaves its kernel's runner here, keyed by what its checks depend on; a
# later call with the same key only checks what may have changed since (A.data's length and
# layout, the operands' layout: O(1)) and runs it. On a 4k-nonzero matrix at width 32 a call
# costs ~10 us instead of ~28 us, of which the kernel takes ~6.
_REPEAT: dict[tuple, tuple] = {}
_MAX_REPEAT = 64


def _repeat_key(op: str, A, dense: tuple, format, target, schedule, threads) -> tuple | None:
    """What the checks of this call depend on, or None where it cannot repeat one."""
    data = getattr(A, "data", None)
    if type(data) is not np.ndarray or any(type(D) is not np.ndarray for D in dense):
        return None
    operands = tuple((D.dtype, D.shape) for D in dense)
    key = (op, type(A), id(getattr(A, "indptr", None)), id(getattr(A, "indices", None)), A.shape, data.dtype,
           operands, format, target, schedule, threads)  # fmt: skip
    try:
        hash(key)
    except TypeError:  # an unhashable argument (the slow path names what is wrong with it)
        return None
    return key


def _repeated(key: tuple | None, A, dense: tuple) -> Callable | None:
    """The call remembered under `key`, if A's arrays and the operands' layout still fit it."""
    entry = _REPEAT.get(key) if key is not None else None
    if entry is None:
        return None
    indptr, indices, nnz, call = entry
    data = A.data
    if (
        indptr() is not A.indptr
        or indices() is not A.indices
        or data.ndim != 1
        or len(data) != nnz
        or not data.flags.c_contiguous
        or not all(D.flags.c_contiguous for D in dense)
    ):
        return None
    return call


def _remember_repeat(key: tuple | None, A, call: Callable) -> None:
    """Remember `call(A, *dense)` for later calls with `key` (`call` holds no array of A's)."""
    if key is None:
        return
    if len(_REPEAT) >= _MAX_REPEAT:
        _REPEAT.pop(next(iter(_REPEAT)))
    _REPEAT[key] = (weakref.ref(A.indptr), weakref.ref(A.indices), len(A.indices), call)


def _alias_repeat(key: tuple | None, op: str, A, dense: tuple, target, choice: dict, threads) -> None:
    """After a `format="auto"` call: its key runs what the chosen configuration's call left."""
    if key is None or set(choice) - {"format", "schedule"}:
        return
    inner = _repeat_key(op, A, dense, choice.get("format", "auto"), target, choice.get("schedule"), threads)
    entry = _REPEAT.get(inner) if inner is not None else None
    if entry is not None:
        _REPEAT[key] = entry


# -------------------------------------------------------------------- operators
def spmm(
    A,
    B,
    format: str = "auto",
    target: str = "cpu",
    schedule: Callable | str | None = None,
    *,
    out: np.ndarray | None = None,
    threads: int | None = None,
    **params,
) -> np.ndarray:
    """`A @ B` for a scipy sparse `A` and a dense `B`, with a kernel generated by the pipeline.

    A 1-D `B` (a vector) gives SpMV: a 1-D result of `A.shape[0]` entries. `out=` is an array
    to write the result into (C-contiguous, the result's shape and dtype, sharing no memory with
    an input); it is returned. `threads=` caps the Numba threads of the call on the CPU target,
    as on kernels (by default small calls run on one thread, the rest on Numba's setting).

    `A` may be any scipy format; its arrays are checked before scipy converts it (`sp.InputError`
    for a broken structure or a non-numeric `B`). `format="auto"` (the default) runs what
    `sp.tune.spmm` chose for A's structure and this width: tuned once per structure (remembered
    in memory and on disk), by the cost model alone below `sp.tune.TIMING_GRAIN` multiply-adds,
    else by timing the model's best candidates (a few seconds, once); a `schedule=` with the
    default format runs CSR with that schedule. `"csr"` is CSR with the default schedule;
    otherwise `format` decomposes A first (composable formats): `"bsr"` (`block_size=`), `"ell"`
    (`buckets=`), `"hyb"` (`num_col_parts=`, `buckets=`), `"padding"` (`pad_size=`), or a rule
    module (`format_rules.load(path)`) with `rules` and `convert`; the conversion is cached per
    structure of A, so new values or a new `B` do not convert again. Returns a new C-contiguous
    array (float32 when both operands are float32, else float64) that shares no memory with `A`
    or `B`, whatever the
    shape (empty `A`, zero-width `B`).

    >>> import numpy as np, sparsetir_py as sp
    >>> A = sp.data.load_matrix("karate")
    >>> B = np.random.default_rng(0).standard_normal((34, 16)).astype(np.float32)
    >>> np.allclose(sp.ops.spmm(A, B), A @ B, atol=1e-5)
    True
    >>> x = np.ones(34, np.float32)
    >>> y = np.empty(34, np.float32)
    >>> sp.ops.spmm(A, x, out=y, threads=1) is y, np.allclose(y, A @ x)
    (True, True)
    """
    key = _repeat_key("spmm", A, (B,), format, target, schedule, threads) if out is None and not params else None
    call = _repeated(key, A, (B,))
    if call is not None:
        return call(A, B)
    if isinstance(format, str) and format == "auto" and schedule is not None:
        format = "csr"  # a schedule of the caller's: CSR's, as before formats were chosen
    if isinstance(format, str) and format == "auto":
        choice = _auto("spmm", A, B, target, schedule, params)
        result = spmm(A, B, target=target, out=out, threads=threads, **choice)
        _alias_repeat(key, "spmm", A, (B,), target, choice, threads)
        return result
    threads = _threads(threads, target)
    given, (B, vector) = B, _spmm_operand(B)
    if not (isinstance(format, str) and format == "csr"):
        return _spmm_parts(A, B, _format_module(format), target, schedule, params, out, vector, threads)
    if params:
        raise InputError(f"format 'csr' takes no parameters, got {', '.join(params)}")
    csr = _as_csr(A)
    B = _operand(B, "B")
    dtype = _value_dtype(csr.dtype, B.dtype)
    m, n = csr.shape
    B = _dense(B, "B", n, dtype)
    feat = B.shape[1]
    idtype = _DTYPE_NAMES[csr.indices.dtype]
    kernel = _kernel("spmm", target, idtype, _DTYPE_NAMES[dtype], feat, schedule)
    result = _output(out, (m,) if vector else (m, feat), dtype, (B, A.data if hasattr(A, "data") else None))
    C = result.reshape(m, feat)  # a view: the kernel writes into `result`
    data = np.ascontiguousarray(csr.data, dtype=dtype)
    sizes = {"feat": feat} if "feat" in kernel.parameters else {}
    repeat = key is not None and not vector and csr is A and data is A.data and B is given
    run = _run(
        kernel, csr, feat, threads, repeat, a=data, b=B, c=C, indptr=csr.indptr, indices=csr.indices, m=m, n=n,
        nnz=csr.nnz, **sizes,
    )  # fmt: skip
    if run is not None:

        def call(A, B, run=run, shape=(m, feat), dtype=dtype):
            C = np.empty(shape, dtype)
            run({"a": A.data, "b": B, "c": C, "indptr": A.indptr, "indices": A.indices})
            return C

        _remember_repeat(key, A, call)
    return result


def sddmm(
    A,
    X,
    Y,
    format: str = "auto",
    target: str = "cpu",
    schedule: Callable | str | None = None,
    *,
    threads: int | None = None,
    **params,
) -> scipy.sparse.csr_matrix:
    """A CSR matrix with A's structure (explicit zeros kept) and values `A.multiply(X @ Y.T)`.

    The structure is A's canonical one: duplicates summed and indices sorted within each row
    (unsorted or duplicated input gives the same matrix as `A.multiply(X @ Y.T)`). Inputs are
    checked as in `spmm`. The result owns new `data`, `indptr` and `indices` arrays: changing it in
    place (`eliminate_zeros`, `sort_indices`, writing `S.indices`) never changes `A`.
    `format` (and its parameters) decomposes A as in `spmm`; the output moves to the parts'
    formats too and is mapped back to A's structure and order. `threads=` caps the Numba threads
    of the call on the CPU target, as in `spmm`.

    >>> import numpy as np, sparsetir_py as sp
    >>> A = sp.data.load_matrix("karate")
    >>> X = np.ones((34, 4), np.float32)
    >>> S = sp.ops.sddmm(A, X, 2 * X)
    >>> S.nnz == A.nnz, np.allclose(S.toarray(), A.multiply(X @ (2 * X).T).toarray())
    (True, True)
    """
    key = _repeat_key("sddmm", A, (X, Y), format, target, schedule, threads) if not params else None
    call = _repeated(key, A, (X, Y))
    if call is not None:
        return call(A, X, Y)
    if isinstance(format, str) and format == "auto" and schedule is not None:
        format = "csr"  # a schedule of the caller's: CSR's, as before formats were chosen
    if isinstance(format, str) and format == "auto":
        choice = _auto("sddmm", A, X, target, schedule, params)
        result = sddmm(A, X, Y, target=target, threads=threads, **choice)
        _alias_repeat(key, "sddmm", A, (X, Y), target, choice, threads)
        return result
    threads = _threads(threads, target)
    if not (isinstance(format, str) and format == "csr"):
        return _sddmm_parts(A, X, Y, _format_module(format), target, schedule, params, threads)
    if params:
        raise InputError(f"format 'csr' takes no parameters, got {', '.join(params)}")
    csr = _as_csr(A)
    m, n = csr.shape
    given = X, Y
    X, Y = _operand(X, "X"), _operand(Y, "Y")
    dtype = _value_dtype(csr.dtype, X.dtype, Y.dtype)
    X = _dense(X, "X", m, dtype)
    Y = _dense(Y, "Y", n, dtype)
    if X.shape[1] != Y.shape[1]:
        raise InputError(f"`X` and `Y` must have the same number of columns, got {X.shape[1]} and {Y.shape[1]}")
    feat = X.shape[1]
    data = np.ascontiguousarray(csr.data, dtype=dtype)
    if feat == 0:
        _resolve_schedule("sddmm", target, schedule)  # the same errors for an unknown target or schedule
        # X @ Y.T is all zeros: A * 0, so that NaN/inf entries give NaN as in `A.multiply`, where
        # the kernel's empty sum over k would give 0.
        out = data * dtype.type(0)
    else:
        idtype = _DTYPE_NAMES[csr.indices.dtype]
        kernel = _kernel("sddmm", target, idtype, _DTYPE_NAMES[dtype], feat, schedule)
        out = np.empty(csr.nnz, dtype=dtype)
        sizes = {"feat": feat} if "feat" in kernel.parameters else {}
        repeat = key is not None and csr is A and data is A.data and X is given[0] and Y is given[1]
        run = _run(
            kernel, csr, feat, threads, repeat, a=data, x=X, y=Y, c=out, indptr=csr.indptr, indices=csr.indices,
            m=m, n=n, nnz=csr.nnz, **sizes,
        )  # fmt: skip
        if run is not None:

            def call(A, X, Y, run=run, nnz=csr.nnz, dtype=dtype):
                out = np.empty(nnz, dtype)
                run({"a": A.data, "x": X, "y": Y, "c": out, "indptr": A.indptr, "indices": A.indices})
                return _with_values(A, out)

            _remember_repeat(key, A, call)
    return _with_values(csr, out)


# -------------------------------------------------------------------- format="auto"
_AUTO: dict[tuple, tuple] = {}


# `sparsetir_py.tune` (imported with the package) sets this to its search: (op, csr, width,
# target, dtype) -> keyword arguments of `spmm`/`sddmm`. The tuner times candidates through this
# module, so this module does not import it.
CHOOSER: Callable | None = None


def _auto(op: str, A, dense, target: str, schedule, params: dict) -> dict:
    """The configuration `sp.tune` chose for this matrix and width (tuned once per structure:
    remembered here by the identity of A's arrays, on disk by their fingerprint)."""
    if params:
        raise InputError(f"format 'auto' takes no parameters, got {', '.join(params)}")
    csr = _as_csr(A)
    D = dense
    if not scipy.sparse.issparse(D) and not isinstance(D, np.ndarray):
        try:
            D = np.asarray(D)
        except (TypeError, ValueError):
            D = dense  # _operand names the problem
    if not isinstance(D, np.ndarray) or D.ndim != 1:  # a 1-D B (SpMV) is one column
        D = _operand(dense, "B" if op == "spmm" else "X")
    _check_kind(D.dtype, "`B`" if op == "spmm" else "`X`")
    feat = int(D.shape[1]) if D.ndim == 2 else 1
    dtype = _value_dtype(csr.dtype, D.dtype)
    key = (op, id(csr.indptr), id(csr.indices), csr.shape, feat, target, dtype.str)
    entry = _AUTO.get(key)
    if entry is not None and entry[0]() is csr.indptr and entry[1]() is csr.indices:
        return entry[2]
    if CHOOSER is None:  # pragma: no cover - set when the package is imported
        raise InputError("format 'auto' needs sparsetir_py.tune: import sparsetir_py first")
    choice = CHOOSER(op, csr, feat, target, dtype)

    def forget(_ref, key=key):
        entry = _AUTO.get(key)
        if entry is not None and (entry[0]() is None or entry[1]() is None):
            del _AUTO[key]

    _AUTO[key] = (weakref.ref(csr.indptr, forget), weakref.ref(csr.indices, forget), choice)
    return choice


# -------------------------------------------------------------------- composable formats
_CONVERTED: dict[tuple, tuple] = {}


def _format_module(format):
    """A shipped rule file by name, or a user's rule module (anything with `rules`)."""
    import format_rules

    if isinstance(format, str):
        module = format_rules.SHIPPED.get(format)
        if module is None:
            known = ", ".join(["csr", *format_rules.SHIPPED])
            raise InputError(f"unknown format {format!r}: expected one of {known}, or a rule module")
        return module
    if callable(getattr(format, "rules", None)):
        return format
    raise InputError(f"format must be a name or a rule module with `rules(**params)`, got {type(format).__name__}")


def _rules(module, csr, params: dict, dtype: str, idtype: str) -> list:
    """`module.rules(**params)`, given A, dtype and idtype where the rule file takes them, with the
    file's `convert` as the rules' converter (`format.rules_of`: a `FormatError` for anything the
    file gets wrong); a parameter the file does not take is the caller's mistake: `InputError`."""
    from .format import parameter_names, rules_of

    try:
        accepted = parameter_names(module.rules)
    except (TypeError, ValueError):
        accepted = None
    unknown = [k for k in params if accepted is not None and (k not in accepted or k in ("A", "dtype", "idtype"))]
    if unknown:
        takes = ", ".join(f"`{k}`" for k in accepted or [] if k not in ("A", "dtype", "idtype")) or "none"
        raise InputError(
            f"format `{getattr(module, '__name__', '?')}` has no parameter {', '.join(f'`{k}`' for k in unknown)} "
            f"(it takes {takes})"
        )
    return rules_of(module, csr, params, dtype, idtype)


def _converted(module, csr, params: dict, dtype: str, idtype: str):
    """(rules, structure arguments, where each value argument takes A's values), once per
    structure of A: the converter runs on A's pattern with values 1..nnz, so a value argument
    is a gather from A.data (0 where padding) on every later call."""
    key = (id(csr.indptr), id(csr.indices), csr.shape, id(module), repr(sorted(params.items())), dtype, idtype)
    entry = _CONVERTED.get(key)
    if entry is not None and entry[0]() is csr.indptr and entry[1]() is csr.indices:
        return entry[2]
    from .format import convert

    rules = _rules(module, csr, params, dtype, idtype)
    numbered = scipy.sparse.csr_matrix((np.arange(1, csr.nnz + 1, dtype=np.float64), csr.indices, csr.indptr),
                                       shape=csr.shape)  # fmt: skip
    exact = _rules(module, csr, params, "float64", idtype)
    # The kernel is built from `rules` (the operands' dtypes), the arrays (checked by `convert`)
    # by the float64 ones, whose values number the nonzeros exactly: the two must declare the
    # same format but for the values' dtype.
    if _layout(rules) != _layout(exact):
        raise FormatError(
            f"format `{getattr(module, '__name__', '?')}`: its rules for {dtype} values declare another format than "
            "for float64 ones; a rule file's formats may differ by the values' dtype only"
        )
    arrays = convert(numbered, exact)
    structure, gathers = {}, {}
    for rule in rules:
        values = {f"{b.data.name}_{rule.name}" for b in rule.new_format_desc.buffers if b.data is not None}
        for p in rule.new_format_desc.params:
            name = f"{p.name}_{rule.name}"
            if name in values:
                gathers[name] = np.rint(np.asarray(arrays[name], dtype=np.float64)).astype(np.int64)
            else:
                structure[name] = arrays[name]
    rules = _stored_parts(rules, gathers)
    kept = {f"{p.name}_{r.name}" for r in rules for p in r.new_format_desc.params}
    structure = {k: v for k, v in structure.items() if k in kept}
    gathers = {k: v for k, v in gathers.items() if k in kept}
    result = (rules, structure, gathers)

    def forget(_ref, key=key):
        entry = _CONVERTED.get(key)
        if entry is not None and (entry[0]() is None or entry[1]() is None):
            del _CONVERTED[key]

    _CONVERTED[key] = (weakref.ref(csr.indptr, forget), weakref.ref(csr.indices, forget), result)
    return result


def _layout(rules) -> list:
    """What a list of rules declares, but the dtype of its values: names, parameters (structure
    dtypes included) and each buffer's axes (kinds, index dtypes, extents)."""
    return [
        (
            r.name,
            [(p.name, p.dtype) for p in r.new_format_desc.params],
            [
                (b.name, [(a.name, a.kind, a.idtype, str(a.length), str(a.nnz_cols)) for a in b.axes])
                for b in r.new_format_desc.buffers
            ],
        )
        for r in rules
    ]


#: A format of more parts than this compiles only the parts that store a nonzero of A.
_PRUNE_PARTS_OVER = 8


def _stored_parts(rules, gathers: dict) -> list:
    """With more than `_PRUNE_PARTS_OVER` parts, the rules whose parts store a nonzero of A (the
    first one when none does). An empty part computes nothing, and each part costs compile time
    (on the CPU about a second apiece for SpMM where parts share rows, more for SDDMM), so `hyb`
    with many column parts on a small matrix compiles what it uses. Few parts are all kept: one
    kernel then serves every matrix, instead of one per set of non-empty parts."""
    if len(rules) <= _PRUNE_PARTS_OVER:
        return rules

    def stores(r) -> bool:
        names = [f"{b.data.name}_{r.name}" for b in r.new_format_desc.buffers if b.data is not None]
        return any(np.any(gathers[k]) for k in names if k in gathers)

    return [r for r in rules if stores(r)] or rules[:1]


def _shares_rows(rules, structure: dict) -> bool:
    """Whether two parts, or two layers of one part, may hold the same row of A: False only when
    every part lists its rows (`rows_<rule>`, as ELL/hyb parts do) and no row id repeats."""
    rows = [structure.get(f"rows_{r.name}") for r in rules]
    if any(not isinstance(r, np.ndarray) for r in rows):
        return True
    ids = np.concatenate([r.reshape(-1) for r in rows]) if rows else np.zeros(0, np.int64)
    return len(np.unique(ids)) != len(ids)


def _parts_kernel(
    op: str, module, params: dict, rules, structure: dict, dname: str, idtype: str, target: str, feat: int, schedule
):
    """The kernel of `op` decomposed by `rules` (the computation alone), compiled once per
    format, parameters, dtypes, target, schedule (and width where `_fixed_width`). An SDDMM's output moves to
    the parts' formats too."""
    from .transform import decompose_format, remove_preprocess

    if schedule is None:
        from schedules.common import parts

        schedule = parts(target, shared_rows=_shares_rows(rules, structure))
    schedule = _resolve_schedule(op, target, schedule)
    fixed = _fixed_width(target, schedule)
    key = (op, id(module), repr(sorted(params.items())), tuple(r.name for r in rules), dname, idtype, target,
           feat if fixed else None, schedule)  # fmt: skip
    kernel = _KERNELS.get(key)
    if kernel is None:
        parts = rules if op == "spmm" else [_with_output(r) for r in rules]
        mod = remove_preprocess(decompose_format(SCRIPTS[op](idtype, dname), parts))
        specialize = {"feat": feat} if fixed else None
        kernel = compile_pipeline(mod, target, schedule=schedule, specialize=specialize)
        _KERNELS[key] = kernel
    return kernel


def _part_values(csr, dtype: np.dtype, gathers: dict) -> dict[str, np.ndarray]:
    """Each part's values gathered from A's (0 where the part pads)."""
    data = np.concatenate([np.zeros(1, dtype), np.asarray(csr.data, dtype=dtype)])
    return {name: data[where] for name, where in gathers.items()}


_CHECKED_PARTS: dict[tuple, weakref.ref] = {}


def _run_parts(kernel: Kernel, args: dict, structure: dict, thread_args: dict) -> None:
    """Run a decomposed kernel; the converted structure is checked on its first run with this
    kernel only (the conversion is cached with A's structure, so later calls reuse checked arrays)."""
    key = (id(kernel), id(structure))
    ref = _CHECKED_PARTS.get(key)
    checked = ref is not None and ref() is structure_marker(structure)
    kernel(**args, check_structure=not checked, **thread_args)
    if not checked:
        _CHECKED_PARTS[key] = weakref.ref(structure_marker(structure))


def structure_marker(structure: dict):
    """An object that lives exactly as long as the converted structure (its first array)."""
    return next((v for v in structure.values() if isinstance(v, np.ndarray)), _NO_ARRAYS)


_NO_ARRAYS = np.zeros(0)


def _spmm_parts(
    A, B, module, target: str, schedule, params: dict, out=None, vector: bool = False, threads: int | None = None
) -> np.ndarray:
    """SpMM with A decomposed by a rule module: convert (cached), decompose, compile (cached), run."""
    csr = _as_csr(A)
    B = _operand(B, "B")
    dtype = _value_dtype(csr.dtype, B.dtype)
    m, n = csr.shape
    B = _dense(B, "B", n, dtype)
    feat = B.shape[1]
    dname, idtype = _DTYPE_NAMES[dtype], _DTYPE_NAMES[csr.indices.dtype]
    rules, structure, gathers = _converted(module, csr, params, dname, idtype)
    if not _all_finite(B) and _pads(gathers):
        # A padded slot holds 0 and reads a real row of B: 0 * inf is NaN where A stores nothing.
        # With a finite B the padding adds exact zeros, so only this case needs CSR's exact loop.
        return spmm(csr, B.reshape(-1) if vector else B, "csr", target, out=out, threads=threads)
    kernel = _parts_kernel("spmm", module, params, rules, structure, dname, idtype, target, feat, schedule)
    values = _part_values(csr, dtype, gathers)
    result = _output(out, (m,) if vector else (m, feat), dtype, (B, A.data if hasattr(A, "data") else None))
    C = result.reshape(m, feat)  # a view: the kernel writes into `result`
    args = {"b": B, "c": C, "m": m, "n": n, "feat": feat, **structure, **values}
    wanted = set(kernel.parameters)
    thread_args = _thread_args(target, csr.nnz * feat, threads)
    _run_parts(kernel, {k: v for k, v in args.items() if k in wanted}, structure, thread_args)
    return result


_FINITE_CHUNK = 1 << 20


def _all_finite(X: np.ndarray) -> bool:
    """Whether every entry of `X` is finite, in chunks (no temporary of X's size); stops at the
    first chunk that holds an inf or a NaN."""
    flat = X.reshape(-1)
    return all(np.isfinite(flat[i : i + _FINITE_CHUNK]).all() for i in range(0, len(flat), _FINITE_CHUNK))


def _pads(gathers: dict) -> bool:
    """Whether a decomposition holds padding: a slot that gathers no value of A (index 0)."""
    return any(not where.all() for where in gathers.values())


def _with_output(rule):
    """The rule with the SDDMM output `C` in the new format too (over the same axes as `A`)."""
    from .format import FormatRewriteRule
    from .ir.expr import Var

    desc = rule.new_format_desc
    a = rule.new_buffer("A")
    c = Var("c", "handle")
    desc = desc.replace(params=(*desc.params, c), buffers=(*desc.buffers, a.replace(name="C", data=c)))
    out = FormatRewriteRule(
        rule.name, desc, ["A", "C"], rule.axes_before_rewrite, rule.axes_after_rewrite, rule.axis_map,
        rule.idx_map, rule.inv_idx_map,
    )  # fmt: skip
    out.converter = rule.converter
    return out


def _sddmm_parts(
    A, X, Y, module, target: str, schedule, params: dict, threads: int | None = None
) -> scipy.sparse.csr_matrix:
    """SDDMM with A (and the output) decomposed by a rule module; the parts' outputs are
    scattered back to A's canonical order."""
    csr = _as_csr(A)
    m, n = csr.shape
    X, Y = _operand(X, "X"), _operand(Y, "Y")
    dtype = _value_dtype(csr.dtype, X.dtype, Y.dtype)
    X, Y = _dense(X, "X", m, dtype), _dense(Y, "Y", n, dtype)
    if X.shape[1] != Y.shape[1]:
        raise InputError(f"`X` and `Y` must have the same number of columns, got {X.shape[1]} and {Y.shape[1]}")
    feat = X.shape[1]
    dname, idtype = _DTYPE_NAMES[dtype], _DTYPE_NAMES[csr.indices.dtype]
    rules, structure, gathers = _converted(module, csr, params, dname, idtype)
    kernel = _parts_kernel("sddmm", module, params, rules, structure, dname, idtype, target, feat, schedule)
    values = _part_values(csr, dtype, gathers)
    outputs = {"c" + name[1:]: np.empty(where.shape, dtype) for name, where in gathers.items()}
    args = {"x": X, "y": Y, "m": m, "n": n, "feat": feat, **structure, **values, **outputs}
    wanted = set(kernel.parameters)
    thread_args = _thread_args(target, csr.nnz * max(feat, 1), threads)
    _run_parts(kernel, {k: v for k, v in args.items() if k in wanted}, structure, thread_args)
    out = np.zeros(csr.nnz, dtype)
    for name, where in gathers.items():
        stored = where.reshape(-1) > 0
        out[where.reshape(-1)[stored] - 1] = outputs["c" + name[1:]].reshape(-1)[stored]
    return _with_values(csr, out)


def _with_values(csr, values: np.ndarray):
    """A matrix of `csr`'s class (matrix or array) and structure holding `values` (not copied).

    The result owns its structure (copies of A's indptr/indices, as scipy's `A.multiply` gives):
    an in-place change of the result (`eliminate_zeros`, `sort_indices`) must not reach A. A
    shallow copy of `csr` with new arrays keeps A's index dtype (scipy's constructor would narrow
    int64 indices that fit int32) and A's checked canonical flags, and costs ~1 us on
    adder_dcop_05 where the constructor (`_with_data`) costs ~9 us (`copy.copy`, which does the
    same through `__reduce_ex__`, ~2 us)."""
    result = object.__new__(type(csr))
    result.__dict__.update(csr.__dict__)
    result.data = values
    result.indices = csr.indices.copy()
    result.indptr = csr.indptr.copy()
    return result
from sparsetir_py.coiteration.operators import add, multiply, spgemm  # noqa: E402,F401
