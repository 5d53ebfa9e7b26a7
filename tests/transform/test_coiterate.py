"""Co-iteration in `lower_sparse_iter` (`transform/coiterate.py`): a reduction over a dense
iterator that reads two sparse buffers at it lowers to a two-pointer merge of their rows (three
operands: one pointer each; then updates by subtraction, unary minus and casts, at the end of this
file).

The script computes one value per row from two CSR matrices of one shape, `c[i] = sum_j E(A[i,
j], B[i, j])`, with `E` intersection-shaped (`A * B`) or union-shaped (`A + B`, `2 * A - B * A`).
Each is checked three ways against `scipy`: the Stage I interpreter (dense semantics: every `j`),
the loop interpreter on the lowered Stage II function, and the compiled CPU kernel (also with the
row loop parallel); the lowered function has the merge (a `while` loop, no binary search), prints
and parses back equal. Scripts outside the merge's shape keep the search lowering.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st
from strategies import csr_matrices, edge_matrices, make_csr

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py.ir.visit import walk

SCRIPT = """
from sparsetir_py import script as T

@T.prim_func
def rowwise(a: T.handle, b: T.handle, c: T.handle, a_indptr: T.handle, a_indices: T.handle, b_indptr: T.handle,
            b_indices: T.handle, m: T.int32, n: T.int32, nnz_a: T.int32, nnz_b: T.int32):
    I = T.dense_fixed(m)
    JA = T.sparse_variable(I, (n, nnz_a), (a_indptr, a_indices), "AIDX"SORTED)
    JB = T.sparse_variable(I, (n, nnz_b), (b_indptr, b_indices), "BIDX")
    J = T.dense_fixed(n)
    A = T.match_sparse_buffer(a, (I, JA), "float64")
    B = T.match_sparse_buffer(b, (I, JB), "float64")
    C = T.match_sparse_buffer(c, (I,), "float64")
    with T.sp_iter([I, J], "SR", "rowwise") as [i, j]:
        with T.init():
            C[i] = 0.0
        C[i] = C[i] + EXPR
"""

EXPRESSIONS = {
    "A[i, j] * B[i, j]": lambda A, B: A.multiply(B),
    "A[i, j] + B[i, j]": lambda A, B: A + B,
    "2.0 * A[i, j] - B[i, j] * A[i, j]": lambda A, B: 2 * A - B.multiply(A),
}


def script(expr: str, aidx: str = "int32", bidx: str = "int32", sorted_a: bool = True):
    text = SCRIPT.replace("EXPR", expr).replace("AIDX", aidx).replace("BIDX", bidx)
    return sp.from_script(text.replace("SORTED", "" if sorted_a else ", sorted=False"))


def arguments(A, B) -> dict:
    return {
        "a": A.data.astype(np.float64), "b": B.data.astype(np.float64), "a_indptr": A.indptr,
        "a_indices": A.indices, "b_indptr": B.indptr, "b_indices": B.indices, "m": A.shape[0], "n": A.shape[1],
        "nnz_a": A.nnz, "nnz_b": B.nnz,
    }  # fmt: skip


def merged(mod) -> bool:
    nodes = list(walk(mod["main"].body))
    return any(isinstance(n, ir.While) for n in nodes) and not any(
        isinstance(n, ir.Call) and n.op in ("lower_bound", "linear_find") for n in nodes
    )


_KERNELS: dict = {}


def outputs_of(func, args: dict, m: int) -> list[np.ndarray]:
    """`c` from the Stage I interpreter, the loop interpreter on the lowered function and the
    compiled CPU kernel (compiled once per script)."""
    mod = sp.lower_sparse_iter(func)
    key = func.script()
    if key not in _KERNELS:
        _KERNELS[key] = sp.compile(func)
    outputs = []
    for run in (lambda c: sp.interpret(func, c=c, **args), lambda c: sp.interpret(mod, c=c, **args),
                lambda c: _KERNELS[key](c=c, **args)):  # fmt: skip
        c = np.full(m, np.nan)
        run(c)
        outputs.append(c)
    return outputs


def run_all(func, A, B, expected: np.ndarray) -> None:
    """Stage I interpreter, Stage II loop interpreter and the compiled kernel all give `expected`."""
    for c in outputs_of(func, arguments(A, B), A.shape[0]):
        np.testing.assert_allclose(c, expected, rtol=1e-10, atol=1e-12)


def expected(expr: str, A, B) -> np.ndarray:
    A64, B64 = scipy.sparse.csr_matrix(A, dtype=np.float64), scipy.sparse.csr_matrix(B, dtype=np.float64)
    return np.asarray(EXPRESSIONS[expr](A64, B64).sum(axis=1)).reshape(-1)


@pytest.mark.parametrize("expr", sorted(EXPRESSIONS))
def test_lowers_to_a_merge_and_round_trips(expr):
    """The reduction over J becomes a `while` merge in the row's block, with no binary search."""
    mod = sp.lower_sparse_iter(script(expr))
    assert merged(mod)
    assert [n.name for n in walk(mod["main"].body) if isinstance(n, ir.Block)] == ["rowwise0"]
    assert sp.structural_equal(sp.from_script(mod["main"].script()), mod["main"])
    sp.verify(mod)


