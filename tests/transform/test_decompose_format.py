"""`decompose_format` (composable formats, Stage I -> Stage I) and `FormatRewriteRule`.

What is checked: the decomposed function (renamed parameters, copy iterations with the
`preprocess` attribute, one init iteration, one compute iteration per rule) verifies, prints and
parses back to an equal function, and computes what the original did: through the interpreter and
the CPU kernel, against scipy, with outputs pre-filled with NaN (each output point initialised
once, also rows no part touches), for BSR (shapes not divisible by the block: padding), ELL and
two rules that partition the nonzeros. `extract_preprocess` / `remove_preprocess` split it. Every
named error of the rule and of the pass has a test.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from strategies import edge_matrices

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import spmm_script
from sparsetir_py.transform.decompose_format import PREPROCESS


@T.prim_func
def bsr(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32, block_size: T.int32):
    IO = T.dense_fixed(m)
    JO = T.sparse_variable(IO, (n, nnz), (indptr, indices), "int32")
    II = T.dense_fixed(block_size)
    JI = T.dense_fixed(block_size)
    A = T.match_sparse_buffer(a, (IO, JO, II, JI), "float32")


@T.prim_func
def ell(a: T.handle, indices: T.handle, m: T.int32, n: T.int32, width: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_fixed(I, (n, width), indices, "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")


def bsr_rule(b: int, name: str = "b") -> sp.FormatRewriteRule:
    return sp.FormatRewriteRule(
        name, bsr.specialize({"block_size": b}), ["A"], ["I", "J"], ["IO", "JO", "II", "JI"],
        {"I": ["IO", "II"], "J": ["JO", "JI"]},
        lambda i, j: (i // b, j // b, i % b, j % b),
        lambda io, jo, ii, ji: (io * b + ii, jo * b + ji),
    )  # fmt: skip


def ell_rule(name: str = "ell") -> sp.FormatRewriteRule:
    return sp.FormatRewriteRule(
        name, ell, ["A"], ["I", "J"], ["I", "J"], {"I": ["I"], "J": ["J"]}, lambda i, j: (i, j), lambda i, j: (i, j)
    )


def bsr_args(A: scipy.sparse.csr_matrix, b: int, name: str = "b") -> dict:
    """BSR arguments of a rule named `name` (what the converters of the next step produce)."""
    m, n = A.shape
    mp, np_ = -(-m // b) * b, -(-n // b) * b
    indptr = np.concatenate([A.indptr, np.full(mp - m, A.nnz, A.indptr.dtype)])
    P = scipy.sparse.csr_matrix((A.data, A.indices, indptr), shape=(mp, np_)).tobsr((b, b))
    P.sort_indices()
    return {
        f"a_{name}": np.ascontiguousarray(P.data, dtype=np.float32),
        f"indptr_{name}": P.indptr.astype(np.int32),
        f"indices_{name}": P.indices.astype(np.int32),
        f"m_{name}": mp // b,
        f"n_{name}": np_ // b,
        f"nnz_{name}": len(P.indices),
    }


def ell_args(A: scipy.sparse.csr_matrix, name: str = "ell") -> dict:
    """ELL arguments: every row padded to the longest with unstored coordinates (value 0)."""
    m, n = A.shape
    lengths = np.diff(A.indptr)
    width = int(lengths.max(initial=0))
    cols = np.zeros((m, width), np.int32)
    vals = np.zeros((m, width), np.float32)
    rows = np.repeat(np.arange(m), lengths)
    slots = np.arange(A.nnz) - np.repeat(A.indptr[:-1], lengths)
    cols[rows, slots], vals[rows, slots] = A.indices, A.data
    # Padding: the columns after the row's last one, still sorted and unique (n >= width here).
    pad = np.arange(width)[None, :] >= lengths[:, None]
    last = np.where(lengths > 0, cols[np.arange(m), np.maximum(lengths - 1, 0)], -1)
    cols = np.where(pad, last[:, None] + 1 + np.arange(width)[None, :] - lengths[:, None], cols)
    assert (cols < max(n, 1) + width).all()
    indices = cols.reshape(-1).astype(np.int32)
    return {f"a_{name}": vals.reshape(-1), f"indices_{name}": indices, f"m_{name}": m, f"n_{name}": n + width,
            f"width_{name}": width}  # fmt: skip


def spmm_args(A, feat: int = 5, seed: int = 0) -> dict:
    A = A.astype(np.float32)
    m, n = A.shape
    B = np.random.default_rng(seed).standard_normal((n, feat)).astype(np.float32)
    return dict(a=A.data, b=B, c=np.full((m, feat), np.nan, np.float32), indptr=A.indptr.astype(np.int32),
                indices=A.indices.astype(np.int32), m=m, n=n, feat=feat, nnz=A.nnz)  # fmt: skip


def test_decomposed_function_has_the_contract_shape():
    mod = sp.decompose_format(spmm_script(), [bsr_rule(4, "b4")])
    f = mod["main"]
    names = [p.name for p in f.params]
    assert names[-6:] == ["a_b4", "indptr_b4", "indices_b4", "m_b4", "n_b4", "nnz_b4"]
    assert {a.name for a in f.axes} >= {"IO_b4", "JO_b4", "II_b4", "JI_b4"}
    iterations = [s for s in f.body.stmts]
    assert [s.name for s in iterations] == ["rewrite_A_b4", "csrmm_init", "csrmm_b4"]
    assert iterations[0].attrs.get(PREPROCESS) is True
    assert iterations[2].kinds == "SRSRS" and iterations[2].init is None
    sp.verify(f)
    assert sp.structural_equal(sp.from_script(f.script()), f)
    assert sp.structural_equal(sp.format_decompose(spmm_script(), [bsr_rule(4, "b4")])["main"], f)
    no_copies = sp.decompose_format(spmm_script(), [bsr_rule(4, "b4")], include_format_rewrite_blks=False)["main"]
    assert [s.name for s in no_copies.body.stmts] == ["csrmm_init", "csrmm_b4"]


MATRICES = ["karate", "3x4_no_nnz", "1x7_full_row", "6x5_staircase_int64", "2x11_last_row_empty", "0x5", "4x0"]


def matrix(name):
    return load_matrix(name) if name == "karate" else edge_matrices()[name]


@pytest.mark.parametrize("block", [2, 3])
@pytest.mark.parametrize("mname", MATRICES)
def test_bsr_decomposition_computes_spmm(mname, block):
    """Padding rows and columns (shapes not divisible by the block) compute nothing; the copy
    iteration fills the BSR values the converter would (checked against scipy's tobsr)."""
    A = matrix(mname)
    mod = sp.decompose_format(spmm_script(), [bsr_rule(block)])
    want_bsr = bsr_args(A, block)
    for run in ("interpret", "cpu"):
        args = {**spmm_args(A), **want_bsr, "a_b": np.full_like(want_bsr["a_b"], np.nan)}
        if run == "interpret":
            sp.interpret(mod, **args)
        else:
            sp.compile(mod, "cpu")(**args)
        np.testing.assert_allclose(args["c"], A.astype(np.float32) @ args["b"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(args["a_b"], want_bsr["a_b"])  # the copy iteration = the converter


def test_two_rules_partition_the_nonzeros():
    """Rows split between an ELL part and a BSR part: both accumulate into C, initialised once;
    rows that no part touches (empty rows) are zero, not NaN."""
    A = load_matrix("karate").astype(np.float32).tocsr()
    lengths = np.diff(A.indptr)
    short = scipy.sparse.diags((lengths <= 4).astype(np.float32)) @ A
    long = A - short
    short, long = scipy.sparse.csr_matrix(short), scipy.sparse.csr_matrix(long)
    for part in (short, long):
        part.eliminate_zeros()
        part.sort_indices()
    mod = sp.remove_preprocess(sp.decompose_format(spmm_script(), [ell_rule("e"), bsr_rule(4, "b")]))
    args = {**spmm_args(A), **ell_args(short, "e"), **bsr_args(long, 4, "b")}
    params = {p.name for p in mod["main"].params}
    args = {k: v for k, v in args.items() if k in params}
    assert "a" not in params and "indptr" not in params  # the CSR arrays are not needed any more
    sp.interpret(mod, **args)
    np.testing.assert_allclose(args["c"], A @ args["b"], rtol=1e-5, atol=1e-5)
    args["c"][:] = np.nan
    sp.compile(mod, "cpu")(**args)
    np.testing.assert_allclose(args["c"], A @ args["b"], rtol=1e-5, atol=1e-5)


def test_extract_and_remove_preprocess():
    mod = sp.decompose_format(spmm_script(), [bsr_rule(2)])
    pre, main = sp.extract_preprocess(mod)["main"], sp.remove_preprocess(mod)["main"]
    assert [s.name for s in (pre.body.stmts if hasattr(pre.body, "stmts") else [pre.body])] == ["rewrite_A_b"]
    assert pre.params == mod["main"].params
    assert [s.name for s in main.body.stmts] == ["csrmm_init", "csrmm_b"]
    sp.verify(pre)
    sp.verify(main)
    A = load_matrix("karate")
    args = {**spmm_args(A), **bsr_args(A, 2)}
    args["a_b"][:] = np.nan
    sp.interpret(pre, **args)  # the copy alone fills the BSR values
    np.testing.assert_array_equal(args["a_b"], bsr_args(A, 2)["a_b"])


# ---------------------------------------------------------------- named errors
def make_rule(**changes):
    fields = dict(
        name="b", new_format_desc=bsr.specialize({"block_size": 2}), buffers_to_rewrite=["A"],
        axes_before_rewrite=["I", "J"], axes_after_rewrite=["IO", "JO", "II", "JI"],
        axis_map={"I": ["IO", "II"], "J": ["JO", "JI"]},
        idx_map=lambda i, j: (i // 2, j // 2, i % 2, j % 2),
        inv_idx_map=lambda io, jo, ii, ji: (io * 2 + ii, jo * 2 + ji),
    )  # fmt: skip
    fields.update(changes)
    return sp.FormatRewriteRule(*fields.values())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "not a name"}, "identifier"),
        ({"new_format_desc": "bsr"}, "must be a PrimFunc"),
        ({"buffers_to_rewrite": ["Z"]}, "declares no sparse buffer of that name"),
        ({"axes_after_rewrite": ["IO", "JO", "II", "XX"]}, "does not declare"),
        ({"axis_map": {"I": ["IO", "II"]}}, "does not cover axes_before_rewrite `J`"),
        ({"axis_map": {"I": ["IO", "II"], "J": ["JO"]}}, "no axis of axes_before_rewrite maps to `JI`"),
        ({"axis_map": {"I": ["IO", "II"], "J": ["JO", "JI"], "K": ["JO"]}}, "not in axes_before_rewrite"),
        ({"idx_map": lambda i: (i, i, i, i)}, "must take 2 coordinates"),
        ({"idx_map": lambda i, j: (i, j)}, "must return 4 coordinates"),
        ({"idx_map": lambda i, j: (i * j, j, i, j)}, "must be affine"),
        ({"inv_idx_map": 3}, "must be a callable or an arith.IndexingMap"),
        ({"buffers_to_rewrite": "A"}, "must be a list of names"),
    ],
)
def test_rule_errors(changes, message):
    with pytest.raises(sp.FormatError, match=message):
        make_rule(**changes)


