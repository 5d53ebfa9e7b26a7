"""Tests of `sparsetir_py.ir.verify`: three valid functions (one per stage), then one
`test_verify_fail_<rule>` per rule, each breaking exactly that rule in otherwise valid IR."""

from __future__ import annotations

import re

import pytest

from sparsetir_py.errors import VerifyError
from sparsetir_py.ir import (
    DENSE_FIXED,
    DENSE_VARIABLE,
    SPARSE_FIXED,
    SPARSE_VARIABLE,
    Allocate,
    AtomicAdd,
    AttachedAxis,
    Axis,
    BinOp,
    Block,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    FlatBuffer,
    FloatImm,
    For,
    FrozenDict,
    FusedAxis,
    IfThenElse,
    IntImm,
    IRModule,
    IterVar,
    Layout,
    PrimFunc,
    Range,
    Select,
    SparseBuffer,
    SparseIteration,
    UnaryOp,
    Var,
    as_expr,
    seq,
)
from sparsetir_py.ir import verify as V
from sparsetir_py.ir.verify import (
    AxisForestError,
    AxisStructureError,
    BlockError,
    BlockIsolationError,
    BufferArityError,
    BufferAxisOrderError,
    BufferDeclarationError,
    BufferLayoutError,
    DtypeError,
    LoopExtentError,
    RebindError,
    ReductionWriteError,
    ScopeError,
    SparseIterationError,
    StageError,
    ThreadBindingError,
    UndeclaredAxisError,
    UndeclaredBufferError,
    UndefinedVariableError,
    check_buffer_axes,
    check_iteration_axes,
    verify,
)

# ----------------------------------------------------------------------------------------------
# Builders


def f32(x: float) -> FloatImm:
    return FloatImm(x, "float32")


def i32(x: int) -> IntImm:
    return IntImm(x, "int32")


def ld(buf, *idx) -> BufferLoad:
    return BufferLoad(buf, tuple(idx))


def st(buf, idx, value) -> BufferStore:
    return BufferStore(buf, tuple(idx), value)


def serial(var, extent, body, kind="serial", thread=None, lo=None) -> For:
    return For(var, lo if lo is not None else i32(0), extent, kind, body, thread)


def region(buf, *ranges) -> BufferRegion:
    return BufferRegion(buf, tuple(Range(as_expr(lo), as_expr(ext)) for lo, ext in ranges))


class Csrmm1:
    """csrmm in Stage I (the DESIGN example). Tests replace pieces, then call `func()`.

    `axis_fields` changes fields of one of the four axes where it is built, so every buffer and
    iteration uses the changed axis: `Csrmm1(J=lambda s: {"indptr": None})`.
    """

    def __init__(self, **axis_fields):
        self.a, self.b, self.c = Var("a", "handle"), Var("b", "handle"), Var("c", "handle")
        self.indptr, self.indices = Var("indptr", "handle"), Var("indices", "handle")
        self.m, self.n, self.feat, self.nnz = Var("m"), Var("n"), Var("feat"), Var("nnz")

        def axis(name, kind, length, **fields):
            fields = {"kind": kind, "length": length, **fields}
            if name in axis_fields:
                fields.update(axis_fields[name](self))
            return Axis(name, **fields)

        self.I = axis("I", DENSE_FIXED, self.m)
        self.J = axis(
            "J", SPARSE_VARIABLE, self.n, parent=self.I, nnz=self.nnz, indptr=self.indptr, indices=self.indices
        )
        self.J_detach = axis("J_detach", DENSE_FIXED, self.n)
        self.K = axis("K", DENSE_FIXED, self.feat)
        self.A = SparseBuffer("A", (self.I, self.J), "float32", self.a)
        self.B = SparseBuffer("B", (self.J_detach, self.K), "float32", self.b)
        self.C = SparseBuffer("C", (self.I, self.K), "float32", self.c)
        self.i, self.j, self.k = Var("i"), Var("j"), Var("k")
        self.params = [self.a, self.b, self.c, self.indptr, self.indices, self.m, self.n, self.feat, self.nnz]
        self.axes = [self.I, self.J, self.J_detach, self.K]
        self.buffers = [self.A, self.B, self.C]
        i, j, k, A, B, C = self.i, self.j, self.k, self.A, self.B, self.C
        self.init = st(C, (i, k), f32(0.0))
        self.body = st(C, (i, k), ld(C, i, k) + ld(A, i, j) * ld(B, j, k))
        self.iter_axes = (self.I, self.J, self.K)
        self.kinds = "SRS"
        self.iter_vars = (i, j, k)
        self.stage = 1

    def iteration(self) -> SparseIteration:
        return SparseIteration("csrmm", self.iter_axes, self.kinds, self.iter_vars, self.body, self.init)

    def func(self, body=None) -> PrimFunc:
        return PrimFunc(
            "csrmm",
            tuple(self.params),
            tuple(self.axes),
            tuple(self.buffers),
            body if body is not None else self.iteration(),
            FrozenDict({"stage": self.stage}),
        )


class Csrmm2(Csrmm1):
    """csrmm after lower_sparse_iter (Stage II), as in DESIGN.md section 1."""

    def __init__(self, indices_dtype="int32", **axis_fields):
        super().__init__(**axis_fields)
        self.stage = 2
        self.J_indptr = FlatBuffer("J_indptr", (self.m + 1,), "int32", self.indptr)
        self.J_indices = SparseBuffer("J_indices", (self.I, self.J), indices_dtype, self.indices)
        self.buffers = [self.A, self.B, self.C, self.J_indptr, self.J_indices]
        self.i_kind, self.i_thread = "serial", None
        self.vi, self.vj, self.vk, self.k0 = Var("vi"), Var("vj"), Var("vk"), Var("k0")
        vi, vj, vk, A, B, C = self.vi, self.vj, self.vk, self.A, self.B, self.C
        self.row_len = ld(self.J_indptr, vi + 1) - ld(self.J_indptr, vi)
        self.iv_vi = IterVar(vi, self.m, "S", self.i)
        self.iv_vj = IterVar(vj, self.row_len, "R", self.j)
        self.iv_vk = IterVar(vk, self.feat, "S", self.k)
        self.init1 = st(C, (vi, vk), f32(0.0))
        col = ld(self.J_indices, vi, vj)
        self.update = st(C, (vi, vk), ld(C, vi, vk) + ld(A, vi, vj) * ld(B, col, vk))
        self.reads1 = (
            region(A, (vi, 1), (vj, 1)),
            region(B, (col, 1), (vk, 1)),
            region(self.J_indices, (vi, 1), (vj, 1)),
        )
        self.writes1 = (region(C, (vi, 1), (vk, 1)),)
        self.block1_name, self.block0_name = "csrmm1", "csrmm0"
        self.empty_row = IfThenElse(
            BinOp("==", self.row_len, i32(0)), serial(self.k0, self.feat, st(C, (vi, self.k0), f32(0.0)))
        )

    def block1(self) -> Block:
        return Block(self.block1_name, (self.iv_vj, self.iv_vk), self.reads1, self.writes1, self.update, self.init1)

    def block0(self) -> Block:
        inner = serial(self.j, self.row_len, serial(self.k, self.feat, self.block1()))
        writes = (region(self.C, (self.vi, 1), (i32(0), self.feat)),)
        return Block(self.block0_name, (self.iv_vi,), (), writes, seq(self.empty_row, inner))

    def func(self, body=None) -> PrimFunc:
        if body is None:
            body = serial(self.i, self.m, self.block0(), self.i_kind, self.i_thread)
        return super().func(body)


