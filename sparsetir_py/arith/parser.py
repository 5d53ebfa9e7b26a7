"""The text form of indexing maps, affine maps and affine expressions (XLA's notation).

```
(d0, d1)[s0]{rt0} -> (d0 + s0, d1 floordiv 2 + rt0), domain: d0 in [0, 9], d1 in [0, 19],
    s0 in [0, 4], rt0 in [0, 3], d0 + s0 in [0, 10]
```

Intervals are read by position: the first one per dimension, then one per symbol (range
variables, then runtime variables), the rest are constraints. Entries are separated by commas
or newlines. Also accepted, for the examples of XLA's documentation: `floorDiv`, juxtaposed
coefficients (`16d0`), `ceildiv`, `//` and `%`, negative divisors, a domain without the comma
before `domain:`, and symbols followed by `hlo: <producer>` plus an access map on the next line,
which makes them runtime variables.

Hostile text is refused with an `IndexingMapError` at the offending place, in time linear in the
text: parentheses, and `floordiv`/`mod`/`ceildiv` applied to one another, nest at most
MAX_NESTING deep; integer literals, and the constants, coefficients and divisors of every
expression's canonical form, fit int64; chains (`a + b + ...`, `- - d0`, `d0 * 2 * 2`) are read by
loops. `AffineParser` with `MLIR_SYNTAX` reads the level expressions of `parse_encoding` (in
`format.mlir`), with the same limits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

from .affine import AffineExpr, Interval, affine_sum, const, dim, largest_constant, symbol
from .errors import IndexingMapError
from .indexing_map import AffineMap, IndexingMap, RuntimeVar, Variable

__all__ = [
    "INT64_MAX",
    "MAX_NESTING",
    "MLIR_SYNTAX",
    "XLA_SYNTAX",
    "AffineParser",
    "Syntax",
    "Token",
    "fits_int64",
    "parse_affine_expr",
    "parse_affine_map",
    "parse_indexing_map",
]

#: The largest integer the text may hold, and every constant, coefficient and divisor of an
#: expression's canonical form: XLA and MLIR keep them in int64.
INT64_MAX = 2**63 - 1
#: How deep parentheses, and `floordiv`/`mod`/`ceildiv` applied to one another, may nest. The
#: parser recurses on parentheses and the canonical form on nested divisions; real maps nest two
#: or three deep.
MAX_NESTING = 64

_MUL_OPS = {"*", "floordiv", "mod", "ceildiv", "//", "%"}
_DIVISIONS = {"floordiv": "floordiv", "//": "floordiv", "mod": "mod", "%": "mod", "ceildiv": "ceildiv"}
_OPERATOR_WORDS = ("floordiv", "mod", "ceildiv")
#: How much of a name or a piece of text a message quotes.
_QUOTED = 40


@dataclass(frozen=True)
class Syntax:
    """The tokens of one notation. XLA's indexing maps and MLIR's `#sparse_tensor.encoding` share
    the affine-expression grammar of `AffineParser` but spell the text around it differently."""

    #: One token (after the blanks); its group names the kind: `int`, `ident`, `string`, else an
    #: operator or punctuation (`op`).
    token: re.Pattern
    #: What separates tokens (MLIR: blanks and `//` comments).
    blanks: re.Pattern
    #: Words that are never variables.
    keywords: frozenset[str]
    #: `floorDiv` reads as `floordiv` and the operator words lex as operators (XLA's documentation);
    #: otherwise they stay identifiers that the grammar reads as operators (MLIR).
    fold_operator_case: bool = False
    #: `16d0` is `16 * d0` (XLA's documentation).
    juxtaposed_coefficients: bool = False


#: XLA's notation: `//` and `%` are divisions, `floorDiv` and `16d0` are read.
XLA_SYNTAX = Syntax(
    token=re.compile(
        r"(?P<int>[0-9]+)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<arrow>->)|(?P<floordiv>//)"
        r"|(?P<punct>[()\[\]{},:+\-*%])"
    ),
    blanks=re.compile(r"\s*"),
    keywords=frozenset({"domain", "in", "floordiv", "mod", "ceildiv", "hlo", "is_simplified"}),
    fold_operator_case=True,
    juxtaposed_coefficients=True,
)
#: MLIR's notation: `//` starts a comment, strings are quoted, names may hold `$`.
MLIR_SYNTAX = Syntax(
    token=re.compile(
        r"(?P<int>[0-9]+)|(?P<ident>[A-Za-z_][A-Za-z0-9_$]*)|(?P<string>\"[^\"\n]*\")"
        r"|(?P<arrow>->)|(?P<punct>[()\[\]{}<>,:=*+\-?#.])"
    ),
    blanks=re.compile(r"(?:\s|//[^\n]*)*+"),  # possessive: no backtracking
    keywords=frozenset(_OPERATOR_WORDS),
)


def fits_int64(digits: str) -> bool:
    """Whether a decimal literal fits int64, decided before `int()` converts it (which is quadratic
    in the number of digits and refuses more than a few thousand)."""
    digits = digits.lstrip("0")
    return len(digits) < 19 or (len(digits) == 19 and int(digits) <= INT64_MAX)


def _cut(text: str) -> str:
    """`text`, cut to its start when it is long: messages quote names and pieces of the text."""
    if len(text) <= _QUOTED:
        return text
    return f"{text[: _QUOTED // 2]}... ({len(text)} characters)"


def _quote(text: str) -> str:
    return f"`{_cut(text)}`"


class Token(NamedTuple):
    kind: str  # "int", "ident", "string", "op" (punctuation and operator keywords), "eof"
    text: str
    start: int
    end: int


class AffineParser:
    """A recursive-descent reader of affine expressions over a text in one `Syntax`: the tokens
    (`token`, `peek`, `advance`, `accept`, `expect`) and the expression grammar (`expr`). The
    indexing-map functions below use it as it is; `format.mlir`'s encoding parser extends it with
    MLIR's attribute grammar and overrides the hooks where its messages are worded differently
    (`fail`, `describe`, the class constants and `check_divisor`, `unknown_variable`, ...).

    `start`/`stop` read a piece of `source` (a quoted level type), so that errors point into the
    whole text."""

    #: How an "expected ..." message reads.
    EXPECTED = "expected {what}, got {found}"
    #: What `primary` expects, and the `)` that closes a parenthesised expression.
    AN_EXPRESSION = "an expression"
    CLOSING_PAREN = "`)`"
    #: Check every sum's canonical form (parenthesised ones too) for int64, at its start; when
    #: False the caller checks the whole expression once (`check_canonical`).
    CHECK_EVERY_SUM = True
    #: The parts of a canonical form named in its int64 message.
    CANONICAL_PARTS = "a constant, coefficient or divisor"
    #: Fold a product's constant operands into its scale as they come (`2 * 3 * x`: 2, then 6),
    #: so that the factor whose product leaves int64 is the one named; when False a leading
    #: constant is folded only when a variable follows.
    FOLD_CONSTANTS = False

    def __init__(self, source: str, what: str, syntax: Syntax = XLA_SYNTAX, start: int = 0, stop: int | None = None):
        self.source = source
        self.what = what
        self.syntax = syntax
        self.stop = len(source) if stop is None else stop
        self.nesting = 0  # open parentheses in the expression being read
        self.previous: Token | None = None
        self.token = self.lex(start)

    # -- lexing ---------------------------------------------------------------------------------

    def lex(self, pos: int) -> Token:
        """The token after the blanks at `pos`."""
        syntax = self.syntax
        pos = syntax.blanks.match(self.source, pos, self.stop).end()
        if pos >= self.stop:
            return Token("eof", "", self.stop, self.stop)
        m = syntax.token.match(self.source, pos, self.stop)
        if m is None:
            self.fail(f"unexpected character {self.source[pos]!r}", pos)
        start, end = m.span()
        text = m.group()
        kind = m.lastgroup
        if kind == "int":
            if not fits_int64(text):
                shown = text if len(text) <= _QUOTED else f"{text[: _QUOTED // 2]}... ({len(text)} digits)"
                self.fail(f"the integer {shown} does not fit a 64-bit integer (at most {INT64_MAX})", start)
            return Token("int", text, start, end)
        if kind == "ident" and syntax.fold_operator_case and text.lower() in _OPERATOR_WORDS:
            return Token("op", text.lower(), start, end)
        return Token(kind if kind in ("ident", "string") else "op", text, start, end)

    def peek(self) -> Token:
        """The token after the current one (nothing consumed)."""
        return self.lex(self.token.end)

    def advance(self) -> Token:
        token = self.token
        self.previous = token
        self.token = self.lex(token.end)
        return token

    def at(self, text: str) -> bool:
        return self.token.kind in ("op", "ident") and self.token.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> Token:
        if not self.at(text):
            self.expected(what or f"`{text}`")
        return self.advance()

    def describe(self, token: Token | None = None) -> str:
        token = token or self.token
        return "the end of the text" if token.kind == "eof" else _quote(token.text)

    def expected(self, what: str, token: Token | None = None) -> NoReturn:
        token = token or self.token
        self.fail(self.EXPECTED.format(what=what, found=self.describe(token)), token.start)

    def fail(self, message: str, pos: int | None = None) -> NoReturn:
        pos = self.token.start if pos is None else pos
        raise IndexingMapError(f"cannot parse {self.what}: {message}", self.source, pos)

    def rest_of_line(self, start: int) -> str:
        """The raw text from `start` to the end of its line; parsing continues after it."""
        end = self.source.find("\n", start)
        end = len(self.source) if end < 0 else end
        self.token = self.lex(end)
        return self.source[start:end].strip()

    # -- pieces ---------------------------------------------------------------------------------

    def names(self, open_: str, close: str) -> list[str]:
        self.expect(open_)
        names: list[str] = []
        if self.accept(close):
            return names
        seen: set[str] = set()
        while True:
            if self.token.kind != "ident" or self.token.text in self.syntax.keywords:
                self.expected("a variable name")
            name = self.advance().text
            if name in seen:
                self.fail(f"variable {_quote(name)} is declared twice")
            seen.add(name)
            names.append(name)
            if self.accept(close):
                return names
            self.expect(",")

    def signed_int(self) -> int:
        negative = self.accept("-")
        if self.token.kind != "int":
            self.expected("an integer")
        value = int(self.advance().text.lstrip("0") or "0")
        return -value if negative else value

    def interval(self) -> Interval:
        self.expect("[")
        lo = self.signed_int()
        self.expect(",")
        hi = self.signed_int()
        self.expect("]")
        return Interval(lo, hi)

    # -- expressions ----------------------------------------------------------------------------
    # Each piece returns its value and its depth: how many divisions (`floordiv`, `mod`,
    # `ceildiv`) nest in it. Only parentheses recurse, and `self.nesting` bounds them.

    def expr(self, scope: dict[str, AffineExpr]) -> AffineExpr:
        return self.sum(scope)[0]

    def sum(self, scope: dict[str, AffineExpr]) -> tuple[AffineExpr, int]:
        """`term (('+' | '-') term)*`, added up once (see `affine_sum`); the canonical form must
        fit int64 (checked here when CHECK_EVERY_SUM)."""
        start = self.token.start
        first, depth = self.term(scope)
        summands = [first]
        while self.at("+") or self.at("-"):
            negative = self.advance().text == "-"
            rhs, rhs_depth = self.term(scope)
            summands.append(-rhs if negative else rhs)
            depth = max(depth, rhs_depth)
        result = affine_sum(summands)
        if self.CHECK_EVERY_SUM:
            self.check_canonical(result, start)
        return result, depth

    def check_canonical(self, e: AffineExpr, start: int) -> AffineExpr:
        """`e`, whose every constant, coefficient and divisor (nested ones too) must fit int64."""
        largest = largest_constant(e)
        if largest > INT64_MAX:
            self.fail(
                f"the expression holds {largest} ({self.CANONICAL_PARTS} of its canonical form), "
                f"which does not fit a 64-bit integer (at most {INT64_MAX})",
                start,
            )
        return e

    def term(self, scope: dict[str, AffineExpr]) -> tuple[AffineExpr, int]:
        """`unary (('*' | 'floordiv' | 'mod' | 'ceildiv' | '//' | '%') unary)*`, left to right.
        Constant factors gather in `scale` (which must fit int64), applied once before a division
        and at the end, so that `x * 2 * 2 ...` rescales `x` once."""
        acc, depth = self.unary(scope)
        scale = 1
        if self.FOLD_CONSTANTS and acc.is_constant:
            scale, acc = acc.constant, const(1)
        while self.token.kind in ("op", "ident") and self.token.text in _MUL_OPS:
            op_token = self.advance()
            rhs, rhs_depth = self.unary(scope)
            depth = max(depth, rhs_depth)
            if op_token.text == "*":
                if rhs.is_constant:
                    scale = self.checked_scale(scale * rhs.constant, op_token)
                elif acc.is_constant:
                    scale, acc = self.checked_scale(scale * acc.constant, op_token), rhs
                else:
                    self.non_affine_product(acc.scale(scale), rhs, op_token)
                continue
            depth += 1
            if depth > MAX_NESTING:
                self.fail(
                    f"the expression is nested deeper than {MAX_NESTING} levels of `floordiv`, `ceildiv` and `mod`",
                    op_token.start,
                )
            self.check_divisor(op_token, rhs)
            acc = self.divide(op_token, acc.scale(scale), rhs.constant)
            scale = 1
            if self.FOLD_CONSTANTS and acc.is_constant:
                scale, acc = acc.constant, const(1)
        return acc.scale(scale), depth

    def non_affine_product(self, lhs: AffineExpr, rhs: AffineExpr, op_token: Token) -> NoReturn:
        self.fail(
            f"non-affine product {_quote(str(lhs))} * {_quote(str(rhs))}: one side must be a constant", op_token.start
        )

    def checked_scale(self, value: int, op_token: Token) -> int:
        if abs(value) > INT64_MAX:
            self.fail(
                f"the product of the constant factors does not fit a 64-bit integer (at most {INT64_MAX})",
                op_token.start,
            )
        return value

    def check_divisor(self, op_token: Token, rhs: AffineExpr) -> None:
        """XLA's divisors: any constant but zero."""
        if not rhs.is_constant:
            self.fail(f"the divisor of `{op_token.text}` must be a constant, got {_quote(str(rhs))}", op_token.start)
        if rhs.constant == 0:
            self.fail(f"division by zero in `{op_token.text}`", op_token.start)

    @staticmethod
    def divide(op_token: Token, lhs: AffineExpr, divisor: int) -> AffineExpr:
        op = _DIVISIONS[op_token.text]
        if op == "floordiv":
            return lhs.floordiv(divisor)
        if op == "mod":
            return lhs.mod(divisor)
        return lhs.ceildiv(divisor)

    def unary(self, scope: dict[str, AffineExpr]) -> tuple[AffineExpr, int]:
        """`'-'* primary`: the signs are counted in a loop (`- - d0` is `d0`)."""
        negative = False
        while self.accept("-"):
            negative = not negative
        value, depth = self.primary(scope)
        return (-value if negative else value), depth

    def primary(self, scope: dict[str, AffineExpr]) -> tuple[AffineExpr, int]:
        token = self.token
        keywords = self.syntax.keywords
        if token.kind == "int":
            self.advance()
            value = const(int(token.text.lstrip("0") or "0"))  # leading zeros count against int()'s limit
            # `16d0` in XLA's documentation: a coefficient written against its variable.
            juxtaposed = self.token.kind == "ident" and self.token.start == token.end
            if juxtaposed and self.syntax.juxtaposed_coefficients and self.token.text not in keywords:
                return value * self.variable(scope), 0
            return value, 0
        if token.kind == "ident" and token.text not in keywords:
            return self.variable(scope), 0
        if self.accept("("):
            self.nesting += 1
            if self.nesting > MAX_NESTING:
                self.fail(f"the expression is nested deeper than {MAX_NESTING} levels of parentheses", token.start)
            inner = self.sum(scope)
            self.expect(")", self.CLOSING_PAREN)
            self.nesting -= 1
            return inner
        self.expected(self.AN_EXPRESSION)

    def variable(self, scope: dict[str, AffineExpr]) -> AffineExpr:
        if self.token.kind != "ident" or self.token.text in self.syntax.keywords:
            self.expected("a variable")
        if self.token.text not in scope:
            self.fail(self.unknown_variable(self.token.text, scope))
        return scope[self.advance().text]

    def unknown_variable(self, name: str, scope: dict[str, AffineExpr]) -> str:
        return f"unknown variable {_quote(name)}"

    def results(self, scope: dict[str, AffineExpr]) -> list[AffineExpr]:
        self.expect("(")
        exprs: list[AffineExpr] = []
        if self.accept(")"):
            return exprs
        while True:
            exprs.append(self.expr(scope))
            if self.accept(")"):
                return exprs
            self.expect(",")

    def affine_map_tail(self, dim_names: list[str], sym_names: list[str]) -> AffineMap:
        scope = _scope(dim_names, sym_names)
        self.expect("->")
        return AffineMap(len(dim_names), len(sym_names), tuple(self.results(scope)))

    def try_access_map(self) -> AffineMap | None:
        """An affine map `(d0, ...)[...] -> (...)` if one starts here, else None (nothing consumed)."""
        saved = (self.previous, self.token)
        try:
            dims = self.names("(", ")")
            syms = self.names("[", "]") if self.at("[") else []
            if not self.at("->"):
                raise IndexingMapError("not an access map")
        except IndexingMapError:
            self.previous, self.token = saved
            return None
        return self.affine_map_tail(dims, syms)


