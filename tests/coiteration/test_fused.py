"""The one-pass SpGEMM (`kernels.spgemm_work_script`, `spgemm_fused_script`,
`compact_chunks_script`) and the host steps around it (`ops.coiteration._spgemm_fused`): the
kernels against the loop interpreter, each row-ordering path (a scan of the workspace, insertion
sort, a bitmap read a word at a time or through a summary) against scipy, several chunks moved
down in place, and the fallback to the two-pass product. Small matrices, one compile per kernel and dtype pair.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from strategies import make_csr
from test_operators import check_add, check_multiply, check_spgemm

import sparsetir_py as sp
from sparsetir_py.coiteration import host
from sparsetir_py.coiteration.host import prefix
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import coiteration as operators
from sparsetir_py.ops.coiteration import spgemm


def three_orders(idtype: str = "int32", dtype: str = "float32"):
    """A (7 x 5) and B (5 x 2000) whose product's rows take every ordering path: row 0 has 80
    entries over 1980 columns (no branch on new columns, a bitmap of its list), row 1 has 10 over 900
    (insertion sort), row 2 has 80 over 80 (a dense row: no list of columns, a scan of the
    workspace), row 3 is empty, row 4 is one row of B, row 5 sums three rows of B that may
    overlap (a bitmap of its list), row 6 has 20 entries over 25 columns (a scan of the workspace)."""
    rng = np.random.default_rng(26)
    rows = [
        np.sort(rng.choice(np.arange(0, 2000, 20), 80, replace=False)),  # B row 0: 80 entries, wide
        np.sort(rng.choice(np.arange(100, 1000), 10, replace=False))[::-1].copy(),  # B row 1: 10, wide
        np.arange(500, 580),  # B row 2: 80 consecutive columns
        np.array([7, 1999]),
        np.sort(rng.choice(np.arange(600, 625), 20, replace=False)),  # B row 4: 20 over 25 columns
    ]
    dense_b = np.zeros((5, 2000), bool)
    for i, cols in enumerate(rows):
        dense_b[i, cols] = True
    pattern_a = np.zeros((7, 5), bool)
    for i, cols in enumerate([[0], [1], [2], [], [3], [1, 2, 3], [4]]):
        pattern_a[i, cols] = True
    A = make_csr(pattern_a, rng.uniform(-1, 1, int(pattern_a.sum())), idtype, dtype)
    B = make_csr(dense_b, rng.uniform(-1, 1, int(dense_b.sum())), idtype, dtype)
    return A, B


@pytest.mark.parametrize("fused", ["fused", "fused_prefetch"])
def test_fused_kernels_match_the_interpreter(fused):
    """`work`, `fused` (two chunks; with and without prefetches of B's rows ahead, whose
    addresses the interpreter checks) and `compact_chunks` give the interpreter's arrays, and
    together scipy's sorted product."""
    A, B = three_orders("int64", "float32")
    m, k = A.shape
    n = B.shape[1]
    names = {"idtype": "int64", "dtype": "float32"}
    bounds = np.array([0, 3, 7], np.int32)
    structure = {"a_indptr": A.indptr, "a_indices": A.indices, "b_indptr": B.indptr, "m": m, "k": k, "n": n}
    work_args = {**structure, "bounds": bounds, "parts": 2, "nnz_a": A.nnz}
    outputs = {"c_work": np.zeros(m, np.int64), "c_room": np.zeros(m, np.int64)}
    got = run_both("work", names, work_args, outputs)
    assert list(got["c_work"]) == [80, 10, 80, 0, 2, 92, 20]
    assert list(got["c_room"]) == [80, 10, 80, 0, 2, 92, 20]
    room = prefix(got["c_room"])
    t_start = room[bounds]
    nnz_t = int(t_start[-1])
    fused_args = {**structure, "a_data": A.data, "b_data": B.data, "b_indices": B.indices, "t_start": t_start,
                  "w_prefix": prefix(got["c_work"]), "bounds": bounds, "parts": 2, "nnz_a": A.nnz, "nnz_b": B.nnz,
                  "nnz_t": nnz_t}  # fmt: skip
    outputs = {"t_data": np.zeros(nnz_t, np.float32), "t_indices": np.zeros(nnz_t, np.int64),
               "c_end": np.zeros(m, np.int64)}  # fmt: skip
    got = run_both(fused, names, fused_args, outputs)
    want = (A.astype(np.float64) @ B.astype(np.float64)).tocsr()
    want.sort_indices()
    # Each row's end counted from its chunk's start: the chunks before it added, indptr.
    indptr = np.concatenate([[0], got["c_end"]])
    indptr[bounds[1] + 1 :] += indptr[bounds[1]]
    np.testing.assert_array_equal(indptr, want.indptr)
    compact_args = {"t_data": got["t_data"], "t_indices": got["t_indices"], "t_start": t_start, "c_indptr": indptr,
                    "bounds": bounds, "m": m, "parts": 2, "nnz_t": nnz_t, "nnz_c": want.nnz}  # fmt: skip
    outputs = {"c_data": np.zeros(want.nnz, np.float32), "c_indices": np.zeros(want.nnz, np.int64)}
    got = run_both("compact_chunks", names, compact_args, outputs)
    np.testing.assert_array_equal(got["c_indices"], want.indices)
    np.testing.assert_allclose(got["c_data"], want.data, rtol=1e-5, atol=1e-6)


