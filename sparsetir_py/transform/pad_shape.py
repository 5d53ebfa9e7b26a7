"""`pad_shape` (Stage I): compute on a shape padded to whole blocks, without the padding guards.

A block format (BSR) pads a matrix whose shape its block size does not divide, and
`decompose_format` guards every use of an old coordinate with `coord < length`: a padding row or
column computes nothing. When the caller can give the operands the padded shape instead (C with
`m_bsr * b` rows, B with `n_bsr * b` rows, zeros past the real ones), the guard is not needed:

    mod = decompose_format(csrmm, format_rules.bsr.rules(block_size=4))
    mod = pad_shape(mod, {"m": "m_bsr", "n": "n_bsr"}, 4)
    # m and n are no parameters any more: every `m` reads `m_bsr * 4`, every `n` `n_bsr * 4`;
    # `if io_bsr * 4 + ii_bsr < m_bsr * 4 and jo_bsr * 4 + ji_bsr < n_bsr * 4:` is gone.

Each old shape parameter becomes `<block count> * factor` (and is removed from the parameters);
then, in every sparse iteration, each conjunct of an `if` condition that holds for every value of
the iterators (an iterator of an axis of length `L` lies in `[0, L - 1]`, and `symbolic_range`
bounds the difference of the two sides) is dropped, and an `if` left without a condition becomes
its body. Nothing else changes: the function computes what it did on the padded shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..arith.interval import symbolic_range
from ..errors import LoweringError
from ..ir import make as mk
from ..ir.axis import base_axis
from ..ir.expr import BinOp, BufferLoad, FloatImm, IntImm, PrimExpr, Var
from ..ir.func import IRModule, PrimFunc
from ..ir.stmt import BufferStore, IfThenElse, SparseIteration
from ..ir.visit import post_order_rewrite, substitute_deep


def pad_shape(mod: PrimFunc | IRModule, counts: Mapping[str, str], factor: int) -> IRModule:
    """Every Stage I function of `mod` with each parameter `old` of `counts` bound to
    `counts[old] * factor` (a parameter of block counts) and the guards that then always hold
    dropped (module docstring)."""
    return IRModule.from_any({name: _pad(f, counts, factor) for name, f in IRModule.from_any(mod).items()})


def _pad(func: PrimFunc, counts: Mapping[str, str], factor: int) -> PrimFunc:
    by_name = {p.name: p for p in func.params}
    mapping: dict[Var, PrimExpr] = {}
    for old, count in counts.items():
        if old not in by_name or count not in by_name:
            raise LoweringError(f"pad_shape: `{func.name}` has no parameters `{old}` and `{count}`")
        mapping[by_name[old]] = mk.binop("*", by_name[count], IntImm(factor, by_name[count].dtype))
    params = tuple(p for p in func.params if p not in mapping)
    func = substitute_deep(func.replace(params=params), mapping)
    positive = {p: (0, None) for p in func.params if p.dtype != "handle"}
    return func.replace(body=post_order_rewrite(func.body, lambda n: _drop_guards(n, positive)))


def _drop_guards(node, positive):
    if not isinstance(node, SparseIteration):
        return node
    ranges = {v: (0, mk.binop("-", base_axis(a).length, IntImm(1, v.dtype))) for v, a in zip(node.iter_vars, node.axes)}

    def simplify(s):
        if not isinstance(s, IfThenElse) or s.else_case is not None:
            return s
        kept = [c for c in _conjuncts(s.condition) if not _always(c, ranges, positive)]
        if kept == _conjuncts(s.condition):
            return s
        cond = None
        for c in kept:
            cond = mk.and_(cond, c)
        return s.then_case if cond is None else s.replace(condition=cond)

    return node.replace(body=post_order_rewrite(node.body, simplify))


def _conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    if isinstance(cond, BinOp) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _always(cond: PrimExpr, ranges, positive) -> bool:
    """Whether `a < b` holds for every value of the iterators in `ranges`."""
    if not (isinstance(cond, BinOp) and cond.op == "<"):
        return False
    bounds = symbolic_range(mk.binop("-", cond.a, cond.b), ranges, param_ranges=positive)
    if bounds is None:
        return False
    hi = bounds[1]
    return isinstance(hi, IntImm) and hi.value < 0


def fold_block_init(mod: PrimFunc | IRModule, factor: int) -> IRModule:
    """Every Stage I function that is an output's init followed by one sum into it over blocks of
    `factor` rows, as `decompose_format` leaves a BSR SpMM on the padded shape,

        with T.sp_iter([I, K], "SS", "csrmm_init") as [i, k]:          # I of m_bsr * b rows
            C[i, k] = 0
        with T.sp_iter([IO, JO, II, JI, K], "SRSRS", "csrmm_bsr") as [io, jo, ii, ji, k]:
            C[io * b + ii, k] = C[io * b + ii, k] + ...                # IO of m_bsr, II of b

    with the init moved into the sum as its `T.init()` (`C[io * b + ii, k] = 0`): the sum's
    spatial points (io, ii, k) are the init's (i, k), and the init of a sum runs once per
    spatial point, empty block rows included. A schedule can then zero a block row's outputs
    where it sums them (`decompose_reduction`) instead of in a pass of its own over C. Other
    functions are left as they are."""
    return IRModule.from_any({name: _fold(f, factor) for name, f in IRModule.from_any(mod).items()})


def _fold(func: PrimFunc, factor: int) -> PrimFunc:
    body = func.body
    stmts = getattr(body, "stmts", None)
    if not stmts or len(stmts) != 2 or not all(isinstance(s, SparseIteration) for s in stmts):
        return func
    init, total = stmts
    if init.kinds != "SS" or init.init is not None or total.init is not None:
        return func
    zero, store = init.body, total.body
    if not (isinstance(zero, BufferStore) and isinstance(store, BufferStore) and zero.buffer is store.buffer):
        return func
    if zero.indices != init.iter_vars or not isinstance(zero.value, IntImm | FloatImm):
        return func
    row, col = store.indices if len(store.indices) == 2 else (None, None)
    value = store.value
    if not (isinstance(value, BinOp) and value.op == "+" and value.a == BufferLoad(store.buffer, store.indices)):
        return func
    spatial = {v: a for v, a, kind in zip(total.iter_vars, total.axes, total.kinds) if kind == "S"}
    if col not in spatial or spatial[col] is not init.axes[1] or not isinstance(row, BinOp) or row.op != "+":
        return func
    scaled, inner = row.a, row.b
    if not (isinstance(scaled, BinOp) and scaled.op == "*" and scaled.b == IntImm(factor, scaled.b.dtype)):
        return func
    outer = scaled.a
    if outer not in spatial or inner not in spatial or len(spatial) != 3:
        return func
    o_len, i_len = base_axis(spatial[outer]).length, base_axis(spatial[inner]).length
    rows = base_axis(init.axes[0]).length
    if i_len != IntImm(factor, i_len.dtype) or rows != mk.binop("*", o_len, IntImm(factor, o_len.dtype)):
        return func
    folded = total.replace(init=BufferStore(store.buffer, store.indices, zero.value))
    return func.replace(body=folded)
