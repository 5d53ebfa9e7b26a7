"""Column parts walked row block by row block: A's rows split into `row_blocks` ranges of about
equal nonzeros, A's columns into `num_col_parts` ranges of equal width (as hyb's column parts),
and within each row block the rows of column part 0, then those of part 1, and so on. One CSR
level holds them: a "row" of the format is (row block, column part, row of A) with the nonzeros
of that row in that column part; rows with none there are not stored.

    rules = format_rules.colparts.rules(A, num_col_parts=4, row_blocks=2)
    args = format_rules.colparts.convert(A, num_col_parts=4, row_blocks=2)

Three levels, one rule named `colparts`: row blocks (dense), rows (sparse, unsorted: the
original row ids, each row once per column part it has nonzeros in), columns (sparse). A thread
that runs one row block (`schedules.colparts`) writes only its rows, and reads one column part of
B at a time: a slice of B that stays in cache where B does not.
"""

from __future__ import annotations

import numpy as np

from sparsetir_py import script as T
from sparsetir_py.format import FormatRewriteRule
from sparsetir_py.format import converters as formats


def description(parts: int, dtype: str = "float32", idtype: str = "int32"):
    @T.prim_func
    def colparts(a: T.handle, unit_ptr: T.handle, rows: T.handle, indptr: T.handle, indices: T.handle,
                 blocks: T.int32, m: T.int32, n: T.int32, nrows: T.int32, nnz: T.int32):  # fmt: skip
        O = T.dense_fixed(blocks * parts, idtype)
        I = T.sparse_variable(O, (m, nrows), (unit_ptr, rows), idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (O, I, J), dtype)

    return colparts


def rules(A=None, num_col_parts: int = 2, row_blocks: int = 2, dtype: str = "float32", idtype: str = "int32"):
    num_col_parts = formats.check_num_col_parts(num_col_parts, A.shape[1] if A is not None else None)
    row_blocks = formats.positive_int("row_blocks", row_blocks)
    converter = lambda M: convert(M, num_col_parts, row_blocks, dtype, idtype)  # noqa: E731
    return [
        FormatRewriteRule(
            "colparts",
            description(num_col_parts, dtype, idtype),
            ["A"],
            ["I", "J"],
            ["O", "I", "J"],
            {"I": ["O", "I"], "J": ["J"]},
            lambda i, j: (0, i, j),
            lambda o, i, j: (i, j),
            converter,
            shared_params=("m", "n"),
        )
    ]


def convert(A, num_col_parts: int = 2, row_blocks: int = 2, dtype: str = "float32", idtype: str = "int32") -> dict:
    csr, it = formats.canonical(A, idtype)
    m, n = csr.shape
    num_col_parts = formats.check_num_col_parts(num_col_parts, n)
    row_blocks = formats.positive_int("row_blocks", row_blocks)
    rows = formats.row_ids(csr)
    part = csr.indices.astype(np.int64) // (-(-n // num_col_parts) if n else 1)
    # Row blocks of about equal weight (a row weighs its nonzeros plus one, as `split_by` does).
    weight = np.asarray(csr.indptr, np.int64)[1:] + np.arange(1, m + 1)
    cuts = np.searchsorted(weight, np.arange(1, row_blocks) * (weight[-1] if m else 0) / row_blocks, "right")
    starts = np.concatenate([[0], cuts]).astype(np.int64)
    block = np.searchsorted(starts, rows, "right") - 1
    order = np.lexsort((csr.indices, rows, part, block))  # (block, part, row, column)
    key = (block * num_col_parts + part) * max(m, 1) + rows
    key = key[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    indptr = np.r_[first, len(key)].astype(np.int64)
    run_unit = (block * num_col_parts + part)[order][first]
    unit_ptr = np.searchsorted(run_unit, np.arange(row_blocks * num_col_parts + 1), "left").astype(np.int64)
    values = np.asarray(csr.data, dtype=dtype or csr.dtype)[order]
    arrays = {"a": values, "unit_ptr": unit_ptr.astype(it), "rows": rows[order][first].astype(it),
              "indptr": indptr.astype(it), "indices": csr.indices[order].astype(it), "blocks": row_blocks,
              "m": m, "n": n, "nrows": len(first), "nnz": csr.nnz}  # fmt: skip
    return formats.renamed(arrays, "colparts")
