"""`sp.ops.spmm/sddmm(A, ..., format="bsr", block_size=b)` on the CPU: kernels on the padded
shape (`sp.transform.pad_shape`) with `schedules/bsr.py`, against scipy.

A matrix of random dense blocks at 80% fill, with a shape the block size does not divide and
empty block rows, for block sizes 3, 4 and 8 (one per branch of the schedules: an odd size, the
whole block unrolled, one row of the block at a time; 2 and 6 take the same code paths), and 2
with int64/float64. One kernel per operator and block size: the width stays a run-time value,
so widths 1, 5 and 33 share it (each compile costs 3-9 s).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import sparsetir_py as sp
from sparsetir_py.ops.kernels import KERNELS


def block_matrix(b: int, seed: int = 0, idtype=np.int32, dtype=np.float32) -> scipy.sparse.csr_matrix:
    """13 x 11 blocks of b x b, three per block row (block rows 2 and 7 empty), 80% of their
    cells stored, cut to (13 b - 1) x (11 b - 2): the last block row and column are partial."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((13 * b, 11 * b))
    for io in set(range(13)) - {2, 7}:
        for jo in rng.choice(11, size=3, replace=False):
            dense[io * b : io * b + b, jo * b : jo * b + b] = rng.standard_normal((b, b))
    dense[rng.random(dense.shape) > 0.8] = 0
    A = scipy.sparse.csr_matrix(dense[: 13 * b - 1, : 11 * b - 2].astype(dtype))
    A.indices, A.indptr = A.indices.astype(idtype), A.indptr.astype(idtype)
    return A


def check(A, b: int, widths=(1, 5, 33)) -> None:
    rng = np.random.default_rng(b)
    tol = 1e-4 if A.dtype == np.float32 else 1e-10
    for feat in widths:
        B = rng.standard_normal((A.shape[1], feat)).astype(A.dtype)
        C = sp.ops.spmm(A, B, format="bsr", block_size=b)
        assert C.shape == (A.shape[0], feat) and C.dtype == A.dtype
        np.testing.assert_allclose(C, A @ B, rtol=tol, atol=tol)
        X = rng.standard_normal((A.shape[0], feat)).astype(A.dtype)
        Y = rng.standard_normal((A.shape[1], feat)).astype(A.dtype)
        S = sp.ops.sddmm(A, X, Y, format="bsr", block_size=b)
        assert (S.indptr == A.indptr).all() and (S.indices == A.indices).all()
        np.testing.assert_allclose(S.data, A.multiply(X @ Y.T).tocsr().data, rtol=tol, atol=tol)


@pytest.mark.parametrize("b", [3, 4, pytest.param(8, marks=pytest.mark.slow)])  # odd b, whole block, row by row
def test_bsr_against_scipy(b):
    check(block_matrix(b), b)


def test_bsr_int64_float64():
    check(block_matrix(2, seed=1, idtype=np.int64, dtype=np.float64), 2, widths=(4,))


def test_bsr_without_nonzeros_and_with_out():
    empty = scipy.sparse.csr_matrix((9, 7), dtype=np.float32)
    B = np.ones((7, 5), np.float32)
    assert not sp.ops.spmm(empty, B, format="bsr", block_size=4).any()
    assert sp.ops.sddmm(empty, np.ones((9, 5), np.float32), B, format="bsr", block_size=4).nnz == 0
    A = block_matrix(4, seed=2)  # 51 rows: C is computed with 52, `out` gets the first 51
    B = np.random.default_rng(2).standard_normal((A.shape[1], 5)).astype(np.float32)
    out = np.full((A.shape[0], 5), np.nan, np.float32)
    assert sp.ops.spmm(A, B, format="bsr", block_size=4, out=out) is out
    np.testing.assert_allclose(out, A @ B, rtol=1e-4, atol=1e-4)


def test_bsr_kernel_is_the_block_product_without_guards():
    A = block_matrix(4)
    B = np.ones((A.shape[1], 8), np.float32)
    sp.ops.spmm(A, B, format="bsr", block_size=4)
    sources = [k.source for key, k in KERNELS.items() if key.op == "spmm" and "block_size', 4" in key.format]
    assert sources
    source = sources[-1]
    assert "m_bsr" in source and " < m " not in source and " < n:" not in source  # no padding guard
    assert source.count('# block "csrmm_bsr1') == 16  # the 4 x 4 cells unrolled


@pytest.mark.parametrize("bad", [0, -2, 2.5])
def test_bsr_bad_block_size(bad):
    A = block_matrix(2)
    with pytest.raises(sp.SparseTIRError, match="block_size"):
        sp.ops.spmm(A, np.ones((A.shape[1], 2), np.float32), format="bsr", block_size=bad)
