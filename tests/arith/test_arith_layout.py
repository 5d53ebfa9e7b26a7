"""XLA layouts (shapes and layouts document): linear index conversions both ways, as numbers and as
indexing maps, for row-major, column-major, permuted and tiled layouts with padding."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from sparsetir_py.arith.interval import int_range
from sparsetir_py.arith.layout_maps import delinearize_map, linearize_map
from sparsetir_py.ir import Cast, FlatBuffer, IntImm, Layout, Var
from sparsetir_py.ir.layout import LayoutError
from sparsetir_py.transform.lower_sparse_buffer import layout_offset


def reference_offset(index, shape, layout: Layout) -> int:
    """XLA's tiled-layout formula, written out: `linear_index((e // t, e % t), (ceil(d / t), t))`
    per tile, on the physical (major-to-minor) dimensions."""
    order = list(reversed(layout.minor_to_major))
    e = [index[d] for d in order]
    d = [shape[k] for k in order]
    for t in layout.tiles:
        pad = max(0, len(t) - len(e))
        e, d = [0] * pad + e, [1] * pad + d
        k = len(t)
        head_e, tail_e = e[: len(e) - k], e[len(e) - k :]
        head_d, tail_d = d[: len(d) - k], d[len(d) - k :]
        e = head_e + [x // s for x, s in zip(tail_e, t)] + [x % s for x, s in zip(tail_e, t)]
        d = head_d + [-(-n // s) for n, s in zip(tail_d, t)] + list(t)
    return int(np.ravel_multi_index(e, d)) if e else 0


def check_layout(shape, layout: Layout):
    """Numbers and maps agree with the reference; linearize and delinearize are inverse; padding
    offsets are exactly the ones outside the delinearization's domain."""
    lin = linearize_map(shape, layout)
    delin = delinearize_map(shape, layout)
    size = layout.size(shape)
    offsets = {}
    for index in itertools.product(*(range(n) for n in shape)):
        offset = reference_offset(index, shape, layout)
        assert layout.linear_index(index, shape) == offset
        assert lin.evaluate(index) == (offset,)
        assert delin.evaluate((offset,)) == index
        assert layout.multi_index(offset, shape) == index
        offsets[offset] = index
    assert len(offsets) == math.prod(shape)
    assert all(0 <= o < size for o in offsets)
    for offset in range(size):
        assert delin.contains((offset,)) == (offset in offsets)
        if offset not in offsets:
            assert layout.multi_index(offset, shape) is None
    return lin, delin


# --- the [2 x 3] array of the document ----------------------------------------------------------


def test_document_2x3_column_major():
    """minor_to_major [0, 1]: `a b c / d e f` is stored `a d b e c f`."""
    letters = np.array([["a", "b", "c"], ["d", "e", "f"]])
    layout = Layout((0, 1))
    memory = [""] * 6
    for index in itertools.product(range(2), range(3)):
        memory[layout.linear_index(index, (2, 3))] = letters[index]
    assert " ".join(memory) == "a d b e c f"
    assert str(linearize_map((2, 3), layout)) == "(d0, d1) -> (d1 * 2 + d0), domain: d0 in [0, 1], d1 in [0, 2]"
    assert str(delinearize_map((2, 3), layout)) == "(d0) -> (d0 mod 2, d0 floordiv 2), domain: d0 in [0, 5]"
    check_layout((2, 3), layout)


def test_document_2x3_row_major_is_the_default():
    """minor_to_major [1, 0]: stored `a b c d e f`; the default layout of new shapes."""
    letters = np.array([["a", "b", "c"], ["d", "e", "f"]])
    layout = Layout((1, 0))
    memory = [""] * 6
    for index in itertools.product(range(2), range(3)):
        memory[layout.linear_index(index, (2, 3))] = letters[index]
    assert " ".join(memory) == "a b c d e f"
    assert layout == Layout.row_major(2) and layout.is_row_major()
    assert FlatBuffer("B", (IntImm(2), IntImm(3)), "float32").layout == layout
    assert str(linearize_map((2, 3), layout)) == "(d0, d1) -> (d0 * 3 + d1), domain: d0 in [0, 1], d1 in [0, 2]"
    check_layout((2, 3), layout)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 1, 3, 2)])
def test_row_and_column_major_match_numpy(shape):
    for layout, order in [(Layout.row_major(len(shape)), "C"), (Layout.col_major(len(shape)), "F")]:
        lin, _ = check_layout(shape, layout)
        for index in itertools.product(*(range(n) for n in shape)):
            assert lin.evaluate(index) == (int(np.ravel_multi_index(index, shape, order=order)),)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_every_permutation_of_a_3d_shape(perm):
    shape = (2, 3, 4)
    layout = Layout(perm)
    check_layout(shape, layout)
    memory = np.arange(24)
    physical = [shape[d] for d in reversed(perm)]
    view = memory.reshape(physical).transpose(np.argsort(list(reversed(perm))))
    for index in itertools.product(*(range(n) for n in shape)):
        assert layout.linear_index(index, shape) == view[index]


