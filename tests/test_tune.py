"""`sp.tune.spmm` / `sp.tune.sddmm` and `format="auto"` in `sp.ops`.

The search runs on small matrices with the timing threshold lowered (so candidates are really
timed and compiled); the cache is a temporary folder per test. Checked: the table lists every
candidate in model order and the winner is the fastest timed one; the result comes back from
memory and from disk (a new process reads it), a damaged cache file is searched again; the key
follows the structure, not the values; `format="auto"` equals scipy on real and random matrices
(empty rows and matrices, one row, rectangular, int64 indices, float64, a 1-D B); bad arguments
are named errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sps
from strategies import edge_matrices

import sparsetir_py as sp
from sparsetir_py import tune, tuning

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty tuning cache of the test's own, `<tmp_path>/tune/` (`$SPARSETIR_TUNE_DIR`). The
    kernels stay in the suite's kernel cache: a search compiles every candidate it times, and an
    empty kernel cache per test compiled them again in every test (`test_default_location`
    checks `<cache>/tune/`, where results go when `$SPARSETIR_TUNE_DIR` is not set)."""
    monkeypatch.setenv("SPARSETIR_TUNE_DIR", str(tmp_path / "tune"))
    monkeypatch.setattr(tuning, "_MEMORY", {})
    return tmp_path


def test_default_location(tmp_path, monkeypatch):
    """Without `$SPARSETIR_TUNE_DIR`, results are saved under `$SPARSETIR_CACHE_DIR/tune/`."""
    monkeypatch.setenv("SPARSETIR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPARSETIR_TUNE_DIR", raising=False)
    monkeypatch.setattr(tuning, "_MEMORY", {})
    result = sp.tune.spmm(sp.data.load_matrix("karate"), 8, progress=False)  # decided by the model: no kernel
    assert [p.name for p in (tmp_path / "tune").glob("*.json")] == [f"{result.key}.json"]


@pytest.fixture
def timed(monkeypatch):
    """Time candidates even on small matrices."""
    monkeypatch.setattr(tuning, "TIMING_GRAIN", 0)


def power_law(m=400, n=300, seed=0, dtype=np.float32) -> sps.csr_matrix:
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.zipf(1.8, m), n)
    lengths[::37] = 0  # empty rows
    rows = np.repeat(np.arange(m), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths]) if lengths.sum() else np.zeros(0, int)
    A = sps.csr_matrix((rng.uniform(-1, 1, len(rows)).astype(dtype), (rows, cols)), shape=(m, n))
    A.sort_indices()
    return A


def test_spmm_search_times_the_best_candidates(cache, timed):
    A = power_law()
    result = sp.tune.spmm(A, 16, top=2, budget=0.01, progress=False)
    cands = list(result.table)
    assert [c.predicted_s for c in cands] == sorted(c.predicted_s for c in cands)
    timed_ = [c for c in cands if c.measured_s is not None]
    assert set(map(id, cands[:2])) <= set(map(id, timed_)) and all(c.setup_s is not None for c in timed_)
    assert all(c.why.startswith("not timed") == (c.measured_s is None) for c in cands)
    assert result.measured and result.table.winner is min(timed_, key=lambda c: c.measured_s)
    assert result.seconds == result.table.winner.measured_s
    assert not result.cached and result.tuning_seconds > 0
    B = np.random.default_rng(1).standard_normal((300, 16)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, **result.ops_kwargs()), A @ B, rtol=1e-4, atol=1e-4)
    text = str(result.table)
    assert "chosen" in text and all(c.label in text for c in cands)
    assert "<table>" in result.table._repr_html_() and "chosen" in result._repr_html_()
    # Predicted against measured per candidate, and why each family was (not) timed.
    head, _, *rows = text.splitlines()
    assert "model ms" in head and "measured ms" in head and "model/measured" in head
    for c, row in zip(timed_, [r for r in rows if r.split()[1:2] and any(c.label in r for c in timed_)]):
        assert f"{c.predicted_s / c.measured_s:.2f}" in row
    assert "csr: timed" in text and result.table.families["csr"].startswith("timed")
    assert result.table.families["bsr"].startswith("not a candidate: best sampled block fill")


