"""Co-iteration in `lower_sparse_iter`: a reduction over a dense iterator that reads several
sparse buffers at it walks their stored coordinates together instead of searching each one.

    with T.sp_iter([I, J], "SR", "dot") as [i, j]:          # J dense, A over (I, JA), B over (I, JB)
        with T.init():
            c[i] = 0.0
        c[i] = c[i] + A[i, j] * B[i, j]

lowers (without this pass: a loop over every `j` with a binary search in A's and in B's row) to a
two-pointer merge over the sorted coordinates of the two rows. Which coordinates the merge visits
comes from the iteration lattice of the update's expression (`sparsetir_py.arith.lattice`,
TACO's lattices): its intersection for `A * B`, the union for `A + B` with each single-operand
point computing the expression simplified with the absent operand as 0. A coordinate outside the
lattice adds 0 to the reduction, so skipping it changes nothing for finite values; as in TACO,
`0 * inf` there counts as 0, where the dense semantics of the interpreter give NaN (a non-finite
value of one operand where the other stores nothing, under `*`, or a non-finite scalar).

The same holds where the iterator walks one operand's own level (`[I, JA]`, A over `(I, JA)`):
every stored A is visited as before, and B is found by a second pointer that only moves forward
instead of a binary search per entry; there the expression is evaluated as written, B reading its
default where it stores nothing, so the result is the dense semantics exactly.

More than two operands (`A[i, j] * B[i, j] * D[i, j]`, `A + B + D`) merge the same way, one
pointer each: an intersection lattice leapfrogs (the pointers behind the greatest coordinate catch
up, one step each, until all meet), any other walks the least coordinate of all rows, updates with
the operands stored there (the others read as 0) where the lattice has that point, and moves the
pointers that stood on it. Where the iterator walks A's own level, each other operand has a
forward pointer of its own.

What it takes (`match`; anything else keeps the search lowering): the iteration's last iterator
is a reduction over a dense-fixed axis (or over A's sorted compressed level) and the others are
spatial; the body is one update `X[e] = X[e] + E`, or `X[e] = X[e] - E` (adding `-E`: the
lattice of `E`), with `e` free of that iterator; `E` is made of `+`, `-` (binary and unary), `*`,
casts between numeric dtypes, constants and loads, and reads the iterator only as the last
coordinate of two to `MAX_OPERANDS` sparse buffers (default value 0) whose last axes are different
sorted compressed levels (`sparse_variable`) of one parent, as long as the dense axis (the same
length expression: a merge visits every stored coordinate, the iteration only those below the
axis's length), indexed before it by the iterators of their parent axes, in order; and `E` is 0
where none is stored. A cast, written (`T.float64(A[i, j] * B[i, j])`) or the front end's where
the operands are narrower than `X`, is 0 where its operand is: it passes through the lattice and
is applied again where each point's value is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arith.lattice import ZERO, Lattice, lattice_from_tree, simplify_absent
from ..ir import dtype as dt
from ..ir import make as mk
from ..ir.axis import DENSE_FIXED, SPARSE_VARIABLE, Axis
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BinOp, BufferLoad, Cast, IntImm, PrimExpr, Select, UnaryOp, Var, const
from ..ir.stmt import BufferStore, IfThenElse, SparseIteration, Stmt, While, seq
from ..ir.visit import walk

_OPS = ("+", "-", "*")
#: The most sparse operands one merge co-iterates (their names in lattice expressions: A, B, C, ...).
MAX_OPERANDS = 8
NAMES = "ABCDEFGH"


@dataclass(frozen=True)
class CoIteration:
    """A matched reduction: the update's target and the operands it co-iterates."""

    iteration: SparseIteration
    store: BufferStore
    operands: tuple[BufferLoad, ...]  # A[..., j], B[..., j], ... as written
    tree: tuple  # the update's expression, operands named "A", "B", ..., other leaves "s<k>"
    leaves: dict[str, PrimExpr]
    lattice: Lattice
    own: bool = False  # the iterator walks A's own level (every stored A), not a dense axis


