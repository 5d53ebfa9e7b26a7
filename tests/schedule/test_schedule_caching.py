"""Caching primitives: cache_read, cache_write, set_scope.

A cache is a FlatBuffer allocated in the cached block's parent block (or with `T.allocate` at the
function root), holding the region that scope accesses, indexed relative to the region's start.
Every schedule verifies and round-trips after each primitive, replays from its trace and computes
SpMM / SDDMM in the interpreter; two run as CPU kernels on cora and random matrices.
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


def test_cache_read_sddmm_row_of_x():
    """X's row vi goes to a local (1, feat) cache at the start of sddmm0; sddmm1 reads the cache.
    With rows in parallel, each row has its own cache (allocated inside the parallel loop)."""
    sch = VerifyingSchedule(sddmm2())
    copy = sch.cache_read(sch.get_block("sddmm1"), "X", "local")
    assert copy.name == "X_local"
    want = stage2(
        sddmm2(),
        """
        for i in T.serial(m):
            with T.block("sddmm0"):
                vi = T.axis.spatial(m, i)
                X_local = T.alloc_buffer((1, feat), "float32", scope="local")
                for ax0 in T.serial(1):
                    for ax1 in T.serial(feat):
                        with T.block("X_local"):
                            v0 = T.axis.spatial(1, ax0)
                            v1 = T.axis.spatial(feat, ax1)
                            X_local[v0, v1] = X[vi + v0, v1]
                if feat == 0:
                    for j_init in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                        C[vi, j_init] = T.float32(0.0)
                for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    for k in T.serial(feat):
                        with T.block("sddmm1"):
                            vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                            vk = T.axis.reduce(feat, k)
                            with T.init():
                                C[vi, vj] = T.float32(0.0)
                            C[vi, vj] = C[vi, vj] + A[vi, vj] * X_local[0, vk] * Y[J_indices[vi, vj], vk]
        """,
    )
    sp.assert_structural_equal(sch.mod["main"], want)
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    sch.parallel(i)
    check(sch, sddmm2())
    kernel = build(sch.mod)
    run_sddmm(sch.mod, random_csr(), kernel=kernel)
    run_sddmm(sch.mod, cora(), feat=4, kernel=kernel, interpret=False)
    run_sddmm(sch.mod, cora(), feat=1)  # the interpreter on a real matrix (slow: one feature)


def test_cache_write_spmm_row_of_c():
    """All of csrmm0's accesses to C (the empty-row initialisation too) go to a local row cache,
    written back at the end of the row."""
    sch = VerifyingSchedule(spmm2())
    back = sch.cache_write(sch.get_block("csrmm1"), 0, "local")
    assert back.name == "C_local"
    want = stage2(
        spmm2(),
        """
        for i in T.serial(m):
            with T.block("csrmm0"):
                vi = T.axis.spatial(m, i)
                C_local = T.alloc_buffer((1, feat), "float32", scope="local")
                if J_indptr[vi + 1] - J_indptr[vi] == 0:
                    for k_init in T.serial(feat):
                        C_local[0, k_init] = T.float32(0.0)
                for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    for k in T.serial(feat):
                        with T.block("csrmm1"):
                            vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                            vk = T.axis.spatial(feat, k)
                            with T.init():
                                C_local[0, vk] = T.float32(0.0)
                            C_local[0, vk] = C_local[0, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
                for ax0 in T.serial(1):
                    for ax1 in T.serial(feat):
                        with T.block("C_local"):
                            v0 = T.axis.spatial(1, ax0)
                            v1 = T.axis.spatial(feat, ax1)
                            C[vi + v0, v1] = C_local[v0, v1]
        """,
    )
    sp.assert_structural_equal(sch.mod["main"], want)
    check(sch, spmm2())
    run_spmm(sch.mod, random_csr())


def test_cache_write_after_decompose_reduction():
    """The init block writes the cache before csrmm1 reads it: allowed."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    sch.cache_write(b, "C", "shared")
    check(sch, spmm2())
    run_spmm(sch.mod, random_csr())


def test_cache_read_sparse_row():
    """A row of the sparse A: the cache is as long as the row (J_indptr[vi + 1] - J_indptr[vi])."""
    sch = VerifyingSchedule(spmm2())
    sch.cache_read(sch.get_block("csrmm1"), "A", "local")
    text = sch.mod["main"].script()
    assert 'A_local = T.alloc_buffer((1, J_indptr[vi + 1] - J_indptr[vi]), "float32", scope="local")' in text
    assert "A_local[0, vj]" in text
    check(sch, spmm2())
    run_spmm(sch.mod, random_csr())


def test_cache_read_at_the_root():
    """sddmm0 has no parent block: the cache is a `T.allocate` around the function body."""
    sch = VerifyingSchedule(sddmm2())
    sch.cache_read(sch.get_block("sddmm0"), "Y", "shared")
    f = sch.mod["main"]
    assert isinstance(f.body, sp.ir.Allocate) and f.body.buffer.name == "Y_shared"
    check(sch, sddmm2())
    run_sddmm(sch.mod, random_csr())


def test_set_scope():
    sch = VerifyingSchedule(sddmm2())
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    _, ki = sch.split(k, [None, 2])
    rf = sch.rfactor(ki, 0)
    sch.set_scope(rf, 0, "local")
    assert 'C_rf = T.alloc_buffer((2, J_indptr[vi + 1] - J_indptr[vi]), "float32", scope="local")' in (
        sch.mod["main"].script()
    )
    check(sch, sddmm2())
    run_sddmm(sch.mod, random_csr())


def test_set_scope_function_level_scratch():
    """rfactor at the function root makes `C_rf` function-level scratch; set_scope changes its
    scope in the function's declarations and every use (the interpreter still computes SDDMM)."""
    fused = sp.Schedule(sp.ops.sddmm_script())
    it = fused.get_sparse_iteration("sddmm")
    i, j, _ = fused.get_sp_iters(it)
    fused.sparse_fuse(it, [i, j])
    unscheduled = sp.lower_sparse_iter(fused.mod)
    sch = VerifyingSchedule(unscheduled)
    _, k = sch.get_loops(sch.get_block("sddmm0"))
    _, ki = sch.split(k, [None, 4])
    rf = sch.rfactor(ki, 1)
    assert [b.scope for b in sch.mod["main"].buffers if b.name == "C_rf"] == ["global"]
    sch.set_scope(rf, "C_rf", "local")
    f = sch.mod["main"]
    assert [b.scope for b in f.buffers if b.name == "C_rf"] == ["local"]
    assert 'C_rf = T.alloc_buffer((T.cast(nnz, "int32"), 4), "float32", scope="local")' in f.script()
    check(sch, unscheduled)
    run_sddmm(sch.mod, random_csr())


# ---------------------------------------------------------------- failures
@pytest.mark.parametrize("prim", ["cache_read", "cache_write"])
def test_cache_fail_scope(prim):
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: getattr(sch, prim)(b, 0, "global"), f"in `{prim}`: expected a scope in .*'global'")


