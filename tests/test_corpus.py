"""The Stage I script corpus (SparseTIR's operator set) end to end at Stage I.

For every operator in `corpus.CASES`: the factory parses, the printed script parses back to a
structurally equal function, the verifier accepts it, and `sp.interpret` matches a scipy/numpy
reference on shipped matrices, on fixed edge-case matrices and on hypothesis-drawn ones
(float32/float64 values, int32/int64 indices). Outputs start as NaN, so an entry the
interpreter forgets to write fails. A few negative tests check that `sp.interpret` rejects bad
arrays with an `InputError` naming the argument.
"""

from __future__ import annotations

import functools

import corpus
import numpy as np
import pytest
import scipy.sparse
from corpus import CASES, CASES_BY_NAME, TOLERANCES
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import csr_matrices, edge_matrices

import sparsetir_py as sp
from sparsetir_py.data import available, load_matrix

CASE_NAMES = [case.name for case in CASES]
DTYPE_PAIRS = [("int32", "float32"), ("int64", "float64")]
EDGE_MATRICES = edge_matrices()


@functools.cache
def build(name: str, idtype: str, dtype: str) -> sp.PrimFunc:
    return CASES_BY_NAME[name].build(idtype, dtype)


@functools.cache
def shipped(name: str) -> scipy.sparse.csr_matrix:
    return load_matrix(name)


def assert_outputs_close(case_name: str, got: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    tol = TOLERANCES[dtype]
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(got, expected, rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=f"`{case_name}`")


def run_case(case: corpus.Case, A, idtype: str, dtype: str, *, seed: int = 0, feat: int = 4) -> None:
    """Interpret `case` on `A` and compare every output with the reference."""
    A = corpus.prepare_csr(A, idtype, dtype)
    func = build(case.name, idtype, dtype)
    kwargs, outputs = case.make_args(A, np.random.default_rng(seed), idtype, dtype, feat=feat)
    expected = case.reference(A, kwargs)
    inputs = {
        name: value.copy() for name, value in kwargs.items() if isinstance(value, np.ndarray) and name not in outputs
    }
    sp.interpret(func, **kwargs)
    for name in outputs:
        assert kwargs[name].dtype == np.dtype(dtype)
        assert_outputs_close(f"{case.name}: output {name}", kwargs[name], expected[name], dtype)
    for name, before in inputs.items():
        np.testing.assert_array_equal(kwargs[name], before, err_msg=f"`{case.name}` wrote its input {name}")


# ----------------------------------------------------------------------------------------------
# Parse, print, round trip, verify
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("idtype", "dtype"), DTYPE_PAIRS)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_parses(name, idtype, dtype):
    func = build(name, idtype, dtype)
    assert isinstance(func, sp.PrimFunc)
    assert func.stage == 1


@pytest.mark.parametrize(("idtype", "dtype"), DTYPE_PAIRS)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_round_trip(name, idtype, dtype):
    func = build(name, idtype, dtype)
    text = func.script()
    again = sp.from_script(text)
    sp.assert_structural_equal(func, again)
    assert sp.structural_equal(func, again)
    assert again.script() == text


@pytest.mark.parametrize(("idtype", "dtype"), DTYPE_PAIRS)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_verify(name, idtype, dtype):
    sp.verify(build(name, idtype, dtype))


def test_dtypes_reach_the_ir():
    """The factory's dtype arguments end up on the axes and buffers."""
    func = build("csrmm", "int64", "float64")
    assert {axis.idtype for axis in func.axes} == {"int64"}
    assert {buf.dtype for buf in func.buffers} == {"float64"}


def test_distinct_cases_are_not_equal():
    assert not sp.structural_equal(build("sddmm", "int32", "float32"), build("fused_sddmm", "int32", "float32"))
    assert not sp.structural_equal(build("csrmm", "int32", "float32"), build("csrmm", "int64", "float32"))


# ----------------------------------------------------------------------------------------------
# Interpretation against the references
# ----------------------------------------------------------------------------------------------