def test_lattice_decides_the_points():
    """`A * B` visits only the intersection (no tail loops); `A + B` both tails; `2A - BA` A's only."""
    counts = {}
    for expr in EXPRESSIONS:
        mod = sp.lower_sparse_iter(script(expr))
        counts[expr] = sum(isinstance(n, ir.While) for n in walk(mod["main"].body))
    assert counts == {"A[i, j] * B[i, j]": 1, "A[i, j] + B[i, j]": 3, "2.0 * A[i, j] - B[i, j] * A[i, j]": 2}


EDGES = edge_matrices()


@pytest.mark.parametrize("expr", sorted(EXPRESSIONS))
def test_edge_matrices(expr):
    func = script(expr)
    rng = np.random.default_rng(4)
    for A in EDGES.values():
        A = make_csr(A.toarray() != 0, A.data, "int32", "float64")
        mask = rng.random(A.shape) < 0.5
        B = make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float64")
        run_all(func, A, B, expected(expr, A, B))


@fuzz(15)
@given(csr_matrices(max_rows=10, max_cols=10, index_dtypes=("int64",)), st.integers(0, 2**16))
def test_random_mixed_index_dtypes(A, seed):
    """A with int64 indices, B with int32: the merge compares coordinates in int64."""
    expr = "A[i, j] + B[i, j]"
    rng = np.random.default_rng(seed)
    mask = rng.random(A.shape) < rng.uniform(0, 1)
    B = make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float64")
    run_all(script(expr, "int64", "int32"), A, B, expected(expr, A, B))


def test_parallel_rows_schedule():
    func = script("A[i, j] * B[i, j]")
    sch = sp.Schedule(sp.lower_sparse_iter(func))
    (i,) = sch.get_loops(sch.get_block("rowwise0"))
    sch.parallel(i)
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod))
    A = sp.data.load_matrix("email-Eu-core").astype(np.float64)
    B = A.T.tocsr()
    c = np.zeros(A.shape[0])
    kernel(c=c, **arguments(A, B))
    np.testing.assert_allclose(c, expected("A[i, j] * B[i, j]", A, B), rtol=1e-10)


def test_other_shapes_keep_the_search():
    """An unsorted level is searched (a merge needs sorted coordinates); a quotient is not a lattice
    expression; one sparse operand has nothing to co-iterate with; an expression nonzero where
    neither operand is stored counts at every coordinate."""
    assert not merged(sp.lower_sparse_iter(script("A[i, j] * B[i, j]", sorted_a=False)))
    assert not merged(sp.lower_sparse_iter(script("A[i, j] / (B[i, j] + 1.0)")))
    assert not merged(sp.lower_sparse_iter(script("A[i, j] * 3.0")))
    plus_one = script("A[i, j] * B[i, j] + 1.0")  # every j adds 1: nothing to skip
    assert not merged(sp.lower_sparse_iter(plus_one))
    A = make_csr(np.eye(3, dtype=bool), np.ones(3), "int32", "float64")
    c = np.zeros(3)
    sp.compile(plus_one)(c=c, **arguments(A, A))
    np.testing.assert_allclose(c, [4.0, 4.0, 4.0])
    A = make_csr(np.eye(4, dtype=bool), np.arange(1.0, 5.0), "int32", "float64")
    B = make_csr(np.ones((4, 4), bool), np.arange(16.0), "int32", "float64")
    c = np.zeros(4)
    sp.compile(script("A[i, j] * B[i, j]", sorted_a=False))(c=c, **arguments(A, B))
    np.testing.assert_allclose(c, expected("A[i, j] * B[i, j]", A, B))


# ------------------------------------------------------------------ walking one operand's own level
OWN = SCRIPT.replace('[I, J], "SR"', '[I, JA], "SR"')
OWN_EXPRESSIONS = {
    "B[i, j] * A[i, j]": lambda A, B: B.multiply(A),
    "A[i, j] * B[i, j] + 1.0": lambda A, B: A.multiply(B) + pattern(A),
    "A[i, j] - 2.0 * B[i, j]": lambda A, B: A - 2 * B.multiply(pattern(A)),
}


