"""References, result checks, timing and the traffic model of the benchmark."""

import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from bench.measure import (
    RTOL,
    bytes_moved,
    bytes_with_reuse,
    check_result,
    dense_operand,
    geomean,
    row_ids,
    sampled_dot,
    sddmm_reference,
    spmm_reference,
    time_calls,
)
from sparsetir_py.data import load_matrix

REPO = Path(__file__).resolve().parents[2]


def random_csr(m=40, n=30, density=0.2, seed=0) -> scipy.sparse.csr_matrix:
    A = scipy.sparse.random(m, n, density=density, format="csr", dtype=np.float32, random_state=seed)
    A.sort_indices()
    return A


def test_dense_operands_are_seeded_and_distinct():
    B = dense_operand(50, 8, seed=1, which=0)
    assert B.dtype == np.float32 and B.shape == (50, 8) and B.flags.c_contiguous
    assert np.array_equal(B, dense_operand(50, 8, seed=1, which=0))
    assert not np.array_equal(B, dense_operand(50, 8, seed=1, which=1))
    assert not np.array_equal(B, dense_operand(50, 8, seed=2, which=0))
    assert B.min() >= -1 and B.max() < 1


@pytest.mark.parametrize("chunk", [1, 7, 1 << 22])
def test_sampled_dot_equals_the_dense_product_at_the_nonzeros(chunk):
    A = random_csr()
    X, Y = np.random.default_rng(0).random((40, 5)), np.random.default_rng(1).random((30, 5))
    dense = X @ Y.T
    coo = A.tocoo()
    got = sampled_dot(A, X, Y, chunk_elems=chunk)
    assert np.allclose(got, dense[coo.row, coo.col])
    assert np.array_equal(row_ids(A), coo.row)


def test_references_match_dense_numpy():
    A = random_csr()
    B = dense_operand(30, 6, 0, 0)
    ref = spmm_reference(A, B)
    assert ref.value.dtype == np.float64
    assert np.allclose(ref.value, A.toarray().astype(np.float64) @ B)
    assert np.allclose(ref.scale, np.abs(A.toarray()) @ np.abs(B.astype(np.float64)))
    X, Y = dense_operand(40, 6, 0, 1), dense_operand(30, 6, 0, 2)
    sref = sddmm_reference(A, X, Y)
    dense = A.toarray() * (X.astype(np.float64) @ Y.T)
    assert np.allclose(sref.value, dense[A.nonzero()])
    assert np.all(sref.scale >= np.abs(sref.value))


def test_check_accepts_float32_results_and_rejects_a_wrong_entry():
    A = load_matrix("karate")
    B = dense_operand(34, 16, 0, 0)
    ref = spmm_reference(A, B)
    ok = check_result(A @ B, ref)
    assert ok.ok and ok.max_rel_err < 1e-6
    wrong = A @ B
    wrong[5, 3] += 1e-2
    bad = check_result(wrong, ref)
    assert not bad.ok and "1 of 544 entries differ; first at (5, 3)" in bad.message


def test_check_tolerance_scales_with_magnitude():
    """bcsstk16 has values from 1e-8 to 2e9: an error tolerable for a large entry is not for a
    small one, and rows with cancellation are still judged by their terms' magnitudes."""
    A = load_matrix("bcsstk16")
    B = dense_operand(A.shape[1], 4, 0, 0)
    ref = spmm_reference(A, B)
    got = A @ B
    assert check_result(got, ref).ok
    small = np.unravel_index(np.argmin(np.where(ref.scale > 0, ref.scale, np.inf)), ref.scale.shape)
    assert ref.scale[small] < 1e-3 * ref.scale.max()
    tampered = got.copy()
    tampered[small] += 10 * RTOL * ref.scale[small] + 1e-30
    assert not check_result(tampered, ref).ok


@pytest.mark.parametrize(
    ("got", "message"),
    [(np.zeros((3, 2)), "shape (3, 2), expected (2, 2)"), (np.array([[np.nan, 0], [0, 0]]), "not finite")],
)
def test_check_rejects_shape_and_nan(got, message):
    ref = spmm_reference(scipy.sparse.identity(2, format="csr", dtype=np.float32), np.ones((2, 2), np.float32))
    result = check_result(got, ref)
    assert not result.ok and message in result.message and math.isinf(result.max_rel_err)


