"""`partition_loops` (Stage III): the outer loop of a split runs its full chunks without the guard.

`split(j, [None, 4])` over a row of `L` nonzeros makes `for j_outer in range((L + 3) // 4)` and
guards every use of `j_outer * 4 + c` with `j_outer * 4 + c < L` (a block predicate, an `if`, or
a `T.if_then_else` after `tensorize`). All but the last chunk pass every guard, so, as TVM's loop
partitioning does, the loop becomes two:

    for j_outer in range(L // 4):               # full chunks: guards removed
        ...
    for j_outer in range(L // 4, (L + 3) // 4): # the partial chunk, if any: guards kept
        ...

A guard is removed only where it reads exactly `j_outer * F + c < L` with `0 <= c < F` for the
loop's own `F` and `L` (its extent is `(L + F - 1) // F`), seeing through block iterators bound to
`j_outer`; in the first loop `j_outer < L // F`, so `j_outer * F + c <= L - 1`. Nothing else
changes, so both loops compute what the original did. Used by `sp.compile` on the CPU, where a
guard inside the vectorised feature loop costs more than the arithmetic it protects.
"""

from __future__ import annotations

from ..ir import make as mk
from ..ir.expr import BinOp, IntImm, PrimExpr, Select, Var
from ..ir.func import IRModule, PrimFunc
from ..ir.stmt import Block, For, IfThenElse, Stmt, seq
from ..ir.visit import map_children, post_order_rewrite, substitute, walk
from .inject_prefetch import PREFETCH
from .unroll_loops import fresh_copy


def partition_loops(mod: PrimFunc | IRModule) -> IRModule:
    """Split loops of guarded chunks into full chunks and the partial one (module docstring)."""
    return IRModule.from_any(mod).map_stage3(lambda f: _rewrite(f.body))


def _rewrite(s: Stmt) -> Stmt:
    s = map_children(s, lambda c: _rewrite(c) if isinstance(c, Stmt) else c)
    if isinstance(s, For) and s.kind == "serial" and set(s.annotations) <= {PREFETCH}:
        return _partition(s) or s  # both loops keep a prefetch annotation (`inject_prefetch` runs after)
    return s


def _chunking(loop: For) -> tuple[int, PrimExpr] | None:
    """(F, L) when the loop's extent is `(L + (F - 1)) // F` and it starts at 0."""
    e = loop.extent
    if not (isinstance(loop.min, IntImm) and loop.min.value == 0):
        return None
    if not (isinstance(e, BinOp) and e.op == "//" and isinstance(e.b, IntImm) and e.b.value > 1):
        return None
    f = e.b.value
    top = e.a
    if isinstance(top, BinOp) and top.op == "+" and isinstance(top.b, IntImm) and top.b.value == f - 1:
        return f, top.a
    return None


