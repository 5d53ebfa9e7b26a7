"""Random schedules on the lowered csrmm and sddmm, applied as an outside user would.

A hypothesis strategy draws a sequence of loop primitives (split with random, missing or
invalid factors; fuse of adjacent or arbitrary loops; reorder of random loop subsets; bind to
valid and invalid thread axes; parallel / vectorize / unroll; decompose_reduction; annotate;
prefetch of any buffer, with valid and invalid offsets),
on loops reached through `get_loops` (also loops that an earlier primitive removed). Each
primitive either succeeds or raises `ScheduleError` naming itself, leaving the module (the same
object) and the trace as they were; any other exception fails the test. After the sequence:

- the function verifies and its script parses back to an equal function;
- `trace.apply` and the exec'd `trace.as_python()` replay it to an equal module;
- the interpreter (and, for fewer examples, the CPU kernel) computes what scipy does, on small
  matrices with empty rows, one row, rectangular shapes, int64 indices and float64 values;
- schedules with thread bindings compile to PTX (a few examples).

Bound loops run on the CPU too (blockIdx loops as `prange`, threadIdx loops serially), so every
schedule is checked as a CPU kernel. Kernels are cached per scheduled function (its script), so
hypothesis' shrinking does not recompile. The cases hypothesis found are the explicit
regression tests at the end.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re

import corpus
import numpy as np
import pytest
import scipy.sparse as sps
from corpus import CASES, CASES_BY_NAME
from cuda_support import ptx_unavailable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedule_checks import stage2, unchanged
from strategies import csr_matrices, edge_matrices

import sparsetir_py as sp
from sparsetir_py import script as T
from sparsetir_py.driver import target_passes
from sparsetir_py.ir.stmt import Block, For, IfThenElse
from sparsetir_py.ir.visit import walk
from sparsetir_py.ops import sddmm_script, spmm_script
from sparsetir_py.schedule import state
from sparsetir_py.schedule.loops import BINDABLE
from sparsetir_py.transform.region import annotate_regions

OPS = {"spmm": spmm_script, "sddmm": sddmm_script}
INVALID_THREADS = ("threadIdx.w", "vthread", "blockIdx", "", "warp", "threadIdx.X")
FACTOR_VALUES = (4, 1, 2, 3, 8, 32)
INVALID_FACTORS = ([0, None], [None, -1], [None, None], [4], [], [2.5, None], [True, None], [None, "4"], [None, 0, 2])
ANNOTATIONS = (("atomic", True), ("pragma_unroll", 4), ("chunk_size", 2), ("note", "x"), ("pair", (1, 2)))
ODD_ANNOTATION_KEYS = ("atomic", "chunk_size", "", 3, None)
ODD_ANNOTATION_VALUES = (False, 0, -4, 2.5, "x", [1], None, {"a": 1})
# Splitting a loop of extent 1 by 4 runs 4 iterations, 3 of them guarded: repeated splits
# multiply the iterations the interpreter walks. Past this product the factors become 1.
MAX_PADDING = 256
PRIMITIVES = (
    "split",
    "fuse",
    "reorder",
    "bind",
    "parallel",
    "vectorize",
    "unroll",
    "decompose_reduction",
    "annotate",
    "prefetch",
)
#: Buffers `prefetch` names: read by csrmm / sddmm loops, or by none of them.
PREFETCH_BUFFERS = ("B", "Y", "X", "A", "J_indices", "J_indptr", "C", "nope")


# ---------------------------------------------------------------- functions and references
@functools.cache
def lowered(op: str, idtype: str = "int32", dtype: str = "float32") -> sp.IRModule:
    return sp.lower_sparse_iter(OPS[op](idtype, dtype))


def arguments(op: str, A: sps.csr_matrix, feat: int, seed: int) -> tuple[dict, np.ndarray, str]:
    """Kernel arguments (outputs filled with NaN: every element must be written), the reference,
    and the output's name."""
    m, n = A.shape
    rng = np.random.default_rng(seed)
    common = dict(a=A.data, indptr=A.indptr, indices=A.indices, m=m, n=n, feat=feat, nnz=A.nnz)
    if op == "spmm":
        B = rng.standard_normal((n, feat)).astype(A.dtype)
        C = np.full((m, feat), np.nan, A.dtype)
        return {**common, "b": B, "c": C}, A.toarray().astype(np.float64) @ B, "c"
    X = rng.standard_normal((m, feat)).astype(A.dtype)
    Y = rng.standard_normal((n, feat)).astype(A.dtype)
    C = np.full(A.nnz, np.nan, A.dtype)
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    ref = A.data * np.einsum("ij,ij->i", X[rows].astype(np.float64), Y[A.indices].astype(np.float64))
    return {**common, "x": X, "y": Y, "c": C}, ref, "c"


