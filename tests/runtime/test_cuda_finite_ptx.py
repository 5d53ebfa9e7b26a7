"""The runtime's helper kernels (`runtime.cuda_finite`) compile to PTX for every index and value
dtype the operators pass them (no GPU needed: `numba.cuda.compile_ptx`); the simulator runs them
in `tests/device_ops_case.py` (`check_padded_blocks_fixed_on_the_device`)."""

from __future__ import annotations

import numba
import pytest
from cuda_support import ptx_unavailable


@pytest.fixture(scope="module")
def cuda():
    reason = ptx_unavailable()
    if reason:
        pytest.skip(reason)
    from numba import cuda

    return cuda


@pytest.mark.parametrize("idtype", [numba.int32, numba.int64])
@pytest.mark.parametrize("dtype", [numba.float32, numba.float64])
def test_csr_fix_up_compiles(cuda, idtype, dtype):
    from sparsetir_py.runtime.cuda_finite import csr_rows_if_flagged

    signature = (numba.int32[::1], idtype[::1], idtype[::1], dtype[::1], dtype[:, ::1], dtype[:, ::1])
    ptx, _ = cuda.compile_ptx(csr_rows_if_flagged.py_func, signature, cc=(8, 0))
    body = ptx[ptx.index(".entry") :]
    assert "ld.global" in body and ".local" not in body  # sums into C itself: no local array


@pytest.mark.parametrize("dtype", [numba.float32, numba.float64])
def test_finiteness_mark_compiles(cuda, dtype):
    from sparsetir_py.runtime.cuda_finite import mark_nonfinite

    ptx, _ = cuda.compile_ptx(mark_nonfinite.py_func, (dtype[::1], numba.int32[::1]), cc=(8, 0))
    assert "st.global.u32" in ptx
