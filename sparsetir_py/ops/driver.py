"""Compiled drivers: a small call's host steps and its generated kernels in one compiled function.

A small co-iterating call (a product of a few thousand multiply-adds) runs its kernels in tens
of microseconds, and its host steps in Python (arrays for each row's work and room, a prefix
sum, the result's arrays, two kernel calls binding ~20 arguments each) cost three to five times
that: measured on a 77-row graph, `A @ A` took 139 us a call, of which the two kernels 26 us.
A driver is a generated Python source, written to the kernel cache beside the kernels and
imported from there like them (`runtime.cache`), that imports the kernels' own compiled
functions and runs the whole call in one `@numba.njit` function: Numba's on-disk cache keeps it
across processes, and its file name hashes its source, which names the kernels' modules (whose
names hash theirs), so a kernel that changes gets a new driver.

    run = spgemm_driver(work_kernel, fused_kernel)
    done, data, indices, indptr = run(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data,
                                      m, k, n, limit, room_limit)
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from ..runtime.cache import cache_dir, guard_numba_cache, import_source, kernel_path, write_source
from ..runtime.kernel import CPUKernel

#: What every driver's source holds besides its template: all rows as one chunk of a kernel's
#: `parts`/`bounds`, and each row's count (written after a leading slot) summed into `indptr`.
HELPERS = """
@numba.njit(inline="always")
def one_chunk(m):
    bounds = np.zeros(2, np.int32)
    bounds[1] = m
    return 1, bounds


@numba.njit(inline="always")
def counts_to_indptr(indptr, m):
    indptr[0] = 0
    for i in range(m):
        indptr[i + 1] += indptr[i]
    return indptr[m]
"""

#: A one-thread SpGEMM in one pass: each row's work and room (`{work_kernel}`), their sums, room for
#: the result, the accumulating pass (`{fused_kernel}`), the result's arrays cut to its size (views: Numba's
#: arrays are not numpy's own, the caller copies them). Not done
#: (and nothing allocated past the per-row arrays) where the work reaches `limit` multiply-adds
#: (the caller runs the product on more threads) or the room passes `room_limit` entries.
SPGEMM_SMALL = """
@numba.njit(boundscheck=False, cache=True, nogil=True)
def spgemm_small(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, m, k, n, limit, room_limit):
    nnz_a = len(a_indices)
    nnz_b = len(b_indices)
    parts, bounds = one_chunk(m)
    work = np.empty(m + 1, np.int64)
    room = np.empty(m + 1, np.int64)
    c_work = work[1:]
    c_room = room[1:]
    {work_kernel}
    work[0] = 0
    nnz_t = 0
    for i in range(m):
        work[i + 1] += work[i]
        nnz_t += room[i + 1]
    indptr = np.empty(m + 1, a_indptr.dtype)
    if work[m] >= limit or nnz_t > room_limit:
        return False, np.empty(0, b_data.dtype), np.empty(0, a_indices.dtype), indptr
    t_start = np.zeros(2, np.int64)
    t_start[1] = nnz_t
    t_data = np.empty(nnz_t, b_data.dtype)
    t_indices = np.empty(nnz_t, a_indices.dtype)
    c_end = indptr[1:]
    w_prefix = work
    {fused_kernel}
    indptr[0] = 0
    nnz = indptr[m]
    return True, t_data[:nnz], t_indices[:nnz], indptr
"""

#: A one-thread element-wise merge (`{merge_kernel}`: a union's or an intersection's): each row's
#: room (a union's |A_i| + |B_i|, an intersection's min(|A_i|, |B_i|)) summed where its row
#: starts, the merge writing each row's count, their sums the result's `indptr`. `union` is
#: the merge's kind (a compile-time constant of each call site's types: both branches compile).
EWISE_SMALL = """
@numba.njit(boundscheck=False, cache=True, nogil=True)
def ewise_small(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, m, union, alpha, beta):
    nnz_a = len(a_indices)
    nnz_b = len(b_indices)
    parts, bounds = one_chunk(m)
    c_start = np.empty(m + 1, a_indptr.dtype)
    c_start[0] = 0
    for i in range(m):
        length = b_indptr[i + 1] - b_indptr[i]
        if union:
            length += a_indptr[i + 1] - a_indptr[i]
        else:
            length = min(length, a_indptr[i + 1] - a_indptr[i])
        c_start[i + 1] = c_start[i] + length
    nnz_c = c_start[m]
    c_data = np.empty(nnz_c, b_data.dtype)
    c_indices = np.empty(nnz_c, a_indices.dtype)
    indptr = np.empty(m + 1, a_indptr.dtype)
    c_count = indptr[1:]
    {merge_kernel}
    nnz = counts_to_indptr(indptr, m)
    return c_data[:nnz], c_indices[:nnz], indptr
