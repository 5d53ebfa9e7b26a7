"""Plots for exploring formats and benchmarks (matplotlib: `pip install "sparsetir_py[viz]"`).

    from sparsetir_py import viz
    viz.spy(A)                                    # where the nonzeros are
    viz.row_length_histogram(A, buckets=[1, 2, 4, 8, 16, 32])
    d = sp.format.decompose(A, format_rules.hyb, num_col_parts=2, buckets=[1, 2, 4, 8])
    viz.spy_parts(d)                              # one spy plot per part of the decomposition
    viz.padding(d)                                # stored nonzeros and padding per part
    viz.timings({"csr": 1.2e-3, "hyb": 0.9e-3})   # seconds per configuration
    viz.bench_ratios("bench/results/spmm.json")   # ratios per graph and width against baselines

Every function returns a `matplotlib.figure.Figure` made without pyplot's global state (so
scripts and tests leak no figures); Jupyter displays it as the cell's value, and
`fig.savefig(path)` writes a file. Pass `ax=` to draw into an axes of your own figure instead
(then that axes' figure is returned).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse

from .errors import SparseTIRError

__all__ = ["bench_ratios", "close", "padding", "row_length_histogram", "spy", "spy_parts", "timings"]

#: Above this many nonzeros a spy plot is a density image instead of one marker per nonzero.
DENSITY_THRESHOLD = 200_000


class VizError(SparseTIRError):
    """matplotlib is missing, or a plot was given data it cannot draw."""


def _figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] | None = None):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise VizError('sparsetir_py.viz needs matplotlib: pip install "sparsetir_py[viz]"') from None
    _register_jupyter()
    fig = Figure(figsize=size or (4.2 * ncols, 3.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _register_jupyter() -> None:
    """In IPython, make sure a Figure displays as a PNG (pyplot's inline backend registers that
    formatter when it loads; a figure made without pyplot would otherwise show as text)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure

    formatter = shell.display_formatter.formatters["image/png"]
    if Figure not in formatter.type_printers:
        formatter.for_type(Figure, lambda fig: _png(fig))


def _png(fig) -> bytes:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return buffer.getvalue()


def _axes(ax, size: tuple[float, float] | None = None):
    if ax is not None:
        return ax.figure, ax
    fig, axes = _figure(size=size)
    return fig, axes[0, 0]


def close(fig) -> None:
    """Release a figure's memory (figures from this module are not in pyplot's registry)."""
    fig.clear()


def _csr(A) -> scipy.sparse.csr_matrix:
    if isinstance(A, np.ndarray):
        A = scipy.sparse.csr_matrix(A)
    if not scipy.sparse.issparse(A):
        raise VizError(f"expected a scipy sparse matrix or a numpy array, got {type(A).__name__}")
    return A.tocsr()


def spy(A, ax=None, title: str | None = None, color: str = "C0", markersize: float | None = None):
    """Where the nonzeros of `A` are: one marker per nonzero, or a density image (nonzeros per
    pixel, log scale) above `DENSITY_THRESHOLD` nonzeros.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py import viz
    >>> fig = viz.spy(sp.data.load_matrix("karate"), title="karate")
    >>> fig.axes[0].get_title()
    'karate'
    """
    A = _csr(A)
    fig, ax = _axes(ax, (4.2, 4.2))
    m, n = A.shape
    coo = A.tocoo()
    if A.nnz > DENSITY_THRESHOLD:
        bins = (min(m, 400) or 1, min(n, 400) or 1)
        image, _, _ = np.histogram2d(coo.row, coo.col, bins=bins, range=[[0, max(m, 1)], [0, max(n, 1)]])
        from matplotlib.colors import LogNorm

        shown = ax.imshow(
            np.ma.masked_equal(image, 0), extent=(0, n, m, 0), aspect="auto", cmap="viridis", norm=LogNorm()
        )
        fig.colorbar(shown, ax=ax, label="nonzeros per pixel")
    else:
        size = markersize if markersize is not None else max(0.05, min(20.0, 2e4 / max(A.nnz, 1)))
        ax.scatter(coo.col, coo.row, s=size, marker="s", c=color, linewidths=0)
        ax.set_xlim(-0.5, max(n, 1) - 0.5)
        ax.set_ylim(max(m, 1) - 0.5, -0.5)
        ax.set_aspect("equal" if max(m, n) <= 4 * max(min(m, n), 1) else "auto")
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    ax.set_title(title if title is not None else f"{m} x {n}, {A.nnz} nonzeros")
    return fig


