"""Stage I schedule primitives (SparseTIR): sparse_reorder and sparse_fuse on sparse iterations."""

from __future__ import annotations


class SparseIterationPrimitives:
    """Mixed into `Schedule`: Stage I primitives (`get_sparse_iteration`, `get_sp_iters`, ...)."""
