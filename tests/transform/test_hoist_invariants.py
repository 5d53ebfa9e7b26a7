"""Pre-codegen passes: hoisting of loop-invariant loads and scalar replacement of accumulations.

Both must leave results unchanged (loop interpreter before and after) and produce the
structure they promise."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import sddmm_script, spmm_script
from sparsetir_py.transform.hoist_invariants import hoist_loop_invariants, promote_accumulators


def stage3(func):
    return sp.lower_sparse_buffer(sp.lower_sparse_iter(func))["main"]


def matrix():
    A = sps.random(17, 13, density=0.3, format="csr", dtype=np.float32, random_state=3)
    A.sort_indices()
    return A


def test_hoisting_binds_invariant_loads_before_a_constant_loop():
    f = stage3(spmm_script().specialize({"feat": 4}))
    g = hoist_loop_invariants(f)["main"]
    sp.verify(g)
    lets = [n for n in walk(g.body) if isinstance(n, ir.LetStmt)]
    # A's value and column out of the feature loop; the row's start out of the loop over its
    # nonzeros (an extent known at run time only: under `if J_indptr[vi + 1] - J_indptr[vi] > 0`).
    assert {let.value.buffer.name for let in lets} == {"A", "J_indices", "J_indptr"}
    assert all(isinstance(let.body, ir.For) and let.body.extent == ir.IntImm(4) for let in lets[-1:])
    A = matrix()
    B = np.random.default_rng(0).standard_normal((13, 4)).astype(np.float32)
    for h in (f, g):
        C = np.full((17, 4), np.nan, np.float32)
        sp.interpret(h, a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=17, n=13, nnz=A.nnz)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)


def test_hoisting_out_of_loops_of_unknown_extent_is_guarded():
    """With `feat` a run-time value the feature loop may run zero times: what moves out of it is
    bound under `if feat > 0` (nothing is read that the loop would not read); results equal for
    feat 0, 1 and 5, and with an empty row."""
    f = stage3(spmm_script())
    g = hoist_loop_invariants(f)["main"]
    sp.verify(g)
    guards = [n for n in walk(g.body) if isinstance(n, ir.IfThenElse) and "feat" in str(n.condition)]
    assert guards and all(isinstance(n.then_case, ir.LetStmt) for n in guards)
    keep = np.ones(17, np.float32)
    keep[3] = 0  # an empty row
    A = (sps.diags(keep) @ matrix()).tocsr()
    A.eliminate_zeros()
    A.sort_indices()
    for feat in (0, 1, 5):
        B = np.random.default_rng(feat).standard_normal((13, feat)).astype(np.float32)
        outs = []
        for h in (f, g):
            C = np.full((17, feat), np.nan, np.float32)
            sp.interpret(h, a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=17, n=13, feat=feat, nnz=A.nnz)
            outs.append(C)
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
        np.testing.assert_allclose(outs[1], A @ B, rtol=1e-5, atol=1e-6)


def test_an_invariant_guard_leaves_the_feature_loop():
    """ELL buckets pad rows with columns past the matrix, and each slot's update is guarded
    (`I_indices < m and J_indices < n`). The guard does not change over the features, so it is
    tested once before the feature loop (unswitching) and the loop body is the bare update."""
    import format_rules

    A = matrix()
    rules = format_rules.ell.rules(A, [1, 2, 8])
    f = stage3(sp.remove_preprocess(sp.decompose_format(spmm_script(), rules)))
    g = hoist_loop_invariants(f)["main"]
    sp.verify(g)
    guarded = [n for n in walk(f.body) if isinstance(n, ir.For) and n.loop_var.name.startswith("k_")]
    assert any(isinstance(n, ir.IfThenElse) for k in guarded for n in walk(k.body))  # before
    features = [n for n in walk(g.body) if isinstance(n, ir.For) and n.loop_var.name.startswith("k_")]
    assert features and not any(isinstance(n, ir.IfThenElse) for k in features for n in walk(k.body))
    assert not any(isinstance(n, ir.Block) and n.predicate is not None for k in features for n in walk(k.body))
    B = np.random.default_rng(2).standard_normal((13, 3)).astype(np.float32)
    args = {"b": B, "m": 17, "n": 13, "feat": 3, **sp.format.convert(A, rules)}
    outs = []
    for h in (f, g):
        C = np.full((17, 3), np.nan, np.float32)
        sp.interpret(h, c=C, **{k: v for k, v in args.items() if k in {p.name for p in h.params}})
        outs.append(C)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
    np.testing.assert_allclose(outs[1], A @ B, rtol=1e-5, atol=1e-6)


def test_accumulation_goes_through_a_register():
    """SDDMM: C[J_indptr[vi] + vj] is the only element of C touched in the loop over k."""
    f = stage3(sddmm_script())
    g = promote_accumulators(f)["main"]
    sp.verify(g)
    allocs = [n for n in walk(g.body) if isinstance(n, ir.Allocate)]
    assert len(allocs) == 1 and allocs[0].buffer.scope == "local" and allocs[0].buffer.shape == (ir.IntImm(1),)
    loop = next(n for n in walk(allocs[0].body) if isinstance(n, ir.For))
    assert not any(isinstance(n, ir.BufferStore) and n.buffer.name == "C" for n in walk(loop.body))
    A = matrix()
    rng = np.random.default_rng(1)
    X = rng.standard_normal((17, 5)).astype(np.float32)
    Y = rng.standard_normal((13, 5)).astype(np.float32)
    outs = []
    for h in (f, g):
        out = np.full(A.nnz, np.nan, np.float32)
        sp.interpret(h, a=A.data, x=X, y=Y, c=out, indptr=A.indptr, indices=A.indices, m=17, n=13, feat=5, nnz=A.nnz)
        outs.append(out)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)


def test_an_invariant_factor_leaves_the_loop():
    """SDDMM with the init out of the loop (`csr_cpu_rows`): `acc = acc + A[p] * X * Y` becomes
    `s = s + X * Y` in the loop and `acc = acc + A[p] * s` after it, when the loop ran."""
    from schedules.sddmm import csr_cpu_rows

    sch = sp.Schedule(sp.lower_sparse_iter(sddmm_script()))
    csr_cpu_rows(sch)
    f = sp.lower_sparse_buffer(sch.mod)["main"]
    g = promote_accumulators(f)["main"]
    sp.verify(g)
    names = sorted(n.buffer.name for n in walk(g.body) if isinstance(n, ir.Allocate))
    assert names == ["C_acc0", "C_acc0_sum"]
    k_loop = next(n for n in walk(g.body) if isinstance(n, ir.For) and n.loop_var.name == "k")
    assert not any(isinstance(n, ir.BufferLoad) and n.buffer.name == "A" for n in walk(k_loop))
    after = [n for n in walk(g.body) if isinstance(n, ir.IfThenElse) and "feat" in str(n.condition)]
    assert any(isinstance(m, ir.BufferLoad) and m.buffer.name == "A" for n in after for m in walk(n))
    A = matrix()
    rng = np.random.default_rng(1)
    for feat in (5, 1, 0):
        X = rng.standard_normal((17, feat)).astype(np.float32)
        Y = rng.standard_normal((13, feat)).astype(np.float32)
        outs = []
        for h in (f, g):
            out = np.full(A.nnz, np.nan, np.float32)
            sp.interpret(h, a=A.data, x=X, y=Y, c=out, indptr=A.indptr, indices=A.indices, m=17, n=13, feat=feat,
                         nnz=A.nnz)  # fmt: skip
            outs.append(out)
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs[1], A.multiply(X @ Y.T).tocsr().data, rtol=1e-5, atol=1e-5)


def test_no_promotion_when_the_element_changes_in_the_loop():
    """SpMM: C's element depends on k, so the accumulation stays in memory."""
    f = stage3(spmm_script())
    g = promote_accumulators(f)["main"]
    assert not any(isinstance(n, ir.Allocate) for n in walk(g.body))