def pattern(A):
    P = scipy.sparse.csr_matrix(A, copy=True)
    P.data[:] = 1.0
    return P


def own_script(expr: str, aidx: str = "int32", bidx: str = "int32"):
    return sp.from_script(OWN.replace("EXPR", expr).replace("AIDX", aidx).replace("BIDX", bidx).replace("SORTED", ""))


def own_expected(expr: str, A, B) -> np.ndarray:
    A64, B64 = scipy.sparse.csr_matrix(A, dtype=np.float64), scipy.sparse.csr_matrix(B, dtype=np.float64)
    return np.asarray(OWN_EXPRESSIONS[expr](A64, B64).sum(axis=1)).reshape(-1)


@pytest.mark.parametrize("expr", sorted(OWN_EXPRESSIONS))
def test_own_level_merges_and_matches(expr):
    """Iterating A's own level (every stored A, whatever the expression) and reading B at it: B is
    found by a second pointer that only moves forward, not by a binary search per entry."""
    func = own_script(expr, "int64", "int32")
    mod = sp.lower_sparse_iter(func)
    assert merged(mod)
    assert sp.structural_equal(sp.from_script(mod["main"].script()), mod["main"])
    rng = np.random.default_rng(9)
    for A in [*EDGES.values(), make_csr(rng.random((8, 9)) < 0.5, rng.uniform(-1, 1, 72), "int64", "float64")]:
        A = make_csr(A.toarray() != 0, A.data, "int64", "float64")
        mask = rng.random(A.shape) < 0.5
        B = make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float64")
        run_all(func, A, B, own_expected(expr, A, B))


def test_own_level_keeps_the_dense_semantics_of_non_finite_values():
    """Where A is stored and B is not, B reads 0, so `inf * 0` is NaN as the interpreter says; an
    inf of B where A stores nothing is never read."""
    func = own_script("A[i, j] * B[i, j]")
    A = make_csr(np.array([[1, 1, 0], [0, 1, 0]], bool), np.array([np.inf, 1.0, 2.0]), "int32", "float64")
    B = make_csr(np.array([[0, 1, 1], [0, 1, 1]], bool), np.array([3.0, np.inf, 1.0, 5.0]), "int32", "float64")
    args = arguments(A, B)
    results = []
    for run in (lambda c: sp.interpret(func, c=c, **args), lambda c: sp.compile(func)(c=c, **args)):
        c = np.zeros(2)
        run(c)
        results.append(c)
    np.testing.assert_array_equal(results[0], [np.nan, 2.0])
    np.testing.assert_array_equal(results[1], results[0])


# ------------------------------------------------------------------ three operands
THREE = """
from sparsetir_py import script as T

@T.prim_func
def rowwise3(a: T.handle, pa: T.handle, qa: T.handle, b: T.handle, pb: T.handle, qb: T.handle, d: T.handle,
             pd: T.handle, qd: T.handle, c: T.handle, m: T.int32, n: T.int32, na: T.int32, nb: T.int32, nd: T.int32):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
    JA = T.sparse_variable(I, (n, na), (pa, qa), "int32")
    JB = T.sparse_variable(I, (n, nb), (pb, qb), "int32")
    JD = T.sparse_variable(I, (n, nd), (pd, qd), "int32")
    A = T.match_sparse_buffer(a, (I, JA), "float64")
    B = T.match_sparse_buffer(b, (I, JB), "float64")
    D = T.match_sparse_buffer(d, (I, JD), "float64")
    C = T.match_sparse_buffer(c, (I,), "float64")
    with T.sp_iter([ITER], "SR", "rowwise3") as [i, j]:
        with T.init():
            C[i] = 0.0
        C[i] = C[i] + EXPR
"""
THREE_EXPRESSIONS = {  # with the dense iterator J: every expression vanishes where nothing is stored
    "A[i, j] * B[i, j] * D[i, j]": lambda A, B, D: A.multiply(B).multiply(D),
    "A[i, j] + B[i, j] - D[i, j]": lambda A, B, D: A + B - D,
    "A[i, j] * B[i, j] + 3.0 * D[i, j]": lambda A, B, D: A.multiply(B) + 3 * D,
}


