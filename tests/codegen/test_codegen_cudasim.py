"""The CUDA kernels executed in Numba's CUDA simulator, one process for all of them.

`NUMBA_ENABLE_CUDASIM=1` must be set before numba.cuda is imported, so `cudasim_driver.py`
runs every check in a subprocess and writes one JSON result per check; each test here asserts
one of them. Under pytest-xdist the workers share one run through a lock file. The checks: every
hand-written kernel of `stage3_kernels` on tiny matrices (random with empty rows, zero nnz, a
full row) and other dtypes, device-array arguments and their checks, an out-of-bounds read
reported with a traceback into the generated file, and the lowered corpus (one-thread launches).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import corpus
import pytest
import stage3_kernels as K
from cuda_support import simulator_argv

DRIVER = Path(__file__).with_name("cudasim_driver.py")
CASE_CHECKS = [f"{case.name}/{matrix}" for case in K.CASES for matrix in ("random", "empty", "dense_row")]
OTHER_CHECKS = [
    "csrmm/int64-float64",
    "sddmm/int64-float64",
    "lookup/int64-float32",
    "math_ops/int32-float64",
    "launch/csrmm",
    "launch/no_rows",
    "device_arrays/csrmm",
    "device_arrays/bad_indptr",
    "device_arrays/wrong_shape",
    "input_error/numpy_dtype",
    "traceback/out_of_bounds",
    "guards/sibling_thread_loops",
]
CORPUS_CHECKS = [f"corpus/{case.name}" for case in corpus.CASES]


def _run_driver(out: Path, cache: Path) -> dict[str, str]:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(simulator_argv(DRIVER, out, cache), env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"the simulator driver failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def sim_results(tmp_path_factory) -> dict[str, str]:
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        base = tmp_path_factory.mktemp("cudasim")
        return _run_driver(base / "results.json", base / "cache")
    shared = tmp_path_factory.getbasetemp().parent  # one folder per pytest run, shared by workers
    out = shared / "cudasim_results.json"
    with open(shared / "cudasim_results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            _run_driver(out, shared / "cudasim_cache")
    return json.loads(out.read_text())


def _assert_ok(results: dict[str, str], name: str) -> None:
    if "__import__" in results:
        pytest.skip(f"the CUDA simulator cannot start here:\n{results['__import__']}")
    assert name in results, f"the driver did not run `{name}`"
    assert results[name] == "ok", f"`{name}` failed in the simulator:\n{results[name]}"


@pytest.mark.parametrize("name", CASE_CHECKS)
def test_kernel_in_simulator(sim_results, name):
    _assert_ok(sim_results, name)


@pytest.mark.parametrize("name", OTHER_CHECKS)
def test_runtime_in_simulator(sim_results, name):
    _assert_ok(sim_results, name)


@pytest.mark.parametrize("name", CORPUS_CHECKS)
def test_lowered_corpus_in_simulator(sim_results, name):
    _assert_ok(sim_results, name)


def test_driver_ran_nothing_else(sim_results):
    if "__import__" in sim_results:
        pytest.skip("the CUDA simulator cannot start here")
    assert set(sim_results) == set(CASE_CHECKS + OTHER_CHECKS + CORPUS_CHECKS)
