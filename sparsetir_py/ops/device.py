"""`sp.ops` with device operands on `target="cuda"`: device in, device out, no host copy of them.

    C = sp.ops.spmm(A, B_dev, target="cuda")          # B a Numba device array -> C one too
    C = sp.ops.spmm(A_cupyx, B_cupy, target="cuda")   # cupyx.scipy.sparse + cupy -> cupy
    S = sp.ops.sddmm(A_cupyx, X, Y, target="cuda")    # -> cupyx.scipy.sparse.csr_matrix

Host operands on `target="cuda"` keep `operators`' path, where A's structure, once checked,
also comes from `DEVICE_STRUCTURES` (values, dense operands and the result move per call).

A call takes this path when A is a `cupyx.scipy.sparse` matrix or a dense operand (or `out=`) is
a device array (`runtime.device`); numpy operands mixed in are copied to the device. The result
is of the kind of the device operands (cupy when any is cupy, else Numba). A's structure is
checked once per structure: a scipy A as `sp.ops` always does (`operands.as_csr`), then its
indptr/indices are copied to the device once and kept (`DEVICE_STRUCTURES`, keyed on the
identity of the host arrays, as the structure check is); its values go to the device per call.
A cupyx A is checked from one host copy of its indptr/indices the first time (remembered in
`operands.STRUCTURES` by the identity of its device arrays) and then never copied again. Dense
device operands are not converted: they must be C-contiguous with the result's dtype (float32
when A and every operand are float32, else float64), else `InputError`.

Results: SpMM gives the `(m, width)` product (`out=` a device array of that shape and dtype
works too; a 1-D operand gives SpMV). SDDMM gives a `cupyx.scipy.sparse.csr_matrix` with A's
structure for cupy operands, and for Numba ones the values alone: a device array of `nnz`
entries in A's storage order (the structure is A's, on the host already). A cupyx result is
built without cupyx's constructor (`SharedStructure`): its `data` is new every call, its
`indptr`/`indices` one copy of A's made once per structure and shared by every result of that
structure (never A's own arrays). The launch is asynchronous, as Numba's and CuPy's are.

Repeated calls: a call whose operands are the caller's device arrays themselves (A canonical,
no numpy operand converted, cupyx A's values of the result's dtype) is prepared once and kept in
`REPEATS` by the identity of its operands (held by the entry, so no id is reused while it
lives); a later call with the same objects, A still holding the same arrays, runs the prepared
call: no argument bound or checked again, no dict built, the kernel's arguments marshalled once
(`CUDAKernel.launcher`, `Launcher.into` for a fresh result). Per call it copies a scipy A's
values to the device (they may have changed in place; a cupyx A's are read where they are) by
the plain copy of a host array already checked (`runtime.device.host_to_device`: the driver's
copy, not `copy_to_device`'s checks again), allocates the result (none with `out=`) and
launches. `python -m bench.cuda_host` times such calls with the launch stubbed. New values written into the same arrays
are seen; another operand object, or A with another array, prepares anew.

Decomposed formats (`format="hyb"`, `"ell"`, `"bsr"`, a rule module; one horizontally fused launch
for the parts) run on device dense operands with a scipy or a cupyx A, converted on the host
once per structure (a cupyx A's structure copied to the host once, `HOST_STRUCTURES`), the
parts' structure on the device once (`parts_on_device`). A's values are gathered into the parts
on the device by the conversion's slot index (`_gather_values`: one prepared device gather, 0
for padding; no gather on the host, no copy per part). SpMM: where the format pads, B's
finiteness is marked on the device each call (`runtime.device.FiniteCheck`: B may change in
place), and a launch after the kernel's recomputes the result by CSR's exact loop where B
holds an inf or a NaN (0 * inf is NaN where A stores nothing), as the host runs CSR's loop
then; where B is finite its blocks return at once. Nothing is read back: a repeated call
never waits for the device (the first call of a structure decides on the host). SDDMM: each
part writes its values into one flat buffer, taken in A's order on the device (a prepared take
into a fresh result). After the kernel's first run, which checks the parts' structure on the
host arrays, these calls are prepared and repeated as CSR's are.
"""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse

