"""The renderer shared by every backend: Stage III IR -> the Python source of one Numba kernel.

A renderer turns one Stage III `PrimFunc` into a module holding one jitted function. Rules
local to one node type live in tables (`EXPR_RULES`, `STMT_RULES`, `INTRINSIC_RULES`,
`LOOP_ITERATORS`); the CPU and CUDA renderers subclass `Renderer` and override only what differs
between targets: the decorator, loop kinds and thread indices, atomics, barriers, scratch
memory and a few intrinsics.

Conventions of the generated function:

- Parameters: one 1-D array per handle parameter that has a buffer (in parameter order, named
  after the buffer), every scalar parameter (named after it), then one 1-D array per
  function-level scratch buffer (`data=None`), which the runtime allocates (zeros) per call.
- Every buffer access has exactly one index, the flat element offset (`lower_sparse_buffer`
  applied the layout already).
- Blocks keep their TensorIR meaning: each iterator is assigned its binding, a false predicate
  skips the block, `init` runs when every reduction iterator is 0, `alloc_buffers` are scratch
  live in the block.
- Names come from the IR, made unique and kept clear of Python keywords, builtins and the
  modules the source imports.
"""

from __future__ import annotations

import builtins
import keyword
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import CodegenError
from ..ir import dtype as dt
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BinOp, BufferLoad, Call, Cast, FloatImm, IntImm, PrimExpr, Select, UnaryOp, Var, const
from ..ir.func import PrimFunc
from ..ir.launch import is_launch_loop
from ..ir.printer import BINOP_PREC, PREC_ATOM, PREC_CMP, PREC_MUL, PREC_NOT, PREC_UNARY, CodeBuilder, NameTable
from ..ir.stmt import (
    BLOCK_IDX_TAGS,
    THREAD_IDX_TAGS,
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

PREC_IFEXP = 0  # `a if c else b` binds looser than `or`

# Modules the generated source may import, in the order their import lines are written.
IMPORTS = {
    "math": "import math",
    "numba": "import numba",
    "np": "import numpy as np",
    "cuda": "from numba import cuda",
    "atomic_add": "from sparsetir_py.runtime.cpu_intrinsics import atomic_add",
    "split_bound": "from sparsetir_py.runtime.cpu_intrinsics import split_bound",
    "stack_zeros": "from sparsetir_py.runtime.cpu_intrinsics import stack_zeros",
    "ctz": "from sparsetir_py.runtime.cpu_intrinsics import ctz",
    "set_chunksize": "from sparsetir_py.runtime.cpu_intrinsics import set_chunksize",
    "prefetch": "from sparsetir_py.runtime.cpu_intrinsics import prefetch",
    "libdevice": "from sparsetir_py.runtime.cuda_intrinsics import libdevice",
    "syncwarp": "from sparsetir_py.runtime.cuda_intrinsics import syncwarp",
}
HELPERS = ("lower_bound", "linear_find", "sort_range")
RESERVED_NAMES = frozenset(IMPORTS) | frozenset(HELPERS) | frozenset(dir(builtins))

BARRIERS = ("syncthreads", "syncwarp")
BLOCK_TAGS = BLOCK_IDX_TAGS
THREAD_TAGS = THREAD_IDX_TAGS


LOWER_BOUND_SOURCE = """\
def lower_bound(buf, lo, hi, value):
    # The first position p in [lo, hi) with buf[p] >= value, else hi: binary search over a sorted
    # range. A nested function, so that Numba inlines it on both targets (a CUDA device function
    # would need a GPU to compile to PTX).
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if buf[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo
"""

LINEAR_FIND_SOURCE = """\
def linear_find(buf, lo, hi, value):
    # The first position p in [lo, hi) with buf[p] == value, else hi: a scan of an unsorted range.
    while lo < hi and buf[lo] != value:
        lo += 1
    return lo
"""
SORT_RANGE_SOURCE = """\
def sort_range(buf, lo, hi):
    # Sorts buf[lo:hi] in place, ascending, and returns hi: insertion sort for short ranges, heap
    # sort otherwise (plain loops, so that it compiles on both targets).
    n = hi - lo
    if n <= 16:
        for t in range(lo + 1, hi):
            v = buf[t]
            u = t - 1
            while u >= lo and buf[u] > v:
                buf[u + 1] = buf[u]
                u -= 1
            buf[u + 1] = v
        return hi
    for start in range(n // 2 - 1, -1, -1):
        root = start
        while 2 * root + 1 < n:
            child = 2 * root + 1
            if child + 1 < n and buf[lo + child] < buf[lo + child + 1]:
                child += 1
            if buf[lo + root] >= buf[lo + child]:
                break
            buf[lo + root], buf[lo + child] = buf[lo + child], buf[lo + root]
            root = child
    for end in range(n - 1, 0, -1):
        buf[lo], buf[lo + end] = buf[lo + end], buf[lo]
        root = 0
        while 2 * root + 1 < end:
            child = 2 * root + 1
            if child + 1 < end and buf[lo + child] < buf[lo + child + 1]:
                child += 1
            if buf[lo + root] >= buf[lo + child]:
                break
            buf[lo + root], buf[lo + child] = buf[lo + child], buf[lo + root]
            root = child
    return hi
"""
HELPER_SOURCES = {"lower_bound": LOWER_BOUND_SOURCE, "linear_find": LINEAR_FIND_SOURCE, "sort_range": SORT_RANGE_SOURCE}


@dataclass(frozen=True)
class Intrin:
    """How one intrinsic renders: a `str.format` template and the precedence of its result.

    Template fields: `{a[i]}` argument i as is (inside call parentheses), `{p[i]}` argument i
    parenthesised to an atom, `{one}` the constant 1 of the result dtype, `{f}` the `f` suffix of
    single-precision libdevice functions. `modules` are the names the template uses.
    """

    template: str
    modules: tuple[str, ...] = ()
    prec: int = PREC_ATOM


@dataclass(frozen=True)
class KernelParam:
    """One parameter of the generated function: a buffer's 1-D storage or a scalar."""

    name: str
    kind: str  # "buffer", "scalar", or "launch" (the launch index of a kernel launched several times)
    obj: FlatBuffer | Var


@dataclass(frozen=True)
class KernelSource:
    """The result of rendering: the module source and what the runtime needs to call it."""

    func: PrimFunc
    target: str
    name: str  # the generated function's name in `source`
    source: str
    params: tuple[KernelParam, ...]
    options: dict[str, Any]
    # Thread tag -> extents of the loops bound to it (CUDA launch configuration).
    launch: dict[str, tuple[PrimExpr, ...]] = field(default_factory=dict)
    # A kernel launched several times in order (CUDA: one launch per top-level nest bound to
    # threads): the same per launch; the function then takes the launch index as its last argument.
    launches: tuple[dict[str, tuple[PrimExpr, ...]], ...] = ()


class _Names(NameTable):
    RESERVED = NameTable.RESERVED | RESERVED_NAMES | frozenset(keyword.kwlist)


def format_float(value: float) -> tuple[str, int]:
    """A Python float literal (or `math.inf`/`math.nan`) and its precedence."""
    if math.isnan(value):
        return "math.nan", PREC_ATOM
    if math.isinf(value):
        return ("math.inf", PREC_ATOM) if value > 0 else ("-math.inf", PREC_UNARY)
    text = repr(float(value))
    return text, (PREC_UNARY if text.startswith("-") else PREC_ATOM)


def is_launch_computable(e: PrimExpr, scalars: set[Var]) -> bool:
    """True when `ir.eval.eval_int` can evaluate `e` from the scalar parameters alone."""
    if isinstance(e, IntImm):
        return True
    if isinstance(e, Var):
        return e in scalars and dt.is_int(e.dtype)
    if isinstance(e, Cast):
        return dt.is_int(e.dtype) and is_launch_computable(e.value, scalars)
    if isinstance(e, UnaryOp):
        return e.op == "-" and is_launch_computable(e.a, scalars)
    if isinstance(e, BinOp):
        ok_op = e.op in ("+", "-", "*", "//", "%", "min", "max")
        return ok_op and is_launch_computable(e.a, scalars) and is_launch_computable(e.b, scalars)
    return False


def const_int(e: PrimExpr) -> int | None:
    """The value of an integer expression made of constants only, else None."""
    if not is_launch_computable(e, set()):
        return None
    from ..ir.eval import eval_int

    try:
        return eval_int(e, {}, "constant")
    except Exception:  # division by zero in a constant expression: not a usable constant
        return None


class Renderer:
    """Base of the target renderers. `render()` returns a `KernelSource`.

    Subclasses set `target`, `OPTIONS` (name -> default) and override the hooks marked "target
    hook" below; everything else is shared.
    """

    target: ClassVar[str] = "base"
    OPTIONS: ClassVar[dict[str, Any]] = {}
    IMPORTS: ClassVar[dict[str, str]] = IMPORTS
    # Nested helper functions the source defines where it calls them; a target may replace one.
    HELPER_SOURCES: ClassVar[dict[str, str]] = HELPER_SOURCES

    EXPR_RULES: ClassVar[dict[type, str]] = {
        IntImm: "expr_int",
        FloatImm: "expr_float",
        Var: "expr_var",
        BinOp: "expr_binop",
        UnaryOp: "expr_unary",
        Select: "expr_select",
        Cast: "expr_cast",
        Call: "expr_call",
        BufferLoad: "expr_load",
    }
    STMT_RULES: ClassVar[dict[type, str]] = {
        SeqStmt: "stmt_seq",
        BufferStore: "stmt_store",
        AtomicAdd: "stmt_atomic_add",
        Evaluate: "stmt_evaluate",
        IfThenElse: "stmt_if",
        While: "stmt_while",
        For: "stmt_for",
        Block: "stmt_block",
        Allocate: "stmt_allocate",
        LetStmt: "stmt_let",
    }
    # Python spelling of the math intrinsics; subclasses replace entries that differ.
    INTRINSIC_RULES: ClassVar[dict[str, Intrin]] = {
        "exp": Intrin("math.exp({a[0]})", ("math",)),
        "exp2": Intrin("np.exp2({a[0]})", ("np",)),
        "log": Intrin("math.log({a[0]})", ("math",)),
        "log2": Intrin("math.log2({a[0]})", ("math",)),
        "log1p": Intrin("math.log1p({a[0]})", ("math",)),
        "sqrt": Intrin("math.sqrt({a[0]})", ("math",)),
        "rsqrt": Intrin("{one} / math.sqrt({a[0]})", ("math",), PREC_MUL),
        "tanh": Intrin("math.tanh({a[0]})", ("math",)),
        "sigmoid": Intrin("{one} / ({one} + math.exp(-{p[0]}))", ("math",), PREC_MUL),
        "erf": Intrin("math.erf({a[0]})", ("math",)),
        "sin": Intrin("math.sin({a[0]})", ("math",)),
        "cos": Intrin("math.cos({a[0]})", ("math",)),
        "abs": Intrin("abs({a[0]})"),
        "floor": Intrin("np.floor({a[0]})", ("np",)),
        "ceil": Intrin("np.ceil({a[0]})", ("np",)),
        "round": Intrin("np.rint({a[0]})", ("np",)),  # half to even, as the interpreter
        "trunc": Intrin("np.trunc({a[0]})", ("np",)),
        "isnan": Intrin("math.isnan({a[0]})", ("math",)),
        "isinf": Intrin("math.isinf({a[0]})", ("math",)),
        "pow": Intrin("math.pow({a[0]}, {a[1]})", ("math",)),
        "fmod": Intrin("math.fmod({a[0]}, {a[1]})", ("math",)),
        "bitwise_and": Intrin("({p[0]} & {p[1]})"),
        "bitwise_or": Intrin("({p[0]} | {p[1]})"),
        "shift_left": Intrin("({p[0]} << {p[1]})"),
        "shift_right": Intrin("({p[0]} >> {p[1]})"),
        "ctz": Intrin("ctz({a[0]})", ("ctz",)),
    }
    # Loop kind -> the iterator function of its header (thread_binding loops: `thread_loop`).
    LOOP_ITERATORS: ClassVar[dict[str, str]] = {
        "serial": "range",
        "parallel": "range",
        "vectorized": "range",
        "unrolled": "range",
    }
    LOOP_COMMENTS: ClassVar[dict[str, str]] = {
        "vectorized": "vectorized: a plain loop, LLVM vectorises it",
        "unrolled": "unrolled: a plain loop, LLVM unrolls it",
    }

    def __init__(self, func: PrimFunc, options: dict[str, Any] | None = None):
        self.func = func
        self.options = self.normalize_options(dict(options or {}))
        self.names = _Names()
        self.body = CodeBuilder()
        self.modules: set[str] = set()
        self.helpers: set[str] = set()
        self.scalars = {p for p in func.params if p.dtype != "handle"}
        self.loops: list[For] = []  # enclosing loops while rendering
        self.alloc_depth: dict[FlatBuffer, int] = {}  # scratch buffer -> len(self.loops) at allocation
        self.scope_buffers: set[FlatBuffer] = set()  # buffers accessible where we are

    # ---------------------------------------------------------------- options
    def normalize_options(self, options: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise CodegenError(
                f"in `build`: unknown option `{unknown[0]}` for target {self.target}; "
                f"expected one of {', '.join(sorted(self.OPTIONS)) or 'none'}"
            )
        return {**self.OPTIONS, **options}

    # ---------------------------------------------------------------- driver
    def render(self) -> KernelSource:
        """Render the function; raises `CodegenError` on anything the target cannot run."""
        func = self.func
        if func.stage != 3:
            raise CodegenError(
                f"in `build`: `{func.name}` is a Stage {func.stage} function; lower it to Stage III first "
                "(sp.lower_sparse_iter, then sp.lower_sparse_buffer)"
            )
        params = self.kernel_params()
        self.prepare()
        with self.body.indent():
            self.function_body(func.body)
        name = self.names.get(func, func.name)
        out = CodeBuilder()
        for line in self.header_lines():
            out.line(line)
        for line in self.import_lines():
            out.line(line)
        out.line("")
        out.line("")
        out.line(self.decorator())
        out.line(f"def {name}({', '.join(p.name for p in params)}):")
        with out.indent():
            for helper in sorted(self.helpers):
                for line in self.HELPER_SOURCES[helper].splitlines():
                    out.line(line)
                out.lines.append("")
        out.lines.extend(self.body.lines)
        return KernelSource(
            func=func,
            target=self.target,
            name=name,
            source=out.text(),
            params=tuple(params),
            options=self.options,
            launch=self.launch_extents(),
            launches=self.launches(),
        )

    def kernel_params(self) -> list[KernelParam]:
        func = self.func
        by_handle = {b.data: b for b in func.buffers if b.data is not None}
        params: list[KernelParam] = []
        for p in func.params:
            if p.dtype != "handle":
                params.append(KernelParam(self.names.get(p, p.name), "scalar", p))
                continue
            buf = by_handle.get(p)
            if buf is None:
                continue  # structure only used by axes (checked at binding, unused by the body)
            params.append(KernelParam(self.buffer_name(buf), "buffer", buf))
        for buf in func.buffers:
            if buf.data is None:
                params.append(KernelParam(self.buffer_name(buf), "buffer", buf))
        for kp in params:
            if kp.kind == "buffer":
                self.check_function_buffer(kp.obj)
                self.alloc_depth[kp.obj] = 0
                self.scope_buffers.add(kp.obj)
        return params

    def buffer_name(self, buf: FlatBuffer | SparseBuffer) -> str:
        if not isinstance(buf, FlatBuffer):
            raise CodegenError(
                f"in `build`: buffer `{buf.name}` is a sparse buffer; Stage III has only flat buffers "
                "(run sp.lower_sparse_buffer)"
            )
        return self.names.get(buf, buf.name)

    def check_function_buffer(self, buf: FlatBuffer) -> None:
        """Target hook: reject function-level buffers the target cannot pass."""

    def prepare(self) -> None:
        """Target hook: whole-function analysis before rendering (launch extents, ...)."""

    def launch_extents(self) -> dict[str, tuple[PrimExpr, ...]]:
        return {}

    def launches(self) -> tuple[dict[str, tuple[PrimExpr, ...]], ...]:
        """Target hook: per-launch extents of a kernel launched several times (else ())."""
        return ()

    def function_body(self, body: Stmt) -> None:
        """Target hook: render the function's body (CUDA splits it into launches)."""
        self.stmt_body(body)

    # ---------------------------------------------------------------- target hooks
    def header_lines(self) -> list[str]:
        return [
            f'# Generated by sparsetir_py from the Stage III PrimFunc `{self.func.name}` for target "{self.target}".',
            "# Rewritten from the IR by every build: edit the IR or the code generator, not this file.",
        ]

    def import_lines(self) -> list[str]:
        lines: list[str] = []
        for name, line in self.IMPORTS.items():
            if name not in self.modules:
                continue
            module, _, names = line.partition(" import ")
            if module.startswith("from ") and lines and lines[-1].startswith(module + " import "):
                lines[-1] += f", {names}"  # from m import a, b
            else:
                lines.append(line)
        return lines

    def decorator(self) -> str:  # pragma: no cover - every target overrides
        raise NotImplementedError

    def use(self, *modules: str) -> None:
        self.modules.update(modules)

    # ---------------------------------------------------------------- expressions
    def expr(self, e: PrimExpr) -> str:
        return self.expr_prec(e)[0]

    def paren(self, e: PrimExpr, min_prec: int) -> str:
        text, prec = self.expr_prec(e)
        return f"({text})" if prec < min_prec else text

    def expr_prec(self, e: PrimExpr) -> tuple[str, int]:
        rule = self.EXPR_RULES.get(type(e))
        if rule is None:
            raise CodegenError(f"in `build`: unsupported construct `{type(e).__name__}` (an expression)")
        return getattr(self, rule)(e)

    def expr_int(self, e: IntImm) -> tuple[str, int]:
        if e.dtype == "bool":
            return ("True" if e.value else "False"), PREC_ATOM
        if e.dtype in ("int32", "int64"):
            return str(e.value), (PREC_UNARY if e.value < 0 else PREC_ATOM)
        self.use("np")
        return f"np.{e.dtype}({e.value})", PREC_ATOM

    def expr_float(self, e: FloatImm) -> tuple[str, int]:
        text, prec = format_float(e.value)
        if "math." in text:
            self.use("math")
        if e.dtype == "float64":
            return text, prec
        self.use("np")
        return f"np.{e.dtype}({text})", PREC_ATOM

    def expr_var(self, e: Var) -> tuple[str, int]:
        if e.dtype == "handle":
            raise CodegenError(f"in `build`: handle `{e.name}` is used as a value; index its buffer instead")
        return self.names.get(e, e.name), PREC_ATOM

    def expr_binop(self, e: BinOp) -> tuple[str, int]:
        if e.op in ("min", "max"):
            return f"{e.op}({self.expr(e.a)}, {self.expr(e.b)})", PREC_ATOM
        prec = BINOP_PREC.get(e.op)
        if prec is None:
            raise CodegenError(f"in `build`: unsupported binary operator `{e.op}`")
        # Left-associative; comparisons chain in Python, so they need parentheses on both sides.
        left_min = prec + 1 if prec == PREC_CMP else prec
        return f"{self.paren(e.a, left_min)} {e.op} {self.paren(e.b, prec + 1)}", prec

    def expr_unary(self, e: UnaryOp) -> tuple[str, int]:
        if e.op == "not":
            return f"not {self.paren(e.a, PREC_NOT)}", PREC_NOT
        if e.op != "-":
            raise CodegenError(f"in `build`: unsupported unary operator `{e.op}`")
        operand = self.paren(e.a, PREC_UNARY)
        if operand.startswith("-"):  # `--x` is legal but reads as a typo
            operand = f"({operand})"
        return f"-{operand}", PREC_UNARY

    def expr_select(self, e: Select) -> tuple[str, int]:
        # A conditional expression: only the chosen branch is evaluated (if_then_else semantics).
        cond = self.paren(e.cond, PREC_IFEXP + 1)
        then = self.paren(e.true_value, PREC_IFEXP + 1)
        other = self.paren(e.false_value, PREC_IFEXP)
        return f"{then} if {cond} else {other}", PREC_IFEXP

    def expr_cast(self, e: Cast) -> tuple[str, int]:
        if e.dtype == e.value.dtype:
            return self.expr_prec(e.value)
        if e.dtype == "bool":
            return f"{self.paren(e.value, PREC_CMP + 1)} != 0", PREC_CMP
        if e.dtype not in dt.SCALAR_DTYPES:
            raise CodegenError(f"in `build`: cast to unsupported dtype {e.dtype}")
        self.use("np")
        return f"np.{e.dtype}({self.expr(e.value)})", PREC_ATOM

    def expr_call(self, e: Call) -> tuple[str, int]:
        if e.op in HELPER_SOURCES:
            return self.call_search(e), PREC_ATOM
        if e.op in BARRIERS:
            raise CodegenError(f"in `build`: T.{e.op}() is a statement, not a value")
        rule = self.INTRINSIC_RULES.get(e.op)
        if rule is None:
            raise CodegenError(f"in `build`: unsupported intrinsic `{e.op}` for target {self.target}")
        self.use(*rule.modules)
        one = self.expr(FloatImm(1.0, e.dtype) if dt.is_float(e.dtype) else IntImm(1, e.dtype))
        suffix = "f" if e.dtype == "float32" else ""
        args = [self.expr(a) for a in e.args]
        atoms = [self.paren(a, PREC_ATOM) for a in e.args]
        return rule.template.format(a=args, p=atoms, one=one, f=suffix), rule.prec

    def call_search(self, e: Call) -> str:
        """`T.lower_bound` / `T.linear_find` / `T.sort_range`: a nested helper function of the kernel."""
        arity = 3 if e.op == "sort_range" else 4
        if len(e.args) != arity:
            raise CodegenError(f"in `build`: T.{e.op} takes {arity} arguments, got {len(e.args)}")
        buf, lo, hi, *value = e.args
        if not isinstance(buf, FlatBuffer):
            raise CodegenError(f"in `build`: the first argument of T.{e.op} must be a buffer")
        self.helpers.add(e.op)
        name = self.access_name(buf)
        rest = "".join(f", {self.expr(v)}" for v in value)
        return f"{e.op}({name}, {self.expr(lo)}, {self.expr(hi)}{rest})"

    def expr_load(self, e: BufferLoad) -> tuple[str, int]:
        return self.access(e.buffer, e.indices), PREC_ATOM

    def is_register(self, buf) -> bool:
        """A `local` scratch buffer of one element lives in a variable, not an array (a register)."""
        if not isinstance(buf, FlatBuffer) or buf.scope != "local" or buf.data is not None:
            return False
        return all(isinstance(d, IntImm) and d.value == 1 for d in buf.shape)

    def access(self, buf, indices: tuple[PrimExpr, ...]) -> str:
        if self.is_register(buf):
            return self.access_name(buf)
        name = self.access_name(buf)
        if len(indices) != 1:
            raise CodegenError(
                f"in `build`: buffer `{buf.name}` is accessed with {len(indices)} indices; Stage III "
                "accesses use one flat offset (run sp.lower_sparse_buffer)"
            )
        return f"{name}[{self.offset(indices[0])}]"

    def offset(self, e: PrimExpr) -> str:
        """Target hook: how a flat offset is written inside `buf[...]`."""
        return self.expr(e)

    def access_name(self, buf) -> str:
        name = self.buffer_name(buf)
        if buf not in self.scope_buffers:
            raise CodegenError(f"in `build`: buffer `{buf.name}` is used outside the scope that declares it")
        self.check_scratch_use(buf)
        return name

    def check_scratch_use(self, buf: FlatBuffer) -> None:
        """Target hook: reject a use of scratch memory the target would share between threads."""

    # ---------------------------------------------------------------- statements
    def stmt(self, s: Stmt) -> None:
        rule = self.STMT_RULES.get(type(s))
        if rule is None:
            raise CodegenError(f"in `build`: unsupported construct `{type(s).__name__}`")
        getattr(self, rule)(s)

    def stmt_body(self, s: Stmt) -> None:
        """A statement that must produce at least one line (a body)."""
        start = len(self.body.lines)
        self.stmt(s)
        if len(self.body.lines) == start:
            self.line("pass")

    def line(self, text: str) -> None:
        self.body.line(text)

    @contextmanager
    def indented(self) -> Iterator[None]:
        with self.body.indent():
            yield

    def stmt_seq(self, s: SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    def stmt_store(self, s: BufferStore) -> None:
        self.line(f"{self.access(s.buffer, s.indices)} = {self.expr(s.value)}")

    def stmt_atomic_add(self, s: AtomicAdd) -> None:  # pragma: no cover - every target overrides
        raise NotImplementedError

    def stmt_evaluate(self, s: Evaluate) -> None:
        v = s.value
        if isinstance(v, Call) and v.op in BARRIERS:
            self.barrier(v.op)
            return
        if isinstance(v, Call) and v.op == "prefetch":
            self.prefetch(v)
            return
        if isinstance(v, IntImm | FloatImm):
            return  # T.evaluate(0): nothing to do
        self.line(self.expr(v))

    def barrier(self, op: str) -> None:  # pragma: no cover - every target overrides
        raise NotImplementedError

    def prefetch(self, call: Call) -> None:
        """`T.prefetch(buf[offset])`: a hint; a target without one writes `pass` (the statement
        may be all a loop's body holds)."""
        self.line("pass  # T.prefetch: no prefetch instruction on this target")

    def prefetch_load(self, call: Call) -> BufferLoad:
        load = call.args[0] if len(call.args) == 1 else None
        if not isinstance(load, BufferLoad) or len(load.indices) != 1 or self.is_register(load.buffer):
            raise CodegenError("in `build`: T.prefetch takes one load of a buffer at a flat offset, `T.prefetch(B[i])`")
        return load

    def stmt_if(self, s: IfThenElse) -> None:
        self.line(f"if {self.expr(s.condition)}:")
        with self.indented():
            self.stmt_body(s.then_case)
        if s.else_case is None:
            return
        self.line("else:")
        with self.indented():
            self.stmt_body(s.else_case)

    def stmt_while(self, s: While) -> None:
        # A Python `while`: Numba compiles it on both targets (on CUDA each thread runs its own).
        self.line(f"while {self.expr(s.condition)}:")
        with self.indented():
            self.stmt_body(s.body)

    def stmt_for(self, s: For) -> None:
        if is_launch_loop(s):
            self.thread_loop(s)
            return
        kind = "serial" if s.kind == "thread_binding" else s.kind  # vthread: one loop
        iterator = self.LOOP_ITERATORS.get(kind)
        if iterator is None:
            raise CodegenError(f"in `build`: unsupported loop kind `{s.kind}` of loop `{s.loop_var.name}`")
        var = self.names.get(s.loop_var, s.loop_var.name)
        comment = self.LOOP_COMMENTS.get(kind)
        if s.kind == "thread_binding":
            comment = f"{s.thread}: a serial loop"
        self.line(f"for {var} in {iterator}({self.range_args(s)}):" + (f"  # {comment}" if comment else ""))
        self.loop_body(s)

    def range_args(self, s: For) -> str:
        if isinstance(s.min, IntImm) and s.min.value == 0:
            return self.expr(s.extent)
        lo, n = const_int(s.min), const_int(s.extent)
        if lo is not None and n is not None:
            return f"{lo}, {lo + n}"
        return f"{self.expr(s.min)}, {self.expr(BinOp('+', s.min, s.extent))}"

    def loop_body(self, s: For) -> None:
        self.loops.append(s)
        with self.indented():
            self.stmt_body(s.body)
        self.loops.pop()

    def thread_loop(self, s: For) -> None:  # pragma: no cover - every target overrides
        raise NotImplementedError

    def stmt_block(self, b: Block) -> None:
        self.line(f'# block "{b.name}"')
        for iv in b.iter_vars:
            self.line(f"{self.names.get(iv.var, iv.var.name)} = {self.expr(iv.value)}")
        if b.predicate is None:
            self.block_contents(b)
            return
        self.line(f"if {self.expr(b.predicate)}:")
        with self.indented():
            start = len(self.body.lines)
            self.block_contents(b)
            if len(self.body.lines) == start:
                self.line("pass")

    def block_contents(self, b: Block) -> None:
        saved = set(self.scope_buffers)
        for buf in b.alloc_buffers:
            self.allocate(buf)
        if b.init is not None:
            reduce_vars = [self.names.get(iv.var, iv.var.name) for iv in b.iter_vars if iv.kind == "R"]
            if reduce_vars:
                # TensorIR: init runs before the first reduction step of each spatial point.
                self.line(f"if {' and '.join(f'{v} == 0' for v in reduce_vars)}:")
                with self.indented():
                    self.stmt_body(b.init)
            else:
                self.stmt(b.init)
        self.stmt(b.body)
        self.scope_buffers = saved

    def stmt_let(self, s: LetStmt) -> None:
        self.line(f"{self.names.get(s.var, s.var.name)} = {self.expr(s.value)}")
        self.stmt(s.body)

    def stmt_allocate(self, s: Allocate) -> None:
        saved = set(self.scope_buffers)
        self.allocate(s.buffer)
        self.stmt(s.body)
        self.scope_buffers = saved

    def allocate(self, buf: FlatBuffer) -> None:
        name = self.buffer_name(buf)
        self.alloc_depth[buf] = len(self.loops)
        self.scope_buffers.add(buf)
        if self.is_register(buf):
            self.use("np")
            self.line(f"{name} = {self.expr(const(0, buf.dtype))}  # local register")
            return
        self.line(f"{name} = {self.scratch(buf)}")

    def scratch(self, buf: FlatBuffer) -> str:  # pragma: no cover - every target overrides
        """Target hook: the expression that allocates scratch `buf` (flat, of its total size)."""
        raise NotImplementedError

    def flat_size(self, buf: FlatBuffer) -> PrimExpr:
        size: PrimExpr | None = None
        for d in buf.shape:
            size = d if size is None else BinOp("*", size, d)
        return size if size is not None else IntImm(1)
