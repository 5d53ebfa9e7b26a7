"""Two SparseTIR patterns that are rightly rejected, and what every entry point does with an
ill-formed function.

- SparseTIR's `bmm` declares `X` over `(B, I, IJ)` with `IJ = T.dense_variable(B, ...)`: `IJ`'s
  positions are counted per batch, so the row `I` would be ignored (SparseTIR's own lowering reads
  `X` at `IJ_indptr[b] + j`). Refused where `X` is declared, with the cause and the rewrite; the
  rewrite (`IJ` under `I`) gives the batched products.
- SparseTIR's `rgcn_hetero_forward` initialises `Y[i, fo]` inside an iteration whose spatial
  iterator `r` the write ignores: each relation would zero what the earlier ones accumulated into
  a row they share (SparseTIR's lowering does; the issue saw the interpreter give 11 and a kernel
  10). Refused with the cause and the rewrite; the rewrite (the init as an iteration of its own)
  gives the sum over relations.
- Every public entry point verifies what it is given (TVM verifies well-formedness on entry), at
  every stage, so an ill-formed function never runs anywhere.

The scripts are written here after SparseTIR's patterns, not copied.
"""

from __future__ import annotations

import numpy as np
import pytest

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.ir.verify import BufferAxisOrderError, InitWriteError, WhileLoopError

# ---------------------------------------------------------------------------------------------- bmm
BMM = """
from sparsetir_py import script as T

@T.prim_func
def bmm(x: T.handle, y: T.handle, z: T.handle, indptr_i: T.handle, indptr_j: T.handle, indptr_k: T.handle,
        indptr_ij: T.handle, indptr_jk: T.handle, indptr_ik: T.handle, batch: T.int32, top: T.int32,
        nnz_i: T.int32, nnz_j: T.int32, nnz_k: T.int32, nnz_ij: T.int32, nnz_jk: T.int32, nnz_ik: T.int32):
    B = T.dense_fixed(batch)
    I = T.dense_variable(B, (top, nnz_i), indptr_i, "int32")
    J = T.dense_variable(B, (top, nnz_j), indptr_j, "int32")
    K = T.dense_variable(B, (top, nnz_k), indptr_k, "int32")
    IJ = T.dense_variable(PARENT_IJ, (top, nnz_ij), indptr_ij, "int32")
    JK = T.dense_variable(J, (top, nnz_jk), indptr_jk, "int32")
    IK = T.dense_variable(I, (top, nnz_ik), indptr_ik, "int32")
    X = T.match_sparse_buffer(x, (B, I, IJ), "float32")
    Y = T.match_sparse_buffer(y, (B, J, JK), "float32")
    Z = T.match_sparse_buffer(z, (B, I, IK), "float32")
    with T.sp_iter([B, I, J, IK], "SSRS", "bmm") as [b, i, j, k]:
        with T.init():
            Z[b, i, k] = T.float32(0)
        Z[b, i, k] = Z[b, i, k] + X[b, i, j] * Y[b, j, k]
"""


def test_bmm_with_IJ_under_the_batch_is_refused_with_the_rewrite():
    with pytest.raises(sp.FrontendError) as info:
        sp.from_script(BMM.replace("PARENT_IJ", "B"))
    message = str(info.value)
    assert "buffer `X`: axis `IJ` must come right after its parent `B`, but follows `I`" in message
    assert "its positions are counted from `B`'s, so `I` in between would be ignored" in message  # the cause
    assert "declare `IJ` under `I` (`IJ = T.dense_variable(I, ...)`) or list it right after `B`" in message
    assert "X = T.match_sparse_buffer(x, (B, I, IJ)" in message  # points at the declaration


def test_bmm_message_at_the_verifier():
    """The same rule in the verifier (for IR built without the frontend), word for word."""
    good = sp.from_script(BMM.replace("PARENT_IJ", "I"))
    B, I, J, K, IJ = good.axes[:5]
    bad_IJ = IJ.replace(parent=B)
    X = good.buffers[0]
    bad = good.replace(
        axes=(B, I, J, K, bad_IJ, *good.axes[5:]), buffers=(X.replace(axes=(B, I, bad_IJ)), *good.buffers[1:])
    )
    with pytest.raises(BufferAxisOrderError, match=r"declare `IJ` under `I` \(`IJ = T.dense_variable\(I, \.\.\.\)`\)"):
        sp.verify(bad)


