"""The verifier: `verify(func_or_mod)` raises a named `VerifyError` on an ill-formed function.

Passes assume valid input and leave valid output; tests call `verify` after every pass and
schedule primitive. Each rule is one subclass of `VerifyError` (some refine another rule and
subclass it). A message reads "in `func`: <what is wrong>" and quotes the offending names.

Rules, in the order they are checked:

- `StageError`: `attrs["stage"]` is 1, 2 or 3 (missing means 1); Stage I has no `For`/`Block`,
  Stages II and III have no `SparseIteration`; Stage III loads, stores and regions touch only
  `FlatBuffer`s.
- `UndefinedVariableError`: every variable used is in scope: a parameter, an iterator of an
  enclosing sparse iteration, an enclosing loop variable or an enclosing block's iterator.
  Axis and function-buffer expressions see only parameters; a block iterator's extent and binding
  and a block predicate see the scope outside the block; a loop's min and extent do not see its
  own variable. An `init` does not see the reduction iterators of its own iteration or block
  (it runs once per spatial point, also when the reduction domain is empty).
  - `RebindError`: every variable is bound once in the whole function (SSA, as TVM's
    `VerifySSA`): parameters, loop variables, iterators, block iterators; parameter names are
    unique (kernels take keyword arguments).
  - `BlockIsolationError`: a block's body, init, regions and allocations use no loop variable
    of a loop outside the block (TensorIR block isolation); bind it to a block iterator.
- `AxisForestError`: dense_fixed axes have no parent, every other kind has one (so the roots
  are dense_fixed); a parent is declared before its child in `func.axes`; no cycles; no axis is
  declared twice.
- `AxisStructureError`: kind is one of `AXIS_KINDS`; dense_fixed has no indptr, indices, nnz or
  nnz_cols; dense_variable has indptr and nnz only; sparse_variable has indptr, indices and nnz;
  sparse_fixed has indices and nnz_cols (nnz optional), no indptr; indptr/indices are handle
  parameters; idtype is int32 or int64; axes sharing a structure handle use it in the same role
  with the same idtype. In Stage I no buffer is matched to a structure handle; in Stages II/III
  a buffer that views one (the explicit `J_indptr`, `J_indices` of lowering) has the axis's idtype.
- `UndeclaredAxisError`: every axis used by a buffer, a sparse iteration (fused members, attached
  axes and their targets included) or as a parent is in `func.axes`.
- `BufferDeclarationError`: a buffer is declared once (function buffers, `Block.alloc_buffers`,
  `Allocate`); a matched buffer's data is a handle parameter and no two buffers share one;
  allocated buffers are `FlatBuffer`s with no data; a sparse buffer's `extra_storage` is a
  non-negative integer and extends one-dimensional storage.
- `ScopeError`: a buffer's scope is in `SCOPES`; a buffer matched to a parameter is global.
- `BufferAxisOrderError` (`check_buffer_axes`): in a sparse buffer every axis appears once, every
  non-root axis comes right after its parent, and a variable axis is preceded by exactly its
  ancestor chain, root first (its storage offset is `indptr[position of its parent]`).
- `BufferLayoutError`: a flat buffer's `minor_to_major` is a permutation of its dimensions, tiles are
  tuples of positive sizes of rank at most the buffer's, `tail_padding_alignment >= 1`.
- `UndeclaredBufferError`: every buffer loaded, stored or named in a region is a function buffer
  or allocated by an enclosing block or `Allocate`.
- `BufferArityError`: an access or region has one index per axis (`SparseBuffer`) or per shape
  dimension (`FlatBuffer`). Stage III may also address a flat buffer of any rank with a single
  flat offset (lower_sparse_buffer applies the layout itself).
- `SparseIterationError` (`check_iteration_axes`): one S/R letter and one axis per iterator; an
  iterated axis's `iteration_parent` is iterated earlier in the same iteration or by an enclosing
  one; no axis is iterated twice (here or by an enclosing iteration); a fused group appears whole,
  consecutively, in member order, each member the child of the previous one, its kinds spatial
  members first, then reduction ones ("SS", "RR", "SR", "SRR"; not "RS": the fused group is one
  loop, a reduction loop as soon as a member is one, and a spatial member below a reduction
  member would be a spatial point that depends on a reduction iterator); an attached axis's own
  parent is a dense_fixed root; with an `init`, no S iterator depends through parents on an R
  iterator; iterators are integer variables; iteration names are unique.
- `ReductionWriteError`: no store (`BufferStore`, `AtomicAdd`) in a sparse iteration's body or
  init, or directly in a block that has an init, is indexed by a reduction iterator of it.
- Checked writes (Stage I; `CheckedWrite`, listed in the `VerifyReport` that `verify` returns,
  not an error): a store or atomic add into a sparse buffer is *provably stored* when each sparse
  or variable axis `X` of the buffer is indexed by the iterator of an iteration axis that walks
  `X`'s storage, and the index just before it (`X`'s parent) by the iterator that gives that
  iterator its row (dense-fixed roots take any index). An iteration axis walks `X`'s storage when
  it is `X` itself, a member of a `T.fuse` group that is `X`, or `T.attach(X, P)` (its row is then
  `P`'s iterator), or when it is an axis of `X`'s kind over the same `indptr`/`indices` (and
  `nnz_cols`) under a parent of the same storage (dense-fixed roots agree), both declared sorted
  when sparse. Such writes cost nothing extra. Any other write (an iterator of a dense axis, an
  index expression as in SparseTIR's `csr2bsr`, another row) is *checked*: lowering searches the
  written buffer's structure for its coordinates (and checks dense indices against their
  lengths), and a miss is the same `InputError`, naming the buffer and the coordinates, from the
  interpreter, the CPU kernel and the CUDA kernel (their hosts read an error flag after the call).
  Reads are not restricted (a read of an unstored coordinate gives the default value).
- `AssembleError`: an axis declared `assemble=True` is a `sparse_variable` level whose parent is a
  dense_fixed root, the last axis of the sparse buffers over it; each such buffer is matched to a
  parameter and is an output: written in the function, and read only by updates of the element
  being written (`C[i, j] = C[i, j] + ...`). Its writes are not checked writes: they make the
  structure (the design card §3f).
- `LoopExtentError`: constant extents (loops, block iterators, axis lengths, nnz, nnz_cols,
  buffer shapes, regions) are non-negative; a loop's kind is in `LOOP_KINDS`.
  - `ThreadBindingError`: a thread_binding loop has a tag from `THREAD_TAGS` and starts at 0,
    other loops have no tag; a tag (other than vthread) is not bound again inside its own loop.
- `DtypeError`: buffers have scalar dtypes; a store's value has the buffer's dtype; indices,
  extents, loop and iterator variables are integers, and a loop's (block iterator's) min, extent
  (binding) have its variable's dtype; conditions are bool; binary operands have equal dtypes
  (logic on bool, arithmetic on numbers, `/` not on integers); handles are not used as values;
  constants (and sparse buffers' default values) fit their dtypes; calls name an intrinsic of
  `op.INTRINSICS` with its arity and result dtype.
- `BlockError`: block iterator kinds are "S"/"R"; `init` only on a block with an R iterator;
  block names are unique in the function.
- `WhileLoopError`: `while` loops appear in Stages II and III only, with a bool condition that
  loads a buffer the loop's body writes (else the condition never changes: the loop runs never or
  forever).

`check_buffer_axes` and `check_iteration_axes` are the two rules the frontend checks where the
user declares a buffer or a sparse iteration, so it can point at the source; `verify` calls them
too, so the logic exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from itertools import pairwise
from typing import NoReturn

import numpy as np

from ..errors import VerifyError
from . import dtype as dt
from .axis import (
    AXIS_KINDS,
    DENSE_FIXED,
    DENSE_VARIABLE,
    SPARSE_FIXED,
    SPARSE_VARIABLE,
    AttachedAxis,
    Axis,
    FusedAxis,
    IterAxis,
    base_axis,
    iteration_parent,
)
from .buffer import SCOPES, FlatBuffer, SparseBuffer
from .expr import (
    ARITH_OPS,
    BIN_OPS,
    CMP_OPS,
    LOGIC_OPS,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    PrimExpr,
    Select,
    UnaryOp,
    Var,
)
from .func import IRModule, PrimFunc
from .node import Node
from .op import INTRINSICS
from .printer import ScriptPrinter
from .stmt import (
    LOOP_KINDS,
    THREAD_TAGS,
    Allocate,
    AtomicAdd,
    Block,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    IterVar,
    LetStmt,
    SeqStmt,
    SparseIteration,
    Stmt,
    While,
)
from .visit import children, walk

__all__ = [
    "AssembleError",
    "AxisForestError",
    "AxisStructureError",
    "BlockError",
    "BlockIsolationError",
    "BufferArityError",
    "BufferAxisOrderError",
    "BufferDeclarationError",
    "BufferLayoutError",
    "CheckedWrite",
    "DtypeError",
    "InitWriteError",
    "LoopExtentError",
    "RebindError",
    "ReductionWriteError",
    "ScopeError",
    "SparseIterationError",
    "StageError",
    "ThreadBindingError",
    "UndeclaredAxisError",
    "UndeclaredBufferError",
    "UndefinedVariableError",
    "VerifyReport",
    "WhileLoopError",
    "check_buffer_axes",
    "check_iteration_axes",
    "checked_writes",
    "verify",
]


# ----------------------------------------------------------------------------------------------
# The rules


class AssembleError(VerifyError):
    """An assembled level (`assemble=True`) that does not declare an output's structure."""


