"""The Stage II interpreter against the Stage I and Stage III ones, with no lowering pass inside.

`sp.interpret` runs a Stage II function with its own position-space addressing (interp/loops.py),
so it can check `lower_sparse_iter` and `lower_sparse_buffer` independently: for every corpus
operator and for scheduled SpMM/SDDMM, the Stage II result of `lower_sparse_iter(f)` equals the
Stage I result of `f` and the Stage III result of `lower_sparse_buffer(...)`, on a real graph and
on edge matrices (empty rows, an empty matrix, one row, rectangular, int64 indices, float64).
"""

from __future__ import annotations

import functools

import corpus
import numpy as np
import pytest
from corpus import CASES, CASES_BY_NAME, TOLERANCES
from strategies import edge_matrices

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import sddmm_script, spmm_script

EDGES = edge_matrices()
MATRICES = ["karate", "3x4_no_nnz", "1x7_full_row", "6x5_staircase_int64", "2x11_last_row_empty", "0x5"]


def matrix(name: str):
    return load_matrix(name) if name == "karate" else EDGES[name]


@functools.cache
def stages(name: str, idtype: str, dtype: str) -> tuple[sp.PrimFunc, sp.PrimFunc, sp.PrimFunc]:
    f1 = CASES_BY_NAME[name].build(idtype, dtype)
    f2 = sp.lower_sparse_iter(f1)["main"]
    return f1, f2, sp.lower_sparse_buffer(f2)["main"]


def run_all(funcs, kwargs: dict, outputs) -> list[dict[str, np.ndarray]]:
    results = []
    for f in funcs:
        kw = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
        sp.interpret(f, **kw)
        results.append({name: kw[name] for name in outputs})
    return results


@pytest.mark.parametrize(("idtype", "dtype"), [("int32", "float32"), ("int64", "float64")])
@pytest.mark.parametrize("mname", MATRICES)
@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_stage2_interpretation_matches_stage1_and_stage3(name, mname, idtype, dtype):
    case = CASES_BY_NAME[name]
    A = corpus.prepare_csr(matrix(mname), idtype, dtype)
    try:
        kwargs, outputs = case.make_args(A, np.random.default_rng(0), idtype, dtype, feat=3)
    except (ValueError, ZeroDivisionError, IndexError) as e:  # a case that needs a non-empty matrix
        pytest.skip(f"`{name}` takes no {A.shape} matrix: {e}")
    r1, r2, r3 = run_all(stages(name, idtype, dtype), kwargs, outputs)
    tol = TOLERANCES[dtype]
    for out in outputs:
        scale = max(1.0, float(np.nanmax(np.abs(r1[out]), initial=0.0)))
        np.testing.assert_allclose(r2[out], r1[out], rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=out)
        np.testing.assert_array_equal(r3[out], r2[out], err_msg=out)


SCHEDULES = {
    "split_reorder": lambda sch: sch.reorder(*sch.get_loops(sch.get_block("csrmm1"))[::-1]),
    "split": lambda sch: sch.split(sch.get_loops(sch.get_block("csrmm1"))[1], [None, 2]),
    "decompose_reduction": lambda sch: sch.decompose_reduction(
        sch.get_block("csrmm1"), sch.get_loops(sch.get_block("csrmm1"))[0]
    ),
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("mname", ["karate", "2x11_last_row_empty", "3x4_no_nnz"])
def test_scheduled_spmm_at_stage2(schedule, mname):
    A = matrix(mname).astype(np.float32)
    func = spmm_script()
    sch = sp.Schedule(sp.lower_sparse_iter(func))
    SCHEDULES[schedule](sch)
    B = np.random.default_rng(1).standard_normal((A.shape[1], 5)).astype(np.float32)
    kwargs = dict(a=A.data, b=B, c=np.full((A.shape[0], 5), np.nan, np.float32), indptr=A.indptr,
                  indices=A.indices, m=A.shape[0], n=A.shape[1], feat=5, nnz=A.nnz)  # fmt: skip
    stage2, stage3 = sch.mod["main"], sp.lower_sparse_buffer(sch.mod)["main"]
    r2, r3 = run_all([stage2, stage3], kwargs, ["c"])
    np.testing.assert_allclose(r2["c"], A @ B, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(r3["c"], r2["c"])


def _shipped_schedules():
    from schedules.sddmm import SCHEDULES as SDDMM
    from schedules.spmm import SCHEDULES as SPMM

    # Warp shuffles (csr_cuda_fused_*) exchange values between threads: no sequential meaning.
    cases = [("spmm", n, s) for n, s in SPMM.items()] + [("sddmm", n, s) for n, s in SDDMM.items()]
    return [c for c in cases if "fused_warp" not in c[1] and "fused_rfactor" not in c[1]]


@pytest.mark.parametrize(
    ("op", "name", "schedule"), _shipped_schedules(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_shipped_schedules_at_stage2(op, name, schedule):
    """Tiled, balanced, tensorized (dot_8), thread-bound and fused (row search, atomics) Stage II
    functions: Stage II = Stage III = scipy."""
    A = load_matrix("karate").astype(np.float32)
    X = np.random.default_rng(2).standard_normal((A.shape[0], 40)).astype(np.float32)
    mod = (spmm_script() if op == "spmm" else sddmm_script()).specialize({"feat": 40})
    if hasattr(schedule, "stage1"):
        s1 = sp.Schedule(mod)
        schedule.stage1(s1)
        mod = s1.mod
    sch = sp.Schedule(sp.lower_sparse_iter(mod))
    schedule(sch)
    structure = dict(indptr=A.indptr, indices=A.indices, m=A.shape[0], n=A.shape[1], nnz=A.nnz)
    if op == "spmm":
        kwargs = dict(a=A.data, b=X, c=np.full((A.shape[0], 40), np.nan, np.float32), **structure)
        want = A @ X
    else:
        kwargs = dict(a=A.data, x=X, y=X, c=np.full(A.nnz, np.nan, np.float32), **structure)
        want = A.multiply(X @ X.T).tocsr().data
    r2, r3 = run_all([sch.mod["main"], sp.lower_sparse_buffer(sch.mod)["main"]], kwargs, ["c"])
    np.testing.assert_allclose(r2["c"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r3["c"], r2["c"], rtol=1e-6, atol=1e-6)


@T.prim_func
def out_of_row(a: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    T.func_attr({"stage": 2})
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")
    C = T.match_sparse_buffer(c, (I,), "float32")
    for i in T.serial(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            C[vi] = A[vi, 1]


def test_position_outside_its_row_is_an_error():
    """Row 0 stores one element: position 1 is outside it, although the flat offset 1 is inside
    the value array (row 1's first element). Only position-space addressing can see this."""
    indptr = np.array([0, 1, 3], np.int32)
    indices = np.array([0, 0, 1], np.int32)
    A = np.arange(3, dtype=np.float32)
    with pytest.raises(sp.InterpretError, match="position 1 of axis `J`, outside \\[0, 1\\) in its row"):
        sp.interpret(out_of_row, a=A, c=np.zeros(2, np.float32), indptr=indptr, indices=indices, m=2, n=2, nnz=3)


def test_no_lowering_pass_inside_the_interpreter():
    import ast
    from pathlib import Path

    import sparsetir_py.interp as interp

    for path in Path(interp.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "transform" not in (node.module or ""), (path.name, node.module)
