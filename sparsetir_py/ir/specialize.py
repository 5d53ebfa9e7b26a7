"""`PrimFunc.specialize`: bind scalar parameters to constants, as SparseTIR/TVM do.

Loop extents, axis lengths and buffer shapes that used the parameter become constants, so later
passes can prove bounds and the code generators can unroll, vectorise and size scratch memory.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import SparseTIRError
from . import dtype as dt
from .expr import FloatImm, IntImm, Var
from .func import PrimFunc
from .visit import substitute_deep


def specialize(func: PrimFunc, values: Mapping[str | Var, int | float]) -> PrimFunc:
    """`func` with the scalar parameters in `values` replaced by constants and removed."""
    by_name = {p.name: p for p in func.params}
    mapping = {}
    for key, value in values.items():
        param = key if isinstance(key, Var) else by_name.get(key)
        if param is None or param not in func.params:
            raise SparseTIRError(f"specialize: `{key}` is not a parameter of `{func.name}`")
        if param.dtype == "handle":
            raise SparseTIRError(f"specialize: `{param.name}` is a handle; only scalar parameters can be bound")
        if dt.is_int(param.dtype):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise SparseTIRError(f"specialize: `{param.name}` is {param.dtype}, got {value!r}")
            info = np.iinfo(param.dtype)
            if not info.min <= int(value) <= info.max:
                raise SparseTIRError(f"specialize: {value} does not fit `{param.name}` ({param.dtype})")
            mapping[param] = IntImm(int(value), param.dtype)
        else:
            mapping[param] = FloatImm(float(value), param.dtype)
    if not mapping:
        return func
    params = tuple(p for p in func.params if p not in mapping)
    out = substitute_deep(func.replace(params=params), mapping)
    return out