def match(it: SparseIteration) -> CoIteration | None:
    """The co-iteration `it` lowers to, or None when it does not have the shape above."""
    if len(it.axes) < 2 or not isinstance(it.axes[-1], Axis):
        return None
    last = it.axes[-1]
    own = last.kind == SPARSE_VARIABLE and last.sorted
    if last.kind != DENSE_FIXED and not own:
        return None
    if it.kinds != "S" * (len(it.axes) - 1) + "R" or not isinstance(it.body, BufferStore):
        return None
    if any(not isinstance(a, Axis) for a in it.axes):
        return None
    j = it.iter_vars[-1]
    store = it.body
    value = store.value
    current = BufferLoad(store.buffer, store.indices)
    increment = _increment(value, current)
    if increment is None or any(_uses(e, j) for e in store.indices):
        return None
    operands: list[BufferLoad] = []
    leaves: dict[str, PrimExpr] = {}
    tree = _tree(increment, j, it, operands, leaves)
    if tree is None or len(operands) < 2:
        return None
    if own:
        # The iteration walks one operand's own level (A's); the others are found by pointers of
        # their own that only move forward, instead of a search per coordinate.
        mine = [t for t, op in enumerate(operands) if op.buffer.axes[-1] is last]
        if not mine:
            return None
        order = [mine[0], *(t for t in range(len(operands)) if t != mine[0])]
        tree = _rename(tree, {NAMES[old]: NAMES[new] for new, old in enumerate(order)})
        operands = [operands[t] for t in order]
    axes = [op.buffer.axes[-1] for op in operands]
    if len(set(axes)) != len(axes) or any(a.parent is not axes[0].parent for a in axes):
        return None
    names = set(NAMES[: len(operands)])
    if not own and any(a.length != last.length for a in axes):
        # The merge visits every stored coordinate; the iteration only those below J's length.
        return None
    if not own and any(op.buffer.default_value != 0 for op in operands):
        return None  # an unstored coordinate reads a nonzero: the lattice's reasoning does not hold
    if not own and simplify_absent(tree, names) != ZERO:
        return None  # nonzero where none is stored (`A * B + 1`): every coordinate counts
    return CoIteration(it, store, tuple(operands), tree, leaves, lattice_of(tree, len(operands)), own)


def _rename(tree: tuple, names: dict[str, str]) -> tuple:
    """`tree` with its operand names mapped through `names`."""
    if tree[0] == "name":
        return ("name", names.get(tree[1], tree[1]))
    if tree[0] == "num":
        return tree
    if tree[0] == "cast":
        return ("cast", _rename(tree[1], names), tree[2])
    return (tree[0], *(_rename(t, names) for t in tree[1:]))


def _increment(value: PrimExpr, current: BufferLoad) -> PrimExpr | None:
    """`E` of an update `X + E`, also written `X + a - b` (Python's left-nested `(X + a) - b`:
    `E` is then `a - b`) or `X - E` (`-E`); None when `value` is not one."""
    if not (isinstance(value, BinOp) and value.op in ("+", "-")):
        return None
    if value.a == current:
        return value.b if value.op == "+" else mk.neg(value.b)
    rest = _increment(value.a, current)
    return None if rest is None else BinOp(value.op, rest, value.b)


def lattice_of(tree: tuple, count: int = 2) -> Lattice:
    return lattice_from_tree(tree, tuple(NAMES[:count]))


def _uses(e: PrimExpr, v: Var) -> bool:
    return any(n is v or n == v for n in walk(e) if isinstance(n, Var))


def _tree(e: PrimExpr, j: Var, it: SparseIteration, operands: list, leaves: dict) -> tuple | None:
    """`e` as a lattice expression tree; None where it is not one co-iteration can take."""
    if isinstance(e, BinOp) and e.op in _OPS:
        a = _tree(e.a, j, it, operands, leaves)
        b = _tree(e.b, j, it, operands, leaves)
        return None if a is None or b is None else (e.op, a, b)
    if isinstance(e, UnaryOp) and e.op == "-":
        a = _tree(e.a, j, it, operands, leaves)
        return None if a is None else ("neg", a)
    if isinstance(e, Cast) and _numeric(e.dtype) and _numeric(e.value.dtype):
        # cast(0) == 0: the cast does not move the zeros the lattice reasons about; `_expr`
        # applies it again where the value is rebuilt.
        a = _tree(e.value, j, it, operands, leaves)
        return None if a is None else ("cast", a, e.dtype)
    if isinstance(e, BufferLoad) and _uses_any(e, j):
        if e in operands:  # the same operand read again
            return ("name", NAMES[operands.index(e)])
        if not _operand(e, j, it) or len(operands) == MAX_OPERANDS:
            return None
        operands.append(e)
        return ("name", NAMES[len(operands) - 1])
    if _uses_any(e, j):
        return None
    name = f"s{len(leaves)}"
    leaves[name] = e
    return ("name", name)


