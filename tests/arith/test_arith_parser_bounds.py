"""Hostile indexing-map text: `parse_indexing_map` returns a map or raises `IndexingMapError` at the
offending place, in time linear in the text, whatever the text holds.

Like `parse_encoding`, parentheses and nested `floordiv`/`mod`/`ceildiv` are bounded (64 deep),
integer literals and the canonical form's constants must fit int64, chains of signs and of terms
are walked by loops. `_pair_div_mod` (the `b*c*(x floordiv c) + b*(x mod c) = b*x` rewrite) groups
the terms once, so long sums of `mod` terms are linear too, with the same results as before.
"""

from __future__ import annotations

import re
import time

import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as hs

import sparsetir_py as sp
from sparsetir_py.arith import (
    IndexingMap,
    IndexingMapError,
    const,
    dim,
    parse_affine_expr,
    parse_indexing_map,
    symbol,
)
from sparsetir_py.arith.affine import FloorDiv, Mod, _floordiv, _pair_div_mod, _shift_key

INT64_MAX = 2**63 - 1


def _map(expr: str) -> str:
    return f"(d0, d1) -> ({expr}), domain: d0 in [0, 9], d1 in [0, 9]"


def _cpu(fn):
    """`fn()` and the CPU seconds it took (this thread's CPU time: neither a loaded machine nor
    spinning kernel threads make it flaky)."""
    start = time.thread_time()
    result = fn()
    return result, time.thread_time() - start


def _parse_encoding(text: str):
    """The encoding, or None where the text is refused (EncodingError)."""
    try:
        return sp.parse_encoding(text)
    except sp.EncodingError:
        return None


def _error(text: str) -> IndexingMapError:
    with pytest.raises(IndexingMapError) as info:
        parse_indexing_map(text)
    return info.value


# -- depth ---------------------------------------------------------------------------------------


def test_parentheses_nest_64_deep():
    m = parse_indexing_map(_map("(" * 64 + "d0 + d1" + ")" * 64))
    assert m.results == (dim(0) + dim(1),)


@pytest.mark.parametrize("depth", [65, 400, 100_000])
def test_parentheses_deeper_than_64_are_an_error_at_the_65th(depth):
    text = _map("(" * depth + "d0" + ")" * depth)
    err = _error(text)
    assert "nested deeper than 64 levels of parentheses" in str(err)
    assert err.position == len("(d0, d1) -> (") + 64


def test_nested_divisions_are_bounded():
    """A chain `d0 mod 2 mod 3 ...` nests `mod` atoms: 64 are fine, the 65th is an error there."""
    ok = _map("d0" + " mod 7" * 64)
    assert parse_indexing_map(ok).results == (dim(0) % 7,)
    text = _map("d0" + "".join(f" mod {k + 2}" for k in range(1000)))
    err = _error(text)
    assert "nested deeper than 64 levels of `floordiv`, `ceildiv` and `mod`" in str(err)
    assert err.position == [m.start() for m in re.finditer("mod", text)][64]


def test_divisions_inside_parentheses_count_too():
    text = _map("(" * 40 + "d0" + "".join(f" floordiv 2) mod {k + 3}" for k in range(40)))
    err = _error(text)
    assert "nested deeper than 64 levels" in str(err)


# -- chains --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 999, 1000, 20_000])
def test_unary_minus_chains(n):
    m, cpu = _cpu(lambda: parse_indexing_map(_map("-" * n + "d0 + d1")))
    assert m.results == ((-dim(0) if n % 2 else dim(0)) + dim(1),)
    assert cpu < 1.0


def test_unary_minus_in_intervals_and_expressions_agree():
    assert parse_affine_expr("- - -d0 * 3") == dim(0) * -3
    assert parse_affine_expr("-(-(d0 - s0))") == dim(0) - symbol(0)