def spy_parts(decomposition, ncols: int = 4, skip_empty: bool = True):
    """One spy plot per part of a decomposition (`sp.format.decompose`), in A's coordinates,
    titled with the part's nonzeros and padding.

    >>> import format_rules, sparsetir_py as sp
    >>> from sparsetir_py import viz
    >>> d = sp.format.decompose(sp.data.load_matrix("karate"), format_rules.ell, buckets=[2, 8, 32])
    >>> [ax.get_title().split(":")[0] for ax in viz.spy_parts(d).axes if ax.get_visible()]
    ['ell2', 'ell8', 'ell32']
    """
    parts = [p for p in decomposition.parts if p.nnz or not skip_empty]
    if not parts:
        raise VizError("the decomposition has no part with a nonzero to plot")
    ncols = max(1, min(ncols, len(parts)))
    nrows = math.ceil(len(parts) / ncols)
    fig, axes = _figure(nrows, ncols, (3.2 * ncols, 3.2 * nrows))
    for k, ax in enumerate(axes.flat):
        if k >= len(parts):
            ax.set_visible(False)
            continue
        p = parts[k]
        spy(p.matrix, ax=ax, color=f"C{k % 10}", title=f"{p.name}: {p.nnz} nnz, {100 * p.padding_ratio:.0f}% pad")
        ax.title.set_fontsize(9)
    return fig


def row_length_histogram(A, buckets: Sequence[int] | None = None, ax=None, title: str | None = None):
    """How many rows have each length (log-spaced bins), with the bucket widths of an ELL/hyb
    format as vertical lines: rows between two lines are padded up to the line on their right.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py import viz
    >>> fig = viz.row_length_histogram(sp.data.load_matrix("cora"), buckets=[1, 2, 4, 8, 16])
    >>> fig.axes[0].get_xlabel()
    'nonzeros per row'
    """
    A = _csr(A)
    lengths = np.diff(A.indptr)
    fig, ax = _axes(ax, (5.5, 3.4))
    longest = int(lengths.max(initial=0))
    # One bin per length up to 16, log-spaced beyond: each bin still shows whole lengths.
    small = np.arange(min(longest, 16) + 2) - 0.5
    large = np.round(np.logspace(math.log10(17), math.log10(longest + 1), 24)) - 0.5 if longest > 16 else []
    edges = np.unique(np.concatenate([small, large, [longest + 0.5]]))
    ax.hist(lengths, bins=edges, color="C0")
    ax.set_xscale("symlog", linthresh=1, linscale=0.4)
    ax.set_yscale("log")
    for k, w in enumerate(sorted(buckets or [])):
        ax.axvline(w + 0.5, color="C3", linestyle="--", linewidth=1, label="bucket widths" if k == 0 else None)
    if buckets:
        ax.legend()
    ax.set_xlabel("nonzeros per row")
    ax.set_ylabel("rows")
    empty = int(np.count_nonzero(lengths == 0))
    ax.set_title(title if title is not None else f"{A.shape[0]} rows, longest {longest}, {empty} empty")
    return fig