def tolerance(dtype) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if np.dtype(dtype) == np.float32 else {"rtol": 1e-9, "atol": 1e-9}


def small_matrices(idtype: str, dtype: str) -> list[sps.csr_matrix]:
    """An empty row, one row, rectangular shapes, no nonzeros: in the function's dtypes."""
    out = []
    for A in edge_matrices().values():
        A = sps.csr_matrix((A.data.astype(dtype), A.indices, A.indptr), shape=A.shape)
        A.indices = A.indices.astype(idtype)
        A.indptr = A.indptr.astype(idtype)
        out.append(A)
    rng = np.random.default_rng(3)
    mask = rng.random((13, 9)) < 0.4
    mask[4] = False
    mask[7] = True  # a full row longer than most split factors
    rows, cols = np.nonzero(mask)
    B = sps.csr_matrix((rng.uniform(-1, 1, len(rows)).astype(dtype), cols, np.r_[0, np.cumsum(mask.sum(1))]), (13, 9))
    B.indices = B.indices.astype(idtype)
    B.indptr = B.indptr.astype(idtype)
    out.append(B)
    return out


def check_result(op: str, run, A: sps.csr_matrix, feat: int, seed: int) -> None:
    args, ref, out = arguments(op, A, feat, seed)
    run(**args)
    np.testing.assert_allclose(args[out], ref, **tolerance(A.dtype))


# ---------------------------------------------------------------- random schedules
def loops_in_order(func) -> list[For]:
    return [n for n in walk(func.body) if isinstance(n, For)]


def find_block(func, name: str) -> Block:
    return state.find_block(func, name, "test")


def name_of(handle) -> str:
    return getattr(handle, "name", repr(handle))


def block_names(func) -> list[str]:
    return [n.name for n in walk(func.body) if isinstance(n, Block)]


