"""Compute location primitives: compute_at and reverse_compute_at.

The moved block keeps its iterators and body; its loops are regenerated over the region that
one iteration of the target loop needs, with a `T.where` where index analysis cannot prove the
region inside the iterators' domains. Each schedule verifies and round-trips after every
primitive, replays from its trace and computes SpMM in the interpreter; two run as CPU kernels.
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
    unchanged,
)

import sparsetir_py as sp
from sparsetir_py import script as T


def fragment(sch: sp.Schedule, name: str) -> str:
    return sp.schedule.fragment(sch.mod["main"], name)


def test_compute_at_copy_per_nonzero():
    """cache_read of B, then compute_at under j: each nonzero copies its row of B, B[J_indices[vi, j], :]
    (one row: ax0 has extent 1; the bound J_indices <= n - 1 comes from its value_range hint)."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    copy = sch.cache_read(b, "B", "shared")
    sch.compute_at(copy, j)
    assert fragment(sch, "B_shared") == "\n".join(
        [
            'with T.block("B_shared"):',
            "    v0 = T.axis.spatial(n, J_indices[vi, j] + ax0)",
            "    v1 = T.axis.spatial(feat, ax1)",
            "    B_shared[v0, v1] = B[v0, v1]",
        ]
    )
    assert [lp.name for lp in sch.get_loops(copy)] == ["j", "ax0", "ax1"]
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.parallel(i)
    check(sch, spmm2())
    kernel = build(sch.mod)
    run_spmm(sch.mod, random_csr(), kernel=kernel)
    run_spmm(sch.mod, cora(), feat=2, kernel=kernel, interpret=False)


def test_compute_at_single_element():
    """Under the reduction loop k of SDDMM, each step copies the one element of X it uses."""
    sch = VerifyingSchedule(sddmm2())
    b = sch.get_block("sddmm1")
    _, k = sch.get_loops(b)
    copy = sch.cache_read(b, "X", "local")
    old = sch.get_loops(copy)
    sch.compute_at(copy, k)
    assert "v1 = T.axis.spatial(feat, k + ax1)" in fragment(sch, "X_local")
    with pytest.raises(sp.ScheduleError, match="in `unroll`: loop `ax0` is not in"):
        sch.unroll(old[0])  # the copy's old loops are gone; its new ones come from get_loops
    assert [lp.name for lp in sch.get_loops(copy)] == ["j", "k", "ax0", "ax1"]
    check(sch, sddmm2())
    run_sddmm(sch.mod, random_csr())


