"""Intrinsic functions that `Call` may name: their arity and result dtype.

Passes and backends add entries (binary search, warp shuffles) with `register_intrinsic`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Intrinsic:
    name: str
    nargs: int | None  # None: variadic
    result: str  # "same" (dtype of the first argument), "argN" (of argument N), "bool", "void" or a dtype
    buffer_args: tuple[int, ...] = ()  # positions of arguments that are buffers, not expressions


INTRINSICS: dict[str, Intrinsic] = {}


def register_intrinsic(
    name: str, nargs: int | None, result: str = "same", buffer_args: tuple[int, ...] = ()
) -> Intrinsic:
    intrin = Intrinsic(name, nargs, result, buffer_args)
    INTRINSICS[name] = intrin
    return intrin


for _name in ("exp", "exp2", "log", "log2", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "erf"):
    register_intrinsic(_name, 1)
for _name in ("sin", "cos", "abs", "floor", "ceil", "round", "trunc"):
    register_intrinsic(_name, 1)
# Bitwise operators on integers (TVM's T.bitwise_and / bitwise_or / shift_left / shift_right),
# and ctz(x): the count of x's trailing zero bits, for a nonzero x (a bitmap's next set bit).
for _name in ("bitwise_and", "bitwise_or", "shift_left", "shift_right"):
    register_intrinsic(_name, 2)
register_intrinsic("ctz", 1)
register_intrinsic("isnan", 1, "bool")
register_intrinsic("isinf", 1, "bool")
register_intrinsic("pow", 2)
register_intrinsic("fmod", 2)
register_intrinsic("syncthreads", 0, "void")
register_intrinsic("syncwarp", 0, "void")
# shfl_down_sync(mask, value, delta): CUDA's __shfl_down_sync, `value` of lane `lane + delta` of the
# warp (its own past the warp); tensorize's warp_sum_32 emits it, codegen/cuda_warp.py renders it.
register_intrinsic("shfl_down_sync", 3, "arg1")
# lower_bound(buf, lo, hi, value): the first position p in [lo, hi) of buf's storage (flat, in
# storage order) with buf[p] >= value, or hi. Coordinate lookups and fused-axis row recovery.
register_intrinsic("lower_bound", 4, "arg1", buffer_args=(0,))
# linear_find(buf, lo, hi, value): the first position p in [lo, hi) with buf[p] == value, or hi:
# coordinate lookups in a level declared unsorted (`sorted=False`), where a binary search is wrong.
register_intrinsic("linear_find", 4, "arg1", buffer_args=(0,))
# sort_range(buf, lo, hi): sorts buf[lo:hi] in place (ascending) and gives hi: the columns an
# assembled output row collected in a workspace, in the order of discovery (sparsetir_py.coiteration).
register_intrinsic("sort_range", 3, "arg2", buffer_args=(0,))
# prefetch(buf[offset]): a hint that the element will be read soon (`llvm.prefetch` on the CPU,
# nothing on CUDA); it reads nothing and changes nothing. `sch.prefetch` marks a loop and the
# Stage III pass `inject_prefetch` emits these; its one argument is a load, whose address it names.
register_intrinsic("prefetch", 1, "void")


def result_dtype(name: str, arg_dtypes: list[str]) -> str:
    rule = INTRINSICS[name].result
    if rule == "same":
        return arg_dtypes[0]
    if rule.startswith("arg"):
        return arg_dtypes[int(rule[3:])]
    return rule
