"""Reduction primitives: decompose_reduction and rfactor (TVM semantics).

Expected IR is written by hand (regions filled in by region analysis); every schedule verifies
and round-trips after each primitive, replays from its trace, and computes A @ B (SpMM) or
A * (X @ Y.T) (SDDMM) in the interpreter on a random matrix with an empty row. The CPU SpMM
schedule (parallel rows, decomposed init, vectorised features) and the SDDMM rfactor schedule
run as kernels on cora and on random matrices.
"""

from __future__ import annotations

import pytest
from schedule_checks import (
    VerifyingSchedule,
    block,
    build,
    check,
    cora,
    expected,
    random_csr,
    run_sddmm,
    run_spmm,
    sddmm2,
    spmm2,
    stage2,
    unchanged,
)

import sparsetir_py as sp
from sparsetir_py import script as T


# ---------------------------------------------------------------- decompose_reduction
def test_decompose_reduction_spmm():
    """The init leaves csrmm1 for its own block before loop j; the update runs without the
    `vj == 0` test, and lowering's empty-row initialisation is gone (the init block covers it)."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    init = sch.decompose_reduction(b, j)
    assert init.name == "csrmm1_init"
    want = stage2(
        spmm2(),
        """
        for i in T.serial(m):
            with T.block("csrmm0"):
                vi = T.axis.spatial(m, i)
                for k_init in T.serial(feat):
                    with T.block("csrmm1_init"):
                        vk_init = T.axis.spatial(feat, k_init)
                        C[vi, vk_init] = T.float32(0.0)
                for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    for k in T.serial(feat):
                        with T.block("csrmm1"):
                            vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                            vk = T.axis.spatial(feat, k)
                            C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
        """,
    )
    sp.assert_structural_equal(sch.mod["main"], want)
    check(sch, spmm2())
    run_spmm(sch.mod, random_csr())


def test_cpu_spmm_schedule_kernel():
    """The CPU SpMM schedule: rows in parallel, init decomposed, features split and vectorised.
    The kernel's update loop has no `if vj == 0`."""
    sch = VerifyingSchedule(spmm2())
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    b = sch.get_block("csrmm1")
    j, k = sch.get_loops(b)
    sch.parallel(i)
    sch.decompose_reduction(b, j)
    _, ki = sch.split(k, [None, 4])
    sch.vectorize(ki)
    check(sch, spmm2())
    kernel = build(sch.mod)
    assert "vj == 0" not in kernel.source
    run_spmm(sch.mod, random_csr(), kernel=kernel)
    run_spmm(sch.mod, random_csr(40, 30, 0.1, seed=7), feat=9, kernel=kernel, interpret=False)
    run_spmm(sch.mod, cora(), feat=3, kernel=kernel)


def test_decompose_reduction_keeps_spatial_guard():
    """k split by 2 (feat symbolic): the init block keeps the guard of the spatial loops."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    j, k = sch.get_loops(b)
    sch.split(k, [None, 2])
    sch.decompose_reduction(b, j)
    assert block(sch.mod["main"], "csrmm1_init").predicate is not None
    check(sch, spmm2())
    run_spmm(sch.mod, random_csr())


def test_decompose_reduction_sddmm_inner():
    """At the reduction loop k of SDDMM the init block sits inside loop j (spatial), so it runs
    for every j: lowering's `if feat == 0` initialisation before loop j is redundant and dropped
    (its stores only write the init's value)."""
    sch = VerifyingSchedule(sddmm2())
    b = sch.get_block("sddmm1")
    _, k = sch.get_loops(b)
    sch.decompose_reduction(b, k)
    want = stage2(
        sddmm2(),
        """
        for i in T.serial(m):
            with T.block("sddmm0"):
                vi = T.axis.spatial(m, i)
                for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    with T.block("sddmm1_init"):
                        vj_init = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                        C[vi, vj_init] = T.float32(0.0)
                    for k in T.serial(feat):
                        with T.block("sddmm1"):
                            vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                            vk = T.axis.reduce(feat, k)
                            C[vi, vj] = C[vi, vj] + A[vi, vj] * X[vi, vk] * Y[J_indices[vi, vj], vk]
        """,
    )
    sp.assert_structural_equal(sch.mod["main"], want)
    check(sch, sddmm2())
    run_sddmm(sch.mod, random_csr())
    run_sddmm(sch.mod, random_csr(), feat=0)


def test_decompose_reduction_sddmm_outer_drops_guard():
    sch = VerifyingSchedule(sddmm2())
    b = sch.get_block("sddmm1")
    j, _ = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    assert "if feat == 0" not in sch.mod["main"].script()
    check(sch, sddmm2())
    run_sddmm(sch.mod, random_csr(), feat=0)


def test_decompose_reduction_fail_no_init():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    unchanged(sch, lambda: sch.decompose_reduction(b, j), "in `decompose_reduction`: expected a block with T.init()")


def test_decompose_reduction_fail_loop_not_around_block():
    """i is above the parent block csrmm0: not one of csrmm1's loops."""
    sch = sp.Schedule(spmm2())
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.decompose_reduction(b, i), "expected a loop between block `csrmm1` and its parent block")


