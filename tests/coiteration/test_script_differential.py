"""Differential tests of scripts written with co-iteration (the design card §3f): user scripts
that read several sparse buffers at one iterator, compiled for the CPU and compared three ways,
the compiled kernel against the interpreter (the coordinate-space oracle) against numpy.

Two families of scripts, each a fixed list of expression shapes compiled once per shape and
dtype pair (the drawn matrices change, the kernels do not):

* reductions `C[i] = C[i] + E` over `[I, J]` "SR", `J` dense, `E` reading two to four CSR
  operands at `j`: intersections, unions, nests of both, scaling constants and a scalar
  parameter, subtraction, a mask operand, an operand read twice, `T.max`, an expression nonzero
  where nothing is stored, mixed int32/int64 index dtypes, float32/float64 values, an unsorted
  (searched) level, the iteration over one operand's own level, updates by subtraction
  (`C[i] - E`), unary minus and casts (written, and the front end's into a float64 output over
  float32 operands);
* assembled outputs `C[i, j] = E` over `[I, J]` "SS" (`assemble=True`): element-wise
  expressions of one to four operands, and SpGEMM written as a script, `[I, K, J]` "SRS" and
  `[I, J, K]` "SSR", plain and masked, on rectangular operands. The structure is the presence of
  the module docstring of `coiteration.assemble` (a stored operand reaches the value), computed
  here from the operands' patterns.

The expected values are numpy's, from the operands as dense arrays (the dense semantics the
interpreter keeps): an unstored coordinate reads 0. Matrices come from hypothesis: shapes from
0 to 7 (0-row, 0-column, one row), empty rows, full rows, explicit zeros. Bad arguments (shapes
that disagree, wrong dtypes, the assembled output's arrays passed or a script argument missing)
are named errors of `sparsetir_py.errors`, not failures inside the compiled code.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st
from matrices import make_csr

import sparsetir_py as sp
from sparsetir_py.arith.lattice import parse_expression
from sparsetir_py.errors import InputError, LoweringError
from sparsetir_py.ops.scripts import elementwise_source

OPERAND = re.compile(r"X(\d)")


# ------------------------------------------------------------------ scripts
def at_ij(expr: str) -> str:
    """`expr` with each operand `X<t>` read at `[i, j]`."""
    return OPERAND.sub(r"X\1[i, j]", expr)


def reduction_source(exprs: tuple[str, ...], idtypes: tuple[str, ...], dtype: str, *,
                     own: tuple[int, ...] = (), unsorted: tuple[int, ...] = (), subtract: tuple[int, ...] = (),
                     out_dtype: str | None = None) -> str:  # fmt: skip
    """One function of several reductions over the same operands `X<t>` (index dtype
    `idtypes[t]`, `sorted=False` for `t` in `unsorted`): output `C<e>[i] = C<e>[i] + exprs[e]`
    (`-` for `e` in `subtract`) over `[I, J]`, or `[I, J0]` (X0's own level) for `e` in `own`; the
    outputs of `out_dtype` (default: the operands' `dtype`). Several iterations in one function:
    one compilation checks them all."""
    count = len(idtypes)
    params = "".join(f"x{t}: T.handle, p{t}: T.handle, q{t}: T.handle, " for t in range(count))
    params += "".join(f"c{e}: T.handle, " for e in range(len(exprs)))
    sizes = "".join(f", nnz{t}: T.int32" for t in range(count))
    decls = "".join(
        f"    J{t} = T.sparse_variable(I, (n, nnz{t}), (p{t}, q{t}), {idtypes[t]!r}"
        f"{', sorted=False' if t in unsorted else ''})\n"
        f"    X{t} = T.match_sparse_buffer(x{t}, (I, J{t}), {dtype!r})\n"
        for t in range(count)
    )
    output = out_dtype or dtype
    decls += "".join(f"    C{e} = T.match_sparse_buffer(c{e}, (I,), {output!r})\n" for e in range(len(exprs)))
    body = "".join(
        f'    with T.sp_iter([I, {"J0" if e in own else "J"}], "SR", "rows{e}") as [i, j]:\n'
        f"        with T.init():\n"
        f"            C{e}[i] = 0.0\n"
        f"        C{e}[i] = C{e}[i] {f'- ({at_ij(expr)})' if e in subtract else f'+ {at_ij(expr)}'}\n"
        for e, expr in enumerate(exprs)
    )
    return f"""
from sparsetir_py import script as T

@T.prim_func
def rows({params}m: T.int32, n: T.int32{sizes}, alpha: T.{dtype}):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
{decls}{body}"""


def assembled_source(expr: str, count: int, idtype: str, dtype: str) -> str:
    """`C[i, j] = expr` over `[I, J]` "SS", C's level assembled by the kernel."""
    return elementwise_source(expr, count, idtype, dtype)


def spgemm_source(order: str, idtype: str, dtype: str, *, mask: bool = False) -> str:
    """`C[i, j] = C[i, j] + A[i, k] * B[k, j]` (times `M[i, j]` where masked), C assembled,
    iterated `[I, K, J]` "SRS" or `[I, J, K]` "SSR"."""
    axes, kinds, names = {"SRS": ("[I, K, J]", "SRS", "[i, kk, j]"), "SSR": ("[I, J, K]", "SSR", "[i, j, kk]")}[order]
    factor = " * M[i, j]" if mask else ""
    mask_params = "mv: T.handle, mp: T.handle, mi: T.handle, " if mask else ""
    mask_sizes = ", nnz_m: T.int32" if mask else ""
    mask_decls = (f"    JM = T.sparse_variable(I, (n, nnz_m), (mp, mi), {idtype!r})\n"
                  f"    M = T.match_sparse_buffer(mv, (I, JM), {dtype!r})\n") if mask else ""  # fmt: skip
    return f"""
from sparsetir_py import script as T

@T.prim_func
def product(a: T.handle, pa: T.handle, qa: T.handle, b: T.handle, pb: T.handle, qb: T.handle, {mask_params}
            c: T.handle, indptr_c: T.handle, indices_c: T.handle, m: T.int32, k: T.int32, n: T.int32,
            nnz_a: T.int32, nnz_b: T.int32{mask_sizes}, nnz_c: T.int32):
    I = T.dense_fixed(m)
    K = T.sparse_variable(I, (k, nnz_a), (pa, qa), {idtype!r})
    KB = T.dense_fixed(k)
    JB = T.sparse_variable(KB, (n, nnz_b), (pb, qb), {idtype!r})
    J = T.dense_fixed(n)
{mask_decls}    JC = T.sparse_variable(I, (n, nnz_c), (indptr_c, indices_c), {idtype!r}, assemble=True)
    A = T.match_sparse_buffer(a, (I, K), {dtype!r})
    B = T.match_sparse_buffer(b, (KB, JB), {dtype!r})
    C = T.match_sparse_buffer(c, (I, JC), {dtype!r})
    with T.sp_iter({axes}, {kinds!r}, "product") as {names}:
        with T.init():
            C[i, j] = 0.0
        C[i, j] = C[i, j] + A[i, kk] * B[kk, j]{factor}
"""


_KERNELS: dict = {}


def compiled(source: str):
    """The CPU kernel of `source`, compiled once per test session."""
    if source not in _KERNELS:
        _KERNELS[source] = sp.compile(sp.from_script(source))
    return _KERNELS[source]


# ------------------------------------------------------------------ numpy's side
def dense_value(expr: str, dense: list[np.ndarray], alpha: float) -> np.ndarray:
    """`expr` evaluated element-wise in float64 over the operands as dense arrays."""
    env = {f"X{t}": X for t, X in enumerate(dense)} | {"alpha": alpha, "T": _NumpyT}
    return np.asarray(eval(expr, {"__builtins__": {}}, env), dtype=np.float64)


class _NumpyT:
    max = staticmethod(np.maximum)
    min = staticmethod(np.minimum)
    float64 = staticmethod(np.float64)


def presence(tree: tuple, patterns: dict[str, np.ndarray], shape) -> np.ndarray:
    """Where the value of `tree` is stored (`coiteration.assemble`: a product where both factors
    are, a sum or difference where either is, a constant unless 0, a scalar everywhere)."""
    kind = tree[0]
    if kind == "name":
        return patterns.get(tree[1], np.ones(shape, bool))
    if kind == "num":
        return np.full(shape, tree[1] != 0)
    if kind == "neg":
        return presence(tree[1], patterns, shape)
    a, b = presence(tree[1], patterns, shape), presence(tree[2], patterns, shape)
    return a & b if kind == "*" else a | b


# ------------------------------------------------------------------ matrices
@st.composite
def operand_sets(draw, count: int, square: bool = True, max_side: int = 7):
    """`count` canonical CSR patterns of one drawn shape (0 to max_side each way): per operand a
    density, empty rows and perhaps a full row, values in [-1, 1] with some exact zeros."""
    m = draw(st.integers(0, max_side))
    n = draw(st.integers(0, max_side))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        density = draw(st.sampled_from([0.0, 0.2, 0.5, 0.8, 1.0]))
        mask = rng.random((m, n)) < density
        mask[rng.random(m) < 0.25, :] = False
        if m and draw(st.booleans()):
            mask[rng.integers(m), :] = True
        values = rng.uniform(-1, 1, int(mask.sum()))
        values[rng.random(values.size) < 0.1] = 0.0  # explicit zeros stay stored
        out.append((mask, values))
    return out


def typed(operands, idtypes, dtype) -> list[scipy.sparse.csr_matrix]:
    return [make_csr(mask, values, idtype, dtype) for (mask, values), idtype in zip(operands, idtypes)]


def shuffled_rows(A: scipy.sparse.csr_matrix, rng) -> scipy.sparse.csr_matrix:
    """A with each row's entries in a random order (for a level declared `sorted=False`)."""
    A = A.copy()
    for i in range(A.shape[0]):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        order = lo + rng.permutation(hi - lo)
        A.indices[lo:hi], A.data[lo:hi] = A.indices[order], A.data[order]
    A.has_sorted_indices = False
    return A


def operand_arguments(mats, names=None) -> dict:
    args = {"m": mats[0].shape[0], "n": mats[0].shape[1]} if mats else {}
    for t, X in enumerate(mats):
        args |= {f"x{t}": X.data, f"p{t}": X.indptr, f"q{t}": X.indices, f"nnz{t}": X.nnz}
    return args


def tolerance(dtype: str) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-12}


# ------------------------------------------------------------------ reductions
REDUCTIONS = {  # group: (operands' index dtypes, value dtype, {name: expression}, keywords of the script)
    "float64": (
        ("int32", "int64", "int32", "int64"),
        "float64",
        {
            "dot": "X0 * X1",
            "scaled_difference": "alpha * X0 - 2.0 * X1 * X0",
            "union_times": "(X0 + X1) * X2",
            "intersection3": "X1 * X2 * X3",
        },
        {},
    ),
    "float64_more": (
        ("int64", "int32", "int32", "int64", "int32"),
        "float64",
        {
            "signed_union4": "X0 - X1 + 0.5 * X2 - alpha * X3",
            "mask": "X3 * (X0 - alpha * X1 * X0)",
            "max": "T.max(X0, X1)",
            "unsorted": "X4 * X1 + X4",
        },
        {"unsorted": (4,)},
    ),
    "float32": (
        ("int64", "int32", "int32"),
        "float32",
        {
            "union": "X0 + X1",
            "own_level": "X0 * X1 + X1",
            "own_level3": "X0 - X1 * X2",
        },
        {"own": (1, 2)},
    ),
    "signed_casts": (  # float32 operands into float64 outputs: the front end casts each increment
        ("int64", "int32", "int64"),
        "float32",
        {
            "negated": "-X0 * X1",
            "subtracted_union": "X0 - alpha * X1",
            "cast": "T.float64(-X1 * X2) + X0",
            "own_level": "X0 * -X2",
            "subtracted_product3": "X0 * X1 * X2",
        },
        {"subtract": (1, 3, 4), "own": (3,), "out_dtype": "float64"},
    ),
}


def reduction_expected(expr: str, mats, alpha: float, own: bool) -> np.ndarray:
    """numpy's `sum_j expr` per row (over X0's stored `j` only where the iteration walks its level)."""
    value = dense_value(expr, [X.toarray().astype(np.float64) for X in mats], alpha)
    if own:
        value = value * pattern(mats[0])
    return value.sum(axis=1)


def pattern(A) -> np.ndarray:
    P = np.zeros(A.shape, bool)
    coo = A.tocoo()
    P[coo.row, coo.col] = True
    return P


def check_reductions(group: str, operands, alpha: float, seed: int) -> None:
    idtypes, dtype, exprs, keywords = REDUCTIONS[group]
    source = reduction_source(tuple(exprs.values()), idtypes, dtype, **keywords)
    mats = typed(operands, idtypes, dtype)
    rng = np.random.default_rng(seed)
    mats = [shuffled_rows(X, rng) if t in keywords.get("unsorted", ()) else X for t, X in enumerate(mats)]
    args = operand_arguments(mats) | {"alpha": alpha}
    m = mats[0].shape[0]
    outputs = [f"c{e}" for e in range(len(exprs))]
    out_dtype = keywords.get("out_dtype", dtype)
    oracle = {c: np.full(m, np.nan, out_dtype) for c in outputs}
    sp.interpret(sp.from_script(source), **oracle, **args)
    got = {c: np.full(m, np.nan, out_dtype) for c in outputs}
    compiled(source)(**got, **args)
    for e, (name, expr) in enumerate(exprs.items()):
        c = outputs[e]
        np.testing.assert_allclose(got[c], oracle[c], **tolerance(dtype), err_msg=f"{name}: kernel != interpreter")
        want = reduction_expected(expr, mats, alpha, e in keywords.get("own", ()))
        if e in keywords.get("subtract", ()):
            want = -want
        np.testing.assert_allclose(oracle[c], want, **tolerance(dtype), err_msg=f"{name}: interpreter != numpy")


@pytest.mark.parametrize("group", list(REDUCTIONS))
@fuzz(10)
@given(data=st.data())
def test_reductions(group, data):
    """Each reduction on drawn operands: the kernel (a merge where the expression allows, the
    search lowering elsewhere) equals the interpreter equals numpy's dense sum."""
    operands = data.draw(operand_sets(len(REDUCTIONS[group][0])))
    alpha = data.draw(st.sampled_from([2.0, -0.5, 0.0]))
    check_reductions(group, operands, alpha, data.draw(st.integers(0, 2**16)))


# ------------------------------------------------------------------ assembled element-wise outputs
ASSEMBLED = {  # name: (expression, operands, index dtype, value dtype)
    "negated_difference": ("-X0 + X1", 2, "int32", "float32"),
    "scaled": ("alpha * X0 - X1 * X0", 2, "int64", "float64"),
    "union_times": ("(X0 + X1) * X2", 3, "int64", "float64"),
    "products": ("X0 * X1 - alpha * X2 * X3", 4, "int32", "float32"),
}


def check_assembled(name: str, operands, alpha: float) -> None:
    expr, count, idtype, dtype = ASSEMBLED[name]
    source = assembled_source(expr, count, idtype, dtype)
    mats = typed(operands, [idtype] * count, dtype)
    args = operand_arguments(mats) | {"alpha": alpha}
    oracle = sp.interpret(sp.from_script(source), **args)
    out = compiled(source)(**args)
    for key in ("indptr_c", "indices_c"):
        assert out[key].dtype == np.dtype(idtype) and np.array_equal(out[key], oracle[key]), f"{name}: {key}"
    assert out["c"].dtype == np.dtype(dtype) and out["nnz_c"] == oracle["nnz_c"] == len(out["c"])
    np.testing.assert_allclose(out["c"], oracle["c"], **tolerance(dtype), err_msg=f"{name}: values")
    shape = mats[0].shape
    patterns = {f"X{t}": pattern(X) for t, X in enumerate(mats)}
    present = presence(parse_expression(expr, tuple(patterns)), patterns, shape)
    check_against_numpy(out, present, dense_value(expr, [X.toarray().astype(np.float64) for X in mats], alpha), dtype)


def check_against_numpy(out: dict, present: np.ndarray, values: np.ndarray, dtype: str) -> None:
    """`out`'s CSR arrays store exactly `present`, sorted within rows, with `values` there."""
    want = scipy.sparse.csr_matrix(present.astype(np.int8))
    want.sort_indices()
    assert np.array_equal(out["indptr_c"], want.indptr) and np.array_equal(out["indices_c"], want.indices)
    rows = np.repeat(np.arange(present.shape[0]), np.diff(want.indptr))
    np.testing.assert_allclose(out["c"], values[rows, want.indices], **tolerance(dtype))


@pytest.mark.parametrize("name", list(ASSEMBLED))
@fuzz(5)
@given(data=st.data())
def test_assembled_elementwise(name, data):
    """Each element-wise script with an assembled output: kernel == interpreter (structure exactly,
    values closely) == numpy (the structure of the presence rules, the dense values there)."""
    operands = data.draw(operand_sets(ASSEMBLED[name][1]))
    check_assembled(name, operands, data.draw(st.sampled_from([2.0, -0.5, 0.0])))


# ------------------------------------------------------------------ SpGEMM written as a script
def inner_product_source(idtypes: tuple[str, str], dtype: str) -> str:
    """`C = A @ B` into a dense C, each entry the dot product of A's row i and row j of `BT`
    (B's transpose, CSR): `[I, J, K]` "SSR", K dense, two sparse rows read at `k`."""
    return f"""
from sparsetir_py import script as T

@T.prim_func
def inner(a: T.handle, pa: T.handle, qa: T.handle, bt: T.handle, pb: T.handle, qb: T.handle, c: T.handle,
          m: T.int32, k: T.int32, n: T.int32, nnz_a: T.int32, nnz_b: T.int32):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
    K = T.dense_fixed(k)
    KA = T.sparse_variable(I, (k, nnz_a), (pa, qa), {idtypes[0]!r})
    KB = T.sparse_variable(J, (k, nnz_b), (pb, qb), {idtypes[1]!r})
    A = T.match_sparse_buffer(a, (I, KA), {dtype!r})
    BT = T.match_sparse_buffer(bt, (J, KB), {dtype!r})
    C = T.match_sparse_buffer(c, (I, J), {dtype!r})
    with T.sp_iter([I, J, K], "SSR", "inner") as [i, j, kk]:
        with T.init():
            C[i, j] = 0.0
        C[i, j] = C[i, j] + A[i, kk] * BT[j, kk]
"""


PRODUCTS = {  # name: (iteration order, masked, index dtype, value dtype)
    "SRS": ("SRS", False, "int32", "float32"),
    "SSR": ("SSR", False, "int64", "float64"),
    "masked": ("SRS", True, "int32", "float32"),
}


@st.composite
def product_operands(draw):
    """A (m x k), B (k x n) and a mask (m x n), each side 0 to 6."""
    m, k, n = (draw(st.integers(0, 6)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    out = []
    for rows, cols in ((m, k), (k, n), (m, n)):
        mask = rng.random((rows, cols)) < draw(st.sampled_from([0.0, 0.3, 0.6, 1.0]))
        mask[rng.random(rows) < 0.25, :] = False
        out.append((mask, rng.uniform(-1, 1, int(mask.sum()))))
    return out


@pytest.mark.parametrize("name", list(PRODUCTS))
@fuzz(6)
@given(operands=product_operands())
def test_assembled_spgemm_scripts(name, operands):
    """SpGEMM written as a script with an assembled output, in both iteration orders and masked,
    on rectangular operands (inner dimension 0 or 1 included): kernel == interpreter == numpy,
    the structure the product of the patterns (times the mask's)."""
    order, masked, idtype, dtype = PRODUCTS[name]
    source = spgemm_source(order, idtype, dtype, mask=masked)
    A, B, M = typed(operands, [idtype] * 3, dtype)
    args = {"a": A.data, "pa": A.indptr, "qa": A.indices, "b": B.data, "pb": B.indptr, "qb": B.indices,
            "m": A.shape[0], "k": A.shape[1], "n": B.shape[1], "nnz_a": A.nnz, "nnz_b": B.nnz}  # fmt: skip
    if masked:
        args |= {"mv": M.data, "mp": M.indptr, "mi": M.indices, "nnz_m": M.nnz}
    oracle = sp.interpret(sp.from_script(source), **args)
    out = compiled(source)(**args)
    for key in ("indptr_c", "indices_c"):
        assert np.array_equal(out[key], oracle[key]), f"{name}: {key}"
    np.testing.assert_allclose(out["c"], oracle["c"], **tolerance(dtype))
    present = (pattern(A).astype(np.int64) @ pattern(B).astype(np.int64)) > 0
    values = A.toarray().astype(np.float64) @ B.toarray().astype(np.float64)
    if masked:
        present &= pattern(M)
        values = values * M.toarray()
    check_against_numpy(out, present, values, dtype)


@fuzz(6)
@given(operands=product_operands())
def test_inner_product_spgemm_script(operands):
    """A @ B into a dense output by dot products of sparse rows (A's and B transposed's): kernel
    == interpreter == numpy."""
    A, B, _ = typed(operands, ["int32"] * 3, "float64")
    transposed = pattern(B).T
    BT = make_csr(transposed, B.toarray().T[transposed], "int64", "float64")
    source = inner_product_source(("int32", "int64"), "float64")
    args = {"a": A.data, "pa": A.indptr, "qa": A.indices, "bt": BT.data, "pb": BT.indptr, "qb": BT.indices,
            "m": A.shape[0], "k": A.shape[1], "n": B.shape[1], "nnz_a": A.nnz, "nnz_b": BT.nnz}  # fmt: skip
    oracle = np.full((A.shape[0], B.shape[1]), np.nan)
    sp.interpret(sp.from_script(source), c=oracle, **args)
    got = np.full_like(oracle, np.nan)
    compiled(source)(c=got, **args)
    np.testing.assert_allclose(got, oracle, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(oracle, A.toarray() @ B.toarray(), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ columns beyond the iterated axis
def test_reduction_over_fewer_columns_than_stored():
    """`J = T.dense_fixed(k)` with operands of `n > k` columns: the iteration visits `j < k` only,
    so the entries at `k` and beyond add nothing (a merge of the stored rows would add them: the
    lowering searches instead)."""
    source = reduction_source(("X0 * X1 + X0",), ("int32", "int64"), "float64").replace(
        "J = T.dense_fixed(n)", "J = T.dense_fixed(k)").replace("m: T.int32,", "m: T.int32, k: T.int32,")  # fmt: skip
    rng = np.random.default_rng(26)
    full = np.ones((4, 6), bool)
    mats = typed([(full, rng.uniform(-1, 1, 24)), (full, rng.uniform(-1, 1, 24))], ("int32", "int64"), "float64")
    args = operand_arguments(mats) | {"k": 3, "alpha": 1.0}
    oracle, got = np.zeros(4), np.zeros(4)
    sp.interpret(sp.from_script(source), c0=oracle, **args)
    compiled(source)(c0=got, **args)
    X0, X1 = (X.toarray()[:, :3] for X in mats)
    np.testing.assert_allclose(oracle, (X0 * X1 + X0).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(got, oracle, rtol=1e-12)


@pytest.mark.parametrize("where", ["J", "JC", "J1"])
def test_assembled_columns_of_other_lengths_are_lowering_errors(where):
    """An assembled output whose iterated J, own level or an operand's level has another length
    than the others: the kernels would store columns the iteration never visits (or the output
    cannot hold), so `lower_sparse_iter` refuses with a LoweringError naming the level."""
    source = assembled_source("X0 + X1", 2, "int32", "float32").replace("m: T.int32,", "m: T.int32, k: T.int32,")
    declaration = {
        "J": "J = T.dense_fixed(n)",
        "JC": "JC = T.sparse_variable(I, (n,",
        "J1": "J1 = T.sparse_variable(I, (n,",
    }
    source = source.replace(declaration[where], declaration[where].replace("(n", "(k"))
    with pytest.raises(LoweringError, match=f"one length, but `{where}` .* has k|has n and the iterated `{where}` k"):
        sp.lower_sparse_iter(sp.from_script(source))
    product = spgemm_source("SRS", "int32", "float32").replace("J = T.dense_fixed(n)", "J = T.dense_fixed(k)")
    with pytest.raises(LoweringError, match="`JC` .* has n and the iterated `J` k"):
        sp.lower_sparse_iter(sp.from_script(product))


# ------------------------------------------------------------------ named errors for bad arguments
def _operands(idtypes, dtype, rows=(4, 4, 4)):
    """Operands of 4 or 5 rows and 6 columns, each row of two or more entries."""
    rng = np.random.default_rng(3)
    out = []
    for idtype, m in zip(idtypes, rows):
        mask = rng.random((m, 6)) < 0.5
        mask[:, :2] = True
        out.append(make_csr(mask, rng.uniform(-1, 1, m * 6), idtype, dtype))
    return out


def _swapped(A) -> np.ndarray:
    """A's indices with the first two entries of row 0 swapped (a sorted level's order broken)."""
    indices = A.indices.copy()
    indices[[0, 1]] = indices[[1, 0]]
    return indices


@pytest.mark.parametrize("case", ["columns", "rows", "index dtype", "value dtype", "output passed", "missing",
                                  "out of range", "unsorted", "nnz", "alpha", "alpha text", "strided"])  # fmt: skip
def test_bad_arguments_of_an_assembled_script(case):
    """Each bad call of an assembled script's kernel is an InputError naming the argument."""
    expr, count, idtype, dtype = ASSEMBLED["scaled"]
    kern = compiled(assembled_source(expr, count, idtype, dtype))
    mats = _operands((idtype, idtype), dtype)
    args = operand_arguments(mats) | {"alpha": 2.0}
    X1 = mats[1]
    out_of_range = X1.indices.copy()
    out_of_range[-1] = 6
    changes, match = {
        "columns": ({"n": 3}, "must lie in"),
        "rows": ({"m": 5}, "indptr"),
        "index dtype": ({"q1": X1.indices.astype(np.int32)}, "`q1`.*int64"),
        "value dtype": ({"x0": mats[0].data.astype(np.float32)}, "`x0`.*float64"),
        "output passed": ({"c": np.zeros(3)}, "assembled output"),
        "missing": ({}, "missing argument `x1`"),
        "out of range": ({"q1": out_of_range}, "must lie in"),
        "unsorted": ({"q1": _swapped(X1)}, "increasing"),
        "nnz": ({"nnz1": X1.nnz + 1}, "nnz"),
        "alpha": ({"alpha": None}, "`alpha` must be a number"),
        "alpha text": ({"alpha": "2"}, "`alpha` must be a number"),
        "strided": ({"x1": np.repeat(X1.data, 2)[::2]}, "`x1` must be C-contiguous"),
    }[case]
    call = args | changes
    if case == "missing":
        del call["x1"]
    with pytest.raises(InputError, match=match):
        kern(**call)


@pytest.mark.parametrize("case", ["rows", "output shape", "output dtype", "index dtype", "unsorted", "alpha"])
def test_bad_arguments_of_a_reduction_script(case):
    """The same for the merged reductions: a named InputError, not a crash in the kernel."""
    idtypes, dtype, exprs, keywords = REDUCTIONS["float32"]
    kern = compiled(reduction_source(tuple(exprs.values()), idtypes, dtype, **keywords))
    mats = _operands(idtypes, dtype, rows=(4, 5, 4) if case == "rows" else (4, 4, 4))
    args = operand_arguments(mats) | {"alpha": 2.0} | {f"c{e}": np.zeros(4, np.float32) for e in range(len(exprs))}
    changes, match = {
        "rows": ({}, "`p1`"),
        "output shape": ({"c0": np.zeros(5, np.float32)}, "`c0`"),
        "output dtype": ({"c1": np.zeros(4)}, "`c1`.*float32"),
        "index dtype": ({"p0": mats[0].indptr.astype(np.int32)}, "`p0`.*int64"),
        "unsorted": ({"q2": _swapped(mats[2])}, "increasing"),
        "alpha": ({"alpha": None}, "`alpha`"),
    }[case]
    with pytest.raises(InputError, match=match):
        kern(**(args | changes))


def test_scripts_the_kernels_do_not_take_are_lowering_errors():
    """An assembled output whose expression is nonzero where nothing is stored, or uses an
    operator the merge kernels do not have (`T.max`): a LoweringError from `sp.compile`; the
    interpreter still runs it (the coordinate-space oracle) and agrees with numpy."""
    rng = np.random.default_rng(5)
    mats = typed([(rng.random((3, 4)) < 0.5, rng.uniform(-1, 1, 12)) for _ in range(2)], ("int32", "int32"), "float64")
    args = operand_arguments(mats) | {"alpha": 0.5}
    for expr, match in (("X0 * X1 + alpha", "would be dense"), ("T.max(X0, X1)", "element-wise expression takes")):
        source = assembled_source(expr, 2, "int32", "float64")
        with pytest.raises(LoweringError, match=match):
            sp.compile(sp.from_script(source))
        oracle = sp.interpret(sp.from_script(source), **args)
        patterns = {f"X{t}": pattern(X) for t, X in enumerate(mats)}
        dense = [X.toarray() for X in mats]
        present = patterns["X0"] | patterns["X1"] if "max" in expr else np.ones((3, 4), bool)
        check_against_numpy(oracle, present, dense_value(expr, dense, 0.5), "float64")
