"""Inferring a new format's arrays from its rule: the step SparseTIR leaves to its users.

For a rule with no converter, every stored nonzero `(i, j)` of the matrix is mapped through
`idx_map` to its coordinates in the new format, and the levels of the rewritten buffer are built
from the top down (vectorised numpy):

- dense (fixed) level: every coordinate in `[0, length)` is stored; a root's length is the number
  of values its index expression takes over the original shape (`i // 2` over `m` rows:
  `ceil(m / 2)`; `i % 2`: 2), a nested one's is the rule's (a constant, or the same count);
- sparse variable level: the distinct coordinates under each parent position, sorted
  (`indptr`, `indices`, `nnz`);
- dense variable level: under each parent position, coordinates `0 .. largest + 1`;
- sparse fixed level: the same number of distinct coordinates under every parent position
  (else there is no way to pad without knowing the format: a `FormatError` asks for a `convert`).

Cells of the new structure that no nonzero maps to hold 0 (padding). Every axis size that is a
parameter of the format is solved from the arrays; one that is an expression must agree with
them. Inference works on one rule of a 2-D matrix: with several rules there is no telling which
nonzero goes to which part, so a `convert` is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

from ..errors import FormatError
from ..ir.axis import DENSE_FIXED, DENSE_VARIABLE, SPARSE_FIXED, SPARSE_VARIABLE
from ..ir.eval import eval_int
from ..ir.expr import Var
from .converters import slots_fit


def check_maps(A, rule) -> None:
    """`idx_map` on the stored coordinates of the canonical CSR matrix `A`: not negative, within
    the new axes' index dtype, and brought back by `inv_idx_map` (unless that is proven for every
    coordinate); a `FormatError` names the rule and the first coordinate that fails."""
    if len(rule.axes_before_rewrite) != 2:
        raise FormatError(f"rule `{rule.name}`: converting a matrix needs a rule over its two axes")
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))
    cols = A.indices.astype(np.int64)
    mapped = rule.idx_map.evaluate([rows, cols])
    for name, c in zip(rule.axes_after_rewrite, mapped):
        limit = np.iinfo(np.dtype(rule.new_axis(name).idtype)).max
        bad = (c < 0) | (c > limit)
        if bad.any():
            k = int(np.argmax(bad))
            point = tuple(int(x[k]) for x in mapped)
            raise FormatError(
                f"rule `{rule.name}`: idx_map takes A's nonzero at ({rows[k]}, {cols[k]}) to {point}, whose `{name}` "
                f"coordinate {int(c[k])} is outside the axis (0 up to {limit})"
            )
    if rule.inverse_proven:
        return
    back = rule.inv_idx_map.evaluate(mapped)
    wrong = (back[0] != rows) | (back[1] != cols)
    if wrong.any():
        k = int(np.argmax(wrong))
        raise rule.not_inverse((int(rows[k]), int(cols[k])))


def infer(A, rule, dtype=None) -> dict[str, object]:
    """The arguments of `rule`'s new parameters for the scipy matrix `A`, keyed by renamed name."""
    if len(rule.axes_before_rewrite) != 2 or len(rule.buffers_to_rewrite) != 1:
        raise FormatError(f"rule `{rule.name}`: inference handles one buffer over two axes; write a `convert`")
    csr = A.tocsr() if scipy.sparse.issparse(A) else None
    if csr is None:
        raise FormatError(f"expected a scipy sparse matrix, got {type(A).__name__}")
    csr = csr.copy()
    csr.sum_duplicates()
    m, n = csr.shape
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(csr.indptr))
    cols = csr.indices.astype(np.int64)
    mapped = _evaluate(rule, rows, cols)  # one array per new axis, in axes_after_rewrite order
    buf = rule.new_buffer(rule.buffers_to_rewrite[0])
    by_name = dict(zip(rule.axes_after_rewrite, mapped))
    ranges = _ranges(rule, m, n)
    levels = _Levels(rule, ranges, np.dtype(buf.axes[0].idtype))
    pos = np.zeros(len(rows), np.int64)  # each nonzero's position in the level built so far
    n_pos = 1  # positions of that level
    for level, axis in enumerate(buf.axes):
        coord = by_name.get(axis.name)
        if coord is None:
            raise FormatError(f"rule `{rule.name}`: axis `{axis.name}` of `{buf.name}` is not in axes_after_rewrite")
        build = _INFER_LEVEL.get(axis.kind)
        if build is None:  # pragma: no cover - the verifier knows every kind
            raise FormatError(f"rule `{rule.name}`: cannot infer an axis of kind {axis.kind}")
        pos, n_pos = build(levels, level, axis, coord, pos, n_pos)
    scalars, arrays = levels.scalars, levels.arrays
    values = np.zeros(n_pos, dtype or csr.dtype)
    values[pos] = csr.data
    arrays[buf.data] = values
    out: dict[str, object] = {}
    for p in rule.new_format_desc.params:
        if p in arrays:
            out[f"{p.name}_{rule.name}"] = arrays[p]
        elif p in scalars:
            out[f"{p.name}_{rule.name}"] = scalars[p]
        else:
            raise FormatError(
                f"rule `{rule.name}`: cannot infer parameter `{p.name}` from the matrix; write a `convert`"
            )
    return out


