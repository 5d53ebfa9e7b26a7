"""Co-iterating operators (`spgemm`, masked `spgemm`, `add`, `multiply`) against scipy and the interpreter.

The result's structure is checked exactly against the structural one (the operands' patterns
combined with all-ones values, so that no entry cancels), its values against scipy's, and its
form against the contract: canonical CSR, sorted, owning its arrays, of the operands' dtypes.
Inputs: the edge matrices (empty, 0-row, 0-column, one row, one full row, inner dimension 1),
hypothesis-drawn ones (int32/int64, float32/float64, unsorted and duplicated entries, other
formats), and shipped graphs. The Stage II kernels also run under the loop interpreter, which
must give the same arrays as the compiled kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st
from strategies import csr_matrices, edge_matrices, make_csr

import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import coiteration as operators
from sparsetir_py.ops.coiteration import add, multiply, spgemm


# ------------------------------------------------------------------ references
def pattern(A) -> scipy.sparse.csr_matrix:
    """A's structure (explicit zeros included, duplicates merged) with all-ones float64 values."""
    P = scipy.sparse.csr_matrix(A, dtype=np.float64, copy=True)
    P.sum_duplicates()
    P.data[:] = 1.0
    return P


def expected_dtypes(*mats) -> tuple[np.dtype, np.dtype]:
    """int64 indices where an operand has them as `sp.ops` reads it (scipy may narrow int64
    indices of a matrix whose values are converted); float32 values where all operands are."""
    dtype = np.float32 if all(M.dtype == np.float32 for M in mats) else np.float64
    wide = any(operators.operand(M, "M").indices.dtype == np.int64 for M in mats)
    return np.dtype(np.int64 if wide else np.int32), np.dtype(dtype)


def check(C, structure, values, *operands) -> None:
    """C is canonical CSR with exactly `structure`'s coordinates and `values`' values there."""
    assert isinstance(C, scipy.sparse.csr_matrix | scipy.sparse.csr_array)
    idtype, dtype = expected_dtypes(*operands)
    assert C.indptr.dtype == idtype and C.indices.dtype == idtype and C.dtype == dtype
    assert C.shape == structure.shape
    assert len(C.indptr) == C.shape[0] + 1 and C.indptr[-1] == C.nnz == len(C.indices) == len(C.data)
    S = structure.tocsr()
    S.sort_indices()
    np.testing.assert_array_equal(C.indptr, S.indptr)
    np.testing.assert_array_equal(C.indices, S.indices)
    rows = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
    want = np.asarray(values.tocsr()[rows, C.indices]).reshape(-1) if C.nnz else np.zeros(0)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(C.data, want, rtol=tol, atol=tol)
    assert C.has_canonical_format
    for M in operands:
        for arr in (getattr(M, "indices", None), getattr(M, "indptr", None), getattr(M, "data", None)):
            if isinstance(arr, np.ndarray) and arr.size:
                assert not np.shares_memory(arr, C.indices) and not np.shares_memory(arr, C.data)


def check_spgemm(A, B, mask=None, **kwargs):
    C = spgemm(A, B, mask=mask, **kwargs)
    structure = pattern(A) @ pattern(B)
    if mask is not None:
        structure = structure.multiply(pattern(mask))
    values = scipy.sparse.csr_matrix(A, dtype=np.float64) @ scipy.sparse.csr_matrix(B, dtype=np.float64)
    operands = (A, B) if mask is None else (A, B, mask)
    check(C, structure, values, *operands)
    return C


def check_add(A, B, alpha=1.0, beta=1.0, **kwargs):
    C = add(A, B, alpha, beta, **kwargs)
    values = alpha * scipy.sparse.csr_matrix(A, dtype=np.float64) + beta * scipy.sparse.csr_matrix(B, dtype=np.float64)
    check(C, pattern(A) + pattern(B), values, A, B)
    return C


def check_multiply(A, B, **kwargs):
    C = multiply(A, B, **kwargs)
    values = scipy.sparse.csr_matrix(A, dtype=np.float64).multiply(scipy.sparse.csr_matrix(B, dtype=np.float64))
    check(C, pattern(A).multiply(pattern(B)), values, A, B)
    return C


