"""`python -m bench spmm --distributed N`: `sp.distributed` on a LocalCluster of N worker
processes against the single-process `sp.ops` call, on the R-MAT graph by default.

    python -m bench spmm --distributed 2                  # rmat, widths 32 128
    python -m bench all --distributed 2 --graphs pubmed rmat --widths 32
    python -m bench spmm --distributed 2 --smoke          # cora, width 32, few calls

Per (graph, width) it reports, each a median of timed calls after a checked warm-up:
- `sp.ops`: the single-process call with `--threads` Numba threads;
- `sp.ops csr`: the same, every row in CSR (what the workers run by default);
- `reuse`: `DistributedMatrix.<op>` on a matrix scattered beforehand (GNN training's pattern):
  the dense operands broadcast, one task per row block, the results gathered;
- `reuse auto`: the same with `format="auto"`: each row block in the format `sp.tune` chose for
  its own structure on its worker (tuned once, before timing; the choices are reported);
- `one-shot`: `sp.distributed.<op>(A, ...)`, which also splits and scatters A every call;
- `scatter`: building the `DistributedMatrix` once (split A, send every piece);
- `compute`: the longest task of a reuse call as Dask's task stream timed it on its worker, so
  that `reuse - compute` is what distribution costs: serialising, sending, scheduling, gathering.
Overhead = distributed median / `sp.ops` median (above 1: slower than one process). Each of the N
workers gets `max(1, threads // N)` Numba threads, so both sides use the same cores. The
cluster is on loopback: network bytes cost memory copies here, not a wire (the README's
"Scaling out" section works out what crosses a real network). Writes `<out>/<op>-distributed.json`
and `.md`; exit status 1 when a result fails its check against scipy.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from .graphs import RMAT, RmatParams, load_graph, rmat_cached
from .measure import RTOL, check_result, operands_and_reference, time_calls
from .report import machine

DEFAULT_GRAPHS = (RMAT,)
DEFAULT_WIDTHS = (32, 128)
SMOKE = {"graphs": ["cora"], "widths": [32], "repeat": 5, "budget": 0.2}
TIMEOUT = 600.0


def run(args, command: str) -> int:
    """Run the distributed benchmark for the parsed CLI arguments; returns the exit status."""
    workers = args.distributed
    if workers < 1:
        raise SystemExit(f"--distributed expects a positive number of workers, got {workers}")
    smoke = SMOKE if args.smoke else {}
    graphs = args.graphs or smoke.get("graphs") or list(DEFAULT_GRAPHS)
    widths = args.widths or smoke.get("widths") or list(DEFAULT_WIDTHS)
    repeat = args.repeat or smoke.get("repeat", 10)
    budget = args.budget or smoke.get("budget", 2.0)
    ops = ("spmm", "sddmm") if args.op == "all" else (args.op,)
    threads = args.threads
    per_worker = max(1, threads // workers)
    # Before Numba is imported here or in a worker: thread counts and passive waiting (docs/design.md §5).
    os.environ.update({"NUMBA_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": args.omp_wait_policy})
    worker_env = {"NUMBA_NUM_THREADS": str(per_worker), "OMP_NUM_THREADS": str(per_worker)}
    worker_env["OMP_WAIT_POLICY"] = args.omp_wait_policy

    import distributed

    status = 0
    cluster = distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        env=worker_env,
    )
    client = distributed.Client(cluster, timeout=TIMEOUT)
    try:
        client.wait_for_workers(workers, timeout=TIMEOUT)
        for op in ops:
            results = []
            for graph in graphs:
                A = _graph(graph, Path(args.out))
                for width in widths:
                    r = _measure(op, A, graph, width, client, args.seed, repeat, budget)
                    results.append(r)
                    print(_line(r), flush=True)
                    status |= r["status"] != "ok"
            report = {
                "op": op,
                "command": command,
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "machine": machine(),
                "workers": workers,
                "threads": threads,
                "threads_per_worker": per_worker,
                "load_avg_1min": os.getloadavg()[0],
                "results": results,
            }
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{op}-distributed.json").write_text(json.dumps(report, indent=1) + "\n")
            (out / f"{op}-distributed.md").write_text(markdown(report))
            print(f"  wrote {out / f'{op}-distributed.md'} and {out / f'{op}-distributed.json'}")
    finally:
        client.close(timeout=60)
        cluster.close(timeout=60)
    return int(status)


def _graph(name: str, out: Path):
    if name == RMAT:
        return load_graph(name, str(rmat_cached(out / "cache", RmatParams())))
    if name.endswith(".npz"):
        return load_graph(Path(name).stem, name)
    return load_graph(name)


def _measure(op: str, A, graph: str, width: int, client, seed: int, repeat: int, budget: float) -> dict:
    import distributed

    import sparsetir_py as sp

    m, n = A.shape
    record = {"graph": graph, "m": m, "n": n, "nnz": A.nnz, "width": width, "status": "ok"}
    named, ref = operands_and_reference(op, A, width, seed)
    operands = tuple(named.values())

    def values(result):
        return result if op == "spmm" else result.data

    local = getattr(sp.ops, op)
    t0 = time.perf_counter()
    dA = sp.distributed.DistributedMatrix(A, client, timeout=TIMEOUT)
    record["scatter_ms"] = (time.perf_counter() - t0) * 1e3
    record["row_blocks"] = dA.num_row_blocks
    record["block_nnz"] = [int(A.indptr[b1] - A.indptr[b0]) for b0, b1 in zip(dA.row_bounds, dA.row_bounds[1:])]
    try:
        calls = {
            "ops": lambda: local(A, *operands),
            "ops_csr": lambda: local(A, *operands, format="csr"),
            "reuse": lambda: getattr(dA, op)(*operands),
            "reuse_auto": lambda: getattr(dA, op)(*operands, format="auto"),
            "one_shot": lambda: getattr(sp.distributed, op)(A, *operands, client, timeout=TIMEOUT),
        }
        for name, call in calls.items():
            t0 = time.perf_counter()
            check = check_result(values(call()), ref, RTOL)  # also compiles (here, or on the workers) and tunes
            record[f"{name}_first_ms"] = (time.perf_counter() - t0) * 1e3
            record[f"{name}_max_rel_err"] = check.max_rel_err
            if not check.ok:
                record["status"] = "wrong"
                record["message"] = f"{name}: {check.message}"
                return record
        for name, call in calls.items():
            timing = time_calls(call, repeat, budget)
            record[f"{name}_ms"] = timing.median * 1e3
            record[f"{name}_calls"] = len(timing.times)
        # The tasks' own times, from calls of their own (the task stream costs the scheduler a little).
        with distributed.get_task_stream(client) as stream:
            time_calls(calls["reuse"], 5, 0.0, min_repeat=3, warmup=0)
        record["compute_ms"] = _longest_task_per_call(stream.data) * 1e3
        getattr(dA, op)(*operands, format="auto")
        record["formats"] = dA.formats[(op, width)]
        sent = dA.bytes_sent
        getattr(dA, op)(*operands)
        record["client_bytes_per_call"] = dA.bytes_sent - sent
    finally:
        dA.close()
    record["reuse_overhead"] = record["reuse_ms"] / record["ops_ms"]
    record["reuse_auto_overhead"] = record["reuse_auto_ms"] / record["ops_ms"]
    record["speedup_auto_vs_ops"] = record["ops_ms"] / record["reuse_auto_ms"]
    record["one_shot_overhead"] = record["one_shot_ms"] / record["ops_ms"]
    record["bytes_per_call"] = _bytes_per_call(op, A, width, dA.num_row_blocks, len(client.nthreads()))
    return record


def _longest_task_per_call(tasks: list[dict]) -> float:
    """Median over calls of the longest task's compute time (tasks are named per call)."""
    longest: dict[str, float] = {}
    for t in tasks:
        key = str(t["key"])
        call = key.rsplit("-", 3)[0]  # sparsetir-<op>-<call>-<attempt>-<row>-<col>
        compute = sum(s["stop"] - s["start"] for s in t["startstops"] if s["action"] == "compute")
        longest[call] = max(longest.get(call, 0.0), compute)
    return statistics.median(longest.values()) if longest else float("nan")


