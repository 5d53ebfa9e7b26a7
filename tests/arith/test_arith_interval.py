"""Interval analysis of IR expressions (`sparsetir_py.arith.interval`): bounds as tight as the
simplifier allows, and never wrong (brute force over random expressions)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparsetir_py.arith.interval import from_affine, int_range, prove, simplify, symbolic_range, to_affine
from sparsetir_py.ir import BinOp, BufferLoad, Call, Cast, FlatBuffer, IntImm, Select, UnaryOp, Var

i, j, k = Var("i"), Var("j"), Var("k")


def c(value: int) -> IntImm:
    return IntImm(value)


def evaluate(e, env):
    """A reference evaluator with Python (floor) semantics; None where the value is undefined."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, UnaryOp):
        a = evaluate(e.a, env)
        return None if a is None else (-a if e.op == "-" else int(not a))
    if isinstance(e, Select):
        cond = evaluate(e.cond, env)
        return None if cond is None else evaluate(e.true_value if cond else e.false_value, env)
    if isinstance(e, Cast):
        return evaluate(e.value, env)
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    if a is None or b is None:
        return None
    if e.op in ("//", "%") and b == 0:
        return None
    ops = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "//": lambda: a // b,
        "%": lambda: a % b,
        "min": lambda: min(a, b),
        "max": lambda: max(a, b),
        "<": lambda: int(a < b),
        "<=": lambda: int(a <= b),
        ">": lambda: int(a > b),
        ">=": lambda: int(a >= b),
        "==": lambda: int(a == b),
        "!=": lambda: int(a != b),
        "and": lambda: int(bool(a) and bool(b)),
        "or": lambda: int(bool(a) or bool(b)),
    }
    return ops[e.op]()


@st.composite
def ir_exprs(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 4)) == 0:
        if draw(st.booleans()):
            return draw(st.sampled_from([i, j, k]))
        return c(draw(st.integers(-9, 9)))
    kind = draw(st.sampled_from(["+", "-", "*", "//", "%", "min", "max", "neg", "select", "*c", "//c", "%c"]))
    a = draw(ir_exprs(depth - 1))
    if kind == "neg":
        return UnaryOp("-", a)
    if kind in ("*c", "//c", "%c"):
        return BinOp(kind[:-1], a, c(draw(st.integers(1, 9))))
    b = draw(ir_exprs(depth - 1))
    if kind == "select":
        cond = BinOp(draw(st.sampled_from(["<", "<=", "==", "!="])), a, draw(ir_exprs(depth - 1)))
        return Select(cond, a, b)
    return BinOp(kind, a, b)


@st.composite
def var_ranges(draw):
    ranges = {}
    for v in (i, j, k):
        lo = draw(st.integers(-6, 6))
        ranges[v] = (lo, lo + draw(st.integers(0, 6)))
    return ranges


def all_values(e, ranges):
    values = []
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
        value = evaluate(e, dict(zip(ranges, point)))
        if value is not None:
            values.append(value)
    return values


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(ir_exprs(), var_ranges())
def test_int_range_holds_every_value(e, ranges):
    lo, hi = int_range(e, ranges)
    for value in all_values(e, ranges):
        assert (lo is None or lo <= value) and (hi is None or value <= hi), (e, ranges, lo, hi, value)


