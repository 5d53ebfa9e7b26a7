"""The Stage I script corpus: SparseTIR's own operator set, with inputs and references.

Each operator is a factory `make_<op>(idtype="int32", dtype="float32")` that returns a
`@T.prim_func`; the index dtype of every axis and the value dtype of every floating-point buffer
are captured from the factory's arguments, so one script covers int32/int64 structure and
float32/float64 values.

`CASES` pairs each factory with:

- `make_args(A, rng, idtype, dtype, feat=4) -> (kwargs, outputs)`: the keyword arguments of
  `sp.interpret` (numpy arrays and Python ints) built from a CSR matrix `A` (already passed
  through `prepare_csr`), and the names of the arrays the script writes. Outputs are pre-filled
  with NaN so that an entry the interpreter forgets to write fails the comparison.
- `reference(A, kwargs) -> {output name: expected array}`: the same computation done with
  scipy/numpy in float64, independently of the interpreter, cast to the output dtype.

Every case builds its inputs from the CSR matrix: graph operators use its pattern and values;
the batched ragged matmul uses its row lengths as the ragged row counts of the batch; BSR, ELL
and the 3-level CSF formats are converted from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.ops import sddmm_script, spmm_script

F64 = np.float64

# Tolerances for comparing interpreter outputs with the float64 references.
TOLERANCES = {"float32": {"rtol": 1e-4, "atol": 1e-4}, "float64": {"rtol": 1e-9, "atol": 1e-9}}

# The initial value of a running maximum: below every value the corpus feeds in, finite in float32.
NEG_LARGE = -3.0e38


# ----------------------------------------------------------------------------------------------
# Scripts
# ----------------------------------------------------------------------------------------------


def make_csrmm(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SpMM: C = A @ B with A in CSR — the script `sp.ops.spmm` compiles."""
    return spmm_script(idtype, dtype)


def make_csrmm_dense_iter(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SpMM iterating every column densely: A is read at unstored coordinates (its default, 0)."""

    @T.prim_func
    def csrmm_dense_iter(
        a: T.handle,
        b: T.handle,
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
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, K), dtype)
        with T.sp_iter([I, J_detach, K], "SRS", "csrmm_dense_iter") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return csrmm_dense_iter


def make_csr_reduce(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Row sums of a CSR matrix, written with `+=`."""

    @T.prim_func
    def csr_reduce(
        a: T.handle,
        b: T.handle,
        indptr: T.handle,
        indices: T.handle,
        m: T.int32,
        n: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I,), dtype)
        with T.sp_iter([I, J], "SR", "csr_reduce") as [i, j]:
            with T.init():
                B[i] = 0.0
            B[i] += A[i, j]

    return csr_reduce


def make_segment_reduce(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Segment sums over a ragged (dense-variable) axis: no column indices at all."""

    @T.prim_func
    def segment_reduce(
        a: T.handle,
        b: T.handle,
        indptr: T.handle,
        m: T.int32,
        max_len: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.dense_variable(I, (max_len, nnz), indptr, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I,), dtype)
        with T.sp_iter([I, J], "SR", "segment_reduce") as [i, j]:
            with T.init():
                B[i] = 0.0
            B[i] = B[i] + A[i, j]

    return segment_reduce


def make_csr_element_wise(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """B = f(A) on the stored entries of A, f piecewise linear (a select on the sign)."""

    @T.prim_func
    def csr_element_wise(
        a: T.handle,
        b: T.handle,
        indptr: T.handle,
        indices: T.handle,
        m: T.int32,
        n: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, J), dtype)
        with T.sp_iter([I, J], "SS", "csr_element_wise") as [i, j]:
            B[i, j] = T.if_then_else(A[i, j] > 0.0, A[i, j] * 2.5, A[i, j] * 0.5)

    return csr_element_wise


def make_bsrmm(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Block-sparse SpMM: A in BSR with square `blk` x `blk` blocks, B and C blocked the same way."""

    @T.prim_func
    def bsrmm(
        a: T.handle,
        b: T.handle,
        c: T.handle,
        indptr: T.handle,
        indices: T.handle,
        mb: T.int32,
        nb: T.int32,
        nnzb: T.int32,
        blk: T.int32,
        feat: T.int32,
    ):
        I = T.dense_fixed(mb, idtype)
        J = T.sparse_variable(I, (nb, nnzb), (indptr, indices), idtype)
        J_detach = T.dense_fixed(nb, idtype)
        BI = T.dense_fixed(blk, idtype)
        BJ = T.dense_fixed(blk, idtype)
        F = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J, BI, BJ), dtype)
        B = T.match_sparse_buffer(b, (J_detach, BJ, F), dtype)
        C = T.match_sparse_buffer(c, (I, BI, F), dtype)
        with T.sp_iter([I, J, BI, BJ, F], "SRSRS", "bsrmm") as [i, j, bi, bj, f]:
            with T.init():
                C[i, bi, f] = 0.0
            C[i, bi, f] = C[i, bi, f] + A[i, j, bi, bj] * B[j, bj, f]

    return bsrmm


