"""SparseTIR's block-sparse SpMM example with numbers, on the CPU and under the CUDA simulator.

Follows: examples/blocksparse/bsr_spmm.py (`bsrmm`: iteration `[I, BI, BJ, F, J]` "SSRSR",
`sparse_reorder` to `[i, j, bi, f, bj]`, the block rows on blockIdx.x, `bi` split by 16 with its
outer part on threadIdx.y, the features split `[None, 2, 16]` with the outer part on
blockIdx.y; and `dbsrmm`, the doubly compressed variant whose block rows are a sparse axis under
`O = dense_fixed(1)`, whose init this project refuses: it ignores the spatial `o`; its init as
an iteration of its own runs). SparseTIR's kernel is float16 on tensor cores (`wmma` fragments through
`tensorize`); Numba has neither, so the values are float32 here and each thread accumulates its
16 x 16 tile with scalar code (README, compatibility).
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
def bsrmm(
    a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
    mb: T.int32, nb: T.int32, nnz: T.int32, blk: T.int32, feat_size: T.int32,
):  # fmt: skip
    I = T.dense_fixed(mb)
    J = T.sparse_variable(I, (nb, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(nb)
    BI = T.dense_fixed(blk)
    BJ = T.dense_fixed(blk)
    F = T.dense_fixed(feat_size)
    A = T.match_sparse_buffer(a, (I, J, BI, BJ), "float32")
    B = T.match_sparse_buffer(b, (J_detach, BJ, F), "float32")
    C = T.match_sparse_buffer(c, (I, BI, F), "float32")
    with T.sp_iter([I, BI, BJ, F, J], "SSRSR", "bsrmm") as [i, bi, bj, f, j]:
        with T.init():
            C[i, bi, f] = T.float32(0.0)
        C[i, bi, f] = C[i, bi, f] + A[i, j, bi, bj] * B[j, bj, f]


@T.prim_func
def dbsrmm(
    a: T.handle, b: T.handle, c: T.handle, indptr_0: T.handle, indices_0: T.handle, indptr_1: T.handle,
    indices_1: T.handle, mb: T.int32, nb: T.int32, nnz0: T.int32, nnz1: T.int32, blk: T.int32, feat_size: T.int32,
):  # fmt: skip
    O = T.dense_fixed(1)
    I = T.sparse_variable(O, (mb, nnz0), (indptr_0, indices_0), "int32")
    I_detach = T.dense_fixed(mb)
    J = T.sparse_variable(I, (nb, nnz1), (indptr_1, indices_1), "int32")
    J_detach = T.dense_fixed(nb)
    BI = T.dense_fixed(blk)
    BJ = T.dense_fixed(blk)
    F = T.dense_fixed(feat_size)
    A = T.match_sparse_buffer(a, (O, I, J, BI, BJ), "float32")
    B = T.match_sparse_buffer(b, (J_detach, BJ, F), "float32")
    C = T.match_sparse_buffer(c, (I_detach, BI, F), "float32")
    with T.sp_iter([O, I, BI, BJ, F, J], "SSSRSR", "bsrmm") as [o, i, bi, bj, f, j]:
        with T.init():
            C[i, bi, f] = T.float32(0.0)
        C[i, bi, f] = C[i, bi, f] + A[o, i, j, bi, bj] * B[j, bj, f]


def scheduled(target: str, block_size: int) -> sp.IRModule:
    """bench_bsrmm's schedule without the tensor-core steps (`cache_*` into wmma scopes, `tensorize`)."""
    sch = sp.Schedule(bsrmm)
    it = sch.get_sparse_iteration("bsrmm")
    i, bi, bj, f, j = sch.get_sp_iters(it)
    sch.sparse_reorder(it, [i, j, bi, f, bj])
    sch = sp.Schedule(sp.lower_sparse_iter(sch.mod))
    (i,) = sch.get_loops(sch.get_block("bsrmm0"))
    if target == "cpu":
        sch.parallel(i)
        return sch.mod
    j, bi, f, bj = sch.get_loops(sch.get_block("bsrmm1"))
    bio, bii = sch.split(bi, [None, min(16, block_size)])
    foo, foi, fi = sch.split(f, [None, 2, 16])
    sch.reorder(foo, j, bio, foi, bii, fi, bj)
    sch.unroll(foi)
    sch.bind(i, "blockIdx.x")
    sch.bind(bio, "threadIdx.y")
    sch.bind(foo, "blockIdx.y")
    return sch.mod


