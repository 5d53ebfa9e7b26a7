"""A reference interpreter for Stages II and III, loop by loop.

Point by point, in plain Python, following TensorIR semantics: a block binds its iterators to
their values, does nothing when its predicate is false, and runs its `init` when every reduction
iterator is 0. Slow, and meant to be: it is the oracle that tells a lowering bug from a code
generation bug on small inputs.

What it shares with what it checks: the IR and argument binding (`format.args`, so that kernels
and the interpreter reject the same inputs and see the same value arrays). What it does not: no
lowering pass runs. A Stage III access is a flat offset, checked against the buffer's size. A
Stage II access to a sparse buffer is in position space (`A[vi, vj]`: row `vi`, position `vj`
within it), and the interpreter finds the element itself, level by level, from the axes' own
data: a dense level multiplies by its length, a fixed sparse level by its `nnz_cols`, a variable
level starts at `indptr[parent offset]`; every position is checked against its level's extent
in its row (a stricter check than the flat size), except the last one of a buffer with
`extra_storage`, which SparseTIR reads by flat position (`K_indptr[vi, vj + 1]`). Flat buffers
of several dimensions go through their layout's `linear_index`. A `while` loop whose iteration
changes no buffer element would never end: an `InterpretError`.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InterpretError
from ..format.args import AxisData, BoundArguments
from ..format.checked_writes import raise_if_missed
from ..ir import dtype as dt
from ..ir.axis import DENSE_FIXED, SPARSE_FIXED, Axis
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.eval import eval_int
from ..ir.expr import BinOp, BufferLoad, Call, Cast, FloatImm, IntImm, PrimExpr, Select, UnaryOp, Var
from ..ir.func import PrimFunc
from ..ir.printer import ScriptPrinter
from ..ir.stmt import (
    Allocate,
    AtomicAdd,
    Block,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
    While,
)

SCALAR_CALLS = {
    "exp": math.exp,
    "exp2": lambda x: 2.0**x,
    "log": math.log,
    "log2": math.log2,
    "log1p": math.log1p,
    "sqrt": math.sqrt,
    "rsqrt": lambda x: 1 / math.sqrt(x),
    "tanh": math.tanh,
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
    "erf": math.erf,
    "sin": math.sin,
    "cos": math.cos,
    "abs": abs,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": round,
    "trunc": math.trunc,
    "isnan": math.isnan,
    "isinf": math.isinf,
    "pow": pow,
    "fmod": math.fmod,
    "bitwise_and": lambda a, b: int(a) & int(b),
    "bitwise_or": lambda a, b: int(a) | int(b),
    "shift_left": lambda a, b: _wrap64(int(a) << int(b)),
    "shift_right": lambda a, b: int(a) >> int(b),
    "ctz": lambda x: count_trailing_zeros(int(x)),
}


def count_trailing_zeros(x: int) -> int:
    """Trailing zero bits of a nonzero integer; 0 has none to count (the compiled targets differ
    there: 64 on the CPU, -1 on CUDA), so the interpreter refuses it."""
    if x == 0:
        raise InterpretError("T.ctz(0): ctz is defined for nonzero integers only")
    return (x & -x).bit_length() - 1


def _wrap64(v: int) -> int:
    """`v` as a two's-complement int64 (a shift into the sign bit, as the compiled code gives)."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


