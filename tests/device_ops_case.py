"""`sp.ops` on `target="cuda"` with Numba device arrays, in Numba's CUDA simulator.

`python device_ops_case.py OUT` (with NUMBA_ENABLE_CUDASIM=1; `cuda_support.simulated_run`) runs
each check and writes OUT.json (check -> "ok" or the traceback) and OUT (.npz, unused). Host copies
are counted by wrapping the simulator's `copy_to_host`, `cuda.to_device`, `copy_to_device` and
`__setitem__` with a host array (the plain copy into device memory, `runtime.device.host_to_device`):
a call on device operands copies none of them to the host; a scipy A goes to the device as its
structure once and its values per call.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

if __name__ == "__main__":  # run as a script: the simulator, this checkout's package
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import numpy as np
import scipy.sparse
from matrices import edge_matrices, make_csr

import sparsetir_py as sp

COUNTS = {"to_host": 0, "to_device": 0}
#: New device arrays (`cuda.device_array`), counted apart from the copies.
ALLOCATED = [0]
# Set by `main` in the simulator (importing numba.cuda here would fix the mode of a test process).
cuda = devicearray = _copy_to_host = _to_device = _copy_to_device = _device_array = _setitem = None


def _counting_copy_to_host(self, *args, **kwargs):
    COUNTS["to_host"] += 1
    return _copy_to_host(self, *args, **kwargs)


def _counting_to_device(*args, **kwargs):
    COUNTS["to_device"] += 1
    return _to_device(*args, **kwargs)


def _counting_copy_to_device(self, *args, **kwargs):
    COUNTS["to_device"] += 1
    return _copy_to_device(self, *args, **kwargs)


def _counting_setitem(self, index, value):
    if isinstance(value, np.ndarray):  # a host array written into device memory: a copy
        COUNTS["to_device"] += 1
    return _setitem(self, index, value)


def _counting_device_array(*args, **kwargs):
    ALLOCATED[0] += 1
    return _device_array(*args, **kwargs)


def matrix(idtype="int32", dtype="float32") -> scipy.sparse.csr_matrix:
    rng = np.random.default_rng(3)
    mask = rng.random((7, 5)) < 0.4
    mask[2, :] = False  # an empty row
    return make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), idtype, dtype)


def counted(fn):
    COUNTS.update(to_host=0, to_device=0)
    result = fn()
    return result, dict(COUNTS)


def host(x) -> np.ndarray:
    return _copy_to_host(x)


def check_spmm_device_in_device_out():
    A = matrix()
    B = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    B_dev = _to_device(B)
    C, counts = counted(lambda: sp.ops.spmm(A, B_dev, target="cuda"))
    assert isinstance(C, devicearray.FakeCUDAArray), type(C)
    assert counts == {"to_host": 0, "to_device": 3}, counts  # indptr, indices (once), values
    np.testing.assert_allclose(host(C), A @ B, rtol=1e-5, atol=1e-5)
    # Again, with new values in B (on the device) and in A: seen; only A's values move.
    B2 = B * 2 + 1
    B_dev.copy_to_device(B2)
    A.data *= -1
    C, counts = counted(lambda: sp.ops.spmm(A, B_dev, target="cuda"))
    assert counts == {"to_host": 0, "to_device": 1}, counts
    np.testing.assert_allclose(host(C), A @ B2, rtol=1e-5, atol=1e-5)


def check_spmm_out_and_vector():
    A = matrix("int64", "float64")
    B = np.random.default_rng(1).standard_normal((5, 3))
    out = cuda.device_array((7, 3), np.float64)
    got, counts = counted(lambda: sp.ops.spmm(A, _to_device(B), target="cuda", out=out))
    assert got is out and counts["to_host"] == 0, counts
    np.testing.assert_allclose(host(out), A @ B, rtol=1e-12)
    x = np.arange(5, dtype=np.float64)
    y, counts = counted(lambda: sp.ops.spmm(A, _to_device(x), target="cuda"))
    assert host(y).shape == (7,) and counts["to_host"] == 0
    np.testing.assert_allclose(host(y), A @ x, rtol=1e-12)


def check_sddmm_device_values():
    A = matrix()
    rng = np.random.default_rng(2)
    X, Y = rng.standard_normal((7, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    X_dev, Y_dev = _to_device(X), _to_device(Y)
    values, counts = counted(lambda: sp.ops.sddmm(A, X_dev, Y_dev, target="cuda"))
    assert isinstance(values, devicearray.FakeCUDAArray) and counts["to_host"] == 0, counts
    np.testing.assert_allclose(host(values), A.multiply(X @ Y.T).tocsr().data, rtol=1e-5, atol=1e-5)


def check_mixed_host_operand():
    """A numpy X next to a device Y goes to the device; the result is a device array."""
    A = matrix()
    rng = np.random.default_rng(4)
    X, Y = rng.standard_normal((7, 2)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)
    values = sp.ops.sddmm(A, X, _to_device(Y), target="cuda")
    np.testing.assert_allclose(host(values), A.multiply(X @ Y.T).tocsr().data, rtol=1e-5, atol=1e-5)


def check_host_operands_keep_the_structure_on_the_device():
    """numpy/scipy operands: after the first calls, only A's values, B and C move per call."""
    A = matrix()
    B = np.random.default_rng(5).standard_normal((5, 3)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(sp.ops.spmm(A, B, target="cuda"), A @ B, rtol=1e-5, atol=1e-5)
    C, counts = counted(lambda: sp.ops.spmm(A, B, target="cuda"))
    assert isinstance(C, np.ndarray) and counts == {"to_host": 1, "to_device": 3}, counts
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


def check_edge_matrices():
    """Empty shapes, no nonzeros, zero widths (empty device arrays are contiguous)."""
    for name, A in edge_matrices().items():
        m, n = A.shape
        for w in (0, 3):
            B = np.random.default_rng(w).standard_normal((n, w)).astype(A.dtype)
            X, Y = np.ones((m, w), A.dtype), np.full((n, w), 2, A.dtype)
            C = host(sp.ops.spmm(A, _to_device(B), target="cuda"))
            np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5, err_msg=f"{name} width {w}")
            S = host(sp.ops.sddmm(A, _to_device(X), _to_device(Y), target="cuda"))
            want = A.multiply(X @ Y.T).tocsr().data
            np.testing.assert_allclose(S, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} width {w}")


