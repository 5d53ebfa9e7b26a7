"""The scripts of `sp.ops`' operators: each computation once, in coordinate space (Stage I)."""

from __future__ import annotations

import re

from .. import script as T
from ..ir.func import PrimFunc
from ..script import from_script


def spmm_script(idtype: str = "int32", dtype: str = "float32") -> PrimFunc:
    """C = A @ B with A in CSR (the script of docs/design.md §3)."""

    @T.prim_func
    def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
              m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, K), dtype)
        with T.sp_iter([I, J, K], "SRS", "csrmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return csrmm


def sddmm_script(idtype: str = "int32", dtype: str = "float32") -> PrimFunc:
    """C[i, j] = A[i, j] * sum_k X[i, k] * Y[j, k] over A's nonzeros."""

    @T.prim_func
    def sddmm(a: T.handle, x: T.handle, y: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
              m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        X = T.match_sparse_buffer(x, (I, K), dtype)
        Y = T.match_sparse_buffer(y, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, J), dtype)
        with T.sp_iter([I, J, K], "SSR", "sddmm") as [i, j, k]:
            with T.init():
                C[i, j] = 0.0
            C[i, j] = C[i, j] + A[i, j] * X[i, k] * Y[j, k]

    return sddmm


def spgemm_script(idtype: str = "int32", dtype: str = "float32") -> PrimFunc:
    """C = A @ B with A, B and C in CSR, C's structure assembled by the kernel (`assemble=True`,
    docs/design.md §3f): `sp.compile` gives a kernel returning `indptr_c`, `indices_c`, `c`, `nnz_c`."""

    @T.prim_func
    def spgemm(a: T.handle, indptr_a: T.handle, indices_a: T.handle, b: T.handle, indptr_b: T.handle,
               indices_b: T.handle, c: T.handle, indptr_c: T.handle, indices_c: T.handle,
               m: T.int32, k: T.int32, n: T.int32, nnz_a: T.int32, nnz_b: T.int32, nnz_c: T.int32):  # fmt: skip
        I = T.dense_fixed(m)
        K = T.sparse_variable(I, (k, nnz_a), (indptr_a, indices_a), idtype)
        KB = T.dense_fixed(k)
        JB = T.sparse_variable(KB, (n, nnz_b), (indptr_b, indices_b), idtype)
        J = T.dense_fixed(n)
        JC = T.sparse_variable(I, (n, nnz_c), (indptr_c, indices_c), idtype, assemble=True)
        A = T.match_sparse_buffer(a, (I, K), dtype)
        B = T.match_sparse_buffer(b, (KB, JB), dtype)
        C = T.match_sparse_buffer(c, (I, JC), dtype)
        with T.sp_iter([I, K, J], "SRS", "spgemm") as [i, kk, j]:
            with T.init():
                C[i, j] = 0.0
            C[i, j] = C[i, j] + A[i, kk] * B[kk, j]

    return spgemm


def elementwise_script(expression: str, count: int, idtype: str = "int32", dtype: str = "float32") -> PrimFunc:
    """`C[i, j] = <expression>` over CSR operands `X0`..`X{count-1}` (parameters `x<t>`, `p<t>`,
    `q<t>`, `nnz<t>`: values, indptr, indices, nonzeros) and the scalar `alpha`, C assembled by the
    kernel (`assemble=True`): `"X0 + X1 - X2"` stores the union of the three structures,
    `"X0 * X1 * X2"` their intersection."""
    return from_script(elementwise_source(expression, count, idtype, dtype))


def elementwise_source(expression: str, count: int, idtype: str = "int32", dtype: str = "float32") -> str:
    """The script text of `elementwise_script` (each operand `X<t>` of `expression` read at `[i, j]`)."""
    params = "".join(f"x{t}: T.handle, p{t}: T.handle, q{t}: T.handle, " for t in range(count))
    sizes = "".join(f", nnz{t}: T.int32" for t in range(count))
    decls = "".join(
        f"    J{t} = T.sparse_variable(I, (n, nnz{t}), (p{t}, q{t}), {idtype!r})\n"
        f"    X{t} = T.match_sparse_buffer(x{t}, (I, J{t}), {dtype!r})\n"
        for t in range(count)
    )
    body = re.sub(r"\bX(\d+)\b", r"X\1[i, j]", expression)
    return f"""
from sparsetir_py import script as T

@T.prim_func
def ewise({params}c: T.handle, indptr_c: T.handle, indices_c: T.handle, m: T.int32, n: T.int32{sizes},
          nnz_c: T.int32, alpha: T.{dtype}):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
{decls}    JC = T.sparse_variable(I, (n, nnz_c), (indptr_c, indices_c), {idtype!r}, assemble=True)
    C = T.match_sparse_buffer(c, (I, JC), {dtype!r})
    with T.sp_iter([I, J], "SS", "ewise") as [i, j]:
        C[i, j] = {body}
"""


def spgemm_arguments(A, B) -> dict:
    """`spgemm_script`'s inputs for A @ B (canonical CSR matrices of its index and value dtypes)."""
    return dict(a=A.data, indptr_a=A.indptr, indices_a=A.indices, b=B.data, indptr_b=B.indptr, indices_b=B.indices,
                m=A.shape[0], k=A.shape[1], n=B.shape[1], nnz_a=A.nnz, nnz_b=B.nnz)  # fmt: skip


def elementwise_arguments(mats, alpha: float = 2.0) -> dict:
    """`elementwise_script`'s inputs: `mats` as X0, X1, ... (canonical CSR, one shape) and `alpha`."""
    args = {"m": mats[0].shape[0], "n": mats[0].shape[1], "alpha": alpha}
    for t, X in enumerate(mats):
        args |= {f"x{t}": X.data, f"p{t}": X.indptr, f"q{t}": X.indices, f"nnz{t}": X.nnz}
    return args


SCRIPTS = {"spmm": spmm_script, "sddmm": sddmm_script}
