"""The simplifier section of XLA's "Indexing analysis" document, example by example, and the
simplification cases of XLA's own test suite (indexing_map_test.cc), input and expected output.

Each case also brute-forces the whole domain: the simplified map must have the same valid points
and the same results as the input.
"""

from __future__ import annotations

import itertools
import math

import pytest

from sparsetir_py.arith import IndexingMap, parse_indexing_map
from sparsetir_py.arith.layout_maps import reshape_map


def valid_points(m: IndexingMap) -> dict:
    bounds = m.dim_bounds + m.symbol_bounds
    points = {}
    for p in itertools.product(*(range(b.lo, b.hi + 1) for b in bounds)):
        d, s = p[: m.num_dims], p[m.num_dims :]
        if all(r.contains(e.evaluate(d, s)) for e, r in m.constraints):
            points[d, s] = tuple(e.evaluate(d, s) for e in m.results)
    return points


def check(source: str, expected: str) -> IndexingMap:
    m = parse_indexing_map(source)
    s = m.simplify()
    assert str(s) == expected
    assert s == parse_indexing_map(expected)
    if math.prod(b.size for b in m.dim_bounds + m.symbol_bounds) <= 20000:
        assert valid_points(s) == valid_points(m)
    return s


# --- The document's simplifier examples ----------------------------------------------------------


def test_doc_div_and_mod_fixed_by_bounds():
    """`(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16)` for d in [0, 6] x [0, 14] becomes the identity."""
    check(
        "(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16), domain: d0 in [0, 6], d1 in [0, 14]",
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 6], d1 in [0, 14]",
    )


def test_doc_decimal_digits():
    """The document's text verbatim (`floorDiv`, coefficients written against their variables)."""
    check(
        "(d0, d1, d2) -> ((100d0 + 10d1 + d2) floorDiv 100, ((100d0 + 10d1 + d2) mod 100) floordiv 10,"
        " d2 mod 10), domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]",
        "(d0, d1, d2) -> (d0, d1, d2), domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]",
    )


def test_doc_multiples_pulled_out_of_div_and_mod():
    check(
        "(d0, d1, d2) -> ((16d0 + 4d1 + d2) floordiv 8, (16d0 + 4d1 + d2) mod 8),"
        " domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]",
        "(d0, d1, d2) -> (d0 * 2 + (d1 * 4 + d2) floordiv 8, (d1 * 4 + d2) mod 8),"
        " domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]",
    )
    # The document's spelling of the result parses to the same canonical map.
    doc_result = parse_indexing_map(
        "(d0, d1, d2) -> (2d0 + (4d1 + d2) floordiv 8,(4d1 + d2) mod 8),"
        " domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]"
    )
    assert (
        doc_result
        == parse_indexing_map(
            "(d0, d1, d2) -> ((16d0 + 4d1 + d2) floordiv 8, (16d0 + 4d1 + d2) mod 8),"
            " domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]"
        ).simplify()
    )


def test_doc_reversed_division():
    """`-(-11d0 - d1 + 109) floordiv 11 + 9` for d in [0, 9] x [0, 10] becomes `d0`, reading the
    negation as applied to the whole floordiv, as XLA's test of this example does."""
    check(
        "(d0, d1) -> (-((-11d0 - d1 + 109) floordiv 11) + 9), domain: d0 in [0, 9], d1 in [0, 10]",
        "(d0, d1) -> (d0), domain: d0 in [0, 9], d1 in [0, 10]",
    )


def test_doc_reversed_division_literal_precedence():
    """With MLIR's precedence (unary minus binds tighter than floordiv) the document's text is a
    different function: `d0 - 1` wherever `d1 < 10`. The simplifier keeps that function."""
    m = parse_indexing_map("(d0, d1) -> (-(-11d0 - d1 + 109) floordiv 11 + 9), domain: d0 in [0, 9], d1 in [0, 10]")
    assert m.evaluate((3, 0)) == (2,)
    s = m.simplify()
    assert str(s) == "(d0, d1) -> ((d1 - 10) floordiv 11 + d0), domain: d0 in [0, 9], d1 in [0, 10]"
    assert valid_points(s) == valid_points(m)


