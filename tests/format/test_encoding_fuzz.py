"""Fuzzing the encoding surfaces: `sp.parse_encoding` over mutated texts and `sp.to_storage` over
the encodings that parse.

`parse_encoding` either returns an encoding (which prints back to an equal one) or raises
`EncodingError`, quickly, whatever the text: characters and tokens inserted, deleted or replaced,
parentheses nested past the bound, sums and sign chains thousands long, numbers of thousands of
digits. `to_storage` of a small matrix under an encoding that parses either raises a named error
(`EncodingError`, `InputError`) or stores the matrix so that `to_scipy()` gives it back.

Seeded and cheap by default (`tests/fuzzing.py`); `SPARSETIR_FUZZ=deep` runs 40 times more
examples with random seeds.
"""

from __future__ import annotations

import re
import time

import numpy as np
import scipy.sparse
from fuzzing import fuzz
from hypothesis import event, given
from hypothesis import strategies as hs
from strategies import csr_matrices

import sparsetir_py as sp
from sparsetir_py.format.mlir import SparseTensorEncoding

E = "#sparse_tensor.encoding<{ map = %s }>"

#: Valid texts the mutations start from: every spelling the parser reads.
SEEDS = [
    E % "(i, j) -> (i : dense, j : compressed)",
    E % "(i, j) -> (j : dense, i : compressed)",
    E % "(i, j) -> (i : compressed, j : compressed)",
    E % "(i, j) -> (i : compressed(nonunique), j : singleton)",
    E % "(i, j) -> (i : compressed(nonunique), j : singleton(soa))",
    E % "(i, j) -> (i : dense, j : loose_compressed(nonordered))",
    E % "(i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
    E % "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4)",
    E % "(i, j) -> (i : dense, j floordiv 8 : dense, j mod 8 : n_out_of_m(3, 8))",
    E % "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])",
    E % "[c](i, j) -> (c * 3 * i : dense, i : dense, j : compressed)",
    E % "{ib, jb, ii, jj}(i = ib * 2 + ii, j = jb * 3 + jj) -> "
    "(ib = i floordiv 2 : dense, jb = j floordiv 3 : compressed, ii = i mod 2 : dense, jj = j mod 3 : dense)",
    E % "(i : #sparse_tensor<slice(1, 4, 2)>, j : #sparse_tensor<slice(0, ?, 1)>) -> (i : dense, j : compressed)",
    E % "(i, j) -> (i : dense, j ceildiv 4 : dense, j - i * 3 + 2 : compressed)",
    E % "[s0](i, j) -> (i + s0 : dense, j : compressed)",
    "#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 8 }>",
    '#sparse_tensor.encoding<{ lvlTypes = [ "dense", "compressed-nu-no" ], dimToLvl = affine_map<(i, j) -> (j, i)> }>',
    '#sparse_tensor.encoding<{ dimLevelType = [ "compressed" ], pointerBitWidth = 32, indexBitWidth = 32 }>',
    "{ map = (i, j) -> (i : dense, j : compressed) } // a comment",
]

#: Tokens a mutation may insert: the grammar's words and punctuation, and numbers at the edges.
TOKENS = [
    *"()[]{}<>,:=*+-?#.",
    "->",
    "//",
    '"',
    "map",
    "posWidth",
    "crdWidth",
    "lvlTypes",
    "dimToLvl",
    "affine_map",
    "sparse_tensor",
    "encoding",
    "slice",
    "dense",
    "compressed",
    "loose_compressed",
    "singleton",
    "block2_4",
    "n_out_of_m",
    "structured",
    "nonunique",
    "nonordered",
    "soa",
    "high",
    "floordiv",
    "ceildiv",
    "mod",
    "i",
    "j",
    "k",
    "c",
    "0",
    "1",
    "2",
    "4",
    "8",
    "64",
    str(2**31),
    str(2**62),
    str(2**63 - 1),
    str(2**63),
    str(2**64),
    "9" * 30,
    '"dense"',
    '"compressed-nu"',
    "\n",
    "é",
    "\x00",
]

_LEX = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*|[0-9]+|->|\"[^\"]*\"|\s+|.", re.DOTALL)


def _tokens(text: str) -> list[str]:
    return _LEX.findall(text)


