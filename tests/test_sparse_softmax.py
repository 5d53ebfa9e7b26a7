"""A row-wise sparse softmax that starts its row maximum from `T.min_value(dtype)`, as SparseTIR's
`sparse_softmax` does, through every stage: Stage I, II and III interpreters and the CPU kernel
against numpy, on edge matrices, a shipped graph and rows of values near the dtype's lowest
(where any made-up "very negative" constant would exceed the row's maximum and give NaN).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from strategies import edge_matrices

import sparsetir_py as sp
from sparsetir_py.data import load_matrix

SOFTMAX = """
from sparsetir_py import script as T

@T.prim_func
def softmax(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m, "IDX")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "IDX")
    A = T.match_sparse_buffer(a, (I, J), "VAL")
    B = T.match_sparse_buffer(b, (I, J), "VAL")
    row_max = T.alloc_sparse_buffer((I,), "VAL", "global")
    row_sum = T.alloc_sparse_buffer((I,), "VAL", "global")
    with T.sp_iter([I], "S", "softmax") as [i]:
        with T.sp_iter([J], "R", "row_max") as [j]:
            with T.init():
                row_max[i] = T.min_value("VAL")
            row_max[i] = T.max(row_max[i], A[i, j])
        with T.sp_iter([J], "R", "row_sum") as [j]:
            with T.init():
                row_sum[i] = T.VAL(0)
            row_sum[i] = row_sum[i] + T.exp(A[i, j] - row_max[i])
        with T.sp_iter([J], "S", "row_div") as [j]:
            B[i, j] = T.exp(A[i, j] - row_max[i]) / row_sum[i]
"""


def softmax(idtype: str, dtype: str) -> sp.PrimFunc:
    return sp.from_script(SOFTMAX.replace("IDX", idtype).replace("VAL", dtype))


def reference(A: scipy.sparse.csr_matrix) -> np.ndarray:
    out = np.empty(A.nnz)
    for r in range(A.shape[0]):
        lo, hi = A.indptr[r], A.indptr[r + 1]
        if lo < hi:
            row = A.data[lo:hi].astype(np.float64)
            e = np.exp(row - row.max())
            out[lo:hi] = e / e.sum()
    return out


def args(A) -> dict:
    m, n = A.shape
    return dict(a=A.data, b=np.full(A.nnz, np.nan, A.dtype), indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)


def check_all_stages(A) -> None:
    f1 = softmax(str(A.indices.dtype), str(A.dtype))
    sp.assert_structural_equal(sp.from_script(f1.script()), f1)
    f2 = sp.lower_sparse_iter(f1)
    f3 = sp.lower_sparse_buffer(f2)
    want = reference(A)
    tol = 1e-5 if A.dtype == np.float32 else 1e-12
    for name, runner in [
        ("Stage I", lambda **kw: sp.interpret(f1, **kw)),
        ("Stage II", lambda **kw: sp.interpret(f2, **kw)),
        ("Stage III", lambda **kw: sp.interpret(f3, **kw)),
        ("CPU kernel", sp.compile(f1, "cpu")),
    ]:
        kw = args(A)
        runner(**kw)
        np.testing.assert_allclose(kw["b"], want, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("name", sorted(edge_matrices()))
def test_softmax_on_edge_matrices(name):
    check_all_stages(edge_matrices()[name])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_on_rows_near_the_lowest_value(dtype):
    """Every stored value of row 1 is below -0.9 * |lowest|: only the true lowest value is a
    correct start for the maximum (-3.0e38, say, would exceed them in float32)."""
    lowest = float(np.finfo(dtype).min)
    dense = np.array(
        [[1.0, 0.0, 2.0, 0.0], [0.95 * lowest, 0.99 * lowest, 0.0, 0.9 * lowest], [0.0] * 4, [0.0, -3.0, 0.0, 0.0]]
    )
    A = scipy.sparse.csr_matrix(dense.astype(dtype))
    check_all_stages(A)


def test_softmax_on_a_shipped_graph():
    A = load_matrix("karate", dtype=np.float64, index_dtype=np.int64)
    A.data = np.random.default_rng(0).normal(0, 4, A.nnz)
    check_all_stages(A)
