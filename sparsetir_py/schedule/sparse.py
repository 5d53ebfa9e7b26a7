"""Stage I schedule primitives (SparseTIR): `sparse_reorder` and `sparse_fuse` on sparse iterations.

They rewrite the header of one `T.sp_iter` of a Stage I function (coordinate space), before
`lower_sparse_iter` turns it into loops:

- `sparse_reorder` permutes the iterators, which permutes the loops lowering generates (and so
  where blocks start: a new block begins at every variable axis).
- `sparse_fuse` turns a chain of axes (a root, its child, ...) into one iterator over their
  stored points, `T.fuse(I, J)`: lowering walks them with one loop over the leaf's positions and
  recovers the parents' positions with a binary search in a preprocessing block.

Neither changes what the iteration computes: Stage I semantics are dense (for every spatial
point, `init` once, then the body for every reduction point), whatever the order of the
iterators.

Handles: a sparse iteration is named by its name (`SparseIterationRV`), an iterator by its
variable (`SpIterRV`); primitives also accept a bare `Var` or a position in the iteration. The
trace records iterators as positions, so a replay does not depend on handles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from ..errors import ScheduleError
from ..ir.axis import DENSE_FIXED, Axis, FusedAxis, IterAxis, base_axis, iteration_parent
from ..ir.expr import Var
from ..ir.func import PrimFunc
from ..ir.node import FrozenDict
from ..ir.stmt import BufferStore, SparseIteration, Stmt
from ..ir.visit import map_children, walk
from .state import missing

if TYPE_CHECKING:
    from .schedule import Schedule

__all__ = [
    "SpIterRV",
    "SparseIterationPrimitives",
    "SparseIterationRV",
    "find_sparse_iteration",
    "sparse_fuse",
    "sparse_reorder",
]


@dataclass(frozen=True)
class SparseIterationRV:
    """A sparse iteration handle: the iteration's name (unique in a function)."""

    name: str


@dataclass(frozen=True)
class SpIterRV:
    """A sparse iterator handle: the iterator's variable (compared by identity)."""

    var: Var

    @property
    def name(self) -> str:
        return self.var.name


IterRef = SpIterRV | Var | int


# -------------------------------------------------------------------- lookup
def find_sparse_iteration(func: PrimFunc, name: str, primitive: str) -> SparseIteration:
    """The sparse iteration called `name` in the Stage I function `func`."""
    if func.stage != 1:
        raise ScheduleError(
            f"in `{primitive}`: expected a Stage I function (before lower_sparse_iter), but `{func.name}` is at "
            f"Stage {func.stage}"
        )
    for n in walk(func.body):
        if isinstance(n, SparseIteration) and n.name == name:
            return n
    names = [n.name for n in walk(func.body) if isinstance(n, SparseIteration)]
    raise missing(primitive, "sparse iteration", name, func, names)


def _resolve(it: SparseIteration, refs: Sequence[IterRef], primitive: str) -> list[Var]:
    """Iterator references (handles, variables or positions) -> the iteration's variables."""
    if isinstance(refs, SpIterRV | Var | int):
        raise ScheduleError(f"in `{primitive}`: expected a list of iterators, but got {refs!r}")
    out = []
    for ref in refs:
        if isinstance(ref, SpIterRV):
            ref = ref.var
        if isinstance(ref, bool) or not isinstance(ref, Var | int):
            raise ScheduleError(f"in `{primitive}`: expected an iterator handle or position, but got {ref!r}")
        if isinstance(ref, int):
            if not 0 <= ref < len(it.iter_vars):
                raise ScheduleError(
                    f"in `{primitive}`: expected an iterator position in [0, {len(it.iter_vars)}) of sparse "
                    f"iteration `{it.name}`, but got {ref}"
                )
            ref = it.iter_vars[ref]
        if not any(ref is v for v in it.iter_vars):
            raise ScheduleError(
                f"in `{primitive}`: expected an iterator of sparse iteration `{it.name}` "
                f"({_var_names(it.iter_vars)}), but got `{ref.name}`"
            )
        out.append(ref)
    return out


def _positions(it: SparseIteration, iters: Sequence[Var]) -> list[int]:
    return [next(k for k, v in enumerate(it.iter_vars) if v is var) for var in iters]


def _var_names(vs: Sequence[Var]) -> str:
    return ", ".join(v.name for v in vs)


def _axis_names(axes: Sequence[IterAxis]) -> str:
    return ", ".join(base_axis(a).name for a in axes)


