"""`sink_allocations` (Stage III): scratch allocated around several statements moves onto the one
that uses it.

`cache_read` / `cache_write` at a function's root allocate their buffers around the whole body,
so after SparseTIR's `test_horizontal_fuse` schedule both nests sit under four allocations:

    A_shared = T.allocate((128, 128), "float32", "shared")    A_shared = T.allocate(...)
    B_shared = T.allocate((64, 128), "float32", "shared")     for i_outer in T.thread_binding(32, ...):
    for i_outer in T.thread_binding(32, ...):           ->         ... A_shared ...
        ... A_shared ...                                       B_shared = T.allocate(...)
    for i_1_outer in T.thread_binding(8, ...):                 for i_1_outer in T.thread_binding(8, ...):
        ... B_shared ...                                           ... B_shared ...

Wrapped that way the body is one top-level statement: one CUDA launch (`ir.launch.split_launches`)
whose blocks run both nests, one part for `horizontal_fusion`, and scratch that
`compact_buffers` sizes for both. Sunk, each nest is a statement of its own with its own scratch.

An allocation moves only through sequences and other allocations, onto the one statement of a
sequence that uses the buffer; it never enters a loop, a block or a branch (a buffer allocated
inside a loop would start afresh on every iteration). No statement but that one touches the
buffer, so what each statement computes is unchanged.
"""

from __future__ import annotations

from ..ir.buffer import FlatBuffer
from ..ir.expr import Call
from ..ir.func import IRModule, PrimFunc
from ..ir.stmt import Allocate, SeqStmt, Stmt, seq
from ..ir.visit import walk

__all__ = ["sink_allocations", "sink_allocations_in"]


def sink_allocations(mod: PrimFunc | IRModule) -> IRModule:
    """Move every allocation of each Stage III function of `mod` onto the one statement of a
    sequence that uses its buffer (module docstring); other functions pass through.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py import script as T
    >>> @T.prim_func
    ... def two(x: T.handle, y: T.handle):
    ...     T.func_attr({"stage": 3})
    ...     X = T.match_buffer(x, (4,), "float32")
    ...     Y = T.match_buffer(y, (4,), "float32")
    ...     S = T.allocate((4,), "float32", "local")
    ...     for i in T.serial(4):
    ...         S[i] = T.float32(1)
    ...         X[i] = S[i]
    ...     for j in T.serial(4):
    ...         Y[j] = T.float32(2)
    >>> body = sp.transform.sink_allocations(two)["main"].body
    >>> [type(s).__name__ for s in body.stmts]
    ['Allocate', 'For']
    """
    return IRModule.from_any(mod).map_stage3(lambda f: sink_allocations_in(f.body))


def sink_allocations_in(s: Stmt) -> Stmt:
    """`s` with its outer allocations (those reached through sequences and allocations) sunk."""
    if isinstance(s, SeqStmt):
        return seq(*(sink_allocations_in(x) for x in s.stmts))
    if isinstance(s, Allocate):
        return _place(s.buffer, sink_allocations_in(s.body))
    return s


def _place(buf: FlatBuffer, body: Stmt) -> Stmt:
    """`Allocate(buf, body)` with the allocation as deep as it may go (`body` is sunk already)."""
    if isinstance(body, Allocate):  # allocations are independent: move past the other one
        inner = _place(buf, body.body)
        if isinstance(inner, Allocate) and inner.buffer is buf and inner.body is body.body:
            return Allocate(buf, body)  # it goes no deeper: keep the order
        return Allocate(body.buffer, inner)
    if not isinstance(body, SeqStmt):
        return Allocate(buf, body)
    users = [k for k, st in enumerate(body.stmts) if _uses(st, buf)]
    if len(users) != 1:
        return Allocate(buf, body)
    (k,) = users
    stmts = list(body.stmts)
    stmts[k] = _place(buf, stmts[k])
    return seq(*stmts)


def _uses(stmt: Stmt, buf: FlatBuffer) -> bool:
    """Whether `stmt` accesses `buf` (loads, stores, regions, allocations, call arguments)."""
    for n in walk(stmt):
        if getattr(n, "buffer", None) is buf or (isinstance(n, Call) and any(a is buf for a in n.args)):
            return True
    return False
