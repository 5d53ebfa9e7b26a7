"""`python -m bench.cuda_quick`: the short CUDA bench of `make test-gpu`.

Three shipped graphs (cora, citeseer, pubmed) x widths 32, 128, 512, SpMM and SDDMM: ours (the
default CUDA schedules on device-resident arrays, `libraries.OursCUDA`) against cuSPARSE through
cupy (`libraries.Cupy`) and torch's CUDA sparse ops, in one process. Every result is checked
against scipy first; a wrong one is reported and not timed. Times are CUDA events on the default
stream (all three libraries launch there), median of `--repeat` calls after two warm-up calls;
moving A and the dense operands to the device and the result back (what `sp.ops` on host arrays
would add) is timed once, in its own column.

Writes `bench-cuda.md` and `bench-cuda.json` under `$SPARSETIR_REPORT_DIR` (default
`gpu-report/`). Without a GPU it writes the reason there and exits 0.

`python -m bench.cuda_quick --host-overhead` is `python -m bench.cuda_host` (no GPU needed): the
host time of a repeated `sp.ops` call on device operands, the kernel launches stubbed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .libraries import LIBRARIES, Prepared, cuda_missing, same_structure
from .measure import check_result, geomean, operands_and_reference

GRAPHS = ("cora", "citeseer", "pubmed")
WIDTHS = (32, 128, 512)
BASELINES = ("cusparse", "torch-cuda")
#: Ours: the default CUDA schedule called as a compiled kernel, and `sp.ops` on device-resident
#: operands with format="auto" (CSR on CUDA today) and "hyb" (horizontally fused parts; SpMM).
OURS = ("sparsetir-cuda", "ops-auto", "ops-hyb")


def torch_cuda(op: str, A, operands) -> Prepared:
    """torch's CUDA sparse ops: `torch.sparse.mm` (SpMM), `torch.sparse.sampled_addmm` (SDDMM,
    A's values applied outside the timed call, as the CPU bench does)."""
    import torch

    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    dev = torch.device("cuda")
    At = torch.sparse_csr_tensor(
        torch.from_numpy(A.indptr).to(dev),
        torch.from_numpy(A.indices).to(dev),
        torch.from_numpy(A.data).to(dev),
        size=A.shape,
    )
    if op == "spmm":
        Bt = torch.from_numpy(operands["B"]).to(dev)
        return Prepared(lambda: torch.sparse.mm(At, Bt), lambda C: C.cpu().numpy(), sync=torch.cuda.synchronize)
    Xt, Yt = torch.from_numpy(operands["X"]).to(dev), torch.from_numpy(operands["Y"]).to(dev)

    def extract(S):
        same_structure(A, S.crow_indices().cpu(), S.col_indices().cpu(), "torch.sparse.sampled_addmm")
        return S.values().cpu().numpy() * A.data

    return Prepared(lambda: torch.sparse.sampled_addmm(At, Xt, Yt.T, beta=0.0, alpha=1.0), extract)


def ops_device(op: str, A, operands, format: str) -> Prepared:
    """`sp.ops` on device-resident operands, what a user's repeated call costs, host work
    included: a `cupyx.scipy.sparse` A and cupy arrays where cupy is installed (nothing moves per
    call; hyb gathers A's values into its parts on the device), else Numba device arrays with a
    scipy A (its values go to the device per call)."""
    import sparsetir_py as sp

    try:
        import cupy
        import cupyx.scipy.sparse
    except ImportError:
        cupy = None
    if cupy is not None and format in ("auto", "hyb"):
        A_dev = cupyx.scipy.sparse.csr_matrix(A)
        sync = cupy.cuda.Device().synchronize
        if op == "spmm":
            B = cupy.asarray(operands["B"])
            out = cupy.empty((A.shape[0], B.shape[1]), cupy.float32)
            fn = lambda: sp.ops.spmm(A_dev, B, format=format, target="cuda", out=out)  # noqa: E731
            return Prepared(fn, cupy.asnumpy, sync=sync)
        X, Y = cupy.asarray(operands["X"]), cupy.asarray(operands["Y"])
        fn = lambda: sp.ops.sddmm(A_dev, X, Y, format=format, target="cuda")  # noqa: E731
        return Prepared(fn, lambda S: cupy.asnumpy(S.data), sync=sync)
    # Numba device arrays with a scipy A: the bench library's own path.
    return LIBRARIES["sparsetir-cuda"].prepare(op, A, operands, format=format)


