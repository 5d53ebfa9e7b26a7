"""The shipped SpMM / SDDMM schedules (`schedules/`): every CPU schedule equals scipy through
`sp.ops`; every CUDA schedule compiles to PTX (sm_80, sm_90) and runs in the CUDA simulator."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import textwrap

import numpy as np
import pytest
import scipy.sparse
from cuda_support import simulator_argv
from hypothesis import given, settings
from strategies import csr_matrices

import sparsetir_py as sp
from schedules import sddmm as sddmm_schedules
from schedules import spmm as spmm_schedules
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import sddmm_script, spmm_script

# The eight-wide schedule compiles in twice x4's time (seven remainder copies): it has its own test,
# one compilation (`test_cpu_spmm_x8_every_row_length`), instead of one per width and type pair here.
CPU_SPMM = [n for n in spmm_schedules.SCHEDULES if "cpu" in n and "_x8" not in n]
CPU_SDDMM = [n for n in sddmm_schedules.SCHEDULES if "cpu" in n]
CUDA = [("spmm", n) for n in spmm_schedules.SCHEDULES if "cuda" in n] + [
    ("sddmm", n) for n in sddmm_schedules.SCHEDULES if "cuda" in n
]


def sddmm_reference(A, X, Y):
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return A.data * np.einsum("ij,ij->i", X[rows].astype(np.float64), Y[A.indices].astype(np.float64))


# Each schedule runs in one pair of index and value types, taken in turn, on a real graph and on
# random matrices, so that every schedule and every pair of types is reached while each kernel is
# compiled once for both tests (all four pairs for all 29 schedules cost 116 compilations:
# minutes on a cold cache; the random matrices use width 13, one of the real graph's, so that the
# schedules compiled for a fixed width share it too). Every pair for every schedule is covered on
# fixed matrices elsewhere (test_split_by, the operator tests).
_TYPES = [("int32", "float32"), ("int64", "float64"), ("int64", "float32"), ("int32", "float64")]
_RUNS = [("spmm", name) for name in CPU_SPMM] + [("sddmm", name) for name in CPU_SDDMM]


def _types(op: str, name: str) -> tuple[str, str]:
    """The (index, value) dtypes `op`'s schedule `name` runs in."""
    return _TYPES[_RUNS.index((op, name)) % len(_TYPES)]


def _retyped(A, idtype: str, dtype: str):
    """A's structure and values in other types (scipy's constructor would narrow int64 indices)."""
    out = A.astype(dtype)
    out.indices = A.indices.astype(idtype)
    out.indptr = A.indptr.astype(idtype)
    return out


def _tol(dtype: str) -> float:
    return 1e-4 if dtype == "float32" else 1e-10


@pytest.mark.parametrize("name", CPU_SPMM)
@pytest.mark.parametrize("feat", [1, 13, 32])
def test_cpu_spmm_schedules(name, feat):
    idtype, dtype = _types("spmm", name)
    A = _retyped(load_matrix("cora"), idtype, dtype)
    B = np.random.default_rng(feat).standard_normal((A.shape[1], feat)).astype(dtype)
    C = sp.ops.spmm(A, B, schedule=name)
    assert C.dtype == dtype
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=_tol(dtype), atol=_tol(dtype))


@pytest.mark.parametrize("name", CPU_SDDMM)
@pytest.mark.parametrize("feat", [1, 13, 32])
def test_cpu_sddmm_schedules(name, feat):
    idtype, dtype = _types("sddmm", name)
    A = _retyped(load_matrix("citeseer"), idtype, dtype)
    rng = np.random.default_rng(feat)
    X = rng.standard_normal((A.shape[0], feat)).astype(dtype)
    Y = rng.standard_normal((A.shape[1], feat)).astype(dtype)
    S = sp.ops.sddmm(A, X, Y, schedule=name)
    assert S.indices.dtype == idtype and S.dtype == dtype
    np.testing.assert_allclose(S.data, sddmm_reference(A, X, Y), rtol=_tol(dtype), atol=_tol(dtype))