def _bytes_per_call(op: str, A, width: int, blocks: int, workers: int) -> int:
    """What crosses the network in a reuse call (float32 operands): the broadcast operand to
    every worker holding a block (once from the client, then worker to worker), X's rows once,
    and the result back to the client."""
    m, n = A.shape
    holders = min(blocks, workers)
    if op == "spmm":
        return 4 * (n * width * holders + m * width)
    return 4 * (m * width + n * width * holders + A.nnz)


def _line(r: dict) -> str:
    head = f"  {r['graph']:>10} w={r['width']:<4}"
    if r["status"] != "ok":
        return f"{head} {r['status'].upper()}: {r.get('message', '')}"
    return (
        f"{head} sp.ops {r['ops_ms']:8.2f} ms (csr {r['ops_csr_ms']:.2f}) | reuse {r['reuse_ms']:8.2f} ms "
        f"({r['reuse_overhead']:.2f}x) | reuse auto {r['reuse_auto_ms']:8.2f} ms ({r['reuse_auto_overhead']:.2f}x) | "
        f"one-shot {r['one_shot_ms']:8.2f} ms ({r['one_shot_overhead']:.2f}x) | scatter {r['scatter_ms']:.1f} ms | "
        f"compute {r['compute_ms']:.2f} ms | {r['bytes_per_call'] / 1e6:.1f} MB/call "
        f"({r['client_bytes_per_call'] / 1e6:.1f} MB from the client) | formats {r['formats']}"
    )