from ..errors import InputError
from ..inputs import check_kind
from ..operands import (
    DTYPE_NAMES,
    STRUCTURES,
    StructureCache,
    as_csr,
    check_dense,
    dense_operand,
    dense_operands,
    remember_structure,
    structure_checked,
)
from ..runtime.device import (
    FiniteCheck,
    all_finite,
    describe,
    empty_like_kind,
    gather_launch,
    host_to_device,
    is_device_array,
    is_device_sparse,
    kind_of,
    take,
    take_launch,
    to_device,
)
from . import parts
from .kernels import csr_kernel

#: Device copies of host structures: (indptr, indices) of a checked scipy CSR -> device arrays.
DEVICE_STRUCTURES = StructureCache()
#: Repeated calls: the prepared launch of a CSR call, by the identity of its operands (`Repeat`).
REPEATS: OrderedDict[tuple, Repeat] = OrderedDict()
#: How many prepared calls `REPEATS` keeps (each holds its operands alive).
REPEAT_ENTRIES = 8
#: A cupyx A's structure on the host, for conversions: (indptr, indices, shape) on the device -> scipy CSR.
HOST_STRUCTURES = StructureCache()
#: SDDMM's cupyx results, per structure of A on the device: (indptr, indices, shape) -> `SharedStructure`.
SDDMM_RESULTS = StructureCache()
#: What a decomposed format's conversion keeps on the device: conversion -> (kind, what) -> arrays.
ON_DEVICE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def wants_device(A, dense: tuple, out) -> bool:
    """Whether a call has a device operand (and so takes this module's path)."""
    for x in dense:
        if is_device_array(x):
            return True
    return is_device_array(out) or is_device_sparse(A)


def call(op, A, dense: tuple, format, target: str, schedule, out, params: dict) -> Any:
    """`op` (an `operators.Operator`) on device operands; see the module docstring."""
    if target != "cuda":
        raise InputError(f"device arrays run on target='cuda', got target={target!r}")
    # The entry holds its operands, so while it lives no other object has their ids.
    key = (op.name, id(A), id(out), format, schedule, *map(id, dense))
    if params:
        key = _with_params(key, params)
    repeat = REPEATS.get(key) if key is not None else None
    if repeat is not None and repeat.fits(A):
        REPEATS.move_to_end(key)
        return repeat.run(A)
    csr_format = isinstance(format, str) and format in ("csr", "auto")
    if csr_format and params:
        raise InputError(f"format {format!r} takes no parameters with device operands, got {', '.join(params)}")
    kind = _kind(A, dense, out)
    held = (A, *dense, out)  # what a prepared call holds (before SpMV's reshape: the caller's objects)
    vector = op.name == "spmm" and _ndim(dense[0]) == 1
    if vector:
        dense = (dense[0].reshape(-1, 1) if is_device_array(dense[0]) else np.asarray(dense[0]).reshape(-1, 1),)
    if not csr_format and op.name == "sddmm":
        return _sddmm_parts(op, A, dense, format, schedule, params, kind, key, held)
    if not csr_format:
        return _spmm_parts(op, A, dense, format, schedule, out, params, kind, vector, key, held)
    a = _DeviceCSR.of(A, kind)
    dtype, operands, feat = dense_operands(
        op.name, a.shape, a.dtype, dense, read=_read, fit=lambda X, name, rows, dt: _fit(X, name, rows, dt, kind)
    )
    m, n = a.shape
    values = a.values(dtype)
    if op.name == "sddmm" and feat == 0:
        return _finish_sddmm(a, a.zero_times(dtype), kind)
    kernel = csr_kernel(op.name, "cuda", DTYPE_NAMES[a.idtype], DTYPE_NAMES[dtype], feat, schedule)
    shape = (m, feat) if op.name == "spmm" else (a.nnz,)
    result = _result(op.name, kind, shape, dtype, out, vector)
    args = {"a": values, **dict(zip(op.args, operands)), "c": result, "indptr": a.indptr, "indices": a.indices}
    sizes = {"m": m, "n": n, "nnz": a.nnz, **({"feat": feat} if "feat" in kernel.parameters else {})}
    launch = kernel.launcher(**args, **sizes, check_structure=False)
    launch()
    # What a repeated call returns, from the array the kernel wrote.
    if op.name == "sddmm":
        finish = _sddmm_results(a, kind)
    elif out is not None:
        finish = lambda c: out  # noqa: E731
    else:  # SpMV's fresh results are made 1-D (the (m, 1) column's memory): no view per call
        finish = None
    # A cupyx A whose values the kernel reads converted (another dtype) would not see new values.
    same_values = a.host_values is not None or values is a.device_values
    if key is not None and not params and a.canonical_input and same_values and _as_given(operands, dense):
        device_values = values if a.host_values is not None else None
        fresh = None if out is not None else _allocator(kind, (m,) if vector else shape, dtype)
        _remember(key, Repeat(held, A, _repeat_run(launch, device_values, fresh, finish)))
    if op.name == "sddmm":
        return finish(result)
    return out if out is not None else result.reshape(m) if vector else result


