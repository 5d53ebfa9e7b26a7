"""Data types are strings, as in TVM: "int32", "int64", "float32", "float64", "bool", "handle"."""

from __future__ import annotations

import numpy as np

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "float32", "float64")
INDEX_DTYPES = ("int32", "int64")
SCALAR_DTYPES = (*INT_DTYPES, *FLOAT_DTYPES, "bool")
ALL_DTYPES = (*SCALAR_DTYPES, "handle", "void")


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def bits(dtype: str) -> int:
    return np.dtype(dtype).itemsize * 8


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic operation on `a` and `b` (C-like, never narrowing)."""
    if a == b:
        return a
    if is_float(a) or is_float(b):
        floats = [d for d in (a, b) if is_float(d)]
        return max(floats, key=bits)
    if is_bool(a):
        return b
    if is_bool(b):
        return a
    return str(np.promote_types(a, b))