def random_like(A, seed: int, density: float = 0.4, shape=None):
    """A random matrix of A's dtypes (and shape, unless given)."""
    rng = np.random.default_rng(seed)
    shape = A.shape if shape is None else shape
    mask = rng.random(shape) < density
    return make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), A.indices.dtype.name, A.dtype.name)


# ------------------------------------------------------------------ edge matrices
EDGES = edge_matrices()


@pytest.mark.parametrize("name", sorted(EDGES))
def test_edge_matrices(name):
    """A @ A.T, A.T @ A, a product of inner dimension 1 where A has one column, and the
    element-wise operators with a random matrix of the same shape and with A itself."""
    A = EDGES[name]
    At = A.T.tocsr()
    check_spgemm(A, At)
    check_spgemm(At, A)
    check_spgemm(A, random_like(A, 1, shape=(A.shape[1], 3)))
    check_spgemm(A, At, schedule="cpu_hash")
    other = random_like(A, 2)
    check_add(A, other)
    check_add(A, A, 2.0, -2.0)  # every entry cancels, and is kept
    check_multiply(A, other)
    check_multiply(A, A)


def test_inner_dimension_one():
    """(5 x 1) @ (1 x 4): an outer product, every row of the result from one row of B."""
    rng = np.random.default_rng(3)
    A = make_csr(np.array([[1], [0], [1], [1], [0]], bool), rng.uniform(-1, 1, 3), "int32", "float64")
    B = make_csr(np.array([[1, 0, 1, 1]], bool), rng.uniform(-1, 1, 3), "int64", "float32")
    check_spgemm(A, B)


# ------------------------------------------------------------------ masks
def test_masks_empty_full_disjoint():
    A = load_matrix("karate")
    empty = scipy.sparse.csr_matrix(A.shape, dtype=np.float32)
    full = scipy.sparse.csr_matrix(np.ones(A.shape, np.float32))
    product = pattern(A) @ pattern(A)
    disjoint = scipy.sparse.csr_matrix(np.where(product.toarray() == 0, 1.0, 0.0).astype(np.float32))
    for mask in (empty, full, disjoint, A, A.T.tocsr()):
        check_spgemm(A, A, mask=mask)
    assert spgemm(A, A, mask=disjoint).nnz == 0 and spgemm(A, A, mask=empty).nnz == 0


def test_the_products_own_structure_as_mask_recomputes_it():
    """README's idiom for new values on a known structure: `spgemm(A, B, mask=C)` with `C` an
    earlier `spgemm(A, B)` gives the same structure (the product's every coordinate, its explicit
    zeros included) and the new values."""
    rng = np.random.default_rng(35)
    A = load_matrix("karate").astype(np.float64)
    B = scipy.sparse.random(A.shape[1], 40, density=0.2, format="csr", random_state=3)
    C = spgemm(A, B)
    A.data = rng.uniform(-1, 1, A.nnz)
    again = spgemm(A, B, mask=C)
    np.testing.assert_array_equal(again.indptr, C.indptr)
    np.testing.assert_array_equal(again.indices, C.indices)
    np.testing.assert_allclose(again.toarray(), (A @ B).toarray(), rtol=1e-12, atol=1e-12)


def test_mask_with_stored_zeros_selects():
    """A mask's stored 0 selects its coordinate: the mask is a structure, its values unread."""
    A = load_matrix("karate")
    M = A.copy()
    M.data[:] = 0.0
    check_spgemm(A, A, mask=M)
    assert spgemm(A, A, mask=M).nnz == spgemm(A, A, mask=A).nnz > 0


# ------------------------------------------------------------------ random matrices
def unsorted(A, seed: int):
    """A with its entries shuffled within rows and one entry split in two duplicates (COO)."""
    rng = np.random.default_rng(seed)
    coo = A.tocoo()
    order = rng.permutation(coo.nnz)
    row, col, data = coo.row[order], coo.col[order], coo.data[order]
    if coo.nnz:
        row, col = np.append(row, row[0]), np.append(col, col[0])
        data = np.append(data, data[0])
        data[0] = data[-1] = data[0] / 2
    return scipy.sparse.coo_matrix((data, (row, col)), shape=A.shape).tocsr(copy=False)