def test_doc_chained_reshapes_cancel():
    """f32[10,10,10] -> f32[50,20] -> f32[10,10,10]: the composed output-to-input map is the identity."""
    reshape2 = reshape_map((50, 20), (10, 10, 10))  # output of reshape2 -> its input (reshape1)
    reshape1 = reshape_map((10, 10, 10), (50, 20))  # output of reshape1 -> p0
    composed = reshape1.compose(reshape2)
    s = composed.simplify()
    assert str(s) == "(d0, d1, d2) -> (d0, d1, d2), domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]"
    assert s.is_identity()
    assert valid_points(s) == valid_points(composed)
    # Written out as XLA composes it, before any simplification.
    raw = parse_indexing_map(
        "(d0, d1, d2) -> (((d0 * 100 + d1 * 10 + d2) floordiv 20 * 20 + (d0 * 100 + d1 * 10 + d2) mod 20)"
        " floordiv 100, (((d0 * 100 + d1 * 10 + d2) floordiv 20 * 20 + (d0 * 100 + d1 * 10 + d2) mod 20)"
        " mod 100) floordiv 10, ((d0 * 100 + d1 * 10 + d2) floordiv 20 * 20 + (d0 * 100 + d1 * 10 + d2)"
        " mod 20) mod 10), domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]"
    )
    assert raw.simplify() == s


def test_doc_constraint_bounds_rewritten():
    """`lower_bound <= affine_expr (floordiv, +, -, *) constant <= upper_bound` becomes bounds on the expression."""
    check(
        "(d0) -> (d0), domain: d0 in [0, 99], d0 floordiv 8 in [5, 11]",
        "(d0) -> (d0), domain: d0 in [40, 95]",
    )
    check("(d0) -> (d0), domain: d0 in [0, 99], d0 + 5 in [10, 20]", "(d0) -> (d0), domain: d0 in [5, 15]")
    check("(d0) -> (d0), domain: d0 in [0, 99], d0 - 5 in [10, 20]", "(d0) -> (d0), domain: d0 in [15, 25]")
    check("(d0) -> (d0), domain: d0 in [0, 99], d0 * 8 in [14, 33]", "(d0) -> (d0), domain: d0 in [2, 4]")
    check(
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 99], d1 in [0, 99], (d0 + d1) floordiv 8 in [5, 11]",
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 95], d1 in [0, 95], d0 + d1 in [40, 95]",
    )


def test_doc_always_satisfied_constraint_dropped():
    """`d0 + s0 in [0, 20]` for d0 in [0, 5] and s0 in [1, 3] always holds."""
    check(
        "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3], d0 + s0 in [0, 20]",
        "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3]",
    )


def test_doc_constraint_expressions_simplified_like_results():
    check(
        "(d0, d1) -> (d0), domain: d0 in [0, 99], d1 in [0, 14], (d0 + d1 floordiv 16) * 4 + d1 mod 16 in [0, 120]",
        "(d0, d1) -> (d0), domain: d0 in [0, 30], d1 in [0, 14], d0 * 4 + d1 in [0, 120]",
    )


def test_doc_never_satisfied_constraint_makes_the_map_empty():
    m = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 99], d0 mod 8 + 5 in [50, 54]")
    assert m.is_empty()
    assert str(m.simplify()) == "(d0) -> (0), domain: d0 in [0, -1]"


# --- XLA's test suite (indexing_map_test.cc): input, expected simplified output -------------------

