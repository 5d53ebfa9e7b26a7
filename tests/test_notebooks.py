"""The notebooks run from the top on the CPU target (nbclient), and what they show holds: each
ends with its own assertions passed, the plots are PNGs, the IR and kernels display as HTML.
`SPARSETIR_NOTEBOOK_OUT=DIR` keeps the executed notebooks there, to look at."""

from __future__ import annotations

import os
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
#: Per notebook: PNG figures and HTML displays it must show at least.
EXPECTED = {
    "01_three_stages": {"png": 1, "html": 6},
    "02_format_decomposition": {"png": 6, "html": 3},
    "03_write_a_format_rule": {"png": 3, "html": 2},
    "04_mlir_encodings": {"png": 2, "html": 0},
    "05_benchmarks": {"png": 1, "html": 0},
    "06_coiteration": {"png": 0, "html": 0},
}


def test_every_notebook_is_tested_and_committed_without_outputs():
    found = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    assert found == sorted(EXPECTED)
    for stem in found:
        nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{stem}: committed with outputs"


class _Checker(HTMLParser):
    """Fails on tags closed out of order (the markup must nest)."""

    VOID = {"br", "hr", "img", "input", "meta", "link", "wbr"}

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def well_formed(markup: str) -> bool:
    checker = _Checker()
    checker.feed(markup)
    checker.close()
    return checker.stack == []


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_notebook_runs(stem, tmp_path, monkeypatch):
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.delenv("SPARSETIR_BENCH_RESULT", raising=False)
    if stem == "05_benchmarks":
        # Not a developer's stale result: the notebook runs its own quick benchmark.
        monkeypatch.setenv("SPARSETIR_BENCH_RESULT", str(tmp_path / "none.json"))
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert errors == []
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "CHECKS PASSED" in text
    png = [o for o in outputs if "image/png" in o.get("data", {})]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(png) >= EXPECTED[stem]["png"]
    assert len(html) >= EXPECTED[stem]["html"]
    assert all(well_formed(h) for h in html)
    print(f"{stem}: {seconds:.1f} s")
    keep = os.environ.get("SPARSETIR_NOTEBOOK_OUT")  # to look at the executed notebooks
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, Path(keep) / f"{stem}.ipynb")
