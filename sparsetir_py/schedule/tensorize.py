"""Tensorize: replace a loop whose block matches an intrinsic's description by its implementation.

The intrinsics, their descriptions and implementations are in `schedule/intrinsics.py`. As in
TensorIR, tensorizing a loop first *blockizes* it: the block under the loop is lifted above it,
keeping its name, its init, its iterators not bound to the loop and the part of its predicate that
does not depend on the loop; the loop's reduction iterator `vk = k_outer * 32 + k_inner` becomes
an outer iterator `vk_o` bound to `k_outer`. The implementation for the target replaces the loop
inside that block.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..ir import make as mk
from ..ir.expr import BinOp, BufferLoad, FloatImm, IntImm, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.printer import ScriptPrinter
from ..ir.stmt import Block, BufferStore, For, IterVar, seq
from ..ir.visit import map_children, walk
from ..transform.region import block_regions
from .handles import BlockRV, LoopRV
from .intrinsics import Match, TensorIntrin, enclosing_loops, get_tensor_intrin
from .state import find_loop, loops_of, replace_loop

if TYPE_CHECKING:
    from .schedule import Schedule

__all__ = ["TensorizePrimitives", "match_intrinsic", "tensorize"]

PRIMITIVE = "tensorize"


def _fail(message: str) -> ScheduleError:
    return ScheduleError(f"in `{PRIMITIVE}`: {message}")


def _show(node) -> str:
    p = ScriptPrinter()
    if isinstance(node, BufferStore):
        return f"{p.access(node.buffer, node.indices)} = {p.expr(node.value)}"
    return p.expr(node)


def _uses(node, var: Var) -> bool:
    return any(n is var for n in walk(node))


def tensorize(func: PrimFunc, loop: Var | str, intrin_name: str, target: str | None = None) -> PrimFunc:
    """Replace `loop` (and the block under it) by intrinsic `intrin_name`'s implementation.

    `loop` is a loop variable, or the name of a block, meaning the loop directly enclosing it.
    `target` picks the implementation ("cpu", "cuda"); None takes the intrinsic's only one, or
    the CPU one when it has several.

    It requires:

    - a registered intrinsic with an implementation for `target`;
    - a Stage II function; the loop is serial, unbound and unannotated, starts at 0, and its
      extent is the intrinsic's width;
    - the loop's body is exactly one block, which allocates nothing and whose body is one store;
    - exactly one of the block's iterators uses the loop: a reduction iterator bound to
      `outer + loop` (`outer` free of the loop);
    - any part of the block's predicate that uses the loop is the split guard
      `binding < extent` of that iterator;
    - the accumulator's dtype is one the intrinsic supports, the store matches the description
      (`C[...] = C[...] + term`, the accumulator not depending on the reduction iterator, the
      terms not reading the accumulator's buffer);
    - the target's own conditions (`warp_sum_32`: lanes are whole warps of `threadIdx.x`).

    Parameters: `func`, `loop`, `intrin_name`, `target`. Returns the new function. The
    block keeps its name; the CUDA warp implementation keeps the loop variable as the lane index.

    Before (SDDMM, the reduction over `k` split by 4, feat = 8):

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import sddmm_script
    >>> sch = sp.Schedule(sp.lower_sparse_iter(sddmm_script().specialize({"feat": 8})))
    >>> _, k = sch.get_loops(sch.get_block("sddmm1"))
    >>> k_outer, k_inner = sch.split(k, [None, 4])
    >>> print(sch.func.script().split("for k_outer")[1])  # doctest: +NORMALIZE_WHITESPACE
     in T.serial(2):
        for k_inner in T.serial(4):
            with T.block("sddmm1"):
                vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                vk = T.axis.reduce(8, k_outer * 4 + k_inner)
                T.reads(C[vi, vj], A[vi, vj], X[vi, vk], Y[J_indices[vi, vj], vk], J_indices[vi, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vj] * X[vi, vk] * Y[J_indices[vi, vj], vk]
    <BLANKLINE>

    `tensorize(k_inner, "dot_4")` (`sch.tensorize` calls this function): the block moves above
    the loop, its reduction iterator becomes `vk_o` over `k_outer`, and the four iterations are one
    store, `C[vi, vj] = C[vi, vj] + (t0 + t1 + (t2 + t3))` with
    `t_l = A[vi, vj] * X[vi, vk_o * 4 + l] * Y[J_indices[vi, vj], vk_o * 4 + l]`:

    >>> sch.tensorize(k_inner, "dot_4", "cpu")
    >>> after = sch.func.script().split("for k_outer")[1]
    >>> print(after.replace("A[vi, vj] * X[vi, vk_o * 4", "t(").split(" * Y")[0])  # doctest: +NORMALIZE_WHITESPACE
     in T.serial(2):
        with T.block("sddmm1"):
            vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
            vk_o = T.axis.reduce(2, k_outer)
            T.reads(C[vi, vj], A[vi, vj], X[vi, 0:8], Y[J_indices[vi, vj], 0:8], J_indices[vi, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + (t(]
    >>> after.count("Y[J_indices[vi, vj], vk_o * 4")
    4
    """
    intrin = get_tensor_intrin(intrin_name)
    impl = intrin.implementation(target)
    m = match_intrinsic(func, loop, intrin)
    if impl.check is not None:
        impl.check(func, m)
    block, lane_iter = m.block, m.lane_iter
    iter_vars = [m.outer_iter if iv is lane_iter else iv for iv in block.iter_vars]
    iter_vars = [iv for iv in iter_vars if iv is not None]
    predicate = mk.conjunction([c for c in mk.conjuncts(block.predicate) if not _uses(c, m.loop.loop_var)])
    if impl.lifts_predicate and predicate is not None:
        # The implementation applies it inside the block: in terms of the block's iterators.
        m = dataclasses.replace(m, predicate=_in_block_terms(predicate, iter_vars, func, m.loop, intrin_name))
        predicate = None
    init = block.init
    if init is None or any(iv.kind == "R" for iv in iter_vars):
        body = impl.build(m)
    else:
        # No reduction left outside: the result is init + sum, written once when the init stores
        # into the accumulator itself (else: init first, then accumulate).
        acc = m.accumulator
        if isinstance(init, BufferStore) and init.buffer is acc.buffer and init.indices == acc.indices:
            body = impl.build(dataclasses.replace(m, init_value=init.value))
        else:
            body = seq(init, impl.build(m))
        init = None
    new = block.replace(iter_vars=tuple(iter_vars), predicate=predicate, body=body, init=init)
    reads, writes = block_regions(new)
    new = new.replace(reads=reads, writes=writes)
    return replace_loop(func, m.loop.loop_var, lambda _: new)


def _in_block_terms(predicate: PrimExpr, iter_vars: list[IterVar], func: PrimFunc, loop: For, name: str) -> PrimExpr:
    """`predicate` (over the loops around the block) with each iterator's binding replaced by the
    iterator (`i_outer * 16 + i_inner < nnz` -> `vi < nnz`); `ScheduleError` where a loop
    variable remains (the block may not read loops outside it)."""
    bindings = [(iv.value, iv.var) for iv in iter_vars]

    def rewrite(node):
        for value, var in bindings:
            if node == value:
                return var
        return map_children(node, rewrite)

    lifted = rewrite(predicate)
    outside = {lp.loop_var for lp in enclosing_loops(func.body, loop)}
    left = sorted({v.name for v in walk(lifted) if isinstance(v, Var) and v in outside})
    if left:
        raise ScheduleError(
            f"in `tensorize`: `{name}` applies the block's predicate inside the block, but {_show(predicate)} uses "
            f"loop(s) {', '.join(left)} that no block iterator is bound to"
        )
    return lifted


# -------------------------------------------------------------------- matching
def match_intrinsic(func: PrimFunc, loop: Var | str, intrin: TensorIntrin) -> Match:
    """Check every target-independent precondition of `tensorize`; the `Match` on success."""
    if func.stage != 2:
        raise _fail(
            f"expected a Stage II function (after lower_sparse_iter, before lower_sparse_buffer), but `{func.name}` "
            f"is at Stage {func.stage}"
        )
    node = _target_loop(func, loop, intrin)
    block = node.body
    if not isinstance(block, Block):
        raise _fail(
            f"expected the body of loop `{node.loop_var.name}` to be exactly one block, but it is a "
            f"{type(block).__name__}"
        )
    if block.alloc_buffers or not isinstance(block.body, BufferStore):
        raise _fail(
            f"expected block `{block.name}` to be one store (no allocations, no nested statements), but its body is "
            f"a {type(block.body).__name__}"
        )
    lane_iter = _lane_iterator(block, node)
    outer_iter, outer = _outer_iterator(lane_iter, _binding_base(lane_iter, node), intrin.width)
    guarded = _loop_guard(block, lane_iter, node)
    accumulator, operands = _match_store(block.body, lane_iter, intrin)
    return Match(intrin, node, block, lane_iter, outer_iter, outer, accumulator, operands, guarded)


def _target_loop(func: PrimFunc, loop: Var | str, intrin: TensorIntrin) -> For:
    if isinstance(loop, str):
        loops = loops_of(func, loop, PRIMITIVE)
        if not loops:
            raise _fail(f"expected a block inside a loop, but block `{loop}` has no loop of its own")
        node = loops[-1]
    elif isinstance(loop, Var):
        node = find_loop(func, loop, PRIMITIVE)
    else:
        raise _fail(f"expected a loop or a block, but got {loop!r}")
    name = node.loop_var.name
    if node.kind != "serial" or node.thread is not None or node.annotations:
        raise _fail(f"expected a serial loop that is not bound or annotated, but `{name}` is {node.kind}")
    if not (isinstance(node.min, IntImm) and node.min.value == 0):
        raise _fail(f"expected a loop starting at 0, but `{name}` starts at {_show(node.min)}")
    if not (isinstance(node.extent, IntImm) and node.extent.value == intrin.width):
        raise _fail(
            f"expected a loop of extent {intrin.width} (the width of `{intrin.name}`), but `{name}` has extent "
            f"{_show(node.extent)}"
        )
    return node


def _lane_iterator(block: Block, loop: For) -> IterVar:
    bound = [iv for iv in block.iter_vars if _uses(iv.value, loop.loop_var)]
    if len(bound) != 1:
        names = ", ".join(f"`{iv.var.name}`" for iv in bound) or "none"
        raise _fail(
            f"expected exactly one iterator of block `{block.name}` bound to loop `{loop.loop_var.name}`, but got "
            f"{names}"
        )
    iv = bound[0]
    if iv.kind != "R":
        raise _fail(
            f"expected loop `{loop.loop_var.name}` to carry a reduction, but block `{block.name}` binds it to the "
            f"spatial iterator `{iv.var.name}`"
        )
    return iv


def _binding_base(lane_iter: IterVar, loop: For) -> PrimExpr | None:
    """`base` of the binding `base + loop` (None for the loop alone)."""
    value, var = lane_iter.value, loop.loop_var
    if value is var:
        return None
    if isinstance(value, BinOp) and value.op == "+":
        for base, lane in ((value.a, value.b), (value.b, value.a)):
            if lane is var and not _uses(base, var):
                return base
    raise _fail(
        f"expected iterator `{lane_iter.var.name}` bound to `outer + {var.name}` (outer free of `{var.name}`), but "
        f"it is bound to {_show(value)}"
    )


def _outer_iterator(lane_iter: IterVar, base: PrimExpr | None, width: int) -> tuple[IterVar | None, PrimExpr | None]:
    """The new block's iterator over the loop's outer part and the lane iterator's value at lane 0.

    `base = e * width` (what `split` builds) gives `vk_o` over `ceil(extent / width)` bound to
    `e`, at lane 0 `vk_o * width`; any other base gives `vk_o` over the iterator's own extent
    bound to `base` itself.
    """
    if base is None:
        return None, None
    var = Var(f"{lane_iter.var.name}_o", lane_iter.var.dtype)
    extent = lane_iter.extent
    if isinstance(base, BinOp) and base.op == "*":
        for e, w in ((base.a, base.b), (base.b, base.a)):
            if isinstance(w, IntImm) and w.value == width:
                if isinstance(extent, IntImm):
                    outer_extent: PrimExpr = IntImm(-(-extent.value // width), extent.dtype)
                else:
                    outer_extent = BinOp("//", mk.add(extent, IntImm(width - 1, extent.dtype)), w)
                return IterVar(var, outer_extent, "R", e), mk.mul(var, w)
    return IterVar(var, extent, "R", base), var


def _loop_guard(block: Block, lane_iter: IterVar, loop: For) -> bool:
    guard = mk.cmp("<", lane_iter.value, lane_iter.extent)
    guarded = False
    for conjunct in mk.conjuncts(block.predicate):
        if not _uses(conjunct, loop.loop_var):
            continue
        if conjunct != guard:
            raise _fail(
                f"expected the predicate of block `{block.name}` to use loop `{loop.loop_var.name}` only in the split "
                f"guard {_show(guard)}, but it has {_show(conjunct)}"
            )
        guarded = True
    return guarded


def _match_store(store: BufferStore, lane_iter: IterVar, intrin: TensorIntrin) -> tuple[BufferLoad, dict]:
    dtype = store.buffer.dtype
    if dtype not in intrin.dtypes:
        raise _fail(
            f"expected an accumulator of dtype {', '.join(intrin.dtypes)} for `{intrin.name}`, but "
            f"`{store.buffer.name}` is {dtype}"
        )
    accumulator = BufferLoad(store.buffer, store.indices)
    if _uses(accumulator, lane_iter.var):
        raise _fail(
            f"expected an accumulator that does not depend on the reduction iterator `{lane_iter.var.name}`, but "
            f"the block writes {_show(accumulator)}"
        )
    desc = intrin.description(dtype)
    desc_loop = desc.body
    desc_block = desc_loop.body
    desc_store = desc_block.body
    unifier = _Unifier(desc_store.buffer, desc_block.iter_vars[0].var, accumulator)
    if not unifier.unify(desc_store.value, store.value):
        raise _fail(
            f"expected block's store to match the description of `{intrin.name}`, {_show(desc_store)}, but got "
            f"{_show(store)}"
        )
    for name, expr in unifier.operands.items():
        if any(isinstance(n, BufferLoad) and n.buffer is store.buffer for n in walk(expr)):
            raise _fail(
                f"expected terms that do not read the accumulator's buffer `{store.buffer.name}`, but operand {name} "
                f"is {_show(expr)}"
            )
    return accumulator, unifier.operands


class _Unifier:
    """Matches a description expression against a block's: `ACC[0]` is the accumulator, a buffer
    indexed by the description's iterator an operand (any expression, bound once)."""

    COMMUTATIVE = ("+", "*")

    def __init__(self, acc_buffer, desc_iter: Var, accumulator: BufferLoad):
        self.acc_buffer = acc_buffer
        self.desc_iter = desc_iter
        self.accumulator = accumulator
        self.operands: dict[str, PrimExpr] = {}

    def unify(self, d: PrimExpr, c: PrimExpr) -> bool:
        if isinstance(d, BufferLoad) and d.buffer is self.acc_buffer:
            return c == self.accumulator
        if isinstance(d, BufferLoad) and d.indices == (self.desc_iter,):
            if c.dtype != d.dtype:
                return False
            bound = self.operands.setdefault(d.buffer.name, c)
            return bound == c
        if isinstance(d, BinOp):
            if not (isinstance(c, BinOp) and c.op == d.op):
                return False
            saved = dict(self.operands)
            if self.unify(d.a, c.a) and self.unify(d.b, c.b):
                return True
            self.operands = saved
            if d.op in self.COMMUTATIVE and self.unify(d.a, c.b) and self.unify(d.b, c.a):
                return True
            self.operands = saved
            return False
        if isinstance(d, IntImm | FloatImm):
            return d == c
        return False


# -------------------------------------------------------------------- Schedule method
class TensorizePrimitives:
    """Mixed into `Schedule`: `tensorize` against the intrinsic registry (`schedule.intrinsics`)."""

    def tensorize(self: Schedule, block_or_loop: BlockRV | LoopRV, intrin_name: str, target: str | None = None) -> None:
        """Replace a loop (or the loop directly around a block) by an intrinsic's implementation;
        see `tensorize.tensorize` for the preconditions."""
        if isinstance(block_or_loop, BlockRV):
            where: Var | str = block_or_loop.name
        elif isinstance(block_or_loop, LoopRV):
            where = block_or_loop.var
        else:
            raise _fail(f"expected a block or loop handle, but got {block_or_loop!r}")
        self._update(tensorize(self.func, where, intrin_name, target))
        self._record("tensorize", (block_or_loop,), (intrin_name, target), ())
