"""Formats: the storage facts of sparse buffers and the binding of arguments to a function.

`converters` turns a scipy matrix into the arrays of a new format (`convert(A, rules)`: the
arguments of every new parameter of a decomposition). `rule` holds `FormatRewriteRule` (one
part of a format decomposition, SparseTIR's eight fields).
`decomposition` splits a matrix by rules part by part (`decompose(A, rules)`: each part's
nonzeros, arrays and padding), for display, plots and checks; `rules_of` calls a rule file's
`rules(**params)` and checks what it returns (`sp.ops` and `decompose` share it).
`storage` says how many positions a level stores and the shape, order and offset type of a
buffer's values; `args` binds and checks the arguments of one call (kernels and the interpreter
share it).
`mlir` is MLIR's sparse tensor encoding: `parse_encoding` reads `#sparse_tensor.encoding`,
`to_storage` stores a tensor under one (positions / coordinates / values per level, and back).
"""

from .args import AxisData, BoundArguments, bind_arguments
from .converters import block_fill, check_converted, convert, positive_int, to_bsr, to_ell_parts, to_padded
from .decomposition import Decomposition, Part, decompose, parameter_names, rules_of
from .mlir import LevelType, SparseTensorEncoding, SparseTensorStorage, parse_encoding, to_storage
from .rule import FormatRewriteRule
from .storage import eval_storage_shape, n_positions, offset_dtype, storage_order, storage_shape

__all__ = [
    "AxisData",
    "BoundArguments",
    "Decomposition",
    "FormatRewriteRule",
    "LevelType",
    "Part",
    "SparseTensorEncoding",
    "SparseTensorStorage",
    "bind_arguments",
    "block_fill",
    "check_converted",
    "convert",
    "decompose",
    "eval_storage_shape",
    "n_positions",
    "offset_dtype",
    "parameter_names",
    "parse_encoding",
    "positive_int",
    "rules_of",
    "storage_order",
    "storage_shape",
    "to_bsr",
    "to_ell_parts",
    "to_padded",
    "to_storage",
]
