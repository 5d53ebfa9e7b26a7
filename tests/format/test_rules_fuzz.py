"""Rule files, index maps and format parameters never crash and never give a silently wrong result.

Each finding of issue 21 about formats has a test here: index maps that are not inverses, the
bounds of the parameters (`num_col_parts`, buckets, sizes within the index dtype, numpy integers),
a rule file's module-level `convert` (used, and checked), and a rule file's mistakes as
`FormatError`s naming the rule or the file. Then bounded fuzz suites (`fuzz(n)`: seeded, cheap)
over drawn index maps, parameters and converted arrays: each case either raises `FormatError` or
converts to arrays that the decomposed SpMM (through the interpreter, with B = I) turns back into
A exactly. Only a handful of `sp.ops` calls compile a kernel, and those reuse it.
"""

from __future__ import annotations

import textwrap
import time

import numpy as np
import pytest
import scipy.sparse
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st
from strategies import csr_matrices

import format_rules
import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.ops import spmm_script


def pairs_format(dtype: str = "float64", idtype: str = "int32"):
    """The tutorial's row pairs: rows grouped two by two, the columns either row stores."""

    @T.prim_func
    def pairs(a: T.handle, indptr: T.handle, indices: T.handle, mp: T.int32, n: T.int32, nnz: T.int32):
        IO = T.dense_fixed(mp, idtype)
        J = T.sparse_variable(IO, (n, nnz), (indptr, indices), idtype)
        II = T.dense_fixed(2, idtype)
        A = T.match_sparse_buffer(a, (IO, J, II), dtype)

    return pairs


def csr_format(dtype: str = "float64", idtype: str = "int32"):
    @T.prim_func
    def csr(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)

    return csr


