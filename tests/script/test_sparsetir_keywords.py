"""SparseTIR's Stage II/III keywords, with the meaning SparseTIR gives them.

- `T.assume_buffer_domain(X, [lo, hi])`: every value of `X` lies in the domain; it is `X`'s
  `value_range=(lo, hi)` (bounds inclusive: SparseTIR writes `[0, nnz]` for an indptr).
- `extra_storage=e` on a sparse buffer: `e` more elements after the axes' own, read by flat
  position (`J_indptr` over `[I]` holds `m + 1`; `K_indptr` over `[I, J]` is read at `vj + 1`).
- `strides=` on a flat buffer: accepted where it describes a compact layout (row-major, or for a
  constant shape a permuted order, which is that `layout=`), refused otherwise with what to write.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py.ir.verify import BufferDeclarationError

HEADER = """
from sparsetir_py import script as T

@T.prim_func
def f(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
"""


def parse(body: str) -> sp.PrimFunc:
    return sp.from_script(HEADER + body)


def buffer(f: sp.PrimFunc, name: str):
    return next(b for b in f.buffers if b.name == name)


# ---------------------------------------------------------------------------------------------- assume_buffer_domain
DOMAIN = """    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_dense = T.dense_variable(I, (n, nnz), indptr, "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_buffer(b, (m,), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32"INDPTR_RANGE)
    J_indices = T.match_sparse_buffer(indices, (I, J_dense), "int32"INDICES_RANGE)
ASSUME    for i in T.serial(m):
        with T.block("rowsum"):
            vi = T.axis.spatial(m, i)
            T.reads(J_indptr[vi:vi + 2], A[vi, 0:n])
            T.writes(B[vi])
            B[vi] = T.float32(0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                B[vi] = B[vi] + A[vi, j]
"""


def domain_script(assume: str = "", indptr_range: str = "", indices_range: str = "") -> str:
    return (
        DOMAIN.replace("ASSUME", assume).replace("INDPTR_RANGE", indptr_range).replace("INDICES_RANGE", indices_range)
    )


def test_assume_buffer_domain_is_the_value_range():
    assumed = parse(
        domain_script("    T.assume_buffer_domain(J_indptr, [0, nnz])\n    T.assume_buffer_domain(J_indices, [0, n])\n")
    )
    written = parse(domain_script(indptr_range=", value_range=(0, nnz)", indices_range=", value_range=(0, n)"))
    sp.assert_structural_equal(assumed, written)
    lo, hi = buffer(assumed, "J_indptr").value_range
    assert (lo.value, hi.name) == (0, "nnz")
    sp.assert_structural_equal(sp.from_script(assumed.script()), assumed)
    sp.verify(assumed)
    A = scipy.sparse.random(5, 4, density=0.5, format="csr", random_state=2, dtype=np.float32)
    b = np.zeros(5, np.float32)
    sp.interpret(assumed, a=A.data, b=b, indptr=A.indptr, indices=A.indices, m=5, n=4, nnz=A.nnz)
    np.testing.assert_allclose(b, np.asarray(A.sum(axis=1)).ravel(), rtol=1e-6)


@pytest.mark.parametrize(
    "assume,message",
    [
        ("    T.assume_buffer_domain(C, [0, n])\n", "unknown name `C`"),
        ("    T.assume_buffer_domain(J_indptr, [0])\n", r"expected a pair `\(lo, hi\)`"),
        (
            "    T.assume_buffer_domain(J_indptr, [0, nnz])\n    T.assume_buffer_domain(J_indptr, [0, nnz])\n",
            "buffer `J_indptr` already has a value range; give it once",
        ),
    ],
)
def test_assume_buffer_domain_errors(assume, message):
    with pytest.raises(sp.FrontendError, match=message):
        parse(domain_script(assume))


def test_assume_buffer_domain_inside_the_body_is_refused():
    text = domain_script().replace(
        "            B[vi] = T.float32(0)\n", "            T.assume_buffer_domain(J_indptr, [0, nnz])\n", 1
    )
    with pytest.raises(sp.FrontendError, match="must be at the top level of the function"):
        parse(text)


# ---------------------------------------------------------------------------------------------- strides
FLAT = """    X = T.match_buffer(a, SHAPE, "float32"KEYWORDS)
    Y = T.match_buffer(b, (1,), "float32")
    Y[0] = X[0]
"""


def flat(shape: str, keywords: str = "") -> sp.PrimFunc:
    return parse(FLAT.replace("SHAPE", shape).replace("KEYWORDS", keywords))


@pytest.mark.parametrize(
    "shape,strides,layout",
    [
        ("(nnz,)", "[1]", ""),  # what SparseTIR prints for every one-dimensional buffer
        ("(m, n)", "[n, 1]", ""),  # row-major, symbolic
        ("(3, 4)", "[4, 1]", ""),
        ("(3, 4)", "(1, 3)", ", layout=T.layout((0, 1))"),  # column-major: a permuted compact order
        ("(2, 1, 5)", "[5, 5, 1]", ""),  # an extent-1 dimension may have any stride in between
        ("(2, 3, 4)", "[1, 8, 2]", ", layout=T.layout((0, 2, 1))"),
    ],
)
def test_compact_strides_are_a_layout(shape, strides, layout):
    got = flat(shape, f", strides={strides}")
    sp.assert_structural_equal(got, flat(shape, layout))
    sp.assert_structural_equal(sp.from_script(got.script()), got)


@pytest.mark.parametrize(
    "shape,keywords,message",
    [
        ("(m, n)", ", strides=[n + 1, 1]", r"`strides=\[n \+ 1, 1\]` of `X` does not describe a compact layout"),
        ("(3, 4)", ", strides=[8, 1]", "drop `strides=` for row-major, or give the dimension order as `layout="),
        ("(3, 4)", ", strides=[1]", r"`strides` of `X` needs one stride per dimension \(2\)"),
        ("(3, 4)", ", strides=[4, 1], layout=T.layout((1, 0))", "give `layout=` or `strides=`, not both"),
    ],
)
def test_other_strides_are_refused_with_the_alternative(shape, keywords, message):
    with pytest.raises(sp.FrontendError, match=message):
        flat(shape, keywords)


def test_strides_on_allocated_buffers():
    text = HEADER + (
        '    X = T.match_buffer(a, (4,), "float32")\n'
        "    for i in T.serial(4):\n"
        '        with T.block("b"):\n'
        "            vi = T.axis.spatial(4, i)\n"
        "            T.reads(X[vi])\n"
        "            T.writes(X[vi])\n"
        '            tmp = T.alloc_buffer([1], dtype="float32", strides=[1], scope="local")\n'
        "            tmp[0] = X[vi]\n"
        "            X[vi] = tmp[0] * T.float32(2)\n"
    )
    f = sp.from_script(text)
    assert sp.from_script(text.replace("strides=[1], ", "")) is not None
    sp.assert_structural_equal(f, sp.from_script(text.replace("strides=[1], ", "")))


# ---------------------------------------------------------------------------------------------- extra_storage
# A CSF tensor's row sums at Stage II, as SparseTIR's `square_sum` writes it: both indptr arrays are
# sparse buffers with one extra element, and `K_indptr[vi, vj + 1]` reads the next row's start.
CSF_SUM = """
from sparsetir_py import script as T

@T.prim_func
def csf_sum(a: T.handle, b: T.handle, indptr_j: T.handle, indices_j: T.handle, indptr_k: T.handle,
            indices_k: T.handle, nnz_j: T.int32, nnz_k: T.int32, m: T.int32, n1: T.int32, n2: T.int32):
    I = T.dense_fixed(m, "IDX")
    J = T.sparse_variable(I, (n1, nnz_j), (indptr_j, indices_j), "IDX")
    J_dense = T.dense_variable(I, (n1, nnz_j), indptr_j, "IDX")
    K = T.sparse_variable(J, (n2, nnz_k), (indptr_k, indices_k), "IDX")
    K_dense = T.dense_variable(J, (n2, nnz_k), indptr_k, "IDX")
    A = T.match_sparse_buffer(a, [I, J, K], dtype="VAL")
    B = T.match_sparse_buffer(b, [I], dtype="VAL")
    J_indptr = T.match_sparse_buffer(indptr_j, [I], dtype="IDX", extra_storage=1)
    J_indices = T.match_sparse_buffer(indices_j, [I, J_dense], dtype="IDX")
    K_indptr = T.match_sparse_buffer(indptr_k, [I, J_dense], dtype="IDX", extra_storage=1)
    K_indices = T.match_sparse_buffer(indices_k, [I, J, K_dense], dtype="IDX")
    T.assume_buffer_domain(J_indptr, [0, nnz_j])
    T.assume_buffer_domain(K_indptr, [0, nnz_k])
    for i in T.serial(m):
        with T.block("square_sum0"):
            vi = T.axis.spatial(m, i)
            T.reads(J_indptr[vi : vi + 2], K_indptr[vi, 0 : n1 + 1], A[vi, 0:n1, 0:n2])
            T.writes(B[vi])
            B[vi] = T.VAL(0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                with T.block("square_sum1"):
                    vj = T.axis.reduce(n1, j)
                    T.reads(K_indptr[vi, vj : vj + 2], A[vi, vj, 0:n2])
                    T.writes(B[vi])
                    for k in T.serial(K_indptr[vi, vj + 1] - K_indptr[vi, vj]):
                        with T.block("square_sum2"):
                            vk = T.axis.reduce(n2, k)
                            T.reads(A[vi, vj, vk])
                            T.writes(B[vi])
                            B[vi] = B[vi] + A[vi, vj, vk]
"""


def csf_args(dense: np.ndarray, idtype: str, dtype: str) -> dict:
    """A 3-level CSF tensor of `dense` (levels i dense, j and k compressed; a j is stored when its
    (i, j) fibre has a nonzero)."""
    m, n1, n2 = dense.shape
    indptr_j, indices_j, indptr_k, indices_k, values = [0], [], [0], [], []
    for i in range(m):
        for j in range(n1):
            ks = np.flatnonzero(dense[i, j])
            if ks.size:
                indices_j.append(j)
                indices_k.extend(ks)
                values.extend(dense[i, j, ks])
                indptr_k.append(len(indices_k))
        indptr_j.append(len(indices_j))
    return dict(
        a=np.array(values, dtype),
        b=np.full(m, np.nan, dtype),
        indptr_j=np.array(indptr_j, idtype),
        indices_j=np.array(indices_j, idtype),
        indptr_k=np.array(indptr_k, idtype),
        indices_k=np.array(indices_k, idtype),
        nnz_j=len(indices_j),
        nnz_k=len(indices_k),
        m=m,
        n1=n1,
        n2=n2,
    )


@pytest.mark.parametrize("idtype,dtype", [("int32", "float32"), ("int32", "float64")])
def test_extra_storage_indptr_views(idtype, dtype):
    """The indptr views hold one element more than their axes store (argument shapes m + 1 and
    nnz_j + 1), the Stage II interpreter reads `K_indptr[vi, vj + 1]` by flat position, and
    Stage II, Stage III and the CPU kernel all give the row sums."""
    f = sp.from_script(CSF_SUM.replace("IDX", idtype).replace("VAL", dtype))
    sp.verify(f)
    K_indptr = buffer(f, "K_indptr")
    assert K_indptr.extra_storage == ir.IntImm(1, "int32")
    assert "extra_storage=1" in f.script()
    sp.assert_structural_equal(sp.from_script(f.script()), f)
    f3 = sp.lower_sparse_buffer(f)["main"]
    sp.assert_structural_equal(sp.from_script(f3.script()), f3)
    rng = np.random.default_rng(4)
    dense = rng.uniform(-1, 1, (5, 4, 3)) * (rng.random((5, 4, 3)) < 0.4)
    dense[2] = 0  # a row with no fibre
    dense[3, 1] = 0  # an empty fibre
    want = dense.sum(axis=(1, 2))
    kernel = sp.build(f3, "cpu")
    for runner in (lambda **kw: sp.interpret(f, **kw), lambda **kw: sp.interpret(f3, **kw), kernel):
        kw = csf_args(dense, idtype, dtype)
        runner(**kw)
        np.testing.assert_allclose(kw["b"], want, rtol=1e-5)
    kw = csf_args(dense, idtype, dtype)
    kw["indptr_k"] = kw["indptr_k"][:-1]  # the extra element is part of the argument's shape
    with pytest.raises(sp.InputError, match="indptr_k"):
        sp.interpret(f, **kw)


def test_extra_storage_zero_is_none_and_negative_is_refused():
    body = """    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32"EXTRA)
    with T.sp_iter([I, J], "SS", "s") as [i, j]:
        A[i, j] = A[i, j] * T.float32(2)
"""
    sp.assert_structural_equal(parse(body.replace("EXTRA", ", extra_storage=0")), parse(body.replace("EXTRA", "")))
    with pytest.raises(sp.FrontendError, match="`extra_storage` must not be negative, got -1"):
        parse(body.replace("EXTRA", ", extra_storage=-1"))
    with pytest.raises(BufferDeclarationError, match="its storage is not one-dimensional"):
        sp.verify(
            parse(
                body.replace('"float32"EXTRA', '"float32"').replace(
                    "    with",
                    '    F = T.dense_fixed(4)\n    X = T.match_sparse_buffer(b, (I, J, F), "float32", '
                    "extra_storage=2)\n    with",
                )
            )
        )
