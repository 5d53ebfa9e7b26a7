"""Rich display in Jupyter: the HTML behind every `_repr_html_` of the project.

PrimFunc and IRModule show their script highlighted with pygments, a Schedule its trace and the
module it made, a Kernel its launch configuration, argument table and generated source, a format
decomposition its parts and their arrays (a storage dump). Plain `repr` stays one short line.

This module imports nothing else of the project, so every layer (`ir`, `schedule`, `runtime`,
`format`) can build its HTML here without an import cycle. pygments is optional: without it code
is shown as plain escaped text. Styles are inline, so the output also renders where no notebook
CSS is loaded (nbviewer, GitHub, a Sphinx page).

>>> markup = table(["name", "value"], [["a", 1], ["<b>", 2.5]])
>>> markup.count("<tr>"), "&lt;b&gt;" in markup
(3, True)
>>> HTML("<b>x</b>")._repr_html_()
'<b>x</b>'
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["HTML", "array_summary", "arrays", "code", "details", "escape", "section", "table"]

#: Longest code shown in full; longer code is cut (with a note) so a notebook stays responsive.
MAX_CODE_LINES = 400
_BOX = "border:1px solid #ccc;border-radius:4px;padding:6px 10px;margin:4px 0;"
_CELL = 'style="border:1px solid #ddd;padding:2px 8px;text-align:left;font-family:monospace"'
_HEAD = 'style="border:1px solid #ddd;padding:2px 8px;text-align:left;background:#f3f3f3"'


class HTML:
    """A piece of HTML that Jupyter displays (`_repr_html_`); `str()` gives the markup.

    >>> str(HTML("<i>hi</i>"))
    '<i>hi</i>'
    """

    def __init__(self, markup: str):
        self.markup = markup

    def _repr_html_(self) -> str:
        return self.markup

    def __str__(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return f"HTML({len(self.markup)} characters)"


def escape(text: Any) -> str:
    """`text` as HTML text (`<`, `>`, `&` and quotes escaped).

    >>> escape("a < b & c")
    'a &lt; b &amp; c'
    """
    return html.escape(str(text), quote=True)


def code(source: str, language: str = "python", max_lines: int = MAX_CODE_LINES) -> str:
    """`source` as a highlighted `<pre>` block (pygments, inline styles), or escaped plain text
    when pygments is missing; more than `max_lines` lines are cut with a note.

    >>> "<pre" in code("x = 1") and "x" in code("x = 1")
    True
    """
    lines = source.rstrip("\n").split("\n")
    note = ""
    if len(lines) > max_lines:
        note = f'<div style="color:#888">... {len(lines) - max_lines} more lines (print it to see all)</div>'
        source = "\n".join(lines[:max_lines])
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name
    except ImportError:
        body = f'<pre style="margin:0">{escape(source)}</pre>'
    else:
        formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default")
        body = (
            f'<pre style="margin:0;line-height:125%">{highlight(source, get_lexer_by_name(language), formatter)}</pre>'
        )
    return f'<div style="overflow:auto;max-height:40em">{body}</div>{note}'


def table(header: Sequence[Any], rows: Iterable[Sequence[Any]], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless `raw` (then they are HTML already)."""
    cell = (lambda v: str(v)) if raw else escape
    head = "".join(f"<th {_HEAD}>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return (
        f'<table class="sparsetir-table" style="border-collapse:collapse;margin:4px 0">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def details(summary: str, body: str, open: bool = False) -> str:
    """A collapsible block: `summary` (HTML) always shown, `body` (HTML) on a click."""
    return f"<details{' open' if open else ''}><summary>{summary}</summary>{body}</details>"


def section(title: str, *parts: str, subtitle: str = "") -> str:
    """A framed block with a bold title (escaped), an optional grey subtitle and HTML parts."""
    sub = f' <span style="color:#666">{escape(subtitle)}</span>' if subtitle else ""
    return f'<div style="{_BOX}"><div><b>{escape(title)}</b>{sub}</div>{"".join(parts)}</div>'


def array_summary(value: Any, edge: int = 8) -> str:
    """One line for an array or a scalar: dtype, shape and its first and last entries.

    >>> import numpy as np
    >>> array_summary(np.arange(20, dtype=np.int32))
    'int32[20] [0 1 2 3 4 5 6 7 ... 19]'
    >>> array_summary(7)
    '7'
    """
    import numpy as np

    if not isinstance(value, np.ndarray):
        return str(value)
    shape = ", ".join(str(s) for s in value.shape)
    flat = value.reshape(-1)
    if flat.size <= edge + 1:
        shown = np.array2string(flat, separator=" ", threshold=edge + 2)
    else:
        head = " ".join(_fmt(v) for v in flat[:edge])
        shown = f"[{head} ... {_fmt(flat[-1])}]"
    return f"{value.dtype}[{shape}] {shown}"


def _fmt(v: Any) -> str:
    is_float = isinstance(v, float) or getattr(getattr(v, "dtype", None), "kind", "") == "f"
    return f"{v:.4g}" if is_float else str(v)


def arrays(values: Mapping[str, Any], title: str = "", edge: int = 8) -> HTML:
    """A storage dump: one row per named array or scalar (dtype, shape, first entries).

    >>> import numpy as np
    >>> dump = arrays({"indptr": np.array([0, 2, 3]), "m": 2}, title="csr")
    >>> "indptr" in dump._repr_html_() and "int64[3]" in dump._repr_html_()
    True
    """
    rows = [[name, array_summary(v, edge)] for name, v in values.items()]
    body = table(["name", "value"], rows)
    return HTML(section(title, body) if title else body)