class Csrmm3(Csrmm1):
    """csrmm after lower_sparse_buffer (Stage III): flat buffers, explicit offsets, a local accumulator."""

    def __init__(self, **axis_fields):
        super().__init__(**axis_fields)
        self.stage = 3
        m, n, feat, nnz = self.m, self.n, self.feat, self.nnz
        self.A = FlatBuffer("A", (nnz,), "float32", self.a)
        self.B = FlatBuffer("B", (n, feat), "float32", self.b)
        self.C = FlatBuffer("C", (m, feat), "float32", self.c)
        self.J_indptr = FlatBuffer("J_indptr", (m + 1,), "int32", self.indptr)
        self.J_indices = FlatBuffer("J_indices", (nnz,), "int32", self.indices)
        self.acc = FlatBuffer("acc", (i32(1),), "float32", scope="local")
        self.buffers = [self.A, self.B, self.C, self.J_indptr, self.J_indices]
        i, j, k = self.i, self.j, self.k
        start = ld(self.J_indptr, i)
        pos = start + j
        self.accumulate = st(
            self.acc, (i32(0),), ld(self.acc, i32(0)) + ld(self.A, pos) * ld(self.B, ld(self.J_indices, pos) * feat + k)
        )
        self.write_back = st(self.C, (i * feat + k,), ld(self.acc, i32(0)))
        self.i_kind = "parallel"

    def func(self, body=None) -> PrimFunc:
        if body is None:
            i, j, k = self.i, self.j, self.k
            row_len = ld(self.J_indptr, i + 1) - ld(self.J_indptr, i)
            reduce = seq(
                st(self.acc, (i32(0),), f32(0.0)),
                serial(j, row_len, self.accumulate),
                self.write_back,
            )
            body = serial(i, self.m, serial(k, self.feat, Allocate(self.acc, reduce)), self.i_kind)
        return super().func(body)


def ell_axes(s: Csrmm1):
    """An ELL-style sparse_fixed axis under I and a dense_variable axis under I, added to `s`."""
    cols = Var("ell_indices", "handle")
    ptr = Var("dv_indptr", "handle")
    s.params += [cols, ptr]
    J_ell = Axis("J_ell", SPARSE_FIXED, s.n, s.I, nnz_cols=i32(4), indices=cols)
    J_dv = Axis("J_dv", DENSE_VARIABLE, s.n, s.I, nnz=s.nnz, indptr=ptr)
    s.axes += [J_ell, J_dv]
    return J_ell, J_dv


# ----------------------------------------------------------------------------------------------
# Valid functions


def test_verify_stage1_csrmm():
    verify(Csrmm1().func())


def test_verify_stage2_csrmm():
    verify(Csrmm2().func())


def test_verify_stage2_thread_bound():
    s = Csrmm2()
    s.i_kind, s.i_thread = "thread_binding", "blockIdx.x"
    verify(s.func())


def test_verify_stage3_csrmm():
    verify(Csrmm3().func())


def test_verify_stage3_multi_index_flat_buffer():
    s = Csrmm3()
    s.write_back = st(s.C, (s.i, s.k), ld(s.acc, i32(0)))
    verify(s.func())


def test_verify_module_checks_every_function():
    good = IRModule(FrozenDict({"one": Csrmm1().func(), "two": Csrmm2().func(), "three": Csrmm3().func()}))
    verify(good)
    s = Csrmm1()
    s.kinds = "SRX"
    bad = good.with_function("bad", s.func())
    with pytest.raises(SparseIterationError):
        verify(bad)


def test_verify_rejects_non_function():
    with pytest.raises(TypeError, match="PrimFunc or an IRModule"):
        verify("csrmm")


def test_verify_stage1_more_axis_kinds():
    """sparse_fixed (ELL), dense_variable, column sums with an R iterator outside an S one."""
    s = Csrmm1()
    J_ell, J_dv = ell_axes(s)
    ell_data, dv_data = Var("e", "handle"), Var("d", "handle")
    s.params += [ell_data, dv_data]
    E = SparseBuffer("E", (s.I, J_ell), "float32", ell_data)
    D = SparseBuffer("D", (s.I, J_dv), "float32", dv_data)
    colsum = SparseBuffer("colsum", (s.J_detach,), "float32")
    s.buffers += [E, D, colsum]
    i2, j2 = Var("i2"), Var("j2")
    sums = SparseIteration("colsum", (s.I, s.J), "RS", (i2, j2), st(colsum, (j2,), ld(colsum, j2) + ld(s.A, i2, j2)))
    i3, j3 = Var("i3"), Var("j3")
    ell = SparseIteration("ell", (s.I, J_ell), "SS", (i3, j3), st(E, (i3, j3), ld(E, i3, j3) * f32(2.0)))
    i4, j4 = Var("i4"), Var("j4")
    dv = SparseIteration("dv", (s.I, J_dv), "SS", (i4, j4), st(D, (i4, j4), f32(1.0)))
    verify(s.func(seq(s.iteration(), sums, ell, dv)))


def test_verify_stage1_fused_attached_nested():
    s = Csrmm1()
    i, j, k = s.i, s.j, s.k
    # T.fuse(I, J): one loop over the stored points of A.
    s.iter_axes = (FusedAxis((s.I, s.J), 0), FusedAxis((s.I, s.J), 1), s.K)
    s.kinds, s.init = "SSS", None
    s.body = st(s.C, (i, k), ld(s.C, i, k) + ld(s.A, i, j) * ld(s.B, j, k))
    fused = s.iteration()
    # A nested iteration: rows outside, the row's nonzeros inside.
    i2, j2 = Var("i2"), Var("j2")
    inner = SparseIteration("inner", (s.J,), "S", (j2,), st(s.A, (i2, j2), ld(s.A, i2, j2) * f32(2.0)))
    outer = SparseIteration("outer", (s.I,), "S", (i2,), inner)
    # T.attach: hyperedge nodes H (under root E) iterated with the coordinate of J as row.
    hptr, hidx, hl = Var("hptr", "handle"), Var("hidx", "handle"), Var("hl")
    s.params += [hptr, hidx, hl]
    E = Axis("E", DENSE_FIXED, s.n)
    H = Axis("H", SPARSE_VARIABLE, s.m, E, nnz=hl, indptr=hptr, indices=hidx)
    s.axes += [E, H]
    i3, j3, h3 = Var("i3"), Var("j3"), Var("h3")
    attached = SparseIteration(
        "attached",
        (s.I, s.J, AttachedAxis(H, s.J)),
        "SRR",
        (i3, j3, h3),
        st(s.C, (i3, i32(0)), ld(s.C, i3, i32(0)) + ld(s.A, i3, j3)),
    )
    verify(s.func(seq(fused, outer, attached)))


def test_verify_stage1_fused_spatial_then_reduction():
    """T.fuse(I, J) of SpMM, kinds "SR": a spatial prefix then reduction members is accepted
    (the nonzero split: one reduction loop over the stored points), with and without an init."""
    s = Csrmm1()
    s.iter_axes = (FusedAxis((s.I, s.J), 0), FusedAxis((s.I, s.J), 1), s.K)
    verify(s.func())
    s.init = None
    verify(s.func())


def test_check_buffer_axes_accepts_fixed_axis_after_prefix():
    s = Csrmm1()
    J_ell, _ = ell_axes(s)
    check_buffer_axes("E", (s.K, s.I, J_ell))
    check_buffer_axes("A", (s.I, s.J, s.K))


def test_check_iteration_axes_standalone():
    s = Csrmm1()
    check_iteration_axes("inner", (s.J, s.K), "RS", 2, {s.I})
    with pytest.raises(
        SparseIterationError, match=r"^sparse iteration `inner` iterates axis `J` but not its parent `I`"
    ):
        check_iteration_axes("inner", (s.J, s.K), "RS", 2, set())


def test_check_buffer_axes_standalone_message():
    s = Csrmm1()
    with pytest.raises(
        BufferAxisOrderError,
        match=r"^buffer `A2`: axis `J` must come right after its parent `I`, but comes first; list `I` before it$",
    ):
        check_buffer_axes("A2", (s.J, s.I))


def test_verify_message_names_function_and_axis():
    s = Csrmm1(J=lambda s: {"indptr": None})
    expected = "in `csrmm`: axis `J` is sparse_variable but has no indptr"
    with pytest.raises(AxisStructureError, match=f"^{re.escape(expected)}$"):
        verify(s.func())


def test_every_rule_is_a_verify_error_with_a_failing_test():
    names = [n for n in V.__all__ if n.endswith("Error")]
    assert len(names) >= 15
    for n in names:
        cls = getattr(V, n)
        assert issubclass(cls, VerifyError), n
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", n.removesuffix("Error")).lower()
        assert f"test_verify_fail_{snake}" in globals(), f"no test for {n}"


# ----------------------------------------------------------------------------------------------
# One test per rule. Each case breaks exactly that rule.


