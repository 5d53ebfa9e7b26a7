"""Reduction primitives: decompose_reduction and rfactor (TVM semantics).

A reduction block (`T.init()` plus an update) runs its init before the first reduction step of
each spatial point: code generation tests "every reduction iterator is 0" on every iteration.
`decompose_reduction` moves the init into its own block before the reduction loops, so the
update runs unguarded. `rfactor` turns one reduction loop into a spatial one by reducing into a
buffer with an extra dimension first, then summing that dimension in a second block: the
partial sums are independent, so that loop may then be bound to threads or run in parallel.
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..ir import make as mk
from ..ir.buffer import FlatBuffer
from ..ir.expr import BinOp, BufferLoad, IntImm, PrimExpr, UnaryOp, Var, const
from ..ir.func import PrimFunc
from ..ir.stmt import Block, BufferStore, For, IfThenElse, IterVar, SeqStmt, Stmt, seq
from ..ir.structural_equal import structural_equal
from ..ir.visit import substitute
from ..transform.region import annotate_regions
from . import regions as R
from .state import (
    NameGen,
    allocate_in_scope,
    block_path,
    child_blocks,
    enclosing_block,
    facts,
    find_loop,
    loop_path,
    remove_stmt,
    replace_block,
    replace_stmt,
    rewrite_stmts,
    uses_var,
)


def _block_loops(path: list[Stmt]) -> list[For]:
    out: list[For] = []
    for s in path[:-1]:
        if isinstance(s, Block):
            out = []
        elif isinstance(s, For):
            out.append(s)
    return out


def _related(f: For, ivs: list[IterVar]) -> bool:
    return any(uses_var(iv.value, [f.loop_var]) for iv in ivs)


def _copy_loops(loops: list[For], names: NameGen, suffix: str, primitive: str, dropped: list[For]) -> dict[Var, Var]:
    """Fresh variables for copies of `loops`; their ranges must not use a `dropped` loop."""
    gone = [f.loop_var for f in dropped]
    for f in loops:
        if uses_var(BinOp("+", f.min, f.extent), gone):
            raise ScheduleError(
                f"in `{primitive}`: expected loops whose ranges do not depend on the loops left out, but the "
                f"extent of `{f.loop_var.name}` does"
            )
    return {f.loop_var: Var(names(f.loop_var.name + suffix), f.loop_var.dtype) for f in loops}


def _nest(loops: list[For], mapping: dict[Var, Var], body: Stmt) -> Stmt:
    for f in reversed(loops):
        body = For(
            mapping[f.loop_var],
            substitute(f.min, mapping),
            substitute(f.extent, mapping),
            f.kind,
            body,
            f.thread,
            f.annotations,
        )
    return body


def _spatial_predicate(
    block: Block,
    kept: list[For],
    dropped: list[For],
    mapping: dict[Var, Var],
    new_ivs: list[IterVar],
    env: dict,
    primitive: str,
) -> PrimExpr | None:
    """The conjuncts of `block`'s predicate over the kept loops. A conjunct that also uses a
    dropped loop is left out; then every spatial binding must provably stay in its domain."""
    gone = [f.loop_var for f in dropped]
    kept_vars = [f.loop_var for f in kept]
    parts, mixed = [], False
    for c in mk.conjuncts(block.predicate):
        if not uses_var(c, gone):
            parts.append(substitute(c, mapping))
        elif uses_var(c, kept_vars):
            mixed = True
    if mixed:
        env = {**env}
        for f in kept:
            v = mapping[f.loop_var]
            lo = substitute(f.min, mapping)
            env[v] = (lo, mk.sub(mk.add(lo, substitute(f.extent, mapping)), IntImm(1, lo.dtype)))
        for iv in new_ivs:
            top = mk.sub(iv.extent, IntImm(1, iv.extent.dtype))
            if not (R.prove_le(IntImm(0, iv.value.dtype), iv.value, env) and R.prove_le(iv.value, top, env)):
                raise ScheduleError(
                    f"in `{primitive}`: expected a predicate of `{block.name}` whose spatial part stands alone, but "
                    f"`{iv.var.name}` needs a condition that mixes spatial and reduction loops"
                )
    return mk.conjunction(parts)


def _inline(stmt: Stmt) -> Stmt:
    """`stmt` with every block replaced by its body, iterators replaced by their bindings."""

    def fn(s):
        if not isinstance(s, Block):
            return None
        body = substitute(rewrite_stmts(s.body, fn), {iv.var: iv.value for iv in s.iter_vars})
        return body if s.predicate is None else IfThenElse(s.predicate, body)

    return rewrite_stmts(stmt, fn)


def decompose_reduction(func: PrimFunc, block: str, loop: Var) -> tuple[PrimFunc, str]:
    """Move a reduction block's `T.init()` into its own block, right before `loop`.

    It requires: a block with `T.init()`; `loop` one of the loops between the block and its
    parent block, outside every loop bound to a reduction iterator of the block (else the init
    would run again inside the reduction); a predicate whose spatial part stands alone.

    The init block (`<block>_init`) gets copies (`k_init`) of the loops from `loop` inwards that
    are bound to spatial iterators, with their kinds; the block loses its init, so the update runs
    without the "first reduction step" test. The init block runs for every spatial point, also
    when the reduction domain is empty, so an `if <empty>:` initialisation that lowering put
    right before `loop` and that does the same stores is dropped as redundant.

    Parameters: `block` the reduction block's name; `loop` the loop to put the init before.
    Returns the new function and the init block's name.

    Before (SpMM):
        with T.block("csrmm0"):
            ...
            if J_indptr[vi + 1] - J_indptr[vi] == 0:
                for k_init in T.serial(feat):
                    C[vi, k_init] = T.float32(0.0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                for k in T.serial(feat):
                    with T.block("csrmm1"):
                        ...
                        with T.init():
                            C[vi, vk] = T.float32(0.0)
                        C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
    `decompose_reduction(f, "csrmm1", j)`
    After:

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> j, _ = [loop.loop_var for loop in loops_of(f, "csrmm1")]
    >>> g, name = decompose_reduction(f, "csrmm1", j)
    >>> print(sp.schedule.fragment(g, "csrmm0"))
    with T.block("csrmm0"):
        vi = T.axis.spatial(m, i)
        for k_init in T.serial(feat):
            with T.block("csrmm1_init"):
                vk_init = T.axis.spatial(feat, k_init)
                C[vi, vk_init] = T.float32(0.0)
        for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
            for k in T.serial(feat):
                with T.block("csrmm1"):
                    vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                    vk = T.axis.spatial(feat, k)
                    C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
    """
    primitive = "decompose_reduction"
    path = block_path(func, block, primitive)
    blk = path[-1]
    if blk.init is None:
        raise ScheduleError(f"in `{primitive}`: expected a block with T.init(), but `{blk.name}` has none")
    loops = _block_loops(path)
    pos = next((k for k, f in enumerate(loops) if f.loop_var is loop), None)
    if pos is None:
        find_loop(func, loop, primitive)
        raise ScheduleError(
            f"in `{primitive}`: expected a loop between block `{blk.name}` and its parent block, but "
            f"`{loop.name}` is not"
        )
    s_ivs = [iv for iv in blk.iter_vars if iv.kind == "S"]
    r_ivs = [iv for iv in blk.iter_vars if iv.kind == "R"]
    for outer in loops[:pos]:
        if _related(outer, r_ivs):
            raise ScheduleError(
                f"in `{primitive}`: expected a loop outside every loop of a reduction iterator of `{blk.name}`, but "
                f"`{outer.loop_var.name}` (outside `{loop.name}`) is one"
            )
    chain = loops[pos:]
    kept = [f for f in chain if _related(f, s_ivs)]
    dropped = [f for f in chain if not _related(f, s_ivs)]
    env = facts(path[: path.index(chain[0])])

    guards = _path_guards(path, chain[0], kept, dropped, blk, primitive)

    def init_nest(names: NameGen) -> tuple[Stmt, str]:
        mapping = _copy_loops(kept, names, "_init", primitive, dropped)
        new_ivs = [
            IterVar(Var(names(iv.var.name + "_init"), iv.var.dtype), iv.extent, "S", substitute(iv.value, mapping))
            for iv in s_ivs
        ]
        pred = _spatial_predicate(blk, kept, dropped, mapping, new_ivs, env, primitive)
        for g in guards:  # the `if`s between `loop` and the block guard the init as well
            pred = mk.and_(pred, substitute(g, mapping))
        body = substitute(blk.init, {iv.var: n.var for iv, n in zip(s_ivs, new_ivs)})
        name = names.block(blk.name + "_init")
        return _nest(kept, mapping, Block(name, tuple(new_ivs), (), (), body, predicate=pred)), name

    out = replace_block(func, block, lambda b: b.replace(init=None))
    guard = _redundant_guard(out, loop, init_nest(NameGen(func))[0], blk.init)
    if guard is not None:  # lowering's "initialise an empty reduction domain" guard, now redundant
        out = out.replace(body=remove_stmt(out.body, guard))
    nest, init_name = init_nest(NameGen(out))
    target = loop_path(out, loop, primitive)[-1]
    return annotate_regions(replace_stmt(out, target, seq(nest, target))), init_name


def _path_guards(
    path: list[Stmt], top: For, kept: list[For], dropped: list[For], blk: Block, primitive: str
) -> list[PrimExpr]:
    """The conditions of the `if`s between loop `top` and the block (negated in an else branch),
    which guard the init too. One over dropped (reduction) loops only limits reduction steps and
    is left out, as the init runs for every spatial point; one mixing both kinds is refused."""
    gone = [f.loop_var for f in dropped]
    kept_vars = [f.loop_var for f in kept]
    out: list[PrimExpr] = []
    start = next(k for k, st in enumerate(path) if st is top)
    for st, below in zip(path[start:], path[start + 1 :]):
        if not isinstance(st, IfThenElse):
            continue
        if uses_var(st.condition, gone):
            if uses_var(st.condition, kept_vars):
                raise ScheduleError(
                    f"in `{primitive}`: expected no `if` between the loop and `{blk.name}` whose condition mixes "
                    "spatial and reduction loops, but one does"
                )
            continue
        out.append(st.condition if below is st.then_case else UnaryOp("not", st.condition))
    return out


def _redundant_guard(func: PrimFunc, loop: Var, nest: Stmt, init: Stmt) -> Stmt | None:
    """Lowering's `if <empty>:` initialisation made redundant by the init nest put before `loop`:
    the `if` right before `loop` whose body does what `nest` does (with blocks inlined); or,
    where `loop` sits in loops of the block's spatial iterators (split and reordered before the
    decomposition, as a CUDA schedule does), the `if` without else right before the outermost of
    them whose body only stores the init's value into the init's buffer: the init nest runs inside
    those loops for every spatial point of this instance of the parent block, before anything
    reads them, so the guard's stores are overwritten with the same values."""
    lpath = loop_path(func, loop, "decompose_reduction")
    target, parent = lpath[-1], lpath[-2] if len(lpath) > 1 else None
    prev = _before(parent, target)
    if isinstance(prev, IfThenElse) and prev.else_case is None and structural_equal(prev.then_case, _inline(nest)):
        return prev
    k = len(lpath) - 1
    while k > 0 and isinstance(lpath[k - 1], For):
        k -= 1
    if k == len(lpath) - 1 or k == 0:
        return None
    prev = _before(lpath[k - 1], lpath[k])
    if (
        isinstance(prev, IfThenElse)
        and prev.else_case is None
        and _emptiness_test(prev.condition)
        and _stores_only(prev.then_case, init)
    ):
        return prev
    return None