def _scope(dim_names: Sequence[str], sym_names: Sequence[str]) -> dict[str, AffineExpr]:
    scope = {name: dim(i) for i, name in enumerate(dim_names)}
    scope.update({name: symbol(j) for j, name in enumerate(sym_names)})
    return scope


def _default_name(name: str, prefix: str, index: int) -> str:
    return "" if name == f"{prefix}{index}" else name


def parse_indexing_map(text: str) -> IndexingMap:
    """Parse XLA's text form of an indexing map (see the module docstring).

    >>> m = parse_indexing_map("(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16), domain: d0 in [0, 6], d1 in [0, 14]")
    >>> str(m.simplify())
    '(d0, d1) -> (d0, d1), domain: d0 in [0, 6], d1 in [0, 14]'
    """
    p = AffineParser(text, "indexing map")
    dim_names = p.names("(", ")")
    range_names = p.names("[", "]") if p.at("[") else []
    rt_names = p.names("{", "}") if p.at("{") else []
    sym_names = range_names + rt_names
    scope = _scope(dim_names, sym_names)
    p.expect("->")
    results = p.results(scope)
    p.accept(",")
    variables = dim_names + sym_names
    if not p.accept("domain"):
        if variables:
            listed = ", ".join(_cut(v) for v in variables[:8])
            listed += f", ... ({len(variables)} in all)" if len(variables) > 8 else ""
            p.fail(f"expected `domain:` with the intervals of {listed}, got {p.describe()}")
        _finish(p)
        return IndexingMap(tuple(results))
    p.expect(":")
    intervals: list[Interval] = []
    rt_info: dict[int, tuple[str, AffineMap | None]] = {}
    constraints: list[tuple[AffineExpr, Interval]] = []
    while p.token.kind != "eof" and not p.at("is_simplified"):
        start = p.token.start
        e = p.expr(scope)
        p.expect("in")
        rng = p.interval()
        k = len(intervals)
        if k < len(variables):
            if e != scope[variables[k]]:
                got = _quote(p.source[start : p.token.start].strip())
                p.fail(
                    f"expected the interval of {_quote(variables[k])} (intervals are read by position: "
                    f"dimensions, then symbols, then constraints), got {got}",
                    start,
                )
            intervals.append(rng)
            if p.at("hlo"):
                if k < len(dim_names):
                    p.fail(f"`hlo:` describes a runtime variable, but {_quote(variables[k])} is a dimension")
                p.advance()
                colon = p.expect(":")
                hlo = p.rest_of_line(colon.end)
                rt_info[k - len(dim_names)] = (hlo, p.try_access_map())
        else:
            constraints.append((e, rng))
        p.accept(",")
    if len(intervals) < len(variables):
        p.fail(f"missing the interval of {_quote(variables[len(intervals)])}")
    _finish(p)
    num_dims = len(dim_names)
    # Symbols described with `hlo:` (XLA's documentation) are runtime variables; they must come last.
    doc_rt = sorted(j for j in rt_info if j < len(range_names))
    if doc_rt and doc_rt != list(range(len(range_names) - len(doc_rt), len(range_names))):
        raise IndexingMapError(
            "cannot parse indexing map: symbols with `hlo:` (runtime variables) must come after all range variables"
        )
    n_range = len(range_names) - len(doc_rt)
    dims = [Variable(intervals[i], _default_name(n, "d", i)) for i, n in enumerate(dim_names)]
    range_vars = [Variable(intervals[num_dims + j], _default_name(range_names[j], "s", j)) for j in range(n_range)]
    rt_vars = []
    for j in range(n_range, len(sym_names)):
        hlo, access = rt_info.get(j, ("", None))
        prefix, index = ("s", j) if j < len(range_names) else ("rt", j - len(range_names))
        name = _default_name(sym_names[j], prefix, index)
        rt_vars.append(RuntimeVar(intervals[num_dims + j], hlo, access, name))
    return IndexingMap(tuple(results), tuple(dims), tuple(range_vars), tuple(rt_vars), tuple(constraints))


