"""`runtime.device.host_to_device`, the copy a repeated device call makes of a scipy A's values,
without a GPU: stand-ins for a Numba device array (which records the copies it is asked for) and
for Numba's driver call show which copy each host array takes. The plain one (the driver's
`host_to_device` on a GPU, an assignment into the simulator's numpy memory) only for a host array
of the device array's dtype and shape, C-contiguous; anything else converted and through the
checked `copy_to_device`, which raises where Numba's would. The simulator runs of the repeated
calls that copy this way are `device_ops_case.check_repeated_calls_see_what_changed` and the
other repeated-call checks there.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from numba import config

from sparsetir_py.runtime.device import host_to_device


class FakeNumbaArray:
    """A Numba device array's metadata, and the copies asked of it."""

    def __init__(self, shape: tuple, dtype=np.float32, stream: int = 0):
        self.shape, self.dtype, self.strides, self.stream = shape, np.dtype(dtype), None, stream
        self.checked: list[np.ndarray] = []  # `copy_to_device`
        self.assigned: list[tuple] = []  # `[...] =` (the simulator's memory)

    def copy_to_device(self, host: np.ndarray) -> None:
        if host.shape != self.shape or host.dtype != self.dtype:
            raise ValueError("incompatible shape or dtype")  # as Numba's check_array_compatibility
        self.checked.append(host)

    def __setitem__(self, index, value) -> None:
        self.assigned.append((index, value))


@pytest.fixture
def on_gpu(monkeypatch):
    """No simulator, and Numba's driver call replaced by one that records its arguments."""
    calls = []
    fake = types.ModuleType("numba.cuda.cudadrv.driver")
    fake.host_to_device = lambda dst, src, size, stream=0: calls.append((dst, src, size))
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv.driver", fake)
    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0)
    return calls


def test_a_matching_host_array_takes_the_drivers_copy(on_gpu):
    device = FakeNumbaArray((3, 4))
    copy = host_to_device(device)
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    copy(values)
    copy(values)
    assert on_gpu == [(device, values, 48)] * 2 and not device.checked


@pytest.mark.parametrize(
    "host",
    [
        np.arange(12, dtype=np.float64).reshape(3, 4),  # another dtype: converted
        np.arange(24, dtype=np.float32).reshape(3, 8)[:, ::2],  # strided: made contiguous
    ],
    ids=["float64", "strided"],
)
def test_other_host_arrays_are_converted_and_checked(on_gpu, host):
    device = FakeNumbaArray((3, 4))
    host_to_device(device)(host)
    (got,) = device.checked
    assert not on_gpu and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, host)


def test_another_shape_raises_as_numbas_copy_does(on_gpu):
    device = FakeNumbaArray((12,))
    with pytest.raises(ValueError, match="incompatible"):
        host_to_device(device)(np.zeros(13, np.float32))
    assert not on_gpu


def test_a_device_array_on_a_stream_or_without_the_driver_call_is_checked(on_gpu, monkeypatch):
    values = np.ones(5, np.float32)
    streamed = FakeNumbaArray((5,), stream=7)
    host_to_device(streamed)(values)
    assert streamed.checked == [values] and not on_gpu
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv.driver", types.ModuleType("numba.cuda.cudadrv.driver"))
    other = FakeNumbaArray((5,))
    host_to_device(other)(values)  # a numba-cuda without `host_to_device`: its checked copy
    assert other.checked == [values] and not on_gpu


def test_an_empty_array_copies_nothing(on_gpu):
    device = FakeNumbaArray((0, 4))
    host_to_device(device)(np.zeros((0, 4), np.float32))
    assert not on_gpu and not device.checked


def test_the_simulator_assigns_into_its_memory(monkeypatch):
    monkeypatch.setattr(config, "ENABLE_CUDASIM", 1)
    device = FakeNumbaArray((4,))
    values = np.arange(4, dtype=np.float32)
    host_to_device(device)(values)
    assert device.assigned == [(Ellipsis, values)] and not device.checked


def test_a_cupy_array_takes_its_set_after_conversion():
    class FakeCupyArray:
        shape, dtype, strides = (3,), np.dtype(np.float32), None

        def __init__(self):
            self.set_values = []

        def set(self, host):
            self.set_values.append(host)

    device = FakeCupyArray()
    copy = host_to_device(device)
    same = np.ones(3, np.float32)
    copy(same)
    copy(np.ones(3, np.float64))
    assert device.set_values[0] is same and device.set_values[1].dtype == np.float32