def _stage_attr():
    s = Csrmm1()
    s.stage = 4
    return s.func(), r'attrs\["stage"\] is 4'


def _stage_loop_in_stage1():
    s = Csrmm1()
    return s.func(serial(Var("x"), s.m, s.iteration())), "Stage I function has loop `x`"


def _stage_iteration_in_stage2():
    s = Csrmm1()
    s.stage = 2
    return s.func(), "Stage 2 function has sparse iteration `csrmm`"


def _stage_sparse_buffer_in_stage3():
    s = Csrmm2()
    s.stage = 3
    return s.func(), "sparse buffer `C` is written by block `csrmm0` in a Stage III function"


@pytest.mark.parametrize(
    "case", [_stage_attr, _stage_loop_in_stage1, _stage_iteration_in_stage2, _stage_sparse_buffer_in_stage3]
)
def test_verify_fail_stage(case):
    func, msg = case()
    with pytest.raises(StageError, match=msg):
        verify(func)


def test_verify_fail_stage_block_in_stage1():
    s = Csrmm1()
    blk = Block("b", (), (), (), s.iteration())
    with pytest.raises(StageError, match="Stage I function has block `b`"):
        verify(s.func(blk))


def _forest_dense_fixed_with_parent():
    s = Csrmm1(J_detach=lambda s: {"parent": s.I})
    return s, "axis `J_detach` is dense_fixed but has parent `I`"


def _forest_rootless_sparse():
    s = Csrmm1(J=lambda s: {"parent": None})
    return s, "axis `J` is sparse_variable but has no parent"


def _forest_parent_after_child():
    s = Csrmm1()
    s.axes = [s.J, s.I, s.J_detach, s.K]
    return s, "parent `I` of axis `J` is declared after it"


def _forest_cycle():
    s = Csrmm1()
    X = Axis("X", SPARSE_VARIABLE, s.n, s.I, nnz=s.nnz, indptr=s.indptr, indices=s.indices)
    Y = Axis("Y", SPARSE_VARIABLE, s.n, X, nnz=s.nnz, indptr=s.indptr, indices=s.indices)
    object.__setattr__(X, "parent", Y)  # only a hand-built IR can do this
    s.axes += [X, Y]
    return s, "form a cycle"


def _forest_declared_twice():
    s = Csrmm1()
    s.axes.append(s.K)
    return s, "axis `K` is declared twice"


@pytest.mark.parametrize(
    "case",
    [
        _forest_dense_fixed_with_parent,
        _forest_rootless_sparse,
        _forest_parent_after_child,
        _forest_cycle,
        _forest_declared_twice,
    ],
)
def test_verify_fail_axis_forest(case):
    s, msg = case()
    with pytest.raises(AxisForestError, match=msg):
        verify(s.func())


def _structure_missing(field, kind):
    def case():
        s = Csrmm1(J=lambda s: {field: None})
        return s, f"axis `J` is {kind} but has no {field}"

    case.__name__ = f"missing_{field}"
    return case


def _structure_dense_fixed_nnz():
    s = Csrmm1(K=lambda s: {"nnz": s.nnz})
    return s, "axis `K` is dense_fixed but has nnz `nnz`"


def _structure_dense_variable_indices():
    s = Csrmm1()
    _, J_dv = ell_axes(s)
    s.axes[-1] = J_dv.replace(indices=s.indices)
    return s, "axis `J_dv` is dense_variable but has indices `indices`"


def _structure_sparse_fixed_indptr():
    s = Csrmm1()
    J_ell, _ = ell_axes(s)
    s.axes[-2] = J_ell.replace(indptr=Var("p", "handle"))
    return s, "axis `J_ell` is sparse_fixed but has indptr `p`"


def _structure_indptr_not_param():
    s = Csrmm1()
    s.params.remove(s.indptr)
    return s, "indptr `indptr` of axis `J` is not a handle parameter"


def _structure_indptr_not_handle():
    s = Csrmm1(J=lambda s: {"indptr": s.m})
    return s, "indptr `m` of axis `J` is not a handle parameter"


def _structure_idtype():
    s = Csrmm1(J=lambda s: {"idtype": "int16"})
    return s, "axis `J` has idtype int16"


def _structure_shared_idtype():
    s = Csrmm1()
    J2 = s.J.replace(name="J2", idtype="int64")
    s.axes.append(J2)
    return s, "axes `J` and `J2` share indptr `indptr` but have idtypes int32 and int64"


def _structure_shared_role():
    s = Csrmm1()
    ptr = Var("ptr", "handle")
    s.params.append(ptr)
    s.axes.append(s.J.replace(name="J2", indptr=ptr, indices=s.indptr))
    return s, "handle `indptr` is the indptr of axis `J` and the indices of axis `J2`"


def _structure_handle_is_buffer_data():
    s = Csrmm1()
    s.buffers.append(SparseBuffer("P", (s.I,), "int32", s.indptr))
    return s, "handle `indptr` is the indptr of axis `J` and the data of buffer `P`"


def _structure_view_dtype_stage2():
    s = Csrmm2(indices_dtype="int64")
    return s, r"buffer `J_indices` views the indices of axis `J` \(int32\) but has dtype int64"


def _structure_unknown_kind():
    s = Csrmm1(K=lambda s: {"kind": "dense_sparse"})
    return s, "axis `K` has unknown kind 'dense_sparse'"


@pytest.mark.parametrize(
    "case",
    [
        _structure_missing("indptr", "sparse_variable"),
        _structure_missing("indices", "sparse_variable"),
        _structure_missing("nnz", "sparse_variable"),
        _structure_dense_fixed_nnz,
        _structure_dense_variable_indices,
        _structure_sparse_fixed_indptr,
        _structure_indptr_not_param,
        _structure_indptr_not_handle,
        _structure_idtype,
        _structure_shared_idtype,
        _structure_shared_role,
        _structure_handle_is_buffer_data,
        _structure_view_dtype_stage2,
        _structure_unknown_kind,
    ],
)
def test_verify_fail_axis_structure(case):
    s, msg = case()
    with pytest.raises(AxisStructureError, match=msg):
        verify(s.func())


def _undeclared_axis_of_buffer():
    s = Csrmm1()
    s.axes.remove(s.J_detach)
    return s, "axis `J_detach` of buffer `B` is not declared"


def _undeclared_axis_of_iteration():
    s = Csrmm1()
    K2 = Axis("K2", DENSE_FIXED, s.feat)
    s.iter_axes = (s.I, s.J, K2)
    return s, "sparse iteration `csrmm` uses axis `K2`, which is not declared"


def _undeclared_parent():
    s = Csrmm1()
    s.axes.remove(s.I)
    return s, "parent `I` of axis `J` is not declared"


def _undeclared_fused_member():
    s = Csrmm1()
    I2 = Axis("I2", DENSE_FIXED, s.m)
    s.iter_axes = (FusedAxis((I2, s.J), 0), FusedAxis((I2, s.J), 1), s.K)
    return s, "uses axis `I2`, which is not declared"


def _undeclared_attach_target():
    s = Csrmm1()
    T = Axis("T", DENSE_FIXED, s.m)
    s.iter_axes = (s.I, AttachedAxis(s.J, T), s.K)
    return s, "uses axis `T`, which is not declared"


@pytest.mark.parametrize(
    "case",
    [
        _undeclared_axis_of_buffer,
        _undeclared_axis_of_iteration,
        _undeclared_parent,
        _undeclared_fused_member,
        _undeclared_attach_target,
    ],
)
def test_verify_fail_undeclared_axis(case):
    s, msg = case()
    with pytest.raises(UndeclaredAxisError, match=msg):
        verify(s.func())


def test_verify_fail_undeclared_buffer():
    s = Csrmm1()
    s.buffers.remove(s.B)
    with pytest.raises(UndeclaredBufferError, match="buffer `B` is loaded but not declared"):
        verify(s.func())


def test_verify_fail_undeclared_buffer_out_of_allocation():
    s = Csrmm3()
    body = s.func().body
    with pytest.raises(UndeclaredBufferError, match="buffer `acc` is loaded outside the scope that allocates it"):
        verify(s.func(seq(body, st(s.C, (i32(0),), ld(s.acc, i32(0))))))


