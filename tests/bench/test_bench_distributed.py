"""`python -m bench spmm --distributed 2 --smoke`: a LocalCluster of 2 workers on cora, checked
against scipy, every time and ratio reported."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.distributed import _bytes_per_call, _longest_task_per_call

pytest.importorskip("distributed")
REPO = Path(__file__).resolve().parents[2]


def test_distributed_smoke_run(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench", "spmm", "--distributed", "2", "--smoke", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "spmm-distributed.json").read_text())
    assert report["workers"] == 2 and report["threads_per_worker"] == 1
    (r,) = report["results"]
    assert r["status"] == "ok" and r["graph"] == "cora" and r["width"] == 32
    assert r["row_blocks"] == 2 and sum(r["block_nnz"]) == r["nnz"]
    for key in ("ops_ms", "ops_csr_ms", "reuse_ms", "reuse_auto_ms", "one_shot_ms", "scatter_ms", "compute_ms"):
        assert 0 < r[key] < 60_000, key
    assert len(r["formats"]) == r["row_blocks"] and r["client_bytes_per_call"] > 0
    assert r["reuse_overhead"] == pytest.approx(r["reuse_ms"] / r["ops_ms"])
    assert max(r["reuse_max_rel_err"], r["one_shot_max_rel_err"]) < 1e-4
    assert "| cora | 32 |" in (tmp_path / "spmm-distributed.md").read_text()


def test_distributed_bad_worker_count(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench", "spmm", "--distributed", "0", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "--distributed" in done.stderr and "positive" in done.stderr


def test_longest_task_per_call_and_bytes_model():
    def task(key, *spans):
        return {"key": key, "startstops": [{"action": a, "start": s, "stop": e} for a, s, e in spans]}

    tasks = [
        task("sparsetir-spmm-aaa-0-0-0", ("transfer", 0, 5), ("compute", 5, 6)),
        task("sparsetir-spmm-aaa-0-1-0", ("compute", 0, 3)),
        task("sparsetir-spmm-bbb-0-0-0", ("compute", 0, 1)),
        task("sparsetir-spmm-ccc-0-0-0", ("compute", 0, 2)),
    ]
    assert _longest_task_per_call(tasks) == 2  # calls: 3, 1, 2

    class A:
        shape, nnz = (10, 20), 30

    assert _bytes_per_call("spmm", A, 4, blocks=2, workers=2) == 4 * (20 * 4 * 2 + 10 * 4)
    assert _bytes_per_call("sddmm", A, 4, blocks=1, workers=2) == 4 * (10 * 4 + 20 * 4 + 30)
