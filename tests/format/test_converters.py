"""Format converters against scipy: every part put back together gives the matrix again.

Each converter's arrays are turned back into a dense matrix independently of the compiler
(numpy only) and compared with `A.toarray()`: BSR (block shapes not dividing the matrix),
hyb / ELL buckets (column parts, split rows in layers, padding at columns past the matrix),
padding. Structure arrays are sorted and unique where the formats declare them, and their
dtypes follow `idtype`.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.format import converters as fc


def dense_of_bsr(arrays, shape, b):
    out = np.zeros((arrays["m"] * b, arrays["n"] * b))
    rows = np.repeat(np.arange(arrays["m"]), np.diff(arrays["indptr"]))
    for k, (r, c) in enumerate(zip(rows, arrays["indices"])):
        out[r * b : (r + 1) * b, c * b : (c + 1) * b] += arrays["a"][k]
    return out[: shape[0], : shape[1]]


def dense_of_parts(parts, shape):
    out = np.zeros((shape[0], shape[1] + max((p["n"] - shape[1] for p in parts), default=0)))
    for p in parts:
        width = p["n"] - shape[1]
        cols = np.asarray(p["cols"]).reshape(-1, width) if width else np.zeros((p["nrows"], 0), int)
        vals = np.asarray(p["a"]).reshape(-1, width) if width else np.zeros((p["nrows"], 0))
        np.add.at(out, (np.repeat(p["rows"], width), cols.reshape(-1)), vals.reshape(-1))
    assert not out[:, shape[1] :].any(), "padding must hold 0"
    return out[:, : shape[1]]


def check_part_structure(p):
    """Within a layer, rows strictly increase; within a row, columns strictly increase."""
    for layer in range(p["layers"]):
        rows = p["rows"][p["indptr"][layer] : p["indptr"][layer + 1]]
        assert (np.diff(rows.astype(np.int64)) > 0).all()
    cols = np.asarray(p["cols"])
    if p["nrows"]:
        cols = cols.reshape(p["nrows"], -1)
        assert (np.diff(cols.astype(np.int64), axis=1) > 0).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=25, max_cols=25), b=st.integers(1, 5))
def test_bsr_reconstructs(A, b):
    arrays = fc.to_bsr(A, b)
    assert arrays["a"].shape == (arrays["nnz"], b, b)
    assert arrays["indices"].dtype == A.indices.dtype
    np.testing.assert_array_equal(dense_of_bsr(arrays, A.shape, b), A.toarray())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    A=csr_matrices(max_rows=25, max_cols=25),
    buckets=st.sampled_from([[1], [2], [1, 2, 4], [1, 4], [8], [1, 2, 4, 8, 16, 32]]),
    parts=st.integers(1, 3),
)
def test_hyb_reconstructs(A, buckets, parts):
    out = fc.to_ell_parts(A, buckets, parts)
    assert len(out) == parts * len(buckets)
    for p in out:
        check_part_structure(p)
        assert p["rows"].dtype == A.indices.dtype
    np.testing.assert_array_equal(dense_of_parts(out, A.shape), A.toarray())
    assert sum(int((np.asarray(p["cols"]) < A.shape[1]).sum()) for p in out) == A.nnz  # a partition


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=25, max_cols=25), pad=st.integers(1, 6))
def test_padding_reconstructs(A, pad):
    p = fc.to_padded(A, pad)
    lengths = np.diff(p["indptr"])
    assert (lengths % pad == 0).all()
    padded = scipy.sparse.csr_matrix((p["a"], p["indices"], p["indptr"]), shape=(p["m"], p["n"]))
    assert padded.has_sorted_indices
    np.testing.assert_array_equal(padded.toarray()[:, : A.shape[1]], A.toarray())
    assert not padded.toarray()[:, A.shape[1] :].any()


def test_long_rows_split_into_layers():
    A = load_matrix("karate")
    longest = int(np.diff(A.indptr).max())
    out = fc.to_ell_parts(A, [1, 2, 4], 1)
    assert out[-1]["layers"] == -(-longest // 4) or out[-1]["layers"] == longest // 4
    np.testing.assert_array_equal(dense_of_parts(out, A.shape), A.toarray())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda A: fc.to_bsr(A, 0), "block_size"),
        (lambda A: fc.to_ell_parts(A, [3], 1), "powers of two"),
        (lambda A: fc.to_ell_parts(A, [2, 2], 1), "powers of two"),
        (lambda A: fc.to_ell_parts(A, [2], 0), "num_col_parts"),
        (lambda A: fc.to_padded(A, -1), "pad_size"),
        (lambda A: fc.to_bsr(np.eye(3), 2), "scipy sparse"),
        (lambda A: fc.to_bsr(A, 2, idtype="int16"), "int32 or int64"),
    ],
)
def test_converter_errors(call, message):
    with pytest.raises(sp.FormatError, match=message):
        call(load_matrix("karate"))