def check_formats_on_device_operands():
    """hyb / ell / bsr SpMM with B on the device: C on the device, only the finiteness flag of B
    comes back (the formats pad), the parts' structure goes to the device on the first call only;
    an inf in B runs CSR's exact loop (NaN where scipy has NaN)."""
    A = matrix()
    B = np.random.default_rng(6).standard_normal((5, 4)).astype(np.float32)
    for fmt, params in (("hyb", {"num_col_parts": 2, "buckets": [1, 2]}), ("ell", {}), ("bsr", {"block_size": 2})):
        call = lambda fmt=fmt, params=params: sp.ops.spmm(A, _to_device(B), format=fmt, target="cuda", **params)  # noqa: E731
        C, counts = counted(call)
        assert isinstance(C, devicearray.FakeCUDAArray) and counts["to_host"] <= 1, (fmt, counts)
        np.testing.assert_allclose(host(C), A @ B, rtol=1e-5, atol=1e-5, err_msg=fmt)
        # The kernel's first run checked the structure (host arrays); later ones read it on the device.
        again, repeated = counted(call)
        assert repeated["to_device"] < counts["to_device"] and repeated["to_host"] <= 1, (fmt, counts, repeated)
        np.testing.assert_allclose(host(again), A @ B, rtol=1e-5, atol=1e-5, err_msg=fmt)
    X = np.random.default_rng(7).standard_normal((7, 4)).astype(np.float32)
    want = A.multiply(X.astype(np.float64) @ B.astype(np.float64).T).tocsr().data
    for fmt, params in (("hyb", {"num_col_parts": 2, "buckets": [1, 2]}), ("bsr", {"block_size": 2})):
        for _ in range(2):  # SDDMM: the parts' values scattered back to A's order on the device
            call = lambda fmt=fmt, params=params: sp.ops.sddmm(  # noqa: E731
                A, _to_device(X), _to_device(B), format=fmt, target="cuda", **params
            )
            values, counts = counted(call)
            assert isinstance(values, devicearray.FakeCUDAArray) and counts["to_host"] == 0, (fmt, counts)
            np.testing.assert_allclose(host(values), want, rtol=1e-5, atol=1e-6, err_msg=fmt)
    B[1, 0] = np.inf
    C = host(sp.ops.spmm(A, _to_device(B), format="ell", target="cuda"))
    np.testing.assert_array_equal(np.isnan(C), np.isnan(A @ B))


