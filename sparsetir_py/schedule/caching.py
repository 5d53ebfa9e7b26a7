"""Caching primitives: cache_read, cache_write, set_scope.

A cache is a `FlatBuffer` in scope `shared` or `local`, allocated in the block that encloses the
cached block (its *scope*; `T.allocate` around the body at the function root). It holds the
region of the buffer that the scope accesses, as region analysis bounds it (`regions.py`), and is
indexed relative to the region's start: `X_local[0, vk]` holds `X[vi, vk]`. Every access of the
buffer inside the scope goes to the cache, so the scope sees one consistent copy (TVM redirects
the accesses of the consumer blocks; here the scope's whole body is the consumer).

- `cache_read` puts a copy block (`X_local`, iterators over the region) at the start of the
  scope: the buffer must not be written inside the scope.
- `cache_write` puts a write-back block at the end of the scope: every read of the buffer in the
  scope must come after a write of it (a reduction's init, or an earlier store), since the cache
  starts uninitialised.

`compute_at` / `reverse_compute_at` then move the copy under a loop, so that each iteration
copies only what it uses; the allocation keeps the size of the scope's region (TVM's semantics
before `CompactBufferAllocation`).
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..ir.buffer import FlatBuffer
from ..ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from ..ir.func import PrimFunc
from ..ir.stmt import AtomicAdd, Block, BufferRegion, BufferStore, For, IterVar, Stmt, seq
from ..ir.visit import map_children, walk
from ..transform.region import annotate_regions
from . import regions as R
from .state import (
    NameGen,
    allocate_in_scope,
    block_path,
    child_stmts,
    enclosing_block,
    facts,
    find_block,
    scope_name,
    substitute_buffers,
    with_scope_body,
)

CACHE_SCOPES = ("shared", "local")


def _check_scope(scope: str, primitive: str) -> None:
    if scope not in CACHE_SCOPES:
        raise ScheduleError(f"in `{primitive}`: expected a scope in {CACHE_SCOPES}, but got {scope!r}")


def region_buffer(regions: tuple[BufferRegion, ...], index: int | str, what: str, block: Block, primitive: str):
    """The buffer of `block`'s `index`-th read/write region (or the one named `index`)."""
    names = [r.buffer.name for r in regions]
    if isinstance(index, str):
        if index not in names:
            raise ScheduleError(
                f"in `{primitive}`: expected a buffer that block `{block.name}` {what}s ({', '.join(names)}), "
                f"but got {index!r}"
            )
        return regions[names.index(index)].buffer
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(regions):
        raise ScheduleError(
            f"in `{primitive}`: expected a {what} buffer index in [0, {len(regions)}) of block `{block.name}` "
            f"({', '.join(names)}), but got {index!r}"
        )
    return regions[index].buffer


def _scope_of(func: PrimFunc, block: str, primitive: str) -> tuple[Block, Block | None, Stmt, dict]:
    """The block, its scope (enclosing block or None), the scope's body and the ranges known there."""
    path = block_path(func, block, primitive)
    scope = enclosing_block(path)
    if scope is None:
        return path[-1], None, func.body, {}
    return path[-1], scope, scope.body, facts(path[: path.index(scope) + 1])


def _copy_nest(names: NameGen, name: str, dims: list[R.Dim], dst, src, to_cache: bool) -> tuple[Stmt, str]:
    """Loops `ax0, ax1, ...` over the region and a block copying from `src` to `dst` (one of them
    the cache, indexed from 0; the other the buffer, indexed from the region's start)."""
    loop_vars, iter_vars = [], []
    for k, d in enumerate(dims):
        extent = d.extent
        loop_vars.append(Var(names(f"ax{k}"), extent.dtype))
        iter_vars.append(IterVar(Var(names(f"v{k}"), extent.dtype), extent, "S", loop_vars[-1]))
    cache_idx = tuple(iv.var for iv in iter_vars)
    buf_idx = tuple(R.shift(d.lo, iv.var) for d, iv in zip(dims, iter_vars))
    if to_cache:
        store = BufferStore(dst, cache_idx, BufferLoad(src, buf_idx))
    else:
        store = BufferStore(dst, buf_idx, BufferLoad(src, cache_idx))
    block_name = names.block(name)
    stmt: Stmt = Block(block_name, tuple(iter_vars), (), (), store)
    for v, iv in reversed(list(zip(loop_vars, iter_vars))):
        stmt = For(v, IntImm(0, v.dtype), iv.extent, "serial", stmt)
    return stmt, block_name