def markdown(report: dict) -> str:
    lines = [
        f"# {report['op']} on a LocalCluster of {report['workers']} workers vs single-process sp.ops",
        "",
        f"`{report['command']}` on {report['machine']['cpu']} ({report['machine']['cores']} cores), "
        f"{report['date']}; sp.ops with {report['threads']} threads, each worker "
        f"{report['threads_per_worker']}; load average {report['load_avg_1min']:.2f}.",
        "",
        "| graph | width | sp.ops ms | sp.ops csr ms | reuse ms (x) | reuse auto ms (x) | one-shot ms (x) | "
        "scatter once ms | longest task ms | MB/call (from the client) | formats per block |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        if r["status"] != "ok":
            lines.append(f"| {r['graph']} | {r['width']} | {r['status']}: {r.get('message', '')} |||||| ")
            continue
        lines.append(
            f"| {r['graph']} | {r['width']} | {r['ops_ms']:.2f} | {r['ops_csr_ms']:.2f} | "
            f"{r['reuse_ms']:.2f} ({r['reuse_overhead']:.2f}x) | "
            f"{r['reuse_auto_ms']:.2f} ({r['reuse_auto_overhead']:.2f}x) | "
            f"{r['one_shot_ms']:.2f} ({r['one_shot_overhead']:.2f}x) | {r['scatter_ms']:.1f} | "
            f"{r['compute_ms']:.2f} | {r['bytes_per_call'] / 1e6:.1f} ({r['client_bytes_per_call'] / 1e6:.1f}) | "
            f"{'; '.join(r['formats'])} |"
        )
    lines += [
        "",
        "x = distributed median / sp.ops median (sp.ops: format auto, tuned for the whole matrix). reuse: A",
        "scattered once beforehand, every block in CSR; reuse auto: each block in its own tuned format; one-shot:",
        "A split and scattered by the call. longest task: the slowest block's kernel on its worker (Dask's task",
        "stream). MB/call: the model of `_bytes_per_call` (operands to the workers holding blocks, results back);",
        "from the client: what the client scattered (each operand once; Dask copies it worker to worker).",
        "",
    ]
    return "\n".join(lines)
