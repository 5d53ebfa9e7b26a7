"""The Stage II scripts of the co-iterating operators, written in position space.

Each function returns the source of a `@T.prim_func` (parsed by the project's frontend, then
compiled by `sp.compile` as any Stage II function: flattening, the target passes, code
generation). Sizes are int32 scalars, positions and structure arrays the index dtype `IDX`,
values `VAL`; the row loops are chunked: `bounds[part]..bounds[part + 1]` are the rows of chunk
`part`, chosen by the operator so that the chunks carry equal work (the symbolic pass's count of
multiply-adds), and a schedule makes the chunk loop parallel. A chunk's workspace is allocated
once per chunk, so no two threads share one and no row waits on an atomic.

* `merge_script(expr)`: the element-wise co-iteration of two CSR operands, generated from the
  expression's iteration lattice (`sparsetir_py.arith.lattice`): a two-pointer merge per row that writes the
  visited points' coordinates and values into a bounded buffer (`c_start[i]` is where row `i`
  may start writing, `c_count[i]` receives how many it wrote); with `packed=True` (what
  `sp.ops.add` / `multiply` run) a chunk's rows are written one after the other from
  `c_start[bounds[part]]`, so that only the chunks after the first move afterwards.
* `merge_many_script(expr, k)`: the same for `k` operands `X0 ... X{k-1}` (three or more; a
  user's script `C[i, j] = A[i, j] + B[i, j] + D[i, j]` with an assembled `C`): an intersection
  lattice leapfrogs (the pointers behind the greatest head catch up; every head equal: a point),
  any other lattice walks the least head of all rows, the operands there stored, the others 0,
  and writes the point where the lattice has it.
* `same_level_script(expr)`: the same co-iteration where both operands store the same
  coordinates: one loop over positions computing the lattice's top point.
* `compact_script()`: copies each row's written entries to the canonical `indptr` positions.
* `spgemm_count_script()`: the symbolic pass of Gustavson's SpGEMM: per row, the number of
  distinct columns of `A[i, :] @ B`, with a dense workspace of marks (`mark[j] == i + 1`: column
  `j` was seen in row `i`), and the row's work (multiply-adds), which balances the numeric pass.
* `spgemm_numeric_script()`: the numeric pass: a dense accumulator with a touched-columns list,
  which is the row of `c_indices` itself; the row is sorted (`T.sort_range`) and its values
  gathered from the accumulator, or, where that is cheaper (`SORT_COST`), read off the
  workspace in column order between the row's least and greatest column.
* with `workspace="hash"`, the count and numeric passes keep each chunk's workspace in a hash
  table (linear probing, Fibonacci hashing) of `hsize` slots, a power of two at least twice the
  widest row, with the row's used slots listed so that clearing costs the row's size: for very
  wide matrices, where a dense workspace of `n` columns per chunk is too large.
* `spgemm_work_script()`, `spgemm_fused_script()`, `compact_chunks_script()`: the one-pass
  SpGEMM of the CPU: each row's work and bound on its entries (`min(work, n + 1)`); then per
  chunk, rows accumulated in a dense workspace (rows of more than `BRANCHLESS_MIN` multiply-adds
  with no branch on whether a column is new; a row whose span, from the first and last columns of
  the rows of B it selects, is under `SCAN_PER_ENTRY` columns per entry of the widest of them,
  with no list of its columns at all, read off the workspace by a scan with no branch) and
  written one after the other into room for their
  bounds, each ordered by what costs least for its count and span (a scan of the workspace,
  insertion sort up to `LONG_ROW_MIN` entries, else a bitmap of its columns read a word at a
  time, through a summary word per 1024 columns where the row is wide and sparse), the row's count
  recorded; then the chunks copied to their `indptr` positions. No symbolic pass: it costs a
  third to a half of the numeric pass, the copy of the result a few percent.
* `spgemm_masked_script()`: only the coordinates a mask stores: the mask's row is loaded into
  the workspace first, products outside it are skipped, and the row's hits are written in the
  mask's (sorted) order into a buffer bounded by the mask's row, compacted afterwards.
"""

from __future__ import annotations

import math

from ..arith.lattice import Lattice, render

_HEADER = "from sparsetir_py import script as T\n\n"


#: The two operands of a product `A @ B` (m x k times k x n), as the SpGEMM scripts declare them.
SPGEMM_OPERANDS = """    A_data = T.match_buffer(a_data, (nnz_a,), "VAL")
    A_indptr = T.match_buffer(a_indptr, (m + 1,), "IDX")
    A_indices = T.match_buffer(a_indices, (nnz_a,), "IDX")
    B_data = T.match_buffer(b_data, (nnz_b,), "VAL")
    B_indptr = T.match_buffer(b_indptr, (k + 1,), "IDX")
    B_indices = T.match_buffer(b_indices, (nnz_b,), "IDX")"""


def _typed(source: str, idtype: str, dtype: str) -> str:
    sentinel = str(2**31 - 1 if idtype == "int32" else 2**63 - 1)  # past every column of the index dtype
    source = source.replace("SPGEMM_OPERANDS", SPGEMM_OPERANDS)
    return source.replace("IDX", idtype).replace("VAL", dtype).replace("SENTINEL", sentinel)


# ------------------------------------------------------------------ element-wise merge
def merge_script(
    lat: Lattice, scalars: tuple[str, ...], idtype: str = "int32", dtype: str = "float32", packed: bool = False
) -> str:
    """The two-operand merge loop of `lat` (operands `A` and `B`, scalar parameters `scalars`).

    With `packed`, chunk `part` writes its rows one after the other from `c_start[bounds[part]]`
    instead of each row at `c_start[i]`: only the gaps between chunks are left to close (a move of
    the chunks after the first, `compact_chunks_script`), not one between every two rows."""
    if lat.operands != ("A", "B"):
        raise ValueError(f"merge_script co-iterates two operands A and B, got {lat.operands}")
    env = {"A": "a_data[pa[0]]", "B": "b_data[pb[0]]", **{s: s for s in scalars}}
    both = lat.point({"A", "B"})
    only_a, only_b = lat.point({"A"}), lat.point({"B"})

    def emit(point, coordinate: str, indent: str) -> str:
        if point is None:
            return ""
        value = render(point.expression, env)
        return (
            f"{indent}c_indices[pc[0]] = {coordinate}\n"
            f"{indent}c_data[pc[0]] = T.VAL({value})\n"
            f"{indent}pc[0] = pc[0] + T.IDX(1)\n"
        )

    body = "                        "
    params = "".join(f", {s}: T.VAL" for s in scalars)
    if lat.kind == "intersection":
        loop = _branchless_merge(lat, env, both, only_a, only_b)
    else:
        loop = _branchy_merge(emit, both, only_a, only_b, body)
    source = f"""
@T.prim_func
def merge(a_data: T.handle, a_indptr: T.handle, a_indices: T.handle, b_data: T.handle, b_indptr: T.handle,
          b_indices: T.handle, c_data: T.handle, c_indices: T.handle, c_start: T.handle, c_count: T.handle,
          bounds: T.handle, m: T.int32, parts: T.int32, nnz_a: T.IDX, nnz_b: T.IDX, nnz_c: T.IDX{params}):
    T.func_attr({{"stage": 2}})
    A_data = T.match_buffer(a_data, (nnz_a,), "VAL")
    A_indptr = T.match_buffer(a_indptr, (m + 1,), "IDX")
    A_indices = T.match_buffer(a_indices, (nnz_a,), "IDX")
    B_data = T.match_buffer(b_data, (nnz_b,), "VAL")
    B_indptr = T.match_buffer(b_indptr, (m + 1,), "IDX")
    B_indices = T.match_buffer(b_indices, (nnz_b,), "IDX")
    C_data = T.match_buffer(c_data, (nnz_c,), "VAL")
    C_indices = T.match_buffer(c_indices, (nnz_c,), "IDX")
    C_start = T.match_buffer(c_start, (m + 1,), "IDX")
    C_count = T.match_buffer(c_count, (m,), "IDX")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
{_packed_rows(loop) if packed else _rows(loop)}"""
    source = source.replace("a_data[", "A_data[").replace("b_data[", "B_data[")
    source = source.replace("c_indices[pc", "C_indices[pc").replace("c_data[pc", "C_data[pc")
    return _HEADER + _typed(source, idtype, dtype)