@pytest.mark.parametrize("index", [7, -1, "Z", True])
def test_cache_read_fail_index(index):
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.cache_read(b, index, "local"), "in `cache_read`: expected a (read buffer index|buffer)")


def test_cache_write_fail_index():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(
        sch,
        lambda: sch.cache_write(b, "A", "local"),
        r"in `cache_write`: expected a buffer that block `csrmm1` writes \(C\)",
    )


def test_cache_read_fail_unknown_block():
    sch = sp.Schedule(spmm2())
    unchanged(sch, lambda: sch.cache_read(sp.schedule.BlockRV("x"), 0, "local"), "in `cache_read`: no block named 'x'")


def test_cache_read_fail_written_buffer():
    """csrmm1 reads C, but also writes it: a read cache would go stale."""
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.cache_read(b, "C", "local"), "expected a buffer that is only read in block `csrmm0`")


def test_cache_read_fail_sparse_region():
    """At the root, A's rows depend on the loop over rows: only the axis length bounds them."""
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm0")
    unchanged(sch, lambda: sch.cache_read(b, "A", "local"), "expected a region of `A` inside its stored positions")


@T.prim_func
def searched(idx: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    Idx = T.match_buffer(idx, (8,), "int32")
    C = T.match_buffer(c, (n,), "int32")
    for i in T.serial(n):
        with T.block("outer"):
            vi = T.axis.spatial(n, i)
            for j in T.serial(1):
                with T.block("find"):
                    vj = T.axis.spatial(1, j)
                    C[vi] = T.lower_bound(Idx, 0, 8, vi) + Idx[vj]


def test_cache_read_fail_searched_buffer():
    sch = sp.Schedule(expected(searched))
    b = sch.get_block("find")
    unchanged(sch, lambda: sch.cache_read(b, "Idx", "local"), "`Idx` is searched by T.lower_bound")


@T.prim_func
def accumulate(a: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n):
        with T.block("outer"):
            vi = T.axis.spatial(n, i)
            for j in T.serial(8):
                with T.block("add"):
                    vj = T.axis.reduce(8, j)
                    C[vi] = C[vi] + A[vi, vj]


def test_cache_write_fail_read_before_write():
    """`add` accumulates into C without an init: the cache would start from garbage."""
    sch = sp.Schedule(expected(accumulate))
    b = sch.get_block("add")
    unchanged(sch, lambda: sch.cache_write(b, "C", "local"), "but block `add` reads it first")


@T.prim_func
def scope_with_init(a: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n):
        for j in T.serial(8):
            with T.block("outer"):
                vi = T.axis.spatial(n, i)
                vj = T.axis.reduce(8, j)
                with T.init():
                    C[vi] = T.float32(0)
                for p in T.serial(1):
                    with T.block("inner"):
                        vp = T.axis.spatial(1, p)
                        C[vi + vp] = C[vi + vp] + A[vi, vj]


def test_cache_write_fail_scope_init():
    sch = sp.Schedule(expected(scope_with_init))
    b = sch.get_block("inner")
    unchanged(sch, lambda: sch.cache_write(b, "C", "local"), "expected a scope whose init does not access `C`")


def test_set_scope_fail_parameter_buffer():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.set_scope(b, 0, "local"), "expected a buffer allocated inside the function, but `C`")


def test_set_scope_fail_scope():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    sch.cache_write(b, 0, "local")
    unchanged(sch, lambda: sch.set_scope(b, 0, "texture"), "in `set_scope`: expected a scope")
    sch.set_scope(b, 0, "shared")  # C_local, written by csrmm1, is allocated here
    assert block(sch.mod["main"], "csrmm0").alloc_buffers[0].scope == "shared"


@T.prim_func
def neighbours(a: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n - 1):
        with T.block("outer"):
            vi = T.axis.spatial(n - 1, i)
            for p in T.serial(1):
                with T.block("write"):
                    vp = T.axis.spatial(1, p)
                    C[vi + vp] = A[vi]
            for q in T.serial(2):
                with T.block("read"):
                    vq = T.axis.spatial(2, q)
                    C[vi] = C[vi] + C[vi + vq]


def test_cache_write_fail_read_outside_written():
    """`outer` writes C[vi] but reads C[vi + 1] too: a write-back of the read region would copy
    an element nobody wrote."""
    sch = sp.Schedule(expected(neighbours))
    b = sch.get_block("write")
    unchanged(sch, lambda: sch.cache_write(b, "C", "local"), "expected the accesses of `C` in block `outer` inside")