def _with_params(key: tuple, params: dict) -> tuple | None:
    """`key` with a format's parameters (lists, as `buckets=`, by their items), or None where one
    is not hashable."""
    items = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items())
    try:
        hash(items)
    except TypeError:
        return None
    return (*key, items)


class Repeat:
    """A device call prepared once (`CUDAKernel.launcher`): a later call with the same operands
    (the same objects: held here, so no id is reused while the entry lives) and A's same
    structure and value arrays launches with O(1) host work: no argument checked or marshalled
    again, no dict built. A scipy A's values are copied into the device buffer of the first call
    (they may have changed in place); a fresh result is allocated unless `out=` was given."""

    __slots__ = ("_run", "data", "indices", "indptr", "operands")

    def __init__(self, operands: tuple, A, run: Callable):
        self.operands = operands  #: (A, dense operands..., out), held
        self.indptr, self.indices, self.data = A.indptr, A.indices, A.data  #: compared by identity
        self._run = run

    def fits(self, A) -> bool:
        """Whether A still holds the arrays the call was prepared with."""
        return A.data is self.data and A.indices is self.indices and A.indptr is self.indptr

    def run(self, A):
        return self._run(A)


def _repeat_run(launch, device_values, fresh: Callable | None, finish: Callable | None):
    """The body of a repeated call, its branches decided once: copy a scipy A's values (converted
    when the kernel's dtype is another) into `device_values` (None: A's values are on the
    device), launch into `out=` or a `fresh()` result, and `finish` it (None: as written)."""
    copy = None if device_values is None else host_to_device(device_values)
    if fresh is None:  # `out=`: launch into it

        def run_out(A):
            if copy is not None:
                copy(A.data)
            launch()
            return finish(None)

        return run_out
    into = launch.into("c")

    def run(A):
        if copy is not None:
            copy(A.data)
        result = fresh()
        into(result)
        return result if finish is None else finish(result)

    return run


def _allocator(kind: str, shape: tuple, dtype: np.dtype) -> Callable:
    """A function giving a new device array of `kind`, `shape` and `dtype` (`empty_like_kind`
    with its import and dispatch done once)."""
    if kind == "cupy":
        import cupy

        return functools.partial(cupy.empty, shape, dtype)
    from numba import cuda

    return functools.partial(cuda.device_array, shape, dtype)


def _copy_into(device, host: np.ndarray) -> None:
    """Host values into an existing device array of their shape and dtype."""
    if hasattr(device, "copy_to_device"):
        device.copy_to_device(host)
    else:  # CuPy
        device.set(host)


