"""Run a benchmark: STREAM, then every (graph, library) group in its own worker process.

The parent never imports a benchmarked library. It builds each worker's environment (thread
counts, `OMP_WAIT_POLICY=passive`, `MKL_RT`, OpenBLAS variables removed), feeds it a JSON job,
reads its events, and shows progress. Groups run graph by graph, every library on a graph one
after the other, so drifts in machine load spread over all libraries alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .graphs import RmatParams, graph_spec
from .libraries import BASELINES, LIBRARIES, OURS, cuda_missing
from .measure import RTOL
from .protocol import decode, write_job

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder holding `bench/`
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


@dataclass
class Config:
    """Everything a run depends on (the CLI's options)."""

    op: str
    graphs: Sequence[str]
    widths: Sequence[int]
    baselines: Sequence[str]
    targets: Sequence[str] = ("cpu",)
    repeat: int = 30
    min_repeat: int = 3
    budget: float = 1.0  # seconds of timed calls per measurement, after the warm-up
    rounds: int = 1  # sweeps over every group; the fastest round's median is kept
    schedule: str | None = None  # a shipped schedule of ours, by name (schedules.<op>.SCHEDULES)
    format: str = "auto"  # the format ours decomposes A into (sp.ops format=), or a rule file's path
    format_params: dict = field(default_factory=dict)
    threads: int = 2
    seed: int = 0
    rtol: float = RTOL
    stream_n: int = 1 << 25  # 3 float64 arrays of 256 MiB: far larger than any cache
    stream_trials: int = 10
    out: Path = DEFAULT_OUT
    keep_openblas_env: bool = False
    omp_wait_policy: str = "passive"  # docs/design.md §5; "active" spins (faster wake-up, bad on a shared machine)
    progress: bool = True
    rmat: RmatParams = field(default_factory=RmatParams)
    worker_timeout: float = 1800.0


def worker_env(
    threads: int, extra: dict[str, str], keep_openblas_env: bool = False, omp_wait_policy: str = "passive"
) -> dict[str, str]:
    """The environment of a worker: the parent's, with pinned threads for every runtime."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    # Passive: idle OpenMP threads sleep instead of spinning on the 2 cores (costs a wake-up per call).
    env["OMP_WAIT_POLICY"] = omp_wait_policy
    if not keep_openblas_env:
        for var in OPENBLAS_VARS:  # they select a slower OpenBLAS kernel for numpy (env README)
            env.pop(var, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_worker(job: dict, env: dict[str, str], timeout: float, command: Sequence[str] | None = None) -> Iterator[dict]:
    """Start a worker with `job`, yield its events as they come, then a final `exit` event.

    The worker's stderr goes to a temporary file (a pipe could fill up and block it); a worker
    still running after `timeout` seconds is killed. `command` replaces `python -m bench.worker`.
    """
    with tempfile.TemporaryFile(mode="w+") as stderr:
        proc = subprocess.Popen(
            list(command or [sys.executable, "-m", "bench.worker"]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=str(PACKAGE_ROOT),
        )
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            assert proc.stdin and proc.stdout
            write_job(job, proc.stdin)
            for line in proc.stdout:
                event = decode(line)
                if event is not None:
                    yield event
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:  # the consumer stopped early
                proc.kill()
                proc.wait()
        stderr.seek(0)
        tail = stderr.read()[-3000:]
    if timed_out.is_set():
        tail += f"\n(worker killed after {timeout:g} s)"
    yield {"event": "exit", "code": code, "stderr_tail": tail}


@dataclass
class Plan:
    """Which libraries run, and why the others do not."""

    libraries: list[str]
    notes: dict[str, str]


def plan(config: Config) -> Plan:
    """Ours per target plus the requested baselines that exist for the targets and the op."""
    libraries, notes = [], {}
    for target in config.targets:
        names = [OURS[target], *(b for b in config.baselines if b in BASELINES[target])]
        for name in names:
            lib = LIBRARIES[name]
            if config.op not in lib.ops:
                notes[name] = f"no {config.op.upper()} in this library"
                continue
            reason = lib.missing()
            if reason:
                notes[name] = f"skipped: {reason}"
                continue
            libraries.append(name)
    for name in config.baselines:
        # A baseline of a target this run does not use (cusparse with --target cpu, or on a machine
        # without a GPU) is listed as skipped, not dropped silently.
        if name in notes or any(name in BASELINES[t] for t in config.targets):
            continue
        target = next(t for t, names in BASELINES.items() if name in names)
        why = cuda_missing() if target == "cuda" else None
        notes[name] = f"skipped: runs on the {target} target only" + (
            f" ({why})" if why else ", which this run does not use"
        )
    return Plan(libraries, notes)


def run(config: Config, stream: dict | None = None) -> dict:
    """Run the benchmark and return the raw record (see `bench.report` for what is derived).

    `stream` is a STREAM result of this same run to reuse (`python -m bench all` measures it once).
    """
    p = plan(config)
    graph_specs = []
    for name in config.graphs:
        graph_specs.append(graph_spec(name, Path(config.out) / "cache", config.rmat))
    total = int(stream is None) + config.rounds * len(graph_specs) * len(config.widths) * len(p.libraries)
    record: dict = {"stream": None, "libraries": {}, "results": [], "notes": dict(p.notes), "load": []}
    for name in p.libraries:
        record["libraries"][name] = {"description": LIBRARIES[name].description, "ours": LIBRARIES[name].ours}
    with tqdm(total=total, desc=f"bench {config.op}", unit="run", disable=not config.progress, file=sys.stderr) as bar:
        if stream is None:
            bar.set_postfix_str("STREAM triad")
            stream = measure_stream(config)
            bar.update(1)
        record["stream"] = stream
        merged: dict[tuple, dict] = {}
        for round_ in range(config.rounds):
            for spec in graph_specs:
                record["load"].append({"round": round_, "graph": spec["name"], "loadavg": list(os.getloadavg())})
                for name in p.libraries:
                    bar.set_postfix_str(f"{spec['name']} / {name}")
                    for result in _group(config, name, spec, record):
                        key = (name, spec["name"], result["width"])
                        merged[key] = merge_rounds(merged.get(key), result)
                        bar.update(1)
    record["results"] = list(merged.values())
    return record


def merge_rounds(previous: dict | None, new: dict) -> dict:
    """Combine two rounds of one measurement: a wrong result sticks; otherwise the faster ok round
    is kept (the lowest median is the least disturbed by other load), with every round's median
    and the largest one-time costs (tuning, conversion, first call) of any round."""
    if previous is None:
        merged = dict(new)
        if new.get("status") == "ok":
            merged["round_medians_s"] = [new["median_s"]]
        return merged
    if previous.get("status") == "wrong":
        return previous
    if new.get("status") == "wrong" or previous.get("status") != "ok":
        return merge_rounds(None, new) if new.get("status") in ("ok", "wrong") else previous
    if new.get("status") != "ok":
        return {**previous, "round_errors": [*previous.get("round_errors", []), new.get("message", "")]}
    medians = [*previous["round_medians_s"], new["median_s"]]
    best = new if new["median_s"] < previous["median_s"] else previous
    merged = {**best, "round_medians_s": medians}
    # One-time costs belong to the first round (later rounds find the tuning and conversion
    # cached): keep the largest seen, so that a cached round's 0 does not hide them.
    for key in ("tune_s", "convert_s", "first_call_s"):
        seen = [r[key] for r in (previous, new) if r.get(key) is not None]
        if seen:
            merged[key] = max(seen)
    return merged


def measure_stream(config: Config) -> dict:
    """The STREAM triad in its own worker, with the run's thread count and environment."""
    job = {"kind": "stream", "n": config.stream_n, "trials": config.stream_trials, "threads": config.threads}
    env = worker_env(config.threads, {}, config.keep_openblas_env, config.omp_wait_policy)
    stream, failure = None, ""
    for event in run_worker(job, env, config.worker_timeout):
        if event["event"] == "stream":
            stream = event["stream"]
        elif event["event"] == "exit" and event["code"] != 0:
            failure = event["stderr_tail"]
    if stream is None:
        raise RuntimeError(f"the STREAM worker failed:\n{failure}")
    return stream


def _group(config: Config, name: str, spec: dict, record: dict) -> Iterator[dict]:
    """Results of one library on one graph; widths the worker never reported become errors."""
    lib = LIBRARIES[name]
    job = {
        "kind": "group",
        "op": config.op,
        "library": name,
        "graph": spec,
        "widths": list(config.widths),
        "repeat": config.repeat,
        "min_repeat": config.min_repeat,
        "budget": config.budget,
        "threads": config.threads,
        "seed": config.seed,
        "rtol": config.rtol,
        "schedule": config.schedule,
        "format": config.format,
        "format_params": dict(config.format_params),
    }
    env = worker_env(config.threads, lib.env(), config.keep_openblas_env, config.omp_wait_policy)
    seen = set()
    for event in run_worker(job, env, config.worker_timeout):
        if event["event"] == "env":
            entry = record["libraries"][name]
            entry.setdefault("version", event["version"])
            entry.setdefault("environment", event["environment"])
            if event["version"] not in entry.setdefault("versions", [event["version"]]):
                entry["versions"].append(event["version"])  # the code changed under a running benchmark
        elif event["event"] == "result":
            seen.add(event["width"])
            yield event
        elif event["event"] == "exit":
            for width in config.widths:
                if width not in seen:
                    message = f"worker exited with code {event['code']}: {event['stderr_tail'][-1500:]}"
                    yield {
                        "event": "result",
                        "library": name,
                        "graph": spec["name"],
                        "width": width,
                        "status": "error",
                        "message": message,
                    }
