"""`python -m bench.cuda_probe`: where the CUDA time goes, for a device session's few minutes.

For SpMM and SDDMM on a few graphs (shipped ones and generated larger ones) and widths, times on
device-resident operands, results checked against scipy first:

- every shipped CUDA CSR schedule of ours (`sp.compile` + `CUDAKernel.launcher`);
- hand-written Numba kernels of the known GPU designs (one row per block; a warp per row over
  32-feature tiles; GE-SpMM's coalesced row caching with shuffles and several features per lane;
  SDDMM with a warp per row holding X's row in registers), to separate what the generated code
  costs from what Numba itself reaches;
- cuSPARSE (cupy) and torch's CUDA sparse ops.

Two times per kernel: `single`, the median of CUDA-event times of one call (what a lone call
costs, launch latency included), and `batched`, events around `--batch` back-to-back calls over
the count (the kernel's own time where the GPU is the slower side). Plus the launch overhead of
an empty Numba kernel. Lines print as they are measured; `cuda-probe.json` and `cuda-probe.md`
go to `$SPARSETIR_REPORT_DIR` (default `gpu-report/`) after every graph.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import scipy.sparse
from numba import cuda, float32, int32

import sparsetir_py  # noqa: F401  (its compat shims, numpy 2.5 with numba-cuda 0.30, before any CUDA compile)

from .measure import check_result, operands_and_reference

WIDTHS = (32, 128, 512)
ONLY: list = []
XOR_STEPS = (16, 8, 4, 2, 1)  # an xor butterfly over a warp's 32 lanes
OPS: list = ["spmm", "sddmm"]
GRAPHS = ("powerlaw-1.5M", "uniform-2M", "pubmed", "cora", "ca-CondMat")


def generated(name: str) -> scipy.sparse.csr_matrix:
    """Larger graphs than the shipped ones: a power-law row length (lognormal, heavy tail) and a
    uniform one, columns at random."""
    rng = np.random.default_rng(0)
    if name == "powerlaw-1.5M":
        m = 100_000
        deg = np.minimum(rng.lognormal(2.0, 1.3, m).astype(np.int64) + 1, m // 4)
    elif name == "uniform-2M":
        m = 200_000
        deg = np.full(m, 10, np.int64)
    else:
        raise KeyError(name)
    rows = np.repeat(np.arange(m), deg)
    cols = rng.integers(0, m, rows.size)
    A = scipy.sparse.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(m, m))
    A.sum_duplicates()
    A.data = rng.random(A.nnz, dtype=np.float32) + 0.5
    A.indptr = A.indptr.astype(np.int32)
    A.indices = A.indices.astype(np.int32)
    return A


def load(name: str) -> scipy.sparse.csr_matrix:
    import sparsetir_py as sp

    if name in ("powerlaw-1.5M", "uniform-2M"):
        return generated(name)
    A = sp.data.load_matrix(name).tocsr()
    A.sort_indices()
    return scipy.sparse.csr_matrix(
        (A.data.astype(np.float32), A.indices.astype(np.int32), A.indptr.astype(np.int32)), shape=A.shape
    )


# ------------------------------------------------------------------ timing
def timed(fn, batch: int) -> dict:
    """`single` (median of 9 one-call event times, after 2 warm-up calls), `batched` (the least
    of 3 event times around `batch` calls, over `batch`), `host_us` (wall time a call, not waited)."""
    from .cuda_quick import event_batched, event_median

    single = event_median(fn, 9)
    batched = event_batched(fn, batch)
    t0 = time.perf_counter()
    for _ in range(batch):
        fn()
    host = (time.perf_counter() - t0) / batch * 1e6
    cuda.synchronize()
    return {"single": single, "batched": batched, "host_us": host}


# ------------------------------------------------------------------ hand-written kernels
@functools.cache
def reference_kernels(W: int) -> dict:
    """Numba CUDA kernels for width W (a compile-time constant), by name: (kernel, launch)."""
    T = max(1, W // 32)  # 32-feature tiles
    ROWS = max(1, 256 // W)  # rows per block of `rows_multi`

    @cuda.jit(fastmath=False)
    def row_block(indptr, indices, data, B, C, m):
        i = cuda.blockIdx.x
        k = cuda.threadIdx.x
        acc = float32(0)
        for p in range(indptr[i], indptr[i + 1]):
            acc += data[p] * B[indices[p], k]
        C[i, k] = acc

    @cuda.jit
    def rows_multi(indptr, indices, data, B, C, m):
        i = cuda.blockIdx.x * ROWS + cuda.threadIdx.y
        if i >= m:
            return
        k = cuda.threadIdx.x
        acc = float32(0)
        for p in range(indptr[i], indptr[i + 1]):
            acc += data[p] * B[indices[p], k]
        C[i, k] = acc

    @cuda.jit
    def warp_row(indptr, indices, data, B, C, m):
        i = cuda.blockIdx.x * 8 + cuda.threadIdx.y
        if i >= m:
            return
        lane = cuda.threadIdx.x
        start, end = indptr[i], indptr[i + 1]
        for t in range(T):
            k = t * 32 + lane
            acc = float32(0)
            for p in range(start, end):
                acc += data[p] * B[indices[p], k]
            C[i, k] = acc

    @cuda.jit
    def warp_row_crc(indptr, indices, data, B, C, m):
        i = cuda.blockIdx.x * 8 + cuda.threadIdx.y
        if i >= m:
            return
        lane = cuda.threadIdx.x
        start, end = indptr[i], indptr[i + 1]
        acc = cuda.local.array(T, float32)
        for t in range(T):
            acc[t] = 0
        for base in range(start, end, 32):
            p = base + lane
            col = int32(0)
            val = float32(0)
            if p < end:
                col = indices[p]
                val = data[p]
            n = min(32, end - base)
            for q in range(n):
                c = cuda.shfl_sync(0xFFFFFFFF, col, q)
                v = cuda.shfl_sync(0xFFFFFFFF, val, q)
                for t in range(T):
                    acc[t] += v * B[c, t * 32 + lane]
        for t in range(T):
            C[i, t * 32 + lane] = acc[t]

    @cuda.jit
    def sddmm_warp_row(indptr, indices, data, X, Y, out, m):
        i = cuda.blockIdx.x * 8 + cuda.threadIdx.y
        if i >= m:
            return
        lane = cuda.threadIdx.x
        x = cuda.local.array(T, float32)
        for t in range(T):
            x[t] = X[i, t * 32 + lane]
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            s = float32(0)
            for t in range(T):
                s += x[t] * Y[c, t * 32 + lane]
            for d in XOR_STEPS:  # the warp's sum in every lane
                s += cuda.shfl_xor_sync(0xFFFFFFFF, s, d)
            if lane == 0:
                out[p] = s * data[p]

    @cuda.jit
    def sddmm_warp_row_x4(indptr, indices, data, X, Y, out, m):
        # 4 nonzeros' dot products in flight per warp step (more loads outstanding)
        i = cuda.blockIdx.x * 8 + cuda.threadIdx.y
        if i >= m:
            return
        lane = cuda.threadIdx.x
        x = cuda.local.array(T, float32)
        for t in range(T):
            x[t] = X[i, t * 32 + lane]
        start, end = indptr[i], indptr[i + 1]
        for base in range(start, end, 4):
            s = cuda.local.array(4, float32)
            for u in range(4):
                s[u] = 0
                p = base + u
                if p < end:
                    c = indices[p]
                    for t in range(T):
                        s[u] += x[t] * Y[c, t * 32 + lane]
            for u in range(4):
                v = s[u]
                for d in XOR_STEPS:
                    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, d)
                if lane == u and base + u < end:
                    out[base + u] = v * data[base + u]

    def grid_rows(m, rows):
        return (m + rows - 1) // rows

    return {
        "spmm": {
            "ref-row-block": (row_block, lambda m: (m, W)),
            "ref-rows-multi": (rows_multi, lambda m: (grid_rows(m, ROWS), (W, ROWS))),
            "ref-warp-row": (warp_row, lambda m: (grid_rows(m, 8), (32, 8))),
            "ref-warp-row-crc": (warp_row_crc, lambda m: (grid_rows(m, 8), (32, 8))),
        },
        "sddmm": {
            "ref-warp-row": (sddmm_warp_row, lambda m: (grid_rows(m, 8), (32, 8))),
            "ref-warp-row-x4": (sddmm_warp_row_x4, lambda m: (grid_rows(m, 8), (32, 8))),
        },
    }


# ------------------------------------------------------------------ candidates
def ours(op: str, A, dev: dict, W: int) -> dict:
    """Every shipped CUDA CSR schedule of `op`, compiled for width W, as launch functions."""
    import sparsetir_py as sp
    from schedules import sddmm as sddmm_schedules
    from schedules import spmm as spmm_schedules

    module = spmm_schedules if op == "spmm" else sddmm_schedules
    m, n = A.shape
    found = {}
    schedules = dict(module.SCHEDULES)
    if op == "spmm":  # the coarsened schedule's feature counts per thread and rows per block
        for per in (1, 2, 4, 8, 16):
            schedules[f"csr_cuda_rows_coarse_c{per}"] = functools.partial(module.csr_cuda_rows_coarse, per_thread=per)
        schedules["csr_cuda_rows_coarse_c4_b128"] = functools.partial(module.csr_cuda_rows_coarse, block_threads=128)
        schedules["csr_cuda_rows_coarse_c4_b512"] = functools.partial(module.csr_cuda_rows_coarse, block_threads=512)
        for per in (1, 4):
            for unroll in (2, 8):
                schedules[f"csr_cuda_rows_coarse_c{per}_u{unroll}"] = functools.partial(
                    module.csr_cuda_rows_coarse, per_thread=per, unroll_nonzeros=unroll
                )
    for name, fn in schedules.items():
        if not name.startswith("csr_cuda") or (ONLY and not any(("ours:" + name).startswith(o) for o in ONLY)):
            continue
        try:
            t0 = time.perf_counter()
            script = (sp.ops.spmm_script if op == "spmm" else sp.ops.sddmm_script)("int32", "float32")
            kernel = sp.compile(script, "cuda", schedule=fn, specialize={"feat": W})
            out = cuda.device_array((m, W) if op == "spmm" else (A.nnz,), np.float32)
            args = {"a": dev["data"], "indptr": dev["indptr"], "indices": dev["indices"], "c": out}
            args |= {"b": dev["B"]} if op == "spmm" else {"x": dev["X"], "y": dev["Y"]}
            sizes = {"m": m, "n": n, "nnz": A.nnz}
            if "feat" in kernel.parameters:
                sizes["feat"] = W
            launch = kernel.launcher(**args, **sizes, check_structure=False)
            launch()
            cuda.synchronize()
            info = {"compile_s": round(time.perf_counter() - t0, 2)}
            with contextlib.suppress(Exception):  # numba-cuda's register count, where it has one
                info["regs"] = kernel._fn.get_regs_per_thread()
            found[name] = (lambda launch=launch, out=out: launch() or out, out, info)
        except Exception as e:
            found[name] = (None, None, {"error": f"{type(e).__name__}: {str(e)[:200]}"})
    return found


def baselines(op: str, A, ops: dict) -> dict:
    found = {}
    try:
        import cupy
        import cupyx.scipy.sparse

        Ac = cupyx.scipy.sparse.csr_matrix(A)
        if op == "spmm":
            Bc = cupy.asarray(ops["B"])
            found["cusparse"] = lambda: Ac @ Bc
        else:
            # cupy has no SDDMM; the dot products of every nonzero by gather + row sums
            Xc, Yc = cupy.asarray(ops["X"]), cupy.asarray(ops["Y"])
            rows = cupy.asarray(np.repeat(np.arange(A.shape[0], dtype=np.int32), np.diff(A.indptr)))
            cols = Ac.indices

            found["cupy-gather"] = lambda: (Xc[rows] * Yc[cols]).sum(axis=1) * Ac.data
    except Exception as e:
        found["cupy"] = f"{type(e).__name__}: {e}"
    try:
        import torch

        dev = torch.device("cuda")
        At = torch.sparse_csr_tensor(
            torch.from_numpy(A.indptr.astype(np.int64)).to(dev),
            torch.from_numpy(A.indices.astype(np.int64)).to(dev),
            torch.from_numpy(A.data).to(dev),
            size=A.shape,
        )
        if op == "spmm":
            Bt = torch.from_numpy(ops["B"]).to(dev)
            found["torch"] = lambda: torch.sparse.mm(At, Bt)
        else:
            Xt, Yt = torch.from_numpy(ops["X"]).to(dev), torch.from_numpy(ops["Y"]).to(dev)
            found["torch"] = lambda: torch.sparse.sampled_addmm(At, Xt, Yt.T, beta=0.0, alpha=1.0)
    except Exception as e:
        found["torch"] = f"{type(e).__name__}: {e}"
    return found


def to_host(x) -> np.ndarray:
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    if hasattr(x, "get"):
        return x.get()
    import torch

    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            return x.values().cpu().numpy()
        return x.cpu().numpy()
    return np.asarray(x)


def probe_graph(name: str, widths, batch: int, rows: list) -> None:

    A = load(name)
    m = A.shape[0]
    dev = {k: cuda.to_device(v) for k, v in (("data", A.data), ("indptr", A.indptr), ("indices", A.indices))}
    for W in widths:
        refs = reference_kernels(W)
        for op in OPS:
            ops, ref = operands_and_reference(op, A, W, seed=1)
            for k, v in ops.items():
                dev[k] = cuda.to_device(v)
            cands = {}
            for cname, (fn, _out, info) in ours(op, A, dev, W).items():
                cands["ours:" + cname] = (fn, info)
            for cname, (kernel, cfg) in refs[op].items():
                grid, block = cfg(m)
                out = cuda.device_array((m, W) if op == "spmm" else (A.nnz,), np.float32)
                if op == "spmm":
                    args = (dev["indptr"], dev["indices"], dev["data"], dev["B"], out, m)
                else:
                    args = (dev["indptr"], dev["indices"], dev["data"], dev["X"], dev["Y"], out, m)
                configured = kernel[grid, block]
                cands[cname] = (lambda c=configured, a=args, o=out: c(*a) or o, {})
            for cname, fn in baselines(op, A, ops).items():
                cands[cname] = (fn, {}) if callable(fn) else (None, {"error": fn})
            for cname, (fn, info) in cands.items():
                if ONLY and not any(cname.startswith(o) for o in ONLY):
                    continue
                row = {"graph": name, "m": m, "nnz": int(A.nnz), "op": op, "width": W, "kernel": cname, **info}
                if fn is not None:
                    try:
                        got = to_host(fn())
                        if op == "sddmm" and cname == "torch":  # sampled_addmm leaves A's values out
                            got = got * A.data
                        if op == "spmm" and hasattr(got, "shape") and got.ndim == 1:
                            got = got.reshape(m, W)
                        row["ok"] = check_result(got, ref).ok
                        if row["ok"]:
                            row |= {k: round(v, 4) for k, v in timed(fn, batch).items()}
                    except Exception as e:
                        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                        traceback.print_exc(limit=2)
                rows.append(row)
                print(json.dumps(row), flush=True)


def empty_launch(rows: list) -> None:

    @cuda.jit
    def empty(x):
        pass

    x = cuda.device_array(1, np.float32)
    k = empty[1, 32]
    row = {"kernel": "empty numba launch", **{k2: round(v, 4) for k2, v in timed(lambda: k(x), 200).items()}}
    rows.append(row)
    print(json.dumps(row), flush=True)


def write(out: Path, rows: list, device: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "cuda-probe.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    head = "| graph | op | width | kernel | ok | single ms | batched ms | host us | note |"
    lines = [f"# CUDA probe on {device}", "", head]
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        note = r.get("error") or (f"regs {r['regs']}" if "regs" in r else "")
        lines.append(
            f"| {r.get('graph', '')} | {r.get('op', '')} | {r.get('width', '')} | {r['kernel']} | {r.get('ok', '')} "
            f"| {r.get('single', '')} | {r.get('batched', '')} | {r.get('host_us', '')} | {note} |"
        )
    (out / "cuda-probe.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cuda_probe", description=__doc__.splitlines()[0])
    p.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    p.add_argument("--widths", nargs="+", type=int, default=list(WIDTHS))
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--ops", nargs="+", default=["spmm", "sddmm"])
    p.add_argument("--only", nargs="*", default=[], help="kernel name prefixes to run")
    args = p.parse_args(argv)
    ONLY[:] = args.only
    OPS[:] = args.ops
    out = Path(os.environ.get("SPARSETIR_REPORT_DIR") or "gpu-report")

    if not cuda.is_available():
        print("no GPU: nothing to probe")
        return 0
    name = getattr(cuda.get_current_device(), "name", "?")
    device = name.decode() if isinstance(name, bytes) else str(name)
    rows: list = []
    empty_launch(rows)
    for g in args.graphs:
        try:
            probe_graph(g, args.widths, args.batch, rows)
        except Exception as e:
            rows.append({"graph": g, "kernel": "*", "error": f"{type(e).__name__}: {e}"})
            traceback.print_exc()
        write(out, rows, device)
    write(out, rows, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
