"""`sparsetir_py.compat`: numpy aliases that numba-cuda still names (removed in numpy 2.5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cuda_support import ptx_unavailable

from sparsetir_py import compat

ROOT = Path(__file__).resolve().parents[1]


def test_restores_a_removed_alias_as_the_function_it_named(monkeypatch):
    monkeypatch.delattr(np, "row_stack", raising=False)
    assert compat.restore_numpy_aliases() == ["row_stack"]
    assert np.row_stack is np.vstack
    assert compat.restore_numpy_aliases() == []  # present now: nothing changes


# numpy 2.5 as the device machine has it, emulated by removing the alias before numba-cuda loads
# its array typing: without the package's import the same PTX compile fails (the first case).
PROGRAM = """
import sys
import numpy as np
del np.row_stack
if sys.argv[1] == "with":
    import sparsetir_py as sp
    from schedules.spmm import SCHEDULES
    kernel = sp.compile(sp.ops.spmm_script(), "cuda", schedule=SCHEDULES["csr_cuda_rows"], specialize={"feat": 32})
    print("ptx", ".entry" in kernel.ptx())
else:
    from numba import cuda, float32
    try:
        cuda.compile_ptx(lambda a: None, (float32[::1],), cc=(8, 0))
        print("ptx True")
    except AttributeError as e:
        print("failed", e)
"""


@pytest.mark.skipif(ptx_unavailable() is not None, reason=str(ptx_unavailable()))
def test_cuda_kernels_compile_where_numpy_lacks_row_stack():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = {}
    for mode in ("without", "with"):
        done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=env, cwd=ROOT)
        out[mode] = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    assert out["without"].startswith("failed") and "row_stack" in out["without"], out
    assert out["with"] == "ptx True", out
