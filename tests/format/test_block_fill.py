"""`sp.format.block_fill`: the fill of BSR's stored blocks, exact on all block rows and estimated
from a sample, against the blocks `to_bsr` stores."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import sparsetir_py as sp
from sparsetir_py.format import block_fill, to_bsr


def exact(A, b: int) -> float:
    d = to_bsr(A, b)
    return A.nnz / (d["nnz"] * b * b) if d["nnz"] else 0.0


@pytest.mark.parametrize("b", [2, 3, 4])
def test_all_block_rows_is_exact(b):
    cora = sp.data.load_matrix("cora")
    A = scipy.sparse.random(37, 23, density=0.2, format="csr", random_state=b)  # rectangular, partial blocks
    A = scipy.sparse.diags(np.r_[np.ones(5), np.zeros(4), np.ones(28)]) @ A  # rows 5-8 empty
    A = A.tocsr()
    A.eliminate_zeros()
    A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    assert A[5:9].nnz == 0
    for M in (cora, A):
        assert block_fill(M, b, sample=None) == pytest.approx(exact(M, b), rel=1e-12)
        assert block_fill(M, b, sample=10**9) == pytest.approx(exact(M, b), rel=1e-12)
    assert block_fill(scipy.sparse.csr_matrix((7, 5)), b) == 0.0
    assert block_fill(scipy.sparse.csr_matrix((0, 0)), b) == 0.0


def test_sample_estimates_the_fill():
    rng = np.random.default_rng(0)
    dense_blocks = scipy.sparse.kron(scipy.sparse.random(3000, 3000, density=0.002, random_state=1), np.ones((4, 4)))
    A = dense_blocks.tocsr()
    A.data[rng.random(A.nnz) > 0.75] = 0  # about 75% of each block's cells stored
    A.eliminate_zeros()
    assert exact(A, 4) == pytest.approx(0.75, abs=0.01)
    assert block_fill(A, 4, sample=256) == pytest.approx(exact(A, 4), abs=0.03)
    assert block_fill(A, 4, sample=256, seed=1) == pytest.approx(exact(A, 4), abs=0.03)
    assert block_fill(A, 1) == 1.0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_sample_or_block_size(bad):
    A = sp.data.load_matrix("karate")
    with pytest.raises(sp.FormatError, match="sample"):
        block_fill(A, 2, sample=bad)
    if not isinstance(bad, bool):
        with pytest.raises(sp.FormatError, match="block_size"):
            block_fill(A, bad)
