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

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sps
from fuzzing import fuzz
from hypothesis import assume, given
from hypothesis import strategies as st

import sparsetir_py as sp
from sparsetir_py.data import load_matrix


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


def test_npz_with_more_nonzeros_than_int32_is_refused_by_the_header(tmp_path):
    """An nnz past int32 is refused before any array of that length is read."""
    p = tmp_path / "many.npz"
    np.savez(p, format=np.array("coo"), shape=np.array([2**40, 2**40]), data=np.ones(1), row=np.zeros(1, np.int64),
             col=np.array([2**35]))  # fmt: skip
    with pytest.raises(sp.InputError, match=str(2**40)):
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
