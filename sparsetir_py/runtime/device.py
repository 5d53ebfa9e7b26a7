"""Device arrays: what kind an operand is, its metadata without a copy, and new arrays of a kind.

Three kinds of array reach a CUDA kernel: numpy (host), Numba device arrays (`numba.cuda`'s, or
the simulator's stand-ins) and CuPy arrays (anything else with `__cuda_array_interface__` counts
as CuPy-like for metadata but new arrays are Numba's). `sp.ops` on `target="cuda"` keeps device
operands on the device and gives results of the kind it was given (`ops/device.py`); these
helpers never copy a device array to the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ArrayInfo",
    "FiniteCheck",
    "PreparedLaunch",
    "all_finite",
    "describe",
    "device_pointer",
    "direct_launches",
    "empty_like_kind",
    "gather_launch",
    "host_to_device",
    "is_device_array",
    "is_device_sparse",
    "kind_of",
    "take",
    "take_launch",
    "to_device",
]


def is_device_array(value: Any) -> bool:
    """Whether `value` lives on a CUDA device (a Numba device array or `__cuda_array_interface__`)."""
    if type(value) in _DEVICE_TYPES:
        return True
    if isinstance(value, np.ndarray) or value is None:
        return False
    if not (hasattr(value, "__cuda_array_interface__") or (hasattr(value, "copy_to_host") and hasattr(value, "shape"))):
        return False
    cls = type(value)
    if hasattr(cls, "__cuda_array_interface__") or (hasattr(cls, "copy_to_host") and hasattr(cls, "shape")):
        _DEVICE_TYPES.add(cls)  # the class says so (its instances need not be asked again)
    return True


#: Classes whose every instance is a device array (CuPy's, Numba's): `hasattr` on an instance
#: evaluates `__cuda_array_interface__`, a property that builds a dict, on every call.
_DEVICE_TYPES: set[type] = set()


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


def host_to_device(device: Any) -> Callable[[np.ndarray], None]:
    """A function copying a host array into the device array `device` (Numba's, the simulator's
    or CuPy's) again and again, what does not change between calls decided once.

    A host array of `device`'s dtype and shape, C-contiguous (a scipy A's values, every repeated
    call), takes the plain copy: Numba's driver `host_to_device`, the call `copy_to_device` ends
    in (synchronous on the default stream, as that is), without the checks of layout and
    compatibility `copy_to_device` makes in Python every call; in the simulator, whose device
    memory is a numpy array, numpy's assignment into it. Anything else is converted to `device`'s
    dtype first and takes the checked `copy_to_device` (which raises for another shape). A CuPy
    array takes its own `set` (checked in compiled code), after the same conversion."""
    info = describe(device)
    dtype, shape = info.dtype, info.shape
    if not hasattr(device, "copy_to_device"):  # CuPy
        put = device.set
        return lambda host: put(host if host.dtype == dtype else host.astype(dtype))
    checked = device.copy_to_device
    plain = None
    if info.c_contiguous and not getattr(device, "stream", 0):
        plain = _plain_host_to_device(device, math.prod(shape) * dtype.itemsize)

    def copy(host: np.ndarray) -> None:
        if plain is not None and host.dtype == dtype and host.shape == shape and host.flags.c_contiguous:
            plain(host)
        else:
            checked(np.ascontiguousarray(host, dtype=dtype))

    return copy


def _plain_host_to_device(device: Any, nbytes: int) -> Callable[[np.ndarray], None] | None:
    """The bare copy of `nbytes` from a host array (checked by the caller) into a Numba device
    array; None where this numba-cuda has no such driver call."""
    from numba import config

    if nbytes == 0:
        return _ignore
    if config.ENABLE_CUDASIM:

        def assign(host: np.ndarray) -> None:
            device[...] = host  # the simulator's device memory is a numpy array

        return assign
    try:
        from numba.cuda.cudadrv.driver import host_to_device as driver_copy
    except ImportError:
        return None
    return lambda host: driver_copy(device, host, nbytes)


def _ignore(host: np.ndarray) -> None:
    return None


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
    mark_nonfinite[(size + THREADS - 1) // THREADS, THREADS](value.reshape(size), flag)
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
        kernel[(count + THREADS - 1) // THREADS, THREADS](out, values, index)
    return out


#: Threads per block of the helper kernels (`cuda_finite`).
THREADS = 256
#: The CSR fix-up of a padded SpMM (`FiniteCheck.fix_launch`): at most this many blocks (striding
#: over the rows) of `FIX_THREADS` threads (striding over the features). Where B is finite each
#: block only reads the flag.
FIX_BLOCKS = 1024
FIX_THREADS = 128


class PreparedLaunch:
    """One launch of a helper kernel (`runtime.cuda_finite`) on fixed device arrays, marshalled
    once as a `runtime.kernel.Launcher`'s is (through the dispatcher where that is unavailable):
    calling it launches with O(1) host work, and `into(k)` gives a function that launches with
    another device array of argument `k`'s dtype and shape in its place (unchecked). A launch
    with no thread does nothing."""

    def __init__(self, kernel: Any, grid: tuple, block: tuple, args: tuple):
        args = list(args)
        empty = 0 in grid or 0 in block
        direct = None if empty else direct_launches(kernel, args, [(0, grid, block)], lambda index: ())
        self.direct = direct is not None  #: whether launches skip the dispatcher
        if direct is not None:
            self._values, pointers, (self._emit,) = direct
            self._where = {k: (position, device_pointer) for k, position in pointers.items()}
            return
        self._values = args
        self._where = {k: (k, _same) for k in range(len(args))}
        self._emit = _nothing if empty else (lambda values: kernel[grid, block](*values))

    def __call__(self) -> None:
        self._emit(self._values)

    def into(self, k: int) -> Any:
        position, entry = self._where[k]
        base, emit = self._values, self._emit

        def launch(value) -> None:
            values = base.copy()
            values[position] = entry(value)
            emit(values)

        return launch


def _same(value: Any) -> Any:
    return value


def _nothing(values: list) -> None:
    return None


def take_launch(values: Any, index: Any, out: Any) -> PreparedLaunch:
    """`out[:] = values[index]` on the device, prepared (`PreparedLaunch`): 1-D device arrays,
    `out` of `index`'s length and `values`' dtype."""
    from .cuda_finite import take as kernel

    count = describe(index).shape[0]
    return PreparedLaunch(kernel, ((count + THREADS - 1) // THREADS,), (THREADS,), (out, values, index))


def gather_launch(values: Any, index: Any, out: Any) -> PreparedLaunch:
    """`out[t] = values[index[t]]`, 0 where `index[t] < 0` (padding), on the device, prepared
    (`PreparedLaunch`): 1-D device arrays, `out` of `index`'s length and `values`' dtype."""
    from .cuda_finite import gather as kernel

    count = describe(index).shape[0]
    return PreparedLaunch(kernel, ((count + THREADS - 1) // THREADS,), (THREADS,), (out, values, index))


class FiniteCheck:
    """Whether a device array holds only finite values, prepared for that array (its values may
    change between calls; each call looks at them): a flag on the device reset (a 4-byte copy),
    `mark_nonfinite` launched (`PreparedLaunch`), the flag read back (4 bytes, which waits for
    the device). `mark()` only resets and marks, and `fix_launch` prepares the launch that acts
    on the flag on the device: no wait."""

    def __init__(self, value: Any):
        size = math.prod(describe(value).shape)
        self._mark, self._value = None, value
        if size == 0:
            return
        from numba import cuda

        from .cuda_finite import mark_nonfinite

        self._zero, self._host = np.zeros(1, np.int32), np.zeros(1, np.int32)
        self._flag = cuda.to_device(self._zero)
        self._reset = host_to_device(self._flag)
        blocks = (size + THREADS - 1) // THREADS
        self._mark = PreparedLaunch(mark_nonfinite, (blocks,), (THREADS,), (value.reshape(size), self._flag))

    def mark(self) -> None:
        """The flag reset and set where the array holds an inf or a NaN, on the device (no wait)."""
        if self._mark is not None:
            self._reset(self._zero)
            self._mark()

    def __call__(self) -> bool:
        if self._mark is None:
            return True
        self.mark()
        self._flag.copy_to_host(self._host)
        return int(self._host[0]) == 0

    def fix_launch(self, indptr: Any, indices: Any, data: Any, c: Any) -> PreparedLaunch:
        """`c = A @ B` by CSR's exact loop (`cuda_finite.csr_rows_if_flagged`) where the last
        `mark()` found an inf or a NaN in B (the array checked), else a launch whose blocks return
        at once: a padded kernel's result (0 * inf is NaN where A stores nothing) made right on the
        device, with no wait for the flag. A's CSR arrays on the device; `into(5)` takes another
        result of `c`'s shape."""
        from .cuda_finite import csr_rows_if_flagged

        m = describe(c).shape[0]
        # An empty B holds nothing to fix (and has no flag): a launch of no block.
        grid = (min(m, FIX_BLOCKS),) if self._mark is not None else (0,)
        flag = self._flag if self._mark is not None else None
        return PreparedLaunch(csr_rows_if_flagged, grid, (FIX_THREADS,), (flag, indptr, indices, data, self._value, c))


