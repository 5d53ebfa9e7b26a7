"""`inject_prefetch` (Stage III, CPU): the software prefetches `sch.prefetch` asked for.

A loop annotated `"prefetch": ("B", d, lines)` (`sch.prefetch(loop, "B", d, lines)`, TVM's
`Stage.prefetch(tensor, var, offset)`; `lines` 0 for every line) gets, at the top of its body, one `T.prefetch` of every
element of B its body reads, with the loop variable advanced by `d`. SpMM's loop over a row's
nonzeros (split by 4, the copies unrolled) becomes

    for j_outer in range(L // 4):
        for t in range((feat + 15) // 16):                # one hint per 64-byte line of B's row
            T.prefetch(B[J_indices[min(p + (j_outer + d) * 4, nnz - 1)] * feat + t * 16])
        ...                                               # (and the same for copies 1, 2, 3)
        for k in range(feat):
            C[...] += A[...] * B[J_indices[p + j_outer * 4] * feat + k] + ...

so while this iteration's rows of B arrive, those of `d` iterations later are already on their
way: the gather of a graph's rows from memory overlaps, where each iteration would otherwise wait
for its own. How each access is found, as TVM's `InjectPrefetch` relaxes a region:

- the address is the load's flat offset with the body's `let` variables and block iterators
  replaced by their values, and the loop variable by `var + d`;
- the body's inner loops that the address depends on (or whose bounds the needed ones depend
  on) are walked: a loop in which the address moves by one element is walked by cache lines
  (`LINE_BYTES`; at most `lines` of them where the mark says), the others element by element;
  accesses under a `while` loop are left out;
- every load that forms the address (an index buffer: `J_indices`, `J_indptr`) is read clamped to
  its storage, `max(min(i, size - 1), 0)`, and so is the prefetched offset: near the end of a
  row the hints run into the next rows' nonzeros (what the next iterations of the outer loop
  read), and at the end of the matrix they stay inside the arrays. A prefetch reads nothing.

Identical accesses (the copies of a split's tail branches) are prefetched once. Nothing changes
what the loop computes. `sp.compile` runs this pass last on the CPU; CUDA ignores the annotation.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ir import dtype as dt
from ..ir import make as mk
from ..ir.buffer import FlatBuffer
from ..ir.expr import BinOp, BufferLoad, Call, Cast, IntImm, PrimExpr, Var
from ..ir.func import IRModule, PrimFunc
from ..ir.node import FrozenDict
from ..ir.stmt import (
    Allocate,
    AtomicAdd,
    Block,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
    While,
    seq,
)
from ..ir.visit import map_children, post_order_rewrite, substitute, walk

__all__ = ["LINE_BYTES", "PREFETCH", "inject_prefetch"]

PREFETCH = "prefetch"  #: the loop annotation `sch.prefetch` sets: (buffer name, offset, lines) triples
LINE_BYTES = 64  #: a cache line: one hint covers this many bytes of a contiguous run


def inject_prefetch(mod: PrimFunc | IRModule) -> IRModule:
    """Prefetches for every loop annotated `"prefetch"` (module docstring); the annotation goes."""
    return IRModule.from_any(mod).map_stage3(lambda f: _rewrite(f.body))


def _rewrite(s: Stmt) -> Stmt:
    s = map_children(s, lambda c: _rewrite(c) if isinstance(c, Stmt) else c)
    if not (isinstance(s, For) and PREFETCH in s.annotations):
        return s
    marks = tuple(s.annotations[PREFETCH])
    hints: list[Stmt] = []
    for name, offset, lines in zip(marks[::3], marks[1::3], marks[2::3]):
        hints.extend(_hints(s, name, int(offset), int(lines) if lines else None))
    kept = FrozenDict({k: v for k, v in s.annotations.items() if k != PREFETCH})
    return s.replace(body=seq(*hints, s.body), annotations=kept)


def is_prefetch(s: Stmt) -> bool:
    """Whether `s` is a hint this pass placed (`T.prefetch(buf[offset])`)."""
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == PREFETCH


class _Access(NamedTuple):
    """A read of the prefetched buffer: the buffer, its flat offset, and the inner loops around it
    as (variable, min, extent), outermost first; `let`s and block iterators replaced."""

    buffer: FlatBuffer
    offset: PrimExpr
    loops: tuple


def _accesses(s: Stmt, name: str, env: dict, loops: tuple, out: list) -> None:
    def exprs(*es):
        for e in es:
            if e is None:
                continue
            for n in walk(e):
                if isinstance(n, BufferLoad) and n.buffer.name == name and len(n.indices) == 1:
                    out.append(_Access(n.buffer, substitute(n.indices[0], env), loops))

    if is_prefetch(s) or isinstance(s, While):
        return  # a hint already placed; a `while` loop's trip count is not known ahead
    if isinstance(s, SeqStmt):
        for c in s.stmts:
            _accesses(c, name, env, loops, out)
    elif isinstance(s, LetStmt):
        exprs(s.value)
        _accesses(s.body, name, {**env, s.var: substitute(s.value, env)}, loops, out)
    elif isinstance(s, Block):
        inner = {**env, **{iv.var: substitute(iv.value, env) for iv in s.iter_vars}}
        if s.init is not None:
            _accesses(s.init, name, inner, loops, out)
        _accesses(s.body, name, inner, loops, out)
    elif isinstance(s, For):
        loop = (s.loop_var, substitute(s.min, env), substitute(s.extent, env))
        _accesses(s.body, name, env, (*loops, loop), out)
    elif isinstance(s, IfThenElse):
        exprs(s.condition)
        _accesses(s.then_case, name, env, loops, out)
        if s.else_case is not None:
            _accesses(s.else_case, name, env, loops, out)
    elif isinstance(s, Allocate):
        _accesses(s.body, name, env, loops, out)
    elif isinstance(s, BufferStore | AtomicAdd):
        exprs(*s.indices, s.value)
    elif isinstance(s, Evaluate):
        exprs(s.value)


def _flat_size(buf) -> PrimExpr | None:
    """The elements of a row-major buffer's storage (the product of its shape), else None."""
    if not isinstance(buf, FlatBuffer) or not buf.layout.is_row_major() or not buf.shape:
        return None
    size = buf.shape[0]
    for d in buf.shape[1:]:
        size = mk.mul(size, d)
    return size


