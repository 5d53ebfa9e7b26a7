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
