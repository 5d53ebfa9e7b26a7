"""`partition_loops`: full chunks of a split without the split's guard, the partial chunk decided.

The SpMM schedule `csr_cpu_rows_x4` (split the nonzeros by F, features between, `dot_F`
tensorized) is compiled for F = 4, 8, 16 and run on rows of every length modulo F (0 to 2F + 1
nonzeros), the edge matrices, int64/float64 and a real graph, against scipy. The partitioned
Stage III function computes what the unpartitioned one does (interpreter), its full-chunk loop
holds no guard, and a function without such guards is left as it is.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from strategies import rows_of_every_length, split_matrices

import sparsetir_py as sp
from schedules.spmm import csr_cpu_rows, csr_cpu_rows_x4
from sparsetir_py import script as T
from sparsetir_py.ir.expr import Select
from sparsetir_py.ir.stmt import For, IfThenElse
from sparsetir_py.ir.visit import walk
from sparsetir_py.transform import partition_loops


@pytest.mark.parametrize(
    ("factor", "idtype", "dtype"),
    # Each case compiles a kernel unrolled `factor` times (factor 8: 15-25 s of compilation);
    # factor 16 checked nothing factor 8 does not (full chunks, a partial one, widths 1, 5 and 16
    # around the chunk), and the chunking does not depend on the dtypes: factor 8 in one pair.
    [(4, np.int32, np.float32), (8, np.int32, np.float32), (4, np.int64, np.float64)],
)  # fmt: skip
def test_chunked_rows_equal_scipy(factor, idtype, dtype):
    schedule = functools.partial(csr_cpu_rows_x4, factor=factor)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for A in split_matrices(factor, idtype, dtype):
        for width in (1, 5, 16):
            B = np.random.default_rng(width).standard_normal((A.shape[1], width)).astype(dtype)
            np.testing.assert_allclose(sp.ops.spmm(A, B, schedule=schedule), A @ B, rtol=tol, atol=tol)


def test_chunked_rows_on_a_real_graph():
    A = sp.data.load_matrix("citeseer")
    B = np.random.default_rng(0).standard_normal((A.shape[1], 32)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, schedule="csr_cpu_rows_x4"), A @ B, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sp.ops.spmm(A, B, schedule="csr_cpu_rows_balanced_x4"), A @ B, rtol=1e-4, atol=1e-4)


def _stage3(schedule):
    sch = sp.Schedule(sp.lower_sparse_iter(sp.ops.spmm_script()))
    schedule(sch)
    return sp.lower_sparse_buffer(sch.mod)


def test_full_chunks_have_no_guard_and_results_are_unchanged():
    before = _stage3(csr_cpu_rows_x4)["main"]
    after = partition_loops(before)["main"]
    guarded = [n for n in walk(before.body) if isinstance(n, Select)]
    assert len(guarded) == 4  # one per term of the 4-wide sum
    full = next(n for n in walk(after.body) if isinstance(n, For) and n.loop_var.name == "j_outer")
    assert not any(isinstance(n, Select) for n in walk(full.body))
    assert any(isinstance(n, For) and n.loop_var.name == "j_outer_tail" for n in walk(after.body))
    A = rows_of_every_length(4)
    m, n = A.shape
    B = np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32)
    outs = []
    for f in (before, after):
        C = np.full((m, 3), np.nan, np.float32)
        sp.interpret(f, a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=3, nnz=A.nnz)
        outs.append(C)
    np.testing.assert_allclose(outs[0], A @ B, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)


def test_functions_without_split_guards_are_left_alone():
    f = _stage3(csr_cpu_rows)["main"]
    assert partition_loops(f)["main"] is f or partition_loops(f)["main"] == f


# -------------------------------------------------------------------- before / expected
@T.prim_func
def sum_pairs(a: T.handle, s: T.handle, n: T.int32):
    """A sum over `A` two terms at a time (as `dot_2` tensorizes it): `split(j, [None, 2])`
    guards each term with `j_outer * 2 + c < n`."""
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    S = T.match_buffer(s, (1,), "float32")
    for j_outer in range((n + 1) // 2):
        S[0] = S[0] + (
            T.if_then_else(j_outer * 2 < n, A[j_outer * 2], T.float32(0))
            + T.if_then_else(j_outer * 2 + 1 < n, A[j_outer * 2 + 1], T.float32(0))
        )


@T.prim_func
def sum_pairs_partitioned(a: T.handle, s: T.handle, n: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    S = T.match_buffer(s, (1,), "float32")
    for j_outer in T.serial(n // 2):
        S[0] = S[0] + (A[j_outer * 2] + A[j_outer * 2 + 1])
    for j_outer_tail in T.serial(n // 2, n // 2 + ((n + 1) // 2 - n // 2)):
        S[0] = S[0] + (A[j_outer_tail * 2] + T.float32(0))


def test_selects_of_full_chunks_go_and_the_partial_chunk_is_decided():
    """The full pairs add both terms unguarded; the partial pair (one element left) adds the
    first term and the second's `else` value."""
    sp.assert_structural_equal(partition_loops(sum_pairs)["main"], sum_pairs_partitioned)