def _replace_iteration(func: PrimFunc, old: SparseIteration, new: SparseIteration) -> PrimFunc:
    def go(n):
        if n is old:
            return new
        if isinstance(n, Stmt):
            return map_children(n, go)
        return n

    return func.replace(body=go(func.body))


# -------------------------------------------------------------------- primitives
def sparse_reorder(func: PrimFunc, name: str, new_order: Sequence[IterRef]) -> PrimFunc:
    """Reorder the iterators of sparse iteration `name` (and so the loops lowering generates).

    It requires:

    - `func` is a Stage I function with a sparse iteration `name`;
    - `new_order` names every iterator of the iteration exactly once (handles, variables or
      positions);
    - every axis still comes after the axis it depends on (its parent, or for `T.attach` the
      axis it is attached to) when that axis is iterated by this iteration;
    - the members of a fused group (`T.fuse`) stay together and in order.

    Parameters: `func`, the iteration's `name`, `new_order`. Returns the new function; the
    iterator variables, their kinds ("S"/"R") and the body are unchanged, only reordered.

    Before (SDDMM, `sddmm_script()`):

        with T.sp_iter([I, J, K], "SSR", "sddmm") as [i, j, k]:

    `sparse_reorder(func, "sddmm", [i, k, j])` (the reduction over K outside the row's nonzeros):

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import sddmm_script
    >>> sch = sp.Schedule(sddmm_script())
    >>> it = sch.get_sparse_iteration("sddmm")
    >>> i, j, k = sch.get_sp_iters(it)
    >>> sch.sparse_reorder(it, [i, k, j])
    >>> print(next(line.strip() for line in sch.func.script().splitlines() if "T.sp_iter" in line))
    with T.sp_iter([I, K, J], "SRS", "sddmm") as [i, k, j]:
    """
    it = find_sparse_iteration(func, name, "sparse_reorder")
    order = _resolve(it, new_order, "sparse_reorder")
    if len(order) != len(it.iter_vars) or len({id(v) for v in order}) != len(order):
        raise ScheduleError(
            f"in `sparse_reorder`: expected every iterator of `{name}` ({_var_names(it.iter_vars)}) exactly once, "
            f"but got [{_var_names(order)}]"
        )
    perm = _positions(it, order)
    axes = tuple(it.axes[p] for p in perm)
    seen: set[Axis] = set()
    iterated = {base_axis(a) for a in axes}
    for ia in axes:
        parent = iteration_parent(ia)
        if parent is not None and parent in iterated and parent not in seen:
            raise ScheduleError(
                f"in `sparse_reorder`: expected every axis after its parent, but `{base_axis(ia).name}` would come "
                f"before its parent `{parent.name}` in [{_axis_names(axes)}]"
            )
        seen.add(base_axis(ia))
    for pos, ia in enumerate(axes):
        if isinstance(ia, FusedAxis) and ia.index == 0:
            run = axes[pos : pos + len(ia.group)]
            if tuple(run) != tuple(FusedAxis(ia.group, k) for k in range(len(ia.group))):
                raise ScheduleError(
                    f"in `sparse_reorder`: expected the fused axes ({_axis_names(ia.group)}) to stay together and in "
                    f"order, but got [{_axis_names(axes)}]"
                )
    new = it.replace(
        axes=axes,
        kinds="".join(it.kinds[p] for p in perm),
        iter_vars=tuple(it.iter_vars[p] for p in perm),
    )
    return _replace_iteration(func, it, new)


