"""Indexing maps: the text form, construction, evaluation, composition, runtime variables."""

from __future__ import annotations

import pytest

from sparsetir_py.arith import (
    AffineMap,
    IndexingMap,
    IndexingMapError,
    Interval,
    RuntimeVar,
    Variable,
    dim,
    parse_affine_map,
    parse_indexing_map,
    symbol,
)
from sparsetir_py.errors import SparseTIRError

CONTRACT = "(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16), domain: d0 in [0, 6], d1 in [0, 14]"


def test_contract_example():
    m = parse_indexing_map(CONTRACT)
    assert str(m.simplify()) == "(d0, d1) -> (d0, d1), domain: d0 in [0, 6], d1 in [0, 14]"
    assert m.evaluate((3, 9)) == (3, 9)
    assert not m.is_empty()
    assert m.simplify().is_identity() and not m.is_identity()


def test_text_form_round_trip_and_layout():
    text = (
        "(d0, d1)[s0, s1] -> (d0 + s0, d1 floordiv 2 + s1), domain: d0 in [0, 9], d1 in [0, 19], s0 in [0, 4],"
        " s1 in [-2, 2], d0 + s0 in [0, 10], d1 mod 3 in [0, 1]"
    )
    m = parse_indexing_map(text)
    assert str(m) == text
    multiline = m.to_string(multiline=True)
    assert multiline.splitlines()[:3] == [
        "(d0, d1)[s0, s1] -> (d0 + s0, d1 floordiv 2 + s1)",
        "domain:",
        "d0 in [0, 9]",
    ]
    assert parse_indexing_map(multiline) == m


def test_separators_and_repeated_intervals():
    """Commas or newlines; the first interval per variable, then constraints (which may repeat one)."""
    m = parse_indexing_map("(d0)[s0] -> (d0 * 2 + s0)\ndomain:\nd0 in [0, 31]\ns0 in [0, 1]\nd0 in [0, 7]")
    assert str(m) == "(d0)[s0] -> (d0 * 2 + s0), domain: d0 in [0, 7], s0 in [0, 1]"
    m = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 31], d0 in [0, 7], d0 in [3, 20]")
    assert m.dim_bounds == (Interval(3, 7),)


def test_no_dimensions_and_no_variables():
    m = parse_indexing_map("()[s0] -> (s0), domain: s0 in [0, 9]")
    assert m.num_dims == 0 and m.evaluate((), (4,)) == (4,)
    assert str(m) == "()[s0] -> (s0), domain: s0 in [0, 9]"
    empty = parse_indexing_map("() -> ()")
    assert str(empty) == "() -> ()" and empty.evaluate(()) == ()
    assert parse_indexing_map("(d0, d1) -> (), domain: d0 in [0, 3], d1 in [0, 1]").num_results == 0


def test_custom_variable_names():
    m = parse_indexing_map("(i, j)[k] -> (i + k, j), domain: i in [0, 3], j in [0, 1], k in [0, 2]")
    assert str(m) == "(i, j)[k] -> (i + k, j), domain: i in [0, 3], j in [0, 1], k in [0, 2]"
    assert m == parse_indexing_map("(d0, d1)[s0] -> (d0 + s0, d1), domain: d0 in [0, 3], d1 in [0, 1], s0 in [0, 2]")


