"""`unroll_loops` (Stage III): a loop marked `T.unroll` with a constant trip count becomes copies.

`sch.unroll(j_inner)` marks a loop; this pass carries it out, as TVM's `UnrollLoop` does:

    for j_inner in T.unroll(4):           C[b + j_outer * 4] = ...
        C[b + j_outer * 4 + j_inner] = ... ->  C[b + j_outer * 4 + 1] = ...
                                           ...

Each copy has the loop variable replaced by its value and integer arithmetic folded
(`j_outer * 4 + 0` is `j_outer * 4`), so what depends on the copy becomes a constant offset. The
passes after it use that: `partition_loops` reads the split guards `j_outer * 4 + c < L` with a
constant `c`, and `promote_accumulators` keeps the copies' accumulators in registers (SDDMM's dot
products of four nonzeros sharing one sweep over X's row). Everything a copy binds (loops, block
iterators, let variables) is fresh, and its blocks' names end in `_u<c>` (the first copy keeps
the original names; `_uu<c>` for copies of a loop whose body already holds `_u<c>` copies).

A loop stays a loop when its extent is not a constant, is above `MAX_UNROLL`, or its body
allocates scratch (each copy would need its own buffer); the code generator then emits it as a
plain loop that LLVM may unroll.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import make as mk
from ..ir.expr import BinOp, IntImm, PrimExpr, Var
from ..ir.func import IRModule
from ..ir.stmt import Allocate, Block, For, LetStmt, Stmt, seq
from ..ir.visit import map_children, post_order_rewrite, substitute, walk

__all__ = ["MAX_UNROLL", "fold_integers", "fresh_copy", "unroll_loops"]

MAX_UNROLL = 16  # copies of one loop; past this the code size costs more than the loop


def unroll_loops(mod) -> IRModule:
    """Expand the `unrolled` loops of every Stage III function (module docstring)."""
    return IRModule.from_any(mod).map_stage3(lambda f: _rewrite(f.body))


def _rewrite(s: Stmt) -> Stmt:
    s = map_children(s, lambda c: _rewrite(c) if isinstance(c, Stmt) else c)
    if isinstance(s, For) and s.kind == "unrolled":
        return _expand(s) or s
    return s


def _expand(loop: For) -> Stmt | None:
    if not (isinstance(loop.min, IntImm) and isinstance(loop.extent, IntImm)):
        return None
    if not 0 <= loop.extent.value <= MAX_UNROLL:
        return None
    if any(isinstance(n, Allocate) or (isinstance(n, Block) and n.alloc_buffers) for n in walk(loop.body)):
        return None
    var = loop.loop_var
    tag = _copy_tag(loop)
    copies = []
    for c in range(loop.extent.value):
        value = IntImm(loop.min.value + c, var.dtype)
        body = fold_integers(substitute(loop.body, {var: value}))
        copies.append(body if c == 0 else fresh_copy(body, f"_{tag}{c}"))
    return seq(*copies)


def _copy_tag(loop: For) -> str:
    """`u`, or `uu`, ... where the body already holds copies of an inner unrolled loop: the
    outer copy `<block>_u1` would share a name with the inner one that the first copy keeps."""
    names = {n.name for n in walk(loop.body) if isinstance(n, Block)}
    tag = "u"
    while any(f"{name}_{tag}{c}" in names for name in names for c in range(1, loop.extent.value)):
        tag += "u"
    return tag


def fold_integers(node):
    """`node` with integer `+ - *` over constants folded and `x + 0`, `x * 1` dropped (bottom-up)."""

    def fold(n):
        if isinstance(n, BinOp) and n.op in ("+", "-", "*", "//") and dt.is_int(n.dtype):
            return mk.binop(n.op, n.a, n.b)
        return n

    return post_order_rewrite(node, fold)


def fresh_copy(body: Stmt, suffix: str) -> Stmt:
    """`body` with fresh variables for everything it binds and block names ending in `suffix`."""
    bound = [n.loop_var for n in walk(body) if isinstance(n, For)]
    bound += [iv.var for n in walk(body) if isinstance(n, Block) for iv in n.iter_vars]
    bound += [n.var for n in walk(body) if isinstance(n, LetStmt)]
    fresh: dict[Var, PrimExpr] = {b: Var(f"{b.name}{suffix}", b.dtype) for b in bound}
    body = substitute(body, fresh)
    return post_order_rewrite(body, lambda n: n.replace(name=f"{n.name}{suffix}") if isinstance(n, Block) else n)
