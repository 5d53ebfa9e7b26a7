"""Buffer regions for the schedule primitives: which elements a subtree reads or writes.

Accesses are collected with every block iterator replaced by its binding, so an index is an
expression of loop variables and of variables bound outside the subtree. `relax` then bounds it
over the loops inside the subtree with `arith.symbolic_range` (`i * 4 + j` over `j in [0, 3]`
is `[i * 4, i * 4 + 3]`). A dimension the analysis cannot bound, or cannot prove inside the
buffer, covers the whole dimension (`Dim.whole`). Block predicates are not used: a region may
be larger than what runs, never smaller.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arith.affine import DimId, FloorDiv, Mod
from ..arith.interval import prove, simplify, symbolic_range, to_affine
from ..ir import make as mk
from ..ir.axis import DENSE_FIXED
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BinOp, BufferLoad, Call, IntImm, PrimExpr, Var
from ..ir.stmt import AtomicAdd, Block, BufferStore, For, LetStmt, Stmt
from ..ir.visit import post_order_rewrite, substitute, walk
from .state import child_stmts, show_expr


def fix_dtypes(e: PrimExpr) -> PrimExpr:
    """`e` with casts where operands of an arithmetic operator differ in dtype.

    The index analysis works on integers and drops casts (`to_affine`), so what it gives back
    (`simplify`, `symbolic_range`) can mix int32 and int64 operands; IR must not.
    """

    def rule(n):
        if isinstance(n, BinOp) and n.a.dtype != n.b.dtype and n.op not in ("and", "or"):
            a, b = mk.unify(n.a, n.b)
            return BinOp(n.op, a, b)
        return n

    return post_order_rewrite(e, rule)


def simplify_ir(e: PrimExpr) -> PrimExpr:
    """`arith.simplify` for expressions that go back into the IR."""
    return fix_dtypes(simplify(e))


class Ranges(dict):
    """Loop variable -> inclusive `(lo, hi)`; `extents` keeps each loop's own extent expression."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.extents: dict[Var, PrimExpr] = {}


@dataclass(frozen=True)
class Access:
    """One load or store of `buffer`; `indices` are in terms of loops (None: the whole buffer)."""

    kind: str  # "r" or "w" (an atomic add is both)
    buffer: object
    indices: tuple[PrimExpr, ...] | None
    block: Block | None  # the innermost block around the access, inside the walked subtree


@dataclass(frozen=True)
class Dim:
    """An inclusive range `[lo, hi]` of one dimension; `whole` when it is the buffer's extent."""

    lo: PrimExpr
    hi: PrimExpr
    whole: bool = False
    size: PrimExpr | None = None  # the extent as the IR spells it (a loop's extent), when known

    @property
    def extent(self) -> PrimExpr:
        computed = simplify_ir(mk.add(mk.sub(self.hi, self.lo), IntImm(1, self.hi.dtype)))
        if isinstance(computed, IntImm) or self.size is None:
            return computed
        return self.size


