"""Affine expressions: canonical form, printing in XLA's notation, parsing, evaluation, errors."""

from __future__ import annotations

import pytest

from sparsetir_py.arith import (
    IndexingMapError,
    Interval,
    RangeEnv,
    const,
    dim,
    parse_affine_expr,
    simplify_expr,
    symbol,
)
from sparsetir_py.errors import SparseTIRError

d0, d1, d2 = dim(0), dim(1), dim(2)
s0, s1 = symbol(0), symbol(1)


def test_equal_polynomials_compare_equal():
    """Sum order, grouping, distribution of constants and cancellation do not matter."""
    assert d0 + d1 == d1 + d0
    assert (d0 + d1) * 3 - d1 == 3 * d0 + 2 * d1
    assert d0 - d0 == const(0)
    assert hash((d0 + 1) * 2) == hash(2 * d0 + 2)
    assert (d0 + 4) // 2 == d0 // 2 + 2
    assert parse_affine_expr("(d0 + d1) * 2 - d1 * 2") == d0 * 2


def test_print_order_and_spelling():
    """XLA's order: summands with dimensions first; products, mod, floordiv, dims, symbols; constant last."""
    assert str(s0 + 3 + d1 * 2 + d0) == "d1 * 2 + d0 + s0 + 3"
    assert str(16 - d1) == "-d1 + 16"
    assert str(d0 - d1 * 3 - 5) == "d0 - d1 * 3 - 5"
    assert str(d1 * -3) == "d1 * -3"
    assert str((d1 - 3) // 7) == "(d1 - 3) floordiv 7"
    assert str((d1 % 2) * 4 + d2) == "(d1 mod 2) * 4 + d2"
    assert str((-d0) % 2) == "(-d0) mod 2"
    assert str(-(d0 // 2)) == "-(d0 floordiv 2)"
    assert str(d0 - d1 // 2) == "d0 - d1 floordiv 2"
    assert str((s0 * 128) % 715) == "(s0 * 128) mod 715"
    assert str(const(-4)) == "-4"


def test_pulls_multiples_of_the_divisor_out():
    assert str((16 * d0 + 4 * d1 + d2) // 8) == "d0 * 2 + (d1 * 4 + d2) floordiv 8"
    assert str((16 * d0 + 4 * d1 + d2) % 8) == "(d1 * 4 + d2) mod 8"
    assert str((d0 + 16) // 8) == "d0 floordiv 8 + 2"
    assert str((d0 + 17) // 8) == "(d0 + 17) floordiv 8"  # other constants stay inside, as in XLA
    assert str((d0 - 1) // 2) == "(d0 - 1) floordiv 2"
    assert (d0 + 17) // 8 - (d0 + 1) // 8 == const(2)  # ... and differ by multiples only as like terms
    assert str((d0 - 17) % 8) == "(d0 - 1) mod 8"


def test_common_factors_and_nested_divisions():
    assert str((s0 * 6 + 9) // 18) == "(s0 * 2 + 3) floordiv 6"
    assert str((4 * d0) % 6) == "((d0 * 2) mod 3) * 2"
    assert (d0 // 2) // 7 == d0 // 14
    assert str((s0 * 2 + s1 // 64) // 3) == "(s0 * 128 + s1) floordiv 192"
    assert str((d0 // 3 + d1 // 3) // 6) == "(d0 floordiv 3 + d1 floordiv 3) floordiv 6"  # two inner divisions
    assert (d0 % 12) // 4 == (d0 // 4) % 3
    assert (d0 % 12) % 4 == d0 % 4
    assert (d0 // 8) * 8 + d0 % 8 == d0
    assert (d0 // 8) * 24 + (d0 % 8) * 3 + d1 == d0 * 3 + d1


def test_negative_and_unit_divisors():
    assert d0 // 1 == d0 and d0 % 1 == const(0)
    assert str(d0 // -3) == "(-d0) floordiv 3"
    assert str(d0 % -3) == "-((-d0) mod 3)"
    for value in range(-10, 11):
        assert (d0 // -3).evaluate([value]) == value // -3
        assert (d0 % -3).evaluate([value]) == value % -3
        assert d0.ceildiv(4).evaluate([value]) == -(-value // 4)


def test_constants_fold():
    assert const(17) // 5 == const(3)
    assert const(-17) // 5 == const(-4)
    assert const(-17) % 5 == const(3)
    assert (d0 * 0 + 4).is_constant


def test_evaluate_and_substitute():
    e = (d0 * 4 + s0) // 3 - d1 % 2
    assert e.evaluate([5, 3], [1]) == (21 // 3) - 1
    moved = e.substitute([d1, d0 + 1], [const(2)])
    assert moved.evaluate([3, 5]) == ((6 * 4 + 2) // 3) - (3 % 2)
    assert e.dims_used() == {0, 1} and e.symbols_used() == {0}


def test_parse_spellings():
    """`floorDiv`, `//`, `%`, juxtaposed coefficients, unary minus (binding tighter than floordiv)."""
    assert parse_affine_expr("(100d0 + 10d1 + d2) floorDiv 100") == (100 * d0 + 10 * d1 + d2) // 100
    assert parse_affine_expr("d0 // 4 + d1 % 3") == d0 // 4 + d1 % 3
    assert parse_affine_expr("-d0 floordiv 2") == (-d0) // 2
    assert parse_affine_expr("-(d0 floordiv 2)") == -(d0 // 2)
    assert parse_affine_expr("3 * d0 - -2") == 3 * d0 + 2
    assert parse_affine_expr("d0 ceildiv 4") == d0.ceildiv(4)
    assert parse_affine_expr("x * 2 + y", ["x", "y"]) == d0 * 2 + d1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("d0 * d1", "non-affine product"),
        ("d0 floordiv d1", "must be a constant"),
        ("d0 mod 0", "division by zero"),
        ("d0 + ", "expected an expression"),
        ("(d0 + 1", r"expected `\)`"),
        ("d0 $ 2", "unexpected character"),
        ("q0 + 1", "unknown variable `q0`"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(IndexingMapError, match=message) as info:
        parse_affine_expr(text)
    assert isinstance(info.value, SparseTIRError)


def test_operator_errors():
    with pytest.raises(IndexingMapError, match="non-affine"):
        d0 * d1
    with pytest.raises(IndexingMapError, match="division by zero"):
        d0 // 0
    with pytest.raises(IndexingMapError):
        d0 + 1.5


def test_simplify_expr_with_bounds():
    env = RangeEnv([Interval(0, 6), Interval(0, 14)])
    assert simplify_expr(d0 + d1 // 16, env) == d0
    assert simplify_expr(d1 % 16, env) == d1
    env = RangeEnv([Interval(0, 9)] * 3)
    assert str(simplify_expr((d0 * 16 + d1 * 4 + d2) // 8, env)) == "d0 * 2 + (d1 * 4 + d2) floordiv 8"
    env = RangeEnv([Interval(0, 127), Interval(0, 3)])
    assert str(simplify_expr((d0 * 8 + d1 * 2 + 1) // 4, env)) == "d0 * 2 + d1 floordiv 2"
    assert str(simplify_expr((d0 * 4 + d1) % 8, env)) == "(d0 mod 2) * 4 + d1"
    # Unbounded variables: only the rewrites that hold everywhere.
    env = RangeEnv([Interval(None, None), Interval(0, 7)])
    assert simplify_expr((d0 * 8 + d1) // 8, env) == d0
    assert simplify_expr((d0 * 8 + d1) % 8, env) == d1
