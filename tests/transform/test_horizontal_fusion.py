"""`sp.horizontal_fusion`: the parts of a decomposed function in one launch / one parallel loop.

- CUDA, in Numba's simulator (a process of its own): hyb SpMM with 1, 2 and 4 column partitions
  (split rows in layers, an empty row, rectangular shapes, int32/float32 and int64/float64) and
  SDDMM, against scipy with outputs pre-filled with NaN; the number of launches does not grow
  with the number of parts. Compiled to PTX where numba-cuda can.
- CPU: the same decompositions through `sp.compile`, the parts' nests fused into one parallel
  loop where they may run together (SDDMM parts, rows that no two parts share), left apart where
  they may not (rows shared by column partitions: the init and each part accumulate into C).
- The pass on hand-written Stage III functions: independent nests fuse and compute what they
  did (interpreter), a nest that reads what another writes does not.
- Golden files of a fused CPU and CUDA kernel.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sps
from cuda_support import ptx_unavailable, simulator_argv

import format_rules
import sparsetir_py as sp
from schedules.common import parts
from sparsetir_py import script as T
from sparsetir_py.ir.stmt import For, SeqStmt
from sparsetir_py.ops import sddmm_script, spmm_script

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "codegen" / "golden"
UPDATE = os.environ.get("SPARSETIR_UPDATE_GOLDEN") == "1"


def matrix(m: int, n: int, seed: int, idtype=np.int32, dtype=np.float32) -> sps.csr_matrix:
    """Random rows, row 0 empty, row 1 long (split over layers by a bucket of 2)."""
    A = sps.random(m, n, density=0.3, format="lil", random_state=seed, dtype=np.float64)
    A[0, :] = 0
    A[min(1, m - 1), : min(n, 7)] = np.arange(1, min(n, 7) + 1)
    A = sps.csr_matrix(A)
    A.eliminate_zeros()
    A.sort_indices()
    return sps.csr_matrix((A.data.astype(dtype), A.indices.astype(idtype), A.indptr.astype(idtype)), shape=A.shape)


DRIVER = textwrap.dedent(
    """
    import json, os, sys
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np, scipy.sparse as sps
    import sparsetir_py as sp, format_rules
    from schedules.common import parts
    from sparsetir_py.ops import spmm_script, sddmm_script
    MATRIX
    out = {}
    for (m, n), idt, dt in [((9, 7), np.int32, np.float32), ((6, 11), np.int64, np.float64)]:
        A = matrix(m, n, m, idt, dt)
        iname, dname = np.dtype(idt).name, np.dtype(dt).name
        B = np.random.default_rng(m).standard_normal((n, 5)).astype(dt)
        for col_parts in (1, 2, 4):
            rules = format_rules.hyb.rules(A, col_parts, [1, 2], dname, iname)
            mod = sp.remove_preprocess(sp.decompose_format(spmm_script(iname, dname), rules))
            kernel = sp.compile(mod, "cuda", schedule=parts("cuda"), specialize={"feat": 5})
            C = np.full((m, 5), np.nan, dt)
            args = {"b": B, "c": C, "m": m, "n": n, **sp.format.convert(A, rules)}
            args = {k: v for k, v in args.items() if k in kernel.parameters}
            kernel(**args)
            launches = len(kernel.launch_configs(**args))
            out[f"spmm {m}x{n} parts={col_parts}"] = [float(np.abs(C - A @ B).max()), launches]
        # No row shared: one column part, buckets up to the longest row (disjoint_writes, no atomics).
        rules = format_rules.hyb.rules(A, 1, [1, 2, 4, 8], dname, iname)
        mod = sp.remove_preprocess(sp.decompose_format(spmm_script(iname, dname), rules))
        kernel = sp.compile(mod, "cuda", schedule=parts("cuda", shared_rows=False), specialize={"feat": 5})
        C = np.full((m, 5), np.nan, dt)
        args = {"b": B, "c": C, "m": m, "n": n, **sp.format.convert(A, rules)}
        kernel(**{k: v for k, v in args.items() if k in kernel.parameters})
        out[f"spmm {m}x{n} disjoint"] = [float(np.abs(C - A @ B).max()), "atomic" not in kernel.source]
        X = np.random.default_rng(1).standard_normal((m, 4)).astype(dt)
        Y = np.random.default_rng(2).standard_normal((n, 4)).astype(dt)
        S = sp.ops.sddmm(A, X, Y, format="hyb", target="cuda", num_col_parts=2, buckets=[1, 2])
        out[f"sddmm {m}x{n}"] = [float(np.abs(S.toarray() - A.multiply(X @ Y.T).toarray()).max()), 0]
    print(json.dumps(out))
    """
)


def test_fused_cuda_kernels_in_the_simulator(tmp_path):
    env = {**os.environ, "SPARSETIR_CACHE_DIR": str(tmp_path)}
    driver = DRIVER.replace("MATRIX", inspect.getsource(matrix))
    proc = subprocess.run(simulator_argv("-c", driver), env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 10
    for name, (err, extra) in results.items():
        tol = 1e-4 if "9x7" in name else 1e-10
        assert err < tol, (name, err)
        if name.endswith("disjoint"):
            assert extra, f"{name}: parts that share no row need no atomic update"
    for shape in ("9x7", "6x11"):
        launches = {results[f"spmm {shape} parts={p}"][1] for p in (1, 2, 4)}
        assert launches == {2}, f"{shape}: launches per number of parts {launches} (init + searches, then parts)"


@pytest.mark.skipif(ptx_unavailable() is not None, reason=str(ptx_unavailable()))
def test_fused_cuda_kernel_compiles_to_ptx():
    A = matrix(30, 20, 3)
    rules = format_rules.hyb.rules(A, 2, [1, 2, 4])  # six parts in one launch
    mod = sp.remove_preprocess(sp.decompose_format(spmm_script(), rules))
    kernel = sp.compile(mod, "cuda", schedule=parts("cuda"), specialize={"feat": 64})
    for cc in ((8, 0), (9, 0)):
        ptx = kernel.ptx(cc=cc)
        assert ".visible .entry" in ptx and f".target sm_{cc[0]}{cc[1]}" in ptx
        assert "atom.global.add.f32" in ptx or "red.global.add.f32" in ptx


# -------------------------------------------------------------------- CPU
def _compile_cpu(op: str, A, rules, shared_rows: bool = True):
    script = spmm_script() if op == "spmm" else sddmm_script()
    if op == "sddmm":
        rules = [r.with_buffer("C", like="A") for r in rules]
    mod = sp.remove_preprocess(sp.decompose_format(script, rules))
    return sp.compile(mod, "cpu", schedule=parts("cpu", shared_rows=shared_rows)), rules


def _top_level_nests(kernel) -> int:
    body = kernel.func.body
    return len(body.stmts) if isinstance(body, SeqStmt) else 1


# Two column parts with buckets [1, 2, 4, 8] are the parts `test_ops_formats.py` compiles (one
# kernel for both files); three parts with one bucket keep the third kernel small (a part more is
# seconds more of compilation).
@pytest.mark.parametrize("col_parts,buckets", [(1, [1, 2, 4]), (2, [1, 2, 4, 8]), (3, [4])])
def test_cpu_sddmm_parts_share_one_parallel_loop(col_parts, buckets):
    A = matrix(17, 13, 5)
    X = np.random.default_rng(0).standard_normal((17, 6)).astype(np.float32)
    Y = np.random.default_rng(1).standard_normal((13, 6)).astype(np.float32)
    kernel, _ = _compile_cpu("sddmm", A, format_rules.hyb.rules(A, col_parts, buckets))
    # The row searches in one parallel loop, the parts in another, whatever the number of parts
    # (beside them, serial nests that zero the outputs when the width is 0).
    assert kernel.source.count("numba.prange") == 2
    S = sp.ops.sddmm(A, X, Y, format="hyb", num_col_parts=col_parts, buckets=buckets)
    np.testing.assert_allclose(S.toarray(), A.multiply(X @ Y.T).toarray(), rtol=1e-5, atol=1e-5)


def test_cpu_spmm_parts_without_shared_rows_share_one_parallel_loop():
    A = matrix(23, 19, 7)
    B = np.random.default_rng(0).standard_normal((19, 5)).astype(np.float32)
    longest = int(np.diff(A.indptr).max())
    buckets = [1 << k for k in range(max(1, (longest - 1).bit_length()) + 1)]
    rules = format_rules.hyb.rules(A, 1, buckets)
    kernel, _ = _compile_cpu("spmm", A, rules, shared_rows=False)
    # The init and the layer searches, then every bucket: two parallel loops.
    assert _top_level_nests(kernel) == 2
    C = np.full((23, 5), np.nan, np.float32)
    args = {"b": B, "c": C, "m": 23, "n": 19, "feat": 5, **sp.format.convert(A, rules)}
    kernel(**{k: v for k, v in args.items() if k in kernel.parameters})
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    # sp.ops finds that no row is shared and compiles the same way.
    np.testing.assert_allclose(sp.ops.spmm(A, B, format="hyb", buckets=buckets), A @ B, rtol=1e-5, atol=1e-5)


def test_cpu_spmm_parts_that_share_rows_stay_apart():
    """Two column partitions both accumulate into every row: no fusion without atomics."""
    A = matrix(23, 19, 8)
    B = np.random.default_rng(0).standard_normal((19, 5)).astype(np.float32)
    rules = format_rules.hyb.rules(A, 2, [1, 2])
    kernel, _ = _compile_cpu("spmm", A, rules, shared_rows=True)
    assert _top_level_nests(kernel) == 1 + 2 * 2  # the init, then each part's layers loop
    C = np.full((23, 5), np.nan, np.float32)
    args = {"b": B, "c": C, "m": 23, "n": 19, "feat": 5, **sp.format.convert(A, rules)}
    kernel(**{k: v for k, v in args.items() if k in kernel.parameters})
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------------- the pass itself
@T.prim_func
def two_rows(a: T.handle, b: T.handle, x: T.handle, y: T.handle, n: T.int32, k: T.int32):
    """Two independent parallel nests (x from a, y from b), then one that reads x."""
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    Bb = T.match_buffer(b, (k,), "float32")
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (k,), "float32")
    for i in T.parallel(n):
        X[i] = A[i] * T.float32(2)
    for j in T.parallel(k):
        Y[j] = Bb[j] + T.float32(1)
    for i2 in T.parallel(n):
        A[i2] = X[i2] + T.float32(1)


def test_pass_fuses_independent_nests_and_keeps_dependent_ones_apart():
    fused = sp.horizontal_fusion(two_rows)["main"]
    nests = fused.body.stmts
    assert len(nests) == 2
    assert isinstance(nests[0], For) and nests[0].kind == "parallel"
    assert "n + k" in sp.ir.printer.script(fused) or "k + n" in sp.ir.printer.script(fused)
    rng = np.random.default_rng(0)
    for n, k in [(5, 3), (1, 7), (0, 4), (6, 0)]:
        a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(k).astype(np.float32)
        outs = []
        for f in (two_rows, fused):
            args = {"a": a.copy(), "b": b.copy(), "x": np.zeros(n, np.float32), "y": np.zeros(k, np.float32)}
            sp.interpret(f, n=n, k=k, **args)
            outs.append(args)
            kernel = sp.build(f, "cpu")
            kargs = {"a": a.copy(), "b": b.copy(), "x": np.zeros(n, np.float32), "y": np.zeros(k, np.float32)}
            kernel(n=n, k=k, **kargs)
            for name in args:
                np.testing.assert_array_equal(kargs[name], args[name])
        for name in outs[0]:
            np.testing.assert_array_equal(outs[0][name], outs[1][name])


def test_compile_fuses_only_marked_functions():
    assert sp.horizontal_fusion(two_rows, only_marked=True)["main"] is two_rows
    marked = two_rows.with_attr("horizontal_fuse", True)
    assert len(sp.horizontal_fusion(marked, only_marked=True)["main"].body.stmts) == 2


# -------------------------------------------------------------------- before / expected
@T.prim_func
def two_fills(x: T.handle, y: T.handle, n: T.int32, k: T.int32):
    """Two parallel loops that share nothing."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (k,), "float32")
    for i in T.parallel(n):
        X[i] = T.float32(1)
    for j in T.parallel(k):
        Y[j] = T.float32(2)


