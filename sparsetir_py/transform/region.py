"""Read/write region analysis of blocks (step 4 of `lower_sparse_iter`).

A block's regions cover every access inside it, nested loops and blocks included, in terms of
the variables visible at the block. An index that uses no variable bound inside the block is a
single point; an index that is a variable bound inside (a loop or an inner block iterator) covers
that variable's range; anything else (an index that reads the block's own scratch buffers, too)
covers the whole dimension. Several accesses to one buffer
are joined dimension by dimension (equal ranges stay, different ones widen to the dimension).
"""

from __future__ import annotations

from ..ir import make as mk
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.stmt import Allocate, AtomicAdd, Block, BufferRegion, BufferStore, For, Range, Stmt
from ..ir.visit import post_order_rewrite, walk


def dimension(buf, k: int) -> Range:
    """The whole of dimension `k` of `buf` in position space."""
    if isinstance(buf, FlatBuffer):
        extent = buf.shape[k] if len(buf.shape) > k else buf.shape[0]
        return Range(IntImm(0, extent.dtype), extent)
    extent = buf.axes[k].length  # local positions of a sparse level are below its length, too
    return Range(IntImm(0, extent.dtype), extent)


class _Collector:
    def __init__(self):
        self.ranges: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
        self.local: set = set()
        self.accesses: list[tuple[str, object, tuple[PrimExpr, ...] | None]] = []

    def expr(self, e: PrimExpr | None) -> None:
        if e is None:
            return
        for n in walk(e):
            if isinstance(n, BufferLoad):
                self.accesses.append(("r", n.buffer, n.indices))
            elif isinstance(n, Call):
                for a in n.args:
                    if isinstance(a, SparseBuffer | FlatBuffer):
                        self.accesses.append(("r", a, None))

    def stmt(self, s: Stmt | None) -> None:
        if s is None:
            return
        if isinstance(s, For):
            self.expr(s.min)
            self.expr(s.extent)
            self.ranges[s.loop_var] = (s.min, s.extent)
            self.stmt(s.body)
        elif isinstance(s, Block):
            for iv in s.iter_vars:
                self.expr(iv.extent)
                self.expr(iv.value)
                self.ranges[iv.var] = (IntImm(0, iv.extent.dtype), iv.extent)
            self.local.update(s.alloc_buffers)
            self.expr(s.predicate)
            self.stmt(s.init)
            self.stmt(s.body)
        elif isinstance(s, BufferStore | AtomicAdd):
            for i in s.indices:
                self.expr(i)
            self.expr(s.value)
            if isinstance(s, AtomicAdd):
                self.accesses.append(("r", s.buffer, s.indices))
            self.accesses.append(("w", s.buffer, s.indices))
        elif isinstance(s, Allocate):
            self.local.add(s.buffer)
            self.stmt(s.body)
        else:
            for _, value in s.fields():
                items = value if isinstance(value, tuple) else (value,)
                for v in items:
                    if isinstance(v, Stmt):
                        self.stmt(v)
                    elif isinstance(v, PrimExpr):
                        self.expr(v)


def _uses(e: PrimExpr, names) -> bool:
    return any(isinstance(n, Var) and n in names for n in walk(e))


def _relax(collector: _Collector, buf, indices) -> tuple[Range, ...]:
    ndim = len(buf.axes) if isinstance(buf, SparseBuffer) else len(indices or buf.shape)
    if indices is None:
        return tuple(dimension(buf, k) for k in range(ndim))
    inner = collector.ranges
    out = []
    for k, idx in enumerate(indices):
        # An index that reads the block's own scratch (a merge's position) changes inside it.
        varies = _uses(idx, inner) or any(isinstance(n, BufferLoad) and n.buffer in collector.local for n in walk(idx))
        if not varies:
            out.append(Range(idx, IntImm(1, idx.dtype)))
            continue
        if isinstance(idx, Var) and idx in inner:
            lo, extent = inner[idx]
            if not _uses(lo, inner) and not _uses(extent, inner):
                out.append(Range(mk.cast(idx.dtype, lo), mk.cast(idx.dtype, extent)))
                continue
        out.append(dimension(buf, k))
    return tuple(out)


def _join(a: tuple[Range, ...], b: tuple[Range, ...], buf) -> tuple[Range, ...]:
    return tuple(x if x == y else dimension(buf, k) for k, (x, y) in enumerate(zip(a, b)))


def block_regions(block: Block) -> tuple[tuple[BufferRegion, ...], tuple[BufferRegion, ...]]:
    """(reads, writes) of `block`."""
    c = _Collector()
    c.local.update(block.alloc_buffers)
    c.stmt(block.init)
    c.stmt(block.body)
    found: dict[str, dict] = {"r": {}, "w": {}}
    for kind, buf, indices in c.accesses:
        if buf in c.local:
            continue
        region = _relax(c, buf, indices)
        seen = found[kind]
        seen[buf] = _join(seen[buf], region, buf) if buf in seen else region
    reads = tuple(BufferRegion(b, r) for b, r in found["r"].items())
    writes = tuple(BufferRegion(b, r) for b, r in found["w"].items())
    return reads, writes


def annotate_regions(func: PrimFunc) -> PrimFunc:
    """Every block of `func` with its read and write regions recomputed."""

    def rule(n):
        if isinstance(n, Block):
            reads, writes = block_regions(n)
            return n.replace(reads=reads, writes=writes)
        return n

    return func.replace(body=post_order_rewrite(func.body, rule))
