"""Device functions that generated CUDA kernels import, with stand-ins for the CUDA simulator.

On a real device (and for PTX) these are Numba's own: the `math` module, `libdevice` and
`cuda.syncwarp`. The simulator (`NUMBA_ENABLE_CUDASIM=1`) runs kernels as Python, where
`math.sin(inf)` raises instead of returning NaN, libdevice functions return None and warp
intrinsics do not exist; so the same generated kernel runs there with numpy equivalents, which
give inf/NaN as the device does and keep float32 in float32. The simulator's `syncwarp` waits
for the whole block, which is right when every thread of the block reaches it.
"""

from __future__ import annotations

import math as _math
import threading

import numpy as np
from numba import config, cuda

__all__ = ["libdevice", "math", "syncwarp"]


def _quiet(fn):
    """A numpy function on scalars without floating-point warnings (the device has none)."""

    def call(*args):
        with np.errstate(all="ignore"):
            return fn(*args)

    return staticmethod(call)


class _SimulatedMath:
    """The `math` functions the CUDA renderer uses, on numpy scalars."""

    inf, nan, pi, e = _math.inf, _math.nan, _math.pi, _math.e
    exp, log, log2, log1p = _quiet(np.exp), _quiet(np.log), _quiet(np.log2), _quiet(np.log1p)
    sqrt, tanh, sin, cos = _quiet(np.sqrt), _quiet(np.tanh), _quiet(np.sin), _quiet(np.cos)
    isnan, isinf, pow, fmod = _quiet(np.isnan), _quiet(np.isinf), _quiet(np.power), _quiet(np.fmod)

    @staticmethod
    def erf(x):
        return type(x)(_math.erf(x)) if isinstance(x, np.floating) else _math.erf(x)


class _SimulatedLibdevice:
    """The libdevice functions the CUDA renderer uses, on numpy scalars."""

    @staticmethod
    def _f32(fn):
        return staticmethod(lambda x: np.float32(fn(np.float32(x))))

    @staticmethod
    def _f64(fn):
        return staticmethod(lambda x: np.float64(fn(np.float64(x))))

    exp2f, exp2 = _f32(np.exp2), _f64(np.exp2)
    floorf, floor = _f32(np.floor), _f64(np.floor)
    ceilf, ceil = _f32(np.ceil), _f64(np.ceil)
    rintf, rint = _f32(np.rint), _f64(np.rint)
    truncf, trunc = _f32(np.trunc), _f64(np.trunc)
    rsqrtf = _f32(lambda x: np.float32(1) / np.sqrt(x))
    rsqrt = _f64(lambda x: 1.0 / np.sqrt(x))


def _simulated_syncwarp() -> None:
    # Each simulated CUDA thread is a Python thread that knows how to wait for its block.
    threading.current_thread().syncthreads()


if config.ENABLE_CUDASIM:
    libdevice = _SimulatedLibdevice()
    math = _SimulatedMath()
    syncwarp = _simulated_syncwarp
else:
    from numba.cuda import libdevice

    math = _math
    syncwarp = cuda.syncwarp