def bmm_args(shapes: list[tuple[int, int, int]], rng) -> tuple[dict, list[np.ndarray]]:
    """Batches of (ni x nj) @ (nj x nk), ragged: the operands' values back to back, row-major."""
    xs = [rng.uniform(-1, 1, (ni, nj)).astype(np.float32) for ni, nj, _ in shapes]
    ys = [rng.uniform(-1, 1, (nj, nk)).astype(np.float32) for _, nj, nk in shapes]

    def indptr(counts) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    ni, nj, nk = (np.array([s[d] for s in shapes]) for d in range(3))
    rows_ij = np.repeat(nj, ni)  # every row i of batch b holds nj[b] entries
    rows_jk = np.repeat(nk, nj)
    rows_ik = np.repeat(nk, ni)
    kw = dict(
        x=np.concatenate([a.ravel() for a in xs] + [np.zeros(0, np.float32)]),
        y=np.concatenate([a.ravel() for a in ys] + [np.zeros(0, np.float32)]),
        z=np.full(int(rows_ik.sum()), np.nan, np.float32),
        indptr_i=indptr(ni),
        indptr_j=indptr(nj),
        indptr_k=indptr(nk),
        indptr_ij=indptr(rows_ij),
        indptr_jk=indptr(rows_jk),
        indptr_ik=indptr(rows_ik),
        batch=len(shapes),
        top=int(max([*ni, *nj, *nk, 1])),
        nnz_i=int(ni.sum()),
        nnz_j=int(nj.sum()),
        nnz_k=int(nk.sum()),
        nnz_ij=int(rows_ij.sum()),
        nnz_jk=int(rows_jk.sum()),
        nnz_ik=int(rows_ik.sum()),
    )
    return kw, [x @ y for x, y in zip(xs, ys)]


def test_bmm_rewritten_as_the_message_says_gives_the_batched_products():
    """`IJ` under `I` (and `IK` under `I`, `JK` under `J`): each batch's product, batches with an
    empty dimension included; interpreter = CPU kernel = numpy."""
    f = sp.from_script(BMM.replace("PARENT_IJ", "I"))
    sp.verify(f)
    shapes = [(2, 3, 2), (0, 2, 1), (3, 1, 4), (1, 0, 2), (2, 2, 0)]
    kernel = sp.compile(f, "cpu")
    for runner in (lambda **kw: sp.interpret(f, **kw), kernel):
        kw, want = bmm_args(shapes, np.random.default_rng(0))
        runner(**kw)
        got = np.split(kw["z"], np.cumsum([a.size for a in want])[:-1])
        for b, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-5, atol=1e-6, err_msg=f"batch {b}")


# ---------------------------------------------------------------------------------------------- rgcn
RGCN_HEAD = """
from sparsetir_py import script as T

@T.prim_func
def rgcn(a: T.handle, w: T.handle, x: T.handle, y: T.handle, indptr_i: T.handle, indices_i: T.handle,
         indptr_j: T.handle, indices_j: T.handle, m: T.int32, n: T.int32, rels: T.int32, feat: T.int32,
         nnz_i: T.int32, nnz_j: T.int32):
    R = T.dense_fixed(rels)
    I = T.sparse_variable(R, (m, nnz_i), (indptr_i, indices_i), "int32")
    J = T.sparse_variable(I, (n, nnz_j), (indptr_j, indices_j), "int32")
    I_detach = T.dense_fixed(m)
    J_detach = T.dense_fixed(n)
    F_in = T.dense_fixed(feat)
    F_out = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (R, I, J), "float32")
    W = T.match_sparse_buffer(w, (R, F_out, F_in), "float32")
    X = T.match_sparse_buffer(x, (J_detach, F_in), "float32")
    Y = T.match_sparse_buffer(y, (I_detach, F_out), "float32")
"""
RGCN_INIT_INSIDE = (
    RGCN_HEAD
    + """    with T.sp_iter([F_out, R, I, J, F_in], "SSSRR", "rgcn") as [fo, r, i, j, fi]:
        with T.init():
            Y[i, fo] = T.float32(0)
        Y[i, fo] = Y[i, fo] + A[r, i, j] * W[r, fo, fi] * X[j, fi]
"""
)
RGCN_INIT_OF_ITS_OWN = (
    RGCN_HEAD
    + """    with T.sp_iter([I_detach, F_out], "SS", "rgcn_init") as [i, fo]:
        Y[i, fo] = T.float32(0)
    with T.sp_iter([F_out, R, I, J, F_in], "SSSRR", "rgcn") as [fo, r, i, j, fi]:
        Y[i, fo] = Y[i, fo] + A[r, i, j] * W[r, fo, fi] * X[j, fi]
"""
)


def rgcn_args(feat: int = 2) -> tuple[dict, np.ndarray]:
    """Two relations over 3 rows that share row 0 (the issue's case: each relation would re-zero
    it); row 2 has one relation, row 1 another; relation 1's row 1 has no edge."""
    rng = np.random.default_rng(1)
    m, n, rels = 3, 4, 2
    rows = [[0, 2], [0, 1]]  # relation r -> its rows (I's coordinates)
    edges = {(0, 0): [1, 3], (0, 2): [0], (1, 0): [2, 3], (1, 1): []}  # (r, row) -> columns
    indptr_i = np.array([0, 2, 4], np.int32)
    indices_i = np.array(rows[0] + rows[1], np.int32)
    cols = [edges[(r, i)] for r in range(rels) for i in rows[r]]
    indptr_j = np.concatenate([[0], np.cumsum([len(c) for c in cols])]).astype(np.int32)
    indices_j = np.array([c for cs in cols for c in cs], np.int32)
    a = rng.uniform(0.5, 1.5, len(indices_j)).astype(np.float32)
    w = rng.uniform(-1, 1, (rels, feat, feat)).astype(np.float32)
    x = rng.uniform(-1, 1, (n, feat)).astype(np.float32)
    want = np.zeros((m, feat))
    e = 0
    for r in range(rels):
        for i in rows[r]:
            for j in edges[(r, i)]:
                want[i] += a[e] * (w[r] @ x[j])
                e += 1
    kw = dict(
        a=a,
        w=w,
        x=x,
        y=np.full((m, feat), np.nan, np.float32),
        indptr_i=indptr_i,
        indices_i=indices_i,
        indptr_j=indptr_j,
        indices_j=indices_j,
        m=m,
        n=n,
        rels=rels,
        feat=feat,
        nnz_i=len(indices_i),
        nnz_j=len(indices_j),
    )
    return kw, want


