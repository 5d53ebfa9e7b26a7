"""Iteration lattices of element-wise expressions over sparse operands (Kjolstad et al., OOPSLA 2017).

An expression such as `alpha * A + beta * B` reads several sparse operands at one coordinate. Its
*lattice* lists the sets of operands whose stored coordinates the merged loop must visit, from
the top (every operand stored) down: a point is a set of operands that are stored at a
coordinate, with the expression simplified under the assumption that the others hold their
default value 0. A point whose expression is 0 is dropped: the loop never visits it.

    >>> lat = lattice("A * B")
    >>> [sorted(p.operands) for p in lat.points], lat.kind
    ([['A', 'B']], 'intersection')
    >>> print(lattice("alpha * A + beta * B"))
    {A, B}: alpha * A + beta * B
    {A}: alpha * A
    {B}: beta * B
    union

Intersection (`*`) keeps the top point only; union (`+`, `-`) keeps every point whose
expression does not vanish. The merge loops built from a two-operand lattice (by
`transform/coiterate.py` in `lower_sparse_iter`, and by `sparsetir_py.coiteration.kernels` for the
element-wise operators) visit its points with two pointers over sorted coordinates: while both
rows have entries, the smaller coordinate decides the point (both, A only, B only); after one row
ends, the other's tail is the single-operand point, when the lattice has it.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

from .. import pyast
from ..errors import LoweringError

# ------------------------------------------------------------------ expressions
# A tiny expression tree: ("num", value) | ("name", id) | ("neg", x) | (op, x, y), op in + - *, or
# ("cast", x, dtype): x converted to a numeric dtype, 0 where x is 0 (from a script's expression by
# `transform/coiterate.py`; the text syntax has no cast).
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
ZERO = ("num", 0)


def parse_expression(text: str, operands: tuple[str, ...]) -> tuple:
    """`text` (Python syntax: names, numbers, `+`, `-`, `*`, parentheses) as a tree; `LoweringError`."""
    try:
        node = pyast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise LoweringError(f"co-iteration expression {text!r} is not an expression: {e.msg}") from None
    tree = _tree(node, text)
    if not any(name in operands for name in names(tree)):
        raise LoweringError(f"co-iteration expression {text!r} reads none of the sparse operands {operands}")
    return tree


def _tree(node: ast.AST, text: str) -> tuple:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return ("num", node.value)
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return ("neg", _tree(node.operand, text))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return (_OPS[type(node.op)], _tree(node.left, text), _tree(node.right, text))
    raise LoweringError(
        f"co-iteration expression {text!r}: unsupported construct `{type(node).__name__}` "
        "(expected names, numbers, +, -, * and parentheses)"
    )


def names(tree: tuple) -> set[str]:
    if tree[0] == "name":
        return {tree[1]}
    if tree[0] == "num":
        return set()
    if tree[0] == "cast":
        return names(tree[1])
    return set().union(*(names(t) for t in tree[1:]))


def simplify_absent(tree: tuple, absent: set[str]) -> tuple:
    """`tree` with the operands in `absent` replaced by 0 and the zeros propagated (x * 0 -> 0,
    x + 0 -> x, 0 - x -> -x, -0 -> 0, cast(0) -> 0), so that a point computes only what its stored
    operands give."""
    kind = tree[0]
    if kind == "name":
        return ZERO if tree[1] in absent else tree
    if kind == "num":
        return tree
    if kind == "neg":
        x = simplify_absent(tree[1], absent)
        return ZERO if x == ZERO else ("neg", x)
    if kind == "cast":
        x = simplify_absent(tree[1], absent)
        return ZERO if x == ZERO else ("cast", x, tree[2])
    a, b = simplify_absent(tree[1], absent), simplify_absent(tree[2], absent)
    if kind == "*":
        return ZERO if ZERO in (a, b) else ("*", a, b)
    if b == ZERO:
        return a
    if a == ZERO:
        return b if kind == "+" else ("neg", b)
    return (kind, a, b)


def render(tree: tuple, env: dict[str, str] | None = None) -> str:
    """The tree as Python text, names mapped through `env` (fully parenthesised where needed); a
    cast reads `float64(x)`."""
    env = env or {}
    kind = tree[0]
    if kind == "name":
        return env.get(tree[1], tree[1])
    if kind == "num":
        return repr(tree[1])
    if kind == "neg":
        return f"-{_atom(tree[1], env)}"
    if kind == "cast":
        return f"{tree[2]}({render(tree[1], env)})"
    # Parentheses where Python would group otherwise, and around a right operand of the same
    # precedence, so that the evaluation order is the tree's.
    left, right = tree[1], tree[2]
    left_text = _atom(left, env) if kind == "*" and left[0] in ("+", "-") else render(left, env)
    grouped = right[0] in ("+", "-") or (kind == "*" and right[0] == "*")
    right_text = _atom(right, env) if grouped else render(right, env)
    return f"{left_text} {kind} {right_text}"


def _atom(tree: tuple, env: dict[str, str]) -> str:
    text = render(tree, env)
    return f"({text})" if tree[0] in ("+", "-", "*") else text


# ------------------------------------------------------------------ lattices
@dataclass(frozen=True)
class LatticePoint:
    """A set of stored operands and what the expression computes there."""

    operands: frozenset[str]
    expression: tuple

    def __str__(self) -> str:
        return "{" + ", ".join(sorted(self.operands)) + "}: " + render(self.expression)


@dataclass(frozen=True)
class Lattice:
    """The points of a co-iteration, top (all operands stored) first."""

    operands: tuple[str, ...]
    points: tuple[LatticePoint, ...]

    @property
    def kind(self) -> str:
        """ "intersection" when only the top point remains (every operand must be stored), else "union"."""
        top_only = len(self.points) == 1 and len(self.points[0].operands) == len(self.operands)
        return "intersection" if top_only else "union"

    def point(self, stored: set[str]) -> LatticePoint | None:
        return next((p for p in self.points if p.operands == frozenset(stored)), None)

    def __str__(self) -> str:
        return "\n".join([*(str(p) for p in self.points), self.kind])


def lattice(text: str, operands: tuple[str, ...] = ("A", "B")) -> Lattice:
    """The iteration lattice of `text` over the sparse `operands` (other names are scalars)."""
    return lattice_from_tree(parse_expression(text, operands), operands)


def lattice_from_tree(tree: tuple, operands: tuple[str, ...] = ("A", "B")) -> Lattice:
    """The iteration lattice of an expression tree (which may hold casts, unlike the text)."""
    used = tuple(o for o in operands if o in names(tree))
    points = []
    for size in range(len(used), 0, -1):
        for stored in itertools.combinations(used, size):
            expression = simplify_absent(tree, set(used) - set(stored))
            if expression != ZERO:
                points.append(LatticePoint(frozenset(stored), expression))
    return Lattice(used, tuple(points))
