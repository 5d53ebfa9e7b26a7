"""An unknown target is one named error everywhere a target is given: `sp.TargetError`, an
`InputError` (the caller's argument) and a `CodegenError` (what `sp.build` raised before)."""

from __future__ import annotations

import numpy as np
import pytest

import sparsetir_py as sp
from schedules.common import parts
from sparsetir_py.data import load_matrix

A = load_matrix("karate")
B = np.ones((A.shape[1], 2), np.float32)
STAGE3 = sp.lower_sparse_buffer(sp.lower_sparse_iter(sp.ops.spmm_script()))


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: sp.ops.spmm(A, B, target="tpu"), id="ops-auto"),
        pytest.param(lambda: sp.ops.spmm(A, B, "csr", target="tpu"), id="ops-csr"),
        pytest.param(lambda: sp.ops.sddmm(A, B, B, "ell", target="tpu"), id="ops-parts"),
        pytest.param(lambda: sp.tune.spmm(A, 2, target="tpu"), id="tune"),
        pytest.param(lambda: parts("tpu"), id="schedule"),
        pytest.param(lambda: sp.build(STAGE3, "tpu"), id="build"),
    ],
)
def test_unknown_target_is_a_target_error(call):
    with pytest.raises(sp.TargetError, match="unknown target 'tpu'") as info:
        call()
    assert isinstance(info.value, sp.InputError) and isinstance(info.value, sp.CodegenError)