def test_is_simplified_flag_of_older_xla_text_is_accepted():
    m = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 3], is_simplified: false")
    assert m == IndexingMap.identity([4])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(d0) -> (d0)", "expected `domain:`"),
        ("(d0, d1) -> (d0), domain: d0 in [0, 3]", "missing the interval of `d1`"),
        ("(d0, d1) -> (d0), domain: d1 in [0, 3], d0 in [0, 3]", "read by position"),
        ("(d0) -> (d1), domain: d0 in [0, 3]", "unknown variable `d1`"),
        ("(d0) -> (d0 * d0), domain: d0 in [0, 3]", "non-affine"),
        ("(d0) -> (d0 mod 0), domain: d0 in [0, 3]", "division by zero"),
        ("(d0) -> (d0), domain: d0 in [0, x]", "expected an integer"),
        ("(d0, d0) -> (d0), domain: d0 in [0, 3], d0 in [0, 3]", "declared twice"),
        ("(d0) -> (d0), domain: d0 in [0, 3] extra", "unknown variable `extra`"),
        ("(d0) -> (d0), domain: d0 in [0, 3], is_simplified: maybe", "expected `true` or `false`"),
        ("(d0) -> (d0) domain d0 in [0, 3]", "expected `:`"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(IndexingMapError, match=message) as info:
        parse_indexing_map(text)
    assert isinstance(info.value, SparseTIRError)
    assert "line 1, column" in str(info.value) and "^" in str(info.value)


def test_construction_errors():
    with pytest.raises(IndexingMapError, match="uses d1"):
        IndexingMap((dim(1),), [(0, 3)])
    with pytest.raises(IndexingMapError, match="uses s0"):
        IndexingMap((dim(0),), [(0, 3)], constraints=[(symbol(0), (0, 1))])
    with pytest.raises(IndexingMapError, match="finite bounds"):
        IndexingMap((dim(0),), [(0, None)])


def test_evaluate_outside_the_domain():
    """`evaluate` checks the point by default and names what it violates; `check=False` does not."""
    m = parse_indexing_map("(d0)[s0] -> (d0 * 2 + s0), domain: d0 in [0, 7], s0 in [0, 1], d0 + s0 in [0, 7]")
    assert m.evaluate([3], [1]) == (7,)
    with pytest.raises(IndexingMapError, match=r"d0 = 8 is not in \[0, 7\]"):
        m.evaluate([8], [0])
    with pytest.raises(IndexingMapError, match=r"d0 \+ s0 = 8 is not in \[0, 7\]"):
        m.evaluate([7], [1])
    assert m.evaluate([7], [1], check=False) == (15,)
    assert not m.contains([7], [1]) and m.contains([6], [1])
    with pytest.raises(IndexingMapError, match="takes 1 dims and 1 symbols"):
        m.evaluate([1, 2])


def test_known_empty_maps():
    m = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, -2]")
    assert m.known_empty and m.is_empty()
    assert str(m) == "(d0) -> (0), domain: d0 in [0, -1]"
    assert parse_indexing_map(str(m)) == m
    assert parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 49], 0 in [10, 15]").is_empty()
    with pytest.raises(IndexingMapError, match="empty"):
        m.evaluate([0])
    no_vars = IndexingMap((), known_empty=True)
    assert str(no_vars) == "() -> (), domain: 0 in [1, 0]" and parse_indexing_map(str(no_vars)).is_empty()
    other = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 49]")
    assert other.compose(m).is_empty() and m.compose(other).is_empty()
    assert other.compose(m).num_results == 1


def test_is_identity():
    assert IndexingMap.identity([3, 4]).is_identity()
    assert not parse_indexing_map("(d0, d1) -> (d1, d0), domain: d0 in [0, 3], d1 in [0, 3]").is_identity()
    assert not parse_indexing_map("(d0, d1) -> (d0), domain: d0 in [0, 3], d1 in [0, 3]").is_identity()


# --- composition (XLA's tests) -------------------------------------------------------------------

PRODUCER = "(d0, d1)[s0, s1] -> (d1, d0, s1, s0), domain: d0 in [0, 3], d1 in [0, 3], s0 in [0, 1], s1 in [0, 1]"


def test_compose_permutation():
    producer = parse_indexing_map(PRODUCER)
    consumer = parse_indexing_map("(d0)[s0] -> (d0, s0), domain: d0 in [0, 3], s0 in [0, 3]")
    composed = producer.compose(consumer)
    assert str(composed) == (
        "(d0)[s0, s1, s2] -> (s2, d0, s1, s0), domain: d0 in [0, 3], s0 in [0, 1], s1 in [0, 1], s2 in [0, 3]"
    )


