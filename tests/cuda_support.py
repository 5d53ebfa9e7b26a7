"""What the CUDA tests need to know about this machine."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np


@functools.cache
def ptx_unavailable() -> str | None:
    """Why PTX cannot be compiled here (None when it can)."""
    import numba

    if numba.config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM is set: PTX needs the real numba-cuda"
    try:
        from numba import cuda

        cuda.compile_ptx(lambda a: None, (numba.float32[::1],), cc=(8, 0))
    except Exception as e:  # no NVVM / nvrtc wheels
        return f"numba-cuda cannot compile PTX here: {type(e).__name__}: {e}"
    return None


def simulator_argv(*args: str | Path) -> list[str]:
    """The command that runs `python *args` (a script and its arguments, or `-c CODE`) under
    Numba's CUDA simulator, with thread blocks that wait for their threads instead of polling
    them (`fast_cudasim.py`: the same kernels' results, in a fraction of the time)."""
    return [sys.executable, str(Path(__file__).resolve().with_name("fast_cudasim.py")), *map(str, args)]


def simulated_run(tmp_path_factory, tag: str, script: Path) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """Run `script` once per pytest run under Numba's CUDA simulator (a subprocess:
    NUMBA_ENABLE_CUDASIM must be set before numba.cuda is imported, and the rest of the suite
    needs the real numba-cuda); `python script OUT` writes `OUT` (.npz) and `OUT.json`. Under
    xdist the workers share one run (a lock file in the run's base folder)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        base = tmp_path_factory.mktemp(f"{tag}_cudasim")
        return _simulate_once(script, base / "outputs.npz", base / "cache")
    shared = tmp_path_factory.getbasetemp().parent  # one folder per pytest run, shared by workers
    with open(shared / f"{tag}_cudasim.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _simulate_once(script, shared / f"{tag}_cudasim.npz", shared / f"{tag}_cudasim_cache")


def _simulate_once(script: Path, out: Path, cache: Path) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    if not out.with_suffix(".json").is_file():
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONWARNINGS": "ignore", "SPARSETIR_CACHE_DIR": str(cache)}
        # The checkout under test, not whichever copy of the package is installed: a script's own
        # folder, not the working directory, starts its sys.path.
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        proc = subprocess.run(simulator_argv(script, out), env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        if proc.returncode != 0 or not out.with_suffix(".json").is_file():
            raise RuntimeError(f"the simulator run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    results = json.loads(out.with_suffix(".json").read_text())
    with np.load(out) as saved:
        return results, dict(saved)


def simulate_cases(out: Path, cases, run) -> None:
    """The simulator side of `simulated_run` for a test module of named cases: `run(case)` for
    each, its output saved in `out` (.npz) and "ok" or the traceback in `out.json`, so that one
    failing case is reported by its own test."""
    import traceback

    outputs, results = {}, {}
    for case in cases:
        try:
            outputs[case] = run(case)
            results[case] = "ok"
        except Exception:
            results[case] = traceback.format_exc()
    np.savez(out, **outputs)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