@fuzz(25)
@given(
    csr_matrices(max_rows=12, max_cols=12),
    st.integers(0, 12),
    st.integers(0, 2**16),
    st.sampled_from(["csr", "csc", "coo", "unsorted"]),
)
def test_random_spgemm(A, n, seed, form):
    B = random_like(A, seed, density=0.3, shape=(A.shape[1], n))
    B = B.asformat("csr") if form == "unsorted" else B.asformat(form)
    A2 = unsorted(A, seed) if form == "unsorted" else A.asformat(form)
    check_spgemm(A2, B)
    mask = random_like(A, seed + 1, shape=(A.shape[0], n))
    check_spgemm(A2, B, mask=mask)


@fuzz(25)
@given(
    csr_matrices(max_rows=12, max_cols=12),
    st.integers(0, 2**16),
    st.sampled_from(["int32", "int64"]),
    st.sampled_from(["float32", "float64", "int8"]),
    st.booleans(),
)
def test_random_elementwise(A, seed, idtype, dtype, shuffle):
    rng = np.random.default_rng(seed)
    mask = rng.random(A.shape) < rng.uniform(0, 1)
    values = rng.integers(-3, 4, int(mask.sum())) if dtype == "int8" else rng.uniform(-1, 1, int(mask.sum()))
    B = make_csr(mask, values, idtype, dtype)
    A2 = unsorted(A, seed) if shuffle else A
    alpha, beta = rng.uniform(-2, 2), float(rng.integers(-2, 3))
    check_add(A2, B, alpha, beta)
    check_multiply(A2, B)


# ------------------------------------------------------------------ real graphs
@pytest.mark.parametrize("name", ["karate", "email-Eu-core", "lp_afiro"])
def test_shipped_graphs(name):
    A = load_matrix(name)
    At = A.T.tocsr()
    check_spgemm(A, At if A.shape[0] != A.shape[1] else A)
    check_spgemm(A, At)
    if A.shape[0] == A.shape[1]:
        check_spgemm(A, A, mask=A)
    check_add(A, random_like(A, 5, density=0.002), 0.5, -1.5)
    check_multiply(A, random_like(A, 6, density=0.05))
    check_multiply(A, A)


def test_triangle_count_matches_trace():
    """Masked SpGEMM with mask = A counts every triangle six times, as trace(A^3) does."""
    A = pattern(load_matrix("email-Eu-core"))
    A = ((A + A.T) > 0).astype(np.float64).tocsr()
    A.setdiag(0)
    A.eliminate_zeros()
    triangles = spgemm(A, A, mask=A).sum() / 6
    assert triangles == (A @ A @ A).diagonal().sum() / 6


# ------------------------------------------------------------------ threads, schedules, sizes
@pytest.mark.parametrize("schedule", ["cpu_chunks", "cpu_hash", "cpu_serial"])
@pytest.mark.parametrize("threads", [1, 2])
def test_schedules_and_threads(schedule, threads):
    A = load_matrix("email-Eu-core")
    check_spgemm(A, A, schedule=schedule, threads=threads)
    check_add(A, A.T, schedule=schedule, threads=threads)


def test_wide_matrices_hash_by_default(monkeypatch):
    """Where dense workspaces would pass the memory budget, the default schedule hashes."""
    A = load_matrix("email-Eu-core")
    monkeypatch.setattr(operators, "WORKSPACE_BYTES", 12 * A.shape[1] - 1)
    seen = []
    kernel = operators.kernel
    monkeypatch.setattr(operators, "kernel", lambda *a, **k: seen.append(k["schedule"]) or kernel(*a, **k))
    check_spgemm(A, A)
    assert {s.__name__ for s in seen} == {"cpu_hash"}