class RandomScheduler:
    """Applies drawn primitives to a schedule and checks the all-or-nothing contract of each."""

    def __init__(self, data, mod: sp.IRModule):
        self.data = data
        self.sch = sp.Schedule(mod)
        self.seen: list = []  # every loop handle obtained so far (some are gone later)
        self.log: list[str] = []
        self.applied: list[str] = []
        self.padding = 1  # product of the constant split factors so far

    def draw(self, strategy, label: str):
        return self.data.draw(strategy, label=label)

    def rarely(self, label: str, one_in: int) -> bool:
        """True about once in `one_in` draws; shrinking goes to False (the common case)."""
        return self.draw(st.integers(0, one_in - 1), label) == one_in - 1

    def block(self, with_init: bool = False):
        names = block_names(self.sch.func)
        if with_init and not self.rarely("any block?", 5):
            names = [n for n in names if find_block(self.sch.func, n).init is not None] or names
        return self.sch.get_block(self.draw(st.sampled_from(names), "block"))

    def loops_of(self, block) -> list:
        loops = self.sch.get_loops(block)
        self.seen.extend(lp for lp in loops if lp not in self.seen)
        return loops

    def loops_of_random_block(self) -> list:
        return self.loops_of(self.block())

    def loop(self, loops=None):
        """A loop of a random block; sometimes one seen before (maybe gone), or not a loop at all."""
        loops = self.loops_of_random_block() if loops is None else loops
        if self.rarely("not a loop?", 25):
            return self.draw(st.sampled_from([self.sch.get_block(block_names(self.sch.func)[0]), "i", None]), "junk")
        if self.seen and (not loops or self.rarely("stale?", 8)):
            return self.draw(st.sampled_from(self.seen), "any seen loop")
        return self.draw(st.sampled_from(loops), "loop")

    def attempt(self, name: str, call) -> bool:
        """Run one primitive: it succeeds, or raises ScheduleError and changes nothing."""
        before, n = self.sch.mod, len(self.sch.trace.instructions)
        try:
            out = call()
        except sp.ScheduleError as e:
            assert str(e).startswith(f"in `{name}`:"), f"message of {name} does not name it: {e}"
            assert self.sch.mod is before, f"failing {name} changed the module"
            assert sp.structural_equal(self.sch.mod, before)
            assert len(self.sch.trace.instructions) == n, f"failing {name} was recorded"
            self.log.append(f"{name} -> ScheduleError: {e}")
            return False
        if isinstance(out, list):
            self.seen.extend(out)
        elif out is not None and hasattr(out, "var"):
            self.seen.append(out)
        self.log.append(f"{name} -> ok")
        self.applied.append(name)
        return True

    def step(self, primitive: str) -> None:
        sch, draw = self.sch, self.draw
        if primitive == "split":
            lp = self.loop()
            if self.rarely("invalid factors?", 6):
                factors = draw(st.sampled_from(INVALID_FACTORS), "factors")
            else:
                factors = draw(st.lists(st.sampled_from(FACTOR_VALUES), min_size=2, max_size=3), "factors")
                if None not in factors and not self.rarely("no None?", 4):
                    factors[draw(st.integers(0, len(factors) - 1), "None at")] = None
                if self.padding * math.prod(f for f in factors if f is not None) > MAX_PADDING:
                    factors = [None if f is None else 1 for f in factors]
            self.log.append(f"split({name_of(lp)}, {factors})")
            if self.attempt("split", lambda: sch.split(lp, factors)):
                self.padding *= math.prod(f for f in factors if f is not None)
        elif primitive == "fuse":
            loops = self.loops_of_random_block()
            if len(loops) >= 2 and not self.rarely("arbitrary?", 5):
                start = draw(st.integers(0, len(loops) - 2), "start")
                stop = draw(st.integers(start + 2, len(loops)), "stop")
                group = loops[start:stop]
            else:
                group = draw(
                    st.lists(
                        st.sampled_from(self.seen or loops or [None]),
                        min_size=self.draw(st.sampled_from([2, 0, 1]), "size"),
                        max_size=3,
                    ),
                    "group",
                )
            self.log.append(f"fuse({', '.join(map(name_of, group))})")
            self.attempt("fuse", lambda: sch.fuse(*group))
        elif primitive == "reorder":
            loops = self.loops_of_random_block()
            if len(loops) >= 2 and not self.rarely("arbitrary?", 5):
                group = draw(st.permutations(loops), "order")[: draw(st.integers(2, len(loops)), "how many")]
            else:
                group = draw(
                    st.lists(
                        st.sampled_from(self.seen or loops or [None]),
                        min_size=self.draw(st.sampled_from([2, 0, 1]), "size"),
                        max_size=3,
                    ),
                    "group",
                )
            self.log.append(f"reorder({', '.join(map(name_of, group))})")
            self.attempt("reorder", lambda: sch.reorder(*group))
        elif primitive == "bind":
            lp = self.loop()
            threads = INVALID_THREADS if self.rarely("invalid thread?", 6) else BINDABLE
            thread = draw(st.sampled_from(threads), "thread")
            self.log.append(f"bind({name_of(lp)}, {thread!r})")
            self.attempt("bind", lambda: sch.bind(lp, thread))
        elif primitive in ("parallel", "vectorize", "unroll"):
            lp = self.loop()
            self.log.append(f"{primitive}({name_of(lp)})")
            self.attempt(primitive, lambda: getattr(sch, primitive)(lp))
        elif primitive == "decompose_reduction":
            blk = self.block(with_init=True)
            lp = self.loop(None if self.rarely("loop of another block?", 5) else self.loops_of(blk))
            self.log.append(f"decompose_reduction({blk.name}, {name_of(lp)})")
            self.attempt("decompose_reduction", lambda: sch.decompose_reduction(blk, lp))
        elif primitive == "annotate":
            target = self.block() if draw(st.booleans(), "block?") else self.loop()
            if self.rarely("odd annotation?", 4):
                key = draw(st.sampled_from(ODD_ANNOTATION_KEYS), "key")
                value = draw(st.sampled_from(ODD_ANNOTATION_VALUES), "value")
            else:
                key, value = draw(st.sampled_from(ANNOTATIONS), "annotation")
            self.log.append(f"annotate({name_of(target)}, {key!r}, {value!r})")
            self.attempt("annotate", lambda: sch.annotate(target, key, value))
        elif primitive == "prefetch":
            lp = self.loop()
            buffer = draw(st.sampled_from(PREFETCH_BUFFERS), "buffer")
            offset = draw(st.sampled_from((1, 2, 5, 0, -1)), "offset")
            lines = draw(st.sampled_from((None, 1, 2, 0)), "lines")
            self.log.append(f"prefetch({name_of(lp)}, {buffer!r}, {offset!r}, {lines!r})")
            self.attempt("prefetch", lambda: sch.prefetch(lp, buffer, offset, lines))
        else:
            raise AssertionError(primitive)

    def run(self, steps: int, primitives=PRIMITIVES) -> sp.Schedule:
        with self.explained():
            for _ in range(steps):
                self.step(self.draw(st.sampled_from(primitives), "primitive"))
        return self.sch

    @contextlib.contextmanager
    def explained(self):
        """Failures inside carry the primitives applied so far and the current function."""
        try:
            yield
        except BaseException as e:
            e.add_note("primitives:\n  " + "\n  ".join(self.log) + "\n" + self.sch.func.script())
            raise


