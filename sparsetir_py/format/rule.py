"""`FormatRewriteRule`: one part of a format decomposition, as in SparseTIR.

    rule = sp.FormatRewriteRule(
        "b4",                                       # name: suffix of every new parameter, axis, buffer
        bsr.specialize({"block_size": 4}),          # new_format_desc: axes and sparse buffers only
        ["A"],                                      # buffers_to_rewrite
        ["I", "J"],                                 # axes_before_rewrite
        ["IO", "JO", "II", "JI"],                   # axes_after_rewrite
        {"I": ["IO", "II"], "J": ["JO", "JI"]},     # axis_map
        lambda i, j: (i // 4, j // 4, i % 4, j % 4),          # idx_map: old coordinates -> new
        lambda io, jo, ii, ji: (io * 4 + ii, jo * 4 + ji))    # inv_idx_map: new -> old

The eight fields keep SparseTIR's names and order. Index maps are Python callables or
`sparsetir_py.arith` indexing maps; a callable is traced once on symbolic dimensions (as TVM's
`IndexMap.from_func`), so it must be affine with `//` and `%` by constants (Python or numpy
integers). Everything that can be checked without the function being rewritten is checked here,
with a `FormatError` naming the rule and the field; `decompose_format` checks the rest (that the
axes and buffers exist there, dtypes).

`inv_idx_map` must undo `idx_map`: the computation of a part reads its values at the old
coordinates `inv_idx_map` gives, while its arrays are built through `idx_map`. The composition is
simplified symbolically; when it is not the identity, a small grid of coordinates is searched for
one that does not come back (a `FormatError` naming it), and what neither settles is checked on
the stored coordinates of every matrix converted (`sp.format.convert`, which `sp.ops` and
`sp.format.decompose` go through).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..arith import AffineExpr, IndexingMap, const, dim
from ..errors import FormatError
from ..ir.buffer import SparseBuffer
from ..ir.expr import Var
from ..ir.func import PrimFunc
from ..ir.stmt import SparseIteration
from ..ir.visit import walk


@dataclass(frozen=True)
class TracedMap:
    """An index map as affine expressions over `d0 .. d<arity-1>` (and the callable, if any)."""

    arity: int
    results: tuple[AffineExpr, ...]
    fn: Callable[..., Sequence] | None = None

    def __str__(self) -> str:
        dims = ", ".join(f"d{k}" for k in range(self.arity))
        return f"({dims}) -> ({', '.join(str(r) for r in self.results)})"

    def evaluate(self, coords: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The map applied to arrays of coordinates (one int64 array per dimension, all of one
        shape): the traced expressions, as the decomposed kernels compute them."""
        shape = np.shape(coords[0]) if coords else ()
        dims = [np.asarray(c, dtype=np.int64) for c in coords]
        return [np.broadcast_to(np.asarray(r.evaluate(dims), dtype=np.int64), shape) for r in self.results]


IndexMapLike = Callable[..., Sequence] | IndexingMap | TracedMap


