"""Indexing maps between multi-indices and linear offsets, following XLA layouts and reshapes.

A layout (`sparsetir_py.ir.Layout`) orders the dimensions from minor to major, and may tile the
minor dimensions (`T(8,128)(2,1)`): with a tile `t` on dimensions `d`, an element `e` goes to
`linear_index((e floordiv t, e mod t), (ceil(d / t), t))` (tile coordinates first, then the
position within the tile), each dimension padded up to a multiple of its tile; a second tile
applies to the minor dimensions of that tiled shape, and so on. The buffer is then padded at its
end to a multiple of `tail_padding_alignment` elements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from ..ir.layout import Layout
from .affine import AffineExpr, Interval, dim
from .errors import IndexingMapError
from .indexing_map import IndexingMap

__all__ = [
    "bitcast_map",
    "delinearize_map",
    "linearize_map",
    "physical_levels",
    "reshape_map",
]


def _check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(shape)
    for n in shape:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise IndexingMapError(f"shapes must be non-negative integers, got {shape}")
    return shape


def physical_levels(shape: Sequence[int], layout: Layout | None = None) -> list[tuple[int, ...]]:
    """The shape at each tiling level, major to minor (`Layout.physical_levels`); row-major (no
    tiles) when `layout` is None."""
    shape = _check_shape(shape)
    return [shape] if layout is None else layout.physical_levels(shape)


def _row_major(coords: Sequence[AffineExpr], shape: Sequence[int]) -> AffineExpr:
    offset = AffineExpr((), 0)
    for c, n in zip(coords, shape):
        offset = offset * n + c
    return offset


def _storage_size(shape: Sequence[int], layout: Layout | None) -> int:
    size = math.prod(physical_levels(shape, layout)[-1])
    align = 1 if layout is None else layout.tail_padding_alignment
    return -(-size // align) * align


def linearize_map(shape: Sequence[int], layout: Layout | None = None) -> IndexingMap:
    """`(d0, ..., d<n-1>) -> (offset)`: where each element of `shape` lives in the flat buffer.

    >>> from sparsetir_py.ir import Layout
    >>> str(linearize_map((2, 3), Layout((0, 1))))
    '(d0, d1) -> (d1 * 2 + d0), domain: d0 in [0, 1], d1 in [0, 2]'
    """
    return _linearize_map(_check_shape(shape), layout)


def delinearize_map(shape: Sequence[int], layout: Layout | None = None) -> IndexingMap:
    """`(d0) -> (e0, ..., e<n-1>)`: which element of `shape` an offset of the flat buffer holds.

    The domain holds exactly the offsets of elements (padding offsets of the `size`-element
    buffer are cut out by constraints): the map is the inverse of `linearize_map` on it.

    >>> str(delinearize_map((4, 8)))
    '(d0) -> (d0 floordiv 8, d0 mod 8), domain: d0 in [0, 31]'
    """
    return _delinearize_map(_check_shape(shape), layout)


@lru_cache(maxsize=256)
def _linearize_map(shape: tuple[int, ...], layout: Layout | None) -> IndexingMap:
    """The cached worker of the public function of the same name."""
    shape = _check_shape(shape)
    levels = physical_levels(shape, layout)
    order = tuple(range(len(shape) - 1, -1, -1)) if layout is None else layout.minor_to_major
    coords = [dim(d) for d in reversed(order)]
    for tile in () if layout is None else layout.tiles:
        if len(tile) > len(coords):
            coords = [AffineExpr((), 0)] * (len(tile) - len(coords)) + coords
        k = len(tile)
        minor = coords[len(coords) - k :]
        coords = (
            coords[: len(coords) - k]
            + [c.floordiv(t) for c, t in zip(minor, tile)]
            + [c.mod(t) for c, t in zip(minor, tile)]
        )
    offset = _row_major(coords, levels[-1])
    return IndexingMap((offset,), tuple(Interval(0, n - 1) for n in shape)).simplify()


@lru_cache(maxsize=256)
def _delinearize_map(shape: tuple[int, ...], layout: Layout | None) -> IndexingMap:
    """The cached worker of the public function of the same name."""
    shape = _check_shape(shape)
    levels = physical_levels(shape, layout)
    order = tuple(range(len(shape) - 1, -1, -1)) if layout is None else layout.minor_to_major
    size = _storage_size(shape, layout)
    if 0 in shape:  # no elements: the canonical empty map
        return IndexingMap((0,) * len(shape), (Interval(0, size - 1),), known_empty=True)
    offset = dim(0)
    last = levels[-1]
    coords: list[AffineExpr] = []
    stride = math.prod(last)
    constraints: list[tuple[AffineExpr, Interval]] = [(offset, Interval(0, stride - 1))]
    for n in last:
        stride //= n
        coords.append(offset.floordiv(stride).mod(n) if coords else offset.floordiv(stride))
    tiles = () if layout is None else layout.tiles
    for level in range(len(tiles), 0, -1):
        tile = tiles[level - 1]
        below = levels[level - 1]
        k = len(tile)
        rank = len(coords) - k  # rank of the level below, counting leading size-1 dimensions
        outer = coords[: rank - k]
        minor = [coords[rank - k + i] * tile[i] + coords[rank + i] for i in range(k)]
        coords = outer + minor
        padded = (1,) * (len(coords) - len(below)) + below
        for c, n in zip(coords, padded):
            constraints.append((c, Interval(0, n - 1)))
        coords = coords[len(coords) - len(below) :]
    logical: list[AffineExpr] = [AffineExpr((), 0)] * len(shape)
    for c, d in zip(coords, reversed(order)):
        logical[d] = c
    for c, n in zip(logical, shape):
        constraints.append((c, Interval(0, n - 1)))
    return IndexingMap(tuple(logical), (Interval(0, size - 1),), (), (), tuple(constraints)).simplify()


def reshape_map(in_shape: Sequence[int], out_shape: Sequence[int]) -> IndexingMap:
    """The output-to-input map of a row-major reshape: linearize the output index, then
    delinearize it in the input shape (XLA's collapse/expand composition), simplified."""
    in_shape, out_shape = _check_shape(in_shape), _check_shape(out_shape)
    if math.prod(in_shape) != math.prod(out_shape):
        raise IndexingMapError(f"cannot reshape {list(in_shape)} into {list(out_shape)}: sizes differ")
    return delinearize_map(in_shape).compose(linearize_map(out_shape)).simplify()


def bitcast_map(
    in_shape: Sequence[int], in_layout: Layout | None, out_shape: Sequence[int], out_layout: Layout | None
) -> IndexingMap:
    """The output-to-input map of a bitcast: same bytes, read through two layouts."""
    out_size = _storage_size(out_shape, out_layout)
    in_size = _storage_size(in_shape, in_layout)
    if out_size > in_size:
        raise IndexingMapError(f"bitcast of {in_size} elements into {out_size}")
    return delinearize_map(in_shape, in_layout).compose(linearize_map(out_shape, out_layout)).simplify()
