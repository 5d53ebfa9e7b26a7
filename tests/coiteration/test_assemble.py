"""Scripts whose sparse output the kernel assembles (`T.sparse_variable(..., assemble=True)`,
the design card §3f): SpGEMM, element-wise add and multiply of two and of three operands, compiled for the
CPU and checked against the interpreter (the coordinate-space oracle) and scipy, structure and
values, on edge matrices and hypothesis draws; the named errors of scripts that misuse it.

The structure is structural, as `sp.ops` assembles it: a coordinate a stored operand reaches is
stored even where its value computes to 0 (compared with scipy on the matrices' patterns).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from matrices import edge_matrices, make_csr, with_types
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py.errors import FrontendError, InputError, LoweringError, ScheduleError, VerifyError
from sparsetir_py.ops.scripts import elementwise_arguments, elementwise_script, spgemm_arguments, spgemm_script

ewise_script, spgemm_args, ewise_args = elementwise_script, spgemm_arguments, elementwise_arguments


def as_csr(out: dict, shape, values="c") -> scipy.sparse.csr_matrix:
    assert out["nnz_c"] == len(out["indices_c"]) == len(out[values])
    return scipy.sparse.csr_matrix((out[values], out["indices_c"], out["indptr_c"]), shape=shape)


def pattern(A) -> scipy.sparse.csr_matrix:
    """A's structure (explicit zeros included) as ones, float64."""
    P = scipy.sparse.csr_matrix(A, dtype=np.float64, copy=True)
    P.data[:] = 1.0
    return P


