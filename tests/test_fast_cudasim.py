"""`fast_cudasim.py`, the simulator's block manager the CUDA tests run under: kernels that wait
for their block (barriers, through a device function too) keep one Python thread per CUDA thread;
the others run a block's threads one after the other, with the same indices, lanes and errors."""

from __future__ import annotations

import subprocess

from cuda_support import simulator_argv

CODE = """
import threading
import numpy as np
from numba import cuda
import fast_cudasim

@cuda.jit
def indices(out):
    bx, by = cuda.blockIdx.x, cuda.blockIdx.y
    tx, ty, tz = cuda.threadIdx.x, cuda.threadIdx.y, cuda.threadIdx.z
    b = bx + cuda.gridDim.x * by
    t = tx + cuda.blockDim.x * (ty + cuda.blockDim.y * tz)
    out[b, t, 0] = tx * 100 + ty * 10 + tz
    out[b, t, 1] = cuda.laneid
    out[b, t, 2] = threading.active_count()  # this one and the main thread: no thread per CUDA thread

@cuda.jit(device=True)
def wait():
    cuda.syncthreads()

@cuda.jit
def reverse(x, out):
    tile = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    tile[t] = x[cuda.blockIdx.x * 64 + t]
    threads[cuda.blockIdx.x] = max(threads[cuda.blockIdx.x], threading.active_count())
    wait()  # every thread's store before any load
    out[cuda.blockIdx.x * 64 + t] = tile[63 - t]

@cuda.jit
def fails(x):
    if cuda.threadIdx.x == 5:
        x[100] = 1.0

assert not fast_cudasim._waits_for_others(indices.py_func)
assert fast_cudasim._waits_for_others(reverse.py_func)  # through `wait`

out = np.full((6, 40, 3), -1, np.int64)
indices[(3, 2), (5, 4, 2)](out)
t = np.arange(40)
want = (t % 5) * 100 + (t // 5 % 4) * 10 + t // 20
assert (out[:, :, 0] == want).all(), out[:, :, 0]
assert (out[:, :, 1] == t % 32).all(), out[:, :, 1]
assert (out[:, :, 2] == 2).all(), out[:, :, 2]

x = np.arange(128, dtype=np.float32)
got = np.zeros(128, np.float32)
threads = [0, 0]
reverse[2, 64](x, got)
assert min(threads) > 64, threads  # a thread per CUDA thread, all alive at the barrier
assert (got == np.concatenate([x[:64][::-1], x[64:][::-1]])).all(), got

try:
    fails[1, 8](np.zeros(4, np.float32))
except IndexError as e:
    assert "tid=[5, 0, 0]" in str(e), str(e)
else:
    raise AssertionError("no error")
print("ok")
"""


def test_threads_one_by_one_or_together():
    proc = subprocess.run(simulator_argv("-c", CODE), capture_output=True, text=True, timeout=300,
                          cwd=__import__("pathlib").Path(__file__).parent)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
