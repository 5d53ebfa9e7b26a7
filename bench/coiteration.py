"""`python -m bench.coiteration spgemm|masked|add|multiply|all`: the co-iterating operators against
scipy (and MKL's `dot_product_mkl` for SpGEMM where `sparse_dot_mkl` is installed), paired in one
process, on graphs the project does not ship: a power-law R-MAT graph and a 2-D mesh (5-point
stencil), generated and seeded.

    python -m bench.coiteration all                      # both graphs, every operator
    python -m bench.coiteration spgemm --rmat-scale 16 --mesh 400 --threads 2
    python -m bench.coiteration add --graphs email-Eu-core path/to/graph.npz
    python -m bench.coiteration all --smoke              # small graphs, few rounds: seconds

Cases per graph: `spgemm` times `A @ A` and `A @ A.T` (scipy's `@`, MKL's `dot_product_mkl`, and
MKL's product with its rows sorted afterwards: scipy's and MKL's leave them unsorted, ours are
canonical);
`masked` times `spgemm(A, A, mask=A)` against scipy's `(A @ A).multiply(A)` (triangle counting's
product); `add` times `A + A.T` and `A + R`, `multiply` `A.multiply(A.T)` and `A.multiply(R)`, where
R is A with its rows reversed (for a symmetric A, A.T stores A's own coordinates: one loop over
positions; R's differ: a merge). Every result is checked against
scipy first (structure: ours may store the computed zeros scipy drops, see
`sparsetir_py.ops.coiteration`). Calls are interleaved in rounds (`bench.measure.interleaved`);
a ratio is the baseline's median over ours (above 1: sparsetir_py is faster). The traffic model
counts the bytes a kernel must move at least (operands' structure and values, the rows of B each
row of A selects, the result written) and reports them per second of ours. Writes
`<out>/coiteration.json` and `.md` when `--out` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import scipy.sparse

OPS = ("spgemm", "masked", "add", "multiply")


# ------------------------------------------------------------------ graphs
def mesh(k: int) -> scipy.sparse.csr_matrix:
    """The 5-point stencil of a k x k grid: k^2 rows, about 5 nonzeros each (a finite-element mesh)."""
    line = scipy.sparse.diags([np.ones(k - 1), 2 * np.ones(k), np.ones(k - 1)], [-1, 0, 1], shape=(k, k))
    eye = scipy.sparse.identity(k)
    A = (scipy.sparse.kron(line, eye) + scipy.sparse.kron(eye, line)).tocsr()
    return _float32(A)


def power_law(scale: int, edge_factor: int) -> scipy.sparse.csr_matrix:
    """A seeded R-MAT graph of 2^scale vertices and about edge_factor * 2^scale edges, symmetrised."""
    from .graphs import rmat

    n = 1 << scale
    A = rmat(scale=scale, nnz=edge_factor * n, n=n, seed=26)
    return _float32(((A + A.T) > 0).astype(np.float32))


def _float32(A) -> scipy.sparse.csr_matrix:
    A = scipy.sparse.csr_matrix(A, dtype=np.float32)
    A.sum_duplicates()
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    return A


def graphs(args) -> dict[str, scipy.sparse.csr_matrix]:
    if args.graphs:
        from .graphs import graph_file_stem, is_graph_file, load_graph

        return {
            graph_file_stem(g): load_graph(graph_file_stem(g), g) if is_graph_file(g) else load_graph(g)
            for g in args.graphs
        }
    return {f"rmat{args.rmat_scale}": power_law(args.rmat_scale, args.edge_factor), f"mesh{args.mesh}": mesh(args.mesh)}


# ------------------------------------------------------------------ cases
def mkl_product():
    """`dot_product_mkl` where `sparse_dot_mkl` loads, else None (and why)."""
    try:
        from sparse_dot_mkl import dot_product_mkl
    except Exception as e:  # not installed, or MKL_RT unset: a note, not a failure
        return None, f"{type(e).__name__}: {e}"
    return dot_product_mkl, None


def cases(op: str, A, threads: int) -> list[tuple[str, dict, callable]]:
    """(case name, {library: call}, check) for `op` on graph `A`."""
    from sparsetir_py.ops.coiteration import add, multiply, spgemm

    At = A.T.tocsr()
    if op == "spgemm":
        mkl, _ = mkl_product()
        out = []
        for name, B in (("A @ A", A), ("A @ A.T", At)):
            calls = {"ours": lambda B=B: spgemm(A, B, threads=threads), "scipy": lambda B=B: A @ B}
            if mkl is not None:
                calls["mkl"] = lambda B=B: mkl(A, B)
                # scipy's and MKL's products leave each row's columns unsorted; ours are sorted
                # (canonical CSR). MKL's product sorted afterwards is what canonical output costs
                # with MKL.
                calls["mkl sorted"] = lambda B=B: _sorted(mkl(A, B))
            out.append((name, calls))
        return out
    if op == "masked":
        return [("(A @ A) .* A", {"ours": lambda: spgemm(A, A, mask=A, threads=threads),
                                   "scipy": lambda: (A @ A).multiply(A)})]  # fmt: skip
    R = _float32(A[::-1])  # rows reversed: another structure (A.T of a symmetric A is A's own)
    if op == "add":
        return [("A + A.T", {"ours": lambda: add(A, At, threads=threads), "scipy": lambda: A + At}),
                ("A + R", {"ours": lambda: add(A, R, threads=threads), "scipy": lambda: A + R})]  # fmt: skip
    return [("A .* A.T", {"ours": lambda: multiply(A, At, threads=threads), "scipy": lambda: A.multiply(At)}),
            ("A .* R", {"ours": lambda: multiply(A, R, threads=threads), "scipy": lambda: A.multiply(R)})]  # fmt: skip


def _sorted(C):
    """C with each row's columns sorted, in place (`sort_indices`, which trusts a stale flag)."""
    C.has_sorted_indices = False
    C.sort_indices()
    return C


