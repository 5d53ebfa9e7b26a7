"""MLIR's sparse storage scheme: a tensor stored level by level under a `#sparse_tensor.encoding`.

    st = sp.to_storage(A, enc)          # A: scipy sparse or dense numpy, any rank the encoding has
    st.positions[l], st.coordinates[l]  # per level; None where the level stores no such array
    st.values                           # the stored values, in storage order
    st.to_scipy(), st.to_dense()        # back
    print(st)                           # MLIR-style dump
    kernel(**st, b=B, c=C, ...)         # the arguments of a script that declares A by `encoding=`

Each level is stored as its kind says (`levels.LEVEL_KINDS`: dense, compressed,
loose_compressed, singleton, n_out_of_m; TACO's level formats, as MLIR stores them).

Elements are ordered by their level coordinates (MLIR's conversion sorts; `nonordered` levels are
allowed any order and get this one too). Dense levels below a sparse one store explicit zeros
(BSR block cells); a zero in the input at a stored coordinate of a scipy matrix stays stored.

Index arithmetic is int64. Before numpy computes anything, each level's coordinate range is
bounded from the map and the shape with Python integers (`index_range`): a level whose
coordinates, or a step computing them, leave int64 is an `EncodingError` naming the value, never
a wrapped coordinate. So is storage beyond `MAX_STORED_ENTRIES` entries in one array (the dense
levels of a 2^40 x 2^40 tensor, CSR positions for 2^40 rows, an ELL level of 10^18 slices), refused
before anything is allocated; `to_dense` and `to_scipy` likewise refuse outputs of that size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import scipy.sparse

from ...arith.affine import AffineExpr, DimId, FloorDiv, Interval, Mod
from ...errors import EncodingError
from .encoding import SparseTensorEncoding, parse_encoding
from .levels import MAX_STORED_ENTRIES, LevelAt, LevelCounter, check_entries, index_range, width_dtype, width_max

__all__ = ["MAX_STORED_ENTRIES", "SparseTensorStorage", "argument_names", "to_storage"]


def argument_names(name: str, enc: SparseTensorEncoding) -> dict[str, str]:
    """The keyword names under which a script declared with `encoding=enc` on the handle `name`
    takes the storage: `name` (values), `<name>_pos<l>`, `<name>_crd<l>` and `<name>_nnz<l>`
    (the number of elements stored at a compressed level, a size of the kernel)."""
    out = {"values": name}
    for lvl, lt in enumerate(enc.level_types):
        if lt.has_positions:
            out[f"pos{lvl}"] = f"{name}_pos{lvl}"
            out[f"nnz{lvl}"] = f"{name}_nnz{lvl}"
        if lt.has_coordinates:
            out[f"crd{lvl}"] = f"{name}_crd{lvl}"
    return out


class SparseTensorStorage:
    """The arrays of one tensor under one encoding. Also a mapping from the argument names of
    `argument_names(name, encoding)` to the arrays, so `kernel(**st, ...)` passes them."""

    def __init__(
        self,
        encoding: SparseTensorEncoding,
        shape: tuple[int, ...],
        level_sizes: tuple[int, ...],
        positions: list[np.ndarray | None],
        coordinates: list[np.ndarray | None],
        values: np.ndarray,
        name: str = "a",
    ):
        self.encoding = encoding
        self.shape = tuple(int(s) for s in shape)
        self.level_sizes = tuple(int(s) for s in level_sizes)
        self.positions = positions
        self.coordinates = coordinates
        self.values = values
        self.name = name

    @property
    def nse(self) -> int:
        """Number of stored entries (values, padding included)."""
        return int(self.values.shape[0])

    # -- keyword arguments -----------------------------------------------------------------------
    def arguments(self, name: str | None = None) -> dict[str, np.ndarray | int]:
        """The kernel arguments of a buffer declared with this encoding on handle `name`."""
        names = argument_names(name or self.name, self.encoding)
        out: dict[str, np.ndarray | int] = {names["values"]: self.values}
        for lvl in range(self.encoding.lvl_rank):
            if f"pos{lvl}" in names:
                out[names[f"pos{lvl}"]] = self.positions[lvl]
                out[names[f"nnz{lvl}"]] = int(self.positions[lvl][-1]) if self.positions[lvl].size else 0
            if f"crd{lvl}" in names:
                out[names[f"crd{lvl}"]] = self.coordinates[lvl]
        return out

    def keys(self):
        return self.arguments().keys()

    def __getitem__(self, key: str):
        return self.arguments()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arguments())

    def __len__(self) -> int:
        return len(self.arguments())

    def __contains__(self, key: object) -> bool:
        return key in self.arguments()

    # -- back to tensors -------------------------------------------------------------------------
    def _dim_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """(coordinates (nse, rank), valid mask): every stored value's dimension coordinates."""
        enc = self.encoding
        if enc.lvl_to_dim is None:
            raise EncodingError(
                f"the map of {enc} has no inverse (levels -> dimensions): give it in the explicit form "
                "`{l0, ...}(i = ..., ...) -> (l0 = ... : ..., ...)`"
            )
        lvl_ranges = [Interval(0, s - 1) for s in self.level_sizes]
        for d, e in enumerate(enc.lvl_to_dim):
            index_range(e, lvl_ranges, f"dimension `{enc.dim_names[d]}` (`{e}` over the levels)")
        count = 1
        prefix: list[np.ndarray] = []
        valid = np.ones(1, dtype=bool)
        for lvl, lt in enumerate(enc.level_types):
            at = LevelAt(lvl, lt, self.level_sizes[lvl])
            parent, crd, count = lt.kind.read(at, self.positions[lvl], self.coordinates[lvl], count)
            # A parent of -1: a position that holds no child (a loose_compressed gap).
            valid = np.concatenate([valid, [False]])[parent]
            prefix = [p[np.maximum(parent, 0)] for p in prefix]
            prefix.append(crd)
        if count != self.values.shape[0]:
            raise EncodingError(f"the storage holds {self.values.shape[0]} values, but its levels give {count}")
        lvl_crds = np.stack(prefix, axis=1) if prefix else np.zeros((count, 0), dtype=np.int64)
        dims = np.stack([_eval_np(e, lvl_crds) for e in enc.lvl_to_dim], axis=1)
        inside = np.all((dims >= 0) & (dims < np.array(self.shape)), axis=1)
        return dims, valid & inside

    def to_dense(self) -> np.ndarray:
        """The tensor as a dense numpy array (repeated coordinates of nonunique levels add up)."""
        check_entries(math.prod(self.shape), f"to_dense of shape {self.shape}")
        dims, keep = self._dim_coordinates()
        out = np.zeros(self.shape, dtype=self.values.dtype)
        np.add.at(out, tuple(dims[keep].T), self.values[keep])
        return out

    def to_scipy(self) -> scipy.sparse.csr_matrix:
        """A 2-D tensor as a scipy CSR matrix with the stored entries (padding of dense and
        n_out_of_m trailing levels dropped; explicit zeros of compressed/singleton levels kept)."""
        if len(self.shape) != 2:
            raise EncodingError(f"to_scipy needs a 2-D tensor, but this one has shape {self.shape}; use to_dense()")
        check_entries(self.shape[0] + 1, f"to_scipy's CSR row pointer for {self.shape[0]} rows")
        dims, keep = self._dim_coordinates()
        values = self.values
        if self.encoding.level_types[-1].kind.pads:
            keep = keep & (values != 0)
        m = scipy.sparse.coo_matrix((values[keep], (dims[keep, 0], dims[keep, 1])), shape=self.shape)
        return m.tocsr()

    # -- printing --------------------------------------------------------------------------------
    def __str__(self) -> str:
        """MLIR's dump: `positions[l]`, `coordinates[l]` and `values`, as `sparse_tensor.print` does."""
        lines = [
            "---- Sparse Tensor ----",
            f"nse = {self.nse}",
            f"dim = ( {', '.join(map(str, self.shape))} )",
            f"lvl = ( {', '.join(map(str, self.level_sizes))} )",
        ]
        for lvl in range(self.encoding.lvl_rank):
            if self.positions[lvl] is not None:
                lines.append(f"positions[{lvl}] : {_fmt(self.positions[lvl])}")
            if self.coordinates[lvl] is not None:
                lines.append(f"coordinates[{lvl}] : {_fmt(self.coordinates[lvl])}")
        lines.append(f"values : {_fmt(self.values)}")
        lines.append("----")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<SparseTensorStorage shape={self.shape} nse={self.nse} encoding={self.encoding}>"


