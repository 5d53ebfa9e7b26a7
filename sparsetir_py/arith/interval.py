"""Interval analysis of IR expressions, on top of the indexing-map simplifier.

Given the ranges of some variables, `int_range` bounds an integer expression of the IR
(`sparsetir_py.ir.expr`): loop extents, split predicates, the indices of read/write regions.
The affine part of the expression (`+`, `-`, `*` by a constant, `//` and `%` by a constant) is
converted to an `AffineExpr` and simplified with the variables' intervals first, so correlated
terms cancel (`(i * 8 + j) // 8 - i` is in `[0, 0]` for `j < 8`, which plain interval arithmetic
cannot see). Everything else (buffer loads, products of variables, `min`/`max`, selects, calls)
becomes an opaque atom whose interval comes from the rules in `_OPAQUE_RULES`: a buffer's
`value_range` hint, the hints passed in, or nothing (unbounded).

Variables and hints take inclusive bounds `(lo, hi)`, either end an int, an IR expression (its
lower or upper bound is used) or None (unbounded). Results use None for an unbounded end.

>>> from sparsetir_py.ir import BinOp, IntImm, Var
>>> i, j = Var("i"), Var("j")
>>> int_range((i * 8 + j) // 8 - i, {i: (0, 99), j: (0, 7)})
(0, 0)
>>> prove(BinOp("<", i * 8 + j, IntImm(64)), {i: (0, 7), j: (0, 7)})
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..ir import dtype as dt
from ..ir.expr import BinOp, BufferLoad, Call, Cast, FloatImm, IntImm, PrimExpr, Select, UnaryOp, Var
from .affine import AffineExpr, DimId, FloorDiv, Interval, Mod, SymbolId, const, dim
from .simplify import RangeEnv, simplify_expr

__all__ = ["from_affine", "int_range", "prove", "simplify", "symbolic_range", "to_affine"]

Bound = int | PrimExpr | None
VarRanges = Mapping[Any, Interval | tuple[Bound, Bound]]

_CMP = {"==", "!=", "<", "<=", ">", ">="}


# ---------------------------------------------------------------------------------------------
# IR -> affine


class _Atoms:
    """Numbers the variables and opaque subexpressions of IR expressions as dimensions."""

    def __init__(self) -> None:
        self.nodes: list[PrimExpr] = []
        self.index: dict[Any, int] = {}

    def atom(self, node: PrimExpr) -> AffineExpr:
        key = _key(node)
        if key not in self.index:
            self.index[key] = len(self.nodes)
            self.nodes.append(node)
        return dim(self.index[key])


def _key(node: PrimExpr) -> Any:
    # Vars compare by identity, every other node by value (frozen dataclasses).
    return ("var", id(node)) if isinstance(node, Var) else ("node", node)


def _to_affine(node: PrimExpr, atoms: _Atoms) -> AffineExpr:
    if isinstance(node, IntImm):
        return const(int(node.value))
    if isinstance(node, Var):
        return atoms.atom(node)
    if isinstance(node, UnaryOp) and node.op == "-" and _is_int_expr(node.a):
        return -_to_affine(node.a, atoms)
    if isinstance(node, Cast) and dt.is_int(node.dtype) and _is_int_expr(node.value):
        return _to_affine(node.value, atoms)  # assumes no overflow, like the rest of the compiler
    if isinstance(node, BinOp) and node.op in ("+", "-", "*", "//", "%") and _is_int_expr(node):
        a, b = node.a, node.b
        if node.op == "+":
            return _to_affine(a, atoms) + _to_affine(b, atoms)
        if node.op == "-":
            return _to_affine(a, atoms) - _to_affine(b, atoms)
        if node.op == "*":
            lhs, rhs = _to_affine(a, atoms), _to_affine(b, atoms)
            if lhs.is_constant or rhs.is_constant:
                return lhs * rhs
        else:
            rhs = _to_affine(b, atoms)
            if rhs.is_constant and rhs.constant != 0:
                lhs = _to_affine(a, atoms)
                return lhs.floordiv(rhs.constant) if node.op == "//" else lhs.mod(rhs.constant)
    return atoms.atom(node)


def _is_int_expr(node: PrimExpr) -> bool:
    return dt.is_int(node.dtype) or dt.is_bool(node.dtype)


def to_affine(expr: PrimExpr) -> tuple[AffineExpr, tuple[PrimExpr, ...]]:
    """`expr` as an affine expression over `d_i := atoms[i]`.

    The atoms are the variables of `expr` and its non-affine subexpressions (buffer loads,
    products of two variables, ...), in order of first appearance.

    >>> from sparsetir_py.ir import Var
    >>> i = Var("i")
    >>> j = Var("j")
    >>> e, atoms = to_affine((i * 16 + j) // 8)
    >>> str(e), atoms == (i, j)
    ('d0 * 2 + d1 floordiv 8', True)
    """
    atoms = _Atoms()
    e = _to_affine(expr, atoms)
    return e, tuple(atoms.nodes)


def from_affine(
    expr: AffineExpr, dims: Sequence[PrimExpr], symbols: Sequence[PrimExpr] = (), dtype: str = "int32"
) -> PrimExpr:
    """The IR expression computing `expr` with `d_i := dims[i]` and `s_j := symbols[j]`.

    `floordiv`/`mod` become `//`/`%` (floor semantics). Constants get `dtype`.
    """

    def atom(a: DimId | SymbolId | FloorDiv | Mod) -> PrimExpr:
        if isinstance(a, DimId):
            return dims[a.index]
        if isinstance(a, SymbolId):
            return symbols[a.index]
        op = "//" if isinstance(a, FloorDiv) else "%"
        return BinOp(op, build(a.lhs), IntImm(a.divisor, dtype))

    def build(e: AffineExpr) -> PrimExpr:
        result: PrimExpr | None = None
        for a, k in e.terms:
            value = atom(a)
            if result is None:
                result = value if k == 1 else BinOp("*", value, IntImm(k, dtype))
            elif k == 1:
                result = BinOp("+", result, value)
            elif k == -1:
                result = BinOp("-", result, value)
            elif k < 0:
                result = BinOp("-", result, BinOp("*", value, IntImm(-k, dtype)))
            else:
                result = BinOp("+", result, BinOp("*", value, IntImm(k, dtype)))
        if result is None:
            return IntImm(e.constant, dtype)
        if e.constant > 0:
            return BinOp("+", result, IntImm(e.constant, dtype))
        if e.constant < 0:
            return BinOp("-", result, IntImm(-e.constant, dtype))
        return result

    return build(expr)


# ---------------------------------------------------------------------------------------------
# Ranges


class _Analyzer:
    def __init__(self, var_ranges: VarRanges, hints: Mapping[Any, tuple[Bound, Bound]] | None):
        self.var_ranges = {_key(v): r for v, r in var_ranges.items()}
        self.hints = {_key(k) if isinstance(k, PrimExpr) else ("buffer", id(k)): r for k, r in (hints or {}).items()}
        self.memo: dict[Any, Interval] = {}
        self.active: set[Any] = set()

    def bound(self, value: Bound, upper: bool) -> int | None:
        if value is None or isinstance(value, int):
            return value
        r = self.range(value)
        return r.hi if upper else r.lo

    def interval(self, pair: Interval | tuple[Bound, Bound]) -> Interval:
        if isinstance(pair, Interval):
            return pair
        lo, hi = pair
        return Interval(self.bound(lo, upper=False), self.bound(hi, upper=True))

    def range(self, node: PrimExpr) -> Interval:
        key = _key(node)
        if key in self.memo:
            return self.memo[key]
        if key in self.active:  # a bound that refers to itself: give up on it
            return Interval.unbounded()
        self.active.add(key)
        try:
            result = self._range(node)
        finally:
            self.active.discard(key)
        self.memo[key] = result
        return result

    def _range(self, node: PrimExpr) -> Interval:
        if isinstance(node, IntImm):
            return Interval.point(int(node.value))
        if isinstance(node, FloatImm):
            return Interval.unbounded()
        atoms = _Atoms()
        e = _to_affine(node, atoms)
        if len(atoms.nodes) == 1 and atoms.nodes[0] is node:
            return self.atom_range(node)
        env = RangeEnv([self.atom_range(a) for a in atoms.nodes])
        simplified = simplify_expr(e, env)
        return env.range(simplified).intersect(env.range(e))

    def atom_range(self, node: PrimExpr) -> Interval:
        """The interval of a variable or an opaque subexpression."""
        key = _key(node)
        hint = self.hints.get(key)
        result = _dtype_range(node.dtype)
        if isinstance(node, Var) and key in self.var_ranges:
            result = result.intersect(self.interval(self.var_ranges[key]))
        rule = _OPAQUE_RULES.get(type(node))
        if rule is not None:
            result = result.intersect(rule(self, node))
        if hint is not None:
            result = result.intersect(self.interval(hint))
        return result


def _dtype_range(dtype: str) -> Interval:
    if dt.is_bool(dtype):
        return Interval(0, 1)
    if dtype.startswith("uint"):
        return Interval(0, None)
    return Interval.unbounded()


def _binop_range(an: _Analyzer, node: BinOp) -> Interval:
    if node.op in _CMP or node.op in ("and", "or"):
        decided = _prove(an, node)
        return Interval(0, 1) if decided is None else Interval.point(int(decided))
    if not _is_int_expr(node):
        return Interval.unbounded()
    a, b = an.range(node.a), an.range(node.b)
    if a.is_empty or b.is_empty:
        return Interval.unbounded()
    if node.op == "min":  # None is -inf for a lower end, +inf for an upper end
        lo = None if a.lo is None or b.lo is None else min(a.lo, b.lo)
        hi = b.hi if a.hi is None else a.hi if b.hi is None else min(a.hi, b.hi)
        return Interval(lo, hi)
    if node.op == "max":
        lo = b.lo if a.lo is None else a.lo if b.lo is None else max(a.lo, b.lo)
        hi = None if a.hi is None or b.hi is None else max(a.hi, b.hi)
        return Interval(lo, hi)
    if node.op == "*":
        return a.mul(b)
    if node.op == "//" and b.is_bounded and b.lo > 0:
        if not a.is_bounded:
            return Interval(None if a.lo is None or a.lo < 0 else 0, None if a.hi is None else max(a.hi // b.lo, 0))
        ends = [x // y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return Interval(min(ends), max(ends))
    if node.op == "%" and b.lo is not None and b.lo > 0:
        hi = None if b.hi is None else b.hi - 1
        if a.lo is not None and a.lo >= 0 and a.hi is not None:
            hi = a.hi if hi is None else min(hi, a.hi)
        return Interval(0, hi)
    return Interval.unbounded()


def _unary_range(an: _Analyzer, node: UnaryOp) -> Interval:
    if node.op == "not":
        decided = _prove(an, node)
        return Interval(0, 1) if decided is None else Interval.point(int(decided))
    return -an.range(node.a) if _is_int_expr(node) else Interval.unbounded()


def _select_range(an: _Analyzer, node: Select) -> Interval:
    decided = _prove(an, node.cond)
    if decided is True:
        return an.range(node.true_value)
    if decided is False:
        return an.range(node.false_value)
    return an.range(node.true_value).hull(an.range(node.false_value))


def _cast_range(an: _Analyzer, node: Cast) -> Interval:
    if dt.is_int(node.dtype) and _is_int_expr(node.value):
        return an.range(node.value)
    if dt.is_bool(node.dtype):
        return Interval(0, 1)
    return Interval.unbounded()


def _call_range(an: _Analyzer, node: Call) -> Interval:
    if node.op in ("lower_bound", "linear_find"):  # a position in [lo, hi]
        lo, hi = an.range(node.args[1]), an.range(node.args[2])
        return Interval(lo.lo, hi.hi)
    if node.op == "abs" and _is_int_expr(node):
        r = an.range(node.args[0])
        if r.lo is not None and r.lo >= 0:
            return r
        if r.hi is not None and r.hi <= 0:
            return -r
        return Interval(0, None if r.lo is None or r.hi is None else max(-r.lo, r.hi))
    return Interval.unbounded()


def _load_range(an: _Analyzer, node: BufferLoad) -> Interval:
    hint = an.hints.get(("buffer", id(node.buffer)))
    if hint is not None:
        return an.interval(hint)
    value_range = getattr(node.buffer, "value_range", None)
    if value_range is not None:
        return an.interval(value_range)
    return Interval.unbounded()


def _var_range(an: _Analyzer, node: Var) -> Interval:
    return Interval.unbounded()


# How each kind of opaque node is bounded (the affine operations are handled by the simplifier).
_OPAQUE_RULES: dict[type, Callable[[_Analyzer, Any], Interval]] = {
    BinOp: _binop_range,
    UnaryOp: _unary_range,
    Select: _select_range,
    Cast: _cast_range,
    Call: _call_range,
    BufferLoad: _load_range,
    Var: _var_range,
}


def _prove(an: _Analyzer, cond: PrimExpr) -> bool | None:
    if isinstance(cond, IntImm):
        return bool(cond.value)
    if isinstance(cond, UnaryOp) and cond.op == "not":
        inner = _prove(an, cond.a)
        return None if inner is None else not inner
    if not isinstance(cond, BinOp):
        r = an.range(cond)
        return bool(r.lo) if r.is_point else (True if r.lo is not None and r.lo > 0 else None)
    if cond.op in ("and", "or"):
        a, b = _prove(an, cond.a), _prove(an, cond.b)
        if cond.op == "and":
            return False if False in (a, b) else True if a is True and b is True else None
        return True if True in (a, b) else False if a is False and b is False else None
    if cond.op not in _CMP or not (_is_int_expr(cond.a) and _is_int_expr(cond.b)):
        return None
    diff = an.range(BinOp("-", cond.a, cond.b))  # one affine expression: common terms cancel
    lo, hi = diff.lo, diff.hi
    if diff.is_empty:
        return None
    if cond.op == "<":
        return True if hi is not None and hi < 0 else False if lo is not None and lo >= 0 else None
    if cond.op == "<=":
        return True if hi is not None and hi <= 0 else False if lo is not None and lo > 0 else None
    if cond.op == ">":
        return True if lo is not None and lo > 0 else False if hi is not None and hi <= 0 else None
    if cond.op == ">=":
        return True if lo is not None and lo >= 0 else False if hi is not None and hi < 0 else None
    if cond.op == "==":
        return True if diff.is_point and lo == 0 else False if not diff.contains(0) else None
    return False if diff.is_point and lo == 0 else True if not diff.contains(0) else None


def int_range(
    expr: PrimExpr, var_ranges: VarRanges | None = None, *, hints: Mapping[Any, tuple[Bound, Bound]] | None = None
) -> tuple[int | None, int | None]:
    """Inclusive bounds `(lo, hi)` of an integer IR expression; None for an unbounded end.

    `var_ranges` maps variables to their bounds; `hints` maps subexpressions (e.g. a
    `BufferLoad`) or buffers to the bounds of their values, on top of buffers' `value_range`.
    Variables without a range are unbounded (booleans are in `[0, 1]`, unsigned ints `>= 0`).
    """
    r = _Analyzer(var_ranges or {}, hints).range(expr)
    return (r.lo, r.hi)


def prove(
    cond: PrimExpr, var_ranges: VarRanges | None = None, *, hints: Mapping[Any, tuple[Bound, Bound]] | None = None
) -> bool | None:
    """True if `cond` holds for every value of the variables in their ranges, False if it never
    holds, None if the analysis cannot tell. Comparisons are decided on the range of `a - b`,
    simplified as one expression."""
    return _prove(_Analyzer(var_ranges or {}, hints), cond)


def simplify(expr: PrimExpr, var_ranges: VarRanges | None = None) -> PrimExpr:
    """`expr` with its affine part simplified using the variables' ranges (same value wherever
    the variables are in their ranges); the expression itself when that is not simpler.

    >>> from sparsetir_py.ir import Var
    >>> i, j = Var("i"), Var("j")
    >>> simplify((i * 8 + j) // 8 - i, {j: (0, 7)})
    IntImm(value=0, dtype_='int32')
    """
    if not _is_int_expr(expr):
        return expr
    an = _Analyzer(var_ranges or {}, None)
    atoms = _Atoms()
    e = _to_affine(expr, atoms)
    env = RangeEnv([an.atom_range(a) for a in atoms.nodes])
    simplified = simplify_expr(e, env)
    if simplified == e and not _has_constant_folding(expr):
        return expr
    return from_affine(simplified, atoms.nodes, dtype=expr.dtype if dt.is_int(expr.dtype) else "int32")


def _has_constant_folding(expr: PrimExpr) -> bool:
    """Whether the IR spells the expression differently from its canonical affine form."""
    e, atoms = to_affine(expr)
    return from_affine(e, atoms, dtype=expr.dtype if dt.is_int(expr.dtype) else "int32") != expr


# ---------------------------------------------------------------------------------------------
# Symbolic bounds


def _children(node: PrimExpr) -> list[PrimExpr]:
    out: list[PrimExpr] = []
    for _, value in node.fields():
        if isinstance(value, PrimExpr):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, PrimExpr))
    return out


def _mentions(node: PrimExpr, keys: set[Any]) -> bool:
    if _key(node) in keys:
        return True
    return any(_mentions(child, keys) for child in _children(node))


def symbolic_range(
    expr: PrimExpr,
    var_ranges: Mapping[Var, tuple[Bound, Bound]],
    *,
    param_ranges: VarRanges | None = None,
) -> tuple[PrimExpr, PrimExpr] | None:
    """Inclusive bounds `(lo, hi)` of `expr`, as IR expressions, when each variable of
    `var_ranges` takes every value between its bounds (ints or expressions of other variables).

    Variables not in `var_ranges`, and loads or calls that do not depend on those variables, are
    parameters and stay in the bounds: `i * 4 + j` with `i in [0, n - 1]` and `j in [0, 3]`
    gives `(0, n * 4 - 1)`. Read/write regions over loops with symbolic extents are built from
    this. `param_ranges` (integer bounds of parameters, as for `int_range`) helps simplify.
    None when an end cannot be written (a part that is not affine in the variables and depends
    on them, or an unbounded variable).
    """
    atoms = _Atoms()
    e = _to_affine(expr, atoms)
    bound = {_key(v) for v in var_ranges}
    ends: dict[int, tuple[AffineExpr, AffineExpr]] = {}
    for v, (lo, hi) in var_ranges.items():
        index = atoms.atom(v).terms[0][0].index
        if lo is not None and hi is not None:
            lo_e = const(lo) if isinstance(lo, int) else _to_affine(lo, atoms)
            hi_e = const(hi) if isinstance(hi, int) else _to_affine(hi, atoms)
            ends[index] = (lo_e, hi_e)
    used = set(e.dims_used())
    for lo_e, hi_e in ends.values():
        # A bound may not depend on a bound variable (triangular ranges are not supported).
        if any(_mentions(atoms.nodes[i], bound) for i in lo_e.dims_used() | hi_e.dims_used()):
            return None
    for i in used:
        node = atoms.nodes[i]
        if _key(node) not in bound and _mentions(node, bound):
            return None  # e.g. a load indexed by a bound variable
    analyzer = _Analyzer({**(param_ranges or {}), **var_ranges}, None)
    env = RangeEnv([analyzer.atom_range(a) for a in atoms.nodes])
    e = simplify_expr(e, env)
    bound_dims = {i for i, node in enumerate(atoms.nodes) if _key(node) in bound}
    result = _affine_bounds(e, bound_dims, ends, env)
    if result is None:
        return None
    dtype = expr.dtype if dt.is_int(expr.dtype) else "int32"
    lo_e, hi_e = (simplify_expr(x, env) for x in result)
    return from_affine(lo_e, atoms.nodes, dtype=dtype), from_affine(hi_e, atoms.nodes, dtype=dtype)


def _dims_of(e: AffineExpr) -> set[int]:
    return set(e.dims_used())


def _affine_bounds(
    e: AffineExpr, bound: set[int], ends: dict[int, tuple[AffineExpr, AffineExpr]], env: RangeEnv
) -> tuple[AffineExpr, AffineExpr] | None:
    lo = hi = const(e.constant)
    for atom, k in e.terms:
        pair = _atom_bounds(atom, bound, ends, env)
        if pair is None:
            return None
        a_lo, a_hi = pair
        if k > 0:
            lo, hi = lo + a_lo.scale(k), hi + a_hi.scale(k)
        else:
            lo, hi = lo + a_hi.scale(k), hi + a_lo.scale(k)
    return lo, hi


def _atom_bounds(
    atom: DimId | SymbolId | FloorDiv | Mod,
    bound: set[int],
    ends: dict[int, tuple[AffineExpr, AffineExpr]],
    env: RangeEnv,
) -> tuple[AffineExpr, AffineExpr] | None:
    itself = AffineExpr(((atom, 1),), 0)
    if isinstance(atom, DimId | SymbolId):
        if isinstance(atom, SymbolId) or atom.index not in bound:
            return itself, itself
        return ends.get(atom.index)
    if not (_dims_of(atom.lhs) & bound):
        return itself, itself
    inner = _affine_bounds(atom.lhs, bound, ends, env)
    if inner is None:
        return None
    x_lo, x_hi = inner
    c = atom.divisor
    if isinstance(atom, FloorDiv):  # monotone
        return x_lo.floordiv(c), x_hi.floordiv(c)
    r = env.range(atom.lhs)
    if r.is_bounded and not r.is_empty and r.lo // c == r.hi // c:
        shift = (r.lo // c) * c
        return x_lo - shift, x_hi - shift
    folded = r.mod(c)
    return const(folded.lo), const(folded.hi)
