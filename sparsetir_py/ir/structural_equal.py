"""Structural equality of IR up to renaming (alpha-equivalence).

Variables, axes and buffers compare by position of definition: the first time a pair is met
it is recorded, and later uses must agree with that pairing both ways. Names of the function,
parameters, axes, buffers, loops and iterators are ignored; names of sparse iterations and
blocks, dtypes, loop kinds, bindings and attributes are compared. Statement sequences are
compared flattened (nested and one-element sequences are not a difference).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .axis import Axis
from .buffer import FlatBuffer, SparseBuffer
from .expr import Var
from .func import PrimFunc
from .node import Node
from .stmt import SeqStmt, Stmt

IDENTITY_TYPES = (Var, Axis, SparseBuffer, FlatBuffer)
IGNORED_FIELDS = {Var: {"name"}, Axis: {"name"}, SparseBuffer: {"name"}, FlatBuffer: {"name"}, PrimFunc: {"name"}}


class Mismatch(Exception):
    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _flatten(stmt: Stmt) -> Stmt:
    if not isinstance(stmt, SeqStmt):
        return stmt
    flat: list[Stmt] = []
    for s in stmt.stmts:
        s = _flatten(s)
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


class _Comparer:
    def __init__(self):
        self.left: dict[int, Any] = {}
        self.right: dict[int, Any] = {}

    def eq(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, Stmt):
            a = _flatten(a)
        if isinstance(b, Stmt):
            b = _flatten(b)
        if isinstance(a, IDENTITY_TYPES) or isinstance(b, IDENTITY_TYPES):
            self.eq_identity(a, b, path)
        elif isinstance(a, Node) or isinstance(b, Node):
            self.eq_node(a, b, path)
        elif isinstance(a, tuple | list) and isinstance(b, tuple | list):
            if len(a) != len(b):
                raise Mismatch(path, f"length {len(a)} != {len(b)}")
            for i, (x, y) in enumerate(zip(a, b)):
                self.eq(x, y, f"{path}[{i}]")
        elif isinstance(a, Mapping) and isinstance(b, Mapping):
            if list(a.keys()) != list(b.keys()) and set(a.keys()) != set(b.keys()):
                raise Mismatch(path, f"keys {sorted(a)} != {sorted(b)}")
            for k in a:
                self.eq(a[k], b[k], f"{path}[{k!r}]")
        elif isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return
        elif (type(a) is not type(b) and not (isinstance(a, int | float) and isinstance(b, int | float))) or a != b:
            raise Mismatch(path, f"{a!r} != {b!r}")

    def eq_identity(self, a: Any, b: Any, path: str) -> None:
        if type(a) is not type(b):
            raise Mismatch(path, f"{type(a).__name__} != {type(b).__name__}")
        ka, kb = id(a), id(b)
        if ka in self.left or kb in self.right:
            if self.left.get(ka) is not b or self.right.get(kb) is not a:
                raise Mismatch(path, f"{a!r} and {b!r} are bound to different definitions")
            return
        self.left[ka] = b
        self.right[kb] = a
        self.eq_fields(a, b, path)

    def eq_node(self, a: Any, b: Any, path: str) -> None:
        if type(a) is not type(b):
            raise Mismatch(path, f"{type(a).__name__} != {type(b).__name__}")
        self.eq_fields(a, b, path)

    def eq_fields(self, a: Node, b: Node, path: str) -> None:
        ignored = IGNORED_FIELDS.get(type(a), ())
        for (name, x), (_, y) in zip(a.fields(), b.fields()):
            if name not in ignored:
                self.eq(x, y, f"{path}.{name}")


def _as_comparable(obj):
    from .func import IRModule

    if isinstance(obj, IRModule):
        return obj.functions
    return obj


def structural_equal(a, b) -> bool:
    """True when `a` and `b` (PrimFuncs, IRModules, statements or expressions) are equal up to renaming.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> f = spmm_script()
    >>> sp.structural_equal(f, sp.from_script(f.script()))
    True
    >>> sp.structural_equal(f, spmm_script(dtype="float64"))
    False
    """
    try:
        _Comparer().eq(_as_comparable(a), _as_comparable(b), "root")
    except Mismatch:
        return False
    return True


def assert_structural_equal(a, b) -> None:
    """Raise AssertionError naming the path of the first difference.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> sp.assert_structural_equal(spmm_script(), spmm_script())
    >>> sp.assert_structural_equal(spmm_script(), spmm_script("int64"))
    Traceback (most recent call last):
        ...
    AssertionError: not structurally equal at root.axes[0].idtype: 'int32' != 'int64'
    """
    try:
        _Comparer().eq(_as_comparable(a), _as_comparable(b), "root")
    except Mismatch as m:
        raise AssertionError(f"not structurally equal at {m.path}: {m.message}") from None
