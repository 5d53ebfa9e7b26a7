"""The whole pipeline on the Stage I corpus: lower_sparse_iter -> lower_sparse_buffer -> build.

Every operator of `corpus.CASES` is lowered by the real passes, built for the CPU and run
against its scipy/numpy reference (on a shipped matrix and a random one with empty rows), and
built for CUDA and compiled to PTX. The lowered functions are unscheduled (serial loops), so
this checks the contract between the lowering passes and the code generator, not speed. The
same kernels run in the CUDA simulator in test_codegen_cudasim.py.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import corpus
import numpy as np
import pytest
import scipy.sparse

import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.runtime.build import build

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codegen"))
import stage3_kernels as K

CASE_NAMES = [case.name for case in corpus.CASES]


@functools.cache
def lowered(name: str, idtype: str, dtype: str) -> sp.IRModule:
    func = corpus.CASES_BY_NAME[name].build(idtype, dtype)
    mod = sp.lower_sparse_buffer(sp.lower_sparse_iter(func))
    sp.verify(mod)
    return mod


@functools.cache
def kernel(name: str, idtype: str, dtype: str, target: str = "cpu"):
    options = {"boundscheck": True} if target == "cpu" else {}
    return build(lowered(name, idtype, dtype), target, cache_dir=K.kernel_cache_dir(), **options)


def matrices() -> dict[str, scipy.sparse.csr_matrix]:
    return {"karate": load_matrix("karate"), "random": K.random_csr(11, 30, 25, 0.15)}


def run(name: str, idtype: str, dtype: str) -> None:
    case = corpus.CASES_BY_NAME[name]
    tol = corpus.TOLERANCES[dtype]
    for matrix_name, A0 in matrices().items():
        A = corpus.prepare_csr(A0, idtype, dtype)
        kwargs, outputs = case.make_args(A, np.random.default_rng(0), idtype, dtype, feat=4)
        expected = case.reference(A, kwargs)
        kernel(name, idtype, dtype)(**kwargs)
        for out in outputs:
            scale = max(1.0, float(np.abs(expected[out]).max(initial=0.0)))
            np.testing.assert_allclose(
                kwargs[out],
                expected[out],
                rtol=tol["rtol"],
                atol=tol["atol"] * scale,
                err_msg=f"{name} on {matrix_name}: output {out}",
            )


@pytest.mark.parametrize("name", CASE_NAMES)
def test_lowered_corpus_on_cpu(name):
    run(name, "int32", "float32")


@pytest.mark.parametrize("name", ["csrmm", "sddmm", "fused_sddmm", "bsrmm"])
def test_lowered_corpus_int64_float64(name):
    run(name, "int64", "float64")


@pytest.mark.parametrize("name", CASE_NAMES)
def test_lowered_corpus_to_ptx(name):
    import numba

    if numba.config.ENABLE_CUDASIM:
        pytest.skip("NUMBA_ENABLE_CUDASIM is set: PTX needs the real numba-cuda")
    ptx = kernel(name, "int32", "float32", "cuda").ptx(cc=(8, 0))
    assert ".target sm_80" in ptx and ".visible .entry" in ptx