def make_ellmm(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SpMM with A in ELL: every row stores exactly `row_len` (sorted, distinct) columns."""

    @T.prim_func
    def ellmm(
        a: T.handle,
        b: T.handle,
        c: T.handle,
        indices: T.handle,
        m: T.int32,
        n: T.int32,
        row_len: T.int32,
        feat: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_fixed(I, (n, row_len), indices, idtype)
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, K), dtype)
        with T.sp_iter([I, J, K], "SRS", "ellmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return ellmm


def make_sddmm(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SDDMM: C = A * (X @ Y.T) sampled at the stored entries of A — the script `sp.ops.sddmm` compiles."""
    return sddmm_script(idtype, dtype)


def make_fused_sddmm(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SDDMM iterating the stored (i, j) pairs as one fused axis."""

    @T.prim_func
    def fused_sddmm(
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
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        X = T.match_sparse_buffer(x, (I, K), dtype)
        Y = T.match_sparse_buffer(y, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, J), dtype)
        with T.sp_iter([T.fuse(I, J), K], "SSR", "fused_sddmm") as [i, j, k]:
            with T.init():
                C[i, j] = 0.0
            C[i, j] = C[i, j] + A[i, j] * X[i, k] * Y[j, k]

    return fused_sddmm


def make_batched_matmul(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Batched matmul with ragged row counts: Z[b] = X[b] @ Y[b], X[b] has `indptr` rows."""

    @T.prim_func
    def batched_matmul(
        x: T.handle,
        y: T.handle,
        z: T.handle,
        indptr: T.handle,
        batch: T.int32,
        max_rows: T.int32,
        nnz: T.int32,
        inner: T.int32,
        feat: T.int32,
    ):
        B = T.dense_fixed(batch, idtype)
        I = T.dense_variable(B, (max_rows, nnz), indptr, idtype)
        K = T.dense_fixed(inner, idtype)
        F = T.dense_fixed(feat, idtype)
        X = T.match_sparse_buffer(x, (B, I, K), dtype)
        Y = T.match_sparse_buffer(y, (B, K, F), dtype)
        Z = T.match_sparse_buffer(z, (B, I, F), dtype)
        with T.sp_iter([B, I, F, K], "SSSR", "batched_matmul") as [b, i, f, k]:
            with T.init():
                Z[b, i, f] = 0.0
            Z[b, i, f] = Z[b, i, f] + X[b, i, k] * Y[b, k, f]

    return batched_matmul


def make_hyper_gnn(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Hyper-graph message passing Y = H @ (H.T @ X), H the node x hyperedge incidence pattern.

    `J` walks the hyperedges of node `i`; the attached axis `I_T` walks the nodes of hyperedge
    `j` (the transpose's structure, rows indexed by the coordinate of `j`).
    """

    @T.prim_func
    def hyper_gnn(
        x: T.handle,
        y: T.handle,
        indptr: T.handle,
        indices: T.handle,
        indptr_t: T.handle,
        indices_t: T.handle,
        num_nodes: T.int32,
        num_edges: T.int32,
        nnz: T.int32,
        feat: T.int32,
    ):
        I = T.dense_fixed(num_nodes, idtype)
        J = T.sparse_variable(I, (num_edges, nnz), (indptr, indices), idtype)
        J_detach = T.dense_fixed(num_edges, idtype)
        I_T = T.sparse_variable(J_detach, (num_nodes, nnz), (indptr_t, indices_t), idtype)
        F = T.dense_fixed(feat, idtype)
        X = T.match_sparse_buffer(x, (I, F), dtype)
        Y = T.match_sparse_buffer(y, (I, F), dtype)
        with T.sp_iter([I, F, J, T.attach(I_T, J)], "SSRR", "hyper_gnn") as [i, f, j, it]:
            with T.init():
                Y[i, f] = 0.0
            Y[i, f] = Y[i, f] + X[it, f]

    return hyper_gnn


def make_rgcn(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """RGCN, homogeneous graph: each edge carries a relation id E that selects its weight."""

    @T.prim_func
    def rgcn(
        etype: T.handle,
        w: T.handle,
        x: T.handle,
        y: T.handle,
        indptr: T.handle,
        indices: T.handle,
        m: T.int32,
        n: T.int32,
        num_rels: T.int32,
        feat_in: T.int32,
        feat_out: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        J_detach = T.dense_fixed(n, idtype)
        R = T.dense_fixed(num_rels, idtype)
        F_in = T.dense_fixed(feat_in, idtype)
        F_out = T.dense_fixed(feat_out, idtype)
        E = T.match_sparse_buffer(etype, (I, J), idtype)
        W = T.match_sparse_buffer(w, (R, F_out, F_in), dtype)
        X = T.match_sparse_buffer(x, (J_detach, F_in), dtype)
        Y = T.match_sparse_buffer(y, (I, F_out), dtype)
        with T.sp_iter([I, F_out, J, F_in], "SSRR", "rgcn") as [i, fo, j, fi]:
            with T.init():
                Y[i, fo] = 0.0
            Y[i, fo] = Y[i, fo] + W[E[i, j], fo, fi] * X[j, fi]

    return rgcn


def make_rgcn_hetero(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """RGCN, heterogeneous graph: edges split by relation into a 3-level CSF (R, I, J).

    The relation axis is spatial and sits above the destination row, so one row of Y is
    accumulated by several relations: a separate iteration zero-fills Y, and the accumulation
    has no init.
    """

    @T.prim_func
    def rgcn_hetero(
        w: T.handle,
        x: T.handle,
        y: T.handle,
        indptr_i: T.handle,
        indices_i: T.handle,
        indptr_j: T.handle,
        indices_j: T.handle,
        m: T.int32,
        n: T.int32,
        num_rels: T.int32,
        feat_in: T.int32,
        feat_out: T.int32,
        nnz_i: T.int32,
        nnz_j: T.int32,
    ):
        R = T.dense_fixed(num_rels, idtype)
        I = T.sparse_variable(R, (m, nnz_i), (indptr_i, indices_i), idtype)
        J = T.sparse_variable(I, (n, nnz_j), (indptr_j, indices_j), idtype)
        I_detach = T.dense_fixed(m, idtype)
        J_detach = T.dense_fixed(n, idtype)
        F_in = T.dense_fixed(feat_in, idtype)
        F_out = T.dense_fixed(feat_out, idtype)
        W = T.match_sparse_buffer(w, (R, F_out, F_in), dtype)
        X = T.match_sparse_buffer(x, (J_detach, F_in), dtype)
        Y = T.match_sparse_buffer(y, (I_detach, F_out), dtype)
        with T.sp_iter([I_detach, F_out], "SS", "rgcn_hetero_zero") as [i, fo]:
            Y[i, fo] = 0.0
        with T.sp_iter([F_out, R, I, J, F_in], "SSSRR", "rgcn_hetero") as [fo, r, i, j, fi]:
            Y[i, fo] = Y[i, fo] + W[r, fo, fi] * X[j, fi]

    return rgcn_hetero


def make_sparse_softmax(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Row-wise softmax over the stored entries: max-subtracted, one nested iteration per pass."""

    @T.prim_func
    def sparse_softmax(
        a: T.handle,
        b: T.handle,
        indptr: T.handle,
        indices: T.handle,
        m: T.int32,
        n: T.int32,
        nnz: T.int32,
    ):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, J), dtype)
        row_max = T.alloc_sparse_buffer((I,), dtype, "global")
        row_sum = T.alloc_sparse_buffer((I,), dtype, "global")
        with T.sp_iter([I], "S", "sparse_softmax") as [i]:
            with T.sp_iter([J], "R", "row_max") as [j]:
                with T.init():
                    row_max[i] = T.cast(NEG_LARGE, dtype)
                row_max[i] = T.max(row_max[i], A[i, j])
            with T.sp_iter([J], "R", "row_sum") as [j]:
                with T.init():
                    row_sum[i] = 0.0
                row_sum[i] = row_sum[i] + T.exp(A[i, j] - row_max[i])
            with T.sp_iter([J], "S", "row_div") as [j]:
                B[i, j] = T.exp(A[i, j] - row_max[i]) / row_sum[i]

    return sparse_softmax


def make_square_sum(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Per-row sum of squares of a 3-level CSF tensor (I dense, J and K compressed)."""

    @T.prim_func
    def square_sum(
        a: T.handle,
        b: T.handle,
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
        A = T.match_sparse_buffer(a, (I, J, K), dtype)
        B = T.match_sparse_buffer(b, (I,), dtype)
        with T.sp_iter([I, J, K], "SRR", "square_sum") as [i, j, k]:
            with T.init():
                B[i] = 0.0
            B[i] = B[i] + A[i, j, k] * A[i, j, k]

    return square_sum


def make_csr2bsr(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """Format copy: fill a BSR matrix whose block structure is given from a CSR matrix, cell by
    cell over the BSR structure (a gather: reading A where it stores nothing gives 0, the padding).
    SparseTIR's own version scatters A's nonzeros into B through `i // blk, j // blk`; the
    verifier rejects that (a write the structure may not store), see tests/ir/test_unstored_writes.py."""

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
        with T.sp_iter([IB, JB, BI, BJ], "SSSS", "csr2bsr") as [ib, jb, bi, bj]:
            B[ib, jb, bi, bj] = A[ib * blk + bi, jb * blk + bj]

    return csr2bsr


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def prepare_csr(A, idtype: str, dtype: str) -> scipy.sparse.csr_matrix:
    """A canonical copy of `A` (sorted indices, no duplicates) with the given dtypes.

    scipy narrows int64 index arrays to int32 when the values fit, so they are set afterwards.
    """
    A = scipy.sparse.csr_matrix(A, copy=True)
    A.sum_duplicates()
    A.sort_indices()
    out = scipy.sparse.csr_matrix((A.data.astype(dtype), A.indices, A.indptr), shape=A.shape)
    out.indices = np.ascontiguousarray(A.indices, dtype=idtype)
    out.indptr = np.ascontiguousarray(A.indptr, dtype=idtype)
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def _as64(A) -> scipy.sparse.csr_matrix:
    """A's values in float64 (structure unchanged), for references."""
    return scipy.sparse.csr_matrix((A.data.astype(F64), A.indices, A.indptr), shape=A.shape)


def _pattern64(A) -> scipy.sparse.csr_matrix:
    """A's pattern with ones as values, in float64."""
    return scipy.sparse.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)


def _idx(array, idtype: str) -> np.ndarray:
    """A fresh C-contiguous copy, so callers may mutate arguments without touching `A`."""
    return np.array(array, dtype=idtype, order="C", copy=True)


def _rand(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def _nan(shape, dtype: str) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def _row_ids(A) -> np.ndarray:
    """The row of every stored entry, in storage order."""
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _padded_bsr(A, blk: int) -> scipy.sparse.bsr_matrix:
    """A padded with zero rows/columns to multiples of `blk`, as BSR with sorted block columns."""
    m, n = A.shape
    mp, np_ = _ceil_div(m, blk) * blk, _ceil_div(n, blk) * blk
    indptr = np.concatenate([A.indptr, np.full(mp - m, A.indptr[-1], dtype=A.indptr.dtype)])
    padded = scipy.sparse.csr_matrix((A.data, A.indices, indptr), shape=(mp, np_))
    bsr = padded.tobsr(blocksize=(blk, blk))
    bsr.sort_indices()
    return bsr


def to_ell(A) -> tuple[np.ndarray, np.ndarray, int]:
    """ELL form of a CSR matrix: every row padded to the longest row.

    Padding uses the smallest column ids not already in the row, with zero values, so each row's
    columns stay distinct and strictly increasing. Returns (values (m, L), indices (m, L), L).
    """
    m = A.shape[0]
    row_len = int(np.diff(A.indptr).max()) if m > 0 else 0
    values = np.zeros((m, row_len), dtype=A.dtype)
    indices = np.zeros((m, row_len), dtype=np.int64)
    for r in range(m):
        lo, hi = int(A.indptr[r]), int(A.indptr[r + 1])
        cols = A.indices[lo:hi].astype(np.int64)
        # At most hi - lo of the first row_len columns are taken, so enough remain free.
        extra = np.setdiff1d(np.arange(row_len), cols)[: row_len - (hi - lo)]
        all_cols = np.concatenate([cols, extra])
        all_vals = np.concatenate([A.data[lo:hi], np.zeros(len(extra), dtype=A.dtype)])
        order = np.argsort(all_cols, kind="stable")
        indices[r] = all_cols[order]
        values[r] = all_vals[order]
    return values, indices, row_len


def to_csf_by_relation(A, etype: np.ndarray, num_rels: int) -> dict[str, np.ndarray]:
    """Split A's edges by relation into a 3-level CSF (R dense, I compressed, J compressed).

    Level I of relation r lists the rows with at least one edge of type r (sorted); level J
    lists those edges' columns (sorted, as in A).
    """
    rows, cols = _row_ids(A), A.indices.astype(np.int64)
    indptr_i, indices_i, counts_j, indices_j = [0], [], [], []
    for r in range(num_rels):
        sel = etype == r
        rows_r, counts_r = np.unique(rows[sel], return_counts=True)
        indptr_i.append(indptr_i[-1] + len(rows_r))
        indices_i.append(rows_r)
        counts_j.append(counts_r)
        indices_j.append(cols[sel])
    counts = np.concatenate(counts_j) if counts_j else np.zeros(0, dtype=np.int64)
    return {
        "indptr_i": np.asarray(indptr_i, dtype=np.int64),
        "indices_i": np.concatenate(indices_i) if indices_i else np.zeros(0, dtype=np.int64),
        "indptr_j": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        "indices_j": np.concatenate(indices_j) if indices_j else np.zeros(0, dtype=np.int64),
    }


def to_csf3(A, split: int) -> dict[str, np.ndarray]:
    """A 2-D CSR matrix as a 3-level CSF tensor: entry (i, c) becomes (i, c // split, c % split).

    Columns are sorted within a row, so the entries of one (i, c // split) group are contiguous and
    their c % split increase.
    """
    rows, cols = _row_ids(A), A.indices.astype(np.int64)
    groups = cols // split
    starts = np.ones(A.nnz, dtype=bool)
    if A.nnz > 1:
        starts[1:] = (rows[1:] != rows[:-1]) | (groups[1:] != groups[:-1])
    start_pos = np.flatnonzero(starts)
    groups_per_row = np.bincount(rows[start_pos], minlength=A.shape[0])
    return {
        "indptr_j": np.concatenate([[0], np.cumsum(groups_per_row)]).astype(np.int64),
        "indices_j": groups[start_pos],
        "indptr_k": np.append(start_pos, A.nnz).astype(np.int64),
        "indices_k": cols % split,
    }


# ----------------------------------------------------------------------------------------------
# Arguments and references, one pair per operator
# ----------------------------------------------------------------------------------------------


def _csrmm_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    kwargs = {
        "a": A.data.copy(),
        "b": _rand(rng, (n, feat), dtype),
        "c": _nan((m, feat), dtype),
        "indptr": _idx(A.indptr, idtype),
        "indices": _idx(A.indices, idtype),
        "m": m,
        "n": n,
        "feat": feat,
        "nnz": A.nnz,
    }
    return kwargs, ("c",)


def _csrmm_ref(A, kw):
    return {"c": (_as64(A) @ kw["b"].astype(F64)).astype(A.dtype)}


def _csr_reduce_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    kwargs = {
        "a": A.data.copy(),
        "b": _nan((m,), dtype),
        "indptr": _idx(A.indptr, idtype),
        "indices": _idx(A.indices, idtype),
        "m": m,
        "n": n,
        "nnz": A.nnz,
    }
    return kwargs, ("b",)


def _row_sum_ref(A, kw):
    return {"b": np.asarray(_as64(A).sum(axis=1)).reshape(-1).astype(A.dtype)}


def _segment_reduce_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    kwargs = {
        "a": A.data.copy(),
        "b": _nan((m,), dtype),
        "indptr": _idx(A.indptr, idtype),
        "m": m,
        "max_len": n,  # a row of a canonical CSR matrix has at most n entries
        "nnz": A.nnz,
    }
    return kwargs, ("b",)


def _element_wise_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    kwargs = {
        "a": A.data.copy(),
        "b": _nan((A.nnz,), dtype),
        "indptr": _idx(A.indptr, idtype),
        "indices": _idx(A.indices, idtype),
        "m": m,
        "n": n,
        "nnz": A.nnz,
    }
    return kwargs, ("b",)


def _element_wise_ref(A, kw):
    a = A.data.astype(F64)
    return {"b": np.where(a > 0, a * 2.5, a * 0.5).astype(A.dtype)}


def _bsrmm_args(A, rng, idtype, dtype, feat=4):
    blk = int(rng.integers(2, 5))
    bsr = _padded_bsr(A, blk)
    mb, nb = bsr.shape[0] // blk, bsr.shape[1] // blk
    kwargs = {
        "a": np.ascontiguousarray(bsr.data, dtype=dtype),
        "b": _rand(rng, (nb, blk, feat), dtype),
        "c": _nan((mb, blk, feat), dtype),
        "indptr": _idx(bsr.indptr, idtype),
        "indices": _idx(bsr.indices, idtype),
        "mb": mb,
        "nb": nb,
        "nnzb": len(bsr.indices),
        "blk": blk,
        "feat": feat,
    }
    return kwargs, ("c",)


def _bsrmm_ref(A, kw):
    # Independent of the BSR arrays: the padded product computed from the CSR matrix.
    blk, mb, feat = kw["blk"], kw["mb"], kw["feat"]
    m, n = A.shape
    b = kw["b"].astype(F64).reshape(-1, feat)[:n]
    c = np.zeros((mb * blk, feat))
    c[:m] = _as64(A) @ b
    return {"c": c.reshape(mb, blk, feat).astype(A.dtype)}


def _ellmm_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    values, indices, row_len = to_ell(A)
    kwargs = {
        "a": values.reshape(-1).astype(dtype),
        "b": _rand(rng, (n, feat), dtype),
        "c": _nan((m, feat), dtype),
        "indices": _idx(indices.reshape(-1), idtype),
        "m": m,
        "n": n,
        "row_len": row_len,
        "feat": feat,
    }
    return kwargs, ("c",)


def _sddmm_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    kwargs = {
        "a": A.data.copy(),
        "x": _rand(rng, (m, feat), dtype),
        "y": _rand(rng, (n, feat), dtype),
        "c": _nan((A.nnz,), dtype),
        "indptr": _idx(A.indptr, idtype),
        "indices": _idx(A.indices, idtype),
        "m": m,
        "n": n,
        "feat": feat,
        "nnz": A.nnz,
    }
    return kwargs, ("c",)


def _sddmm_ref(A, kw):
    x, y = kw["x"].astype(F64), kw["y"].astype(F64)
    dots = np.einsum("ek,ek->e", x[_row_ids(A)], y[A.indices])
    return {"c": (A.data.astype(F64) * dots).astype(A.dtype)}


def _batched_matmul_args(A, rng, idtype, dtype, feat=4):
    # Batch b has as many rows as row b of A has entries: ragged, with empty members.
    batch, n = A.shape
    inner = max(1, feat - 1)
    kwargs = {
        "x": _rand(rng, (A.nnz, inner), dtype),
        "y": _rand(rng, (batch, inner, feat), dtype),
        "z": _nan((A.nnz, feat), dtype),
        "indptr": _idx(A.indptr, idtype),
        "batch": batch,
        "max_rows": n,
        "nnz": A.nnz,
        "inner": inner,
        "feat": feat,
    }
    return kwargs, ("z",)


def _batched_matmul_ref(A, kw):
    x, y = kw["x"].astype(F64), kw["y"].astype(F64)
    member = _row_ids(A)  # batch member of every stored row
    return {"z": np.einsum("rk,rkf->rf", x, y[member]).astype(A.dtype)}


def _hyper_gnn_args(A, rng, idtype, dtype, feat=4):
    num_nodes, num_edges = A.shape
    At = A.T.tocsr()
    At.sort_indices()
    kwargs = {
        "x": _rand(rng, (num_nodes, feat), dtype),
        "y": _nan((num_nodes, feat), dtype),
        "indptr": _idx(A.indptr, idtype),
        "indices": _idx(A.indices, idtype),
        "indptr_t": _idx(At.indptr, idtype),
        "indices_t": _idx(At.indices, idtype),
        "num_nodes": num_nodes,
        "num_edges": num_edges,
        "nnz": A.nnz,
        "feat": feat,
    }
    return kwargs, ("y",)


def _hyper_gnn_ref(A, kw):
    H = _pattern64(A)
    return {"y": (H @ (H.T @ kw["x"].astype(F64))).astype(A.dtype)}


NUM_RELS = 3


def _rgcn_weights(rng, A, dtype, feat):
    feat_in, feat_out = feat, max(1, feat - 1)
    w = _rand(rng, (NUM_RELS, feat_out, feat_in), dtype)
    x = _rand(rng, (A.shape[1], feat_in), dtype)
    return w, x, feat_in, feat_out


def _rgcn_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    etype = rng.integers(0, NUM_RELS, size=A.nnz).astype(idtype)
    w, x, feat_in, feat_out = _rgcn_weights(rng, A, dtype, feat)
    kwargs = {
        "etype": etype,
        "w": w,
        "x": x,
        "y": _nan((m, feat_out), dtype),
        "indptr": _idx(A.indptr, idtype),
        "indices": _idx(A.indices, idtype),
        "m": m,
        "n": n,
        "num_rels": NUM_RELS,
        "feat_in": feat_in,
        "feat_out": feat_out,
        "nnz": A.nnz,
    }
    return kwargs, ("y",)


def _rgcn_ref(A, kw):
    w, x = kw["w"].astype(F64), kw["x"].astype(F64)
    y = np.zeros((A.shape[0], w.shape[1]))
    for r in range(w.shape[0]):
        A_r = scipy.sparse.csr_matrix(((kw["etype"] == r).astype(F64), A.indices, A.indptr), shape=A.shape)
        y += A_r @ x @ w[r].T
    return {"y": y.astype(A.dtype)}


def _rgcn_hetero_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    etype = rng.integers(0, NUM_RELS, size=A.nnz)
    csf = to_csf_by_relation(A, etype, NUM_RELS)
    w, x, feat_in, feat_out = _rgcn_weights(rng, A, dtype, feat)
    kwargs = {
        "w": w,
        "x": x,
        "y": _nan((m, feat_out), dtype),
        **{name: _idx(arr, idtype) for name, arr in csf.items()},
        "m": m,
        "n": n,
        "num_rels": NUM_RELS,
        "feat_in": feat_in,
        "feat_out": feat_out,
        "nnz_i": len(csf["indices_i"]),
        "nnz_j": len(csf["indices_j"]),
    }
    return kwargs, ("y",)


def _rgcn_hetero_ref(A, kw):
    # Decode the CSF back into one COO matrix per relation (the edge types are not an argument).
    indptr_i, indices_i = kw["indptr_i"].astype(np.int64), kw["indices_i"].astype(np.int64)
    indptr_j, indices_j = kw["indptr_j"].astype(np.int64), kw["indices_j"].astype(np.int64)
    w, x = kw["w"].astype(F64), kw["x"].astype(F64)
    rel_of_row = np.repeat(np.arange(w.shape[0]), np.diff(indptr_i))
    rel_of_edge = np.repeat(rel_of_row, np.diff(indptr_j))
    row_of_edge = np.repeat(indices_i, np.diff(indptr_j))
    y = np.zeros((A.shape[0], w.shape[1]))
    for r in range(w.shape[0]):
        sel = rel_of_edge == r
        A_r = scipy.sparse.coo_matrix((np.ones(sel.sum()), (row_of_edge[sel], indices_j[sel])), shape=A.shape).tocsr()
        y += A_r @ x @ w[r].T
    return {"y": y.astype(A.dtype)}


def _softmax_args(A, rng, idtype, dtype, feat=4):
    # Random values, so the row maximum matters (the shipped graphs store only ones).
    m, n = A.shape
    kwargs = {
        "a": (4.0 * _rand(rng, (A.nnz,), dtype)).astype(dtype),
        "b": _nan((A.nnz,), dtype),
        "indptr": _idx(A.indptr, idtype),
        "indices": _idx(A.indices, idtype),
        "m": m,
        "n": n,
        "nnz": A.nnz,
    }
    return kwargs, ("b",)


def _softmax_ref(A, kw):
    a = kw["a"].astype(F64)
    out = np.empty_like(a)
    for r in range(A.shape[0]):
        lo, hi = int(A.indptr[r]), int(A.indptr[r + 1])
        if lo == hi:
            continue
        e = np.exp(a[lo:hi] - a[lo:hi].max())
        out[lo:hi] = e / e.sum()
    return {"b": out.astype(A.dtype)}


CSF_SPLIT = 4


def _square_sum_args(A, rng, idtype, dtype, feat=4):
    m, n = A.shape
    csf = to_csf3(A, CSF_SPLIT)
    kwargs = {
        "a": A.data.copy(),
        "b": _nan((m,), dtype),
        **{name: _idx(arr, idtype) for name, arr in csf.items()},
        "m": m,
        "n1": _ceil_div(n, CSF_SPLIT),
        "n2": CSF_SPLIT,
        "nnz_j": len(csf["indices_j"]),
        "nnz_k": A.nnz,
    }
    return kwargs, ("b",)


def _square_sum_ref(A, kw):
    squares = _as64(A).multiply(_as64(A))
    return {"b": np.asarray(squares.sum(axis=1)).reshape(-1).astype(A.dtype)}


def _csr2bsr_args(A, rng, idtype, dtype, feat=4):
    m = A.shape[0]
    blk = int(rng.integers(2, 5))
    bsr = _padded_bsr(A, blk)
    nnzb = len(bsr.indices)
    mb, nb = bsr.shape[0] // blk, bsr.shape[1] // blk
    # A with the padded shape (empty rows and columns added), so that every cell of a block is a
    # coordinate of A: B reads it and gets 0 where A stores nothing.
    indptr = np.concatenate([A.indptr, np.full(mb * blk - m, A.nnz, dtype=A.indptr.dtype)])
    kwargs = {
        "a": A.data.copy(),
        "b": np.full((nnzb, blk, blk), np.nan, dtype=dtype),
        "indptr_in": _idx(indptr, idtype),
        "indices_in": _idx(A.indices, idtype),
        "indptr_out": _idx(bsr.indptr, idtype),
        "indices_out": _idx(bsr.indices, idtype),
        "m": mb * blk,
        "n": nb * blk,
        "mb": mb,
        "nb": nb,
        "nnz": A.nnz,
        "nnzb": nnzb,
        "blk": blk,
    }
    return kwargs, ("b",)


def _csr2bsr_ref(A, kw):
    bsr = _padded_bsr(A, kw["blk"])
    return {"b": np.asarray(bsr.data, dtype=A.dtype).reshape(-1, kw["blk"], kw["blk"])}


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------

MakeArgs = Callable[..., tuple[dict, tuple[str, ...]]]
Reference = Callable[[scipy.sparse.csr_matrix, dict], dict[str, np.ndarray]]

# Shipped matrices: square graphs, rectangular (lp_afiro 27x51, ash219 219x85), empty rows.
SMALL = ("karate", "lp_afiro", "ash219", "Erdos971", "email-Eu-core")
MEDIUM = ("cora", "citeseer")


@dataclass(frozen=True)
class Case:
    """One corpus operator: its script factory, how to build its arguments, its reference."""

    name: str
    factory: Callable[..., sp.PrimFunc]
    make_args: MakeArgs
    reference: Reference
    matrices: tuple[str, ...] = SMALL + MEDIUM

    def build(self, idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
        return self.factory(idtype, dtype)


CASES: tuple[Case, ...] = (
    Case("csrmm", make_csrmm, _csrmm_args, _csrmm_ref),
    Case("csrmm_dense_iter", make_csrmm_dense_iter, _csrmm_args, _csrmm_ref, SMALL[:4]),
    Case("csr_reduce", make_csr_reduce, _csr_reduce_args, _row_sum_ref),
    Case("segment_reduce", make_segment_reduce, _segment_reduce_args, _row_sum_ref),
    Case("csr_element_wise", make_csr_element_wise, _element_wise_args, _element_wise_ref),
    Case("bsrmm", make_bsrmm, _bsrmm_args, _bsrmm_ref),
    Case("ellmm", make_ellmm, _ellmm_args, _csrmm_ref),
    Case("sddmm", make_sddmm, _sddmm_args, _sddmm_ref),
    Case("fused_sddmm", make_fused_sddmm, _sddmm_args, _sddmm_ref),
    Case("batched_matmul", make_batched_matmul, _batched_matmul_args, _batched_matmul_ref),
    Case("hyper_gnn", make_hyper_gnn, _hyper_gnn_args, _hyper_gnn_ref),
    Case("rgcn", make_rgcn, _rgcn_args, _rgcn_ref),
    Case("rgcn_hetero", make_rgcn_hetero, _rgcn_hetero_args, _rgcn_hetero_ref),
    Case("sparse_softmax", make_sparse_softmax, _softmax_args, _softmax_ref),
    Case("square_sum", make_square_sum, _square_sum_args, _square_sum_ref),
    Case("csr2bsr", make_csr2bsr, _csr2bsr_args, _csr2bsr_ref),
)

CASES_BY_NAME: dict[str, Case] = {case.name: case for case in CASES}