def sparse_fuse(func: PrimFunc, name: str, iters: Sequence[IterRef]) -> PrimFunc:
    """Fuse a chain of iterators of sparse iteration `name` into one walk over their stored points.

    The axes of `iters` become the members of one `T.fuse(...)` group; each iterator keeps its
    variable (and its coordinate in the body). `lower_sparse_iter` then generates a single loop
    over the stored positions of the last axis, and recovers the positions of the others by a
    binary search over `indptr` in a preprocessing block (SparseTIR's `sparse_fuse`), which
    balances work across rows of very different lengths.

    It requires:

    - `func` is a Stage I function with a sparse iteration `name`;
    - at least two distinct iterators of the iteration, adjacent in it and given in its order;
    - none is already fused or attached;
    - the first iterates a root axis (dense_fixed) and each next axis is the child of the
      previous one (a chain parent, child, ...);
    - their kinds are spatial iterators first, then reduction ones ("SS", "RR" or "SR", not
      "RS"). A group with a reduction member lowers to one reduction loop over the nonzeros
      (TACO's nonzero split of SpMM fuses spatial `i` with reduction `j`): several of its points
      update the same output, so the init runs first in a loop nest of its own over the whole
      spatial domain, and parallel or thread-bound fused loops need atomic updates
      (`annotate(block, "atomic")`).

    Parameters: `func`, the iteration's `name`, `iters`. Returns the new function.

    Before (SDDMM): `with T.sp_iter([I, J, K], "SSR", "sddmm") as [i, j, k]:`

    `sparse_fuse(func, "sddmm", [i, j])`:

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import sddmm_script
    >>> sch = sp.Schedule(sddmm_script())
    >>> it = sch.get_sparse_iteration("sddmm")
    >>> i, j, k = sch.get_sp_iters(it)
    >>> sch.sparse_fuse(it, [i, j])
    >>> print(next(line.strip() for line in sch.func.script().splitlines() if "T.sp_iter" in line))
    with T.sp_iter([T.fuse(I, J), K], "SSR", "sddmm") as [i, j, k]:

    SpMM (`spmm_script()`, kinds "SRS") fuses its spatial row `i` with its reduction `j`:

    >>> from sparsetir_py.ops import spmm_script
    >>> sch = sp.Schedule(spmm_script())
    >>> it = sch.get_sparse_iteration("csrmm")
    >>> i, j, k = sch.get_sp_iters(it)
    >>> sch.sparse_fuse(it, [i, j])
    >>> print(next(line.strip() for line in sch.func.script().splitlines() if "T.sp_iter" in line))
    with T.sp_iter([T.fuse(I, J), K], "SRS", "csrmm") as [i, j, k]:
    """
    it = find_sparse_iteration(func, name, "sparse_fuse")
    group_vars = _resolve(it, iters, "sparse_fuse")
    if len(group_vars) < 2:
        raise ScheduleError(f"in `sparse_fuse`: expected at least two iterators, but got [{_var_names(group_vars)}]")
    if len({id(v) for v in group_vars}) != len(group_vars):
        raise ScheduleError(f"in `sparse_fuse`: expected distinct iterators, but got [{_var_names(group_vars)}]")
    pos = _positions(it, group_vars)
    if pos != list(range(pos[0], pos[0] + len(pos))):
        raise ScheduleError(
            f"in `sparse_fuse`: expected iterators adjacent in `{name}` and in its order "
            f"({_var_names(it.iter_vars)}), but got [{_var_names(group_vars)}]"
        )
    axes = [it.axes[p] for p in pos]
    for var, ia in zip(group_vars, axes):
        if not isinstance(ia, Axis):
            how = "fused" if isinstance(ia, FusedAxis) else "attached"
            raise ScheduleError(
                f"in `sparse_fuse`: expected plain axes, but iterator `{var.name}` is already {how} "
                f"(axis `{base_axis(ia).name}`)"
            )
    root = axes[0]
    if root.kind != DENSE_FIXED or root.parent is not None:
        raise ScheduleError(
            f"in `sparse_fuse`: expected the first iterator to walk a root axis (dense_fixed), as lowering enumerates "
            f"the fused points from the root, but `{group_vars[0].name}` walks `{root.name}` ({root.kind})"
        )
    for prev, child in pairwise(axes):
        if child.parent is not prev:
            parent = "no parent" if child.parent is None else f"parent `{child.parent.name}`"
            raise ScheduleError(
                f"in `sparse_fuse`: expected each axis to be the child of the previous one, but `{child.name}` has "
                f"{parent}, not `{prev.name}`"
            )
    kinds = "".join(it.kinds[p] for p in pos)
    # A reduction before a spatial iterator fuses into one reduction when the iteration has no
    # init (a part of a decomposed function: the output was initialised before it), as SparseTIR's
    # hyb schedule fuses an ELL part's layers and rows; with an init, the fused order would run it
    # after some of its reduction steps.
    if "RS" in kinds and it.init is not None:
        raise ScheduleError(
            f"in `sparse_fuse`: expected spatial iterators first, then reduction ones, but [{_var_names(group_vars)}] "
            f'have kinds "{kinds}" and `{name}` has an init'
        )
    group = tuple(axes)
    new_axes = list(it.axes)
    for k, p in enumerate(pos):
        new_axes[p] = FusedAxis(group, k)
    return _replace_iteration(func, it, it.replace(axes=tuple(new_axes)))


#: The workspaces of an assembled output's rows (`coiteration.assemble.WORKSPACES`).
WORKSPACE_KINDS = ("dense", "hash", "global")


