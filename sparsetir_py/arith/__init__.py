"""Index analysis: XLA-style indexing maps, a bounds-aware simplifier, and interval analysis.

The one place where the compiler reasons about indices: lowering passes and schedule primitives
use it to compute loop extents, drop predicates that cannot fail, compute read/write regions and
flatten buffers through their layouts.

- `AffineExpr` (built with `dim`, `symbol`, `const` and `+ - * floordiv mod`): canonical affine
  expressions; `parse_affine_expr`.
- `IndexingMap` / `parse_indexing_map`: maps with interval domains and constraints; `compose`,
  `simplify`, `evaluate`, `is_empty`, `is_identity`, `str()`.
- `simplify_expr` / `RangeEnv`: the simplifier on its own, for expressions over known intervals.
- `linearize_map` / `delinearize_map` / `reshape_map` / `bitcast_map`: XLA layouts and reshapes
  as indexing maps of `sparsetir_py.ir.Layout`s.
- `int_range` / `prove` / `symbolic_range` / `to_affine` / `from_affine`: interval analysis of IR
  expressions (`sparsetir_py.arith.interval`, which also has `simplify` for IR expressions).
"""

from .affine import AffineExpr, DimId, FloorDiv, Interval, Mod, SymbolId, const, dim, symbol
from .errors import IndexingMapError
from .indexing_map import AffineMap, IndexingMap, RuntimeVar, Variable
from .interval import from_affine, int_range, prove, symbolic_range, to_affine
from .layout_maps import bitcast_map, delinearize_map, linearize_map, reshape_map
from .parser import parse_affine_expr, parse_affine_map, parse_indexing_map
from .simplify import RangeEnv, simplify_expr

__all__ = [
    "AffineExpr",
    "AffineMap",
    "DimId",
    "FloorDiv",
    "IndexingMap",
    "IndexingMapError",
    "Interval",
    "Mod",
    "RangeEnv",
    "RuntimeVar",
    "SymbolId",
    "Variable",
    "bitcast_map",
    "const",
    "delinearize_map",
    "dim",
    "from_affine",
    "int_range",
    "linearize_map",
    "parse_affine_expr",
    "parse_affine_map",
    "parse_indexing_map",
    "prove",
    "reshape_map",
    "simplify_expr",
    "symbol",
    "symbolic_range",
    "to_affine",
]
