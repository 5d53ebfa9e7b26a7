"""Stage I schedule primitives: `sparse_reorder` and `sparse_fuse` on sparse iterations.

Each scheduled function is checked the same way: it verifies, equals a hand-written expected
function where the test gives one, round-trips through the printer, replays from its trace
(`trace.apply` and the printed `trace.as_python()`), computes what the reference computes in the
Stage I interpreter, and still does after `lower_sparse_iter` (loop interpreter; a CPU kernel for
a few). Every precondition has a failing test that leaves the schedule unchanged.
"""

from __future__ import annotations

import doctest
import itertools

import corpus
import numpy as np
import pytest
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py import script as T
from sparsetir_py.ir.stmt import SparseIteration
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import sddmm_script, spmm_script
from sparsetir_py.schedule import sparse as sparse_module
from sparsetir_py.schedule.sparse import SparseIterationRV, SpIterRV, sparse_reorder


class Schedule(sp.Schedule):
    """`sp.Schedule` that verifies the function after every primitive."""

    def _update(self, func) -> None:
        sp.verify(func)
        super()._update(func)


def small_csr(idtype: str = "int32", dtype: str = "float32") -> sps.csr_matrix:
    """7 x 6, about 35% dense, with an empty row (row 3)."""
    A = sps.random(7, 6, density=0.35, format="csr", random_state=5).toarray()
    A[3] = 0
    A[5, 1] = 2.0
    return corpus.prepare_csr(A, idtype, dtype)


