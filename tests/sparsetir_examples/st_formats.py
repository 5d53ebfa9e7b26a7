"""SparseTIR's composable-format descriptions and the conversions its examples do by hand.

Follows: tests/python/sparsetir/sparse_tir_composable_format_scripts.py (bsr, padding, ell, ell3d),
written again in this project's syntax; the converters are this project's own (SparseTIR leaves
them to its users, examples/spmm/utils.py and examples/rgms/rgcn/utils.py do them in Python).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse

import sparsetir_py as sp
from sparsetir_py import script as T


@T.prim_func
def bsr(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32, block_size: T.int32):
    IO = T.dense_fixed(m)
    JO = T.sparse_variable(IO, (n, nnz), (indptr, indices), "int32")
    II = T.dense_fixed(block_size)
    JI = T.dense_fixed(block_size)
    A = T.match_sparse_buffer(a, (IO, JO, II, JI), "float32")
    T.evaluate(0)


@T.prim_func
def padding(
    a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz_chunks: T.int32, pad_size: T.int32
):
    I = T.dense_fixed(m)
    JO = T.dense_variable(I, ((n + pad_size - 1) // pad_size, nnz_chunks), indptr, "int32")
    JI = T.sparse_fixed(JO, (n, pad_size), indices, "int32")
    A = T.match_sparse_buffer(a, (I, JO, JI), "float32")
    T.evaluate(0)


@T.prim_func
def ell(
    a: T.handle,
    indptr_i: T.handle,
    indices_i: T.handle,
    indices_j: T.handle,
    m: T.int32,
    n: T.int32,
    num_rows: T.int32,
    nnz_cols: T.int32,
):
    O = T.dense_fixed(1)
    I = T.sparse_variable(O, (m, num_rows), (indptr_i, indices_i))
    J = T.sparse_fixed(I, (n, nnz_cols), indices_j)
    A = T.match_sparse_buffer(a, (O, I, J), "float32")
    T.evaluate(0)


# ------------------------------------------------------------------------------------------ rules
def bsr_rules(sizes) -> list[sp.FormatRewriteRule]:
    """test_csrmm_bsr_rewrite: one rule per block size, named `str(block_size)`."""
    return [
        sp.FormatRewriteRule(
            str(b),
            bsr.specialize({"block_size": b}),
            ["A"],
            ["I", "J"],
            ["IO", "JO", "II", "JI"],
            {"I": ["IO", "II"], "J": ["JO", "JI"]},
            lambda i, j, b=b: (i // b, j // b, i % b, j % b),
            lambda io, jo, ii, ji, b=b: (io * b + ii, jo * b + ji),
        )
        for b in sizes
    ]


def ell_rules(widths, names=None) -> list[sp.FormatRewriteRule]:
    """test_csrmm_ell_rewrite: one rule per width, named `str(nnz_cols)` (or `names`)."""
    names = names or [str(w) for w in widths]
    return [
        sp.FormatRewriteRule(
            name,
            ell.specialize({"nnz_cols": w}),
            ["A"],
            ["I", "J"],
            ["O", "I", "J"],
            {"I": ["O", "I"], "J": ["J"]},
            lambda i, j: (0, i, j),
            lambda o, i, j: (i, j),
        )
        for name, w in zip(names, widths)
    ]


def padding_rules(pad_size: int) -> list[sp.FormatRewriteRule]:
    """test_csrmm_padding_rewrite: one rule named `str(pad_size)`."""
    return [
        sp.FormatRewriteRule(
            str(pad_size),
            padding.specialize({"pad_size": pad_size}),
            ["A"],
            ["I", "J"],
            ["I", "JO", "JI"],
            {"I": ["I"], "J": ["JO", "JI"]},
            lambda i, j: (i, 0, j),
            lambda i, jo, ji: (i, ji),
        )
    ]


# ------------------------------------------------------------------------------------------ converters
def rows_of(A) -> np.ndarray:
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


def bsr_arrays(A, b: int, name: str) -> dict:
    """A (any rows) as BSR of block `b`, its shape padded to a multiple of `b`."""
    A = scipy.sparse.csr_matrix(A, dtype=np.float32)
    m, n = A.shape
    mp, np_ = -(-m // b) * b, -(-n // b) * b
    indptr = np.concatenate([A.indptr, np.full(mp - m, A.nnz, A.indptr.dtype)])
    P = scipy.sparse.csr_matrix((A.data, A.indices, indptr), shape=(mp, np_)).tobsr((b, b))
    P.sort_indices()
    return {
        f"a_{name}": np.ascontiguousarray(P.data, dtype=np.float32).reshape(-1),
        f"indptr_{name}": P.indptr.astype(np.int32),
        f"indices_{name}": P.indices.astype(np.int32),
        f"m_{name}": mp // b,
        f"n_{name}": np_ // b,
        f"nnz_{name}": len(P.indices),
    }


def padded_rows(A, rows: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns and values of `rows` of A, each padded to `width` slots. Padding slots hold
    columns past A's last one (n, n + 1, ...): unstored, sorted, unique; value 0."""
    n = A.shape[1]
    cols = n + np.tile(np.arange(width), (len(rows), 1))
    vals = np.zeros((len(rows), width), np.float32)
    for k, r in enumerate(rows):
        lo, hi = A.indptr[r], A.indptr[r + 1]
        cols[k, : hi - lo] = A.indices[lo:hi]
        vals[k, : hi - lo] = A.data[lo:hi]
    return cols, vals


