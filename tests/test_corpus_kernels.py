"""Every corpus script, lowered with no schedule and built for the CPU, equals the Stage I
interpreter on shipped, edge-case and hypothesis-drawn matrices; bad arguments are InputErrors."""

from __future__ import annotations

import functools

import corpus
import numpy as np
import pytest
from corpus import CASES, TOLERANCES
from hypothesis import HealthCheck, given, settings
from strategies import csr_matrices, edge_matrices

import sparsetir_py as sp
from sparsetir_py.data import load_matrix

DTYPE_PAIRS = [("int32", "float32"), ("int64", "float64")]


@functools.cache
def kernel(name: str, idtype: str, dtype: str) -> sp.runtime.kernel.Kernel:
    func = corpus.CASES_BY_NAME[name].build(idtype, dtype)
    return sp.compile(func, target="cpu")


def compare(case, A, idtype, dtype, feat=4, seed=0):
    A = corpus.prepare_csr(A, idtype, dtype)
    kwargs, outputs = case.make_args(A, np.random.default_rng(seed), idtype, dtype, feat=feat)
    expected = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    sp.interpret(case.build(idtype, dtype), **expected)
    kernel(case.name, idtype, dtype)(**kwargs)
    tol = TOLERANCES[dtype]
    for name in outputs:
        scale = max(1.0, float(np.abs(expected[name]).max(initial=0.0)))
        np.testing.assert_allclose(
            kwargs[name], expected[name], rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=f"{case.name}: {name}"
        )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("idtype,dtype", DTYPE_PAIRS)
def test_shipped_matrices(case, idtype, dtype):
    for name in case.matrices[:3]:
        compare(case, load_matrix(name), idtype, dtype, feat=8)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_edge_matrices(case):
    for A in edge_matrices().values():
        compare(case, A, str(A.indices.dtype), str(A.data.dtype), feat=3)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=25, max_cols=25))
def test_random_matrices(case, A):
    compare(case, A, str(A.indices.dtype), str(A.data.dtype), feat=3)


def csrmm_kwargs():
    A = corpus.prepare_csr(load_matrix("karate"), "int32", "float32")
    kwargs, _ = corpus.CASES_BY_NAME["csrmm"].make_args(A, np.random.default_rng(0), "int32", "float32", feat=4)
    return kwargs


def corrupt(key, fn):
    kwargs = csrmm_kwargs()
    kwargs[key] = fn(kwargs[key])
    return kwargs


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (corrupt("indices", lambda x: np.where(np.arange(x.size) == 5, 10**6, x).astype(x.dtype)), "indices"),
        (corrupt("indices", lambda x: x[::-1].copy()), "not strictly increasing"),
        (corrupt("indptr", lambda x: np.r_[1, x[1:]].astype(x.dtype)), "must start at 0"),
        (corrupt("indptr", lambda x: np.r_[x[:-1], x[-1] - 1].astype(x.dtype)), "must end at nnz"),
        (corrupt("indptr", lambda x: x.astype(np.int64)), "dtype int32"),
        (corrupt("b", lambda x: x[:, :2].copy()), "shape"),
        (corrupt("b", lambda x: np.asfortranarray(x)), "contiguous"),
    ],
)
def test_bad_arguments_are_input_errors(kwargs, match):
    with pytest.raises(sp.InputError, match=match):
        kernel("csrmm", "int32", "float32")(**kwargs)