PAIRS = pairs_format()
CSR = csr_format()
PAIRS_IDX = lambda i, j: (i // 2, j, i % 2)  # noqa: E731


def pairs_rule(inv, idx=PAIRS_IDX, name="pairs"):
    return sp.FormatRewriteRule(
        name, PAIRS, ["A"], ["I", "J"], ["IO", "J", "II"], {"I": ["IO", "II"], "J": ["J"]}, idx, inv
    )


def csr_rule(idx, inv, name="re"):
    return sp.FormatRewriteRule(name, CSR, ["A"], ["I", "J"], ["I", "J"], {"I": ["I"], "J": ["J"]}, idx, inv)


def karate():
    """The karate graph with distinct values (a value in a wrong slot shows)."""
    A = sp.data.load_matrix("karate").astype(np.float64)
    A.data = np.arange(1, A.nnz + 1) / 8
    return A


def computed(A, rules, arrays) -> np.ndarray:
    """The dense matrix that the decomposed SpMM computes from `arrays` (B = I), interpreted."""
    idtype = str(np.dtype(rules[0].new_format_desc.axes[0].idtype))
    mod = sp.remove_preprocess(sp.decompose_format(spmm_script(idtype, "float64"), rules))
    m, n = A.shape
    C = np.full((m, n), np.nan)
    values = {f"{b.data.name}_{r.name}" for r in rules for b in r.new_format_desc.buffers}
    # `convert` checks values, not their dtype: a caller casts them to the format's, as sp.ops does.
    arrays = {k: np.asarray(v, np.float64) if k in values else v for k, v in arrays.items()}
    args = {"b": np.eye(n), "c": C, "m": m, "n": n, "feat": n, **arrays}
    names = {p.name for p in mod["main"].params}
    sp.interpret(mod, **{k: v for k, v in args.items() if k in names})
    return C


def converts_exactly(A, rules) -> bool:
    """True when the rules convert A into arrays that compute A; False on a FormatError."""
    try:
        arrays = sp.format.convert(A, rules)
    except sp.FormatError:
        return False
    np.testing.assert_array_equal(computed(A, rules, arrays), A.toarray())
    return True


# -------------------------------------------------------------------- index maps that are not inverses
BAD_INVERSES = {
    "flipped": lambda io, j, ii: (io * 2 + 1 - ii, j),
    "shifted": lambda io, j, ii: (io * 2 + ii + 1, j),
    "constant": lambda io, j, ii: (0, j),
    "stride 3": lambda io, j, ii: (io * 3 + ii, j),
}


@pytest.mark.parametrize("name", sorted(BAD_INVERSES))
def test_an_inverse_that_does_not_undo_idx_map_is_refused(name):
    with pytest.raises(sp.FormatError, match=r"rule `pairs`: inv_idx_map does not undo idx_map: idx_map\(\d+, \d+\)"):
        pairs_rule(BAD_INVERSES[name])


def test_the_right_inverse_is_proven():
    assert pairs_rule(lambda io, j, ii: (io * 2 + ii, j)).inverse_proven
    assert all(r.inverse_proven for r in format_rules.hyb.rules(None, 2, [1, 2]))
    assert format_rules.bsr.rules(3)[0].inverse_proven


def test_an_inverse_wrong_only_past_the_grid_is_checked_on_the_matrix():
    """`i % 32` comes back for the rows the construction tries, not for row 33: the conversion of a
    matrix that stores row 33 names it."""
    rule = csr_rule(lambda i, j: (i % 32, j), lambda i, j: (i, j))
    assert not rule.inverse_proven
    small = scipy.sparse.random(20, 6, density=0.5, format="csr", random_state=0)
    assert converts_exactly(small, [rule])
    big = scipy.sparse.csr_matrix(([1.0, 2.0], ([3, 33], [1, 2])), shape=(40, 6))
    with pytest.raises(sp.FormatError, match=r"rule `re`: inv_idx_map does not undo idx_map: idx_map\(33, 2\)"):
        sp.format.convert(big, [rule])
    with pytest.raises(sp.FormatError, match="rule `re`"):
        sp.format.decompose(big, [rule])


def test_negative_coordinates_from_idx_map():
    rule = csr_rule(lambda i, j: (i - 1, j), lambda i, j: (i + 1, j))
    A = scipy.sparse.csr_matrix(([1.0, 2.0], ([0, 3], [1, 2])), shape=(5, 4))
    with pytest.raises(sp.FormatError, match=r"rule `re`: idx_map takes A's nonzero at \(0, 1\) to \(-1, 1\)"):
        sp.format.convert(A, [rule])
    # Without row 0 the same rule is fine.
    assert converts_exactly(scipy.sparse.csr_matrix(([2.0], ([3], [2])), shape=(5, 4)), [rule])


PAIRS_FILE = """
import sparsetir_py as sp
from sparsetir_py import script as T


def description(dtype="float32", idtype="int32"):
    @T.prim_func
    def pairs(a: T.handle, indptr: T.handle, indices: T.handle, mp: T.int32, n: T.int32, nnz: T.int32):
        IO = T.dense_fixed(mp, idtype)
        J = T.sparse_variable(IO, (n, nnz), (indptr, indices), idtype)
        II = T.dense_fixed(2, idtype)
        A = T.match_sparse_buffer(a, (IO, J, II), dtype)

    return pairs


def rules(dtype="float32", idtype="int32"):
    return [sp.FormatRewriteRule("pairs", description(dtype, idtype), ["A"], ["I", "J"], ["IO", "J", "II"],
                                 {"I": ["IO", "II"], "J": ["J"]}, lambda i, j: (i // 2, j, i % 2), INVERSE)]
"""


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_tutorials_pairs_format_end_to_end(tmp_path):
    """Right: sp.ops equals scipy; wrong: sp.ops and decompose raise instead of differing."""
    good = format_rules.load(write(tmp_path, "pairs.py", PAIRS_FILE + "INVERSE = lambda io, j, ii: (io * 2 + ii, j)\n"))
    bad = format_rules.load(write(tmp_path, "bad.py", PAIRS_FILE + "INVERSE = lambda io, j, ii: (io*2 + 1 - ii, j)\n"))
    A = karate().astype(np.float32)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 4)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format=good), A @ B, rtol=1e-5, atol=1e-5)
    assert (sp.format.decompose(A, good).reconstruct() != A).nnz == 0
    for call in (
        lambda: sp.ops.spmm(A, B, format=bad),
        lambda: sp.ops.sddmm(A, B[: A.shape[0]], B, format=bad),
        lambda: sp.format.decompose(A, bad),
    ):
        with pytest.raises(sp.FormatError, match="rule `pairs`: inv_idx_map does not undo idx_map"):
            call()


