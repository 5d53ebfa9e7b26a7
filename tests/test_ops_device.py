"""`sp.ops.spmm/sddmm(..., target="cuda")` with device operands (`ops/device.py`).

Numba device arrays in Numba's CUDA simulator (`device_ops_case.py`, one subprocess): results
equal scipy, no device operand is copied to the host (copies counted), a scipy A's structure goes
to the device once and its values per call, repeated calls see new values, `out=` and SpMV, and
the named errors. CuPy arrays and `cupyx.scipy.sparse` matrices need a GPU: skipped without one.
"""

from __future__ import annotations

from pathlib import Path

import device_ops_case as case
import numpy as np
import pytest
from cuda_support import simulated_run

CHECKS = list(case.CHECKS)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    info, _ = simulated_run(tmp_path_factory, "device_ops", Path(case.__file__))
    return info


@pytest.mark.parametrize("name", CHECKS)
def test_numba_device_arrays_in_the_simulator(results, name):
    assert results[name] == "ok", results[name]


def _gpu_or_skip():
    cupy = pytest.importorskip("cupy")
    from numba import config, cuda

    if config.ENABLE_CUDASIM or not cuda.is_available():
        pytest.skip("cupy arrays need a CUDA GPU")
    return cupy


def test_cupy_in_cupy_out():
    cupy = _gpu_or_skip()
    import cupyx.scipy.sparse

    import sparsetir_py as sp

    A = case.matrix()
    B = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    A_dev = cupyx.scipy.sparse.csr_matrix(A)
    C = sp.ops.spmm(A_dev, cupy.asarray(B), target="cuda")
    assert isinstance(C, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(C), A @ B, rtol=1e-5, atol=1e-5)
    X = cupy.asarray(np.ones((7, 4), np.float32))
    S = sp.ops.sddmm(A_dev, X, cupy.asarray(B), target="cuda")
    assert isinstance(S, cupyx.scipy.sparse.csr_matrix)
    np.testing.assert_allclose(S.get().toarray(), A.multiply(np.ones((7, 4)) @ B.T).toarray(), rtol=1e-5, atol=1e-5)


class FakeCSR:
    """Stands in for `cupyx.scipy.sparse.csr_matrix` (cupy needs a GPU): a constructor that
    counts its calls, the fields cupyx keeps in `__dict__`."""

    made = 0

    def __init__(self, data, indices, indptr, shape):
        FakeCSR.made += 1
        self.data, self.indices, self.indptr, self._shape = data, indices, indptr, shape
        self._descr = object()  # cupyx's cuSPARSE descriptor


def test_sddmm_results_share_one_copy_of_the_structure():
    """SDDMM's cupyx results (`ops.device.SharedStructure`): no constructor per result, each a new
    matrix with the values given, one copy of A's structure shared by them, never A's own."""
    from sparsetir_py.ops.device import SharedStructure

    A = case.matrix()
    template = FakeCSR(A.data.copy(), A.indices.copy(), A.indptr.copy(), A.shape)
    results = SharedStructure(template)
    values = [np.arange(A.nnz, dtype=np.float64), np.ones(A.nnz)]
    first, second = results(values[0]), results(values[1])
    assert FakeCSR.made == 1 and type(first) is FakeCSR and first is not second
    assert first.data is values[0] and second.data is values[1] and template.data is not values[0]
    np.testing.assert_array_equal(first.indices, A.indices)
    np.testing.assert_array_equal(first.indptr, A.indptr)
    assert first.indices is second.indices and first.indices is not template.indices
    assert first.indptr is not template.indptr and first._shape == A.shape and first._descr is template._descr
    assert first._has_canonical_format and first._has_sorted_indices
    first.indices[0] += 1  # the results' structure is theirs, not A's
    np.testing.assert_array_equal(template.indices, A.indices)


def test_repeated_calls_on_a_gpu():
    """On a GPU: a repeated call launches through the arguments Numba marshalled once
    (`Launcher.direct`), sees values written in place into A and B (cupy and cupyx), gives SDDMM
    results that share one copy of A's structure; a cupyx A runs hyb (values gathered on the
    device)."""
    cupy = _gpu_or_skip()
    import cupyx.scipy.sparse

    import sparsetir_py as sp
    from sparsetir_py.ops import device

    A = case.matrix()
    rng = np.random.default_rng(1)
    B, X = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((7, 4)).astype(np.float32)
    A_dev, B_dev, X_dev = cupyx.scipy.sparse.csr_matrix(A), cupy.asarray(B), cupy.asarray(X)
    out = cupy.empty((7, 4), cupy.float32)
    for fmt in ("csr", "hyb"):
        previous = None
        for scale in (1.0, -2.0, 3.0):
            A_dev.data[...] = cupy.asarray(A.data * scale)
            B_dev[0] += 1
            host_A, host_B = A.multiply(scale).tocsr(), cupy.asnumpy(B_dev)
            assert sp.ops.spmm(A_dev, B_dev, format=fmt, target="cuda", out=out) is out
            np.testing.assert_allclose(cupy.asnumpy(out), host_A @ host_B, rtol=1e-5, atol=1e-5, err_msg=fmt)
            S = sp.ops.sddmm(A_dev, X_dev, B_dev, format=fmt, target="cuda")
            want = host_A.multiply(X @ host_B.T).tocsr()
            np.testing.assert_allclose(cupy.asnumpy(S.data), want.data, rtol=1e-5, atol=1e-5, err_msg=fmt)
            np.testing.assert_array_equal(cupy.asnumpy(S.indices), A.indices)
            assert S.indices is not A_dev.indices and S.has_canonical_format
            assert previous is None or (S is not previous and S.indices is previous.indices)
            previous = S
    assert any(entry.operands[0] is A_dev for entry in device.REPEATS.values()), "no prepared call kept"
    from schedules.spmm import SCHEDULES

    kernel = sp.compile(sp.ops.spmm_script(), "cuda", schedule=SCHEDULES["csr_cuda_rows"], specialize={"feat": 4})
    dev = {"a": cupy.asarray(A.data), "indptr": cupy.asarray(A.indptr), "indices": cupy.asarray(A.indices), "b": B_dev}
    launch = kernel.launcher(**dev, c=out, m=7, n=5, nnz=A.nnz, check_structure=False)
    assert launch.direct, "the launcher fell back to the dispatcher: numba-cuda launches otherwise than 0.30"
    other = cupy.zeros((7, 4), cupy.float32)
    launch.into("c")(other)
    np.testing.assert_allclose(cupy.asnumpy(other), A @ cupy.asnumpy(B_dev), rtol=1e-5, atol=1e-5)
