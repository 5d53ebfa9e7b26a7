"""`sp.to_storage`: MLIR's storage scheme (positions / coordinates / values per level) and back.

The seeds' worked examples (the 16-element sparse vector, the 8x8 CSR with the corrected
`positions[1]`, the 2x2 BSR, NVIDIA's 2:4 matrix), MLIR's documented COO, and every level type on
drawn matrices: `to_dense` and `to_scipy` give the input back.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as hs
from strategies import csr_matrices, edge_matrices

import sparsetir_py as sp
from sparsetir_py.data import load_matrix

E = "#sparse_tensor.encoding<{ map = %s }>"
CSR = E % "(i, j) -> (i : dense, j : compressed)"
CSC = E % "(i, j) -> (j : dense, i : compressed)"
DCSR = E % "(i, j) -> (i : compressed, j : compressed)"
DCSC = E % "(i, j) -> (j : compressed, i : compressed)"
COO = E % "(i, j) -> (i : compressed(nonunique), j : singleton)"
COO_SOA = E % "(i, j) -> (i : compressed(nonunique), j : singleton(soa))"
BSR_2x2 = E % "(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)"
BSR_2x3 = E % "(i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)"
LOOSE = E % "(i, j) -> (i : dense, j : loose_compressed)"
NV_24 = E % "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4)"
DENSE = E % "(i, j) -> (i : dense, j : dense)"
NO_PAD = [CSR, CSC, DCSR, DCSC, COO, COO_SOA, LOOSE]


def test_seed_sparse_vector():
    v = np.zeros(16, dtype=np.float32)
    v[[3, 6, 9, 12]] = [1.1, 2.2, 3.3, 4.4]
    st = sp.to_storage(v, '#SparseVector = #sparse_tensor.encoding<{ lvlType = [ "compressed" ] }>')
    assert st.positions[0].tolist() == [0, 4]
    assert st.coordinates[0].tolist() == [3, 6, 9, 12]
    np.testing.assert_array_equal(st.values, np.float32([1.1, 2.2, 3.3, 4.4]))
    assert st.values.dtype == np.float32
    np.testing.assert_array_equal(st.to_dense(), v)


def _seed_8x8():
    m = np.zeros((8, 8), dtype=np.float32)
    m[0, 1], m[0, 4], m[7, 2] = 1.1, 2.2, 3.3
    return m


def test_seed_8x8_csr_with_corrected_positions():
    """The seed prints `[0, 2, 2, 2, 2, 2, 2, 3, 3]`; row 7 holds 3.3, so CSR gives `..., 2, 3]`."""
    m = _seed_8x8()
    st = sp.to_storage(m, '#CSR = #sparse_tensor.encoding<{ lvlTypes = [ "dense", "compressed" ] }>')
    assert st.positions[0] is None and st.coordinates[0] is None
    assert st.positions[1].tolist() == [0, 2, 2, 2, 2, 2, 2, 2, 3]
    assert st.coordinates[1].tolist() == [1, 4, 2]
    np.testing.assert_array_equal(st.values, np.float32([1.1, 2.2, 3.3]))
    row7 = slice(st.positions[1][7], st.positions[1][8])
    assert st.coordinates[1][row7].tolist() == [2] and st.values[row7].tolist() == [np.float32(3.3)]
    np.testing.assert_array_equal(st.to_dense(), m)


def test_dump_reads_like_mlir():
    st = sp.to_storage(_seed_8x8(), CSR)
    assert str(st) == "\n".join(
        [
            "---- Sparse Tensor ----",
            "nse = 3",
            "dim = ( 8, 8 )",
            "lvl = ( 8, 8 )",
            "positions[1] : ( 0, 2, 2, 2, 2, 2, 2, 2, 3 )",
            "coordinates[1] : ( 1, 4, 2 )",
            "values : ( 1.1, 2.2, 3.3 )",
            "----",
        ]
    )
    assert "SparseTensorStorage" in repr(st)


def test_seed_bsr_2x2():
    A = np.array(
        [[1, 2, 0, 0, 4, 0], [0, 3, 0, 0, 0, 5], [0, 0, 6, 7, 0, 0], [0, 0, 8, 0, 0, 0]],
        dtype=np.float64,
    )
    st = sp.to_storage(scipy.sparse.csr_matrix(A), BSR_2x2)
    assert st.positions[1].tolist() == [0, 2, 3]
    assert st.coordinates[1].tolist() == [0, 2, 1]
    assert st.values.tolist() == [1, 2, 0, 3, 4, 0, 0, 5, 6, 7, 8, 0]
    assert st.level_sizes == (2, 3, 2, 2)
    np.testing.assert_array_equal(st.to_dense(), A)
    np.testing.assert_array_equal(st.to_scipy().toarray(), A)
    assert st.to_scipy().nnz == 8  # block padding is not an entry of the matrix


# NVIDIA's sparse MMA example as the encoding seed prints it: 16 rows, 2 of every 4 columns.
NV_ROWS = [
    [0, 2, 0, 2, 0, 2, 0, 2],
    [1, 3, 1, 3, 1, 3, 1, 3],
    [0, 1, 2, 3, 0, 1, 2, 3],
    [2, 3, 0, 1, 2, 3, 0, 1],
    [0, 1, 0, 1, 0, 1, 0, 1],
    [0, 1, 0, 1, 0, 1, 0, 1],
    [2, 3, 2, 3, 2, 3, 2, 3],
    [2, 3, 2, 3, 2, 3, 2, 3],
] * 2


def test_seed_nv_2_4():
    crd = np.array(NV_ROWS)
    vals = np.array([[4 * (r % 8) + (k % 4) + 1 for k in range(8)] for r in range(16)], dtype=np.float32)
    A = np.zeros((16, 16), dtype=np.float32)
    for r in range(16):
        for k in range(8):
            A[r, 4 * (k // 2) + crd[r, k]] = vals[r, k]
    enc = sp.parse_encoding(
        "#NV_24 = #sparse_tensor.encoding<{ map = ( i, j ) -> ( i : dense, j floordiv 4 : dense, "
        "j mod 4 : block2_4), crdWidth = 2 }>"
    )
    st = sp.to_storage(A, enc)
    assert st.positions == [None, None, None] and st.coordinates[:2] == [None, None]
    np.testing.assert_array_equal(st.coordinates[2].reshape(16, 8), crd)
    np.testing.assert_array_equal(st.values.reshape(16, 8), vals)
    assert st.coordinates[2].dtype == np.int8
    np.testing.assert_array_equal(st.to_dense(), A)


def test_mlir_documented_coo():
    """MLIR's `sparse_tensor.assemble` example: 1.1 at (0, 0), 2.2 at (1, 2), 3.3 at (1, 3) of 3x4."""
    A = np.zeros((3, 4))
    A[0, 0], A[1, 2], A[1, 3] = 1.1, 2.2, 3.3
    st = sp.to_storage(A, COO)
    assert st.positions[0].tolist() == [0, 3]
    assert st.coordinates[0].tolist() == [0, 1, 1]
    assert st.coordinates[1].tolist() == [0, 2, 3]
    assert st.values.tolist() == [1.1, 2.2, 3.3]
    assert st.positions[1] is None


