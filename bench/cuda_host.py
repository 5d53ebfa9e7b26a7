"""`python -m bench.cuda_host`: host microseconds of a repeated device-resident `sp.ops` call.

    python -m bench.cuda_host                      # cora, width 32; no GPU needed (Numba's simulator)
    python -m bench.cuda_host --profile            # and where each case's time goes (cProfile)
    python -m bench.cuda_host --graph pubmed --width 128 --cases "spmm csr out=" "sddmm csr"

What is timed: `calls` back-to-back calls of one case with the same operands (so every call after
the first runs the prepared call of `ops.device.REPEATS`), the wall time over `calls`; rounds of
every case interleaved (`runtime.timing.time_interleaved`), the median and the fastest round
reported. A is the graph (scipy CSR, float32), the dense operands Numba device arrays of width
`width`; the copies of one call are counted (`to_device`: copies into device memory, `to_host`:
copies out of it, which a call on device operands must not make).

Without a GPU (the default here: the command restarts itself with `NUMBA_ENABLE_CUDASIM=1` when
numba is not in the simulator) the launch itself is stubbed and nothing else:
`FakeCUDAKernel.__getitem__` (the simulator's `kernel[grid, block]`) returns the kernel and
`FakeCUDAKernel.__call__` does nothing, so no thread of a generated kernel or of the runtime's
helper kernels (`runtime.cuda_finite`: gather, take, finiteness flag) runs. On a GPU that is the
one `cuda.core` launch of a prepared `runtime.kernel.Launcher` (its arguments marshalled once),
the part the issue leaves out. Everything before it runs as a user's call does: `sp.ops`'s
front, the prepared call's lookup, the copy of the scipy A's values into their device buffer,
the allocation of a fresh result (`cuda.device_array`), the result's wrapping. The simulator's
device memory is a numpy array, so that copy and allocation cost what numpy's do, not what a
GPU's driver calls do (a synchronous host-to-device copy of `nnz` values, a `cuMemAlloc`).

On a GPU (`numba.cuda.is_available()`, not the simulator) nothing is stubbed unless `--stub-launch`
(then `numba.cuda.dispatcher.launch`, which a direct `Launcher` captures when it is prepared,
does nothing); where cupy is installed the cases also run on a `cupyx.scipy.sparse` A and cupy
operands (nothing moves per call; SDDMM returns a `cupyx.scipy.sparse.csr_matrix`).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import subprocess
import sys
from collections.abc import Callable, Iterator

import numpy as np

#: (name, op, format, with `out=`)
CASES = (
    ("spmm csr out=", "spmm", "csr", True),
    ("spmm csr", "spmm", "csr", False),
    ("sddmm csr", "sddmm", "csr", False),
    ("spmm hyb out=", "spmm", "hyb", True),
    ("sddmm hyb", "sddmm", "hyb", False),
)


@contextlib.contextmanager
def patched(patches: list) -> Iterator[None]:
    """`(owner, name, value)` set for the block, each attribute's own value back after it."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@contextlib.contextmanager
def stubbed_launches(gpu: bool) -> Iterator[None]:
    """Kernel launches that do nothing (see the module docstring): the simulator's
    `FakeCUDAKernel` configuration and call, or on a GPU `numba.cuda.dispatcher.launch` (what a
    direct `Launcher` launches through; it must be prepared inside this block)."""
    if gpu:
        from numba.cuda import dispatcher

        patches = [(dispatcher, "launch", lambda *args, **kwargs: None)]
    else:
        from numba.cuda.simulator import kernel as sim_kernel

        patches = [
            (sim_kernel.FakeCUDAKernel, "__getitem__", lambda self, configuration: self),
            (sim_kernel.FakeCUDAKernel, "__call__", lambda self, *args: None),
        ]
    with patched(patches):
        yield


