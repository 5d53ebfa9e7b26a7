"""The benchmark's matrices: shipped real graphs and a seeded R-MAT power-law graph.

Real graphs come from `sparsetir_py.data` (shipped with the package, so a clone is enough).
The R-MAT graph is generated once, with a fixed seed, and cached as a `.npz` file under the
output folder; later runs load the cached file.

>>> A = rmat(scale=8, nnz=1000, n=200, seed=1)
>>> A.shape, A.nnz, A.dtype, A.indices.dtype, A.has_canonical_format
((200, 200), 1000, dtype('float32'), dtype('int32'), True)
>>> (rmat(scale=8, nnz=1000, n=200, seed=1) != A).nnz
0
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse

#: The real graphs of the suite, smallest first (all shipped in `sparsetir_py/data/`).
REAL_GRAPHS = ("cora", "citeseer", "pubmed", "wiki-Vote", "facebook_combined", "ca-CondMat", "bcsstk16")
#: Name of the synthetic power-law graph.
RMAT = "rmat"
#: Name of the synthetic power-law graph larger than the caches (`LARGE_RMAT`): not in the
#: default set (about 5 s to generate once, and its kernels take 0.1-0.5 s a call); ask for it
#: with `--graphs rmat-large`.
RMAT_LARGE = "rmat-large"
DEFAULT_GRAPHS = (*REAL_GRAPHS, RMAT)


@dataclass(frozen=True)
class RmatParams:
    """Parameters of the R-MAT graph; all of them name the cache file, so a change regenerates it."""

    scale: int = 17  # 2**17 = 131072 >= n: the recursion runs on the next power of two
    n: int = 100_000  # rows = columns; edges with an endpoint >= n are dropped before sampling
    nnz: int = 2_000_000  # exact number of distinct nonzeros kept
    a: float = 0.57
    b: float = 0.19
    c: float = 0.19
    seed: int = 20240607
    version: int = 1  # bump when the generator changes

    @property
    def d(self) -> float:
        return 1.0 - self.a - self.b - self.c

    def filename(self) -> str:
        return (
            f"rmat-v{self.version}-s{self.scale}-n{self.n}-nnz{self.nnz}"
            f"-a{self.a}-b{self.b}-c{self.c}-seed{self.seed}.npz"
        )


#: The graph of issue 24's column partitions: 200k rows, 2.7M nonzeros, rows and columns permuted,
#: so B (200k x width floats) is 100 MB at width 128 and 400 MB at 512, past the L2 (and past an
#: L3 shared with other tenants).
LARGE_RMAT = RmatParams(scale=18, n=200_000, nnz=2_700_000)
#: A second graph past the caches, of another seed and size (300k rows, 4M nonzeros: B is 150 MB
#: at width 128, 600 MB at 512), so that a choice is not made on `rmat-large` alone.
RMAT_XL = "rmat-xl"
XL_RMAT = RmatParams(scale=19, n=300_000, nnz=4_000_000, seed=20240608)
#: The synthetic graphs by name: generated once with their parameters, then cached.
SYNTHETIC = {RMAT: RmatParams(), RMAT_LARGE: LARGE_RMAT, RMAT_XL: XL_RMAT}


def _rmat_edges(rng: np.random.Generator, count: int, scale: int, a: float, b: float, c: float) -> np.ndarray:
    """`count` R-MAT edges as (row, col) int64 pairs: one quadrant choice per level, vectorised."""
    rows = np.zeros(count, dtype=np.int64)
    cols = np.zeros(count, dtype=np.int64)
    for level in range(scale):
        r = rng.random(count)
        # Quadrants in order a (top-left), b (top-right), c (bottom-left), d (bottom-right).
        down = r >= a + b
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)
        bit = np.int64(1) << (scale - 1 - level)
        rows += down * bit
        cols += right * bit
    return np.stack([rows, cols])


def rmat(
    scale: int = RmatParams.scale,
    nnz: int = RmatParams.nnz,
    n: int = RmatParams.n,
    a: float = RmatParams.a,
    b: float = RmatParams.b,
    c: float = RmatParams.c,
    seed: int = RmatParams.seed,
) -> scipy.sparse.csr_matrix:
    """A seeded R-MAT graph as a canonical `n x n` CSR matrix with exactly `nnz` nonzeros.

    Edges are drawn in batches on a `2**scale` grid (quadrant probabilities a, b, c and
    d = 1 - a - b - c at every level), edges leaving `[0, n)` are dropped, duplicates are merged,
    and batches are added until at least `nnz` distinct edges exist; then exactly `nnz` of them
    are kept at random. Vertex ids are then permuted at random (as Graph500 does) so the hubs are
    not all in the first rows. Values are uniform in [0.5, 1.5), float32; indices are int32.
    """
    if not 0 < n <= 2**scale:
        raise ValueError(f"in `rmat`: expected 0 < n <= 2**scale = {2**scale}, but got n = {n}")
    if not 0 < nnz <= n * n:
        raise ValueError(f"in `rmat`: expected 0 < nnz <= n * n = {n * n}, but got nnz = {nnz}")
    if min(a, b, c) < 0 or a + b + c > 1:
        raise ValueError(f"in `rmat`: expected probabilities a, b, c >= 0 with a + b + c <= 1, got {a}, {b}, {c}")
    rng = np.random.default_rng(seed)
    keys = np.empty(0, dtype=np.int64)  # row * n + col, sorted and unique
    while keys.size < nnz:
        batch = max(1024, int(1.25 * (nnz - keys.size)))
        rows, cols = _rmat_edges(rng, batch, scale, a, b, c)
        inside = (rows < n) & (cols < n)
        keys = np.union1d(keys, rows[inside] * n + cols[inside])
    keys = np.sort(rng.choice(keys, size=nnz, replace=False))
    perm = rng.permutation(n)
    rows, cols = perm[keys // n], perm[keys % n]
    values = rng.uniform(0.5, 1.5, size=nnz).astype(np.float32)
    matrix = scipy.sparse.csr_matrix((values, (rows, cols)), shape=(n, n))
    matrix.sum_duplicates()  # no duplicates remain; this sorts the indices within rows
    return _canonical_int32(matrix)


def _canonical_int32(matrix: scipy.sparse.csr_matrix) -> scipy.sparse.csr_matrix:
    result = scipy.sparse.csr_matrix(
        (matrix.data.astype(np.float32), matrix.indices.astype(np.int32), matrix.indptr.astype(np.int32)),
        shape=matrix.shape,
    )
    result.has_sorted_indices = True
    result.has_canonical_format = True
    return result


def rmat_cached(cache_dir: Path, params: RmatParams = RmatParams()) -> Path:
    """Path of the cached R-MAT `.npz` under `cache_dir`, generating and saving it when missing."""
    path = Path(cache_dir) / params.filename()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    matrix = rmat(params.scale, params.nnz, params.n, params.a, params.b, params.c, params.seed)
    tmp = path.with_suffix(".tmp.npz")
    scipy.sparse.save_npz(tmp, matrix, compressed=False)
    tmp.replace(path)  # atomic: a half-written file never looks cached
    return path


#: Synthetic block-sparse matrices by name (`--graphs blocks` runs them all): finite-element-like
#: meshes of dense b x b blocks (each block row's blocks within 8 block columns of the diagonal,
#: 100% fill) and random blocks anywhere (80% fill). Nothing large is shipped: each is generated
#: from its name and seed and cached like the R-MAT graph.
BLOCK_GRAPHS = {
    "mesh-b3": {"block_rows": 80_000, "per_row": 9, "b": 3, "fill": 1.0, "band": 8},
    "mesh-b6": {"block_rows": 40_000, "per_row": 6, "b": 6, "fill": 1.0, "band": 8},
    "blocks-b2": {"block_rows": 160_000, "per_row": 5, "b": 2, "fill": 0.8, "band": None},
    "blocks-b4": {"block_rows": 40_000, "per_row": 10, "b": 4, "fill": 0.8, "band": None},
    "blocks-b8": {"block_rows": 10_000, "per_row": 8, "b": 8, "fill": 0.8, "band": None},
}
#: Graph sets by name (`--graphs blocks large`): the block matrices, and the graphs whose B
#: outgrows the last-level cache (where column parts are timed).
GRAPH_SETS = {"blocks": tuple(BLOCK_GRAPHS), "large": (RMAT_LARGE, RMAT_XL)}


def block_graph(
    block_rows: int, per_row: int, b: int, fill: float, band: int | None, seed: int = 7
) -> scipy.sparse.csr_matrix:
    """`block_rows` x `block_rows` blocks of b x b: the diagonal block and `per_row` more per block
    row (within `band` block columns of the diagonal, or anywhere for None), each cell stored with
    probability `fill`, values standard normal; canonical float32 CSR, int32 indices.

    >>> A = block_graph(50, 3, 4, 1.0, 5)
    >>> A.shape, A.nnz % 16, A.dtype
    ((200, 200), 0, dtype('float32'))
    """
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(block_rows, dtype=np.int64), per_row)
    if band is None:
        cols = rng.integers(0, block_rows, size=rows.size)
    else:
        cols = np.clip(rows + rng.integers(-band, band + 1, size=rows.size), 0, block_rows - 1)
    diagonal = np.arange(block_rows, dtype=np.int64) * (block_rows + 1)
    key = np.unique(np.concatenate([rows * block_rows + cols, diagonal]))
    cells = np.arange(b * b)
    r = ((key // block_rows)[:, None] * b + cells // b).reshape(-1)
    c = ((key % block_rows)[:, None] * b + cells % b).reshape(-1)
    keep = rng.random(r.size) < fill
    values = rng.standard_normal(int(keep.sum())).astype(np.float32)
    shape = (block_rows * b, block_rows * b)
    return _canonical_int32(scipy.sparse.csr_matrix((values, (r[keep], c[keep])), shape=shape))


def block_graph_cached(cache_dir: Path, name: str) -> Path:
    """Path of the cached block matrix `name` (`BLOCK_GRAPHS`), generated when missing."""
    params = BLOCK_GRAPHS[name]
    path = Path(cache_dir) / f"{name}-v1-{'-'.join(f'{k}{v}' for k, v in params.items())}.npz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        scipy.sparse.save_npz(tmp, block_graph(**params), compressed=False)
        tmp.replace(path)
    return path


def package_dir() -> Path:
    """The folder of the `sparsetir_py` package, found without importing it (a baseline's worker
    then never loads Numba and its OpenMP runtime)."""
    spec = importlib.util.find_spec("sparsetir_py")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("in `package_dir`: sparsetir_py is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def shipped_dir() -> Path:
    """The folder of `sparsetir_py`'s shipped matrices, found without importing `sparsetir_py`."""
    return package_dir() / "data"


