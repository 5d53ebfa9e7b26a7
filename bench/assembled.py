"""`python -m bench.assembled`: scripts with an assembled output (`assemble=True`) against scipy
and against `sp.ops`, paired in one process on graphs the project does not ship (the seeded
R-MAT power-law graph and the 2-D mesh of `bench.coiteration`).

    python -m bench.assembled                       # R-MAT scale 14, mesh 200x200
    python -m bench.assembled --rmat-scale 12 --mesh 100 --rounds 5

Cases per graph A (R: A with its rows reversed, T: A's transpose with values shuffled):
`spgemm` A @ A (scipy `@`; `sp.ops.spgemm`; the script's kernel with and without its O(nnz)
structure checks), `add3` A + R - T (scipy; two `sp.ops.add` calls; the script's three-operand
merge), `multiply3` A * R * T (scipy's two `multiply`; the script). Results are checked against
scipy's structure and values first. A ratio is the baseline's median over ours (above 1: ours is
faster); calls are interleaved in rounds (`bench.measure.interleaved`).
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse

from .coiteration import mesh, power_law
from .measure import interleaved


def as_csr(out: dict, shape) -> scipy.sparse.csr_matrix:
    """An assembled kernel's result as a scipy matrix."""
    return scipy.sparse.csr_matrix((out["c"], out["indices_c"], out["indptr_c"]), shape=shape)


def cases(A) -> dict:
    import sparsetir_py as sp
    from sparsetir_py.ops.scripts import elementwise_arguments, elementwise_script, spgemm_arguments, spgemm_script

    R = scipy.sparse.csr_matrix(A[::-1])
    T = scipy.sparse.csr_matrix(A.T)
    T.data = np.random.default_rng(0).permutation(T.data).astype(np.float32)
    for M in (R, T):
        M.sort_indices()
        M.indices, M.indptr = M.indices.astype(np.int32), M.indptr.astype(np.int32)
    gemm = sp.compile(spgemm_script())
    add3 = sp.compile(elementwise_script("X0 + X1 - X2", 3))
    mul3 = sp.compile(elementwise_script("X0 * X1 * X2", 3))
    g_args, a_args = spgemm_arguments(A, A), elementwise_arguments([A, R, T])
    checks = {
        "spgemm": (lambda: as_csr(gemm(**g_args), A.shape), A @ A),
        "add3": (lambda: as_csr(add3(**a_args), A.shape), A + R - T),
        "multiply3": (lambda: as_csr(mul3(**a_args), A.shape), A.multiply(R).multiply(T)),
    }
    for name, (ours, theirs) in checks.items():
        diff = ours() - theirs
        assert diff.nnz == 0 or abs(diff).max() < 1e-3 * max(1.0, abs(theirs).max()), name
    return {
        "spgemm": {
            "scipy": lambda: A @ A,
            "sp.ops.spgemm": lambda: sp.ops.spgemm(A, A),
            "script": lambda: gemm(**g_args),
            "script, unchecked": lambda: gemm(**g_args, check_structure=False),
        },
        "add3": {
            "scipy": lambda: A + R - T,
            "sp.ops.add x2": lambda: sp.ops.add(sp.ops.add(A, R), T, 1.0, -1.0),
            "script": lambda: add3(**a_args),
            "script, unchecked": lambda: add3(**a_args, check_structure=False),
        },
        "multiply3": {
            "scipy": lambda: A.multiply(R).multiply(T),
            "sp.ops.multiply x2": lambda: sp.ops.multiply(sp.ops.multiply(A, R), T),
            "script": lambda: mul3(**a_args),
            "script, unchecked": lambda: mul3(**a_args, check_structure=False),
        },
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.assembled")
    parser.add_argument("--rmat-scale", type=int, default=14)
    parser.add_argument("--mesh", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    graphs = {f"rmat{args.rmat_scale}": power_law(args.rmat_scale, 8), f"mesh{args.mesh}": mesh(args.mesh)}
    print("| graph | case | call | median ms | scipy / call |")
    print("|---|---|---|---|---|")
    for gname, A in graphs.items():
        for case, calls in cases(A).items():
            medians, _ = interleaved(calls, repeat=args.rounds, budget=30.0)
            for call, t in medians.items():
                print(f"| {gname} ({A.shape[0]}, nnz {A.nnz}) | {case} | {call} | {1e3 * t:.2f} | "
                      f"{medians['scipy'] / t:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
