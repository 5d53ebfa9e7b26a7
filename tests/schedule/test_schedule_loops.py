"""Loop primitives (split, fuse, reorder, parallel, vectorize, unroll, bind, get_child_blocks).

Each scheduled function verifies and round-trips after every primitive (`VerifyingSchedule`),
replays from its trace (`trace.apply` and the printed `trace.as_python()`), and computes A @ B
in the interpreter; a few also run as CPU kernels. Every precondition has a failing test that
leaves the schedule unchanged.
"""

from __future__ import annotations

import pytest
from schedule_checks import (
    VerifyingSchedule,
    block,
    check,
    expected,
    loop_kinds,
    random_csr,
    run_spmm,
    spmm2,
    unchanged,
)

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.ops import spmm_script
from sparsetir_py.transform.region import annotate_regions


@T.prim_func
def nests(a: T.handle, c: T.handle, n: T.int32):
    """Negative cases: a loop starting at 1, an extent that depends on an outer loop, and a sum."""
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(1, n):
        for j in T.serial(8):
            with T.block("sum"):
                vi = T.axis.spatial(n, i)
                vj = T.axis.reduce(8, j)
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + A[vi, vj]
    for i2 in T.serial(n):
        for j2 in T.serial(i2):
            with T.block("tri"):
                vi = T.axis.spatial(n, i2)
                vj = T.axis.spatial(n, j2)
                C[vi] = C[vi] + A[vi, 0]


@pytest.fixture(scope="module")
def csrmm2():
    return spmm2()


@pytest.fixture(scope="module")
def toy():
    return sp.IRModule.from_any(annotate_regions(nests))


# ---------------------------------------------------------------- lookup
def test_get_loops_follows_tvm(csrmm2):
    sch = sp.Schedule(csrmm2)
    assert len(sch.get_loops(sch.get_block("csrmm0"))) == 1
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    assert (j.name, k.name) == ("j", "k")


def test_get_child_blocks(csrmm2):
    """Blocks directly under a block or a loop, in program order; not those nested deeper."""
    sch = VerifyingSchedule(csrmm2)
    b0 = sch.get_block("csrmm0")
    (i,) = sch.get_loops(b0)
    assert sch.get_child_blocks(b0) == [sp.schedule.BlockRV("csrmm1")]
    assert sch.get_child_blocks(i) == [b0]
    sch.cache_write(sch.get_block("csrmm1"), "C", "local")
    assert [b.name for b in sch.get_child_blocks(b0)] == ["csrmm1", "C_local"]
    check(sch, csrmm2)


def test_get_child_blocks_fail_unknown_block(csrmm2):
    sch = sp.Schedule(csrmm2)
    unchanged(sch, lambda: sch.get_child_blocks(sp.schedule.BlockRV("nope")), "in `get_child_blocks`: no block")


def test_fail_unknown_block(csrmm2):
    with pytest.raises(sp.ScheduleError, match="no block named 'nope'"):
        sp.Schedule(csrmm2).get_block("nope")


def test_get_block_fail_lists_the_blocks_and_the_closest(csrmm2):
    """The brief's case: `csrmm` lowers to `csrmm0` and `csrmm1`, listed in program order."""
    sch = sp.Schedule(csrmm2)
    match = (
        r"^in `get_block`: no block named 'csrmm' in `csrmm` \(it has `csrmm0`, `csrmm1`\); did you mean `csrmm0`\?$"
    )
    unchanged(sch, lambda: sch.get_block("csrmm"), match)
    unchanged(sch, lambda: sch.get_block("zzz"), r"\(it has `csrmm0`, `csrmm1`\)$")  # nothing close: no suggestion


def test_get_block_fail_stage1_function():
    """A Stage I function has no blocks yet: the message says where they come from."""
    sch = sp.Schedule(spmm_script())
    match = r"no block named 'csrmm' in `csrmm` \(it has none\); `csrmm` is a sparse iteration: get it with "
    unchanged(sch, lambda: sch.get_block("csrmm"), match + r"`get_sparse_iteration`, or lower .* `csrmm0`, `csrmm1`")
    unchanged(sch, lambda: sch.get_block("csrmm0"), r"`csrmm` is a Stage I function: its blocks appear after")


def test_get_block_fail_not_a_name(csrmm2):
    sch = sp.Schedule(csrmm2)
    block = sch.get_block("csrmm0")
    unchanged(sch, lambda: sch.get_block(block), r"in `get_block`: expected a block name \(a str\), but got BlockRV")


