"""Expressions: constants, variables, arithmetic, comparisons, selects, casts, calls, buffer loads.

Every expression has a `dtype`. Constants and composite expressions compare by value; a `Var`
compares by identity (two variables named `i` are different variables), as in TVM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import dtype as dt
from .node import Node

if TYPE_CHECKING:
    from .buffer import Buffer

ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max")
CMP_OPS = ("==", "!=", "<", "<=", ">", ">=")
LOGIC_OPS = ("and", "or")
BIN_OPS = (*ARITH_OPS, *CMP_OPS, *LOGIC_OPS)
UNARY_OPS = ("-", "not")


@dataclass(frozen=True, slots=True)
class PrimExpr(Node):
    """Base of all expressions."""

    @property
    def dtype(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    # Arithmetic sugar for passes that build IR; comparisons stay structural (`==` is equality).
    def __add__(self, other: Any) -> PrimExpr:
        return BinOp("+", self, as_expr(other, self.dtype))

    def __radd__(self, other: Any) -> PrimExpr:
        return BinOp("+", as_expr(other, self.dtype), self)

    def __sub__(self, other: Any) -> PrimExpr:
        return BinOp("-", self, as_expr(other, self.dtype))

    def __rsub__(self, other: Any) -> PrimExpr:
        return BinOp("-", as_expr(other, self.dtype), self)

    def __mul__(self, other: Any) -> PrimExpr:
        return BinOp("*", self, as_expr(other, self.dtype))

    def __rmul__(self, other: Any) -> PrimExpr:
        return BinOp("*", as_expr(other, self.dtype), self)

    def __floordiv__(self, other: Any) -> PrimExpr:
        return BinOp("//", self, as_expr(other, self.dtype))

    def __mod__(self, other: Any) -> PrimExpr:
        return BinOp("%", self, as_expr(other, self.dtype))

    def __neg__(self) -> PrimExpr:
        return UnaryOp("-", self)


@dataclass(frozen=True, slots=True)
class IntImm(PrimExpr):
    """An integer or boolean constant (`dtype="bool"` holds 0 or 1)."""

    value: int
    dtype_: str = "int32"

    @property
    def dtype(self) -> str:
        return self.dtype_


@dataclass(frozen=True, slots=True)
class FloatImm(PrimExpr):
    value: float
    dtype_: str = "float32"

    @property
    def dtype(self) -> str:
        return self.dtype_


@dataclass(frozen=True, slots=True, eq=False)
class Var(PrimExpr):
    """A variable: a scalar parameter, a handle, a loop variable, an iterator or a block iter var."""

    # Identity, not value: two declarations with equal fields are different objects.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    name: str
    dtype_: str = "int32"

    @property
    def dtype(self) -> str:
        return self.dtype_

    def __repr__(self) -> str:
        return f"Var({self.name!r}, {self.dtype_!r})"


@dataclass(frozen=True, slots=True)
class BinOp(PrimExpr):
    """`a op b`. `//` and `%` are floor division and floor modulo (Python semantics)."""

    op: str
    a: PrimExpr
    b: PrimExpr

    @property
    def dtype(self) -> str:
        if self.op in CMP_OPS or self.op in LOGIC_OPS:
            return "bool"
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class UnaryOp(PrimExpr):
    op: str
    a: PrimExpr

    @property
    def dtype(self) -> str:
        return "bool" if self.op == "not" else self.a.dtype


@dataclass(frozen=True, slots=True)
class Select(PrimExpr):
    """`true_value if cond else false_value`; only the chosen branch is evaluated (if_then_else)."""

    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True)
class Cast(PrimExpr):
    dtype_: str
    value: PrimExpr

    @property
    def dtype(self) -> str:
        return self.dtype_


@dataclass(frozen=True, slots=True)
class Call(PrimExpr):
    """A call of an intrinsic from `sparsetir_py.ir.op.INTRINSICS` (exp, sqrt, syncthreads, ...)."""

    op: str
    args: tuple[PrimExpr, ...]
    dtype_: str

    @property
    def dtype(self) -> str:
        return self.dtype_


@dataclass(frozen=True, slots=True)
class BufferLoad(PrimExpr):
    """`buffer[indices]`: coordinates in Stage I, positions in Stage II, flat offsets in Stage III."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


def const(value: int | float | bool, dtype: str | None = None) -> PrimExpr:
    """A constant of `dtype` (int32, float32 or bool by default from the Python type)."""
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
    if dt.is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


def as_expr(value: Any, dtype: str = "int32") -> PrimExpr:
    """`value` as an expression; Python numbers become constants of `dtype`'s kind."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int):
        return const(value, dtype if dt.is_int(dtype) or dt.is_float(dtype) else "int32")
    if isinstance(value, float):
        return const(value, dtype if dt.is_float(dtype) else "float32")
    raise TypeError(f"cannot use {value!r} as an expression")


def is_const(e: PrimExpr, value: int | float | None = None) -> bool:
    if not isinstance(e, IntImm | FloatImm):
        return False
    return value is None or e.value == value
