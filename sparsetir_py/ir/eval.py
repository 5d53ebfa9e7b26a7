"""Evaluating integer size expressions over the scalar parameters of one call."""

from __future__ import annotations

from ..errors import InputError
from .expr import BinOp, Cast, IntImm, PrimExpr, UnaryOp, Var


def eval_int(expr: PrimExpr, scalars: dict[Var, int | float], what: str) -> int:
    """Evaluate a size expression over scalar parameters."""
    if isinstance(expr, IntImm):
        return int(expr.value)
    if isinstance(expr, Var):
        if expr not in scalars:
            raise InputError(f"{what} uses `{expr.name}`, which is not a scalar parameter")
        return int(scalars[expr])
    if isinstance(expr, Cast):
        return eval_int(expr.value, scalars, what)
    if isinstance(expr, UnaryOp) and expr.op == "-":
        return -eval_int(expr.a, scalars, what)
    if isinstance(expr, BinOp):
        a, b = eval_int(expr.a, scalars, what), eval_int(expr.b, scalars, what)
        ops = {
            "+": lambda: a + b,
            "-": lambda: a - b,
            "*": lambda: a * b,
            "//": lambda: a // b,
            "%": lambda: a % b,
            "min": lambda: min(a, b),
            "max": lambda: max(a, b),
        }
        if expr.op in ("//", "%") and b == 0:
            raise InputError(f"{what}: division by zero")
        if expr.op in ops:
            return ops[expr.op]()
    raise InputError(f"{what}: cannot evaluate the size expression {expr!r}")
