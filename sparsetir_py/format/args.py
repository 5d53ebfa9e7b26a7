"""Binding and checking the arguments of a function, the same way for kernels and the interpreter.

Every failure is an `InputError` that names the argument: wrong dtype, shape or length, not
contiguous, indptr not starting at 0 / decreasing / not ending at nnz, indices out of range,
unsorted or duplicated where an axis is declared sorted, nnz overflowing the index dtype.
The O(nnz) structure checks can be turned off with `check_structure=False`.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..ir import dtype as dt
from ..ir.axis import DENSE_FIXED, DENSE_VARIABLE, SPARSE_FIXED, Axis
from ..ir.buffer import SparseBuffer
from ..ir.eval import eval_int
from ..ir.expr import Var
from ..ir.func import PrimFunc
from .storage import eval_storage_shape, storage_order


@dataclass
class AxisData:
    """Sizes and structure arrays of one axis for one call."""

    axis: Axis
    length: int
    n_pos: int  # stored positions of the whole level
    indptr: np.ndarray | None = None
    indices: np.ndarray | None = None
    nnz_cols: int | None = None


@dataclass
class BoundArguments:
    """Arguments of one call, checked: scalars, arrays, axis structure, flat views of buffers."""

    func: PrimFunc
    values: dict[str, object]
    scalars: dict[Var, int | float] = field(default_factory=dict)
    arrays: dict[Var, np.ndarray] = field(default_factory=dict)
    axes: dict[Axis, AxisData] = field(default_factory=dict)
    buffers: dict[object, np.ndarray] = field(default_factory=dict)  # buffer -> 1-D view of its storage


def bind_values(func: PrimFunc, args: tuple, kwargs: dict) -> dict[str, object]:
    names = [p.name for p in func.params]
    if len(args) > len(names):
        raise InputError(f"`{func.name}` takes {len(names)} arguments, got {len(args)}")
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise InputError(f"`{func.name}` has no parameter `{k}` (parameters: {', '.join(names)})")
        if k in values:
            raise InputError(f"argument `{k}` given twice")
        values[k] = v
    missing = [n for n in names if n not in values]
    if missing:
        raise InputError(f"missing argument{'s' if len(missing) > 1 else ''} {', '.join(f'`{m}`' for m in missing)}")
    return values


@functools.cache
def _int_bounds(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _check_scalar(p: Var, value: object) -> int | float:
    if dt.is_int(p.dtype):
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
            raise InputError(f"argument `{p.name}` must be an integer ({p.dtype}), got {type(value).__name__}")
        lo, hi = _int_bounds(p.dtype)
        if not lo <= int(value) <= hi:
            raise InputError(f"argument `{p.name}` = {int(value)} does not fit in {p.dtype}")
        return int(value)
    if dt.is_float(p.dtype):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise InputError(f"argument `{p.name}` must be a number ({p.dtype}), got {type(value).__name__}")
        return float(value)
    if p.dtype == "bool":
        return bool(value)
    raise InputError(f"argument `{p.name}` has unsupported dtype {p.dtype}")


def _array(name: str, value: object) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise InputError(f"argument `{name}` must be a numpy array, got {type(value).__name__}")
    return value


def _structure_array(name: str, value: object, idtype: str, length: int, role: str) -> np.ndarray:
    arr = _array(name, value)
    if arr.ndim != 1:
        raise InputError(f"argument `{name}` ({role}) must be 1-D, got shape {arr.shape}")
    if arr.dtype != np.dtype(idtype):
        raise InputError(f"argument `{name}` ({role}) must have dtype {idtype}, got {arr.dtype}")
    if arr.shape[0] != length:
        raise InputError(f"argument `{name}` ({role}) must have length {length}, got {arr.shape[0]}")
    if not arr.flags.c_contiguous:
        raise InputError(f"argument `{name}` ({role}) must be contiguous")
    return arr


def _check_axis(ad: AxisData, values: dict, parent: AxisData | None, check_structure: bool) -> None:
    a = ad.axis
    n_parent = parent.n_pos if parent is not None else 1
    limit = _int_bounds(a.idtype)[1]
    if ad.n_pos > limit:
        raise InputError(f"axis `{a.name}` stores {ad.n_pos} positions, more than {a.idtype} can index")
    if a.indptr is not None:
        name = a.indptr.name
        ip = _structure_array(name, values[name], a.idtype, n_parent + 1, f"indptr of axis `{a.name}`")
        if check_structure:
            if ip[0] != 0:
                raise InputError(f"argument `{name}` (indptr of axis `{a.name}`) must start at 0, got {ip[0]}")
            steps = np.diff(ip)
            if steps.size and steps.min() < 0:
                row = int(np.argmax(steps < 0))
                raise InputError(f"argument `{name}` (indptr of axis `{a.name}`) decreases at row {row}")
            if ip[-1] != ad.n_pos:
                raise InputError(
                    f"argument `{name}` (indptr of axis `{a.name}`) must end at nnz = {ad.n_pos}, got {ip[-1]}"
                )
            if a.kind == DENSE_VARIABLE and steps.size and steps.max() > ad.length:
                raise InputError(
                    f"argument `{name}` (indptr of axis `{a.name}`) has a row of {steps.max()} elements, "
                    f"longer than the axis length {ad.length}"
                )
        ad.indptr = ip
    if a.indices is not None:
        name = a.indices.name
        ix = _structure_array(name, values[name], a.idtype, ad.n_pos, f"indices of axis `{a.name}`")
        if check_structure and ix.size:
            lo, hi = ix.min(), ix.max()
            if lo < 0 or hi >= ad.length:
                bad = lo if lo < 0 else hi
                raise InputError(
                    f"argument `{name}` (indices of axis `{a.name}`) holds {bad}, outside [0, {ad.length})"
                )
            _check_rows(ad, ix, name)
        ad.indices = ix


def _check_rows(ad: AxisData, ix: np.ndarray, name: str) -> None:
    """Coordinates within a row are unique, and increasing when the axis is sorted."""
    a = ad.axis
    if a.kind == SPARSE_FIXED:
        row_start = np.zeros(ad.n_pos, dtype=bool)
        if ad.nnz_cols:
            row_start[:: ad.nnz_cols] = True
    else:
        row_start = np.zeros(ad.n_pos + 1, dtype=bool)
        row_start[ad.indptr[:-1]] = True
        row_start = row_start[: ad.n_pos]
    if a.sorted:
        same_row_step = np.diff(ix.astype(np.int64))[~row_start[1:]] if ix.size > 1 else np.zeros(0)
        if same_row_step.size and same_row_step.min() <= 0:
            where = int(np.flatnonzero(~row_start[1:] & (np.diff(ix.astype(np.int64)) <= 0))[0]) + 1
            raise InputError(
                f"argument `{name}` (indices of axis `{a.name}`) is not strictly increasing within a row at "
                f"position {where} (the axis is declared sorted)"
            )
        return
    rows = np.cumsum(row_start) - 1
    keys = rows.astype(np.int64) * max(ad.length, 1) + ix.astype(np.int64)
    if np.unique(keys).size != keys.size:
        raise InputError(f"argument `{name}` (indices of axis `{a.name}`) repeats a coordinate within a row")


def _buffer_view(name: str, value: object, dtype: str, shape: tuple[int, ...], order: str) -> np.ndarray:
    arr = _array(name, value)
    if arr.dtype != np.dtype(dtype):
        raise InputError(f"argument `{name}` must have dtype {dtype}, got {arr.dtype}")
    size = math.prod(shape)
    if arr.shape != shape and arr.shape != (size,):
        raise InputError(f"argument `{name}` must have shape {shape} (or ({size},)), got {arr.shape}")
    contiguous = arr.flags.f_contiguous if order == "F" and arr.ndim > 1 else arr.flags.c_contiguous
    if not contiguous:
        layout = "column-major (Fortran)" if order == "F" else "C"
        raise InputError(f"argument `{name}` must be {layout}-contiguous")
    return arr.reshape(-1, order=order if arr.ndim > 1 else "C")


def bind_arguments(func: PrimFunc, args: tuple = (), kwargs: dict | None = None, *, check_structure: bool = True):
    """Bind `args`/`kwargs` to `func`'s parameters and check them; raises `InputError`."""
    values = bind_values(func, tuple(args), dict(kwargs or {}))
    bound = BoundArguments(func, values)
    for p in func.params:
        if p.dtype == "handle":
            bound.arrays[p] = values[p.name]
        else:
            bound.scalars[p] = _check_scalar(p, values[p.name])
    for a in func.axes:
        length = eval_int(a.length, bound.scalars, f"length of axis `{a.name}`")
        if length < 0:
            raise InputError(f"axis `{a.name}` has negative length {length}")
        parent = bound.axes.get(a.parent) if a.parent is not None else None
        if a.kind == DENSE_FIXED:
            ad = AxisData(a, length, length)
        elif a.kind == SPARSE_FIXED:
            cols = eval_int(a.nnz_cols, bound.scalars, f"nnz_cols of axis `{a.name}`")
            if cols < 0:
                raise InputError(f"axis `{a.name}` has negative nnz_cols {cols}")
            ad = AxisData(a, length, parent.n_pos * cols, nnz_cols=cols)
        else:
            nnz = eval_int(a.nnz, bound.scalars, f"nnz of axis `{a.name}`")
            if nnz < 0:
                raise InputError(f"axis `{a.name}` has negative nnz {nnz}")
            ad = AxisData(a, length, nnz)
        _check_axis(ad, values, parent, check_structure)
        bound.axes[a] = ad
    written = written_buffers(func)
    for buf in func.buffers:
        if isinstance(buf, SparseBuffer):
            shape = eval_storage_shape(buf, bound.scalars)
        else:
            shape = tuple(eval_int(s, bound.scalars, f"shape of `{buf.name}`") for s in buf.shape)
        order = storage_order(buf)
        if buf.data is None:
            bound.buffers[buf] = np.zeros(math.prod(shape), dtype=buf.dtype)
            continue
        view = _buffer_view(buf.data.name, values[buf.data.name], buf.dtype, shape, order)
        if buf in written and not view.flags.writeable:
            raise InputError(f"argument `{buf.data.name}` is read-only, but `{func.name}` writes it")
        bound.buffers[buf] = view
    return bound


_WRITTEN: dict[int, tuple[PrimFunc, frozenset]] = {}


def written_buffers(func: PrimFunc) -> frozenset:
    """Buffers that the function stores to (computed once per function object)."""
    from ..ir.stmt import AtomicAdd, BufferStore
    from ..ir.visit import walk

    entry = _WRITTEN.get(id(func))
    if entry is None or entry[0] is not func:
        written = frozenset(n.buffer for n in walk(func.body) if isinstance(n, BufferStore | AtomicAdd))
        entry = _WRITTEN[id(func)] = (func, written)
    return entry[1]
