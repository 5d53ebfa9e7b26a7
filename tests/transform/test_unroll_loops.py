"""`unroll_loops`: `T.unroll` loops of constant extent become copies, and what that enables.

A hand-written Stage III script checks the expansion itself (copies with the loop variable
replaced and folded, fresh names, loops it must leave alone); the SDDMM schedule
`csr_cpu_rows_x4` (nonzeros split by F, the feature loop between, the inner loop unrolled) checks
the passes after it: `promote_accumulators` gives each of the F dot products its own register,
and the compiled kernel equals scipy on rows of every length modulo F, the edge matrices,
int64/float64 and a real graph.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from strategies import rows_of_every_length, split_matrices

import sparsetir_py as sp
from schedules.sddmm import csr_cpu_rows_x4
from sparsetir_py import ir
from sparsetir_py.ir.visit import post_order_rewrite, walk
from sparsetir_py.ops import sddmm_script
from sparsetir_py.transform import compact_buffers, partition_loops, promote_accumulators, unroll_loops
from sparsetir_py.transform.unroll_loops import MAX_UNROLL, fold_integers

# Each row i adds A[i, j] times a constant to OUT[i * 4 + c] for c < 4, in an unrolled loop over c.
SCRIPT = """
from sparsetir_py import script as T

@T.prim_func
def spread(a: T.handle, out: T.handle, m: T.int32, w: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m * 4,), "float32")
    OUT = T.match_buffer(out, (m * 4,), "float32")
    for i in T.serial(m):
        for c in T.unroll(EXTENT):
            with T.block("spread"):
                vi = T.axis.spatial(m, i)
                vc = T.axis.spatial(EXTENT, c)
                T.reads()
                T.writes()
                OUT[vi * 4 + vc] = A[vi * 4 + vc] * T.float32(2) + T.float32(1)
"""


def spread(extent: str = "4") -> sp.PrimFunc:
    return sp.from_script(SCRIPT.replace("EXTENT", extent))


def run_spread(func, m: int = 5) -> np.ndarray:
    a = np.arange(m * 4, dtype=np.float32)
    out = np.full(m * 4, np.nan, np.float32)
    sp.interpret(func, a=a, out=out, m=m, w=0)
    return out


def test_copies_replace_the_loop_with_folded_offsets_and_fresh_names():
    f = spread()
    g = unroll_loops(f)["main"]
    sp.verify(g)
    assert not any(isinstance(n, ir.For) and n.kind == "unrolled" for n in walk(g.body))
    blocks = [n for n in walk(g.body) if isinstance(n, ir.Block) and n.name.startswith("spread")]
    assert [b.name for b in blocks] == ["spread", "spread_u1", "spread_u2", "spread_u3"]
    # Every copy binds its own iterators, and copy c binds vc to the constant c (folded).
    iter_vars = [iv.var for b in blocks for iv in b.iter_vars]
    assert len(set(iter_vars)) == len(iter_vars)
    assert [b.iter_vars[1].value for b in blocks] == [ir.IntImm(c) for c in range(4)]
    np.testing.assert_array_equal(run_spread(g), run_spread(f))
    np.testing.assert_array_equal(run_spread(g), np.arange(20, dtype=np.float32) * 2 + 1)
    # The printed function parses back to the same computation.
    sp.assert_structural_equal(g, sp.from_script(g.script()))


@pytest.mark.parametrize("extent", ["m", str(MAX_UNROLL + 1)])
def test_loops_of_unknown_or_large_extent_stay_loops(extent):
    f = spread(extent)
    g = unroll_loops(f)["main"]
    assert sum(isinstance(n, ir.For) and n.kind == "unrolled" for n in walk(g.body)) == 1
    assert g == f


def test_a_body_that_allocates_stays_a_loop():
    """Each copy would need a buffer of its own: the loop is left to LLVM."""
    f = stage3_x4()
    loop = next(n for n in walk(f.body) if isinstance(n, ir.For) and n.kind == "unrolled")
    scratch = ir.FlatBuffer("scratch", (ir.IntImm(1),), "float32", scope="local")
    allocating = loop.replace(body=ir.Allocate(scratch, loop.body))
    body = post_order_rewrite(f.body, lambda n: allocating if n is loop else n)
    g = unroll_loops(f.replace(body=body))["main"]
    assert any(isinstance(n, ir.For) and n.kind == "unrolled" and n.loop_var == loop.loop_var for n in walk(g.body))


def test_fold_integers():
    x = ir.Var("x", "int32")
    e = (x * ir.IntImm(4) + ir.IntImm(0)) * ir.IntImm(1) + ir.IntImm(2) * ir.IntImm(3)
    assert fold_integers(e) == x * ir.IntImm(4) + ir.IntImm(6)


def stage3_x4(factor: int = 4, feat: int | None = None) -> sp.PrimFunc:
    func = sddmm_script() if feat is None else sddmm_script().specialize({"feat": feat})
    sch = sp.Schedule(sp.lower_sparse_iter(func))
    csr_cpu_rows_x4(sch, factor=factor)
    return compact_buffers(sp.lower_sparse_buffer(sch.mod))["main"]


def test_each_dot_product_gets_a_register_and_results_are_unchanged():
    """After `partition_loops` (as `sp.compile` runs them on the CPU): the full chunks carry no
    guard, so their four accumulations go through four registers."""
    f = partition_loops(unroll_loops(stage3_x4()))["main"]
    g = promote_accumulators(f)["main"]
    sp.verify(g)
    allocated = [n for n in walk(g.body) if isinstance(n, ir.Allocate)]
    registers = [n for n in allocated if re.fullmatch(r"C_acc\d+", n.buffer.name)]
    assert len(registers) == 4 + 1 + 2 + 3  # the full chunk's four dot products, then remainders 1 to 3
    # Each dot product sums X * Y alone; A's value multiplies the sum once, after the loop.
    assert sorted(n.buffer.name for n in allocated if n not in registers) == sorted(
        f"{r.buffer.name}_sum" for r in registers
    )
    # The feature loop of the full chunk touches C only through the registers.
    k_loop = next(n for n in walk(registers[3].body) if isinstance(n, ir.For))
    assert not any(isinstance(n, ir.BufferStore | ir.BufferLoad) and n.buffer.name == "C" for n in walk(k_loop))
    A = rows_of_every_length(4)
    m, n = A.shape
    rng = np.random.default_rng(1)
    X = rng.standard_normal((m, 3)).astype(np.float32)
    Y = rng.standard_normal((n, 3)).astype(np.float32)
    outs = []
    for h in (f, g):
        out = np.full(A.nnz, np.nan, np.float32)
        sp.interpret(h, a=A.data, x=X, y=Y, c=out, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=3, nnz=A.nnz)
        outs.append(out)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[1], A.multiply(X @ Y.T).tocsr().data, rtol=1e-5, atol=1e-5)


# Accumulates into OUT at two offsets in one loop: `vi * 2` and `vi * 2 + 1` provably differ (one
# register each); `vi` and `J[vi]` may be the same element (promotion would be wrong).
TWO_OFFSETS = """
from sparsetir_py import script as T

