"""`spmm` and `sddmm`: one path for both, driven by the operator table `OPERATORS`.

Every call takes the same steps: the repeated-call fast path (`repeat`), `format="auto"`'s
choice (`auto`), A made canonical and checked once per structure and the dense operands checked
(`sparsetir_py.operands`), the kernel (`kernels`, or `parts` for a decomposed format), and the
run. What differs between the operators is in their `Operator` entry: the script's dense
arguments, the result's shape and what the caller gets back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from ..errors import InputError
from ..operands import (
    DTYPE_NAMES,
    as_csr,
    dense_operands,
    read_array,
    remember_structure,
    reordering,
    structure_checked,
    with_data,
)
from ..runtime.device import is_device_sparse
from . import auto, device, parts, repeat
from .kernels import csr_kernel, resolve_schedule
from .threads import check_threads, thread_args


@dataclass(frozen=True)
class Operator:
    """What an operator of `sp.ops` is, besides its script (`scripts.SCRIPTS[name]`)."""

    name: str
    args: tuple[str, ...]  #: the kernel's arguments for the dense operands, in order
    #: (csr, width, dtype, out, operands) -> the array the kernel writes its result into
    result: Callable
    #: (csr, the kernel's result, what `result` gave) -> what the caller receives
    finish: Callable


def _dense_result(csr, feat: int, dtype: np.dtype, out, operands) -> np.ndarray:
    """SpMM writes C (m x width): `out` after checking it, or a new array."""
    shape = (csr.shape[0], feat)
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
    if any(isinstance(x, np.ndarray) and np.shares_memory(out, x) for x in operands):
        raise InputError("`out` must not share memory with an input")
    return out


def _values_result(csr, feat: int, dtype: np.dtype, out, operands) -> np.ndarray:
    """SDDMM writes one value per stored entry of A."""
    return np.empty(csr.nnz, dtype=dtype)


def with_values(csr, values: np.ndarray):
    """A matrix of `csr`'s class (matrix or array) and structure holding `values` (not copied).

    The result owns its structure (copies of A's indptr/indices, as scipy's `A.multiply` gives):
    an in-place change of the result (`eliminate_zeros`, `sort_indices`) must not reach A. A
    shallow copy of `csr` with new arrays keeps A's index dtype (scipy's constructor would narrow
    int64 indices that fit int32) and A's checked canonical flags, and costs ~1 us on
    adder_dcop_05 where the constructor (`_with_data`) costs ~9 us (`copy.copy`, which does the
    same through `__reduce_ex__`, ~2 us)."""
    result = with_data(csr, values)
    result.indices = csr.indices.copy()
    result.indptr = csr.indptr.copy()
    return result


OPERATORS = {
    "spmm": Operator("spmm", ("b",), _dense_result, lambda csr, C: C),
    "sddmm": Operator("sddmm", ("x", "y"), _values_result, with_values),
}


def _call(op: Operator, A, dense: tuple, format, target, schedule, out, threads, params, run: Callable):
    """`op` on A and its dense operands (`run` is the public operator, which `auto` times)."""
    decomposed = not (isinstance(format, str) and format in ("auto", "csr"))
    if decomposed or not params:  # a repeated call checks `out` itself (its `op.result`)
        key = repeat.repeat_key(op.name, A, dense, format, target, schedule, threads, params, out)
    else:
        key = None
    call = repeat.repeated(key, A, dense)
    if call is not None:
        return call(A, *dense, out=out)
    if isinstance(format, str) and format == "auto" and schedule is not None:
        format = "csr"  # a schedule of the caller's: CSR's, as before formats were chosen
    if isinstance(format, str) and format == "auto":
        choice = auto.choose(op.name, run, A, dense[0], target, params)
        outs = {"out": out} if out is not None else {}
        result = run(A, *dense, target=target, threads=threads, **outs, **choice)
        repeat.alias(key, op.name, A, dense, target, choice, threads, out)
        return result
    threads = check_threads(threads, target)
    csr_format = isinstance(format, str) and format == "csr"
    module = None if csr_format else parts.format_module(format)
    if csr_format and params:
        raise InputError(f"format 'csr' takes no parameters, got {', '.join(params)}")
    # An input converted once per structure (`operands.reordering`) on the CPU: SpMM in a
    # decomposed format gathers its values from `A.data` into the parts' slots itself
    # (`parts.Conversion.values`' `take`), so its CSR form needs no values.
    order = None
    if target == "cpu" and scipy.sparse.issparse(A) and not (A.format == "csr" and structure_checked(A)):
        order = reordering(A)
    csr = as_csr(A) if order is None else order.matrix(A, values=module is None or op.name != "spmm")
    dtype, operands, feat = dense_operands(op.name, csr.shape, csr.dtype, dense)
    inputs = (*operands, A.data if hasattr(A, "data") else None)
    # A later call with this key repeats this one's kernel (`repeat`): A itself, or a converted A
    # whose structure arrays are `indptr` and `indices` (not COO's).
    same_matrix = csr is A or (order is not None and A.format in ("csr", "csc", "bsr"))
    if module is not None:
        reusable = key is not None and target == "cpu" and same_matrix and all(X is D for X, D in zip(operands, dense))
        return _call_parts(
            op,
            csr,
            operands,
            feat,
            dtype,
            module,
            target,
            schedule,
            params,
            out,
            inputs,
            threads,
            key if reusable else None,
            None if order is None else (A, order),
        )
    m, n = csr.shape
    data = np.ascontiguousarray(csr.data, dtype=dtype)
    result = op.result(csr, feat, dtype, out, inputs)
    if op.name == "sddmm" and feat == 0:
        resolve_schedule(op.name, target, schedule)  # the same errors for an unknown target or schedule
        # X @ Y.T is all zeros: A * 0, so that NaN/inf entries give NaN as in `A.multiply`, where
        # the kernel's empty sum over k would give 0.
        return op.finish(csr, data * dtype.type(0))
    kernel = csr_kernel(op.name, target, DTYPE_NAMES[csr.indices.dtype], DTYPE_NAMES[dtype], feat, schedule)
    args = {"a": data, **dict(zip(op.args, operands)), "c": result, "indptr": csr.indptr, "indices": csr.indices}
    sizes = {"m": m, "n": n, "nnz": csr.nnz, **({"feat": feat} if "feat" in kernel.parameters else {})}
    checked = structure_checked(csr)
    threading = thread_args(target, csr.nnz * feat, threads)
    reusable = key is not None and target == "cpu" and same_matrix and (data is A.data or order is not None)
    if reusable and all(X is D for X, D in zip(operands, dense)):
        runner = kernel.runner(check_structure=not checked, **threading, **args, **sizes)
        runner(args)

        def again(A, *dense, out=None, runner=runner, csr=csr, feat=feat, dtype=dtype, order=order):
            inputs = (*dense, A.data)
            if order is not None:  # a converted A: its values gathered into CSR's order
                A = order.matrix(A)
            result = op.result(csr, feat, dtype, out, inputs)
            data = A.data if order is None else np.ascontiguousarray(A.data, dtype=dtype)
            runner({"a": data, **dict(zip(op.args, dense)), "c": result, "indptr": A.indptr, "indices": A.indices})
            return op.finish(A, result)

        repeat.remember(key, A, again)
    else:
        if checked and target == "cuda":  # A's structure went to the device once (ops/device.py)
            args["indptr"], args["indices"] = device.structure_on_device(csr)
        kernel(**args, **sizes, check_structure=not checked, **threading)
    if not checked:
        remember_structure(csr)
    return op.finish(csr, result)


def _call_parts(
    op: Operator, csr, operands, feat, dtype, module, target, schedule, params, out, inputs, threads, key, source=None
):
    """`op` with A (and SDDMM's output) decomposed by a rule module: convert (cached per
    structure), compile (cached per format), gather A's values into the parts, run. With a `key`
    (`repeat.repeat_key`), a later call with that key runs `again`: no lookups, the kernel's
    arguments bound once (`Kernel.runner`), per call only what may have changed (A's values,
    `out`, the rows of B that padding reads). With a `source` (the caller's A and its
    `operands.Reordered`; `csr`'s values are then NaN), A's values come from `A.data` by its `take`."""
    if not structure_checked(csr):
        # `as_csr` checked it: a later call with this structure checks only A's values, as on the
        # CSR path (the full check cost 0.22 ms a call on bcsstk16, half the BSR kernel at width 32).
        remember_structure(csr)
    dname, idtype = DTYPE_NAMES[dtype], DTYPE_NAMES[csr.indices.dtype]
    conversion = parts.converted(module, csr, params, dname, idtype)
    pad = parts.padding(module, params, target)
    if op.name == "spmm" and not parts.padding_is_exact(conversion, pad, operands[0]):
        # A padded slot holds 0 and reads a real row of B: 0 * inf is NaN where A stores nothing.
        # With finite rows there the padding adds exact zeros, so only this case needs CSR's exact loop.
        return _call(
            op, csr if source is None else source[0], tuple(operands), "csr", target, None, out, threads, {}, None
        )
    if csr.nnz == 0:  # nothing stored: no kernel to build or run (C is zeros, SDDMM's values none)
        resolve_schedule(op.name, target, schedule)  # the same errors for an unknown target or schedule
        if op.name != "spmm":
            return op.finish(csr, np.empty(0, dtype))
        result = op.result(csr, feat, dtype, out, inputs)
        result.fill(0)
        return op.finish(csr, result)
    kernel = parts.parts_kernel(op.name, module, params, conversion, dname, idtype, target, feat, schedule)
    m, n = csr.shape
    # BSR's SDDMM runs on a mask of ones and applies A's values on the way back (no gather).
    scaled = op.name == "sddmm" and pad is not None
    sizes = {"m": m, "n": n, "feat": feat, **conversion.structure}
    threading = thread_args(target, csr.nnz * max(feat, 1), threads)
    call_threads = threading.get("threads")  # the per-call passes over A's values run on as many
    wanted = set(kernel.parameters)

    def arguments(csr, operands, out, inputs, source) -> tuple[dict, np.ndarray | None, np.ndarray | None]:
        """The kernel's arguments, SpMM's result (as returned) and SDDMM's flat output buffer."""
        if scaled:
            values = conversion.ones(dtype)
        elif source is None:
            values = conversion.values(csr.data, dtype, call_threads)
        else:  # A's own values, in its order (`take`), or in CSR's where that is its order
            flat, take = source[0].data.reshape(-1), source[1].take
            values = conversion.values(flat if take is not None else flat[: csr.nnz], dtype, call_threads, take)
        args = {**dict(zip(op.args, operands)), **sizes, **values}
        result = flat = None
        if op.name == "spmm":
            result = args["c"] = op.result(csr, feat, dtype, out, inputs)
        if pad is not None:  # BSR: operands and result of whole blocks (`parts.pad_operands`)
            args = parts.pad_operands(op.name, args, conversion.structure, pad)
        if op.name != "spmm":
            flat, outputs = conversion.outputs(dtype)
            args.update(outputs)
        return {k: v for k, v in args.items() if k in wanted}, result, flat

    def finish(csr, args, result, flat, out):
        if op.name == "spmm":
            if args["c"] is not result:  # C of whole blocks: its first m rows, in `out` if given
                result = args["c"][:m] if out is None else np.copyto(result, args["c"][:m]) or result
            return op.finish(csr, result)
        back = (
            conversion.scaled_values(flat, csr.data, call_threads)
            if scaled
            else conversion.stored_values(flat, call_threads)
        )
        return op.finish(csr, back)

    args, result, flat = arguments(csr, operands, out, inputs, source)
    parts.run_parts(kernel, conversion, args, threading)
    if key is not None:
        runner = kernel.runner(check_structure=False, **threading, **args)

        def again(A, *dense, out=None):
            if op.name == "spmm" and not parts.padding_is_exact(conversion, pad, dense[0]):
                return _call(op, A, dense, "csr", target, None, out, threads, {}, None)
            if source is None:
                args, result, flat = arguments(A, dense, out, (*dense, A.data), None)
                runner(args)
                return finish(A, args, result, flat, out)
            # A converted input of the first call's structure (`repeat.repeated` checked its
            # arrays): the first call's CSR form, A's values from its own `data`.
            args, result, flat = arguments(csr, dense, out, (*dense, A.data), (A, source[1]))
            runner(args)
            return finish(csr, args, result, flat, out)

        repeat.remember(key, csr if source is None else source[0], again)
    return finish(csr, args, result, flat, out)


# -------------------------------------------------------------------- the operators
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
    for a broken structure or a non-numeric `B`). A CSC, COO or BSR `A` (`A.T` of a CSR matrix
    too) is converted once per structure: later calls gather only its values, and a BSR `A` in
    `format="bsr"` of its block size is read in place. `format="auto"` (the default) runs what
    `sp.tune.spmm` chose for A's structure and this width: tuned once per structure (remembered
    in memory and on disk), by the cost model alone below `sp.tune.TIMING_GRAIN` multiply-adds,
    else by timing the model's best candidates (a few seconds, once); a `schedule=` with the
    default format runs CSR with that schedule. `"csr"` is CSR with the default schedule;
    otherwise `format` decomposes A first (composable formats): `"bsr"` (`block_size=`), `"ell"`
    (`buckets=`), `"hyb"` (`num_col_parts=`, `buckets=`), `"padding"` (`pad_size=`), or a rule
    module (`format_rules.load(path)`) with `rules` and `convert`; the conversion is cached per
    structure of A, so new values or a new `B` do not convert again. Returns a new C-contiguous
    array (float32 when both operands are float32, else float64) that shares no memory with `A`
    or `B`, whatever the shape (empty `A`, zero-width `B`).

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
    host = isinstance(B, np.ndarray) and (out is None or isinstance(out, np.ndarray)) and not is_device_sparse(A)
    if not host and device.wants_device(A, (B,), out):  # device in, device out (ops/device.py)
        return device.call(OPERATORS["spmm"], A, (B,), format, target, schedule, out, params)
    vector = isinstance(B, np.ndarray) and B.ndim == 1
    if not vector and not isinstance(B, np.ndarray) and not scipy.sparse.issparse(B):
        B = read_array(B, "B")
        vector = B.ndim == 1
    if not vector:
        return _call(OPERATORS["spmm"], A, (B,), format, target, schedule, out, threads, params, spmm)
    # SpMV: B as one column; the result (or `out`, checked as the 1-D result) as a view of C.
    m = A.shape[0] if scipy.sparse.issparse(A) else 0
    column = None
    if out is not None:
        if not isinstance(out, np.ndarray) or out.ndim != 1 or out.shape[0] != m:
            shape = out.shape if isinstance(out, np.ndarray) else None
            if shape is None:
                raise InputError(f"`out` must be a numpy array, got {type(out).__name__}")
            raise InputError(f"`out` must have shape {(m,)}, got {shape}")
        column = out.reshape(-1, 1)
    C = _call(OPERATORS["spmm"], A, (B.reshape(-1, 1),), format, target, schedule, column, threads, params, spmm)
    return out if out is not None else C.reshape(-1)


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
    host = isinstance(X, np.ndarray) and isinstance(Y, np.ndarray) and not is_device_sparse(A)
    if not host and device.wants_device(A, (X, Y), None):  # device in, device out (ops/device.py)
        return device.call(OPERATORS["sddmm"], A, (X, Y), format, target, schedule, None, params)
    return _call(OPERATORS["sddmm"], A, (X, Y), format, target, schedule, None, threads, params, sddmm)
