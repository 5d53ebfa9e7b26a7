"""Compute location primitives: compute_at and reverse_compute_at (TVM semantics).

Both move a block, with the loops that hold only it, under a loop of the same scope (the same
parent block), and regenerate its loops so that one iteration of that loop computes just what
is needed there:

- `compute_at(producer, loop)`: the producer goes to the start of `loop`'s body and computes,
  per iteration, the region of its output that the readers under `loop` read;
- `reverse_compute_at(consumer, loop)`: the consumer goes to the end of `loop`'s body and
  consumes, per iteration, the region of its input that the writers under `loop` wrote.

The region comes from region analysis over the loops inside `loop` (`regions.py`); each block
iterator that indexes that buffer directly gets a loop `ax<k>` over its part of the region and
the binding `start + ax<k>`, guarded by `T.where` where index analysis cannot prove it inside the
iterator's domain. The block's iterators, body and domain are unchanged. The usual pattern:
`cache_read` then `compute_at` the copy under the loop that uses it; `cache_write` (or `rfactor`)
then `reverse_compute_at` the write-back.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScheduleError
from ..ir import make as mk
from ..ir.expr import BufferLoad, IntImm, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.stmt import AtomicAdd, Block, BufferStore, For, IterVar, Stmt, seq
from ..ir.visit import walk
from ..transform.region import annotate_regions
from . import regions as R
from .state import (
    NameGen,
    block_path,
    blocks_under,
    child_stmts,
    enclosing_block,
    facts,
    loop_path,
    remove_stmt,
    replace_stmt,
    scope_name,
    uses_var,
)


@dataclass(frozen=True)
class _Use:
    kind: str  # "r" or "w"
    buffer: object
    where: str  # "block `x`" or the scope
    in_moved: bool  # inside the moved block's nest
    in_loop: bool  # inside the target loop
    around: bool  # inside a loop that encloses the target loop (but not inside the target loop)
    order: int  # pre-order position


class _Uses:
    """Every load and store in a scope, with where it is relative to the moved nest and the loop."""

    def __init__(self, moved: Stmt, loop: For, enclosing: list[For], scope_label: str):
        self.moved, self.loop, self.enclosing = moved, loop, enclosing
        self.scope_label = scope_label
        self.uses: list[_Use] = []
        self.counter = 0
        self.position = 0
        self.span: dict[int, tuple[int, int]] = {}

    def run(self, body: Stmt) -> _Uses:
        self.stmt(body, [], None)
        return self

    def add(self, kind: str, buf, stack: list[Stmt], block: Block | None) -> None:
        where = f"block `{block.name}`" if block is not None else self.scope_label
        in_moved = any(s is self.moved for s in stack)
        in_loop = any(s is self.loop for s in stack)
        around = not in_loop and any(any(s is f for f in self.enclosing) for s in stack)
        self.uses.append(_Use(kind, buf, where, in_moved, in_loop, around, self.position))

    def expr(self, e, stack, block) -> None:
        if e is None:
            return
        for n in walk(e):
            if isinstance(n, BufferLoad):
                self.add("r", n.buffer, stack, block)

    def stmt(self, s: Stmt, stack: list[Stmt], block: Block | None) -> None:
        start = self.counter
        self.counter += 1
        self.position = start  # accesses in this statement's own expressions are here
        stack = [*stack, s]
        if isinstance(s, Block):
            for iv in s.iter_vars:
                self.expr(iv.value, stack, block)
                self.expr(iv.extent, stack, block)
            self.expr(s.predicate, stack, s)
            block = s
        elif isinstance(s, BufferStore | AtomicAdd):
            for i in s.indices:
                self.expr(i, stack, block)
            self.expr(s.value, stack, block)
            if isinstance(s, AtomicAdd):
                self.add("r", s.buffer, stack, block)
            self.add("w", s.buffer, stack, block)
        else:
            for _, value in s.fields():
                if isinstance(value, PrimExpr):
                    self.expr(value, stack, block)
        for c in child_stmts(s):
            self.stmt(c, stack, block)
            self.position = start
        self.span[id(s)] = (start, self.counter - 1)


def _written(stmt: Stmt) -> list:
    out = []
    for n in walk(stmt):
        if isinstance(n, BufferStore | AtomicAdd) and n.buffer not in out:
            out.append(n.buffer)
    return out


def _read(stmt: Stmt) -> list:
    out = []
    for n in walk(stmt):
        if isinstance(n, BufferLoad) and n.buffer not in out:
            out.append(n.buffer)
    return out


def _locate(func: PrimFunc, block: str, loop: Var, primitive: str):
    """(block, its removable nest, the loop, the loops around the loop inside the scope, the
    scope, the loop's path)."""
    bpath = block_path(func, block, primitive)
    blk = bpath[-1]
    lpath = loop_path(func, loop, primitive)
    target = lpath[-1]
    scope = enclosing_block(bpath)
    if enclosing_block(lpath) is not scope:
        raise ScheduleError(
            f"in `{primitive}`: expected a loop in the scope of block `{blk.name}` ({scope_name(scope)}), but "
            f"`{loop.name}` is in {scope_name(enclosing_block(lpath))}"
        )
    if any(s is target for s in bpath):
        raise ScheduleError(
            f"in `{primitive}`: expected a loop that is not around block `{blk.name}`, but `{loop.name}` is"
        )
    k = len(bpath) - 1
    while k > 0 and isinstance(bpath[k - 1], For) and bpath[k - 1].body is bpath[k]:
        k -= 1
    moved = bpath[k]  # the block with the loops that hold only it (the loop is not one: it is not around)
    start = lpath.index(scope) + 1 if scope is not None else 0
    enclosing = [s for s in lpath[start:-1] if isinstance(s, For)]
    if blk.predicate is not None:
        raise ScheduleError(
            f"in `{primitive}`: expected a block without a predicate (its loops are regenerated), but "
            f"`{blk.name}` has one"
        )
    return blk, moved, target, enclosing, scope, lpath


def _new_loops(
    func: PrimFunc, blk: Block, accesses_of_block: list, dims_of: dict, env: dict
) -> tuple[list[For], Block]:
    """Loops `ax<k>` over the needed part of each iterator's domain, and the rebound block."""
    names = NameGen(func)
    loops: list[For] = []
    ivs: list[IterVar] = []
    guards: list[PrimExpr] = []
    for k, iv in enumerate(blk.iter_vars):
        dim = None
        for buf, indices in accesses_of_block:
            dims = dims_of.get(id(buf))
            if dims is None:
                continue
            for d, idx in zip(dims, indices):
                if idx is iv.var and not d.whole:
                    dim = d
                    break
            if dim is not None:
                break
        ax = Var(names(f"ax{k}"), iv.var.dtype)
        if dim is None:
            extent, value = iv.extent, ax
            env[ax] = (IntImm(0, ax.dtype), mk.sub(extent, IntImm(1, ax.dtype)))
        else:
            extent = mk.cast(ax.dtype, dim.extent)
            value = mk.cast(ax.dtype, R.shift(dim.lo, ax))
            env[ax] = (IntImm(0, ax.dtype), mk.sub(extent, IntImm(1, ax.dtype)))
            if not R.prove_le(IntImm(0, value.dtype), value, env):
                guards.append(mk.cmp(">=", value, IntImm(0, value.dtype)))
            if not R.prove_le(value, mk.sub(iv.extent, IntImm(1, iv.extent.dtype)), env):
                guards.append(R.less_than(value, iv.extent))
        loops.append(For(ax, IntImm(0, ax.dtype), extent, "serial", None))
        ivs.append(iv.replace(value=value))
    block = blk.replace(iter_vars=tuple(ivs), predicate=mk.conjunction(guards))
    return loops, block


def _check_covered(blk: Block, own, writers, dims_of, ranges, env, loop: Var, primitive: str) -> None:
    """Refuse a consumer whose regenerated loops would read elements the writers under the loop
    do not write: each dimension it iterates over a bounded region must be one the writers fill
    without holes (`regions.gap`), else the write-back copies values nobody computed."""
    iterated = {iv.var for iv in blk.iter_vars}
    for buf, indices in own:
        dims = dims_of.get(id(buf))
        if dims is None:
            continue
        for k, (d, idx) in enumerate(zip(dims, indices)):
            if d.whole or idx not in iterated:
                continue
            for w in writers:
                if w.buffer is not buf or w.indices is None:
                    continue
                why = R.gap(w.indices[k], ranges, env)
                if why is not None:
                    raise ScheduleError(
                        f"in `{primitive}`: expected the writers of `{buf.name}` under loop `{loop.name}` to fill "
                        f"the region block `{blk.name}` reads, but {why}: the block would read elements "
                        "never written (move the strided loop outside the target loop, or the target loop inside it)"
                    )


def _build(loops: list[For], block: Block) -> Stmt:
    body: Stmt = block
    for f in reversed(loops):
        body = f.replace(body=body)
    return body


def _carried_reduction(producers: list[Block], loop_vars: list[Var]) -> tuple[Block, Var] | None:
    for p in producers:
        for iv in p.iter_vars:
            if iv.kind == "R" and uses_var(iv.value, loop_vars):
                return p, iv.var
    return None


def compute_at(func: PrimFunc, block: str, loop: Var) -> PrimFunc:
    """Move a producer block under a loop of its readers, computing per iteration what they read.

    It requires: a block with spatial iterators only, no init and no predicate; a loop in the same
    scope (parent block), after the block and not around it; only this block
    writes what it writes or reads, in the scope; every reader of what it writes is under the loop
    (and there is one).

    The block, with the loops that hold only it, moves to the start of the loop's body; its loops
    are regenerated (`ax0`, `ax1`, ...) over the region that the readers under the loop read in one
    iteration. Handles of its old loops become invalid.

    Before (after `cache_read(f, "csrmm1", "B", "shared")`):
        with T.block("csrmm0"):
            B_shared = T.alloc_buffer((n, feat), "float32", scope="shared")
            for ax0, ax1 in T.grid(n, feat):
                with T.block("B_shared"): ...   # B_shared[v0, v1] = B[v0, v1]
            ...
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                for k in T.serial(feat):
                    with T.block("csrmm1"): ... B_shared[J_indices[vi, vj], vk] ...
    `compute_at(f, "B_shared", j)`
    After:

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.caching import cache_read
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> f, name = cache_read(f, "csrmm1", "B", "shared")
    >>> j, _ = [loop.loop_var for loop in loops_of(f, "csrmm1")]
    >>> print("\\n".join(sp.schedule.fragment(compute_at(f, name, j), j).splitlines()[:7]))
    for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
        for ax0 in T.serial(1):
            for ax1 in T.serial(feat):
                with T.block("B_shared"):
                    v0 = T.axis.spatial(n, J_indices[vi, j] + ax0)
                    v1 = T.axis.spatial(feat, ax1)
                    B_shared[v0, v1] = B[v0, v1]
    """
    primitive = "compute_at"
    blk, moved, target, enclosing, scope, lpath = _locate(func, block, loop, primitive)
    if blk.init is not None or any(iv.kind == "R" for iv in blk.iter_vars):
        raise ScheduleError(
            f"in `{primitive}`: expected a block with spatial iterators only and no init, but `{blk.name}` reduces"
        )
    body = func.body if scope is None else scope.body
    uses = _Uses(moved, target, enclosing, scope_name(scope)).run(body)
    if uses.span[id(moved)][0] > uses.span[id(target)][0]:
        raise ScheduleError(
            f"in `{primitive}`: expected a loop after block `{blk.name}`, but `{loop.name}` comes before it "
            "(reverse_compute_at moves a consumer)"
        )
    outputs, inputs = _written(blk), _read(blk)
    for u in uses.uses:
        if u.in_moved:
            continue
        if u.kind == "w" and (u.buffer in outputs or u.buffer in inputs):
            raise ScheduleError(
                f"in `{primitive}`: expected `{u.buffer.name}` to be written only by block `{blk.name}` in "
                f"{scope_name(scope)}, but {u.where} writes it"
            )
        if u.kind == "r" and u.buffer in outputs and not u.in_loop:
            raise ScheduleError(
                f"in `{primitive}`: expected every reader of `{u.buffer.name}` under loop `{loop.name}`, but "
                f"{u.where} reads it outside"
            )
    accesses, ranges = R.collect(target.body)
    readers = [a for a in accesses if a.kind == "r" and a.buffer in outputs]
    if not readers:
        raise ScheduleError(
            f"in `{primitive}`: expected a reader of what `{blk.name}` writes under loop `{loop.name}`, "
            "but there is none"
        )
    env = facts(lpath)
    dims_of = {id(b): R.region(readers, b, ranges, env, func, clamp=False) for b in outputs}
    own = [(n.buffer, n.indices) for n in walk(blk.body) if isinstance(n, BufferStore | AtomicAdd)]
    out = func.replace(body=remove_stmt(func.body, moved))  # `target` keeps its identity
    loops, new_block = _new_loops(out, blk, own, dims_of, env)
    out = replace_stmt(out, target, target.replace(body=seq(_build(loops, new_block), target.body)))
    return annotate_regions(out)


def reverse_compute_at(func: PrimFunc, block: str, loop: Var) -> PrimFunc:
    """Move a consumer block under a loop of its writers, consuming per iteration what they wrote.

    It requires: a block without a predicate; a loop in the same scope (parent block), before the
    block and not around it; a writer of what the block reads under the loop;
    the loop, and the loops around it, bound to no reduction iterator of those writers (the block
    would see partial results, and none at all for an empty reduction); no other access to what the
    block writes under or around the loop or between the loop and the block, and no write there
    to what it reads.

    The block, with the loops that hold only it, moves to the end of the loop's body; its loops are
    regenerated (`ax0`, `ax1`, ...) over the region that the writers under the loop write in one
    iteration, guarded by `T.where` where it may leave the iterators' domains. Handles of its old
    loops become invalid. Writes before the loop (such as lowering's initialisation of empty rows)
    are fine: they still happen first.

    Before (after `split(k, [None, 4])`, `reorder(k_outer, j)`, `cache_write(f, "csrmm1", "C", "local")`):
        for k_outer in T.serial((feat + 3) // 4):
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                for k_inner in T.serial(4):
                    with T.block("csrmm1"): ... C_local[0, vk] ...
        for ax0, ax1 in T.grid(1, feat):
            with T.block("C_local"): ...   # C[vi + v0, v1] = C_local[v0, v1]
    `reverse_compute_at(f, "C_local", k_outer)`
    After:

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.caching import cache_write
    >>> from sparsetir_py.schedule.loops import reorder, split
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> j, k = [loop.loop_var for loop in loops_of(f, "csrmm1")]
    >>> f, (ko, ki) = split(f, k, [None, 4])
    >>> f = reorder(f, [ko, j])
    >>> f, name = cache_write(f, "csrmm1", "C", "local")
    >>> g = reverse_compute_at(f, name, ko)
    >>> print("\\n".join(sp.schedule.fragment(g, ko).splitlines()[-7:]))
        for ax0 in T.serial(1):
            for ax1 in T.serial(4):
                with T.block("C_local"):
                    v0 = T.axis.spatial(1, ax0)
                    v1 = T.axis.spatial(feat, k_outer * 4 + ax1)
                    T.where(k_outer * 4 + ax1 < feat)
                    C[vi + v0, v1] = C_local[v0, v1]
    """
    primitive = "reverse_compute_at"
    blk, moved, target, enclosing, scope, lpath = _locate(func, block, loop, primitive)
    body = func.body if scope is None else scope.body
    uses = _Uses(moved, target, enclosing, scope_name(scope)).run(body)
    moved_start = uses.span[id(moved)][0]
    loop_end = uses.span[id(target)][1]
    if moved_start < uses.span[id(target)][0]:
        raise ScheduleError(
            f"in `{primitive}`: expected a loop before block `{blk.name}`, but `{loop.name}` comes after it "
            "(compute_at moves a producer)"
        )
    outputs, inputs = _written(blk), _read(blk)
    for u in uses.uses:
        if u.in_moved:
            continue
        between = loop_end < u.order < moved_start
        if u.buffer in outputs and (u.in_loop or u.around or between):
            raise ScheduleError(
                f"in `{primitive}`: expected no other access to `{u.buffer.name}` under or around loop `{loop.name}` "
                f"before block `{blk.name}`, but {u.where} {'reads' if u.kind == 'r' else 'writes'} it"
            )
        if u.buffer in inputs and u.kind == "w" and (u.around or between):
            raise ScheduleError(
                f"in `{primitive}`: expected `{u.buffer.name}` complete after each iteration of loop `{loop.name}`, "
                f"but {u.where} writes it {'around the loop' if u.around else 'after the loop'}"
            )
    accesses, ranges = R.collect(target.body)
    writers = [a for a in accesses if a.kind == "w" and a.buffer in inputs]
    if not writers:
        raise ScheduleError(
            f"in `{primitive}`: expected a writer of what `{blk.name}` reads under loop `{loop.name}`, "
            "but there is none"
        )
    producers = [b for b in blocks_under(target) if any(w in inputs for w in _written(b.body))]
    carried = _carried_reduction(producers, [loop, *(f.loop_var for f in enclosing)])
    if carried is not None:
        p, v = carried
        raise ScheduleError(
            f"in `{primitive}`: expected a loop bound to no reduction iterator of the writers, but `{loop.name}` (or a "
            f"loop around it) binds `{v.name}` of block `{p.name}`"
        )
    env = facts(lpath)
    dims_of = {id(b): R.region(writers, b, ranges, env, func, clamp=False) for b in inputs}
    own = [(n.buffer, n.indices) for n in walk(blk.body) if isinstance(n, BufferLoad)]
    _check_covered(blk, own, writers, dims_of, ranges, env, loop, primitive)
    out = func.replace(body=remove_stmt(func.body, moved))  # `target` keeps its identity
    loops, new_block = _new_loops(out, blk, own, dims_of, env)
    out = replace_stmt(out, target, target.replace(body=seq(target.body, _build(loops, new_block))))
    return annotate_regions(out)