class AxisForestError(VerifyError):
    """Axes do not form a forest rooted at dense_fixed axes, declared parents first."""


class AxisStructureError(VerifyError):
    """An axis's structure arrays (indptr, indices, nnz, nnz_cols, idtype) do not fit its kind."""


class UndeclaredAxisError(VerifyError):
    """An axis used by a buffer, a sparse iteration or as a parent is not in `func.axes`."""


class UndeclaredBufferError(VerifyError):
    """A buffer is accessed that is neither a function buffer nor allocated in scope."""


class BufferDeclarationError(VerifyError):
    """A buffer is declared twice, or its data handle is not a unique handle parameter."""


class BufferAxisOrderError(VerifyError):
    """A sparse buffer's axes are not in storage order (parents first, variable axes after their chain)."""


class BufferArityError(VerifyError):
    """A buffer is indexed with the wrong number of indices."""


class BufferLayoutError(VerifyError):
    """A flat buffer's layout does not fit its shape (the verifier's rule; `ir.layout.LayoutError` is
    the layout library's own error, for malformed layout text or a shape a layout does not fit)."""


class SparseIterationError(VerifyError):
    """A sparse iteration's axes, kinds and iterators do not fit together."""


class ReductionWriteError(VerifyError):
    """A store inside a reduction is indexed by a reduction iterator."""


class InitWriteError(ReductionWriteError):
    """A sparse iteration with an init writes a buffer at an index that ignores a spatial iterator.

    The init runs once per spatial point; two spatial points writing one element would each
    re-initialise it, so the result would depend on the order of the points.
    """


class WhileLoopError(VerifyError):
    """A `while` loop in a Stage I function, or one whose condition cannot change.

    The loop binds no variable: only the buffers its body writes can change its condition. A
    condition that reads none of them is the same before every iteration, so the loop runs never
    or forever (a kernel would hang).
    """


class UnstoredWriteError(VerifyError):
    """Kept for callers that catch it: no rule raises it any more. A write the verifier cannot
    prove stored is a *checked write* (`CheckedWrite`, `VerifyReport.checked`): every engine
    searches the written buffer's structure and raises `InputError` on a miss."""


@dataclass(frozen=True)
class CheckedWrite:
    """A Stage I store or atomic add into a sparse buffer at coordinates the verifier cannot
    prove stored: lowered to a coordinate search in the buffer's structure (a miss is an
    `InputError` from the interpreter, the CPU kernel and the CUDA kernel alike)."""

    iteration: str  # the innermost sparse iteration holding it
    buffer: str
    access: str  # as the script writes it: `B[i // blk, j // blk, i % blk, j % blk]`
    index: int  # the first index the verifier could not prove
    reason: str
    store: Stmt = dataclass_field(repr=False, compare=False)

    def __str__(self) -> str:
        return f"`{self.iteration}`: {self.access} is checked: {self.reason}"


@dataclass(frozen=True)
class VerifyReport:
    """What `verify` returns for a well-formed function: the writes it could not prove stored,
    which run checked (a search per write; a miss raises `InputError`). Empty when every write is
    provably stored, as in every Stage II or III function."""

    checked: tuple[CheckedWrite, ...] = ()

    def __bool__(self) -> bool:
        return True  # a report means "valid"; look at `.checked` for the checked writes

    def __str__(self) -> str:
        if not self.checked:
            return "verified: every write is provably stored (no checked writes)"
        lines = [f"verified: {len(self.checked)} checked write(s), a structure search each:"]
        return "\n".join(lines + [f"  {c}" for c in self.checked])

    def __repr__(self) -> str:
        return f"VerifyReport(checked={list(self.checked)!r})"


class UndefinedVariableError(VerifyError):
    """A variable is used where it is not defined."""


class RebindError(UndefinedVariableError):
    """A variable is bound twice (the IR is in SSA form), or two parameters share a name."""


class BlockIsolationError(UndefinedVariableError):
    """A block uses a loop variable of a loop outside it instead of a block iterator."""


class LoopExtentError(VerifyError):
    """A constant extent is negative, or a loop kind is unknown."""


class ThreadBindingError(LoopExtentError):
    """A loop's thread tag does not fit its kind, or a thread tag is bound inside itself."""


class StageError(VerifyError):
    """The stage attribute is wrong, or the body uses a construct of another stage."""


class DtypeError(VerifyError):
    """Operand, index, condition or stored-value dtypes do not fit."""


class BlockError(VerifyError):
    """A block's iterator kinds, init or name are wrong."""


class ScopeError(VerifyError):
    """A buffer's memory scope is unknown or does not fit how it is declared."""


# ----------------------------------------------------------------------------------------------
# Shared helpers


def _fail(cls: type[VerifyError], func: str | None, message: str) -> NoReturn:
    prefix = f"in `{func}`: " if func else ""
    raise cls(prefix + message)


def _name(x: object) -> str:
    return getattr(x, "name", None) or type(x).__name__


def _names(xs: Iterable[object]) -> str:
    return "(" + ", ".join(f"`{_name(x)}`" for x in xs) + ")"


def _const_int(e: object) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _ancestors(axis: Axis, func: str | None) -> list[Axis]:
    """`axis.ancestors()`, root first, but raising AxisForestError on a cycle instead of looping."""
    chain: list[Axis] = []
    seen = {axis}
    a = axis.parent
    while a is not None:
        if a in seen:
            _fail(AxisForestError, func, f"the parents of axis `{axis.name}` form a cycle through `{a.name}`")
        seen.add(a)
        chain.append(a)
        a = a.parent
    return chain[::-1]


def _vars_in(exprs: Iterable[Node]) -> set[Var]:
    found: set[Var] = set()
    for e in exprs:
        found.update(n for n in walk(e) if isinstance(n, Var))
    return found


# ----------------------------------------------------------------------------------------------
# Reusable checkers (also called by the frontend at the point of declaration)


def check_buffer_axes(name: str, axes: tuple[Axis, ...], *, func: str | None = None) -> None:
    """Check that `axes` is a valid axis list for sparse buffer `name`; raise `BufferAxisOrderError`.

    Every axis appears once; every non-root axis comes right after its parent; a variable axis
    (dense_variable, sparse_variable) is preceded by exactly its ancestors, root first, because
    its storage offset is `indptr[position of its parent]`. `func`, when given, names the
    function in the message.
    """
    seen: set[Axis] = set()
    for pos, ax in enumerate(axes):
        if not isinstance(ax, Axis):
            _fail(BufferAxisOrderError, func, f"buffer `{name}`: entry {pos} is a {type(ax).__name__}, not an Axis")
        if ax in seen:
            _fail(BufferAxisOrderError, func, f"buffer `{name}` lists axis `{ax.name}` twice")
        seen.add(ax)
        if ax.parent is None:
            continue
        if pos == 0 or axes[pos - 1] is not ax.parent:
            prev = axes[pos - 1].name if pos else None
            why = (
                f", but follows `{prev}`: its positions are counted from `{ax.parent.name}`'s, so `{prev}` in "
                f"between would be ignored (every `{prev}` would see the same elements); declare `{ax.name}` under "
                f"`{prev}` (`{ax.name} = T.{ax.kind}({prev}, ...)`) or list it right after `{ax.parent.name}`"
                if prev is not None
                else f", but comes first; list `{ax.parent.name}` before it"
            )
            _fail(
                BufferAxisOrderError,
                func,
                f"buffer `{name}`: axis `{ax.name}` must come right after its parent `{ax.parent.name}`{why}",
            )
        chain = _ancestors(ax, func)
        if ax.is_variable and list(axes[:pos]) != chain:
            _fail(
                BufferAxisOrderError,
                func,
                f"buffer `{name}`: {ax.kind} axis `{ax.name}` must be preceded by exactly its ancestors "
                f"{_names(chain)}, but is preceded by {_names(axes[:pos])}",
            )


