"""`while` loops in Stage II/III scripts: a binary search, as SparseTIR's binary-search blocks write it.

The script densifies a CSR matrix: for every (row, column) it searches the row's sorted column
indices with a `while` loop whose state (`low`, `high`) lives in local buffers, then copies the
value it found (or 0). The same function goes through every layer: parsed and printed back
(Stages II and III), verified, interpreted (Stages II and III), rendered for the CPU (with and
without the Stage III passes `sp.compile` runs) and for CUDA (Numba's simulator, in a subprocess
this file drives when run as a script, and PTX where numba-cuda can compile it), and every result
is `A.toarray()`. A second spelling uses SparseTIR's own keywords (`extra_storage=`,
`T.assume_buffer_domain`, `strides=`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # strategies, cuda_support

import json
import traceback

import numpy as np
import pytest
import scipy.sparse
from cuda_support import ptx_unavailable, simulated_run  # noqa: F401 (ptx_unavailable: named in a skipif string)
from hypothesis import HealthCheck, given, settings
from strategies import csr_matrices, edge_matrices, make_csr

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py.data import load_matrix
from sparsetir_py.ir.visit import walk
from sparsetir_py.transform import compact_buffers, hoist_loop_invariants, promote_accumulators

# One thread block per row, one thread per column; on the CPU the rows are a parallel loop.
SEARCH = """
from sparsetir_py import script as T

@T.prim_func
def densify(a: T.handle, d: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m, "IDX")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "IDX")
    J_dense = T.dense_variable(I, (n, nnz), indptr, "IDX")
    A = T.match_sparse_buffer(a, (I, J), "VAL")
    D = T.match_buffer(d, (m, n), "VAL")
    J_indptr = T.match_buffer(indptr, (m + 1,), "IDX")
    J_indices = T.match_sparse_buffer(indices, (I, J_dense), "IDX")
    for i in T.thread_binding(m, thread="blockIdx.x"):
        for j in T.thread_binding(n, thread="threadIdx.x"):
            with T.block("search"):
                vi = T.axis.spatial(m, i)
                vj = T.axis.spatial(n, j)
                T.reads(J_indptr[vi:vi + 2], J_indices[vi, 0:n], A[vi, 0:n])
                T.writes(D[vi, vj])
                low = T.alloc_buffer((1,), "IDX", scope="local")
                high = T.alloc_buffer((1,), "IDX", scope="local")
                low[0] = T.IDX(0)
                high[0] = J_indptr[vi + 1] - J_indptr[vi]
                while low[0] < high[0]:
                    mid: T.IDX = low[0] + (high[0] - low[0]) // 2
                    if J_indices[vi, mid] < T.cast(vj, "IDX"):
                        low[0] = mid + 1
                    else:
                        high[0] = mid
                D[vi, vj] = T.VAL(0)
                if low[0] < J_indptr[vi + 1] - J_indptr[vi]:
                    if J_indices[vi, low[0]] == T.cast(vj, "IDX"):
                        D[vi, vj] = A[vi, low[0]]
"""

# The same search in SparseTIR's spelling: the indptr view is a sparse buffer over `[I]` with one
# extra element, value domains are assumed, local buffers carry `strides=[1]`, and `mid` is a
# buffer of the function (SparseTIR's `mid_0`), updated inside the loop.
SPARSETIR_SPELLING = """
from sparsetir_py import script as T

