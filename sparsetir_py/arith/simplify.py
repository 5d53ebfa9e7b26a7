"""The bounds-aware simplifier of affine expressions and constraints (XLA's indexing-map simplifier).

Everything here takes a `RangeEnv` (the intervals of the variables, and optionally the intervals
that constraints give to whole subexpressions) and rewrites expressions into ones that have the
same value at every point of those intervals:

- an expression (or any subexpression) whose range is one value becomes that constant;
- `e floordiv c` and `e mod c` are folded when the range of `e` lies in one block
  `[k*c, k*c + c - 1]` (`d1 floordiv 16 -> 0`, `d0 mod 42 -> d0 - 42` for `d0 in [53, 71]`);
- sums are split where a part is provably below a divisor of the divisor: with `y in [0, 3]`,
  `(8*x + 4*z + y) floordiv 8 -> (2*x + z) floordiv 2` and `(4*x + y) mod 8 -> (x mod 2) * 4 + y`;
- `b*c*(e floordiv c) + b*(e mod c)` and its rearrangements (`e - c*(e floordiv c) -> e mod c`)
  are recognised, also when the two halves are spelled differently but simplify to the same thing
  (chained reshapes, bitcasts);
- constraints `lo <= e <= hi` are rewritten into bounds on simpler expressions
  (`e + k`, `k * e`, `e floordiv k`, and sums `g*m + r` whose `r` does not matter).

The identities that hold without bounds are applied when expressions are built
(`sparsetir_py.arith.affine`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .affine import (
    AffineExpr,
    Atom,
    DimId,
    FloorDiv,
    Interval,
    Mod,
    SymbolId,
    atom_expr,
    const,
    expr_cost,
)
from .errors import IndexingMapError

__all__ = ["RangeEnv", "normalize_constraint", "simplify_expr"]

_MAX_ITERATIONS = 32


class RangeEnv:
    """Intervals of `d_i` and `s_j`, and of constrained subexpressions; computes expression ranges.

    A helper object of the simplifier: it memoizes ranges and simplified forms, so build a new one
    whenever the intervals change.
    """

    def __init__(
        self,
        dims: Sequence[Interval],
        symbols: Sequence[Interval] = (),
        constraints: Mapping[AffineExpr, Interval] | None = None,
    ):
        self.dims = tuple(dims)
        self.symbols = tuple(symbols)
        self.constraints = dict(constraints or {})
        # Multi-term constraints also bound any sum that contains their terms.
        self._sum_constraints = [(e, r) for e, r in self.constraints.items() if len(e.terms) > 1]
        self._ranges: dict[AffineExpr, Interval] = {}
        self._atom_ranges: dict[Atom, Interval] = {}
        self.simplified: dict[AffineExpr, AffineExpr] = {}

    def atom_range(self, atom: Atom) -> Interval:
        """The interval of one atom."""
        cached = self._atom_ranges.get(atom)
        if cached is not None:
            return cached
        if isinstance(atom, DimId):
            result = _lookup(self.dims, atom.index, "d")
        elif isinstance(atom, SymbolId):
            result = _lookup(self.symbols, atom.index, "s")
        elif isinstance(atom, FloorDiv):
            result = self.range(atom.lhs).floordiv(atom.divisor)
        else:
            result = self.range(atom.lhs).mod(atom.divisor)
        bound = self.constraints.get(atom_expr(atom)) if self.constraints else None
        if bound is not None:
            result = result.intersect(bound)
        self._atom_ranges[atom] = result
        return result

    def range(self, e: AffineExpr) -> Interval:
        """An interval holding every value of `e` (as tight as interval arithmetic allows)."""
        cached = self._ranges.get(e)
        if cached is not None:
            return cached
        result = Interval.point(e.constant)
        for atom, k in e.terms:
            result = result + self.atom_range(atom).scale(k)
        if self.constraints:
            bound = self.constraints.get(e)
            if bound is not None:
                result = result.intersect(bound)
            for c_expr, c_range in self._sum_constraints:
                if c_expr != e and _contains_terms(e, c_expr):
                    result = result.intersect(c_range + self.range(e - c_expr))
        self._ranges[e] = result
        return result


def _lookup(bounds: Sequence[Interval], index: int, prefix: str) -> Interval:
    if index >= len(bounds):
        raise IndexingMapError(f"`{prefix}{index}` has no interval (only {len(bounds)} given)")
    return bounds[index]


def _contains_terms(e: AffineExpr, part: AffineExpr) -> bool:
    have = dict(e.terms)
    return all(have.get(atom) == k for atom, k in part.terms)


# ---------------------------------------------------------------------------------------------
# Expressions


def simplify_expr(e: AffineExpr, env: RangeEnv) -> AffineExpr:
    """The simplest form of `e` that has the same value at every point of `env`'s intervals."""
    cached = env.simplified.get(e)
    if cached is not None:
        return cached
    current = e
    for _ in range(_MAX_ITERATIONS):
        new = _simplify_once(current, env)
        if new == current:
            break
        current = new
    env.simplified[e] = current
    env.simplified[current] = current
    return current


