"""What depends on the kind of a level: one table entry per kind, and the one level-size function.

A level of a `#sparse_tensor.encoding` is one of TACO's level formats, as MLIR stores them:

- `dense`: nothing stored; every parent position has `size` children (position = parent * size + coordinate).
- `compressed`: `positions[l]` (parents + 1 entries, the children of parent p are
  `[positions[l][p], positions[l][p + 1])`) and `coordinates[l]` (one per child). `nonunique`
  keeps one child per stored element (COO), even where coordinates repeat.
- `loose_compressed`: as compressed, but `positions[l]` holds a `(lo, hi)` pair per parent.
- `singleton`: `coordinates[l]` only, one child per parent position (COO's trailing levels).
- `n_out_of_m(n, m)` / `block2_4`: every parent has exactly `n` children (`coordinates[l]`
  gives their coordinates within the group of `m`); groups with fewer than `n` stored elements
  are padded with zeros at the smallest unused coordinates, and a group with more is an error.

`LEVEL_KINDS[format]` says, for one kind, which arrays it has, where it may stand in an encoding
(`check`), how `to_storage` fills it (`store`), how a storage is read back (`read`) and which
axes it becomes in a script (`expand`, for `transform.expand_encoded_buffers`): adding a kind is
one entry here. `level_size` is the size of a level for a tensor's shape (Python integers) or for
a script's axis lengths (IR expressions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...arith.affine import AffineExpr, DimId, FloorDiv, Interval, Mod
from ...arith.affine import largest_constant as affine_largest_constant
from ...arith.parser import INT64_MAX
from ...errors import EncodingError
from ...ir.axis import DENSE_FIXED, DENSE_VARIABLE, SPARSE_FIXED, SPARSE_VARIABLE, Axis
from ...ir.expr import IntImm, Var

__all__ = [
    "INTEGER_SIZES",
    "LEVEL_KINDS",
    "LEVEL_PROPERTIES",
    "MAX_STORED_ENTRIES",
    "LevelAt",
    "LevelCounter",
    "LevelExpr",
    "LevelKind",
    "LevelType",
    "SizeArith",
    "Stored",
    "check_entries",
    "index_range",
    "largest_constant",
    "level_size",
    "width_dtype",
    "width_max",
]

LEVEL_PROPERTIES = ("nonunique", "nonordered", "soa", "high")

#: The most entries one array of a storage (values, positions, a dense level's slots), or a dense
#: copy made by `to_dense` / `to_scipy`, may have: 2^28 (2 GiB of float64). Larger ones are refused
#: with an EncodingError before numpy allocates them.
MAX_STORED_ENTRIES = 2**28


# ---------------------------------------------------------------------------------------------
# Level types and expressions


@dataclass(frozen=True, slots=True)
class LevelType:
    """One level's storage format and properties (`compressed(nonunique)`, `n_out_of_m(2, 4)`)."""

    format: str
    properties: frozenset[str] = frozenset()
    n: int = 0  # n_out_of_m only
    m: int = 0

    @property
    def kind(self) -> LevelKind:
        return LEVEL_KINDS[self.format]

    @property
    def is_unique(self) -> bool:
        return "nonunique" not in self.properties

    @property
    def is_ordered(self) -> bool:
        return "nonordered" not in self.properties

    @property
    def has_positions(self) -> bool:
        return self.kind.has_positions

    @property
    def has_coordinates(self) -> bool:
        return self.kind.has_coordinates

    def __str__(self) -> str:
        props = [p for p in LEVEL_PROPERTIES if p in self.properties]
        if self.format == "n_out_of_m":
            if (self.n, self.m) == (2, 4):
                return "block2_4" + (f"({', '.join(props)})" if props else "")
            return f"n_out_of_m({', '.join([str(self.n), str(self.m), *props])})"
        return self.format + (f"({', '.join(props)})" if props else "")


