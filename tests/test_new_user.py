"""What a new user tripped over (issue 14): `sp.data` after import, Matrix Market files,
`specialize` followed by a call that passes the size, SpMV and `out=` in `sp.ops.spmm`,
`threads=` on `sp.ops`."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import format_rules
import sparsetir_py as sp
from sparsetir_py.ops import spmm_script
from tests.strategies import csr_matrices, edge_matrices


def test_sp_data_is_reachable_after_import():
    code = "import sparsetir_py as sp; A = sp.data.load_matrix('karate'); print(A.nnz)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "156"


# -------------------------------------------------------------------- matrix files
@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_load_matrix_reads_matrix_market(tmp_path, symmetry, suffix):
    A = sp.data.load_matrix("karate", dtype=np.float64)  # symmetric
    path = tmp_path / f"karate{suffix}"
    scipy.io.mmwrite(tmp_path / "karate.mtx", A, symmetry=symmetry)
    if suffix == ".mtx.gz":
        import gzip

        path.write_bytes(gzip.compress((tmp_path / "karate.mtx").read_bytes()))
    got = sp.data.load_matrix(path, index_dtype="int64")
    assert got.shape == A.shape and got.indptr.dtype == np.int64 and got.dtype == np.float32
    assert got.has_canonical_format
    assert (got != A).nnz == 0


def test_load_matrix_reads_an_npz_path_and_sums_duplicates(tmp_path):
    coo = scipy.sparse.coo_matrix(([1.0, 2.0, 3.0], ([0, 0, 2], [1, 1, 0])), shape=(3, 3))
    scipy.sparse.save_npz(tmp_path / "dup.npz", coo)
    got = sp.data.load_matrix(str(tmp_path / "dup.npz"))
    np.testing.assert_array_equal(got.toarray(), [[0, 3, 0], [0, 0, 0], [3, 0, 0]])


def test_load_matrix_errors(tmp_path):
    with pytest.raises(KeyError, match="no shipped matrix 'nope'"):
        sp.data.load_matrix("nope")
    with pytest.raises(KeyError, match="no matrix file"):
        sp.data.load_matrix(tmp_path / "missing.mtx")
    (tmp_path / "bad.mtx").write_text("this is not matrix market\n")
    with pytest.raises(sp.InputError, match="cannot read bad.mtx"):
        sp.data.load_matrix(tmp_path / "bad.mtx")
    scipy.io.mmwrite(tmp_path / "complex.mtx", scipy.sparse.csr_matrix(np.array([[1 + 2j, 0], [0, 1]])))
    with pytest.raises(sp.InputError, match="complex"):
        sp.data.load_matrix(tmp_path / "complex.mtx")


# -------------------------------------------------------------------- specialize
def test_a_specialized_kernel_accepts_the_specialized_size():
    """README: `sp.compile(..., specialize={"feat": 32})`, then a call with `feat=32`."""
    A = sp.data.load_matrix("karate")
    B = np.random.default_rng(0).standard_normal((34, 32)).astype(np.float32)
    C = np.zeros((34, 32), np.float32)
    kernel = sp.compile(spmm_script(), "cpu", specialize={"feat": 32})
    assert "feat" not in kernel.parameters and kernel.specialized == {"feat": 32}
    args = dict(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=34, n=34, nnz=A.nnz)
    kernel(**args, feat=32)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    C[:] = 0
    kernel(**args, feat=np.int64(32))  # a numpy integer of the same value
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    kernel(**args)  # or left out
    with pytest.raises(sp.InputError, match="specialized to 32, got feat=16"):
        kernel(**args, feat=16)
    with pytest.raises(sp.InputError, match="specialized to 32"):
        kernel(**args, feat=True)


def test_a_specialized_cuda_kernel_accepts_the_specialized_size(monkeypatch):
    kernel = sp.compile(spmm_script(), "cuda", specialize={"feat": 32})
    assert kernel._drop_specialized({"feat": 32, "m": 3}) == {"m": 3}
    with pytest.raises(sp.InputError, match="specialized to 32"):
        kernel(feat=8)


# -------------------------------------------------------------------- SpMV, out=, threads=
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=20, max_cols=20), data=st.data())
def test_spmv_equals_scipy(A, data):
    x = np.random.default_rng(0).uniform(-1, 1, A.shape[1]).astype(A.dtype)
    fmt = data.draw(st.sampled_from(["csr", "ell"]), "format")
    if fmt == "ell":
        # The buckets and paired dtypes (int32 with float32, int64 with float64) that
        # `test_ops_formats.py` compiles ELL in: one kernel for both files (10-20 s each).
        idtype = np.int64 if A.dtype == np.float64 else np.int32
        A.indices, A.indptr = A.indices.astype(idtype), A.indptr.astype(idtype)
    y = sp.ops.spmm(A, x, format=fmt, **({"buckets": [1, 2, 4, 8]} if fmt == "ell" else {}))
    assert y.shape == (A.shape[0],) and y.dtype == A.dtype
    np.testing.assert_allclose(y, A.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(edge_matrices()))
def test_spmv_on_edge_matrices(name):
    A = edge_matrices()[name]
    x = np.ones(A.shape[1], A.dtype)
    np.testing.assert_allclose(sp.ops.spmm(A, x), A @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sp.ops.spmm(A, list(x)), A @ x, rtol=1e-5, atol=1e-5)  # a list works too


@pytest.mark.parametrize("fmt", ["csr", "hyb"])
def test_out_is_written_and_returned(fmt):
    A = sp.data.load_matrix("cora", index_dtype="int64")
    params = {"num_col_parts": 2, "buckets": [2, 8]} if fmt == "hyb" else {}
    B = np.random.default_rng(1).standard_normal((A.shape[1], 8)).astype(np.float32)
    out = np.full((A.shape[0], 8), np.nan, np.float32)
    assert sp.ops.spmm(A, B, format=fmt, out=out, **params) is out
    np.testing.assert_allclose(out, A @ B, rtol=1e-4, atol=1e-4)
    y = np.full(A.shape[0], np.nan, np.float32)
    assert sp.ops.spmm(A, B[:, 3].copy(), format=fmt, out=y, **params) is y
    np.testing.assert_allclose(y, A @ B[:, 3], rtol=1e-4, atol=1e-4)


def test_out_errors():
    A = sp.data.load_matrix("karate")
    B = np.ones((34, 4), np.float32)
    with pytest.raises(sp.InputError, match="shape"):
        sp.ops.spmm(A, B, out=np.empty((34, 5), np.float32))
    with pytest.raises(sp.InputError, match="dtype float32"):
        sp.ops.spmm(A, B, out=np.empty((34, 4), np.float64))
    with pytest.raises(sp.InputError, match="C-contiguous"):
        sp.ops.spmm(A, B, out=np.empty((4, 34), np.float32).T)
    with pytest.raises(sp.InputError, match="share memory"):
        sp.ops.spmm(A, B, out=B)
    with pytest.raises(sp.InputError, match="numpy array"):
        sp.ops.spmm(A, B, out=[[0.0] * 4] * 34)
    with pytest.raises(sp.InputError, match=r"shape \(34,\)"):
        sp.ops.spmm(A, np.ones(34, np.float32), out=np.empty((34, 1), np.float32))


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_on_ops(threads):
    A = sp.data.load_matrix("pubmed")  # big enough to run in parallel by default
    B = np.random.default_rng(2).standard_normal((A.shape[1], 16)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, threads=threads), A @ B, rtol=1e-4, atol=1e-4)
    S = sp.ops.sddmm(A, B, B, threads=threads)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    want = A.data * np.einsum("ij,ij->i", B[rows], B[A.indices])
    np.testing.assert_allclose(S.data, want, rtol=1e-4, atol=1e-4)


def test_threads_caps_numba_during_the_call(monkeypatch):
    """The kernel runs with the caller's `threads=` as Numba's thread count, also for a small
    call (seen from inside the call: the count may be set by the threading layer's own setters,
    not `numba.set_num_threads`), and the count is restored after it."""
    import numba

    from sparsetir_py.runtime import kernel as runtime_kernel

    seen = []
    real = runtime_kernel.run_capped

    def spy(fn, values, threads):
        real(lambda *v: (seen.append(numba.get_num_threads()), fn(*v)), values, threads)

    monkeypatch.setattr(runtime_kernel, "run_capped", spy)
    before = numba.get_num_threads()
    A = sp.data.load_matrix("karate")
    np.testing.assert_allclose(sp.ops.spmm(A, np.ones((34, 2), np.float32), threads=1), A @ np.ones((34, 2)))
    assert seen and seen[0] == 1 and numba.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_threads_errors(bad):
    A = sp.data.load_matrix("karate")
    with pytest.raises(sp.InputError, match="`threads` must be a positive integer"):
        sp.ops.spmm(A, np.ones((34, 2), np.float32), threads=bad)
    with pytest.raises(sp.InputError, match="`threads` must be a positive integer"):
        sp.ops.sddmm(A, np.ones((34, 2)), np.ones((34, 2)), threads=bad)


def test_threads_is_for_the_cpu_target():
    A = sp.data.load_matrix("karate")
    with pytest.raises(sp.InputError, match="CPU target"):
        sp.ops.spmm(A, np.ones((34, 2), np.float32), target="cuda", threads=2)


def test_decomposition_formats_accept_threads():
    A = sp.data.load_matrix("karate")
    B = np.ones((34, 3), np.float32)
    got = sp.ops.spmm(A, B, format=format_rules.ell, buckets=[2, 8, 32], threads=1)
    np.testing.assert_allclose(got, A @ B, rtol=1e-5)
