"""SparseTIR's `test_horizontal_fuse` (tests/python/sparsetir/test_horizontal_fuse.py) in this
project's dialect: two row sums, each nest caching its rows of the input in shared memory
(`cache_read`) and its sums in local memory (`cache_write`), split and bound to blocks, then
`lower_sparse_buffer`, `horizontal_fusion` and `build(..., "cuda")` as SparseTIR's test does.

SparseTIR binds the reduction loop `j` to threadIdx.x (TVM lowers it to a cross-thread
reduction); this project refuses to bind a loop that carries a reduction, so `j` stays a serial
loop and each block has one thread. The second nest is split by 8 (SparseTIR: 4) so that the
fused grid is 32 + 8 blocks.

`python cached_fusion_case.py OUT` runs the fused kernel in Numba's CUDA simulator (set
NUMBA_ENABLE_CUDASIM=1) and writes the sums to OUT (.npz) and the launch and resources to OUT.json
(`cuda_support.simulated_run`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

if __name__ == "__main__":  # run as a script: this checkout's package, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import sparsetir_py as sp
from sparsetir_py import script as T


@T.prim_func
def row_sums(a: T.handle, b: T.handle, c1: T.handle, c2: T.handle):
    T.func_attr({"horizontal_fuse": True})
    I1 = T.dense_fixed(128)
    J1 = T.dense_fixed(128)
    I2 = T.dense_fixed(64)
    J2 = T.dense_fixed(128)
    A = T.match_sparse_buffer(a, (I1, J1), "float32")
    B = T.match_sparse_buffer(b, (I2, J2), "float32")
    C1 = T.match_sparse_buffer(c1, (I1,), "float32")
    C2 = T.match_sparse_buffer(c2, (I2,), "float32")
    with T.sp_iter([I1, J1], "SR", "first") as [i, j]:
        with T.init():
            C1[i] = T.float32(0)
        C1[i] = C1[i] + A[i, j]
    with T.sp_iter([I2, J2], "SR", "second") as [i, j]:
        with T.init():
            C2[i] = T.float32(0)
        C2[i] = C2[i] + B[i, j]


def schedule(sch: sp.Schedule) -> None:
    """SparseTIR's `test_end_to_end` schedule (see the module docstring for the differences)."""
    blk1 = sch.get_block("first0")
    blk2 = sch.get_block("second0")
    a_read = sch.cache_read(blk1, "A", "shared")
    b_read = sch.cache_read(blk2, "B", "shared")
    c_write_0 = sch.cache_write(blk1, 0, "local")
    c_write_1 = sch.cache_write(blk2, 0, "local")
    i, _ = sch.get_loops(blk1)
    sch.compute_at(a_read, i)
    sch.reverse_compute_at(c_write_0, i)
    io, _ = sch.split(i, [None, 4])
    sch.bind(io, "blockIdx.x")
    i, _ = sch.get_loops(blk2)
    sch.compute_at(b_read, i)
    sch.reverse_compute_at(c_write_1, i)
    io, _ = sch.split(i, [None, 8])
    sch.bind(io, "blockIdx.x")


def unfused() -> sp.IRModule:
    """The scheduled function at Stage III, before horizontal fusion."""
    sch = sp.Schedule(sp.lower_sparse_iter(row_sums))
    schedule(sch)
    return sp.lower_sparse_buffer(sch.mod)


def fused_kernel():
    """What SparseTIR's test does after scheduling: fuse, then build for CUDA."""
    return sp.build(sp.horizontal_fusion(unfused()), "cuda")


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.random((128, 128), dtype=np.float32),
        "b": rng.random((64, 128), dtype=np.float32),
        "c1": np.full(128, np.nan, np.float32),
        "c2": np.full(64, np.nan, np.float32),
    }


if __name__ == "__main__":
    out = Path(sys.argv[1])
    kernel = fused_kernel()
    args = inputs()
    kernel(**args)
    res = kernel.resources
    info = {"launches": kernel.launch_configs(), "shared": res.shared_bytes, "local": res.local_bytes}
    out.with_suffix(".json").write_text(json.dumps(info))
    np.savez(out, c1=args["c1"], c2=args["c2"])
