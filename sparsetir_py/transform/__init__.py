"""Passes: one module per pass. Each takes a PrimFunc or an IRModule and returns an IRModule.

Stage I -> I: `decompose_format` (composable formats). Stage I -> II: `lower_sparse_iter`.
Stage II -> III: `lower_sparse_buffer`. Stage III target passes (run by `sp.compile` before
`sp.build`, in this order: `driver.target_passes`): `sink_allocations` (CUDA), `compact_buffers`, `unroll_loops`,
`partition_loops` (CPU), `promote_accumulators` (CPU), `hoist_loop_invariants`,
`horizontal_fusion`, `inject_prefetch` (CPU).
"""

from .compact_buffers import compact_buffers
from .decompose_format import decompose_format, extract_preprocess, format_decompose, remove_preprocess
from .hoist_invariants import hoist_loop_invariants, promote_accumulators
from .horizontal_fusion import horizontal_fusion
from .inject_prefetch import inject_prefetch
from .lower_sparse_buffer import lower_sparse_buffer
from .lower_sparse_iter import lower_sparse_iter
from .partition_loops import partition_loops
from .sink_allocations import sink_allocations
from .unroll_loops import unroll_loops

__all__ = [
    "compact_buffers",
    "decompose_format",
    "extract_preprocess",
    "format_decompose",
    "hoist_loop_invariants",
    "horizontal_fusion",
    "inject_prefetch",
    "lower_sparse_buffer",
    "lower_sparse_iter",
    "partition_loops",
    "promote_accumulators",
    "remove_preprocess",
    "sink_allocations",
    "unroll_loops",
]
