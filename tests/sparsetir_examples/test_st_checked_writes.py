"""SparseTIR's `csr2bsr` and the ragged batched matmul run as written: checked writes.

Follows: tests/python/sparsetir/sparse_tir_scripts.py (`csr2bsr`, and `bmm` with the output's
per-row axis filled by the batch's column iterator: `Z[b, i, k]` with `k` over `K`, `Z` over
`(B, I, IK)`; `IJ`, `JK`, `IK` declared under their rows, which this project requires).

Neither write is provably stored (an index expression; another axis's iterator), so each is a
checked write: `sp.verify` lists it, every engine searches the written structure. On consistent
structures the interpreter, the CPU kernel and the CUDA kernel (Numba's simulator, in a
subprocess this file drives when run as a script; unscheduled and with rows bound to blocks)
equal numpy, on edge matrices, a real graph and random ones. An inconsistent structure (a BSR
structure missing a block A has; a batch's output row shorter than its `K`) is the same
`InputError` from every engine; the interpreter and the CUDA kernel (numpy arrays passed) leave
the outputs as they were passed, the CPU kernel writes in place and promises only that no write
lands elsewhere.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # cuda_support, strategies

import json
import re
import traceback

import numpy as np
import pytest
import scipy.sparse
from cuda_support import ptx_unavailable, simulated_run  # noqa: F401 (ptx_unavailable: named in a skipif string)
from strategies import edge_matrices

import sparsetir_py as sp
from sparsetir_py import script as T


@T.prim_func
def csr2bsr(
    a: T.handle,
    b: T.handle,
    indptr_in: T.handle,
    indices_in: T.handle,
    indptr_out: T.handle,
    indices_out: T.handle,
    m_in: T.int32,
    n_in: T.int32,
    m_out: T.int32,
    n_out: T.int32,
    nnz_in: T.int32,
    nnz_out: T.int32,
    blk_size: T.int32,
):
    I = T.dense_fixed(m_in)
    J = T.sparse_variable(I, (n_in, nnz_in), (indptr_in, indices_in), "int32")
    I_bsr = T.dense_fixed(m_out)
    J_bsr = T.sparse_variable(I_bsr, (n_out, nnz_out), (indptr_out, indices_out), "int32")
    BI = T.dense_fixed(blk_size)
    BJ = T.dense_fixed(blk_size)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (I_bsr, J_bsr, BI, BJ), "float32")
    with T.sp_iter([I, J], "SS", "csr2bsr") as [i, j]:
        B[i // blk_size, j // blk_size, i % blk_size, j % blk_size] = A[i, j]


@T.prim_func
def bmm(
    x: T.handle,
    y: T.handle,
    z: T.handle,
    indptr_i: T.handle,
    indptr_j: T.handle,
    indptr_k: T.handle,
    indptr_ij: T.handle,
    indptr_jk: T.handle,
    indptr_ik: T.handle,
    batch_size: T.int32,
    top: T.int32,
    nnz_i: T.int32,
    nnz_j: T.int32,
    nnz_k: T.int32,
    nnz_ij: T.int32,
    nnz_jk: T.int32,
    nnz_ik: T.int32,
):
    B = T.dense_fixed(batch_size)
    I = T.dense_variable(B, (top, nnz_i), indptr_i, "int32")
    J = T.dense_variable(B, (top, nnz_j), indptr_j, "int32")
    K = T.dense_variable(B, (top, nnz_k), indptr_k, "int32")
    IJ = T.dense_variable(I, (top, nnz_ij), indptr_ij, "int32")
    JK = T.dense_variable(J, (top, nnz_jk), indptr_jk, "int32")
    IK = T.dense_variable(I, (top, nnz_ik), indptr_ik, "int32")
    X = T.match_sparse_buffer(x, (B, I, IJ), "float32")
    Y = T.match_sparse_buffer(y, (B, J, JK), "float32")
    Z = T.match_sparse_buffer(z, (B, I, IK), "float32")
    with T.sp_iter([B, I, J, K], "SSRS", "bmm") as [b, i, j, k]:
        with T.init():
            Z[b, i, k] = T.float32(0)
        Z[b, i, k] = Z[b, i, k] + X[b, i, j] * Y[b, j, k]


# ------------------------------------------------------------------------------------------ inputs
def matrices() -> dict[str, scipy.sparse.csr_matrix]:
    rng = np.random.default_rng(2)
    edges = edge_matrices()
    out = {k: edges[k] for k in ("0x5", "3x4_no_nnz", "1x7_full_row", "2x11_last_row_empty")}
    out["karate"] = sp.data.load_matrix("karate")
    out["random_13x10"] = scipy.sparse.random(13, 10, density=0.3, format="csr", random_state=rng)
    return out


def bsr_of(A, blk: int) -> scipy.sparse.bsr_matrix:
    m, n = A.shape
    mp, np_ = -(-m // blk) * blk, -(-n // blk) * blk
    indptr = np.concatenate([A.indptr, np.full(mp - m, A.nnz, A.indptr.dtype)])
    P = scipy.sparse.csr_matrix((A.data, A.indices, indptr), shape=(mp, np_)).tobsr((blk, blk))
    P.sort_indices()
    return P


def csr2bsr_case(name: str, blk: int, drop_block: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
    """Arguments (B filled with NaN) and the expected B; `drop_block` removes the structure's
    first block (then A has a nonzero B does not store, and a miss is expected)."""
    A = scipy.sparse.csr_matrix(matrices()[name], dtype=np.float32)
    A.sort_indices()
    m, n = A.shape
    P = bsr_of(A, blk)
    indptr, indices, data = P.indptr.copy(), P.indices.copy(), P.data.copy()
    if drop_block:
        indices, data = indices[1:], data[1:]
        indptr[1:] -= 1
    kw = dict(
        a=A.data.astype(np.float32),
        b=np.full(data.size, np.nan, np.float32),
        indptr_in=A.indptr.astype(np.int32),
        indices_in=A.indices.astype(np.int32),
        indptr_out=indptr.astype(np.int32),
        indices_out=indices.astype(np.int32),
        m_in=m,
        n_in=n,
        m_out=P.shape[0] // blk,
        n_out=P.shape[1] // blk,
        nnz_in=A.nnz,
        nnz_out=len(indices),
        blk_size=blk,
    )
    # Unwritten cells of a block (zeros of A) keep their NaN: the kernel writes A's nonzeros only.
    stored = np.ones(A.nnz, np.float32)
    mask = bsr_of(scipy.sparse.csr_matrix((stored, A.indices, A.indptr), shape=A.shape), blk).data
    if drop_block:
        mask = mask[1:]
    want = np.where(mask != 0, data, np.nan).astype(np.float32).reshape(-1)
    return kw, {"b": want}


def bmm_case(shapes, drop_row: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
    """Batches of (ni x nj) @ (nj x nk); `drop_row` gives the last output row of the first batch
    with rows one entry short of its `K` (the write of its last column misses)."""
    rng = np.random.default_rng(len(shapes))
    xs = [rng.uniform(-1, 1, (ni, nj)).astype(np.float32) for ni, nj, _ in shapes]
    ys = [rng.uniform(-1, 1, (nj, nk)).astype(np.float32) for _, nj, nk in shapes]
    ni, nj, nk = (np.array([s[d] for s in shapes], np.int64) for d in range(3))

    def indptr(counts) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    rows_ik = np.repeat(nk, ni)
    if drop_row:
        rows_ik[ni[0] - 1] -= 1
    kw = dict(
        x=np.concatenate([a.ravel() for a in xs] + [np.zeros(0, np.float32)]),
        y=np.concatenate([a.ravel() for a in ys] + [np.zeros(0, np.float32)]),
        z=np.full(int(rows_ik.sum()), np.nan, np.float32),
        indptr_i=indptr(ni),
        indptr_j=indptr(nj),
        indptr_k=indptr(nk),
        indptr_ij=indptr(np.repeat(nj, ni)),
        indptr_jk=indptr(np.repeat(nk, nj)),
        indptr_ik=indptr(rows_ik),
        batch_size=len(shapes),
        top=int(max([*ni, *nj, *nk, 1])),
        nnz_i=int(ni.sum()),
        nnz_j=int(nj.sum()),
        nnz_k=int(nk.sum()),
        nnz_ij=int((np.repeat(nj, ni)).sum()),
        nnz_jk=int((np.repeat(nk, nj)).sum()),
        nnz_ik=int(rows_ik.sum()),
    )
    want = np.concatenate([(x.astype(np.float64) @ y).ravel() for x, y in zip(xs, ys)] + [np.zeros(0)])
    return kw, {"z": want.astype(np.float32)}


BMM_SHAPES = {
    "ragged": [(2, 3, 2), (0, 2, 1), (3, 1, 4), (1, 0, 2), (2, 2, 0)],
    "one": [(3, 4, 5)],
    "empty_batches": [(0, 0, 0), (1, 1, 1)],
}
BMM_MISS_SHAPES = [(2, 3, 2), (3, 1, 4)]


def cases() -> list[str]:
    """`csr2bsr/<matrix>/<blk>`, `bmm/<shapes>`; `.../miss` for inconsistent structures."""
    out = [f"csr2bsr/{m}/{blk}" for m in matrices() for blk in (2, 3)]
    out += [f"bmm/{s}" for s in BMM_SHAPES]
    return [*out, "csr2bsr/karate/4/miss", "csr2bsr/random_13x10/2/miss", "bmm/miss"]


def make_case(case: str) -> tuple[sp.PrimFunc, dict, dict[str, np.ndarray]]:
    parts = case.split("/")
    if parts[0] == "csr2bsr":
        return csr2bsr, *csr2bsr_case(parts[1], int(parts[2]), drop_block=parts[-1] == "miss")
    if parts[1] == "miss":
        return bmm, *bmm_case(BMM_MISS_SHAPES, drop_row=True)
    return bmm, *bmm_case(BMM_SHAPES[parts[1]])


def bound_to_blocks(func) -> sp.IRModule:
    """The outermost loop of the iteration bound to blockIdx.x (rows / batches in parallel)."""
    sch = sp.Schedule(sp.lower_sparse_iter(func))
    name = "csr2bsr0" if func is csr2bsr else "bmm0"
    loops = sch.get_loops(sch.get_block(name))
    sch.bind(loops[0], "blockIdx.x")
    return sch.mod


_KERNELS: dict = {}


def kernel(func, target: str, bound: bool = False):
    key = (func.name, target, bound)
    if key not in _KERNELS:
        _KERNELS[key] = sp.compile(bound_to_blocks(func) if bound else func, target)
    return _KERNELS[key]


def run(engine: str, case: str) -> tuple[str, dict[str, np.ndarray]]:
    """("ok" or the InputError's message, the outputs after the run)."""
    func, kwargs, expected = make_case(case)
    try:
        if engine == "interpret":
            sp.interpret(func, **kwargs)
        else:
            target, _, bound = engine.partition("+")
            kernel(func, target, bool(bound))(**kwargs)
        status = "ok"
    except sp.InputError as e:
        status = str(e)
    return status, {k: kwargs[k] for k in expected}


# ------------------------------------------------------------------------------------------ the simulator
def simulate(out: Path) -> None:
    outputs, results = {}, {}
    for engine in ("cuda", "cuda+bound"):
        for case in cases():
            key = f"{engine}|{case}"
            try:
                status, got = run(engine, case)
                results[key] = status
                for name, value in got.items():
                    outputs[f"{key}|{name}"] = value
            except Exception:
                results[key] = "crash: " + traceback.format_exc()
    np.savez(out, **outputs)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    return simulated_run(tmp_path_factory, "st_checked_writes", Path(__file__).resolve())


def test_both_writes_are_checked():
    for func, buffer in ((csr2bsr, "B"), (bmm, "Z")):
        report = sp.verify(func)
        assert {c.buffer for c in report.checked} == {buffer}
        assert "checked" in str(report)
    lowered = sp.lower_sparse_iter(csr2bsr)["main"]
    assert lowered.attrs["checked_writes"] == (("B_unstored", "B"),)
    assert sp.structural_equal(sp.from_script(lowered.script()), lowered)


def test_provable_writes_stay_unchecked():
    """SpMM's and SDDMM's writes are provably stored: no checked write, no flag, no extra code."""
    from sparsetir_py.ops import sddmm_script, spmm_script

    for func in (spmm_script(), sddmm_script()):
        assert sp.verify(func).checked == ()
        lowered = sp.lower_sparse_iter(func)["main"]
        assert "checked_writes" not in lowered.attrs
        assert "unstored" not in sp.compile(func, "cpu").source


@pytest.mark.parametrize("case", [c for c in cases() if not c.endswith("miss")])
def test_consistent_structures_equal_numpy_everywhere(case, simulated):
    _, _, expected = make_case(case)
    results, sim = simulated
    if "__import__" in results:
        pytest.skip(f"the CUDA simulator cannot start here:\n{results['__import__']}")
    for engine in ("interpret", "cpu", "cpu+bound", "cuda", "cuda+bound"):
        if engine.startswith("cuda"):
            status = results[f"{engine}|{case}"]
            got = {name: sim[f"{engine}|{case}|{name}"] for name in expected}
        else:
            status, got = run(engine, case)
        assert status == "ok", f"{engine}: {status}"
        for name, want in expected.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=f"{engine}: {name}")


