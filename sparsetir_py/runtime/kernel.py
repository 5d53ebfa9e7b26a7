"""Compiled kernels: call a built Stage III function like the PrimFunc it came from.

A kernel takes the function's parameters by name or position. Before running it checks every
argument with `format.args.bind_arguments` (an `InputError` names the bad argument);
`check_structure=False` skips the O(nnz) checks of indptr/indices. Outputs are written into the
arrays passed. Numba compiles on the first call (and keeps the result in its on-disk cache).

`CPUKernel` runs the `@numba.njit` function on numpy arrays. `CUDAKernel` launches the
`@cuda.jit` kernel: numpy arrays are copied to the device and the buffers the function writes
are copied back; device arrays (Numba's, CuPy's or anything with `__cuda_array_interface__`)
are used in place, and the call then returns without waiting for the kernel. `kernel.ptx(cc)`
compiles the kernel to PTX without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen.base import KernelParam, KernelSource
from ..errors import CodegenError, InputError, SparseTIRError
from ..format.args import BoundArguments, bind_arguments, bind_values, written_buffers
from ..format.checked_writes import flags as checked_flags
from ..format.checked_writes import raise_if_missed
from ..format.storage import storage_order
from ..inputs import positive_int
from ..ir.axis import Axis
from ..ir.buffer import FlatBuffer
from ..ir.eval import eval_int
from ..ir.expr import Var
from ..ir.func import PrimFunc
from ..ir.stmt import BLOCK_IDX_TAGS, THREAD_IDX_TAGS
from ..omp import thread_accessors
from .device import ArrayInfo, describe, device_pointer, direct_launches, layout
from .resources import check_launch


class Kernel:
    """A built function. Call it with the PrimFunc's arguments; it returns None."""

    def __init__(self, ks: KernelSource, fn: Any, path: Path):
        self.func: PrimFunc = ks.func
        self.target: str = ks.target
        self.source: str = ks.source  #: the generated Python source
        self.path: Path = path  #: the cached file the source was imported from
        self.options: dict[str, Any] = dict(ks.options)
        self.kernel_params: tuple[KernelParam, ...] = ks.params
        self._ks = ks
        self._fn = fn  # the Numba dispatcher
        self._plans: dict[tuple, list] = {}  # argument signature -> binding plan (CPU)
        #: CUDA: the device resources the kernel asks for (`runtime.resources.Resources`); CPU: None.
        self.resources = None
        #: Parameters bound to constants before lowering (`sp.compile(..., specialize=...)`): a call
        #: may still pass them, with the same value, so code written for the generic function runs.
        self.specialized: dict[str, int | float] = {}
        # (argument position, flag name) of the error flags of checked writes, read after a call.
        flag_names = {flag for flag, _ in checked_flags(self.func)}
        self._flags = [
            (k, kp.obj.name)
            for k, kp in enumerate(p for p in ks.params if p.kind != "launch")
            if kp.kind == "buffer" and kp.obj.data is None and kp.obj.name in flag_names
        ]

    @property
    def name(self) -> str:
        return self.func.name

    @property
    def parameters(self) -> tuple[str, ...]:
        """Names of the arguments the kernel takes, in order (the PrimFunc's parameters)."""
        return tuple(p.name for p in self.func.params)

    def __call__(self, *args: Any, check_structure: bool = True, **kwargs: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} `{self.name}` target={self.target} {self.path.name}>"

    def _repr_html_(self) -> str:
        """Jupyter: launch configuration, argument table, then the generated source."""
        from .. import display

        launch = self._launch_html()
        args = display.table(["parameter", "kind", "dtype", "shape", "role"], self._argument_rows())
        fixed = ", ".join(f"{k}={v}" for k, v in self.specialized.items())
        subtitle = f"{self.target} · {self.path.name}" + (f" · specialized {fixed}" if fixed else "")
        return display.section(
            f"{type(self).__name__} {self.name}",
            launch,
            display.details("arguments", args, open=True),
            display.details(f"generated source ({len(self.source.splitlines())} lines)", display.code(self.source)),
            subtitle=subtitle,
        )

    def _launch_html(self) -> str:
        from .. import display

        options = ", ".join(f"{k}={v!r}" for k, v in sorted(self.options.items()))
        return f"<div>Numba <code>@njit</code> ({display.escape(options)}); `threads=` caps a call's threads</div>"

    def _argument_rows(self) -> list[list[str]]:
        from ..ir.printer import ScriptPrinter

        printer = ScriptPrinter()
        buffers = self.func.buffer_map
        written = {b.data.name for b in written_buffers(self.func) if getattr(b, "data", None) is not None}
        rows = []
        for p in self.func.params:
            buf = buffers.get(p)
            if buf is None:
                rows.append([p.name, "scalar", p.dtype, "", ""])
                continue
            shape = "(" + ", ".join(printer.expr(e) for e in buf.shape) + ("," if len(buf.shape) == 1 else "") + ")"
            role = "written" if p.name in written else "read"
            rows.append([p.name, f"buffer {buf.name}", buf.dtype, shape, role])
        return rows

    def _drop_specialized(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """`kwargs` without the specialised parameters, whose values must be the compiled ones."""
        if not self.specialized or not any(k in self.specialized for k in kwargs):
            return kwargs
        out = {}
        for name, value in kwargs.items():
            if name not in self.specialized:
                out[name] = value
                continue
            want = self.specialized[name]
            if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number) or value != want:
                raise InputError(
                    f"`{self.name}` was compiled with `{name}` specialized to {want}, got {name}={value!r}; "
                    f"compile again without specialize={{{name!r}: ...}} to pass other values"
                )
        return out

    def _raise_if_missed(self, values: list) -> None:
        """A checked write that missed set its error flag (`format/checked_writes.py`)."""
        if self._flags:
            raise_if_missed(self.func, {name: values[k] for k, name in self._flags})

    def _scalar(self, kp: KernelParam, bound: BoundArguments) -> Any:
        p = kp.obj
        return np.dtype(p.dtype).type(bound.scalars[p])


