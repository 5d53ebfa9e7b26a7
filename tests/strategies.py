"""Hypothesis strategies for sparse inputs, and a fixed list of edge-case matrices.

`csr_matrices()` draws canonical scipy CSR matrices (sorted, unique indices) of at most ~40 rows
and columns: zero rows, zero columns, zero nonzeros, one row, rectangular shapes, empty rows
and full rows, at random densities; values float32 or float64, `indptr`/`indices` int32 or
int64 (both arrays of the same dtype, which scipy would otherwise narrow to int32).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
from hypothesis import strategies as st

VALUE_DTYPES = ("float32", "float64")
INDEX_DTYPES = ("int32", "int64")


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


@st.composite
def _extent(draw, largest: int) -> int:
    """0 and 1 about one time in twenty each (more come from shrinking), else 2..largest."""
    kind = draw(st.integers(0, 19))
    if kind < 2:
        return min(kind, largest)
    return draw(st.integers(min(2, largest), largest))


@st.composite
def csr_matrices(
    draw,
    max_rows: int = 40,
    max_cols: int = 40,
    value_dtypes: tuple[str, ...] = VALUE_DTYPES,
    index_dtypes: tuple[str, ...] = INDEX_DTYPES,
) -> scipy.sparse.csr_matrix:
    """Canonical CSR matrices with drawn shape, density, empty rows and dtypes."""
    m = draw(_extent(max_rows))
    n = draw(_extent(max_cols))
    density = draw(st.sampled_from([0.0, 0.1, 0.3, 1.0]) | st.floats(0.02, 1.0))
    empty_row_fraction = draw(st.sampled_from([0.0, 0.3]))
    full_row = draw(st.booleans())
    dtype = draw(st.sampled_from(value_dtypes))
    idtype = draw(st.sampled_from(index_dtypes))
    seed = draw(st.integers(0, 2**32 - 1))

    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    mask[rng.random(m) < empty_row_fraction, :] = False
    if full_row and m > 0:
        mask[rng.integers(m), :] = True
    values = rng.uniform(-1.0, 1.0, size=int(mask.sum()))
    return make_csr(mask, values, idtype, dtype)


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


def rows_of_every_length(f: int, dtype=np.float32, idtype=np.int32) -> scipy.sparse.csr_matrix:
    """Rows with 0 to 2f + 1 nonzeros: every remainder modulo a split factor `f`, full chunks and
    none (the schedules that take nonzeros `f` at a time)."""
    rng = np.random.default_rng(f)
    n = 3 * f + 5
    mask = np.zeros((2 * f + 2, n), dtype=bool)
    for row in range(2 * f + 2):
        mask[row, rng.choice(n, row, replace=False)] = True
    return make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), idtype, dtype)


def split_matrices(f: int, idtype, dtype) -> list[scipy.sparse.csr_matrix]:
    """What a schedule splitting rows by `f` is checked on: `rows_of_every_length(f)` and the
    edge matrices, all with `idtype` indices and `dtype` values."""
    return [rows_of_every_length(f, dtype, idtype), *(with_types(A, idtype, dtype) for A in edge_matrices().values())]
