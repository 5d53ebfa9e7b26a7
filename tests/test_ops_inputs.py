"""`sp.ops` on broken and unusual scipy inputs, and results that never alias an input.

Every corruption of a CSR matrix's arrays (lengths, monotonicity, range, dtype, shape) must raise
`sp.InputError` before any scipy routine sees the arrays (scipy's C++ code crashes or answers
wrongly on them); valid-but-unusual input (unsorted, duplicated, NaN, other formats) must give
scipy's answer. Either way the caller's arrays stay as they were.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py.data import load_matrix

INVALID = [
    "indptr_short",
    "indptr_long",
    "indptr_start",
    "indptr_decreasing",
    "indptr_past_indices",
    "indptr_float",
    "indptr_2d",
    "indices_too_large",
    "indices_negative",
    "indices_float",
    "indices_short",
    "data_short",
    "data_strings",
    "data_complex",
    "shape_huge",
    "shape_negative",
    "coo_row_out_of_range",
    "operand_rows",
    "operand_strings",
]
VALID = ["unsorted", "duplicates", "nan_values", "coo", "csc", "lil", "explicit_zeros", "int64", "extra_storage"]


def corrupt(A: scipy.sparse.csr_matrix, how: str, rng: np.random.Generator):
    """A copy of `A` broken (or made unusual) in one way; scipy's constructor is bypassed where it
    would refuse, by assigning the arrays afterwards."""
    m, n = A.shape
    B = A.copy()
    needs_an_entry = ("indices_too_large", "indices_negative", "indices_short", "data_short", "coo_row_out_of_range")
    if A.nnz == 0 and m == 0 and how in needs_an_entry:
        return None  # nothing stored and no row to store into: this corruption cannot be made
    if how == "indptr_short":
        B.indptr = B.indptr[:-1].copy()
    elif how == "indptr_long":
        B.indptr = np.append(B.indptr, B.indptr[-1]).astype(A.indptr.dtype)
    elif how == "indptr_start":
        B.indptr = B.indptr + 1
    elif how == "indptr_decreasing":
        if B.nnz == 0:
            B.indptr = B.indptr.copy()
            B.indptr[0] = 1 if m else 0
            if m == 0:
                B._shape = (0, n)
                B.indptr = np.array([1], dtype=A.indptr.dtype)
        else:
            k = int(np.argmax(np.diff(B.indptr) > 0))
            B.indptr = B.indptr.copy()
            B.indptr[k + 1] = B.indptr[k] - 1
    elif how == "indptr_past_indices":
        B.indptr = B.indptr.copy()
        B.indptr[-1] = B.indptr[-1] + 3
    elif how == "indptr_float":
        B.indptr = B.indptr.astype(np.float64)
    elif how == "indptr_2d":
        B.indptr = B.indptr.reshape(1, -1)
    elif how == "indices_too_large":
        B.indices = B.indices.copy()
        if B.nnz:
            B.indices[rng.integers(B.nnz)] = n + int(rng.integers(0, 5))
        else:
            B.indptr, B.indices, B.data = _one_entry(m, A.indptr.dtype, n + 1)
    elif how == "indices_negative":
        B.indices = B.indices.copy()
        if B.nnz:
            B.indices[rng.integers(B.nnz)] = -1
        else:
            B.indptr, B.indices, B.data = _one_entry(m, A.indptr.dtype, -1)
    elif how == "indices_float":
        B.indices = B.indices.astype(np.float32)
    elif how == "indices_short":
        if B.nnz == 0:
            B.indptr, B.indices, B.data = _one_entry(m, A.indptr.dtype, 0)
        B.indices = B.indices[:-1].copy()
    elif how == "data_short":
        if B.nnz == 0:
            B.indptr, B.indices, B.data = _one_entry(m, A.indptr.dtype, 0)
        B.data = B.data[:-1].copy()
    elif how == "data_strings":
        B.data = np.array(["x"] * B.nnz, dtype=object)
    elif how == "data_complex":
        B.data = B.data.astype(np.complex128)
    elif how == "shape_huge":
        B._shape = (2**40, 2**40)
    elif how == "shape_negative":
        B._shape = (-1, n)
    elif how == "coo_row_out_of_range":
        B = A.tocoo()
        B.row = B.row.copy() if hasattr(B, "row") else B.row
        if B.nnz:
            B.row[0] = m
        else:
            B = scipy.sparse.coo_matrix((np.ones(1, A.dtype), (np.array([0]), np.array([0]))), shape=(1, 1))
            B.row = np.array([5])
    elif how == "unsorted":
        for r in range(m):
            lo, hi = B.indptr[r], B.indptr[r + 1]
            B.indices[lo:hi] = B.indices[lo:hi][::-1].copy()
            B.data[lo:hi] = B.data[lo:hi][::-1].copy()
        B.has_sorted_indices = False
    elif how == "duplicates":  # every entry stored twice (scipy's product sums them)
        B = scipy.sparse.csr_matrix(
            (np.repeat(A.data, 2), np.repeat(A.indices, 2), A.indptr * 2), shape=A.shape, copy=True
        )
        B.has_canonical_format = False
    elif how == "nan_values":
        B.data = B.data.copy()
        if B.nnz:
            B.data[rng.integers(B.nnz)] = np.nan
    elif how == "coo":
        B = A.tocoo()
    elif how == "csc":
        B = A.tocsc()
    elif how == "lil":
        B = A.tolil()
    elif how == "explicit_zeros":
        B.data = np.zeros_like(B.data)
    elif how == "int64":
        B.indptr, B.indices = B.indptr.astype(np.int64), B.indices.astype(np.int64)
    elif how == "extra_storage":  # arrays longer than indptr[-1]: scipy ignores the tail
        B.indices = np.append(B.indices, np.zeros(3, B.indices.dtype))
        B.data = np.append(B.data, np.full(3, 7, B.data.dtype))
    return B


def _one_entry(m: int, dtype, column: int):
    """Structure arrays with one stored entry in the first row (for an empty matrix with m >= 1)."""
    indptr = np.ones(m + 1, dtype=dtype)
    indptr[0] = 0
    return indptr, np.array([column], dtype=dtype), np.ones(1, np.float32)


def snapshot(*objs) -> list[np.ndarray]:
    arrays = []
    for obj in objs:
        if scipy.sparse.issparse(obj):
            for name in ("indptr", "indices", "data", "row", "col"):
                value = getattr(obj, name, None)
                if isinstance(value, np.ndarray):
                    arrays.append((value, value.copy()))
        elif isinstance(obj, np.ndarray):
            arrays.append((obj, obj.copy()))
    return arrays


def assert_unchanged(snap) -> None:
    for arr, before in snap:
        np.testing.assert_array_equal(arr, before)


def expected(op: str, B, X, Y):
    """scipy's answer on the same (valid) input."""
    A = B.tocsr().copy()
    A.sum_duplicates()
    if op == "spmm":
        return np.asarray(A @ X.astype(np.float64))
    return A.multiply(X.astype(np.float64) @ Y.astype(np.float64).T).tocsr()