@T.prim_func
def densify(a: T.handle, d: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m, "IDX")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "IDX")
    J_dense = T.dense_variable(I, (n, nnz), indptr, "IDX")
    J_detach = T.dense_fixed(n, "IDX")
    A = T.match_sparse_buffer(a, [I, J], dtype="VAL")
    D = T.match_buffer(d, [m * n], dtype="VAL", strides=[1])
    J_indptr = T.match_sparse_buffer(indptr, [I], dtype="IDX", extra_storage=1)
    J_indices = T.match_sparse_buffer(indices, [I, J_dense], dtype="IDX")
    mid_0 = T.alloc_sparse_buffer([I, J_detach], dtype="IDX", extra_storage=0)
    T.assume_buffer_domain(J_indptr, [0, nnz])
    T.assume_buffer_domain(J_indices, [0, n])
    T.assume_buffer_domain(mid_0, [0, n])
    for i, j in T.grid(m, n):
        with T.block("binary_search_block_0_0"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(J_indices[vi, 0 : J_indptr[vi + 1] - J_indptr[vi]])
            T.writes(mid_0[vi, vj])
            low = T.alloc_buffer([1], dtype="IDX", strides=[1], scope="local")
            high = T.alloc_buffer([1], dtype="IDX", strides=[1], scope="local")
            low[0] = 0
            high[0] = J_indptr[vi + 1] - J_indptr[vi]
            mid_0[vi, vj] = low[0] + (high[0] - low[0]) // 2
            while low[0] < high[0]:
                if J_indices[vi, mid_0[vi, vj]] < T.cast(vj, "IDX"):
                    low[0] = mid_0[vi, vj] + 1
                else:
                    high[0] = mid_0[vi, vj]
                mid_0[vi, vj] = low[0] + (high[0] - low[0]) // 2
    for i, j in T.grid(m, n):
        with T.block("densify"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(mid_0[vi, vj], A[vi, 0:n])
            T.writes(D[vi * n + vj])
            D[vi * n + vj] = T.VAL(0)
            if mid_0[vi, vj] < J_indptr[vi + 1] - J_indptr[vi]:
                if J_indices[vi, mid_0[vi, vj]] == T.cast(vj, "IDX"):
                    D[vi * n + vj] = A[vi, mid_0[vi, vj]]
"""


def search(idtype: str, dtype: str, text: str = SEARCH) -> sp.PrimFunc:
    return sp.from_script(text.replace("IDX", idtype).replace("VAL", dtype))


def args(A: scipy.sparse.csr_matrix) -> dict:
    m, n = A.shape
    return dict(
        a=A.data.copy(),
        d=np.full(m * n, np.nan, A.dtype),
        indptr=A.indptr,
        indices=A.indices,
        m=m,
        n=n,
        nnz=A.nnz,
    )


def stage3(func: sp.PrimFunc) -> sp.PrimFunc:
    return sp.lower_sparse_buffer(func)["main"]


def compile_passes(func: sp.PrimFunc, target: str) -> sp.PrimFunc:
    """The Stage III passes `sp.compile` runs after lowering (see driver.py)."""
    mod = compact_buffers(func, target)
    mod = promote_accumulators(mod) if target == "cpu" else mod
    return hoist_loop_invariants(mod)["main"]


def run(runner, A) -> np.ndarray:
    kw = args(A)
    runner(**kw)
    return kw["d"].reshape(A.shape)


def dtypes_of(A) -> tuple[str, str]:
    return str(A.indices.dtype), str(A.dtype)


def check_everywhere(A, text: str = SEARCH) -> None:
    """Stage II and III interpreters, the CPU kernel as built and after the compile passes: all
    equal `A.toarray()` (every element written: the output starts as NaN)."""
    want = A.toarray()
    f2 = search(*dtypes_of(A), text)
    f3 = stage3(f2)
    for name, runner in [
        ("Stage II interpreter", lambda **kw: sp.interpret(f2, **kw)),
        ("Stage III interpreter", lambda **kw: sp.interpret(f3, **kw)),
        ("CPU kernel", sp.build(f3, "cpu")),
        ("CPU kernel after the compile passes", sp.build(compile_passes(f3, "cpu"), "cpu")),
    ]:
        np.testing.assert_array_equal(run(runner, A), want, err_msg=name)


# ---------------------------------------------------------------------------------------------- the IR
@pytest.mark.parametrize("text", [SEARCH, SPARSETIR_SPELLING], ids=["ours", "sparsetir"])
def test_while_prints_and_parses_back_at_stages_2_and_3(text):
    f2 = search("int32", "float32", text)
    sp.verify(f2)
    assert f2.stage == 2 and any(isinstance(n, ir.While) for n in walk(f2.body))
    f3 = stage3(f2)
    for f in (f2, f3):
        printed = f.script()
        assert "while low[0] < high[0]:" in printed
        sp.assert_structural_equal(sp.from_script(printed), f)


def test_while_loop_renders_on_both_targets():
    f3 = stage3(search("int32", "float32"))
    for target in ("cpu", "cuda"):
        source = sp.build(f3, target).source
        assert "while low < high:" in source, target  # the one-element local buffers are registers


def test_while_else_is_refused():
    text = SEARCH.replace(
        "                        high[0] = mid\n",
        "                        high[0] = mid\n                else:\n                    pass\n",
        1,
    )
    with pytest.raises(sp.FrontendError, match=r"`while \.\.\. else` is not supported"):
        search("int32", "float32", text)


def test_a_loop_that_makes_no_progress_is_an_interpret_error():
    """The verifier accepts it (the body writes what the condition reads), but an iteration that
    changes nothing would repeat forever: the interpreter says so instead of hanging."""
    text = SEARCH.replace("low[0] = mid + 1", "low[0] = low[0]").replace("high[0] = mid", "high[0] = high[0]")
    f = search("int32", "float32", text)
    sp.verify(f)
    A = scipy.sparse.csr_matrix(np.array([[0.0, 2.0, 0.0]], np.float32))
    with pytest.raises(sp.InterpretError, match=r"`while low\[0\] < high\[0\]`: an iteration changed no buffer"):
        sp.interpret(f, **args(A))


# ---------------------------------------------------------------------------------------------- the numbers
@pytest.mark.parametrize("name", sorted(edge_matrices()))
def test_binary_search_on_edge_matrices(name):
    check_everywhere(edge_matrices()[name])


def test_binary_search_on_a_real_matrix():
    A = load_matrix("karate", dtype=np.float64, index_dtype=np.int64)
    check_everywhere(A)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(csr_matrices(max_rows=12, max_cols=12))
def test_binary_search_on_drawn_matrices(A):
    check_everywhere(A)


@pytest.mark.parametrize("name", ["6x5_staircase_int64", "2x11_last_row_empty", "4x0"])
def test_sparsetir_spelling_computes_the_same(name):
    """SparseTIR's keywords keep their meaning: the indptr view with `extra_storage=1` holds m + 1
    values and is read at `vi + 1`, and the searched positions agree."""
    check_everywhere(edge_matrices()[name], SPARSETIR_SPELLING)


# ---------------------------------------------------------------------------------------------- CUDA
needs_ptx = pytest.mark.skipif("ptx_unavailable() is not None", reason="PTX compilation unavailable")


@needs_ptx
@pytest.mark.parametrize("dtypes", [("int32", "float32"), ("int64", "float64")])
def test_while_loop_compiles_to_ptx(dtypes):
    ptx = sp.build(stage3(search(*dtypes)), "cuda").ptx(cc=(8, 0))
    assert ".target sm_80" in ptx
    assert "bra" in ptx  # the loop's back edge


def sim_matrices() -> dict[str, scipy.sparse.csr_matrix]:
    rng = np.random.default_rng(5)
    mask = rng.random((7, 9)) < 0.4
    mask[3] = False
    return {**edge_matrices(), "7x9_random": make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float32")}


def simulate(out: Path) -> None:
    """Run the CUDA kernel (Numba's simulator) on every `sim_matrices` entry, as built and after
    the compile passes; save the outputs (.npz) and "ok" or a traceback per entry (.json)."""
    outputs, results = {}, {}
    for name, A in sim_matrices().items():
        try:
            f3 = stage3(search(*dtypes_of(A)))
            outputs[name] = run(sp.build(f3, "cuda"), A)
            outputs[f"{name}:passes"] = run(sp.build(compile_passes(f3, "cuda"), "cuda"), A)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    np.savez(out, **outputs)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """One simulator run of this file's `__main__` per pytest run (`cuda_support.simulated_run`)."""
    return simulated_run(tmp_path_factory, "while", Path(__file__).resolve())


@pytest.mark.parametrize("name", sorted(sim_matrices()))
def test_binary_search_in_the_cuda_simulator(name, simulated):
    """The CUDA kernel (one thread per (row, column), each running its own `while`) gives what the
    interpreter gives, which is `A.toarray()`."""
    results, outputs = simulated
    if "__import__" in results:
        pytest.skip(f"the CUDA simulator cannot start here:\n{results['__import__']}")
    assert results.get(name) == "ok", f"`{name}` failed in the simulator:\n{results.get(name)}"
    A = sim_matrices()[name]
    want = run(lambda **kw: sp.interpret(search(*dtypes_of(A)), **kw), A)
    np.testing.assert_array_equal(want, A.toarray())
    np.testing.assert_array_equal(outputs[name], want)
    np.testing.assert_array_equal(outputs[f"{name}:passes"], want)


def main() -> int:
    out = Path(sys.argv[1])
    try:
        from numba import config, cuda  # noqa: F401

        assert config.ENABLE_CUDASIM
    except Exception:
        out.with_suffix(".json").write_text(json.dumps({"__import__": traceback.format_exc()}))
        return 0
    simulate(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
