"""Scripts that declare a buffer by MLIR encoding: `T.match_sparse_buffer(a, (I, J), dtype, encoding=enc)`.

The script computes SpMM over the dimensions; the frontend stores `A` on the encoding's levels.
Each format (CSR, CSC, DCSR, COO, BSR, ELL, 2:4) compiles for the CPU and runs with
`sp.to_storage(A, enc)` as its keyword arguments, against scipy and the reference interpreter,
on edge-case, real and drawn matrices. The expansion prints and parses back equal, and CSR
expands to the axes a hand-written CSR script declares.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as hs
from strategies import csr_matrices, edge_matrices

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.data import load_matrix

E = "#sparse_tensor.encoding<{ map = %s }>"
FORMATS = {
    "csr": E % "(i, j) -> (i : dense, j : compressed)",
    "csc": E % "(i, j) -> (j : dense, i : compressed)",
    "dcsr": E % "(i, j) -> (i : compressed, j : compressed)",
    "coo": E % "(i, j) -> (i : compressed(nonunique), j : singleton)",
    "bsr": E % "(i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
    "ell": E % "[c](i, j) -> (c * 4 * i : dense, i : dense, j : compressed)",
    "nv24": E % "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4)",
}


def spmm_script(enc, dtype: str = "float32"):
    """C = A @ B with A declared by `enc` (captured from this scope)."""

    @T.prim_func
    def spmm(a: T.handle, b: T.handle, c: T.handle, m: T.int32, n: T.int32, feat: T.int32):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        K = T.dense_fixed(feat)
        A = T.match_sparse_buffer(a, (I, J), dtype, encoding=enc)
        B = T.match_sparse_buffer(b, (J, K), dtype)
        C = T.match_sparse_buffer(c, (I, K), dtype)
        with T.sp_iter([I, J, K], "SRS", "spmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return spmm


@functools.cache
def kernel(fmt: str, dtype: str = "float32"):
    func = spmm_script(sp.parse_encoding(FORMATS[fmt]), dtype)
    return func, sp.compile(func, "cpu")


def fit(A: scipy.sparse.csr_matrix, fmt: str) -> scipy.sparse.csr_matrix:
    """`A` made storable by `fmt`: at most 4 per row for ELL, 2 of every 4 for 2:4."""
    if fmt not in ("ell", "nv24"):
        return A
    dense = A.toarray()
    for i in range(dense.shape[0]):
        if fmt == "ell":
            dense[i, np.flatnonzero(dense[i])[4:]] = 0
        else:
            for g in range(0, dense.shape[1], 4):
                dense[i, g + np.flatnonzero(dense[i, g : g + 4])[2:]] = 0
    return scipy.sparse.csr_matrix(dense.astype(A.dtype))


def check(fmt: str, A, feat: int = 3, dtype: str = "float32", interpret: bool = True):
    A = fit(scipy.sparse.csr_matrix(A, dtype=dtype), fmt)
    func, kern = kernel(fmt, dtype)
    m, n = A.shape
    st = sp.to_storage(A, FORMATS[fmt])
    rng = np.random.default_rng(0)
    B = rng.standard_normal((n, feat)).astype(dtype)
    expected = A @ B
    tol = 1e-4 if dtype == "float32" else 1e-10
    C = np.full((m, feat), 7, dtype=dtype)  # stale values: the init must overwrite every row
    kern(**st, b=B, c=C, m=m, n=n, feat=feat)
    np.testing.assert_allclose(C, expected, rtol=tol, atol=tol)
    if interpret:
        C2 = np.full((m, feat), 7, dtype=dtype)
        sp.interpret(func, **st, b=B, c=C2, m=m, n=n, feat=feat)
        np.testing.assert_allclose(C2, expected, rtol=tol, atol=tol)


EDGE = {k: v for k, v in edge_matrices().items() if 0 not in v.shape}


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name", list(EDGE))
def test_spmm_edge_matrices(fmt, name):
    check(fmt, EDGE[name])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_spmm_real_matrix(fmt):
    A = load_matrix("karate")
    check(fmt, A, feat=8, interpret=False)


@pytest.mark.parametrize("fmt", ["csr", "coo", "bsr", "nv24"])
def test_spmm_float64(fmt):
    A = scipy.sparse.random(9, 11, density=0.3, random_state=4, format="csr")
    check(fmt, A, dtype="float64")


@settings(max_examples=20, deadline=None)
@given(A=csr_matrices(max_rows=9, max_cols=10), fmt=hs.sampled_from(list(FORMATS)))
def test_spmm_drawn(A, fmt):
    """Drawn shapes and densities (empty rows, all-zero, 1x1, int64 indices of the input)."""
    if 0 in A.shape:
        return
    check(fmt, A, interpret=False)


def test_expansion_prints_and_parses_back():
    for fmt, text in FORMATS.items():
        func = spmm_script(sp.parse_encoding(text))
        sp.verify(func)
        again = sp.from_script(func.script())
        assert sp.structural_equal(func, again), fmt


@T.prim_func
def csr_by_hand(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    m: T.int32,
    n: T.int32,
    feat: T.int32,
    a_pos1: T.handle,
    a_crd1: T.handle,
    a_nnz1: T.int64,
):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    IL = T.dense_fixed(T.cast(m, "int64"), "int64")
    JL = T.sparse_variable(IL, (T.cast(n, "int64"), a_nnz1), (a_pos1, a_crd1), "int64")
    A = T.match_sparse_buffer(a, (IL, JL), "float32")
    B = T.match_sparse_buffer(b, (J, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    with T.sp_iter([IL, JL, K], "SRS", "spmm") as [i, j, k]:
        with T.init():
            C[T.cast(i, "int32"), k] = 0.0
        C[T.cast(i, "int32"), k] = C[T.cast(i, "int32"), k] + A[i, j] * B[T.cast(j, "int32"), k]


def test_csr_lowers_to_the_hand_written_axes():
    """CSR by encoding is SparseTIR's CSR: a dense row level and a sparse_variable column level."""
    sp.assert_structural_equal(spmm_script(sp.parse_encoding(FORMATS["csr"])), csr_by_hand)


