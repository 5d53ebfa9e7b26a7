"""Small device kernels of the runtime: whether an array holds an inf or a NaN
(`device.all_finite`, `device.FiniteCheck`), CSR's exact SpMM where it does
(`device.FiniteCheck.fix_launch`), and gathers by an index array (`device.take`,
`device.gather_launch`).

A module of its own, imported only when a device array is checked: `from numba import cuda` at
module level is what Numba's simulator swaps for its own module in a kernel's globals.
"""

from __future__ import annotations

import math

from numba import cuda


@cuda.jit
def mark_nonfinite(x, flag):
    """`flag[0] = 1` where an entry of the 1-D array `x` is not finite (flag starts at 0)."""
    i = cuda.grid(1)
    if i < x.shape[0] and not math.isfinite(x[i]):
        flag[0] = 1


@cuda.jit
def csr_rows_if_flagged(flag, indptr, indices, data, b, c):
    """Where `flag[0]` is set (B holds an inf or a NaN): `c = A @ b` again by CSR's loop, every
    stored entry of a row in order, accumulated in `c` itself (its dtype, as the CSR kernel sums);
    else nothing, each block returning at once. Blocks stride over the rows, threads over the
    features."""
    if flag[0] == 0:
        return
    for i in range(cuda.blockIdx.x, c.shape[0], cuda.gridDim.x):
        for f in range(cuda.threadIdx.x, c.shape[1], cuda.blockDim.x):
            c[i, f] = 0
            for p in range(indptr[i], indptr[i + 1]):
                c[i, f] += data[p] * b[indices[p], f]


@cuda.jit
def take(out, values, index):
    """`out[t] = values[index[t]]` for every t (`device.take`)."""
    t = cuda.grid(1)
    if t < out.shape[0]:
        out[t] = values[index[t]]


@cuda.jit
def gather(out, values, index):
    """`out[t] = values[index[t]]`, or 0 where `index[t]` is negative (`device.gather_launch`)."""
    t = cuda.grid(1)
    if t < out.shape[0]:
        k = index[t]
        if k >= 0:
            out[t] = values[k]
        else:
            out[t] = 0
