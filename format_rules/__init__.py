"""Format rules shipped with the project, written the way a user writes one.

A rule file defines `rules(**params) -> list[sp.FormatRewriteRule]` and may define
`convert(A, **params) -> dict` (the arguments of every new parameter, keyed by their renamed
names, for a scipy matrix `A`). Shipped: `bsr` (`block_size`), `ell` (`buckets`), `hyb`
(`num_col_parts`, `buckets`), `colparts` (`num_col_parts`, `row_blocks`), `padding`
(`pad_size`). `load(path)` loads a user's file as a module of the same protocol.

Parameters are checked before any work (`sp.FormatError` naming the parameter and the value):
sizes (`block_size`, `pad_size`, `num_col_parts`) are positive integers, Python or numpy;
`buckets` is a non-empty list of distinct powers of two; `num_col_parts` is at most the matrix's
column count (or 4); and what the new format stores must fit its index dtype.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from sparsetir_py.errors import FormatError

from . import bsr, colparts, ell, hyb, padding

SHIPPED = {"bsr": bsr, "colparts": colparts, "ell": ell, "hyb": hyb, "padding": padding}


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
    except Exception as e:
        sys.modules.pop(name, None)
        raise _load_error(path, e) from e
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not callable(getattr(module, "rules", None)):
        raise FormatError(f"format_rules.load: {path.name} defines no `rules(**params)`")
    if hasattr(module, "convert") and not callable(module.convert):
        raise FormatError(
            f"format_rules.load: {path.name} defines `convert`, but not as a function `convert(A, **params)`"
        )
    return module


def _load_error(path: Path, e: Exception) -> FormatError:
    """The error of a rule file that does not run: its file, line and source line, and what went wrong."""
    if isinstance(e, SyntaxError) and (e.filename is None or Path(e.filename).resolve() == path):
        line, col, text = e.lineno or 0, (e.offset or 1) - 1, e.text or ""
        where = f"{path}:{line}:{col + 1}: syntax error in the rule file: {e.msg}"
        return FormatError(f"{where}\n    {text.rstrip()}\n    {' ' * col}^" if text.strip() else where)
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == path]
    line = frames[-1].lineno if frames else 0
    source = frames[-1].line if frames else ""
    text = f"{path}:{line}: the rule file raised {type(e).__name__}: {e}"
    return FormatError(f"{text}\n    {source}" if source else text)


__all__ = ["SHIPPED", "bsr", "colparts", "ell", "hyb", "load", "padding"]