def test_dcsr_dcsc_csc_loose_of_one_matrix():
    A = np.array([[0, 0, 0, 0], [5, 0, 0, 6], [0, 0, 0, 0], [0, 7, 0, 0]], dtype=np.float32)
    dcsr = sp.to_storage(A, DCSR)
    assert dcsr.positions[0].tolist() == [0, 2] and dcsr.coordinates[0].tolist() == [1, 3]
    assert dcsr.positions[1].tolist() == [0, 2, 3] and dcsr.coordinates[1].tolist() == [0, 3, 1]
    dcsc = sp.to_storage(A, DCSC)
    assert dcsc.coordinates[0].tolist() == [0, 1, 3]
    assert dcsc.positions[1].tolist() == [0, 1, 2, 3] and dcsc.coordinates[1].tolist() == [1, 3, 1]
    assert dcsc.values.tolist() == [5, 7, 6]
    csc = sp.to_storage(A, CSC)
    ref = scipy.sparse.csc_matrix(A)
    assert csc.positions[1].tolist() == ref.indptr.tolist()
    assert csc.coordinates[1].tolist() == ref.indices.tolist()
    loose = sp.to_storage(A, LOOSE)
    assert loose.positions[1].tolist() == [0, 0, 0, 2, 2, 2, 2, 3]  # (lo, hi) per row
    for st in (dcsr, dcsc, csc, loose):
        np.testing.assert_array_equal(st.to_dense(), A)