def _spmm_parts(op, A, dense, format, schedule, out, params, kind: str, vector: bool, key, held: tuple):
    """SpMM with A decomposed by a rule module (hyb, ell, bsr, ...; `ops/parts.py`), the dense
    operands on the device: the conversion is made on the host once per structure (a cupyx A's
    structure copied there once, `_DeviceCSR.host_structure`). The kernel's first run checks the
    parts' structure on the host arrays (`parts.run_parts`); then the call is prepared
    (`_prepare_spmm_parts`) and a repeated one runs that."""
    module = parts.format_module(format)
    a = _DeviceCSR.of(A, kind)
    csr = a.host_structure()
    fit = lambda X, name, rows, dt: _fit(X, name, rows, dt, kind)  # noqa: E731
    dtype, (B,), feat = dense_operands(op.name, a.shape, a.dtype, dense, read=_read, fit=fit)
    dname, idtype = DTYPE_NAMES[dtype], DTYPE_NAMES[a.idtype]
    conversion = parts.converted(module, csr, params, dname, idtype)
    m, n = a.shape
    finish = (lambda c: out) if out is not None else (lambda c: c.reshape(m)) if vector else _identity
    column = out.reshape(m, 1) if vector and out is not None else out

    def fallback(A):
        # A padded slot holds 0 and reads a real row of B: 0 * inf is NaN where A stores nothing.
        return finish(call(op, A, (B,), "csr", "cuda", None, column, {}))

    kernel = parts.parts_kernel(op.name, module, params, conversion, dname, idtype, "cuda", feat, schedule)
    checked = id(kernel) in conversion.checked
    reads = _padding_reads_b(conversion, params, n)
    if not checked and reads and not all_finite(B):  # (a prepared call checks B itself)
        return fallback(A)
    result = _result(op.name, kind, (m, feat), dtype, out, vector)
    refresh, values, csr_values = _gather_values(conversion, a, dtype, kind)
    if not checked:
        refresh(a.data)
        args = {"b": B, "c": result, "m": m, "n": n, "feat": feat, **conversion.structure, **values}
        parts.run_parts(kernel, conversion, args, {})
    reuse = key is not None and a.canonical_input and B is dense[0]
    if checked or reuse:
        fresh = None if out is not None else _allocator(kind, (m, feat), dtype)
        csr = (a.indptr, a.indices, csr_values)
        run = _prepare_spmm_parts(kernel, conversion, B, result, refresh, values, kind, fresh, finish, csr, reads)
        if reuse:
            _remember(key, Repeat(held, A, lambda A: run(A.data)))
    if not checked:
        return finish(result)
    return run(a.data)


def _padding_reads_b(conversion: parts.Conversion, params: dict, n: int) -> bool:
    """Whether a padding slot of the parts multiplies a real row of B (`parts.padding_rows`, True
    where unknown): the zeros stored in BSR's blocks do; ELL's and hyb's padding columns lie past
    B's rows, which the kernels' guard skips, so no inf or NaN of B can reach them."""
    if not conversion.pads:
        return False
    rows = parts.padding_rows(conversion, int(params.get("block_size", 1)), n)
    return rows is None or len(rows) > 0


def _prepare_spmm_parts(
    kernel, conversion, B, result, refresh, values, kind: str, fresh, finish, csr, reads: bool = True
) -> Callable:
    """A decomposed SpMM on these device operands, prepared: the parts' structure on the device
    (once per conversion), A's values gathered into the parts' value buffer on the device
    (`refresh`, `_gather_values`), the kernel launched by a `Launcher` into `out=` or a `fresh()`
    result. Where padding `reads` real rows of B (`_padding_reads_b`), B's finiteness is marked
    on the device (`FiniteCheck.mark`) and a launch after the kernel's recomputes the result by
    CSR's exact loop where B holds an inf or a NaN (`FiniteCheck.fix_launch`; `csr`: A's indptr,
    indices and values on the device, in CSR order), else returns at once: no wait for the
    device, nothing read back. The returned `run(A.data)` gives the result."""
    m, feat = describe(result).shape
    n = describe(B).shape[0]
    args = {"b": B, "c": result, "m": m, "n": n, "feat": feat, **parts_on_device(conversion, kind), **values}
    wanted = set(kernel.parameters)
    launch = kernel.launcher(**{k: v for k, v in args.items() if k in wanted}, check_structure=False)
    finite = FiniteCheck(B) if reads else None
    fix = None if finite is None else finite.fix_launch(*csr, result)
    into = launch.into("c") if fresh is not None else None
    fix_into = fix.into(5) if fix is not None and fresh is not None else None

    def run(data):
        refresh(data)
        if finite is not None:
            finite.mark()
        if into is None:
            launch()
            if fix is not None:
                fix()
            return finish(None)
        c = fresh()
        into(c)
        if fix_into is not None:
            fix_into(c)
        return finish(c)

    return run


