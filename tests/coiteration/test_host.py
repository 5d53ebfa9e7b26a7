"""The host steps of the co-iterating operators (`coiteration.host`, `ops.coiteration._csr`):
the compiled running sum against `np.cumsum`, chunks moved down in place against a copy, and
results built as shallow copies of a template against scipy's constructor."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsetir_py.coiteration.host import move_down, prefix, prefix_in_place, running_sum
from sparsetir_py.ops import coiteration as operators


@pytest.mark.parametrize("counts_dtype, out_dtype", [(np.int32, np.int64), (np.int64, np.int64), (np.int32, np.int32)])
@given(counts=st.lists(st.integers(0, 1000), max_size=60))
@settings(max_examples=25, deadline=None)
def test_running_sum_is_cumsum(counts, counts_dtype, out_dtype):
    counts = np.array(counts, counts_dtype)
    out = np.full(len(counts), -7, out_dtype)
    assert running_sum(counts, out) is out
    np.testing.assert_array_equal(out, np.cumsum(counts).astype(out_dtype))
    np.testing.assert_array_equal(prefix(counts), np.concatenate([[0], np.cumsum(counts)]))
    in_place = np.concatenate([[99], counts]).astype(out_dtype)
    np.testing.assert_array_equal(prefix_in_place(in_place), np.concatenate([[0], np.cumsum(counts)]))


def test_running_sum_refuses_lengths_that_differ():
    with pytest.raises(ValueError, match="3 counts into 2"):
        running_sum(np.ones(3, np.int64), np.empty(2, np.int64))


@given(
    counts=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=5), min_size=1, max_size=5),
    slack=st.lists(st.integers(0, 9), min_size=5, max_size=5),
)
@settings(max_examples=60, deadline=None)
def test_move_down_packs_chunks_written_with_room_to_spare(counts, slack):
    """Chunks of rows (row counts `counts[p]`) written one after the other with `slack[p]` unused
    entries after each chunk: moved down, the arrays hold every row in order from 0, whatever
    the overlap of a chunk's source and target."""
    rows = [c for chunk in counts for c in chunk]
    bounds = np.cumsum([0] + [len(chunk) for chunk in counts]).astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    t_start = np.zeros(len(counts) + 1, np.int64)
    for p, chunk in enumerate(counts):
        t_start[p + 1] = t_start[p] + sum(chunk) + slack[p]
    data = np.full(int(t_start[-1]), -1.0, np.float32)
    indices = np.full(int(t_start[-1]), -1, np.int32)
    want = np.arange(int(indptr[-1]))
    for p in range(len(counts)):
        lo, hi = int(indptr[bounds[p]]), int(indptr[bounds[p + 1]])
        data[t_start[p] : t_start[p] + hi - lo] = want[lo:hi]
        indices[t_start[p] : t_start[p] + hi - lo] = want[lo:hi]
    move_down((data, indices), t_start, indptr, bounds)
    np.testing.assert_array_equal(data[: len(want)], want)
    np.testing.assert_array_equal(indices[: len(want)], want)


@pytest.mark.parametrize("cls", [scipy.sparse.csr_matrix, scipy.sparse.csr_array])
@pytest.mark.parametrize("idtype", [np.int32, np.int64])
def test_results_are_valid_matrices_of_their_class(cls, idtype):
    """`_csr` copies a template instead of calling scipy's constructor: the result must be a
    matrix of `cls` that scipy treats as any other (shape, arithmetic, conversion, its own arrays
    and index dtype kept, int64 indices not narrowed)."""
    A = scipy.sparse.random(6, 9, density=0.3, format="csr", dtype=np.float64, random_state=1)
    data, indices, indptr = A.data.copy(), A.indices.astype(idtype), A.indptr.astype(idtype)
    C = operators._csr((data, indices, indptr), (6, 9), cls)
    assert type(C) is cls and C.shape == (6, 9) and C.nnz == A.nnz
    assert C.data is data and C.indices is indices and C.indptr is indptr and C.indices.dtype == idtype
    assert C.has_canonical_format and C.has_sorted_indices
    np.testing.assert_array_equal(C.toarray(), A.toarray())
    np.testing.assert_allclose((C @ np.ones(9)), A @ np.ones(9))
    assert (C.T).shape == (9, 6) and abs(C - A).max() == 0
    other = operators._csr((np.zeros(0), np.zeros(0, idtype), np.zeros(4, idtype)), (3, 2), cls)
    assert other.shape == (3, 2) and C.shape == (6, 9)  # the template is never shared state
    C.eliminate_zeros()
    assert C.nnz == A.nnz


def test_grains_follow_how_openmp_threads_wait(monkeypatch):
    """SpGEMM and the element-wise merges run small calls on one thread, with a lower grain
    where idle OpenMP threads spin than where they sleep; the module's overrides win; a call
    just under a grain asks for one thread, one at the grain for the caller's."""
    from sparsetir_py.coiteration import host

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    for policy, parallel, ewise in [
        ("passive", host.PARALLEL_GRAIN_SLEEPING, host.EWISE_GRAIN_SLEEPING),
        (None, host.PARALLEL_GRAIN_SPINNING, host.EWISE_GRAIN_SPINNING),
    ]:
        if policy is None:
            monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
        else:
            monkeypatch.setenv("OMP_WAIT_POLICY", policy)
        assert (host.parallel_grain(), host.ewise_grain()) == (parallel, ewise)
        assert operators._threads(None, "cpu", parallel - 1) == {"threads": 1}
        assert operators._threads(2, "cpu", parallel) == {"threads": 2}
        assert operators._threads(2, "cpu", ewise - 1, host.ewise_grain()) == {"threads": 1}
    assert host.PARALLEL_GRAIN_SPINNING < host.PARALLEL_GRAIN_SLEEPING
    assert host.EWISE_GRAIN_SPINNING < host.EWISE_GRAIN_SLEEPING
    monkeypatch.setattr(host, "PARALLEL_GRAIN", 0)
    monkeypatch.setattr(host, "EWISE_GRAIN", 3)
    assert (host.parallel_grain(), host.ewise_grain()) == (0, 3)