@hs.composite
def mutated_texts(draw) -> str:
    """A seed with up to four edits: characters, tokens, or a large structure at a random place."""
    text = draw(hs.sampled_from(SEEDS))
    for _ in range(draw(hs.integers(1, 4))):
        kind = draw(
            hs.sampled_from(
                [
                    "insert_char",
                    "delete_char",
                    "replace_char",
                    "insert_token",
                    "delete_token",
                    "replace_token",
                    "swap_tokens",
                    "duplicate_span",
                    "nest",
                    "long_sum",
                    "signs",
                    "huge_number",
                    "many_levels",
                ]
            )
        )
        text = _mutate(draw, text, kind)
    return text


def _mutate(draw, text: str, kind: str) -> str:
    at = draw(hs.integers(0, len(text)))
    if kind == "insert_char":
        return text[:at] + draw(hs.characters(codec="utf-8")) + text[at:]
    if kind in ("delete_char", "replace_char") and text:
        at = min(at, len(text) - 1)
        new = draw(hs.sampled_from(TOKENS)) if kind == "replace_char" else ""
        return text[:at] + new + text[at + 1 :]
    toks = _tokens(text)
    if not toks:
        return text
    k = draw(hs.integers(0, len(toks) - 1))
    if kind == "insert_token":
        return "".join([*toks[:k], " ", draw(hs.sampled_from(TOKENS)), " ", *toks[k:]])
    if kind == "delete_token":
        return "".join(toks[:k] + toks[k + 1 :])
    if kind == "replace_token":
        return "".join([*toks[:k], draw(hs.sampled_from(TOKENS)), *toks[k + 1 :]])
    if kind == "swap_tokens":
        k2 = draw(hs.integers(0, len(toks) - 1))
        toks[k], toks[k2] = toks[k2], toks[k]
        return "".join(toks)
    if kind == "duplicate_span":
        k2 = draw(hs.integers(k, min(len(toks), k + 12)))
        times = draw(hs.sampled_from([2, 3, 50, 1000]))
        return "".join(toks[:k] + toks[k:k2] * times + toks[k2:])
    if kind == "nest":
        depth = draw(hs.sampled_from([1, 2, 63, 64, 65, 400, 5000]))
        end = draw(hs.integers(k, min(len(toks), k + 6)))
        return "".join([*toks[:k], "(" * depth, *toks[k:end], ")" * depth, *toks[end:]])
    if kind == "long_sum":
        n = draw(hs.sampled_from([2, 100, 1000, 3000]))
        term = draw(hs.sampled_from(["i", "j", "1", "i * 2", "i floordiv 2", "j mod 3", "(i)", str(2**62)]))
        return "".join([*toks[:k], " + ".join([term] * n), *toks[k:]])
    if kind == "signs":
        n = draw(hs.sampled_from([1, 2, 999, 1000, 5000]))
        return "".join([*toks[:k], "-" * n, *toks[k:]])
    if kind == "huge_number":
        digits = draw(hs.sampled_from([19, 20, 400, 4300, 5000, 20000]))
        return "".join([*toks[:k], "9" * digits, *toks[k:]])
    # many_levels: the dimensions and levels of a large permutation in place of a token
    n = draw(hs.sampled_from([50, 500, 2000]))
    dims = ", ".join(f"d{m}" for m in range(n))
    levels = ", ".join(f"d{m} : dense" for m in reversed(range(n)))
    return "".join([*toks[:k], f"({dims}) -> ({levels})", *toks[k + 1 :]])


def _parse(text: str) -> SparseTensorEncoding | None:
    """parse_encoding's answer: an encoding, or None for an EncodingError; never anything else,
    and never slowly."""
    start = (
        time.thread_time()
    )  # this thread's CPU time: neither a loaded machine nor spinning kernel threads make it flaky
    try:
        enc = sp.parse_encoding(text)
    except sp.EncodingError as e:
        assert e.position is None or 0 <= e.position <= len(text)
        enc = None
    elapsed = time.thread_time() - start
    assert elapsed < 1.0, f"parse took {elapsed:.2f} s of CPU on a text of {len(text)} characters"
    return enc


@fuzz(150)
@given(text=mutated_texts())
def test_mutated_texts_parse_or_raise_encoding_error(text):
    enc = _parse(text)
    if enc is not None:
        again = sp.parse_encoding(str(enc))
        assert again == enc
        assert str(again) == str(enc)


