"""Annotation primitives: annotate / unannotate, and `"atomic"` blocks.

`annotate(block, "atomic", True)` rewrites the block's update into `T.atomic_add`, after which
`parallel` and `bind` accept loops that carry its reduction. The SpMM schedule that runs the
nonzeros of a row in parallel is checked in the interpreter and as a CPU kernel (with LLVM
atomics) on cora and random matrices.
"""

from __future__ import annotations

import pytest
from schedule_checks import (
    VerifyingSchedule,
    block,
    build,
    check,
    cora,
    loop_kinds,
    random_csr,
    run_spmm,
    spmm2,
    stage2,
    unchanged,
)

import sparsetir_py as sp


def test_annotate_and_unannotate():
    """Block annotations print as T.block_attr, loop annotations as `annotations=`; both round-trip
    and unannotate gives the function back."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    _, k = sch.get_loops(b)
    sch.annotate(b, "schedule_rule", "spmm")
    sch.annotate(k, "pragma_unroll", 4)
    sch.annotate(k, "tile", (2, 2))
    text = sch.mod["main"].script()
    assert 'T.block_attr({"schedule_rule": "spmm"})' in text
    assert 'for k in T.serial(feat, annotations={"pragma_unroll": 4, "tile": (2, 2)}):' in text
    assert block(sch.mod["main"], "csrmm1").annotations["schedule_rule"] == "spmm"
    check(sch, spmm2())
    sch.unannotate(b, "schedule_rule")
    sch.unannotate(k, "pragma_unroll")
    sch.unannotate(k, "tile")
    sp.assert_structural_equal(sch.mod, spmm2())


def test_atomic_nonzeros_in_parallel():
    """decompose_reduction, then "atomic": the rows' nonzeros may run in parallel (prange), each
    adding into C atomically; the init block runs before that loop."""
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    sch.annotate(b, "atomic", True)
    sch.parallel(j)
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
                for j in T.parallel(J_indptr[vi + 1] - J_indptr[vi]):
                    for k in T.serial(feat):
                        with T.block("csrmm1"):
                            vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                            vk = T.axis.spatial(feat, k)
                            T.block_attr({"atomic": True})
                            T.atomic_add(C[vi, vk], A[vi, vj] * B[J_indices[vi, vj], vk])
        """,
    )
    sp.assert_structural_equal(sch.mod["main"], want)
    check(sch, spmm2())
    kernel = build(sch.mod)
    assert "atomic_add(C, " in kernel.source and "numba.prange" in kernel.source
    run_spmm(sch.mod, random_csr(), kernel=kernel)
    run_spmm(sch.mod, cora(), feat=4, kernel=kernel, interpret=False)


def test_atomic_allows_bind_of_reduction_loop():
    sch = VerifyingSchedule(spmm2())
    b = sch.get_block("csrmm1")
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    j, _ = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    sch.annotate(b, "atomic", True)
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    assert loop_kinds(sch.mod["main"])["j"] == "thread_binding"
    check(sch, spmm2())
    run_spmm(sch.mod, random_csr())


def test_annotate_fail_atomic_with_init():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.annotate(b, "atomic", True), 'expected a block without T.init\\(\\) for "atomic"')


def test_annotate_fail_atomic_not_an_update():
    """A cache's copy block stores a value; it does not accumulate."""
    sch = sp.Schedule(spmm2())
    copy = sch.cache_read(sch.get_block("csrmm1"), "B", "shared")
    unchanged(sch, lambda: sch.annotate(copy, "atomic", True), "expected a block whose body is one update")


def test_annotate_fail_atomic_on_loop():
    sch = sp.Schedule(spmm2())
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.annotate(j, "atomic", True), 'expected a block for "atomic", but got loop `j`')


def test_annotate_fail_atomic_not_true():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.annotate(b, "atomic", 1), 'expected True for "atomic"')


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2], None, (1, [2])])
def test_annotate_fail_value(value):
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.annotate(b, "key", value), "expected a str, int, float or bool value")


@pytest.mark.parametrize("key", ["", 3])
def test_annotate_fail_key(key):
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    unchanged(sch, lambda: sch.annotate(b, key, 1), "expected a non-empty string key")


def test_annotate_fail_unknown_block():
    sch = sp.Schedule(spmm2())
    unchanged(sch, lambda: sch.annotate(sp.schedule.BlockRV("nope"), "k", 1), "in `annotate`: no block named 'nope'")


def test_unannotate_fail_missing():
    sch = sp.Schedule(spmm2())
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.unannotate(j, "k"), "expected an annotation 'k' on loop `j`, but it has none")


def test_unannotate_fail_atomic():
    sch = sp.Schedule(spmm2())
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    sch.annotate(b, "atomic", True)
    unchanged(sch, lambda: sch.unannotate(b, "atomic"), 'in `unannotate`: expected a key other than "atomic"')