def _rows(loop: str) -> str:
    """`merge_script`'s chunk loop, each row (block `merge0`) written from `c_start[i]`."""
    return f"""    for part in T.serial(parts):
        for r in T.serial(Bounds[part + 1] - Bounds[part]):
            with T.block("merge0"):
                vi = T.axis.spatial(m, Bounds[part] + r)
                pa = T.alloc_buffer((1,), "IDX", scope="local")
                pb = T.alloc_buffer((1,), "IDX", scope="local")
                pc = T.alloc_buffer((1,), "IDX", scope="local")
                pa[0] = A_indptr[vi]
                pb[0] = B_indptr[vi]
                pc[0] = C_start[vi]
{loop}                C_count[vi] = pc[0] - C_start[vi]
"""


def _packed_rows(loop: str) -> str:
    """`merge_script`'s chunk loop with the rows of a chunk written one after the other: the write
    position `pc` lives in the chunk (block `merge0`), each row (block `merge1`, its `loop`
    indented one level more) starts where the previous one ended."""
    inner = "".join("    " + line + "\n" for line in loop.rstrip("\n").split("\n"))
    return f"""    for part in T.serial(parts):
        with T.block("merge0"):
            vp = T.axis.spatial(parts, part)
            pc = T.alloc_buffer((1,), "IDX", scope="local")
            pc[0] = C_start[Bounds[vp]]
            for r in T.serial(Bounds[vp + 1] - Bounds[vp]):
                with T.block("merge1"):
                    vi = T.axis.spatial(m, Bounds[vp] + r)
                    pa = T.alloc_buffer((1,), "IDX", scope="local")
                    pb = T.alloc_buffer((1,), "IDX", scope="local")
                    pa[0] = A_indptr[vi]
                    pb[0] = B_indptr[vi]
                    row: T.IDX = pc[0]
{inner}                    C_count[vi] = pc[0] - row
"""


def _branchy_merge(emit, both, only_a, only_b, body: str) -> str:
    """The two-pointer merge with a branch per step (any lattice), then the rest of each row."""
    loop = f"""                ea: T.IDX = A_indptr[vi + 1]
                eb: T.IDX = B_indptr[vi + 1]
                while pa[0] < ea and pb[0] < eb:
                    ja: T.IDX = A_indices[pa[0]]
                    jb: T.IDX = B_indices[pb[0]]
                    if ja == jb:
{emit(both, "ja", body)}                        pa[0] = pa[0] + T.IDX(1)
                        pb[0] = pb[0] + T.IDX(1)
                    elif ja < jb:
{emit(only_a, "ja", body)}                        pa[0] = pa[0] + T.IDX(1)
                    else:
{emit(only_b, "jb", body)}                        pb[0] = pb[0] + T.IDX(1)
"""
    if only_a is not None:
        loop += f"""                while pa[0] < ea:
{emit(only_a, "A_indices[pa[0]]", "                    ")}                    pa[0] = pa[0] + T.IDX(1)
"""
    if only_b is not None:
        loop += f"""                while pb[0] < eb:
{emit(only_b, "B_indices[pb[0]]", "                    ")}                    pb[0] = pb[0] + T.IDX(1)
"""
    return loop


def _branchless_merge(lat: Lattice, env: dict, both, only_a, only_b) -> str:
    """The merge with no unpredictable branch: the pointers advance by comparisons (0 or 1)
    instead of an if/elif per step, which mispredicts about every other step on interleaved
    rows (measured 1-2x faster on intersections). An intersection writes only where the heads
    agree; a union whose every point is stored (`alpha * A + beta * B`) walks the least head of
    both rows (an exhausted row's head is a sentinel past every column) and writes every step,
    its value selected from the three points' by which heads are at the column (each point's
    own expression, so `beta = inf` does not turn A-only entries into NaN). Unions keep the
    branchy merge (`merge_script`): where rows hardly interleave (meshes) its branches predict
    well and it measured 2-4x faster."""
    one = "T.if_then_else({}, T.IDX(1), T.IDX(0))"
    if lat.kind == "intersection":
        value = render(both.expression, env)
        # Rows whose column ranges do not overlap are skipped before the merge (two loads each:
        # on a mesh times its rows reversed, nearly every row).
        return f"""                ea: T.IDX = A_indptr[vi + 1]
                eb: T.IDX = B_indptr[vi + 1]
                if pa[0] < ea and pb[0] < eb:
                    if A_indices[ea - T.IDX(1)] < B_indices[pb[0]] or B_indices[eb - T.IDX(1)] < A_indices[pa[0]]:
                        pa[0] = ea
                while pa[0] < ea and pb[0] < eb:
                    ja: T.IDX = A_indices[pa[0]]
                    jb: T.IDX = B_indices[pb[0]]
                    if ja == jb:
                        C_indices[pc[0]] = ja
                        C_data[pc[0]] = T.VAL({value})
                        pc[0] = pc[0] + T.IDX(1)
                    pa[0] = pa[0] + {one.format("ja <= jb")}
                    pb[0] = pb[0] + {one.format("jb <= ja")}
"""
    env = {**env, "A": "va", "B": "vb"}
    top, left, right = (render(p.expression, env) for p in (both, only_a, only_b))
    return f"""                ea: T.IDX = A_indptr[vi + 1]
                eb: T.IDX = B_indptr[vi + 1]
                while pa[0] < ea or pb[0] < eb:
                    ja: T.IDX = T.if_then_else(pa[0] < ea, A_indices[pa[0]], T.IDX(SENTINEL))
                    jb: T.IDX = T.if_then_else(pb[0] < eb, B_indices[pb[0]], T.IDX(SENTINEL))
                    va: T.VAL = T.if_then_else(pa[0] < ea, A_data[pa[0]], T.VAL(0))
                    vb: T.VAL = T.if_then_else(pb[0] < eb, B_data[pb[0]], T.VAL(0))
                    jm: T.IDX = T.min(ja, jb)
                    C_indices[pc[0]] = jm
                    vm: T.VAL = T.if_then_else(jb == jm, T.VAL({top}), T.VAL({left}))
                    C_data[pc[0]] = T.if_then_else(ja == jm, vm, T.VAL({right}))
                    pc[0] = pc[0] + T.IDX(1)
                    pa[0] = pa[0] + {one.format("ja == jm")}
                    pb[0] = pb[0] + {one.format("jb == jm")}
"""


def merge_many_script(
    lat: Lattice, tree: tuple, scalars: tuple[str, ...], idtype: str = "int32", dtype: str = "float32"
) -> str:
    """The merge loop of `lat` over its operands `X0`, `X1`, ... (any number; `tree` is the
    expression over those names, `scalars` its scalar parameters), written as `merge_script`'s."""
    ops = lat.operands
    k = len(ops)
    at = {o: f"p{t}[0]" for t, o in enumerate(ops)}
    end = {o: f"X{t}_indptr[vi + 1]" for t, o in enumerate(ops)}
    head = {o: f"X{t}_indices[{at[o]}]" for t, o in enumerate(ops)}
    handles = "".join(f"x{t}_data: T.handle, x{t}_indptr: T.handle, x{t}_indices: T.handle, " for t in range(k))
    sizes = "".join(f", nnz_x{t}: T.IDX" for t in range(k))
    buffers = "".join(
        f'    X{t}_data = T.match_buffer(x{t}_data, (nnz_x{t},), "VAL")\n'
        f'    X{t}_indptr = T.match_buffer(x{t}_indptr, (m + 1,), "IDX")\n'
        f'    X{t}_indices = T.match_buffer(x{t}_indices, (nnz_x{t},), "IDX")\n'
        for t in range(k)
    )
    allocs = "".join(f'                p{t} = T.alloc_buffer((1,), "IDX", scope="local")\n' for t in range(k))
    starts = "".join(f"                p{t}[0] = X{t}_indptr[vi]\n" for t in range(k))
    body = " " * 20
    emit = (
        f"{body}    C_indices[pc[0]] = jm\n{body}    C_data[pc[0]] = T.VAL(VALUE)\n{body}    pc[0] = pc[0] + T.IDX(1)\n"
    )
    if lat.kind == "intersection":
        cond = " and ".join(f"{at[o]} < {end[o]}" for o in ops)
        greatest = head[ops[0]]
        for o in ops[1:]:
            greatest = f"T.max({greatest}, {head[o]})"
        value = render(tree, {o: f"X{t}_data[{at[o]}]" for t, o in enumerate(ops)} | {s: s for s in scalars})
        loop = (
            f"                while {cond}:\n{body}jm: T.IDX = {greatest}\n"
            f"{body}if {' and '.join(f'{head[o]} == jm' for o in ops)}:\n"
            + emit.replace("VALUE", value)
            + "".join(f"{body}    {at[o]} = {at[o]} + T.IDX(1)\n" for o in ops)
            + f"{body}else:\n"
            + "".join(f"{body}    if {head[o]} < jm:\n{body}        {at[o]} = {at[o]} + T.IDX(1)\n" for o in ops)
        )
    else:
        cond = " or ".join(f"{at[o]} < {end[o]}" for o in ops)
        lets = "".join(
            f"{body}j{t}: T.IDX = T.if_then_else({at[o]} < {end[o]}, {head[o]}, T.IDX(n))\n" for t, o in enumerate(ops)
        )
        least = "j0"
        for t in range(1, k):
            least = f"T.min({least}, j{t})"
        stored = {o: f"j{t} == jm" for t, o in enumerate(ops)}
        loads = {o: f"T.if_then_else(j{t} == jm, X{t}_data[{at[o]}], T.VAL(0))" for t, o in enumerate(ops)}
        value = render(tree, loads | {s: s for s in scalars})
        loop = (
            f"                while {cond}:\n{lets}{body}jm: T.IDX = {least}\n"
            f"{body}if {_presence(tree, stored)}:\n"
            + emit.replace("VALUE", value)
            + "".join(f"{body}if j{t} == jm:\n{body}    {at[o]} = {at[o]} + T.IDX(1)\n" for t, o in enumerate(ops))
        )
    params = "".join(f", {s}: T.VAL" for s in scalars)
    source = f"""
@T.prim_func
def merge(HANDLES c_data: T.handle, c_indices: T.handle, c_start: T.handle, c_count: T.handle, bounds: T.handle,
          m: T.int32, n: T.int32, parts: T.int32SIZES, nnz_c: T.IDX{params}):
    T.func_attr({{"stage": 2}})
BUFFERS    C_data = T.match_buffer(c_data, (nnz_c,), "VAL")
    C_indices = T.match_buffer(c_indices, (nnz_c,), "IDX")
    C_start = T.match_buffer(c_start, (m + 1,), "IDX")
    C_count = T.match_buffer(c_count, (m,), "IDX")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        for r in T.serial(Bounds[part + 1] - Bounds[part]):
            with T.block("merge0"):
                vi = T.axis.spatial(m, Bounds[part] + r)
ALLOCS                pc = T.alloc_buffer((1,), "IDX", scope="local")
STARTS                pc[0] = C_start[vi]
LOOP                C_count[vi] = pc[0] - C_start[vi]
"""
    for key, text in (("HANDLES ", handles), ("SIZES", sizes), ("BUFFERS", buffers), ("ALLOCS", allocs)):
        source = source.replace(key, text)
    source = source.replace("STARTS", starts).replace("LOOP", loop)
    return _HEADER + _typed(source, idtype, dtype)