# -------------------------------------------------------------------- converters' output is checked
def with_converter(rules, arrays_of):
    return [r.replace(converter=arrays_of) for r in rules]


def test_a_converter_that_misplaces_values():
    """Values swapped between two slots: the slots' coordinates no longer hold them."""
    A = karate()
    (rule,) = format_rules.bsr.rules(2, dtype="float64")
    good = rule.converter(A)
    swapped = dict(good)
    a = good["a_bsr"].copy().reshape(-1)
    nz = np.flatnonzero(a)
    a[nz[0]], a[nz[1]] = a[nz[1]], a[nz[0]]
    swapped["a_bsr"] = a.reshape(good["a_bsr"].shape)
    (rule,) = with_converter([rule], lambda M: swapped)
    with pytest.raises(sp.FormatError, match=r"rule `bsr`: the slot of `A` at \(IO=0, JO=0, II=\d, JI=\d\) holds"):
        sp.format.convert(A, [rule])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("a_pad"), "gives no `a_pad`"),
        (lambda d: d.update(indices_pad=d["indices_pad"].astype(np.float64)), "must have dtype int32"),
        (lambda d: d.update(indices_pad=d["indices_pad"][::-1].copy()), "not strictly increasing|outside"),
        (lambda d: d.update(indptr_pad=d["indptr_pad"][::-1].copy()), "must start at 0|decreases"),
        (lambda d: d.update(nnz_pad=d["nnz_pad"] + 1), "must have length|must end at nnz"),
        (lambda d: d.update(a_pad=list(d["a_pad"])), "must be a numpy array"),
        (lambda d: d.update(a_pad=np.zeros_like(d["a_pad"])), "where A stores a nonzero|is in no part"),
        (lambda d: d.update(m_pad="34"), "must be an integer"),
    ],
)
def test_a_converter_that_returns_garbage(mutate, message):
    A = karate()
    (rule,) = format_rules.padding.rules(4, dtype="float64")
    arrays = rule.converter(A)
    mutate(arrays)
    (rule,) = with_converter([rule], lambda M: arrays)
    with pytest.raises(sp.FormatError, match=f"rule `pad`.*({message})"):
        sp.format.convert(A, [rule])


def test_a_converter_that_raises_or_returns_no_dict():
    A = karate()
    (rule,) = format_rules.padding.rules(4)
    (rule,) = with_converter([rule], lambda M: 1 / 0)
    with pytest.raises(sp.FormatError, match="rule `pad`: its converter failed: ZeroDivisionError"):
        sp.format.convert(A, [rule])
    (rule,) = with_converter([rule], lambda M: [1, 2])
    with pytest.raises(sp.FormatError, match="rule `pad`: its converter must return a dict"):
        sp.format.convert(A, [rule])


def test_a_nonzero_in_two_parts_or_in_none():
    A = karate()
    rules = format_rules.ell.rules(A, [1, 2, 4, 32], dtype="float64")
    good = rules[0].converter(A)
    empty = {"a_ell32": np.zeros(0), "indptr_ell32": np.zeros(2, np.int32), "rows_ell32": np.zeros(0, np.int32),
             "cols_ell32": np.zeros(0, np.int32), "nrows_ell32": 0}  # fmt: skip
    rules = with_converter(rules, lambda M: {**good, **empty})
    with pytest.raises(sp.FormatError, match=r"A's nonzero at \(\d+, \d+\) is in no part"):
        sp.format.convert(A, rules)
    twice = [csr_rule(lambda i, j: (i, j), lambda i, j: (i, j), name) for name in ("x", "y")]
    csr = {"a": A.data, "indptr": A.indptr, "indices": A.indices, "m": 34, "n": 34, "nnz": A.nnz}
    twice = with_converter(twice, lambda M: {f"{k}_{r}": v for k, v in csr.items() for r in ("x", "y")})
    with pytest.raises(sp.FormatError, match=r"A's nonzero at \(0, 1\) is stored 2 times \(first by rule `x`\)"):
        sp.format.convert(A, twice)