@dataclass
class _Levels:
    """What inference has found so far, level by level: the rule's size parameters (`scalars`)
    and structure arrays (`arrays`), keyed by parameter."""

    rule: Any
    ranges: dict[str, int]  # the number of values each new coordinate takes (`_ranges`)
    idtype: np.dtype
    scalars: dict[Var, int] = field(default_factory=dict)
    arrays: dict[Var, np.ndarray] = field(default_factory=dict)


# One function per axis kind: `(levels, level, axis, coord, pos, n_pos) -> (pos, n_pos)`, given each
# nonzero's coordinate on the axis and its position in the level above (of `n_pos` positions),
# records the axis's arrays and sizes and returns each nonzero's position in the new level.


def _dense_fixed(levels: _Levels, level: int, axis, coord, pos, n_pos):
    """Every coordinate in `[0, length)`: a root's length is the count over the original shape,
    a nested one's is the rule's (or that count)."""
    rule, ranges = levels.rule, levels.ranges
    length = ranges[axis.name] if level == 0 else _size(axis.length, levels.scalars, ranges[axis.name])
    _solve(rule, axis.length, length, levels.scalars)
    pos, n_pos = pos * length + coord, n_pos * length
    slots_fit(f"rule `{rule.name}`: the inferred level `{axis.name}`", n_pos, levels.idtype)
    return pos, n_pos


