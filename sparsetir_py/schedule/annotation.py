"""Annotation primitives: annotate and unannotate blocks and loops.

Annotations are plain key/value pairs (`T.block_attr({...})` on a block, `annotations={...}` on a
loop) that later passes and code generation read. Two keys have a meaning here:

`"chunk_size"` on a loop (a positive int) is read by the CPU code generator: a parallel loop
hands out its iterations in chunks of that size.

`"split_by"` on a loop (the name of a 1-D buffer of the function, e.g. CSR's `"J_indptr"`) is read
by the CPU code generator too: a parallel loop gives each thread one contiguous range of its
iterations, of equal weight, iteration `i` weighing `buf[i + 1] - buf[i] + 1` (a row's nonzeros
plus the row itself): the static split by nonzeros of torch's and MKL's CSR kernels.

`"prefetch"` on a loop (triples `(buffer name, offset, lines, ...)`, set by `prefetch`) is read by the
CPU passes (`transform.inject_prefetch`): each iteration prefetches what iteration `+ offset`
reads of the buffer.

`"atomic"` on a block (value True) says that several threads may update the block's output at
once. `annotate` rewrites the block's update `C[...] = C[...] + e` into `T.atomic_add(C[...], e)`
right away, so the IR says what the kernel does (and the interpreter runs it); afterwards
`parallel` and `bind` accept loops that carry the block's reduction. The block must have no
`T.init()` (a thread would re-initialise what others accumulate into): `decompose_reduction`
first, which puts the init in its own block before the reduction loops. On CUDA the init block
must also finish before other threads add: a launch of its own (a top-level nest, which code
generation launches separately) or a `T.syncthreads()` between; the CUDA build refuses a launch
that both stores into a buffer and adds into it atomically with no barrier. (Across thread
blocks a barrier does not help: there the init must be its own launch.)
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..ir.expr import BinOp, BufferLoad, Var
from ..ir.func import PrimFunc
from ..ir.node import FrozenDict
from ..ir.stmt import AtomicAdd, Block, BufferStore, IfThenElse
from ..transform.inject_prefetch import PREFETCH  # a loop's (buffer, offset, lines) triples
from ..transform.region import annotate_regions
from .state import find_block, find_loop, replace_block, replace_loop

ANNOTATION_VALUES = (str, int, float, bool)
LOOP_KEYS = ("chunk_size", "split_by")  # read by the CPU code generator, on loops only


def _check_value(key, value, primitive: str) -> None:
    if not isinstance(key, str) or not key:
        raise ScheduleError(f"in `{primitive}`: expected a non-empty string key, but got {key!r}")
    ok = isinstance(value, ANNOTATION_VALUES) or (
        isinstance(value, tuple) and all(isinstance(v, ANNOTATION_VALUES) for v in value)
    )
    if not ok:
        raise ScheduleError(
            f"in `{primitive}`: expected a str, int, float or bool value (or a tuple of them), but got {value!r}"
        )


def atomic_update(block: Block, primitive: str = "annotate") -> Block:
    """`block` with its update `C[idx] = C[idx] + e` as `T.atomic_add(C[idx], e)`."""
    if block.init is not None:
        raise ScheduleError(
            f'in `{primitive}`: expected a block without T.init() for "atomic", but `{block.name}` has one '
            "(decompose_reduction first: threads would re-initialise what others accumulate into)"
        )
    body = _atomic(block.body)
    if body is None:
        s = block.body
        raise ScheduleError(
            f"in `{primitive}`: expected a block whose body is one update `C[...] = C[...] + ...` (under `if`s with "
            f'no else) for "atomic", but `{block.name}` has a {type(s).__name__}'
        )
    return block.replace(body=body)


def _atomic(s):
    """`s` with its one update as an atomic add (a guard `if c:` around it stays), else None."""
    if isinstance(s, AtomicAdd):
        return s
    if isinstance(s, IfThenElse) and s.else_case is None:
        inner = _atomic(s.then_case)
        return None if inner is None else s.replace(then_case=inner)
    if isinstance(s, BufferStore) and isinstance(s.value, BinOp) and s.value.op == "+":
        here = BufferLoad(s.buffer, s.indices)
        if s.value.a == here:
            return AtomicAdd(s.buffer, s.indices, s.value.b)
        if s.value.b == here:
            return AtomicAdd(s.buffer, s.indices, s.value.a)
    return None


def annotate(func: PrimFunc, target: str | Var, key: str, value) -> PrimFunc:
    """Attach an annotation `key: value` to a block (by name) or a loop (by variable).

    It requires: a known block or loop; a non-empty string key; a str, int, float or bool value
    (or a tuple of them). For `"atomic"` (blocks only, value True): a block without `T.init()`
    whose body is one update `C[...] = C[...] + e`, which becomes `T.atomic_add(C[...], e)`.
    For `"chunk_size"` (loops only): a positive int (on the CPU a parallel loop hands out its
    iterations in chunks of that size). For `"split_by"` (loops only, not with `"chunk_size"`):
    the name of a 1-D buffer of the function whose differences weigh the iterations (on the CPU
    each thread runs one contiguous range of equal weight).

    Before (after `decompose_reduction(f, "csrmm1", j)`):
        with T.block("csrmm1"):
            ...
            C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
    `annotate(f, "csrmm1", "atomic", True)`
    After:
        with T.block("csrmm1"):
            ...
            T.block_attr({"atomic": True})
            T.atomic_add(C[vi, vk], A[vi, vj] * B[J_indices[vi, vj], vk])

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.reduction import decompose_reduction
    >>> from sparsetir_py.schedule.state import loops_of
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> j, _ = [loop.loop_var for loop in loops_of(f, "csrmm1")]
    >>> f, _ = decompose_reduction(f, "csrmm1", j)
    >>> print(sp.schedule.fragment(annotate(f, "csrmm1", "atomic", True), "csrmm1"))
    with T.block("csrmm1"):
        vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
        vk = T.axis.spatial(feat, k)
        T.block_attr({"atomic": True})
        T.atomic_add(C[vi, vk], A[vi, vj] * B[J_indices[vi, vj], vk])
    """
    primitive = "annotate"
    _check_value(key, value, primitive)
    if isinstance(target, str):
        block = find_block(func, target, primitive)
        if key in LOOP_KEYS:
            raise ScheduleError(f'in `{primitive}`: expected a loop for "{key}", but got block `{target}`')
        if key == "atomic":
            if value is not True:
                raise ScheduleError(f'in `{primitive}`: expected True for "atomic", but got {value!r}')
            block = atomic_update(block, primitive)
        new = block.replace(annotations=FrozenDict({**block.annotations, key: value}))
        out = replace_block(func, target, lambda _: new)
        return annotate_regions(out) if key == "atomic" else out
    loop = find_loop(func, target, primitive)
    if key == "atomic":
        raise ScheduleError(f'in `{primitive}`: expected a block for "atomic", but got loop `{loop.loop_var.name}`')
    if key == "chunk_size" and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        # Checked here, not first by the code generator at build time.
        raise ScheduleError(f'in `{primitive}`: expected a positive int for "chunk_size", but got {value!r}')
    if key == "split_by":
        names = sorted(b.name for b in func.buffer_map.values() if len(getattr(b, "shape", ())) == 1)
        if value not in names:
            raise ScheduleError(
                f'in `{primitive}`: expected the name of a 1-D buffer of the function for "split_by" '
                f"({', '.join(names)}), but got {value!r}"
            )
    if {key, *loop.annotations} >= set(LOOP_KEYS):
        raise ScheduleError(f'in `{primitive}`: a loop takes "chunk_size" or "split_by", not both')
    return replace_loop(func, target, lambda f: f.replace(annotations=FrozenDict({**f.annotations, key: value})))


def prefetch(func: PrimFunc, loop: Var, buffer: str, offset: int = 1, lines: int | None = None) -> PrimFunc:
    """Prefetch, at every iteration of `loop`, what iteration `loop + offset` reads of `buffer`
    (TVM's `Stage.prefetch(tensor, var, offset)`): where a loop gathers rows of a buffer through
    an index (SpMM's rows of B, selected by the column indices), the gathers of later iterations
    are in flight while this one computes, instead of each waiting for memory in turn.

    The loop gets the annotation `"prefetch": (buffer, offset, lines)` (appended where it has
    one); on the CPU the Stage III pass `inject_prefetch` puts, at the top of its body, a
    prefetch of every element the body reads of `buffer`, with the loop variable advanced by
    `offset` and the body's inner loops walked (by cache lines where the address is contiguous in
    them; `lines`, beyond TVM's primitive, keeps the first `lines` lines of each contiguous run:
    a wide row of B then gets its first lines hinted and the hardware's own prefetcher streams
    the rest, where hinting every line would fill the core's queue of misses). The
    index buffers read to form those addresses are read clamped to their storage, so the last
    iterations prefetch within the buffers (and past the loop's end, into what the next
    iterations of an outer loop read: the next rows' nonzeros). It changes no result; CUDA
    ignores it.

    It requires: a known loop whose body reads `buffer` (a buffer of the function, by name); an
    `offset` >= 1 (an int); `lines` None or an int >= 1; `buffer` not marked on this loop already.

    Before: `for j_outer in T.serial(L // 4):`    `prefetch(f, j_outer, "B", 4)`
    After: `for j_outer in T.serial(L // 4, annotations={"prefetch": ("B", 4, 0)}):` (0: every line)
    """
    from ..ir.expr import BufferLoad
    from ..ir.visit import walk

    primitive = "prefetch"
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1:
        raise ScheduleError(f"in `{primitive}`: expected an int offset >= 1, but got {offset!r}")
    if lines is not None and (isinstance(lines, bool) or not isinstance(lines, int) or lines < 1):
        raise ScheduleError(f"in `{primitive}`: expected None or an int lines >= 1, but got {lines!r}")
    if not isinstance(buffer, str):
        raise ScheduleError(f"in `{primitive}`: expected a buffer name (a str), but got {buffer!r}")
    node = find_loop(func, loop, primitive)
    read = sorted({n.buffer.name for n in walk(node.body) if isinstance(n, BufferLoad)})
    if buffer not in read:
        raise ScheduleError(
            f"in `{primitive}`: expected a buffer that loop `{loop.name}` reads ({', '.join(read) or 'none'}), "
            f"but got {buffer!r}"
        )
    marks = tuple(node.annotations.get(PREFETCH, ()))
    if buffer in marks[::3]:
        raise ScheduleError(f"in `{primitive}`: loop `{loop.name}` already prefetches `{buffer}`")
    value = (*marks, buffer, offset, lines or 0)
    return replace_loop(func, loop, lambda f: f.replace(annotations=FrozenDict({**f.annotations, PREFETCH: value})))


def unannotate(func: PrimFunc, target: str | Var, key: str) -> PrimFunc:
    """Remove the annotation `key` from a block (by name) or a loop (by variable).

    It requires: a known block or loop that has the annotation; not `"atomic"` (the update is
    already an atomic add, which stays correct).

    Before: `for k in T.serial(feat, annotations={"pragma": 1}):`    `unannotate(f, k, "pragma")`
    After: `for k in T.serial(feat):`
    """
    primitive = "unannotate"
    if key == "atomic":
        raise ScheduleError(f'in `{primitive}`: expected a key other than "atomic" (its atomic adds stay)')
    node = find_block(func, target, primitive) if isinstance(target, str) else find_loop(func, target, primitive)
    if key not in node.annotations:
        what = f"block `{target}`" if isinstance(target, str) else f"loop `{target.name}`"
        raise ScheduleError(f"in `{primitive}`: expected an annotation {key!r} on {what}, but it has none")
    kept = FrozenDict({k: v for k, v in node.annotations.items() if k != key})
    if isinstance(target, str):
        return replace_block(func, target, lambda b: b.replace(annotations=kept))
    return replace_loop(func, target, lambda f: f.replace(annotations=kept))


def annotate_sparse_iteration(func: PrimFunc, name: str, key: str, value) -> PrimFunc:
    """Attach `key: value` to the Stage I sparse iteration `name` (SparseTIR annotates sparse
    iterations too); it prints with the iteration (`attrs={...}`) and `lower_sparse_iter` copies
    it onto every block the iteration becomes.

    It requires: a Stage I function with that iteration; a non-empty string key; a str, int,
    float or bool value (or a tuple of them); not "atomic", "chunk_size" or "split_by" (block
    and loop keys).
    """
    from ..ir.visit import map_children
    from .sparse import find_sparse_iteration

    primitive = "annotate"
    _check_value(key, value, primitive)
    if key in ("atomic", *LOOP_KEYS):
        raise ScheduleError(
            f"in `{primitive}`: expected a block or loop for {key!r}, but got sparse iteration `{name}`"
        )
    target = find_sparse_iteration(func, name, primitive)

    def rewrite(node):
        if node is target:
            return node.replace(attrs=FrozenDict({**node.attrs, key: value}))
        return map_children(node, rewrite)

    return func.replace(body=rewrite(func.body))
