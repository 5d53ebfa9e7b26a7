"""Composable formats in `sp.ops`: A decomposed by a rule module, each part in its own format.

    conversion = converted(module, csr, params, "float32", "int32")    # once per structure of A
    kernel = parts_kernel("spmm", module, params, conversion, ...)    # once per format and dtypes
    values = conversion.values(csr.data, dtype)                        # every call: one gather

The conversion is `sp.format.decompose` on A's structure: it numbers A's nonzeros 1..nnz, so
each value slot of a part names the nonzero it holds (`Part.gathers`), and new values of A are
one gather for all parts (`slots.gather`), with no conversion again; values equal, byte for byte,
to the same thread's last call's reuse that call's gather (`slots.same`). What every call does
besides the kernel is computed once per conversion: the slot index of that gather, the slot of
each nonzero that maps an SDDMM's results back to A's order (`stored_values`), and for a format
of b x b blocks the rows of B its padding cells read (`padding_rows`: only those are checked for
inf/NaN). BSR's SDDMM gathers nothing: its kernel runs on a mask of ones (`ones`) and A's values
are applied on the way back (`scaled_values`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..errors import FormatError, InputError
from ..format import FormatRewriteRule, decompose, parameter_names, rules_of
from ..operands import StructureCache
from ..runtime import slots
from ..runtime.kernel import Kernel
from ..runtime.slots import gather
from .kernels import KernelKey, compiled, fixed_width, resolve_schedule
from .scripts import SCRIPTS

#: A format of more parts than this compiles only the parts that store a nonzero of A.
PRUNE_PARTS_OVER = 8
#: The conversions of A's structures, by (indptr, indices) and the format's module and parameters.
CONVERSIONS = StructureCache()
#: Where the dense operand is checked for inf/NaN: chunks of this many entries (no temporary of its size).
FINITE_CHUNK = 1 << 20


@dataclass(eq=False)
class Conversion:
    """A's structure in a decomposed format: what every call with that structure reuses."""

    rules: list[FormatRewriteRule]  #: the parts' rules, in the kernel's dtypes
    structure: dict[str, np.ndarray]  #: the parts' structure arguments (indices, sizes)
    gathers: dict[str, np.ndarray]  #: value argument -> 1 + position in A.data of each slot (0: padding)
    nnz: int = 0  #: A's nonzeros
    checked: set = field(default_factory=set)  #: the kernels that have checked `structure` once
    padded_reads: dict = field(default_factory=dict)  #: block size -> `padding_rows`, once per conversion
    _scratch: dict = field(default_factory=dict, repr=False)  #: (thread, name, dtype) -> `scratch` buffer
    _ones: dict = field(default_factory=dict, repr=False)  #: dtype -> `ones`' flat buffer
    #: (thread, dtype) -> (a copy of A's values, the `scratch` buffer they were gathered into, by which index)
    _last_values: dict = field(default_factory=dict, repr=False)
    _take: tuple | None = field(default=None, repr=False)  #: (take, `_composed(take)`), the last one

    def values(
        self, data: np.ndarray, dtype: np.dtype, threads: int | None = None, take: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """Each part's values gathered from A's (0 where the part pads), each part's values a view
        of its range of one buffer: one pass by the slot index computed once (`slot_index`, -1
        for padding; `slots.gather`), unless A's values are, byte for byte, those of this
        thread's last call with this structure (`slots.same` against a copy kept then: reading
        both costs less than the gather), whose buffer is then reused. (An index into
        `[0, *A.data]` built every call cost 2.3 ms on bcsstk16; `np.take` by an `np.intp` index
        then zeroing the padding 0.2-0.4 ms there, 12 ms on blocks-b8's 5.8M slots.) The buffer
        is this thread's (`scratch`): concurrent calls never share one. `threads`: the call's (None:
        Numba's setting), for both passes (`slots.PARALLEL_ELEMENTS`).

        With `take` (`operands.Reordered.take`: A given in another format, `data` its values in
        their own order, CSR's value k at `data.ravel()[take[k]]`), the gather reads `data` by
        the composed index, made once per `take`; where that index is `data`'s own order (a BSR
        matrix in this conversion's block size and order), the parts' values are views of
        `data` itself: no pass at all."""
        data = np.ascontiguousarray(data, dtype=dtype).reshape(-1)
        index = self.slot_index if take is None else self._composed(take)
        if index is None:  # the parts' slots are `data`'s values, in order, padding-free
            return self._views(data)
        key = (threading.get_ident(), np.dtype(dtype))
        last = self._last_values.get(key)
        flat = self.scratch("values", self.slots, dtype)
        if last is not None and last[1] is flat and last[2] is index and slots.same(last[0], data, threads):
            return self._views(flat)
        if len(data):
            gather(data, index, flat, threads)
        else:
            flat.fill(0)
        self._last_values[key] = (data.copy(), flat, index)
        return self._views(flat)

    def _composed(self, take: np.ndarray) -> np.ndarray | None:
        """`slot_index` composed with `take`: the position in a reordered input's values of each
        slot (-1 for padding), or None where that is every position in order. Kept for the last
        `take` only (one input format at a time is the common case)."""
        last = self._take
        if last is not None and last[0] is take:
            return last[1]
        index = self.slot_index
        composed = np.where(index >= 0, take[np.maximum(index, 0)], -1).astype(take.dtype)
        if len(composed) == len(take) and np.array_equal(composed, np.arange(len(take))):
            composed = None
        self._take = (take, composed)
        return composed

    def outputs(self, dtype: np.dtype) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """An SDDMM's output buffers (`c_<rule>` for each value argument `a_<rule>`) as views of one
        flat buffer with one slot more, which stays 0, and that buffer (for `stored_values`)."""
        flat = self.scratch("outputs", self.slots + 1, dtype)
        flat[-1] = 0
        return flat, self.output_views(flat)

    def scratch(self, name: str, size: int, dtype: np.dtype) -> np.ndarray:
        """A buffer of `size` elements kept for the next call of this thread with this structure:
        the parts' values and outputs live only during a call, and a new buffer of their size
        costs its page faults on every call (blocks-b8, 5.8M float32 slots: 3-6 ms of CPU time, a
        third of the kernel at width 32). One per thread, so concurrent calls never share one."""
        key = (threading.get_ident(), name, np.dtype(dtype))
        flat = self._scratch.get(key)
        if flat is None or flat.size != size:
            flat = self._scratch[key] = np.empty(size, dtype)
        return flat

    def value_views(self, flat):
        """The parts' value arguments (`a_<rule>`) as views of `flat` (host or device), slot by
        slot, as `values` lays them out (`ops/device.py` gathers into a device buffer)."""
        return self._views(flat)

    def output_views(self, flat):
        """The parts' SDDMM outputs (`c_<rule>`) as views of `flat` (host or device), slot by slot."""
        return {"c" + name[1:]: view for name, view in self._views(flat).items()}

    @property
    def slots(self) -> int:
        """How many value slots the parts hold, padding included."""
        return len(self.slot_index)

    def stored_values(self, flat: np.ndarray, threads: int | None = None) -> np.ndarray:
        """The values of A's nonzeros, in A's order, from `outputs`' flat buffer: one gather by
        the slot of each nonzero (computed once; the extra 0 slot for a nonzero no part holds)."""
        if not isinstance(flat, np.ndarray):
            return np.take(flat, self.stored_slots, mode="clip")
        return gather(flat, self._stored_index, np.empty(self.nnz, flat.dtype), threads)

    def ones(self, dtype: np.dtype) -> dict[str, np.ndarray]:
        """The parts' values of a matrix of ones with A's structure (0 where a part pads), made
        once per dtype: an SDDMM run on them computes each slot's dot product alone, and
        `scaled_values` applies A's values on the way back to A's order, so a call gathers no
        values (bcsstk16 in BSR 3 x 3: 0.24-0.4 ms a call, a third of the kernel at width 32)."""
        dtype = np.dtype(dtype)
        flat = self._ones.get(dtype)
        if flat is None:
            flat = self._ones[dtype] = (self.slot_index >= 0).astype(dtype)
        return self._views(flat)

    def scaled_values(self, flat: np.ndarray, data: np.ndarray, threads: int | None = None) -> np.ndarray:
        """`stored_values` times A's values: the SDDMM of A from the one of `ones` (`outputs`'
        flat buffer), in one pass (`slots.scaled`); a nonzero no part holds gets 0."""
        data = np.ascontiguousarray(data, dtype=flat.dtype)
        return slots.scaled(data, flat, self._stored_index, np.empty(self.nnz, flat.dtype), threads)

    def _views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        views, start = {}, 0
        for name, where in self.gathers.items():
            views[name] = flat[start : start + where.size].reshape(where.shape)
            start += where.size
        return views

    @cached_property
    def slot_index(self) -> np.ndarray:
        """The position in A.data of every slot of the parts, in order, -1 for padding, in the
        smallest of int32/int64 that holds A's positions (for `slots.gather`)."""
        where = [w.reshape(-1) for w in self.gathers.values()]
        where = np.concatenate(where) if where else np.zeros(0, np.int64)
        return (where - 1).astype(_index_dtype(self.nnz))

    @cached_property
    def _stored_index(self) -> np.ndarray:
        """`stored_slots` in the smallest index dtype that holds it (for `slots.gather`)."""
        return self.stored_slots.astype(_index_dtype(self.slots + 1))

    @cached_property
    def unheld(self) -> bool:
        """Whether a nonzero of A is in no slot (its SDDMM value is the extra slot's 0)."""
        return bool((self.stored_slots == self.slots).any())

    @cached_property
    def stored_slots(self) -> np.ndarray:
        """The slot of each nonzero of A, or the extra slot past the parts' for a nonzero no slot
        holds (a nonzero two slots hold gets the last, as the loop over parts it replaces did)."""
        where = [w.reshape(-1) for w in self.gathers.values()]
        where = np.concatenate(where) if where else np.zeros(0, np.int64)
        scatter = np.full(self.nnz, where.size, np.intp)
        stored = np.flatnonzero(where)
        scatter[where[stored] - 1] = stored
        return scatter

    @cached_property
    def pads(self) -> bool:
        """Whether a part holds padding: a slot that gathers no value of A (computed once: every
        call asks)."""
        return any(not where.all() for where in self.gathers.values())

    @cached_property
    def shares_rows(self) -> bool:
        """Whether two parts, or two layers of one part, may hold the same row of A: False only
        when every part lists its rows (`rows_<rule>`, as ELL/hyb parts do) and no row repeats.
        Computed once per conversion: every call asks, and the `np.unique` over all parts' rows
        cost 3 ms a call on pubmed's hyb (2 column parts), five times CSR's whole SpMM."""
        rows = [self.structure.get(f"rows_{r.name}") for r in self.rules]
        if any(not isinstance(r, np.ndarray) for r in rows):
            return True
        ids = np.concatenate([r.reshape(-1) for r in rows]) if rows else np.zeros(0, np.int64)
        return len(np.unique(ids)) != len(ids)


def format_module(format):
    """A shipped rule file by name, or a user's rule module (anything with `rules`)."""
    import format_rules

    if isinstance(format, str):
        module = format_rules.SHIPPED.get(format)
        if module is None:
            known = ", ".join(["csr", *format_rules.SHIPPED])
            raise InputError(f"unknown format {format!r}: expected one of {known}, or a rule module")
        return module
    if callable(getattr(format, "rules", None)):
        return format
    raise InputError(f"format must be a name or a rule module with `rules(**params)`, got {type(format).__name__}")


def check_parameters(module, params: dict) -> None:
    """A parameter the rule file does not take is the caller's mistake: `InputError` (what the
    file itself gets wrong is a `FormatError`, from `rules_of`)."""
    try:
        accepted = parameter_names(module.rules)
    except (TypeError, ValueError):
        return
    given = ("A", "dtype", "idtype")  # passed by `rules_of`, not by the caller
    unknown = [k for k in params if accepted is not None and (k not in accepted or k in given)]
    if unknown:
        takes = ", ".join(f"`{k}`" for k in accepted or [] if k not in given) or "none"
        raise InputError(
            f"format `{getattr(module, '__name__', '?')}` has no parameter {', '.join(f'`{k}`' for k in unknown)} "
            f"(it takes {takes})"
        )


def converted(module, csr, params: dict, dtype: str, idtype: str) -> Conversion:
    """A's structure decomposed by `module` with `params`, once per structure: `sp.format.decompose`
    (float64 rules, whose values number the nonzeros exactly), and the rules for the kernel's
    `dtype`, which must declare the same format but for the values' dtype."""
    key = (csr.shape, id(module), repr(sorted(params.items())), dtype, idtype)
    conversion = CONVERSIONS.get(csr.indptr, csr.indices, *key)
    if conversion is not None:
        return conversion
    check_parameters(module, params)
    rules = rules_of(module, csr, params, dtype, idtype)
    parts = decompose(csr, module, **params).parts
    if _layout(rules) != _layout([p.rule for p in parts]):
        raise FormatError(
            f"format `{getattr(module, '__name__', '?')}`: its rules for {dtype} values declare another format than "
            "for float64 ones; a rule file's formats may differ by the values' dtype only"
        )
    if len(parts) > PRUNE_PARTS_OVER:
        # An empty part computes nothing, and each part costs compile time (on the CPU about a
        # second apiece for SpMM where parts share rows, more for SDDMM), so `hyb` with many
        # column parts on a small matrix compiles what it uses. Few parts are all kept: one
        # kernel then serves every matrix, instead of one per set of non-empty parts.
        kept = [k for k, p in enumerate(parts) if p.nnz] or [0]
        rules, parts = [rules[k] for k in kept], [parts[k] for k in kept]
    structure = {k: v for p in parts for k, v in p.structure.items()}
    gathers = {k: v for p in parts for k, v in p.gathers.items()}
    conversion = Conversion(rules, structure, gathers, csr.nnz)
    CONVERSIONS.put(csr.indptr, csr.indices, key, conversion)
    return conversion


def _layout(rules) -> list:
    """What a list of rules declares, but the dtype of its values: names, parameters (structure
    dtypes included) and each buffer's axes (kinds, index dtypes, extents)."""
    return [
        (
            r.name,
            [(p.name, p.dtype) for p in r.new_format_desc.params],
            [
                (b.name, [(a.name, a.kind, a.idtype, str(a.length), str(a.nnz_cols)) for a in b.axes])
                for b in r.new_format_desc.buffers
            ],
        )
        for r in rules
    ]


#: The rows of each dense operand (and of SpMM's result `c`), by the script's shape parameter.
OPERAND_ROWS = {"spmm": {"b": "n", "c": "m"}, "sddmm": {"x": "m", "y": "n"}}


def padding(module, params: dict, target: str) -> tuple[dict, int] | None:
    """`(counts, factor)` where the format computes on a shape padded to whole blocks (the rule
    file's `padded_shape(**params)`, as `format_rules.bsr` has; CPU only): the kernel is built by
    `sp.transform.pad_shape` (no padding guards) and takes operands of `counts[p] * factor` rows
    for each shape parameter `p` (`pad_operands`). None for other formats."""
    padded = getattr(module, "padded_shape", None)
    if target != "cpu" or not callable(padded):
        return None
    return padded(**params)


def pad_operands(op: str, args: dict, structure: dict, pad: tuple[dict, int]) -> dict:
    """The dense operands in `args` (and SpMM's result) with the padded shape's rows: zero rows
    appended where the shape is not a multiple of the block (a copy then), else as given."""
    counts, factor = pad
    out = dict(args)
    for name, param in OPERAND_ROWS[op].items():
        X = args[name]
        rows = int(structure[counts[param]]) * factor
        if X.shape[0] != rows:
            padded = np.zeros((rows, *X.shape[1:]), X.dtype) if name != "c" else np.empty((rows, *X.shape[1:]), X.dtype)
            if name != "c":
                padded[: X.shape[0]] = X
            out[name] = padded
    return out


def default_schedule(
    op: str, target: str, conversion: Conversion, padded: bool, module=None, params=None, feat: int = 0
):
    """The schedule of a decomposed format: BSR's (`schedules.bsr.default`, by the width `feat`)
    on a padded shape, column parts' (`schedules.colparts`) for `format_rules.colparts`, else the
    schedule of any decomposition (`schedules.common.parts`)."""
    import format_rules
    from schedules import bsr, colparts
    from schedules.common import parts as parts_schedule

    own = bsr.default(op, target, feat) if padded else None
    if own is not None:
        return own
    own = colparts.default(op, target, **(params or {})) if module is format_rules.colparts else None
    if own is not None:
        return own
    return parts_schedule(target, shared_rows=conversion.shares_rows)


def parts_kernel(
    op: str,
    module,
    params: dict,
    conversion: Conversion,
    dtype: str,
    idtype: str,
    target: str,
    feat: int,
    schedule,
) -> Kernel:
    """The kernel of `op` decomposed by the conversion's rules (the computation alone), compiled
    once per format, parameters, dtypes, target, schedule (and width where `fixed_width`). An
    SDDMM's output `C` moves to the parts' formats too. A format with `padded_shape` (BSR) is
    built on the padded shape (`padding`)."""
    from ..transform import decompose_format, remove_preprocess
    from ..transform.pad_shape import fold_block_init, pad_shape

    pad = padding(module, params, target)
    if schedule is None:
        schedule = default_schedule(op, target, conversion, pad is not None, module, params, feat)
    schedule = resolve_schedule(op, target, schedule)
    rules = conversion.rules
    format = (
        f"{getattr(module, '__name__', '?')}@{id(module)}{sorted(params.items())!r}:{','.join(r.name for r in rules)}"
    )
    key = KernelKey(op, format, dtype, idtype, target, feat if fixed_width(target, schedule) else None, schedule)

    def make():
        parts = rules if op == "spmm" else [r.with_buffer("C", like="A") for r in rules]
        mod = remove_preprocess(decompose_format(SCRIPTS[op](idtype, dtype), parts))
        if pad is None:
            return mod
        mod = pad_shape(mod, *pad)
        # SpMM: C zeroed per block row where the row is summed (`fold_block_init`), not in a pass of its own.
        return fold_block_init(mod, pad[1]) if op == "spmm" else mod

    return compiled(key, make)


def run_parts(kernel: Kernel, conversion: Conversion, args: dict, thread_args: dict) -> None:
    """Run a decomposed kernel on the arguments it takes; the converted structure is checked on
    its first run with this kernel only (the conversion is cached with A's structure, so later
    calls reuse checked arrays)."""
    checked = id(kernel) in conversion.checked
    wanted = set(kernel.parameters)
    kernel(**{k: v for k, v in args.items() if k in wanted}, check_structure=not checked, **thread_args)
    conversion.checked.add(id(kernel))


def padding_rows(conversion: Conversion, factor: int, n: int) -> np.ndarray | None:
    """The rows of B (below `n`) that a padding slot multiplies: for a part of b x b blocks
    (`factor` b, values of shape (blocks, b, b)) the column `indices_<rule>[block] * b + ji` of
    each empty cell `(block, ii, ji)`; for a part with a column per slot (`cols_<rule>` or
    `indices_<rule>` as long as its values: ELL, hyb) the column of each padding slot. Padding
    columns at or past `n` (ELL's, which the kernel's guard skips) read no row. None where a part
    is of neither shape (then any row may meet padding). Computed once per conversion."""
    if factor in conversion.padded_reads:
        return conversion.padded_reads[factor]
    rows = []
    for rule in conversion.rules:
        values = [w for name, w in conversion.gathers.items() if name.endswith(f"_{rule.name}")]
        cols = [conversion.structure.get(f"{kind}_{rule.name}") for kind in ("cols", "indices")]
        cols = [c for c in cols if isinstance(c, np.ndarray)]
        if len(values) != 1 or len(cols) != 1:
            rows = None
            break
        (gather,), (index,) = values, cols
        if factor > 1 and gather.shape[1:] == (factor, factor) and index.shape == gather.shape[:1]:
            block, _, ji = np.nonzero(gather == 0)
            rows.append(index.astype(np.int64)[block] * factor + ji)
        elif gather.shape == index.shape:
            rows.append(index[gather == 0].astype(np.int64))
        else:
            rows = None
            break
    if rows is not None:
        rows = np.unique(np.concatenate(rows)) if rows else np.zeros(0, np.int64)
        rows = rows[rows < n].astype(np.intp)
    conversion.padded_reads[factor] = rows
    return rows


def padding_is_exact(conversion: Conversion, pad: tuple[dict, int] | None, B: np.ndarray) -> bool:
    """Whether the padding of the parts adds exact zeros to `B`'s products: no padding, or every
    row of B a padding slot reads (`padding_rows`, or all of B where unknown) finite (0 * inf is
    NaN where A stores nothing)."""
    if not conversion.pads:
        return True
    rows = padding_rows(conversion, pad[1] if pad is not None else 1, B.shape[0])
    if rows is None or 2 * len(rows) > B.shape[0] or not B.flags.c_contiguous:
        return all_finite(B)
    return slots.rows_finite(B, rows)


def _index_dtype(limit: int) -> type:
    return np.int32 if limit < 2**31 - 1 else np.int64


def all_finite(X: np.ndarray) -> bool:
    """Whether every entry of `X` is finite: `slots.all_finite` on a C-contiguous array, else in
    chunks of `FINITE_CHUNK` (no temporary of X's size), stopping at the first that holds an inf
    or a NaN."""
    if X.flags.c_contiguous:
        return slots.all_finite(X)
    flat = X.reshape(-1)
    return all(np.isfinite(flat[i : i + FINITE_CHUNK]).all() for i in range(0, len(flat), FINITE_CHUNK))