def check(out: dict, oracle: dict, shape, structure, values, dtype) -> None:
    """The kernel's arrays equal the interpreter's (structure exactly, values closely), and both
    have `structure`'s nonzeros (sorted rows) and `values`' values."""
    C, R = as_csr(out, shape), as_csr(oracle, shape)
    assert out["indptr_c"].dtype == out["indices_c"].dtype == oracle["indices_c"].dtype
    assert out["c"].dtype == np.dtype(dtype)
    assert np.array_equal(out["indptr_c"], oracle["indptr_c"]) and np.array_equal(out["indices_c"], oracle["indices_c"])
    S = structure.tocsr()
    S.sort_indices()
    assert np.array_equal(C.indptr, S.indptr) and np.array_equal(C.indices, S.indices)
    rows = np.repeat(np.arange(shape[0]), np.diff(C.indptr))
    want = np.asarray(values.tocsr()[rows, C.indices]).reshape(-1) if C.nnz else np.zeros(0)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(C.data, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(out["c"], oracle["c"], rtol=tol, atol=tol)


# ------------------------------------------------------------------ kernels, compiled once each
EXPRESSIONS = {  # name: (expression, operands, structure of the operands' patterns)
    "add": ("alpha * X0 + X1", 2, lambda P: P[0] + P[1]),
    "multiply": ("X0 * X1", 2, lambda P: P[0].multiply(P[1])),
    "add3": ("X0 + X1 - X2", 3, lambda P: P[0] + P[1] + P[2]),
    "multiply3": ("X0 * X1 * X2", 3, lambda P: P[0].multiply(P[1]).multiply(P[2])),
    "mixed3": ("X0 * X1 + alpha * X2", 3, lambda P: P[0].multiply(P[1]) + P[2]),
}
_KERNELS: dict = {}


def kernel(name: str, idtype="int32", dtype="float32"):
    key = (name, idtype, dtype)
    if key not in _KERNELS:
        _KERNELS[key] = sp.compile(script(name, idtype, dtype))
    return _KERNELS[key]


def script(name, idtype="int32", dtype="float32"):
    if name == "spgemm":
        return spgemm_script(idtype, dtype)
    expression, count, _ = EXPRESSIONS[name]
    return ewise_script(expression, count, idtype, dtype)


def values_of(name, mats, alpha=2.0):
    X = [scipy.sparse.csr_matrix(M, dtype=np.float64) for M in mats]
    return {
        "add": lambda: alpha * X[0] + X[1],
        "multiply": lambda: X[0].multiply(X[1]),
        "add3": lambda: X[0] + X[1] - X[2],
        "multiply3": lambda: X[0].multiply(X[1]).multiply(X[2]),
        "mixed3": lambda: X[0].multiply(X[1]) + alpha * X[2],
    }[name]()


def check_ewise(name, mats, idtype="int32", dtype="float32"):
    mats = [with_types(M, idtype, dtype) for M in mats]
    func = script(name, idtype, dtype)
    args = ewise_args(mats)
    out = kernel(name, idtype, dtype)(**args)
    structure = EXPRESSIONS[name][2]([pattern(M) for M in mats])
    check(out, sp.interpret(func, **args), mats[0].shape, structure, values_of(name, mats), dtype)


def check_spgemm(A, B, idtype="int32", dtype="float32"):
    A, B = with_types(A, idtype, dtype), with_types(B, idtype, dtype)
    args = spgemm_args(A, B)
    out = kernel("spgemm", idtype, dtype)(**args)
    values = scipy.sparse.csr_matrix(A, dtype=np.float64) @ scipy.sparse.csr_matrix(B, dtype=np.float64)
    check(out, sp.interpret(spgemm_script(idtype, dtype), **args), (A.shape[0], B.shape[1]),
          pattern(A) @ pattern(B), values, dtype)  # fmt: skip


def _rand(rng, m, n, density, dtype="float32"):
    mask = rng.random((m, n)) < density
    return make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", dtype)


EDGES = {name: A for name, A in edge_matrices().items() if A.shape[0] * A.shape[1] <= 400}


@pytest.mark.parametrize("name", list(EDGES))
def test_spgemm_edge_matrices(name):
    """A @ A.T and A.T @ A of the edge matrices (empty, 0-row, 0-column, one row, full rows)."""
    A = EDGES[name]
    check_spgemm(A, A.T.tocsr())
    check_spgemm(A.T.tocsr(), A)


def test_spgemm_rectangular_inner_dimension_one_and_a_graph():
    rng = np.random.default_rng(0)
    check_spgemm(_rand(rng, 6, 1, 0.7), _rand(rng, 1, 9, 0.7))
    check_spgemm(_rand(rng, 9, 4, 0.4), _rand(rng, 4, 13, 0.4))
    karate = sp.data.load_matrix("karate")
    check_spgemm(karate, karate)


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_elementwise_edge_and_random_matrices(name):
    """Each expression on the edge matrices (every operand the same shape), on random operands
    with empty rows, and on operands that cancel (`X0 + X1 - X2` with X2 = X0 + X1: stored zeros)."""
    count = EXPRESSIONS[name][1]
    rng = np.random.default_rng(1)
    for A in EDGES.values():
        others = [_rand(rng, *A.shape, 0.5) for _ in range(count - 1)]
        check_ewise(name, [A, *others])
    mats = [_rand(rng, 8, 11, 0.4) for _ in range(count)]
    for M in mats:
        M.data[M.indptr[2] : M.indptr[4]] = 0.0  # explicit zeros stay stored
    check_ewise(name, mats)
    if name == "add3":
        A, B = _rand(rng, 5, 7, 0.5), _rand(rng, 5, 7, 0.5)
        out = kernel(name)(**ewise_args([A, B, A + B]))
        assert np.abs(out["c"]).max() < 1e-6 and out["nnz_c"] == (pattern(A) + pattern(B)).nnz


def test_int64_float64():
    rng = np.random.default_rng(2)
    check_spgemm(_rand(rng, 7, 5, 0.4), _rand(rng, 5, 6, 0.4), "int64", "float64")
    check_ewise("add", [_rand(rng, 7, 5, 0.4), _rand(rng, 7, 5, 0.4)], "int64", "float64")


@settings(max_examples=12, deadline=None)
@given(csr_matrices(max_rows=12, max_cols=12, value_dtypes=("float32",), index_dtypes=("int32",)))
def test_hypothesis(A):
    """Random shapes and densities: SpGEMM A @ A.T and the three-operand add and multiply."""
    check_spgemm(A, A.T.tocsr())
    B = scipy.sparse.csr_matrix(A.T.T, copy=True)
    B.data = B.data[::-1].copy()
    rng = np.random.default_rng(A.nnz)
    check_ewise("add3", [A, B, _rand(rng, *A.shape, 0.3)])
    check_ewise("multiply3", [A, _rand(rng, *A.shape, 0.6), B])


def test_hash_workspace_by_the_schedule_primitive():
    """`sch.workspace(it, "hash")` (Stage I) picks the hash-table kernels; same result."""
    sch = sp.Schedule(spgemm_script())
    sch.workspace(sch.get_sparse_iteration("spgemm"), "hash")
    assert sch.mod["main"].body.attrs["workspace"] == "hash"
    assert sp.structural_equal(sch.trace.apply(spgemm_script()), sch.mod)
    kern = sp.compile(sch.mod)
    assert "keys" in kern.source
    rng = np.random.default_rng(3)
    A, B = _rand(rng, 9, 6, 0.4), _rand(rng, 6, 30, 0.3)
    args = spgemm_args(A, B)
    out = kern(**args)
    check(out, sp.interpret(spgemm_script(), **args), (9, 30), pattern(A) @ pattern(B), A @ B, "float32")


def test_stage2_module_and_round_trip():
    """lower_sparse_iter makes the symbolic and numeric kernels, each carrying the plan; they
    print and parse back; sp.build of the lowered module gives the same kernel as sp.compile."""
    mod = sp.lower_sparse_iter(spgemm_script())
    assert list(mod) == ["spgemm_count", "spgemm_numeric"]
    for f in mod.functions.values():
        assert sp.structural_equal(sp.from_script(f.script()), f)
    func = spgemm_script()
    assert sp.structural_equal(sp.from_script(func.script()), func)
    assert "assemble=True" in func.script()
    kern = sp.build(sp.lower_sparse_buffer(sp.lower_sparse_iter(ewise_script("X0 * X1", 2))))
    A = sp.data.load_matrix("karate")
    out = kern(**ewise_args([A, A.T.tocsr()]))
    assert abs(as_csr(out, A.shape) - A.multiply(A.T)).max() < 1e-6


# ------------------------------------------------------------------ named errors
def test_assemble_on_a_dense_level_is_a_frontend_error():
    source = spgemm_script().script().replace("J = T.dense_fixed(n)", "J = T.dense_fixed(n, assemble=True)")
    with pytest.raises(FrontendError, match="applies to `T.sparse_variable`"):
        sp.from_script(source)


def test_assemble_on_an_input_is_a_verify_error():
    source = spgemm_script().script()
    source = source.replace('(indptr_b, indices_b), "int32"', '(indptr_b, indices_b), "int32", assemble=True')
    with pytest.raises(VerifyError, match="never writes it"):
        sp.verify(sp.from_script(source))
    source = ewise_script("X0 * X1", 2).script().replace("C[i, j] = X0[i, j] * X1[i, j]", "X0[i, j] = C[i, j]")
    with pytest.raises(VerifyError, match="never writes it"):
        sp.verify(sp.from_script(source))


def test_reading_an_assembled_output_is_a_verify_error():
    source = ewise_script("X0 * X1", 2).script().replace("X0[i, j] * X1[i, j]", "X0[i, j] * X1[i, j] + C[i, 0]")
    with pytest.raises(VerifyError, match="reads the assembled output"):
        sp.verify(sp.from_script(source))


def test_unsupported_shapes_are_lowering_errors():
    """Dense where no operand is stored, or an operator the merge kernels do not take."""
    with pytest.raises(LoweringError, match="would be dense"):
        sp.lower_sparse_iter(ewise_script("X0 + alpha", 1))
    with pytest.raises(LoweringError, match="element-wise expression takes"):
        sp.lower_sparse_iter(sp.from_script(ewise_script("X0 * X1", 2).script().replace("*", "/", 1)))
    with pytest.raises(LoweringError, match="expected the update"):
        sp.lower_sparse_iter(sp.from_script(spgemm_script().script().replace("A[i, kk] * B", "A[i, kk] + B")))
    unsorted = ewise_script("X0 * X1", 2).script().replace('(p1, q1), "int32"', '(p1, q1), "int32", sorted=False')
    with pytest.raises(LoweringError, match="must be CSR: a sorted"):
        sp.lower_sparse_iter(sp.from_script(unsorted))


def test_interpreter_presence_semantics():
    """The oracle runs what the kernels refuse: a value that no stored operand reaches is stored
    where it is written nonzero (`X0 + alpha`: every coordinate), not where it is a literal 0."""
    A = make_csr(np.array([[1, 0, 1], [0, 0, 0]], bool), np.array([1.0, 2.0]), "int32", "float32")
    out = sp.interpret(ewise_script("X0 + alpha", 1), **ewise_args([A], alpha=0.5))
    assert out["nnz_c"] == 6 and list(out["c"]) == [1.5, 0.5, 2.5, 0.5, 0.5, 0.5]
    out = sp.interpret(ewise_script("X0 * 0.0 + X0", 1), **ewise_args([A]))
    assert list(out["indices_c"]) == [0, 2] and list(out["indptr_c"]) == [0, 2, 2]


def test_bad_arguments_are_input_errors():
    A = sp.data.load_matrix("karate")
    kern = kernel("multiply")
    args = ewise_args([A, A])
    with pytest.raises(InputError, match="assembled output"):
        kern(**args, c=np.zeros(A.nnz, np.float32))
    with pytest.raises(InputError, match="int32"):
        kern(**{**args, "q1": A.indices.astype(np.int64)})
    unsorted = A.indices.copy()
    unsorted[[0, 1]] = unsorted[[1, 0]]
    with pytest.raises(InputError, match="increasing"):
        kern(**{**args, "q0": unsorted})
    with pytest.raises(ScheduleError, match="assembled output"):
        from sparsetir_py.ops import spmm_script

        sch = sp.Schedule(spmm_script())
        sch.workspace(sch.get_sparse_iteration("csrmm"), "hash")
    with pytest.raises(ScheduleError, match="expected one of"):
        sch = sp.Schedule(spgemm_script())
        sch.workspace(sch.get_sparse_iteration("spgemm"), "tree")


def test_cuda_spgemm_needs_global_workspaces():
    with pytest.raises(sp.CodegenError, match="global"):
        sp.compile(spgemm_script(), "cuda")


# ------------------------------------------------------------------ masked SpGEMM in scripts
def masked_script(idtype="int32", dtype="float32"):
    """`C[i, j] += A[i, k] * B[k, j] * M[i, j]` with C assembled: SpGEMM where M stores, each
    entry times M's value (triangle counting with M = A)."""
    source = spgemm_script(idtype, dtype).script()
    source = source.replace("c: T.handle,", "mv: T.handle, mp: T.handle, mi: T.handle, c: T.handle,", 1)
    source = source.replace("nnz_c: T.int32)", "nnz_m: T.int32, nnz_c: T.int32)", 1)
    source = source.replace(
        "    J = T.dense_fixed(n)\n",
        f"    J = T.dense_fixed(n)\n    JM = T.sparse_variable(I, (n, nnz_m), (mp, mi), {idtype!r})\n"
        f"    M = T.match_sparse_buffer(mv, (I, JM), {dtype!r})\n",
    )
    source = source.replace("A[i, kk] * B[kk, j]", "A[i, kk] * B[kk, j] * M[i, j]")
    assert "M[i, j]" in source and "nnz_m" in source
    return sp.from_script(source)


def test_masked_spgemm_scripts():
    """Masked SpGEMM written in a script: the kernel (masked kernel plus compaction) equals the
    interpreter and scipy's `(A @ B) .* M`, on a real graph (triangles of karate), a rectangular
    product with an empty row, an empty mask, and int64/float64; a mask with a row missing is an
    `InputError`."""
    mod = sp.lower_sparse_iter(masked_script())
    assert list(mod) == ["spgemm_masked", "compact"]
    rng = np.random.default_rng(26)
    A = sp.data.load_matrix("karate")
    Ar = _rand(rng, 7, 5, 0.4)
    Ar = scipy.sparse.csr_matrix(Ar.toarray() * (np.arange(7) != 3)[:, None])  # row 3 empty
    Br = _rand(rng, 5, 9, 0.4)
    cases = [(A, A, A, "int32", "float32"), (Ar, Br, _rand(rng, 7, 9, 0.5), "int64", "float64"),
             (Ar, Br, scipy.sparse.csr_matrix((7, 9), dtype=np.float32), "int32", "float32")]  # fmt: skip
    for A_, B_, M_, idtype, dtype in cases:
        A_, B_, M_ = (with_types(X, idtype, dtype) for X in (A_, B_, M_))
        args = spgemm_args(A_, B_)
        args |= {"mv": M_.data, "mp": M_.indptr, "mi": M_.indices, "nnz_m": M_.nnz}
        out = sp.compile(masked_script(idtype, dtype))(**args)
        structure = (pattern(A_) @ pattern(B_)).multiply(pattern(M_))
        values = (A_.astype(np.float64) @ B_.astype(np.float64)).multiply(M_.astype(np.float64))
        check(out, sp.interpret(masked_script(idtype, dtype), **args), M_.shape, structure, values, dtype)
    out = sp.compile(masked_script())(**spgemm_args(A, A), mv=A.data, mp=A.indptr, mi=A.indices, nnz_m=A.nnz)
    assert round(float(out["c"].sum())) // 6 == 45  # karate's triangles
    bad = with_types(_rand(rng, 6, 9, 0.5), "int32", "float32")  # one row short
    args = spgemm_args(with_types(Ar, "int32", "float32"), with_types(Br, "int32", "float32"))
    with pytest.raises(InputError, match="`M.indptr` must have 8 entries"):
        sp.compile(masked_script())(**args, mv=bad.data, mp=bad.indptr, mi=bad.indices, nnz_m=bad.nnz)
