"""One semantics for writes to coordinates a sparse buffer does not store.

Reading a sparse buffer where its structure stores nothing gives its default value; a write there
has no storage to go to. A Stage I write (store or atomic add) is provably stored when each sparse
or variable axis of the written buffer is indexed by an iterator that walks that axis's storage
(the axis itself, fused or attached, or an axis over the same sorted structure arrays), under the
iterator that gives it its row: those cost nothing extra. Every other write is a *checked write*
(`sp.verify(f).checked` lists it, with the reason): lowered to a search in the written buffer's
structure, a miss is the same `InputError` (buffer and coordinates) from the interpreter and the
kernels. The checked forms here agree between the interpreter and the CPU kernel on any input;
the accepted forms agree everywhere: interpreter, CPU kernel and CUDA kernel (Numba's simulator,
in a subprocess this file drives when run as a script) against numpy, on edge matrices (empty, no
nonzeros, empty rows), int32 and int64 indices. SparseTIR's csr2bsr and ragged bmm, checked writes
on consistent and inconsistent structures in every engine: tests/sparsetir_examples/.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # corpus, strategies

import json
import re
import traceback
import zlib

import corpus
import numpy as np
import pytest
import scipy.sparse
from cuda_support import simulated_run
from strategies import edge_matrices, make_csr

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.format.storage import eval_storage_shape


# ------------------------------------------------------------------------------- the user's case, checked forms
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
    def csr2bsr(
        a: T.handle,
        b: T.handle,
        indptr_in: T.handle,
        indices_in: T.handle,
        indptr_out: T.handle,
        indices_out: T.handle,
        m: T.int32,
        n: T.int32,
        mb: T.int32,
        nb: T.int32,
        nnz: T.int32,
        nnzb: T.int32,
        blk: T.int32,
    ):
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


def ell_from_dense(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """An ELL (sparse_fixed) output written from a dense iteration."""

    @T.prim_func
    def ell(a: T.handle, b: T.handle, indices: T.handle, m: T.int32, n: T.int32, row_len: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_fixed(I, (n, row_len), indices, idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([I, Jd], "SS", "ell") as [i, j]:
            A[i, j] = B[i, j]

    return ell


def ragged_from_dense(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """A ragged (dense_variable) output written at every row up to the longest: past a batch's
    own row count nothing is stored."""

    @T.prim_func
    def ragged(
        z: T.handle, w: T.handle, indptr: T.handle, batch: T.int32, max_rows: T.int32, nnz: T.int32, feat: T.int32
    ):
        Bt = T.dense_fixed(batch, idtype)
        I = T.dense_variable(Bt, (max_rows, nnz), indptr, idtype)
        Id = T.dense_fixed(max_rows, idtype)
        F = T.dense_fixed(feat, idtype)
        Z = T.match_sparse_buffer(z, (Bt, I, F), dtype)
        W = T.match_sparse_buffer(w, (Bt, Id, F), dtype)
        with T.sp_iter([Bt, Id, F], "SSS", "ragged") as [b, i, f]:
            Z[b, i, f] = W[b, i, f]

    return ragged


def transpose_scatter(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """A's entries scattered into its transpose's structure: `i` iterates `I`, not `IT`."""

    @T.prim_func
    def transpose(
        a: T.handle,
        at: T.handle,
        indptr: T.handle,
        indices: T.handle,
        indptr_t: T.handle,
        indices_t: T.handle,
        m: T.int32,
        n: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        IT = T.sparse_variable(Jd, (m, nnz), (indptr_t, indices_t), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        AT = T.match_sparse_buffer(at, (Jd, IT), dtype)
        with T.sp_iter([I, J], "SS", "transpose") as [i, j]:
            AT[j, i] = A[i, j]

    return transpose


def attached_wrong_row(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """`it` walks `IT` in the row of `j` (the attach target), but the write names row `i`."""

    @T.prim_func
    def attached(
        at: T.handle,
        b: T.handle,
        indptr: T.handle,
        indices: T.handle,
        indptr_t: T.handle,
        indices_t: T.handle,
        m: T.int32,
        n: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        IT = T.sparse_variable(Jd, (m, nnz), (indptr_t, indices_t), idtype)
        Id = T.dense_fixed(m, idtype)
        AT = T.match_sparse_buffer(at, (Jd, IT), dtype)
        B = T.match_sparse_buffer(b, (Jd, Id), dtype)
        with T.sp_iter([I, J, T.attach(IT, J)], "SSS", "attached") as [i, j, it]:
            AT[i, it] = B[j, it]

    return attached


def fused_other_structure(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """A fused walk over A's structure writing C, whose axis has structure arrays of its own."""

    @T.prim_func
    def fused(
        a: T.handle,
        c: T.handle,
        indptr: T.handle,
        indices: T.handle,
        indptr_c: T.handle,
        indices_c: T.handle,
        m: T.int32,
        n: T.int32,
        nnz: T.int32,
        nnz_c: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        JC = T.sparse_variable(I, (n, nnz_c), (indptr_c, indices_c), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        C = T.match_sparse_buffer(c, (I, JC), dtype)
        with T.sp_iter([T.fuse(I, J)], "SS", "fused") as [i, j]:
            C[i, j] = A[i, j]

    return fused


def shared_arrays_unsorted(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """C's axis shares A's structure arrays but is declared unsorted: a kernel could not find `j`
    in it by binary search, so the write is not provably stored."""

    @T.prim_func
    def unsorted(a: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype, sorted=False)
        JC = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        C = T.match_sparse_buffer(c, (I, JC), dtype)
        with T.sp_iter([I, J], "SS", "unsorted") as [i, j]:
            C[i, j] = A[i, j]

    return unsorted


def init_from_dense(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """The init of a reduction writes a sparse output at dense coordinates."""

    @T.prim_func
    def init(
        a: T.handle,
        x: T.handle,
        y: T.handle,
        indptr: T.handle,
        indices: T.handle,
        m: T.int32,
        n: T.int32,
        feat: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        X = T.match_sparse_buffer(x, (I, K), dtype)
        Y = T.match_sparse_buffer(y, (Jd, K), dtype)
        with T.sp_iter([I, Jd, K], "SSR", "init") as [i, j, k]:
            with T.init():
                A[i, j] = 0.0
            A[i, j] = A[i, j] + X[i, k] * Y[j, k]

    return init


def atomic_from_dense(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """An atomic add is a write too."""

    @T.prim_func
    def atomic(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([I, Jd], "SS", "atomic") as [i, j]:
            T.atomic_add(A[i, j], B[i, j])

    return atomic


def guarded_from_dense(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """A condition does not make a write stored: the verifier proves nothing about values."""

    @T.prim_func
    def guarded(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([I, Jd], "SS", "guarded") as [i, j]:
            if B[i, j] != T.cast(0, dtype):
                A[i, j] = B[i, j]

    return guarded


def shared_arrays_other_parent(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """`JC` shares `J`'s structure arrays, but `J`'s rows are positions of the sparse `K` while
    `JC`'s are coordinates of a dense root: the same arrays, another storage."""

    @T.prim_func
    def other_parent(
        a: T.handle,
        c: T.handle,
        indptr: T.handle,
        indices: T.handle,
        indptr_2: T.handle,
        indices_2: T.handle,
        m: T.int32,
        n: T.int32,
        n2: T.int32,
        nnz: T.int32,
        nnz_2: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        K = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        J = T.sparse_variable(K, (n2, nnz_2), (indptr_2, indices_2), idtype)
        IC = T.dense_fixed(n, idtype)
        JC = T.sparse_variable(IC, (n2, nnz_2), (indptr_2, indices_2), idtype)
        A = T.match_sparse_buffer(a, (I, K, J), dtype)
        C = T.match_sparse_buffer(c, (IC, JC), dtype)
        with T.sp_iter([I, K, J], "SSS", "other_parent") as [i, k, j]:
            C[k, j] = A[i, k, j]

    return other_parent


def fused_init_from_dense(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """The init of a fused "SR" group runs in a loop nest of its own (new iterators): its checked
    write stays checked there."""

    @T.prim_func
    def fused_init(
        a: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, indptr_c: T.handle, indices_c: T.handle,
        m: T.int32, n: T.int32, nnz: T.int32, nnz_c: T.int32, feat: T.int32,
    ):  # fmt: skip
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        K = T.dense_fixed(feat, idtype)
        KC = T.sparse_variable(I, (feat, nnz_c), (indptr_c, indices_c), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        C = T.match_sparse_buffer(c, (I, KC), dtype)
        with T.sp_iter([T.fuse(I, J), K], "SRS", "fused_init") as [i, j, k]:
            with T.init():
                C[i, k] = T.cast(0, dtype)
            C[i, k] = C[i, k] + A[i, j]

    return fused_init


# name -> (builder, what the verifier's note on the checked write says)
CHECKED = {
    "dense_iteration": (
        dense_to_csr,
        r"a write to `A` at index 1 uses `j`: expected an iterator of `A`'s sparse_variable axis `J`, but `j` "
        r"iterates axis `Jd`, so `A\[i, j\]` may name a coordinate `J` does not store",
    ),
    "another_row": (
        shifted_row,
        r"a write to `A` at index 0 uses `\(i \+ 1\) % m`: expected `i`, the row in which `j` walks `J`, but got "
        r"`\(i \+ 1\) % m`; another row may not store that coordinate",
    ),
    "index_map_scatter": (
        scatter_csr2bsr,
        r"a write to `B` at index 1 uses `j // blk`: expected an iterator of `B`'s sparse_variable axis `JB`, but "
        r"`j // blk` is an expression, so `B\[i // blk, j // blk, i % blk, j % blk\]` may name",
    ),
    "ell_from_dense": (ell_from_dense, r"`A`'s sparse_fixed axis `J`, but `j` iterates axis `Jd`"),
    "ragged_from_dense": (
        ragged_from_dense,
        r"a write to `Z` at index 1 uses `i`: expected an iterator of `Z`'s dense_variable axis `I`, but `i` "
        r"iterates axis `Id`",
    ),
    "transpose_scatter": (
        transpose_scatter,
        r"a write to `AT` at index 1 uses `i`: expected an iterator of `AT`'s sparse_variable axis `IT`, but `i` "
        r"iterates axis `I`",
    ),
    "attached_wrong_row": (
        attached_wrong_row,
        r"a write to `AT` at index 0 uses `i`: expected `j`, the row in which `it` walks `IT`, but got `i`",
    ),
    "fused_other_structure": (fused_other_structure, r"`C`'s sparse_variable axis `JC`, but `j` iterates axis `J`,"),
    "shared_arrays_unsorted": (
        shared_arrays_unsorted,
        r"but `j` iterates axis `J`, declared over the same structure arrays but not sorted",
    ),
    "shared_arrays_other_parent": (
        shared_arrays_other_parent,
        r"a write to `C` at index 1 uses `j`: expected an iterator of `C`'s sparse_variable axis `JC`, but `j` "
        r"iterates axis `J`",
    ),
    "init_from_dense": (init_from_dense, r"a write to `A` at index 1 uses `j`: .* but `j` iterates axis `Jd`"),
    "atomic_from_dense": (atomic_from_dense, r"an atomic add to `A` at index 1 uses `j`: "),
    "guarded_from_dense": (guarded_from_dense, r"a write to `A` at index 1 uses `j`: .*axis `Jd`"),
    "fused_init_from_dense": (
        fused_init_from_dense,
        r"a write to `C` at index 1 uses `k`: .* but `k` iterates axis `K`",
    ),
}


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_writes_that_may_miss_the_structure_are_checked(name):
    """Not refused: `sp.verify` lists the write as checked, with the reason; the interpreter and
    the CPU kernel then agree on any input, both writing the same values or both raising the same
    `InputError` (naming the buffer and the coordinates) and leaving outputs to the rule."""
    make, message = CHECKED[name]
    func = make()
    report = sp.verify(func)
    assert report.checked and all(c.iteration == func.body.name for c in report.checked)
    assert any(re.search(message, str(c)) for c in report.checked), str(report)
    kernel = sp.compile(func, "cpu")
    outcomes = []
    for run in (lambda kw: sp.interpret(func, **kw), lambda kw: kernel(**kw)):
        kwargs = _any_args(func)
        try:
            run(kwargs)
            outcomes.append(("ok", {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}))
        except sp.InputError as e:
            outcomes.append(("InputError", str(e)))
    (kind_i, got_i), (kind_c, got_c) = outcomes
    assert kind_i == kind_c, outcomes
    if kind_i == "InputError":
        assert got_i == got_c
        assert re.match(r"write to `\w+` at coordinates \(\d+(, \d+)*\), which its structure does not store", got_i)
    else:
        for k in got_i:
            np.testing.assert_array_equal(got_i[k], got_c[k], err_msg=k)


def _any_args(func) -> dict:
    """Arguments of the right kinds and sizes: every structure that of the 4 x 4 identity, every
    scalar 4 (an ELL row 1), every buffer's values 1, 2, 3, ... (so a write that lands shows)."""
    A = scipy.sparse.csr_matrix(np.eye(4, dtype=np.float32))
    scalars = {p: 1 if p.name == "row_len" else 4 for p in func.params if p.dtype != "handle"}
    out = {p.name: v for p, v in scalars.items()}
    for p in func.params:
        if p.dtype == "handle" and ("indptr" in p.name or "indices" in p.name):
            out[p.name] = A.indptr.copy() if "indptr" in p.name else A.indices.copy()
    for b in func.buffers:
        size = int(np.prod(eval_storage_shape(b, scalars)))
        out[b.data.name] = np.arange(1, size + 1, dtype=b.dtype)
    return out


# ---------------------------------------------------------------------------------------------- accepted forms
def fused_scale(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """A fused walk over the stored (i, j) pairs of A's own axes."""

    @T.prim_func
    def fused(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([T.fuse(I, J)], "SS", "fused") as [i, j]:
            A[i, j] = B[i, j] * T.cast(2, dtype)

    return fused


def nested_scale(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """The row iterator comes from an enclosing iteration."""

    @T.prim_func
    def nested(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        # Two iterations, one inside the other (one `with` of two would be one iteration).
        with T.sp_iter([I], "S", "rows") as [i]:  # noqa: SIM117
            with T.sp_iter([J], "S", "cols") as [j]:
                A[i, j] = B[i, j] * T.cast(2, dtype)

    return nested


def sddmm_shared_structure(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SDDMM whose output is declared over axes of its own that share A's structure arrays (the
    same stored coordinates, so `C[i, j]` is stored although `j` iterates A's axis)."""

    @T.prim_func
    def sddmm(
        a: T.handle,
        x: T.handle,
        y: T.handle,
        c: T.handle,
        indptr: T.handle,
        indices: T.handle,
        m: T.int32,
        n: T.int32,
        feat: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        IC = T.dense_fixed(m, idtype)
        JC = T.sparse_variable(IC, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        X = T.match_sparse_buffer(x, (I, K), dtype)
        Y = T.match_sparse_buffer(y, (Jd, K), dtype)
        C = T.match_sparse_buffer(c, (IC, JC), dtype)
        with T.sp_iter([I, J, K], "SSR", "sddmm") as [i, j, k]:
            with T.init():
                C[i, j] = 0.0
            C[i, j] = C[i, j] + A[i, j] * X[i, k] * Y[j, k]

    return sddmm


def attached_transpose(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """`T.attach(IT, J)`: `it` walks the transpose's row at the coordinate of `j`, so `AT[j, it]`
    is stored (written once per row `i` that holds `j`, always with the same value)."""

    @T.prim_func
    def attached(
        at: T.handle,
        b: T.handle,
        indptr: T.handle,
        indices: T.handle,
        indptr_t: T.handle,
        indices_t: T.handle,
        m: T.int32,
        n: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        IT = T.sparse_variable(Jd, (m, nnz), (indptr_t, indices_t), idtype)
        Id = T.dense_fixed(m, idtype)
        AT = T.match_sparse_buffer(at, (Jd, IT), dtype)
        B = T.match_sparse_buffer(b, (Jd, Id), dtype)
        with T.sp_iter([I, J, T.attach(IT, J)], "SSS", "attached") as [i, j, it]:
            AT[j, it] = B[j, it] * T.cast(2, dtype)

    return attached


def ell_gather(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """ELL: a sparse_fixed axis written by its own iterator."""

    @T.prim_func
    def ell(a: T.handle, b: T.handle, indices: T.handle, m: T.int32, n: T.int32, row_len: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_fixed(I, (n, row_len), indices, idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([I, J], "SS", "ell") as [i, j]:
            A[i, j] = B[i, j] * T.cast(2, dtype)

    return ell


def ragged_gather(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """A ragged batch (dense_variable rows) written by its own iterator, read from a padded array."""

    @T.prim_func
    def ragged(
        z: T.handle, w: T.handle, indptr: T.handle, batch: T.int32, max_rows: T.int32, nnz: T.int32, feat: T.int32
    ):
        Bt = T.dense_fixed(batch, idtype)
        I = T.dense_variable(Bt, (max_rows, nnz), indptr, idtype)
        Id = T.dense_fixed(max_rows, idtype)
        F = T.dense_fixed(feat, idtype)
        Z = T.match_sparse_buffer(z, (Bt, I, F), dtype)
        W = T.match_sparse_buffer(w, (Bt, Id, F), dtype)
        with T.sp_iter([Bt, I, F], "SSS", "ragged") as [b, i, f]:
            Z[b, i, f] = W[b, i, f] * T.cast(2, dtype)

    return ragged


def csf_gather(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """A 3-level CSF tensor (two compressed levels) written by its own iterators."""

    @T.prim_func
    def csf(
        a: T.handle,
        d: T.handle,
        indptr_j: T.handle,
        indices_j: T.handle,
        indptr_k: T.handle,
        indices_k: T.handle,
        m: T.int32,
        n1: T.int32,
        n2: T.int32,
        nnz_j: T.int32,
        nnz_k: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n1, nnz_j), (indptr_j, indices_j), idtype)
        K = T.sparse_variable(J, (n2, nnz_k), (indptr_k, indices_k), idtype)
        Jd = T.dense_fixed(n1, idtype)
        Kd = T.dense_fixed(n2, idtype)
        A = T.match_sparse_buffer(a, (I, J, K), dtype)
        D = T.match_sparse_buffer(d, (I, Jd, Kd), dtype)
        with T.sp_iter([I, J, K], "SSS", "csf") as [i, j, k]:
            A[i, j, k] = D[i, j, k] * T.cast(2, dtype)

    return csf


def _rows(A) -> np.ndarray:
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


def _csr_args(A, rng, idtype, dtype):
    m, n = A.shape
    kw = dict(
        a=np.full(A.nnz, np.nan, dtype),
        b=rng.standard_normal((m, n)).astype(dtype),
        indptr=A.indptr.astype(idtype),
        indices=A.indices.astype(idtype),
        m=m,
        n=n,
        nnz=A.nnz,
    )
    return kw, {"a": kw["b"][_rows(A), A.indices] * 2}


def _sddmm_args(A, rng, idtype, dtype, feat=5):
    m, n = A.shape
    kw = dict(
        a=A.data.astype(dtype),
        x=rng.standard_normal((m, feat)).astype(dtype),
        y=rng.standard_normal((n, feat)).astype(dtype),
        c=np.full(A.nnz, np.nan, dtype),
        indptr=A.indptr.astype(idtype),
        indices=A.indices.astype(idtype),
        m=m,
        n=n,
        feat=feat,
        nnz=A.nnz,
    )
    dots = np.einsum("ek,ek->e", kw["x"][_rows(A)].astype(np.float64), kw["y"][A.indices].astype(np.float64))
    return kw, {"c": kw["a"] * dots}


def _transpose_args(A, rng, idtype, dtype):
    m, n = A.shape
    At = scipy.sparse.csr_matrix(A.T)
    At.sort_indices()
    kw = dict(
        at=np.full(A.nnz, np.nan, dtype),
        b=rng.standard_normal((n, m)).astype(dtype),
        indptr=A.indptr.astype(idtype),
        indices=A.indices.astype(idtype),
        indptr_t=At.indptr.astype(idtype),
        indices_t=At.indices.astype(idtype),
        m=m,
        n=n,
        nnz=A.nnz,
    )
    return kw, {"at": kw["b"][_rows(At), At.indices] * 2}


def _ell_args(A, rng, idtype, dtype):
    m, n = A.shape
    _, indices, row_len = corpus.to_ell(A)
    kw = dict(
        a=np.full(m * row_len, np.nan, dtype),
        b=rng.standard_normal((m, n)).astype(dtype),
        indices=indices.ravel().astype(idtype),
        m=m,
        n=n,
        row_len=row_len,
    )
    return kw, {"a": (kw["b"][np.repeat(np.arange(m), row_len), indices.ravel()] * 2)}


def _ragged_args(A, rng, idtype, dtype, feat=3):
    """Batch b holds as many rows as row b of A stores entries (so A's empty rows are empty batches)."""
    m, n = A.shape
    kw = dict(
        z=np.full((A.nnz, feat), np.nan, dtype),
        w=rng.standard_normal((m, n, feat)).astype(dtype),
        indptr=A.indptr.astype(idtype),
        batch=m,
        max_rows=n,
        nnz=A.nnz,
        feat=feat,
    )
    local = np.arange(A.nnz) - np.repeat(A.indptr[:-1].astype(np.int64), np.diff(A.indptr))
    return kw, {"z": kw["w"][_rows(A), local] * 2}


def _csf_args(A, rng, idtype, dtype, split=2):
    m, n = A.shape
    csf = corpus.to_csf3(A, split)
    n1 = -(-n // split)
    kw = dict(
        a=np.full(A.nnz, np.nan, dtype),
        d=rng.standard_normal((m, n1, split)).astype(dtype),
        **{k: v.astype(idtype) for k, v in csf.items()},
        m=m,
        n1=n1,
        n2=split,
        nnz_j=len(csf["indices_j"]),
        nnz_k=A.nnz,
    )
    return kw, {"a": kw["d"][_rows(A), A.indices // split, A.indices % split] * 2}


ACCEPTED = {
    "csr_gather": (sampled_copy, _csr_args),
    "fused": (fused_scale, _csr_args),
    "nested": (nested_scale, _csr_args),
    "sddmm_shared_structure": (sddmm_shared_structure, _sddmm_args),
    "attached_transpose": (attached_transpose, _transpose_args),
    "ell": (ell_gather, _ell_args),
    "ragged": (ragged_gather, _ragged_args),
    "csf": (csf_gather, _csf_args),
}
DTYPES = (("int32", "float32"), ("int64", "float64"))


def _matrices() -> dict[str, scipy.sparse.csr_matrix]:
    """The edge matrices (empty, no nonzeros, empty rows, full rows) and one random matrix."""
    rng = np.random.default_rng(11)
    mask = rng.random((13, 17)) < 0.3
    mask[[2, 3, 9]] = False
    return {**edge_matrices(), "13x17_random": make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float32")}


def accepted_cases() -> list[str]:
    """`form/matrix/idtype-dtype`: every form on every matrix, the two dtype pairs alternating."""
    return [
        f"{form}/{matrix}/{'-'.join(DTYPES[k % 2])}"
        for form in ACCEPTED
        for k, matrix in enumerate(sorted(_matrices()))
    ]


def make_case(case: str) -> tuple[sp.PrimFunc, dict, dict[str, np.ndarray]]:
    """The function, fresh arguments and the numpy reference of each output (the same in every
    process: the simulator's subprocess builds them again)."""
    form, matrix, dtypes = case.split("/")
    idtype, dtype = dtypes.split("-")
    A = _matrices()[matrix]
    A = scipy.sparse.csr_matrix((A.data.astype(dtype), A.indices, A.indptr), shape=A.shape)
    build, make_args = ACCEPTED[form]
    kwargs, expected = make_args(A, np.random.default_rng(zlib.crc32(case.encode())), idtype, dtype)
    return build(idtype, dtype), kwargs, expected


def _run(runner, case: str) -> dict[str, np.ndarray]:
    func, kwargs, expected = make_case(case)
    runner(func, kwargs)
    return {name: kwargs[name] for name in expected}


def _interpret(func, kwargs) -> None:
    sp.interpret(func, **kwargs)


def _cpu(func, kwargs) -> None:
    sp.compile(func, "cpu")(**kwargs)


def _cuda(func, kwargs) -> None:
    sp.compile(func, "cuda")(**kwargs)


# ---------------------------------------------------------------------------------------------- the simulator
def simulate(out: Path) -> None:
    """Run every accepted case's CUDA kernel (Numba's simulator) and save the outputs to `out`
    (.npz) and "ok" or the traceback of each case to `out`.json."""
    outputs, results = {}, {}
    for case in accepted_cases():
        try:
            for name, value in _run(_cuda, case).items():
                outputs[f"{case}:{name}"] = value
            results[case] = "ok"
        except Exception:
            results[case] = traceback.format_exc()
    np.savez(out, **outputs)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """One simulator run of this file's `__main__` per pytest run (`cuda_support.simulated_run`)."""
    return simulated_run(tmp_path_factory, "unstored_writes", Path(__file__).resolve())


@pytest.mark.parametrize("case", accepted_cases())
def test_accepted_sparse_writes_agree_everywhere(case, simulated):
    """Interpreter, CPU kernel and CUDA kernel (simulated) write the same values, those of numpy,
    and nothing outside the structure (every output starts as NaN and is wholly written)."""
    func, _, expected = make_case(case)
    sp.verify(func)
    got_interp, got_cpu = _run(_interpret, case), _run(_cpu, case)
    results, sim = simulated
    if "__import__" in results:
        pytest.skip(f"the CUDA simulator cannot start here:\n{results['__import__']}")
    assert results.get(case) == "ok", f"`{case}` failed in the simulator:\n{results.get(case)}"
    tol = 1e-5 if "float32" in case else 1e-12  # SDDMM's dot products sum in different orders
    for name, want in expected.items():
        for runner, got in (("interpreter", got_interp[name]), ("CPU", got_cpu[name]), ("CUDA", sim[f"{case}:{name}"])):
            assert got.shape == want.shape, f"{runner}: {name}"
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{runner}: {name}")


def atomic_gather(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """`T.atomic_add` at A's own coordinates: as stored as a plain write there."""

    @T.prim_func
    def atomic(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        Jd = T.dense_fixed(n, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, Jd), dtype)
        with T.sp_iter([I, J], "SS", "atomic") as [i, j]:
            T.atomic_add(A[i, j], B[i, j])

    return atomic


def _atomic_case():
    A = _matrices()["13x17_random"]
    kwargs, _ = _csr_args(A, np.random.default_rng(3), "int64", "float64")
    kwargs["a"] = np.ones(A.nnz)
    return kwargs, 1 + kwargs["b"][_rows(A), A.indices]


def test_atomic_add_at_stored_coordinates_is_accepted():
    """The rule covers atomic adds the same way (the rejected form: `atomic_from_dense`)."""
    func = atomic_gather("int64", "float64")
    sp.verify(func)
    kwargs, expected = _atomic_case()
    sp.interpret(func, **kwargs)
    np.testing.assert_allclose(kwargs["a"], expected)


def test_atomic_add_at_stored_coordinates_in_the_cpu_kernel():
    """lower_sparse_iter translates a Stage I atomic add like a store (positions, not coordinates)."""
    kwargs, expected = _atomic_case()
    sp.compile(atomic_gather("int64", "float64"), "cpu")(**kwargs)
    np.testing.assert_allclose(kwargs["a"], expected)


def main() -> int:
    out = Path(sys.argv[1])
    try:
        from numba import config, cuda  # noqa: F401

        assert config.ENABLE_CUDASIM
    except Exception:
        out.with_suffix(".json").write_text(json.dumps({"__import__": traceback.format_exc()}))
        return 0
    simulate(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
