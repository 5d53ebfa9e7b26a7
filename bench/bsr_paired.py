"""BSR against this project's CSR schedules on matrices of dense b x b blocks, paired in one process.

    python -m bench.bsr_paired                                    # the synthetic set, widths 32/128/512
    python -m bench.bsr_paired --matrix path/to/bcsstk16.npz:3    # a scipy .npz file, with its block size
    python -m bench.bsr_paired --ops spmm --widths 32 --budget 2 --threads 2

Per matrix, width and operator, every candidate runs in interleaved rounds (one call of each in
turn, `sparsetir_py.runtime.timing`), medians compared: `sp.ops.spmm(A, B, out=out,
format="bsr", block_size=b)` (SpMM with `out=`; SDDMM as `sp.ops.sddmm(A, X, Y, format="bsr",
block_size=b)`), SpMM from a scipy `bsr_matrix` of block size b (`bsr in`: the kernel reads its
values in place, where the CSR input's are compared with the last call's or gathered into the
blocks each call), each shipped CPU CSR schedule (`format="csr", schedule=...`), `format="auto"`
(the tuner's choice, tuned on an untimed first call) and, where `sparse_dot_mkl` is installed,
MKL's SpMM from the CSR and from the BSR matrix. Every result is checked against scipy first.
Prints a markdown table: the median of each, the best CSR schedule and the ratios best CSR /
BSR, best CSR / BSR (bsr in), best MKL / BSR (bsr in) and auto / BSR (above 1: BSR is faster).

The synthetic matrices (`bench.graphs.block_graph`, smaller than `--graphs blocks`' so that a run
takes minutes): a banded mesh of 3 and of 6 unknowns per node (100% fill of the stored blocks) and
random blocks of 2, 4 and 8 (80% fill).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse

#: name -> (`block_graph` parameters, block size): about 1-2M nonzeros each.
MATRICES = {
    "mesh-b3": ({"block_rows": 20_000, "per_row": 9, "b": 3, "fill": 1.0, "band": 8}, 3),
    "mesh-b6": ({"block_rows": 6_000, "per_row": 6, "b": 6, "fill": 1.0, "band": 8}, 6),
    "blocks-b2": ({"block_rows": 60_000, "per_row": 5, "b": 2, "fill": 0.8, "band": None}, 2),
    "blocks-b4": ({"block_rows": 10_000, "per_row": 10, "b": 4, "fill": 0.8, "band": None}, 4),
    "blocks-b8": ({"block_rows": 2_500, "per_row": 8, "b": 8, "fill": 0.8, "band": None}, 8),
}
CSR_SCHEDULES = {
    "spmm": ("csr_cpu_rows", "csr_cpu_rows_split", "csr_cpu_rows_split_x4", "csr_cpu_rows_split_x4_fixed"),
    "sddmm": ("csr_cpu_rows", "csr_cpu_rows_split", "csr_cpu_rows_split_x4", "csr_cpu_rows_split_x4_fixed"),
}


def load(spec: str) -> tuple[str, scipy.sparse.csr_matrix, int]:
    """A synthetic matrix by name, or `path.npz:b` (a scipy sparse .npz file and its block size)."""
    from .graphs import block_graph

    if spec in MATRICES:
        params, b = MATRICES[spec]
        return spec, block_graph(**params), b
    path, _, b = spec.rpartition(":")
    A = scipy.sparse.load_npz(path).tocsr().astype(np.float32)
    A.sum_duplicates()
    A.indices, A.indptr = A.indices.astype(np.int32), A.indptr.astype(np.int32)
    return Path(path).stem, A, int(b)


def candidates(op: str, A, b: int, width: int, rng, threads: int = 2) -> tuple[dict, object]:
    """name -> call, and the reference result (scipy, float64)."""
    import sparsetir_py as sp

    m, n = A.shape
    calls = {}
    if op == "spmm":
        B = rng.uniform(-1, 1, (n, width)).astype(np.float32)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        outs = {}

        def spmm(name, **kw):
            out = outs.setdefault(name, np.empty((m, width), np.float32))
            return lambda: sp.ops.spmm(A, B, out=out, **kw)

        calls["bsr"] = spmm("bsr", format="bsr", block_size=b)
        calls["auto"] = spmm("auto")
        for s in CSR_SCHEDULES[op]:
            calls[s] = spmm(s, format="csr", schedule=s)
        if A.shape[0] % b == 0 and A.shape[1] % b == 0:  # scipy's BSR takes whole blocks only
            Ab = A.tobsr((b, b))
            out = outs.setdefault("bsr_in", np.empty((m, width), np.float32))
            calls["bsr_in"] = lambda: sp.ops.spmm(Ab, B, out=out, format="bsr", block_size=b)
            calls.update(mkl_calls(A, Ab, B, threads))
        return calls, ref
    X = rng.uniform(-1, 1, (m, width)).astype(np.float32)
    Y = rng.uniform(-1, 1, (n, width)).astype(np.float32)
    ref = sddmm_reference(A, X, Y)
    calls["bsr"] = lambda: sp.ops.sddmm(A, X, Y, format="bsr", block_size=b)
    calls["auto"] = lambda: sp.ops.sddmm(A, X, Y)
    for s in CSR_SCHEDULES[op]:
        calls[s] = lambda s=s: sp.ops.sddmm(A, X, Y, format="csr", schedule=s)
    return calls, ref


def mkl_calls(A, Ab, B, threads: int) -> dict:
    """MKL's SpMM (`sparse_dot_mkl`) from the CSR and from the BSR matrix, where it is installed."""
    import os

    from .libraries import LIBRARIES

    mkl = LIBRARIES["mkl"]
    if mkl.missing() is not None:
        return {}
    os.environ.update(mkl.env())  # before `sparse_dot_mkl` loads MKL
    mkl.set_threads(threads)
    from sparse_dot_mkl import dot_product_mkl

    return {"mkl_csr": lambda: dot_product_mkl(A, B), "mkl_bsr": lambda: dot_product_mkl(Ab, B)}