def _fmt(a: np.ndarray) -> str:
    """`( 0, 1, 2 )`; past numpy's print threshold, like numpy: `( 0, 1, 2, ..., 7, 8, 9 )`."""
    if not a.size:
        return "( )"
    options = np.get_printoptions()
    if a.size > options["threshold"]:
        edge = options["edgeitems"]
        items = [str(x) for x in a[:edge]] + ["..."] + [str(x) for x in a[-edge:]]
    else:
        items = [str(x) for x in a]
    return "( " + ", ".join(items) + " )"


def _eval_np(e: AffineExpr, cols: np.ndarray) -> np.ndarray:
    """An affine expression over the columns of `cols` (d_k = cols[:, k]), vectorised."""
    out = np.full(cols.shape[0], e.constant, dtype=np.int64)
    for atom, k in e.terms:
        if isinstance(atom, DimId):
            val = cols[:, atom.index]
        elif isinstance(atom, FloorDiv):
            val = np.floor_divide(_eval_np(atom.lhs, cols), atom.divisor)
        elif isinstance(atom, Mod):
            val = np.mod(_eval_np(atom.lhs, cols), atom.divisor)
        else:  # pragma: no cover - symbols are refused before
            raise EncodingError(f"symbol in `{e}`")
        out += k * val
    return out


