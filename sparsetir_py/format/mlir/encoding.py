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
`*` by a constant, `floordiv`, `ceildiv`, `mod`), read by arith's own `AffineParser` (the parser
of indexing maps, in MLIR's syntax): this module adds the attribute's grammar around them. The
one non-affine form is ELL's counting level
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from ...arith.affine import AffineExpr, DimId, FloorDiv, Mod, SymbolId, dim, symbol
from ...arith.errors import IndexingMapError

# The limits of the text, shared with indexing maps: integers (and every coefficient, constant and
# divisor of a level expression) within int64, as MLIR keeps them; nesting at most MAX_NESTING.
from ...arith.parser import INT64_MAX, MAX_NESTING, MLIR_SYNTAX, AffineParser, Token
from ...errors import EncodingError
from .levels import LEVEL_PROPERTIES, LevelCounter, LevelExpr, LevelType, level_size, width_dtype

__all__ = [
    "DimSlice",
    "LevelCounter",
    "LevelType",
    "SparseTensorEncoding",
    "parse_encoding",
]

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
_LEVEL_SPELLINGS = ("dense", "compressed", "loose_compressed", "singleton", "block2_4", "n_out_of_m", "structured")


# ---------------------------------------------------------------------------------------------
# The model


_PLAIN_LEVEL_TYPES = {f: LevelType(f) for f in ("dense", "compressed", "loose_compressed", "singleton")}


@dataclass(frozen=True, slots=True)
class DimSlice:
    """`#sparse_tensor<slice(offset, size, stride)>`; None stands for `?` (dynamic)."""

    offset: int | None
    size: int | None
    stride: int | None

    def __str__(self) -> str:
        vals = ", ".join("?" if v is None else str(v) for v in (self.offset, self.size, self.stride))
        return f"#sparse_tensor<slice({vals})>"


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
        return width_dtype(self.pos_width)

    @property
    def crd_dtype(self) -> str:
        return width_dtype(self.crd_width)

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


# ---------------------------------------------------------------------------------------------
# The parser