def _redirect(body: Stmt, buf, cache: FlatBuffer, dims: list[R.Dim], primitive: str) -> Stmt:
    """Every load/store of `buf` in `body` goes to `cache`, indexed relative to the region."""

    def index(indices: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        return tuple(R.offset(i, d.lo) for i, d in zip(indices, dims))

    def go(n):
        n = map_children(n, go)
        if isinstance(n, BufferLoad) and n.buffer is buf:
            return BufferLoad(cache, index(n.indices))
        if isinstance(n, BufferStore | AtomicAdd) and n.buffer is buf:
            return n.replace(buffer=cache, indices=index(n.indices))
        if isinstance(n, Call) and any(a is buf for a in n.args):
            raise ScheduleError(
                f"in `{primitive}`: expected a buffer accessed element by element, but `{buf.name}` is searched "
                f"by T.{n.op}, which needs its whole storage"
            )
        return n

    return go(body)


def _cache_dims(
    func: PrimFunc, buf, accesses: list[R.Access], ranges: R.Ranges, known: dict, scope: Block | None, primitive: str
) -> list[R.Dim]:
    dims = R.region(accesses, buf, ranges, known, func)
    assert dims is not None
    bad = R.sparse_whole_dims(buf, dims)
    if bad:
        axis = buf.axes[bad[0]]
        raise ScheduleError(
            f"in `{primitive}`: expected a region of `{buf.name}` inside its stored positions, but in "
            f"{scope_name(scope)} dimension {bad[0]} (axis `{axis.name}`) can only be bounded by the axis length"
        )
    return dims


def _check_init(scope: Block | None, buf, primitive: str) -> None:
    if (
        scope is not None
        and scope.init is not None
        and any(getattr(n, "buffer", None) is buf for n in walk(scope.init))
    ):
        raise ScheduleError(
            f"in `{primitive}`: expected a scope whose init does not access `{buf.name}`, but block "
            f"`{scope.name}`'s init does"
        )


def cache_read(func: PrimFunc, block: str, read_buffer_index: int | str, scope: str) -> tuple[PrimFunc, str]:
    """Read a buffer through a cache in `shared` or `local` memory, filled by a new copy block.

    It requires: a known block; a read buffer index (or name) of that block; scope `shared` or
    `local`; the buffer is not written inside the block's scope (the enclosing block), is not
    searched there (T.lower_bound), and, for a sparse buffer, the region read stays inside the
    stored positions of its sparse axes.

    Parameters: `block` the name of a block that reads the buffer; `read_buffer_index` the
    position of the buffer in the block's `T.reads` (or its name); `scope` the cache's scope.
    Returns the new function and the name of the copy block (`<buffer>_<scope>`).

    Before (SDDMM):
        with T.block("sddmm0"):
            ...
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                for k in T.serial(feat):
                    with T.block("sddmm1"):
                        ... X[vi, vk] ...
    `cache_read(f, "sddmm1", 2, "local")`
    After:
        with T.block("sddmm0"):
            X_local = T.alloc_buffer((1, feat), "float32", scope="local")
            for ax0 in T.serial(1):
                for ax1 in T.serial(feat):
                    with T.block("X_local"):
                        v0 = T.axis.spatial(1, ax0)
                        v1 = T.axis.spatial(feat, ax1)
                        X_local[v0, v1] = X[vi + v0, v1]
            ...
                    with T.block("sddmm1"):
                        ... X_local[0, vk] ...

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.caching import cache_read
    >>> f = sp.lower_sparse_iter(sp.ops.sddmm_script())["main"]
    >>> g, name = cache_read(f, "sddmm1", "X", "local")
    >>> print(sp.schedule.fragment(g, name))
    with T.block("X_local"):
        v0 = T.axis.spatial(1, ax0)
        v1 = T.axis.spatial(feat, ax1)
        X_local[v0, v1] = X[vi + v0, v1]
    """
    primitive = "cache_read"
    _check_scope(scope, primitive)
    blk, scope_blk, body, known = _scope_of(func, block, primitive)
    buf = region_buffer(blk.reads, read_buffer_index, "read", blk, primitive)
    _check_init(scope_blk, buf, primitive)
    accesses, ranges = R.collect(body)
    for acc in accesses:
        if acc.buffer is buf and acc.kind == "w":
            where = f"block `{acc.block.name}`" if acc.block is not None else scope_name(scope_blk)
            raise ScheduleError(
                f"in `{primitive}`: expected a buffer that is only read in {scope_name(scope_blk)}, but "
                f"`{buf.name}` is written by {where}"
            )
    dims = _cache_dims(func, buf, accesses, ranges, known, scope_blk, primitive)
    names = NameGen(func)
    cache = FlatBuffer(names(f"{buf.name}_{scope}"), tuple(d.extent for d in dims), buf.dtype, scope=scope)
    copy, copy_name = _copy_nest(names, cache.name, dims, cache, buf, to_cache=True)
    new_body = seq(copy, _redirect(body, buf, cache, dims, primitive))
    out = with_scope_body(func, scope_blk, lambda _: new_body)
    out = allocate_in_scope(out, scope_blk, cache)
    return annotate_regions(out), copy_name


def _first_read_before_write(body: Stmt, buf) -> Block | bool | None:
    """Scan `body` in program order; the block (None: no block) of the first read of `buf` that no
    write precedes, or False when every read comes after a write."""
    written = False
    found: list = []

    def loads(e) -> bool:
        return e is not None and any(isinstance(n, BufferLoad) and n.buffer is buf for n in walk(e))

    def go(s: Stmt, block: Block | None) -> bool:
        nonlocal written
        if found:
            return True
        if isinstance(s, Block):
            for c in child_stmts(s):
                go(c, s)
            return bool(found)
        if isinstance(s, BufferStore | AtomicAdd):
            reads = isinstance(s, AtomicAdd) or loads(s.value) or any(loads(i) for i in s.indices)
            if reads and not written:  # an atomic add reads what it updates
                found.append(block)
            if s.buffer is buf:
                written = True
            return bool(found)
        exprs = [v for _, v in s.fields() if isinstance(v, PrimExpr)]
        if any(loads(e) for e in exprs) and not written:
            found.append(block)
            return True
        for c in child_stmts(s):
            go(c, block)
        return bool(found)

    go(body, None)
    return found[0] if found else False


def cache_write(func: PrimFunc, block: str, write_buffer_index: int | str, scope: str) -> tuple[PrimFunc, str]:
    """Write a buffer through a cache in `shared` or `local` memory, copied back by a new block.

    It requires: a known block; a write buffer index (or name) of that block; scope `shared` or
    `local`; inside the block's scope (the enclosing block) every read of the buffer comes after
    a write of it (the cache starts uninitialised) and lies in the region written, the buffer is
    not searched (T.lower_bound), and, for a sparse buffer, the region stays inside the stored
    positions of its sparse axes. The write-back copies the whole region written (its bounding
    box, as region analysis computes it): the scope must write all of it, as a reduction's init
    does.

    Parameters: `block` the name of a block that writes the buffer; `write_buffer_index` the
    position of the buffer in the block's `T.writes` (or its name); `scope` the cache's scope.
    Returns the new function and the name of the write-back block (`<buffer>_<scope>`).

    Before (SpMM):
        with T.block("csrmm0"):
            if J_indptr[vi + 1] - J_indptr[vi] == 0:
                for k_init in T.serial(feat):
                    C[vi, k_init] = T.float32(0.0)
            for j, k in T.grid(J_indptr[vi + 1] - J_indptr[vi], feat):
                with T.block("csrmm1"):
                    ...
                    with T.init():
                        C[vi, vk] = T.float32(0.0)
                    C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
    `cache_write(f, "csrmm1", 0, "local")`
    After: `C_local[0, ...]` everywhere in `csrmm0`, then
            for ax0 in T.serial(1):
                for ax1 in T.serial(feat):
                    with T.block("C_local"):
                        v0 = T.axis.spatial(1, ax0)
                        v1 = T.axis.spatial(feat, ax1)
                        C[vi + v0, v1] = C_local[v0, v1]

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.schedule.caching import cache_write
    >>> f = sp.lower_sparse_iter(sp.ops.spmm_script())["main"]
    >>> g, name = cache_write(f, "csrmm1", "C", "local")
    >>> print(sp.schedule.fragment(g, "csrmm1"))
    with T.block("csrmm1"):
        vj = T.axis.reduce(J_indptr[vi + 1] - J_indptr[vi], j)
        vk = T.axis.spatial(feat, k)
        with T.init():
            C_local[0, vk] = T.float32(0.0)
        C_local[0, vk] = C_local[0, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
    """
    primitive = "cache_write"
    _check_scope(scope, primitive)
    blk, scope_blk, body, known = _scope_of(func, block, primitive)
    buf = region_buffer(blk.writes, write_buffer_index, "write", blk, primitive)
    _check_init(scope_blk, buf, primitive)
    first = _first_read_before_write(body, buf)
    if first is not False:
        where = f"block `{first.name}`" if first is not None else scope_name(scope_blk)
        raise ScheduleError(
            f"in `{primitive}`: expected every read of `{buf.name}` in {scope_name(scope_blk)} to follow a write "
            f"of it (the cache starts uninitialised), but {where} reads it first"
        )
    accesses, ranges = R.collect(body)
    dims = _cache_dims(func, buf, accesses, ranges, known, scope_blk, primitive)
    written = R.region([a for a in accesses if a.kind == "w"], buf, ranges, known, func)
    if written != dims:
        raise ScheduleError(
            f"in `{primitive}`: expected the accesses of `{buf.name}` in {scope_name(scope_blk)} inside the region "
            "it writes (the write-back copies that region), but some read lies outside it"
        )
    names = NameGen(func)
    cache = FlatBuffer(names(f"{buf.name}_{scope}"), tuple(d.extent for d in dims), buf.dtype, scope=scope)
    back, back_name = _copy_nest(names, cache.name, dims, buf, cache, to_cache=False)
    new_body = seq(_redirect(body, buf, cache, dims, primitive), back)
    out = with_scope_body(func, scope_blk, lambda _: new_body)
    out = allocate_in_scope(out, scope_blk, cache)
    return annotate_regions(out), back_name


def set_scope(func: PrimFunc, block: str, buffer_index: int | str, scope: str) -> PrimFunc:
    """Change the memory scope of a buffer that a block writes and the function allocates.

    It requires: a known block; a write buffer index (or name) of that block whose buffer is
    allocated (`T.alloc_buffer` in a block, `T.allocate`, or function-level scratch such as
    `rfactor`'s `C_rf` at the root), not a parameter; a scope in `global`, `shared`, `local`.

    Function-level scratch keeps its place: with scope `local`, the build's buffer compaction
    (`transform.compact_buffers`) moves it into a CUDA kernel as a per-thread allocation when
    each thread provably touches its own part (the CUDA code generator rejects it otherwise).

    Before: `C_rf = T.alloc_buffer((1, feat, 4), "float32")`
    `set_scope(f, "sddmm1_rf", 0, "local")`
    After: `C_rf = T.alloc_buffer((1, feat, 4), "float32", scope="local")`
    """
    primitive = "set_scope"
    if scope not in ("global", *CACHE_SCOPES):
        raise ScheduleError(f"in `{primitive}`: expected a scope in ('global', 'shared', 'local'), but got {scope!r}")
    blk = find_block(func, block, primitive)
    buf = region_buffer(blk.writes, buffer_index, "write", blk, primitive)
    if not isinstance(buf, FlatBuffer) or buf.data is not None:
        raise ScheduleError(
            f"in `{primitive}`: expected a buffer allocated inside the function, but `{buf.name}` is a parameter"
        )
    if buf.scope == scope:
        return func
    new = buf.replace(scope=scope)
    buffers = tuple(new if b is buf else b for b in func.buffers)
    return func.replace(buffers=buffers, body=substitute_buffers(func.body, {buf: new}))
