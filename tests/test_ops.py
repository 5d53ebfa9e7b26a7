"""sp.ops.spmm / sp.ops.sddmm: results equal scipy on real and random matrices, any dtype and
index width scipy produces; kernels are cached; the structure is checked once per structure."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps
from hypothesis import given, settings
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py import ops
from sparsetir_py.data import load_matrix
from sparsetir_py.operands import structure_checked
from sparsetir_py.ops import operators, threads
from sparsetir_py.ops.kernels import KERNELS, csr_kernel


def sddmm_reference(A, X, Y):
    A = A.tocsr()
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return A.data * np.einsum("ij,ij->i", X[rows].astype(np.float64), Y[A.indices].astype(np.float64))


@pytest.mark.parametrize("name", ["cora", "citeseer", "email-Eu-core", "lp_afiro"])
def test_spmm_and_sddmm_on_real_graphs(name):
    A = load_matrix(name)
    rng = np.random.default_rng(0)
    B = rng.standard_normal((A.shape[1], 16)).astype(np.float32)
    np.testing.assert_allclose(ops.spmm(A, B), A @ B, rtol=1e-4, atol=1e-4)
    X = rng.standard_normal((A.shape[0], 16)).astype(np.float32)
    S = ops.sddmm(A, X, B)
    assert isinstance(S, sps.csr_matrix)
    assert np.array_equal(S.indptr, A.indptr) and np.array_equal(S.indices, A.indices)  # A's structure
    np.testing.assert_allclose(S.data, sddmm_reference(A, X, B), rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(A=csr_matrices(max_rows=30, max_cols=30))
def test_random_matrices_any_index_width_and_dtype(A):
    rng = np.random.default_rng(1)
    B = rng.standard_normal((A.shape[1], 5)).astype(A.dtype)
    C = ops.spmm(A, B)
    assert C.dtype == A.dtype
    np.testing.assert_allclose(C, A.toarray().astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    X = rng.standard_normal((A.shape[0], 5)).astype(A.dtype)
    np.testing.assert_allclose(ops.sddmm(A, X, B).data, sddmm_reference(A, X, B), rtol=1e-4, atol=1e-4)


def test_other_scipy_formats_dtypes_and_duplicates():
    """COO with duplicates, int values, float64 dense operand: converted, summed, promoted."""
    rows = np.array([0, 0, 1, 3, 3, 3])
    cols = np.array([1, 1, 2, 0, 4, 4])
    A = sps.coo_matrix((np.arange(1, 7), (rows, cols)), shape=(4, 5))
    B = np.arange(10, dtype=np.float64).reshape(5, 2)
    C = ops.spmm(A, B)
    assert C.dtype == np.float64
    np.testing.assert_allclose(C, A.toarray() @ B)


def test_kernel_cache_and_structure_record():
    A = load_matrix("karate")
    B = np.ones((A.shape[1], 3), np.float32)
    ops.spmm(A, B)
    n_kernels = len(KERNELS)
    ops.spmm(A, B * 2)
    assert len(KERNELS) == n_kernels  # same sizes and dtypes: no new kernel
    assert structure_checked(A)  # same indptr/indices objects: not checked again
    ops.spmm(A, np.ones((A.shape[1], 4), np.float32), format="csr")
    n_kernels = len(KERNELS)
    ops.spmm(A, np.ones((A.shape[1], 5), np.float32), format="csr")
    assert len(KERNELS) == n_kernels  # the feature width is a run-time argument on the CPU
    for width in (5, 6):  # unless the schedule is compiled for one width
        C = ops.spmm(A, np.ones((A.shape[1], width), np.float32), schedule="csr_cpu_rows_x4_fixed")
        np.testing.assert_allclose(C, A @ np.ones((A.shape[1], width)), rtol=1e-6)
    fixed = {
        key.feat: k for key, k in KERNELS.items() if getattr(key.schedule, "__name__", "") == "csr_cpu_rows_x4_fixed"
    }
    assert fixed[5] is not fixed[6] and fixed[5].specialized == {"feat": 5}
    ops.spmm(A.astype(np.float64), np.ones((A.shape[1], 4)))
    assert any(key.op == "spmm" and key.dtype == "float64" for key in KERNELS)  # a new dtype, a new kernel


def test_bad_inputs():
    A = load_matrix("karate")
    with pytest.raises(sp.InputError, match="`B` must have 34 rows"):
        ops.spmm(A, np.ones((3, 2), np.float32))
    with pytest.raises(sp.InputError, match="scipy sparse matrix"):
        ops.spmm(A.toarray(), np.ones((34, 2), np.float32))
    with pytest.raises(sp.InputError, match="same number of columns"):
        ops.sddmm(A, np.ones((34, 2), np.float32), np.ones((34, 3), np.float32))
    with pytest.raises(sp.InputError, match="unknown format"):
        ops.spmm(A, np.ones((34, 2), np.float32), format="csc")


def test_malformed_csr_is_an_input_error():
    """A CSR whose indices are out of range is refused before any kernel runs."""
    A = load_matrix("karate").copy()
    A.indices = A.indices.copy()
    A.indices[3] = 99
    with pytest.raises(sp.InputError, match="indices"):
        ops.spmm(A, np.ones((34, 2), np.float32))


@pytest.mark.parametrize("grain", [0, 1 << 40], ids=["parallel", "one-thread"])
def test_small_calls_run_on_one_thread_with_the_same_result(grain, monkeypatch):
    """Below `PARALLEL_GRAIN` multiply-adds a CPU call asks the kernel for one thread; both paths
    give scipy's result, and Numba's thread count is restored afterwards."""
    import numba

    monkeypatch.setattr(threads, "PARALLEL_GRAIN", grain)
    seen = []
    original = sp.runtime.kernel.run_capped

    def spy(fn, values, threads):
        seen.append(threads)
        return original(fn, values, threads)

    monkeypatch.setattr(sp.runtime.kernel, "run_capped", spy)
    A = load_matrix("cora")
    rng = np.random.default_rng(3)
    B = rng.standard_normal((A.shape[1], 8)).astype(np.float32)
    X = rng.standard_normal((A.shape[0], 8)).astype(np.float32)
    before = numba.get_num_threads()
    np.testing.assert_allclose(ops.spmm(A, B), A @ B, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ops.sddmm(A, X, B).data, sddmm_reference(A, X, B), rtol=1e-4, atol=1e-4)
    assert numba.get_num_threads() == before
    assert seen == ([None, None] if grain == 0 else [1, 1])


def test_threads_are_capped_during_the_call_and_restored():
    """`run_capped` runs the kernel with min(threads, current) Numba threads (the threading layer's
    own setters, not the public functions' checks: 16-28 us a small call) and restores the count,
    also when the kernel raises."""
    import numba

    before = numba.get_num_threads()
    seen = []
    sp.runtime.kernel.run_capped(lambda: seen.append(numba.get_num_threads()), [], 1)
    sp.runtime.kernel.run_capped(lambda: seen.append(numba.get_num_threads()), [], before + 5)
    assert seen == [1, before] and numba.get_num_threads() == before

    def fails():
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        sp.runtime.kernel.run_capped(fails, [], 1)
    assert numba.get_num_threads() == before


def test_kernel_threads_argument():
    """`threads=` caps the threads of one call; anything but a positive integer is an InputError."""
    import numba

    kernel = csr_kernel("spmm", "cpu", "int32", "float32", 4, None)
    A = load_matrix("karate").astype(np.float32)
    B = np.ones((A.shape[1], 4), np.float32)
    C = np.empty((A.shape[0], 4), np.float32)
    args = dict(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=34, n=34, nnz=A.nnz, feat=4)
    before = numba.get_num_threads()
    kernel(**args, threads=1)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    assert numba.get_num_threads() == before
    for bad in (0, -2, True, 1.5):
        with pytest.raises(sp.InputError, match="`threads` must be a positive integer"):
            kernel(**args, threads=bad)


def _slow_path_calls(monkeypatch) -> list:
    """A list that grows by one for every call that takes the full checking path (`_as_csr`)."""
    calls = []
    original = operators.as_csr
    monkeypatch.setattr(operators, "as_csr", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


@pytest.mark.parametrize("format", ["auto", "csr"])
def test_repeated_calls_skip_the_checks_and_still_see_every_change(format, monkeypatch):
    """A second call with A's arrays and operands of the same dtypes and shapes runs the kernel
    after O(1) checks (no `_as_csr`); new values of A or the operands give the new answer; a change
    the O(1) checks cannot trust (A.data of another length or dtype, a new indptr, a
    non-contiguous operand, another width) goes through the full path again."""
    A = load_matrix("citeseer").astype(np.float32)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((A.shape[0], 16)).astype(np.float32)
    Y = rng.standard_normal((A.shape[1], 16)).astype(np.float32)
    ops.sddmm(A, X, Y, format=format), ops.spmm(A, Y, format=format)
    slow = _slow_path_calls(monkeypatch)
    for _ in range(2):
        S = ops.sddmm(A, X, Y, format=format)
        np.testing.assert_allclose(S.data, sddmm_reference(A, X, Y), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ops.spmm(A, Y, format=format), A @ Y, rtol=1e-4, atol=1e-4)
    assert slow == []
    assert not np.shares_memory(S.indices, A.indices) and not np.shares_memory(S.indptr, A.indptr)
    A.data = rng.standard_normal(A.nnz).astype(np.float32)  # new values, same layout: still fast
    X[:] = rng.standard_normal(X.shape)
    np.testing.assert_allclose(ops.sddmm(A, X, Y, format=format).data, sddmm_reference(A, X, Y), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ops.spmm(A, Y, format=format), A @ Y, rtol=1e-4, atol=1e-4)
    assert slow == []
    A.data = A.data.astype(np.float64)  # another dtype: another key, the full path
    S = ops.sddmm(A, X, Y, format=format)
    assert S.dtype == np.float64 and slow
    np.testing.assert_allclose(S.data, sddmm_reference(A, X, Y), rtol=1e-6)
    slow.clear()
    F = np.asfortranarray(Y)  # same dtype and shape, another layout
    np.testing.assert_allclose(ops.spmm(A, F, format=format), A @ Y, rtol=1e-6)
    assert slow
    with pytest.raises(sp.InputError, match="`threads` must be a positive integer"):
        ops.spmm(A, Y, format=format, threads=[1])
    A.data = A.data[: A.nnz - 1]  # fewer values than the structure holds: refused, not read past
    with pytest.raises(sp.InputError, match="entries"):
        ops.sddmm(A, X, Y, format=format)


@pytest.mark.parametrize("kind", ["csc", "bsr"])
@pytest.mark.parametrize("format", ["auto", "csr"])
def test_repeated_calls_of_a_converted_input_and_with_out(kind, format, monkeypatch):
    """A CSC or BSR A (converted to CSR once per structure) and SpMM with `out=` repeat as a
    canonical CSR A does: no full path on later calls, the values of each call (changed in
    place or replaced), and `out` checked on every call."""
    A = load_matrix("citeseer").astype(np.float32)  # 3327 rows: whole 3 x 3 blocks
    M = A.tocsc() if kind == "csc" else A.tobsr((3, 3))
    rng = np.random.default_rng(6)
    X = rng.standard_normal((A.shape[0], 16)).astype(np.float32)
    Y = rng.standard_normal((A.shape[1], 16)).astype(np.float32)
    out = np.empty((A.shape[0], 16), np.float32)
    ops.spmm(M, Y, format=format, out=out), ops.sddmm(M, X, Y, format=format)
    slow = _slow_path_calls(monkeypatch)
    for step in range(3):
        assert ops.spmm(M, Y, format=format, out=out) is out
        np.testing.assert_allclose(out, M @ Y, rtol=1e-4, atol=1e-4)
        canonical = M.tocsr()
        canonical.sort_indices()
        S = ops.sddmm(M, X, Y, format=format)
        np.testing.assert_array_equal(S.indices, canonical.indices)
        np.testing.assert_allclose(S.data, sddmm_reference(canonical, X, Y), rtol=1e-4, atol=1e-4)
        if step == 0:
            M.data *= -2  # in place
        else:
            M.data = rng.standard_normal(M.data.shape).astype(np.float32)  # a new array
    assert slow == []
    with pytest.raises(sp.InputError, match="`out` must have shape"):
        ops.spmm(M, Y, format=format, out=np.empty((A.shape[0], 15), np.float32))


def test_repeated_calls_follow_a_new_structure():
    """Replacing A's indptr/indices (same shape and nnz) is seen: the remembered call is keyed on
    the arrays' identity and holds them weakly."""
    A = sps.random(40, 30, density=0.2, format="csr", dtype=np.float32, random_state=2)
    B = np.random.default_rng(0).standard_normal((30, 8)).astype(np.float32)
    np.testing.assert_allclose(ops.spmm(A, B, format="csr"), A @ B, rtol=1e-5, atol=1e-5)
    A2 = sps.random(40, 30, density=0.2, format="csr", dtype=np.float32, random_state=3)
    assert A2.nnz == A.nnz
    A.indptr, A.indices = A2.indptr, A2.indices
    np.testing.assert_allclose(ops.spmm(A, B, format="csr"), A.toarray() @ B, rtol=1e-5, atol=1e-5)


def test_parallel_grain_follows_how_openmp_threads_wait(monkeypatch):
    """Small calls run on one thread where idle OpenMP threads sleep (waking them costs more
    than the call); where they spin (the default) only tiny calls do; PARALLEL_GRAIN overrides."""
    for policy, spins, grain in [
        ("passive", None, threads.PARALLEL_GRAIN_SLEEPING),
        (" PASSIVE ", None, threads.PARALLEL_GRAIN_SLEEPING),
        (None, "0", threads.PARALLEL_GRAIN_SLEEPING),
        ("active", None, threads.PARALLEL_GRAIN_SPINNING),
        (None, None, threads.PARALLEL_GRAIN_SPINNING),
        (None, "300000", threads.PARALLEL_GRAIN_SPINNING),
    ]:
        for name, value in (("OMP_WAIT_POLICY", policy), ("GOMP_SPINCOUNT", spins)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        assert threads.parallel_grain() == grain
        assert threads.thread_args("cpu", grain - 1, None) == {"threads": 1}
        assert threads.thread_args("cpu", grain, None) == {}
        assert threads.thread_args("cuda", 1, None) == {} and threads.thread_args("cpu", 1, 2) == {"threads": 2}
    monkeypatch.setattr(threads, "PARALLEL_GRAIN", 7)
    assert threads.parallel_grain() == 7