@T.prim_func
def block_sums(x: T.handle, s: T.handle, m: T.int32, n: T.int32):
    """The four cells of 2 x 2 blocks summed over `k`, addressed as a BSR kernel addresses them:
    `(p * 2 + ii) * 2 + ji` with constant cell indices, widened (`T.int64(1)`)."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (n,), "float32")
    S = T.match_buffer(s, (m * 4,), "float32")
    for p in range(m):
        for k in range(n):
            S[(p * 2 + T.int64(0)) * 2 + T.int64(0)] = S[(p * 2 + T.int64(0)) * 2 + T.int64(0)] + X[k]
            S[(p * 2 + T.int64(0)) * 2 + T.int64(1)] = S[(p * 2 + T.int64(0)) * 2 + T.int64(1)] + X[k] * T.float32(2)
            S[(p * 2 + T.int64(1)) * 2 + T.int64(0)] = S[(p * 2 + T.int64(1)) * 2 + T.int64(0)] + X[k] * T.float32(3)
            S[(p * 2 + T.int64(1)) * 2 + T.int64(1)] = S[(p * 2 + T.int64(1)) * 2 + T.int64(1)] + X[k] * T.float32(4)


def test_the_cells_of_a_block_are_distinct_registers():
    """`(p * 2 + 0) * 2 + 1` and `(p * 2 + 1) * 2 + 0` differ by their constants once the
    product is distributed: four registers (and the partial sums that take the constant
    factors out of the loop), the same sums."""
    g = promote_accumulators(block_sums)["main"]
    registers = [n.buffer.name for n in walk(g.body) if isinstance(n, ir.Allocate)]
    assert len([r for r in registers if not r.endswith("_sum")]) == 4
    X = np.arange(1, 6, dtype=np.float32)
    outs = []
    for f in (block_sums, g):
        S = np.ones(12, np.float32)
        sp.interpret(f, x=X, s=S, m=3, n=5)
        outs.append(S)
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[0], np.tile([16, 31, 46, 61], 3))