def check_replay(sch: sp.Schedule, unscheduled: sp.IRModule) -> None:
    f = sch.mod["main"]
    sp.verify(f)
    sp.assert_structural_equal(f, sp.from_script(f.script()))
    sp.assert_structural_equal(sch.trace.apply(unscheduled), sch.mod)
    namespace = {"sch": sp.Schedule(unscheduled)}
    exec(sch.trace.as_python(), namespace)
    sp.assert_structural_equal(namespace["sch"].mod, sch.mod)


_KERNELS: dict[tuple[str, str], object] = {}


def cpu_kernel(mod: sp.IRModule):
    """The CPU kernel of a scheduled module, built once per distinct function, after the target
    passes that `sp.compile` runs (driver.py), so that it is the kernel `sp.compile` makes."""
    key = ("cpu", mod["main"].script())
    if key not in _KERNELS:
        flat = sp.lower_sparse_buffer(mod)
        _KERNELS[key] = sp.build(target_passes(flat, "cpu"), target="cpu")
    return _KERNELS[key]


# ---------------------------------------------------------------- properties
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_schedules_interpreted(op, data):
    """Many short random schedules: all-or-nothing primitives, replay, interpreter vs scipy."""
    mod = lowered(op)
    tester = RandomScheduler(data, mod)
    sch = tester.run(data.draw(st.integers(1, 10), label="steps"))
    with tester.explained():
        check_replay(sch, mod)
        for k, A in enumerate(small_matrices("int32", "float32")[-4:]):
            # Width 3: not a multiple of any split factor, and the interpreter's time grows with it.
            check_result(op, lambda **kw: sp.interpret(sch.mod["main"], **kw), A, feat=3, seed=k)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), idtype=st.sampled_from(["int32", "int64"]), dtype=st.sampled_from(["float32", "float64"]))
def test_random_schedules_cpu_kernel(op, data, idtype, dtype):
    """The CPU kernel of a random schedule (also through `sp.compile` with the printed trace as
    its schedule) equals scipy on edge-case and random matrices."""
    mod = lowered(op, idtype, dtype)
    tester = RandomScheduler(data, mod)
    sch = tester.run(data.draw(st.integers(2, 8), label="steps"))
    A = data.draw(csr_matrices(max_rows=20, max_cols=20, value_dtypes=(dtype,), index_dtypes=(idtype,)), "A")
    feat = data.draw(st.sampled_from([1, 5, 33]), "feat")
    with tester.explained():
        check_replay(sch, mod)
        kernel = cpu_kernel(sch.mod)
        # The printed trace as the schedule of `sp.compile` generates the same kernel.
        replayed = sp.compile(OPS[op](idtype, dtype), "cpu", schedule=lambda s: exec(sch.trace.as_python(), {"sch": s}))
        assert replayed.source == kernel.source
        for k, M in enumerate([*small_matrices(idtype, dtype), A]):
            check_result(op, kernel, M, feat=feat, seed=k)