def _clamp(index: PrimExpr, size: PrimExpr) -> PrimExpr:
    last = mk.sub(mk.cast(index.dtype, size), IntImm(1, index.dtype))
    return mk.binop("max", mk.binop("min", index, last), IntImm(0, index.dtype))


def _clamp_loads(e: PrimExpr) -> PrimExpr | None:
    """`e` with every load's offset clamped to its buffer's storage; None where a buffer's size
    is unknown (a layout other than row-major)."""
    unknown = []

    def rule(n):
        if isinstance(n, BufferLoad) and len(n.indices) == 1:
            size = _flat_size(n.buffer)
            if size is None:
                unknown.append(n.buffer)
                return n
            return BufferLoad(n.buffer, (_clamp(n.indices[0], size),))
        return n

    out = post_order_rewrite(e, rule)
    return None if unknown else out


def _unit_stride(e: PrimExpr, var: Var) -> bool:
    """Whether `e` moves by exactly 1 when `var` does (`var + ...`, through widening casts)."""
    if e is var:
        return True
    if isinstance(e, Cast):
        return _unit_stride(e.value, var)
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        in_a, in_b = _uses(e.a, var), _uses(e.b, var)
        if in_a and not in_b:
            return _unit_stride(e.a, var)
        if in_b and not in_a and e.op == "+":
            return _unit_stride(e.b, var)
    return False


def _uses(e: PrimExpr, var: Var) -> bool:
    return any(n is var for n in walk(e))


def _hints(loop: For, name: str, offset: int, lines: int | None) -> list[Stmt]:
    found: list[_Access] = []
    _accesses(loop.body, name, {}, (), found)
    ahead = {loop.loop_var: mk.add(loop.loop_var, IntImm(offset, loop.loop_var.dtype))}
    hints: list[Stmt] = []
    for acc in found:
        hint = _hint(acc, ahead, lines)
        # Identical hints (the copies of a split's tail) are built with the same counters.
        if hint is not None and hint not in hints:
            hints.append(hint)
    # Each hint's loops then bind variables of their own.
    return [substitute(h, {c: Var(c.name, c.dtype) for c in _COUNTERS.values()}) for h in hints]


#: The counters of the hints' loops while they are compared, by (depth, dtype).
_COUNTERS: dict[tuple[int, str], Var] = {}


def _counter(depth: int, dtype: str) -> Var:
    return _COUNTERS.setdefault((depth, dtype), Var(f"prefetch_t{depth}", dtype))


def _hint(acc: _Access, ahead: dict, lines: int | None) -> Stmt | None:
    """The hint of one access: loops over the inner loops its address depends on, around one
    `T.prefetch`; None where the address cannot be formed safely."""
    # The inner loops the address depends on, with those their bounds depend on.
    exprs, walked = [acc.offset], []
    for var, lo, ext in reversed(acc.loops):
        if any(_uses(e, var) for e in exprs):
            walked.insert(0, (var, lo, ext))
            exprs += [lo, ext]
    size = _flat_size(acc.buffer)
    if size is None:
        return None
    line = max(1, LINE_BYTES // dt.to_numpy(acc.buffer.dtype).itemsize)  # elements of a cache line
    # Which walked loop goes by lines: the innermost in which the address is contiguous.
    by_line = next((v for v, _, _ in reversed(walked) if _unit_stride(acc.offset, v)), None)
    # Each walked loop runs over fresh counters t_i: var = min + t_i * step.
    counters, mapping, bounds = [], dict(ahead), []
    for i, (var, lo, ext) in enumerate(walked):
        step = line if var is by_line else 1
        t = _counter(i, var.dtype)
        lo, ext = substitute(lo, mapping), substitute(ext, mapping)
        if step == 1:
            count = ext
        elif isinstance(ext, IntImm):
            count = IntImm(-(-ext.value // step), ext.dtype)
        else:
            count = mk.binop("//", mk.add(ext, IntImm(step - 1, ext.dtype)), IntImm(step, ext.dtype))
        if step > 1 and lines is not None:  # the first `lines` lines of each contiguous run
            if isinstance(count, IntImm):
                count = IntImm(min(count.value, lines), ext.dtype)
            else:
                count = mk.binop("min", count, IntImm(lines, ext.dtype))
        mapping[var] = mk.add(lo, mk.mul(t, IntImm(step, var.dtype)))
        counters.append(t)
        bounds.append(count)
    address = substitute(acc.offset, mapping)
    clamped = _clamp_loads(address)
    bounds = [_clamp_loads(b) for b in bounds]
    if clamped is None or any(b is None for b in bounds):
        return None
    load = BufferLoad(acc.buffer, (_clamp(clamped, size),))
    hint: Stmt = Evaluate(Call(PREFETCH, (load,), "void"))
    for t, count in reversed(list(zip(counters, bounds))):
        hint = For(t, IntImm(0, t.dtype), count, "serial", hint)
    return hint
