"""Outputs whose structure the kernel assembles (`T.sparse_variable(..., assemble=True)`, the design card §3f).

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

from ..arith.lattice import ZERO, lattice, render, simplify_absent
from ..errors import LoweringError
from ..ir.axis import DENSE_FIXED, SPARSE_VARIABLE, Axis
from ..ir.buffer import SparseBuffer
from ..ir.expr import BinOp, BufferLoad, Cast, FloatImm, IntImm, PrimExpr, UnaryOp, Var
from ..ir.func import PrimFunc
from ..ir.stmt import BufferStore, SparseIteration
from ..ir.visit import post_order_rewrite, walk


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


# ------------------------------------------------------------------ kernels
# What `lower_sparse_iter` makes of a function with an assembled output: the Stage II kernels of
# `sp.ops.spgemm` / `add` / `multiply` (`coiteration.kernels`), instantiated for the script's
# dtypes, each with the plan (`Assembly`, JSON in its `assemble` attribute) that `sp.build` turns
# into one `AssembledKernel`: the caller's arguments mapped onto the kernels', the host steps
# between them (prefix sum, allocation, compaction) and the assembled arrays returned.


@dataclass(frozen=True)
class Operand:
    """A CSR operand of the script: its parameters (values, indptr, indices) and sizes (rows,
    columns, nnz), each a parameter name or a constant."""

    name: str  # the buffer's name, for messages
    values: str
    indptr: str
    indices: str
    rows: str | int
    cols: str | int
    nnz: str | int


@dataclass(frozen=True)
class Assembly:
    """How a script's assembled output is computed: `op` "spgemm" (`C = A @ B`), "masked" (`C =
    (A @ B) .* M` where M stores, the operands A, B, M) or "merge" (an element-wise expression
    `tree` of the operands `X0`, `X1`, ... and scalar parameters)."""

    op: str
    operands: tuple[Operand, ...]
    output: dict  # values, indptr, indices, nnz (parameter names; nnz may be None)
    params: tuple[str, ...]  # what the caller passes: the script's parameters less the output's
    idtype: str
    dtype: str
    tree: tuple = ()
    scalars: tuple[str, ...] = ()
    workspace: str = "local"

    def to_json(self) -> str:
        import json

        return json.dumps({**self.__dict__, "operands": [o.__dict__ for o in self.operands]})

    @staticmethod
    def from_json(text: str) -> Assembly:
        import json

        d = json.loads(text)
        d["operands"] = tuple(Operand(**o) for o in d["operands"])
        d["tree"], d["scalars"], d["params"] = _tuples(d["tree"]), tuple(d["scalars"]), tuple(d["params"])
        return Assembly(**d)


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


#: The workspaces an assembled SpGEMM may use (`Schedule.workspace`): "dense" (an accumulator of
#: `n` values and marks per chunk, with the touched columns listed) or "hash" (a hash table sized
#: by the widest row: for very wide outputs); "global" is the dense one in arrays the kernel
#: passes (CUDA, where a block cannot allocate).
WORKSPACES = {"dense": "local", "hash": "hash", "global": "global"}


def lower(func: PrimFunc) -> dict[str, PrimFunc]:
    """The Stage II kernels of `func`'s assembled output, by name (`LoweringError` where the
    script is not one the kernels compute: see `match`)."""
    from ..script import from_script
    from . import kernels

    plan = match(func)
    if plan.op == "masked":
        sources = {
            "spgemm_masked": kernels.spgemm_masked_script(plan.idtype, plan.dtype, plan.workspace, mask_values=True),
            "compact": kernels.compact_script(plan.idtype, plan.dtype),
        }
    elif plan.op == "spgemm":
        sources = {
            "spgemm_count": kernels.spgemm_count_script(plan.idtype, plan.dtype, plan.workspace),
            "spgemm_numeric": kernels.spgemm_numeric_script(plan.idtype, plan.dtype, plan.workspace),
        }
    else:
        names = tuple(f"X{t}" for t in range(len(plan.operands)))
        lat = lattice_of(plan.tree, names)
        if len(names) == 2:
            text = render(plan.tree, {"X0": "A", "X1": "B"})
            merge = kernels.merge_script(lattice(text), plan.scalars, plan.idtype, plan.dtype)
        else:
            merge = kernels.merge_many_script(lat, plan.tree, plan.scalars, plan.idtype, plan.dtype)
        sources = {"merge": merge, "compact": kernels.compact_script(plan.idtype, plan.dtype)}
    out = {}
    for role, source in sources.items():
        f = from_script(source)
        out[role] = f.with_attr("assemble", plan.to_json()).with_attr("assemble_role", role)
    return out


def lattice_of(tree: tuple, names: tuple[str, ...]):
    return lattice(render(tree), names)


def match(func: PrimFunc) -> Assembly:
    """The assembly of `func`: one sparse iteration writing one assembled output `C` over
    `(I, JC)`, either

    * SpGEMM: `[I, K, J]` "SRS" (or `[I, J, K]` "SSR"), `K` A's sorted compressed level under
      `I`, `J` dense; body `C[i, j] = C[i, j] + A[i, k] * B[k, j]` with B over `(KB, JB)`, `JB` a
      sorted compressed level under the dense root `KB`; init, if any, `C[i, j] = 0`; a third
      factor `M[i, j]` of a CSR buffer over `(I, JM)` makes it a masked product (C stores only
      coordinates M stores, each value times M's);
    * element-wise: `[I, J]` "SS", `J` dense; body `C[i, j] = E` where `E` is made of `+`, `-`,
      `*`, constants, scalar parameters and reads `X[i, j]` of sparse buffers over `(I, JX)`,
      `JX` sorted compressed levels, default value 0, and is 0 where no operand is stored (else
      the output would be dense).

    Operands and output share one index dtype and one value dtype. Anything else is a
    `LoweringError` saying what the kernels take (the interpreter still runs it).
    """
    outputs = assembled_outputs(func)
    its = [n for n in walk(func.body) if isinstance(n, SparseIteration)]
    if len(outputs) != 1 or len(its) != 1:
        _fail(func, f"expected one sparse iteration writing one assembled output, got {len(its)} and {len(outputs)}")
    out, it = outputs[0], its[0]
    C = out.buffer
    if len(C.axes) != 2:
        _fail(func, f"the assembled output `{C.name}` must be a matrix over (I, JC), got {len(C.axes)} axes")
    workspace = WORKSPACES[it.attrs.get("workspace", "dense")]
    output = {"values": out.values, "indptr": out.indptr, "indices": out.indices, "nnz": out.nnz}
    params = tuple(p.name for p in func.params if p.name not in output.values())
    if "R" in it.kinds:
        return _match_spgemm(func, it, C, output, params, workspace)
    return _match_merge(func, it, C, output, params)


def _fail(func: PrimFunc, message: str):
    raise LoweringError(f"in `lower_sparse_iter` of `{func.name}` (assembled output): {message}")


def _size(func: PrimFunc, e, what: str) -> str | int:
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var) and e in func.params:
        return e.name
    _fail(func, f"{what} must be a scalar parameter or a constant, got {e!r}")


def _operand(func: PrimFunc, buf: SparseBuffer, rows) -> Operand:
    axis = buf.axes[-1]
    if axis.kind != SPARSE_VARIABLE or not axis.sorted or len(buf.axes) != 2 or axis.parent is not buf.axes[0]:
        _fail(func, f"operand `{buf.name}` must be CSR: a sorted sparse_variable level under a dense_fixed root")
    if buf.default_value != 0:
        _fail(func, f"operand `{buf.name}` has default value {buf.default_value}; the kernels read 0 where unstored")
    return Operand(
        buf.name, buf.data.name, axis.indptr.name, axis.indices.name, _size(func, rows, f"rows of `{buf.name}`"),
        _size(func, axis.length, f"columns of `{buf.name}`"), _size(func, axis.nnz, f"nnz of `{buf.name}`"),
    )  # fmt: skip


def _dtypes(func: PrimFunc, bufs) -> tuple[str, str]:
    idtypes = {b.axes[-1].idtype for b in bufs}
    dtypes = {b.dtype for b in bufs}
    if len(idtypes) != 1 or len(dtypes) != 1 or next(iter(dtypes)) not in ("float32", "float64"):
        _fail(func, f"operands and output must share one index dtype and one float dtype, got {idtypes} and {dtypes}")
    return idtypes.pop(), dtypes.pop()


def _match_spgemm(func, it, C, output, params, workspace) -> Assembly:
    order = {"SRS": (0, 1, 2), "SSR": (0, 2, 1)}.get(it.kinds)
    body = it.body
    if order is None or not isinstance(body, BufferStore) or body.buffer is not C:
        _fail(func, 'a reduction must be SpGEMM: `[I, K, J]` "SRS" with body `C[i, j] = C[i, j] + A[i, k] * B[k, j]`')
    i, k, j = (it.iter_vars[t] for t in order)
    I, K, J = (it.axes[t] for t in order)
    product = _increment(body, (i, j))
    if product is None or not isinstance(product, BinOp) or product.op != "*":
        _fail(func, f"expected the update `{C.name}[i, j] = {C.name}[i, j] + A[i, k] * B[k, j]`")
    factors = _factors(product)
    masks = [f for f in factors if isinstance(f, BufferLoad) and f.indices == (i, j)]
    loads = [f for f in factors if f not in masks]
    if len(factors) != len(loads) + len(masks) or len(loads) != 2 or len(masks) > 1:
        _fail(func, f"expected the update `{C.name}[i, j] = {C.name}[i, j] + A[i, k] * B[k, j]` (times, for a "
                    f"masked product, one `M[i, j]`)")  # fmt: skip
    if isinstance(loads[0], BufferLoad) and loads[0].indices == (k, j):
        loads.reverse()
    A, B = loads
    if not (isinstance(A, BufferLoad) and A.indices == (i, k) and isinstance(B, BufferLoad) and B.indices == (k, j)):
        _fail(func, "the product must read A[i, k] and B[k, j] at the iterators")
    if not isinstance(A.buffer, SparseBuffer) or A.buffer.axes != (I, K) or not isinstance(B.buffer, SparseBuffer):
        _fail(func, f"`{A.buffer.name}` must be the sparse buffer whose levels (I, K) the iteration walks")
    if not isinstance(J, Axis) or J.kind != DENSE_FIXED or C.axes[0] is not I:
        _fail(func, "J must be a dense_fixed axis and the output's rows the iteration's I")
    if it.init is not None and not (
        isinstance(it.init, BufferStore) and it.init.buffer is C and _is_zero(it.init.value)
    ):
        _fail(func, f"the init must be `{C.name}[i, j] = 0`")
    _same_columns(func, J, C, [B.buffer, *(f.buffer for f in masks)])
    a = _operand(func, A.buffer, I.length)
    b = _operand(func, B.buffer, B.buffer.axes[0].length)
    if masks:
        # Masked SpGEMM: only where M stores (i, j), each entry times M's value there.
        M = masks[0].buffer
        if not isinstance(M, SparseBuffer) or M.axes[0] is not I:
            _fail(func, f"the mask `{M.name}` must be a sparse buffer over (I, JM), I the output's rows")
        mask = _operand(func, M, I.length)
        idtype, dtype = _dtypes(func, (A.buffer, B.buffer, M, C))
        return Assembly("masked", (a, b, mask), output, params, idtype, dtype, workspace=workspace)
    idtype, dtype = _dtypes(func, (A.buffer, B.buffer, C))
    return Assembly("spgemm", (a, b), output, params, idtype, dtype, workspace=workspace)


def _same_columns(func: PrimFunc, J: Axis, C: SparseBuffer, operands) -> None:
    """The iterated `J`, the output's level and the operands' last levels have one length (the
    same expression): the kernels write every column an operand stores, where the iteration
    visits only those below J's length and the output holds only those below its own."""
    for buf in (C, *operands):
        axis = buf.axes[-1]
        if isinstance(buf, SparseBuffer) and axis.length != J.length:
            found = f"`{axis.name}` (of `{buf.name}`) has {_text(axis.length)}"
            found += f" and the iterated `{J.name}` {_text(J.length)}"
            _fail(func, f"expected the output, J and the operands to have columns of one length, but {found}")


def _factors(e) -> list:
    """The factors of a product `x * y * ...` (any nesting)."""
    if isinstance(e, BinOp) and e.op == "*":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _match_merge(func, it, C, output, params) -> Assembly:
    body = it.body
    if it.kinds != "SS" or not isinstance(body, BufferStore) or body.buffer is not C or it.init is not None:
        _fail(func, 'an element-wise output is written by `[I, J]` "SS" with one store `C[i, j] = E`')
    i, j = it.iter_vars
    I, J = it.axes
    if body.indices != (i, j) or not isinstance(J, Axis) or J.kind != DENSE_FIXED or C.axes[0] is not I:
        _fail(func, f"expected `{C.name}[i, j] = E` with `j` over a dense_fixed axis")
    loads: list[SparseBuffer] = []
    scalars: list[str] = []
    tree = _tree(func, body.value, (i, j), loads, scalars)
    if not loads:
        _fail(func, "the expression reads no sparse operand")
    names = {f"X{t}" for t in range(len(loads))}
    if simplify_absent(tree, names) != ZERO:
        _fail(func, f"`{_text(body.value)}` is not 0 where no operand is stored: the output would be dense")
    _same_columns(func, J, C, loads)
    operands = tuple(_operand(func, b, I.length) for b in loads)
    idtype, dtype = _dtypes(func, (*loads, C))
    for s in scalars:
        if func.param(s).dtype != dtype:
            _fail(func, f"scalar `{s}` must have the values' dtype {dtype}, got {func.param(s).dtype}")
    return Assembly("merge", operands, output, params, idtype, dtype, tree, tuple(scalars))


def _tree(func, e, ij, loads: list, scalars: list) -> tuple:
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        return (e.op, _tree(func, e.a, ij, loads, scalars), _tree(func, e.b, ij, loads, scalars))
    if isinstance(e, UnaryOp) and e.op == "-":
        return ("neg", _tree(func, e.a, ij, loads, scalars))
    if isinstance(e, Cast):
        return _tree(func, e.value, ij, loads, scalars)
    if isinstance(e, IntImm | FloatImm):
        return ("num", e.value)
    if isinstance(e, Var) and e in func.params and e.dtype != "handle":
        if e.name not in scalars:
            scalars.append(e.name)
        return ("name", e.name)
    if isinstance(e, BufferLoad) and isinstance(e.buffer, SparseBuffer) and e.indices == ij:
        if e.buffer not in loads:
            loads.append(e.buffer)
        return ("name", f"X{loads.index(e.buffer)}")
    _fail(func, f"`{_text(e)}`: an element-wise expression takes +, -, *, constants, scalar parameters and "
                "reads `X[i, j]` of sparse operands")  # fmt: skip


def _increment(store: BufferStore, ij) -> PrimExpr | None:
    v = store.value
    target = BufferLoad(store.buffer, store.indices)
    if store.indices != ij or not isinstance(v, BinOp) or v.op != "+":
        return None
    return v.b if v.a == target else v.a if v.b == target else None


def _is_zero(e) -> bool:
    return isinstance(e, IntImm | FloatImm) and e.value == 0


def _text(e) -> str:
    from ..ir.printer import ScriptPrinter

    return ScriptPrinter().expr(e)