def test_sddmm_search_includes_the_nonzero_split(cache, timed):
    A = power_law(seed=2)
    result = sp.tune.sddmm(A, 8, top=3, budget=0.01, progress=False)
    labels = [c.label for c in result.table]
    assert any("csr_cpu_nonzeros" in label for label in labels)
    X = np.random.default_rng(1).standard_normal((400, 8)).astype(np.float32)
    Y = np.random.default_rng(2).standard_normal((300, 8)).astype(np.float32)
    S = sp.ops.sddmm(A, X, Y, **result.ops_kwargs())
    np.testing.assert_allclose(S.toarray(), A.multiply(X @ Y.T).toarray(), rtol=1e-4, atol=1e-4)


def test_small_problems_are_decided_by_the_model(cache):
    result = sp.tune.spmm(sp.data.load_matrix("karate"), 8, progress=False)
    assert not result.measured and all(c.measured_s is None for c in result.table)
    assert result.format == "csr" and result.seconds == result.table.winner.predicted_s


def test_results_are_cached_in_memory_and_on_disk(cache, timed):
    A = power_law(seed=3)
    first = sp.tune.spmm(A, 16, top=1, budget=0.01, progress=False)
    files = list((cache / "tune").glob("*.json"))
    assert len(files) == 1
    again = sp.tune.spmm(A, 16, top=1, progress=False)
    assert again.cached and again.tuning_seconds == 0 and again.table.winner.label == first.table.winner.label
    # Another process reads the disk cache: the same choice, not searched again.
    script = (
        "import sys, json, numpy as np, scipy.sparse as sps, sparsetir_py as sp\n"
        "A = sps.load_npz(sys.argv[1])\n"
        "r = sp.tune.spmm(A, 16, progress=False)\n"
        "print(json.dumps([r.cached, r.table.winner.label]))\n"
    )
    sps.save_npz(cache / "A.npz", A)
    env = dict(os.environ)  # `$SPARSETIR_TUNE_DIR`: this test's tuning cache
    proc = subprocess.run([sys.executable, "-c", script, str(cache / "A.npz")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True, first.table.winner.label]
    # A damaged file is searched again (and rewritten), not an error: one warning names it.
    files[0].write_text("{not json")
    tuning._MEMORY.clear()
    with pytest.warns(sp.runtime.cache.CacheWarning, match=files[0].name):
        redone = sp.tune.spmm(A, 16, top=1, budget=0.01, progress=False)
    assert not redone.cached and json.loads(files[0].read_text())["op"] == "spmm"


def test_a_cached_search_answers_only_as_many_as_it_timed(cache, timed):
    """`top` asked for: a cached result answers if its search timed the model's best `top`
    (else the search runs again and replaces it); `top` not given: any cached result answers."""
    A = power_law()
    first = sp.tune.spmm(A, 16, top=1, budget=0.01, progress=False)
    tried = [c.measured_s is not None for c in first.table]
    assert tried[0] and not all(tried[:3])  # the search with top=1 left some of the best 3 untimed
    more = sp.tune.spmm(A, 16, top=3, budget=0.01, progress=False)
    assert not more.cached and all(c.measured_s is not None for c in list(more.table)[:3])
    for top in (1, 2, 3, None):  # the wider search answers narrower ones, and `format="auto"`'s
        again = sp.tune.spmm(A, 16, top=top, progress=False)
        assert again.cached and again.table.winner.label == more.table.winner.label
    tuning._MEMORY.clear()  # from disk too
    assert sp.tune.spmm(A, 16, top=3, progress=False).cached
    assert not sp.tune.spmm(A, 16, top=len(more.table), budget=0.01, progress=False).cached


def test_the_key_follows_structure_width_and_target_not_values(cache):
    A = power_law(seed=4)
    B = A.copy()
    B.data = B.data * 3
    mach = tune.machine()
    key = tuning._key("spmm", A, 16, "cpu", mach, np.float32)
    assert tuning._key("spmm", B, 16, "cpu", mach, np.float32) == key
    assert tuning._key("spmm", A, 32, "cpu", mach, np.float32) != key
    assert tuning._key("spmm", A, 16, "cuda", mach, np.float32) != key
    assert tuning._key("sddmm", A, 16, "cpu", mach, np.float32) != key
    C = A.copy()
    C.indices = C.indices.copy()
    C.indices[0] = (C.indices[0] + 1) % A.shape[1]
    assert tuning._key("spmm", sps.csr_matrix(C), 16, "cpu", mach, np.float32) != key


def test_progress_bar_and_printed_table(cache, timed, capsys):
    sp.tune.spmm(power_law(seed=5), 8, top=1, budget=0.01, progress=True)
    captured = capsys.readouterr()
    assert "tuning spmm" in captured.err  # the tqdm bar
    assert "model ms" in captured.out and "chosen" in captured.out


@pytest.mark.parametrize("name", list(edge_matrices()))
@pytest.mark.parametrize(("idtype", "dtype"), [(np.int32, np.float32), (np.int64, np.float64)])
def test_format_auto_equals_scipy(cache, timed, name, idtype, dtype):
    A = edge_matrices()[name]
    A = sps.csr_matrix((A.data.astype(dtype), A.indices.astype(idtype), A.indptr.astype(idtype)), shape=A.shape)
    m, n = A.shape
    rng = np.random.default_rng(0)
    B = rng.standard_normal((n, 4)).astype(dtype)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="auto"), A @ B, rtol=1e-5, atol=1e-5)
    if n:
        v = rng.standard_normal(n).astype(dtype)
        np.testing.assert_allclose(sp.ops.spmm(A, v, format="auto"), A @ v, rtol=1e-5, atol=1e-5)
    X, Y = rng.standard_normal((m, 3)).astype(dtype), rng.standard_normal((n, 3)).astype(dtype)
    S = sp.ops.sddmm(A, X, Y, format="auto")
    np.testing.assert_allclose(S.toarray(), A.multiply(X @ Y.T).toarray(), rtol=1e-5, atol=1e-5)


