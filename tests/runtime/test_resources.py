"""Build-time checks of what a CUDA kernel asks of the device (`runtime/resources.py`): the
limits Numba's simulator does not enforce. Each kernel here exceeds one limit and `sp.build`
raises a `CodegenError` naming it (the buffers and their bytes for memory); scratch that
compaction can shrink is shrunk instead; sizes known only from the arguments are checked at each
launch (`InputError`). Nothing here launches a kernel on a device.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.errors import CodegenError, InputError
from sparsetir_py.runtime import resources as R


@T.prim_func
def big_shared(x: T.handle):
    """Every block reads all of a 64 KiB shared table: nothing to compact."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (4,), "float32")
    S = T.allocate((16384,), "float32", "shared")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for k in T.serial(16384):
            S[k] = T.float32(1)
        X[bx] = S[bx * 4096]


def test_shared_memory_past_48_kib_is_refused():
    with pytest.raises(CodegenError, match=r"65536 bytes of static shared memory per block \(S: 65536 bytes\)"):
        sp.build(big_shared, "cuda")


@T.prim_func
def two_shared(x: T.handle):
    """Two 32 KiB tables: each fits, together they do not."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (4,), "float32")
    P = T.allocate((8192,), "float32", "shared")
    Q = T.allocate((8192,), "float32", "shared")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for k in T.serial(8192):
            P[k] = T.float32(1)
            Q[k] = T.float32(2)
        X[bx] = P[bx] + Q[bx * 2]


def test_shared_memory_adds_up_over_buffers():
    with pytest.raises(CodegenError, match=r"\(P: 32768 bytes, Q: 32768 bytes\); CUDA allows at most 49152"):
        sp.build(two_shared, "cuda")


@T.prim_func
def big_local(x: T.handle):
    """Each thread fills a 32 KiB local array and reads it all."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (32,), "float64")
    L = T.allocate((4096,), "float64", "local")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        for k in T.serial(4096):
            L[k] = T.float64(1)
        X[tx] = L[tx * 64]


def test_local_arrays_past_the_bound_are_refused():
    with pytest.raises(CodegenError, match=r"32768 bytes of local arrays per thread \(L: 32768 bytes\)"):
        sp.build(big_local, "cuda")
    assert R.MAX_LOCAL_BYTES == 16 * 1024


@T.prim_func
def compactable(x: T.handle):
    """A 64 KiB shared buffer of which each block touches one 256-element row."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (64, 256), "float32")
    S = T.allocate((64, 256), "float32", "shared")
    for bx in T.thread_binding(64, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            S[bx * 256 + tx] = T.float32(2)
            X[bx * 256 + tx] = S[bx * 256 + tx]


def test_scratch_that_compaction_shrinks_builds():
    kernel = sp.build(compactable, "cuda")
    assert kernel.resources.shared == (("S", 1024),)
    assert "cuda.shared.array(256," in kernel.source
    assert kernel.resources.threads_per_block == 256


@T.prim_func
def too_many_threads(x: T.handle):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (64, 32), "float32")
    for ty in T.thread_binding(64, thread="threadIdx.y"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            X[ty * 32 + tx] = T.float32(1)


def test_more_than_1024_threads_per_block_is_refused():
    with pytest.raises(CodegenError, match=r"blocks of 2048 threads \(threadIdx.x=32, threadIdx.y=64\)"):
        sp.build(too_many_threads, "cuda")


@T.prim_func
def deep_z(x: T.handle):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (128,), "float32")
    for tz in T.thread_binding(128, thread="threadIdx.z"):
        X[tz] = T.float32(1)


def test_block_dim_z_past_64_is_refused():
    with pytest.raises(CodegenError, match=r"128 along threadIdx.z \(blockDim.z\); CUDA allows at most 64"):
        sp.build(deep_z, "cuda")


@T.prim_func
def tall_grid(x: T.handle):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (70000,), "float32")
    for by in T.thread_binding(70000, thread="blockIdx.y"):
        X[by] = T.float32(1)


def test_grid_dim_y_past_65535_is_refused():
    with pytest.raises(CodegenError, match=r"70000 along blockIdx.y \(gridDim.y\); CUDA allows at most 65535"):
        sp.build(tall_grid, "cuda")


@T.prim_func
def grid_from_argument(x: T.handle, n: T.int32):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (n,), "float32")
    for bz in T.thread_binding(n, thread="blockIdx.z"):
        X[bz] = T.float32(1)


def test_launch_sizes_from_arguments_are_checked_at_launch():
    """gridDim.z comes from `n`: the build passes, a launch past 65535 is an InputError (raised
    before any device is touched)."""
    kernel = sp.build(grid_from_argument, "cuda")
    assert dict(kernel.resources.dims) == {"blockIdx.z": None}
    with pytest.raises(InputError, match=r"70000 along blockIdx.z is past CUDA's limit of 65535"):
        kernel(x=np.zeros(70000, np.float32), n=70000)


def test_resources_of_a_shipped_schedule_and_their_display():
    """CSR SpMM with the shipped CUDA schedule: no shared memory, its block size, in the HTML."""
    from schedules.spmm import SCHEDULES
    from sparsetir_py.ops import spmm_script

    kernel = sp.compile(spmm_script(), "cuda", schedule=SCHEDULES["csr_cuda_rows"], specialize={"feat": 64})
    res = kernel.resources
    assert res.shared_bytes == 0 and res.threads_per_block is not None and 1 <= res.threads_per_block <= 1024
    html = kernel._repr_html_()
    assert "shared memory per block" in html and "threads per block" in html and "49152 B" in html
    assert "threads per block" in str(res)
    assert sp.compile(spmm_script(), "cpu").resources is None
