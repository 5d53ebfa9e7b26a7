"""compact_buffers: local/shared scratch shrinks to the region one instance accesses.

IR before/after with structural equality (CUDA and CPU rules, function-level local scratch moved
into the kernel), the cases the pass must leave alone, and kernels run against `sp.interpret`
on the CPU and in the CUDA simulator (a subprocess: NUMBA_ENABLE_CUDASIM must be set before
numba.cuda is imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import numpy as np
import pytest

import sparsetir_py as sp
from sparsetir_py.transform import compact_buffers

HEADER = "from sparsetir_py import script as T\n\n"

# Each thread (bx, ty, tx) touches one element of `acc`, function-level local scratch.
REGISTER_BEFORE = """
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m * 128,), "float32")
    C = T.match_buffer(c, (m * 4,), "float32")
    acc = T.alloc_buffer((m * 128,), "float32", scope="local")
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        for ty in T.thread_binding(4, thread="threadIdx.y"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                acc[(bx * 4 + ty) * 32 + tx] = A[(bx * 4 + ty) * 32 + tx]
                acc[(bx * 4 + ty) * 32 + tx] = acc[(bx * 4 + ty) * 32 + tx] * T.float32(2)
            for lane in T.thread_binding(32, thread="threadIdx.x"):
                if lane == 0:
                    C[bx * 4 + ty] = acc[(bx * 4 + ty) * 32 + lane]
"""
REGISTER_AFTER = """
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m * 128,), "float32")
    C = T.match_buffer(c, (m * 4,), "float32")
    acc = T.allocate((1,), "float32", "local")
    acc[0] = T.float32(0)
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        for ty in T.thread_binding(4, thread="threadIdx.y"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                acc[0] = A[(bx * 4 + ty) * 32 + tx]
                acc[0] = acc[0] * T.float32(2)
            for lane in T.thread_binding(32, thread="threadIdx.x"):
                if lane == 0:
                    C[bx * 4 + ty] = acc[0]
"""

# A row's scratch, sized for every row, allocated in the row's block.
ROW_BEFORE = """
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m * 8,), "float32")
    C = T.match_buffer(c, (m,), "float32")
    for i in T.parallel(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            tmp = T.alloc_buffer((m * 8,), "float32", scope="local")
            for k in T.serial(8):
                with T.block("fill"):
                    vk = T.axis.spatial(8, k)
                    tmp[vi * 8 + vk] = A[vi * 8 + vk] * T.float32(2)
            for k in T.serial(8):
                with T.block("sum"):
                    vk = T.axis.reduce(8, k)
                    with T.init():
                        C[vi] = T.float32(0)
                    C[vi] = C[vi] + tmp[vi * 8 + 7 - vk] * T.cast(vk, "float32")
"""
ROW_AFTER = """
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m * 8,), "float32")
    C = T.match_buffer(c, (m,), "float32")
    for i in T.parallel(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            tmp = T.alloc_buffer((8,), "float32", scope="local")
            for k in T.serial(8):
                with T.block("fill"):
                    vk = T.axis.spatial(8, k)
                    tmp[vk] = A[vi * 8 + vk] * T.float32(2)
            for k in T.serial(8):
                with T.block("sum"):
                    vk = T.axis.reduce(8, k)
                    with T.init():
                        C[vi] = T.float32(0)
                    C[vi] = C[vi] + tmp[7 - vk] * T.cast(vk, "float32")
"""

# A thread block's tile, sized for every block: threadIdx ranges over the launch for `shared`.
SHARED_BEFORE = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m * 32,), "float32")
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        tile = T.allocate((m * 32,), "float32", "shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            tile[bx * 32 + tx] = A[bx * 32 + tx]
        T.evaluate(T.syncthreads())
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            A[bx * 32 + tx] = tile[bx * 32 + 31 - tx]
"""
SHARED_AFTER = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m * 32,), "float32")
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        tile = T.allocate((32,), "float32", "shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            tile[tx] = A[bx * 32 + tx]
        T.evaluate(T.syncthreads())
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            A[bx * 32 + tx] = tile[31 - tx]
"""

# Scratch indexed by the thread: per-thread on CUDA (local), one array the loop walks on the CPU.
PER_THREAD_BEFORE = """
@T.prim_func
def f(a: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (32,), "float32")
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        t = T.allocate((32,), "float32", "local")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            t[tx] = A[tx] + T.float32(1)
            A[tx] = t[tx] * t[tx]
"""
PER_THREAD_AFTER_CUDA = """
@T.prim_func
def f(a: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (32,), "float32")
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        t = T.allocate((1,), "float32", "local")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            t[0] = A[tx] + T.float32(1)
            A[tx] = t[0] * t[0]
"""


def parse(text: str) -> sp.ir.PrimFunc:
    f = sp.from_script(HEADER + textwrap.dedent(text))
    sp.verify(f)
    return f


@pytest.mark.parametrize(
    ("before", "after", "target"),
    [
        (REGISTER_BEFORE, REGISTER_AFTER, "cuda"),
        (ROW_BEFORE, ROW_AFTER, "cpu"),
        (ROW_BEFORE, ROW_AFTER, "cuda"),
        (SHARED_BEFORE, SHARED_AFTER, "cuda"),
        (PER_THREAD_BEFORE, PER_THREAD_AFTER_CUDA, "cuda"),
        (PER_THREAD_BEFORE, PER_THREAD_BEFORE, "cpu"),
    ],
    ids=["cuda_function_level_register", "cpu_row", "cuda_row", "cuda_shared_tile", "cuda_per_thread", "cpu_loop"],
)
def test_compaction(before, after, target):
    """The scratch buffer gets the extent one instance touches and offsets from its start."""
    out = compact_buffers(parse(before), target)["main"]
    sp.verify(out)
    assert sp.structural_equal(out, parse(after)), out.script()
    assert sp.structural_equal(sp.from_script(out.script()), out)


# Cases the pass cannot prove: the buffer must stay as it was.
INDEX_FROM_MEMORY = """
@T.prim_func
def f(a: T.handle, j: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    J = T.match_buffer(j, (m,), "int32")
    for i in T.parallel(m):
        tmp = T.allocate((m,), "float32", "local")
        tmp[J[i]] = A[i]
        A[i] = tmp[J[i]]
"""
SYMBOLIC_EXTENT = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    for i in T.parallel(m):
        tmp = T.allocate((m,), "float32", "local")
        for k in T.serial(m):
            tmp[k] = A[k]
        A[i] = tmp[i]
"""
SEARCHED = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "int32")
    for i in T.parallel(m):
        tmp = T.allocate((m * 4,), "int32", "local")
        for k in T.serial(4):
            tmp[i * 4 + k] = k
        A[i] = T.lower_bound(tmp, i * 4, i * 4 + 4, 2)
"""
SHARED_BY_THREADS = """
@T.prim_func
def f(a: T.handle, m: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m,), "float32")
    acc = T.alloc_buffer((4,), "float32", scope="local")
    for i in T.thread_binding(m, thread="blockIdx.x"):
        acc[0] = A[i]
        A[i] = acc[0]
