"""Padding never enters arithmetic on real values: a padded slot of BSR, ELL, hyb or padding holds
0, and 0 * inf is NaN, so an inf or NaN in the dense operand must give exactly what scipy gives
(NaN only where A stores an entry that meets it), in every format, for SpMM and SDDMM.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py.ops import parts

FORMATS = {
    "bsr": {"block_size": 3},
    "ell": {"buckets": [1, 2, 4, 8]},
    "hyb": {"num_col_parts": 2, "buckets": [1, 2, 4, 8]},
    "padding": {"pad_size": 4},
}


def _int64(A):
    """A with int64 indices: with float64 values, the dtype pair `test_ops_formats.py` compiles
    every format's kernels in, so that the kernels are shared (a decomposed kernel compiles in
    10-20 s). scipy's constructor narrows int64 indices, hence the assignment."""
    A = scipy.sparse.csr_matrix(A)
    A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    return A


def _reference(A, B):
    """scipy's product in float64 (NaN where a stored entry meets an inf or a NaN)."""
    return np.asarray(A.astype(np.float64) @ B.astype(np.float64))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_identity_with_an_inf_row(fmt):
    """The issue's case: eye(2), B = [[1], [inf]] is [1, inf] (BSR gave [nan, inf])."""
    A = _int64(np.eye(2))
    B = np.array([[1.0], [np.inf]])
    np.testing.assert_array_equal(sp.ops.spmm(A, B, format=fmt, **FORMATS[fmt]), [[1.0], [np.inf]])
    np.testing.assert_array_equal(sp.ops.spmm(A, B[:, 0], format=fmt, **FORMATS[fmt]), [1.0, np.inf])


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_padding_never_meets_an_inf_row(fmt):
    """Every row of B but one is finite; the padded slots of a row with few entries read the
    infinite row's neighbours and, through BSR's block cells, the row itself."""
    A = scipy.sparse.csr_matrix(
        np.array([[1, 0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 3, 0, 0, 0], [4, 5, 6, 0, 0]]), dtype=np.float32
    )
    for bad in range(A.shape[1]):
        for value in (np.inf, -np.inf, np.nan):
            B = np.arange(A.shape[1] * 3, dtype=np.float32).reshape(-1, 3)
            B[bad, 1] = value
            C = sp.ops.spmm(A, B, format=fmt, **FORMATS[fmt])
            np.testing.assert_array_equal(C, _reference(A, B).astype(np.float32))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_out_and_threads_with_a_nonfinite_operand(fmt):
    A = _int64(scipy.sparse.random(9, 7, density=0.3, format="csr", random_state=3))
    B = np.ones((7, 2))
    B[4, 0] = np.inf
    out = np.empty((9, 2))
    assert sp.ops.spmm(A, B, format=fmt, out=out, threads=1, **FORMATS[fmt]) is out
    np.testing.assert_array_equal(out, _reference(A, B))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@fuzz(12)
@given(
    A=csr_matrices(max_rows=12, max_cols=12, value_dtypes=("float64",), index_dtypes=("int64",)),
    feat=st.sampled_from([1, 3]),
    data=st.data(),
)
def test_nonfinite_operands_on_drawn_matrices(fmt, A, feat, data):
    B = np.random.default_rng(feat).standard_normal((A.shape[1], feat)).astype(A.dtype)
    if B.size:
        cells = data.draw(st.lists(st.integers(0, B.size - 1), max_size=3))
        values = data.draw(
            st.lists(st.sampled_from([np.inf, -np.inf, np.nan]), min_size=len(cells), max_size=len(cells))
        )
        B.reshape(-1)[cells] = values
    C = sp.ops.spmm(A, B, format=fmt, **FORMATS[fmt])
    expected = _reference(A, B)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isnan(C), np.isnan(expected))
    np.testing.assert_array_equal(C[~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)])
    tol = 1e-4 if A.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(C[finite], expected[finite], rtol=tol, atol=tol)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_sddmm_padding_is_not_in_the_output(fmt):
    """SDDMM's padded slots compute values that are dropped: inf in X or Y only reaches the
    stored entries of A whose row or column holds it."""
    A = _int64(np.array([[1, 0, 0, 2], [0, 0, 0, 0], [0, 3, 0, 0]], dtype=np.float64))
    X = np.ones((3, 2))
    Y = np.ones((4, 2))
    Y[2, 0] = np.inf  # column 2 stores nothing: no stored entry meets it
    X[2, 1] = np.nan  # row 2 stores (2, 1): that entry is NaN
    S = sp.ops.sddmm(A, X, Y, format=fmt, **FORMATS[fmt])
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    expected = A.data * np.einsum("ek,ek->e", X[rows], Y[A.indices])
    np.testing.assert_array_equal(S.indptr, A.indptr)
    np.testing.assert_array_equal(S.indices, A.indices)
    np.testing.assert_array_equal(S.data, expected)


def test_finite_operand_check_is_chunked(monkeypatch):
    """The check reads B in chunks and finds a non-finite value in any of them."""
    monkeypatch.setattr(parts, "FINITE_CHUNK", 4)
    B = np.zeros((5, 3))
    assert parts.all_finite(B)
    B[4, 2] = np.nan
    assert not parts.all_finite(B)
    assert parts.all_finite(np.zeros((0, 3)))


def test_rules_that_differ_by_dtype_are_a_format_error():
    """sp.ops numbers the nonzeros with the float64 rules and builds the kernel from the
    operands' ones: a rule file whose format changes with the values' dtype is refused."""
    import types

    import format_rules

    module = types.ModuleType("by_dtype")
    module.rules = lambda dtype="float32", idtype="int32": format_rules.bsr.rules(
        block_size=2 if dtype == "float64" else 4, dtype=dtype, idtype=idtype
    )
    A = scipy.sparse.csr_matrix(np.eye(4, dtype=np.float32))
    with pytest.raises(sp.FormatError, match="another format"):
        sp.ops.spmm(A, np.ones((4, 2), np.float32), format=module)
