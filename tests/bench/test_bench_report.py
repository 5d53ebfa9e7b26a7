"""Ratios, bandwidth, geometric means and the written report; planning and the command line."""

import json

import pytest

from bench import __main__ as cli
from bench import libraries
from bench.libraries import LIBRARIES
from bench.measure import bytes_moved
from bench.report import derive, finish, markdown, write
from bench.runner import Config, merge_rounds, plan

STREAM = {"best_GBps": 30.0, "median_GBps": 28.0, "threads": 2, "kernel": "triad", "n": 1, "bytes": 24, "trials": 1}


def result(library, graph, width, median_s, status="ok", **extra):
    r = {"event": "result", "library": library, "graph": graph, "width": width, "status": status}
    r.update({"m": 100, "n": 100, "nnz": 1000, "index_bytes": 4})
    if status == "ok":
        r.update({"median_s": median_s, "times_s": [median_s] * 3})
    else:
        r["message"] = "boom"
    return {**r, **extra}


def record(results, notes=None):
    libs = {name: {"description": LIBRARIES[name].description, "ours": LIBRARIES[name].ours, "version": "1"}
            for name in {r["library"] for r in results}}  # fmt: skip
    return {"stream": dict(STREAM), "libraries": libs, "results": results, "notes": notes or {}, "load": []}


CONFIG = {"graphs": ["g1", "g2"], "widths": [32, 128], "threads": 2, "repeat": 30, "min_repeat": 3, "budget": 1.0}


def test_ratios_geomeans_and_bandwidth():
    results = [
        result("sparsetir", "g1", 32, 1.0),
        result("sparsetir", "g2", 32, 2.0),
        result("mkl", "g1", 32, 0.5),
        result("mkl", "g2", 32, 4.0),
        result("torch", "g1", 32, 3.0),
        result("torch", "g2", 32, 1.0, status="wrong"),
    ]
    report = derive("spmm", record(results))
    ratios = {(c["baseline"], c["graph"]): c["ratio"] for c in report["comparisons"]}
    assert ratios == {("mkl", "g1"): 0.5, ("mkl", "g2"): 2.0, ("torch", "g1"): 3.0}
    assert report["geomean"]["mkl"] == {
        "ratio": pytest.approx(1.0),
        "count": 2,
        "target": 1.3,
        "met": False,
        "worst": {"ratio": 0.5, "graph": "g1", "width": 32},
        "below_floor": 1,
    }
    assert report["geomean"]["torch"]["count"] == 1 and report["geomean"]["torch"]["met"] is True
    ours = results[0]
    assert ours["bytes_model"] == bytes_moved("spmm", 100, 100, 1000, 32)
    assert ours["GBps"] == pytest.approx(ours["bytes_model"] / 1e9)
    assert ours["frac_stream"] == pytest.approx(ours["GBps"] / 30.0)
    assert report["failures"] == ["torch on g2 width 32: wrong: boom"]


def test_no_ratio_against_a_failed_run_of_ours():
    report = derive("sddmm", record([result("sparsetir", "g1", 32, 1.0, "error"), result("torch", "g1", 32, 1.0)]))
    assert report["comparisons"] == [] and report["geomean"] == {}


def test_markdown_and_json_are_written(tmp_path):
    results = [
        result("sparsetir", "g1", 32, 0.002),
        result("torch", "g1", 32, 0.001),
        result("sparsetir", "g2", 32, 0.002, status="wrong"),
        result("torch", "g2", 32, 0.001),
    ]
    notes = {"mkl": "no SDDMM in this library", "graphblas": "skipped: not installed (no module `graphblas`)"}
    report = finish("sddmm", record(results, notes), dict(CONFIG), "python -m bench sddmm")
    json_path, md_path = write(report, tmp_path / "out")
    assert json.loads(json_path.read_text())["geomean"]["torch"]["ratio"] == pytest.approx(0.5)
    text = md_path.read_text()
    assert md_path.name == "sddmm.md" and text == markdown(report)
    assert "| g1 | 1000 | 32 | 2 | 0.0766 | 0% | 1 (0.50x) |" in text
    assert "| g2 | 1000 | 32 | WRONG | - | - | 1 |" in text
    assert "- `graphblas`: skipped: not installed (no module `graphblas`)" in text
    assert "| torch | 0.50x | 1 | >= 1.5x | no | 0.50x (g1, 32) | 1 |" in text
    assert "## Failures" in text and "sparsetir on g2 width 32: wrong: boom" in text
    assert "`python -m bench sddmm`" in text


