"""Device arrays: what kind an operand is, its metadata without a copy, and new arrays of a kind.

Three kinds of array reach a CUDA kernel: numpy (host), Numba device arrays (`numba.cuda`'s, or
the simulator's stand-ins) and CuPy arrays (anything else with `__cuda_array_interface__` counts
as CuPy-like for metadata but new arrays are Numba's). `sp.ops` on `target="cuda"` keeps device
operands on the device and gives results of the kind it was given (`ops/device.py`); these
helpers never copy a device array to the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ArrayInfo",
    "all_finite",
    "describe",
    "empty_like_kind",
    "is_device_array",
    "is_device_sparse",
    "kind_of",
    "take",
    "to_device",
]


def is_device_array(value: Any) -> bool:
    """Whether `value` lives on a CUDA device (a Numba device array or `__cuda_array_interface__`)."""
    if isinstance(value, np.ndarray) or value is None:
        return False
    return hasattr(value, "__cuda_array_interface__") or (hasattr(value, "copy_to_host") and hasattr(value, "shape"))


def is_device_sparse(value: Any) -> bool:
    """Whether `value` is a `cupyx.scipy.sparse` matrix (its arrays on the device)."""
    return type(value).__module__.startswith("cupyx.scipy.sparse")


def kind_of(value: Any) -> str:
    """ "cupy", "numba" or "numpy": which library's arrays a result for `value` should be."""
    if is_device_sparse(value) or type(value).__module__.startswith("cupy"):
        return "cupy"
    if is_device_array(value):
        return "numba"
    return "numpy"


@dataclass(frozen=True)
class ArrayInfo:
    """A device array's shape, dtype and layout, read from its metadata."""

    shape: tuple[int, ...]
    dtype: np.dtype
    c_contiguous: bool


def layout(value: Any) -> tuple[np.dtype, tuple[int, ...], tuple[int, ...] | None]:
    """(dtype, shape, strides in bytes, None where C-contiguous) of a device array, from its
    `__cuda_array_interface__` (or its attributes), without touching its data."""
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is not None:
        strides = interface.get("strides")
        return np.dtype(interface["typestr"]), tuple(int(s) for s in interface["shape"]), strides
    return np.dtype(value.dtype), tuple(int(s) for s in value.shape), value.strides


def describe(value: Any) -> ArrayInfo:
    """The shape, dtype and C-contiguity of a device array, without touching its data."""
    dtype, shape, strides = layout(value)
    return ArrayInfo(shape, dtype, strides is None or _c_contiguous(shape, tuple(strides), dtype.itemsize))


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """numpy's rule: an empty array is contiguous, and the stride of an extent of 1 is free."""
    if 0 in shape:
        return True
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def empty_like_kind(kind: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A new uninitialised device array of `kind` ("cupy" or "numba")."""
    if kind == "cupy":
        import cupy

        return cupy.empty(shape, dtype=dtype)
    from numba import cuda

    return cuda.device_array(shape, dtype=dtype)


def to_device(host: np.ndarray, kind: str = "numba") -> Any:
    """A device copy of a host array, of `kind`."""
    if kind == "cupy":
        import cupy

        return cupy.asarray(host)
    from numba import cuda

    return cuda.to_device(host)


def all_finite(value: Any) -> bool:
    """Whether every entry of a device array is finite, decided on the device: only a flag comes
    back to the host, never the array."""
    info = describe(value)
    size = math.prod(info.shape)
    if size == 0:
        return True
    if kind_of(value) == "cupy":
        import cupy

        return bool(cupy.isfinite(value).all())
    from numba import cuda

    from .cuda_finite import mark_nonfinite

    flag = cuda.to_device(np.zeros(1, np.int32))
    threads = 256
    mark_nonfinite[(size + threads - 1) // threads, threads](value.reshape(size), flag)
    return int(flag.copy_to_host()[0]) == 0


def take(values: Any, index: Any) -> Any:
    """`values[index]` on the device (`np.take`): a new array of the kind of `values`, for a 1-D
    device index array; nothing is copied to the host."""
    count = describe(index).shape[0]
    if kind_of(values) == "cupy":
        return values[index]
    from numba import cuda

    from .cuda_finite import take as kernel

    out = cuda.device_array(count, dtype=describe(values).dtype)
    if count:
        threads = 256
        kernel[(count + threads - 1) // threads, threads](out, values, index)
    return out