def _emptiness_test(cond: PrimExpr) -> bool:
    """Whether `cond` is lowering's test of an empty reduction domain: `e == 0`, or an `or` of them."""
    if isinstance(cond, BinOp) and cond.op == "or":
        return _emptiness_test(cond.a) and _emptiness_test(cond.b)
    return isinstance(cond, BinOp) and cond.op == "==" and isinstance(cond.b, IntImm) and cond.b.value == 0


def _before(parent: Stmt | None, target: Stmt) -> Stmt | None:
    """The statement right before `target` in the sequence `parent` (None if there is none)."""
    if not isinstance(parent, SeqStmt):
        return None
    k = next(i for i, s in enumerate(parent.stmts) if s is target)
    return parent.stmts[k - 1] if k > 0 else None


def _stores_only(s: Stmt, init: Stmt) -> bool:
    """Whether `s` is serial loops, sequences and stores of `init`'s value into `init`'s buffer."""
    if isinstance(s, For):
        return s.kind == "serial" and _stores_only(s.body, init)
    if isinstance(s, SeqStmt):
        return all(_stores_only(x, init) for x in s.stmts)
    if isinstance(s, BufferStore):
        return isinstance(init, BufferStore) and s.buffer is init.buffer and structural_equal(s.value, init.value)
    return False


