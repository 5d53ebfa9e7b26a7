"""Schedules: TensorIR-style primitives on Stage II functions, recorded in a replayable trace.

Every primitive is a pure function in a module named for its family (`loops`, `caching`,
`compute_at`, `reduction`, `annotation`, `sparse`, `tensorize`); `Schedule` calls it, keeps the
new function and appends the call to its trace. `analysis` answers what a schedule may ask of the
function (its top-level nests, its sparse iterations) without changing it.
"""

from .analysis import IterationInfo, NestInfo, sparse_iterations, top_level_nests
from .schedule import BlockRV, LoopRV, Schedule, Trace
from .state import fragment

__all__ = [
    "BlockRV",
    "IterationInfo",
    "LoopRV",
    "NestInfo",
    "Schedule",
    "Trace",
    "fragment",
    "sparse_iterations",
    "top_level_nests",
]
