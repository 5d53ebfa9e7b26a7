"""XLA indexing maps: an affine map with interval domains and constraints.

An indexing map `(d0, ..., dn)[s0, ..., sm]{rt0, ...} -> (e0, ..., ek)` maps a point of one
index space (the dimension variables `d_i`) to a point of another, for every value of its range
variables `s_j` (e.g. the reduced dimensions of a reduce) and runtime variables `rt_j` (values
read at run time, e.g. the offsets of a dynamic-slice). Its domain is a box of intervals, one
per variable, cut by constraints `expr in [lo, hi]`. In expressions, symbols are numbered range
variables first, then runtime variables (`s<m + j>` is `rt<j>`), as in XLA.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .affine import (
    AffineExpr,
    DimId,
    Interval,
    Mod,
    SymbolId,
    as_interval,
    compile_exprs,
    const,
    dim,
    symbol,
)
from .errors import IndexingMapError
from .simplify import RangeEnv, normalize_constraint, propagate_bounds, simplify_expr

__all__ = ["AffineMap", "IndexingMap", "RuntimeVar", "Variable"]

# Single-variable constraints are checked value by value over at most this many values; the
# whole constrained part of a domain is enumerated when it has at most `_EXACT_LIMIT` points.
_SCAN_LIMIT = 4096
_EXACT_LIMIT = 1 << 14
_MAX_ROUNDS = 16


@dataclass(frozen=True, slots=True)
class AffineMap:
    """`(d0, ..., d<num_dims-1>)[s0, ...] -> (results)` with no domain, e.g. where a runtime
    variable's value is read from (`(d0, d1, d2, d3) -> (d0, 0)`)."""

    num_dims: int
    num_symbols: int
    results: tuple[AffineExpr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(_as_affine(r) for r in self.results))
        for e in self.results:
            _check_vars(e, self.num_dims, self.num_symbols, "affine map result")

    def __str__(self) -> str:
        return self.to_string()

    def to_string(self) -> str:
        dims = ", ".join(f"d{i}" for i in range(self.num_dims))
        syms = f"[{', '.join(f's{j}' for j in range(self.num_symbols))}]" if self.num_symbols else ""
        return f"({dims}){syms} -> ({', '.join(str(e) for e in self.results)})"

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> tuple[int, ...]:
        """The results at one point."""
        if len(dims) != self.num_dims or len(symbols) != self.num_symbols:
            raise IndexingMapError(
                f"`{self}` takes {self.num_dims} dims and {self.num_symbols} symbols, "
                f"got {len(dims)} and {len(symbols)}"
            )
        return tuple(e.evaluate(dims, symbols) for e in self.results)

    def substitute(
        self, dims: Sequence[AffineExpr], symbols: Mapping[int, AffineExpr], num_dims: int, num_symbols: int
    ) -> AffineMap:
        """This map with its variables replaced, as a map over `num_dims` dims and `num_symbols` symbols."""
        return AffineMap(num_dims, num_symbols, tuple(e.substitute(dims, symbols) for e in self.results))


@dataclass(frozen=True, slots=True)
class Variable:
    """A dimension or range variable: its interval (inclusive) and an optional display name."""

    bounds: Interval
    name: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class RuntimeVar:
    """A runtime variable: the interval of values it can take, and where its value comes from.

    `hlo` describes the producer of the value (XLA's `of1 = s32[] parameter(1)`), and `access`
    says which element of it is read for a point of the map's domain: a map from the dimensions
    (and the symbols, when it uses any) of the indexing map. Like names, these descriptions are
    not compared: two maps are equal when they index the same way over the same domain.
    """

    bounds: Interval
    hlo: str = field(default="", compare=False)
    access: AffineMap | None = field(default=None, compare=False)
    name: str = field(default="", compare=False)


def _as_affine(value: Any) -> AffineExpr:
    if isinstance(value, AffineExpr):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return const(value)
    raise IndexingMapError(f"expected an affine expression, got {value!r}")


def _as_variable(value: Variable | Interval | tuple[int, int]) -> Variable:
    var = value if isinstance(value, Variable) else Variable(as_interval(value))
    if not isinstance(var.bounds, Interval):
        var = Variable(as_interval(var.bounds), var.name)
    _check_bounded(var.bounds, var.name or "variable")
    return var


