"""The co-iterating operators with the CUDA schedule (`cuda_chunks`: a chunk of rows per thread
block, SpGEMM's workspaces in global memory) under Numba's CUDA simulator, against scipy.

The simulator runs in a subprocess (this file, run as a script, writes what it found), on tiny
matrices: the edge shapes, a product of inner dimension 1, and small random ones (int32/int64,
float32/float64), each operator checked for its structure and values as the CPU tests do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import json

import numpy as np
import scipy.sparse


def pattern(A):
    P = scipy.sparse.csr_matrix(A, dtype=np.float64, copy=True)
    P.sum_duplicates()
    P.data[:] = 1.0
    return P


def same(C, structure, values) -> str:
    """ "ok", or what differs: C's structure must be `structure`'s, its values `values`'."""
    S = structure.tocsr()
    S.sort_indices()
    if not (np.array_equal(C.indptr, S.indptr) and np.array_equal(C.indices, S.indices)):
        return f"structure differs: {C.nnz} entries, expected {S.nnz}"
    rows = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
    want = np.asarray(values.tocsr()[rows, C.indices]).reshape(-1) if C.nnz else np.zeros(0)
    return "ok" if np.allclose(C.data, want, rtol=1e-4, atol=1e-4) else "values differ"


def matrices():
    from strategies import edge_matrices, make_csr

    rng = np.random.default_rng(26)
    out = {}
    for name in ("0x5", "4x0", "1x7_full_row", "6x5_staircase_int64", "2x11_last_row_empty"):
        A = edge_matrices()[name]
        out[name] = (A, A.T.tocsr())
    for idtype, dtype in (("int32", "float32"), ("int64", "float64")):
        A = make_csr(rng.random((7, 6)) < 0.4, rng.uniform(-1, 1, 42), idtype, dtype)
        B = make_csr(rng.random((6, 5)) < 0.4, rng.uniform(-1, 1, 30), idtype, dtype)
        out[f"random_{idtype}_{dtype}"] = (A, B)
    column = make_csr(np.array([[1], [0], [1]], bool), np.array([2.0, -1.0]), "int32", "float32")
    row = make_csr(np.array([[1, 1, 0, 1]], bool), np.array([1.0, 3.0, -2.0]), "int32", "float32")
    out["inner_dimension_1"] = (column, row)
    return out


def run(out: Path) -> None:
    from sparsetir_py.ops.coiteration import add, multiply, spgemm

    results = {}
    for name, (A, B) in matrices().items():
        A64, B64 = scipy.sparse.csr_matrix(A, dtype=np.float64), scipy.sparse.csr_matrix(B, dtype=np.float64)
        results[f"{name}: spgemm"] = same(spgemm(A, B, target="cuda"), pattern(A) @ pattern(B), A64 @ B64)
        mask = pattern(scipy.sparse.random(A.shape[0], B.shape[1], 0.5, format="csr", random_state=1))
        masked = spgemm(A, B, mask=mask, target="cuda")
        results[f"{name}: masked"] = same(masked, (pattern(A) @ pattern(B)).multiply(mask), A64 @ B64)
        other = scipy.sparse.csr_matrix(A.T.T, copy=True)
        other.data = other.data[::-1].copy()
        results[f"{name}: add, one level"] = same(add(A, other, 2.0, -1.0, target="cuda"), pattern(A), 2 * A64 - other)
        product = multiply(A, other, target="cuda")
        results[f"{name}: multiply, one level"] = same(product, pattern(A), A64.multiply(other))
        D = scipy.sparse.random(*A.shape, 0.5, format="csr", random_state=2).astype(A.dtype)
        results[f"{name}: add"] = same(add(A, D, 2.0, -1.0, target="cuda"), pattern(A) + pattern(D), 2 * A64 - D)
        both = pattern(A).multiply(pattern(D))
        results[f"{name}: multiply"] = same(multiply(A, D, target="cuda"), both, A64.multiply(D))
    results.update(assembled_scripts())
    out.with_suffix(".json").write_text(json.dumps(results))
    np.savez(out, done=np.ones(1))


def assembled_scripts() -> dict[str, str]:
    """Scripts with an assembled output (`test_assemble.py`) compiled for CUDA, their rows in
    global-memory workspaces (`sch.workspace(it, "global")`, a Stage I schedule step)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_assemble import as_csr, ewise_args, ewise_script, spgemm_args, spgemm_script

    import sparsetir_py as sp

    def schedule(sch):
        from schedules.spgemm import cuda_chunks

        cuda_chunks(sch)

    def stage1(sch):
        name = "spgemm" if "spgemm" in sch.func.name else "ewise"
        sch.workspace(sch.get_sparse_iteration(name), "global")

    schedule.stage1 = stage1
    results = {}
    for name, (A, B) in list(matrices().items())[-3:]:
        A, B = scipy.sparse.csr_matrix(A, dtype=np.float32), scipy.sparse.csr_matrix(B, dtype=np.float32)
        A.indices, A.indptr = A.indices.astype(np.int32), A.indptr.astype(np.int32)
        B.indices, B.indptr = B.indices.astype(np.int32), B.indptr.astype(np.int32)
        out = sp.compile(spgemm_script(), "cuda", schedule=schedule)(**spgemm_args(A, B))
        A64, B64 = scipy.sparse.csr_matrix(A, dtype=np.float64), scipy.sparse.csr_matrix(B, dtype=np.float64)
        shape = (A.shape[0], B.shape[1])
        results[f"{name}: script spgemm"] = same(as_csr(out, shape), pattern(A) @ pattern(B), A64 @ B64)
        D = scipy.sparse.random(*A.shape, 0.5, format="csr", random_state=3, dtype=np.float32)
        E = scipy.sparse.random(*A.shape, 0.5, format="csr", random_state=4, dtype=np.float32)
        out = sp.compile(ewise_script("X0 + X1 - X2", 3), "cuda", schedule=schedule)(**ewise_args([A, D, E]))
        results[f"{name}: script add3"] = same(as_csr(out, A.shape), pattern(A) + pattern(D) + pattern(E), A64 + D - E)
    return results


def test_operators_under_the_simulator(tmp_path_factory):
    from cuda_support import simulated_run

    results, _ = simulated_run(tmp_path_factory, "coiteration", Path(__file__))
    assert len(results) == 6 * 8 + 2 * 3
    assert {k: v for k, v in results.items() if v != "ok"} == {}


def test_kernels_compile_to_ptx():
    """The real CUDA path of every co-iteration kernel (the simulator runs Python, not PTX)."""
    import pytest
    from cuda_support import ptx_unavailable

    reason = ptx_unavailable()
    if reason:
        pytest.skip(reason)
    from sparsetir_py.ops.coiteration import kernel

    for name in ("count", "numeric", "masked", "add", "multiply", "compact", "same_add"):
        ptx = kernel(name, "int32", "float32", target="cuda").ptx(cc=(8, 0))
        assert ".visible .entry" in ptx and ".target sm_80" in ptx, name
    from test_assemble import ewise_script

    import sparsetir_py as sp

    for text in ("X0 + X1 - X2",):  # the k-operand merge of an assembled script
        ptx = sp.compile(ewise_script(text, 3), "cuda").kernels["merge"].ptx(cc=(8, 0))
        assert ".visible .entry" in ptx, text


if __name__ == "__main__":
    run(Path(sys.argv[1]))
