"""`tensorize` against the intrinsic registry: `dot_4/8/16` (unrolled, CPU and CUDA) and
`warp_sum_32` (CUDA warp shuffles).

Each scheduled function verifies, round-trips through the printer, replays from its trace, equals
a hand-written expected function where the test gives one, and its kernel computes what
scipy/numpy compute: on the CPU here, in the CUDA simulator in `test_schedule_tensorize_cudasim.py`
(a subprocess); the CUDA kernels compile to PTX for sm_80 and sm_90 with `shfl.sync`. Every
precondition has a failing test that leaves the schedule unchanged.
"""

from __future__ import annotations

import doctest

import corpus
import numpy as np
import pytest
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.ir.stmt import Block, For
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import sddmm_script
from sparsetir_py.schedule import intrinsics
from sparsetir_py.schedule import tensorize as tensorize_module
from sparsetir_py.schedule.intrinsics import get_tensor_intrin, tensor_intrins


class Schedule(sp.Schedule):
    """`sp.Schedule` that verifies the function after every primitive."""

    def _update(self, func) -> None:
        sp.verify(func)
        super()._update(func)


def check(sch: sp.Schedule, unscheduled) -> None:
    """Verify, printer round trip, trace replay (`apply` and the printed Python)."""
    f = sch.mod["main"]
    sp.verify(f)
    assert f.stage == 2
    sp.assert_structural_equal(f, sp.from_script(f.script()))
    sp.assert_structural_equal(sch.trace.apply(unscheduled), sch.mod)
    namespace = {"sch": Schedule(unscheduled)}
    exec(sch.trace.as_python(), namespace)
    sp.assert_structural_equal(namespace["sch"].mod, sch.mod)
    sp.verify(sp.lower_sparse_buffer(sch.mod))


def random_csr(m: int, n: int, density: float, seed: int, idtype="int32", dtype="float32") -> sps.csr_matrix:
    """A random CSR matrix with an empty row (row 1) and a full row (the last)."""
    A = sps.random(m, n, density=density, random_state=seed).toarray()
    A[1] = 0
    A[-1] = np.arange(1, n + 1)
    return corpus.prepare_csr(A, idtype, dtype)


def sddmm_reference(A, X, Y) -> np.ndarray:
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return (A.data.astype(np.float64) * np.einsum("ek,ek->e", X[rows].astype(np.float64), Y[A.indices])).astype(A.dtype)


def run_sddmm(kernel, A, feat: int, seed: int = 0) -> None:
    m, n = A.shape
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, feat)).astype(A.dtype)
    Y = rng.standard_normal((n, feat)).astype(A.dtype)
    C = np.full(A.nnz, np.nan, A.dtype)
    kwargs = dict(a=A.data, x=X, y=Y, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)
    if "feat" in kernel.parameters:
        kwargs["feat"] = feat
    kernel(**kwargs)
    np.testing.assert_allclose(C, sddmm_reference(A, X, Y), rtol=1e-4, atol=1e-4)