def _simplify_once(e: AffineExpr, env: RangeEnv) -> AffineExpr:
    r = env.range(e)
    if r.is_point:
        return const(r.lo)
    if r.is_empty:
        return e
    result = const(e.constant)
    for atom, k in e.terms:
        result = result + _simplify_atom(atom, env).scale(k)
    return _rewrite_div_mod_pairs(result, env)


def _simplify_atom(atom: Atom, env: RangeEnv) -> AffineExpr:
    r = env.atom_range(atom)
    if r.is_point:
        return const(r.lo)
    if isinstance(atom, DimId | SymbolId):
        return atom_expr(atom)
    lhs = simplify_expr(atom.lhs, env)
    rebuilt = lhs.floordiv(atom.divisor) if isinstance(atom, FloorDiv) else lhs.mod(atom.divisor)
    result = const(rebuilt.constant)
    for a, k in rebuilt.terms:
        folded = _fold(a, env) if isinstance(a, FloorDiv | Mod) else None
        result = result + (atom_expr(a) if folded is None else folded).scale(k)
    return result


def _fold(atom: FloorDiv | Mod, env: RangeEnv) -> AffineExpr | None:
    """A simpler expression for one `floordiv`/`mod` whose dividend is already simplified."""
    x, c = atom.lhs, atom.divisor
    rx = env.range(x)
    if rx.is_bounded and not rx.is_empty and rx.lo // c == rx.hi // c:
        block = rx.lo // c
        return const(block) if isinstance(atom, FloorDiv) else x - block * c
    for g in _split_divisors(x, c):
        split = _split(x, g, env)
        if split is None:
            continue
        multiplied, shift, rest = split
        if isinstance(atom, FloorDiv):
            return (multiplied + shift).floordiv(c // g)
        split_mod = (multiplied + shift).mod(c // g).scale(g) + rest - g * shift
        # `(2x + 5) mod 256 -> ((x + 2) mod 128) * 2 + 1` is no simpler: keep such mods whole.
        if expr_cost(split_mod) <= expr_cost(atom_expr(atom)):
            return split_mod
    return None


def _split_divisors(x: AffineExpr, c: int) -> list[int]:
    """Divisors `g` of `c` (1 < g < c) that divide some coefficient of `x`, largest first."""
    found = {math.gcd(k, c) for _, k in x.terms}
    found.discard(1)
    found.discard(c)
    closure = set(found)
    for a in found:
        for b in found:
            g = math.gcd(a, b)
            if g > 1:
                closure.add(g)
    return sorted(closure, reverse=True)


def _split(x: AffineExpr, g: int, env: RangeEnv) -> tuple[AffineExpr, int, AffineExpr] | None:
    """`x = g*m + r` with `r` in one block `[g*k, g*k + g - 1]`: returns `(m, k, r)`."""
    multiplied: dict[Atom, int] = {}
    rest: list[tuple[Atom, int]] = []
    for atom, k in x.terms:
        if k % g == 0:
            multiplied[atom] = k // g
        else:
            rest.append((atom, k))
    if not multiplied:
        return None
    rest_expr = const(x.constant)
    for atom, k in rest:
        rest_expr = rest_expr + atom_expr(atom).scale(k)
    rr = env.range(rest_expr)
    if not rr.is_bounded or rr.is_empty or rr.lo // g != rr.hi // g:
        return None
    m = const(0)
    for atom, k in multiplied.items():
        m = m + atom_expr(atom).scale(k)
    return m, rr.lo // g, rest_expr


def _rewrite_div_mod_pairs(e: AffineExpr, env: RangeEnv) -> AffineExpr:
    """Use `x = c*(x floordiv c) + x mod c` wherever it makes the sum simpler.

    For each `b*(x mod c)` summand the pair is completed with `x floordiv c` simplified in `env`
    (so `(s0 * 128) mod 715 + ((s0 * 128) floordiv 715) * 715 -> s0 * 128`, and the halves of a
    bitcast written with different but equal floordivs still meet); for each `b*c*(x floordiv c)`
    summand the other way round (`d0 - (s0 floordiv 3) * 3 + s0 -> d0 + s0 mod 3`). A rewrite is
    kept when it lowers `(number of nodes, number of negative coefficients)`.
    """
    for _ in range(_MAX_ITERATIONS):
        best, best_cost = e, expr_cost(e)
        for atom, k in e.terms:
            if isinstance(atom, Mod):
                x, c = atom.lhs, atom.divisor
                partner = simplify_expr(x.floordiv(c), env)
                candidate = e - atom_expr(atom).scale(k) + x.scale(k) - partner.scale(k * c)
            elif isinstance(atom, FloorDiv) and k % atom.divisor == 0:
                x, c = atom.lhs, atom.divisor
                b = k // c
                partner = simplify_expr(x.mod(c), env)
                candidate = e - atom_expr(atom).scale(k) + x.scale(b) - partner.scale(b)
            else:
                candidate = None
            for option in (candidate, _shift_constant_out(e, atom, k)):
                if option is None:
                    continue
                cost = expr_cost(option)
                if cost < best_cost:
                    best, best_cost = option, cost
        if best is e:
            return e
        e = best
    return e


def _shift_constant_out(e: AffineExpr, atom: Atom, k: int) -> AffineExpr | None:
    """`(x + a) floordiv c = (x + a - q*c) floordiv c + q`: worth it when the sum has a constant
    to absorb `q` (`(d1 - 109) floordiv 11 + 9 -> (d1 - 10) floordiv 11`)."""
    if not isinstance(atom, FloorDiv):
        return None
    c, a = atom.divisor, atom.lhs.constant
    q = a // c if a >= 0 else -((-a) // c)
    if q == 0:
        return None
    return e - atom_expr(atom).scale(k) + (atom.lhs - q * c).floordiv(c).scale(k) + q * k


# ---------------------------------------------------------------------------------------------
# Constraints


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def normalize_constraint(e: AffineExpr, rng: Interval, env: RangeEnv) -> tuple[AffineExpr, Interval]:
    """An equivalent constraint `e' in rng'` on a simpler expression (over `env`'s box).

    Rewrites `e + k in [lo, hi]` to `e in [lo - k, hi - k]`, `g*e in [lo, hi]` to
    `e in [ceil(lo/g), floor(hi/g)]` (and makes the leading coefficient positive),
    `e floordiv c in [lo, hi]` to `e in [lo*c, hi*c + c - 1]`, and `g*m + r in [lo, hi]` to
    `m in [...]` when no value of `r` changes which `m` satisfy it.
    """
    lo, hi = rng.lo, rng.hi
    for _ in range(_MAX_ITERATIONS):
        if e.constant:
            lo, hi = lo - e.constant, hi - e.constant
            e = e - e.constant
        if not e.terms or lo > hi:
            break
        g = e.content()
        if _prefer_negated(e):
            e, lo, hi = -e, -hi, -lo
        if g > 1:
            e = _exact_div(e, g)
            lo, hi = _ceil_div(lo, g), hi // g
            continue
        atom = e.atom
        if isinstance(atom, FloorDiv):
            e, lo, hi = atom.lhs, lo * atom.divisor, hi * atom.divisor + atom.divisor - 1
            continue
        split = _split_constraint(e, lo, hi, env)
        if split is None:
            break
        e, lo, hi = split
    return e, Interval(lo, hi)


def _prefer_negated(e: AffineExpr) -> bool:
    """Whether `-e` is the canonical sign: fewer negative coefficients, else a positive lead."""
    neg = -e
    own = sum(k < 0 for _, k in e.terms)
    other = sum(k < 0 for _, k in neg.terms)
    if own != other:
        return own > other
    return e.terms[0][1] < 0 < neg.terms[0][1]


def _exact_div(e: AffineExpr, g: int) -> AffineExpr:
    result = const(e.constant // g)
    for atom, k in e.terms:
        result = result + atom_expr(atom).scale(k // g)
    return result


def _split_constraint(e: AffineExpr, lo: int, hi: int, env: RangeEnv) -> tuple[AffineExpr, int, int] | None:
    """`g*m + r in [lo, hi]` -> `m in [L, U]` when `[L, U]` is the same for every value of `r`."""
    coefficients = {abs(k) for _, k in e.terms}
    candidates = set()
    for a in coefficients:
        for b in coefficients:
            g = math.gcd(a, b)
            if g > 1:
                candidates.add(g)
    for g in sorted(candidates, reverse=True):
        multiplied = const(0)
        rest = const(0)
        for atom, k in e.terms:
            if k % g == 0:
                multiplied = multiplied + atom_expr(atom).scale(k // g)
            else:
                rest = rest + atom_expr(atom).scale(k)
        if rest.is_constant or multiplied.is_constant:
            continue
        rr = env.range(rest)
        if not rr.is_bounded or rr.is_empty:
            continue
        lower = {_ceil_div(lo - rr.lo, g), _ceil_div(lo - rr.hi, g)}
        upper = {(hi - rr.lo) // g, (hi - rr.hi) // g}
        if len(lower) == 1 and len(upper) == 1:
            return multiplied, lower.pop(), upper.pop()
    return None


def propagate_bounds(e: AffineExpr, rng: Interval, env: RangeEnv) -> dict[Atom, Interval]:
    """Bounds that `e in rng` implies for the variables appearing linearly in `e`."""
    implied: dict[Atom, Interval] = {}
    for atom, k in e.terms:
        if not isinstance(atom, DimId | SymbolId):
            continue
        rest_range = env.range(e - atom_expr(atom).scale(k))
        if not rest_range.is_bounded or rest_range.is_empty:
            continue
        lo, hi = rng.lo - rest_range.hi, rng.hi - rest_range.lo
        if k < 0:
            lo, hi, k = -hi, -lo, -k
        implied[atom] = Interval(_ceil_div(lo, k), hi // k)
    return implied