class _Collector:
    def __init__(self, subst: dict[Var, PrimExpr] | None):
        self.subst: dict[Var, PrimExpr] = dict(subst or {})
        self.ranges = Ranges()
        self.accesses: list[Access] = []

    def sub(self, e: PrimExpr) -> PrimExpr:
        return substitute(e, self.subst)

    def expr(self, e: PrimExpr | None, block: Block | None) -> None:
        if e is None:
            return
        for n in walk(e):
            if isinstance(n, BufferLoad):
                self.accesses.append(Access("r", n.buffer, tuple(self.sub(i) for i in n.indices), block))
            elif isinstance(n, Call):
                for a in n.args:
                    if isinstance(a, SparseBuffer | FlatBuffer):
                        self.accesses.append(Access("r", a, None, block))

    def stmt(self, s: Stmt, block: Block | None) -> None:
        if isinstance(s, For):
            self.expr(s.min, block)
            self.expr(s.extent, block)
            lo, extent = self.sub(s.min), self.sub(s.extent)
            self.ranges[s.loop_var] = (lo, mk.sub(mk.add(lo, extent), IntImm(1, lo.dtype)))
            self.ranges.extents[s.loop_var] = extent
            self.stmt(s.body, block)
            return
        if isinstance(s, Block):
            for iv in s.iter_vars:
                self.expr(iv.extent, block)
                self.expr(iv.value, block)
                self.subst[iv.var] = self.sub(iv.value)
            self.expr(s.predicate, block)
            for c in child_stmts(s):
                self.stmt(c, s)
            return
        if isinstance(s, BufferStore | AtomicAdd):
            for i in s.indices:
                self.expr(i, block)
            self.expr(s.value, block)
            indices = tuple(self.sub(i) for i in s.indices)
            if isinstance(s, AtomicAdd):
                self.accesses.append(Access("r", s.buffer, indices, block))
            self.accesses.append(Access("w", s.buffer, indices, block))
            return
        if isinstance(s, LetStmt):
            self.subst[s.var] = self.sub(s.value)
        for _, value in s.fields():
            if isinstance(value, PrimExpr) and not isinstance(value, Var):
                self.expr(value, block)
        for c in child_stmts(s):
            self.stmt(c, block)


def collect(stmt: Stmt, subst: dict[Var, PrimExpr] | None = None) -> tuple[list[Access], Ranges]:
    """Every access under `stmt` (block iterators replaced by their bindings) and the ranges of
    the loops under `stmt`. `subst` gives bindings of block iterators bound above `stmt`."""
    c = _Collector(subst)
    c.stmt(stmt, None)
    return c.accesses, c.ranges


def whole(buf, k: int) -> Dim:
    extent = buf.shape[k] if isinstance(buf, FlatBuffer) else buf.axes[k].length
    return Dim(IntImm(0, extent.dtype), mk.sub(extent, IntImm(1, extent.dtype)), whole=True, size=extent)


def _vars(e: PrimExpr) -> set[Var]:
    return {n for n in walk(e) if isinstance(n, Var)}


def relax_index(idx: PrimExpr, ranges: Ranges) -> tuple[PrimExpr, PrimExpr] | None:
    """Inclusive bounds of `idx` over the loops of `ranges`; None when they cannot be written."""
    if isinstance(idx, Var) and idx in ranges:
        return ranges[idx]
    inner = {v: ranges[v] for v in _vars(idx) if v in ranges}
    if not inner:
        return idx, idx
    bounds = symbolic_range(idx, inner)
    return None if bounds is None else (fix_dtypes(bounds[0]), fix_dtypes(bounds[1]))


def gap(idx: PrimExpr, ranges: Ranges, env: Ranges) -> str | None:
    """Why the values of `idx` over the loops of `ranges` may leave holes in `[lo, hi]` (None when
    every integer between its bounds is taken, for every value of the variables bound outside).

    The region of an access is the box around its values: exact for `k_outer * 4 + k_inner` over
    both loops, but over `k_outer` alone (`k_inner` bound outside) it takes every 4th value of the
    box. A reader of the region needs no more than is there; a consumer that copies the whole box
    (`reverse_compute_at`'s write-back) would copy what nobody wrote. Affine in the loops, with
    coefficients sorted by size, the set is gap-free when each coefficient is at most one more than
    the span the smaller terms cover (TVM's region-cover check, for the affine case).
    """
    inner = [v for v in _vars(idx) if v in ranges]
    if not inner:
        return None
    expr, atoms = to_affine(idx)
    terms: list[tuple[int, Var]] = []
    for atom, coeff in expr.terms:
        node = atoms[atom.index] if isinstance(atom, DimId) else None
        if node is None or not isinstance(node, Var):
            if any(v in ranges for v in _atom_vars(atom, atoms)):
                return f"`{show_expr(idx)}` is not affine in the loops inside (its values may skip positions)"
            continue
        if node in ranges:
            terms.append((abs(coeff), node))
    span: PrimExpr = IntImm(0, idx.dtype)  # the values covered so far are [0, span]
    for coeff, v in sorted(terms, key=lambda t: t[0]):
        lo, hi = ranges[v]
        steps = simplify(mk.sub(hi, lo))
        if isinstance(steps, IntImm) and steps.value == 0:
            continue
        if coeff > 1 and not prove_le(IntImm(coeff - 1, idx.dtype), span, env):
            return f"`{show_expr(idx)}` steps by {coeff} over loop `{v.name}`"
        span = simplify(mk.add(span, mk.mul(IntImm(coeff, idx.dtype), steps)))
    return None


