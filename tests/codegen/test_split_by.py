"""`split_by` on a parallel loop (CPU): one contiguous range of rows of equal weight per thread.

Checked: `split_bound` against a direct computation of the ranges (hypothesis, empty rows, one
row holding everything, no rows); the generated loop and that Numba caches it; the `_split`
schedules equal scipy on edge matrices (no rows, empty rows, one full row, rectangular, int64 /
float64), on one and all threads; bad annotations are named errors; the tuner's model of the
split matches the ranges the kernel runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import csr_matrices, split_matrices

import sparsetir_py as sp
from sparsetir_py.codegen.cpu import SPLIT_PARTS
from sparsetir_py.ops import spmm_script
from sparsetir_py.runtime.cpu_intrinsics import split_bound
from sparsetir_py.tune import Structure


def _ranges(indptr: np.ndarray, parts: int) -> list[tuple[int, int]]:
    m = len(indptr) - 1
    return [(split_bound(indptr, m, p, parts), split_bound(indptr, m, p + 1, parts)) for p in range(parts)]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 50), max_size=40), parts=st.integers(1, 9), offset=st.integers(0, 5))
def test_split_bound_covers_every_row_once_in_ranges_of_equal_weight(lengths, parts, offset):
    """The ranges are contiguous, in order, cover rows 0..m once, and each weighs (nonzeros + rows)
    at most an even share plus the heaviest row; indptr need not start at 0."""
    indptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]) + offset
    ranges = _ranges(indptr.astype(np.int32), parts)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(lo <= hi for lo, hi in ranges)
    weight = np.asarray(lengths, np.int64) + 1
    total, heaviest = int(weight.sum()), int(weight.max(initial=0))
    for lo, hi in ranges:
        assert weight[lo:hi].sum() <= total / parts + heaviest


def test_split_bound_edges():
    assert _ranges(np.array([0], np.int64), 4) == [(0, 0)] * 4  # no rows
    assert _ranges(np.array([0, 0, 0, 0]), 2) == [(0, 1), (1, 3)]  # empty rows weigh one each
    # One row holds almost everything: it cannot be shared, its neighbours go to the other part.
    assert _ranges(np.array([0, 1, 101, 102]), 2) == [(0, 2), (2, 3)]


def test_generated_loop_is_cacheable():
    from schedules.spmm import csr_cpu_rows_split

    kernel = sp.compile(spmm_script(), "cpu", schedule=csr_cpu_rows_split)
    assert f"numba.prange({SPLIT_PARTS})" in kernel.source and "split_bound(J_indptr, m, i_part," in kernel.source
    assert "cache=True" in kernel.source and "get_num_threads" not in kernel.source
    A = sps.random(40, 30, density=0.2, format="csr", dtype=np.float32, random_state=1)
    B = np.random.default_rng(2).standard_normal((30, 5)).astype(np.float32)
    C = np.full((40, 5), np.nan, np.float32)
    kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=40, n=30, feat=5, nnz=A.nnz)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)


SPLIT_SCHEDULES = ["csr_cpu_rows_split", "csr_cpu_rows_split_x4", "csr_cpu_rows_split_x4_fixed"]


@pytest.mark.parametrize("name", SPLIT_SCHEDULES)
@pytest.mark.parametrize("types", [("int32", "float32"), ("int64", "float64")])
@pytest.mark.parametrize("threads", [1, 2])
def test_split_schedules_equal_scipy_on_edge_matrices(name, types, threads):
    rng = np.random.default_rng(4)
    arrow = sps.lil_matrix((30, 30))
    arrow[0, :] = 1.0
    arrow[:, 0] = 1.0
    arrow.setdiag(2.0)
    mats = [*split_matrices(4, *types), sps.csr_matrix(arrow, dtype=types[1])]
    for A in mats:
        A = A.astype(types[1])
        B = rng.standard_normal((A.shape[1], 6)).astype(types[1])
        X = rng.standard_normal((A.shape[0], 6)).astype(types[1])
        C = sp.ops.spmm(A, B, format="csr", schedule=name, threads=threads)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-5)
        S = sp.ops.sddmm(A, X, B, format="csr", schedule=name, threads=threads)
        np.testing.assert_allclose(S.toarray(), A.multiply(X @ B.T).toarray(), rtol=1e-4, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(A=csr_matrices(max_rows=40, max_cols=25))
def test_split_schedule_on_random_matrices(A):
    B = np.random.default_rng(0).standard_normal((A.shape[1], 5)).astype(A.dtype)
    C = sp.ops.spmm(A, B, format="csr", schedule="csr_cpu_rows_split")
    np.testing.assert_allclose(C, A.toarray().astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def test_bad_split_by_annotations():
    f = sp.lower_sparse_iter(spmm_script())
    sch = sp.Schedule(f)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    with pytest.raises(sp.ScheduleError, match=r'1-D buffer of the function for "split_by" \(J_indptr\)'):
        sch.annotate(i, "split_by", "K_indptr")
    with pytest.raises(sp.ScheduleError, match='expected a loop for "split_by"'):
        sch.annotate(sch.get_block("csrmm0"), "split_by", "J_indptr")
    sch.annotate(i, "chunk_size", 8)
    with pytest.raises(sp.ScheduleError, match='"chunk_size" or "split_by", not both'):
        sch.annotate(i, "split_by", "J_indptr")


def test_model_of_the_split_is_the_kernels_split():
    """`Structure.split_imbalance` splits as the kernel does: a uniform matrix is even; an
    arrowhead's full row cannot be shared, but the split beats equal ranges of rows."""
    uniform = Structure.of(sps.random(1000, 1000, density=0.01, format="csr", random_state=0))
    assert uniform.split_imbalance(2) < 1.02
    arrow = sps.lil_matrix((3000, 3000))
    arrow[0, :] = 1.0
    arrow[:, 0] = 1.0
    arrow.setdiag(1.0)
    s = Structure.of(sps.csr_matrix(arrow))
    indptr = sps.csr_matrix(arrow).indptr
    ranges = _ranges(indptr, SPLIT_PARTS)
    half = ranges[SPLIT_PARTS // 2][0]  # Numba gives thread 0 the first half of the ranges
    first = indptr[half] - indptr[0]
    assert s.split_imbalance(2) == pytest.approx(max(first, s.nnz - first) * 2 / s.nnz)
    assert s.split_imbalance(2) < s.static_imbalance(2)