def direct_launches(fn, args: list, launches: list, tail: Callable) -> tuple | None:
    """(the kernel's marshalled arguments, the position of each array argument's pointer there,
    one launch function per launch) for Numba's compiled overload of `fn` on `args`, marshalled
    once by Numba's own `_prepare_args` as each launch would; None where this numba-cuda (or the
    simulator) does not work that way, or an argument would need a copy or a write-back."""
    if not launches:
        return None
    try:
        from numba.cuda import dispatcher as numba_dispatcher
        from numba.cuda import types as numba_types

        launch, launch_config = numba_dispatcher.launch, numba_dispatcher.LaunchConfig
        (compiled,) = fn.specialize(*args, *tail(launches[0][0])).overloads.values()
        if getattr(compiled, "debug", True) or getattr(compiled, "extensions", None):
            return None
        cufunc_kernel = compiled._codelibrary.get_cufunc().kernel
        types = list(compiled.argument_types)
        configured = fn[launches[0][1], launches[0][2]]
        stream, sharedmem = configured.stream, configured.sharedmem
        values: list = []
        pointers: dict[int, int] = {}
        for k, (ty, value) in enumerate(zip(types, args)):
            segment, retr = [], []
            compiled._prepare_args(ty, value, stream, retr, segment)
            if retr:
                return None
            if isinstance(ty, numba_types.Array):
                # Numba's layout: meminfo, parent, size, itemsize, pointer, shape..., strides...
                if len(segment) < 5 or segment[4] != device_pointer(value):
                    return None
                pointers[k] = len(values) + 4
            values.extend(segment)
        emits = []
        for index, grid, block in launches:
            config = fn[grid, block]
            tail_args: list = []
            for ty, value in zip(types[len(args) :], tail(index)):
                compiled._prepare_args(ty, value, stream, [], tail_args)
            flags = {
                "is_cooperative" if numba_dispatcher.CUDA_CORE_GE_1_0 else "cooperative_launch": compiled.cooperative
            }
            where = launch_config(grid=config.griddim, block=config.blockdim, shmem_size=sharedmem, **flags)
            emits.append(
                lambda values, where=where, tail_args=tuple(tail_args): launch(
                    stream, where, cufunc_kernel, *values, *tail_args
                )
            )
        return values, pointers, emits
    except Exception:  # the simulator, or a numba-cuda whose kernels launch otherwise
        return None


def device_pointer(value: Any) -> int:
    """The device address of a device array's first element (Numba's, CuPy's, or any with
    `__cuda_array_interface__`), without a copy."""
    pointer = getattr(value, "device_ctypes_pointer", None)
    if pointer is not None:
        return pointer.value or 0
    memory = getattr(value, "data", None)
    address = getattr(memory, "ptr", None)  # CuPy's MemoryPointer
    if type(address) is int:
        return address
    return int(value.__cuda_array_interface__["data"][0] or 0)
