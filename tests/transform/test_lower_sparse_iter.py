"""lower_sparse_iter: Stage I -> Stage II.

The csrmm test has the three parts of a pass test: a hand-written `before`, the `expected`
Stage II (structural equality), and the lowered function run against the Stage I interpreter.
Every corpus script is then lowered, verified, round-tripped through the printer and run
(loop by loop) against the Stage I interpreter on real and hypothesis-drawn matrices.
"""

from __future__ import annotations

import corpus
import numpy as np
import pytest
from corpus import CASES, TOLERANCES
from hypothesis import HealthCheck, given, settings
from strategies import csr_matrices, edge_matrices

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py import script as T
from sparsetir_py.data import load_matrix
from sparsetir_py.ir.expr import Call
from sparsetir_py.ir.visit import walk


@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    with T.sp_iter([I, J, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = 0.0
        C[i, k] = C[i, k] + A[i, j] * B[j, k]


EXPECTED_CSRMM = """
from sparsetir_py import script as T
from sparsetir_py.ir.expr import Call
from sparsetir_py.ir.visit import walk

@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):
    T.func_attr({"stage": 2})
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32", value_range=(0, nnz))
    J_indices = T.match_sparse_buffer(indices, (I, J), "int32", value_range=(0, n - 1))
    for i in T.serial(m):
        with T.block("csrmm0"):
            vi = T.axis.spatial(m, i)
            T.reads(J_indptr[0:m + 1], C[vi, 0:feat], A[vi, 0:J_indptr[vi + 1] - J_indptr[vi]], B[0:n, 0:feat],
                    J_indices[vi, 0:J_indptr[vi + 1] - J_indptr[vi]])
            T.writes(C[vi, 0:feat])
            if J_indptr[vi + 1] - J_indptr[vi] == 0:
                for k_init in T.serial(feat):
                    C[vi, k_init] = T.float32(0.0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                for k in T.serial(feat):
                    with T.block("csrmm1"):
                        vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                        vk = T.axis.spatial(feat, k)
                        T.reads(C[vi, vk], A[vi, vj], B[J_indices[vi, vj], vk], J_indices[vi, vj])
                        T.writes(C[vi, vk])
                        with T.init():
                            C[vi, vk] = T.float32(0.0)
                        C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
"""


def test_csrmm_lowers_to_the_expected_stage2():
    """Blocks csrmm0 (loop i) and csrmm1 (loops j, k); the init in csrmm1 and, for empty rows,
    in csrmm0; accesses in position space through J_indices; regions per block."""
    mod = sp.lower_sparse_iter(csrmm)
    assert isinstance(mod, ir.IRModule) and list(mod) == ["main"]
    sp.assert_structural_equal(mod["main"], sp.from_script(EXPECTED_CSRMM))
    sp.verify(mod)


def loops_between(func, block_name):
    """Loops between the named block and the block that encloses it, outermost first."""
    found = []

    def visit(s, loops):
        if isinstance(s, ir.Block):
            if s.name == block_name:
                found.extend(loops)
                return
            loops = []
        if isinstance(s, ir.For):
            loops = [*loops, s]
        for c in (s.body,) if isinstance(s, ir.For) else ():
            visit(c, loops)
        if isinstance(s, ir.Block):
            visit(s.body, loops)
        if isinstance(s, ir.SeqStmt):
            for x in s.stmts:
                visit(x, loops)
        if isinstance(s, ir.IfThenElse):
            visit(s.then_case, loops)

    visit(func.body, [])
    return found


@pytest.mark.parametrize(
    "name,blocks",
    [
        ("csrmm", {"csrmm0": 1, "csrmm1": 2}),
        ("sddmm", {"sddmm0": 1, "sddmm1": 2}),
        ("bsrmm", {"bsrmm0": 1, "bsrmm1": 4}),
        ("ellmm", {"ellmm0": 3}),
        ("square_sum", {"square_sum0": 1, "square_sum1": 1, "square_sum2": 1}),
        ("hyper_gnn", {"hyper_gnn0": 2, "hyper_gnn1": 1, "hyper_gnn2": 1}),
        ("sparse_softmax", {"sparse_softmax0": 1, "row_max0": 1, "row_sum0": 1, "row_div0": 1}),
    ],
)
def test_block_naming_and_loops(name, blocks):
    """Iteration N lowers to blocks N0, N1, ...; a new block starts at a variable axis."""
    f = sp.lower_sparse_iter(corpus.CASES_BY_NAME[name].build())["main"]
    names = [n.name for n in walk(f.body) if isinstance(n, ir.Block) and "search" not in n.name]
    assert sorted(names) == sorted(blocks)
    for block, n_loops in blocks.items():
        assert len(loops_between(f, block)) == n_loops, block


def test_fused_iteration_searches_rows_once():
    """T.fuse(I, J) walks nnz positions with one loop; the row of each position comes from a
    preprocessing block with a binary search over indptr."""
    f = sp.lower_sparse_iter(corpus.CASES_BY_NAME["fused_sddmm"].build())["main"]
    calls = [n for n in walk(f.body) if isinstance(n, ir.Call) and n.op == "lower_bound"]
    assert len(calls) == 1
    scratch = [b for b in f.buffers if isinstance(b, ir.FlatBuffer) and b.data is None]
    assert len(scratch) == 1
    outer = [s for s in walk(f.body) if isinstance(s, ir.For)]
    assert str(outer[0].extent) == str(f.param("nnz"))


def test_coordinate_read_uses_binary_search_and_default():
    """Reading A[i, j] while iterating the dense J_detach: a search in row i, default on a miss."""
    f = sp.lower_sparse_iter(corpus.CASES_BY_NAME["csrmm_dense_iter"].build())["main"]
    selects = [n for n in walk(f.body) if isinstance(n, ir.Select)]
    assert selects and all(isinstance(s.true_value, ir.BufferLoad) for s in selects)
    assert any(isinstance(n, ir.Call) and n.op == "lower_bound" for n in walk(selects[0].cond))


def test_stage2_and_other_functions_pass_through():
    mod = sp.lower_sparse_iter(csrmm)
    again = sp.lower_sparse_iter(mod)
    assert again["main"] is mod["main"]


@pytest.mark.parametrize("fused", [False, True])
def test_empty_reduction_domain_is_initialised(fused):
    """feat == 0 gives an empty reduction domain for SDDMM: every output still gets its init."""
    case = corpus.CASES_BY_NAME["fused_sddmm" if fused else "sddmm"]
    f = sp.lower_sparse_iter(case.build())
    A = corpus.prepare_csr(load_matrix("karate"), "int32", "float32")
    kwargs, outputs = case.make_args(A, np.random.default_rng(0), "int32", "float32", feat=0)
    sp.interpret(f, **kwargs)
    for name in outputs:
        assert (kwargs[name] == 0).all()


def run_lowered(case, A, idtype, dtype, feat=3):
    """Stage I interpreter vs the lowered function at Stages II and III (loop interpreter)."""
    A = corpus.prepare_csr(A, idtype, dtype)
    f = case.build(idtype, dtype)
    stage2 = sp.lower_sparse_iter(f)
    stage3 = sp.lower_sparse_buffer(stage2)
    sp.verify(stage2)
    sp.verify(stage3)
    kwargs, outputs = case.make_args(A, np.random.default_rng(1), idtype, dtype, feat=feat)
    results = []
    for func in (f, stage2["main"], stage3["main"]):
        kw = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        sp.interpret(func, **kw)
        results.append({o: kw[o] for o in outputs})
    tol = TOLERANCES[dtype]
    for got in results[1:]:
        for o in outputs:
            np.testing.assert_allclose(got[o], results[0][o], rtol=tol["rtol"], atol=tol["atol"], err_msg=o)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("matrix", ["karate", "lp_afiro"])
def test_corpus_lowered_matches_stage1(case, matrix):
    if matrix not in case.matrices:
        pytest.skip(f"{case.name} does not run on {matrix}")
    run_lowered(case, load_matrix(matrix), "int32", "float32")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_lowered_int64_float64_edges(case):
    """Empty matrices, empty rows, one row, rectangular shapes, with int64 indices and float64 values."""
    for A in edge_matrices().values():
        run_lowered(case, A, "int64", "float64", feat=2)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=10, max_cols=10))