def _atom_vars(atom, atoms) -> set[Var]:
    """The IR variables an atom of `to_affine` stands for (through `floordiv` and `mod`)."""
    if isinstance(atom, DimId):
        return _vars(atoms[atom.index])
    if isinstance(atom, FloorDiv | Mod):
        return set().union(set(), *(_atom_vars(a, atoms) for a, _ in atom.lhs.terms))
    return set()


def prove_le(a: PrimExpr, b: PrimExpr, env: Ranges) -> bool:
    """True when `a <= b` for every value of the variables in their (possibly symbolic) ranges.

    Plain interval analysis first; then the variables of `a - b` are replaced by their symbolic
    bounds (`vi - (m - 1)` with `vi in [0, m - 1]` is at most `0`), a few times over. A load of a
    buffer with a `value_range` hint counts as a variable in that range (`J_indices[vi, j] + ax0`
    with `ax0 in [0, 0]` is at most `n - 1`).
    """
    diff = simplify(mk.sub(a, b))
    if _nonpositive(diff, env):
        return True
    env = dict(env)
    loads: dict[PrimExpr, Var] = {}
    for n in walk(diff):
        bounds = _value_range(n)
        if bounds is not None and n not in loads:
            loads[n] = Var(f"value{len(loads)}", n.dtype)
            env[loads[n]] = bounds
    if not loads:
        return False
    return _nonpositive(post_order_rewrite(diff, lambda n: loads.get(n, n) if isinstance(n, BufferLoad) else n), env)


def _nonpositive(diff: PrimExpr, env: Ranges) -> bool:
    for _ in range(4):
        if prove(mk.cmp("<=", diff, IntImm(0, diff.dtype)), env):
            return True
        # Only variables that are terms of the affine form: one inside a load stays a parameter.
        inner = {v: env[v] for v in to_affine(diff)[1] if isinstance(v, Var) and v in env}
        bounds = symbolic_range(diff, inner) if inner else None
        if bounds is None or bounds[1] == diff:
            return False
        diff = simplify(bounds[1])
    return False


def _value_range(e) -> tuple[PrimExpr, PrimExpr] | None:
    """The `value_range` hint of a buffer load, in the load's dtype (else None)."""
    if not isinstance(e, BufferLoad) or getattr(e.buffer, "value_range", None) is None:
        return None
    return tuple(mk.cast(e.dtype, x) for x in e.buffer.value_range)


def _row_limit(buf, k: int, dims: list[Dim], func) -> PrimExpr | None:
    """The last stored position of dimension `k` of a sparse buffer, when the analysis can write
    it: a fixed sparse axis, or a variable axis under a dense root whose row is one point."""
    axis = buf.axes[k]
    if axis.kind == DENSE_FIXED:
        return whole(buf, k).hi
    if axis.nnz_cols is not None and axis.indptr is None:
        return mk.sub(axis.nnz_cols, IntImm(1, axis.nnz_cols.dtype))
    parent = buf.axes[k - 1] if k > 0 else None
    if func is None or parent is not axis.parent or parent.kind != DENSE_FIXED or parent.parent is not None:
        return None
    row = dims[k - 1]
    if row.whole or row.lo != row.hi:
        return None
    indptr = next((b for b in func.buffers if isinstance(b, FlatBuffer) and b.data is axis.indptr), None)
    if indptr is None:
        return None
    p = row.lo
    start = BufferLoad(indptr, (p,))
    end = BufferLoad(indptr, (mk.add(p, IntImm(1, p.dtype)),))
    return mk.sub(mk.sub(end, start), IntImm(1, indptr.dtype))


