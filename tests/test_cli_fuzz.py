"""The command line keeps its promise whatever a user's file does: one line on stderr,
`sparsetir-py: error: Type: message`, and exit status 2.

Scripts given to `show` raise every kind of exception (at import or in their `schedule`), call
`sys.exit` with any status, hold syntax errors, bad encodings, missing imports; option values out
of range are argparse's usage errors (status 2); `--out` naming a file, an empty matrix, `demo
--repeat 0`. The CLI runs in this process (`cli.main`, output captured); two subprocess tests
check the real exit status and `SPARSETIR_DEBUG=1`'s traceback.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import scipy.sparse as sps
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st

from bench import __main__ as bench_cli
from sparsetir_py import cli

REPO = Path(__file__).resolve().parent.parent

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
    """
)


class Custom(BaseException):
    """A BaseException of a user's own (neither Exception nor SystemExit)."""


def run(argv, capsys) -> tuple[int, str, str]:
    """`cli.main(argv)`: status, stdout, stderr (argparse's own exit counts as a status)."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(code, err: str, *needles: str) -> str:
    assert code == 2, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparsetir-py: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -------------------------------------------------------------------- show: the user's script fails
@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ('raise RuntimeError("boom")\n', ("RuntimeError: boom", "bad.py, line 1")),
        ("def f(:\n    pass\n", ("SyntaxError", "bad.py")),
        ("import a_module_that_is_not_installed_anywhere\n", ("ModuleNotFoundError", "bad.py, line 1")),
        ("import sys\nsys.exit(3)\n", ("SystemExit", "sys.exit(3)", "bad.py, line 2")),
        ("import sys\nsys.exit(0)\n", ("SystemExit", "sys.exit(0)")),
        ("import sys\nsys.exit()\n", ("SystemExit", "sys.exit(None)")),
        ('import sys\nsys.exit("stop here")\n', ("SystemExit", "stop here")),
        ("raise KeyError('missing')\n", ("KeyError: missing",)),
        ("raise GeneratorExit\n", ("GeneratorExit",)),
        ("raise ValueError('first\\nsecond\\rthird\\u2028fourth')\n", ("ValueError: first",)),
        ("raise ValueError('')\n", ("ValueError",)),
        ("raise ValueError('\\udcff')\n", ("ValueError",)),
        ("def f():\n    f()\nf()\n", ("RecursionError",)),
        ("x = 1 / 0\n", ("ZeroDivisionError", "bad.py, line 1")),
        ("class E(Exception):\n    def __str__(self):\n        raise TypeError\nraise E()\n", ("E:",)),
        ("\t def bad indentation\n", ("Error",)),
        ("", ("CLIError", "defines no @T.prim_func")),
    ],
)
def test_show_a_failing_script(tmp_path, capsys, body, needles):
    path = tmp_path / "bad.py"
    path.write_text(body, encoding="utf-8", errors="surrogatepass")
    code, _, err = run(["show", path], capsys)
    one_line(code, err, *needles)


def test_show_a_script_with_bytes_that_are_not_utf8(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_bytes(b's = "\xff\xfe caf\xe9"\n')
    code, _, err = run(["show", path], capsys)
    one_line(code, err, "SyntaxError", "utf-8")
    path.write_bytes(b"\x00\x01\x02binary")
    code, _, err = run(["show", path], capsys)
    one_line(code, err, "bad.py")


def test_show_a_user_base_exception(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_text("class Custom(BaseException):\n    pass\nraise Custom('own')\n")
    code, _, err = run(["show", path], capsys)
    one_line(code, err, "Custom: own", "bad.py, line 3")


@pytest.mark.parametrize(
    "schedule",
    [
        "raise RuntimeError('in the schedule')",
        "import sys; sys.exit(5)",
        "sch.split(None, [None, 4])",
        "sch.get_block('no_such_block')",
    ],
)
def test_show_a_schedule_that_fails(tmp_path, capsys, schedule):
    path = tmp_path / "sched.py"
    path.write_text(SPMV + f"\n\ndef schedule(sch):\n    {schedule}\n")
    code, _, err = run(["show", path], capsys)
    line = one_line(code, err)
    if "sch." not in schedule:
        assert "sched.py, line " in line


def test_show_a_directory_and_an_unreadable_path(tmp_path, capsys):
    code, _, err = run(["show", tmp_path], capsys)
    one_line(code, err, "CLIError")


# -------------------------------------------------------------------- the fuzz: random failures at random places
EXCEPTIONS = [
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "AttributeError",
    "RuntimeError",
    "OSError",
    "PermissionError",
    "FileNotFoundError",
    "ZeroDivisionError",
    "AssertionError",
    "NotImplementedError",
    "MemoryError",
    "RecursionError",
    "UnicodeError",
    "LookupError",
    "ImportError",
    "StopIteration",
    "GeneratorExit",
    "Exception",
    "BaseException",
    "ArithmeticError",
    "BufferError",
    "EOFError",
]


@st.composite
def failing_scripts(draw) -> tuple[str, str]:
    """A script source that fails somewhere, and the exception name the line must show."""
    message = draw(st.text(max_size=30))
    where = draw(st.sampled_from(["import", "schedule", "function", "decorator"]))
    kind = draw(st.sampled_from(["raise", "exit", "syntax"]))
    if kind == "syntax":
        broken = draw(st.sampled_from(["def (", "x = = 1", "return 1 +", "if True\n    pass", "(((", "'''open"]))
        return SPMV + "\n" + broken + "\n", "SyntaxError"
    if kind == "exit":
        status = draw(st.none() | st.integers(-(2**40), 2**40) | st.text(max_size=10) | st.booleans())
        statement = f"__import__('sys').exit({status!r})"
        name = "SystemExit"
    else:
        name = draw(st.sampled_from(EXCEPTIONS))
        statement = f"raise {name}({message!r})"
    if where == "import":
        return statement + "\n" + SPMV, name
    if where == "schedule":
        return SPMV + f"\n\ndef schedule(sch):\n    {statement}\n", name
    if where == "function":
        return SPMV + f"\n\ndef helper():\n    {statement}\n\n\nhelper()\n", name
    return f"def deco(f):\n    {statement}\n\n\n@deco\ndef g():\n    pass\n" + SPMV, name


def test_fuzz_show_over_failing_scripts(tmp_path, capsys):
    path = tmp_path / "user_script.py"

    @fuzz(40)
    @given(failing_scripts())
    def check(case):
        source, name = case
        path.write_text(source, encoding="utf-8", errors="surrogatepass")
        code, _, err = run(["show", path, "--stage", "2"], capsys)
        line = one_line(code, err)
        assert f" {name}: " in line or f" {name}:" in line, line
        if name != "SyntaxError":
            assert "user_script.py, line " in line, line

    check()


ARGS = {
    "demo": [["--repeat", "0"], ["--repeat", "-3"], ["--repeat", "x"], ["--graph", "no-such-graph"]],
    "tune": [["--width", "0"], ["--width", "-1"], ["--width", "w"], ["--op", "spmv"], ["--target", "tpu"]],
    "show": [["--stage", "9"], ["--target", "tpu"], ["--specialize", "=1"], ["--specialize", "feat=x"]],
    "formats": [["no_such_rule_file.py"]],
}


def test_fuzz_bad_arguments_exit_2(tmp_path, capsys):
    """Bad values of every subcommand: argparse's usage error or our one line, status 2, no traceback."""
    npz = tmp_path / "A.npz"
    sps.save_npz(npz, sps.random(5, 5, density=0.5, format="csr", random_state=0))
    script = tmp_path / "s.py"
    script.write_text(SPMV)

    @fuzz(40)
    @given(st.sampled_from(sorted(ARGS)).flatmap(lambda c: st.tuples(st.just(c), st.sampled_from(ARGS[c]))))
    def check(case):
        command, extra = case
        positional = {"tune": [npz, "--width", "4"], "show": [script], "demo": [], "formats": []}[command]
        argv = [command, *positional, *extra]
        code, _, err = run(argv, capsys)
        assert code == 2, (argv, err)
        assert "Traceback" not in err and err.strip(), (argv, err)
        assert err.strip().splitlines()[-1].startswith(("sparsetir-py: error:", "sparsetir-py ")), err

    check()