def test_corpus_lowered_random(case, A):
    run_lowered(case, A, str(A.indices.dtype), str(A.data.dtype), feat=2)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_lowered_round_trips(case):
    for stage in (sp.lower_sparse_iter(case.build()), sp.lower_sparse_buffer(sp.lower_sparse_iter(case.build()))):
        f = stage["main"]
        sp.assert_structural_equal(f, sp.from_script(f.script()))


# ---------------------------------------------------------------------------------------------- nonzero split
def make_fused_csrmm(idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
    """SpMM with the spatial rows fused with the reduction over their nonzeros (kinds "SR")."""

    @T.prim_func
    def fused_csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
                    m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):  # fmt: skip
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        J_detach = T.dense_fixed(n, idtype)
        K = T.dense_fixed(feat, idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (J_detach, K), dtype)
        C = T.match_sparse_buffer(c, (I, K), dtype)
        with T.sp_iter([T.fuse(I, J), K], "SRS", "csrmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return fused_csrmm


FUSED_CSRMM = corpus.Case("fused_csrmm", make_fused_csrmm, corpus.CASES_BY_NAME["csrmm"].make_args,
                          corpus.CASES_BY_NAME["csrmm"].reference)  # fmt: skip

EXPECTED_FUSED_CSRMM = """
from sparsetir_py import script as T
from sparsetir_py.ir.expr import Call
from sparsetir_py.ir.visit import walk

@T.prim_func
def fused_csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
                m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):
    T.func_attr({"stage": 2})
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32", value_range=(0, nnz))
    J_indices = T.match_sparse_buffer(indices, (I, J), "int32", value_range=(0, n - 1))
    I_of_J = T.alloc_buffer((nnz,), "int32")
    for i_init in T.serial(m):
        for k_init in T.serial(feat):
            with T.block("csrmm_init0"):
                vi_init = T.axis.spatial(m, i_init)
                vk_init = T.axis.spatial(feat, k_init)
                T.reads()
                T.writes(C[vi_init, vk_init])
                C[vi_init, vk_init] = T.float32(0.0)
    for p in T.serial(nnz):
        with T.block("csrmm_fuse_search"):
            vp = T.axis.spatial(nnz, p)
            T.reads(J_indptr[0:m + 1])
            T.writes(I_of_J[vp])
            I_of_J[vp] = T.lower_bound(J_indptr, 0, m + 1, vp + 1) - 1
    for i_j in T.serial(nnz):
        for k in T.serial(feat):
            with T.block("csrmm0"):
                vi_j = T.axis.reduce(nnz, i_j)
                vk = T.axis.spatial(feat, k)
                T.reads(I_of_J[vi_j], C[I_of_J[vi_j], vk], A[I_of_J[vi_j], vi_j - J_indptr[I_of_J[vi_j]]],
                        J_indptr[I_of_J[vi_j]], B[J_indices[I_of_J[vi_j], vi_j - J_indptr[I_of_J[vi_j]]], vk],
                        J_indices[I_of_J[vi_j], vi_j - J_indptr[I_of_J[vi_j]]])
                T.writes(C[I_of_J[vi_j], vk])
                C[I_of_J[vi_j], vk] = C[I_of_J[vi_j], vk] + A[I_of_J[vi_j], vi_j - J_indptr[I_of_J[vi_j]]] * B[
                    J_indices[I_of_J[vi_j], vi_j - J_indptr[I_of_J[vi_j]]], vk]
"""


def test_fused_spatial_reduction_lowers_to_init_nest_then_nonzero_loop():
    """T.fuse(I, J) with kinds "SR": first an init nest over every (row, feature), empty rows
    included (block csrmm_init0); then the row search; then one reduction loop over the nonzeros
    whose block has no init (several nonzeros accumulate into one row of C)."""
    mod = sp.lower_sparse_iter(make_fused_csrmm())
    sp.assert_structural_equal(mod["main"], sp.from_script(EXPECTED_FUSED_CSRMM))
    sp.verify(mod)


def run_fused_csrmm(A, idtype, dtype, feat=3):
    """The fused program at Stages I, II and III against scipy (and so against each other)."""
    run_lowered(FUSED_CSRMM, A, idtype, dtype, feat)
    A = corpus.prepare_csr(A, idtype, dtype)
    f = make_fused_csrmm(idtype, dtype)
    kwargs, _ = FUSED_CSRMM.make_args(A, np.random.default_rng(3), idtype, dtype, feat=feat)
    expected = FUSED_CSRMM.reference(A, kwargs)["c"]
    tol = TOLERANCES[dtype]
    for func in (f, sp.lower_sparse_iter(f)):
        kw = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        sp.interpret(func, **kw)
        np.testing.assert_allclose(kw["c"], expected, rtol=tol["rtol"], atol=tol["atol"])


@pytest.mark.parametrize("matrix", ["karate", "lp_afiro"])
def test_fused_csrmm_real_matrices(matrix):
    run_fused_csrmm(load_matrix(matrix), "int32", "float32")


@pytest.mark.parametrize("name", list(edge_matrices()))
def test_fused_csrmm_edges_int64_float64(name):
    """Zero nnz, empty rows, one row, rectangular: every row of C is written, empty ones with 0."""
    run_fused_csrmm(edge_matrices()[name], "int64", "float64", feat=2)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=12, max_cols=12))