def matrix(name: str, blk: int) -> scipy.sparse.bsr_matrix:
    """A graph from `sp.data` padded to a multiple of the block, or random blocks (bsr_spmm.py
    draws triton's random block layouts)."""
    if name == "random":
        rng = np.random.default_rng(blk)
        layout = rng.random((5, 7)) < 0.35
        dense = np.kron(layout, np.ones((blk, blk))) * rng.standard_normal((5 * blk, 7 * blk))
        A = scipy.sparse.csr_matrix(dense.astype(np.float32))
    else:
        A = sp.data.load_matrix(name).astype(np.float32)
    m, n = A.shape
    mp, np_ = -(-m // blk) * blk, -(-n // blk) * blk
    indptr = np.concatenate([A.indptr, np.full(mp - m, A.nnz, A.indptr.dtype)])
    P = scipy.sparse.csr_matrix((A.data, A.indices, indptr), shape=(mp, np_)).tobsr((blk, blk))
    P.sort_indices()
    return P


CASES = {"karate_4": ("karate", 4, 32), "random_8": ("random", 8, 32), "cora_16": ("cora", 16, 64)}
SIMULATED = ("karate_4", "random_8")


def make_case(case: str, doubly: bool = False) -> tuple[dict, np.ndarray]:
    name, blk, feat = CASES[case]
    P = matrix(name, blk)
    mb, nb = P.shape[0] // blk, P.shape[1] // blk
    x = np.random.default_rng(feat).standard_normal((P.shape[1], feat)).astype(np.float32)
    args = dict(a=np.ascontiguousarray(P.data, np.float32).reshape(-1), b=x.reshape(-1),
                c=np.full(mb * blk * feat, np.nan, np.float32), mb=mb, nb=nb, blk=blk, feat_size=feat)  # fmt: skip
    want = (P.astype(np.float64) @ x).reshape(-1)
    if not doubly:
        return {**args, "indptr": P.indptr.astype(np.int32), "indices": P.indices.astype(np.int32),
                "nnz": len(P.indices)}, want  # fmt: skip
    rows = np.flatnonzero(np.diff(P.indptr))  # bench_bsrmm's `ind`: the block rows that store blocks
    indptr_1 = np.concatenate([[0], np.cumsum(np.diff(P.indptr)[rows])])
    return {**args, "indptr_0": np.array([0, len(rows)], np.int32), "indices_0": rows.astype(np.int32),
            "indptr_1": indptr_1.astype(np.int32), "indices_1": P.indices.astype(np.int32),
            "nnz0": len(rows), "nnz1": len(P.indices)}, want  # fmt: skip


_KERNELS: dict = {}


def run(engine: str, case: str) -> np.ndarray:
    args, _ = make_case(case)
    if engine == "interpret":
        sp.interpret(bsrmm, **args)
        return args["c"]
    key = (engine, CASES[case][1])
    if key not in _KERNELS:
        _KERNELS[key] = sp.compile(scheduled(engine, CASES[case][1]), engine)
    _KERNELS[key](**args)
    return args["c"]


def simulate(out: Path) -> None:
    simulate_cases(out, SIMULATED, lambda case: run("cuda", case))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    return simulated_run(tmp_path_factory, "st_bsr_spmm", Path(__file__).resolve())


@pytest.mark.parametrize("case", sorted(CASES))
def test_bsrmm_equals_scipy(case, simulated):
    _, want = make_case(case)
    for engine in ("interpret", "cpu") if case in SIMULATED else ("cpu",):
        np.testing.assert_allclose(run(engine, case), want, rtol=1e-4, atol=1e-4, err_msg=engine)
    if case not in SIMULATED:
        return
    results, sim = simulated
    if "__import__" in results:
        pytest.skip(f"the CUDA simulator cannot start here:\n{results['__import__']}")
    assert results[case] == "ok", results[case]
    np.testing.assert_allclose(sim[case], want, rtol=1e-4, atol=1e-4, err_msg="cuda")


@T.prim_func
def dbsrmm_init_of_its_own(
    a: T.handle, b: T.handle, c: T.handle, indptr_0: T.handle, indices_0: T.handle, indptr_1: T.handle,
    indices_1: T.handle, mb: T.int32, nb: T.int32, nnz0: T.int32, nnz1: T.int32, blk: T.int32, feat_size: T.int32,
):  # fmt: skip
    O = T.dense_fixed(1)
    I = T.sparse_variable(O, (mb, nnz0), (indptr_0, indices_0), "int32")
    I_detach = T.dense_fixed(mb)
    J = T.sparse_variable(I, (nb, nnz1), (indptr_1, indices_1), "int32")
    J_detach = T.dense_fixed(nb)
    BI = T.dense_fixed(blk)
    BJ = T.dense_fixed(blk)
    F = T.dense_fixed(feat_size)
    A = T.match_sparse_buffer(a, (O, I, J, BI, BJ), "float32")
    B = T.match_sparse_buffer(b, (J_detach, BJ, F), "float32")
    C = T.match_sparse_buffer(c, (I_detach, BI, F), "float32")
    with T.sp_iter([I_detach, BI, F], "SSS", "bsrmm_init") as [i, bi, f]:
        C[i, bi, f] = T.float32(0.0)
    with T.sp_iter([O, I, BI, BJ, F, J], "SSSRSR", "bsrmm") as [o, i, bi, bj, f, j]:
        C[i, bi, f] = C[i, bi, f] + A[o, i, j, bi, bj] * B[j, bj, f]


def test_doubly_compressed_bsrmm_init_is_refused_with_the_rewrite():
    """dbsrmm's init ignores its spatial iterator `o` (of extent 1, so harmless there, but the
    verifier does not reason about extents): refused with the rewrite, an init iteration of its
    own, which then gives the product (block rows that store nothing are zero)."""
    with pytest.raises(sp.VerifyError, match=r"initialise `C` in a sparse iteration of its own, before `bsrmm`"):
        sp.verify(dbsrmm)
    for case in ("karate_4", "random_8"):
        args, _ = make_case(case, doubly=True)
        sp.interpret(dbsrmm_init_of_its_own, **args)
        np.testing.assert_allclose(args["c"], make_case(case)[1], rtol=1e-4, atol=1e-4, err_msg=case)


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