XLA_CASES = [
    (
        "(d0)[s0, s1] -> (d0 * 6 + s0 * 3 + s1), domain: d0 in [0, 1999], s0 in [0, 1], s1 in [0, 2],"
        " d0 * 6 + s0 * 3 + s1 in [0, 599]",
        "(d0)[s0, s1] -> (d0 * 6 + s0 * 3 + s1), domain: d0 in [0, 99], s0 in [0, 1], s1 in [0, 2]",
    ),
    (
        "(d0)[s0] -> (d0 * 6 + s0 * 3), domain: d0 in [0, 1999], s0 in [0, 1], d0 * 6 + s0 * 3 in [0, 599]",
        "(d0)[s0] -> (d0 * 6 + s0 * 3), domain: d0 in [0, 99], s0 in [0, 1]",
    ),
    (
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [-99, 99], s0 floordiv 3 in [-11, -5]",
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [-33, -13]",
    ),
    (
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [-99, 99], s0 * 3 in [-11, -5]",
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [-3, -2]",
    ),
    (
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [-99, 99], s0 * -3 in [-11, -5]",
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [2, 3]",
    ),
    (
        "(d0)[s0, s1] -> (d0, s1, s0), domain: d0 in [0, 3], s0 in [-21, -2], s1 in [0, 10], d0 mod 3 in [0, 0],"
        " s0 mod 2 in [0, 0], s0 mod 3 in [0, 0], s1 mod 5 in [1, 1]",
        "(d0)[s0, s1] -> (d0, s1, s0), domain: d0 in [0, 3], s0 in [-18, -6], s1 in [1, 6], d0 mod 3 in [0, 0],"
        " s0 mod 6 in [0, 0], s1 mod 5 in [1, 1]",
    ),
    ("(d0) -> (d0), domain: d0 in [5, 5]", "(d0) -> (5), domain: d0 in [5, 5]"),
    (
        "(d0, d1) -> (((d0 floordiv 3) * 3 + d1 floordiv 2) floordiv 6), domain: d0 in [0, 11], d1 in [0, 5]",
        "(d0, d1) -> (d0 floordiv 6), domain: d0 in [0, 11], d1 in [0, 5]",
    ),
    ("(d0) -> (d0 mod 42), domain: d0 in [53, 71]", "(d0) -> (d0 - 42), domain: d0 in [53, 71]"),
    ("(d0) -> (d0 mod 5), domain: d0 in [-5, -1]", "(d0) -> (d0 + 5), domain: d0 in [-5, -1]"),
    ("(d0) -> (d0 mod 5), domain: d0 in [-4, 0]", "(d0) -> (d0 mod 5), domain: d0 in [-4, 0]"),
    ("(d0) -> (d0 mod 5), domain: d0 in [-6, -1]", "(d0) -> (d0 mod 5), domain: d0 in [-6, -1]"),
    (
        "(d0)[s0] -> (d0 - (s0 floordiv 3) * 3 + s0), domain: d0 in [0, 1], s0 in [0, 3]",
        "(d0)[s0] -> (d0 + s0 mod 3), domain: d0 in [0, 1], s0 in [0, 3]",
    ),
    (
        "(d0)[s0] -> (d0 - (s0 floordiv 3) * 12 + s0 * 7), domain: d0 in [0, 1], s0 in [0, 3]",
        "(d0)[s0] -> (d0 + (s0 mod 3) * 4 + s0 * 3), domain: d0 in [0, 1], s0 in [0, 3]",
    ),
    (
        "(d0)[s0] ->  (1 + d0 - ((s0 + 1) floordiv 3) * 3 + s0), domain: d0 in [0, 1], s0 in [0, 3]",
        "(d0)[s0] -> (d0 + (s0 + 1) mod 3), domain: d0 in [0, 1], s0 in [0, 3]",
    ),
    (
        "(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16), domain: d0 in [0, 7], d1 in [0, 15]",
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 7], d1 in [0, 15]",
    ),
    (
        "(d0, d1, d2) -> ((d0 * 100 + d1 * 10 + d2) floordiv 100, ((d0 * 100 + d1 * 10 + d2) mod 100) floordiv 10,"
        " d2 mod 10), domain: d0 in [0, 8], d1 in [0, 8], d2 in [0, 8]",
        "(d0, d1, d2) -> (d0, d1, d2), domain: d0 in [0, 8], d1 in [0, 8], d2 in [0, 8]",
    ),
    (
        "(d0, d1) -> (-((d0 * -11 - d1 + 109) floordiv 11) + 9,"
        " d0 * 11 + d1 + ((d0 * -11 - d1 + 109) floordiv 11) * 11 - 99), domain: d0 in [0, 7], d1 in [0, 8]",
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 7], d1 in [0, 8]",
    ),
    (
        "()[s0] -> ((s0 * 128) mod 715 + ((s0 * 128) floordiv 715) * 715), domain: s0 in [0, 127]",
        "()[s0] -> (s0 * 128), domain: s0 in [0, 127]",
    ),
    (
        "(d0, d1) -> ((d0 mod 8) * 128 + d1 + (d0 floordiv 8) * 1024), domain: d0 in [0, 1023], d1 in [0, 127]",
        "(d0, d1) -> (d0 * 128 + d1), domain: d0 in [0, 1023], d1 in [0, 127]",
    ),
    (
        "(d0, d1) -> (((d1 * 2 + d0 floordiv 64) mod 3) * 256 + (d0 mod 64) * 4"
        " + ((d1 * 128 + d0) floordiv 192) * 768), domain: d0 in [0, 127], d1 in [0, 3071]",
        "(d0, d1) -> (d0 * 4 + d1 * 512), domain: d0 in [0, 127], d1 in [0, 3071]",
    ),
    ("(d0) -> ((-d0) mod 2), domain: d0 in [0, 127]", "(d0) -> ((-d0) mod 2), domain: d0 in [0, 127]"),
    (
        "(d0, d1) -> ((d0 floordiv 1536) * 786432 + (((d0 * 2 + d1 floordiv 64) floordiv 3) mod 1024) * 768"
        " + ((d0 * 2 + d1 floordiv 64) mod 3) * 256 + (d1 mod 64) * 4), domain: d0 in [0, 3071], d1 in [0, 127]",
        "(d0, d1) -> (d0 * 512 + d1 * 4), domain: d0 in [0, 3071], d1 in [0, 127]",
    ),
    (
        "()[s0] -> ((s0 * 128) mod 715 + ((s0 * 64) floordiv 715) * 715), domain: s0 in [0, 127]",
        "()[s0] -> (((s0 * 64) floordiv 715) * 715 + (s0 * 128) mod 715), domain: s0 in [0, 127]",
    ),
    (
        "()[s0] -> (s0 - ((s0 floordiv 2) floordiv 7) * 14 + (s0 floordiv 14) * 14), domain: s0 in [0, 1233]",
        "()[s0] -> (s0), domain: s0 in [0, 1233]",
    ),
    (
        "()[s0, s1] -> ((s0 * 2 + s1 floordiv 64) floordiv 3), domain: s0 in [0, 1233], s1 in [0, 127]",
        "()[s0, s1] -> ((s0 * 128 + s1) floordiv 192), domain: s0 in [0, 1233], s1 in [0, 127]",
    ),
    (
        "()[s0, s1] -> ((s0 floordiv 3 + s1 floordiv 3) floordiv 6), domain: s0 in [0, 1233], s1 in [0, 127]",
        "()[s0, s1] -> ((s0 floordiv 3 + s1 floordiv 3) floordiv 6), domain: s0 in [0, 1233], s1 in [0, 127]",
    ),
    (
        "()[s0, s1, s2, s3] -> ((s0 * 458752 + s1 + s2 * 4 + s3 * 512) mod 20000),"
        " domain: s0 in [0, 871], s1 in [0, 3], s2 in [0, 127], s3 in [0, 895]",
        "()[s0, s1, s2, s3] -> (((s0 * 114688 + s3 * 128 + s2) mod 5000) * 4 + s1),"
        " domain: s0 in [0, 871], s1 in [0, 3], s2 in [0, 127], s3 in [0, 895]",
    ),
    (
        "()[s0, s1] -> ((s0 * 16 - (s1 floordiv 4) floordiv 2 + (s1 floordiv 8) * 2) floordiv 4),"
        " domain: s0 in [0, 1], s1 in [0, 127]",
        "()[s0, s1] -> (s0 * 4 + s1 floordiv 32), domain: s0 in [0, 1], s1 in [0, 127]",
    ),
    (
        "(d0)[s0] -> ((((s0 + d0) + d0) floordiv 2)), domain: d0 in [0, 9], s0 in [0, 19]",
        "(d0)[s0] -> (d0 + s0 floordiv 2), domain: d0 in [0, 9], s0 in [0, 19]",
    ),
    (
        "(d0) -> (d0), domain: d0 in [0, 49], 0 in [-10, 5]",
        "(d0) -> (d0), domain: d0 in [0, 49]",
    ),
]


