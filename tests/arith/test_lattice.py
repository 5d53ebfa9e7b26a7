"""Iteration lattices (`sparsetir_py.arith.lattice`): which operands a co-iteration visits."""

from __future__ import annotations

import pytest

import sparsetir_py as sp
from sparsetir_py.arith.lattice import ZERO, lattice, lattice_from_tree, render, simplify_absent


def test_lattice_points():
    """`*` co-iterates the intersection, `+` and `-` the union, with absent operands folded to 0."""
    mul = lattice("A * B")
    assert mul.kind == "intersection" and [sorted(p.operands) for p in mul.points] == [["A", "B"]]
    union = lattice("alpha * A - B")
    assert union.kind == "union"
    assert [str(p) for p in union.points] == ["{A, B}: alpha * A - B", "{A}: alpha * A", "{B}: -B"]
    three = lattice("(A + B) * C", ("A", "B", "C"))
    assert [sorted(p.operands) for p in three.points] == [["A", "B", "C"], ["A", "C"], ["B", "C"]]


def test_points_that_vanish_are_dropped():
    """`2A - BA` is 0 where only B is stored: the merge never visits B's own coordinates."""
    lat = lattice("2 * A - B * A")
    assert [sorted(p.operands) for p in lat.points] == [["A", "B"], ["A"]]
    assert render(simplify_absent(lat.points[0].expression, set())) == "2 * A - B * A"


def test_render_keeps_the_grouping():
    assert str(lattice("2 * (A - B) * 3").points[0]) == "{A, B}: 2 * (A - B) * 3"
    assert str(lattice("A - (B + 1)").points[2]) == "{B}: -(B + 1)"


def test_lattice_rejects_bad_expressions():
    with pytest.raises(sp.LoweringError, match="unsupported construct"):
        lattice("A / B")
    with pytest.raises(sp.LoweringError, match="reads none"):
        lattice("alpha * 2")
    with pytest.raises(sp.LoweringError, match="not an expression"):
        lattice("A +")


def test_casts_pass_through_the_lattice():
    """A cast (from a script's expression: the text has none) is 0 where its operand is: the
    lattice of `-float64(A * B) + C` is that of `-(A * B) + C`, and each point keeps the cast."""
    cast = ("cast", ("*", ("name", "A"), ("name", "B")), "float64")
    tree = ("+", ("neg", cast), ("name", "C"))
    lat = lattice_from_tree(tree, ("A", "B", "C"))
    assert [str(p) for p in lat.points][:2] == ["{A, B, C}: -float64(A * B) + C", "{A, B}: -float64(A * B)"]
    assert [sorted(p.operands) for p in lat.points] == [
        sorted(p.operands) for p in lattice("-(A * B) + C", ("A", "B", "C")).points
    ]
    assert simplify_absent(cast, {"A"}) == ZERO
    assert render(cast, {"A": "x[p]"}) == "float64(x[p] * B)"