"""
NEIGHBOUR_THREAD = """
@T.prim_func
def f(a: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (32,), "float32")
    acc = T.alloc_buffer((33,), "float32", scope="local")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        acc[tx] = A[tx]
        A[tx] = acc[tx + 1]
"""

# Per-thread, but written in one launch and read in the next: local memory dies with its launch.
ACROSS_LAUNCHES = """
@T.prim_func
def f(a: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (32,), "float32")
    acc = T.alloc_buffer((32,), "float32", scope="local")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        acc[tx] = A[tx]
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        A[tx] = acc[tx] * T.float32(2)
"""


@pytest.mark.parametrize(
    ("text", "target"),
    [
        (ACROSS_LAUNCHES, "cuda"),
        (INDEX_FROM_MEMORY, "cpu"),
        (SYMBOLIC_EXTENT, "cpu"),
        (SEARCHED, "cpu"),
        (SHARED_BY_THREADS, "cuda"),
        (NEIGHBOUR_THREAD, "cuda"),
        (REGISTER_BEFORE, "cpu"),
    ],
    ids=[
        "used_by_two_launches",
        "index_from_memory",
        "symbolic_extent",
        "searched_by_lower_bound",
        "function_level_shared_by_blocks",
        "function_level_read_of_another_thread",
        "function_level_on_cpu",
    ],
)
def test_left_alone(text, target):
    """Indices that read memory, extents that are not constants, buffers passed to a search,
    function-level scratch that threads share (or on the CPU): nothing changes."""
    f = parse(text)
    assert sp.structural_equal(compact_buffers(f, target)["main"], f)


def test_build_renders_what_it_is_given(tmp_path):
    """`sp.build` runs no pass: the function-level scratch keeps its whole size there, and
    compaction is a line of `sp.compile`'s pipeline (driver.py)."""
    kern = sp.build(parse(ROW_BEFORE), "cpu", cache_dir=tmp_path)
    assert "np.zeros(8, " not in kern.source and "stack_zeros(8, " not in kern.source
    with pytest.raises(sp.CodegenError, match="compact_buffers"):
        sp.build(parse(REGISTER_BEFORE), "cuda", cache_dir=tmp_path)


def test_compacted_kernel_on_the_cpu(tmp_path):
    """The CPU kernel allocates the row's 8 elements (a constant size: on the stack), and computes
    what the interpreter does."""
    f = parse(ROW_BEFORE)
    kern = sp.build(compact_buffers(f, "cpu"), "cpu", cache_dir=tmp_path)
    assert "stack_zeros(8, np.float32)" in kern.source
    m = 5
    A = np.random.default_rng(0).standard_normal(m * 8).astype(np.float32)
    got, want = np.full(m, np.nan, np.float32), np.full(m, np.nan, np.float32)
    kern(a=A, c=got, m=m)
    sp.interpret(f, a=A, c=want, m=m)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_function_level_local_moves_into_the_cuda_kernel(tmp_path):
    kern = sp.build(compact_buffers(parse(REGISTER_BEFORE), "cuda"), "cuda", cache_dir=tmp_path)
    assert "acc = np.float32(0.0)  # local register" in kern.source
    assert "def f(A, C, m):" in kern.source  # no longer a parameter the runtime allocates
    assert ".visible .entry" in kern.ptx(cc=(8, 0))


