"""`python -m bench.coiteration`: every operator on a shipped graph, checked against scipy, with
ratios, the traffic model and the written report."""

import json

import numpy as np
import pytest
import scipy.sparse

from bench.coiteration import _sorted, check, main, mesh, traffic


def test_every_operator_on_a_small_graph(tmp_path, capsys):
    assert main(["all", "--graphs", "karate", "--repeat", "3", "--budget", "0.01", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "coiteration.json").read_text())
    assert [r["case"] for r in rows] == ["A @ A", "A @ A.T", "(A @ A) .* A", "A + A.T", "A + R", "A .* A.T", "A .* R"]
    for r in rows:
        assert r["ratio"]["scipy"] > 0 and r["error"]["ours"] < 1e-5 and r["bytes"] > 0
    assert "| karate | `A @ A` |" in (tmp_path / "coiteration.md").read_text()
    assert "karate" in capsys.readouterr().out


def test_check_allows_only_the_zeros_scipy_drops():
    A = mesh(4)
    C = (A @ A).tocsr()
    coo = C.tocoo()

    def plus(value):  # C with one more stored entry, at (0, 15), which C does not store
        data, row, col = np.append(coo.data, value), np.append(coo.row, 0), np.append(coo.col, 15)
        return scipy.sparse.csr_matrix((data, (row, col)), shape=C.shape)

    assert check(plus(0.0), C) == 0.0  # a stored zero where scipy stores nothing is allowed ...
    with pytest.raises(AssertionError, match="nonzeros"):
        check(plus(1.0), C)  # ... an entry scipy does not have is not


def test_traffic_counts_the_rows_a_product_selects():
    A = mesh(3)
    C = A @ A
    selected = int(np.diff(A.indptr)[A.indices].sum())
    structure = lambda M: (M.shape[0] + 1) * 4 + M.nnz * 8  # noqa: E731
    assert traffic("spgemm", A, A, C) == structure(A) + selected * 8 + structure(C)
    assert traffic("add", A, A, C) == 2 * structure(A) + structure(C)


def test_python_m_bench_runs_the_sparse_operators(capsys):
    """`python -m bench spgemm|masked|add|multiply` is the co-iteration bench, under bench's name."""
    from bench.__main__ import main as bench_main

    with pytest.raises(SystemExit) as exit_info:
        bench_main(["add", "--help"], prog="python -m bench")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m bench") and "{spgemm,masked,add,multiply,all}" in out


def test_sorted_orders_rows_whose_flag_says_they_are():
    """MKL's products leave rows unsorted and may say otherwise: `_sorted` orders them anyway."""
    C = scipy.sparse.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 1]), np.array([0, 2, 3])), shape=(2, 3))
    C.has_sorted_indices = True  # a stale flag: sort_indices() alone would do nothing
    dense = C.toarray()
    S = _sorted(C)
    assert list(S.indices) == [0, 2, 1] and np.array_equal(S.toarray(), dense)