def test_long_sum_is_linear():
    """A sum of n terms parses in time linear in n: four times the terms take well under the 16
    times a quadratic parse would (the best of three runs each; CPU time still doubles when this
    machine is throttled, so an absolute bound alone failed a correct parser at 0.62 s)."""
    cpu = {}
    for n in (500, 2000):
        text = _map(" + ".join(f"d{k % 2} * {k}" for k in range(n)))
        runs = [_cpu(lambda text=text: parse_indexing_map(text)) for _ in range(3)]
        m, cpu[n] = runs[0][0], min(t for _, t in runs)
        total = n * (n - 1) // 2
        assert m.results == (dim(0) * (total - (n // 2) ** 2) + dim(1) * (n // 2) ** 2,)
    assert cpu[2000] < 8 * cpu[500] + 0.05 and cpu[2000] < 2.0, cpu


def test_many_dimensions_are_linear():
    n = 2000
    names = ", ".join(f"d{k}" for k in range(n))
    text = f"({names}) -> (" + " + ".join(f"d{k}" for k in range(n)) + f", {names}), domain: "
    text += ", ".join(f"d{k} in [0, {k}]" for k in range(n))
    m, cpu = _cpu(lambda: parse_indexing_map(text))
    assert len(m.results) == n + 1 and m.results[1:] == tuple(dim(k) for k in range(n))
    assert len(m.results[0].terms) == n and m.results[0].evaluate(range(n)) == n * (n - 1) // 2
    assert cpu < 1.0, cpu


def test_sum_matches_left_to_right_addition():
    text = "d0 floordiv 4 + d0 mod 4 - (d0 + 1) mod 3 + 7 - s0 * 2 + (d0 - 1) floordiv 3 + d0 mod 3"
    expected = dim(0) // 4 + dim(0) % 4 - (dim(0) + 1) % 3 + 7 - symbol(0) * 2 + (dim(0) - 1) // 3 + dim(0) % 3
    assert parse_affine_expr(text) == expected


# -- integers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("digits", ["9" * 19, "9" * 5000, "9" * 100_000, str(2**63), str(2**64)])
def test_integer_literals_must_fit_int64(digits):
    text = _map(f"d0 + {digits}")
    err, cpu = _cpu(lambda: _error(text))
    assert "does not fit a 64-bit integer" in str(err)
    assert err.position == text.index(digits)
    assert len(str(err)) < 500  # the literal is not quoted whole
    assert cpu < 0.5


def test_integers_up_to_int64_parse():
    m = parse_indexing_map(f"(d0) -> (d0 + {INT64_MAX}), domain: d0 in [-{INT64_MAX}, {INT64_MAX}]")
    assert m.results == (dim(0) + INT64_MAX,)
    assert parse_affine_expr("0" * 5000 + "7") == const(7)


def test_interval_bound_beyond_int64():
    text = f"(d0) -> (d0), domain: d0 in [0, {2**63}]"
    assert _error(text).position == text.index(str(2**63))


@pytest.mark.parametrize(
    "expr", ["d0 * 4294967296 * 4294967296", "4294967296 * 4294967296 * d0", "(d0 * 3037000500) * 3037000500"]
)
def test_products_beyond_int64_are_an_error(expr):
    err = _error(_map(expr))
    assert "64-bit integer" in str(err)


def test_sums_beyond_int64_are_an_error():
    err = _error(_map(" + ".join([f"d0 * {INT64_MAX}"] * 3)))
    assert "64-bit integer" in str(err) and err.position == len("(d0, d1) -> (")


def test_auto_named_variables_with_huge_indices():
    with pytest.raises(IndexingMapError, match="unknown variable"):
        parse_affine_expr("d" + "9" * 5000)


def test_long_names_are_not_quoted_whole():
    name = "x" * 40_000
    err = _error(f"(d0, {name}, {name}) -> (d0), domain: d0 in [0, 3]")
    assert "declared twice" in str(err) and len(str(err)) < 500


# -- the message window --------------------------------------------------------------------------


def test_error_in_a_long_line_shows_a_window_with_a_caret():
    text = _map(" + ".join(["d0"] * 5000) + " + d7 + " + " + ".join(["d1"] * 5000))
    err = _error(text)
    message = str(err)
    assert "unknown variable `d7`" in message and len(message) < 400
    source, caret = message.splitlines()[-2:]
    assert source.strip().startswith("...") and source.endswith("...")
    assert source[caret.index("^") : caret.index("^") + 2] == "d7"
    assert err.position == text.index("d7") and (err.line, err.column) == (1, text.index("d7") + 1)


# -- _pair_div_mod ---------------------------------------------------------------------------------


def _pair_div_mod_quadratic(items, constant):
    """The rewrite as it was before terms were grouped: the reference the grouped one must match."""
    while True:
        pair = None
        for atom, b in items.items():
            if not isinstance(atom, Mod):
                continue
            fd = _floordiv(atom.lhs, atom.divisor).atom
            if not isinstance(fd, FloorDiv):
                continue
            key = _shift_key(fd)
            partner = next((a for a in items if _shift_key(a) == key and items[a] == b * atom.divisor), None)
            if partner is not None:
                pair = (atom, partner, b, (partner.lhs.constant - fd.lhs.constant) // fd.divisor)
                break
        if pair is None:
            return items, constant
        mod_atom, fd_atom, b, shift = pair
        del items[mod_atom]
        del items[fd_atom]
        x = mod_atom.lhs
        for atom, k in x.terms:
            items[atom] = items.get(atom, 0) + b * k
        items = {a: k for a, k in items.items() if k}
        constant += b * x.constant + b * mod_atom.divisor * shift


_DIVISORS = [2, 3, 4, 8]


@hs.composite
def _dividends(draw, depth: int = 2):
    """Small affine expressions over d0, d1, s0, with nested `floordiv`/`mod` now and then."""
    e = draw(hs.integers(-9, 9)) + dim(0) * draw(hs.sampled_from([0, 1, 1, 2, 4, -1]))
    e = e + dim(1) * draw(hs.sampled_from([0, 0, 1, 3])) + symbol(0) * draw(hs.sampled_from([0, 0, 1]))
    if depth and draw(hs.booleans()):
        inner = draw(_dividends(depth - 1))
        c = draw(hs.sampled_from(_DIVISORS))
        e = e + (inner // c if draw(hs.booleans()) else inner % c) * draw(hs.sampled_from([1, 2, -1]))
    return e


@hs.composite
def _div_mod_items(draw):
    """Terms for `_pair_div_mod`: mod terms, often with their floordiv partner (and its shifted
    spellings), and the parts of their dividends, in a drawn order."""
    items: dict = {}
    for _ in range(draw(hs.integers(1, 6))):
        x = draw(_dividends())
        c = draw(hs.sampled_from(_DIVISORS))
        b = draw(hs.sampled_from([1, 2, -1, 3]))
        for atom, _k in (x % c).terms:
            if isinstance(atom, Mod):
                items[atom] = items.get(atom, 0) + b
                fd = _floordiv(atom.lhs, atom.divisor).atom
                if isinstance(fd, FloorDiv) and draw(hs.booleans()):
                    shifted = _floordiv(fd.lhs + fd.divisor * draw(hs.sampled_from([0, 0, 1, -2])), fd.divisor).atom
                    partner = shifted if isinstance(shifted, FloorDiv) else fd
                    items[partner] = items.get(partner, 0) + b * atom.divisor * draw(hs.sampled_from([1, 1, 1, 2]))
        for atom, k in x.terms:
            if draw(hs.booleans()):
                items[atom] = items.get(atom, 0) + k * draw(hs.sampled_from([1, -1, 2]))
    order = draw(hs.permutations(list(items)))
    return {a: items[a] for a in order if items[a]}, draw(hs.integers(-5, 5))


@fuzz(60)
@given(_div_mod_items())
def test_pair_div_mod_matches_the_quadratic_rewrite(case):
    items, constant = case
    got_items, got_constant = _pair_div_mod(dict(items), constant)
    want_items, want_constant = _pair_div_mod_quadratic(dict(items), constant)
    assert got_constant == want_constant
    assert list(got_items.items()) == list(want_items.items())


def test_pair_div_mod_pairs_nested_terms_in_order():
    """Pairing `(d0 floordiv 4) mod 8 * 4` with `d0 floordiv 32 * 32` brings back `d0 floordiv 4 * 4`,
    which pairs with the earlier `d0 mod 4`: all of it is `d0`."""
    e = dim(0) % 4 + ((dim(0) // 4) % 8) * 4 + (dim(0) // 32) * 32
    assert e == dim(0)
    items = dict([*(dim(0) % 4).terms, *(((dim(0) // 4) % 8) * 4).terms, *((dim(0) // 32) * 32).terms])
    assert _pair_div_mod(dict(items), 0) == _pair_div_mod_quadratic(dict(items), 0)


@pytest.mark.parametrize("n", [2000])
def test_long_sums_of_mod_terms_are_linear(n):
    mods = " + ".join(f"(d0 + {k}) mod {k + 2}" for k in range(n))
    m, cpu = _cpu(lambda: parse_indexing_map(f"(d0) -> ({mods}), domain: d0 in [0, 99]"))
    assert len(m.results[0].terms) > n // 2
    assert cpu < 1.0, cpu
    level = " + ".join(f"i mod {k + 2}" for k in range(n))
    enc = f"#sparse_tensor.encoding<{{ map = (i, j) -> (i : dense, j + {level} : compressed) }}>"
    _, cpu = _cpu(lambda: _parse_encoding(enc))
    assert cpu < 1.0, cpu


def test_pairs_in_a_long_sum_cancel():
    n = 1000
    text = " + ".join(f"d{k} mod 4 + d{k} floordiv 4 * 4" for k in range(n))
    e, cpu = _cpu(lambda: parse_affine_expr(text))
    assert len(e.terms) == n and e.constant == 0 and all(k == 1 for _, k in e.terms)
    assert e.evaluate(range(n)) == n * (n - 1) // 2
    assert cpu < 1.0, cpu


# -- fuzz ----------------------------------------------------------------------------------------

SEEDS = [
    "(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16), domain: d0 in [0, 6], d1 in [0, 14]",
    "(d0)[s0]{rt0} -> (d0 + s0, d0 floordiv 2 + rt0), domain: d0 in [0, 9], s0 in [0, 4], rt0 in [0, 3],"
    " d0 + s0 in [0, 10]",
    "(d0, d1) -> (16d0 + d1 // 4, d1 % 4 - d0 ceildiv 3), domain: d0 in [0, 3], d1 in [-4, 15], is_simplified: false",
    "(d0) -> (-(d0 * -2) floorDiv -3), domain: d0 in [0, 31]",
    "() -> (7)",
]

TOKENS = [*"()[]{},:+-*%", "->", "//", "domain", "in", "floordiv", "mod", "ceildiv", "hlo", "is_simplified"]
TOKENS += ["d0", "d1", "s0", "rt0", "x", "0", "2", "16", str(INT64_MAX), str(2**63), "9" * 30, "\n", "é", "\x00"]

_LEX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|->|//|\s+|.", re.DOTALL)


@hs.composite
def _mutated(draw) -> str:
    text = draw(hs.sampled_from(SEEDS))
    for _ in range(draw(hs.integers(1, 3))):
        toks = _LEX.findall(text)
        k = draw(hs.integers(0, len(toks)))
        kind = draw(hs.sampled_from(["insert", "delete", "replace", "char", "repeat", "nest", "signs", "digits"]))
        if kind == "insert":
            toks.insert(k, draw(hs.sampled_from(TOKENS)))
        elif kind in ("delete", "replace") and k < len(toks):
            toks[k : k + 1] = [draw(hs.sampled_from(TOKENS))] if kind == "replace" else []
        elif kind == "char":
            toks.insert(k, draw(hs.characters(codec="utf-8")))
        elif kind == "repeat":
            end = draw(hs.integers(k, min(len(toks), k + 8)))
            toks[k:end] = toks[k:end] * draw(hs.sampled_from([2, 100, 2000]))
        elif kind == "nest":
            depth = draw(hs.sampled_from([2, 64, 65, 3000]))
            end = draw(hs.integers(k, min(len(toks), k + 4)))
            toks[k:end] = ["(" * depth, *toks[k:end], ")" * depth]
        else:
            toks.insert(k, ("-" if kind == "signs" else "9") * draw(hs.sampled_from([1, 1000, 5000])))
        text = "".join(toks)
    return text


@fuzz(100)
@given(_mutated())
def test_fuzz_parse_indexing_map(text):
    """A mutated map parses to a map or raises IndexingMapError with a position in the text, in
    little CPU time; never another exception."""
    start = time.thread_time()
    try:
        result = parse_indexing_map(text)
    except IndexingMapError as err:
        assert err.position is None or 0 <= err.position <= len(text)
        assert len(str(err)) < 2000
    else:
        assert isinstance(result, IndexingMap)
    elapsed = time.thread_time() - start
    assert elapsed < 1.0, f"{elapsed:.2f} s of CPU on {len(text)} characters"