@settings(max_examples=10, deadline=None)
@given(A=csr_matrices(max_rows=20, max_cols=20, value_dtypes=("float64",), index_dtypes=("int32",)))
def test_cpu_schedules_on_random_matrices(A):
    rng = np.random.default_rng(0)
    for op, name in _RUNS:
        idtype, dtype = _types(op, name)
        M = _retyped(A, idtype, dtype)
        B = rng.standard_normal((M.shape[1], 13)).astype(dtype)
        X = rng.standard_normal((M.shape[0], 13)).astype(dtype)
        tol = _tol(dtype)
        if op == "spmm":
            C = sp.ops.spmm(M, B, schedule=name)
            assert C.dtype == dtype
            np.testing.assert_allclose(C, M.toarray().astype(np.float64) @ B, rtol=tol, atol=tol, err_msg=name)
        else:
            S = sp.ops.sddmm(M, X, B, schedule=name)
            assert S.indices.dtype == idtype and S.dtype == dtype
            np.testing.assert_allclose(S.data, sddmm_reference(M, X, B), rtol=tol, atol=tol, err_msg=name)


def test_cpu_spmm_x8_every_row_length():
    """`csr_cpu_rows_split_x8_fixed` on rows of every length from 0 to 19 (no chunk of eight, one or
    two full chunks, each of the seven remainder copies), then on a real graph with empty rows and
    on an empty matrix, one kernel (one width, one pair of types) for all."""
    rng = np.random.default_rng(8)
    lengths = np.concatenate([np.arange(20), rng.permutation(np.arange(20))])
    m, n = lengths.size, 40
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(n, k, replace=False)) for k in lengths]).astype(np.int32)
    A = scipy.sparse.csr_matrix((rng.standard_normal(indptr[-1]).astype(np.float32), indices, indptr), (m, n))
    name = "csr_cpu_rows_split_x8_fixed"
    for M in (A, load_matrix("cora"), scipy.sparse.csr_matrix((5, 7), dtype=np.float32)):
        B = rng.standard_normal((M.shape[1], 13)).astype(np.float32)
        C = sp.ops.spmm(M, B, schedule=name)
        np.testing.assert_allclose(C, M.toarray().astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def test_unknown_schedule_name():
    A = load_matrix("karate")
    with pytest.raises(sp.InputError, match="unknown spmm schedule 'nope'"):
        sp.ops.spmm(A, np.ones((34, 2), np.float32), schedule="nope")


def cuda_kernel(op, name, feat):
    script, module = (spmm_script, spmm_schedules) if op == "spmm" else (sddmm_script, sddmm_schedules)
    return sp.compile(script(), "cuda", schedule=module.SCHEDULES[name], specialize={"feat": feat})


@pytest.mark.parametrize("op,name", CUDA)
def test_cuda_schedules_compile_to_ptx(op, name):
    kernel = cuda_kernel(op, name, 64)
    for cc in ((8, 0), (9, 0)):
        ptx = kernel.ptx(cc=cc)
        assert ".visible .entry" in ptx and f".target sm_{cc[0]}{cc[1]}" in ptx
    if name == "csr_cuda_fused_warp":
        assert "shfl.sync.down" in kernel.ptx(cc=(8, 0))
    if name == "csr_cuda_fused_rfactor":
        # One shuffle tree per nonzero; the partial sums are registers (compacted C_rf), no local memory.
        ptx = kernel.ptx(cc=(8, 0))
        assert ptx.count("shfl.sync.down") == 5 and ".local" not in ptx
        assert "C_rf = np.float32(0.0)  # local register" in kernel.source
    if name == "csr_cuda_rows_coarse":
        # Width 64: a warp a row (two features a thread, 32 threads), four rows a block; the two
        # accumulators are registers (their `local` index `& 1` folds to a constant), no local memory.
        assert "C_local = cuda.local.array(2, numba.float32)" in kernel.source and "& 1)]" in kernel.source
        assert ".local" not in kernel.ptx(cc=(8, 0)) and kernel.resources.threads_per_block == 128
    if name == "csr_cuda_rows_register":
        # A feature a thread, the row's sum in a register (compacted C_local), no local memory.
        assert "C_local = np.float32(0.0)  # local register" in kernel.source
        assert ".local" not in kernel.ptx(cc=(8, 0)) and kernel.resources.threads_per_block == 64


def test_register_schedule_falls_back_past_the_thread_limit():
    """A width over `max_threads` keeps one warp a row (csr_cuda_rows' loop), not a block of
    more threads than CUDA allows; run in the simulator with the other CUDA schedules."""
    schedule = functools.partial(spmm_schedules.csr_cuda_rows_register, max_threads=16)
    kernel = sp.compile(spmm_script(), "cuda", schedule=schedule, specialize={"feat": 64})
    assert "C_local" not in kernel.source and kernel.resources.threads_per_block == 32


SIMULATOR_DRIVER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sparsetir_py as sp
    sys.path.insert(0, {tests!r})
    from test_schedules import CUDA, cuda_kernel, sddmm_reference
    from strategies import make_csr
    rng = np.random.default_rng(0)
    # Small (the simulator costs ~0.15 ms a thread): an empty row, a full one, rows of 1-6.
    mask = rng.random((14, 11)) < 0.3
    mask[2, :], mask[7, :] = False, True
    A = make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float32")
    results = {{}}
    for op, name in CUDA:
        feat = 40
        kernel = cuda_kernel(op, name, feat)
        m, n = A.shape
        if op == "spmm":
            B = rng.standard_normal((n, feat)).astype(np.float32)
            C = np.full((m, feat), np.nan, np.float32)
            kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)
            results[f"{{op}}/{{name}}"] = float(np.abs(C - A @ B).max())
        else:
            X = rng.standard_normal((m, feat)).astype(np.float32)
            Y = rng.standard_normal((n, feat)).astype(np.float32)
            out = np.full(A.nnz, np.nan, np.float32)
            kernel(a=A.data, x=X, y=Y, c=out, indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)
            results[f"{{op}}/{{name}}"] = float(np.abs(out - sddmm_reference(A, X, Y)).max())
    print(json.dumps(results))
    """
)


def test_cuda_schedules_in_the_simulator():
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run(
        simulator_argv("-c", SIMULATOR_DRIVER.format(tests=tests)),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tests,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == {f"{op}/{name}" for op, name in CUDA}  # spmm and sddmm share names
    for name, err in results.items():
        assert err < 1e-3, (name, err)


# ---------------------------------------------------------------------------------------------- nonzero split
NNZ_SPLIT_DRIVER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sparsetir_py as sp
    sys.path.insert(0, {tests!r})
    from schedules.spmm import csr_cuda_nnz_split
    from sparsetir_py.ops import spmm_script
    from strategies import edge_matrices, make_csr
    rng = np.random.default_rng(0)
    matrices = dict(edge_matrices())
    mask = rng.random((23, 9)) < 0.3
    mask[[0, 5, 22]] = False  # empty rows, the first and the last among them
    mask[7] = True  # a row longer than a thread block's share of nonzeros
    matrices["23x9_random"] = make_csr(mask, rng.uniform(-1, 1, mask.sum()), "int32", "float32")
    results = {{}}
    for name, A in matrices.items():
        idtype, dtype = str(A.indices.dtype), str(A.data.dtype)
        feat = 3
        kernel = sp.compile(spmm_script(idtype, dtype), "cuda", schedule=csr_cuda_nnz_split,
                            specialize={{"feat": feat}})
        m, n = A.shape
        B = rng.standard_normal((n, feat)).astype(dtype)
        C = np.full((m, feat), np.nan, dtype)
        kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)
        want = A.astype(np.float64) @ B.astype(np.float64)
        results[name] = float(np.abs(C - want).max(initial=0.0))
    print(json.dumps(results))
    """
)


