"""`make test-gpu` on a machine without a GPU (this one): both parts skip with the reason and
still write their reports; the bench's table and geomean from rows as a GPU run records them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench import cuda_quick

ROOT = Path(__file__).resolve().parents[2]


def _row(op, graph, width, ours, cusparse, torch):
    # The batched kernel time: a quarter of the lone call's (rows recorded before it have none).
    cell = lambda ms: {"status": "ok", "ms": ms, "kernel_ms": ms / 4} if isinstance(ms, float) else {"status": ms}  # noqa: E731
    return {"op": op, "graph": graph, "width": width, "nnz": 10, "transfer_ms": 1.5,
            "sparsetir-cuda": cell(ours), "cusparse": cell(cusparse), "torch-cuda": cell(torch)}  # fmt: skip


def test_bench_table_and_geomean(tmp_path):
    rows = [
        _row("spmm", "cora", 32, 1.0, 2.0, 4.0),
        _row("spmm", "cora", 128, 2.0, 1.0, "ModuleNotFoundError: No module named 'torch'"),
        _row("sddmm", "cora", 32, "wrong: max relative error 0.5", 1.0, 1.0),
    ]
    cuda_quick.write(tmp_path, rows, "a GPU")
    text = (tmp_path / "bench-cuda.md").read_text()
    assert "| spmm | cora | 32 | 1.0000 | not run | not run | 2.0000 | 4.0000 | 2.00x |  |  | 1.500 | 2.00x |" in text
    assert "| spmm | cora | 128 | 2.0000 | not run | not run | 1.0000 | ModuleNotFoundError" in text
    assert "| 0.50x |" in text
    assert "spmm, sparsetir-cuda: geomean speedup over the best baseline 1.00x (2 rows)" in text
    assert "spmm, sparsetir-cuda kernel (batched): geomean speedup over the best baseline 1.00x (2 rows)" in text
    assert "sddmm, sparsetir-cuda: geomean" not in text  # ours was wrong: no ratio
    assert "ops-auto: geomean" not in text  # not run
    assert json.loads((tmp_path / "bench-cuda.json").read_text())["rows"] == rows
    old = _row("spmm", "cora", 512, 1.0, 2.0, 4.0)
    del old["sparsetir-cuda"]["kernel_ms"]  # a row recorded before the batched column
    cuda_quick.write(tmp_path, [old], "a GPU")
    assert "| 1.500 |  |" in (tmp_path / "bench-cuda.md").read_text()


def test_without_a_gpu_both_parts_skip_and_report(tmp_path):
    env = {**os.environ, "SPARSETIR_TEST_GPU": "1", "SPARSETIR_REPORT_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--confcutdir=tests/gpu", "-o", "addopts=",
         "tests/gpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-2000:] + tests.stderr[-2000:]
    report = json.loads((tmp_path / "test-gpu.json").read_text())
    assert report["counts"] == {"skipped": len(report["tests"])} and len(report["tests"]) > 50
    assert "no CUDA GPU" in report["unavailable"]
    assert "no CUDA GPU" in (tmp_path / "test-gpu.md").read_text()
    bench = subprocess.run([sys.executable, "-m", "bench.cuda_quick"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert bench.returncode == 0 and "skipped" in bench.stdout
    assert "skipped: no CUDA GPU" in (tmp_path / "bench-cuda.md").read_text()
