"""Running compiled functions: build(), kernels, argument binding and checking, the source cache."""

from ..format.args import BoundArguments, bind_arguments
from .build import build
from .kernel import CPUKernel, CUDAKernel, Kernel

__all__ = ["BoundArguments", "CPUKernel", "CUDAKernel", "Kernel", "bind_arguments", "build"]
