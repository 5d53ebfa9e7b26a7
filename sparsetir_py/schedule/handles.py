"""Handles of a `Schedule`: what its primitives take and return in place of IR nodes.

They name a block or loop by something that survives rewrites of the function (a block's name, a
loop's variable), as TVM's BlockRV / LoopRV do. Kept apart from `schedule.py` so that primitive
modules can check handle types without importing the `Schedule` class that mixes them in.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.expr import Var


@dataclass(frozen=True)
class BlockRV:
    """A block handle: the block's name."""

    name: str


@dataclass(frozen=True)
class LoopRV:
    """A loop handle: the loop's variable."""

    var: Var

    @property
    def name(self) -> str:
        return self.var.name