def test_encoding_spellings():
    """Encoding text, `T.encoding(text)` and a captured parsed encoding declare the same buffer."""

    @T.prim_func
    def by_text(a: T.handle, m: T.int32, n: T.int32):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        A = T.match_sparse_buffer(
            a, (I, J), "float32", encoding="#sparse_tensor.encoding<{ map = (i, j) -> (j : dense, i : compressed) }>"
        )

    @T.prim_func
    def by_helper(a: T.handle, m: T.int32, n: T.int32):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        A = T.match_sparse_buffer(
            a,
            (I, J),
            "float32",
            encoding=T.encoding("#sparse_tensor.encoding<{ map = (i, j) -> (j : dense, i : compressed) }>"),
        )

    csc = sp.parse_encoding(FORMATS["csc"])

    @T.prim_func
    def by_object(a: T.handle, m: T.int32, n: T.int32):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        A = T.match_sparse_buffer(a, (I, J), "float32", encoding=csc)

    assert sp.structural_equal(by_text, by_helper) and sp.structural_equal(by_text, by_object)
    assert [p.name for p in by_text.params] == ["a", "m", "n", "a_pos1", "a_crd1", "a_nnz1"]
    levels = by_text.buffers[0].axes
    assert [ax.kind for ax in levels] == ["dense_fixed", "sparse_variable"]


def test_widths_32_give_int32_axes_and_arrays():
    enc = sp.parse_encoding(E % "(i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32")
    func = spmm_script(enc)
    assert {ax.idtype for ax in func.buffers[0].axes} == {"int32"}
    A = scipy.sparse.random(6, 5, density=0.4, random_state=1, format="csr", dtype=np.float32)
    st = sp.to_storage(A, enc)
    assert st.positions[1].dtype == np.int32
    B = np.ones((5, 2), dtype=np.float32)
    C = np.zeros((6, 2), dtype=np.float32)
    sp.interpret(func, **st, b=B, c=C, m=6, n=5, feat=2)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)


def test_declared_structure_parameters_are_used():
    """A parameter the user declares under the storage's name is taken, not added again."""

    @T.prim_func
    def f(a: T.handle, a_pos1: T.handle, a_crd1: T.handle, a_nnz1: T.int64, m: T.int32, n: T.int32):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        A = T.match_sparse_buffer(
            a, (I, J), "float32", encoding="#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>"
        )

    assert [p.name for p in f.params] == ["a", "a_pos1", "a_crd1", "a_nnz1", "m", "n"]


def _fails(source: str, message: str):
    with pytest.raises(sp.FrontendError, match=message) as info:
        sp.from_script(source)
    return info.value