@pytest.mark.parametrize(
    "argv",
    [
        ["--threads", "0"],
        ["--threads", "-2"],
        ["--repeat", "0"],
        ["--budget", "0"],
        ["--budget", "nan"],
        ["--rounds", "0"],
        ["--seed", "-1"],
        ["--distributed", "0"],
        ["--widths", "0"],
        ["--graphs", "no-such-graph"],
        ["--format-param", "oops"],
    ],
)
def test_bench_rejects_bad_values(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as e:
        bench_cli.main(["spmm", "--smoke", "--no-progress", "--out", str(tmp_path / "out"), *argv], prog="bench")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("bench: error:"), err


def test_bench_out_naming_a_file(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    for out in (afile, afile / "below"):
        with pytest.raises(SystemExit) as e:
            bench_cli.main(["spmm", "--smoke", "--no-progress", "--out", str(out)], prog="bench")
        assert e.value.code == 2
        assert "error: --out" in capsys.readouterr().err


def test_bench_graph_file_that_cannot_be_read(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip archive")
    with pytest.raises(SystemExit) as e:
        bench_cli.main(["spmm", "--smoke", "--graphs", str(bad), "--out", str(tmp_path / "o")], prog="bench")
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"bench: error: --graphs {bad}: ")


def test_bench_run_failure_is_one_line(tmp_path, capsys, monkeypatch):
    def fail(args, command):
        raise RuntimeError("the disk went away\nsecond line")

    monkeypatch.setattr(bench_cli, "_run", fail)
    code = bench_cli.main(["spmm", "--smoke", "--out", str(tmp_path / "o")], prog="bench")
    assert code == 2
    assert capsys.readouterr().err == "bench: error: RuntimeError: the disk went away\n"


def test_demo_on_an_empty_matrix(tmp_path, capsys):
    for shape in ((0, 0), (5, 4)):
        path = tmp_path / f"empty{shape[0]}.npz"
        sps.save_npz(path, sps.csr_matrix(shape, dtype="float32"))
        code, out, err = run(["demo", "--graph", path, "--repeat", "1"], capsys)
        assert code == 0, err
        assert "nan" not in out.split("--- results")[1] and "SDDMM  cpu" in out


def test_demo_repeat_zero(capsys):
    code, out, err = run(["demo", "--repeat", "0"], capsys)
    assert code == 2 and "nan" not in out and "--repeat" in err


# -------------------------------------------------------------------- real processes
def test_real_exit_status_and_debug_traceback(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(3)\n")
    done = subprocess.run(
        [sys.executable, "-m", "sparsetir_py", "show", str(path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "SystemExit" in done.stderr, done.stderr
    path.write_text("raise RuntimeError('boom')\n")
    env = {**__import__("os").environ, "SPARSETIR_DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "sparsetir_py", "show", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode != 0 and "Traceback" in done.stderr and "boom" in done.stderr


def test_python_m_bench_threads_zero():
    done = subprocess.run(
        [sys.executable, "-m", "bench", "spmm", "--smoke", "--threads", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("expected a positive integer, got '0'")


# -------------------------------------------------------------------- the fuzz: random argv over the subcommands
def test_fuzz_random_argv(tmp_path, capsys):
    """Random options and values for every subcommand (kept small: karate, narrow widths, few
    repeats): the command succeeds, or fails with status 2 and no traceback."""
    npz = tmp_path / "A.npz"
    sps.save_npz(npz, sps.random(6, 5, density=0.4, format="csr", random_state=1, dtype="float32"))
    empty = tmp_path / "empty.npz"
    sps.save_npz(empty, sps.csr_matrix((0, 0), dtype="float32"))
    script = tmp_path / "s.py"
    script.write_text(SPMV)
    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nsys.exit(7)\n")
    values = st.sampled_from(["0", "-1", "1", "2", "x", "", "1e3", "nan", "feat=4", "=", "cpu", "cuda", "3"])
    files = st.sampled_from([str(npz), str(empty), str(script), str(broken), str(tmp_path), "karate", "missing"])
    options = {
        "show": ["--stage", "--target", "--func", "--schedule", "--specialize"],
        "tune": ["--width", "--op", "--target"],
        "formats": [],
        "demo": ["--repeat"],
    }

    @st.composite
    def argvs(draw):
        command = draw(st.sampled_from(sorted(options)))
        argv = [command]
        if command == "demo":
            argv += ["--graph", draw(st.sampled_from(["karate", str(npz), str(empty), "missing", str(script)]))]
        else:
            argv += draw(st.lists(files, min_size=0 if command == "formats" else 1, max_size=2))
        for _ in range(draw(st.integers(0, 3))):
            argv += [draw(st.sampled_from(options[command] or ["--unknown"])), draw(values)]
        if command == "tune" and "--width" not in argv:
            argv += ["--width", draw(st.sampled_from(["4", "0", "x"]))]
        if command == "demo" and "--repeat" not in argv:
            argv += ["--repeat", "1"]
        return argv

    @fuzz(30)
    @given(argvs())
    def check(argv):
        code, _, err = run(argv, capsys)
        assert code in (0, 2), (argv, code, err)
        assert "Traceback" not in err, (argv, err)
        if code == 2:
            last = err.strip().splitlines()[-1]
            assert last.startswith("sparsetir-py"), (argv, err)
            if not err.startswith("usage:"):  # ours, not argparse's usage error
                assert len(err.strip().splitlines()) == 1, (argv, err)

    check()


def test_a_script_that_replaces_stderr_still_gets_its_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "quiet.py"
    path.write_text("import io, sys\nsys.stderr = io.StringIO()\nraise RuntimeError('hidden?')\n")
    monkeypatch.setattr(sys, "stderr", sys.stderr)  # put back after the test
    code, _, err = run(["show", path], capsys)
    one_line(code, err, "RuntimeError: hidden?")


def test_debug_zero_is_not_debugging(tmp_path, capsys, monkeypatch):
    path = tmp_path / "boom.py"
    path.write_text("raise RuntimeError('boom')\n")
    monkeypatch.setenv("SPARSETIR_DEBUG", "0")
    code, _, err = run(["show", path], capsys)
    one_line(code, err, "RuntimeError: boom")
    monkeypatch.setenv("SPARSETIR_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["show", str(path)])
    path.write_text("import sys\nsys.exit(9)\n")
    code, _, err = run(["show", path], capsys)
    assert code == 2 and "Traceback" in err and "SystemExit: 9" in err


def test_debug_variable_that_is_not_a_number_builds_quietly(monkeypatch, capsys):
    """`SPARSETIR_DEBUG=yes` is no level: builds run as with 0 instead of failing in `int()`."""
    import numpy as np

    import sparsetir_py as sp

    monkeypatch.setenv("SPARSETIR_DEBUG", "yes")
    A = sp.data.load_matrix("karate")
    B = np.ones((34, 2), np.float32)
    C = np.zeros((34, 2), np.float32)
    kernel = sp.compile(sp.ops.spmm_script(), "cpu")
    kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=34, n=34, feat=2, nnz=A.nnz)
    np.testing.assert_allclose(C, A @ B)
    assert "[sparsetir_py]" not in capsys.readouterr().out
