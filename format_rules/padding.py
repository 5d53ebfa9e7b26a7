"""Padding: CSR whose every row is padded to a multiple of `pad_size` (padding slots hold
columns past the matrix, value 0), so a row splits evenly into vectors of `pad_size`.

    rules = format_rules.padding.rules(pad_size=4)
    args = format_rules.padding.convert(A, pad_size=4)
"""

from __future__ import annotations

from sparsetir_py import script as T
from sparsetir_py.format import FormatRewriteRule
from sparsetir_py.format import converters as formats


def description(dtype: str = "float32", idtype: str = "int32"):
    @T.prim_func
    def padded(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)

    return padded


def rules(pad_size: int = 4, dtype: str = "float32", idtype: str = "int32") -> list[FormatRewriteRule]:
    pad_size = formats.positive_int("pad_size", pad_size, formats.index_limit("int32"), "n + pad_size is an int32 size")
    return [
        FormatRewriteRule(
            "pad",
            description(dtype, idtype),
            ["A"],
            ["I", "J"],
            ["I", "J"],
            {"I": ["I"], "J": ["J"]},
            lambda i, j: (i, j),
            lambda i, j: (i, j),
            converter=lambda A: convert(A, pad_size, dtype, idtype),
        )
    ]


def convert(A, pad_size: int = 4, dtype: str = "float32", idtype: str = "int32") -> dict:
    return formats.renamed(formats.to_padded(A, pad_size, idtype, dtype), "pad")