HEADER = """
from sparsetir_py import script as T

@T.prim_func
def f(a: T.handle, b: T.handle, m: T.int32, n: T.int32, {extra}):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
"""


def test_errors_are_frontend_errors_at_the_declaration():
    enc = "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compresed) }>"
    err = _fails(
        HEADER.format(extra="x: T.int32") + f'    A = T.match_sparse_buffer(a, (I, J), "float32", encoding="{enc}")\n',
        "did you mean `compressed`",
    )
    assert err.line == 8
    _fails(
        HEADER.format(extra="x: T.int32")
        + '    A = T.match_sparse_buffer(a, (I,), "float32", encoding="'
        + FORMATS["csr"]
        + '")\n',
        "declared over 1 axes, but the encoding has 2 dimensions",
    )
    _fails(
        HEADER.format(extra="ip: T.handle, ix: T.handle, nnz: T.int32")
        + "    S = T.sparse_variable(I, (n, nnz), (ip, ix))\n"
        + '    A = T.match_sparse_buffer(a, (I, S), "float32", encoding="'
        + FORMATS["csr"]
        + '")\n',
        "dense_fixed axes; `S` is sparse_variable",
    )
    for text, message in [
        (E % "(i, j) -> (i : dense, j : compressed), posWidth = 8", "one dtype, int32 or int64"),
        (E % "(i, j) -> (j : compressed, i : compressed), posWidth = 32, crdWidth = 64", "one dtype"),
        (E % "(i, j) -> (i : dense, j : loose_compressed)", "loose_compressed levels are not supported in scripts"),
        (E % "(i, j) -> (i : compressed, j floordiv 2 : dense, j mod 2 : compressed)", "below a dense level"),
        (E % "(i, j) -> (i : dense, i + j : compressed)", "has no inverse"),
    ]:
        _fails(
            HEADER.format(extra="x: T.int32")
            + f'    A = T.match_sparse_buffer(a, (I, J), "float32", encoding="{text}")\n',
            message,
        )
    _fails(
        HEADER.format(extra="x: T.int32") + '    A = T.match_sparse_buffer(a, (I, J), "float32", encoding=3)\n',
        "must be an MLIR encoding or its text",
    )
    _fails(
        HEADER.format(extra="a_pos1: T.int32")
        + '    A = T.match_sparse_buffer(a, (I, J), "float32", encoding="'
        + FORMATS["csr"]
        + '")\n',
        "`a_pos1` must be T.handle",
    )


def test_iteration_must_walk_the_dimensions():
    source = (
        HEADER.format(extra="x: T.int32")
        + '    A = T.match_sparse_buffer(a, (I, J), "float32", encoding="'
        + FORMATS["csr"]
        + '")\n'
        + '    B = T.match_sparse_buffer(b, (I,), "float32")\n'
        + '    with T.sp_iter([I], "S", "rowsum") as [i]:\n'
        + "        B[i] = A[i, 0]\n"
    )
    _fails(source, r"does not iterate \['J'\]")


BSR_2x2 = E % "(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)"


def test_read_at_computed_coordinates():
    """A read of the encoded buffer at other coordinates goes through the map (a lookup)."""

    @T.prim_func
    def transpose_diag(a: T.handle, d: T.handle, n: T.int32):
        I = T.dense_fixed(n)
        J = T.dense_fixed(n)
        A = T.match_sparse_buffer(
            a,
            (I, J),
            "float32",
            encoding=T.encoding(BSR_2x2),
        )
        D = T.match_sparse_buffer(d, (I,), "float32")
        with T.sp_iter([I, J], "SR", "diag") as [i, j]:
            with T.init():
                D[i] = 0.0
            D[i] = D[i] + A[i, j] * A[j, i]

    rng = np.random.default_rng(5)
    dense = (rng.random((5, 5)) < 0.5) * rng.random((5, 5))
    dense = dense.astype(np.float32)
    st = sp.to_storage(dense, BSR_2x2)
    D = np.zeros(5, dtype=np.float32)
    sp.interpret(transpose_diag, **st, d=D, n=5)
    np.testing.assert_allclose(D, (dense * dense.T).sum(axis=1), rtol=1e-5)
    kern = sp.compile(transpose_diag, "cpu")
    D2 = np.zeros(5, dtype=np.float32)
    kern(**st, d=D2, n=5)
    np.testing.assert_allclose(D2, (dense * dense.T).sum(axis=1), rtol=1e-5)