def test_verify_fail_undeclared_buffer_block_alloc_outside_block():
    s = Csrmm2()
    tmp = FlatBuffer("tmp", (s.feat,), "float32", scope="shared")
    s.empty_row = Evaluate(i32(0))
    blk = s.block0().replace(alloc_buffers=(tmp,))
    body = seq(serial(s.i, s.m, blk), st(tmp, (i32(0),), f32(0.0)))
    with pytest.raises(UndeclaredBufferError, match="buffer `tmp` is stored outside the scope"):
        verify(s.func(body))


def _decl_twice():
    s = Csrmm1()
    s.buffers.append(s.A)
    return s, "buffer `A` is declared twice"


def _decl_shared_handle():
    s = Csrmm1()
    s.buffers.append(SparseBuffer("A2", (s.I, s.J), "float32", s.a))
    return s, "buffers `A` and `A2` are both matched to `a`"


def _decl_data_not_param():
    s = Csrmm1()
    s.buffers.append(SparseBuffer("A2", (s.I, s.J), "float32", Var("a2", "handle")))
    return s, "data `a2` of buffer `A2` is not a handle parameter"


def _decl_data_scalar_param():
    s = Csrmm1()
    s.buffers.append(SparseBuffer("A2", (s.I, s.J), "float32", s.m))
    return s, "data `m` of buffer `A2` is not a handle parameter"


def _decl_allocated_with_data():
    s = Csrmm3()
    s.acc = FlatBuffer("acc", (i32(1),), "float32", s.a, scope="local")
    s.accumulate = st(s.acc, (i32(0),), ld(s.acc, i32(0)))
    s.write_back = st(s.C, (i32(0),), ld(s.acc, i32(0)))
    s.buffers.remove(s.A)
    return s, "allocated buffer `acc` must have no data handle, but has `a`"


@pytest.mark.parametrize(
    "case", [_decl_twice, _decl_shared_handle, _decl_data_not_param, _decl_data_scalar_param, _decl_allocated_with_data]
)
def test_verify_fail_buffer_declaration(case):
    s, msg = case()
    with pytest.raises(BufferDeclarationError, match=msg):
        verify(s.func())


def test_verify_fail_scope():
    s = Csrmm3()
    s.acc = FlatBuffer("acc", (i32(1),), "float32", scope="texture")
    s.accumulate = st(s.acc, (i32(0),), f32(1.0))
    s.write_back = st(s.C, (i32(0),), ld(s.acc, i32(0)))
    with pytest.raises(ScopeError, match="buffer `acc` has scope 'texture'"):
        verify(s.func())


def test_verify_fail_scope_matched_buffer_not_global():
    s = Csrmm1()
    s.buffers[1] = SparseBuffer("B", (s.J_detach, s.K), "float32", s.b, scope="shared")
    s.body = st(s.C, (s.i, s.k), ld(s.C, s.i, s.k) + ld(s.A, s.i, s.j) * ld(s.buffers[1], s.j, s.k))
    with pytest.raises(ScopeError, match="buffer `B` is matched to parameter `b` so it must be global"):
        verify(s.func())


def _order_child_first(s):
    return (s.J, s.I), "axis `J` must come right after its parent `I`"


def _order_twice(s):
    return (s.I, s.J, s.I), "lists axis `I` twice"


def _order_prefix_before_variable(s):
    return (s.K, s.I, s.J), r"sparse_variable axis `J` must be preceded by exactly its ancestors \(`I`\)"


def _order_gap_after_parent(s):
    J_ell, _ = ell_axes(s)
    return (s.I, s.K, J_ell), "axis `J_ell` must come right after its parent `I`"


@pytest.mark.parametrize(
    "case", [_order_child_first, _order_twice, _order_prefix_before_variable, _order_gap_after_parent]
)
def test_verify_fail_buffer_axis_order(case):
    s = Csrmm1()
    axes, msg = case(s)
    x = Var("x", "handle")
    s.params.append(x)
    s.buffers.append(SparseBuffer("X", axes, "float32", x))
    with pytest.raises(BufferAxisOrderError, match=f"in `csrmm`: buffer `X`.*{msg}"):
        verify(s.func())
    with pytest.raises(BufferAxisOrderError, match=f"^buffer `X`.*{msg}"):
        check_buffer_axes("X", axes)


def _arity_stage1_load():
    s = Csrmm1()
    s.body = st(s.C, (s.i, s.k), ld(s.C, s.i, s.k) + ld(s.A, s.i) * ld(s.B, s.j, s.k))
    return s.func(), r"buffer `A` has 2 axes but is loaded with 1 indices"


def _arity_stage1_store():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k, s.i), f32(0.0))
    return s.func(), r"buffer `C` has 2 axes but is stored with 3 indices"


def _arity_stage2_flat():
    s = Csrmm2()
    s.row_len = ld(s.J_indptr, s.vi + 1, s.vi) - ld(s.J_indptr, s.vi)
    s.iv_vj = IterVar(s.vj, s.m, "R", s.j)
    s.empty_row = Evaluate(i32(0))
    return s.func(), r"buffer `J_indptr` has 1 dimensions but is loaded with 2 indices"


def _arity_stage2_flat_single_index_is_stage3_only():
    s = Csrmm2()
    C = s.C = s.buffers[2] = FlatBuffer("C", (s.m, s.feat), "float32", s.c)
    s.empty_row = Evaluate(i32(0))
    s.writes1 = (region(C, (s.vi, 1), (s.vk, 1)),)
    s.init1 = st(C, (s.vi, s.vk), f32(0.0))
    s.update = st(C, (s.vi * s.feat + s.vk,), f32(1.0))
    return s.func(), r"buffer `C` has 2 dimensions but is stored with 1 indices"


def _arity_stage3():
    s = Csrmm3()
    s.write_back = st(s.C, (s.i, s.k, s.k), ld(s.acc, i32(0)))
    return s.func(), r"buffer `C` has 2 dimensions but is stored with 3 indices"


def _arity_region():
    s = Csrmm2()
    s.writes1 = (region(s.C, (s.vi, 1)),)
    return s.func(), r"buffer `C` has 2 axes but is written by block `csrmm1` with 1 indices"


@pytest.mark.parametrize(
    "case",
    [
        _arity_stage1_load,
        _arity_stage1_store,
        _arity_stage2_flat,
        _arity_stage2_flat_single_index_is_stage3_only,
        _arity_stage3,
        _arity_region,
    ],
)
def test_verify_fail_buffer_arity(case):
    func, msg = case()
    with pytest.raises(BufferArityError, match=msg):
        verify(func)


@pytest.mark.parametrize(
    "layout, msg",
    [
        (Layout((0, 0)), r"minor_to_major \(0, 0\) is not a permutation"),
        (Layout((1, 0), tiles=((8, 0),)), r"has tile \(8, 0\)"),
        (Layout((1, 0), tiles=((8, 8, 8),)), r"has tile \(8, 8, 8\)"),
        (Layout((1, 0), tail_padding_alignment=0), "tail_padding_alignment 0"),
    ],
)
def test_verify_fail_buffer_layout(layout, msg):
    s = Csrmm3()
    s.B = FlatBuffer("B", (s.n, s.feat), "float32", s.b, layout)
    s.buffers[1] = s.B
    s.accumulate = st(s.acc, (i32(0),), ld(s.B, i32(0)))
    with pytest.raises(BufferLayoutError, match=msg):
        verify(s.func())


def test_verify_layout_col_major_and_tiles_are_valid():
    s = Csrmm3()
    s.B = FlatBuffer("B", (s.n, s.feat), "float32", s.b, Layout((0, 1), tiles=((8, 128),)))
    s.buffers[1] = s.B
    s.accumulate = st(s.acc, (i32(0),), ld(s.B, i32(0)))
    verify(s.func())


def _iter_bad_kind(s):
    s.kinds = "SXS"
    return s.func(), 'has kinds "SXS"'


def _iter_kinds_length(s):
    s.kinds = "SR"
    return s.func(), 'has 3 iterators but kinds "SR" has 2 letters'


def _iter_axes_count(s):
    s.iter_axes = (s.I, s.J)
    return s.func(), "iterates 2 axes with 3 iterators"


def _iter_child_before_parent(s):
    s.iter_axes, s.kinds = (s.J, s.I, s.K), "RSS"
    s.iter_vars = (s.j, s.i, s.k)
    return s.func(), r"iterates axis `J` before its parent `I`$"