def sddmm_reference(A, X, Y, chunk: int = 1 << 18) -> np.ndarray:
    """A's values times the dot products of X's and Y's rows at its nonzeros (float64), in A's
    order, a chunk of nonzeros at a time (X @ Y.T would not fit in memory)."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    out = np.empty(A.nnz)
    for s in range(0, A.nnz, chunk):
        r, c = rows[s : s + chunk], A.indices[s : s + chunk]
        dots = np.einsum("ij,ij->i", X[r].astype(np.float64), Y[c].astype(np.float64))
        out[s : s + chunk] = A.data[s : s + chunk] * dots
    return out


def check(op: str, result, ref) -> None:
    got = result if op == "spmm" else result.data
    want = ref
    scale = max(float(np.abs(want).max(initial=0)), 1.0)
    err = float(np.abs(got - want).max(initial=0)) / scale
    if err > 1e-4:
        raise SystemExit(f"wrong result: relative error {err:.2e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bsr_paired", description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", nargs="*", default=list(MATRICES), help="names or path.npz:b")
    parser.add_argument("--ops", nargs="*", default=["spmm", "sddmm"])
    parser.add_argument("--widths", nargs="*", type=int, default=[32, 128, 512])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of timed rounds per case")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baselines", nargs="*", default=["mkl"], help="mkl: MKL's SpMM (CSR, BSR) if installed")
    args = parser.parse_args(argv)

    import numba

    from sparsetir_py.runtime.timing import medians, time_interleaved

    numba.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    command = "python -m bench.bsr_paired " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"`{command}` ({args.threads} threads, medians of interleaved rounds, ms)\n")
    print(
        "| op | matrix | nnz | b | width | BSR | BSR (bsr in) | auto | best CSR (schedule) | MKL csr / bsr | "
        "best CSR / BSR | best CSR / BSR (bsr in) | best MKL / BSR (bsr in) | auto / BSR | rounds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in args.matrix:
        name, A, b = load(spec)
        for op in args.ops:
            for width in args.widths:
                calls, ref = candidates(op, A, b, width, rng, args.threads)
                if "mkl" not in args.baselines:
                    calls = {k: v for k, v in calls.items() if not k.startswith("mkl")}
                for call in calls.values():  # compile, tune (auto), check
                    check(op, call(), ref)
                times = time_interleaved(calls, budget=args.budget, min_rounds=7, warmup=1)
                med = {k: v * 1e3 for k, v in medians(times).items()}
                csr = min(CSR_SCHEDULES[op], key=lambda s: med[s])
                rounds = len(times["bsr"])
                na = float("nan")
                bsr_in = med.get("bsr_in", na)
                mkl = min(med.get("mkl_csr", na), med.get("mkl_bsr", na))
                print(
                    f"| {op} | {name} | {A.nnz} | {b} | {width} | {med['bsr']:.3f} | {bsr_in:.3f} | "
                    f"{med['auto']:.3f} | "
                    f"{med[csr]:.3f} ({csr}) | {med.get('mkl_csr', na):.3f} / {med.get('mkl_bsr', na):.3f} | "
                    f"{med[csr] / med['bsr']:.2f}x | {med[csr] / bsr_in:.2f}x | {mkl / bsr_in:.2f}x | "
                    f"{med['auto'] / med['bsr']:.2f}x | {rounds} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
