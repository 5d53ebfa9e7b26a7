"""Brute-force properties of affine expressions and indexing maps on small random instances.

Every check enumerates whole (small) domains: canonical construction keeps every value,
simplification keeps the exact set of valid points and every value on it, composition agrees
with evaluating one map and then the other, and the text form reads back to the same map.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparsetir_py.arith import (
    IndexingMap,
    Interval,
    RuntimeVar,
    Variable,
    const,
    dim,
    parse_affine_expr,
    parse_indexing_map,
    symbol,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def expr_and_fn(draw, num_dims: int, num_symbols: int, depth: int = 3):
    """A random affine expression together with a plain-Python function computing it."""
    leaves = [("d", i) for i in range(num_dims)] + [("s", j) for j in range(num_symbols)]
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        choice = draw(st.sampled_from([*leaves, ("c", None)]) if leaves else st.just(("c", None)))
        kind, index = choice
        if kind == "c":
            value = draw(st.integers(-20, 20))
            return const(value), lambda d, s, v=value: v
        if kind == "d":
            return dim(index), lambda d, s, i=index: d[i]
        return symbol(index), lambda d, s, j=index: s[j]
    op = draw(st.sampled_from(["+", "-", "*", "floordiv", "mod", "neg"]))
    a, fa = draw(expr_and_fn(num_dims, num_symbols, depth - 1))
    if op in ("+", "-"):
        b, fb = draw(expr_and_fn(num_dims, num_symbols, depth - 1))
        if op == "+":
            return a + b, lambda d, s: fa(d, s) + fb(d, s)
        return a - b, lambda d, s: fa(d, s) - fb(d, s)
    if op == "neg":
        return -a, lambda d, s: -fa(d, s)
    k = draw(st.integers(-6, 12).filter(bool)) if op != "*" else draw(st.integers(-7, 7))
    if op == "*":
        return a * k, lambda d, s: fa(d, s) * k
    if op == "floordiv":
        return a.floordiv(k), lambda d, s: fa(d, s) // k
    return a.mod(k), lambda d, s: fa(d, s) % k


@st.composite
def small_maps(draw, max_dims: int = 3, max_symbols: int = 2, max_points: int = 600, with_rt: bool = True):
    num_dims = draw(st.integers(0, max_dims))
    num_symbols = draw(st.integers(0 if num_dims else 1, max_symbols))
    bounds = []
    for _ in range(num_dims + num_symbols):
        lo = draw(st.integers(-4, 6))
        bounds.append(Interval(lo, lo + draw(st.integers(0, 7))))
    while math.prod(b.size for b in bounds) > max_points:
        i = max(range(len(bounds)), key=lambda k: bounds[k].size)
        bounds[i] = Interval(bounds[i].lo, bounds[i].lo + bounds[i].size // 2 - 1)
    results = [draw(expr_and_fn(num_dims, num_symbols))[0] for _ in range(draw(st.integers(1 if num_dims else 0, 3)))]
    constraints = []
    for _ in range(draw(st.integers(0, 2))):
        e = draw(expr_and_fn(num_dims, num_symbols, depth=2))[0]
        lo = draw(st.integers(-10, 10))
        constraints.append((e, Interval(lo, lo + draw(st.integers(0, 12)))))
    num_rt = draw(st.integers(0, num_symbols)) if with_rt else 0
    num_range = num_symbols - num_rt
    return IndexingMap(
        tuple(results),
        tuple(bounds[:num_dims]),
        tuple(bounds[num_dims : num_dims + num_range]),
        tuple(RuntimeVar(b) for b in bounds[num_dims + num_range :]),
        tuple(constraints),
    )


def box(m: IndexingMap):
    bounds = m.dim_bounds + m.symbol_bounds
    for point in itertools.product(*(range(b.lo, b.hi + 1) for b in bounds)):
        yield point[: m.num_dims], point[m.num_dims :]


def valid_points(m: IndexingMap) -> dict:
    """Every valid point of `m`, with its results, by checking each constraint by hand."""
    points = {}
    for dims, syms in box(m):
        if all(r.contains(e.evaluate(dims, syms)) for e, r in m.constraints):
            points[dims, syms] = tuple(e.evaluate(dims, syms) for e in m.results)
    return points


@SETTINGS
@given(st.data())
def test_construction_keeps_every_value(data):
    """Canonical construction (like terms, pulled-out multiples, gcds, merged divisions) is exact."""
    num_dims, num_symbols = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 2))
    e, fn = data.draw(expr_and_fn(num_dims, num_symbols, depth=4))
    for point in itertools.product(range(-7, 8, 2), repeat=num_dims + num_symbols):
        d, s = point[:num_dims], point[num_dims:]
        assert e.evaluate(d, s) == fn(d, s), (str(e), d, s)


@SETTINGS
@given(st.data())
def test_expression_text_round_trip(data):
    e, _ = data.draw(expr_and_fn(3, 2, depth=4))
    assert parse_affine_expr(str(e)) == e
    assert str(parse_affine_expr(str(e))) == str(e)


@SETTINGS
@given(small_maps())
def test_simplify_keeps_points_and_values(m):
    """The simplified map has exactly the same valid points and the same results on them."""
    before = valid_points(m)
    s = m.simplify()
    for b_old, b_new in zip(m.dim_bounds + m.symbol_bounds, s.dim_bounds + s.symbol_bounds):
        assert b_new.is_empty or Interval(b_old.lo, b_old.hi).contains_interval(b_new)
    after = valid_points(s) if not s.known_empty else {}
    assert set(after) == set(before), (str(m), str(s))
    for point, values in before.items():
        assert after[point] == values, (str(m), str(s), point)
        assert s.evaluate(*point) == values
    if m.is_empty():
        assert not before


@SETTINGS
@given(small_maps())
def test_simplify_is_idempotent_and_not_larger(m):
    s = m.simplify()
    assert s.simplify() == s, (str(m), str(s), str(s.simplify()))
    assert len(s.constraints) <= len(m.constraints) or s.known_empty


@SETTINGS
@given(small_maps(max_points=300))
def test_small_domains_are_exactly_empty_or_not(m):
    """For domains this small the emptiness test is exact, not only conservative."""
    assert m.is_empty() == (not valid_points(m)), str(m)


@SETTINGS
@given(small_maps())
def test_text_form_round_trip(m):
    text = str(m)
    back = parse_indexing_map(text)
    assert back == m, (text, str(back))
    assert str(back) == text
    multiline = parse_indexing_map(m.to_string(multiline=True))
    assert multiline == m


@st.composite
def composable_pairs(draw):
    inner = draw(small_maps(max_dims=2, max_symbols=1, max_points=60))
    num_dims = inner.num_results
    num_symbols = draw(st.integers(0, 1))
    bounds = []
    for _ in range(num_dims + num_symbols):
        lo = draw(st.integers(-6, 4))
        bounds.append(Interval(lo, lo + draw(st.integers(0, 9))))
    results = [draw(expr_and_fn(num_dims, num_symbols))[0] for _ in range(draw(st.integers(1, 2)))]
    constraints = []
    if num_dims + num_symbols and draw(st.booleans()):
        e = draw(expr_and_fn(num_dims, num_symbols, depth=2))[0]
        lo = draw(st.integers(-10, 10))
        constraints.append((e, Interval(lo, lo + draw(st.integers(0, 12)))))
    num_rt = draw(st.integers(0, num_symbols))
    outer = IndexingMap(
        tuple(results),
        tuple(bounds[:num_dims]),
        tuple(bounds[num_dims : num_dims + num_symbols - num_rt]),
        tuple(RuntimeVar(b) for b in bounds[num_dims + num_symbols - num_rt :]),
        tuple(constraints),
    )
    return outer, inner


def split_symbols(m: IndexingMap, syms):
    r = len(m.range_vars)
    return syms[:r], syms[r:]


@SETTINGS
@given(composable_pairs())
def test_compose_agrees_with_evaluating_both(pair):
    """`outer.compose(inner)` is valid exactly where inner is valid and outer is valid on inner's
    result, and gives outer's results there. Symbols: outer's ranges, inner's ranges, outer's
    runtime variables, inner's runtime variables."""
    outer, inner = pair
    composed = outer.compose(inner)
    expected = {}
    inner_points = valid_points(inner)
    outer_syms = list(itertools.product(*(range(b.lo, b.hi + 1) for b in outer.symbol_bounds)))
    for (x, s_in), mid in inner_points.items():
        for s_out in outer_syms:
            if not outer.contains(mid, s_out):
                continue
            r_out, t_out = split_symbols(outer, s_out)
            r_in, t_in = split_symbols(inner, s_in)
            expected[x, r_out + r_in + t_out + t_in] = outer.evaluate(mid, s_out)
    got = valid_points(composed) if not composed.known_empty else {}
    assert got == expected, (str(outer), str(inner), str(composed))
    simplified = composed.simplify()
    got = valid_points(simplified) if not simplified.known_empty else {}
    assert got == expected