def test_compose_restricts_intervals():
    producer = parse_indexing_map(
        "(d0, d1)[s0, s1] -> (d1, d0, s1, s0), domain: d0 in [0, 4], d1 in [0, 5], s0 in [0, 6], s1 in [0, 1]"
    )
    consumer = parse_indexing_map("(d0)[s0] -> (d0, s0), domain: d0 in [0, 9], s0 in [0, 7]")
    assert str(producer.compose(consumer)) == (
        "(d0)[s0, s1, s2] -> (s2, d0, s1, s0), domain: d0 in [0, 4], s0 in [0, 6], s1 in [0, 1], s2 in [0, 5]"
    )


def test_compose_runtime_variables():
    """Runtime variables come after all range variables: this map's, then the other's."""
    producer = IndexingMap(
        (dim(0) + symbol(0), dim(1) + symbol(1), dim(2) + symbol(2)),
        [(0, 0), (0, 1), (0, 226)],
        rt_vars=[(0, 0), (0, 1), (0, 226)],
    )
    consumer = IndexingMap((0, dim(1), symbol(0)), [(0, 0), (0, 1)], [Variable(Interval(0, 31), "s")])
    composed = producer.compose(consumer)
    assert str(composed) == (
        "(d0, d1)[s]{rt0, rt1, rt2} -> (rt0, d1 + rt1, s + rt2), domain: d0 in [0, 0], d1 in [0, 1],"
        " s in [0, 31], rt0 in [0, 0], rt1 in [0, 1], rt2 in [0, 226]"
    )
    assert composed.evaluate((0, 1), (5, 0, 1, 100)) == (0, 2, 105)


def test_compose_only_runtime_variables():
    producer = IndexingMap(
        (dim(0) + symbol(0), dim(1) + 4 * symbol(1)),
        [(0, 24), (0, 15)],
        rt_vars=[RuntimeVar(Interval(0, 2), name="ps_0"), RuntimeVar(Interval(0, 1), name="ps_1")],
    )
    consumer = IndexingMap(
        (dim(0) + 2 * symbol(0), dim(1) + 3 * symbol(1)),
        [(0, 24), (0, 15)],
        rt_vars=[RuntimeVar(Interval(0, 25), name="cs_0"), RuntimeVar(Interval(0, 16), name="cs_1")],
    )
    assert str(producer.compose(consumer)) == (
        "(d0, d1){ps_0, ps_1, cs_0, cs_1} -> (d0 + cs_0 * 2 + ps_0, d1 + ps_1 * 4 + cs_1 * 3),"
        " domain: d0 in [0, 24], d1 in [0, 15], ps_0 in [0, 2], ps_1 in [0, 1], cs_0 in [0, 25], cs_1 in [0, 16],"
        " d0 + cs_0 * 2 in [0, 24], d1 + cs_1 * 3 in [0, 15]"
    )


def test_compose_moves_runtime_access_maps():
    access = AffineMap(1, 0, (dim(0), 0))
    inner = IndexingMap((dim(0) * 2,), [(0, 3)])
    outer = IndexingMap((dim(0) + symbol(0),), [(0, 7)], rt_vars=[RuntimeVar(Interval(0, 1), "idx", access)])
    composed = outer.compose(inner)
    assert str(composed.rt_vars[0].access) == "(d0) -> (d0 * 2, 0)"


def test_compose_arity_error():
    with pytest.raises(IndexingMapError, match="2 results for 1 dimensions"):
        IndexingMap.identity([3]).compose(IndexingMap.identity([3, 3]))


# --- runtime variables in the document's notation ---------------------------------------------