def _sum_update(blk: Block, primitive: str) -> tuple[object, tuple[PrimExpr, ...], PrimExpr]:
    """(buffer, indices, e) of a block whose update is `C[idx] = C[idx] + e` and init `C[idx] = c`."""
    s, init = blk.body, blk.init
    if isinstance(s, BufferStore) and isinstance(s.value, BinOp) and s.value.op == "+":
        here = BufferLoad(s.buffer, s.indices)
        e = s.value.b if s.value.a == here else s.value.a if s.value.b == here else None
        init_ok = isinstance(init, BufferStore) and init.buffer is s.buffer and init.indices == s.indices
        if e is not None and init_ok:
            return s.buffer, s.indices, e
    raise ScheduleError(
        f"in `{primitive}`: expected a sum reduction (init `C[...] = c`, update `C[...] = C[...] + e`), but block "
        f"`{blk.name}` is not one"
    )


def rfactor(func: PrimFunc, loop: Var, factor_axis: int) -> tuple[PrimFunc, str]:
    """Factor a sum reduction over one of its loops: partial sums per iteration of `loop` into a
    new buffer, then a block that adds them up.

    It requires: exactly one block under `loop`, a sum reduction (init `C[...] = c`, update
    `C[...] = C[...] + e`); `loop` bound to a reduction iterator; every loop of a reduction
    iterator starting at 0 and bound to no spatial iterator; `loop`'s extent and the extents of
    the spatial iterators independent of the block's loops; `factor_axis` in [-(n + 1), n] for a
    block with `n` spatial iterators; no other block accessing `C` in the block's loop nest.

    What it builds (TVM's rfactor):
    - the buffer `C_rf` (scope `global`; see `set_scope`), allocated in the block's parent block,
      or at the function level (scratch the runtime allocates per call) for a block at the root,
      indexed by the block's spatial iterators with the `loop` dimension inserted at
      `factor_axis`. (TVM indexes it like `C`; the spatial iterators are the same thing for a
      dense `C` written at its iterators, and also work for a sparse `C`, whose positions a
      fused iteration only reaches through a search);
    - the block `<block>_rf` in place of the block, under the same loops: the spatial iterators,
      then one iterator per reduction loop (spatial for `loop`, reduction for the others); it sums
      into `C_rf` with init 0;
    - after the loop nest, the write-back block with the original name: copies (`j_1`) of the
      loops of spatial iterators and of `loop`, summing `C_rf` over `loop`'s dimension into `C`
      with the original init.
    An `C_rf` element whose reduction domain is empty or predicated away is never initialised by
    `<block>_rf` (its init runs on the first reduction step): it holds the allocation's initial
    value, zero on the CPU and in the interpreter. On CUDA call
    `decompose_reduction(<block>_rf, <outermost reduction loop>)` as well.

    Parameters: `loop` the loop variable; `factor_axis` the position of the new dimension. Returns
    the new function and the name of the rfactor block.

    Before (SDDMM, after `split(k, [None, 4])`):
        for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
            for k_outer, k_inner in T.grid((feat + 3) // 4, 4):
                with T.block("sddmm1"):
                    vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                    vk = T.axis.reduce(feat, k_outer * 4 + k_inner)
                    T.where(k_outer * 4 + k_inner < feat)
                    with T.init():
                        C[vi, vj] = T.float32(0.0)
                    C[vi, vj] = C[vi, vj] + A[vi, vj] * X[vi, vk] * Y[J_indices[vi, vj], vk]
    `rfactor(f, k_inner, 1)`
    After:

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.loops import split
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.sddmm_script())["main"]
    >>> _, k = [loop.loop_var for loop in loops_of(f, "sddmm1")]
    >>> f, (ko, ki) = split(f, k, [None, 4])
    >>> g, name = rfactor(f, ki, 1)
    >>> print(sp.schedule.fragment(g, "sddmm0"))
    with T.block("sddmm0"):
        vi = T.axis.spatial(m, i)
        C_rf = T.alloc_buffer((J_indptr[vi + 1] - J_indptr[vi], 4), "float32")
        if feat == 0:
            for j_init in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                C[vi, j_init] = T.float32(0.0)
        for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
            for k_outer in T.serial((feat + 3) // 4):
                for k_inner in T.serial(4):
                    with T.block("sddmm1_rf"):
                        vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                        vk_outer = T.axis.reduce((feat + 3) // 4, k_outer)
                        vk_inner = T.axis.spatial(4, k_inner)
                        T.where(k_outer * 4 + k_inner < feat)
                        with T.init():
                            C_rf[vj, vk_inner] = T.float32(0.0)
                        C_rf[vj, vk_inner] = C_rf[vj, vk_inner] + A[vi, vj] * X[vi, vk_outer * 4 + vk_inner] * Y[...]
        for j_1 in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
            for k_inner_1 in T.serial(4):
                with T.block("sddmm1"):
                    vj_1 = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j_1)
                    vk_inner_1 = T.axis.reduce(4, k_inner_1)
                    with T.init():
                        C[vi, vj_1] = T.float32(0.0)
                    C[vi, vj_1] = C[vi, vj_1] + C_rf[vj_1, vk_inner_1]
    """
    primitive = "rfactor"
    lpath = loop_path(func, loop, primitive)
    target = lpath[-1]
    under = child_blocks(target)
    if len(under) != 1:
        raise ScheduleError(
            f"in `{primitive}`: expected a loop with exactly one block under it, but `{loop.name}` has {len(under)}"
        )
    blk = under[0]
    path = block_path(func, blk.name, primitive)
    buf, idx, e = _sum_update(blk, primitive)
    s_ivs = [iv for iv in blk.iter_vars if iv.kind == "S"]
    r_ivs = [iv for iv in blk.iter_vars if iv.kind == "R"]
    if not _related(target, r_ivs):
        raise ScheduleError(
            f"in `{primitive}`: expected a loop bound to a reduction iterator of `{blk.name}`, but `{loop.name}` is not"
        )
    loops = _block_loops(path)
    red_loops = [f for f in loops if _related(f, r_ivs)]
    for f in red_loops:
        if _related(f, s_ivs):
            raise ScheduleError(
                f"in `{primitive}`: expected reduction loops bound to no spatial iterator, but `{f.loop_var.name}` "
                f"of `{blk.name}` is bound to both kinds"
            )
        if not (isinstance(f.min, IntImm) and f.min.value == 0):
            raise ScheduleError(f"in `{primitive}`: expected loops starting at 0, but `{f.loop_var.name}` does not")
    others = [f.loop_var for f in loops if f is not target]
    if uses_var(target.extent, others):
        raise ScheduleError(
            f"in `{primitive}`: expected an extent of `{loop.name}` independent of the other loops of `{blk.name}`"
        )
    ndim = len(s_ivs)
    axis = factor_axis + ndim + 1 if isinstance(factor_axis, int) and factor_axis < 0 else factor_axis
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, int) or not 0 <= axis <= ndim:
        raise ScheduleError(
            f"in `{primitive}`: expected a factor_axis in [{-(ndim + 1)}, {ndim}] ({ndim} spatial iterators of "
            f"`{blk.name}`), but got {factor_axis!r}"
        )
    loop_vars = [f.loop_var for f in loops]
    for iv in s_ivs:
        if uses_var(iv.extent, loop_vars):
            raise ScheduleError(
                f"in `{primitive}`: expected spatial iterators whose extents do not depend on the block's loops (they "
                f"size `{buf.name}_rf`), but the extent of `{iv.var.name}` does"
            )
    top = loops[0]
    for other in R.collect(top)[0]:
        if other.buffer is buf and other.block is not None and other.block.name != blk.name:
            raise ScheduleError(
                f"in `{primitive}`: expected `{blk.name}` to be the only block accessing `{buf.name}` in its "
                f"loop nest, but `{other.block.name}` does too"
            )
    scope = enclosing_block(path)
    names = NameGen(func)
    shape = [iv.extent for iv in s_ivs]
    shape.insert(axis, target.extent)
    rf_buf = FlatBuffer(names(f"{buf.name}_rf"), tuple(shape), buf.dtype)

    def rf_index(spatial: list[Var], factor: Var) -> tuple[PrimExpr, ...]:
        out: list[PrimExpr] = list(spatial)
        out.insert(axis, factor)
        return tuple(out)

    # The rfactor block: under the original loops, one iterator per reduction loop.
    loop_ivs = {
        f.loop_var: IterVar(
            Var(names("v" + f.loop_var.name), f.loop_var.dtype), f.extent, "S" if f is target else "R", f.loop_var
        )
        for f in red_loops
    }
    to_ivs = {v: iv.var for v, iv in loop_ivs.items()}
    r_subst = {iv.var: substitute(iv.value, to_ivs) for iv in r_ivs}
    factor = loop_ivs[target.loop_var].var
    rf_idx = rf_index([iv.var for iv in s_ivs], factor)
    zero = const(0, buf.dtype)
    rf_name = names.block(blk.name + "_rf")
    update = BufferStore(rf_buf, rf_idx, BinOp("+", BufferLoad(rf_buf, rf_idx), substitute(e, r_subst)))
    rf_init: Stmt | None = BufferStore(rf_buf, rf_idx, zero)
    if len(red_loops) == 1:  # `loop` was the only reduction loop: each partial is one term
        update, rf_init = BufferStore(rf_buf, rf_idx, substitute(e, r_subst)), None
    rf_block = Block(
        rf_name,
        (*s_ivs, *loop_ivs.values()),
        (),
        (),
        update,
        rf_init,
        predicate=blk.predicate,
        annotations=blk.annotations,
    )

    # The write-back block: copies of the spatial loops and of `loop`, reducing over `loop`.
    kept = [f for f in loops if f is target or _related(f, s_ivs)]
    dropped = [f for f in loops if f not in kept]
    mapping = _copy_loops(kept, names, "", primitive, dropped)
    wb_s = [
        IterVar(Var(names(iv.var.name), iv.var.dtype), iv.extent, "S", substitute(iv.value, mapping)) for iv in s_ivs
    ]
    wb_r = IterVar(Var(names("v" + loop.name), loop.dtype), target.extent, "R", mapping[loop])
    s_map = {iv.var: n.var for iv, n in zip(s_ivs, wb_s)}
    out_idx = tuple(substitute(i, s_map) for i in idx)
    wb_rf_idx = rf_index([iv.var for iv in wb_s], wb_r.var)
    env = facts(path[: path.index(top)])
    pred = _spatial_predicate(blk, kept, dropped, mapping, wb_s, env, primitive)
    wb_block = Block(
        blk.name,
        (*wb_s, wb_r),
        (),
        (),
        BufferStore(buf, out_idx, BinOp("+", BufferLoad(buf, out_idx), BufferLoad(rf_buf, wb_rf_idx))),
        substitute(blk.init, s_map),
        predicate=pred,
    )
    new_top = rewrite_stmts(top, lambda s: rf_block if s is blk else None)
    out = replace_stmt(func, top, seq(new_top, _nest(kept, mapping, wb_block)))
    out = allocate_in_scope(out, scope, rf_buf)
    return annotate_regions(out), rf_name
