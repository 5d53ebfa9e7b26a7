"""MLIR's `#sparse_tensor.encoding`: level types, dim->level maps and index widths.

    enc = sp.parse_encoding("#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>")
    enc.level_types        # (LevelType('dense'), LevelType('compressed'))
    str(enc)               # the canonical text; parse_encoding(str(enc)) == enc

The grammar is MLIR's (see its SparseTensor dialect documentation):

    encoding  := [`#`alias `=`] `#sparse_tensor.encoding<{` entry (`,` entry)* `}>`
    entry     := `map` `=` dimlvlmap | `posWidth` `=` int | `crdWidth` `=` int
               | `lvlTypes` `=` `[` string, ... `]` | `dimToLvl` `=` `affine_map<...>`   (old spelling)
    dimlvlmap := [`[` symbol, ... `]`] [`{` levelvar, ... `}`] `(` dimspec, ... `)` `->` `(` lvlspec, ... `)`
    dimspec   := name [`:` `#sparse_tensor<slice(` offset `,` size `,` stride `)>`] | name `=` expr
    lvlspec   := [levelvar `=`] expr `:` lvltype
    lvltype   := (`dense` | `compressed` | `loose_compressed` | `singleton` | `block2_4`) [`(` prop, ... `)`]
               | `n_out_of_m(` n `,` m [`,` prop ...] `)` | `structured[` n `,` m `]`
    prop      := `nonunique` | `nonordered` | `soa` | `high`

Level expressions are `sparsetir_py.arith` affine expressions over the dimensions (`+`, `-`,
`*` by a constant, `floordiv`, `ceildiv`, `mod`); the one non-affine form is ELL's counting level
`c * K * i` (a symbol times the number of slices `K` times a dimension). The inverse map
(levels -> dimensions) is taken from the explicit form or derived for permutations and
`floordiv`/`mod` blocks, and checked: it must compose with the forward map to the identity.
The old spelling (`lvlTypes = ["dense", "compressed-nu"]`, also `lvlType` and `dimLevelType`,
with `dimToLvl`/`dimOrdering = affine_map<...>`, `pointerBitWidth`/`indexBitWidth`) is read too
and printed back in the `map = ...` form. `//` starts a comment.

Widths set the dtypes of the stored arrays: 0 is the native index type (int64), 8/16/32/64 the
signed integer of that width (the project's kernels index with signed integers). `crdWidth` may
also be 1, 2 or 4 (sub-byte coordinates, as in MLIR's 2:4 example): those are kept in int8
arrays and checked against the width.

Any text gives an encoding or an `EncodingError` at the offending position, in time linear in
its size (2000 dimensions, 37 KB: about 0.03 s). Every integer, written or computed (a
coefficient, constant or divisor of a level expression's canonical form, ELL's slice count)
must fit int64, as in MLIR. Parentheses, and `floordiv`/`ceildiv`/`mod` applied to one
another, nest at most MAX_NESTING (64) deep; chains (`a + b + ...`, `- - i`, `i * 2 * 2`) may
be as long as the text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ...arith.affine import AffineExpr, DimId, FloorDiv, Interval, Mod, const, dim, symbol
from ...arith.affine import largest_constant as affine_largest_constant
from ...arith.errors import IndexingMapError

# The limits of the text, shared with indexing maps: integers (and every coefficient, constant and
# divisor of a level expression) within int64, as MLIR keeps them; nesting at most MAX_NESTING.
from ...arith.parser import INT64_MAX, MAX_NESTING, fits_int64
from ...errors import EncodingError

__all__ = [
    "DimSlice",
    "LevelCounter",
    "LevelType",
    "SparseTensorEncoding",
    "parse_encoding",
]

LEVEL_FORMATS = ("dense", "compressed", "loose_compressed", "singleton", "n_out_of_m")
LEVEL_PROPERTIES = ("nonunique", "nonordered", "soa", "high")
POS_WIDTHS = (0, 8, 16, 32, 64)
CRD_WIDTHS = (0, 1, 2, 4, 8, 16, 32, 64)
_KEYS = (
    "map",
    "posWidth",
    "crdWidth",
    "lvlTypes",
    "lvlType",
    "dimLevelType",
    "dimToLvl",
    "dimOrdering",
    "pointerBitWidth",
    "indexBitWidth",
)
_MUL_OPS = ("*", "floordiv", "ceildiv", "mod")
_LEVEL_SPELLINGS = ("dense", "compressed", "loose_compressed", "singleton", "block2_4", "n_out_of_m", "structured")


# ---------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True, slots=True)
class LevelType:
    """One level's storage format and properties (`compressed(nonunique)`, `n_out_of_m(2, 4)`)."""

    format: str
    properties: frozenset[str] = frozenset()
    n: int = 0  # n_out_of_m only
    m: int = 0

    @property
    def is_unique(self) -> bool:
        return "nonunique" not in self.properties

    @property
    def is_ordered(self) -> bool:
        return "nonordered" not in self.properties

    @property
    def has_positions(self) -> bool:
        return self.format in ("compressed", "loose_compressed")

    @property
    def has_coordinates(self) -> bool:
        return self.format in ("compressed", "loose_compressed", "singleton", "n_out_of_m")

    def __str__(self) -> str:
        props = [p for p in LEVEL_PROPERTIES if p in self.properties]
        if self.format == "n_out_of_m":
            if (self.n, self.m) == (2, 4):
                return "block2_4" + (f"({', '.join(props)})" if props else "")
            return f"n_out_of_m({', '.join([str(self.n), str(self.m), *props])})"
        return self.format + (f"({', '.join(props)})" if props else "")