def _numeric(dtype: str) -> bool:
    return dt.is_int(dtype) or dt.is_float(dtype)


def _uses_any(e: PrimExpr, j: Var) -> bool:
    return any(isinstance(n, Var) and n == j for n in walk(e))


def _operand(load: BufferLoad, j: Var, it: SparseIteration) -> bool:
    """`B[i0, ..., j]`: a sparse buffer whose last axis is a sorted compressed level under the
    iterated parent, indexed by the iterators of its axes before it, `j` last and nowhere else."""
    buf = load.buffer
    if not isinstance(buf, SparseBuffer) or load.indices[-1] != j:
        return False
    last = buf.axes[-1]
    if last.kind != SPARSE_VARIABLE or not last.sorted or len(buf.axes) < 2 or last.parent is not buf.axes[-2]:
        return False
    for axis, index in zip(buf.axes[:-1], load.indices[:-1]):
        if not isinstance(index, Var) or index not in it.iter_vars or index == j:
            return False
        if it.axes[it.iter_vars.index(index)] is not axis:
            return False
    return True


def lower(low, co: CoIteration) -> Stmt:
    """The merged loop of `co` inside the lowering `low` (a `lower_sparse_iter.Lowering`, with the
    spatial iterators bound): the init, then a two-pointer merge of the operands' rows."""
    it = co.iteration
    init = low.translate_stmt(it.init) if it.init is not None else None
    rows = []
    for op in co.operands:
        axis = op.buffer.axes[-1]
        parent = low.iters[op.indices[-2]]
        chain = tuple(low.iters[v].chain[-1] for v in op.indices[:-1])
        pos = FlatBuffer(low.fresh(f"p_{op.buffer.name}"), (IntImm(1, "int32"),), axis.idtype, scope="local")
        rows.append((op, axis, chain, pos, low.row_extent(axis, parent.gpos)))
    if len(rows) > 2:
        return _lower_many(low, co, init, rows)
    (a, ax_a, chain_a, pa, end_a), (b, ax_b, chain_b, pb, end_b) = rows
    at_a, at_b = BufferLoad(pa, (IntImm(0, "int32"),)), BufferLoad(pb, (IntImm(0, "int32"),))
    ja = mk.cast("int64", BufferLoad(low.indices[ax_a], (*chain_a, at_a)))
    jb = mk.cast("int64", BufferLoad(low.indices[ax_b], (*chain_b, at_b)))
    loads = {"A": BufferLoad(a.buffer, (*chain_a, at_a)), "B": BufferLoad(b.buffer, (*chain_b, at_b))}

    def update(stored: set[str]) -> Stmt | None:
        point = co.lattice.point(stored)
        if point is None:
            return None
        tree = simplify_absent(co.tree, {"A", "B"} - stored)
        value = _expr(tree, {**{k: low.translate_expr(v) for k, v in co.leaves.items()}, **loads})
        indices = tuple(low.translate_expr(e) for e in co.store.indices)
        target = co.store.buffer
        return BufferStore(target, indices, mk.add(BufferLoad(target, indices), mk.cast(target.dtype, value)))

    def step(p: FlatBuffer, dtype: str) -> Stmt:
        return BufferStore(p, (IntImm(0, "int32"),), mk.add(BufferLoad(p, (IntImm(0, "int32"),)), IntImm(1, dtype)))

    advance_a, advance_b = step(pa, ax_a.idtype), step(pb, ax_b.idtype)
    # The positions are the enclosing block's own buffers (`Lowering.block_allocs`), so that its
    # regions, which read the operands at them, are in their scope.
    low.block_allocs.extend((pa, pb))
    if co.own:
        return seq(init, *_zero(pa, pb, ax_a, ax_b), _own_merge(co, low, at_a, end_a, at_b, end_b, ja, jb, loads,
                                                               advance_a, advance_b))  # fmt: skip
    both = seq(update({"A", "B"}), advance_a, advance_b)
    only_a, only_b = update({"A"}), update({"B"})
    merge = While(
        mk.and_(mk.cmp("<", at_a, end_a), mk.cmp("<", at_b, end_b)),
        IfThenElse(
            mk.cmp("==", ja, jb),
            both,
            IfThenElse(mk.cmp("<", ja, jb), seq(only_a, advance_a), seq(only_b, advance_b)),
        ),
    )
    tails = [
        While(mk.cmp("<", at, end), seq(only, advance))
        for only, at, end, advance in ((only_a, at_a, end_a, advance_a), (only_b, at_b, end_b, advance_b))
        if only is not None
    ]
    zero = _zero(pa, pb, ax_a, ax_b)
    return seq(init, *zero, merge, *tails)


