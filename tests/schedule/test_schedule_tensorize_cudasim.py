"""Tensorized CUDA kernels executed in Numba's CUDA simulator, in a subprocess.

`NUMBA_ENABLE_CUDASIM=1` must be set before `numba.cuda` is first imported, and the rest of the
test suite needs the real numba-cuda (PTX), so this file is also the simulator driver: pytest
imports it and `sim_results` runs `python test_schedule_tensorize_cudasim.py OUT.json` once,
which sets the variable first, runs every check of `CHECKS` and writes "ok" or the traceback of
each. The simulator has no warp intrinsics: the kernels run with the per-warp emulation of
`shfl_down_sync` from `sparsetir_py.runtime.cuda_warp`, selected when that module is imported;
the generated source is the same as for PTX (asserted here). Inputs are tiny (about 0.15 ms per
simulated thread).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda

import fcntl
import json
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sps

HERE = Path(__file__).resolve().parent
CHECKS: dict[str, Callable[[], None]] = {}


def check(name: str):
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        CHECKS[name] = fn
        return fn

    return register


# ---------------------------------------------------------------------------------------------- the checks
def _csr(m: int, n: int, density: float, seed: int, idtype: str = "int32", dtype: str = "float32"):
    """Canonical CSR with an empty row (row 1) and a full last row."""
    A = sps.random(m, n, density=density, random_state=seed).toarray()
    A[1] = 0
    A[-1] = np.arange(1, n + 1)
    A = sps.csr_matrix(A.astype(dtype))
    A.sort_indices()
    A.indices = A.indices.astype(idtype)
    A.indptr = A.indptr.astype(idtype)
    return A


def _sddmm_kernel(feat: int | None, idtype: str = "int32", dtype: str = "float32", warps: int = 2):
    import sparsetir_py as sp
    from sparsetir_py.ops import sddmm_script

    func = sddmm_script(idtype, dtype)
    if feat is not None:
        func = func.specialize({"feat": feat})
    sch = sp.Schedule(sp.lower_sparse_iter(func))
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    sch.bind(i, "blockIdx.x")
    j, k = sch.get_loops(sch.get_block("sddmm1"))
    _, j_inner = sch.split(j, [None, warps])
    sch.bind(j_inner, "threadIdx.y")
    _, k_inner = sch.split(k, [None, 32])
    sch.tensorize(k_inner, "warp_sum_32", "cuda")
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cuda")
    assert "shfl_down_sync(4294967295, red_buf, 16)" in kernel.source  # red_buf: a local register
    return kernel


def _run_sddmm(kernel, A, feat: int, seed: int, pass_feat: bool = True) -> None:
    m, n = A.shape
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, feat)).astype(A.dtype)
    Y = rng.standard_normal((n, feat)).astype(A.dtype)
    C = np.full(A.nnz, np.nan, A.dtype)
    kwargs = dict(a=A.data, x=X, y=Y, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)
    if pass_feat:
        kwargs["feat"] = feat
    kernel(**kwargs)
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    want = A.data.astype(np.float64) * np.einsum("ek,ek->e", X[rows].astype(np.float64), Y[A.indices])
    tol = 1e-4 if A.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(C, want, rtol=tol, atol=tol)


@check("sddmm/feat40")
def _sddmm_guarded() -> None:
    # feat = 40: two k_outer steps, lanes 8..31 of the second add 0 (the split guard).
    _run_sddmm(_sddmm_kernel(None), _csr(5, 6, 0.4, 1), 40, 0)


@check("sddmm/feat32_specialized")
def _sddmm_exact() -> None:
    _run_sddmm(_sddmm_kernel(32), _csr(4, 5, 0.5, 2), 32, 1, pass_feat=False)


@check("sddmm/whole_reduction_per_warp")
def _sddmm_whole() -> None:
    """feat = 32 and `k` tensorized unsplit: no reduction iterator is left, so the init runs in the
    block's body (every lane writes 0 before the shuffles), then lane 0 adds the sum."""
    import sparsetir_py as sp
    from sparsetir_py.ops import sddmm_script

    sch = sp.Schedule(sp.lower_sparse_iter(sddmm_script().specialize({"feat": 32})))
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    sch.bind(i, "blockIdx.x")
    _, k = sch.get_loops(sch.get_block("sddmm1"))
    sch.tensorize(k, "warp_sum_32", "cuda")
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cuda")
    _run_sddmm(kernel, _csr(3, 4, 0.5, 7), 32, 3, pass_feat=False)


@check("sddmm/int64_float64")
def _sddmm_f64() -> None:
    _run_sddmm(_sddmm_kernel(None, "int64", "float64", warps=1), _csr(4, 5, 0.5, 3, "int64", "float64"), 33, 2)