def check_formats_repeated_with_the_same_operands():
    """ell SpMM / hyb SDDMM with the same device operands again: a prepared call (no binding; A's
    values copied once and gathered into the parts on the device, no host gather; ELL's padding
    reads no row of B, so B is not checked: nothing copied back), new values written in place
    into B and A.data seen, an inf written into B seen (scipy's NaN pattern), a finite B again
    after it, SpMV into a 1-D `out=` included."""
    from sparsetir_py.runtime import kernel as runtime_kernel
    from sparsetir_py.runtime.device import FiniteCheck

    A = matrix()  # the kernels of `check_formats_on_device_operands`, compiled already
    rng = np.random.default_rng(9)
    B, X = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((7, 4)).astype(np.float32)
    B_dev, X_dev = _to_device(B), _to_device(X)
    out = cuda.device_array((7, 4), np.float32)
    binds = []
    bind = runtime_kernel.bind_arguments
    runtime_kernel.bind_arguments = lambda *a, **k: binds.append(1) or bind(*a, **k)
    try:
        # (Each call of a decomposed kernel takes about a second in the simulator: few calls.)
        for fmt, params in (("ell", {}), ("hyb", {"num_col_parts": 2, "buckets": [1, 2]})):
            spmm = lambda fmt=fmt, params=params: sp.ops.spmm(A, B_dev, format=fmt, target="cuda", out=out, **params)  # noqa: E731
            sddmm = lambda fmt=fmt, params=params: sp.ops.sddmm(A, X_dev, B_dev, format=fmt, target="cuda", **params)  # noqa: E731
            # SpMM (ell: its padding reads no row of B, so B is not checked): A's values; SDDMM (hyb): A's values.
            cases = [(spmm, {"to_host": 0, "to_device": 1}, 0)] if fmt == "ell" else []
            if fmt == "hyb":
                cases.append((sddmm, {"to_host": 0, "to_device": 1}, 1))
            for call, copies, allocations in cases:
                call()  # checks the parts' structure, prepares the call
                A.data[:] = np.arange(1, A.nnz + 1) / A.nnz
                B[0] += 2
                B_dev.copy_to_device(B)
                binds.clear()
                ALLOCATED[0] = 0
                got, counts = counted(call)
                assert not binds and counts == copies and ALLOCATED[0] == allocations, (fmt, counts, binds)
                if call is spmm:
                    assert got is out
                    np.testing.assert_allclose(host(out), A @ B, rtol=1e-5, atol=1e-5, err_msg=fmt)
                else:
                    want = A.multiply(X @ B.T).tocsr().data
                    np.testing.assert_allclose(host(got), want, rtol=1e-5, atol=1e-5, err_msg=fmt)
        B[1, 0] = np.inf  # seen by the prepared ell call: CSR's loop, NaN where scipy has NaN
        B_dev.copy_to_device(B)
        ell, counts = counted(lambda: sp.ops.spmm(A, B_dev, format="ell", target="cuda", out=out))
        assert counts == {"to_host": 0, "to_device": 1}, counts
        np.testing.assert_array_equal(np.isnan(host(ell)), np.isnan(A @ B))
        finite = np.isfinite(A @ B)
        np.testing.assert_allclose(host(ell)[finite], (A @ B)[finite], rtol=1e-5, atol=1e-5)
        B[1, 0] = 0.5  # finite again: the padded kernel's own result, no NaN left from the last call
        B_dev.copy_to_device(B)
        ell = sp.ops.spmm(A, B_dev, format="ell", target="cuda", out=out)
        np.testing.assert_allclose(host(ell), A @ B, rtol=1e-5, atol=1e-5)
        finite = FiniteCheck(B_dev)  # its flag is reset every call
        B[1, 0] = 1.0
        B_dev.copy_to_device(B)
        assert finite()
        B[4, 3] = -np.inf
        B_dev.copy_to_device(B)
        assert not finite()
        B[4, 3] = 0
        B_dev.copy_to_device(B)
        assert finite() and FiniteCheck(cuda.device_array((0, 4), np.float32))()
        x = np.arange(5.0, dtype=np.float32)
        x[3] = np.inf
        x_dev, y = _to_device(x), cuda.device_array(7, np.float32)
        for _ in range(2):
            assert sp.ops.spmm(A, x_dev, format="ell", target="cuda", out=y) is y
            np.testing.assert_array_equal(np.isnan(host(y)), np.isnan(A @ x))
    finally:
        runtime_kernel.bind_arguments = bind


