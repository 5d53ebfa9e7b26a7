"""The @T.prim_func frontend: every construct parses to the expected IR, user mistakes are
FrontendErrors with file:line:col and a caret, and the printer's output parses back equal."""

import inspect
import textwrap

import numpy as np
import pytest

import sparsetir_py as sp
from sparsetir_py import ir
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk


@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):  # fmt: skip
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    with T.sp_iter([I, J, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = 0.0
        C[i, k] = C[i, k] + A[i, j] * B[j, k]


def test_csrmm_parses_to_the_expected_ir():
    """The contract's csrmm: four axes, three buffers, one S/R iteration with init."""
    f = csrmm
    assert isinstance(f, ir.PrimFunc) and f.stage == 1
    assert [p.dtype for p in f.params] == ["handle"] * 5 + ["int32"] * 4
    I, J, J_detach, K = f.axes
    assert (I.kind, J.kind, J_detach.kind, K.kind) == ("dense_fixed", "sparse_variable", "dense_fixed", "dense_fixed")
    assert J.parent is I and J.indptr is f.params[3] and J.indices is f.params[4] and J.sorted
    A, B, C = f.buffers
    assert A.axes == (I, J) and B.axes == (J_detach, K) and C.axes == (I, K)
    it = f.body
    assert isinstance(it, ir.SparseIteration)
    assert it.name == "csrmm" and it.kinds == "SRS" and it.axes == (I, J, K)
    i, j, k = it.iter_vars
    assert it.init == ir.BufferStore(C, (i, k), ir.FloatImm(0.0, "float32"))
    expected = ir.BinOp(
        "+",
        ir.BufferLoad(C, (i, k)),
        ir.BinOp("*", ir.BufferLoad(A, (i, j)), ir.BufferLoad(B, (j, k))),
    )
    assert it.body == ir.BufferStore(C, (i, k), expected)


def test_script_round_trip_and_idempotent_printing():
    text = csrmm.script()
    again = sp.from_script(text)
    sp.assert_structural_equal(csrmm, again)
    assert again.script() == text
    compile(text, "<script>", "exec")  # valid Python


def make_scaled(idtype, dtype, factor):
    @T.prim_func
    def scaled(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
        I = T.dense_fixed(m, idtype)
        J = T.sparse_variable(I, (n, nnz), (indptr, indices), idtype)
        A = T.match_sparse_buffer(a, (I, J), dtype)
        B = T.match_sparse_buffer(b, (I, J), dtype)
        with T.sp_iter([I, J], "SS", "scale") as [i, j]:
            B[i, j] = A[i, j] * factor

    return scaled


def test_closure_constants():
    """Numbers and dtype strings captured from the enclosing scope become constants."""
    f = make_scaled("int64", "float64", 2.5)
    I, J = f.axes
    assert I.idtype == J.idtype == "int64"
    assert f.buffers[0].dtype == "float64"
    assert f.body.body.value.b == ir.FloatImm(2.5, "float64")
    sp.assert_structural_equal(f, sp.from_script(f.script()))


STAGE2 = """
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk

@T.prim_func
def lowered(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
            m: T.int32, n: T.int32, feat: T.int32, nnz: T.int32):
    T.func_attr({"stage": 2, "note": "hand written"})
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.dense_fixed(n)
    K = T.dense_fixed(feat)
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (J_detach, K), "float32")
    C = T.match_sparse_buffer(c, (I, K), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32")
    J_indices = T.match_buffer(indices, (nnz,), "int32")
    for i in T.thread_binding(m, thread="blockIdx.x"):
        with T.block("csrmm0"):
            vi = T.axis.spatial(m, i)
            T.reads(J_indptr[vi:vi + 2], A[vi, 0:J_indptr[vi + 1] - J_indptr[vi]])
            T.writes(C[vi, 0:feat])
            T.block_attr({"sparse": True})
            acc = T.alloc_buffer((32,), "float32", scope="local")
            if J_indptr[vi + 1] - J_indptr[vi] == 0:
                for k in T.vectorized(feat):
                    C[vi, k] = T.float32(0)
            else:
                T.evaluate(0)
            for j, k in T.grid(J_indptr[vi + 1] - J_indptr[vi], feat):
                with T.block("csrmm1"):
                    vj, vk = T.axis.remap("RS", [j, k])
                    T.where(vk < feat)
                    T.reads(A[vi, vj], B[J_indices[J_indptr[vi] + vj], vk])
                    T.writes(C[vi, vk])
                    with T.init():
                        C[vi, vk] = T.float32(0)
                    C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[J_indptr[vi] + vj], vk]
            for t in T.unroll(2, 6, annotations={"pragma": 1}):
                acc[t] = T.max(T.min(acc[t], T.float32(1.5)), -T.float32(2))
            for u in T.parallel(4):
                T.atomic_add(C[u, 0], T.cast(u // 2 + u % 2, "float32"))
            for w in T.serial(8):
                acc[w] = T.if_then_else(w >= 4 and not w == 6, T.exp(acc[w]), T.float32("inf"))
            T.syncthreads()
"""

STAGE3 = """
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk

@T.prim_func
def flat(a: T.handle, b: T.handle, m: T.int64, n: T.int64):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (m, n), "float64", layout=T.layout((0, 1)))
    B = T.match_buffer(b, (m * n,), "float64")
    for i in T.parallel(m):
        shared = T.allocate((n,), "float64", "shared")
        for j in T.serial(n):
            shared[j] = A[i, j]
        for j in T.serial(n):
            B[i * n + j] = shared[j] * T.float64(2) - T.float64(-0.5)
"""


@pytest.mark.parametrize("text", [STAGE2, STAGE3], ids=["stage2", "stage3"])
def test_stage2_and_stage3_round_trip(text):
    f = sp.from_script(text)
    printed = f.script()
    g = sp.from_script(printed)
    sp.assert_structural_equal(f, g)
    assert g.script() == printed


def test_stage2_constructs():
    f = sp.from_script(STAGE2)
    assert f.stage == 2 and f.attrs["note"] == "hand written"
    outer = f.body.stmts[0] if isinstance(f.body, ir.SeqStmt) else f.body
    assert isinstance(outer, ir.For) and outer.kind == "thread_binding" and outer.thread == "blockIdx.x"
    block = outer.body
    assert isinstance(block, ir.Block) and block.name == "csrmm0"
    assert block.alloc_buffers[0].scope == "local"
    assert block.annotations["sparse"] is True
    kinds = [type(s).__name__ for s in block.body.stmts]
    assert kinds == ["IfThenElse", "For", "For", "For", "For", "Evaluate"]
    grid_j = block.body.stmts[1]
    grid_k = grid_j.body
    inner = grid_k.body
    assert isinstance(grid_k, ir.For) and inner.name == "csrmm1"
    assert [iv.kind for iv in inner.iter_vars] == ["R", "S"]
    assert inner.iter_vars[0].value is grid_j.loop_var and inner.iter_vars[0].extent == grid_j.extent
    assert inner.predicate is not None and inner.init is not None
    unrolled = block.body.stmts[2]
    assert unrolled.kind == "unrolled" and unrolled.min == ir.IntImm(2) and unrolled.extent == ir.IntImm(4)
    region = block.reads[0].region[0]
    assert region.extent == ir.IntImm(2)


def test_stage3_layout_and_allocate():
    f = sp.from_script(STAGE3)
    A, B = f.buffers
    assert A.layout == sp.Layout((0, 1)) and B.layout.is_row_major()
    loop = f.body
    assert isinstance(loop.body, ir.Allocate) and loop.body.buffer.scope == "shared"


def test_ir_module_round_trip():
    mod = ir.IRModule.from_any({"main": csrmm, "scaled": make_scaled("int32", "float32", 3.0)})
    text = mod.script()
    assert "@T.ir_module" in text
    back = sp.from_script(text)
    assert isinstance(back, ir.IRModule) and list(back) == ["main", "scaled"]
    sp.assert_structural_equal(mod, back)


def test_ir_module_decorator():
    @T.ir_module
    class Module:
        main = csrmm

    assert isinstance(Module, ir.IRModule) and Module["main"] is csrmm


# ---------------------------------------------------------------- structural equality
def test_structural_equal_ignores_names():
    renamed = csrmm.script().replace("J_detach", "Cols").replace("[i, j, k]", "[x, y, z]")
    renamed = renamed.replace("C[i, k]", "C[x, z]").replace("A[i, j]", "A[x, y]").replace("B[j, k]", "B[y, z]")
    assert "Cols" in renamed and "x, y, z" in renamed
    assert sp.structural_equal(csrmm, sp.from_script(renamed))


def test_structural_equal_sees_swapped_variables():
    swapped = (
        csrmm.script()
        .replace("B[j, k]", "B[k, j]")
        .replace("J_detach = T.dense_fixed(n)", "J_detach = T.dense_fixed(feat)")
    )
    swapped = swapped.replace("K = T.dense_fixed(feat)", "K = T.dense_fixed(n)")
    other = sp.from_script(swapped)
    assert not sp.structural_equal(csrmm, other)


@pytest.mark.parametrize(
    "old,new,where",
    [
        ('"SRS", "csrmm"', '"SRS", "other"', "name"),
        ("C[i, k] = T.float32(0.0)", "C[i, k] = T.float32(1.0)", "value"),
        ('(indptr, indices), "int32")', '(indptr, indices), "int64")', "idtype"),
        ("A[i, j] * B[j, k]", "B[j, k] * A[i, j]", "buffer"),
    ],
)
def test_assert_structural_equal_names_the_difference(old, new, where):
    text = csrmm.script()
    assert old in text
    other = sp.from_script(text.replace(old, new))
    assert not sp.structural_equal(csrmm, other)
    with pytest.raises(AssertionError, match="root"):
        sp.assert_structural_equal(csrmm, other)


def test_structural_equal_uses_bijection():
    """Two distinct variables on one side cannot both map to one variable on the other."""
    x, y = ir.Var("x"), ir.Var("y")
    assert sp.structural_equal(ir.BinOp("+", x, y), ir.BinOp("+", y, x))
    assert not sp.structural_equal(ir.BinOp("+", x, y), ir.BinOp("+", x, x))
    assert not sp.structural_equal(ir.BinOp("+", x, x), ir.BinOp("+", x, y))


# ---------------------------------------------------------------- errors
def parse_error(source: str) -> sp.FrontendError:
    with pytest.raises(sp.FrontendError) as info:
        sp.from_script(textwrap.dedent(source))
    return info.value


HEADER = """
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk

@T.prim_func
def f(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")
    B = T.match_sparse_buffer(b, (I,), "float32")
"""


@pytest.mark.parametrize(
    "body,message,snippet",
    [
        ("    try:\n        pass\n    finally:\n        pass\n", "unsupported construct `Try`", "try:"),
        ('    with T.sp_iter([I], "S", "s") as [i]:\n        B[i] = q\n', "unknown name `q`", "q"),
        ("    K = T.dense_fixed()\n", "wrong arguments to T.dense_fixed", "T.dense_fixed()"),
        (
            '    with T.sp_iter([I, J], "S", "s") as [i, j]:\n        B[i] = 0.0\n',
            'S/R string "S" has 1 letters',
            '"S"',
        ),
        (
            '    with T.sp_iter([I, J], "SX", "s") as [i, j]:\n        B[i] = 0.0\n',
            'may only contain "S" and "R"',
            '"SX"',
        ),
        ('    with T.sp_iter([I, J], "SR", "s") as [i]:\n        B[i] = 0.0\n', "`as` names 1", "[i]"),
        (
            '    with T.sp_iter([I], "S", "s") as [i]:\n        B[i, i] = 0.0\n',
            "has 1 dimensions but is indexed with 2",
            "B[i, i]",
        ),
        ('    with T.sp_iter([I], "S", "s") as [i]:\n        B[i] = I\n', "is an axis, not a value", "I"),
        (
            '    with T.sp_iter([I], "S", "s") as [i]:\n        B[i] = B[i] / 2 + T.nosuch(i)\n',
            "unknown construct `T.nosuch`",
            "T.nosuch(i)",
        ),
        ('    with T.sp_iter([I], "S", "s") as [i]:\n        B[i] = i / 2\n', "use `//`", "i / 2"),
        ('    with T.sp_iter([I], "S", "s") as [i]:\n        B[i] = T.exp(i, i)\n', "takes 1 arguments", "T.exp(i, i)"),
        ("    x = 3\n", "names are declarations", "x = 3"),
        ('    with T.sp_iter([J], "R", "s") as [j]:\n        B[0] = A[0, j]\n', "but not its parent `I`", "[J]"),
        (
            '    with T.sp_iter([J, I], "RS", "s") as [j, i]:\n        B[i] = A[i, j]\n',
            "before its parent `I`",
            "[J, I]",
        ),
        ('    C = T.match_sparse_buffer(b, (J,), "float32")\n', "must come right after its parent `I`", "(J,)"),
        ("    with T.init():\n        B[0] = 0.0\n", "directly inside", "with T.init()"),
    ],
)
def test_frontend_errors_point_at_the_source(body, message, snippet):
    err = parse_error(HEADER + body)
    text = str(err)
    assert message in text
    assert isinstance(err, sp.SparseTIRError)
    lines = text.splitlines()
    assert lines[0].startswith("<script>:")
    line_no = int(lines[0].split(":")[1])
    source_line = (HEADER + body).splitlines()[line_no - 1]
    assert snippet in source_line
    assert lines[1].strip() == source_line.strip()
    col = int(lines[0].split(":")[2]) - 1
    assert lines[2].index("^") - 4 == col  # the caret sits under the reported column
    assert source_line[col:].startswith(snippet[:1])


def test_decorated_function_error_reports_the_file_and_line():
    with pytest.raises(sp.FrontendError) as info:

        @T.prim_func
        def bad(a: T.handle, m: T.int32):
            I = T.dense_fixed(m)
            A = T.match_sparse_buffer(a, (I,), "float32")
            with T.sp_iter([I], "SS", "bad") as [i]:
                A[i] = 0.0

    err = info.value
    assert err.filename == __file__
    src, start = inspect.getsourcelines(test_decorated_function_error_reports_the_file_and_line)
    offending = next(k for k, line in enumerate(src) if '"SS", "bad"' in line)
    assert err.line == start + offending
    assert '"SS"' in str(err).splitlines()[1]


def test_uncapturable_closure_object_is_rejected():
    table = {"k": 1}
    with pytest.raises(sp.FrontendError, match="only numbers, strings and booleans"):

        @T.prim_func
        def bad(a: T.handle, m: T.int32):
            I = T.dense_fixed(m)
            A = T.match_sparse_buffer(a, (I,), "float32")
            with T.sp_iter([I], "S", "bad") as [i]:
                A[i] = table


def test_syntax_error_is_a_frontend_error():
    err = parse_error("def f(:\n    pass\n")
    assert "syntax error" in str(err)


def test_builtins_cannot_be_called_directly():
    with pytest.raises(sp.SparseTIRError, match="only be used inside"):
        T.dense_fixed(3)


LET = """
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk

@T.prim_func
def scaled(a: T.handle, b: T.handle, n: T.int32):
    T.func_attr({"stage": 3})
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for i in T.serial(n):
        x: T.float32 = A[i] * T.float32(2)
        y: T.int64 = T.cast(i, "int64") + T.int64(1)
        B[i] = x + T.cast(y, "float32")
"""


def test_let_statement_round_trip_verify_and_run():
    import numpy as np

    f = sp.from_script(LET)
    lets = [n for n in sp.ir.visit.walk(f.body) if isinstance(n, ir.LetStmt)]
    assert [v.var.dtype for v in lets] == ["float32", "int64"]
    sp.verify(f)
    sp.assert_structural_equal(f, sp.from_script(f.script()))
    a = np.arange(5, dtype=np.float32)
    b = np.zeros(5, np.float32)
    sp.interpret(f, a=a, b=b, n=5)
    np.testing.assert_array_equal(b, a * 2 + np.arange(1, 6))
    b2 = np.zeros(5, np.float32)
    sp.build(f)(a=a, b=b2, n=5)
    np.testing.assert_array_equal(b2, b)


def test_intrinsic_registered_after_import_parses_and_round_trips():
    from sparsetir_py.ir.op import INTRINSICS, register_intrinsic
    from sparsetir_py.script import builtins as B

    register_intrinsic("late_softsign", 1)
    try:
        text = """
from sparsetir_py import script as T
from sparsetir_py.ir.visit import walk


@T.prim_func
def f(x: T.handle, y: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (n,), "float32")
    for i in T.serial(n):
        with T.block("b"):
            vi = T.axis.spatial(n, i)
            Y[vi] = T.late_softsign(X[vi])
"""
        f = sp.from_script(text)
        assert "T.late_softsign(X[vi])" in f.script()
        sp.assert_structural_equal(f, sp.from_script(f.script()))
        assert callable(T.late_softsign)
    finally:
        INTRINSICS.pop("late_softsign", None)
        B.INTRINSIC_STUBS.pop("late_softsign", None)
    with pytest.raises(AttributeError):
        T.late_softsign


MISSPELT = """
@T.prim_func
def f(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_varaible(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "float32")
"""


@pytest.mark.parametrize(
    ("bad", "good", "line"),
    [
        ("T.sparse_varaible(", "sparse_variable", 5),  # a declaration: before, "unknown name `J`" a line later
        ('T.match_sparse_bufer(a, (I, J), "float32")', "match_sparse_buffer", 6),
        ("m: T.int32,", "int32", 3),  # an annotation
    ],
)
def test_misspelt_namespace_names_fail_at_their_own_line(bad, good, line):
    text = MISPELT_VARIANTS[bad]
    with pytest.raises(sp.FrontendError) as info:
        sp.from_script(text)
    message = str(info.value)
    assert f"did you mean `T.{good}`" in message
    assert f":{line}:" in message.splitlines()[0]


MISPELT_VARIANTS = {
    "T.sparse_varaible(": MISSPELT,
    'T.match_sparse_bufer(a, (I, J), "float32")': MISSPELT.replace("sparse_varaible", "sparse_variable").replace(
        "match_sparse_buffer", "match_sparse_bufer"
    ),
    "m: T.int32,": MISSPELT.replace("sparse_varaible", "sparse_variable").replace("m: T.int32", "m: T.in32"),
}


def test_misspelt_name_in_a_body_expression():
    text = MISPELT_VARIANTS["T.sparse_varaible("].replace("sparse_varaible", "sparse_variable") + (
        '    with T.sp_iter([I, J], "SS", "e") as [i, j]:\n        A[i, j] = T.exq(A[i, j])\n'
    )
    with pytest.raises(sp.FrontendError, match=r"unknown construct `T.exq`.*did you mean `T.exp`"):
        sp.from_script(text)


def test_unknown_name_without_a_close_match_has_no_suggestion():
    text = MISSPELT.replace("T.sparse_varaible", "T.zzzzzzzzzz")
    with pytest.raises(sp.FrontendError, match=r"the script namespace has no `zzzzzzzzzz`\n"):
        sp.from_script(text)


def test_intrinsic_registered_after_import_still_parses():
    from sparsetir_py.ir.op import INTRINSICS, register_intrinsic

    if "late_square_t" not in INTRINSICS:
        register_intrinsic("late_square_t", 1)
    text = MISPELT_VARIANTS["T.sparse_varaible("].replace("sparse_varaible", "sparse_variable") + (
        '    with T.sp_iter([I, J], "SS", "e") as [i, j]:\n        A[i, j] = T.late_square_t(A[i, j])\n'
    )
    assert "late_square_t" in sp.from_script(text).script()


LOWERED_CSRMM = sp.lower_sparse_iter(csrmm)["main"].script()


@pytest.mark.parametrize(
    ("text", "bad", "good"),
    [
        (HEADER.replace("@T.prim_func", "@T.prim_fnuc"), "T.prim_fnuc", "T.prim_func"),  # a decorator
        (HEADER.replace('(I,), "float32"', "(I,), T.flaot32"), "T.flaot32", "T.float32"),  # where a constant goes
        (HEADER.replace('(I,), "float32"', "(I,), dtype=T.flaot32"), "T.flaot32", "T.float32"),  # a keyword
        (HEADER + '    with T.sp_itr([I], "S", "s") as [i]:\n        B[i] = 0.0\n', "T.sp_itr", "T.sp_iter"),
        (HEADER + '    with T.sp_iter([I], "S", "s") as [i]:\n        B[i] = T.flaot32\n', "T.flaot32", "T.float32"),
        (HEADER + '    with T.sp_iter([I], "S", "s") as [i]:\n        T.evalute(B[i])\n', "T.evalute", "T.evaluate"),
        (LOWERED_CSRMM.replace("T.axis.spatial", "T.axis.spatail", 1), "T.axis.spatail", "T.axis.spatial"),
        (LOWERED_CSRMM.replace("T.serial", "T.serail", 1), "T.serail", "T.serial"),
        (LOWERED_CSRMM.replace("T.reads", "T.raeds", 1), "T.raeds", "T.reads"),
    ],
)
def test_misspelt_names_fail_at_their_own_column(text, bad, good):
    """Wherever a misspelt `T.<name>` stands (decorator, argument, statement, expression, a
    `T.axis.*` chain), the error points at it with a caret and suggests the right name."""
    err = parse_error(text)
    head, source, caret = str(err).splitlines()[:3]
    assert f"unknown construct `{bad}`" in head and f"did you mean `{good}`" in head
    line, col = (int(x) for x in head.split(":")[1:3])
    assert text.splitlines()[line - 1].strip() == source.strip()
    assert text.splitlines()[line - 1][col - 1 :].startswith(bad)
    assert caret.index("^") - 4 == col - 1 and caret.count("^") == len(bad)


def test_misspelt_name_is_reported_before_later_errors():
    """Names are checked first, in source order: the misspelling, not the later unknown `J` that
    the skipped declaration would cause, nor the unsupported `try` below it."""
    text = MISSPELT + "    try:\n        pass\n    finally:\n        pass\n"
    with pytest.raises(sp.FrontendError, match=r"^<script>:5:9: error: unknown construct `T.sparse_varaible`"):
        sp.from_script(text)


def test_misspelt_name_in_a_decorated_function_reports_the_file_line_and_column():
    with pytest.raises(sp.FrontendError) as info:

        @T.prim_func
        def bad(a: T.handle, m: T.int32):
            I = T.dense_fixed(m)
            A = T.match_sparse_buffer(a, (I,), "float32")
            with T.sp_iter([I], "S", "bad") as [i]:
                A[i] = T.sqrtt(A[i])

    err = info.value
    assert err.filename == __file__
    src, start = inspect.getsourcelines(test_misspelt_name_in_a_decorated_function_reports_the_file_line_and_column)
    offending = next(k for k, line in enumerate(src) if "T.sqrtt(" in line)
    assert err.line == start + offending
    assert err.col == src[offending].index("T.sqrtt")
    assert "did you mean `T.sqrt`" in str(err)


def test_misspelt_name_under_another_alias_of_the_namespace():
    """The namespace imported under another name is checked the same, and named as imported."""
    import sparsetir_py.script as S

    with pytest.raises(sp.FrontendError, match=r"unknown construct `S.dense_fxed`.*did you mean `S.dense_fixed`"):

        @S.prim_func
        def bad(a: S.handle, m: S.int32):
            I = S.dense_fxed(m)
            A = S.match_sparse_buffer(a, (I,), "float32")
            with S.sp_iter([I], "S", "bad") as [i]:
                A[i] = 0.0


LIMITS = """
@T.prim_func
def rowmax(a: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.dense_fixed(m)
    J = T.sparse_variable(I, (n, nnz), (indptr, indices), "int32")
    A = T.match_sparse_buffer(a, (I, J), "DTYPE")
    C = T.match_sparse_buffer(c, (I,), "DTYPE")
    with T.sp_iter([I, J], "SR", "rowmax") as [i, j]:
        with T.init():
            C[i] = T.min_value("DTYPE")
        C[i] = T.max(C[i], A[i, j])
"""


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_min_value_and_max_value(dtype):
    """`T.min_value(dtype)` / `T.max_value(dtype)` (SparseTIR's softmax uses them) are the extreme
    finite values, printed as constants that parse back equal; a row max starts from min_value."""
    import scipy.sparse

    f = sp.from_script(LIMITS.replace("DTYPE", dtype))
    assert sp.structural_equal(sp.from_script(f.script()), f)
    info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
    g = sp.from_script(LIMITS.replace("DTYPE", dtype).replace("T.min_value", "T.max_value"))
    inits = [
        n.value
        for func in (f, g)
        for n in walk(func.body)
        if isinstance(n, ir.BufferStore) and isinstance(n.value, ir.IntImm | ir.FloatImm)
    ]
    assert [x.value for x in inits] == [info.min, info.max]
    A = scipy.sparse.random(7, 5, density=0.4, format="csr", random_state=0, dtype=np.float64)
    A.data = (A.data * 100).astype(dtype)
    A.data[A.indptr[3] : A.indptr[4]] = 0  # row 3 stores nothing
    A.eliminate_zeros()
    want = np.array([A.getrow(r).data.max() if A.getrow(r).nnz else info.min for r in range(7)], dtype=dtype)
    c = np.zeros(7, dtype)
    sp.interpret(f, a=A.data, c=c, indptr=A.indptr, indices=A.indices, m=7, n=5, nnz=A.nnz)
    np.testing.assert_array_equal(c, want)