def test_decompose_reduction_fail_inside_reduction_loop():
    """At k, the reduction loop j is outside: the init would run again for every j."""
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    _, k = sch.get_loops(b)
    unchanged(
        sch,
        lambda: sch.decompose_reduction(b, k),
        "expected a loop outside every loop of a reduction iterator of `csrmm1`, but `j`",
    )


def test_decompose_reduction_fail_unknown_block():
    sch = sp.Schedule(spmm2())
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.decompose_reduction(sp.schedule.BlockRV("x"), j), "no block named 'x'")


@T.prim_func
def mixed_guard(a: T.handle, c: T.handle, n: T.int32):
    """The guard of block `sum` mixes its spatial loop i (one too long) and its reduction loop j."""
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n + 1):
        for j in T.serial(8):
            with T.block("sum"):
                vi = T.axis.spatial(n, i)
                vj = T.axis.reduce(8, j)
                T.where(i + j < n)
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + A[vi, vj]


def test_decompose_reduction_fail_mixed_predicate():
    sch = sp.Schedule(expected(mixed_guard))
    b = sch.get_block("sum")
    i, _ = sch.get_loops(b)
    unchanged(
        sch, lambda: sch.decompose_reduction(b, i), "expected a predicate of `sum` whose spatial part stands alone"
    )


# ---------------------------------------------------------------- rfactor
def sddmm_rfactor_expected():
    return stage2(
        sddmm2(),
        """
        for i in T.serial(m):
            with T.block("sddmm0"):
                vi = T.axis.spatial(m, i)
                C_rf = T.alloc_buffer((J_indptr[vi + 1] - J_indptr[vi], 4), "float32")
                if feat == 0:
                    for j_init in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                        C[vi, j_init] = T.float32(0.0)
                for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    for k_outer in T.serial((feat + 3) // 4):
                        for k_inner in T.serial(4):
                            with T.block("sddmm1_rf"):
                                vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                                vk_outer = T.axis.reduce((feat + 3) // 4, k_outer)
                                vk_inner = T.axis.spatial(4, k_inner)
                                T.where(k_outer * 4 + k_inner < feat)
                                with T.init():
                                    C_rf[vj, vk_inner] = T.float32(0.0)
                                C_rf[vj, vk_inner] = C_rf[vj, vk_inner] + A[vi, vj] * X[vi, vk_outer * 4 + vk_inner] * Y[J_indices[vi, vj], vk_outer * 4 + vk_inner]
                for j_1 in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    for k_inner_1 in T.serial(4):
                        with T.block("sddmm1"):
                            vj_1 = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j_1)
                            vk_inner_1 = T.axis.reduce(4, k_inner_1)
                            with T.init():
                                C[vi, vj_1] = T.float32(0.0)
                            C[vi, vj_1] = C[vi, vj_1] + C_rf[vj_1, vk_inner_1]
        """,  # noqa: E501
    )


def test_rfactor_sddmm():
    """Split k by 4, rfactor the inner loop: partial sums C_rf[vj, vk_inner], then a block that
    adds the 4 partial sums of each nonzero (the write-back keeps the name sddmm1)."""
    sch = VerifyingSchedule(sddmm2())
    b = sch.get_block("sddmm1")
    _, k = sch.get_loops(b)
    _, ki = sch.split(k, [None, 4])
    rf = sch.rfactor(ki, 1)
    assert rf.name == "sddmm1_rf"
    sp.assert_structural_equal(sch.mod["main"], sddmm_rfactor_expected())
    check(sch, sddmm2())
    run_sddmm(sch.mod, random_csr())
    run_sddmm(sch.mod, random_csr(), feat=2)  # k_inner 2 and 3 never run: the write-back adds zeros


def test_rfactor_negative_factor_axis():
    sch = sp.Schedule(sddmm2())
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    _, ki = sch.split(k, [None, 4])
    sch.rfactor(ki, -1)
    sp.assert_structural_equal(sch.mod["main"], sddmm_rfactor_expected())