# -------------------------------------------------------------------- a rule file's own convert
ELL_WITHOUT_CONVERTER_LINES = """
from sparsetir_py.format import converters as formats
from format_rules.hyb import part_rule


def rules(A=None, buckets=None, dtype="float32", idtype="int32"):
    widths = formats.check_buckets(buckets if buckets is not None else formats.default_buckets(A))
    return [part_rule(f"ell{w}", w, dtype, idtype) for w in widths]


def convert(A, buckets=None, dtype="float32", idtype="int32"):
    widths = formats.check_buckets(buckets if buckets is not None else formats.default_buckets(A))
    out = {}
    for w, arrays in zip(widths, formats.to_ell_parts(A, widths, 1, idtype, dtype)):
        out.update(formats.renamed(arrays, f"ell{w}"))
    return CORRUPT(out)


CORRUPT = lambda out: out
"""


def test_a_rule_files_convert_is_used(tmp_path):
    module = format_rules.load(write(tmp_path, "myell.py", ELL_WITHOUT_CONVERTER_LINES))
    A = karate().astype(np.float32)
    B = np.random.default_rng(2).standard_normal((A.shape[1], 3)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, format=module, buckets=[1, 2, 4]), A @ B, rtol=1e-5, atol=1e-5)
    d = sp.format.decompose(A, module, buckets=[1, 2, 4])
    assert (d.reconstruct() != A).nnz == 0 and [p.name for p in d.parts] == ["ell1", "ell2", "ell4"]


def test_a_rule_files_convert_that_raises_or_lies(tmp_path):
    A = karate().astype(np.float32)
    B = np.ones((A.shape[1], 2), np.float32)
    raising = format_rules.load(
        write(tmp_path, "raising.py", ELL_WITHOUT_CONVERTER_LINES + "CORRUPT = lambda out: out['nope']\n")
    )
    with pytest.raises(sp.FormatError, match="its converter failed: KeyError"):
        sp.ops.spmm(A, B, format=raising, buckets=[64])
    lying = format_rules.load(
        write(tmp_path, "lying.py", ELL_WITHOUT_CONVERTER_LINES + "CORRUPT = lambda out: {**out, 'm_ell64': 3}\n")
    )
    with pytest.raises(sp.FormatError, match="rule `ell64`"):
        sp.ops.spmm(A, B, format=lying, buckets=[64])


# -------------------------------------------------------------------- rule-file mistakes
RULES_RETURNING = """
def rules():
    return VALUE
"""