def test_merge_rounds_keeps_the_fastest_and_wrong_sticks():
    a, b = result("torch", "g", 32, 2.0), result("torch", "g", 32, 1.0)
    merged = merge_rounds(merge_rounds(None, a), b)
    assert merged["median_s"] == 1.0 and merged["round_medians_s"] == [2.0, 1.0]
    wrong = result("torch", "g", 32, 0, status="wrong")
    assert merge_rounds(merged, wrong)["status"] == "wrong"
    assert merge_rounds(merge_rounds(None, wrong), b)["status"] == "wrong"
    error = result("torch", "g", 32, 0, status="error")
    assert merge_rounds(merged, error)["median_s"] == 1.0
    assert merge_rounds(merge_rounds(None, error), a)["status"] == "ok"
    # The first round tuned (3 s), the faster second found the choice cached: the report keeps 3 s.
    first = {**result("sparsetir", "g", 32, 2.0), "tune_s": 3.0, "chosen": "csr / csr_cpu_rows"}
    second = {**result("sparsetir", "g", 32, 1.0), "tune_s": 0.0, "chosen": "csr / csr_cpu_rows"}
    merged = merge_rounds(merge_rounds(None, first), second)
    assert merged["median_s"] == 1.0 and merged["tune_s"] == 3.0


def test_plan_skips_missing_and_unsupported_baselines(monkeypatch):
    monkeypatch.setattr(LIBRARIES["torch"], "missing", lambda: "not installed (no module `torch`)")
    monkeypatch.setattr(LIBRARIES["graphblas"], "missing", lambda: None)
    config = Config(op="sddmm", graphs=["cora"], widths=[32], baselines=["scipy", "mkl", "torch", "graphblas"])
    p = plan(config)
    assert p.libraries == ["sparsetir", "scipy", "graphblas"]
    assert p.notes == {"mkl": "no SDDMM in this library", "torch": "skipped: not installed (no module `torch`)"}


def test_plan_cuda_without_a_gpu(monkeypatch):
    monkeypatch.setattr(libraries, "cuda_missing", lambda: "no CUDA GPU on this machine")
    monkeypatch.setattr(libraries.importlib.util, "find_spec", lambda name: object())
    p = plan(Config(op="spmm", graphs=["cora"], widths=[32], baselines=["cusparse"], targets=("cuda",)))
    assert p.libraries == []
    assert p.notes["sparsetir-cuda"] == p.notes["cusparse"] == "skipped: no CUDA GPU on this machine"


def test_cli_smoke_defaults_and_options(tmp_path, monkeypatch):
    monkeypatch.setattr(libraries, "cuda_missing", lambda: "no CUDA GPU on this machine")
    args = cli.parser().parse_args(["all", "--smoke", "--out", str(tmp_path)])
    spmm, sddmm = cli.configs(args)
    assert (spmm.op, sddmm.op) == ("spmm", "sddmm")
    assert spmm.graphs == ["cora"] and spmm.widths == [32] and spmm.baselines == ["scipy"]
    assert spmm.targets == ("cpu",) and spmm.repeat == 5 and spmm.stream_n < Config.stream_n
    graphs = ["--graphs", "pubmed", "rmat"]
    args = cli.parser().parse_args(["spmm", *graphs, "--widths", "64", "--repeat", "9", "--baselines", "mkl"])
    (config,) = cli.configs(args)
    assert config.graphs == ["pubmed", "rmat"] and config.widths == [64] and config.repeat == 9
    assert config.baselines == ["mkl"] and config.budget == 1.0 and config.threads == 2
    assert config.targets == ("cpu",)
    monkeypatch.setattr(libraries, "cuda_missing", lambda: None)
    (config,) = cli.configs(cli.parser().parse_args(["spmm"]))
    assert config.targets == ("cpu", "cuda")
    args = cli.parser().parse_args(["spmm", "--target", "cpu"])
    (config,) = cli.configs(args)
    assert config.widths == [32, 128, 512] and "rmat" in config.graphs and "bcsstk16" in config.graphs
    assert set(config.baselines) == {"scipy", "mkl", "torch", "graphblas", "cusparse"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["spmm", "--graphs", "nope"], "unknown graph"), (["spmm", "--widths", "0"], "widths must be positive")],
)
def test_cli_rejects_bad_options(argv, message):
    with pytest.raises(SystemExit, match=message):
        cli.configs(cli.parser().parse_args(argv))


def test_cli_rejects_unknown_baseline(capsys):
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["spmm", "--baselines", "eigen"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_busy_machine_is_flagged():
    rec = record([result("sparsetir", "g1", 32, 1.0), result("torch", "g1", 32, 1.0)])
    rec["load"] = [{"graph": "g1", "loadavg": [1.0, 1.0, 1.0]}]
    quiet = finish("spmm", dict(rec), dict(CONFIG), "x")
    quiet["machine"]["cores"] = 2
    assert "busy" not in markdown(quiet)
    rec["load"].append({"graph": "g2", "loadavg": [5.5, 1.0, 1.0]})
    busy = finish("spmm", dict(rec), dict(CONFIG), "x")
    busy["machine"]["cores"] = 2
    assert "**Warning: the machine was busy** (load average up to 5.5 on 2 cores)" in markdown(busy)


def test_a_version_change_during_the_run_is_flagged():
    rec = record([result("sparsetir", "g1", 32, 1.0)])
    rec["libraries"]["sparsetir"]["versions"] = ["abc", "def-dirty"]
    text = markdown(finish("spmm", rec, dict(CONFIG), "x"))
    assert "**Warning: the version changed during the run** (abc, def-dirty)" in text
