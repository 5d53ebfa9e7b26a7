"""The worker side of every job: `python -m bench.worker` reads a JSON job on stdin and runs it.

`JOBS` maps a job's `kind` to what runs it: the STREAM triad (`stream`), one library on one graph
at several widths (`group`), or ours and baselines interleaved in this one process (`paired`,
for `bench.paired`). Separate processes keep libraries from sharing threading runtimes (Numba's
GNU OpenMP, MKL's and torch's OpenMP) and let each pin its own thread count from the environment
the parent set.

Events go to the parent as `bench.protocol` writes them. Per width a `group` reports `ok`
(checked, then timed), `wrong` (the check against scipy failed: not timed), or `error` (an
exception, with its message); a `paired` job reports `result`, `wrong` or `error`.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import numpy as np

from .protocol import Emit, emit_stdout, read_job


def environment(threads_of: dict[str, int | str]) -> dict:
    """What the worker runs with: thread counts, relevant variables, BLAS kernels (threadpoolctl)."""
    info: dict = {
        "pid": os.getpid(),
        "threads": threads_of,
        "env": {
            k: os.environ.get(k)
            for k in (
                "OMP_NUM_THREADS",
                "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS",
                "OMP_WAIT_POLICY",
                "OPENBLAS_CORETYPE",
                "OPENBLAS_L2_SIZE",
            )
        },
    }
    try:
        from threadpoolctl import threadpool_info

        info["threadpools"] = [
            {k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version", "architecture")}
            for p in threadpool_info()
        ]
    except ImportError:
        info["threadpools"] = "threadpoolctl not installed"
    return info


def run_stream(job: dict, emit: Emit) -> None:
    """The STREAM triad with the job's array size and number of trials."""
    import numba

    from .stream import stream_triad

    numba.set_num_threads(int(job["threads"]))
    emit({"event": "stream", "stream": stream_triad(int(job["n"]), int(job["trials"]))})


def run_group(job: dict, emit: Emit) -> None:
    """Check and time one library on one graph, for every width of the job."""
    from .graphs import load_graph
    from .libraries import LIBRARIES
    from .measure import check_result, operands_and_reference, time_calls

    op, lib = job["op"], LIBRARIES[job["library"]]
    lib.set_threads(int(job["threads"]))
    emit({"event": "env", "version": lib.version(), "environment": environment(_thread_counts(lib))})
    graph = job["graph"]
    A = load_graph(graph["name"], graph.get("path"))
    m, n = A.shape
    seed = int(job["seed"])
    for width in job["widths"]:
        result = {
            "event": "result",
            "library": lib.name,
            "graph": graph["name"],
            "width": width,
            "m": m,
            "n": n,
            "nnz": int(A.nnz),
            "index_bytes": A.indices.dtype.itemsize,
            "touched": int(np.count_nonzero(np.bincount(A.indices, minlength=n))) if A.nnz else 0,
        }
        try:
            operands, ref = operands_and_reference(op, A, width, seed)
            ours = {"schedule": job.get("schedule"), "format": job.get("format", "csr"),
                    "format_params": job.get("format_params") or {}} if lib.ours else {}  # fmt: skip
            prepared = lib.prepare(op, A, operands, **ours)
            if prepared.convert_s is not None:
                result["convert_s"] = prepared.convert_s
            if prepared.tune_s is not None:
                result["tune_s"], result["chosen"] = prepared.tune_s, prepared.chosen
            result["col_parts"] = prepared.col_parts
            if prepared.traffic is not None:
                result["traffic"] = prepared.traffic
            t0 = time.perf_counter()
            raw = prepared.fn()  # the first call compiles (ours) or initialises (baselines)
            if prepared.sync:
                prepared.sync()
            result["first_call_s"] = time.perf_counter() - t0
            check = check_result(prepared.extract(raw), ref, rtol=float(job["rtol"]))
            del raw, ref
            result["max_rel_err"] = check.max_rel_err
            if not check.ok:
                emit({**result, "status": "wrong", "message": check.message})
                continue
            timing = time_calls(
                prepared.fn,
                repeat=int(job["repeat"]),
                budget=float(job["budget"]),
                min_repeat=int(job["min_repeat"]),
                sync=prepared.sync,
            )
            emit({**result, "status": "ok", "times_s": timing.times, "median_s": timing.median})
        except Exception as exc:  # reported, and the next width still runs
            emit({**result, "status": "error", "message": _short(exc)})


def _thread_counts(lib) -> dict[str, int | str]:
    counts: dict[str, int | str] = {}
    if "numba" in sys.modules:
        counts["numba"] = sys.modules["numba"].get_num_threads()
    if "torch" in sys.modules:
        counts["torch"] = sys.modules["torch"].get_num_threads()
    if "sparse_dot_mkl" in sys.modules:
        counts["mkl"] = sys.modules["sparse_dot_mkl"].mkl_get_max_threads()
    if "graphblas" in sys.modules:
        counts["graphblas"] = sys.modules["graphblas"].ss.config["nthreads"]
    return counts


def _short(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}"[:2000] + at


def run_paired(job: dict, emit: Emit) -> None:
    """Every width of one graph, ours against each baseline, calls interleaved (`bench.paired`)."""
    from .graphs import load_graph
    from .libraries import LIBRARIES, OURS
    from .measure import check_result, interleaved, operands_and_reference

    op, threads = job["op"], int(job["threads"])
    ours = LIBRARIES[OURS["cpu"]]
    libs = {name: LIBRARIES[name] for name in job["baselines"]}
    for lib in (ours, *libs.values()):
        lib.set_threads(threads)
    graph = job["graph"]
    A = load_graph(graph["name"], graph.get("path"))
    seed = int(job["seed"])
    for width in job["widths"]:
        where = {"graph": graph["name"], "width": width}
        try:
            operands, ref = operands_and_reference(op, A, width, seed)
            prepared = {"ours": ours.prepare(op, A, operands, format="auto")}
            prepared.update({name: lib.prepare(op, A, operands) for name, lib in libs.items()})
            for name, p in prepared.items():
                check = check_result(p.extract(p.fn()), ref, rtol=float(job["rtol"]))
                if not check.ok:
                    raise _Wrong(f"{name}: {check.message}")
            del ref
            calls = {k: p.fn for k, p in prepared.items()}
            medians, rounds = interleaved(calls, int(job["repeat"]), float(job["budget"]))
        except _Wrong as e:
            emit({"event": "wrong", **where, "message": str(e)})
            continue
        except Exception as e:  # reported; the next width still runs
            emit({"event": "error", **where, "message": f"{type(e).__name__}: {e}"[:2000]})
            continue
        emit({
            "event": "result", **where, "nnz": int(A.nnz), "rounds": rounds, "ours_ms": medians["ours"] * 1e3,
            "chosen": prepared["ours"].chosen,
            "baseline_ms": {b: medians[b] * 1e3 for b in libs},
            "ratios": {b: medians[b] / medians["ours"] for b in libs},
        })  # fmt: skip


class _Wrong(Exception):
    """A result that failed its check against scipy."""


#: A job's `kind` -> what runs it in the worker.
JOBS = {"stream": run_stream, "group": run_group, "paired": run_paired}


def main() -> int:
    job = read_job(sys.stdin)
    np.seterr(all="ignore")
    JOBS[job["kind"]](job, emit_stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
