"""Passes: one module per pass. Each takes a PrimFunc or an IRModule and returns an IRModule."""

from .compact_buffers import compact_buffers
from .lower_sparse_buffer import lower_sparse_buffer
from .lower_sparse_iter import lower_sparse_iter

__all__ = ["compact_buffers", "lower_sparse_buffer", "lower_sparse_iter"]
