"""Buffer compaction (the part of TVM's CompactBufferAllocation this compiler needs).

Schedule primitives size their buffers for their whole scope: `rfactor` makes `C_rf` of shape
`(nnz, 32)` even when each thread only ever touches one element of it, and `cache_read` /
`cache_write` keep the region of the enclosing block. This Stage III pass shrinks each `local` or
`shared` scratch buffer to the region one *instance* of it accesses:

- An instance is one execution of the allocation (an `Allocate`, a block's `alloc_buffers`, or
  the whole kernel for a function-level buffer) and, on CUDA, one thread (`local`) or one thread
  block (`shared`). Loops around the allocation are fixed; loops inside it take every value of
  their range, except, on CUDA, thread-bound loops: `blockIdx.*` is fixed for both scopes,
  `threadIdx.*` is fixed for `local` and ranges over the launch for `shared` (wherever the
  allocation is). Loops bound to the same tag are the same index (`cuda.threadIdx.x`).
- The accessed region of each flat index is bounded with `arith.symbolic_range` (block iterators
  replaced by their bindings); every access must start at the same expression of the fixed
  variables up to a constant, and the extent must be a constant. The buffer then gets that
  extent and every access the offset from the region's start (`C_rf[vi_j * 32 + vk_inner]`
  becomes `C_rf[0]`, a register, when `vi_j` and `vk_inner` are thread indices). Where one
  term of an index mixes fixed and varying loops (a cache block's `v0 = bx * 4 + i_inner`: the
  block may not name `bx`), the access becomes `idx mod D - s` with `D` dividing the region's
  start (`A_shared[((v1 + v0 * 128) & 511)]`: for a power of two the modulus is written as a
  mask, which LLVM folds), when that maps the region one to one.
- On CUDA, a function-level `local` buffer (scratch the runtime would allocate in global memory
  and zero-fill) moves into the kernel as a `local` allocation around the body, zero-filled by
  each thread, when the regions of different threads provably do not overlap (so no thread
  reads what another wrote, and per-thread copies hold the same values).

The pass never guesses: an index that loads from memory, calls a function or is not affine in
the loop variables, a buffer searched by `T.lower_bound`, an extent that is not a constant, a
statement it does not know — and the buffer is left as it was. On the CPU only loops inside the
allocation vary (thread-bound loops are ordinary loops there), and function-level buffers stay.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..arith.affine import DimId
from ..arith.interval import from_affine, int_range, symbolic_range, to_affine
from ..ir import dtype as dt
from ..ir import make as mk
from ..ir.buffer import FlatBuffer
from ..ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var, const
from ..ir.func import IRModule, PrimFunc
from ..ir.launch import is_launch_loop, launch_loops, split_launches
from ..ir.node import FrozenDict
from ..ir.stmt import (
    LAUNCH_TAGS,
    THREAD_IDX_TAGS,
    Allocate,
    AtomicAdd,
    Block,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    Range,
    SeqStmt,
    Stmt,
    While,
    seq,
)
from ..ir.visit import post_order_rewrite, substitute, walk

__all__ = ["compact_buffers"]

COMPACT_SCOPES = ("local", "shared")


class _Unsure(Exception):
    """The analysis cannot prove what it needs: leave the buffer alone."""


def compact_buffers(mod: PrimFunc | IRModule, target: str = "cpu") -> IRModule:
    """Shrink the `local` / `shared` scratch buffers of every Stage III function of `mod` to the
    region one instance accesses (see the module docstring); other functions pass through.

    Before (CUDA, after `rfactor` + `set_scope(..., "local")` and flattening):
        C_rf = T.alloc_buffer((T.cast(nnz, "int32"), 32), "float32", scope="local")  # function level
        for i_j_outer in T.thread_binding(..., thread="blockIdx.x"):
            for i_j_inner in T.thread_binding(4, thread="threadIdx.y"):
                for k_inner in T.thread_binding(32, thread="threadIdx.x"):
                    ... C_rf[T.cast(vk_inner, "int64") + T.cast(vi_j, "int64") * T.int64(32)] ...
    `compact_buffers(mod, "cuda")`
    After:
        C_rf = T.allocate((1,), "float32", "local")
        C_rf[T.int64(0)] = T.float32(0.0)
        for i_j_outer in T.thread_binding(..., thread="blockIdx.x"):
            ... C_rf[T.int64(0)] ...
    """
    mod = IRModule.from_any(mod)
    out = {name: _compact_function(f, target) if f.stage == 3 else f for name, f in mod.items()}
    return IRModule(FrozenDict(out))


# ---------------------------------------------------------------- context of a statement
@dataclass
class _Ctx:
    """What is known at a statement: bindings of block iterators and let variables (in loop
    variables), the enclosing loops, and the loop bound to each CUDA tag."""

    subst: dict[Var, PrimExpr] = field(default_factory=dict)
    loops: tuple[For, ...] = ()
    threads: dict[str, Var] = field(default_factory=dict)

    def with_loop(self, s: For, cuda: bool) -> _Ctx:
        threads, subst = self.threads, self.subst
        if cuda and is_launch_loop(s):
            threads = {**threads, s.thread: s.loop_var}
        elif isinstance(s.extent, IntImm) and s.extent.value == 1:
            subst = {**subst, s.loop_var: substitute(s.min, subst)}  # one iteration: a value, not a range
        return _Ctx(subst, (*self.loops, s), threads)

    def with_values(self, pairs: list[tuple[Var, PrimExpr]]) -> _Ctx:
        subst = dict(self.subst)
        for var, value in pairs:
            subst[var] = substitute(value, subst)
        return _Ctx(subst, self.loops, self.threads)


@dataclass
class _Access:
    indices: tuple[PrimExpr, ...]
    ctx: _Ctx


AccessFn = Callable[[tuple[PrimExpr, ...], _Ctx], tuple[PrimExpr, ...]]


class _Walker:
    """Rebuilds a statement with every access of `buf` passed through `on_access` (which may
    return new indices), regions of `buf` replaced by `region`, and the context tracked."""

    def __init__(self, buf: FlatBuffer, new_buf: FlatBuffer, on_access: AccessFn, cuda: bool):
        self.buf, self.new_buf, self.on_access, self.cuda = buf, new_buf, on_access, cuda

    def expr(self, e: PrimExpr | None, ctx: _Ctx) -> PrimExpr | None:
        if e is None:
            return None

        def fn(n):
            if isinstance(n, BufferLoad) and n.buffer is self.buf:
                return BufferLoad(self.new_buf, self.on_access(n.indices, ctx))
            if isinstance(n, Call) and any(a is self.buf for a in n.args):
                raise _Unsure(f"`{self.buf.name}` is passed to T.{n.op}")
            return n

        return post_order_rewrite(e, fn)

    def region(self, r: BufferRegion) -> BufferRegion:
        if r.buffer is not self.buf:
            return r
        return BufferRegion(self.new_buf, tuple(Range(IntImm(0, d.dtype), d) for d in self.new_buf.shape))

    def stmt(self, s: Stmt | None, ctx: _Ctx) -> Stmt | None:
        if s is None:
            return None
        if isinstance(s, SeqStmt):
            return s.replace(stmts=tuple(self.stmt(x, ctx) for x in s.stmts))
        if isinstance(s, For):
            inner = ctx.with_loop(s, self.cuda)
            return s.replace(min=self.expr(s.min, ctx), extent=self.expr(s.extent, ctx), body=self.stmt(s.body, inner))
        if isinstance(s, Block):
            ivs = tuple(iv.replace(value=self.expr(iv.value, ctx)) for iv in s.iter_vars)
            inner = ctx.with_values([(iv.var, iv.value) for iv in s.iter_vars])
            return s.replace(
                iter_vars=ivs,
                reads=tuple(self.region(r) for r in s.reads),
                writes=tuple(self.region(r) for r in s.writes),
                predicate=self.expr(s.predicate, inner),
                init=self.stmt(s.init, inner),
                body=self.stmt(s.body, inner),
            )
        if isinstance(s, BufferStore | AtomicAdd):
            value = self.expr(s.value, ctx)
            indices = tuple(self.expr(i, ctx) for i in s.indices)
            if s.buffer is self.buf:
                return s.replace(buffer=self.new_buf, indices=self.on_access(indices, ctx), value=value)
            return s.replace(indices=indices, value=value)
        if isinstance(s, LetStmt):
            return s.replace(value=self.expr(s.value, ctx), body=self.stmt(s.body, ctx.with_values([(s.var, s.value)])))
        if isinstance(s, IfThenElse):
            return s.replace(
                condition=self.expr(s.condition, ctx),
                then_case=self.stmt(s.then_case, ctx),
                else_case=self.stmt(s.else_case, ctx),
            )
        if isinstance(s, While):  # binds nothing: the body sees the context of the loop
            return s.replace(condition=self.expr(s.condition, ctx), body=self.stmt(s.body, ctx))
        if isinstance(s, Evaluate):
            return s.replace(value=self.expr(s.value, ctx))
        if isinstance(s, Allocate):
            return s.replace(buffer=self.new_buf if s.buffer is self.buf else s.buffer, body=self.stmt(s.body, ctx))
        raise _Unsure(f"unsupported statement {type(s).__name__}")


# ---------------------------------------------------------------- the function
def _compact_function(func: PrimFunc, target: str) -> PrimFunc:
    cuda = target == "cuda"
    launch: dict[str, int | None] = {}  # the launch sizes of the statement being compacted

    def site(stmt: Stmt, ctx: _Ctx) -> Stmt:
        """Compact the buffers allocated at `stmt` (inner allocations are done already)."""
        if isinstance(stmt, Allocate):
            plan = _plan(stmt.buffer, [stmt.body], ctx, cuda, launch)
            if plan is None:
                return stmt
            new_buf, rewrite = plan
            return Allocate(new_buf, rewrite(stmt.body))
        if isinstance(stmt, Block) and stmt.alloc_buffers:
            inner = ctx.with_values([(iv.var, iv.value) for iv in stmt.iter_vars])
            for buf in stmt.alloc_buffers:
                parts = [p for p in (stmt.predicate, stmt.init, stmt.body) if p is not None]
                plan = _plan(buf, parts, inner, cuda, launch)
                if plan is None:
                    continue
                new_buf, rewrite = plan
                stmt = stmt.replace(
                    alloc_buffers=tuple(new_buf if b is buf else b for b in stmt.alloc_buffers),
                    predicate=rewrite(stmt.predicate) if stmt.predicate is not None else None,
                    init=rewrite(stmt.init) if stmt.init is not None else None,
                    body=rewrite(stmt.body),
                )
        return stmt

    def go(s: Stmt, ctx: _Ctx) -> Stmt:
        # Children first (their context extended by this statement), then this statement's own
        # allocations: an inner buffer's plan never depends on an outer one.
        if isinstance(s, For):
            s = s.replace(body=go(s.body, ctx.with_loop(s, cuda)))
        elif isinstance(s, Block):
            inner = ctx.with_values([(iv.var, iv.value) for iv in s.iter_vars])
            s = s.replace(
                init=go(s.init, inner) if s.init is not None else None,
                body=go(s.body, inner),
            )
        elif isinstance(s, LetStmt):
            s = s.replace(body=go(s.body, ctx.with_values([(s.var, s.value)])))
        elif isinstance(s, SeqStmt):
            s = s.replace(stmts=tuple(go(x, ctx) for x in s.stmts))
        elif isinstance(s, IfThenElse):
            s = s.replace(
                then_case=go(s.then_case, ctx),
                else_case=go(s.else_case, ctx) if s.else_case is not None else None,
            )
        elif isinstance(s, Allocate | While):
            s = s.replace(body=go(s.body, ctx))
        return site(s, ctx)

    if not cuda:
        return func.replace(body=go(func.body, _Ctx()))
    # Each launch (codegen/cuda.py: a top-level statement with bound loops) has its own sizes.
    stmts = []
    for group in split_launches(func.body):
        launch = _launch_extents(seq(*group))
        stmts.extend(go(st, _Ctx()) for st in group)
    return _move_function_level_locals(func.replace(body=seq(*stmts)))


def _move_function_level_locals(func: PrimFunc) -> PrimFunc:
    """Function-level `local` scratch -> a zero-filled `local` allocation around the one
    top-level statement that uses it, when each thread's region is its own (see
    `_disjoint_per_thread`). Top-level statements may be separate launches (`codegen/cuda.py`),
    and local memory does not outlive a launch: a buffer used by two of them stays where it is,
    and the allocation wraps only its statement, so the launch split still sees the others."""
    for buf in func.buffers:
        if not (isinstance(buf, FlatBuffer) and buf.data is None and buf.scope == "local"):
            continue
        stmts = list(func.body.stmts) if isinstance(func.body, SeqStmt) else [func.body]
        users = [k for k, st in enumerate(stmts) if _uses_buffer(st, buf)]
        if len(users) != 1:
            continue
        (k,) = users
        plan = _plan(buf, [stmts[k]], _Ctx(), True, _launch_extents(stmts[k]), per_thread_check=True)
        if plan is None:
            continue
        new_buf, rewrite = plan
        (extent,) = new_buf.shape
        stmts[k] = Allocate(new_buf, seq(_zero_fill(new_buf, extent), rewrite(stmts[k])))
        func = func.replace(buffers=tuple(b for b in func.buffers if b is not buf), body=seq(*stmts))
    return func


def _uses_buffer(stmt: Stmt, buf: FlatBuffer) -> bool:
    """Whether `stmt` accesses `buf` (loads, stores, regions, or as a call's buffer argument)."""
    for n in walk(stmt):
        if getattr(n, "buffer", None) is buf or (isinstance(n, Call) and any(a is buf for a in n.args)):
            return True
    return False


def _zero_fill(buf: FlatBuffer, extent: IntImm) -> Stmt:
    # The runtime zero-fills function-level scratch; CUDA local memory starts undefined.
    zero = const(0, buf.dtype)
    if extent.value == 1:
        return BufferStore(buf, (IntImm(0, extent.dtype),), zero)
    v = Var(f"{buf.name}_fill", extent.dtype)
    return For(v, IntImm(0, extent.dtype), extent, "serial", BufferStore(buf, (v,), zero))


def _launch_extents(stmt: Stmt) -> dict[str, int | None]:
    """CUDA tag -> the launch size along it (the largest extent bound to it in `stmt`, one
    launch), None if not constant."""
    out: dict[str, int | None] = {}
    for n in launch_loops(stmt):
        value = n.extent.value if isinstance(n.extent, IntImm) else None
        prev = out.get(n.thread, 0)
        out[n.thread] = None if value is None or prev is None else max(prev, value)
    return out


# ---------------------------------------------------------------- one buffer
def _canonical() -> dict[str, Var]:
    return {tag: Var(tag) for tag in LAUNCH_TAGS}


def _plan(
    buf: FlatBuffer,
    parts: list[Stmt | PrimExpr],
    ctx: _Ctx,
    cuda: bool,
    launch: dict[str, int | None],
    per_thread_check: bool = False,
) -> tuple[FlatBuffer, Callable[[Stmt | PrimExpr], Stmt | PrimExpr]] | None:
    """The compacted buffer and a function rewriting a statement of the allocation's scope, or
    None to leave `buf` as it is."""
    if buf.scope not in COMPACT_SCOPES or buf.data is not None:
        return None
    try:
        return _plan_or_raise(buf, parts, ctx, cuda, launch, per_thread_check)
    except _Unsure:
        return None


def _plan_or_raise(buf, parts, ctx, cuda, launch, per_thread_check):
    accesses: list[_Access] = []

    def record(indices, actx):
        accesses.append(_Access(indices, actx))
        return indices

    collector = _Walker(buf, buf, record, cuda)
    for p in parts:
        collector.stmt(p, ctx) if isinstance(p, Stmt) else collector.expr(p, ctx)
    if not accesses:
        return None
    if any(len(a.indices) != 1 for a in accesses):
        raise _Unsure("Stage III accesses have one flat index")
    canon = _canonical()
    shared = buf.scope == "shared"
    fixed_loops = {f.loop_var for f in ctx.loops}

    def canon_map(actx: _Ctx) -> dict[Var, PrimExpr]:
        return {v: canon[tag] for tag, v in actx.threads.items()}

    # Ranges of the variables of an index (`used`) that vary within one instance of the buffer (a
    # loop the index does not name, such as a row's nonzeros with a data-dependent extent, is
    # not looked at).
    def relaxed(actx: _Ctx, used: set) -> dict[Var, tuple[PrimExpr, PrimExpr]]:
        out: dict[Var, tuple[PrimExpr, PrimExpr]] = {}
        cmap = canon_map(actx)
        for f in actx.loops:
            is_thread = cuda and f.kind == "thread_binding" and f.thread in actx.threads
            if is_thread or f.loop_var in fixed_loops or f.loop_var in actx.subst or f.loop_var not in used:
                continue
            lo = substitute(substitute(f.min, actx.subst), cmap)
            ext = substitute(substitute(f.extent, actx.subst), cmap)
            _check_pure(lo)
            _check_pure(ext)
            out[f.loop_var] = (lo, mk.sub(mk.add(lo, ext), IntImm(1, ext.dtype)))
        if cuda and shared:
            for tag in THREAD_IDX_TAGS:
                n = launch.get(tag, 1)
                if tag not in launch:
                    continue
                if n is None:
                    raise _Unsure(f"{tag} has no constant launch size")
                out[canon[tag]] = (IntImm(0), IntImm(n - 1))
        return out

    infos = []
    for a in accesses:
        (idx,) = a.indices
        if not dt.is_int(idx.dtype):
            raise _Unsure("index is not an integer")
        _check_pure(idx)
        full = substitute(substitute(idx, a.ctx.subst), canon_map(a.ctx))
        _check_pure(full)  # a load in a binding may read memory that changes inside the scope
        used = {n for n in walk(full) if isinstance(n, Var)}
        ranges = relaxed(a.ctx, used)
        env = {v: r for v, r in ranges.items() if v in used}
        bounds = symbolic_range(full, env)
        if bounds is None:
            raise _Unsure("no symbolic bounds")
        infos.append((a, full, bounds))
    ref = infos[0][2][0]
    offsets = []
    for _, _, (lo, hi) in infos:
        offsets.append((_constant(mk.sub(lo, mk.cast(lo.dtype, ref))), _constant(mk.sub(hi, mk.cast(hi.dtype, ref)))))
    lo_c = min(o[0] for o in offsets)
    hi_c = max(o[1] for o in offsets)
    extent = hi_c - lo_c + 1
    size = _constant_or_none(_flat_size(buf))
    if extent <= 0 or (size is not None and extent >= size and not per_thread_check):
        return None
    if per_thread_check:
        _disjoint_per_thread(ref, extent, canon, launch)
    new_buf = FlatBuffer(buf.name, (IntImm(extent, "int32"),), buf.dtype, scope=buf.scope, value_range=buf.value_range)
    # Per access: the part of the index over variables that vary stays; the fixed part becomes
    # the constant `fixed - ref - lo_c`.
    new_index: dict[int, PrimExpr] = {}
    for a, full, _ in infos:
        (idx,) = a.indices
        ranges = relaxed(a.ctx, {n for n in walk(full) if isinstance(n, Var)})
        try:
            new_index[id(a)] = _relative(idx, a.ctx, canon_map(a.ctx), ranges, ref, lo_c)
        except _Unsure:
            new_index[id(a)] = _modular(idx, ref, lo_c, extent)
    by_key = {}
    for a, _, _ in infos:
        key = (a.indices, tuple(sorted((t, id(v)) for t, v in a.ctx.threads.items())))
        prev = by_key.setdefault(key, new_index[id(a)])
        if prev != new_index[id(a)]:
            raise _Unsure("one access, two rewrites")

    def rewrite_access(indices, actx):
        key = (indices, tuple(sorted((t, id(v)) for t, v in actx.threads.items())))
        if key not in by_key:
            raise _Unsure("an access seen only when rewriting")
        return (by_key[key],)

    rewriter = _Walker(buf, new_buf, rewrite_access, cuda)

    def rewrite(node):
        return rewriter.stmt(node, ctx) if isinstance(node, Stmt) else rewriter.expr(node, ctx)

    # Rewrite once now, so an access the collector missed is an _Unsure here, not later.
    rewritten = [rewrite(p) for p in parts]
    done = dict(zip(map(id, parts), rewritten))
    return new_buf, lambda node: done[id(node)] if id(node) in done else rewrite(node)


def _relative(idx, actx, cmap, ranges, ref, lo_c) -> PrimExpr:
    """`idx` minus `ref + lo_c`, in the access's own variables: the terms over varying variables
    are kept as written, the others must add up to a constant offset."""
    e, atoms = to_affine(idx)
    dtype = idx.dtype
    varying_terms, fixed_terms = [], []
    for atom, k in e.terms:
        dims = {atom.index} if isinstance(atom, DimId) else set(atom.lhs.dims_used())
        kinds = set()
        for d in dims:
            node = atoms[d]
            _check_pure(node)
            full = substitute(substitute(node, actx.subst), cmap)
            _check_pure(full)
            used = {n for n in walk(full) if isinstance(n, Var)}
            kinds.update("varying" if v in ranges else "fixed" for v in used)
        if len(kinds) > 1:
            raise _Unsure("a term mixes fixed and varying variables")
        (varying_terms if kinds == {"varying"} else fixed_terms).append((atom, k))
    fixed = type(e)(tuple(fixed_terms), e.constant)
    varying = type(e)(tuple(varying_terms), 0)
    dims = [mk.cast(dtype, a) for a in atoms]
    fixed_full = substitute(substitute(from_affine(fixed, dims, dtype=dtype), actx.subst), cmap)
    shift = _constant(mk.sub(fixed_full, mk.add(mk.cast(dtype, ref), IntImm(lo_c, dtype))))
    if not varying_terms:
        return IntImm(shift, dtype)
    (atom, k), *rest = varying_terms
    if not rest and k == -1 and isinstance(atom, DimId) and shift != 0:
        return mk.sub(IntImm(shift, dtype), dims[atom.index])  # `7 - vk`, a reversed traversal
    rel = from_affine(varying, dims, dtype=dtype)
    return rel if shift == 0 else mk.add(rel, IntImm(shift, dtype))


def _modular(idx: PrimExpr, ref: PrimExpr, lo_c: int, extent: int) -> PrimExpr:
    """`idx mod D - s`, for an index whose terms mix fixed and varying variables, so that its
    fixed part cannot be subtracted in the access's own variables (a cache block's `v0 =
    bx * 4 + i_inner` with `bx` fixed, `i_inner` varying; a block may not name the loops around
    it). `D` divides every coefficient of `ref` (the region's start, over fixed variables), so the
    start is the constant `r0` modulo `D`; when the window `[r0 + lo_c, r0 + lo_c + extent)`
    does not wrap modulo `D`, `idx mod D - s` with `s = (r0 + lo_c) mod D` maps it onto
    `[0, extent)` one to one."""
    e, _ = to_affine(ref)
    divisor = 0
    for atom, k in e.terms:
        if not isinstance(atom, DimId):
            raise _Unsure("the region's start is not affine in the fixed variables")
        divisor = math.gcd(divisor, abs(k))
    if divisor == 0:
        raise _Unsure("a constant start needs no modulus")
    start = (e.constant + lo_c) % divisor
    if start + extent > divisor:
        raise _Unsure("the window wraps modulo the start's stride")
    dtype = idx.dtype
    if divisor & (divisor - 1) == 0:
        # `idx & (D - 1)`: the same floored modulus for a power of two D, negative idx included,
        # which LLVM folds to the constant offset once the varying loop is unrolled (the fixed
        # terms' low bits are known zeros); its `%` (Python's floored modulus on signed integers)
        # it does not, and a CUDA `local` buffer so indexed stays in local memory, not registers.
        wrapped = Call("bitwise_and", (idx, IntImm(divisor - 1, dtype)), dtype)
    else:
        wrapped = mk.binop("%", idx, IntImm(divisor, dtype))
    return wrapped if start == 0 else mk.sub(wrapped, IntImm(start, dtype))


def _disjoint_per_thread(ref: PrimExpr, extent: int, canon: dict[str, Var], launch: dict[str, int | None]) -> None:
    """Raise `_Unsure` unless threads with different indices access disjoint ranges
    `[ref, ref + extent)`: `ref` is a mixed-radix number over the launched tags, each stride at
    least the span of the smaller ones."""
    e, atoms = to_affine(ref)
    tag_of = {id(v): tag for tag, v in canon.items()}
    strides: dict[str, int] = {}
    for atom, k in e.terms:
        if not isinstance(atom, DimId):
            if any(id(n) in tag_of for d in atom.lhs.dims_used() for n in walk(atoms[d])):
                raise _Unsure("a thread index under floordiv/mod")
            continue
        node = atoms[atom.index]
        if id(node) in tag_of:
            strides[tag_of[id(node)]] = abs(k)
        elif any(isinstance(n, Var) and id(n) in tag_of for n in walk(node)):
            raise _Unsure("a thread index in a non-affine term")
    dims = []
    for tag, n in launch.items():
        if n == 1:
            continue
        if tag not in strides:
            raise _Unsure(f"threads along {tag} share elements")
        dims.append((strides[tag], n))
    dims.sort()
    span = extent
    for k, (stride, n) in enumerate(dims):
        if stride < span:
            raise _Unsure("threads' regions overlap")
        if n is None:
            if k != len(dims) - 1:
                raise _Unsure("a launch size that is not constant")
            break
        span = stride * n


def _check_pure(e: PrimExpr) -> None:
    for n in walk(e):
        if isinstance(n, BufferLoad | Call):
            raise _Unsure("an index that reads memory or calls a function")


def _constant_or_none(e: PrimExpr) -> int | None:
    lo, hi = int_range(e)
    return lo if lo is not None and lo == hi else None


def _constant(e: PrimExpr) -> int:
    value = _constant_or_none(e)
    if value is None:
        raise _Unsure("not a constant")
    return value


def _flat_size(buf: FlatBuffer) -> PrimExpr:
    size = buf.shape[0]
    for d in buf.shape[1:]:
        size = mk.mul(mk.cast("int64", size), mk.cast("int64", d))
    return size
