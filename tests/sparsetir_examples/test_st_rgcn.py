"""SparseTIR's composable RGCN example with numbers, on the CPU and under the CUDA simulator.

Follows: examples/rgms/rgcn/bench_rgcn_composable.py and utils.py (`rgcn_hetero_forward` over a
CSF `(R, I, J)` of relations, rows and columns; `ell3d` buckets by relation, one rule per bucket
named `str(bucket_id)` with `nnz_rows = group_size // bucket_size` rows per group; the
decomposition without its copy iterations; `sparse_reorder` to `[r, io, ii, j, fo, fi]` and
`sparse_fuse(r, io)`; the output features split by `split_factor_f` over threadIdx.y, the input
features on threadIdx.x, the groups on blockIdx.x, atomic updates of Y). Differences, listed in
the README's compatibility section: the init of `Y` is an iteration of its own (SparseTIR's inside
the relation loop re-initialises rows that several relations share; tests/ir/
test_sparsetir_rejections.py), and the atomic annotation sits on the block instead of a register
cache of Y. The conversion (SparseTIR's `csf_to_ell3d`) is written here. Relations are drawn on
graphs of `sp.data` (their edges split between relations) and on random ones.
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
def rgcn_hetero_forward(
    a: T.handle, w: T.handle, x: T.handle, y: T.handle, indptr_i: T.handle, indices_i: T.handle,
    indptr_j: T.handle, indices_j: T.handle, m: T.int32, n: T.int32, num_rels: T.int32, feat_size: T.int32,
    nnz_i: T.int32, nnz_j: T.int32,
):  # fmt: skip
    R = T.dense_fixed(num_rels)
    I = T.sparse_variable(R, (m, nnz_i), (indptr_i, indices_i), "int32")
    J = T.sparse_variable(I, (n, nnz_j), (indptr_j, indices_j), "int32")
    I_detach = T.dense_fixed(m)
    J_detach = T.dense_fixed(n)
    F_in = T.dense_fixed(feat_size)
    F_out = T.dense_fixed(feat_size)
    A = T.match_sparse_buffer(a, (R, I, J), "float32")
    W = T.match_sparse_buffer(w, (R, F_out, F_in), "float32")
    X = T.match_sparse_buffer(x, (J_detach, F_in), "float32")
    Y = T.match_sparse_buffer(y, (I_detach, F_out), "float32")
    with T.sp_iter([I_detach, F_out], "SS", "rgcn-hetero-forward_init") as [i, fo]:
        Y[i, fo] = T.float32(0)
    with T.sp_iter([F_out, R, I, J, F_in], "SSSRR", "rgcn-hetero-forward") as [fo, r, i, j, fi]:
        Y[i, fo] = Y[i, fo] + A[r, i, j] * W[r, fo, fi] * X[j, fi]


@T.prim_func
def ell3d(
    a: T.handle, indptr_io: T.handle, indices_ii: T.handle, indices_j: T.handle, d0: T.int32, d1: T.int32,
    d2: T.int32, nnz: T.int32, nnz_rows: T.int32, nnz_cols: T.int32,
):  # fmt: skip
    R = T.dense_fixed(d0, idtype="int32")
    IO = T.dense_variable(R, (d1, nnz), indptr_io, idtype="int32")
    II = T.sparse_fixed(IO, (d2, nnz_rows), indices_ii, idtype="int32")
    J = T.sparse_fixed(II, (d2, nnz_cols), indices_j, idtype="int32")
    A = T.match_sparse_buffer(a, (R, IO, II, J), dtype="float32")
    T.evaluate(0)


GROUP_SIZE = 8
BUCKETS = [1, 2, 4, 8]
SPLIT_FACTOR_F = 2


def rules(buckets=BUCKETS, group_size=GROUP_SIZE) -> list[sp.FormatRewriteRule]:
    return [
        sp.FormatRewriteRule(
            str(bucket_id),
            ell3d.specialize({"nnz_rows": group_size // bucket_size, "nnz_cols": bucket_size}),
            ["A"],
            ["R", "I", "J"],
            ["R", "IO", "II", "J"],
            {"R": ["R"], "I": ["IO", "II"], "J": ["J"]},
            lambda r, i, j: (r, 0, i, j),
            lambda r, io, ii, j: (r, ii, j),
        )
        for bucket_id, bucket_size in enumerate(buckets)
    ]


def decomposed() -> sp.IRModule:
    return sp.remove_preprocess(sp.decompose_format(rgcn_hetero_forward, rules()))


def scheduled(target: str) -> sp.IRModule:
    sch = sp.Schedule(decomposed())
    for bucket_id in range(len(BUCKETS)):
        it = sch.get_sparse_iteration(f"rgcn-hetero-forward_{bucket_id}")
        fo, r, io, ii, j, fi = sch.get_sp_iters(it)
        sch.sparse_reorder(it, [r, io, ii, j, fo, fi])
        sch.sparse_fuse(it, [r, io])
    sch = sp.Schedule(sp.lower_sparse_iter(sch.mod))
    for bucket_id in range(len(BUCKETS)):
        blk = sch.get_block(f"rgcn-hetero-forward_{bucket_id}0")
        io, ii, j, fo, fi = sch.get_loops(blk)
        sch.annotate(blk, "atomic", True)  # groups of one relation and relations share rows of Y
        if target == "cpu":
            sch.parallel(io)
            continue
        foo, foi = sch.split(fo, [SPLIT_FACTOR_F, None])
        sch.reorder(io, ii, foo, foi, j, fi)
        sch.bind(fi, "threadIdx.x")
        sch.bind(foi, "threadIdx.y")
        sch.bind(io, "blockIdx.x")
        # SparseTIR unrolls `j`, `ii` and `foo`; here one of them: unrolling nested loops around a
        # block names two of its copies alike (`unroll_loops`, left for its owner).
        sch.unroll(foo)
        (p,) = sch.get_loops(sch.get_block(f"rgcn-hetero-forward_{bucket_id}_fuse_search"))
        po, pi = sch.split(p, [None, 32])
        sch.bind(po, "blockIdx.x")
        sch.bind(pi, "threadIdx.x")
    i, fo = sch.get_loops(sch.get_block("rgcn-hetero-forward_init0"))
    if target == "cpu":
        sch.parallel(i)
    else:
        sch.bind(i, "blockIdx.x")
        sch.bind(fo, "threadIdx.x")
    return sch.mod


# ------------------------------------------------------------------------------------------ inputs
def relations(name: str, num_rels: int) -> list[scipy.sparse.csr_matrix]:
    """A graph of `sp.data` (or a random one) with its edges split between `num_rels` relations."""
    rng = np.random.default_rng(num_rels)
    if name == "random":
        G = scipy.sparse.random(21, 21, density=0.25, format="csr", random_state=rng)
    else:
        G = sp.data.load_matrix(name)
    G = scipy.sparse.coo_matrix(G)
    rel = rng.integers(0, num_rels, G.nnz)
    out = []
    for r in range(num_rels):
        keep = rel == r
        M = scipy.sparse.csr_matrix((np.ones(keep.sum(), np.float32), (G.row[keep], G.col[keep])), shape=G.shape)
        M.sum_duplicates()
        M.sort_indices()
        out.append(M)
    return out


def csf_args(rels) -> dict:
    m, n = rels[0].shape
    indptr_i, indices_i, indptr_j, indices_j, values = [0], [], [0], [], []
    for M in rels:
        rows = np.flatnonzero(np.diff(M.indptr))
        indptr_i.append(indptr_i[-1] + len(rows))
        indices_i.append(rows)
        for r in rows:
            lo, hi = M.indptr[r], M.indptr[r + 1]
            indptr_j.append(indptr_j[-1] + hi - lo)
            indices_j.append(M.indices[lo:hi])
            values.append(M.data[lo:hi])
    cat = lambda xs, dt: np.concatenate([*xs, np.zeros(0, dt)]).astype(dt)  # noqa: E731
    return dict(a=cat(values, np.float32), indptr_i=np.array(indptr_i, np.int32), indices_i=cat(indices_i, np.int32),
                indptr_j=np.array(indptr_j, np.int32), indices_j=cat(indices_j, np.int32), m=m, n=n,
                num_rels=len(rels), nnz_i=int(indptr_i[-1]), nnz_j=int(indptr_j[-1]))  # fmt: skip


def ell3d_args(rels, buckets=BUCKETS, group_size=GROUP_SIZE) -> dict:
    """SparseTIR's `csf_to_ell3d`: per relation, its rows by the smallest bucket that holds them
    (longer rows cut into chunks of the largest), `group_size // width` rows per group; a group
    holds each row once; padding rows and columns are unstored ids past the matrix (value 0)."""
    m, n = rels[0].shape
    out = {}
    for b, w in enumerate(buckets):
        per_group = group_size // w
        lo = buckets[b - 1] if b else 0
        indptr_io, rows_ii, cols_j, vals = [0], [], [], []
        for M in rels:
            chunks = []  # (row, columns, values) of this bucket, rows ascending
            for r in range(m):
                cols, data = M.indices[M.indptr[r] : M.indptr[r + 1]], M.data[M.indptr[r] : M.indptr[r + 1]]
                if w == buckets[-1]:
                    chunks += [(r, cols[k : k + w], data[k : k + w]) for k in range(0, len(cols), w) if len(cols) > lo]
                elif lo < len(cols) <= w:
                    chunks.append((r, cols, data))
            groups: list[list] = []
            for chunk in chunks:
                if not groups or len(groups[-1]) == per_group or groups[-1][-1][0] == chunk[0]:
                    groups.append([])
                groups[-1].append(chunk)
            indptr_io.append(indptr_io[-1] + len(groups))
            for group in groups:
                for k in range(per_group):
                    r, cols, data = group[k] if k < len(group) else (m + k, np.zeros(0, np.int64), np.zeros(0))
                    rows_ii.append(r)
                    cols_j.append(np.concatenate([cols, n + np.arange(w - len(cols))]))
                    vals.append(np.concatenate([data, np.zeros(w - len(cols))]))
        name = str(b)
        out.update({
            f"a_{name}": np.concatenate([*vals, np.zeros(0)]).astype(np.float32),
            f"indptr_io_{name}": np.array(indptr_io, np.int32),
            f"indices_ii_{name}": np.array(rows_ii, np.int32),
            f"indices_j_{name}": np.concatenate([*cols_j, np.zeros(0)]).astype(np.int32),
            f"d0_{name}": len(rels), f"d1_{name}": max(indptr_io[-1], 1), f"d2_{name}": max(m + per_group, n + w),
            f"nnz_{name}": indptr_io[-1],
        })  # fmt: skip
    return out


CASES = {"karate_3rels": ("karate", 3, 8), "random_4rels": ("random", 4, 4), "cora_5rels": ("cora", 5, 16)}
SIMULATED = ("karate_3rels", "random_4rels")


def make_case(case: str) -> tuple[dict, np.ndarray, dict]:
    name, num_rels, feat = CASES[case]
    rels = relations(name, num_rels)
    m, n = rels[0].shape
    rng = np.random.default_rng(feat)
    x = rng.random((n, feat), dtype=np.float32)
    w = rng.random((num_rels, feat, feat), dtype=np.float32)
    csf = csf_args(rels)
    common = dict(w=w, x=x, y=np.full((m, feat), np.nan, np.float32), feat_size=feat)
    want = sum(M.astype(np.float64) @ (x.astype(np.float64) @ w[r].T) for r, M in enumerate(rels))
    ell = {k: v for k, v in csf.items() if k in ("m", "n", "num_rels")}
    return {**csf, **common}, want, {**common, **ell, **ell3d_args(rels)}


_KERNELS: dict = {}


def run(engine: str, case: str) -> np.ndarray:
    csf, _, parts = make_case(case)
    if engine == "interpret":
        sp.interpret(rgcn_hetero_forward, **csf)
        return csf["y"]
    if engine not in _KERNELS:
        _KERNELS[engine] = sp.compile(scheduled(engine), engine)
    kernel = _KERNELS[engine]
    params = {p.name for p in kernel.func.params}
    kernel(**{k: v for k, v in parts.items() if k in params})
    return parts["y"]


def simulate(out: Path) -> None:
    simulate_cases(out, SIMULATED, lambda case: run("cuda", case))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    return simulated_run(tmp_path_factory, "st_rgcn", Path(__file__).resolve())


def test_ell3d_rules_named_by_bucket():
    f = decomposed()["main"]
    assert [s.name for s in f.body.stmts] == [
        "rgcn-hetero-forward_init",
        *(f"rgcn-hetero-forward_{b}" for b in range(len(BUCKETS))),
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_rgcn_equals_numpy(case, simulated):
    _csf, want, parts = make_case(case)
    for engine in ("interpret", "cpu") if case in SIMULATED else ("cpu",):
        np.testing.assert_allclose(run(engine, case), want, rtol=1e-4, atol=1e-4, err_msg=engine)
    if case not in SIMULATED:
        return
    # The decomposition itself, through the interpreter: the converted parts hold every edge.
    f = decomposed()["main"]
    args = {k: v for k, v in parts.items() if k in {p.name for p in f.params}}
    sp.interpret(f, **args)
    np.testing.assert_allclose(args["y"], want, rtol=1e-4, atol=1e-4, err_msg="decomposed, interpreted")
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