def assert_computes(func, case: corpus.Case, A=None) -> None:
    """`func` (any stage) writes what `case.reference` computes, on a tiny matrix."""
    A = small_csr() if A is None else A
    kwargs, outputs = case.make_args(A, np.random.default_rng(0), "int32", "float32", 3)
    expected = case.reference(A, kwargs)
    sp.interpret(func, **kwargs)
    for name in outputs:
        scale = max(1.0, float(np.abs(expected[name]).max(initial=0.0)))
        np.testing.assert_allclose(kwargs[name], expected[name], rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def check(sch: sp.Schedule, unscheduled, case: corpus.Case, *, kernel: bool = False) -> None:
    """Verify, round trip, trace replay, and the computation at Stage I and after lowering."""
    f = sch.mod["main"]
    sp.verify(f)
    assert f.stage == 1
    sp.assert_structural_equal(f, sp.from_script(f.script()))
    sp.assert_structural_equal(sch.trace.apply(unscheduled), sch.mod)
    namespace = {"sch": Schedule(unscheduled)}
    exec(sch.trace.as_python(), namespace)  # the printed trace is runnable Python
    sp.assert_structural_equal(namespace["sch"].mod, sch.mod)
    assert_computes(f, case)
    lowered = sp.lower_sparse_iter(sch.mod)
    sp.verify(lowered)
    assert_computes(lowered, case)
    if kernel:
        A = small_csr()
        kwargs, outputs = case.make_args(A, np.random.default_rng(1), "int32", "float32", 3)
        expected = case.reference(A, kwargs)
        sp.build(sp.lower_sparse_buffer(lowered), target="cpu")(**kwargs)
        for name in outputs:
            np.testing.assert_allclose(kwargs[name], expected[name], rtol=1e-4, atol=1e-4, err_msg=name)


def header(func, name: str | None = None) -> str:
    """The `T.sp_iter` line (of iteration `name`) of a printed Stage I function."""
    lines = [line.strip() for line in func.script().splitlines() if "T.sp_iter" in line]
    return next(line for line in lines if name is None or f'"{name}")' in line)


def iteration(func, name: str) -> SparseIteration:
    return next(n for n in walk(func.body) if isinstance(n, SparseIteration) and n.name == name)


# ---------------------------------------------------------------------------------------------- handles
def test_handles_follow_the_iteration():
    sch = Schedule(spmm_script())
    it = sch.get_sparse_iteration("csrmm")
    assert it == SparseIterationRV("csrmm")
    iters = sch.get_sp_iters(it)
    assert [h.name for h in iters] == ["i", "j", "k"]
    assert all(isinstance(h, SpIterRV) for h in iters)
    assert sch.trace.as_python() == "l0 = sch.get_sparse_iteration('csrmm')\nl1, l2, l3 = sch.get_sp_iters(l0)\n"


def test_docstring_examples():
    assert doctest.testmod(sparse_module, optionflags=doctest.ELLIPSIS).failed == 0


# ---------------------------------------------------------------------------------------------- sparse_reorder
@T.prim_func
def sddmm_ikj(a: T.handle, x: T.handle, y: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
              m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    X = T.match_sparse_buffer(x, (I, K), "float32")
    Y = T.match_sparse_buffer(y, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, J), "float32")
    with T.sp_iter([I, K, J], "SRS", "sddmm") as [i, k, j]:
        with T.init():
            C[i, j] = 0.0
        C[i, j] = C[i, j] + A[i, j] * X[i, k] * Y[j, k]


def test_sparse_reorder_sddmm():
    """The reduction over K moves between the row and its nonzeros: one block over (i, k), the
    nonzeros of the row inside it; the init runs over the row before its first k."""
    func = sddmm_script()
    sch = Schedule(func)
    it = sch.get_sparse_iteration("sddmm")
    i, j, k = sch.get_sp_iters(it)
    sch.sparse_reorder(it, [i, k, j])
    sp.assert_structural_equal(sch.mod["main"], sddmm_ikj)
    check(sch, func, corpus.CASES_BY_NAME["sddmm"], kernel=True)
    lowered = Schedule(sp.lower_sparse_iter(sch.mod))
    assert [lp.name for lp in lowered.get_loops(lowered.get_block("sddmm0"))] == ["i", "k"]
    assert [lp.name for lp in lowered.get_loops(lowered.get_block("sddmm1"))] == ["j"]


def test_sparse_reorder_csrmm_feature_outside():
    """SpMM with the feature loop outside the row's nonzeros (k before j)."""
    func = spmm_script()
    sch = Schedule(func)
    it = sch.get_sparse_iteration("csrmm")
    i, j, k = sch.get_sp_iters(it)
    sch.sparse_reorder(it, [i, k, j])
    assert header(sch.func) == 'with T.sp_iter([I, K, J], "SSR", "csrmm") as [i, k, j]:'
    check(sch, func, corpus.CASES_BY_NAME["csrmm"], kernel=True)


def test_sparse_reorder_accepts_positions_and_vars():
    func = spmm_script()
    by_handle, by_position, by_var = Schedule(func), Schedule(func), Schedule(func)
    i, j, k = by_handle.get_sp_iters(by_handle.get_sparse_iteration("csrmm"))
    by_handle.sparse_reorder(SparseIterationRV("csrmm"), [k, i, j])
    by_position.sparse_reorder(by_position.get_sparse_iteration("csrmm"), [2, 0, 1])
    by_var.sparse_reorder(by_var.get_sparse_iteration("csrmm"), [k.var, i.var, j.var])
    sp.assert_structural_equal(by_handle.mod, by_position.mod)
    sp.assert_structural_equal(by_handle.mod, by_var.mod)
    assert "sch.sparse_reorder(l0, [2, 0, 1])" in by_position.trace.as_python()


def test_sparse_reorder_identity_and_handles_stay_valid():
    func = spmm_script()
    sch = Schedule(func)
    it = sch.get_sparse_iteration("csrmm")
    i, j, k = sch.get_sp_iters(it)
    sch.sparse_reorder(it, [i, j, k])
    sp.assert_structural_equal(sch.mod["main"], func)
    sch.sparse_reorder(it, [k, i, j])
    sch.sparse_reorder(it, [i, j, k])  # the same handles, after a reorder
    sp.assert_structural_equal(sch.mod["main"], func)
    check(sch, func, corpus.CASES_BY_NAME["csrmm"])


def _valid(axes) -> bool:
    """Every axis after its iteration parent, when that parent is iterated here."""
    iterated = {sp.ir.axis.base_axis(a) for a in axes}
    seen = set()
    for a in axes:
        parent = sp.ir.axis.iteration_parent(a)
        if parent is not None and parent in iterated and parent not in seen:
            return False
        seen.add(sp.ir.axis.base_axis(a))
    return True


@pytest.mark.parametrize("name", ["bsrmm", "hyper_gnn", "rgcn"])
def test_sparse_reorder_every_permutation(name):
    """Every order is accepted exactly when each axis comes after its parent, and every accepted
    order computes the reference, in coordinate space and after lowering."""
    case = corpus.CASES_BY_NAME[name]
    func = case.build()
    it_name = next(n.name for n in walk(func.body) if isinstance(n, SparseIteration))
    node = iteration(func, it_name)
    accepted = 0
    for perm in itertools.permutations(range(len(node.iter_vars))):
        axes = [node.axes[p] for p in perm]
        if not _valid(axes):
            with pytest.raises(sp.ScheduleError, match="before its parent"):
                sparse_reorder(func, it_name, list(perm))
            continue
        out = sparse_reorder(func, it_name, list(perm))
        sp.verify(out)
        assert [v.name for v in iteration(out, it_name).iter_vars] == [node.iter_vars[p].name for p in perm]
        assert_computes(out, case)
        assert_computes(sp.lower_sparse_iter(out), case)
        accepted += 1
    assert accepted > 1


# ---------------------------------------------------------------------------------------------- sparse_fuse
@T.prim_func
def sddmm_fused(a: T.handle, x: T.handle, y: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
                m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    X = T.match_sparse_buffer(x, (I, K), "float32")
    Y = T.match_sparse_buffer(y, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, J), "float32")
    with T.sp_iter([T.fuse(I, J), K], "SSR", "sddmm") as [i, j, k]:
        with T.init():
            C[i, j] = 0.0
        C[i, j] = C[i, j] + A[i, j] * X[i, k] * Y[j, k]


def test_sparse_fuse_sddmm():
    """(i, j) become one walk over A's nonzeros: lowering gives one loop over nnz and a search
    block that recovers each nonzero's row."""
    func = sddmm_script()
    sch = Schedule(func)
    it = sch.get_sparse_iteration("sddmm")
    i, j, _ = sch.get_sp_iters(it)
    sch.sparse_fuse(it, [i, j])
    sp.assert_structural_equal(sch.mod["main"], sddmm_fused)
    check(sch, func, corpus.CASES_BY_NAME["sddmm"], kernel=True)
    lowered = Schedule(sp.lower_sparse_iter(sch.mod))
    assert [lp.name for lp in lowered.get_loops(lowered.get_block("sddmm0"))] == ["i_j", "k"]
    lowered.get_block("sddmm_fuse_search")


def test_sparse_fuse_then_reorder():
    """The fused group moves as a whole: the reduction over K outermost."""
    func = sddmm_script()
    sch = Schedule(func)
    it = sch.get_sparse_iteration("sddmm")
    i, j, k = sch.get_sp_iters(it)
    sch.sparse_fuse(it, [i, j])
    sch.sparse_reorder(it, [k, i, j])
    assert header(sch.func) == 'with T.sp_iter([K, T.fuse(I, J)], "RSS", "sddmm") as [k, i, j]:'
    check(sch, func, corpus.CASES_BY_NAME["sddmm"])


def test_sparse_fuse_without_init():
    """Element-wise over the nonzeros (no reduction): the fused loop covers every stored point."""
    case = corpus.CASES_BY_NAME["csr_element_wise"]
    func = case.build()
    sch = Schedule(func)
    name = next(n.name for n in walk(func.body) if isinstance(n, SparseIteration))
    it = sch.get_sparse_iteration(name)
    iters = sch.get_sp_iters(it)
    sch.sparse_fuse(it, iters[:2])
    assert "T.fuse(" in header(sch.func)
    check(sch, func, case, kernel=True)


def test_sparse_fuse_under_an_outer_iterator():
    """RGCN on a 3-level CSF (relation, row, nonzero): the spatial (relation, row) pairs fused
    into one walk, inside the loop over output features."""
    case = corpus.CASES_BY_NAME["rgcn_hetero"]
    func = case.build()
    sch = Schedule(func)
    it = sch.get_sparse_iteration("rgcn_hetero")
    _, r, i, _, _ = sch.get_sp_iters(it)
    sch.sparse_fuse(it, [r, i])
    assert header(sch.func, "rgcn_hetero").startswith("with T.sp_iter([F_out, T.fuse(R, I), J, F_in]")
    check(sch, func, case)


@T.prim_func
def csf_scale(a: T.handle, b: T.handle, indptr_j: T.handle, indices_j: T.handle, indptr_k: T.handle,
              indices_k: T.handle, m: T.int32, n1: T.int32, n2: T.int32, nnz_j: T.int32, nnz_k: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n1, nnz_j), (indptr_j, indices_j), "int32")
    K = T.sparse_variable(J, (n2, nnz_k), (indptr_k, indices_k), "int32")
    A = T.match_sparse_buffer(a, (I, J, K), "float32")
    B = T.match_sparse_buffer(b, (I, J, K), "float32")
    with T.sp_iter([I, J, K], "SSS", "csf_scale") as [i, j, k]:
        B[i, j, k] = A[i, j, k] * 3.0 + T.float32(i) - T.float32(k)


