"""The implementations the suite times: sparsetir_py (ours) and the baselines.

Each `Library` says whether it can run here (`missing()`, checked in the parent without importing
the library), what its worker process needs in its environment (`env()`), how to pin its thread
count (`set_threads()`, in the worker) and how to prepare one operation (`prepare()`): a
zero-argument callable that is timed, and an `extract` that turns the callable's result into a
numpy array comparable with the reference (SpMM: the dense product; SDDMM: one value per stored
entry of A, in A's storage order, after checking the result has A's structure).

Conversions to a library's own formats happen in `prepare`, outside the timed call.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import scipy.sparse

from .measure import row_ids, sampled_dot


@dataclass
class Prepared:
    """One operation ready to time: `fn()` runs it, `extract(fn())` gives a comparable array."""

    fn: Callable[[], object]
    extract: Callable[[object], np.ndarray]
    sync: Callable[[], None] | None = None  # ends an asynchronous call (device synchronisation)
    note: str = ""
    convert_s: float | None = None  # seconds to convert A to the format (ours, format != csr)
    tune_s: float | None = None  # seconds `sp.tune` searched (ours, format "auto"; 0 when cached)
    chosen: str | None = None  # the configuration `sp.tune` chose (format "auto")
    col_parts: int = 1  # column partitions of the format that runs (the roofline's reuse)
    traffic: dict | None = None  # the format's traffic model (`measure.Traffic` fields; None: CSR's)


class StructureMismatch(ValueError):
    """An SDDMM result whose stored entries are not A's."""


def same_structure(A: scipy.sparse.csr_matrix, indptr, indices, what: str) -> None:
    """Raise `StructureMismatch` unless `indptr`/`indices` equal A's."""
    if not (np.array_equal(np.asarray(indptr), A.indptr) and np.array_equal(np.asarray(indices), A.indices)):
        raise StructureMismatch(f"{what}: the result's stored entries are not A's")


@dataclass
class Library:
    """An implementation of SpMM and/or SDDMM, run in its own worker process."""

    name: str
    description: str
    target: str = "cpu"  # "cpu" or "cuda"
    ops: tuple[str, ...] = ("spmm", "sddmm")
    ours: bool = False
    modules: tuple[str, ...] = ()  # importable modules it needs (checked without importing them)
    notes: dict[str, str] = field(default_factory=dict)  # per op: how it is computed

    def missing(self) -> str | None:
        """Why this library cannot run here (a short note), or None when it can."""
        for module in self.modules:
            if importlib.util.find_spec(module) is None:
                return f"not installed (no module `{module}`; `pip install -e .[bench]`)"
        if self.target == "cuda":
            return cuda_missing()
        return None

    def env(self) -> dict[str, str]:
        """Extra environment variables of the worker process."""
        return {}

    def set_threads(self, threads: int) -> None:
        """Pin the library's thread count (called in the worker after `env()` took effect)."""

    def version(self) -> str:
        return ""

    def prepare(
        self, op: str, A: scipy.sparse.csr_matrix, operands: dict[str, np.ndarray], schedule: str | None = None
    ) -> Prepared:
        """Convert the inputs to the library's formats and return the call to time. `schedule`
        names one of the project's shipped schedules (ours only; None: the default)."""
        raise NotImplementedError


# -------------------------------------------------------------------- ours
class Ours(Library):
    """`sp.ops.spmm` / `sp.ops.sddmm` with the default schedules (CPU), as a user calls them."""

    def set_threads(self, threads: int) -> None:
        import numba

        numba.set_num_threads(threads)

    def version(self) -> str:
        import sparsetir_py

        return getattr(sparsetir_py, "__version__", "") or _git_revision()

    def prepare(self, op, A, operands, schedule=None, format="csr", format_params=None):
        import sparsetir_py as sp

        params = dict(format_params or {})
        fmt, convert_s, tune_s, chosen = format, None, None, None
        if format == "auto":
            # The search alone, timed once (its result is cached: every later call looks it up).
            width = (operands["B"] if op == "spmm" else operands["X"]).shape[1]
            t0 = time.perf_counter()
            result = getattr(sp.tune, op)(A, width, progress=False)
            tune_s = 0.0 if result.cached else time.perf_counter() - t0
            chosen = result.table.winner.label
            format, schedule, params = result.format, result.schedule, dict(result.params)
            fmt = format
        if format != "csr":
            import format_rules

            module = format_rules.SHIPPED.get(format) or format_rules.load(format)
            fmt = module
            # The conversion alone, timed once (sp.ops caches it per structure afterwards).
            t0 = time.perf_counter()
            module.convert(A, **{k: v for k, v in params.items()})
            convert_s = time.perf_counter() - t0
        parts = int(params.get("num_col_parts", 1)) if format == "hyb" else 1
        traffic = None if format == "csr" else format_traffic(op, A, fmt, params, format == "bsr")
        facts = dict(convert_s=convert_s, tune_s=tune_s, chosen=chosen, col_parts=parts, traffic=traffic)
        if op == "spmm":
            B = operands["B"]
            call = lambda: sp.ops.spmm(A, B, format=fmt, target="cpu", schedule=schedule, **params)  # noqa: E731
            return Prepared(call, np.asarray, **facts)
        X, Y = operands["X"], operands["Y"]

        def extract(S):
            same_structure(A, S.indptr, S.indices, "sp.ops.sddmm")
            return S.data

        call = lambda: sp.ops.sddmm(A, X, Y, format=fmt, target="cpu", schedule=schedule, **params)  # noqa: E731
        return Prepared(call, extract, **facts)