# A bound loop whose extent is data (a row length) cannot size the launch: a build error, not a
# schedule error (the same schedule runs on the CPU).
LAUNCH_ERROR = "cannot be computed from the scalar parameters at launch"


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_bound_schedules_compile_to_ptx(op, data):
    """Random schedules that bind loops to threads: a CUDA kernel with a PTX entry, or a launch
    error naming the loop whose extent is data-dependent."""
    if ptx_unavailable() is not None:
        pytest.skip(ptx_unavailable())
    mod = lowered(op)
    tester = RandomScheduler(data, mod)
    sch = tester.run(data.draw(st.integers(2, 6), label="steps"), ("split", "bind", "bind", "fuse", "reorder"))
    with tester.explained():
        check_replay(sch, mod)
        try:
            kernel = sp.build(sp.lower_sparse_buffer(sch.mod), target="cuda")
        except sp.CodegenError as e:
            assert LAUNCH_ERROR in str(e)
            return
        ptx = kernel.ptx(cc=(8, 0))
        assert ".visible .entry" in ptx and ".target sm_80" in ptx


@functools.cache
def lowered_case(name: str) -> sp.IRModule:
    return sp.lower_sparse_iter(CASES_BY_NAME[name].build("int32", "float32"))


@pytest.mark.parametrize("name", [case.name for case in CASES])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_schedules_on_the_corpus(name, data):
    """Every corpus operator (several blocks, constant and data-dependent extents, softmax's
    sequence of reductions): random schedules keep the interpreter equal to the reference."""
    case = CASES_BY_NAME[name]
    mod = lowered_case(name)
    tester = RandomScheduler(data, mod)
    sch = tester.run(data.draw(st.integers(1, 8), label="steps"))
    A = small_matrices("int32", "float32")[-1]
    A = corpus.prepare_csr(A, "int32", "float32")
    kwargs, outputs = case.make_args(A, np.random.default_rng(0), "int32", "float32", feat=5)
    if name == "csr2bsr":
        kwargs["b"][:] = 0  # the script writes only the stored entries of each block
    expected = case.reference(A, kwargs)
    with tester.explained():
        check_replay(sch, mod)
        sp.interpret(sch.mod["main"], **kwargs)
        for out in outputs:
            scale = max(1.0, float(np.abs(expected[out]).max(initial=0.0)))
            np.testing.assert_allclose(kwargs[out], expected[out], rtol=1e-4, atol=1e-4 * scale, err_msg=out)


# ---------------------------------------------------------------- regressions found above


def test_split_fail_constant_factors_on_a_symbolic_extent():
    """split(i, [1, 1]) on `m` rows used to be accepted: rows past the first were silently left
    unwritten. Without a None factor the product must provably cover the extent."""
    sch = sp.Schedule(lowered("spmm"))
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    unchanged(sch, lambda: sch.split(i, [1, 1]), r"in `split`: expected factors whose product covers the extent m ")
    j, k = sch.get_loops(sch.get_block("csrmm1"))
    unchanged(
        sch,
        lambda: sch.split(j, [2, 3]),
        r"covers the extent J_indptr\[vi \+ 1\] - J_indptr\[vi\] of `j` \(or one None factor\), but got \[2, 3\]",
    )
    unchanged(sch, lambda: sch.split(k, [4, 8]), "covers the extent feat of `k`")
    _, ii = sch.split(i, [None, 4])
    sch.split(ii, [2, 2])  # 2 * 2 covers the constant 4
    check_replay(sch, lowered("spmm"))
    for k, A in enumerate(small_matrices("int32", "float32")):
        check_result("spmm", lambda **kw: sp.interpret(sch.mod["main"], **kw), A, feat=5, seed=k)