def test_format_auto_on_a_real_graph(cache):
    A = sp.data.load_matrix("cora")
    B = np.random.default_rng(0).standard_normal((A.shape[1], 32)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="auto"), A @ B, rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_named_errors(cache):
    A = power_law()
    with pytest.raises(sp.InputError, match="unknown operator"):
        tune.tune("spmv", A, 4)
    with pytest.raises(sp.InputError, match="unknown target"):
        sp.tune.spmm(A, 4, target="tpu")
    with pytest.raises(sp.InputError, match="feat must be a non-negative int"):
        sp.tune.spmm(A, -1)
    with pytest.raises(sp.InputError, match="top must be a positive int"):
        sp.tune.spmm(A, 4, top=0)
    with pytest.raises(sp.InputError, match="format 'auto' takes no parameters"):
        sp.ops.spmm(A, np.ones((300, 2), np.float32), format="auto", buckets=[1])
    # A schedule of the caller's with the default format runs CSR with it.
    B = np.ones((300, 2), np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, schedule="csr_cpu_rows"), A @ B, rtol=1e-5, atol=1e-5)
    broken = sps.csr_matrix(A)
    broken.indices = broken.indices.copy()
    broken.indices[0] = 10**6
    with pytest.raises(sp.InputError):
        sp.tune.spmm(broken, 4)


