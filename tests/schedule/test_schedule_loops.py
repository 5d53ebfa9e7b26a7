"""Loop primitives (split, parallel, vectorize, unroll, bind) and trace replay.

Each primitive: the scheduled function verifies, round-trips through the printer, replays from
its trace to a structurally equal function, and computes what the interpreter computes.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py.ops import sddmm_script, spmm_script


@pytest.fixture(scope="module")
def csrmm2():
    return sp.lower_sparse_iter(spmm_script())


def check(sch: sp.Schedule, unscheduled) -> None:
    f = sch.mod["main"]
    sp.verify(f)
    sp.assert_structural_equal(f, sp.from_script(f.script()))
    sp.assert_structural_equal(sch.trace.apply(unscheduled), sch.mod)
    namespace = {"sch": sp.Schedule(unscheduled)}
    exec(sch.trace.as_python(), namespace)  # the printed trace is runnable Python
    sp.assert_structural_equal(namespace["sch"].mod, sch.mod)
    A = sps.random(13, 11, density=0.3, format="csr", dtype=np.float32, random_state=2)
    A.sort_indices()
    B = np.random.default_rng(0).standard_normal((11, 5)).astype(np.float32)
    C = np.full((13, 5), np.nan, np.float32)
    sp.interpret(f, a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=13, n=11, feat=5, nnz=A.nnz)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cpu")
    C2 = np.full((13, 5), np.nan, np.float32)
    kernel(a=A.data, b=B, c=C2, indptr=A.indptr, indices=A.indices, m=13, n=11, feat=5, nnz=A.nnz)
    np.testing.assert_allclose(C2, A @ B, rtol=1e-5, atol=1e-6)


def test_get_loops_follows_tvm(csrmm2):
    sch = sp.Schedule(csrmm2)
    assert len(sch.get_loops(sch.get_block("csrmm0"))) == 1
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    assert (j.name, k.name) == ("j", "k")


@pytest.mark.parametrize("factors", [[None, 4], [2, None], [None, 2, 2], [3, 5]])
def test_split_with_guard(csrmm2, factors):
    sch = sp.Schedule(csrmm2)
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    loops = sch.split(k, factors)
    assert len(loops) == len(factors)
    block = next(n for n in sp.ir.visit.walk(sch.mod["main"].body) if isinstance(n, ir.Block) and n.name == "csrmm1")
    assert block.predicate is not None  # feat is symbolic: the guard stays
    check(sch, csrmm2)


def test_split_exact_has_no_guard():
    f = sp.lower_sparse_iter(spmm_script().specialize({"feat": 8}))
    sch = sp.Schedule(f)
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    outer, inner = sch.split(k, [None, 4])
    assert (outer.name, inner.name) == ("k_outer", "k_inner")
    block = next(n for n in sp.ir.visit.walk(sch.mod["main"].body) if isinstance(n, ir.Block) and n.name == "csrmm1")
    assert block.predicate is None


def test_parallel_vectorize_unroll_bind(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    sch.parallel(i)
    k0, k1 = sch.split(k, [None, 2])
    sch.vectorize(k1)
    sch.unroll(k0)
    check(sch, csrmm2)
    kinds = {f.loop_var.name: f.kind for f in sp.ir.visit.walk(sch.mod["main"].body) if isinstance(f, ir.For)}
    assert kinds["i"] == "parallel" and kinds["k_inner"] == "vectorized" and kinds["k_outer"] == "unrolled"


def test_design_cuda_schedule_replays(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    io, ii = sch.split(i, [None, 8])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    _, ki = sch.split(k, [None, 32])
    sch.bind(ki, "threadIdx.x")
    f = sch.mod["main"]
    sp.verify(f)
    sp.assert_structural_equal(sch.trace.apply(csrmm2), sch.mod)


def test_fail_bind_reduction_loop(csrmm2):
    sch = sp.Schedule(csrmm2)
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    before = sch.mod
    with pytest.raises(sp.ScheduleError, match="in `bind`: expected a loop that carries no reduction"):
        sch.bind(j, "threadIdx.x")
    assert sch.mod is before  # unchanged


def test_fail_parallel_reduction_loop():
    mod = sp.lower_sparse_iter(sddmm_script())
    sch = sp.Schedule(mod)
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    with pytest.raises(sp.ScheduleError, match="in `parallel`"):
        sch.parallel(k)


def test_fail_bind_twice_and_unknown_tag(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    with pytest.raises(sp.ScheduleError, match="expected one of"):
        sch.bind(i, "warp.x")
    sch.bind(i, "blockIdx.x")
    with pytest.raises(sp.ScheduleError, match="not yet bound"):
        sch.bind(i, "blockIdx.y")
    with pytest.raises(sp.ScheduleError, match="in `split`"):
        sch.split(i, [None, 2])


@pytest.mark.parametrize("factors,match", [([None, None], "at most one None"), ([0, None], "positive"), ([4], "two")])
def test_fail_split_factors(csrmm2, factors, match):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    with pytest.raises(sp.ScheduleError, match=match):
        sch.split(i, factors)


def test_fail_unknown_block(csrmm2):
    with pytest.raises(sp.ScheduleError, match="no block named 'nope'"):
        sp.Schedule(csrmm2).get_block("nope")
