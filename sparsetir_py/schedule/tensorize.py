"""Tensorize: replace a block that matches an intrinsic's description by its implementation."""

from __future__ import annotations


class TensorizePrimitives:
    """Mixed into `Schedule`: `tensorize` against the intrinsic registry."""
