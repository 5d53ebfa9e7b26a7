"""`sp.build`: Stage III function -> a callable kernel.

    kern = sp.build(mod, target="cpu")        # or "cuda"
    kern(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=feat, nnz=nnz)
    kern.source                               # the generated Python source

`build` renders exactly the function it is given, writes the source to the on-disk cache and
imports it; it runs no pass, with one exception on CUDA: a kernel whose scratch is past the
device's limits (48 KiB of static shared memory per block, 16 KiB of local arrays per thread:
`runtime/resources.py`) is compacted as `sp.compile` would (`sink_allocations`,
`compact_buffers`) before `build` gives up with a `CodegenError` naming the buffers and their
bytes; threads per block and grid sizes past CUDA's limits are a `CodegenError` too, so `build`
never returns a kernel that cannot launch (`kernel.resources` shows what it asks for).
The target passes (`compact_buffers`, `promote_accumulators`,
`hoist_loop_invariants` in `sp.transform`) are lines of `sp.compile`'s pipeline (`driver.py`);
run them on a hand-lowered module before `build` to get the same kernel. `build` never touches a
GPU and compiles nothing: Numba compiles on the first call (CPU, CUDA) or on `kernel.ptx(cc)`.
`SPARSETIR_DEBUG=1` reports each build and its cached file, `=2` also prints the Stage III IR,
`=3` also the generated source.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..codegen import KernelSource, render
from ..coiteration.assemble import Assembly
from ..coiteration.host import AssembledKernel
from ..errors import CodegenError
from ..ir.func import IRModule, PrimFunc
from ..ir.node import FrozenDict
from ..transform.compact_buffers import compact_buffers
from ..transform.sink_allocations import sink_allocations
from . import cache
from .kernel import CPUKernel, CUDAKernel, Kernel
from .resources import MAX_LOCAL_BYTES, MAX_SHARED_BYTES, Resources, check_build, kernel_resources

KERNELS: dict[str, type[Kernel]] = {"cpu": CPUKernel, "cuda": CUDAKernel}


def build(
    mod: PrimFunc | IRModule | Mapping[str, PrimFunc],
    target: str = "cpu",
    *,
    verify: bool = True,
    cache_dir: str | os.PathLike | None = None,
    **options: Any,
) -> Kernel | AssembledKernel:
    """Generate, cache and import the kernel of a Stage III function.

    A module of the kernels of an assembled output (`assemble=True`, what `lower_sparse_iter`
    makes of one) builds into one `coiteration.host.AssembledKernel`.

    Args:
        mod: a Stage III `PrimFunc`, or an `IRModule` holding one (`"main"`, or its only function).
        target: `"cpu"` (Numba `@njit(parallel=True)`, the default) or `"cuda"` (`@cuda.jit`).
        verify: run `sp.verify` on the function first.
        cache_dir: where generated sources go (default: `runtime.cache.cache_dir()`).
        **options: target options. CPU: `fastmath` (default `{"reassoc", "contract"}`), `parallel`
            (True), `boundscheck` (False). CUDA: `fastmath` (False), `lineinfo` (False).

    Returns:
        a `Kernel` (`CPUKernel` or `CUDAKernel`); call it with the function's arguments.

    Raises:
        CodegenError: the function is not at Stage III, uses a construct the target cannot run,
            needs more of the GPU than CUDA allows (`runtime.resources`), or an option is unknown.

    >>> import numpy as np, sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> kernel = sp.build(sp.lower_sparse_buffer(sp.lower_sparse_iter(spmm_script())), target="cpu")
    >>> A = sp.data.load_matrix("karate")
    >>> B, C = np.ones((34, 4), np.float32), np.empty((34, 4), np.float32)
    >>> kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=34, n=34, feat=4, nnz=A.nnz)
    >>> np.allclose(C, A @ B)
    True
    """
    if assembly(mod):
        return build_assembled(IRModule.from_any(mod), target, verify=verify, cache_dir=cache_dir, **options)
    func = _select_function(mod)
    if func.stage != 3:
        raise CodegenError(
            f"in `build`: `{func.name}` is a Stage {func.stage} function; lower it to Stage III first "
            "(sp.lower_sparse_iter, then sp.lower_sparse_buffer)"
        )
    if verify:
        from ..ir.verify import verify_cached

        verify_cached(func)
    ks = render(func, target, **options)
    resources = None
    if target == "cuda":
        func, ks, resources = _fit_cuda(func, ks, options)
    key = cache.cache_key(_script_text(func), target, ks.options, ks.source)
    directory = Path(cache_dir).expanduser() if cache_dir is not None else cache.cache_dir()
    path = cache.kernel_path(directory, target, ks.name, key)
    path = cache.write_source(path, ks.source)  # a stand-in when the cache folder cannot be written
    module = cache.import_source(path)
    dispatcher = getattr(module, ks.name)
    cache.guard_numba_cache(dispatcher)
    if Path(module.__file__) != path.resolve():  # imported from a copy (see `cache.import_source`)
        path = Path(module.__file__)
    kernel = KERNELS[target](ks, dispatcher, path)
    kernel.resources = resources
    _debug_report(func, kernel)
    return kernel


def assembly(mod) -> bool:
    """Whether `mod` holds the kernels of an assembled output (`coiteration.assemble.lower`)."""
    return isinstance(mod, IRModule) and any("assemble" in f.attrs for f in mod.functions.values())


def build_assembled(mod: IRModule, target: str, **options: Any) -> AssembledKernel:
    """Every kernel of an assembled output built, in one `AssembledKernel` that runs them with
    the host steps between (`coiteration.host`)."""
    funcs = dict(mod.items())
    plans = {f.attrs["assemble"] for f in funcs.values() if "assemble" in f.attrs}
    if len(plans) != 1 or any("assemble" not in f.attrs for f in funcs.values()):
        raise CodegenError(f"in `build`: the module mixes kernels of several assembled outputs ({', '.join(funcs)})")
    plan = Assembly.from_json(plans.pop())
    if target == "cuda" and plan.op in ("spgemm", "masked") and plan.workspace != "global":
        raise CodegenError(
            f"in `build`: an assembled SpGEMM for CUDA needs its workspace in global memory (a block cannot "
            f'allocate the {plan.workspace!r} one at run time): `sch.workspace(it, "global")` on the Stage I iteration'
        )
    # Built without the plan: the kernels are then those of `sp.ops.spgemm` / `add` / `multiply`
    # for the same dtypes and schedule, one source and one compiled cache entry for both.
    plain = {
        f.attrs["assemble_role"]: f.replace(attrs=FrozenDict({k: v for k, v in f.attrs.items() if "assemble" not in k}))
        for f in funcs.values()
    }
    kernels = {role: build(f, target, **options) for role, f in plain.items()}
    return AssembledKernel(plan, kernels, target)


def _fit_cuda(func: PrimFunc, ks: KernelSource, options: dict[str, Any]) -> tuple[PrimFunc, KernelSource, Resources]:
    """The function, its source and its resources, within CUDA's limits (`runtime.resources`).

    A kernel whose scratch is past the limits gets one rescue before the `CodegenError`: the
    passes `sp.compile` runs for it anyway (`sink_allocations`, then `compact_buffers`: each
    buffer shrinks to what one block or thread touches), so a hand-lowered module built directly
    fits when it can. A kernel that fits is built exactly as given."""
    res = kernel_resources(func, ks.launches or (ks.launch,))
    over = res.shared_bytes > MAX_SHARED_BYTES or res.local_bytes > MAX_LOCAL_BYTES
    if over:
        compacted = compact_buffers(sink_allocations(func), "cuda")["main"]
        if compacted != func:
            func = compacted
            ks = render(func, "cuda", **options)
            res = kernel_resources(func, ks.launches or (ks.launch,))
    check_build(func.name, res)
    return func, ks, res


def _select_function(mod: PrimFunc | IRModule | Mapping[str, PrimFunc]) -> PrimFunc:
    if isinstance(mod, PrimFunc):
        return mod
    try:
        mod = IRModule.from_any(mod)
    except TypeError as e:
        raise CodegenError(f"in `build`: expected a PrimFunc or an IRModule, got {type(mod).__name__}") from e
    if "main" in mod:
        return mod["main"]
    if len(mod) == 1:
        return next(iter(mod.functions.values()))
    raise CodegenError(
        f"in `build`: the module has {len(mod)} functions ({', '.join(mod)}) and none is named `main`; "
        "build one function at a time"
    )


def _script_text(func: PrimFunc) -> str:
    try:
        return func.script()
    except Exception:  # an IR the printer cannot show still builds; the source keys the cache too
        return ""


def debug_level() -> int:
    """`SPARSETIR_DEBUG` as a level: 0 when unset, empty or not a number (`yes` prints nothing
    rather than failing a build)."""
    try:
        return int(os.environ.get("SPARSETIR_DEBUG", "0"))
    except ValueError:
        return 0


def _debug_report(func: PrimFunc, kernel: Kernel) -> None:
    level = debug_level()
    if level >= 1:
        print(f"[sparsetir_py] build `{func.name}` for {kernel.target}: {kernel.path}")
    if level >= 2:
        print(f"[sparsetir_py] Stage III IR of `{func.name}`:\n{_script_text(func)}")
    if level >= 3:
        print(f"[sparsetir_py] generated source ({kernel.path}):\n{kernel.source}")
