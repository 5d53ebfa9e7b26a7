"""Sparse x sparse operators with assembled outputs, compiled through the project's pipeline.

    C = spgemm(A, B)                  # A @ B
    C = spgemm(A, B, mask=M)          # A @ B at the coordinates M stores only
    C = add(A, B, alpha=1, beta=1)    # alpha * A + beta * B: the union of the structures
    C = multiply(A, B)                # A * B element-wise: the intersection

Operands are scipy sparse matrices of any format and index/value dtype, checked as `sp.ops.spmm`
checks A (`sp.InputError` for a broken structure, a shape mismatch or non-numeric values); they
are made canonical CSR (sorted, duplicates summed) before the kernels see them. The result is a
canonical CSR matrix (sorted indices, no duplicates) that owns its arrays, of the operands' index
dtype as `sp.ops` reads them (int64 if either is, or if the result's nnz needs it) and value
dtype (float32 when every operand is float32, else float64); a `csr_array` when `A` is a sparse
array. `target="cuda"` runs the same kernels with the CUDA schedule (a chunk of rows per block;
tested under Numba's simulator).

The output's structure is assembled by the kernels (symbolic pass, prefix sum, numeric pass;
see `kernels.py`) and is *structural*: every coordinate the co-iteration visits is stored, also
where the value computed there is 0 (`A - A` stores zeros, as does a product whose terms
cancel, or an explicit zero of an operand), as TACO and MKL do. scipy drops entries that compute
to exactly 0 (`A @ B`, `A + B`, `A.multiply(B)`): `C.eliminate_zeros()` gives scipy's matrix.
A mask's structure selects coordinates, its values are not read (a stored 0 still selects).

`threads=` caps the Numba threads of a call; a call with less work than a grain
(`coiteration.host.parallel_grain()` multiply-adds, `ewise_grain()` merged entries; 16k of
either where idle OpenMP threads spin, OpenMP's default, 32k and 128k where they sleep,
`OMP_WAIT_POLICY=passive`) runs on one thread whatever the cap, since waking the thread pool
costs more than it saves. `schedule=` names a schedule of
`schedules/spgemm.py` or passes one: `cpu_chunks` (the default: dense workspaces), `cpu_hash`
(hash workspaces, the default where dense ones would pass `WORKSPACE_BYTES`), `cpu_serial`,
`cuda_chunks`.

On the CPU with dense workspaces `spgemm` runs in one pass (`kernels.spgemm_fused_script`: no
symbolic pass; each row accumulated, ordered by a scan of the workspace, insertion sort or a
bitmap of its columns, and written into room for its bound), where that room (`min(work, n + 1)`
entries per row) stays under `FUSED_ROOM_BYTES`; else, and on CUDA, the symbolic and numeric
passes. Where A's rows select rows of B all over it (a graph numbered at random: `host.scattered`
samples A's nonzeros), the one-pass kernel prefetches the rows of B that the rows ahead select
(`kernels.PREFETCH_BLOCK`; 1.05-1.4x faster on R-MAT, Chung-Lu and Delaunay graphs, as is the
masked product); rows of B read in order (meshes) are not prefetched.
The chunks write the result's own arrays (room for every row, of which only the pages
written are faulted in) and the chunks after the first move down in place (`_move_chunks`):
measured against a scratch buffer kept between calls and copied into fresh arrays, the copy and
the faults of the fresh arrays cost 2-5x the move (meshes, R-MAT, 2 threads). The host's per-row
arrays (work, room, their prefix sums) are kept between calls (`_ROWS`), and the result's
`indptr` is summed in place from the counts the kernel writes into it. `add` and `multiply`
write each chunk's rows one after the other into room for their bound (`|A_i| + |B_i|`; for an
intersection the rows of the operand with fewer entries, whose row bounds are the room's); the
chunks after the first then move down in place (`_packed`). Operands that store the same
coordinates (`A + A.T` of a symmetric A) take one loop over positions that also copies and
compares the structure (`kernels.same_level_script`): where the structures differ after all,
the operator merges.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable

import numpy as np
import scipy.sparse

from ..arith.lattice import lattice
from ..coiteration import kernels
from ..coiteration.host import (
    MASKED_ROWS,
    WORKSPACE_BYTES,
    chunk_bounds,
    ewise_grain,
    move_down,
    parallel_grain,
    prefix,
    prefix_in_place,
    scattered,
    table_size,
    work_prefix,
)
from ..errors import InputError
from ..inputs import VALUE_DTYPES, canonical, check_matrix, check_values, native
from ..omp import current_threads
from ..operands import DTYPE_NAMES, remember_structure, structure_checked
from ..runtime.kernel import CPUKernel, Kernel
from ..script import from_script
from .driver import ewise_driver, masked_driver, same_driver, spgemm_driver
from .kernels import KernelKey, compiled, resolve_schedule
from .threads import check_threads, thread_args

_INT32_MAX = int(np.iinfo(np.int32).max)


def _script(name: str, idtype: str, dtype: str, workspace: str = "local") -> str:
    if name == "count":
        return kernels.spgemm_count_script(idtype, dtype, workspace)
    if name == "numeric":
        return kernels.spgemm_numeric_script(idtype, dtype, workspace)
    if name in ("masked", "masked_prefetch"):
        return kernels.spgemm_masked_script(idtype, dtype, workspace, prefetch=name == "masked_prefetch")
    if name == "compact":
        return kernels.compact_script(idtype, dtype)
    if name == "fused":
        return kernels.spgemm_fused_script(idtype, dtype)
    if name == "fused_prefetch":
        return kernels.spgemm_fused_script(idtype, dtype, prefetch=True)
    if name == "work":
        return kernels.spgemm_work_script(idtype, dtype)
    if name == "compact_chunks":
        return kernels.compact_chunks_script(idtype, dtype)
    if name.startswith("same_"):
        expression, scalars = EWISE[name[len("same_") :]]
        return kernels.same_level_script(lattice(expression), scalars, idtype, dtype)
    expression, scalars = EWISE[name]
    return kernels.merge_script(lattice(expression), scalars, idtype, dtype, packed=True)


#: The element-wise co-iterations: expression over A and B, and its scalar parameters.
EWISE = {"add": ("alpha * A + beta * B", ("alpha", "beta")), "multiply": ("A * B", ())}


def kernel(name: str, idtype: str, dtype: str, target: str = "cpu", schedule=None) -> Kernel:
    """The compiled kernel `name` ("count", "numeric", "work", "fused", "masked", "compact",
    "compact_chunks", "add", "multiply"),
    built once per dtypes, target and schedule."""
    if not callable(schedule):  # a name or None; the operators pass the function they resolved
        schedule = resolve_schedule("spgemm", target, schedule)
    key = KernelKey(name, "csr", dtype, idtype, target, None, schedule)
    return compiled(key, lambda: from_script(_script(name, idtype, dtype, workspace_of(schedule))))


def _launch(compiled_kernel: Kernel, thread_args: dict, args: dict) -> None:
    """Run one of the operators' kernels on `args`: arrays made here or operands checked already,
    scalars of the operands' sizes. On the CPU with no check (`CPUKernel.run_trusted`: binding
    ~20 arguments by name cost 10-15 us a kernel, and a small product runs two); elsewhere a
    call without the structure check (CUDA copies the arrays to the device and back)."""
    if isinstance(compiled_kernel, CPUKernel):
        compiled_kernel.run_trusted(thread_args.get("threads"), args)
    else:
        compiled_kernel(check_structure=False, **thread_args, **args)


def workspace_of(schedule) -> str:
    """Where the schedule keeps SpGEMM's workspaces (`schedule.workspace`, `kernels.WORKSPACES`)."""
    workspace = getattr(schedule, "workspace", "local")
    if workspace not in kernels.WORKSPACES:
        raise InputError(f"schedule `workspace` must be one of {kernels.WORKSPACES}, got {workspace!r}")
    return workspace


