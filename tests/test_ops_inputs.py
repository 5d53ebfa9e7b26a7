"""`sp.ops` on broken and unusual scipy inputs, and results that never alias an input.

Every corruption of a CSR matrix's arrays (lengths, monotonicity, range, dtype, shape) must raise
`sp.InputError` before any scipy routine sees the arrays (scipy's C++ code crashes or answers
wrongly on them); valid-but-unusual input (unsorted, duplicated, NaN, other formats and index
dtypes) must give the answer of the dense matrix it stores. Either way the caller's arrays stay
as they were, and a result shares no memory with them. CPU only (CUDA is tested elsewhere).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.operands import STRUCTURES

# Corruptions of the sparse matrix that must raise sp.InputError.
INVALID = [
    "indptr_short",
    "indptr_long",
    "indptr_start",
    "indptr_decreasing",
    "indptr_negative_end",
    "indptr_past_indices",
    "indptr_float",
    "indptr_2d",
    "indptr_list",
    "indices_too_large",
    "indices_negative",
    "indices_float",
    "indices_short",
    "data_short",
    "data_2d",
    "data_strings",
    "data_complex",
    "cached_then_data_short",
    "cached_then_data_complex",
    "shape_huge",
    "shape_huge_columns_width0",
    "shape_negative",
    "shape_float",
    "shape_3d",
    "coo_row_out_of_range",
    "coo_one_coordinate",
    "lil_ragged_row",
    "bsr_index_out_of_range",
]
# Broken dense operands (the sparse matrix is valid).
INVALID_OPERANDS = [
    "operand_rows",
    "operand_strings",
    "operand_ragged",
    "operand_complex",
    "operand_3d",
    "operand_sparse",
    "operand_width_mismatch",
]
# Valid-but-unusual sparse matrices: the result of the dense matrix they store.
VALID = [
    "unsorted",
    "stale_sorted_flag",
    "duplicates",
    "nan_values",
    "explicit_zeros",
    "int64",
    "uint_indices",
    "int16_indices",
    "mixed_index_dtypes",
    "big_endian",
    "strided",
    "extra_storage",
    "float16_values",
    "bool_values",
    "int_values",
    "csr_array",
    "coo",
    "csc",
    "bsr",
    "lil",
    "dok",
    "dia",
]
VALID_OPERANDS = ["zero_width", "float64_operands", "nested_lists", "fortran_order"]
# Valid inputs whose sddmm result has exactly the original (canonical) matrix's structure.
SAME_STRUCTURE = set(VALID) - {"lil", "dok", "dia", "bsr"}
MAX_INDEX = np.iinfo(np.int32).max


def _rows(A) -> np.ndarray:
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


def _with_values(A: sps.csr_matrix, values: np.ndarray) -> tuple[sps.csr_matrix, np.ndarray]:
    """A copy of (canonical) `A` storing `values`, and the dense matrix it stands for."""
    B = A.copy()
    B.data = values
    dense = np.zeros(A.shape)
    dense[_rows(A), A.indices] = values.astype(np.float64)
    return B, dense


def corrupt(A: sps.csr_matrix, how: str, rng: np.random.Generator, op: str):
    """(B, dense): `A` broken or made unusual in one way, and for a valid B the dense matrix it
    stores (None for a broken one); None when this corruption cannot be made from `A`. scipy's
    constructor is bypassed where it would refuse, by assigning the arrays afterwards."""
    m, n = A.shape
    dense = A.toarray().astype(np.float64)
    B = A.copy()
    needs_a_row = {"indices_too_large", "indices_negative", "indices_short", "data_short", "indptr_negative_end"}
    if how in needs_a_row and A.nnz == 0 and m == 0:
        return None  # nothing stored and no row to store into
    if how in needs_a_row and A.nnz == 0:
        B.indptr, B.indices, B.data = _one_entry(m, A.indptr.dtype, 0)
    if how.startswith("cached_then") and A.nnz == 0:
        return None
    if how == "indptr_short":
        B.indptr = B.indptr[:-1].copy()
    elif how == "indptr_long":
        B.indptr = np.append(B.indptr, B.indptr[-1]).astype(A.indptr.dtype)
    elif how == "indptr_start":
        B.indptr = B.indptr + 1
    elif how == "indptr_decreasing":
        if m == 0:
            B.indptr = np.array([1], dtype=A.indptr.dtype)  # the only entry, not 0
        elif B.nnz == 0:
            B.indptr = B.indptr.copy()
            B.indptr[0] = 1
        else:
            k = int(np.argmax(np.diff(B.indptr) > 0))
            B.indptr = B.indptr.copy()
            B.indptr[k + 1] = B.indptr[k] - 1
    elif how == "indptr_negative_end":
        B.indptr = B.indptr.copy()
        B.indptr[-1] = -1
    elif how == "indptr_past_indices":
        B.indptr = B.indptr.copy()
        B.indptr[-1] = B.indptr[-1] + 3
    elif how == "indptr_float":
        B.indptr = B.indptr.astype(np.float64)
    elif how == "indptr_2d":
        B.indptr = B.indptr.reshape(1, -1)
    elif how == "indptr_list":
        B.indptr = B.indptr.tolist()
    elif how == "indices_too_large":
        B.indices = B.indices.copy()
        B.indices[rng.integers(B.nnz)] = n + int(rng.integers(0, 5))
    elif how == "indices_negative":
        B.indices = B.indices.copy()
        B.indices[rng.integers(B.nnz)] = -1
    elif how == "indices_float":
        B.indices = B.indices.astype(np.float32)
    elif how == "indices_short":
        B.indices = B.indices[:-1].copy()
    elif how == "data_short":
        B.data = B.data[:-1].copy()
    elif how == "data_2d":
        B.data = B.data.reshape(1, -1)
    elif how == "data_strings":
        B.data = np.array(["x"] * B.nnz, dtype=object)
    elif how == "data_complex":
        B.data = B.data.astype(np.complex128)
    elif how.startswith("cached_then"):
        X, Y = _operands(A, op, rng)
        call(op, B, X, Y)  # checks and records the structure; the values are replaced afterwards
        B.data = B.data[:-1].copy() if how.endswith("short") else B.data.astype(np.complex64)
    elif how == "shape_huge":
        B._shape = (2**40, 2**40)
    elif how == "shape_huge_columns_width0":  # fits the arrays (and int64 indices), not int32 sizes
        B._shape = (m, 2**40)
    elif how == "shape_negative":
        B._shape = (-1, n)
    elif how == "shape_float":
        B._shape = (float(m), n)
    elif how == "shape_3d":
        B._shape = (m, n, 1)
    elif how == "coo_row_out_of_range":
        if A.nnz:
            B = A.tocoo()
            B.row[0] = m + int(rng.integers(0, 3))
        else:
            B = sps.coo_matrix((np.ones(1, A.dtype), (np.array([0]), np.array([0]))), shape=(1, 1))
            B.row[0] = 5
    elif how == "coo_one_coordinate":
        B = A.tocoo()
        B.coords = B.coords[:1]
    elif how == "lil_ragged_row":
        if m == 0:
            return None
        B = A.tolil()
        B.rows[0] = [0, 0] if n else [0]
        B.data[0] = [1.0, 2.0, 3.0]
    elif how == "bsr_index_out_of_range":
        if A.nnz == 0:
            return None
        B = A.tobsr(blocksize=(1, 1))
        B.indices = B.indices.copy()
        B.indices[rng.integers(B.nnz)] = n
    # ---- valid: B stores `dense`
    elif how == "unsorted":
        order = np.lexsort((-A.indices.astype(np.int64), _rows(A)))  # each row's entries reversed
        B.indices, B.data = A.indices[order], A.data[order]
        B.has_sorted_indices = False
    elif how == "stale_sorted_flag":  # unsorted, while scipy's cached flags say sorted
        order = np.lexsort((-A.indices.astype(np.int64), _rows(A)))
        B.indices, B.data = A.indices[order], A.data[order]
        B.has_sorted_indices = True
        B.has_canonical_format = True
    elif how == "duplicates":  # every entry stored twice (sums to twice the value)
        B = sps.csr_matrix((np.repeat(A.data, 2), np.repeat(A.indices, 2), A.indptr * 2), shape=A.shape, copy=True)
        B.has_canonical_format = False
        dense = 2 * dense
    elif how == "nan_values":
        if A.nnz:
            values = A.data.copy()
            values[rng.integers(A.nnz)] = np.nan
            B, dense = _with_values(A, values)
    elif how == "explicit_zeros":
        B, dense = _with_values(A, np.zeros_like(A.data))
    elif how == "int64":
        B.indptr, B.indices = A.indptr.astype(np.int64), A.indices.astype(np.int64)
    elif how == "uint_indices":
        dtype = np.uint32 if rng.integers(2) else np.uint64
        B.indptr, B.indices = A.indptr.astype(dtype), A.indices.astype(dtype)
    elif how == "int16_indices":
        B.indptr, B.indices = A.indptr.astype(np.int16), A.indices.astype(np.int16)
    elif how == "mixed_index_dtypes":
        B.indptr, B.indices = A.indptr.astype(np.int64), A.indices.astype(np.int32)
    elif how == "big_endian":
        B.indptr, B.indices = A.indptr.astype(">i4"), A.indices.astype(">i8")
        B.data = A.data.astype(A.data.dtype.newbyteorder(">"))
    elif how == "strided":  # views with a stride of two elements
        B.indptr = np.repeat(A.indptr, 2)[::2]
        B.indices = np.repeat(A.indices, 2)[::2]
        B.data = np.repeat(A.data, 2)[::2]
    elif how == "extra_storage":  # arrays longer than indptr[-1]: scipy ignores the tail
        B.indices = np.append(A.indices, np.zeros(3, A.indices.dtype))
        B.data = np.append(A.data, np.full(3, 7, A.data.dtype))
    elif how == "float16_values":
        B, dense = _with_values(A, A.data.astype(np.float16))
    elif how == "bool_values":
        B, dense = _with_values(A, rng.random(A.nnz) < 0.5)
    elif how == "int_values":
        B, dense = _with_values(A, rng.integers(-3, 4, A.nnz))
    elif how == "csr_array":
        B = sps.csr_array(A)
    elif how in ("coo", "csc", "lil", "dok", "dia"):
        B = A.asformat(how)
    elif how == "bsr":
        B = A.tobsr(blocksize=(1, 1))
    return B, (dense if how in VALID else None)


def _one_entry(m: int, dtype, column: int):
    """Structure arrays with one stored entry in the first row (for an empty matrix with m >= 1)."""
    indptr = np.ones(m + 1, dtype=dtype)
    indptr[0] = 0
    return indptr, np.array([column], dtype=dtype), np.ones(1, np.float32)


def _operands(A, op: str, rng: np.random.Generator, width: int = 3):
    m, n = A.shape
    X = rng.standard_normal((n if op == "spmm" else m, width)).astype(np.float32)
    Y = rng.standard_normal((n, width)).astype(np.float32)
    return X, Y


def break_operand(how: str, X: np.ndarray, Y: np.ndarray, op: str):
    """Operands broken (or made unusual) in one way; the first is B for spmm, X for sddmm."""
    if how == "operand_rows":
        X = X[1:] if len(X) else np.zeros((1, X.shape[1]), X.dtype)
    elif how == "operand_strings":
        X = np.full(X.shape, "a", dtype=object)
    elif how == "operand_ragged":
        X = [[1.0, 2.0], [1.0]]
    elif how == "operand_complex":
        X = X.astype(np.complex64)
    elif how == "operand_3d":
        X = X[..., None]
    elif how == "operand_sparse":
        X = sps.csr_matrix(X)
    elif how == "operand_width_mismatch":  # X and Y of different widths; spmm has one operand: B's rows
        Y = np.zeros((len(Y), Y.shape[1] + 1), Y.dtype)
        if op == "spmm":
            X = np.zeros((len(X) + 1, X.shape[1]), X.dtype)
    elif how == "zero_width":
        X, Y = X[:, :0].copy(), Y[:, :0].copy()
    elif how == "float64_operands":
        X, Y = X.astype(np.float64), Y.astype(np.float64)
    elif how == "nested_lists" and len(X):  # [] would be 1-D: no rows, no width
        X = X.tolist()
    elif how == "fortran_order":
        X, Y = np.asfortranarray(X), np.asfortranarray(Y)
    return X, Y


def snapshot(*objs) -> list[tuple[np.ndarray, np.ndarray]]:
    """(array, copy) for every array of the given matrices (whatever the format: indptr, indices,
    data, COO coords, LIL rows...) and operands."""
    arrays = []
    for obj in objs:
        values = list(vars(obj).values()) if sps.issparse(obj) else [obj]
        for value in values:
            for arr in value if isinstance(value, tuple) else (value,):
                if isinstance(arr, np.ndarray):
                    arrays.append((arr, arr.copy()))
    return arrays


def assert_unchanged(snap) -> None:
    for arr, before in snap:
        if arr.dtype == object:
            assert arr.tolist() == before.tolist()
        else:
            np.testing.assert_array_equal(arr, before)


def assert_no_sharing(result, snap) -> None:
    arrays = [result] if isinstance(result, np.ndarray) else [result.data, result.indices, result.indptr]
    for r in arrays:
        for arr, _ in snap:
            assert not np.shares_memory(r, arr)


def call(op: str, A, X, Y):
    return sp.ops.spmm(A, X) if op == "spmm" else sp.ops.sddmm(A, X, Y)


def check_result(op: str, how: str, A, dense: np.ndarray, got, X, Y) -> None:
    """`got` is the result of the dense matrix `dense` stores; sddmm keeps A's canonical structure."""
    X64 = np.asarray(X, dtype=np.float64)
    if op == "spmm":
        assert isinstance(got, np.ndarray) and got.shape == (A.shape[0], X64.shape[1])
        np.testing.assert_allclose(got, dense @ X64, rtol=1e-4, atol=1e-4, equal_nan=True)
        return
    want = dense * (X64 @ np.asarray(Y, dtype=np.float64).T)  # A.multiply(X @ Y.T), as dense
    assert got.format == "csr" and got.shape == A.shape
    np.testing.assert_allclose(got.toarray(), want, rtol=1e-4, atol=1e-4, equal_nan=True)
    if how in SAME_STRUCTURE:
        np.testing.assert_array_equal(got.indptr, A.indptr)
        np.testing.assert_array_equal(got.indices, A.indices)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    A=csr_matrices(max_rows=12, max_cols=12),
    how=st.sampled_from(INVALID + INVALID_OPERANDS) | st.sampled_from(VALID + VALID_OPERANDS),
    seed=st.integers(0, 2**16),
)
def test_corrupted_inputs_raise_input_error(op, A, how, seed):
    """Only `sp.InputError` for broken arrays, the stored matrix's result for valid-but-unusual
    ones; the caller's arrays are untouched either way and no result aliases them."""
    rng = np.random.default_rng(seed)
    made = corrupt(A, how, rng, op)
    assume(made is not None)
    event("invalid" if how in INVALID + INVALID_OPERANDS else "valid")
    B, dense = made
    if how in INVALID_OPERANDS + VALID_OPERANDS:
        dense = A.toarray().astype(np.float64) if how in VALID_OPERANDS else None
    X, Y = _operands(A, op, rng)
    X, Y = break_operand(how, X, Y, op)
    if how == "shape_huge_columns_width0":
        # operands of the declared shape: zero bytes, valid arrays
        X, Y = np.zeros((2**40 if op == "spmm" else A.shape[0], 0), np.float32), np.zeros((2**40, 0), np.float32)
    snap = snapshot(B, X, Y)
    if dense is not None:
        got = call(op, B, X, Y)
        check_result(op, how, A, dense, got, X, Y)
        assert_no_sharing(got, snap)
    else:
        with pytest.raises(sp.InputError):
            call(op, B, X, Y)
    assert_unchanged(snap)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("indptr_decreasing", "non-decreasing"),
        ("indptr_start", "must start at 0"),
        ("indptr_short", "must have 35 entries"),
        ("indptr_past_indices", "ends at"),
        ("indptr_float", "integer array"),
        ("indices_too_large", r"must lie in \[0, 34\)"),
        ("indices_negative", r"must lie in \[0, 34\)"),
        ("data_short", "but the structure stores"),
        ("data_complex", "complex"),
        ("data_strings", "real numbers"),
        ("shape_huge", "at most 2147483647 rows and columns"),
        ("shape_negative", "invalid shape"),
        ("lil_ragged_row", "column indices but 3 values"),
    ],
)
def test_messages_name_what_is_wrong(how, message):
    A = load_matrix("karate")
    B, _ = corrupt(A, how, np.random.default_rng(0), "spmm")
    with pytest.raises(sp.InputError, match=message):
        sp.ops.spmm(B, np.ones((A.shape[1], 4), np.float32))


