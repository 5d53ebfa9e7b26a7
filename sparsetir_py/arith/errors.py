"""Errors of the index-analysis library."""

from __future__ import annotations

from ..errors import SparseTIRError


class IndexingMapError(SparseTIRError, ValueError):
    """A malformed indexing map or affine expression: a parse error, a non-affine operation, a
    division by zero, a variable out of range, or a point outside a map's domain."""