def _workspaces(schedule, parts: int, n: int, dtype, accumulate: bool) -> dict:
    """The zeroed workspace arrays a kernel with global workspaces takes (none for local ones)."""
    if workspace_of(schedule) != "global":
        return {}
    out = {"mark_ws": np.zeros(parts * n, np.int32)}
    if accumulate:
        out["acc_ws"] = np.zeros(parts * n, dtype)
    return out


# ------------------------------------------------------------------ operands
def operand(A, name: str) -> scipy.sparse.csr_matrix:
    """`A` as a checked canonical CSR matrix (native index and value dtypes).

    A CSR matrix that already is one is remembered by the identity of its `indptr`/`indices`
    (`operands.STRUCTURES`, as `sp.ops` remembers checked structures): a later call with the same arrays checks its
    values only (O(1)), not its O(nnz) structure. Changing the arrays in place afterwards is not
    detected."""
    if not scipy.sparse.issparse(A):
        raise InputError(f"`{name}` must be a scipy sparse matrix, got {type(A).__name__}")
    if A.format == "csr" and isinstance(getattr(A, "indptr", None), np.ndarray) and structure_checked(A):
        check_values(A.data, len(A.indices), name)
        if A.data.dtype in VALUE_DTYPES and A.data.flags.c_contiguous:
            return A
    C = canonical(native(check_matrix(A, name)))
    if C is A:
        remember_structure(A)
    return C


def _common(mats: list, wide: bool = False) -> tuple[list, np.dtype, np.dtype]:
    """The matrices with one index dtype (int64 if any has it, or `wide`) and their value dtype."""
    idtype = np.dtype(np.int64) if wide or any(M.indices.dtype == np.int64 for M in mats) else np.dtype(np.int32)
    dtype = np.dtype(np.float32) if all(M.dtype == np.float32 for M in mats) else np.dtype(np.float64)
    out = []
    for M in mats:
        if M.indices.dtype != idtype:
            M = _csr((M.data, M.indices.astype(idtype), M.indptr.astype(idtype)), M.shape, type(M))
        out.append(M)
    return out, idtype, dtype


def _csr(arrays: tuple, shape: tuple[int, int], cls) -> scipy.sparse.csr_matrix:
    """A canonical CSR matrix of `cls` holding exactly these arrays (scipy's constructor would
    narrow int64 indices that fit int32): a shallow copy of a canonical matrix of `cls` that
    scipy's constructor made once (`_template`), with these arrays and this shape. The
    constructor's checks cost 13-30 us a call, as much as a small product's kernel."""
    data, indices, indptr = arrays
    template = _template(cls)
    if template is None:
        C = cls((data, indices, indptr), shape=shape, copy=False)
        C.data, C.indices, C.indptr = data, indices, indptr
    else:
        C = object.__new__(cls)
        C.__dict__.update(template.__dict__)
        C.data, C.indices, C.indptr = data, indices, indptr
        C._shape = (int(shape[0]), int(shape[1]))
        return C  # canonical as the template is (its flags copied: scipy's setters cost 3-5 us)
    C.has_sorted_indices = True
    C.has_canonical_format = True
    return C


