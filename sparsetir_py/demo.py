"""`make demo`: the project's main job, end to end on a real graph (pubmed, shipped).

SpMM and SDDMM are compiled through the three stages for the CPU target (and CUDA when a GPU is
present), each stage's IR is printed (abridged), results are checked against scipy, and kernel
times are reported with their ratio to scipy, measured in the same run.
"""

from __future__ import annotations

import os
import time

import numpy as np

import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.inputs import positive_int
from sparsetir_py.ops import sddmm_script, spmm_script

FEAT = 32
REPEAT = 20


def abridged(text: str, lines: int = 28) -> str:
    rows = text.rstrip().splitlines()
    if len(rows) <= lines:
        return "\n".join(rows)
    return "\n".join([*rows[:lines], f"    ... ({len(rows) - lines} more lines)"])


def median_ms(fn, repeat: int | None = None) -> float:
    repeat = REPEAT if repeat is None else repeat
    _check_repeat(repeat)
    fn()  # warm up (compilation, thread pool)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def _check_repeat(repeat) -> None:
    positive_int("`repeat`", repeat)


def max_error(result: np.ndarray, reference: np.ndarray) -> float:
    """Largest absolute difference; 0 for empty arrays (a matrix without rows or nonzeros)."""
    return float(np.abs(result - reference).max(initial=0.0))


def ratio(baseline_ms: float, kernel_ms: float) -> float:
    return baseline_ms / kernel_ms if kernel_ms > 0 else float("inf")


def show_stages(name: str, func: sp.PrimFunc, schedule) -> None:
    stage2 = sp.lower_sparse_iter(func.specialize({"feat": FEAT}))
    sch = sp.Schedule(stage2)
    schedule(sch)
    stage3 = sp.lower_sparse_buffer(sch.mod)
    for label, f in (("Stage I", func), ("Stage II (scheduled)", sch.mod["main"]), ("Stage III", stage3["main"])):
        sp.verify(f)
        print(f"--- {name}: {label}")
        print(abridged(f.script()))
        print()
    # sp.compile runs the same stages, then the target passes (compact_buffers,
    # promote_accumulators, hoist_loop_invariants) that sp.build alone does not.
    kernel = sp.compile(func, "cpu", schedule=schedule, specialize={"feat": FEAT})
    print(f"--- {name}: generated CPU kernel, after the target passes ({kernel.path.name})")
    print(abridged(kernel.source, 40))
    print()


def main(graph: str = "pubmed", repeat: int = REPEAT) -> None:
    """Run the demo on a shipped graph (`sp.data.available()`) or a matrix file (.npz, .mtx)."""
    _check_repeat(repeat)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    from schedules import sddmm as sddmm_schedules
    from schedules import spmm as spmm_schedules

    A = load_matrix(graph)
    m, n = A.shape
    rng = np.random.default_rng(0)
    print(f"{graph}: {m} x {n}, {A.nnz} nonzeros, feature width {FEAT}, float32\n")

    show_stages("SpMM", spmm_script(), spmm_schedules.csr_cpu_rows)
    show_stages("SDDMM", sddmm_script(), sddmm_schedules.csr_cpu_rows)

    targets = ["cpu"]
    try:
        from numba import cuda

        if cuda.is_available():
            targets.append("cuda")
    except Exception:  # no CUDA runtime at all: CPU only
        pass

    B = rng.standard_normal((n, FEAT)).astype(np.float32)
    X = rng.standard_normal((m, FEAT)).astype(np.float32)
    ref_spmm = A @ B
    rows = np.repeat(np.arange(m), np.diff(A.indptr))

    def sddmm_numpy():  # A.multiply(X @ Y.T) without forming the dense m x n product
        return A.data * np.einsum("ij,ij->i", X[rows], B[A.indices])

    ref_sddmm = sddmm_numpy()
    t_scipy_spmm = median_ms(lambda: A @ B, repeat)
    t_scipy_sddmm = median_ms(sddmm_numpy, repeat)

    print(f"--- results (median of {repeat} runs; ratio = baseline time / kernel time, > 1 is faster)")
    print("baseline: scipy `A @ B` for SpMM; numpy gather + einsum over the nonzeros for SDDMM")
    print(f"{'op':6} {'target':6} {'max abs err':>12} {'kernel ms':>10} {'base ms':>9} {'ratio':>7}")
    for target in targets:
        C = sp.ops.spmm(A, B, target=target)
        err = max_error(C, ref_spmm)
        np.testing.assert_allclose(C, ref_spmm, rtol=1e-4, atol=1e-4)
        t = median_ms(lambda target=target: sp.ops.spmm(A, B, target=target), repeat)
        print(f"{'SpMM':6} {target:6} {err:12.2e} {t:10.2f} {t_scipy_spmm:9.2f} {ratio(t_scipy_spmm, t):7.2f}")
        S = sp.ops.sddmm(A, X, B, target=target)
        err = max_error(S.data, ref_sddmm)
        np.testing.assert_allclose(S.data, ref_sddmm, rtol=1e-4, atol=1e-4)
        t = median_ms(lambda target=target: sp.ops.sddmm(A, X, B, target=target), repeat)
        print(f"{'SDDMM':6} {target:6} {err:12.2e} {t:10.2f} {t_scipy_sddmm:9.2f} {ratio(t_scipy_sddmm, t):7.2f}")
    if targets == ["cpu"]:
        print("\n(no GPU here: the CUDA target is compiled to PTX and tested under the simulator by `make test`)")
    print("bench/ compares against MKL, torch.sparse and GraphBLAS as well.")


if __name__ == "__main__":
    main()