@dataclass(frozen=True, eq=False)
class FormatRewriteRule:
    """One part of a format decomposition: which buffers move to which new format, how.

    Frozen: a rule is checked once, when it is made, and shared by every decomposition that uses
    it; a changed rule is a new one (`replace`, `with_buffer`), checked again. Compared by
    identity, as the rules of a format are (kernels are cached by the rules' names)."""

    name: str
    new_format_desc: PrimFunc
    buffers_to_rewrite: Sequence[str]
    axes_before_rewrite: Sequence[str]
    axes_after_rewrite: Sequence[str]
    axis_map: Mapping[str, Sequence[str]]
    idx_map: IndexMapLike
    inv_idx_map: IndexMapLike
    #: `converter(A) -> {renamed parameter: argument}`: the rule file's `convert` for this rule
    #: (`sp.format.convert` uses it); None for a rule written by hand (the arrays are inferred).
    converter: Callable[..., dict] | None = None
    #: Scalar parameters of the new format that are the decomposed function's parameters of the
    #: same name, not renamed (`("m", "n")`: the part's rows and columns are A's, so its axes have
    #: the very lengths of the old ones and its computation needs no guard that a coordinate lies
    #: in the old shape). Its converter still gives them renamed, for the checks.
    shared_params: Sequence[str] = ()
    #: True when `inv_idx_map(idx_map(p)) == p` simplifies to the identity; otherwise no small
    #: coordinate contradicts it, and `sp.format.convert` checks every matrix's coordinates.
    inverse_proven: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        name, new_format_desc, axis_map = self.name, self.new_format_desc, self.axis_map
        # The name is only ever a suffix (`A_4`, `IO_0_0`), so SparseTIR's names ("4", "0_0") are fine.
        if not isinstance(name, str) or not name or not f"x_{name}".isidentifier():
            raise FormatError(
                "FormatRewriteRule: the name must be a non-empty suffix that keeps names identifiers "
                f'(`A_<name>`: letters, digits and underscores, as "4", "0_0" or "bsr_4"), got {name!r}'
            )
        if not isinstance(new_format_desc, PrimFunc):
            raise FormatError(
                f"rule `{name}`: new_format_desc must be a PrimFunc (a @T.prim_func declaring axes and sparse "
                f"buffers), got {type(new_format_desc).__name__}"
            )
        if any(isinstance(n, SparseIteration) for n in walk(new_format_desc.body)):
            raise FormatError(f"rule `{name}`: new_format_desc declares a format: axes and buffers, no iterations")
        scalars = {p.name for p in new_format_desc.params if p.dtype != "handle"}
        shared = _names(name, "shared_params", self.shared_params) if self.shared_params else ()
        unknown = [p for p in shared if p not in scalars]
        if unknown:
            raise FormatError(
                f"rule `{name}`: shared_params names {_listed(unknown)}, "
                f"not scalar parameters of `{new_format_desc.name}`"
            )
        object.__setattr__(self, "shared_params", tuple(shared))
        if self.converter is not None and not callable(self.converter):
            raise FormatError(f"rule `{name}`: converter must be callable, got {type(self.converter).__name__}")
        fields = {
            "buffers_to_rewrite": _names(name, "buffers_to_rewrite", self.buffers_to_rewrite),
            "axes_before_rewrite": _names(name, "axes_before_rewrite", self.axes_before_rewrite),
            "axes_after_rewrite": _names(name, "axes_after_rewrite", self.axes_after_rewrite),
        }
        if not isinstance(axis_map, Mapping):
            raise FormatError(
                f"rule `{name}`: axis_map must be a dict (old axis -> list of new axes), got {type(axis_map).__name__}"
            )
        for k in axis_map:
            if not isinstance(k, str):
                raise FormatError(f"rule `{name}`: axis_map's keys must be axis names, got {k!r}")
        fields["axis_map"] = {k: _names(name, f"axis_map[{k!r}]", v) for k, v in axis_map.items()}
        for key, value in fields.items():
            object.__setattr__(self, key, value)
        self._check_format()
        self._check_axis_map()
        before, after = len(self.axes_before_rewrite), len(self.axes_after_rewrite)
        object.__setattr__(self, "idx_map", trace(name, "idx_map", self.idx_map, before, after))
        object.__setattr__(self, "inv_idx_map", trace(name, "inv_idx_map", self.inv_idx_map, after, before))
        object.__setattr__(self, "inverse_proven", self._check_inverse())

    def replace(self, **changes) -> FormatRewriteRule:
        """A copy with `changes` (any of the fields), checked as a new rule."""
        return dataclasses.replace(self, **changes)

    def with_buffer(self, name: str, like: str) -> FormatRewriteRule:
        """The rule with one more buffer `name` moved to the new format, over the same axes as
        `like` (a buffer the rule rewrites) and with data of its own (a parameter named after
        it): SDDMM's output `C` takes the format of its input `A`."""
        if like not in self.buffers_to_rewrite:
            raise FormatError(f"rule `{self.name}`: with_buffer({name!r}, like={like!r}): `{like}` is not rewritten")
        desc = self.new_format_desc
        template = self.new_buffer(like)
        data = Var(name.lower(), "handle")
        desc = desc.replace(
            params=(*desc.params, data), buffers=(*desc.buffers, template.replace(name=name, data=data))
        )
        return self.replace(new_format_desc=desc, buffers_to_rewrite=(*self.buffers_to_rewrite, name))

    def __repr__(self) -> str:
        return (
            f"FormatRewriteRule({self.name!r}, {self.new_format_desc.name}, {list(self.buffers_to_rewrite)}, "
            f"{list(self.axes_before_rewrite)} -> {list(self.axes_after_rewrite)}, idx_map {self.idx_map})"
        )

    # ---------------------------------------------------------------- the new format's parts
    def new_axis(self, axis_name: str):
        return next(a for a in self.new_format_desc.axes if a.name == axis_name)

    def new_buffer(self, buffer_name: str) -> SparseBuffer:
        return next(b for b in self.new_format_desc.buffers if b.name == buffer_name)

    def _check_format(self) -> None:
        desc = self.new_format_desc
        for attribute in ("buffers_to_rewrite", "axes_before_rewrite", "axes_after_rewrite"):
            names = getattr(self, attribute)
            if not names:
                raise FormatError(f"rule `{self.name}`: {attribute} is empty; it names at least one")
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise FormatError(f"rule `{self.name}`: {attribute} repeats {_listed(repeated)}")
        axis_names = [a.name for a in desc.axes]
        for a in self.axes_after_rewrite:
            if a not in axis_names:
                raise FormatError(
                    f"rule `{self.name}`: axes_after_rewrite names `{a}`, which `{desc.name}` does not declare "
                    f"(it declares {_listed(axis_names)})"
                )
        buffer_names = [b.name for b in desc.buffers if isinstance(b, SparseBuffer)]
        for b in self.buffers_to_rewrite:
            if b not in buffer_names:
                raise FormatError(
                    f"rule `{self.name}`: buffers_to_rewrite names `{b}`, but `{desc.name}` declares no sparse buffer "
                    f"of that name (it declares {_listed(buffer_names)}); the new format declares the rewritten "
                    "buffer under its own name"
                )
            # The part's computation iterates axes_after_rewrite and reads the buffer by those
            # iterators: an axis of one and not the other would drop or repeat values.
            axes = [a.name for a in self.new_buffer(b).axes]
            if sorted(axes) != sorted(self.axes_after_rewrite):
                raise FormatError(
                    f"rule `{self.name}`: `{b}` of `{desc.name}` is over {_listed(axes)}, but axes_after_rewrite is "
                    f"{_listed(self.axes_after_rewrite)}; the rewritten buffer is over exactly the new axes"
                )

    def _check_axis_map(self) -> None:
        before, after = set(self.axes_before_rewrite), set(self.axes_after_rewrite)
        missing = [a for a in self.axes_before_rewrite if a not in self.axis_map]
        if missing:
            raise FormatError(f"rule `{self.name}`: axis_map does not cover axes_before_rewrite {_listed(missing)}")
        extra = [a for a in self.axis_map if a not in before]
        if extra:
            raise FormatError(
                f"rule `{self.name}`: axis_map maps {_listed(extra)}, which are not in axes_before_rewrite"
            )
        targets = [t for ts in self.axis_map.values() for t in ts]
        unknown = [t for t in targets if t not in after]
        if unknown:
            raise FormatError(f"rule `{self.name}`: axis_map maps to {_listed(unknown)}, not in axes_after_rewrite")
        uncovered = [a for a in self.axes_after_rewrite if a not in targets]
        if uncovered:
            raise FormatError(f"rule `{self.name}`: no axis of axes_before_rewrite maps to {_listed(uncovered)}")

    def _check_inverse(self) -> bool:
        """Whether `inv_idx_map(idx_map(p)) == p` is proven symbolically; a `FormatError` naming a
        coordinate where it fails, when a small one does."""
        arity = len(self.axes_before_rewrite)
        composed = [r.substitute(dims=list(self.idx_map.results)) for r in self.inv_idx_map.results]
        if all(c == dim(k) for k, c in enumerate(composed)):
            return True
        side = max(2, min(16, int(4096 ** (1 / arity))))
        grid = [g.reshape(-1) for g in np.meshgrid(*[np.arange(side, dtype=np.int64)] * arity, indexing="ij")]
        back = TracedMap(arity, tuple(composed)).evaluate(grid)
        wrong = np.zeros(len(grid[0]), bool)
        for g, b in zip(grid, back):
            wrong |= g != b
        if wrong.any():
            k = int(np.argmax(wrong))
            raise self.not_inverse(tuple(int(g[k]) for g in grid))
        return False

    def not_inverse(self, point: tuple[int, ...]) -> FormatError:
        """The error for a coordinate `point` that `inv_idx_map` does not bring back."""
        new = tuple(int(c) for c in (r.evaluate(list(point)) for r in self.idx_map.results))
        back = tuple(int(c) for c in (r.evaluate(list(new)) for r in self.inv_idx_map.results))
        return FormatError(
            f"rule `{self.name}`: inv_idx_map does not undo idx_map: idx_map{_point(point)} = {_point(new)}, but "
            f"inv_idx_map{_point(new)} = {_point(back)}; a part would compute at other coordinates than those it "
            f"stores (idx_map {self.idx_map}, inv_idx_map {self.inv_idx_map})"
        )

    def source_axis(self, new_axis_name: str) -> str:
        """The old axis that `axis_map` maps to `new_axis_name` (the first, if several)."""
        return next(old for old, news in self.axis_map.items() if new_axis_name in news)