def check_iteration_axes(
    name: str,
    axes: tuple[IterAxis, ...],
    kinds: str,
    n_iter_vars: int,
    bound_axes: set[Axis],
    *,
    has_init: bool = False,
    func: str | None = None,
) -> None:
    """Check the header of sparse iteration `name`; raise `SparseIterationError`.

    `bound_axes` are the axes iterated by enclosing sparse iterations. Checks: one "S"/"R" letter
    and one axis per iterator; each axis's `iteration_parent` is iterated before it (here or in
    `bound_axes`); no axis is iterated twice; fused groups appear whole, consecutively and in order,
    each member the child of the previous, spatial members before reduction ones; an attached
    axis's own parent is a dense_fixed root; with `has_init`, no S iterator depends through
    parents on an R iterator.
    """
    where = f"sparse iteration `{name}`"
    if any(k not in "SR" for k in kinds):
        _fail(SparseIterationError, func, f'{where} has kinds "{kinds}"; each letter must be "S" or "R"')
    if len(kinds) != n_iter_vars:
        _fail(
            SparseIterationError,
            func,
            f'{where} has {n_iter_vars} iterators but kinds "{kinds}" has {len(kinds)} letters',
        )
    if len(axes) != n_iter_vars:
        _fail(SparseIterationError, func, f"{where} iterates {len(axes)} axes with {n_iter_vars} iterators")

    position: dict[Axis, int] = {}
    for pos, ia in enumerate(axes):
        if not isinstance(ia, Axis | FusedAxis | AttachedAxis):
            _fail(SparseIterationError, func, f"{where}: entry {pos} is a {type(ia).__name__}, not an axis")
        if isinstance(ia, FusedAxis):
            _check_fused(where, axes, kinds, pos, func, has_init)
        if isinstance(ia, AttachedAxis):
            _check_attached(where, ia, func)
        ax = base_axis(ia)
        if ax in position:
            _fail(SparseIterationError, func, f"{where} iterates axis `{ax.name}` twice")
        if ax in bound_axes:
            _fail(
                SparseIterationError,
                func,
                f"{where} iterates axis `{ax.name}`, which an enclosing sparse iteration already iterates",
            )
        parent = iteration_parent(ia)
        if parent is not None and parent not in position and parent not in bound_axes:
            if any(base_axis(other) is parent for other in axes[pos + 1 :]):
                message = f"{where} iterates axis `{ax.name}` before its parent `{parent.name}`"
            else:
                message = (
                    f"{where} iterates axis `{ax.name}` but not its parent `{parent.name}` (neither "
                    "earlier in it nor in an enclosing sparse iteration)"
                )
            _fail(SparseIterationError, func, message)
        position[ax] = pos

    if has_init:
        _check_init_dependence(where, axes, kinds, position, func)


def _check_fused(
    where: str, axes: tuple[IterAxis, ...], kinds: str, pos: int, func: str | None, has_init: bool = True
) -> None:
    fa = axes[pos]
    group = fa.group
    if not group or not 0 <= fa.index < len(group) or not all(isinstance(a, Axis) for a in group):
        _fail(SparseIterationError, func, f"{where}: fused axis has index {fa.index} in group {_names(group)}")
    if fa.index > 0:
        # The run starting at member 0 checks the rest; here only that this member has a predecessor.
        if pos == 0 or axes[pos - 1] != FusedAxis(group, fa.index - 1):
            _fail(
                SparseIterationError,
                func,
                f"{where}: fused axes {_names(group)} must be listed together, in order "
                f"(member `{fa.axis.name}` is not preceded by `{group[fa.index - 1].name}`)",
            )
        return
    run = axes[pos : pos + len(group)]
    if tuple(run) != tuple(FusedAxis(group, k) for k in range(len(group))):
        _fail(SparseIterationError, func, f"{where}: fused axes {_names(group)} must be listed together, in order")
    for prev, member in pairwise(group):
        if member.parent is not prev:
            _fail(
                SparseIterationError,
                func,
                f"{where}: in fused group {_names(group)}, the parent of `{member.name}` must be `{prev.name}`",
            )
    run_kinds = kinds[pos : pos + len(group)]
    # Without an init (a decomposed part: the output was initialised before it) a reduction member
    # may come first; with one, the init would run after some of its reduction steps.
    if "RS" in run_kinds and has_init:
        _fail(
            SparseIterationError,
            func,
            f'{where}: fused axes {_names(group)} have kinds "{run_kinds}"; a fused group takes spatial members '
            "then reduction members when the iteration has an init (a spatial member cannot follow a reduction one)",
        )


def _check_attached(where: str, ia: AttachedAxis, func: str | None) -> None:
    ax, root = ia.axis, ia.axis.parent
    if not isinstance(ia.parent, Axis):
        _fail(SparseIterationError, func, f"{where}: axis `{ax.name}` is attached to a non-axis")
    if root is None or root.kind != DENSE_FIXED or root.parent is not None:
        _fail(
            SparseIterationError,
            func,
            f"{where}: attached axis `{ax.name}` must have a dense_fixed root as its parent, "
            f"but its parent is {'none' if root is None else f'`{root.name}` ({root.kind})'}",
        )


def _check_init_dependence(
    where: str, axes: tuple[IterAxis, ...], kinds: str, position: dict[Axis, int], func: str | None
) -> None:
    for pos, ia in enumerate(axes):
        if kinds[pos] != "S":
            continue
        cur = ia
        while (parent := iteration_parent(cur)) in position:
            j = position[parent]
            if kinds[j] == "R":
                _fail(
                    SparseIterationError,
                    func,
                    f"{where} has an init, but spatial axis `{base_axis(ia).name}` depends on "
                    f"reduction axis `{parent.name}`",
                )
            cur = axes[j]


# ----------------------------------------------------------------------------------------------
# verify


def verify(func_or_mod: PrimFunc | IRModule) -> VerifyReport:
    """Raise a `VerifyError` subclass naming the broken rule if a function is ill-formed.

    Accepts a PrimFunc or an IRModule (every function is verified). Returns a `VerifyReport` when
    valid: its `checked` lists the writes that run checked (see "Checked writes" in this module's docstring).

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> sp.verify(spmm_script()).checked           # well-formed, every write provably stored
    ()
    >>> print(sp.verify(sp.lower_sparse_iter(spmm_script())))
    verified: every write is provably stored (no checked writes)
    """
    if isinstance(func_or_mod, PrimFunc):
        return VerifyReport(checked_writes(func_or_mod))
    if not isinstance(func_or_mod, IRModule):
        raise TypeError(f"verify expects a PrimFunc or an IRModule, got {type(func_or_mod).__name__}")
    checked: list[CheckedWrite] = []
    for key, func in func_or_mod.items():
        if not isinstance(func, PrimFunc):
            raise TypeError(f"module entry `{key}` is a {type(func).__name__}, not a PrimFunc")
        checked += checked_writes(func)
    return VerifyReport(tuple(checked))


def checked_writes(func: PrimFunc) -> tuple[CheckedWrite, ...]:
    """Verify `func` (raising as `verify` does) and return its checked writes, in program order
    (remembered per function object, as `verify_cached`)."""
    hit = _CHECKED.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    verifier = _FuncVerifier(func)
    verifier.run()
    out = tuple(verifier.checked)
    if len(_CHECKED) >= _VERIFIED_MAX:
        _CHECKED.pop(next(iter(_CHECKED)))
    _CHECKED[id(func)] = (func, out)
    return out


