"""Run the CUDA kernels of the code generator's tests in Numba's CUDA simulator.

`NUMBA_ENABLE_CUDASIM=1` only takes effect if it is set before `numba.cuda` is first imported,
and the PTX tests need the real numba-cuda, so the simulator runs in its own process:
`test_codegen_cudasim.py` starts this script once and checks each entry of the JSON it writes.

    python cudasim_driver.py RESULTS.json [CACHE_DIR]

Every check is recorded as "ok" or as the formatted traceback of its failure. Inputs are tiny:
the simulator runs each CUDA thread as a Python thread (about 0.15 ms per thread).
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import numpy as np  # noqa: E402
import stage3_kernels as K  # noqa: E402

import sparsetir_py as sp  # noqa: E402
from sparsetir_py.runtime.build import build  # noqa: E402

CHECKS: dict[str, Callable[[], None]] = {}


def check(name: str):
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        CHECKS[name] = fn
        return fn

    return register


def cuda_kernel(name: str, idtype: str = "int32", dtype: str = "float32"):
    return K.build_case(name, "cuda", idtype, dtype)


def register_cases() -> None:
    for case in K.CASES:
        for matrix_name, A in K.small_matrices().items():

            def run(case=case, A=A):
                K.run_case(cuda_kernel(case.name), case, A, "int32", "float32")

            CHECKS[f"{case.name}/{matrix_name}"] = run
    for name, idtype, dtype in [
        ("csrmm", "int64", "float64"),
        ("sddmm", "int64", "float64"),
        ("lookup", "int64", "float32"),
        ("math_ops", "int32", "float64"),
    ]:

        def run_dtypes(name=name, idtype=idtype, dtype=dtype):
            A = K.small_matrices(idtype, dtype)["random"]
            K.run_case(cuda_kernel(name, idtype, dtype), K.CASES_BY_NAME[name], A, idtype, dtype)

        CHECKS[f"{name}/{idtype}-{dtype}"] = run_dtypes


@check("launch/csrmm")
def _launch_csrmm() -> None:
    assert cuda_kernel("csrmm").launch_config(m=7, feat=4) == ((7,), (4,))


@check("launch/no_rows")
def _launch_no_rows() -> None:
    # m = 0: an empty grid is not launched at all (CUDA rejects a zero-sized grid).
    A = K.prepare_csr(np.zeros((0, 3)))
    K.run_case(cuda_kernel("csrmm"), K.CASES_BY_NAME["csrmm"], A, "int32", "float32")


@check("device_arrays/csrmm")
def _device_arrays() -> None:
    from numba import cuda

    A = K.small_matrices()["random"]
    kwargs, _ = K.CASES_BY_NAME["csrmm"].make_args(A, np.random.default_rng(0), "int32", "float32", 4)
    expected = K.CASES_BY_NAME["csrmm"].reference(A, kwargs)["c"]
    device = {k: cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    for check_structure in (True, False):
        cuda_kernel("csrmm")(**device, check_structure=check_structure)
        np.testing.assert_allclose(device["c"].copy_to_host(), expected, rtol=1e-5, atol=1e-5)


@check("device_arrays/bad_indptr")
def _device_bad_indptr() -> None:
    from numba import cuda

    A = K.small_matrices()["random"]
    kwargs, _ = K.CASES_BY_NAME["csrmm"].make_args(A, np.random.default_rng(0), "int32", "float32", 4)
    kwargs["indptr"] = kwargs["indptr"].copy()
    kwargs["indptr"][0] = 1
    device = {k: cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    try:
        cuda_kernel("csrmm")(**device)
    except sp.InputError as e:
        assert "indptr" in str(e) and "start at 0" in str(e), e
    else:
        raise AssertionError("a device indptr not starting at 0 was accepted")


@check("device_arrays/wrong_shape")
def _device_wrong_shape() -> None:
    from numba import cuda

    A = K.small_matrices()["random"]
    kwargs, _ = K.CASES_BY_NAME["csrmm"].make_args(A, np.random.default_rng(0), "int32", "float32", 4)
    kwargs["b"] = cuda.to_device(kwargs["b"][:, :2].copy())
    try:
        cuda_kernel("csrmm")(**kwargs, check_structure=False)
    except sp.InputError as e:
        assert "`b`" in str(e) and "shape" in str(e), e
    else:
        raise AssertionError("a device array of the wrong shape was accepted")


@check("input_error/numpy_dtype")
def _numpy_dtype() -> None:
    A = K.small_matrices()["random"]
    kwargs, _ = K.CASES_BY_NAME["csrmm"].make_args(A, np.random.default_rng(0), "int32", "float32", 4)
    kwargs["b"] = kwargs["b"].astype(np.float64)
    try:
        cuda_kernel("csrmm")(**kwargs)
    except sp.InputError as e:
        assert "`b`" in str(e) and "float32" in str(e), e
    else:
        raise AssertionError("a float64 array was accepted for a float32 buffer")


OUT_OF_BOUNDS = """
@T.prim_func
def oob(a: T.handle, b: T.handle, n: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for t in T.thread_binding(n, thread="threadIdx.x"):
        B[t] = A[t + 1]
"""


@check("traceback/out_of_bounds")
def _traceback() -> None:
    kernel = build(K._parse(OUT_OF_BOUNDS), "cuda", cache_dir=K.kernel_cache_dir())
    try:
        kernel(a=np.ones(3, np.float32), b=np.zeros(3, np.float32), n=3)
    except IndexError:
        text = traceback.format_exc()
        assert str(kernel.path) in text and "B[t] = A[t + 1]" in text, text
    else:
        raise AssertionError("an out-of-bounds read was not reported")


SIBLINGS = """
@T.prim_func
def siblings(a: T.handle, b: T.handle, n: T.int32, k: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (k,), "float32")
    for t in T.thread_binding(n, thread="threadIdx.x"):
        A[t] = T.float32(t)
    for u in T.thread_binding(k, thread="threadIdx.x"):
        B[u] = T.float32(u) * T.float32(2)
"""


@check("guards/sibling_thread_loops")
def _siblings() -> None:
    # Launched with max(n, k) threads: without the guards the shorter loop writes out of bounds.
    kernel = build(K._parse(SIBLINGS), "cuda", cache_dir=K.kernel_cache_dir())
    for n, k in [(3, 5), (5, 3)]:
        a, b = np.full(n, np.nan, np.float32), np.full(k, np.nan, np.float32)
        kernel(a=a, b=b, n=n, k=k)
        np.testing.assert_array_equal(a, np.arange(n))
        np.testing.assert_array_equal(b, np.arange(k) * 2)


def register_corpus() -> None:
    import corpus

    from sparsetir_py.data import load_matrix

    A0 = load_matrix("karate")
    for case in corpus.CASES:

        def run(case=case):
            A = corpus.prepare_csr(A0, "int32", "float32")
            mod = sp.lower_sparse_buffer(sp.lower_sparse_iter(case.build("int32", "float32")))
            kernel = build(mod, "cuda", cache_dir=K.kernel_cache_dir())
            kwargs, outputs = case.make_args(A, np.random.default_rng(0), "int32", "float32", feat=4)
            scalars = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)}
            assert kernel.launch_config(**scalars) == ((1,), (1,))  # unscheduled: one thread
            expected = case.reference(A, kwargs)
            kernel(**kwargs)
            for name in outputs:
                np.testing.assert_allclose(kwargs[name], expected[name], rtol=1e-4, atol=1e-4, err_msg=name)

        CHECKS[f"corpus/{case.name}"] = run


def main() -> int:
    out = Path(sys.argv[1])
    if len(sys.argv) > 2:
        os.environ["SPARSETIR_CACHE_DIR"] = sys.argv[2]
    try:
        from numba import config, cuda  # noqa: F401

        assert config.ENABLE_CUDASIM
    except Exception:
        out.write_text(json.dumps({"__import__": traceback.format_exc()}))
        return 0
    register_cases()
    register_corpus()
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
