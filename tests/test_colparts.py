"""Column parts walked per row block: `format_rules.colparts`, `schedules.colparts`, and the
tuner's column-part candidates.

Checked: the conversion holds exactly A's nonzeros, each row of A in one row block, blocks
balanced by nonzeros, units in (block, part) order; `sp.ops.spmm(format="colparts")` equals
scipy on a real graph and on edge matrices (empty rows, empty matrices, rectangular, int64
indices, float64 values), through the shipped schedule (row blocks parallel, four nonzeros at a
time) and through a plain one; SDDMM through the schedule of any decomposition; a rule's
`shared_params` drop the shape guard and are checked; the tuner's model (no timing) proposes and
times column parts exactly where B outgrows the last-level cache. One kernel per dtype pair and
schedule: the cases share them (one width, one count of column parts).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

import format_rules
import sparsetir_py as sp
from schedules import colparts as schedules
from sparsetir_py import tuning
from sparsetir_py.data import load_matrix
from sparsetir_py.ops.scripts import spmm_script

PARTS = 3  # one count of column parts for every compiled case: one kernel per dtype pair
WIDTH = 8


def edge_cases():
    rng = np.random.default_rng(0)
    A = sps.random(40, 90, 0.1, format="csr", dtype=np.float32, random_state=1)
    A = A.tolil()
    A[3:9] = 0  # empty rows
    A = A.tocsr()
    wide = sps.random(5, 300, 0.3, format="csr", dtype=np.float32, random_state=2)  # more blocks than rows
    B64 = sps.random(30, 20, 0.3, format="csr", dtype=np.float64, random_state=3)
    B64 = sps.csr_matrix((B64.data, B64.indices.astype(np.int64), B64.indptr.astype(np.int64)), B64.shape)
    hub = sps.csr_matrix(
        (rng.uniform(-1, 1, 60).astype(np.float32), rng.integers(0, 50, 60), [0, 60] + [60] * 9), (10, 50)
    )
    hub.sum_duplicates()
    return {
        "empty rows": (A, 4),
        "more blocks than rows": (wide, 16),
        "int64 float64": (B64, 2),
        "one long row": (hub, 3),
        "no nonzeros": (sps.csr_matrix((6, 9), dtype=np.float32), 2),
        "no rows": (sps.csr_matrix((0, 9), dtype=np.float32), 2),
        "no columns": (sps.csr_matrix((7, 0), dtype=np.float32), 2),
    }


CASES = edge_cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_conversion_holds_each_row_in_one_block(name):
    A, blocks = CASES[name]
    args = format_rules.colparts.convert(A, num_col_parts=PARTS, row_blocks=blocks, dtype="float64")
    d = sp.format.decompose(A, format_rules.colparts, num_col_parts=PARTS, row_blocks=blocks)
    np.testing.assert_array_equal(d.reconstruct().toarray(), A.toarray())
    width = -(-A.shape[1] // PARTS) if A.shape[1] else 1
    head = args["indptr_colpart0"]
    assert len(head) == A.shape[0] + 1 and np.all(args["indices_colpart0"] // width == 0)  # part 0: CSR
    units, rows = args["unit_ptr_colparts"], args["rows_colparts"].astype(np.int64)
    tail = PARTS - 1
    assert len(units) == blocks * tail + 1 and units[-1] == len(rows) == args["nrows_colparts"]
    owner = np.repeat(np.arange(blocks * tail) // tail, np.diff(units))
    first = {}
    for r, b in zip(rows, owner):
        assert first.setdefault(r, b) == b  # a row of A in one row block only
    for u in range(blocks * tail):  # rows sorted within a unit; each unit's columns in its part
        assert np.all(np.diff(rows[units[u] : units[u + 1]]) > 0)
        lo, hi = args["indptr_colparts"][units[u]], args["indptr_colparts"][units[u + 1]]
        assert np.all(args["indices_colparts"][lo:hi] // width == u % tail + 1)


def test_row_blocks_are_balanced_by_nonzeros():
    A = load_matrix("pubmed")
    args = format_rules.colparts.convert(A, num_col_parts=2, row_blocks=4)
    units, indptr, rows = args["unit_ptr_colparts"], args["indptr_colparts"], args["rows_colparts"]
    ends = [rows[units[b + 1] - 1] + 1 for b in range(4)]  # each block's rows end before the next's
    per_block = np.diff(A.indptr[np.r_[0, ends]])  # A's nonzeros in each block's range of rows
    assert np.all(np.diff(ends) > 0) and per_block.sum() <= A.nnz
    assert per_block.max() < 1.02 * A.nnz / 4 + np.diff(A.indptr).max()


def test_bad_parameters_are_format_errors():
    A = load_matrix("karate")
    B = np.ones((A.shape[1], 2), np.float32)
    for params, message in [
        ({"num_col_parts": 0}, "num_col_parts must be a positive integer"),
        ({"row_blocks": 0}, "row_blocks must be a positive integer"),
        ({"row_blocks": 2**40}, "row_blocks must be at most 64"),
        ({"buckets": [1]}, "buckets"),
    ]:
        with pytest.raises((sp.FormatError, sp.InputError), match=message):
            sp.ops.spmm(A, B, format="colparts", **params)


@pytest.mark.parametrize("schedule", ["shipped", "plain"])
def test_spmm_equals_scipy(schedule):
    """The shipped schedule (x4, the width compiled in) on cora and every edge case, float32/int32
    and float64/int64 (two kernels); the plain one (`factor=None`) on the float32 ones (one)."""
    sched = None if schedule == "shipped" else schedules.colparts("cpu", PARTS, None)
    rng = np.random.default_rng(0)
    cases = {"cora": (load_matrix("cora"), 2), **CASES}
    if schedule == "plain":
        cases = {k: v for k, v in cases.items() if v[0].dtype == np.float32}
    for name, (A, blocks) in cases.items():
        B = rng.standard_normal((A.shape[1], WIDTH)).astype(A.dtype)
        C = sp.ops.spmm(A, B, format="colparts", num_col_parts=PARTS, row_blocks=blocks, schedule=sched)
        want = A.astype(np.float64) @ B.astype(np.float64)
        tol = 1e-4 if A.dtype == np.float32 else 1e-10
        np.testing.assert_allclose(C, want, rtol=tol, atol=tol, err_msg=name)
        out = np.full_like(C, np.nan)  # `out=`: every row written, empty ones included
        sp.ops.spmm(A, B, format="colparts", num_col_parts=PARTS, row_blocks=blocks, schedule=sched, out=out)
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol, err_msg=name)


def test_wide_rows_of_b_take_eight_nonzeros_at_a_time():
    """Rows of B of `X8_MIN_ROW_BYTES` or more (float64 at width 64) run eight nonzeros at a time
    in both nests; rows of every length from 0 to 19 in each column part reach no chunk of eight,
    full chunks and every remainder. One kernel (int64/float64, width 64)."""
    rng = np.random.default_rng(5)
    parts, n = PARTS, 3 * 40  # columns [0, 40), [40, 80), [80, 120): one per part
    rows = []
    for length in np.concatenate([np.arange(20), rng.permutation(20)]):
        # `length` nonzeros in each part (at most 40 columns a part): every remainder in every nest
        rows.append(np.concatenate([p * 40 + np.sort(rng.choice(40, length, replace=False)) for p in range(parts)]))
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int64)
    A = sps.csr_matrix((rng.standard_normal(len(indices)), indices, indptr), (len(rows), n))
    B = rng.standard_normal((n, 64))
    assert 64 * B.itemsize >= schedules.X8_MIN_ROW_BYTES
    for M in (A, CASES["int64 float64"][0]):
        Bm = B[: M.shape[1]]
        C = sp.ops.spmm(M, Bm, format="colparts", num_col_parts=parts, row_blocks=2)
        np.testing.assert_allclose(C, M @ Bm, rtol=1e-10, atol=1e-10)
    # The chunks of the generated code (rendered, not compiled), float32: eight at a time on rows
    # of 128 (512 bytes), four on rows of 64 (256 bytes) and of 8 (the width the others compile).
    rules = format_rules.colparts.rules(A, num_col_parts=parts, row_blocks=2)
    mod = sp.transform.remove_preprocess(sp.decompose_format(spmm_script(), rules))
    for width, factor, other in ((128, 8, 4), (64, 4, 8), (WIDTH, 4, 8)):
        source = sp.compile(mod, "cpu", schedule=schedules.colparts("cpu", parts), specialize={"feat": width}).source
        assert f"// {factor}" in source and f"// {other}" not in source, width


def test_sddmm_through_the_schedule_of_any_decomposition():
    A = load_matrix("citeseer")
    X = np.random.default_rng(1).standard_normal((A.shape[0], 4)).astype(np.float32)
    S = sp.ops.sddmm(A, X, X, format="colparts", num_col_parts=PARTS, row_blocks=2)
    np.testing.assert_allclose(S.toarray(), A.multiply(X @ X.T).toarray(), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(S.indices, A.indices)


def test_the_shipped_schedule_runs_blocks_in_parallel_and_parts_in_order():
    A = load_matrix("cora")
    rules = format_rules.colparts.rules(A, num_col_parts=PARTS, row_blocks=2)
    mod = sp.transform.remove_preprocess(sp.decompose_format(spmm_script(), rules))
    kernel = sp.compile(mod, "cpu", schedule=schedules.colparts("cpu", PARTS), specialize={"feat": WIDTH})
    source = kernel.source
    tail = PARTS - 1
    assert "split_bound(J_colpart0_indptr" in source  # part 0: rows split by nonzeros, as CSR
    assert f"numba.prange((blocks_colparts * {tail} + {tail - 1}) // {tail})" in source
    assert f"for o_colparts_inner in range({tail}):" in source
    assert "atomic" not in source and " < m and " not in source  # no atomics, no shape guard
    assert "csrmm_init" not in source  # part 0 zeroes each row before its nonzeros: no pass of its own


def test_a_schedule_for_another_count_of_parts_is_refused():
    """Split by another count of parts, one parallel iteration would hold units of two row blocks
    (or two iterations units of one): threads would race on rows of C. The schedule reads the
    count from the units loop and refuses before anything compiles."""
    A = load_matrix("cora")
    rules = format_rules.colparts.rules(A, num_col_parts=PARTS, row_blocks=2)
    mod = sp.transform.remove_preprocess(sp.decompose_format(spmm_script(), rules))
    for wrong in (2, PARTS + 1):
        with pytest.raises(sp.ScheduleError, match=f"expected a format of {wrong} column parts.*runs {PARTS} parts"):
            schedules.colparts_cpu(sp.Schedule(sp.lower_sparse_iter(mod)), wrong)


def test_shared_params_drop_the_shape_guard_and_are_checked():
    A = load_matrix("karate")
    head, shared = format_rules.colparts.rules(A, num_col_parts=2, row_blocks=2)
    for rule, guarded in [(shared, False), (shared.replace(shared_params=()), True)]:
        f = sp.transform.remove_preprocess(sp.decompose_format(spmm_script(), [rule]))["main"]
        names = [p.name for p in f.params]
        assert ("m_colparts" in names) == guarded and ("if " in f.script()) == guarded
    # A part over every row of A (part 0, its rows A's own axis length) carries the init; renamed,
    # it does not, and the output gets an init iteration of its own.
    for rule, carries in [(head, True), (head.replace(shared_params=()), False)]:
        f = sp.transform.remove_preprocess(sp.decompose_format(spmm_script(), [rule, shared]))["main"]
        assert ("csrmm_init" in f.script()) != carries and ("T.init()" in f.script()) == carries
    with pytest.raises(sp.FormatError, match="shared_params names `nrows_x`"):
        shared.replace(shared_params=("nrows_x",))
    with pytest.raises(sp.FormatError, match="shared_params names `a`"):  # a buffer, not a scalar
        shared.replace(shared_params=("a",))
    with pytest.raises(sp.FormatError, match="shared parameter `nrows` .* is not a parameter of"):
        sp.decompose_format(spmm_script(), [shared.replace(shared_params=("nrows",))])


# -------------------------------------------------------------------- the tuner (model only)
#: A machine with small caches, so that B of a small matrix outgrows them (no sysfs read).
SMALL = tuning.Machine(threads=2, l2_bytes=256 << 10, l3_bytes=1 << 20, cores=2)


def random_graph(m: int, n: int, per_row: int, seed: int = 0) -> sps.csr_matrix:
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n, size=(m, per_row))
    A = sps.csr_matrix((np.ones(cols.size, np.float32), cols.reshape(-1), np.arange(0, cols.size + 1, per_row)), (m, n))
    A.sum_duplicates()
    return A


def test_column_parts_are_candidates_and_timed_exactly_where_b_outgrows_the_cache():
    """B past the last-level cache (`SMALL`): column parts of a slice that fits it, and half as
    many, each with one row block per thread; `plan` times the best of them whatever the model's
    rank, and the family line says why. B that fits, SDDMM, CUDA, or too little work: none."""
    big = tuning.Structure.of(random_graph(3000, 40_000, 12))  # B of 19.5 MiB at width 128
    cands = tuning.candidates("spmm", big, 128, "cpu", SMALL)
    # A slice that fits 1 MiB needs 20 parts: capped at COLPARTS_MAX (4).
    assert [c.params for c in cands if c.format == "colparts"] == [{"num_col_parts": 4, "row_blocks": 2}]
    # B just past the cache: the parts whose slice fits (2); few columns: one part per 2048 of them.
    for n, w, parts in [(20_000, 16, [2]), (5000, 512, [2]), (4000, 512, [])]:
        s = tuning.Structure.of(random_graph(3000, n, 12))
        found = tuning.candidates("spmm", s, w, "cpu", SMALL, every=True)
        assert [c.params["num_col_parts"] for c in found if c.format == "colparts"] == parts
    timed, families = tuning.plan(cands, big, 128, SMALL, top=1)
    assert any(c.format == "colparts" for c in timed)
    assert families["colparts"].startswith("timed: B (19.5 MiB) outgrows the last-level cache (1 MiB)")
    assert "x CSR" in families["colparts"]
    small = tuning.Structure.of(random_graph(3000, 2000, 12))
    cands = tuning.candidates("spmm", small, 128, "cpu", SMALL, every=True)
    assert not any(c.format == "colparts" for c in cands)
    assert tuning.plan(cands, small, 128, SMALL, top=1)[1]["colparts"].startswith("not a candidate: B (1.0 MiB) fits")
    for op, target in [("sddmm", "cpu"), ("spmm", "cuda")]:
        assert not any(c.format == "colparts" for c in tuning.candidates(op, big, 128, target, SMALL, every=True))
    tiny = tuning.Structure.of(random_graph(20, 40_000, 4))  # 80 nonzeros: under BSR_MIN_NNZ
    assert not any(c.format == "colparts" for c in tuning.candidates("spmm", tiny, 128, "cpu", SMALL, every=True))
    few = tuning.Structure.of(random_graph(300, 40_000, 12))  # 3600 x 128 multiply-adds: under TIMING_GRAIN
    assert not any(c.format == "colparts" for c in tuning.candidates("spmm", few, 128, "cpu", SMALL))


def test_the_model_prices_column_parts_by_their_passes_over_c():
    """Each stored (row, later column part) pair reads and writes a row of C: the model's
    row_parts is the expected count of such pairs (close on rows whose nonzeros spread evenly),
    and more parts than a slice that fits the cache cost more."""
    A = random_graph(3000, 40_000, 12)
    s = tuning.Structure.of(A)
    args = format_rules.colparts.convert(A, num_col_parts=8, row_blocks=1)
    assert s.row_parts(8, skip=1) == pytest.approx(args["nrows_colparts"], rel=0.05)  # parts 1..7
    assert s.row_parts(1) == np.count_nonzero(np.diff(A.indptr))
    times = {p: tuning._model_colparts(s, 64, SMALL, p) for p in (2, 16, 64)}
    assert times[64] > times[16]