def _sparse_variable(levels: _Levels, level: int, axis, coord, pos, n_pos):
    """The distinct coordinates under each parent position, sorted."""
    width = int(coord.max(initial=0)) + 1
    keys = np.unique(pos * width + coord)
    return _variable(levels, axis, keys // width, keys % width, pos, coord, n_pos)


def _dense_variable(levels: _Levels, level: int, axis, coord, pos, n_pos):
    """Under each parent position, every coordinate up to the largest stored one."""
    largest = np.full(n_pos, -1, np.int64)
    np.maximum.at(largest, pos, coord)
    parent = np.repeat(np.arange(n_pos), largest + 1)
    indices = np.arange(len(parent)) - np.repeat(np.cumsum(largest + 1) - (largest + 1), largest + 1)
    return _variable(levels, axis, parent, indices, pos, coord, n_pos)


def _variable(levels: _Levels, axis, parent, indices, pos, coord, n_pos):
    """A variable level of the coordinates `indices` under positions `parent`: `indptr` (and
    `indices`), its length and nnz."""
    indptr = np.zeros(n_pos + 1, np.int64)
    np.cumsum(np.bincount(parent, minlength=n_pos), out=indptr[1:])
    new_pos = indptr[pos] + _within(parent, indices, indptr, pos, coord)
    _solve(levels.rule, axis.length, levels.ranges[axis.name], levels.scalars)
    _solve(levels.rule, axis.nnz, len(indices), levels.scalars)
    levels.arrays[axis.indptr] = indptr.astype(levels.idtype)
    if axis.indices is not None:
        levels.arrays[axis.indices] = indices.astype(levels.idtype)
    return new_pos, len(indices)


def _sparse_fixed(levels: _Levels, level: int, axis, coord, pos, n_pos):
    """The same number of distinct coordinates under every parent position (else where padding
    goes depends on the format, which only a `convert` knows)."""
    rule = levels.rule
    width = int(coord.max(initial=0)) + 1
    keys = np.unique(pos * width + coord)
    counts = np.bincount(keys // width, minlength=n_pos)
    if len(set(counts.tolist())) > 1:
        raise FormatError(
            f"rule `{rule.name}`: sparse_fixed axis `{axis.name}` needs the same number of coordinates under "
            f"every parent, but the matrix gives {counts.min()} to {counts.max()}; where padding goes depends "
            "on the format: write a `convert(A, **params)`"
        )
    cols_per = int(counts[0]) if len(counts) else 0
    _solve(rule, axis.nnz_cols, cols_per, levels.scalars)
    _solve(rule, axis.length, levels.ranges[axis.name], levels.scalars)
    levels.arrays[axis.indices] = (keys % width).astype(levels.idtype)
    return np.searchsorted(keys, pos * width + coord), len(keys)


_INFER_LEVEL = {
    DENSE_FIXED: _dense_fixed,
    SPARSE_VARIABLE: _sparse_variable,
    DENSE_VARIABLE: _dense_variable,
    SPARSE_FIXED: _sparse_fixed,
}


def _evaluate(rule, rows: np.ndarray, cols: np.ndarray) -> list[np.ndarray]:
    """idx_map on arrays of coordinates: its traced expressions, as the kernels compute them."""
    return [c.copy() for c in rule.idx_map.evaluate([rows, cols])]


def _ranges(rule, m: int, n: int) -> dict[str, int]:
    """The number of values each new coordinate takes over the original shape: its expression
    evaluated over every row (column) it depends on, the other coordinate 0 (index maps of
    formats are separable); 0 where it depends on an empty range."""
    extents = (m, n)
    out = {}
    for name, expr, k in zip(rule.axes_after_rewrite, rule.idx_map.results, range(len(rule.axes_after_rewrite))):
        used = sorted(expr.dims_used()) or [0]
        if any(extents[d] == 0 for d in used):
            out[name] = 0
            continue
        largest = 0
        for d in used:
            points = np.arange(extents[d], dtype=np.int64)
            others = np.zeros_like(points)
            args = (points, others) if d == 0 else (others, points)
            largest = max(largest, int(_evaluate(rule, *args)[k].max(initial=0)))
        out[name] = largest + 1
    return out


def _within(parent, indices, indptr, key_pos, key) -> np.ndarray:
    """The rank of each `(key_pos, key)` among the sorted coordinates under its parent."""
    width = int(max(indices.max(initial=0), key.max(initial=0))) + 1
    flat = parent * width + indices
    return np.searchsorted(flat, key_pos * width + key) - indptr[key_pos]


def _size(expr, scalars: dict, default: int) -> int:
    try:
        return eval_int(expr, scalars, "a size")
    except Exception:  # a parameter not solved yet: the count over the original shape
        return default


def _solve(rule, expr, value: int, scalars: dict) -> None:
    """Set a size parameter to `value`, or check a size expression against it."""
    if expr is None:
        return
    if isinstance(expr, Var):
        if scalars.setdefault(expr, value) != value:
            raise FormatError(f"rule `{rule.name}`: `{expr.name}` would be both {scalars[expr]} and {value}")
        return
    try:
        known = eval_int(expr, scalars, "a size")
    except Exception:
        return  # an expression of parameters solved later; the kernel's argument check has the last word
    if known < value:
        raise FormatError(f"rule `{rule.name}`: a size of the format is {known}, but the matrix needs {value}")
