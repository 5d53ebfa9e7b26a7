"""Every kind of CUDA kernel the project generates, run on a real GPU against scipy / numpy.

Run by `make test-gpu` only (see conftest.py: skipped with the reason elsewhere). Matrices: the
edge matrices of `tests/strategies.py` and three real graphs from `sp.data` (cora, citeseer,
pubmed); types int32/int64 x float32/float64. Kernels:

- every shipped CUDA schedule of SpMM and SDDMM in `schedules/` (CSR, through `sp.ops` with
  `schedule=`), and hyb / ell / bsr through `sp.ops` (horizontal fusion, the `hyb_cuda` schedule);
- the Stage I corpus (`tests/corpus.py`), unscheduled (one thread), on karate;
- scripts that declare A by an MLIR encoding (CSR, BSR, COO);
- a `while` loop (the binary search of `tests/codegen/test_while_loops.py`);
- SparseTIR's horizontally fused case with shared/local caches (`cached_fusion_case.py`);
- a kernel called with Numba device arrays (used in place, results read back once);
- `sp.ops` with Numba device operands (CSR, hyb, bsr) and with cupy / cupyx.scipy.sparse ones.

Widths are fixed per test so that one compiled kernel serves every matrix of a type.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

import sparsetir_py as sp

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "transform")]

import corpus  # noqa: E402
from matrices import edge_matrices, with_types  # noqa: E402

from sparsetir_py.data import load_matrix  # noqa: E402

#: The real graphs; a dry run in the simulator (conftest.py) uses karate alone.
GRAPHS = ("karate",) if os.environ.get("SPARSETIR_TEST_GPU") == "sim" else ("cora", "citeseer", "pubmed")
TYPES = [("int32", "float32"), ("int32", "float64"), ("int64", "float32"), ("int64", "float64")]
WIDTH = 32
TOL = {"float32": {"rtol": 2e-4, "atol": 2e-4}, "float64": {"rtol": 1e-10, "atol": 1e-10}}


def _names(module) -> list[str]:
    return [name for name in module.SCHEDULES if "cuda" in name and not name.startswith("hyb")]


def _schedules():
    from schedules import sddmm, spmm

    return [("spmm", n) for n in _names(spmm)] + [("sddmm", n) for n in _names(sddmm)]


def matrices(idtype: str, dtype: str, graphs: bool = True) -> dict[str, scipy.sparse.csr_matrix]:
    out = {name: with_types(A, idtype, dtype) for name, A in edge_matrices().items()}
    if graphs:
        for name in GRAPHS:
            out[name] = load_matrix(name, dtype=np.dtype(dtype), index_dtype=np.dtype(idtype))
    return out


def _operands(A, dtype: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    m, n = A.shape
    B = rng.standard_normal((n, WIDTH)).astype(dtype)
    X = rng.standard_normal((m, WIDTH)).astype(dtype)
    Y = rng.standard_normal((n, WIDTH)).astype(dtype)
    return B, X, Y


def _check(op: str, A, dtype: str, **kwargs) -> None:
    B, X, Y = _operands(A, dtype)
    A64 = A.astype(np.float64)
    if op == "spmm":
        got = sp.ops.spmm(A, B, target="cuda", **kwargs)
        np.testing.assert_allclose(got, A64 @ B.astype(np.float64), **TOL[dtype])
        return
    got = sp.ops.sddmm(A, X, Y, target="cuda", **kwargs)
    want = A64.multiply(X.astype(np.float64) @ Y.astype(np.float64).T).tocsr()
    np.testing.assert_allclose(got.toarray(), want.toarray(), **TOL[dtype])


@pytest.mark.parametrize(("op", "schedule"), _schedules(), ids=lambda v: v)
@pytest.mark.parametrize(("idtype", "dtype"), TYPES, ids=lambda v: v)
def test_shipped_csr_schedule(op, schedule, idtype, dtype):
    failures = []
    for name, A in matrices(idtype, dtype).items():
        try:
            _check(op, A, dtype, format="csr", schedule=schedule)
        except Exception as e:  # every matrix is tried; the report names each failing one
            failures.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    assert not failures, "; ".join(failures)


@pytest.mark.parametrize("fmt", ["hyb", "ell", "bsr"])
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize(("idtype", "dtype"), [TYPES[0], TYPES[3]], ids=lambda v: v)
def test_formats_with_horizontal_fusion(fmt, op, idtype, dtype):
    failures = []
    edge = matrices(idtype, dtype, graphs=False)
    picked = {k: edge[k] for k in ("3x4_no_nnz", "6x5_staircase_int64", "9x3_tall_dense")}
    picked.update({g: load_matrix(g, dtype=np.dtype(dtype), index_dtype=np.dtype(idtype)) for g in GRAPHS})
    for name, A in picked.items():
        try:
            _check(op, A, dtype, format=fmt)
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    assert not failures, "; ".join(failures)


@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
@pytest.mark.parametrize(("idtype", "dtype"), [TYPES[0], TYPES[3]], ids=lambda v: v)
def test_corpus_script(case, idtype, dtype):
    A = corpus.prepare_csr(load_matrix("karate"), idtype, dtype)
    mod = sp.lower_sparse_buffer(sp.lower_sparse_iter(case.build(idtype, dtype)))
    kernel = sp.build(mod, "cuda")
    kwargs, outputs = case.make_args(A, np.random.default_rng(0), idtype, dtype, feat=4)
    expected = case.reference(A, kwargs)
    kernel(**kwargs)
    for name in outputs:
        np.testing.assert_allclose(kwargs[name], expected[name], err_msg=name, **corpus.TOLERANCES[dtype])


ENCODINGS = {
    "csr": "(i, j) -> (i : dense, j : compressed)",
    "bsr": "(i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
    "coo": "(i, j) -> (i : compressed(nonunique), j : singleton)",
}


def _encoded_spmm(enc):
    from sparsetir_py import script as T

    @T.prim_func
    def spmm(a: T.handle, b: T.handle, c: T.handle, m: T.int32, n: T.int32, feat: T.int32):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        K = T.dense_fixed(feat)
        A = T.match_sparse_buffer(a, (I, J), "float32", encoding=enc)
        B = T.match_sparse_buffer(b, (J, K), "float32")
        C = T.match_sparse_buffer(c, (I, K), "float32")
        with T.sp_iter([I, J, K], "SRS", "spmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]

    return spmm


@pytest.mark.parametrize("fmt", list(ENCODINGS))
def test_encoded_script(fmt):
    enc = sp.parse_encoding(f"#sparse_tensor.encoding<{{ map = {ENCODINGS[fmt]} }}>")
    kernel = sp.compile(_encoded_spmm(enc), "cuda")
    A = load_matrix("karate")
    B = np.random.default_rng(0).standard_normal((34, 8)).astype(np.float32)
    C = np.full((34, 8), np.nan, np.float32)
    kernel(**sp.to_storage(A, enc), b=B, c=C, m=34, n=34, feat=8)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


def _search_script(idtype: str, dtype: str) -> sp.PrimFunc:
    """The binary search of `tests/codegen/test_while_loops.py` (its `SEARCH` text, read without
    importing that module, which needs hypothesis)."""
    tree = ast.parse((TESTS / "codegen" / "test_while_loops.py").read_text())
    (text,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["SEARCH"]
    ]
    return sp.from_script(text.replace("IDX", idtype).replace("VAL", dtype))


@pytest.mark.parametrize(("idtype", "dtype"), [TYPES[0], TYPES[3]], ids=lambda v: v)
def test_while_loop(idtype, dtype):
    from sparsetir_py.driver import target_passes

    A = with_types(load_matrix("karate"), idtype, dtype)
    kernel = sp.build(target_passes(sp.lower_sparse_buffer(_search_script(idtype, dtype)), "cuda"), "cuda")
    m, n = A.shape
    d = np.full(m * n, np.nan, dtype)
    kernel(a=A.data.copy(), d=d, indptr=A.indptr, indices=A.indices, m=m, n=n, nnz=A.nnz)
    np.testing.assert_array_equal(d.reshape(A.shape), A.toarray())


def test_fused_cached_case():
    import cached_fusion_case as case

    kernel = case.fused_kernel()
    args = case.inputs()
    kernel(**args)
    np.testing.assert_allclose(args["c1"], args["a"].sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(args["c2"], args["b"].sum(axis=1), rtol=1e-5)


def test_kernel_with_numba_device_arrays():
    from numba import cuda

    A = load_matrix(GRAPHS[0])
    B = np.random.default_rng(0).standard_normal((A.shape[1], WIDTH)).astype(np.float32)
    from schedules.spmm import SCHEDULES

    kernel = sp.compile(sp.ops.spmm_script(), "cuda", schedule=SCHEDULES["csr_cuda_rows"], specialize={"feat": WIDTH})
    host = {"a": A.data, "indptr": A.indptr, "indices": A.indices, "b": B}
    dev = {name: cuda.to_device(v) for name, v in host.items()}
    c = cuda.device_array((A.shape[0], WIDTH), np.float32)
    kernel(**dev, c=c, m=A.shape[0], n=A.shape[1], feat=WIDTH, nnz=A.nnz, check_structure=False)
    np.testing.assert_allclose(c.copy_to_host(), A @ B, rtol=2e-4, atol=2e-4)
    # The prepared launch (`kernel.launcher`): new values in B seen, another output for one launch.
    launch = kernel.launcher(**dev, c=c, m=A.shape[0], n=A.shape[1], feat=WIDTH, nnz=A.nnz, check_structure=False)
    dev["b"].copy_to_device(B * 2)
    other = cuda.device_array((A.shape[0], WIDTH), np.float32)
    launch(c=other)
    np.testing.assert_allclose(other.copy_to_host(), A @ (B * 2), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("fmt", ["csr", "hyb", "bsr"])
def test_ops_with_numba_device_operands(fmt):
    from numba import cuda

    A = load_matrix(GRAPHS[-1])
    B = np.random.default_rng(0).standard_normal((A.shape[1], WIDTH)).astype(np.float32)
    C = sp.ops.spmm(A, cuda.to_device(B), format=fmt, target="cuda")
    assert hasattr(C, "copy_to_host")  # a Numba device array
    np.testing.assert_allclose(C.copy_to_host(), A @ B, rtol=2e-4, atol=2e-4)
    # SDDMM: with a decomposed format, the parts' values are scattered back to A's order on the device.
    X = cuda.to_device(np.ones((A.shape[0], WIDTH), np.float32))
    values = sp.ops.sddmm(A, X, cuda.to_device(B), format=fmt, target="cuda").copy_to_host()
    want = A.multiply(np.ones((A.shape[0], WIDTH)) @ B.T).tocsr().data
    np.testing.assert_allclose(values, want, rtol=2e-4, atol=2e-4)


def test_padded_blocks_with_an_inf_in_b_fixed_on_the_device():
    """BSR's padded slots read real rows of B: repeated calls with an inf in B (every row of one
    feature, then none) give scipy's NaN and inf pattern, the fix-up deciding on the device."""
    from numba import cuda

    A = load_matrix(GRAPHS[-1])
    B = np.random.default_rng(2).standard_normal((A.shape[1], WIDTH)).astype(np.float32)
    B_dev = cuda.to_device(B)
    out = cuda.device_array((A.shape[0], WIDTH), np.float32)
    for column, value in ((None, None), (3, np.inf), (3, 1.0), (0, -np.inf), (0, 0.5)):
        if column is not None:
            B[:, column] = value
            B_dev.copy_to_device(B)
        got = sp.ops.spmm(A, B_dev, format="bsr", block_size=2, target="cuda", out=out).copy_to_host()
        want = A @ B
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        finite = np.isfinite(want)
        np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
        np.testing.assert_allclose(got[finite], want[finite], rtol=2e-4, atol=2e-4)


