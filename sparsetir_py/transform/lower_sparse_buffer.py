"""`lower_sparse_buffer`: Stage II (position space) -> Stage III (flat buffers), as SparseTIR.

Every sparse buffer becomes a flat buffer of its storage shape (`(nnz_k, *trailing dense
extents)`, or the dense shape), and every access becomes one flat offset computed from the
positions, axis by axis: a dense level multiplies by its length, a fixed sparse level by its
`nnz_cols`, a variable level jumps through its `indptr`. Dense buffers are flattened through their
layout (row-major unless `layouts=` says otherwise), so a column-major operand needs no change
to the script. Offsets are computed in int64 unless the storage size provably fits in int32: the
size of one level (`nnz` of an int32 axis is checked at run time) or a small constant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..arith.interval import int_range
from ..arith.layout_maps import linearize_map
from ..errors import LoweringError
from ..format.storage import offset_dtype, storage_shape
from ..ir import make as mk
from ..ir.axis import DENSE_FIXED, SPARSE_FIXED
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BinOp, BufferLoad, Call, IntImm, PrimExpr, as_expr, is_const
from ..ir.func import IRModule, PrimFunc
from ..ir.layout import Layout, LayoutError
from ..ir.node import FrozenDict
from ..ir.stmt import AtomicAdd, Block, BufferRegion, BufferStore, Range
from ..ir.verify import verify_cached
from ..ir.visit import map_children


class BufferFlattening:
    def __init__(self, func: PrimFunc, layouts: Mapping[str, Layout]):
        self.func = func
        self.flat: dict[object, FlatBuffer] = {}
        self.indptr: dict[object, FlatBuffer] = {}  # axis -> its indptr buffer
        by_handle = {b.data.name: b for b in func.buffers if b.data is not None}
        for key in layouts:
            if key not in by_handle:
                raise LoweringError(f"layouts: `{key}` is not a buffer parameter of `{func.name}`")
        self.layouts = dict(layouts)

    def flat_buffer(self, buf) -> FlatBuffer:
        if buf in self.flat:
            return self.flat[buf]
        if isinstance(buf, FlatBuffer):
            self.flat[buf] = buf
            return buf
        layout = self.layouts.get(buf.data.name) if buf.data is not None else None
        if layout is not None and any(a.kind != DENSE_FIXED for a in buf.axes):
            raise LoweringError(f"layouts: `{buf.data.name}` is a sparse buffer; layouts apply to dense buffers")
        shape = storage_shape(buf)
        if layout is not None and layout.rank != len(shape):
            raise LoweringError(f"layouts: `{buf.data.name}` has rank {len(shape)} but the layout has {layout.rank}")
        out = FlatBuffer(buf.name, shape, buf.dtype, buf.data, layout, buf.scope, buf.value_range)
        self.flat[buf] = out
        return out

    def indptr_buffer(self, axis) -> FlatBuffer:
        """The buffer viewing `axis`'s indptr: a flat one (what lower_sparse_iter declares) or, as
        SparseTIR's Stage II scripts write it, a sparse one over the parent's axes with
        `extra_storage=1`, flattened."""
        for b in self.func.buffers:
            if b.data is axis.indptr and (isinstance(b, FlatBuffer) or b.extra_storage is not None):
                return self.flat_buffer(b)
        raise LoweringError(
            f"axis `{axis.name}` has no indptr buffer: declare one over its indptr "
            f"(`T.match_buffer({axis.indptr.name}, (rows + 1,), ...)`), or run lower_sparse_iter first"
        )

    def offset(self, buf, indices: tuple[PrimExpr, ...]) -> PrimExpr:
        """The flat element offset of `buf[indices]` (position space)."""
        flat = self.flat_buffer(buf)
        dtype = offset_dtype(buf)
        if isinstance(buf, FlatBuffer) or all(a.kind == DENSE_FIXED for a in buf.axes):
            if len(indices) == 1:
                return indices[0]
            shape = [mk.cast(dtype, s) for s in flat.shape]
            return layout_offset(flat.layout, [mk.cast(dtype, i) for i in indices], shape)
        off: PrimExpr | None = None
        for a, idx in zip(buf.axes, indices):
            idx = mk.cast(dtype, idx)
            if off is None:
                off = idx
            elif a.kind == DENSE_FIXED:
                off = mk.add(mk.mul(off, mk.cast(dtype, a.length)), idx)
            elif a.kind == SPARSE_FIXED:
                off = mk.add(mk.mul(off, mk.cast(dtype, a.nnz_cols)), idx)
            else:
                start = BufferLoad(self.indptr_buffer(a), (off,))
                off = mk.add(mk.cast(dtype, start), idx)
        return off

    def region(self, r: BufferRegion) -> BufferRegion:
        flat = self.flat_buffer(r.buffer)
        if all(isinstance(rg.extent, IntImm) and rg.extent.value == 1 for rg in r.region):
            point = self.offset(r.buffer, tuple(rg.min for rg in r.region))
            return BufferRegion(flat, (Range(point, IntImm(1, point.dtype)),))
        size = flat.shape[0]
        for s in flat.shape[1:]:
            size = mk.mul(mk.cast("int64", size), mk.cast("int64", s))
        return BufferRegion(flat, (Range(IntImm(0, size.dtype), size),))

    def rewrite(self, node):
        node = map_children(node, self.rewrite)
        if isinstance(node, BufferLoad):
            return BufferLoad(self.flat_buffer(node.buffer), (self.offset(node.buffer, node.indices),))
        if isinstance(node, BufferStore | AtomicAdd):
            return node.replace(buffer=self.flat_buffer(node.buffer), indices=(self.offset(node.buffer, node.indices),))
        if isinstance(node, Call) and any(isinstance(a, SparseBuffer | FlatBuffer) for a in node.args):
            args = tuple(self.flat_buffer(a) if isinstance(a, SparseBuffer | FlatBuffer) else a for a in node.args)
            return node.replace(args=args)
        if isinstance(node, Block):
            return node.replace(
                reads=tuple(self.region(r) for r in node.reads),
                writes=tuple(self.region(r) for r in node.writes),
            )
        return node

    def run(self) -> PrimFunc:
        # Regions and accesses still refer to Stage II buffers while rewriting: rewrite bottom-up,
        # converting each node once, so index expressions are flattened before their parents.
        body = self.rewrite(self.func.body)
        buffers = tuple(self.flat_buffer(b) for b in self.func.buffers)
        attrs = FrozenDict({**self.func.attrs, "stage": 3})
        return self.func.replace(buffers=buffers, body=body, attrs=attrs)


def lower_sparse_buffer(mod: PrimFunc | IRModule, layouts: Mapping[str, Layout] | None = None) -> IRModule:
    """Flatten every buffer of every Stage II function of `mod` (others pass through).

    `layouts` maps a dense buffer's parameter name to its `Layout` (e.g. column-major
    `sp.Layout((0, 1))`); the kernel then expects arrays in that layout.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> mod = sp.lower_sparse_buffer(sp.lower_sparse_iter(spmm_script()))
    >>> mod["main"].stage, "A[J_indptr[vi] + vj]" in mod["main"].script()
    (3, True)
    """
    mod = IRModule.from_any(mod)
    verify_cached(mod)  # a named error for ill-formed input, not a wrong flattening
    out = {}
    for name, func in mod.items():
        if func.stage == 1:
            raise LoweringError(f"`{func.name}` is at Stage I: run lower_sparse_iter first")
        out[name] = BufferFlattening(func, layouts or {}).run() if func.stage == 2 else func
    return IRModule(FrozenDict(out))


# ------------------------------------------------------------------ dense offsets through layouts
def layout_offset(layout: Layout, indices: Sequence[PrimExpr | int], shape: Sequence[PrimExpr | int]) -> PrimExpr:
    """The flat offset of `buffer[indices]` in `layout`, as an IR expression.

    Untiled layouts work with symbolic shapes (`sum(index[d] * stride[d])`); tiled layouts
    need integer shapes and go through the simplified `linearize_map`.
    """
    layout.check_rank(len(shape))
    if len(indices) != len(shape):
        raise LayoutError(f"{len(indices)} indices for a shape of rank {len(shape)}")
    index_exprs = [as_expr(i) for i in indices]
    dtype = index_exprs[0].dtype if index_exprs else "int32"
    if layout.tiles:
        sizes = [_as_int(n) for n in shape]
        if any(n is None for n in sizes):
            raise LayoutError(f"tiled layout {layout} needs a constant shape, got {tuple(shape)}")
        from ..arith.interval import from_affine

        (offset,) = linearize_map(sizes, layout).results
        return from_affine(offset, index_exprs, dtype=dtype)
    offset: PrimExpr | None = None
    stride: PrimExpr = IntImm(1, dtype)
    for d in layout.minor_to_major:
        term = index_exprs[d] if is_const(stride, 1) else _mul(index_exprs[d], stride)
        offset = term if offset is None else _add(offset, term)
        stride = _mul(stride, as_expr(shape[d], dtype))
    return IntImm(0, dtype) if offset is None else offset


def _as_int(value: Any) -> int | None:
    """The value of a constant extent (an int, an `IntImm`, or any expression with one value)."""
    if isinstance(value, int):
        return value
    if isinstance(value, IntImm):
        return value.value
    lo, hi = int_range(value)
    return lo if lo is not None and lo == hi else None


def _mul(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value * b.value, a.dtype)
    if isinstance(b, IntImm) and b.value == 1:
        return a
    if isinstance(a, IntImm) and a.value == 1:
        return b
    return BinOp("*", a, b)


def _add(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value + b.value, a.dtype)
    return BinOp("+", a, b)
