"""Column parts walked row block by row block: A's rows split into `row_blocks` contiguous
ranges of about equal nonzeros (a row weighs its nonzeros plus one, as `split_by` does), A's
columns into `num_col_parts` ranges of `ceil(n / num_col_parts)` columns (as hyb's column parts).
A *unit* is one (row block, column part), numbered block-major; it holds, in row order, the rows
of its block that have nonzeros in its columns, each with those nonzeros (no padding).

    rules = format_rules.colparts.rules(A, num_col_parts=4, row_blocks=2)
    args = format_rules.colparts.convert(A, num_col_parts=4, row_blocks=2)

One rule, named `colparts`, of three levels: units (dense, `blocks * parts` of them: the count of
column parts is part of the format), rows (sparse: A's row ids, sorted within a unit), columns
(sparse). Its `m` and `n` are the decomposed function's (`shared_params`), so the computation
needs no guard that a coordinate lies in A's shape. The converter's contract, on which
`schedules.colparts` runs row blocks in parallel without atomics: every row of A lies in exactly
one row block. A thread that runs a row block walks its units in order, so it reads one column
part's slice of B at a time, a slice that can stay in cache where all of B does not.
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


#: A matrix of fewer rows still takes this many row blocks (the extra ones empty), so that one
#: choice of parameters (the tuner's: one block per thread) serves small matrices too.
MIN_ROW_BLOCKS_BOUND = 64


def check_row_blocks(row_blocks, m: int | None = None) -> int:
    """`row_blocks` as an int: positive, and at most A's rows (or `MIN_ROW_BLOCKS_BOUND`) when
    A is known, else at most `MAX_ROW_BLOCKS`."""
    limit = max(int(m), MIN_ROW_BLOCKS_BOUND) if m is not None else MAX_ROW_BLOCKS
    return formats.positive_int("row_blocks", row_blocks, limit, "A's rows: a row block holds one at least")


#: The most row blocks `rules` takes for no matrix in particular.
MAX_ROW_BLOCKS = 1 << 20


def rules(A=None, num_col_parts: int = 2, row_blocks: int = 2, dtype: str = "float32", idtype: str = "int32"):
    num_col_parts = formats.check_num_col_parts(num_col_parts, A.shape[1] if A is not None else None)
    row_blocks = check_row_blocks(row_blocks, A.shape[0] if A is not None else None)
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
    row_blocks = check_row_blocks(row_blocks, m)
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