def _gather_values(
    conversion: parts.Conversion, a: _DeviceCSR, dtype: np.dtype, kind: str
) -> tuple[Callable, dict, Any]:
    """(refresh, the parts' value arguments on the device, A's values on the device in CSR order
    as `refresh` leaves them): `refresh(A.data)` gathers A's values into the parts' value buffer
    by the slot index of the conversion (on the device once per conversion; -1 for a padding
    slot, which gets 0) with one prepared device take, instead of a gather on the host and a copy
    per part. A cupyx A's values are read where they are; a scipy A's are copied to the device
    first (one copy), as are a cupyx A's of another dtype."""

    def slots():
        where = [w.reshape(-1) for w in conversion.gathers.values()]
        where = np.concatenate(where) if where else np.zeros(0, np.int64)
        return to_device(where.astype(np.int64) - 1, kind)

    index = _on_device(conversion, kind, "value_slots", slots)
    flat = empty_like_kind(kind, (conversion.slots,), dtype)
    views = conversion.value_views(flat)
    if a.device_values is not None and np.dtype(a.device_values.dtype) == dtype:
        return _ignore_data(gather_launch(a.device_values, index, flat)), views, a.device_values
    source = empty_like_kind(kind, (a.nnz,), dtype)
    gather = gather_launch(source, index, flat)
    copy = None
    if a.nnz:
        copy = host_to_device(source) if a.host_values is not None else _device_copy(source)

    def refresh(data) -> None:
        if copy is not None:
            copy(data)
        gather()

    return refresh, views, source


def _ignore_data(gather: Callable) -> Callable:
    return lambda data: gather()


def _device_copy(device) -> Callable:
    """A function copying a CuPy array (any float dtype) into the CuPy array `device`."""

    def copy(values) -> None:
        device[...] = values

    return copy


def _sddmm_parts(op, A, dense, format, schedule, params, kind: str, key, held: tuple):
    """SDDMM with A decomposed by a rule module, the dense operands on the device: each part
    writes its own values (A's layout in that part) into one flat buffer, taken in A's storage
    order on the device by the slot of each nonzero (on the device once per conversion). After
    the kernel's first run (which checks the parts' structure on the host arrays) the call is
    prepared as `_spmm_parts`' is."""
    module = parts.format_module(format)
    a = _DeviceCSR.of(A, kind)
    csr = a.host_structure()
    fit = lambda X, name, rows, dt: _fit(X, name, rows, dt, kind)  # noqa: E731
    dtype, operands, feat = dense_operands(op.name, a.shape, a.dtype, dense, read=_read, fit=fit)
    if feat == 0:
        return _finish_sddmm(a, a.zero_times(dtype), kind)
    dname, idtype = DTYPE_NAMES[dtype], DTYPE_NAMES[a.idtype]
    conversion = parts.converted(module, csr, params, dname, idtype)
    kernel = parts.parts_kernel(op.name, module, params, conversion, dname, idtype, "cuda", feat, schedule)
    m, n = a.shape
    finish = _sddmm_results(a, kind)
    # The parts' outputs are views of one flat buffer; A's order is one take by the slot of each
    # nonzero (`Conversion.stored_slots`), whose extra last slot stays 0.
    flat = empty_like_kind(kind, (conversion.slots + 1,), dtype)
    _copy_into(flat[conversion.slots :], np.zeros(1, dtype))
    index = _on_device(conversion, kind, "stored_slots", lambda: to_device(conversion.stored_slots, kind))
    refresh, values, _ = _gather_values(conversion, a, dtype, kind)
    sizes = {"m": m, "n": n, "feat": feat}
    checked = id(kernel) in conversion.checked
    if not checked:
        refresh(a.data)
        args = {**dict(zip(op.args, operands)), **sizes, **conversion.structure, **values}
        args.update(conversion.output_views(flat))
        parts.run_parts(kernel, conversion, args, {})
        result = take(flat, index)
    reuse = key is not None and a.canonical_input and _as_given(operands, dense)
    if checked or reuse:
        args = {**dict(zip(op.args, operands)), **sizes, **parts_on_device(conversion, kind), **values}
        args.update(conversion.output_views(flat))
        run = _prepare_sddmm_parts(kernel, args, flat, index, refresh, (a.nnz,), dtype, kind, finish)
        if reuse:
            _remember(key, Repeat(held, A, lambda A: run(A.data)))
    if not checked:
        return finish(result)
    return run(a.data)


