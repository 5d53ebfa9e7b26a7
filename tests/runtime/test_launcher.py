"""Direct launches (`runtime.device.direct_launches`, what `runtime.kernel.Launcher` and
`runtime.device.PreparedLaunch` launch through on a GPU), without a GPU: a stand-in for Numba's compiled
overload (`_prepare_args` lays arrays out as numba-cuda 0.30 does) and for `cuda.core`'s launch
check that the arguments are marshalled once, a replaced result changes its pointer only, every
launch gets its own index and configuration, and anything unexpected falls back to the dispatcher.
The simulator run of the same launcher on real kernels is `device_ops_case.check_kernel_launcher`."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from numba.cuda import dispatcher as numba_dispatcher
from numba.cuda import types

from sparsetir_py.runtime import device as runtime_device

# The simulator's dispatcher module has no `launch` to stand in for: there the launcher takes
# the dispatcher's own path, which `device_ops_case.check_kernel_launcher` runs on real kernels.
pytestmark = pytest.mark.skipif(
    not hasattr(numba_dispatcher, "launch"), reason="direct launches are the GPU's path (Numba's CUDA simulator)"
)


class FakeDeviceArray:
    """A device array as Numba's: a pointer, a shape and a dtype."""

    def __init__(self, pointer: int, shape: tuple, dtype=np.float32):
        self.device_ctypes_pointer = ctypes.c_void_p(pointer)
        self.shape, self.dtype = shape, np.dtype(dtype)


class FakeOverload:
    debug = cooperative = False
    extensions = ()

    def __init__(self, argument_types):
        self.argument_types = argument_types
        self.prepared = 0
        self._codelibrary = self

    def get_cufunc(self):
        return self

    kernel = "the cufunc's kernel"

    def _prepare_args(self, ty, value, stream, retr, kernelargs):
        self.prepared += 1
        if isinstance(ty, types.Array):
            itemsize = value.dtype.itemsize
            kernelargs += [0, 0, int(np.prod(value.shape)), itemsize, value.device_ctypes_pointer.value or 0,
                           *value.shape, itemsize]  # fmt: skip
        else:
            kernelargs.append(getattr(ctypes, f"c_{ty}")(value))


class FakeDispatcher:
    def __init__(self, overload):
        self.overloads = {"sig": overload}

    def specialize(self, *args):
        return self

    def __getitem__(self, config):
        grid, block = config
        return type("Configured", (), {"griddim": grid, "blockdim": block, "stream": "stream", "sharedmem": 0})


@pytest.fixture
def launches(monkeypatch):
    seen = []
    monkeypatch.setattr(numba_dispatcher, "launch", lambda stream, config, kernel, *args: seen.append((config, args)))
    monkeypatch.setattr(numba_dispatcher, "LaunchConfig", lambda **kw: tuple(sorted(kw.items())))
    return seen


def test_arguments_marshalled_once_and_a_result_changes_its_pointer(launches):
    a, c = FakeDeviceArray(0x1000, (6,)), FakeDeviceArray(0x2000, (6,))
    overload = FakeOverload([types.float32[::1], types.float32[::1], types.int32, types.int32])
    fn = FakeDispatcher(overload)
    direct = runtime_device.direct_launches(fn, [a, c, 6], [(0, (2,), (3,)), (1, (1,), (3,))], lambda k: (k,))
    assert direct is not None
    values, pointers, emits = direct
    assert pointers == {0: 4, 1: 7 + 4}  # 7 entries an array of one dimension
    prepared = overload.prepared
    for emit in emits:
        emit(values)
    other = values.copy()
    other[pointers[1]] = 0x3000
    emits[0](other)
    assert overload.prepared == prepared  # nothing marshalled per launch
    (config0, args0), (config1, args1), (_, args2) = launches
    assert ("grid", (2,)) in config0 and ("grid", (1,)) in config1
    assert args0[:-1] == args1[:-1] and args0[-1].value == 0 and args1[-1].value == 1  # the launch index, last
    assert args0[4] == 0x1000 and args0[11] == 0x2000 and args2[11] == 0x3000
    assert [x for k, x in enumerate(args2) if k != 11] == [x for k, x in enumerate(args0) if k != 11]


def test_anything_unexpected_falls_back_to_the_dispatcher(launches):
    a = FakeDeviceArray(0x1000, (6,))
    overload = FakeOverload([types.float32[::1], types.int32])
    assert runtime_device.direct_launches(FakeDispatcher(overload), [a], [], lambda k: ()) is None  # nothing to launch
    overload.debug = True
    assert runtime_device.direct_launches(FakeDispatcher(overload), [a], [(0, (1,), (1,))], lambda k: ()) is None
    overload.debug = False
    overload._prepare_args = lambda ty, value, stream, retr, kernelargs: kernelargs.extend([0, 0, 6, 4, 0x9999, 6, 4])
    # The pointer is not where numba-cuda 0.30 puts it: not trusted.
    assert runtime_device.direct_launches(FakeDispatcher(overload), [a], [(0, (1,), (1,))], lambda k: ()) is None


def test_device_pointer_of_each_kind():
    class CupyLike:
        class data:
            ptr = 0x5000

    class InterfaceOnly:
        __cuda_array_interface__ = {"data": (0x6000, False)}

    assert runtime_device.device_pointer(FakeDeviceArray(0x4000, (1,))) == 0x4000
    assert runtime_device.device_pointer(FakeDeviceArray(0, (0,))) == 0  # an empty array: no allocation
    assert runtime_device.device_pointer(CupyLike()) == 0x5000
    assert runtime_device.device_pointer(InterfaceOnly()) == 0x6000
