"""Runtime converters: a scipy matrix -> the arrays of a new format's parameters.

Vectorised numpy (no Python loop over rows or nonzeros); int32 or int64 indices; values carried
in the matrix's dtype unless `dtype` says otherwise. Every converter places padding (value 0) at
coordinates the matrix does not store, keeps structure arrays sorted and unique where the format
declares them sorted, and together with its rule partitions the stored nonzeros: each lands in
exactly one part.

- `to_bsr(A, block_size)`: BSR of any shape, padded with empty rows/columns to the block.
- `block_fill(A, block_size, sample=256)`: the fill of BSR's stored blocks, from a sample of block rows.
- `to_ell_parts(A, buckets, num_col_parts)`: SparseTIR's column-partitioned hybrid (ELL when
  `num_col_parts == 1`): the columns split into `num_col_parts` equal ranges; in each, every row
  goes to the smallest bucket width that holds its nonzeros there; a row longer than the largest
  bucket is split into several rows of that width. A part is three levels: layers (dense), rows
  (sparse: the original row ids, sorted), columns (sparse, fixed width). A split row's
  full-width chunks go to successive layers, so a row appears once per layer. Padding slots get
  the columns `n, n + 1, ...` past the matrix (the part's column axis has length `n + width`).
- `to_padded(A, pad_size)`: CSR whose rows are padded to a multiple of `pad_size`.

Parameters are checked before any work, with a `FormatError` naming the parameter and the value:
sizes are positive integers (Python or numpy; no bools, floats or strings); bucket widths are
distinct powers of two; `num_col_parts <= n` (a narrower column part is empty; a matrix of fewer
than 4 columns takes up to 4); and every size the
new format stores (padded shape, columns, value slots) fits the index dtype, counted before
anything is allocated.

`convert(A, rules)` gives the arguments of every new parameter for a list of rules, through
the converter each rule's file attached (`rule.converter`), keyed by the renamed names, or
inferred (`format.infer`). Whatever a converter returns is checked (`check_converted`) before it
is used: every parameter present, the structure valid for the new format (the kernels' own
argument check, `format.args`), and every value slot at the coordinates `inv_idx_map` gives it,
each nonzero of A in exactly one slot: a part computes where its slot says, so a slot elsewhere
would be a silently wrong result.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse

from .. import inputs
from ..errors import FormatError, InputError
from ..inputs import half_the_memory
from ..ir.axis import DENSE_FIXED, SPARSE_FIXED
from .args import bind_arguments

INDEX_DTYPES = ("int32", "int64")


def positive_int(name: str, value, limit: int | None = None, why: str = "") -> int:
    """`inputs.positive_int` with a `FormatError`: a size of a format (a rule file's parameter)."""
    return inputs.positive_int(name, value, limit, why, error=FormatError)


def index_limit(idtype) -> int:
    """The largest size or coordinate the index dtype (int32 or int64) holds."""
    try:
        name = np.dtype(idtype).name if isinstance(idtype, str | np.dtype | type) else None
    except TypeError:
        name = None
    if name not in INDEX_DTYPES:
        raise FormatError(f"index dtype must be int32 or int64, got {idtype!r}")
    return int(np.iinfo(name).max)


def _fits(what: str, count: int | float, it) -> None:
    """A size of the new format, counted before anything is allocated, that must fit `it` (the
    index dtype, or int32 for a size that is a scalar parameter of the format)."""
    if count > index_limit(it):
        raise FormatError(f"{what}: {count:.0f}, more than {np.dtype(it)} holds (at most {index_limit(it)})")


#: Bytes per value slot that converting and checking a format take at most (values, structure,
#: the coordinates `check_converted` computes).
SLOT_BYTES = 64


def memory_limit() -> int:
    """Half the machine's memory: what a conversion may take."""
    return half_the_memory()


def slots_fit(what: str, count: int | float, it) -> None:
    """A number of value slots, counted before anything is allocated: within the index dtype,
    and within memory (an int64 index fits far more than a machine holds)."""
    _fits(what, count, it)
    if count * SLOT_BYTES > memory_limit():
        gib = count * SLOT_BYTES / 2**30
        raise FormatError(
            f"{what}: {count:.0f} slots, about {gib:.0f} GiB to convert and check, more than half of this "
            f"machine's memory ({2 * memory_limit() / 2**30:.0f} GiB)"
        )


def canonical(A, idtype: str | None = None) -> tuple[scipy.sparse.csr_matrix, np.dtype]:
    """`A` as canonical CSR (sorted, no duplicates), and the index dtype of the converted arrays
    (`idtype`, else int64 when `A` uses it, else int32)."""
    if not scipy.sparse.issparse(A):
        raise FormatError(f"expected a scipy sparse matrix, got {type(A).__name__}")
    # Every array checked before scipy's compiled conversions see it (`InputError` otherwise).
    csr = inputs.canonical(inputs.native(inputs.check_matrix(A, "A")))
    idtype = idtype or ("int64" if csr.indices.dtype == np.int64 or csr.indptr.dtype == np.int64 else "int32")
    if idtype not in INDEX_DTYPES:
        raise FormatError(f"index dtype must be int32 or int64, got {idtype!r}")
    return csr, np.dtype(idtype)


def row_ids(csr: scipy.sparse.csr_matrix) -> np.ndarray:
    """The row of every stored nonzero, in storage order."""
    return np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))