def check_padded_blocks_fixed_on_the_device():
    """BSR's blocks store zeros that read real rows of B: with an inf in B, 0 * inf is NaN where
    A stores nothing. A prepared call marks B's finiteness on the device and recomputes C by
    CSR's exact loop there (scipy's NaN and inf, nothing copied back); with B finite again the
    blocks' own result (one copy to the device: A's values; B's flag is reset by another). Fails
    if the fix-up launch does nothing (its flag ignored)."""
    dense = np.array([[1, 0, 0, 0, 0], [0.5, 2, 0, 1, 0], [0, 0, 3, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    A = scipy.sparse.csr_matrix(dense.astype(np.float32))
    B = np.ones((5, 3), np.float32)
    B_dev, out = _to_device(B), cuda.device_array((5, 3), np.float32)
    spmm = lambda: sp.ops.spmm(A, B_dev, format="bsr", block_size=2, target="cuda", out=out)  # noqa: E731
    spmm()  # the first call: checks the blocks' structure, prepares the call
    for column, value in ((1, np.inf), (1, 1.0), (0, -np.inf), (0, 2.0)):
        B[:, column] = value
        B_dev.copy_to_device(B)
        got, counts = counted(spmm)
        assert got is out and counts == {"to_host": 0, "to_device": 2}, counts
        want = A @ B
        np.testing.assert_array_equal(np.isnan(host(out)), np.isnan(want), err_msg=str((column, value)))
        np.testing.assert_allclose(host(out)[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6)
    return host(out)


def check_repeated_call_is_prepared_once():
    """A call with the same operands again takes the prepared launch (`ops.device.REPEATS`):
    values written in place into B and into A.data are seen, only A's values move (into the
    device buffer of the first call), and every call without `out=` gets a fresh result."""
    from sparsetir_py.ops import device

    A = matrix("int64", "float64")
    B = np.random.default_rng(5).standard_normal((5, 3))
    B_dev = _to_device(B)
    runs = []
    run = device.Repeat.run
    device.Repeat.run = lambda self, A: runs.append(1) or run(self, A)
    try:
        first = sp.ops.spmm(A, B_dev, target="cuda")
        assert not runs
        B2 = B - 3
        B_dev.copy_to_device(B2)
        A.data[:] = np.arange(A.nnz)
        second, counts = counted(lambda: sp.ops.spmm(A, B_dev, target="cuda"))
        assert runs == [1] and counts == {"to_host": 0, "to_device": 1}, (runs, counts)
        sp.ops.spmm(A, _to_device(B), target="cuda")  # another B: prepared anew
        assert runs == [1]
    finally:
        device.Repeat.run = run
    assert second is not first
    np.testing.assert_allclose(host(second), A @ B2, rtol=1e-12)
    out = cuda.device_array((7, 3), np.float64)
    for scale in (1.0, 2.0):  # with `out=`: the same array back, filled anew
        A.data[:] = scale
        assert sp.ops.spmm(A, B_dev, target="cuda", out=out) is out
        np.testing.assert_allclose(host(out), A @ B2, rtol=1e-12)
    X = _to_device(np.ones((7, 3)))
    previous = None
    for _ in range(2):  # SDDMM: a fresh values array each call
        values = sp.ops.sddmm(A, X, B_dev, target="cuda")
        assert values is not previous
        np.testing.assert_allclose(host(values), A.multiply(np.ones((7, 3)) @ B2.T).tocsr().data, rtol=1e-12)
        previous = values


def check_kernel_launcher():
    """`CUDAKernel.launcher`: prepared once on device arrays, each call launches on their current
    values; `c=` another array for one launch; numpy arrays are refused."""
    from schedules.spmm import SCHEDULES

    A = matrix()
    kernel = sp.compile(sp.ops.spmm_script(), "cuda", schedule=SCHEDULES["csr_cuda_rows"], specialize={"feat": 4})
    B = np.random.default_rng(6).standard_normal((5, 4)).astype(np.float32)
    dev = {k: _to_device(v) for k, v in {"a": A.data, "indptr": A.indptr, "indices": A.indices, "b": B}.items()}
    c = cuda.device_array((7, 4), np.float32)
    launch = kernel.launcher(**dev, c=c, m=7, n=5, nnz=A.nnz)
    launch()
    np.testing.assert_allclose(host(c), A @ B, rtol=1e-5, atol=1e-6)
    dev["b"].copy_to_device(B * 3)
    other = cuda.device_array((7, 4), np.float32)
    launch(c=other)
    np.testing.assert_allclose(host(other), A @ (B * 3), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host(c), A @ B, rtol=1e-5, atol=1e-6)  # untouched by that launch
    _raises(lambda: kernel.launcher(**dev, c=np.zeros((7, 4), np.float32), m=7, n=5, nnz=A.nnz), "device arrays only")
    _raises(lambda: launch(c=cuda.device_array((7, 5), np.float32)), "shape (7, 4) and dtype float32")
    _raises(lambda: launch(c=cuda.device_array((7, 4), np.float64)), "shape (7, 4) and dtype float32")
    _raises(lambda: launch(c=np.zeros((7, 4), np.float32)), "must be a device array")
    _raises(lambda: launch(d=other), "no buffer argument `d`")
    assert not launch.direct  # the simulator launches through the dispatcher
    third = cuda.device_array((7, 4), np.float32)
    launch.into("c")(third)  # unchecked: the caller made the array
    np.testing.assert_allclose(host(third), A @ (B * 3), rtol=1e-5, atol=1e-6)


def check_repeat_does_constant_host_work():
    """The second call with the same operands: no argument bound or checked again, nothing copied
    but a scipy A's values (one copy into the device buffer of the first call), no allocation
    but the result's; a different operand object, or A's values replaced by another array, is
    prepared anew (and seen)."""
    from sparsetir_py.ops import device
    from sparsetir_py.runtime import kernel as runtime_kernel

    work = {"bind": 0, "operands": 0, "as_csr": 0}

    def counting(module, name, what):
        original = getattr(module, name)

        def wrapped(*args, **kwargs):
            work[what] += 1
            return original(*args, **kwargs)

        setattr(module, name, wrapped)
        return module, name, original

    saved = [counting(runtime_kernel, "bind_arguments", "bind"), counting(runtime_kernel, "bind_values", "bind"),
             counting(device, "dense_operands", "operands"), counting(device, "as_csr", "as_csr")]  # fmt: skip
    try:
        A = matrix()
        rng = np.random.default_rng(8)
        B, X = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((7, 6)).astype(np.float32)
        B_dev, X_dev = _to_device(B), _to_device(X)
        out = cuda.device_array((7, 6), np.float32)
        B_vec = _to_device(B[:, 0].copy())
        calls = {  # name -> (call, device arrays it allocates)
            "spmm out=": (lambda: sp.ops.spmm(A, B_dev, target="cuda", out=out), 0),
            "spmm": (lambda: sp.ops.spmm(A, B_dev, target="cuda"), 1),
            "spmv": (lambda: sp.ops.spmm(A, B_vec, target="cuda"), 1),
            "sddmm": (lambda: sp.ops.sddmm(A, X_dev, B_dev, target="cuda"), 1),
        }
        for name, (call, allocations) in calls.items():
            call()
            work.update(bind=0, operands=0, as_csr=0)
            ALLOCATED[0] = 0
            _, copies = counted(call)
            assert work == {"bind": 0, "operands": 0, "as_csr": 0}, (name, work)
            assert copies == {"to_host": 0, "to_device": 1} and ALLOCATED[0] == allocations, (name, copies, ALLOCATED)
        np.testing.assert_allclose(host(out), A @ B, rtol=1e-5, atol=1e-6)
        # Another B object of the same shape: not mistaken for the first.
        B2 = B + 5
        C = sp.ops.spmm(A, _to_device(B2), target="cuda", out=out)
        np.testing.assert_allclose(host(C), A @ B2, rtol=1e-5, atol=1e-5)
        assert work["bind"] > 0
        # A's values replaced by another array (not written in place): prepared anew, seen.
        sp.ops.spmm(A, B_dev, target="cuda", out=out)
        A.data = A.data * 3
        np.testing.assert_allclose(host(sp.ops.spmm(A, B_dev, target="cuda", out=out)), A @ B, rtol=1e-5, atol=1e-5)
        S = sp.ops.sddmm(A, X_dev, B_dev, target="cuda")
        np.testing.assert_allclose(host(S), A.multiply(X @ B.T).tocsr().data, rtol=1e-5, atol=1e-5)
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def check_cuda_host_tool():
    """`python -m bench.cuda_host` (launches stubbed), a few calls of the CSR cases on cora: each
    is timed, and a repeated call copies A's values to the device and nothing to the host."""
    from bench import cuda_host

    cases = [case for case in cuda_host.CASES if case[2] == "csr"]
    results = cuda_host.measure(calls=3, budget=0.0, cases=cases, profile=3)
    assert [r["case"] for r in results] == [case[0] for case in cases], results
    for r in results:
        assert r["us_per_call"] > 0 and r["to_device"] == 1 and r["to_host"] == 0, r
        assert "own us" in r["profile"], r
    assert "| spmm csr out= |" in cuda_host.table(results)


def check_repeated_calls_see_what_changed():
    """Repeated calls that a prepared call (`ops.device.REPEATS`) would get wrong if it reused
    what it prepared beyond the operands' identity: A's values and B written in place (with
    `out=`, a fresh result, SDDMM), another B object of the same shape (made after the first was
    dropped), another A of the same shape and another structure, A's arrays replaced by that
    structure's, a float32 A's values converted for a float64 kernel. Every result equals
    scipy's; a repeated call copies nothing to the host and only A's values to the device."""
    from sparsetir_py.runtime.device import describe

    A = matrix()
    rng = np.random.default_rng(10)
    B, X = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((7, 4)).astype(np.float32)
    B_dev, X_dev = _to_device(B), _to_device(X)
    out = cuda.device_array((7, 4), np.float32)

    def calls(A, B_dev):
        spmm_out = sp.ops.spmm(A, B_dev, target="cuda", out=out)
        return spmm_out, sp.ops.spmm(A, B_dev, target="cuda"), sp.ops.sddmm(A, X_dev, B_dev, target="cuda")

    def agree(A, B, got, what):
        spmm_out, spmm, sddmm = map(host, got)
        for C in (spmm_out, spmm):
            np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5, err_msg=what)
        np.testing.assert_allclose(sddmm, A.multiply(X @ B.T).tocsr().data, rtol=1e-5, atol=1e-5, err_msg=what)

    for step in range(3):  # values written in place into the same objects
        A.data[:] = rng.uniform(-1, 1, A.nnz)
        B[...] = rng.standard_normal(B.shape)
        B_dev.copy_to_device(B)
        got, counts = counted(lambda: calls(A, B_dev))
        assert got[0] is out and got[1] is not calls(A, B_dev)[1], step
        agree(A, B, got, f"in place, round {step}")
        assert step == 0 or counts == {"to_host": 0, "to_device": 3}, (step, counts)  # A's values, per call
    for shift in (1.0, 2.0):  # another B object each time, the previous one dropped
        other = _to_device(B + shift)
        agree(A, B + shift, calls(A, other), f"another B (+{shift})")
        del other
    agree(A, B, calls(A, B_dev), "the first B again")
    mask = np.zeros((7, 5), bool)
    mask[::2, 1::2] = mask[1::2, ::3] = True
    A2 = make_csr(mask, rng.uniform(-1, 1, int(mask.sum())), "int32", "float32")
    agree(A2, B, calls(A2, B_dev), "another A of the same shape")
    agree(A, B, calls(A, B_dev), "the first A again")
    A.indptr, A.indices, A.data = A2.indptr.copy(), A2.indices.copy(), A2.data.copy()
    agree(A2, B, calls(A, B_dev), "A's arrays replaced by another structure's")
    x = rng.standard_normal(5).astype(np.float32)
    x_dev, results = _to_device(x), []
    for _ in range(3):  # SpMV: a fresh 1-D result each call, earlier ones left as they were
        A.data[:] = rng.uniform(-1, 1, A.nnz)
        x[:] = rng.standard_normal(5)
        x_dev.copy_to_device(x)
        y = sp.ops.spmm(A, x_dev, target="cuda")
        assert describe(y).shape == (7,), describe(y)
        results.append((y, A @ x))
    for y, want in results:
        np.testing.assert_allclose(host(y), want, rtol=1e-5, atol=1e-5)
    B64 = _to_device(B.astype(np.float64))
    for scale in (1.0, -3.0):  # float32 values converted into the float64 kernel's buffer, each call
        A.data[:] = A2.data * scale
        C = sp.ops.spmm(A, B64, target="cuda")
        np.testing.assert_allclose(host(C), A.astype(np.float64) @ B.astype(np.float64), rtol=1e-12)


def _raises(fn, pattern: str):
    try:
        fn()
    except sp.InputError as e:
        assert pattern in str(e), str(e)
        return
    raise AssertionError(f"no InputError ({pattern})")


def check_errors():
    A = matrix()
    B32 = _to_device(np.zeros((5, 4), np.float32))
    _raises(lambda: sp.ops.spmm(matrix("int32", "float64"), B32, target="cuda"), "pass `B` as float64")
    _raises(lambda: sp.ops.spmm(A, _to_device(np.zeros((6, 4), np.float32)), target="cuda"), "must have 5 rows")
    _raises(lambda: sp.ops.spmm(A, _to_device(np.zeros((5, 4), np.float32))), "device arrays run on target='cuda'")
    B = _to_device(np.zeros((5, 4), np.float32))
    X = _to_device(np.zeros((7, 4), np.float32))
    bad = cuda.device_array((7, 3), np.float32)
    _raises(lambda: sp.ops.spmm(A, B, target="cuda", out=bad), "`out` must have shape (7, 4)")


CHECKS = {name[len("check_") :]: fn for name, fn in dict(globals()).items() if name.startswith("check_")}


def main() -> None:
    global cuda, devicearray, _copy_to_host, _to_device, _copy_to_device, _device_array, _setitem
    from numba import cuda
    from numba.cuda.simulator.cudadrv import devicearray

    _copy_to_host, _to_device = devicearray.FakeCUDAArray.copy_to_host, cuda.to_device
    _copy_to_device = devicearray.FakeCUDAArray.copy_to_device
    _setitem = devicearray.FakeCUDAArray.__setitem__
    _device_array = cuda.device_array
    cuda.device_array = _counting_device_array
    out = Path(sys.argv[1])
    devicearray.FakeCUDAArray.copy_to_host = _counting_copy_to_host
    devicearray.FakeCUDAArray.copy_to_device = _counting_copy_to_device
    devicearray.FakeCUDAArray.__setitem__ = _counting_setitem
    cuda.to_device = _counting_to_device
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    np.savez(out)


if __name__ == "__main__":
    main()