_CHECKED: dict[int, tuple[PrimFunc, tuple[CheckedWrite, ...]]] = {}


# Functions verified already, by identity (IR is immutable, so a function once valid stays valid):
# entry points verify what they are given, and a repeated call costs a dictionary lookup.
_VERIFIED: dict[int, PrimFunc] = {}
_VERIFIED_MAX = 4096


def verify_cached(func_or_mod: PrimFunc | IRModule) -> None:
    """`verify`, remembered per function object: what every public entry point (`sp.interpret`,
    the passes, `sp.Schedule`, `sp.build`, `sp.compile`) runs on its input, as TVM verifies
    well-formedness on entry."""
    funcs = [func_or_mod] if isinstance(func_or_mod, PrimFunc) else None
    if funcs is None:
        if not isinstance(func_or_mod, IRModule):
            raise TypeError(f"verify expects a PrimFunc or an IRModule, got {type(func_or_mod).__name__}")
        funcs = list(func_or_mod.functions.values())
    for func in funcs:
        if _VERIFIED.get(id(func)) is func:
            continue
        verify(func)
        if len(_VERIFIED) >= _VERIFIED_MAX:
            _VERIFIED.pop(next(iter(_VERIFIED)))
        _VERIFIED[id(func)] = func


_STRUCTURE = {
    # field -> True: required, False: forbidden, None: optional
    DENSE_FIXED: {"indptr": False, "indices": False, "nnz": False, "nnz_cols": False},
    DENSE_VARIABLE: {"indptr": True, "indices": False, "nnz": True, "nnz_cols": False},
    SPARSE_FIXED: {"indptr": False, "indices": True, "nnz": None, "nnz_cols": True},
    SPARSE_VARIABLE: {"indptr": True, "indices": True, "nnz": True, "nnz_cols": False},
}

_LOOP, _ITER, _BLOCK, _PARAM, _LET = "loop variable", "iterator", "block iterator", "parameter", "local value"


