"""`pad_shape`: BSR's padding guards are dropped once the shape is bound to whole blocks; a guard
that does not always hold stays; nested unrolled loops keep distinct block names."""

from __future__ import annotations

import numpy as np
import pytest

import format_rules
import sparsetir_py as sp
from sparsetir_py.errors import LoweringError
from sparsetir_py.ir.stmt import IfThenElse
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import spmm_script
from sparsetir_py.transform import decompose_format, remove_preprocess
from sparsetir_py.transform.pad_shape import pad_shape


def bsr_spmm(b=4):
    return remove_preprocess(decompose_format(spmm_script(), format_rules.bsr.rules(block_size=b)))


def guards(mod):
    return [n for n in walk(mod["main"].body) if isinstance(n, IfThenElse)]


def test_guards_dropped_and_shape_bound():
    mod = bsr_spmm()
    assert len(guards(mod)) == 1
    padded = pad_shape(mod, {"m": "m_bsr", "n": "n_bsr"}, 4)
    assert not guards(padded)
    names = [p.name for p in padded["main"].params]
    assert "m" not in names and "n" not in names and "m_bsr" in names
    # Run on the padded shape: equal to scipy on the real rows.
    A = sp.data.load_matrix("karate")
    d = format_rules.bsr.convert(A, block_size=4)
    B = np.zeros((d["n_bsr"] * 4, 3), np.float32)
    B[: A.shape[1]] = np.random.default_rng(0).standard_normal((A.shape[1], 3))
    C = np.zeros((d["m_bsr"] * 4, 3), np.float32)
    sp.interpret(padded, b=B, c=C, feat=3, **d)
    np.testing.assert_allclose(C[: A.shape[0]], A @ B[: A.shape[1]], rtol=1e-5, atol=1e-5)


def test_a_guard_that_can_fail_stays():
    # Bound to counts of 3-blocks, a 4-block's cells may still lie past the shape.
    padded = pad_shape(bsr_spmm(4), {"m": "m_bsr", "n": "n_bsr"}, 3)
    assert len(guards(padded)) == 1


def test_unknown_parameter():
    with pytest.raises(LoweringError, match="m_x"):
        pad_shape(bsr_spmm(), {"m": "m_x"}, 4)


def test_nested_unrolled_loops_have_distinct_block_names():
    # int64 / float64: the kernel `tests/test_ops_bsr.py` compiles too (one compile for both).
    A = sp.data.load_matrix("karate").astype(np.float64)
    A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    B = np.ones((A.shape[1], 4))
    C = sp.ops.spmm(A, B, format="bsr", block_size=2)  # ii and ji unrolled: 4 cells, 4 names
    np.testing.assert_allclose(C, A @ B, rtol=1e-12)
