"""CUDA kernels of decomposed SpMM with the shipped `hyb_cuda` schedule.

Run in Numba's CUDA simulator (its own process: the switch must precede `numba.cuda`'s import)
on BSR, hyb (two column parts, split rows in layers) and padding, against scipy with the output
pre-filled with NaN; compiled to PTX for sm_80 and sm_90. Every part is a launch of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from cuda_support import ptx_unavailable, simulator_argv

import format_rules
import sparsetir_py as sp
from sparsetir_py.data import load_matrix
from sparsetir_py.ops import spmm_script

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent(
    """
    import json, os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np, scipy.sparse as ss
    import sparsetir_py as sp, format_rules
    from schedules.spmm import SCHEDULES
    from sparsetir_py.ops import spmm_script

    out = {}
    for seed, (m, n) in enumerate([(13, 9), (5, 11), (1, 6)]):
        A = ss.random(m, n, density=0.4, format="csr", random_state=seed, dtype=np.float64)
        A.indptr, A.indices = A.indptr.astype(np.int64), A.indices.astype(np.int64)
        A[0, :] = 0
        A.eliminate_zeros()  # an empty row
        B = np.random.default_rng(seed).standard_normal((n, 5))
        formats = {"bsr": format_rules.bsr.rules(2, "float64", "int64"),
                   "hyb": format_rules.hyb.rules(A, 2, [1, 2], "float64", "int64"),
                   "padding": format_rules.padding.rules(3, "float64", "int64")}
        for name, rules in formats.items():
            mod = sp.remove_preprocess(sp.decompose_format(spmm_script("int64", "float64"), rules))
            kernel = sp.compile(mod, "cuda", schedule=SCHEDULES["hyb_cuda"], specialize={"feat": 5})
            C = np.full((m, 5), np.nan)
            args = {"b": B, "c": C, "m": m, "n": n, **sp.format.convert(A, rules)}
            args = {k: v for k, v in args.items() if k in kernel.parameters}
            kernel(**args)
            out[f"{name}_{m}x{n}"] = float(np.abs(C - A @ B).max())
            out[f"{name}_{m}x{n}_launches"] = len(kernel.launch_configs(**args))
    print(json.dumps(out))
    """
)


def test_hyb_cuda_in_the_simulator(tmp_path):
    env = {**os.environ, "SPARSETIR_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run(simulator_argv("-c", DRIVER), env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 18
    for name, value in results.items():
        if name.endswith("_launches"):
            assert value >= 2, name  # the init, then the parts: one launch each
        else:
            assert value < 1e-12, (name, value)


@pytest.mark.skipif(ptx_unavailable() is not None, reason=str(ptx_unavailable()))
@pytest.mark.parametrize("fmt", ["bsr", "hyb", "padding"])
def test_hyb_cuda_compiles_to_ptx(fmt):
    from schedules.spmm import SCHEDULES

    A = load_matrix("karate")
    rules = {"bsr": lambda: format_rules.bsr.rules(4), "hyb": lambda: format_rules.hyb.rules(A, 2, [1, 2, 4, 8]),
             "padding": lambda: format_rules.padding.rules(4)}[fmt]()  # fmt: skip
    mod = sp.remove_preprocess(sp.decompose_format(spmm_script(), rules))
    kernel = sp.compile(mod, "cuda", schedule=SCHEDULES["hyb_cuda"], specialize={"feat": 64})
    # hyb's eight parts take the longest to compile: one architecture for it, both for the others.
    for cc in ((9, 0),) if fmt == "hyb" else ((8, 0), (9, 0)):
        ptx = kernel.ptx(cc=cc)
        assert ".visible .entry" in ptx and f".target sm_{cc[0]}{cc[1]}" in ptx