# -------------------------------------------------------------------- the model (no timing)
def block_matrix(fill: float, b: int = 8, rows: int = 150, seed: int = 0) -> sps.csr_matrix:
    """`rows` x `rows` blocks of b x b (about four per block row, the diagonal one included),
    each cell kept with probability `fill`."""
    rng = np.random.default_rng(seed)
    pattern = sps.random(rows, rows, density=4 / rows, random_state=rng, format="csr") + sps.eye(rows)
    cells = sps.kron(pattern, np.ones((b, b)), format="csr")
    cells.data = rng.uniform(-1, 1, cells.nnz) * (rng.random(cells.nnz) < fill)
    cells.eliminate_zeros()
    return sps.csr_matrix(cells, dtype=np.float32)


#: A machine with small caches, so that B of a small matrix outgrows them (no sysfs read).
SMALL = tuning.Machine(threads=2, l2_bytes=256 << 10, l3_bytes=1 << 20, cores=2)


def test_bsr_is_a_candidate_exactly_when_the_block_fill_is_high():
    """The sampled fill (`sp.format.block_fill`) is the exact one on these small matrices; BSR
    is tried at each block size with fill >= 0.7 and at none when every fill is low, and the
    table's family line says which."""
    for A, fills in [(block_matrix(1.0), {2: 1.0, 4: 1.0, 8: 1.0}), (block_matrix(0.3), {})]:
        s = tuning.Structure.of(A)
        for b in tuning.BLOCK_SIZES:
            assert s.fills[b] == pytest.approx(sp.format.block_fill(A, b, sample=None), abs=0.05)
        cands = tuning.candidates("spmm", s, 64, "cpu", SMALL, every=True)
        bsr = {c.params["block_size"]: c for c in cands if c.format == "bsr"}
        assert sorted(bsr) == sorted(fills)
        _, families = tuning.plan(cands, s, 64, SMALL, 4)
        assert families["bsr"].startswith("timed" if fills else "not a candidate")
    # Rectangular, int64 indices, float64 values, and a matrix without nonzeros: no BSR, no error.
    A = block_matrix(1.0, b=4, rows=40)[:, :150]
    A = sps.csr_matrix((A.data.astype(np.float64), A.indices.astype(np.int64), A.indptr.astype(np.int64)), A.shape)
    assert any(
        c.format == "bsr" for c in tuning.candidates("sddmm", tuning.Structure.of(A), 8, "cpu", SMALL, every=True)
    )
    empty = tuning.Structure.of(sps.csr_matrix((30, 20), dtype=np.float32))
    # Under BSR_MIN_NNZ nonzeros no decomposed format is a candidate on the CPU (compiling its
    # kernels would cost seconds to save microseconds).
    assert sorted(c.format for c in tuning.candidates("spmm", empty, 8, "cpu", SMALL, every=True)) == ["csr"] * 8


def test_the_model_ranks_bsr_by_block_fill(monkeypatch):
    """Where the block product runs fast enough to pay (today's kernels do not: the tuner then
    measures BSR and keeps CSR), the model puts BSR first at full fill and behind CSR at low
    fill, with B past the cache (`SMALL`, width 512)."""
    monkeypatch.setattr(tuning, "BSR_FMA", 36e9)  # a fixed rate: the test is of the model's shape

    def best(fill: float) -> str:
        s = tuning.Structure.of(block_matrix(fill))
        return tuning.candidates("spmm", s, 512, "cpu", SMALL, every=True)[0].format

    assert best(1.0) == "bsr"
    s = tuning.Structure.of(block_matrix(0.75))
    bsr = next(c for c in tuning.candidates("spmm", s, 512, "cpu", SMALL, every=True) if c.format == "bsr")
    s.fills[8] = 0.2  # the same matrix seen with a low fill: more blocks, more padding
    assert tuning._model_bsr("spmm", s, 512, SMALL, 8) > 2 * bsr.predicted_s
    assert best(0.3) == "csr"