@SETTINGS
@given(ir_exprs(depth=2), ir_exprs(depth=2), var_ranges(), st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
def test_prove_is_never_wrong(a, b, ranges, op):
    cond = BinOp(op, a, b)
    verdict = prove(cond, ranges)
    values = set(all_values(cond, ranges))
    if verdict is True:
        assert values <= {1}
    elif verdict is False:
        assert values <= {0}


@SETTINGS
@given(ir_exprs(), var_ranges())
def test_simplify_keeps_every_value(e, ranges):
    s = simplify(e, ranges)
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
        env = dict(zip(ranges, point))
        before = evaluate(e, env)
        if before is not None:
            assert evaluate(s, env) == before, (e, s, env)


@SETTINGS
@given(ir_exprs())
def test_to_affine_from_affine_round_trip(e):
    affine, atoms = to_affine(e)
    back = from_affine(affine, atoms)
    for point in itertools.product(range(-2, 3), repeat=3):
        env = dict(zip((i, j, k), point))
        before = evaluate(e, env)
        if before is not None:
            assert evaluate(back, env) == before


def test_correlated_terms_cancel():
    """Plain interval arithmetic would give [-99, 0] here; the simplifier sees 0."""
    assert int_range((i * 8 + j) // 8 - i, {i: (0, 99), j: (0, 7)}) == (0, 0)
    assert int_range((i * 8 + j) % 8 - j, {i: (0, 99), j: (0, 7)}) == (0, 0)
    assert int_range(i - i, {}) == (0, 0)
    assert int_range(i * 4 + j, {i: (0, 7), j: (0, 3)}) == (0, 31)


def test_loop_extents_and_split_predicates():
    """A split of a loop of extent 100 by 8: the predicate `io * 8 + ii < 100` can fail only when
    the extent is not a multiple of the factor."""
    io, ii = Var("io"), Var("ii")
    assert prove(BinOp("<", io * 8 + ii, c(100)), {io: (0, 12), ii: (0, 7)}) is None
    assert prove(BinOp("<", io * 8 + ii, c(104)), {io: (0, 12), ii: (0, 7)}) is True
    assert prove(BinOp(">=", io * 8 + ii, c(104)), {io: (0, 12), ii: (0, 7)}) is False
    n = Var("n")
    assert prove(BinOp("<", io * 8 + ii, n * 8), {io: (0, n - 1), ii: (0, 7), n: (1, None)}) is None
    assert int_range(io * 8 + ii, {io: (0, 12), ii: (0, 7)}) == (0, 103)


def test_unknown_and_symbolic_bounds():
    n = Var("n")
    assert int_range(i, {}) == (None, None)
    assert int_range(i + 1, {i: (0, None)}) == (1, None)
    assert int_range(i, {i: (0, n - 1), n: (1, 64)}) == (0, 63)
    assert int_range(i // 4, {i: (None, 10)}) == (None, 2)
    assert int_range(Var("flag", "bool"), {}) == (0, 1)
    assert int_range(Var("u", "uint32"), {}) == (0, None)


def test_non_affine_parts():
    assert int_range(BinOp("*", i, j), {i: (-2, 3), j: (4, 5)}) == (-10, 15)
    assert int_range(BinOp("min", i, j), {i: (0, 10), j: (3, 5)}) == (0, 5)
    assert int_range(BinOp("max", i, j), {i: (0, 10), j: (3, 5)}) == (3, 10)
    assert int_range(BinOp("%", i, j), {i: (0, 100), j: (1, 8)}) == (0, 7)
    assert int_range(BinOp("//", i, j), {i: (0, 100), j: (2, 8)}) == (0, 50)
    assert int_range(Select(BinOp("<", i, c(5)), i, c(100)), {i: (0, 9)}) == (0, 100)
    assert int_range(Select(BinOp("<", i, c(50)), i, c(100)), {i: (0, 9)}) == (0, 9)
    assert int_range(BinOp("<", i, c(5)), {i: (0, 3)}) == (1, 1)
    assert int_range(Cast("int64", i + 1), {i: (0, 3)}) == (1, 4)
    assert int_range(Call("abs", (i,), "int32"), {i: (-5, 3)}) == (0, 5)


def test_buffer_loads_use_value_range_hints():
    """`J_indptr`-like loads are bounded by the buffer's `value_range`, or by the hints passed in."""
    nnz = Var("nnz")
    indptr = FlatBuffer("J_indptr", (c(11),), "int32", value_range=(c(0), nnz))
    indices = FlatBuffer("J_indices", (nnz,), "int32")
    row = BufferLoad(indptr, (i,))
    assert int_range(row, {nnz: (0, 500)}) == (0, 500)
    extent = BufferLoad(indptr, (i + 1,)) - row
    assert int_range(extent, {nnz: (0, 500)}) == (-500, 500)
    assert int_range(BufferLoad(indices, (j,)), {}) == (None, None)
    assert int_range(BufferLoad(indices, (j,)), {}, hints={indices: (0, 99)}) == (0, 99)
    load = BufferLoad(indices, (j,))
    assert int_range(load * 2 + 1, {}, hints={load: (0, 9)}) == (1, 19)
    position = Call("lower_bound", (indices, row, BufferLoad(indptr, (i + 1,)), k), "int32")
    assert int_range(position, {nnz: (0, 500)}) == (0, 500)


def test_simplify_ir_expressions():
    s = simplify((i * 8 + j) // 8, {j: (0, 7)})
    assert s == i
    s = simplify((i * 8 + j) % 8 + (i * 8 + j) // 8 * 8, {})
    assert to_affine(s)[0] == to_affine(i * 8 + j)[0]
    assert simplify(i + j, {}) is not None
    f = Var("x", "float32")
    assert simplify(f + f, {}) is not None


# --- symbolic bounds ---------------------------------------------------------------------------

n, m = Var("n"), Var("m")


@st.composite
def affine_ir(draw, depth=3):
    """Expressions affine in i, j (plus `//` and `%` by constants), with parameters n and m."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        leaf = draw(st.sampled_from(["i", "j", "n", "m", "c"]))
        return {"i": i, "j": j, "n": n, "m": m}.get(leaf) or c(draw(st.integers(-5, 5)))
    kind = draw(st.sampled_from(["+", "-", "*c", "//c", "%c", "neg"]))
    a = draw(affine_ir(depth - 1))
    if kind == "neg":
        return UnaryOp("-", a)
    if kind in ("+", "-"):
        return BinOp(kind, a, draw(affine_ir(depth - 1)))
    return BinOp(kind[:-1], a, c(draw(st.integers(1, 6)) * (1 if kind != "*c" else draw(st.sampled_from([1, -1])))))


@SETTINGS
@given(affine_ir())
def test_symbolic_range_holds_for_every_parameter_value(e):
    """i in [0, n - 1], j in [m, m + 2]: for each n and m, the bounds evaluated there hold every value."""
    bounds = symbolic_range(e, {i: (c(0), n - 1), j: (m, m + 2)}, param_ranges={n: (1, 4), m: (-2, 2)})
    assert bounds is not None
    lo_expr, hi_expr = bounds
    for vn, vm in itertools.product(range(1, 5), range(-2, 3)):
        lo, hi = evaluate(lo_expr, {n: vn, m: vm}), evaluate(hi_expr, {n: vn, m: vm})
        values = [evaluate(e, {i: vi, j: vj, n: vn, m: vm}) for vi in range(vn) for vj in range(vm, vm + 3)]
        assert lo <= min(values) and max(values) <= hi, (e, vn, vm, lo, hi)


def test_symbolic_range_of_region_indices():
    """The regions of `A[i * 4 + j]` and `B[(i * 4 + j) // 4]` over `i < n`, `j < 4`, and of an
    access that depends on a load (not expressible)."""
    lo, hi = symbolic_range(i * 4 + j, {i: (0, n - 1), j: (0, 3)})
    assert int_range(lo, {}) == (0, 0)
    assert [evaluate(hi, {n: v}) for v in (1, 5)] == [3, 19]
    lo, hi = symbolic_range((i * 4 + j) // 4, {i: (0, n - 1), j: (0, 3)})
    assert [evaluate(hi, {n: v}) for v in (1, 5)] == [0, 4]
    lo, hi = symbolic_range(i - j + m, {i: (0, n - 1), j: (m, m + 3)})
    assert (evaluate(lo, {}), evaluate(hi, {n: 7})) == (-3, 6)
    buf = FlatBuffer("A", (c(10),), "int32")
    assert symbolic_range(BufferLoad(buf, (i,)), {i: (0, 3)}) is None
    lo, hi = symbolic_range(BufferLoad(buf, (n,)) + i, {i: (0, 3)})
    assert hi == BinOp("+", BufferLoad(buf, (n,)), c(3))
    assert symbolic_range(i, {i: (0, None)}) is None