def load_graph(name: str, path: str | None = None) -> scipy.sparse.csr_matrix:
    """A benchmark matrix as canonical float32 CSR with int32 indices.

    `path` names a scipy `.npz` file (the cached R-MAT graph, or a matrix given by path) or a
    Matrix Market `.mtx` / `.mtx.gz` file (read with `scipy.io.mmread`); otherwise `name` is a
    matrix shipped in `sparsetir_py/data/`, loaded as `sparsetir_py.data.load_matrix` does
    (duplicates summed, indices sorted).
    """
    file = Path(path) if path is not None else shipped_dir() / f"{name}.npz"
    if not file.is_file():
        raise KeyError(f"in `load_graph`: no matrix {name!r} ({file} is missing); known: {', '.join(known_graphs())}")
    if file.name.endswith(MATRIX_MARKET_SUFFIXES):
        from scipy.io import mmread

        matrix = scipy.sparse.csr_matrix(mmread(file))
    else:
        matrix = scipy.sparse.csr_matrix(scipy.sparse.load_npz(file))
    matrix.sum_duplicates()  # also sorts the indices
    matrix.sort_indices()
    return _canonical_int32(matrix)


#: File names `--graphs` reads as a matrix: scipy's `.npz`, and Matrix Market (`scipy.io.mmread`).
MATRIX_MARKET_SUFFIXES = (".mtx", ".mtx.gz", ".mtx.bz2")
GRAPH_FILE_SUFFIXES = (".npz", *MATRIX_MARKET_SUFFIXES)


