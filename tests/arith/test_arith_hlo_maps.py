"""The per-operation indexing maps of XLA's "Indexing analysis" document, built from small maps.

For each HLO operation of the document, the output-to-input (and input-to-output) maps are built
from the operation's attributes, mostly by composing small maps (shifts, strides, reshapes,
transposes), then checked twice:

1. against the document: after simplification, the same map and the same domain as the
   document's text (parsed);
2. against numpy: on small instances, evaluating the map over its whole domain reads exactly the
   elements the operation reads.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest

from sparsetir_py.arith import (
    AffineMap,
    IndexingMap,
    Interval,
    RuntimeVar,
    const,
    dim,
    parse_indexing_map,
    symbol,
)
from sparsetir_py.arith.layout_maps import bitcast_map, reshape_map
from sparsetir_py.ir import Layout

# --- small maps and how to combine them -------------------------------------------------------


def box(shape: Sequence[int]) -> tuple[Interval, ...]:
    return tuple(Interval(0, n - 1) for n in shape)


def shift(shape: Sequence[int], offsets: Sequence[int]) -> IndexingMap:
    """`(d_i) -> (d_i - offsets[i])` over `shape`."""
    return IndexingMap(tuple(dim(i) - o for i, o in enumerate(offsets)), box(shape))


def product(*maps: IndexingMap) -> IndexingMap:
    """The maps side by side: dimensions, symbols and results concatenated (no runtime variables)."""
    results, dims, ranges, constraints = [], [], [], []
    nd = ns = 0
    for m in maps:
        assert not m.rt_vars
        move_d = {i: dim(nd + i) for i in range(m.num_dims)}
        move_s = {j: symbol(ns + j) for j in range(m.num_symbols)}
        results += [e.substitute(move_d, move_s) for e in m.results]
        constraints += [(e.substitute(move_d, move_s), r) for e, r in m.constraints]
        dims += m.dims
        ranges += m.range_vars
        nd, ns = nd + m.num_dims, ns + m.num_symbols
    return IndexingMap(tuple(results), tuple(dims), tuple(ranges), (), tuple(constraints))


def unstride(count: int, stride: int) -> IndexingMap:
    """`(x) -> (x floordiv stride)` on the multiples of `stride` that index one of `count` elements."""
    return IndexingMap(
        (dim(0).floordiv(stride),),
        (Interval(0, (count - 1) * stride),),
        constraints=((dim(0).mod(stride), Interval(0, 0)),),
    )


def doc(text: str) -> IndexingMap:
    return parse_indexing_map(text).simplify()


def same(mine: IndexingMap, text: str) -> None:
    expected = doc(text)
    got = mine.simplify()
    assert got == expected, f"\n got: {got}\nwant: {expected}"
    assert str(got) == str(expected)


def points(m: IndexingMap):
    """Every valid `(dims, symbols)` of a map (no runtime variables) with its results."""
    for d, s in m.domain_points():
        yield d, s, m.evaluate(d, s)


# --- the operations ---------------------------------------------------------------------------


def elementwise(shape):
    return IndexingMap.identity(shape)


def broadcast_out_to_in(out_shape, dims):
    return IndexingMap(tuple(dim(d) for d in dims), box(out_shape))


def broadcast_in_to_out(in_shape, out_shape, dims):
    others = [k for k in range(len(out_shape)) if k not in dims]
    results = [None] * len(out_shape)
    for i, d in enumerate(dims):
        results[d] = dim(i)
    for j, k in enumerate(others):
        results[k] = symbol(j)
    return IndexingMap(tuple(results), box(in_shape), box([out_shape[k] for k in others]))


def transpose_out_to_in(in_shape, perm):
    out_shape = [in_shape[p] for p in perm]
    return IndexingMap(tuple(dim(perm.index(j)) for j in range(len(perm))), box(out_shape))


def transpose_in_to_out(in_shape, perm):
    return IndexingMap(tuple(dim(p) for p in perm), box(in_shape))


def reverse(shape, dims):
    # (d) -> (-d) composed with (d) -> (d + n - 1) on the reversed dimensions.
    negate = IndexingMap(tuple(-dim(i) if i in dims else dim(i) for i in range(len(shape))), box(shape))
    back = IndexingMap(
        tuple(dim(i) + (n - 1) if i in dims else dim(i) for i, n in enumerate(shape)),
        tuple(Interval(1 - n, 0) if i in dims else Interval(0, n - 1) for i, n in enumerate(shape)),
    )
    return back.compose(negate)


def reduce_out_to_in(in_shape, dims):
    kept = [k for k in range(len(in_shape)) if k not in dims]
    results, s = [], 0
    for k in range(len(in_shape)):
        if k in dims:
            results.append(symbol(s))
            s += 1
        else:
            results.append(dim(kept.index(k)))
    return IndexingMap(tuple(results), box([in_shape[k] for k in kept]), box([in_shape[k] for k in dims]))


def reduce_in_to_out(in_shape, dims):
    return IndexingMap(tuple(dim(k) for k in range(len(in_shape)) if k not in dims), box(in_shape))


def slice_out_to_in(starts, limits, strides):
    out_shape = [-(-(hi - lo) // s) for lo, hi, s in zip(starts, limits, strides)]
    return IndexingMap(tuple(dim(i) * s + lo for i, (lo, s) in enumerate(zip(starts, strides))), box(out_shape))


def slice_in_to_out(in_shape, starts, limits, strides):
    # Shift by the start, then keep the multiples of the stride that land in the output.
    counts = [-(-(hi - lo) // s) for lo, hi, s in zip(starts, limits, strides)]
    strided = product(*(unstride(c, s) for c, s in zip(counts, strides)))
    return strided.compose(shift(in_shape, starts))


def concat_out_to_in(shapes, axis, k):
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    offset = sum(s[axis] for s in shapes[:k])
    offsets = [offset if i == axis else 0 for i in range(len(out_shape))]
    return IndexingMap.identity(shapes[k]).compose(shift(out_shape, offsets))


def concat_in_to_out(shapes, axis, k):
    offset = sum(s[axis] for s in shapes[:k])
    return shift(shapes[k], [-offset if i == axis else 0 for i in range(len(shapes[k]))])


def dot_out_to_lhs(batch, m, n, k):
    return IndexingMap((dim(0), dim(1), symbol(0)), box([batch, m, n]), box([k]))


def dot_out_to_rhs(batch, m, n, k):
    return IndexingMap((dim(0), symbol(0), dim(2)), box([batch, m, n]), box([k]))


def dot_lhs_to_out(batch, m, n, k):
    return IndexingMap((dim(0), dim(1), symbol(0)), box([batch, m, k]), box([n]))


def dot_rhs_to_out(batch, m, n, k):
    return IndexingMap((dim(0), symbol(0), dim(1)), box([batch, k, n]), box([m]))


def pad_out_to_in(in_shape, config):
    """`config[i] = (low, high, interior)`; output element `low + i * (interior + 1)` is input `i`."""
    out_shape = [lo + hi + n + (n - 1) * interior for n, (lo, hi, interior) in zip(in_shape, config)]
    strided = product(*(unstride(n, interior + 1) for n, (_, _, interior) in zip(in_shape, config)))
    return strided.compose(shift(out_shape, [lo for lo, _, _ in config]))


def reduce_window_out_to_in(in_shape, window, strides, padding=None, base_dilation=None):
    """A window over the padded (and dilated) input, composed with the pad's map. Window
    dimensions of size 1 need no range variable (as in XLA)."""
    padding = padding or [(0, 0)] * len(in_shape)
    dilation = base_dilation or [1] * len(in_shape)
    padded = [lo + hi + (n - 1) * d + 1 for n, (lo, hi), d in zip(in_shape, padding, dilation)]
    out_shape = [(p - w) // s + 1 for p, w, s in zip(padded, window, strides)]
    wide = [i for i, w in enumerate(window) if w > 1]
    window_map = IndexingMap(
        tuple(dim(i) * s + (symbol(wide.index(i)) if i in wide else 0) for i, s in enumerate(strides)),
        box(out_shape),
        box([window[i] for i in wide]),
    )
    pad = pad_out_to_in(in_shape, [(lo, hi, d - 1) for (lo, hi), d in zip(padding, dilation)])
    return pad.compose(window_map)


def offsets_rt_vars(in_shape, sizes, offsets_hlo, out_rank):
    access = AffineMap(out_rank, 0, ())
    return tuple(RuntimeVar(Interval(0, n - s), hlo, access) for n, s, hlo in zip(in_shape, sizes, offsets_hlo))


def dynamic_slice_out_to_src(in_shape, sizes, offsets_hlo):
    n = len(sizes)
    return IndexingMap(
        tuple(dim(i) + symbol(i) for i in range(n)), box(sizes), (), offsets_rt_vars(in_shape, sizes, offsets_hlo, n)
    )


def dynamic_update_slice_out_to_update(shape, upd_shape, offsets_hlo):
    n = len(shape)
    return IndexingMap(
        tuple(dim(i) - symbol(i) for i in range(n)),
        box(shape),
        (),
        offsets_rt_vars(shape, upd_shape, offsets_hlo, n),
    )


def gather_out_to_operand(operand_shape, batch, slice_sizes, index_size, indices_hlo):
    """The simple gathers XLA supports: `offset_dims={1,...}`, `collapsed_slice_dims={}`,
    `start_index_map={0,...}`, `index_vector_dim=1`. Start `j` of the slice is read from
    `indices[d0, j]`, clamped so that the slice stays in bounds."""
    rank = len(operand_shape)
    access = [AffineMap(1 + rank, 0, (dim(0), const(j))) for j in range(index_size)]
    rt = tuple(
        RuntimeVar(Interval(0, operand_shape[j] - slice_sizes[j]), indices_hlo, access[j]) for j in range(index_size)
    )
    results = tuple(dim(1 + d) + symbol(d) if d < index_size else dim(1 + d) for d in range(rank))
    return IndexingMap(results, box([batch, *slice_sizes]), (), rt)


def gather_out_to_indices(batch, slice_sizes, index_size):
    return IndexingMap((dim(0), symbol(0)), box([batch, *slice_sizes]), box([index_size]))


# --- 1. The document's maps -------------------------------------------------------------------


def test_intro_broadcast():
    """`(i, j, k) -> (j)` for the broadcast of tensor<20xf32> to tensor<10x20x30xf32>."""
    named = doc("(i, j, k) -> (j), domain: i in [0, 9], j in [0, 19], k in [0, 29]")
    assert broadcast_out_to_in([10, 20, 30], [1]).simplify() == named  # names are not compared
    assert str(named) == "(i, j, k) -> (j), domain: i in [0, 9], j in [0, 19], k in [0, 29]"


def test_elementwise():
    text = "(d0, d1) -> (d0, d1)\ndomain:\nd0 in [0, 9]\nd1 in [0, 19]"
    same(elementwise([10, 20]), text)
    assert elementwise([10, 20]) == parse_indexing_map(text)


def test_broadcast():
    out_to_in = broadcast_out_to_in([10, 20, 30], [1])
    same(out_to_in, "(d0, d1, d2) -> (d1)\ndomain:\nd0 in [0, 9]\nd1 in [0, 19]\nd2 in [0, 29]")
    in_to_out = broadcast_in_to_out([20], [10, 20, 30], [1])
    same(in_to_out, "(d0)[s0, s1] -> (s0, d0, s1)\ndomain:\nd0 in [0, 19]\ns0 in [0, 9]\ns1 in [0, 29]")


DYNAMIC_SLICE_DOC = """(d0, d1, d2)[s0, s1, s2] -> (d0 + s0, d1 + s1, d2 + s2)
domain:
d0 in [0, 0]
d1 in [0, 1]
d2 in [0, 31]
s0 in [0, 1]
hlo: of1 = s32[] parameter(1)
(d0, d1, d2) -> ()
s1 in [0, 0]
hlo: of2 = s32[] parameter(2)
(d0, d1, d2) -> ()
s2 in [0, 226]
hlo: of3 = s32[] parameter(3)
(d0, d1, d2) -> ()"""


def test_dynamic_slice():
    offsets = ["of1 = s32[] parameter(1)", "of2 = s32[] parameter(2)", "of3 = s32[] parameter(3)"]
    mine = dynamic_slice_out_to_src([2, 2, 258], [1, 2, 32], offsets)
    assert mine == parse_indexing_map(DYNAMIC_SLICE_DOC)
    same(mine, DYNAMIC_SLICE_DOC)
    assert [v.hlo for v in mine.rt_vars] == offsets
    assert [(v.hlo, v.access) for v in parse_indexing_map(DYNAMIC_SLICE_DOC).rt_vars] == [
        (v.hlo, v.access) for v in mine.rt_vars
    ]
    assert str(mine) == (
        "(d0, d1, d2){rt0, rt1, rt2} -> (d0 + rt0, d1 + rt1, d2 + rt2), domain: d0 in [0, 0], d1 in [0, 1],"
        " d2 in [0, 31], rt0 in [0, 1], rt1 in [0, 0], rt2 in [0, 226]"
    )
    to_offsets = IndexingMap((), box([1, 2, 32]))
    same(to_offsets, "(d0, d1, d2) -> ()\ndomain:\nd0 in [0, 0]\nd1 in [0, 1]\nd2 in [0, 31]")


DUS_DOC = """(d0, d1)[s0, s1] -> (d0 - s0, d1 - s1)
domain:
d0 in [0, 19]
d1 in [0, 29]
s0 in [0, 15]
hlo: of1 = s32[] parameter(2)
(d0, d1) -> ()
s1 in [0, 20]
hlo: of2 = s32[] parameter(3)
(d0, d1) -> ()"""


def test_dynamic_update_slice():
    same(elementwise([20, 30]), "(d0, d1) -> (d0, d1)\ndomain:\nd0 in [0, 19]\nd1 in [0, 29]")
    offsets = ["of1 = s32[] parameter(2)", "of2 = s32[] parameter(3)"]
    mine = dynamic_update_slice_out_to_update([20, 30], [5, 10], offsets)
    assert mine == parse_indexing_map(DUS_DOC)
    same(mine, DUS_DOC)
    same(IndexingMap((), box([20, 30])), "(d0, d1) -> ()\ndomain:\nd0 in [0, 19]\nd1 in [0, 29]")


GATHER_DOC = """(d0, d1, d2, d3)[s0, s1] -> (d1 + s0, d2 + s1, d3)
domain:
d0 in [0, 1805]
d1 in [0, 6]
d2 in [0, 7]
d3 in [0, 3]
s0 in [0, 26]
hlo: indices = s32[1806,2]{1,0} parameter(1)
(d0, d1, d2, d3) -> (d0, 0)
s1 in [0, 68]
hlo: indices = s32[1806,2]{1,0} parameter(1)
(d0, d1, d2, d3) -> (d0, 1)"""


def test_gather():
    hlo = "indices = s32[1806,2]{1,0} parameter(1)"
    mine = gather_out_to_operand([33, 76, 70], 1806, [7, 8, 4], 2, hlo)
    assert mine == parse_indexing_map(GATHER_DOC)
    same(mine, GATHER_DOC)
    assert str(mine.rt_vars[1].access) == "(d0, d1, d2, d3) -> (d0, 1)"
    same(
        gather_out_to_indices(1806, [7, 8, 4], 2),
        "(d0, d1, d2, d3)[s0] -> (d0, s0)\ndomain:\nd0 in [0, 1805]\nd1 in [0, 6]\nd2 in [0, 7]\nd3 in [0, 3]"
        "\ns0 in [0, 1]",
    )


def test_transpose():
    same(
        transpose_out_to_in([3, 12288, 6, 128], [0, 2, 3, 1]),
        "(d0, d1, d2, d3) -> (d0, d3, d1, d2)\ndomain:\nd0 in [0, 2]\nd1 in [0, 5]\nd2 in [0, 127]\nd3 in [0, 12287]",
    )
    same(
        transpose_in_to_out([3, 12288, 6, 128], [0, 2, 3, 1]),
        "(d0, d1, d2, d3) -> (d0, d2, d3, d1)\ndomain:\nd0 in [0, 2]\nd1 in [0, 12287]\nd2 in [0, 5]\nd3 in [0, 127]",
    )


def test_reverse():
    text = (
        "(d0, d1, d2, d3) -> (d0, -d1 + 16, -d2 + 8, d3)\ndomain:\nd0 in [0, 0]\nd1 in [0, 16]\nd2 in [0, 8]"
        "\nd3 in [0, 8]"
    )
    same(reverse([1, 17, 9, 9], [1, 2]), text)
    assert str(reverse([1, 17, 9, 9], [1, 2])) == (
        "(d0, d1, d2, d3) -> (d0, -d1 + 16, -d2 + 8, d3),"
        " domain: d0 in [0, 0], d1 in [0, 16], d2 in [0, 8], d3 in [0, 8]"
    )


def test_reduce_variadic():
    for _input in range(2):  # both inputs of the variadic reduce have the same maps
        same(reduce_out_to_in([256, 10], [0]), "(d0)[s0] -> (s0, d0)\ndomain:\nd0 in [0, 9]\ns0 in [0, 255]")
        same(IndexingMap((), box([10])), "(d0) -> ()\ndomain:\nd0 in [0, 9]")
        same(reduce_in_to_out([256, 10], [0]), "(d0, d1) -> (d1)\ndomain:\nd0 in [0, 255]\nd1 in [0, 9]")
        same(IndexingMap((symbol(0),), (), box([10])), "()[s0] -> (s0)\ndomain:\ns0 in [0, 9]")


def test_slice():
    same(
        slice_out_to_in([5, 3, 0], [10, 20, 50], [1, 7, 2]),
        "(d0, d1, d2) -> (d0 + 5, d1 * 7 + 3, d2 * 2)\ndomain:\nd0 in [0, 4]\nd1 in [0, 2]\nd2 in [0, 24]",
    )
    same(
        slice_in_to_out([10, 20, 50], [5, 3, 0], [10, 20, 50], [1, 7, 2]),
        "(d0, d1, d2) -> (d0 - 5, (d1 - 3) floordiv 7, d2 floordiv 2)\ndomain:\nd0 in [5, 9]\nd1 in [3, 17]"
        "\nd2 in [0, 48]\n(d1 - 3) mod 7 in [0, 0]\nd2 mod 2 in [0, 0]",
    )


RESHAPES = [
    # collapse
    ([4, 8], [32], "(d0) -> (d0 floordiv 8, d0 mod 8)\ndomain:\nd0 in [0, 31]"),
    ([32], [4, 8], "(d0, d1) -> (d0 * 8 + d1)\ndomain:\nd0 in [0, 3]\nd1 in [0, 7]"),
    # generic 1: linearization then delinearization
    (
        [4, 8],
        [2, 4, 4],
        "(d0, d1, d2) -> (d0 * 2 + d1 floordiv 2, d2 + (d1 mod 2) * 4)\ndomain:\nd0 in [0, 1]\nd1 in [0, 3]"
        "\nd2 in [0, 3]",
    ),
    (
        [2, 4, 4],
        [4, 8],
        "(d0, d1) -> (d0 floordiv 2, d1 floordiv 4 + (d0 mod 2) * 2, d1 mod 4)\ndomain:\nd0 in [0, 3]\nd1 in [0, 7]",
    ),
    # generic 2: expanded and collapsed subshapes
    (
        [4, 8, 12],
        [32, 3, 4],
        "(d0, d1, d2) -> (d0 floordiv 8, d0 mod 8, d1 * 4 + d2)\ndomain:\nd0 in [0, 31]\nd1 in [0, 2]\nd2 in [0, 3]",
    ),
    (
        [32, 3, 4],
        [4, 8, 12],
        "(d0, d1, d2) -> (d0 * 8 + d1, d2 floordiv 4, d2 mod 4)\ndomain:\nd0 in [0, 3]\nd1 in [0, 7]\nd2 in [0, 11]",
    ),
]


@pytest.mark.parametrize(("in_shape", "out_shape", "text"), RESHAPES)
def test_reshape(in_shape, out_shape, text):
    """Output-to-input maps of a reshape `in_shape -> out_shape` (the input-to-output map of the
    same reshape is the output-to-input map of the reverse one, the document's second map)."""
    same(reshape_map(in_shape, out_shape), text)


CONCAT = [[2, 5, 7], [2, 11, 7], [2, 17, 7]]


def test_concatenate():
    out_to_in = [
        "(d0, d1, d2) -> (d0, d1, d2)\ndomain:\nd0 in [0, 1]\nd1 in [0, 4]\nd2 in [0, 6]",
        "(d0, d1, d2) -> (d0, d1 - 5, d2)\ndomain:\nd0 in [0, 1]\nd1 in [5, 15]\nd2 in [0, 6]",
        "(d0, d1, d2) -> (d0, d1 - 16, d2)\ndomain:\nd0 in [0, 1]\nd1 in [16, 32]\nd2 in [0, 6]",
    ]
    in_to_out = [
        "(d0, d1, d2) -> (d0, d1, d2)\ndomain:\nd0 in [0, 1]\nd1 in [0, 4]\nd2 in [0, 6]",
        "(d0, d1, d2) -> (d0, d1 + 5, d2)\ndomain:\nd0 in [0, 1]\nd1 in [0, 10]\nd2 in [0, 6]",
        "(d0, d1, d2) -> (d0, d1 + 16, d2)\ndomain:\nd0 in [0, 1]\nd1 in [0, 16]\nd2 in [0, 6]",
    ]
    for k in range(3):
        same(concat_out_to_in(CONCAT, 1, k), out_to_in[k])
        same(concat_in_to_out(CONCAT, 1, k), in_to_out[k])


def test_dot():
    same(
        dot_out_to_lhs(4, 128, 64, 256),
        "(d0, d1, d2)[s0] -> (d0, d1, s0)\ndomain:\nd0 in [0, 3]\nd1 in [0, 127]\nd2 in [0, 63]\ns0 in [0, 255]",
    )
    same(
        dot_out_to_rhs(4, 128, 64, 256),
        "(d0, d1, d2)[s0] -> (d0, s0, d2)\ndomain:\nd0 in [0, 3]\nd1 in [0, 127]\nd2 in [0, 63]\ns0 in [0, 255]",
    )
    same(
        dot_lhs_to_out(4, 128, 64, 256),
        "(d0, d1, d2)[s0] -> (d0, d1, s0)\ndomain:\nd0 in [0, 3]\nd1 in [0, 127]\nd2 in [0, 255]\ns0 in [0, 63]",
    )
    same(
        dot_rhs_to_out(4, 128, 64, 256),
        "(d0, d1, d2)[s0] -> (d0, s0, d1)\ndomain:\nd0 in [0, 3]\nd1 in [0, 255]\nd2 in [0, 63]\ns0 in [0, 127]",
    )


def test_pad():
    """padding=1_4_1x4_8_0 of f32[4, 4] into f32[12, 16]."""
    same(
        pad_out_to_in([4, 4], [(1, 4, 1), (4, 8, 0)]),
        "(d0, d1) -> ((d0 - 1) floordiv 2, d1 - 4)\ndomain:\nd0 in [1, 7]\nd1 in [4, 7]\n(d0 - 1) mod 2 in [0, 0]",
    )
    same(IndexingMap((), box([12, 16])), "(d0, d1) -> ()\ndomain:\nd0 in [0, 11]\nd1 in [0, 15]")


def test_reduce_window():
    same(
        reduce_window_out_to_in([1024, 514], [1, 512], [1, 1]),
        "(d0, d1)[s0] -> (d0, d1 + s0)\ndomain:\nd0 in [0, 1023]\nd1 in [0, 2]\ns0 in [0, 511]",
    )
    same(IndexingMap((), box([1024, 3])), "(d0, d1) -> ()\ndomain:\nd0 in [0, 1023]\nd1 in [0, 2]")


def test_fusion_one_input_two_maps():
    """`p0 + transpose(p0)`: p0 is read through `(d0, d1) -> (d0, d1)` and `(d0, d1) -> (d1, d0)`."""
    shape = [1000, 1000]
    add_operand = elementwise(shape)
    direct = add_operand
    through_transpose = transpose_out_to_in(shape, [1, 0]).compose(add_operand)
    maps = {direct.simplify(), through_transpose.simplify()}
    assert maps == {
        doc("(d0, d1) -> (d0, d1), domain: d0 in [0, 999], d1 in [0, 999]"),
        doc("(d0, d1) -> (d1, d0), domain: d0 in [0, 999], d1 in [0, 999]"),
    }


def test_fusion_two_transposes_deduplicate():
    """Both paths from the root to p0 give `(d0, d1, d2) -> (d2, d0, d1)`: one map after deduplication."""
    p0 = [20, 10, 50]
    lhs_t1 = [p0[p] for p in (1, 0, 2)]
    rhs_t1 = [p0[p] for p in (2, 1, 0)]
    root = [lhs_t1[p] for p in (0, 2, 1)]
    add = elementwise(root)
    lhs = transpose_out_to_in(p0, [1, 0, 2]).compose(
        elementwise(lhs_t1).compose(transpose_out_to_in(lhs_t1, [0, 2, 1]).compose(add))
    )
    rhs = transpose_out_to_in(p0, [2, 1, 0]).compose(
        elementwise(rhs_t1).compose(transpose_out_to_in(rhs_t1, [1, 0, 2]).compose(add))
    )
    maps = {lhs.simplify(), rhs.simplify()}
    assert maps == {doc("(d0, d1, d2) -> (d2, d0, d1), domain: d0 in [0, 9], d1 in [0, 49], d2 in [0, 19]")}


def test_fusion_softmax():
    """Softmax over the last dimension: p0 is read elementwise and through a reduce + broadcast."""
    shape = [2, 65, 125]
    direct = elementwise(shape)
    through_reduce = reduce_out_to_in(shape, [2]).compose(broadcast_out_to_in(shape, [0, 1]))
    assert {direct.simplify(), through_reduce.simplify()} == {
        doc("(d0, d1, d2)[s0] -> (d0, d1, s0)\ndomain:\nd0 in [0, 1]\nd1 in [0, 64]\nd2 in [0, 124]\ns0 in [0, 124]"),
        doc("(d0, d1, d2) -> (d0, d1, d2)\ndomain:\nd0 in [0, 1]\nd1 in [0, 64]\nd2 in [0, 124]"),
    }


def test_bitcast_is_transpose_reshape_transpose():
    """f32[2,3,4]{0,1,2} bitcast to f32[6,4]{1,0}: the same bytes read through two layouts. As a
    map it is the composition transpose (to physical order), reshape, transpose back."""
    in_shape, in_layout = [2, 3, 4], Layout((0, 1, 2))
    out_shape, out_layout = [6, 4], Layout((1, 0))
    mine = bitcast_map(in_shape, in_layout, out_shape, out_layout)
    physical_in = [in_shape[d] for d in reversed(in_layout.minor_to_major)]  # [4, 3, 2]
    to_logical = transpose_in_to_out(physical_in, [2, 1, 0])  # physical index -> logical index
    composed = to_logical.compose(reshape_map(physical_in, out_shape))
    assert mine == composed.simplify()
    assert str(mine) == (
        "(d0, d1) -> (d1 mod 2, (d0 * 2 + d1 floordiv 2) mod 3, (d0 * 4 + d1) floordiv 6),"
        " domain: d0 in [0, 5], d1 in [0, 3]"
    )


# --- 2. The same maps against numpy, over whole domains of small instances ----------------------


def check_gather_map(m: IndexingMap, out: np.ndarray, src: np.ndarray):
    """Every output element equals the input element the map points to."""
    seen = 0
    for d, s, idx in points(m):
        assert not s
        assert out[d] == src[idx]
        seen += 1
    assert seen == out.size


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_numpy_transpose(perm):
    x = np.arange(24).reshape(2, 3, 4)
    check_gather_map(transpose_out_to_in(list(x.shape), list(perm)).simplify(), np.transpose(x, perm), x)
    y = np.transpose(x, perm)
    for d, _, idx in points(transpose_in_to_out(list(x.shape), list(perm))):
        assert y[idx] == x[d]


def test_numpy_broadcast_and_reverse():
    x = np.arange(5)
    y = np.broadcast_to(x[None, :, None], (3, 5, 2))
    check_gather_map(broadcast_out_to_in([3, 5, 2], [1]), y, x)
    hits = {}
    for d, _, idx in points(broadcast_in_to_out([5], [3, 5, 2], [1])):
        hits.setdefault(d, set()).add(idx)
    assert all(len(v) == 6 and all(y[i] == x[d] for i in v) for d, v in hits.items())
    z = np.arange(2 * 5 * 3).reshape(2, 5, 3)
    check_gather_map(reverse([2, 5, 3], [0, 2]).simplify(), z[::-1, :, ::-1], z)


def test_numpy_reduce():
    x = np.arange(6 * 4).reshape(6, 4)
    m = reduce_out_to_in([6, 4], [0])
    read = {}
    for d, _, idx in points(m):
        read.setdefault(d, []).append(x[idx])
    assert {d: sum(v) for d, v in read.items()} == {(j,): x[:, j].sum() for j in range(4)}
    for d, _, idx in points(reduce_in_to_out([6, 4], [0])):
        assert idx == (d[1],)


@pytest.mark.parametrize(
    ("shape", "starts", "limits", "strides"),
    [([10, 20], [5, 3], [10, 20], [1, 7]), ([9, 7], [1, 0], [8, 7], [3, 2]), ([6], [0], [6], [4])],
)
def test_numpy_slice(shape, starts, limits, strides):
    x = np.arange(math.prod(shape)).reshape(shape)
    y = x[tuple(slice(a, b, c) for a, b, c in zip(starts, limits, strides))]
    check_gather_map(slice_out_to_in(starts, limits, strides), y, x)
    in_to_out = slice_in_to_out(shape, starts, limits, strides).simplify()
    hit = set()
    for d, _, idx in points(in_to_out):
        assert y[idx] == x[d]
        hit.add(idx)
    assert len(hit) == y.size
    # Inputs outside the slice are outside the map's domain.
    assert sum(1 for _ in in_to_out.domain_points()) == y.size


RESHAPE_SHAPES = [
    ([4, 8], [32]),
    ([32], [4, 8]),
    ([4, 8], [2, 4, 4]),
    ([2, 4, 4], [4, 8]),
    ([4, 8, 12], [32, 3, 4]),
    ([32, 3, 4], [4, 8, 12]),
    ([6, 10], [4, 15]),
    ([2, 3, 5], [5, 3, 2]),
    ([10, 10, 10], [50, 20]),
]


@pytest.mark.parametrize(("in_shape", "out_shape"), RESHAPE_SHAPES)
def test_numpy_reshape(in_shape, out_shape):
    x = np.arange(math.prod(in_shape)).reshape(in_shape)
    check_gather_map(reshape_map(in_shape, out_shape), x.reshape(out_shape), x)


@pytest.mark.parametrize(
    ("in_shape", "in_order", "out_shape", "out_order"),
    [
        ([2, 3, 4], (0, 1, 2), [6, 4], (1, 0)),
        ([2, 3, 4], (2, 1, 0), [4, 6], (0, 1)),
        ([6, 4], (0, 1), [2, 12], (1, 0)),
        ([3, 8], (1, 0), [8, 3], (1, 0)),
    ],
)
def test_numpy_bitcast(in_shape, in_order, out_shape, out_order):
    """A bitcast reads the same memory through another shape and layout."""
    memory = np.arange(math.prod(in_shape))

    def view(shape, minor_to_major):
        physical = [shape[d] for d in reversed(minor_to_major)]
        return memory.reshape(physical).transpose(np.argsort(list(reversed(minor_to_major))))

    x, y = view(in_shape, in_order), view(out_shape, out_order)
    check_gather_map(bitcast_map(in_shape, Layout(in_order), out_shape, Layout(out_order)), y, x)


def test_numpy_concatenate():
    shapes = [[2, 3, 2], [2, 1, 2], [2, 4, 2]]
    parts = [np.arange(math.prod(s)).reshape(s) + 100 * k for k, s in enumerate(shapes)]
    out = np.concatenate(parts, axis=1)
    covered = 0
    for k, part in enumerate(parts):
        m = concat_out_to_in(shapes, 1, k).simplify()
        for d, _, idx in points(m):
            assert out[d] == part[idx]
            covered += 1
        for d, _, idx in points(concat_in_to_out(shapes, 1, k)):
            assert out[idx] == part[d]
    assert covered == out.size


def test_numpy_dot():
    rng = np.random.default_rng(0)
    lhs = rng.integers(-3, 4, size=(2, 3, 5))
    rhs = rng.integers(-3, 4, size=(2, 5, 4))
    out = np.einsum("bik,bkj->bij", lhs, rhs)
    to_lhs, to_rhs = dot_out_to_lhs(2, 3, 4, 5), dot_out_to_rhs(2, 3, 4, 5)
    total = np.zeros_like(out)
    for (d, s, li), (d2, s2, ri) in zip(points(to_lhs), points(to_rhs)):
        assert (d, s) == (d2, s2)
        total[d] += lhs[li] * rhs[ri]
    assert (total == out).all()


def test_numpy_pad():
    x = np.arange(1, 13).reshape(3, 4)
    config = [(1, 2, 2), (0, 3, 0)]
    m = pad_out_to_in([3, 4], config).simplify()
    out = np.zeros((1 + 2 + 3 + 2 * 2, 4 + 3), dtype=x.dtype)
    out[1 : 1 + 7 : 3, 0:4] = x
    read = 0
    for d, _, idx in points(m):
        assert out[d] == x[idx]
        read += 1
    assert read == x.size
    assert (out != 0).sum() == x.size


def test_numpy_reduce_window():
    x = np.arange(5 * 9).reshape(5, 9) % 7
    m = reduce_window_out_to_in([5, 9], [2, 3], [1, 2])
    best = {}
    for d, _, idx in points(m):
        best[d] = max(best.get(d, -1), x[idx])
    windows = np.lib.stride_tricks.sliding_window_view(x, (2, 3))[:, ::2]
    assert best == {(i, j): windows[i, j].max() for i in range(windows.shape[0]) for j in range(windows.shape[1])}


def test_numpy_dynamic_slice_and_update():
    src = np.arange(4 * 9).reshape(4, 9)
    sizes = [2, 3]
    ds = dynamic_slice_out_to_src([4, 9], sizes, ["of1", "of2"])
    dus = dynamic_update_slice_out_to_update([4, 9], sizes, ["of1", "of2"])
    upd = -np.arange(6).reshape(2, 3) - 1
    for offsets in itertools.product(range(3), range(7)):
        out = src[offsets[0] : offsets[0] + 2, offsets[1] : offsets[1] + 3]
        for d in itertools.product(range(2), range(3)):
            assert out[d] == src[ds.evaluate(d, offsets)]
        updated = src.copy()
        updated[offsets[0] : offsets[0] + 2, offsets[1] : offsets[1] + 3] = upd
        for d in itertools.product(range(4), range(9)):
            u = dus.evaluate(d, offsets)
            inside = all(0 <= a < n for a, n in zip(u, sizes))
            assert updated[d] == (upd[u] if inside else src[d])
    assert not ds.contains((0, 0), (3, 0))  # an offset that would leave the input


def test_numpy_gather_with_runtime_values():
    """The runtime variables' access maps say which element of `indices` gives each start."""
    operand = np.arange(5 * 6 * 3).reshape(5, 6, 3)
    indices = np.array([[0, 0], [4, 1], [2, 5], [1, 3]])
    slice_sizes = [2, 3, 3]
    m = gather_out_to_operand([5, 6, 3], 4, slice_sizes, 2, "indices")
    to_indices = gather_out_to_indices(4, slice_sizes, 2)
    for d in itertools.product(*(range(n) for n in [4, *slice_sizes])):
        rt = []
        for var in m.rt_vars:
            raw = indices[var.access.evaluate(d)]
            rt.append(min(max(raw, var.bounds.lo), var.bounds.hi))  # XLA clamps the start
        starts = [rt[0], rt[1], 0]
        expected = operand[tuple(s + o for s, o in zip(starts, d[1:]))]
        assert operand[m.evaluate(d, rt)] == expected
        assert {to_indices.evaluate(d, (s,)) for s in range(2)} == {(d[0], 0), (d[0], 1)}


def test_numpy_fusions():
    sq = np.arange(16).reshape(4, 4)
    out = sq + sq.T
    maps = [elementwise([4, 4]), transpose_out_to_in([4, 4], [1, 0]).compose(elementwise([4, 4]))]
    for d, _, _ in points(maps[0]):
        assert out[d] == sum(sq[m.evaluate(d)] for m in maps)
    x = np.arange(3 * 2 * 4).reshape(3, 2, 4)
    root = np.transpose(np.exp(np.transpose(x, (1, 0, 2))), (0, 2, 1))
    m = (
        transpose_out_to_in([3, 2, 4], [1, 0, 2])
        .compose(elementwise([2, 3, 4]).compose(transpose_out_to_in([2, 3, 4], [0, 2, 1])))
        .simplify()
    )
    for d, _, idx in points(m):
        assert root[d] == np.exp(x[idx])


# --- compositions from XLA's indexing-analysis tests ------------------------------------------


def test_slice_of_concatenate():
    """A strided slice of a concatenation reads each input on part of its domain, or not at all."""
    shapes = [[2, 5, 7], [2, 11, 7], [2, 17, 7]]
    every_third = slice_out_to_in([0, 0, 0], [2, 33, 7], [1, 3, 1])
    got = [concat_out_to_in(shapes, 1, k).compose(every_third).simplify() for k in range(3)]
    assert got == [
        doc("(d0, d1, d2) -> (d0, d1 * 3, d2), domain: d0 in [0, 1], d1 in [0, 1], d2 in [0, 6]"),
        doc("(d0, d1, d2) -> (d0, d1 * 3 - 5, d2), domain: d0 in [0, 1], d1 in [2, 5], d2 in [0, 6]"),
        doc("(d0, d1, d2) -> (d0, d1 * 3 - 16, d2), domain: d0 in [0, 1], d1 in [6, 10], d2 in [0, 6]"),
    ]
    first_five = slice_out_to_in([0, 0, 0], [2, 5, 7], [1, 2, 1])
    got = [concat_out_to_in(shapes, 1, k).compose(first_five) for k in range(3)]
    assert (
        str(got[0].simplify()) == "(d0, d1, d2) -> (d0, d1 * 2, d2), domain: d0 in [0, 1], d1 in [0, 2], d2 in [0, 6]"
    )
    assert got[1].is_empty() and got[2].is_empty()


def test_reshape_of_concatenate():
    """XLA keeps `d0 * 8 + d1 in [0, 1]`; the bounds it implies make the map simpler here."""
    shapes = [[2], [30]]
    expand = reshape_map([32], [4, 8])
    first = concat_out_to_in(shapes, 0, 0).compose(expand).simplify()
    assert str(first) == "(d0, d1) -> (d1), domain: d0 in [0, 0], d1 in [0, 1]"
    second = concat_out_to_in(shapes, 0, 1).compose(expand).simplify()
    assert second == doc("(d0, d1) -> (d0 * 8 + d1 - 2), domain: d0 in [0, 3], d1 in [0, 7], d0 * 8 + d1 in [2, 31]")


def test_slice_of_slice_and_reduce_of_reduce():
    inner = slice_out_to_in([5, 0, 50], [21, 64, 434], [1, 2, 3])
    outer = slice_out_to_in([3, 4, 5], [16, 30, 100], [2, 3, 4])
    same(
        inner.compose(outer),
        "(d0, d1, d2) -> (d0 * 2 + 8, d1 * 6 + 8, d2 * 12 + 65), domain: d0 in [0, 6], d1 in [0, 8], d2 in [0, 23]",
    )
    first = reduce_out_to_in([150, 20, 10, 50], [0, 3])
    second = reduce_out_to_in([20, 10], [0])
    same(
        first.compose(second),
        "(d0)[s0, s1, s2] -> (s0, s2, d0, s1), domain: d0 in [0, 9], s0 in [0, 149], s1 in [0, 49], s2 in [0, 19]",
    )


def test_collapse_of_expand_and_expand_of_collapse():
    assert reshape_map([128], [8, 16]).compose(reshape_map([8, 16], [128])).simplify().is_identity()
    assert reshape_map([8, 16], [128]).compose(reshape_map([128], [8, 16])).simplify().is_identity()


def test_pad_variants():
    """XLA's PadOpNoInterior and PadOpNegativePadding (`-3_-5_1`: interior padding first, then a
    negative low and high padding slice it)."""
    same(pad_out_to_in([2, 8], [(1, 7, 0), (0, 0, 0)]), "(d0, d1) -> (d0 - 1, d1), domain: d0 in [1, 2], d1 in [0, 7]")
    negative = pad_out_to_in([7], [(-3, -5, 1)])
    same(negative, "(d0) -> ((d0 + 3) floordiv 2), domain: d0 in [0, 4], (d0 + 3) mod 2 in [0, 0]")
    assert str(negative.simplify()) == "(d0) -> ((d0 + 3) floordiv 2), domain: d0 in [1, 3], (d0 + 1) mod 2 in [0, 0]"
    assert [negative.evaluate((d,)) for d in (1, 3)] == [(2,), (3,)]


def test_reduce_window_with_padding_stride_and_dilation():
    same(
        reduce_window_out_to_in([13, 17], [3, 2], [2, 1], padding=[(1, 1), (0, 1)]),
        "(d0, d1)[s0, s1] -> (d0 * 2 + s0 - 1, d1 + s1), domain: d0 in [0, 6], d1 in [0, 16], s0 in [0, 2],"
        " s1 in [0, 1], d0 * 2 + s0 in [1, 13], d1 + s1 in [0, 16]",
    )
    same(
        reduce_window_out_to_in([2, 3], [1, 1], [1, 1], base_dilation=[2, 2]),
        "(d0, d1) -> (d0 floordiv 2, d1 floordiv 2), domain: d0 in [0, 2], d1 in [0, 4], d0 mod 2 in [0, 0],"
        " d1 mod 2 in [0, 0]",
    )


def test_numpy_reduce_window_with_padding():
    x = np.arange(1, 13 * 5 + 1).reshape(13, 5)
    m = reduce_window_out_to_in([13, 5], [3, 2], [2, 1], padding=[(1, 1), (0, 1)])
    padded = np.zeros((15, 6), dtype=x.dtype)
    padded[1:14, 0:5] = x
    best = {}
    for d, _, idx in points(m):
        best[d] = max(best.get(d, 0), x[idx])
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 2))[::2, :]
    for i, j in itertools.product(range(windows.shape[0]), range(windows.shape[1])):
        assert best.get((i, j), 0) == windows[i, j].max()