@fuzz(100)
@given(
    text=hs.builds(
        lambda toks, sep: sep.join(toks),
        hs.lists(hs.sampled_from([*TOKENS, "i", "j"]), max_size=30),
        hs.sampled_from(["", " "]),
    )
)
def test_token_soup_parses_or_raises_encoding_error(text):
    for candidate in (text, E % text, "#sparse_tensor.encoding<{ " + text):
        enc = _parse(candidate)
        if enc is not None:
            assert sp.parse_encoding(str(enc)) == enc


# ---------------------------------------------------------------------------------------------
# to_storage over the encodings that parse

LEVEL_TYPES = [
    "dense",
    "compressed",
    "compressed(nonunique)",
    "compressed(nonordered)",
    "loose_compressed",
    "loose_compressed(nonunique)",
    "singleton",
    "singleton(nonunique)",
    "singleton(soa)",
]


@hs.composite
def matrix_encodings(draw) -> str:
    """2-D encodings built from the map forms to_storage meets: permutations, floordiv/mod blocks
    (inferred or explicit), shifted, scaled and ceildiv levels, ELL, n_out_of_m, slices, widths.
    Many are invalid on purpose (a singleton after a unique level, a width too narrow)."""
    form = draw(hs.sampled_from(["levels", "levels", "levels", "explicit", "ell", "n_out_of_m"]))
    names = draw(hs.sampled_from([("i", "j"), ("d0", "d1"), ("row", "col")]))
    widths = ""
    if draw(hs.booleans()):
        widths += f", posWidth = {draw(hs.sampled_from([0, 8, 16, 32, 64]))}"
    if draw(hs.booleans()):
        widths += f", crdWidth = {draw(hs.sampled_from([0, 8, 16, 32, 64]))}"
    i, j = names
    if form == "ell":
        slices = draw(hs.sampled_from([1, 2, 5, 13, 2**40, 1111111111111111111]))
        lt = draw(hs.sampled_from(["compressed", "dense", "singleton"]))
        return E % (f"[c]({i}, {j}) -> (c * {slices} * {i} : dense, {i} : dense, {j} : {lt})" + widths)
    if form == "n_out_of_m":
        n, m = draw(hs.sampled_from([(2, 4), (1, 2), (3, 8), (1, 1), (2, 2**40)]))
        return E % f"({i}, {j}) -> ({i} : dense, {j} floordiv {m} : dense, {j} mod {m} : n_out_of_m({n}, {m}))"
    if form == "explicit":
        a, b = draw(hs.integers(1, 4)), draw(hs.integers(1, 4))
        lt = draw(hs.sampled_from(LEVEL_TYPES[:6]))
        return E % (
            f"{{ib, jb, ii, jj}}({i} = ib * {a} + ii, {j} = jb * {b} + jj) -> (ib = {i} floordiv {a} : dense, "
            f"jb = {j} floordiv {b} : {lt}, ii = {i} mod {a} : dense, jj = {j} mod {b} : dense)"
        )
    exprs: list[str] = []
    tails: list[str] = []
    for d in draw(hs.permutations([0, 1])):
        name = names[d]
        shape = draw(hs.sampled_from(["plain", "plain", "plain", "block", "shift", "scaled", "ceil", "huge"]))
        if shape == "block":
            c = draw(hs.integers(1, 5))
            exprs.append(f"{name} floordiv {c}")
            tails.append(f"{name} mod {c}")
        elif shape == "shift":
            exprs.append(f"{name} + {draw(hs.integers(0, 3))}")
        elif shape == "scaled":
            exprs.append(f"{name} * {draw(hs.integers(1, 3))}")
        elif shape == "ceil":
            exprs.append(f"{name} ceildiv {draw(hs.integers(1, 3))}")
        elif shape == "huge":
            exprs.append(f"{name} * {draw(hs.sampled_from([2**31, 2**62, 2**63 - 1]))}")
        else:
            exprs.append(name)
    exprs += tails
    types = [draw(hs.sampled_from(LEVEL_TYPES)) for _ in exprs]
    for k in range(1, len(types)):
        if types[k].startswith("singleton") and draw(hs.booleans()):
            types[k - 1] = "compressed(nonunique)"  # mostly valid COO, sometimes not
    levels = ", ".join(f"{e} : {t}" for e, t in zip(exprs, types))
    dims = [i, j]
    for d in range(2):
        if draw(hs.integers(0, 5)) == 0:
            offset, size, stride = (
                draw(hs.integers(0, 2)),
                draw(hs.sampled_from(["?", "1", "3"])),
                draw(hs.integers(1, 2)),
            )
            dims[d] += f" : #sparse_tensor<slice({offset}, {size}, {stride})>"
    return E % (f"({', '.join(dims)}) -> ({levels})" + widths)


