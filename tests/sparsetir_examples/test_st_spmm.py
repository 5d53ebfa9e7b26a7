"""SparseTIR's hyb SpMM example with numbers, on the CPU and under the CUDA simulator.

Follows: examples/spmm/bench_spmm.py (`csrmm` with the feature axis tiled as (num_tiles, cwm,
32), `bench_hyb`: one ELL rule per (column part, bucket) named `str(part_id) + "_" + str(bucket_id)`,
`num_col_parts` and `bucketing_config` as there, the decomposition without its copy iterations,
`sparse_fuse(o, i)` per part, and its schedule: rows split by `[None, bucket_sizes[-1] //
bucket_size, 8]` over blockIdx.x / threadIdx.y, the 32 lanes on threadIdx.x, the tiles on
blockIdx.y, atomic updates). The ELL description has a dense layer axis `O` of `layers` (SparseTIR's
is `dense_fixed(1)`): a row longer than the largest bucket becomes several rows of it, one per
layer, since a sorted sparse axis here stores each row once (README, compatibility). The
conversion (SparseTIR's `column_part_hyb`) is `sp.format.converters.to_ell_parts`. The CUDA kernel
(simulated, small inputs) has that schedule; the CPU kernel is the decomposition as lowered.
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
from sparsetir_py.format import converters as formats


@T.prim_func
def csrmm(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    num_tiles: T.int32,
    nnz: T.int32,
    cwm: T.int32,
):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K1 = T.dense_fixed(num_tiles)
    K2 = T.dense_fixed(cwm)
    K3 = T.dense_fixed(32)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K1, K2, K3), "float32")
    C = T.match_sparse_buffer(c, (I, K1, K2, K3), "float32")
    with T.sp_iter([I, J, K1, K2, K3], "SRSSS", "csrmm") as [i, j, k1, k2, k3]:
        with T.init():
            C[i, k1, k2, k3] = 0.0
        C[i, k1, k2, k3] = C[i, k1, k2, k3] + A[i, j] * B[j, k1, k2, k3]


@T.prim_func
def ell(
    a: T.handle,
    indptr_i: T.handle,
    indices_i: T.handle,
    indices_j: T.handle,
    layers: T.int32,
    m: T.int32,
    n: T.int32,
    num_rows: T.int32,
    nnz_cols: T.int32,
):
    O = T.dense_fixed(layers)
    I = T.sparse_variable(O, (m, num_rows), (indptr_i, indices_i))
    J = T.sparse_fixed(I, (n, nnz_cols), indices_j)
    A = T.match_sparse_buffer(a, (O, I, J), "float32")
    T.evaluate(0)


def hyb_rules(num_col_parts: int, bucket_sizes: list[int]) -> list[sp.FormatRewriteRule]:
    return [
        sp.FormatRewriteRule(
            str(part_id) + "_" + str(bucket_id),
            ell.specialize({"nnz_cols": bucket_size}),
            ["A"],
            ["I", "J"],
            ["O", "I", "J"],
            {"I": ["O", "I"], "J": ["J"]},
            lambda i, j: (0, i, j),
            lambda o, i, j: (i, j),
        )
        for part_id in range(num_col_parts)
        for bucket_id, bucket_size in enumerate(bucket_sizes)
    ]


def hyb_args(A, num_col_parts: int, bucket_sizes: list[int]) -> dict:
    """SparseTIR's `column_part_hyb`: per (column part, bucket) the rows, columns and values."""
    out = {}
    parts = formats.to_ell_parts(A, bucket_sizes, num_col_parts, "int32", "float32")
    for k, arrays in enumerate(parts):
        name = "_".join(map(str, divmod(k, len(bucket_sizes))))
        out.update({
            f"a_{name}": arrays["a"], f"indptr_i_{name}": arrays["indptr"], f"indices_i_{name}": arrays["rows"],
            f"indices_j_{name}": arrays["cols"], f"layers_{name}": arrays["layers"], f"m_{name}": arrays["m"],
            f"n_{name}": arrays["n"], f"num_rows_{name}": arrays["nrows"],
        })  # fmt: skip
    return out


def decomposed(num_col_parts: int, bucket_sizes: list[int]) -> sp.IRModule:
    return sp.remove_preprocess(sp.decompose_format(csrmm, hyb_rules(num_col_parts, bucket_sizes)))


