"""A `local` scratch buffer of one element is rendered as a plain variable (a register)."""

import numpy as np
import scipy.sparse as sps

import sparsetir_py as sp

SDDMM_ACC = """
from sparsetir_py import script as T

@T.prim_func
def sddmm(a: T.handle, x: T.handle, y: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (nnz,), "float32")
    X = T.match_buffer(x, (m, feat), "float32")
    Y = T.match_buffer(y, (n, feat), "float32")
    C = T.match_buffer(c, (nnz,), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32")
    J_indices = T.match_buffer(indices, (nnz,), "int32")
    for i in T.parallel(m):
        for j in T.serial(J_indptr[i + 1] - J_indptr[i]):
            acc = T.allocate((1,), "float32", "local")
            acc[0] = T.float32(0)
            for k in T.serial(feat):
                acc[0] = acc[0] + X[i * feat + k] * Y[J_indices[J_indptr[i] + j] * feat + k]
            C[J_indptr[i] + j] = A[J_indptr[i] + j] * acc[0]
"""


def test_local_scalar_is_a_variable_and_computes_the_same():
    f = sp.from_script(SDDMM_ACC)
    kernel = sp.build(f)
    assert "acc = np.float32(0.0)  # local register" in kernel.source
    assert "acc[" not in kernel.source
    A = sps.random(20, 15, density=0.3, format="csr", dtype=np.float32, random_state=0)
    A.sort_indices()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 6)).astype(np.float32)
    Y = rng.standard_normal((15, 6)).astype(np.float32)
    args = dict(a=A.data, x=X, y=Y, indptr=A.indptr, indices=A.indices, m=20, n=15, feat=6, nnz=A.nnz)
    out = np.full(A.nnz, np.nan, np.float32)
    kernel(c=out, **args)
    expected = np.full(A.nnz, np.nan, np.float32)
    sp.interpret(f, c=expected, **args)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    rows = np.repeat(np.arange(20), np.diff(A.indptr))
    np.testing.assert_allclose(out, A.data * np.einsum("ij,ij->i", X[rows], Y[A.indices]), rtol=1e-5, atol=1e-5)


def test_chunked_parallel_loop():
    """A parallel loop annotated `chunk_size` sets Numba's chunk size around it, and restores it;
    the kernel stays cacheable (`cpu_intrinsics.set_chunksize`, not Numba's own)."""
    import numba

    from schedules.spmm import csr_cpu_rows_balanced
    from sparsetir_py.ops import spmm_script

    kernel = sp.compile(spmm_script(), "cpu", schedule=csr_cpu_rows_balanced)
    assert "set_chunksize(64)" in kernel.source and "cache=True" in kernel.source
    A = sps.random(40, 30, density=0.2, format="csr", dtype=np.float32, random_state=1)
    A.sort_indices()
    B = np.random.default_rng(2).standard_normal((30, 5)).astype(np.float32)
    C = np.full((40, 5), np.nan, np.float32)
    before = numba.get_parallel_chunksize()
    kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=40, n=30, feat=5, nnz=A.nnz)
    assert numba.get_parallel_chunksize() == before
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)
