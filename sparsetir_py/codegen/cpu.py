"""The CPU renderer: one `@numba.njit(parallel=True)` function per Stage III PrimFunc.

What differs from the shared renderer:

- Loops marked `parallel` and loops bound to `blockIdx.*` become `numba.prange` (Numba runs
  the outermost one across threads; nested ones run serially). Loops bound to `threadIdx.*` and
  `vthread` become serial loops: the threads of one block run one after another. `vectorized`
  and `unrolled` loops are plain loops that LLVM vectorises or unrolls.
- `T.syncthreads()`/`T.syncwarp()` between thread loops are no-ops (the previous thread loop
  has finished); a barrier inside a thread loop cannot be honoured serially: `CodegenError`.
- Atomic adds use LLVM's `atomicrmw` (`cpu_intrinsics.atomic_add`), so they are safe in a
  `prange` loop.
- Scratch buffers of every scope are zero-filled numpy arrays allocated where the IR allocates
  them; a `local` one of a constant size up to `STACK_BYTES` lives on the stack
  (`stack_zeros`: a register tile that LLVM can keep in registers, knowing that no argument
  aliases it; a heap array costs an allocation each time and aliases, for LLVM, any array
  argument). A `local` buffer used inside a thread or parallel loop must be allocated inside it, and
  a `shared` one inside the parallel (`prange`) loop, otherwise the serial emulation would share
  what CUDA gives each thread (block) privately: `CodegenError`.
- Flat offsets are written `np.uint64(...)`: no wraparound of negative indices, so feature
  loops vectorise.
- Floating point: `fastmath={"reassoc", "contract"}` by default. `reassoc` lets LLVM reorder
  float additions, which is what vectorising a reduction (the dot products of SDDMM, the row
  sums of SpMM) needs; `contract` fuses `a * b + c` into one FMA (one rounding instead of two).
  Both change results only as a reordering of the same operations would. Never `nnan`/`ninf`
  (infinities and NaNs in the data must propagate), nor `nsz`/`arcp`/`afn` (they change signed
  zeros, divisions and math functions). `error_model="numpy"`: float division by zero gives
  inf/nan as IEEE says, instead of raising.

Options: `fastmath` (True, False or a set of LLVM flags), `parallel` (default True),
`boundscheck` (default False; True makes an out-of-range access raise IndexError).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..errors import CodegenError
from ..ir import dtype as dt
from ..ir.buffer import FlatBuffer
from ..ir.expr import IntImm
from ..ir.stmt import AtomicAdd, For
from ..ir.visit import walk
from .base import BLOCK_TAGS, HELPER_SOURCES, THREAD_TAGS, Intrin, Renderer

# Numba's CPU arrays sort in place (introsort): faster than the plain-loop heap sort CUDA needs.
CPU_SORT_RANGE_SOURCE = """\
def sort_range(buf, lo, hi):
    # Sorts buf[lo:hi] in place, ascending, and returns hi: insertion sort for a short range (a
    # view and numpy's sort cost about a microsecond a call), numpy's otherwise.
    if hi - lo > 32:
        buf[lo:hi].sort()
        return hi
    for t in range(lo + 1, hi):
        v = buf[t]
        u = t - 1
        while u >= lo and buf[u] > v:
            buf[u + 1] = buf[u]
            u -= 1
        buf[u + 1] = v
    return hi