def test_non_monotone_indptr_is_an_input_error_not_a_scipy_crash():
    """The case a user hit: scipy's C++ raised `RuntimeError: vector::_M_default_append`."""
    A = load_matrix("karate").astype(np.float32)
    B = A.copy()
    B.indptr = B.indptr.copy()
    B.indptr[3], B.indptr[4] = B.indptr[4] + 5, B.indptr[3]
    for call_op in (lambda: sp.ops.spmm(B, np.ones((A.shape[1], 4), np.float32)),
                    lambda: sp.ops.sddmm(B, np.ones((A.shape[0], 4)), np.ones((A.shape[1], 4)))):  # fmt: skip
        with pytest.raises(sp.InputError, match="non-decreasing"):
            call_op()


def _inputs(kind: str, rng: np.random.Generator):
    """A sparse matrix of one kind (each takes a different path through the checks)."""
    A = load_matrix("karate").astype(np.float32)
    A.data = rng.standard_normal(A.nnz).astype(np.float32)
    A.data[::7] = 0  # explicit zeros: eliminate_zeros has work to do
    if kind == "unsorted":
        order = np.lexsort((-A.indices, _rows(A)))
        A.indices, A.data = A.indices[order], A.data[order]
        A.has_sorted_indices = False
    elif kind == "coo":
        A = A.tocoo()
    elif kind == "extra_storage":
        A.indices = np.append(A.indices, np.zeros(2, A.indices.dtype))
        A.data = np.append(A.data, np.ones(2, A.data.dtype))
    elif kind == "empty":
        A = sps.csr_matrix((0, 5), dtype=np.float32)
    return A


