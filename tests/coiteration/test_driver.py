"""The compiled drivers of small calls (`ops.driver`): a one-thread SpGEMM, add or multiply runs
its host steps and kernels in one compiled function. Each is checked against scipy on the
matrices that reach it (the operators' other tests reach it too: every small call does), the
hand-over to the Python steps where the work passes the grain or the room its budget, and
the source it generates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
from strategies import make_csr
from test_fused import three_orders
from test_operators import check_add, check_multiply, check_spgemm

from sparsetir_py.coiteration import host
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import coiteration as operators
from sparsetir_py.ops import driver


@pytest.fixture
def driver_calls(monkeypatch):
    """The names of the drivers each call ran (wrapped where the operators look them up)."""
    seen = []
    make = operators._small_driver

    def counted(op, idtype, dtype):
        run = make(op, idtype, dtype)
        name = {"spgemm": "spgemm_driver", "masked": "masked_driver"}.get(op)
        name = name or ("same_driver" if op.startswith("same_") else "ewise_driver")
        return lambda *args: seen.append(name) or run(*args)

    monkeypatch.setattr(operators, "_small_driver", counted)
    return seen


def owned(C) -> bool:
    return all(a.base is None and a.flags.owndata for a in (C.data, C.indices, C.indptr))


@pytest.mark.parametrize("idtype, dtype", [("int32", "float32"), ("int64", "float64")])
def test_small_calls_run_the_drivers(idtype, dtype, driver_calls):
    """A small product, sum and element-wise product run one driver call each, equal scipy, keep
    the operands' dtypes and own their arrays; every ordering path of a row is taken."""
    A, B = three_orders(idtype, dtype)
    C = check_spgemm(A, B)
    assert driver_calls == ["spgemm_driver"] and owned(C)
    assert C.indices.dtype == np.dtype(idtype) and C.dtype == np.dtype(dtype)
    K = load_matrix("karate").astype(dtype)
    K.indices, K.indptr = K.indices.astype(idtype), K.indptr.astype(idtype)
    R = scipy.sparse.random(*K.shape, density=0.1, format="csr", random_state=5, dtype=dtype)
    driver_calls.clear()
    S, P = check_add(K, R, 1.5, -2.0), check_multiply(K, (K + R).tocsr())
    assert driver_calls == ["ewise_driver", "ewise_driver"] and owned(S) and owned(P)
    assert S.indices.dtype == np.dtype(idtype) and S.dtype == np.dtype(dtype)


@pytest.mark.parametrize("idtype, dtype", [("int32", "float64"), ("int64", "float32")])
def test_operands_of_one_structure_run_the_same_level_driver(idtype, dtype, driver_calls):
    """Operands storing the same coordinates (other arrays, equal contents; a symmetric A and
    its transpose) take the one-level driver: values only, the structure copied."""
    K = load_matrix("karate").astype(dtype)
    K.indices, K.indptr = K.indices.astype(idtype), K.indptr.astype(idtype)
    other = K.copy()
    other.data = np.random.default_rng(4).uniform(-2, 2, K.nnz).astype(dtype)
    S, P = check_add(K, other, 0.5, -3.0), check_multiply(K, other)
    assert driver_calls == ["same_driver", "same_driver"] and owned(S) and owned(P)
    assert S.indices is not K.indices and S.indices.dtype == np.dtype(idtype) and S.dtype == np.dtype(dtype)
    driver_calls.clear()
    check_add(K[:0], other[:0])
    assert driver_calls == ["same_driver"]


@pytest.mark.parametrize("idtype, dtype", [("int32", "float32"), ("int64", "float64")])
def test_small_masked_products_run_the_masked_driver(idtype, dtype, driver_calls):
    """Masks every entry of which the product hits (no compaction), some of which it misses
    (rows moved into the result's arrays), empty, and disjoint from the product."""
    K = load_matrix("karate").astype(dtype)
    K.indices, K.indptr = K.indices.astype(idtype), K.indptr.astype(idtype)
    full = (K @ K).tocsr()
    rng = np.random.default_rng(8)
    mixed = scipy.sparse.random(*K.shape, density=0.3, format="csr", random_state=2, dtype=dtype)
    empty = scipy.sparse.csr_matrix(K.shape, dtype=dtype)
    eye = scipy.sparse.identity(K.shape[0], dtype=dtype, format="csr")
    outside = full.toarray() == 0
    outside[outside.cumsum(axis=1) > 2] = False  # two coordinates a row where the product stores none
    disjoint = make_csr(outside, rng.uniform(1, 2, int(outside.sum())), idtype, dtype)
    for mask in (full, mixed, empty, eye, disjoint):
        C = check_spgemm(K, K, mask=mask)
        assert owned(C) and C.indices.dtype == np.dtype(idtype)
    assert C.nnz == 0 and disjoint.nnz > 0
    assert driver_calls.count("masked_driver") == 5