@dataclass(frozen=True, slots=True)
class LevelCounter:
    """ELL's counting level `c * slices * i`: the rank of a stored element among those with the
    same coordinate of dimension `dim` (each rank its own slice, `slices` of them)."""

    symbol: int
    dim: int
    slices: int

    def dims_used(self) -> frozenset[int]:
        return frozenset((self.dim,))

    def to_string(self, dim_names: Sequence[str], symbol_names: Sequence[str]) -> str:
        return f"{symbol_names[self.symbol]} * {self.slices} * {dim_names[self.dim]}"


LevelExpr = AffineExpr | LevelCounter


def width_dtype(width: int) -> str:
    """The dtype of an index array of `width` bits (0 = native int64; sub-byte widths in int8)."""
    if width == 0:
        return "int64"
    return f"int{max(8, width)}"


def width_max(width: int) -> int:
    """The largest value an index of `width` bits may hold (signed storage; 0 = native int64)."""
    if width == 0:
        return 2**63 - 1
    if width < 8:
        return 2**width - 1
    return 2 ** (width - 1) - 1


def check_entries(count: int, what: str) -> int:
    """`count`, unless an array of that many entries is beyond MAX_STORED_ENTRIES."""
    if count > MAX_STORED_ENTRIES:
        raise EncodingError(
            f"{what} would take {count} entries, more than a storage may hold "
            f"(MAX_STORED_ENTRIES = {MAX_STORED_ENTRIES})"
        )
    return count


# ---------------------------------------------------------------------------------------------
# Level sizes


@dataclass(frozen=True)
class SizeArith:
    """How `level_size` computes: with Python integers (a tensor's shape) or IR expressions (a
    script's axis lengths). `other` sizes a level expression of no simple form, or refuses it."""

    const: Callable[[int], Any]
    dim: Callable[[Any], Any]
    ceildiv: Callable[[Any, int], Any]
    other: Callable[[AffineExpr, Sequence[Any]], Any]


def _hull_size(e: AffineExpr, shape: Sequence[int]) -> int:
    """The largest value of `e` over the shape, plus one (symbols, negative values and sizes
    beyond int64 refused)."""
    if e.symbols_used():
        raise EncodingError(f"level expression `{e}` uses a symbol, whose value a tensor does not give")
    hull = index_range(e, [Interval(0, s - 1) for s in shape], f"level expression `{e}` over the shape {tuple(shape)}")
    if hull.is_empty:
        return 0
    if hull.lo < 0:
        raise EncodingError(f"level expression `{e}` can be negative over the shape {tuple(shape)}")
    if hull.hi + 1 > INT64_MAX:
        raise EncodingError(
            f"level expression `{e}` over the shape {tuple(shape)} has {hull.hi + 1} coordinates, "
            f"more than a 64-bit index counts (at most {INT64_MAX})"
        )
    return hull.hi + 1


