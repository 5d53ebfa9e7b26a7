"""`Schedule`: a thin recorder over the pure primitives, with a replayable trace (TVM style)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ir.expr import Var
from ..ir.func import IRModule, PrimFunc
from . import loops as L
from .sparse import SparseIterationPrimitives
from .state import find_block, loops_of
from .tensorize import TensorizePrimitives


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


@dataclass
class Instruction:
    kind: str
    inputs: tuple
    attrs: tuple
    outputs: tuple


@dataclass
class Trace:
    """The primitives applied, in order; `as_python()` prints them, `apply(func)` replays them."""

    instructions: list[Instruction] = field(default_factory=list)

    def as_python(self) -> str:
        names: dict[Any, str] = {}
        lines = []

        def name_of(h):
            return names[h] if h in names else repr(h.name)

        def new_name(h):
            prefix = "b" if isinstance(h, BlockRV) else "l"
            names[h] = f"{prefix}{len(names)}"
            return names[h]

        for ins in self.instructions:
            args = [name_of(h) for h in ins.inputs] + [repr(a) for a in ins.attrs]
            call = f"sch.{ins.kind}({', '.join(args)})"
            if ins.kind == "get_block":
                call = f"sch.get_block({ins.attrs[0]!r})"
            if not ins.outputs:
                lines.append(call)
                continue
            outs = [new_name(h) for h in ins.outputs]
            target = outs[0] if ins.kind == "get_block" else f"{', '.join(outs)}{',' if len(outs) == 1 else ''}"
            if ins.kind != "get_block":
                target = f"({target})" if len(outs) == 1 else target
            lines.append(f"{target} = {call}")
        return "\n".join(lines) + ("\n" if lines else "")

    def apply(self, mod: PrimFunc | IRModule) -> IRModule:
        """Replay the trace on `mod` (the unscheduled function); returns the scheduled module."""
        sch = Schedule(mod)
        mapping: dict[Any, Any] = {}
        for ins in self.instructions:
            inputs = [mapping[h] for h in ins.inputs]
            result = getattr(sch, ins.kind)(*inputs, *ins.attrs)
            outs = result if isinstance(result, list | tuple) else ([result] if result is not None else [])
            for old, new in zip(ins.outputs, outs):
                mapping[old] = new
        return sch.mod


class Schedule(SparseIterationPrimitives, TensorizePrimitives):
    """Applies primitives to one function of a module (`func_name`, "main" by default).

    Each method calls a pure primitive, stores the new function with `_update` and appends the
    call to the trace with `_record(kind, inputs, attrs, outputs)` (inputs and outputs are
    handles; attrs are plain Python values that `as_python` prints with `repr`).
    """

    def __init__(self, mod: PrimFunc | IRModule, func_name: str = "main"):
        self.mod = IRModule.from_any(mod)
        if func_name not in self.mod:
            func_name = next(iter(self.mod))
        self.func_name = func_name
        self.trace = Trace()

    @property
    def func(self) -> PrimFunc:
        return self.mod[self.func_name]

    def _update(self, func: PrimFunc) -> None:
        self.mod = self.mod.with_function(self.func_name, func)

    def _record(self, kind: str, inputs: tuple, attrs: tuple, outputs: tuple) -> None:
        self.trace.instructions.append(Instruction(kind, inputs, attrs, outputs))

    # ---------------------------------------------------------------- lookup
    def get_block(self, name: str) -> BlockRV:
        find_block(self.func, name, "get_block")
        rv = BlockRV(name)
        self._record("get_block", (), (name,), (rv,))
        return rv

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        loops = [LoopRV(f.loop_var) for f in loops_of(self.func, block.name)]
        self._record("get_loops", (block,), (), tuple(loops))
        return loops

    # ---------------------------------------------------------------- loops
    def split(self, loop: LoopRV, factors: list) -> list[LoopRV]:
        func, new_vars = L.split(self.func, loop.var, list(factors))
        self._update(func)
        out = [LoopRV(v) for v in new_vars]
        self._record("split", (loop,), (list(factors),), tuple(out))
        return out

    def parallel(self, loop: LoopRV) -> None:
        self._update(L.parallel(self.func, loop.var))
        self._record("parallel", (loop,), (), ())

    def vectorize(self, loop: LoopRV) -> None:
        self._update(L.vectorize(self.func, loop.var))
        self._record("vectorize", (loop,), (), ())

    def unroll(self, loop: LoopRV) -> None:
        self._update(L.unroll(self.func, loop.var))
        self._record("unroll", (loop,), (), ())

    def bind(self, loop: LoopRV, thread: str) -> None:
        self._update(L.bind(self.func, loop.var, thread))
        self._record("bind", (loop,), (thread,), ())