def _finish(p: AffineParser) -> None:
    if p.accept("is_simplified"):
        p.expect(":")
        if p.token.kind != "ident" or p.token.text not in ("true", "false"):
            p.expected("`true` or `false`")
        p.advance()
    if p.token.kind != "eof":
        p.fail(f"unexpected {p.describe()}")


def parse_affine_map(text: str) -> AffineMap:
    """Parse `(d0, d1)[s0] -> (exprs)` (no domain)."""
    p = AffineParser(text, "affine map")
    dims = p.names("(", ")")
    syms = p.names("[", "]") if p.at("[") else []
    result = p.affine_map_tail(dims, syms)
    _finish(p)
    return result


def parse_affine_expr(
    text: str, dim_names: Sequence[str] | None = None, symbol_names: Sequence[str] | None = None
) -> AffineExpr:
    """Parse one expression. Without names, `d<i>` are dimensions and `s<j>` symbols."""
    p = AffineParser(text, "affine expression")
    if dim_names is None and symbol_names is None:
        scope = _AutoScope()
    else:
        scope = _scope(dim_names or (), symbol_names or ())
    e = p.expr(scope)
    _finish(p)
    return e


class _AutoScope(dict):
    """Resolves `d<i>` and `s<j>` on demand."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and re.fullmatch(r"[ds][0-9]+", name) is not None and fits_int64(name[1:])

    def __missing__(self, name: str) -> AffineExpr:
        index = int(name[1:])
        return dim(index) if name[0] == "d" else symbol(index)
