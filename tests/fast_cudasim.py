"""A thread block of Numba's CUDA simulator that waits for its threads instead of polling them.

The simulator runs each CUDA thread as a Python thread; its `BlockManager.run` finds the threads
blocked in `syncthreads` by looping over all of them, `is_alive()` and all, for as long as the
block runs. That loop holds the GIL most of the time the threads need it: in the suite's
simulator runs it was most of the time spent in kernels (measured 2-4x slower launches).

`install()` (in a process with NUMBA_ENABLE_CUDASIM=1, before any launch) replaces it with the
same protocol told through a condition variable: a thread that reaches `syncthreads` or ends
says so, and the last one to do so wakes the block. What a kernel sees does not change: all
live threads of the block are released together once every one of them waits in `syncthreads`
(a finished thread no longer counts, as before), and the first exception aborts the others and
is raised at the launch.

A kernel that never waits for the other threads of its block (no `syncthreads*`, no warp-level
function: nothing in its code or in the functions it calls names one, `_waits_for_others`) runs
its block's threads one after the other on one Python thread instead of one Python thread each:
without a barrier, any order of a block's threads is an order CUDA may run them in, and starting
a Python thread per CUDA thread was most of a launch's time (a decomposed SpMM's fused launch of
8 blocks of 1,024 threads on a 12 x 10 matrix: 8,192 threads started for 8 blocks).

`python fast_cudasim.py SCRIPT ARGS...` (or `-c CODE ARGS...`, or `-m MODULE ARGS...`) runs a
simulator driver as `python` would (`__main__`, its sys.path and sys.argv), the simulator on and
this block manager installed (`cuda_support.simulator_argv` builds that command).
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import types

import numpy as np

#: The simulator's constructors this block manager was written against (numba-cuda 0.30): where
#: they differ, `install` leaves the simulator as it is (slower, never wrong).
SIGNATURES = {
    "BlockManager": ["f", "grid_dim", "block_dim", "debug"],
    "BlockThread": ["f", "manager", "blockIdx", "threadIdx", "debug"],
}


def compatible(kernel) -> bool:
    """Whether this numba-cuda's simulator has the classes and constructors `install` replaces."""
    import inspect

    for name, params in SIGNATURES.items():
        cls = getattr(kernel, name, None)
        if cls is None or list(inspect.signature(cls.__init__).parameters)[1:] != params:
            return False
    return callable(getattr(kernel.BlockManager, "run", None))


#: Names whose use makes a thread wait for (or exchange values with) the others of its block.
WAITING = frozenset({
    "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp", "this_grid", "cg",
    "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "all_sync", "any_sync", "eq_sync",
    "ballot_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt",
})  # fmt: skip


def _waits_for_others(fn, seen: set | None = None) -> bool:
    """Whether `fn`'s code, its nested functions' or that of a function it calls through a global
    name (a device function, a helper module's function) names one of `WAITING`."""
    seen = set() if seen is None else seen
    fn = getattr(fn, "py_func", fn)  # a simulated device function wraps the Python one
    code = getattr(fn, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    codes, names = [code], set()
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    if names & WAITING:
        return True
    scope = getattr(fn, "__globals__", {})
    return any(callable(scope.get(name)) and _waits_for_others(scope[name], seen) for name in names)


def install() -> None:
    from numba.cuda.simulator import kernel

    if getattr(kernel.BlockManager.run, "_waits", False) or not compatible(kernel):
        return

    class WaitingThread(kernel.BlockThread):
        def run(self):
            try:
                super().run()  # the simulator's: keeps a kernel's exception in `self.exception`
            finally:
                block = self._manager
                with block._ready:
                    block._finished += 1
                    block._failed = block._failed or self.exception is not None
                    block._wake_if_ready()

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            block = self._manager
            with block._ready:
                self.syncthreads_blocked = True
                block._waiting.append(self)
                block._wake_if_ready()
            self.syncthreads_event.wait()
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    class SequentialThread(kernel.BlockThread):
        """All threads of a block, one after the other, on this one Python thread: `threadIdx`
        (and the lane, `thread_id`) set before each runs the kernel."""

        def __init__(self, f, manager, blockIdx, points, args, debug):
            super().__init__(f, manager, blockIdx, points[0], debug)
            self._points, self._kernel_args = points, args

        def run(self):
            block = kernel.Dim3(*self._manager._block_dim)
            for point in self._points:
                self.threadIdx = kernel.Dim3(*point)
                self.thread_id = point[0] + block.x * (point[1] + block.y * point[2])
                try:
                    self._target(*self._kernel_args)
                except Exception as e:  # as the simulator's threads report it
                    self.exception = (type(e)(f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}: {e}"),
                                      sys.exc_info()[2])  # fmt: skip
                    return

        def syncthreads(self):  # pragma: no cover - `_waits_for_others` keeps such kernels threaded
            raise RuntimeError("fast_cudasim: a kernel run thread by thread reached syncthreads")

    waits: dict = {}

    def wake_if_ready(self) -> None:
        # Called with `_ready` held: wake `run` only when it has something to do.
        if self._failed or len(self._waiting) + self._finished == self._threads:
            self._ready.notify()

    def run(self, grid_point, *args):
        if not waits.setdefault(self._f, _waits_for_others(self._f)):
            points = [tuple(p) + (0,) * (3 - len(p)) for p in np.ndindex(*self._block_dim)]
            thread = SequentialThread(self._f, self, grid_point, points, args, self._debug)
            thread.start()
            thread.join()
            if thread.exception:
                raise thread.exception[0].with_traceback(thread.exception[1])
            return
        self._ready = threading.Condition()
        self._waiting, self._finished, self._failed = [], 0, False
        points = list(np.ndindex(*self._block_dim))
        self._threads = len(points)
        threads = []
        for block_point in points:

            def target():
                self._f(*args)

            thread = WaitingThread(target, self, grid_point, block_point, self._debug)
            thread.start()
            threads.append(thread)
        with self._ready:
            while True:
                self._ready.wait_for(lambda: self._failed or len(self._waiting) + self._finished == self._threads)
                if self._failed:
                    for thread in threads:
                        thread.abort = True
                        thread.syncthreads_blocked = False
                        thread.syncthreads_event.set()
                    break
                if self._finished == self._threads:
                    break
                for thread in self._waiting:  # every live thread waits: the barrier opens
                    thread.syncthreads_blocked = False
                    thread.syncthreads_event.set()
                self._waiting = []
        for thread in threads:
            if thread.exception:
                raise thread.exception[0].with_traceback(thread.exception[1])

    run._waits = True
    kernel.BlockManager._wake_if_ready = wake_if_ready
    kernel.BlockManager.run = run


def main() -> None:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba.cuda
    install()
    if sys.argv[1] == "-c":
        code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
        sys.path[0] = ""  # as `python -c`: the working directory first
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    elif sys.argv[1] == "-m":
        module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
        sys.path[0] = os.getcwd()  # as `python -m`
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[1:]
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python SCRIPT`
        runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
