"""sparsetir_py: a Python compiler for sparse tensor programs in the style of SparseTIR."""

from . import ir
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
from .ir import IRModule, Layout, PrimFunc

__all__ = [
    "CodegenError",
    "FrontendError",
    "IRModule",
    "InputError",
    "InterpretError",
    "Layout",
    "LoweringError",
    "PrimFunc",
    "ScheduleError",
    "SparseTIRError",
    "VerifyError",
    "ir",
]

from . import script
from .ir.structural_equal import assert_structural_equal, structural_equal
from .script import from_script
from .interp import interpret  # noqa: E402