def test_sddmm_rfactor_schedule_kernel():
    """SDDMM as SparseTIR schedules it for GPUs, on the CPU: split k, rfactor the inner part,
    decompose both inits, move the write-back under j, and sum the partial results of a nonzero
    in parallel with atomic adds (the warp-level sum of the GPU schedule)."""
    sch = VerifyingSchedule(sddmm2())
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    b = sch.get_block("sddmm1")
    _, k = sch.get_loops(b)
    _, ki = sch.split(k, [None, 4])
    rf = sch.rfactor(ki, 1)
    j, ko, ki = sch.get_loops(rf)
    sch.decompose_reduction(rf, ko)
    sch.reverse_compute_at(b, j)
    _, _, ax1 = sch.get_loops(b)  # j, then the regenerated ax0 (1 nonzero) and ax1 (4 parts)
    sch.decompose_reduction(b, ax1)
    sch.annotate(b, "atomic", True)
    sch.parallel(ax1)
    sch.unroll(ki)
    sch.parallel(i)  # rows in parallel too: the inner prange then runs serially in each row
    check(sch, sddmm2())
    text = sch.mod["main"].script()
    assert "T.atomic_add(C[vi, vj_1], C_rf[vj_1, vk_inner_1])" in text
    kernel = build(sch.mod)
    assert "atomic_add(" in kernel.source
    run_sddmm(sch.mod, random_csr(), kernel=kernel)
    run_sddmm(sch.mod, random_csr(), feat=2, kernel=kernel)
    run_sddmm(sch.mod, random_csr(30, 40, 0.2, seed=3), feat=11, kernel=kernel, interpret=False)
    run_sddmm(sch.mod, cora(), feat=6, kernel=kernel, interpret=False)