def test_loose_compressed_with_gaps_reads_back():
    """A loose level may leave room between rows (as MLIR allows); to_dense follows (lo, hi)."""
    st = sp.to_storage(np.array([[1.0, 0, 2], [0, 3, 0]]), LOOSE)
    st.positions[1] = np.array([0, 2, 3, 4])
    st.coordinates[1] = np.array([0, 2, 9, 1])
    st.values = np.array([1.0, 2.0, 99.0, 3.0])
    np.testing.assert_array_equal(st.to_dense(), [[1.0, 0, 2], [0, 3, 0]])


def test_csf_and_3d_coo():
    rng = np.random.default_rng(3)
    T3 = rng.random((3, 4, 5)) * (rng.random((3, 4, 5)) < 0.3)
    csf = sp.to_storage(T3, E % "(i, j, k) -> (i : compressed, j : compressed, k : compressed)")
    nz = np.argwhere(T3)
    assert csf.coordinates[2].tolist() == nz[:, 2].tolist()
    assert csf.positions[2][-1] == len(nz)
    np.testing.assert_array_equal(csf.to_dense(), T3)
    coo = sp.to_storage(T3, E % "(i, j, k) -> (i : compressed(nonunique), j : singleton(nonunique), k : singleton)")
    for lvl in range(3):
        assert coo.coordinates[lvl].tolist() == nz[:, lvl].tolist()
    np.testing.assert_array_equal(coo.to_dense(), T3)
    mode = sp.to_storage(T3, E % "(i, j, k) -> (k : dense, i : compressed, j : compressed)")
    np.testing.assert_array_equal(mode.to_dense(), T3)
    bcoo = sp.to_storage(T3, E % "(i, j, k) -> (i : dense, j : compressed(nonunique, high), k : singleton)")
    np.testing.assert_array_equal(bcoo.to_dense(), T3)
    with pytest.raises(sp.EncodingError, match="2-D"):
        csf.to_scipy()


def test_ell_slices():
    A = np.array([[1, 0, 2, 0], [0, 0, 0, 0], [3, 4, 5, 0]], dtype=np.float64)
    st = sp.to_storage(A, E % "[c](i, j) -> (c * 3 * i : dense, i : dense, j : compressed)")
    assert st.level_sizes == (3, 3, 4)
    # slice s, row i: the s-th stored element of row i
    assert st.positions[2].tolist() == [0, 1, 1, 2, 3, 3, 4, 4, 4, 5]
    assert st.coordinates[2].tolist() == [0, 0, 2, 1, 2]
    assert st.values.tolist() == [1, 3, 2, 4, 5]
    np.testing.assert_array_equal(st.to_dense(), A)
    with pytest.raises(sp.EncodingError, match="outside slices 2"):
        sp.to_storage(A, E % "[c](i, j) -> (c * 2 * i : dense, i : dense, j : compressed)")


