"""`python -m bench ... --paired`: ours and baselines in one process, calls interleaved.

A smoke run (cora, width 32, scipy) through the CLI and its worker; the interleaved timer and the
summary on made-up calls, where the answer is known."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.measure import MIN_ROUNDS, interleaved
from bench.paired import summarize

REPO = Path(__file__).resolve().parents[2]


def test_paired_smoke_run(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--paired", "--smoke", "--keep-openblas-env", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for op in ("spmm", "sddmm"):
        report = json.loads((tmp_path / f"{op}-paired.json").read_text())
        assert report["op"] == op and report["baselines"] == ["scipy"] and not report["failures"]
        (r,) = report["results"]
        assert r["graph"] == "cora" and r["width"] == 32 and r["nnz"] == 10556 and r["rounds"] >= MIN_ROUNDS
        assert r["ratios"]["scipy"] == pytest.approx(r["baseline_ms"]["scipy"] / r["ours_ms"])
        assert r["chosen"].startswith("csr")
        assert report["summary"]["scipy"]["pairs"] == 1
        md = (tmp_path / f"{op}-paired.md").read_text()
        assert "| cora | 10556 | 32 |" in md and "geomean vs scipy" in md


def test_interleaved_medians_follow_the_calls():
    """A call that sleeps twice as long has twice the median; both get the same rounds."""
    calls = {"fast": lambda: time.sleep(0.001), "slow": lambda: time.sleep(0.002)}
    medians, rounds = interleaved(calls, repeat=12, budget=0.0)
    assert rounds == MIN_ROUNDS
    assert 1.4 < medians["slow"] / medians["fast"] < 3.0


def test_summary_names_the_worst_pair_and_the_floor():
    results = [
        {"graph": "a", "width": 32, "ratios": {"torch": 2.0}},
        {"graph": "b", "width": 128, "ratios": {"torch": 0.5}},
        {"graph": "c", "width": 512, "ratios": {"torch": 1.0}},
    ]
    s = summarize("sddmm", results, ["torch"])["torch"]
    assert s["geomean"] == pytest.approx(1.0) and s["pairs"] == 3 and s["below_floor"] == 1
    assert s["worst"] == {"ratio": 0.5, "graph": "b", "width": 128} and s["target"] == 1.5
