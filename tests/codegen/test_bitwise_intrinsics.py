"""`T.bitwise_and`, `T.bitwise_or`, `T.shift_left`, `T.shift_right` and `T.ctz` (count trailing
zero bits, of a nonzero integer): the compiled CPU kernel, the loop interpreter and numpy agree
on int32 and int64 values, shifts into the sign bit included; the interpreter refuses `T.ctz(0)`."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsetir_py as sp

SCRIPT = """from sparsetir_py import script as T

@T.prim_func
def bits(x: T.handle, s: T.handle, y: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    X = T.match_buffer(x, (n,), "DT")
    S = T.match_buffer(s, (n,), "DT")
    Y = T.match_buffer(y, (n * 5,), "DT")
    for i in T.serial(n):
        with T.block("bits0"):
            vi = T.axis.spatial(n, i)
            Y[vi * 5] = T.bitwise_and(X[vi], S[vi] + DT(12345))
            Y[vi * 5 + 1] = T.bitwise_or(X[vi], T.shift_left(DT(1), S[vi]))
            Y[vi * 5 + 2] = T.shift_right(X[vi], S[vi])
            Y[vi * 5 + 3] = T.ctz(T.bitwise_or(X[vi], T.shift_left(DT(1), S[vi])))
            Y[vi * 5 + 4] = T.shift_left(X[vi], S[vi])
"""


@functools.cache
def kernel(dtype: str):
    func = sp.from_script(SCRIPT.replace("DT", dtype).replace("int64(", "T.int64(").replace("int32(", "T.int32("))
    return func, sp.compile(func, "cpu")


def expected(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    with np.errstate(over="ignore"):
        one = np.left_shift(t(1), s)
        low = x | one
        ctz = np.array([(int(v) & -int(v)).bit_length() - 1 for v in low], x.dtype)
        return np.stack([x & (s + t(12345)), x | one, x >> s, ctz, np.left_shift(x, s)], axis=1).reshape(-1)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@given(data=st.data())
@settings(max_examples=20, deadline=None)
def test_compiled_interpreted_and_numpy_agree(dtype, data):
    info = np.iinfo(dtype)
    bits = info.bits
    n = data.draw(st.integers(1, 6))
    x = np.array(data.draw(st.lists(st.integers(info.min, info.max), min_size=n, max_size=n)), dtype)
    s = np.array(data.draw(st.lists(st.integers(0, bits - 1), min_size=n, max_size=n)), dtype)
    func, compiled = kernel(dtype)
    interpreted, ran = np.zeros(5 * n, dtype), np.zeros(5 * n, dtype)
    sp.interpret(func, x=x, s=s, y=interpreted, n=n)
    compiled(x=x, s=s, y=ran, n=n)
    np.testing.assert_array_equal(interpreted, expected(x, s))
    np.testing.assert_array_equal(ran, interpreted)


def test_the_interpreter_refuses_ctz_of_zero():
    func = sp.from_script("""from sparsetir_py import script as T

@T.prim_func
def zero(y: T.handle):
    T.func_attr({"stage": 2})
    Y = T.match_buffer(y, (1,), "int64")
    with T.block("zero0"):
        Y[0] = T.ctz(Y[0])
""")
    with pytest.raises(sp.InterpretError, match="nonzero"):
        sp.interpret(func, y=np.zeros(1, np.int64))