def _iter_parent_missing(s):
    s.iter_axes, s.kinds, s.iter_vars = (s.J, s.K), "RS", (s.j, s.k)
    s.init = None
    s.body = st(s.C, (i32(0), s.k), ld(s.A, i32(0), s.j))
    return s.func(), "iterates axis `J` but not its parent `I`"


def _iter_axis_twice(s):
    s.iter_axes = (s.I, s.J, s.I)
    return s.func(), "iterates axis `I` twice"


def _iter_axis_of_enclosing(s):
    i2 = Var("i2")
    outer = SparseIteration("outer", (s.I,), "S", (i2,), s.iteration())
    return s.func(outer), "iterates axis `I`, which an enclosing sparse iteration already iterates"


def _iter_fused_split(s):
    s.iter_axes = (FusedAxis((s.I, s.J), 0), s.K, FusedAxis((s.I, s.J), 1))
    s.kinds, s.init = "SSS", None
    return s.func(), r"fused axes \(`I`, `J`\) must be listed together, in order"


def _iter_fused_reversed(s):
    s.iter_axes = (FusedAxis((s.I, s.J), 1), FusedAxis((s.I, s.J), 0), s.K)
    s.kinds, s.init = "SSS", None
    return s.func(), r"member `J` is not preceded by `I`"


def _iter_fused_not_parent(s):
    s.iter_axes = (s.I, FusedAxis((s.K, s.J), 0), FusedAxis((s.K, s.J), 1))
    s.kinds, s.init = "SSS", None
    return s.func(), r"in fused group \(`K`, `J`\), the parent of `J` must be `K`"


def _iter_fused_reduction_then_spatial(s):
    s.iter_axes = (FusedAxis((s.I, s.J), 0), FusedAxis((s.I, s.J), 1), s.K)
    s.kinds, s.init = "RSS", None
    s.body = st(s.C, (s.j, s.k), ld(s.C, s.j, s.k) + ld(s.A, s.i, s.j))
    return s.func(), r'fused axes \(`I`, `J`\) have kinds "RS"; a fused group takes spatial members then reduction'


def _iter_attached_not_root(s):
    lidx = Var("lidx", "handle")
    s.params.append(lidx)
    L = Axis("L", SPARSE_FIXED, s.n, s.J, nnz_cols=i32(2), indices=lidx)
    s.axes.append(L)
    s.iter_axes = (s.I, s.J, AttachedAxis(L, s.J))
    s.kinds, s.init = "SRR", None
    s.body = st(s.C, (s.i, i32(0)), f32(1.0))
    return s.func(), r"attached axis `L` must have a dense_fixed root as its parent, but its parent is `J`"


def _iter_init_s_depends_on_r(s):
    s.iter_axes, s.kinds, s.iter_vars = (s.I, s.J), "RS", (s.i, s.j)
    colsum = SparseBuffer("colsum", (s.J_detach,), "float32")
    s.buffers.append(colsum)
    s.init = st(colsum, (s.j,), f32(0.0))
    s.body = st(colsum, (s.j,), ld(colsum, s.j) + ld(s.A, s.i, s.j))
    return s.func(), "has an init, but spatial axis `J` depends on reduction axis `I`"


def _iter_duplicate_name(s):
    i2, k2 = Var("i2"), Var("k2")
    other = SparseIteration("csrmm", (s.I, s.K), "SS", (i2, k2), st(s.C, (i2, k2), f32(0.0)))
    return s.func(seq(other, s.iteration())), "two sparse iterations are named `csrmm`"


@pytest.mark.parametrize(
    "case",
    [
        _iter_bad_kind,
        _iter_kinds_length,
        _iter_axes_count,
        _iter_child_before_parent,
        _iter_parent_missing,
        _iter_axis_twice,
        _iter_axis_of_enclosing,
        _iter_fused_split,
        _iter_fused_reversed,
        _iter_fused_not_parent,
        _iter_attached_not_root,
        _iter_init_s_depends_on_r,
        _iter_duplicate_name,
    ],
)
def test_verify_fail_sparse_iteration(case):
    func, msg = case(Csrmm1())
    with pytest.raises(SparseIterationError, match=msg):
        verify(func)


def test_verify_fused_reduction_then_spatial_without_init():
    """A fused group of kinds "RS" is one reduction loop; without an init (a decomposed part,
    whose output was initialised before it) nothing runs out of order, so it verifies."""
    func, _ = _iter_fused_reduction_then_spatial(Csrmm1())
    verify(func)


def _reduce_store(s):
    s.body = seq(s.body, st(s.A, (s.i, s.j), ld(s.A, s.i, s.j) * f32(2.0)))
    return s.func(), "`csrmm` writes buffer `A` at an index that uses its reduction iterator `j`"


def _reduce_atomic(s):
    s.body = AtomicAdd(s.A, (s.i, s.j), f32(1.0))
    return s.func(), "writes buffer `A` at an index that uses its reduction iterator `j`"


def _reduce_through_load(s):
    pos = SparseBuffer("pos", (s.J_detach,), "int32")
    s.buffers.append(pos)
    s.body = st(s.C, (ld(pos, s.j), s.k), f32(1.0))
    return s.func(), "reduction iterator `j`"


def _reduce_nested(s):
    i2, j2, k2 = Var("i2"), Var("j2"), Var("k2")
    inner = SparseIteration("inner", (s.K,), "S", (k2,), st(s.A, (i2, j2), f32(1.0)))
    outer = SparseIteration("outer", (s.I, s.J), "SR", (i2, j2), inner)
    return s.func(outer), "`outer` writes buffer `A` at an index that uses its reduction iterator `j2`"


def _reduce_block(s):
    s = Csrmm2()
    s.update = st(s.A, (s.vi, s.vj), f32(1.0))
    return s.func(), "`csrmm1` writes buffer `A` at an index that uses its reduction iterator `vj`"


@pytest.mark.parametrize("case", [_reduce_store, _reduce_atomic, _reduce_through_load, _reduce_nested, _reduce_block])
def test_verify_fail_reduction_write(case):
    func, msg = case(Csrmm1())
    with pytest.raises(ReductionWriteError, match=msg):
        verify(func)


def _written_from(s: Csrmm1, buf, iter_axes, kinds, index, atomic=False):
    """`s` with one iteration over `iter_axes` (iterators i0, i1, ...) that writes `buf` at
    `index(iterators)`, instead of csrmm."""
    its = tuple(Var(f"i{k}") for k in range(len(iter_axes)))
    node = AtomicAdd if atomic else BufferStore
    s.buffers.append(buf)
    s.params.append(buf.data)
    return s.func(SparseIteration("w", tuple(iter_axes), kinds, its, node(buf, tuple(index(*its)), f32(1.0))))


def _shared_j(s: Csrmm1, **fields) -> Axis:
    """An axis of its own over J's structure arrays (under a dense root of its own)."""
    root = Axis("I2", DENSE_FIXED, s.m)
    J2 = Axis("J2", SPARSE_VARIABLE, s.n, root, nnz=s.nnz, indptr=s.indptr, indices=s.indices, **fields)
    s.axes += [root, J2]
    return J2


def test_verify_stage1_stored_writes():
    """Writes the structure provably stores: a buffer's own axes (ELL, ragged), an attached axis
    in the row of its attach target, and an axis over the same sorted structure arrays."""
    s = Csrmm1()
    J_ell, J_dv = ell_axes(s)
    E = SparseBuffer("E", (s.I, J_ell), "float32", Var("e", "handle"))
    verify(_written_from(s, E, (s.I, J_ell), "SS", lambda i, j: (i, j)))
    s = Csrmm1()
    J_ell, J_dv = ell_axes(s)
    D = SparseBuffer("D", (s.I, J_dv, s.K), "float32", Var("d", "handle"))
    verify(_written_from(s, D, (s.I, J_dv, s.K), "SSS", lambda i, j, k: (i, j, k)))
    s = Csrmm1()
    J2 = _shared_j(s)
    C2 = SparseBuffer("C2", (J2.parent, J2), "float32", Var("c2", "handle"))
    verify(_written_from(s, C2, (s.I, s.J), "SS", lambda i, j: (i, j)))
    s = Csrmm1()
    J2 = _shared_j(s)
    C2 = SparseBuffer("C2", (J2.parent, J2), "float32", Var("c2", "handle"))
    verify(_written_from(s, C2, (FusedAxis((s.I, s.J), 0), FusedAxis((s.I, s.J), 1)), "SS", lambda i, j: (i, j)))
    s = Csrmm1()
    hptr, hidx, hl = Var("hptr", "handle"), Var("hidx", "handle"), Var("hl")
    s.params += [hptr, hidx, hl]
    H = Axis("H", SPARSE_VARIABLE, s.m, s.J_detach, nnz=hl, indptr=hptr, indices=hidx)
    s.axes.append(H)
    G = SparseBuffer("G", (s.J_detach, H), "float32", Var("g", "handle"))
    verify(_written_from(s, G, (s.I, s.J, AttachedAxis(H, s.J)), "SSS", lambda i, j, h: (j, h)))


