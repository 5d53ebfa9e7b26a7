"""Building expressions in passes: dtype promotion (like the frontend) and light constant folding.

from sparsetir_py.ir import make as mk
mk.add(J_indptr_load, local)          # promotes int32 + int64 with a cast, folds 0 + x
"""

from __future__ import annotations

from . import dtype as dt
from .expr import BinOp, Cast, FloatImm, IntImm, PrimExpr, UnaryOp, as_expr


def cast(dtype: str, e: PrimExpr) -> PrimExpr:
    """`e` as `dtype`; constants are retyped rather than wrapped."""
    if e.dtype == dtype:
        return e
    if isinstance(e, IntImm) and dtype != "bool" and not dt.is_float(dtype):
        return IntImm(e.value, dtype)
    if isinstance(e, IntImm | FloatImm) and dt.is_float(dtype):
        return FloatImm(float(e.value), dtype)
    return Cast(dtype, e)


def unify(a: PrimExpr, b: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    if a.dtype == b.dtype:
        return a, b
    if isinstance(b, IntImm) and not dt.is_bool(a.dtype):
        return a, cast(a.dtype, b)
    if isinstance(a, IntImm) and not dt.is_bool(b.dtype):
        return cast(b.dtype, a), b
    target = dt.promote(a.dtype, b.dtype)
    return cast(target, a), cast(target, b)


def _const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) and e.dtype != "bool" else None


def binop(op: str, a, b) -> PrimExpr:
    a, b = as_expr(a), as_expr(b)
    a, b = unify(a, b)
    ca, cb = _const(a), _const(b)
    if ca is not None and cb is not None and op in ("+", "-", "*"):
        return IntImm({"+": ca + cb, "-": ca - cb, "*": ca * cb}[op], a.dtype)
    if op == "+" and ca == 0:
        return b
    if op in ("+", "-") and cb == 0:
        return a
    if op == "*" and (ca == 1 or cb == 1):
        return b if ca == 1 else a
    if op == "*" and (ca == 0 or cb == 0):
        return IntImm(0, a.dtype)
    if op == "//" and cb == 1:
        return a
    if op in ("+", "-") and dt.is_int(a.dtype):
        cancelled = _cancel(op, a, b)
        if cancelled is not None:
            return cancelled
    return BinOp(op, a, b)


def _cancel(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """`a + (x - a)`, `(x - a) + a`, `(a + x) - a`, `(x + a) - a` -> `x` (integers: exact).
    Fused iterators give such offsets (row start plus the position within the row)."""
    if op == "+":
        if isinstance(b, BinOp) and b.op == "-" and b.b == a and b.a.dtype == a.dtype:
            return b.a
        if isinstance(a, BinOp) and a.op == "-" and a.b == b and a.a.dtype == b.dtype:
            return a.a
    elif isinstance(a, BinOp) and a.op == "+" and a.dtype == b.dtype:
        if a.a == b:
            return a.b
        if a.b == b:
            return a.a
    return None


def add(a, b) -> PrimExpr:
    return binop("+", a, b)


def sub(a, b) -> PrimExpr:
    return binop("-", a, b)


def mul(a, b) -> PrimExpr:
    return binop("*", a, b)


def cmp(op: str, a, b) -> PrimExpr:
    a, b = unify(as_expr(a), as_expr(b))
    return BinOp(op, a, b)


def and_(a: PrimExpr | None, b: PrimExpr | None) -> PrimExpr | None:
    """Short-circuit conjunction; None stands for `True`."""
    if a is None:
        return b
    if b is None:
        return a
    return BinOp("and", a, b)


def conjuncts(e: PrimExpr | None) -> list[PrimExpr]:
    """The terms of a conjunction `a and b and ...`, left to right (`and_`'s inverse); None, which
    stands for `True`, has none."""
    if e is None:
        return []
    if isinstance(e, BinOp) and e.op == "and":
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


def conjunction(terms: list[PrimExpr]) -> PrimExpr | None:
    """`terms[0] and terms[1] and ...` (`conjuncts`' inverse); None for no terms."""
    out: PrimExpr | None = None
    for term in terms:
        out = and_(out, term)
    return out


def or_(a: PrimExpr | None, b: PrimExpr) -> PrimExpr:
    return b if a is None else BinOp("or", a, b)


def neg(a: PrimExpr) -> PrimExpr:
    return IntImm(-a.value, a.dtype) if _const(a) is not None else UnaryOp("-", a)