@functools.cache
def _template(cls):
    """An empty canonical matrix of `cls` whose attributes (scipy's `_shape` among them) a result
    copies, or None where this scipy keeps its shape elsewhere (then `_csr` calls the constructor)."""
    empty = (np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(1, np.int32))
    template = cls(empty, shape=(0, 0))
    template.has_sorted_indices = True
    template.has_canonical_format = True
    probe = object.__new__(cls)
    probe.__dict__.update(template.__dict__)
    probe._shape = (1, 0)
    probe.indptr = np.zeros(2, np.int32)
    if "_shape" not in template.__dict__ or probe.shape != (1, 0) or probe.nnz != 0:
        return None
    return template


def _result_class(A) -> type:
    return scipy.sparse.csr_array if isinstance(A, scipy.sparse.sparray) else scipy.sparse.csr_matrix


def _threads(threads, target: str, work: int, grain: int | None = None) -> dict:
    """The kernels' `threads=`: one thread below `grain` (`parallel_grain()`) of work on the CPU
    (the caller's `threads=`, checked as `sp.ops` checks it, is a cap), else the caller's."""
    threads = check_threads(threads, target)
    grain = parallel_grain() if grain is None else grain
    if target == "cpu" and work < grain:
        return {"threads": 1}
    return thread_args(target, work, threads, grain=grain)


def _scalar(value, name: str) -> float:
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise InputError(f"`{name}` must be a real number, got {value!r}")
    return value


