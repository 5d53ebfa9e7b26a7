"""Buffers: sparse buffers over axes (Stages I and II) and flat buffers with layouts (Stage III)."""

from __future__ import annotations

from dataclasses import dataclass

from .axis import Axis
from .expr import PrimExpr, Var
from .layout import Layout
from .node import Node

SCOPES = ("global", "shared", "local")


@dataclass(frozen=True, slots=True, eq=False)
class SparseBuffer(Node):
    """Values over `axes`, stored in the order the axes define. Compared by identity.

    `data` is the handle parameter (`T.match_sparse_buffer`) or None for `T.alloc_sparse_buffer`.
    Reading a coordinate the structure does not store gives `default_value`. `extra_storage`
    (SparseTIR's field) is a number of elements stored after the axes' own, for a buffer whose
    storage is one-dimensional: Stage II reaches them by flat position (`J_indptr` over `[I]`
    with `extra_storage=1` holds `m + 1` values and is read at `vi + 1`).
    """

    # Identity, not value: two declarations with equal fields are different objects.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    name: str
    axes: tuple[Axis, ...]
    dtype: str
    data: Var | None = None
    default_value: int | float = 0
    scope: str = "global"
    value_range: tuple[PrimExpr, PrimExpr] | None = None  # a hint: every stored value lies in [lo, hi]
    extra_storage: PrimExpr | None = None

    @property
    def ndim(self) -> int:
        return len(self.axes)

    def __repr__(self) -> str:
        return f"SparseBuffer({self.name!r})"


@dataclass(frozen=True, slots=True, eq=False)
class FlatBuffer(Node):
    """A dense buffer of `shape` laid out by `layout` (row-major unless told otherwise)."""

    # Identity, not value: two declarations with equal fields are different objects.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str
    data: Var | None = None
    layout: Layout | None = None
    scope: str = "global"
    value_range: tuple[PrimExpr, PrimExpr] | None = None  # a hint: every stored value lies in [lo, hi]

    def __post_init__(self):
        if self.layout is None:
            object.__setattr__(self, "layout", Layout.row_major(len(self.shape)))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"FlatBuffer({self.name!r})"


Buffer = SparseBuffer | FlatBuffer
