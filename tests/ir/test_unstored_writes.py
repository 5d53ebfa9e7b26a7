"""One semantics for writes to coordinates a sparse buffer does not store.

Reading a sparse buffer where its structure stores nothing gives its default value; a write there
has no storage to go to. The verifier rejects every Stage I write that is not provably stored
(`UnstoredWriteError`): each sparse or variable axis of the written buffer must be indexed by the
iterator of that very axis, under the iterator that gives it its row. So the interpreter, the CPU
kernel and the CUDA kernel never meet such a write: `sp.verify`, `sp.compile` and `sp.interpret`
all refuse the function, and the accepted functions agree everywhere (checked below against each
other and scipy, on edge matrices).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from strategies import edge_matrices

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.ir.verify import UnstoredWriteError


def dense_to_csr(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """The user's case: a sparse output written from a dense iteration."""

    @T.prim_func
    def copy(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([I, Jd], "SS", "copy") as [i, j]:
            A[i, j] = B[i, j]

    return copy


def sampled_copy(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """The accepted form: iterate A's own axes and read the dense B there (a gather)."""

    @T.prim_func
    def sample(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([I, J], "SS", "sample") as [i, j]:
            A[i, j] = B[i, j] + B[i, j]

    return sample


def shifted_row(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """J's iterator, but under another row: row i's coordinates need not be stored in row i + 1."""

    @T.prim_func
    def shift(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        with T.sp_iter([I, J], "SS", "shift") as [i, j]:
            A[(i + 1) % m, j] = A[i, j]

    return shift


def scatter_csr2bsr(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SparseTIR's csr2bsr: A's nonzeros scattered into B through an index map."""

    @T.prim_func
    def csr2bsr(a: T.handle, b: T.handle, indptr_in: T.handle, indices_in: T.handle, indptr_out: T.handle,
                indices_out: T.handle, m: T.int32, n: T.int32, mb: T.int32, nb: T.int32, nnz: T.int32,
                nnzb: T.int32, blk: T.int32):  # fmt: skip
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr_in, indices_in), idtype)
        IB = T.dense_fixed(mb, idtype)
        JB = T.sparse_variable(IB, (nb, nnzb), (indptr_out, indices_out), idtype)
        BI = T.dense_fixed(blk, idtype)
        BJ = T.dense_fixed(blk, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (IB, JB, BI, BJ), dtype)
        with T.sp_iter([I, J], "SS", "csr2bsr") as [i, j]:
            B[i // blk, j // blk, i % blk, j % blk] = A[i, j]

    return csr2bsr


REJECTED = {
    "dense_iteration": (dense_to_csr, r"index 1 uses `j`, which iterates axis `Jd`, not `A`'s axis `J`"),
    "another_row": (shifted_row, r"with .* as its row at index 0"),
    "index_map_scatter": (scatter_csr2bsr, r"not an iterator of an axis, not `B`'s axis `JB`"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_writes_that_may_miss_the_structure_are_rejected(name):
    make, message = REJECTED[name]
    func = make()
    with pytest.raises(UnstoredWriteError, match=message) as info:
        sp.verify(func)
    assert "iterate" in str(info.value)  # the message shows the fix
    for target in ("cpu", "cuda"):
        with pytest.raises(UnstoredWriteError):
            sp.compile(func, target)
    with pytest.raises(UnstoredWriteError):
        sp.interpret(func, **_any_args(func))


def _any_args(func) -> dict:
    """Arguments of the right kinds (the call must fail on the function, not on them)."""
    A = scipy.sparse.csr_matrix(np.eye(4, dtype=np.float32))
    out = {}
    for p in func.params:
        if p.dtype == "handle":
            out[p.name] = A.indptr if "indptr" in p.name else A.indices if "indices" in p.name else A.data.copy()
        else:
            out[p.name] = 4
    return out


def _cases():
    matrices = edge_matrices()
    return [(name, idtype, dtype) for name in sorted(matrices) for idtype in ("int32", "int64")
            for dtype in ("float32", "float64")][::3]  # fmt: skip


@pytest.mark.parametrize(("name", "idtype", "dtype"), _cases())
def test_accepted_sparse_writes_agree_everywhere(name, idtype, dtype):
    """The gather form runs the same in the interpreter and the CPU kernel, and equals scipy."""
    A = edge_matrices()[name].astype(dtype)
    A.indptr, A.indices = A.indptr.astype(idtype), A.indices.astype(idtype)
    m, n = A.shape
    B = np.random.default_rng(0).standard_normal((m, n)).astype(dtype)
    func = sampled_copy(idtype, dtype)
    sp.verify(func)
    args = dict(b=B, indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)
    got_interp = np.full(A.nnz, np.nan, dtype)
    sp.interpret(func, a=got_interp, **args)
    got_cpu = np.full(A.nnz, np.nan, dtype)
    sp.compile(func, "cpu")(a=got_cpu, **args)
    expected = np.asarray(B[np.repeat(np.arange(m), np.diff(A.indptr)), A.indices] * 2, dtype=dtype)
    np.testing.assert_allclose(got_interp, expected, rtol=1e-6)
    np.testing.assert_array_equal(got_cpu, got_interp)
