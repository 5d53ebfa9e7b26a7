"""Shared checks of the Stage II schedule tests.

`VerifyingSchedule` verifies and round-trips the function after every primitive (a primitive
must leave valid, printable IR); `check` adds trace replay (`trace.apply` and the printed
`trace.as_python()`); `run_spmm` / `run_sddmm` compare the interpreter and, when given, a CPU
kernel with scipy. Kernels are compiled once per schedule and reused across matrices (Numba
compilation dominates the run time).
"""

from __future__ import annotations

import functools
import textwrap

import numpy as np
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.ir.stmt import Block, For
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import sddmm_script, spmm_script
from sparsetir_py.transform.region import annotate_regions


class VerifyingSchedule(sp.Schedule):
    """A schedule that verifies and round-trips its function after every primitive."""

    def _update(self, func):
        sp.verify(func)
        sp.assert_structural_equal(func, sp.from_script(func.script()))
        super()._update(func)


@functools.cache
def spmm2() -> sp.IRModule:
    """SpMM (csrmm) after lower_sparse_iter."""
    return sp.lower_sparse_iter(spmm_script())


@functools.cache
def sddmm2() -> sp.IRModule:
    """SDDMM after lower_sparse_iter."""
    return sp.lower_sparse_iter(sddmm_script())


def check(sch: sp.Schedule, unscheduled) -> None:
    """Verify, round trip, and replay the trace both ways."""
    f = sch.mod["main"]
    sp.verify(f)
    sp.assert_structural_equal(f, sp.from_script(f.script()))
    sp.assert_structural_equal(sch.trace.apply(unscheduled), sch.mod)
    namespace = {"sch": sp.Schedule(unscheduled)}
    exec(sch.trace.as_python(), namespace)  # the printed trace is runnable Python
    sp.assert_structural_equal(namespace["sch"].mod, sch.mod)


def expected(func: sp.PrimFunc) -> sp.PrimFunc:
    """A hand-written Stage II function with its read/write regions filled in by region analysis."""
    return annotate_regions(func)


def block(func, name: str) -> Block:
    return next(n for n in walk(func.body) if isinstance(n, Block) and n.name == name)


def loop_kinds(func) -> dict[str, str]:
    return {f.loop_var.name: f.kind for f in walk(func.body) if isinstance(f, For)}


def random_csr(m: int = 13, n: int = 11, density: float = 0.3, seed: int = 2) -> sps.csr_matrix:
    """A small random float32 CSR matrix with sorted indices and an empty row (row 4)."""
    A = sps.random(m, n, density=density, format="csr", dtype=np.float32, random_state=seed).tolil()
    A[4, :] = 0
    A = A.tocsr()
    A.sort_indices()
    return A


def cora() -> sps.csr_matrix:
    return load_matrix("cora")


def _spmm_args(A, feat: int, seed: int):
    m, n = A.shape
    B = np.random.default_rng(seed).standard_normal((n, feat)).astype(A.dtype)
    C = np.full((m, feat), np.nan, A.dtype)  # every element must be written
    args = dict(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=feat, nnz=A.nnz)
    return args, (A @ B)


def _sddmm_args(A, feat: int, seed: int):
    m, n = A.shape
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, feat)).astype(A.dtype)
    Y = rng.standard_normal((n, feat)).astype(A.dtype)
    C = np.full(A.nnz, np.nan, A.dtype)
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    ref = A.data * np.einsum("ij,ij->i", X[rows], Y[A.indices])
    args = dict(a=A.data, x=X, y=Y, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=feat, nnz=A.nnz)
    return args, ref


def build(mod) -> object:
    return sp.build(sp.lower_sparse_buffer(mod), target="cpu")


def run_spmm(mod, A, feat: int = 5, kernel=None, interpret: bool = True) -> None:
    """The interpreter (and `kernel`, when given) compute A @ B on `A`."""
    if interpret:
        args, ref = _spmm_args(A, feat, 0)
        sp.interpret(mod["main"], **args)
        np.testing.assert_allclose(args["c"], ref, rtol=1e-4, atol=1e-4)
    if kernel is not None:
        args, ref = _spmm_args(A, feat, 1)
        kernel(**args)
        np.testing.assert_allclose(args["c"], ref, rtol=1e-4, atol=1e-4)


def run_sddmm(mod, A, feat: int = 5, kernel=None, interpret: bool = True) -> None:
    """The interpreter (and `kernel`, when given) compute A * (X @ Y.T) on A's structure."""
    if interpret:
        args, ref = _sddmm_args(A, feat, 0)
        sp.interpret(mod["main"], **args)
        np.testing.assert_allclose(args["c"], ref, rtol=1e-4, atol=1e-4)
    if kernel is not None:
        args, ref = _sddmm_args(A, feat, 1)
        kernel(**args)
        np.testing.assert_allclose(args["c"], ref, rtol=1e-4, atol=1e-4)


def _header(mod) -> str:
    """The printed declarations of a lowered function: everything before its first loop."""
    lines = mod["main"].script().splitlines()
    first = next(k for k, line in enumerate(lines) if line.lstrip().startswith("for "))
    return "\n".join(lines[:first]) + "\n"


def stage2(unscheduled, body: str) -> sp.PrimFunc:
    """A hand-written Stage II function: the declarations of `unscheduled` and `body` (the loops,
    written at the indentation of a function body, without T.reads/T.writes: region analysis
    fills them in)."""
    text = _header(unscheduled) + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    return expected(sp.from_script(text))


def unchanged(sch: sp.Schedule, call, match: str) -> None:
    """`call()` raises a ScheduleError matching `match` and leaves `sch` as it was (same module
    object, no new trace instruction)."""
    import pytest

    before, n = sch.mod, len(sch.trace.instructions)
    with pytest.raises(sp.ScheduleError, match=match):
        call()
    assert sch.mod is before and len(sch.trace.instructions) == n
