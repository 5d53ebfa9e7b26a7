"""Hypothesis strategies for sparse inputs, and a fixed list of edge-case matrices.

`csr_matrices()` draws canonical scipy CSR matrices (sorted, unique indices) of at most ~40 rows
and columns: zero rows, zero columns, zero nonzeros, one row, rectangular shapes, empty rows
and full rows, at random densities; values float32 or float64, `indptr`/`indices` int32 or
int64 (both arrays of the same dtype, which scipy would otherwise narrow to int32). The fixed
matrices (`edge_matrices`, `make_csr`, `with_types`) live in `matrices.py`, which needs no
hypothesis (the GPU suite runs where it is not installed).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
from hypothesis import strategies as st
from matrices import edge_matrices, make_csr, with_types

VALUE_DTYPES = ("float32", "float64")
INDEX_DTYPES = ("int32", "int64")


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
