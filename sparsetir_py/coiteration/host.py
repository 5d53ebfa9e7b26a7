"""The host side of assembled outputs: what runs between the kernels of `coiteration.kernels`
(row chunks of equal work, the prefix sum that turns per-row counts into `indptr`, the
allocation of the output, the compaction of merged rows), shared by `sp.ops.spgemm` / `add` /
`multiply` and by the `AssembledKernel` that `sp.build` makes of a script with an assembled
output (`coiteration.assemble`).

    kernel = sp.compile(script)        # a script with `T.sparse_variable(..., assemble=True)`
    out = kernel(a=..., indptr_a=..., ...)
    out["indptr_c"], out["indices_c"], out["c"], out["nnz_c"]
"""

from __future__ import annotations

import bisect
import numbers

import numba
import numpy as np

from ..errors import InputError
from ..inputs import check_compressed
from ..omp import current_threads, grain

#: Dense SpGEMM workspaces take 12 bytes per column and chunk; an assembled kernel makes fewer
#: chunks rather than pass this many bytes of them.
WORKSPACE_BYTES = 1 << 28
#: Below this much work (multiply-adds of SpGEMM, each a few ns with its share of the sort) a
#: CPU call runs on one thread: waking Numba's thread pool costs more than it saves. Where idle
#: OpenMP threads sleep (`omp.threads_sleep`) a wake-up costs 45-70 us; where they
#: spin after each region (OpenMP's default) about 1.5 us, and two threads already win on
#: products of 16k multiply-adds (paired, 2 threads: pygsp_minnesota's A @ A 0.84x -> 1.06x
#: scipy, 4elt's 1.25x -> 1.6x).
PARALLEL_GRAIN_SLEEPING = 1 << 15
PARALLEL_GRAIN_SPINNING = 1 << 14
#: The same for the element-wise merges, whose steps (an entry merged) cost about a nanosecond
#: (spinning threads: polblogs' A + R 1.21x -> 1.72x scipy, A .* R 1.68x -> 2.22x).
EWISE_GRAIN_SLEEPING = 1 << 17
EWISE_GRAIN_SPINNING = 1 << 14
#: Overrides of the grains above (None: by how idle threads wait); tests set them to 0 to run
#: the parallel paths on small inputs.
PARALLEL_GRAIN: int | None = None
EWISE_GRAIN: int | None = None
#: The masked kernel marks the mask's columns of row i with 2i + 2 and 2i + 3 in an int32 workspace.
MASKED_ROWS = (int(np.iinfo(np.int32).max) - 3) // 2


def parallel_grain() -> int:
    """`PARALLEL_GRAIN` if set, else the SpGEMM grain for how this process's idle threads wait."""
    return grain(PARALLEL_GRAIN, PARALLEL_GRAIN_SLEEPING, PARALLEL_GRAIN_SPINNING)


def ewise_grain() -> int:
    """`EWISE_GRAIN` if set, else the element-wise grain for how this process's idle threads wait."""
    return grain(EWISE_GRAIN, EWISE_GRAIN_SLEEPING, EWISE_GRAIN_SPINNING)


def chunk_bounds(weight_prefix: np.ndarray, parts: int) -> np.ndarray:
    """Row boundaries of `parts` chunks of equal weight (row `i` weighs `weight_prefix[i + 1] -
    weight_prefix[i]` plus one, so that empty rows are spread too): int32, `parts + 1` entries.

    A binary search per boundary over `weight_prefix[i] + i`, read where the search looks: no
    array of the rows' length is made (a new one is faulted in page by page, which here costs
    more than the search)."""
    m = len(weight_prefix) - 1
    parts = max(1, min(parts, m))
    cumulative = lambda i: int(weight_prefix[i]) + i  # noqa: E731
    total = cumulative(m)
    bounds = np.zeros(parts + 1, np.int32)
    for p in range(1, parts):
        goal = total * p // parts
        # The row boundary nearest to the goal, so that a heavy row across it ends its chunk or
        # starts the next instead of dragging its neighbours along.
        after = min(bisect.bisect_left(range(m + 1), goal, key=cumulative), m)
        before = max(after - 1, 0)
        bounds[p] = before if goal - cumulative(before) < cumulative(after) - goal else after
    bounds[-1] = m
    return np.maximum.accumulate(bounds)


@numba.njit(boundscheck=False, cache=True, nogil=True)
def _running_sum(counts, out):
    total = out.dtype.type(0)
    for t in range(counts.size):
        total += counts[t]
        out[t] = total


