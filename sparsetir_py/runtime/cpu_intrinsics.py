"""Numba helpers that generated CPU kernels import.

`atomic_add(array, index, value)` adds `value` to `array[index]` with LLVM's `atomicrmw`
(monotonic ordering: atomic, no fence), so concurrent `prange` iterations may add to the same
element. Integer and float arrays (LLVM >= 9 has `fadd`); no bounds check.

`split_bound(offsets, n, part, parts)` is where part `part` of `parts` starts when iterations
`0..n` are split into contiguous ranges of equal weight, iteration `i` weighing
`offsets[i + 1] - offsets[i] + 1` (a loop annotated `split_by`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def atomic_add(typingctx, array, index, value):
    """`array[index] += value`, atomically (1-D arrays)."""
    if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(index, types.Integer):
        return None
    if not isinstance(array.dtype, types.Integer | types.Float) or not isinstance(value, types.Number):
        return None

    def codegen(context, builder, sig, args):
        array_type, index_type, value_type = sig.args
        ary = context.make_array(array_type)(context, builder, args[0])
        idx = context.cast(builder, args[1], index_type, types.intp)
        val = context.cast(builder, args[2], value_type, array_type.dtype)
        ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [idx], wraparound=False)
        op = "fadd" if isinstance(array_type.dtype, types.Float) else "add"
        builder.atomic_rmw(op, ptr, val, "monotonic")
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@numba.njit(cache=True)
def split_bound(offsets, n, part, parts):
    """The first iteration of part `part` (0 <= part <= parts): the least `i` in [0, n] whose
    preceding iterations weigh at least `part / parts` of the total (`parts` itself gives `n`).
    A binary search over `offsets[i] - offsets[0] + i`, which grows with `i`."""
    if part >= parts:
        return n
    base = np.int64(offsets[0])
    goal = (np.int64(offsets[n]) - base + n) * part // parts
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if np.int64(offsets[mid]) - base + mid < goal:
            lo = mid + 1
        else:
            hi = mid
    return lo
