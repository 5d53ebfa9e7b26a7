"""The compiled kernels of `sp.ops`, one per `KernelKey`: compiled on the first call that needs
it, then reused by every call with the same operator, format, dtypes, target and schedule (and
width, where the kernel is specialised to it), whatever the matrix or its values."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..driver import compile as compile_pipeline
from ..errors import InputError, TargetError
from ..runtime.kernel import Kernel
from .scripts import SCRIPTS


@dataclass(frozen=True)
class KernelKey:
    """What a kernel of `sp.ops` is compiled for."""

    op: str  #: "spmm" or "sddmm"
    format: str  #: "csr", or the decomposition: the rule module's name and the rules' names
    dtype: str  #: values: "float32" or "float64"
    idtype: str  #: indices: "int32" or "int64"
    target: str  #: "cpu" or "cuda"
    feat: int | None  #: the feature width where the kernel is specialised to it (`fixed_width`), else None
    schedule: Callable  #: the schedule function applied


#: Every kernel compiled in this process (the on-disk cache keeps their machine code across runs).
KERNELS: dict[KernelKey, Kernel] = {}


def compiled(key: KernelKey, make: Callable) -> Kernel:
    """The kernel for `key`: from `KERNELS`, or compiled from `make()` (a Stage I function or
    module) with `key.schedule`, specialised to `key.feat` where that is set."""
    kernel = KERNELS.get(key)
    if kernel is None:
        specialize = {"feat": key.feat} if key.feat is not None else None
        kernel = compile_pipeline(make(), key.target, schedule=key.schedule, specialize=specialize)
        KERNELS[key] = kernel
    return kernel


def csr_kernel(op: str, target: str, idtype: str, dtype: str, feat: int, schedule) -> Kernel:
    """`op`'s kernel on A in CSR (its script as written)."""
    schedule = resolve_schedule(op, target, schedule)
    key = KernelKey(op, "csr", dtype, idtype, target, feat if fixed_width(target, schedule) else None, schedule)
    return compiled(key, lambda: SCRIPTS[op](idtype, dtype))


def fixed_width(target: str, schedule) -> bool:
    """Whether kernels are compiled for one feature width (`feat` a constant): always on CUDA; on
    the CPU where the schedule asks for it (`schedule.fixed_width = True`). By default the width
    stays a run-time value on the CPU: with a constant trip count LLVM unrolls the feature loop
    of a plain dot product completely instead of vectorising it (measured: 2-4x slower at width
    32), while a schedule that keeps several accumulators (`csr_cpu_rows_x4`) gains from it."""
    return target == "cuda" or bool(getattr(schedule, "fixed_width", False))


def resolve_schedule(op: str, target: str, schedule) -> Callable:
    """`None` -> the default for (op, target); a name -> the shipped schedule
    (`schedules/<op>.py`; SpGEMM's module serves `add` and `multiply` too); a callable as is.
    `TargetError` for an unknown target, `InputError` for an unknown schedule name."""
    if isinstance(target, str) and (schedule is None or isinstance(schedule, str)):
        return _named_schedule(op, target, schedule)
    _schedule_module(op, target)
    if not callable(schedule):
        raise InputError(f"`schedule` must be a name or a callable, got {type(schedule).__name__}")
    return schedule


@functools.cache
def _named_schedule(op: str, target: str, name: str | None) -> Callable:
    """The shipped schedule `name` of (op, target), its default for None: looked up once (a
    small co-iterating call resolves one per kernel; three imports and the checks cost a few us)."""
    module = _schedule_module(op, target)
    if name is None:
        return module.DEFAULT[target]
    if name not in module.SCHEDULES:
        raise InputError(f"unknown {op} schedule {name!r}: expected one of {', '.join(module.SCHEDULES)}")
    return module.SCHEDULES[name]


def _schedule_module(op: str, target: str):
    """`schedules/<op>.py`, after checking that it has a default for `target` (`TargetError`)."""
    from schedules import sddmm as sddmm_schedules
    from schedules import spgemm as spgemm_schedules
    from schedules import spmm as spmm_schedules

    module = {"spmm": spmm_schedules, "sddmm": sddmm_schedules, "spgemm": spgemm_schedules}[op]
    if target not in module.DEFAULT:
        raise TargetError(f"unknown target {target!r}: expected one of {', '.join(module.DEFAULT)}")
    return module