def test_widths_set_dtypes_and_never_wrap():
    A = scipy.sparse.random(8, 8, density=0.4, random_state=0, format="csr")
    st = sp.to_storage(A, E % "(i, j) -> (j : compressed, i : compressed), posWidth = 32, crdWidth = 8")
    assert st.positions[1].dtype == np.int32 and st.coordinates[1].dtype == np.int8
    assert st.positions[0].dtype == np.int32 and st.coordinates[0].dtype == np.int8
    native = sp.to_storage(A, CSR)
    assert native.positions[1].dtype == np.int64 and native.coordinates[1].dtype == np.int64
    wide = scipy.sparse.csr_matrix(np.ones((1, 200)))
    with pytest.raises(sp.EncodingError, match=r"positions\[1\] holds 200, which does not fit posWidth = 8"):
        sp.to_storage(wide, E % "(i, j) -> (i : dense, j : compressed), posWidth = 8")
    with pytest.raises(sp.EncodingError, match=r"coordinates\[1\] holds 199, which does not fit crdWidth = 8"):
        sp.to_storage(wide, E % "(i, j) -> (i : dense, j : compressed), crdWidth = 8")
    ok = sp.to_storage(wide, E % "(i, j) -> (i : dense, j : compressed), posWidth = 16, crdWidth = 16")
    assert ok.positions[1].tolist() == [0, 200] and ok.coordinates[1].dtype == np.int16


def test_not_2_4_sparse_raises():
    A = np.zeros((2, 8), dtype=np.float32)
    A[1, 4:7] = 1.0  # three of one group of four
    with pytest.raises(sp.EncodingError, match="not 2:4 sparse: group 3 at level 2 holds 3 elements"):
        sp.to_storage(A, NV_24)
    A[1, 6] = 0
    st = sp.to_storage(A, NV_24)
    np.testing.assert_array_equal(st.to_dense(), A)


def test_n_out_of_m_pads_groups():
    A = np.zeros((1, 8))
    A[0, 5] = 2.0
    st = sp.to_storage(A, E % "(i, j) -> (i : dense, j floordiv 8 : dense, j mod 8 : n_out_of_m(3, 8))")
    assert st.coordinates[2].tolist() == [0, 1, 5]
    assert st.values.tolist() == [0, 0, 2.0]


@pytest.mark.parametrize(
    ("A", "enc", "message"),
    [
        (np.ones((2, 2)), E % "(i) -> (i : compressed)", "1 dimensions"),
        (np.ones(3), CSR, "2 dimensions"),
        (np.float64(1.0), E % "(i) -> (i : compressed)", "rank >= 1"),
        (np.array([["a"]]), CSR, "numeric"),
        ("text", CSR, "scipy sparse matrix or a numpy array"),
        (np.ones((2, 2)), E % "(i, j) -> (i floordiv 2 : dense, j : compressed)", "not one-to-one"),
        (np.eye(2), E % "[s0](i, j) -> (i + s0 : dense, j : compressed)", "uses a symbol"),
        (np.eye(2), E % "(i, j) -> (i - j : dense, i : dense, j : compressed)", "can be negative"),
        (np.eye(2), E % "(i, j) -> (i : dense, j : compresed)", "did you mean"),
    ],
)
def test_bad_input_raises(A, enc, message):
    with pytest.raises(sp.EncodingError, match=message):
        sp.to_storage(A, enc)


def test_to_dense_needs_an_inverse():
    st = sp.to_storage(np.diag([1.0, 2.0, 0.0, 3.0]), E % "(i, j) -> (i floordiv 2 : dense, i + j : compressed)")
    assert st.level_sizes == (2, 7)
    with pytest.raises(sp.EncodingError, match="has no inverse"):
        st.to_dense()


def test_slices_select_the_view():
    A = np.arange(1, 37, dtype=np.float64).reshape(6, 6)
    st = sp.to_storage(
        A, E % "(i : #sparse_tensor<slice(1, 2, 2)>, j : #sparse_tensor<slice(0, 3, ?)>) -> (i : dense, j : compressed)"
    )
    np.testing.assert_array_equal(st.to_dense(), A[1:5:2, 0:3])


def test_storage_is_the_kernel_keyword_arguments():
    st = sp.to_storage(scipy.sparse.random(5, 6, density=0.5, random_state=2), BSR_2x3, name="x")
    args = dict(st)
    assert set(args) == {"x", "x_pos1", "x_crd1", "x_nnz1"}
    assert args["x_nnz1"] == st.positions[1][-1]
    assert args["x"] is st.values
    assert set(st.arguments("a")) == {"a", "a_pos1", "a_crd1", "a_nnz1"}
    assert "x_crd1" in st and len(st) == 4 and list(st) == list(st.keys())