def test_fused_csrmm_random(A):
    run_fused_csrmm(A, str(A.indices.dtype), str(A.data.dtype), feat=2)


def test_fused_csrmm_round_trips():
    for mod in (
        sp.lower_sparse_iter(make_fused_csrmm()),
        sp.lower_sparse_buffer(sp.lower_sparse_iter(make_fused_csrmm())),
    ):
        sp.assert_structural_equal(mod["main"], sp.from_script(mod["main"].script()))


def test_fail_lowering_fused_reduction_then_spatial_with_init():
    """A fused group whose spatial member follows a reduction one (kinds "RS") in an iteration
    with an init is refused by the lowering itself (the verifier refuses it first, for the init's
    dependence; the pass does not rely on that); without an init it lowers to one reduction loop
    (`test_schedule_sparse.test_fuse_reduction_then_spatial_without_init` runs it)."""
    from sparsetir_py.transform.lower_sparse_iter import Lowering

    f = make_fused_csrmm()
    it = next(n for n in walk(f.body) if isinstance(n, ir.SparseIteration))
    bad = f.replace(body=it.replace(kinds="RSS"))
    with pytest.raises(sp.LoweringError, match='fused group of kinds "RS" has a spatial member after a reduction'):
        Lowering(bad).run()


def test_every_entry_point_verifies_its_input():
    """An ill-formed function (a write at a reduction iterator) gets the verifier's named
    error from each public entry point, and a verified function is remembered (a second call
    does not verify again)."""
    from unittest import mock

    from sparsetir_py.ir import verify as verify_module

    bad = sp.from_script(REDUCTION_WRITE)
    entries = {
        "interpret": lambda: sp.interpret(
            bad,
            a=np.zeros(1, np.float32),
            b=np.zeros(1, np.float32),
            indptr=np.array([0, 1], np.int32),
            indices=np.array([0], np.int32),
            m=1,
            n=1,
            nnz=1,
        ),
        "lower_sparse_iter": lambda: sp.lower_sparse_iter(bad),
        "lower_sparse_buffer": lambda: sp.lower_sparse_buffer(bad),
        "decompose_format": lambda: sp.decompose_format(bad, []),
        "Schedule": lambda: sp.Schedule(bad),
        "compile": lambda: sp.compile(bad, "cpu"),
    }
    for call in entries.values():
        with pytest.raises(sp.VerifyError, match="writes buffer `A` at an index that uses its reduction iterator"):
            call()
    good = make_fused_csrmm()
    sp.lower_sparse_iter(good)
    with mock.patch.object(verify_module, "verify", side_effect=AssertionError("verified twice")):
        sp.lower_sparse_iter(good)
        sp.Schedule(good)


