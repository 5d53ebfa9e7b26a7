"""Affine expressions over dimension variables `d_i` and symbols `s_i`, in a canonical form.

An expression is a sum `c0 + k1*t1 + ... + kn*tn` of integer multiples of *atoms* (a dimension,
a symbol, `e floordiv c` or `e mod c` with `c > 0`) plus a constant. Building an expression
always goes through the constructors below (`dim`, `symbol`, `const`, `+`, `-`, `*` by an
integer, `floordiv`, `mod`), which keep it canonical:

- like terms are combined, zero terms dropped, multiplication by a constant is distributed;
- terms are sorted in a fixed order (terms that use dimensions first, then the order of XLA's
  simplifier: products, `mod`, `floordiv`, dimensions, symbols; the constant last), so two
  expressions that are equal as polynomials in their atoms compare equal and print the same;
- `floordiv`/`mod` by a negative constant are rewritten with a positive divisor, by 1 folded;
- multiples of the divisor are pulled out: `(16*d0 + e) floordiv 8 = 2*d0 + e floordiv 8`,
  `(16*d0 + e) mod 8 = e mod 8`, and constants beyond the divisor likewise;
- a common factor of the dividend and the divisor is cancelled:
  `(6*s0 + 9) floordiv 18 = (2*s0 + 3) floordiv 6`, `(4*d0) mod 6 = (2*d0 mod 3) * 2`;
- `(e floordiv a) floordiv b = e floordiv (a*b)` and, more generally, a dividend with exactly
  one `x floordiv a` summand is merged: `(x floordiv a + r) floordiv b = (x + a*r) floordiv (a*b)`;
- `(e mod a*b) floordiv a = (e floordiv a) mod b` and `(e mod a*b) mod b = e mod b`;
- `b*c*(e floordiv c) + b*(e mod c) = b*e`.

These rewrites hold for every value of the variables. The ones that need the variables' ranges
(folding `d1 floordiv 16` to 0 when `d1 < 16`, ...) live in `sparsetir_py.arith.simplify`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .errors import IndexingMapError

__all__ = [
    "AffineExpr",
    "Atom",
    "DimId",
    "FloorDiv",
    "Interval",
    "Mod",
    "SymbolId",
    "affine_sum",
    "compile_exprs",
    "const",
    "dim",
    "largest_constant",
    "symbol",
]


# ---------------------------------------------------------------------------------------------
# Intervals


@dataclass(frozen=True, slots=True)
class Interval:
    """A closed integer interval `[lo, hi]`; `None` is an unbounded end. Empty when `lo > hi`."""

    lo: int | None
    hi: int | None

    @staticmethod
    def point(value: int) -> Interval:
        return Interval(value, value)

    @staticmethod
    def unbounded() -> Interval:
        return Interval(None, None)

    @staticmethod
    def empty() -> Interval:
        return Interval(0, -1)

    def __iter__(self) -> Iterator[int | None]:
        yield self.lo
        yield self.hi

    def __str__(self) -> str:
        lo = "-inf" if self.lo is None else str(self.lo)
        hi = "inf" if self.hi is None else str(self.hi)
        return f"[{lo}, {hi}]"

    @property
    def is_empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo > self.hi

    @property
    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi

    @property
    def is_bounded(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def size(self) -> int | None:
        """Number of integers in the interval; None when unbounded."""
        if not self.is_bounded:
            return None
        return max(0, self.hi - self.lo + 1)

    def contains(self, value: int) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def contains_interval(self, other: Interval) -> bool:
        """True when every integer of `other` lies in this interval."""
        if other.is_empty:
            return True
        if self.lo is not None and (other.lo is None or other.lo < self.lo):
            return False
        return not (self.hi is not None and (other.hi is None or other.hi > self.hi))

    def intersect(self, other: Interval) -> Interval:
        lo = other.lo if self.lo is None else self.lo if other.lo is None else max(self.lo, other.lo)
        hi = other.hi if self.hi is None else self.hi if other.hi is None else min(self.hi, other.hi)
        return Interval(lo, hi)

    def hull(self, other: Interval) -> Interval:
        """The smallest interval holding both."""
        if self.is_empty:
            return other
        if other.is_empty:
            return self
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(lo, hi)

    def __add__(self, other: Interval | int) -> Interval:
        if isinstance(other, int):
            other = Interval(other, other)
        if self.is_empty or other.is_empty:
            return Interval.empty()
        lo = None if self.lo is None or other.lo is None else self.lo + other.lo
        hi = None if self.hi is None or other.hi is None else self.hi + other.hi
        return Interval(lo, hi)

    def __neg__(self) -> Interval:
        if self.is_empty:
            return self
        return Interval(None if self.hi is None else -self.hi, None if self.lo is None else -self.lo)

    def __sub__(self, other: Interval | int) -> Interval:
        if isinstance(other, int):
            other = Interval(other, other)
        return self + (-other)

    def scale(self, k: int) -> Interval:
        """`{k * x}` for x in the interval."""
        if self.is_empty:
            return self
        if k == 0:
            return Interval(0, 0)
        lo = None if self.lo is None else self.lo * k
        hi = None if self.hi is None else self.hi * k
        return Interval(lo, hi) if k > 0 else Interval(hi, lo)

    def floordiv(self, c: int) -> Interval:
        """`{x floordiv c}` for x in the interval, `c > 0`."""
        if self.is_empty:
            return self
        return Interval(None if self.lo is None else self.lo // c, None if self.hi is None else self.hi // c)

    def mod(self, c: int) -> Interval:
        """A tight enclosure of `{x mod c}` for x in the interval, `c > 0`."""
        if self.is_empty:
            return self
        if self.is_bounded and self.hi - self.lo < c and self.lo % c <= self.hi % c:
            return Interval(self.lo % c, self.hi % c)
        return Interval(0, c - 1)

    def mul(self, other: Interval) -> Interval:
        """`{x * y}`; used by the interval analysis of IR expressions."""
        if self.is_empty or other.is_empty:
            return Interval.empty()
        if other.is_point:
            return self.scale(other.lo)
        if self.is_point:
            return other.scale(self.lo)
        if not (self.is_bounded and other.is_bounded):
            return Interval.unbounded()
        products = [a * b for a in (self.lo, self.hi) for b in (other.lo, other.hi)]
        return Interval(min(products), max(products))


def as_interval(value: Interval | tuple[int | None, int | None] | Sequence[int]) -> Interval:
    """An `Interval` from an interval or a `(lo, hi)` pair."""
    if isinstance(value, Interval):
        return value
    lo, hi = value
    return Interval(lo, hi)


# ---------------------------------------------------------------------------------------------
# Atoms


@dataclass(frozen=True, slots=True)
class DimId:
    """The dimension variable `d<index>`."""

    index: int


@dataclass(frozen=True, slots=True)
class SymbolId:
    """The symbol `s<index>` (range variables first, then runtime variables)."""

    index: int


@dataclass(frozen=True, slots=True)
class FloorDiv:
    """`lhs floordiv divisor` with `divisor > 1`; only built by `AffineExpr.floordiv`."""

    lhs: AffineExpr
    divisor: int


@dataclass(frozen=True, slots=True)
class Mod:
    """`lhs mod divisor` with `divisor > 1`, in `[0, divisor - 1]`; only built by `AffineExpr.mod`."""

    lhs: AffineExpr
    divisor: int


Atom = DimId | SymbolId | FloorDiv | Mod

# Kind ranks of XLA's `CompareExprs` (products, mod, floordiv, dims, symbols; constants last).
_ADD, _MUL, _MOD, _FLOORDIV, _DIM, _SYM, _CONST = 0, 1, 2, 3, 5, 6, 7


@lru_cache(maxsize=1 << 16)
def _atom_key(atom: Atom) -> tuple:
    if isinstance(atom, DimId):
        return (_DIM, atom.index)
    if isinstance(atom, SymbolId):
        return (_SYM, atom.index)
    kind = _MOD if isinstance(atom, Mod) else _FLOORDIV
    return (kind, atom.lhs.sort_key, atom.divisor)


@lru_cache(maxsize=1 << 16)
def _atom_has_dims(atom: Atom) -> bool:
    if isinstance(atom, DimId):
        return True
    if isinstance(atom, SymbolId):
        return False
    return atom.lhs.has_dims


def _term_key(atom: Atom, coeff: int) -> tuple:
    key = _atom_key(atom) if coeff == 1 else (_MUL, _atom_key(atom), coeff)
    # MLIR keeps summands that use dimensions left of purely symbolic ones; XLA's order within.
    return (0 if _atom_has_dims(atom) else 1, key)


# ---------------------------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True, slots=True, eq=False)
class AffineExpr:
    """`constant + sum(coeff * atom)`, canonical; build with `dim`, `symbol`, `const` and operators.

    Supported operators: `+`, `-` (binary and unary), `*` by an integer, `//` or `.floordiv(c)`
    and `%` or `.mod(c)` by a nonzero integer. Equal canonical forms compare equal and hash alike.

    >>> from sparsetir_py.arith import dim
    >>> d0, d1 = dim(0), dim(1)
    >>> str((16 * d0 + 4 * d1 + 3) // 8)
    'd0 * 2 + (d1 * 4 + 3) floordiv 8'
    """

    terms: tuple[tuple[Atom, int], ...]
    constant: int = 0
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.terms, self.constant)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, AffineExpr):
            return NotImplemented
        return self._hash == other._hash and self.constant == other.constant and self.terms == other.terms

    def __repr__(self) -> str:
        return f"AffineExpr({self})"

    def __str__(self) -> str:
        return self.to_string()

    # -- queries ---------------------------------------------------------------------------------

    @property
    def is_constant(self) -> bool:
        return not self.terms

    @property
    def atom(self) -> Atom | None:
        """The atom when the expression is exactly one atom (coefficient 1, no constant)."""
        if len(self.terms) == 1 and self.constant == 0 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None

    @property
    def sort_key(self) -> tuple:
        return _expr_key(self)

    @property
    def has_dims(self) -> bool:
        return any(_atom_has_dims(a) for a, _ in self.terms)

    def dims_used(self) -> frozenset[int]:
        """Indices of the dimension variables the expression depends on."""
        return frozenset(i for i in _vars_used(self) if i >= 0)

    def symbols_used(self) -> frozenset[int]:
        """Indices of the symbols the expression depends on."""
        return frozenset(-1 - i for i in _vars_used(self) if i < 0)

    def content(self) -> int:
        """The gcd of the coefficients (0 for a constant)."""
        return math.gcd(*(k for _, k in self.terms)) if self.terms else 0

    # -- arithmetic ------------------------------------------------------------------------------

    def __add__(self, other: AffineExpr | int) -> AffineExpr:
        other = _as_affine(other)
        acc = dict(self.terms)
        for atom, k in other.terms:
            acc[atom] = acc.get(atom, 0) + k
        return _build(acc, self.constant + other.constant)

    __radd__ = __add__

    def __neg__(self) -> AffineExpr:
        return self.scale(-1)

    def __sub__(self, other: AffineExpr | int) -> AffineExpr:
        return self + (-_as_affine(other))

    def __rsub__(self, other: AffineExpr | int) -> AffineExpr:
        return _as_affine(other) + (-self)

    def __mul__(self, other: AffineExpr | int) -> AffineExpr:
        if isinstance(other, AffineExpr):
            if other.is_constant:
                return self.scale(other.constant)
            if self.is_constant:
                return other.scale(self.constant)
            raise IndexingMapError(f"non-affine product `({self}) * ({other})`: one side must be a constant")
        if isinstance(other, bool) or not isinstance(other, int):
            return NotImplemented
        return self.scale(other)

    __rmul__ = __mul__

    def scale(self, k: int) -> AffineExpr:
        """`k * self`."""
        if k == 1:
            return self
        if k == 0:
            return ZERO
        return _build({a: c * k for a, c in self.terms}, self.constant * k)

    def floordiv(self, divisor: AffineExpr | int) -> AffineExpr:
        """`self floordiv divisor` (floor division) by a nonzero constant."""
        return _floordiv(self, _divisor(divisor, "floordiv", self))

    def mod(self, divisor: AffineExpr | int) -> AffineExpr:
        """`self mod divisor`: `self - divisor * (self floordiv divisor)`, by a nonzero constant."""
        return _mod(self, _divisor(divisor, "mod", self))

    def ceildiv(self, divisor: AffineExpr | int) -> AffineExpr:
        """`self ceildiv divisor`, rewritten as `(self + divisor - 1) floordiv divisor`."""
        c = _divisor(divisor, "ceildiv", self)
        return -_floordiv(-self, c)

    def __floordiv__(self, divisor: AffineExpr | int) -> AffineExpr:
        return self.floordiv(divisor)

    def __mod__(self, divisor: AffineExpr | int) -> AffineExpr:
        return self.mod(divisor)

    # -- evaluation and substitution -------------------------------------------------------------

    def evaluate(self, dims: Sequence[int] = (), symbols: Sequence[int] = ()) -> int:
        """The value at `d_i = dims[i]`, `s_j = symbols[j]`."""
        total = self.constant
        for atom, k in self.terms:
            total += k * _eval_atom(atom, dims, symbols)
        return total

    def substitute(
        self,
        dims: Sequence[AffineExpr] | Mapping[int, AffineExpr] | None = None,
        symbols: Sequence[AffineExpr] | Mapping[int, AffineExpr] | None = None,
    ) -> AffineExpr:
        """Replace `d_i` by `dims[i]` and `s_j` by `symbols[j]` (missing entries stay), re-canonicalized."""
        dim_map = _as_mapping(dims)
        sym_map = _as_mapping(symbols)
        memo: dict[AffineExpr, AffineExpr] = {}
        return _substitute(self, dim_map, sym_map, memo)

    def to_string(self, dim_names: Sequence[str] | None = None, symbol_names: Sequence[str] | None = None) -> str:
        """The expression in XLA/MLIR notation (`d0 * 2 + (d1 * 4 + d2) floordiv 8`)."""
        return _print_expr(self, _Names(dim_names, symbol_names), parens=False)

    def to_python(self, dim_names: Sequence[str] | None = None, symbol_names: Sequence[str] | None = None) -> str:
        """The expression as Python source using `//` and `%` (floor semantics)."""
        return _py_expr(self, _Names(dim_names, symbol_names))


ZERO = AffineExpr((), 0)


def dim(index: int) -> AffineExpr:
    """The dimension variable `d<index>`."""
    if index < 0:
        raise IndexingMapError(f"dimension index must be >= 0, got {index}")
    return AffineExpr(((DimId(index), 1),), 0)


def symbol(index: int) -> AffineExpr:
    """The symbol `s<index>` (a range variable or a runtime variable of an indexing map)."""
    if index < 0:
        raise IndexingMapError(f"symbol index must be >= 0, got {index}")
    return AffineExpr(((SymbolId(index), 1),), 0)


def const(value: int) -> AffineExpr:
    """The constant `value`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise IndexingMapError(f"affine constants are integers, got {value!r}")
    return AffineExpr((), value) if value else ZERO


def atom_expr(atom: Atom) -> AffineExpr:
    """The expression made of one atom."""
    return AffineExpr(((atom, 1),), 0)


def affine_sum(exprs: Sequence[AffineExpr]) -> AffineExpr:
    """The sum of `exprs`, made canonical once: adding them one by one rebuilds the growing sum at
    every step, which is quadratic in the number of terms.

    >>> str(affine_sum([dim(0) % 4, dim(0) // 4 * 4, symbol(0), const(3)]))
    'd0 + s0 + 3'
    """
    if len(exprs) == 1:
        return exprs[0]
    acc: dict[Atom, int] = {}
    constant = 0
    for e in exprs:
        for atom, k in e.terms:
            acc[atom] = acc.get(atom, 0) + k
        constant += e.constant
    return _build(acc, constant)


def largest_constant(e: AffineExpr) -> int:
    """The largest magnitude among the integers of `e`'s canonical form: its constant, coefficients
    and divisors, nested ones included."""
    largest = abs(e.constant)
    for atom, k in e.terms:
        largest = max(largest, abs(k))
        if isinstance(atom, FloorDiv | Mod):
            largest = max(largest, atom.divisor, largest_constant(atom.lhs))
    return largest


def _as_affine(value: Any) -> AffineExpr:
    if isinstance(value, AffineExpr):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return const(value)
    raise IndexingMapError(f"cannot use {value!r} in an affine expression")


def _divisor(divisor: AffineExpr | int, op: str, lhs: AffineExpr) -> int:
    if isinstance(divisor, AffineExpr):
        if not divisor.is_constant:
            raise IndexingMapError(f"`({lhs}) {op} ({divisor})`: the divisor must be a constant")
        divisor = divisor.constant
    if isinstance(divisor, bool) or not isinstance(divisor, int):
        raise IndexingMapError(f"`{op}` needs an integer divisor, got {divisor!r}")
    if divisor == 0:
        raise IndexingMapError(f"`({lhs}) {op} 0`: division by zero")
    return divisor


def _as_mapping(values: Sequence[AffineExpr] | Mapping[int, AffineExpr] | None) -> Mapping[int, AffineExpr]:
    if values is None:
        return {}
    if isinstance(values, Mapping):
        return values
    return dict(enumerate(values))


def _trunc_div(a: int, c: int) -> int:
    """`a / c` rounded toward zero (c > 0)."""
    return a // c if a >= 0 else -((-a) // c)


# ---------------------------------------------------------------------------------------------
# Canonical construction


def _build(acc: Mapping[Atom, int], constant: int) -> AffineExpr:
    """The canonical sum of `coeff * atom` for the items of `acc`, plus `constant`."""
    items = {a: k for a, k in acc.items() if k}
    items, constant = _merge_shifted(items, constant)
    items, constant = _pair_div_mod(items, constant)
    terms = tuple(sorted(items.items(), key=lambda t: _term_key(*t)))
    return AffineExpr(terms, constant)


def _shift_key(atom: Atom) -> tuple | None:
    """Atoms with equal keys differ only by a multiple of the divisor in their dividend's constant."""
    if isinstance(atom, FloorDiv | Mod):
        return (type(atom), atom.lhs.terms, atom.divisor, atom.lhs.constant % atom.divisor)
    return None


def _merge_shifted(items: dict[Atom, int], constant: int) -> tuple[dict[Atom, int], int]:
    """`(x + a) floordiv c` and `(x + a + q*c) floordiv c` are like terms (the second is the first
    plus q), and so are `(x + a) mod c` and `(x + a + q*c) mod c` (equal): combine them, keeping
    the spelling with the smallest constant."""
    groups: dict[tuple, list[Atom]] = {}
    for atom in items:
        key = _shift_key(atom)
        if key is not None:
            groups.setdefault(key, []).append(atom)
    for atoms in groups.values():
        if len(atoms) < 2:
            continue
        keep = min(atoms, key=lambda a: (abs(a.lhs.constant), -a.lhs.constant))
        for atom in atoms:
            if atom is keep:
                continue
            k = items.pop(atom)
            items[keep] = items.get(keep, 0) + k
            if isinstance(atom, FloorDiv):
                constant += k * ((atom.lhs.constant - keep.lhs.constant) // atom.divisor)
    return {a: k for a, k in items.items() if k}, constant


def _pair_div_mod(items: dict[Atom, int], constant: int) -> tuple[dict[Atom, int], int]:
    """Replace `b*c*(x floordiv c) + b*(x mod c)` by `b*x` while such pairs exist (also when the
    floordiv's dividend is `x` plus a multiple of `c`).

    The pairs are taken as a rescan after each one would take them: the first `mod` term in the
    order of `items` that has a partner, with its first partner. The `floordiv` terms are grouped
    by `_shift_key` once, so a long sum costs linear time. A pair whose `x` holds `floordiv` or
    `mod` terms can give a partner to a `mod` term scanned already: the scan goes back to it.
    """
    floordivs: dict[tuple, list[FloorDiv]] = {}  # shift key -> the floordiv terms, in items' order
    mods: list[Mod] = []  # the mod terms in items' order (one added again is appended again)
    position: dict[Mod, int] = {}  # a mod term's current place in `mods`
    partner_key: dict[Mod, tuple | None] = {}  # the shift key of `x floordiv c`, for `x mod c`
    waiting: dict[tuple, list[Mod]] = {}  # shift key -> the mod terms whose partner has that key

    def enter(atom: Atom) -> None:
        """Index a term that `items` gained (at its end)."""
        if isinstance(atom, FloorDiv):
            group = floordivs.setdefault(_shift_key(atom), [])
            if atom in group:  # removed earlier, back now at the end of `items`
                group.remove(atom)
            group.append(atom)
        elif isinstance(atom, Mod):
            position[atom] = len(mods)
            mods.append(atom)
            if atom not in partner_key:
                fd = _floordiv(atom.lhs, atom.divisor).atom
                partner_key[atom] = _shift_key(fd) if isinstance(fd, FloorDiv) else None
                if partner_key[atom] is not None:
                    waiting.setdefault(partner_key[atom], []).append(atom)

    if not any(isinstance(atom, FloorDiv) for atom in items):
        return items, constant  # each pair takes a floordiv term, and only a pair brings new ones
    for atom in items:
        enter(atom)
    i = 0
    while i < len(mods):
        mod = mods[i]
        i += 1
        b = items.get(mod)
        key = partner_key[mod]
        if b is None or key is None or position[mod] != i - 1:
            continue
        partner = next((a for a in floordivs.get(key, ()) if items.get(a) == b * mod.divisor), None)
        if partner is None:
            continue
        fd = _floordiv(mod.lhs, mod.divisor).atom
        constant += b * mod.lhs.constant + b * mod.divisor * ((partner.lhs.constant - fd.lhs.constant) // fd.divisor)
        del items[mod]
        del items[partner]
        changed = []
        for atom, k in mod.lhs.terms:
            new = atom not in items
            total = items.get(atom, 0) + b * k
            if total:
                items[atom] = total
            else:
                del items[atom]
            if isinstance(atom, FloorDiv | Mod):
                changed.append(atom)
                if new:
                    enter(atom)
        # A mod term scanned already may have a partner now: one whose coefficient changed, or
        # one waiting for a floordiv term that changed. Scan again from the first of them.
        again = [m for m in changed if isinstance(m, Mod)]
        again += [
            m for fd_atom in changed if isinstance(fd_atom, FloorDiv) for m in waiting.get(_shift_key(fd_atom), ())
        ]
        i = min([i, *(position[m] for m in again if m in items)])
    return items, constant


@lru_cache(maxsize=1 << 16)
def _floordiv(e: AffineExpr, c: int) -> AffineExpr:
    if c < 0:
        return _floordiv(e.scale(-1), -c)
    if c == 1:
        return e
    if e.is_constant:
        return const(e.constant // c)
    outside: dict[Atom, int] = {}
    inner: dict[Atom, int] = {}
    for atom, k in e.terms:
        if k % c == 0:
            outside[atom] = k // c
        else:
            inner[atom] = k
    # A constant that is a multiple of the divisor comes out; any other stays in the dividend
    # (`(d0 + 3) floordiv 2`, as XLA writes it), and `_build` treats dividends that differ by a
    # multiple of the divisor as like terms.
    r = e.constant
    if not inner:
        return _build(outside, r // c)
    q = r // c if r % c == 0 else 0
    r -= q * c
    g = math.gcd(c, r, *inner.values())
    if g > 1:
        inner = {a: k // g for a, k in inner.items()}
        r //= g
        c //= g
    dividend = _build(inner, r)
    rest = _build(outside, q)
    if any(k % c == 0 for _, k in dividend.terms):  # pairing changed the terms: start over
        return _floordiv(dividend, c) + rest
    merged = _merge_inner_floordiv(dividend, c)
    if merged is not None:
        return merged + rest
    atom = dividend.atom
    if isinstance(atom, Mod) and atom.divisor % c == 0:
        return _mod(_floordiv(atom.lhs, c), atom.divisor // c) + rest
    # The quotient may already stand among the pulled-out terms (`(x + 9 (x fd 3)) fd 3` keeps
    # `3 (x fd 3)` outside): coefficients add, a dict merge would drop the outside one.
    quotient = FloorDiv(dividend, c)
    return _build({**outside, quotient: outside.get(quotient, 0) + 1}, q)


def _merge_inner_floordiv(dividend: AffineExpr, c: int) -> AffineExpr | None:
    """`(x floordiv a + r) floordiv c = (x + a*r) floordiv (a*c)` when exactly one summand is a
    floordiv with coefficient 1 (with two, rounding each one first can differ from the merged
    form, so they are left alone)."""
    inner = [a for a, k in dividend.terms if isinstance(a, FloorDiv) and k == 1]
    if len(inner) != 1:
        return None
    fd = inner[0]
    rest = dividend - atom_expr(fd)
    return _floordiv(fd.lhs + rest.scale(fd.divisor), fd.divisor * c)


@lru_cache(maxsize=1 << 16)
def _mod(e: AffineExpr, c: int) -> AffineExpr:
    if c < 0:
        return _mod(e.scale(-1), -c).scale(-1)
    if c == 1:
        return ZERO
    if e.is_constant:
        return const(e.constant % c)
    inner = {a: k for a, k in e.terms if k % c != 0}
    r = e.constant - _trunc_div(e.constant, c) * c
    if not inner:
        return const(r % c)
    g = math.gcd(c, r, *inner.values())
    if g > 1:
        return _mod(_build({a: k // g for a, k in inner.items()}, r // g), c // g).scale(g)
    dividend = _build(inner, r)
    if any(k % c == 0 for _, k in dividend.terms):
        return _mod(dividend, c)
    atom = dividend.atom
    if isinstance(atom, Mod) and atom.divisor % c == 0:
        return _mod(atom.lhs, c)
    return atom_expr(Mod(dividend, c))


# ---------------------------------------------------------------------------------------------
# Keys, variables, evaluation, substitution


@lru_cache(maxsize=1 << 16)
def _expr_key(e: AffineExpr) -> tuple:
    if not e.terms:
        return (_CONST, e.constant)
    if len(e.terms) == 1 and e.constant == 0:
        return _term_key(*e.terms[0])[1]
    return (_ADD, tuple(_term_key(a, k) for a, k in e.terms), e.constant)


@lru_cache(maxsize=1 << 16)
def _vars_used(e: AffineExpr) -> frozenset[int]:
    """Dimensions as their index, symbols as `-1 - index`."""
    used: set[int] = set()
    for atom, _ in e.terms:
        if isinstance(atom, DimId):
            used.add(atom.index)
        elif isinstance(atom, SymbolId):
            used.add(-1 - atom.index)
        else:
            used |= _vars_used(atom.lhs)
    return frozenset(used)


def _eval_atom(atom: Atom, dims: Sequence[int], symbols: Sequence[int]) -> int:
    if isinstance(atom, DimId):
        return dims[atom.index]
    if isinstance(atom, SymbolId):
        return symbols[atom.index]
    value = atom.lhs.evaluate(dims, symbols)
    return value // atom.divisor if isinstance(atom, FloorDiv) else value % atom.divisor


def _substitute(
    e: AffineExpr,
    dims: Mapping[int, AffineExpr],
    symbols: Mapping[int, AffineExpr],
    memo: dict[AffineExpr, AffineExpr],
) -> AffineExpr:
    if e in memo:
        return memo[e]
    result = const(e.constant)
    for atom, k in e.terms:
        if isinstance(atom, DimId):
            value = dims.get(atom.index, atom_expr(atom))
        elif isinstance(atom, SymbolId):
            value = symbols.get(atom.index, atom_expr(atom))
        else:
            lhs = _substitute(atom.lhs, dims, symbols, memo)
            value = _floordiv(lhs, atom.divisor) if isinstance(atom, FloorDiv) else _mod(lhs, atom.divisor)
        result = result + value.scale(k)
    memo[e] = result
    return result


# ---------------------------------------------------------------------------------------------
# Printing


class _Names:
    """Variable names for printing (`d<i>`, `s<j>` unless given)."""

    __slots__ = ("dims", "symbols")

    def __init__(self, dims: Sequence[str] | None, symbols: Sequence[str] | None):
        self.dims = dims
        self.symbols = symbols

    def dim(self, i: int) -> str:
        return self.dims[i] if self.dims is not None and i < len(self.dims) else f"d{i}"

    def symbol(self, i: int) -> str:
        return self.symbols[i] if self.symbols is not None and i < len(self.symbols) else f"s{i}"


def _print_atom(atom: Atom, names: _Names, parens: bool) -> str:
    if isinstance(atom, DimId):
        return names.dim(atom.index)
    if isinstance(atom, SymbolId):
        return names.symbol(atom.index)
    op = "floordiv" if isinstance(atom, FloorDiv) else "mod"
    text = f"{_print_expr(atom.lhs, names, parens=True)} {op} {atom.divisor}"
    return f"({text})" if parens else text


def _print_term(atom: Atom, coeff: int, names: _Names) -> str:
    """A leading term: `x`, `-x`, `x * 3`, `x * -3` (XLA's spelling)."""
    if coeff == 1:
        return _print_atom(atom, names, parens=False)
    if coeff == -1:
        return "-" + _print_atom(atom, names, parens=True)
    return f"{_print_atom(atom, names, parens=True)} * {coeff}"


def _print_expr(e: AffineExpr, names: _Names, parens: bool) -> str:
    if not e.terms:
        return str(e.constant)
    # Canonical order, except that subtracted terms are printed after added ones (`d0 - d1 * 3`).
    terms = [t for t in e.terms if t[1] > 0] + [t for t in e.terms if t[1] < 0]
    atom0, k0 = terms[0]
    parts = [_print_term(atom0, k0, names)]
    for atom, k in terms[1:]:
        if k == 1:
            parts.append(" + " + _print_atom(atom, names, parens=False))
        elif k == -1:
            parts.append(" - " + _print_atom(atom, names, parens=False))
        elif k < 0:
            parts.append(f" - {_print_atom(atom, names, parens=True)} * {-k}")
        else:
            parts.append(f" + {_print_atom(atom, names, parens=True)} * {k}")
    if e.constant > 0:
        parts.append(f" + {e.constant}")
    elif e.constant < 0:
        parts.append(f" - {-e.constant}")
    text = "".join(parts)
    if parens and not (len(e.terms) == 1 and e.constant == 0 and k0 == 1 and isinstance(atom0, DimId | SymbolId)):
        return f"({text})"
    return text


def _py_expr(e: AffineExpr, names: _Names) -> str:
    parts = []
    for atom, k in e.terms:
        if isinstance(atom, DimId):
            text = names.dim(atom.index)
        elif isinstance(atom, SymbolId):
            text = names.symbol(atom.index)
        else:
            op = "//" if isinstance(atom, FloorDiv) else "%"
            text = f"(({_py_expr(atom.lhs, names)}) {op} {atom.divisor})"
        parts.append(text if k == 1 else f"{k} * {text}")
    if e.constant or not parts:
        parts.append(str(e.constant))
    return " + ".join(parts)


@lru_cache(maxsize=4096)
def compile_exprs(exprs: tuple[AffineExpr, ...], num_dims: int, num_symbols: int) -> Callable[..., tuple[int, ...]]:
    """A Python function `f(d0, ..., s0, ...) -> tuple` evaluating `exprs` (fast brute force)."""
    dim_names = [f"d{i}" for i in range(num_dims)]
    sym_names = [f"s{j}" for j in range(num_symbols)]
    names = _Names(dim_names, sym_names)
    body = ", ".join(_py_expr(e, names) for e in exprs)
    args = ", ".join(dim_names + sym_names)
    source = f"def _f({args}):\n    return ({body}{',' if len(exprs) == 1 else ''})\n"
    scope: dict[str, Any] = {}
    exec(compile(source, "<affine>", "exec"), scope)
    return scope["_f"]


@lru_cache(maxsize=1 << 16)
def expr_cost(e: AffineExpr) -> tuple[int, int]:
    """`(nodes, negative coefficients)`: what the simplifier tries to reduce.

    Nodes are variables, constants, `floordiv`/`mod` (two each: the operation and its divisor)
    and multiplications by a coefficient other than 1 or -1; sums are free.
    """
    nodes = 0
    negatives = 0
    for atom, k in e.terms:
        if isinstance(atom, FloorDiv | Mod):
            inner_nodes, inner_neg = expr_cost(atom.lhs)
            nodes += 2 + inner_nodes
            negatives += inner_neg
        else:
            nodes += 1
        if abs(k) != 1:  # `a - b` costs no more than `a + b`
            nodes += 1
        if k < 0:
            negatives += 1
    nodes += 1 if e.constant else 0  # additions are free: they cost what the summands cost
    return nodes, negatives