def _unstored_dense(s):
    A2 = SparseBuffer("A2", (s.I, s.J), "float32", Var("a2", "handle"))
    func = _written_from(s, A2, (s.I, s.J_detach), "SS", lambda i, j: (i, j))
    return func, (
        r"a write to `A2` at index 1 uses `i1`: expected an iterator of `A2`'s sparse_variable axis `J`, but `i1` "
        r"iterates axis `J_detach`"
    )


def _unstored_row(s):
    func = _written_from(
        s,
        SparseBuffer("A2", (s.I, s.J), "float32", Var("a2", "handle")),
        (s.I, s.J),
        "SS",
        lambda i, j: (i + i32(1), j),
    )
    return func, r"at index 0 uses `i0 \+ 1`: expected `i0`, the row in which `i1` walks `J`, but got `i0 \+ 1`"


def _unstored_parameter(s):
    func = _written_from(
        s, SparseBuffer("A2", (s.I, s.J), "float32", Var("a2", "handle")), (s.I,), "S", lambda i: (i, s.n)
    )
    return func, r"but `n` is not an iterator of a sparse iteration"


def _unstored_atomic(s):
    func = _written_from(
        s,
        SparseBuffer("A2", (s.I, s.J), "float32", Var("a2", "handle")),
        (s.I, s.J_detach),
        "SS",
        lambda i, j: (i, j),
        atomic=True,
    )
    return func, r"an atomic add to `A2` at index 1 uses `i1`"


def _unstored_ell(s):
    J_ell, _ = ell_axes(s)
    func = _written_from(
        s, SparseBuffer("E", (s.I, J_ell), "float32", Var("e", "handle")), (s.I, s.J), "SS", lambda i, j: (i, j)
    )
    return func, r"`E`'s sparse_fixed axis `J_ell`, but `i1` iterates axis `J`"


def _unstored_dense_variable(s):
    _, J_dv = ell_axes(s)
    func = _written_from(
        s, SparseBuffer("D", (s.I, J_dv), "float32", Var("d", "handle")), (s.I, s.J_detach), "SS", lambda i, j: (i, j)
    )
    return func, r"`D`'s dense_variable axis `J_dv`, but `i1` iterates axis `J_detach`"


def _unstored_unsorted(s):
    J2 = _shared_j(s, sorted=False)
    func = _written_from(
        s, SparseBuffer("C2", (J2.parent, J2), "float32", Var("c2", "handle")), (s.I, s.J), "SS", lambda i, j: (i, j)
    )
    return func, r"but `i1` iterates axis `J`, declared over the same structure arrays but not sorted"


@pytest.mark.parametrize(
    "case",
    [
        _unstored_dense,
        _unstored_row,
        _unstored_parameter,
        _unstored_atomic,
        _unstored_ell,
        _unstored_dense_variable,
        _unstored_unsorted,
    ],
)
def test_verify_reports_checked_write(case):
    """A Stage I write that may land on a coordinate the structure does not store is not an error:
    `verify` reports it as checked, with the reason (more forms, run through every entry point:
    tests/ir/test_unstored_writes.py)."""
    func, msg = case(Csrmm1())
    (checked,) = verify(func).checked
    assert re.search(msg, checked.reason), checked.reason


RGCN_HETERO_WITH_INIT = """
from sparsetir_py import script as T

@T.prim_func
def rgcn(w: T.handle, x: T.handle, y: T.handle, indptr_i: T.handle, indices_i: T.handle,
         indptr_j: T.handle, indices_j: T.handle, n: T.int32, r: T.int32, feat: T.int32,
         nnz_i: T.int32, nnz_j: T.int32):
    R = T.dense_fixed(r)
    I = T.sparse_variable(R, (n, nnz_i), (indptr_i, indices_i), "int32")
    J = T.sparse_variable(I, (n, nnz_j), (indptr_j, indices_j), "int32")
    I_detach = T.dense_fixed(n)
    J_detach = T.dense_fixed(n)
    F_in = T.dense_fixed(feat)
    F_out = T.dense_fixed(feat)
    W = T.match_sparse_buffer(w, (R, F_out, F_in), "float32")
    X = T.match_sparse_buffer(x, (J_detach, F_in), "float32")
    Y = T.match_sparse_buffer(y, (I_detach, F_out), "float32")
    with T.sp_iter([F_out, R, I, J, F_in], "SSSRR", "rgcn") as [fo, rr, i, j, fi]:
        with T.init():
            Y[i, fo] = 0.0
        Y[i, fo] = Y[i, fo] + W[rr, fo, fi] * X[j, fi]
"""


def test_verify_fail_init_write():
    """SparseTIR's heterogeneous RGCN with an init: every relation `rr` would re-initialise
    Y[i, fo], so the result would depend on the order of the spatial points."""
    from sparsetir_py import from_script
    from sparsetir_py.ir.verify import InitWriteError

    func = from_script(RGCN_HETERO_WITH_INIT)
    with pytest.raises(InitWriteError, match="spatial iterator `rr`"):
        verify(func)


def _undef_free_var():
    s = Csrmm1()
    s.body = st(s.C, (s.i, Var("x")), f32(1.0))
    return s.func(), "variable `x` is not defined"


def _undef_iterator_after_iteration():
    s = Csrmm1()
    return s.func(seq(s.iteration(), st(s.C, (s.i, i32(0)), f32(0.0)))), "`i` is used outside the scope"


def _undef_reduction_iterator_in_init():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), ld(s.A, s.i, s.j))
    return s.func(), "the init of sparse iteration `csrmm` uses its reduction iterator `j`"


def _undef_block_init_reduction_var():
    s = Csrmm2()
    s.init1 = st(s.C, (s.vi, s.vk), ld(s.A, s.vi, s.vj))
    return s.func(), "the init of block `csrmm1` uses its reduction iterator `vj`"


def _undef_binding():
    s = Csrmm2()
    s.iv_vk = IterVar(s.vk, s.feat, "S", Var("q"))
    return s.func(), "variable `q` is not defined"


def _undef_binding_uses_own_iter_var():
    s = Csrmm2()
    s.iv_vi = IterVar(s.vi, s.m, "S", s.vi)
    return s.func(), "block iterator `vi` is used in the iterators or predicate of its own block `csrmm0`"


def _undef_axis_length():
    s = Csrmm1(K=lambda s: {"length": Var("f")})
    return s.func(), "variable `f` is not defined"


def _undef_loop_min_uses_loop_var():
    s = Csrmm3()
    x = Var("x")
    return s.func(serial(x, s.m, Evaluate(i32(0)), lo=x)), "variable `x` is not defined"


@pytest.mark.parametrize(
    "case",
    [
        _undef_free_var,
        _undef_iterator_after_iteration,
        _undef_reduction_iterator_in_init,
        _undef_block_init_reduction_var,
        _undef_binding,
        _undef_binding_uses_own_iter_var,
        _undef_axis_length,
        _undef_loop_min_uses_loop_var,
    ],
)
def test_verify_fail_undefined_variable(case):
    func, msg = case()
    with pytest.raises(UndefinedVariableError, match=msg):
        verify(func)


def _rebind_nested_loop():
    s = Csrmm3()
    return s.func(serial(s.i, s.m, serial(s.i, s.m, Evaluate(i32(0))))), "loop variable `i` is bound twice"