REDUCTION_WRITE = """
@T.prim_func
def copy(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    Jd = T.dense_fixed(n)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (I, Jd), "float32")
    with T.sp_iter([I, J], "SR", "copy") as [i, j]:
        A[i, j] = B[i, j]
"""


@T.prim_func
def gather_through_unsorted(a: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, indices2: T.handle,
                            m: T.int32, n: T.int32, nnz: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32", sorted=False)
    J2 = T.sparse_variable(I, (n, nnz), (indptr, indices2), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")
    C = T.match_sparse_buffer(c, (I, J2), "float32")
    with T.sp_iter([I, J2], "SS", "g") as [i, j]:
        C[i, j] = A[i, j]


def test_coordinate_lookup_in_an_unsorted_level_scans():
    """A binary search over a level declared `sorted=False` finds the wrong position (the kernel
    read [0, 3, 0] where the answer is [2, 3, 1]); lowering scans such a level (`T.linear_find`)."""
    lowered = sp.lower_sparse_iter(gather_through_unsorted)["main"]
    calls = {n.op for n in walk(lowered.body) if isinstance(n, Call)}
    assert "linear_find" in calls and "lower_bound" not in calls
    rng = np.random.default_rng(0)
    rows = [rng.permutation(5)[: int(k)] for k in (3, 0, 5, 1)]
    indptr = np.cumsum([0, *map(len, rows)]).astype(np.int32)
    unsorted = np.concatenate(rows).astype(np.int32)
    sorted_ = np.concatenate([np.sort(r) for r in rows]).astype(np.int32)
    a = rng.standard_normal(len(unsorted)).astype(np.float32)
    want = np.concatenate([a[indptr[r] + np.argsort(rows[r])] for r in range(4)])
    for run in (gather_through_unsorted, lowered, sp.lower_sparse_buffer(lowered)["main"], "cpu"):
        c = np.full(len(a), np.nan, np.float32)
        kw = dict(a=a, c=c, indptr=indptr, indices=unsorted, indices2=sorted_, m=4, n=5, nnz=len(a))
        if run == "cpu":
            sp.compile(gather_through_unsorted, "cpu")(**kw)
        else:
            sp.interpret(run, **kw)
        np.testing.assert_array_equal(c, want)
