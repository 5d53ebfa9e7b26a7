"""`sp.ops.spmm(A, B, format=...)`: composable formats end to end through the operator.

Every shipped format (and a user's rule module) against scipy on real graphs and on drawn
matrices (empty rows, empty matrices, one row, rectangular, shapes not divisible by the block,
int64 indices, float64 values); the conversion is cached per structure (new values and new
operands reuse it); bad formats and parameters are `InputError`s. Buckets are fixed here so that
one kernel per format and dtype pair is compiled.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import csr_matrices

import format_rules
import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import parts

#: Index and value dtypes in pairs (int32 with float32, int64 with float64): each pair is one more
#: kernel per format, schedule and operator (a decomposed kernel compiles in 10-20 s); the mixed
#: pairs go through the same casts and are drawn by the CSR tests (`test_ops.py`).
PAIRED = st.sampled_from([("int32", "float32"), ("int64", "float64")])


def paired_matrices(max_rows: int, max_cols: int):
    return PAIRED.flatmap(lambda t: csr_matrices(max_rows, max_cols, value_dtypes=(t[1],), index_dtypes=(t[0],)))


FORMATS = {
    "bsr": {"block_size": 3},
    "ell": {"buckets": [1, 2, 4, 8]},
    "hyb": {"num_col_parts": 2, "buckets": [1, 2, 4, 8]},
    "padding": {"pad_size": 4},
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("graph", ["cora", "lp_afiro"])
def test_formats_on_real_graphs(fmt, graph):
    A = load_matrix(graph).astype(np.float32)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 16)).astype(np.float32)
    C = sp.ops.spmm(A, B, format=fmt, **FORMATS[fmt])
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=paired_matrices(20, 20), feat=st.sampled_from([1, 3, 8]))
def test_formats_on_drawn_matrices(fmt, A, feat):
    # hyb's eight parts compile in ~20 s per dtype pair and schedule: drawn with int64/float64
    # only (cora and lp_afiro run it with int32/float32 in `test_formats_on_real_graphs`).
    assume(fmt != "hyb" or A.dtype == np.float64)
    B = np.random.default_rng(feat).standard_normal((A.shape[1], feat)).astype(A.dtype)
    C = sp.ops.spmm(A, B, format=fmt, **FORMATS[fmt])
    assert C.dtype == A.dtype and C.shape == (A.shape[0], feat)
    tol = 1e-4 if A.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=paired_matrices(18, 18), feat=st.sampled_from([1, 4]))
def test_sddmm_formats_keep_the_structure_of_A(fmt, A, feat):
    """The output moves to the parts' formats and back: A's structure and order, A.multiply's values."""
    assume(fmt != "hyb" or A.dtype == np.float64)  # as in `test_formats_on_drawn_matrices`
    rng = np.random.default_rng(feat)
    X = rng.standard_normal((A.shape[0], feat)).astype(A.dtype)
    Y = rng.standard_normal((A.shape[1], feat)).astype(A.dtype)
    S = sp.ops.sddmm(A, X, Y, format=fmt, **FORMATS[fmt])
    want = A.multiply(X.astype(np.float64) @ Y.astype(np.float64).T).tocsr()
    np.testing.assert_array_equal(S.indptr, A.indptr)
    np.testing.assert_array_equal(S.indices, A.indices)
    tol = 1e-4 if A.dtype == np.float32 else 1e-10
    dense = np.zeros(A.nnz)
    dense[:] = np.asarray(want[np.repeat(np.arange(A.shape[0]), np.diff(A.indptr)), A.indices]).reshape(-1)
    np.testing.assert_allclose(S.data, dense, rtol=tol, atol=tol)
    assert not np.shares_memory(S.indices, A.indices)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_sddmm_formats_on_a_real_graph(fmt):
    A = load_matrix("citeseer").astype(np.float32)
    X = np.random.default_rng(0).standard_normal((A.shape[0], 8)).astype(np.float32)
    S = sp.ops.sddmm(A, X, X, format=fmt, **FORMATS[fmt])
    np.testing.assert_allclose(S.toarray(), A.multiply(X @ X.T).toarray(), rtol=1e-4, atol=1e-4)


def test_conversion_is_cached_per_structure():
    A = load_matrix("cora").astype(np.float32)
    B = np.ones((A.shape[1], 4), np.float32)
    parts.CONVERSIONS.clear()
    sp.ops.spmm(A, B, format="bsr", block_size=2)
    assert len(parts.CONVERSIONS) == 1
    A2 = A.copy()
    A2.indptr, A2.indices = A.indptr, A.indices  # same structure, new values
    A2.data = A.data * 3
    C = sp.ops.spmm(A2, B * 2, format="bsr", block_size=2)
    assert len(parts.CONVERSIONS) == 1  # not converted again
    np.testing.assert_allclose(C, 6 * (A @ np.ones((A.shape[1], 4))), rtol=1e-4)


def test_conversion_facts_are_computed_once():
    """What every call asks of a conversion (whether parts share rows, whether they pad) is
    computed once per structure: the `np.unique` over the parts' rows cost more than the SpMM."""
    A = load_matrix("cora").astype(np.float32)
    conversion = parts.converted(
        format_rules.hyb, A.tocsr(), {"num_col_parts": 2, "buckets": [2, 8]}, "float32", "int32"
    )
    assert conversion.shares_rows and conversion.pads  # column parts share rows; short rows pad
    assert {"shares_rows", "pads"} <= set(vars(conversion))  # cached on the conversion


def test_a_rule_module_as_format():
    A = load_matrix("karate").astype(np.float32)
    B = np.random.default_rng(1).standard_normal((A.shape[1], 5)).astype(np.float32)
    C = sp.ops.spmm(A, B, format=format_rules.padding, pad_size=2)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda A, B: sp.ops.spmm(A, B, format="coo"), "unknown format 'coo'"),
        (lambda A, B: sp.ops.spmm(A, B, format=42), "format must be a name or a rule module"),
        (lambda A, B: sp.ops.spmm(A, B, format="bsr", block_sz=2), "block_sz"),
        (lambda A, B: sp.ops.spmm(A, B, block_size=2), "format 'auto' takes no parameters"),
        (lambda A, B: sp.ops.sddmm(A, B[: A.shape[0]], B, format="csc"), "unknown format 'csc'"),
        (lambda A, B: sp.ops.sddmm(A, B[: A.shape[0]], B, pad_size=2), "format 'auto' takes no parameters"),
    ],
)
def test_format_errors(call, message):
    A = load_matrix("karate").astype(np.float32)
    B = np.ones((A.shape[1], 3), np.float32)
    with pytest.raises(sp.InputError, match=message):
        call(A, B)


def test_bad_format_parameters_are_format_errors():
    A = load_matrix("karate").astype(np.float32)
    with pytest.raises(sp.FormatError, match="powers of two"):
        sp.ops.spmm(A, np.ones((A.shape[1], 2), np.float32), format="ell", buckets=[3])


def test_empty_matrix_in_every_format():
    for fmt, params in FORMATS.items():
        A = scipy.sparse.csr_matrix((5, 4), dtype=np.float32)
        C = sp.ops.spmm(A, np.ones((4, 2), np.float32), format=fmt, **params)
        np.testing.assert_array_equal(C, 0)
