"""What a CUDA kernel asks of the device, and the limits the simulator does not enforce.

Numba's CUDA simulator runs a kernel that declares 96 KiB of shared memory per block, or blocks
of 2048 threads; a GPU refuses the launch. `sp.build(..., "cuda")` therefore measures every
kernel it renders (`kernel_resources`) and checks it against CUDA's limits (`check_build`):

| resource                                    | limit                            |
|---------------------------------------------|----------------------------------|
| static shared memory per block              | 48 KiB (`MAX_SHARED_BYTES`)       |
| local arrays per thread                     | 16 KiB (`MAX_LOCAL_BYTES`)        |
| threads per block (threadIdx x * y * z)     | 1024 (`MAX_THREADS_PER_BLOCK`)    |
| blockDim x / y / z                          | 1024 / 1024 / 64                 |
| gridDim x / y / z                           | 2**31 - 1 / 65535 / 65535        |

Shared memory is the sum of every `cuda.shared.array` of the kernel: Numba gives each its own
static allocation, whichever branch or launch declares it (48 KiB is what a block may declare
statically on every GPU since Kepler). Local memory counts the per-thread `cuda.local.array`s
(one-element `local` buffers are registers and count nothing). CUDA itself allows 512 KiB of
local memory per thread, but the driver reserves it for every thread the device can hold at
once (2048 per SM on current GPUs: 16 KiB per thread is about 4 GiB on an H100), and arrays that
large live in slow memory anyway; 16 KiB is this project's bound. Launch sizes that are
constants are checked at build; sizes computed from the scalar arguments are checked at each
launch (`check_launch`, an `InputError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..codegen.base import const_int
from ..errors import CodegenError, InputError
from ..ir.buffer import FlatBuffer
from ..ir.expr import PrimExpr
from ..ir.func import PrimFunc
from ..ir.launch import MAX_THREADS_PER_BLOCK
from ..ir.stmt import BLOCK_IDX_TAGS, THREAD_IDX_TAGS, Allocate, Block
from ..ir.visit import walk

__all__ = [
    "MAX_BLOCK_DIMS",
    "MAX_GRID_DIMS",
    "MAX_LOCAL_BYTES",
    "MAX_SHARED_BYTES",
    "MAX_THREADS_PER_BLOCK",
    "Resources",
    "check_build",
    "check_launch",
    "kernel_resources",
]

#: Static shared memory one thread block may declare (bytes).
MAX_SHARED_BYTES = 48 * 1024
#: This project's bound on the local arrays of one thread (bytes); see the module docstring.
MAX_LOCAL_BYTES = 16 * 1024
#: The largest blockDim along x, y, z.
MAX_BLOCK_DIMS = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
#: The largest gridDim along x, y, z.
MAX_GRID_DIMS = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


@dataclass(frozen=True)
class Resources:
    """The device resources of one CUDA kernel (`kernel.resources`).

    `shared` and `local` list `(buffer, bytes)` per scratch array; `dims` maps each launch tag to
    its size, the largest over the kernel's launches (None: known only at launch, from the
    scalar arguments); `threads_per_block` is the largest block of any launch (None: not constant).
    """

    shared: tuple[tuple[str, int], ...] = ()
    local: tuple[tuple[str, int], ...] = ()
    dims: tuple[tuple[str, int | None], ...] = ()
    threads_per_block: int | None = 1

    @property
    def shared_bytes(self) -> int:
        """Static shared memory per block, in bytes."""
        return sum(n for _, n in self.shared)

    @property
    def local_bytes(self) -> int:
        """Local arrays per thread, in bytes."""
        return sum(n for _, n in self.local)

    def __str__(self) -> str:
        threads = "set at launch" if self.threads_per_block is None else str(self.threads_per_block)
        return f"shared {self.shared_bytes} B/block, local {self.local_bytes} B/thread, threads per block {threads}"

    def rows(self) -> list[list[str]]:
        """One row per resource, for a table: what, amount, the limit, what makes it up."""
        threads = "at launch" if self.threads_per_block is None else self.threads_per_block
        dims = ", ".join(f"{t}={'at launch' if v is None else v}" for t, v in self.dims)
        return [
            ["shared memory per block", f"{self.shared_bytes} B", f"{MAX_SHARED_BYTES} B", _listing(self.shared)],
            ["local arrays per thread", f"{self.local_bytes} B", f"{MAX_LOCAL_BYTES} B", _listing(self.local)],
            ["threads per block", str(threads), str(MAX_THREADS_PER_BLOCK), dims],
        ]


def kernel_resources(func: PrimFunc, launches: tuple[dict[str, tuple[PrimExpr, ...]], ...]) -> Resources:
    """The resources of the CUDA kernel of Stage III `func`; `launches` are the renderer's launch
    extents (`KernelSource.launches`, or `(KernelSource.launch,)` for a kernel launched once)."""
    shared, local = [], []
    for buf in _scratch(func):
        size = _constant_size(buf)
        if size is None or (buf.scope == "local" and size == 1):
            continue  # a size the renderer refuses, or a register
        entry = (buf.name, size * np.dtype("bool" if buf.dtype == "bool" else buf.dtype).itemsize)
        (shared if buf.scope == "shared" else local).append(entry)
    dims: dict[str, int | None] = {}
    threads: int | None = 1
    for launch in launches:
        block = 1
        for tag in (*BLOCK_IDX_TAGS, *THREAD_IDX_TAGS):
            size = _largest(launch.get(tag, ()))
            if tag in launch:
                old = dims.get(tag, 0)
                dims[tag] = None if size is None or old is None else max(old, size)
            if tag in THREAD_IDX_TAGS:
                block = None if size is None or block is None else block * size
        threads = None if block is None or threads is None else max(threads, block)
    order = (*BLOCK_IDX_TAGS, *THREAD_IDX_TAGS)
    return Resources(tuple(shared), tuple(local), tuple((t, dims[t]) for t in order if t in dims), threads)


def check_build(name: str, res: Resources) -> None:
    """Raise `CodegenError` when kernel `name` could not launch on a GPU: the limits of the module
    docstring, for what is known at build (scratch sizes, constant launch sizes)."""
    if res.shared_bytes > MAX_SHARED_BYTES:
        raise CodegenError(
            f"in `build`: `{name}` declares {res.shared_bytes} bytes of static shared memory per block "
            f"({_listing(res.shared)}); CUDA allows at most {MAX_SHARED_BYTES} (48 KiB). Cache a smaller tile "
            "(split the loop the cache is computed at), or let sp.compile / sp.transform.compact_buffers shrink "
            "each buffer to what one block touches"
        )
    if res.local_bytes > MAX_LOCAL_BYTES:
        raise CodegenError(
            f"in `build`: `{name}` declares {res.local_bytes} bytes of local arrays per thread "
            f"({_listing(res.local)}); this project allows at most {MAX_LOCAL_BYTES} (16 KiB, "
            "sparsetir_py.runtime.resources). Cache less per thread, or let sp.compile / "
            "sp.transform.compact_buffers shrink each buffer to what one thread touches"
        )
    dims = dict(res.dims)
    for tag, limit in (*MAX_BLOCK_DIMS.items(), *MAX_GRID_DIMS.items()):
        size = dims.get(tag)
        if size is not None and size > limit:
            kind = "blockDim" if tag.startswith("thread") else "gridDim"
            raise CodegenError(
                f"in `build`: `{name}` launches {size} along {tag} ({kind}.{tag[-1]}); CUDA allows at most {limit}: "
                f"split the loop bound to {tag}"
            )
    if res.threads_per_block is not None and res.threads_per_block > MAX_THREADS_PER_BLOCK:
        raise CodegenError(
            f"in `build`: `{name}` launches blocks of {res.threads_per_block} threads "
            f"({', '.join(f'{t}={v}' for t, v in res.dims if t.startswith('thread'))}); CUDA allows at most "
            f"{MAX_THREADS_PER_BLOCK}: bind fewer iterations to threadIdx"
        )


def check_launch(name: str, grid: tuple[int, ...], block: tuple[int, ...]) -> None:
    """Raise `InputError` when one launch of kernel `name` with these sizes (from the scalar
    arguments) is past CUDA's limits."""
    threads = math.prod(block)
    if threads > MAX_THREADS_PER_BLOCK:
        raise InputError(
            f"`{name}` would launch blocks of {block} = {threads} threads; CUDA allows at most {MAX_THREADS_PER_BLOCK}"
        )
    for sizes, limits, kind in ((block, MAX_BLOCK_DIMS, "block"), (grid, MAX_GRID_DIMS, "grid")):
        for size, (tag, limit) in zip(sizes, limits.items()):
            if size > limit:
                raise InputError(
                    f"`{name}` would launch a {kind} of {sizes}: {size} along {tag} is past CUDA's limit of {limit}"
                )


def _scratch(func: PrimFunc) -> list[FlatBuffer]:
    out = []
    for n in walk(func.body):
        if isinstance(n, Allocate):
            out.append(n.buffer)
        elif isinstance(n, Block):
            out.extend(n.alloc_buffers)
    return [b for b in out if isinstance(b, FlatBuffer) and b.scope in ("shared", "local")]


def _constant_size(buf: FlatBuffer) -> int | None:
    size = 1
    for d in buf.shape:
        value = const_int(d)
        if value is None:
            return None
        size *= value
    return size


def _largest(extents: tuple[PrimExpr, ...]) -> int | None:
    values = [const_int(e) for e in extents]
    if not values or any(v is None for v in values):
        return None if values else 1
    return max(values)


def _listing(entries: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{name}: {size} bytes" for name, size in entries) or "none"