@pytest.mark.parametrize("width", [8, 0])
@pytest.mark.parametrize("kind", ["canonical", "unsorted", "coo", "extra_storage", "empty"])
def test_results_never_share_memory_with_inputs(kind, width):
    """Change every result in place; the inputs stay as they were (scipy's `A.multiply` does the same).
    Each op runs twice: the second call takes the path of a structure checked before."""
    rng = np.random.default_rng(0)
    A = _inputs(kind, rng)
    m, n = A.shape
    X = rng.standard_normal((m, width)).astype(np.float32)
    Y = rng.standard_normal((n, width)).astype(np.float32)
    B = rng.standard_normal((n, width)).astype(np.float32)
    snap = snapshot(A, X, Y, B)
    dense = A.toarray()
    for _ in range(2):
        S = sp.ops.sddmm(A, X, Y)
        assert_no_sharing(S, snap)
        S.eliminate_zeros()
        S.sort_indices()
        S.sum_duplicates()
        S.indices[:] = 0
        S.indptr[:] = 0
        S.data[:] = -1
        C = sp.ops.spmm(A, B)
        assert_no_sharing(C, snap)
        C[...] = 0
        assert_unchanged(snap)
        np.testing.assert_array_equal(A.toarray(), dense)


def test_sddmm_zero_width_keeps_nan_as_scipy():
    """X @ Y.T is all zeros: A.multiply gives NaN * 0 = NaN at a NaN entry, not the kernel's empty sum 0."""
    A = sps.csr_matrix((np.array([np.nan, 2, 0], np.float32), np.array([0, 1, 2]), np.array([0, 3])), shape=(1, 3))
    X, Y = np.zeros((1, 0), np.float32), np.zeros((3, 0), np.float32)
    S = sp.ops.sddmm(A, X, Y)
    np.testing.assert_array_equal(S.toarray(), A.multiply(X @ Y.T).toarray())
    assert S.nnz == 3  # explicit zeros kept


