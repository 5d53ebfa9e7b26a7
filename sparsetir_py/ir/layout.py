"""XLA-style layouts of dense buffers: which dimension is minor, tiling, tail padding.

`Layout(minor_to_major=(1, 0))` is row-major for rank 2 (the default of every buffer),
`(0, 1)` column-major. For the `[2 x 3]` array `a b c / d e f`, row-major memory is
`a b c d e f` and column-major `a d b e c f`. Tiles (`T(8,128)(2,1)` in XLA's notation) split
the minor dimensions into tiles laid out one after another, each padded to full size; the
buffer is then padded to a multiple of `tail_padding_alignment` elements.

The conversions between multi-indices and linear offsets are indexing maps of
`sparsetir_py.arith` (`linearize_map`, `delinearize_map`); `linear_index`/`multi_index` compute
the same on numbers, and `offset_expr` builds the offset of an access as an IR expression.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SparseTIRError

if TYPE_CHECKING:
    from ..arith import IndexingMap
    from .expr import PrimExpr


class LayoutError(SparseTIRError, ValueError):
    """A layout that does not fit a shape, or malformed layout text."""


@dataclass(frozen=True, slots=True)
class Layout:
    """A buffer layout as in XLA: `minor_to_major` lists dimensions from fastest to slowest varying.

    `tiles` is a sequence of tile shapes applied one after another (XLA's `T(8,128)(2,1)`), and
    `tail_padding_alignment` pads the linear size to a multiple of that many elements.
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    tail_padding_alignment: int = 1

    def __post_init__(self) -> None:
        # Lists become tuples so layouts hash; validity is `check_rank`'s job (and the verifier's),
        # so that an ill-formed layout can still be built and reported with its buffer.
        object.__setattr__(self, "minor_to_major", tuple(self.minor_to_major))
        object.__setattr__(self, "tiles", tuple(tuple(tile) for tile in self.tiles))

    @staticmethod
    def row_major(rank: int) -> Layout:
        return Layout(tuple(range(rank - 1, -1, -1)))

    @staticmethod
    def col_major(rank: int) -> Layout:
        return Layout(tuple(range(rank)))

    def is_row_major(self) -> bool:
        rank = len(self.minor_to_major)
        # Compared field by field: this runs on every kernel call (argument checks).
        return (
            self.minor_to_major == tuple(range(rank - 1, -1, -1))
            and not self.tiles
            and self.tail_padding_alignment == 1
        )

    @property
    def rank(self) -> int:
        return len(self.minor_to_major)

    # -- text --------------------------------------------------------------------------------------

    @staticmethod
    def parse(text: str) -> Layout:
        """Read XLA's notation: `{3,2,0,1:T(8,128)(2,1)}`; `L(n)` sets the tail padding alignment.

        Memory spaces (`S(1)`) are accepted and ignored: they do not change offsets.
        """
        m = re.fullmatch(r"\s*\{?\s*([0-9,\s]*?)\s*(?::(.*?))?\s*\}?\s*", text)
        if m is None:
            raise LayoutError(f"cannot parse layout {text!r}")
        dims = tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
        tiles: list[tuple[int, ...]] = []
        alignment = 1
        rest = (m.group(2) or "").replace(" ", "")
        kind = ""
        while rest:
            item = re.match(r"([TLS]?)\(([0-9,]*)\)", rest)
            if item is None or not (item.group(1) or kind == "T"):
                raise LayoutError(f"cannot parse layout {text!r} at {rest!r}")
            kind = item.group(1) or kind  # `T(8,128)(2,1)`: tiles follow one another
            values = tuple(int(x) for x in item.group(2).split(",") if x)
            if kind == "T":
                tiles.append(values)
            elif item.group(1) == "L":
                alignment = values[0] if values else 1
            rest = rest[item.end() :]
        return Layout(dims, tuple(tiles), alignment)

    def __str__(self) -> str:
        text = ",".join(str(d) for d in self.minor_to_major)
        extra = ("T" if self.tiles else "") + "".join("(" + ",".join(str(t) for t in tile) + ")" for tile in self.tiles)
        if self.tail_padding_alignment != 1:
            extra += f"L({self.tail_padding_alignment})"
        return "{" + text + (":" + extra if extra else "") + "}"

    # -- shapes and offsets ----------------------------------------------------------------------

    def check_rank(self, rank: int) -> None:
        """Raise `LayoutError` unless the layout is well formed and for arrays of `rank` dimensions."""
        m2m = self.minor_to_major
        if sorted(m2m) != list(range(len(m2m))):
            raise LayoutError(f"minor_to_major must be a permutation of 0..{len(m2m) - 1}, got {m2m}")
        for tile in self.tiles:
            if not tile or any(not isinstance(t, int) or t <= 0 for t in tile):
                raise LayoutError(f"tile dimensions must be positive integers, got T{tile}")
        if not isinstance(self.tail_padding_alignment, int) or self.tail_padding_alignment < 1:
            raise LayoutError(f"tail_padding_alignment must be >= 1, got {self.tail_padding_alignment}")
        if rank != self.rank:
            raise LayoutError(f"layout {self} has {self.rank} dimensions, the shape has {rank}")

    def physical_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The tiled shape the flat buffer is laid out by (row-major), major to minor."""
        from ..arith.layout_maps import physical_levels

        return physical_levels(tuple(shape), self)[-1]

    def size(self, shape: Sequence[int]) -> int:
        """Number of elements of the flat buffer, padding included."""
        size = math.prod(self.physical_shape(shape))
        align = self.tail_padding_alignment
        return -(-size // align) * align

    def linear_index(self, index: Sequence[int], shape: Sequence[int]) -> int:
        """The offset of element `index` of an array of `shape` in the flat buffer."""
        shape = tuple(shape)
        self.check_rank(len(shape))
        if len(index) != len(shape) or not all(0 <= i < n for i, n in zip(index, shape)):
            raise LayoutError(f"index {tuple(index)} is out of bounds for shape {shape}")
        coords = [index[d] for d in reversed(self.minor_to_major)]
        dims = [shape[d] for d in reversed(self.minor_to_major)]
        for tile in self.tiles:
            if len(tile) > len(coords):
                pad = len(tile) - len(coords)
                coords, dims = [0] * pad + coords, [1] * pad + dims
            k = len(tile)
            minor_c, minor_d = coords[len(coords) - k :], dims[len(dims) - k :]
            coords = (
                coords[: len(coords) - k]
                + [c // t for c, t in zip(minor_c, tile)]
                + [c % t for c, t in zip(minor_c, tile)]
            )
            dims = dims[: len(dims) - k] + [-(-n // t) for n, t in zip(minor_d, tile)] + list(tile)
        offset = 0
        for c, n in zip(coords, dims):
            offset = offset * n + c
        return offset

    def multi_index(self, offset: int, shape: Sequence[int]) -> tuple[int, ...] | None:
        """The element stored at `offset` of the flat buffer, or None for a padding offset."""
        shape = tuple(shape)
        self.check_rank(len(shape))
        if not 0 <= offset < self.size(shape):
            raise LayoutError(f"offset {offset} is outside the buffer of {self.size(shape)} elements")
        result = self.delinearize_map(shape)
        if not result.contains((offset,)):
            return None
        return result.evaluate((offset,))

    def linearize_map(self, shape: Sequence[int]) -> IndexingMap:
        """`(d0, ..., d<n-1>) -> (offset)` as an indexing map of `sparsetir_py.arith`."""
        from ..arith.layout_maps import linearize_map

        return linearize_map(tuple(shape), self)

    def delinearize_map(self, shape: Sequence[int]) -> IndexingMap:
        """`(offset) -> (d0, ..., d<n-1>)`, with padding offsets outside its domain."""
        from ..arith.layout_maps import delinearize_map

        return delinearize_map(tuple(shape), self)

    def offset_expr(self, indices: Sequence[PrimExpr | int], shape: Sequence[PrimExpr | int]) -> PrimExpr:
        """The flat offset of `buffer[indices]` as an IR expression.

        Untiled layouts work with symbolic shapes (`sum(index[d] * stride[d])`); tiled layouts
        need integer shapes and go through the simplified `linearize_map`.
        """
        from .expr import IntImm, as_expr, is_const

        self.check_rank(len(shape))
        if len(indices) != len(shape):
            raise LayoutError(f"{len(indices)} indices for a shape of rank {len(shape)}")
        index_exprs = [as_expr(i) for i in indices]
        dtype = index_exprs[0].dtype if index_exprs else "int32"
        if self.tiles:
            sizes = [_as_int(n) for n in shape]
            if any(n is None for n in sizes):
                raise LayoutError(f"tiled layout {self} needs a constant shape, got {tuple(shape)}")
            from ..arith.interval import from_affine

            (offset,) = self.linearize_map(sizes).results
            return from_affine(offset, index_exprs, dtype=dtype)
        offset: PrimExpr | None = None
        stride: PrimExpr = IntImm(1, dtype)
        for d in self.minor_to_major:
            term = index_exprs[d] if is_const(stride, 1) else _mul(index_exprs[d], stride)
            offset = term if offset is None else _add(offset, term)
            stride = _mul(stride, as_expr(shape[d], dtype))
        return IntImm(0, dtype) if offset is None else offset


def _as_int(value: Any) -> int | None:
    """The value of a constant extent (an int, an `IntImm`, or any expression with one value)."""
    if isinstance(value, int):
        return value
    from .expr import IntImm

    if isinstance(value, IntImm):
        return value.value
    from ..arith.interval import int_range

    lo, hi = int_range(value)
    return lo if lo is not None and lo == hi else None


def _mul(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    from .expr import BinOp, IntImm

    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value * b.value, a.dtype)
    if isinstance(b, IntImm) and b.value == 1:
        return a
    if isinstance(a, IntImm) and a.value == 1:
        return b
    return BinOp("*", a, b)


def _add(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    from .expr import BinOp, IntImm

    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value + b.value, a.dtype)
    return BinOp("+", a, b)
