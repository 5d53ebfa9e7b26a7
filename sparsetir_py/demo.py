"""`make demo`: the project's main job, end to end on a real graph.

Until lowering and code generation land, it parses the SpMM and SDDMM scripts, prints them,
checks the reference interpreter against scipy on pubmed, and says what is not built yet.
"""

from __future__ import annotations

import time

import numpy as np

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.data import load_matrix


@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    with T.sp_iter([I, J, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = 0.0
        C[i, k] = C[i, k] + A[i, j] * B[j, k]


@T.prim_func
def sddmm(a: T.handle, x: T.handle, y: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    X = T.match_sparse_buffer(x, (I, K), "float32")
    Y = T.match_sparse_buffer(y, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, J), "float32")
    with T.sp_iter([I, J, K], "SSR", "sddmm") as [i, j, k]:
        with T.init():
            C[i, j] = 0.0
        C[i, j] = C[i, j] + A[i, j] * X[i, k] * Y[j, k]


def _time(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    A = load_matrix("pubmed")
    m, n = A.shape
    feat = 32
    rng = np.random.default_rng(0)
    print(f"pubmed: {m} x {n}, {A.nnz} nonzeros, feature width {feat}\n")

    for f in (csrmm, sddmm):
        sp.verify(f)
        assert sp.structural_equal(f, sp.from_script(f.script()))
        print(f"--- Stage I: {f.name} (verified, round-trips through the printer)")
        print(f.script())

    B = rng.standard_normal((n, feat)).astype(np.float32)
    C = np.empty((m, feat), np.float32)
    args = dict(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=feat, nnz=A.nnz)
    t_interp = _time(lambda: sp.interpret(csrmm, **args), repeat=1)
    t_scipy = _time(lambda: A @ B)
    err = float(np.abs(C - A @ B).max())
    print(f"SpMM  reference interpreter vs scipy: max abs error {err:.2e}")
    print(f"      interpreter {t_interp:8.1f} ms   scipy {t_scipy:8.2f} ms")

    X = rng.standard_normal((m, feat)).astype(np.float32)
    out = np.empty(A.nnz, np.float32)
    args = dict(a=A.data, x=X, y=B, c=out, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=feat, nnz=A.nnz)
    t_interp = _time(lambda: sp.interpret(sddmm, **args), repeat=1)
    t_scipy = _time(lambda: A.multiply(X @ B.T))
    expected = A.multiply(X @ B.T).tocsr()
    expected.sort_indices()
    err = float(np.abs(out - expected.data).max())
    print(f"SDDMM reference interpreter vs scipy: max abs error {err:.2e}")
    print(f"      interpreter {t_interp:8.1f} ms   scipy {t_scipy:8.2f} ms")

    print(
        "\nNot built yet: lower_sparse_iter (Stage II), lower_sparse_buffer (Stage III) and the Numba "
        "CPU/CUDA code generators. Kernel timings and ratios to scipy will appear here once they land."
    )


if __name__ == "__main__":
    main()