def test_hash_kernels_match_the_interpreter():
    from sparsetir_py.script import from_script

    rng = np.random.default_rng(12)
    A = make_csr(rng.random((6, 5)) < 0.5, rng.uniform(-1, 1, 30), "int64", "float32")
    B = make_csr(rng.random((5, 7)) < 0.5, rng.uniform(-1, 1, 35), "int64", "float32")
    C = spgemm(A, B, schedule="cpu_hash")
    bounds = operators.chunk_bounds(np.arange(7), 2)
    common = {
        "a_indptr": A.indptr,
        "a_indices": A.indices,
        "b_indptr": B.indptr,
        "b_indices": B.indices,
        "m": 6,
        "k": 5,
        "n": 7,
        "parts": 2,
        "nnz_a": A.nnz,
        "nnz_b": B.nnz,
        "bounds": bounds,
        "hsize": 16,
    }
    cases = [
        ("count", {"c_count": np.zeros(6, np.int64), "c_work": np.zeros(6, np.int64)}),
        ("numeric", {"a_data": A.data, "b_data": B.data, "c_data": np.zeros(C.nnz, np.float32),
                     "c_indptr": C.indptr, "c_indices": np.zeros(C.nnz, np.int64), "nnz_c": C.nnz}),
    ]  # fmt: skip
    results = {}
    for name, outputs in cases:
        func = from_script(operators._script(name, "int64", "float32", "hash"))
        interpreted = {**common, **{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in outputs.items()}}
        sp.interpret(func, **interpreted)
        compiled = {**common, **{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in outputs.items()}}
        operators.kernel(name, "int64", "float32", schedule="cpu_hash")(**compiled)
        for key in outputs:
            if isinstance(outputs[key], np.ndarray):
                np.testing.assert_allclose(compiled[key], interpreted[key], rtol=1e-6, err_msg=f"{name}: {key}")
        results[name] = interpreted
    np.testing.assert_array_equal(results["count"]["c_count"], np.diff(C.indptr))
    np.testing.assert_array_equal(results["numeric"]["c_indices"], C.indices)
    np.testing.assert_allclose(results["numeric"]["c_data"], C.data, rtol=1e-6)


def test_chunk_bounds_balance_work():
    """Chunks of equal work: one heavy row gets a chunk of its own."""
    weights = np.array([1, 1, 100, 1, 1, 1])
    prefix = np.concatenate([[0], np.cumsum(weights)])
    bounds = operators.chunk_bounds(prefix, 3)
    assert bounds[0] == 0 and bounds[-1] == 6 and np.all(np.diff(bounds) >= 0)
    assert list(bounds).count(2) == 1 and 3 in bounds
    assert list(operators.chunk_bounds(np.zeros(1, np.int64), 4)) == [0, 0]