@T.prim_func
def two(a: T.handle, j: T.handle, out: T.handle, m: T.int32, w: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (w,), "float32")
    J = T.match_buffer(j, (m,), "int32")
    OUT = T.match_buffer(out, (m * 2,), "float32")
    for i in T.serial(m):
        for k in T.serial(w):
            with T.block("two"):
                vi = T.axis.spatial(m, i)
                vk = T.axis.reduce(w, k)
                T.reads()
                T.writes()
                OUT[FIRST] = OUT[FIRST] + A[vk]
                OUT[SECOND] = OUT[SECOND] + A[vk] * T.float32(2)
"""


@pytest.mark.parametrize(
    ("first", "second", "registers"), [("vi * 2", "vi * 2 + 1", 2), ("vi * 2", "vi * 2", 1), ("vi", "J[vi]", 0)]
)
def test_offsets_that_may_meet_are_not_promoted(first, second, registers):
    f = sp.from_script(TWO_OFFSETS.replace("FIRST", first).replace("SECOND", second))
    g = promote_accumulators(f)["main"]
    sp.verify(g)
    allocated = [n.buffer.name for n in walk(g.body) if isinstance(n, ir.Allocate)]
    assert len([name for name in allocated if not name.endswith("_sum")]) == registers
    m, w = 6, 5
    rng = np.random.default_rng(0)
    a = rng.standard_normal(w).astype(np.float32)
    j = rng.integers(0, m, m).astype(np.int32)
    j[0] = 0  # OUT[vi] and OUT[J[vi]] are the same element in row 0
    outs = []
    for h in (f, g):
        out = np.arange(2 * m, dtype=np.float32)
        sp.interpret(h, a=a, j=j, out=out, m=m, w=w)
        outs.append(out)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)


def test_guarded_accumulations_stay_in_memory():
    """Without `partition_loops` the split's guard is on every block: a register would read and
    write C past the end of a row (another row's element, or past the array)."""
    f = unroll_loops(stage3_x4())["main"]
    assert any(isinstance(n, ir.Block) and n.predicate is not None for n in walk(f.body))
    g = promote_accumulators(f)["main"]
    assert not any(isinstance(n, ir.Allocate) and n.buffer.name.startswith("C_acc") for n in walk(g.body))
    A = rows_of_every_length(4)
    m, n = A.shape
    X = np.ones((m, 2), np.float32)
    out = np.full(A.nnz, np.nan, np.float32)
    sp.interpret(g, a=A.data, x=X, y=np.ones((n, 2), np.float32), c=out, indptr=A.indptr, indices=A.indices,
                 m=m, n=n, feat=2, nnz=A.nnz)  # fmt: skip
    np.testing.assert_allclose(out, 2 * A.data, rtol=1e-6)


@pytest.mark.parametrize(
    ("factor", "idtype", "dtype"),
    # A kernel unrolled 8 times compiles in ~25 s: factor 8 with one pair of dtypes, 4 with both.
    [(4, np.int32, np.float32), (4, np.int64, np.float64), (8, np.int64, np.float64)],
)
def test_sddmm_x4_kernel_equals_scipy(factor, idtype, dtype):
    schedule = functools.partial(csr_cpu_rows_x4, factor=factor)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for A in split_matrices(factor, idtype, dtype):
        m, n = A.shape
        for width in (1, 5, 16):
            rng = np.random.default_rng(width)
            X = rng.standard_normal((m, width)).astype(dtype)
            Y = rng.standard_normal((n, width)).astype(dtype)
            got = sp.ops.sddmm(A, X, Y, format="csr", schedule=schedule)
            ref = A.multiply(X @ Y.T).tocsr()
            assert got.dtype == dtype and got.indices.dtype == idtype
            np.testing.assert_allclose(got.toarray(), ref.toarray(), rtol=tol, atol=tol)


def test_sddmm_x4_on_a_real_graph():
    A = sp.data.load_matrix("citeseer")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((A.shape[0], 64)).astype(np.float32)
    Y = rng.standard_normal((A.shape[1], 64)).astype(np.float32)
    ref = A.multiply(X @ Y.T).tocsr()
    for name in ("csr_cpu_rows_x4", "csr_cpu_rows_balanced_x4"):
        got = sp.ops.sddmm(A, X, Y, format="csr", schedule=name)
        np.testing.assert_allclose(got.data, ref.data, rtol=1e-4, atol=1e-4)