def test_ops_with_cupy_operands():
    cupy = pytest.importorskip("cupy")
    if os.environ.get("SPARSETIR_TEST_GPU") == "sim":
        pytest.skip("cupy needs a real GPU")
    import cupyx.scipy.sparse

    A = load_matrix(GRAPHS[-1])
    B = np.random.default_rng(0).standard_normal((A.shape[1], WIDTH)).astype(np.float32)
    for A_in in (A, cupyx.scipy.sparse.csr_matrix(A), cupyx.scipy.sparse.coo_matrix(A)):
        B_dev = cupy.asarray(B)
        for scale in (1, 3):  # the second call is the prepared one; B's new values are seen
            B_dev *= scale
            C = sp.ops.spmm(A_in, B_dev, target="cuda")
            assert isinstance(C, cupy.ndarray)
            np.testing.assert_allclose(cupy.asnumpy(C), A @ (B * scale), rtol=2e-4, atol=2e-4)
    X = cupy.ones((A.shape[0], WIDTH), cupy.float32)
    S = sp.ops.sddmm(cupyx.scipy.sparse.csr_matrix(A), X, cupy.asarray(B), target="cuda")
    assert isinstance(S, cupyx.scipy.sparse.csr_matrix)
    want = A.multiply(np.ones((A.shape[0], WIDTH)) @ B.T).tocsr()
    np.testing.assert_allclose(S.get().toarray(), want.toarray(), rtol=2e-4, atol=2e-4)
