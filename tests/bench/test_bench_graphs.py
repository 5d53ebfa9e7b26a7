"""The benchmark's matrices: the seeded R-MAT generator, its cache, and the shipped graphs."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from bench import graphs
from bench.graphs import REAL_GRAPHS, RmatParams, load_graph, rmat, rmat_cached
from sparsetir_py.data import available, load_matrix

REPO = Path(__file__).resolve().parents[2]

SMALL = {"scale": 10, "nnz": 8000, "n": 1000}


def is_canonical(A: scipy.sparse.csr_matrix) -> bool:
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    same_row = rows[1:] == rows[:-1]
    return bool(A.indptr[0] == 0 and A.indptr[-1] == A.nnz and np.all(np.diff(A.indices)[same_row] > 0))


def test_rmat_shape_nnz_and_format():
    A = rmat(seed=3, **SMALL)
    assert A.shape == (1000, 1000)
    assert A.nnz == 8000
    assert A.dtype == np.float32 and A.indices.dtype == np.int32 and A.indptr.dtype == np.int32
    assert is_canonical(A)
    assert np.all((A.data >= 0.5) & (A.data < 1.5))


def test_rmat_is_seeded():
    A, B = rmat(seed=3, **SMALL), rmat(seed=3, **SMALL)
    assert np.array_equal(A.indptr, B.indptr) and np.array_equal(A.indices, B.indices)
    assert np.array_equal(A.data, B.data)
    C = rmat(seed=4, **SMALL)
    assert not (np.array_equal(A.indptr, C.indptr) and np.array_equal(A.indices, C.indices))


def test_rmat_is_skewed_and_uniform_is_not():
    """R-MAT (a=0.57) has hubs; with a = b = c = d = 0.25 the degrees are nearly uniform."""
    skewed = np.diff(rmat(seed=1, **SMALL).indptr)
    uniform = np.diff(rmat(seed=1, a=0.25, b=0.25, c=0.25, **SMALL).indptr)
    assert skewed.max() > 8 * skewed.mean()
    assert uniform.max() < 3 * uniform.mean()


def test_rmat_hubs_are_spread_by_the_permutation():
    """Without the vertex permutation all hubs would sit in the first rows."""
    degrees = np.diff(rmat(seed=2, **SMALL).indptr)
    hubs = np.argsort(degrees)[-10:]
    assert hubs.max() > 100


@pytest.mark.parametrize(
    "kwargs",
    [{"scale": 4, "n": 17, "nnz": 10}, {"scale": 4, "n": 16, "nnz": 257}, {"scale": 4, "n": 16, "nnz": 10, "a": 0.9}],
)
def test_rmat_bad_parameters(kwargs):
    with pytest.raises(ValueError, match="in `rmat`"):
        rmat(**kwargs)


def test_rmat_cached_generates_once(tmp_path, monkeypatch):
    params = RmatParams(scale=9, n=500, nnz=3000, seed=7)
    path = rmat_cached(tmp_path, params)
    assert path.is_file() and path.parent == tmp_path and "seed7" in path.name
    loaded = load_graph("rmat", str(path))
    expected = rmat(params.scale, params.nnz, params.n, params.a, params.b, params.c, params.seed)
    assert (loaded != expected).nnz == 0 and loaded.indices.dtype == np.int32

    def fail(*args, **kwargs):
        raise AssertionError("regenerated although cached")

    monkeypatch.setattr(graphs, "rmat", fail)
    assert rmat_cached(tmp_path, params) == path
    other = RmatParams(scale=9, n=500, nnz=3000, seed=8)
    with pytest.raises(AssertionError, match="regenerated"):
        rmat_cached(tmp_path, other)  # other parameters name another file


def test_default_rmat_parameters():
    """About 100K x 100K with 2M nonzeros, as DESIGN.md §5's reference numbers."""
    p = RmatParams()
    assert p.n == 100_000 and p.nnz == 2_000_000 and 2**p.scale >= p.n
    assert abs(p.a + p.b + p.c + p.d - 1) < 1e-12


