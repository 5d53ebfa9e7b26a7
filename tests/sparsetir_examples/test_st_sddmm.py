"""SparseTIR's SDDMM example with numbers, on the CPU and under the CUDA simulator.

Follows: examples/sddmm/bench_sddmm.py (`sddmm`: `C[i, j] = sum_k A[i, k] * B[j, k]` over the
stored (i, j) of a graph, DGL's `u_dot_v`; `sparse_fuse(i, j)`, the row search of the fused loop
bound as SparseTIR binds its `binary_search_block` (`[None, 32]` over blockIdx.x / threadIdx.x),
the stored elements split `[None, ty, group_size]` over blockIdx.x / threadIdx.y). SparseTIR's
search over (tx, ty, vec_size, group_size) with `rfactor` over the features and register caches is
a performance schedule; here each thread sums its element's features (`rfactor` needs a shared
buffer and a barrier for its write-back, which this project's scope rules keep per thread). The
CPU kernel runs the fused loop in parallel.
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
def sddmm(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat_size)
    A = T.match_sparse_buffer(a, (I, K), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, J), "float32")
    with T.sp_iter([I, J, K], "SSR", "sddmm") as [i, j, k]:
        with T.init():
            C[i, j] = 0.0
        C[i, j] = C[i, j] + A[i, k] * B[j, k]


def fused() -> sp.IRModule:
    sch = sp.Schedule(sddmm)
    it = sch.get_sparse_iteration("sddmm")
    i, j, _ = sch.get_sp_iters(it)
    sch.sparse_fuse(it, [i, j])
    return sp.lower_sparse_iter(sch.mod)


def scheduled(target: str, ty: int = 2, group_size: int = 2) -> sp.IRModule:
    sch = sp.Schedule(fused())
    (p,) = sch.get_loops(sch.get_block("sddmm_fuse_search"))
    j, _k = sch.get_loops(sch.get_block("sddmm0"))
    if target == "cpu":
        sch.parallel(p)
        sch.parallel(j)
        return sch.mod
    io, ii = sch.split(p, [None, 32])
    sch.bind(ii, "threadIdx.x")
    sch.bind(io, "blockIdx.x")
    joo, joi, ji = sch.split(j, [None, ty, group_size])
    sch.bind(joo, "blockIdx.x")
    sch.bind(joi, "threadIdx.y")
    sch.unroll(ji)
    return sch.mod


def matrix(name: str) -> scipy.sparse.csr_matrix:
    if name.startswith("random"):
        A = scipy.sparse.random(19, 27, density=0.2, format="csr", random_state=np.random.default_rng(9))
        return scipy.sparse.csr_matrix(A, dtype=np.float32)
    return sp.data.load_matrix(name).astype(np.float32)


CASES = {"pubmed": ("pubmed", 32), "cora": ("cora", 64), "karate": ("karate", 32), "random_19x27": ("random_19x27", 8)}
SIMULATED = ("karate", "random_19x27")


def make_case(case: str) -> tuple[dict, np.ndarray]:
    name, feat = CASES[case]
    A = matrix(name)
    m, n = A.shape
    rng = np.random.default_rng(feat)
    a = rng.random((m, feat), dtype=np.float32)
    b = rng.random((n, feat), dtype=np.float32)
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    want = np.einsum("ek,ek->e", a[rows].astype(np.float64), b[A.indices].astype(np.float64))
    args = dict(a=a, b=b, c=np.full(A.nnz, np.nan, np.float32), indptr=A.indptr.astype(np.int32),
                indices=A.indices.astype(np.int32), m=m, n=n, feat_size=feat, nnz=A.nnz)  # fmt: skip
    return args, want


_KERNELS: dict = {}


def run(engine: str, case: str) -> np.ndarray:
    args, _ = make_case(case)
    if engine == "interpret":
        sp.interpret(sddmm, **args)
        return args["c"]
    if engine not in _KERNELS:
        _KERNELS[engine] = sp.compile(scheduled(engine), engine)
    _KERNELS[engine](**args)
    return args["c"]


def simulate(out: Path) -> None:
    simulate_cases(out, SIMULATED, lambda case: run("cuda", case))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    return simulated_run(tmp_path_factory, "st_sddmm", Path(__file__).resolve())


@pytest.mark.parametrize("case", sorted(CASES))
def test_sddmm_equals_numpy(case, simulated):
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