def ell_arrays(A, rows: np.ndarray, width: int, name: str) -> dict:
    """SparseTIR's ell: the rows `rows` of A (each at most `width` long) padded to `width`."""
    cols, vals = padded_rows(A, rows, width)
    m, n = A.shape
    return {
        f"a_{name}": vals.reshape(-1),
        f"indptr_i_{name}": np.array([0, len(rows)], np.int32),
        f"indices_i_{name}": np.asarray(rows, np.int32),
        f"indices_j_{name}": cols.reshape(-1).astype(np.int32),
        f"m_{name}": m,
        f"n_{name}": n + width,
        f"num_rows_{name}": len(rows),
    }


def padding_arrays(A, pad: int, name: str) -> dict:
    """SparseTIR's padding: every row cut into chunks of `pad` columns, the last one padded."""
    A = scipy.sparse.csr_matrix(A, dtype=np.float32)
    m, n = A.shape
    lengths = np.diff(A.indptr)
    chunks = -(-lengths // pad)
    cols, vals = [], []
    for r in range(m):
        c, v = padded_rows(A, np.array([r]), int(chunks[r]) * pad)
        cols.append(c.reshape(-1))
        vals.append(v.reshape(-1))
    return {
        f"a_{name}": np.concatenate([*vals, np.zeros(0, np.float32)]),
        f"indptr_{name}": np.concatenate([[0], np.cumsum(chunks)]).astype(np.int32),
        f"indices_{name}": np.concatenate([*cols, np.zeros(0, np.int64)]).astype(np.int32),
        f"m_{name}": m,
        f"n_{name}": n + pad,
        f"nnz_chunks_{name}": int(chunks.sum()),
    }


def buckets_of(A, widths) -> list[np.ndarray]:
    """Rows of A by the smallest width in `widths` that holds them (empty rows in none)."""
    lengths = np.diff(A.indptr)
    out, lo = [], 0
    for w in widths:
        out.append(np.flatnonzero((lengths > lo) & (lengths <= w)))
        lo = w
    assert lengths.max(initial=0) <= widths[-1]
    return out


def only_rows(A, keep: np.ndarray) -> scipy.sparse.csr_matrix:
    """A with every row outside `keep` emptied (a part of a row partition)."""
    mask = np.zeros(A.shape[0], np.float32)
    mask[keep] = 1
    out = scipy.sparse.csr_matrix(scipy.sparse.diags(mask) @ A, dtype=np.float32)
    out.sort_indices()
    return out