def test_lookup_lists_at_most_twenty_names():
    """A function with many blocks (a decomposed format, say) lists the first twenty and a count."""
    body = "".join(
        f'    for i{k} in T.serial(n):\n        with T.block("b{k:02d}"):\n'
        f"            v = T.axis.spatial(n, i{k})\n            A[v] = T.float32({k})\n"
        for k in range(23)
    )
    text = (
        "from sparsetir_py import script as T\n\n@T.prim_func\ndef many(a: T.handle, n: T.int32):\n"
        '    T.func_attr({"stage": 2})\n    A = T.match_buffer(a, (n,), "float32")\n' + body
    )
    sch = sp.Schedule(sp.from_script(text))
    listed = ", ".join(f"`b{k:02d}`" for k in range(20))
    unchanged(sch, lambda: sch.get_block("nope"), f"\\(it has {listed} and 3 more\\)$")


def test_schedule_fail_unknown_function(csrmm2):
    """An explicit function name must be in the module (no silent fall back to another function)."""
    with pytest.raises(
        sp.ScheduleError,
        match=r"^in `Schedule`: no function named 'mian' in the module \(it has `main`\); did you mean `main`\?$",
    ):
        sp.Schedule(csrmm2, "mian")
    with pytest.raises(sp.ScheduleError, match=r"expected a function name \(a str\), but got 0"):
        sp.Schedule(csrmm2, 0)
    with pytest.raises(sp.ScheduleError, match="expected a module with a function, but got an empty one"):
        sp.Schedule(sp.IRModule())
    assert sp.Schedule(sp.IRModule.from_any({"other": csrmm2["main"]})).func_name == "other"


# ---------------------------------------------------------------- split
@pytest.mark.parametrize("factors", [[None, 4], [2, None], [None, 2, 2], [3, None, 5]])
def test_split_with_guard(csrmm2, factors):
    """feat is symbolic: no factor is known to divide it, so the block gets a `T.where`."""
    sch = VerifyingSchedule(csrmm2)
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    loops = sch.split(k, factors)
    assert len(loops) == len(factors)
    assert block(sch.mod["main"], "csrmm1").predicate is not None
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


def test_split_exact_has_no_guard():
    f = sp.lower_sparse_iter(spmm_script().specialize({"feat": 8}))
    sch = VerifyingSchedule(f)
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    outer, inner = sch.split(k, [None, 4])
    assert (outer.name, inner.name) == ("k_outer", "k_inner")
    assert block(sch.mod["main"], "csrmm1").predicate is None
    sch.split(outer, [2, 1])  # 2 * 1 == 2: exact as well
    assert block(sch.mod["main"], "csrmm1").predicate is None
    sch.split(inner, [None, 3])  # 3 does not divide 4
    assert block(sch.mod["main"], "csrmm1").predicate is not None


def test_split_symbolic_exact_by_index_analysis(csrmm2):
    """Splitting `(feat + 3) // 4` by [None, 1] needs no guard: o * 1 + i < (feat + 3) // 4 is
    proved with symbolic bounds (no constant extent to divide)."""
    sch = VerifyingSchedule(csrmm2)
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    ko, _ = sch.split(k, [None, 4])
    sch.split(ko, [None, 1])
    pred = block(sch.mod["main"], "csrmm1").predicate
    assert pred.op == "<"  # the first split's guard only, no `and` with a second one
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


def test_split_guard_on_a_loop_without_block(csrmm2):
    """The empty-row initialisation loop holds no block: its guard is an `if`."""
    sch = VerifyingSchedule(csrmm2)
    k_init = next(
        v for v in sp.ir.visit.walk(sch.mod["main"].body) if isinstance(v, sp.ir.For) and v.loop_var.name == "k_init"
    )
    sch.split(sp.schedule.LoopRV(k_init.loop_var), [None, 2])
    assert "if k_init_outer * 2 + k_init_inner < feat:" in sch.mod["main"].script()
    run_spmm(sch.mod, random_csr())


@pytest.mark.parametrize(
    "factors,match",
    [
        ([None, None], "at most one None"),
        ([0, None], "positive"),
        ([-2, 4], "positive"),
        ([4], "at least two factors"),
        ([True, 2], "integer factors"),
        ([1.5, None], "integer factors"),
    ],
)
def test_split_fail_factors(csrmm2, factors, match):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    unchanged(sch, lambda: sch.split(i, factors), f"in `split`: expected .*{match}")


