"""The kernel cache heals itself: damaged files are rewritten or removed, with one warning each.

Each scenario runs in fresh processes with a `SPARSETIR_CACHE_DIR` and `NUMBA_CACHE_DIR` filled
by a fresh process (a process keeps imported kernels in memory, so only a new process reads the
cache again): damage files of one kind (random bytes, truncated, emptied; one kernel each), then
a new process must compute the right answers and warn once per damaged file, naming it, and a
third must find the cache whole again (no warning). A last test starts four processes at once on
an empty cache and checks every answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import json, sys, warnings
import numpy as np
from numba.core import event
import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.runtime.cache import CacheWarning

compiled = []  # the generated kernels this process compiled (not loaded from the cache)
class Compiles(event.Listener):
    def on_start(self, ev):
        pass
    def on_end(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__module__)
event.register("numba:compile", Compiles())
A = load_matrix("karate")
rng = np.random.default_rng(0)
errors = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for dtype in ("float32", "float64"):
        M = A.astype(dtype)
        B = rng.standard_normal((A.shape[1], 8)).astype(dtype)
        errors[f"spmm_{dtype}"] = float(np.abs(sp.ops.spmm(M, B) - M @ B).max())
    X = rng.standard_normal((A.shape[0], 8)).astype(np.float32)
    S = sp.ops.sddmm(A.astype(np.float32), X, X)
    errors["sddmm"] = float(np.abs(S.toarray() - A.multiply(X @ X.T).toarray()).max())
compiled = [m for m in compiled if m.startswith("sparsetir_generated_")]
print(json.dumps({"errors": errors, "warnings": [str(w.message) for w in caught if w.category is CacheWarning],
                  "compiled": compiled}))
"""

KERNELS = 3  # spmm float32, spmm float64, sddmm float32


def run_driver(env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, err in out["errors"].items():
        assert err < 1e-3, (name, err)
    return out


def driver_env(base: Path) -> dict:
    env = {**os.environ, "SPARSETIR_CACHE_DIR": str(base / "kernels"), "NUMBA_CACHE_DIR": str(base / "numba")}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # Python writes bytecode only without it
    return env


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    """One cache filled by a fresh process, and a pristine copy of it: each scenario damages the
    cache in place and `cache_env` restores it, so the kernels compile once per module, not once
    per scenario. (The cache stays at the path it was filled at: Numba's index names its source
    files by their path.)"""
    base = tmp_path_factory.mktemp("filled")
    assert run_driver(driver_env(base))["warnings"] == []
    for name in ("kernels", "numba"):
        shutil.copytree(base / name, base / f"pristine-{name}")
    return base


@pytest.fixture
def cache_env(filled_cache):
    for name in ("kernels", "numba"):
        shutil.rmtree(filled_cache / name, ignore_errors=True)
        shutil.copytree(filled_cache / f"pristine-{name}", filled_cache / name)
    return driver_env(filled_cache), filled_cache


def cache_files(tmp_path: Path, kind: str) -> list[Path]:
    if kind == "source":
        return sorted((tmp_path / "kernels" / "cpu").glob("*.py"))
    if kind == "bytecode":
        return sorted((tmp_path / "kernels" / "cpu" / "__pycache__").glob("*.pyc"))
    pattern = "*.nbi" if kind == "index" else "*.nbc"
    return sorted((tmp_path / "numba").rglob(pattern))


def damage(path: Path, how: str, keep: int = 0) -> None:
    """Random bytes, the first half, or nothing; `keep` leading bytes stay intact (a header)."""
    data = path.read_bytes()
    head, body = data[:keep], data[keep:]
    if how == "random":
        body = np.random.default_rng(len(data)).integers(0, 256, max(len(body), 16), dtype=np.uint8).tobytes()
    elif how == "truncate":
        body = body[: len(body) // 2]
    else:
        head, body = b"", b""
    path.write_bytes(head + body)


@pytest.mark.parametrize("kind", ["source", "index", "data"])
def test_damaged_cache_files_are_repaired(cache_env, kind):
    env, tmp_path = cache_env  # filled by a fresh process (`filled_cache`)
    files = cache_files(tmp_path, kind)
    assert len(files) >= KERNELS, files
    damaged = files[:KERNELS]
    for path, how in zip(damaged, ("random", "truncate", "empty")):
        damage(path, how)
    found = run_driver(env)["warnings"]
    assert len(found) == len(damaged), found  # one warning per damaged file
    for path in damaged:
        assert sum(path.name in w for w in found) == 1, (path.name, found)
    assert run_driver(env)["warnings"] == []  # whole again


def test_damaged_bytecode_is_removed(cache_env):
    """Python repairs a bytecode file with a bad header itself; one whose header is intact but
    whose body is damaged it does not (`bad marshal data`): the cache removes it and warns."""
    env, tmp_path = cache_env  # filled without PYTHONDONTWRITEBYTECODE: bytecode was written
    files = cache_files(tmp_path, "bytecode")
    assert len(files) >= KERNELS, files
    for path in files:
        damage(path, "random", keep=16)  # the 16-byte header of a .pyc stays valid
    found = run_driver(env)["warnings"]
    assert len(found) == len(files), found
    assert all(any(p.name in w for w in found) for p in files)
    assert run_driver(env)["warnings"] == []


def test_concurrent_processes_fill_an_empty_cache(tmp_path):
    """Four processes compile the same kernels into one empty cache at once: each kernel once in
    all (the others wait for it and load it from the cache), every answer right."""
    env = driver_env(tmp_path)
    compiled = []
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        out = json.loads(stdout.strip().splitlines()[-1])
        assert all(err < 1e-3 for err in out["errors"].values()), out
        assert out["warnings"] == [], out  # racing writers never leave a damaged file
        compiled.extend(out["compiled"])
    assert len(compiled) >= KERNELS, compiled
    assert len(compiled) == len(set(compiled)), compiled  # no kernel compiled by two processes