def host_us(fn, calls: int = 200) -> float:
    """Microseconds of host time per call of `fn` (launches are asynchronous: the wall time of
    `calls` back-to-back calls, the device drained before and after, over `calls`; an upper
    bound where the device is the slower side)."""
    from numba import cuda

    fn()
    cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def prepare(name: str, op: str, A, operands) -> Prepared:
    if name == "torch-cuda":
        return torch_cuda(op, A, operands)
    if name.startswith("ops-"):
        return ops_device(op, A, operands, name[4:])
    return LIBRARIES[name].prepare(op, A, operands)


def event_median(fn, repeat: int) -> float:
    """Median milliseconds of `fn()` between two CUDA events on the default stream."""
    from numba import cuda

    for _ in range(2):
        fn()
    cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = cuda.event(), cuda.event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def event_batched(fn, calls: int = 20, rounds: int = 3) -> float:
    """Milliseconds a call of `fn()` over `calls` back-to-back calls between two CUDA events, the
    least of `rounds`: the kernel's own time where the device is the slower side (a lone call's
    event time, `event_median`, also holds its launch latency)."""
    from numba import cuda

    fn()
    cuda.synchronize()
    best = math.inf
    for _ in range(rounds):
        start, end = cuda.event(), cuda.event()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / calls)
    return best


def transfer_ms(op: str, A, operands, out_shape) -> float:
    """Milliseconds to move A's arrays and the dense operands to the device and a result back."""
    from numba import cuda

    cuda.synchronize()
    t0 = time.perf_counter()
    for array in (A.data, A.indptr, A.indices, *operands.values()):
        cuda.to_device(array)
    cuda.device_array(out_shape, np.float32).copy_to_host()
    cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def run(graphs, widths, repeat: int) -> list[dict]:
    import sparsetir_py as sp

    rows = []
    for op in ("spmm", "sddmm"):
        for graph in graphs:
            A = sp.data.load_matrix(graph)
            for width in widths:
                operands, ref = operands_and_reference(op, A, width, seed=0)
                row = {"op": op, "graph": graph, "width": width, "nnz": A.nnz}
                out_shape = (A.shape[0], width) if op == "spmm" else (A.nnz,)
                row["transfer_ms"] = round(transfer_ms(op, A, operands, out_shape), 4)
                for name in (*OURS, *BASELINES):
                    row[name] = _measure(name, op, A, operands, ref, repeat)
                rows.append(row)
                print(_line(row), flush=True)
    return rows


def _measure(name, op, A, operands, ref, repeat) -> dict:
    try:
        prepared = prepare(name, op, A, operands)
        check = check_result(prepared.extract(prepared.fn()), ref)
        if not check.ok:
            return {"status": f"wrong: {check.message}"}
        cell = {"status": "ok", "ms": round(event_median(prepared.fn, repeat), 4)}
        cell["kernel_ms"] = round(event_batched(prepared.fn), 4)
        if name.startswith("ops-"):
            cell["host_us"] = round(host_us(prepared.fn), 1)
        return cell
    except Exception as e:  # a missing library or a failed run is a row note, not the end
        return {"status": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}


def _ms(cell: dict) -> str:
    return f"{cell['ms']:.4f}" if cell.get("status") == "ok" else cell.get("status", "")


def _cell(row: dict, name: str) -> dict:
    return row.get(name) or {"status": "not run"}