def _parts(schedule, thread_args: dict, m: int, n: int = 0) -> int:
    """How many chunks of rows: `schedule.rows_per_part` rows each (a CUDA block's), else
    `schedule.parts_per_thread` per thread (0: one chunk), no more than one per thread where more
    would allocate over WORKSPACE_BYTES of workspaces (12 bytes per column and chunk)."""
    rows = getattr(schedule, "rows_per_part", None)
    if rows is not None:
        return max(1, -(-m // rows))
    per_thread = getattr(schedule, "parts_per_thread", 1)
    if per_thread == 0:
        return 1
    threads = current_threads(thread_args.get("threads"))
    return max(1, threads, min(per_thread * threads, WORKSPACE_BYTES // max(1, 12 * n)))


# ------------------------------------------------------------------ SpGEMM
def spgemm(
    A, B, mask=None, *, target: str = "cpu", schedule: Callable | str | None = None, threads: int | None = None
) -> scipy.sparse.csr_matrix:
    """`A @ B` for scipy sparse `A` and `B`, canonical CSR out (see the module's docstring).

    With `mask=M` (a sparse matrix of the result's shape) only the coordinates `M` stores are
    computed: `(A @ B)` restricted to M's structure, as triangle counting needs (`M = A`).

    >>> import numpy as np, sparsetir_py as sp
    >>> from sparsetir_py.ops import spgemm
    >>> A = sp.data.load_matrix("karate")
    >>> C = spgemm(A, A)
    >>> C.has_canonical_format, bool(abs(C - A @ A).max() < 1e-4)
    (True, True)
    >>> int(spgemm(A, A, mask=A).sum()) // 6   # triangles of the karate club
    45
    """
    chosen, schedule = schedule, resolve_schedule("spgemm", target, schedule)
    cls = _result_class(A)
    A, B = operand(A, "A"), operand(B, "B")
    if A.shape[1] != B.shape[0]:
        raise InputError(f"`A` and `B` do not multiply: shapes {A.shape} and {B.shape}")
    shape = (A.shape[0], B.shape[1])
    mats = [A, B]
    if mask is not None:
        mask = operand(mask, "mask")
        if mask.shape != shape:
            raise InputError(f"`mask` must have the result's shape {shape}, got {mask.shape}")
        if shape[0] > MASKED_ROWS:
            raise InputError(f"`mask`: a masked product takes at most {MASKED_ROWS} rows, got {shape[0]}")
        mats.append(mask)
    mats, idtype, dtype = _common(mats)
    A, B = mats[:2]
    m, k = A.shape
    n = shape[1]
    names = {"idtype": DTYPE_NAMES[idtype], "dtype": DTYPE_NAMES[dtype], "target": target, "schedule": schedule}
    # The symbolic pass is balanced by A's nonzeros; it measures each row's work (the lengths of
    # the rows of B it selects), which balances the numeric pass.
    thread_args = _threads(threads, target, A.nnz + B.nnz)
    if chosen is None and target == "cpu" and 12 * n > WORKSPACE_BYTES:
        # Rows so wide that one dense workspace per thread would not fit the budget: hash tables
        # sized by the widest row of the result instead.
        from schedules import spgemm as shipped

        schedule = names["schedule"] = shipped.cpu_hash
    if mask is None and target == "cpu" and workspace_of(schedule) == "local":
        fused = _spgemm_fused(A, B, shape, cls, names, schedule, threads, default=chosen is None)
        if fused is not None:
            return fused
    parts = _parts(schedule, thread_args, m, n)
    hashed = mask is None and workspace_of(schedule) == "hash"
    work = work_prefix(A.indptr, A.indices, B.indptr) if hashed or (mask is not None and _irregular(A)) else None
    bounds = chunk_bounds(A.indptr if work is None else work, parts)
    sizes = {"m": m, "k": k, "n": n, "parts": len(bounds) - 1, "nnz_a": A.nnz, "nnz_b": B.nnz}
    operands = {"a_indptr": A.indptr, "a_indices": A.indices, "b_indptr": B.indptr, "b_indices": B.indices}
    values = {"a_data": A.data.astype(dtype, copy=False), "b_data": B.data.astype(dtype, copy=False)}
    if mask is not None:
        M = mats[2]
        if chosen is None and target == "cpu" and thread_args.get("threads") == 1:
            # One thread: the product and its compaction in one compiled call (`ops.driver`).
            data, indices, indptr = _small_driver("masked", names["idtype"], names["dtype"])(
                A.indptr, A.indices, A.data.astype(dtype, copy=False), B.indptr, B.indices,
                B.data.astype(dtype, copy=False), M.indptr, M.indices, m, k, n,
            )  # fmt: skip
            return _from_driver((data, indices, indptr), shape, cls)
        t_data, t_indices = np.empty(M.nnz, dtype), np.empty(M.nnz, idtype)
        # Each row's count written after a leading slot and summed in place (the counts sum to at
        # most the mask's nnz): the result's indptr, with no array of the rows' length besides.
        indptr = np.empty(m + 1, idtype)
        prefetch = target == "cpu" and _scattered(A, B, idtype, dtype)
        _launch(kernel("masked_prefetch" if prefetch else "masked", **names), thread_args, {
            **operands, **values, **sizes, "m_indptr": M.indptr, "m_indices": M.indices, "nnz_m": M.nnz,
            "c_data": t_data, "c_indices": t_indices, "c_count": indptr[1:], "bounds": bounds,
            **_workspaces(schedule, sizes["parts"], n, dtype, True),
        })  # fmt: skip
        return _compacted(t_data, t_indices, M.indptr, prefix_in_place(indptr), shape, cls, names, bounds, thread_args)
    counts = np.empty(m, idtype)
    # A hash table twice the widest row: at most the row's multiply-adds, at most n.
    hsize = {"hsize": table_size(min(int(np.diff(work).max(initial=0)), n))} if hashed else {}
    work = np.empty(m, np.int64)
    _launch(kernel("count", **names), thread_args, {
        **operands, **sizes, "c_count": counts, "c_work": work, "bounds": bounds,
        **_workspaces(schedule, sizes["parts"], n, dtype, False), **hsize,
    })  # fmt: skip
    work = prefix(work)
    if threads is None:
        thread_args = _threads(None, target, int(work[-1]))
    bounds = chunk_bounds(work, parts)
    sizes["parts"] = len(bounds) - 1
    indptr = prefix(counts)
    if indptr[-1] > _INT32_MAX and idtype == np.int32:
        # The result needs 64-bit positions: the same product with int64 structure arrays.
        A, B = _common([A, B], wide=True)[0]
        return spgemm(A, B, target=target, schedule=schedule, threads=threads)
    indptr = indptr.astype(idtype, copy=False)
    nnz = int(indptr[-1])
    data, indices = np.empty(nnz, dtype), np.empty(nnz, idtype)
    _launch(kernel("numeric", **names), thread_args, {
        **operands, **values, **sizes, "c_data": data, "c_indptr": indptr, "c_indices": indices, "nnz_c": nnz,
        "bounds": bounds, **_workspaces(schedule, sizes["parts"], n, dtype, True),
        **({"hsize": table_size(int(counts.max(initial=0)))} if hashed else {}),
    })  # fmt: skip
    return _csr((data, indices, indptr), shape, cls)


#: The one-pass SpGEMM writes rows into room for their bound (min(work, n + 1) entries each), of which
#: only the pages written are ever backed by memory; past this many bytes of room (virtual), the
#: product runs the symbolic pass first instead and allocates its exact size.
FUSED_ROOM_BYTES = 1 << 34
#: The host's per-row arrays are kept between calls up to this many bytes each (`_ROWS`);
#: `release_scratch()` frees them.
SCRATCH_BYTES = 1 << 28


def release_scratch() -> None:
    """Free the per-row arrays that SpGEMM and the merges keep between calls."""
    _ROWS.clear()


#: Per-row arrays of the host steps (each row's work and room, their prefix sums, its count),
#: kept between calls: on a mesh of 160,000 rows, faulting in the fresh
#: ones cost about as much as a tenth of the product.
_ROWS: dict[tuple[str, int, np.dtype], np.ndarray] = {}


def _take_rows(name: str, count: int, size: int, dtype) -> tuple[np.ndarray, ...]:
    """`count` kept arrays of at least `size` entries of `dtype` for `name` (taken out while in
    use, so that concurrent calls never share them), else new ones; `_keep_rows(name, ...)` gives
    them back."""
    arrays = []
    for i in range(count):
        kept = _ROWS.pop((name, i, np.dtype(dtype)), None)
        arrays.append(kept if kept is not None and len(kept) >= size else np.empty(size, dtype))
    return tuple(arrays)


def _keep_rows(name: str, *arrays: np.ndarray) -> None:
    for i, arr in enumerate(arrays):
        if arr.nbytes <= SCRATCH_BYTES:
            _ROWS[(name, i, arr.dtype)] = arr


def _spgemm_fused(
    A, B, shape, cls, names: dict, schedule, threads, default: bool = False
) -> scipy.sparse.csr_matrix | None:
    """`A @ B` in one pass over the rows (accumulate, sort, write), no symbolic pass: chunk `p`
    writes its rows one after the other from `t_start[p]`, room for its rows' bounds, in the
    result's own arrays; the chunks after the first move down (`_move_chunks`) and the arrays
    shrink to the result's size (`ndarray.resize`: a reallocation in place, nothing copied).
    None where the room would pass `FUSED_ROOM_BYTES` or the index dtype. With the `default`
    schedule, a call on one thread runs the kernels of `cpu_serial` (no parallel region to
    launch: measured a quarter of a small product's time)."""
    m, n = shape
    k = A.shape[1]
    idtype, dtype = np.dtype(names["idtype"]), np.dtype(names["dtype"])
    structure = {"a_indptr": A.indptr, "a_indices": A.indices, "b_indptr": B.indptr}
    estimate = _threads(threads, "cpu", A.nnz, ewise_grain())  # a gather per nonzero of A
    if default and estimate.get("threads") == 1:
        small = _small_product(A, B, shape, cls, names, threads)
        if small is not None:
            return small
    bounds = chunk_bounds(A.indptr, _parts(schedule, estimate, m, n))
    # Each row's work and room written after a leading slot; the work summed in place (its prefix
    # sum balances the chunks), the room summed over each chunk only (where the chunks start).
    kept = _take_rows("spgemm", 2, m + 1, np.int64)
    work, room = kept[0][: m + 1], kept[1][: m + 1]
    _launch(kernel("work", **_serial_on_one(names, estimate, default)), estimate, {
        **structure, "c_work": work[1:], "c_room": room[1:], "bounds": bounds, "m": m, "k": k, "n": n,
        "parts": len(bounds) - 1, "nnz_a": A.nnz,
    })  # fmt: skip
    prefix_in_place(work)
    nnz_t = int(room[1:].sum())
    if nnz_t * (idtype.itemsize + dtype.itemsize) > FUSED_ROOM_BYTES or (nnz_t > _INT32_MAX and idtype == np.int32):
        _keep_rows("spgemm", *kept)
        return None
    thread_args = _threads(threads, "cpu", int(work[-1]))
    bounds = chunk_bounds(work, _parts(schedule, thread_args, m, n))
    parts = len(bounds) - 1
    t_start = np.zeros(parts + 1, np.int64)
    for p in range(parts):
        t_start[p + 1] = t_start[p] + room[1 + bounds[p] : 1 + bounds[p + 1]].sum()
    # The chunks write the result's own arrays (room for every row; only the pages written are
    # faulted in), the chunks after the first then move down in place.
    t_data, t_indices = np.empty(nnz_t, dtype), np.empty(nnz_t, idtype)
    # The result's indptr: each row's end within its chunk written after a leading slot, the
    # chunks before it added afterwards (the ends are at most nnz_t, which fits the index dtype).
    indptr = np.empty(m + 1, idtype)
    # Rows of B read in no order the hardware follows (a graph numbered at random) are prefetched.
    fused = "fused_prefetch" if _scattered(A, B, idtype, dtype) else "fused"
    _launch(kernel(fused, **_serial_on_one(names, thread_args, default)), thread_args, {
        **structure, "a_data": A.data.astype(dtype, copy=False), "b_data": B.data.astype(dtype, copy=False),
        "b_indices": B.indices, "t_data": t_data, "t_indices": t_indices, "t_start": t_start, "c_end": indptr[1:],
        "w_prefix": work, "bounds": bounds, "m": m, "k": k, "n": n, "parts": parts, "nnz_a": A.nnz, "nnz_b": B.nnz,
        "nnz_t": len(t_data),
    })  # fmt: skip
    _keep_rows("spgemm", *kept)
    indptr[0] = 0
    for p in range(1, parts):
        indptr[bounds[p] + 1 : bounds[p + 1] + 1] += indptr[bounds[p]]
    nnz = int(indptr[-1])
    _move_chunks(t_data, t_indices, t_start, indptr, bounds, names, thread_args)
    t_data.resize(nnz, refcheck=False)
    t_indices.resize(nnz, refcheck=False)
    return _csr((t_data, t_indices, indptr), shape, cls)


def _scattered(A, B, idtype: np.dtype, dtype: np.dtype) -> bool:
    """Whether `A @ B` reads B's rows all over B (`host.scattered`), which then get prefetched:
    B's rows measured by their structure and values, on average."""
    row_bytes = B.nnz * (idtype.itemsize + dtype.itemsize) / max(B.shape[0], 1) + idtype.itemsize
    return scattered(A.indptr, A.indices, B.shape[0], row_bytes)


def _small_product(A, B, shape, cls, names: dict, threads) -> scipy.sparse.csr_matrix | None:
    """`A @ B` on one thread by the compiled driver of `cpu_serial`'s two kernels (`ops.driver`:
    the host steps in Python cost three to five times a small product's kernels), or None where
    its work reaches the parallel grain (more threads pay; not capped at one by `threads=`) or,
    with `threads=1`, `DRIVER_WORK` (the kernels on one thread pay), or
    its room passes `FUSED_ROOM_BYTES` or the index dtype."""
    run = _small_driver("spgemm", names["idtype"], names["dtype"])
    idtype, dtype = np.dtype(names["idtype"]), np.dtype(names["dtype"])
    limit = DRIVER_WORK if threads == 1 else parallel_grain()
    room_limit = FUSED_ROOM_BYTES // (idtype.itemsize + dtype.itemsize)
    if idtype == np.int32:
        room_limit = min(room_limit, _INT32_MAX)
    (m, k), n = A.shape, shape[1]
    done, data, indices, indptr = run(
        A.indptr, A.indices, A.data.astype(dtype, copy=False),
        B.indptr, B.indices, B.data.astype(dtype, copy=False), m, k, n, limit, room_limit,
    )  # fmt: skip
    return _from_driver((data, indices, indptr), shape, cls) if done else None


def _from_driver(arrays: tuple, shape, cls) -> scipy.sparse.csr_matrix:
    """The result of a compiled driver: copies that numpy owns (a Numba array's memory belongs to
    its runtime, and a driver's arrays may be views cut from their room)."""
    return _csr(tuple(a.copy() for a in arrays), shape, cls)


@functools.cache
def _small_driver(op: str, idtype: str, dtype: str):
    """The compiled driver of `op`'s one-thread calls around `cpu_serial`'s kernels (`ops.driver`)."""
    from schedules import spgemm as shipped

    names = {"idtype": idtype, "dtype": dtype, "target": "cpu", "schedule": shipped.cpu_serial}
    if op == "spgemm":
        return spgemm_driver(kernel("work", **names), kernel("fused", **names))
    if op == "masked":
        return masked_driver(kernel("masked", **names), kernel("compact", **names))
    if op.startswith("same_"):
        return same_driver(kernel(op, **names))
    return ewise_driver(kernel(op, **names))


#: The most work a compiled driver takes on (`threads=1`: multiply-adds of a product, merged
#: entries of `add`). A driver's arrays are Numba's, fresh each call, and copied into numpy's at
#: the end: past these sizes their page faults and the copy cost more than the host steps the
#: driver saves (one thread, paired: a 90k-row mesh's `A @ A`, 4M multiply-adds, 28 ms by the
#: driver against 16 ms by the kernels; its `A + R`, 900k entries, 3.6 ms against 2.2 ms; the
#: two break even near 300k multiply-adds and 100k entries).
DRIVER_WORK = 1 << 18
DRIVER_ENTRIES = 1 << 17


def _serial_on_one(names: dict, thread_args: dict, default: bool) -> dict:
    """`names` with the `cpu_serial` schedule where the default schedule runs on one thread."""
    if not default or thread_args.get("threads") != 1:
        return names
    from schedules import spgemm as shipped

    return {**names, "schedule": shipped.cpu_serial}


def _move_chunks(t_data, t_indices, t_start, indptr, bounds, names: dict, thread_args: dict) -> None:
    """Chunks of rows written one after the other from `t_start[p]` moved down to their `indptr`
    positions in the same arrays (the first chunk is there already). Where every chunk's target
    lies below every chunk's source, the rows after the first chunk are copied in pieces of
    equal size, one per thread; else the chunks move one after the other in order on one thread
    (a chunk's target never reaches past its own start)."""
    parts = len(bounds) - 1
    m, nnz = len(indptr) - 1, int(indptr[-1])
    if parts == 1 or np.all(t_start[1:-1] == indptr[bounds[1:-1]]):
        return
    sizes = {"m": m, "nnz_t": len(t_indices), "nnz_c": nnz}
    threads = current_threads(thread_args.get("threads"))
    first = int(bounds[1])
    if t_start[1] < nnz or threads < 2:
        move_down((t_data, t_indices), t_start, indptr, bounds)
        return
    # Pieces of equal nnz over the rows after the first chunk, cut also at the chunks' bounds.
    goals = indptr[first] + (nnz - int(indptr[first])) * np.arange(1, threads) // threads
    cuts = np.searchsorted(indptr[first:], goals) + first
    pieces = np.unique(np.concatenate([bounds[1:], cuts.astype(np.int32)])).astype(np.int32)
    chunk = np.searchsorted(bounds, pieces[:-1], side="right") - 1
    sources = np.empty(len(pieces), np.int64)
    sources[:-1] = t_start[chunk] + (indptr[pieces[:-1]] - indptr[bounds[chunk]])
    sources[-1] = t_start[-1]
    _launch(kernel("compact_chunks", **names), thread_args, {
        "t_data": t_data, "t_indices": t_indices, "t_start": sources, "c_data": t_data[:nnz],
        "c_indices": t_indices[:nnz], "c_indptr": indptr, "bounds": pieces, "parts": len(pieces) - 1, **sizes,
    })  # fmt: skip


def _irregular(A) -> bool:
    """Whether A's rows differ so much in length (a power-law graph's hubs) that balancing a
    masked product by A's nonzeros would leave threads idle, and its work is worth measuring (a
    gather over A's nonzeros: as long as the product itself on a mesh)."""
    lengths = np.diff(A.indptr)
    return len(lengths) > 0 and int(lengths.max()) > 8 * max(1.0, A.nnz / len(lengths))


def _compacted(t_data, t_indices, t_start, indptr, shape, cls, names: dict, bounds, thread_args: dict):
    """The result from rows written at `t_start[i]` (`indptr` the result's): the same arrays
    when every row filled its room, else the rows moved down to their canonical positions in
    the same arrays by `compact` (one chunk, rows in order: a row's target never reaches past
    its own room, so no row is overwritten before it moves) and the arrays shrunk to the
    result's size (`ndarray.resize`, in place). Moving in place touches no new memory: here a
    fresh array costs more to fault in, page by page, than the copy itself."""
    idtype = t_indices.dtype
    nnz = int(indptr[-1])
    if nnz != len(t_indices) and names["target"] != "cpu":
        # A CUDA kernel's arguments are copied to the device one by one: the same host array
        # passed twice would come back twice, so the rows move into new arrays there.
        data, indices = np.empty(nnz, t_data.dtype), np.empty(nnz, idtype)
        _launch(kernel("compact", **names), thread_args, {
            "t_data": t_data, "t_indices": t_indices, "t_start": np.ascontiguousarray(t_start), "c_data": data,
            "c_indices": indices, "c_indptr": indptr, "bounds": bounds, "m": shape[0], "parts": len(bounds) - 1,
            "nnz_t": len(t_indices), "nnz_c": nnz,
        })  # fmt: skip
        return _csr((data, indices, indptr), shape, cls)
    if nnz != len(t_indices):
        _launch(kernel("compact", **names), {"threads": 1}, {
            "t_data": t_data, "t_indices": t_indices, "t_start": np.ascontiguousarray(t_start),
            "c_data": t_data[:nnz], "c_indices": t_indices[:nnz], "c_indptr": indptr,
            "bounds": np.array([0, shape[0]], np.int32), "m": shape[0], "parts": 1, "nnz_t": len(t_indices),
            "nnz_c": nnz,
        })  # fmt: skip
        t_data.resize(nnz, refcheck=False)
        t_indices.resize(nnz, refcheck=False)
    return _csr((t_data, t_indices, indptr), shape, cls)


# ------------------------------------------------------------------ element-wise
def add(
    A,
    B,
    alpha: float = 1.0,
    beta: float = 1.0,
    *,
    target: str = "cpu",
    schedule: Callable | str | None = None,
    threads: int | None = None,
) -> scipy.sparse.csr_matrix:
    """`alpha * A + beta * B` over the union of the structures (see the module's docstring).

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import add
    >>> A = sp.data.load_matrix("karate")
    >>> bool(abs(add(A, A.T, 2.0, -1.0) - (2 * A - A.T)).max() < 1e-6)
    True
    """
    scalars = {"alpha": _scalar(alpha, "alpha"), "beta": _scalar(beta, "beta")}
    return _ewise("add", A, B, scalars, target, schedule, threads)


def multiply(
    A, B, *, target: str = "cpu", schedule: Callable | str | None = None, threads: int | None = None
) -> scipy.sparse.csr_matrix:
    """`A * B` element-wise over the intersection of the structures (see the module's docstring).

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import multiply
    >>> A = sp.data.load_matrix("karate")
    >>> bool(abs(multiply(A, A.T) - A.multiply(A.T)).max() < 1e-6)
    True
    """
    return _ewise("multiply", A, B, {}, target, schedule, threads)


def _ewise(op: str, A, B, scalars: dict, target: str, schedule, threads) -> scipy.sparse.csr_matrix:
    default, schedule = schedule is None, resolve_schedule("spgemm", target, schedule)
    cls = _result_class(A)
    A, B = operand(A, "A"), operand(B, "B")
    if A.shape != B.shape:
        raise InputError(f"`A` and `B` must have the same shape, got {A.shape} and {B.shape}")
    (A, B), idtype, dtype = _common([A, B])
    m = A.shape[0]
    if _maybe_same_level(A, B):
        C = _ewise_same_level(op, A, B, scalars, target, schedule, threads, idtype, dtype, cls, default)
        if C is not None:
            return C
    # The work prefix |A|_i + |B|_i is summed in the index dtype: where it outgrows int32, both
    # operators widen (an intersection's room fits, but its rows are balanced by the work).
    if A.nnz + B.nnz > _INT32_MAX and idtype == np.int32:
        (A, B), idtype, dtype = _common([A, B], wide=True)
    # A row's work is the entries the merge walks (the prefix |A|_i + |B|_i, which is also where
    # a union's row may start writing: it writes at most |A_i| + |B_i| entries); an intersection
    # writes at most |A_i|, so its rows start at A's own row bounds (or B's, the fewer). Summed into
    # kept arrays in the index dtype (the sums fit it): fresh ones would be faulted in page by page.
    thread_args = _threads(threads, target, A.nnz + B.nnz, ewise_grain())
    names = {"idtype": DTYPE_NAMES[idtype], "dtype": DTYPE_NAMES[dtype], "target": target, "schedule": schedule}
    if default and target == "cpu" and thread_args.get("threads") == 1 and A.nnz + B.nnz < DRIVER_ENTRIES:
        # One thread: the host steps and the merge in one compiled call (`ops.driver`).
        data, indices, indptr = _small_driver(op, names["idtype"], names["dtype"])(
            A.indptr, A.indices, A.data.astype(dtype, copy=False), B.indptr, B.indices,
            B.data.astype(dtype, copy=False), m, op == "add", scalars.get("alpha", 0.0), scalars.get("beta", 0.0),
        )  # fmt: skip
        return _from_driver((data, indices, indptr), A.shape, cls)
    (kept,) = _take_rows("ewise", 1, m + 1, idtype)
    work = np.add(A.indptr, B.indptr, out=kept[: m + 1])
    bounds = chunk_bounds(work, _parts(schedule, thread_args, m))
    start = work if op == "add" else A.indptr if A.nnz <= B.nnz else B.indptr
    room = int(start[-1])
    t_data, t_indices = np.empty(room, dtype), np.empty(room, idtype)
    # Each row's count written after a leading slot and summed in place: the result's indptr.
    indptr = np.empty(m + 1, idtype)
    _launch(kernel(op, **_serial_on_one(names, thread_args, default)), thread_args, {
        "a_data": A.data.astype(dtype, copy=False), "a_indptr": A.indptr, "a_indices": A.indices,
        "b_data": B.data.astype(dtype, copy=False), "b_indptr": B.indptr, "b_indices": B.indices, "c_data": t_data,
        "c_indices": t_indices, "c_start": start, "c_count": indptr[1:], "bounds": bounds, "m": m,
        "parts": len(bounds) - 1, "nnz_a": A.nnz, "nnz_b": B.nnz, "nnz_c": room, **scalars,
    })  # fmt: skip
    prefix_in_place(indptr)
    t_start = start[bounds].astype(np.int64)
    _keep_rows("ewise", kept)
    return _packed(t_data, t_indices, t_start, indptr, A.shape, cls, names, bounds, thread_args)


def _packed(t_data, t_indices, t_start, indptr, shape, cls, names: dict, bounds, thread_args: dict):
    """The result from chunks of rows written one after the other (chunk `p`, rows `bounds[p]`
    to `bounds[p + 1]`, from `t_start[p]`; `indptr` the result's): on the CPU the chunks after
    the first move down to their `indptr` positions in the same arrays, in order on one thread
    (a chunk's target never reaches past its own start, nor the next chunk's), which then shrink
    to the result's size (`ndarray.resize`, in place): moving in place touches no new memory,
    and only the chunks after the first move. On CUDA, `compact_chunks` copies every chunk into
    new arrays (a kernel's arguments are copied to the device one by one: the same host array
    passed twice would come back twice)."""
    nnz = int(indptr[-1])
    parts = len(bounds) - 1
    sizes = {"m": shape[0], "nnz_t": len(t_indices), "nnz_c": nnz}
    if names["target"] != "cpu":
        data, indices = np.empty(nnz, t_data.dtype), np.empty(nnz, t_indices.dtype)
        _launch(kernel("compact_chunks", **names), thread_args, {
            "t_data": t_data, "t_indices": t_indices, "t_start": t_start, "c_data": data, "c_indices": indices,
            "c_indptr": indptr, "bounds": bounds, "parts": parts, **sizes,
        })  # fmt: skip
        return _csr((data, indices, indptr), shape, cls)
    move_down((t_data, t_indices), t_start, indptr, bounds)
    t_data.resize(nnz, refcheck=False)
    t_indices.resize(nnz, refcheck=False)
    return _csr((t_data, t_indices, indptr), shape, cls)


#: `_maybe_same_level` compares every this-many-th row bound and column of the two structures.
SAME_SAMPLES = 64


def _maybe_same_level(A, B) -> bool:
    """Whether A and B may store the same coordinates (canonical CSR: the same indptr and
    indices): the same arrays, or the same nnz and a sample of their row bounds and columns
    alike. Two different structures mostly differ there; the same-level kernel checks the
    rest as it runs."""
    if A.indptr is B.indptr and A.indices is B.indices:
        return True
    if A.nnz != B.nnz:
        return False
    rows, entries = (
        slice(None, None, max(1, len(A.indptr) // SAME_SAMPLES)),
        slice(None, None, max(1, A.nnz // SAME_SAMPLES)),
    )
    return np.array_equal(A.indptr[rows], B.indptr[rows]) and np.array_equal(A.indices[entries], B.indices[entries])


def _ewise_same_level(op: str, A, B, scalars: dict, target: str, schedule, threads, idtype, dtype, cls, default):
    """`op` of two operands that share one level (the lattice's top point at every position),
    the structure copied into the result's arrays and checked by the kernel: None where B's
    differs from A's after all."""
    thread_args = _threads(threads, target, A.nnz + B.nnz, ewise_grain())
    values = (A.data.astype(dtype, copy=False), B.data.astype(dtype, copy=False))
    if default and target == "cpu" and thread_args.get("threads") == 1 and A.nnz < DRIVER_ENTRIES:
        differ, *arrays = _small_driver("same_" + op, DTYPE_NAMES[idtype], DTYPE_NAMES[dtype])(
            A.indptr, A.indices, values[0], B.indptr, B.indices, values[1], A.shape[0],
            scalars.get("alpha", 0.0), scalars.get("beta", 0.0),
        )  # fmt: skip
        return None if differ else _from_driver(tuple(arrays), A.shape, cls)
    m = A.shape[0]
    bounds = chunk_bounds(A.indptr, _parts(schedule, thread_args, m))
    names = {"idtype": DTYPE_NAMES[idtype], "dtype": DTYPE_NAMES[dtype], "target": target, "schedule": schedule}
    data, indices, indptr = np.empty(A.nnz, dtype), np.empty(A.nnz, idtype), np.empty(m + 1, idtype)
    indptr[0] = 0
    differ = np.zeros(len(bounds) - 1, np.int32)
    _launch(kernel("same_" + op, **_serial_on_one(names, thread_args, default)), thread_args, {
        "a_indptr": A.indptr, "a_indices": A.indices, "a_data": values[0], "b_indptr": B.indptr,
        "b_indices": B.indices, "b_data": values[1], "c_indptr": indptr, "c_indices": indices, "c_data": data,
        "differ": differ, "bounds": bounds, "m": m, "parts": len(bounds) - 1, "nnz": A.nnz, **scalars,
    })  # fmt: skip
    return None if differ.any() else _csr((data, indices, indptr), A.shape, cls)
