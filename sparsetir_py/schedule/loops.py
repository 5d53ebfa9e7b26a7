"""Loop primitives: split, parallel, vectorize, unroll, bind.

Each is a pure function `prim(func, ...) -> func` (plus new loop handles where it creates loops);
`Schedule` records the call in its trace. Preconditions are `ScheduleError`s that name the
primitive, and a failing primitive leaves the schedule unchanged.
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..ir import make as mk
from ..ir.expr import BinOp, IntImm, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.stmt import THREAD_TAGS, Block, For, IfThenElse
from ..ir.visit import substitute, walk
from .state import blocks_under, find_loop, replace_loop

BINDABLE = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


def _serial_unbound(loop: For, primitive: str) -> None:
    if loop.kind != "serial" or loop.annotations:
        raise ScheduleError(
            f"in `{primitive}`: expected a serial loop that is not yet bound or annotated, but "
            f"`{loop.loop_var.name}` is {loop.kind}"
        )


def carries_reduction(loop: For) -> bool:
    """Some block under `loop` binds a reduction iterator to an expression of the loop variable."""
    for block in blocks_under(loop.body):
        for iv in block.iter_vars:
            uses_loop = any(n is loop.loop_var for n in walk(iv.value))
            if iv.kind == "R" and uses_loop and not block.annotations.get("atomic", False):
                return True
    return False


def _set_kind(func: PrimFunc, loop_var: Var, kind: str, primitive: str, thread: str | None = None) -> PrimFunc:
    loop = find_loop(func, loop_var, primitive)
    _serial_unbound(loop, primitive)
    if kind in ("parallel", "thread_binding") and carries_reduction(loop):
        raise ScheduleError(
            f"in `{primitive}`: loop `{loop_var.name}` carries a reduction; several threads would write one "
            'element (annotate the block with "atomic" first)'
        )
    return replace_loop(func, loop_var, lambda f: f.replace(kind=kind, thread=thread))


def parallel(func: PrimFunc, loop: Var) -> PrimFunc:
    """Run the iterations of a loop in parallel (CPU threads; `prange`).

    It requires: a serial, unannotated loop that carries no reduction.
    """
    return _set_kind(func, loop, "parallel", "parallel")


def vectorize(func: PrimFunc, loop: Var) -> PrimFunc:
    """Mark a loop for vectorisation. It requires: a serial, unannotated loop."""
    return _set_kind(func, loop, "vectorized", "vectorize")


def unroll(func: PrimFunc, loop: Var) -> PrimFunc:
    """Mark a loop for unrolling. It requires: a serial, unannotated loop."""
    return _set_kind(func, loop, "unrolled", "unroll")


def bind(func: PrimFunc, loop: Var, thread: str) -> PrimFunc:
    """Bind a loop to a GPU thread axis (`blockIdx.x/y/z`, `threadIdx.x/y/z`).

    It requires: a serial, unannotated loop starting at 0 that carries no reduction; a known tag.
    """
    if thread not in BINDABLE:
        raise ScheduleError(f"in `bind`: expected one of {', '.join(BINDABLE)}, but got {thread!r}")
    assert thread in THREAD_TAGS
    found = find_loop(func, loop, "bind")
    if not (isinstance(found.min, IntImm) and found.min.value == 0):
        raise ScheduleError(f"in `bind`: expected a loop starting at 0, but `{loop.name}` starts at {found.min}")
    return _set_kind(func, loop, "thread_binding", "bind", thread)


def _divides(extent: PrimExpr, factor: PrimExpr) -> bool:
    return isinstance(extent, IntImm) and isinstance(factor, IntImm) and extent.value % factor.value == 0


def split(func: PrimFunc, loop: Var, factors: list) -> tuple[PrimFunc, list[Var]]:
    """Split a loop into nested loops of the given extents (outermost first).

    It requires: a serial or parallel loop starting at 0; positive factors, at most one `None`
    (inferred as the ceiling division of the extent by the product of the others).

    A guard (`T.where` on the block below, or an `if`) keeps out-of-range iterations only where
    the factors are not known to divide the extent.

    Before:            for k in T.serial(feat): body(k)
    `split(k, [None, 32])`
    After:             for k_0 in T.serial((feat + 31) // 32):
                           for k_1 in T.serial(32):
                               body(k_0 * 32 + k_1)    # guarded by k_0 * 32 + k_1 < feat
    """
    target = find_loop(func, loop, "split")
    if not (isinstance(target.min, IntImm) and target.min.value == 0):
        raise ScheduleError(f"in `split`: expected a loop starting at 0, but `{loop.name}` starts at {target.min}")
    if target.kind not in ("serial", "parallel") or target.thread is not None:
        raise ScheduleError(f"in `split`: expected a serial loop, but `{loop.name}` is {target.kind}")
    if len(factors) < 2:
        raise ScheduleError(f"in `split`: expected at least two factors, but got {factors!r}")
    if sum(f is None for f in factors) > 1:
        raise ScheduleError(f"in `split`: expected at most one None factor, but got {factors!r}")
    dtype = target.extent.dtype
    known: list[PrimExpr | None] = []
    for f in factors:
        if f is None:
            known.append(None)
            continue
        f = f if isinstance(f, PrimExpr) else IntImm(int(f), dtype)
        if isinstance(f, IntImm) and f.value <= 0:
            raise ScheduleError(f"in `split`: expected positive factors, but got {factors!r}")
        known.append(mk.cast(dtype, f))
    product: PrimExpr = IntImm(1, dtype)
    for f in known:
        if f is not None:
            product = mk.mul(product, f)
    if None in known:
        k = known.index(None)
        inferred = BinOp("//", mk.add(target.extent, mk.sub(product, IntImm(1, dtype))), product)
        if isinstance(target.extent, IntImm) and isinstance(product, IntImm):
            inferred = IntImm(-(-target.extent.value // product.value), dtype)
        known[k] = inferred
        exact = _divides(target.extent, product)
    else:
        exact = (
            isinstance(target.extent, IntImm) and isinstance(product, IntImm) and target.extent.value == product.value
        )
    names = [f"{loop.name}_{k}" for k in range(len(known))]
    if len(known) == 2:
        names = [f"{loop.name}_outer", f"{loop.name}_inner"]
    new_vars = [Var(n, dtype) for n in names]
    fused: PrimExpr = new_vars[0]
    for v, f in zip(new_vars[1:], known[1:]):
        fused = mk.add(mk.mul(fused, f), v)

    def rebuild(f: For):
        body = substitute(f.body, {loop: fused})
        if not exact:
            cond = mk.cmp("<", fused, target.extent)
            if isinstance(body, Block):
                pred = cond if body.predicate is None else BinOp("and", body.predicate, cond)
                body = body.replace(predicate=pred)
            else:
                body = IfThenElse(cond, body)
        for k in range(len(new_vars) - 1, -1, -1):
            kind = target.kind if k == 0 else "serial"
            body = For(new_vars[k], IntImm(0, dtype), known[k], kind, body)
        return body

    return replace_loop(func, loop, rebuild), new_vars
