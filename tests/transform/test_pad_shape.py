"""`pad_shape`: BSR's padding guards are dropped once the shape is bound to whole blocks; a guard
that does not always hold stays; nested unrolled loops keep distinct block names."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import format_rules
import sparsetir_py as sp
from sparsetir_py.errors import LoweringError
from sparsetir_py.ir.stmt import IfThenElse, SparseIteration
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import sddmm_script, spmm_script
from sparsetir_py.transform import decompose_format, remove_preprocess
from sparsetir_py.transform.pad_shape import fold_block_init, pad_shape


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


def test_fold_block_init_moves_the_zeroing_of_c_into_the_block_sum():
    """SpMM's separate `C = 0` iteration becomes the BSR sum's `T.init()`; the result is the same
    on the padded shape (NaN-filled C, empty block rows included: karate in 4 x 4 blocks has
    some, and a matrix with no nonzero); a mismatched factor or another function is left alone."""
    padded = pad_shape(bsr_spmm(4), {"m": "m_bsr", "n": "n_bsr"}, 4)
    folded = fold_block_init(padded, 4)["main"]
    sp.verify(folded)
    iterations = [n for n in walk(folded.body) if isinstance(n, SparseIteration)]
    assert [it.name for it in iterations] == ["csrmm_bsr"] and iterations[0].init is not None
    rng = np.random.default_rng(1)
    karate = sp.data.load_matrix("karate")
    for A in (karate, scipy.sparse.csr_matrix((9, 6), dtype=np.float32)):
        d = format_rules.bsr.convert(A, block_size=4)
        B = np.zeros((d["n_bsr"] * 4, 3), np.float32)
        B[: A.shape[1]] = rng.standard_normal((A.shape[1], 3))
        for f in (padded, folded):
            C = np.full((d["m_bsr"] * 4, 3), np.nan, np.float32)
            sp.interpret(f, b=B, c=C, feat=3, **d)
            np.testing.assert_allclose(C[: A.shape[0]], A @ B[: A.shape[1]], rtol=1e-5, atol=1e-5)
            assert not np.isnan(C).any()  # padding rows zeroed as well
    assert fold_block_init(padded, 2)["main"] is padded["main"]
    sddmm = remove_preprocess(decompose_format(sddmm_script(), format_rules.bsr.rules(block_size=4)))
    assert fold_block_init(sddmm, 4)["main"] is sddmm["main"]