def test_rfactor_spmm_variable_reduction():
    """rfactor over a split of the nonzero loop j (a variable extent, empty rows included)."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    _, ji = sch.split(j, [None, 2])
    sch.rfactor(ji, 0)
    check(sch, spmm2())
    assert "C_rf = T.alloc_buffer((2, feat)" in sch.mod["main"].script()
    run_spmm(sch.mod, random_csr())


def test_rfactor_fail_spatial_loop():
    sch = sp.Schedule(sddmm2())
    j, _ = sch.get_loops(sch.get_block("sddmm1"))
    unchanged(sch, lambda: sch.rfactor(j, 0), "in `rfactor`: expected a loop bound to a reduction iterator of `sddmm1`")


def test_rfactor_fail_several_blocks():
    sch = sp.Schedule(sddmm2())
    b = sch.get_block("sddmm1")
    j, k = sch.get_loops(b)
    sch.decompose_reduction(b, k)
    unchanged(
        sch, lambda: sch.rfactor(j, 0), "in `rfactor`: expected a loop with exactly one block under it, but `j` has 2"
    )


def test_rfactor_fail_other_block_in_nest():
    """The write-back of a cache of C, moved under loop j, shares j with sddmm1."""
    sch = sp.Schedule(sddmm2())
    b = sch.get_block("sddmm1")
    j, k = sch.get_loops(b)
    back = sch.cache_write(b, "C", "local")
    sch.reverse_compute_at(back, j)
    unchanged(
        sch, lambda: sch.rfactor(k, 0), "expected `sddmm1` to be the only block accessing `C_local` in its loop nest"
    )


def test_rfactor_fail_not_a_sum():
    """No init after decompose_reduction: not a sum reduction rfactor can factor."""
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    unchanged(sch, lambda: sch.rfactor(j, 0), "in `rfactor`: expected a sum reduction")


@T.prim_func
def row_max(a: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n):
        for j in T.serial(8):
            with T.block("max"):
                vi = T.axis.spatial(n, i)
                vj = T.axis.reduce(8, j)
                with T.init():
                    C[vi] = T.float32("-inf")
                C[vi] = T.max(C[vi], A[vi, vj])


def test_rfactor_fail_max_reduction():
    sch = sp.Schedule(expected(row_max))
    _, j = sch.get_loops(sch.get_block("max"))
    unchanged(sch, lambda: sch.rfactor(j, 0), "expected a sum reduction .* but block `max` is not one")


@pytest.mark.parametrize("axis", [2, -3, 1.0, True])
def test_rfactor_fail_factor_axis(axis):
    sch = sp.Schedule(sddmm2())
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    unchanged(sch, lambda: sch.rfactor(k, axis), r"in `rfactor`: expected a factor_axis in \[-2, 1\] \(1 spatial")


def test_rfactor_fail_loop_of_both_kinds():
    sch = sp.Schedule(spmm2())
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    fused = sch.fuse(j, k)
    unchanged(sch, lambda: sch.rfactor(fused, 0), "expected reduction loops bound to no spatial iterator")


@T.prim_func
def sddmm_fused(a: T.handle, x: T.handle, y: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
                m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):  # fmt: skip
    """SDDMM over the nonzeros as one fused iteration (SparseTIR's sparse_fuse(i, j))."""
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


def test_rfactor_fused_sddmm():
    """Over the fused nonzeros, C's position is only reached through a search (I_of_J), yet the
    partial sums are indexed by the block's iterators: C_rf[vi_j, vk_inner], one row per nonzero."""
    fused = sp.lower_sparse_iter(sddmm_fused)
    sch = VerifyingSchedule(fused)
    b = sch.get_block("sddmm0")
    ij, k = sch.get_loops(b)
    _, ki = sch.split(k, [None, 4])
    rf = sch.rfactor(ki, 1)
    _, ko, _ = sch.get_loops(rf)
    sch.decompose_reduction(rf, ko)
    text = sch.mod["main"].script()
    assert 'C_rf = T.alloc_buffer((nnz, 4), "float32")' in text  # function-level scratch
    assert "C_rf[vi_j, vk_inner] = C_rf[vi_j, vk_inner] + " in text
    sch.parallel(ij)
    check(sch, fused)
    kernel = build(sch.mod)
    run_sddmm(sch.mod, random_csr(), kernel=kernel)
    run_sddmm(sch.mod, cora(), feat=5, kernel=kernel, interpret=False)


@T.prim_func
def odd_loops(a: T.handle, c: T.handle, d: T.handle, n: T.int32):
    """Reductions rfactor and decompose_reduction cannot take apart: a loop starting at 1, a
    reduction loop whose extent depends on the spatial loop, a spatial iterator whose extent does,
    and a spatial loop inside the reduction loop whose extent depends on it."""
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    C = T.match_buffer(c, (n,), "float32")
    D = T.match_buffer(d, (n, n), "float32")
    for i in T.serial(n):
        for j in T.serial(1, 8):
            with T.block("from_one"):
                vi = T.axis.spatial(n, i)
                vj = T.axis.reduce(8, j)
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + A[vi, vj]
    for i2 in T.serial(n):
        for j2 in T.serial(i2 % 8):
            with T.block("triangle"):
                vi = T.axis.spatial(n, i2)
                vj = T.axis.reduce(8, j2)
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + A[vi, vj]
    for i3 in T.serial(n):
        for j3 in T.serial(i3 + 1):
            for k3 in T.serial(8):
                with T.block("rows"):
                    vi = T.axis.spatial(n, i3)
                    vj = T.axis.spatial(i3 + 1, j3)
                    vk = T.axis.reduce(8, k3)
                    with T.init():
                        D[vi, vj] = T.float32(0)
                    D[vi, vj] = D[vi, vj] + A[vi, vk]
    for k4 in T.serial(8):
        for i4 in T.serial(k4 + 1):
            with T.block("lower"):
                vi = T.axis.spatial(n, i4)
                vk = T.axis.reduce(8, k4)
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + A[vi, vk]


@pytest.fixture(scope="module")
def odd():
    return expected(odd_loops)


def test_rfactor_fail_loop_from_one(odd):
    sch = sp.Schedule(odd)
    _, j = sch.get_loops(sch.get_block("from_one"))
    unchanged(sch, lambda: sch.rfactor(j, 0), "in `rfactor`: expected loops starting at 0, but `j` does not")


def test_rfactor_fail_dependent_extent(odd):
    sch = sp.Schedule(odd)
    _, j2 = sch.get_loops(sch.get_block("triangle"))
    unchanged(sch, lambda: sch.rfactor(j2, 0), "expected an extent of `j2` independent of the other loops")


def test_rfactor_fail_spatial_extent_on_loops(odd):
    sch = sp.Schedule(odd)
    _, _, k3 = sch.get_loops(sch.get_block("rows"))
    unchanged(sch, lambda: sch.rfactor(k3, 0), "expected spatial iterators whose extents do not depend on the block")


def test_decompose_reduction_fail_kept_loop_depends_on_reduction(odd):
    """The init would loop over i4 without k4, but i4's extent is k4 + 1."""
    sch = sp.Schedule(odd)
    b = sch.get_block("lower")
    k4, _ = sch.get_loops(b)
    unchanged(
        sch, lambda: sch.decompose_reduction(b, k4), "expected loops whose ranges do not depend on the loops left out"
    )
