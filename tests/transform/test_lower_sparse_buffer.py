"""lower_sparse_buffer: Stage II -> Stage III (flat buffers, explicit offsets, layouts)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk


@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    with T.sp_iter([I, J, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = 0.0
        C[i, k] = C[i, k] + A[i, j] * B[j, k]


def stage3(func, **kw):
    return sp.lower_sparse_buffer(sp.lower_sparse_iter(func), **kw)["main"]


def innermost_store(f):
    """The accumulation `C[...] = C[...] + A[...] * B[...]`."""
    return next(s for s in walk(f.body) if isinstance(s, ir.BufferStore) and isinstance(s.value, ir.BinOp))


def test_every_buffer_is_flat_and_offsets_follow_positions():
    """A[vi, vj] becomes A[J_indptr[vi] + vj] (int32: nnz fits the axis's index type);
    C[vi, vk] becomes an int64 row-major offset (m * feat may not fit in int32)."""
    f = stage3(csrmm)
    sp.verify(f)
    assert f.stage == 3
    assert all(isinstance(b, ir.FlatBuffer) for b in f.buffers)
    shapes = {b.name: tuple(str(s) for s in b.shape) for b in f.buffers}
    assert len(shapes["A"]) == 1 and len(shapes["C"]) == 2
    store = innermost_store(f)
    (c_off,) = store.indices
    assert c_off.dtype == "int64"
    loads = [n for n in walk(store.value) if isinstance(n, ir.BufferLoad)]
    a_load = next(n for n in loads if n.buffer.name == "A")
    (a_off,) = a_load.indices
    assert a_off.dtype == "int32"
    assert isinstance(a_off, ir.BinOp) and a_off.op == "+"
    assert isinstance(a_off.a, ir.BufferLoad) and a_off.a.buffer.name == "J_indptr"
    sp.assert_structural_equal(f, sp.from_script(f.script()))


def csrmm_args(A, B, C):
    m, n = A.shape
    return dict(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=B.shape[1], nnz=A.nnz)


def test_column_major_operand_without_changing_the_script():
    f = stage3(csrmm, layouts={"b": sp.Layout((0, 1))})
    B_layout = next(b for b in f.buffers if b.name == "B").layout
    assert B_layout == sp.Layout((0, 1))
    A = sps.random(9, 7, density=0.3, format="csr", dtype=np.float32, random_state=0)
    A.sort_indices()
    B = np.asfortranarray(np.random.default_rng(0).standard_normal((7, 3)).astype(np.float32))
    C = np.full((9, 3), np.nan, np.float32)
    sp.interpret(f, **csrmm_args(A, B, C))
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)
    with pytest.raises(sp.InputError, match="`b` must be column-major"):
        sp.interpret(f, **csrmm_args(A, np.ascontiguousarray(B), C))


@pytest.mark.parametrize(
    "layouts,match",
    [
        ({"zzz": sp.Layout((0, 1))}, "`zzz` is not a buffer parameter"),
        ({"a": sp.Layout((0,))}, "`a` is a sparse buffer"),
        ({"b": sp.Layout((0, 1, 2))}, "rank"),
    ],
)
def test_layout_errors(layouts, match):
    with pytest.raises(sp.SparseTIRError, match=match):
        stage3(csrmm, layouts=layouts)


@T.prim_func
def tiled_copy(x: T.handle, y: T.handle):
    I = T.dense_fixed(16)
    K = T.dense_fixed(256)
    X = T.match_sparse_buffer(x, (I, K), "float32")
    Y = T.match_sparse_buffer(y, (I, K), "float32")
    with T.sp_iter([I, K], "SS", "copy") as [i, k]:
        Y[i, k] = X[i, k] * 2.0


def test_tiled_layout_flattens_through_the_indexing_map():
    """X in XLA's T(8,128) tiling: element (i, k) lives at its tiled offset."""
    layout = sp.Layout((1, 0), tiles=((8, 128),))
    f = stage3(tiled_copy, layouts={"x": layout})
    sp.verify(f)
    logical = np.random.default_rng(0).standard_normal((16, 256)).astype(np.float32)
    flat = np.zeros(layout.size((16, 256)), np.float32)
    for i in range(16):
        for k in range(256):
            flat[layout.linear_index((i, k), (16, 256))] = logical[i, k]
    out = np.full((16, 256), np.nan, np.float32)
    sp.interpret(f, x=flat, y=out)
    np.testing.assert_array_equal(out, logical * 2)


def test_stage1_input_is_refused():
    with pytest.raises(sp.LoweringError, match="lower_sparse_iter first"):
        sp.lower_sparse_buffer(csrmm)


def test_specialize_binds_scalars_at_every_stage():
    """feat=4: the parameter disappears, extents become constants, the result round-trips,
    verifies, and computes the same as the generic function."""
    A = sps.random(9, 7, density=0.3, format="csr", dtype=np.float32, random_state=1)
    A.sort_indices()
    B = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    for f in (csrmm, sp.lower_sparse_iter(csrmm)["main"], stage3(csrmm)):
        g = f.specialize({"feat": 4})
        assert "feat" not in [p.name for p in g.params]
        sp.verify(g)
        sp.assert_structural_equal(g, sp.from_script(g.script()))
        assert "feat" not in g.script()
        args = csrmm_args(A, B, np.full((9, 4), np.nan, np.float32))
        del args["feat"]
        sp.interpret(g, **args)
        np.testing.assert_allclose(args["c"], A @ B, rtol=1e-5, atol=1e-6)
    with pytest.raises(sp.SparseTIRError, match="not a parameter"):
        csrmm.specialize({"zzz": 1})
    with pytest.raises(sp.SparseTIRError, match="handle"):
        csrmm.specialize({"a": 1})
    with pytest.raises(sp.SparseTIRError, match="does not fit"):
        csrmm.specialize({"feat": 2**40})