def _line(row) -> str:
    cells = " | ".join(_ms(_cell(row, n)) for n in (*OURS, *BASELINES))
    host = _cell(row, "ops-auto").get("host_us", "")
    return (
        f"| {row['op']} | {row['graph']} | {row['width']} | {cells} | {_times(_ratio(row))} "
        f"| {_times(_ratio(row, 'ops-auto'))} | {host} | {row['transfer_ms']:.3f} "
        f"| {_times(_ratio(row, time='kernel_ms'))} |"
    )


def _ratio(row, ours: str = "sparsetir-cuda", time: str = "ms") -> float | None:
    """The best baseline's time over ours (None where either is missing or wrong); `time="kernel_ms"`
    compares the batched kernel times (rows recorded before that column have none)."""
    mine = _cell(row, ours)
    best = [_cell(row, n).get(time) for n in BASELINES if _cell(row, n).get("status") == "ok"]
    best = [b for b in best if b is not None]
    if mine.get("status") != "ok" or not best or not mine.get(time) or mine[time] <= 0:
        return None
    return min(best) / mine[time]


def _times(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}x"


HEADER = (
    "| op | graph | width | ours ms | ops-auto ms | ops-hyb ms | cuSPARSE ms | torch ms | speedup "
    "| ops-auto speedup | host us | transfer ms | kernel speedup |"
)


def write(out: Path, rows: list[dict], device: str, note: str = "") -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-cuda.json").write_text(json.dumps({"device": device, "note": note, "rows": rows}, indent=1))
    lines = [
        "# CUDA bench (make test-gpu): sparsetir_py vs cuSPARSE (cupy) and torch",
        "",
        f"device: {device}",
        "",
    ]
    if note:
        lines += [note, ""]
    if rows:
        lines += [
            "ms: median of CUDA-event times, device-resident operands; speedup: the best baseline's time / ours;",
            "transfer: A, the dense operands to the device and the result back, once (not in the other columns).",
            "kernel speedup: the same ratio of batched times (20 back-to-back calls between two events, over 20),",
            "where launch latency, which bounds a lone call on a small graph, overlaps the kernels.",
            "",
            "ops-auto / ops-hyb: `sp.ops` on device arrays (host work included); host us: per repeated",
            "ops-auto call, launches not waited for.",
            "",
            HEADER,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *(_line(r) for r in rows),
            "",
        ]
        for op in ("spmm", "sddmm"):
            for ours in OURS:
                ratios = [x for r in rows if r["op"] == op and (x := _ratio(r, ours)) is not None and x > 0]
                if ratios:
                    lines.append(
                        f"{op}, {ours}: geomean speedup over the best baseline {geomean(ratios):.2f}x "
                        f"({len(ratios)} rows)"
                    )
            kernel = [x for r in rows if r["op"] == op and (x := _ratio(r, time="kernel_ms")) is not None and x > 0]
            if kernel:
                lines.append(
                    f"{op}, sparsetir-cuda kernel (batched): geomean speedup over the best baseline "
                    f"{geomean(kernel):.2f}x ({len(kernel)} rows)"
                )
    (out / "bench-cuda.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cuda_quick", description=__doc__.splitlines()[0])
    p.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    p.add_argument("--widths", nargs="+", type=int, default=list(WIDTHS))
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument(
        "--host-overhead",
        action="store_true",
        help="host us per repeated sp.ops call, launches stubbed: `python -m bench.cuda_host` (no GPU needed)",
    )
    args = p.parse_args(argv)
    if args.host_overhead:
        from . import cuda_host

        return cuda_host.main([])
    out = Path(os.environ.get("SPARSETIR_REPORT_DIR") or "gpu-report")
    why = cuda_missing()
    if why is not None:
        write(out, [], "none", f"skipped: {why}")
        print(f"CUDA bench skipped: {why}")
        return 0
    from numba import cuda

    name = getattr(cuda.get_current_device(), "name", "Numba's CUDA simulator")
    device = name.decode() if isinstance(name, bytes) else str(name)
    print(HEADER, flush=True)
    rows = run(args.graphs, args.widths, args.repeat)
    write(out, rows, device)
    print(f"wrote {out / 'bench-cuda.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