@pytest.mark.parametrize("outer_first", [True, False])
def test_bind_fail_a_tag_already_bound_around_or_inside(outer_first):
    """Binding `j` to blockIdx.x inside `i` bound to blockIdx.x used to give a function that
    `sp.verify` rejects; either order is now a ScheduleError."""
    sch = sp.Schedule(lowered("sddmm"))
    (i,) = sch.get_loops(sch.get_block("sddmm0"))
    j, _ = sch.get_loops(sch.get_block("sddmm1"))
    first, second = (i, j) if outer_first else (j, i)
    sch.bind(first, "blockIdx.x")
    unchanged(
        sch,
        lambda: sch.bind(second, "blockIdx.x"),
        f"in `bind`: expected no loop bound to blockIdx.x around or inside `{second.name}`, but `{first.name}` is",
    )
    sch.bind(second, "threadIdx.x")
    check_replay(sch, lowered("sddmm"))


def test_split_guards_the_blocks_so_decompose_reduction_keeps_the_guard():
    """Splitting SDDMM's `j` (whose body is the `k` loop, not a block) used to guard the body
    with an `if`, which decompose_reduction at `j_inner` did not copy: the init block wrote past
    the end of each row (out of bounds on the last one). The guard is now a `T.where` on the
    block, as in TVM, and the init block gets it."""
    mod = lowered("sddmm")
    sch = sp.Schedule(mod)
    j, _ = sch.get_loops(sch.get_block("sddmm1"))
    _, ji = sch.split(j, [None, 4])
    init = sch.decompose_reduction(sch.get_block("sddmm1"), ji)
    func = sch.mod["main"]
    assert find_block(func, "sddmm1").predicate is not None
    assert find_block(func, init.name).predicate is not None
    assert not any(isinstance(n, IfThenElse) and "j_outer" in str(n.condition) for n in walk(func.body))
    check_replay(sch, mod)
    kernel = cpu_kernel(sch.mod)
    for k, A in enumerate(small_matrices("int32", "float32")):
        check_result("sddmm", lambda **kw: sp.interpret(sch.mod["main"], **kw), A, feat=5, seed=k)
        check_result("sddmm", kernel, A, feat=5, seed=k)


@T.prim_func
def triangle(a: T.handle, c: T.handle, n: T.int32):
    T.func_attr({"stage": 2})
    A = T.match_buffer(a, (n, n), "float32")
    C = T.match_buffer(c, (n, n), "float32")
    for i in T.serial(n):
        for j in T.serial(i + 1):
            with T.block("tri"):
                vi = T.axis.spatial(n, i)
                vj = T.axis.spatial(n, j)
                C[vi, vj] = A[vi, vj] * T.float32(2)


def test_split_guard_stays_an_if_around_a_loop_that_uses_the_split_loop():
    """`j` runs to `i + 1`: as a block predicate the guard would come after `j` already ran past
    the rows, so the split of `i` guards its body with an `if` (and the block stays unguarded)."""
    mod = sp.IRModule.from_any(annotate_regions(triangle))
    sch = sp.Schedule(mod)
    i, _ = sch.get_loops(sch.get_block("tri"))
    sch.split(i, [None, 4])
    func = sch.mod["main"]
    assert find_block(func, "tri").predicate is None
    assert "if i_outer * 4 + i_inner < n:" in func.script()
    check_replay(sch, mod)
    A = np.arange(36, dtype=np.float32).reshape(6, 6)
    C = np.zeros((6, 6), np.float32)
    sp.interpret(func, a=A, c=C, n=6)
    np.testing.assert_array_equal(C, np.tril(2 * A))


def test_decompose_reduction_keeps_an_if_guard():
    """SDDMM with `j` split by hand and guarded by an `if` around the `k` loop (the form split
    used to emit): the init block of decompose_reduction at `j_inner` must be guarded too."""
    mod = lowered("sddmm")
    func = stage2(
        mod,
        """
        for i in T.serial(m):
            with T.block("sddmm0"):
                vi = T.axis.spatial(m, i)
                for j_outer in T.serial((J_indptr[vi + 1] - J_indptr[vi] + 3) // 4):
                    for j_inner in T.serial(4):
                        if j_outer * 4 + j_inner < J_indptr[vi + 1] - J_indptr[vi]:
                            for k in T.serial(feat):
                                with T.block("sddmm1"):
                                    vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j_outer * 4 + j_inner)
                                    vk = T.axis.reduce(feat, k)
                                    with T.init():
                                        C[vi, vj] = T.float32(0.0)
                                    C[vi, vj] = C[vi, vj] + A[vi, vj] * X[vi, vk] * Y[J_indices[vi, vj], vk]
        """,
    )
    sch = sp.Schedule(func)
    _, j_inner = sch.get_loops(sch.get_block("sddmm1"))[:2]
    sch.decompose_reduction(sch.get_block("sddmm1"), j_inner)
    A = small_matrices("int32", "float32")[-1]  # row lengths that are not multiples of 4
    check_result("sddmm", lambda **kw: sp.interpret(sch.mod["main"], **kw), A, feat=5, seed=0)