def _presence(tree: tuple, stored: dict[str, str]) -> str:
    """A condition that holds where `tree` is not 0 for want of stored operands (the lattice's
    points, as a formula over which operands are stored at the coordinate)."""
    kind = tree[0]
    if kind == "name":
        return stored.get(tree[1], "True")
    if kind == "num":
        return "True" if tree[1] != 0 else "False"
    if kind == "neg":
        return _presence(tree[1], stored)
    a, b = _presence(tree[1], stored), _presence(tree[2], stored)
    if kind == "*":
        return b if a == "True" else a if b == "True" else f"({a} and {b})"
    return "True" if "True" in (a, b) else f"({a} or {b})"


def same_level_script(lat: Lattice, scalars: tuple[str, ...], idtype: str = "int32", dtype: str = "float32") -> str:
    """Two operands stored at the same coordinates (one level shared): every position is the
    lattice's top point, so the co-iteration is one loop over positions, no merge: a chunk's
    rows are one range of positions, walked flat (no per-row loop: a mesh's rows of 7 entries
    would pay a loop's bounds per 7 sums). The same loop copies the structure into the result's
    and checks that B's is A's: `differ[part]` is 1 where chunk `part` found a row bound or a
    column that differs (the operator then merges instead). Checked here, in parallel, rather
    than by the host beforehand: on a mesh of 160k rows the host's comparison and copies of the
    structure took 1.4 ms of `A + A.T`'s 2.4 ms."""
    top = lat.point(set(lat.operands))
    value = render(top.expression, {"A": "A_data[t]", "B": "B_data[t]", **{s: s for s in scalars}})
    params = "".join(f", {s}: T.VAL" for s in scalars)
    source = f"""
@T.prim_func
def same_level(a_indptr: T.handle, a_indices: T.handle, a_data: T.handle, b_indptr: T.handle,
               b_indices: T.handle, b_data: T.handle, c_indptr: T.handle, c_indices: T.handle,
               c_data: T.handle, differ: T.handle, bounds: T.handle, m: T.int32, parts: T.int32,
               nnz: T.IDX{params}):
    T.func_attr({{"stage": 2}})
    A_indptr = T.match_buffer(a_indptr, (m + 1,), "IDX")
    A_indices = T.match_buffer(a_indices, (nnz,), "IDX")
    A_data = T.match_buffer(a_data, (nnz,), "VAL")
    B_indptr = T.match_buffer(b_indptr, (m + 1,), "IDX")
    B_indices = T.match_buffer(b_indices, (nnz,), "IDX")
    B_data = T.match_buffer(b_data, (nnz,), "VAL")
    C_indptr = T.match_buffer(c_indptr, (m + 1,), "IDX")
    C_indices = T.match_buffer(c_indices, (nnz,), "IDX")
    C_data = T.match_buffer(c_data, (nnz,), "VAL")
    Differ = T.match_buffer(differ, (parts,), "int32")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        with T.block("same_level0"):
            vp = T.axis.spatial(parts, part)
            bad = T.alloc_buffer((1,), "int32", scope="local")
            bad[0] = T.int32(0)
            for r in T.serial(Bounds[vp], Bounds[vp + 1]):
                C_indptr[r + 1] = A_indptr[r + 1]
                bad[0] = T.bitwise_or(bad[0], T.int32(A_indptr[r + 1] != B_indptr[r + 1]))
            for t in T.serial(A_indptr[Bounds[vp]], A_indptr[Bounds[vp + 1]]):
                C_indices[t] = A_indices[t]
                bad[0] = T.bitwise_or(bad[0], T.int32(A_indices[t] != B_indices[t]))
                C_data[t] = T.VAL({value})
            Differ[vp] = bad[0]
"""
    return _HEADER + _typed(source, idtype, dtype)


COMPACT = """
@T.prim_func
def compact(t_data: T.handle, t_indices: T.handle, t_start: T.handle, c_data: T.handle, c_indices: T.handle,
            c_indptr: T.handle, bounds: T.handle, m: T.int32, parts: T.int32, nnz_t: T.IDX, nnz_c: T.IDX):
    T.func_attr({"stage": 2})
    T_data = T.match_buffer(t_data, (nnz_t,), "VAL")
    T_indices = T.match_buffer(t_indices, (nnz_t,), "IDX")
    T_start = T.match_buffer(t_start, (m + 1,), "IDX")
    C_data = T.match_buffer(c_data, (nnz_c,), "VAL")
    C_indices = T.match_buffer(c_indices, (nnz_c,), "IDX")
    C_indptr = T.match_buffer(c_indptr, (m + 1,), "IDX")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        for r in T.serial(Bounds[part + 1] - Bounds[part]):
            with T.block("compact0"):
                vi = T.axis.spatial(m, Bounds[part] + r)
                for t in T.serial(C_indptr[vi + 1] - C_indptr[vi]):
                    C_indices[C_indptr[vi] + t] = T_indices[T_start[vi] + t]
                    C_data[C_indptr[vi] + t] = T_data[T_start[vi] + t]
"""


def compact_script(idtype: str = "int32", dtype: str = "float32") -> str:
    return _HEADER + _typed(COMPACT, idtype, dtype)


# ------------------------------------------------------------------ SpGEMM
SPGEMM_COUNT = """
@T.prim_func
def spgemm_count(a_indptr: T.handle, a_indices: T.handle, b_indptr: T.handle, b_indices: T.handle,
                 c_count: T.handle, c_work: T.handle, WORKSPACE_PARAMS bounds: T.handle, m: T.int32,
                 k: T.int32, n: T.int32, parts: T.int32, nnz_a: T.IDX, nnz_b: T.IDX):
    T.func_attr({"stage": 2})
    A_indptr = T.match_buffer(a_indptr, (m + 1,), "IDX")
    A_indices = T.match_buffer(a_indices, (nnz_a,), "IDX")
    B_indptr = T.match_buffer(b_indptr, (k + 1,), "IDX")
    B_indices = T.match_buffer(b_indices, (nnz_b,), "IDX")
    C_count = T.match_buffer(c_count, (m,), "IDX")
    C_work = T.match_buffer(c_work, (m,), "int64")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
WORKSPACE_BUFFERS    for part in T.serial(parts):
        with T.block("spgemm_count0"):
            vp = T.axis.spatial(parts, part)
MARK_ALLOC
            for r in T.serial(Bounds[vp + 1] - Bounds[vp]):
                with T.block("spgemm_count1"):
                    vi = T.axis.spatial(m, Bounds[vp] + r)
                    count = T.alloc_buffer((1,), "IDX", scope="local")
                    work = T.alloc_buffer((1,), "int64", scope="local")
                    count[0] = T.IDX(0)
                    work[0] = T.int64(0)
                    for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                        kk: T.IDX = A_indices[A_indptr[vi] + p]
                        work[0] = work[0] + T.int64(B_indptr[kk + 1] - B_indptr[kk])
                        for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                            j: T.IDX = B_indices[B_indptr[kk] + q]
                            if mark[j] != vi + 1:
                                mark[j] = vi + 1
                                count[0] = count[0] + T.IDX(1)
                    C_count[vi] = count[0]
                    C_work[vi] = work[0]
"""