def _zero(pa: FlatBuffer, pb: FlatBuffer, ax_a: Axis, ax_b: Axis) -> tuple[Stmt, Stmt]:
    return (BufferStore(pa, (IntImm(0, "int32"),), IntImm(0, ax_a.idtype)),
            BufferStore(pb, (IntImm(0, "int32"),), IntImm(0, ax_b.idtype)))  # fmt: skip


def _own_merge(co: CoIteration, low, at_a, end_a, at_b, end_b, ja, jb, loads: dict, advance_a, advance_b) -> Stmt:
    """Every stored A in order, B's pointer moved past the smaller coordinates first; the update
    reads B where it stores A's coordinate and B's default (0) elsewhere, exactly as the search
    lowering would (no lattice point is skipped: the iteration's domain is A's coordinates)."""
    b = co.operands[1].buffer
    found = mk.and_(mk.cmp("<", at_b, end_b), mk.cmp("==", jb, ja))
    b_value = Select(found, loads["B"], const(b.default_value, b.dtype))
    value = _expr(co.tree, {**{k: low.translate_expr(v) for k, v in co.leaves.items()}, "A": loads["A"], "B": b_value})
    indices = tuple(low.translate_expr(e) for e in co.store.indices)
    target = co.store.buffer
    update = BufferStore(target, indices, mk.add(BufferLoad(target, indices), mk.cast(target.dtype, value)))
    seek = While(mk.and_(mk.cmp("<", at_b, end_b), mk.cmp("<", jb, ja)), advance_b)
    return While(mk.cmp("<", at_a, end_a), seq(seek, update, advance_a))


def _expr(tree: tuple, env: dict[str, PrimExpr]) -> PrimExpr:
    kind = tree[0]
    if kind == "name":
        return env[tree[1]]
    if kind == "num":
        return const(tree[1])
    if kind == "neg":
        return mk.neg(_expr(tree[1], env))
    if kind == "cast":
        return mk.cast(tree[2], _expr(tree[1], env))
    return mk.binop(kind, _expr(tree[1], env), _expr(tree[2], env))