def test_sparse_fuse_three_levels():
    """A chain of three axes (a 3-level CSF) fused into one walk over the leaf's nonzeros: two
    binary searches per point recover the row and the middle level."""
    sch = Schedule(csf_scale)
    it = sch.get_sparse_iteration("csf_scale")
    sch.sparse_fuse(it, sch.get_sp_iters(it))
    assert header(sch.func) == 'with T.sp_iter([T.fuse(I, J, K)], "SSS", "csf_scale") as [i, j, k]:'
    f = sch.mod["main"]
    sp.verify(f)
    sp.assert_structural_equal(f, sp.from_script(f.script()))
    sp.assert_structural_equal(sch.trace.apply(csf_scale), sch.mod)
    A = small_csr()
    kwargs, _ = corpus.CASES_BY_NAME["square_sum"].make_args(A, np.random.default_rng(0), "int32", "float32", 3)
    kwargs = {k: v for k, v in kwargs.items() if k != "b"}
    want = np.full(kwargs["nnz_k"], np.nan, np.float32)
    sp.interpret(csf_scale, **kwargs, b=want)
    for func in (f, sp.lower_sparse_iter(sch.mod)):
        got = np.full(kwargs["nnz_k"], np.nan, np.float32)
        sp.interpret(func, **kwargs, b=got)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    kernel = sp.build(sp.lower_sparse_buffer(sp.lower_sparse_iter(sch.mod)), target="cpu")
    got = np.full(kwargs["nnz_k"], np.nan, np.float32)
    kernel(**kwargs, b=got)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@T.prim_func
