"""Intrinsic functions that `Call` may name: their arity and result dtype.

Passes and backends add entries (binary search, warp shuffles) with `register_intrinsic`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Intrinsic:
    name: str
    nargs: int | None  # None: variadic
    result: str  # "same" (dtype of the first argument), "bool", "void" or a dtype


INTRINSICS: dict[str, Intrinsic] = {}


def register_intrinsic(name: str, nargs: int | None, result: str = "same") -> Intrinsic:
    intrin = Intrinsic(name, nargs, result)
    INTRINSICS[name] = intrin
    return intrin


for _name in ("exp", "exp2", "log", "log2", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "erf"):
    register_intrinsic(_name, 1)
for _name in ("sin", "cos", "abs", "floor", "ceil", "round", "trunc"):
    register_intrinsic(_name, 1)
register_intrinsic("isnan", 1, "bool")
register_intrinsic("isinf", 1, "bool")
register_intrinsic("pow", 2)
register_intrinsic("fmod", 2)
register_intrinsic("syncthreads", 0, "void")
register_intrinsic("syncwarp", 0, "void")


def result_dtype(name: str, arg_dtypes: list[str]) -> str:
    rule = INTRINSICS[name].result
    if rule == "same":
        return arg_dtypes[0]
    return rule
