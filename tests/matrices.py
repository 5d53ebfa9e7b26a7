"""Fixed sparse matrices for the tests: edge cases of the input space, and CSR with chosen index
and value dtypes. Needs numpy and scipy only (`tests/gpu` runs on machines without hypothesis);
`strategies.py` re-exports these next to its hypothesis strategies.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse


def make_csr(dense_mask: np.ndarray, values: np.ndarray, idtype: str, dtype: str) -> scipy.sparse.csr_matrix:
    """The CSR matrix storing `values` at the True entries of `dense_mask` (row-major order).

    Stored values may be zero: the structure is the mask, not the values.
    """
    m, n = dense_mask.shape
    rows, cols = np.nonzero(dense_mask)  # row-major, so columns are sorted within each row
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=m), out=indptr[1:])
    A = scipy.sparse.csr_matrix((values[: len(rows)].astype(dtype), cols, indptr), shape=(m, n))
    A.indices = np.ascontiguousarray(cols, dtype=idtype)
    A.indptr = np.ascontiguousarray(indptr, dtype=idtype)
    A.has_sorted_indices = True
    A.has_canonical_format = True
    return A


def edge_matrices() -> dict[str, scipy.sparse.csr_matrix]:
    """Fixed small matrices at the edges of the input space, keyed by a readable id."""
    rng = np.random.default_rng(7)

    def build(mask, idtype="int32", dtype="float32"):
        mask = np.asarray(mask, dtype=bool)
        return make_csr(mask, rng.uniform(-1.0, 1.0, size=int(mask.sum())), idtype, dtype)

    staircase = np.tril(np.ones((6, 5), dtype=bool))
    staircase[2, :] = False  # an empty row in the middle
    return {
        "0x0": build(np.zeros((0, 0))),
        "0x5": build(np.zeros((0, 5))),
        "4x0": build(np.zeros((4, 0))),
        "3x4_no_nnz": build(np.zeros((3, 4)), "int64", "float64"),
        "1x7_full_row": build(np.ones((1, 7)), "int64", "float32"),
        "1x1": build(np.ones((1, 1)), "int32", "float64"),
        "6x5_staircase_int64": build(staircase, "int64", "float64"),
        "9x3_tall_dense": build(np.ones((9, 3))),
        "2x11_last_row_empty": build(np.vstack([np.ones(11), np.zeros(11)]), "int64", "float32"),
    }


def with_types(A: scipy.sparse.csr_matrix, idtype, dtype) -> scipy.sparse.csr_matrix:
    """Canonical CSR `A` with index arrays of `idtype` and values of `dtype` (scipy's constructor
    alone would narrow int64 indices that fit int32)."""
    mask = np.zeros(A.shape, dtype=bool)
    coo = A.tocoo()
    mask[coo.row, coo.col] = True
    return make_csr(mask, A.tocsr().sorted_indices().data, idtype, dtype)
