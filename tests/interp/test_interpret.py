"""The Stage I reference interpreter: dense semantics, default values, lazy selects, sequential
reductions, and argument checking that names the argument."""

import time

import numpy as np
import pytest
import scipy.sparse as sps

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.data import load_matrix


def make_csrmm(sorted_=True, idtype="int32"):
    @T.prim_func
    def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
              m: T.int32, n: T.int32, feat: T.int32, nnz: T.int64):  # fmt: skip
        I = T.dense_fixed(m)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype, sorted=sorted_)
        J_detach = T.dense_fixed(n)
        K = T.dense_fixed(feat)
        A = T.match_sparse_buffer(a, (I, J), "float32")
        B = T.match_sparse_buffer(b, (J_detach, K), "float32")
        C = T.match_sparse_buffer(c, (I, K), "float32")
        with T.sp_iter([I, J, K], "SRS", "csrmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return csrmm


csrmm = make_csrmm()


def random_csr(m, n, density, seed, dtype=np.float32):
    A = sps.random(m, n, density=density, format="csr", dtype=dtype, random_state=seed)
    A.sort_indices()
    return A


def csrmm_args(A, B, C):
    m, n = A.shape
    return dict(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=B.shape[1], nnz=A.nnz)


def test_empty_rows_are_initialised():
    """Dense semantics: a row with no nonzeros still gets the init value."""
    A = random_csr(30, 20, 0.1, 0)
    keep = sps.diags((np.arange(30) % 3 != 0).astype(np.float32))
    A = (keep @ A).tocsr()  # rows 0, 3, 6, ... empty
    A.eliminate_zeros()
    A.sort_indices()
    assert (np.diff(A.indptr)[::3] == 0).all()
    B = np.random.default_rng(1).standard_normal((20, 4)).astype(np.float32)
    C = np.full((30, 4), np.nan, np.float32)
    sp.interpret(csrmm, **csrmm_args(A, B, C))
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)
    assert (C[::3] == 0).all()


def test_positional_arguments_and_zero_nonzeros():
    A = sps.csr_matrix((5, 7), dtype=np.float32)
    B = np.ones((7, 3), np.float32)
    C = np.full((5, 3), np.nan, np.float32)
    sp.interpret(csrmm, A.data, B, C, A.indptr, A.indices, 5, 7, 3, 0)
    assert (C == 0).all()


def test_real_graph_in_seconds():
    """The oracle must handle ~100K nonzeros in seconds (pubmed: 88,651)."""
    P = load_matrix("pubmed")
    B = np.random.default_rng(0).standard_normal((P.shape[1], 8)).astype(np.float32)
    C = np.full((P.shape[0], 8), np.nan, np.float32)
    t = time.perf_counter()
    sp.interpret(csrmm, **csrmm_args(P, B, C))
    assert time.perf_counter() - t < 10
    np.testing.assert_allclose(C, P @ B, rtol=1e-4, atol=1e-4)