#: Row `vi` of `A @ B` scattered into the dense workspace (`mark`, `acc`): each new column's
#: index appended to `OUT` at `top[0]`, the columns' range in `lo[0]`, `hi[0]`. The numeric pass
#: and the one-pass product both run it (`_accumulate_row`).
ACCUMULATE_ROW = """                    for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                        kk: T.IDX = A_indices[A_indptr[vi] + p]
                        a: T.VAL = A_data[A_indptr[vi] + p]
                        for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                            j: T.IDX = B_indices[B_indptr[kk] + q]
                            if mark[j] != vi + 1:
                                mark[j] = vi + 1
                                acc[j] = a * B_data[B_indptr[kk] + q]
                                OUT[top[0]] = j
                                top[0] = top[0] + T.TOP(1)
                                lo[0] = T.min(lo[0], j)
                                hi[0] = T.max(hi[0], j + T.IDX(1))
                            else:
                                acc[j] = acc[j] + a * B_data[B_indptr[kk] + q]
"""


#: The set bits of word `AT` of `bits` (words of 32 columns), lowest first: each column's sum
#: written at `top` and cleared, the word cleared (`READ_BITS(AT)` in a kernel's source).
READ_BITS = """word[0] = bits[AT]
bits[AT] = T.int64(0)
while word[0] != T.int64(0):
    jb: T.IDX = T.IDX(T.int64(AT) * T.int64(32) + T.ctz(word[0]))
    T_indices[top[0]] = jb
    T_data[top[0]] = acc[jb]
    acc[jb] = T.VAL(0)
    top[0] = top[0] + T.int64(1)
    word[0] = T.bitwise_and(word[0], word[0] - T.int64(1))
"""


def _expand(source: str, name: str, body: str, params: tuple[str, ...]) -> str:
    """`source` with each `NAME(arg, ...)` line replaced by `body`, its `params` replaced by the
    line's arguments; spaces before the marker indent the body further."""
    lines = []
    for line in source.split("\n"):
        if not line.lstrip().startswith(f"{name}("):
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        text = body
        for param, arg in zip(params, line.strip()[len(name) + 1 : -1].split(", "), strict=True):
            text = text.replace(param, arg)
        lines.extend(indent + row for row in text.rstrip("\n").split("\n"))
    return "\n".join(lines)


def _accumulate_row(source: str) -> str:
    """`source` with each `ACCUMULATE_ROW(OUT, TOP)` line replaced by `ACCUMULATE_ROW`'s loop:
    indices appended to `OUT`, the counter `top` of dtype `TOP`; spaces before the marker indent
    the loop further."""
    return _expand(source, "ACCUMULATE_ROW", ACCUMULATE_ROW, ("OUT", "TOP"))


SPGEMM_NUMERIC = """
@T.prim_func
def spgemm_numeric(a_data: T.handle, a_indptr: T.handle, a_indices: T.handle, b_data: T.handle,
                   b_indptr: T.handle, b_indices: T.handle, c_data: T.handle, c_indptr: T.handle,
                   c_indices: T.handle, WORKSPACE_PARAMS bounds: T.handle, m: T.int32, k: T.int32, n: T.int32,
                   parts: T.int32, nnz_a: T.IDX, nnz_b: T.IDX, nnz_c: T.IDX):
    T.func_attr({"stage": 2})
SPGEMM_OPERANDS
    C_data = T.match_buffer(c_data, (nnz_c,), "VAL")
    C_indptr = T.match_buffer(c_indptr, (m + 1,), "IDX")
    C_indices = T.match_buffer(c_indices, (nnz_c,), "IDX")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
WORKSPACE_BUFFERS    for part in T.serial(parts):
        with T.block("spgemm_numeric0"):
            vp = T.axis.spatial(parts, part)
MARK_ALLOC
ACC_ALLOC
            for r in T.serial(Bounds[vp + 1] - Bounds[vp]):
                with T.block("spgemm_numeric1"):
                    vi = T.axis.spatial(m, Bounds[vp] + r)
                    top = T.alloc_buffer((1,), "IDX", scope="local")
                    lo = T.alloc_buffer((1,), "IDX", scope="local")
                    hi = T.alloc_buffer((1,), "IDX", scope="local")
                    top[0] = C_indptr[vi]
                    lo[0] = T.IDX(n)
                    hi[0] = T.IDX(0)
ACCUMULATE_ROW(C_indices, IDX)
                    count: T.float64 = T.float64(C_indptr[vi + 1] - C_indptr[vi])
                    if count * T.log2(count + T.float64(1)) * T.float64(SORT_COST) > T.float64(hi[0] - lo[0]):
                        top[0] = C_indptr[vi]
                        for j in T.serial(hi[0] - lo[0]):
                            if mark[lo[0] + j] == vi + 1:
                                C_indices[top[0]] = lo[0] + j
                                C_data[top[0]] = acc[lo[0] + j]
                                top[0] = top[0] + T.IDX(1)
                    else:
                        T.sort_range(C_indices, C_indptr[vi], C_indptr[vi + 1])
                        for t in T.serial(C_indptr[vi + 1] - C_indptr[vi]):
                            C_data[C_indptr[vi] + t] = acc[C_indices[C_indptr[vi] + t]]
"""

SPGEMM_WORK = """
@T.prim_func
def spgemm_work(a_indptr: T.handle, a_indices: T.handle, b_indptr: T.handle, c_work: T.handle, c_room: T.handle,
                bounds: T.handle, m: T.int32, k: T.int32, n: T.int32, parts: T.int32, nnz_a: T.IDX):
    T.func_attr({"stage": 2})
    A_indptr = T.match_buffer(a_indptr, (m + 1,), "IDX")
    A_indices = T.match_buffer(a_indices, (nnz_a,), "IDX")
    B_indptr = T.match_buffer(b_indptr, (k + 1,), "IDX")
    C_work = T.match_buffer(c_work, (m,), "int64")
    C_room = T.match_buffer(c_room, (m,), "int64")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        for r in T.serial(Bounds[part + 1] - Bounds[part]):
            with T.block("spgemm_work0"):
                vi = T.axis.spatial(m, Bounds[part] + r)
                work = T.alloc_buffer((1,), "int64", scope="local")
                work[0] = T.int64(0)
                for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                    kk: T.IDX = A_indices[A_indptr[vi] + p]
                    work[0] = work[0] + T.int64(B_indptr[kk + 1] - B_indptr[kk])
                C_work[vi] = work[0]
                C_room[vi] = T.min(work[0], T.int64(n) + T.int64(1))
"""


def spgemm_work_script(idtype: str = "int32", dtype: str = "float32") -> str:
    """Each row's work in `A @ B` (its multiply-adds: the lengths of the rows of B it selects)
    and its room (at most that many entries, at most `n + 1`: a row without branches writes each
    product's column one past its last entry before it knows whether the column is new): what
    balances and bounds the one-pass product (`spgemm_fused_script`)."""
    return _HEADER + _typed(SPGEMM_WORK, idtype, dtype)