def _as_rt_var(value: RuntimeVar | Variable | Interval | tuple[int, int]) -> RuntimeVar:
    if isinstance(value, RuntimeVar):
        var = (
            value
            if isinstance(value.bounds, Interval)
            else RuntimeVar(as_interval(value.bounds), value.hlo, value.access, value.name)
        )
    elif isinstance(value, Variable):
        var = RuntimeVar(value.bounds, name=value.name)
    else:
        var = RuntimeVar(as_interval(value))
    _check_bounded(var.bounds, var.name or "runtime variable")
    return var


def _check_bounded(bounds: Interval, what: str) -> None:
    if not bounds.is_bounded:
        raise IndexingMapError(f"{what} needs finite bounds, got {bounds}")


def _check_vars(e: AffineExpr, num_dims: int, num_symbols: int, what: str) -> None:
    for i in e.dims_used():
        if i >= num_dims:
            raise IndexingMapError(f"{what} `{e}` uses d{i}, but the map has {num_dims} dimensions")
    for j in e.symbols_used():
        if j >= num_symbols:
            raise IndexingMapError(f"{what} `{e}` uses s{j}, but the map has {num_symbols} symbols")


@dataclass(frozen=True, slots=True)
class IndexingMap:
    """An XLA indexing map: `results` over dims, range variables and runtime variables, with a domain.

    Build one with `parse_indexing_map`, with `IndexingMap.from_tensor_sizes`, or directly:
    `IndexingMap((dim(0) + symbol(0),), dims=[(0, 9)], range_vars=[(0, 4)])`. Variables may be
    given as `Variable`s, `Interval`s or `(lo, hi)` pairs; constraints as a mapping or pairs
    `(expr, (lo, hi))`. The constructor keeps the map canonical: constraints on a lone variable
    tighten its interval, constant constraints are checked, and a map whose domain is known to be
    empty becomes the canonical empty map (all results 0, all intervals `[0, -1]`).

    Operations never modify a map: `compose`, `simplify`, `remove_unused_symbols` return new ones.
    """

    results: tuple[AffineExpr, ...]
    dims: tuple[Variable, ...] = ()
    range_vars: tuple[Variable, ...] = ()
    rt_vars: tuple[RuntimeVar, ...] = ()
    constraints: tuple[tuple[AffineExpr, Interval], ...] = ()
    known_empty: bool = False

    def __post_init__(self) -> None:
        results = tuple(_as_affine(r) for r in self.results)
        dims = [_as_variable(v) for v in self.dims]
        range_vars = [_as_variable(v) for v in self.range_vars]
        rt_vars = [_as_rt_var(v) for v in self.rt_vars]
        num_dims, num_symbols = len(dims), len(range_vars) + len(rt_vars)
        for e in results:
            _check_vars(e, num_dims, num_symbols, "result")
        raw = self.constraints.items() if isinstance(self.constraints, Mapping) else self.constraints
        bounds = [v.bounds for v in dims] + [v.bounds for v in range_vars] + [v.bounds for v in rt_vars]
        empty = bool(self.known_empty) or any(b.is_empty for b in bounds)
        constraints: dict[AffineExpr, Interval] = {}
        for item in raw:
            expr, rng = item
            expr, rng = _as_affine(expr), as_interval(rng)
            _check_vars(expr, num_dims, num_symbols, "constraint")
            _check_bounded(rng, f"constraint `{expr}`")
            if empty:
                continue
            empty = not _add_constraint(expr, rng, bounds, constraints, num_dims)
        if empty:
            _make_empty(self, results, dims, range_vars, rt_vars)
            return
        dims = [Variable(b, v.name) for v, b in zip(dims, bounds)]
        range_vars = [Variable(b, v.name) for v, b in zip(range_vars, bounds[num_dims:])]
        rt_bounds = bounds[num_dims + len(range_vars) :]
        rt_vars = [RuntimeVar(b, v.hlo, v.access, v.name) for v, b in zip(rt_vars, rt_bounds)]
        ordered = tuple(sorted(constraints.items(), key=lambda c: c[0].sort_key))
        object.__setattr__(self, "results", results)
        object.__setattr__(self, "dims", tuple(dims))
        object.__setattr__(self, "range_vars", tuple(range_vars))
        object.__setattr__(self, "rt_vars", tuple(rt_vars))
        object.__setattr__(self, "constraints", ordered)
        object.__setattr__(self, "known_empty", False)

    # -- construction helpers ------------------------------------------------------------------

    @staticmethod
    def from_tensor_sizes(
        results: Sequence[AffineExpr | int], dim_sizes: Sequence[int], symbol_sizes: Sequence[int] = ()
    ) -> IndexingMap:
        """A map whose `d_i` ranges over `[0, dim_sizes[i] - 1]` and `s_j` over `[0, symbol_sizes[j] - 1]`."""
        return IndexingMap(
            tuple(results),
            tuple(Interval(0, n - 1) for n in dim_sizes),
            tuple(Interval(0, n - 1) for n in symbol_sizes),
        )

    @staticmethod
    def identity(shape: Sequence[int]) -> IndexingMap:
        """`(d0, ..., dn) -> (d0, ..., dn)` over a tensor of `shape`."""
        return IndexingMap.from_tensor_sizes(tuple(dim(i) for i in range(len(shape))), shape)

    # -- queries --------------------------------------------------------------------------------

    @property
    def num_dims(self) -> int:
        return len(self.dims)

    @property
    def num_symbols(self) -> int:
        """Range variables plus runtime variables."""
        return len(self.range_vars) + len(self.rt_vars)

    @property
    def num_results(self) -> int:
        return len(self.results)

    @property
    def dim_bounds(self) -> tuple[Interval, ...]:
        return tuple(v.bounds for v in self.dims)

    @property
    def symbol_bounds(self) -> tuple[Interval, ...]:
        """Intervals of all symbols: range variables, then runtime variables."""
        return tuple(v.bounds for v in self.range_vars) + tuple(v.bounds for v in self.rt_vars)

    @property
    def affine_map(self) -> AffineMap:
        """The map without its domain."""
        return AffineMap(self.num_dims, self.num_symbols, self.results)

    def is_empty(self) -> bool:
        """True when the simplifier proves that no point satisfies the domain.

        Interval reasoning plus exact checks of small domains; False means "not proven empty".
        """
        return self.known_empty or self.simplify().known_empty

    def is_identity(self) -> bool:
        """True when the results are exactly `(d0, ..., d<n-1>)` over the map's own dimensions."""
        return self.num_results == self.num_dims and all(r == dim(i) for i, r in enumerate(self.results))

    def contains(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> bool:
        """Whether `(dims, symbols)` lies in the domain (intervals and constraints)."""
        self._check_arity(dims, symbols)
        return self._violation(tuple(dims), tuple(symbols)) is None

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = (), *, check: bool = True) -> tuple[int, ...]:
        """The results at `d_i = dims[i]` and `s_j = symbols[j]` (range variables, then runtime ones).

        With `check=True` (the default) a point outside the domain raises `IndexingMapError`
        naming the violated interval or constraint; `check=False` evaluates the expressions anyway.
        """
        self._check_arity(dims, symbols)
        dims, symbols = tuple(int(x) for x in dims), tuple(int(x) for x in symbols)
        if check:
            problem = self._violation(dims, symbols)
            if problem is not None:
                raise IndexingMapError(
                    f"point {dims}{list(symbols) if symbols else ''} is outside the domain: {problem}"
                )
        fn = compile_exprs(self.results, self.num_dims, self.num_symbols)
        return fn(*dims, *symbols)

    def domain_points(self, limit: int = 1 << 20) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Every `(dims, symbols)` point of the domain, by enumeration of the box (at most `limit` points)."""
        bounds = self.dim_bounds + self.symbol_bounds
        size = math.prod(b.size for b in bounds)
        if size > limit:
            raise IndexingMapError(f"the domain box of `{self}` has {size} points, more than {limit}")
        check = _compile_constraints(self.constraints, self.num_dims, self.num_symbols)
        n = self.num_dims
        for point in itertools.product(*(range(b.lo, b.hi + 1) for b in bounds)):
            if check(*point):
                yield point[:n], point[n:]

    def _check_arity(self, dims: Sequence[int], symbols: Sequence[int]) -> None:
        if len(dims) != self.num_dims or len(symbols) != self.num_symbols:
            raise IndexingMapError(
                f"`{self}` takes {self.num_dims} dims and {self.num_symbols} symbols, "
                f"got {len(dims)} and {len(symbols)}"
            )

    def _violation(self, dims: tuple[int, ...], symbols: tuple[int, ...]) -> str | None:
        if self.known_empty:
            return "the domain is empty"
        names = self._names()
        for value, var, name in zip(
            dims + symbols, self.dims + self.range_vars + self.rt_vars, names[0] + names[1] + names[2]
        ):
            if not var.bounds.contains(value):
                return f"{name} = {value} is not in {var.bounds}"
        for expr, rng in self.constraints:
            value = expr.evaluate(dims, symbols)
            if not rng.contains(value):
                return f"{self._expr_str(expr)} = {value} is not in {rng}"
        return None

    # -- printing -------------------------------------------------------------------------------

    def _names(self) -> tuple[list[str], list[str], list[str]]:
        dims = [v.name or f"d{i}" for i, v in enumerate(self.dims)]
        ranges = [v.name or f"s{j}" for j, v in enumerate(self.range_vars)]
        rts = [v.name or f"rt{j}" for j, v in enumerate(self.rt_vars)]
        every = dims + ranges + rts
        if len(set(every)) != len(every):  # names from composed maps may clash: fall back
            dims = [f"d{i}" for i in range(len(dims))]
            ranges = [f"s{j}" for j in range(len(ranges))]
            rts = [f"rt{j}" for j in range(len(rts))]
        return dims, ranges, rts

    def _expr_str(self, e: AffineExpr) -> str:
        dims, ranges, rts = self._names()
        return e.to_string(dims, ranges + rts)

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        return f"IndexingMap({self.to_string()!r})"

    def to_string(self, multiline: bool = False) -> str:
        """XLA's text form; one line by default (what `parse_indexing_map` reads back).

        `multiline=True` prints one domain entry per line, followed for runtime variables by
        where their value comes from (`hlo: ...` and the access map), as in XLA's documentation.
        """
        dims, ranges, rts = self._names()
        symbol_names = ranges + rts
        header = f"({', '.join(dims)})"
        if ranges:
            header += f"[{', '.join(ranges)}]"
        if rts:
            header += "{" + ", ".join(rts) + "}"
        header += f" -> ({', '.join(e.to_string(dims, symbol_names) for e in self.results)})"
        entries = [f"{n} in {v.bounds}" for n, v in zip(dims, self.dims)]
        entries += [f"{n} in {v.bounds}" for n, v in zip(ranges, self.range_vars)]
        rt_entries = []
        for n, v in zip(rts, self.rt_vars):
            text = f"{n} in {v.bounds}"
            if multiline and v.hlo:
                text += f"\nhlo: {v.hlo}"
            if multiline and v.access is not None:
                text += f"\n{v.access}"
            rt_entries.append(text)
        entries += rt_entries
        entries += sorted(f"{e.to_string(dims, symbol_names)} in {r}" for e, r in self.constraints)
        if self.known_empty and not entries:
            entries.append("0 in [1, 0]")
        if not entries:
            return header
        if multiline:
            return header + "\ndomain:\n" + "\n".join(entries)
        return header + ", domain: " + ", ".join(entries)

    # -- operations -----------------------------------------------------------------------------

    def compose(self, other: IndexingMap) -> IndexingMap:
        """This map after `other`: `x -> self(other(x))`, on `other`'s dimensions.

        The domains are combined: `other`'s intervals and constraints, this map's constraints on
        `other`'s results, and `other`'s results must lie in this map's dimension intervals.
        Symbols are concatenated as in XLA: this map's range variables, `other`'s range variables,
        this map's runtime variables, `other`'s runtime variables.
        """
        if other.num_results != self.num_dims:
            raise IndexingMapError(
                f"cannot compose `{self}` after `{other}`: {other.num_results} results for {self.num_dims} dimensions"
            )
        n_r1, n_t1 = len(self.range_vars), len(self.rt_vars)
        n_r2, n_t2 = len(other.range_vars), len(other.rt_vars)
        total = n_r1 + n_r2 + n_t1 + n_t2
        self_syms = {j: symbol(j) for j in range(n_r1)}
        self_syms.update({n_r1 + t: symbol(n_r1 + n_r2 + t) for t in range(n_t1)})
        other_syms = {j: symbol(n_r1 + j) for j in range(n_r2)}
        other_syms.update({n_r2 + t: symbol(n_r1 + n_r2 + n_t1 + t) for t in range(n_t2)})
        inner = tuple(r.substitute(symbols=other_syms) for r in other.results)
        results = tuple(r.substitute(inner, self_syms) for r in self.results)
        constraints = [(e.substitute(inner, self_syms), r) for e, r in self.constraints]
        constraints += [(e.substitute(symbols=other_syms), r) for e, r in other.constraints]
        constraints += [(e, v.bounds) for e, v in zip(inner, self.dims)]
        rt_vars = [_move_rt_var(v, inner, self_syms, other.num_dims, total) for v in self.rt_vars]
        no_dims = [dim(i) for i in range(other.num_dims)]
        rt_vars += [_move_rt_var(v, no_dims, other_syms, other.num_dims, total) for v in other.rt_vars]
        return IndexingMap(
            results,
            other.dims,
            self.range_vars + other.range_vars,
            tuple(rt_vars),
            tuple(constraints),
            known_empty=self.known_empty or other.known_empty,
        )

    def add_constraint(self, expr: AffineExpr, interval: Interval | tuple[int, int]) -> IndexingMap:
        """This map with one more constraint `expr in interval` (on a lone variable: its interval)."""
        return IndexingMap(
            self.results,
            self.dims,
            self.range_vars,
            self.rt_vars,
            (*self.constraints, (expr, as_interval(interval))),
            known_empty=self.known_empty,
        )

    def simplify(self) -> IndexingMap:
        """An equivalent map with a simpler domain and simpler results.

        Equivalent means: the same set of points in the domain, and the same results at each of
        them. Constraints are simplified and rewritten into bounds of simpler expressions,
        variable intervals tightened, constraints that always hold dropped, ones that never hold
        make the map (canonically) empty; then the results are simplified using the intervals and
        the remaining constraints. The number and order of variables never change.
        """
        names = tuple(v.name for v in (*self.dims, *self.range_vars))
        names += tuple((v.name, v.hlo, v.access) for v in self.rt_vars)
        return _simplify_map(self, names)

    def remove_unused_symbols(self) -> IndexingMap:
        """Drop range and runtime variables used neither by the results nor by constraints that
        also use other variables (constraints on unused symbols alone are dropped with them).

        This changes the symbols of the map (so `evaluate` takes fewer of them) and the set of
        points if a dropped constraint was unsatisfiable; simplify first to keep emptiness.
        """
        used: set[int] = set()
        for e in self.results:
            used |= e.symbols_used()
        kept_constraints = []
        pending = list(self.constraints)
        changed = True
        while changed:
            changed = False
            for item in list(pending):
                e = item[0]
                if e.dims_used() or e.symbols_used() & used:
                    used |= e.symbols_used()
                    kept_constraints.append(item)
                    pending.remove(item)
                    changed = True
        keep = sorted(used)
        renumber = {old: symbol(new) for new, old in enumerate(keep)}
        n_range = len(self.range_vars)
        range_vars = tuple(self.range_vars[j] for j in keep if j < n_range)
        rt_vars = tuple(self.rt_vars[j - n_range] for j in keep if j >= n_range)
        return IndexingMap(
            tuple(e.substitute(symbols=renumber) for e in self.results),
            self.dims,
            range_vars,
            rt_vars,
            tuple((e.substitute(symbols=renumber), r) for e, r in kept_constraints),
            known_empty=self.known_empty,
        )


def _move_rt_var(
    var: RuntimeVar, dims: Sequence[AffineExpr], symbols: Mapping[int, AffineExpr], num_dims: int, num_symbols: int
) -> RuntimeVar:
    if var.access is None:
        return var
    moved = var.access.substitute(dims, symbols, num_dims, num_symbols)
    if not any(e.symbols_used() for e in moved.results):  # keep `(d0, d1) -> ()` free of unused symbols
        moved = AffineMap(num_dims, 0, moved.results)
    return RuntimeVar(var.bounds, var.hlo, moved, var.name)


def _make_empty(m: IndexingMap, results, dims, range_vars, rt_vars) -> None:
    nothing = Interval(0, -1)
    object.__setattr__(m, "results", tuple(const(0) for _ in results))
    object.__setattr__(m, "dims", tuple(Variable(nothing, v.name) for v in dims))
    object.__setattr__(m, "range_vars", tuple(Variable(nothing, v.name) for v in range_vars))
    object.__setattr__(m, "rt_vars", tuple(RuntimeVar(nothing, v.hlo, v.access, v.name) for v in rt_vars))
    object.__setattr__(m, "constraints", ())
    object.__setattr__(m, "known_empty", True)


def _var_slot(e: AffineExpr, num_dims: int) -> int | None:
    """The position of the variable in `bounds` when `e` is exactly one variable."""
    atom = e.atom
    if isinstance(atom, DimId):
        return atom.index
    if isinstance(atom, SymbolId):
        return num_dims + atom.index
    return None


def _linear_in_one_var(e: AffineExpr, rng: Interval, num_dims: int) -> tuple[int, Interval] | None:
    """`k * v + c in [lo, hi]` as an interval of `v` (its slot and the interval), else None."""
    if len(e.terms) != 1 or not isinstance(e.terms[0][0], DimId | SymbolId):
        return None
    atom, k = e.terms[0]
    lo, hi = rng.lo - e.constant, rng.hi - e.constant
    if k < 0:
        lo, hi, k = -hi, -lo, -k
    slot = atom.index if isinstance(atom, DimId) else num_dims + atom.index
    return slot, Interval(-((-lo) // k), hi // k)


def _add_constraint(
    expr: AffineExpr, rng: Interval, bounds: list[Interval], constraints: dict[AffineExpr, Interval], num_dims: int
) -> bool:
    """Record `expr in rng`; returns False when that makes the domain empty."""
    if rng.is_empty:
        return False
    if expr.is_constant:
        return rng.contains(expr.constant)
    linear = _linear_in_one_var(expr, rng, num_dims)
    if linear is not None:
        slot, interval = linear
        bounds[slot] = bounds[slot].intersect(interval)
        return not bounds[slot].is_empty
    if expr in constraints:
        rng = constraints[expr].intersect(rng)
        if rng.is_empty:
            return False
    constraints[expr] = rng
    return True


def _compile_constraints(constraints: Iterable[tuple[AffineExpr, Interval]], num_dims: int, num_symbols: int):
    constraints = tuple(constraints)
    exprs = tuple(e for e, _ in constraints)
    if not exprs:
        return lambda *args: True
    fn = compile_exprs(exprs, num_dims, num_symbols)
    ranges = tuple((r.lo, r.hi) for _, r in constraints)

    def check(*point: int) -> bool:
        return all(lo <= v <= hi for v, (lo, hi) in zip(fn(*point), ranges))

    return check


# ---------------------------------------------------------------------------------------------
# Simplification of whole maps


class _Domain:
    """The mutable working state of `simplify`: variable intervals and constraints."""

    def __init__(self, m: IndexingMap):
        self.num_dims = m.num_dims
        self.num_symbols = m.num_symbols
        self.bounds = list(m.dim_bounds + m.symbol_bounds)
        self.constraints: dict[AffineExpr, Interval] = dict(m.constraints)

    def env(self, with_constraints: bool = False) -> RangeEnv:
        return RangeEnv(
            self.bounds[: self.num_dims],
            self.bounds[self.num_dims :],
            self.constraints if with_constraints else None,
        )

    def snapshot(self) -> tuple:
        return tuple(self.bounds), tuple(sorted(self.constraints.items(), key=lambda c: c[0].sort_key))

    def tighten(self, slot: int, rng: Interval) -> bool:
        self.bounds[slot] = self.bounds[slot].intersect(rng)
        return not self.bounds[slot].is_empty

    def slot_of(self, atom: DimId | SymbolId) -> int:
        return atom.index if isinstance(atom, DimId) else self.num_dims + atom.index

    # One round: simplify and normalize every constraint, propagate bounds, scan one-variable
    # constraints, merge congruences. Returns False when the domain is found empty.
    def round(self) -> bool:
        env = self.env()
        simplified: dict[AffineExpr, Interval] = {}
        for expr, rng in self.constraints.items():
            e = simplify_expr(expr, env)
            e, r = normalize_constraint(e, rng, env)
            if not self.add(e, r, env, simplified):
                return False
        self.constraints = simplified
        return self.propagate() and self.scan_single_variables() and self.merge_congruences()

    def add(self, e: AffineExpr, r: Interval, env: RangeEnv, into: dict[AffineExpr, Interval]) -> bool:
        if r.is_empty:
            return False
        if e.is_constant:
            return r.contains(e.constant)
        slot = _var_slot(e, self.num_dims)
        if slot is not None:
            return self.tighten(slot, r)
        value_range = env.range(e)
        if r.contains_interval(value_range):
            return True  # always holds
        r = r.intersect(value_range)
        if e in into:
            r = r.intersect(into[e])
        if r.is_empty:
            return False
        into[e] = r
        return True

    def propagate(self) -> bool:
        for expr, rng in self.constraints.items():
            env = self.env()
            for atom, implied in propagate_bounds(expr, rng, env).items():
                if not self.tighten(self.slot_of(atom), implied):
                    return False
        return True

    def _single_variable_groups(self) -> dict[int, list[AffineExpr]]:
        groups: dict[int, list[AffineExpr]] = {}
        for expr in self.constraints:
            used = [i for i in expr.dims_used()] + [self.num_dims + j for j in expr.symbols_used()]
            if len(used) == 1:
                groups.setdefault(used[0], []).append(expr)
        return groups

    def scan_single_variables(self) -> bool:
        """Tighten a variable to its first and last values satisfying the constraints on it alone
        (value by value, at most `_SCAN_LIMIT` values from each end; congruences `(v + k) mod c`
        are solved directly), and drop those constraints when they hold on the whole interval."""
        for slot, exprs in self._single_variable_groups().items():
            items = [(e, self.constraints[e]) for e in exprs]
            check = _single_variable_checker(items, slot, self.num_dims, self.num_symbols)
            lo, hi = self.bounds[slot]
            if hi - lo + 1 <= _SCAN_LIMIT:
                feasible = [v for v in range(lo, hi + 1) if check(v)]
                if not feasible:
                    return False
                new = Interval(feasible[0], feasible[-1])
            else:
                new_lo = next((v for v in range(lo, lo + _SCAN_LIMIT) if check(v)), None)
                new_hi = next((v for v in range(hi, hi - _SCAN_LIMIT, -1) if check(v)), None)
                new = Interval(lo if new_lo is None else new_lo, hi if new_hi is None else new_hi)
                for e, r in items:
                    new = new.intersect(_congruence_bounds(e, r, new))
            if not self.tighten(slot, new):
                return False
            lo, hi = self.bounds[slot]
            if hi - lo + 1 > _SCAN_LIMIT:
                continue
            for e, r in items:
                single = _single_variable_checker([(e, r)], slot, self.num_dims, self.num_symbols)
                if all(single(v) for v in range(lo, hi + 1)):
                    del self.constraints[e]
        return True

    def merge_congruences(self) -> bool:
        """`x mod a in [r, r]` and `x mod b in [q, q]` -> `x mod lcm(a, b) in [p, p]` (or empty)."""
        by_lhs: dict[AffineExpr, list[tuple[AffineExpr, int, int]]] = {}
        for expr, rng in self.constraints.items():
            atom = expr.atom
            if isinstance(atom, Mod) and rng.is_point:
                by_lhs.setdefault(atom.lhs, []).append((expr, atom.divisor, rng.lo))
        for lhs, items in by_lhs.items():
            if len(items) < 2:
                continue
            modulus, residue = 1, 0
            for _, divisor, rem in items:
                combined = _crt(modulus, residue, divisor, rem)
                if combined is None:
                    return False
                modulus, residue = combined
            if modulus > 1 << 40:
                continue
            for expr, _, _ in items:
                del self.constraints[expr]
            merged = lhs.mod(modulus)
            env = self.env()
            if not self.add(merged, Interval(residue, residue), env, self.constraints):
                return False
        return True

    def exact(self) -> bool:
        """Enumerate small constrained parts of the domain: exact emptiness, bounds, redundancy."""
        if not self.constraints:
            return True
        slots = sorted(
            {i for e in self.constraints for i in e.dims_used()}
            | {self.num_dims + j for e in self.constraints for j in e.symbols_used()}
        )
        size = math.prod(self.bounds[s].size for s in slots)
        if size > _EXACT_LIMIT:
            return True
        items = list(self.constraints.items())
        check = _subset_checker(items, slots, self.num_dims, self.num_symbols)
        ranges = [range(self.bounds[s].lo, self.bounds[s].hi + 1) for s in slots]
        lows = [None] * len(slots)
        highs = [None] * len(slots)
        for point in itertools.product(*ranges):
            if check(*point):
                for k, v in enumerate(point):
                    if lows[k] is None or v < lows[k]:
                        lows[k] = v
                    if highs[k] is None or v > highs[k]:
                        highs[k] = v
        if lows[0] is None:
            return False
        for k, s in enumerate(slots):
            self.bounds[s] = Interval(lows[k], highs[k])
        ranges = [range(self.bounds[s].lo, self.bounds[s].hi + 1) for s in slots]
        for expr, rng in items:
            single = _subset_checker([(expr, rng)], slots, self.num_dims, self.num_symbols)
            if all(single(*p) for p in itertools.product(*ranges)):
                del self.constraints[expr]
        return True


def _congruence_bounds(e: AffineExpr, rng: Interval, bounds: Interval) -> Interval:
    """For `(v + k) mod c in [r0, r1]`: the first and last `v` in `bounds` that satisfy it."""
    atom = e.atom
    if not isinstance(atom, Mod) or len(atom.lhs.terms) != 1:
        return bounds
    var, coeff = atom.lhs.terms[0]
    if coeff != 1 or not isinstance(var, DimId | SymbolId):
        return bounds
    c, k = atom.divisor, atom.lhs.constant
    r0, r1 = max(rng.lo, 0), min(rng.hi, c - 1)
    if r0 > r1:
        return Interval.empty()
    t = (bounds.lo + k) % c
    lo = bounds.lo if r0 <= t <= r1 else bounds.lo + (r0 - t) % c
    t = (bounds.hi + k) % c
    hi = bounds.hi if r0 <= t <= r1 else bounds.hi - (t - r1) % c
    return Interval(lo, hi)


def _crt(m1: int, r1: int, m2: int, r2: int) -> tuple[int, int] | None:
    """The `(lcm, r)` with `x = r1 (mod m1)` and `x = r2 (mod m2)` iff `x = r (mod lcm)`; None if none."""
    r1 %= m1
    r2 %= m2
    g = math.gcd(m1, m2)
    if (r2 - r1) % g:
        return None
    lcm = m1 // g * m2
    # x = r1 + m1 * t with m1 * t = r2 - r1 (mod m2)
    t = ((r2 - r1) // g * pow(m1 // g, -1, m2 // g)) % (m2 // g) if m2 // g > 1 else 0
    return lcm, (r1 + m1 * t) % lcm


@lru_cache(maxsize=4096)
def _compiled_predicate(
    items: tuple[tuple[AffineExpr, Interval], ...], arg_names: tuple[str, ...], num_dims: int, num_symbols: int
):
    dim_names = [f"_d{i}" for i in range(num_dims)]
    sym_names = [f"_s{j}" for j in range(num_symbols)]
    for name in arg_names:
        kind, index = name[1], int(name[2:])
        (dim_names if kind == "d" else sym_names)[index] = name
    parts = [f"({r.lo} <= ({e.to_python(dim_names, sym_names)}) <= {r.hi})" for e, r in items]
    source = f"def _p({', '.join(arg_names)}):\n    return {' and '.join(parts) or 'True'}\n"
    scope: dict[str, Any] = {}
    exec(compile(source, "<constraints>", "exec"), scope)
    return scope["_p"]


def _slot_name(slot: int, num_dims: int) -> str:
    return f"_d{slot}" if slot < num_dims else f"_s{slot - num_dims}"


def _single_variable_checker(items, slot: int, num_dims: int, num_symbols: int):
    return _compiled_predicate(tuple(items), (_slot_name(slot, num_dims),), num_dims, num_symbols)


def _subset_checker(items, slots: Sequence[int], num_dims: int, num_symbols: int):
    names = tuple(_slot_name(s, num_dims) for s in slots)
    return _compiled_predicate(tuple(items), names, num_dims, num_symbols)


@lru_cache(maxsize=2048)
def _simplify_map(m: IndexingMap, names: tuple = ()) -> IndexingMap:
    # `names` (and runtime variables' descriptions) is part of the cache key only: maps that
    # differ in those alone compare equal.
    if m.known_empty:
        return m
    domain = _Domain(m)
    for _ in range(_MAX_ROUNDS):
        before = domain.snapshot()
        if not domain.round():
            return _empty_like(m)
        if domain.snapshot() != before:
            continue
        # Interval reasoning is stable; enumerate what is small enough, and go again if it helped.
        if not domain.exact():
            return _empty_like(m)
        if domain.snapshot() == before:
            break
    env = domain.env(with_constraints=True)
    results = tuple(simplify_expr(e, env) for e in m.results)
    n, r = m.num_dims, len(m.range_vars)
    bounds = domain.bounds
    return IndexingMap(
        results,
        tuple(Variable(b, v.name) for v, b in zip(m.dims, bounds[:n])),
        tuple(Variable(b, v.name) for v, b in zip(m.range_vars, bounds[n : n + r])),
        tuple(RuntimeVar(b, v.hlo, v.access, v.name) for v, b in zip(m.rt_vars, bounds[n + r :])),
        tuple(domain.constraints.items()),
    )


def _empty_like(m: IndexingMap) -> IndexingMap:
    return IndexingMap(m.results, m.dims, m.range_vars, m.rt_vars, (), known_empty=True)
