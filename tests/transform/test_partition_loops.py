"""`partition_loops`: full chunks of a split without the split's guard, the partial chunk decided.

The SpMM schedule `csr_cpu_rows_x4` (split the nonzeros by F, features between, `dot_F`
tensorized) is compiled for F = 4, 8, 16 and run on rows of every length modulo F (0 to 2F + 1
nonzeros), the edge matrices, int64/float64 and a real graph, against scipy. The partitioned
Stage III function computes what the unpartitioned one does (interpreter), its full-chunk loop
holds no guard, and a function without such guards is left as it is.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from strategies import rows_of_every_length, split_matrices

import sparsetir_py as sp
from schedules.spmm import csr_cpu_rows, csr_cpu_rows_x4
from sparsetir_py.ir.expr import Select
from sparsetir_py.ir.stmt import For
from sparsetir_py.ir.visit import walk
from sparsetir_py.transform import partition_loops


@pytest.mark.parametrize("factor", [4, 8, 16])
@pytest.mark.parametrize(("idtype", "dtype"), [(np.int32, np.float32), (np.int64, np.float64)])
def test_chunked_rows_equal_scipy(factor, idtype, dtype):
    schedule = functools.partial(csr_cpu_rows_x4, factor=factor)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for A in split_matrices(factor, idtype, dtype):
        for width in (1, 5, 16):
            B = np.random.default_rng(width).standard_normal((A.shape[1], width)).astype(dtype)
            np.testing.assert_allclose(sp.ops.spmm(A, B, schedule=schedule), A @ B, rtol=tol, atol=tol)


def test_chunked_rows_on_a_real_graph():
    A = sp.data.load_matrix("citeseer")
    B = np.random.default_rng(0).standard_normal((A.shape[1], 32)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, schedule="csr_cpu_rows_x4"), A @ B, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sp.ops.spmm(A, B, schedule="csr_cpu_rows_balanced_x4"), A @ B, rtol=1e-4, atol=1e-4)


def _stage3(schedule):
    sch = sp.Schedule(sp.lower_sparse_iter(sp.ops.spmm_script()))
    schedule(sch)
    return sp.lower_sparse_buffer(sch.mod)


def test_full_chunks_have_no_guard_and_results_are_unchanged():
    before = _stage3(csr_cpu_rows_x4)["main"]
    after = partition_loops(before)["main"]
    guarded = [n for n in walk(before.body) if isinstance(n, Select)]
    assert len(guarded) == 4  # one per term of the 4-wide sum
    full = next(n for n in walk(after.body) if isinstance(n, For) and n.loop_var.name == "j_outer")
    assert not any(isinstance(n, Select) for n in walk(full.body))
    assert any(isinstance(n, For) and n.loop_var.name == "j_outer_tail" for n in walk(after.body))
    A = rows_of_every_length(4)
    m, n = A.shape
    B = np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32)
    outs = []
    for f in (before, after):
        C = np.full((m, 3), np.nan, np.float32)
        sp.interpret(f, a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=3, nnz=A.nnz)
        outs.append(C)
    np.testing.assert_allclose(outs[0], A @ B, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)


def test_functions_without_split_guards_are_left_alone():
    f = _stage3(csr_cpu_rows)["main"]
    assert partition_loops(f)["main"] is f or partition_loops(f)["main"] == f