def test_indexing_map_as_index_map():
    from sparsetir_py.arith import parse_indexing_map

    idx = parse_indexing_map(
        "(d0, d1) -> (d0 floordiv 2, d1 floordiv 2, d0 mod 2, d1 mod 2), domain: d0 in [0, 99], d1 in [0, 99]"
    )
    inv = parse_indexing_map(
        "(d0, d1, d2, d3) -> (d0 * 2 + d2, d1 * 2 + d3), domain: d0 in [0, 49], d1 in [0, 49], d2 in [0, 1], "
        "d3 in [0, 1]"
    )
    rule = make_rule(idx_map=idx, inv_idx_map=inv)
    assert str(rule.idx_map) == str(make_rule().idx_map)
    with pytest.raises(sp.FormatError, match="must map 4 coordinates to 2"):
        make_rule(inv_idx_map=idx)


def test_pass_errors():
    f = spmm_script()
    with pytest.raises(sp.FormatError, match="axes_before_rewrite names `X`"):
        sp.decompose_format(
            f, [make_rule(axes_before_rewrite=["X", "J"], axis_map={"X": ["IO", "II"], "J": ["JO", "JI"]})]
        )
    f64 = spmm_script(dtype="float64")
    with pytest.raises(sp.FormatError, match="is float32, but `A` is float64"):
        sp.decompose_format(f64, [make_rule()])
    with pytest.raises(sp.FormatError, match="rule names must be unique"):
        sp.decompose_format(f, [make_rule(), make_rule()])
    with pytest.raises(sp.FormatError, match="at least one"):
        sp.decompose_format(f, [])
    with pytest.raises(sp.FormatError, match="`C`"):  # a written buffer cannot be rewritten yet
        sp.decompose_format(f, [make_rule(buffers_to_rewrite=["C"])])
