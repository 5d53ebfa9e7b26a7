"""Storage facts of sparse buffers: how many positions a level stores, the shape and order of a
buffer's value array, and the integer type wide enough to index it.

Lowering (`lower_sparse_iter`, `lower_sparse_buffer`), argument binding (`format.args`) and the
kernels all read these facts from here, so the symbolic storage shape a pass emits and the shape an
argument array is checked against are one definition.
"""

from __future__ import annotations

from ..ir import make as mk
from ..ir.axis import DENSE_FIXED, SPARSE_FIXED, Axis
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.eval import eval_int
from ..ir.expr import IntImm, PrimExpr, Var


def n_positions(a: Axis) -> PrimExpr:
    """Stored positions of the whole level of `a`, as an expression of the parameters."""
    if a.kind == DENSE_FIXED:
        return a.length
    if a.kind == SPARSE_FIXED:
        return mk.mul(n_positions(a.parent), a.nnz_cols)
    return a.nnz


INT32_MAX = 2**31 - 1


def storage_shape(buf: SparseBuffer) -> tuple[PrimExpr, ...]:
    """(nnz of the last sparse/variable axis, *trailing extents), or the dense shape; with
    `extra_storage` (one-dimensional storage only, as the verifier checks) that many more."""
    shape = _axes_storage_shape(buf)
    if buf.extra_storage is None:
        return shape
    return (mk.add(shape[0], mk.cast(shape[0].dtype, buf.extra_storage)), *shape[1:])


def _axes_storage_shape(buf: SparseBuffer) -> tuple[PrimExpr, ...]:
    last = max((k for k, a in enumerate(buf.axes) if a.kind != DENSE_FIXED), default=None)
    if last is None:
        return tuple(a.length for a in buf.axes)
    size: PrimExpr = n_positions(buf.axes[last])
    for a in buf.axes[:last]:
        if a.kind == DENSE_FIXED and a is not buf.axes[last].root() and a not in buf.axes[last].ancestors():
            size = mk.mul(size, a.length)  # an unrelated dense level in front (rare)
    return (size, *(a.length for a in buf.axes[last + 1 :]))


def _const_size(shape: tuple[PrimExpr, ...]) -> int | None:
    size = 1
    for s in shape:
        if not isinstance(s, IntImm):
            return None
        size *= s.value
    return size


def offset_dtype(buf: SparseBuffer | FlatBuffer) -> str:
    """int32 only where the storage size provably fits; int64 otherwise."""
    shape = storage_shape(buf) if isinstance(buf, SparseBuffer) else buf.shape
    size = _const_size(shape)
    if size is not None:
        return "int32" if size <= INT32_MAX else "int64"
    if isinstance(buf, SparseBuffer) and len(shape) == 1:
        last = max((k for k, a in enumerate(buf.axes) if a.kind != DENSE_FIXED), default=None)
        if last is not None:
            return buf.axes[last].idtype  # nnz of that level fits its index dtype (checked at run time)
    if len(shape) == 1 and shape[0].dtype == "int32":
        return "int32"
    return "int64"


def storage_order(buf) -> str:
    """How an argument array of `buf` is flattened: "C", or "F" for a column-major layout."""
    return "C" if isinstance(buf, SparseBuffer) or buf.layout.is_row_major() else "F"


_STORAGE: dict[int, tuple[SparseBuffer, tuple]] = {}


def eval_storage_shape(buf: SparseBuffer, scalars: dict[Var, int | float]) -> tuple[int, ...]:
    """The argument shape of a sparse buffer for one call: `storage_shape` evaluated (cached per buffer)."""
    entry = _STORAGE.get(id(buf))
    if entry is None or entry[0] is not buf:
        entry = _STORAGE[id(buf)] = (buf, storage_shape(buf))
    return tuple(eval_int(e, scalars, f"storage of `{buf.name}`") for e in entry[1])
