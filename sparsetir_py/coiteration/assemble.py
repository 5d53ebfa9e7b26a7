"""Outputs whose structure the kernel assembles (`T.sparse_variable(..., assemble=True)`, DESIGN §3f).

An assembled output `C` over `(I, JC)` has no structure before the call: the caller passes no
`indptr`, `indices`, `nnz` or values for it and receives them. Which coordinates it stores is
*structural*, as TACO's iteration lattices decide (`sparsetir_py.arith.lattice`) and as
`sp.ops.spgemm` / `add` / `multiply` assemble them: a coordinate is stored where a write puts a
value that some stored operand reaches, whatever that value is (a computed 0, as in `A - A`, an
explicit zero of an operand, a product whose terms cancel, stays stored; `C.eliminate_zeros()`
gives scipy's matrix). In coordinate space that is a *presence* carried by every value next to it:

* a read of a sparse buffer is present where its structure stores the coordinate; a read of a
  dense buffer, a scalar parameter or an iterator is present; a constant is present unless it is 0;
* `x * y` is present where both are (an absent factor is a 0), `x + y`, `x - y` and every other
  operator where either is; `-x` and casts keep `x`'s;
* a write stores its value's presence; an update `C[e] = C[e] + x` the presence of `C[e]` or `x`.

The output's structure is the coordinates present after the iteration, in row order, sorted. So
an init `C[i, j] = 0.0` stores nothing, and `C[i, j] = A[i, j] + 1.0` a dense row (the kernels
take only expressions that are 0 where no operand is stored; the interpreter runs any).

`densify(func)` is how the interpreter (`sparsetir_py.interp`) runs such a function: the
assembled level becomes a dense one of the same length, the output a dense array, and a presence
mask next to it decides the structure (`assembled_arrays`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.axis import DENSE_FIXED, Axis
from ..ir.buffer import SparseBuffer
from ..ir.func import PrimFunc
from ..ir.visit import post_order_rewrite


@dataclass(frozen=True)
class AssembledOutput:
    """One assembled output: its buffer and level, and the names of what the kernel returns."""

    buffer: SparseBuffer  # C over (I, JC), as declared
    axis: Axis  # JC, the assembled level
    values: str  # the values' parameter
    indptr: str
    indices: str
    nnz: str | None  # the nnz parameter, where JC's nnz is one


def assembled_outputs(func: PrimFunc) -> tuple[AssembledOutput, ...]:
    """The function's assembled outputs, in declaration order (empty for most functions)."""
    out = []
    for buf in func.buffers:
        if not isinstance(buf, SparseBuffer) or not buf.axes or not buf.axes[-1].assemble:
            continue
        axis = buf.axes[-1]
        nnz = axis.nnz.name if axis.nnz is not None and hasattr(axis.nnz, "name") and axis.nnz in func.params else None
        out.append(AssembledOutput(buf, axis, buf.data.name, axis.indptr.name, axis.indices.name, nnz))
    return tuple(out)


def is_assembled(func: PrimFunc) -> bool:
    return any(a.assemble for a in func.axes)


def densify(func: PrimFunc) -> tuple[PrimFunc, dict[SparseBuffer, SparseBuffer]]:
    """`func` with every assembled level a dense_fixed root of the same length, its outputs dense
    buffers over it and its structure parameters gone; and the map original -> dense buffer."""
    outputs = assembled_outputs(func)
    levels = {o.axis: Axis(o.axis.name, DENSE_FIXED, o.axis.length, idtype=o.axis.idtype) for o in outputs}
    buffers = {o.buffer: o.buffer.replace(axes=(*o.buffer.axes[:-1], levels[o.axis])) for o in outputs}

    def swap(node):
        return buffers.get(node, node) if isinstance(node, SparseBuffer) else node

    body = post_order_rewrite(func.body, swap)
    dropped = {name for o in outputs for name in (o.indptr, o.indices, o.nnz) if name is not None}
    # A dense root is declared before anything that follows it (its parent-free position is free).
    axes = tuple(levels.get(a, a) for a in func.axes)
    dense = func.replace(
        params=tuple(p for p in func.params if p.name not in dropped),
        axes=tuple(sorted(axes, key=lambda a: a.kind != DENSE_FIXED or a.parent is not None)),
        buffers=tuple(buffers.get(b, b) for b in func.buffers),
        body=body,
    )
    return dense, {o.buffer: buffers[o.buffer] for o in outputs}


def assembled_arrays(output: AssembledOutput, values: np.ndarray, present: np.ndarray) -> dict[str, object]:
    """The canonical CSR arrays of an output held dense (`values`, `present`, both `(m, n)`):
    `{indptr: ..., indices: ..., values: ..., nnz: ...}` keyed by the function's parameter names."""
    idtype = np.dtype(output.axis.idtype)
    m = present.shape[0]
    indptr = np.zeros(m + 1, idtype)
    np.cumsum(present.sum(axis=1), out=indptr[1:])
    rows, cols = np.nonzero(present)
    out: dict[str, object] = {
        output.indptr: indptr,
        output.indices: cols.astype(idtype),
        output.values: values[rows, cols].astype(output.buffer.dtype),
    }
    if output.nnz is not None:
        out[output.nnz] = int(indptr[-1])
    return out