class CPUKernel(Kernel):
    """A `@numba.njit(parallel=True)` kernel on numpy arrays."""

    def __call__(self, *args: Any, check_structure: bool = True, threads: int | None = None, **kwargs: Any) -> None:
        """Check the arguments, then run the kernel; outputs are written into the arrays passed.

        `threads` caps the Numba threads of this call (None: Numba's current setting). One
        thread skips waking the pool, which costs more than a small problem's whole run (about
        70 us per call with `OMP_WAIT_POLICY=passive`)."""
        kwargs = self._drop_specialized(kwargs)
        values = self._values(args, kwargs, check_structure)
        if threads is not None:
            threads = positive_int("`threads`", threads)
        run_capped(self._fn, values, threads)
        self._raise_if_missed(values)

    def run_trusted(self, threads: int | None, kwargs: dict[str, Any]) -> None:
        """Run the kernel on arguments its caller made itself, with no check at all: every buffer a
        1-D C-contiguous array of its declared dtype and length, every scalar in its dtype's range
        (`threads` as in a call, checked by the caller). For a library's internal kernels, whose
        arrays the library allocated or checked (`sp.ops`' co-iterating operators: two such
        calls a small product, where binding them by name cost 20-30 us). A kernel with a
        scratch buffer, a checked write or a specialised parameter takes a checked call."""
        order = self._trusted
        if order is None:
            self(check_structure=False, threads=threads, **kwargs)
            return
        run_capped(self._fn, [kwargs[name] if cast is None else cast(kwargs[name]) for name, cast in order], threads)

    @property
    def dispatcher(self) -> Any:
        """The Numba dispatcher of the generated function (called positionally, in the order of
        `trusted_order`, from other compiled code: `ops.driver`)."""
        return self._fn

    @property
    def trusted_order(self) -> list[tuple[str, Any]] | None:
        """(argument name, scalar type or None for a buffer) in the generated function's order, or
        None where its arguments cannot be passed through as they are (see `run_trusted`)."""
        return self._trusted

    @functools.cached_property
    def _trusted(self) -> list[tuple[str, Any]] | None:
        """(argument name, scalar type or None for a buffer) in the function's order, or None
        where `run_trusted` cannot pass arguments through as they are."""
        if self._flags or self.specialized:
            return None
        order = []
        for kp in self.kernel_params:
            if kp.kind == "scalar":
                order.append((kp.obj.name, np.dtype(kp.obj.dtype).type))
            elif kp.kind == "buffer" and kp.obj.data is not None and len(kp.obj.shape) == 1:
                order.append((kp.obj.data.name, None))
            else:
                return None
        return order

    def runner(self, check_structure: bool = True, threads: int | None = None, **kwargs: Any) -> Callable[[dict], None]:
        """A function that runs the kernel on a dict of arrays with the signature of `kwargs`'s
        (the same dtypes, shapes and layouts; the scalars stay `kwargs`'s), skipping every check:
        for callers that have checked such arguments once and check the rest themselves (`sp.ops`
        on repeated calls). `kwargs` is checked here as by a call."""
        bound = bind_arguments(self.func, (), self._drop_specialized(kwargs), check_structure=check_structure)
        plan = self._plan(bound)
        fn = self._fn
        if not self._flags:
            return lambda arrays: run_capped(fn, [step(arrays) for step in plan], threads)

        def run(arrays: dict) -> None:
            values = [step(arrays) for step in plan]
            run_capped(fn, values, threads)
            self._raise_if_missed(values)

        return run

    def _values(self, args: tuple, kwargs: dict, check_structure: bool) -> list:
        """The generated function's arguments. Without the structure check, a call whose arrays
        have the dtypes, shapes, contiguity and writability, and whose scalars the values, of a
        call already checked passes the same checks: it reuses that call's plan (which argument
        goes where, flattened how) instead of binding again (20 us -> 4 us for SDDMM)."""
        key = None if args or check_structure else _signature(kwargs)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            bound = bind_arguments(self.func, args, kwargs, check_structure=check_structure)
            if key is None:
                return [
                    bound.buffers[kp.obj] if kp.kind == "buffer" else self._scalar(kp, bound)
                    for kp in self.kernel_params
                ]
            plan = self._plan(bound)
            if len(self._plans) >= _MAX_PLANS:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = plan
        return [step(kwargs) for step in plan]

    def _plan(self, bound: BoundArguments) -> list[Callable[[dict], Any]]:
        plan: list[Callable[[dict], Any]] = []
        for kp in self.kernel_params:
            if kp.kind == "scalar":
                value = self._scalar(kp, bound)
                plan.append(lambda kwargs, value=value: value)
                continue
            buf, view = kp.obj, bound.buffers[kp.obj]
            if buf.data is None:  # scratch: a fresh zeroed array per call
                plan.append(lambda kwargs, n=view.size, dtype=view.dtype: np.zeros(n, dtype))
                continue
            name = buf.data.name
            if bound.values[name].ndim == 1:
                plan.append(lambda kwargs, name=name: kwargs[name])
                continue
            # A view (the layout was checked), never a copy: the kernel writes outputs through it.
            # `ravel` costs 0.05 us where `reshape(-1, order=...)` costs 0.25.
            order = storage_order(buf)
            plan.append(lambda kwargs, name=name, order=order: kwargs[name].ravel(order))
        return plan