def _entries(A) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """(coordinates (nnz, rank) int64, values, shape) of the stored elements of `A`."""
    if scipy.sparse.issparse(A):
        coo = scipy.sparse.coo_array(A)
        coo.sum_duplicates()
        coords = np.stack([np.asarray(c, dtype=np.int64) for c in coo.coords], axis=1)
        return coords.reshape(-1, len(coo.shape)), np.asarray(coo.data), tuple(coo.shape)
    if isinstance(A, np.ndarray | np.generic | list | tuple):
        try:
            arr = np.asarray(A)
        except (ValueError, TypeError) as e:  # ragged nested lists
            raise EncodingError(f"to_storage needs a rectangular numeric array: {e}") from None
        if arr.dtype == object or arr.dtype.kind not in "biufc":
            raise EncodingError(f"to_storage needs a numeric array, but got dtype {arr.dtype}")
        if arr.ndim == 0:
            raise EncodingError("to_storage needs a tensor of rank >= 1, but got a scalar")
        nz = np.nonzero(arr)
        coords = np.stack([np.asarray(c, dtype=np.int64) for c in nz], axis=1)
        return coords.reshape(-1, arr.ndim), arr[nz], tuple(arr.shape)
    raise EncodingError(f"to_storage needs a scipy sparse matrix or a numpy array, but got {type(A).__name__}")


