"""The CUDA backend without a GPU: rendering rules, launch configuration, PTX for sm_80/sm_90.

The kernels also run in Numba's CUDA simulator, in another process (test_codegen_cudasim.py):
the simulator must be switched on before numba.cuda is imported, and PTX needs the real one.
Tests that need a real GPU skip when there is none.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import stage3_kernels as K
from cuda_support import ptx_unavailable  # noqa: F401 (named in skipif condition strings)

import sparsetir_py as sp
from sparsetir_py.codegen import render

CASE_NAMES = [case.name for case in K.CASES]


@functools.cache
def gpu_available() -> bool:
    import numba

    if numba.config.ENABLE_CUDASIM:
        return False
    from numba import cuda

    return cuda.is_available()


needs_ptx = pytest.mark.skipif("ptx_unavailable() is not None", reason="PTX compilation unavailable")
needs_gpu = pytest.mark.skipif("not gpu_available()", reason="needs a CUDA GPU (none found)")


def source(name: str, **options) -> str:
    return render(K.CASES_BY_NAME[name].func("cuda"), "cuda", **options).source


# ----------------------------------------------------------------------------------------------
# PTX
# ----------------------------------------------------------------------------------------------


@needs_ptx
@pytest.mark.parametrize("cc", [(8, 0), (9, 0)], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_ptx(name, cc):
    ptx = K.build_case(name, "cuda").ptx(cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    entries = re.findall(r"\.visible \.entry (\S+)\(", ptx)
    assert len(entries) == 1 and name in entries[0]


@needs_ptx
def test_ptx_uses_the_device_intrinsics():
    ptx = K.build_case("colsum", "cuda").ptx()
    assert "atom.global.add.f32" in ptx and "atom.global.add.u32" in ptx
    assert "bar.sync" in K.build_case("rowsum", "cuda").ptx()
    assert ".shared" in K.build_case("rowsum", "cuda").ptx()


@needs_ptx
def test_ptx_int64_float64():
    ptx = K.build_case("csrmm", "cuda", "int64", "float64").ptx(cc=(9, 0))
    assert ".target sm_90" in ptx and "f64" in ptx


@needs_ptx
def test_ptx_is_cached_per_compute_capability():
    kernel = K.build_case("csrmm", "cuda")
    assert kernel.ptx((8, 0)) is kernel.ptx((8, 0))
    assert kernel.ptx((8, 0)) != kernel.ptx((9, 0))


@needs_ptx
def test_ptx_failure_is_a_codegen_error():
    with pytest.raises(sp.CodegenError, match="PTX compilation of `csrmm` for sm_35 failed"):
        K.build_case("csrmm", "cuda").ptx((3, 5))


# ----------------------------------------------------------------------------------------------
# Launch configuration and thread loops
# ----------------------------------------------------------------------------------------------


def test_launch_from_bound_loop_extents():
    assert K.build_case("csrmm", "cuda").launch_config(m=7, feat=4) == ((7,), (4,))
    assert K.build_case("sddmm", "cuda").launch_config(nnz=17) == ((3,), (8,))
    assert K.build_case("rowsum", "cuda").launch_config(m=5) == ((5,), (4,))  # max(4, 1)
    assert K.build_case("dense_add_2d", "cuda").launch_config(m=5, n=7) == ((3, 3), (2, 3))
    assert K.build_case("colsum", "cuda").launch_config(m=9) == ((9,), (1,))  # no thread loop


def test_launch_without_bound_loops_is_one_thread():
    kernel = K.build_case("csrmm", "cpu")  # the CPU schedule has no bound loop
    cuda_kernel = _build(kernel.func, "cuda")
    assert cuda_kernel.launch_config(m=4, feat=2) == ((1,), (1,))


def test_launch_needs_the_scalars():
    with pytest.raises(sp.InputError, match="m"):
        K.build_case("csrmm", "cuda").launch_config(feat=4)


def test_bound_loops_read_the_thread_indices():
    text = source("csrmm")
    assert "    i = cuda.blockIdx.x\n" in text and "        k = cuda.threadIdx.x\n" not in text
    assert "k = cuda.threadIdx.x" in text and "for k in" not in text


def test_only_loops_shorter_than_the_launch_are_guarded():
    text = source("rowsum")
    assert "t = cuda.threadIdx.x\n    partial[t]" in text  # extent 4 == block size: no guard
    assert "t0 = cuda.threadIdx.x\n    if t0 < 1:" in text


SYMBOLIC_SIBLINGS = """
@T.prim_func
def f(a: T.handle, b: T.handle, n: T.int32, k: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (k,), "float32")
    for g in T.thread_binding(1, thread="blockIdx.x"):
        for t in T.thread_binding(n, thread="threadIdx.x"):
            A[t] = T.float32(1)
        for u in T.thread_binding(k, thread="threadIdx.x"):
            B[u] = T.float32(2)
