"""Schedules: TensorIR-style primitives on Stage II functions, recorded in a replayable trace."""

from .schedule import BlockRV, LoopRV, Schedule, Trace

__all__ = ["BlockRV", "LoopRV", "Schedule", "Trace"]
