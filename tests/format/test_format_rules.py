"""The shipped rule files (format_rules/) and a user's own, end to end on SpMM.

For each format: `rules(...)` decomposes the SpMM script, `convert(A, ...)` gives the new
arguments, and the decomposed function (the computation alone, after `remove_preprocess`)
equals scipy through the interpreter and the CPU kernel, on a real graph and on drawn matrices
(empty rows, empty matrices, one row, rectangular, shapes not divisible by the block, int64
indices, float64 values); the output starts as NaN, so a point left uninitialised fails.
With the copy iterations kept, they rebuild the converter's values from the CSR arrays.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import csr_matrices

import format_rules
import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import spmm_script


def shipped_rules(fmt: str, A, dtype: str, idtype: str):
    kw = dict(dtype=dtype, idtype=idtype)
    if fmt == "bsr":
        return format_rules.bsr.rules(3, **kw)
    if fmt == "padding":
        return format_rules.padding.rules(4, **kw)
    if fmt == "ell":
        return format_rules.ell.rules(A, [1, 2, 4], **kw)
    return format_rules.hyb.rules(A, 2, [1, 2, 4], **kw)


FORMATS = ["bsr", "padding", "ell", "hyb"]


def run_spmm(mod, A, args, dtype, feat=4, *, target="cpu", seed=0):
    m, n = A.shape
    B = np.random.default_rng(seed).standard_normal((n, feat)).astype(dtype)
    C = np.full((m, feat), np.nan, dtype)
    base = dict(a=A.data.astype(dtype), b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=feat, nnz=A.nnz)
    params = {p.name for p in mod["main"].params}
    kwargs = {k: v for k, v in {**base, **args}.items() if k in params}
    if target == "interpret":
        sp.interpret(mod, **kwargs)
    else:
        sp.compile(mod, target)(**kwargs)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("fmt", FORMATS)
def test_shipped_format_on_a_real_graph(fmt):
    A = load_matrix("cora")
    rules = shipped_rules(fmt, A, "float32", "int32")
    mod = sp.remove_preprocess(sp.decompose_format(spmm_script(), rules))
    run_spmm(mod, A, sp.format.convert(A, rules), "float32")


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=14, max_cols=14), data=st.data())
def test_shipped_formats_on_drawn_matrices(fmt, A, data):
    dtype, idtype = str(A.dtype), str(A.indices.dtype)
    rules = shipped_rules(fmt, A, dtype, idtype)
    full = sp.decompose_format(spmm_script(idtype, dtype), rules)
    args = sp.format.convert(A, rules)
    # The CPU kernel in the paired dtypes (int32 with float32, int64 with float64): a decomposed
    # kernel compiles in seconds per dtype pair; the mixed pairs run in the interpreter.
    paired = (idtype, dtype) in {("int32", "float32"), ("int64", "float64")}
    target = data.draw(st.sampled_from(["interpret", "cpu"]), "target") if paired else "interpret"
    run_spmm(sp.remove_preprocess(full), A, args, dtype, target=target)
    # With the copy iterations: they fill the new values from the CSR arrays themselves.
    filled = {k: (np.full_like(v, np.nan) if k.startswith("a_") else v) for k, v in args.items()}
    run_spmm(full, A, filled, dtype, target="interpret")
    for k, v in args.items():
        if k.startswith("a_"):
            np.testing.assert_array_equal(filled[k], v, err_msg=k)


USER_RULE = textwrap.dedent(
    '''
    """A user's format: CSR with the rows in reverse order (a made-up format, no `convert`)."""
    import sparsetir_py as sp
    from sparsetir_py import script as T


    @T.prim_func
    def reversed_rows(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
        A = T.match_sparse_buffer(a, (I, J), "float32")


    def rules(m):
        return [sp.FormatRewriteRule("rev", reversed_rows, ["A"], ["I", "J"], ["I", "J"], {"I": ["I"], "J": ["J"]},
                                     lambda i, j: (m - 1 - i, j), lambda i, j: (m - 1 - i, j))]
    '''
)


def test_a_users_rule_file(tmp_path):
    """Loaded from a folder of its own, with no `convert`: `sp.format.convert` infers the new
    format's arrays from the index maps, the copy iteration of the decomposition agrees with
    them, and the decomposed SpMM equals scipy."""
    path = tmp_path / "my_format.py"
    path.write_text(USER_RULE)
    module = format_rules.load(path)
    A = load_matrix("karate").astype(np.float32)
    m = A.shape[0]
    rules = module.rules(m)
    R = A[::-1].tocsr()
    R.sort_indices()
    inferred = sp.format.convert(A, rules)
    np.testing.assert_array_equal(inferred["indptr_rev"], R.indptr)
    np.testing.assert_array_equal(inferred["indices_rev"], R.indices)
    np.testing.assert_array_equal(inferred["a_rev"], R.data)
    assert (inferred["m_rev"], inferred["n_rev"], inferred["nnz_rev"]) == (m, A.shape[1], R.nnz)
    mod = sp.decompose_format(spmm_script(), rules)
    filled = {**inferred, "a_rev": np.full(R.nnz, np.nan, np.float32)}
    run_spmm(mod, A, filled, "float32", target="interpret")
    np.testing.assert_array_equal(filled["a_rev"], R.data)
    run_spmm(sp.remove_preprocess(mod), A, inferred, "float32")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=20, max_cols=20, value_dtypes=("float32",), index_dtypes=("int32",)),
       b=st.integers(1, 4))  # fmt: skip
def test_inferred_bsr_equals_the_converter(A, b):
    (rule,) = format_rules.bsr.rules(b)
    converted = rule.converter(A)
    rule = rule.replace(converter=None)
    inferred = sp.format.convert(A, [rule])
    assert set(inferred) == set(converted)
    for k, v in converted.items():
        np.testing.assert_array_equal(np.asarray(inferred[k]).reshape(-1), np.asarray(v).reshape(-1), err_msg=k)


def test_inference_errors():
    A = load_matrix("karate")
    bare = [r.replace(converter=None) for r in format_rules.hyb.rules(A, 1, [2, 4])]
    with pytest.raises(sp.FormatError, match="no telling which nonzero goes to which part"):
        sp.format.convert(A, bare)
    (ell,) = format_rules.hyb.rules(A, 1, [64])
    ell = ell.replace(converter=None)
    with pytest.raises(sp.FormatError, match="write a `convert"):
        sp.format.convert(A, [ell])


def test_load_errors(tmp_path):
    with pytest.raises(sp.FormatError, match="no rule file"):
        format_rules.load(tmp_path / "missing.py")
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(sp.FormatError, match="defines no `rules"):
        format_rules.load(tmp_path / "empty.py")


def test_format_rules_is_also_sp_format_rules():
    assert sp.format_rules is format_rules
    assert set(format_rules.SHIPPED) == {"bsr", "colparts", "ell", "hyb", "padding"}
