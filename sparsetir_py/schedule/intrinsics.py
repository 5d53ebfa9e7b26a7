"""The tensorize registry: each intrinsic is an IR description plus an implementation per target.

A description is a Stage II function in script form: one serial loop of a fixed extent (the
intrinsic's *width*) around one block whose single reduction iterator is bound to the loop, and
whose body accumulates into a one-element buffer `ACC`:

    for k in T.serial(32):
        with T.block("update"):
            vk = T.axis.reduce(32, k)
            ACC[0] = ACC[0] + TERM[vk]

`tensorize` (`schedule/tensorize.py`) matches a loop of the function against it. The buffers of
the description are pattern variables: `ACC[0]` stands for the accumulator, any access that does
not depend on the loop (`C[vi, vj]`), and a buffer indexed by `vk` for an *operand*, any
expression of the reduction iterator (`TERM[vk]` matches `A[vi, vj] * X[vi, vk] * Y[...]`).
Arithmetic must match operator for operator (`+` and `*` either way round). The result is a
`Match`; the implementation for the chosen target turns it into the statement that replaces the
loop (inside a block that keeps the original block's name, its other iterators, its init and the
part of its predicate that does not depend on the loop).

Shipped intrinsics (`tensor_intrins()` lists every registered one):

- `warp_sum_32` (target "cuda"): the 32 iterations run on the 32 lanes of a warp (the loop is
  bound to `threadIdx.x`); each lane computes its term into a local register, five
  `T.shfl_down_sync` steps (16, 8, 4, 2, 1) add them up in lane 0, and lane 0 adds the sum to the
  accumulator. The kernel must launch `threadIdx.x` in whole warps (every loop bound to it has a
  constant extent that is a multiple of 32), so `threadIdx.y` numbers the warps of a block.
- `dot_2`, `dot_3`, `dot_4`, `dot_6`, `dot_8`, `dot_16` (targets "cpu" and "cuda"): `ACC[0] = ACC[0] + A[vk] * B[vk]`,
  unrolled into one expression whose products are summed as a balanced tree (independent adds
  that the CPU can overlap and LLVM can vectorise).

Where the loop was split with a guard (`T.where(k_outer * 32 + k_inner < feat)`), lanes past the
end contribute 0 (`T.if_then_else`), so every lane still takes part in the shuffles.

`register_tensor_intrin` adds an intrinsic; `get_tensor_intrin(name)` looks one up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache

from ..errors import ScheduleError
from ..ir import make as mk
from ..ir.buffer import FlatBuffer
from ..ir.expr import BufferLoad, Call, FloatImm, IntImm, PrimExpr, Select
from ..ir.func import PrimFunc
from ..ir.op import INTRINSICS
from ..ir.stmt import Allocate, Block, BufferStore, For, IfThenElse, IterVar, Stmt, seq
from ..ir.visit import substitute, walk

__all__ = [
    "FULL_MASK",
    "WARP_SIZE",
    "IntrinImpl",
    "Match",
    "TensorIntrin",
    "enclosing_loops",
    "get_tensor_intrin",
    "register_tensor_intrin",
    "tensor_intrins",
]

# T.shfl_down_sync(mask, value, delta), which warp_sum_32 emits, is registered in `ir/op.py` (so the
# script frontend knows it) and rendered for CUDA by `codegen/cuda.py` (run time: `runtime/cuda_warp.py`).
assert "shfl_down_sync" in INTRINSICS

WARP_SIZE = 32
FULL_MASK = IntImm(0xFFFFFFFF, "int64")  # every lane of the warp; int64 so Numba truncates it to 32 bits


@dataclass(frozen=True)
class Match:
    """A loop that matched an intrinsic's description, in terms of the block that will hold it.

    - `loop`, `block`: the matched loop and the block directly under it.
    - `lane_iter`: the block's reduction iterator bound to the loop (`vk = outer + loop_var`).
    - `outer_iter`: the new block's iterator over the loop's outer part (`vk_o`, bound to
      `k_outer`), or None when the loop was the whole reduction.
    - `outer`: the value of `lane_iter` at the loop's first iteration, as an expression of the
      new block's iterators (`vk_o * 32`), or None when it is 0.
    - `accumulator`: the access the block accumulates into (`C[vi, vj]`).
    - `operands`: description buffer name -> the matched expression (of `lane_iter.var`).
    - `guarded`: iterations where `lane_iter` reaches its extent must contribute nothing (the
      block had a split guard that depends on the loop).
    - `init_value`: when the loop is the block's whole reduction and the block initialises the
      accumulator (`C[vi, vj] = c`), `c`: the result is stored as `c + sum` in one write instead
      of an init store and an update (on CUDA the init would run in every lane while one lane
      adds the sum: two unordered writes to one address).
    """

    intrin: TensorIntrin
    loop: For
    block: Block
    lane_iter: IterVar
    outer_iter: IterVar | None
    outer: PrimExpr | None
    accumulator: BufferLoad
    operands: Mapping[str, PrimExpr]
    guarded: bool
    init_value: PrimExpr | None = None
    #: the rest of the block's predicate, where the implementation takes it (`lifts_predicate`):
    #: then the block runs unpredicated and the implementation applies it itself
    predicate: PrimExpr | None = None

    @property
    def dtype(self) -> str:
        return self.accumulator.dtype

    @property
    def width(self) -> int:
        return self.intrin.width

    def position(self, lane: PrimExpr) -> PrimExpr:
        """The value of the reduction iterator at `lane` (a loop variable or a constant)."""
        return lane if self.outer is None else mk.add(self.outer, lane)

    def operand(self, name: str, lane: PrimExpr) -> PrimExpr:
        """Operand `name` of the description at `lane`."""
        return substitute(self.operands[name], {self.lane_iter.var: self.position(lane)})

    def in_range(self, lane: PrimExpr) -> PrimExpr | None:
        """The condition that `lane` is a real iteration (None: all are)."""
        if not self.guarded:
            return None
        return mk.cmp("<", self.position(lane), self.lane_iter.extent)

    def guard(self, lane: PrimExpr, value: PrimExpr) -> PrimExpr:
        """`value` at a real iteration, 0 past the end."""
        cond = self.in_range(lane)
        return value if cond is None else Select(cond, value, zero(value.dtype))

    def accumulate(self, value: PrimExpr) -> Stmt:
        """`ACC = ACC + value` (or `ACC = init_value + value`), written to the matched accumulator."""
        acc = self.accumulator
        return BufferStore(acc.buffer, acc.indices, (acc if self.init_value is None else self.init_value) + value)


@dataclass(frozen=True)
class IntrinImpl:
    """One target's implementation: `build(match)` gives the statement that replaces the loop;
    `check(func, match)` raises `ScheduleError` when the target cannot implement this match."""

    target: str
    build: Callable[[Match], Stmt]
    check: Callable[[PrimFunc, Match], None] | None = None
    #: whether `build` applies the block's predicate itself (`Match.predicate`): a shuffle of a
    #: group smaller than a warp must run in every lane, also where a group's element is past the end
    lifts_predicate: bool = False


@dataclass(frozen=True)
class TensorIntrin:
    """An intrinsic: the description (a Stage II script template) and its implementations.

    `description_template` is formatted with `dtype` and `width`; operands are the description's
    buffers other than `ACC`.
    """

    name: str
    width: int
    dtypes: tuple[str, ...]
    description_template: str
    implementations: Mapping[str, IntrinImpl] = field(default_factory=dict)

    def description(self, dtype: str) -> PrimFunc:
        """The Stage II description for accumulators of `dtype`."""
        return _parse_description(self.description_template, dtype, self.width)

    def implementation(self, target: str | None) -> IntrinImpl:
        """The implementation for `target`; None picks the only one, else the CPU one."""
        if target is None:
            if len(self.implementations) == 1:
                return next(iter(self.implementations.values()))
            target = "cpu"
        impl = self.implementations.get(target)
        if impl is None:
            raise ScheduleError(
                f"in `tensorize`: expected a target that intrinsic `{self.name}` implements "
                f"({', '.join(self.implementations)}), but got {target!r}"
            )
        return impl


@cache
def _parse_description(template: str, dtype: str, width: int) -> PrimFunc:
    from ..script import from_script
    from ..transform.region import annotate_regions

    return annotate_regions(from_script(template.format(dtype=dtype, width=width)))


def zero(dtype: str) -> PrimExpr:
    return FloatImm(0.0, dtype) if dtype.startswith("float") else IntImm(0, dtype)


# -------------------------------------------------------------------- warp_sum (CUDA)
WARP_SUM_DESCRIPTION = """\
from sparsetir_py import script as T