def test_b_past_the_cache_raises_the_cost_per_nonzero():
    """The same nonzeros per row and a B that fits L2, then the last-level cache, then neither
    (columns spread at random over more and more rows of B): the model's best CSR time grows,
    and the hyb family's line says whether B fits."""
    rng = np.random.default_rng(0)
    times = []
    for n in (100, 1500, 100_000):  # B of 50 KB, 750 KB (past both threads' L2), 50 MB
        cols = rng.integers(0, n, size=(2000, 16))
        A = sps.csr_matrix(
            (np.ones(cols.size, np.float32), cols.reshape(-1), np.arange(0, cols.size + 1, 16)), (2000, n)
        )
        A.sum_duplicates()
        s = tuning.Structure.of(A)
        cands = tuning.candidates("spmm", s, 128, "cpu", SMALL, every=True)
        times.append(min(c.predicted_s for c in cands if c.format == "csr") / A.nnz)
        _, families = tuning.plan(cands, s, 128, SMALL, 2)
        assert ("outgrows" in families["hyb"]) == (n * 128 * 4 > SMALL.llc_bytes)
    assert times[0] < times[1] < times[2] and times[2] > 3 * times[0]
    assert SMALL.gather_s(10, 512, 1 << 30, (1.0, 1.0)) > 3 * SMALL.gather_s(10, 512, 1 << 30, (0.0, 0.0))


def test_the_last_level_cache_counts_a_share_per_core():
    """A VM sees its host's whole L3 in sysfs: counted at most `LLC_PER_CORE` per visible core."""
    vm = tuning.Machine(threads=2, l2_bytes=2 << 20, l3_bytes=300 << 20, cores=2)
    assert vm.llc_bytes == 2 * tuning.LLC_PER_CORE
    assert tuning.Machine(threads=8, l2_bytes=1 << 20, l3_bytes=16 << 20, cores=8).llc_bytes == 16 << 20
    mach = tune.machine()
    assert mach.l2_bytes > 0 and 0 < mach.llc_bytes <= mach.l3_bytes


def test_rows_wider_than_the_registers_cost_more_per_byte():
    """A row of B wider than `WIDE_ROW_BYTES` is accumulated through L1, not in registers: the
    model charges each of its bytes `WIDE_ROW_COST` times a narrow row's, at every cache level
    (measured: the model was 0.4-0.5x the kernels at width 512 and about right at 32 without it)."""
    narrow, wide = tuning.WIDE_ROW_BYTES, 2 * tuning.WIDE_ROW_BYTES
    for table, miss in ((1 << 10, (0.0, 0.0)), (SMALL.llc_bytes, (0.0, 0.0)), (1 << 30, (0.5, 0.1))):
        per_byte = [SMALL.gather_s(100, row, table, miss) / row for row in (narrow, wide)]
        assert per_byte[1] > 1.2 * per_byte[0]
    assert tuning.WIDE_ROW_COST > 1


def test_sddmm_pays_per_nonzero_for_its_dot_products(monkeypatch):
    """SDDMM's CSR model charges each nonzero `SDDMM_NNZ_S` (its dot product's horizontal sum and
    its store: without it the model was 0.2-0.3x the kernels on mesh-b3 and rmat at width 32);
    SpMM's does not."""
    s = tuning.Structure.of(block_matrix(1.0))
    before = {op: tuning._model_csr(op, s, 32, SMALL, 1.0) for op in ("spmm", "sddmm")}
    monkeypatch.setattr(tuning, "SDDMM_NNZ_S", 2 * tuning.SDDMM_NNZ_S)
    after = {op: tuning._model_csr(op, s, 32, SMALL, 1.0) for op in ("spmm", "sddmm")}
    assert after["spmm"] == before["spmm"]
    assert after["sddmm"] - before["sddmm"] == pytest.approx(s.nnz / SMALL.threads * tuning.SDDMM_NNZ_S / 2)
