"""The script printer: IR -> Python source that the frontend parses back to an equal IR.

Every stage prints in the `@T.prim_func` dialect. Names come from the IR but are made unique and
valid per function, so structurally equal functions may print with different names.
"""

from __future__ import annotations

import json
import keyword
import math
import re

from .axis import DENSE_FIXED, DENSE_VARIABLE, SPARSE_FIXED, SPARSE_VARIABLE, AttachedAxis, Axis, FusedAxis
from .buffer import FlatBuffer, SparseBuffer
from .expr import BinOp, BufferLoad, Call, Cast, FloatImm, IntImm, PrimExpr, Select, UnaryOp, Var
from .func import IRModule, PrimFunc
from .op import INTRINSICS, result_dtype
from .stmt import (
    Allocate,
    AtomicAdd,
    Block,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    Range,
    SeqStmt,
    SparseIteration,
    Stmt,
    While,
)

HEADER = "from sparsetir_py import script as T\n"
INDENT = "    "

# Python precedence of what we print (higher binds tighter).
PREC_OR, PREC_AND, PREC_NOT, PREC_CMP, PREC_ADD, PREC_MUL, PREC_UNARY, PREC_ATOM = range(1, 9)
BINOP_PREC = {
    "or": PREC_OR,
    "and": PREC_AND,
    "==": PREC_CMP,
    "!=": PREC_CMP,
    "<": PREC_CMP,
    "<=": PREC_CMP,
    ">": PREC_CMP,
    ">=": PREC_CMP,
    "+": PREC_ADD,
    "-": PREC_ADD,
    "*": PREC_MUL,
    "/": PREC_MUL,
    "//": PREC_MUL,
    "%": PREC_MUL,
}
LOOP_FUNCS = {
    "serial": "T.serial",
    "parallel": "T.parallel",
    "vectorized": "T.vectorized",
    "unrolled": "T.unroll",
    "thread_binding": "T.thread_binding",
}


class CodeBuilder:
    """Lines with indentation; `with builder.indent():` nests."""

    def __init__(self):
        self.lines: list[str] = []
        self.level = 0

    def line(self, text: str) -> None:
        self.lines.append(INDENT * self.level + text)

    def indent(self):
        builder = self

        class _Indent:
            def __enter__(self):
                builder.level += 1

            def __exit__(self, *exc):
                builder.level -= 1

        return _Indent()

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class NameTable:
    """Unique, valid Python names for variables, axes and buffers of one function."""

    RESERVED = frozenset({"T", "True", "False", "None"})

    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.keep: list[object] = []  # keep objects alive so ids stay unique

    def get(self, obj, hint: str) -> str:
        key = id(obj)
        if key in self.names:
            return self.names[key]
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = "v" + base
        if keyword.iskeyword(base) or base in self.RESERVED:
            base += "_"
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        self.names[key] = name
        self.keep.append(obj)
        return name


def format_float(value: float) -> str:
    if math.isnan(value):
        return '"nan"'
    if math.isinf(value):
        return '"inf"' if value > 0 else '"-inf"'
    return repr(float(value))


