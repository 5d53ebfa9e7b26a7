"""Finding blocks and loops in a function, and rebuilding the function around a changed loop.

Handles are stable across primitives that keep the object: a block is named by its (unique)
name, a loop by its loop variable (a `Var`, compared by identity).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ScheduleError
from ..ir.func import PrimFunc
from ..ir.stmt import Block, For, Stmt
from ..ir.visit import map_children, walk


def find_block(func: PrimFunc, name: str, primitive: str) -> Block:
    for n in walk(func.body):
        if isinstance(n, Block) and n.name == name:
            return n
    raise ScheduleError(f"in `{primitive}`: no block named {name!r} in `{func.name}`")


def find_loop(func: PrimFunc, loop_var, primitive: str) -> For:
    for n in walk(func.body):
        if isinstance(n, For) and n.loop_var is loop_var:
            return n
    raise ScheduleError(f"in `{primitive}`: loop `{getattr(loop_var, 'name', loop_var)}` is not in `{func.name}`")


def loops_of(func: PrimFunc, block_name: str, primitive: str = "get_loops") -> list[For]:
    """Loops between the block and the block that encloses it, outermost first (as TVM)."""
    find_block(func, block_name, primitive)
    result: list[For] = []

    def visit(s: Stmt, loops: list[For]) -> bool:
        if isinstance(s, Block):
            if s.name == block_name:
                result.extend(loops)
                return True
            loops = []
        if isinstance(s, For):
            loops = [*loops, s]
        return any(visit(child, loops) for child in _child_stmts(s))

    visit(func.body, [])
    return result


def _child_stmts(s: Stmt) -> list[Stmt]:
    out = []
    for _, value in s.fields():
        items = value if isinstance(value, tuple) else (value,)
        out.extend(v for v in items if isinstance(v, Stmt))
    return out


def replace_loop(func: PrimFunc, loop_var, fn: Callable[[For], Stmt]) -> PrimFunc:
    """`func` with the loop of `loop_var` replaced by `fn(loop)`."""

    def go(n):
        if isinstance(n, For) and n.loop_var is loop_var:
            return fn(n)
        if isinstance(n, Stmt):
            return map_children(n, go)
        return n

    return func.replace(body=go(func.body))


def blocks_under(stmt: Stmt) -> list[Block]:
    return [n for n in walk(stmt) if isinstance(n, Block)]