def test_prefetches_stay_inside_b():
    """Rows of A that select B's last rows, empty (their row bound is B's nnz): the prefetches
    ahead clamp their addresses into B, which the interpreter checks, and give the product."""
    a_mask = np.array([[1, 0, 1, 1], [0, 0, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1]], bool)
    b_mask = np.array([[1, 0, 1], [0, 1, 1], [0, 0, 0], [0, 0, 0]], bool)
    A = make_csr(a_mask, np.arange(1.0, 1 + a_mask.sum()), "int64", "float32")
    B = make_csr(b_mask, np.arange(1.0, 1 + b_mask.sum()), "int64", "float32")
    (m, k), n = A.shape, B.shape[1]
    names = {"idtype": "int64", "dtype": "float32"}
    bounds = np.array([0, m], np.int32)
    work = prefix(np.array([np.diff(B.indptr)[A.indices[A.indptr[i] : A.indptr[i + 1]]].sum() for i in range(m)]))
    room = int(work[-1])
    args = {"a_indptr": A.indptr, "a_indices": A.indices, "b_indptr": B.indptr, "m": m, "k": k, "n": n,
            "a_data": A.data, "b_data": B.data, "b_indices": B.indices, "t_start": np.array([0, room], np.int64),
            "w_prefix": work, "bounds": bounds, "parts": 1, "nnz_a": A.nnz, "nnz_b": B.nnz, "nnz_t": room}  # fmt: skip
    outputs = {"t_data": np.zeros(room, np.float32), "t_indices": np.zeros(room, np.int64)}
    outputs["c_end"] = np.zeros(m, np.int64)
    got = run_both("fused_prefetch", names, args, outputs)
    want = (A @ B).tocsr()
    want.sort_indices()
    np.testing.assert_array_equal(np.concatenate([[0], got["c_end"]]), want.indptr)
    np.testing.assert_array_equal(got["t_indices"][: want.nnz], want.indices)
    np.testing.assert_allclose(got["t_data"][: want.nnz], want.data, rtol=1e-6)
    # The masked product prefetches the same way: the mask is the product's structure and a
    # column of every row of it.
    M = (want + scipy.sparse.csr_matrix(np.ones((m, 1)), shape=(m, n))).tocsr()
    M.sort_indices()
    masked = {"a_indptr": A.indptr, "a_indices": A.indices, "a_data": A.data, "b_indptr": B.indptr,
              "b_indices": B.indices, "b_data": B.data, "m_indptr": M.indptr.astype(np.int64),
              "m_indices": M.indices.astype(np.int64), "bounds": bounds, "m": m, "k": k, "n": n, "parts": 1,
              "nnz_a": A.nnz, "nnz_b": B.nnz, "nnz_m": M.nnz}  # fmt: skip
    outputs = {"c_data": np.zeros(M.nnz, np.float32), "c_indices": np.zeros(M.nnz, np.int64)}
    outputs["c_count"] = np.zeros(m, np.int64)
    got = run_both("masked_prefetch", names, masked, outputs)
    np.testing.assert_array_equal(got["c_count"], np.diff(want.indptr))