def format_traffic(op: str, A, module, params: dict, blocks: bool) -> dict:
    """The traffic model (`measure.Traffic`) of A in a decomposed format: its parts' slots
    (padding included) and rows, from `sp.format.decompose` (outside any timed call). `blocks`:
    the format stores `block_size` x `block_size` blocks (BSR; its parts span whole block rows)."""
    import dataclasses

    import sparsetir_py as sp

    from .measure import Traffic

    d = sp.format.decompose(A, module, **params)
    b = int(params.get("block_size", 1)) if blocks else 1
    if b > 1:  # one BSR part over every block row
        parts = [(p.slots, -(-A.shape[0] // b) * b) for p in d.parts]
        return dataclasses.asdict(Traffic.of_parts(op, parts, b))
    written = np.zeros(A.shape[0], bool)
    parts = []
    for p in d.parts:
        mine = np.diff(p.matrix.indptr) > 0
        parts.append((p.slots, int(mine.sum()), int((mine & written).sum())))
        written |= mine
    return dataclasses.asdict(Traffic.of_parts(op, parts))


class OursCUDA(Library):
    """The same scripts and default CUDA schedules, built with `sp.compile(..., "cuda")` and run
    on device-resident arrays (Numba device arrays), so no host transfer is timed."""

    def set_threads(self, threads: int) -> None:
        import numba

        numba.set_num_threads(threads)

    def version(self) -> str:
        return _git_revision()

    def prepare(self, op, A, operands, schedule=None, format="csr", format_params=None):
        if format != "csr":
            return self._through_ops(op, A, operands, schedule, format, dict(format_params or {}))
        from numba import cuda

        import sparsetir_py as sp
        from schedules import sddmm as sddmm_schedules
        from schedules import spmm as spmm_schedules

        module = spmm_schedules if op == "spmm" else sddmm_schedules
        fn = module.SCHEDULES[schedule] if schedule else module.DEFAULT["cuda"]
        m, n = A.shape
        width = next(iter(operands.values())).shape[1]
        common = {
            "a": cuda.to_device(A.data),
            "indptr": cuda.to_device(A.indptr),
            "indices": cuda.to_device(A.indices),
            "m": m,
            "n": n,
            "nnz": A.nnz,
        }
        if op == "spmm":
            script = sp.ops.spmm_script("int32", "float32")
            kernel = sp.compile(script, "cuda", schedule=fn, specialize={"feat": width})
            out = cuda.device_array((m, width), dtype=np.float32)
            args = {**common, "b": cuda.to_device(operands["B"]), "c": out}
        else:
            script = sp.ops.sddmm_script("int32", "float32")
            kernel = sp.compile(script, "cuda", schedule=fn, specialize={"feat": width})
            out = cuda.device_array(A.nnz, dtype=np.float32)
            args = {**common, "x": cuda.to_device(operands["X"]), "y": cuda.to_device(operands["Y"]), "c": out}
        if "feat" in kernel.parameters:
            args["feat"] = width
        kernel(**args)  # checks the structure once
        launch = kernel.launcher(**args, check_structure=False)  # then launches with O(1) host work
        return Prepared(
            lambda: launch() or out,
            lambda result: result.copy_to_host(),
            sync=cuda.synchronize,
        )

    def _through_ops(self, op, A, operands, schedule, format, params) -> Prepared:
        """A format other than csr (`auto`, `hyb`, `ell`, `bsr`, a rule file): `sp.ops` on Numba
        device arrays for the dense operands (A's structure, or its parts', go to the device once;
        its values per call)."""
        from numba import cuda

        import sparsetir_py as sp

        if format != "auto" and format != "csr":
            import format_rules

            format = format_rules.SHIPPED.get(format) or format_rules.load(format)
        if op == "spmm":
            B = cuda.to_device(operands["B"])
            out = cuda.device_array((A.shape[0], B.shape[1]), np.float32)
            call = lambda: sp.ops.spmm(A, B, format=format, target="cuda", schedule=schedule, out=out, **params)  # noqa: E731
        else:
            X, Y = cuda.to_device(operands["X"]), cuda.to_device(operands["Y"])
            call = lambda: sp.ops.sddmm(A, X, Y, format=format, target="cuda", schedule=schedule, **params)  # noqa: E731
        call()  # compiles, converts and checks once
        return Prepared(call, lambda result: result.copy_to_host(), sync=cuda.synchronize)


# -------------------------------------------------------------------- baselines
class Scipy(Library):
    def version(self) -> str:
        return scipy.__version__

    def prepare(self, op, A, operands, schedule=None):
        if op == "spmm":
            B = operands["B"]
            return Prepared(lambda: A @ B, np.asarray)
        X, Y = operands["X"], operands["Y"]
        rows = row_ids(A)  # structure only, like a CSR -> COO conversion done once
        return Prepared(lambda: A.data * sampled_dot(A, X, Y, rows=rows), np.asarray)


class MKL(Library):
    def missing(self) -> str | None:
        reason = super().missing()
        if reason is None and mkl_rt() is None:
            reason = f"the `mkl` wheel is not installed (no libmkl_rt.so.* in {Path(sys.prefix) / 'lib'})"
        return reason

    def env(self) -> dict[str, str]:
        return {"MKL_RT": str(mkl_rt())}

    def set_threads(self, threads: int) -> None:
        import sparse_dot_mkl

        sparse_dot_mkl.mkl_set_num_threads(threads)

    def version(self) -> str:
        import sparse_dot_mkl

        return f"sparse_dot_mkl {_dist_version('sparse_dot_mkl')}, {sparse_dot_mkl.mkl_get_version_string().strip()}"

    def prepare(self, op, A, operands, schedule=None):
        from sparse_dot_mkl import dot_product_mkl

        B = operands["B"]
        return Prepared(lambda: dot_product_mkl(A, B), np.asarray)


class Torch(Library):
    def set_threads(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)

    def version(self) -> str:
        import torch

        return torch.__version__

    def prepare(self, op, A, operands, schedule=None):
        import torch

        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        crow = torch.from_numpy(A.indptr)
        col = torch.from_numpy(A.indices)
        At = torch.sparse_csr_tensor(crow, col, torch.from_numpy(A.data), size=A.shape)
        if op == "spmm":
            Bt = torch.from_numpy(operands["B"])
            return Prepared(lambda: torch.sparse.mm(At, Bt), lambda C: C.numpy())
        Xt, Yt = torch.from_numpy(operands["X"]), torch.from_numpy(operands["Y"])

        def extract(S):
            same_structure(A, S.crow_indices(), S.col_indices(), "torch.sparse.sampled_addmm")
            # sampled_addmm samples X @ Y.T at A's entries but ignores A's values: multiply here,
            # outside the timed call (this favours torch by nnz multiplications).
            return S.values().numpy() * A.data

        # beta=0: the input's values are not added; Yt.T is a view, so Y's rows stay contiguous.
        return Prepared(lambda: torch.sparse.sampled_addmm(At, Xt, Yt.T, beta=0.0, alpha=1.0), extract)


class GraphBLAS(Library):
    def set_threads(self, threads: int) -> None:
        import graphblas as gb

        gb.init("suitesparse", blocking=True)
        gb.ss.config["nthreads"] = threads

    def version(self) -> str:
        import graphblas as gb

        return f"python-graphblas {gb.__version__}, SuiteSparse:GraphBLAS {_dist_version('suitesparse-graphblas')}"

    def prepare(self, op, A, operands, schedule=None):
        import graphblas as gb

        Ag = gb.io.from_scipy_sparse(A)
        plus_times = gb.semiring.plus_times
        if op == "spmm":
            Bg = gb.Matrix.from_dense(operands["B"])
            return Prepared(lambda: Ag.mxm(Bg, plus_times).new(), lambda C: C.to_dense(fill_value=0))
        Xg, Yg = gb.Matrix.from_dense(operands["X"]), gb.Matrix.from_dense(operands["Y"])

        def run():
            S = Xg.mxm(Yg.T, plus_times).new(mask=Ag.S)  # dot products only at A's entries
            return S.ewise_mult(Ag, gb.binary.times).new()

        def extract(S):
            csr = gb.io.to_scipy_sparse(S, format="csr")
            csr.sort_indices()
            same_structure(A, csr.indptr, csr.indices, "GraphBLAS masked mxm")
            return csr.data

        return Prepared(run, extract)


class Cupy(Library):
    def version(self) -> str:
        import cupy

        return f"cupy {cupy.__version__}"

    def prepare(self, op, A, operands, schedule=None):
        import cupy as cp
        import cupyx.scipy.sparse

        Ac = cupyx.scipy.sparse.csr_matrix(A)
        sync = cp.cuda.Device().synchronize
        if op == "spmm":
            Bc = cp.asarray(operands["B"])
            return Prepared(lambda: Ac @ Bc, lambda C: cp.asnumpy(C), sync=sync)
        Xc, Yc = cp.asarray(operands["X"]), cp.asarray(operands["Y"])
        rows, cols, data = cp.asarray(row_ids(A)), Ac.indices, Ac.data
        step = max(1, (1 << 24) // Xc.shape[1])

        def run():
            out = cp.empty(A.nnz, dtype=cp.float32)
            for lo in range(0, A.nnz, step):
                hi = min(A.nnz, lo + step)
                out[lo:hi] = (Xc[rows[lo:hi]] * Yc[cols[lo:hi]]).sum(axis=1)
            return out * data

        return Prepared(run, lambda S: cp.asnumpy(S), sync=sync)


# -------------------------------------------------------------------- helpers
def mkl_rt() -> Path | None:
    """The venv's `libmkl_rt.so.*` (from the `mkl` wheel), which `sparse_dot_mkl` loads via MKL_RT."""
    lib = Path(sys.prefix) / "lib"
    found = sorted(lib.glob("libmkl_rt.so.*")) if lib.is_dir() else []
    return found[-1] if found else None


@cache
def cuda_missing() -> str | None:
    """Why the CUDA target cannot run (no GPU, ...), probed in a subprocess; None when it can."""
    probe = "from numba import cuda; print(int(cuda.is_available()))"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not probe for a GPU ({exc})"
    if done.returncode != 0 or done.stdout.strip() != "1":
        return "no CUDA GPU on this machine"
    return None


def _dist_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


@cache
def _git_revision() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


LIBRARIES: dict[str, Library] = {
    lib.name: lib
    for lib in (
        Ours(
            "sparsetir",
            "sparsetir_py: sp.ops.spmm / sp.ops.sddmm (default CPU schedules)",
            ours=True,
            notes={"spmm": "sp.ops.spmm(A, B)", "sddmm": "sp.ops.sddmm(A, X, Y)"},
        ),
        Scipy(
            "scipy",
            "scipy.sparse (single-threaded)",
            notes={"spmm": "A @ B", "sddmm": "A.data * einsum over gathered rows of X and Y (chunked)"},
        ),
        MKL(
            "mkl",
            "Intel MKL through sparse_dot_mkl",
            ops=("spmm",),
            modules=("sparse_dot_mkl",),
            notes={"spmm": "sparse_dot_mkl.dot_product_mkl(A, B)"},
        ),
        Torch(
            "torch",
            "torch.sparse, CSR, CPU build",
            modules=("torch",),
            notes={
                "spmm": "torch.sparse.mm(A_csr, B)",
                "sddmm": "torch.sparse.sampled_addmm(A_csr, X, Y.T, beta=0, alpha=1) (A's values not applied)",
            },
        ),
        GraphBLAS(
            "graphblas",
            "python-graphblas (SuiteSparse:GraphBLAS)",
            modules=("graphblas",),
            notes={"spmm": "A.mxm(B, plus_times)", "sddmm": "X.mxm(Y.T, plus_times, mask=A.S), then ewise_mult(A)"},
        ),
        OursCUDA(
            "sparsetir-cuda",
            "sparsetir_py CUDA target (default CUDA schedules, device-resident arrays)",
            target="cuda",
            ours=True,
            notes={"spmm": "sp.compile(spmm_script, 'cuda')", "sddmm": "sp.compile(sddmm_script, 'cuda')"},
        ),
        Cupy(
            "cusparse",
            "cuSPARSE through cupy",
            target="cuda",
            modules=("cupy",),
            notes={"spmm": "cupyx.scipy.sparse csr @ dense (cuSPARSE SpMM)", "sddmm": "cupy gather + sum (chunked)"},
        ),
    )
}

#: Baselines by target; ours per target.
BASELINES = {"cpu": ("scipy", "mkl", "torch", "graphblas"), "cuda": ("cusparse",)}
OURS = {"cpu": "sparsetir", "cuda": "sparsetir-cuda"}
