"""Finding blocks and loops in a function, and rebuilding the function around changed statements.

Handles are stable across primitives that keep the object: a block is named by its (unique)
name, a loop by its loop variable (a `Var`, compared by identity). Statements are rebuilt with
`map_children`, which keeps every untouched subtree the same object, so a statement found by a
walk can be replaced or removed by identity afterwards.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

from ..errors import ScheduleError
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BinOp, IntImm, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.node import Node
from ..ir.printer import ScriptPrinter
from ..ir.stmt import Allocate, Block, For, SeqStmt, SparseIteration, Stmt, seq
from ..ir.visit import map_children, post_order_rewrite, walk

EMPTY = SeqStmt(())


# ---------------------------------------------------------------- finding
LISTED = 20  # names a failed lookup lists before "and N more" (decomposed functions hold many blocks)


def missing(primitive: str, what: str, name: str, owner: PrimFunc | str, existing: list[str]) -> ScheduleError:
    """ "no block named 'x'" with the names that do exist (in program order) and the closest one.

    `owner` is the function searched, or a description of where (for functions: "the module").
    Loops are found by their variable, not their name (two loops may share one), so a loop handle
    from another function reads "loop `i` is not in `f`", also when `f` has a loop called `i`,
    and then says so. A block missing from a Stage I function says where blocks come from."""
    names = list(dict.fromkeys(existing))  # program order, each name once
    where = f"`{owner.name}`" if isinstance(owner, PrimFunc) else owner
    close = _closest(name, names)
    hint = f"; did you mean `{close}`?" if close else ""
    listed = ", ".join(f"`{e}`" for e in names[:LISTED]) if names else "none"
    if len(names) > LISTED:
        listed += f" and {len(names) - LISTED} more"
    if what == "loop":
        if name in names:
            hint = (
                f"; the loop named `{name}` there is another one (the handle is from another function, or from "
                "before a primitive replaced its loop)"
            )
        return ScheduleError(f"in `{primitive}`: loop `{name}` is not in {where} (its loops: {listed}){hint}")
    if what == "block" and isinstance(owner, PrimFunc) and owner.stage == 1:
        hint += _stage1_block_hint(owner, name)
    return ScheduleError(f"in `{primitive}`: no {what} named {name!r} in {where} (it has {listed}){hint}")


def _closest(name: str, names: list[str]) -> str | None:
    """The most similar name (difflib's ratio, at least 0.6 as in `get_close_matches`), the first
    in program order among equals: `csrmm` suggests the outer block `csrmm0`, not `csrmm1`."""
    best, best_ratio = None, 0.0
    for e in names:
        if e == name:
            continue
        ratio = difflib.SequenceMatcher(None, name, e).ratio()
        if ratio >= 0.6 and ratio > best_ratio:
            best, best_ratio = e, ratio
    return best


def _stage1_block_hint(func: PrimFunc, name: str) -> str:
    """Blocks are made by lowering: a Stage I function has sparse iterations instead."""
    if any(isinstance(n, SparseIteration) and n.name == name for n in walk(func.body)):
        return (
            f"; `{name}` is a sparse iteration: get it with `get_sparse_iteration`, or lower the function with "
            f"`sp.lower_sparse_iter`, which makes blocks `{name}0`, `{name}1`, ..."
        )
    return f"; `{func.name}` is a Stage I function: its blocks appear after `sp.lower_sparse_iter`"


def block_names(func: PrimFunc) -> list[str]:
    return [n.name for n in walk(func.body) if isinstance(n, Block)]


def loop_names(func: PrimFunc) -> list[str]:
    return [n.loop_var.name for n in walk(func.body) if isinstance(n, For)]


def find_block(func: PrimFunc, name: str, primitive: str) -> Block:
    for n in walk(func.body):
        if isinstance(n, Block) and n.name == name:
            return n
    raise missing(primitive, "block", name, func, block_names(func))


def find_loop(func: PrimFunc, loop_var, primitive: str) -> For:
    for n in walk(func.body):
        if isinstance(n, For) and n.loop_var is loop_var:
            return n
    raise missing(primitive, "loop", getattr(loop_var, "name", str(loop_var)), func, loop_names(func))


def child_stmts(s: Stmt) -> list[Stmt]:
    """The statements directly inside `s`, in execution order (a block's init before its body)."""
    if isinstance(s, Block):
        return [x for x in (s.init, s.body) if x is not None]
    out = []
    for _, value in s.fields():
        items = value if isinstance(value, tuple) else (value,)
        out.extend(v for v in items if isinstance(v, Stmt))
    return out


def find_path(func: PrimFunc, match: Callable[[Stmt], bool]) -> list[Stmt] | None:
    """The statements from `func.body` down to the first one `match` accepts (pre-order), inclusive."""

    def go(s: Stmt, path: list[Stmt]) -> list[Stmt] | None:
        path = [*path, s]
        if match(s):
            return path
        for c in child_stmts(s):
            found = go(c, path)
            if found is not None:
                return found
        return None

    return go(func.body, [])


def block_path(func: PrimFunc, name: str, primitive: str) -> list[Stmt]:
    path = find_path(func, lambda s: isinstance(s, Block) and s.name == name)
    if path is None:
        raise missing(primitive, "block", name, func, block_names(func))
    return path


def loop_path(func: PrimFunc, loop_var, primitive: str) -> list[Stmt]:
    path = find_path(func, lambda s: isinstance(s, For) and s.loop_var is loop_var)
    if path is None:
        raise missing(primitive, "loop", getattr(loop_var, "name", str(loop_var)), func, loop_names(func))
    return path


def enclosing_block(path: list[Stmt]) -> Block | None:
    """The nearest block strictly above the last statement of `path` (None: the function root)."""
    for s in reversed(path[:-1]):
        if isinstance(s, Block):
            return s
    return None


def scope_name(scope: Block | None) -> str:
    return "the function root" if scope is None else f"block `{scope.name}`"


def loops_of(func: PrimFunc, block_name: str, primitive: str = "get_loops") -> list[For]:
    """Loops between the block and the block that encloses it, outermost first (as TVM)."""
    path = block_path(func, block_name, primitive)
    out: list[For] = []
    for s in path[:-1]:
        if isinstance(s, Block):
            out = []
        elif isinstance(s, For):
            out.append(s)
    return out


def blocks_under(stmt: Stmt) -> list[Block]:
    return [n for n in walk(stmt) if isinstance(n, Block)]


def child_blocks(stmt: Stmt) -> list[Block]:
    """Blocks under `stmt` that no other block under `stmt` encloses, in program order."""
    out: list[Block] = []

    def go(s: Stmt) -> None:
        if isinstance(s, Block):
            out.append(s)
            return
        for c in child_stmts(s):
            go(c)

    for c in child_stmts(stmt):
        go(c)
    return out


def get_child_blocks(func: PrimFunc, target: str | Var) -> list[str]:
    """Names of the blocks directly under a block (by name) or a loop (by variable): blocks that
    no other block under it encloses, in program order.

    It requires: a known block or loop.

    >>> import sparsetir_py as sp
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> get_child_blocks(f, "csrmm0")
    ['csrmm1']
    """
    primitive = "get_child_blocks"
    node = find_block(func, target, primitive) if isinstance(target, str) else find_loop(func, target, primitive)
    return [b.name for b in child_blocks(node)]


def uses_var(node: Node, variables: Iterable[Var]) -> bool:
    vs = set(variables)
    return any(isinstance(n, Var) and n in vs for n in walk(node))


# ---------------------------------------------------------------- rebuilding
def rewrite_stmts(node: Stmt, fn: Callable[[Stmt], Stmt | None]) -> Stmt:
    """Top-down: where `fn(s)` returns a statement it replaces `s` (not visited further)."""

    def go(n):
        if not isinstance(n, Stmt):
            return n
        new = fn(n)
        if new is not None:
            return new
        return map_children(n, go)

    return go(node)


def replace_stmt(func: PrimFunc, target: Stmt, new: Stmt) -> PrimFunc:
    """`func` with the statement `target` (by identity) replaced by `new`."""
    return func.replace(body=rewrite_stmts(func.body, lambda s: new if s is target else None))


def replace_loop(func: PrimFunc, loop_var, fn: Callable[[For], Stmt]) -> PrimFunc:
    """`func` with the loop of `loop_var` replaced by `fn(loop)`."""
    return func.replace(
        body=rewrite_stmts(func.body, lambda s: fn(s) if isinstance(s, For) and s.loop_var is loop_var else None)
    )


def replace_block(func: PrimFunc, name: str, fn: Callable[[Block], Stmt]) -> PrimFunc:
    return func.replace(
        body=rewrite_stmts(func.body, lambda s: fn(s) if isinstance(s, Block) and s.name == name else None)
    )


def remove_stmt(root: Stmt, target: Stmt) -> Stmt:
    """`root` without `target` (by identity); sequences that lose it close up."""

    def go(n):
        if not isinstance(n, Stmt):
            return n
        if n is target:
            return EMPTY
        if isinstance(n, SeqStmt):
            kept = [go(s) for s in n.stmts]
            kept = [s for s in kept if not (isinstance(s, SeqStmt) and not s.stmts)]
            if len(kept) == len(n.stmts) and all(a is b for a, b in zip(kept, n.stmts)):
                return n
            return seq(*kept) if kept else EMPTY
        return map_children(n, go)

    return go(root)


def with_scope_body(func: PrimFunc, scope: Block | None, fn: Callable[[Stmt], Stmt]) -> PrimFunc:
    """`func` with the body of `scope` (the function body when None) replaced by `fn(body)`."""
    if scope is None:
        return func.replace(body=fn(func.body))
    return replace_stmt(func, scope, scope.replace(body=fn(scope.body)))


def substitute_buffers(node: Node, mapping: dict) -> Node:
    """Every use and declaration of the buffers in `mapping` replaced by their images."""
    if not mapping:
        return node
    return post_order_rewrite(node, lambda n: mapping.get(n, n) if isinstance(n, FlatBuffer | SparseBuffer) else n)


def allocate_in_scope(func: PrimFunc, scope: Block | None, buf: FlatBuffer) -> PrimFunc:
    """Allocate `buf` in the block `scope` (`T.alloc_buffer`). At the function root a global
    buffer becomes a function-level scratch buffer (the runtime allocates it per call, as for
    TVM's root block); a shared or local one a `T.allocate` around the body."""
    if scope is None and buf.scope == "global":
        return func.replace(buffers=(*func.buffers, buf))
    if scope is None:
        return func.replace(body=Allocate(buf, func.body))
    current = find_block(func, scope.name, "allocate")
    return replace_stmt(func, current, current.replace(alloc_buffers=(*current.alloc_buffers, buf)))


# ---------------------------------------------------------------- names
class NameGen:
    """Fresh names, unique in one function: `base`, then `base_1`, `base_2`, ... (deterministic).

    Variables and buffers share one namespace (`names(base)`), blocks have their own
    (`names.block(base)`), so a cache buffer and its copy block are both `X_local`.
    """

    def __init__(self, func: PrimFunc):
        taken = {p.name for p in func.params} | {a.name for a in func.axes} | {b.name for b in func.buffers}
        blocks: set[str] = set()
        for n in walk(func.body):
            if isinstance(n, Var):
                taken.add(n.name)
            elif isinstance(n, Block):
                blocks.add(n.name)
                taken.update(b.name for b in n.alloc_buffers)
            elif isinstance(n, Allocate):
                taken.add(n.buffer.name)
        self.taken = taken
        self.blocks = blocks

    @staticmethod
    def _fresh(base: str, taken: set[str]) -> str:
        name, n = base, 0
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        return name

    def __call__(self, base: str) -> str:
        return self._fresh(base, self.taken)

    def block(self, base: str) -> str:
        return self._fresh(base, self.blocks)


def facts(path: list[Stmt]) -> dict:
    """Inclusive ranges of the loop variables and block iterators bound along `path`."""
    out: dict = {}
    for s in path:
        if isinstance(s, For):
            out[s.loop_var] = (s.min, BinOp("-", BinOp("+", s.min, s.extent), _one(s.extent)))
        elif isinstance(s, Block):
            for iv in s.iter_vars:
                out[iv.var] = (_zero(iv.extent), BinOp("-", iv.extent, _one(iv.extent)))
    return out


def _one(e: PrimExpr) -> PrimExpr:
    return IntImm(1, e.dtype)


def _zero(e: PrimExpr) -> PrimExpr:
    return IntImm(0, e.dtype)


# ---------------------------------------------------------------- showing
def show_expr(e: PrimExpr) -> str:
    """An expression as the script writes it (`feat - 1`), for error messages."""
    return ScriptPrinter().expr(e)


def fragment(func: PrimFunc, target: str | Var, *, regions: bool = False) -> str:
    """The script text of one block (by name) or loop (by variable) of `func`, for docs and errors.

    `T.reads`/`T.writes` lines are left out unless `regions` is true.
    """
    if isinstance(target, str):
        node: Stmt = find_block(func, target, "fragment")
    else:
        node = find_loop(func, target, "fragment")
    p = ScriptPrinter()
    for param in func.params:
        p.var(param)
    for b in func.buffers:
        p.buf(b)
    p.stmt(node)
    lines = p.b.lines
    if not regions:
        lines = [ln for ln in lines if not ln.lstrip().startswith(("T.reads(", "T.writes("))]
    return "\n".join(lines)