@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize("expr", sorted(THREE_EXPRESSIONS))
def test_three_operands_merge(expr, own):
    """Three operands merge with one pointer each (leapfrog for the product, the least coordinate
    for the others), or, over A's own level, with forward pointers for B and D; the interpreters
    and the kernel agree with scipy on rows that are empty in some operands and not others."""
    func = sp.from_script(THREE.replace("EXPR", expr).replace("ITER", "I, JA" if own else "I, J"))
    mod = sp.lower_sparse_iter(func)
    assert merged(mod)
    assert sp.structural_equal(sp.from_script(mod["main"].script()), mod["main"])
    rng = np.random.default_rng(len(expr) + own)
    mats = []
    for t in range(3):
        mask = rng.random((9, 13)) < 0.4
        mask[t * 2 : t * 2 + 2] = False  # rows empty in one operand only
        mask[8] = False  # and a row empty in all
        mats.append(make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float64"))
    args = {"m": 9, "n": 13}
    for name, M in zip("abd", mats):
        args |= {name: M.data, f"p{name}": M.indptr, f"q{name}": M.indices, f"n{name}": M.nnz}
    A, B, D = mats
    want = THREE_EXPRESSIONS[expr](A, B, D)
    if own:
        want = want.multiply(pattern(A))  # over A's level only A's coordinates count
    want = np.asarray(want.sum(axis=1)).reshape(-1)
    runs = [lambda c: sp.interpret(func, c=c, **args), lambda c: sp.interpret(mod, c=c, **args)]
    if expr.startswith("A[i, j] + B") and not own:  # one compiled kernel (the loop interpreter runs the rest)
        runs.append(lambda c: sp.compile(func)(c=c, **args))
    for run in runs:
        c = np.full(9, np.nan)
        run(c)
        np.testing.assert_allclose(c, want, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ negations, subtraction and casts
SIGNED = {  # id: (the update, A's, B's and C's value dtypes, numpy's increment from A and B in float64)
    "subtracted": ("C[i] = C[i] - A[i, j] * B[i, j]", "float64", "float64", "float64", lambda A, B: -A.multiply(B)),
    "negated": ("C[i] = C[i] + -A[i, j] * B[i, j]", "float64", "float64", "float64", lambda A, B: -A.multiply(B)),
    "negated_union": ("C[i] = C[i] - -(A[i, j] - 2.0 * B[i, j])", "float64", "float64", "float64",
                      lambda A, B: A - 2 * B),
    "implicit_cast": ("C[i] = C[i] + A[i, j] * B[i, j]", "float32", "float32", "float64", lambda A, B: A.multiply(B)),
    "cast": ("C[i] = C[i] + T.float64(A[i, j] * B[i, j])", "float32", "float32", "float64",
             lambda A, B: A.multiply(B)),
    "cast_leaf": ("C[i] = C[i] - A[i, j] * B[i, j]", "float32", "float64", "float64", lambda A, B: -A.multiply(B)),
    "casts_and_negations": ("C[i] = C[i] - (T.float64(-A[i, j]) + B[i, j] * 2.0)", "float32", "float32", "float64",
                            lambda A, B: A - 2 * B),
}  # fmt: skip
SIGNED_LOOPS = {"negated_union": 3, "casts_and_negations": 3}  # `while` loops: the others are intersections (1)


def typed_script(template: str, update: str, dtypes: dict[str, str], replacements: dict[str, str]):
    """`template` with its update `C[i] = C[i] + EXPR` replaced by `update`, the buffers named in
    `dtypes` declared with those value dtypes (the template's are float64), and `replacements`."""
    text = template.replace("C[i] = C[i] + EXPR", update)
    for name, dtype in dtypes.items():
        text = re.sub(rf"^(\s*{name} = T\.match_sparse_buffer\(.*), \"float64\"\)$", rf'\1, "{dtype}")', text,
                      flags=re.M)  # fmt: skip
    for old, new in replacements.items():
        text = text.replace(old, new)
    return sp.from_script(text)


def signed_script(form: str, own: bool = False):
    update, a, b, c, _ = SIGNED[form]
    template = OWN if own else SCRIPT
    return typed_script(template, update, {"A": a, "B": b, "C": c}, {"AIDX": "int64", "BIDX": "int32", "SORTED": ""})


def operands_with_gaps(rng, count: int, dtypes: tuple[str, ...], idtypes: tuple[str, ...], shape=(9, 13)) -> list:
    """`count` CSR matrices of `shape`: rows empty in one operand only, a row empty in all, and
    explicit zeros among the stored values."""
    out = []
    for t in range(count):
        mask = rng.random(shape) < 0.4
        mask[t * 2 : t * 2 + 2] = False
        mask[-1:] = False
        values = rng.uniform(-1, 1, int(mask.sum()))
        values[rng.random(values.size) < 0.1] = 0.0
        out.append(make_csr(mask, values, idtypes[t], dtypes[t]))
    return out


def check_kernel(func, args: dict, m: int, want: np.ndarray, dtype: str) -> None:
    """The Stage I interpreter, the loop interpreter on the lowered function and the compiled CPU
    kernel give the same `c`, which is `want` (numpy's, in float64) within `dtype`'s rounding."""
    outputs = outputs_of(func, args, m)
    loose = {"rtol": 1e-5, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-12}
    np.testing.assert_allclose(outputs[0], want, **loose)
    for c in outputs[1:]:
        np.testing.assert_allclose(c, outputs[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", list(SIGNED))
def test_negations_and_casts_merge(form):
    """An update by subtraction (`C - E`, the lattice of `E`), a unary minus and a cast inside `E`
    (explicit, or the front end's where the operands are narrower than C) keep the merge: a
    negation or a cast is 0 where its operand is, so the lattice is that of `E` without them."""
    for own in (False, True):
        mod = sp.lower_sparse_iter(signed_script(form, own))
        assert merged(mod), (form, own)
        assert sp.structural_equal(sp.from_script(mod["main"].script()), mod["main"])
        sp.verify(mod)
    loops = sum(isinstance(n, ir.While) for n in walk(sp.lower_sparse_iter(signed_script(form))["main"].body))
    assert loops == SIGNED_LOOPS.get(form, 1)


@pytest.mark.parametrize("form", list(SIGNED))
def test_negations_and_casts_match_the_interpreter(form):
    """Each form over J and over A's own level, on matrices with empty rows (in one operand, in
    both), int64 indices for A and int32 for B, float32 and float64 values: interpreters, kernel
    and numpy agree."""
    _, a, b, _, increment = SIGNED[form]
    rng = np.random.default_rng(len(form))
    for own in (False, True):
        func = signed_script(form, own)
        for shape in ((9, 13), (1, 1), (4, 0), (0, 3)):
            A, B = operands_with_gaps(rng, 2, (a, b), ("int64", "int32"), shape)
            args = arguments(A, B) | {"a": A.data, "b": B.data}
            A64, B64 = (scipy.sparse.csr_matrix(X, dtype=np.float64) for X in (A, B))
            want = increment(A64, B64)
            if own:
                want = scipy.sparse.csr_matrix(want).multiply(pattern(A))
            dtype = "float32" if "float32" in (a, b) else "float64"
            check_kernel(func, args, shape[0], np.asarray(want.sum(axis=1)).reshape(-1), dtype)


THREE_SIGNED = {  # id: (the update, numpy's increment from A, B, D in float64)
    "subtracted_product": ("C[i] = C[i] - A[i, j] * B[i, j] * D[i, j]", lambda A, B, D: -A.multiply(B).multiply(D)),
    "cast_union": ("C[i] = C[i] + T.float64(-A[i, j] * B[i, j]) - 2.0 * D[i, j]",
                   lambda A, B, D: -A.multiply(B) - 2 * D),
}  # fmt: skip


@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize("form", list(THREE_SIGNED))
def test_three_operands_negations_and_casts(form, own):
    """The same forms with three operands, float32 A and B, float64 D and C: the leapfrog for the
    product, the least coordinate for the union, forward pointers over A's own level."""
    update, increment = THREE_SIGNED[form]
    replacements = {"ITER": "I, JA" if own else "I, J", '(pa, qa), "int32"': '(pa, qa), "int64"',
                    '(pd, qd), "int32"': '(pd, qd), "int64"'}  # fmt: skip
    func = typed_script(THREE, update, {"A": "float32", "B": "float32"}, replacements)
    assert merged(sp.lower_sparse_iter(func))
    rng = np.random.default_rng(len(form) + own)
    mats = operands_with_gaps(rng, 3, ("float32", "float32", "float64"), ("int64", "int32", "int64"))
    args = {"m": 9, "n": 13}
    for name, M in zip("abd", mats):
        args |= {name: M.data, f"p{name}": M.indptr, f"q{name}": M.indices, f"n{name}": M.nnz}
    want = increment(*(scipy.sparse.csr_matrix(M, dtype=np.float64) for M in mats))
    if own:
        want = scipy.sparse.csr_matrix(want).multiply(pattern(mats[0]))
    check_kernel(func, args, 9, np.asarray(want.sum(axis=1)).reshape(-1), "float32")