def check(got, want) -> float:
    """The largest difference from scipy's result relative to its largest value; raises when the
    structures differ by more than the zeros scipy drops."""
    got = scipy.sparse.csr_matrix(got, dtype=np.float64)
    want = scipy.sparse.csr_matrix(want, dtype=np.float64)
    scale = max(abs(want).max() if want.nnz else 0.0, 1.0)
    kept = got.copy()
    # Entries that cancel to exactly 0 in scipy's float32 sums may leave a rounding residue in
    # ours (another order of the sums, fused multiply-adds): not counted as stored.
    kept.data[abs(kept.data) <= 1e-6 * scale] = 0
    kept.eliminate_zeros()
    if kept.nnz > want.nnz:
        raise AssertionError(f"ours stores {kept.nnz} nonzeros, scipy {want.nnz}")
    return float(abs(got - want).max() / scale) if got.nnz or want.nnz else 0.0


def traffic(op: str, A, B, C, idx: int = 4, val: int = 4) -> int:
    """Bytes the operator must move at least: operands' structure and values read once, for a
    product the rows of B that each row of A selects, and the result written."""
    structure = lambda M: (M.shape[0] + 1) * idx + M.nnz * (idx + val)  # noqa: E731
    if op in ("spgemm", "masked"):
        selected = int(np.diff(B.indptr)[A.indices].sum())
        read = structure(A) + selected * (idx + val) + (structure(A) if op == "masked" else 0)
    else:
        read = structure(A) + structure(B)
    return read + structure(C)


def run_case(op: str, graph: str, A, name: str, calls: dict, repeat: int, budget: float, min_rounds: int = 10) -> dict:
    from .measure import interleaved

    results = {k: fn() for k, fn in calls.items()}
    errors = {k: check(v, results["scipy"]) for k, v in results.items() if k != "scipy"}
    medians, rounds = interleaved(calls, repeat, budget, min_rounds=min_rounds)
    B = {"A @ A": A, "(A @ A) .* A": A, "A + R": _float32(A[::-1]), "A .* R": _float32(A[::-1])}.get(name)
    B = A.T.tocsr() if B is None else B
    moved = traffic(op, A, B, results["ours"])
    row = {"op": op, "graph": graph, "case": name, "rows": A.shape[0], "nnz": A.nnz, "rounds": rounds,
           "ms": {k: v * 1e3 for k, v in medians.items()}, "error": errors,
           "ratio": {k: medians[k] / medians["ours"] for k in medians if k != "ours"},
           "bytes": moved, "GB/s": moved / medians["ours"] / 1e9}  # fmt: skip
    return row


