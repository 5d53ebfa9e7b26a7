"""XLA-style layouts of dense buffers: which dimension is minor, tiling, tail padding."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Layout:
    """A buffer layout as in XLA: `minor_to_major` lists dimensions from fastest to slowest varying.

    `tiles` is a sequence of tile shapes applied one after another (XLA's `T(8,128)(2,1)`), and
    `tail_padding_alignment` pads the linear size to a multiple of that many elements.
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    tail_padding_alignment: int = 1

    @staticmethod
    def row_major(rank: int) -> Layout:
        return Layout(tuple(range(rank - 1, -1, -1)))

    @staticmethod
    def col_major(rank: int) -> Layout:
        return Layout(tuple(range(rank)))

    def is_row_major(self) -> bool:
        rank = len(self.minor_to_major)
        return self == Layout.row_major(rank)
