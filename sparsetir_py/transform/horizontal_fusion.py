"""Horizontal fusion (Stage III): the parts of a decomposed function in one launch / one parallel loop.

After `decompose_format`, a function holds one top-level loop nest per part (an ELL bucket, a
column partition, a BSR part) after the output's init. Run as they are, CUDA launches one kernel
per part (and a small part leaves most of the GPU idle), and the CPU meets a barrier after every
part's parallel loop (threads that finish their share early wait for the others). SparseTIR fuses
the parts horizontally; so does this pass:

- **CUDA**: the parts' nests become one nest over one `blockIdx.x` loop whose extent is the sum
  of the parts' extents; block `b` runs part `p` when `offset[p] <= b < offset[p + 1]`, with the
  part's own block index `b - offset[p]`. A part's `threadIdx` loops keep their extents (the
  launch's block size is the largest; the code generator guards threads past a part's extent).
  A nest with no `blockIdx.x` loop counts as one block. `blockIdx.y`/`z` loops stay only where
  all fused nests agree on them; a nest that disagrees starts a launch of its own.
- **CPU**: the parts' outermost parallel loops become one parallel loop over the work units of
  all parts, dispatched by the same ranges; it hands out chunks dynamically (`chunk_size`), so no
  thread idles between parts. A nest whose parallel loop lies under another loop (a hyb part's
  rows under its serial layer loop) keeps its own loop.

Which nests may share a launch is decided from what they read and write: a nest joins the group
before it unless it reads what the group writes, writes what the group reads, or writes an
element the group also writes. Two nests that only *accumulate* into one buffer (`C[r, k] =
C[r, k] + ...`) may share it when each update is atomic (`annotate(block, "atomic")`) or the
schedule promises that the parts write disjoint elements (`annotate(block, "disjoint_writes",
True)`, as SparseTIR's hyb schedule relies on its format: an ELL bucket of one column part holds
each row once). So an init that zeroes the output is never fused with the parts that accumulate
into it, and the number of launches does not grow with the number of parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import make as mk
from ..ir.expr import BinOp, BufferLoad, IntImm, PrimExpr, Var
from ..ir.func import IRModule, PrimFunc
from ..ir.launch import MAX_THREADS_PER_BLOCK, launch_loops
from ..ir.node import FrozenDict
from ..ir.stmt import Allocate, AtomicAdd, Block, BufferStore, For, IfThenElse, SeqStmt, Stmt, seq
from ..ir.visit import children, post_order_rewrite, substitute
from .sink_allocations import sink_allocations_in

FUSE_ATTR = "horizontal_fuse"
DISJOINT = "disjoint_writes"
CPU_CHUNK = 16  # work units handed out at a time by the fused CPU loop


def horizontal_fusion(mod: PrimFunc | IRModule, *, only_marked: bool = False) -> IRModule:
    """Fuse the top-level nests of every Stage III function of `mod` (see the module docstring).

    With `only_marked=True` (what `sp.compile` uses) only functions that `decompose_format` made
    or that carry the attribute `horizontal_fuse` are changed.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py import script as T
    >>> @T.prim_func
    ... def two(x: T.handle, y: T.handle, n: T.int32, k: T.int32):
    ...     T.func_attr({"stage": 3})
    ...     X = T.match_buffer(x, (n,), "float32")
    ...     Y = T.match_buffer(y, (k,), "float32")
    ...     for i in T.parallel(n):
    ...         X[i] = T.float32(1)
    ...     for j in T.parallel(k):
    ...         Y[j] = T.float32(2)
    >>> fused = sp.horizontal_fusion(two)["main"]
    >>> "for u_fused in T.parallel(n + k" in sp.ir.printer.script(fused)
    True
    """
    mod = IRModule.from_any(mod)
    out = {}
    for name, f in mod.items():
        marked = bool(f.attrs.get(FUSE_ATTR, False))
        out[name] = _fuse_function(f) if f.stage == 3 and (marked or not only_marked) else f
    return IRModule(FrozenDict(out))


def _fuse_function(f: PrimFunc) -> PrimFunc:
    # Scratch allocated around several nests (cache_read/cache_write at the root) goes onto the
    # nest that uses it, so each part keeps its own; what several nests use stays around them all.
    outer, body = _peel_allocations(sink_allocations_in(f.body))
    stmts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
    nests = [_Nest.of(s) for s in stmts]
    # Each nest goes to the first level after every earlier nest it conflicts with; nests of one
    # level share a launch where they can (same kind, same blockIdx.y/z, a block of <= 1024
    # threads). Two nests change order only when they do not conflict, so results are unchanged.
    levels: list[int] = []
    for k, nest in enumerate(nests):
        levels.append(1 + max((levels[j] for j in range(k) if _conflict(nests[j], nest)), default=-1))
    groups: list[list[_Nest]] = []
    for level in range(max(levels, default=-1) + 1):
        open_groups: list[list[_Nest]] = []
        for nest, lv in zip(nests, levels):
            if lv != level:
                continue
            target = next((g for g in open_groups if _compatible(g, nest)), None)
            if target is None:
                open_groups.append([nest])
            else:
                target.append(nest)
        groups.extend(open_groups)
    if len(groups) == len(nests):
        return f
    fused = seq(*(_fused(g) for g in groups))
    for buf in reversed(outer):
        fused = Allocate(buf, fused)
    return f.replace(body=fused)


def _peel_allocations(s: Stmt) -> tuple[list, Stmt]:
    """The allocations around `s`, outermost first, and the statement inside them."""
    outer = []
    while isinstance(s, Allocate):
        outer.append(s.buffer)
        s = s.body
    return outer, s


# -------------------------------------------------------------------- what a nest does
@dataclass
class _Nest:
    stmt: Stmt
    kind: str | None  # "cuda" (blockIdx/threadIdx loops), "cpu" (a parallel loop at its root), None
    unit: For | None  # the loop whose iterations are the nest's work units (blockIdx.x / parallel)
    reads: set = field(default_factory=set)  # buffers read other than by an accumulation
    writes: set = field(default_factory=set)  # buffers written other than by a shareable accumulation
    shared: set = field(default_factory=set)  # buffers only accumulated into, atomically or disjointly
    other_tags: dict = field(default_factory=dict)  # blockIdx.y/z -> extent
    threads: dict = field(default_factory=dict)  # threadIdx.* -> largest constant extent (None: unknown)

    @classmethod
    def of(cls, s: Stmt) -> _Nest:
        bound = launch_loops(s)
        nest = cls(s, *_unit(s, bound))
        nest.other_tags = {n.thread: n.extent for n in bound if n.thread in ("blockIdx.y", "blockIdx.z")}
        for n in bound:
            if n.thread.startswith("threadIdx"):
                size = n.extent.value if isinstance(n.extent, IntImm) else None
                old = nest.threads.get(n.thread, 1)
                nest.threads[n.thread] = None if size is None or old is None else max(old, size)
        _effects(s, nest)
        return nest


def _unit(s: Stmt, bound: list[For]) -> tuple[str | None, For | None]:
    """The nest's kind and work-unit loop; `bound` are its loops bound to a launch dimension."""
    if bound:
        bx = [n for n in bound if n.thread == "blockIdx.x"]
        if len(bx) > 1:
            return None, None
        return "cuda", (bx[0] if bx else None)
    top = _strip(s)
    if isinstance(top, For) and top.kind == "parallel" and isinstance(top.min, IntImm) and top.min.value == 0:
        return "cpu", top
    return None, None