def padding(decomposition, ax=None, title: str | None = None):
    """Stored nonzeros and padding slots per part of a decomposition (stacked bars, the padding's
    share of each part above it).

    >>> import format_rules, sparsetir_py as sp
    >>> from sparsetir_py import viz
    >>> d = sp.format.decompose(sp.data.load_matrix("karate"), format_rules.ell, buckets=[2, 8, 32])
    >>> fig = viz.padding(d)
    >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
    ['ell2', 'ell8', 'ell32']
    """
    parts = decomposition.parts
    fig, ax = _axes(ax, (max(4.0, 0.6 * len(parts) + 2), 3.4))
    x = np.arange(len(parts))
    stored = np.array([p.nnz for p in parts])
    pad = np.array([p.padding for p in parts])
    ax.bar(x, stored, color="C0", label="nonzeros")
    ax.bar(x, pad, bottom=stored, color="C1", label="padding")
    for k, p in enumerate(parts):
        if p.slots:
            ax.annotate(f"{100 * p.padding_ratio:.0f}%", (k, p.slots), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(
        x, [p.name for p in parts], rotation=45 if len(parts) > 6 else 0, ha="right" if len(parts) > 6 else "center"
    )
    ax.set_ylabel("value slots")
    ax.legend()
    total = decomposition.slots
    share = 100 * decomposition.padding / total if total else 0.0
    ax.set_title(title if title is not None else f"padding: {share:.1f}% of {total} slots")
    return fig


def timings(times: Mapping[str, float], ax=None, baseline: str | None = None, unit: str = "ms", title: str = ""):
    """Time per configuration as horizontal bars (seconds in, shown in `unit`); with `baseline`
    (one of the keys), each bar is also labelled with its speed-up over that one.

    >>> from sparsetir_py import viz
    >>> fig = viz.timings({"csr": 2e-3, "hyb": 1e-3}, baseline="csr")
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['csr', 'hyb']
    """
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    labels = list(times)
    values = np.array([times[k] for k in labels], dtype=float) * scale
    if baseline is not None and baseline not in times:
        raise VizError(f"baseline {baseline!r} is not one of the configurations: {', '.join(labels)}")
    fig, ax = _axes(ax, (5.5, 0.4 * len(labels) + 1.4))
    y = np.arange(len(labels))
    ax.barh(y, values, color=["C2" if k == baseline else "C0" for k in labels])
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    for k, v in enumerate(values):
        text = f"{v:.3g} {unit}"
        if baseline is not None:
            text += f" ({times[baseline] / (v / scale):.2f}x)"
        ax.annotate(text, (v, k), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, values.max(initial=1) * 1.35)
    ax.set_title(title)
    return fig


def _report(report: Mapping[str, Any] | str | os.PathLike) -> Mapping[str, Any]:
    if isinstance(report, str | os.PathLike):
        path = Path(report)
        if not path.is_file():
            raise VizError(f"no bench report at {path}")
        return json.loads(path.read_text())
    return report


def bench_ratios(report, ax=None, title: str | None = None):
    """Ratios of a `python -m bench` report (its dict, or the path of its JSON): one group of bars
    per (graph, width), one bar per baseline, log scale; above 1 sparsetir_py is faster. The
    dashed line is 1; each baseline's geometric mean is in the legend.

    >>> from sparsetir_py import viz
    >>> report = {"op": "spmm", "comparisons": [
    ...     {"graph": "cora", "width": 32, "baseline": "scipy", "ratio": 2.0},
    ...     {"graph": "cora", "width": 128, "baseline": "scipy", "ratio": 4.0}],
    ...     "geomean": {"scipy": {"ratio": 2.83}}}
    >>> fig = viz.bench_ratios(report)
    >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
    ['cora\\n32', 'cora\\n128']
    """
    report = _report(report)
    comparisons = report.get("comparisons") or []
    if not comparisons:
        raise VizError("the report has no ratios to plot (no baseline ran, or every run failed)")
    groups: list[tuple[str, int]] = []
    baselines: list[str] = []
    for c in comparisons:
        if (c["graph"], c["width"]) not in groups:
            groups.append((c["graph"], c["width"]))
        if c["baseline"] not in baselines:
            baselines.append(c["baseline"])
    ratio = {(c["baseline"], c["graph"], c["width"]): c["ratio"] for c in comparisons}
    fig, ax = _axes(ax, (max(5.0, 0.5 * len(groups) * max(1, len(baselines)) + 2), 3.8))
    x = np.arange(len(groups))
    width = 0.8 / len(baselines)
    geomeans = report.get("geomean") or {}
    shown = []
    for k, b in enumerate(baselines):
        values = np.array([ratio.get((b, g, w), np.nan) for g, w in groups], dtype=float)
        shown.append(values)
        label = b + (f" (geomean {geomeans[b]['ratio']:.2f}x)" if b in geomeans else "")
        # Bars start at 1: up where sparsetir_py is faster, down where it is slower.
        ax.bar(x + (k - (len(baselines) - 1) / 2) * width, values - 1, width, bottom=1, label=label, color=f"C{k}")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    finite = np.concatenate(shown)
    finite = finite[np.isfinite(finite) & (finite > 0)]
    lo, hi = min(finite.min(initial=1.0), 1.0), max(finite.max(initial=1.0), 1.0)
    ax.set_ylim(lo / 1.25, hi * 1.25)
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}x" if hi / lo < 20 else ""))
    ax.set_xticks(x, [f"{g}\n{w}" for g, w in groups], fontsize=8)
    ax.set_ylabel("baseline time / sparsetir_py time")
    ax.legend(fontsize=8)
    op = str(report.get("op", "")).upper()
    ax.set_title(title if title is not None else f"{op} ratios per graph and width")
    return fig
