"""Worker groups in-process (with stand-in libraries) and the worker protocol across processes."""

import sys
import time

import numpy as np
import pytest

from bench import libraries
from bench.libraries import LIBRARIES, Library, Prepared, StructureMismatch, same_structure
from bench.protocol import MARK
from bench.runner import Config, run_worker, worker_env
from bench.worker import run_group


def job(op="spmm", library="scipy", graph="karate", widths=(4, 8), **extra):
    return {
        "kind": "group",
        "op": op,
        "library": library,
        "graph": {"name": graph},
        "widths": list(widths),
        "repeat": 3,
        "min_repeat": 2,
        "budget": 0.05,
        "threads": 1,
        "seed": 0,
        "rtol": 1e-4,
        **extra,
    }


def collect(job_) -> list[dict]:
    events = []
    run_group(job_, events.append)
    return events


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_scipy_group_is_checked_and_timed(op):
    env, *results = collect(job(op))
    assert env["event"] == "env" and env["version"]
    assert [r["width"] for r in results] == [4, 8]
    for r in results:
        assert r["status"] == "ok", r
        assert r["nnz"] == 156 and r["m"] == r["n"] == 34 and r["index_bytes"] == 4
        assert 2 <= len(r["times_s"]) <= 3 and r["median_s"] > 0
        assert r["max_rel_err"] < 1e-5


class Broken(Library):
    """Adds 1 to one entry of scipy's result, or raises at a given width."""

    def prepare(self, op, A, operands, schedule=None):
        if operands["B"].shape[1] == 8:
            raise RuntimeError("no kernel for width 8")
        B = operands["B"]

        def wrong():
            C = A @ B
            C[0, 0] += 1.0
            return C

        return Prepared(wrong, np.asarray)


def test_a_wrong_result_is_reported_and_not_timed(monkeypatch):
    monkeypatch.setitem(LIBRARIES, "broken", Broken("broken", "test stand-in"))
    _, wrong, error = collect(job(library="broken"))
    assert wrong["status"] == "wrong" and "first at (0, 0)" in wrong["message"]
    assert "times_s" not in wrong
    assert error["status"] == "error" and "RuntimeError: no kernel for width 8" in error["message"]


def test_structure_mismatch_is_an_error():
    from sparsetir_py.data import load_matrix

    A = load_matrix("karate")
    same_structure(A, A.indptr.copy(), A.indices.copy(), "copy")
    indices = A.indices.copy()
    indices[[0, 1]] = indices[[1, 0]]
    with pytest.raises(StructureMismatch, match="swapped"):
        same_structure(A, A.indptr, indices, "swapped")


def test_worker_process_reports_events_and_exit():
    env = worker_env(1, {}, keep_openblas_env=True)
    events = list(run_worker(job(widths=(4,)), env, timeout=300))
    assert [e["event"] for e in events] == ["env", "result", "exit"]
    assert events[0]["environment"]["env"]["OMP_NUM_THREADS"] == "1"
    assert events[1]["status"] == "ok" and events[-1]["code"] == 0


def test_worker_crash_is_reported_with_its_stderr():
    env = worker_env(1, {}, keep_openblas_env=True)
    events = list(run_worker(job(library="no-such-library"), env, timeout=300))
    assert events[-1]["event"] == "exit" and events[-1]["code"] != 0
    assert "KeyError" in events[-1]["stderr_tail"]


def test_worker_env_pins_threads_and_drops_openblas(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OMP_NUM_THREADS", "64")
    env = worker_env(2, {"MKL_RT": "/x/libmkl_rt.so.3"})
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["NUMBA_NUM_THREADS"] == "2"
    assert env["OMP_WAIT_POLICY"] == "passive" and env["MKL_RT"] == "/x/libmkl_rt.so.3"
    assert "OPENBLAS_CORETYPE" not in env
    assert worker_env(2, {}, keep_openblas_env=True)["OPENBLAS_CORETYPE"] == "Haswell"
    assert worker_env(2, {}, omp_wait_policy="active")["OMP_WAIT_POLICY"] == "active"


def test_every_library_is_described():
    for name, lib in LIBRARIES.items():
        assert lib.name == name and lib.target in ("cpu", "cuda") and lib.description
        assert set(lib.notes) == set(lib.ops), name
    assert LIBRARIES["mkl"].ops == ("spmm",)


def test_missing_module_is_a_note(monkeypatch):
    monkeypatch.setattr(libraries.importlib.util, "find_spec", lambda name: None)
    assert "no module `torch`" in LIBRARIES["torch"].missing()
    assert LIBRARIES["scipy"].missing() is None  # needs nothing optional


def test_mkl_needs_the_runtime_library(monkeypatch):
    monkeypatch.setattr(libraries.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(libraries, "mkl_rt", lambda: None)
    assert "libmkl_rt.so" in LIBRARIES["mkl"].missing()


def test_config_defaults_match_the_issue():
    c = Config(op="spmm", graphs=["cora"], widths=[32], baselines=["scipy"])
    assert c.threads == 2 and c.targets == ("cpu",) and c.omp_wait_policy == "passive"


@pytest.mark.parametrize(("schedule", "status"), [("csr_cpu_rows_tiled", "ok"), ("no_such_schedule", "error")])
def test_ours_runs_a_shipped_schedule_by_name(schedule, status):
    env = worker_env(1, {}, keep_openblas_env=True)
    events = list(run_worker(job(library="sparsetir", widths=(8,), schedule=schedule), env, timeout=600))
    (result,) = [e for e in events if e["event"] == "result"]
    assert result["status"] == status, result
    if status == "error":
        assert "unknown spmm schedule 'no_such_schedule'" in result["message"]


def test_a_hung_worker_is_killed_after_the_timeout():
    env = worker_env(1, {}, keep_openblas_env=True)
    t0 = time.perf_counter()
    events = list(run_worker(job(), env, timeout=1.0, command=[sys.executable, "-c", "import time; time.sleep(60)"]))
    assert time.perf_counter() - t0 < 30
    assert events[-1]["event"] == "exit" and events[-1]["code"] != 0
    assert "worker killed after 1 s" in events[-1]["stderr_tail"]


def test_a_noisy_worker_does_not_block():
    """Far more stderr than a pipe holds (64 KiB) must not stall the worker; other stdout lines
    are ignored."""
    code = "import sys; sys.stderr.write('x' * 1_000_000); print('hello'); print(sys.argv[1])"
    command = [sys.executable, "-c", code, MARK + '{"event": "env"}']
    events = list(run_worker(job(), worker_env(1, {}, keep_openblas_env=True), timeout=60, command=command))
    assert [e["event"] for e in events] == ["env", "exit"] and events[-1]["code"] == 0
    assert events[-1]["stderr_tail"] == "x" * 3000