def test_decompose_reduction_guards_spatial_ifs_and_refuses_mixed_ones():
    """An `if` over reduction loops only limits reduction steps: the init (for every spatial point)
    ignores it. One that mixes a spatial and a reduction loop cannot guard the init: refused."""
    mod = lowered("sddmm")
    body = """
        for i in T.serial(m):
            with T.block("sddmm0"):
                vi = T.axis.spatial(m, i)
                for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                    for k in T.serial(feat):
                        if {cond}:
                            with T.block("sddmm1"):
                                vj = T.axis.spatial(J_indptr[vi + 1] - J_indptr[vi], j)
                                vk = T.axis.reduce(feat, k)
                                with T.init():
                                    C[vi, vj] = T.float32(0.0)
                                C[vi, vj] = C[vi, vj] + A[vi, vj] * X[vi, vk] * Y[J_indices[vi, vj], vk]
        """
    reduction_only = sp.Schedule(stage2(mod, body.format(cond="k < feat")))
    j, _ = reduction_only.get_loops(reduction_only.get_block("sddmm1"))
    reduction_only.decompose_reduction(reduction_only.get_block("sddmm1"), j)
    A = small_matrices("int32", "float32")[-1]
    check_result("sddmm", lambda **kw: sp.interpret(reduction_only.mod["main"], **kw), A, feat=5, seed=0)
    mixed = sp.Schedule(stage2(mod, body.format(cond="j + k < feat + 100")))
    block = mixed.get_block("sddmm1")
    j, _ = mixed.get_loops(block)
    unchanged(
        mixed,
        lambda: mixed.decompose_reduction(block, j),
        "in `decompose_reduction`: expected no `if` between the loop and `sddmm1` whose condition mixes",
    )


@pytest.mark.parametrize("value", [0, -4, 2.5, "x", True])
def test_annotate_fail_chunk_size_not_a_positive_int(value):
    """An invalid "chunk_size" used to be accepted by annotate and fail only in `sp.build` (a
    CodegenError), or, for True, to build as a chunk of 1."""
    sch = sp.Schedule(lowered("spmm"))
    (i,) = sch.get_loops(sch.get_block("csrmm0"))
    sch.parallel(i)
    unchanged(
        sch,
        lambda: sch.annotate(i, "chunk_size", value),
        f'in `annotate`: expected a positive int for "chunk_size", but got {re.escape(repr(value))}',
    )
    b0 = sch.get_block("csrmm0")
    unchanged(
        sch,
        lambda: sch.annotate(b0, "chunk_size", 4),
        'in `annotate`: expected a loop for "chunk_size", but got block `csrmm0`',
    )
    sch.annotate(i, "chunk_size", 3)
    check_replay(sch, lowered("spmm"))
    kernel = cpu_kernel(sch.mod)
    assert "set_chunksize(3)" in kernel.source
    check_result("spmm", kernel, small_matrices("int32", "float32")[-1], feat=5, seed=0)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_rfactor_of_the_only_reduction_loop(op):
    """rfactor of a block's only reduction loop: each partial is one term, so the rf block has no
    init (an init without a reduction iterator is invalid); the function verifies, replays and
    computes the same."""
    mod = lowered(op)
    sch = sp.Schedule(mod)
    j, k = sch.get_loops(sch.get_block(f"{sch.func.name}1"))
    sch.rfactor(j if op == "spmm" else k, 0)
    (rf,) = [n for n in walk(sch.mod["main"].body) if isinstance(n, Block) and n.name.endswith("1_rf")]
    assert rf.init is None
    check_replay(sch, mod)
    check_result(op, lambda **kw: sp.interpret(sch.mod["main"], **kw), small_matrices("int32", "float32")[-1], 5, 0)
