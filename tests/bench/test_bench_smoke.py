"""Smoke run of the benchmark suite, as `make test` runs it: one small graph, scipy only.

Optional baselines (MKL, torch, GraphBLAS) need not be installed; the run must work either way.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--smoke", "--no-progress", "--keep-openblas-env", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return out, done


def test_smoke_run_exits_cleanly(smoke_out):
    _, done = smoke_out
    assert done.returncode == 0, done.stdout + done.stderr
    assert "geomean vs scipy" in done.stdout


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_smoke_json_is_sane(smoke_out, op):
    """Both libraries ran on cora at width 32, checked against scipy, with positive times and a
    bandwidth below anything a 2-core machine could reach."""
    out, _ = smoke_out
    report = json.loads((out / f"{op}.json").read_text())
    assert report["op"] == op
    assert report["config"]["graphs"] == ["cora"] and report["config"]["widths"] == [32]
    assert report["config"]["threads"] == 2
    assert 0.5 < report["stream"]["best_GBps"] < 2000
    results = {r["library"]: r for r in report["results"]}
    assert set(results) == {"sparsetir", "scipy"}
    for r in results.values():
        assert r["status"] == "ok", r
        assert r["graph"] == "cora" and r["width"] == 32 and r["nnz"] == 10556
        assert r["max_rel_err"] < report["config"]["rtol"]
        assert len(r["times_s"]) >= 3
        assert 0 < min(r["times_s"]) <= r["median_s"] <= max(r["times_s"]) < 5
        assert 0 < r["GBps"] < 10_000
    (comparison,) = report["comparisons"]
    assert comparison["baseline"] == "scipy"
    assert comparison["ratio"] == pytest.approx(results["scipy"]["median_s"] / results["sparsetir"]["median_s"])
    assert report["geomean"]["scipy"]["count"] == 1
    # Workers pinned their threads and reported them.
    env = report["libraries"]["sparsetir"]["environment"]
    assert env["threads"]["numba"] == 2
    assert env["env"]["OMP_WAIT_POLICY"] == "passive"


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_smoke_markdown_has_the_table(smoke_out, op):
    out, _ = smoke_out
    text = (out / f"{op}.md").read_text()
    assert text.startswith(f"# {op.upper()} benchmark")
    header = (
        "| graph | nnz | width | sparsetir ms | tune s | chosen | GB/s | %STREAM | roofline MB | roofline ms "
        "| % of roofline | scipy ms (ratio) |"
    )
    assert header in text
    row = next(line for line in text.splitlines() if line.startswith("| cora |"))
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    assert [cells["graph"], cells["nnz"], cells["width"]] == ["cora", "10556", "32"]
    assert float(cells["sparsetir ms"]) > 0 and float(cells["tune s"]) >= 0
    assert cells["chosen"].startswith("csr")  # cora at width 32: the model alone picks a CSR schedule
    # The roofline: the traffic with reuse at the STREAM rate, a fraction of the kernel's time.
    assert float(cells["roofline MB"]) > 0 and float(cells["roofline ms"]) > 0
    assert cells["% of roofline"].endswith("%")
    assert cells["scipy ms (ratio)"].endswith("x)")
    assert "## Geometric mean of the ratios" in text


def test_a_graph_given_as_an_npz_path(tmp_path):
    """`--graphs` takes a scipy .npz file the suite has never seen (here rectangular, with empty
    rows): the graph is named by its file, results are checked against scipy like the others."""
    import numpy as np
    import scipy.sparse

    A = scipy.sparse.random(300, 170, density=0.05, format="csr", random_state=np.random.default_rng(7))
    A = A.tolil()
    A[10:40] = 0  # empty rows
    path = tmp_path / "unseen-graph.npz"
    scipy.sparse.save_npz(path, A.tocsr())
    out = tmp_path / "out"
    argv = ["spmm", "--smoke", "--no-progress", "--keep-openblas-env", "--graphs", str(path), "--out", str(out)]
    done = subprocess.run([sys.executable, "-m", "bench", *argv], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "spmm.json").read_text())
    results = {r["library"]: r for r in report["results"]}
    assert set(results) == {"sparsetir", "scipy"}
    for r in results.values():
        assert r["status"] == "ok", r
        assert r["graph"] == "unseen-graph" and r["nnz"] == A.tocsr().nnz
    bad = subprocess.run(
        [sys.executable, "-m", "bench", "spmm", "--smoke", "--graphs", str(tmp_path / "missing.npz")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode != 0 and "unknown graph(s)" in bad.stderr


def test_format_params_parse():
    from bench.__main__ import _format_params

    assert _format_params(["block_size=4", "buckets=[1, 2, 4]", "name=x"]) == {
        "block_size": 4,
        "buckets": [1, 2, 4],
        "name": "x",
    }
    with pytest.raises(SystemExit, match="K=V"):
        _format_params(["oops"])


def test_ours_reports_the_conversion_time():
    """`--format` converts A once in `prepare` and times it; the call itself runs the format."""
    import numpy as np

    from bench.libraries import LIBRARIES
    from sparsetir_py.data import load_matrix

    A = load_matrix("karate").astype(np.float32)
    B = np.ones((A.shape[1], 4), np.float32)
    prepared = LIBRARIES["sparsetir"].prepare("spmm", A, {"B": B}, format="bsr", format_params={"block_size": 2})
    assert prepared.convert_s is not None and prepared.convert_s > 0
    np.testing.assert_allclose(prepared.extract(prepared.fn()), A @ B, rtol=1e-5)
