"""`sch.prefetch` and `inject_prefetch`: software prefetches of what later iterations read.

The shipped schedule `csr_cpu_rows_split_x4_prefetch_fixed` (B's rows four chunks of nonzeros
ahead) and a prefetch on the row loop of `csr_cpu_rows` (the next row's nonzeros: an inner loop
whose bounds the hint reads from `J_indptr`) equal scipy on rows of every length modulo 4, the
edge matrices, int64/float64 and a real graph: the hints near the last rows read the index
arrays clamped, so no kernel reads past them. The Stage III function computes what it did
without the hints (interpreter), prints and parses back, and the schedule primitive refuses bad
arguments by name.
"""

from __future__ import annotations

import numpy as np
import pytest
from strategies import split_matrices

import sparsetir_py as sp
from schedules import common
from schedules import spmm as spmm_schedules
from schedules.spmm import csr_cpu_rows, csr_cpu_rows_split_x4_prefetch_fixed
from sparsetir_py.data import load_matrix
from sparsetir_py.driver import target_passes
from sparsetir_py.errors import ScheduleError
from sparsetir_py.ir.expr import Call
from sparsetir_py.ir.stmt import For
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import spmm_script


def _prefetch_rows(sch):
    """`csr_cpu_rows` with the next row's rows of B prefetched (an inner loop over its nonzeros)."""
    csr_cpu_rows(sch)
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.prefetch(i, "B", 1)


def _tol(dtype) -> float:
    return 1e-5 if dtype == np.float32 else 1e-12


@pytest.mark.parametrize("schedule", [csr_cpu_rows_split_x4_prefetch_fixed, _prefetch_rows])
@pytest.mark.parametrize(("idtype", "dtype"), [(np.int32, np.float32), (np.int64, np.float64)])
def test_prefetching_schedules_equal_scipy(schedule, idtype, dtype):
    # Width 8 in float32 is one 32-byte row (hinted whole, four chunks ahead); in float64 the
    # 64-byte row too. The real graph has empty rows and rows past the distance.
    graph = load_matrix("cora").astype(dtype)
    graph.indices, graph.indptr = graph.indices.astype(idtype), graph.indptr.astype(idtype)
    for A in [*split_matrices(4, idtype, dtype), graph]:
        B = np.random.default_rng(A.shape[1]).standard_normal((A.shape[1], 8)).astype(dtype)
        C = sp.ops.spmm(A, B, format="csr", schedule=schedule)
        np.testing.assert_allclose(C, A.toarray().astype(np.float64) @ B, rtol=_tol(dtype), atol=_tol(dtype))


def test_buffers_of_two_types_on_one_loop():
    """A row loop prefetching the next row's column indices (int64) and rows of B (float32):
    one kernel hinting arrays of two element types (found by a fuzz of random schedules: the
    intrinsic's declaration took the first array's pointer type)."""

    def schedule(sch):
        _prefetch_rows(sch)
        (i,) = sch.get_loops(sch.get_block("csrmm0"))
        sch.prefetch(i, "J_indices", 2, lines=1)

    A = load_matrix("cora")
    A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 5)).astype(np.float32)
    C = sp.ops.spmm(A, B, format="csr", schedule=schedule)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


def test_wide_rows_hint_their_first_line():
    """Past `PREFETCH_WHOLE_ROW` bytes a row of B gets its first cache line hinted,
    `PREFETCH_AHEAD_WIDE` chunks ahead; at 32 floats (128 bytes) the whole row, two lines."""
    A = load_matrix("citeseer")
    for width, lines, ahead in ((32, 2, common.PREFETCH_AHEAD), (64, 1, common.PREFETCH_AHEAD_WIDE)):
        schedule = csr_cpu_rows_split_x4_prefetch_fixed
        kernel = sp.compile(spmm_script(), "cpu", schedule=schedule, specialize={"feat": width})
        source = kernel.source
        assert f"for prefetch_t0 in range({lines}):" in source
        assert f"(j_outer + {ahead}) * 4" in source
        B = np.random.default_rng(width).standard_normal((A.shape[1], width)).astype(np.float32)
        C = np.zeros((A.shape[0], width), np.float32)
        m, n = A.shape
        kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=width, nnz=A.nnz)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


def _stage3(schedule):
    f = sp.lower_sparse_iter(spmm_script())
    sch = sp.Schedule(f)
    schedule(sch)
    return sch, target_passes(sp.lower_sparse_buffer(sch.mod), "cpu")


@pytest.mark.parametrize(
    ("schedule", "hints", "loops"), [(_prefetch_rows, 1, 2), (csr_cpu_rows_split_x4_prefetch_fixed, 7, 7)]
)
def test_hints_change_nothing_the_interpreter_computes(schedule, hints, loops):
    """The Stage III function with its hints computes what scipy does; the interpreter checks
    that every hint's address, and every index read to form it, lies in its buffer (it fails
    without the clamps: the last row's next row). It prints and parses back. The row loop's hint
    walks the next row's nonzeros, then the lines of each row of B; the chunks' hints are one
    per nonzero of the chunk (four, then the tail's three distinct ones)."""
    sch, mod = _stage3(schedule)
    func = mod["main"]
    assert len([n for n in walk(func.body) if isinstance(n, Call) and n.op == "prefetch"]) == hints
    assert len([n for n in walk(func.body) if isinstance(n, For) and n.loop_var.name.startswith("prefetch_t")]) == loops
    assert not [n for n in walk(func.body) if isinstance(n, For) and "prefetch" in n.annotations]  # the mark is gone
    assert "sch.prefetch(" in sch.trace.as_python()
    assert sp.structural_equal(sp.from_script(func.script()), func)
    for A in split_matrices(4, np.int32, np.float32):
        m, n = A.shape
        B = np.random.default_rng(1).standard_normal((n, 3)).astype(np.float32)
        C = np.full((m, 3), np.nan, np.float32)
        sp.interpret(func, a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=3, nnz=A.nnz)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


def test_cuda_ignores_the_hints():
    def schedule(sch):
        spmm_schedules.csr_cuda_rows(sch)
        (i,) = sch.get_loops(sch.get_block("csrmm0"))
        sch.prefetch(i, "B", 1)

    source = sp.compile(spmm_script(), "cuda", schedule=schedule, specialize={"feat": 32}).source
    assert "prefetch" not in source


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("B", 0), "offset >= 1"),
        (("B", True), "offset >= 1"),
        (("B", 1, 0), "lines >= 1"),
        (("C_missing", 1), "expected a buffer that loop `i` reads"),
        ((7, 1), "buffer name"),
    ],
)
def test_prefetch_refuses_bad_arguments(args, message):
    sch = sp.Schedule(sp.lower_sparse_iter(spmm_script()))
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    with pytest.raises(ScheduleError, match=message):
        sch.prefetch(i, *args)
    sch.prefetch(i, "B", 2)
    with pytest.raises(ScheduleError, match="already prefetches `B`"):
        sch.prefetch(i, "B", 1)