@pytest.mark.parametrize(
    ("value", "message"),
    [("['x']", r"gave 'x' \(str\), not a FormatRewriteRule"), ("None", "must return a list"), ("[]", "gave no rule")],
)
def test_rules_returning_non_rules(tmp_path, value, message):
    module = format_rules.load(write(tmp_path, "odd.py", RULES_RETURNING.replace("VALUE", value)))
    with pytest.raises(sp.FormatError, match=f"format `.*odd.*`: rules\\(\\) {message}"):
        sp.format.decompose(karate(), module)
    with pytest.raises(sp.FormatError, match=message):
        sp.ops.spmm(karate(), np.ones((34, 2)), format=module)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def rules(:\n    pass\n", r"bad_file\.py:1:\d+: syntax error in the rule file"),
        ("import no_such_module_here\n", r"bad_file\.py:1: the rule file raised ModuleNotFoundError"),
        ("x = 1\ny = 1 / 0\n", r"bad_file\.py:2: the rule file raised ZeroDivisionError"),
        ("def rules():\n    return []\nconvert = 3\n", "defines `convert`, but not as a function"),
    ],
)
def test_load_errors_name_the_file_and_line(tmp_path, text, message):
    with pytest.raises(sp.FormatError, match=message):
        format_rules.load(write(tmp_path, "bad_file.py", text))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("axis_map", None, "axis_map must be a dict"),
        ("axis_map", {"I": None, "J": ["J"]}, r"axis_map\['I'\] must be a list of names"),
        ("axis_map", {1: ["IO"]}, "axis_map's keys must be axis names"),
        ("axes_after_rewrite", None, "axes_after_rewrite must be a list of names"),
        ("axes_after_rewrite", ["IO", "J"], "`A` of `pairs` is over `IO`, `J`, `II`, but axes_after_rewrite is"),
        ("buffers_to_rewrite", "A", "buffers_to_rewrite must be a list of names"),
        ("idx_map", lambda i: (i, i, i), "idx_map must take 2 coordinates"),
        ("idx_map", lambda i, j: (i * j, j, i), "idx_map must be affine"),
        ("idx_map", lambda i, j: (i, j), "idx_map must return 3 coordinates"),
        ("idx_map", lambda i, j: (i, j, 0.5), r"idx_map returned 0\.5"),
        ("inv_idx_map", "d0", "inv_idx_map must be a callable"),
    ],
)
def test_rule_fields_of_the_wrong_kind(field, value, message):
    fields = dict(
        name="pairs",
        new_format_desc=PAIRS,
        buffers_to_rewrite=["A"],
        axes_before_rewrite=["I", "J"],
        axes_after_rewrite=["IO", "J", "II"],
        axis_map={"I": ["IO", "II"], "J": ["J"]},
        idx_map=PAIRS_IDX,
        inv_idx_map=lambda io, j, ii: (io * 2 + ii, j),
    )
    fields[field] = value
    with pytest.raises(sp.FormatError, match=f"rule `pairs`: {message}"):
        sp.FormatRewriteRule(*fields.values())


def test_a_narrow_matrix_takes_a_few_column_parts():
    """Column parts past the columns are empty: up to 4 on a matrix of fewer columns, no more."""
    A = scipy.sparse.csr_matrix(np.array([[1.0], [0.0], [2.0]]))
    for parts in (1, 2, 4):
        assert (sp.format.decompose(A, format_rules.hyb, num_col_parts=parts, buckets=[1]).reconstruct() != A).nnz == 0
    with pytest.raises(sp.FormatError, match="num_col_parts must be at most 4"):
        sp.format.decompose(A, format_rules.hyb, num_col_parts=5, buckets=[1])