def test_structure_records_do_not_outlive_their_arrays():
    """Each call on a COO matrix records the structure of a temporary CSR; the record goes with it."""
    A = load_matrix("karate").tocoo()
    B = np.ones((A.shape[1], 2), np.float32)
    sp.ops.spmm(A, B)
    gc.collect()
    before = len(STRUCTURES)
    for _ in range(20):
        sp.ops.spmm(A, B)
    gc.collect()
    assert len(STRUCTURES) <= before


@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0), (3, 4)])
def test_spmm_result_is_fresh_on_degenerate_shapes(shape):
    A = sps.csr_matrix(shape, dtype=np.float32)
    for width in (2, 0):
        B = np.ones((shape[1], width), np.float32)
        C = sp.ops.spmm(A, B)
        assert C.shape == (shape[0], width) and not np.shares_memory(C, B)
        np.testing.assert_array_equal(C, 0)


def _kinds_of(A: sps.csr_matrix, rng) -> dict:
    """A in every stored form `as_csr` converts once per structure (and COO with a duplicate,
    which it converts per call)."""
    unsorted = _unsorted(A, rng)
    coo = A.tocoo()
    duplicate = sps.coo_matrix(
        (np.append(coo.data, 1.5), (np.append(coo.row, coo.row[:1]), np.append(coo.col, coo.col[:1]))), shape=A.shape
    )
    return {
        "csc": A.tocsc(),
        "coo": coo,
        "coo_array": sps.coo_array(A),
        "bsr": A.tobsr((2, 3)),
        "bsr_int16": A.tobsr((2, 1)).astype(np.int16),
        "unsorted": unsorted,
        "int64": sps.csr_matrix((A.data, A.indices.astype(np.int64), A.indptr), shape=A.shape),
        "duplicate": duplicate,
    }


