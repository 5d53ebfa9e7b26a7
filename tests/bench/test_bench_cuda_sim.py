"""The CUDA measurement path of ours (device arrays, synchronisation, copy back) under Numba's
CUDA simulator: no GPU needed. Real GPU runs go through the same code."""

import numpy as np
import pytest
import scipy.sparse
from cuda_support import simulator_argv

from bench.runner import run_worker, worker_env


@pytest.mark.parametrize(("op", "fmt"), [("spmm", "csr"), ("sddmm", "csr"), ("spmm", "hyb")])
def test_cuda_group_runs_under_the_simulator(op, fmt, tmp_path):
    # A small graph with an empty row and a full one, given by path as `--graphs` gives one: the
    # simulator costs ~0.15 ms a thread, and SDDMM's default schedule runs 32 lanes a nonzero.
    rng = np.random.default_rng(0)
    A = scipy.sparse.random(12, 10, density=0.2, format="csr", dtype=np.float32, random_state=rng)
    A = A.tolil()
    A[3, :] = 0
    A[5, :] = 1
    path = tmp_path / "tiny.npz"
    scipy.sparse.save_npz(path, A.tocsr())
    job = {
        "kind": "group",
        "op": op,
        "library": "sparsetir-cuda",
        "format": fmt,
        "graph": {"name": "tiny", "path": str(path)},
        "widths": [8],
        "repeat": 2,
        "min_repeat": 2,
        "budget": 0.0,
        "threads": 1,
        "seed": 0,
        "rtol": 1e-4,
    }
    env = worker_env(1, {"NUMBA_ENABLE_CUDASIM": "1"}, keep_openblas_env=True)
    events = list(run_worker(job, env, timeout=600, command=simulator_argv("-m", "bench.worker")))
    exit_event = events[-1]
    assert exit_event["code"] == 0, exit_event["stderr_tail"]
    (result,) = [e for e in events if e["event"] == "result"]
    assert result["status"] == "ok", {k: v for k, v in result.items() if k != "times_s"}
    assert result["max_rel_err"] < 1e-5 and len(result["times_s"]) == 2
