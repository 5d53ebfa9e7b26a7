"""`Schedule`: a thin recorder over the pure primitives, with a replayable trace (TVM style)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ScheduleError
from ..ir.expr import IntImm, Var
from ..ir.func import IRModule, PrimFunc
from ..ir.verify import verify_cached
from . import annotation as A
from . import caching as C
from . import compute_at as CA
from . import loops as L
from . import reduction as RD
from .handles import BlockRV, LoopRV
from .sparse import SparseIterationPrimitives
from .state import find_block, get_child_blocks, loop_path, loops_of, missing
from .tensorize import TensorizePrimitives


@dataclass
class Instruction:
    kind: str
    inputs: tuple
    attrs: tuple
    outputs: tuple
    unpack: bool = True  # the call returns a list of handles (else one handle)


@dataclass
class Trace:
    """The primitives applied, in order; `as_python()` prints them, `apply(func)` replays them."""

    instructions: list[Instruction] = field(default_factory=list)

    def as_python(self) -> str:
        names: dict[Any, str] = {}
        lines = []
        count = 0

        def name_of(h):
            return names[h] if h in names else repr(h.name)

        def new_name(h):
            nonlocal count
            prefix = "b" if isinstance(h, BlockRV) else "l"
            names[h] = f"{prefix}{count}"
            count += 1
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
            if ins.kind == "get_block" or not ins.unpack:
                target = outs[0]
            else:
                target = f"({outs[0]},)" if len(outs) == 1 else ", ".join(outs)
            lines.append(f"{target} = {call}")
        return "\n".join(lines) + ("\n" if lines else "")

    def __repr__(self) -> str:
        return f"Trace({len(self.instructions)} instructions)"

    def _repr_html_(self) -> str:
        """Jupyter: the trace as the Python that replays it, highlighted."""
        from .. import display

        text = self.as_python() or "# (no primitives applied)"
        return display.section("Schedule trace", display.code(text), subtitle=f"{len(self.instructions)} instructions")

    def apply(self, mod: PrimFunc | IRModule) -> IRModule:
        """Replay the trace on `mod` (the unscheduled function); returns the scheduled module."""
        sch = Schedule(mod)
        mapping: dict[Any, Any] = {}
        for ins in self.instructions:
            inputs = [mapping.get(h, h) for h in ins.inputs]
            result = getattr(sch, ins.kind)(*inputs, *ins.attrs)
            outs = result if isinstance(result, list | tuple) else ([result] if result is not None else [])
            for old, new in zip(ins.outputs, outs):
                mapping[old] = new
        return sch.mod


Handle = BlockRV | LoopRV


def _target(h: Handle, primitive: str) -> str | Var:
    """A block handle as its name, a loop handle as its variable (what the pure functions take)."""
    if isinstance(h, BlockRV):
        return h.name
    if isinstance(h, LoopRV):
        return h.var
    raise ScheduleError(f"in `{primitive}`: expected a block or loop handle, but got {h!r}")


def _loop(h: LoopRV, primitive: str) -> Var:
    if not isinstance(h, LoopRV):
        raise ScheduleError(f"in `{primitive}`: expected a loop handle, but got {h!r}")
    return h.var


def _block(h: BlockRV, primitive: str) -> str:
    if not isinstance(h, BlockRV):
        raise ScheduleError(f"in `{primitive}`: expected a block handle, but got {h!r}")
    return h.name


class Schedule(SparseIterationPrimitives, TensorizePrimitives):
    """Applies primitives to one function of a module: `func_name`, by default "main" (a lone
    PrimFunc's name in its module) or else the module's first function.

    Each method calls a pure primitive, stores the new function with `_update` and appends the
    call to the trace with `_record(kind, inputs, attrs, outputs)` (inputs and outputs are
    handles; attrs are plain Python values that `as_python` prints with `repr`). A primitive that
    raises leaves `mod` and the trace as they were. Block handles are names and loop handles are
    loop variables, so they stay valid across primitives that do not remove their object.
    """

    def __init__(self, mod: PrimFunc | IRModule, func_name: str | None = None):
        self.mod = IRModule.from_any(mod)
        verify_cached(self.mod)  # primitives assume a well-formed function
        if not self.mod:
            raise ScheduleError("in `Schedule`: expected a module with a function, but got an empty one")
        if func_name is None:
            # A lone PrimFunc is "main"; a module without one (a pass output, say) gives its first function.
            func_name = "main" if "main" in self.mod else next(iter(self.mod))
        if not isinstance(func_name, str):
            raise ScheduleError(f"in `Schedule`: expected a function name (a str), but got {func_name!r}")
        if func_name not in self.mod:
            raise missing("Schedule", "function", func_name, "the module", list(self.mod))
        self.func_name = func_name
        self.trace = Trace()

    @property
    def func(self) -> PrimFunc:
        return self.mod[self.func_name]

    def _update(self, func: PrimFunc) -> None:
        self.mod = self.mod.with_function(self.func_name, func)

    def _record(self, kind: str, inputs: tuple, attrs: tuple, outputs: tuple, unpack: bool = True) -> None:
        self.trace.instructions.append(Instruction(kind, inputs, attrs, outputs, unpack))

    def show(self) -> None:
        """Print the current function."""
        print(self.func.script())

    def __repr__(self) -> str:
        return f"<Schedule `{self.func_name}` Stage {self.func.stage}, {len(self.trace.instructions)} instructions>"

    def _repr_html_(self) -> str:
        """Jupyter: the trace, then the function it made (collapsed)."""
        from .. import display

        text = self.trace.as_python() or "# (no primitives applied)"
        return display.section(
            f"Schedule of {self.func_name}",
            display.code(text),
            display.details(f"the scheduled function (Stage {self.func.stage})", display.code(self.func.script())),
            subtitle=f"{len(self.trace.instructions)} instructions",
        )

    # ---------------------------------------------------------------- lookup
    def get_block(self, name: str) -> BlockRV:
        if not isinstance(name, str):
            raise ScheduleError(f"in `get_block`: expected a block name (a str), but got {name!r}")
        find_block(self.func, name, "get_block")
        rv = BlockRV(name)
        self._record("get_block", (), (name,), (rv,))
        return rv

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops between the block and its parent block, outermost first."""
        loops = [LoopRV(f.loop_var) for f in loops_of(self.func, _block(block, "get_loops"))]
        self._record("get_loops", (block,), (), tuple(loops))
        return loops

    def loop_extent(self, loop: LoopRV) -> int | None:
        """The number of iterations of `loop` where it is a constant (a width fixed by
        `sp.compile(..., specialize=...)`), else None; a query, not recorded in the trace."""
        var = _loop(loop, "loop_extent")
        path = loop_path(self.func, var, "loop_extent")
        extent = path[-1].extent
        return int(extent.value) if isinstance(extent, IntImm) else None

    def loop_extent_factor(self, loop: LoopRV) -> int:
        """The constant factor of `loop`'s extent: its value where it is a constant, `c` where it
        is a product `e * c` (or `c * e`) of some expression and a constant, else 1; a query, not
        recorded in the trace. (`blocks * 3` units of 3 column parts per row block: 3.)"""
        from ..arith.interval import to_affine

        var = _loop(loop, "loop_extent_factor")
        extent = loop_path(self.func, var, "loop_extent_factor")[-1].extent
        if isinstance(extent, IntImm):
            return int(extent.value)
        affine, _ = to_affine(extent)
        return abs(affine.content()) if affine.constant == 0 and affine.terms else 1

    def get_child_blocks(self, block_or_loop: Handle) -> list[BlockRV]:
        """The blocks directly under a block or loop (see `state.get_child_blocks`)."""
        out = [BlockRV(n) for n in get_child_blocks(self.func, _target(block_or_loop, "get_child_blocks"))]
        self._record("get_child_blocks", (block_or_loop,), (), tuple(out))
        return out

    # ---------------------------------------------------------------- loops
    def split(self, loop: LoopRV, factors: list) -> list[LoopRV]:
        """See `loops.split`."""
        func, new_vars = L.split(self.func, _loop(loop, "split"), list(factors))
        self._update(func)
        out = [LoopRV(v) for v in new_vars]
        self._record("split", (loop,), (list(factors),), tuple(out))
        return out

    def fuse(self, *loops: LoopRV) -> LoopRV:
        """See `loops.fuse`."""
        func, var = L.fuse(self.func, [_loop(lp, "fuse") for lp in loops])
        self._update(func)
        out = LoopRV(var)
        self._record("fuse", tuple(loops), (), (out,), unpack=False)
        return out

    def reorder(self, *loops: LoopRV) -> None:
        """See `loops.reorder`."""
        self._update(L.reorder(self.func, [_loop(lp, "reorder") for lp in loops]))
        self._record("reorder", tuple(loops), (), ())

    def parallel(self, loop: LoopRV) -> None:
        """See `loops.parallel`."""
        self._update(L.parallel(self.func, _loop(loop, "parallel")))
        self._record("parallel", (loop,), (), ())

    def vectorize(self, loop: LoopRV) -> None:
        """See `loops.vectorize`."""
        self._update(L.vectorize(self.func, _loop(loop, "vectorize")))
        self._record("vectorize", (loop,), (), ())

    def unroll(self, loop: LoopRV) -> None:
        """See `loops.unroll`."""
        self._update(L.unroll(self.func, _loop(loop, "unroll")))
        self._record("unroll", (loop,), (), ())

    def bind(self, loop: LoopRV, thread: str) -> None:
        """See `loops.bind`."""
        self._update(L.bind(self.func, _loop(loop, "bind"), thread))
        self._record("bind", (loop,), (thread,), ())

    # ---------------------------------------------------------------- caching
    def cache_read(self, block: BlockRV, read_buffer_index: int | str, storage_scope: str) -> BlockRV:
        """See `caching.cache_read`; returns the copy block."""
        func, name = C.cache_read(self.func, _block(block, "cache_read"), read_buffer_index, storage_scope)
        self._update(func)
        out = BlockRV(name)
        self._record("cache_read", (block,), (read_buffer_index, storage_scope), (out,), unpack=False)
        return out

    def cache_write(self, block: BlockRV, write_buffer_index: int | str, storage_scope: str) -> BlockRV:
        """See `caching.cache_write`; returns the write-back block."""
        func, name = C.cache_write(self.func, _block(block, "cache_write"), write_buffer_index, storage_scope)
        self._update(func)
        out = BlockRV(name)
        self._record("cache_write", (block,), (write_buffer_index, storage_scope), (out,), unpack=False)
        return out

    def set_scope(self, block: BlockRV, buffer_index: int | str, storage_scope: str) -> None:
        """See `caching.set_scope`."""
        self._update(C.set_scope(self.func, _block(block, "set_scope"), buffer_index, storage_scope))
        self._record("set_scope", (block,), (buffer_index, storage_scope), ())

    # ---------------------------------------------------------------- compute location
    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """See `compute_at.compute_at`."""
        self._update(CA.compute_at(self.func, _block(block, "compute_at"), _loop(loop, "compute_at")))
        self._record("compute_at", (block, loop), (), ())

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """See `compute_at.reverse_compute_at`."""
        self._update(
            CA.reverse_compute_at(self.func, _block(block, "reverse_compute_at"), _loop(loop, "reverse_compute_at"))
        )
        self._record("reverse_compute_at", (block, loop), (), ())

    # ---------------------------------------------------------------- reduction
    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """See `reduction.decompose_reduction`; returns the init block."""
        func, name = RD.decompose_reduction(
            self.func, _block(block, "decompose_reduction"), _loop(loop, "decompose_reduction")
        )
        self._update(func)
        out = BlockRV(name)
        self._record("decompose_reduction", (block, loop), (), (out,), unpack=False)
        return out

    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """See `reduction.rfactor`; returns the rfactor block (the write-back keeps the old name)."""
        func, name = RD.rfactor(self.func, _loop(loop, "rfactor"), factor_axis)
        self._update(func)
        out = BlockRV(name)
        self._record("rfactor", (loop,), (factor_axis,), (out,), unpack=False)
        return out

    # ---------------------------------------------------------------- annotation
    def annotate(self, block_or_loop: Handle, ann_key: str, ann_val: Any) -> None:
        """See `annotation.annotate` (`"atomic"` on a block turns its update into an atomic add);
        a sparse-iteration handle (Stage I) is `annotation.annotate_sparse_iteration`."""
        from .sparse import SparseIterationRV

        if isinstance(block_or_loop, SparseIterationRV):
            self._update(A.annotate_sparse_iteration(self.func, block_or_loop.name, ann_key, ann_val))
        else:
            self._update(A.annotate(self.func, _target(block_or_loop, "annotate"), ann_key, ann_val))
        self._record("annotate", (block_or_loop,), (ann_key, ann_val), ())

    def prefetch(self, loop: LoopRV, buffer: str, offset: int = 1, lines: int | None = None) -> None:
        """See `annotation.prefetch` (TVM's `Stage.prefetch(tensor, var, offset)`)."""
        self._update(A.prefetch(self.func, _loop(loop, "prefetch"), buffer, offset, lines))
        self._record("prefetch", (loop,), (buffer, offset, lines), ())

    def unannotate(self, block_or_loop: Handle, ann_key: str) -> None:
        """See `annotation.unannotate`."""
        self._update(A.unannotate(self.func, _target(block_or_loop, "unannotate"), ann_key))
        self._record("unannotate", (block_or_loop,), (ann_key,), ())
