"""Small real sparse matrices shipped with the package, for tests, examples and the demo.

Each matrix is a scipy `.npz` file next to this module (sources and licences in ATTRIBUTION.md).
They are read through `importlib.resources`, so they load the same from a clone, an editable
install or a wheel. `load_matrix` also reads a matrix file of your own: a scipy `.npz` or a
Matrix Market `.mtx` (`.mtx.gz`, `.mtx.bz2`) through `scipy.io.mmread`.

>>> import sparsetir_py as sp
>>> A = sp.data.load_matrix("karate")
>>> A.shape, A.nnz, A.dtype, A.indices.dtype
((34, 34), 156, dtype('float32'), dtype('int32'))
>>> "cora" in sp.data.available()
True
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import numpy as np
import scipy.sparse

__all__ = ["MATRIX_FILE_SUFFIXES", "available", "load_matrix", "read_matrix_file"]

_PACKAGE = "sparsetir_py.data"
_SUFFIX = ".npz"
_MATRIX_MARKET = (".mtx", ".mtx.gz", ".mtx.bz2")
#: Files `load_matrix` reads by path: scipy's `.npz` and Matrix Market.
MATRIX_FILE_SUFFIXES = (_SUFFIX, *_MATRIX_MARKET)


def available() -> list[str]:
    """Names of the shipped matrices, sorted case-insensitively.

    >>> available()[:3]
    ['ash219', 'bcsstk16', 'ca-CondMat']
    """
    names = [
        entry.name.removesuffix(_SUFFIX)
        for entry in resources.files(_PACKAGE).iterdir()
        if entry.name.endswith(_SUFFIX)
    ]
    return sorted(names, key=str.lower)


def load_matrix(name: str | os.PathLike, dtype=np.float32, index_dtype=np.int32) -> scipy.sparse.csr_matrix:
    """Load a shipped matrix, or a matrix file, as a canonical CSR matrix.

    `name` is a shipped matrix (`available()`), or the path of a scipy `.npz` file or a Matrix
    Market `.mtx` file (also `.mtx.gz` / `.mtx.bz2`; symmetric ones are expanded and pattern ones
    get the value 1, as `scipy.io.mmread` reads them). Canonical means sorted column indices
    within each row and no duplicate entries (duplicates are summed). Values are cast to `dtype`;
    `indptr` and `indices` are both of `index_dtype` (`int32` or `int64`), which scipy would
    otherwise narrow to int32 whenever the values fit.

    Raises `KeyError` naming the shipped matrices when `name` is neither one of them nor a matrix
    file, and `sp.InputError` when a file cannot be read as a real-valued 2-D matrix.

    >>> A = load_matrix("cora", dtype="float64", index_dtype="int64")
    >>> A.shape, A.nnz, A.data.dtype, A.indptr.dtype
    ((2708, 2708), 10556, dtype('float64'), dtype('int64'))
    """
    index_dtype = np.dtype(index_dtype)
    if index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"in `load_matrix`: expected index_dtype int32 or int64, but got {index_dtype}")
    text = os.fspath(name)
    resource = resources.files(_PACKAGE) / f"{text}{_SUFFIX}"
    if text.endswith(MATRIX_FILE_SUFFIXES) and not resource.is_file():
        matrix = read_matrix_file(text)
    else:
        if not resource.is_file():
            raise KeyError(
                f"in `load_matrix`: no shipped matrix {text!r}; available: {', '.join(available())} "
                "(or the path of a .npz or .mtx file)"
            )
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


def read_matrix_file(path: str | os.PathLike) -> scipy.sparse.spmatrix:
    """A scipy `.npz` file (`scipy.sparse.save_npz`) or a Matrix Market file, as scipy reads it.

    Raises `KeyError` when the file does not exist and `sp.InputError` when it is not a
    real-valued 2-D sparse or dense matrix (a complex Matrix Market file, say).

    >>> import tempfile, scipy.io, scipy.sparse
    >>> path = Path(tempfile.mkdtemp()) / "tiny.mtx"
    >>> scipy.io.mmwrite(path, scipy.sparse.csr_matrix([[0, 2.5], [1, 0]]))
    >>> read_matrix_file(path).toarray()
    array([[0. , 2.5],
           [1. , 0. ]])
    """
    from ..errors import InputError

    file = Path(path)
    if not file.is_file():
        raise KeyError(f"in `load_matrix`: no matrix file {str(file)!r}")
    try:
        if file.name.endswith(_MATRIX_MARKET):
            from scipy.io import mmread

            matrix = mmread(file)
        else:
            matrix = scipy.sparse.load_npz(file)
    except (ValueError, OSError, TypeError, IndexError) as e:
        raise InputError(f"in `load_matrix`: cannot read {file.name} as a matrix: {e}") from None
    if not scipy.sparse.issparse(matrix):
        matrix = np.asarray(matrix)
        if matrix.ndim != 2:
            raise InputError(f"in `load_matrix`: {file.name} holds a {matrix.ndim}-D array, not a matrix")
        matrix = scipy.sparse.csr_matrix(matrix)
    if matrix.dtype.kind not in "biuf":
        raise InputError(f"in `load_matrix`: {file.name} holds {matrix.dtype} values; only real values are supported")
    return matrix
