"""Device functions that generated CUDA kernels import, with stand-ins for the CUDA simulator.

On a real device (and for PTX) these are Numba's own: `libdevice` and `cuda.syncwarp`. The
simulator (`NUMBA_ENABLE_CUDASIM=1`) has neither (its libdevice functions return None, it has
no warp intrinsics), so the same generated kernel runs there with numpy equivalents: single
precision functions (`floorf`, ...) return float32 as libdevice does. The simulator's
`syncwarp` waits for the whole block, which is right when every thread of the block reaches it.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import config, cuda

__all__ = ["libdevice", "syncwarp"]


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
    syncwarp = _simulated_syncwarp
else:
    from numba.cuda import libdevice

    syncwarp = cuda.syncwarp