def _strip(s: Stmt) -> Stmt:
    """The nest's root below blocks that only wrap it (a root block with no iterators)."""
    while isinstance(s, Block) and not s.iter_vars and s.init is None and not s.alloc_buffers:
        s = s.body
    return s


def _effects(s: Stmt, nest: _Nest) -> None:
    """Fill reads/writes/shared: an accumulation `X[i] = X[i] + e` (or an atomic add) under a block
    annotated atomic or disjoint_writes may share X with other parts; anything else conflicts."""
    accumulated: dict = {}  # buffer -> all its writes so far shareable?
    acc_loads: set[int] = set()

    def visit(node, promise: bool) -> None:
        if isinstance(node, Block):
            promise = bool(node.annotations.get(DISJOINT, False)) or bool(node.annotations.get("atomic", False))
        if isinstance(node, AtomicAdd):
            accumulated[node.buffer] = accumulated.get(node.buffer, True)
        elif isinstance(node, BufferStore):
            v = node.value
            is_acc = (
                isinstance(v, BinOp)
                and v.op == "+"
                and isinstance(v.a, BufferLoad)
                and v.a.buffer is node.buffer
                and v.a.indices == node.indices
            )
            if is_acc:
                acc_loads.add(id(v.a))
            accumulated[node.buffer] = accumulated.get(node.buffer, True) and is_acc and promise
        elif isinstance(node, BufferLoad) and id(node) not in acc_loads:
            nest.reads.add(node.buffer)
        for child in _children(node):
            visit(child, promise)

    visit(s, False)
    for buf, ok in accumulated.items():
        (nest.shared if ok else nest.writes).add(buf)