_PLAIN_LEVEL_TYPES = {f: LevelType(f) for f in ("dense", "compressed", "loose_compressed", "singleton")}


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


@dataclass(frozen=True, slots=True)
class DimSlice:
    """`#sparse_tensor<slice(offset, size, stride)>`; None stands for `?` (dynamic)."""

    offset: int | None
    size: int | None
    stride: int | None

    def __str__(self) -> str:
        vals = ", ".join("?" if v is None else str(v) for v in (self.offset, self.size, self.stride))
        return f"#sparse_tensor<slice({vals})>"


LevelExpr = AffineExpr | LevelCounter


@dataclass(frozen=True)
class SparseTensorEncoding:
    """A parsed `#sparse_tensor.encoding`. Compare with `==`; `str()` gives text that parses back
    equal. `lvl_to_dim` is None when the map has no inverse (then `to_dense` cannot run)."""

    dim_names: tuple[str, ...]
    symbol_names: tuple[str, ...]
    level_exprs: tuple[LevelExpr, ...]
    level_types: tuple[LevelType, ...]
    level_names: tuple[str, ...] | None = None  # the explicit form's `{ib, jb, ...}`
    explicit_inverse: tuple[AffineExpr, ...] | None = None  # `(i = ib * 2 + ii, ...)`, over levels
    dim_slices: tuple[DimSlice | None, ...] = ()
    pos_width: int = 0
    crd_width: int = 0
    lvl_to_dim: tuple[AffineExpr, ...] | None = field(default=None, compare=False)

    # -- queries ---------------------------------------------------------------------------------
    @property
    def dim_rank(self) -> int:
        return len(self.dim_names)

    @property
    def lvl_rank(self) -> int:
        return len(self.level_types)

    @property
    def pos_dtype(self) -> str:
        return _width_dtype(self.pos_width)

    @property
    def crd_dtype(self) -> str:
        return _width_dtype(self.crd_width)

    def level_sizes(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The extent of each level for a tensor of dimension sizes `shape`."""
        return tuple(level_size(e, shape) for e in self.level_exprs)

    def level_name(self, k: int) -> str:
        return self.level_names[k] if self.level_names is not None else f"l{k}"

    def __str__(self) -> str:
        entries = [f"map = {self.map_text()}"]
        if self.pos_width:
            entries.append(f"posWidth = {self.pos_width}")
        if self.crd_width:
            entries.append(f"crdWidth = {self.crd_width}")
        return "#sparse_tensor.encoding<{ " + ", ".join(entries) + " }>"

    def map_text(self) -> str:
        """The `map = ...` value: `(i, j) -> (i : dense, j : compressed)`."""
        head = f"[{', '.join(self.symbol_names)}]" if self.symbol_names else ""
        if self.level_names is not None:
            head += "{" + ", ".join(self.level_names) + "}"
        dims = []
        for k, name in enumerate(self.dim_names):
            if self.explicit_inverse is not None:
                dims.append(f"{name} = {self.explicit_inverse[k].to_string(self._lvl_names(), self.symbol_names)}")
            elif self.dim_slices and self.dim_slices[k] is not None:
                dims.append(f"{name} : {self.dim_slices[k]}")
            else:
                dims.append(name)
        levels = []
        for k, (e, lt) in enumerate(zip(self.level_exprs, self.level_types)):
            text = e.to_string(self.dim_names, self.symbol_names)
            if self.level_names is not None:
                text = f"{self.level_names[k]} = {text}"
            levels.append(f"{text} : {lt}")
        return f"{head}({', '.join(dims)}) -> ({', '.join(levels)})"

    def _lvl_names(self) -> tuple[str, ...]:
        return tuple(self.level_name(k) for k in range(self.lvl_rank))

    def __repr__(self) -> str:
        return f"parse_encoding({str(self)!r})"


def _width_dtype(width: int) -> str:
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


def level_size(e: LevelExpr, shape: Sequence[int]) -> int:
    """MLIR's level size: `i` -> size(i), `i floordiv c` -> ceil(size / c), `i mod c` -> c, a
    counting level -> its number of slices; otherwise the largest value over the shape, plus one.
    A level whose coordinates (or the steps computing them) leave int64 is an EncodingError."""
    if isinstance(e, LevelCounter):
        return e.slices
    atom = e.atom
    if isinstance(atom, DimId):
        return shape[atom.index]
    inner = atom.lhs.atom if isinstance(atom, FloorDiv | Mod) else None
    if isinstance(atom, FloorDiv) and isinstance(inner, DimId):
        return -(-shape[inner.index] // atom.divisor)
    if isinstance(atom, Mod) and isinstance(inner, DimId):
        return atom.divisor
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


# ---------------------------------------------------------------------------------------------
# Lexer and parser

# One match per token, with the blanks and `//` comments before it (possessive: no backtracking).
_TOKEN = re.compile(
    r"(?:\s|//[^\n]*)*+(?:(?P<int>[0-9]+)|(?P<ident>[A-Za-z_][A-Za-z0-9_$]*)|(?P<string>\"[^\"\n]*\")"
    r"|(?P<arrow>->)|(?P<punct>[()\[\]{}<>,:=*+\-?#.])|(?P<end>\Z)|(?P<bad>.))",
    re.DOTALL,
)


class _Tok(NamedTuple):
    kind: str  # int, ident, string, op, eof
    text: str
    start: int


_TOKEN_KINDS = {"int": "int", "ident": "ident", "string": "string", "arrow": "op", "punct": "op"}


def _describe(tok: _Tok) -> str:
    return "the end of the text" if tok.kind == "eof" else f"`{tok.text}`"


class _Parser:
    def __init__(self, text: str, offset: int = 0, whole: str | None = None):
        """Parse `text`; a piece of a larger text (a quoted level type) gives its `offset` in the
        `whole`, so that errors point into the whole."""
        self.text = text if whole is None else whole
        self.tokens = self._lex(text, offset, self.text)
        self.i = 0
        self.tok = self.tokens[0]  # the current token, tokens[i]
        self.nesting = 0  # open parentheses in the expression being read

    @staticmethod
    def _lex(text: str, offset: int, whole: str) -> list[_Tok]:
        out = []
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup
            if kind == "end":
                break
            pos = m.start(kind)
            if kind == "bad":
                raise EncodingError(f"unexpected character {m.group(kind)!r}", whole, offset + pos)
            word = m.group(kind)
            if kind == "int" and not fits_int64(word):
                shown = word if len(word) <= 40 else f"{word[:20]}... ({len(word)} digits)"
                raise EncodingError(
                    f"the integer {shown} does not fit a 64-bit integer (at most {INT64_MAX})", whole, offset + pos
                )
            if kind == "int":
                word = word.lstrip("0") or "0"  # `int()` refuses past 4300 characters, zeros too
            out.append(_Tok(_TOKEN_KINDS[kind], word, offset + pos))
        out.append(_Tok("eof", "", offset + len(text)))
        return out

    # -- token helpers ---------------------------------------------------------------------------
    def peek(self, k: int = 1) -> _Tok:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def advance(self) -> _Tok:
        tok = self.tok
        if self.i + 1 < len(self.tokens):
            self.i += 1
            self.tok = self.tokens[self.i]
        return tok

    def fail(self, expected: str, tok: _Tok | None = None) -> EncodingError:
        tok = tok or self.tok
        return EncodingError(f"expected {expected}, but found {_describe(tok)}", self.text, tok.start)

    def error(self, message: str, tok: _Tok) -> EncodingError:
        return EncodingError(message, self.text, tok.start)

    def at(self, text: str) -> bool:
        tok = self.tok
        return tok.text == text and (tok.kind == "op" or tok.kind == "ident")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> _Tok:
        if not self.at(text):
            raise self.fail(what or f"`{text}`")
        return self.advance()

    def ident(self, what: str) -> _Tok:
        if self.tok.kind != "ident":
            raise self.fail(what)
        return self.advance()

    def integer(self, what: str) -> int:
        if self.tok.kind != "int":
            raise self.fail(what)
        return int(self.advance().text)

    def comma_list(self, close: str, item, what: str) -> list:
        """Items separated by commas up to `close` (consumed); an empty list is allowed."""
        items = []
        if self.accept(close):
            return items
        while True:
            items.append(item())
            if self.accept(close):
                return items
            if not self.accept(","):
                raise self.fail(f"`,` or `{close}` in {what}")

    # -- the attribute ---------------------------------------------------------------------------
    def parse(self) -> SparseTensorEncoding:
        if self.at("#") and self.peek().kind == "ident" and self.peek().text != "sparse_tensor":
            self.advance()
            self.advance()
            self.expect("=", "`=` after the alias name")
        if self.at("{"):
            enc = self.parse_dict()
        else:
            self.expect("#", "`#sparse_tensor.encoding<{`")
            tok = self.ident("`sparse_tensor`")
            if tok.text != "sparse_tensor":
                raise self.fail("`sparse_tensor`", tok)
            self.expect(".", "`.encoding` after `#sparse_tensor`")
            tok = self.ident("`encoding`")
            if tok.text != "encoding":
                raise self.fail("`encoding`", tok)
            self.expect("<", "`<` after `#sparse_tensor.encoding`")
            enc = self.parse_dict()
            self.expect(">", "`>` closing `#sparse_tensor.encoding<`")
        if self.tok.kind != "eof":
            raise self.fail("the end of the encoding")
        return enc

    def parse_dict(self) -> SparseTensorEncoding:
        open_tok = self.expect("{", "`{` opening the encoding's entries")
        entries: dict[str, tuple[_Tok, object]] = {}

        def entry():
            key = self.ident("an entry name (`map`, `posWidth`, `crdWidth`)")
            if key.text not in _KEYS:
                close = difflib.get_close_matches(key.text, _KEYS, n=1)
                hint = f"; did you mean `{close[0]}`?" if close else ""
                raise self.error(
                    f"unknown entry `{key.text}`: expected one of map, posWidth, crdWidth, lvlTypes, dimToLvl{hint}",
                    key,
                )
            canon = _canonical_key(key.text)
            if canon in entries:
                raise self.error(f"entry `{key.text}` given twice", key)
            self.expect("=", f"`=` after `{key.text}`")
            entries[canon] = (key, self.entry_value(canon, key))

        self.comma_list("}", entry, "the encoding's entries")
        return self.build(entries, open_tok)

    def entry_value(self, key: str, key_tok: _Tok):
        if key == "map":
            return self.parse_map()
        if key in ("posWidth", "crdWidth"):
            tok = self.tok
            width = self.integer(f"an integer bit width after `{key_tok.text} =`")
            allowed = POS_WIDTHS if key == "posWidth" else CRD_WIDTHS
            if width not in allowed:
                raise self.error(f"{key_tok.text} must be one of {', '.join(map(str, allowed))}, but got {width}", tok)
            return width
        if key == "lvlTypes":
            self.expect("[", f"`[` after `{key_tok.text} =`")
            return self.comma_list("]", self.level_type_string, "the level type list")
        # dimToLvl
        tok = self.ident("`affine_map<`")
        if tok.text != "affine_map":
            raise self.fail("`affine_map<`", tok)
        self.expect("<", "`<` after `affine_map`")
        dims, syms = self.map_vars()
        self.expect("->", "`->` in the affine map")
        self.expect("(", "`(` opening the affine map's results")
        exprs = self.comma_list(")", lambda: self.expr(dims, syms, allow_counter=True), "the affine map's results")
        self.expect(">", "`>` closing `affine_map<`")
        return ([d.text for d in dims], [s.text for s in syms], exprs, tok)

    def map_vars(self) -> tuple[list[_Tok], list[_Tok]]:
        self.expect("(", "`(` opening the dimension list")
        dims = self.comma_list(")", lambda: self.ident("a dimension name"), "the dimension list")
        syms = []
        if self.accept("["):
            syms = self.comma_list("]", lambda: self.ident("a symbol name"), "the symbol list")
        self.check_unique(dims + syms)
        return dims, syms

    def check_unique(self, toks: list[_Tok]) -> None:
        seen = set()
        for t in toks:
            if t.text in seen:
                raise self.error(f"variable `{t.text}` declared twice", t)
            if t.text in ("floordiv", "ceildiv", "mod"):
                raise self.error(f"`{t.text}` is an operator, not a variable name", t)
            seen.add(t.text)

    # -- map = [syms]{lvls}(dims) -> (levels) ----------------------------------------------------
    def parse_map(self):
        start = self.tok
        syms: list[_Tok] = []
        lvl_vars: list[_Tok] | None = None
        if self.accept("["):
            syms = self.comma_list("]", lambda: self.ident("a symbol name"), "the symbol list")
        if self.accept("{"):
            lvl_vars = self.comma_list("}", lambda: self.ident("a level variable name"), "the level variables")
        if not self.at("("):
            raise self.fail("`(` opening the dimension list of `map`" + ("" if syms else " (or `[` symbols)"))
        self.advance()
        dims: list[_Tok] = []
        dim_exprs: list[tuple[_Tok, _Tok, object]] = []
        slices: list[DimSlice | None] = []
        lvl_scope = {t.text: k for k, t in enumerate(lvl_vars or [])}
        sym_scope = {t.text: k for k, t in enumerate(syms)}

        def dim_spec():
            name = self.ident("a dimension name")
            dims.append(name)
            if self.accept("="):
                if lvl_vars is None:
                    raise self.error(
                        f"dimension `{name.text}` has an expression, but no level variables were declared "
                        "(`{l0, l1, ...}` before the dimensions)",
                        name,
                    )
                dim_exprs.append((name, self.tok, self.expr_tree()))
                slices.append(None)
            elif self.accept(":"):
                slices.append(self.dim_slice())
            else:
                slices.append(None)

        self.comma_list(")", dim_spec, "the dimension list")
        self.check_unique(syms + dims + (lvl_vars or []))
        if dim_exprs and len(dim_exprs) != len(dims):
            named = {n.text for n, _, _ in dim_exprs}
            missing = next(t for t in dims if t.text not in named)
            raise self.error(f"dimension `{missing.text}` needs an expression like the others (`name = ...`)", missing)
        self.expect("->", "`->` between the dimensions and the levels")
        self.expect("(", "`(` opening the level list")
        dim_scope = {t.text: k for k, t in enumerate(dims)}
        levels: list[tuple[_Tok, LevelExpr, LevelType, _Tok | None]] = []

        def level_spec():
            name = None
            if self.tok.kind == "ident" and self.peek().text == "=" and self.peek().kind == "op":
                name = self.advance()
                self.advance()
                k = len(levels)
                if lvl_vars is None:
                    raise self.error(
                        f"level variable `{name.text}` is not declared: list the level variables in "
                        "`{...}` before the dimensions",
                        name,
                    )
                if k >= len(lvl_vars) or lvl_vars[k].text != name.text:
                    want = lvl_vars[k].text if k < len(lvl_vars) else None
                    raise self.error(
                        f"level {k} must bind level variable `{want}`, but binds `{name.text}`"
                        if want
                        else f"level {k} binds `{name.text}`, but only {len(lvl_vars)} level variables are declared",
                        name,
                    )
            elif lvl_vars is not None:
                raise self.fail(f"`{lvl_vars[len(levels)].text} =`" if len(levels) < len(lvl_vars) else "`)`")
            e = self.expr(dims, syms, allow_counter=True, scope=(dim_scope, sym_scope))
            self.expect(":", "`:` and a level type after the level expression")
            type_tok = self.tok
            lt = self.level_type()
            levels.append((type_tok, e, lt, name))

        self.comma_list(")", level_spec, "the level list")
        if lvl_vars is not None and len(levels) != len(lvl_vars):
            raise self.error(
                f"{len(lvl_vars)} level variables are declared, but the map has {len(levels)} levels", start
            )
        inverse = None
        if dim_exprs:
            inverse = [self.checked_affine(tree, lvl_scope, sym_scope, start) for _, start, tree in dim_exprs]
        return {
            "start": start,
            "dims": [t.text for t in dims],
            "syms": [t.text for t in syms],
            "lvl_vars": [t.text for t in lvl_vars] if lvl_vars is not None else None,
            "levels": levels,
            "inverse": inverse,
            "inverse_toks": [t for t, _, _ in dim_exprs],
            "slices": slices,
        }

    def dim_slice(self) -> DimSlice:
        self.expect("#", "`#sparse_tensor<slice(...)>` after `:`")
        tok = self.ident("`sparse_tensor`")
        if tok.text != "sparse_tensor":
            raise self.fail("`sparse_tensor`", tok)
        self.expect("<", "`<` after `#sparse_tensor`")
        tok = self.ident("`slice`")
        if tok.text != "slice":
            raise self.fail("`slice`", tok)
        self.expect("(", "`(` after `slice`")

        def value():
            if self.accept("?"):
                return None
            return self.integer("an integer or `?` in the slice")

        vals = self.comma_list(")", value, "the slice")
        if len(vals) != 3:
            close = self.tokens[self.i - 1]
            raise self.error(f"expected three slice values (offset, size, stride), but got {len(vals)}", close)
        self.expect(">", "`>` closing `#sparse_tensor<`")
        if vals[2] == 0:
            raise self.fail("a positive slice stride")
        return DimSlice(*vals)

    # -- level types -----------------------------------------------------------------------------
    def level_type(self) -> LevelType:
        tok = self.tok
        if tok.kind != "ident":
            raise self.fail("a level type (dense, compressed, loose_compressed, singleton, block2_4, n_out_of_m)")
        name = self.advance().text
        if name not in _LEVEL_SPELLINGS:
            close = difflib.get_close_matches(name, _LEVEL_SPELLINGS, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise self.error(
                f"unknown level type `{name}`: expected dense, compressed, loose_compressed, singleton, "
                f"block2_4 or n_out_of_m{hint}",
                tok,
            )
        n = m = 0
        props: list[_Tok] = []
        if name == "n_out_of_m":
            self.expect("(", "`(n, m)` after `n_out_of_m`")
            n = self.integer("the integer n of n_out_of_m(n, m)")
            self.expect(",", "`,` between n and m")
            m = self.integer("the integer m of n_out_of_m(n, m)")
            if self.accept(","):
                props = self.comma_list(")", lambda: self.ident("a level property"), "the level properties")
            else:
                self.expect(")", "`)` closing n_out_of_m(n, m")
            fmt = "n_out_of_m"
        elif name == "structured":
            self.expect("[", "`[n, m]` after `structured`")
            n = self.integer("the integer n of structured[n, m]")
            self.expect(",", "`,` between n and m")
            m = self.integer("the integer m of structured[n, m]")
            self.expect("]", "`]` closing structured[n, m")
            fmt = "n_out_of_m"
        elif name == "block2_4":
            fmt, n, m = "n_out_of_m", 2, 4
        else:
            fmt = name
        if fmt == "n_out_of_m" and not (1 <= n <= m):
            raise self.error(f"n_out_of_m(n, m) needs 1 <= n <= m, but got n = {n}, m = {m}", tok)
        if not props and self.accept("("):
            props = self.comma_list(")", lambda: self.ident("a level property"), "the level properties")
        seen: set[str] = set()
        for p in props:
            if p.text not in LEVEL_PROPERTIES:
                close = difflib.get_close_matches(p.text, LEVEL_PROPERTIES, n=1)
                hint = f"; did you mean `{close[0]}`?" if close else ""
                raise self.error(f"unknown level property `{p.text}`: expected nonunique, nonordered or soa{hint}", p)
            if p.text in seen:
                raise self.error(f"level property `{p.text}` given twice", p)
            seen.add(p.text)
        if fmt == "dense" and seen & {"nonunique", "nonordered"}:
            bad = next(p for p in props if p.text in ("nonunique", "nonordered"))
            raise self.error(f"a dense level is always unique and ordered; `{bad.text}` does not apply", bad)
        if "soa" in seen and fmt != "singleton":
            bad = next(p for p in props if p.text == "soa")
            raise self.error("`soa` applies to singleton levels only", bad)
        if not seen and fmt in _PLAIN_LEVEL_TYPES:
            return _PLAIN_LEVEL_TYPES[fmt]  # shared: thousands of levels need not build thousands
        return LevelType(fmt, frozenset(seen), n, m)

    def level_type_string(self) -> tuple[_Tok, LevelType]:
        """One string of the old `lvlTypes = [...]`: `"compressed"`, `"compressed-nu-no"`,
        `"singleton(nonunique)"`, `"block2_4"`."""
        tok = self.tok
        if tok.kind != "string":
            raise self.fail('a quoted level type such as "dense" or "compressed"')
        self.advance()
        body = tok.text[1:-1]
        base, *suffixes = body.split("-")
        old = {"nu": "nonunique", "no": "nonordered"}
        extra = []
        for s in suffixes:
            if s not in old:
                raise EncodingError(
                    f"unknown level type suffix `-{s}` in {tok.text}: expected -nu or -no", self.text, tok.start
                )
            extra.append(old[s])
        sub = _Parser(base, tok.start + 1, self.text)
        lt = sub.level_type()
        if sub.tok.kind != "eof":
            raise sub.fail(f"the end of level type {tok.text}")
        if extra:
            if lt.format == "dense":
                raise EncodingError(f"a dense level takes no -nu/-no suffix: {tok.text}", self.text, tok.start)
            lt = LevelType(lt.format, lt.properties | frozenset(extra), lt.n, lt.m)
        return tok, lt

    # -- expressions -----------------------------------------------------------------------------
    # A tree node is ("num", value, None, tok, depth) | ("var", name, None, tok, depth)
    # | ("neg", node, None, tok, depth) | (op, lhs, rhs, op_tok, depth), where depth counts the
    # divisions (`floordiv`, `ceildiv`, `mod`) nested in the node. Operators of one precedence
    # make left-deep chains, which the parser builds and `to_affine` walks with loops; only
    # parentheses recurse, and they are bounded by MAX_NESTING as they are read.
    def expr_tree(self):
        """`term (('+' | '-') term)*` as a tree."""
        node = self.term()
        while self.at("+") or self.at("-"):
            op = self.advance()
            rhs = self.term()
            node = (op.text, node, rhs, op, max(node[4], rhs[4]))
        return node

    def term(self):
        """`factor (('*' | 'floordiv' | 'ceildiv' | 'mod') factor)*` as a tree."""
        node = self.factor()
        while self.at("*") or self.at("floordiv") or self.at("ceildiv") or self.at("mod"):
            op = self.advance()
            rhs = self.factor()
            depth = max(node[4], rhs[4]) + (op.text != "*")
            if depth > MAX_NESTING:
                raise self.error(
                    f"the expression is nested deeper than {MAX_NESTING} levels of `floordiv`, `ceildiv` and `mod`",
                    op,
                )
            node = (op.text, node, rhs, op, depth)
        return node

    def factor(self):
        """`'-'* operand`: the signs are counted in a loop (`- - i` is `i`)."""
        tok = self.tok
        negate = False
        while self.accept("-"):
            negate = not negate
        node = self.operand()
        return ("neg", node, None, tok, node[4]) if negate else node

    def operand(self):
        tok = self.tok
        if self.accept("("):
            self.nesting += 1
            if self.nesting > MAX_NESTING:
                raise self.error(f"the expression is nested deeper than {MAX_NESTING} levels of parentheses", tok)
            node = self.expr_tree()
            self.expect(")", "`)` closing the parenthesised expression")
            self.nesting -= 1
            return node
        if tok.kind == "int":
            return ("num", int(self.advance().text), None, tok, 0)
        if tok.kind == "ident" and tok.text not in ("floordiv", "ceildiv", "mod"):
            return ("var", self.advance().text, None, tok, 0)
        raise self.fail("an affine expression (a variable, an integer or `(`)")

    def expr(self, dims, syms, allow_counter=False, scope=None) -> LevelExpr:
        start = self.tok
        tree = self.expr_tree()
        if scope is None:
            scope = ({t.text: k for k, t in enumerate(dims)}, {t.text: k for k, t in enumerate(syms)})
        dim_scope, sym_scope = scope
        if allow_counter:
            counter = self.counter(tree, dim_scope, sym_scope, start)
            if counter is not None:
                return counter
        return self.checked_affine(tree, dim_scope, sym_scope, start)

    def counter(self, tree, dim_scope, sym_scope, start: _Tok) -> LevelCounter | None:
        """`c * K * i` in any order (a symbol, a positive constant, a dimension)."""
        if tree[0] != "*":
            return None
        factors = []
        stack = [tree]
        while stack:
            n = stack.pop()
            if n[0] == "*":
                stack.extend((n[2], n[1]))
            else:
                factors.append(n)
        syms = [f for f in factors if f[0] == "var" and f[1] in sym_scope]
        dims_ = [f for f in factors if f[0] == "var" and f[1] in dim_scope]
        nums = [f for f in factors if f[0] == "num"]
        if len(syms) != 1 or len(dims_) != 1 or len(syms) + len(dims_) + len(nums) != len(factors):
            return None
        slices = 1
        for f in nums:
            slices *= f[1]
            if slices > INT64_MAX:
                raise self.error(f"the counting level's number of slices exceeds {INT64_MAX} (a 64-bit integer)", start)
        if slices <= 0:
            raise self.error("a counting level needs a positive number of slices", nums[0][3] if nums else tree[3])
        return LevelCounter(sym_scope[syms[0][1]], dim_scope[dims_[0][1]], slices)

    def checked_affine(self, tree, dim_scope, sym_scope, start: _Tok) -> AffineExpr:
        """`to_affine`, then every coefficient, constant and divisor of the canonical form must fit
        int64 (sums are checked here, once: `i * K - i * K` is fine whatever K)."""
        e = self.to_affine(tree, dim_scope, sym_scope)
        value = _beyond_int64(e)
        if value is not None:
            raise self.error(
                f"the expression holds {value} (a coefficient, constant or divisor of its canonical form), "
                f"which does not fit a 64-bit integer (at most {INT64_MAX})",
                start,
            )
        return e

    def to_affine(self, node, dim_scope, sym_scope) -> AffineExpr:
        kind = node[0]
        if kind in ("+", "-"):
            return self.sum_to_affine(node, dim_scope, sym_scope)
        if kind in _MUL_OPS:
            return self.product_to_affine(node, dim_scope, sym_scope)
        if kind == "num":
            return const(node[1])
        if kind == "neg":
            return -self.to_affine(node[1], dim_scope, sym_scope)
        name, tok = node[1], node[3]
        if name in dim_scope:
            return dim(dim_scope[name])
        if name in sym_scope:
            return symbol(sym_scope[name])
        known = list(dim_scope) + list(sym_scope)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        listed = ", ".join(known[:8]) + (f", ... ({len(known)} in all)" if len(known) > 8 else "")
        raise self.error(f"unknown variable `{name}`: expected one of {listed or '(none)'}{hint}", tok)

    def sum_to_affine(self, node, dim_scope, sym_scope) -> AffineExpr:
        """A chain `a + b - c ...`: the summands are added pairwise, in a balanced tree, so a long sum
        costs n log n and not n^2."""
        summands = []
        while node[0] in ("+", "-"):
            summands.append((node[0] == "-", node[2]))
            node = node[1]
        summands.append((False, node))
        parts = []
        for negate, sub in reversed(summands):
            e = self.to_affine(sub, dim_scope, sym_scope)
            parts.append(-e if negate else e)
        while len(parts) > 1:
            parts = [parts[k] + parts[k + 1] if k + 1 < len(parts) else parts[k] for k in range(0, len(parts), 2)]
        return parts[0]

    def product_to_affine(self, node, dim_scope, sym_scope) -> AffineExpr:
        """A chain `a * 2 floordiv 3 mod 4 ...`, left to right. Constant factors gather in `scale`,
        applied once before a division and at the end, so `x * 2 * 2 ...` rescales x once; `scale`
        must stay within int64 (MLIR's affine constants are int64)."""
        ops = []
        while node[0] in _MUL_OPS:
            ops.append(node)
            node = node[1]
        acc = self.to_affine(node, dim_scope, sym_scope)
        scale = 1
        if acc.is_constant:
            scale, acc = acc.constant, None  # None: the product so far is the constant `scale`
        for op_node in reversed(ops):
            op, tok = op_node[0], op_node[3]
            b = self.to_affine(op_node[2], dim_scope, sym_scope)
            if op == "*":
                if b.is_constant:
                    scale = self.checked_scale(scale * b.constant, tok)
                elif acc is None:
                    acc = b
                else:
                    raise self.error(
                        f"not an affine expression: non-affine product `({acc.scale(scale)}) * ({b})`: "
                        "one side must be a constant",
                        tok,
                    )
                continue
            if not b.is_constant or b.constant <= 0:
                raise self.error(f"`{op}` needs a positive integer divisor, but got `{b}`", tok)
            if b.constant > INT64_MAX:
                raise self.error(f"the divisor {b.constant} does not fit a 64-bit integer (at most {INT64_MAX})", tok)
            lhs = const(scale) if acc is None else acc.scale(scale)
            acc = {"floordiv": lhs.floordiv, "ceildiv": lhs.ceildiv, "mod": lhs.mod}[op](b.constant)
            scale = 1
            if acc.is_constant:
                scale, acc = acc.constant, None
        return const(scale) if acc is None else acc.scale(scale)

    def checked_scale(self, value: int, tok: _Tok) -> int:
        if abs(value) > INT64_MAX:
            raise self.error(f"the coefficient {value} does not fit a 64-bit integer (at most {INT64_MAX})", tok)
        return value

    # -- assembling and checking -----------------------------------------------------------------
    def build(self, entries: dict, open_tok: _Tok) -> SparseTensorEncoding:
        pos_width = entries.get("posWidth", (None, 0))[1]
        crd_width = entries.get("crdWidth", (None, 0))[1]
        if "map" in entries:
            for old in ("lvlTypes", "dimToLvl"):
                if old in entries:
                    raise self.error(f"`{entries[old][0].text}` cannot be combined with `map`", entries[old][0])
            m = entries["map"][1]
            return self.finish(
                m["start"],
                m["dims"],
                m["syms"],
                [e for _, e, _, _ in m["levels"]],
                [lt for _, _, lt, _ in m["levels"]],
                [t for t, _, _, _ in m["levels"]],
                m["lvl_vars"],
                m["inverse"],
                m["inverse_toks"],
                m["slices"],
                pos_width,
                crd_width,
            )
        if "lvlTypes" not in entries:
            raise EncodingError(
                "expected a `map = ...` entry (or the old `lvlTypes = [...]`)", self.text, open_tok.start
            )
        key_tok, typed = entries["lvlTypes"]
        types = [lt for _, lt in typed]
        toks = [t for t, _ in typed]
        if not types:
            raise self.error("`lvlTypes` needs at least one level type", key_tok)
        if "dimToLvl" in entries:
            dims, syms, exprs, map_tok = entries["dimToLvl"][1]
            if len(exprs) != len(types):
                raise self.error(
                    f"the affine map has {len(exprs)} results, but `{key_tok.text}` lists {len(types)} level types",
                    map_tok,
                )
        else:
            dims = [f"d{k}" for k in range(len(types))]
            syms = []
            exprs = [dim(k) for k in range(len(types))]
        return self.finish(
            key_tok, dims, syms, exprs, types, toks, None, None, [], [None] * len(dims), pos_width, crd_width
        )

    def finish(
        self, start, dims, syms, exprs, types, toks, lvl_vars, inverse, inverse_toks, slices, pos_width, crd_width
    ) -> SparseTensorEncoding:
        if not dims:
            raise self.error("the map needs at least one dimension", start)
        if not exprs:
            raise self.error("the map needs at least one level", start)
        used = set()
        for e in exprs:
            used |= e.dims_used()
        for k, name in enumerate(dims):
            if k not in used:
                raise self.error(f"dimension `{name}` appears in no level expression", start)
        # MLIR's rules on level sequences (SparseTensorEncodingAttr::verify).
        for k, lt in enumerate(types):
            if lt.format == "singleton":
                prev = types[k - 1] if k else None
                if prev is None or prev.format == "dense" or prev.format == "n_out_of_m" or prev.is_unique:
                    raise self.error(
                        "a singleton level must follow a nonunique compressed, loose_compressed or singleton level",
                        toks[k],
                    )
            if lt.format == "n_out_of_m":
                if k != len(types) - 1:
                    raise self.error("an n_out_of_m (block2_4) level must be the last level", toks[k])
                if any(t.format != "dense" for t in types[:k]):
                    raise self.error("the levels before an n_out_of_m (block2_4) level must be dense", toks[k])
                if isinstance(exprs[k], AffineExpr):
                    atom = exprs[k].atom
                    if not (isinstance(atom, Mod) and atom.divisor == lt.m):
                        raise self.error(
                            f"an n_out_of_m(n, {lt.m}) level's expression must be `<dimension> mod {lt.m}`", toks[k]
                        )
            if isinstance(exprs[k], LevelCounter) and lt.format != "dense":
                raise self.error("a counting level (`c * K * i`) must be dense", toks[k])
        subst = _level_substitution(exprs)
        derived = _derive_inverse(exprs, len(dims), subst)
        if inverse is not None:
            for k, inv in enumerate(inverse):
                if not _composes_to_identity(inv, k, exprs, subst):
                    raise self.error(
                        f"the expression of dimension `{dims[k]}` is not the inverse of the level expressions",
                        inverse_toks[k],
                    )
            lvl_to_dim = tuple(inverse)
        else:
            lvl_to_dim = derived
        return SparseTensorEncoding(
            tuple(dims),
            tuple(syms),
            tuple(exprs),
            tuple(types),
            tuple(lvl_vars) if lvl_vars is not None else None,
            tuple(inverse) if inverse is not None else None,
            tuple(slices) if any(s is not None for s in slices) else (),
            pos_width,
            crd_width,
            lvl_to_dim,
        )


def _canonical_key(key: str) -> str:
    return {
        "lvlType": "lvlTypes",
        "dimLevelType": "lvlTypes",
        "dimOrdering": "dimToLvl",
        "pointerBitWidth": "posWidth",
        "indexBitWidth": "crdWidth",
    }.get(key, key)


def _derive_inverse(
    exprs: Sequence[LevelExpr], n_dims: int, subst: dict[int, AffineExpr]
) -> tuple[AffineExpr, ...] | None:
    """Levels -> dimensions for permutations and `floordiv`/`mod` blocks (MLIR's inference):
    `d` at level l gives `d = l`; `d floordiv c` at l and `d mod c` at l' give `d = c * l + l'`
    (the first such levels). One pass over the levels, then one look-up per dimension."""
    plain: dict[int, int] = {}  # dimension -> the first level that is exactly it
    divided: dict[int, list[tuple[int, int]]] = {}  # dimension -> (level, c) of each `d floordiv c`
    remainder: dict[tuple[int, int], int] = {}  # (dimension, c) -> the first level `d mod c`
    for k, e in enumerate(exprs):
        atom = e.atom if isinstance(e, AffineExpr) else None
        if isinstance(atom, DimId):
            plain.setdefault(atom.index, k)
            continue
        inner = atom.lhs.atom if isinstance(atom, FloorDiv | Mod) else None
        if isinstance(atom, FloorDiv) and isinstance(inner, DimId):
            divided.setdefault(inner.index, []).append((k, atom.divisor))
        elif isinstance(atom, Mod) and isinstance(inner, DimId):
            remainder.setdefault((inner.index, atom.divisor), k)
    out = []
    for d in range(n_dims):
        if d in plain:
            out.append(dim(plain[d]))
            continue
        block = next(((k, c) for k, c in divided.get(d, ()) if (d, c) in remainder), None)
        if block is None:
            return None
        k, c = block
        inv = dim(k) * c + dim(remainder[(d, c)])
        if not _composes_to_identity(inv, d, exprs, subst):
            return None
        out.append(inv)
    return tuple(out)


def _level_substitution(exprs: Sequence[LevelExpr]) -> dict[int, AffineExpr]:
    """Level variable k -> its expression over the dimensions (counting levels have none)."""
    return {k: e for k, e in enumerate(exprs) if isinstance(e, AffineExpr)}


def _composes_to_identity(inv: AffineExpr, d: int, exprs: Sequence[LevelExpr], subst: dict[int, AffineExpr]) -> bool:
    """`inv(levels(dims)) == d` as canonical affine expressions (`subst`: `_level_substitution`)."""
    atom = inv.atom
    if isinstance(atom, DimId):  # the common case, a level variable: no substitution needed
        return atom.index < len(exprs) and exprs[atom.index] == dim(d)
    used = inv.dims_used()
    if any(k >= len(exprs) or isinstance(exprs[k], LevelCounter) for k in used):
        return False
    try:
        return inv.substitute(subst) == dim(d)
    except IndexingMapError:
        return False


def _beyond_int64(e: AffineExpr) -> int | None:
    """A coefficient, constant or divisor of `e` (nested ones included) outside int64, if any."""
    value = largest_constant(e)
    return value if value > INT64_MAX else None


def largest_constant(e: LevelExpr) -> int:
    """The largest magnitude among the integers written in `e`: its constant, coefficients and
    divisors, nested ones included (a counting level: its number of slices)."""
    if isinstance(e, LevelCounter):
        return e.slices
    return affine_largest_constant(e)


def parse_encoding(text: str) -> SparseTensorEncoding:
    """Parse MLIR `#sparse_tensor.encoding<{...}>` text (see the module docstring for the
    grammar). Malformed text raises `EncodingError` with the position and what was expected.

    >>> import sparsetir_py as sp
    >>> csr = sp.parse_encoding("#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>")
    >>> str(csr) == "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>"
    True
    >>> sp.parse_encoding(str(csr)) == csr
    True
    """
    if isinstance(text, SparseTensorEncoding):
        return text
    if not isinstance(text, str):
        raise EncodingError(f"parse_encoding expects the encoding's text, but got {type(text).__name__}")
    return _Parser(text).parse()