def is_graph_file(name: str) -> bool:
    """Whether `--graphs` was given a path to a matrix file (scipy `.npz` or Matrix Market `.mtx`)."""
    return name.endswith(GRAPH_FILE_SUFFIXES) and Path(name).is_file()


def graph_file_stem(name: str) -> str:
    """The name a matrix file is reported under: its file name without the suffix."""
    base = Path(name).name
    for suffix in GRAPH_FILE_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return Path(name).stem


def known_graphs() -> list[str]:
    """Every name `--graphs` accepts: the shipped matrices, the synthetic graphs (`rmat`,
    `rmat-large`, `rmat-xl`), the block matrices and the sets (`blocks`, `large`)."""
    shipped = sorted((f.stem for f in shipped_dir().glob("*.npz")), key=str.lower)
    return [*shipped, *SYNTHETIC, *BLOCK_GRAPHS, *GRAPH_SETS]


def expand_sets(names: list[str]) -> list[str]:
    """`--graphs` with each set name (`blocks`) replaced by its graphs."""
    return [g for name in names for g in GRAPH_SETS.get(name, (name,))]


def graph_spec(name: str, cache_dir: Path, rmat: RmatParams | None = None) -> dict:
    """What a worker is told of `--graphs` entry `name`: the name it is reported under, and the
    path of its file where it has one: a generated graph (R-MAT, written once under
    `cache_dir`, with `rmat` for plain `rmat`; the block matrices) or a file of the user's.
    A shipped matrix is loaded by name."""
    if name == RMAT and rmat is not None:
        return {"name": name, "path": str(rmat_cached(cache_dir, rmat))}
    if name in SYNTHETIC:
        return {"name": name, "path": str(rmat_cached(cache_dir, SYNTHETIC[name]))}
    if name in BLOCK_GRAPHS:
        return {"name": name, "path": str(block_graph_cached(cache_dir, name))}
    if is_graph_file(name):
        return {"name": graph_file_stem(name), "path": str(Path(name).resolve())}
    return {"name": name}