def to_bsr(A, block_size: int, idtype: str | None = None, dtype=None) -> dict[str, object]:
    """BSR arrays (`a` of shape (nnzb, b, b), `indptr`, `indices`, block counts `m`, `n`, `nnz`)."""
    b = positive_int("block_size", block_size)
    csr, it = canonical(A, idtype)
    m, n = csr.shape
    mb, nb = -(-m // b), -(-n // b)
    _fits(f"block_size={b}: the padded shape {mb * b} x {nb * b}", max(mb, nb) * b, it)
    slots_fit(f"block_size={b}: a block of {b} x {b} values", b * b, it)
    blocks = np.unique((row_ids(csr) // b) * nb + csr.indices.astype(np.int64) // b).size
    slots_fit(f"block_size={b}: the values of {blocks} blocks of {b} x {b}", blocks * b * b, it)
    try:
        return _bsr(csr, b, it, dtype)
    except MemoryError:
        raise FormatError(f"block_size={b}: {blocks} blocks of {b} x {b} values do not fit in memory") from None


def block_fill(A, block_size: int, sample: int | None = 256, seed: int = 0) -> float:
    """The fill of the stored `block_size` x `block_size` blocks of `A` in BSR: its nonzeros over
    the cells of the blocks that hold one (1.0 for a matrix of dense blocks; a partial block at
    the edge counts all its cells, as the kernel computes them). Estimated from `sample` block
    rows drawn at random (all of them when `sample` is None or at least their number): O(nnz of
    the sample), for a tuner choosing the format. 0.0 for a matrix without nonzeros.

    >>> import numpy as np, scipy.sparse as sps
    >>> block_fill(sps.csr_matrix(np.kron(np.eye(5), np.ones((3, 3)))), 3)
    1.0
    >>> block_fill(sps.eye(8, format="csr"), 2)
    0.5
    """
    b = positive_int("block_size", block_size)
    csr, _ = canonical(A)
    mb, nb = -(-csr.shape[0] // b), -(-csr.shape[1] // b)
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int | np.integer) or sample < 1):
        raise FormatError(f"sample must be a positive int or None, got {sample!r}")
    if sample is None or sample >= mb:
        picked = np.arange(mb, dtype=np.int64)
    else:
        picked = np.sort(np.random.default_rng(seed).choice(mb, size=int(sample), replace=False))
    starts = csr.indptr[np.minimum(picked * b, csr.shape[0])].astype(np.int64)
    ends = csr.indptr[np.minimum(picked * b + b, csr.shape[0])].astype(np.int64)
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return 0.0
    # The positions of the sampled rows' nonzeros, and the block row of each.
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    positions = np.arange(total, dtype=np.int64) + offsets
    block_rows = np.repeat(np.arange(len(picked), dtype=np.int64), lengths)
    blocks = np.unique(block_rows * nb + csr.indices[positions].astype(np.int64) // b).size
    return total / (blocks * b * b)


def _bsr(csr: scipy.sparse.csr_matrix, b: int, it: np.dtype, dtype) -> dict[str, object]:
    """The blocks straight from the nonzeros: O(nnz log nnz + stored blocks x b x b), nothing of
    the size of the padded shape."""
    m, n = csr.shape
    mb, nb = -(-m // b), -(-n // b)
    rows, cols = row_ids(csr), csr.indices.astype(np.int64)
    key = (rows // b) * nb + cols // b
    blocks, which = np.unique(key, return_inverse=True)  # sorted by (block row, block column)
    values = np.zeros((len(blocks), b, b), dtype=dtype or csr.dtype)
    values[which.reshape(-1), rows % b, cols % b] = csr.data
    indptr = np.zeros(mb + 1, np.int64)
    np.cumsum(np.bincount(blocks // max(nb, 1), minlength=mb), out=indptr[1:])
    return {"a": values, "indptr": indptr.astype(it), "indices": (blocks % max(nb, 1)).astype(it), "m": mb,
            "n": nb, "nnz": len(blocks)}  # fmt: skip


def default_buckets(A) -> list[int]:
    """Powers of two from 1 up to the longest row (at least 1)."""
    csr, _ = canonical(A)
    longest = int(np.diff(csr.indptr).max(initial=1))
    return [1 << k for k in range(max(longest - 1, 0).bit_length() + 1)]


def check_buckets(buckets: Sequence[int]) -> list[int]:
    """The bucket widths, sorted: a non-empty list of distinct powers of two (ints, Python or
    numpy), each within int32 (a width is a column count of the format)."""
    if isinstance(buckets, np.ndarray):
        buckets = buckets.tolist() if buckets.ndim == 1 else buckets
    if not isinstance(buckets, list | tuple) or not buckets:
        raise FormatError(f"buckets must be a non-empty list of powers of two, got {buckets!r}")
    widths = sorted(positive_int("a bucket width", w, index_limit(np.int32)) for w in buckets)
    if any(w & (w - 1) for w in widths) or len(set(widths)) != len(widths):
        raise FormatError(f"buckets must be distinct powers of two, got {list(buckets)}")
    return widths


#: A matrix of fewer columns still takes this many column parts (the extra ones empty), so that
#: one choice of parameters serves small matrices too.
MIN_COL_PARTS_BOUND = 4


def check_num_col_parts(num_col_parts, n: int | None = None) -> int:
    """`num_col_parts` as an int: positive, and at most the number of columns `n` when it is
    known (a column part narrower than one column is empty; at most MIN_COL_PARTS_BOUND on a
    narrower matrix)."""
    limit = max(int(n), MIN_COL_PARTS_BOUND) if n is not None else None
    why = "the matrix's columns: a column part holds one at least"
    return positive_int("num_col_parts", num_col_parts, limit, why)


def to_ell_parts(
    A, buckets: Sequence[int], num_col_parts: int = 1, idtype: str | None = None, dtype=None
) -> list[dict[str, object]]:
    """One dict per (column part, bucket), in that order: `a` (rows x width values), `indptr`
    (rows per layer), `rows` (the original row of each part row), `cols` (rows x width columns),
    `layers`, `m`, `n` (n + width), `nrows`."""
    widths = check_buckets(buckets)
    csr, it = canonical(A, idtype)
    m, n = csr.shape
    num_col_parts = check_num_col_parts(num_col_parts, n)
    _fits(f"buckets {widths}: the widest part's column count n + width", n + widths[-1], "int32")
    values = np.asarray(csr.data, dtype=dtype or csr.dtype)
    rows, cols = row_ids(csr), csr.indices.astype(np.int64)
    part_width = -(-n // num_col_parts) if n else 1
    part = cols // part_width
    # Within a row, columns increase, so column parts do too: canonical CSR order is already
    # sorted by (row, part), and each (row, part) run is one row of that column part. No sort.
    key = rows * num_col_parts + part
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    run_len = np.diff(np.r_[starts, len(key)])
    run_part, run_row = part[starts], rows[starts]
    # Runs longer than the largest bucket become several chunks of that width.
    wmax = widths[-1]
    pieces = -(-run_len // wmax)
    chunk_run = np.repeat(np.arange(len(starts)), pieces)
    chunk_index = np.arange(len(chunk_run)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    chunk_start = starts[chunk_run] + chunk_index * wmax
    chunk_len = np.minimum(run_len[chunk_run] - chunk_index * wmax, wmax)
    chunk_bucket = np.searchsorted(widths, chunk_len)  # smallest width >= length
    # Full-width chunks of a split row share the largest bucket: each goes to a layer of its own
    # (its index in the row), so that within a layer every row appears once. The last, shorter
    # chunk lands alone in a smaller bucket: layer 0 there.
    chunk_layer = np.where(chunk_bucket == len(widths) - 1, chunk_index, 0)
    chunk_part = run_part[chunk_run]
    # Chunks are in (row, part) order; a stable sort by (part, bucket, layer) groups each part's
    # chunks by layer with rows increasing within a layer.
    group = (chunk_part * len(widths) + chunk_bucket) * (int(chunk_layer.max(initial=0)) + 1) + chunk_layer
    by_group = np.argsort(group, kind="stable")
    bounds = np.searchsorted(
        group[by_group], np.arange(num_col_parts * len(widths) + 1) * (int(chunk_layer.max(initial=0)) + 1)
    )
    slots = np.asarray(widths, np.int64)[chunk_bucket]
    slots_fit(f"buckets {widths}: the value slots of the parts", int(slots.sum(initial=0)), it)
    out = []
    for p in range(num_col_parts):
        for w_index, w in enumerate(widths):
            k = p * len(widths) + w_index
            pick = by_group[bounds[k] : bounds[k + 1]]
            layers = int(chunk_layer[pick].max(initial=0)) + 1
            indptr = np.zeros(layers + 1, np.int64)
            np.cumsum(np.bincount(chunk_layer[pick], minlength=layers), out=indptr[1:])
            slots = np.arange(w)
            src = chunk_start[pick][:, None] + slots[None, :]
            real = slots[None, :] < chunk_len[pick][:, None]
            src = np.where(real, src, 0)
            part_cols = np.where(real, cols[src] if len(cols) else 0, n + slots[None, :])
            part_vals = np.where(real, values[src] if len(values) else 0, 0).astype(values.dtype)
            out.append({
                "a": np.ascontiguousarray(part_vals.reshape(-1)),
                "indptr": indptr.astype(it),
                "rows": run_row[chunk_run[pick]].astype(it),
                "cols": np.ascontiguousarray(part_cols.reshape(-1).astype(it)),
                "layers": layers,
                "m": m,
                "n": n + w,
                "nrows": len(pick),
            })  # fmt: skip
    return out


def to_padded(A, pad_size: int, idtype: str | None = None, dtype=None) -> dict[str, object]:
    """CSR with every row padded to a multiple of `pad_size` (padding columns `n, n + 1, ...`)."""
    pad_size = positive_int("pad_size", pad_size)
    csr, it = canonical(A, idtype)
    m, n = csr.shape
    _fits(f"pad_size={pad_size}: the padded column count n + pad_size", n + pad_size, "int32")
    lengths = np.diff(csr.indptr).astype(np.int64)
    padded_len = -(-lengths // pad_size) * pad_size
    slots_fit(f"pad_size={pad_size}: the padded rows' value slots", float(padded_len.sum(dtype=np.float64)), "int32")
    indptr = np.zeros(m + 1, np.int64)
    np.cumsum(padded_len, out=indptr[1:])
    total = int(indptr[-1])
    slot = np.arange(total) - np.repeat(indptr[:-1], padded_len)
    real = slot < np.repeat(lengths, padded_len)
    src = np.repeat(csr.indptr[:-1].astype(np.int64), padded_len) + slot
    src = np.where(real, src, 0)
    values = np.asarray(csr.data, dtype=dtype or csr.dtype)
    out_cols = np.where(real, csr.indices[src] if csr.nnz else 0, n + slot - np.repeat(lengths, padded_len))
    out_vals = np.where(real, values[src] if csr.nnz else 0, 0).astype(values.dtype)
    return {"a": out_vals, "indptr": indptr.astype(it), "indices": out_cols.astype(it), "m": m, "n": n + pad_size,
            "nnz": total}  # fmt: skip


def renamed(arrays: dict[str, object], rule_name: str) -> dict[str, object]:
    """`{"a": ...}` -> `{"a_<rule>": ...}`: the names a decomposed function's parameters have."""
    return {f"{k}_{rule_name}": v for k, v in arrays.items()}


def convert(A, rules) -> dict[str, object]:
    """The arguments of every new parameter of `rules` for the scipy matrix `A`, keyed by the
    renamed names (`a_<rule>`, `indptr_<rule>`, ...): from the converter each rule's file
    attached, else inferred from the rule's index maps (`format.infer`; one such rule at most,
    since nothing says how several would share the nonzeros). The result is checked
    (`check_converted`): a `FormatError` names the rule and what does not fit."""
    from .infer import check_maps, infer
    from .rule import FormatRewriteRule

    rules = list(rules) if isinstance(rules, list | tuple) else [rules]
    if not rules or not all(isinstance(r, FormatRewriteRule) for r in rules):
        raise FormatError(f"convert: expected a non-empty list of FormatRewriteRule, got {rules!r}")
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise FormatError(f"convert: rule names must be unique, got {names}")
    csr, _ = canonical(A)
    bare = [r for r in rules if getattr(r, "converter", None) is None]
    if len(bare) > 1 or (bare and len(rules) > 1):
        raise FormatError(
            f"rules {', '.join(f'`{r.name}`' for r in bare)} have no converter, and with several rules there is "
            "no telling which nonzero goes to which part (the rules must partition them); write a "
            "`convert(A, **params)` in the rule file"
        )
    out: dict[str, object] = {}
    done: set[int] = set()
    for rule in rules:
        if rule.converter is None:
            check_maps(csr, rule)  # before inference builds levels of what idx_map gives
            out.update(_guarded(rule, "inferring its arrays", lambda rule=rule: infer(A, rule)))
            continue
        if id(rule.converter) in done:
            continue
        done.add(id(rule.converter))
        result = _guarded(rule, "its converter", lambda rule=rule: rule.converter(A))
        if not isinstance(result, dict) or not all(isinstance(k, str) for k in result):
            raise FormatError(
                f"rule `{rule.name}`: its converter must return a dict of arguments keyed by renamed parameter "
                f"names (`a_{rule.name}`, ...), got {type(result).__name__}"
            )
        out.update(result)
    check_converted(csr, rules, out)
    return out


def _guarded(rule, what: str, run):
    """`run()`, with whatever it raises but a FormatError turned into one naming the rule."""
    try:
        return run()
    except FormatError:
        raise
    except MemoryError:
        raise FormatError(f"rule `{rule.name}`: {what} needs more memory than there is") from None
    except Exception as e:
        raise FormatError(f"rule `{rule.name}`: {what} failed: {type(e).__name__}: {e}") from e


def check_converted(A, rules, arrays: dict[str, object]) -> None:
    """Check converted arguments against their rules (see the module docstring); `A` is the
    matrix they were converted from. A `FormatError` names the rule, the parameter or the
    coordinate that does not fit."""
    A, _ = canonical(A)
    m, n = A.shape
    keys = row_ids(A) * max(n, 1) + A.indices.astype(np.int64)  # sorted: A is canonical
    covered = np.zeros(A.nnz, np.int64)  # slots holding each nonzero of A, over all parts
    owner = np.full(A.nnz, -1, np.int64)
    wanted = None
    for k, rule in enumerate(rules):
        if len(rule.axes_before_rewrite) != 2:
            raise FormatError(f"rule `{rule.name}`: converting a matrix needs a rule over its two axes")
        desc = rule.new_format_desc
        own = {}
        for p in desc.params:
            name = f"{p.name}_{rule.name}"
            if name not in arrays:
                expected = ", ".join(f"`{q.name}_{rule.name}`" for q in desc.params)
                raise FormatError(f"rule `{rule.name}`: the conversion gives no `{name}` (it must give {expected})")
            own[p.name] = arrays[name]
        for buf in desc.buffers:
            value = own.get(buf.data.name) if buf.data is not None else None
            if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.dtype != np.dtype(buf.dtype):
                own[buf.data.name] = value.astype(buf.dtype)  # values are compared, not typed, here
        try:
            bound = bind_arguments(desc, (), own)
        except InputError as e:
            raise FormatError(
                f"rule `{rule.name}`: the converted arrays do not fit the format `{desc.name}` (its parameters, "
                f"renamed `<name>_{rule.name}`): {e}"
            ) from None
        for name in rule.buffers_to_rewrite:
            buf = rule.new_buffer(name)
            slots_fit(f"rule `{rule.name}`: the values of `{buf.name}`", bound.buffers[buf].size, "int64")
            coords, slots = _slot_coordinates(rule, buf, bound)
            values = bound.buffers[buf]
            if np.any(values[slots:] != 0):
                raise FormatError(f"rule `{rule.name}`: `{buf.name}` holds values past its {slots} slots")
            values = values[:slots]
            new = [coords[a] for a in rule.axes_after_rewrite]
            old = rule.inv_idx_map.evaluate(new)
            if wanted is None:
                data = A.data.astype(values.dtype)
                wanted = data != 0
            _check_slots(rule, buf, new, old, values, (m, n), keys, data, wanted, covered, owner, k)
            held = np.flatnonzero(values != 0)
            _check_idx_map(rule, old[0][held], old[1][held], {a.name: bound.axes[a].length for a in desc.axes})
    _check_cover(rules, A, wanted if wanted is not None else A.data != 0, covered, owner)


def _slot_coordinates(rule, buf, bound) -> tuple[dict[str, np.ndarray], int]:
    """The coordinate on every axis of each value slot of `buf` (levels nested parent to child,
    as the format's storage is), and the number of slots."""
    coords: dict[str, np.ndarray] = {}
    n_pos = 1
    for level, axis in enumerate(buf.axes):
        ad = bound.axes[axis]
        if axis.kind == DENSE_FIXED:
            coords = {k: np.repeat(v, ad.length) for k, v in coords.items()}
            coords[axis.name] = np.tile(np.arange(ad.length, dtype=np.int64), n_pos)
            n_pos *= ad.length
            continue
        if level == 0 or axis.parent is not buf.axes[level - 1] or bound.axes[axis.parent].n_pos != n_pos:
            raise FormatError(
                f"rule `{rule.name}`: `{buf.name}` stores axis `{axis.name}` under levels other than its parent's; "
                "its slots cannot be checked against inv_idx_map (nest each sparse axis under the axis before it)"
            )
        counts = np.full(n_pos, ad.nnz_cols, np.int64) if axis.kind == SPARSE_FIXED else np.diff(ad.indptr)
        parent = np.repeat(np.arange(n_pos, dtype=np.int64), counts)
        coords = {k: v[parent] for k, v in coords.items()}
        if ad.indices is not None:
            coords[axis.name] = ad.indices.astype(np.int64)
        else:  # dense variable: 0 .. length - 1 under each parent
            coords[axis.name] = np.arange(len(parent), dtype=np.int64) - np.repeat(
                ad.indptr[:-1].astype(np.int64), counts
            )
        n_pos = ad.n_pos
    return coords, n_pos


def _check_slots(rule, buf, new, old, values, shape, keys, data, wanted, covered, owner, k) -> None:
    """Every slot maps through inv_idx_map to a coordinate the kernel may read (padding: not
    negative) and every slot holding a value to the nonzero of A holding that value."""
    m, n = shape
    negative = np.zeros(len(values), bool)
    for c in old:
        negative |= c < 0
    stored = values != 0
    if negative.any():
        raise _slot_error(rule, buf, new, old, values, int(np.argmax(negative)), "a negative coordinate")
    inside = stored & (old[0] < m) & (old[1] < n)
    outside = stored & ~inside
    if outside.any():
        raise _slot_error(rule, buf, new, old, values, int(np.argmax(outside)), f"outside the {m} x {n} matrix")
    padding = ~stored & (old[0] < m) & (old[1] < n)
    pad_key = old[0][padding] * max(n, 1) + old[1][padding]
    pad_pos = np.minimum(np.searchsorted(keys, pad_key), max(len(keys) - 1, 0))
    clash = (keys[pad_pos] == pad_key) & wanted[pad_pos] if len(keys) else np.zeros(len(pad_key), bool)
    if clash.any():
        at = int(np.flatnonzero(padding)[np.argmax(clash)])
        raise _slot_error(rule, buf, new, old, values, at, "where A stores a nonzero (padding must lie elsewhere)")
    key = old[0][stored] * max(n, 1) + old[1][stored]
    pos = np.searchsorted(keys, key)
    found = pos < len(keys)
    found[found] = keys[pos[found]] == key
    same = np.zeros(len(key), bool)
    same[found] = (data[pos[found]] == values[stored][found]) | (
        np.isnan(data[pos[found]]) & np.isnan(values[stored][found])
    )
    if not same.all():
        at = int(np.flatnonzero(stored)[np.argmax(~same)])
        what = "where A stores another value" if found[np.argmax(~same)] else "which A does not store"
        raise _slot_error(rule, buf, new, old, values, at, what)
    np.add.at(covered, pos, 1)
    owner[pos] = np.where(owner[pos] < 0, k, owner[pos])


def _check_idx_map(rule, rows: np.ndarray, cols: np.ndarray, lengths: dict[str, int]) -> None:
    """`idx_map` on the nonzeros a part holds: within the new axes' lengths, and brought back by
    `inv_idx_map` (where that is not proven): a computation that reads the rewritten buffer at
    other coordinates than its own iterators goes through `idx_map`."""
    mapped = rule.idx_map.evaluate([rows, cols])
    for name, c in zip(rule.axes_after_rewrite, mapped):
        bad = (c < 0) | (c >= lengths[name])
        if bad.any():
            i = int(np.argmax(bad))
            raise FormatError(
                f"rule `{rule.name}`: idx_map takes A's nonzero at ({rows[i]}, {cols[i]}) to "
                f"{tuple(int(x[i]) for x in mapped)}, whose `{name}` coordinate {int(c[i])} is outside the axis "
                f"[0, {lengths[name]}) of the converted arrays"
            )
    if not rule.inverse_proven:
        back = rule.inv_idx_map.evaluate(mapped)
        wrong = (back[0] != rows) | (back[1] != cols)
        if wrong.any():
            i = int(np.argmax(wrong))
            raise rule.not_inverse((int(rows[i]), int(cols[i])))


def _slot_error(rule, buf, new, old, values, at: int, what: str) -> FormatError:
    slot = tuple(int(c[at]) for c in new)
    back = tuple(int(c[at]) for c in old)
    return FormatError(
        f"rule `{rule.name}`: the slot of `{buf.name}` at {_point(rule.axes_after_rewrite, slot)} holds "
        f"{values[at].item()!r}, and inv_idx_map takes it to {back}, {what}: the part would compute there "
        "(a converter must place each nonzero where inv_idx_map finds it, padding at coordinates not below 0)"
    )


def _check_cover(rules, A, wanted: np.ndarray, covered: np.ndarray, owner: np.ndarray) -> None:
    """Each nonzero of A in exactly one slot of one part (explicit zeros: at most one)."""
    rows = row_ids(A)
    missing = wanted & (covered == 0)
    if missing.any():
        i = int(np.argmax(missing))
        raise FormatError(
            f"rules {_rule_names(rules)}: A's nonzero at ({rows[i]}, {A.indices[i]}) is in no part: the conversion "
            "drops it (the rules must partition the stored nonzeros)"
        )
    twice = covered > 1
    if twice.any():
        i = int(np.argmax(twice))
        raise FormatError(
            f"rules {_rule_names(rules)}: A's nonzero at ({rows[i]}, {A.indices[i]}) is stored {covered[i]} times "
            f"(first by rule `{rules[owner[i]].name}`): it would count more than once"
        )


def _rule_names(rules) -> str:
    return ", ".join(f"`{r.name}`" for r in rules)


def _point(names, coords) -> str:
    return "(" + ", ".join(f"{a}={c}" for a, c in zip(names, coords)) + ")"