def run_both(name: str, names: dict, inputs: dict, outputs: dict) -> dict:
    """Runs kernel `name` compiled and under the interpreter on copies of `outputs`; asserts they
    agree and returns the interpreter's outputs."""
    func = sp.from_script(operators._script(name, names["idtype"], names["dtype"]))
    interpreted = {key: value.copy() for key, value in outputs.items()}
    sp.interpret(func, **inputs, **interpreted)
    compiled = {key: value.copy() for key, value in outputs.items()}
    operators.kernel(name, **names)(**inputs, **compiled)
    # float32 sums of a row differ by a few units in the last place (fused multiply-adds).
    tol = {"rtol": 1e-5, "atol": 1e-7} if names["dtype"] == "float32" else {"rtol": 1e-12, "atol": 1e-14}
    for key in outputs:
        np.testing.assert_allclose(compiled[key], interpreted[key], **tol, err_msg=f"{name}: {key}")
    return interpreted


def test_scattered_reads_of_b_are_told_from_near_ones():
    """`host.scattered`: a banded matrix reads rows of B next to its own (no prefetch), the same
    matrix numbered at random reads them all over B; an empty one reads none."""
    n = 200_000
    band = scipy.sparse.diags([1.0, 2.0, 1.0], [-1, 0, 1], shape=(n, n), format="csr")
    perm = np.random.default_rng(7).permutation(n)
    shuffled = band[perm][:, perm].tocsr()
    row_bytes = 3 * 12 + 4.0
    assert not host.scattered(band.indptr, band.indices, n, row_bytes)
    assert host.scattered(shuffled.indptr, shuffled.indices, n, row_bytes)
    empty = scipy.sparse.csr_matrix((5, 5))
    assert not host.scattered(empty.indptr, empty.indices, 5, row_bytes)
    # A B that lies within reach whole (a small product) is never scattered, at no sample's cost.
    band = scipy.sparse.diags([1.0, 2.0, 1.0], [-1, 0, 1], shape=(1000, 1000), format="csr")
    perm = np.random.default_rng(7).permutation(1000)
    small = band[perm][:, perm].tocsr()
    assert not host.scattered(small.indptr, small.indices, 1000, row_bytes)
    assert host.scattered(small.indptr, small.indices, 1000, row_bytes * 1000)  # rows of 40 kB: 26 in reach