def relax(acc: Access, ranges: Ranges, facts: Ranges | None = None, func=None, clamp: bool = True) -> list[Dim]:
    """The region of one access, each dimension proved inside the buffer (else whole).

    `facts` are ranges of variables bound outside (used only in the proofs); `func` lets a sparse
    buffer's variable axis be bounded by its row (`J_indptr[vi + 1] - J_indptr[vi]`). Without
    `clamp`, a bounded dimension stays as bounded even when it may leave the buffer (the caller
    guards the iterations, as compute_at does).
    """
    buf = acc.buffer
    ndim = buf.ndim
    if acc.indices is None:
        return [whole(buf, k) for k in range(ndim)]
    env = {**(facts or {}), **ranges}
    out: list[Dim] = []
    for k, idx in enumerate(acc.indices):
        bounds = relax_index(idx, ranges)
        full = whole(buf, k)
        limit = _row_limit(buf, k, out, func) if isinstance(buf, SparseBuffer) else full.hi
        if bounds is None or (limit is None and clamp):
            out.append(full)
            continue
        lo, hi = bounds
        inside = not clamp or (prove_le(IntImm(0, lo.dtype), lo, env) and prove_le(hi, limit, env))
        size = ranges.extents.get(idx) if isinstance(idx, Var) and isinstance(ranges, Ranges) else None
        out.append(Dim(lo, hi, size=size) if inside else full)
    return out


def _le(a: PrimExpr, b: PrimExpr, facts: Ranges | None) -> bool:
    return a == b or prove_le(a, b, facts or {})


def join(a: list[Dim], b: list[Dim], buf, facts: Ranges | None = None) -> list[Dim]:
    """The smallest box around two regions that the analysis can write (else whole dimensions)."""
    out = []
    for k, (x, y) in enumerate(zip(a, b)):
        if x.whole or y.whole:
            out.append(whole(buf, k))
            continue
        if x == y:
            out.append(x)
            continue
        lo = x.lo if _le(x.lo, y.lo, facts) else y.lo if _le(y.lo, x.lo, facts) else None
        hi = y.hi if _le(x.hi, y.hi, facts) else x.hi if _le(y.hi, x.hi, facts) else None
        out.append(whole(buf, k) if lo is None or hi is None else Dim(lo, hi))
    return out


def region(
    accesses: list[Access], buf, ranges: Ranges, facts: Ranges | None = None, func=None, clamp: bool = True
) -> list[Dim] | None:
    """The box covering every access of `buf` in `accesses` (None when there is none)."""
    out: list[Dim] | None = None
    for acc in accesses:
        if acc.buffer is not buf:
            continue
        dims = relax(acc, ranges, facts, func, clamp)
        out = dims if out is None else join(out, dims, buf, facts)
    return out


def sparse_whole_dims(buf, dims: list[Dim]) -> list[int]:
    """Dimensions of a sparse buffer over a sparse/variable axis that only the whole axis covers:
    its positions there are per row, so the axis length bounds nothing that is stored."""
    if not isinstance(buf, SparseBuffer):
        return []
    return [k for k, d in enumerate(dims) if d.whole and buf.axes[k].kind != DENSE_FIXED]


def offset(idx: PrimExpr, lo: PrimExpr) -> PrimExpr:
    """`idx - lo`, simplified (an index into a buffer that holds a region starting at `lo`)."""
    if isinstance(lo, IntImm) and lo.value == 0:
        return idx
    return simplify_ir(mk.sub(idx, lo))


def shift(lo: PrimExpr, v: PrimExpr) -> PrimExpr:
    """`lo + v`, simplified."""
    if isinstance(lo, IntImm) and lo.value == 0:
        return v if v.dtype == lo.dtype else mk.cast(lo.dtype, v)
    return simplify_ir(mk.add(lo, v))


def less_than(e: PrimExpr, bound: PrimExpr) -> PrimExpr:
    return BinOp("<", *mk.unify(e, bound))