class _FuncVerifier:
    """One pass over a function. Scope state is saved and restored around binding constructs."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.fname = func.name
        self.stage = 1
        self.all_axes: set[Axis] = set()
        self.structure: dict[Var, tuple[str, Axis]] = {}
        # Variables: in scope now (var -> what binds it), ever bound (SSA), out of reach with a reason.
        self.scope: dict[Var, str] = {}
        self.bound: set[Var] = set()
        self.unreachable: dict[Var, tuple[type[VerifyError], str]] = {}
        # Buffers: in scope now, ever declared.
        self.buffers: set = set()
        self.declared: set = set()
        self.block_names: set[str] = set()
        self.iter_names: set[str] = set()
        self.iter_axes: list[set[Axis]] = []
        # Iterators of the enclosing sparse iterations: axis -> its iterator, and iterator -> (the
        # stored axis it walks, the iterator that gives it its row), for `check_stored_write`.
        self.axis_iters: dict[Axis, Var] = {}
        self.iter_rows: dict[Var, tuple[Axis, Var | None]] = {}
        self.reductions: list[tuple[str, frozenset[Var]]] = []
        self.init_spatials: list[tuple[str, frozenset[Var]]] = []
        self.threads: list[str] = []
        self.checked: list[CheckedWrite] = []

    def fail(self, cls: type[VerifyError], message: str) -> NoReturn:
        _fail(cls, self.fname, message)

    def run(self) -> None:
        self.check_stage_attr()
        self.check_params()
        self.check_axes()
        self.check_function_buffers()
        self.stmt(self.func.body)
        self.check_assembled()

    # -- function header ----------------------------------------------------------------------

    def check_stage_attr(self) -> None:
        stage = self.func.attrs.get("stage", 1)
        if isinstance(stage, bool) or stage not in (1, 2, 3):
            self.fail(StageError, f'attrs["stage"] is {stage!r}; expected 1, 2 or 3')
        self.stage = int(stage)

    def check_params(self) -> None:
        names: set[str] = set()
        for p in self.func.params:
            if not isinstance(p, Var):
                self.fail(UndefinedVariableError, f"parameter {p!r} is not a Var")
            if p in self.bound:
                self.fail(RebindError, f"parameter `{p.name}` appears twice")
            if p.name in names:
                self.fail(RebindError, f"two parameters are named `{p.name}`")
            if p.dtype != "handle" and p.dtype not in dt.SCALAR_DTYPES:
                self.fail(DtypeError, f"parameter `{p.name}` has dtype {p.dtype}")
            names.add(p.name)
            self.bind(p, _PARAM)

    def check_axes(self) -> None:
        axes = self.func.axes
        for ax in axes:
            if not isinstance(ax, Axis):
                self.fail(AxisStructureError, f"{ax!r} in func.axes is not an Axis")
            if ax.kind not in AXIS_KINDS:
                self.fail(AxisStructureError, f"axis `{ax.name}` has unknown kind {ax.kind!r}")
        self.all_axes = set(axes)
        declared: set[Axis] = set()
        for ax in axes:
            if ax in declared:
                self.fail(AxisForestError, f"axis `{ax.name}` is declared twice")
            self.check_axis_forest(ax, declared)
            self.check_axis_structure(ax)
            self.check_axis_extents(ax)
            declared.add(ax)
        self.check_shared_structure()

    def check_axis_forest(self, ax: Axis, declared: set[Axis]) -> None:
        if ax.kind == DENSE_FIXED and ax.parent is not None:
            self.fail(
                AxisForestError,
                f"axis `{ax.name}` is dense_fixed but has parent `{_name(ax.parent)}`; dense_fixed axes are roots",
            )
        if ax.kind != DENSE_FIXED and ax.parent is None:
            self.fail(
                AxisForestError,
                f"axis `{ax.name}` is {ax.kind} but has no parent; only dense_fixed axes are roots",
            )
        if ax.parent is None:
            return
        if not isinstance(ax.parent, Axis):
            self.fail(AxisForestError, f"the parent of axis `{ax.name}` is a {type(ax.parent).__name__}")
        _ancestors(ax, self.fname)
        if ax.parent not in self.all_axes:
            self.fail(UndeclaredAxisError, f"parent `{ax.parent.name}` of axis `{ax.name}` is not declared")
        if ax.parent not in declared:
            self.fail(AxisForestError, f"parent `{ax.parent.name}` of axis `{ax.name}` is declared after it")

    def check_axis_structure(self, ax: Axis) -> None:
        for field, rule in _STRUCTURE[ax.kind].items():
            value = getattr(ax, field)
            if rule is True and value is None:
                self.fail(AxisStructureError, f"axis `{ax.name}` is {ax.kind} but has no {field}")
            if rule is False and value is not None:
                self.fail(AxisStructureError, f"axis `{ax.name}` is {ax.kind} but has {field} {_show(value)}")
        for field in ("indptr", "indices"):
            h = getattr(ax, field)
            if h is None:
                continue
            if not isinstance(h, Var) or h not in self.scope or h.dtype != "handle":
                self.fail(
                    AxisStructureError,
                    f"{field} {_show(h)} of axis `{ax.name}` is not a handle parameter of the function",
                )
        if ax.idtype not in dt.INDEX_DTYPES:
            self.fail(AxisStructureError, f"axis `{ax.name}` has idtype {ax.idtype}; expected int32 or int64")

    def check_assembled(self) -> None:
        """The rules of `AssembleError` (module docstring)."""
        assembled = [a for a in self.func.axes if a.assemble]
        if not assembled:
            return
        for ax in assembled:
            if ax.kind != SPARSE_VARIABLE or ax.parent.kind != DENSE_FIXED or ax.parent.parent is not None:
                self.fail(
                    AssembleError,
                    f"axis `{ax.name}` is declared `assemble=True`: expected a sparse_variable level under a "
                    f"dense_fixed root, but got a {ax.kind} level under `{_name(ax.parent)}`",
                )
        outputs = [b for b in self.func.buffers if isinstance(b, SparseBuffer) and any(a.assemble for a in b.axes)]
        stores = [n for n in walk(self.func.body) if isinstance(n, BufferStore | AtomicAdd)]
        for buf in outputs:
            if not buf.axes[-1].assemble:
                self.fail(AssembleError, f"buffer `{buf.name}`: an assembled axis must be its last axis")
            if buf.data is None:
                self.fail(AssembleError, f"buffer `{buf.name}` over an assembled axis is not matched to a parameter")
            own = [s for s in stores if s.buffer is buf]
            if not own:
                self.fail(
                    AssembleError,
                    f"buffer `{buf.name}` is over the assembled axis `{buf.axes[-1].name}` but the function never "
                    "writes it: `assemble=True` declares an output whose structure the kernel builds, not an input",
                )
            updates = {BufferLoad(s.buffer, s.indices) for s in own}
            for node in walk(self.func.body):
                if isinstance(node, BufferLoad) and node.buffer is buf and node not in updates:
                    access = f"{buf.name}[{', '.join(_script(x) for x in node.indices)}]"
                    self.fail(
                        AssembleError,
                        f"`{access}` reads the assembled output `{buf.name}` other than in an update of the element "
                        "written: its structure is not known until the kernel ends",
                    )

    def check_axis_extents(self, ax: Axis) -> None:
        for field in ("length", "nnz", "nnz_cols"):
            e = getattr(ax, field)
            if e is not None:
                self.extent(e, f"{field} of axis `{ax.name}`")

    def check_shared_structure(self) -> None:
        for ax in self.func.axes:
            for role in ("indptr", "indices"):
                h = getattr(ax, role)
                if h is None:
                    continue
                prev = self.structure.setdefault(h, (role, ax))
                prole, pax = prev
                if prole != role:
                    self.fail(
                        AxisStructureError,
                        f"handle `{h.name}` is the {prole} of axis `{pax.name}` and the {role} of axis `{ax.name}`",
                    )
                if pax.idtype != ax.idtype:
                    self.fail(
                        AxisStructureError,
                        f"axes `{pax.name}` and `{ax.name}` share {role} `{h.name}` but have idtypes "
                        f"{pax.idtype} and {ax.idtype}",
                    )

    def check_function_buffers(self) -> None:
        owner: dict[Var, object] = {}
        for b in self.func.buffers:
            self.declare_buffer(b, allocated=False)
            self.buffers.add(b)
            if b.data is None:
                continue
            if b.data in owner:
                self.fail(
                    BufferDeclarationError,
                    f"buffers `{_name(owner[b.data])}` and `{b.name}` are both matched to `{b.data.name}`",
                )
            owner[b.data] = b
            self.check_structure_view(b)

    def check_structure_view(self, b) -> None:
        if b.data not in self.structure:
            return
        role, ax = self.structure[b.data]
        if self.stage == 1:
            self.fail(
                AxisStructureError,
                f"handle `{b.data.name}` is the {role} of axis `{ax.name}` and the data of buffer `{b.name}`",
            )
        if b.dtype != ax.idtype:
            self.fail(
                AxisStructureError,
                f"buffer `{b.name}` views the {role} of axis `{ax.name}` ({ax.idtype}) but has dtype {b.dtype}",
            )

    # -- buffers --------------------------------------------------------------------------------

    def declare_buffer(self, b, *, allocated: bool) -> None:
        if not isinstance(b, SparseBuffer | FlatBuffer):
            self.fail(BufferDeclarationError, f"{b!r} is not a buffer")
        if b in self.declared:
            self.fail(BufferDeclarationError, f"buffer `{b.name}` is declared twice")
        if b.dtype not in dt.SCALAR_DTYPES:
            self.fail(DtypeError, f"buffer `{b.name}` has dtype {b.dtype}; expected a scalar dtype")
        if b.scope not in SCOPES:
            self.fail(ScopeError, f"buffer `{b.name}` has scope {b.scope!r}; expected one of {SCOPES}")
        if allocated:
            self.check_allocated(b)
        elif b.data is not None:
            self.check_matched(b)
        if isinstance(b, SparseBuffer):
            self.check_sparse_buffer(b)
        else:
            self.check_flat_buffer(b)
        self.declared.add(b)

    def check_allocated(self, b) -> None:
        if not isinstance(b, FlatBuffer):
            self.fail(BufferDeclarationError, f"allocated buffer `{b.name}` must be a FlatBuffer")
        if b.data is not None:
            self.fail(
                BufferDeclarationError,
                f"allocated buffer `{b.name}` must have no data handle, but has `{_name(b.data)}`",
            )

    def check_matched(self, b) -> None:
        if not isinstance(b.data, Var) or self.scope.get(b.data) != _PARAM or b.data.dtype != "handle":
            self.fail(
                BufferDeclarationError,
                f"data {_show(b.data)} of buffer `{b.name}` is not a handle parameter of the function",
            )
        if b.scope != "global":
            self.fail(
                ScopeError,
                f"buffer `{b.name}` is matched to parameter `{b.data.name}` so it must be global, "
                f"but has scope {b.scope!r}",
            )

    def check_sparse_buffer(self, b: SparseBuffer) -> None:
        v = b.default_value
        fits = isinstance(v, int | float) and (dt.is_float(b.dtype) or float(v).is_integer())
        if not fits:
            self.fail(DtypeError, f"buffer `{b.name}` has default value {v!r}, which is not a {b.dtype}")
        for ax in b.axes:
            if isinstance(ax, Axis) and ax not in self.all_axes:
                self.fail(UndeclaredAxisError, f"axis `{ax.name}` of buffer `{b.name}` is not declared")
        check_buffer_axes(b.name, b.axes, func=self.fname)
        if b.extra_storage is not None:
            self.check_extra_storage(b)

    def check_extra_storage(self, b: SparseBuffer) -> None:
        """Extra elements go after one-dimensional storage: the axes end with their last sparse or
        variable level, or are one dense level (else the extra elements have no shape)."""
        self.extent(b.extra_storage, f"extra_storage of buffer `{b.name}`")
        last = max((k for k, a in enumerate(b.axes) if a.kind != DENSE_FIXED), default=None)
        trailing = b.axes[last + 1 :] if last is not None else b.axes[1:]
        if trailing:
            self.fail(
                BufferDeclarationError,
                f"buffer `{b.name}` has extra_storage, but its storage is not one-dimensional (dense "
                f"axis `{trailing[0].name}` follows its last level); extra_storage extends an array over its "
                "axes' positions, such as an indptr over `[I]`",
            )

    def check_flat_buffer(self, b: FlatBuffer) -> None:
        for d, e in enumerate(b.shape):
            self.extent(e, f"dimension {d} of buffer `{b.name}`")
        layout = b.layout
        m2m = tuple(layout.minor_to_major)
        if sorted(m2m) != list(range(len(b.shape))):
            self.fail(
                BufferLayoutError,
                f"buffer `{b.name}` has rank {len(b.shape)} but minor_to_major {m2m} is not a permutation "
                f"of its dimensions",
            )
        for tile in layout.tiles:
            ok = 0 < len(tile) <= len(b.shape) and all(isinstance(t, int) and t > 0 for t in tile)
            if not ok:
                self.fail(BufferLayoutError, f"buffer `{b.name}` has tile {tile!r}; expected positive sizes")
        if not isinstance(layout.tail_padding_alignment, int) or layout.tail_padding_alignment < 1:
            self.fail(
                BufferLayoutError,
                f"buffer `{b.name}` has tail_padding_alignment {layout.tail_padding_alignment!r}",
            )

    def access(self, buffer, indices: tuple, what: str) -> None:
        """A load, store or region of `buffer` with `indices` (expressions)."""
        if buffer not in self.buffers:
            reason = "outside the scope that allocates it" if buffer in self.declared else "but not declared"
            self.fail(UndeclaredBufferError, f"buffer `{_name(buffer)}` is {what} {reason}")
        if self.stage == 3 and not isinstance(buffer, FlatBuffer):
            self.fail(
                StageError,
                f"sparse buffer `{buffer.name}` is {what} in a Stage III function; lower_sparse_buffer "
                "flattens every buffer",
            )
        if indices is None:  # the whole storage (a search intrinsic's buffer argument)
            return
        n, ndim = len(indices), buffer.ndim
        if n != ndim and not (self.stage == 3 and n == 1):
            unit = "axes" if isinstance(buffer, SparseBuffer) else "dimensions"
            self.fail(BufferArityError, f"buffer `{buffer.name}` has {ndim} {unit} but is {what} with {n} indices")

    def index(self, e: PrimExpr, where: str) -> None:
        self.expr(e)
        if not dt.is_int(e.dtype):
            self.fail(DtypeError, f"{where} has dtype {e.dtype}; expected an integer")

    def extent(self, e: PrimExpr, where: str) -> None:
        self.index(e, where)
        value = _const_int(e)
        if value is not None and value < 0:
            self.fail(LoopExtentError, f"{where} is {value}; extents must be non-negative")

    # -- variables ------------------------------------------------------------------------------

    def bind(self, v: Var, what: str) -> None:
        if v in self.bound:
            self.fail(RebindError, f"{what} `{v.name}` is bound twice")
        self.bound.add(v)
        self.scope[v] = what

    def bind_int(self, v: object, what: str) -> None:
        if not isinstance(v, Var):
            self.fail(UndefinedVariableError, f"{what} {v!r} is not a Var")
        self.bind(v, what)
        if not dt.is_int(v.dtype):
            self.fail(DtypeError, f"{what} `{v.name}` has dtype {v.dtype}; expected an integer")

    def use(self, v: Var) -> None:
        if v in self.scope:
            return
        if v in self.unreachable:
            cls, message = self.unreachable[v]
            self.fail(cls, message)
        if v in self.bound:
            self.fail(UndefinedVariableError, f"variable `{v.name}` is used outside the scope that binds it")
        self.fail(UndefinedVariableError, f"variable `{v.name}` is not defined")

    def hide(self, vars_: Iterable[Var], cls: type[VerifyError], message: Callable[[Var], str]) -> None:
        for v in vars_:
            self.scope.pop(v, None)
            self.unreachable[v] = (cls, message(v))

    def save(self) -> tuple:
        return (
            dict(self.scope),
            dict(self.unreachable),
            set(self.buffers),
            list(self.reductions),
            list(self.threads),
            list(self.init_spatials),
            dict(self.axis_iters),
        )

    def restore(self, state: tuple) -> None:
        (
            self.scope,
            self.unreachable,
            self.buffers,
            self.reductions,
            self.threads,
            self.init_spatials,
            self.axis_iters,
        ) = state

    # -- expressions ----------------------------------------------------------------------------

    def expr(self, e: PrimExpr) -> None:
        rule = _EXPR_RULES.get(type(e))
        if rule is not None:
            rule(self, e)
            return
        if not isinstance(e, PrimExpr):
            self.fail(DtypeError, f"{e!r} is not an expression")
        for c in children(e):
            self.node(c)

    def var(self, v: Var) -> None:
        self.use(v)
        if v.dtype == "handle":
            self.fail(DtypeError, f"handle `{v.name}` is used as a value")

    def int_imm(self, e: IntImm) -> None:
        if e.dtype == "bool" and e.value not in (0, 1):
            self.fail(DtypeError, f"bool constant has value {e.value}")
        if not dt.is_int(e.dtype) and e.dtype != "bool":
            self.fail(DtypeError, f"integer constant {e.value} has dtype {e.dtype}")
        if dt.is_int(e.dtype):
            info = np.iinfo(e.dtype)
            if not info.min <= e.value <= info.max:
                self.fail(DtypeError, f"integer constant {e.value} does not fit in {e.dtype}")

    def float_imm(self, e: FloatImm) -> None:
        if not dt.is_float(e.dtype):
            self.fail(DtypeError, f"float constant {e.value} has dtype {e.dtype}")

    def bin_op(self, e: BinOp) -> None:
        self.expr(e.a)
        self.expr(e.b)
        a, b = e.a.dtype, e.b.dtype
        if e.op not in BIN_OPS:
            self.fail(DtypeError, f"unknown binary operator {e.op!r}")
        if a != b:
            self.fail(DtypeError, f"operands of `{e.op}` have dtypes {a} and {b}; insert a cast")
        if e.op in LOGIC_OPS and a != "bool":
            self.fail(DtypeError, f"operands of `{e.op}` have dtype {a}; expected bool")
        if e.op in ARITH_OPS and not (dt.is_int(a) or dt.is_float(a)):
            self.fail(DtypeError, f"operands of `{e.op}` have dtype {a}; expected a number")
        if e.op == "/" and dt.is_int(a):
            self.fail(DtypeError, f"`/` on {a} operands; use `//` for integer division")
        if e.op in CMP_OPS and a not in dt.SCALAR_DTYPES:
            self.fail(DtypeError, f"operands of `{e.op}` have dtype {a}")

    def unary_op(self, e: UnaryOp) -> None:
        self.expr(e.a)
        if e.op == "not" and e.a.dtype != "bool":
            self.fail(DtypeError, f"operand of `not` has dtype {e.a.dtype}; expected bool")
        if e.op == "-" and not (dt.is_int(e.a.dtype) or dt.is_float(e.a.dtype)):
            self.fail(DtypeError, f"operand of unary `-` has dtype {e.a.dtype}; expected a number")
        if e.op not in ("-", "not"):
            self.fail(DtypeError, f"unknown unary operator {e.op!r}")

    def select(self, e: Select) -> None:
        self.cond(e.cond, "select condition")
        self.expr(e.true_value)
        self.expr(e.false_value)
        if e.true_value.dtype != e.false_value.dtype:
            self.fail(
                DtypeError,
                f"select branches have dtypes {e.true_value.dtype} and {e.false_value.dtype}",
            )

    def cast(self, e: Cast) -> None:
        self.expr(e.value)
        if e.dtype not in dt.SCALAR_DTYPES or e.value.dtype not in dt.SCALAR_DTYPES:
            self.fail(DtypeError, f"cast from {e.value.dtype} to {e.dtype}")

    def call(self, e: Call) -> None:
        intrin = INTRINSICS.get(e.op)
        if intrin is None:
            self.fail(DtypeError, f"call of unknown intrinsic `{e.op}`")
        for k, a in enumerate(e.args):
            if k in intrin.buffer_args:
                if not isinstance(a, SparseBuffer | FlatBuffer):
                    self.fail(DtypeError, f"argument {k} of `{e.op}` must be a buffer")
                self.access(a, None, "searched")
            else:
                self.expr(a)
        if intrin.nargs is not None and len(e.args) != intrin.nargs:
            self.fail(DtypeError, f"intrinsic `{e.op}` takes {intrin.nargs} arguments, got {len(e.args)}")
        expected = intrin.result
        if expected == "same":
            expected = e.args[0].dtype if e.args else e.dtype
        elif expected.startswith("arg"):
            expected = e.args[int(expected[3:])].dtype
        if e.dtype != expected:
            self.fail(DtypeError, f"call of `{e.op}` has dtype {e.dtype}; expected {expected}")

    def buffer_load(self, e: BufferLoad) -> None:
        self.access(e.buffer, e.indices, "loaded")
        for i, x in enumerate(e.indices):
            self.index(x, f"index {i} of `{e.buffer.name}`")

    def cond(self, e: PrimExpr, where: str) -> None:
        self.expr(e)
        if e.dtype != "bool":
            self.fail(DtypeError, f"{where} has dtype {e.dtype}; expected bool")

    # -- statements -----------------------------------------------------------------------------

    def node(self, n: Node) -> None:
        if isinstance(n, Stmt):
            self.stmt(n)
        elif isinstance(n, PrimExpr):
            self.expr(n)

    def stmt(self, s: Stmt) -> None:
        rule = _STMT_RULES.get(type(s))
        if rule is not None:
            rule(self, s)
            return
        if not isinstance(s, Stmt):
            self.fail(StageError, f"{s!r} is not a statement")
        for c in children(s):
            self.node(c)

    def seq_stmt(self, s: SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    def evaluate(self, s: Evaluate) -> None:
        self.expr(s.value)

    def if_then_else(self, s: IfThenElse) -> None:
        self.cond(s.condition, "if condition")
        self.stmt(s.then_case)
        if s.else_case is not None:
            self.stmt(s.else_case)

    def store(self, s: BufferStore | AtomicAdd) -> None:
        what = "stored" if isinstance(s, BufferStore) else "atomically added to"
        self.access(s.buffer, s.indices, what)
        if self.stage == 1 and isinstance(s.buffer, SparseBuffer):
            self.check_stored_write(s)
        for i, x in enumerate(s.indices):
            self.index(x, f"index {i} of `{s.buffer.name}`")
        self.expr(s.value)
        if s.value.dtype != s.buffer.dtype:
            kind = "store" if isinstance(s, BufferStore) else "atomic add"
            self.fail(
                DtypeError,
                f"{kind} of a {s.value.dtype} value into {s.buffer.dtype} buffer `{s.buffer.name}`",
            )
        if isinstance(s, AtomicAdd) and s.buffer.dtype == "bool":
            self.fail(DtypeError, f"atomic add to bool buffer `{s.buffer.name}`")
        used = _vars_in(s.indices)
        for owner, reduce_vars in self.reductions:
            bad = used & reduce_vars
            if bad:
                v = min(bad, key=lambda x: x.name)
                self.fail(
                    ReductionWriteError,
                    f"`{owner}` writes buffer `{s.buffer.name}` at an index that uses its reduction "
                    f"iterator `{v.name}`",
                )
        for owner, spatial_vars in self.init_spatials:
            missed = spatial_vars - used
            if missed:
                v = min(missed, key=lambda x: x.name)
                self.fail(
                    InitWriteError,
                    f"`{owner}` has an init but writes buffer `{s.buffer.name}` at an index that does not use "
                    f"its spatial iterator `{v.name}`: several spatial points share one element, and each would "
                    "initialise it again, zeroing what the points before it accumulated; initialise "
                    f"`{s.buffer.name}` in a sparse iteration of its own, before `{owner}`, over the indices it is "
                    f"written at, and remove the `T.init()` of `{owner}`",
                )

    def check_stored_write(self, s: BufferStore | AtomicAdd) -> None:
        """Every sparse or variable axis of the written buffer is indexed by an iterator that walks
        that axis's storage (the axis itself, or one declared over the same structure arrays, see
        `_same_storage`), and its parent's position by the iterator that gives that iterator its
        row: then the coordinate is one the structure stores and the write is unchecked. Anything
        else (an iterator of another axis, an expression, a row from elsewhere) may name a
        coordinate with no storage: the write is *checked* (recorded in `self.checked`), lowered to
        a search in the buffer's structure whose miss is an `InputError` in every engine."""
        buf = s.buffer
        if isinstance(buf, SparseBuffer) and any(a.assemble for a in buf.axes):
            return  # an assembled output's writes make its structure (`check_assembled`)
        what = "a write to" if isinstance(s, BufferStore) else "an atomic add to"
        access = f"{buf.name}[{', '.join(_script(x) for x in s.indices)}]"
        for pos, axis in enumerate(buf.axes):
            if axis.kind == DENSE_FIXED:
                continue  # a root: every coordinate in range is stored
            index = s.indices[pos]
            walked, row = self.iter_rows.get(index, (None, None)) if isinstance(index, Var) else (None, None)
            if walked is None or not _same_storage(walked, axis):
                shown = _script(index)
                reason = (
                    f"{what} `{buf.name}` at index {pos} uses `{shown}`: expected an iterator of `{buf.name}`'s "
                    f"{axis.kind} axis `{axis.name}`, but `{shown}` {_walks(index, walked, axis)}, so `{access}` may "
                    f"name a coordinate `{axis.name}` does not store"
                )
                self.checked.append(CheckedWrite(self.iteration_name(), buf.name, access, pos, reason, s))
                return
            parent_index = s.indices[pos - 1]
            if parent_index is not row:
                shown = _script(parent_index)
                reason = (
                    f"{what} `{buf.name}` at index {pos - 1} uses `{shown}`: expected `{row.name}`, the row in which "
                    f"`{index.name}` walks `{axis.name}`, but got `{shown}`; another row may not store that "
                    "coordinate"
                )
                self.checked.append(CheckedWrite(self.iteration_name(), buf.name, access, pos - 1, reason, s))
                return

    def iteration_name(self) -> str:
        return self.reductions[-1][0] if self.reductions else ""

    def let_stmt(self, s: LetStmt) -> None:
        self.expr(s.value)
        if s.value.dtype != s.var.dtype:
            self.fail(DtypeError, f"local `{s.var.name}` is {s.var.dtype} but bound to a {s.value.dtype} value")
        state = self.save()
        self.bind(s.var, _LET)
        self.stmt(s.body)
        self.restore(state)
        self.scope.pop(s.var, None)

    def allocate(self, s: Allocate) -> None:
        state = self.save()
        self.declare_buffer(s.buffer, allocated=True)
        self.buffers.add(s.buffer)
        self.stmt(s.body)
        self.restore(state)

    def for_(self, s: For) -> None:
        if self.stage == 1:
            self.fail(StageError, f"Stage I function has loop `{_name(s.loop_var)}`; use sparse iterations")
        if not isinstance(s.loop_var, Var):
            self.fail(UndefinedVariableError, f"loop variable {s.loop_var!r} is not a Var")
        name = s.loop_var.name
        self.index(s.min, f"min of loop `{name}`")
        self.extent(s.extent, f"extent of loop `{name}`")
        self.bind_int(s.loop_var, _LOOP)
        for part, e in (("min", s.min), ("extent", s.extent)):
            if e.dtype != s.loop_var.dtype:
                self.fail(
                    DtypeError,
                    f"{part} of loop `{name}` has dtype {e.dtype} but the loop variable is {s.loop_var.dtype}",
                )
        if s.kind not in LOOP_KINDS:
            self.fail(LoopExtentError, f"loop `{name}` has kind {s.kind!r}; expected one of {LOOP_KINDS}")
        self.check_thread(s)
        state = self.save()
        if s.thread is not None:
            self.threads.append(s.thread)
        self.stmt(s.body)
        self.restore(state)
        self.scope.pop(s.loop_var, None)

    def while_(self, s: While) -> None:
        if self.stage == 1:
            self.fail(
                WhileLoopError,
                "Stage I function has a `while` loop; Stage I iterates axes with T.sp_iter: write the loop in a "
                "Stage II or III script (loops and blocks), or search a level with T.lower_bound",
            )
        self.cond(s.condition, "while condition")
        read = {n.buffer for n in walk(s.condition) if isinstance(n, BufferLoad)}
        written = {n.buffer for n in walk(s.body) if isinstance(n, BufferStore | AtomicAdd)}
        if not read & written:
            names = ", ".join(sorted(f"`{b.name}`" for b in read))
            reads = f"reads {names}, which the loop's body does not write" if read else "reads no buffer"
            self.fail(
                WhileLoopError,
                f"`while {_script(s.condition)}`: the condition {reads}, so it is the same before every "
                "iteration and the loop runs never or forever; keep the "
                'loop\'s state in a buffer (`low = T.alloc_buffer([1], "int32", scope="local")`) that the '
                "body updates and the condition reads",
            )
        self.stmt(s.body)

    def check_thread(self, s: For) -> None:
        name = s.loop_var.name
        if s.kind != "thread_binding":
            if s.thread is not None:
                self.fail(ThreadBindingError, f"{s.kind} loop `{name}` has thread tag {s.thread!r}")
            return
        if s.thread not in THREAD_TAGS:
            self.fail(
                ThreadBindingError,
                f"thread_binding loop `{name}` has tag {s.thread!r}; expected one of {THREAD_TAGS}",
            )
        if _const_int(s.min) != 0:
            self.fail(ThreadBindingError, f"thread_binding loop `{name}` must start at 0")
        if s.thread != "vthread" and s.thread in self.threads:
            self.fail(ThreadBindingError, f"loop `{name}` binds {s.thread} inside a loop bound to it")

    def block_(self, b: Block) -> None:
        if self.stage == 1:
            self.fail(StageError, f"Stage I function has block `{b.name}`; use sparse iterations")
        if b.name in self.block_names:
            self.fail(BlockError, f"two blocks are named `{b.name}`")
        self.block_names.add(b.name)
        # Extents, bindings and the predicate are evaluated outside the block.
        outside = self.save()
        own = [iv.var for iv in b.iter_vars if isinstance(iv, IterVar) and isinstance(iv.var, Var)]
        self.hide(
            [v for v in own if v not in self.bound],
            UndefinedVariableError,
            lambda v: (
                f"block iterator `{v.name}` is used in the iterators or predicate of its own block "
                f"`{b.name}`, which are evaluated outside it"
            ),
        )
        for iv in b.iter_vars:
            self.check_iter_var(b, iv)
        if b.predicate is not None:
            self.cond(b.predicate, f"predicate of block `{b.name}`")
        self.restore(outside)
        reduce_vars = frozenset(iv.var for iv in b.iter_vars if iv.kind == "R")
        if b.init is not None and not reduce_vars:
            self.fail(BlockError, f"block `{b.name}` has an init but no reduction iterator")
        for iv in b.iter_vars:
            self.bind_int(iv.var, _BLOCK)

        state = self.save()
        outer_loops = [v for v, what in self.scope.items() if what == _LOOP]
        self.hide(
            outer_loops,
            BlockIsolationError,
            lambda v: (
                f"block `{b.name}` uses loop variable `{v.name}` of a loop outside it; bind it to a block iterator"
            ),
        )
        self.reductions = [(b.name, reduce_vars)] if b.init is not None else []
        for buf in b.alloc_buffers:
            self.declare_buffer(buf, allocated=True)
            self.buffers.add(buf)
        for kind, regions in (("read", b.reads), ("written", b.writes)):
            for r in regions:
                self.region(r, f"{kind} by block `{b.name}`")
        if b.init is not None:
            inner = self.save()
            self.hide(
                reduce_vars,
                UndefinedVariableError,
                lambda v: f"the init of block `{b.name}` uses its reduction iterator `{v.name}`",
            )
            self.stmt(b.init)
            self.restore(inner)
        self.stmt(b.body)
        self.restore(state)
        for iv in b.iter_vars:
            self.scope.pop(iv.var, None)

    def check_iter_var(self, b: Block, iv: IterVar) -> None:
        if not isinstance(iv, IterVar):
            self.fail(BlockError, f"block `{b.name}` has iterator {iv!r} that is not an IterVar")
        name = _name(iv.var)
        if iv.kind not in ("S", "R"):
            self.fail(BlockError, f'iterator `{name}` of block `{b.name}` has kind {iv.kind!r}; expected "S" or "R"')
        self.extent(iv.extent, f"extent of block iterator `{name}`")
        self.index(iv.value, f"binding of block iterator `{name}`")
        for part, e in (("extent", iv.extent), ("binding", iv.value)):
            if isinstance(iv.var, Var) and e.dtype != iv.var.dtype:
                self.fail(
                    DtypeError,
                    f"{part} of block iterator `{name}` has dtype {e.dtype} but the iterator is {iv.var.dtype}",
                )

    def region(self, r: BufferRegion, what: str) -> None:
        if not isinstance(r, BufferRegion):
            self.fail(BlockError, f"{r!r} is not a BufferRegion")
        self.access(r.buffer, r.region, what)
        for d, rng in enumerate(r.region):
            self.index(rng.min, f"region min {d} of `{r.buffer.name}`")
            self.extent(rng.extent, f"region extent {d} of `{r.buffer.name}`")

    def sparse_iteration(self, s: SparseIteration) -> None:
        if self.stage != 1:
            self.fail(
                StageError,
                f"Stage {self.stage} function has sparse iteration `{s.name}`; lower_sparse_iter removes them",
            )
        if s.name in self.iter_names:
            self.fail(SparseIterationError, f"two sparse iterations are named `{s.name}`")
        self.iter_names.add(s.name)
        for ia in s.axes:
            for ax in _axes_of(ia):
                if ax not in self.all_axes:
                    self.fail(
                        UndeclaredAxisError,
                        f"sparse iteration `{s.name}` uses axis `{_name(ax)}`, which is not declared",
                    )
        bound_axes = set().union(*self.iter_axes)
        check_iteration_axes(
            s.name,
            s.axes,
            s.kinds,
            len(s.iter_vars),
            bound_axes,
            has_init=s.init is not None,
            func=self.fname,
        )
        for v in s.iter_vars:
            self.bind_int(v, _ITER)
        reduce_vars = frozenset(v for v, k in zip(s.iter_vars, s.kinds) if k == "R")

        state = self.save()
        for ia, v in zip(s.axes, s.iter_vars):
            parent = iteration_parent(ia)
            self.iter_rows[v] = (base_axis(ia), self.axis_iters.get(parent) if parent is not None else None)
            self.axis_iters[base_axis(ia)] = v
        self.iter_axes.append({base_axis(ia) for ia in s.axes})
        self.reductions.append((s.name, reduce_vars))
        if s.init is not None:
            spatial = frozenset(v for v, k in zip(s.iter_vars, s.kinds) if k == "S")
            self.init_spatials.append((s.name, spatial))
            inner = self.save()
            self.hide(
                reduce_vars,
                UndefinedVariableError,
                lambda v: f"the init of sparse iteration `{s.name}` uses its reduction iterator `{v.name}`",
            )
            self.stmt(s.init)
            self.restore(inner)
        self.stmt(s.body)
        self.iter_axes.pop()
        self.restore(state)
        for v in s.iter_vars:
            self.scope.pop(v, None)