@contextlib.contextmanager
def counted_copies(counts: dict) -> Iterator[None]:
    """Count the simulator's copies into device memory (`cuda.to_device`, `copy_to_device`, a
    host array written into a device array by `[...] =`) and out of it (`copy_to_host`) in
    `counts`."""
    from numba import cuda
    from numba.cuda.simulator.cudadrv import devicearray

    array = devicearray.FakeCUDAArray

    def counting(fn, what, when=lambda *args: True):
        def wrapped(*args, **kwargs):
            if when(*args):
                counts[what] += 1
            return fn(*args, **kwargs)

        return wrapped

    host_value = lambda self, index, value: isinstance(value, np.ndarray)  # noqa: E731
    patches = [
        (cuda, "to_device", counting(cuda.to_device, "to_device")),
        (array, "copy_to_device", counting(array.copy_to_device, "to_device")),
        (array, "__setitem__", counting(array.__setitem__, "to_device", host_value)),
        (array, "copy_to_host", counting(array.copy_to_host, "to_host")),
    ]
    with patched(patches):
        yield


def operands(graph: str, width: int, kind: str) -> tuple:
    """(A, B, X, out) of one kind: "numba" (a scipy A, Numba device arrays) or "cupy" (a cupyx
    A, cupy arrays)."""
    import sparsetir_py as sp

    A = sp.data.load_matrix(graph).astype(np.float32)
    m, n = A.shape
    rng = np.random.default_rng(0)
    B, X = rng.standard_normal((n, width)).astype(np.float32), rng.standard_normal((m, width)).astype(np.float32)
    if kind == "cupy":
        import cupy
        import cupyx.scipy.sparse

        return cupyx.scipy.sparse.csr_matrix(A), cupy.asarray(B), cupy.asarray(X), cupy.empty((m, width), np.float32)
    from numba import cuda

    return A, cuda.to_device(B), cuda.to_device(X), cuda.device_array((m, width), np.float32)


def case_call(case: tuple, A, B, X, out) -> Callable[[], object]:
    import sparsetir_py as sp

    _, op, fmt, with_out = case
    params = {"num_col_parts": 1} if fmt == "hyb" else {}
    if op == "spmm":
        outs = {"out": out} if with_out else {}
        return lambda: sp.ops.spmm(A, B, format=fmt, target="cuda", **outs, **params)
    return lambda: sp.ops.sddmm(A, X, B, format=fmt, target="cuda", **params)