def csrmm_fused(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
                m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    with T.sp_iter([T.fuse(I, J), K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = 0.0
        C[i, k] = C[i, k] + A[i, j] * B[j, k]


def _fused_csrmm_schedule():
    sch = Schedule(spmm_script())
    it = sch.get_sparse_iteration("csrmm")
    i, j, _ = sch.get_sp_iters(it)
    sch.sparse_fuse(it, [i, j])
    return sch


def test_sparse_fuse_spatial_with_reduction_csrmm():
    """TACO's nonzero split of SpMM: spatial `i` fused with reduction `j`. Lowering gives one
    reduction loop over the nonzeros (block `csrmm0`, no init) after an init nest over every
    (row, feature) (block `csrmm_init0`), so empty rows are zero too."""
    sch = _fused_csrmm_schedule()
    sp.assert_structural_equal(sch.mod["main"], csrmm_fused)
    check(sch, spmm_script(), corpus.CASES_BY_NAME["csrmm"], kernel=True)
    lowered = Schedule(sp.lower_sparse_iter(sch.mod))
    block = lowered.get_block("csrmm0")
    assert [lp.name for lp in lowered.get_loops(block)] == ["i_j", "k"]
    assert [lp.name for lp in lowered.get_loops(lowered.get_block("csrmm_init0"))] == ["i_init", "k_init"]
    assert lowered.func.script().count("T.init()") == 0


def test_fused_nonzero_loop_needs_atomic_updates():
    """The fused (i, j) loop carries the reduction: `parallel` and `bind` refuse it until the
    block is annotated "atomic"; the init nest binds freely."""
    lowered = Schedule(sp.lower_sparse_iter(_fused_csrmm_schedule().mod))
    block = lowered.get_block("csrmm0")
    ij, _ = lowered.get_loops(block)
    _fails(lowered, "expected a loop that carries no reduction, but `i_j` does", lowered.parallel, ij)
    _fails(lowered, "expected a loop that carries no reduction, but `i_j` does", lowered.bind, ij, "blockIdx.x")
    outer, inner = lowered.split(ij, [None, 4])
    _fails(lowered, "carries no reduction, but `i_j_inner` does", lowered.bind, inner, "threadIdx.y")
    lowered.annotate(block, "atomic", True)
    lowered.bind(outer, "blockIdx.x")
    lowered.bind(inner, "threadIdx.y")
    i_init, k_init = lowered.get_loops(lowered.get_block("csrmm_init0"))
    lowered.bind(i_init, "blockIdx.x")
    lowered.bind(k_init, "threadIdx.x")
    sp.verify(lowered.mod)
    assert "T.atomic_add(C[I_of_J[vi_j], vk]" in lowered.func.script()
    assert_computes(lowered.mod, corpus.CASES_BY_NAME["csrmm"])


def test_fused_nonzero_loop_parallel_on_cpu():
    """The CPU kernel: the init nest and the atomic nonzero loop in parallel, equal to scipy."""
    lowered = Schedule(sp.lower_sparse_iter(_fused_csrmm_schedule().mod))
    block = lowered.get_block("csrmm0")
    lowered.annotate(block, "atomic", True)
    lowered.parallel(lowered.get_loops(block)[0])
    lowered.parallel(lowered.get_loops(lowered.get_block("csrmm_init0"))[0])
    A = small_csr()
    case = corpus.CASES_BY_NAME["csrmm"]
    kwargs, _ = case.make_args(A, np.random.default_rng(2), "int32", "float32", 5)
    sp.build(sp.lower_sparse_buffer(lowered.mod), target="cpu")(**kwargs)
    np.testing.assert_allclose(kwargs["c"], case.reference(A, kwargs)["c"], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- preconditions
def _sddmm_schedule():
    sch = Schedule(sddmm_script())
    it = sch.get_sparse_iteration("sddmm")
    return sch, it, sch.get_sp_iters(it)


def _fails(sch: sp.Schedule, match: str, fn, *args) -> None:
    before, n = sch.mod, len(sch.trace.instructions)
    with pytest.raises(sp.ScheduleError, match=match):
        fn(*args)
    assert sch.mod is before and len(sch.trace.instructions) == n  # unchanged, nothing recorded


def test_fail_unknown_iteration():
    sch = Schedule(sddmm_script())
    _fails(sch, "in `get_sparse_iteration`: no sparse iteration named 'nope'", sch.get_sparse_iteration, "nope")


def test_fail_iteration_name_not_a_str():
    sch = Schedule(sddmm_script())
    it = sch.get_sparse_iteration("sddmm")
    _fails(sch, r"expected a sparse iteration name \(a str\), but got SparseIterationRV", sch.get_sparse_iteration, it)


def test_fail_unknown_iteration_lists_nested_iterations_in_program_order():
    from corpus import make_sparse_softmax

    sch = Schedule(make_sparse_softmax())
    match = (
        r"no sparse iteration named 'row_mx' in `sparse_softmax` \(it has `sparse_softmax`, `row_max`, `row_sum`, "
        r"`row_div`\); did you mean `row_max`\?"
    )
    _fails(sch, match, sch.get_sparse_iteration, "row_mx")


def test_fail_stage2_function():
    sch = Schedule(sp.lower_sparse_iter(sddmm_script()))
    _fails(sch, "in `get_sparse_iteration`: expected a Stage I function", sch.get_sparse_iteration, "sddmm")
    with pytest.raises(sp.ScheduleError, match="in `sparse_reorder`: expected a Stage I"):
        sparse_reorder(sch.mod["main"], "sddmm", [0, 1, 2])


def test_fail_not_an_iteration_handle():
    sch, _, (i, j, k) = _sddmm_schedule()
    _fails(sch, "expected a sparse iteration handle", sch.sparse_reorder, "sddmm", [i, j, k])


def test_fail_reorder_child_before_parent():
    sch, it, (i, j, k) = _sddmm_schedule()
    _fails(sch, r"in `sparse_reorder`: .* `J` would come before its parent `I`", sch.sparse_reorder, it, [j, i, k])


def test_fail_reorder_not_a_permutation():
    sch, it, (i, j, _) = _sddmm_schedule()
    _fails(sch, "exactly once, but got \\[i, j\\]", sch.sparse_reorder, it, [i, j])
    _fails(sch, "exactly once, but got \\[i, j, j\\]", sch.sparse_reorder, it, [i, j, j])


def test_fail_reorder_foreign_iterator():
    sch, it, (i, j, _) = _sddmm_schedule()
    other = Schedule(spmm_script())
    (_, _, k_other) = other.get_sp_iters(other.get_sparse_iteration("csrmm"))
    _fails(sch, "expected an iterator of sparse iteration `sddmm`", sch.sparse_reorder, it, [i, j, k_other])
    _fails(sch, r"expected an iterator position in \[0, 3\)", sch.sparse_reorder, it, [0, 1, 3])
    _fails(sch, "expected an iterator handle or position", sch.sparse_reorder, it, [0, 1, "k"])
    _fails(sch, "expected a list of iterators", sch.sparse_reorder, it, i)


def test_fail_reorder_splits_fused_group():
    sch, it, (i, j, k) = _sddmm_schedule()
    sch.sparse_fuse(it, [i, j])
    _fails(sch, r"fused axes \(I, J\) to stay together", sch.sparse_reorder, it, [i, k, j])


def test_fail_fuse_single_or_repeated():
    sch, it, (i, _, _) = _sddmm_schedule()
    _fails(sch, "in `sparse_fuse`: expected at least two iterators", sch.sparse_fuse, it, [i])
    _fails(sch, "expected distinct iterators", sch.sparse_fuse, it, [i, i])


def test_fail_fuse_not_adjacent():
    sch, it, (i, j, k) = _sddmm_schedule()
    _fails(sch, "expected iterators adjacent", sch.sparse_fuse, it, [i, k])
    _fails(sch, "expected iterators adjacent", sch.sparse_fuse, it, [j, i])


def test_fail_fuse_not_a_chain():
    func = Schedule(sddmm_script())
    it = func.get_sparse_iteration("sddmm")
    i, j, k = func.get_sp_iters(it)
    func.sparse_reorder(it, [i, k, j])
    _fails(func, "expected each axis to be the child of the previous one, but `K` has no parent", func.sparse_fuse,
           it, [i, k])  # fmt: skip


def test_fail_fuse_not_from_root():
    sch, it, (_, j, k) = _sddmm_schedule()
    _fails(sch, "expected the first iterator to walk a root axis .* `j` walks `J`", sch.sparse_fuse, it, [j, k])


@T.prim_func
def column_sums(a: T.handle, s: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32,
                nnz: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    S = T.match_sparse_buffer(s, (J_detach,), "float32")
    with T.sp_iter([I, J], "RS", "column_sums") as [i, j]:
        S[j] = S[j] + A[i, j]


def test_fuse_reduction_then_spatial_without_init():
    """A reduction row with spatial nonzeros under it ("RS") and no init fuses into one
    reduction loop over the nonzeros (as an ELL part's layers and rows do): column sums stay
    right, in the interpreter and the CPU kernel."""
    sch = Schedule(column_sums)
    it = sch.get_sparse_iteration("column_sums")
    i, j = sch.get_sp_iters(it)
    sch.sparse_fuse(it, [i, j])
    A = sps.random(7, 5, density=0.5, format="csr", random_state=3, dtype=np.float32)
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    want = np.asarray(A.sum(axis=0)).ravel()
    args = dict(a=A.data, indptr=A.indptr, indices=A.indices, m=7, n=5, nnz=A.nnz)
    S = np.zeros(5, np.float32)
    sp.interpret(sp.lower_sparse_iter(sch.mod), s=S, **args)
    np.testing.assert_allclose(S, want, rtol=1e-5, atol=1e-6)
    S = np.zeros(5, np.float32)
    sp.compile(sch.mod, "cpu")(s=S, **args)
    np.testing.assert_allclose(S, want, rtol=1e-5, atol=1e-6)


def test_fail_fuse_twice_and_attached():
    sch, it, (i, j, _) = _sddmm_schedule()
    sch.sparse_fuse(it, [i, j])
    _fails(sch, "iterator `i` is already fused", sch.sparse_fuse, it, [i, j])
    hyper = Schedule(corpus.CASES_BY_NAME["hyper_gnn"].build())
    h = hyper.get_sparse_iteration("hyper_gnn")
    _, _, j2, it2 = hyper.get_sp_iters(h)
    _fails(hyper, "iterator `it` is already attached", hyper.sparse_fuse, h, [j2, it2])


def test_lookups_list_what_exists():
    """A failed lookup names what the function does have, and the closest name."""
    from sparsetir_py.ops import spmm_script

    f = spmm_script()
    sch = sp.Schedule(sp.lower_sparse_iter(f))
    with pytest.raises(sp.ScheduleError, match=r"no block named 'csrmm' in `csrmm` \(it has `csrmm0`, `csrmm1`\)"):
        sch.get_block("csrmm")
    other = sp.Schedule(sp.lower_sparse_iter(f))
    (i,) = other.get_loops(other.get_block("csrmm0"))
    with pytest.raises(sp.ScheduleError, match=r"loop `i` is not in `csrmm` \(its loops: `i`, `k_init`, `j`, `k`\)"):
        sch.split(i, [None, 2])
    stage1 = sp.Schedule(f)
    with pytest.raises(sp.ScheduleError, match=r"no sparse iteration named 'csrm' .*\(it has `csrmm`\); did you mean"):
        stage1.get_sparse_iteration("csrm")


def test_annotate_a_sparse_iteration():
    """`sch.annotate` on a sparse-iteration handle (SparseTIR's test_get_sparse_iteration does
    it): the attribute stays on the iteration, prints and parses back, replays from the trace,
    and lowering copies it onto every block the iteration becomes."""
    from sparsetir_py.ops import spmm_script

    sch = sp.Schedule(spmm_script())
    it = sch.get_sparse_iteration("csrmm")
    sch.annotate(it, "hint", 3)
    f = sch.mod["main"]
    assert 'attrs={"hint": 3}' in f.script()
    assert sp.structural_equal(sp.from_script(f.script()), f)
    assert sp.structural_equal(sch.trace.apply(spmm_script())["main"], f)
    lowered = sp.lower_sparse_iter(sch.mod)["main"]
    blocks = [n for n in walk(lowered.body) if isinstance(n, ir.Block)]
    assert {b.name for b in blocks} == {"csrmm0", "csrmm1"}
    assert all(b.annotations.get("hint") == 3 for b in blocks)
    with pytest.raises(sp.ScheduleError, match="expected a block or loop for 'atomic'"):
        sch.annotate(it, "atomic", True)
    with pytest.raises(sp.ScheduleError, match="no sparse iteration named 'nope'"):
        sch.annotate(type(it)("nope"), "hint", 1)


def test_annotated_sparse_iteration_compiles_and_computes():
    """The annotation rides along to the kernel without changing what it computes: the compiled
    kernel of the annotated iteration gives scipy's product (a real graph, an empty row)."""
    from sparsetir_py.data import load_matrix
    from sparsetir_py.ops import spmm_script

    def stage2(sch):
        blocks = [n for n in walk(sch.mod["main"].body) if isinstance(n, ir.Block)]
        assert blocks and all(b.annotations.get("hint") == 3 for b in blocks)

    def stage1(sch):
        sch.annotate(sch.get_sparse_iteration("csrmm"), "hint", 3)

    stage2.stage1 = stage1
    kernel = sp.compile(spmm_script(), "cpu", schedule=stage2)
    A = load_matrix("karate")
    A = sps.csr_matrix(A.multiply(sps.random(*A.shape, density=0.9, random_state=0, format="csr") != 0))
    A.data = A.data.astype(np.float32)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 4)).astype(np.float32)
    C = np.full((A.shape[0], 4), np.nan, np.float32)
    kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=A.shape[0], n=A.shape[1], feat=4, nnz=A.nnz)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
