"""The CPU backend: hand-written Stage III kernels run against numpy, and the CPU rendering rules.

Kernels are built with `boundscheck=True`, so an access the IR does not guard raises instead
of reading garbage (that is how the lazy Select and the short-circuit `and` of `lookup` are
checked). Outputs start as NaN, so an element a kernel forgets to write fails the comparison.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import stage3_kernels as K

import sparsetir_py as sp
from sparsetir_py.codegen import render
from sparsetir_py.data import load_matrix

CASE_NAMES = [case.name for case in K.CASES]
SPARSE_CASES = [name for name in CASE_NAMES if name not in ("dense_add_2d", "math_ops")]


@functools.cache
def shipped(name: str, idtype: str = "int32", dtype: str = "float32"):
    return load_matrix(name, dtype=np.dtype(dtype), index_dtype=np.dtype(idtype))


def run(name: str, A, idtype: str = "int32", dtype: str = "float32", **kw) -> None:
    K.run_case(K.build_case(name, "cpu", idtype, dtype), K.CASES_BY_NAME[name], A, idtype, dtype, **kw)


# ----------------------------------------------------------------------------------------------
# Kernels against numpy
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_NAMES)
def test_random_matrix_with_empty_rows(name):
    run(name, K.random_csr(0, 64, 48, 0.12))


@pytest.mark.parametrize("matrix", ["karate", "cora", "citeseer", "Erdos971", "lp_afiro"])
@pytest.mark.parametrize("name", SPARSE_CASES)
def test_shipped_matrices(name, matrix):
    """Erdos971 has empty rows, lp_afiro is rectangular."""
    run(name, shipped(matrix), feat=8)


@pytest.mark.parametrize("matrix", ["empty", "dense_row"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_edge_matrices(name, matrix):
    """Zero nnz (every row empty) and a matrix whose only stored row is full."""
    run(name, K.small_matrices()[matrix])


@pytest.mark.parametrize(
    ("name", "idtype", "dtype"),
    [
        ("csrmm", "int64", "float64"),
        ("csrmm", "int64", "float32"),
        ("csrmm", "int32", "float64"),
        ("sddmm", "int64", "float64"),
        ("lookup", "int64", "float64"),
        ("math_ops", "int64", "float64"),
    ],
)
def test_index_and_value_dtypes(name, idtype, dtype):
    run(name, K.random_csr(3, 50, 70, 0.1, idtype, dtype), idtype, dtype)
    run(name, shipped("karate", idtype, dtype), idtype, dtype)


def test_zero_feature_width():
    run("csrmm", K.random_csr(5, 9, 9, 0.3), feat=0)


def test_atomic_adds_from_parallel_rows_are_not_lost():
    """Every row of a matrix with all-equal columns adds into the same few elements of `s`."""
    import scipy.sparse

    m = 20000
    A = scipy.sparse.csr_matrix((np.ones(4 * m), np.tile([0, 1, 2, 3], m), np.arange(0, 4 * m + 1, 4)), shape=(m, 4))
    run("colsum", K.prepare_csr(A))


def test_atomic_adds_compile_to_atomic_instructions():
    """Lost updates are too rare to observe on two cores, so look at the optimised LLVM IR: the
    int32 add is an `atomicrmw add`, the float32 one a compare-and-swap loop (x86 has no float
    atomic add)."""
    kernel = K.build_case("colsum", "cpu")
    run("colsum", K.random_csr(2, 8, 8, 0.3))
    llvm = "\n".join(kernel._fn.inspect_llvm().values())
    assert re.search(r"atomicrmw add ptr [^,]+, i32 1 monotonic", llvm)
    assert re.search(r"cmpxchg ptr [^,]+, i32 [^,]+, i32 [^,]+ monotonic", llvm)


def test_lazy_select_never_reads_the_other_branch():
    """The last row's query lies past its last entry: the search ends at nnz, and `A[nnz]` is only
    in the branch not taken (boundscheck would raise otherwise)."""
    A = K.prepare_csr(np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 0.0]]))
    kernel = K.build_case("lookup", "cpu")
    out = np.full(2, np.nan, np.float32)
    kernel(a=A.data, q=np.array([1, 2], np.int32), out=out, indptr=A.indptr, indices=A.indices, m=2, n=3, nnz=2)
    np.testing.assert_array_equal(out, [2.0, -1.0])


def test_kernel_takes_positional_and_keyword_arguments():
    A = K.random_csr(7, 10, 8, 0.3)
    kernel = K.build_case("csrmm", "cpu")
    b = np.random.default_rng(0).random((8, 3), dtype=np.float32)
    c1, c2 = np.zeros((10, 3), np.float32), np.zeros((10, 3), np.float32)
    kernel(A.data, b, c1, A.indptr, A.indices, 10, 8, 3, A.nnz)
    kernel(A.data, b, c2, A.indptr, A.indices, m=10, n=8, feat=3, nnz=A.nnz)
    np.testing.assert_allclose(c1, A @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(c1, c2)


def test_flat_arguments_are_accepted():
    """A dense buffer's argument may be its logical shape or the same data flattened."""
    A = K.random_csr(8, 6, 5, 0.4)
    b = np.random.default_rng(1).random((5, 2), dtype=np.float32)
    c = np.zeros(12, np.float32)
    K.build_case("csrmm", "cpu")(
        a=A.data, b=b.ravel(), c=c, indptr=A.indptr, indices=A.indices, m=6, n=5, feat=2, nnz=A.nnz
    )
    np.testing.assert_allclose(c.reshape(6, 2), A @ b, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# CPU rendering rules
# ----------------------------------------------------------------------------------------------


def source(name: str, **options) -> str:
    return render(K.CASES_BY_NAME[name].func("cpu"), "cpu", **options).source


def test_parallel_loops_become_prange_and_thread_loops_serial():
    text = render(K.CASES_BY_NAME["rowsum"].func("cuda"), "cpu").source
    assert "for i in numba.prange(m):  # blockIdx.x" in text
    assert "for t in range(4):  # threadIdx.x" in text
    assert "pass  # T.syncthreads(): the thread loops before it have finished" in text
    assert "for i in numba.prange(m):\n" in source("csrmm")


def test_vectorized_loops_are_plain_loops_with_a_comment():
    assert "for ji in range(3):  # vectorized: a plain loop, LLVM vectorises it" in source("dense_add_2d")


def test_decorator_and_fastmath():
    text = source("csrmm")
    decorator = next(line for line in text.splitlines() if line.startswith("@"))
    assert decorator == (
        '@numba.njit(parallel=True, fastmath={"contract", "reassoc"}, error_model="numpy", boundscheck=False, '
        "cache=True)"
    )
    assert "nnan" not in text and "ninf" not in text
    assert 'fastmath=False, error_model="numpy", boundscheck=True' in source("csrmm", fastmath=False, boundscheck=True)
    assert 'fastmath={"nsz", "reassoc"}' in source("csrmm", fastmath={"reassoc", "nsz"})


def test_no_parallel_flag_without_a_parallel_loop():
    """Numba warns about parallel=True on a function without prange."""
    func = K.CASES_BY_NAME["csrmm"].func("cpu")
    loop = func.body
    serial = func.replace(body=loop.replace(kind="serial"))
    assert "@numba.njit(parallel=False," in render(serial, "cpu").source


def test_header_names_the_function_and_target():
    first = source("sddmm").splitlines()[0]
    assert "`sddmm`" in first and '"cpu"' in first


def test_floats_keep_their_precision():
    text = source("ewise")
    assert "np.float32(3.0)" in text and "np.float32(i)" in text
    text64 = render(K.CASES_BY_NAME["ewise"].func("cpu", "int32", "float64"), "cpu").source
    # float64 constants are literals; flat offsets are unsigned (no wraparound)
    assert "np.float32" not in text64 and "A[np.uint64(J_indptr[np.uint64(i)] + j)] * 3.0" in text64


def test_names_clear_of_python_and_imports():
    """IR names that are Python builtins, keywords or imported modules are renamed."""
    text = """
@T.prim_func
def f(a: T.handle, np: T.int32, math: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (np,), "int32")
    for range in T.parallel(np):
        A[range] = range * math
"""
    func = K._parse(text)
    ks = render(func, "cpu")
    assert "def f(A, np_, math_):" in ks.source and "for range_ in numba.prange(np_):" in ks.source
    out = np.zeros(5, np.int32)
    sp_build(func)(a=out, np=5, math=3)
    np.testing.assert_array_equal(out, np.arange(5) * 3)


def sp_build(func, target="cpu", **options):
    from sparsetir_py.runtime.build import build

    return build(func, target, cache_dir=K.kernel_cache_dir(), **options)


BARRIER_IN_THREAD_LOOP = """
@T.prim_func
def f(a: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (32,), "float32")
    for t in T.thread_binding(32, thread="threadIdx.x"):
        A[t] = T.float32(1)
        T.syncthreads()
        A[t] = A[31 - t]
"""

LOCAL_OUTSIDE_PARALLEL = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    acc = T.allocate((1,), "float32", "local")
    for i in T.parallel(m):
        acc[0] = T.float32(i)
        A[i] = acc[0]
"""

SHARED_OUTSIDE_BLOCKS = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    tile = T.allocate((4,), "float32", "shared")
    for i in T.thread_binding(m, thread="blockIdx.x"):
        for t in T.thread_binding(4, thread="threadIdx.x"):
            tile[t] = A[i]
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BARRIER_IN_THREAD_LOOP, r"T.syncthreads\(\) inside loop `t` bound to threadIdx.x"),
        (LOCAL_OUTSIDE_PARALLEL, r"local buffer `acc` is allocated outside loop `i` \(parallel\)"),
        (SHARED_OUTSIDE_BLOCKS, r"shared buffer `tile` is allocated outside loop `i` \(blockIdx.x\)"),
    ],
    ids=["barrier_in_thread_loop", "local_outside_parallel", "shared_outside_blocks"],
)
def test_cpu_rejects_what_serial_threads_cannot_honour(text, message):
    with pytest.raises(sp.CodegenError, match=message):
        render(K._parse(text), "cpu")


def test_local_inside_the_parallel_loop_is_fine():
    text = LOCAL_OUTSIDE_PARALLEL.replace('    acc = T.allocate((1,), "float32", "local")\n', "").replace(
        "        acc[0] = T.float32(i)",
        '        acc = T.allocate((1,), "float32", "local")\n        acc[0] = T.float32(i)',
    )
    out = np.zeros(6, np.float32)
    sp_build(K._parse(text))(a=out, m=6)
    np.testing.assert_array_equal(out, np.arange(6))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fast": True}, "unknown option `fast` for target cpu"),
        ({"fastmath": {"reassoc", "turbo"}}, "unknown fastmath flag 'turbo'"),
        ({"parallel": "yes"}, "option `parallel` must be True or False"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(sp.CodegenError, match=message):
        render(K.CASES_BY_NAME["csrmm"].func("cpu"), "cpu", **options)