def test_edges_through_the_drivers(driver_calls):
    """Empty, 0-row, 0-column and one-row operands, and an inner dimension of 1."""
    rng = np.random.default_rng(3)
    for shape_a, shape_b in (((0, 4), (4, 3)), ((3, 0), (0, 5)), ((4, 4), (4, 0)), ((1, 6), (6, 6)), ((5, 1), (1, 7))):
        A, B, A2, B2 = (make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float32")
                        for mask in (rng.random(shape) < 0.6 for shape in (shape_a, shape_b) * 2))  # fmt: skip
        check_spgemm(A, B)
        check_add(A, A2, 2.0, 0.5)
        check_multiply(B, B2)
    assert {"spgemm_driver", "ewise_driver"} <= set(driver_calls)  # empty operands share a level


def test_a_product_past_the_grain_hands_over(monkeypatch, driver_calls):
    """Work at the parallel grain: the driver stops after each row's work, and the Python steps
    run the product (on more chunks: the same result); `threads=1` keeps it in the driver."""
    monkeypatch.setattr(host, "PARALLEL_GRAIN", 100)
    A = load_matrix("karate")
    assert operators._small_product(A, A, A.shape, scipy.sparse.csr_matrix, _names(A), None) is None
    check_spgemm(A, A, threads=2)
    driver_calls.clear()
    check_spgemm(A, A, threads=1)
    assert driver_calls == ["spgemm_driver"]


@pytest.mark.parametrize("idtype, dtype", [("int32", "float32"), ("int64", "float64")])
def test_large_one_thread_calls_skip_the_drivers(idtype, dtype, monkeypatch, driver_calls):
    """`threads=1` past `DRIVER_WORK` multiply-adds or `DRIVER_ENTRIES` merged entries: the
    Python steps and `cpu_serial`'s kernels instead of a driver (whose fresh arrays and final
    copy cost more than it saves there), the same results, arrays the result owns."""
    A = load_matrix("karate").astype(dtype)
    A.indices, A.indptr = A.indices.astype(idtype), A.indptr.astype(idtype)
    R = scipy.sparse.csr_matrix(A[::-1])
    other = A.copy()
    other.data = np.random.default_rng(6).uniform(-2, 2, A.nnz).astype(dtype)
    monkeypatch.setattr(operators, "DRIVER_WORK", int(np.diff(A.indptr)[A.indices].sum()))
    monkeypatch.setattr(operators, "DRIVER_ENTRIES", A.nnz)
    assert operators._small_product(A, A, A.shape, scipy.sparse.csr_matrix, _names(A), 1) is None
    driver_calls.clear()
    results = [check_spgemm(A, A, threads=1), check_add(A, R, 2.0, -1.0, threads=1),
               check_multiply(A, R, threads=1), check_add(A, other, 0.5, 1.5, threads=1)]  # fmt: skip
    # The SpGEMM driver only measured the rows' work before handing over.
    assert driver_calls == ["spgemm_driver"] and all(owned(C) for C in results)
    driver_calls.clear()
    # One entry fewer than the bounds: the drivers again.
    monkeypatch.setattr(operators, "DRIVER_WORK", int(np.diff(A.indptr)[A.indices].sum()) + 1)
    monkeypatch.setattr(operators, "DRIVER_ENTRIES", 2 * A.nnz + 1)
    check_spgemm(A, A, threads=1), check_add(A, R, threads=1), check_add(A, other, threads=1)
    assert driver_calls == ["spgemm_driver", "ewise_driver", "same_driver"]


def test_room_past_its_budget_hands_over(monkeypatch):
    """Room past `FUSED_ROOM_BYTES` (or int32 positions): not done in the driver, and the product
    runs its symbolic pass first."""
    monkeypatch.setattr(operators, "FUSED_ROOM_BYTES", 0)
    A = load_matrix("karate")
    assert operators._small_product(A, A, A.shape, scipy.sparse.csr_matrix, _names(A), 1) is None
    check_spgemm(A, A, threads=1)


def test_driver_source_names_its_kernels():
    """The generated driver imports each kernel's compiled function by its module (whose name
    hashes the kernel's source) and calls it positionally with its scalars cast to their
    declared types; a kernel with a checked argument cannot be driven."""
    names = {**_names(load_matrix("karate")), "schedule": "cpu_serial"}
    merge = operators.kernel("add", **names)
    run = driver.ewise_driver(merge)
    source = Path(run.py_func.__code__.co_filename).read_text()
    fn = merge.dispatcher.py_func
    assert f"from {fn.__module__} import {fn.__name__} as merge_kernel" in source
    assert "np.float32(alpha)" in source and "np.int32(nnz_c)" in source

    class Checked:
        trusted_order = None
        func = merge.func

    with pytest.raises(ValueError, match="positionally"):
        driver.call("merge_kernel", Checked(), {})


def _names(A) -> dict:
    from schedules import spgemm as shipped

    return {"idtype": A.indices.dtype.name, "dtype": A.dtype.name, "target": "cpu", "schedule": shipped.cpu_chunks}
