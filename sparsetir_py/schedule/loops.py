"""Loop primitives: split, fuse, reorder, parallel, vectorize, unroll, bind.

Each is a pure function `prim(func, ...) -> func` (plus new loop variables where it creates
loops); `Schedule` records the call in its trace. Preconditions are `ScheduleError`s that name
the primitive, and a failing primitive leaves the schedule unchanged.

The examples below start from SpMM after `lower_sparse_iter`:

    for i in T.serial(m):
        with T.block("csrmm0"):
            vi = T.axis.spatial(m, i)
            ...
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                for k in T.serial(feat):
                    with T.block("csrmm1"):
                        vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                        vk = T.axis.spatial(feat, k)
                        ...
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from ..errors import ScheduleError
from ..ir import make as mk
from ..ir.expr import BinOp, IntImm, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.stmt import LAUNCH_TAGS, THREAD_TAGS, Block, For, IfThenElse, SeqStmt, Stmt
from ..ir.visit import substitute, walk
from .regions import prove_le
from .state import (
    NameGen,
    blocks_under,
    facts,
    find_loop,
    loop_path,
    replace_loop,
    replace_stmt,
    show_expr,
    uses_var,
)

BINDABLE = LAUNCH_TAGS


def _describe(loop: For) -> str:
    if loop.kind == "thread_binding":
        return f"bound to {loop.thread}"
    if loop.annotations:
        return f"annotated with {dict(loop.annotations)!r}"
    return loop.kind


def _serial_unbound(loop: For, primitive: str) -> None:
    if loop.kind != "serial" or loop.annotations:
        raise ScheduleError(
            f"in `{primitive}`: expected a serial loop that is not yet bound or annotated, but "
            f"`{loop.loop_var.name}` is {_describe(loop)}"
        )


def _starts_at_zero(loop: For, primitive: str) -> None:
    if not (isinstance(loop.min, IntImm) and loop.min.value == 0):
        raise ScheduleError(
            f"in `{primitive}`: expected a loop starting at 0, but `{loop.loop_var.name}` starts at "
            f"{show_expr(loop.min)}"
        )


def carries_reduction(loop: For) -> bool:
    """Some block under `loop` binds a reduction iterator to an expression of the loop variable,
    and is not annotated "atomic" (its updates are then atomic adds, see `annotation.annotate`) or
    "disjoint_writes" (the schedule's promise that the iterations write distinct elements: an ELL
    part's layers and rows, fused, when no row is split over layers)."""
    for block in blocks_under(loop.body):
        promised = block.annotations.get("atomic", False) or block.annotations.get("disjoint_writes", False)
        for iv in block.iter_vars:
            uses_loop = any(n is loop.loop_var for n in walk(iv.value))
            if iv.kind == "R" and uses_loop and not promised:
                return True
    return False


def _set_kind(func: PrimFunc, loop_var: Var, kind: str, primitive: str, thread: str | None = None) -> PrimFunc:
    loop = find_loop(func, loop_var, primitive)
    _serial_unbound(loop, primitive)
    if kind in ("parallel", "thread_binding") and carries_reduction(loop):
        raise ScheduleError(
            f"in `{primitive}`: expected a loop that carries no reduction, but `{loop_var.name}` does: several "
            'threads would update one element (decompose_reduction, then annotate the block "atomic")'
        )
    return replace_loop(func, loop_var, lambda f: f.replace(kind=kind, thread=thread))


def parallel(func: PrimFunc, loop: Var) -> PrimFunc:
    """Run the iterations of a loop in parallel (CPU threads: `numba.prange`).

    It requires: a serial, unannotated loop that carries no reduction (unless the reduction's
    block is annotated "atomic").

    Before: `for i in T.serial(m):`    `parallel(f, i)`    After: `for i in T.parallel(m):`

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> (i,) = [loop.loop_var for loop in loops_of(f, "csrmm0")]
    >>> print(sp.schedule.fragment(parallel(f, i), i).splitlines()[0])
    for i in T.parallel(m):
    """
    return _set_kind(func, loop, "parallel", "parallel")


def vectorize(func: PrimFunc, loop: Var) -> PrimFunc:
    """Mark a loop for vectorisation (on the CPU a plain loop that LLVM vectorises).

    It requires: a serial, unannotated loop.

    Before: `for k in T.serial(feat):`    `vectorize(f, k)`    After: `for k in T.vectorized(feat):`
    """
    return _set_kind(func, loop, "vectorized", "vectorize")


def unroll(func: PrimFunc, loop: Var) -> PrimFunc:
    """Mark a loop for unrolling.

    It requires: a serial, unannotated loop.

    Before: `for k in T.serial(4):`    `unroll(f, k)`    After: `for k in T.unroll(4):`
    """
    return _set_kind(func, loop, "unrolled", "unroll")


def bind(func: PrimFunc, loop: Var, thread: str) -> PrimFunc:
    """Bind a loop to a GPU thread axis (`blockIdx.x/y/z`, `threadIdx.x/y/z`).

    It requires: a serial, unannotated loop starting at 0 that carries no reduction (unless the
    reduction's block is annotated "atomic"); one of the six tags, which no loop around or
    inside this one is bound to already.

    Before: `for i in T.serial(m):`    `bind(f, i, "blockIdx.x")`
    After: `for i in T.thread_binding(m, thread="blockIdx.x"):`
    """
    if thread not in BINDABLE:
        raise ScheduleError(f"in `bind`: expected one of {', '.join(BINDABLE)}, but got {thread!r}")
    assert thread in THREAD_TAGS
    path = loop_path(func, loop, "bind")
    _starts_at_zero(path[-1], "bind")
    _serial_unbound(path[-1], "bind")
    nested = [*path[:-1], *walk(path[-1].body)]
    clash = next((f for f in nested if isinstance(f, For) and f.thread == thread), None)
    if clash is not None:
        # One thread index cannot enumerate two nested loops.
        raise ScheduleError(
            f"in `bind`: expected no loop bound to {thread} around or inside `{loop.name}`, but "
            f"`{clash.loop_var.name}` is"
        )
    return _set_kind(func, loop, "thread_binding", "bind", thread)


def _factor(f, dtype: str, factors) -> PrimExpr | None:
    if f is None:
        return None
    if isinstance(f, bool) or not isinstance(f, int | PrimExpr):
        raise ScheduleError(f"in `split`: expected integer factors or None, but got {factors!r}")
    f = f if isinstance(f, PrimExpr) else IntImm(int(f), dtype)
    if isinstance(f, IntImm) and f.value <= 0:
        raise ScheduleError(f"in `split`: expected positive factors, but got {factors!r}")
    return mk.cast(dtype, f)


def split(func: PrimFunc, loop: Var, factors: Sequence) -> tuple[PrimFunc, list[Var]]:
    """Split a loop into nested loops of the given extents (outermost first).

    It requires: a serial or parallel loop starting at 0; at least two factors, positive, at most
    one `None` (inferred as the ceiling division of the extent by the product of the others);
    without a `None`, a product that provably covers the extent (index analysis must show
    `extent <= product`; a symbolic extent needs a `None` factor).

    A guard keeps out the iterations past the extent, unless index analysis
    (`sparsetir_py.arith`) proves that none exist: a `T.where` on every block under the loop (as
    TVM), or an `if` around the body when a statement there is outside every block or a loop
    there has a range that uses the split loop.

    Parameters: `loop` the loop variable, `factors` the new extents. Returns the new function and
    the new loop variables, `k_outer`/`k_inner` for two factors, `k_0`, `k_1`, ... otherwise.

    Before:            for k in T.serial(feat): body(k)
    `split(k, [None, 32])`
    After:             for k_outer in T.serial((feat + 31) // 32):
                           for k_inner in T.serial(32):
                               body(k_outer * 32 + k_inner)   # where k_outer * 32 + k_inner < feat

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> j, k = [loop.loop_var for loop in loops_of(f, "csrmm1")]
    >>> g, (ko, ki) = split(f, k, [None, 32])
    >>> print(sp.schedule.fragment(g, ko))
    for k_outer in T.serial((feat + 31) // 32):
        for k_inner in T.serial(32):
            with T.block("csrmm1"):
                vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                vk = T.axis.spatial(feat, k_outer * 32 + k_inner)
                T.where(k_outer * 32 + k_inner < feat)
                with T.init():
                    C[vi, vk] = T.float32(0.0)
                C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
    """
    path = loop_path(func, loop, "split")
    target = path[-1]
    _starts_at_zero(target, "split")
    if target.kind not in ("serial", "parallel") or target.thread is not None:
        raise ScheduleError(f"in `split`: expected a serial or parallel loop, but `{loop.name}` is {_describe(target)}")
    factors = list(factors)
    if len(factors) < 2:
        raise ScheduleError(f"in `split`: expected at least two factors, but got {factors!r}")
    if sum(f is None for f in factors) > 1:
        raise ScheduleError(f"in `split`: expected at most one None factor, but got {factors!r}")
    dtype = target.extent.dtype
    known = [_factor(f, dtype, factors) for f in factors]
    product: PrimExpr = IntImm(1, dtype)
    for f in known:
        if f is not None:
            product = mk.mul(product, f)
    if None in known:
        inferred = BinOp("//", mk.add(target.extent, mk.sub(product, IntImm(1, dtype))), product)
        if isinstance(target.extent, IntImm) and isinstance(product, IntImm):
            inferred = IntImm(-(-target.extent.value // product.value), dtype)
        known[known.index(None)] = inferred
    elif not prove_le(target.extent, product, facts(path[:-1])):
        # Without an inferred factor, iterations past the product would silently be dropped.
        raise ScheduleError(
            f"in `split`: expected factors whose product covers the extent {show_expr(target.extent)} of "
            f"`{loop.name}` (or one None factor), but got {factors!r}"
        )
    names = NameGen(func)
    bases = (
        [f"{loop.name}_outer", f"{loop.name}_inner"]
        if len(known) == 2
        else [f"{loop.name}_{k}" for k in range(len(known))]
    )
    new_vars = [Var(names(b), dtype) for b in bases]
    fused: PrimExpr = new_vars[0]
    for v, f in zip(new_vars[1:], known[1:]):
        fused = mk.add(mk.mul(fused, f), v)
    env = facts(path[:-1])
    for v, f in zip(new_vars, known):
        env[v] = (IntImm(0, dtype), mk.sub(f, IntImm(1, dtype)))
    exact = prove_le(fused, mk.sub(target.extent, IntImm(1, dtype)), env)

    def rebuild(f: For):
        body = substitute(f.body, {loop: fused})
        if not exact:
            cond = mk.cmp("<", fused, target.extent)
            guarded = _guard_blocks(body, cond, new_vars)
            body = IfThenElse(cond, body) if guarded is None else guarded
        for k in range(len(new_vars) - 1, -1, -1):
            kind = target.kind if k == 0 else "serial"
            annotations = target.annotations if k == 0 else type(target.annotations)()
            body = For(new_vars[k], IntImm(0, dtype), known[k], kind, body, annotations=annotations)
        return body

    return replace_loop(func, loop, rebuild), new_vars


def _guard_blocks(body: Stmt, cond: PrimExpr, new_vars: list[Var]) -> Stmt | None:
    """`body` with `cond` added to the predicate (`T.where`) of each block under it, as TVM's
    split does, so that primitives reading block predicates (decompose_reduction, rfactor) see the
    guard. None when some statement would run unguarded: one outside every block, or a loop
    whose range uses the split loops (it could read out of range before the block's test)."""
    if isinstance(body, Block):
        return body.replace(predicate=cond if body.predicate is None else BinOp("and", body.predicate, cond))
    if isinstance(body, For) and not uses_var(BinOp("+", body.min, body.extent), new_vars):
        inner = _guard_blocks(body.body, cond, new_vars)
        return None if inner is None else body.replace(body=inner)
    if isinstance(body, SeqStmt) and body.stmts:
        parts = [_guard_blocks(s, cond, new_vars) for s in body.stmts]
        return None if any(p is None for p in parts) else body.replace(stmts=tuple(parts))
    return None


def _distinct(loops: Sequence[Var], primitive: str) -> None:
    if len(loops) < 2:
        raise ScheduleError(f"in `{primitive}`: expected at least two loops, but got {len(loops)}")
    seen: list[Var] = []
    for v in loops:
        if any(v is s for s in seen):
            raise ScheduleError(f"in `{primitive}`: expected distinct loops, but `{v.name}` is given twice")
        seen.append(v)


def fuse(func: PrimFunc, loops: Sequence[Var]) -> tuple[PrimFunc, Var]:
    """Fuse perfectly nested loops into one loop over the product of their extents.

    It requires: at least two distinct loops, each the whole body of the previous one; serial,
    unannotated loops starting at 0; no extent that depends on an outer loop of the group.

    Parameters: `loops` the loop variables, outermost first. Returns the new function and the
    fused loop's variable (`j_k_fused`); the old loops are gone.

    Before:            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                           for k in T.serial(feat): body(j, k)
    `fuse(j, k)`
    After:             for j_k_fused in T.serial((J_indptr[vi + 1] - J_indptr[vi]) * feat):
                           body(j_k_fused // feat, j_k_fused % feat)

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> j, k = [loop.loop_var for loop in loops_of(f, "csrmm1")]
    >>> g, jk = fuse(f, [j, k])
    >>> print("\\n".join(sp.schedule.fragment(g, jk).splitlines()[:4]))
    for j_k_fused in T.serial((J_indptr[vi + 1] - J_indptr[vi]) * feat):
        with T.block("csrmm1"):
            vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j_k_fused // feat)
            vk = T.axis.spatial(feat, j_k_fused % feat)
    """
    primitive = "fuse"
    loops = list(loops)
    _distinct(loops, primitive)
    chain = [find_loop(func, loops[0], primitive)]
    for v in loops[1:]:
        inner = find_loop(func, v, primitive)
        if chain[-1].body is not inner:
            raise ScheduleError(
                f"in `{primitive}`: expected `{v.name}` to be the whole body of `{chain[-1].loop_var.name}` "
                "(adjacent, perfectly nested loops)"
            )
        chain.append(inner)
    for k, f in enumerate(chain):
        _serial_unbound(f, primitive)
        _starts_at_zero(f, primitive)
        outer = [c.loop_var for c in chain[:k]]
        if uses_var(f.extent, outer):
            raise ScheduleError(
                f"in `{primitive}`: expected extents independent of the fused loops, but the extent of "
                f"`{f.loop_var.name}` uses an outer loop of the group"
            )
    extent = chain[0].extent
    for f in chain[1:]:
        extent = mk.mul(extent, f.extent)
    names = NameGen(func)
    fused = Var(names("_".join(v.name for v in loops) + "_fused"), extent.dtype)
    mapping: dict[Var, PrimExpr] = {}
    inner_size: PrimExpr | None = None  # product of the extents inside loop k
    for k in range(len(chain) - 1, -1, -1):
        f = chain[k]
        q = fused if inner_size is None else mk.binop("//", fused, inner_size)
        value = q if k == 0 else mk.binop("%", q, mk.cast(q.dtype, f.extent))
        mapping[f.loop_var] = mk.cast(f.loop_var.dtype, value)
        size = mk.cast(extent.dtype, f.extent)
        inner_size = size if inner_size is None else mk.mul(inner_size, size)
    body = substitute(chain[-1].body, mapping)
    new = For(fused, IntImm(0, extent.dtype), extent, "serial", body)
    return replace_stmt(func, chain[0], new), fused


def reorder(func: PrimFunc, loops: Sequence[Var]) -> PrimFunc:
    """Reorder loops of one perfect nest: the given loops take each other's places, in the order
    given (loops of the nest that are not given stay where they are).

    It requires: at least two distinct loops on one nest (between the outermost and the innermost
    given loop every statement is a loop whose whole body is the next loop); no extent or start
    of a given loop that depends on another loop of that nest.

    Before:            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                           for k in T.serial(feat): body
    `reorder(k, j)`
    After:             for k in T.serial(feat):
                           for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]): body

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> j, k = [loop.loop_var for loop in loops_of(f, "csrmm1")]
    >>> print("\\n".join(sp.schedule.fragment(reorder(f, [k, j]), k).splitlines()[:2]))
    for k in T.serial(feat):
        for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
    """
    primitive = "reorder"
    loops = list(loops)
    _distinct(loops, primitive)
    paths = [loop_path(func, v, primitive) for v in loops]
    outer_path = min(paths, key=len)
    inner_path = max(paths, key=len)
    top = len(outer_path) - 1
    for v, p in zip(loops, paths):
        if len(p) > len(inner_path) or inner_path[len(p) - 1] is not p[-1]:
            raise ScheduleError(
                f"in `{primitive}`: expected loops of one nest, but `{v.name}` is not around "
                f"`{inner_path[-1].loop_var.name}`"
            )
    nest = inner_path[top:]
    for outer, inner in pairwise(nest):
        if not isinstance(inner, For) or outer.body is not inner:
            raise ScheduleError(
                f"in `{primitive}`: expected a perfect nest, but the body of `{outer.loop_var.name}` is not "
                f"just the next loop (it holds a {type(outer.body).__name__})"
            )
    nest_vars = [f.loop_var for f in nest]
    for f in nest:
        if any(f.loop_var is v for v in loops) and uses_var(BinOp("+", f.min, f.extent), nest_vars):
            raise ScheduleError(
                f"in `{primitive}`: expected loops whose range does not depend on the nest, but the extent of "
                f"`{f.loop_var.name}` uses another loop of it"
            )
    given = [k for k, f in enumerate(nest) if any(f.loop_var is v for v in loops)]
    by_var = {id(f.loop_var): f for f in nest}
    order = list(nest)
    for pos, v in zip(given, loops):
        order[pos] = by_var[id(v)]
    _keep_init_first(nest, order, primitive)
    body = nest[-1].body
    for f in reversed(order):
        body = f.replace(body=body)
    return replace_stmt(func, nest[0], body)


def _keep_init_first(nest: list[For], order: list[For], primitive: str) -> None:
    """Refuse an order in which a block's `T.init()` would no longer run at the first reduction step
    of each spatial point. It runs where every reduction iterator is 0; that step comes first as long
    as each spatial point's steps run in increasing reduction order. Loops bound only to reduction
    iterators (or only to spatial ones) may take any order; loops that one spatial and one reduction
    binding share (after `fuse(j, k)`, say) may not: reordering the two halves of a split of such a
    loop visits `vj = 3` of some `vk` before its `vj = 0`, whose init then zeroes the sum."""
    position = {id(f.loop_var): k for k, f in enumerate(order)}
    for block in blocks_under(nest[-1].body):
        if block.init is None:
            continue
        uses = [(iv, {id(n) for n in walk(iv.value) if id(n) in position}) for iv in block.iter_vars]
        spatial = set().union(*(u for iv, u in uses if iv.kind == "S"))
        reduce = set().union(*(u for iv, u in uses if iv.kind == "R"))
        shared = spatial & reduce
        if not shared:
            continue
        tied = set().union(*(u for _, u in uses if u & shared))
        before = [f.loop_var.name for f in nest if id(f.loop_var) in tied]
        after = [f.loop_var.name for f in order if id(f.loop_var) in tied]
        if before != after:
            raise ScheduleError(
                f"in `{primitive}`: block `{block.name}` has an init and binds spatial and reduction "
                f"iterators to shared loops ({', '.join(before)}); reordering them would run some reduction "
                "steps before the init zeroes the element: keep their order (or decompose_reduction first)"
            )