def test_numpy_integers_are_integers():
    two = np.int64(2)
    rule = pairs_rule(lambda io, j, ii: (io * two + ii, j), lambda i, j: (i // two, j, i % two))
    assert rule.inverse_proven
    A = karate()
    d = sp.format.decompose(A, format_rules.bsr, block_size=np.int64(2))
    assert (d.reconstruct() != A).nnz == 0
    d = sp.format.decompose(A, format_rules.hyb, num_col_parts=np.int32(2), buckets=np.array([1, 4]))
    assert (d.reconstruct() != A).nnz == 0


# -------------------------------------------------------------------- parameter bounds
BAD_PARAMETERS = [
    ("bsr", {"block_size": 0}, "block_size must be a positive integer"),
    ("bsr", {"block_size": -2}, "block_size must be a positive integer"),
    ("bsr", {"block_size": 2.0}, "block_size must be a positive integer"),
    ("bsr", {"block_size": True}, "block_size must be a positive integer"),
    ("bsr", {"block_size": "2"}, "block_size must be a positive integer"),
    ("bsr", {"block_size": 2**40}, "block_size must be at most"),
    ("bsr", {"block_size": 2**20}, "more than int32 holds"),
    ("padding", {"pad_size": 2**40}, "pad_size must be at most"),
    ("padding", {"pad_size": 2**31 - 5}, "more than int32 holds"),
    ("padding", {"pad_size": None}, "pad_size must be a positive integer"),
    ("ell", {"buckets": "12"}, "buckets must be a non-empty list"),
    ("ell", {"buckets": [1.5]}, "a bucket width must be a positive integer"),
    ("ell", {"buckets": [True]}, "a bucket width must be a positive integer"),
    ("ell", {"buckets": []}, "buckets must be a non-empty list"),
    ("ell", {"buckets": [3]}, "powers of two"),
    ("ell", {"buckets": [2, 2]}, "powers of two"),
    ("ell", {"buckets": [0]}, "a bucket width must be a positive integer"),
    ("ell", {"buckets": [2**40]}, "a bucket width must be at most"),
    ("hyb", {"num_col_parts": 1000, "buckets": [1]}, r"num_col_parts must be at most 7 \(the matrix's columns"),
    ("hyb", {"num_col_parts": 8, "buckets": [1, 2, 4, 8]}, "num_col_parts must be at most 7"),
    ("hyb", {"num_col_parts": 0, "buckets": [1]}, "num_col_parts must be a positive integer"),
    ("hyb", {"num_col_parts": "2", "buckets": [1]}, "num_col_parts must be a positive integer"),
    ("hyb", {"num_col_parts": 2.0, "buckets": [1]}, "num_col_parts must be a positive integer"),
]


@pytest.mark.parametrize(("fmt", "params", "message"), BAD_PARAMETERS)
def test_bad_parameters_are_format_errors_before_any_work(fmt, params, message):
    A = scipy.sparse.random(9, 7, density=0.4, format="csr", random_state=3, dtype=np.float32)
    start = time.perf_counter()
    with pytest.raises(sp.FormatError, match=message):
        sp.format.decompose(A, format_rules.SHIPPED[fmt], **params)
    with pytest.raises(sp.FormatError, match=message):
        sp.ops.spmm(A, np.ones((7, 2), np.float32), format=fmt, **params)
    assert time.perf_counter() - start < 2


# -------------------------------------------------------------------- fuzz: drawn index maps
def affine(draw, arity: int, dims: list[str]):
    """A drawn affine callable of `arity` coordinates: a combination with small coefficients,
    sometimes floordiv / mod by a small constant."""
    coeffs = [draw(st.integers(-2, 3)) for _ in range(arity)]
    offset = draw(st.integers(-2, 2))
    op = draw(st.sampled_from(["", "//", "%"]))
    k = draw(st.integers(1, 4))

    def fn(*xs):
        total = offset
        for c, x in zip(coeffs, xs):
            total = total + c * x
        return total // k if op == "//" else total % k if op == "%" else total

    return fn


@st.composite
def pairs_maps(draw):
    """idx_map / inv_idx_map of the pairs format: the right ones, or one coordinate mutated."""
    idx = [lambda i, j: i // 2, lambda i, j: j, lambda i, j: i % 2]
    inv = [lambda io, j, ii: io * 2 + ii, lambda io, j, ii: j]
    which = draw(st.sampled_from(["none", "idx", "inv"]))
    if which == "idx":
        idx[draw(st.integers(0, 2))] = affine(draw, 2, ["i", "j"])
    elif which == "inv":
        inv[draw(st.integers(0, 1))] = affine(draw, 3, ["io", "j", "ii"])
    return (lambda i, j: tuple(f(i, j) for f in idx)), (lambda io, j, ii: tuple(f(io, j, ii) for f in inv))


@fuzz(60)
@given(maps=pairs_maps(), A=csr_matrices(max_rows=9, max_cols=7, value_dtypes=("float64",), index_dtypes=("int32",)))
def test_fuzz_mutated_index_maps(maps, A):
    """A rule either is refused (at construction or conversion) or computes A exactly."""
    idx, inv = maps
    try:
        rule = pairs_rule(inv, idx)
    except sp.FormatError:
        return
    if converts_exactly(A, [rule]):
        d = sp.format.decompose(A, [rule])
        np.testing.assert_array_equal(d.reconstruct().toarray(), A.toarray())


@fuzz(40)
@given(
    A=csr_matrices(max_rows=9, max_cols=9, value_dtypes=("float64",), index_dtypes=("int32",)),
    idx=st.tuples(st.integers(-1, 2), st.integers(-2, 2), st.integers(-1, 2), st.integers(-2, 2)),
    inv=st.tuples(st.integers(-1, 2), st.integers(-2, 2), st.integers(-1, 2), st.integers(-2, 2)),
)
def test_fuzz_csr_relabellings(A, idx, inv):
    """Rows and columns relabelled by drawn affine maps: refused, or exact."""
    a, b, c, d = idx
    e, f, g, h = inv
    try:
        rule = csr_rule(lambda i, j: (a * i + b, c * j + d), lambda i, j: (e * i + f, g * j + h))
    except sp.FormatError:
        return
    converts_exactly(A, [rule])


# -------------------------------------------------------------------- fuzz: drawn parameters
SIZES = st.one_of(
    st.integers(-2, 9),
    st.sampled_from([2**31 - 1, 2**31, 2**40, 2**63]),
    st.integers(1, 6).map(np.int64),
    st.sampled_from([0.5, 2.0, float("nan"), "3", None, True, False, [2], np.float64(2.0)]),
)
BUCKETS = st.one_of(
    st.lists(st.sampled_from([1, 2, 4, 8, 16]), max_size=4),
    st.lists(st.one_of(st.integers(-1, 9), st.sampled_from([1.0, 2.5, "4", None, True, 2**40])), max_size=3),
    st.sampled_from(["12", 4, None, (1, 2), np.array([1, 2]), {1, 2}]),
)


@st.composite
def format_parameters(draw):
    fmt = draw(st.sampled_from(sorted(format_rules.SHIPPED)))
    if fmt == "bsr":
        return fmt, {"block_size": draw(SIZES)}
    if fmt == "padding":
        return fmt, {"pad_size": draw(SIZES)}
    if fmt == "ell":
        return fmt, {"buckets": draw(BUCKETS)}
    if fmt == "colparts":
        return fmt, {"num_col_parts": draw(SIZES), "row_blocks": draw(SIZES)}
    return fmt, {"num_col_parts": draw(SIZES), "buckets": draw(BUCKETS)}


@fuzz(80)
@given(p=format_parameters(), A=csr_matrices(max_rows=9, max_cols=9))
def test_fuzz_format_parameters(p, A):
    """Drawn parameters: a FormatError, or parts that hold exactly A's nonzeros."""
    fmt, params = p
    try:
        d = sp.format.decompose(A, format_rules.SHIPPED[fmt], **params)
    except sp.FormatError:
        return
    np.testing.assert_array_equal(d.reconstruct().toarray(), A.toarray())
    assert sum(part.nnz for part in d.parts) == A.nnz


# -------------------------------------------------------------------- fuzz: drawn converter output
def mutations(arrays: dict, draw) -> dict:
    out = dict(arrays)
    key = draw(st.sampled_from(sorted(out)))
    value = out[key]
    kind = draw(st.sampled_from(["drop", "swap", "bump", "dtype", "scalar", "shorten", "list"]))
    if kind == "drop":
        del out[key]
    elif kind == "swap" and isinstance(value, np.ndarray) and value.size > 1:
        flat = value.reshape(-1).copy()
        i, j = draw(st.integers(0, flat.size - 1)), draw(st.integers(0, flat.size - 1))
        flat[i], flat[j] = flat[j], flat[i]
        out[key] = flat.reshape(value.shape)
    elif kind == "bump" and isinstance(value, np.ndarray) and value.size:
        flat = value.reshape(-1).copy()
        flat[draw(st.integers(0, flat.size - 1))] += draw(st.sampled_from([-1, 1, 7]))
        out[key] = flat.reshape(value.shape)
    elif kind == "dtype" and isinstance(value, np.ndarray):
        out[key] = value.astype(draw(st.sampled_from([np.int64, np.float32, np.int16, np.bool_])))
    elif kind == "scalar" and not isinstance(value, np.ndarray):
        out[key] = draw(st.sampled_from([value + 1, value - 1, -1, 0, 2**40, "x", None, 1.5]))
    elif kind == "shorten" and isinstance(value, np.ndarray) and value.ndim == 1:
        out[key] = value[:-1].copy()
    elif kind == "list" and isinstance(value, np.ndarray):
        out[key] = value.tolist()
    return out


@fuzz(80)
@given(
    fmt=st.sampled_from(["bsr", "padding", "ell", "hyb"]),
    A=csr_matrices(max_rows=8, max_cols=8, value_dtypes=("float64",), index_dtypes=("int32",)),
    data=st.data(),
)
def test_fuzz_converter_output(fmt, A, data):
    """A converter's arrays mutated: refused by `convert`, or still computing A exactly."""
    module = format_rules.SHIPPED[fmt]
    params = {"bsr": {"block_size": 2}, "padding": {"pad_size": 3}, "ell": {"buckets": [1, 4]}}.get(
        fmt, {"num_col_parts": min(2, max(A.shape[1], 1)), "buckets": [1, 2]}
    )
    rules = sp.format.rules_of(module, A, params, "float64", "int32")
    arrays = rules[0].converter(A)
    mutated = mutations(arrays, data.draw)
    rules = with_converter(rules, lambda M: mutated)
    converts_exactly(A, rules)


# -------------------------------------------------------------------- a few operator calls
def test_hyb_with_many_column_parts_compiles_what_it_uses():
    """8 column parts x 4 buckets on a small matrix: only the parts that store a nonzero are
    compiled (each costs compile time); more column parts than columns is a FormatError."""
    A = scipy.sparse.random(9, 7, density=0.3, format="csr", random_state=4, dtype=np.float32)
    with pytest.raises(sp.FormatError, match="num_col_parts must be at most 7"):
        sp.ops.spmm(A, np.ones((7, 2), np.float32), format="hyb", num_col_parts=8, buckets=[1])
    from sparsetir_py.ops import parts

    params = {"num_col_parts": 7, "buckets": [1, 2, 4, 8]}
    rules = parts.converted(format_rules.hyb, A, params, "float32", "int32").rules
    assert 0 < len(rules) <= A.nnz < 7 * 4


# -------------------------------------------------------------------- fuzz: drawn rule fields
JUNK = [None, 3, -1, 2.5, "x", "", [], [1], ["I", 1], {"I": 1}, {"I": ["IO"]}, (), b"A", np.int64(1), object(),
        lambda: 0, lambda *xs: xs, lambda i, j: (i, j), lambda io, j, ii: (io, j)]  # fmt: skip
GOOD_FIELDS = [
    "pairs",
    PAIRS,
    ["A"],
    ["I", "J"],
    ["IO", "J", "II"],
    {"I": ["IO", "II"], "J": ["J"]},
    PAIRS_IDX,
    lambda io, j, ii: (io * 2 + ii, j),
]


@fuzz(100)
@given(data=st.data())
def test_fuzz_rule_fields(data):
    """Any field replaced by junk: a FormatError at construction or at decomposition, or a rule
    that decomposes SpMM."""
    fields = list(GOOD_FIELDS)
    for k in data.draw(st.sets(st.integers(0, 7), max_size=3), "fields"):
        fields[k] = data.draw(st.sampled_from(JUNK), f"field {k}")
    try:
        rule = sp.FormatRewriteRule(*fields)
        sp.decompose_format(spmm_script(), [rule])
    except sp.FormatError:
        pass


def test_indexing_maps_as_index_maps():
    """`sparsetir_py.arith` indexing maps work as callables do: checked, inferred, exact."""
    from sparsetir_py.arith import parse_indexing_map

    idx = parse_indexing_map("(d0, d1) -> (d0 floordiv 2, d1, d0 mod 2), domain: d0 in [0, 99], d1 in [0, 99]")
    inv = parse_indexing_map("(d0, d1, d2) -> (d0 * 2 + d2, d1), domain: d0 in [0, 49], d1 in [0, 99], d2 in [0, 1]")
    rule = pairs_rule(inv, idx)
    assert rule.inverse_proven
    assert converts_exactly(karate(), [rule])
    bad = parse_indexing_map("(d0, d1, d2) -> (d0 * 2 - d2 + 1, d1), domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 1]")
    with pytest.raises(sp.FormatError, match="inv_idx_map does not undo idx_map"):
        pairs_rule(bad, idx)
