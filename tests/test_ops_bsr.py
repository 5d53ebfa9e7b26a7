"""`sp.ops.spmm/sddmm(A, ..., format="bsr", block_size=b)` on the CPU: kernels on the padded
shape (`sp.transform.pad_shape`) with `schedules/bsr.py`, against scipy; and the per-call work of
the decomposed path (`sp.ops.parts`: the gather of A's values, SDDMM's results back to A's order,
the inf/NaN check on the rows of B that padding reads) against brute force, without compiling.

Seven kernels in all (each compile costs 3-7 s), every one on a matrix of random dense blocks at
80% fill, with a shape the block size does not divide and empty block rows; the width is a
run-time value where it is not a multiple of `TILE`, so widths 1, 5 and 33 share a kernel:

    b = 6, float32 / int32      SpMM and SDDMM above WHOLE_BLOCK, one row of the block at a time
    b = 6, float32 / int32      SpMM at width `TILE`: compiled for it, rows 3 at a time, the tile on the stack
    b = 6, float32 / int32      SpMM at width 2 `TILE`: rows 3 at a time, all columns unrolled, the tile on the stack
    b = 2, float64 / int64      SpMM and SDDMM, the whole block unrolled (b <= WHOLE_BLOCK)
    b = 2, float32 / int32      SpMM at width `TILE`: compiled for it, the tile on the stack

`tests/transform/test_pad_shape.py` runs the b = 2 float64 / int64 SpMM kernel too.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse

import format_rules
import sparsetir_py as sp
from schedules.bsr import STACK_BYTES, TILE, WHOLE_BLOCK
from sparsetir_py.codegen import cpu as cpu_codegen
from sparsetir_py.operands import as_csr
from sparsetir_py.ops import parts
from sparsetir_py.ops.kernels import KERNELS

assert 2 <= WHOLE_BLOCK < 5  # the two kernels above take the two branches of the schedules


def block_matrix(b: int, seed: int = 0, idtype=np.int32, dtype=np.float32) -> scipy.sparse.csr_matrix:
    """13 x 11 blocks of b x b, three per block row (block rows 2 and 7 empty), 80% of their
    cells stored, cut to (13 b - 1) x (11 b - 2): the last block row and column are partial."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((13 * b, 11 * b))
    for io in set(range(13)) - {2, 7}:
        for jo in rng.choice(11, size=3, replace=False):
            dense[io * b : io * b + b, jo * b : jo * b + b] = rng.standard_normal((b, b))
    dense[rng.random(dense.shape) > 0.8] = 0
    A = scipy.sparse.csr_matrix(dense[: 13 * b - 1, : 11 * b - 2].astype(dtype))
    A.indices, A.indptr = A.indices.astype(idtype), A.indptr.astype(idtype)
    return A


def check(A, b: int, widths=(1, 5, 33)) -> None:
    rng = np.random.default_rng(b)
    tol = 1e-4 if A.dtype == np.float32 else 1e-10
    for feat in widths:
        B = rng.standard_normal((A.shape[1], feat)).astype(A.dtype)
        C = sp.ops.spmm(A, B, format="bsr", block_size=b)
        assert C.shape == (A.shape[0], feat) and C.dtype == A.dtype
        np.testing.assert_allclose(C, A @ B, rtol=tol, atol=tol)
        X = rng.standard_normal((A.shape[0], feat)).astype(A.dtype)
        Y = rng.standard_normal((A.shape[1], feat)).astype(A.dtype)
        S = sp.ops.sddmm(A, X, Y, format="bsr", block_size=b)
        assert (S.indptr == A.indptr).all() and (S.indices == A.indices).all() and S.dtype == A.dtype
        np.testing.assert_allclose(S.data, A.multiply(X @ Y.T).tocsr().data, rtol=tol, atol=tol)


def test_bsr_row_by_row_float32():
    A = block_matrix(6)
    check(A, 6)
    # The parts' values and outputs are scratch reused across calls: an earlier result stays.
    rng = np.random.default_rng(7)
    X, Y = rng.standard_normal((2, A.shape[0], 4)).astype(np.float32), rng.standard_normal((A.shape[1], 4))
    first = sp.ops.sddmm(A, X[0], Y.astype(np.float32), format="bsr", block_size=6)
    second = sp.ops.sddmm(A, X[1], Y.astype(np.float32), format="bsr", block_size=6)
    for S, Xi in ((first, X[0]), (second, X[1])):
        np.testing.assert_allclose(S.data, A.multiply(Xi @ Y.T).tocsr().data, rtol=1e-4, atol=1e-4)