def _axes_of(ia: IterAxis) -> list[Axis]:
    if isinstance(ia, FusedAxis):
        return list(ia.group)
    if isinstance(ia, AttachedAxis):
        return [ia.axis, ia.parent]
    return [ia]


def _same_storage(walked: Axis, axis: Axis) -> bool:
    """Whether an iterator of `walked` names, under the same parent positions, only coordinates
    that `axis` stores: `axis` itself, or an axis of the same kind declared over the same structure
    arrays (and `nnz_cols`) under a parent of the same storage. Dense-fixed roots agree, since
    their positions are their coordinates. Kernels find a coordinate of another sparse axis by a
    binary search over its row, so both must be declared sorted."""
    if walked is axis:
        return True
    if walked.kind != axis.kind:
        return False
    if axis.kind == DENSE_FIXED:
        return True
    if not _same_arrays(walked, axis):
        return False
    if axis.kind != DENSE_VARIABLE and not (walked.sorted and axis.sorted):
        return False
    return _same_storage(walked.parent, axis.parent)


def _same_arrays(a: Axis, b: Axis) -> bool:
    return a.indptr is b.indptr and a.indices is b.indices and a.nnz_cols == b.nnz_cols


def _walks(index: PrimExpr, walked: Axis | None, axis: Axis) -> str:
    """What the index of a rejected write is, for the message."""
    if walked is None:
        return "is not an iterator of a sparse iteration" if isinstance(index, Var) else "is an expression"
    unsorted = not (walked.sorted and axis.sorted)
    if unsorted and walked.kind == axis.kind and walked.kind != DENSE_VARIABLE and _same_arrays(walked, axis):
        return (
            f"iterates axis `{walked.name}`, declared over the same structure arrays but not sorted (a kernel "
            f"finds a coordinate of `{axis.name}` by a binary search over its sorted row)"
        )
    return f"iterates axis `{walked.name}`"