def _round_trip(A, enc):
    st = sp.to_storage(A, enc)
    dense = A.toarray()
    np.testing.assert_array_equal(st.to_dense(), dense)
    back = st.to_scipy()
    np.testing.assert_array_equal(back.toarray(), dense)
    assert st.values.dtype == A.dtype
    if enc in NO_PAD:
        assert st.nse == A.nnz  # explicit zeros of A stay stored
    return st


@pytest.mark.parametrize("name", list(edge_matrices()))
@pytest.mark.parametrize("enc", [*NO_PAD, BSR_2x3, DENSE])
def test_edge_matrices_round_trip(name, enc):
    _round_trip(edge_matrices()[name], enc)


def test_real_matrix_round_trip():
    A = load_matrix("cora", dtype=np.float64)
    for enc in (CSR, CSC, DCSR, COO, BSR_2x2):
        st = _round_trip(A, enc)
    csr = sp.to_storage(A, CSR)
    np.testing.assert_array_equal(csr.positions[1], A.indptr)
    np.testing.assert_array_equal(csr.coordinates[1], A.indices)


def _two_of_four(A: scipy.sparse.csr_matrix) -> scipy.sparse.csr_matrix:
    dense = A.toarray()
    m, n = dense.shape
    for i in range(m):
        for g in range(0, n, 4):
            nz = np.flatnonzero(dense[i, g : g + 4])
            dense[i, g + nz[2:]] = 0
    return scipy.sparse.csr_matrix(dense)


@settings(max_examples=25, deadline=None)
@given(A=csr_matrices(max_rows=12, max_cols=12), enc=hs.sampled_from([*NO_PAD, BSR_2x2, BSR_2x3]))
def test_drawn_round_trip(A, enc):
    """Drawn shapes, densities, empty rows, all-zero and 1x1 matrices, int64 indices, float64."""
    _round_trip(A, enc)