def test_bsr_whole_block_int64_float64():
    A = block_matrix(2, seed=1, idtype=np.int64, dtype=np.float64)
    check(A, 2, widths=(4, 33))
    # New values of the same structure: the conversion is reused, the values gathered again.
    A.data = np.random.default_rng(3).standard_normal(A.nnz)
    check(A, 2, widths=(3,))


def test_bsr_without_nonzeros_and_with_out():
    empty = scipy.sparse.csr_matrix((9, 7), dtype=np.float32)
    B = np.ones((7, 5), np.float32)
    assert not sp.ops.spmm(empty, B, format="bsr", block_size=6).any()
    assert sp.ops.sddmm(empty, np.ones((9, 5), np.float32), B, format="bsr", block_size=6).nnz == 0
    A = block_matrix(6, seed=2)  # 77 rows: C is computed with 78, `out` gets the first 77
    B = np.random.default_rng(2).standard_normal((A.shape[1], 5)).astype(np.float32)
    out = np.full((A.shape[0], 5), np.nan, np.float32)
    assert sp.ops.spmm(A, B, format="bsr", block_size=6, out=out) is out
    np.testing.assert_allclose(out, A @ B, rtol=1e-4, atol=1e-4)


def test_bsr_kernel_is_the_block_product_without_guards():
    A = block_matrix(2, idtype=np.int64, dtype=np.float64)
    sp.ops.spmm(A, np.ones((A.shape[1], 8)), format="bsr", block_size=2)
    sp.ops.spmm(block_matrix(6), np.ones((64, 8), np.float32), format="bsr", block_size=6)
    # The whole block unrolled (float64: tiles of TILE // 2); above WHOLE_BLOCK one row of the
    # block at a time (its b cells).
    for b, cells, tile in ((2, 4, TILE // 2), (6, 6, TILE)):
        sources = [
            k.source
            for key, k in KERNELS.items()
            if key.op == "spmm" and key.feat is None and f"block_size', {b})" in key.format
        ]
        assert sources
        source = sources[-1]
        assert "m_bsr" in source and " < m " not in source and " < n:" not in source  # no padding guard
        # The cells twice: in the full feature tiles (no guard) and in the last, partial one.
        blocks = [line.strip() for line in source.splitlines() if line.strip().startswith('# block "csrmm_bsr1')]
        assert len([x for x in blocks if "init" not in x]) == 2 * cells
        # C is zeroed where each block row is summed (`fold_block_init`), not by a nest of its own.
        assert any("init" in x for x in blocks) and "csrmm_init" not in source
        assert len(re.findall(rf"for k\w*_inner in range\({tile}\):", source)) == 1  # the full tiles


def test_bsr_rows_in_groups_at_the_width_of_a_tile():
    """At width `TILE` (the tile cached on the stack) b = 6 runs its rows 3 at a time: 3 cells
    unrolled, the block's columns a loop; one kernel for the width, no partial tile."""
    A = block_matrix(6, seed=8)
    B = np.random.default_rng(11).standard_normal((A.shape[1], TILE)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="bsr", block_size=6), A @ B, rtol=1e-4, atol=1e-4)
    (source,) = [k.source for key, k in KERNELS.items() if key.feat == TILE and "block_size', 6)" in key.format]
    blocks = [line.strip() for line in source.splitlines() if line.strip().startswith('# block "csrmm_bsr1')]
    assert len([x for x in blocks if "init" not in x]) == 3 and "stack_zeros(" in source


def test_bsr_rows_in_groups_above_the_width_of_a_tile():
    """At a width of whole tiles above `TILE` (compiled for it) b = 6 runs its rows 3 at a time,
    all 6 columns unrolled (18 cells), the block row's outputs in a stack tile; a partial last
    block row and column, empty block rows, and a call with `out=` repeated with a new B."""
    A = block_matrix(6, seed=9)
    rng = np.random.default_rng(12)
    out = np.full((A.shape[0], 2 * TILE), np.nan, np.float32)
    for _ in range(2):
        B = rng.standard_normal((A.shape[1], 2 * TILE)).astype(np.float32)
        assert sp.ops.spmm(A, B, format="bsr", block_size=6, out=out) is out
        np.testing.assert_allclose(out, A @ B, rtol=1e-4, atol=1e-4)
    (source,) = [k.source for key, k in KERNELS.items() if key.feat == 2 * TILE and "block_size', 6)" in key.format]
    blocks = [line.strip() for line in source.splitlines() if line.strip().startswith('# block "csrmm_bsr1')]
    assert len([x for x in blocks if "init" not in x]) == 18 and "stack_zeros(" in source


def test_the_schedule_knows_the_code_generators_stack_limit():
    """The schedule caches an output tile only where the code generator puts it on the stack."""
    assert STACK_BYTES == cpu_codegen.STACK_BYTES


def test_bsr_width_of_whole_tiles_keeps_the_tile_in_registers():
    """At a width that is a multiple of `TILE` the SpMM kernel is compiled for that width
    (`schedules.bsr.default`); with one tile, the block row's b x `TILE` outputs live in a
    local tile on the stack (`stack_zeros`) and C is written once per block row. Calls with
    `out=` repeat (`sp.ops.repeat`): a new B, A's values changed in place, cora (not made of
    blocks: padding everywhere), and a wrong `out` is still refused. One compile."""
    A = block_matrix(2, seed=3)  # float32 / int32, a partial last block row and column, empty block rows
    rng = np.random.default_rng(10)
    out = np.full((A.shape[0], TILE), np.nan, np.float32)
    for _ in range(2):
        B = rng.standard_normal((A.shape[1], TILE)).astype(np.float32)
        assert sp.ops.spmm(A, B, format="bsr", block_size=2, out=out) is out
        np.testing.assert_allclose(out, A @ B, rtol=1e-4, atol=1e-4)
        A.data *= 2  # in place: the next call gathers A's values again
    cora = sp.data.load_matrix("cora")
    B = rng.standard_normal((cora.shape[1], TILE)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(cora, B, format="bsr", block_size=2), cora @ B, rtol=1e-4, atol=1e-4)
    sources = [k.source for key, k in KERNELS.items() if key.feat == TILE and "block_size', 2)" in key.format]
    assert len(sources) == 1 and "stack_zeros(" in sources[0]
    with pytest.raises(sp.InputError, match="out"):
        sp.ops.spmm(A, B[: A.shape[1]], format="bsr", block_size=2, out=np.empty((A.shape[0], TILE), np.float64))


def test_bsr_inf_in_b():
    """A padding cell holds 0: where it meets an inf of B, BSR would give NaN where A stores
    nothing, so the call falls back to CSR; an inf only real nonzeros read runs BSR."""
    A = block_matrix(6)
    conversion = parts.converted(format_rules.bsr, A, {"block_size": 6}, "float32", "int32")
    padded = parts.padding_rows(conversion, 6, A.shape[1])
    read = np.unique(A.indices)
    B = np.random.default_rng(4).standard_normal((A.shape[1], 3)).astype(np.float32)
    for row in (padded[0], np.setdiff1d(read, padded)[0]):
        Binf = B.copy()
        Binf[row, 1] = np.inf
        for M in (A, A.tocoo()):  # COO: values from its own order, CSR's fallback from M itself
            C = sp.ops.spmm(M, Binf, format="bsr", block_size=6)
            with np.errstate(invalid="ignore"):
                np.testing.assert_allclose(C, A @ Binf, rtol=1e-4, atol=1e-4)  # NaN and inf where scipy has them


def padded_cells(A, b: int) -> set:
    """(block row, block column, ii, ji) of every cell of a stored block where A stores nothing."""
    coo = A.tocoo()
    stored = {(int(i) // b, int(j) // b) for i, j in zip(coo.row, coo.col)}
    cells = {(int(i) // b, int(j) // b, int(i) % b, int(j) % b) for i, j in zip(coo.row, coo.col)}
    return {(io, jo, ii, ji) for io, jo in stored for ii in range(b) for ji in range(b)} - cells


@pytest.mark.parametrize("b", [3, 4])
def test_padding_rows_are_the_columns_of_padded_cells(b):
    A = block_matrix(b, seed=5)
    conversion = parts.converted(format_rules.bsr, A, {"block_size": b}, "float32", "int32")
    expected = {jo * b + ji for _, jo, _, ji in padded_cells(A, b) if jo * b + ji < A.shape[1]}
    assert set(parts.padding_rows(conversion, b, A.shape[1]).tolist()) == expected
    blocks = scipy.sparse.csr_matrix(np.kron(np.eye(4), np.ones((b, b))))  # no padding at all
    full = parts.converted(format_rules.bsr, blocks, {"block_size": b}, "float32", "int32")
    assert not full.pads and len(parts.padding_rows(full, b, 4 * b)) == 0
    blocks[b, b + 1] = 0  # one padded cell: it reads row b + 1 of B
    blocks.eliminate_zeros()
    one = parts.converted(format_rules.bsr, blocks, {"block_size": b}, "float32", "int32")
    assert parts.padding_rows(one, b, 4 * b).tolist() == [b + 1]
    B = np.ones((4 * b, 2))
    B[0, 1] = np.inf
    assert parts.padding_is_exact(one, (None, b), B)
    B[b + 1, 0] = np.nan
    assert not parts.padding_is_exact(one, (None, b), B)


@pytest.mark.parametrize(
    "format, params",
    [("bsr", {"block_size": 3}), ("hyb", {"num_col_parts": 2, "buckets": [1, 2, 4]}), ("ell", {})],
)
def test_values_and_results_round_trip(format, params):
    """The parts' values are A's at the slots that hold a nonzero and 0 elsewhere; results
    written in the parts' slots come back in A's order (cora, a random rectangular int64 /
    float64 matrix with empty rows, and an empty one)."""
    rng = np.random.default_rng(6)
    R = scipy.sparse.random(41, 29, density=0.15, format="csr", random_state=6, dtype=np.float64)
    R = (scipy.sparse.diags((np.arange(41) % 7 != 3).astype(float)) @ R).tocsr()  # empty rows
    R.eliminate_zeros()
    R.indices, R.indptr = R.indices.astype(np.int64), R.indptr.astype(np.int64)
    for A in (sp.data.load_matrix("cora"), R, scipy.sparse.csr_matrix((6, 4), dtype=np.float32)):
        A = as_csr(A)  # canonical, as `sp.ops` converts it
        dtype = A.dtype
        idtype = "int64" if A.indices.dtype == np.int64 else "int32"
        conversion = parts.converted(parts.format_module(format), A, params, str(dtype), idtype)
        data = rng.standard_normal(A.nnz).astype(dtype)
        values = conversion.values(data, dtype)
        flat, outputs = conversion.outputs(dtype)
        for name, where in conversion.gathers.items():
            expected = np.where(where > 0, np.concatenate([[0], data])[where], 0)
            np.testing.assert_array_equal(values[name], expected)
            outputs["c" + name[1:]][...] = values[name]
        np.testing.assert_array_equal(conversion.stored_values(flat), data)
        # An SDDMM on `ones` (1 where a slot holds a nonzero) scaled by A's values on the way back.
        for name, where in conversion.ones(dtype).items():
            np.testing.assert_array_equal(where, (conversion.gathers[name] > 0).astype(dtype))
        np.testing.assert_array_equal(conversion.scaled_values(flat, 2 * data), 2 * data * data)


@pytest.mark.parametrize("bad", [0, -2, 2.5])
def test_bsr_bad_block_size(bad):
    A = block_matrix(2)
    with pytest.raises(sp.SparseTIRError, match="block_size"):
        sp.ops.spmm(A, np.ones((A.shape[1], 2), np.float32), format="bsr", block_size=bad)


def test_bsr_sddmm_applies_the_values_of_a_after_the_products():
    """BSR's SDDMM computes the dot products on a mask of ones and multiplies by A's values on
    the way back: inf and NaN values of A give what `A.multiply` gives (inf * 0 is NaN), new
    values of the same structure are used, and padding never reaches the result."""
    A = block_matrix(2, seed=4, idtype=np.int64, dtype=np.float64)
    rng = np.random.default_rng(8)
    X = rng.standard_normal((A.shape[0], 4))
    Y = rng.standard_normal((A.shape[1], 4))
    X[A.indptr.searchsorted(0, side="right") - 1] = 0  # the first stored row: its products are 0
    for data in (A.data, np.where(np.arange(A.nnz) % 5 == 0, np.inf, A.data), np.full(A.nnz, np.nan)):
        A.data = data.copy()
        S = sp.ops.sddmm(A, X, Y, format="bsr", block_size=2)
        with np.errstate(invalid="ignore"):
            expected = A.multiply(X @ Y.T).tocsr()
        np.testing.assert_allclose(S.data, expected.data, rtol=1e-10, atol=1e-10)  # NaN where scipy has NaN
        assert np.isnan(S.data).any() == np.isnan(expected.data).any()


def test_bsr_values_changed_in_place_are_gathered_again():
    """A call whose values equal, byte for byte, the last call's (same thread, same structure)
    reuses the gathered parts' values; any change, in place included, gathers again."""
    A = block_matrix(2, seed=6, idtype=np.int64, dtype=np.float64)
    B = np.random.default_rng(9).standard_normal((A.shape[1], 3))
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="bsr", block_size=2), A @ B, rtol=1e-10, atol=1e-10)
    for change in (lambda d: d.__imul__(2), lambda d: d.__setitem__(-1, -d[-1]), lambda d: d.__setitem__(0, np.nan)):
        change(A.data)  # in place: the same array object as the last call's
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(sp.ops.spmm(A, B, format="bsr", block_size=2), A @ B, rtol=1e-10, atol=1e-10)
    data = A.data.copy()
    A.data[0] = -0.0  # from NaN to -0.0 (bytes differ from +0.0 too)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="bsr", block_size=2), A @ B, rtol=1e-10, atol=1e-10)
    A.data = data  # back to the NaN: a new array, the same bytes as two calls ago
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(sp.ops.spmm(A, B, format="bsr", block_size=2), A @ B, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("threads", [1, 2])
def test_same_compares_bytes(threads, monkeypatch):
    from sparsetir_py.runtime import slots
    from sparsetir_py.runtime.slots import SAME_CHUNK, same

    monkeypatch.setattr(slots, "PARALLEL_ELEMENTS", 8)  # the parallel helpers on small arrays
    a = np.arange(5 * SAME_CHUNK + 5, dtype=np.float32)
    assert same(a, a.copy(), threads) and not same(a, a[:-1].copy(), threads)
    assert not same(a, a.astype(np.float64), threads)
    for at in (0, SAME_CHUNK, 3 * SAME_CHUNK + 7, a.size - 1):  # in each piece, and the tail
        b = a.copy()
        b[at] = np.nextafter(b[at], np.inf)
        assert not same(a, b, threads)
    n = np.array([np.nan, 0.0] * 8)
    assert same(n, n.copy(), threads) and not same(n, np.array([np.nan, -0.0] * 8), threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_gather_and_scaled_on_threads(threads, monkeypatch):
    """`gather` and `scaled` on one thread and on two give numpy's answer: 0 for a padding slot
    (-1) and for the extra slot of a nonzero no part holds."""
    from sparsetir_py.runtime import slots

    monkeypatch.setattr(slots, "PARALLEL_ELEMENTS", 8)
    rng = np.random.default_rng(3)
    data = rng.standard_normal(1000)
    index = rng.integers(-1, data.size, 777)
    got = slots.gather(data, index, np.full(index.size, np.nan), threads)
    np.testing.assert_array_equal(got, np.where(index >= 0, data[np.maximum(index, 0)], 0))
    flat = rng.standard_normal(300)
    where = rng.integers(0, flat.size, data.size)
    got = slots.scaled(data, flat, where, np.full(data.size, np.nan), threads)
    np.testing.assert_array_equal(got, np.where(where < flat.size - 1, data * flat[where], 0))


def test_bsr_and_other_inputs_are_converted_once_and_read_in_place():
    """A scipy BSR matrix of the format's block size runs with its own `data` as the parts'
    values (no gather, no copy); another block size, CSC and COO gather from their own `data` by
    an index made once per structure. Every call sees the values of that call."""
    from sparsetir_py.operands import reordering

    A = block_matrix(6, seed=5)
    A = scipy.sparse.csr_matrix(scipy.sparse.bmat([[A, None], [None, scipy.sparse.csr_matrix((1, 2))]]))
    A = A.astype(np.float32)  # (13 x 6) x (11 x 6): whole blocks, so that scipy's BSR takes it
    rng = np.random.default_rng(5)
    B = rng.standard_normal((A.shape[1], 5)).astype(np.float32)
    module = parts.format_module("bsr")
    for M in (A.tobsr((6, 6)), A.tobsr((3, 2)), A.tocsc(), A.tocoo()):
        for step in range(3):
            want = M.toarray().astype(np.float64) @ B
            np.testing.assert_allclose(sp.ops.spmm(M, B, format="bsr", block_size=6), want, rtol=1e-4, atol=1e-4)
            if step == 0:
                M.data *= 2  # in place
            else:
                M.data = rng.standard_normal(M.data.shape).astype(np.float32)  # a new array
        order = reordering(M)
        csr = as_csr(M)
        conversion = parts.converted(module, csr, {"block_size": 6}, "float32", "int32")
        in_place = M.format == "bsr" and M.blocksize == (6, 6)
        assert (order.take is not None and conversion._composed(order.take) is None) == in_place
