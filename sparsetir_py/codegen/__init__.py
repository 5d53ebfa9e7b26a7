"""Code generation: Stage III PrimFunc -> the Python source of a Numba kernel.

`render(func, target, **options)` returns a `KernelSource` (source text, parameter list, launch
extents). `sp.build` (sparsetir_py.runtime.build) writes it to the on-disk cache, imports it and
wraps it in a `Kernel`. One shared renderer (`base.Renderer`) with one subclass per target:
`cpu.CPURenderer` (`@numba.njit(parallel=True)`) and `cuda.CUDARenderer` (`@cuda.jit`).
"""

from __future__ import annotations

from typing import Any

from ..errors import TargetError
from ..ir.func import PrimFunc
from .base import KernelParam, KernelSource, Renderer
from .cpu import CPURenderer
from .cuda import CUDARenderer

RENDERERS: dict[str, type[Renderer]] = {"cpu": CPURenderer, "cuda": CUDARenderer}

__all__ = ["RENDERERS", "CPURenderer", "CUDARenderer", "KernelParam", "KernelSource", "Renderer", "render"]


def render(func: PrimFunc, target: str = "cpu", **options: Any) -> KernelSource:
    """Render a Stage III function for `target` ("cpu" or "cuda"); raises `CodegenError`."""
    renderer = RENDERERS.get(target)
    if renderer is None:
        raise TargetError(f"in `build`: unknown target {target!r}; expected one of {', '.join(RENDERERS)}")
    return renderer(func, options).render()