"""


def test_sibling_loops_with_symbolic_extents_are_all_guarded():
    func = K._parse(SYMBOLIC_SIBLINGS)
    text = render(func, "cuda").source
    assert "if t < n:" in text and "if u < k:" in text
    assert _build(func, "cuda").launch_config(n=3, k=5) == ((1,), (5,))


TWO_LAUNCHES = """
@T.prim_func
def f(a: T.handle, b: T.handle, n: T.int32, k: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (k,), "float32")
    for t in T.thread_binding(n, thread="threadIdx.x"):
        A[t] = T.float32(1)
    for i in T.serial(k):
        B[i] = T.float32(0)
    for u in T.thread_binding(k, thread="threadIdx.x"):
        B[u] = B[u] + A[0]
    for i2 in T.serial(k):
        B[i2] = B[i2] * T.float32(2)
"""


def test_top_level_bound_nests_are_separate_launches():
    """No barrier spans thread blocks, so each top-level statement with bound loops is its own
    launch, in order (TVM's host/device split); an unbound statement joins the next bound one
    (the last one when none follows). Each launch is sized, and guarded, by its own loops."""
    ks = render(K._parse(TWO_LAUNCHES), "cuda")
    text = ks.source
    assert "def f(A, B, n, k, launch):" in text
    assert "    if launch == 0:\n        t = cuda.threadIdx.x\n        A[t] = " in text
    assert "    if launch == 1:\n        for i in range(k):" in text
    assert "u = cuda.threadIdx.x\n        B[u] = B[u] + A[0]\n        for i2 in range(k):" in text
    assert "if t < n" not in text and "if u < k" not in text
    assert [list(launch) for launch in ks.launches] == [["threadIdx.x"], ["threadIdx.x"]]
    assert [kp.kind for kp in ks.params][-1] == "launch"
    assert render(K._parse(SYMBOLIC_SIBLINGS), "cuda").launches == ()  # one launch: no index


def test_other_loop_kinds_are_serial_on_the_device():
    text = source("dense_add_2d").replace("cuda.", "")
    assert "prange" not in text
    text = render(K.CASES_BY_NAME["csrmm"].func("cpu"), "cuda").source
    assert "for i in range(m):" in text


def test_scratch_memory_and_barriers():
    text = source("rowsum")
    assert "partial = cuda.shared.array(4, numba.float32)" in text and "cuda.syncthreads()" in text
    assert "row = 0  # local register" in source("sddmm")  # a one-element local buffer is a variable
    assert "cuda.atomic.add(S, J_indices[J_indptr[i] + j], A[J_indptr[i] + j])" in source("colsum")


def test_decorator_options():
    assert "@cuda.jit(cache=True)\n" in source("csrmm")
    assert "@cuda.jit(cache=True, fastmath=True, lineinfo=True)\n" in source("csrmm", fastmath=True, lineinfo=True)


# ----------------------------------------------------------------------------------------------
# What CUDA cannot run
# ----------------------------------------------------------------------------------------------

DATA_DEPENDENT_EXTENT = """
@T.prim_func
def f(a: T.handle, indptr: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    P = T.match_buffer(indptr, (m + 1,), "int32")
    for t in T.thread_binding(P[1], thread="threadIdx.x"):
        A[t] = T.float32(1)
"""

SYMBOLIC_SHARED = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    for i in T.thread_binding(m, thread="blockIdx.x"):
        tile = T.allocate((m,), "float32", "shared")
        for k in T.serial(m):
            tile[k] = A[k]
        A[i] = tile[i]
"""

GLOBAL_IN_KERNEL = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    for i in T.thread_binding(m, thread="blockIdx.x"):
        tmp = T.allocate((4,), "float32", "global")
        tmp[0] = A[i]
        A[i] = tmp[0]
"""

LOCAL_AT_FUNCTION_LEVEL = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    acc = T.alloc_buffer((4,), "float32", scope="local")
    for i in T.thread_binding(m, thread="blockIdx.x"):
        acc[0] = A[i]
        A[i] = acc[0]
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (DATA_DEPENDENT_EXTENT, "extent of loop `t` bound to threadIdx.x cannot be computed from the scalar"),
        (SYMBOLIC_SHARED, r"shared buffer `tile` has shape \(m\); CUDA shared arrays need a constant"),
        (GLOBAL_IN_KERNEL, "global buffer `tmp` is allocated inside the kernel"),
        (LOCAL_AT_FUNCTION_LEVEL, "function-level buffer `acc` has scope local"),
    ],
    ids=["data_dependent_extent", "symbolic_shared", "global_in_kernel", "local_at_function_level"],
)
def test_cuda_codegen_errors(text, message):
    func = K._parse(text)
    with pytest.raises(sp.CodegenError, match=message):
        render(func, "cuda")
    with pytest.raises(sp.CodegenError, match=message):
        _build(func, "cuda")


def test_bad_cuda_option():
    with pytest.raises(sp.CodegenError, match="unknown option `boundscheck` for target cuda"):
        render(K.CASES_BY_NAME["csrmm"].func("cuda"), "cuda", boundscheck=True)


# ----------------------------------------------------------------------------------------------
# Calling without and with a GPU
# ----------------------------------------------------------------------------------------------


def csrmm_args(A, feat=4, seed=0):
    kwargs, _ = K.CASES_BY_NAME["csrmm"].make_args(A, np.random.default_rng(seed), "int32", "float32", feat)
    return kwargs


def test_arguments_are_checked_before_any_device_work():
    kwargs = csrmm_args(K.random_csr(0, 6, 5, 0.4))
    kwargs["indices"] = kwargs["indices"].astype(np.int64)
    with pytest.raises(sp.InputError, match="`indices`.*int32"):
        K.build_case("csrmm", "cuda")(**kwargs)


def test_no_gpu_is_a_clear_error():
    if gpu_available():
        pytest.skip("a CUDA GPU is present")
    import numba

    if numba.config.ENABLE_CUDASIM:
        pytest.skip("the simulator is on")
    with pytest.raises(sp.SparseTIRError, match="no CUDA device is available.*NUMBA_ENABLE_CUDASIM"):
        K.build_case("csrmm", "cuda")(**csrmm_args(K.random_csr(0, 6, 5, 0.4)))


@needs_gpu
@pytest.mark.parametrize("name", CASE_NAMES)
def test_on_the_gpu(name):
    for A in [K.random_csr(0, 300, 200, 0.05), *K.small_matrices().values()]:
        K.run_case(K.build_case(name, "cuda"), K.CASES_BY_NAME[name], A, "int32", "float32")


@needs_gpu
def test_device_arrays_on_the_gpu():
    from numba import cuda

    A = K.random_csr(1, 300, 200, 0.05)
    kwargs = csrmm_args(A, feat=16)
    expected = A @ kwargs["b"]
    device = {k: cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    K.build_case("csrmm", "cuda")(**device)
    np.testing.assert_allclose(device["c"].copy_to_host(), expected, rtol=1e-4, atol=1e-4)
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    K.build_case("csrmm", "cuda")(**device)
    np.testing.assert_allclose(cupy.asnumpy(device["c"]), expected, rtol=1e-4, atol=1e-4)


def _build(func, target, **options):
    from sparsetir_py.runtime.build import build

    return build(func, target, cache_dir=K.kernel_cache_dir(), **options)


OFFSET_THREAD_LOOP = """
@T.prim_func
def f(a: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (8,), "float32")
    for t in T.thread_binding(2, 6, thread="threadIdx.x"):
        A[t] = T.float32(1)
"""

VTHREAD = """
@T.prim_func
def f(a: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (8,), "float32")
    for v in T.thread_binding(2, thread="vthread"):
        for t in T.thread_binding(4, thread="threadIdx.x"):
            A[v * 4 + t] = T.float32(1)
"""


def test_bound_loops_start_at_zero():
    func = sp.from_script("from sparsetir_py import script as T\n" + OFFSET_THREAD_LOOP)  # the verifier rejects it too
    with pytest.raises(sp.CodegenError, match="loop `t` bound to threadIdx.x must start at 0"):
        render(func, "cuda")


def test_virtual_threads_are_serial_loops():
    func = K._parse(VTHREAD)
    assert "for v in range(2):  # vthread: a serial loop\n        t = cuda.threadIdx.x" in render(func, "cuda").source
    assert (
        "for v in range(2):  # vthread: a serial loop\n        for t in range(4):  # threadIdx.x"
        in render(func, "cpu").source
    )


def _row_split_atomic_csrmm(sch: sp.Schedule) -> None:
    """Rows to blocks, each row's nonzeros across threadIdx.y with atomic adds, the init
    decomposed out of the reduction but left in the same launch (outside the thread loops)."""
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    block = sch.get_block("csrmm1")
    j, _ = sch.get_loops(block)
    sch.decompose_reduction(block, j)
    sch.annotate(block, "atomic", True)
    sch.bind(i, "blockIdx.x")
    _, j_inner = sch.split(j, [None, 4])
    sch.bind(j_inner, "threadIdx.y")


def test_init_and_atomic_adds_in_one_launch_without_a_barrier_is_an_error():
    mod = sp.lower_sparse_iter(sp.ops.spmm_script().specialize({"feat": 8}))
    sch = sp.Schedule(mod)
    _row_split_atomic_csrmm(sch)
    stage3 = sp.lower_sparse_buffer(sch.mod)
    with pytest.raises(sp.CodegenError, match="stores into `C` and adds into it atomically with no barrier"):
        render(stage3["main"], "cuda")
    render(stage3["main"], "cpu")  # one thread per row on the CPU: no such race


def test_init_and_atomic_adds_separated_by_a_barrier_are_accepted():
    text = """
from sparsetir_py import script as T


@T.prim_func
def f(a: T.handle, c: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (64,), "float32")
    C = T.match_buffer(c, (2,), "float32")
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            if tx == 0:
                C[bx] = T.float32(0)
        T.evaluate(T.syncthreads())
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            T.atomic_add(C[bx], A[bx * 32 + tx])
"""
    source = render(sp.from_script(text), "cuda").source
    assert "cuda.syncthreads()" in source and "cuda.atomic.add(C, bx, A[bx * 32 + tx_1])" in source
