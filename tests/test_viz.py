"""`sparsetir_py.viz`: each plot draws what it says (checked on the artists, not by eye), writes a
PNG, and bad input is a named error."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse

pytest.importorskip("matplotlib")

import format_rules
import sparsetir_py as sp
from sparsetir_py import viz


def _png(fig, tmp_path) -> bytes:
    path = tmp_path / "plot.png"
    fig.savefig(path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG")
    return data


def test_spy_places_one_marker_per_nonzero(tmp_path):
    A = sp.data.load_matrix("karate")
    fig = viz.spy(A)
    (points,) = fig.axes[0].collections
    xy = points.get_offsets()
    assert len(xy) == A.nnz
    coo = A.tocoo()
    assert sorted(map(tuple, np.asarray(xy).astype(int))) == sorted(zip(coo.col.tolist(), coo.row.tolist()))
    assert fig.axes[0].get_title() == "34 x 34, 156 nonzeros"
    _png(fig, tmp_path)


def test_spy_of_a_large_matrix_is_a_density_image(tmp_path, monkeypatch):
    monkeypatch.setattr(viz, "DENSITY_THRESHOLD", 1000)
    A = sp.data.load_matrix("cora")
    fig = viz.spy(A)
    (image,) = fig.axes[0].images
    assert int(np.ma.filled(image.get_array(), 0).sum()) == A.nnz
    _png(fig, tmp_path)


@pytest.mark.parametrize("shape", [(0, 0), (5, 0), (3, 7)])
def test_spy_of_empty_matrices(shape, tmp_path):
    _png(viz.spy(scipy.sparse.csr_matrix(shape, dtype=np.float32)), tmp_path)


def test_spy_parts_draw_each_parts_nonzeros(tmp_path):
    A = sp.data.load_matrix("cora")
    d = sp.format.decompose(A, format_rules.hyb, num_col_parts=2, buckets=[2, 8])
    fig = viz.spy_parts(d, ncols=3)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    parts = [p for p in d.parts if p.nnz]
    assert [ax.get_title().split(":")[0] for ax in shown] == [p.name for p in parts]
    assert sum(len(ax.collections[0].get_offsets()) for ax in shown) == A.nnz
    _png(fig, tmp_path)


def test_row_length_histogram_counts_every_row_and_marks_buckets(tmp_path):
    A = sp.data.load_matrix("pubmed")
    fig = viz.row_length_histogram(A, buckets=[1, 4, 16])
    ax = fig.axes[0]
    assert sum(p.get_height() for p in ax.patches) == A.shape[0]
    assert sorted(line.get_xdata()[0] for line in ax.lines) == [1.5, 4.5, 16.5]
    _png(fig, tmp_path)


def test_padding_bars_add_up_to_the_slots(tmp_path):
    A = sp.data.load_matrix("karate")
    d = sp.format.decompose(A, format_rules.ell, buckets=[2, 8, 32])
    fig = viz.padding(d)
    heights = [p.get_height() for p in fig.axes[0].patches]
    k = len(d.parts)
    assert heights[:k] == [p.nnz for p in d.parts] and heights[k:] == [p.padding for p in d.parts]
    _png(fig, tmp_path)


def test_timings_label_the_speedups(tmp_path):
    fig = viz.timings({"csr": 2e-3, "hyb": 1e-3}, baseline="csr")
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels == ["2 ms (1.00x)", "1 ms (2.00x)"]
    with pytest.raises(viz.VizError, match="baseline 'x'"):
        viz.timings({"a": 1.0}, baseline="x")
    _png(fig, tmp_path)


def test_bench_ratios_from_a_report_file(tmp_path):
    report = {
        "op": "sddmm",
        "comparisons": [
            {"graph": g, "width": w, "baseline": b, "ratio": r}
            for (g, w, b, r) in [("cora", 32, "torch", 1.5), ("cora", 32, "scipy", 0.5), ("pubmed", 32, "torch", 2.0)]
        ],
        "geomean": {"torch": {"ratio": 1.73}},
    }
    path = tmp_path / "sddmm.json"
    path.write_text(json.dumps(report))
    fig = viz.bench_ratios(path)
    ax = fig.axes[0]
    tops = sorted(round(p.get_y() + p.get_height(), 6) for p in ax.patches if np.isfinite(p.get_height()))
    assert tops == [0.5, 1.5, 2.0]  # bars run from 1 to the ratio
    assert any("geomean 1.73x" in t.get_text() for t in ax.get_legend().get_texts())
    _png(fig, tmp_path)
    with pytest.raises(viz.VizError, match="no ratios"):
        viz.bench_ratios({"comparisons": []})
    with pytest.raises(viz.VizError, match="no bench report"):
        viz.bench_ratios(tmp_path / "missing.json")


def test_bad_input_is_a_named_error():
    with pytest.raises(viz.VizError, match="scipy sparse matrix"):
        viz.spy("not a matrix")
    assert issubclass(viz.VizError, sp.SparseTIRError)


def test_draw_into_a_given_axes():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    assert viz.spy(sp.data.load_matrix("karate"), ax=ax) is fig