def scheduled(num_col_parts: int, bucket_sizes: list[int]) -> sp.IRModule:
    """bench_hyb's schedule (without the register cache of the atomic part's output)."""
    sch = sp.Schedule(decomposed(num_col_parts, bucket_sizes))
    names = [f"{p}_{b}" for b in range(len(bucket_sizes)) for p in range(num_col_parts)]
    for name in names:
        it = sch.get_sparse_iteration(f"csrmm_{name}")
        o, i, *_ = sch.get_sp_iters(it)
        sch.sparse_fuse(it, [o, i])
    sch = sp.Schedule(sp.lower_sparse_iter(sch.mod))
    for part_id in range(num_col_parts):
        for bucket_id, bucket_size in enumerate(bucket_sizes):
            blk = sch.get_block(f"csrmm_{part_id}_{bucket_id}0")
            i, j, foo, foi, fi = sch.get_loops(blk)
            sch.reorder(foo, fi, j, foi)
            sch.annotate(blk, "atomic", True)  # parts share rows (here also the layers of a split row)
            sch.bind(fi, "threadIdx.x")
            sch.bind(foo, "blockIdx.y")
            sch.unroll(foi)
            sch.unroll(j)
            io, _ioi, ii = sch.split(i, [None, bucket_sizes[-1] // bucket_size, 8])
            sch.bind(io, "blockIdx.x")
            sch.bind(ii, "threadIdx.y")
            # This project's addition: the search for each fused row's layer, one thread per row.
            (p,) = sch.get_loops(sch.get_block(f"csrmm_{part_id}_{bucket_id}_fuse_search"))
            po, pi = sch.split(p, [None, 32])
            sch.bind(po, "blockIdx.x")
            sch.bind(pi, "threadIdx.x")
    i, _k1, _k2, k3 = sch.get_loops(sch.get_block("csrmm_init0"))
    sch.bind(i, "blockIdx.x")
    sch.bind(k3, "threadIdx.x")
    return sch.mod


# ------------------------------------------------------------------------------------------ cases
# (matrix, feat_size, coarsening factor, num_col_parts, buckets): bench_spmm's config for cora and
# citeseer; a column-partitioned case on karate and a random matrix.
CASES = {
    "cora": ("cora", 64, 2, 1, [1, 2, 4]),
    "citeseer": ("citeseer", 32, 2, 1, [1, 2, 4]),
    "karate_2parts": ("karate", 32, 2, 2, [1, 2, 4]),
    "random_2parts": ("random_23x17", 64, 2, 2, [1, 2, 4]),
}
SIMULATED = ("karate_2parts", "random_2parts")


def matrix(name: str) -> scipy.sparse.csr_matrix:
    if name.startswith("random"):
        A = scipy.sparse.random(23, 17, density=0.3, format="csr", random_state=np.random.default_rng(5))
        return scipy.sparse.csr_matrix(A, dtype=np.float32)
    return sp.data.load_matrix(name).astype(np.float32)


def make_case(case: str) -> tuple[dict, np.ndarray]:
    name, feat, coarsening, parts, buckets = CASES[case]
    A = matrix(name)
    m, n = A.shape
    cwm = min(coarsening, feat // 32)
    x = np.random.default_rng(feat).standard_normal((n, feat)).astype(np.float32)
    args = dict(
        b=x.reshape(-1), c=np.full(m * feat, np.nan, np.float32), m=m, n=n, num_tiles=feat // cwm // 32, cwm=cwm
    )
    args.update(hyb_args(A, parts, buckets))
    return args, (A.astype(np.float64) @ x).reshape(-1)


def run(engine: str, case: str, cache: dict = {}) -> np.ndarray:  # noqa: B006 - kernels per process
    _, _, _, parts, buckets = CASES[case]
    args, _ = make_case(case)
    if engine == "interpret":
        sp.interpret(decomposed(parts, buckets), **args)
        return args["c"]
    key = (engine, parts, tuple(buckets))
    if key not in cache:
        # The CPU kernel is the decomposition as lowered (Numba compiles the CUDA schedule's
        # emulated thread loops for a minute); the CUDA kernel is bench_hyb's schedule.
        cache[key] = sp.compile(scheduled(parts, buckets) if engine == "cuda" else decomposed(parts, buckets), engine)
    params = {p.name for p in cache[key].func.params}
    cache[key](**{k: v for k, v in args.items() if k in params})
    return args["c"]


def simulate(out: Path) -> None:
    simulate_cases(out, SIMULATED, lambda case: run("cuda", case))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    return simulated_run(tmp_path_factory, "st_spmm", Path(__file__).resolve())


def test_rule_names_and_parts():
    mod = decomposed(2, [1, 2, 4])
    names = [s.name for s in mod["main"].body.stmts]
    assert names == ["csrmm_init", *(f"csrmm_{p}_{b}" for p in range(2) for b in range(3))]
    assert {"a_0_0", "indices_j_1_2", "num_rows_1_1"} <= {p.name for p in mod["main"].params}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hyb_spmm_equals_scipy(case, simulated):
    _, want = make_case(case)
    engines = ["interpret", "cpu"] if CASES[case][0] in ("karate", "random_23x17") else ["cpu"]
    for engine in engines:
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
