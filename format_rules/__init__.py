"""Format rules shipped with the project, written the way a user writes one.

A rule file defines `rules(**params) -> list[sp.FormatRewriteRule]` and may define
`convert(A, **params) -> dict` (the arguments of every new parameter, keyed by their renamed
names, for a scipy matrix `A`). Shipped: `bsr` (`block_size`), `ell` (`buckets`), `hyb`
(`num_col_parts`, `buckets`), `padding` (`pad_size`). `load(path)` loads a user's file as a
module of the same protocol.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from sparsetir_py.errors import FormatError

from . import bsr, ell, hyb, padding

SHIPPED = {"bsr": bsr, "ell": ell, "hyb": hyb, "padding": padding}


def load(path) -> ModuleType:
    """Load a user's rule file (a `.py` path) as a module; it must define `rules`."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise FormatError(f"format_rules.load: no rule file at {path}")
    name = f"format_rules_user_{path.stem}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FormatError(f"format_rules.load: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not callable(getattr(module, "rules", None)):
        raise FormatError(f"format_rules.load: {path.name} defines no `rules(**params)`")
    return module


__all__ = ["SHIPPED", "bsr", "ell", "hyb", "load", "padding"]
