"""The CUDA measurement path of ours (device arrays, synchronisation, copy back) under Numba's
CUDA simulator: no GPU needed. Real GPU runs go through the same code."""

import pytest

from bench.runner import run_worker, worker_env


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_cuda_group_runs_under_the_simulator(op):
    job = {
        "kind": "group",
        "op": op,
        "library": "sparsetir-cuda",
        "graph": {"name": "karate"},
        "widths": [8],
        "repeat": 2,
        "min_repeat": 2,
        "budget": 0.0,
        "threads": 1,
        "seed": 0,
        "rtol": 1e-4,
    }
    env = worker_env(1, {"NUMBA_ENABLE_CUDASIM": "1"}, keep_openblas_env=True)
    events = list(run_worker(job, env, timeout=600))
    exit_event = events[-1]
    assert exit_event["code"] == 0, exit_event["stderr_tail"]
    (result,) = [e for e in events if e["event"] == "result"]
    assert result["status"] == "ok", result
    assert result["max_rel_err"] < 1e-5 and len(result["times_s"]) == 2