def _apply_slices(enc, coords, vals, shape):
    if not enc.dim_slices:
        return coords, vals, shape
    keep = np.ones(coords.shape[0], dtype=bool)
    new_shape = list(shape)
    new_coords = coords.copy()
    for d, sl in enumerate(enc.dim_slices):
        if sl is None:
            continue
        offset = sl.offset or 0
        stride = sl.stride or 1
        size = sl.size if sl.size is not None else max(0, -(-(shape[d] - offset) // stride))
        if offset + (size - 1) * stride >= shape[d] and size > 0:
            raise EncodingError(f"slice {sl} of dimension `{enc.dim_names[d]}` exceeds its size {shape[d]}")
        rel = coords[:, d] - offset
        keep &= (rel >= 0) & (rel % stride == 0) & (rel // stride < size)
        new_coords[:, d] = rel // stride
        new_shape[d] = size
    return new_coords[keep], vals[keep], tuple(new_shape)


def _counter(c: LevelCounter, dim_coords: np.ndarray, order_keys: list[np.ndarray]) -> np.ndarray:
    """Rank of each element among those with the same coordinate of `c.dim`, in level order."""
    n = dim_coords.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    group = dim_coords[:, c.dim]
    order = np.lexsort([*reversed(order_keys), group])
    g = group[order]
    start = np.r_[True, g[1:] != g[:-1]]
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - first
    return rank


def to_storage(A, enc: SparseTensorEncoding | str, name: str = "a") -> SparseTensorStorage:
    """Store `A` (scipy sparse, or a dense numpy array whose nonzeros are stored) under `enc`.

    `name` is the handle the kernel's script declares the buffer on (the storage is also the
    mapping of that kernel's arguments). Raises `EncodingError` when the tensor does not fit:
    wrong rank, a level coordinate outside its level, two elements on one level coordinate, an
    n_out_of_m group with more than n elements, an ELL row with more elements than slices, or an
    index that does not fit `posWidth`/`crdWidth`.

    >>> import numpy as np, sparsetir_py as sp
    >>> csr = "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>"
    >>> st = sp.to_storage(np.array([[1.0, 0, 2], [0, 0, 3]]), csr)
    >>> print(st)  # doctest: +NORMALIZE_WHITESPACE
    ---- Sparse Tensor ----
    nse = 3
    dim = ( 2, 3 )
    lvl = ( 2, 3 )
    positions[1] : ( 0, 2, 3 )
    coordinates[1] : ( 0, 2, 2 )
    values : ( 1.0, 2.0, 3.0 )
    ----
    >>> st.to_dense().tolist()
    [[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]]
    """
    enc = parse_encoding(enc)
    coords, vals, shape = _entries(A)
    if len(shape) != enc.dim_rank:
        raise EncodingError(
            f"the encoding has {enc.dim_rank} dimensions ({', '.join(enc.dim_names)}), but the tensor has shape {shape}"
        )
    coords, vals, shape = _apply_slices(enc, coords, vals, shape)
    for e in enc.level_exprs:
        if isinstance(e, AffineExpr) and e.symbols_used():
            raise EncodingError(f"level expression `{e.to_string(enc.dim_names, enc.symbol_names)}` uses a symbol")
    # Bound every level's coordinates with Python integers first, so numpy never wraps.
    dim_ranges = [Interval(0, s - 1) for s in shape]
    for k, e in enumerate(enc.level_exprs):
        if isinstance(e, AffineExpr):
            text = e.to_string(enc.dim_names, enc.symbol_names)
            index_range(e, dim_ranges, f"level {k} (`{text}`) over the shape {shape}")
    sizes = enc.level_sizes(shape)
    try:
        return _store(enc, coords, vals, shape, sizes, name)
    except MemoryError:
        raise EncodingError(
            f"storing the tensor of shape {shape} under {enc} needs more memory than is available"
        ) from None


def _store(enc, coords, vals, shape, sizes, name) -> SparseTensorStorage:
    """to_storage once the level coordinates are known to fit int64."""
    nnz = coords.shape[0]
    lvl = [None if isinstance(e, LevelCounter) else _eval_np(e, coords) for e in enc.level_exprs]
    plain = [c for c in lvl if c is not None]
    for k, e in enumerate(enc.level_exprs):
        if isinstance(e, LevelCounter):
            lvl[k] = _counter(e, coords, plain)
    for k, c in enumerate(lvl):
        bad = (c < 0) | (c >= sizes[k])
        if bad.any():
            at = tuple(int(x) for x in coords[np.argmax(bad)])
            what = "slices" if isinstance(enc.level_exprs[k], LevelCounter) else "its size"
            raise EncodingError(
                f"the element at {at} has coordinate {int(c[np.argmax(bad)])} at level {k} "
                f"({enc.level_exprs[k].to_string(enc.dim_names, enc.symbol_names)}), outside {what} {sizes[k]}"
            )
    L = np.stack(lvl, axis=1) if nnz else np.zeros((0, enc.lvl_rank), dtype=np.int64)
    order = np.lexsort(L.T[::-1]) if nnz else np.zeros(0, dtype=np.int64)
    L, vals, coords = L[order], vals[order], coords[order]
    if nnz > 1:
        same = np.all(L[1:] == L[:-1], axis=1)
        if same.any():
            k = int(np.argmax(same))
            raise EncodingError(
                f"elements {tuple(coords[k].tolist())} and {tuple(coords[k + 1].tolist())} land on the same level "
                f"coordinates {tuple(L[k].tolist())}: the map is not one-to-one on this tensor"
            )
    positions: list[np.ndarray | None] = [None] * enc.lvl_rank
    coordinates: list[np.ndarray | None] = [None] * enc.lvl_rank
    parent = np.zeros(nnz, dtype=np.int64)
    count = 1
    for k, lt in enumerate(enc.level_types):
        at = LevelAt(k, lt, sizes[k], isinstance(enc.level_exprs[k], LevelCounter))
        parent, count, positions[k], coordinates[k] = lt.kind.store(at, L[:, k], parent, count)
    values = np.zeros(count, dtype=vals.dtype)
    values[parent] = vals
    positions = [_narrow(p, enc.pos_width, "posWidth", k) if p is not None else None for k, p in enumerate(positions)]
    coordinates = [
        _narrow(c, enc.crd_width, "crdWidth", k) if c is not None else None for k, c in enumerate(coordinates)
    ]
    return SparseTensorStorage(enc, shape, sizes, positions, coordinates, values, name)


def _narrow(a: np.ndarray, width: int, what: str, level: int) -> np.ndarray:
    limit = width_max(width)
    if a.size and int(a.max()) > limit:
        kind = "positions" if what == "posWidth" else "coordinates"
        raise EncodingError(
            f"{kind}[{level}] holds {int(a.max())}, which does not fit {what} = {width} (at most {limit})"
        )
    return a.astype(width_dtype(width))
