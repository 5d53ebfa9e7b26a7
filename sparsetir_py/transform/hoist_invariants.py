"""`hoist_loop_invariants`: move loads of read-only buffers out of loops that do not change them.

Numba arrays carry no aliasing information, so LLVM keeps reloading `A[indptr[i] + j]` and
`indices[indptr[i] + j]` on every iteration of the feature loop that writes `C`. This Stage III
pass binds such loads to local values (`LetStmt`) just before the loop:

- only buffers that the function never writes are considered, so the value cannot change;
- only loops with a positive constant extent, so a hoisted load never runs where the original
  would not have run at all;
- only loads evaluated on every iteration (not under an `if`, a block predicate, an init, a
  select branch, the right side of `and`/`or` or in a `while` body), so hoisting reads nothing
  new;
- block iterators are seen through (`vj` is its binding `j`), and the hoisted expression is
  written with the bindings, so it is valid outside the block.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import make as mk
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BinOp, BufferLoad, Cast, FloatImm, IntImm, PrimExpr, Select, Var
from ..ir.func import IRModule, PrimFunc
from ..ir.stmt import Allocate, AtomicAdd, Block, BufferStore, For, IfThenElse, LetStmt, SeqStmt, Stmt, While
from ..ir.visit import children, map_children, post_order_rewrite, substitute, walk


def _bound_in(stmt: Stmt) -> tuple[set[Var], dict[Var, PrimExpr]]:
    """Variables bound inside `stmt`, and block iterators -> their bindings."""
    bound: set[Var] = set()
    aliases: dict[Var, PrimExpr] = {}
    for n in walk(stmt):
        if isinstance(n, For):
            bound.add(n.loop_var)
        elif isinstance(n, LetStmt):
            bound.add(n.var)
        elif isinstance(n, Block):
            for iv in n.iter_vars:
                bound.add(iv.var)
                aliases[iv.var] = iv.value
    return bound, aliases


def _resolve(e: PrimExpr, aliases: dict[Var, PrimExpr]) -> PrimExpr:
    for _ in range(8):  # nested blocks: a binding may use an outer block's iterator
        new = substitute(e, aliases)
        if new == e:
            return e
        e = new
    return e


class _Hoister:
    def __init__(self, func: PrimFunc):
        written = {n.buffer for n in walk(func.body) if isinstance(n, BufferStore | AtomicAdd)}
        self.read_only = {b for b in func.buffers if b.data is not None and b not in written}
        self.count = 0

    def fresh(self, buf) -> str:
        self.count += 1
        return f"{buf.name}_{self.count - 1}"

    def unconditional_loads(self, node, out: list[BufferLoad]) -> None:
        """Loads evaluated whenever `node` is (not under a condition of their own)."""
        if isinstance(node, BufferLoad):
            out.append(node)
            for i in node.indices:
                self.unconditional_loads(i, out)
            return
        if isinstance(node, Select):
            self.unconditional_loads(node.cond, out)
            return
        if isinstance(node, BinOp) and node.op in ("and", "or"):
            self.unconditional_loads(node.a, out)
            return
        if isinstance(node, IfThenElse | While):  # a while's body may run no iteration
            self.unconditional_loads(node.condition, out)
            return
        if isinstance(node, Block):
            for iv in node.iter_vars:
                self.unconditional_loads(iv.value, out)
            if node.predicate is None:
                self.unconditional_loads(node.body, out)
            return
        if isinstance(node, For):
            self.unconditional_loads(node.extent, out)
            if isinstance(node.extent, IntImm) and node.extent.value > 0:
                self.unconditional_loads(node.body, out)
            return
        if isinstance(node, SparseBuffer | FlatBuffer | Var):
            return
        for _, value in node.fields():
            items = value if isinstance(value, tuple) else (value,)
            for v in items:
                if isinstance(v, Stmt | PrimExpr):
                    self.unconditional_loads(v, out)

    def hoistable(self, load: BufferLoad, inner: set[Var], aliases: dict[Var, PrimExpr]) -> PrimExpr | None:
        if load.buffer not in self.read_only:
            return None
        resolved = _resolve(load, aliases)
        if any(isinstance(n, Var) and n in inner for n in walk(resolved)):
            return None
        if any(isinstance(n, BufferLoad) and n.buffer not in self.read_only for n in walk(resolved)):
            return None
        return resolved

    def loop(self, f: For) -> Stmt:
        body = self.stmt(f.body)
        f = f.replace(body=body)
        runs = isinstance(f.extent, IntImm) and f.extent.value > 0
        if not runs and f.kind != "serial":
            return f
        # A serial loop of unknown extent: what moves out of it goes under `if extent > 0`, so it is
        # evaluated only where the loop would have run at least once.
        ran = None if runs else mk.cmp(">", f.extent, IntImm(0, f.extent.dtype))
        guard, f = self.unswitch(f)
        if guard is not None or ran is not None:
            out = self.hoist(f, unconditional=True)
            condition = mk.conjunction([c for c in (ran, guard) if c is not None])
            return f if out is f and guard is None else IfThenElse(condition, out)
        return self.hoist(f)

    def unswitch(self, f: For) -> tuple[PrimExpr | None, For]:
        """A serial loop whose body is one block guarded by a predicate that does not change in the
        loop (`T.where(I_indices[vo] < m and J_indices[vo * 8 + vj] < n)` around the feature loop of
        an ELL slot) tests it once, before the loop: (the predicate, the loop with an unguarded
        block), or (None, the loop). The predicate is written with the block's bindings; it may read
        only buffers the loop does not write. (Loop unswitching: the feature loop then vectorises.)"""
        blk = f.body
        if f.kind != "serial" or not isinstance(blk, Block) or blk.init is not None:
            return None, f
        guarded = isinstance(blk.body, IfThenElse) and blk.body.else_case is None
        if blk.predicate is None and not guarded:
            return None, f
        conditions = [c for c in (blk.predicate, blk.body.condition if guarded else None) if c is not None]
        inner, aliases = _bound_in(blk.body)
        inner.add(f.loop_var)
        aliases.update({iv.var: iv.value for iv in blk.iter_vars})
        predicate = _resolve(mk.conjunction(conditions), aliases)
        written = {n.buffer for n in walk(blk) if isinstance(n, BufferStore | AtomicAdd)}
        if any(isinstance(n, Var) and n in inner for n in walk(predicate)):
            return None, f
        if any(isinstance(n, BufferLoad) and n.buffer in written for n in walk(predicate)):
            return None, f
        body = blk.body.then_case if guarded else blk.body
        return predicate, f.replace(body=blk.replace(predicate=None, body=body))

    def hoist(self, f: For, unconditional: bool = False) -> Stmt:
        """Loads of read-only buffers that do not change in `f` bound before it (`unconditional`:
        the caller guards the result so that it runs only where `f` runs at least once)."""
        if not unconditional and not (isinstance(f.extent, IntImm) and f.extent.value > 0):
            return f
        body = f.body
        inner, aliases = _bound_in(body)
        inner.add(f.loop_var)
        loads: list[BufferLoad] = []
        self.unconditional_loads(body, loads)
        chosen: dict[PrimExpr, tuple[BufferLoad, PrimExpr]] = {}
        for load in loads:
            if load in chosen:
                continue
            resolved = self.hoistable(load, inner, aliases)
            if resolved is not None and not any(load in walk(c[0]) for c in chosen.values()):
                chosen[load] = (load, resolved)
        # Keep only maximal loads: a load inside another hoisted load's index goes with it.
        maximal = {k: v for k, v in chosen.items() if not any(k is not o and k in list(walk(o)) for o in chosen)}
        if not maximal:
            return f
        lets = []
        mapping = {}
        for load, (_, resolved) in maximal.items():
            var = Var(self.fresh(load.buffer), load.dtype)
            lets.append((var, resolved))
            mapping[load] = var
        new_body = self.replace_loads(f.body, mapping)
        out: Stmt = f.replace(body=new_body)
        for var, value in reversed(lets):
            out = LetStmt(var, value, out)
        return out

    def replace_loads(self, node, mapping: dict[BufferLoad, Var]):
        if isinstance(node, BufferLoad) and node in mapping:
            return mapping[node]
        return map_children(node, lambda c: self.replace_loads(c, mapping))

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, For):
            return self.loop(s)
        if isinstance(s, SeqStmt | IfThenElse | Block | Allocate | LetStmt | While):
            return map_children(s, lambda c: self.stmt(c) if isinstance(c, Stmt) else c)
        return s


def hoist_loop_invariants(mod: PrimFunc | IRModule) -> IRModule:
    """Bind loop-invariant loads of read-only buffers before their loops (Stage III functions)."""
    return IRModule.from_any(mod).map_stage3(lambda func: _Hoister(func).stmt(func.body))


# ------------------------------------------------------------------------ scalar replacement
def _varies(e: PrimExpr, inner: set[Var]) -> bool:
    return any(isinstance(n, Var) and n in inner for n in walk(e))


def _reads(e: PrimExpr, buf) -> bool:
    return any(isinstance(n, BufferLoad) and n.buffer is buf for n in walk(e))


def _linear(e: PrimExpr) -> tuple[list[PrimExpr], int]:
    """`e` as a sum: its non-constant terms (a `-` term negated as `(-1) * t`) and its constant."""
    if isinstance(e, IntImm):
        return [], e.value
    if isinstance(e, Cast) and isinstance(e.value, IntImm) and dt.is_int(e.dtype):
        return [], e.value.value  # `np.int64(0)`: a constant cell index, widened
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        ta, ca = _linear(e.a)
        tb, cb = _linear(e.b)
        if e.op == "+":
            return ta + tb, ca + cb
        return ta + [BinOp("*", IntImm(-1, t.dtype), t) for t in tb], ca - cb
    if isinstance(e, BinOp) and e.op == "*" and isinstance(e.b, IntImm) and not isinstance(e.a, IntImm):
        # `(t + c) * f` is `t * f + c * f`: the offsets of a b x b block's cells, `((p * b) + ii) * b
        # + ji`, then differ by their constants.
        ta, ca = _linear(e.a)
        return [BinOp("*", t, e.b) for t in ta], ca * e.b.value
    return [e], 0


def _differ(a: PrimExpr, b: PrimExpr) -> bool:
    """Whether integer offsets `a` and `b` are provably different: the same terms, other constants."""
    ta, ca = _linear(a)
    tb, cb = _linear(b)
    if ca == cb or len(ta) != len(tb):
        return False
    rest = list(tb)
    for t in ta:
        if t not in rest:
            return False
        rest.remove(t)
    return True


def _factors(e: PrimExpr) -> list[PrimExpr]:
    """The factors of a product `a * b * ...` (`e` itself when it is not one)."""
    if isinstance(e, BinOp) and e.op == "*":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _product(factors: list[PrimExpr]) -> PrimExpr:
    out = factors[0]
    for f in factors[1:]:
        out = BinOp("*", out, f)
    return out


def _accesses(node, buf) -> list:
    return [n for n in walk(node) if isinstance(n, BufferLoad | BufferStore | AtomicAdd) and n.buffer is buf]


def _guarded(node, inside: bool = False) -> set[int]:
    """Ids of the buffer accesses in `node` that run only under a condition: in a block with a
    predicate, a branch of an `if` or of a select. An element accessed only so may never be
    touched by the loop (past the end of a row split by 4: another row's element, or past the
    array), so a register for it would read and write what the loop does not."""
    out: set[int] = set()
    if isinstance(node, BufferLoad | BufferStore | AtomicAdd) and inside:
        out.add(id(node))
    if isinstance(node, Block) and node.predicate is not None and node.predicate != IntImm(1, "bool"):
        inside = True
    if isinstance(node, IfThenElse):
        out |= _guarded(node.condition, inside)
        for case in (node.then_case, node.else_case):
            if case is not None:
                out |= _guarded(case, True)
        return out
    if isinstance(node, Select):
        out |= _guarded(node.cond, inside)
        return out | _guarded(node.true_value, True) | _guarded(node.false_value, True)
    for child in children(node):
        out |= _guarded(child, inside)
    return out


class _Promoter:
    """Accumulations `X[e] = X[e] + ...` in a loop that leaves `e` unchanged go through a register.

    For a loop whose body touches buffer `X` only at offsets that do not change in the loop (block
    iterators seen through) and that are pairwise different (`e`, `e + 1`, ... after
    `unroll_loops`; the same offset spelled twice is one register), each accessed at least once
    outside any condition (`_guarded`; a padded slot's init, say): `acc = X[e]` before the loop,
    every access to `X[e]` in the loop becomes `acc`, and `X[e] = acc` after it. Nothing else
    reads or writes `X[e]` meanwhile, so the value is the same; the loop's accumulation then runs
    in a register instead of a load and a store per iteration (SDDMM's dot product over the
    features; with the nonzeros unrolled by 4, four dot products in four registers that share
    each load of X's row).
    """

    MAX_REGISTERS = 16  # per loop: past this, registers would spill

    def __init__(self, func: PrimFunc):
        self.func = func
        self.count = 0

    def candidates(self, loop: For) -> list[tuple[object, PrimExpr, PrimExpr]]:
        """(buffer, offset as written, offset through block iterators) of each promotable access."""
        inner, aliases = _bound_in(loop.body)
        inner.add(loop.loop_var)
        stored = []
        for n in walk(loop.body):
            if isinstance(n, BufferStore) and n.buffer not in stored and isinstance(n.buffer, FlatBuffer):
                stored.append(n.buffer)
        out = []
        guarded = _guarded(loop.body) if stored else set()
        for buf in stored:
            if buf.data is None or buf.scope != "global" or len(buf.shape) == 0:
                continue  # only function arguments: scratch may be shared between threads
            accesses = _accesses(loop.body, buf)
            if any(isinstance(a, AtomicAdd) or len(a.indices) != 1 for a in accesses):
                continue
            unguarded = {a.indices[0] for a in accesses if id(a) not in guarded}
            if any(index not in unguarded for index in dict.fromkeys(a.indices[0] for a in accesses)):
                continue  # an element touched only under a condition: the loop may never touch it
            if any(isinstance(n, Block) and buf in n.alloc_buffers for n in walk(loop.body)):
                continue
            offsets = {}
            for a in accesses:
                if a.indices[0] not in offsets:
                    offsets[a.indices[0]] = _resolve(a.indices[0], aliases)
            if len(offsets) > self.MAX_REGISTERS:
                continue
            # An offset that reads a buffer the loop stores (`C[top[0]]` with `top` a counter the
            # loop advances) changes in the loop although no loop variable appears in it.
            if any(_varies(r, inner) or any(_reads(r, s) for s in stored) for r in offsets.values()):
                continue
            distinct = list(dict.fromkeys(offsets.values()))
            if not all(_differ(a, b) for n, a in enumerate(distinct) for b in distinct[n + 1 :]):
                continue  # two offsets that may meet: one register each would be wrong
            out.extend((buf, index, resolved) for index, resolved in offsets.items())
        return out

    def loop(self, f: For) -> Stmt:
        f = f.replace(body=self.stmt(f.body))
        registers: dict[tuple, FlatBuffer] = {}
        targets = {}
        for buf, index, resolved in self.candidates(f):
            reg = registers.get((buf, resolved))
            if reg is None:
                reg = FlatBuffer(f"{buf.name}_acc{self.count}", (IntImm(1),), buf.dtype, scope="local")
                self.count += 1
                registers[(buf, resolved)] = reg
            targets[(buf, index)] = reg
        if not registers:
            return f
        zero = IntImm(0)

        def redirect(n):
            n = map_children(n, redirect)
            if isinstance(n, BufferLoad | BufferStore) and (n.buffer, n.indices[0]) in targets:
                reg = targets[(n.buffer, n.indices[0])]
                if isinstance(n, BufferLoad):
                    return BufferLoad(reg, (zero,))
                return n.replace(buffer=reg, indices=(zero,))
            return n

        loads = tuple(BufferStore(reg, (zero,), BufferLoad(buf, (at,))) for (buf, at), reg in registers.items())
        stores = tuple(BufferStore(buf, (at,), BufferLoad(reg, (zero,))) for (buf, at), reg in registers.items())
        loop, sums, begin, end = redirect(f), [], [], []
        for reg in registers.values():
            factored = self.factor_out(loop, reg)
            if factored is not None:
                loop, partial, (first, last) = factored
                sums.append(partial)
                begin.append(first)
                end.append(last)
        result: Stmt = SeqStmt((*loads, *begin, loop, *end, *stores))
        for reg in reversed([*registers.values(), *sums]):
            result = Allocate(reg, result)
        return result

    def factor_out(self, loop: For, reg: FlatBuffer):
        """`acc = acc + a * e` in `loop` with `a` the same on every iteration becomes
        `s = s + e` and, after the loop, `acc = acc + a * s`: one multiplication per loop instead
        of one per iteration (SDDMM: A's value out of the dot product). Only where the register's
        one update in the loop has that form; `a` is read after the loop only if the loop ran
        (`extent > 0`), so nothing is read that the loop would not have read. Returns (the new
        loop, the partial-sum register, (its init, the update after the loop)) or None."""
        if isinstance(loop.extent, IntImm) and loop.extent.value < 64:
            # LLVM unrolls a short constant loop completely and schedules the products itself; the
            # split-off sum measured slower there (4elt, SDDMM x4 at a fixed width 32: 0.154 ms ->
            # 0.220 ms), and faster on long loops (width 512: 2.86 -> 2.40 ms).
            return None
        updates = [n for n in walk(loop.body) if isinstance(n, BufferStore) and n.buffer is reg]
        reads = [n for n in walk(loop.body) if isinstance(n, BufferLoad) and n.buffer is reg]
        if len(updates) != 1 or len(reads) != 1 or not dt.is_float(reg.dtype):
            return None
        update = updates[0]
        value = update.value
        if not (isinstance(value, BinOp) and value.op == "+" and value.a == reads[0]):
            return None
        inner, aliases = _bound_in(loop.body)
        inner.add(loop.loop_var)
        written = {n.buffer for n in walk(loop.body) if isinstance(n, BufferStore | AtomicAdd)}
        invariant, rest = [], []
        for factor in _factors(value.b):
            resolved = _resolve(factor, aliases)
            loads_written = any(isinstance(n, BufferLoad) and n.buffer in written for n in walk(resolved))
            (rest if _varies(resolved, inner) or loads_written else invariant).append((factor, resolved))
        if not invariant or not rest:
            return None
        partial = FlatBuffer(f"{reg.name}_sum", (IntImm(1),), reg.dtype, scope="local")
        zero = IntImm(0)
        summed = BufferLoad(partial, (zero,))
        new_update = BufferStore(partial, (zero,), BinOp("+", summed, _product([f for f, _ in rest])))
        body = post_order_rewrite(loop.body, lambda n: new_update if n == update else n)
        init = BufferStore(partial, (zero,), FloatImm(0.0, reg.dtype))
        scaled = BinOp("*", _product([r for _, r in invariant]), summed)
        after = BufferStore(reg, (zero,), BinOp("+", BufferLoad(reg, (zero,)), scaled))
        ran = mk.cmp(">", loop.extent, IntImm(0, loop.extent.dtype))
        return loop.replace(body=body), partial, (init, IfThenElse(ran, after))

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, For):
            return self.loop(s)
        if isinstance(s, SeqStmt | IfThenElse | Block | Allocate | LetStmt | While):
            return map_children(s, lambda c: self.stmt(c) if isinstance(c, Stmt) else c)
        return s


def promote_accumulators(mod: PrimFunc | IRModule) -> IRModule:
    """Scalar replacement of loop-invariant accumulations (Stage III functions), see `_Promoter`."""
    return IRModule.from_any(mod).map_stage3(lambda func: _Promoter(func).stmt(func.body))