def _rebind_sibling_loops():
    s = Csrmm3()
    loop = serial(s.i, s.m, Evaluate(i32(0)))
    return s.func(seq(loop, loop)), "loop variable `i` is bound twice"


def _rebind_iterator_is_param():
    s = Csrmm1()
    s.iter_vars = (s.m, s.j, s.k)
    s.init, s.body = None, Evaluate(i32(0))
    return s.func(), "iterator `m` is bound twice"


def _rebind_param_name():
    s = Csrmm1()
    s.params.append(Var("m"))
    return s.func(), "two parameters are named `m`"


def _rebind_block_iter_var():
    s = Csrmm2()
    s.iv_vk = IterVar(s.vi, s.feat, "S", s.k)
    return s.func(), "block iterator `vi` is bound twice"


@pytest.mark.parametrize(
    "case",
    [_rebind_nested_loop, _rebind_sibling_loops, _rebind_iterator_is_param, _rebind_param_name, _rebind_block_iter_var],
)
def test_verify_fail_rebind(case):
    func, msg = case()
    with pytest.raises(RebindError, match=msg):
        verify(func)


def test_verify_fail_block_isolation():
    s = Csrmm2()
    s.update = st(s.C, (s.vi, s.k), f32(1.0))  # `k` is the loop, `vk` the block iterator
    with pytest.raises(BlockIsolationError, match="block `csrmm1` uses loop variable `k` of a loop outside it"):
        verify(s.func())
    assert issubclass(BlockIsolationError, UndefinedVariableError)


def _extent_loop():
    s = Csrmm3()
    return s.func(serial(Var("x"), i32(-1), Evaluate(i32(0)))), "extent of loop `x` is -1"


def _extent_iter_var():
    s = Csrmm2()
    s.iv_vk = IterVar(s.vk, i32(-2), "S", s.k)
    return s.func(), "extent of block iterator `vk` is -2"


def _extent_axis():
    s = Csrmm1()
    s.axes.append(Axis("Z", DENSE_FIXED, i32(-3)))
    return s.func(), "length of axis `Z` is -3"


def _extent_buffer_shape():
    s = Csrmm3()
    s.buffers.append(FlatBuffer("Z", (i32(-4),), "float32"))
    return s.func(), "dimension 0 of buffer `Z` is -4"


def _extent_loop_kind():
    s = Csrmm3()
    s.i_kind = "pipelined"
    return s.func(), "loop `i` has kind 'pipelined'"


@pytest.mark.parametrize(
    "case", [_extent_loop, _extent_iter_var, _extent_axis, _extent_buffer_shape, _extent_loop_kind]
)
def test_verify_fail_loop_extent(case):
    func, msg = case()
    with pytest.raises(LoopExtentError, match=msg):
        verify(func)


@pytest.mark.parametrize(
    "kind, thread, outer, msg",
    [
        ("thread_binding", None, None, "thread_binding loop `i` has tag None"),
        ("thread_binding", "threadIdx.w", None, "thread_binding loop `i` has tag 'threadIdx.w'"),
        ("serial", "threadIdx.x", None, "serial loop `i` has thread tag 'threadIdx.x'"),
        ("thread_binding", "threadIdx.x", "threadIdx.x", "loop `i` binds threadIdx.x inside a loop bound to it"),
    ],
)
def test_verify_fail_thread_binding(kind, thread, outer, msg):
    s = Csrmm2()
    s.i_kind, s.i_thread = kind, thread
    func = s.func()
    if outer is not None:
        func = func.replace(body=serial(Var("t"), i32(32), func.body, "thread_binding", outer))
    with pytest.raises(ThreadBindingError, match=msg):
        verify(func)
    assert issubclass(ThreadBindingError, LoopExtentError)


def test_verify_fail_thread_binding_nonzero_min():
    s = Csrmm2()
    body = serial(s.i, s.m, s.block0(), "thread_binding", "blockIdx.x", lo=i32(1))
    with pytest.raises(ThreadBindingError, match="thread_binding loop `i` must start at 0"):
        verify(s.func(body))


def _dt_store_value():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), FloatImm(0.0, "float64"))
    return s.func(), "store of a float64 value into float32 buffer `C`"


def _dt_float_index():
    s = Csrmm1()
    s.init = st(s.C, (s.i, f32(0.0)), f32(0.0))
    return s.func(), "index 1 of `C` has dtype float32; expected an integer"


def _dt_mixed_binop():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k + IntImm(0, "int64")), f32(0.0))
    return s.func(), "operands of `\\+` have dtypes int32 and int64; insert a cast"


def _dt_int_condition():
    s = Csrmm1()
    s.init = IfThenElse(s.i, st(s.C, (s.i, s.k), f32(0.0)))
    return s.func(), "if condition has dtype int32; expected bool"


def _dt_select_condition():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), Select(s.k, f32(0.0), f32(1.0)))
    return s.func(), "select condition has dtype int32"


def _dt_select_branches():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), Select(BinOp("<", s.i, s.k), f32(0.0), i32(1)))
    return s.func(), "select branches have dtypes float32 and int32"


def _dt_unknown_intrinsic():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), Call("frobnicate", (f32(0.0),), "float32"))
    return s.func(), "call of unknown intrinsic `frobnicate`"


def _dt_intrinsic_arity():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), Call("exp", (f32(0.0), f32(1.0)), "float32"))
    return s.func(), "intrinsic `exp` takes 1 arguments, got 2"


def _dt_intrinsic_result():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), Call("isnan", (f32(0.0),), "float32"))
    return s.func(), "call of `isnan` has dtype float32; expected bool"


def _dt_handle_as_value():
    s = Csrmm1()
    s.init = st(s.C, (s.i, s.k), Cast("float32", s.a))
    return s.func(), "handle `a` is used as a value"


def _dt_int_true_division():
    s = Csrmm1()
    s.init = st(s.C, (s.i, BinOp("/", s.k, i32(2))), f32(0.0))
    return s.func(), "`/` on int32 operands; use `//`"


def _dt_logic_on_ints():
    s = Csrmm1()
    s.init = IfThenElse(BinOp("and", s.i, s.k), st(s.C, (s.i, s.k), f32(0.0)))
    return s.func(), "operands of `and` have dtype int32; expected bool"


def _dt_not_on_int():
    s = Csrmm1()
    s.init = IfThenElse(UnaryOp("not", s.i), st(s.C, (s.i, s.k), f32(0.0)))
    return s.func(), "operand of `not` has dtype int32"


def _dt_buffer_dtype():
    s = Csrmm1()
    s.buffers.append(SparseBuffer("H", (s.I,), "handle"))
    return s.func(), "buffer `H` has dtype handle"


def _dt_iterator_dtype():
    s = Csrmm1()
    s.iter_vars = (s.i, s.j, Var("k", "float32"))
    s.init = s.body = Evaluate(i32(0))
    return s.func(), "iterator `k` has dtype float32; expected an integer"


def _dt_loop_extent_dtype():
    s = Csrmm3()
    return s.func(serial(Var("x"), IntImm(4, "int64"), Evaluate(i32(0)))), (
        "extent of loop `x` has dtype int64 but the loop variable is int32"
    )


def _dt_block_predicate():
    s = Csrmm2()
    blk = s.block0().replace(predicate=s.i)
    return s.func(serial(s.i, s.m, blk)), "predicate of block `csrmm0` has dtype int32; expected bool"


def _dt_iter_var_binding():
    s = Csrmm2()
    s.iv_vk = IterVar(s.vk, s.feat, "S", Cast("int64", s.k))
    return s.func(), "binding of block iterator `vk` has dtype int64 but the iterator is int32"


def _dt_int_constant_range():
    s = Csrmm1()
    s.init = st(s.C, (s.i, IntImm(2**31, "int32")), f32(0.0))
    return s.func(), "integer constant 2147483648 does not fit in int32"


def _dt_default_value():
    s = Csrmm1()
    s.buffers.append(SparseBuffer("M", (s.I,), "int32", default_value=0.5))
    return s.func(), "buffer `M` has default value 0.5, which is not a int32"


def _dt_bool_constant():
    s = Csrmm1()
    s.init = IfThenElse(IntImm(2, "bool"), st(s.C, (s.i, s.k), f32(0.0)))
    return s.func(), "bool constant has value 2"


