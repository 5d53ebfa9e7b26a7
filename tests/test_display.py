"""Rich display: `_repr_html_` of PrimFunc, IRModule, Schedule, Trace, Kernel and format
decompositions is well-formed HTML that shows what it should; plain `repr` stays one short line."""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np
import pytest

import format_rules
import sparsetir_py as sp
from sparsetir_py import display
from sparsetir_py.ops import sddmm_script, spmm_script


class Page(HTMLParser):
    """Parses markup strictly enough to catch a tag closed out of order; collects the text."""

    VOID = {"br", "hr", "img", "input", "meta", "link", "wbr"}

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self.feed(markup)
        self.close()
        assert self.stack == [], f"unclosed tags {self.stack}"

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)

    @property
    def plain(self) -> str:
        return "".join(self.text)


def schedule(sch):
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    io, _ = sch.split(i, [None, 4])
    sch.parallel(io)


def test_primfunc_and_module_show_their_script_highlighted():
    f = spmm_script()
    page = Page(f._repr_html_())
    assert "PrimFunc csrmm" in page.plain and "Stage 1" in page.plain
    # The displayed text is the script itself (pygments only adds markup around it).
    assert f.script().strip() in page.plain
    assert "span" in page.tags  # highlighted
    mod = sp.lower_sparse_iter(f)
    page = Page(mod._repr_html_())
    assert "main (Stage 2)" in page.plain and mod.script().strip() in page.plain
    assert repr(f) == "PrimFunc('csrmm', stage=1)" and repr(mod) == "IRModule(['main'])"


def test_code_is_escaped_and_cut_when_long():
    page = Page(display.code("x = '<b>&'\n" * 3))
    assert page.plain.count("x = '<b>&'") == 3 and "b" not in page.tags
    long = display.code("y = 1\n" * (display.MAX_CODE_LINES + 5))
    assert "5 more lines" in Page(long).plain


def test_code_without_pygments(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pygments(name, *args, **kwargs):
        if name.startswith("pygments"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pygments)
    page = Page(display.code("a < b"))
    assert page.plain == "a < b" and "span" not in page.tags


def test_schedule_and_trace():
    sch = sp.Schedule(sp.lower_sparse_iter(spmm_script()))
    schedule(sch)
    page = Page(sch._repr_html_())
    assert sch.trace.as_python().strip() in page.plain
    assert "details" in page.tags and sch.func.script().strip() in page.plain
    assert repr(sch) == "<Schedule `main` Stage 2, 4 instructions>"
    assert repr(sch.trace) == "Trace(4 instructions)"
    assert Page(sch.trace._repr_html_()).plain.count("sch.") == 4
    empty = sp.Schedule(spmm_script())
    assert "no primitives applied" in Page(empty._repr_html_()).plain


def test_cpu_kernel_shows_arguments_and_source():
    kernel = sp.compile(spmm_script(), "cpu", schedule=schedule, specialize={"feat": 16})
    page = Page(kernel._repr_html_())
    text = page.plain
    assert "CPUKernel csrmm" in text and "specialized feat=16" in text
    assert kernel.source.strip() in text
    for name in kernel.parameters:
        assert name in text
    rows = _table_rows(kernel._repr_html_())
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["c"][1:] == ["buffer C", "float32", "(m, 16)", "written"]
    assert by_name["b"][4] == "read" and by_name["m"][1] == "scalar"
    assert len(repr(kernel).splitlines()) == 1


def test_cuda_kernel_shows_its_launch_configuration():
    from schedules import spmm as spmm_schedules

    kernel = sp.compile(spmm_script(), "cuda", schedule=spmm_schedules.csr_cuda_rows, specialize={"feat": 64})
    page = Page(kernel._repr_html_())
    assert "launch configuration" in page.plain and "blockIdx.x" in page.plain and "threadIdx.x" in page.plain
    plain = sp.compile(sddmm_script(), "cuda")  # no bound loop: one thread
    assert "grid (1,), block (1,)" in Page(plain._repr_html_()).plain


def test_decomposition_shows_parts_and_storage_dumps():
    A = sp.data.load_matrix("karate")
    d = sp.format.decompose(A, format_rules.ell, buckets=[2, 8, 32])
    page = Page(d._repr_html_())
    rows = _table_rows(d._repr_html_())
    assert rows[0] == ["part", "rows", "nnz", "slots", "padding", "padding %"]
    assert [r[0] for r in rows[1:4]] == ["ell2", "ell8", "ell32"]
    assert sum(int(r[2]) for r in rows[1:4]) == A.nnz
    assert "indptr_ell8" in page.plain and "a_ell32" in page.plain  # the storage dumps
    assert repr(d).startswith("Decomposition(3 parts")


def test_arrays_dump():
    dump = display.arrays({"indptr": np.arange(12, dtype=np.int64), "values": np.ones((2, 3)), "n": 5}, title="x")
    text = Page(dump._repr_html_()).plain
    assert "int64[12] [0 1 2 3 4 5 6 7 ... 11]" in text and "float64[2, 3]" in text and "5" in text


def _table_rows(markup: str) -> list[list[str]]:
    """The cells of the first table of `markup`, row by row."""

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.cell, self.done = [], None, False

        def handle_starttag(self, tag, attrs):
            if self.done:
                return
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th"):
                self.cell = ""

        def handle_endtag(self, tag):
            if tag in ("td", "th") and not self.done:
                self.rows[-1].append(self.cell)
                self.cell = None
            elif tag == "table":
                self.done = True

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    parser = Rows()
    parser.feed(markup)
    return parser.rows


@pytest.mark.parametrize(
    "value, text", [(3, "3"), (np.float32(1.5), "1.5"), (np.array([1.25, 2.0]), "float64[2] [1.25 2.  ]")]
)
def test_array_summary(value, text):
    assert display.array_summary(value) == text