def _lower_many(low, co: CoIteration, init: Stmt | None, rows: list) -> Stmt:
    """The merge of three or more operands (module docstring), one pointer per operand and the
    row's current coordinate `jm` in a local buffer (computed once per step, before any pointer
    moves)."""
    zero = IntImm(0, "int32")
    names = NAMES[: len(rows)]
    at = [BufferLoad(pos, (zero,)) for _, _, _, pos, _ in rows]
    end = [e for *_, e in rows]
    head = [mk.cast("int64", BufferLoad(low.indices[axis], (*chain, p))) for (_, axis, chain, _, _), p in zip(rows, at)]
    load = [BufferLoad(op.buffer, (*chain, p)) for (op, _, chain, _, _), p in zip(rows, at)]
    advance = [BufferStore(pos, (zero,), mk.add(p, IntImm(1, axis.idtype))) for (_, axis, _, pos, _), p in
               zip(rows, at)]  # fmt: skip
    # The positions (and the coordinate) are the enclosing block's own buffers (see `lower`).
    low.block_allocs.extend(pos for *_, pos, _ in rows)
    starts = [BufferStore(pos, (zero,), IntImm(0, axis.idtype)) for _, axis, _, pos, _ in rows]
    leaves = {k: low.translate_expr(v) for k, v in co.leaves.items()}
    indices = tuple(low.translate_expr(e) for e in co.store.indices)
    target = co.store.buffer

    def update(env: dict[str, PrimExpr]) -> Stmt:
        value = mk.cast(target.dtype, _expr(co.tree, {**leaves, **env}))
        return BufferStore(target, indices, mk.add(BufferLoad(target, indices), value))

    def fold(op: str, xs: list[PrimExpr]) -> PrimExpr:
        out = xs[0]
        for x in xs[1:]:
            out = BinOp(op, out, x)
        return out

    if co.own:
        # Every stored A in order; each other operand's pointer first moves past smaller
        # coordinates, then reads where it stands on A's coordinate and its default elsewhere.
        seeks = [While(mk.and_(mk.cmp("<", at[t], end[t]), mk.cmp("<", head[t], head[0])), advance[t])
                 for t in range(1, len(rows))]  # fmt: skip
        env = {names[0]: load[0]}
        for t in range(1, len(rows)):
            found = mk.and_(mk.cmp("<", at[t], end[t]), mk.cmp("==", head[t], head[0]))
            buf = co.operands[t].buffer
            env[names[t]] = Select(found, load[t], const(buf.default_value, buf.dtype))
        return seq(init, *starts, While(mk.cmp("<", at[0], end[0]), seq(*seeks, update(env), advance[0])))
    jm_buf = FlatBuffer(low.fresh("j_merge"), (IntImm(1, "int32"),), "int64", scope="local")
    jm = BufferLoad(jm_buf, (zero,))
    low.block_allocs.append(jm_buf)
    if co.lattice.kind == "intersection":
        # Leapfrog: a point where every pointer stands on the greatest coordinate.
        inside = fold("and", [mk.cmp("<", at[t], end[t]) for t in range(len(rows))])
        meet = fold("and", [mk.cmp("==", h, jm) for h in head])
        behind = [IfThenElse(mk.cmp("<", head[t], jm), advance[t]) for t in range(len(rows))]
        step = seq(BufferStore(jm_buf, (zero,), fold("max", head)),
                   IfThenElse(meet, seq(update(dict(zip(names, load))), *advance), seq(*behind)))  # fmt: skip
        return seq(init, *starts, While(inside, step))
    # Union: the least coordinate of the rows that have one left; the operands standing on it are
    # stored there, the others read 0.
    far = const(2**62, "int64")
    heads = [Select(mk.cmp("<", at[t], end[t]), head[t], far) for t in range(len(rows))]
    stored = [mk.and_(mk.cmp("<", at[t], end[t]), mk.cmp("==", head[t], jm)) for t in range(len(rows))]
    env = {}
    for t, name in enumerate(names):
        buf = co.operands[t].buffer
        env[name] = Select(stored[t], load[t], const(0, buf.dtype))
    present = _presence(co.tree, dict(zip(names, stored)))
    step = seq(
        BufferStore(jm_buf, (zero,), fold("min", heads)),
        IfThenElse(present, update(env)) if present is not None else update(env),
        *[IfThenElse(stored[t], advance[t]) for t in range(len(rows))],
    )
    remaining = fold("or", [mk.cmp("<", at[t], end[t]) for t in range(len(rows))])
    return seq(init, *starts, While(remaining, step))


def _presence(tree: tuple, stored: dict[str, PrimExpr]) -> PrimExpr | None:
    """Where `tree` is not 0 for want of stored operands, as a condition over which operands are
    stored (None: everywhere). A product needs both factors, a sum either term."""
    kind = tree[0]
    if kind == "name":
        return stored.get(tree[1])
    if kind == "num":
        return None if tree[1] != 0 else const(False, "bool")
    if kind in ("neg", "cast"):
        return _presence(tree[1], stored)
    a, b = _presence(tree[1], stored), _presence(tree[2], stored)
    if kind == "*":
        return mk.and_(a, b)
    return None if a is None or b is None else mk.or_(a, b)
