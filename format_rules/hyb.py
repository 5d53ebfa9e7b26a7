"""SparseTIR's hybrid format: columns split into `num_col_parts` ranges, and in each range every
row goes to an ELL bucket of width the smallest of `buckets` (powers of two) that holds it; rows
longer than the largest bucket are split into several rows of that width.

One rule per (column part, bucket), named `hyb<part>_<width>`, of three levels: layers (dense),
rows (sparse: the original row ids), columns (sparse, fixed width; padding slots hold columns past
the matrix, value 0). The full-width chunks of a split row go to successive layers of the largest
bucket, so within a layer every row appears once; other buckets have one layer. `idx_map` names
layer 0: the layer of a nonzero depends on its row, not on its coordinates (the computation reads
each part by its own iterators, so only `inv_idx_map` is used).

    rules = format_rules.hyb.rules(A, num_col_parts=2, buckets=[1, 2, 4, 8])
    args = format_rules.hyb.convert(A, num_col_parts=2, buckets=[1, 2, 4, 8])

Bounds: `num_col_parts` is at most A's column count (a narrower column part is empty; up to 4 on
a matrix of fewer columns), and at most MAX_PARTS parts (column parts x buckets) when `rules` is
called without A. Each part costs compile time on a first call (on the CPU about a second for
SpMM, several for SDDMM): with more than 8 parts, `sp.ops` compiles only those that store a
nonzero of A.
"""

from __future__ import annotations

from sparsetir_py import script as T
from sparsetir_py.errors import FormatError
from sparsetir_py.format import FormatRewriteRule
from sparsetir_py.format import converters as formats

#: The most parts (column parts x buckets) `rules` makes for no matrix in particular.
MAX_PARTS = 1024


def description(dtype: str = "float32", idtype: str = "int32"):
    @T.prim_func
    def ell(a: T.handle, indptr: T.handle, rows: T.handle, cols: T.handle,
            layers: T.int32, m: T.int32, n: T.int32, nrows: T.int32, width: T.int32):  # fmt: skip
        O = T.dense_fixed(layers, idtype)
        I = T.sparse_variable(O, (m, nrows), (indptr, rows), idtype)
        J = T.sparse_fixed(I, (n, width), cols, idtype)
        A = T.match_sparse_buffer(a, (O, I, J), dtype)

    return ell


def part_rule(name: str, width: int, dtype: str, idtype: str, converter=None) -> FormatRewriteRule:
    return FormatRewriteRule(
        name,
        description(dtype, idtype).specialize({"width": width}),
        ["A"],
        ["I", "J"],
        ["O", "I", "J"],
        {"I": ["O", "I"], "J": ["J"]},
        lambda i, j: (0, i, j),
        lambda o, i, j: (i, j),
        converter,
    )


def rules(A=None, num_col_parts: int = 1, buckets=None, dtype: str = "float32", idtype: str = "int32"):
    """The parts' rules; `buckets` defaults to powers of two up to A's longest row."""
    widths = formats.check_buckets(buckets if buckets is not None else formats.default_buckets(A))
    num_col_parts = formats.check_num_col_parts(num_col_parts, A.shape[1] if A is not None else None)
    if A is None and num_col_parts * len(widths) > MAX_PARTS:
        raise FormatError(
            f"hyb: num_col_parts={num_col_parts} with {len(widths)} buckets makes {num_col_parts * len(widths)} parts, "
            f"more than MAX_PARTS = {MAX_PARTS} (with the matrix given, num_col_parts is bounded by its columns)"
        )
    converter = lambda M: convert(M, num_col_parts, widths, dtype, idtype)  # noqa: E731 - one converter for all parts
    return [part_rule(f"hyb{p}_{w}", w, dtype, idtype, converter) for p in range(num_col_parts) for w in widths]


def convert(A, num_col_parts: int = 1, buckets=None, dtype: str = "float32", idtype: str = "int32") -> dict:
    widths = formats.check_buckets(buckets if buckets is not None else formats.default_buckets(A))
    parts = formats.to_ell_parts(A, widths, num_col_parts, idtype, dtype)
    names = [f"hyb{p}_{w}" for p in range(int(num_col_parts)) for w in widths]
    out: dict = {}
    for name, arrays in zip(names, parts):
        out.update(formats.renamed(arrays, name))
    return out