_MAX_PLANS = 32


def run_capped(fn: Any, values: list, threads: int | None) -> Any:
    """`fn(*values)` with Numba's threads capped at `threads` for the call (None: as set)."""
    if threads is None:
        return fn(*values)
    get, set_ = thread_accessors()
    current = get()
    set_(min(threads, current))
    try:
        return fn(*values)
    finally:
        set_(current)


def _signature(kwargs: dict) -> tuple | None:
    """What the argument checks of a call depend on, or None when a value is not a numpy array,
    a Python or numpy number."""
    key = []
    for name, v in kwargs.items():
        if type(v) is np.ndarray and v.ndim:
            flags = v.flags
            key.append((name, v.dtype, v.shape, flags.c_contiguous, flags.f_contiguous, flags.writeable))
        elif type(v) in (int, float, bool) or isinstance(v, np.generic):
            key.append((name, type(v), v))
        else:
            return None
    return tuple(key)


class CUDAKernel(Kernel):
    """A `@cuda.jit` kernel; grid and block come from the extents of the bound loops."""

    def __init__(self, ks: KernelSource, fn: Any, path: Path):
        super().__init__(ks, fn, path)
        self._ptx: dict[tuple[int, int], str] = {}
        self._written = written_buffers(self.func)  # copied back after a launch
        self._structure = _structure_handles(self.func)  # read on the host by the O(nnz) checks

    def _launch_html(self) -> str:
        from .. import display
        from ..ir.printer import ScriptPrinter

        printer = ScriptPrinter()
        rows = []
        for index, launch in enumerate(self._ks.launches or (self._ks.launch,)):
            for tag, extents in launch.items():
                text = ", ".join(printer.expr(e) for e in extents)
                rows.append([index, tag, text if len(extents) == 1 else f"max({text})"])
        resources = ""
        if self.resources is not None:
            resources = display.details(
                f"resources ({self.resources})",
                display.table(["resource", "kernel", "CUDA limit", "from"], self.resources.rows()),
                open=True,
            )
        if not rows:
            return "<div>one thread: grid (1,), block (1,)</div>" + resources
        count = len(self._ks.launches) or 1
        return (
            display.details(
                f"launch configuration ({count} launch{'es' if count > 1 else ''})",
                display.table(["launch", "thread tag", "extent"], rows),
                open=True,
            )
            + resources
        )

    # ---------------------------------------------------------------- launch configuration
    def launch_config(self, **scalars: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(grid, block) for these scalar arguments (by parameter name).

        Along each of x, y, z the size is the largest extent of the loops bound to
        `blockIdx`/`threadIdx` there; trailing unused dimensions are dropped ((1,) when none). A
        kernel launched once per top-level bound nest gets the largest over its launches.
        """
        return self._launch(self._scalar_values(scalars))

    def launch_configs(self, **scalars: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(grid, block) of every launch, in order: one per top-level nest bound to threads when
        there are several (`codegen/cuda.py`), else the one `launch_config` gives."""
        values = self._scalar_values(scalars)
        return [self._launch(values, launch) for launch in self._ks.launches or (None,)]

    def _scalar_values(self, scalars: dict[str, int]) -> dict[Var, int | float]:
        return {p: scalars[p.name] for p in self.func.params if p.name in scalars}

    def _launch(
        self, scalars: dict[Var, int | float], launch: dict | None = None
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        dims: dict[str, int] = {}
        for tag, extents in (self._ks.launch if launch is None else launch).items():
            sizes = [eval_int(e, scalars, f"launch extent of {tag}") for e in extents]
            dims[tag] = max(0, *sizes)
        grid = _trim([dims.get(tag, 1) for tag in BLOCK_IDX_TAGS])
        block = _trim([dims.get(tag, 1) for tag in THREAD_IDX_TAGS])
        return grid, block

    # ---------------------------------------------------------------- calls
    def __call__(self, *args: Any, check_structure: bool = True, **kwargs: Any) -> None:
        """Check the arguments, copy numpy arrays to the device, launch, copy written buffers back."""
        launches, launch_args, copy_back, _ = self._prepare(args, kwargs, check_structure)
        for index, grid, block in launches:
            self._fn[grid, block](*launch_args, *((index,) if self._ks.launches else ()))
        # A checked write that missed: raise before copying outputs back, so host outputs stay as
        # they were passed (device arrays passed in were written in place).
        if self._flags:
            raise_if_missed(self.func, {name: launch_args[k].copy_to_host() for k, name in self._flags})
        for dev, host in copy_back:
            dev.copy_to_host(host)

    def launcher(self, *args: Any, check_structure: bool = True, **kwargs: Any) -> Launcher:
        """Everything a call does before its launches, done once: the returned `Launcher` launches
        the kernel on these arguments again with O(1) host work (no binding, no checks, no launch
        sizes to evaluate; the compiled overload for the argument types is looked up once).

        Every array must be a device array: it is used in place, so values written into it
        between launches are seen. `launcher(...)(c=other)` puts another device array of the
        same dtype and shape in a buffer's place for one launch (a fresh result; checked), and
        `launcher(...).into("c")` gives a function that does so unchecked. A kernel with
        checked writes (a flag read back after each launch) gets a launcher that calls the kernel.
        """
        launches, launch_args, _, device_values = self._prepare(args, kwargs, check_structure)
        if any(kp.obj.data.name not in device_values for kp in self._arrays()):
            raise InputError(f"`{self.name}.launcher` takes device arrays only (numpy arrays are copied per call)")
        slots: dict[str, list[tuple[int, FlatBuffer]]] = {}
        for k, kp in enumerate(kp for kp in self.kernel_params if kp.kind != "launch"):
            if kp.kind == "buffer" and kp.obj.data is not None:
                slots.setdefault(kp.obj.data.name, []).append((k, kp.obj))
        given = {name: describe(device_values[name]) for name in slots}
        if self._flags:
            values = bind_values(self.func, tuple(args), self._drop_specialized(dict(kwargs)))
            rerun = lambda **new: self(**{**values, **new}, check_structure=False)  # noqa: E731
            return Launcher(self, launch_args, [], slots, fallback=rerun, given=given)
        return Launcher(self, launch_args, launches, slots, given=given)

    def _arrays(self) -> list[KernelParam]:
        return [kp for kp in self.kernel_params if kp.kind == "buffer" and kp.obj.data is not None]

    def _prepare(self, args: tuple, kwargs: dict, check_structure: bool) -> tuple[list, list, list, dict]:
        """Bind and check the arguments; (index, grid, block) of every launch that runs a thread,
        the arguments in launch order (numpy arrays copied to the device), the (device, host) pairs
        to copy back, the device arrays."""
        kwargs = self._drop_specialized(kwargs)
        values = bind_values(self.func, tuple(args), dict(kwargs))
        device_values = {name: v for name, v in values.items() if _is_device_array(v)}
        checked = dict(values)
        for name, value in device_values.items():
            if check_structure and name in self._structure:
                checked[name] = _copy_to_host(value)  # the O(nnz) checks read the values
            else:
                checked[name] = _stand_in(value)
        bound = bind_arguments(self.func, (), checked, check_structure=check_structure)
        # One launch, or one per top-level nest bound to threads (`KernelSource.launches`), in order.
        configs = [self._launch(bound.scalars, launch) for launch in self._ks.launches or (None,)]
        for grid, block in configs:
            check_launch(self.name, grid, block)
        cuda = _cuda_for_launch()
        launch_args, copy_back = [], []
        for kp in self.kernel_params:
            if kp.kind == "launch":
                continue  # the launch index, passed last
            if kp.kind == "scalar":
                launch_args.append(self._scalar(kp, bound))
                continue
            buf: FlatBuffer = kp.obj
            host = bound.buffers[buf]
            if buf.data is not None and buf.data.name in device_values:
                launch_args.append(_flat_device_view(cuda, device_values[buf.data.name], host.size, buf))
                continue
            dev = cuda.to_device(host)
            launch_args.append(dev)
            if buf.data is not None and buf in self._written:
                copy_back.append((dev, host))
        # An empty launch (no thread would run) is left out.
        launches = [(k, grid, block) for k, (grid, block) in enumerate(configs) if 0 not in grid and 0 not in block]
        return launches, launch_args, copy_back, device_values

    # ---------------------------------------------------------------- PTX
    def ptx(self, cc: tuple[int, int] = (8, 0)) -> str:
        """PTX text of the kernel for compute capability `cc`, compiled without a GPU.

        Argument types come from the function: 1-D C-contiguous arrays of the buffers' dtypes and
        the scalar parameters' dtypes. Not available under the CUDA simulator.
        """
        cc = (int(cc[0]), int(cc[1]))
        if cc in self._ptx:
            return self._ptx[cc]
        import numba
        from numba import config, cuda

        if config.ENABLE_CUDASIM:
            raise CodegenError("kernel.ptx() needs numba-cuda without the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
        sig = []
        for kp in self.kernel_params:
            nb_type = numba.from_dtype(np.dtype(kp.obj.dtype))
            sig.append(nb_type[::1] if kp.kind == "buffer" else nb_type)
        try:
            ptx, _ = cuda.compile_ptx(
                self._fn.py_func,
                tuple(sig),
                cc=cc,
                fastmath=self.options.get("fastmath", False),
                lineinfo=self.options.get("lineinfo", False),
            )
        except Exception as e:
            raise CodegenError(f"PTX compilation of `{self.name}` for sm_{cc[0]}{cc[1]} failed: {e}") from e
        self._ptx[cc] = ptx
        return ptx


class Launcher:
    """The launches of a CUDA kernel on fixed device arguments (`CUDAKernel.launcher`).

    Calling it launches every nest of the kernel, asynchronously, as a call of the kernel would.
    On a GPU the kernel's arguments are marshalled once, by Numba's own code (the compiled
    overload's `_prepare_args`, the overload found once through `specialize`), with the launch
    configurations, so a launch is one `cuda.core` launch of the kept arguments; putting another
    array in a buffer's place (a fresh result) changes its pointer only. Where that is not
    available (Numba's simulator, an overload built for debugging, another numba-cuda) each launch
    goes through the dispatcher. The kept arguments belong to the CUDA context current when the
    launcher was made.
    """

    def __init__(self, kernel: CUDAKernel, args: list, launches: list, slots: dict, fallback=None, given=None):
        self.kernel = kernel
        self.args = args  #: the arguments in launch order (device arrays and scalars)
        self.launches = launches  #: (index, grid, block) of every non-empty launch
        self.slots = slots  #: buffer name -> (position in `args`, flat buffer) of its views
        self._fallback = fallback
        self._given = given or {}  # buffer name -> `ArrayInfo` of the array first given
        self._cuda = _cuda_for_launch()
        tail = (lambda index: (index,)) if kernel._ks.launches else (lambda index: ())
        direct = None if fallback is not None else direct_launches(kernel._fn, args, launches, tail)
        if direct is not None:
            #: what the launches take (Numba's marshalled arguments, or `args`), and per buffer the
            #: (position there, array -> entry) of each of its views
            self._values, pointers, self._emits = direct
            self._where = {name: [(pointers[k], device_pointer) for k, _ in views] for name, views in slots.items()}
            self.direct = True  #: whether launches skip the dispatcher (marshalled once)
            return
        self.direct = False
        self._values = list(args)
        self._emits = [_dispatched(kernel._fn, grid, block, tail(index)) for index, grid, block in launches]
        self._where = {
            name: [(k, _flat_view_of(self._cuda, args[k].shape[0], buf, self._given.get(name))) for k, buf in views]
            for name, views in slots.items()
        }

    def __call__(self, **replace: Any) -> None:
        """Launch; `name=array` replaces a buffer's device array for this launch only (a device
        array of the dtype and shape first given, C-contiguous: else `InputError`)."""
        if self._fallback is not None:
            return self._fallback(**replace)
        values = self._values
        if replace:
            values = values.copy()
            for name, value in replace.items():
                self._check(name, value)
                for pos, entry in self._where[name]:
                    values[pos] = entry(value)
        for emit in self._emits:
            emit(values)
        return None

    def into(self, name: str) -> Callable[[Any], None]:
        """A function that launches with its argument in buffer `name`'s place, unchecked: for a
        caller that made the array itself (of the dtype and size first given, C-contiguous: its
        memory is what the kernel reads, so SpMV's 1-D result may stand for an (m, 1) column), as
        `sp.ops` does for each fresh result of a repeated call."""
        if self._fallback is not None:
            fallback = self._fallback
            return lambda value: fallback(**{name: value})
        base, emits, where = self._values, self._emits, self._where[name]
        if len(where) == 1 and len(emits) == 1:
            ((pos, entry),) = where
            (emit,) = emits

            def one(value) -> None:
                values = base.copy()
                values[pos] = entry(value)
                emit(values)

            return one

        def every(value) -> None:
            values = base.copy()
            for pos, entry in where:
                values[pos] = entry(value)
            for emit in emits:
                emit(values)

        return every

    def _check(self, name: str, value: Any) -> None:
        if name not in self._where:
            raise InputError(f"`{self.kernel.name}` has no buffer argument `{name}` to replace")
        if not _is_device_array(value):
            raise InputError(f"`{name}` must be a device array, got {type(value).__name__}")
        want, got = self._given.get(name), describe(value)
        if want is not None and (got.shape != want.shape or got.dtype != want.dtype):
            raise InputError(
                f"`{name}` must be a device array of shape {want.shape} and dtype {want.dtype} (the one the "
                f"launcher was made with), got {got.shape} {got.dtype}"
            )
        if not got.c_contiguous:
            raise InputError(f"`{name}` must be C-contiguous")


def _dispatched(fn, grid: tuple, block: tuple, tail: tuple) -> Callable[[list], None]:
    def launch(args: list) -> None:
        # Configured at each launch: the simulator's `fn[grid, block]` sets the grid on `fn`
        # itself, so a configuration kept from before another launch's would be overwritten.
        fn[grid, block](*args, *tail)

    return launch


def _trim(sizes: list[int]) -> tuple[int, ...]:
    while len(sizes) > 1 and sizes[-1] == 1:
        sizes.pop()
    return tuple(sizes)


def _cuda_for_launch():
    from numba import config, cuda

    if not config.ENABLE_CUDASIM and not cuda.is_available():
        raise SparseTIRError(
            "no CUDA device is available to run the kernel; set NUMBA_ENABLE_CUDASIM=1 (before numba is "
            "imported) to run it in Numba's CUDA simulator"
        )
    return cuda


def _is_device_array(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return False
    return hasattr(value, "__cuda_array_interface__") or hasattr(value, "copy_to_host")


def _structure_handles(func: PrimFunc) -> set[str]:
    names = set()
    for a in func.axes:
        if not isinstance(a, Axis):
            continue
        for v in (a.indptr, a.indices):
            if v is not None:
                names.add(v.name)
    return names


def _copy_to_host(value: Any) -> np.ndarray:
    if hasattr(value, "copy_to_host"):
        return value.copy_to_host()
    if hasattr(value, "get"):  # CuPy
        return value.get()
    from numba import cuda

    return cuda.as_cuda_array(value).copy_to_host()


def _stand_in(value: Any) -> np.ndarray:
    """A host array with a device array's dtype, shape and strides but no data, for the checks
    that only look at metadata (shape, dtype, contiguity). It must never be read."""
    dtype, shape, strides = layout(value)
    if strides is None:  # C-contiguous
        strides, step = [], dtype.itemsize
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= max(extent, 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=shape, strides=tuple(strides))


def _flat_view_of(cuda: Any, size: int, buf: FlatBuffer, given: ArrayInfo | None) -> Callable[[Any], Any]:
    """array -> `_flat_device_view(cuda, array, size, buf)` for arrays of the shape `given` (a
    launcher's buffer: checked, or made by the caller as the one first given), its storage order
    found once and a 1-D Numba array passed as it is."""
    if given is None or len(given.shape) != 1:
        order = storage_order(buf)
        return lambda value: _as_numba(cuda, value).reshape(size, order=order)
    return lambda value: _as_numba(cuda, value)


def _as_numba(cuda: Any, value: Any) -> Any:
    return value if hasattr(value, "copy_to_host") else cuda.as_cuda_array(value)


def _flat_device_view(cuda: Any, value: Any, size: int, buf: FlatBuffer) -> Any:
    dev = _as_numba(cuda, value)
    if len(dev.shape) == 1:
        return dev
    return dev.reshape(size, order=storage_order(buf))
