"""Queries a schedule asks of the function it schedules, for schedules that adapt to its shape
(`schedules.common.parts` schedules any format decomposition, whatever its parts).

They read the function and change nothing, so they are functions of the function, not `Schedule`
methods recorded in the trace (as TVM keeps such questions in `tir.schedule.analysis`). The loop
handles they return are loop variables: they stay valid for the primitives that follow, as long as
those leave the loop in place.

>>> import sparsetir_py as sp
>>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
>>> [(nest.blocks, [loop.name for loop in nest.spatial], nest.launch_known) for nest in top_level_nests(f)]
[(('csrmm0', 'csrmm1'), ['i', 'k'], True)]
>>> [(it.name, it.kinds, it.over_root_and_child) for it in sparse_iterations(sp.ops.spmm_script())]
[('csrmm', 'SRS', True)]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.axis import DENSE_FIXED, Axis
from ..ir.expr import BufferLoad, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.stmt import Block, For, SeqStmt, SparseIteration, Stmt
from ..ir.visit import walk
from .handles import LoopRV


@dataclass(frozen=True)
class NestInfo:
    """One top-level statement of a Stage II function, as a schedule sees it."""

    blocks: tuple[str, ...]  #: the names of its blocks, in pre-order
    spatial: tuple[LoopRV, ...]  #: the loops a block binds to spatial iterators, outermost first
    #: whether the extent of `spatial[0]` is known at launch: constants and scalar parameters only
    #: (no buffer load, no enclosing loop), so that it can size a grid of thread blocks
    launch_known: bool
    #: the nest's root loop when it walks a part's fused layers and rows (`sparse_fuse` of a dense
    #: root and its child): one block without init binds it, its extent is known at launch
    fused_rows: LoopRV | None
    #: whether that block binds `fused_rows` to a reduction iterator (a row appears in several
    #: layers, so two iterations may update one output row)
    reduces_rows: bool


@dataclass(frozen=True)
class IterationInfo:
    """One sparse iteration of a Stage I function, as a schedule sees it."""

    name: str
    kinds: str  #: "S"/"R" per iterator, in order
    has_init: bool
    #: whether its first two iterators walk a dense-fixed root axis and that axis's child (an ELL
    #: or hyb part's layers and rows, which `sparse_fuse` can make one loop over the part's rows)
    over_root_and_child: bool


def top_level_nests(func: PrimFunc) -> list[NestInfo]:
    """The top-level statements of `func`'s body, in order (see `NestInfo`)."""
    nests = func.body.stmts if isinstance(func.body, SeqStmt) else (func.body,)
    scalars = {p for p in func.params if p.dtype != "handle"}
    return [_nest_info(nest, scalars) for nest in nests]


def sparse_iterations(func: PrimFunc) -> list[IterationInfo]:
    """The sparse iterations of a Stage I function, in pre-order (see `IterationInfo`)."""
    out = []
    for it in walk(func.body):
        if not isinstance(it, SparseIteration):
            continue
        first, second = (*it.axes, None, None)[:2]
        chained = (
            isinstance(first, Axis)
            and isinstance(second, Axis)
            and first.kind == DENSE_FIXED
            and first.parent is None
            and second.parent is first
        )
        out.append(IterationInfo(it.name, it.kinds, it.init is not None, chained))
    return out


def _nest_info(nest: Stmt, scalars: set[Var]) -> NestInfo:
    blocks = [n for n in walk(nest) if isinstance(n, Block)]
    spatial = _spatial_loops(nest)
    rows = _fused_rows_loop(nest, blocks, spatial, scalars)
    reduces_rows = rows is not None and any(iv.kind == "R" and iv.value is rows.loop_var for iv in blocks[0].iter_vars)
    return NestInfo(
        blocks=tuple(b.name for b in blocks),
        spatial=tuple(LoopRV(loop.loop_var) for loop in spatial),
        launch_known=bool(spatial) and _known_at_launch(spatial[0].extent, scalars),
        fused_rows=None if rows is None else LoopRV(rows.loop_var),
        reduces_rows=reduces_rows,
    )


def _fused_rows_loop(nest: Stmt, blocks: list[Block], spatial: list[For], scalars: set[Var]) -> For | None:
    """The nest's root loop when it walks a part's fused layers and rows: lowering names the loop
    after both iterators, its extent (the part's row count) is a scalar, and the nest's one block
    (without init) binds it."""
    if not isinstance(nest, For) or not _known_at_launch(nest.extent, scalars):
        return None
    if len(blocks) != 1 or blocks[0].init is not None:
        return None
    bound = [iv for iv in blocks[0].iter_vars if iv.value is nest.loop_var]
    return nest if bound and spatial else None


def _spatial_loops(nest: Stmt) -> list[For]:
    """The loops (pre-order) whose variables a block binds to spatial iterators."""
    spatial = {iv.value for n in walk(nest) if isinstance(n, Block) for iv in n.iter_vars if iv.kind == "S"}
    return [n for n in walk(nest) if isinstance(n, For) and n.loop_var in spatial]


def _known_at_launch(extent: PrimExpr, scalars: set[Var]) -> bool:
    """An extent made of constants and scalar parameters (no buffer loads, no enclosing loop)."""
    return not any(isinstance(n, BufferLoad) or (isinstance(n, Var) and n not in scalars) for n in walk(extent))