@pytest.mark.parametrize(
    "case",
    [
        _dt_store_value,
        _dt_float_index,
        _dt_mixed_binop,
        _dt_int_condition,
        _dt_select_condition,
        _dt_select_branches,
        _dt_unknown_intrinsic,
        _dt_intrinsic_arity,
        _dt_intrinsic_result,
        _dt_handle_as_value,
        _dt_int_true_division,
        _dt_logic_on_ints,
        _dt_not_on_int,
        _dt_buffer_dtype,
        _dt_iterator_dtype,
        _dt_loop_extent_dtype,
        _dt_block_predicate,
        _dt_iter_var_binding,
        _dt_bool_constant,
        _dt_int_constant_range,
        _dt_default_value,
    ],
)
def test_verify_fail_dtype(case):
    func, msg = case()
    with pytest.raises(DtypeError, match=msg):
        verify(func)


def test_verify_valid_expressions():
    """Casts, selects, intrinsics, comparisons and logic that are well typed pass."""
    s = Csrmm1()
    i, k = s.i, s.k
    cond = BinOp("and", BinOp("<", i, k), UnaryOp("not", BinOp("==", k, i32(0))))
    value = Select(cond, Call("exp", (Cast("float32", i),), "float32"), Call("sqrt", (f32(4.0),), "float32"))
    s.init = IfThenElse(cond, st(s.C, (i, k // 1 % 7), value), st(s.C, (i, k), -f32(0.0)))
    verify(s.func())


def _block_iter_kind():
    s = Csrmm2()
    s.iv_vk = IterVar(s.vk, s.feat, "X", s.k)
    return s.func(), "iterator `vk` of block `csrmm1` has kind 'X'"


def _block_init_without_reduction():
    s = Csrmm2()
    s.iv_vj = IterVar(s.vj, s.row_len, "S", s.j)
    return s.func(), "block `csrmm1` has an init but no reduction iterator"


def _block_duplicate_name():
    s = Csrmm2()
    s.block1_name = "csrmm0"
    return s.func(), "two blocks are named `csrmm0`"


@pytest.mark.parametrize("case", [_block_iter_kind, _block_init_without_reduction, _block_duplicate_name])
def test_verify_fail_block(case):
    func, msg = case()
    with pytest.raises(BlockError, match=msg):
        verify(func)


# ----------------------------------------------------------------------------------------------
# `while` loops (Stages II and III) and `extra_storage`

COUNT_DOWN = """
from sparsetir_py import script as T

@T.prim_func
def count(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (1,), "int32")
    left = T.alloc_buffer((1,), "int32", scope="local")
    left[0] = n
    while CONDITION:
        BODY
"""


@pytest.mark.parametrize(
    "condition,body,msg",
    [
        # Only the buffers the body writes can change the condition: here none does.
        (
            "n > 0",
            "A[0] = A[0] + 1",
            r"`while n > 0`: the condition reads no buffer, so it is the same before every iteration",
        ),
        ("left[0] > 0", "A[0] = A[0] + 1", r"the condition reads `left`, which the loop's body does not write"),
    ],
)
def test_verify_fail_while_loop(condition, body, msg):
    from sparsetir_py import from_script
    from sparsetir_py.ir.verify import WhileLoopError

    func = from_script(COUNT_DOWN.replace("CONDITION", condition).replace("BODY", body))
    with pytest.raises(WhileLoopError, match=msg) as info:
        verify(func)
    assert "runs never or forever" in str(info.value)
    good = from_script(COUNT_DOWN.replace("CONDITION", "left[0] > 0").replace("BODY", "left[0] = left[0] - 1"))
    verify(good)


def test_verify_fail_while_loop_in_stage1():
    """Stage I iterates axes; a `while` there is refused by name, with the alternatives."""
    from sparsetir_py import from_script
    from sparsetir_py.ir.verify import WhileLoopError

    text = """
from sparsetir_py import script as T

@T.prim_func
def f(a: T.handle, m: T.int32):
    I = T.dense_fixed(m)
    A = T.match_sparse_buffer(a, (I,), "int32")
    with T.sp_iter([I], "S", "s") as [i]:
        while A[i] > 0:
            A[i] = A[i] - 1
"""
    with pytest.raises(WhileLoopError, match=r"Stage I function has a `while` loop; .*T\.lower_bound"):
        verify(from_script(text))


def test_verify_while_condition_is_bool():
    from sparsetir_py import from_script
    from sparsetir_py.ir.stmt import While
    from sparsetir_py.ir.visit import post_order_rewrite

    good = from_script(COUNT_DOWN.replace("CONDITION", "left[0] > 0").replace("BODY", "left[0] = left[0] - 1"))
    load = BufferLoad(good.buffers[1], (i32(0),))
    bad = good.replace(
        body=post_order_rewrite(good.body, lambda n: n.replace(condition=load) if isinstance(n, While) else n)
    )
    with pytest.raises(DtypeError, match="while condition has dtype int32; expected bool"):
        verify(bad)


def test_verify_fail_extra_storage_needs_one_dimensional_storage():
    """`extra_storage` extends a one-dimensional array (an indptr over `[I]`): a buffer whose storage
    has a trailing dense dimension has no place for the extra elements."""
    s = Csrmm1()
    x = Var("x", "handle")
    s.params.append(x)
    s.buffers.append(SparseBuffer("X", (s.I, s.J, s.K), "float32", x, extra_storage=i32(1)))
    with pytest.raises(BufferDeclarationError, match="buffer `X` has extra_storage, but its storage is not one-dim"):
        verify(s.func())
    s.buffers[-1] = SparseBuffer("X", (s.I, s.J), "float32", x, extra_storage=i32(-1))
    with pytest.raises(LoopExtentError, match="extra_storage of buffer `X` is -1"):
        verify(s.func())
    s.buffers[-1] = SparseBuffer("X", (s.I, s.J), "float32", x, extra_storage=i32(1))
    verify(s.func())


ASSEMBLED = """
from sparsetir_py import script as T

@T.prim_func
def f(a: T.handle, pa: T.handle, qa: T.handle, c: T.handle, pc: T.handle, qc: T.handle, m: T.int32, n: T.int32,
      nnz_a: T.int32, nnz_c: T.int32):
    I = T.dense_fixed(m)
    J = T.dense_fixed(n)
    JA = T.sparse_variable(I, (n, nnz_a), (pa, qa), "int32"ASSEMBLE_A)
    JC = T.sparse_variable(PARENT, (n, nnz_c), (pc, qc), "int32", assemble=True)
    A = T.match_sparse_buffer(a, (I, JA), "float32")
    C = T.match_sparse_buffer(c, C_AXES, "float32")
    with T.sp_iter([I, J], "SS", "s") as [i, j]:
        BODY
"""


@pytest.mark.parametrize(
    "parent, axes, assemble_a, body, msg",
    [
        ("JA", "(I, JA, JC)", "", "C[i, 0, j] = A[i, j]", "expected a sparse_variable level under a dense_fixed root"),
        ("I", "(I, JC)", ", assemble=True", "C[i, j] = A[i, j]", "`A` is over the assembled axis `JA` but the"),
        ("I", "(I, JC)", "", "A[i, j] = C[i, j]", "`C` is over the assembled axis `JC` but the function never writes"),
        ("I", "(I, JC)", "", "C[i, j] = A[i, j] * C[i, 0]", r"`C\[i, 0\]` reads the assembled output `C`"),
    ],
)
def test_verify_fail_assemble(parent, axes, assemble_a, body, msg):
    """An assembled level (`assemble=True`) declares an output's structure: under a dense root,
    the last axis of a buffer the function writes and reads only in updates of that element."""
    from sparsetir_py import from_script
    from sparsetir_py.ir.verify import AssembleError

    text = ASSEMBLED.replace("PARENT", parent).replace("C_AXES", axes).replace("ASSEMBLE_A", assemble_a)
    with pytest.raises(AssembleError, match=msg):
        verify(from_script(text.replace("BODY", body)))
    good = ASSEMBLED.replace("PARENT", "I").replace("C_AXES", "(I, JC)").replace("ASSEMBLE_A", "")
    verify(from_script(good.replace("BODY", "C[i, j] = A[i, j] * 2.0")))
