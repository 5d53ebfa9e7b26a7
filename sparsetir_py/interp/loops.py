"""A reference interpreter for Stage III (and, through `lower_sparse_buffer`, Stage II).

Point by point, in plain Python, following TensorIR semantics: a block binds its iterators to
their values, does nothing when its predicate is false, and runs its `init` when every reduction
iterator is 0. It checks every flat access against the buffer's size. Slow, and meant to be: it
is the oracle that tells a lowering bug from a code generation bug on small inputs.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InterpretError
from ..format.args import BoundArguments
from ..ir import dtype as dt
from ..ir.buffer import FlatBuffer
from ..ir.eval import eval_int
from ..ir.expr import BinOp, BufferLoad, Call, Cast, FloatImm, IntImm, PrimExpr, Select, UnaryOp, Var
from ..ir.func import PrimFunc
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
}


class LoopInterpreter:
    def __init__(self, func: PrimFunc, bound: BoundArguments):
        self.func = func
        self.env: dict[Var, object] = dict(bound.scalars)
        self.data: dict[FlatBuffer, np.ndarray] = dict(bound.buffers)

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
        if len(indices) != 1:
            raise InterpretError(f"`{buf.name}` accessed with {len(indices)} indices; Stage III uses flat offsets")
        k = int(self.ev(indices[0]))
        if not 0 <= k < arr.size:
            raise InterpretError(f"`{buf.name}` accessed at offset {k}, outside [0, {arr.size})")
        return arr, k

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
            arr[k] = self.ev(s.value)
        elif isinstance(s, AtomicAdd):
            arr, k = self.element(s.buffer, s.indices)
            arr[k] += self.ev(s.value)
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
            raise InterpretError(f"`{type(s).__name__}` is not a Stage III statement")

    def allocate(self, buf: FlatBuffer) -> None:
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
    """Execute a Stage III function on checked arguments."""
    with np.errstate(all="ignore"):
        LoopInterpreter(func, bound).run(func.body)
