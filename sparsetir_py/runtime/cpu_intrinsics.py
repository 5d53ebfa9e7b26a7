"""Numba helpers that generated CPU kernels import.

`atomic_add(array, index, value)` adds `value` to `array[index]` with LLVM's `atomicrmw`
(monotonic ordering: atomic, no fence), so concurrent `prange` iterations may add to the same
element. Integer and float arrays (LLVM >= 9 has `fadd`); no bounds check.
"""

from __future__ import annotations

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
