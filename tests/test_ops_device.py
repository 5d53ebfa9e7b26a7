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