@T.prim_func
def two_fills_fused(x: T.handle, y: T.handle, n: T.int32, k: T.int32):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (k,), "float32")
    for u_fused in T.parallel(n + k, annotations={"chunk_size": 16}):
        if u_fused < n:
            X[u_fused] = T.float32(1)
        else:
            Y[u_fused - n] = T.float32(2)


def test_cpu_loops_become_one_loop_over_both_ranges():
    """One parallel loop over the work units of both, handed out in chunks; unit `u` runs the
    first loop's iteration `u` below `n`, else the second's `u - n`."""
    sp.assert_structural_equal(sp.horizontal_fusion(two_fills)["main"], two_fills_fused)


@T.prim_func
def three_launches(x: T.handle, y: T.handle, n: T.int32, k: T.int32):
    """Two launches that share nothing, then one that updates what the first wrote."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (n, 32), "float32")
    Y = T.match_buffer(y, (k, 64), "float32")
    for bx in T.thread_binding(n, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            X[bx, tx] = T.float32(1)
    for by in T.thread_binding(k, thread="blockIdx.x"):
        for ty in T.thread_binding(64, thread="threadIdx.x"):
            Y[by, ty] = T.float32(2)
    for bz in T.thread_binding(n, thread="blockIdx.x"):
        for tz in T.thread_binding(32, thread="threadIdx.x"):
            X[bz, tz] = X[bz, tz] + T.float32(1)


@T.prim_func
def three_launches_fused(x: T.handle, y: T.handle, n: T.int32, k: T.int32):
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (n, 32), "float32")
    Y = T.match_buffer(y, (k, 64), "float32")
    for bx_fused in T.thread_binding(n + k, thread="blockIdx.x"):
        if bx_fused < n:
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                X[bx_fused, tx] = T.float32(1)
        else:
            for ty in T.thread_binding(64, thread="threadIdx.x"):
                Y[bx_fused - n, ty] = T.float32(2)
    for bz in T.thread_binding(n, thread="blockIdx.x"):
        for tz in T.thread_binding(32, thread="threadIdx.x"):
            X[bz, tz] = X[bz, tz] + T.float32(1)


def test_cuda_launches_share_one_grid_and_a_dependent_one_stays_apart():
    """The first two nests become one launch of `n + k` blocks, each running its part's threads
    (the block size is the larger, 64); the third reads X, so it stays a launch of its own."""
    sp.assert_structural_equal(sp.horizontal_fusion(three_launches)["main"], three_launches_fused)


@T.prim_func
def wide_blocks(x: T.handle, y: T.handle, n: T.int32):
    """Two independent launches whose blocks together would need 512 x 4 threads."""
    T.func_attr({"stage": 3})
    X = T.match_buffer(x, (n, 512), "float32")
    Y = T.match_buffer(y, (n, 4, 256), "float32")
    for bx in T.thread_binding(n, thread="blockIdx.x"):
        for tx in T.thread_binding(512, thread="threadIdx.x"):
            X[bx, tx] = T.float32(1)
    for by in T.thread_binding(n, thread="blockIdx.x"):
        for ty in T.thread_binding(4, thread="threadIdx.y"):
            for tx in T.thread_binding(256, thread="threadIdx.x"):
                Y[by, ty, tx] = T.float32(2)


def test_cuda_launches_stay_apart_past_the_thread_limit():
    """A fused block would have max(512, 256) x 4 = 2048 threads, past CUDA's 1024: unchanged."""
    sp.assert_structural_equal(sp.horizontal_fusion(wide_blocks)["main"], wide_blocks)


# -------------------------------------------------------------------- golden files
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_golden_fused_kernel(target):
    A = sp.data.load_matrix("karate") if hasattr(sp, "data") else None
    if A is None:
        from sparsetir_py.data import load_matrix

        A = load_matrix("karate")
    if target == "cuda":
        rules = format_rules.hyb.rules(A, 2, [1, 2, 4])
        mod = sp.remove_preprocess(sp.decompose_format(spmm_script(), rules))
        kernel = sp.compile(mod, "cuda", schedule=parts("cuda"), specialize={"feat": 32})
    else:
        rules = [r.with_buffer("C", like="A") for r in format_rules.hyb.rules(A, 2, [1, 2, 4])]
        mod = sp.remove_preprocess(sp.decompose_format(sddmm_script(), rules))
        kernel = sp.compile(mod, "cpu", schedule=parts("cpu"))
    path = GOLDEN / f"hyb_fused.{target}.py.golden"
    if UPDATE:
        path.write_text(kernel.source)
    assert path.is_file(), f"{path.name} is missing: run with SPARSETIR_UPDATE_GOLDEN=1 to create it"
    assert kernel.source == path.read_text(), f"fused {target} kernel differs from {path.name}"