@pytest.mark.parametrize(("source", "expected"), XLA_CASES)
def test_xla_suite_case(source, expected):
    check(source, expected)


# Cases where this simplifier goes further than XLA's (XLA's expected output in the comment).
BEYOND_XLA = [
    # XLA: d0 mod 8 in [45, 49] (kept; no point satisfies it).
    ("(d0) -> (d0), domain: d0 in [0, 99], d0 mod 8 + 5 in [50, 54]", "(d0) -> (0), domain: d0 in [0, -1]"),
    # XLA: unchanged; the constraint bounds d0 nonetheless.
    (
        "(d0)[s0, s1] -> (d0 * 6 + s0 * 3 + s1), domain: d0 in [0, 1999], s0 in [0, 1], s1 in [0, 2],"
        " d0 * 6 + s0 * 3 + s1 in [0, 598]",
        "(d0)[s0, s1] -> (d0 * 6 + s0 * 3 + s1), domain: d0 in [0, 99], s0 in [0, 1], s1 in [0, 2],"
        " d0 * 6 + s0 * 3 + s1 in [0, 598]",
    ),
    # XLA: ((s0 * 2 + 3) floordiv 6); the constant 3 only shifts within a block of 2.
    (
        "()[s0] -> ((s0 * 6 + 9) floordiv 18), domain: s0 in [0, 1233]",
        "()[s0] -> ((s0 + 1) floordiv 3), domain: s0 in [0, 1233]",
    ),
    # XLA expects s0 in [15, 35], which is wrong: 13 floordiv -3 = -5 and 34 floordiv -3 = -12.
    (
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [-99, 99], s0 floordiv -3 in [-11, -5]",
        "(d0)[s0] -> (d0), domain: d0 in [0, 99], s0 in [13, 33]",
    ),
]


