"""`sparsetir-py`: every subcommand runs on a bundled graph; errors are one line naming the
exception, with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.io

import sparsetir_py as sp
from sparsetir_py import cli

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

SPMV = textwrap.dedent(
    """
    from sparsetir_py import script as T


    @T.prim_func
    def spmv(a: T.handle, x: T.handle, y: T.handle, indptr: T.handle, indices: T.handle,
             m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
        J_detach = T.dense_fixed(n)
        A = T.match_sparse_buffer(a, (I, J), "float32")
        X = T.match_sparse_buffer(x, (J_detach,), "float32")
        Y = T.match_sparse_buffer(y, (I,), "float32")
        with T.sp_iter([I, J], "SR", "spmv") as [i, j]:
            with T.init():
                Y[i] = 0.0
            Y[i] = Y[i] + A[i, j] * X[j]


    def schedule(sch):
        (i,) = sch.get_loops(sch.get_block("spmv0"))
        sch.parallel(i)


    if __name__ == "__main__":
        raise SystemExit("show must not run the file as __main__")
    """
)


def run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "myspmv.py"
    path.write_text(SPMV)
    return path


def test_help_everywhere(capsys):
    for argv in ([], ["demo"], ["show"], ["tune"], ["formats"]):
        with pytest.raises(SystemExit) as e:
            cli.main([*argv, "--help"])
        assert e.value.code == 0
        assert "usage: sparsetir-py" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--help"])
    assert e.value.code == 0
    assert "usage: sparsetir-py bench" in capsys.readouterr().out


def test_show_prints_every_stage_and_the_source(script, capsys):
    code, out, err = run(["show", str(script)], capsys)
    assert code == 0, err
    for label in ("Stage I\n", "Stage II (scheduled)", "Stage III", "generated cpu source"):
        assert f"spmv: {label}" in out
    assert "T.parallel(m)" in out  # the file's schedule ran
    assert "@numba.njit" in out or "njit" in out
    # The Stage I text is the function's own script.
    stage1 = out.split("# ---- spmv: Stage I\n")[1].split("# ---- ")[0]
    import runpy

    assert sp.structural_equal(sp.from_script(stage1), runpy.run_path(str(script))["spmv"])


def test_show_one_stage_and_cuda(script, capsys):
    code, out, _ = run(["show", str(script), "--stage", "3"], capsys)
    assert code == 0 and "Stage III" in out and "Stage I\n" not in out and "generated" not in out
    code, out, _ = run(["show", str(script), "--target", "cuda", "--specialize", "n=34"], capsys)
    assert code == 0 and "cuda.jit" in out and "generated cuda source" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["show", "missing.py"], "CLIError: no script file"),
        (["show", "{script}", "--func", "nope"], "CLIError: myspmv.py has no function 'nope'"),
        (["show", "{script}", "--specialize", "n"], "CLIError: --specialize expects K=NUMBER"),
        (["show", "{script}", "--specialize", "zz=3"], "SparseTIRError: specialize: `zz` is not a parameter"),
        (["show", "{script}", "--schedule", "nothing"], "CLIError: myspmv.py defines no schedule function"),
        (["tune", "nope-graph", "--width", "8"], "KeyError: in `load_matrix`: no shipped matrix 'nope-graph'"),
        (["demo", "--graph", "nope-graph"], "KeyError: in `load_matrix`: no shipped matrix 'nope-graph'"),
        (["formats", "missing_rule.py"], "FormatError: format_rules.load: no rule file"),
    ],
)
def test_errors_are_one_line_with_exit_2(argv, message, script, capsys):
    code, _, err = run([a.replace("{script}", str(script)) for a in argv], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparsetir-py: error: ") and message in lines[0], err


def test_a_frontend_error_is_one_line_with_its_position(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text(SPMV.replace("T.dense_fixed(m)", "T.dense_fixd(m)"))
    code, _, err = run(["show", str(path)], capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "FrontendError" in line and "broken.py:" in line and "dense_fixd" in line


def test_formats_lists_the_shipped_rules_and_a_users_file(tmp_path, capsys):
    code, out, _ = run(["formats"], capsys)
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line and not line.startswith("use:")}
    assert {"csr", "bsr", "ell", "hyb", "padding"} <= set(rows)
    assert "block_size=4" in rows["bsr"] and "num_col_parts=1" in rows["hyb"] and "pad_size=4" in rows["padding"]
    assert "A=" not in out and "dtype" not in out  # given by sp.ops, not by the user
    user = tmp_path / "pairs.py"
    user.write_text(
        (REPO / "docs" / "tutorials" / "format_rules.md").read_text().split("# file: pairs.py\n")[1].split("```")[0]
    )
    code, out, _ = run(["formats", str(user)], capsys)
    assert code == 0 and "pairs.py" in out and "inferred" in out


def test_tune_prints_the_table_and_the_choice(tmp_path, capsys):
    A = sp.data.load_matrix("karate", dtype=np.float64)
    scipy.io.mmwrite(tmp_path / "karate.mtx", A)
    code, out, err = run(["tune", str(tmp_path / "karate.mtx"), "--width", "8"], capsys)
    assert code == 0, err
    assert "candidate" in out and "model ms" in out and "chosen" in out
    chosen = sp.tune.spmm(A, 8, progress=False)
    assert f"best: format={chosen.format}" in out
    code, _, err = run(["tune", str(tmp_path / "karate.mtx"), "--width", "0"], capsys)
    assert code == 2 and "--width must be a positive integer" in err


def test_demo_runs_on_a_bundled_graph(capsys):
    code, out, err = run(["demo", "--graph", "karate", "--repeat", "2"], capsys)
    assert code == 0, err
    assert "karate: 34 x 34, 156 nonzeros" in out
    assert "SpMM: Stage I" in out and "SDDMM" in out and "ratio" in out


def test_bench_subcommand_with_a_matrix_market_graph_and_a_plot(tmp_path):
    A = sp.data.load_matrix("karate", dtype=np.float64)
    scipy.io.mmwrite(tmp_path / "kar.mtx", A)
    out = tmp_path / "out"
    argv = ["bench", "spmm", "--smoke", "--no-progress", "--keep-openblas-env", "--graphs", str(tmp_path / "kar.mtx")]
    done = subprocess.run(
        [sys.executable, "-m", "sparsetir_py", *argv, "--baselines", "scipy", "cusparse", "--out", str(out), "--plot"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "spmm.json").read_text())
    assert report["command"].startswith("sparsetir-py bench spmm")
    assert {r["graph"] for r in report["results"]} == {"kar"}
    assert all(r["status"] == "ok" for r in report["results"])
    # cusparse cannot run here (no CUDA target in a smoke run): listed as skipped, in the report too.
    assert report["notes"]["cusparse"].startswith("skipped: runs on the cuda target only")
    assert "`cusparse`: skipped" in (out / "spmm.md").read_text()
    png = (out / "spmm.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


@pytest.mark.parametrize(
    "script_name, prog", [("sparsetir-bench", "sparsetir-bench"), ("sparsetir-py", "sparsetir-py")]
)
def test_console_scripts_name_themselves(script_name, prog):
    exe = BIN / script_name
    if not exe.is_file():
        pytest.skip(f"{script_name} is not installed in this environment (pip install -e .)")
    done = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert done.stdout.startswith(f"usage: {prog}")
    assert "python -m bench" not in done.stdout


def test_python_m_bench_help_names_itself():
    done = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m bench")