def measure(graph: str = "cora", width: int = 32, calls: int = 200, budget: float = 2.0, cases=CASES,
            kind: str = "numba", gpu: bool = False, stub: bool = True, profile: int = 0) -> list[dict]:  # fmt: skip
    """Host us per call of each case (see the module docstring): a dict per case with the median
    and the fastest round's us per call, the copies of one call (simulator only) and, where
    `profile` > 0, the cProfile table (that many functions, by own time) of `calls` calls."""
    from sparsetir_py.runtime.timing import time_interleaved

    results = {case[0]: {"case": case[0]} for case in cases}
    batches = {}
    with stubbed_launches(gpu) if stub else contextlib.nullcontext():
        if not gpu:  # copies counted on operands of their own (a prepared call keeps the copy functions)
            counts = {"to_device": 0, "to_host": 0}
            with counted_copies(counts):
                counted = operands(graph, width, kind)
                for case in cases:
                    fn = case_call(case, *counted)
                    fn(), fn()
                    counts.update(to_device=0, to_host=0)
                    fn()
                    results[case[0]].update(counts)
        A, B, X, out = operands(graph, width, kind)
        for case in cases:
            fn = case_call(case, A, B, X, out)
            for _ in range(3):  # the first prepares the call (under the stub: it captures it)
                fn()
            batches[case[0]] = _batch(fn, calls)
        times = time_interleaved(batches, budget=budget, min_rounds=5, warmup=1)
        for name, seconds in times.items():
            per_call = sorted(s / calls * 1e6 for s in seconds)
            results[name].update(us_per_call=round(per_call[len(per_call) // 2], 2), min_us=round(per_call[0], 2))
        if profile:
            for name, batch in batches.items():
                results[name]["profile"] = _profiled(batch, calls, profile)
    return list(results.values())


def _batch(fn: Callable[[], object], calls: int) -> Callable[[], None]:
    def batch() -> None:
        for _ in range(calls):
            fn()

    return batch


def _profiled(batch: Callable[[], None], calls: int, top: int) -> str:
    """The `top` functions by own time over one batch of `calls` calls: per call, their calls,
    own and cumulative microseconds (cProfile's own overhead included: the sum of the own times
    is about twice the unprofiled call)."""
    profiler = cProfile.Profile()
    profiler.enable()
    batch()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    total = sum(entry[2] for entry in stats.values()) / calls * 1e6
    lines = [f"  calls/call  own us  cum us  function (own us of all: {total:.1f})"]
    for (path, line, name), (_, ncalls, own, cumulative, _) in rows:
        where = _short(f"{path}:{line}") if line else path
        lines.append(
            f"  {ncalls / calls:10.1f}  {own / calls * 1e6:6.2f}  {cumulative / calls * 1e6:6.2f}  {name} ({where})"
        )
    return "\n".join(lines)


def _short(path: str) -> str:
    """`path` from its package on (the site-packages or checkout prefix cut)."""
    for marker in ("site-packages/", os.getcwd() + "/"):
        if marker in path:
            return path.partition(marker)[2]
    return path


def table(results: list[dict]) -> str:
    lines = ["| case | host us/call (median) | fastest round | to_device | to_host |", "|---|---|---|---|---|"]
    for r in results:
        copies = f"{r['to_device']} | {r['to_host']}" if "to_device" in r else "- | -"
        lines.append(f"| {r['case']} | {r['us_per_call']:.2f} | {r['min_us']:.2f} | {copies} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cuda_host", description=__doc__.splitlines()[0])
    p.add_argument("--graph", default="cora", help="a shipped matrix of sparsetir_py.data")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--calls", type=int, default=200, help="calls per timed round")
    p.add_argument("--budget", type=float, default=2.0, help="seconds of timed rounds, all cases together")
    p.add_argument("--cases", nargs="+", default=[c[0] for c in CASES], choices=[c[0] for c in CASES])
    p.add_argument("--profile", type=int, nargs="?", const=15, default=0, help="print the top N functions per case")
    p.add_argument("--stub-launch", action="store_true", help="on a GPU: stub the launch too (always in the simulator)")
    args = p.parse_args(argv)
    from numba import config

    simulator = bool(config.ENABLE_CUDASIM)
    gpu = False
    if not simulator:
        from numba import cuda

        gpu = cuda.is_available()
    if not simulator and not gpu:
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
        rest = sys.argv[1:] if argv is None else argv
        return subprocess.run([sys.executable, "-m", "bench.cuda_host", *rest], env=env).returncode
    cases = [c for c in CASES if c[0] in args.cases]
    kinds = ["numba"]
    if gpu:
        try:
            import cupy  # noqa: F401
            import cupyx.scipy.sparse  # noqa: F401

            kinds.append("cupy")
        except ImportError:
            pass
    stub = not gpu or args.stub_launch
    for kind in kinds:
        results = measure(args.graph, args.width, args.calls, args.budget, cases, kind, gpu, stub, args.profile)
        where = "a GPU" if gpu else "Numba's CUDA simulator"
        what = "kernel launches stubbed" if stub else "kernel launches real (asynchronous)"
        operands_are = "a cupyx A, cupy operands" if kind == "cupy" else "a scipy A, Numba device arrays"
        print(f"sp.ops, {operands_are}, {where}, {what}; {args.graph} width {args.width}, {args.calls} calls a round")
        print(table(results))
        for r in results:
            if "profile" in r:
                print(f"\n{r['case']} ({args.calls} calls, cProfile):\n{r['profile']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
