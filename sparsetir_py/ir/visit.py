"""Generic traversal of IR trees: children, pre-order walks, and rebuilding with a function.

Identity nodes (`Var`, `Axis`, buffers) are leaves here: a walk does not descend into the
definition of an axis or buffer from each use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .axis import Axis
from .buffer import FlatBuffer, SparseBuffer
from .expr import Var
from .node import FrozenDict, Node

LEAF_TYPES = (Var, Axis, SparseBuffer, FlatBuffer)


def children(node: Node) -> Iterator[Node]:
    """Direct sub-nodes of `node` (through tuples and dict values), identity nodes not expanded."""
    if isinstance(node, LEAF_TYPES):
        return
    for _, value in node.fields():
        yield from _nodes_in(value)


def _nodes_in(value: Any) -> Iterator[Node]:
    if isinstance(value, Node):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _nodes_in(v)
    elif isinstance(value, FrozenDict):
        for v in value.values():
            yield from _nodes_in(v)


def walk(node: Node) -> Iterator[Node]:
    """Every node under `node` (itself included), pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(children(n))))


def map_children(node: Node, fn: Callable[[Node], Node]) -> Node:
    """`node` with `fn` applied to each direct sub-node; the same object when nothing changed."""
    if isinstance(node, LEAF_TYPES):
        return node
    changes = {}
    for name, value in node.fields():
        new = _map_value(value, fn)
        if new is not value:
            changes[name] = new
    return node.replace(**changes) if changes else node


def _map_value(value: Any, fn: Callable[[Node], Node]) -> Any:
    if isinstance(value, Node):
        return fn(value)
    if isinstance(value, tuple):
        new = tuple(_map_value(v, fn) for v in value)
        return value if all(a is b for a, b in zip(new, value)) else new
    if isinstance(value, FrozenDict):
        new = {k: _map_value(v, fn) for k, v in value.items()}
        return value if all(new[k] is value[k] for k in value) else FrozenDict(new)
    return value


def post_order_rewrite(node: Node, fn: Callable[[Node], Node]) -> Node:
    """Rebuild bottom-up: children first, then `fn` on the rebuilt node."""
    return fn(map_children(node, lambda c: post_order_rewrite(c, fn)))


def substitute(node: Node, mapping: dict[Var, Node]) -> Node:
    """Replace variables by expressions (or other variables)."""
    if not mapping:
        return node
    return post_order_rewrite(node, lambda n: mapping.get(n, n) if isinstance(n, Var) else n)


def substitute_deep(node: Node, mapping: dict[Var, Node]) -> Node:
    """Like `substitute`, but also inside the definitions of axes and buffers.

    An axis or buffer whose fields change is rebuilt once (a new identity) and every use points
    at the rebuilt one.
    """
    memo: dict[int, Node] = {}

    def go(n: Node) -> Node:
        if isinstance(n, Var):
            return mapping.get(n, n)
        if isinstance(n, Axis | SparseBuffer | FlatBuffer):
            key = id(n)
            if key not in memo:
                changes = {}
                for name, value in n.fields():
                    new = _map_value(value, go)
                    if new is not value:
                        changes[name] = new
                memo[key] = n.replace(**changes) if changes else n
            return memo[key]
        return map_children(n, go)

    return go(node)
