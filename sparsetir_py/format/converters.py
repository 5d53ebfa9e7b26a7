"""Runtime converters: a scipy matrix -> the arrays of a new format's parameters.

Vectorised numpy (no Python loop over rows or nonzeros); int32 or int64 indices; values carried
in the matrix's dtype unless `dtype` says otherwise. Every converter places padding (value 0) at
coordinates the matrix does not store, keeps structure arrays sorted and unique where the format
declares them sorted, and together with its rule partitions the stored nonzeros: each lands in
exactly one part.

- `to_bsr(A, block_size)`: BSR of any shape, padded with empty rows/columns to the block.
- `to_ell_parts(A, buckets, num_col_parts)`: SparseTIR's column-partitioned hybrid (ELL when
  `num_col_parts == 1`): the columns split into `num_col_parts` equal ranges; in each, every row
  goes to the smallest bucket width that holds its nonzeros there; a row longer than the largest
  bucket is split into several rows of that width. A part is three levels: layers (dense), rows
  (sparse: the original row ids, sorted), columns (sparse, fixed width). A split row's
  full-width chunks go to successive layers, so a row appears once per layer. Padding slots get
  the columns `n, n + 1, ...` past the matrix (the part's column axis has length `n + width`).
- `to_padded(A, pad_size)`: CSR whose rows are padded to a multiple of `pad_size`.

`convert(A, rules)` gives the arguments of every new parameter for a list of rules, through
the converter each rule's file attached (`rule.converter`), keyed by the renamed names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse

from ..errors import FormatError

INDEX_DTYPES = ("int32", "int64")


def canonical(A, idtype: str | None = None) -> tuple[scipy.sparse.csr_matrix, np.dtype]:
    """`A` as canonical CSR (sorted, no duplicates), and the index dtype of the converted arrays
    (`idtype`, else int64 when `A` uses it, else int32)."""
    if not scipy.sparse.issparse(A):
        raise FormatError(f"expected a scipy sparse matrix, got {type(A).__name__}")
    csr = A.tocsr()
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    idtype = idtype or ("int64" if csr.indices.dtype == np.int64 or csr.indptr.dtype == np.int64 else "int32")
    if idtype not in INDEX_DTYPES:
        raise FormatError(f"index dtype must be int32 or int64, got {idtype!r}")
    return csr, np.dtype(idtype)


def row_ids(csr: scipy.sparse.csr_matrix) -> np.ndarray:
    """The row of every stored nonzero, in storage order."""
    return np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))


def to_bsr(A, block_size: int, idtype: str | None = None, dtype=None) -> dict[str, object]:
    """BSR arrays (`a` of shape (nnzb, b, b), `indptr`, `indices`, block counts `m`, `n`, `nnz`)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer) or block_size < 1:
        raise FormatError(f"block_size must be a positive integer, got {block_size!r}")
    csr, it = canonical(A, idtype)
    b = int(block_size)
    m, n = csr.shape
    mb, nb = -(-m // b), -(-n // b)
    indptr = np.concatenate([csr.indptr.astype(np.int64), np.full(mb * b - m, csr.nnz, np.int64)])
    padded = scipy.sparse.csr_matrix((csr.data, csr.indices, indptr), shape=(mb * b, nb * b))
    bsr = padded.tobsr(blocksize=(b, b))
    bsr.sort_indices()
    values = np.ascontiguousarray(bsr.data, dtype=dtype or csr.dtype)
    return {"a": values, "indptr": bsr.indptr.astype(it), "indices": bsr.indices.astype(it), "m": mb, "n": nb,
            "nnz": len(bsr.indices)}  # fmt: skip


def default_buckets(A) -> list[int]:
    """Powers of two from 1 up to the longest row (at least 1)."""
    csr, _ = canonical(A)
    longest = int(np.diff(csr.indptr).max(initial=1))
    return [1 << k for k in range(max(longest - 1, 0).bit_length() + 1)]


def check_buckets(buckets: Sequence[int]) -> list[int]:
    widths = sorted(int(w) for w in buckets)
    if not widths or any(w < 1 or w & (w - 1) for w in widths) or len(set(widths)) != len(widths):
        raise FormatError(f"buckets must be distinct powers of two, got {list(buckets)}")
    return widths


def to_ell_parts(
    A, buckets: Sequence[int], num_col_parts: int = 1, idtype: str | None = None, dtype=None
) -> list[dict[str, object]]:
    """One dict per (column part, bucket), in that order: `a` (rows x width values), `indptr`
    (rows per layer), `rows` (the original row of each part row), `cols` (rows x width columns),
    `layers`, `m`, `n` (n + width), `nrows`."""
    widths = check_buckets(buckets)
    if isinstance(num_col_parts, bool) or not isinstance(num_col_parts, int | np.integer) or num_col_parts < 1:
        raise FormatError(f"num_col_parts must be a positive integer, got {num_col_parts!r}")
    csr, it = canonical(A, idtype)
    m, n = csr.shape
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
    if isinstance(pad_size, bool) or not isinstance(pad_size, int | np.integer) or pad_size < 1:
        raise FormatError(f"pad_size must be a positive integer, got {pad_size!r}")
    csr, it = canonical(A, idtype)
    m, n = csr.shape
    lengths = np.diff(csr.indptr).astype(np.int64)
    padded_len = -(-lengths // pad_size) * pad_size
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
    since nothing says how several would share the nonzeros)."""
    from .infer import infer

    rules = list(rules)
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
            out.update(infer(A, rule))
            continue
        if id(rule.converter) in done:
            continue
        done.add(id(rule.converter))
        out.update(rule.converter(A))
    return out
