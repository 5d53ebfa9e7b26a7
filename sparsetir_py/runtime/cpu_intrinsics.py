"""Numba helpers that generated CPU kernels import.

`atomic_add(array, index, value)` adds `value` to `array[index]` with LLVM's `atomicrmw`
(monotonic ordering: atomic, no fence), so concurrent `prange` iterations may add to the same
element. Integer and float arrays (LLVM >= 9 has `fadd`); no bounds check.

`split_bound(offsets, n, part, parts)` is where part `part` of `parts` starts when iterations
`0..n` are split into contiguous ranges of equal weight, iteration `i` weighing
`offsets[i + 1] - offsets[i] + 1` (a loop annotated `split_by`).

`ctz(x)` counts the trailing zero bits of a nonzero integer (`llvm.cttz`, Numba's
`trailing_zeros`): the next set bit of a bitmap word.

`set_chunksize(n)` is Numba's `set_parallel_chunksize(n)` (the chunks in which this thread's next
`prange` hands out its iterations), returning the size it replaces; unlike Numba's own, it leaves
the kernel cacheable (below).

`prefetch(array, index)` asks for the cache line of `array[index]` (`llvm.prefetch`: a read, kept
in every cache level); it reads nothing, so an index past the array only wastes the hint.

`stack_zeros(size, dtype)` is a zero-filled 1-D array of a constant `size` on the stack (a
`local` scratch buffer of constant size: a register tile that LLVM keeps in registers, where
`np.zeros` would allocate on the heap, and LLVM could not tell that it aliases no argument).
"""

from __future__ import annotations

import llvmlite.ir as llvm_ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros as ctz  # noqa: F401 (generated code imports it)
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


@intrinsic
def prefetch(typingctx, array, index):
    """Prefetch the cache line of `array[index]` (1-D arrays) for reading: the hardware fetches it
    while the loop goes on, where a gather from memory would otherwise wait for it."""
    if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        array_type, index_type = sig.args
        ary = context.make_array(array_type)(context, builder, args[0])
        idx = context.cast(builder, args[1], index_type, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [idx], wraparound=False)
        # One declaration serves every element type: a byte pointer (a kernel may prefetch an
        # int32 and a float32 array; with typed pointers each would otherwise clash with the first).
        ptr = builder.bitcast(ptr, llvm_ir.IntType(8).as_pointer())
        i32 = llvm_ir.IntType(32)
        fnty = llvm_ir.FunctionType(llvm_ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, highest locality, data cache
        return context.get_dummy_value()

    return types.void(array, index), codegen


@intrinsic
def set_chunksize(typingctx, n):
    """`numba.set_parallel_chunksize(n)` in a kernel, returning the previous size: a call of the
    threading layer's `get_parallel_chunksize` / `set_parallel_chunksize` by symbol name, as
    Numba's own `prange` lowering makes them (resolved when a cached kernel loads). Numba's
    `set_parallel_chunksize` calls them through a ctypes pointer, a dynamic global: a kernel that
    uses it cannot be cached and compiles again in every process (a decomposed SDDMM: 20 s)."""
    if not isinstance(n, types.Integer):
        return None
    from numba.np.ufunc.parallel import _launch_threads

    _launch_threads()  # registers the threading layer's symbols

    def codegen(context, builder, sig, args):
        uintp = context.get_value_type(types.uintp)
        get = cgutils.get_or_insert_function(builder.module, llvm_ir.FunctionType(uintp, []), "get_parallel_chunksize")
        set_ = cgutils.get_or_insert_function(
            builder.module, llvm_ir.FunctionType(llvm_ir.VoidType(), [uintp]), "set_parallel_chunksize"
        )
        previous = builder.call(get, [])
        builder.call(set_, [context.cast(builder, args[0], sig.args[0], types.uintp)])
        return previous

    return types.uintp(n), codegen


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


@intrinsic
def stack_zeros(typingctx, size, dtype):
    """A zero-filled C-contiguous 1-D array of `size` (a constant, at most `codegen.cpu.STACK_BYTES`) items
    of `dtype` (a numpy scalar type such as `np.float32`), on the stack: its memory is reserved
    once per call of the function (in its entry block) and zeroed where this runs."""
    if not isinstance(size, types.IntegerLiteral) or not isinstance(getattr(dtype, "dtype", None), types.Number):
        return None
    from ..codegen.cpu import STACK_BYTES

    n = size.literal_value
    item = dtype.dtype
    array_type = types.Array(item, 1, "C")
    if n < 1 or n * np.dtype(str(item)).itemsize > STACK_BYTES:
        return None

    def codegen(context, builder, sig, args):
        from numba.np.arrayobj import populate_array

        value_type = context.get_value_type(item)
        ptr = cgutils.alloca_once(builder, value_type, size=n)
        itemsize = context.get_abi_sizeof(value_type)
        cgutils.memset(builder, ptr, context.get_constant(types.intp, n * itemsize), 0)
        ary = context.make_array(array_type)(context, builder)
        intp = context.get_value_type(types.intp)
        populate_array(
            ary,
            data=ptr,
            shape=cgutils.pack_array(builder, [intp(n)]),
            strides=cgutils.pack_array(builder, [intp(itemsize)]),
            itemsize=intp(itemsize),
            meminfo=None,
        )
        return ary._getvalue()

    return array_type(size, dtype), codegen
