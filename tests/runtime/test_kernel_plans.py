"""CPU kernels called without the structure check reuse the binding plan of an earlier call with
the same argument signature; a plan must never let through what binding would refuse, nor run
with stale scalars or the wrong flattening."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py.ops import spmm_script


def csrmm_args(A, B, C):
    m, n = A.shape
    return dict(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=B.shape[1], nnz=A.nnz)


def random_csr(m, n, seed):
    A = sps.random(m, n, density=0.3, format="csr", dtype=np.float32, random_state=seed)
    A.sort_indices()
    return A


@pytest.fixture(scope="module")
def kernel():
    return sp.compile(spmm_script(), "cpu")


def test_repeated_calls_use_new_values(kernel):
    A = random_csr(12, 9, 0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        A.data = rng.standard_normal(A.nnz).astype(np.float32)
        B = rng.standard_normal((9, 4)).astype(np.float32)
        C = np.full((12, 4), np.nan, np.float32)
        kernel(**csrmm_args(A, B, C), check_structure=False)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)
    assert len(kernel._plans) == 1


def test_new_sizes_or_scalars_get_a_new_plan(kernel):
    rng = np.random.default_rng(1)
    for m, n, feat in [(5, 6, 2), (5, 6, 3), (8, 6, 3), (1, 1, 1)]:
        A = random_csr(m, n, m + n)
        B = rng.standard_normal((n, feat)).astype(np.float32)
        C = np.full((m, feat), np.nan, np.float32)
        kernel(**csrmm_args(A, B, C), check_structure=False)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)


def test_a_plan_does_not_skip_checks(kernel):
    A = random_csr(6, 5, 2)
    B = np.ones((5, 2), np.float32)
    C = np.zeros((6, 2), np.float32)
    kernel(**csrmm_args(A, B, C), check_structure=False)
    C.flags.writeable = False
    with pytest.raises(sp.InputError, match="read-only"):
        kernel(**csrmm_args(A, B, C), check_structure=False)
    with pytest.raises(sp.InputError, match="`b` must be C-contiguous"):
        kernel(**csrmm_args(A, np.asfortranarray(B), np.zeros((6, 2), np.float32)), check_structure=False)
    with pytest.raises(sp.InputError, match="dtype float32"):
        kernel(**csrmm_args(A, B.astype(np.float64), np.zeros((6, 2), np.float32)), check_structure=False)


def test_column_major_operand_flattened_in_its_order():
    kernel = sp.compile(spmm_script(), "cpu", layouts={"b": sp.Layout((0, 1))})
    A = random_csr(7, 5, 3)
    rng = np.random.default_rng(3)
    for _ in range(2):
        B = np.asfortranarray(rng.standard_normal((5, 3)).astype(np.float32))
        C = np.full((7, 3), np.nan, np.float32)
        kernel(**csrmm_args(A, B, C), check_structure=False)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)


def test_run_trusted_takes_a_checked_call_for_two_dimensional_buffers(kernel):
    """A kernel whose buffers are not all 1-D (csrmm's B and C) cannot take its arrays as they
    are: `run_trusted` binds them as a checked call does."""
    rng = np.random.default_rng(4)
    for m, n, feat in [(7, 5, 3), (1, 1, 1), (9, 4, 2)]:
        A = random_csr(m, n, m * n)
        B = rng.standard_normal((n, feat)).astype(np.float32)
        C = np.full((m, feat), np.nan, np.float32)
        args = csrmm_args(A, B, C)
        assert kernel._trusted is None
        kernel.run_trusted(None, args)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)


def test_run_trusted_on_one_dimensional_buffers():
    from sparsetir_py.ops.coiteration import kernel as coiteration_kernel

    work = coiteration_kernel("work", "int32", "float32")
    assert work._trusted is not None
    assert [name for name, _ in work._trusted][:3] == ["a_indptr", "a_indices", "b_indptr"]
    A = random_csr(9, 6, 3)
    B = random_csr(6, 11, 4)
    got_work, got_room = np.full(9, -1, np.int64), np.full(9, -1, np.int64)
    bounds = np.array([0, 4, 9], np.int32)
    work.run_trusted(1, {
        "a_indptr": A.indptr, "a_indices": A.indices, "b_indptr": B.indptr, "c_work": got_work, "c_room": got_room,
        "bounds": bounds, "m": 9, "k": 6, "n": 11, "parts": 2, "nnz_a": A.nnz,
    })  # fmt: skip
    want = np.array([np.diff(B.indptr)[A.indices[A.indptr[i] : A.indptr[i + 1]]].sum() for i in range(9)])
    np.testing.assert_array_equal(got_work, want)
    np.testing.assert_array_equal(got_room, np.minimum(want, 12))
    # Python ints were cast to the declared int32: no signature with int64 scalars was compiled.
    assert {str(t) for sig in work._fn.signatures for t in sig[6:]} == {"int32"}