def test_cuda_nnz_split_in_the_simulator_on_edge_matrices():
    """The nonzero split (three launches: C = 0, the row search, the atomic accumulation) on
    empty rows, zero nonzeros, one row, rectangular shapes, int64 indices and float64 values:
    every row of C written, NaN-filled output included."""
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run(
        simulator_argv("-c", NNZ_SPLIT_DRIVER.format(tests=tests)),
        capture_output=True,
        text=True,
        env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"},
        timeout=600,
        cwd=os.path.dirname(tests),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 10
    for name, err in results.items():
        assert err < 1e-5, (name, err)


def test_cuda_nnz_split_structure():
    """Fused nonzero loop: atomic adds into C, no init inside the accumulation, three launches
    in order (init, row search, accumulation), B read coalesced along threadIdx.x."""
    kernel = cuda_kernel("spmm", "csr_cuda_nnz_split", 64)
    text = kernel.source
    assert text.index("if launch == 0:") < text.index("C[") < text.index("if launch == 1:")
    assert text.index("lower_bound(J_indptr") < text.index("if launch == 2:") < text.index("cuda.atomic.add(C,")
    assert len(kernel._ks.launches) == 3
    assert kernel.launch_config(m=34, n=34, nnz=156) == ((34,), (256, 8))  # the largest over the launches
    # Per launch: C = 0 (rows x 32 features), the row search (256 per block), 8 nonzeros x 32 lanes.
    assert kernel.launch_configs(m=34, n=34, nnz=156) == [((34,), (32,)), ((1,), (256,)), ((20,), (32, 8))]
    assert "atom.global.add.f32" in kernel.ptx(cc=(8, 0)) or "red.global.add.f32" in kernel.ptx(cc=(8, 0))


@pytest.mark.parametrize("op,name", [(op, n) for op, n in CUDA if "fused" in n or "nnz_split" in n])
def test_fused_cuda_schedules_search_rows_in_their_own_bound_launch(op, name):
    """A fused (i, j) iteration recovers each nonzero's row by a binary search over indptr. The
    search must be spread over threads in a launch of its own, finished before any launch reads
    the rows: left unbound, every thread would repeat the whole O(nnz log m) search."""
    kernel = cuda_kernel(op, name, 64)
    text = kernel.source
    search = text.index("lower_bound(J_indptr")
    starts = [text.index(f"if launch == {k}:") for k in range(len(kernel._ks.launches))]
    assert len(starts) >= 2
    bounds = [*starts, len(text)]
    (own,) = [k for k in range(len(starts)) if bounds[k] < search < bounds[k + 1]]
    body = text[bounds[own] : bounds[own + 1]]
    assert "cuda.blockIdx.x" in body and "cuda.threadIdx.x" in body and "I_of_J[" in body
    assert "I_of_J[" in text[bounds[own + 1] :]  # read by a later launch
    # The fused position indexes A directly (no indptr round trip), in the block or hoisted out of its loop.
    assert op == "spmm" or all("J_indptr" not in index for index in re.findall(r"\bA\[([^\]]*)\]", text))
    assert op == "spmm" or re.search(r"\bA\[", text)


def test_rfactor_write_back_stores_once_from_lane_zero():
    """The warp-sum write-back of `csr_cuda_fused_rfactor` is the whole reduction: it writes
    `init + sum` from lane 0 only, not an init store in all 32 lanes plus lane 0's update (two
    unordered writes to one address)."""
    from sparsetir_py.ir.stmt import BufferStore, IfThenElse
    from sparsetir_py.ir.visit import walk

    name = "csr_cuda_fused_rfactor"
    schedule = sddmm_schedules.SCHEDULES[name]
    sch = sp.Schedule(sddmm_script())
    schedule.stage1(sch)
    sch = sp.Schedule(sp.lower_sparse_iter(sch.mod))
    schedule(sch)
    block = next(n for n in walk(sch.mod["main"].body) if isinstance(n, sp.ir.Block) and n.name == "sddmm0")
    guarded = {id(s) for n in walk(block.body) if isinstance(n, IfThenElse) for s in walk(n.then_case)}
    stores = [n for n in walk(block.body) if isinstance(n, BufferStore) and n.buffer.name == "C"]
    assert len(stores) == 1 and id(stores[0]) in guarded and block.init is None