def _expected(A: scipy.sparse.csr_matrix, enc: SparseTensorEncoding) -> np.ndarray:
    """The dense tensor the storage holds: A, or its slice view."""
    dense = A.toarray()
    for d, sl in enumerate(enc.dim_slices):
        if sl is None:
            continue
        offset, stride = sl.offset or 0, sl.stride or 1
        size = sl.size if sl.size is not None else max(0, -(-(dense.shape[d] - offset) // stride))
        index = [slice(None)] * 2
        index[d] = slice(offset, offset + size * stride, stride)
        dense = dense[tuple(index)]
    return dense


def _store_or_raise(A: scipy.sparse.csr_matrix, text: str) -> None:
    """to_storage raises a named error, or its storage gives A back (to_scipy and to_dense)."""
    enc = _parse(text)
    if enc is None:
        event("does not parse")
        return
    try:
        st = sp.to_storage(A, enc)
    except (sp.EncodingError, sp.InputError) as e:
        event(f"not stored: {str(e).split(':')[0][:40]}")
        return
    event("stored")
    assert st.values.shape[0] == st.nse
    str(st)
    expected = _expected(A, enc)
    if enc.lvl_to_dim is None:
        try:
            st.to_scipy()
        except sp.EncodingError as e:
            assert "no inverse" in str(e)
            return
    np.testing.assert_array_equal(st.to_scipy().toarray(), expected)
    np.testing.assert_array_equal(st.to_dense(), expected)


@fuzz(120)
@given(A=csr_matrices(max_rows=9, max_cols=9), text=matrix_encodings())
def test_drawn_encodings_store_or_raise_a_named_error(A, text):
    _store_or_raise(A, text)


@fuzz(80)
@given(A=csr_matrices(max_rows=7, max_cols=7), text=mutated_texts())
def test_mutated_encodings_store_or_raise_a_named_error(A, text):
    _store_or_raise(A, text)


@fuzz(40)
@given(
    rows=hs.sampled_from([1, 3, 2**20, 2**31, 2**40, 2**62]),
    cols=hs.sampled_from([1, 5, 2**20, 2**33, 2**62]),
    text=matrix_encodings(),
)
def test_huge_shapes_store_or_raise_a_named_error(rows, cols, text):
    """One element in a corner of a huge matrix: never a numpy size error, never a wrapped
    coordinate; what to_storage accepts reads back at the right place."""
    A = scipy.sparse.coo_matrix(([2.5], ([rows - 1], [cols - 1])), shape=(rows, cols))
    enc = _parse(text)
    if enc is None:
        return
    try:
        st = sp.to_storage(A, enc)
    except (sp.EncodingError, sp.InputError):
        return
    str(st)
    try:
        back = st.to_scipy().tocoo()
    except sp.EncodingError:
        return  # no inverse, or a CSR row pointer too large to build
    expected = scipy.sparse.coo_matrix(_expected_coo(A, enc))
    assert sorted(zip(back.row.tolist(), back.col.tolist(), back.data.tolist())) == sorted(
        zip(expected.row.tolist(), expected.col.tolist(), expected.data.tolist())
    )


def _expected_coo(A: scipy.sparse.coo_matrix, enc: SparseTensorEncoding) -> scipy.sparse.coo_matrix:
    """A's single element after the encoding's slices (dropped when a slice leaves it out)."""
    r, c, shape = int(A.row[0]), int(A.col[0]), list(A.shape)
    at = [r, c]
    keep = True
    for d, sl in enumerate(enc.dim_slices):
        if sl is None:
            continue
        offset, stride = sl.offset or 0, sl.stride or 1
        size = sl.size if sl.size is not None else max(0, -(-(shape[d] - offset) // stride))
        rel = at[d] - offset
        keep &= rel >= 0 and rel % stride == 0 and rel // stride < size
        at[d], shape[d] = rel // stride, size
    data = [2.5] if keep else []
    rows, cols = ([at[0]], [at[1]]) if keep else ([], [])
    return scipy.sparse.coo_matrix((data, (rows, cols)), shape=tuple(shape))
