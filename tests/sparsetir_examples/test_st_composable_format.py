"""SparseTIR's composable-format tests with numbers: rule names are SparseTIR's own.

Follows: tests/python/sparsetir/test_composable_format.py (test_csrmm_bsr_rewrite with rules "4",
"16", "32"; test_csrmm_ell_rewrite with "4" .. "512"; test_csrmm_padding_rewrite with "32").
SparseTIR compares the decomposed IR with a script; here each decomposition is lowered, built and
run: the parts partition A's nonzeros (rows split between the rules, converted in this file), and
the interpreter and the CPU kernel give scipy's SpMM on a real graph and a random matrix.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from st_formats import (
    bsr_arrays,
    bsr_rules,
    buckets_of,
    ell_arrays,
    ell_rules,
    only_rows,
    padding_arrays,
    padding_rules,
)

import sparsetir_py as sp
from sparsetir_py.ops import spmm_script

FEAT = 3


def matrices() -> dict[str, scipy.sparse.csr_matrix]:
    rng = np.random.default_rng(25)
    random = scipy.sparse.random(37, 29, density=0.15, format="csr", random_state=rng, dtype=np.float32)
    random.sort_indices()
    return {"karate": sp.data.load_matrix("karate").astype(np.float32), "random_37x29": random}


def spmm_args(A) -> dict:
    m, n = A.shape
    B = np.random.default_rng(1).standard_normal((n, FEAT)).astype(np.float32)
    return dict(
        b=B, c=np.full((m, FEAT), np.nan, np.float32), indptr=A.indptr.astype(np.int32),
        indices=A.indices.astype(np.int32), a=A.data.astype(np.float32), m=m, n=n, feat=FEAT, nnz=A.nnz,
    )  # fmt: skip


def bsr_case(A):
    sizes = [4, 16, 32]
    thirds = np.array_split(np.arange(A.shape[0]), 3)
    args = {}
    for b, rows in zip(sizes, thirds):
        args.update(bsr_arrays(only_rows(A, rows), b, str(b)))
    return bsr_rules(sizes), args


def ell_case(A):
    widths = [4, 8, 16, 32, 64, 128, 512]
    args = {}
    for w, rows in zip(widths, buckets_of(A, widths)):
        args.update(ell_arrays(A, rows, w, str(w)))
    return ell_rules(widths), args


def padding_case(A):
    return padding_rules(32), padding_arrays(A, 32, "32")


CASES = {"bsr": bsr_case, "ell": ell_case, "padding": padding_case}
NAMES = {"bsr": ["4", "16", "32"], "ell": ["4", "8", "16", "32", "64", "128", "512"], "padding": ["32"]}


@pytest.fixture(scope="module")
def kernels() -> dict:
    """One CPU build per format (the decompositions do not depend on the matrix)."""
    return {}


@pytest.mark.parametrize("matrix", sorted(matrices()))
@pytest.mark.parametrize("fmt", sorted(CASES))
def test_sparsetir_rule_names_decompose_lower_build_and_compute(fmt, matrix, kernels):
    A = matrices()[matrix]
    rules, part_args = CASES[fmt](A)
    assert [r.name for r in rules] == NAMES[fmt]
    mod = sp.remove_preprocess(sp.decompose_format(spmm_script(), rules))
    names = [s.name for s in mod["main"].body.stmts]
    assert names == ["csrmm_init", *(f"csrmm_{n}" for n in NAMES[fmt])]
    params = {p.name for p in mod["main"].params}
    assert {f"a_{n}" for n in NAMES[fmt]} <= params
    want = A.toarray().astype(np.float64) @ spmm_args(A)["b"].astype(np.float64)
    if fmt not in kernels:
        kernels[fmt] = sp.compile(mod, "cpu")
    for run in ("interpret", "cpu"):
        args = {k: v for k, v in {**spmm_args(A), **part_args}.items() if k in params}
        if run == "interpret":
            sp.interpret(mod, **args)
        else:
            kernels[fmt](**args)
        np.testing.assert_allclose(args["c"], want, rtol=1e-5, atol=1e-5, err_msg=run)


def test_the_copy_iterations_fill_what_the_converters_give():
    """With the preprocess kept, the copy iterations `rewrite_A_<name>` fill the parts' values from
    A's (padding 0): the padding format, whose one rule covers all of A."""
    A = matrices()["karate"]
    rules, part_args = padding_case(A)
    mod = sp.decompose_format(spmm_script(), rules)
    assert mod["main"].body.stmts[0].name == "rewrite_A_32"
    args = {**spmm_args(A), **part_args, "a_32": np.full_like(part_args["a_32"], np.nan)}
    sp.interpret(mod, **args)
    np.testing.assert_array_equal(args["a_32"], part_args["a_32"])


@pytest.mark.parametrize("name", ["4", "0_0", "bsr_4", "_", "x"])
def test_names_that_make_identifiers_are_accepted(name):
    (rule,) = bsr_rules([4])
    rule = sp.FormatRewriteRule(name, *[getattr(rule, f) for f in FIELDS])
    f = sp.decompose_format(spmm_script(), [rule])["main"]
    assert f"a_{name}" in {p.name for p in f.params}
    assert sp.structural_equal(sp.from_script(f.script()), f)


FIELDS = (
    "new_format_desc", "buffers_to_rewrite", "axes_before_rewrite", "axes_after_rewrite", "axis_map", "idx_map",
    "inv_idx_map",
)  # fmt: skip


@pytest.mark.parametrize("name", ["a-b", "", " ", "4 ", "a.b", "1+1", 4, None])
def test_names_that_do_not_are_a_format_error(name):
    (rule,) = bsr_rules([4])
    with pytest.raises(sp.FormatError, match=r"the name must be a non-empty suffix that keeps names identifiers"):
        sp.FormatRewriteRule(name, *[getattr(rule, f) for f in FIELDS])
