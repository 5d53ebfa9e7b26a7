"""`sp.tune.spmm` / `sp.tune.sddmm` and `format="auto"` in `sp.ops`.

The search runs on small matrices with the timing threshold lowered (so candidates are really
timed and compiled); the cache is a temporary folder per test. Checked: the table lists every
candidate in model order and the winner is the fastest timed one; the result comes back from
memory and from disk (a new process reads it), a damaged cache file is searched again; the key
follows the structure, not the values; `format="auto"` equals scipy on real and random matrices
(empty rows and matrices, one row, rectangular, int64 indices, float64, a 1-D B); bad arguments
are named errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sps
from strategies import edge_matrices

import sparsetir_py as sp
from sparsetir_py import tune, tuning

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETIR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPARSETIR_TUNE_DIR", raising=False)  # results under <cache>/tune/
    monkeypatch.setattr(tuning, "_MEMORY", {})
    return tmp_path


@pytest.fixture
def timed(monkeypatch):
    """Time candidates even on small matrices."""
    monkeypatch.setattr(tuning, "TIMING_GRAIN", 0)


def power_law(m=400, n=300, seed=0, dtype=np.float32) -> sps.csr_matrix:
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.zipf(1.8, m), n)
    lengths[::37] = 0  # empty rows
    rows = np.repeat(np.arange(m), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths]) if lengths.sum() else np.zeros(0, int)
    A = sps.csr_matrix((rng.uniform(-1, 1, len(rows)).astype(dtype), (rows, cols)), shape=(m, n))
    A.sort_indices()
    return A


def test_spmm_search_times_the_best_candidates(cache, timed):
    A = power_law()
    result = sp.tune.spmm(A, 16, top=2, budget=0.01, progress=False)
    cands = list(result.table)
    assert [c.predicted_s for c in cands] == sorted(c.predicted_s for c in cands)
    timed_ = [c for c in cands if c.measured_s is not None]
    assert len(timed_) == 2 and all(c.setup_s is not None for c in timed_)
    assert result.measured and result.table.winner is min(timed_, key=lambda c: c.measured_s)
    assert result.seconds == result.table.winner.measured_s
    assert not result.cached and result.tuning_seconds > 0
    B = np.random.default_rng(1).standard_normal((300, 16)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, **result.ops_kwargs()), A @ B, rtol=1e-4, atol=1e-4)
    text = str(result.table)
    assert "chosen" in text and all(c.label in text for c in cands)
    assert "<table>" in result.table._repr_html_() and "chosen" in result._repr_html_()


def test_sddmm_search_includes_the_nonzero_split(cache, timed):
    A = power_law(seed=2)
    result = sp.tune.sddmm(A, 8, top=3, budget=0.01, progress=False)
    labels = [c.label for c in result.table]
    assert any("csr_cpu_nonzeros" in label for label in labels)
    X = np.random.default_rng(1).standard_normal((400, 8)).astype(np.float32)
    Y = np.random.default_rng(2).standard_normal((300, 8)).astype(np.float32)
    S = sp.ops.sddmm(A, X, Y, **result.ops_kwargs())
    np.testing.assert_allclose(S.toarray(), A.multiply(X @ Y.T).toarray(), rtol=1e-4, atol=1e-4)


def test_small_problems_are_decided_by_the_model(cache):
    result = sp.tune.spmm(sp.data.load_matrix("karate"), 8, progress=False)
    assert not result.measured and all(c.measured_s is None for c in result.table)
    assert result.format == "csr" and result.seconds == result.table.winner.predicted_s


def test_results_are_cached_in_memory_and_on_disk(cache, timed):
    A = power_law(seed=3)
    first = sp.tune.spmm(A, 16, top=1, budget=0.01, progress=False)
    files = list((cache / "tune").glob("*.json"))
    assert len(files) == 1
    again = sp.tune.spmm(A, 16, top=1, progress=False)
    assert again.cached and again.tuning_seconds == 0 and again.table.winner.label == first.table.winner.label
    # Another process reads the disk cache: the same choice, not searched again.
    script = (
        "import sys, json, numpy as np, scipy.sparse as sps, sparsetir_py as sp\n"
        "A = sps.load_npz(sys.argv[1])\n"
        "r = sp.tune.spmm(A, 16, progress=False)\n"
        "print(json.dumps([r.cached, r.table.winner.label]))\n"
    )
    sps.save_npz(cache / "A.npz", A)
    env = {**os.environ, "SPARSETIR_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", script, str(cache / "A.npz")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True, first.table.winner.label]
    # A damaged file is searched again (and rewritten), not an error: one warning names it.
    files[0].write_text("{not json")
    tuning._MEMORY.clear()
    with pytest.warns(sp.runtime.cache.CacheWarning, match=files[0].name):
        redone = sp.tune.spmm(A, 16, top=1, budget=0.01, progress=False)
    assert not redone.cached and json.loads(files[0].read_text())["op"] == "spmm"


def test_the_key_follows_structure_width_and_target_not_values(cache):
    A = power_law(seed=4)
    B = A.copy()
    B.data = B.data * 3
    mach = tune.machine()
    key = tuning._key("spmm", A, 16, "cpu", mach, np.float32)
    assert tuning._key("spmm", B, 16, "cpu", mach, np.float32) == key
    assert tuning._key("spmm", A, 32, "cpu", mach, np.float32) != key
    assert tuning._key("spmm", A, 16, "cuda", mach, np.float32) != key
    assert tuning._key("sddmm", A, 16, "cpu", mach, np.float32) != key
    C = A.copy()
    C.indices = C.indices.copy()
    C.indices[0] = (C.indices[0] + 1) % A.shape[1]
    assert tuning._key("spmm", sps.csr_matrix(C), 16, "cpu", mach, np.float32) != key


def test_progress_bar_and_printed_table(cache, timed, capsys):
    sp.tune.spmm(power_law(seed=5), 8, top=1, budget=0.01, progress=True)
    captured = capsys.readouterr()
    assert "tuning spmm" in captured.err  # the tqdm bar
    assert "model ms" in captured.out and "chosen" in captured.out


@pytest.mark.parametrize("name", list(edge_matrices()))
@pytest.mark.parametrize(("idtype", "dtype"), [(np.int32, np.float32), (np.int64, np.float64)])
def test_format_auto_equals_scipy(cache, timed, name, idtype, dtype):
    A = edge_matrices()[name]
    A = sps.csr_matrix((A.data.astype(dtype), A.indices.astype(idtype), A.indptr.astype(idtype)), shape=A.shape)
    m, n = A.shape
    rng = np.random.default_rng(0)
    B = rng.standard_normal((n, 4)).astype(dtype)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="auto"), A @ B, rtol=1e-5, atol=1e-5)
    if n:
        v = rng.standard_normal(n).astype(dtype)
        np.testing.assert_allclose(sp.ops.spmm(A, v, format="auto"), A @ v, rtol=1e-5, atol=1e-5)
    X, Y = rng.standard_normal((m, 3)).astype(dtype), rng.standard_normal((n, 3)).astype(dtype)
    S = sp.ops.sddmm(A, X, Y, format="auto")
    np.testing.assert_allclose(S.toarray(), A.multiply(X @ Y.T).toarray(), rtol=1e-5, atol=1e-5)


def test_format_auto_on_a_real_graph(cache):
    A = sp.data.load_matrix("cora")
    B = np.random.default_rng(0).standard_normal((A.shape[1], 32)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="auto"), A @ B, rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_named_errors(cache):
    A = power_law()
    with pytest.raises(sp.InputError, match="unknown operator"):
        tune.tune("spmv", A, 4)
    with pytest.raises(sp.InputError, match="unknown target"):
        sp.tune.spmm(A, 4, target="tpu")
    with pytest.raises(sp.InputError, match="feat must be a non-negative int"):
        sp.tune.spmm(A, -1)
    with pytest.raises(sp.InputError, match="top must be a positive int"):
        sp.tune.spmm(A, 4, top=0)
    with pytest.raises(sp.InputError, match="format 'auto' takes no parameters"):
        sp.ops.spmm(A, np.ones((300, 2), np.float32), format="auto", buckets=[1])
    # A schedule of the caller's with the default format runs CSR with it.
    B = np.ones((300, 2), np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, schedule="csr_cpu_rows"), A @ B, rtol=1e-5, atol=1e-5)
    broken = sps.csr_matrix(A)
    broken.indices = broken.indices.copy()
    broken.indices[0] = 10**6
    with pytest.raises(sp.InputError):
        sp.tune.spmm(broken, 4)
