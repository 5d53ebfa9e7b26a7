"""`expand_encoded_buffers`: a buffer declared over its dimensions moves onto its encoding's levels.

Each test applies the pass to a hand-written `before` (SpMV over the dense dimensions `I`, `J`,
`A` declared plainly on them) with `A` under one encoding, and compares the result with a
hand-written `expected` by structural equality; the result verifies and prints back equal. The
frontend runs the same pass for `T.match_sparse_buffer(..., encoding=enc)`
(tests/format/test_encoded_kernels.py runs the kernels).
"""

from __future__ import annotations

import pytest

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.transform.expand_encoded_buffers import expand_encoded_buffers

E = "#sparse_tensor.encoding<{ map = %s, posWidth = 32, crdWidth = 32 }>"


@T.prim_func
def before(a: T.handle, x: T.handle, y: T.handle, m: T.int32, n: T.int32):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    X = T.match_sparse_buffer(x, (J,), "float32")
    Y = T.match_sparse_buffer(y, (I,), "float32")
    with T.sp_iter([I, J], "SR", "spmv") as [i, j]:
        with T.init():
            Y[i] = T.float32(0)
        Y[i] = Y[i] + A[i, j] * X[j]


def expand(text: str):
    func = expand_encoded_buffers(before, {before.buffers[0]: sp.parse_encoding(E % text)})
    sp.verify(func)
    sp.assert_structural_equal(func, sp.from_script(func.script()))
    return func


def test_csr_walks_the_rows_and_the_stored_columns():
    """CSR: the dense row level keeps the init in the iteration (every row is visited), the
    compressed level becomes a sparse_variable axis on new parameters `a_pos1`, `a_crd1`, `a_nnz1`."""

    @T.prim_func
    def expected(
        a: T.handle,
        x: T.handle,
        y: T.handle,
        m: T.int32,
        n: T.int32,
        a_pos1: T.handle,
        a_crd1: T.handle,
        a_nnz1: T.int32,
    ):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        A_l0 = T.dense_fixed(m)
        A_l1 = T.sparse_variable(A_l0, (n, a_nnz1), (a_pos1, a_crd1), "int32")
        A = T.match_sparse_buffer(a, (A_l0, A_l1), "float32")
        X = T.match_sparse_buffer(x, (J,), "float32")
        Y = T.match_sparse_buffer(y, (I,), "float32")
        with T.sp_iter([A_l0, A_l1], "SR", "spmv") as [a_l0, a_l1]:
            with T.init():
                Y[a_l0] = T.float32(0)
            Y[a_l0] = Y[a_l0] + A[a_l0, a_l1] * X[a_l1]

    sp.assert_structural_equal(expand("(i, j) -> (i : dense, j : compressed)"), expected)


def test_coo_gets_a_root_one_point_per_element_and_a_separate_init():
    """COO: the nonunique compressed rows hang under a root of length 1 (a dense_variable axis of
    the stored elements, each with one row coordinate), the singleton columns below; rows repeat or
    go missing, so the init moves to an iteration `spmv_init` over the old spatial axis."""

    @T.prim_func
    def expected(
        a: T.handle,
        x: T.handle,
        y: T.handle,
        m: T.int32,
        n: T.int32,
        a_pos0: T.handle,
        a_crd0: T.handle,
        a_nnz0: T.int32,
        a_crd1: T.handle,
    ):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        A_root = T.dense_fixed(1)
        A_l0_pos = T.dense_variable(A_root, (a_nnz0, a_nnz0), a_pos0, "int32")
        A_l0 = T.sparse_fixed(A_l0_pos, (m, 1), a_crd0, "int32")
        A_l1 = T.sparse_fixed(A_l0, (n, 1), a_crd1, "int32")
        A = T.match_sparse_buffer(a, (A_root, A_l0_pos, A_l0, A_l1), "float32")
        X = T.match_sparse_buffer(x, (J,), "float32")
        Y = T.match_sparse_buffer(y, (I,), "float32")
        with T.sp_iter([I], "S", "spmv_init") as [i]:
            Y[i] = T.float32(0)
        with T.sp_iter([A_root, A_l0_pos, A_l0, A_l1], "RRSR", "spmv") as [a_root, a_l0_pos, a_l0, a_l1]:
            Y[a_l0] = Y[a_l0] + A[a_root, a_l0_pos, a_l0, a_l1] * X[a_l1]

    sp.assert_structural_equal(expand("(i, j) -> (i : compressed(nonunique), j : singleton)"), expected)


def test_bsr_computes_dimensions_from_levels_and_guards_the_padding():
    """BSR 2x2: block rows and stored block columns, then the dense cells; each dimension is
    computed back from its levels (the encoding's inverse map) and a guard skips the cells past the
    shape; the init moves out (a row is not one level of its own)."""

    @T.prim_func
    def expected(
        a: T.handle,
        x: T.handle,
        y: T.handle,
        m: T.int32,
        n: T.int32,
        a_pos1: T.handle,
        a_crd1: T.handle,
        a_nnz1: T.int32,
    ):
        I = T.dense_fixed(m)
        J = T.dense_fixed(n)
        A_l0 = T.dense_fixed((m + 1) // 2)
        A_l1 = T.sparse_variable(A_l0, ((n + 1) // 2, a_nnz1), (a_pos1, a_crd1), "int32")
        A_l2 = T.dense_fixed(2)
        A_l3 = T.dense_fixed(2)
        A = T.match_sparse_buffer(a, (A_l0, A_l1, A_l2, A_l3), "float32")
        X = T.match_sparse_buffer(x, (J,), "float32")
        Y = T.match_sparse_buffer(y, (I,), "float32")
        with T.sp_iter([I], "S", "spmv_init") as [i]:
            Y[i] = T.float32(0)
        with T.sp_iter([A_l0, A_l1, A_l2, A_l3], "SRSR", "spmv") as [a_l0, a_l1, a_l2, a_l3]:
            if a_l0 * 2 + a_l2 < m and a_l1 * 2 + a_l3 < n:
                Y[a_l0 * 2 + a_l2] = Y[a_l0 * 2 + a_l2] + A[a_l0, a_l1, a_l2, a_l3] * X[a_l1 * 2 + a_l3]

    bsr = "(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)"
    sp.assert_structural_equal(expand(bsr), expected)


def test_no_encoded_buffer_leaves_the_function_as_it_is():
    assert expand_encoded_buffers(before, {}) is before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(i, j) -> (i : dense, j : loose_compressed)", "loose_compressed levels are not supported in scripts"),
        ("(i, j) -> (i : compressed, j floordiv 2 : dense, j mod 2 : compressed)", "lies below a dense level"),
        ("{a, b}(i = a, j = b - a) -> (a = i : dense, b = j + i : compressed)", "must be `i`, `i floordiv c`"),
    ],
)
def test_levels_a_script_cannot_walk_are_refused(text, message):
    with pytest.raises(sp.EncodingError, match=message):
        expand_encoded_buffers(before, {before.buffers[0]: sp.parse_encoding(E % text)})