def test_runtime_variables_in_documentation_form():
    m = parse_indexing_map(
        """(d0)[s0, s1] -> (d0 + s0 + s1)
        domain:
        d0 in [0, 9]
        s0 in [0, 3]
        s1 in [0, 2]
        hlo: of1 = s32[] parameter(1)
        (d0) -> ()"""
    )
    assert (len(m.range_vars), len(m.rt_vars)) == (1, 1)
    assert m.rt_vars[0].hlo == "of1 = s32[] parameter(1)"
    assert str(m.rt_vars[0].access) == "(d0) -> ()"
    assert str(m) == "(d0)[s0]{rt0} -> (d0 + s0 + rt0), domain: d0 in [0, 9], s0 in [0, 3], rt0 in [0, 2]"
    assert parse_indexing_map(m.to_string(multiline=True)) == m
    assert parse_indexing_map(m.to_string(multiline=True)).rt_vars[0].hlo == "of1 = s32[] parameter(1)"
    # The one-line form leaves the descriptions out; they are not part of equality.
    assert parse_indexing_map(str(m)) == m and parse_indexing_map(str(m)).rt_vars[0].hlo == ""
    with pytest.raises(IndexingMapError, match="must come after all range variables"):
        parse_indexing_map("(d0)[s0, s1] -> (d0), domain: d0 in [0, 9], s0 in [0, 3]\nhlo: x\ns1 in [0, 2]")


def test_parse_affine_map():
    m = parse_affine_map("(d0, d1)[s0] -> (d0 + s0, d1 floordiv 2)")
    assert (m.num_dims, m.num_symbols) == (2, 1)
    assert m.evaluate((3, 5), (1,)) == (4, 2)


def test_remove_unused_symbols():
    m = parse_indexing_map(
        "(d0, d1)[s0, s1] -> (d0, d1, s1), domain: d0 in [0, 49], d1 in [0, 59], s0 in [0, 69], s1 in [0, 19],"
        " s0 mod 3 in [0, 0]"
    )
    assert str(m.remove_unused_symbols()) == (
        "(d0, d1)[s0] -> (d0, d1, s0), domain: d0 in [0, 49], d1 in [0, 59], s0 in [0, 19]"
    )
    kept = parse_indexing_map(
        "(d0, d1)[s0, s1] -> (d1, s0, s1), domain: d0 in [0, 49], d1 in [0, 59], s0 in [0, 69], s1 in [0, 19],"
        " d0 + s0 in [1, 100], s0 mod 3 in [0, 0]"
    )
    assert kept.remove_unused_symbols() == kept


def test_domain_points():
    m = parse_indexing_map("(d0)[s0] -> (d0 + s0), domain: d0 in [0, 3], s0 in [0, 1], d0 + s0 in [2, 3]")
    assert list(m.domain_points()) == [((1,), (1,)), ((2,), (0,)), ((2,), (1,)), ((3,), (0,))]
    with pytest.raises(IndexingMapError, match="has 8 points, more than 3"):
        list(m.domain_points(limit=3))


def test_names_survive_simplification_and_caching():
    """Maps equal up to names share simplification work but keep their own names."""
    named = parse_indexing_map("(i) -> (i floordiv 4), domain: i in [0, 3]")
    plain = parse_indexing_map("(d0) -> (d0 floordiv 4), domain: d0 in [0, 3]")
    assert named == plain
    assert str(named.simplify()) == "(i) -> (0), domain: i in [0, 3]"
    assert str(plain.simplify()) == "(d0) -> (0), domain: d0 in [0, 3]"


def test_add_constraint():
    m = IndexingMap.identity([10, 10]).add_constraint(dim(0) + dim(1), (0, 3))
    assert str(m) == "(d0, d1) -> (d0, d1), domain: d0 in [0, 9], d1 in [0, 9], d0 + d1 in [0, 3]"
    assert str(m.simplify()) == "(d0, d1) -> (d0, d1), domain: d0 in [0, 3], d1 in [0, 3], d0 + d1 in [0, 3]"
    assert IndexingMap.identity([10]).add_constraint(dim(0) * 2, (1, 1)).is_empty()