def call(op: str, B, X, Y):
    return sp.ops.spmm(B, X) if op == "spmm" else sp.ops.sddmm(B, X, Y)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=12, max_cols=12, value_dtypes=("float32",)), how=st.sampled_from(INVALID + VALID),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_corrupted_inputs_raise_input_error(op, A, how, seed):
    """Only `sp.InputError` for broken arrays, scipy's result for valid-but-unusual ones; the
    caller's arrays are untouched either way."""
    rng = np.random.default_rng(seed)
    m, n = A.shape
    B = corrupt(A, how, rng)
    assume(B is not None)
    X = rng.standard_normal((n if op == "spmm" else m, 3)).astype(np.float32)
    Y = rng.standard_normal((n, 3)).astype(np.float32)
    if how == "operand_rows":
        X = X[1:] if len(X) else np.zeros((1, 3), np.float32)
    elif how == "operand_strings":
        X = np.full(X.shape, "a", dtype=object) if X.size else np.array([["a"]], dtype=object)
    snap = snapshot(B, X, Y)
    if how in VALID:
        got = call(op, B, X, Y)
        want = expected(op, B, X, Y)
        if op == "spmm":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
        else:
            np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-4, atol=1e-4, equal_nan=True)
    else:
        with pytest.raises(sp.InputError):
            call(op, B, X, Y)
    assert_unchanged(snap)


def test_non_monotone_indptr_is_an_input_error_not_a_scipy_crash():
    """The case a user hit: scipy's C++ raised `RuntimeError: vector::_M_default_append`."""
    A = load_matrix("karate").astype(np.float32)
    B = A.copy()
    B.indptr = B.indptr.copy()
    B.indptr[3], B.indptr[4] = B.indptr[4] + 5, B.indptr[3]
    with pytest.raises(sp.InputError, match="non-decreasing"):
        sp.ops.spmm(B, np.ones((A.shape[1], 4), np.float32))


def test_results_never_share_memory_with_inputs():
    """Change every result in place; the inputs stay as they were (scipy's `A.multiply` does the same)."""
    rng = np.random.default_rng(0)
    A = load_matrix("karate").astype(np.float32)
    A.data = rng.standard_normal(A.nnz).astype(np.float32)
    A.data[::7] = 0  # explicit zeros: eliminate_zeros has work to do
    X = rng.standard_normal((A.shape[0], 8)).astype(np.float32)
    Y = rng.standard_normal((A.shape[1], 8)).astype(np.float32)
    snap = snapshot(A, X, Y)
    v = rng.standard_normal(A.shape[1])
    Av = A @ v

    S = sp.ops.sddmm(A, X, Y)
    for result_array in (S.data, S.indices, S.indptr):
        for input_array in (A.data, A.indices, A.indptr, X, Y):
            assert not np.shares_memory(result_array, input_array)
    S.eliminate_zeros()
    S.sort_indices()
    S.indices[:] = 0
    S.indptr[:] = 0
    S.data[:] = -1

    C = sp.ops.spmm(A, X[: A.shape[1]])
    assert not any(np.shares_memory(C, x) for x in (A.data, A.indices, A.indptr, X))
    C[...] = 0

    assert_unchanged(snap)
    np.testing.assert_allclose(A @ v, Av)


@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0), (3, 4)])
def test_spmm_result_is_fresh_on_degenerate_shapes(shape):
    A = scipy.sparse.csr_matrix(shape, dtype=np.float32)
    B = np.ones((shape[1], 2), np.float32)
    C = sp.ops.spmm(A, B)
    assert C.shape == (shape[0], 2) and not np.shares_memory(C, B)
    np.testing.assert_array_equal(C, 0)
