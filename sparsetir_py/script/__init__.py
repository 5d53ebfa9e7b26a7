"""The script namespace, imported as `T`: `from sparsetir_py import script as T`.

`@T.prim_func` parses a function written with the constructs below into a `PrimFunc`;
`@T.ir_module` gathers the `@T.prim_func` methods of a class into an `IRModule`.
"""

from __future__ import annotations

from ..ir import IRModule, PrimFunc
from . import builtins as _builtins
from .builtins import (
    DTYPES,
    Select,
    alloc_buffer,
    alloc_sparse_buffer,
    allocate,
    assume_buffer_domain,
    atomic_add,
    attach,
    axis,
    block,
    block_attr,
    cast,
    dense_fixed,
    dense_variable,
    encoding,
    evaluate,
    floordiv,
    floormod,
    func_attr,
    fuse,
    grid,
    if_then_else,
    init,
    layout,
    match_buffer,
    match_sparse_buffer,
    max,
    max_value,
    min,
    min_value,
    parallel,
    reads,
    serial,
    sp_iter,
    sparse_fixed,
    sparse_variable,
    thread_binding,
    unroll,
    vectorized,
    where,
    writes,
)
from .parser import collect_module, parse_python_function, parse_source


def prim_func(fn) -> PrimFunc:
    """Parse the decorated Python function as a script and return its `PrimFunc`."""
    return parse_python_function(fn)


def ir_module(cls) -> IRModule:
    """Gather the `@T.prim_func` functions of the decorated class into an `IRModule`."""
    return collect_module(cls)


def from_script(text: str) -> PrimFunc | IRModule:
    """Parse script text such as `func.script()` prints.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> g = sp.from_script(spmm_script().script())
    >>> g.name, g.stage, sp.structural_equal(g, spmm_script())
    ('csrmm', 1, True)
    """
    return parse_source(text)


globals().update(DTYPES)
globals().update(_builtins.INTRINSIC_STUBS)
iter = sp_iter  # SparseTIR's spelling


def __getattr__(name: str):
    """`T.<intrinsic>` for an intrinsic registered after this module was imported."""
    stub = _builtins.intrinsic_stub(name)
    if stub is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return stub


__all__ = [
    "prim_func",
    "ir_module",
    "from_script",
    "dense_fixed",
    "dense_variable",
    "sparse_fixed",
    "sparse_variable",
    "match_sparse_buffer",
    "encoding",
    "alloc_sparse_buffer",
    "match_buffer",
    "alloc_buffer",
    "allocate",
    "layout",
    "func_attr",
    "sp_iter",
    "fuse",
    "attach",
    "init",
    "block",
    "axis",
    "reads",
    "writes",
    "where",
    "block_attr",
    "serial",
    "parallel",
    "vectorized",
    "unroll",
    "thread_binding",
    "grid",
    "atomic_add",
    "evaluate",
    "min",
    "max",
    "floordiv",
    "floormod",
    "if_then_else",
    "Select",
    "cast",
    "min_value",
    "max_value",
    "assume_buffer_domain",
    *DTYPES,
    *_builtins.INTRINSIC_STUBS,
]