# The suite's real graphs are shipped with the package (counts from the shared MANIFEST).
SHIPPED = {
    "cora": (2708, 10556),
    "citeseer": (3327, 9228),
    "pubmed": (19717, 88651),
    "wiki-Vote": (7115, 103689),
    "facebook_combined": (4039, 176468),
    "ca-CondMat": (23133, 186936),
    "bcsstk16": (4884, 290378),
}


def test_every_real_graph_is_listed():
    assert set(REAL_GRAPHS) == set(SHIPPED)
    assert set(REAL_GRAPHS) <= set(graphs.known_graphs())
    assert "rmat" in graphs.known_graphs()


def test_large_rmat_outgrows_the_caches():
    """`rmat-large` (issue 24's column partitions): B at width 128 is 100 MB, not a cached size;
    it is not in the default set (the runs take seconds)."""
    params = graphs.SYNTHETIC["rmat-large"]
    assert params.n * 128 * 4 >= 100e6 and params.nnz == 2_700_000 and params.n <= 2**params.scale
    assert "rmat-large" not in graphs.DEFAULT_GRAPHS


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_real_graphs_are_shipped_and_canonical(name):
    A = load_graph(name)
    rows, nnz = SHIPPED[name]
    assert A.shape == (rows, rows) and A.nnz == nnz
    assert A.dtype == np.float32 and A.indices.dtype == np.int32
    assert is_canonical(A)
    assert (load_matrix(name) != A).nnz == 0


def test_known_graphs_are_the_shipped_ones_and_rmat():
    assert graphs.known_graphs() == [
        *available(),
        "rmat",
        "rmat-large",
        "rmat-xl",
        *graphs.BLOCK_GRAPHS,
        "blocks",
        "large",
    ]
    assert graphs.expand_sets(["large"]) == ["rmat-large", "rmat-xl"]
    with pytest.raises(KeyError, match="no matrix 'nope'"):
        load_graph("nope")


def test_baseline_workers_do_not_import_sparsetir_py():
    """Loading a shipped graph must not import sparsetir_py (and with it Numba's OpenMP layer)."""
    code = "import sys; from bench.graphs import load_graph; load_graph('cora'); print('sparsetir_py' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_graph_spec_gives_generated_graphs_by_path(tmp_path, monkeypatch):
    """Both runners (`bench.runner`, `bench.paired`) describe a graph by `graph_spec`: generated
    graphs (R-MAT, the block matrices) by the path of their file, written once under the cache
    folder; a user's file by its path and stem; a shipped matrix by name. (The paired runner
    named generated graphs only, and its worker could not load them.)"""
    small = RmatParams(scale=9, n=500, nnz=3000, seed=7)
    monkeypatch.setitem(graphs.SYNTHETIC, graphs.RMAT_LARGE, small)
    monkeypatch.setitem(graphs.BLOCK_GRAPHS, "mesh-b3", {**graphs.BLOCK_GRAPHS["mesh-b3"], "block_rows": 40})
    for name in (graphs.RMAT_LARGE, "mesh-b3"):
        spec = graphs.graph_spec(name, tmp_path)
        assert spec["name"] == name and Path(spec["path"]).parent == tmp_path
        assert load_graph(name, spec["path"]).nnz > 0
    assert graphs.graph_spec("rmat", tmp_path, small)["path"] == graphs.graph_spec(graphs.RMAT_LARGE, tmp_path)["path"]
    user = tmp_path / "mine.npz"
    scipy.sparse.save_npz(user, scipy.sparse.eye(3, format="csr"))
    assert graphs.graph_spec(str(user), tmp_path) == {"name": "mine", "path": str(user.resolve())}
    assert graphs.graph_spec("cora", tmp_path) == {"name": "cora"}