@T.prim_func
def densify(a: T.handle, d: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32", sorted=False)
    J_dense = T.dense_fixed(n)
    A = T.match_sparse_buffer(a, (I, J), "float32", default_value=-1.5)
    D = T.match_sparse_buffer(d, (I, J_dense), "float32")
    with T.sp_iter([I, J_dense], "SS", "densify") as [i, j]:
        D[i, j] = A[i, j]


def test_default_value_on_missing_coordinates_and_unsorted_axis():
    """Reading a coordinate the structure does not store gives the buffer's default value; the
    lookup works for unsorted axes too."""
    A = random_csr(12, 9, 0.3, 2)
    rng = np.random.default_rng(3)
    indices = A.indices.copy()
    data = A.data.copy()
    for r in range(12):  # shuffle within each row
        s, e = A.indptr[r], A.indptr[r + 1]
        perm = rng.permutation(e - s) + s
        indices[s:e], data[s:e] = indices[perm], data[perm]
    D = np.full((12, 9), np.nan, np.float32)
    sp.interpret(densify, a=data, d=D, indptr=A.indptr, indices=indices, m=12, n=9, nnz=A.nnz)
    expected = np.where(A.toarray() != 0, A.toarray(), -1.5)
    np.testing.assert_array_equal(D, expected)


@T.prim_func
def last_in_row(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (I,), "float32")
    with T.sp_iter([I, J], "SR", "last") as [i, j]:
        with T.init():
            B[i] = T.float32(-7)
        B[i] = A[i, j] * 2.0 + T.cast(j, "float32")


def test_non_update_reduction_runs_point_by_point():
    """A reduction body that is not an update `X = X op e` keeps its sequential meaning: the
    last point of each row wins."""
    A = random_csr(15, 10, 0.3, 4)
    out = np.full(15, np.nan, np.float32)
    sp.interpret(last_in_row, a=A.data, b=out, indptr=A.indptr, indices=A.indices, m=15, n=10, nnz=A.nnz)
    for r in range(15):
        s, e = A.indptr[r], A.indptr[r + 1]
        expected = -7.0 if s == e else A.data[e - 1] * 2 + A.indices[e - 1]
        assert out[r] == np.float32(expected)


@T.prim_func
def shifted(x: T.handle, y: T.handle, n: T.int32):
    I = T.dense_fixed(n)
    X = T.match_sparse_buffer(x, (I,), "float32")
    Y = T.match_sparse_buffer(y, (I,), "float32")
    with T.sp_iter([I], "S", "shift") as [i]:
        Y[i] = T.if_then_else(i > 0, X[i - 1], T.float32(100)) + (X[i + 1] if i < n - 1 else 0.0)


def test_select_evaluates_only_the_chosen_branch():
    X = np.arange(6, dtype=np.float32)
    Y = np.full(6, np.nan, np.float32)
    sp.interpret(shifted, x=X, y=Y, n=6)
    expected = np.r_[100, X[:-1]] + np.r_[X[1:], 0]
    np.testing.assert_array_equal(Y, expected)


@T.prim_func
def out_of_bounds(x: T.handle, y: T.handle, n: T.int32):
    I = T.dense_fixed(n)
    X = T.match_sparse_buffer(x, (I,), "float32")
    Y = T.match_sparse_buffer(y, (I,), "float32")
    with T.sp_iter([I], "S", "oob") as [i]:
        Y[i] = X[i + 1]


def test_dense_out_of_bounds_read_is_an_error():
    with pytest.raises(sp.InterpretError, match="coordinate 4 of axis `I`"):
        sp.interpret(out_of_bounds, x=np.zeros(4, np.float32), y=np.zeros(4, np.float32), n=4)


@T.prim_func
def scatter(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_dense = T.dense_fixed(n)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (I, J_dense), "float32")
    with T.sp_iter([I, J_dense], "SS", "scatter") as [i, j]:
        A[i, j] = B[i, j]


def test_write_to_a_coordinate_not_stored_is_an_error():
    """A checked write (tests/ir/test_unstored_writes.py): the first miss, in iteration order, is an
    `InputError` naming the buffer and the coordinates, and the output is left as it was passed."""
    A = random_csr(4, 4, 0.3, 5)
    (checked,) = sp.verify(scatter).checked
    assert "a write to `A` at index 1 uses `j`" in checked.reason
    rows = np.repeat(np.arange(4), np.diff(A.indptr))
    dense = np.zeros((4, 4), bool)
    dense[rows, A.indices] = True
    first = tuple(int(x) for x in np.argwhere(~dense)[0])  # row-major: the iteration order
    a = A.data.copy()
    with pytest.raises(sp.InputError, match=rf"^write to `A` at coordinates \({first[0]}, {first[1]}\), which its"):
        sp.interpret(
            scatter, a=a, b=np.ones((4, 4), np.float32), indptr=A.indptr, indices=A.indices, m=4, n=4, nnz=A.nnz,
        )  # fmt: skip
    np.testing.assert_array_equal(a, A.data)


@T.prim_func
def fused_rowsum(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float64")
    B = T.match_sparse_buffer(b, (I, J), "float64")
    with T.sp_iter([T.fuse(I, J)], "SS", "fused") as [i, j]:
        B[i, j] = A[i, j] * T.cast(i + 1, "float64") + T.cast(j, "float64")


def test_fused_iteration_visits_every_stored_point():
    A = random_csr(20, 13, 0.2, 6, dtype=np.float64)
    out = np.full(A.nnz, np.nan)
    sp.interpret(fused_rowsum, a=A.data, b=out, indptr=A.indptr, indices=A.indices, m=20, n=13, nnz=A.nnz)
    rows = np.repeat(np.arange(20), np.diff(A.indptr))
    np.testing.assert_allclose(out, A.data * (rows + 1) + A.indices)


# ---------------------------------------------------------------- argument checks
def good_args():
    A = random_csr(8, 6, 0.4, 7)
    B = np.ones((6, 3), np.float32)
    C = np.zeros((8, 3), np.float32)
    return csrmm_args(A, B, C)


def corrupt(key, fn):
    args = good_args()
    args[key] = fn(args[key])
    return args


@pytest.mark.parametrize(
    "args,match",
    [
        (corrupt("a", lambda x: x.astype(np.float64)), "`a` must have dtype float32"),
        (corrupt("b", lambda x: x[:-1]), r"`b` must have shape \(6, 3\)"),
        (corrupt("c", lambda x: np.asfortranarray(np.zeros((8, 3), np.float32))[:, :]), "`c` must be C-contiguous"),
        (corrupt("indptr", lambda x: x.astype(np.int64)), "`indptr` .* must have dtype int32"),
        (corrupt("indptr", lambda x: x[:-1]), "`indptr` .* must have length 9"),
        (corrupt("indptr", lambda x: x + 1), "`indptr` .* must start at 0"),
        (corrupt("indptr", lambda x: np.r_[x[:3], x[2] - 1 if x[2] > 0 else 0, x[4:]].astype(np.int32)), "`indptr`"),
        (
            corrupt("indices", lambda x: np.where(np.arange(x.size) == 0, 99, x).astype(np.int32)),
            "`indices` .* outside",
        ),
        (corrupt("indices", lambda x: x[::-1].copy()), "`indices` .* not strictly increasing"),
        (corrupt("nnz", lambda x: x + 1), "indptr|must have length"),
        (corrupt("m", lambda x: 2.5), "`m` must be an integer"),
        ({**good_args(), "zzz": 1}, "no parameter `zzz`"),
        ({k: v for k, v in good_args().items() if k != "b"}, "missing argument `b`"),
        (corrupt("b", lambda x: x.tolist()), "`b` must be a numpy array"),
    ],
)
def test_input_errors_name_the_argument(args, match):
    with pytest.raises(sp.InputError, match=match):
        sp.interpret(csrmm, **args)


def test_indptr_decreasing_is_reported():
    args = good_args()
    ip = args["indptr"].copy()
    ip[1] = ip[2] + 1  # row 1 would have a negative length
    args["indptr"] = ip
    with pytest.raises(sp.InputError, match="`indptr` .* decreases at row 1"):
        sp.interpret(csrmm, **args)


def test_duplicate_coordinates_on_unsorted_axis():
    f = make_csrmm(sorted_=False)
    args = good_args()
    ix = args["indices"].copy()
    row = int(np.argmax(np.diff(args["indptr"]) >= 2))
    s = args["indptr"][row]
    ix[s + 1] = ix[s]
    args["indices"] = ix
    with pytest.raises(sp.InputError, match="repeats a coordinate"):
        sp.interpret(f, **args)


def test_nnz_overflowing_the_index_dtype():
    args = good_args()
    args["nnz"] = 2**31
    with pytest.raises(sp.InputError, match=r"more than int32 can index"):
        sp.interpret(csrmm, **args)


def test_int64_structure():
    f = make_csrmm(idtype="int64")
    A = random_csr(10, 8, 0.3, 8)
    A.indptr, A.indices = A.indptr.astype(np.int64), A.indices.astype(np.int64)
    B = np.random.default_rng(0).standard_normal((8, 2)).astype(np.float32)
    C = np.full((10, 2), np.nan, np.float32)
    sp.interpret(f, **csrmm_args(A, B, C))
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)


def test_every_stage_runs():
    """Stages II and III run loop by loop and agree with Stage I."""
    A = random_csr(12, 9, 0.3, 9)
    B = np.random.default_rng(1).standard_normal((9, 3)).astype(np.float32)
    stage2 = sp.lower_sparse_iter(csrmm)
    stage3 = sp.lower_sparse_buffer(stage2)
    for f in (csrmm, stage2, stage3["main"]):
        C = np.full((12, 3), np.nan, np.float32)
        sp.interpret(f, **csrmm_args(A, B, C))
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)


def test_stage_mislabelled_is_an_error():
    f = csrmm.with_attr("stage", 3)
    with pytest.raises(sp.SparseTIRError):
        sp.interpret(f, **good_args())