"""

#: A one-thread element-wise operation of two operands that store the same coordinates
#: (`{same_kernel}`: the lattice's top point at every position, the structure copied and
#: compared): whether B's structure differed from A's, and the result's arrays.
SAME_SMALL = """
@numba.njit(boundscheck=False, cache=True, nogil=True)
def same_small(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, m, alpha, beta):
    nnz = len(a_data)
    parts, bounds = one_chunk(m)
    c_data = np.empty(nnz, b_data.dtype)
    c_indices = np.empty(nnz, a_indices.dtype)
    c_indptr = np.empty(m + 1, a_indptr.dtype)
    c_indptr[0] = 0
    differ = np.zeros(1, np.int32)
    {same_kernel}
    return differ[0] != 0, c_data, c_indices, c_indptr
"""

#: A one-thread masked product (`{masked_kernel}`, writing each row into the room of its mask
#: row), the counts summed into `indptr`, and the rows moved into the result's arrays
#: (`{compact_kernel}`) where some mask entries were not hit.
MASKED_SMALL = """
@numba.njit(boundscheck=False, cache=True, nogil=True)
def masked_small(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, m_indptr, m_indices, m, k, n):
    nnz_a = len(a_indices)
    nnz_b = len(b_indices)
    nnz_m = len(m_indices)
    parts, bounds = one_chunk(m)
    t_data = np.empty(nnz_m, b_data.dtype)
    t_indices = np.empty(nnz_m, a_indices.dtype)
    indptr = np.empty(m + 1, a_indptr.dtype)
    c_count = indptr[1:]
    {masked_kernel}
    nnz_c = counts_to_indptr(indptr, m)
    if nnz_c == nnz_m:
        return t_data, t_indices, indptr
    c_data = np.empty(nnz_c, b_data.dtype)
    c_indices = np.empty(nnz_c, a_indices.dtype)
    t_start = m_indptr
    c_indptr = indptr
    nnz_t = nnz_m
    {compact_kernel}
    return c_data, c_indices, indptr
"""


def call(alias: str, kernel: CPUKernel, args: Mapping[str, str]) -> str:
    """The source of a positional call of `kernel` (imported as `alias`) on the driver's variables
    named as its arguments, or `args[name]` where given; scalars cast to their declared types (a
    call whose types differ from the kernel's compiled ones would compile it again)."""
    order = kernel.trusted_order
    if order is None:
        raise ValueError(f"kernel {kernel.func.name} cannot be called positionally (a checked buffer or scratch)")
    rendered = []
    for name, scalar in order:
        expr = args.get(name, name)
        rendered.append(expr if scalar is None else f"np.{scalar.__name__}({expr})")
    return f"{alias}({', '.join(rendered)})"


def compile_driver(
    name: str, body: str, kernels: Mapping[str, CPUKernel], renames: Mapping[str, Mapping[str, str]] | None = None
) -> Callable[..., Any]:
    """The function `name` of `body` (a template whose `{alias}` fields are filled by `call`
    for each of `kernels`, passing `renames[alias][argument]` where given), written to the kernel
    cache and imported from there."""
    imports = []
    calls = {}
    for alias, kernel in kernels.items():
        fn = kernel.dispatcher
        imports.append(f"from {fn.py_func.__module__} import {fn.py_func.__name__} as {alias}")
        calls[alias] = call(alias, kernel, (renames or {}).get(alias, {}))
    source = "\n".join([
        f"# Generated by sparsetir_py: the driver `{name}` of an operator's small calls (ops/driver.py).",
        "# Rewritten by every build: edit the template in ops/driver.py, not this file.",
        "import numba",
        "import numpy as np",
        *imports,
        "",
        "",
        HELPERS.strip("\n"),
        "",
        "",
        body.format(**calls).strip("\n"),
        "",
    ])  # fmt: skip
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    module = import_source(write_source(kernel_path(cache_dir(), "cpu", name, key), source))
    fn = getattr(module, name)
    guard_numba_cache(fn)
    return fn


@functools.cache
def spgemm_driver(work: CPUKernel, fused: CPUKernel) -> Callable[..., Any]:
    """The one-thread SpGEMM driver (`SPGEMM_SMALL`) around these kernels."""
    return compile_driver("spgemm_small", SPGEMM_SMALL, {"work_kernel": work, "fused_kernel": fused})


@functools.cache
def ewise_driver(merge: CPUKernel) -> Callable[..., Any]:
    """The one-thread element-wise driver (`EWISE_SMALL`) around this merge kernel."""
    return compile_driver("ewise_small", EWISE_SMALL, {"merge_kernel": merge})


@functools.cache
def same_driver(same: CPUKernel) -> Callable[..., Any]:
    """The one-thread driver (`SAME_SMALL`) of an element-wise operation on one shared level."""
    return compile_driver("same_small", SAME_SMALL, {"same_kernel": same})


@functools.cache
def masked_driver(masked: CPUKernel, compact: CPUKernel) -> Callable[..., Any]:
    """The one-thread masked SpGEMM driver (`MASKED_SMALL`) around these kernels."""
    renames = {"masked_kernel": {"c_data": "t_data", "c_indices": "t_indices"}}
    return compile_driver("masked_small", MASKED_SMALL, {"masked_kernel": masked, "compact_kernel": compact}, renames)
