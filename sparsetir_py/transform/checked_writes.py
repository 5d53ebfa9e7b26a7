"""How `lower_sparse_iter` lowers a checked write (`ir.verify.CheckedWrite`).

A write the verifier cannot prove stored becomes

    if <every dense index in range> and <the coordinates are found in the structure>:
        B[positions] = value
    else:
        if B_unstored[0] == 0:              # the first miss records its coordinates
            B_unstored[1] = c0; B_unstored[2] = c1; ...
        B_unstored[0] = 1

`B_unstored` is a function-level scratch buffer (int64, one slot per index plus the flag), which
the runtime allocates zeroed per call and reads after it (`format.checked_writes`). Writes the
verifier proves stored are not touched: they cost nothing extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..format.checked_writes import ATTR
from ..ir import make as mk
from ..ir.axis import DENSE_FIXED
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BufferLoad, IntImm, PrimExpr, const
from ..ir.func import PrimFunc
from ..ir.node import FrozenDict
from ..ir.stmt import BufferStore, IfThenElse, Stmt, seq

FLAG_DTYPE = "int64"


def flag_buffer(buf: SparseBuffer, fresh: Callable[[str], str]) -> FlatBuffer:
    """The error flag of writes to `buf`: `[missed, c0, c1, ...]`."""
    return FlatBuffer(fresh(f"{buf.name}_unstored"), (IntImm(1 + len(buf.axes), "int32"),), FLAG_DTYPE)


def in_range(buf: SparseBuffer, coords: Sequence[PrimExpr | None]) -> PrimExpr | None:
    """`0 <= c < length` for each dense-fixed axis of `buf` whose coordinate is given (None: an
    iterator of that axis itself, always in range)."""
    cond = None
    for a, c in zip(buf.axes, coords):
        if a.kind != DENSE_FIXED or c is None:
            continue
        c = mk.cast(a.idtype, c)
        zero = IntImm(0, a.idtype)
        cond = mk.and_(cond, mk.and_(mk.cmp("<=", zero, c), mk.cmp("<", c, mk.cast(a.idtype, a.length))))
    return cond


def report_miss(flag: FlatBuffer, coords: Sequence[PrimExpr]) -> Stmt:
    """Record a miss at `coords` in `flag` (the first miss keeps its coordinates)."""
    zero, one = IntImm(0, FLAG_DTYPE), IntImm(1, FLAG_DTYPE)
    record = seq(*(BufferStore(flag, (IntImm(k + 1, "int32"),), mk.cast(FLAG_DTYPE, c)) for k, c in enumerate(coords)))
    first = mk.cmp("==", BufferLoad(flag, (IntImm(0, "int32"),)), zero)
    return seq(IfThenElse(first, record), BufferStore(flag, (IntImm(0, "int32"),), one))


def checked_store(store: Stmt, found: PrimExpr | None, bounds: PrimExpr | None, report: Stmt) -> Stmt:
    """The store when the bounds hold and the search finds the coordinates, else the report. The
    bounds come first: the search reads structure arrays at the positions they guard."""
    return IfThenElse(mk.and_(bounds, found) or const(True), store, report)


def with_flags(func: PrimFunc, flags: dict[SparseBuffer, FlatBuffer]) -> PrimFunc:
    """`func` with the `checked_writes` attribute naming its flags."""
    if not flags:
        return func
    pairs = tuple((flag.name, buf.name) for buf, flag in flags.items())
    return func.replace(attrs=FrozenDict({**func.attrs, ATTR: pairs}))