SPGEMM_FUSED = """
@T.prim_func
def spgemm_fused(a_data: T.handle, a_indptr: T.handle, a_indices: T.handle, b_data: T.handle,
                 b_indptr: T.handle, b_indices: T.handle, t_data: T.handle, t_indices: T.handle,
                 t_start: T.handle, c_end: T.handle, w_prefix: T.handle, bounds: T.handle, m: T.int32, k: T.int32,
                 n: T.int32, parts: T.int32, nnz_a: T.IDX, nnz_b: T.IDX, nnz_t: T.int64):
    T.func_attr({"stage": 2})
SPGEMM_OPERANDS
    T_data = T.match_buffer(t_data, (nnz_t,), "VAL")
    T_indices = T.match_buffer(t_indices, (nnz_t,), "IDX")
    T_start = T.match_buffer(t_start, (parts + 1,), "int64")
    C_end = T.match_buffer(c_end, (m,), "IDX")
    W_prefix = T.match_buffer(w_prefix, (m + 1,), "int64")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        with T.block("spgemm_fused0"):
            vp = T.axis.spatial(parts, part)
            mark = T.alloc_buffer((n,), "int32", scope="local")
            acc = T.alloc_buffer((n,), "VAL", scope="local")
            bits = T.alloc_buffer((n // 32 + 1,), "int64", scope="local")
            summary = T.alloc_buffer((n // 1024 + 1,), "int64", scope="local")
            top = T.alloc_buffer((1,), "int64", scope="local")
            top[0] = T_start[vp]
            for r in T.serial(Bounds[vp + 1] - Bounds[vp]):
                with T.block("spgemm_fused1"):
                    vi = T.axis.spatial(m, Bounds[vp] + r)
                    start = T.alloc_buffer((1,), "int64", scope="local")
                    lo = T.alloc_buffer((1,), "IDX", scope="local")
                    hi = T.alloc_buffer((1,), "IDX", scope="local")
                    widest = T.alloc_buffer((1,), "IDX", scope="local")
                    u = T.alloc_buffer((1,), "int64", scope="local")
                    word = T.alloc_buffer((1,), "int64", scope="local")
                    sword = T.alloc_buffer((1,), "int64", scope="local")
                    start[0] = top[0]
                    lo[0] = T.IDX(n)
                    hi[0] = T.IDX(0)
                    widest[0] = T.IDX(0)
                    row_work: T.int64 = W_prefix[vi + 1] - W_prefix[vi]
PREFETCH_ROWS_BLOCK                    if row_work > T.int64(BRANCHLESS_MIN):
                        # The row's span from the first and last columns of the rows of B it selects
                        # (sorted), and the widest of them (a bound below on the row's entries).
                        for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                            kk: T.IDX = A_indices[A_indptr[vi] + p]
                            if B_indptr[kk + 1] > B_indptr[kk]:
                                lo[0] = T.min(lo[0], B_indices[B_indptr[kk]])
                                hi[0] = T.max(hi[0], B_indices[B_indptr[kk + 1] - T.IDX(1)] + T.IDX(1))
                                widest[0] = T.max(widest[0], B_indptr[kk + 1] - B_indptr[kk])
                    spread: T.float64 = T.float64(hi[0] - lo[0])
                    if widest[0] > T.IDX(LONG_ROW_MIN) and spread < SCAN_PER_ENTRY * T.float64(widest[0]):
                        # A dense row, read off the workspace whatever its count: accumulated with no
                        # list of its columns, then a scan of its span with no branch on the marks.
                        for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                            kk: T.IDX = A_indices[A_indptr[vi] + p]
                            a: T.VAL = A_data[A_indptr[vi] + p]
                            for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                                j: T.IDX = B_indices[B_indptr[kk] + q]
                                mark[j] = vi + 1
                                acc[j] = acc[j] + a * B_data[B_indptr[kk] + q]
                        for j in T.serial(hi[0] - lo[0]):
                            T_indices[top[0]] = lo[0] + j
                            T_data[top[0]] = acc[lo[0] + j]
                            acc[lo[0] + j] = T.VAL(0)
                            top[0] = top[0] + T.int64(mark[lo[0] + j] == vi + 1)
                    elif (
                        widest[0] > T.IDX(BITMAP_MIN_WIDEST)  # measured only past BRANCHLESS_MIN multiply-adds
                        and spread >= T.float64(BITMAP_MIN_SPREAD) * T.float64(row_work)
                        and spread <= T.float64(BITMAP_MAX_SPREAD) * T.float64(row_work)
                    ):
                        # A long sparse row (R-MAT's: 20-70 columns per entry, past the scan, a
                        # counting sort's digits costing more than its entries): each column sets a
                        # bit of a word of 32 as it accumulates (no list of columns, no branch), then
                        # the words of the span give the columns in order, a set bit at a time. Words
                        # of 32 bits in an int64: no arithmetic reaches the sign bit.
                        for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                            kk: T.IDX = A_indices[A_indptr[vi] + p]
                            a: T.VAL = A_data[A_indptr[vi] + p]
                            for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                                j: T.IDX = B_indices[B_indptr[kk] + q]
                                acc[j] = acc[j] + a * B_data[B_indptr[kk] + q]
                                bits[j // T.IDX(32)] = T.bitwise_or(
                                    bits[j // T.IDX(32)], T.shift_left(T.int64(1), T.int64(j % T.IDX(32)))
                                )
                        first: T.IDX = lo[0] // T.IDX(32)
                        for w in T.serial((hi[0] - T.IDX(1)) // T.IDX(32) - first + T.IDX(1)):
                            READ_BITS(first + w)
                    else:
                        if row_work > T.int64(BRANCHLESS_MIN):
                            for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                                kk: T.IDX = A_indices[A_indptr[vi] + p]
                                a: T.VAL = A_data[A_indptr[vi] + p]
                                for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                                    # No branch on whether column j is new (on long rows it mispredicts
                                    # about every other product): its index is written at the row's end
                                    # either way, and the end moves on only where it is new.
                                    j: T.IDX = B_indices[B_indptr[kk] + q]
                                    new: T.int64 = T.int64(mark[j] != vi + 1)
                                    mark[j] = vi + 1
                                    acc[j] = acc[j] + a * B_data[B_indptr[kk] + q]
                                    T_indices[top[0]] = j
                                    top[0] = top[0] + new
                        else:
        ACCUMULATE_ROW(T_indices, int64)
                        count: T.float64 = T.float64(top[0] - start[0])
                        span: T.float64 = T.float64(hi[0] - lo[0])
                        # A scan of the workspace where it costs less than ordering the entries. A short
                        # row's logarithm is taken only where the span is under SHORT_BOUND columns an
                        # entry (log2(count + 1) is at most log2(LONG_ROW_MIN + 1) there): most rows are
                        # decided without it (on a mesh it cost a tenth of the row; pygsp_minnesota
                        # 0.24 -> 0.21 ms, its rows' spans are 15 columns per entry).
                        if span < T.if_then_else(
                            count > T.float64(LONG_ROW_MIN),
                            SCAN_PER_ENTRY * count,
                            T.if_then_else(
                                span < SHORT_BOUND * count,
                                count * T.log2(count + T.float64(1)) * T.float64(INSERTION_COST),
                                T.float64(0),
                            ),
                        ):
                            # With no branch on the marks: every column of the span is written where
                            # the next entry goes, which moves on only where the column is marked (the
                            # last column is: no write passes the row's entries). Measured against the
                            # branch: 1.1-1.4x faster on R-MAT's dense rows, as fast on polblogs'.
                            top[0] = start[0]
                            for j in T.serial(hi[0] - lo[0]):
                                T_indices[top[0]] = lo[0] + j
                                T_data[top[0]] = acc[lo[0] + j]
                                acc[lo[0] + j] = T.VAL(0)
                                top[0] = top[0] + T.int64(mark[lo[0] + j] == vi + 1)
                        elif count > T.float64(LONG_ROW_MIN):
                            # Read off a bitmap of the row's columns, set from its list: a bit per
                            # column in words of 32 (in an int64: no arithmetic reaches the sign
                            # bit), the span's words scanned for set bits where they are at most two
                            # an entry, else a summary word of 32 bits per 32 words of the span says
                            # which words hold any (a wide, sparse row: R-MAT's, a ring graph's).
                            # Paired against two counting-sort passes, whole products on one
                            # thread: 27-point stencil 1.85x, 2-D and 3-D meshes 1.2-1.5x, a
                            # stiffness matrix 1.5x, Watts-Strogatz 1.2x faster; geometric,
                            # Barabasi-Albert and Chung-Lu graphs within the noise (0.8-1.2x).
                            for t in T.serial(top[0] - start[0]):
                                jt: T.IDX = T_indices[start[0] + t]
                                bits[jt // T.IDX(32)] = T.bitwise_or(
                                    bits[jt // T.IDX(32)], T.shift_left(T.int64(1), T.int64(jt % T.IDX(32)))
                                )
                            if hi[0] - lo[0] > T.IDX(BITMAP_WORDS_PER_ENTRY * 32) * T.IDX(top[0] - start[0]):
                                for t in T.serial(top[0] - start[0]):
                                    js: T.IDX = T_indices[start[0] + t] // T.IDX(32)
                                    summary[js // T.IDX(32)] = T.bitwise_or(
                                        summary[js // T.IDX(32)], T.shift_left(T.int64(1), T.int64(js % T.IDX(32)))
                                    )
                                top[0] = start[0]
                                group: T.IDX = lo[0] // T.IDX(1024)
                                for g in T.serial((hi[0] - T.IDX(1)) // T.IDX(1024) - group + T.IDX(1)):
                                    sword[0] = summary[group + g]
                                    summary[group + g] = T.int64(0)
                                    while sword[0] != T.int64(0):
                                        wg: T.IDX = T.IDX(T.int64(group + g) * T.int64(32) + T.ctz(sword[0]))
                                        sword[0] = T.bitwise_and(sword[0], sword[0] - T.int64(1))
                                        READ_BITS(wg)
                            else:
                                top[0] = start[0]
                                firstw: T.IDX = lo[0] // T.IDX(32)
                                for w in T.serial((hi[0] - T.IDX(1)) // T.IDX(32) - firstw + T.IDX(1)):
                                    READ_BITS(firstw + w)
                        else:
                            # Insertion sort, written out: most entries of a short row are in place
                            # already (the rows of B it sums are sorted), and only those that are not
                            # enter the inner loop (measured 10-20% of the row on 2-D meshes against
                            # `T.sort_range`).
                            for t in T.serial(top[0] - start[0] - T.int64(1)):
                                v: T.IDX = T_indices[start[0] + t + T.int64(1)]
                                if T_indices[start[0] + t] > v:
                                    u[0] = start[0] + t
                                    while u[0] >= start[0] and T_indices[u[0]] > v:
                                        T_indices[u[0] + T.int64(1)] = T_indices[u[0]]
                                        u[0] = u[0] - T.int64(1)
                                    T_indices[u[0] + T.int64(1)] = v
                            for t in T.serial(top[0] - start[0]):
                                T_data[start[0] + t] = acc[T_indices[start[0] + t]]
                                acc[T_indices[start[0] + t]] = T.VAL(0)
                    C_end[vi] = T.IDX(top[0] - T_start[vp])
"""

