"""`sp.data.load_matrix` on broken files: `sp.InputError` naming what is wrong, or a valid matrix.

A matrix file is input the user does not control (downloaded, truncated, hand-edited), and
scipy's constructors crash the process or build an invalid matrix from broken arrays. The loader
reads the raw arrays itself and checks them (the checks of `sp.ops`, in `sparsetir_py.inputs`)
before scipy sees them. The fuzz tests mutate valid `.npz` and Matrix Market files (fields,
bytes, headers) and ask for the same: an `InputError`, or a canonical CSR matrix that stores the
entries of the file. They are seeded and cheap in the default run (`tests/fuzzing.py`).
"""

from __future__ import annotations

import bz2
import gzip
import io
import subprocess
import sys
import zipfile

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sps
from fuzzing import fuzz
from hypothesis import event, given
from hypothesis import strategies as st
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py.data import load_matrix


@pytest.fixture(autouse=True, scope="module")
def memory_budget():
    """A fixed budget, so that what a drawn file may allocate (an indptr for 2**31 rows, say)
    does not depend on the machine that runs the tests."""
    before = sp.data.MEMORY_LIMIT
    sp.data.MEMORY_LIMIT = 2**30
    yield
    sp.data.MEMORY_LIMIT = before


def assert_valid_csr(A, index_dtype=np.int32, dtype=np.float32) -> None:
    """What `load_matrix` promises: canonical CSR whose arrays fit its shape and dtypes."""
    assert isinstance(A, sps.csr_matrix)
    m, n = A.shape
    assert A.indptr.dtype == index_dtype and A.indices.dtype == index_dtype and A.data.dtype == dtype
    assert len(A.indptr) == m + 1 and A.indptr[0] == 0 and (np.diff(A.indptr) >= 0).all()
    assert A.indptr[-1] == len(A.indices) == len(A.data)
    if len(A.indices):
        assert A.indices.min() >= 0 and A.indices.max() < n
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    order = np.lexsort((A.indices, rows))
    assert (order == np.arange(len(order))).all()
    assert not ((rows[1:] == rows[:-1]) & (A.indices[1:] == A.indices[:-1])).any()
    assert A.has_canonical_format


def mtx(header: str, *lines: str) -> str:
    return "\n".join([header, *lines]) + "\n"


COORD = "%%MatrixMarket matrix coordinate real general"


# -------------------------------------------------------------------- finding 1: malformed .npz
def test_npz_with_a_falling_indptr_is_an_input_error(tmp_path):
    """scipy raised a ValueError and then aborted the process ("double free or corruption")."""
    p = tmp_path / "p.npz"
    np.savez(
        p, format=np.array("csr"), shape=np.array([3, 3]), data=np.ones(3), indices=np.array([0, 1, 2]),
        indptr=np.array([0, 2, 1, 3]),
    )  # fmt: skip
    with pytest.raises(sp.InputError, match=r"non-decreasing, but falls from 2 to 1 at row 1"):
        load_matrix(p)


def test_npz_with_a_column_past_the_shape_is_an_input_error(tmp_path):
    """scipy built a 3x3 matrix flagged canonical that held column 5; `toarray()` wrote out of bounds."""
    p = tmp_path / "p.npz"
    np.savez(
        p, format=np.array("csr"), shape=np.array([3, 3]), data=np.ones(3), indices=np.array([0, 5, 2]),
        indptr=np.array([0, 1, 2, 3]),
    )  # fmt: skip
    with pytest.raises(sp.InputError, match=r"must lie in \[0, 3\), got values in \[0, 5\]"):
        load_matrix(p)


