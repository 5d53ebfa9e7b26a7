"""SparseTIR's graph attention (FusedMM) example with numbers, on the CPU and under the CUDA simulator.

Follows: examples/flash_graph_attention/fusedmm.py (`fusedmm`: SDDMM `score = Q K^T` on the graph,
a row softmax through the scratch buffers `temp` (row maximum) and `temp1` (sum of exponentials)
in nested sparse iterations, and SpMM `O = softmax V`, in one function and so one kernel).
SparseTIR's `normalize` writes `exp(score[i, j]) / temp1[i]`, which is the softmax times
`exp(temp[i])`; here it subtracts the row maximum as `sum_of_exp` does, so the result is the
softmax. SparseTIR's file stops at lowering (a work in progress); here the rows of each stage are
also bound to blockIdx.x for the CUDA kernel, and run in parallel on the CPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import json
import traceback

import numpy as np
import pytest
import scipy.sparse
from cuda_support import simulate_cases, simulated_run

import sparsetir_py as sp
from sparsetir_py import script as T


@T.prim_func
def fusedmm(
    q: T.handle, k: T.handle, v: T.handle, o: T.handle, indptr: T.handle, indices: T.handle,
    m: T.int32, n: T.int32, nnz: T.int32, feat_size: T.int32,
):  # fmt: skip
    I = T.dense_fixed(m, idtype="int32")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype="int32")
    F = T.dense_fixed(feat_size, idtype="int32")
    J_ = T.dense_fixed(n, idtype="int32")
    Q = T.match_sparse_buffer(q, [I, F], "float32")
    K = T.match_sparse_buffer(k, [J_, F], "float32")
    V = T.match_sparse_buffer(v, [J_, F], "float32")
    O = T.match_sparse_buffer(o, [I, F], "float32")
    score = T.alloc_sparse_buffer([I, J], "float32")
    temp = T.alloc_sparse_buffer([I], "float32")
    temp1 = T.alloc_sparse_buffer([I], "float32")
    softmax = T.alloc_sparse_buffer([I, J], "float32")
    # Q^T * K
    with T.sp_iter([I, J, F], "SSR", "sddmm") as [i, j, f]:
        with T.init():
            score[i, j] = T.float32(0)
        score[i, j] += Q[i, f] * K[j, f]
    # softmax
    with T.sp_iter([I], "S", "softmax") as [i]:
        with T.sp_iter([J], "R", "computer_max") as [j]:
            with T.init():
                temp[i] = T.min_value("float32")
            temp[i] = T.max(temp[i], score[i, j])
        with T.sp_iter([J], "R", "sum_of_exp") as [j]:
            with T.init():
                temp1[i] = T.float32(0)
            temp1[i] += T.exp(score[i, j] - temp[i], dtype="float32")
        with T.sp_iter([J], "S", "normalize") as [j]:
            softmax[i, j] = T.exp(score[i, j] - temp[i], dtype="float32") / temp1[i]
    # softmax * V
    with T.sp_iter([I, J, F], "SRS", "spmm") as [i, j, f]:
        with T.init():
            O[i, f] = T.float32(0)
        O[i, f] = O[i, f] + softmax[i, j] * V[j, f]


def scheduled(target: str) -> sp.IRModule:
    sch = sp.Schedule(sp.lower_sparse_iter(fusedmm))
    for name in ("sddmm0", "softmax0", "spmm0"):
        (i,) = sch.get_loops(sch.get_block(name))
        if target == "cpu":
            sch.parallel(i)
        else:
            sch.bind(i, "blockIdx.x")
    return sch.mod


def matrix(name: str) -> scipy.sparse.csr_matrix:
    if name == "random":
        A = scipy.sparse.random(17, 23, density=0.25, format="csr", random_state=np.random.default_rng(3))
    else:
        A = sp.data.load_matrix(name)
    A = scipy.sparse.csr_matrix(A, dtype=np.float32)
    A.sort_indices()
    return A


CASES = {"karate": ("karate", 8), "random": ("random", 4), "cora": ("cora", 16)}
SIMULATED = ("karate", "random")


def make_case(case: str) -> tuple[dict, np.ndarray]:
    name, feat = CASES[case]
    A = matrix(name)
    m, n = A.shape
    rng = np.random.default_rng(feat)
    q, k, v = (rng.standard_normal((r, feat)).astype(np.float32) for r in (m, n, n))
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    score = np.einsum("ef,ef->e", q[rows].astype(np.float64), k[A.indices].astype(np.float64))
    top = np.full(m, -np.inf)
    np.maximum.at(top, rows, score)
    e = np.exp(score - top[rows])
    total = np.zeros(m)
    np.add.at(total, rows, e)
    S = scipy.sparse.csr_matrix((e / total[rows], A.indices, A.indptr), shape=A.shape)
    args = dict(q=q, k=k, v=v, o=np.full((m, feat), np.nan, np.float32), indptr=A.indptr.astype(np.int32),
                indices=A.indices.astype(np.int32), m=m, n=n, nnz=A.nnz, feat_size=feat)  # fmt: skip
    return args, S @ v.astype(np.float64)


_KERNELS: dict = {}


def run(engine: str, case: str) -> np.ndarray:
    args, _ = make_case(case)
    if engine == "interpret":
        sp.interpret(fusedmm, **args)
        return args["o"]
    if engine not in _KERNELS:
        _KERNELS[engine] = sp.compile(scheduled(engine), engine)
    _KERNELS[engine](**args)
    return args["o"]


def simulate(out: Path) -> None:
    simulate_cases(out, SIMULATED, lambda case: run("cuda", case))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    return simulated_run(tmp_path_factory, "st_fusedmm", Path(__file__).resolve())


def test_one_function_one_kernel():
    kernel = sp.compile(scheduled("cuda"), "cuda")
    assert "def fusedmm" in kernel.source


@pytest.mark.parametrize("case", sorted(CASES))
def test_fusedmm_equals_numpy(case, simulated):
    _, want = make_case(case)
    for engine in ("interpret", "cpu"):
        np.testing.assert_allclose(run(engine, case), want, rtol=1e-4, atol=1e-4, err_msg=engine)
    if case not in SIMULATED:
        return
    results, sim = simulated
    if "__import__" in results:
        pytest.skip(f"the CUDA simulator cannot start here:\n{results['__import__']}")
    assert results[case] == "ok", results[case]
    np.testing.assert_allclose(sim[case], want, rtol=1e-4, atol=1e-4, err_msg="cuda")


def main() -> int:
    out = Path(sys.argv[1])
    try:
        from numba import config, cuda  # noqa: F401

        assert config.ENABLE_CUDASIM
    except Exception:
        out.with_suffix(".json").write_text(json.dumps({"__import__": traceback.format_exc()}))
        return 0
    simulate(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