class _Parser(AffineParser):
    """MLIR's attribute grammar over `AffineParser`, which reads the tokens (MLIR_SYNTAX) and the
    level expressions; the class constants and overrides keep MLIR's wording of errors."""

    EXPECTED = "expected {what}, but found {found}"
    AN_EXPRESSION = "an affine expression (a variable, an integer or `(`)"
    CLOSING_PAREN = "`)` closing the parenthesised expression"
    CANONICAL_PARTS = "a coefficient, constant or divisor"
    # A level expression's canonical form is checked once, as a whole (`i * K - i * K` is fine
    # whatever K), and constant factors fold as they come, so an overflowing one is named.
    CHECK_EVERY_SUM = False
    FOLD_CONSTANTS = True

    def __init__(self, text: str, start: int = 0, stop: int | None = None):
        """Parse `text`, or its piece `[start, stop)` (a quoted level type), so that errors point
        into the whole."""
        super().__init__(text, "encoding", MLIR_SYNTAX, start, stop)
        self.lex_all()

    def lex_all(self) -> None:
        """Lex the whole text once first: a bad character or an integer beyond int64 is reported
        wherever it is, before any error of the grammar."""
        token = self.token
        while token.kind != "eof":
            token = self.lex(token.end)

    # -- hooks of AffineParser -------------------------------------------------------------------
    def fail(self, message: str, pos: int | None = None) -> NoReturn:
        raise EncodingError(message, self.source, self.token.start if pos is None else pos)

    def describe(self, token: Token | None = None) -> str:
        token = token or self.token
        return "the end of the text" if token.kind == "eof" else f"`{token.text}`"

    def unknown_variable(self, name: str, scope: dict[str, AffineExpr]) -> str:
        known = list(scope)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        listed = ", ".join(known[:8]) + (f", ... ({len(known)} in all)" if len(known) > 8 else "")
        return f"unknown variable `{name}`: expected one of {listed or '(none)'}{hint}"

    def non_affine_product(self, lhs: AffineExpr, rhs: AffineExpr, op_token: Token) -> NoReturn:
        self.fail(
            f"not an affine expression: non-affine product `({lhs}) * ({rhs})`: one side must be a constant",
            op_token.start,
        )

    def checked_scale(self, value: int, op_token: Token) -> int:
        if abs(value) > INT64_MAX:
            self.fail(f"the coefficient {value} does not fit a 64-bit integer (at most {INT64_MAX})", op_token.start)
        return value

    def check_divisor(self, op_token: Token, rhs: AffineExpr) -> None:
        """MLIR's divisors: positive constants (within int64)."""
        if not rhs.is_constant or rhs.constant <= 0:
            self.fail(f"`{op_token.text}` needs a positive integer divisor, but got `{rhs}`", op_token.start)
        if rhs.constant > INT64_MAX:
            self.fail(f"the divisor {rhs.constant} does not fit a 64-bit integer (at most {INT64_MAX})", op_token.start)

    # -- token helpers ---------------------------------------------------------------------------
    def error(self, message: str, tok: Token) -> EncodingError:
        return EncodingError(message, self.source, tok.start)

    def ident(self, what: str) -> Token:
        if self.token.kind != "ident":
            self.expected(what)
        return self.advance()

    def integer(self, what: str) -> int:
        if self.token.kind != "int":
            self.expected(what)
        return int(self.advance().text.lstrip("0") or "0")  # leading zeros count against int()'s limit

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
                self.expected(f"`,` or `{close}` in {what}")

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
                self.expected("`sparse_tensor`", tok)
            self.expect(".", "`.encoding` after `#sparse_tensor`")
            tok = self.ident("`encoding`")
            if tok.text != "encoding":
                self.expected("`encoding`", tok)
            self.expect("<", "`<` after `#sparse_tensor.encoding`")
            enc = self.parse_dict()
            self.expect(">", "`>` closing `#sparse_tensor.encoding<`")
        if self.token.kind != "eof":
            self.expected("the end of the encoding")
        return enc

    def parse_dict(self) -> SparseTensorEncoding:
        open_tok = self.expect("{", "`{` opening the encoding's entries")
        entries: dict[str, tuple[Token, object]] = {}

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

    def entry_value(self, key: str, key_tok: Token):
        if key == "map":
            return self.parse_map()
        if key in ("posWidth", "crdWidth"):
            tok = self.token
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
            self.expected("`affine_map<`", tok)
        self.expect("<", "`<` after `affine_map`")
        dims, syms = self.map_vars()
        self.expect("->", "`->` in the affine map")
        self.expect("(", "`(` opening the affine map's results")
        scope = _scope(dims, syms)
        exprs = self.comma_list(")", lambda: self.level_expr(scope, allow_counter=True), "the affine map's results")
        self.expect(">", "`>` closing `affine_map<`")
        return ([d.text for d in dims], [s.text for s in syms], exprs, tok)

    def map_vars(self) -> tuple[list[Token], list[Token]]:
        self.expect("(", "`(` opening the dimension list")
        dims = self.comma_list(")", lambda: self.ident("a dimension name"), "the dimension list")
        syms = []
        if self.accept("["):
            syms = self.comma_list("]", lambda: self.ident("a symbol name"), "the symbol list")
        self.check_unique(dims + syms)
        return dims, syms

    def check_unique(self, toks: list[Token]) -> None:
        seen = set()
        for t in toks:
            if t.text in seen:
                raise self.error(f"variable `{t.text}` declared twice", t)
            if t.text in ("floordiv", "ceildiv", "mod"):
                raise self.error(f"`{t.text}` is an operator, not a variable name", t)
            seen.add(t.text)

    # -- map = [syms]{lvls}(dims) -> (levels) ----------------------------------------------------
    def parse_map(self):
        start = self.token
        syms: list[Token] = []
        lvl_vars: list[Token] | None = None
        if self.accept("["):
            syms = self.comma_list("]", lambda: self.ident("a symbol name"), "the symbol list")
        if self.accept("{"):
            lvl_vars = self.comma_list("}", lambda: self.ident("a level variable name"), "the level variables")
        if not self.at("("):
            self.expected("`(` opening the dimension list of `map`" + ("" if syms else " (or `[` symbols)"))
        self.advance()
        dims: list[Token] = []
        dim_exprs: list[tuple[Token, AffineExpr]] = []
        slices: list[DimSlice | None] = []
        lvl_scope = _scope(lvl_vars or [], syms)

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
                dim_exprs.append((name, self.level_expr(lvl_scope)))
                slices.append(None)
            elif self.accept(":"):
                slices.append(self.dim_slice())
            else:
                slices.append(None)

        self.comma_list(")", dim_spec, "the dimension list")
        self.check_unique(syms + dims + (lvl_vars or []))
        if dim_exprs and len(dim_exprs) != len(dims):
            named = {n.text for n, _ in dim_exprs}
            missing = next(t for t in dims if t.text not in named)
            raise self.error(f"dimension `{missing.text}` needs an expression like the others (`name = ...`)", missing)
        self.expect("->", "`->` between the dimensions and the levels")
        self.expect("(", "`(` opening the level list")
        dim_scope = _scope(dims, syms)
        levels: list[tuple[Token, LevelExpr, LevelType, Token | None]] = []

        def level_spec():
            name = None
            if self.token.kind == "ident" and self.peek().text == "=" and self.peek().kind == "op":
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
                self.expected(f"`{lvl_vars[len(levels)].text} =`" if len(levels) < len(lvl_vars) else "`)`")
            e = self.level_expr(dim_scope, allow_counter=True)
            self.expect(":", "`:` and a level type after the level expression")
            type_tok = self.token
            lt = self.level_type()
            levels.append((type_tok, e, lt, name))

        self.comma_list(")", level_spec, "the level list")
        if lvl_vars is not None and len(levels) != len(lvl_vars):
            raise self.error(
                f"{len(lvl_vars)} level variables are declared, but the map has {len(levels)} levels", start
            )
        inverse = None
        if dim_exprs:
            inverse = [e for _, e in dim_exprs]
        return {
            "start": start,
            "dims": [t.text for t in dims],
            "syms": [t.text for t in syms],
            "lvl_vars": [t.text for t in lvl_vars] if lvl_vars is not None else None,
            "levels": levels,
            "inverse": inverse,
            "inverse_toks": [t for t, _ in dim_exprs],
            "slices": slices,
        }

    def dim_slice(self) -> DimSlice:
        self.expect("#", "`#sparse_tensor<slice(...)>` after `:`")
        tok = self.ident("`sparse_tensor`")
        if tok.text != "sparse_tensor":
            self.expected("`sparse_tensor`", tok)
        self.expect("<", "`<` after `#sparse_tensor`")
        tok = self.ident("`slice`")
        if tok.text != "slice":
            self.expected("`slice`", tok)
        self.expect("(", "`(` after `slice`")

        def value():
            if self.accept("?"):
                return None
            return self.integer("an integer or `?` in the slice")

        vals = self.comma_list(")", value, "the slice")
        if len(vals) != 3:
            close = self.previous
            raise self.error(f"expected three slice values (offset, size, stride), but got {len(vals)}", close)
        self.expect(">", "`>` closing `#sparse_tensor<`")
        if vals[2] == 0:
            self.expected("a positive slice stride")
        return DimSlice(*vals)

    # -- level types -----------------------------------------------------------------------------
    def level_type(self) -> LevelType:
        tok = self.token
        if tok.kind != "ident":
            self.expected("a level type (dense, compressed, loose_compressed, singleton, block2_4, n_out_of_m)")
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
        props: list[Token] = []
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

    def level_type_string(self) -> tuple[Token, LevelType]:
        """One string of the old `lvlTypes = [...]`: `"compressed"`, `"compressed-nu-no"`,
        `"singleton(nonunique)"`, `"block2_4"`."""
        tok = self.token
        if tok.kind != "string":
            self.expected('a quoted level type such as "dense" or "compressed"')
        self.advance()
        body = tok.text[1:-1]
        base, *suffixes = body.split("-")
        old = {"nu": "nonunique", "no": "nonordered"}
        extra = []
        for s in suffixes:
            if s not in old:
                raise EncodingError(
                    f"unknown level type suffix `-{s}` in {tok.text}: expected -nu or -no", self.source, tok.start
                )
            extra.append(old[s])
        sub = _Parser(self.source, tok.start + 1, tok.start + 1 + len(base))
        lt = sub.level_type()
        if sub.token.kind != "eof":
            sub.expected(f"the end of level type {tok.text}")
        if extra:
            if lt.format == "dense":
                raise EncodingError(f"a dense level takes no -nu/-no suffix: {tok.text}", self.source, tok.start)
            lt = LevelType(lt.format, lt.properties | frozenset(extra), lt.n, lt.m)
        return tok, lt

    # -- expressions -----------------------------------------------------------------------------
    def level_expr(self, scope: dict[str, AffineExpr], allow_counter=False) -> LevelExpr:
        """An affine expression over the variables of `scope` (`AffineParser.expr`), or with
        `allow_counter` ELL's counting level; its canonical form must fit int64."""
        start = self.token
        if allow_counter:
            counter = self.counter(scope)
            if counter is not None:
                return counter
        return self.check_canonical(self.expr(scope), start.start)

    def counter(self, scope: dict[str, AffineExpr]) -> LevelCounter | None:
        """`c * K * i` in any order and grouping (a symbol, positive constants, a dimension), the
        whole expression; else None and nothing read."""
        saved = (self.previous, self.token)
        start = self.token
        factors = self.product_factors()
        atoms = [scope[t.text].atom if t.kind == "ident" and t.text in scope else None for t in factors or ()]
        syms = [a for a in atoms if isinstance(a, SymbolId)]
        dims_ = [a for a in atoms if isinstance(a, DimId)]
        nums = [t for t in factors or () if t.kind == "int"]
        if len(atoms) < 2 or len(syms) != 1 or len(dims_) != 1 or len(nums) != len(atoms) - 2:
            self.previous, self.token = saved
            return None
        slices = 1
        for t in nums:
            slices *= int(t.text.lstrip("0") or "0")
            if slices > INT64_MAX:
                raise self.error(f"the counting level's number of slices exceeds {INT64_MAX} (a 64-bit integer)", start)
        if slices <= 0:
            raise self.error("a counting level needs a positive number of slices", nums[0])
        return LevelCounter(syms[0].index, dims_[0].index, slices)

    def product_factors(self) -> list[Token] | None:
        """The names and integers of a product `f * f ...` (`f`: a name, an integer or a
        parenthesised product) that ends the expression here, or None (then the affine grammar
        reads the text and reports what is wrong)."""
        factors: list[Token] = []
        depth = 0
        while True:
            while self.at("("):
                depth += 1
                if depth > MAX_NESTING:
                    return None
                self.advance()
            if self.token.kind not in ("ident", "int") or self.token.text in MLIR_SYNTAX.keywords:
                return None
            factors.append(self.advance())
            while depth and self.accept(")"):
                depth -= 1
            if not self.accept("*"):
                break
        if depth or any(self.at(op) for op in ("+", "-", "floordiv", "ceildiv", "mod")):
            return None
        return factors

    # -- assembling and checking -----------------------------------------------------------------
    def build(self, entries: dict, open_tok: Token) -> SparseTensorEncoding:
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
                "expected a `map = ...` entry (or the old `lvlTypes = [...]`)", self.source, open_tok.start
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
        # MLIR's rules on level sequences (SparseTensorEncodingAttr::verify), per kind.
        for k, lt in enumerate(types):
            wrong = lt.kind.check(k, types, exprs)
            if wrong is not None:
                raise self.error(wrong, toks[k])
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


def _scope(dims: Sequence[Token], syms: Sequence[Token]) -> dict[str, AffineExpr]:
    """The variables of an expression: dimension (or level) k is `dim(k)`, symbol k `symbol(k)`."""
    scope = {t.text: dim(k) for k, t in enumerate(dims)}
    scope.update((t.text, symbol(k)) for k, t in enumerate(syms))
    return scope


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