def running_sum(counts: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`out[t] = counts[0] + ... + counts[t]` in `out`'s dtype (`out` may be `counts`): what
    `np.cumsum(counts, out=out)` computes, compiled (numpy's integer accumulate runs a generic
    loop: 64k int64 counts, 170 us against 22 us). Returns `out`."""
    if counts.size != out.size:
        raise ValueError(f"running_sum: {counts.size} counts into {out.size} entries")
    if counts.size:
        _running_sum(counts, out)
    return out


def prefix(counts: np.ndarray) -> np.ndarray:
    """indptr from per-row counts: the prefix sum (int64, so that it cannot wrap)."""
    indptr = np.empty(len(counts) + 1, np.int64)
    indptr[0] = 0
    running_sum(counts, indptr[1:])
    return indptr


def prefix_in_place(counts: np.ndarray) -> np.ndarray:
    """`counts[1:]` (per-row counts, written by a kernel after a leading slot) replaced by their
    running sum and `counts[0]` by 0: an indptr made in the same array (a new one would be faulted
    in page by page). The sums must fit the array's dtype. Returns `counts`."""
    counts[0] = 0
    running_sum(counts[1:], counts[1:])
    return counts


def move_down(arrays: tuple[np.ndarray, ...], t_start: np.ndarray, indptr: np.ndarray, bounds: np.ndarray) -> None:
    """Chunks of rows written one after the other (chunk `p`: rows `bounds[p]` to `bounds[p + 1]`,
    from `t_start[p]`) moved down to their `indptr` positions in the same arrays, in order: a
    chunk's target never reaches past its own start (a chunk holds at most its room), so each
    move reads nothing an earlier one wrote. numpy copies an overlapping slice of the same array
    as `memmove` does (no temporary): 4elt's second chunk (144k entries) 28 us an array, where a
    compiled loop, which cannot tell that the two ranges are one array, ran 3x slower."""
    for p in range(1, len(bounds) - 1):
        lo, hi, src = int(indptr[bounds[p]]), int(indptr[bounds[p + 1]]), int(t_start[p])
        if src != lo:
            for arr in arrays:
                arr[lo:hi] = arr[src : src + hi - lo]


def table_size(widest: int) -> int:
    """Slots of a hash workspace for rows of at most `widest` entries: a power of two, at least
    twice that (linear probing stays short at half load)."""
    return 1 << max(1, (2 * widest - 1).bit_length())


#: A product prefetches the rows of B ahead (`kernels.PREFETCH_BLOCK`) where at least
#: `FAR_FRACTION` of a sample of A's nonzeros select a row of B farther than `REACH_BYTES` of B
#: from the row of A itself: rows read in no order the hardware's prefetcher can follow. Against
#: the plain kernel, each run in its own process paired with scipy (2 threads): R-MAT of 32k rows
#: 1.05-1.15x faster, Chung-Lu 40k 1.1x, Delaunay 50k numbered at random 1.2-1.4x, their masked
#: products 1.1-1.2x; on a 2-D mesh, whose rows select rows of B next to their own, prefetching
#: cost 7-12% (it is not chosen there).
REACH_BYTES = 1 << 20
FAR_FRACTION = 1 / 20
FAR_SAMPLES = 4096


def scattered(a_indptr: np.ndarray, a_indices: np.ndarray, b_rows: int, b_row_bytes: float) -> bool:
    """Whether a product's reads of B's rows (`b_rows` of them, `b_row_bytes` each on average) are
    scattered (see `REACH_BYTES`): from a sample of `FAR_SAMPLES` of A's nonzeros, evenly spaced,
    and their rows (a binary search each)."""
    nnz = len(a_indices)
    reach = REACH_BYTES / max(b_row_bytes, 1.0)
    if nnz == 0 or reach >= max(len(a_indptr) - 1, b_rows):
        return False  # every row of B lies within reach of every row of A (a small product)
    positions = np.linspace(0, nnz - 1, min(nnz, FAR_SAMPLES)).astype(np.int64)
    rows = np.searchsorted(a_indptr, positions, side="right") - 1
    far = np.abs(a_indices[positions].astype(np.int64) - rows) > reach
    return bool(far.mean() >= FAR_FRACTION)


def work_prefix(a_indptr: np.ndarray, a_indices: np.ndarray, b_indptr: np.ndarray) -> np.ndarray:
    """The prefix sum of each row's multiply-adds in `A @ B` (the lengths of the rows of B that
    the row of A selects)."""
    selected = np.empty(len(a_indices) + 1, np.int64)
    selected[0] = 0
    running_sum(np.diff(b_indptr)[a_indices], selected[1:])
    return selected[a_indptr]


class AssembledKernel:
    """The kernel of a script with an assembled output: the Stage III kernels of its assembly
    (`coiteration.assemble.Assembly`) run in order with the host steps between them. Called
    with the script's arguments less the output's (by name, or by position in the script's
    order); returns the output's arrays keyed by its parameter names: `indptr`, `indices`
    (sorted within rows), values and, where the script names one, `nnz`."""

    def __init__(self, plan, kernels: dict, target: str):
        self.plan = plan
        self.kernels = kernels  #: role -> built Kernel ("spgemm_count", "spgemm_numeric" / "merge", "compact")
        self.target = target
        self.source = "\n\n".join(k.source for k in kernels.values())
        self.specialized: dict = {}

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(self.plan.params)

    def __repr__(self) -> str:
        return f"<AssembledKernel {self.plan.op} ({', '.join(self.kernels)}) target={self.target}>"

    def __call__(self, *args, check_structure: bool = True, threads: int | None = None, **kwargs) -> dict:
        plan = self.plan
        if len(args) > len(plan.params):
            raise InputError(f"the kernel takes {len(plan.params)} arguments, got {len(args)}")
        values = {**dict(zip(plan.params, args)), **kwargs}
        out = plan.output
        given = [n for n in (out["values"], out["indptr"], out["indices"], out["nnz"]) if n in values]
        if given:
            raise InputError(f"argument `{given[0]}` belongs to the assembled output: the kernel returns it")
        for name in values:
            if name not in plan.params and name not in self.specialized:
                raise InputError(f"unknown argument `{name}`: the kernel takes {', '.join(plan.params)}")
        missing = [p for p in plan.params if p not in values and p not in self.specialized]
        if missing:
            raise InputError(f"missing argument `{missing[0]}`")
        values = {**self.specialized, **values}
        for name in plan.scalars:
            v = values[name]
            if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Real):
                raise InputError(f"argument `{name}` must be a number ({self.plan.dtype}), got {type(v).__name__}")
        ops = [self._operand(o, values, check_structure) for o in plan.operands]
        extra = {} if threads is None else {"threads": threads}
        if self.target == "cpu" and sum(len(o[2]) for o in ops) < ewise_grain():
            extra = {"threads": 1}  # a small call: one thread, no wake-up of the pool
        if plan.op == "spgemm":
            arrays = self._spgemm(*ops, extra)
        elif plan.op == "masked":
            arrays = self._masked(*ops, extra)
        else:
            arrays = self._merge(ops, {s: values[s] for s in plan.scalars}, extra)
        result = {out["indptr"]: arrays[0], out["indices"]: arrays[1], out["values"]: arrays[2]}
        if out["nnz"] is not None:
            result[out["nnz"]] = int(arrays[0][-1])
        return result

    # ---------------------------------------------------------------- operands
    def _size(self, x, values: dict) -> int:
        return int(values[x]) if isinstance(x, str) else int(x)

    def _operand(self, o, values: dict, check_structure: bool) -> tuple:
        """(data, indptr, indices, rows, cols) of operand `o`, checked (`InputError` names the
        script's argument)."""
        rows, cols, nnz = (self._size(x, values) for x in (o.rows, o.cols, o.nnz))
        data, indptr, indices = (values[o.values], values[o.indptr], values[o.indices])
        for name, arr, dtype in ((o.values, data, self.plan.dtype), (o.indptr, indptr, self.plan.idtype),
                                 (o.indices, indices, self.plan.idtype)):  # fmt: skip
            if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype != np.dtype(dtype):
                raise InputError(f"argument `{name}` must be a 1-D {dtype} array, got {_describe(arr)}")
            if not arr.flags.c_contiguous:
                raise InputError(f"argument `{name}` must be C-contiguous (a strided view: pass a copy)")
        if len(indices) != nnz or len(data) != nnz:
            raise InputError(f"arguments `{o.indices}` and `{o.values}` must have `nnz` = {nnz} entries")
        if check_structure:
            check_compressed("csr", (rows, cols), indptr, indices, data, o.name)
            if int(indptr[-1]) != nnz:
                raise InputError(f"argument `{o.indptr}` must end at nnz = {nnz}, got {indptr[-1]}")
            # Strictly increasing within each row: a step down or a repeat is allowed only where a row starts.
            bad = indices[1:] <= indices[:-1]
            starts = indptr[1:-1]
            bad[starts[(starts > 0) & (starts < nnz)] - 1] = False
            if bad.any():
                raise InputError(
                    f"argument `{o.indices}` (indices of `{o.name}`) is not strictly increasing within a row "
                    "(the level is declared sorted)"
                )
        return data, indptr, indices, rows, cols

    def _parts(self, m: int, n: int, threads) -> int:
        if self.target == "cuda":
            return max(1, -(-m // 4))
        t = current_threads(threads)
        return max(1, min(2 * t, WORKSPACE_BYTES // max(1, 12 * n)), t)

    def _workspaces(self, parts: int, n: int, accumulate: bool) -> dict:
        if self.plan.workspace != "global":
            return {}
        out = {"mark_ws": np.zeros(parts * n, np.int32)}
        if accumulate:
            out["acc_ws"] = np.zeros(parts * n, self.plan.dtype)
        return out

    # ---------------------------------------------------------------- the two assemblies
    def _spgemm(self, a, b, extra: dict) -> tuple:
        a_data, a_indptr, a_indices, m, k = a
        b_data, b_indptr, b_indices, k_b, n = b
        if k != k_b:
            raise InputError(
                f"`{self.plan.operands[0].name}` has {k} columns but `{self.plan.operands[1].name}` {k_b} rows"
            )
        idtype, dtype = np.dtype(self.plan.idtype), np.dtype(self.plan.dtype)
        hashed = self.plan.workspace == "hash"
        parts = self._parts(m, n, extra.get("threads"))
        work = work_prefix(a_indptr, a_indices, b_indptr) if hashed else None
        bounds = chunk_bounds(a_indptr if work is None else work, parts)
        sizes = {"m": m, "k": k, "n": n, "parts": len(bounds) - 1, "nnz_a": len(a_indices), "nnz_b": len(b_indices)}
        structure = {"a_indptr": a_indptr, "a_indices": a_indices, "b_indptr": b_indptr, "b_indices": b_indices}
        counts, rows_work = np.empty(m, idtype), np.empty(m, np.int64)
        hsize = {"hsize": table_size(min(int(np.diff(work).max(initial=0)), n))} if hashed else {}
        self.kernels["spgemm_count"](
            **structure, **sizes, c_count=counts, c_work=rows_work, bounds=bounds, check_structure=False, **extra,
            **self._workspaces(sizes["parts"], n, False), **hsize,
        )  # fmt: skip
        work = prefix(rows_work)
        if self.target == "cpu" and int(work[-1]) < parallel_grain():
            extra = {"threads": 1}
        bounds = chunk_bounds(work, parts)
        sizes["parts"] = len(bounds) - 1
        indptr = prefix(counts)
        if indptr[-1] > np.iinfo(idtype).max:
            raise InputError(f"the product has {indptr[-1]} nonzeros, more than the index dtype {idtype} holds")
        indptr = indptr.astype(idtype)
        nnz = int(indptr[-1])
        data, indices = np.empty(nnz, dtype), np.empty(nnz, idtype)
        hsize = {"hsize": table_size(int(counts.max(initial=0)))} if hashed else {}
        self.kernels["spgemm_numeric"](
            **structure, a_data=a_data, b_data=b_data, **sizes, c_data=data, c_indptr=indptr, c_indices=indices,
            nnz_c=nnz, bounds=bounds, check_structure=False, **extra, **self._workspaces(sizes["parts"], n, True),
            **hsize,
        )  # fmt: skip
        return indptr, indices, data

    def _masked(self, a, b, mask, extra: dict) -> tuple:
        a_data, a_indptr, a_indices, m, k = a
        b_data, b_indptr, b_indices, k_b, n = b
        m_data, m_indptr, m_indices, m_rows, m_cols = mask
        names = [o.name for o in self.plan.operands]
        if k != k_b:
            raise InputError(f"`{names[0]}` has {k} columns but `{names[1]}` {k_b} rows")
        if (m_rows, m_cols) != (m, n):
            raise InputError(f"the mask `{names[2]}` must have the product's shape {(m, n)}, got {(m_rows, m_cols)}")
        if m > MASKED_ROWS:
            raise InputError(f"a masked product takes at most {MASKED_ROWS} rows, got {m}")
        idtype, dtype = np.dtype(self.plan.idtype), np.dtype(self.plan.dtype)
        bounds = chunk_bounds(a_indptr, self._parts(m, n, extra.get("threads")))
        parts = len(bounds) - 1
        nnz_m = len(m_indices)
        t_data, t_indices, counts = np.empty(nnz_m, dtype), np.empty(nnz_m, idtype), np.empty(m, idtype)
        self.kernels["spgemm_masked"](
            a_data=a_data, a_indptr=a_indptr, a_indices=a_indices, b_data=b_data, b_indptr=b_indptr,
            b_indices=b_indices, m_data=m_data, m_indptr=m_indptr, m_indices=m_indices, c_data=t_data,
            c_indices=t_indices, c_count=counts, bounds=bounds, m=m, k=k, n=n, parts=parts, nnz_a=len(a_indices),
            nnz_b=len(b_indices), nnz_m=nnz_m, check_structure=False, **extra, **self._workspaces(parts, n, True),
        )  # fmt: skip
        indptr = prefix(counts).astype(idtype)
        nnz = int(indptr[-1])
        if nnz == nnz_m:
            return indptr, t_indices, t_data
        data, indices = np.empty(nnz, dtype), np.empty(nnz, idtype)
        self.kernels["compact"](
            t_data=t_data, t_indices=t_indices, t_start=m_indptr, c_data=data, c_indices=indices, c_indptr=indptr,
            bounds=bounds, m=m, parts=parts, nnz_t=nnz_m, nnz_c=nnz, check_structure=False, **extra,
        )  # fmt: skip
        return indptr, indices, data

    def _merge(self, ops: list, scalars: dict, extra: dict) -> tuple:
        shapes = {(o[3], o[4]) for o in ops}
        if len(shapes) != 1:
            raise InputError(f"the operands must have one shape, got {sorted(shapes)}")
        ((m, n),) = shapes
        idtype, dtype = np.dtype(self.plan.idtype), np.dtype(self.plan.dtype)
        lengths = np.array([np.diff(o[1]) for o in ops], np.int64).reshape(len(ops), m)
        from .assemble import lattice_of

        lat = lattice_of(self.plan.tree, tuple(f"X{t}" for t in range(len(ops))))
        # A row writes at most the union of its operands' entries, or the shortest row's for an intersection.
        room = prefix(lengths.min(axis=0) if lat.kind == "intersection" else lengths.sum(axis=0))
        if room[-1] > np.iinfo(idtype).max:
            raise InputError(f"the merged rows need {room[-1]} entries, more than the index dtype {idtype} holds")
        start = room.astype(idtype)
        bounds = chunk_bounds(prefix(lengths.sum(axis=0)), self._parts(m, 0, extra.get("threads")))
        t_data, t_indices, counts = np.empty(int(room[-1]), dtype), np.empty(int(room[-1]), idtype), np.empty(m, idtype)
        if len(ops) == 2:
            names = ("a", "b")
            args = {f"nnz_{x}": len(o[2]) for x, o in zip(names, ops)}
        else:
            names = tuple(f"x{t}" for t in range(len(ops)))
            args = {f"nnz_{x}": len(o[2]) for x, o in zip(names, ops)} | {"n": n}
        for x, o in zip(names, ops):
            args |= {f"{x}_data": o[0], f"{x}_indptr": o[1], f"{x}_indices": o[2]}
        self.kernels["merge"](
            **args, c_data=t_data, c_indices=t_indices, c_start=start, c_count=counts, bounds=bounds, m=m,
            parts=len(bounds) - 1, nnz_c=len(t_indices), check_structure=False, **extra,
            **{s: np.dtype(dtype).type(v) for s, v in scalars.items()},
        )  # fmt: skip
        indptr = prefix(counts).astype(idtype)
        nnz = int(indptr[-1])
        if nnz == len(t_indices):
            return indptr, t_indices, t_data
        data, indices = np.empty(nnz, dtype), np.empty(nnz, idtype)
        self.kernels["compact"](
            t_data=t_data, t_indices=t_indices, t_start=start, c_data=data, c_indices=indices, c_indptr=indptr,
            bounds=bounds, m=m, parts=len(bounds) - 1, nnz_t=len(t_indices), nnz_c=nnz, check_structure=False,
            **extra,
        )  # fmt: skip
        return indptr, indices, data


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D {x.dtype} array"
    return type(x).__name__