def _prepare_sddmm_parts(kernel, args: dict, flat, index, refresh, shape, dtype, kind: str, finish) -> Callable:
    """A decomposed SDDMM on these device arguments, prepared as `_prepare_spmm_parts`: A's values
    gathered on the device (`refresh`), the kernel launched into the parts' outputs (`flat`),
    taken into a fresh result in A's order (a prepared take by `index`)."""
    wanted = set(kernel.parameters)
    launch = kernel.launcher(**{k: v for k, v in args.items() if k in wanted}, check_structure=False)
    fresh = _allocator(kind, shape, dtype)
    back = take_launch(flat, index, fresh()).into(0)

    def run(data):
        refresh(data)
        launch()
        result = fresh()
        back(result)
        return finish(result)

    return run


def _as_given(operands, dense: tuple) -> bool:
    """Whether the kernel reads the caller's dense operands themselves (a numpy operand is copied
    to the device per call: a prepared call would not see new values written into it)."""
    return all(x is y for x, y in zip(operands, dense))


def _remember(key: tuple, repeat: Repeat) -> None:
    REPEATS[key] = repeat
    while len(REPEATS) > REPEAT_ENTRIES:
        REPEATS.popitem(last=False)


def parts_on_device(conversion: parts.Conversion, kind: str) -> dict:
    """The parts' structure arguments with their arrays on the device, copied once per conversion
    (which is itself cached per structure of A): a repeated call moves only the parts' values."""

    def copy():
        structure = conversion.structure.items()
        return {name: to_device(v, kind) if isinstance(v, np.ndarray) else v for name, v in structure}

    return _on_device(conversion, kind, "structure", copy)


def _on_device(conversion: parts.Conversion, kind: str, what: str, make: Callable):
    """`make()` once per conversion, kind and `what` (`ON_DEVICE`)."""
    kept = ON_DEVICE.setdefault(conversion, {})
    if (kind, what) not in kept:
        kept[kind, what] = make()
    return kept[kind, what]


def _kind(A, dense, out) -> str:
    kinds = {kind_of(x) for x in (A, *dense, out) if x is not None} - {"numpy"}
    return "cupy" if "cupy" in kinds else "numba"


def _ndim(X) -> int:
    return len(describe(X).shape) if is_device_array(X) else np.ndim(X)


def structure_on_device(csr: scipy.sparse.csr_matrix, kind: str = "numba") -> tuple:
    """Device copies of a checked scipy CSR's `indptr` and `indices`, made once per structure
    (`DEVICE_STRUCTURES`); host operands on `target="cuda"` use them too (`operators._call`)."""
    key = (csr.shape, kind)
    arrays = DEVICE_STRUCTURES.get(csr.indptr, csr.indices, *key)
    if arrays is None:
        arrays = (to_device(csr.indptr, kind), to_device(csr.indices, kind))
        DEVICE_STRUCTURES.put(csr.indptr, csr.indices, key, arrays)
    return arrays


