"""`sp.format.decompose`: the parts of every shipped format, and of a user's rule without a
converter, hold exactly A's nonzeros; slots and padding are the converted arrays' own."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import format_rules
import sparsetir_py as sp
from tests.strategies import csr_matrices, edge_matrices

FORMATS = {
    "bsr": (format_rules.bsr, {"block_size": 3}),
    "ell": (format_rules.ell, {"buckets": [1, 2, 4]}),
    "hyb": (format_rules.hyb, {"num_col_parts": 2, "buckets": [1, 4]}),
    "padding": (format_rules.padding, {"pad_size": 4}),
}


def check(A, d):
    assert sum(p.nnz for p in d.parts) == A.nnz
    np.testing.assert_array_equal(d.reconstruct().toarray(), A.toarray())
    for p in d.parts:
        assert p.slots >= p.nnz >= 0 and p.padding == p.slots - p.nnz
        assert p.matrix.shape == A.shape
        value_arrays = [v for k, v in p.arrays.items() if k.startswith("a_")]
        assert sum(np.size(v) for v in value_arrays) == p.slots
        # The part's values hold its nonzeros' values and zeros (padding) otherwise.
        stored = np.concatenate([np.ravel(v) for v in value_arrays]) if value_arrays else np.zeros(0)
        np.testing.assert_allclose(np.sort(stored[stored != 0]), np.sort(p.matrix.data[p.matrix.data != 0]))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=18, max_cols=18))
def test_parts_partition_the_nonzeros(fmt, A):
    module, params = FORMATS[fmt]
    check(A, sp.format.decompose(A, module, **params))


@pytest.mark.parametrize("name", list(edge_matrices()))
def test_edge_matrices(name):
    A = edge_matrices()[name]
    check(A, sp.format.decompose(A, format_rules.hyb, num_col_parts=1, buckets=[1, 2]))


def test_known_padding_on_a_real_graph():
    A = sp.data.load_matrix("cora")
    d = sp.format.decompose(A, format_rules.padding, pad_size=4)
    (part,) = d.parts
    lengths = np.diff(A.indptr)
    assert part.slots == int((-(-lengths // 4) * 4).sum())
    assert part.padding == part.slots - A.nnz
    assert d.table()[0]["padding %"] == round(100 * part.padding / part.slots, 1)


def test_a_list_of_rules_and_errors():
    A = sp.data.load_matrix("karate")
    rules = format_rules.bsr.rules(2, dtype="float64")
    check(A, sp.format.decompose(A, rules))
    with pytest.raises(sp.FormatError, match="need a rule module"):
        sp.format.decompose(A, rules, block_size=2)
    with pytest.raises(sp.FormatError, match="rule module"):
        sp.format.decompose(A, "bsr")
    with pytest.raises(sp.FormatError, match="unexpected keyword"):
        sp.format.decompose(A, format_rules.bsr, nope=1)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=csr_matrices(max_rows=15, max_cols=15, value_dtypes=("float32",), index_dtypes=("int32", "int64")))
def test_inferred_rule_file(A, tmp_path_factory):
    """The row-pairs format of the tutorial (no `convert`): inferred, partitioned, and its SpMM
    through `sp.ops` equals scipy."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "format_rules.md").read_text()
    path = tmp_path_factory.mktemp("rule") / "pairs.py"
    path.write_text(text.split("# file: pairs.py\n")[1].split("```")[0])
    pairs = format_rules.load(path)
    d = sp.format.decompose(A, pairs)
    check(A, d)
    B = np.random.default_rng(0).uniform(-1, 1, (A.shape[1], 3)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format=pairs), A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("value_dtype", ["float32", "float64"])
def test_values_keep_the_matrix_dtype(value_dtype):
    A = sp.data.load_matrix("karate", dtype=value_dtype)
    d = sp.format.decompose(A, format_rules.ell, buckets=[4, 32])
    assert all(v.dtype == np.dtype(value_dtype) for p in d.parts for k, v in p.arrays.items() if k.startswith("a_"))