def _children(node):
    # Visit a store's value before anything else so that its accumulation load is known first.
    kids = list(children(node))
    if isinstance(node, BufferStore):
        kids.sort(key=lambda k: k is not node.value)
    return kids


def _conflict(a: _Nest, b: _Nest) -> bool:
    """Whether `b` must run after `a`: one reads what the other writes, or both write one buffer
    other than by shareable accumulations (atomic, or promised disjoint)."""
    a_all, b_all = a.writes | a.shared, b.writes | b.shared
    if b.reads & a_all or b_all & a.reads:
        return True
    return bool(b.writes & a_all or b.shared & a.writes)


def _compatible(group: list[_Nest], nest: _Nest) -> bool:
    head = group[0]
    if nest.kind is None or nest.kind != head.kind or nest.other_tags != head.other_tags:
        return False
    if nest.kind == "cpu":
        return nest.unit is not None
    threads = 1
    for tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
        sizes = [n.threads.get(tag, 1) for n in (*group, nest)]
        if any(v is None for v in sizes):
            return False  # a block size known only at launch: fusing could exceed the limit
        threads *= max(sizes)
    return threads <= MAX_THREADS_PER_BLOCK


# -------------------------------------------------------------------- the fused nest
def _fused(group: list[_Nest]) -> Stmt:
    if len(group) == 1:
        return group[0].stmt
    extents = [n.unit.extent if n.unit is not None else IntImm(1, "int32") for n in group]
    dtype = "int64" if any(e.dtype == "int64" for e in extents) else "int32"
    extents = [mk.cast(dtype, e) for e in extents]
    head = group[0]
    name = "bx_fused" if head.kind == "cuda" else "u_fused"
    u = Var(name, dtype)
    total = extents[0]
    for e in extents[1:]:
        total = mk.add(total, e)
    offsets = [IntImm(0, dtype)]
    for e in extents[:-1]:
        offsets.append(mk.add(offsets[-1], e))
    body: Stmt | None = None
    for nest, off, ext in reversed(list(zip(group, offsets, extents))):
        part = _rebased(nest, u, off)
        cond = mk.cmp("<", u, mk.add(off, ext))
        body = part if body is None else IfThenElse(cond, part, body)
    if head.kind == "cuda":
        return For(u, IntImm(0, dtype), total, "thread_binding", body, thread="blockIdx.x")
    return For(u, IntImm(0, dtype), total, "parallel", body, annotations=FrozenDict({"chunk_size": CPU_CHUNK}))


def _rebased(nest: _Nest, u: Var, offset: PrimExpr) -> Stmt:
    """The nest with its unit loop replaced by its body at unit `u - offset` (a nest with no unit
    loop runs once, at `u == offset`)."""
    local = mk.sub(u, offset)
    if nest.unit is None:
        return IfThenElse(mk.cmp("==", u, offset), nest.stmt)
    loop = nest.unit

    def rewrite(n):
        if n is loop or (isinstance(n, For) and n.loop_var is loop.loop_var):
            return substitute(n.body, {loop.loop_var: mk.cast(loop.loop_var.dtype, local)})
        return n

    return post_order_rewrite(nest.stmt, rewrite)