def sddmm_dot_schedule(sch: sp.Schedule, width: int = 8) -> None:
    """CPU: rows in parallel, the reduction over k split by `width` and unrolled."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    sch.parallel(i)
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    _, k_inner = sch.split(k, [None, width])
    sch.tensorize(k_inner, f"dot_{width}", "cpu")


def sddmm_warp_schedule(sch: sp.Schedule, warps: int = 2) -> None:
    """CUDA: a row per thread block, a nonzero per warp (`threadIdx.y`), k across the lanes."""
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    sch.bind(i, "blockIdx.x")
    j, k = sch.get_loops(sch.get_block("sddmm1"))
    _, j_inner = sch.split(j, [None, warps])
    sch.bind(j_inner, "threadIdx.y")
    _, k_inner = sch.split(k, [None, 32])
    sch.tensorize(k_inner, "warp_sum_32", "cuda")


def block_named(func, name: str) -> Block:
    return next(n for n in walk(func.body) if isinstance(n, Block) and n.name == name)


# ---------------------------------------------------------------------------------------------- registry
def test_registry_descriptions_round_trip():
    """Every description is a valid Stage II function that prints and parses back, per dtype."""
    assert {"warp_sum_32", "dot_4", "dot_8", "dot_16"} <= set(tensor_intrins())
    for intrin in tensor_intrins().values():
        for dtype in intrin.dtypes:
            desc = intrin.description(dtype)
            sp.verify(desc)
            assert desc.stage == 2
            sp.assert_structural_equal(desc, sp.from_script(desc.script()))
            loop = desc.body
            assert isinstance(loop, For) and loop.extent.value == intrin.width
    assert set(get_tensor_intrin("warp_sum_32").implementations) == {"cuda"}
    assert set(get_tensor_intrin("dot_8").implementations) == {"cpu", "cuda"}


def test_register_a_new_intrinsic(monkeypatch):
    """A user intrinsic: the same description, implemented as a plain sequential sum."""
    monkeypatch.setattr(intrinsics, "_REGISTRY", dict(intrinsics._REGISTRY))  # undone after the test

    def sequential(m: intrinsics.Match):
        total = None
        for k in range(m.width):
            lane = sp.ir.IntImm(k, "int32")
            term = m.guard(lane, m.operand("TERM", lane))
            total = term if total is None else total + term
        return m.accumulate(total)

    intrin = intrinsics.TensorIntrin(
        "test_sum_2",
        2,
        ("float32",),
        intrinsics.WARP_SUM_DESCRIPTION,
        {"cpu": intrinsics.IntrinImpl("cpu", sequential)},
    )
    intrinsics.register_tensor_intrin(intrin)
    with pytest.raises(ValueError, match="already registered"):
        intrinsics.register_tensor_intrin(intrin)
    broken = intrinsics.WARP_SUM_DESCRIPTION.replace("ACC[0] = ACC[0] + TERM[vk]", "ACC[vk] = TERM[vk]")
    with pytest.raises(ValueError, match="description of `broken`"):
        intrinsics.register_tensor_intrin(intrinsics.TensorIntrin("broken", 2, ("float32",), broken))
    case = corpus.CASES_BY_NAME["csr_reduce"]
    sch = Schedule(sp.lower_sparse_iter(case.build()))
    (j,) = sch.get_loops(sch.get_block("csr_reduce1"))
    _, j_inner = sch.split(j, [None, 2])
    sch.tensorize(j_inner, "test_sum_2")
    check(sch, sp.lower_sparse_iter(case.build()))
    A = random_csr(6, 7, 0.4, 3)
    kwargs, _ = case.make_args(A, np.random.default_rng(0), "int32", "float32")
    sp.interpret(sch.mod, **kwargs)
    np.testing.assert_allclose(kwargs["b"], case.reference(A, kwargs)["b"], rtol=1e-5, atol=1e-5)


def test_docstring_examples():
    for module in (tensorize_module, intrinsics):
        assert doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE).failed == 0


# ---------------------------------------------------------------------------------------------- dot (CPU)
@T.prim_func
def rowdot(a: T.handle, b: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    B = T.match_buffer(b, (8,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n):
        for k_outer in T.serial(2):
            for k_inner in T.serial(4):
                with T.block("rowdot"):
                    vi = T.axis.spatial(n, i)
                    vk = T.axis.reduce(8, k_outer * 4 + k_inner)
                    T.reads(C[vi], A[vi, vk], B[vk])
                    T.writes(C[vi])
                    with T.init():
                        C[vi] = T.float32(0.0)
                    C[vi] = C[vi] + A[vi, vk] * B[vk]


@T.prim_func
def rowdot_dot4(a: T.handle, b: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 8), "float32")
    B = T.match_buffer(b, (8,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n):
        for k_outer in T.serial(2):
            with T.block("rowdot"):
                vi = T.axis.spatial(n, i)
                vk_o = T.axis.reduce(2, k_outer)
                T.reads(C[vi], A[vi, 0:8], B[0:8])
                T.writes(C[vi])
                with T.init():
                    C[vi] = T.float32(0.0)
                C[vi] = C[vi] + (
                    A[vi, vk_o * 4] * B[vk_o * 4]
                    + A[vi, vk_o * 4 + 1] * B[vk_o * 4 + 1]
                    + (A[vi, vk_o * 4 + 2] * B[vk_o * 4 + 2] + A[vi, vk_o * 4 + 3] * B[vk_o * 4 + 3])
                )


def test_dot4_expected_ir():
    """The block moves above `k_inner`; its iterator `vk` becomes `vk_o` over `k_outer`; the four
    products are one store, summed as a balanced tree; the init stays (it runs at vk_o == 0)."""
    sch = Schedule(rowdot)
    (_, _, k_inner) = sch.get_loops(sch.get_block("rowdot"))
    sch.tensorize(k_inner, "dot_4")  # one loop handle, the CPU implementation by default
    sp.assert_structural_equal(sch.mod["main"], rowdot_dot4)
    check(sch, rowdot)
    A = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    B = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    C = np.full(5, np.nan, np.float32)
    sp.build(sp.lower_sparse_buffer(sch.mod), target="cpu")(a=A, b=B, c=C, n=5)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("feat", [13, 16])
def test_dot8_sddmm_cpu_kernel(feat):
    """SDDMM with the reduction over k unrolled by 8: feat = 13 keeps the split guard (terms past
    feat are 0), feat = 16 (specialized) has none; both equal scipy, empty and full rows too."""
    func = sddmm_script() if feat == 13 else sddmm_script().specialize({"feat": feat})
    mod = sp.lower_sparse_iter(func)
    sch = Schedule(mod)
    sddmm_dot_schedule(sch, 8)
    check(sch, mod)
    block = block_named(sch.mod["main"], "sddmm1")
    assert [iv.var.name for iv in block.iter_vars] == ["vj", "vk_o"]
    text = sch.mod["main"].script()
    assert ("T.if_then_else(vk_o * 8 + 7 < feat" in text) == (feat == 13)
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cpu")
    for seed in (0, 1):
        run_sddmm(kernel, random_csr(9, 7, 0.35, seed), feat, seed)


def test_dot_via_block_handle_and_float64():
    """`tensorize(block)` takes the loop directly around the block; float64 and int64 indices."""
    mod = sp.lower_sparse_iter(sddmm_script("int64", "float64").specialize({"feat": 8}))
    sch = Schedule(mod)
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    sch.split(k, [None, 4])
    sch.tensorize(sch.get_block("sddmm1"), "dot_4", "cpu")
    check(sch, mod)
    assert "sch.tensorize(b" in sch.trace.as_python()
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cpu")
    run_sddmm(kernel, random_csr(6, 5, 0.5, 2, "int64", "float64"), 8)


def test_dot_whole_loop_folds_init_into_the_one_store():
    """Tensorizing the whole reduction (extent = width): no reduction iterator is left, so the
    block stores `init + sum` once per spatial point (no init store, no read of C)."""
    mod = sp.lower_sparse_iter(sddmm_script().specialize({"feat": 4}))
    sch = Schedule(mod)
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    sch.tensorize(k, "dot_4", "cpu")
    check(sch, mod)
    block = block_named(sch.mod["main"], "sddmm1")
    assert block.init is None and all(iv.kind == "S" for iv in block.iter_vars)
    assert isinstance(block.body, sp.ir.BufferStore) and block.body.buffer.name == "C"
    assert block.body.value.a == sp.ir.FloatImm(0.0, "float32")
    assert not any(isinstance(n, sp.ir.BufferLoad) and n.buffer.name == "C" for n in walk(block.body))
    run_sddmm(sp.build(sp.lower_sparse_buffer(sch.mod), target="cpu"), random_csr(6, 5, 0.5, 4), 4)


# ---------------------------------------------------------------------------------------------- warp_sum (CUDA)
@T.prim_func
def rowdot64(a: T.handle, b: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 64), "float32")
    B = T.match_buffer(b, (64,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.thread_binding(n, thread="blockIdx.x"):
        for k_outer in T.serial(2):
            for k_inner in T.serial(32):
                with T.block("rowdot"):
                    vi = T.axis.spatial(n, i)
                    vk = T.axis.reduce(64, k_outer * 32 + k_inner)
                    T.reads(C[vi], A[vi, vk], B[vk])
                    T.writes(C[vi])
                    with T.init():
                        C[vi] = T.float32(0.0)
                    C[vi] = C[vi] + A[vi, vk] * B[vk]


@T.prim_func
def rowdot64_warp(a: T.handle, b: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, 64), "float32")
    B = T.match_buffer(b, (64,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.thread_binding(n, thread="blockIdx.x"):
        for k_outer in T.serial(2):
            with T.block("rowdot"):
                vi = T.axis.spatial(n, i)
                vk_o = T.axis.reduce(2, k_outer)
                T.reads(A[vi, 0:64], B[0:64], C[vi])
                T.writes(C[vi])
                with T.init():
                    C[vi] = T.float32(0.0)
                for k_inner in T.thread_binding(32, thread="threadIdx.x"):
                    red_buf = T.allocate((1,), "float32", "local")
                    red_buf[0] = A[vi, vk_o * 32 + k_inner] * B[vk_o * 32 + k_inner]
                    red_buf[0] = red_buf[0] + T.shfl_down_sync(T.int64(4294967295), red_buf[0], 16)
                    red_buf[0] = red_buf[0] + T.shfl_down_sync(T.int64(4294967295), red_buf[0], 8)
                    red_buf[0] = red_buf[0] + T.shfl_down_sync(T.int64(4294967295), red_buf[0], 4)
                    red_buf[0] = red_buf[0] + T.shfl_down_sync(T.int64(4294967295), red_buf[0], 2)
                    red_buf[0] = red_buf[0] + T.shfl_down_sync(T.int64(4294967295), red_buf[0], 1)
                    if k_inner == 0:
                        C[vi] = C[vi] + red_buf[0]


def test_warp_sum_expected_ir():
    """The lanes are `k_inner` bound to threadIdx.x: a term each in a local register, five
    shuffles down (16, 8, 4, 2, 1), and lane 0 adds the warp's sum to the accumulator."""
    sch = Schedule(rowdot64)
    (_, _, k_inner) = sch.get_loops(sch.get_block("rowdot"))
    sch.tensorize(k_inner, "warp_sum_32")  # its only implementation: CUDA
    sp.assert_structural_equal(sch.mod["main"], rowdot64_warp)
    check(sch, rowdot64)
    assert sch.get_loops(sch.get_block("rowdot"))[-1].name == "k_outer"