#: Rows of more entries than this that are not read off the workspace are read off a bitmap of
#: their columns (set from the row's list of new columns) instead of insertion sorted.
LONG_ROW_MIN = 32
#: Such a row is read off the workspace instead where its span is under this many columns per
#: entry: a scan step costs a fraction of a sorting step (measured against a counting sort:
#: scanning wins on polblogs' rows, 4-30 columns per entry, and loses on R-MAT's, 40 and more).
SCAN_PER_ENTRY = 16
#: A long row's bitmap is scanned word by word where the span holds at most this many words of
#: 32 columns per entry, else through a summary word per 32 words (a wide sparse row would scan
#: mostly empty words).
BITMAP_WORDS_PER_ENTRY = 2
#: A row of at most `LONG_ROW_MIN` entries is read off the workspace (a scan of its span, with no
#: branch) where its span is under `INSERTION_COST * c * log2(c + 1)` columns, else insertion
#: sorted (measured against 2 and 4: 1 was 1.2-1.4x faster on 4elt, even on meshes and R-MAT).
INSERTION_COST = 1
#: A row of more than `BRANCHLESS_MIN` multiply-adds is read off a bitmap (a bit per column,
#: set as it accumulates; the span's words scanned for set bits) where its span is at least
#: `BITMAP_MIN_SPREAD` and at most `BITMAP_MAX_SPREAD` columns per multiply-add (at most one word
#: of 32 columns per multiply-add). Paired, one thread, against the list and counting sort:
#: R-MAT 1.2-1.36x faster (rmat15a45, rmat15, rmat14e16), bcsstk13 and polblogs even (their rows
#: are dense: scanned as before); without the lower bound, bcsstk13 ran 8-10% slower. Only rows
#: that sum a row of B of more than `BITMAP_MIN_WIDEST` entries (R-MAT's hubs): on a 9-point
#: mesh, whose rows of B hold 9 clustered columns, the bitmap made the product 1.5x slower
#: (setting bits of one word one product after the other, and reading mostly empty words); on a
#: 27-point stencil (rows of B of 27, 24^3 grid) it was 1.25x faster than the counting sort with
#: digits of ceil(sqrt(span)), but 0.85-0.91x the counting sort with power-of-two digits, so it
#: stays at 32. Bits set from the list of new columns after accumulating (no chain) gained only
#: 1-3% on R-MAT.
BITMAP_MIN_SPREAD = 2
BITMAP_MAX_SPREAD = 32
BITMAP_MIN_WIDEST = 32
#: Rows of more multiply-adds than this accumulate with no branch on whether a column is new
#: (every product adds into the workspace, which such rows clear afterwards): on long rows that
#: branch mispredicts about every other product (measured on R-MAT: 1.1-1.4x the branchy loop's
#: speed); short rows (a 2-D mesh's, 25; a 3-D mesh's, 49) predict it well enough and skip the
#: clearing (64 against 32: 3-D mesh 1.15x faster, R-MAT and polblogs even).
BRANCHLESS_MIN = 64


#: The one-pass SpGEMM's prefetches, where asked for (`spgemm_fused_script(prefetch=True)`): the
#: rows of B that row `i + PREFETCH_ROWS` selects, their first lines, and the row bounds of B
#: that row `i + 2 * PREFETCH_ROWS` selects.
PREFETCH_ROWS = 4
PREFETCH_BLOCK = """                    if nnz_b > T.IDX(0):
                        ahead: T.int32 = T.min(vi + PREFETCH_ROWS, m - 1)
                        for pf in T.serial(A_indptr[ahead + 1] - A_indptr[ahead]):
                            kf: T.IDX = A_indices[A_indptr[ahead] + pf]
                            T.prefetch(B_indices[T.min(B_indptr[kf], nnz_b - T.IDX(1))])
                            T.prefetch(B_data[T.min(B_indptr[kf], nnz_b - T.IDX(1))])
                        far: T.int32 = T.min(vi + 2 * PREFETCH_ROWS, m - 1)
                        for pg in T.serial(A_indptr[far + 1] - A_indptr[far]):
                            T.prefetch(B_indptr[A_indices[A_indptr[far] + pg]])
"""


def _prefetching(source: str, prefetch: bool) -> str:
    """`source` with its row block's prefetches of B ahead (`PREFETCH_BLOCK`) where asked for."""
    source = source.replace("PREFETCH_ROWS_BLOCK", PREFETCH_BLOCK if prefetch else "")
    return source.replace("PREFETCH_ROWS", str(PREFETCH_ROWS))


def spgemm_fused_script(idtype: str = "int32", dtype: str = "float32", prefetch: bool = False) -> str:
    """Symbolic and numeric passes in one: each chunk writes its rows, sorted, one after the
    other from `t_start[part]` (room for the chunk's bound on its entries), and where each row
    ends, counted from its chunk's start, into `c_end` (the chunk's part of `indptr[1:]`, less
    the entries of the chunks before it: no prefix sum over every row on the host); the operator
    then moves the chunks to their `indptr` positions."""
    source = _expand(_accumulate_row(_prefetching(SPGEMM_FUSED, prefetch)), "READ_BITS", READ_BITS, ("AT",))
    source = _typed(source, idtype, dtype).replace("INSERTION_COST", str(INSERTION_COST))
    source = source.replace("SCAN_PER_ENTRY", f"T.float64({SCAN_PER_ENTRY})")
    source = source.replace("BRANCHLESS_MIN", str(BRANCHLESS_MIN))
    source = source.replace("BITMAP_MIN_SPREAD", str(BITMAP_MIN_SPREAD))
    source = source.replace("BITMAP_MAX_SPREAD", str(BITMAP_MAX_SPREAD))
    source = source.replace("BITMAP_MIN_WIDEST", str(BITMAP_MIN_WIDEST))
    source = source.replace("BITMAP_WORDS_PER_ENTRY", str(BITMAP_WORDS_PER_ENTRY))
    short = math.log2(LONG_ROW_MIN + 1) * INSERTION_COST * (1 + 1e-9)
    source = source.replace("SHORT_BOUND", f"T.float64({short!r})")
    return _HEADER + source.replace("LONG_ROW_MIN", str(LONG_ROW_MIN))