def test_time_calls_stops_at_repeat_or_budget():
    calls = []
    timing = time_calls(lambda: calls.append(1), repeat=7, budget=100.0, warmup=2)
    assert len(timing.times) == 7 and len(calls) == 9
    slow = time_calls(lambda: time.sleep(0.02), repeat=1000, budget=0.05, min_repeat=3)
    assert 3 <= len(slow.times) <= 4
    assert 0.015 < slow.median < 1 and slow.best <= slow.median


def test_time_calls_runs_sync_after_every_call():
    order = []
    time_calls(lambda: order.append("call"), repeat=3, budget=1.0, warmup=1, sync=lambda: order.append("sync"))
    assert order == ["call", "sync"] * 4


def test_timing_without_importing_sparsetir_py():
    """A worker that times a baseline loads the package's timer from its file, not through
    `import sparsetir_py` (which would load Numba and its OpenMP layer beside the baseline's)."""
    code = (
        "import sys; from bench.measure import time_calls, timing; time_calls(lambda: None, 3, 0.0); "
        "print('sparsetir_py' in sys.modules, timing().__file__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    imported, path = done.stdout.split()
    assert imported == "False" and Path(path).parts[-3:] == ("sparsetir_py", "runtime", "timing.py")


def test_bytes_moved_model():
    m, n, nnz, w = 10, 20, 50, 8
    structure = nnz * 8 + (m + 1) * 4
    assert bytes_moved("spmm", m, n, nnz, w) == structure + nnz * w * 4 + m * w * 4
    assert bytes_moved("sddmm", m, n, nnz, w) == structure + m * w * 4 + nnz * w * 4 + nnz * 4
    assert bytes_moved("spmm", m, n, nnz, w, index_bytes=8) == bytes_moved("spmm", m, n, nnz, w) + 4 * (nnz + m + 1)
    with pytest.raises(ValueError, match="expected op"):
        bytes_moved("spmv", m, n, nnz, w)


def test_traffic_per_format():
    """One CSR part is CSR's traffic; ELL counts its padding slots; BSR reads one index and b rows
    of B per b x b block; the roofline uses the format's own model."""
    import scipy.sparse as sps

    import format_rules
    from bench.libraries import format_traffic
    from bench.measure import Traffic

    rng = np.random.default_rng(0)
    A = sps.random(40, 30, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    A = (A + sps.eye(40, 30, format="csr", dtype=np.float32)).tocsr()  # no empty row
    m, nnz = A.shape[0], A.nnz
    for op in ("spmm", "sddmm"):
        assert Traffic.of_parts(op, [(nnz, m)]) == Traffic.csr(op, m, nnz)
        ell = Traffic(**format_traffic(op, A, format_rules.SHIPPED["ell"], {"buckets": [2, 4, 16]}, blocks=False))
        lengths = np.diff(A.indptr)
        slots = sum(int(np.sum((lengths > lo) & (lengths <= hi))) * hi for lo, hi in [(0, 2), (2, 4), (4, 16)])
        assert ell.values == ell.gathers == slots > nnz  # padding slots read too
        assert ell.row_writes == (m if op == "spmm" else 0)  # buckets own disjoint rows
    hyb = Traffic(**format_traffic("spmm", A, format_rules.SHIPPED["hyb"], {"num_col_parts": 2}, blocks=False))
    assert m < hyb.row_writes <= 3 * m  # rows the second column part adds into are read back
    blocks = sps.kron(sps.random(10, 10, density=0.3, random_state=rng), np.ones((3, 3)), format="bsr").tocsr()
    stored = sps.bsr_matrix(blocks, blocksize=(3, 3)).indices.size
    bsr = Traffic(**format_traffic("spmm", blocks, format_rules.SHIPPED["bsr"], {"block_size": 3}, blocks=True))
    assert (bsr.values, bsr.gathers, bsr.row_writes) == (9 * stored, 3 * stored, 30)
    assert bsr.indices == stored + 10 + 1
    csr = Traffic.csr("spmm", 30, blocks.nnz)
    assert bsr.bytes(64) < csr.bytes(64)  # a third of the gathers of B
    assert bytes_with_reuse("spmm", 30, 30, blocks.nnz, 64, touched=30, traffic=bsr) < bsr.bytes(64)
    with pytest.raises(ValueError, match="expected op"):
        Traffic.of_parts("spmv", [(1, 1)])


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([3.0]) == pytest.approx(3.0)
    assert math.isnan(geomean([]))
