"""The scripts of `sp.ops`' operators: each computation once, in coordinate space (Stage I)."""

from __future__ import annotations

from .. import script as T
from ..ir.func import PrimFunc


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


SCRIPTS = {"spmm": spmm_script, "sddmm": sddmm_script}