@pytest.mark.parametrize("threads", [1, 2])
def test_prefetching_products_against_scipy(threads, monkeypatch):
    """The prefetching kernels through the operator, chosen for every product: random graphs,
    an empty B, one row of A, and a masked product."""
    monkeypatch.setattr(host, "PARALLEL_GRAIN", 0)
    monkeypatch.setattr(operators, "DRIVER_WORK", 0)
    monkeypatch.setattr(operators, "scattered", lambda *args: True)
    seen = []
    kernel = operators.kernel
    monkeypatch.setattr(operators, "kernel", lambda name, *a, **k: seen.append(name) or kernel(name, *a, **k))
    rng = np.random.default_rng(11)
    for idtype, dtype in (("int32", "float32"), ("int64", "float32")):
        mask_a, mask_b = rng.random((300, 200)) < 0.03, rng.random((200, 250)) < 0.05
        A = make_csr(mask_a, rng.uniform(-1, 1, int(mask_a.sum())), idtype, dtype)
        B = make_csr(mask_b, rng.uniform(-1, 1, int(mask_b.sum())), idtype, dtype)
        check_spgemm(A, B, threads=threads)
        check_spgemm(A, make_csr(np.zeros((200, 250), bool), np.zeros(0), idtype, dtype), threads=threads)
        check_spgemm(A[:1], B, threads=threads)
        mask_c = rng.random((300, 250)) < 0.1
        check_spgemm(A, B, mask=make_csr(mask_c, np.ones(int(mask_c.sum())), idtype, dtype), threads=threads)
    # Six products by the Python steps (on one thread the compiled driver, built first with the
    # plain kernel, hands each of them over); the masked ones on one thread run their driver.
    assert seen.count("fused_prefetch") == 6 and seen.count("masked_prefetch") == (2 if threads > 1 else 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_every_row_order_against_scipy(threads, monkeypatch):
    """The operator on the three-orders product, in one chunk (the result's own arrays, shrunk)
    and in two (the later moved down), int32/float32 and int64/float64."""
    monkeypatch.setattr(host, "PARALLEL_GRAIN", 0)
    for idtype, dtype in (("int32", "float32"), ("int64", "float64")):
        A, B = three_orders(idtype, dtype)
        check_spgemm(A, B, threads=threads)


@pytest.mark.parametrize("idtype, dtype", [("int32", "float32"), ("int64", "float64")])
def test_bitmap_rows(idtype, dtype):
    """Rows made to take the bitmap (more than BRANCHLESS_MIN multiply-adds, spread between
    BITMAP_MIN_SPREAD and BITMAP_MAX_SPREAD columns each, a row of B of more than
    BITMAP_MIN_WIDEST among them, bits in every position of a word of 32 and several words) and
    the bitmap set from the row's list around it (a row of 60 entries over 1980 columns; ten rows
    of B with one set of 40 columns over 700: too compressed for the first; twenty rows of B of
    24 columns: none wide enough), against scipy and the loop interpreter."""
    from sparsetir_py.coiteration import kernels

    limits = (kernels.BRANCHLESS_MIN, kernels.LONG_ROW_MIN, kernels.BITMAP_MIN_SPREAD, kernels.BITMAP_MAX_SPREAD)
    assert limits == (64, 32, 2, 32) and kernels.BITMAP_MIN_WIDEST == 32
    rng = np.random.default_rng(35)
    n = 2000
    rows = [
        np.sort(rng.choice(n, 80, replace=False)),  # 80 over ~2000: bitmap (2 <= 25 <= 32 per product)
        np.arange(0, 64) * 31,  # 64 entries over 1954 columns (as the next): bitmap with the row below
        np.arange(0, 64) * 31 + 3,
        np.sort(rng.choice(np.arange(40, 1990), 60, replace=False)),  # alone: 60 products, bitmap of the list
        np.sort(rng.choice(np.arange(100, 800), 40, replace=False)),  # ten times: 400 products over ~700
    ]
    # Twenty rows of B of 24 columns over ~2000 (a 27-point stencil's shape): 480 products, whose
    # widest row of B is under BITMAP_MIN_WIDEST: bitmap of the list.
    narrow = [np.sort(rng.choice(n, 24, replace=False)) for _ in range(20)]
    copies = len(rows) + 9
    dense_b = np.zeros((copies + len(narrow), n), bool)
    for i, cols in enumerate(rows + narrow):
        dense_b[i if i < len(rows) else i + 9, cols] = True
    for i in range(len(rows), copies):
        dense_b[i] = dense_b[len(rows) - 1]
    pattern_a = np.zeros((5, dense_b.shape[0]), bool)
    pattern_a[0, 0] = True
    pattern_a[1, [1, 2]] = True
    pattern_a[2, 3] = True
    pattern_a[3, len(rows) - 1 : copies] = True
    pattern_a[4, copies:] = True
    A = make_csr(pattern_a, rng.uniform(-1, 1, int(pattern_a.sum())), idtype, dtype)
    B = make_csr(dense_b, rng.uniform(-1, 1, int(dense_b.sum())), idtype, dtype)
    check_spgemm(A, B, threads=1)
    fused_against_scipy(A, B, idtype, dtype)


def fused_against_scipy(A, B, idtype: str, dtype: str) -> None:
    """The fused kernel over all of A's rows in one chunk, compiled and interpreted (`run_both`):
    each row's end and the sorted columns are scipy's."""
    m, k = A.shape
    n = B.shape[1]
    names = {"idtype": idtype, "dtype": dtype}
    structure = {"a_indptr": A.indptr, "a_indices": A.indices, "b_indptr": B.indptr, "m": m, "k": k, "n": n}
    work = np.diff(B.indptr)[A.indices]
    w_prefix = np.concatenate([[0], np.cumsum([work[A.indptr[i] : A.indptr[i + 1]].sum() for i in range(m)])])
    room = np.minimum(np.diff(w_prefix), n + 1)
    nnz_t = int(room.sum())
    fused_args = {**structure, "a_data": A.data, "b_data": B.data, "b_indices": B.indices,
                  "t_start": np.array([0, nnz_t], np.int64), "w_prefix": w_prefix.astype(np.int64),
                  "bounds": np.array([0, m], np.int32), "parts": 1, "nnz_a": A.nnz, "nnz_b": B.nnz,
                  "nnz_t": nnz_t}  # fmt: skip
    outputs = {"t_data": np.zeros(nnz_t, dtype), "t_indices": np.zeros(nnz_t, idtype), "c_end": np.zeros(m, idtype)}
    got = run_both("fused", names, fused_args, outputs)
    want = (A.astype(np.float64) @ B.astype(np.float64)).tocsr()
    want.sort_indices()
    np.testing.assert_array_equal(np.concatenate([[0], got["c_end"]]), want.indptr)
    np.testing.assert_array_equal(got["t_indices"][: want.nnz], want.indices)
    np.testing.assert_allclose(got["t_data"][: want.nnz], want.data, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("idtype, dtype", [("int32", "float32"), ("int64", "float64")])
def test_wide_sparse_rows_read_off_a_summary(idtype, dtype):
    """Rows of more than LONG_ROW_MIN entries over more than 32 * BITMAP_WORDS_PER_ENTRY columns an
    entry take the bitmap with a summary word per 1024 columns: entries on the first and last
    bits of words and of summary groups, in every group of 8 (n = 8192), a row of B repeated
    (duplicates), and rows of B of at most BITMAP_MIN_WIDEST entries (not R-MAT's bitmap).
    Beside them, a row just under the bound (span 64 columns an entry: a word at a time)."""
    from sparsetir_py.coiteration import kernels

    assert (kernels.LONG_ROW_MIN, kernels.BITMAP_WORDS_PER_ENTRY, kernels.BITMAP_MIN_WIDEST) == (32, 2, 32)
    rng = np.random.default_rng(39)
    n = 8192
    edges = np.array([0, 31, 32, 1023, 1024, 2047, 4095, 4096, 8160, 8191])
    rows = [
        edges,  # 10 columns at word and group edges
        np.sort(rng.choice(np.arange(1, n - 1), 30, replace=False)),  # 30 scattered
        np.sort(rng.choice(np.arange(1, n - 1), 30, replace=False)),
        np.arange(40) * 64 + 5,  # 40 columns over 2501: 62.5 an entry, word by word
    ]
    dense_b = np.zeros((len(rows), n), bool)
    for i, cols in enumerate(rows):
        dense_b[i, cols] = True
    pattern_a = np.zeros((4, len(rows)), bool)
    pattern_a[0, [0, 1, 2]] = True  # about 70 entries over 8191 columns: the summary
    pattern_a[1, [0, 1]] = True  # 40 entries: the summary
    pattern_a[2, 3] = True  # a row just under the bound
    pattern_a[3, [0, 1, 2, 3]] = True  # 110 entries over 8191 columns, 100 products
    A = make_csr(pattern_a, rng.uniform(-1, 1, int(pattern_a.sum())), idtype, dtype)
    B = make_csr(dense_b, rng.uniform(-1, 1, int(dense_b.sum())), idtype, dtype)
    check_spgemm(A, B, threads=1)
    fused_against_scipy(A, B, idtype, dtype)


def test_chunks_in_place(monkeypatch):
    """Several chunks write the result's own arrays and the later ones move down: in pieces,
    one per thread, where every target lies below every source (a product with many duplicate
    products: room to spare), else in order on one thread (a product whose rows have no duplicates fills its room)."""
    monkeypatch.setattr(host, "PARALLEL_GRAIN", 0)
    moves = []
    move = operators._move_chunks
    monkeypatch.setattr(operators, "_move_chunks", lambda *a: moves.append(a[2][1] >= a[3][-1]) or move(*a))
    A = load_matrix("cora")
    rng = np.random.default_rng(7)
    eye = make_csr(np.eye(A.shape[0], dtype=bool), rng.uniform(-1, 1, A.shape[0]), "int32", "float32")
    # Rows of 1000 products over 100 columns: room (301 entries) three times their size.
    full = np.ones((200, 10), bool)
    wide = np.zeros((10, 300), bool)
    wide[:, :100] = True
    F = make_csr(full, rng.uniform(-1, 1, full.size), "int32", "float32")
    W = make_csr(wide, rng.uniform(-1, 1, int(wide.sum())), "int32", "float32")
    results = []
    for left, right in ((A, A), (A, eye), (F, W), (A[:300, :300].tocsr(), A[:300, :300].tocsr())):
        check_spgemm(left, right, threads=2)
        results.append(spgemm(left, right, threads=2))
    assert True in moves and False in moves
    for C in results:
        assert C.data.flags.owndata and C.indices.flags.owndata


def test_two_pass_fallback(monkeypatch):
    """Where the room of the one-pass product would pass its budget, the symbolic pass runs
    first (the same result)."""
    monkeypatch.setattr(operators, "FUSED_ROOM_BYTES", 0)
    A = load_matrix("karate")
    check_spgemm(A, A)
    check_spgemm(A, A.T.tocsr(), threads=1)


def test_add_compacts_in_place():
    """A union whose operands share some coordinates writes fewer entries than its room: rows
    move down in place and the arrays shrink; the result owns them."""
    A = load_matrix("cora")
    B = scipy.sparse.csr_matrix(A[::-1])
    B = (B + A[:, ::-1]).tocsr()
    check_add(A, B, 1.5, -0.5)
    C = operators.add(A, B)
    assert C.data.base is None and C.indices.base is None


@pytest.mark.parametrize("idtype, dtype", [("int32", "float32"), ("int64", "float64")])
def test_packed_chunks_move_down_in_place(idtype, dtype, monkeypatch):
    """`add` and `multiply` in two chunks write each chunk's rows one after the other: the second
    chunk moves down over the room the first left (an overlapping move, in place), an empty
    matrix and one row stay right, and the result owns its arrays."""
    monkeypatch.setattr(host, "EWISE_GRAIN", 0)
    A = load_matrix("cora").astype(dtype)
    A.indices, A.indptr = A.indices.astype(idtype), A.indptr.astype(idtype)
    R = scipy.sparse.csr_matrix(A[::-1])
    R.indices, R.indptr = R.indices.astype(idtype), R.indptr.astype(idtype)
    for left, right in ((A, R), (A[:1], R[:1]), (A[:0], R[:0]), (A[:, :7], R[:, :7])):
        left, right = scipy.sparse.csr_matrix(left), scipy.sparse.csr_matrix(right)
        check_add(left, right, 2.0, -1.0, threads=2)
        check_multiply(left, right, threads=2)
    C = operators.add(A, R, threads=2)
    assert C.indices.dtype == np.dtype(idtype) and C.data.base is None and C.indices.base is None
    # Operands of one structure: each chunk's positions in one flat loop (`same_level_script`).
    S = A.copy()
    S.data = np.random.default_rng(1).standard_normal(A.nnz).astype(dtype)
    for left, right in ((A, S), (A[:1], S[:1]), (A[5:9], S[5:9])):
        left, right = scipy.sparse.csr_matrix(left), scipy.sparse.csr_matrix(right)
        check_add(left, right, 2.0, -1.0, threads=2)
        check_multiply(left, right, threads=2)