SHIPPED_PARAMS = [(case.name, matrix) for case in CASES for matrix in case.matrices]


@pytest.mark.parametrize(("name", "matrix"), SHIPPED_PARAMS)
def test_interpret_shipped(name, matrix):
    run_case(CASES_BY_NAME[name], shipped(matrix), "int32", "float32", feat=8)


@pytest.mark.parametrize("matrix", ["lp_afiro", "karate"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_interpret_shipped_int64_float64(name, matrix):
    run_case(CASES_BY_NAME[name], shipped(matrix), "int64", "float64", seed=1, feat=3)


@pytest.mark.parametrize("edge", list(EDGE_MATRICES))
@pytest.mark.parametrize("name", CASE_NAMES)
def test_interpret_edge_matrices(name, edge):
    A = EDGE_MATRICES[edge]
    run_case(CASES_BY_NAME[name], A, str(A.indices.dtype), str(A.dtype), seed=2, feat=2)


@pytest.mark.parametrize("name", CASE_NAMES)
@settings(max_examples=25, deadline=None)
@given(A=csr_matrices(), feat=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_interpret_hypothesis(name, A, feat, seed):
    run_case(CASES_BY_NAME[name], A, str(A.indices.dtype), str(A.dtype), seed=seed, feat=feat)


def test_interpret_csrmm_pubmed():
    """The demo's graph, once: 88,651 nonzeros."""
    run_case(CASES_BY_NAME["csrmm"], shipped("pubmed"), "int32", "float32", feat=2)


# ----------------------------------------------------------------------------------------------
# Bad inputs
# ----------------------------------------------------------------------------------------------


def csrmm_inputs():
    """csrmm's arguments on a small matrix whose fourth row has several entries."""
    A = corpus.prepare_csr(EDGE_MATRICES["6x5_staircase_int64"], "int32", "float32")
    kwargs, _ = corpus.CASES_BY_NAME["csrmm"].make_args(A, np.random.default_rng(0), "int32", "float32")
    return build("csrmm", "int32", "float32"), kwargs


def test_bad_input_unsorted_indices():
    func, kwargs = csrmm_inputs()
    indices = kwargs["indices"]
    lo = int(kwargs["indptr"][3])
    indices[lo], indices[lo + 1] = indices[lo + 1], indices[lo]
    with pytest.raises(sp.InputError, match=r"\bindices\b"):
        sp.interpret(func, **kwargs)


def test_bad_input_indices_out_of_range():
    func, kwargs = csrmm_inputs()
    kwargs["indices"][-1] = kwargs["n"]
    with pytest.raises(sp.InputError, match=r"\bindices\b"):
        sp.interpret(func, **kwargs)


def test_bad_input_indptr_not_monotone():
    func, kwargs = csrmm_inputs()
    indptr = kwargs["indptr"]
    indptr[3], indptr[4] = indptr[4], indptr[3]
    assert np.any(np.diff(indptr) < 0)
    with pytest.raises(sp.InputError, match=r"\bindptr\b"):
        sp.interpret(func, **kwargs)


def test_bad_input_indptr_does_not_end_at_nnz():
    func, kwargs = csrmm_inputs()
    kwargs["indptr"][-1] -= 1
    with pytest.raises(sp.InputError, match=r"\bindptr\b"):
        sp.interpret(func, **kwargs)


def test_bad_input_wrong_value_dtype():
    func, kwargs = csrmm_inputs()
    kwargs["b"] = kwargs["b"].astype(np.float64)
    with pytest.raises(sp.InputError, match=r"\bb\b"):
        sp.interpret(func, **kwargs)


def test_bad_input_wrong_index_dtype():
    func, kwargs = csrmm_inputs()
    kwargs["indices"] = kwargs["indices"].astype(np.int64)
    with pytest.raises(sp.InputError, match=r"\bindices\b"):
        sp.interpret(func, **kwargs)


def test_bad_input_wrong_value_size():
    func, kwargs = csrmm_inputs()
    kwargs["a"] = kwargs["a"][:-1].copy()
    with pytest.raises(sp.InputError, match=r"\ba\b"):
        sp.interpret(func, **kwargs)


def test_bad_input_read_only_output():
    func, kwargs = csrmm_inputs()
    kwargs["c"].setflags(write=False)
    with pytest.raises(sp.InputError, match=r"\bc\b"):
        sp.interpret(func, **kwargs)


def test_csr2bsr_with_a_block_missing_from_the_output_structure():
    """The gather reads A over B's structure: a block B does not store is simply not copied (B
    holds what its structure holds), and nothing is written outside B."""
    case = CASES_BY_NAME["csr2bsr"]
    A = corpus.prepare_csr(shipped("karate"), "int32", "float32")
    kwargs, _ = case.make_args(A, np.random.default_rng(0), "int32", "float32")
    want = case.reference(A, kwargs)["b"]
    indptr, indices = kwargs["indptr_out"], kwargs["indices_out"]
    last_of_row0 = int(indptr[1]) - 1  # drop the last stored block of block-row 0
    kwargs["indices_out"] = np.delete(indices, last_of_row0)
    kwargs["indptr_out"] = np.concatenate([indptr[:1], indptr[1:] - 1]).astype(indptr.dtype)
    kwargs["nnzb"] -= 1
    kwargs["b"] = kwargs["b"][:-1].copy()
    sp.interpret(build("csr2bsr", "int32", "float32"), **kwargs)
    np.testing.assert_array_equal(kwargs["b"], np.delete(want, last_of_row0, axis=0))


def test_rgcn_relation_out_of_range():
    """An edge type outside [0, num_rels) must not wrap around (numpy would read W[-1])."""
    case = CASES_BY_NAME["rgcn"]
    A = corpus.prepare_csr(shipped("karate"), "int32", "float32")
    for bad in (-1, corpus.NUM_RELS):
        kwargs, _ = case.make_args(A, np.random.default_rng(0), "int32", "float32")
        kwargs["etype"][0] = bad
        with pytest.raises(sp.SparseTIRError, match="`W`"):
            sp.interpret(build("rgcn", "int32", "float32"), **kwargs)


# ----------------------------------------------------------------------------------------------
# Shipped data
# ----------------------------------------------------------------------------------------------

SHIPPED = ["cora", "citeseer", "pubmed", "karate", "lp_afiro", "ash219", "Erdos971", "email-Eu-core"]


def test_available_lists_the_shipped_matrices():
    """Every matrix the corpus relies on is shipped (the benchmarks ship a few more)."""
    assert set(SHIPPED) <= set(available())


@pytest.mark.parametrize(("index_dtype", "dtype"), [(np.int32, np.float32), (np.int64, np.float64)])
@pytest.mark.parametrize("name", SHIPPED)
def test_load_matrix_is_canonical(name, index_dtype, dtype):
    A = load_matrix(name, dtype=dtype, index_dtype=index_dtype)
    assert isinstance(A, scipy.sparse.csr_matrix)
    assert A.dtype == dtype
    assert A.indices.dtype == index_dtype and A.indptr.dtype == index_dtype
    assert A.indptr[0] == 0 and A.indptr[-1] == A.nnz == len(A.indices)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    same_row = rows[1:] == rows[:-1]
    assert np.all(np.diff(A.indices)[same_row] > 0), "indices sorted and unique within rows"


def test_load_matrix_shapes():
    assert load_matrix("lp_afiro").shape == (27, 51)
    assert load_matrix("ash219").shape == (219, 85)
    assert np.count_nonzero(np.diff(load_matrix("Erdos971").indptr) == 0) == 39
    assert np.count_nonzero(np.diff(load_matrix("email-Eu-core").indptr) == 0) == 137


def test_load_matrix_unknown_name():
    with pytest.raises(KeyError, match="karate"):
        load_matrix("no-such-matrix")