class ScriptPrinter:
    def __init__(self):
        self.b = CodeBuilder()
        self.names = NameTable()

    # ---------------------------------------------------------------- names
    def var(self, v: Var) -> str:
        return self.names.get(v, v.name)

    def axis(self, a: Axis) -> str:
        return self.names.get(a, a.name)

    def buf(self, b) -> str:
        return self.names.get(b, b.name)

    # ---------------------------------------------------------------- expressions
    def expr(self, e: PrimExpr) -> str:
        return self._expr(e)[0]

    def _paren(self, e: PrimExpr, min_prec: int) -> str:
        text, prec = self._expr(e)
        return f"({text})" if prec < min_prec else text

    def _expr(self, e: PrimExpr) -> tuple[str, int]:
        if isinstance(e, Var):
            return self.var(e), PREC_ATOM
        if isinstance(e, IntImm):
            return self._int(e)
        if isinstance(e, FloatImm):
            return f"T.{e.dtype}({format_float(e.value)})", PREC_ATOM
        if isinstance(e, BinOp):
            return self._binop(e)
        if isinstance(e, UnaryOp):
            if e.op == "not":
                return f"not {self._paren(e.a, PREC_NOT)}", PREC_NOT
            if isinstance(e.a, IntImm | FloatImm):  # keep `-(const)` apart from a negative constant
                return f"-T.{e.a.dtype}({self._number(e.a)})", PREC_UNARY
            return f"-{self._paren(e.a, PREC_UNARY)}", PREC_UNARY
        if isinstance(e, Select):
            args = ", ".join(self.expr(x) for x in (e.cond, e.true_value, e.false_value))
            return f"T.if_then_else({args})", PREC_ATOM
        if isinstance(e, Cast):
            return f'T.cast({self.expr(e.value)}, "{e.dtype}")', PREC_ATOM
        if isinstance(e, Call):
            return self._call(e), PREC_ATOM
        if isinstance(e, BufferLoad):
            return self.access(e.buffer, e.indices), PREC_ATOM
        raise TypeError(f"cannot print expression {type(e).__name__}")

    def _number(self, e: IntImm | FloatImm) -> str:
        return format_float(e.value) if isinstance(e, FloatImm) else str(e.value)

    def _int(self, e: IntImm) -> tuple[str, int]:
        if e.dtype == "bool":
            return ("True" if e.value else "False"), PREC_ATOM
        if e.dtype == "int32":
            return str(e.value), (PREC_UNARY if e.value < 0 else PREC_ATOM)
        return f"T.{e.dtype}({e.value})", PREC_ATOM

    def _binop(self, e: BinOp) -> tuple[str, int]:
        if e.op in ("min", "max"):
            return f"T.{e.op}({self.expr(e.a)}, {self.expr(e.b)})", PREC_ATOM
        prec = BINOP_PREC[e.op]
        # Left-associative: the right operand needs parentheses at equal precedence; comparisons
        # chain in Python, so they need them on both sides.
        left_min = prec + 1 if prec == PREC_CMP else prec
        return f"{self._paren(e.a, left_min)} {e.op} {self._paren(e.b, prec + 1)}", prec

    def _call(self, e: Call) -> str:
        args = [self.buf(a) if isinstance(a, SparseBuffer | FlatBuffer) else self.expr(a) for a in e.args]
        intrin = INTRINSICS.get(e.op)
        if intrin is None or result_dtype(e.op, [a.dtype for a in e.args] or ["void"]) != e.dtype:
            args.append(f'dtype="{e.dtype}"')
        return f"T.{e.op}({', '.join(args)})"

    def access(self, buffer, indices) -> str:
        if not indices:
            return f"{self.buf(buffer)}[()]"
        return f"{self.buf(buffer)}[{', '.join(self.expr(i) for i in indices)}]"

    def region(self, r: BufferRegion) -> str:
        parts = [self.range_text(rg) for rg in r.region]
        if not parts:
            return f"{self.buf(r.buffer)}[()]"
        return f"{self.buf(r.buffer)}[{', '.join(parts)}]"

    def range_text(self, rg: Range) -> str:
        if isinstance(rg.extent, IntImm) and rg.extent.value == 1 and rg.extent.dtype == rg.min.dtype:
            return self.expr(rg.min)
        return f"{self.expr(rg.min)}:{self.bounds_hi(rg.min, rg.extent)}"

    def bounds_hi(self, lo: PrimExpr, extent: PrimExpr) -> str:
        """The upper bound `lo + extent` as the parser reads it back (see script.parser)."""
        if isinstance(lo, IntImm) and lo.value == 0:
            return self.expr(extent)
        return self.expr(BinOp("+", lo, extent))

    # ---------------------------------------------------------------- declarations
    def dtype_arg(self, idtype: str) -> str:
        return f'"{idtype}"'

    def axis_decl(self, a: Axis) -> str:
        p = self.axis(a.parent) if a.parent is not None else None
        sorted_kw = ("" if a.sorted else ", sorted=False") + (", assemble=True" if a.assemble else "")
        if a.kind == DENSE_FIXED:
            idt = "" if a.idtype == "int32" else f", {self.dtype_arg(a.idtype)}"
            return f"T.dense_fixed({self.expr(a.length)}{idt})"
        if a.kind == DENSE_VARIABLE:
            return (
                f"T.dense_variable({p}, ({self.expr(a.length)}, {self.expr(a.nnz)}), "
                f"{self.var(a.indptr)}, {self.dtype_arg(a.idtype)})"
            )
        if a.kind == SPARSE_FIXED:
            return (
                f"T.sparse_fixed({p}, ({self.expr(a.length)}, {self.expr(a.nnz_cols)}), "
                f"{self.var(a.indices)}, {self.dtype_arg(a.idtype)}{sorted_kw})"
            )
        if a.kind == SPARSE_VARIABLE:
            return (
                f"T.sparse_variable({p}, ({self.expr(a.length)}, {self.expr(a.nnz)}), "
                f"({self.var(a.indptr)}, {self.var(a.indices)}), {self.dtype_arg(a.idtype)}{sorted_kw})"
            )
        raise TypeError(f"unknown axis kind {a.kind}")

    def axes_tuple(self, axes) -> str:
        names = [self.axis(a) for a in axes]
        return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"

    def shape_tuple(self, shape) -> str:
        items = [self.expr(s) for s in shape]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    def layout_kw(self, b: FlatBuffer) -> str:
        if b.layout.is_row_major():
            return ""
        lay = b.layout
        parts = [repr(tuple(lay.minor_to_major))]
        if lay.tiles:
            parts.append(f"tiles={tuple(tuple(t) for t in lay.tiles)!r}")
        if lay.tail_padding_alignment != 1:
            parts.append(f"tail_padding_alignment={lay.tail_padding_alignment}")
        return f", layout=T.layout({', '.join(parts)})"

    def buffer_decl(self, b) -> str:
        if isinstance(b, SparseBuffer):
            extra = "" if b.extra_storage is None else f", extra_storage={self.expr(b.extra_storage)}"
            if b.data is None:
                return (
                    f'T.alloc_sparse_buffer({self.axes_tuple(b.axes)}, "{b.dtype}", "{b.scope}"{extra}'
                    f"{self.value_range_kw(b)})"
                )
            default = "" if b.default_value == 0 else f", default_value={b.default_value!r}"
            return (
                f'T.match_sparse_buffer({self.var(b.data)}, {self.axes_tuple(b.axes)}, "{b.dtype}"'
                f"{default}{self.value_range_kw(b)}{extra})"
            )
        scope = "" if b.scope == "global" else f', scope="{b.scope}"'
        if b.data is None:
            return (
                f'T.alloc_buffer({self.shape_tuple(b.shape)}, "{b.dtype}"{scope}{self.layout_kw(b)}'
                f"{self.value_range_kw(b)})"
            )
        return (
            f'T.match_buffer({self.var(b.data)}, {self.shape_tuple(b.shape)}, "{b.dtype}"{scope}'
            f"{self.layout_kw(b)}{self.value_range_kw(b)})"
        )

    def value_range_kw(self, b) -> str:
        if b.value_range is None:
            return ""
        lo, hi = b.value_range
        return f", value_range=({self.expr(lo)}, {self.expr(hi)})"

    # ---------------------------------------------------------------- statements
    def stmt(self, s: Stmt) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise TypeError(f"cannot print statement {type(s).__name__}")
        method(s)

    def body(self, s: Stmt) -> None:
        with self.b.indent():
            if isinstance(s, SeqStmt) and not s.stmts:
                self.b.line("pass")
            else:
                self.stmt(s)

    def stmt_SeqStmt(self, s: SeqStmt) -> None:
        # Nested and one-element sequences print flat; structural equality flattens them too.
        for k, x in enumerate(s.stmts):
            if isinstance(x, Allocate) and k < len(s.stmts) - 1:
                self.scoped_allocate(x)  # statements follow: `S = T.allocate(...)` would cover them
            else:
                self.stmt(x)

    def stmt_BufferStore(self, s: BufferStore) -> None:
        self.b.line(f"{self.access(s.buffer, s.indices)} = {self.expr(s.value)}")

    def stmt_AtomicAdd(self, s: AtomicAdd) -> None:
        self.b.line(f"T.atomic_add({self.access(s.buffer, s.indices)}, {self.expr(s.value)})")

    def stmt_Evaluate(self, s: Evaluate) -> None:
        if isinstance(s.value, Call):
            self.b.line(self.expr(s.value))
        else:
            self.b.line(f"T.evaluate({self.expr(s.value)})")

    def stmt_IfThenElse(self, s: IfThenElse) -> None:
        self.b.line(f"if {self.expr(s.condition)}:")
        self.body(s.then_case)
        if s.else_case is not None:
            self.b.line("else:")
            self.body(s.else_case)

    def stmt_While(self, s: While) -> None:
        self.b.line(f"while {self.expr(s.condition)}:")
        self.body(s.body)

    def stmt_For(self, s: For) -> None:
        var = self.var(s.loop_var)
        if isinstance(s.min, IntImm) and s.min.value == 0:
            args = [self.expr(s.extent)]
        else:
            args = [self.expr(s.min), self.bounds_hi(s.min, s.extent)]
        if s.kind == "thread_binding":
            args.append(f'thread="{s.thread}"')
        if s.annotations:
            args.append(f"annotations={self.dict_text(s.annotations)}")
        self.b.line(f"for {var} in {LOOP_FUNCS[s.kind]}({', '.join(args)}):")
        self.body(s.body)

    def dict_text(self, d) -> str:
        items = [f"{self.value_text(k)}: {self.value_text(v)}" for k, v in d.items()]
        return "{" + ", ".join(items) + "}"

    def value_text(self, v) -> str:
        if isinstance(v, PrimExpr):
            return self.expr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, tuple):
            inner = ", ".join(self.value_text(x) for x in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        return repr(v)

    def stmt_Block(self, s: Block) -> None:
        self.b.line(f'with T.block("{s.name}"):')
        with self.b.indent():
            for iv in s.iter_vars:
                kind = "spatial" if iv.kind == "S" else "reduce"
                self.b.line(f"{self.var(iv.var)} = T.axis.{kind}({self.expr(iv.extent)}, {self.expr(iv.value)})")
            if s.predicate is not None:
                self.b.line(f"T.where({self.expr(s.predicate)})")
            self.b.line(f"T.reads({', '.join(self.region(r) for r in s.reads)})")
            self.b.line(f"T.writes({', '.join(self.region(r) for r in s.writes)})")
            if s.annotations:
                self.b.line(f"T.block_attr({self.dict_text(s.annotations)})")
            for buf in s.alloc_buffers:
                self.b.line(f"{self.buf(buf)} = {self.buffer_decl(buf)}")
            if s.init is not None:
                self.b.line("with T.init():")
                self.body(s.init)
            self.stmt(s.body)

    def stmt_LetStmt(self, s: LetStmt) -> None:
        self.b.line(f"{self.var(s.var)}: T.{s.var.dtype} = {self.expr(s.value)}")
        self.stmt(s.body)

    def stmt_Allocate(self, s: Allocate) -> None:
        b = s.buffer
        self.b.line(f"{self.buf(b)} = {self.allocate_call(b)}")
        self.stmt(s.body)

    def scoped_allocate(self, s: Allocate) -> None:
        """An allocation that other statements of its sequence follow: its scope is a `with`."""
        self.b.line(f"with {self.allocate_call(s.buffer)} as {self.buf(s.buffer)}:")
        self.body(s.body)

    def allocate_call(self, b) -> str:
        return f'T.allocate({self.shape_tuple(b.shape)}, "{b.dtype}", "{b.scope}"{self.layout_kw(b)})'

    def iter_axes_text(self, axes) -> str:
        parts, i = [], 0
        while i < len(axes):
            a = axes[i]
            if isinstance(a, FusedAxis):
                parts.append(f"T.fuse({', '.join(self.axis(x) for x in a.group)})")
                i += len(a.group)
                continue
            if isinstance(a, AttachedAxis):
                parts.append(f"T.attach({self.axis(a.axis)}, {self.axis(a.parent)})")
            else:
                parts.append(self.axis(a))
            i += 1
        return "[" + ", ".join(parts) + "]"

    def stmt_SparseIteration(self, s: SparseIteration) -> None:
        names = ", ".join(self.var(v) for v in s.iter_vars)
        attrs = f", attrs={self.dict_text(s.attrs)}" if s.attrs else ""
        self.b.line(f'with T.sp_iter({self.iter_axes_text(s.axes)}, "{s.kinds}", "{s.name}"{attrs}) as [{names}]:')
        with self.b.indent():
            if s.init is not None:
                self.b.line("with T.init():")
                self.body(s.init)
            if isinstance(s.body, SeqStmt) and not s.body.stmts:
                self.b.line("pass")
            else:
                self.stmt(s.body)

    # ---------------------------------------------------------------- functions
    def func(self, f: PrimFunc, decorator: str = "@T.prim_func") -> None:
        params = []
        for p in f.params:
            params.append(f"{self.var(p)}: T.{p.dtype}")
        self.b.line(decorator)
        self.b.line(f"def {self.names.get(f, f.name)}({', '.join(params)}):")
        with self.b.indent():
            self.b.line(f"T.func_attr({self.dict_text(f.attrs)})")
            for a in f.axes:
                self.b.line(f"{self.axis(a)} = {self.axis_decl(a)}")
            for buf in f.buffers:
                self.b.line(f"{self.buf(buf)} = {self.buffer_decl(buf)}")
            if isinstance(f.body, SeqStmt) and not f.body.stmts:
                self.b.line("pass")
            else:
                self.stmt(f.body)


def script(obj: PrimFunc | IRModule) -> str:
    """Python source of a PrimFunc or an IRModule (a class decorated with `@T.ir_module`)."""
    if isinstance(obj, PrimFunc):
        p = ScriptPrinter()
        p.func(obj)
        return HEADER + "\n\n" + p.b.text()
    if isinstance(obj, IRModule):
        out = CodeBuilder()
        out.line("@T.ir_module")
        out.line("class Module:")
        for name, f in obj.items():
            p = ScriptPrinter()
            p.names.get(f, name)
            p.func(f)
            out.lines.extend(INDENT + line if line else line for line in p.b.lines)
        return HEADER + "\n\n" + out.text()
    raise TypeError(f"cannot print {type(obj).__name__}")