def trace(rule: str, field: str, fn: IndexMapLike, arity: int, results: int) -> TracedMap:
    """An index map as affine expressions: an `IndexingMap` as is, a callable run on `d0, d1, ...`
    (a map traced already, as another rule holds it, is taken as it is)."""
    if isinstance(fn, TracedMap):
        if fn.arity != arity or len(fn.results) != results:
            raise FormatError(f"rule `{rule}`: {field} must map {arity} coordinates to {results}, got {fn}")
        return fn
    if isinstance(fn, IndexingMap):
        if fn.num_dims != arity or fn.num_results != results or fn.num_symbols:
            raise FormatError(
                f"rule `{rule}`: {field} must map {arity} coordinates to {results} with no symbols, got {fn}"
            )
        return TracedMap(arity, tuple(fn.results))
    if not callable(fn):
        raise FormatError(f"rule `{rule}`: {field} must be a callable or an arith.IndexingMap, got {type(fn).__name__}")
    coords = [Coordinate(dim(k)) for k in range(arity)]
    try:
        inspect.signature(fn).bind(*coords)
    except TypeError as e:
        raise FormatError(f"rule `{rule}`: {field} must take {arity} coordinates: {e}") from None
    except ValueError:  # a builtin without a signature: calling it tells
        pass
    try:
        out = fn(*coords)
    except Exception as e:  # a non-affine operation on the symbolic coordinates
        raise FormatError(
            f"rule `{rule}`: {field} must be affine in its coordinates (+, -, * and // or % by constants): {e}"
        ) from None
    out = tuple(out) if isinstance(out, list | tuple) else (out,)
    if len(out) != results:
        raise FormatError(f"rule `{rule}`: {field} must return {results} coordinates, got {len(out)}")
    exprs = []
    for r in out:
        r = r.expr if isinstance(r, Coordinate) else r
        if isinstance(r, bool | np.bool_) or not isinstance(r, int | np.integer | AffineExpr):
            raise FormatError(f"rule `{rule}`: {field} returned {r!r}, not an affine expression of its coordinates")
        exprs.append(r if isinstance(r, AffineExpr) else const(int(r)))
    return TracedMap(arity, tuple(exprs), fn)