COMPACT_CHUNKS = """
@T.prim_func
def compact_chunks(t_data: T.handle, t_indices: T.handle, t_start: T.handle, c_data: T.handle,
                   c_indices: T.handle, c_indptr: T.handle, bounds: T.handle, m: T.int32, parts: T.int32,
                   nnz_t: T.int64, nnz_c: T.IDX):
    T.func_attr({"stage": 2})
    T_data = T.match_buffer(t_data, (nnz_t,), "VAL")
    T_indices = T.match_buffer(t_indices, (nnz_t,), "IDX")
    T_start = T.match_buffer(t_start, (parts + 1,), "int64")
    C_data = T.match_buffer(c_data, (nnz_c,), "VAL")
    C_indices = T.match_buffer(c_indices, (nnz_c,), "IDX")
    C_indptr = T.match_buffer(c_indptr, (m + 1,), "IDX")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        with T.block("compact_chunks0"):
            vp = T.axis.spatial(parts, part)
            for t in T.serial(C_indptr[Bounds[vp + 1]] - C_indptr[Bounds[vp]]):
                C_indices[C_indptr[Bounds[vp]] + t] = T_indices[T_start[vp] + T.int64(t)]
                C_data[C_indptr[Bounds[vp]] + t] = T_data[T_start[vp] + T.int64(t)]
"""


def compact_chunks_script(idtype: str = "int32", dtype: str = "float32") -> str:
    """Copies chunk `part`'s rows, written one after the other from `t_start[part]`, to their
    positions `c_indptr[bounds[part]]...` (the one-pass product's chunks into the result)."""
    return _HEADER + _typed(COMPACT_CHUNKS, idtype, dtype)


#: The masked product sums a row's products with no branch on the mask where the rows before
#: it in its chunk hit the mask with at least one product in this many (paired, 2 threads, mask =
#: A: 3-D geometric 30k rows 1.9x faster than behind a branch, clustered blogs 2x, a 3-D stencil
#: 1.2x; R-MAT and Chung-Lu graphs, whose products mostly miss, 1.5-1.8x slower).
MASKED_HIT_RATE = 8

SPGEMM_MASKED = """
@T.prim_func
def spgemm_masked(a_data: T.handle, a_indptr: T.handle, a_indices: T.handle, b_data: T.handle,
                  b_indptr: T.handle, b_indices: T.handle, m_indptr: T.handle, m_indices: T.handle,
                  c_data: T.handle, c_indices: T.handle, c_count: T.handle, WORKSPACE_PARAMS bounds: T.handle,
                  m: T.int32, k: T.int32, n: T.int32, parts: T.int32, nnz_a: T.IDX, nnz_b: T.IDX, nnz_m: T.IDX):
    T.func_attr({"stage": 2})
SPGEMM_OPERANDS
    M_indptr = T.match_buffer(m_indptr, (m + 1,), "IDX")
    M_indices = T.match_buffer(m_indices, (nnz_m,), "IDX")
    C_data = T.match_buffer(c_data, (nnz_m,), "VAL")
    C_indices = T.match_buffer(c_indices, (nnz_m,), "IDX")
    C_count = T.match_buffer(c_count, (m,), "IDX")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
WORKSPACE_BUFFERS    for part in T.serial(parts):
        with T.block("spgemm_masked0"):
            vp = T.axis.spatial(parts, part)
MARK_ALLOC
ACC_ALLOC
            # Products summed with no branch on the mask where the chunk's rows so far hit it with
            # at least one product in MASKED_HIT_RATE (meshes, geometric and clustered graphs:
            # a branch on a hit would be mispredicted), else behind one branch (power-law
            # graphs with few triangles, where most products miss and the branch predicts well).
            hits = T.alloc_buffer((1,), "int64", scope="local")
            seen = T.alloc_buffer((1,), "int64", scope="local")
            hits[0] = T.int64(0)
            seen[0] = T.int64(0)
            for r in T.serial(Bounds[vp + 1] - Bounds[vp]):
                with T.block("spgemm_masked1"):
                    vi = T.axis.spatial(m, Bounds[vp] + r)
                    top = T.alloc_buffer((1,), "IDX", scope="local")
PREFETCH_ROWS_BLOCK                    for t in T.serial(M_indptr[vi + 1] - M_indptr[vi]):
                        mark[M_indices[M_indptr[vi] + t]] = 2 * vi + 2
                        acc[M_indices[M_indptr[vi] + t]] = T.VAL(0)
                    if hits[0] * T.int64(MASKED_HIT_RATE) >= seen[0]:
                        for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                            kk: T.IDX = A_indices[A_indptr[vi] + p]
                            a: T.VAL = A_data[A_indptr[vi] + p]
                            seen[0] = seen[0] + T.int64(B_indptr[kk + 1] - B_indptr[kk])
                            for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                                # Every product summed (a column outside the mask collects sums
                                # never read, zeroed where a later row's mask holds it).
                                j: T.IDX = B_indices[B_indptr[kk] + q]
                                mj: T.int32 = mark[j]
                                mark[j] = T.if_then_else(mj >= 2 * vi + 2, 2 * vi + 3, mj)
                                hits[0] = hits[0] + T.if_then_else(mj >= 2 * vi + 2, T.int64(1), T.int64(0))
                                acc[j] = acc[j] + a * B_data[B_indptr[kk] + q]
                    else:
                        for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                            kk: T.IDX = A_indices[A_indptr[vi] + p]
                            a: T.VAL = A_data[A_indptr[vi] + p]
                            seen[0] = seen[0] + T.int64(B_indptr[kk + 1] - B_indptr[kk])
                            for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                                j: T.IDX = B_indices[B_indptr[kk] + q]
                                if mark[j] >= 2 * vi + 2:
                                    mark[j] = 2 * vi + 3
                                    hits[0] = hits[0] + T.int64(1)
                                    acc[j] = acc[j] + a * B_data[B_indptr[kk] + q]
                    top[0] = M_indptr[vi]
                    for t in T.serial(M_indptr[vi + 1] - M_indptr[vi]):
                        jm: T.IDX = M_indices[M_indptr[vi] + t]
                        if mark[jm] == 2 * vi + 3:
                            C_indices[top[0]] = jm
                            C_data[top[0]] = acc[jm]
                            top[0] = top[0] + T.IDX(1)
                    C_count[vi] = top[0] - M_indptr[vi]
"""


SPGEMM_COUNT_HASH = """
@T.prim_func
def spgemm_count(a_indptr: T.handle, a_indices: T.handle, b_indptr: T.handle, b_indices: T.handle,
                 c_count: T.handle, c_work: T.handle, bounds: T.handle, m: T.int32, k: T.int32, n: T.int32,
                 parts: T.int32, hsize: T.int64, nnz_a: T.IDX, nnz_b: T.IDX):
    T.func_attr({"stage": 2})
    A_indptr = T.match_buffer(a_indptr, (m + 1,), "IDX")
    A_indices = T.match_buffer(a_indices, (nnz_a,), "IDX")
    B_indptr = T.match_buffer(b_indptr, (k + 1,), "IDX")
    B_indices = T.match_buffer(b_indices, (nnz_b,), "IDX")
    C_count = T.match_buffer(c_count, (m,), "IDX")
    C_work = T.match_buffer(c_work, (m,), "int64")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        with T.block("spgemm_count0"):
            vp = T.axis.spatial(parts, part)
            keys = T.alloc_buffer((hsize,), "int32", scope="local")
            used = T.alloc_buffer((hsize,), "int64", scope="local")
            for r in T.serial(Bounds[vp + 1] - Bounds[vp]):
                with T.block("spgemm_count1"):
                    vi = T.axis.spatial(m, Bounds[vp] + r)
                    count = T.alloc_buffer((1,), "IDX", scope="local")
                    work = T.alloc_buffer((1,), "int64", scope="local")
                    h = T.alloc_buffer((1,), "int64", scope="local")
                    count[0] = T.IDX(0)
                    work[0] = T.int64(0)
                    for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                        kk: T.IDX = A_indices[A_indptr[vi] + p]
                        work[0] = work[0] + T.int64(B_indptr[kk + 1] - B_indptr[kk])
                        for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                            j: T.IDX = B_indices[B_indptr[kk] + q]
                            HASH_PROBE(j)
                            if keys[h[0]] == 0:
                                keys[h[0]] = T.int32(j) + 1
                                used[count[0]] = h[0]
                                count[0] = count[0] + T.IDX(1)
                    for t in T.serial(count[0]):
                        keys[used[t]] = 0
                    C_count[vi] = count[0]
                    C_work[vi] = work[0]
"""

