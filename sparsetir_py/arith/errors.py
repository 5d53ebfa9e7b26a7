"""Errors of the index-analysis library."""

from __future__ import annotations

from ..errors import SparseTIRError, source_excerpt


class IndexingMapError(SparseTIRError, ValueError):
    """A malformed indexing map or affine expression: a parse error, a non-affine operation, a
    division by zero, a variable out of range, or a point outside a map's domain.

    A parse error has the `text`, the `position` in it (from 0) and its `line` and `column` (from
    1), and its message ends with a window of the offending line and a caret; other errors have
    None there."""

    def __init__(self, message: str, text: str | None = None, position: int | None = None):
        self.message = message
        self.text = text
        self.position = position
        self.line = self.column = None
        full = message
        if text is not None and position is not None:
            self.position = max(0, min(position, len(text)))
            self.line, self.column, excerpt = source_excerpt(text, self.position)
            full = f"{message} (line {self.line}, column {self.column}){excerpt}"
        super().__init__(full)