class Coordinate:
    """A symbolic coordinate handed to an index-map callable while it is traced: an affine
    expression that also takes numpy integers as constants (a parameter of a rule file is often
    one). Anything but `+ - * // %` with integers is not affine and fails."""

    __slots__ = ("expr",)
    __array_ufunc__ = None  # numpy scalars defer to the methods below

    def __init__(self, expr: AffineExpr):
        self.expr = expr

    def __repr__(self) -> str:
        return str(self.expr)

    def __add__(self, other):
        return Coordinate(self.expr + _operand(other))

    __radd__ = __add__

    def __sub__(self, other):
        return Coordinate(self.expr - _operand(other))

    def __rsub__(self, other):
        return Coordinate(_operand(other) - self.expr)

    def __mul__(self, other):
        return Coordinate(self.expr * _operand(other))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return Coordinate(self.expr.floordiv(_operand(other)))

    def __mod__(self, other):
        return Coordinate(self.expr.mod(_operand(other)))

    def __neg__(self):
        return Coordinate(-self.expr)

    def __pos__(self):
        return self


def _operand(value) -> AffineExpr | int:
    if isinstance(value, Coordinate):
        return value.expr
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer | AffineExpr):
        raise TypeError(f"{value!r} is not an integer or a coordinate")
    return value if isinstance(value, AffineExpr) else int(value)


def _names(rule: str, field: str, value) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise FormatError(f"rule `{rule}`: {field} must be a list of names, got {value!r}")
    return tuple(value)


def _point(p: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(c)) for c in p) + ")"


def _listed(names) -> str:
    return ", ".join(f"`{n}`" for n in names) or "nothing"
