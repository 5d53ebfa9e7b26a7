"""Column parts walked row block by row block: A's columns in `num_col_parts` ranges of
`ceil(n / num_col_parts)` columns (as hyb's column parts), A's rows in `row_blocks` contiguous
blocks of about equal nonzeros (a row weighs its nonzeros plus one, as `split_by` does). No
padding.

    rules = format_rules.colparts.rules(A, num_col_parts=4, row_blocks=2)
    args = format_rules.colparts.convert(A, num_col_parts=4, row_blocks=2)

Two rules. `colpart0`: column part 0 as CSR over every row of A (an empty row where a row has
none there); since it visits every output row once, `decompose_format` gives it the output's
init, so C is written by one CSR-like pass and not zeroed in a pass of its own. `colparts` (with
two parts or more): the other parts as *units* (row block, part), numbered block-major, three
levels: units (dense, `blocks * (parts - 1)`: the count of parts is part of the format), rows
(sparse: A's row ids, sorted within a unit, the rows of the block with nonzeros in the part),
columns (sparse). Both share `m` and `n` with the decomposed function (`shared_params`), so their
computations need no guard that a coordinate lies in A's shape.

The converter's contract, on which `schedules.colparts` runs row blocks in parallel without
atomics: every row of A lies in exactly one row block. A thread that runs a row block walks its
units in order, so it reads one column part's slice of B at a time, a slice that can stay in
cache where all of B does not.
"""

from __future__ import annotations

import numpy as np

from format_rules import padding
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


def head_description(dtype: str = "float32", idtype: str = "int32"):
    """Column part 0: CSR over every row of A, the description `format_rules.padding` stores its
    padded rows in (its padding is the converter's: the levels are CSR's)."""
    return padding.description(dtype, idtype)


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
    head = FormatRewriteRule(
        "colpart0",
        head_description(dtype, idtype),
        ["A"],
        ["I", "J"],
        ["I", "J"],
        {"I": ["I"], "J": ["J"]},
        lambda i, j: (i, j),
        lambda i, j: (i, j),
        converter,
        shared_params=("m", "n"),
    )
    if num_col_parts == 1:
        return [head]
    units = FormatRewriteRule(
        "colparts",
        description(num_col_parts - 1, dtype, idtype),
        ["A"],
        ["I", "J"],
        ["O", "I", "J"],
        {"I": ["O", "I"], "J": ["J"]},
        lambda i, j: (0, i, j),
        lambda o, i, j: (i, j),
        converter,
        shared_params=("m", "n"),
    )
    return [head, units]


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
    values = np.asarray(csr.data, dtype=dtype or csr.dtype)
    # Column part 0: CSR over all rows (A's order restricted to its columns).
    first_part = np.flatnonzero(part == 0)
    head_ptr = np.zeros(m + 1, np.int64)
    np.cumsum(np.bincount(rows[first_part], minlength=m), out=head_ptr[1:])
    out = formats.renamed({"a": values[first_part], "indptr": head_ptr.astype(it),
                           "indices": csr.indices[first_part].astype(it), "m": m, "n": n,
                           "nnz": len(first_part)}, "colpart0")  # fmt: skip
    if num_col_parts == 1:
        return out
    # Parts 1.. as units (row block, part), block-major, rows in order within a unit.
    rest = np.flatnonzero(part > 0)
    order = rest[np.lexsort((csr.indices[rest], rows[rest], part[rest], block[rest]))]  # (block, part, row, column)
    tail = num_col_parts - 1
    unit = block[order] * tail + part[order] - 1
    key = unit * max(m, 1) + rows[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    indptr = np.r_[first, len(key)].astype(np.int64)
    unit_ptr = np.searchsorted(unit[first], np.arange(row_blocks * tail + 1), "left").astype(np.int64)
    arrays = {"a": values[order], "unit_ptr": unit_ptr.astype(it), "rows": rows[order][first].astype(it),
              "indptr": indptr.astype(it), "indices": csr.indices[order].astype(it), "blocks": row_blocks,
              "m": m, "n": n, "nrows": len(first), "nnz": len(order)}  # fmt: skip
    return {**out, **formats.renamed(arrays, "colparts")}