def test_the_reported_files_do_not_crash_the_process(tmp_path):
    """The process itself survives (a crash would take pytest down with it, so run it apart)."""
    code = f"""
import numpy as np, sparsetir_py as sp
for indices, indptr in (([0, 1, 2], [0, 2, 1, 3]), ([0, 5, 2], [0, 1, 2, 3])):
    p = {str(tmp_path / "p.npz")!r}
    np.savez(p, format=np.array("csr"), shape=np.array([3, 3]), data=np.ones(3), indices=np.array(indices),
             indptr=np.array(indptr))
    try:
        sp.data.load_matrix(p)
    except sp.InputError:
        print("InputError")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["InputError", "InputError"]


# -------------------------------------------------------------------- finding 3: index width
def test_mtx_with_more_columns_than_int32_is_an_input_error(tmp_path):
    """3,000,000,000 columns loaded with int32 indices [-1294967297, 0] before."""
    p = tmp_path / "wide.mtx"
    p.write_text(mtx(COORD, "2 3000000000 2", "1 1 1.0", "2 3000000000 2.0"))
    with pytest.raises(sp.InputError, match=r"3000000000\).*int32.*index_dtype='int64'"):
        load_matrix(p)
    A = load_matrix(p, index_dtype="int64")
    assert_valid_csr(A, np.int64)
    assert A.shape == (2, 3_000_000_000)
    assert A.indices.tolist() == [0, 2_999_999_999] and A.data.tolist() == [1.0, 2.0]


def test_npz_past_int32_loads_with_int64_indices_only(tmp_path):
    """A shape past int32 is refused for int32 indices; with int64 a COO matrix of 2**40 columns loads."""
    p = tmp_path / "wide.npz"
    np.savez(p, format=np.array("coo"), shape=np.array([3, 2**40]), data=np.ones(1), row=np.zeros(1, np.int64),
             col=np.array([2**35]))  # fmt: skip
    with pytest.raises(sp.InputError, match=f"{2**40}.*at most 2147483647"):
        load_matrix(p)
    A = load_matrix(p, index_dtype=np.int64)
    assert_valid_csr(A, np.int64)
    assert A.shape == (3, 2**40) and A.indices.tolist() == [2**35]


def test_a_row_count_beyond_memory_is_refused_before_indptr_is_allocated(tmp_path):
    """A COO file of one entry may declare 2**62 rows; CSR would need an indptr of that length."""
    p = tmp_path / "tall.npz"
    np.savez(p, format=np.array("coo"), shape=np.array([2**62, 3]), data=np.ones(1), row=np.zeros(1, np.int64),
             col=np.zeros(1, np.int64))  # fmt: skip
    with pytest.raises(sp.InputError, match=f"{2**62} rows.*GiB"):
        load_matrix(p, index_dtype=np.int64)


def npy(shape, dtype, payload: bytes) -> bytes:
    """A `.npy` file whose header declares `shape` and `dtype`, followed by `payload`."""
    out = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + payload


def test_an_npy_header_that_declares_more_than_stored_is_refused(tmp_path):
    """numpy would allocate what the header declares (here 8 TB) before reading the bytes."""
    p = tmp_path / "lies.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("format.npy", npy((), "<U3", "csr".encode("utf-32-le")))
        z.writestr("shape.npy", npy((2,), "<i8", np.array([3, 3]).tobytes()))
        z.writestr("data.npy", npy((2**40,), "<f8", np.ones(3).tobytes()))
        z.writestr("indices.npy", npy((3,), "<i8", np.arange(3).tobytes()))
        z.writestr("indptr.npy", npy((4,), "<i8", np.arange(4).tobytes()))
    with pytest.raises(sp.InputError, match=r"`lies.npz.data` declares shape \(1099511627776,\)"):
        load_matrix(p)


# -------------------------------------------------------------------- finding 11: raw exceptions
def test_a_broken_zip_is_an_input_error(tmp_path):
    A = sps.random(20, 20, density=0.2, format="csr", random_state=0)
    sps.save_npz(tmp_path / "a.npz", A)
    raw = (tmp_path / "a.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(sp.InputError, match="cut.npz"):
        load_matrix(tmp_path / "cut.npz")
    (tmp_path / "text.npz").write_text("not a zip\n")
    with pytest.raises(sp.InputError, match="text.npz"):
        load_matrix(tmp_path / "text.npz")


def test_a_truncated_mtx_gz_is_an_input_error(tmp_path):
    A = sps.random(30, 30, density=0.3, format="csr", random_state=0)
    buf = io.BytesIO()
    scipy.io.mmwrite(buf, A)
    packed = gzip.compress(buf.getvalue())
    (tmp_path / "cut.mtx.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(sp.InputError, match="cut.mtx.gz"):
        load_matrix(tmp_path / "cut.mtx.gz")
    (tmp_path / "cut.mtx.bz2").write_bytes(bz2.compress(buf.getvalue())[:100])
    with pytest.raises(sp.InputError, match="cut.mtx.bz2"):
        load_matrix(tmp_path / "cut.mtx.bz2")


def test_a_header_value_out_of_range_is_an_input_error(tmp_path):
    p = tmp_path / "big.mtx"
    p.write_text(mtx(COORD, "99999999999999999999999 3 1", "1 1 1.0"))
    with pytest.raises(sp.InputError, match="big.mtx"):
        load_matrix(p)


def test_a_huge_dense_array_is_refused_before_it_is_allocated(tmp_path):
    p = tmp_path / "dense.mtx"
    p.write_text(mtx("%%MatrixMarket matrix array real general", "200000 200000", "1.0"))
    with pytest.raises(sp.InputError, match=r"200000 x 200000"):
        load_matrix(p)


@pytest.mark.parametrize("name", ["X.MTX", "X.Mtx.Gz", "X.MTX.BZ2", "X.NPZ"])
def test_uppercase_suffixes_are_matrix_files(tmp_path, name):
    A = sps.csr_matrix(np.array([[0, 2.5], [1, 0]]))
    p = tmp_path / name
    if name.lower().endswith(".npz"):
        sps.save_npz(p, A)
    else:
        buf = io.BytesIO()
        scipy.io.mmwrite(buf, A)
        raw = buf.getvalue()
        p.write_bytes(gzip.compress(raw) if name.endswith("Gz") else bz2.compress(raw) if "BZ2" in name else raw)
    got = load_matrix(p)
    assert_valid_csr(got)
    np.testing.assert_array_equal(got.toarray(), A.toarray())
    with pytest.raises(KeyError, match="no matrix file"):
        load_matrix(tmp_path / ("missing" + name))


# -------------------------------------------------------------------- .npz, field by field
CSR = {
    "format": np.array("csr"),
    "shape": np.array([3, 3]),
    "data": np.array([1.0, 2.0, 3.0]),
    "indices": np.array([0, 2, 1]),
    "indptr": np.array([0, 2, 2, 3]),
}
BSR = {
    "format": np.array("bsr"),
    "shape": np.array([4, 4]),
    "data": np.ones((2, 2, 2)),
    "indices": np.array([0, 1]),
    "indptr": np.array([0, 1, 2]),
}
COO = {
    "format": np.array("coo"),
    "shape": np.array([3, 3]),
    "data": np.array([1.0, 2.0]),
    "row": np.array([0, 2]),
    "col": np.array([1, 1]),
}
DIA = {"format": np.array("dia"), "shape": np.array([3, 3]), "data": np.ones((2, 3)), "offsets": np.array([0, 1])}
DROP = None

# (base arrays, changes (DROP removes the array), what the message says)
MALFORMED_NPZ = {
    "format_unknown": (CSR, {"format": np.array("lil")}, "format 'lil'; expected one of csr, csc, bsr, coo, dia"),
    "format_missing": (CSR, {"format": DROP}, "has no `format` array"),
    "format_pickled": (CSR, {"format": np.array(["csr"], dtype=object)}, "holds Python objects"),
    "format_number": (CSR, {"format": np.array(3)}, "`p.npz.format` must be a string"),
    "shape_three_numbers": (CSR, {"shape": np.array([3, 3, 1])}, "must be 2-D"),
    "shape_negative": (CSR, {"shape": np.array([-3, 3])}, "invalid shape"),
    "shape_float": (CSR, {"shape": np.array([3.0, 3.0])}, "`p.npz.shape` must be integers"),
    "shape_past_int64": (CSR, {"shape": np.array([2**64 - 1, 3], np.uint64)}, "at most 9223372036854775807"),
    "shape_2d": (CSR, {"shape": np.array([[3, 3]])}, "`p.npz.shape` must be integers"),
    "shape_missing": (CSR, {"shape": DROP}, "has no `shape` array"),
    "indptr_float": (CSR, {"indptr": np.array([0.0, 2, 2, 3])}, "`p.npz.indptr` must be a 1-D integer array"),
    "indptr_2d": (CSR, {"indptr": np.array([[0, 2, 2, 3]])}, "`p.npz.indptr` must be a 1-D integer array"),
    "indptr_short": (CSR, {"indptr": np.array([0, 2, 3])}, "must have 4 entries"),
    "indptr_start": (CSR, {"indptr": np.array([1, 2, 2, 3])}, "must start at 0, got 1"),
    "indptr_past_indices": (CSR, {"indptr": np.array([0, 2, 2, 4])}, "ends at 4"),
    "indptr_missing": (CSR, {"indptr": DROP}, "has no `indptr` array"),
    "indices_2d": (CSR, {"indices": np.array([[0, 2, 1]])}, "`p.npz.indices` must be a 1-D integer array"),
    "indices_negative": (CSR, {"indices": np.array([0, -1, 1])}, r"must lie in \[0, 3\), got values in \[-1, 1\]"),
    "indices_uint_huge": (CSR, {"indices": np.array([0, 2**64 - 1, 1], np.uint64)}, "18446744073709551615"),
    "data_short": (CSR, {"data": np.ones(2)}, "the structure stores 3"),
    "data_complex": (CSR, {"data": np.ones(3, complex)}, "complex"),
    "data_strings": (CSR, {"data": np.array(["a", "b", "c"])}, "must hold real numbers"),
    "data_pickled": (CSR, {"data": np.array([1, 2, 3], dtype=object)}, "holds Python objects"),
    "csc_index_past_rows": (CSR, {"format": np.array(b"csc"), "shape": np.array([2, 3])}, r"must lie in \[0, 2\)"),
    "bsr_data_2d": (BSR, {"data": np.ones((2, 4))}, "3-D array of blocks"),
    "bsr_block_does_not_divide": (BSR, {"shape": np.array([5, 4])}, "does not divide"),
    "bsr_block_column_past_shape": (BSR, {"indices": np.array([0, 2])}, r"must lie in \[0, 2\)"),
    "coo_row_past_shape": (COO, {"row": np.array([0, 3])}, r"row indices must lie in \[0, 3\)"),
    "coo_row_scalar": (COO, {"row": np.array(0)}, "row indices must be a 1-D integer array"),
    "coo_col_missing": (COO, {"col": DROP}, "has no `col` array"),
    "coo_lengths_differ": (COO, {"col": np.array([1])}, "column indices has 1 entries, expected 2"),
    "coo_coords_three_rows": (COO, {"row": DROP, "col": DROP, "coords": np.zeros((3, 2), int)}, "must be 2 x nnz"),
    "dia_offsets_repeat": (DIA, {"offsets": np.array([1, 1])}, "must be distinct"),
    "dia_offset_outside": (DIA, {"offsets": np.array([0, 3])}, r"must lie in \(-3, 3\)"),
    "dia_offset_int64_min": (DIA, {"offsets": np.array([0, -(2**63)])}, r"must lie in \(-3, 3\)"),
    "dia_data_1d": (DIA, {"data": np.ones(3)}, "2-D array of diagonals"),
    "dia_lengths_differ": (DIA, {"offsets": np.array([0])}, "has 1 entries, but"),
}


def save_arrays(path, base: dict, changes: dict) -> dict:
    arrays = {k: v for k, v in {**base, **changes}.items() if v is not None}
    np.savez(path, **arrays)
    return arrays


@pytest.mark.parametrize("case", list(MALFORMED_NPZ))
def test_malformed_npz_raises_input_error_naming_the_problem(tmp_path, case):
    base, changes, message = MALFORMED_NPZ[case]
    save_arrays(tmp_path / "p.npz", base, changes)
    with pytest.raises(sp.InputError, match=message):
        load_matrix(tmp_path / "p.npz")


def _variants() -> dict:
    """Valid files of every format and some unusual dtypes, as scipy writes or would read them."""
    A = sps.random(6, 8, density=0.4, format="csr", random_state=1, dtype=np.float64)
    A.data = np.round(A.data * 8)  # exact in float16 too
    unsorted = A.copy()
    unsorted.indices = unsorted.indices.copy()
    for r in range(6):  # reverse each row, and a duplicate of the first entry
        lo, hi = unsorted.indptr[r], unsorted.indptr[r + 1]
        unsorted.indices[lo:hi] = unsorted.indices[lo:hi][::-1].copy()
        unsorted.data[lo:hi] = unsorted.data[lo:hi][::-1].copy()
    csr = {"format": np.array(b"csr"), "shape": np.array(A.shape), "data": A.data, "indices": A.indices,
           "indptr": A.indptr}  # fmt: skip
    return {
        "csr": A,
        "csc": A.tocsc(),
        "bsr": A.tobsr(blocksize=(2, 2)),
        "coo": A.tocoo(),
        "dia": A.todia(),
        "csr_array": sps.csr_array(A),
        "unsorted": unsorted,
        "big_endian": {**csr, "indices": A.indices.astype(">i8"), "data": A.data.astype(">f8")},
        "uint16_indices": {**csr, "indices": A.indices.astype(np.uint16), "indptr": A.indptr.astype(np.uint16)},
        "int8_values": {**csr, "data": A.data.astype(np.int8)},
        "bool_values": {**csr, "data": A.data != 0},
        "float16_values": {**csr, "data": A.data.astype(np.float16)},
        "storage_past_indptr": {**csr, "data": np.append(A.data, 9.0), "indices": np.append(A.indices, 99)},
        "coo_coords": {
            "format": np.array("coo"),
            "shape": np.array(A.shape),
            "data": A.tocoo().data,
            "coords": np.array(A.tocoo().coords),
        },
        "dia_fortran": {
            "format": np.array("dia"),
            "shape": np.array(A.shape),
            "data": np.asfortranarray(A.todia().data),
            "offsets": A.todia().offsets,
        },
    }


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("case", list(_variants()))
def test_valid_npz_of_every_format_loads_as_scipy_reads_it(tmp_path, case, compressed):
    made = _variants()[case]
    path = tmp_path / "v.npz"
    if isinstance(made, dict):
        (np.savez_compressed if compressed else np.savez)(path, **made)
        want = stored_entries(made)
    else:
        sps.save_npz(path, made, compressed=compressed)
        want = stored_entries(dict(np.load(path)))
    for index_dtype in (np.int32, np.int64):
        got = load_matrix(path, dtype=np.float64, index_dtype=index_dtype)
        assert_valid_csr(got, index_dtype, np.float64)
        assert_same_entries(got, want)


def stored_entries(arrays: dict) -> dict[tuple[int, int], float]:
    """{(row, column): value} of the entries that an .npz file's arrays store, duplicates summed,
    as scipy defines each format; written plainly, for small valid files (asserts otherwise)."""
    format = arrays["format"].item()
    format = format.decode() if isinstance(format, bytes) else format
    m, n = (int(x) for x in arrays["shape"])
    data = arrays["data"]
    out: dict[tuple[int, int], float] = {}

    def add(i, j, v):
        assert 0 <= i < m and 0 <= j < n
        out[(int(i), int(j))] = out.get((int(i), int(j)), 0.0) + float(v)

    if format in ("csr", "csc"):
        indptr, indices = arrays["indptr"], arrays["indices"]
        for major in range(len(indptr) - 1):
            for k in range(int(indptr[major]), int(indptr[major + 1])):
                add(*((major, indices[k]) if format == "csr" else (indices[k], major)), data[k])
    elif format == "bsr":
        indptr, indices = arrays["indptr"], arrays["indices"]
        r, c = data.shape[1:]
        for block_row in range(len(indptr) - 1):
            for k in range(int(indptr[block_row]), int(indptr[block_row + 1])):
                for a in range(r):
                    for b in range(c):
                        add(block_row * r + a, int(indices[k]) * c + b, data[k, a, b])
    elif format == "coo":
        row, col = arrays["coords"] if "coords" in arrays and "row" not in arrays else (arrays["row"], arrays["col"])
        for k in range(len(data)):
            add(row[k], col[k], data[k])
    else:  # dia: column j of diagonal d at row j - offsets[d]; scipy keeps the nonzeros inside the matrix
        for d, offset in enumerate(arrays["offsets"]):
            for j in range(min(data.shape[1], n)):
                if 0 <= j - int(offset) < m and data[d, j] != 0:
                    add(j - int(offset), j, data[d, j])
    return out


def assert_same_entries(A, want: dict) -> None:
    coo = A.tocoo()
    got = {(int(i), int(j)): float(v) for i, j, v in zip(coo.row, coo.col, coo.data)}
    assert got.keys() == want.keys()
    keys = sorted(want)
    np.testing.assert_allclose([got[k] for k in keys], [want[k] for k in keys], rtol=1e-6, equal_nan=True)


# -------------------------------------------------------------------- .npz fuzzing
_SMALL_VALUES = st.integers(-8, 8) | st.sampled_from([np.nan, np.inf, -np.inf, 0.5, -0.0])
_INDEX_VALUES = st.integers(-3, 12) | st.sampled_from(
    [2**31 - 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, -(2**31), -(2**63)]
)
_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint64", ">i8", "float16", "float32", "float64",
           ">f8", "bool", "complex128", "<U3", "S2"]  # fmt: skip
_KEYS = ["format", "shape", "data", "indices", "indptr", "row", "col", "coords", "offsets"]


def _as_dtype(values: list, dtype: str) -> np.ndarray:
    """`values` in `dtype`, wrapping or saturating as numpy casts (a file may hold anything)."""
    with np.errstate(all="ignore"):
        if np.dtype(dtype).kind in "iub":
            return np.array([v if np.isfinite(v) else 0 for v in values], dtype=np.float64).astype(dtype)
        return np.array(values, dtype=np.float64).astype(dtype)


@st.composite
def npz_mutations(draw, arrays: dict) -> dict:
    """One change to one array of a scipy .npz: dropped, replaced by a drawn array, an entry
    changed, one entry more or less, another dtype, made 2-D or an object array."""
    key = draw(st.sampled_from(_KEYS))
    old = arrays.get(key)
    action = draw(st.sampled_from(["drop", "replace", "set", "shorter", "longer", "astype", "2d", "object"]))
    if action == "drop" or (old is None and action != "replace"):
        return {key: None}
    if key == "format" and action in ("replace", "set"):
        return {key: np.array(draw(st.sampled_from(["csr", "csc", "bsr", "coo", "dia", "lil", "dok", "", "CSR"])))}
    if action == "replace":
        dtype = draw(st.sampled_from(_DTYPES))
        shape = draw(st.sampled_from([(), (0,), (1,), (2,), (3,), (7,), (2, 3), (3, 1, 1)]))
        if np.dtype(dtype).kind in "US":
            return {key: draw(hnp.arrays(dtype, shape))}
        elements = _SMALL_VALUES if key == "data" else _INDEX_VALUES
        return {key: _as_dtype(draw(st.lists(elements, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                               dtype).reshape(shape)}  # fmt: skip
    if action == "astype":
        if old.dtype.kind not in "iufb":
            return {}
        return {key: _as_dtype(old.ravel().tolist(), draw(st.sampled_from(_DTYPES[:13]))).reshape(old.shape)}
    if action == "2d":
        return {key: old.reshape(1, -1)}
    if action == "object":
        return {key: np.array([*old.ravel().tolist(), None], dtype=object)}
    new = old.copy()
    if action == "shorter":
        return {key: new[:-1] if new.ndim else new}
    if action == "longer":
        if new.ndim != 1:
            return {}
        return {key: np.concatenate([new, new[-1:] if len(new) else np.zeros(1, new.dtype)])}
    if new.size == 0 or new.dtype.kind not in "iuf":
        return {}
    flat = new.reshape(-1)
    value = draw(_SMALL_VALUES if key == "data" else _INDEX_VALUES)
    with np.errstate(all="ignore"):
        flat[draw(st.integers(0, flat.size - 1))] = _as_dtype([value], flat.dtype.str)[0]
    return {key: new}


def npz_arrays(A: sps.csr_matrix, format: str) -> dict:
    """The arrays `scipy.sparse.save_npz` writes for `A` in `format`."""
    M = A.asformat(format)
    arrays = {"format": np.array(format.encode()), "shape": np.array(M.shape), "data": M.data}
    if format == "dia":
        arrays["offsets"] = M.offsets
    elif format == "coo":
        arrays.update(row=M.row, col=M.col)
    else:
        arrays.update(indices=M.indices, indptr=M.indptr)
    return arrays


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("loader-fuzz")


@fuzz(150)
@given(
    A=csr_matrices(max_rows=6, max_cols=6, value_dtypes=("float64",)),
    format=st.sampled_from(["csr", "csc", "bsr", "coo", "dia"]),
    data=st.data(),
    compressed=st.booleans(),
    index_dtype=st.sampled_from([np.int32, np.int64]),
)
def test_fuzz_npz_fields(scratch, A, format, data, compressed, index_dtype):
    """Mutated arrays of a valid file: `InputError`, or canonical CSR of exactly the entries the
    arrays store (as scipy defines each format)."""
    A.data = np.round(A.data * 8)
    arrays = npz_arrays(A, format)
    for _ in range(data.draw(st.integers(1, 3))):
        arrays = {k: v for k, v in {**arrays, **data.draw(npz_mutations(arrays))}.items() if v is not None}
    path = scratch / "fields.npz"
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    try:
        got = load_matrix(path, dtype=np.float64, index_dtype=index_dtype)
    except sp.InputError:
        event("InputError")
        return
    event("loaded")
    assert_valid_csr(got, index_dtype, np.float64)
    assert_same_entries(got, stored_entries(arrays))


@st.composite
def byte_mutations(draw, raw: bytes) -> bytes:
    """`raw` with bytes changed, cut short, or with bytes inserted or removed."""
    out = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "flip", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if action == "flip" and out:
            out[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del out[at:]
        elif action == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif out:
            del out[at : at + draw(st.integers(1, 16))]
    return bytes(out)


@fuzz(150)
@given(
    A=csr_matrices(max_rows=6, max_cols=6),
    format=st.sampled_from(["csr", "csc", "bsr", "coo", "dia"]),
    compressed=st.booleans(),
    data=st.data(),
)
def test_fuzz_npz_bytes(scratch, A, format, compressed, data):
    """A damaged file (bytes changed, cut, inserted): `InputError`, or the matrix it held when
    only bytes nobody reads were hit (the zip format checks the contents' CRC)."""
    buf = io.BytesIO()
    sps.save_npz(buf, A.asformat(format), compressed=compressed)
    path = scratch / "bytes.npz"
    path.write_bytes(data.draw(byte_mutations(buf.getvalue())))
    try:
        got = load_matrix(path, dtype=np.float64)
    except sp.InputError:
        event("InputError")
        return
    event("loaded")
    assert_valid_csr(got, np.int32, np.float64)
    np.testing.assert_array_equal(got.toarray(), A.toarray())


# -------------------------------------------------------------------- Matrix Market
MALFORMED_MTX = {
    "nnz_more_than_lines": (mtx(COORD, "3 3 5", "1 1 1.0"), "declares 15 numbers after its header, but holds only 3"),
    "nnz_beyond_the_file": (
        mtx(COORD, "3 3 100000000000", "1 1 1.0"),
        r"declares 100000000000 entries \(300000000000 numbers\), but the file has only 71 bytes",
    ),
    "nnz_fewer_than_lines": (mtx(COORD, "3 3 1", "1 1 1.0", "2 2 2.0"), "holds more"),
    "row_past_shape": (mtx(COORD, "3 3 1", "4 1 1.0"), "Row index out of bounds"),
    "row_zero": (mtx(COORD, "3 3 1", "0 1 1.0"), "Row index out of bounds"),
    "row_negative": (mtx(COORD, "3 3 1", "-1 1 1.0"), "Row index out of bounds"),
    "column_past_int64": (mtx(COORD, "3 3 1", "1 99999999999999999999 1.0"), "Integer out of range"),
    "shape_past_int64": (mtx(COORD, "99999999999999999999999 3 1", "1 1 1.0"), "Integer out of range"),
    "shape_negative": (mtx(COORD, "-3 3 1", "1 1 1.0"), "negative"),
    "value_out_of_int64": (
        mtx("%%MatrixMarket matrix coordinate integer general", "3 3 1", "1 1 99999999999999999999"),
        "Integer out of range",
    ),
    "value_decimal_comma": (mtx(COORD, "3 3 1", "1 1 2,5"), r"line 3: unexpected character b','"),
    "value_hexadecimal": (mtx(COORD, "3 3 1", "1 1 0x10"), r"line 3: unexpected character b'x'"),
    "value_fraction_in_integer_field": (
        mtx("%%MatrixMarket matrix coordinate integer general", "3 3 1", "1 1 1.5"),
        r"unexpected character b'\.' \(field integer\)",
    ),
    "value_unfinished_exponent": (mtx(COORD, "3 3 1", "1 1 1e"), "line 3: malformed number '1e'"),
    "value_two_dots": (mtx(COORD, "3 3 1", "1 1 1.5.5"), "line 3: malformed number '1.5.5'"),
    "value_sign_inside": (mtx(COORD, "3 3 1", "1 1 1-2"), "line 3: malformed number '1-2'"),
    "value_digits_after_nan": (mtx(COORD, "3 3 1", "1 1 nan1"), "line 3: malformed number 'nan1'"),
    # scipy's reader ran past the end of the file here (a segmentation fault).
    "file_ends_inside_a_number": (COORD + "\n2 3 1\n2 3 7.25E", "line 3: malformed number '7.25E'"),
    "value_missing": (mtx(COORD, "3 3 2", "1 1", "2 2 2.0"), "line 3: 2 numbers, expected 3 on each line"),
    "value_extra": (mtx(COORD, "3 3 1", "1 1 2.0 7"), "line 3: 4 numbers, expected 3 on each line"),
    "comment_in_the_body": (mtx(COORD, "3 3 2", "1 1 2", "% note", "2 2 3"), r"line 4: unexpected character b'%'"),
    "complex": (mtx("%%MatrixMarket matrix coordinate complex general", "3 3 1", "1 1 1.0 2.0"), "complex"),
    "hermitian": (mtx("%%MatrixMarket matrix coordinate complex hermitian", "3 3 1", "2 1 1.0 2.0"), "complex"),
    "symmetric_not_square": (
        mtx("%%MatrixMarket matrix coordinate real symmetric", "3 4 1", "1 4 1.0"),
        r"symmetric but not square \(3 x 4\)",
    ),  # fmm: skip
    "skew_with_a_diagonal_entry": (
        mtx("%%MatrixMarket matrix coordinate real skew-symmetric", "3 3 1", "2 2 1.0"),
        r"stores the diagonal entry \(2, 2\)",
    ),
    "vector": (
        mtx("%%MatrixMarket vector coordinate real general", "3 1", "1 1.0"),
        "Matrix Market 'vector', not a matrix",
    ),
    "no_banner": ("3 3 1\n1 1 1\n", "Missing banner"),
    "empty": ("", "Missing banner"),
    "dense_two_values_a_line": (
        mtx("%%MatrixMarket matrix array real general", "2 2", "1 2", "3 4"),
        "expected 1 on each line",
    ),
    "dense_huge": (mtx("%%MatrixMarket matrix array real general", "200000 200000", "1.0"), "200000 x 200000"),
    "dense_empty_with_a_value": (mtx("%%MatrixMarket matrix array real general", "0 5", "1.0"), "holds more"),
    "dense_pattern": (mtx("%%MatrixMarket matrix array pattern general", "2 2"), "only 0|pattern"),
}


@pytest.mark.parametrize("case", list(MALFORMED_MTX))
def test_malformed_matrix_market_raises_input_error_naming_the_problem(tmp_path, case):
    text, message = MALFORMED_MTX[case]
    (tmp_path / "m.mtx").write_text(text)
    with pytest.raises(sp.InputError, match=message):
        load_matrix(tmp_path / "m.mtx", index_dtype=np.int64)


def test_an_empty_dense_array_does_not_kill_the_process(tmp_path):
    """scipy's reader divides by zero on a dense array of 0 rows (SIGFPE)."""
    for shape in ("0 5", "0 0", "5 0"):
        (tmp_path / "e.mtx").write_text(mtx("%%MatrixMarket matrix array real general", shape))
        A = load_matrix(tmp_path / "e.mtx")
        assert_valid_csr(A)
        assert A.shape == tuple(int(x) for x in shape.split()) and A.nnz == 0


@st.composite
def matrix_market_files(draw):
    """(text, entries or None): a Matrix Market file drawn with its expected {(i, j): value}, or
    None when a drawn flaw makes it invalid (then loading must raise `InputError`)."""
    layout = draw(st.sampled_from(["coordinate", "array"]))
    field = draw(st.sampled_from(["real", "integer"] + (["pattern"] if layout == "coordinate" else [])))
    symmetry = draw(st.sampled_from(["general", "symmetric", "skew-symmetric"]))
    m = draw(st.integers(0, 5))
    n = m if symmetry != "general" else draw(st.integers(0, 5))
    number = st.integers(-9, 9).map(str) if field == "integer" else st.sampled_from(
        ["1", "-2", "0.5", "-2.25", "1e3", "3E-1", "nan", "inf", "-inf", "0"]
    )  # fmt: skip
    flaw = draw(st.sampled_from([None] * 6 + ["nnz", "index", "value", "field", "shape", "extra", "square"]))
    want: dict = {}

    def add(i, j, v):
        want[(i, j)] = want.get((i, j), 0.0) + v

    lines = []
    if layout == "array":
        for j in range(n):
            for i in range(m):
                if symmetry == "general" or i > j or (i == j and symmetry == "symmetric"):
                    token = draw(number)
                    lines.append(token)
                    dense_value = float(token)
                    if dense_value != 0 or dense_value != dense_value:  # the zeros of a dense file are not stored
                        add(i, j, dense_value)
                        if symmetry != "general" and i != j:
                            add(j, i, dense_value if symmetry == "symmetric" else -dense_value)
        size = f"{m} {n}"
    else:
        for _ in range(draw(st.integers(0, 6)) if m and n else 0):
            i = draw(st.integers(0, m - 1))
            j = draw(st.integers(0, n - 1))
            if symmetry != "general":
                i, j = max(i, j), min(i, j)
                if symmetry == "skew-symmetric" and i == j:
                    continue
            token = "" if field == "pattern" else draw(number)
            value = 1.0 if field == "pattern" else float(token)
            lines.append(f"{i + 1} {j + 1} {token}".rstrip())
            add(i, j, value)
            if symmetry != "general" and i != j:
                add(j, i, value if symmetry == "symmetric" else -value)
        size = f"{m} {n} {len(lines)}"
    valid = flaw is None
    if flaw == "nnz" and layout == "coordinate":
        size = f"{m} {n} {len(lines) + draw(st.sampled_from([-1, 1, 2**40]))}"
    elif flaw == "index" and layout == "coordinate" and lines:
        k = draw(st.integers(0, len(lines) - 1))
        parts = lines[k].split(" ")
        parts[draw(st.integers(0, 1))] = str(draw(st.sampled_from([0, -1, max(m, n) + 1, 2**31, 2**64])))
        lines[k] = " ".join(parts)
    elif flaw == "value" and field != "pattern" and lines:
        k = draw(st.integers(0, len(lines) - 1))
        parts = lines[k].split(" ")
        parts[-1] = draw(
            st.sampled_from(["abc", "1,5", "0x1", "7x", "", "1;"] + (["1.5", "2e3"] if field == "integer" else []))
        )
        lines[k] = " ".join(parts).rstrip()
    elif flaw == "field":
        field = draw(st.sampled_from(["complex", "hermitian"]))
        if field == "hermitian":
            field, symmetry = "complex", "hermitian"
    elif flaw == "shape":
        size = " ".join(["-1", *size.split(" ")[1:]])
    elif flaw == "extra" and lines:
        lines[-1] += " 1"
    elif flaw == "square" and symmetry != "general":
        size = " ".join([str(m), str(m + 1), *size.split(" ")[2:]])
    else:
        valid = True
    text = mtx(f"%%MatrixMarket matrix {layout} {field} {symmetry}", size, *lines)
    return text, (want if valid else None)


def _write(path, text: bytes, suffix: str) -> None:
    path.write_bytes(gzip.compress(text) if suffix.lower().endswith(".gz") else
                     bz2.compress(text) if suffix.lower().endswith(".bz2") else text)  # fmt: skip


@fuzz(200)
@given(file=matrix_market_files(), suffix=st.sampled_from([".mtx", ".mtx.gz", ".mtx.bz2", ".MTX", ".Mtx.Gz"]))
def test_fuzz_matrix_market(scratch, file, suffix):
    """A drawn file loads as exactly its entries; one with a drawn flaw raises `InputError`."""
    text, want = file
    path = scratch / f"drawn{suffix}"
    _write(path, text.encode(), suffix)
    if want is None:
        event("flawed")
        with pytest.raises(sp.InputError):
            load_matrix(path, dtype=np.float64)
        return
    event("valid")
    got = load_matrix(path, dtype=np.float64)
    assert_valid_csr(got, np.int32, np.float64)
    assert_same_entries(got, want)


@fuzz(150)
@given(
    A=csr_matrices(max_rows=6, max_cols=6),
    dense=st.booleans(),
    symmetry=st.sampled_from(["general", "symmetric"]),
    suffix=st.sampled_from([".mtx", ".mtx.gz", ".mtx.bz2"]),
    data=st.data(),
)
def test_fuzz_matrix_market_bytes(scratch, A, dense, symmetry, suffix, data):
    """A damaged file (bytes changed, cut, inserted): `InputError`, or a valid canonical matrix
    (a damaged number may still be a number)."""
    if symmetry == "symmetric":
        A = (A[: min(A.shape), : min(A.shape)] + A[: min(A.shape), : min(A.shape)].T).tocsr()
    buf = io.BytesIO()
    scipy.io.mmwrite(buf, A.toarray() if dense else A, symmetry=symmetry)
    path = scratch / f"bytes{suffix}"
    _write(path, data.draw(byte_mutations(buf.getvalue())), suffix)
    try:
        got = load_matrix(path)
    except sp.InputError:
        event("InputError")
        return
    event("loaded")
    assert_valid_csr(got)
