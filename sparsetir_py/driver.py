"""The compilation pipeline, one named pass per line (STYLE 12).

    kernel = sp.compile(func, target="cpu", schedule=my_schedule, specialize={"feat": 64})

`SPARSETIR_DEBUG=1` prints each stage's function name, `=2` the IR after each stage, `=3` also
the generated source (printed by `build`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .ir.func import IRModule, PrimFunc
from .ir.layout import Layout
from .ir.verify import verify_cached
from .runtime.build import assembly, build, debug_level
from .runtime.kernel import Kernel
from .schedule import Schedule
from .transform import (
    compact_buffers,
    hoist_loop_invariants,
    horizontal_fusion,
    inject_prefetch,
    lower_sparse_buffer,
    lower_sparse_iter,
    partition_loops,
    promote_accumulators,
    sink_allocations,
    unroll_loops,
)


def _debug(stage: str, mod: IRModule) -> None:
    level = debug_level()
    if level >= 1:
        print(f"[sparsetir_py] {stage}: {', '.join(mod)}")
    if level >= 2:
        for func in mod.functions.values():
            print(func.script())


def compile(
    func: PrimFunc | IRModule,
    target: str = "cpu",
    *,
    schedule: Callable[[Schedule], None] | None = None,
    specialize: Mapping[str, int] | None = None,
    layouts: Mapping[str, Layout] | None = None,
) -> Kernel:
    """Stage I function -> kernel for `target`, through the three stages.

    `schedule(sch)` runs on the Stage II function; if it has a `stage1` attribute, that runs on
    the Stage I function first (sparse_reorder / sparse_fuse). `specialize` binds scalar
    parameters to constants before lowering; the kernel still accepts them, with those values.

    >>> import numpy as np, sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> A = sp.data.load_matrix("karate")
    >>> B = np.ones((34, 8), np.float32)
    >>> C = np.zeros((34, 8), np.float32)
    >>> kernel = sp.compile(spmm_script(), "cpu", specialize={"feat": 8})
    >>> kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=34, n=34, feat=8, nnz=A.nnz)
    >>> np.allclose(C, A @ B)
    True
    """
    mod = IRModule.from_any(func)
    # Ill-formed input fails here with the verifier's named error (an unstored write, say), not as
    # a wrong kernel; passes assume valid input.
    verify_cached(mod)
    if specialize:
        # Bind sizes first, so loop extents are constants for the schedule and the code generator.
        mod = IRModule.from_any({k: f.specialize(specialize) for k, f in mod.items()})
    stage1 = getattr(schedule, "stage1", None)
    if stage1 is not None:
        # Stage I primitives (sparse_reorder, sparse_fuse) decide the loop structure lowering emits.
        sch = Schedule(mod)
        stage1(sch)
        mod = sch.mod
    _debug("Stage I", mod)
    # Coordinate space -> position space: loops, blocks, aux buffers, binary searches.
    mod = lower_sparse_iter(mod)
    _debug("Stage II", mod)
    if assembly(mod):
        # The kernels of an assembled output (symbolic and numeric passes) each take the schedule:
        # by default SpGEMM's, whose row chunks are parallel (`schedules/spgemm.py`).
        mod = schedule_each(mod, schedule or default_assembly_schedule(target))
        _debug("Stage II, scheduled", mod)
    elif schedule is not None:
        # Schedule primitives work on Stage II (splits, bindings, parallel loops).
        sch = Schedule(mod)
        schedule(sch)
        mod = sch.mod
        _debug("Stage II, scheduled", mod)
    # Every buffer flat, every access an explicit offset (dense buffers through their layouts).
    mod = lower_sparse_buffer(mod, layouts)
    _debug("Stage III", mod)
    mod = target_passes(mod, target)
    _debug(f"Stage III, {target} passes", mod)
    # Stage III -> Python source -> Numba kernel (compiled lazily, cached on disk).
    kernel = build(mod, target)
    # A call may still pass a specialised size (with its compiled value), as to the generic function.
    kernel.specialized = {str(k): v for k, v in (specialize or {}).items()}
    return kernel


def schedule_each(mod: IRModule, schedule: Callable[[Schedule], None]) -> IRModule:
    """`schedule` applied to every function of `mod`, one `Schedule` each."""
    for name in list(mod):
        sch = Schedule(mod, name)
        schedule(sch)
        mod = sch.mod
    return mod


def default_assembly_schedule(target: str) -> Callable[[Schedule], None]:
    from schedules import spgemm

    return spgemm.DEFAULT[target]


def target_passes(mod: PrimFunc | IRModule, target: str) -> IRModule:
    """The Stage III passes `compile` runs for `target` before `build`, in order."""
    mod = IRModule.from_any(mod)
    # Scratch allocated around several top-level nests (cache_read/cache_write at the root) goes
    # onto the one nest that uses it: each nest is then a launch of its own with its own scratch.
    mod = sink_allocations(mod) if target == "cuda" else mod
    # Scratch sized for a whole scope shrinks to what one instance touches (rfactor's `C_rf`
    # becomes a register per thread on CUDA); function-level local scratch moves into the kernel.
    mod = compact_buffers(mod, target)
    # Loops marked `unroll` become copies (what depends on the copy becomes a constant offset).
    mod = unroll_loops(mod)
    # Split loops run their full chunks without the split's guard (the partial chunk keeps it).
    mod = partition_loops(mod) if target == "cpu" else mod
    # Accumulations into fixed elements in a loop run in registers (scalar replacement; on the
    # CPU only, where no other thread touches those elements inside the loop).
    mod = promote_accumulators(mod) if target == "cpu" else mod
    # Loads of read-only buffers move out of the loops that do not change them (Numba arrays carry
    # no aliasing information, so LLVM would reload them on every iteration).
    mod = hoist_loop_invariants(mod)
    # The parts of a decomposed function share one launch (CUDA) / one parallel loop (CPU).
    mod = horizontal_fusion(mod, only_marked=True)
    # Loops marked by `sch.prefetch` hint the reads of later iterations (CPU; CUDA ignores them).
    mod = inject_prefetch(mod) if target == "cpu" else mod
    return mod