def test_split_fail_product_too_small():
    sch = sp.Schedule(sp.lower_sparse_iter(spmm_script().specialize({"feat": 8})))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.split(k, [2, 3]), "in `split`: expected factors whose product covers the extent 8")


def test_split_fail_bound_loop(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.bind(i, "blockIdx.x")
    unchanged(sch, lambda: sch.split(i, [None, 2]), "in `split`: expected a serial or parallel loop, but `i` is bound")


def test_split_fail_nonzero_start(toy):
    sch = sp.Schedule(toy)
    i, _ = sch.get_loops(sch.get_block("sum"))
    unchanged(sch, lambda: sch.split(i, [None, 2]), "in `split`: expected a loop starting at 0, but `i` starts")


def test_split_fail_unknown_loop(csrmm2):
    other = sp.Schedule(csrmm2)
    (foreign,) = other.get_loops(other.get_block("csrmm0"))
    other.split(foreign, [None, 2])  # `foreign` is gone from `other`
    unchanged(other, lambda: other.split(foreign, [None, 2]), "in `split`: loop `i` is not in")


def test_split_fail_stale_loop_lists_the_loops(csrmm2):
    """A handle to a loop that a split replaced: the loops that are there now."""
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.split(i, [None, 2])
    match = r"in `parallel`: loop `i` is not in `csrmm` \(its loops: `i_outer`, `i_inner`, `k_init`, `j`, `k`\)$"
    unchanged(sch, lambda: sch.parallel(i), match)


def test_split_fail_loop_of_another_function_with_the_same_name(csrmm2):
    """A handle from another schedule names a loop `i` that this function has too, but another."""
    sch, other = sp.Schedule(csrmm2), sp.Schedule(sp.from_script(csrmm2["main"].script()))
    (foreign,) = other.get_loops(other.get_block("csrmm0"))
    match = r"\(its loops: `i`, `k_init`, `j`, `k`\); the loop named `i` there is another one"
    unchanged(sch, lambda: sch.split(foreign, [None, 2]), match)


# ---------------------------------------------------------------- parallel, vectorize, unroll, bind
def test_parallel_vectorize_unroll_bind(csrmm2):
    sch = VerifyingSchedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    sch.parallel(i)
    k0, k1 = sch.split(k, [None, 2])
    sch.vectorize(k1)
    sch.unroll(k0)
    check(sch, csrmm2)
    kinds = loop_kinds(sch.mod["main"])
    assert kinds["i"] == "parallel" and kinds["k_inner"] == "vectorized" and kinds["k_outer"] == "unrolled"
    run_spmm(sch.mod, random_csr())  # kernels of these kinds: test_schedule_reduction, test_schedule_caching


def test_design_cuda_schedule_replays(csrmm2):
    """The CUDA schedule of DESIGN.md §3."""
    sch = VerifyingSchedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    io, ii = sch.split(i, [None, 8])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    _, ki = sch.split(k, [None, 32])
    sch.bind(ki, "threadIdx.x")
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


def test_bind_fail_reduction_loop(csrmm2):
    sch = sp.Schedule(csrmm2)
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.bind(j, "threadIdx.x"), "in `bind`: expected a loop that carries no reduction, but `j`")


def test_parallel_fail_reduction_loop(csrmm2):
    sch = sp.Schedule(csrmm2)
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.parallel(j), "in `parallel`: expected a loop that carries no reduction")