#: Sizes of a tensor's levels from its shape.
INTEGER_SIZES = SizeArith(const=int, dim=int, ceildiv=lambda size, c: -(-size // c), other=_hull_size)


def level_size(e: LevelExpr, sizes: Sequence[Any], arith: SizeArith = INTEGER_SIZES) -> Any:
    """MLIR's level size over dimension sizes `sizes`: `i` -> size(i), `i floordiv c` ->
    ceil(size / c), `i mod c` -> c, a counting level -> its number of slices; otherwise
    `arith.other` (for a shape: the largest value over it, plus one; a level whose coordinates,
    or the steps computing them, leave int64 is an EncodingError)."""
    if isinstance(e, LevelCounter):
        return arith.const(e.slices)
    atom = e.atom
    if isinstance(atom, DimId):
        return arith.dim(sizes[atom.index])
    inner = atom.lhs.atom if isinstance(atom, FloorDiv | Mod) else None
    if isinstance(atom, FloorDiv) and isinstance(inner, DimId):
        return arith.ceildiv(arith.dim(sizes[inner.index]), atom.divisor)
    if isinstance(atom, Mod) and isinstance(inner, DimId):
        return arith.const(atom.divisor)
    return arith.other(e, sizes)


def index_range(e: AffineExpr, dims: Sequence[Interval], what: str) -> Interval:
    """The values `e` takes over the box `dims` (one interval per dimension, symbols refused),
    computed with Python integers. Every step of evaluating `e` in int64 the way numpy does (the
    constant, then each `coefficient * atom` added in turn, divisions of inner sums) must stay
    within int64: else an EncodingError saying that `what` reaches the first value beyond it.
    Empty when a dimension is empty (then nothing is evaluated)."""
    if any(d.is_empty for d in dims):
        return Interval.empty()
    return _checked_range(e, dims, what)


def _checked_range(e: AffineExpr, dims: Sequence[Interval], what: str) -> Interval:
    total = _within_int64(Interval.point(e.constant), what)
    for atom, k in e.terms:
        _within_int64(Interval.point(k), what)  # numpy takes the coefficient as an int64
        if isinstance(atom, FloorDiv | Mod):
            _within_int64(Interval.point(atom.divisor), what)
        if isinstance(atom, FloorDiv):
            part = _checked_range(atom.lhs, dims, what).floordiv(atom.divisor)
        elif isinstance(atom, Mod):
            part = _checked_range(atom.lhs, dims, what).mod(atom.divisor)
        elif isinstance(atom, DimId):
            part = dims[atom.index]
        else:
            raise EncodingError(f"{what} uses a symbol, whose value a tensor does not give")
        total = _within_int64(total + _within_int64(part.scale(k), what), what)
    return total


def _within_int64(r: Interval, what: str) -> Interval:
    for end in (r.lo, r.hi):
        if end is None or not -INT64_MAX - 1 <= end <= INT64_MAX:
            raise EncodingError(
                f"{what} reaches {end}, which does not fit a 64-bit index (from {-INT64_MAX - 1} to {INT64_MAX})"
            )
    return r


def largest_constant(e: LevelExpr) -> int:
    """The largest magnitude among the integers written in `e`: its constant, coefficients and
    divisors, nested ones included (a counting level: its number of slices)."""
    if isinstance(e, LevelCounter):
        return e.slices
    return affine_largest_constant(e)


# ---------------------------------------------------------------------------------------------
# The table


class LevelAt(NamedTuple):
    """One level as a kind's rules see it: its index, type, size (an integer when storing, an IR
    expression when expanding) and whether it is a counting level (ELL's slices)."""

    index: int
    type: LevelType
    size: Any
    counts: bool = False


class Stored(NamedTuple):
    """What `store` makes of one level: each element's position in it, its number of positions,
    and its arrays (None where the kind stores none)."""

    parent: np.ndarray
    count: int
    positions: np.ndarray | None = None
    coordinates: np.ndarray | None = None


#: `param(key, dtype)`: the script parameter of the storage array or size `key` (`pos1`, `crd1`,
#: `nnz1`), existing or new.
Param = Callable[[str, str], Var]


@dataclass(frozen=True)
class LevelKind:
    """The rules of one kind of level."""

    #: `store(at, coordinates, parent, count)`: the level of the elements (sorted by their level
    #: coordinates) whose positions in the level above are `parent`, out of `count`.
    store: Callable[[LevelAt, np.ndarray, np.ndarray, int], Stored]
    #: `read(at, positions, coordinates, count)`: (each child's parent position, or -1 where a
    #: position holds no child; each child's coordinate; the number of children).
    read: Callable[[LevelAt, Any, Any, int], tuple[np.ndarray, np.ndarray, int]]
    #: `expand(at, name, parent, param, idtype)`: the axes of a script's buffer for the level, each
    #: with the levels it holds, the last one the parent of the next level. None: scripts do not
    #: support the kind.
    expand: Callable[[LevelAt, str, Axis, Param, str], list[tuple[Axis, list[int]]]] | None
    #: `check(k, types, exprs)`: what is wrong with level k of an encoding, if anything (MLIR's
    #: SparseTensorEncodingAttr::verify).
    check: Callable[[int, Sequence[LevelType], Sequence[LevelExpr]], str | None] = lambda k, types, exprs: None
    #: Whether it stores `positions[l]` and `coordinates[l]`.
    has_positions: bool = False
    has_coordinates: bool = False
    #: Whether it stores slots that no element fills (read back as zeros; `to_scipy` drops them).
    pads: bool = False


def _check_singleton(k: int, types: Sequence[LevelType], exprs: Sequence[LevelExpr]) -> str | None:
    prev = types[k - 1] if k else None
    if prev is None or prev.format == "dense" or prev.format == "n_out_of_m" or prev.is_unique:
        return "a singleton level must follow a nonunique compressed, loose_compressed or singleton level"
    return None


def _check_n_out_of_m(k: int, types: Sequence[LevelType], exprs: Sequence[LevelExpr]) -> str | None:
    lt = types[k]
    if k != len(types) - 1:
        return "an n_out_of_m (block2_4) level must be the last level"
    if any(t.format != "dense" for t in types[:k]):
        return "the levels before an n_out_of_m (block2_4) level must be dense"
    if isinstance(exprs[k], AffineExpr):
        atom = exprs[k].atom
        if not (isinstance(atom, Mod) and atom.divisor == lt.m):
            return f"an n_out_of_m(n, {lt.m}) level's expression must be `<dimension> mod {lt.m}`"
    return None


# -- dense --------------------------------------------------------------------------------------


def _store_dense(at: LevelAt, crd: np.ndarray, parent: np.ndarray, count: int) -> Stored:
    what = f"{at.size} slices" if at.counts else f"size {at.size}"
    count = check_entries(count * at.size, f"the dense levels down to level {at.index} ({what})")
    return Stored(parent * at.size + crd, count)


def _read_dense(at: LevelAt, positions, coordinates, count: int):
    check_entries(count * at.size, f"reading back level {at.index} (dense, {at.size} per parent)")
    parent = np.repeat(np.arange(count), at.size)
    return parent, np.tile(np.arange(at.size, dtype=np.int64), count), count * at.size


def _expand_dense(at: LevelAt, name: str, parent: Axis, param: Param, idtype: str):
    return [(Axis(name, DENSE_FIXED, at.size, idtype=idtype), [at.index])]


# -- compressed and loose_compressed --------------------------------------------------------------


def _store_compressed(at: LevelAt, crd: np.ndarray, parent: np.ndarray, count: int) -> Stored:
    loose = at.type.format == "loose_compressed"
    check_entries(2 * count if loose else count + 1, f"positions[{at.index}] ({count} parents)")
    nnz = len(crd)
    if at.type.is_unique:
        new = np.r_[True, (parent[1:] != parent[:-1]) | (crd[1:] != crd[:-1])] if nnz else np.zeros(0, bool)
    else:
        new = np.ones(nnz, dtype=bool)
    owners = parent[new]
    counts = np.bincount(owners, minlength=count) if owners.size else np.zeros(count, dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(counts)])
    if loose:
        pos = np.stack([pos[:-1], pos[1:]], axis=1).ravel()
    return Stored(np.cumsum(new) - 1, int(new.sum()), pos, crd[new])


def _read_compressed(at: LevelAt, positions, coordinates, count: int):
    pos = positions.astype(np.int64)
    lo, hi = (pos[0::2], pos[1::2]) if at.type.format == "loose_compressed" else (pos[:-1], pos[1:])
    crd = coordinates.astype(np.int64)
    parent = np.full(crd.shape[0], -1, dtype=np.int64)
    lengths = hi - lo
    owners = np.repeat(np.arange(count), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    parent[np.repeat(lo, lengths) + offsets] = owners
    return parent, crd, crd.shape[0]


def _expand_compressed(at: LevelAt, name: str, parent: Axis, param: Param, idtype: str):
    k, lt = at.index, at.type
    pos, crd, nnz = param(f"pos{k}", "handle"), param(f"crd{k}", "handle"), param(f"nnz{k}", idtype)
    if lt.is_unique:
        axis = Axis(
            name,
            SPARSE_VARIABLE,
            at.size,
            parent=parent,
            nnz=nnz,
            indptr=pos,
            indices=crd,
            idtype=idtype,
            sorted=lt.is_ordered,
        )
        return [(axis, [k])]
    # COO's rows repeat: one dense_variable point per stored element (positions), each with one
    # coordinate (a sparse_fixed child of one), so no row holds a coordinate twice.
    elems = Axis(name + "_pos", DENSE_VARIABLE, nnz, parent=parent, nnz=nnz, indptr=pos, idtype=idtype)
    axis = Axis(name, SPARSE_FIXED, at.size, parent=elems, nnz_cols=IntImm(1, idtype), indices=crd, idtype=idtype)
    return [(elems, []), (axis, [k])]


# -- singleton ------------------------------------------------------------------------------------


def _store_singleton(at: LevelAt, crd: np.ndarray, parent: np.ndarray, count: int) -> Stored:
    return Stored(parent, count, None, crd.copy())


def _read_singleton(at: LevelAt, positions, coordinates, count: int):
    return np.arange(count), coordinates.astype(np.int64), count


def _expand_singleton(at: LevelAt, name: str, parent: Axis, param: Param, idtype: str):
    crd = param(f"crd{at.index}", "handle")
    axis = Axis(name, SPARSE_FIXED, at.size, parent=parent, nnz_cols=IntImm(1, idtype), indices=crd, idtype=idtype)
    return [(axis, [at.index])]


# -- n_out_of_m -----------------------------------------------------------------------------------


def _store_n_out_of_m(at: LevelAt, crd: np.ndarray, parent: np.ndarray, count: int) -> Stored:
    """Every group holds exactly n, padded at its smallest unused coordinates."""
    k, lt = at.index, at.type
    check_entries(count * lt.m, f"level {k}'s {count} groups of {lt.m}")
    check_entries(count * lt.n, f"level {k} ({count} groups of {lt.n})")
    occupied = np.zeros((count, lt.m), dtype=bool)
    occupied[parent, crd] = True
    per_group = occupied.sum(axis=1)
    if (per_group > lt.n).any():
        g = int(np.argmax(per_group > lt.n))
        raise EncodingError(
            f"the tensor is not {lt.n}:{lt.m} sparse: group {g} at level {k} holds {int(per_group[g])} "
            f"elements (at most {lt.n})"
        )
    chosen = np.sort(np.argsort(~occupied, axis=1, kind="stable")[:, : lt.n], axis=1)
    slot = (chosen[parent] < crd[:, None]).sum(axis=1)
    return Stored(parent * lt.n + slot, count * lt.n, None, chosen.ravel())


def _read_n_out_of_m(at: LevelAt, positions, coordinates, count: int):
    n = at.type.n
    check_entries(count * n, f"reading back level {at.index} ({at.type})")
    return np.repeat(np.arange(count), n), coordinates.astype(np.int64), count * n


def _expand_n_out_of_m(at: LevelAt, name: str, parent: Axis, param: Param, idtype: str):
    lt = at.type
    axis = Axis(
        name,
        SPARSE_FIXED,
        IntImm(lt.m, idtype),
        parent=parent,
        nnz_cols=IntImm(lt.n, idtype),
        indices=param(f"crd{at.index}", "handle"),
        idtype=idtype,
        sorted=lt.is_ordered,
    )
    return [(axis, [at.index])]


LEVEL_KINDS: dict[str, LevelKind] = {
    "dense": LevelKind(_store_dense, _read_dense, _expand_dense, pads=True),
    "compressed": LevelKind(
        _store_compressed, _read_compressed, _expand_compressed, has_positions=True, has_coordinates=True
    ),
    # Scripts have no axis whose positions are (lo, hi) pairs; `to_storage` stores it.
    "loose_compressed": LevelKind(_store_compressed, _read_compressed, None, has_positions=True, has_coordinates=True),
    "singleton": LevelKind(
        _store_singleton, _read_singleton, _expand_singleton, check=_check_singleton, has_coordinates=True
    ),
    "n_out_of_m": LevelKind(
        _store_n_out_of_m,
        _read_n_out_of_m,
        _expand_n_out_of_m,
        check=_check_n_out_of_m,
        has_coordinates=True,
        pads=True,
    ),
}
