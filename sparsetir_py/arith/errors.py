"""Errors of the index-analysis library."""

from __future__ import annotations

from ..errors import PositionedError


class IndexingMapError(PositionedError, ValueError):
    """A malformed indexing map or affine expression: a parse error, a non-affine operation, a
    division by zero, a variable out of range, or a point outside a map's domain.

    A parse error has the `text`, the `position` in it (from 0) and its `line` and `column` (from
    1), and its message ends with a window of the offending line and a caret; other errors have
    None there."""