class _DeviceCSR:
    """A's structure on the device (checked once per structure) and where its values come from."""

    def __init__(self, shape, indptr, indices, idtype, dtype, nnz, kind: str):
        self.shape, self.indptr, self.indices = shape, indptr, indices
        self.idtype, self.dtype, self.nnz, self.kind = idtype, dtype, nnz, kind
        self.host_values = None  # a scipy A's values (to the device per call)
        self.device_values = None  # a cupyx A's values
        self.canonical_input = False  # whether A itself is the canonical CSR the kernel reads
        self.matrix = None  # a cupyx A in canonical form (the template of SDDMM's results)
        self.csr = None  # a scipy A's canonical CSR

    @classmethod
    def of(cls, A, kind: str) -> _DeviceCSR:
        if is_device_sparse(A):
            return cls._of_cupyx(A)
        if not scipy.sparse.issparse(A):
            raise InputError(f"`A` must be a scipy or cupyx.scipy.sparse matrix, got {type(A).__name__}")
        csr = as_csr(A)
        if not structure_checked(csr):
            remember_structure(csr)  # as_csr checked the raw arrays and made them canonical
        self = cls(csr.shape, *structure_on_device(csr, kind), csr.indices.dtype, csr.dtype, csr.nnz, kind)
        self.host_values = csr.data
        self.canonical_input = csr is A
        self.csr = csr
        return self

    @classmethod
    def _of_cupyx(cls, A) -> _DeviceCSR:
        given = A
        if A.format != "csr":
            A = A.tocsr()
        if not A.has_canonical_format:
            A = A.copy()
            A.sum_duplicates()  # sorts the indices of each row too
        if STRUCTURES.get(A.indptr, A.indices, A.shape) is None:
            # One host copy of the structure, the first time: the same checks as a scipy A.
            host = scipy.sparse.csr_matrix(
                (np.zeros(A.nnz, np.dtype(A.dtype)), A.indices.get(), A.indptr.get()), shape=A.shape
            )
            as_csr(host)
            STRUCTURES.put(A.indptr, A.indices, (A.shape,), True)
        check_kind(np.dtype(A.dtype), "`A`'s values")
        self = cls(A.shape, A.indptr, A.indices, np.dtype(A.indices.dtype), np.dtype(A.dtype), A.nnz, "cupy")
        self.device_values = A.data
        self.canonical_input = A is given
        self.matrix = A
        return self

    @property
    def data(self):
        """A's values in canonical order: the host array of a scipy A, the device array of a cupyx A."""
        return self.host_values if self.host_values is not None else self.device_values

    def host_structure(self) -> scipy.sparse.csr_matrix:
        """A's structure as a checked scipy CSR on the host, for a conversion made there (decomposed
        formats): a scipy A's canonical CSR, or for a cupyx A one host copy of its indptr/indices
        (values 0) made once per structure (`HOST_STRUCTURES`) and kept while A's arrays live."""
        if self.csr is not None:
            return self.csr
        host = HOST_STRUCTURES.get(self.indptr, self.indices, self.shape)
        if host is None:
            indptr, indices = self.indptr.get(), self.indices.get()
            host = scipy.sparse.csr_matrix((np.zeros(self.nnz, self.dtype), indices, indptr), shape=self.shape)
            host.indptr, host.indices = indptr, indices  # A's index dtype (scipy's constructor may narrow it)
            host.has_canonical_format = True
            remember_structure(host)  # checked when A's arrays were first seen (`_of_cupyx`)
            HOST_STRUCTURES.put(self.indptr, self.indices, (self.shape,), host)
        return host

    def values(self, dtype: np.dtype):
        """A's values of `dtype` on the device (a host A's go there now: they may have changed)."""
        if self.device_values is not None:
            return self.device_values if self.device_values.dtype == dtype else self.device_values.astype(dtype)
        return to_device(np.ascontiguousarray(self.host_values, dtype=dtype), self.kind)

    def zero_times(self, dtype: np.dtype):
        """SDDMM of width 0: A * 0 (NaN where A holds inf or NaN, as `A.multiply` gives)."""
        if self.device_values is not None:
            return self.values(dtype) * dtype.type(0)
        return to_device(np.ascontiguousarray(self.host_values, dtype=dtype) * dtype.type(0), self.kind)


