"""Running compiled functions: argument binding and checking (shared by kernels and the interpreter)."""

from .args import BoundArguments, bind_arguments

__all__ = ["BoundArguments", "bind_arguments"]