@settings(max_examples=15, deadline=None)
@given(A=csr_matrices(max_rows=10, max_cols=13))
def test_drawn_ell_and_2_4(A):
    widest = int(np.diff(A.indptr).max()) if A.shape[0] else 0
    ell = E % f"[c](i, j) -> (c * {max(widest, 1)} * i : dense, i : dense, j : compressed)"
    _round_trip(A, ell)
    B = _two_of_four(A)
    st = sp.to_storage(B, NV_24)
    np.testing.assert_array_equal(st.to_dense(), B.toarray())
    assert st.nse == A.shape[0] * -(-A.shape[1] // 4) * 2


# ---------------------------------------------------------------------------------------------
# Storage that cannot exist: a named error with the offending value, before numpy allocates or
# wraps; never a numpy error, never a silently wrong coordinate.

HUGE = 2**40


def _one_element(shape, at):
    return scipy.sparse.coo_matrix(([1.0], ([at[0]], [at[1]])), shape=shape)


@pytest.mark.parametrize(
    ("A", "enc", "message"),
    [
        # dense levels of a 2^40 x 2^40 tensor (2^80 values; the first level alone is too many)
        (_one_element((HUGE, HUGE), (3, 4)), DENSE, "1099511627776 entries"),
        (_one_element((2**20, 2**20), (3, 4)), DENSE, "1099511627776 entries"),
        # CSR's positions of 2^20 + 1 entries are fine, 2^40 + 1 are not
        (_one_element((HUGE, 2), (3, 1)), CSR, "1099511627776"),
        (_one_element((2**20, HUGE), (3, 4)), E % "(i, j) -> (i : dense, j : compressed, j : dense)", "1099511627776"),
        # ELL with 1111111111111111111 slices per row
        (np.eye(3), E % "[c](i, j) -> (c * 1111111111111111111 * i : dense, i : dense, j : compressed)", "slices"),
        (np.eye(3), E % "[c](i, j) -> (c * 1111111111111111111 * i : dense, i : dense, j : compressed)", "1111111111"),
        # coordinates that wrap in int64: element (4, 1) would land on 1
        (
            _one_element((5, 2), (4, 1)),
            E % "(i, j) -> (i * 4611686018427387904 + j : compressed)",
            "18446744073709551616",
        ),
        (
            np.eye(3),
            E % "(i, j) -> (i : dense, j floordiv 4611686018427387904 floordiv 4 : compressed)",
            "does not fit",
        ),
        (np.eye(3), E % "(i, j) -> (i : dense, j floordiv 10000000000000000000 : compressed)", "does not fit"),
        (np.eye(3), E % "(i, j) -> (i * 9223372036854775807 : dense, j : compressed)", "does not fit"),
        (np.eye(3), E % "(i, j) -> (i : dense, j - 9223372036854775807 - 9 : compressed)", "does not fit"),
        (np.eye(3), E % "(i, j) -> (i : dense, j - 9223372036854775807 : compressed)", "can be negative"),
        (np.eye(3), E % "(i, j) -> (i : dense, 9223372036854775807 - j : compressed)", "9223372036854775808"),
        (np.eye(3), E % "(i, j) -> (i : dense, (j + 9223372036854775807) floordiv 2 : compressed)", "does not fit"),
        (
            np.eye(3),
            E % "(i, j) -> (i : dense, j : dense, j mod 4611686018427387904 : n_out_of_m(2, 4611686018427387904))",
            "groups of 4611686018427387904",
        ),
    ],
)
def test_storage_that_cannot_exist_raises(A, enc, message):
    with pytest.raises((sp.EncodingError, sp.InputError)) as info:
        sp.to_storage(A, enc)
    assert message in str(info.value), str(info.value)


def test_coordinates_near_the_int64_limit_are_exact():
    """`i * 2^62 + j` fits int64 on a 2 x 2 matrix: element (1, 1) is stored at 2^62 + 1."""
    st = sp.to_storage(_one_element((2, 2), (1, 1)), E % "(i, j) -> (i * 4611686018427387904 + j : compressed)")
    assert st.coordinates[0].tolist() == [2**62 + 1]
    assert st.level_sizes == (2**62 + 2,)


def test_huge_shapes_store_sparsely_and_refuse_dense_copies():
    A = _one_element((HUGE, HUGE), (3, 4))
    st = sp.to_storage(A, COO)
    assert st.coordinates[1].tolist() == [4] and st.values.tolist() == [1.0]
    with pytest.raises(sp.EncodingError, match="1208925819614629174706176"):
        st.to_dense()
    with pytest.raises(sp.EncodingError, match="1099511627776 rows"):
        st.to_scipy()
    dcsr = sp.to_storage(A, DCSR)
    assert dcsr.positions[0].tolist() == [0, 1] and dcsr.coordinates[0].tolist() == [3]


def test_print_summarises_long_arrays():
    """Like numpy: an array over its print threshold shows its first and last 3 entries."""
    A = scipy.sparse.random(200, 300, density=0.1, format="csr", random_state=0)
    text = str(sp.to_storage(A, CSR))
    assert len(text) < 2000
    assert "positions[1] : ( 0, " in text and ", ..., " in text
    assert f"nse = {A.nnz}" in text
    small = str(sp.to_storage(np.eye(3), CSR))
    assert "..." not in small and "values : ( 1.0, 1.0, 1.0 )" in small
    with np.printoptions(threshold=10**9):
        assert "..." not in str(sp.to_storage(A, CSR))


@pytest.mark.parametrize("big", [2**63, 2**64, 10**30])
def test_encodings_built_in_python_with_huge_constants_raise(big):
    """An encoding object made without the parser (whose text bounds these) is checked too:
    numpy would raise OverflowError on a divisor or coefficient beyond int64."""
    import dataclasses

    from sparsetir_py.arith import dim

    csr = sp.parse_encoding(CSR)
    for exprs in [(dim(0).floordiv(big), dim(1)), (dim(0) * big, dim(1)), (dim(0) + big, dim(1))]:
        enc = dataclasses.replace(csr, level_exprs=exprs)
        with pytest.raises(sp.EncodingError, match=str(big)):
            sp.to_storage(np.eye(3), enc)
