"""The search behind `sp.tune` and `format="auto"`: format, parameters and schedule per matrix
(the contract is docs/design.md §3c).

    result = sp.tune.spmm(A, 128)          # ranks candidates, times the best few, caches the winner
    print(result.table)                    # every candidate: predicted and measured ms
    C = sp.ops.spmm(A, B, **result.ops_kwargs())
    C = sp.ops.spmm(A, B, format="auto")   # the same, through the cache

The search times candidates through the operator it is given (`tune(..., run=...)`): `sp.tune`
passes `sp.ops.spmm` / `sp.ops.sddmm`, and `sp.ops` passes its own when `format="auto"` tunes.
So this module imports neither: it sits below both.

Candidates are (format, parameters, schedule): CSR with rows split into equal ranges of rows or
of nonzeros (one contiguous range per thread), each also taking four nonzeros at a time (SpMM:
one update of C's row for four; SDDMM: four dot products in one sweep over X's row), each also
compiled for the one width
(`*_fixed` schedules: the width a constant, so that LLVM sizes the vectors to it), SDDMM over
nonzeros, BSR at each block size of `BLOCK_SIZES` whose sampled block fill is at least
`BSR_MIN_FILL`, hyb with 1 to 8 column partitions, and SpMM where B outgrows the last-level
cache column parts walked per row block (`format_rules.colparts`, one row block per thread, at
`colparts_counts` parts). A cost model ranks them from the row-length
histogram, the padding each format adds (BSR: the stored cells at the sampled fill, one column
index per block), and the size of B against the caches (`Machine`: a B past the last-level cache
costs a gather from memory for each row not reused while cached, `Structure.reuse_miss`). The
best `top` are timed briefly, and with them the best of each family that could win (`plan`: CSR
always, BSR where some fill is high, hyb where the model puts it within `REACH` of CSR, column
parts wherever B outgrows the last-level cache), each
after one untimed call that converts and compiles, in rounds of one call each so that noise
costs them alike (SpMM into one `out=` whose pages are touched before: the
kernels' time, not the page faults of a new result), and the fastest measured wins: a family
that could win but measures slower here is left. The table says, per candidate, the model's
time, the measured one and their ratio, and per family why it was or was not timed.
The result is cached in memory and on disk (`<cache>/tune/<key>.json`, beside the kernels:
`$SPARSETIR_CACHE_DIR`; or `$SPARSETIR_TUNE_DIR/<key>.json`), keyed by a fingerprint of A's
structure, the width, the target, the machine (processor, cores, threads) and this module's
version, so a second process does not tune again.

A cached entry is checked against today's candidates before it is used: every field of the
expected type, each candidate (format, parameters, schedule) one that this version would try for
this matrix, width and target. Anything else (an entry written by another version sharing the
cache, a damaged or oversized file) is tuned again and overwritten, with one `CacheWarning`.
Writes are atomic and leave no temporary file behind; a cache folder that cannot be written keeps
the result in memory (`runtime/cache.py`).

Problems too small to amortise conversion (fewer than `TIMING_GRAIN` multiply-adds) are not
timed: the model picks among CSR schedules alone. CUDA candidates are ranked by the model but
timed only where a GPU is present; without one, CUDA keeps CSR with its default schedule.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import itertools
import json
import math
import os
import platform
import stat
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse

from .codegen.cpu import SPLIT_PARTS
from .errors import InputError, TargetError
from .format import block_fill
from .inputs import positive_int
from .operands import as_csr, value_dtype
from .runtime import timing
from .runtime.cache import CacheWarning, cache_dir, write_file
from .runtime.cpu_intrinsics import split_bound

TUNE_FORMAT = 13  # bump when candidates or the model change: cached results are then ignored
#: Rows gathered of at most this many bytes are prefetched whole (`schedules.common`).
PREFETCH_WHOLE_ROW = 128
DEFAULT_TOP = 4  # the model's best this many are timed when `tune` is not told how many
TIMING_GRAIN = 1 << 22  # nnz x width below which the model decides alone (no timed candidates)
MAX_ENTRY_BYTES = 1 << 20  # a cached result is a few kilobytes: anything larger is damage
_MEMORY: dict[str, TuneResult] = {}


# -------------------------------------------------------------------- results
@dataclass
class Candidate:
    """One configuration: `sp.ops` arguments and what the model and the timer said of it."""

    format: str
    params: dict
    schedule: str | None
    predicted_s: float
    measured_s: float | None = None
    setup_s: float | None = None  # the untimed first call: conversion and compilation
    error: str | None = None
    why: str | None = None  # why the search timed it, or did not

    @property
    def label(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        text = self.format + (f"({params})" if params else "")
        return text + (f" / {self.schedule}" if self.schedule else "")


class Table:
    """What was tried, one row per candidate in model order (the model's time, the measured one,
    their ratio, and why it was timed or not), then one line per format family saying why it was
    or was not timed: printable, HTML in Jupyter."""

    COLUMNS = ("rank", "candidate", "model ms", "measured ms", "model/measured", "setup ms", "note")

    def __init__(self, candidates: list[Candidate], winner: Candidate, families: dict[str, str] | None = None):
        self.candidates = candidates
        self.winner = winner
        self.families = dict(families or {})

    def rows(self) -> list[tuple[str, ...]]:
        def ms(v):
            return "-" if v is None else f"{v * 1e3:.3f}"

        out = []
        for rank, c in enumerate(self.candidates, 1):
            note = c.error or ("chosen" if c is self.winner else (c.why or ("" if c.measured_s else "not timed")))
            if c is self.winner and c.why:
                note = f"chosen; {c.why}"
            ratio = f"{c.predicted_s / c.measured_s:.2f}" if c.measured_s else "-"
            out.append((str(rank), c.label, ms(c.predicted_s), ms(c.measured_s), ratio, ms(c.setup_s), note))
        return out

    def __str__(self) -> str:
        rows = [self.COLUMNS, *self.rows()]
        widths = [max(len(r[k]) for r in rows) for k in range(len(self.COLUMNS))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines += [f"{family}: {why}" for family, why in self.families.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<tuning table: {len(self.candidates)} candidates, chosen {self.winner.label}>"

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in self.rows())
        notes = "".join(f"<li>{html.escape(f)}: {html.escape(w)}</li>" for f, w in self.families.items())
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        return table + (f"<ul>{notes}</ul>" if notes else "")

    def __len__(self) -> int:
        return len(self.candidates)

    def __iter__(self):
        return iter(self.candidates)


@dataclass
class TuneResult:
    """The chosen configuration (`.format`, `.params`, `.schedule`), its time per call in seconds
    (`.seconds`: measured, or the model's estimate where nothing was timed), the time the search
    took (`.tuning_seconds`; 0 when it came from the cache: `.cached`), and `.table`."""

    op: str
    format: str
    params: dict
    schedule: str | None
    seconds: float
    measured: bool
    table: Table
    tuning_seconds: float
    key: str
    cached: bool = False
    candidates: list[Candidate] = field(default_factory=list)

    def ops_kwargs(self) -> dict:
        """Keyword arguments of `sp.ops.spmm` / `sp.ops.sddmm` that run the chosen configuration."""
        return {"format": self.format, "schedule": self.schedule, **self.params}

    def __str__(self) -> str:
        how = "measured" if self.measured else "model"
        head = f"{self.op}: {self.table.winner.label} ({self.seconds * 1e3:.3f} ms per call, {how})"
        return f"{head}\n{self.table}"

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(str(self).splitlines()[0])}</p>{self.table._repr_html_()}"


# -------------------------------------------------------------------- the machine and the matrix
#: The share of a last-level cache one core can count on. sysfs reports the whole socket's L3,
#: which on a cloud VM is a host's cache shared with every other tenant (300 MB seen from a
#: 2-vCPU VM of this project's machine); per visible core, no more than this is counted.
LLC_PER_CORE = 4 << 20
#: Rates of one thread (calibrated as `Machine`'s docstring says), in seconds or bytes/second.
HIT_BPS = 42e9  # a row of B read from L1/L2 (reused within a thread's window of rows)
LLC_BPS = 14e9  # a row of B from a last-level cache that holds all of B
MISS_S = 113e-9  # a row of B gathered from memory: the latency of each region's first miss
MEMORY_BPS = 19e9  # a row of B gathered from memory: its bytes, one thread
WIDE_ROW_BYTES = 1024  # 256 float32 accumulators: 16 of AVX-512's 32 vector registers
WIDE_ROW_COST = 1.55
PREFETCH_BYTES = 4096  # neighbouring rows of B within this many bytes share one miss
ROW_S = 2e-9  # per row of A: its bounds, its row of C addressed
SDDMM_NNZ_S = 5e-9  # per nonzero of SDDMM: its dot product's horizontal sum and its store
CALL_S = 120e-6  # per call: `sp.ops`' dispatch, the parallel region's start and end (passive waiting threads woken)
BSR_FMA = 70e9  # multiply-adds per second of BSR's block product (padding cells included)
BSR_BLOCK_S = 20e-9  # per stored block: its column index, the loop over its rows
BSR_SDDMM = 2.5  # SDDMM's block product (a dot product per cell) over SpMM's, per cell
# A slot of hyb's ELL loops (padding included; the schedules of a87e274: re-measure when they
# change): a fixed cost and its row of B at this rate (fitted on mesh-b3 and blocks-b4, widths
# 32/128/512: 42, 70 and 197 ns a slot).
HYB_SLOT_S = 30e-9
HYB_BPS = 12e9


@dataclass(frozen=True)
class Machine:
    """The processor as the cost model sees it: threads, cache sizes and rates.

    `l2_bytes` (per core) and `l3_bytes` are read from `/sys/devices/system/cpu/cpu0/cache`
    (`machine()`), falling back to 1 MiB and 32 MiB where sysfs does not say; `llc_bytes` caps the
    L3 at `LLC_PER_CORE` per visible core (a VM sees its host's whole cache).

    The rates (`HIT_BPS`, `LLC_BPS`, `MISS_S`, `MEMORY_BPS`, `WIDE_ROW_COST`, `CALL_S`,
    `BSR_FMA`, `BSR_BLOCK_S`, `HYB_SLOT_S`, `HYB_BPS`, and the stream rate) are per thread,
    calibrated on this project's 2-core machine: for each bench graph (the shipped ones, `rmat`,
    `rmat-large`, `BLOCK_GRAPHS`: `bench/graphs.py`) and width 32, 128 and 512,
    `tune(op, A, w, top=2, budget=0.1, cache=False, run=sp.ops.spmm)` with `TIMING_GRAIN` 0 and
    `OMP_WAIT_POLICY=passive` (127 timed SpMM candidates); then `HIT_BPS`, `LLC_BPS`, `MISS_S`,
    `MEMORY_BPS`, `WIDE_ROW_COST` and `BSR_FMA` fitted together (least squares of
    log(model / measured), Powell) with `CALL_S` set by hand. Those timings ran beside other
    work (load average 1.9-2.6 on 2 cores: measured times up to 2x a quiet run's, and rmat-large
    at width 128 measured 39 ms at load 1.3 and 148 ms at 2.1), so the fit aims the model at 0.75
    of them, near a quiet run: model/measured then spans 0.31-2.0 (median 0.67; before: 0.18-3.05,
    39 of 127 outside [0.5, 2], now 25, all on the low side but one: small and mid-sized
    graphs, whose short calls suffer most from a descheduled thread). On 48 timed candidates of
    graphs the fit did not see (an R-MAT of 300k rows and a uniform random graph of 250k, 4elt,
    polblogs, email-Eu-core, pygsp_minnesota, bcsstk13; widths 32/128/512): 0.43-2.13, 5
    outside [0.5, 2] (before: 0.36-1.07, 18 outside). SDDMM's `SDDMM_NNZ_S` fitted alone on 47
    timed candidates (cora, pubmed, wiki-Vote, ca-CondMat, bcsstk16, rmat, mesh-b3): 0.32-2.2,
    11 outside (before 15; mesh-b3 stays at 0.3-0.5). Re-measure when the kernels change, on the
    least loaded machine you have.
    """

    threads: int
    l2_bytes: int  # per core
    l3_bytes: int  # shared
    stream_bps: float = 35e9  # streaming bandwidth, 2 threads (docs/design.md §5)
    cores: int = 0  # CPUs visible to this process (0: `threads`)

    @property
    def llc_bytes(self) -> int:
        """The last-level cache this process can count on (see `LLC_PER_CORE`)."""
        return min(self.l3_bytes, LLC_PER_CORE * max(self.cores, self.threads, 1))

    def gather_s(self, rows: float, row_bytes: float, table_bytes: float, miss: tuple[float, float]) -> float:
        """Seconds one thread spends reading `rows` rows of `row_bytes` each from a dense operand
        of `table_bytes`: from L2 when it fits there, from the last-level cache when it fits
        there, else (`miss` = the fractions of rows and of regions first touched:
        `Structure.reuse_miss`) the rows first touched come from memory, at the streaming rate
        and one latency per region, and the rest from the caches."""
        # A row wider than a register file's worth of accumulators (`WIDE_ROW_BYTES`) is
        # accumulated through L1: every read of it costs `WIDE_ROW_COST` times as much.
        wide = WIDE_ROW_COST if row_bytes > WIDE_ROW_BYTES else 1.0
        if table_bytes <= self.l2_bytes:
            return rows * row_bytes / HIT_BPS * wide
        if table_bytes <= self.llc_bytes:
            # The threads' L2 caches together hold this share of B: a thread's rows read mostly
            # their own part of it (quiet, 2 threads: bcsstk16 and wiki-Vote at width 128, B 2.5
            # and 4.2 MB against 2 MB of L2 a core, ran 2.5-3.2x faster than the LLC rate alone).
            held = min(1.0, self.l2_bytes * max(self.threads, 1) / table_bytes)
            return rows * row_bytes * (held / HIT_BPS + (1 - held) / LLC_BPS) * wide
        new, regions = miss
        memory = new * row_bytes / MEMORY_BPS + regions * MISS_S
        return rows * ((1 - new) * row_bytes / HIT_BPS + memory) * wide

    def window(self, row_bytes: float) -> int:
        """How many rows of B one thread keeps in its share of the caches."""
        share = self.llc_bytes / max(self.threads, 1) + self.l2_bytes
        return max(1, int(share // max(row_bytes, 1)))


def _cache_size(level: int, default: int) -> int:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(base.glob("index*")):
            if (index / "level").read_text().strip() == str(level) and (index / "type").read_text().strip() in (
                "Unified",
                "Data",
            ):
                text = (index / "size").read_text().strip().upper()
                scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return default


def machine() -> Machine:
    import numba

    return Machine(
        numba.get_num_threads(), _cache_size(2, 1 << 20), _cache_size(3, 32 << 20), cores=os.cpu_count() or 1
    )


def _machine_id(m: Machine) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}|{os.cpu_count()}|{m.threads}|{m.l2_bytes}|{m.l3_bytes}"


#: Block sizes of BSR candidates, and the sampled block fill from which BSR is tried.
BLOCK_SIZES = (2, 3, 4, 6, 8)
BSR_MIN_FILL = 0.7
#: Fewer nonzeros than this make too few blocks to pay for a BSR kernel's compilation (a few
#: seconds per block size): no BSR candidate; on the CPU no hyb candidate either (its parts'
#: kernels compile for seconds, to save microseconds on such a matrix).
BSR_MIN_NNZ = 1024
#: A family other than CSR and BSR is timed when the model puts it within this factor of CSR.
REACH = 2.0
#: Column parts (`format_rules.colparts`): at most this many, and the loop overhead of one stored
#: (row, column part) pair (its row of C addressed, its nonzeros' bounds), per thread.
COLPARTS_MAX = 4  # 4, 8 and 16 parts on rmat-large and a 300k-row R-MAT, widths 128/512: 4 best or tied
#: Measured (quiet, 2 threads, `sp.tune.spmm`): at 4 ns a pair the model put column parts at
#: 0.48-1.11 of the measured time on 10 cases whose B outgrows the cache (rmat-large and a 100k-row
#: Chung-Lu graph at widths 32/128, an R-MAT of 65k rows, a 9-point mesh of 90k, Watts-Strogatz
#: 50k, Chung-Lu 40k, Delaunay 50k at 128), rmat-large at width 32 (425k pairs of 6 nonzeros
#: each) outside 2x; at 30 ns 0.65-1.51 (the mesh, whose rows span every part, highest).
COLPARTS_PAIR_S = 30e-9
#: `schedules.colparts.X8_MIN_ROW_BYTES`: rows of B from which column parts run eight nonzeros at a time.
COLPARTS_X8_ROW_BYTES = 512


@dataclass
class Structure:
    """What the model reads of A: sizes, row lengths, the work of a static row split, the block
    fill of BSR at each of `BLOCK_SIZES` (sampled: `sp.format.block_fill`), and the columns (for
    how often a row of B is read again while it is still in cache: `reuse_miss`)."""

    m: int
    n: int
    nnz: int
    lengths: np.ndarray
    indices: np.ndarray | None = None
    fills: dict[int, float] = field(default_factory=dict)
    _misses: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, csr: scipy.sparse.csr_matrix) -> Structure:
        fills = {b: block_fill(csr, b, sample=256) for b in BLOCK_SIZES} if csr.nnz else {}
        return cls(csr.shape[0], csr.shape[1], csr.nnz, np.diff(csr.indptr).astype(np.int64), csr.indices, fills)

    def reuse_miss(self, window: int, parts: int = 1, row_bytes: int = 0, samples: int = 8) -> tuple[float, float]:
        """What a thread reads from memory when its cache holds `window` rows of B (of one column
        part of `parts`), per nonzero: the fraction of rows read for the first time in a window
        of consecutive nonzeros that touch about `window` rows, and the fraction of first touches
        of a `PREFETCH_BYTES` region of B (rows of `row_bytes` next to each other share one
        miss's latency: the prefetcher brings the neighbours). Windows at `samples` evenly spaced
        places: O(samples x window) work, at most 2**17 nonzeros a window. (1.0, 1.0) without
        columns to look at."""
        if self.indices is None or self.nnz == 0:
            return 1.0, 1.0
        key = (window, parts, row_bytes)
        if key not in self._misses:
            self._misses[key] = self._reuse_miss(window, parts, row_bytes, samples)
        return self._misses[key]

    def _reuse_miss(self, window: int, parts: int, row_bytes: int, samples: int) -> tuple[float, float]:
        span = min(self.nnz, window * parts, 1 << 17)
        starts = np.linspace(0, self.nnz - span, samples).astype(np.int64)
        per_region = max(1, PREFETCH_BYTES // max(row_bytes, 1))
        rows = regions = reads = 0
        for k, start in enumerate(starts):
            cols = np.asarray(self.indices[start : start + span], dtype=np.int64)
            if parts > 1:
                cols = cols[cols * parts // max(self.n, 1) == k % parts]
            distinct = np.unique(cols)
            rows += distinct.size
            regions += np.unique(distinct // per_region).size
            reads += cols.size
        return (rows / reads, regions / reads) if reads else (1.0, 1.0)

    def static_imbalance(self, threads: int) -> float:
        """Largest thread's share of the nonzeros when rows are split into equal contiguous
        ranges (Numba's static `prange`), over an even share."""
        if self.nnz == 0 or threads <= 1:
            return 1.0
        cuts = np.linspace(0, self.m, threads + 1).astype(np.int64)
        ends = np.concatenate([[0], np.cumsum(self.lengths)])
        return float(np.diff(ends[cuts]).max() * threads / self.nnz)

    def split_imbalance(self, threads: int) -> float:
        """The same with rows split by nonzeros (`split_by`: `SPLIT_PARTS` contiguous ranges of
        equal weight, found by the kernels' own `split_bound`, in equal blocks of ranges per
        thread): bounded by the longest row (a row cannot be shared)."""
        if self.nnz == 0 or threads <= 1:
            return 1.0
        ends = np.concatenate([[0], np.cumsum(self.lengths)])
        bounds = [split_bound(ends, self.m, p, SPLIT_PARTS) for p in range(SPLIT_PARTS + 1)]
        blocks = np.array_split(np.arange(SPLIT_PARTS), threads)
        per_thread = [ends[bounds[b[-1] + 1]] - ends[bounds[b[0]]] for b in blocks if len(b)]
        return max(1.0, float(max(per_thread) * threads / self.nnz))

    def row_parts(self, parts: int, skip: int = 0) -> float:
        """The expected number of (row, column part) pairs that hold a nonzero, among the column
        parts after the first `skip`, when each row's nonzeros fall on the `parts` column parts
        at random: `(parts - skip) * (1 - (1 - 1/parts)**length)` per row (every non-empty row
        for one part)."""
        lengths = self.lengths[self.lengths > 0].astype(np.float64)
        if parts <= 1:
            return float(lengths.size) * (1 - skip)
        return float(((parts - skip) * -np.expm1(lengths * np.log1p(-1.0 / parts))).sum())

    def padded_ell(self, buckets: list[int], col_parts: int) -> float:
        """Stored slots of hyb(`col_parts`, `buckets`) over nnz, assuming each row's nonzeros
        spread evenly over the column parts."""
        if self.nnz == 0:
            return 1.0
        per_part = np.ceil(self.lengths / col_parts)
        per_part = per_part[per_part > 0]
        widths = np.asarray(buckets, np.float64)
        long = per_part > widths[-1]
        slot = widths[np.minimum(np.searchsorted(widths, per_part), len(widths) - 1)]
        slot[long] = np.ceil(per_part[long] / widths[-1]) * widths[-1]
        return float(slot.sum() * col_parts / self.nnz)


def fingerprint(csr: scipy.sparse.csr_matrix) -> str:
    h = hashlib.sha256()
    h.update(repr((csr.shape, str(csr.indptr.dtype), str(csr.indices.dtype))).encode())
    h.update(np.ascontiguousarray(csr.indptr).tobytes())
    h.update(np.ascontiguousarray(csr.indices).tobytes())
    return h.hexdigest()[:32]


# -------------------------------------------------------------------- candidates and the model
def _default_buckets(s: Structure, col_parts: int) -> list[int]:
    longest = math.ceil(s.lengths.max(initial=1) / col_parts) if s.m else 1
    top = 1 << max(0, min(5, math.ceil(math.log2(max(longest, 1)))))
    return [1 << k for k in range(int(math.log2(top)) + 1)]


def _miss(s: Structure, mach: Machine, row_bytes: int, parts: int = 1) -> tuple[float, float]:
    """The fractions of B's rows and regions read from memory (none when B, or one column part
    of it, fits the last-level cache)."""
    if s.n * row_bytes / parts <= mach.llc_bytes:
        return 0.0, 0.0
    return s.reuse_miss(mach.window(row_bytes), parts, row_bytes)


def _model_csr(op: str, s: Structure, w: int, mach: Machine, imbalance: float, itemsize: int = 4) -> float:
    """CSR: every nonzero reads a row of B (SDDMM: of Y) of `w` values, from the cache level B
    fits in (`Machine.gather_s`), spread over the threads by the row split (`imbalance`); A's
    values and indices and C's rows stream."""
    row = w * itemsize
    gather = mach.gather_s(s.nnz / mach.threads * imbalance, row, s.n * row, _miss(s, mach, row))
    if op == "spmm":
        stream = s.nnz * (itemsize + 4) + s.m * row
    else:
        stream = s.nnz * (2 * itemsize + 4) + s.m * row
        gather += s.nnz / mach.threads * imbalance * SDDMM_NNZ_S  # a dot product's reduction, its store
    return gather + stream / mach.stream_bps + s.m * ROW_S / mach.threads + CALL_S


def _model_bsr(op: str, s: Structure, w: int, mach: Machine, b: int, itemsize: int = 4) -> float:
    """BSR of `b` x `b` blocks at the sampled fill: the block product runs over every stored
    cell, padding included (`BSR_FMA`), and each block reads one column index and `b` rows of B
    (SDDMM: of Y), which is `fill x b` times fewer row reads than CSR's one per nonzero."""
    fill = s.fills.get(b, 0.0)
    if s.nnz == 0 or fill <= 0:
        return CALL_S
    blocks = s.nnz / (fill * b * b)
    cells = blocks * b * b
    row = w * itemsize
    # The same rows and regions first touched as CSR's, over `fill x b` times fewer reads.
    miss = tuple(min(1.0, f * fill * b) for f in _miss(s, mach, row))
    per_thread = blocks / mach.threads * 1.05  # block rows split by blocks
    gather = mach.gather_s(per_thread * b, row, s.n * row, miss)
    product = b * b * w / BSR_FMA * (BSR_SDDMM if op == "sddmm" else 1.0)
    compute = per_thread * (product + BSR_BLOCK_S)
    stream = cells * itemsize + blocks * 4 + s.m * row  # A's blocks, their columns, C (SDDMM: X)
    if op == "sddmm":
        stream += cells * itemsize  # the result's blocks
    return gather + compute + stream / mach.stream_bps + CALL_S


def _model_hyb(s: Structure, w: int, mach: Machine, parts: int, buckets: list[int], itemsize: int = 4) -> float:
    """hyb: `parts` column parts of ELL buckets; every slot (padding included) reads a row of the
    part's slice of B, which stays in cache where the slice fits; each part and bucket is a
    parallel loop of its own. A slot costs at least `HYB_SLOT_S` and its row at `HYB_BPS`."""
    pad = s.padded_ell(buckets, parts)
    row = w * itemsize
    slots = s.nnz * pad / mach.threads * 1.05
    floor = slots * (HYB_SLOT_S + row / HYB_BPS)
    gather = max(mach.gather_s(slots, row, s.n * row / parts, _miss(s, mach, row, parts)), floor)
    stream = s.nnz * pad * (itemsize + 4) + s.m * row * (1 + parts)
    if parts > 1 and s.n * row > mach.llc_bytes:
        stream += s.n * row  # each slice comes from memory once per call
    # A row longer than the largest bucket adds a layer per bucket-width of it.
    layers = math.ceil(s.lengths.max(initial=0) / parts / buckets[-1]) if s.m else 0
    overhead = (len(buckets) + max(0, layers - 1)) * parts * 12e-6
    return gather + stream / mach.stream_bps + overhead


def _model_colparts(s: Structure, w: int, mach: Machine, parts: int, itemsize: int = 4) -> float:
    """Column parts (`format_rules.colparts`, `schedules.colparts`): each nonzero reads a row of
    its part's slice of B (`n / parts` rows: `Machine.gather_s` with the misses of one part,
    `Structure.reuse_miss`), four nonzeros at a time as CSR's `_x4_fixed`; the price is C: written
    once by part 0's pass over every row, as CSR writes it, then read and written again once per
    (row, later part) pair that holds a nonzero (`Structure.row_parts`), each pair costing a row's
    loop overhead."""
    row = w * itemsize
    pairs = s.m + s.row_parts(parts, skip=1)
    mean = s.nnz / max(pairs, 1)
    gain = (0.8 if mean >= 8 else 1.05) * (0.8 if w >= 64 else 0.85)  # four at a time, the width compiled in
    if row >= COLPARTS_X8_ROW_BYTES:
        # Eight at a time on wide rows (`schedules.colparts`): measured 1.06-1.27x four at a time
        # on rmat-large and a 100k-row Chung-Lu graph, widths 128/512 (model/measured 1.02-1.42
        # without this factor).
        gain *= 0.85
    # Even where a slice fits the cache, each pass over a part reads the rows of the slice it
    # touches first from memory: the first touches among the part's nonzeros in a window of as
    # many reads as CSR's (`Machine.window`), so that the two differ by the columns each window
    # spans, not by how the windows are counted.
    reads = s.nnz / mach.threads * 1.05
    if s.n * row > mach.llc_bytes:
        first = s.reuse_miss(mach.window(row), parts, row)
        gather = mach.gather_s(reads, row, s.n * row, first) * gain
    else:
        gather = mach.gather_s(reads, row, s.n * row, (0.0, 0.0)) * gain
    # C: written by part 0's pass, then read and written once per (row, later part) pair.
    stream = s.nnz * (itemsize + 4) + pairs * 8 + s.m * row + 2 * (pairs - s.m) * row
    return gather + stream / mach.stream_bps + pairs * COLPARTS_PAIR_S / mach.threads + CALL_S


def colparts_counts(s: Structure, w: int, mach: Machine, itemsize: int = 4) -> list[int]:
    """The column-part count worth a candidate where B outgrows the last-level cache: the smallest
    power of two whose slice of B fits it, at most `COLPARTS_MAX` and at most one part per 2048
    columns; none where B fits. One count only: each costs a conversion and a kernel compiled
    for the width (seconds). More parts keep a smaller slice of B in cache but read and write
    each row of C more often (`Structure.row_parts`): on power-law graphs of 13-14 nonzeros a
    row, 4 parts measured best or tied with 8 and 16."""
    row = w * itemsize
    if s.n * row <= mach.llc_bytes:
        return []
    parts = 2
    while parts < COLPARTS_MAX and s.n * row / parts > mach.llc_bytes and s.n >= 2048 * parts * 2:
        parts *= 2
    return [parts] if s.n >= 2048 * parts else []


def candidates(
    op: str, s: Structure, w: int, target: str, mach: Machine, *, every: bool = False, itemsize: int = 4
) -> list[Candidate]:
    """Every configuration worth considering for this matrix, with the model's time, best first:
    CSR schedules, BSR at each block size of `BLOCK_SIZES` whose sampled fill is at least
    `BSR_MIN_FILL` (CPU, at least `BSR_MIN_NNZ` nonzeros), hyb with 1 to 8 column parts.

    `every`: also those left out below `TIMING_GRAIN` (what a cached entry may hold); `itemsize`:
    bytes of a value (4 for float32)."""
    out: list[Candidate] = []
    cpu = target == "cpu"
    if cpu:
        static, split = s.static_imbalance(mach.threads), s.split_imbalance(mach.threads)
        # Four nonzeros at a time (`_x4`). SpMM: one update of C's row per four nonzeros, four
        # independent gathers of B; SDDMM: one sweep over X's row for four dot products. The
        # partial chunk's copies are unrolled too, so at widths of 16 and more short rows gain as
        # well. Paired, x4 vs plain, both with the width compiled in, widths 32/128/512 (ms):
        # SpMM olm1000 (4 per row) 0.036 / 0.050 / 0.253 vs 0.077 / 0.051 / 0.314, pygsp_minnesota
        # (2.5 per row) 0.053 / 0.186 / 0.649 vs 0.118 / 0.213 / 0.889, 4elt 0.35 / 1.48 / 8.4 vs
        # 0.97 / 1.42 / 10.2; SDDMM against `csr_cpu_rows`: olm1000 1.40x / 1.61x / 1.30x,
        # pygsp_minnesota 1.95x / 1.69x / 2.2x, jazz 1.40x / 1.36x / 1.29x. Below 16 (SpMV, a few
        # features: a fixed-width kernel per width would cost more compiling than it saves) the
        # rule stays where rows are long: SpMM x4 where they hold eight or more.
        mean = s.nnz / max(s.m, 1)
        if w >= 16:
            gain = 0.8 if op == "spmm" else 0.75
        else:
            gain = 0.8 if op == "spmm" and mean >= 8 else 1.05
        # The width compiled in (`fixed_width` schedules): LLVM sizes the feature loop's vectors
        # and unrolling to it (SpMM plcomm width 128: 2.5x faster). At narrow widths a plain loop of
        # a constant length is unrolled into scalar code (slow); with four accumulators or rows of
        # B in flight it stays vectorised. SpMM at width 32, x4 fixed vs x4 (ms): wiki-Vote 0.183
        # vs 0.236, 4elt 0.162 vs 0.186, pubmed and citeseer even; SDDMM (paired): 1138_bus 0.071
        # vs 0.084 ms, olm1000 0.028 vs 0.033, pygsp_minnesota 0.102 vs 0.128.
        wide = w >= 64
        plain = 0.7 if wide else 3.0
        unrolled = 0.8 if wide else (0.85 if op == "spmm" or w >= 16 else 1.0)
        # Every CSR schedule `csr_cpu_rows[_split][_x4][_fixed]`: rows split into equal ranges of
        # rows or of nonzeros, one or four nonzeros at a time, the width a run-time value or
        # compiled in. Rows handed out in dynamic chunks (`_balanced`) are not candidates: the
        # split by nonzeros balances as well and streams longer ranges (measured on 7 graphs at
        # widths 32/128/512, SDDMM: within 2% of the dynamic chunks where those won, up to 1.4x
        # faster elsewhere; wiki-Vote width 512: 1.27 ms vs 1.76 ms), and Numba caches its kernels.
        splits = (("", static), ("_split", split))
        # The split's ranges cost two binary searches over indptr each (1.3 us of a 5.5 us SpMM on
        # jazz, 5k nonzeros, width 32).
        searches = 2 * SPLIT_PARTS * math.log2(s.m + 2) * 1.5e-9 / mach.threads
        timed = every or s.nnz * w >= TIMING_GRAIN
        for (split, imbalance), x4, fixed in itertools.product(splits, (False, True), (False, True)):
            name = "csr_cpu_rows" + split + ("_x4" if x4 else "") + ("_fixed" if fixed else "")
            factor = (gain if x4 else 1.0) * ((unrolled if x4 else plain) if fixed else 1.0)
            extra = searches if split else 0.0
            model = _model_csr(op, s, w, mach, imbalance, itemsize)
            out.append(Candidate("csr", {}, name, model * factor + extra))
            # SpMM eight nonzeros at a time (`csr_cpu_rows_split_x8_fixed`): more gathers in flight
            # and rows of up to eight in one sweep. A candidate only where candidates are timed
            # (nnz x width from `TIMING_GRAIN`) and B outgrows the L2 (the
            # gathers wait on memory; on small graphs it measured 2-10% slower than x4, and its
            # kernel compiles in twice x4's time), ranked just ahead of x4 so that both are timed.
            # Paired, x8 vs x4 (ms): mesh2d (200k rows, 5 per row) width 32 11.0 vs 16.2, a
            # uniform random graph (160k rows, 10 per row) 39.5 vs 42.6, 183 vs 218 at width 128.
            # SDDMM's x8 measured mixed (mesh2d width 32 1.3x faster, the uniform graph at 128
            # 1.15x slower) and compiles in four times x4's time: not a candidate.
            # The gathers of B (or Y) wait on memory: the x4 split schedule, timed, past the L2.
            waits = x4 and fixed and split and timed and s.n * w * itemsize > mach.l2_bytes
            if op == "spmm" and waits:
                out.append(Candidate("csr", {}, "csr_cpu_rows_split_x8_fixed", model * factor * 0.97 + extra))
                # x4 with the rows of B four chunks ahead prefetched (`sch.prefetch`): the gathers
                # overlap. Where B outgrows the L2, as x8; ranked just ahead of both, so all three
                # are timed. Paired against x4 at width 32: 1.15-1.33x on five graphs of 50k-200k
                # rows (power-law, small-world, mesh); at 128/512 (first line only) 0.95-1.16x.
                out.append(Candidate("csr", {}, "csr_cpu_rows_split_x4_prefetch_fixed", model * factor * 0.96 + extra))
            # SDDMM's (rows of Y ahead): where Y outgrows the L2 and a row is hinted whole (128
            # bytes and less). Paired against x4 at width 32: 0.85-1.59x on the same five graphs
            # (three above 1.13x); at 128 (first line only) 0.76-0.94x: not a candidate there.
            if op == "sddmm" and waits and w * itemsize <= PREFETCH_WHOLE_ROW:
                out.append(Candidate("csr", {}, "csr_cpu_rows_split_x4_prefetch_fixed", model * factor * 0.99 + extra))
        if op == "sddmm":
            search = s.nnz * math.log2(max(s.m, 2)) * 1.5e-9 / mach.threads
            row = w * itemsize
            xrows = mach.gather_s(s.nnz / mach.threads, row, s.m * row, (0.0, 0.0))
            model = _model_csr(op, s, w, mach, 1.02, itemsize) + search + xrows
            out.append(Candidate("csr", {}, "csr_cpu_nonzeros", model))
    else:
        out.append(Candidate("csr", {}, None, _model_csr(op, s, w, mach, 1.0, itemsize)))
    large = every or s.nnz * w >= TIMING_GRAIN
    if cpu and large and s.nnz >= BSR_MIN_NNZ:
        for b in BLOCK_SIZES:
            if s.fills.get(b, 0.0) >= BSR_MIN_FILL:
                out.append(Candidate("bsr", {"block_size": b}, None, _model_bsr(op, s, w, mach, b, itemsize)))
    if cpu and op == "spmm" and large and s.nnz >= BSR_MIN_NNZ:
        for parts in colparts_counts(s, w, mach, itemsize):
            params = {"num_col_parts": parts, "row_blocks": max(1, mach.threads)}
            out.append(Candidate("colparts", params, None, _model_colparts(s, w, mach, parts, itemsize)))
    if (large and s.nnz >= BSR_MIN_NNZ) or not cpu:
        for parts in (1, 2, 4, 8):
            if parts > 1 and (op == "sddmm" or s.n < 2048 * parts):
                continue
            buckets = _default_buckets(s, parts)
            model = _model_hyb(s, w, mach, parts, buckets, itemsize)
            out.append(Candidate("hyb", {"num_col_parts": parts, "buckets": buckets}, None, model))
    out.sort(key=lambda c: c.predicted_s)
    return out


def plan(cands: list[Candidate], s: Structure, w: int, mach: Machine, top: int, *, itemsize: int = 4):
    """The candidates to time, and one sentence per format family saying why it is timed or not:
    the model's best `top`, and the best of each family that could win even where the model
    ranks it lower: CSR always; BSR where some block size has a sampled fill of at least
    `BSR_MIN_FILL` (the block product is where today's model is least sure); hyb where the model
    puts it within `REACH` of CSR (which it does where B outgrows the last-level cache and its
    column parts keep a slice of B in cache); column parts (`colparts`) wherever they are
    candidates (B outgrows the last-level cache: whether their slices stay in a cache shared with
    other tenants is what the model knows least). Sets each candidate's `why`."""
    chosen = {id(c): f"top {top} of the model" for c in cands[:top]}
    families: dict[str, str] = {}
    best = {}
    for c in cands:
        best.setdefault(c.format, c)
    csr = best.get("csr")
    if csr is not None:
        chosen.setdefault(id(csr), "the best CSR by the model")
        families["csr"] = "timed: always (the baseline every other format must beat)"
    fills = {b: f for b, f in s.fills.items()}
    top_b = max(fills, key=fills.get) if fills else None
    if "bsr" in best:
        c = best["bsr"]
        b = c.params["block_size"]
        chosen.setdefault(id(c), f"the best BSR by the model (block fill {fills[b]:.2f} at b={b})")
        families["bsr"] = f"timed: sampled block fill {fills[top_b]:.2f} at b={top_b} >= {BSR_MIN_FILL}"
    elif top_b is not None and fills[top_b] < BSR_MIN_FILL:
        families["bsr"] = f"not a candidate: best sampled block fill {fills[top_b]:.2f} at b={top_b} < {BSR_MIN_FILL}"
    if "hyb" in best and csr is not None:
        c = best["hyb"]
        row = w * itemsize
        ratio = c.predicted_s / max(csr.predicted_s, 1e-12)
        fits = "fits" if s.n * row <= mach.llc_bytes else "outgrows"
        where = f"B ({s.n * row / 2**20:.1f} MiB) {fits} the last-level cache ({mach.llc_bytes / 2**20:.0f} MiB)"
        if ratio <= REACH:
            why = f"the model puts it at {ratio:.2f}x CSR (within {REACH}x); {where}"
            chosen.setdefault(id(c), f"the best hyb by the model: {why}")
            families["hyb"] = f"timed: {why}"
        else:
            families["hyb"] = f"not timed: the model puts it at {ratio:.1f}x CSR (more than {REACH}x); {where}"
    row = w * itemsize
    where = f"B ({s.n * row / 2**20:.1f} MiB) {{}} the last-level cache ({mach.llc_bytes / 2**20:.0f} MiB)"
    if "colparts" in best and csr is not None:
        c = best["colparts"]
        ratio = c.predicted_s / max(csr.predicted_s, 1e-12)
        why = f"{where.format('outgrows')}; the model puts it at {ratio:.2f}x CSR"
        chosen.setdefault(id(c), f"the best column parts by the model: {why}")
        families["colparts"] = f"timed: {why} (always timed where B outgrows the cache)"
    elif csr is not None and mach.threads and s.n * row <= mach.llc_bytes:
        families["colparts"] = f"not a candidate: {where.format('fits')}"
    for c in cands:
        c.why = chosen.get(id(c), "not timed: another of its family was")
    return [c for c in cands if id(c) in chosen], families


# -------------------------------------------------------------------- timing
def _operands(op: str, csr, w: int, dtype) -> tuple:
    rng = np.random.default_rng(0)
    m, n = csr.shape
    if op == "spmm":
        return (rng.uniform(-1, 1, (n, w)).astype(dtype),)
    return rng.uniform(-1, 1, (m, w)).astype(dtype), rng.uniform(-1, 1, (n, w)).astype(dtype)


def _result(op: str, csr, w: int, dtype, target: str) -> dict:
    """`out=` for the timed calls of SpMM on the CPU: one result, its pages touched once, so that
    the times are the kernels' and not the first-touch page faults of a new result per call (a
    400 MB result costs more in faults than some kernels: README, "Large results")."""
    if op != "spmm" or target != "cpu":
        return {}
    out = np.empty((csr.shape[0], w), value_dtype(csr.dtype, np.dtype(dtype)))
    out.fill(0)
    return {"out": out}


def _setup(run: Callable, csr, operands, c: Candidate, target: str, extra: dict | None = None):
    """The candidate's call of `run`, after one untimed run that converts and compiles (its time
    is `setup_s`); None when the candidate cannot run here (reported in the table, not fatal).
    `extra`: more keyword arguments of `run` (`out=`)."""
    kwargs = {"format": c.format, "target": target, "schedule": c.schedule, **c.params, **(extra or {})}
    try:
        t0 = time.perf_counter()
        run(csr, *operands, **kwargs)
        c.setup_s = time.perf_counter() - t0
    except Exception as e:
        c.error = f"{type(e).__name__}: {e}"[:160]
        return None
    return lambda: run(csr, *operands, **kwargs)


def _gpu_present() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False


# -------------------------------------------------------------------- the search
def _key(op: str, csr, w: int, target: str, mach: Machine, dtype) -> str:
    text = "|".join(
        [__name__, str(TUNE_FORMAT), op, fingerprint(csr), str(w), target, str(np.dtype(dtype)), _machine_id(mach)]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _disk_path(key: str) -> Path:
    """`$SPARSETIR_TUNE_DIR/<key>.json` when set (the test suite points it at a scratch folder, so
    that choices timed on a loaded machine never reach a user's cache), else `<cache>/tune/`."""
    explicit = os.environ.get("SPARSETIR_TUNE_DIR")
    if explicit:
        return Path(explicit).expanduser() / f"{key}.json"
    return cache_dir() / "tune" / f"{key}.json"


class _Damaged(Exception):
    """A cached tuning entry that cannot be used (the reason)."""


def _load(key: str, op: str, csr, feat: int, target: str, mach: Machine, itemsize: int = 4) -> TuneResult | None:
    """The cached result, or None when there is none (or it cannot be read: the save says why).
    An entry that is not one today's search could have written is damage: one `CacheWarning`,
    and None, so that it is tuned again and overwritten."""
    path = _disk_path(key)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise _Damaged("not a regular file")
        if info.st_size > MAX_ENTRY_BYTES:
            raise _Damaged(f"{info.st_size} bytes, more than a result holds")
        with open(path, "rb") as f:
            raw = f.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            raise _Damaged("more bytes than a result holds")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested too deep
            raise _Damaged(f"not JSON ({type(e).__name__})") from None
        s = Structure.of(csr)
        today = (candidates(op, s, feat, target, mach, every=True, itemsize=itemsize),
                 candidates(op, s, feat, target, mach, itemsize=itemsize))  # fmt: skip
        try:
            cands, winner, families = _parse_entry(data, op, target, *today)
        except RecursionError:  # a value nested nearly as deep as the parser allows
            raise _Damaged("values nested too deep") from None
    except OSError:
        return None  # missing, or a folder that cannot be read: tune (the save reports an unusable folder)
    except _Damaged as e:
        warnings.warn(CacheWarning(f"tuning cache entry {path} is damaged or stale ({e}); tuning again and "
                                   "overwriting it"), stacklevel=4)  # fmt: skip
        return None
    seconds = winner.measured_s if winner.measured_s is not None else winner.predicted_s
    return TuneResult(op, winner.format, winner.params, winner.schedule, seconds, winner.measured_s is not None,
                      Table(cands, winner, families), 0.0, key, cached=True, candidates=cands)  # fmt: skip


_FIELDS = tuple(f.name for f in dataclasses.fields(Candidate))


def _identity(format: str, params: dict, schedule: str | None) -> str:
    """A candidate's configuration as canonical JSON: equal only for equal values of equal types
    (`True`, `1` and `1.0` differ, as they do to the code that reads them)."""
    return json.dumps([format, params, schedule], sort_keys=True)


def _parse_entry(data, op: str, target: str, every: list[Candidate], least: list[Candidate]):
    """The candidates and the winner of a cached entry, checked field by field and against today's
    search (`every` candidate it may list, at `least` those it lists at today's `TIMING_GRAIN`):
    the same configurations and model times, in model order, and the winner the search would pick
    from the times recorded. `_Damaged` otherwise."""
    if not isinstance(data, dict) or set(data) != {"op", "winner", "candidates", "families"}:
        raise _Damaged("expected an object with op, winner, candidates and families")
    families = data["families"]
    if not isinstance(families, dict) or not all(isinstance(v, str) and len(v) <= 400 for v in families.values()):
        raise _Damaged("families must map a format family to a sentence")
    if data["op"] != op:
        raise _Damaged(f"op {_short(data['op'])}, expected {op!r}")
    rows = data["candidates"]
    if not isinstance(rows, list) or not 1 <= len(rows) <= len(every):
        raise _Damaged(f"expected a list of 1 to {len(every)} candidates")
    winner = data["winner"]
    if type(winner) is not int or not 0 <= winner < len(rows):
        raise _Damaged(f"winner {_short(winner)} is not the index of a candidate")
    known = {_identity(c.format, c.params, c.schedule): c for c in every}
    cands = [_parse_candidate(row, known) for row in rows]
    names = [_identity(c.format, c.params, c.schedule) for c in cands]
    if len(set(names)) < len(names) or not {_identity(c.format, c.params, c.schedule) for c in least} <= set(names):
        raise _Damaged("the candidates are not those this version tries for this matrix")
    if any(a.predicted_s > b.predicted_s for a, b in itertools.pairwise(cands)):
        raise _Damaged("the candidates are not in the model's order")
    chosen = cands[winner]
    measured = [c.measured_s for c in cands if c.measured_s is not None]
    if measured:
        expected = chosen.measured_s == min(measured)
    else:  # nothing timed: the model's best (CUDA: CSR's default schedule)
        expected = chosen is next((c for c in cands if c.format == "csr"), None) if target == "cuda" else winner == 0
    if not expected or chosen.error is not None:
        raise _Damaged(f"winner {winner} is not the candidate the search picks from these times")
    return cands, chosen, families


def _parse_candidate(row, known: dict[str, Candidate]) -> Candidate:
    if not isinstance(row, dict) or set(row) != set(_FIELDS):
        raise _Damaged(f"a candidate must have the fields {', '.join(_FIELDS)}")
    if not isinstance(row["format"], str) or not isinstance(row["params"], dict):
        raise _Damaged("a candidate's format must be a string and its params an object")
    if row["schedule"] is not None and not isinstance(row["schedule"], str):
        raise _Damaged("a candidate's schedule must be a string or null")
    today = known.get(_identity(row["format"], row["params"], row["schedule"]))
    if today is None:
        label = _short(f"{row['format']} {row['params']} / {row['schedule']}", 120)
        raise _Damaged(f"{label} is not a candidate of this version for this matrix")
    for name in ("predicted_s", "measured_s", "setup_s"):
        value = row[name]
        if value is None and name != "predicted_s":
            continue
        if type(value) not in (int, float) or not 0 <= value < math.inf:
            raise _Damaged(f"a candidate's {name} must be a non-negative number, got {_short(value)}")
    if not math.isclose(row["predicted_s"], today.predicted_s, rel_tol=1e-9):
        raise _Damaged(f"{today.label}: the model's time is not today's model's")
    for name in ("error", "why"):
        if row[name] is not None and not isinstance(row[name], str):
            raise _Damaged(f"a candidate's {name} must be a string or null")
    # Timed candidates have both times; one that failed has neither, and its error.
    if (row["measured_s"] is None) != (row["setup_s"] is None) or (row["error"] and row["measured_s"] is not None):
        raise _Damaged(f"{today.label}: its times and error do not go together")
    return Candidate(**{**row, "predicted_s": float(row["predicted_s"])})


def _short(value, limit: int = 40) -> str:
    """A cached value for a message, at most `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _save(result: TuneResult) -> None:
    """Write the result atomically (no temporary file is left, even when the write fails); a cache
    that cannot be written keeps it in this process (`write_file` warns once)."""
    data = {
        "op": result.op,
        "winner": result.candidates.index(result.table.winner),
        "candidates": [dataclasses.asdict(c) for c in result.candidates],
        "families": result.table.families,
    }
    path = _disk_path(result.key)
    try:
        write_file(path, json.dumps(data).encode())
    except OSError as e:  # not even a temporary folder can be written: the result holds in memory
        warnings.warn(CacheWarning(f"tuning result {path} could not be saved ({e})"), stacklevel=3)


def tune(
    op: str,
    A,
    feat: int,
    target: str = "cpu",
    *,
    run: Callable,
    top: int | None = None,
    budget: float = 0.25,
    progress: bool | None = None,
    cache: bool = True,
    dtype=np.float32,
) -> TuneResult:
    """Search `op` ("spmm" or "sddmm") for matrix `A` at width `feat` (see the module docstring).

    `run`: the operator that times a candidate, called as `run(A, *operands, format=...,
    target=..., schedule=..., **params)` (`sp.ops.spmm` / `sp.ops.sddmm`); `top`: how many of
    the model's best are timed (None: `DEFAULT_TOP`, and any cached result answers; given, a
    cached result answers only if its search timed, or tried, the model's best `top` too: a
    search asked for more than the cache holds runs again, and its result replaces the entry);
    `budget`: seconds of timed calls per
    candidate (at least 3 calls); `progress`: a tqdm bar while candidates are timed and the table
    printed after (None: only on a terminal); `cache`: read and write the on-disk cache.
    """
    if op not in ("spmm", "sddmm"):
        raise InputError(f"unknown operator {op!r}: expected 'spmm' or 'sddmm'")
    if target not in ("cpu", "cuda"):
        raise TargetError(f"unknown target {target!r}: expected 'cpu' or 'cuda'")
    if not isinstance(feat, (int, np.integer)) or isinstance(feat, bool) or feat < 0:
        raise InputError(f"feat must be a non-negative int, got {feat!r}")
    asked = top is not None
    top = positive_int("top", top) if asked else DEFAULT_TOP
    csr = as_csr(A)
    mach = machine()
    key = _key(op, csr, int(feat), target, mach, dtype)
    if cache:
        hit = _MEMORY.get(key) or _load(key, op, csr, int(feat), target, mach, np.dtype(dtype).itemsize)
        if hit is not None:
            _MEMORY[key] = hit
            if not asked or _covers(hit, top):
                return dataclasses.replace(hit, cached=True, tuning_seconds=0.0)
    start = time.perf_counter()
    s = Structure.of(csr)
    itemsize = np.dtype(dtype).itemsize
    cands = candidates(op, s, int(feat), target, mach, itemsize=itemsize)
    if s.nnz * feat < TIMING_GRAIN:
        timed, families = [], {"all": f"not timed: nnz x width below TIMING_GRAIN ({TIMING_GRAIN}), the model decides"}
    elif target == "cuda" and not _gpu_present():
        timed, families = [], {"all": "not timed: no GPU here; CUDA keeps CSR's default schedule"}
    elif target == "cuda":
        timed, families = cands[:top], {}
    else:
        timed, families = plan(cands, s, int(feat), mach, top, itemsize=itemsize)
    show = _interactive() if progress is None else bool(progress)
    if timed:
        from tqdm.auto import tqdm

        operands = _operands(op, csr, int(feat), dtype)
        extra = _result(op, csr, int(feat), dtype, target)
        calls = {}
        for c in tqdm(timed, desc=f"tuning {op} (width {feat})", unit="candidate", disable=not show, leave=False):
            call = _setup(run, csr, operands, c, target, extra)
            if call is not None:
                calls[id(c)] = call
        if calls:
            # Rounds of one call each, so that a slow or busy stretch of the machine costs every
            # candidate alike; at least 5 rounds, then until `budget` seconds per candidate are spent.
            medians = timing.medians(timing.time_interleaved(calls, budget=budget * len(calls)))
            for c in timed:
                if id(c) in medians:
                    c.measured_s = medians[id(c)]
    ok = [c for c in timed if c.measured_s is not None]
    if ok:
        winner = min(ok, key=lambda c: c.measured_s)
    elif target == "cuda":
        # The model is calibrated on the CPU only: untimed, CUDA keeps CSR's default schedule.
        winner = next(c for c in cands if c.format == "csr")
    else:
        winner = cands[0]
    seconds = winner.measured_s if winner.measured_s is not None else winner.predicted_s
    result = TuneResult(op, winner.format, winner.params, winner.schedule, seconds, winner.measured_s is not None,
                        Table(cands, winner, families), time.perf_counter() - start, key, candidates=cands)  # fmt: skip
    _MEMORY[key] = result
    if cache:
        _save(result)
    if show:
        print(result)
    return result


def _covers(result: TuneResult, top: int) -> bool:
    """Whether `result` answers a search that times the model's best `top`: it timed (or tried:
    a candidate that failed) each of them, or it timed nothing (the model decided alone, which
    `top` does not change)."""
    tried = [c.measured_s is not None or c.error is not None for c in result.candidates]
    return not any(tried) or all(tried[:top])


def _interactive() -> bool:
    import sys

    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