@check("sddmm/against_interpreter")
def _sddmm_interp() -> None:
    """The kernel against the Stage I interpreter of the unscheduled script."""
    import sparsetir_py as sp
    from sparsetir_py.ops import sddmm_script

    A = _csr(6, 4, 0.5, 4)
    rng = np.random.default_rng(5)
    X, Y = rng.standard_normal((6, 35)).astype(np.float32), rng.standard_normal((4, 35)).astype(np.float32)
    args = dict(a=A.data, x=X, y=Y, indptr=A.indptr, indices=A.indices, m=6, n=4, feat=35, nnz=A.nnz)
    want, got = np.full(A.nnz, np.nan, np.float32), np.full(A.nnz, np.nan, np.float32)
    sp.interpret(sddmm_script(), **args, c=want)
    _sddmm_kernel(None)(**args, c=got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@check("row_sum/warp_per_row")
def _row_sum() -> None:
    """CSR row sums, a warp per row over a variable-length row (rows longer than 32 too)."""
    import sparsetir_py as sp

    sys.path.insert(0, str(HERE.parent))
    import corpus

    case = corpus.CASES_BY_NAME["csr_reduce"]
    sch = sp.Schedule(sp.lower_sparse_iter(case.build()))
    (i,) = sch.get_loops(sch.get_block("csr_reduce0"))
    sch.bind(i, "blockIdx.x")
    (j,) = sch.get_loops(sch.get_block("csr_reduce1"))
    _, j_inner = sch.split(j, [None, 32])
    sch.tensorize(j_inner, "warp_sum_32", "cuda")
    kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cuda")
    A = _csr(4, 70, 0.3, 6)  # the last row has 70 entries: three j_outer steps
    kwargs, _ = case.make_args(A, np.random.default_rng(0), "int32", "float32")
    kernel(**kwargs)
    np.testing.assert_allclose(kwargs["b"], case.reference(A, kwargs)["b"], rtol=1e-5, atol=1e-4)


@check("sddmm/groups_of_8_lanes_past_the_end")
def _sddmm_groups() -> None:
    """`csr_cuda_fused_rfactor_lanes8`: 8 lanes a nonzero, 16 nonzeros a block (four to a warp).
    With nnz = 4k + 1 the last warp holds one real nonzero and three past the end: every lane must
    still run the shuffles (the emulation raises when a lane of the warp does not arrive), and
    only the real nonzero is written."""
    import sparsetir_py as sp
    from schedules import sddmm as sddmm_schedules
    from sparsetir_py.ops import sddmm_script

    sys.path.insert(0, str(HERE.parent.parent))
    schedule = sddmm_schedules.SCHEDULES["csr_cuda_fused_rfactor_lanes8"]
    for feat, A in ((32, _csr(5, 6, 0.5, 11)), (20, _csr(3, 3, 0.4, 14))):
        assert A.nnz % 4 != 0, A.nnz
        kernel = sp.compile(sddmm_script(), "cuda", schedule=schedule, specialize={"feat": feat})
        assert "shfl_down_sync(4294967295, red_buf, 4)" in kernel.source
        assert "shfl_down_sync(4294967295, red_buf, 16)" not in kernel.source
        _run_sddmm(kernel, A, feat, 4, pass_feat=False)


SHUFFLE = """
from sparsetir_py import script as T


@T.prim_func
def shuffle(a: T.handle, b: T.handle, n: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n * 64,), "float32")
    B = T.match_buffer(b, (n * 64,), "float32")
    for w in T.thread_binding(n, thread="blockIdx.x"):
        for y in T.thread_binding(2, thread="threadIdx.y"):
            for x in T.thread_binding(32, thread="threadIdx.x"):
                B[w * 64 + y * 32 + x] = T.shfl_down_sync(T.int64(4294967295), A[w * 64 + y * 32 + x], DELTA)
"""


@check("shim/shfl_down_semantics")
def _shim() -> None:
    """The emulation gives CUDA's result: lane + delta of the same warp, else the lane's own value."""
    import sparsetir_py as sp

    for delta in (1, 5, 16, 31):
        kernel = sp.build(sp.from_script(SHUFFLE.replace("DELTA", str(delta))), target="cuda")
        a = np.arange(3 * 64, dtype=np.float32)
        b = np.full_like(a, np.nan)
        kernel(a=a, b=b, n=3)
        lane = np.arange(a.size) % 32
        want = np.where(lane + delta < 32, a + delta, a)
        np.testing.assert_array_equal(b, want)


@check("shim/selected_at_import")
def _selected() -> None:
    from sparsetir_py.runtime import cuda_warp

    assert cuda_warp.shfl_down_sync is cuda_warp._simulated_shfl_down_sync


def main() -> int:
    out = Path(sys.argv[1])
    try:
        from numba import config, cuda  # noqa: F401

        assert config.ENABLE_CUDASIM
    except Exception:
        out.write_text(json.dumps({"__import__": traceback.format_exc()}))
        return 0
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    out.write_text(json.dumps(results, indent=1))
    return 0


# ---------------------------------------------------------------------------------------------- the tests
def _run_driver(out: Path, cache: Path) -> None:
    from cuda_support import simulator_argv  # here: this file also runs as the driver, without tests/ on its path

    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONWARNINGS": "ignore", "SPARSETIR_CACHE_DIR": str(cache)}
    proc = subprocess.run(
        simulator_argv(Path(__file__).resolve(), out), env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"the simulator driver failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="module")
def sim_results(tmp_path_factory) -> dict[str, str]:
    """One driver run per pytest run: pytest-xdist workers share it through a lock file."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        base = tmp_path_factory.mktemp("tensorize_cudasim")
        _run_driver(base / "results.json", base / "cache")
        return json.loads((base / "results.json").read_text())
    shared = tmp_path_factory.getbasetemp().parent  # one folder per pytest run, shared by workers
    out = shared / "tensorize_cudasim_results.json"
    with open(shared / "tensorize_cudasim.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            _run_driver(out, shared / "tensorize_cudasim_cache")
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(CHECKS))
def test_in_simulator(sim_results, name):
    if "__import__" in sim_results:
        pytest.skip(f"the CUDA simulator cannot start here:\n{sim_results['__import__']}")
    assert sim_results.get(name) == "ok", f"`{name}` failed in the simulator:\n{sim_results.get(name)}"


if __name__ == "__main__":
    sys.exit(main())