def _script(e: PrimExpr) -> str:
    """An index as the script writes it (`(i + 1) % m`), for messages."""
    return ScriptPrinter().expr(e)


def _show(value: object) -> str:
    if isinstance(value, Var):
        return f"`{value.name}`"
    if isinstance(value, IntImm | FloatImm):
        return str(value.value)
    return repr(value)


_EXPR_RULES: dict[type, Callable[[_FuncVerifier, PrimExpr], None]] = {
    Var: _FuncVerifier.var,
    IntImm: _FuncVerifier.int_imm,
    FloatImm: _FuncVerifier.float_imm,
    BinOp: _FuncVerifier.bin_op,
    UnaryOp: _FuncVerifier.unary_op,
    Select: _FuncVerifier.select,
    Cast: _FuncVerifier.cast,
    Call: _FuncVerifier.call,
    BufferLoad: _FuncVerifier.buffer_load,
}

_STMT_RULES: dict[type, Callable[[_FuncVerifier, Stmt], None]] = {
    SeqStmt: _FuncVerifier.seq_stmt,
    Evaluate: _FuncVerifier.evaluate,
    IfThenElse: _FuncVerifier.if_then_else,
    BufferStore: _FuncVerifier.store,
    AtomicAdd: _FuncVerifier.store,
    Allocate: _FuncVerifier.allocate,
    LetStmt: _FuncVerifier.let_stmt,
    For: _FuncVerifier.for_,
    While: _FuncVerifier.while_,
    Block: _FuncVerifier.block_,
    SparseIteration: _FuncVerifier.sparse_iteration,
}
