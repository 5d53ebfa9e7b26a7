"""Small real sparse matrices shipped with the package, for tests, examples and the demo.

Each matrix is a scipy `.npz` file next to this module (sources and licences in ATTRIBUTION.md).
They are read through `importlib.resources`, so they load the same from a clone, an editable
install or a wheel.

>>> A = load_matrix("karate")
>>> A.shape, A.nnz, A.dtype, A.indices.dtype
((34, 34), 156, dtype('float32'), dtype('int32'))
>>> "cora" in available()
True
"""

from __future__ import annotations

from importlib import resources

import numpy as np
import scipy.sparse

__all__ = ["available", "load_matrix"]

_PACKAGE = "sparsetir_py.data"
_SUFFIX = ".npz"


def available() -> list[str]:
    """Names of the shipped matrices, sorted case-insensitively."""
    names = [
        entry.name.removesuffix(_SUFFIX)
        for entry in resources.files(_PACKAGE).iterdir()
        if entry.name.endswith(_SUFFIX)
    ]
    return sorted(names, key=str.lower)


def load_matrix(name: str, dtype=np.float32, index_dtype=np.int32) -> scipy.sparse.csr_matrix:
    """Load a shipped matrix as a canonical CSR matrix.

    Canonical means sorted column indices within each row and no duplicate entries. Values are
    cast to `dtype`; `indptr` and `indices` are both of `index_dtype` (`int32` or `int64`),
    which scipy would otherwise narrow to int32 whenever the values fit.

    Raises `KeyError` naming the shipped matrices when `name` is not one of them.
    """
    index_dtype = np.dtype(index_dtype)
    if index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"in `load_matrix`: expected index_dtype int32 or int64, but got {index_dtype}")
    resource = resources.files(_PACKAGE) / f"{name}{_SUFFIX}"
    if not resource.is_file():
        raise KeyError(f"in `load_matrix`: no shipped matrix {name!r}; available: {', '.join(available())}")
    with resource.open("rb") as f:
        matrix = scipy.sparse.load_npz(f)
    matrix = scipy.sparse.csr_matrix(matrix)
    matrix.sum_duplicates()  # also sorts the indices
    matrix.sort_indices()
    result = scipy.sparse.csr_matrix(
        (matrix.data.astype(dtype), matrix.indices, matrix.indptr), shape=matrix.shape, copy=True
    )
    # Assigned after construction: the constructor would narrow int64 indices back to int32.
    result.indices = np.ascontiguousarray(matrix.indices, dtype=index_dtype)
    result.indptr = np.ascontiguousarray(matrix.indptr, dtype=index_dtype)
    result.has_sorted_indices = True
    result.has_canonical_format = True
    return result
