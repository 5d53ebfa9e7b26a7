"""SparseTIR's `test_horizontal_fuse` with its caches (`cached_fusion_case.py`): the two nests,
each with shared/local scratch that `cache_read`/`cache_write` allocated around the whole body,
fuse into one launch (blocks [0, 32) run the first, [32, 40) the second), each part keeps its own
scratch, compacted to what one block / thread touches (6 KiB of shared memory instead of 96), and
the sums are right in Numba's CUDA simulator. Also `sink_allocations` on a hand-written function
and a golden file of the fused source.
"""

from __future__ import annotations

import os
from pathlib import Path

import cached_fusion_case as case
import numpy as np
import pytest
from cuda_support import ptx_unavailable, simulated_run

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.ir.stmt import Allocate, For, IfThenElse

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "codegen" / "golden" / "cached_fusion.cuda.py.golden"
UPDATE = os.environ.get("SPARSETIR_UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def kernel():
    return case.fused_kernel()


def test_the_nests_fuse_into_one_grid_of_32_plus_8_blocks():
    """One blockIdx.x loop of 40 blocks: below 32 the first nest with its own scratch, else the
    second at block `bx - 32` with its own."""
    (func,) = sp.horizontal_fusion(case.unfused()).functions.values()
    loop = func.body
    assert isinstance(loop, For) and loop.thread == "blockIdx.x" and loop.extent.value == 40
    branch = loop.body
    assert isinstance(branch, IfThenElse) and sp.ir.printer.script(func).count("bx_fused < 32") == 1

    def scratch(s):
        names = []
        while isinstance(s, Allocate):
            names.append(s.buffer.name)
            s = s.body
        return sorted(names)

    assert scratch(branch.then_case) == ["A_shared", "C1_local"]
    assert scratch(branch.else_case) == ["B_shared", "C2_local"]
    assert "(bx_fused - 32) * 8" in sp.ir.printer.script(func)


def test_build_compacts_the_caches_to_fit(kernel):
    """The caches span whole inputs (64 + 32 KiB of shared memory, past the 48 KiB a block may
    declare); `build` shrinks each to what one block touches: 4 rows of A, 8 rows of B."""
    assert kernel.launch_configs() == [((40,), (1,))]
    res = kernel.resources
    assert dict(res.shared) == {"A_shared": 4 * 128 * 4, "B_shared": 8 * 128 * 4}
    assert dict(res.local) == {"C1_local": 16, "C2_local": 32}
    assert res.shared_bytes <= sp.runtime.resources.MAX_SHARED_BYTES
    assert res.threads_per_block == 1
    assert "shared memory per block" in kernel._repr_html_()


def test_without_fusion_each_nest_is_a_launch_with_its_own_scratch():
    kernel = sp.build(case.unfused(), "cuda")
    assert kernel.launch_configs() == [((32,), (1,)), ((8,), (1,))]
    assert kernel.resources.shared_bytes == 6144


def test_compile_runs_the_same_passes():
    """`sp.compile` with the schedule: sink_allocations, compact_buffers, then horizontal_fusion
    (the function is marked `horizontal_fuse`) give the same launch and scratch."""
    kernel = sp.compile(case.row_sums, "cuda", schedule=case.schedule)
    assert kernel.launch_configs() == [((40,), (1,))]
    assert kernel.resources.shared_bytes == 6144 and kernel.resources.local_bytes == 48


def test_sums_in_the_simulator(tmp_path_factory):
    info, out = simulated_run(tmp_path_factory, "cached_fusion", Path(case.__file__))
    args = case.inputs()
    np.testing.assert_allclose(out["c1"], args["a"].sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(out["c2"], args["b"].sum(axis=1), rtol=1e-5)
    assert info["launches"] == [[[40], [1]]] and info["shared"] == 6144


@pytest.mark.skipif(ptx_unavailable() is not None, reason=str(ptx_unavailable()))
def test_fused_kernel_compiles_to_ptx(kernel):
    ptx = kernel.ptx(cc=(8, 0))
    assert ".visible .entry" in ptx and ".shared" in ptx


def test_golden_fused_source(kernel):
    if UPDATE:
        GOLDEN.write_text(kernel.source)
    assert GOLDEN.is_file(), f"{GOLDEN.name} is missing: run with SPARSETIR_UPDATE_GOLDEN=1 to create it"
    assert kernel.source == GOLDEN.read_text(), f"the fused kernel differs from {GOLDEN.name}"


# -------------------------------------------------------------------- sink_allocations
@T.prim_func
def allocated_around_both(x: T.handle, y: T.handle):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (8,), "float32")
    Y = T.match_buffer(y, (8,), "float32")
    S = T.allocate((8,), "float32", "shared")
    L = T.allocate((8,), "float32", "local")
    for bx in T.thread_binding(8, thread="blockIdx.x"):
        S[bx] = T.float32(1)
        X[bx] = S[bx]
    for by in T.thread_binding(8, thread="blockIdx.x"):
        L[by] = T.float32(2)
        Y[by] = L[by]


@T.prim_func
def allocated_on_each(x: T.handle, y: T.handle):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (8,), "float32")
    Y = T.match_buffer(y, (8,), "float32")
    with T.allocate((8,), "float32", "shared") as S:
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            S[bx] = T.float32(1)
            X[bx] = S[bx]
    L = T.allocate((8,), "float32", "local")
    for by in T.thread_binding(8, thread="blockIdx.x"):
        L[by] = T.float32(2)
        Y[by] = L[by]


def test_sink_allocations_moves_each_buffer_onto_its_nest():
    """Each buffer goes onto the one statement that uses it; the sequence stays in order. An
    allocation that other statements follow prints as a `with T.allocate(...) as S:` scope (the
    assignment form covers the rest of its statement list) and parses back equal."""
    sunk = sp.transform.sink_allocations(allocated_around_both)["main"]
    sp.assert_structural_equal(sunk, allocated_on_each)
    assert 'with T.allocate((8,), "float32", "shared") as S:' in sunk.script()
    sp.assert_structural_equal(sp.from_script(sunk.script()), sunk)
    kernel = sp.build(sunk, "cuda")  # each nest a launch of its own, with its own buffer
    assert kernel.launch_configs() == [((8,), (1,)), ((8,), (1,))]
    assert kernel.resources.shared == (("S", 32),) and kernel.resources.local == (("L", 32),)


@T.prim_func
def used_by_both(x: T.handle):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (8,), "float32")
    S = T.allocate((8,), "float32", "local")
    for i in T.serial(8):
        S[i] = T.float32(1)
    for j in T.serial(8):
        X[j] = S[j]


def test_sink_allocations_keeps_a_buffer_two_statements_use():
    sp.assert_structural_equal(sp.transform.sink_allocations(used_by_both)["main"], used_by_both)
