"""The frontend: a `@T.prim_func` function's Python source -> IR, with `ast`.

One `visit_X`-style method per supported construct; anything else is a `FrontendError` that
points at the user's source with file:line:col and a caret. Python constants captured from the
enclosing scope (numbers, strings, booleans) may be used in the script.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import inspect
import itertools
import linecache
import textwrap
from typing import Any

import numpy as np

from .. import ir, pyast
from ..errors import FrontendError, SparseTIRError
from ..ir import dtype as dt
from ..ir.axis import DENSE_FIXED, DENSE_VARIABLE, SPARSE_FIXED, SPARSE_VARIABLE
from ..ir.expr import BinOp, BufferLoad, Call, Cast, FloatImm, IntImm, PrimExpr, Select, UnaryOp, Var
from ..ir.node import FrozenDict
from ..ir.op import INTRINSICS, result_dtype
from ..ir.printer import ScriptPrinter
from . import builtins as B

AST_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}
AST_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
AXIS_DECLS = {
    "dense_fixed": DENSE_FIXED,
    "dense_variable": DENSE_VARIABLE,
    "sparse_fixed": SPARSE_FIXED,
    "sparse_variable": SPARSE_VARIABLE,
}
LOOP_KINDS = {
    "serial": "serial",
    "parallel": "parallel",
    "vectorized": "vectorized",
    "unroll": "unrolled",
    "thread_binding": "thread_binding",
}
STUBS = {
    "dense_fixed": B.dense_fixed,
    "dense_variable": B.dense_variable,
    "sparse_fixed": B.sparse_fixed,
    "sparse_variable": B.sparse_variable,
    "match_sparse_buffer": B.match_sparse_buffer,
    "encoding": B.encoding,
    "alloc_sparse_buffer": B.alloc_sparse_buffer,
    "match_buffer": B.match_buffer,
    "alloc_buffer": B.alloc_buffer,
    "allocate": B.allocate,
    "layout": B.layout,
    "func_attr": B.func_attr,
    "sp_iter": B.sp_iter,
    "iter": B.sp_iter,
    "fuse": B.fuse,
    "attach": B.attach,
    "init": B.init,
    "block": B.block,
    "axis.spatial": B.axis.spatial,
    "axis.reduce": B.axis.reduce,
    "axis.remap": B.axis.remap,
    "reads": B.reads,
    "writes": B.writes,
    "where": B.where,
    "block_attr": B.block_attr,
    "serial": B.serial,
    "parallel": B.parallel,
    "vectorized": B.vectorized,
    "unroll": B.unroll,
    "thread_binding": B.thread_binding,
    "grid": B.grid,
    "atomic_add": B.atomic_add,
    "evaluate": B.evaluate,
    "min": B.min,
    "max": B.max,
    "floordiv": B.floordiv,
    "floormod": B.floormod,
    "if_then_else": B.if_then_else,
    "Select": B.if_then_else,
    "cast": B.cast,
    "min_value": B.min_value,
    "max_value": B.max_value,
    "assume_buffer_domain": B.assume_buffer_domain,
}
PY_BUILTINS = {"min": "min", "max": "max", "abs": "abs", "range": "serial"}
# Names of the script namespace that are not calls with a stub (decorators, annotations, the
# `T.axis` prefix of `T.axis.spatial`).
NAMESPACE_NAMES = ("prim_func", "ir_module", "axis")


def limit_value(dtype: str, largest: bool) -> PrimExpr:
    """`T.min_value(dtype)` / `T.max_value(dtype)`: the extreme finite value, as a constant (it
    prints as one, e.g. `T.float32(-3.4028234663852886e+38)`, and parses back equal)."""
    if dtype == "bool":
        return IntImm(int(largest), "bool")
    if dt.is_int(dtype):
        info = np.iinfo(dtype)
        return IntImm(int(info.max if largest else info.min), dtype)
    info = np.finfo(dtype)
    return FloatImm(float(info.max if largest else info.min), dtype)


def known_t_names() -> set[str]:
    """Every `T.<name>` a script may use: constructs, dtypes and intrinsics (also those registered
    after import, hence computed on each use)."""
    return {*STUBS, *B.DTYPES, *INTRINSICS, *NAMESPACE_NAMES}


_MISSING = object()


class Parser:
    """Parses one function (or an `@T.ir_module` class) of one source text."""

    def __init__(self, filename: str, file_lines: list[str], line_offset: int, col_offset: int, env: dict):
        self.filename = filename
        self.file_lines = file_lines
        self.line_offset = line_offset
        self.col_offset = col_offset
        self.env = env
        self.scopes: list[dict[str, Any]] = []
        self.bound_axes: list[ir.Axis] = []
        self.loop_extents: dict[Var, PrimExpr] = {}
        self.node: ast.AST | None = None
        self.encoded: dict[ir.SparseBuffer, tuple[Any, ast.AST]] = {}  # buffer -> (encoding, its node)

    # ---------------------------------------------------------------- errors and names
    def fail(self, node: ast.AST | None, message: str) -> FrontendError:
        node = node if node is not None and hasattr(node, "lineno") else self.node
        if node is None or not hasattr(node, "lineno"):
            return FrontendError(message, self.filename)
        line = node.lineno + self.line_offset
        col = node.col_offset + self.col_offset
        end_col = None
        if getattr(node, "end_lineno", None) == node.lineno and node.end_col_offset is not None:
            end_col = node.end_col_offset + self.col_offset
        source = self.file_lines[line - 1] if 0 < line <= len(self.file_lines) else ""
        return FrontendError(message, self.filename, line, col, source, end_col)

    def define(self, name: str, value: Any) -> None:
        self.scopes[-1][name] = value

    def lookup(self, node: ast.Name) -> Any:
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        value = self.env.get(node.id, _MISSING)
        if value is _MISSING:
            raise self.fail(node, f"unknown name `{node.id}`")
        if isinstance(value, bool | int | float | str):
            return value
        raise self.fail(
            node,
            f"`{node.id}` is a Python {type(value).__name__}; only numbers, strings and booleans "
            "can be captured from the enclosing scope",
        )

    def is_t_module(self, name: str) -> bool:
        from .. import script as script_module

        value = self.env.get(name, _MISSING)
        if value is _MISSING:
            return name == "T"
        return value is script_module

    def t_name(self, node: ast.AST) -> str | None:
        """`T.a.b` -> "a.b" when the base name is the script namespace.

        A name the namespace does not have is an error at its own line, with the closest valid
        names suggested (a misspelt declaration would otherwise surface later, as an unknown
        variable where the declared one is used)."""
        parts = []
        attribute = node
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not parts or not isinstance(node, ast.Name) or not self.is_t_module(node.id):
            return None
        name = ".".join(reversed(parts))
        if name not in known_t_names():
            alias = node.id  # `T`, or whatever name the user imported the namespace as
            close = difflib.get_close_matches(name, sorted(known_t_names()), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(f'`{alias}.{c}`' for c in close)}?" if close else ""
            raise self.fail(
                attribute, f"unknown construct `{alias}.{name}`: the script namespace has no `{name}`{hint}"
            )
        return name

    def call_name(self, node: ast.AST) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        name = self.t_name(node.func)
        if name is not None:
            return name
        if isinstance(node.func, ast.Name) and node.func.id in PY_BUILTINS and not self.shadowed(node.func.id):
            return PY_BUILTINS[node.func.id]
        return None

    def shadowed(self, name: str) -> bool:
        return any(name in s for s in self.scopes) or name in self.env

    def bind(self, call: ast.Call, name: str) -> dict[str, Any]:
        """Bind a call's AST arguments to the signature of `T.<name>`."""
        stub = STUBS.get(name) or B.intrinsic_stub(name)
        if stub is None:
            raise self.fail(call, f"unknown construct `T.{name}`")
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise self.fail(call, f"`*args`/`**kwargs` are not supported in a call of T.{name}")
        try:
            bound = inspect.signature(stub).bind(*call.args, **{k.arg: k.value for k in call.keywords})
        except TypeError as e:
            raise self.fail(call, f"wrong arguments to T.{name}: {e}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    # ---------------------------------------------------------------- literal arguments
    def literal(self, node: Any) -> Any:
        if not isinstance(node, ast.AST):
            return node
        if isinstance(node, ast.Name):
            return self.lookup(node)
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise self.fail(node, "expected a constant") from None

    def const_str(self, node: Any, what: str) -> str:
        value = self.literal(node)
        if not isinstance(value, str):
            raise self.fail(node, f"{what} must be a string, got {value!r}")
        return value

    def dtype_arg(self, node: Any, what: str = "dtype", allowed=dt.ALL_DTYPES) -> str:
        value = self.const_str(node, what)
        if value not in allowed:
            raise self.fail(node, f"{what} must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def attrs_arg(self, node: Any) -> FrozenDict:
        if node is None:
            return FrozenDict()
        value = self.literal(node)
        if not isinstance(value, dict):
            raise self.fail(node, "expected a dict of attributes")
        return FrozenDict(value)

    def axis_ref(self, node: Any) -> ir.Axis:
        value = self.lookup(node) if isinstance(node, ast.Name) else None
        if not isinstance(value, ir.Axis):
            raise self.fail(node, "expected an axis")
        return value

    def axes_arg(self, node: Any) -> tuple[ir.Axis, ...]:
        if not isinstance(node, ast.Tuple | ast.List):
            raise self.fail(node, "expected a tuple of axes")
        return tuple(self.axis_ref(e) for e in node.elts)

    def handle_ref(self, node: Any) -> Var:
        value = self.lookup(node) if isinstance(node, ast.Name) else None
        if not isinstance(value, Var) or value.dtype != "handle":
            raise self.fail(node, "expected a `T.handle` parameter")
        return value

    def buffer_ref(self, node: ast.AST) -> ir.Buffer:
        value = self.lookup(node) if isinstance(node, ast.Name) else None
        if not isinstance(value, ir.SparseBuffer | ir.FlatBuffer):
            raise self.fail(node, "expected a buffer")
        return value

    def pair(self, node: Any, what: str) -> tuple[ast.AST, ast.AST]:
        if not isinstance(node, ast.Tuple | ast.List) or len(node.elts) != 2:
            raise self.fail(node, f"expected {what}")
        return node.elts[0], node.elts[1]

    def shape_arg(self, node: Any) -> tuple[PrimExpr, ...]:
        if isinstance(node, ast.Tuple | ast.List):
            return tuple(self.index_expr(e) for e in node.elts)
        return (self.index_expr(node),)

    def layout_arg(self, node: Any, rank: int) -> ir.Layout | None:
        if node is None:
            return None
        name = self.call_name(node)
        if name != "layout":
            raise self.fail(node, "expected `T.layout(minor_to_major, ...)`")
        args = self.bind(node, "layout")
        m2m = tuple(self.literal(args["minor_to_major"]))
        tiles = tuple(tuple(t) for t in self.literal(args["tiles"]))
        if sorted(m2m) != list(range(rank)):
            raise self.fail(node, f"minor_to_major must be a permutation of 0..{rank - 1}, got {m2m}")
        return ir.Layout(m2m, tiles, int(self.literal(args["tail_padding_alignment"])))

    # ---------------------------------------------------------------- functions
    def parse_function(self, fdef: ast.FunctionDef) -> ir.PrimFunc:
        self.node = fdef
        try:
            return self._parse_function(fdef)
        except SparseTIRError:
            raise
        except Exception as e:  # an internal failure still points at the user's source
            raise self.fail(self.node, f"internal error while parsing: {type(e).__name__}: {e}") from e

    def check_t_names(self, fdef: ast.FunctionDef) -> None:
        """Every `T.<name>` of the function (decorators, annotations, arguments and expressions
        included) is one the namespace has, checked in source order before anything else: a
        misspelt name fails at its own line and column, not as an unknown variable where the
        misspelt declaration's name is used, nor as "expected a constant" where it is passed."""
        inner = {id(n.value) for n in ast.walk(fdef) if isinstance(n, ast.Attribute)}
        chains = [n for n in ast.walk(fdef) if isinstance(n, ast.Attribute) and id(n) not in inner]
        for node in sorted(chains, key=lambda n: (n.lineno, n.col_offset)):
            self.t_name(node)

    def _parse_function(self, fdef: ast.FunctionDef) -> ir.PrimFunc:
        self.check_t_names(fdef)
        a = fdef.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.fail(fdef, "parameters must be plain `name: T.dtype` arguments")
        self.scopes.append({})
        params = []
        for arg in a.args:
            ann = self.t_name(arg.annotation) if arg.annotation is not None else None
            if ann not in B.DTYPES:
                raise self.fail(arg, f"parameter `{arg.arg}` needs an annotation such as T.handle or T.int32")
            v = Var(arg.arg, ann)
            params.append(v)
            self.define(arg.arg, v)
        axes: list[ir.Axis] = []
        buffers: list[ir.Buffer] = []
        attrs: dict[str, Any] = {}
        rest: list[ast.stmt] = []
        body_stmts = fdef.body
        if body_stmts and isinstance(body_stmts[0], ast.Expr) and isinstance(body_stmts[0].value, ast.Constant):
            body_stmts = body_stmts[1:]  # docstring
        for st in body_stmts:
            self.node = st
            name = self.call_name(st.value) if isinstance(st, ast.Expr | ast.Assign) else None
            if isinstance(st, ast.Expr) and name == "func_attr":
                attrs.update(self.attrs_arg(self.bind(st.value, "func_attr")["attrs"]))
            elif isinstance(st, ast.Assign) and name in AXIS_DECLS:
                axes.append(self.decl_axis(st, name))
            elif isinstance(st, ast.Assign) and name in ("match_sparse_buffer", "alloc_sparse_buffer"):
                buffers.append(self.decl_sparse_buffer(st, name))
            elif isinstance(st, ast.Assign) and name in ("match_buffer", "alloc_buffer"):
                buffers.append(self.decl_flat_buffer(st, name))
            elif isinstance(st, ast.Expr) and name == "assume_buffer_domain":
                self.assume_buffer_domain(st.value, buffers)
            else:
                rest.append(st)
        body = self.parse_body(rest)
        self.scopes.pop()
        if "stage" not in attrs:
            attrs["stage"] = infer_stage(body, buffers)
        func = ir.PrimFunc(fdef.name, tuple(params), tuple(axes), tuple(buffers), body, FrozenDict(attrs))
        return self.expand_encodings(func)

    def expand_encodings(self, func: ir.PrimFunc) -> ir.PrimFunc:
        """Buffers declared with `encoding=` move onto their encoding's level axes (MLIR style)."""
        if not self.encoded:
            return func
        from ..format.mlir.expand import expand_encoded_buffers

        for buf, (enc, node) in self.encoded.items():
            try:
                func = expand_encoded_buffers(func, {buf: enc})
            except SparseTIRError as e:
                raise self.fail(node, str(e)) from None
        return func

    def assume_buffer_domain(self, call: ast.Call, buffers: list[ir.Buffer]) -> None:
        """`T.assume_buffer_domain(X, [lo, hi])` (SparseTIR): every value of `X` lies in the
        domain, which is `X`'s `value_range=(lo, hi)`. SparseTIR reads the pair as the range from
        `lo` of extent `hi - lo` yet writes `[0, nnz]` for an indptr, whose last value is `nnz`:
        the bounds are taken inclusive, the reading that holds for both (a wider hint is never
        wrong)."""
        args = self.bind(call, "assume_buffer_domain")
        buf = self.buffer_ref(args["buffer"])
        if buf not in buffers:
            raise self.fail(call, f"`{buf.name}` is not a function-level buffer")
        lo, hi = self.value_range_arg(args["domain"])
        if buf.value_range is not None:
            raise self.fail(
                call, f"buffer `{buf.name}` already has a value range; give it once (`value_range=(lo, hi)`)"
            )
        new = buf.replace(value_range=(lo, hi))
        buffers[buffers.index(buf)] = new
        self.define(buf.name, new)

    def target_name(self, st: ast.Assign) -> ast.Name:
        if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
            raise self.fail(st, "a declaration assigns to exactly one name")
        return st.targets[0]

    def decl_axis(self, st: ast.Assign, name: str) -> ir.Axis:
        target = self.target_name(st)
        assemble = next((k for k in st.value.keywords if k.arg == "assemble"), None)
        if assemble is not None and name != "sparse_variable":
            raise self.fail(
                assemble,
                f"`assemble=True` applies to `T.sparse_variable` (an output's compressed level), not `T.{name}`: "
                "a dense level has no structure to assemble",
            )
        args = self.bind(st.value, name)
        kind = AXIS_DECLS[name]
        idtype = self.dtype_arg(args["idtype"], "index dtype", dt.INDEX_DTYPES)
        if kind == DENSE_FIXED:
            axis = ir.Axis(target.id, kind, self.index_expr(args["length"]), idtype=idtype)
        else:
            parent = self.axis_ref(args["parent"])
            length_node, second = self.pair(args["shape"], "a pair `(length, nnz)`")
            length, count = self.index_expr(length_node), self.index_expr(second)
            is_sorted = self.literal(args.get("sorted", True))
            if not isinstance(is_sorted, bool):
                raise self.fail(args["sorted"], "`sorted` must be True or False")
            fields: dict[str, Any] = {"parent": parent, "idtype": idtype, "sorted": is_sorted}
            if args.get("assemble") is not None:
                assemble = self.literal(args["assemble"])
                if not isinstance(assemble, bool):
                    raise self.fail(args["assemble"], "`assemble` must be True or False")
                fields["assemble"] = assemble
            if kind == DENSE_VARIABLE:
                fields.update(nnz=count, indptr=self.handle_ref(args["indptr"]))
            elif kind == SPARSE_FIXED:
                fields.update(nnz_cols=count, indices=self.handle_ref(args["indices"]))
            else:
                indptr, indices = self.pair(args["data"], "a pair `(indptr, indices)`")
                fields.update(nnz=count, indptr=self.handle_ref(indptr), indices=self.handle_ref(indices))
            axis = ir.Axis(target.id, kind, length, **fields)
        self.define(target.id, axis)
        return axis

    def decl_sparse_buffer(self, st: ast.Assign, name: str) -> ir.SparseBuffer:
        target = self.target_name(st)
        args = self.bind(st.value, name)
        axes = self.axes_arg(args["axes"])
        self.check(args["axes"], "check_buffer_axes", target.id, axes)
        dtype = self.dtype_arg(args["dtype"], allowed=dt.SCALAR_DTYPES)
        extra = self.extra_storage_arg(args["extra_storage"])
        value_range = self.value_range_arg(args["value_range"])
        if name == "match_sparse_buffer":
            default = self.literal(args["default_value"])
            if not isinstance(default, int | float) or isinstance(default, bool):
                raise self.fail(args["default_value"], "`default_value` must be a number")
            param = self.handle_ref(args["param"])
            buf = ir.SparseBuffer(target.id, axes, dtype, param, default, "global", value_range, extra)
            if args["encoding"] is not None:
                self.encoded[buf] = (self.encoding_arg(args["encoding"]), args["encoding"])
        else:
            scope = self.const_str(args["scope"], "scope")
            buf = ir.SparseBuffer(target.id, axes, dtype, None, 0, scope, value_range, extra)
        self.define(target.id, buf)
        return buf

    def extra_storage_arg(self, node: Any) -> PrimExpr | None:
        """SparseTIR's `extra_storage=`: None for none (it prints `extra_storage=0` on scratch)."""
        if node is None:
            return None
        extra = self.index_expr(node)
        if isinstance(extra, IntImm) and extra.value < 0:
            raise self.fail(node, f"`extra_storage` must not be negative, got {extra.value}")
        return None if isinstance(extra, IntImm) and extra.value == 0 else extra

    def encoding_arg(self, node: ast.AST):
        """`encoding=`: encoding text, `T.encoding("...")`, or an encoding captured by name."""
        from ..format.mlir import SparseTensorEncoding, parse_encoding

        if self.call_name(node) == "encoding":
            node = self.bind(node, "encoding")["text"]
        if isinstance(node, ast.Name) and not any(node.id in sc for sc in self.scopes):
            value = self.env.get(node.id, _MISSING)
            if isinstance(value, SparseTensorEncoding):
                return value
        value = self.literal(node)
        if not isinstance(value, str):
            raise self.fail(node, f"`encoding` must be an MLIR encoding or its text, got {value!r}")
        try:
            return parse_encoding(value)
        except SparseTIRError as e:
            raise self.fail(node, str(e)) from None

    def decl_flat_buffer(self, st: ast.Assign, name: str) -> ir.FlatBuffer:
        target = self.target_name(st)
        args = self.bind(st.value, name)
        shape = self.shape_arg(args["shape"])
        dtype = self.dtype_arg(args["dtype"], allowed=dt.SCALAR_DTYPES)
        scope = self.const_str(args["scope"], "scope")
        layout = self.layout_arg(args["layout"], len(shape))
        if args.get("strides") is not None:
            if layout is not None:
                raise self.fail(args["strides"], "give `layout=` or `strides=`, not both")
            layout = self.strides_layout(args["strides"], shape, target.id)
        data = self.handle_ref(args["param"]) if "param" in args else None
        value_range = self.value_range_arg(args.get("value_range"))
        buf = ir.FlatBuffer(target.id, shape, dtype, data, layout, scope, value_range)
        self.define(target.id, buf)
        return buf

    def strides_layout(self, node: Any, shape: tuple[PrimExpr, ...], name: str) -> ir.Layout | None:
        """TVM's `strides=` as a layout. Buffers here are compact, so strides are accepted where
        they describe a compact layout: the row-major ones (`[1]`, `[n, 1]`, as TVM prints them),
        or, for a constant shape, a permutation of them (the `layout=` with that order). Anything
        else (padding between rows, overlapping elements) has no layout to stand for it."""
        items = node.elts if isinstance(node, ast.Tuple | ast.List) else None
        if items is None or len(items) != len(shape):
            raise self.fail(node, f"`strides` of `{name}` needs one stride per dimension ({len(shape)})")
        strides = [self.index_expr(e) for e in items]
        row_major: list[PrimExpr] = []
        step: PrimExpr = IntImm(1, "int32")
        for extent in reversed(shape):
            row_major.insert(0, step)
            step = extent if isinstance(step, IntImm) and step.value == 1 else BinOp("*", extent, step)
        if all(_same_value(a, b) for a, b in zip(strides, row_major)):
            return None
        order = _compact_order([_int_value(x) for x in strides], [_int_value(x) for x in shape])
        if order is not None:
            return ir.Layout(order)
        shown = ", ".join(ast.unparse(e) for e in items)
        raise self.fail(
            node,
            f"`strides=[{shown}]` of `{name}` does not describe a compact layout of shape "
            f"({', '.join(ScriptPrinter().expr(d) for d in shape)}): buffers here are compact, "
            "so drop `strides=` for row-major, or give the dimension order as "
            "`layout=T.layout(minor_to_major)` (a constant shape may also give permuted compact strides)",
        )

    def value_range_arg(self, node: Any) -> tuple[PrimExpr, PrimExpr] | None:
        if node is None:
            return None
        lo, hi = self.pair(node, "a pair `(lo, hi)`")
        return self.index_expr(lo), self.index_expr(hi)

    def check(self, node: ast.AST, checker: str, *args) -> None:
        """Run one of the verifier's declaration checks, reporting a failure at `node`."""
        try:
            from ..ir import verify
        except ImportError:  # the verifier is optional while the package is being built
            return
        fn = getattr(verify, checker, None)
        if fn is None:
            return
        try:
            fn(*args)
        except SparseTIRError as e:
            raise self.fail(node, str(e)) from None

    # ---------------------------------------------------------------- statements
    def parse_body(self, stmts: list[ast.stmt]) -> ir.Stmt:
        out: list[ir.Stmt] = []
        for i, st in enumerate(stmts):
            self.node = st
            if isinstance(st, ast.Assign) and self.call_name(st.value) == "allocate":
                out.append(self.parse_allocate(st, stmts[i + 1 :]))
                break
            if isinstance(st, ast.AnnAssign):
                out.append(self.parse_let(st, stmts[i + 1 :]))
                break
            s = self.parse_stmt(st)
            if s is not None:
                out.append(s)
        if not out:
            return ir.SeqStmt(())
        return ir.seq(*out)

    def parse_stmt(self, st: ast.stmt) -> ir.Stmt | None:
        method = getattr(self, "stmt_" + type(st).__name__, None)
        if method is None:
            raise self.fail(st, f"unsupported construct `{type(st).__name__}`")
        return method(st)

    def stmt_Pass(self, st: ast.Pass) -> None:
        return None

    def stmt_With(self, st: ast.With) -> ir.Stmt:
        if len(st.items) != 1:
            raise self.fail(st, "a `with` statement takes exactly one T.sp_iter, T.block or T.init")
        name = self.call_name(st.items[0].context_expr)
        if name in ("sp_iter", "iter"):
            return self.parse_sp_iter(st, name)
        if name == "block":
            return self.parse_block(st)
        if name == "allocate":
            return self.parse_scoped_allocate(st)
        if name == "init":
            raise self.fail(st, "`T.init()` must be directly inside a T.sp_iter or T.block")
        raise self.fail(
            st.items[0].context_expr, "unsupported `with`: expected T.sp_iter, T.block, T.allocate or T.init"
        )

    def stmt_If(self, st: ast.If) -> ir.Stmt:
        cond = self.bool_expr(st.test)
        self.scopes.append({})
        then = self.parse_body(st.body)
        self.scopes[-1] = {}
        orelse = self.parse_body(st.orelse) if st.orelse else None
        self.scopes.pop()
        return ir.IfThenElse(cond, then, orelse)

    def stmt_While(self, st: ast.While) -> ir.Stmt:
        """`while cond:` (Stages II and III, TVM's `tir.While`): the body updates buffers (a binary
        search keeps `low`/`high` in local buffers), since a script's names are not reassignable."""
        if st.orelse:
            raise self.fail(st, "`while ... else` is not supported")
        cond = self.bool_expr(st.test)
        self.scopes.append({})
        body = self.parse_body(st.body)
        self.scopes.pop()
        return ir.While(cond, body)

    def stmt_Assign(self, st: ast.Assign) -> ir.Stmt:
        if len(st.targets) != 1:
            raise self.fail(st, "chained assignment is not supported")
        target = st.targets[0]
        if isinstance(target, ast.Subscript):
            return self.store(target, self.expr(st.value))
        name = self.call_name(st.value)
        if name in AXIS_DECLS or name in ("match_sparse_buffer", "alloc_sparse_buffer", "match_buffer"):
            raise self.fail(st, f"`T.{name}` declares a function-level object: put it at the top of the function")
        if name in ("axis.spatial", "axis.reduce", "axis.remap", "alloc_buffer"):
            raise self.fail(st, f"`T.{name}` must be directly inside a `with T.block(...)`")
        raise self.fail(st, "only buffer elements can be assigned (`C[i, k] = ...`); names are declarations")

    def stmt_AugAssign(self, st: ast.AugAssign) -> ir.Stmt:
        if not isinstance(st.target, ast.Subscript):
            raise self.fail(st, "only buffer elements can be updated (`C[i, k] += ...`)")
        op = AST_BINOPS.get(type(st.op))
        if op is None:
            raise self.fail(st, f"unsupported operator `{type(st.op).__name__}`")
        current = self.load(st.target)
        return self.store(st.target, self.binop(op, current, self.expr(st.value), st))

    def stmt_Expr(self, st: ast.Expr) -> ir.Stmt | None:
        call = st.value
        name = self.call_name(call)
        if name == "atomic_add":
            args = self.bind(call, name)
            target = args["target"]
            if not isinstance(target, ast.Subscript):
                raise self.fail(target, "the target of T.atomic_add is a buffer element `C[i, k]`")
            buf, indices = self.access(target)
            return ir.AtomicAdd(buf, indices, self.convert(self.expr(args["value"]), buf.dtype))
        if name == "evaluate":
            return ir.Evaluate(self.expr(self.bind(call, name)["value"]))
        if name in INTRINSICS:
            return ir.Evaluate(self.expr(call))
        if name in ("reads", "writes", "where", "block_attr"):
            raise self.fail(st, f"`T.{name}` must be directly inside a `with T.block(...)`")
        if name == "func_attr":
            raise self.fail(st, "`T.func_attr` must be at the top level of the function")
        if name == "assume_buffer_domain":
            raise self.fail(
                st,
                "`T.assume_buffer_domain` must be at the top level of the function, after the declaration of a "
                "function-level buffer (a block's own buffer takes `value_range=(lo, hi)` where it is allocated)",
            )
        raise self.fail(st, "unsupported expression statement")

    def stmt_For(self, st: ast.For) -> ir.Stmt:
        if st.orelse:
            raise self.fail(st, "`for ... else` is not supported")
        name = self.call_name(st.iter)
        if name == "grid":
            return self.parse_grid(st)
        if name not in LOOP_KINDS:
            raise self.fail(
                st.iter,
                "a loop iterates T.serial, T.parallel, T.vectorized, T.unroll, T.thread_binding, T.grid or range",
            )
        if not isinstance(st.target, ast.Name):
            raise self.fail(st.target, "a loop variable must be a single name")
        args = self.bind(st.iter, name)
        if args["stop"] is None:
            extent = self.index_expr(args["start"])
            lo = IntImm(0, extent.dtype)
        else:
            lo = self.index_expr(args["start"])
            extent = range_extent(lo, self.index_expr(args["stop"]))
        kind = LOOP_KINDS[name]
        thread = None
        if kind == "thread_binding":
            if args["thread"] is None:
                raise self.fail(st.iter, 'T.thread_binding needs `thread=` (e.g. "threadIdx.x")')
            thread = self.const_str(args["thread"], "thread")
            if thread not in ir.stmt.THREAD_TAGS:
                raise self.fail(args["thread"], f"unknown thread tag {thread!r}")
        annotations = self.attrs_arg(args["annotations"])
        var = Var(st.target.id, extent.dtype)
        body = self.loop_body(var, extent, st.body)
        return ir.For(var, lo, extent, kind, body, thread, annotations)

    def loop_body(self, var: Var, extent: PrimExpr, body: list[ast.stmt]) -> ir.Stmt:
        self.scopes.append({var.name: var})
        self.loop_extents[var] = extent
        try:
            return self.parse_body(body)
        finally:
            self.scopes.pop()

    def parse_grid(self, st: ast.For) -> ir.Stmt:
        extents = [self.index_expr(e) for e in self.bind(st.iter, "grid")["extents"]]
        targets = st.target.elts if isinstance(st.target, ast.Tuple) else [st.target]
        if len(targets) != len(extents) or not all(isinstance(t, ast.Name) for t in targets):
            raise self.fail(st.target, f"T.grid with {len(extents)} extents needs {len(extents)} loop names")
        loop_vars = [Var(t.id, e.dtype) for t, e in zip(targets, extents)]
        self.scopes.append({v.name: v for v in loop_vars})
        for v, e in zip(loop_vars, extents):
            self.loop_extents[v] = e
        body = self.parse_body(st.body)
        self.scopes.pop()
        for v, e in reversed(list(zip(loop_vars, extents))):
            body = ir.For(v, IntImm(0, e.dtype), e, "serial", body)
        return body

    def parse_scoped_allocate(self, st: ast.With) -> ir.Stmt:
        """`with T.allocate(shape, dtype, scope) as S:`: scratch live in the `with` body only (what
        the printer writes for an allocation that other statements follow)."""
        item = st.items[0]
        if not isinstance(item.optional_vars, ast.Name):
            raise self.fail(st, "a scoped allocation is written `with T.allocate(shape, dtype, scope) as name:`")
        assign = ast.Assign(targets=[item.optional_vars], value=item.context_expr)
        ast.copy_location(assign, st)
        return self.parse_allocate(assign, st.body)

    def parse_allocate(self, st: ast.Assign, rest: list[ast.stmt]) -> ir.Stmt:
        target = self.target_name(st)
        args = self.bind(st.value, "allocate")
        shape = self.shape_arg(args["shape"])
        buf = ir.FlatBuffer(
            target.id,
            shape,
            self.dtype_arg(args["dtype"], allowed=dt.SCALAR_DTYPES),
            None,
            self.layout_arg(args["layout"], len(shape)),
            self.const_str(args["scope"], "scope"),
        )
        self.scopes.append({target.id: buf})
        body = self.parse_body(rest)
        self.scopes.pop()
        return ir.Allocate(buf, body)

    def parse_let(self, st: ast.AnnAssign, rest: list[ast.stmt]) -> ir.Stmt:
        """`x: T.float32 = value`: a local value visible in the rest of the statement list."""
        dtype = self.t_name(st.annotation)
        if not isinstance(st.target, ast.Name) or dtype not in B.DTYPES or dtype == "handle" or st.value is None:
            raise self.fail(st, "a local value is written `name: T.dtype = value`")
        var = Var(st.target.id, dtype)
        value = self.convert(self.expr(st.value), dtype)
        self.scopes.append({var.name: var})
        body = self.parse_body(rest)
        self.scopes.pop()
        return ir.LetStmt(var, value, body)

    # ---------------------------------------------------------------- Stage I
    def parse_sp_iter(self, st: ast.With, name: str) -> ir.SparseIteration:
        item = st.items[0]
        args = self.bind(item.context_expr, name)
        axes_node = args["axes"]
        if not isinstance(axes_node, ast.List | ast.Tuple):
            raise self.fail(axes_node, "T.sp_iter takes a list of axes")
        iter_axes: list[ir.IterAxis] = []
        for elt in axes_node.elts:
            iter_axes.extend(self.iter_axis(elt))
        kinds_node = args["kinds"]
        kinds = self.const_str(kinds_node, "the S/R string")
        it_name = self.const_str(args["name"], "the iteration name")
        attrs = self.attrs_arg(args["attrs"])
        if len(kinds) != len(iter_axes):
            raise self.fail(
                kinds_node,
                f'S/R string "{kinds}" has {len(kinds)} letters, but the iteration has {len(iter_axes)} iterators',
            )
        bad = sorted(set(kinds) - {"S", "R"})
        if bad:
            raise self.fail(kinds_node, f'S/R string "{kinds}" may only contain "S" and "R", got {bad[0]!r}')
        target = item.optional_vars
        names = target.elts if isinstance(target, ast.List | ast.Tuple) else [target] if target else []
        if not all(isinstance(n, ast.Name) for n in names):
            raise self.fail(target or st, "`as` names the iterators: `as [i, j, k]`")
        if len(names) != len(iter_axes):
            raise self.fail(target or st, f"the iteration has {len(iter_axes)} iterators but `as` names {len(names)}")
        self.check(
            axes_node, "check_iteration_axes", it_name, tuple(iter_axes), kinds, len(names), set(self.bound_axes)
        )
        iter_vars = tuple(Var(n.id, ir.base_axis(a).idtype) for n, a in zip(names, iter_axes))
        self.scopes.append({v.name: v for v in iter_vars})
        n_bound = len(self.bound_axes)
        self.bound_axes.extend(ir.base_axis(a) for a in iter_axes)
        init, body = self.split_init(st.body)
        del self.bound_axes[n_bound:]
        self.scopes.pop()
        return ir.SparseIteration(it_name, tuple(iter_axes), kinds, iter_vars, body, init, attrs)

    def iter_axis(self, elt: ast.AST) -> list[ir.IterAxis]:
        name = self.call_name(elt)
        if name == "fuse":
            group = tuple(self.axis_ref(a) for a in self.bind(elt, "fuse")["axes"])
            if len(group) < 2:
                raise self.fail(elt, "T.fuse needs at least two axes")
            for parent, child in itertools.pairwise(group):
                if child.parent is not parent:
                    raise self.fail(elt, f"T.fuse: `{child.name}` is not a child of `{parent.name}`")
            return [ir.FusedAxis(group, i) for i in range(len(group))]
        if name == "attach":
            args = self.bind(elt, "attach")
            return [ir.AttachedAxis(self.axis_ref(args["axis"]), self.axis_ref(args["parent"]))]
        return [self.axis_ref(elt)]

    def split_init(self, stmts: list[ast.stmt]) -> tuple[ir.Stmt | None, ir.Stmt]:
        init = None
        rest = []
        for st in stmts:
            if isinstance(st, ast.With) and len(st.items) == 1 and self.call_name(st.items[0].context_expr) == "init":
                if init is not None:
                    raise self.fail(st, "only one `with T.init():` per iteration or block")
                self.bind(st.items[0].context_expr, "init")
                self.scopes.append({})
                init = self.parse_body(st.body)
                self.scopes.pop()
            else:
                rest.append(st)
        return init, self.parse_body(rest)

    # ---------------------------------------------------------------- Stages II and III
    def parse_block(self, st: ast.With) -> ir.Block:
        name = self.const_str(self.bind(st.items[0].context_expr, "block")["name"], "the block name")
        self.scopes.append({})
        iter_vars: list[ir.IterVar] = []
        reads: tuple = ()
        writes: tuple = ()
        predicate = None
        annotations = FrozenDict()
        allocs: list[ir.FlatBuffer] = []
        rest: list[ast.stmt] = []
        for sub in st.body:
            self.node = sub
            value = sub.value if isinstance(sub, ast.Assign | ast.Expr) else None
            call = self.call_name(value) if value is not None else None
            if isinstance(sub, ast.Assign) and call in ("axis.spatial", "axis.reduce"):
                target = self.target_name(sub)
                args = self.bind(value, call)
                extent = self.index_expr(args["extent"])
                binding = self.index_expr(args["value"])
                var = Var(target.id, binding.dtype)
                iter_vars.append(ir.IterVar(var, extent, "S" if call == "axis.spatial" else "R", binding))
                self.define(target.id, var)
            elif isinstance(sub, ast.Assign) and call == "axis.remap":
                iter_vars.extend(self.parse_remap(sub))
            elif isinstance(sub, ast.Assign) and call == "alloc_buffer":
                allocs.append(self.decl_flat_buffer(sub, "alloc_buffer"))
            elif isinstance(sub, ast.Expr) and call in ("reads", "writes"):
                regions = tuple(self.region(r) for r in self.bind(value, call)["regions"])
                if call == "reads":
                    reads = regions
                else:
                    writes = regions
            elif isinstance(sub, ast.Expr) and call == "where":
                predicate = self.bool_expr(self.bind(value, "where")["condition"])
            elif isinstance(sub, ast.Expr) and call == "block_attr":
                annotations = self.attrs_arg(self.bind(value, "block_attr")["attrs"])
            else:
                rest.append(sub)
        init, body = self.split_init(rest)
        self.scopes.pop()
        return ir.Block(name, tuple(iter_vars), reads, writes, body, init, tuple(allocs), predicate, annotations)

    def parse_remap(self, st: ast.Assign) -> list[ir.IterVar]:
        args = self.bind(st.value, "axis.remap")
        kinds = self.const_str(args["kinds"], "the S/R string")
        values = args["values"]
        targets = st.targets[0].elts if isinstance(st.targets[0], ast.Tuple | ast.List) else [st.targets[0]]
        if not isinstance(values, ast.List | ast.Tuple) or len(values.elts) != len(kinds) != len(targets):
            raise self.fail(st, "T.axis.remap needs one letter and one loop variable per name")
        if len(values.elts) != len(kinds) or len(targets) != len(kinds):
            raise self.fail(st, "T.axis.remap needs one letter and one loop variable per name")
        out = []
        for t, v, k in zip(targets, values.elts, kinds):
            loop_var = self.expr(v)
            if not isinstance(t, ast.Name) or loop_var not in self.loop_extents:
                raise self.fail(v, "T.axis.remap binds loop variables of enclosing loops")
            if k not in "SR":
                raise self.fail(args["kinds"], f'T.axis.remap kinds may only contain "S" and "R", got {k!r}')
            var = Var(t.id, loop_var.dtype)
            self.define(t.id, var)
            out.append(ir.IterVar(var, self.loop_extents[loop_var], k, loop_var))
        return out

    def region(self, node: ast.AST) -> ir.BufferRegion:
        if not isinstance(node, ast.Subscript):
            raise self.fail(node, "a region is a buffer subscript such as `A[i, 0:n]`")
        buf = self.buffer_ref(node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        ranges = []
        for it in items:
            if isinstance(it, ast.Slice):
                if it.upper is None or it.step is not None:
                    raise self.fail(it, "a region slice is `lo:hi` with both bounds and no step")
                lo = self.index_expr(it.lower) if it.lower is not None else IntImm(0, "int32")
                ranges.append(ir.Range(lo, range_extent(lo, self.index_expr(it.upper))))
            else:
                e = self.index_expr(it)
                ranges.append(ir.Range(e, IntImm(1, e.dtype)))
        return ir.BufferRegion(buf, tuple(ranges))

    # ---------------------------------------------------------------- buffer access
    def access(self, node: ast.Subscript) -> tuple[ir.Buffer, tuple[PrimExpr, ...]]:
        buf = self.buffer_ref(node.value)
        sl = node.slice
        if isinstance(sl, ast.Tuple):
            items = sl.elts
        else:
            items = [sl]
        if any(isinstance(i, ast.Slice) for i in items):
            raise self.fail(node, "slices are only allowed in T.reads / T.writes regions")
        indices = tuple(self.index_expr(i) for i in items)
        ndim = buf.ndim
        flat_ok = isinstance(buf, ir.FlatBuffer) and len(indices) == 1
        if len(indices) != ndim and not flat_ok:
            raise self.fail(node, f"buffer `{buf.name}` has {ndim} dimensions but is indexed with {len(indices)}")
        return buf, indices

    def load(self, node: ast.Subscript) -> BufferLoad:
        buf, indices = self.access(node)
        return BufferLoad(buf, indices)

    def store(self, node: ast.Subscript, value: PrimExpr) -> ir.BufferStore:
        buf, indices = self.access(node)
        return ir.BufferStore(buf, indices, self.convert(value, buf.dtype))

    def convert(self, value: PrimExpr, dtype: str) -> PrimExpr:
        """`value` as `dtype`: constants are retyped, other expressions cast."""
        if value.dtype == dtype:
            return value
        if isinstance(value, IntImm | FloatImm) and dtype != "bool":
            return ir.const(value.value, dtype)
        return Cast(dtype, value)

    # ---------------------------------------------------------------- expressions
    def index_expr(self, node: Any) -> PrimExpr:
        if not isinstance(node, ast.AST):
            return ir.as_expr(node)
        e = self.expr(node)
        if not dt.is_int(e.dtype):
            raise self.fail(node, f"expected an integer expression, got {e.dtype}")
        return e

    def bool_expr(self, node: ast.AST) -> PrimExpr:
        e = self.expr(node)
        if e.dtype != "bool":
            raise self.fail(node, f"expected a condition (bool), got {e.dtype}")
        return e

    def expr(self, node: ast.AST) -> PrimExpr:
        self.node = node
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.fail(node, f"unsupported construct `{type(node).__name__}` in an expression")
        return method(node)

    def expr_Constant(self, node: ast.Constant) -> PrimExpr:
        return self.python_const(node, node.value)

    def python_const(self, node: ast.AST, value: Any) -> PrimExpr:
        if isinstance(value, bool):
            return IntImm(int(value), "bool")
        if isinstance(value, int):
            return IntImm(value, "int32" if -(2**31) <= value < 2**31 else "int64")
        if isinstance(value, float):
            return FloatImm(value, "float32")
        raise self.fail(node, f"{value!r} cannot be used as a value")

    def expr_Name(self, node: ast.Name) -> PrimExpr:
        value = self.lookup(node)
        if isinstance(value, Var):
            if value.dtype == "handle":
                raise self.fail(node, f"`{node.id}` is a handle; declare a buffer on it and index the buffer")
            return value
        if isinstance(value, ir.Axis):
            raise self.fail(node, f"`{node.id}` is an axis, not a value; iterate it with T.sp_iter")
        if isinstance(value, ir.SparseBuffer | ir.FlatBuffer):
            raise self.fail(node, f"`{node.id}` is a buffer; index it: `{node.id}[...]`")
        return self.python_const(node, value)

    def expr_BinOp(self, node: ast.BinOp) -> PrimExpr:
        op = AST_BINOPS.get(type(node.op))
        if op is None:
            raise self.fail(node, f"unsupported operator `{type(node.op).__name__}`")
        return self.binop(op, self.expr(node.left), self.expr(node.right), node)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> PrimExpr:
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            value = node.operand.value
            if isinstance(value, int | float) and not isinstance(value, bool):
                return self.python_const(node, -value)
        a = self.expr(node.operand)
        if isinstance(node.op, ast.USub):
            return UnaryOp("-", a)
        if isinstance(node.op, ast.UAdd):
            return a
        if isinstance(node.op, ast.Not):
            if a.dtype != "bool":
                raise self.fail(node, "`not` needs a condition")
            return UnaryOp("not", a)
        raise self.fail(node, f"unsupported operator `{type(node.op).__name__}`")

    def expr_BoolOp(self, node: ast.BoolOp) -> PrimExpr:
        op = "and" if isinstance(node.op, ast.And) else "or"
        values = [self.bool_expr(v) for v in node.values]
        out = values[0]
        for v in values[1:]:
            out = BinOp(op, out, v)
        return out

    def expr_Compare(self, node: ast.Compare) -> PrimExpr:
        left = self.expr(node.left)
        result = None
        for op_node, right_node in zip(node.ops, node.comparators):
            op = AST_CMPOPS.get(type(op_node))
            if op is None:
                raise self.fail(node, f"unsupported comparison `{type(op_node).__name__}`")
            right = self.expr(right_node)
            cmp = self.binop(op, left, right, node)
            result = cmp if result is None else BinOp("and", result, cmp)
            left = right
        return result

    def expr_IfExp(self, node: ast.IfExp) -> PrimExpr:
        cond = self.bool_expr(node.test)
        a, b = self.unify(self.expr(node.body), self.expr(node.orelse), node)
        return Select(cond, a, b)

    def expr_Subscript(self, node: ast.Subscript) -> PrimExpr:
        return self.load(node)

    def expr_Call(self, node: ast.Call) -> PrimExpr:
        name = self.call_name(node)
        if name is None:
            raise self.fail(node.func, "unknown function: only T.* intrinsics can be called in a script")
        if name in B.DTYPES:
            return self.dtype_call(node, name)
        if name in ("min", "max", "floordiv", "floormod"):
            args = self.bind(node, name)
            op = {"floordiv": "//", "floormod": "%"}.get(name, name)
            return self.binop(op, self.expr(args["a"]), self.expr(args["b"]), node)
        if name in ("if_then_else", "Select"):
            args = self.bind(node, name)
            cond = self.bool_expr(args["cond"])
            a, b = self.unify(self.expr(args["true_value"]), self.expr(args["false_value"]), node)
            return Select(cond, a, b)
        if name == "cast":
            args = self.bind(node, name)
            return Cast(self.dtype_arg(args["dtype"], allowed=dt.SCALAR_DTYPES), self.expr(args["value"]))
        if name in ("min_value", "max_value"):
            dtype = self.dtype_arg(self.bind(node, name)["dtype"], allowed=dt.SCALAR_DTYPES)
            return limit_value(dtype, name == "max_value")
        if name in INTRINSICS:
            return self.intrinsic_call(node, name)
        if name not in STUBS:
            raise self.fail(node, f"unknown construct `T.{name}`")
        raise self.fail(node, f"`T.{name}` is not an expression")

    def dtype_call(self, node: ast.Call, dtype: str) -> PrimExpr:
        if len(node.args) != 1 or node.keywords:
            raise self.fail(node, f"T.{dtype}(x) takes exactly one argument")
        arg = node.args[0]
        if dtype == "handle":
            raise self.fail(node, "T.handle is a parameter annotation")
        literal = self.number_literal(arg)
        if literal is not None:
            if dt.is_float(dtype):
                return FloatImm(float(literal), dtype)
            if isinstance(literal, float) and not literal.is_integer():
                raise self.fail(arg, f"T.{dtype} of a non-integer constant {literal!r}")
            return IntImm(int(literal), dtype)
        return Cast(dtype, self.expr(arg))

    def number_literal(self, node: ast.AST) -> int | float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                return float(node.value)
            except ValueError:
                raise self.fail(node, f"not a number: {node.value!r}") from None
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int | float)
        ):
            return -node.operand.value
        if isinstance(node, ast.Name):
            value = self.lookup(node)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return value
        return None

    def intrinsic_call(self, node: ast.Call, name: str) -> PrimExpr:
        intrin = INTRINSICS[name]
        args = self.bind(node, name)
        arg_nodes = args["args"]
        if intrin.nargs is not None and len(arg_nodes) != intrin.nargs:
            raise self.fail(node, f"T.{name} takes {intrin.nargs} arguments, got {len(arg_nodes)}")
        values = [self.buffer_ref(a) if k in intrin.buffer_args else self.expr(a) for k, a in enumerate(arg_nodes)]
        if len(values) == 2 and not intrin.buffer_args:
            values = list(self.unify(values[0], values[1], node))
        dtype = args["dtype"]
        if dtype is None:
            dtype = result_dtype(name, [v.dtype for v in values] or ["void"])
        else:
            dtype = self.dtype_arg(dtype)
        if intrin.result == "same" and values and dt.is_int(values[0].dtype) and dt.is_float(dtype):
            values[0] = Cast(dtype, values[0])
        return Call(name, tuple(values), dtype)

    def unify(self, a: PrimExpr, b: PrimExpr, node: ast.AST) -> tuple[PrimExpr, PrimExpr]:
        """Bring two operands to one dtype: constants adapt to the other side, else promote."""
        if a.dtype == b.dtype:
            return a, b
        if "bool" in (a.dtype, b.dtype) or "void" in (a.dtype, b.dtype):
            raise self.fail(node, f"operands of types {a.dtype} and {b.dtype} do not mix")
        a_const = isinstance(a, IntImm | FloatImm)
        b_const = isinstance(b, IntImm | FloatImm)
        if b_const and not (isinstance(b, FloatImm) and dt.is_int(a.dtype)):
            return a, ir.const(b.value, a.dtype)
        if a_const and not (isinstance(a, FloatImm) and dt.is_int(b.dtype)):
            return ir.const(a.value, b.dtype), b
        target = dt.promote(a.dtype, b.dtype)
        return self.convert(a, target), self.convert(b, target)

    def binop(self, op: str, a: PrimExpr, b: PrimExpr, node: ast.AST) -> PrimExpr:
        if op in ("and", "or"):
            if a.dtype != "bool" or b.dtype != "bool":
                raise self.fail(node, f"`{op}` needs conditions")
            return BinOp(op, a, b)
        if op == "%" and (dt.is_float(a.dtype) or dt.is_float(b.dtype)):
            raise self.fail(node, "`%` needs integer operands")
        a, b = self.unify(a, b, node)
        if op == "/" and dt.is_int(a.dtype):
            raise self.fail(node, "`/` on integers: use `//` for floor division")
        if op in ("+", "-", "*", "/", "//", "%", "min", "max") and a.dtype == "bool":
            raise self.fail(node, f"`{op}` on conditions")
        return BinOp(op, a, b)


def _int_value(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _same_value(a: PrimExpr, b: PrimExpr) -> bool:
    """Equal as written (`n * k` and `n * k`), or the same constant of any integer dtype."""
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return a.value == b.value
    from ..ir.structural_equal import structural_equal

    return structural_equal(a, b)


def _compact_order(strides: list[int | None], shape: list[int | None]) -> tuple[int, ...] | None:
    """The minor-to-major order in which constant `strides` are compact for constant `shape`
    (each dimension's stride the product of the extents of the dimensions minor to it), or None."""
    if None in strides or None in shape:
        return None
    # Most minor first; among equal strides (extent-1 dimensions) the later dimension is minor.
    order = sorted(range(len(shape)), key=lambda d: (strides[d], -d))
    step = 1
    for d in order:
        if strides[d] != step and shape[d] != 1:
            return None
        step *= shape[d]
    return tuple(order)


def range_extent(lo: PrimExpr, hi: PrimExpr) -> PrimExpr:
    """The extent of `[lo, hi)` written as the printer writes it: `lo:lo + e`, or `0:e`."""
    if isinstance(hi, BinOp) and hi.op == "+" and hi.a == lo:
        return hi.b
    if isinstance(lo, IntImm) and lo.value == 0:
        return hi
    if isinstance(lo, IntImm) and isinstance(hi, IntImm):
        return IntImm(hi.value - lo.value, hi.dtype)
    return BinOp("-", hi, lo)


def infer_stage(body: ir.Stmt, buffers) -> int:
    """Stage of a script without `T.func_attr({"stage": ...})`."""
    from ..ir.visit import walk

    kinds = {type(n) for n in walk(body)}
    if ir.SparseIteration in kinds or not ({ir.For, ir.Block, ir.While} & kinds):
        return 1
    if any(isinstance(b, ir.SparseBuffer) for b in buffers):
        return 2
    return 3


# -------------------------------------------------------------------- entry points
def _is_decorator(parser: Parser, node: ast.AST, name: str) -> bool:
    return parser.t_name(node) == name


def parse_source(text: str, filename: str = "<script>") -> ir.PrimFunc | ir.IRModule:
    """Parse script text (as `func.script()` prints it) into a PrimFunc or an IRModule.

    Text that Python's parser or this one cannot walk (an expression nested or chained past
    Python's recursion limit, a NUL byte) is a `FrontendError` too. (On CPython 3.11 a recursion
    error inside `ast.parse` leaves the interpreter's AST depth counter wrong: later `ast.parse`
    calls in that process may fail with a SystemError. Nothing here can repair it.)"""
    try:
        return _parse_source(text, filename)
    except RecursionError:
        raise FrontendError(
            "the script nests or chains expressions too deeply to parse (Python's recursion limit); "
            "split the expression into several statements",
            filename,
        ) from None


def _parse_source(text: str, filename: str) -> ir.PrimFunc | ir.IRModule:
    lines = text.splitlines()
    try:
        tree = pyast.parse(text, filename)
    except SyntaxError as e:
        line = lines[e.lineno - 1] if e.lineno and 0 < e.lineno <= len(lines) else ""
        raise FrontendError(f"syntax error: {e.msg}", filename, e.lineno or 0, (e.offset or 1) - 1, line) from None
    except (ValueError, MemoryError) as e:  # a NUL byte; an expression too large for the parser
        raise FrontendError(f"the script cannot be parsed: {e}", filename) from None
    parser = Parser(filename, lines, 0, 0, {})
    funcs = {}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.ClassDef) and any(_is_decorator(parser, d, "ir_module") for d in node.decorator_list):
            module = {}
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    module[sub.name] = Parser(filename, lines, 0, 0, {}).parse_function(sub)
            return ir.IRModule(FrozenDict(module))
        if isinstance(node, ast.FunctionDef):
            funcs[node.name] = Parser(filename, lines, 0, 0, {}).parse_function(node)
            continue
        raise parser.fail(node, "a script holds `@T.prim_func` functions or one `@T.ir_module` class")
    if not funcs:
        raise FrontendError("no function found in the script", filename)
    if len(funcs) == 1:
        return next(iter(funcs.values()))
    return ir.IRModule(FrozenDict(funcs))


def _source_of(obj) -> tuple[str, list[str], int, int]:
    try:
        lines, first = inspect.getsourcelines(obj)
        filename = inspect.getsourcefile(obj) or "<unknown>"
    except (OSError, TypeError) as e:
        raise FrontendError(f"cannot read the source of {obj!r}: {e}") from None
    raw = "".join(lines)
    dedented = textwrap.dedent(raw)
    first_code = next((ln for ln in lines if ln.strip()), "")
    dedented_first = next((ln for ln in dedented.splitlines() if ln.strip()), "")
    col_offset = len(first_code) - len(first_code.lstrip()) - (len(dedented_first) - len(dedented_first.lstrip()))
    file_lines = linecache.getlines(filename) or lines
    if not linecache.getlines(filename):
        file_lines = [""] * (first - 1) + lines
    return dedented, file_lines, first - 1, col_offset


def _closure_env(fn) -> dict:
    env = dict(fn.__globals__)
    with contextlib.suppress(TypeError, ValueError):
        env.update(inspect.getclosurevars(fn).nonlocals)
    return env


def parse_python_function(fn) -> ir.PrimFunc:
    text, file_lines, line_offset, col_offset = _source_of(fn)
    filename = (file_lines and inspect.getsourcefile(fn)) or "<unknown>"
    tree = pyast.parse(text)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise FrontendError("@T.prim_func decorates a function", filename, line_offset + 1)
    parser = Parser(filename, [ln.rstrip("\n") for ln in file_lines], line_offset, col_offset, _closure_env(fn))
    return parser.parse_function(fdef)


def collect_module(cls) -> ir.IRModule:
    """The `@T.prim_func` functions of a class, as an IRModule keyed by attribute name."""
    funcs = {name: value for name, value in vars(cls).items() if isinstance(value, ir.PrimFunc)}
    if not funcs:
        raise FrontendError(f"@T.ir_module class {cls.__name__} holds no @T.prim_func function")
    return ir.IRModule(FrozenDict(funcs))