def _unsorted(A: sps.csr_matrix, rng) -> sps.csr_matrix:
    """A copy of A with each row's entries in a random order."""
    unsorted = A.copy()
    for i in range(A.shape[0]):
        s, e = unsorted.indptr[i], unsorted.indptr[i + 1]
        p = rng.permutation(e - s)
        unsorted.indices[s:e], unsorted.data[s:e] = unsorted.indices[s:e][p], unsorted.data[s:e][p]
    unsorted.has_sorted_indices = False
    return unsorted


@pytest.mark.parametrize("kind", ["csc", "coo", "coo_array", "bsr", "bsr_int16", "unsorted", "int64", "duplicate"])
def test_converted_inputs_keep_their_structure_and_follow_their_values(kind):
    """`as_csr` of a matrix that is not canonical CSR equals scipy's canonical conversion on every
    call, with the values of that call (changed in place, or replaced), and, where no entry is
    stored twice, the same structure arrays each time (so every cache keyed on them hits)."""
    from sparsetir_py.inputs import canonical, check_matrix, native
    from sparsetir_py.operands import as_csr, reordering

    rng = np.random.default_rng(4)
    dense = np.round(rng.standard_normal((10, 12)) * 4) * (rng.random((10, 12)) < 0.4)
    A = _kinds_of(sps.csr_matrix(dense), rng)[kind]
    first = as_csr(A)
    for step in range(3):
        got, want = as_csr(A), canonical(native(check_matrix(A, "A")))
        assert type(got) is type(want) and got.dtype == want.dtype and got.indices.dtype == want.indices.dtype
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
        assert (got.indices is first.indices) == (kind != "duplicate")
        if step == 0:
            A.data *= 3  # in place
        else:
            A.data = (A.data * -1).astype(A.data.dtype)  # a new array
    assert (reordering(A) is None) == (kind in ("duplicate", "int64"))
    A.data = A.data[:-1]  # one value (BSR: one block) too few for the structure remembered
    with pytest.raises(sp.InputError, match=r"`A.data` has \d+ (entries|blocks)"):
        as_csr(A)