SPGEMM_NUMERIC_HASH = """
@T.prim_func
def spgemm_numeric(a_data: T.handle, a_indptr: T.handle, a_indices: T.handle, b_data: T.handle,
                   b_indptr: T.handle, b_indices: T.handle, c_data: T.handle, c_indptr: T.handle,
                   c_indices: T.handle, bounds: T.handle, m: T.int32, k: T.int32, n: T.int32, parts: T.int32,
                   hsize: T.int64, nnz_a: T.IDX, nnz_b: T.IDX, nnz_c: T.IDX):
    T.func_attr({"stage": 2})
SPGEMM_OPERANDS
    C_data = T.match_buffer(c_data, (nnz_c,), "VAL")
    C_indptr = T.match_buffer(c_indptr, (m + 1,), "IDX")
    C_indices = T.match_buffer(c_indices, (nnz_c,), "IDX")
    Bounds = T.match_buffer(bounds, (parts + 1,), "int32")
    for part in T.serial(parts):
        with T.block("spgemm_numeric0"):
            vp = T.axis.spatial(parts, part)
            keys = T.alloc_buffer((hsize,), "int32", scope="local")
            vals = T.alloc_buffer((hsize,), "VAL", scope="local")
            used = T.alloc_buffer((hsize,), "int64", scope="local")
            for r in T.serial(Bounds[vp + 1] - Bounds[vp]):
                with T.block("spgemm_numeric1"):
                    vi = T.axis.spatial(m, Bounds[vp] + r)
                    top = T.alloc_buffer((1,), "IDX", scope="local")
                    h = T.alloc_buffer((1,), "int64", scope="local")
                    top[0] = C_indptr[vi]
                    for p in T.serial(A_indptr[vi + 1] - A_indptr[vi]):
                        kk: T.IDX = A_indices[A_indptr[vi] + p]
                        a: T.VAL = A_data[A_indptr[vi] + p]
                        for q in T.serial(B_indptr[kk + 1] - B_indptr[kk]):
                            j: T.IDX = B_indices[B_indptr[kk] + q]
                            HASH_PROBE(j)
                            if keys[h[0]] == 0:
                                keys[h[0]] = T.int32(j) + 1
                                vals[h[0]] = a * B_data[B_indptr[kk] + q]
                                used[top[0] - C_indptr[vi]] = h[0]
                                C_indices[top[0]] = j
                                top[0] = top[0] + T.IDX(1)
                            else:
                                vals[h[0]] = vals[h[0]] + a * B_data[B_indptr[kk] + q]
                    T.sort_range(C_indices, C_indptr[vi], C_indptr[vi + 1])
                    for t in T.serial(C_indptr[vi + 1] - C_indptr[vi]):
                        jt: T.IDX = C_indices[C_indptr[vi] + t]
                        HASH_PROBE(jt)
                        C_data[C_indptr[vi] + t] = vals[h[0]]
                    for t in T.serial(C_indptr[vi + 1] - C_indptr[vi]):
                        keys[used[t]] = 0
"""

#: Fibonacci hashing's multiplier (2^32 / golden ratio): consecutive columns land far apart.
HASH_MULTIPLIER = 2654435761

#: Linear probing of a row's hash table `keys` (column + 1 in a used slot, 0 in a free one) for
#: column `COL`: `h[0]` ends at the column's slot, or at the free slot where it goes
#: (`HASH_PROBE(COL)` in a kernel's source; the count pass and both steps of the numeric pass).
HASH_PROBE = """h[0] = T.int64(COL) * T.int64(HASH_MULTIPLIER) % hsize
while keys[h[0]] != 0 and keys[h[0]] != T.int32(COL) + 1:
    h[0] = (h[0] + T.int64(1)) % hsize
"""


def _hashed(source: str, idtype: str, dtype: str) -> str:
    """A hash-workspace pass's script: `HASH_PROBE` expanded, the dtypes and the multiplier filled in."""
    source = _typed(_expand(source, "HASH_PROBE", HASH_PROBE, ("COL",)), idtype, dtype)
    return _HEADER + source.replace("HASH_MULTIPLIER", str(HASH_MULTIPLIER))


#: Where a chunk's workspace lives: "local", allocated inside the chunk (CPU: a numpy array per
#: chunk), or "global", a slice `[part * n, (part + 1) * n)` of zeroed arrays the caller passes
#: (`mark_ws`, `acc_ws`), since a CUDA block cannot allocate an array of a run-time size.
WORKSPACES = ("local", "global", "hash")


def _with_workspace(source: str, workspace: str, accumulate: bool) -> str:
    if workspace not in WORKSPACES:
        raise ValueError(f"workspace must be one of {WORKSPACES}, got {workspace!r}")
    names = [("mark", "Mark", "int32", "mark_ws")] + ([("acc", "Acc", "VAL", "acc_ws")] if accumulate else [])
    if workspace == "local":
        source = source.replace("WORKSPACE_PARAMS ", "").replace("WORKSPACE_BUFFERS", "")
        for name, _, dtype, _ in names:
            alloc = f'            {name} = T.alloc_buffer((n,), "{dtype}", scope="local")'
            source = source.replace(f"{name.upper()}_ALLOC", alloc)
        return source.replace("ACC_ALLOC\n", "")
    params = " ".join(f"{param}: T.handle," for _, _, _, param in names) + " "
    size = "T.int64(parts) * T.int64(n)"
    buffers = "".join(f'    {big} = T.match_buffer({param}, ({size},), "{dtype}")\n' for _, big, dtype, param in names)
    source = source.replace("WORKSPACE_PARAMS ", params).replace("WORKSPACE_BUFFERS", buffers)
    source = source.replace("MARK_ALLOC\n", "").replace("ACC_ALLOC\n", "")
    for name, big, _, _ in names:
        source = _redirect(source, name, big)
    return source


def _redirect(source: str, name: str, big: str) -> str:
    """Every `name[x]` becomes `big[vp * n + x]`, in int64 (brackets matched, so `x` may index too)."""
    out, i, key = [], 0, f"{name}["
    while True:
        j = source.find(key, i)
        if j < 0:
            return "".join(out) + source[i:]
        if j > 0 and (source[j - 1].isalnum() or source[j - 1] == "_"):
            out.append(source[i : j + len(key)])
            i = j + len(key)
            continue
        depth, k = 1, j + len(key)
        while depth:
            depth += {"[": 1, "]": -1}.get(source[k], 0)
            k += 1
        out.append(source[i:j] + f"{big}[T.int64(vp) * T.int64(n) + T.int64({source[j + len(key) : k - 1]})]")
        i = k


def spgemm_count_script(idtype: str = "int32", dtype: str = "float32", workspace: str = "local") -> str:
    if workspace == "hash":
        return _hashed(SPGEMM_COUNT_HASH, idtype, dtype)
    return _HEADER + _typed(_with_workspace(SPGEMM_COUNT, workspace, False), idtype, dtype)


#: A row of the numeric pass whose `c` columns span `w` columns is read off the workspace in
#: column order (a scan of `w` marks) where that costs less than sorting them: `w < SORT_COST *
#: c * log2(c + 1)` (a scan step is a load and a well-predicted compare; a sort step several).
SORT_COST = 4


def spgemm_numeric_script(idtype: str = "int32", dtype: str = "float32", workspace: str = "local") -> str:
    if workspace == "hash":
        return _hashed(SPGEMM_NUMERIC_HASH, idtype, dtype)
    source = _with_workspace(_accumulate_row(SPGEMM_NUMERIC), workspace, True)
    return _HEADER + _typed(source, idtype, dtype).replace("SORT_COST", str(SORT_COST))


def spgemm_masked_script(
    idtype: str = "int32",
    dtype: str = "float32",
    workspace: str = "local",
    mask_values: bool = False,
    prefetch: bool = False,
) -> str:
    """Masked SpGEMM; with `mask_values` each entry is also multiplied by the mask's value there
    (`m_data`): a script's `C[i, j] = C[i, j] + A[i, k] * B[k, j] * M[i, j]`, where `sp.ops.spgemm`
    reads the mask's structure only. With `prefetch`, the rows of B ahead are prefetched as the
    one-pass product's are (`PREFETCH_BLOCK`)."""
    # The mask bounds the row: a masked product keeps a dense workspace also where the schedule
    # asks for hashing (`hash` applies to the count and numeric passes).
    workspace = "local" if workspace == "hash" else workspace
    source = _prefetching(SPGEMM_MASKED, prefetch).replace("MASKED_HIT_RATE", str(MASKED_HIT_RATE))
    if mask_values:
        source = source.replace("m_indptr: T.handle,", "m_data: T.handle, m_indptr: T.handle,", 1)
        indptr = '    M_indptr = T.match_buffer(m_indptr, (m + 1,), "IDX")\n'
        source = source.replace(indptr, '    M_data = T.match_buffer(m_data, (nnz_m,), "VAL")\n' + indptr)
        source = source.replace("C_data[top[0]] = acc[jm]", "C_data[top[0]] = acc[jm] * M_data[M_indptr[vi] + t]")
    return _HEADER + _typed(_with_workspace(source, workspace, True), idtype, dtype)