def _partition(loop: For) -> Stmt | None:
    found = _chunking(loop)
    if found is None:
        return None
    f, length = found
    v = loop.loop_var
    if any(n is v for n in walk(length)):
        return None
    aliases = {iv.var: iv.value for n in walk(loop.body) if isinstance(n, Block) for iv in n.iter_vars}

    def resolve(e):
        for _ in range(4):
            new = substitute(e, aliases)
            if new == e:
                break
            e = new
        return e

    # The inner loops of the split (`j_inner` in [0, F)), when it was not unrolled.
    inner = {
        n.loop_var
        for n in walk(loop.body)
        if isinstance(n, For) and _zero(n.min) and n.extent == IntImm(f, n.extent.dtype)
    }
    varying = [False]

    def is_guard(cond) -> bool:
        if not (isinstance(cond, BinOp) and cond.op == "<" and cond.b == length):
            return False
        lhs = resolve(cond.a)
        c = 0
        if isinstance(lhs, BinOp) and lhs.op == "+" and isinstance(lhs.b, IntImm):
            lhs, c = lhs.a, lhs.b.value
        elif isinstance(lhs, BinOp) and lhs.op == "+" and isinstance(lhs.b, Var) and lhs.b in inner:
            lhs = lhs.a
            varying[0] = True
        ok = isinstance(lhs, BinOp) and lhs.op == "*" and isinstance(lhs.b, IntImm) and lhs.b.value == f
        return ok and 0 <= c < f and isinstance(lhs.a, Var) and lhs.a is v

    removed = [0]

    def drop(n):
        if isinstance(n, Select) and is_guard(n.cond):
            removed[0] += 1
            return n.true_value
        if isinstance(n, IfThenElse) and is_guard(n.condition):
            removed[0] += 1
            return n.then_case
        if isinstance(n, Block) and n.predicate is not None:
            terms = mk.conjuncts(n.predicate)
            kept = [t for t in terms if not is_guard(t)]
            if len(kept) < len(terms):
                removed[0] += 1
                return n.replace(predicate=mk.conjunction(kept))
        return n

    full_body = post_order_rewrite(loop.body, drop)
    if not removed[0]:
        return None
    full_count = mk.binop("//", length, IntImm(f, length.dtype))
    full = loop.replace(extent=mk.cast(loop.extent.dtype, full_count), body=full_body)
    tail_var = Var(f"{v.name}_tail", v.dtype)
    if varying[0]:
        # A guard on `j_outer * F + j_inner` with `j_inner` a loop: the partial chunk keeps its
        # guards (one copy of the body per remainder would be F - 1 copies of that loop).
        body = fresh_copy(substitute(loop.body, {v: tail_var}), "_tail")
        return seq(
            full, loop.replace(loop_var=tail_var, min=full.extent, extent=mk.sub(loop.extent, full.extent), body=body)
        )
    # The partial chunk (at most one iteration) holds r = L - j_outer * F elements, 0 < r < F: one
    # copy of the body per r with each guard decided (`c < r`), so no guard is left inside the
    # inner loops either. Each copy binds its own variables and names its own blocks.
    rest = mk.sub(length, mk.mul(tail_var, IntImm(f, length.dtype)))
    chain: Stmt | None = None
    for r in range(f - 1, 0, -1):
        copy = _decided(loop.body, is_guard, r, f)
        copy = fresh_copy(substitute(copy, {v: tail_var}), f"_r{r}")
        chain = copy if chain is None else IfThenElse(mk.cmp("==", rest, IntImm(r, rest.dtype)), copy, chain)
    tail = loop.replace(loop_var=tail_var, min=full.extent, extent=mk.sub(loop.extent, full.extent), body=chain)
    return seq(full, tail)


def _zero(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def _decided(body: Stmt, is_guard, r: int, f: int) -> Stmt:
    """`body` with every guard `j_outer * F + c < L` replaced by its value when `r` elements remain
    (`c < r`): selects and ifs on a decided guard keep the branch taken."""

    def decide(n):
        if isinstance(n, Select) and is_guard(n.cond):
            return n.true_value if _offset(n.cond) < r else n.false_value
        if isinstance(n, IfThenElse) and is_guard(n.condition):
            taken = n.then_case if _offset(n.condition) < r else n.else_case
            return taken if taken is not None else seq()
        if isinstance(n, Block) and n.predicate is not None:
            terms = mk.conjuncts(n.predicate)
            if any(is_guard(t) and _offset(t) >= r for t in terms):
                return seq()  # the block does not run for this r
            return n.replace(predicate=mk.conjunction([t for t in terms if not is_guard(t)]))
        return n

    return post_order_rewrite(body, decide)


def _offset(cond: BinOp) -> int:
    """c of a guard `x * F + c < L` (0 for `x * F < L`), read through block iterators by the
    caller's `is_guard`; here from the unresolved form, whose constant is the same."""
    lhs = cond.a
    if isinstance(lhs, BinOp) and lhs.op == "+" and isinstance(lhs.b, IntImm):
        return lhs.b.value
    return 0