def test_tiled_layout_figure():
    """F32[3,5]{1,0:T(2,2)} of XLA's tiled-layout document: 2x2 tiles cover the padded 4x6 array."""
    layout = Layout.parse("{1,0:T(2,2)}")
    assert layout.physical_shape((3, 5)) == (2, 3, 2, 2)
    assert layout.size((3, 5)) == 24
    assert [layout.linear_index((0, j), (3, 5)) for j in range(5)] == [0, 1, 4, 5, 8]
    assert [layout.linear_index((i, 0), (3, 5)) for i in range(3)] == [0, 2, 12]
    assert layout.linear_index((2, 4), (3, 5)) == 20
    check_layout((3, 5), layout)


@pytest.mark.parametrize(
    ("shape", "text"),
    [
        ((10, 200), "{1,0:T(8,128)(2,1)}"),
        ((16, 256), "{1,0:T(8,128)(2,1)}"),
        ((3, 130), "{0,1:T(8,128)}"),
        ((5, 7), "{1,0:T(4)}"),
        ((2, 3, 5), "{2,0,1:T(2,4)(2,1)}"),
        ((7,), "{0:T(2,4)}"),
        ((3, 3), "{1,0:T(2,2)L(16)}"),
    ],
)
def test_tiled_layouts_with_padding(shape, text):
    layout = Layout.parse(text)
    assert str(layout) == text
    check_layout(shape, layout)


def test_document_bf16_example():
    """`bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}`: dims 3, 2, 0, 1 from minor to major, tiled
    8x128 and then 2x1 (pairs of rows interleaved, as for 16-bit types)."""
    shape = (8, 1, 1280, 16384)
    layout = Layout.parse("{3,2,0,1:T(8,128)(2,1)}")
    assert layout.minor_to_major == (3, 2, 0, 1) and layout.tiles == ((8, 128), (2, 1))
    assert layout.physical_shape(shape) == (1, 8, 160, 128, 4, 128, 2, 1)
    assert layout.size(shape) == math.prod(shape)
    lin = linearize_map(shape, layout)
    rng = np.random.default_rng(1)
    for _ in range(200):
        index = tuple(int(rng.integers(0, n)) for n in shape)
        assert lin.evaluate(index) == (reference_offset(index, shape, layout),)
    # Rows 2k and 2k+1 of a tile are interleaved: (.., r, c) and (.., r + 1, c) are neighbours.
    assert layout.linear_index((0, 0, 1, 0), shape) == layout.linear_index((0, 0, 0, 0), shape) + 1


def test_tail_padding():
    layout = Layout((0,), tail_padding_alignment=4)
    assert layout.size((3,)) == 4
    assert layout.multi_index(3, (3,)) is None
    assert str(delinearize_map((3,), layout)) == "(d0) -> (d0), domain: d0 in [0, 2]"
    assert str(layout) == "{0:L(4)}"


def test_layout_text():
    assert Layout.parse("{3,2,0,1:T(8,128)(2,1)}") == Layout((3, 2, 0, 1), ((8, 128), (2, 1)))
    assert Layout.parse("{2,1,0:T(8,128)(2,1)S(1)}") == Layout((2, 1, 0), ((8, 128), (2, 1)))
    assert Layout.parse("1,0") == Layout((1, 0))
    with pytest.raises(LayoutError, match="cannot parse"):
        Layout.parse("{1,0:X(2)}")


def test_layout_errors_are_reported_when_used():
    """Ill-formed layouts can be built (the verifier reports them with their buffer) but not used."""
    with pytest.raises(LayoutError, match="permutation"):
        Layout((0, 0)).linear_index((0, 0), (2, 2))
    with pytest.raises(LayoutError, match="positive"):
        linearize_map((2, 2), Layout((1, 0), tiles=((8, 0),)))
    with pytest.raises(LayoutError, match="has 2 dimensions, the shape has 3"):
        linearize_map((2, 2, 2), Layout((1, 0)))
    with pytest.raises(LayoutError, match="out of bounds"):
        Layout((1, 0)).linear_index((2, 0), (2, 2))


def test_offset_expressions_for_lowering():
    """`layout_offset` gives the IR offset of `B[i, j]`: symbolic shapes without tiles, maps with."""
    i, j, n = Var("i"), Var("j"), Var("n")
    row = layout_offset(Layout((1, 0)), [i, j], [IntImm(4), n])
    col = layout_offset(Layout((0, 1)), [i, j], [IntImm(4), n])
    for vi, vj, vn in [(0, 0, 3), (3, 2, 5), (1, 4, 7)]:
        ranges = {i: (vi, vi), j: (vj, vj), n: (vn, vn)}
        assert int_range(row, ranges) == (vi * vn + vj,) * 2
        assert int_range(col, ranges) == (vi + vj * 4,) * 2
    tiled = Layout.parse("{1,0:T(2,2)}")
    expr = layout_offset(tiled, [i, j], [3, 5])
    for vi, vj in itertools.product(range(3), range(5)):
        assert int_range(expr, {i: (vi, vi), j: (vj, vj)}) == (tiled.linear_index((vi, vj), (3, 5)),) * 2
    with pytest.raises(LayoutError, match="constant shape"):
        layout_offset(tiled, [i, j], [3, n])
    cast_shape = [Cast("int64", IntImm(3)), Cast("int64", IntImm(5))]
    assert layout_offset(tiled, [i, j], cast_shape) == expr