def test_reverse_compute_at_write_back_per_tile():
    """Features in tiles of 4 outside the nonzeros; the row cache goes back to C tile by tile,
    the last tile guarded (feat is symbolic). Lowering's empty-row initialisation of the cache
    comes before the tile loop, so empty rows are still written back as zeros."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    j, k = sch.get_loops(b)
    ko, _ = sch.split(k, [None, 4])
    sch.reorder(ko, j)
    back = sch.cache_write(b, "C", "local")
    sch.reverse_compute_at(back, ko)
    assert fragment(sch, "C_local") == "\n".join(
        [
            'with T.block("C_local"):',
            "    v0 = T.axis.spatial(1, ax0)",
            "    v1 = T.axis.spatial(feat, k_outer * 4 + ax1)",
            "    T.where(k_outer * 4 + ax1 < feat)",
            "    C[vi + v0, v1] = C_local[v0, v1]",
        ]
    )
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.parallel(i)
    check(sch, spmm2())
    kernel = build(sch.mod)
    run_spmm(sch.mod, random_csr(), kernel=kernel)
    run_spmm(sch.mod, random_csr(), feat=8, kernel=kernel, interpret=False)
    run_spmm(sch.mod, cora(), feat=6, kernel=kernel, interpret=False)


# ---------------------------------------------------------------- failures on SpMM
def test_compute_at_fail_other_scope():
    sch = sp.Schedule(spmm2())
    copy = sch.cache_read(sch.get_block("csrmm1"), "B", "shared")
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    unchanged(
        sch, lambda: sch.compute_at(copy, i), "expected a loop in the scope of block `B_shared` \\(block `csrmm0`\\)"
    )


def test_compute_at_fail_loop_around_block():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    copy = sch.cache_read(b, "B", "shared")
    sch.compute_at(copy, j)
    unchanged(sch, lambda: sch.compute_at(copy, j), "expected a loop that is not around block `B_shared`")


def test_compute_at_fail_loop_before_block():
    """The write-back of a write cache comes after j: compute_at moves producers forward."""
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    back = sch.cache_write(b, "C", "local")
    unchanged(sch, lambda: sch.compute_at(back, j), "in `compute_at`: expected a loop after block `C_local`")


def test_compute_at_fail_reduction_block():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    copy = sch.cache_read(b, "B", "shared")
    (ax0, _) = sch.get_loops(copy)
    unchanged(sch, lambda: sch.compute_at(b, ax0), "expected a block with spatial iterators only and no init")


def test_compute_at_fail_predicate():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    copy = sch.cache_read(b, "B", "shared")
    _, ax1 = sch.get_loops(copy)
    sch.split(ax1, [None, 4])
    unchanged(sch, lambda: sch.compute_at(copy, j), "expected a block without a predicate")


def test_reverse_compute_at_fail_reduction_loop():
    """Under j the write-back would copy partial sums, and never run for an empty row."""
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    back = sch.cache_write(b, "C", "local")
    unchanged(
        sch, lambda: sch.reverse_compute_at(back, j), "expected a loop bound to no reduction iterator of the writers"
    )


def test_reverse_compute_at_fail_loop_after_block():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    copy = sch.cache_read(b, "B", "shared")
    unchanged(sch, lambda: sch.reverse_compute_at(copy, j), "expected a loop before block `B_shared`")


# ---------------------------------------------------------------- failures on small pipelines
@T.prim_func
def pipeline(a: T.handle, c: T.handle, n: T.int32):
    """produce -> T_buf -> consume -> U -> again -> C, with an unrelated block `other` (loop s)
    and a block `dead` whose output nobody reads."""
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n):
        with T.block("outer"):
            vi = T.axis.spatial(n, i)
            T_buf = T.alloc_buffer((8,), "float32")
            U = T.alloc_buffer((8,), "float32")
            D = T.alloc_buffer((8,), "float32")
            for p in T.serial(8):
                with T.block("produce"):
                    vp = T.axis.spatial(8, p)
                    T_buf[vp] = A[vi] * T.float32(2)
            for d in T.serial(8):
                with T.block("dead"):
                    vd = T.axis.spatial(8, d)
                    D[vd] = A[vi]
            for q in T.serial(8):
                with T.block("consume"):
                    vq = T.axis.spatial(8, q)
                    U[vq] = T_buf[vq] + T.float32(1)
            for s in T.serial(8):
                with T.block("other"):
                    vs = T.axis.spatial(8, s)
                    C[vi] = A[vi]
            for r in T.serial(8):
                with T.block("again"):
                    vr = T.axis.spatial(8, r)
                    C[vi] = C[vi] + U[vr] + T_buf[vr]


@pytest.fixture(scope="module")
def pipe():
    return expected(pipeline)


def test_pipeline_compute_at_and_back(pipe):
    """The toy pipeline itself: consume moves under p (reverse) and one element at a time."""
    sch = VerifyingSchedule(pipe)
    consume = sch.get_block("consume")
    (p,) = sch.get_loops(sch.get_block("produce"))
    sch.reverse_compute_at(consume, p)
    assert "vq = T.axis.spatial(8, p + ax0)" in sp.schedule.fragment(sch.mod["main"], "consume")
    check(sch, pipe)


def test_compute_at_fail_reader_outside(pipe):
    sch = sp.Schedule(pipe)
    (q,) = sch.get_loops(sch.get_block("consume"))
    produce = sch.get_block("produce")
    unchanged(
        sch,
        lambda: sch.compute_at(produce, q),
        "expected every reader of `T_buf` under loop `q`, but block `again` reads it outside",
    )


def test_compute_at_fail_no_reader(pipe):
    sch = sp.Schedule(pipe)
    dead = sch.get_block("dead")
    (s,) = sch.get_loops(sch.get_block("other"))
    unchanged(sch, lambda: sch.compute_at(dead, s), "expected a reader of what `dead` writes under loop `s`")


def test_compute_at_fail_written_elsewhere(pipe):
    """C is written by `other` and `again`: `other` cannot move as a producer."""
    sch = sp.Schedule(pipe)
    other = sch.get_block("other")
    (r,) = sch.get_loops(sch.get_block("again"))
    unchanged(sch, lambda: sch.compute_at(other, r), "expected `C` to be written only by block `other`")


def test_reverse_compute_at_fail_written_between(pipe):
    """`again` reads U, which `consume` writes between loop p and `again`."""
    sch = sp.Schedule(pipe)
    (p,) = sch.get_loops(sch.get_block("produce"))
    again = sch.get_block("again")
    unchanged(sch, lambda: sch.reverse_compute_at(again, p), "expected `U` complete after each iteration of loop `p`")


def test_reverse_compute_at_fail_other_access(pipe):
    """`again` writes C, which `other` writes under loop s."""
    sch = sp.Schedule(pipe)
    (s,) = sch.get_loops(sch.get_block("other"))
    again = sch.get_block("again")
    unchanged(sch, lambda: sch.reverse_compute_at(again, s), "expected no other access to `C` under or around loop `s`")


def test_reverse_compute_at_fail_strided_writes():
    """Features split by 32 with the inner part outside the nonzeros (the threadIdx.x of a CUDA
    schedule): under `k_inner`, the cache is written at `k_outer * 32 + k_inner`, every 32nd
    feature. A write-back over the box around them would copy 31 of every 32 elements that were
    never computed (a silent wrong result on a GPU, where each thread has its own cache)."""
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, k = sch.get_loops(b)
    ko, ki = sch.split(k, [None, 32])
    sch.reorder(ki, j)
    sch.decompose_reduction(b, j)
    back = sch.cache_write(b, 0, "local")
    unchanged(
        sch,
        lambda: sch.reverse_compute_at(back, ki),
        "expected the writers of `C_local` under loop `k_inner` to fill the region block `C_local` reads, "
        "but `k_outer \\* 32 \\+ k_inner` steps by 32 over loop `k_outer`",
    )
    sch.reverse_compute_at(back, ko)  # under k_outer, its one feature is written
    assert "v1 = T.axis.spatial(feat, k_outer * 32 + k_inner + ax1)" in fragment(sch, "C_local")
    check(sch, spmm2())
    run_spmm(sch.mod, random_csr(), feat=40)


def test_reverse_compute_at_fail_no_writer(pipe):
    sch = sp.Schedule(pipe)
    (d,) = sch.get_loops(sch.get_block("dead"))
    consume = sch.get_block("consume")
    unchanged(
        sch, lambda: sch.reverse_compute_at(consume, d), "expected a writer of what `consume` reads under loop `d`"
    )


def test_compute_at_fail_unknown_block(pipe):
    sch = sp.Schedule(pipe)
    (d,) = sch.get_loops(sch.get_block("dead"))
    unchanged(sch, lambda: sch.compute_at(sp.schedule.BlockRV("nope"), d), "in `compute_at`: no block named 'nope'")
    assert block(sch.mod["main"], "dead") is not None


def test_int64_indices():
    """int64 index arrays and float64 values: loops and caches mix int64 positions with int32
    features; every index the primitives build has consistent dtypes (casts where needed)."""
    import corpus  # tests/corpus.py

    spmm = sp.lower_sparse_iter(sp.ops.spmm_script("int64", "float64"))
    sch = VerifyingSchedule(spmm)
    b = sch.get_block("csrmm1")
    j, k = sch.get_loops(b)
    ko, _ = sch.split(k, [None, 2])
    sch.reorder(ko, j)
    back = sch.cache_write(b, "C", "local")
    sch.reverse_compute_at(back, ko)
    copy = sch.cache_read(b, "B", "shared")
    sch.compute_at(copy, j)
    sch.decompose_reduction(b, j)
    check(sch, spmm)
    run_spmm(sch.mod, corpus.prepare_csr(random_csr().toarray(), "int64", "float64"))

    sddmm = sp.lower_sparse_iter(sp.ops.sddmm_script("int64", "float64"))
    sch = VerifyingSchedule(sddmm)
    b = sch.get_block("sddmm1")
    _, k = sch.get_loops(b)
    _, ki = sch.split(k, [None, 4])
    rf = sch.rfactor(ki, 1)
    j, ko, _ = sch.get_loops(rf)
    sch.decompose_reduction(rf, ko)
    sch.reverse_compute_at(b, j)
    check(sch, sddmm)
    run_sddmm(sch.mod, corpus.prepare_csr(random_csr().toarray(), "int64", "float64"))
