"""Warp shuffles for generated CUDA kernels, with a per-warp emulation for the CUDA simulator.

A kernel that uses the IR intrinsic `T.shfl_down_sync(mask, value, delta)` (registered by the
tensorize registry, `sparsetir_py.schedule.intrinsics`) imports `shfl_down_sync` from here. The
name is chosen once, when this module is imported:

- on a device and for PTX it is Numba's `cuda.shfl_down_sync` (`shfl.sync.down.b32`);
- under `NUMBA_ENABLE_CUDASIM=1` the simulator has no warp intrinsics, so the very same generated
  kernel gets `_simulated_shfl_down_sync`, which emulates the shuffle per warp: each lane writes
  its value into its warp's slots, the 32 lanes meet at a barrier of their own, each reads the slot
  of lane `lane + delta` (its own value when that lane is past the warp), and a second barrier
  keeps any slot from being overwritten before every lane has read it.

As on the device, every lane of the warp must execute the shuffle (a full mask); a warp whose
lanes do not all arrive within `SIMULATOR_TIMEOUT` seconds raises instead of hanging. The
simulator numbers threads as CUDA does (`x + blockDim.x * (y + blockDim.y * z)`), so warps are the
same groups of 32 threads as on a device.

The CUDA renderer (`codegen/cuda.py`) imports this module into generated kernels by name only:
`import sparsetir_py` does not import `numba.cuda`.
"""

from __future__ import annotations

import threading
from typing import Any

from numba import config, cuda

__all__ = ["WARP_SIZE", "shfl_down_sync"]

WARP_SIZE = 32
SIMULATOR_TIMEOUT = 60.0


class _Warp:
    """The exchange slots and the barrier of one simulated warp."""

    def __init__(self, lanes: int):
        self.slots: list[Any] = [None] * lanes
        self.barrier = threading.Barrier(lanes, timeout=SIMULATOR_TIMEOUT)


_WARPS_LOCK = threading.Lock()


def _warp_of(thread) -> tuple[_Warp, int]:
    """The warp of a simulated thread (created by its first lane to arrive) and its lane."""
    manager = thread._manager  # the simulator's BlockManager: one per thread block being run
    nthreads = 1
    for extent in manager._block_dim:
        nthreads *= extent
    warp_id, lane = divmod(thread.thread_id, WARP_SIZE)
    with _WARPS_LOCK:
        warps = manager.__dict__.setdefault("_sparsetir_warps", {})
        warp = warps.get(warp_id)
        if warp is None:
            warp = warps[warp_id] = _Warp(min(WARP_SIZE, nthreads - warp_id * WARP_SIZE))
    return warp, lane


def _simulated_shfl_down_sync(mask, value, delta):
    """`cuda.shfl_down_sync` for the simulator: the value of lane `lane + delta` of this warp."""
    thread = threading.current_thread()
    warp, lane = _warp_of(thread)
    try:
        warp.slots[lane] = value
        warp.barrier.wait()
        source = lane + int(delta)
        result = warp.slots[source] if 0 <= source < len(warp.slots) else value
        warp.barrier.wait()
    except threading.BrokenBarrierError:
        raise RuntimeError(
            f"shfl_down_sync: not every lane of warp {thread.thread_id // WARP_SIZE} reached the shuffle "
            f"(block {tuple(thread.blockIdx)}); every lane of a warp must execute it"
        ) from None
    return result


if config.ENABLE_CUDASIM:
    shfl_down_sync = _simulated_shfl_down_sync
else:
    shfl_down_sync = cuda.shfl_down_sync