def test_merges_past_int32_widen_the_indices(monkeypatch):
    """Where |A| + |B| outgrows int32 (the merges' work prefix is summed in the index dtype),
    `add` and `multiply` of int32 operands both widen to int64 (here int32's bound lowered)."""
    A, B = (scipy.sparse.random(40, 30, density=0.2, format="csr", random_state=s) for s in (1, 2))
    assert A.indices.dtype == np.int32 and A.dtype == np.float64
    monkeypatch.setattr(operators, "_INT32_MAX", (A.nnz + B.nnz) // 2)
    for C, R in ((add(A, B), A + B), (multiply(A, B), A.multiply(B))):
        assert C.indices.dtype == np.int64 and C.indptr.dtype == np.int64
        assert C.has_canonical_format and abs(C - R).max() < 1e-12


def test_same_level_operands():
    """Operands that store the same coordinates (other arrays, equal contents) take one loop over
    positions; the result owns copies of the structure."""
    A = load_matrix("email-Eu-core")
    B = A.copy()
    B.data = np.random.default_rng(3).standard_normal(B.nnz).astype(np.float32)
    check_add(A, B, 0.5, 2.0)
    check_multiply(A, B)
    check_add(A, B, threads=2)
    seen = []
    kernel = operators.kernel
    try:
        operators.kernel = lambda name, *a, **k: seen.append(name) or kernel(name, *a, **k)
        add(A, B)
    finally:
        operators.kernel = kernel
    assert seen == ["same_add"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("change", ["column", "bound"])
def test_structures_alike_in_the_sample_only_are_merged(threads, change, monkeypatch):
    """Two structures of one nnz that agree at every sampled row bound and column
    (`SAME_SAMPLES`) but differ elsewhere: the same-level kernel finds the difference as it
    copies the structure, and the operators merge instead (compiled driver and parallel kernel)."""
    from sparsetir_py.coiteration import host

    monkeypatch.setattr(host, "EWISE_GRAIN", 0 if threads > 1 else None)
    seen = []
    kernel = operators.kernel
    monkeypatch.setattr(operators, "kernel", lambda name, *a, **k: seen.append(name) or kernel(name, *a, **k))
    A = load_matrix("email-Eu-core").astype(np.float32)
    B = A.copy()
    B.data = np.random.default_rng(5).standard_normal(B.nnz).astype(np.float32)
    rows_step, entries_step = max(1, len(A.indptr) // operators.SAME_SAMPLES), max(1, A.nnz // operators.SAME_SAMPLES)
    # A row (off the sample) with a free column next to its last one, so that moving the last
    # entry there keeps the row sorted; or a row bound (off the sample) moved by one.
    lengths = np.diff(A.indptr)
    if change == "column":
        row = next(i for i in range(1, A.shape[0]) if lengths[i] > 1 and (A.indptr[i + 1] - 1) % entries_step
                   and A.indices[A.indptr[i + 1] - 1] + 1 < A.shape[1]
                   and A.indices[A.indptr[i + 1] - 1] + 1 not in A.indices[A.indptr[i]:A.indptr[i + 1]])  # fmt: skip
        B.indices[B.indptr[row + 1] - 1] += 1
    else:
        # Row i - 1's last entry becomes row i's first: the columns stay as they are (the
        # entry's column is below row i's first), only the row bound differs.
        row = next(i for i in range(1, A.shape[0]) if i % rows_step and lengths[i - 1] > 1 and lengths[i]
                   and A.indices[A.indptr[i] - 1] < A.indices[A.indptr[i]])  # fmt: skip
        B.indptr[row] -= 1
        assert B.has_canonical_format and np.array_equal(A.indices, B.indices)
    assert B.nnz == A.nnz and operators._maybe_same_level(A, B)
    assert (pattern(A) != pattern(B)).nnz  # the structures differ
    check_add(A, B, 0.5, 2.0, threads=threads)
    check_multiply(A, B, threads=threads)
    if threads > 1:
        assert seen == ["same_add", "add", "same_multiply", "multiply"]


def test_intersections_of_rows_apart_touching_and_overlapping(monkeypatch):
    """The intersection skips rows whose column ranges do not overlap: rows apart, rows that
    touch at one column (kept), rows inside one another, and a row against an empty one; by
    the compiled driver and by the parallel kernel."""
    from sparsetir_py.coiteration import host

    monkeypatch.setattr(host, "EWISE_GRAIN", 0)
    rows = [([0, 1, 2], [3, 4]), ([5, 9], [0, 4]), ([0, 4], [4, 7]), ([2, 8], [0, 1, 5, 8, 9]),
            ([1, 3, 5, 7], [3]), ([], [1, 2]), ([6], []), ([0, 9], [0, 9])]  # fmt: skip
    A = scipy.sparse.csr_matrix(
        ([1.0] * sum(len(a) for a, _ in rows), [j for a, _ in rows for j in a],
         np.cumsum([0] + [len(a) for a, _ in rows])), shape=(len(rows), 10))  # fmt: skip
    B = scipy.sparse.csr_matrix(
        (np.arange(1.0, 1 + sum(len(b) for _, b in rows)), [j for _, b in rows for j in b],
         np.cumsum([0] + [len(b) for _, b in rows])), shape=(len(rows), 10))  # fmt: skip
    big = scipy.sparse.block_diag([A] * 500, format="csr"), scipy.sparse.block_diag([B] * 500, format="csr")
    for threads in (1, 2):
        assert check_multiply(A, B, threads=threads).nnz == 5  # (2, 4), (3, 8), (4, 3), (7, 0), (7, 9)
        assert check_multiply(*big, threads=threads).nnz == 5 * 500


def test_reexported_by_sp_ops():
    assert (sp.ops.spgemm, sp.ops.add, sp.ops.multiply) == (spgemm, add, multiply)


def test_new_values_same_structure():
    """A structure remembered from an earlier call still reads the matrix's current values."""
    A = load_matrix("karate").copy()
    check_spgemm(A, A)
    A.data = A.data * 3
    check_spgemm(A, A)
    check_add(A, A, 1.0, 0.5)


def test_sparse_array_in_array_out():
    A = scipy.sparse.csr_array(load_matrix("karate"))
    for C in (spgemm(A, A), add(A, A), multiply(A, A)):
        assert isinstance(C, scipy.sparse.csr_array)


# ------------------------------------------------------------------ errors
def test_errors():
    A = load_matrix("karate")
    with pytest.raises(sp.InputError, match="scipy sparse"):
        spgemm(A.toarray(), A)
    with pytest.raises(sp.InputError, match="do not multiply"):
        spgemm(A, A[:5])
    with pytest.raises(sp.InputError, match="same shape"):
        add(A, A[:5])
    with pytest.raises(sp.InputError, match="result's shape"):
        spgemm(A, A, mask=A[:5])
    with pytest.raises(sp.InputError, match="real number"):
        add(A, A, alpha="2")
    with pytest.raises(sp.InputError, match="threads"):
        multiply(A, A, threads=0)
    with pytest.raises(sp.InputError, match="unknown spgemm schedule"):
        spgemm(A, A, schedule="nope")
    with pytest.raises(sp.InputError, match="unknown target"):
        spgemm(A, A, target="tpu")
    broken = A.copy()
    broken.indices = broken.indices.copy()
    broken.indices[0] = 99
    with pytest.raises(sp.InputError, match="indices"):
        spgemm(broken, A)
    with pytest.raises(sp.InputError, match="complex"):
        multiply(A, A.astype(np.complex64))


# ------------------------------------------------------------------ the interpreter as the oracle
def test_kernels_match_the_interpreter():
    """Each Stage II kernel, run by the loop interpreter and compiled, writes the same arrays."""
    from sparsetir_py.script import from_script

    rng = np.random.default_rng(11)
    A = make_csr(rng.random((5, 6)) < 0.5, rng.uniform(-1, 1, 30), "int32", "float64")
    B = make_csr(rng.random((6, 4)) < 0.5, rng.uniform(-1, 1, 24), "int32", "float64")
    E = make_csr(rng.random((5, 6)) < 0.5, rng.uniform(-1, 1, 30), "int32", "float64")
    bounds = operators.chunk_bounds(np.arange(6), 2)
    struct = {"a_indptr": A.indptr, "a_indices": A.indices, "b_indptr": B.indptr, "b_indices": B.indices}
    sizes = {"m": 5, "k": 6, "n": 4, "parts": 2, "nnz_a": A.nnz, "nnz_b": B.nnz}
    C = spgemm(A, B)
    cases = [
        ("count", {**struct, **sizes, "c_count": np.zeros(5, np.int32), "c_work": np.zeros(5, np.int64),
                   "bounds": bounds}),
        ("numeric", {**struct, **sizes, "a_data": A.data, "b_data": B.data, "c_data": np.zeros(C.nnz),
                     "c_indptr": C.indptr, "c_indices": np.zeros(C.nnz, np.int32), "nnz_c": C.nnz, "bounds": bounds}),
        ("add", {"a_data": A.data, "a_indptr": A.indptr, "a_indices": A.indices, "b_data": E.data,
                 "b_indptr": E.indptr, "b_indices": E.indices, "c_data": np.zeros(A.nnz + E.nnz),
                 "c_indices": np.zeros(A.nnz + E.nnz, np.int32), "c_start": (A.indptr + E.indptr).astype(np.int32),
                 "c_count": np.zeros(5, np.int32), "bounds": bounds, "m": 5, "parts": 2, "nnz_a": A.nnz,
                 "nnz_b": E.nnz, "nnz_c": A.nnz + E.nnz, "alpha": 2.0, "beta": -1.0}),
    ]  # fmt: skip
    for name, args in cases:
        func = from_script(operators._script(name, "int32", "float64"))
        interpreted = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}
        sp.interpret(func, **interpreted)
        compiled = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}
        operators.kernel(name, "int32", "float64")(**compiled)
        for key, value in interpreted.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_allclose(compiled[key], value, rtol=1e-12, err_msg=f"{name}: {key}")
    np.testing.assert_array_equal(cases[1][1]["c_indptr"], C.indptr)
    count = cases[0][1]
    sp.interpret(from_script(operators._script("count", "int32", "float64")), **count)
    np.testing.assert_array_equal(count["c_work"], np.diff(operators.work_prefix(A.indptr, A.indices, B.indptr)))
