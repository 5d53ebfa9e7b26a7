"""The CUDA renderer: one `@cuda.jit` kernel per Stage III PrimFunc.

What differs from the shared renderer:

- A loop bound to `blockIdx.*`/`threadIdx.*` is not a loop: its variable is the block or
  thread index (`i = cuda.blockIdx.x`). The launch size along a tag is the largest extent of the
  loops bound to it, evaluated at launch from the scalar parameters (`KernelSource.launch`); a
  loop whose extent may be smaller is guarded (`if i < extent:`). An extent that the scalar
  parameters alone do not determine is a `CodegenError`. A kernel with no bound loop launches
  grid (1,), block (1,). As in TVM, statements outside the bound loops run on every thread.
- One launch per top-level statement that holds bound loops, in order (TVM's host/device split):
  CUDA has no barrier across thread blocks, so a nest that initialises an output and a later one
  that accumulates into it atomically (the nonzero split of SpMM) must not share a launch. With
  several, the kernel takes the launch index as its last argument and runs that launch's
  statements (unbound statements go with the next bound one); the runtime launches it once per
  index, each with its own grid and block.
- Other loops (serial, parallel, vectorized, unrolled, vthread) are serial loops.
- Scratch: `shared` -> `cuda.shared.array`, `local` -> `cuda.local.array`, both of a constant
  flat size (else `CodegenError`), and not zero-filled (CUDA does not). `global` scratch must be
  a function-level buffer (the runtime allocates it); allocated inside the kernel it is a
  `CodegenError`.
- `cuda.atomic.add`, `cuda.syncthreads()`; `math`, `syncwarp` and libdevice functions come
  from `cuda_intrinsics`, which substitutes numpy versions under the CUDA simulator.

Options: `fastmath` (default False: Numba's CUDA fastmath flushes denormals and approximates
division and square roots), `lineinfo` (default False).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, ClassVar

from ..errors import CodegenError
from ..ir.buffer import FlatBuffer
from ..ir.expr import Call, PrimExpr, Var
from ..ir.launch import launch_loops, split_launches
from ..ir.stmt import AtomicAdd, BufferStore, For, Stmt, seq
from ..ir.visit import walk
from .base import Intrin, KernelParam, Renderer, const_int, is_launch_computable

_LIBDEVICE = ("libdevice",)


class CUDARenderer(Renderer):
    """Stage III -> a Numba CUDA kernel (`@cuda.jit`), launched from the bound loops' extents."""

    target: ClassVar[str] = "cuda"
    OPTIONS: ClassVar[dict[str, Any]] = {"fastmath": False, "lineinfo": False}
    # `math` through cuda_intrinsics: the real module on the device, numpy under the simulator.
    IMPORTS: ClassVar[dict[str, str]] = {
        **{name: line for name, line in Renderer.IMPORTS.items() if name != "math"},
        "math": "from sparsetir_py.runtime.cuda_intrinsics import math",
        # Warp shuffles, emulated per warp under the simulator (runtime/cuda_warp.py).
        "shfl_down_sync": "from sparsetir_py.runtime.cuda_warp import shfl_down_sync",
    }
    INTRINSIC_RULES: ClassVar[dict[str, Intrin]] = {
        **Renderer.INTRINSIC_RULES,
        # numpy ufuncs do not exist on the device; libdevice has exact single/double versions.
        "exp2": Intrin("libdevice.exp2{f}({a[0]})", _LIBDEVICE),
        "rsqrt": Intrin("libdevice.rsqrt{f}({a[0]})", _LIBDEVICE),
        "floor": Intrin("libdevice.floor{f}({a[0]})", _LIBDEVICE),
        "ceil": Intrin("libdevice.ceil{f}({a[0]})", _LIBDEVICE),
        "round": Intrin("libdevice.rint{f}({a[0]})", _LIBDEVICE),
        "trunc": Intrin("libdevice.trunc{f}({a[0]})", _LIBDEVICE),
        "shfl_down_sync": Intrin("shfl_down_sync({a[0]}, {a[1]}, {a[2]})", ("shfl_down_sync",)),
        "ctz": Intrin("(cuda.ffs({a[0]}) - 1)", ("cuda",)),  # ffs: 1 + the lowest set bit's position
    }

    def __init__(self, func, options=None):
        super().__init__(func, options)
        self.tag_loops: dict[str, list[For]] = defaultdict(list)
        self.guarded: set[int] = set()  # ids of bound loops that need `if var < extent`
        self.parts: list[list[Stmt]] = split_launches(func.body)  # top-level statements per launch
        self.launch_var = Var("launch", "int32")

    def normalize_options(self, options: dict[str, Any]) -> dict[str, Any]:
        options = super().normalize_options(options)
        for key, value in options.items():
            if not isinstance(value, bool):
                raise CodegenError(f"in `build`: option `{key}` must be True or False, got {value!r}")
        return options

    # ---------------------------------------------------------------- launch configuration
    def kernel_params(self) -> list[KernelParam]:
        params = super().kernel_params()
        if len(self.parts) > 1:
            params.append(KernelParam(self.names.get(self.launch_var, "launch"), "launch", self.launch_var))
        return params

    def prepare(self) -> None:
        self.use("cuda")
        self.part_loops: list[dict[str, list[For]]] = []
        for part in self.parts:
            tag_loops: dict[str, list[For]] = defaultdict(list)
            for node in launch_loops(seq(*part)):
                self._check_bound_loop(node)
                tag_loops[node.thread].append(node)
                self.tag_loops[node.thread].append(node)
            for loops in tag_loops.values():
                self.guarded.update(id(loop) for loop in self._loops_needing_guards(loops))
            self.part_loops.append(tag_loops)
            _check_atomic_ordering(part)

    def _check_bound_loop(self, node: For) -> None:
        if const_int(node.min) != 0:
            raise CodegenError(f"in `build`: loop `{node.loop_var.name}` bound to {node.thread} must start at 0")
        if not is_launch_computable(node.extent, self.scalars):
            raise CodegenError(
                f"in `build`: the extent of loop `{node.loop_var.name}` bound to {node.thread} cannot be "
                "computed from the scalar parameters at launch"
            )

    @staticmethod
    def _loops_needing_guards(loops: list[For]) -> list[For]:
        first = loops[0].extent
        if all(loop.extent == first for loop in loops):
            return []  # every loop spans the whole launch dimension
        values = [const_int(loop.extent) for loop in loops]
        if all(v is not None for v in values):
            top = max(values)
            return [loop for loop, v in zip(loops, values) if v < top]
        return loops

    def launch_extents(self) -> dict[str, tuple[PrimExpr, ...]]:
        return {tag: tuple(loop.extent for loop in loops) for tag, loops in self.tag_loops.items()}

    def launches(self) -> tuple[dict[str, tuple[PrimExpr, ...]], ...]:
        if len(self.parts) == 1:
            return ()
        return tuple(
            {tag: tuple(loop.extent for loop in loops) for tag, loops in tag_loops.items()}
            for tag_loops in self.part_loops
        )

    def function_body(self, body: Stmt) -> None:
        if len(self.parts) == 1:
            self.stmt_body(body)
            return
        launch = self.names.get(self.launch_var, "launch")
        for index, part in enumerate(self.parts):
            self.line(f"if {launch} == {index}:")
            with self.indented():
                self.stmt_body(seq(*part))

    def check_function_buffer(self, buf: FlatBuffer) -> None:
        if buf.data is None and buf.scope != "global":
            raise CodegenError(
                f"in `build`: function-level buffer `{buf.name}` has scope {buf.scope}; allocate {buf.scope} "
                "memory inside the kernel (T.allocate or a block's alloc_buffer), or run "
                'sp.transform.compact_buffers(mod, "cuda") first, which moves it there where threads\' regions are '
                "disjoint (sp.compile does)"
            )

    # ---------------------------------------------------------------- target hooks
    def decorator(self) -> str:
        extra = "".join(f", {key}=True" for key in ("fastmath", "lineinfo") if self.options[key])
        return f"@cuda.jit(cache=True{extra})"

    def thread_loop(self, s: For) -> None:
        var = self.names.get(s.loop_var, s.loop_var.name)
        self.line(f"{var} = cuda.{s.thread}")
        if id(s) not in self.guarded:
            self.loops.append(s)
            self.stmt_body(s.body)
            self.loops.pop()
            return
        self.line(f"if {var} < {self.expr(s.extent)}:")
        self.loop_body(s)

    def stmt_atomic_add(self, s: AtomicAdd) -> None:
        if len(s.indices) != 1:
            self.access(s.buffer, s.indices)  # raises the arity error
        name = self.access_name(s.buffer)
        self.line(f"cuda.atomic.add({name}, {self.expr(s.indices[0])}, {self.expr(s.value)})")

    def barrier(self, op: str) -> None:
        if op == "syncthreads":
            self.line("cuda.syncthreads()")
            return
        self.use("syncwarp")
        self.line("syncwarp()")

    def scratch(self, buf: FlatBuffer) -> str:
        if buf.scope == "global":
            raise CodegenError(
                f"in `build`: global buffer `{buf.name}` is allocated inside the kernel; CUDA kernels cannot "
                "allocate global memory: declare it at function level or use scope local/shared"
            )
        size = const_int(self.flat_size(buf))
        if size is None or size <= 0:
            raise CodegenError(
                f"in `build`: {buf.scope} buffer `{buf.name}` has shape "
                f"({', '.join(self.expr(d) for d in buf.shape)}); CUDA {buf.scope} arrays need a constant "
                "positive size"
            )
        self.use("numba")
        dtype = "numba.boolean" if buf.dtype == "bool" else f"numba.{buf.dtype}"
        return f"cuda.{buf.scope}.array({size}, {dtype})"


def _check_atomic_ordering(part: list[Stmt]) -> None:
    """A launch that both stores plainly into a buffer (an init) and adds into it atomically,
    with no barrier at all, races: other threads may add before a thread's store, or a thread's
    store may land after their adds. The init belongs in a launch of its own (a top-level nest,
    e.g. what lowering makes for a fused spatial+reduction iteration) or before a
    `T.syncthreads()`. (With a barrier, ordering across thread blocks stays the schedule
    writer's responsibility: no barrier spans blocks.)"""
    nodes = list(walk(seq(*part)))
    if any(isinstance(n, Call) and n.op == "syncthreads" for n in nodes):
        return
    atomic = {id(n.buffer): n.buffer for n in nodes if isinstance(n, AtomicAdd)}
    for n in nodes:
        if isinstance(n, BufferStore) and id(n.buffer) in atomic:
            raise CodegenError(
                f"in `build`: one CUDA launch stores into `{n.buffer.name}` and adds into it atomically with no "
                "barrier between (other threads may add before the store, or after it be overwritten); move the "
                "store (the init) to a top-level nest of its own, which is its own launch, or add T.syncthreads()"
            )