def workspace(func: PrimFunc, name: str, kind: str) -> PrimFunc:
    """Choose the workspace in which iteration `name` assembles the rows of its output: "dense"
    (an accumulator of the output's width and a list of the touched columns per chunk of rows,
    the default), "hash" (a hash table sized by the widest row: for very wide outputs) or
    "global" (the dense one in arrays the kernel passes: CUDA, where a block cannot allocate).
    The kernels of the output's symbolic and numeric passes are chosen by it at lowering.

    It requires: a Stage I iteration `name` that writes a buffer over an assembled level
    (`T.sparse_variable(..., assemble=True)`); `kind` one of `WORKSPACE_KINDS`.

    Before: `with T.sp_iter([I, K, J], "SRS", "spgemm") as [i, k, j]:`
    `sch.workspace(sch.get_sparse_iteration("spgemm"), "hash")`
    After: `with T.sp_iter([I, K, J], "SRS", "spgemm", attrs={"workspace": "hash"}) as [i, k, j]:`
    """
    primitive = "workspace"
    if kind not in WORKSPACE_KINDS:
        raise ScheduleError(f"in `{primitive}`: expected one of {WORKSPACE_KINDS}, but got {kind!r}")
    it = find_sparse_iteration(func, name, primitive)
    written = {n.buffer for n in walk(it) if isinstance(n, BufferStore)}
    if not any(getattr(b, "axes", None) and b.axes[-1].assemble for b in written):
        raise ScheduleError(
            f"in `{primitive}`: expected sparse iteration `{name}` to write an assembled output "
            "(`T.sparse_variable(..., assemble=True)`), but it writes none: its output has no rows to assemble"
        )
    return _replace_iteration(func, it, it.replace(attrs=FrozenDict({**it.attrs, "workspace": kind})))


# -------------------------------------------------------------------- Schedule methods
class SparseIterationPrimitives:
    """Mixed into `Schedule`: Stage I primitives (`get_sparse_iteration`, `get_sp_iters`,
    `sparse_reorder`, `sparse_fuse`, `workspace`), each a call of the pure function above plus a trace entry."""

    def get_sparse_iteration(self: Schedule, name: str) -> SparseIterationRV:
        """The handle of the sparse iteration called `name` (`T.sp_iter(..., name)`)."""
        if not isinstance(name, str):
            raise ScheduleError(
                f"in `get_sparse_iteration`: expected a sparse iteration name (a str), but got {name!r}"
            )
        find_sparse_iteration(self.func, name, "get_sparse_iteration")
        rv = SparseIterationRV(name)
        self._record("get_sparse_iteration", (), (name,), (rv,), unpack=False)
        return rv

    def get_sp_iters(self: Schedule, it: SparseIterationRV) -> list[SpIterRV]:
        """Handles of the iterators of `it`, in the iteration's current order."""
        node = find_sparse_iteration(self.func, _iteration_name(it, "get_sp_iters"), "get_sp_iters")
        out = [SpIterRV(v) for v in node.iter_vars]
        self._record("get_sp_iters", (it,), (), tuple(out))
        return out

    def sparse_reorder(self: Schedule, it: SparseIterationRV, new_order: Sequence[IterRef]) -> None:
        """Reorder the iterators of `it`; see `sparse.sparse_reorder` for the preconditions."""
        name = _iteration_name(it, "sparse_reorder")
        node = find_sparse_iteration(self.func, name, "sparse_reorder")
        order = _resolve(node, new_order, "sparse_reorder")
        self._update(sparse_reorder(self.func, name, order))
        self._record("sparse_reorder", (it,), (_positions(node, order),), ())

    def workspace(self: Schedule, it: SparseIterationRV, kind: str) -> None:
        """The workspace in which `it` assembles its output's rows; see `sparse.workspace`."""
        self._update(workspace(self.func, _iteration_name(it, "workspace"), kind))
        self._record("workspace", (it,), (kind,), ())

    def sparse_fuse(self: Schedule, it: SparseIterationRV, iters: Sequence[IterRef]) -> None:
        """Fuse a chain of iterators of `it`; see `sparse.sparse_fuse` for the preconditions."""
        name = _iteration_name(it, "sparse_fuse")
        node = find_sparse_iteration(self.func, name, "sparse_fuse")
        group = _resolve(node, iters, "sparse_fuse")
        self._update(sparse_fuse(self.func, name, group))
        self._record("sparse_fuse", (it,), (_positions(node, group),), ())


def _iteration_name(it: Any, primitive: str) -> str:
    if isinstance(it, SparseIterationRV):
        return it.name
    raise ScheduleError(f"in `{primitive}`: expected a sparse iteration handle, but got {it!r}")
