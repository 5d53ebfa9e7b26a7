"""sparsetir_py: a Python compiler for sparse tensor programs in the style of SparseTIR.

import sparsetir_py as sp
from sparsetir_py import script as T
"""

from . import ir, ops, script
from .driver import compile
from .errors import (
    CodegenError,
    FrontendError,
    InputError,
    InterpretError,
    LoweringError,
    ScheduleError,
    SparseTIRError,
    VerifyError,
)
from .interp import interpret
from .ir import IRModule, Layout, PrimFunc
from .ir.structural_equal import assert_structural_equal, structural_equal
from .ir.verify import verify
from .runtime.build import build
from .schedule import Schedule
from .script import from_script
from .transform import lower_sparse_buffer, lower_sparse_iter

__all__ = [
    "CodegenError",
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
    "VerifyError",
    "assert_structural_equal",
    "build",
    "compile",
    "from_script",
    "interpret",
    "ir",
    "lower_sparse_buffer",
    "lower_sparse_iter",
    "ops",
    "script",
    "structural_equal",
    "verify",
]
