"""Hand-written Stage III kernels for the code generator's tests, with inputs and references.

Each script follows the conventions `lower_sparse_buffer` produces: `func.attrs["stage"] == 3`,
flat buffers matched to the handles (values `(nnz,)`, dense operands `(rows, feat)` with a
layout), every access one flat offset. Every kernel comes in two schedules of the same
computation: `target="cpu"` marks the outer loop `parallel` and the inner "thread" loop
`serial`; `target="cuda"` binds them to `blockIdx.x`/`threadIdx.x`.

`CASES` pairs each kernel with `make_args(A, rng, idtype, dtype, feat) -> (kwargs, outputs)`
(outputs start as NaN, or zero where the kernel accumulates) and `reference(A, kwargs)`, which
recomputes the outputs with numpy/scipy in float64, independently of the IR.

Constructs covered: parallel/blockIdx row loops and flat offsets `indptr[i] + j` (csrmm), a
column-major dense operand `j + k * n` (csrmm_colmajor), a block with init, a reduction iterator
and a predicate, `T.lower_bound` and an `Allocate` of local scope (sddmm), atomic adds of floats
and ints and a cast (colsum), a block's local `alloc_buffer`, a lazy Select guarding
out-of-range reads and a short-circuit `and` (lookup), intrinsics, floor division and modulo of
negative numbers (ewise), shared memory, a barrier and sibling thread loops of different extents
(rowsum), two-dimensional grids and blocks (dense_add_2d).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse

import sparsetir_py as sp
from sparsetir_py.runtime.build import build

TOLERANCES = {"float32": {"rtol": 2e-5, "atol": 2e-5}, "float64": {"rtol": 1e-11, "atol": 1e-11}}
HEADER = "from sparsetir_py import script as T\n\n"


def loops(target: str) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """(outer, inner) loop spellings: parallel/serial on the CPU, blockIdx.x/threadIdx.x on CUDA."""
    if target == "cpu":
        return (lambda ext: f"T.parallel({ext})"), (lambda ext: f"T.serial({ext})")
    return (
        lambda ext: f'T.thread_binding({ext}, thread="blockIdx.x")',
        lambda ext: f'T.thread_binding({ext}, thread="threadIdx.x")',
    )


def _parse(text: str) -> sp.PrimFunc:
    func = sp.from_script(HEADER + text)
    sp.verify(func)
    return func


# ----------------------------------------------------------------------------------------------
# Scripts
# ----------------------------------------------------------------------------------------------


def csrmm_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32", layout: str = "row") -> str:
    rows, threads = loops(target)
    b_layout = ", layout=T.layout((0, 1))" if layout == "col" else ""
    b_offset = (
        "J_indices[J_indptr[vi] + vj] * feat + vk" if layout == "row" else "J_indices[J_indptr[vi] + vj] + vk * n"
    )
    name = "csrmm" if layout == "row" else "csrmm_colmajor"
    return f'''
@T.prim_func
def {name}(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.{idtype}, n: T.{idtype}, feat: T.{idtype}, nnz: T.{idtype}):
    T.func_attr({{"stage": 3}})
    I = T.dense_fixed(m, "{idtype}")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "{idtype}")
    A = T.match_buffer(a, (nnz,), "{dtype}")
    B = T.match_buffer(b, (n, feat), "{dtype}"{b_layout})
    C = T.match_buffer(c, (m, feat), "{dtype}")
    J_indptr = T.match_buffer(indptr, (m + 1,), "{idtype}")
    J_indices = T.match_buffer(indices, (nnz,), "{idtype}")
    for i in {rows("m")}:
        with T.block("csrmm0"):
            vi = T.axis.spatial(m, i)
            T.reads()
            T.writes()
            for k in {threads("feat")}:
                if J_indptr[vi + 1] - J_indptr[vi] == 0:
                    C[vi * feat + k] = T.{dtype}(0)
                for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    with T.block("csrmm1"):
                        vk = T.axis.spatial(feat, k)
                        vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
                        T.reads()
                        T.writes()
                        with T.init():
                            C[vi * feat + vk] = T.{dtype}(0)
                        C[vi * feat + vk] = C[vi * feat + vk] + A[J_indptr[vi] + vj] * B[{b_offset}]
'''


def sddmm_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> str:
    rows, threads = loops(target)
    return f'''
@T.prim_func
def sddmm(a: T.handle, x: T.handle, y: T.handle, out: T.handle, indptr: T.handle, indices: T.handle,
          m: T.{idtype}, n: T.{idtype}, feat: T.{idtype}, nnz: T.{idtype}):
    T.func_attr({{"stage": 3}})
    I = T.dense_fixed(m, "{idtype}")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "{idtype}")
    A = T.match_buffer(a, (nnz,), "{dtype}")
    X = T.match_buffer(x, (m, feat), "{dtype}")
    Y = T.match_buffer(y, (n, feat), "{dtype}")
    OUT = T.match_buffer(out, (nnz,), "{dtype}")
    J_indptr = T.match_buffer(indptr, (m + 1,), "{idtype}")
    J_indices = T.match_buffer(indices, (nnz,), "{idtype}")
    for po in {rows("(nnz + 7) // 8")}:
        for pi in {threads("8")}:
            with T.block("sddmm0"):
                vp = T.axis.spatial(nnz, po * 8 + pi)
                T.where(po * 8 + pi < nnz)
                T.reads()
                T.writes()
                row = T.allocate((1,), "{idtype}", "local")
                row[0] = T.lower_bound(J_indptr, T.{idtype}(0), m + 1, vp + 1) - 1
                for k in T.serial(feat):
                    with T.block("sddmm1"):
                        vk = T.axis.reduce(feat, k)
                        T.reads()
                        T.writes()
                        with T.init():
                            OUT[vp] = T.{dtype}(0)
                        OUT[vp] = OUT[vp] + X[row[0] * feat + vk] * Y[J_indices[vp] * feat + vk]
                OUT[vp] = OUT[vp] * A[vp]
'''


def colsum_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> str:
    rows, _ = loops(target)
    return f'''
@T.prim_func
def colsum(a: T.handle, s: T.handle, cnt: T.handle, deg: T.handle, indptr: T.handle, indices: T.handle,
           m: T.{idtype}, n: T.{idtype}, nnz: T.{idtype}):
    T.func_attr({{"stage": 3}})
    I = T.dense_fixed(m, "{idtype}")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "{idtype}")
    A = T.match_buffer(a, (nnz,), "{dtype}")
    S = T.match_buffer(s, (n,), "{dtype}")
    CNT = T.match_buffer(cnt, (n,), "int32")
    DEG = T.match_buffer(deg, (m,), "{dtype}")
    J_indptr = T.match_buffer(indptr, (m + 1,), "{idtype}")
    J_indices = T.match_buffer(indices, (nnz,), "{idtype}")
    for i in {rows("m")}:
        DEG[i] = T.cast(J_indptr[i + 1] - J_indptr[i], "{dtype}")
        for j in T.serial(J_indptr[i + 1] - J_indptr[i]):
            T.atomic_add(S[J_indices[J_indptr[i] + j]], A[J_indptr[i] + j])
            T.atomic_add(CNT[J_indices[J_indptr[i] + j]], 1)
'''


def lookup_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> str:
    rows, _ = loops(target)
    return f'''
@T.prim_func
def lookup(a: T.handle, q: T.handle, out: T.handle, indptr: T.handle, indices: T.handle,
           m: T.{idtype}, n: T.{idtype}, nnz: T.{idtype}):
    T.func_attr({{"stage": 3}})
    I = T.dense_fixed(m, "{idtype}")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "{idtype}")
    A = T.match_buffer(a, (nnz,), "{dtype}")
    Q = T.match_buffer(q, (m,), "{idtype}")
    OUT = T.match_buffer(out, (m,), "{dtype}")
    J_indptr = T.match_buffer(indptr, (m + 1,), "{idtype}")
    J_indices = T.match_buffer(indices, (nnz,), "{idtype}")
    for i in {rows("m")}:
        with T.block("lookup0"):
            vi = T.axis.spatial(m, i)
            T.reads()
            T.writes()
            pos = T.alloc_buffer((1,), "{idtype}", scope="local")
            pos[0] = T.lower_bound(J_indices, J_indptr[vi], J_indptr[vi + 1], Q[vi])
            OUT[vi] = T.if_then_else(
                pos[0] < J_indptr[vi + 1] and J_indices[pos[0]] == Q[vi], A[pos[0]], T.{dtype}(-1)
            )
'''


def ewise_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> str:
    rows, _ = loops(target)
    return f'''
@T.prim_func
def ewise(a: T.handle, out: T.handle, out2: T.handle, iout: T.handle, indptr: T.handle, indices: T.handle,
          m: T.{idtype}, n: T.{idtype}, nnz: T.{idtype}):
    T.func_attr({{"stage": 3}})
    I = T.dense_fixed(m, "{idtype}")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "{idtype}")
    A = T.match_buffer(a, (nnz,), "{dtype}")
    OUT = T.match_buffer(out, (nnz,), "{dtype}")
    OUT2 = T.match_buffer(out2, (nnz,), "{dtype}")
    IOUT = T.match_buffer(iout, (nnz,), "{idtype}")
    J_indptr = T.match_buffer(indptr, (m + 1,), "{idtype}")
    J_indices = T.match_buffer(indices, (nnz,), "{idtype}")
    for i in {rows("m")}:
        for j in T.serial(J_indptr[i + 1] - J_indptr[i]):
            OUT[J_indptr[i] + j] = T.if_then_else(
                A[J_indptr[i] + j] > T.{dtype}(0),
                T.sqrt(A[J_indptr[i] + j]) + T.exp(A[J_indptr[i] + j]) * T.cast(i, "{dtype}"),
                T.sigmoid(A[J_indptr[i] + j]) - T.floor(A[J_indptr[i] + j] * T.{dtype}(3))
                + T.max(A[J_indptr[i] + j], T.{dtype}(-0.25)),
            )
            OUT2[J_indptr[i] + j] = (
                T.round(A[J_indptr[i] + j] * T.{dtype}(3)) + T.trunc(A[J_indptr[i] + j] * T.{dtype}(3))
                + T.ceil(A[J_indptr[i] + j] * T.{dtype}(3)) + T.abs(A[J_indptr[i] + j])
                + T.tanh(A[J_indptr[i] + j]) + T.rsqrt(T.abs(A[J_indptr[i] + j]) + T.{dtype}(1))
                + T.exp2(A[J_indptr[i] + j]) + T.log1p(T.abs(A[J_indptr[i] + j])) - -A[J_indptr[i] + j]
            )
            IOUT[J_indptr[i] + j] = (
                (J_indices[J_indptr[i] + j] - 3) // 2 * 100 + (J_indices[J_indptr[i] + j] - 5) % 3 * 10
                + T.min(j, 2) + T.max(-j, -1)
            )
'''


def rowsum_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> str:
    rows, threads = loops(target)
    return f'''
@T.prim_func
def rowsum(a: T.handle, s: T.handle, indptr: T.handle, indices: T.handle,
           m: T.{idtype}, n: T.{idtype}, nnz: T.{idtype}):
    T.func_attr({{"stage": 3}})
    I = T.dense_fixed(m, "{idtype}")
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "{idtype}")
    A = T.match_buffer(a, (nnz,), "{dtype}")
    S = T.match_buffer(s, (m,), "{dtype}")
    J_indptr = T.match_buffer(indptr, (m + 1,), "{idtype}")
    J_indices = T.match_buffer(indices, (nnz,), "{idtype}")
    for i in {rows("m")}:
        with T.block("rowsum0"):
            vi = T.axis.spatial(m, i)
            T.reads()
            T.writes()
            partial = T.alloc_buffer((4,), "{dtype}", scope="shared")
            for t in {threads("4")}:
                partial[t] = T.{dtype}(0)
                for j in T.serial((J_indptr[vi + 1] - J_indptr[vi] + 3 - t) // 4):
                    partial[t] = partial[t] + A[J_indptr[vi] + t + j * 4]
            T.syncthreads()
            for t0 in {threads("1")}:
                S[vi] = partial[0] + partial[1] + partial[2] + partial[3]
'''


def dense_add_2d_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> str:
    if target == "cpu":
        bx, by, tx, ty = "T.parallel", "T.serial", "T.serial", "T.vectorized"
        tag = {k: "" for k in ("bx", "by", "tx", "ty")}
    else:
        bx = by = tx = ty = "T.thread_binding"
        tag = {
            "bx": ', thread="blockIdx.x"',
            "by": ', thread="blockIdx.y"',
            "tx": ', thread="threadIdx.x"',
            "ty": ', thread="threadIdx.y"',
        }
    return f'''
@T.prim_func
def dense_add_2d(a: T.handle, b: T.handle, c: T.handle, m: T.{idtype}, n: T.{idtype}):
    T.func_attr({{"stage": 3}})
    A = T.match_buffer(a, (m, n), "{dtype}")
    B = T.match_buffer(b, (m, n), "{dtype}", layout=T.layout((0, 1)))
    C = T.match_buffer(c, (m, n), "{dtype}")
    for io in {bx}((m + 1) // 2{tag["bx"]}):
        for jo in {by}((n + 2) // 3{tag["by"]}):
            for ii in {tx}(2{tag["tx"]}):
                for ji in {ty}(3{tag["ty"]}):
                    if io * 2 + ii < m and jo * 3 + ji < n:
                        C[(io * 2 + ii) * n + jo * 3 + ji] = (
                            A[(io * 2 + ii) * n + jo * 3 + ji] + B[io * 2 + ii + (jo * 3 + ji) * m]
                        )
'''


# Every math intrinsic, as (script expression of `x`, numpy reference of `x`).
MATH_OPS = (
    ("T.exp({x})", np.exp),
    ("T.exp2({x})", np.exp2),
    ("T.log(T.abs({x}) + T.{dtype}(0.5))", lambda x: np.log(np.abs(x) + 0.5)),
    ("T.log2(T.abs({x}) + T.{dtype}(0.5))", lambda x: np.log2(np.abs(x) + 0.5)),
    ("T.log1p(T.abs({x}))", lambda x: np.log1p(np.abs(x))),
    ("T.sqrt(T.abs({x}))", lambda x: np.sqrt(np.abs(x))),
    ("T.rsqrt(T.abs({x}) + T.{dtype}(1))", lambda x: 1 / np.sqrt(np.abs(x) + 1)),
    ("T.tanh({x})", np.tanh),
    ("T.sigmoid({x})", lambda x: 1 / (1 + np.exp(-x))),
    ("T.erf({x})", lambda x: __import__("scipy.special").special.erf(x)),
    ("T.sin({x})", np.sin),
    ("T.cos({x})", np.cos),
    ("T.abs({x})", np.abs),
    ("T.floor({x} * T.{dtype}(3))", lambda x: np.floor(x * 3)),
    ("T.ceil({x} * T.{dtype}(3))", lambda x: np.ceil(x * 3)),
    ("T.round({x} * T.{dtype}(3))", lambda x: np.rint(x * 3)),
    ("T.trunc({x} * T.{dtype}(3))", lambda x: np.trunc(x * 3)),
    ('T.cast(T.isnan({x}), "{dtype}")', lambda x: np.isnan(x).astype(float)),
    ('T.cast(T.isinf({x}), "{dtype}")', lambda x: np.isinf(x).astype(float)),
    ("T.pow(T.abs({x}), T.{dtype}(1.5))", lambda x: np.abs(x) ** 1.5),
    ("T.fmod({x}, T.{dtype}(0.3))", lambda x: np.fmod(x, 0.3)),
    ("T.min({x}, T.{dtype}(0.25))", lambda x: np.minimum(x, 0.25)),
    ("T.max({x}, T.{dtype}(-0.25))", lambda x: np.maximum(x, -0.25)),
)


def math_ops_script(target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> str:
    rows, _ = loops(target)
    body = "\n".join(
        f"        O[{k} * n + i] = {expr.format(x='X[i]', dtype=dtype)}" for k, (expr, _) in enumerate(MATH_OPS)
    )
    return f'''
@T.prim_func
def math_ops(x: T.handle, o: T.handle, n: T.{idtype}):
    T.func_attr({{"stage": 3}})
    X = T.match_buffer(x, (n,), "{dtype}")
    O = T.match_buffer(o, ({len(MATH_OPS)}, n), "{dtype}")
    for i in {rows("n")}:
{body}
'''


# ----------------------------------------------------------------------------------------------
# Arguments and references
# ----------------------------------------------------------------------------------------------


def _idx(array, idtype: str) -> np.ndarray:
    return np.array(array, dtype=idtype, order="C", copy=True)


def _rand(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def _nan(shape, dtype: str) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def _row_ids(A) -> np.ndarray:
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


def _structure(A, idtype: str) -> dict:
    m, n = A.shape
    return {"indptr": _idx(A.indptr, idtype), "indices": _idx(A.indices, idtype), "m": m, "n": n, "nnz": A.nnz}


def _csrmm_args(A, rng, idtype, dtype, feat):
    m, n = A.shape
    kwargs = {"a": A.data.copy(), "b": _rand(rng, (n, feat), dtype), "c": _nan((m, feat), dtype), "feat": feat}
    return {**kwargs, **_structure(A, idtype)}, ("c",)


def _csrmm_ref(A, kw):
    A64 = scipy.sparse.csr_matrix((A.data.astype(np.float64), A.indices, A.indptr), shape=A.shape)
    return {"c": A64 @ kw["b"].astype(np.float64)}


def _csrmm_colmajor_args(A, rng, idtype, dtype, feat):
    kwargs, outputs = _csrmm_args(A, rng, idtype, dtype, feat)
    kwargs["b"] = np.asfortranarray(kwargs["b"])
    return kwargs, outputs


def _sddmm_args(A, rng, idtype, dtype, feat):
    m, n = A.shape
    kwargs = {
        "a": A.data.copy(),
        "x": _rand(rng, (m, feat), dtype),
        "y": _rand(rng, (n, feat), dtype),
        "out": _nan((A.nnz,), dtype),
        "feat": feat,
    }
    return {**kwargs, **_structure(A, idtype)}, ("out",)


def _sddmm_ref(A, kw):
    rows, cols = _row_ids(A), A.indices
    dots = np.einsum("pk,pk->p", kw["x"][rows].astype(np.float64), kw["y"][cols].astype(np.float64))
    return {"out": dots * A.data.astype(np.float64)}


def _colsum_args(A, rng, idtype, dtype, feat):
    m, n = A.shape
    kwargs = {
        "a": A.data.copy(),
        "s": np.zeros(n, dtype=dtype),
        "cnt": np.zeros(n, dtype=np.int32),
        "deg": _nan((m,), dtype),
    }
    return {**kwargs, **_structure(A, idtype)}, ("s", "cnt", "deg")


def _colsum_ref(A, kw):
    n = A.shape[1]
    return {
        "s": np.bincount(A.indices, weights=A.data.astype(np.float64), minlength=n),
        "cnt": np.bincount(A.indices, minlength=n),
        "deg": np.diff(A.indptr).astype(np.float64),
    }


def _lookup_args(A, rng, idtype, dtype, feat):
    m, n = A.shape
    q = rng.integers(0, max(n, 1), size=m)
    # Half of the queries hit a stored column; the last row asks past its last entry, so a
    # search that ends at nnz must not read A[nnz] or indices[nnz].
    for r in range(m):
        lo, hi = A.indptr[r], A.indptr[r + 1]
        if hi > lo and rng.random() < 0.5:
            q[r] = A.indices[rng.integers(lo, hi)]
    if m:
        q[m - 1] = n - 1 if A.indptr[m] == A.indptr[m - 1] or A.indices[A.indptr[m] - 1] != n - 1 else q[m - 1]
    kwargs = {"a": A.data.copy(), "q": _idx(q, idtype), "out": _nan((m,), dtype)}
    return {**kwargs, **_structure(A, idtype)}, ("out",)


def _lookup_ref(A, kw):
    out = np.full(A.shape[0], -1.0)
    for r, col in enumerate(kw["q"]):
        lo, hi = A.indptr[r], A.indptr[r + 1]
        hit = np.flatnonzero(A.indices[lo:hi] == col)
        if hit.size:
            out[r] = A.data[lo + hit[0]]
    return {"out": out}


def _ewise_args(A, rng, idtype, dtype, feat):
    kwargs = {
        "a": A.data.copy(),
        "out": _nan((A.nnz,), dtype),
        "out2": _nan((A.nnz,), dtype),
        "iout": np.full(A.nnz, -999, dtype=idtype),
    }
    return {**kwargs, **_structure(A, idtype)}, ("out", "out2", "iout")


def _ewise_ref(A, kw):
    a = A.data.astype(np.float64)
    rows = _row_ids(A).astype(np.float64)
    j = np.arange(A.nnz) - np.repeat(A.indptr[:-1], np.diff(A.indptr))
    cols = A.indices.astype(np.int64)
    with np.errstate(invalid="ignore"):
        positive = np.sqrt(np.abs(a)) + np.exp(a) * rows
    negative = 1 / (1 + np.exp(-a)) - np.floor(a * 3) + np.maximum(a, -0.25)
    out2 = (
        np.rint(a * 3) + np.trunc(a * 3) + np.ceil(a * 3) + np.abs(a) + np.tanh(a)
        + 1 / np.sqrt(np.abs(a) + 1) + np.exp2(a) + np.log1p(np.abs(a)) + a
    )  # fmt: skip
    iout = np.floor_divide(cols - 3, 2) * 100 + np.mod(cols - 5, 3) * 10 + np.minimum(j, 2) + np.maximum(-j, -1)
    return {"out": np.where(a > 0, positive, negative), "out2": out2, "iout": iout}


def _rowsum_args(A, rng, idtype, dtype, feat):
    kwargs = {"a": A.data.copy(), "s": _nan((A.shape[0],), dtype)}
    return {**kwargs, **_structure(A, idtype)}, ("s",)


def _rowsum_ref(A, kw):
    return {"s": np.add.reduceat(np.append(A.data.astype(np.float64), 0), A.indptr[:-1]) * (np.diff(A.indptr) > 0)}


def _dense_add_args(A, rng, idtype, dtype, feat):
    m, n = A.shape
    kwargs = {
        "a": _rand(rng, (m, n), dtype),
        "b": np.asfortranarray(_rand(rng, (m, n), dtype)),
        "c": _nan((m, n), dtype),
        "m": m,
        "n": n,
    }
    return kwargs, ("c",)


def _dense_add_ref(A, kw):
    return {"c": kw["a"].astype(np.float64) + kw["b"].astype(np.float64)}


def _math_args(A, rng, idtype, dtype, feat):
    x = np.concatenate([[np.nan, np.inf, -np.inf, 0.0, -0.5, 0.5], rng.uniform(-2, 2, A.nnz)]).astype(dtype)
    return {"x": x, "o": _nan((len(MATH_OPS), x.size), dtype), "n": x.size}, ("o",)


def _math_ref(A, kw):
    x = kw["x"].astype(np.float64)
    with np.errstate(all="ignore"):
        return {"o": np.stack([ref(x) for _, ref in MATH_OPS])}


@dataclass(frozen=True)
class Case:
    name: str
    script: Callable[..., str]
    make_args: Callable
    reference: Callable

    def func(self, target: str = "cpu", idtype: str = "int32", dtype: str = "float32") -> sp.PrimFunc:
        return _parse(self.script(target, idtype, dtype))


def _colmajor(target="cpu", idtype="int32", dtype="float32"):
    return csrmm_script(target, idtype, dtype, layout="col")


CASES = (
    Case("csrmm", csrmm_script, _csrmm_args, _csrmm_ref),
    Case("csrmm_colmajor", _colmajor, _csrmm_colmajor_args, _csrmm_ref),
    Case("sddmm", sddmm_script, _sddmm_args, _sddmm_ref),
    Case("colsum", colsum_script, _colsum_args, _colsum_ref),
    Case("lookup", lookup_script, _lookup_args, _lookup_ref),
    Case("ewise", ewise_script, _ewise_args, _ewise_ref),
    Case("rowsum", rowsum_script, _rowsum_args, _rowsum_ref),
    Case("dense_add_2d", dense_add_2d_script, _dense_add_args, _dense_add_ref),
    Case("math_ops", math_ops_script, _math_args, _math_ref),
)
CASES_BY_NAME = {case.name: case for case in CASES}


# ----------------------------------------------------------------------------------------------
# Matrices and the comparison
# ----------------------------------------------------------------------------------------------


def prepare_csr(A, idtype: str = "int32", dtype: str = "float32") -> scipy.sparse.csr_matrix:
    """A canonical CSR copy of `A` (sorted, no duplicates) with the given dtypes (int64 kept)."""
    A = scipy.sparse.csr_matrix(A, copy=True)
    A.sum_duplicates()
    A.sort_indices()
    out = scipy.sparse.csr_matrix((A.data.astype(dtype), A.indices, A.indptr), shape=A.shape)
    out.indices = np.ascontiguousarray(A.indices, dtype=idtype)
    out.indptr = np.ascontiguousarray(A.indptr, dtype=idtype)
    return out


def random_csr(seed: int, m: int, n: int, density: float, idtype="int32", dtype="float32", empty_rows=2):
    """A random CSR matrix with at least `empty_rows` empty rows (the first and one in the middle)."""
    rng = np.random.default_rng(seed)
    A = scipy.sparse.random(m, n, density=density, format="lil", random_state=rng)
    for r in [0, m // 2][:empty_rows]:
        if r < m:
            A.rows[r], A.data[r] = [], []
    return prepare_csr(A, idtype, dtype)


def small_matrices(idtype="int32", dtype="float32") -> dict[str, scipy.sparse.csr_matrix]:
    """Tiny matrices for the CUDA simulator: empty rows, zero nnz, a dense row."""
    dense_row = np.zeros((3, 5))
    dense_row[1] = np.arange(1, 6)
    return {
        "random": random_csr(1, 7, 6, 0.35, idtype, dtype),
        "empty": prepare_csr(scipy.sparse.csr_matrix((4, 3)), idtype, dtype),
        "dense_row": prepare_csr(dense_row, idtype, dtype),
    }


def run_case(kernel, case: Case, A, idtype: str, dtype: str, *, seed: int = 0, feat: int = 4, **call) -> None:
    """Run `kernel` on `A` and compare every output with the numpy reference; inputs must not change."""
    kwargs, outputs = case.make_args(A, np.random.default_rng(seed), idtype, dtype, feat)
    expected = case.reference(A, kwargs)
    inputs = {k: v.copy() for k, v in kwargs.items() if isinstance(v, np.ndarray) and k not in outputs}
    kernel(**kwargs, **call)
    for name in outputs:
        got, want = kwargs[name], expected[name]
        if np.issubdtype(got.dtype, np.integer):
            np.testing.assert_array_equal(got, want, err_msg=f"{case.name}: output {name}")
            continue
        tol = TOLERANCES[str(got.dtype)]
        scale = max(1.0, float(np.abs(want).max(initial=0.0)))
        np.testing.assert_allclose(
            got, want, rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=f"{case.name}: output {name}"
        )
    for name, before in inputs.items():
        np.testing.assert_array_equal(kwargs[name], before, err_msg=f"{case.name} wrote its input {name}")


# ----------------------------------------------------------------------------------------------
# Building, once per process
# ----------------------------------------------------------------------------------------------


@functools.cache
def kernel_cache_dir() -> Path:
    """One cache folder per test process, shared by every test module (so a kernel compiles once)."""
    path = Path(tempfile.mkdtemp(prefix="sparsetir-test-kernels-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def build_case(name: str, target: str = "cpu", idtype: str = "int32", dtype: str = "float32", **options):
    """The kernel of `CASES_BY_NAME[name]`; CPU kernels check bounds, so a stray access raises."""
    if target == "cpu":
        options = {"boundscheck": True, **options}
    func = CASES_BY_NAME[name].func(target, idtype, dtype)
    return build(func, target, cache_dir=kernel_cache_dir(), **options)
