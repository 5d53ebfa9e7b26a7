"""Iteration lattices (`sparsetir_py.arith.lattice`): which operands a co-iteration visits."""

from __future__ import annotations

import pytest

import sparsetir_py as sp
from sparsetir_py.arith.lattice import lattice, render, simplify_absent


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