@T.prim_func
def warp_sum_{width}(acc: T.handle, term: T.handle):
    T.func_attr({{"stage": 2}})
    ACC = T.match_buffer(acc, (1,), "{dtype}")
    TERM = T.match_buffer(term, ({width},), "{dtype}")
    for k in T.serial({width}):
        with T.block("update"):
            vk = T.axis.reduce({width}, k)
            ACC[0] = ACC[0] + TERM[vk]
"""


def _warp_sum_cuda(m: Match) -> Stmt:
    """The loop bound to `threadIdx.x`: a term per lane, a shuffle tree, lane 0 accumulates.
    `warp_sum_8` / `warp_sum_16` do the same in groups of 8 / 16 lanes of a warp (`threadIdx.x`
    of that extent, so a group is one `threadIdx.y` row): the tree starts at half the group, lane
    0 of a group reads only lanes of its group, and the block's predicate (an element past the
    end, which differs between the groups of one warp) selects the term and guards the store
    instead of skipping the shuffles: every lane of the warp runs them, as a full mask requires.

    for k_inner in T.thread_binding(32, thread="threadIdx.x"):
        red_buf = T.allocate((1,), "float32", "local")
        red_buf[0] = <term at vk_o * 32 + k_inner>      # 0 past the end when guarded
        red_buf[0] = red_buf[0] + T.shfl_down_sync(T.int64(4294967295), red_buf[0], 16)
        ...                                             # 8, 4, 2, 1
        if k_inner == 0:
            C[vi, vj] = C[vi, vj] + red_buf[0]
    """
    lane = m.loop.loop_var
    red = FlatBuffer("red_buf", (IntImm(1, "int32"),), m.dtype, scope="local")
    first = IntImm(0, "int32")
    value = BufferLoad(red, (first,))
    term = m.guard(lane, m.operand("TERM", lane))
    if m.predicate is not None:
        term = Select(m.predicate, term, zero(term.dtype))
    stmts: list[Stmt] = [BufferStore(red, (first,), term)]
    delta = m.width // 2
    while delta >= 1:
        shuffled = Call("shfl_down_sync", (FULL_MASK, value, IntImm(delta, "int32")), m.dtype)
        stmts.append(BufferStore(red, (first,), value + shuffled))
        delta //= 2
    leader = mk.cmp("==", lane, IntImm(0, lane.dtype))
    if m.predicate is not None:
        leader = mk.conjunction([leader, m.predicate])
    stmts.append(IfThenElse(leader, m.accumulate(value)))
    body = Allocate(red, seq(*stmts))
    return For(lane, IntImm(0, lane.dtype), IntImm(m.width, lane.dtype), "thread_binding", body, "threadIdx.x")


def _check_warp(func: PrimFunc, m: Match) -> None:
    """The lanes must be whole warps: no enclosing `threadIdx.x` loop, and every other loop bound
    to `threadIdx.x` spans whole warps (so a block's warps are its `threadIdx.y`/`z` rows)."""
    enclosing = enclosing_loops(func.body, m.loop)
    for loop in enclosing:
        if loop.thread == "threadIdx.x":
            raise ScheduleError(
                f"in `tensorize`: expected no enclosing loop bound to threadIdx.x (the intrinsic binds its lanes to "
                f"it), but `{m.loop.loop_var.name}` is inside `{loop.loop_var.name}`"
            )
    if m.width != WARP_SIZE:
        return _check_warp_groups(m, enclosing)
    for n in walk(func.body):
        if not (isinstance(n, For) and n.thread == "threadIdx.x"):
            continue
        if not (isinstance(n.extent, IntImm) and n.extent.value % WARP_SIZE == 0):
            raise ScheduleError(
                f"in `tensorize`: expected every loop bound to threadIdx.x to span whole warps (a constant multiple "
                f"of {WARP_SIZE}), but `{n.loop_var.name}` has extent {_show(n.extent)}"
            )


def _check_warp_groups(m: Match, enclosing: list[For]) -> None:
    """Groups of `m.width` lanes (8 or 16): in the launch's own nest (the top-level loop around
    the lanes; other nests launch apart) every loop bound to `threadIdx.x` has the group's extent,
    so lanes `x + width * y` make a group of each `threadIdx.y` row, aligned in its warp; the
    enclosing `threadIdx.y`/`z` loops make whole warps (a full-mask shuffle names 32 lanes)."""
    group = m.width
    for n in walk(enclosing[0] if enclosing else m.loop):
        if isinstance(n, For) and n.thread == "threadIdx.x" and n.extent != IntImm(group, n.extent.dtype):
            raise ScheduleError(
                f"in `tensorize`: expected every loop bound to threadIdx.x in the launch of `warp_sum_{group}` to have "
                f"its {group} lanes, but `{n.loop_var.name}` has extent {_show(n.extent)}"
            )
    rows = 1
    for loop in enclosing:
        if loop.thread in ("threadIdx.y", "threadIdx.z"):
            rows *= loop.extent.value if isinstance(loop.extent, IntImm) else 0
    if rows == 0 or (rows * group) % WARP_SIZE:
        raise ScheduleError(
            f"in `tensorize`: expected the threadIdx.y/z loops around `warp_sum_{group}` to make whole warps "
            f"({group} lanes times their extents a multiple of {WARP_SIZE}), but they make {rows} row(s) of {group}"
        )


def enclosing_loops(root: Stmt, target: Stmt) -> list[For]:
    """The loops on the path from `root` down to `target`, outermost first."""
    path: list[For] = []

    def visit(s) -> bool:
        if s is target:
            return True
        if not isinstance(s, Stmt):
            return False
        if isinstance(s, For):
            path.append(s)
        for _, value in s.fields():
            items = value if isinstance(value, tuple) else (value,)
            if any(visit(v) for v in items if isinstance(v, Stmt)):
                return True
        if isinstance(s, For):
            path.pop()
        return False

    visit(root)
    return path


def _show(e: PrimExpr) -> str:
    from ..ir.printer import ScriptPrinter

    return ScriptPrinter().expr(e)


# -------------------------------------------------------------------- dot (unrolled)
DOT_DESCRIPTION = """\
from sparsetir_py import script as T


@T.prim_func
def dot_{width}(acc: T.handle, a: T.handle, b: T.handle):
    T.func_attr({{"stage": 2}})
    ACC = T.match_buffer(acc, (1,), "{dtype}")
    A = T.match_buffer(a, ({width},), "{dtype}")
    B = T.match_buffer(b, ({width},), "{dtype}")
    for k in T.serial({width}):
        with T.block("update"):
            vk = T.axis.reduce({width}, k)
            ACC[0] = ACC[0] + A[vk] * B[vk]
"""


def _dot_unrolled(m: Match) -> Stmt:
    """`C = C + ((a0 * b0 + a1 * b1) + (a2 * b2 + a3 * b3))`: the products as a balanced tree."""
    terms = []
    for k in range(m.width):
        lane = IntImm(k, m.lane_iter.var.dtype)
        terms.append(m.guard(lane, m.operand("A", lane) * m.operand("B", lane)))
    while len(terms) > 1:
        pairs = [terms[k] + terms[k + 1] for k in range(0, len(terms) - 1, 2)]
        terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
    return m.accumulate(terms[0])


# -------------------------------------------------------------------- registry
_REGISTRY: dict[str, TensorIntrin] = {}
FLOATS = ("float32", "float64")


def register_tensor_intrin(intrin: TensorIntrin, *, override: bool = False) -> TensorIntrin:
    """Add `intrin` to the registry (`override=True` replaces one of the same name)."""
    if intrin.name in _REGISTRY and not override:
        raise ValueError(f"a tensor intrinsic named {intrin.name!r} is already registered")
    for dtype in intrin.dtypes:  # a malformed description fails here, not at tensorize
        _check_description(intrin, intrin.description(dtype))
    _REGISTRY[intrin.name] = intrin
    return intrin


def _check_description(intrin: TensorIntrin, desc: PrimFunc) -> None:
    """The shape `tensorize` matches against: a loop of the width, one block with one reduction
    iterator bound to it, whose body is one store into a constant element."""
    loop = desc.body
    block = loop.body if isinstance(loop, For) else None
    ok = (
        isinstance(loop, For)
        and loop.extent == IntImm(intrin.width, loop.extent.dtype)
        and isinstance(block, Block)
        and len(block.iter_vars) == 1
        and block.iter_vars[0].kind == "R"
        and block.iter_vars[0].value is loop.loop_var
        and isinstance(block.body, BufferStore)
        and all(isinstance(i, IntImm) for i in block.body.indices)
    )
    if not ok:
        raise ValueError(
            f"the description of `{intrin.name}` must be one loop of extent {intrin.width} around one block with one "
            "reduction iterator bound to it, whose body is one store into a constant element (`ACC[0] = ...`)"
        )


def get_tensor_intrin(name: str) -> TensorIntrin:
    """The registered intrinsic called `name` (`ScheduleError` if there is none)."""
    intrin = _REGISTRY.get(name)
    if intrin is None:
        raise ScheduleError(
            f"in `tensorize`: expected a registered intrinsic ({', '.join(sorted(_REGISTRY))}), but got {name!r}"
        )
    return intrin


def tensor_intrins() -> dict[str, TensorIntrin]:
    """Name -> intrinsic, for every registered intrinsic."""
    return dict(_REGISTRY)


for _lanes in (8, 16, WARP_SIZE):
    register_tensor_intrin(
        TensorIntrin(
            f"warp_sum_{_lanes}",
            _lanes,
            ("float32", "float64", "int32", "int64"),
            WARP_SUM_DESCRIPTION,
            {"cuda": IntrinImpl("cuda", _warp_sum_cuda, _check_warp, lifts_predicate=_lanes != WARP_SIZE)},
        )
    )
for _width in (2, 3, 4, 6, 8, 16):
    register_tensor_intrin(
        TensorIntrin(
            f"dot_{_width}",
            _width,
            FLOATS,
            DOT_DESCRIPTION,
            {"cpu": IntrinImpl("cpu", _dot_unrolled), "cuda": IntrinImpl("cuda", _dot_unrolled)},
        )
    )