def line(r: dict) -> str:
    ratios = "  ".join(f"{k} {v:.2f}x" for k, v in r["ratio"].items())
    times = "  ".join(f"{k} {v:.2f} ms" for k, v in r["ms"].items())
    return f"{r['graph']:>12} {r['case']:<14} nnz {r['nnz']:>9}  {times}  | {ratios}  | ours {r['GB/s']:.1f} GB/s"


def geomeans(rows: list[dict]) -> list[str]:
    """One line per operator: the geometric mean over its cases of each baseline's ratio."""
    out = []
    for op in dict.fromkeys(r["op"] for r in rows):
        ratios: dict[str, list[float]] = {}
        for r in rows:
            if r["op"] == op:
                for k, v in r["ratio"].items():
                    ratios.setdefault(k, []).append(v)
        means = "  ".join(f"{k} {float(np.exp(np.mean(np.log(v)))):.2f}x" for k, v in ratios.items())
        out.append(f"{'geomean':>12} {op:<14} {len(next(iter(ratios.values()), []))} cases  | {means}")
    return out


def markdown(rows: list[dict]) -> str:
    head = [
        "| graph | case | nnz | ours ms | scipy ms | vs scipy | vs MKL | ours GB/s (model) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    body = []
    for r in rows:
        mkl = f"{r['ratio']['mkl']:.2f}x" if "mkl" in r["ratio"] else "-"
        body.append(
            f"| {r['graph']} | `{r['case']}` | {r['nnz']} | {r['ms']['ours']:.2f} | {r['ms']['scipy']:.2f} | "
            f"{r['ratio']['scipy']:.2f}x | {mkl} | {r['GB/s']:.1f} |"
        )
    return "\n".join([*head, *body]) + "\n"


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog or "python -m bench.coiteration", description=__doc__.splitlines()[0])
    p.add_argument("op", choices=[*OPS, "all"])
    p.add_argument("--graphs", nargs="+", metavar="NAME", help="shipped graph names or .npz/.mtx paths instead")
    p.add_argument("--rmat-scale", type=int, default=15, help="R-MAT graph of 2^scale vertices (default 15)")
    p.add_argument("--edge-factor", type=int, default=8, help="R-MAT edges per vertex before symmetrising (8)")
    p.add_argument("--mesh", type=int, default=400, help="mesh of k x k vertices (default 400)")
    p.add_argument("--threads", type=int, default=2, help="threads of ours (default 2, as the baselines' machine)")
    p.add_argument("--repeat", type=int, default=20, help="at most this many rounds per case (default 20)")
    p.add_argument("--budget", type=float, default=3.0, help="seconds of rounds per case (default 3)")
    p.add_argument("--min-rounds", type=int, default=10, help="at least this many rounds per case (default 10)")
    p.add_argument("--smoke", action="store_true", help="small graphs, few rounds")
    p.add_argument("--out", type=Path, help="folder for coiteration.json and coiteration.md")
    return p


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`python -m bench spgemm|masked|add|multiply|all ...` (or `python -m bench.coiteration`)."""
    args = parser(prog).parse_args(argv)
    if args.smoke:
        args.rmat_scale, args.mesh, args.repeat, args.budget, args.min_rounds = 10, 60, 5, 0.5, 3
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))
    if "MKL_RT" not in os.environ:
        from .libraries import mkl_rt

        if mkl_rt() is not None:  # sparse_dot_mkl finds the venv's MKL through it
            os.environ["MKL_RT"] = str(mkl_rt())
    ops = OPS if args.op == "all" else (args.op,)
    mkl, why = mkl_product()
    if mkl is None and "spgemm" in ops:
        print(f"note: MKL baseline skipped ({why})", file=sys.stderr)
    rows = []
    for graph, A in graphs(args).items():
        for op in ops:
            for name, calls in cases(op, A, args.threads):
                r = run_case(op, graph, A, name, calls, args.repeat, args.budget, args.min_rounds)
                rows.append(r)
                print(line(r), flush=True)
    for line_ in geomeans(rows):
        print(line_)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "coiteration.json").write_text(json.dumps(rows, indent=1))
        (args.out / "coiteration.md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