class LoopInterpreter:
    def __init__(self, func: PrimFunc, bound: BoundArguments):
        self.func = func
        self.env: dict[Var, object] = dict(bound.scalars)
        self.data: dict[FlatBuffer, np.ndarray] = dict(bound.buffers)
        self.axes: dict[Axis, AxisData] = dict(bound.axes)
        self.changes = 0  # stores and atomic adds that changed an element (a `while` loop's progress)

    # ---------------------------------------------------------------- expressions
    def ev(self, e: PrimExpr):
        if isinstance(e, IntImm):
            return bool(e.value) if e.dtype == "bool" else e.value
        if isinstance(e, FloatImm):
            return np.dtype(e.dtype).type(e.value)
        if isinstance(e, Var):
            if e not in self.env:
                raise InterpretError(f"variable `{e.name}` has no value here")
            return self.env[e]
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, UnaryOp):
            a = self.ev(e.a)
            return (not a) if e.op == "not" else -a
        if isinstance(e, Select):
            return self.ev(e.true_value) if self.ev(e.cond) else self.ev(e.false_value)
        if isinstance(e, Cast):
            return self.cast(e.dtype, self.ev(e.value))
        if isinstance(e, BufferLoad):
            arr, k = self.element(e.buffer, e.indices)
            v = arr[k]
            return int(v) if dt.is_int(e.buffer.dtype) else v
        if isinstance(e, Call):
            return self.call(e)
        raise InterpretError(f"cannot evaluate {type(e).__name__}")

    def cast(self, dtype: str, v):
        if dtype == "bool":
            return bool(v)
        if dt.is_int(dtype):
            return int(np.array(v).astype(dtype))
        return np.dtype(dtype).type(v)

    def binop(self, e: BinOp):
        if e.op == "and":
            return bool(self.ev(e.a)) and bool(self.ev(e.b))
        if e.op == "or":
            return bool(self.ev(e.a)) or bool(self.ev(e.b))
        a, b = self.ev(e.a), self.ev(e.b)
        op = e.op
        if op in ("//", "%") and dt.is_int(e.dtype) and b == 0:
            raise InterpretError(f"integer division by zero in `{op}`")
        result = {
            "+": lambda: a + b,
            "-": lambda: a - b,
            "*": lambda: a * b,
            "/": lambda: a / b,
            "//": lambda: a // b,
            "%": lambda: a % b,
            "min": lambda: min(a, b),
            "max": lambda: max(a, b),
            "==": lambda: a == b,
            "!=": lambda: a != b,
            "<": lambda: a < b,
            "<=": lambda: a <= b,
            ">": lambda: a > b,
            ">=": lambda: a >= b,
        }[op]()
        if op in ("==", "!=", "<", "<=", ">", ">="):
            return bool(result)
        return self.cast(e.dtype, result) if dt.is_float(e.dtype) else int(result)

    def call(self, e: Call):
        if e.op == "lower_bound":
            buf, lo, hi, value = e.args
            arr = self.array(buf)
            lo, hi, value = self.ev(lo), self.ev(hi), self.ev(value)
            if not 0 <= lo <= hi <= arr.size:
                raise InterpretError(f"lower_bound over [{lo}, {hi}) outside `{buf.name}` (size {arr.size})")
            return lo + int(np.searchsorted(arr[lo:hi], value, side="left"))
        if e.op == "linear_find":
            buf, lo, hi, value = e.args
            arr = self.array(buf)
            lo, hi, value = self.ev(lo), self.ev(hi), self.ev(value)
            if not 0 <= lo <= hi <= arr.size:
                raise InterpretError(f"linear_find over [{lo}, {hi}) outside `{buf.name}` (size {arr.size})")
            hits = np.flatnonzero(arr[lo:hi] == value)
            return lo + int(hits[0]) if hits.size else hi
        if e.op == "sort_range":
            buf, lo, hi = e.args
            arr = self.array(buf)
            lo, hi = self.ev(lo), self.ev(hi)
            if not 0 <= lo <= hi <= arr.size:
                raise InterpretError(f"sort_range over [{lo}, {hi}) outside `{buf.name}` (size {arr.size})")
            arr[lo:hi] = np.sort(arr[lo:hi])
            return hi
        if e.op == "prefetch":
            # A hint reads nothing, but its address must lie in the buffer, formed from loads
            # inside theirs (`inject_prefetch` clamps them): checked, not read.
            (load,) = e.args
            self.element(load.buffer, load.indices)
            return None
        if e.op in ("syncthreads", "syncwarp"):
            return None
        fn = SCALAR_CALLS.get(e.op)
        if fn is None:
            raise InterpretError(f"the interpreter has no meaning for intrinsic `{e.op}`")
        with np.errstate(all="ignore"):
            value = fn(*(self.ev(a) for a in e.args))
        return self.cast(e.dtype, value)

    def array(self, buf) -> np.ndarray:
        if buf not in self.data:
            raise InterpretError(f"buffer `{buf.name}` is not allocated here")
        return self.data[buf]

    def element(self, buf, indices) -> tuple[np.ndarray, int]:
        arr = self.array(buf)
        values = [int(self.ev(i)) for i in indices]
        if isinstance(buf, SparseBuffer) and len(values) > 1:
            k = self.position_offset(buf, values)
        elif len(values) == 1:
            k = values[0]
        else:
            shape = [int(self.ev(n)) for n in buf.shape]
            if len(values) != len(shape) or not all(0 <= v < n for v, n in zip(values, shape)):
                raise InterpretError(f"`{buf.name}` accessed at {tuple(values)}, outside its shape {tuple(shape)}")
            k = buf.layout.linear_index(values, shape)
        if not 0 <= k < arr.size:
            raise InterpretError(f"`{buf.name}` accessed at offset {k}, outside [0, {arr.size})")
        return arr, k

    def position_offset(self, buf: SparseBuffer, positions: list[int]) -> int:
        """The element of a Stage II sparse buffer at `positions`, one per axis (see the module
        docstring); a position outside its level's extent in its row is an `InterpretError`."""
        if len(positions) != len(buf.axes):
            raise InterpretError(f"`{buf.name}` accessed with {len(positions)} positions for {len(buf.axes)} axes")
        off = None
        for axis, p in zip(buf.axes, positions):
            data = self.axes[axis]
            if off is None or axis.kind == DENSE_FIXED:
                extent = data.length
                base = 0 if off is None else off * data.length
            elif axis.kind == SPARSE_FIXED:
                extent = data.nnz_cols
                base = off * data.nnz_cols
            else:  # sparse or dense variable: the row `off` of the parent level
                if not 0 <= off < len(data.indptr) - 1:
                    raise InterpretError(f"`{buf.name}`: row {off} of axis `{axis.name}` does not exist")
                base, extent = int(data.indptr[off]), int(data.indptr[off + 1] - data.indptr[off])
            last = axis is buf.axes[-1]
            if not 0 <= p < extent and not (last and buf.extra_storage is not None and p >= 0):
                raise InterpretError(
                    f"`{buf.name}` accessed at position {p} of axis `{axis.name}`, outside [0, {extent}) in its row"
                )
            off = base + p
        return off  # with extra_storage, the last position may run past its row (checked against the storage)

    # ---------------------------------------------------------------- statements
    def run(self, s: Stmt | None) -> None:
        if s is None:
            return
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.run(x)
        elif isinstance(s, For):
            lo, extent = self.ev(s.min), self.ev(s.extent)
            for v in range(lo, lo + extent):
                self.env[s.loop_var] = v
                self.run(s.body)
        elif isinstance(s, Block):
            self.run_block(s)
        elif isinstance(s, BufferStore):
            arr, k = self.element(s.buffer, s.indices)
            value = self.ev(s.value)
            self.changes += bool(arr[k] != value)
            arr[k] = value
        elif isinstance(s, AtomicAdd):
            arr, k = self.element(s.buffer, s.indices)
            value = self.ev(s.value)
            self.changes += bool(value != 0)
            arr[k] += value
        elif isinstance(s, While):
            self.run_while(s)
        elif isinstance(s, IfThenElse):
            self.run(s.then_case if self.ev(s.condition) else s.else_case)
        elif isinstance(s, Allocate):
            self.allocate(s.buffer)
            self.run(s.body)
        elif isinstance(s, LetStmt):
            self.env[s.var] = self.ev(s.value)
            self.run(s.body)
        elif isinstance(s, Evaluate):
            self.ev(s.value)
        else:
            raise InterpretError(f"`{type(s).__name__}` is not a Stage II or III statement")

    def run_while(self, s: While) -> None:
        """`while condition: body`. The loop binds nothing and variables are bound once, so an
        iteration that changes no buffer element leaves everything as it found it: every later
        iteration would be the same, and the loop would never end (a kernel would hang). That is
        an `InterpretError` here, at the first such iteration."""
        while self.ev(s.condition):
            before = self.changes
            self.run(s.body)
            if self.changes == before:
                raise InterpretError(
                    f"`while {ScriptPrinter().expr(s.condition)}`: an iteration changed no buffer element, so "
                    "every later iteration is the same and the loop never ends"
                )

    def allocate(self, buf: FlatBuffer | SparseBuffer) -> None:
        if isinstance(buf, SparseBuffer):  # block-local sparse scratch: the stored size of its levels
            last = max((k for k, a in enumerate(buf.axes) if a.kind != DENSE_FIXED), default=None)
            dense = buf.axes if last is None else buf.axes[last + 1 :]
            size = (1 if last is None else self.axes[buf.axes[last]].n_pos) * math.prod(
                self.axes[a].length for a in dense
            )
            if buf.extra_storage is not None:
                size += self.ev(buf.extra_storage)
            self.data[buf] = np.zeros(size, dtype=buf.dtype)
            return
        size = 1
        for extent in buf.shape:
            value = self.ev(extent)  # may read buffers: a block sizes scratch by its row's length
            size *= value if isinstance(value, int) else eval_int(extent, self.env, f"shape of `{buf.name}`")
        self.data[buf] = np.zeros(size, dtype=buf.dtype)

    def run_block(self, b: Block) -> None:
        for iv in b.iter_vars:
            self.env[iv.var] = self.ev(iv.value)
        if b.predicate is not None and not self.ev(b.predicate):
            return
        for buf in b.alloc_buffers:
            self.allocate(buf)
        if b.init is not None and all(self.env[iv.var] == 0 for iv in b.iter_vars if iv.kind == "R"):
            self.run(b.init)
        self.run(b.body)


def run_loops(func: PrimFunc, bound: BoundArguments) -> None:
    """Execute a Stage II or III function on checked arguments."""
    with np.errstate(all="ignore"):
        LoopInterpreter(func, bound).run(func.body)
    # Checked writes record a miss in their error flags, as in a kernel; the same error follows.
    raise_if_missed(func, {b.name: a for b, a in bound.buffers.items() if b.data is None})