def warp_sddmm_module(feat: int | None = None, idtype: str = "int32", dtype: str = "float32"):
    func = sddmm_script(idtype, dtype)
    if feat is not None:
        func = func.specialize({"feat": feat})
    mod = sp.lower_sparse_iter(func)
    sch = Schedule(mod)
    sddmm_warp_schedule(sch)
    return sch, mod


def test_warp_sum_sddmm_schedule():
    sch, mod = warp_sddmm_module()
    check(sch, mod)
    text = sch.mod["main"].script()
    assert 'for k_inner in T.thread_binding(32, thread="threadIdx.x"):' in text
    assert text.count("T.shfl_down_sync(") == 5
    assert "T.if_then_else(vk_o * 32 + k_inner < feat" in text  # lanes past feat add 0
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cuda")
    assert "from sparsetir_py.runtime.cuda_warp import shfl_down_sync" in kernel.source
    assert kernel.launch_config(m=5, n=6, feat=40, nnz=9) == ((5,), (32, 2))


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_warp_sum_ptx(cc):
    """The real intrinsic: `shfl.sync.down` in the PTX of the tensorized SDDMM and row sum."""
    sch, _ = warp_sddmm_module()
    ptx = sp.build(sp.lower_sparse_buffer(sch.mod), target="cuda").ptx(cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx and ".visible .entry" in ptx
    assert "shfl.sync.down" in ptx
    rows = warp_row_sum_module()[0]
    assert "shfl.sync.down" in sp.build(sp.lower_sparse_buffer(rows.mod), target="cuda").ptx(cc=cc)


def warp_row_sum_module(dtype: str = "float32"):
    """CSR row sums with a warp per row: the variable-extent reduction over j split by 32."""
    case = corpus.CASES_BY_NAME["csr_reduce"]
    mod = sp.lower_sparse_iter(case.build("int32", dtype))
    sch = Schedule(mod)
    (i,) = sch.get_loops(sch.get_block("csr_reduce0"))
    sch.bind(i, "blockIdx.x")
    (j,) = sch.get_loops(sch.get_block("csr_reduce1"))
    _, j_inner = sch.split(j, [None, 32])
    sch.tensorize(j_inner, "warp_sum_32", "cuda")
    return sch, mod


def test_warp_sum_row_sum_schedule():
    sch, mod = warp_row_sum_module()
    check(sch, mod)
    block = block_named(sch.mod["main"], "csr_reduce1")
    assert [iv.var.name for iv in block.iter_vars] == ["vj_o"]


def test_warp_sum_groups_of_8_lanes():
    """`warp_sum_8` (`csr_cuda_fused_rfactor_lanes8`): a shuffle tree of three steps (4, 2, 1), the
    block's predicate applied inside it (the term selected, the store guarded) rather than around
    it, and `shfl.sync.down` in the PTX without local memory."""
    from schedules import sddmm as sddmm_schedules

    kernel = sp.compile(
        sddmm_script(), "cuda", schedule=sddmm_schedules.csr_cuda_fused_rfactor_lanes8, specialize={"feat": 32}
    )
    src = kernel.source
    assert [f"red_buf, {d})" in src for d in (16, 8, 4, 2, 1)] == [False, False, True, True, True]
    assert "red_buf = C_rf if vi_j_1 < np.int32(nnz) else np.float32(0.0)" in src
    assert "if ax1 == 0 and vi_j_1 < np.int32(nnz):" in src
    ptx = kernel.ptx(cc=(8, 0))
    assert ptx.count("shfl.sync.down") == 3 and ".local" not in ptx


@pytest.mark.parametrize(
    "lanes,nnz_per_block,message",
    [
        (8, 2, "make whole warps"),  # 2 nonzeros of 8 lanes: 16 threads, half a warp
        (16, 1, "make whole warps"),
    ],
)
def test_warp_sum_groups_must_fill_warps(lanes, nnz_per_block, message):
    from schedules import sddmm as sddmm_schedules

    def schedule(sch):
        sddmm_schedules.csr_cuda_fused_rfactor(sch, nnz_per_block=nnz_per_block, lanes=lanes)

    schedule.stage1 = sddmm_schedules.csr_cuda_fused_rfactor.stage1
    with pytest.raises(sp.ScheduleError, match=message):
        sp.compile(sddmm_script(), "cuda", schedule=schedule, specialize={"feat": 32})


ROWDOT_GROUPS = """
from sparsetir_py import script as T


@T.prim_func
def rowdot_groups(a: T.handle, b: T.handle, c: T.handle, d: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n * 4, 32), "float32")
    B = T.match_buffer(b, (32,), "float32")
    C = T.match_buffer(c, (n * 4,), "float32")
    D = T.match_buffer(d, (n * 4, 32), "float32")
    for bx in T.thread_binding(n, thread="blockIdx.x"):
        for y in T.thread_binding(4, thread="threadIdx.y"):
            for x in T.thread_binding(COPY_LANES, thread="threadIdx.x"):
                with T.block("copy"):
                    vr = T.axis.spatial(n * 4, bx * 4 + y)
                    vx = T.axis.spatial(32, x)
                    T.reads(A[vr, vx])
                    T.writes(D[vr, vx])
                    D[vr, vx] = A[vr, vx]
            for k_outer in T.serial(4):
                for k_inner in T.serial(8):
                    with T.block("rowdot"):
                        vi = T.axis.spatial(n * 4, bx * 4 + y)
                        vk = T.axis.reduce(32, k_outer * 8 + k_inner)
                        T.reads(C[vi], A[vi, vk], B[vk])
                        T.writes(C[vi])
                        with T.init():
                            C[vi] = T.float32(0.0)
                        C[vi] = C[vi] + A[vi, vk] * B[vk]
"""


@pytest.mark.parametrize("copy_lanes", [8, 32])
def test_warp_sum_group_needs_its_lanes_on_threadIdx_x(copy_lanes):
    """In a launch where another loop binds threadIdx.x to 32 lanes, groups of 8 would not be
    rows of lanes (`x + 32 * y`): refused; with 8 there too, four rows of 8 make each warp."""
    sch = Schedule(sp.from_script(ROWDOT_GROUPS.replace("COPY_LANES", str(copy_lanes))))
    k_inner = sch.get_loops(sch.get_block("rowdot"))[-1]
    if copy_lanes == 32:
        with pytest.raises(sp.ScheduleError, match="`x` has extent 32"):
            sch.tensorize(k_inner, "warp_sum_8", "cuda")
        return
    sch.tensorize(k_inner, "warp_sum_8", "cuda")
    text = sch.mod["main"].script()
    assert text.count("T.shfl_down_sync(") == 3 and 'T.thread_binding(8, thread="threadIdx.x")' in text


def test_warp_sum_on_cpu_is_a_codegen_error():
    sch, _ = warp_sddmm_module()
    with pytest.raises(sp.CodegenError, match="shfl_down_sync"):
        sp.build(sp.lower_sparse_buffer(sch.mod), target="cpu")


# ---------------------------------------------------------------------------------------------- preconditions
def _fails(sch: sp.Schedule, match: str, *args) -> None:
    before, n = sch.mod, len(sch.trace.instructions)
    with pytest.raises(sp.ScheduleError, match=match):
        sch.tensorize(*args)
    assert sch.mod is before and len(sch.trace.instructions) == n  # unchanged, nothing recorded


def _sddmm_split(width: int = 4, feat: int | None = 8):
    func = sddmm_script() if feat is None else sddmm_script().specialize({"feat": feat})
    sch = Schedule(sp.lower_sparse_iter(func))
    j, k = sch.get_loops(sch.get_block("sddmm1"))
    k_outer, k_inner = sch.split(k, [None, width])
    return sch, j, k_outer, k_inner


def test_fail_unknown_intrinsic():
    sch, _, _, k_inner = _sddmm_split()
    _fails(sch, r"in `tensorize`: expected a registered intrinsic \(.*dot_4.*\), but got 'dot_5'", k_inner, "dot_5")


def test_fail_target_not_implemented():
    sch, _, _, k_inner = _sddmm_split(32, None)
    _fails(sch, "expected a target that intrinsic `warp_sum_32` implements \\(cuda\\), but got 'cpu'", k_inner,
           "warp_sum_32", "cpu")  # fmt: skip
    _fails(sch, "but got 'metal'", k_inner, "dot_4", "metal")


def test_fail_not_stage2():
    stage1 = Schedule(sddmm_script())
    with pytest.raises(sp.ScheduleError, match="in `tensorize`: expected a Stage II function .* at Stage 1"):
        tensorize_module.tensorize(stage1.func, "sddmm1", "dot_4")
    sch, _, _, _ = _sddmm_split()
    stage3 = sp.lower_sparse_buffer(sch.mod)["main"]
    with pytest.raises(sp.ScheduleError, match="at Stage 3"):
        tensorize_module.tensorize(stage3, "sddmm1", "dot_4")


def test_fail_not_a_handle():
    sch, _, _, _ = _sddmm_split()
    _fails(sch, "expected a block or loop handle, but got 'sddmm1'", "sddmm1", "dot_4")


def test_fail_wrong_extent():
    sch, _, k_outer, k_inner = _sddmm_split(4, None)
    _fails(sch, "expected a loop of extent 8 \\(the width of `dot_8`\\), but `k_inner` has extent 4", k_inner, "dot_8")
    _fails(sch, r"`k_outer` has extent \(feat \+ 3\) // 4", k_outer, "dot_4")


def test_fail_loop_not_serial():
    sch, _, _, k_inner = _sddmm_split()
    sch.unroll(k_inner)
    _fails(sch, "expected a serial loop that is not bound or annotated, but `k_inner` is unrolled", k_inner, "dot_4")


def test_fail_body_not_one_block():
    sch = Schedule(sp.lower_sparse_iter(sddmm_script().specialize({"feat": 16})))
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    _, k1, _ = sch.split(k, [None, 4, 2])
    _fails(sch, "expected the body of loop `k_1` to be exactly one block, but it is a For", k1, "dot_4")


def test_fail_spatial_loop():
    case = corpus.CASES_BY_NAME["csr_element_wise"]
    sch = Schedule(sp.lower_sparse_iter(case.build()))
    (j,) = sch.get_loops(sch.get_block("csr_element_wise1"))
    _, j_inner = sch.split(j, [None, 4])
    _fails(sch, "expected loop `j_inner` to carry a reduction, but block `csr_element_wise1` binds it to the spatial "
           "iterator `vj`", j_inner, "dot_4")  # fmt: skip


def test_fail_description_mismatch():
    """A row sum has no product: `dot_4` does not describe it (`warp_sum_32` does)."""
    case = corpus.CASES_BY_NAME["csr_reduce"]
    sch = Schedule(sp.lower_sparse_iter(case.build()))
    (j,) = sch.get_loops(sch.get_block("csr_reduce1"))
    _, j_inner = sch.split(j, [None, 4])
    _fails(sch, r"expected block's store to match the description of `dot_4`, ACC\[0\] = ACC\[0\] \+ A\[vk\] \* "
           r"B\[vk\], but got B\[vi\] = B\[vi\] \+ A\[vi, vj\]", j_inner, "dot_4")  # fmt: skip


def test_fail_dtype():
    sch = Schedule(sp.lower_sparse_iter(sddmm_script("int32", "float16").specialize({"feat": 8})))
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    _, k_inner = sch.split(k, [None, 4])
    _fails(sch, "expected an accumulator of dtype float32, float64 for `dot_4`, but `C` is float16", k_inner, "dot_4")


STAGE2 = """
from sparsetir_py import script as T


@T.prim_func
def f(a: T.handle, b: T.handle, c: T.handle, n: T.int32):
    T.func_attr({{"stage": 2}})
    A = T.match_buffer(a, (n, 8), "float32")
    B = T.match_buffer(b, (8,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in T.serial(n):
        for k in T.serial({loop}):
            with T.block("dot"):
                vi = T.axis.spatial(n, i)
                vk = T.axis.reduce(8, {binding})
                {where}
                T.reads(C[vi], A[vi, 0:8], B[0:8])
                T.writes(C[vi])
                {body}
"""


def stage2(body: str, *, loop: str = "4", binding: str = "k", where: str = "") -> sp.PrimFunc:
    """A hand-written Stage II dot product with one statement varied."""
    text = STAGE2.format(loop=loop, binding=binding, where=where, body=body).replace("\n                \n", "\n")
    func = sp.from_script(text)
    sp.verify(func)
    return func


ACC = "C[vi] = C[vi] + A[vi, vk] * B[vk]"


def test_stage2_helper_tensorizes():
    sch = Schedule(stage2(ACC))
    sch.tensorize(sch.get_block("dot"), "dot_4")
    check(sch, stage2(ACC))


def test_fail_loop_not_from_zero():
    sch = Schedule(stage2(ACC, loop="1, 5", binding="k - 1"))
    _fails(sch, "expected a loop starting at 0, but `k` starts at 1", sch.get_block("dot"), "dot_4")


def test_fail_binding_not_outer_plus_loop():
    sch = Schedule(stage2(ACC, binding="k * 2"))
    _fails(sch, "expected iterator `vk` bound to `outer \\+ k` .*, but it is bound to k \\* 2", sch.get_block("dot"),
           "dot_4")  # fmt: skip


def test_fail_predicate_uses_loop():
    sch = Schedule(stage2(ACC, where="T.where(k < 3)"))
    _fails(sch, "to use loop `k` only in the split guard k < 8, but it has k < 3", sch.get_block("dot"), "dot_4")


def test_fail_accumulator_depends_on_lane():
    sch = Schedule(stage2("C[vk] = C[vk] + A[vi, vk] * B[vk]"))
    _fails(sch, "expected an accumulator that does not depend on the reduction iterator `vk`, but the block writes "
           "C\\[vk\\]", sch.get_block("dot"), "dot_4")  # fmt: skip


def test_fail_term_reads_accumulator():
    sch = Schedule(stage2("C[vi] = C[vi] + C[vk] * B[vk]"))
    _fails(sch, "expected terms that do not read the accumulator's buffer `C`, but operand A is C\\[vk\\]",
           sch.get_block("dot"), "dot_4")  # fmt: skip


def test_fail_block_not_one_store():
    sch = Schedule(stage2("C[vi] = C[vi] + A[vi, vk] * B[vk]\n                C[vi] = C[vi] * 2.0"))
    _fails(sch, "expected block `dot` to be one store .*, but its body is a SeqStmt", sch.get_block("dot"), "dot_4")


def test_fail_block_without_loop():
    text = stage2(ACC).script()
    text = text.replace("for i in T.serial(n):", "if n > 0:").replace("for k in T.serial(4):", "if n > 1:")
    text = text.replace("T.axis.spatial(n, i)", "T.axis.spatial(n, 0)").replace(
        "T.axis.reduce(8, k)", "T.axis.reduce(8, 0)"
    )
    sch = Schedule(sp.from_script(text))
    sp.verify(sch.func)
    _fails(sch, "expected a block inside a loop, but block `dot` has no loop of its own", sch.get_block("dot"), "dot_4")


def test_fail_warp_inside_thread_x():
    unbound = Schedule(sp.lower_sparse_iter(sddmm_script()))
    j, k = unbound.get_loops(unbound.get_block("sddmm1"))
    _, j_inner = unbound.split(j, [None, 32])
    unbound.bind(j_inner, "threadIdx.x")
    _, k_inner = unbound.split(k, [None, 32])
    _fails(unbound, "expected no enclosing loop bound to threadIdx.x .* `k_inner` is inside `j_inner`", k_inner,
           "warp_sum_32", "cuda")  # fmt: skip


def test_fail_warp_partial_warps():
    """Another loop binds 16 lanes of threadIdx.x: warps would mix threadIdx.y rows."""
    text = rowdot64.script().replace(
        '    for i in T.thread_binding(n, thread="blockIdx.x"):',
        '    for t in T.thread_binding(16, thread="threadIdx.x"):\n        C[t] = T.float32(0.0)\n'
        '    for i in T.thread_binding(n, thread="blockIdx.x"):',
    )
    sch = Schedule(sp.from_script(text))
    sp.verify(sch.func)
    (_, _, k_inner) = sch.get_loops(sch.get_block("rowdot"))
    _fails(sch, "expected every loop bound to threadIdx.x to span whole warps .* `t` has extent 16", k_inner,
           "warp_sum_32", "cuda")  # fmt: skip