def test_structure_caches_know_views_of_the_same_memory(monkeypatch):
    """`A.T` is a new CSC matrix whose `indices` is a new view of A's each time: the caches keyed
    on structure arrays find what the last `A.T` left (a view's identity is the memory it reads),
    so converting A.T's structure (and a format's decomposition of it) happens once."""
    from sparsetir_py import operands
    from sparsetir_py.operands import StructureCache

    cache = StructureCache()
    owner = np.arange(10)
    cache.put(owner[2:], owner[:3], ("k",), 1)
    assert cache.get(owner[2:], owner[:3], "k") == 1  # new view objects, the same memory
    assert cache.get(owner[3:], owner[:3], "k") is None  # another first byte
    assert cache.get(owner[2::2], owner[:3], "k") is None  # another layout
    assert cache.get(owner[2:].copy(), owner[:3], "k") is None  # another array, the same values
    del owner
    gc.collect()
    assert len(cache) == 0  # the entry went with the memory's owner

    A = load_matrix("cora").astype(np.float32)
    B = np.random.default_rng(1).standard_normal((A.shape[0], 4)).astype(np.float32)
    made = []
    original = operands._reordered
    monkeypatch.setattr(operands, "_reordered", lambda M: made.append(1) or original(M))
    for _ in range(3):
        np.testing.assert_allclose(sp.ops.spmm(A.T, B), A.T @ B, rtol=1e-4, atol=1e-4)
        A.data = A.data * 2  # new values: seen through the next A.T
    assert made == [1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    A=csr_matrices(max_rows=12, max_cols=12),
    kind=st.sampled_from(["csc", "coo", "bsr", "unsorted"]),
    seed=st.integers(0, 99),
)
def test_converted_inputs_equal_scipys_conversion(A, kind, seed):
    """Random matrices (empty rows and matrices, int32/int64, float32/float64) in another format:
    `as_csr` with the structure converted once equals a fresh conversion, call after call."""
    from sparsetir_py.inputs import canonical, check_matrix, native
    from sparsetir_py.operands import as_csr

    rng = np.random.default_rng(seed)
    if kind == "bsr":
        b = 2 if A.shape[0] % 2 == 0 and A.shape[1] % 2 == 0 else 1
        M = A.tobsr((b, b))
    elif kind == "unsorted":
        M = _unsorted(A, rng)
    else:
        M = A.asformat(kind)
    for _ in range(2):
        got, want = as_csr(M), canonical(native(check_matrix(M, "A")))
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
        assert got.dtype == want.dtype and got.indices.dtype == want.indices.dtype
        M.data = rng.standard_normal(M.data.shape).astype(M.data.dtype)