@pytest.mark.parametrize(("source", "expected"), BEYOND_XLA)
def test_beyond_xla(source, expected):
    check(source, expected)


def test_xla_known_empty_after_simplification():
    m = parse_indexing_map(
        "(d0, d1)[s0, s1] -> (d1, d0, s1), domain: d0 in [0, 49], d1 in [0, 59], s0 in [0, 69], s1 in [0, 19],"
        " s1 floordiv 20 in [2, 2]"
    )
    assert not m.known_empty
    assert m.is_empty()
    s = m.simplify()
    assert s.known_empty and s.num_dims == 2 and s.num_symbols == 2 and s.num_results == 3


def test_xla_sum_order_regressions_are_idempotent():
    for source in [
        "(d0, d1)[s0, s1] -> (((((d0 + (d0 mod 3)) floordiv 3) + (s0 + ((s0 + s0) mod 3))) + (((d0 + s0) mod 3)"
        " + 0))), domain: d0 in [0, 9], d1 in [0, 19], s0 in [0, 29], s1 in [0, 39]",
        "(d0)[s0] -> ((((s0 + d0) + d0) floordiv 2)), domain: d0 in [0, 9], s0 in [0, 19]",
    ]:
        m = parse_indexing_map(source)
        s = m.simplify()
        assert s.simplify() == s
        assert valid_points(s) == valid_points(m)


def test_xla_composition_with_constraints_then_simplified():
    producer = parse_indexing_map(
        "(d0, d1)[s0, s1] -> (d1, d0, s1, s0), domain: d0 in [0, 49], d1 in [0, 59], s0 in [0, 69], s1 in [0, 19],"
        " d0 mod 8 in [0, 0], s0 mod 3 in [1, 1]"
    )
    consumer = parse_indexing_map(
        "(d0)[s0] -> (d0, s0), domain: d0 in [0, 9], s0 in [0, 7], d0 + s0 in [0, 20], s0 mod 4 in [0, 0]"
    )
    composed = producer.compose(consumer)
    assert str(composed) == (
        "(d0)[s0, s1, s2] -> (s2, d0, s1, s0), domain: d0 in [0, 9], s0 in [0, 69], s1 in [0, 19], s2 in [0, 7],"
        " d0 + s2 in [0, 20], d0 mod 8 in [0, 0], s0 mod 3 in [1, 1], s2 mod 4 in [0, 0]"
    )
    assert str(composed.simplify()) == (
        "(d0)[s0, s1, s2] -> (s2, d0, s1, s0), domain: d0 in [0, 8], s0 in [1, 67], s1 in [0, 19], s2 in [0, 4],"
        " d0 mod 8 in [0, 0], s0 mod 3 in [1, 1], s2 mod 4 in [0, 0]"
    )
