"""The documentation runs as written: the README's and the tutorials' code blocks, the docstring
examples of the public API (doctests), and the Sphinx build itself (warnings are errors)."""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sparsetir_py as sp

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FILE_MARK = re.compile(r"^# file: (\S+)\n")


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return FENCE.findall(path.read_text())


def run_blocks(path: Path, cwd: Path) -> dict:
    """Run the blocks of `path` one after another in one namespace, in `cwd`, as a reader would
    paste them. A block whose first line is `# file: NAME` is written to `cwd/NAME` instead (a
    file the following blocks load)."""
    blocks = python_blocks(path)
    assert blocks, f"{path.name} has no python block"
    namespace: dict = {"__name__": "__docs__"}
    old = Path.cwd()
    os.chdir(cwd)
    try:
        for k, block in enumerate(blocks):
            mark = FILE_MARK.match(block)
            if mark:
                (cwd / mark.group(1)).write_text(block)
                continue
            # From a file of its own, so @T.prim_func can read the function's source back.
            source = cwd / f"_{path.stem}_block{k}.py"
            source.write_text(block)
            exec(compile(block, str(source), "exec"), namespace)
    finally:
        os.chdir(old)
    return namespace


def test_readme_blocks_run_as_written(tmp_path, capsys):
    ns = run_blocks(ROOT / "README.md", tmp_path)
    np = ns["np"]
    A, B = ns["A"], ns["B"]
    # What the blocks computed is right, not only free of errors.
    assert np.allclose(ns["C"], A @ B, atol=1e-4)
    assert np.allclose(ns["S"].toarray(), A.multiply(ns["X"] @ ns["Y"].T).toarray(), atol=1e-4)
    assert np.allclose(ns["y"], A @ B[:, 0], atol=1e-4)
    assert ns["kernel"].specialized == {"feat": 32}
    assert [p.name for p in ns["mod"]["main"].params][:2] == ["b", "c"]  # after remove_preprocess
    assert "def csrmm" in capsys.readouterr().out
    D, Gt = ns["D"], ns["Gt"]  # the assembled three-operand merge: G + G.T - G (the union's structure)
    assert abs(D - Gt).max() == 0 and D.has_sorted_indices and D.nnz == (ns["G"] + Gt).nnz


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_blocks_run_as_written(path, tmp_path):
    ns = run_blocks(path, tmp_path)
    if path.stem == "format_rules":
        assert (ns["d"].reconstruct() != ns["A"]).nnz == 0
        assert ns["np"].allclose(ns["C"], ns["A"] @ ns["B"], atol=1e-4)


def test_every_tutorial_is_in_the_toctree():
    index = (ROOT / "docs" / "index.md").read_text()
    assert TUTORIALS and all(f"tutorials/{p.stem}" in index for p in TUTORIALS)


# -------------------------------------------------------------------- docstring examples
DOCTEST_MODULES = [
    "sparsetir_py.driver",
    "sparsetir_py.ops.operators",
    "sparsetir_py.ops.coiteration",
    "sparsetir_py.data",
    "sparsetir_py.display",
    "sparsetir_py.viz",
    "sparsetir_py.format.decomposition",
    "sparsetir_py.ir.structural_equal",
    "sparsetir_py.ir.verify",
    "sparsetir_py.script",
    "sparsetir_py.interp.stage1",
    "sparsetir_py.runtime.build",
    "sparsetir_py.transform.lower_sparse_iter",
    "sparsetir_py.transform.lower_sparse_buffer",
    "sparsetir_py.transform.decompose_format",
    "sparsetir_py.transform.horizontal_fusion",
    "sparsetir_py.transform.sink_allocations",
    "sparsetir_py.format.mlir.encoding",
    "sparsetir_py.format.mlir.storage",
]


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def public_functions():
    """The public functions of `sp`, `sp.ops`, `sp.data`, `sp.format` (decompose) and `sp.viz`."""
    from sparsetir_py import viz

    found = {f"sp.{n}": getattr(sp, n) for n in sp.__all__ if inspect.isfunction(getattr(sp, n))}
    found.update({f"sp.ops.{n}": getattr(sp.ops, n) for n in ("spmm", "sddmm")})
    found.update({f"sp.data.{n}": getattr(sp.data, n) for n in sp.data.__all__ if callable(getattr(sp.data, n))})
    found["sp.format.decompose"] = sp.format.decompose
    found.update({f"sp.viz.{n}": getattr(viz, n) for n in viz.__all__ if n != "close"})
    return found


def test_every_public_function_has_a_docstring_example():
    """Each one's examples run in `test_docstring_examples` (its module is listed there)."""
    missing = [name for name, fn in public_functions().items() if ">>>" not in (inspect.getdoc(fn) or "")]
    assert missing == []
    modules = {inspect.getmodule(fn).__name__ for fn in public_functions().values()}
    assert modules <= set(DOCTEST_MODULES) | {"sparsetir_py.transform.decompose_format"}


def test_docs_cite_a_design_file_that_ships():
    """Docstrings and comments cite docs/design.md, which exists; nothing cites a bare DESIGN.md."""
    assert (ROOT / "docs" / "design.md").is_file()
    stale = []
    for package in ("sparsetir_py", "bench", "schedules", "format_rules"):
        for path in (ROOT / package).rglob("*.py"):
            if re.search(r"\bDESIGN(\.md)?\b", path.read_text()):
                stale.append(str(path.relative_to(ROOT)))
    assert stale == []


# -------------------------------------------------------------------- the Sphinx build
def test_sphinx_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "api.html").is_file() and (tmp_path / "tutorials" / "format_rules.html").is_file()
    api = (tmp_path / "api.html").read_text()
    assert "sparsetir_py.ops.spmm" in api and "load_matrix" in api
    assert time.perf_counter() - start < 120  # budget: under a minute on a quiet machine
