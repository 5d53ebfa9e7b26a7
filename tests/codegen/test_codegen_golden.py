"""Golden files for the generated source of canonical kernels (STYLE 10).

A change to the code generator shows here as a diff of emitted code. After an intended change,
refresh the files and review the diff before committing:

    SPARSETIR_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/codegen/test_codegen_golden.py
    git diff tests/codegen/golden/

The files end in `.golden` (not `.py`) so that linters leave the generated code alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import stage3_kernels as K

from sparsetir_py.codegen import render
from sparsetir_py.transform import compact_buffers, hoist_loop_invariants, promote_accumulators

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("SPARSETIR_UPDATE_GOLDEN") == "1"

# (kernel, schedule of the script, target it is rendered for)
CANONICAL = [
    ("csrmm", "cpu", "cpu"),  # parallel rows, flat offsets, empty-row init, block init
    ("csrmm", "cuda", "cuda"),  # rows on blockIdx.x, features on threadIdx.x
    ("sddmm", "cuda", "cuda"),  # predicate, reduction init, lower_bound helper, local memory
    ("rowsum", "cuda", "cuda"),  # shared memory, barrier, a guarded shorter thread loop
]


def as_compiled(func, target: str):
    """The target passes `sp.compile` runs between `lower_sparse_buffer` and `build` (driver.py),
    so a golden file shows the kernel that really runs."""
    mod = compact_buffers(func, target)
    mod = promote_accumulators(mod) if target == "cpu" else mod
    return hoist_loop_invariants(mod)["main"]


@pytest.mark.parametrize(("name", "schedule", "target"), CANONICAL, ids=[f"{n}.{t}" for n, _, t in CANONICAL])
def test_golden_source(name, schedule, target):
    source = render(as_compiled(K.CASES_BY_NAME[name].func(schedule), target), target).source
    path = GOLDEN / f"{name}.{target}.py.golden"
    if UPDATE:
        path.write_text(source)
    assert path.is_file(), f"{path.name} is missing: run with SPARSETIR_UPDATE_GOLDEN=1 to create it"
    assert source == path.read_text(), (
        f"generated source of `{name}` for {target} differs from {path.name}; if the change is intended, "
        "refresh with SPARSETIR_UPDATE_GOLDEN=1 and review `git diff`"
    )


def test_golden_sources_compile():
    for path in GOLDEN.glob("*.golden"):
        compile(path.read_text(), str(path), "exec")