def test_variables_and_intervals():
    m = IndexingMap((dim(0) + symbol(0),), [Variable(Interval(0, 9), "x")], [(0, 4)])
    assert str(m) == "(x)[s0] -> (x + s0), domain: x in [0, 9], s0 in [0, 4]"
    assert Interval(0, 9).contains_interval(Interval(2, 3))
    assert Interval(0, 9).intersect(Interval(5, 20)) == Interval(5, 9)
    assert Interval(-3, 5).mod(4) == Interval(0, 3)
    assert Interval(5, 6).mod(4) == Interval(1, 2)
    assert Interval(-7, 7).floordiv(2) == Interval(-4, 3)
    assert (Interval(1, 2) + Interval(None, 3)) == Interval(None, 5)


@SETTINGS
@given(small_maps())
def test_interval_reasoning_alone_keeps_points_and_values(m):
    """The same, with the enumeration of small domains switched off and one-variable scans cut
    short, so the interval-based rewrites must be right on their own."""
    from sparsetir_py.arith import indexing_map as im

    saved = im._EXACT_LIMIT, im._SCAN_LIMIT
    im._EXACT_LIMIT, im._SCAN_LIMIT = 0, 2
    im._simplify_map.cache_clear()
    try:
        s = m.simplify()
    finally:
        im._EXACT_LIMIT, im._SCAN_LIMIT = saved
        im._simplify_map.cache_clear()
    before = valid_points(m)
    after = valid_points(s)
    assert after == before, (str(m), str(s))


def divisions(e) -> int:
    """The `floordiv` and `mod` operations of an expression, nested ones included."""
    from sparsetir_py.arith import FloorDiv, Mod

    return sum(1 + divisions(atom.lhs) for atom, _ in e.terms if isinstance(atom, FloorDiv | Mod))


@SETTINGS
@given(small_maps(max_points=2000, with_rt=False))
def test_simplified_results_never_need_more_divisions(m):
    """What the simplifier is for: it never adds a floordiv or a mod to a result."""
    s = m.simplify()
    if not s.known_empty:
        for before, after in zip(m.results, s.results):
            assert divisions(after) <= divisions(before), (str(m), str(s))


def test_floordiv_adds_to_a_quotient_already_pulled_out():
    """`(s0 + 9 (s0 fd -3)) fd -3` keeps `-3 (s0 fd -3)` outside and makes `s0 fd -3` again: the
    two are one term of coefficient -2 (the dividend's quotient was once lost in a dict merge)."""
    s0 = symbol(0)
    e = (s0 + s0.floordiv(-3) * 9).floordiv(-3)
    for v in range(-12, 13):
        assert e.evaluate((), (v,)) == (v + 9 * (v // -3)) // -3, (str(e), v)