def test_bind_fail_unknown_tag(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    unchanged(sch, lambda: sch.bind(i, "warp.x"), "in `bind`: expected one of blockIdx.x")
    unchanged(sch, lambda: sch.bind(i, "vthread"), "in `bind`: expected one of")


def test_bind_fail_bound_twice(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.bind(i, "blockIdx.x")
    unchanged(sch, lambda: sch.bind(i, "blockIdx.y"), "in `bind`: expected a serial loop that is not yet bound")


def test_bind_fail_nonzero_start(toy):
    sch = sp.Schedule(toy)
    i, _ = sch.get_loops(sch.get_block("sum"))
    unchanged(sch, lambda: sch.bind(i, "blockIdx.x"), "in `bind`: expected a loop starting at 0")


@pytest.mark.parametrize("prim", ["parallel", "vectorize", "unroll"])
def test_kind_fail_not_serial(csrmm2, prim):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.unroll(i) if prim != "unroll" else sch.vectorize(i)
    unchanged(sch, lambda: getattr(sch, prim)(i), f"in `{prim}`: expected a serial loop .*, but `i` is")


@pytest.mark.parametrize("prim", ["parallel", "vectorize", "unroll"])
def test_kind_fail_annotated(csrmm2, prim):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.annotate(i, "pragma_auto_unroll_max_step", 16)
    unchanged(sch, lambda: getattr(sch, prim)(i), f"in `{prim}`: expected .* not yet bound or annotated, .* annotated")


# ---------------------------------------------------------------- fuse
@T.prim_func
def csrmm_fused(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, m: T.int32,
                n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
    T.func_attr({"stage": 2})
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32", value_range=(0, T.cast(nnz, "int32")))
    J_indices = T.match_sparse_buffer(indices, (I, J), "int32", value_range=(0, n - 1))
    for i in T.serial(m):
        with T.block("csrmm0"):
            vi = T.axis.spatial(m, i)
            if J_indptr[vi + 1] - J_indptr[vi] == 0:
                for k_init in T.serial(feat):
                    C[vi, k_init] = T.float32(0.0)
            for j_k_fused in T.serial((J_indptr[vi + 1] - J_indptr[vi]) * feat):
                with T.block("csrmm1"):
                    vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j_k_fused // feat)
                    vk = T.axis.spatial(feat, j_k_fused % feat)
                    with T.init():
                        C[vi, vk] = T.float32(0.0)
                    C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]


def test_fuse(csrmm2):
    """fuse(j, k): one loop over the product; j = fused // feat, k = fused % feat."""
    sch = VerifyingSchedule(csrmm2)
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    fused = sch.fuse(j, k)
    assert fused.name == "j_k_fused"
    sp.assert_structural_equal(sch.mod["main"], expected(csrmm_fused))
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())
    with pytest.raises(sp.ScheduleError, match="in `parallel`: expected a loop that carries no reduction"):
        sch.parallel(fused)  # it walks the reduction over j


def test_fuse_three_split_loops(csrmm2):
    """Splitting then fusing back gives one loop again (with the split's guard)."""
    sch = VerifyingSchedule(csrmm2)
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    parts = sch.split(k, [None, 2, 3])
    fused = sch.fuse(*parts)
    assert fused.name == "k_0_k_1_k_2_fused"
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


def test_fuse_fail_one_loop(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    unchanged(sch, lambda: sch.fuse(i), "in `fuse`: expected at least two loops")


def test_fuse_fail_duplicate(csrmm2):
    sch = sp.Schedule(csrmm2)
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.fuse(j, j), "in `fuse`: expected distinct loops, but `j` is given twice")


def test_fuse_fail_not_adjacent(csrmm2):
    """i and j are separated by block csrmm0 (and j's body is not i)."""
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.fuse(i, j), "in `fuse`: expected `j` to be the whole body of `i`")
    unchanged(sch, lambda: sch.fuse(k, j), "in `fuse`: expected `j` to be the whole body of `k`")


def test_fuse_fail_bound_loop(csrmm2):
    sch = sp.Schedule(csrmm2)
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    sch.bind(k, "threadIdx.x")
    unchanged(sch, lambda: sch.fuse(j, k), "in `fuse`: expected a serial loop .*, but `k` is bound to threadIdx.x")


def test_fuse_fail_nonzero_start(toy):
    sch = sp.Schedule(toy)
    i, j = sch.get_loops(sch.get_block("sum"))
    unchanged(sch, lambda: sch.fuse(i, j), "in `fuse`: expected a loop starting at 0")


def test_fuse_fail_dependent_extent(toy):
    sch = sp.Schedule(toy)
    i2, j2 = sch.get_loops(sch.get_block("tri"))
    unchanged(sch, lambda: sch.fuse(i2, j2), "in `fuse`: expected extents independent of the fused loops")


# ---------------------------------------------------------------- reorder
def test_reorder(csrmm2):
    """reorder(k, j): the feature loop goes outside the nonzeros; the init still runs when vj == 0."""
    sch = VerifyingSchedule(csrmm2)
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    sch.reorder(k, j)
    assert [lp.name for lp in sch.get_loops(sch.get_block("csrmm1"))] == ["k", "j"]
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


def test_reorder_keeps_loops_not_given(csrmm2):
    """Of j, k_outer, k_inner, reorder(k_inner, j) swaps those two; k_outer stays in the middle."""
    sch = VerifyingSchedule(csrmm2)
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    _, ki = sch.split(k, [None, 2])
    sch.reorder(ki, j)
    assert [lp.name for lp in sch.get_loops(sch.get_block("csrmm1"))] == ["k_inner", "k_outer", "j"]
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


