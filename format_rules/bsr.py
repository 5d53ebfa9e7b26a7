"""BSR: the matrix in square blocks of `block_size` (shapes not divisible by it are padded).

rules = format_rules.bsr.rules(block_size=4)
mod = sp.decompose_format(csrmm, rules)
args = format_rules.bsr.convert(A, block_size=4)     # a_bsr, indptr_bsr, indices_bsr, ...

`padded_shape` tells `sp.ops` that the format computes on the shape padded to whole blocks
(`m_bsr * b` x `n_bsr * b`): on the CPU its kernels are built by `sp.transform.pad_shape`
(no guard per cell) and take operands with zero rows appended (`schedules/bsr.py`).
"""

from __future__ import annotations

from sparsetir_py import script as T
from sparsetir_py.format import FormatRewriteRule
from sparsetir_py.format import converters as formats


def description(dtype: str = "float32", idtype: str = "int32"):
    @T.prim_func
    def bsr(a: T.handle, indptr: T.handle, indices: T.handle,
            m: T.int32, n: T.int32, nnz: T.int32, block_size: T.int32):  # fmt: skip
        IO = T.dense_fixed(m, idtype)
        JO = T.sparse_variable(IO, (n, nnz), (indptr, indices), idtype)
        II = T.dense_fixed(block_size, idtype)
        JI = T.dense_fixed(block_size, idtype)
        A = T.match_sparse_buffer(a, (IO, JO, II, JI), dtype)

    return bsr


def rules(block_size: int = 4, dtype: str = "float32", idtype: str = "int32") -> list[FormatRewriteRule]:
    b = formats.positive_int("block_size", block_size, formats.index_limit(idtype))
    return [
        FormatRewriteRule(
            "bsr",
            description(dtype, idtype).specialize({"block_size": b}),
            ["A"],
            ["I", "J"],
            ["IO", "JO", "II", "JI"],
            {"I": ["IO", "II"], "J": ["JO", "JI"]},
            lambda i, j: (i // b, j // b, i % b, j % b),
            lambda io, jo, ii, ji: (io * b + ii, jo * b + ji),
            converter=lambda A: convert(A, block_size=b, dtype=dtype, idtype=idtype),
        )
    ]


def padded_shape(block_size: int = 4) -> tuple[dict, int]:
    """The shape parameters of the computation and the block counts that pad them (see above)."""
    return {"m": "m_bsr", "n": "n_bsr"}, formats.positive_int("block_size", block_size)


def convert(A, block_size: int = 4, dtype: str = "float32", idtype: str = "int32") -> dict:
    return formats.renamed(formats.to_bsr(A, block_size, idtype, dtype), "bsr")