@T.prim_func
def fill_pairs(a: T.handle, n: T.int32):
    """Two blocks per chunk of two, each predicated on its own element."""
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    for j_outer in range((n + 1) // 2):
        with T.block("even"):
            vo = T.axis.spatial((n + 1) // 2, j_outer)
            T.where(j_outer * 2 < n)
            A[vo * 2] = T.float32(1)
        with T.block("odd"):
            vo = T.axis.spatial((n + 1) // 2, j_outer)
            T.where(j_outer * 2 + 1 < n)
            A[vo * 2 + 1] = T.float32(2)


@T.prim_func
def fill_pairs_partitioned(a: T.handle, n: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    for j_outer in T.serial(n // 2):
        with T.block("even"):
            vo = T.axis.spatial((n + 1) // 2, j_outer)
            A[vo * 2] = T.float32(1)
        with T.block("odd"):
            vo_1 = T.axis.spatial((n + 1) // 2, j_outer)
            A[vo_1 * 2 + 1] = T.float32(2)
    for j_outer_tail in T.serial(n // 2, n // 2 + ((n + 1) // 2 - n // 2)):
        with T.block("even_r1"):
            vo_r1 = T.axis.spatial((n + 1) // 2, j_outer_tail)
            A[vo_r1 * 2] = T.float32(1)


def test_block_predicates_of_full_chunks_go_and_the_partial_chunk_keeps_its_blocks():
    """The full pairs run both blocks without predicates; the partial pair runs a copy of the
    first block (named for its remainder, `_r1`) and drops the second, whose element is past `n`."""
    after = partition_loops(fill_pairs)["main"]
    sp.verify(after)
    sp.assert_structural_equal(after, fill_pairs_partitioned)


@T.prim_func
def sum_tiles(a: T.handle, s: T.handle, n: T.int32):
    """A sum over `A` in tiles of 4 whose inner loop stays a loop (not unrolled): `split(j,
    [None, 4])` guards the body with `j_outer * 4 + j_inner < n`."""
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    S = T.match_buffer(s, (1,), "float32")
    for j_outer in range((n + 3) // 4):
        for j_inner in range(4):
            if j_outer * 4 + j_inner < n:
                S[0] = S[0] + A[j_outer * 4 + j_inner]


def test_full_tiles_of_an_inner_loop_lose_the_guard_and_the_partial_tile_keeps_it():
    """(BSR SpMM's feature tiles.) The full tiles run without the `if`; the partial tile is one
    copy of the loop with its guard, not one copy per remainder; sums equal for every n."""
    after = partition_loops(sum_tiles)["main"]
    sp.verify(after)
    loops = {n.loop_var.name: n for n in walk(after.body) if isinstance(n, For)}
    assert set(loops) == {"j_outer", "j_inner", "j_outer_tail", "j_inner_tail"}
    assert not any(isinstance(n, IfThenElse) for n in walk(loops["j_outer"].body))
    assert sum(isinstance(n, IfThenElse) for n in walk(loops["j_outer_tail"].body)) == 1
    rng = np.random.default_rng(1)
    for n in range(10):
        A = rng.standard_normal(n).astype(np.float32)
        sums = []
        for f in (sum_tiles, after):
            S = np.zeros(1, np.float32)
            sp.interpret(f, a=A, s=S, n=n)
            sums.append(S[0])
        np.testing.assert_allclose(sums, A.sum(), rtol=1e-5, atol=1e-5)


@T.prim_func
def sum_tiles_offset(a: T.handle, s: T.handle, n: T.int32):
    """The guard names another loop of extent 4 than the split's own inner loop: still a tile."""
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    S = T.match_buffer(s, (1,), "float32")
    for j_outer in range((n + 3) // 4):
        for j_inner in range(5):
            if j_outer * 4 + j_inner < n:
                S[0] = S[0] + A[j_outer * 4 + j_inner]


def test_a_guard_on_a_loop_longer_than_the_tile_is_kept():
    """`j_inner` runs to 5, past the tile: `j_outer * 4 + 4 < n` may fail in a full tile."""
    f = partition_loops(sum_tiles_offset)["main"]
    assert f == sum_tiles_offset or f is sum_tiles_offset
