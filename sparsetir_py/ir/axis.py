"""Axes (SparseTIR / TACO levels): dense or sparse, fixed or variable, forming a forest.

An axis holds the structure of one level: `indptr` (variable axes) and `indices` (sparse axes)
are handle parameters of the function. Values live on sparse buffers, so buffers share axes.

Positions and coordinates: a *position* counts stored elements of an axis over the whole tree
(`indptr[p] + local` for a variable axis whose parent is at position `p`); a *coordinate* is the
logical index (`indices[position]` for a sparse axis, the local offset for a dense one).
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import PrimExpr, Var
from .node import Node

DENSE_FIXED = "dense_fixed"
DENSE_VARIABLE = "dense_variable"
SPARSE_FIXED = "sparse_fixed"
SPARSE_VARIABLE = "sparse_variable"
AXIS_KINDS = (DENSE_FIXED, DENSE_VARIABLE, SPARSE_FIXED, SPARSE_VARIABLE)


@dataclass(frozen=True, slots=True, eq=False)
class Axis(Node):
    """One level of a sparse structure. Compared by identity, like `Var`.

    - `length`: the coordinate range (`[0, length)`) — an upper bound of a row for variable axes.
    - `nnz`: stored positions of the whole level (variable axes).
    - `nnz_cols`: stored positions per parent position (`sparse_fixed`, e.g. ELL).
    - `assemble`: a `sparse_variable` level of an output whose structure the kernel builds
      (`assemble=True`, the design card §3f): its indptr, indices and nnz are results, not arguments.
    """

    # Identity, not value: two declarations with equal fields are different objects.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    name: str
    kind: str
    length: PrimExpr
    parent: Axis | None = None
    nnz: PrimExpr | None = None
    nnz_cols: PrimExpr | None = None
    indptr: Var | None = None
    indices: Var | None = None
    idtype: str = "int32"
    sorted: bool = True
    assemble: bool = False

    @property
    def is_dense(self) -> bool:
        return self.kind in (DENSE_FIXED, DENSE_VARIABLE)

    @property
    def is_sparse(self) -> bool:
        return self.kind in (SPARSE_FIXED, SPARSE_VARIABLE)

    @property
    def is_variable(self) -> bool:
        return self.kind in (DENSE_VARIABLE, SPARSE_VARIABLE)

    @property
    def is_fixed(self) -> bool:
        return not self.is_variable

    def ancestors(self) -> list[Axis]:
        """Parents from the root down, not including this axis."""
        chain = []
        a = self.parent
        while a is not None:
            chain.append(a)
            a = a.parent
        return chain[::-1]

    def root(self) -> Axis:
        a = self
        while a.parent is not None:
            a = a.parent
        return a

    def __repr__(self) -> str:
        return f"Axis({self.name!r}, {self.kind})"


@dataclass(frozen=True, slots=True)
class FusedAxis(Node):
    """Member `index` of `T.fuse(*group)`: one loop over all stored points of the group."""

    group: tuple[Axis, ...]
    index: int

    @property
    def axis(self) -> Axis:
        return self.group[self.index]


@dataclass(frozen=True, slots=True)
class AttachedAxis(Node):
    """`T.attach(axis, parent)`: iterate `axis` with the coordinate of `parent` as its row.

    `axis.parent` must be a dense-fixed root whose coordinates are those of `parent` (hyper-graph
    GNNs: the nodes of the hyperedge that `parent` points at).
    """

    axis: Axis
    parent: Axis


IterAxis = Axis | FusedAxis | AttachedAxis


def base_axis(a: IterAxis) -> Axis:
    """The stored axis an iteration axis walks over."""
    if isinstance(a, Axis):
        return a
    return a.axis


def iteration_parent(a: IterAxis) -> Axis | None:
    """The axis whose iterator gives this one its row (the attach target for attached axes)."""
    if isinstance(a, AttachedAxis):
        return a.parent
    return base_axis(a).parent
