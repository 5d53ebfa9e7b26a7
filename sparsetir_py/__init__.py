"""sparsetir_py: a Python compiler for sparse tensor programs in the style of SparseTIR.

import sparsetir_py as sp
from sparsetir_py import script as T
"""

# `compat` first: it restores the numpy aliases Numba's CUDA target still names.
from . import compat, data, format, ir, ops, script, tune  # noqa: F401 (compat: imported for its effect)
from .driver import compile
from .errors import (
    CodegenError,
    EncodingError,
    FormatError,
    FrontendError,
    InputError,
    InterpretError,
    LoweringError,
    ScheduleError,
    SparseTIRError,
    TargetError,
    VerifyError,
)
from .format import FormatRewriteRule, parse_encoding, to_storage
from .interp import interpret
from .ir import IRModule, Layout, PrimFunc
from .ir.structural_equal import assert_structural_equal, structural_equal
from .ir.verify import verify
from .runtime.build import build
from .schedule import Schedule
from .script import from_script
from .transform import (
    decompose_format,
    extract_preprocess,
    format_decompose,
    horizontal_fusion,
    lower_sparse_buffer,
    lower_sparse_iter,
    remove_preprocess,
)

__all__ = [
    "CodegenError",
    "EncodingError",
    "FormatError",
    "FormatRewriteRule",
    "FrontendError",
    "IRModule",
    "InputError",
    "InterpretError",
    "Layout",
    "LoweringError",
    "PrimFunc",
    "Schedule",
    "ScheduleError",
    "SparseTIRError",
    "TargetError",
    "VerifyError",
    "assert_structural_equal",
    "build",
    "compile",
    "data",
    "decompose_format",
    "extract_preprocess",
    "format",
    "format_decompose",
    "from_script",
    "horizontal_fusion",
    "interpret",
    "ir",
    "lower_sparse_buffer",
    "lower_sparse_iter",
    "ops",
    "parse_encoding",
    "remove_preprocess",
    "script",
    "structural_equal",
    "to_storage",
    "tune",
    "verify",
]


def __getattr__(name: str):
    # `sp.format_rules` is the top-level package `format_rules` (its files import this one, so it
    # is loaded on first use, not with `import sparsetir_py`).
    if name == "format_rules":
        import format_rules

        return format_rules
    # `sp.distributed` needs the optional extra `[distributed]` (Dask): loaded on first use only.
    if name == "distributed":
        import importlib

        return importlib.import_module(f"{__name__}.distributed")
    raise AttributeError(f"module 'sparsetir_py' has no attribute {name!r}")