def _read(X, name: str):
    if not is_device_array(X):
        return dense_operand(X, name)
    info = describe(X)
    check_kind(info.dtype, f"`{name}`")
    if len(info.shape) != 2:
        raise InputError(f"`{name}` must be a 2-D array, got shape {info.shape}")
    return X


def _fit(X, name: str, rows: int, dtype: np.dtype, kind: str):
    if not is_device_array(X):
        return to_device(check_dense(X, name, rows, dtype), kind)
    info = describe(X)
    if info.shape[0] != rows:
        raise InputError(f"`{name}` must have {rows} rows, got {info.shape[0]}")
    if info.dtype != dtype:
        raise InputError(
            f"`{name}` is a device array of {info.dtype} but the result is {dtype} (float32 only when A and every "
            f"operand are float32); device arrays are not converted: pass `{name}` as {dtype}"
        )
    if not info.c_contiguous:
        raise InputError(f"`{name}` must be a C-contiguous device array")
    return X


def _result(op: str, kind: str, shape: tuple, dtype: np.dtype, out, vector: bool):
    if out is None:
        return empty_like_kind(kind, shape, dtype)
    if op != "spmm":
        raise InputError("`out` is not taken by sddmm")
    if not is_device_array(out):
        raise InputError(f"`out` must be a device array when the operands are, got {type(out).__name__}")
    info = describe(out)
    want = (shape[0],) if vector else shape
    if info.shape != want:
        raise InputError(f"`out` must have shape {want}, got {info.shape}")
    if info.dtype != dtype:
        raise InputError(f"`out` must have dtype {dtype} (the result's), got {info.dtype}")
    if not info.c_contiguous:
        raise InputError("`out` must be a C-contiguous device array")
    return out.reshape(shape) if vector else out


def _finish_sddmm(a: _DeviceCSR, values, kind: str):
    return _sddmm_results(a, kind)(values)


def _sddmm_results(a: _DeviceCSR, kind: str) -> Callable:
    """What an SDDMM on device operands returns for its values: the values themselves (Numba),
    or a `cupyx.scipy.sparse.csr_matrix` with A's structure (cupy; `SharedStructure`, one per
    structure of A, `SDDMM_RESULTS`)."""
    if kind != "cupy":
        return _identity
    results = SDDMM_RESULTS.get(a.indptr, a.indices, a.shape)
    if results is None:
        import cupyx.scipy.sparse

        if a.matrix is not None:  # a canonical cupyx A: its own fields, structure copied
            results = SharedStructure(a.matrix)
        else:  # a scipy A's structure on the device: cupyx's constructor once
            values = empty_like_kind(kind, (a.nnz,), a.dtype)
            first = cupyx.scipy.sparse.csr_matrix((values, a.indices, a.indptr), shape=a.shape)
            results = SharedStructure(first)
        SDDMM_RESULTS.put(a.indptr, a.indices, (a.shape,), results)
    return results


def _identity(values):
    return values


class SharedStructure:
    """SDDMM results of one structure as sparse matrices of `template`'s class, built without the
    class's constructor: cupyx's checks A's index arrays on the device (a synchronising read of
    their contents, ~200 us a call on an H200) and copies them. Each result is a new object with
    its own `data` (the values given); its `indptr` and `indices` are one copy of the template's,
    made once and shared by every result of this structure (A's own arrays are never shared, so
    changing a result's structure in place never reaches A, but may reach the other results;
    `eliminate_zeros`, `sum_duplicates` and `sort_indices` give a result new arrays, or nothing to
    do, since the structure is canonical). The template's other fields (shape, descriptor,
    canonical-format flags) are copied as they are."""

    def __init__(self, template):
        self.cls = type(template)
        fields = dict(template.__dict__)
        fields["indices"], fields["indptr"] = template.indices.copy(), template.indptr.copy()
        # The structure is canonical (checked once per structure): no device pass to find out again.
        fields["_has_canonical_format"] = fields["_has_sorted_indices"] = True
        fields.pop("data", None)
        self.fields = fields

    def __call__(self, values):
        result = object.__new__(self.cls)
        result.__dict__.update(self.fields)
        result.data = values
        return result