def test_reorder_fail_duplicate(csrmm2):
    sch = sp.Schedule(csrmm2)
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.reorder(j, j), "in `reorder`: expected distinct loops")


def test_reorder_fail_not_one_nest(csrmm2):
    """k_init (the empty-row initialisation) and k are in different nests."""
    sch = sp.Schedule(csrmm2)
    _, k = sch.get_loops(sch.get_block("csrmm1"))
    k_init = next(
        v for v in sp.ir.visit.walk(sch.mod["main"].body) if isinstance(v, sp.ir.For) and v.loop_var.name == "k_init"
    )
    unchanged(
        sch, lambda: sch.reorder(k, sp.schedule.LoopRV(k_init.loop_var)), "in `reorder`: expected loops of one nest"
    )


def test_reorder_fail_block_between(csrmm2):
    sch = sp.Schedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    j, _ = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(sch, lambda: sch.reorder(j, i), "in `reorder`: expected a perfect nest, but the body of `i`")


def test_reorder_fail_imperfect_nest():
    """After decompose_reduction(sddmm1, k), loop j holds the init block and loop k."""
    sch = sp.Schedule(sp.lower_sparse_iter(sp.ops.sddmm_script()))
    b = sch.get_block("sddmm1")
    j, k = sch.get_loops(b)
    sch.decompose_reduction(b, k)
    unchanged(sch, lambda: sch.reorder(k, j), "in `reorder`: expected a perfect nest, but the body of `j`")


def test_reorder_fail_dependent_extent(toy):
    sch = sp.Schedule(toy)
    i2, j2 = sch.get_loops(sch.get_block("tri"))
    unchanged(sch, lambda: sch.reorder(j2, i2), "in `reorder`: expected loops whose range does not depend")


def test_reorder_fail_init_would_run_late(csrmm2):
    """fuse(j, k) binds vj and vk to one loop; with its split halves swapped, some vk visits vj = 3
    before vj = 0, whose init would zero the partial sum (a CPU kernel returned wrong rows)."""
    sch = sp.Schedule(csrmm2)
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    f = sch.fuse(j, k)
    outer, inner = sch.split(f, [None, 4])
    unchanged(sch, lambda: sch.reorder(inner, outer), "in `reorder`: block `csrmm1` has an init and binds spatial")


def test_reorder_of_shared_loops_after_decompose_reduction(csrmm2):
    """Without an init in the block, the same order is allowed and the sum stays right."""
    sch = VerifyingSchedule(csrmm2)
    b = sch.get_block("csrmm1")
    j, k = sch.get_loops(b)
    sch.decompose_reduction(b, j)
    f = sch.fuse(j, k)
    outer, inner = sch.split(f, [None, 4])
    sch.reorder(inner, outer)
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


# ---------------------------------------------------------------- handles
def test_handles_survive_primitives_that_keep_their_object(csrmm2):
    """Loop handles are loop variables and block handles are names: they stay valid across
    primitives that keep the loop or block, and only the removed ones go stale."""
    sch = VerifyingSchedule(csrmm2)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    b = sch.get_block("csrmm1")
    j, k = sch.get_loops(b)
    back = sch.cache_write(b, "C", "local")
    sch.decompose_reduction(b, j)
    sch.annotate(k, "note", "kept")
    sch.reorder(k, j)
    assert sch.get_loops(b) == [k, j]
    sch.parallel(i)
    ax0, ax1 = sch.get_loops(back)
    fused = sch.fuse(ax0, ax1)
    with pytest.raises(sp.ScheduleError, match="in `unroll`: loop `ax0` is not in"):
        sch.unroll(ax0)  # fused away
    sch.unroll(fused)
    check(sch, csrmm2)
    run_spmm(sch.mod, random_csr())


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda sch, b, lp: sch.split(b, [None, 2]), "in `split`: expected a loop handle, but got BlockRV"),
        (lambda sch, b, lp: sch.cache_read(lp, 0, "local"), "in `cache_read`: expected a block handle, but got LoopRV"),
        (lambda sch, b, lp: sch.annotate("csrmm1", "k", 1), "in `annotate`: expected a block or loop handle"),
        (lambda sch, b, lp: sch.compute_at(b, b), "in `compute_at`: expected a loop handle"),
    ],
)
def test_fail_wrong_handle_kind(csrmm2, call, match):
    sch = sp.Schedule(csrmm2)
    b = sch.get_block("csrmm1")
    j, _ = sch.get_loops(b)
    unchanged(sch, lambda: call(sch, b, j), match)
