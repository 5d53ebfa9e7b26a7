"""Launch queries: which loops are bound to a dimension of a CUDA launch, and how a function's
top-level statements group into launches.

They sit next to the launch tags (`ir.stmt.LAUNCH_TAGS`) so that passes (buffer compaction), the
schedule primitives and the code generators ask the same question the same way, and no pass
imports a code generator to ask it.
"""

from __future__ import annotations

from .stmt import LAUNCH_TAGS, For, SeqStmt, Stmt, seq
from .visit import walk

#: The most threads a CUDA thread block may have (the product of its threadIdx extents).
MAX_THREADS_PER_BLOCK = 1024


def is_launch_loop(s: Stmt) -> bool:
    """Whether `s` is a loop bound to a blockIdx/threadIdx tag (a dimension of a CUDA launch)."""
    return isinstance(s, For) and s.kind == "thread_binding" and s.thread in LAUNCH_TAGS


def launch_loops(s: Stmt) -> list[For]:
    """The loops of `s` bound to a blockIdx/threadIdx tag, outermost first."""
    return [n for n in walk(s) if is_launch_loop(n)]


def has_launch_loop(s: Stmt) -> bool:
    """Whether any loop of `s` is bound to a blockIdx/threadIdx tag."""
    return any(is_launch_loop(n) for n in walk(s))


def split_launches(body: Stmt) -> list[list[Stmt]]:
    """The top-level statements of `body` grouped per launch: each group ends with a statement
    that holds loops bound to blockIdx/threadIdx (statements after the last one join it).

    No barrier spans thread blocks, so each top-level nest with bound loops is a launch of its own
    (TVM's host/device split): an init nest finishes before a later nest accumulates into it."""
    stmts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
    parts: list[list[Stmt]] = [[]]
    for s in stmts:
        if parts[-1] and has_launch_loop(seq(*parts[-1])):
            parts.append([])
        parts[-1].append(s)
    if len(parts) > 1 and not has_launch_loop(seq(*parts[-1])):
        parts[-2].extend(parts.pop())
    return parts