MISSES = {
    "csr2bsr/karate/4/miss": r"^write to `B` at coordinates \(0, 0, 0, 1\), which its structure does not store",
    "csr2bsr/random_13x10/2/miss": r"^write to `B` at coordinates \(0, \d+, \d, \d\), which its structure does not",
    "bmm/miss": r"^write to `Z` at coordinates \(0, 1, 1\), which its structure does not store",
}


@pytest.mark.parametrize("case", sorted(MISSES))
def test_an_inconsistent_structure_is_the_same_input_error_everywhere(case, simulated):
    """Every engine raises the same message (serial engines: the first miss in iteration order;
    the bound kernels' blocks may race to record one, so theirs is matched by pattern)."""
    results, sim = simulated
    statuses = {}
    for engine in ("interpret", "cpu", "cpu+bound", "cuda", "cuda+bound"):
        if engine.startswith("cuda"):
            if "__import__" in results:
                continue
            status = results[f"{engine}|{case}"]
            got = {k: sim[f"{engine}|{case}|{k}"] for k in ("b", "z") if f"{engine}|{case}|{k}" in sim}
        else:
            status, got = run(engine, case)
        statuses[engine] = status
        assert re.search(MISSES[case], status), f"{engine}: {status}"
        if engine in ("interpret", "cuda", "cuda+bound"):  # the outputs as passed (all NaN)
            (out,) = got.values()
            assert np.isnan(out).all(), engine
    serial = {statuses[e] for e in ("interpret", "cpu", "cuda") if e in statuses}
    assert len(serial) == 1, statuses


@pytest.mark.skipif("ptx_unavailable() is not None", reason="PTX compilation unavailable")
@pytest.mark.parametrize("name", ["csr2bsr", "bmm"])
def test_checked_write_kernels_compile_to_ptx(name):
    """The real CUDA path of the error flag (the simulator covers its semantics)."""
    func = csr2bsr if name == "csr2bsr" else bmm
    ptx = sp.compile(bound_to_blocks(func), "cuda").ptx(cc=(8, 0))
    assert ".visible .entry" in ptx and ".target sm_80" in ptx


def main() -> int:
    out = Path(sys.argv[1])
    try:
        from numba import config, cuda  # noqa: F401

        assert config.ENABLE_CUDASIM
    except Exception:
        out.with_suffix(".json").write_text(json.dumps({"__import__": traceback.format_exc()}))
        return 0
    simulate(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
