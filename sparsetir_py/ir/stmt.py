"""Statements of all three stages.

Stage I: `SparseIteration` (coordinate space). Stages II and III: `For`, `While`, `Block`, as in
TVM TensorIR. Shared: stores, atomics, `IfThenElse`, `Allocate`, `SeqStmt`, `Evaluate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .axis import IterAxis
from .buffer import Buffer, FlatBuffer
from .expr import PrimExpr, Var
from .node import FrozenDict, Node

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
BLOCK_IDX_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_IDX_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
LAUNCH_TAGS = (*BLOCK_IDX_TAGS, *THREAD_IDX_TAGS)  # the dimensions of a CUDA launch
THREAD_TAGS = (*LAUNCH_TAGS, "vthread")  # every tag a thread_binding loop may have


@dataclass(frozen=True, slots=True)
class Stmt(Node):
    """Base of all statements."""


@dataclass(frozen=True, slots=True)
class BufferStore(Stmt):
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    value: PrimExpr


@dataclass(frozen=True, slots=True)
class AtomicAdd(Stmt):
    """`buffer[indices] += value`, atomically with respect to other threads."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    value: PrimExpr


@dataclass(frozen=True, slots=True)
class Evaluate(Stmt):
    """An expression evaluated for its effect (an intrinsic call such as `T.syncthreads()`)."""

    value: PrimExpr


@dataclass(frozen=True, slots=True)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """`for loop_var in range(min, min + extent)`; `thread` is the tag of a thread-binding loop."""

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: str
    body: Stmt
    thread: str | None = None
    annotations: FrozenDict = field(default_factory=FrozenDict)


@dataclass(frozen=True, slots=True)
class While(Stmt):
    """`while condition: body` (TVM's `tir.While`, Stages II and III): the condition is evaluated
    before every iteration; the loop binds no variable, so the body makes progress through the
    buffers it writes (SparseTIR's binary-search blocks keep `low`/`high` in local buffers)."""

    condition: PrimExpr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Range(Node):
    min: PrimExpr
    extent: PrimExpr


@dataclass(frozen=True, slots=True)
class BufferRegion(Node):
    buffer: Buffer
    region: tuple[Range, ...]


@dataclass(frozen=True, slots=True)
class IterVar(Node):
    """A block iterator `var` over `[0, extent)`, spatial ("S") or reduction ("R"), bound to `value`."""

    var: Var
    extent: PrimExpr
    kind: str
    value: PrimExpr


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    """A TensorIR block: iterators with bindings, read/write regions, optional init and buffers.

    `init` runs before the first reduction step of every spatial point of the block.
    """

    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[FlatBuffer, ...] = ()
    predicate: PrimExpr | None = None
    annotations: FrozenDict = field(default_factory=FrozenDict)


@dataclass(frozen=True, slots=True)
class LetStmt(Stmt):
    """`var = value`, visible in `body` (printed as `var: T.dtype = value`)."""

    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """Scratch storage (`global`, `shared` or `local`) live in `body`."""

    buffer: FlatBuffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class SparseIteration(Stmt):
    """Stage I: `with T.sp_iter(axes, kinds, name) as iter_vars:`, coordinate-space semantics.

    For every point of the spatial ("S") iterators `init` runs once, then `body` for every point
    of the reduction ("R") iterators, even when that reduction domain is empty.
    """

    name: str
    axes: tuple[IterAxis, ...]
    kinds: str
    iter_vars: tuple[Var, ...]
    body: Stmt
    init: Stmt | None = None
    attrs: FrozenDict = field(default_factory=FrozenDict)


def seq(*stmts: Stmt | None) -> Stmt:
    """A statement sequence, flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))