SIMULATOR_DRIVER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sparsetir_py as sp
    from sparsetir_py.data import load_matrix
    from sparsetir_py.ops import sddmm_script
    from sparsetir_py.transform import compact_buffers
    sys.path.insert(0, {here!r})
    from test_compact_buffers import REGISTER_BEFORE, SHARED_BEFORE, PER_THREAD_BEFORE, parse
    sys.path.insert(0, {root!r})
    from schedules.sddmm import csr_cuda_fused_rfactor
    rng = np.random.default_rng(0)
    out = {{}}
    m = 2
    f = parse(REGISTER_BEFORE)
    A = rng.standard_normal(m * 128).astype(np.float32)
    got, want = np.full(m * 4, np.nan, np.float32), np.full(m * 4, np.nan, np.float32)
    sp.build(compact_buffers(f, "cuda"), "cuda")(a=A, c=got, m=m)
    sp.interpret(f, a=A, c=want, m=m)
    out["register"] = float(np.abs(got - want).max())
    f = parse(SHARED_BEFORE)
    A = rng.standard_normal(m * 32).astype(np.float32)
    got, want = A.copy(), A.copy()
    sp.build(compact_buffers(f, "cuda"), "cuda")(a=got, m=m)
    sp.interpret(f, a=want, m=m)
    out["shared"] = float(np.abs(got - want).max())
    f = parse(PER_THREAD_BEFORE)
    A = rng.standard_normal(32).astype(np.float32)
    got, want = A.copy(), A.copy()
    sp.build(compact_buffers(f, "cuda"), "cuda")(a=got)
    sp.interpret(f, a=want)
    out["per_thread"] = float(np.abs(got - want).max())
    S = load_matrix("karate")
    for feat in (5, 40):
        kern = sp.compile(sddmm_script(), "cuda", schedule=csr_cuda_fused_rfactor, specialize={{"feat": feat}})
        X = rng.standard_normal((S.shape[0], feat)).astype(np.float32)
        Y = rng.standard_normal((S.shape[1], feat)).astype(np.float32)
        args = dict(x=X, y=Y, indptr=S.indptr, indices=S.indices, m=S.shape[0], n=S.shape[1], nnz=S.nnz)
        got, want = np.full(S.nnz, np.nan, np.float32), np.full(S.nnz, np.nan, np.float32)
        kern(a=S.data, c=got, **args)
        sp.interpret(sddmm_script().specialize({{"feat": feat}}), a=S.data, c=want, **args)
        out[f"sddmm_rfactor_{{feat}}"] = float(np.abs(got - want).max())
        out[f"sddmm_rfactor_register_{{feat}}"] = "C_rf = np.float32(0.0)  # local register" in kern.source
    print(json.dumps(out))
    """
)


def test_compacted_kernels_in_the_cuda_simulator():
    from cuda_support import simulator_argv  # here: the driver imports this file, without tests/ on its path

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run(
        simulator_argv("-c", SIMULATOR_DRIVER.format(here=here, root=root)),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=here,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == {
        "register",
        "shared",
        "per_thread",
        "sddmm_rfactor_5",
        "sddmm_rfactor_40",
        "sddmm_rfactor_register_5",
        "sddmm_rfactor_register_40",
    }
    for name, value in results.items():
        if isinstance(value, bool):
            assert value, name
        else:
            assert value < 1e-4, (name, value)


MOVED_AROUND_ITS_LAUNCH = """
@T.prim_func
def f(a: T.handle, b: T.handle):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (32,), "float32")
    B = T.match_buffer(b, (64,), "float32")
    acc = T.alloc_buffer((32,), "float32", scope="local")
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            B[bx * 32 + tx] = T.float32(1)
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        acc[tx] = A[tx]
        A[tx] = acc[tx] * B[tx]
"""


def test_a_moved_local_wraps_only_the_statement_that_uses_it():
    """The launch split (one launch per top-level statement with bound loops) must still see
    both statements after the buffer moves into the kernel: the allocation wraps the second only."""
    from sparsetir_py.ir.launch import split_launches

    out = compact_buffers(parse(MOVED_AROUND_ITS_LAUNCH), "cuda")["main"]
    assert [b.name for b in out.buffers if b.data is None] == []
    assert len(split_launches(out.body)) == 2
    first, second = out.body.stmts
    assert isinstance(second, sp.ir.Allocate) and second.buffer.shape[0].value == 1
    assert not isinstance(first, sp.ir.Allocate)
