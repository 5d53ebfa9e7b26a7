"""XLA-style layouts of dense buffers: which dimension is minor, tiling, tail padding.

`Layout(minor_to_major=(1, 0))` is row-major for rank 2 (the default of every buffer),
`(0, 1)` column-major. For the `[2 x 3]` array `a b c / d e f`, row-major memory is
`a b c d e f` and column-major `a d b e c f`. Tiles (`T(8,128)(2,1)` in XLA's notation) split
the minor dimensions into tiles laid out one after another, each padded to full size; the
buffer is then padded to a multiple of `tail_padding_alignment` elements.

`linear_index`/`multi_index` convert between multi-indices and linear offsets on numbers. The
same conversions as indexing maps are `sparsetir_py.arith.linearize_map(shape, layout)` and
`delinearize_map`, and `lower_sparse_buffer` builds the offset of an access as an IR expression:
this module imports nothing from `arith`, so `ir` never depends on `arith` (`arith` analyses IR
expressions, as TVM's does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import SparseTIRError


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

    def physical_levels(self, shape: Sequence[int]) -> list[tuple[int, ...]]:
        """The shape at each tiling level, major to minor: the untiled physical shape first, then
        the shape after each tile."""
        shape = tuple(shape)
        self.check_rank(len(shape))
        levels = [tuple(shape[d] for d in reversed(self.minor_to_major))]
        for tile in self.tiles:
            current = levels[-1]
            if len(tile) > len(current):  # a tile of higher rank sees leading dimensions of size 1
                current = (1,) * (len(tile) - len(current)) + current
            k = len(tile)
            outer = current[: len(current) - k]
            tiled = tuple(-(-n // t) for n, t in zip(current[len(current) - k :], tile))
            levels.append(outer + tiled + tuple(tile))
        return levels

    def physical_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The tiled shape the flat buffer is laid out by (row-major), major to minor."""
        return self.physical_levels(shape)[-1]

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
        """The element stored at `offset` of the flat buffer, or None for a padding offset
        (`linear_index` run backwards, level by level)."""
        shape = tuple(shape)
        levels = self.physical_levels(shape)
        if not 0 <= offset < self.size(shape):
            raise LayoutError(f"offset {offset} is outside the buffer of {self.size(shape)} elements")
        if offset >= math.prod(levels[-1]):
            return None  # tail padding
        coords: list[int] = []
        for n in reversed(levels[-1]):
            offset, c = divmod(offset, n)
            coords.insert(0, c)
        for tile, before in zip(reversed(self.tiles), reversed(levels[:-1])):
            k = len(tile)
            outer, tile_c, within = coords[: len(coords) - 2 * k], coords[-2 * k : -k], coords[-k:]
            coords = outer + [o * t + w for o, t, w in zip(tile_c, tile, within)]
            pad = len(coords) - len(before)  # leading dimensions of size 1 a higher-rank tile added
            if any(c != 0 for c in coords[:pad]):
                return None
            coords = coords[pad:]
            if any(c >= n for c, n in zip(coords, before)):
                return None  # a padded cell of a partial tile
        index = [0] * len(shape)
        for c, d in zip(coords, reversed(self.minor_to_major)):
            index[d] = c
        return tuple(index)