def test_rgcn_with_the_init_inside_is_refused_with_the_rewrite():
    f = sp.from_script(RGCN_INIT_INSIDE)
    with pytest.raises(InitWriteError) as info:
        sp.verify(f)
    message = str(info.value)
    assert "`rgcn` has an init but writes buffer `Y` at an index that does not use its spatial iterator `r`" in message
    assert "each would initialise it again, zeroing what the points before it accumulated" in message  # the cause
    assert "initialise `Y` in a sparse iteration of its own, before `rgcn`" in message  # the rewrite
    assert "remove the `T.init()` of `rgcn`" in message


def test_rgcn_refused_everywhere_so_nothing_disagrees_silently():
    """The issue: the verbatim function ran in the interpreter (11 on a shared row) and as a
    kernel (10). Every entry point refuses it now, by the verifier's named error."""
    f = sp.from_script(RGCN_INIT_INSIDE)
    kw, _ = rgcn_args()
    entries = {
        "interpret": lambda: sp.interpret(f, **kw),
        "lower_sparse_iter": lambda: sp.lower_sparse_iter(f),
        "lower_sparse_buffer": lambda: sp.lower_sparse_buffer(f),
        "decompose_format": lambda: sp.decompose_format(f, []),
        "Schedule": lambda: sp.Schedule(f),
        "compile cpu": lambda: sp.compile(f, "cpu"),
        "compile cuda": lambda: sp.compile(f, "cuda"),
    }
    for name, call in entries.items():
        with pytest.raises(InitWriteError, match="spatial iterator `r`"):
            call()
            pytest.fail(f"{name} accepted the function")


def test_rgcn_rewritten_as_the_message_says_sums_over_relations():
    f = sp.from_script(RGCN_INIT_OF_ITS_OWN)
    sp.verify(f)
    kernel = sp.compile(f, "cpu")
    for runner in (lambda **kw: sp.interpret(f, **kw), kernel):
        kw, want = rgcn_args()
        runner(**kw)
        np.testing.assert_allclose(kw["y"], want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ every entry, every stage
@T.prim_func
def stuck_rowsum(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    # Stage II, ill-formed: the `while` reads only `J_indptr`, which its body never writes.
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_buffer(b, (m,), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32")
    for i in T.serial(m):
        with T.block("rowsum"):
            vi = T.axis.spatial(m, i)
            T.reads(J_indptr[vi : vi + 2], A[vi, 0:n])
            T.writes(B[vi])
            B[vi] = T.float32(0)
            while J_indptr[vi] < J_indptr[vi + 1]:
                B[vi] = B[vi] + A[vi, 0]


def test_every_entry_point_refuses_an_ill_formed_stage2_or_stage3_function():
    """Stage I is covered by the unstored writes (tests/transform/test_lower_sparse_iter.py) and
    the RGCN above; here the Stage II function and its Stage III form (built with the verifier
    off, as a user could) are refused by the interpreter, the passes, `sp.Schedule` and `sp.build`
    (which would otherwise hang in the loop)."""
    from sparsetir_py.transform.lower_sparse_buffer import BufferFlattening

    f2 = stuck_rowsum
    f3 = BufferFlattening(f2, {}).run()  # the pass itself, without its verification on entry
    kw = dict(
        a=np.ones(2, np.float32),
        b=np.zeros(2, np.float32),
        indptr=np.array([0, 1, 2], np.int32),
        indices=np.array([0, 1], np.int32),
        m=2,
        n=2,
        nnz=2,
    )
    entries = {
        "interpret (Stage II)": lambda: sp.interpret(f2, **kw),
        "interpret (Stage III)": lambda: sp.interpret(f3, **kw),
        "lower_sparse_buffer": lambda: sp.lower_sparse_buffer(f2),
        "Schedule (Stage II)": lambda: sp.Schedule(f2),
        "Schedule (Stage III)": lambda: sp.Schedule(f3),
        "build cpu": lambda: sp.build(f3, "cpu"),
        "build cuda": lambda: sp.build(f3, "cuda"),
    }
    for name, call in entries.items():
        with pytest.raises(WhileLoopError, match=r"reads `J_indptr`, which the loop's body does not write"):
            call()
            pytest.fail(f"{name} accepted the function")