"""

DEFAULT_FASTMATH = ("contract", "reassoc")
SPLIT_PARTS = 128  # ranges of a `split_by` loop: every thread gets the same number up to 128 threads
FASTMATH_FLAGS = ("afn", "arcp", "contract", "fast", "ninf", "nnan", "nsz", "reassoc")


def _runs_in_parallel(loop: For) -> bool:
    return loop.kind == "parallel" or (loop.kind == "thread_binding" and loop.thread in BLOCK_TAGS)


def _is_thread_loop(loop: For) -> bool:
    return loop.kind == "thread_binding" and (loop.thread in THREAD_TAGS or loop.thread == "vthread")


class CPURenderer(Renderer):
    """Stage III -> a Numba CPU kernel (`@numba.njit(parallel=True)` with `numba.prange`)."""

    def stmt_for(self, s: For) -> None:
        """A parallel loop annotated `chunk_size` hands out its iterations in chunks of that size
        (Numba's `set_parallel_chunksize`, through `cpu_intrinsics.set_chunksize`, which keeps the
        kernel cacheable): threads that finish early take more chunks, which balances rows of
        very different lengths (power-law graphs). One annotated `split_by`
        gives each thread one contiguous range of iterations, of equal weight (`split_loop`)."""
        if s.kind == "parallel" and "split_by" in s.annotations:
            self.split_loop(s)
            return
        chunk = s.annotations.get("chunk_size") if s.kind == "parallel" else None
        if chunk is None:
            super().stmt_for(s)
            return
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0:
            raise CodegenError(f"in `build`: chunk_size of loop `{s.loop_var.name}` must be a positive int")
        saved = f"chunk_{self.names.get(s.loop_var, s.loop_var.name)}"
        self.use("set_chunksize")
        self.line(f"{saved} = set_chunksize({chunk})")
        super().stmt_for(s)
        self.line(f"set_chunksize({saved})")

    def split_loop(self, s: For) -> None:
        """`for i in prange(n)` annotated `split_by="J_indptr"`: `SPLIT_PARTS` contiguous ranges of
        iterations of equal weight, iteration `i` weighing `J_indptr[i + 1] - J_indptr[i] + 1` (a
        row's nonzeros plus the row), each found by binary search (`split_bound`). Numba hands a
        `prange` to its threads in equal contiguous blocks, so every thread runs one contiguous
        range of rows of equal weight (within 1/`SPLIT_PARTS` when the parts do not divide
        evenly): the static split by nonzeros of torch's and MKL's CSR kernels. Each thread then
        streams one long range of rows (the hardware prefetcher keeps up), where dynamic chunks
        interleave the threads' rows. (A count of parts per thread would need
        `numba.get_num_threads()` in the kernel, which keeps Numba from caching it.)

            for i_part in numba.prange(128):
                for i in range(split_bound(J_indptr, m, i_part, 128),
                               split_bound(J_indptr, m, i_part + 1, 128)):
        """
        name = s.annotations["split_by"]
        var = self.names.get(s.loop_var, s.loop_var.name)
        if "chunk_size" in s.annotations:
            raise CodegenError(f"in `build`: loop `{s.loop_var.name}` has both chunk_size and split_by")
        if not (isinstance(s.min, IntImm) and s.min.value == 0):
            raise CodegenError(f"in `build`: split_by needs loop `{s.loop_var.name}` to start at 0")
        offsets = next((b for b in self.func.buffer_map.values() if b.name == name and len(b.shape) == 1), None)
        if offsets is None:
            raise CodegenError(
                f"in `build`: split_by of loop `{s.loop_var.name}` names {name!r}, not a 1-D buffer of the function"
            )
        self.use("numba", "split_bound")
        part, parts = f"{var}_part", SPLIT_PARTS
        buf, n = self.access_name(offsets), self.expr(s.extent)
        self.line(f"for {part} in numba.prange({parts}):  # ranges of equal weight, in equal blocks per thread")
        with self.indented():
            lo = f"split_bound({buf}, {n}, {part}, {parts})"
            hi = f"split_bound({buf}, {n}, {part} + 1, {parts})"
            self.line(f"for {var} in range({lo}, {hi}):")
            self.loop_body(s)

    def offset(self, e) -> str:
        """Flat offsets are indexed as unsigned integers.

        Numba wraps negative signed indices around (`a[-1]`): a select per access, which keeps
        LLVM from vectorising a loop over `C[i * feat + k]` (measured 3-4x on SpMM). Offsets here
        are never negative, so `np.uint64(...)` drops the wraparound and nothing else.
        """
        if isinstance(e, IntImm) and e.value >= 0:
            return str(e.value)
        self.use("np")
        return f"np.uint64({self.expr(e)})"

    target: ClassVar[str] = "cpu"
    OPTIONS: ClassVar[dict[str, Any]] = {"fastmath": DEFAULT_FASTMATH, "parallel": True, "boundscheck": False}
    LOOP_ITERATORS: ClassVar[dict[str, str]] = {**Renderer.LOOP_ITERATORS, "parallel": "numba.prange"}
    HELPER_SOURCES: ClassVar[dict[str, str]] = {**HELPER_SOURCES, "sort_range": CPU_SORT_RANGE_SOURCE}
    INTRINSIC_RULES: ClassVar[dict[str, Intrin]] = {
        **Renderer.INTRINSIC_RULES,
        "fmod": Intrin("np.fmod({a[0]}, {a[1]})", ("np",)),  # Numba's CPU target has no math.fmod
    }

    def normalize_options(self, options: dict[str, Any]) -> dict[str, Any]:
        options = super().normalize_options(options)
        fastmath = options["fastmath"]
        if not isinstance(fastmath, bool):
            flags = tuple(sorted(set(fastmath)))
            bad = [f for f in flags if f not in FASTMATH_FLAGS]
            if bad:
                raise CodegenError(
                    f"in `build`: unknown fastmath flag {bad[0]!r}; expected True, False or a set of "
                    f"{', '.join(FASTMATH_FLAGS)}"
                )
            fastmath = flags
        for key in ("parallel", "boundscheck"):
            if not isinstance(options[key], bool):
                raise CodegenError(f"in `build`: option `{key}` must be True or False, got {options[key]!r}")
        return {**options, "fastmath": fastmath}

    def prepare(self) -> None:
        self.use("numba")
        # Numba warns about parallel=True on a function with no prange loop.
        self.has_prange = any(isinstance(n, For) and _runs_in_parallel(n) for n in walk(self.func.body))

    def decorator(self) -> str:
        fastmath = self.options["fastmath"]
        if not isinstance(fastmath, bool):
            fastmath = "{" + ", ".join(f'"{flag}"' for flag in fastmath) + "}" if fastmath else "False"
        return (
            f"@numba.njit(parallel={self.options['parallel'] and self.has_prange}, fastmath={fastmath}, "
            f'error_model="numpy", boundscheck={self.options["boundscheck"]}, cache=True)'
        )

    def thread_loop(self, s: For) -> None:
        var = self.names.get(s.loop_var, s.loop_var.name)
        iterator = "numba.prange" if s.thread in BLOCK_TAGS else "range"
        self.line(f"for {var} in {iterator}({self.range_args(s)}):  # {s.thread}")
        self.loop_body(s)

    def stmt_atomic_add(self, s: AtomicAdd) -> None:
        self.use("atomic_add")
        if len(s.indices) != 1:
            self.access(s.buffer, s.indices)  # raises the arity error
        name = self.access_name(s.buffer)
        self.line(f"atomic_add({name}, {self.expr(s.indices[0])}, {self.expr(s.value)})")

    def prefetch(self, call) -> None:
        load = self.prefetch_load(call)
        self.use("prefetch")
        self.line(f"prefetch({self.access_name(load.buffer)}, {self.offset(load.indices[0])})")

    def barrier(self, op: str) -> None:
        inside = [f for f in self.loops if _is_thread_loop(f)]
        if inside:
            loop = inside[-1]
            raise CodegenError(
                f"in `build`: T.{op}() inside loop `{loop.loop_var.name}` bound to {loop.thread}: on the CPU "
                "the threads of a block run one after another, so a barrier inside a thread loop cannot be "
                "honoured; split the thread loop at the barrier"
            )
        self.line(f"pass  # T.{op}(): the thread loops before it have finished")

    def scratch(self, buf: FlatBuffer) -> str:
        self.use("np")
        if buf.dtype not in dt.SCALAR_DTYPES:
            raise CodegenError(f"in `build`: scratch buffer `{buf.name}` has unsupported dtype {buf.dtype}")
        dtype = "np.bool_" if buf.dtype == "bool" else f"np.{buf.dtype}"
        items = math.prod(d.value for d in buf.shape) if all(isinstance(d, IntImm) for d in buf.shape) else None
        if buf.scope == "local" and items is not None and _fits_stack(items, buf.dtype):
            # A register tile (`cache_write` to `local`, compacted): on the stack, LLVM knows that
            # no argument aliases it and keeps it in registers; a heap array it would not.
            self.use("stack_zeros")
            return f"stack_zeros({items}, {dtype})  # local scratch, on the stack"
        return f"np.zeros({self.expr(self.flat_size(buf))}, dtype={dtype})  # {buf.scope} scratch"

    def check_scratch_use(self, buf: FlatBuffer) -> None:
        if buf.scope == "global":
            return
        for loop in self.loops[self.alloc_depth[buf] :]:
            private_to = None
            if _runs_in_parallel(loop):
                private_to = "parallel iteration"
            elif buf.scope == "local" and _is_thread_loop(loop):
                private_to = "thread"
            if private_to is None:
                continue
            raise CodegenError(
                f"in `build`: {buf.scope} buffer `{buf.name}` is allocated outside loop `{loop.loop_var.name}` "
                f"({loop.thread or loop.kind}) but used inside it; on the CPU every {private_to} would share "
                f"it, so allocate it inside the loop"
            )


#: The most bytes a `local` scratch buffer puts on the stack (`runtime.cpu_intrinsics.stack_zeros`):
#: a parallel loop's threads run on OpenMP's stacks (a few MB); past this, `np.zeros` (the heap).
STACK_BYTES = 16 * 1024


def _fits_stack(items: int, dtype: str) -> bool:
    """Whether `items` of `dtype` fit `STACK_BYTES`."""
    return dtype != "bool" and 0 < items * (dt.bits(dtype) // 8) <= STACK_BYTES
