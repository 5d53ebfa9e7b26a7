"""CPU schedules of SpMM and SDDMM with A in BSR (`format_rules.bsr`), for any block size.

`sp.ops` builds BSR kernels on the padded shape (`sp.transform.pad_shape`: C and B, or X and Y,
hold `m_bsr * b` and `n_bsr * b` rows), so no guard is left in the block product and the block
size `b` is a constant of the kernel (the rule specialises `block_size`). The Stage II function
then holds, per part `<it>_<rule>`, a nest of blocks `<it>_<rule>0` (a block row, loop `io`) and
`<it>_<rule>1` (loops `jo`, `ii`, `ji`, `k`: a stored block, its b x b cells, the features);
SpMM has one more nest before it, `<it>_init0`, which zeroes C.

SpMM (`bsr_cpu_spmm`), per block row, per tile of `TILE` features, per stored block:

    C[io*b + ii, k] += sum_ji A[io, jo, ii, ji] * B[col*b + ji, k]     for ii, ji < b, unrolled

with the tile's features innermost (a loop of a constant `TILE` iterations, whatever the width:
`partition_loops` runs the full tiles without a guard, the last partial one with it). The b^2
values of the block and its column are loaded once per block and tile (`hoist_loop_invariants`),
and LLVM vectorises the tile completely. The tile's b x `TILE` outputs are the same for every
stored block of the row, so they can stay in vector registers across the row's blocks: per block,
b rows of B loaded once each and used for b output rows, b^2 multiply-adds per feature. LLVM does
that only where it can tell that the b rows of C do not overlap, which depends on the width:

- a width that is not a multiple of `TILE` (one kernel for all of them): the row stride of C is
  a run-time value, so each stored block loads and stores the tile's outputs again (and LLVM
  checks at run time that C and B do not overlap);
- a multiple of `TILE` (`default`: compiled for that width, `bsr_cpu_spmm_fixed`): the stride is
  a constant, the outputs stay in registers across the blocks;
- exactly `TILE`: the block row's outputs are cached in a `local` tile (`cache_write`), which
  the CPU code generator puts on the stack (`stack_zeros`), so nothing aliases it; the generated
  assembly at b = 3: per stored block 9 broadcasts, 12 loads of B, 36 FMAs, no access to C.

Above `WHOLE_BLOCK` the block's rows go in groups: at width `TILE` (the tile cached)
`_row_group(b)` at a time (b = 6: 3, b = 8: 4; one for a prime b), the block's columns a loop
around the features; at a constant width above `TILE` whose b x width outputs fit the stack
(`STACK_BYTES`), `_cell_group(b)` at a time (b = 6: 3, b = 8: 2) with all b columns unrolled and
the outputs cached the same way; each row of B is loaded once for that many rows of C. At a
run-time width, one row at a time.

Block rows run in parallel, one range of equal blocks per thread (`split_by` over the block row
pointer).

SDDMM (`bsr_cpu_sddmm`), per stored block, the b x b dot products of b rows of X with b rows of Y
in one sweep over the features: each element of X's b rows is loaded once for b products (for
b <= `WHOLE_BLOCK` all b^2 sums live in registers, `promote_accumulators`; for larger blocks one
row of the block at a time, b sums).
"""

from __future__ import annotations

from sparsetir_py.schedule import LoopRV, Schedule, top_level_nests

from .common import fixed_width

#: Up to this block size the whole b x b block product is unrolled inside the feature loop; above
#: it, one row of the block at a time (b cells unrolled, the block's rows a loop around the
#: features): 36 or 64 unrolled cells take Numba 40-60 s to compile, and SDDMM's b^2 sums would
#: not fit the vector registers.
WHOLE_BLOCK = 4
#: Above `WHOLE_BLOCK`, at a width other than `TILE`, at most this many cells of a block (a group
#: of its rows, all its columns) unrolled in SpMM's tile loop: as many as b = 4's whole block.
GROUP_CELLS = 18
#: SpMM's feature tile: a constant trip count, so LLVM vectorises and unrolls the tile's loop
#: completely and keeps the b x `TILE` outputs in vector registers across the block row's stored
#: blocks (32 float32: four AVX2 registers a row).
TILE = 32
#: The most bytes of a `local` scratch buffer the CPU code generator puts on the stack
#: (`sparsetir_py.codegen.cpu.STACK_BYTES`, which a test holds this equal to: a schedule uses the
#: schedule API only, not the code generator); a larger output tile is not cached.
STACK_BYTES = 16 * 1024


def _parts(sch: Schedule) -> list[tuple[str, str]]:
    """(block-row block, cell block) of every BSR part: a nest of two blocks, the inner one over
    four loops (the stored block, its row and column, the features)."""
    found = []
    for nest in top_level_nests(sch.func):
        if len(nest.blocks) == 2 and len(sch.get_loops(sch.get_block(nest.blocks[1]))) == 4:
            found.append(nest.blocks)
    return found


def _block_rows(sch: Schedule, outer: str) -> None:
    """The block-row loop in parallel, one contiguous range of equal stored blocks per thread."""
    (io,) = sch.get_loops(sch.get_block(outer))
    sch.parallel(io)
    indptr = [b.name for b in sch.func.buffer_map.values() if b.name.startswith("JO") and b.name.endswith("_indptr")]
    if len(indptr) == 1:
        sch.annotate(io, "split_by", indptr[0])


def bsr_cpu_spmm(sch: Schedule, tile: int = TILE) -> None:
    """SpMM over BSR parts (module docstring): C's init in parallel over rows; per part block rows
    in parallel (balanced by blocks); per block row the features in tiles of `tile` outside its
    stored blocks, and per stored block the b x b block product unrolled inside the tile's
    feature loop (one row of the block at a time above `WHOLE_BLOCK`). Where the width is a
    constant up to `tile`, the block row's outputs go through a `local` tile (`cache_write`), and
    above `WHOLE_BLOCK` the block's rows `_row_group(b)` at a time."""
    for nest in top_level_nests(sch.func):
        if nest.blocks and nest.blocks[0].endswith("_init0"):
            sch.parallel(nest.spatial[0])
    for outer, inner in _parts(sch):
        _block_rows(sch, outer)
        block = sch.get_block(inner)
        jo, ii, ji, k = sch.get_loops(block)
        whole = _extent(sch, ii) <= WHOLE_BLOCK
        width = sch.loop_extent(k)
        if tile == TILE and _values_dtype(sch) == "float64":
            tile = TILE // 2  # the same bytes: b rows of 16 float64 in the registers
        # Above WHOLE_BLOCK, where the tile of outputs is cached (`cache_write` below), the block's
        # rows `group` at a time: each row of B loaded once for `group` rows of C. Elsewhere (a
        # run-time width) one row at a time: C's outputs would be loaded and stored for every block.
        tiled = width is not None and width <= tile and _has_init(sch, inner)
        b = _extent(sch, ii)
        # Above `TILE` (a constant width) the block's rows go in groups too, all b columns unrolled,
        # through a `local` tile of the block row's b x width outputs: on the stack nothing aliases
        # it, so LLVM keeps a group's b x `TILE` outputs in registers across the row's blocks (in C
        # they were loaded and stored for every block). One thread, paired with the one-row kernel:
        # mesh-b6 1.23x at width 128, 1.73x at 512; blocks-b8 (groups of 2) 1.13x, 1.45x.
        wide = (
            not whole
            and not tiled
            and width is not None
            and _has_init(sch, inner)
            and b * width * _itemsize(sch) <= STACK_BYTES
        )
        group = _row_group(b) if tiled else _cell_group(b) if wide else 1
        if not whole and group > 1:
            ii_outer, ii = sch.split(ii, [None, group])
        if width is None or width > tile:
            k_outer, k = sch.split(k, [None, tile])
            if whole:
                sch.reorder(k_outer, jo, k, ii, ji)
            elif group > 1:
                # `group` rows of the block and all its columns unrolled in the tile's loop: the
                # group's outputs stay in registers across the row's blocks, as the whole block's do.
                sch.reorder(k_outer, ii_outer, jo, k, ii, ji)
            else:
                sch.reorder(k_outer, ii, jo, k, ji)
        elif whole:
            sch.reorder(jo, k, ii, ji)
        elif group > 1:
            sch.reorder(ii_outer, jo, ji, k, ii)
        else:
            sch.reorder(ii, jo, k, ji)
        init = sch.decompose_reduction(block, jo) if _has_init(sch, inner) else None
        if init is not None and ((tiled and (whole or group > 1)) or (wide and group > 1)):
            # The block row's b x width outputs in a local tile (on the stack, which LLVM keeps in
            # registers: no argument aliases it), C written once from it after the row's stored
            # blocks. (A whole block above `TILE` takes none: LLVM keeps its tile in registers, and
            # with one, mesh-b3 ran 1.3x slower at width 128.)
            sch.cache_write(block, "C", "local")
        if whole or group > 1:
            sch.unroll(ii)
        if whole or group == 1 or not tiled:
            sch.unroll(ji)
        if init is not None and (whole or group > 1):
            sch.unroll(sch.get_loops(init)[-1])  # the tile's rows, as the sum's


def bsr_cpu_sddmm(sch: Schedule) -> None:
    """SDDMM over BSR parts (module docstring): block rows in parallel (balanced by blocks); per
    stored block the dot products of its cells in one sweep over the features, their init out of
    the feature loop (`decompose_reduction`) and the cells unrolled, so the sums stay in
    registers."""
    for outer, inner in _parts(sch):
        _block_rows(sch, outer)
        block = sch.get_block(inner)
        jo, ii, ji, k = sch.get_loops(block)
        whole = _extent(sch, ii) <= WHOLE_BLOCK
        sch.reorder(*((jo, k, ii, ji) if whole else (jo, ii, k, ji)))
        init = sch.decompose_reduction(block, k)
        if whole:
            sch.unroll(ii)
        sch.unroll(ji)
        for loop in sch.get_loops(init)[-2 if whole else -1 :]:
            sch.unroll(loop)


def _row_group(b: int) -> int:
    """Above `WHOLE_BLOCK`, how many rows of a block SpMM computes together: the largest divisor of
    b up to `WHOLE_BLOCK` (b = 6: 3, b = 8: 4; 1 for a prime b: one row at a time)."""
    return max(g for g in range(1, WHOLE_BLOCK + 1) if b % g == 0)


def _cell_group(b: int) -> int:
    """Above `WHOLE_BLOCK`, at widths other than `TILE`, how many rows of a block SpMM computes
    together, all b columns unrolled: the largest divisor g of b with g * b <= `GROUP_CELLS`
    (b = 6: 3, b = 8: 2; 1 for a prime b)."""
    return max(g for g in range(1, b + 1) if b % g == 0 and g * b <= GROUP_CELLS)


def _has_init(sch: Schedule, block: str) -> bool:
    """Whether the cell block zeroes C itself (`fold_block_init`) rather than an `_init0` nest."""
    return not any(n.blocks and n.blocks[0].endswith("_init0") for n in top_level_nests(sch.func))


def _values_dtype(sch: Schedule) -> str | None:
    """The dtype of the function's output `C` (None if it has none)."""
    return next((b.dtype for b in sch.func.buffer_map.values() if b.name == "C"), None)


def _itemsize(sch: Schedule) -> int:
    """Bytes of an element of `C` (8 where unknown)."""
    return 4 if _values_dtype(sch) == "float32" else 8


def _extent(sch: Schedule, loop: LoopRV) -> int:
    """A loop's constant extent (0 when it is not a constant)."""
    return sch.loop_extent(loop) or 0


bsr_cpu_spmm_fixed = fixed_width(bsr_cpu_spmm)
bsr_cpu_sddmm_fixed = fixed_width(bsr_cpu_sddmm)

#: The default BSR schedule per operator and target (`sp.ops` with `format="bsr"`), at a width
#: that is not a multiple of `TILE` (see `default`).
DEFAULT = {("spmm", "cpu"): bsr_cpu_spmm, ("sddmm", "cpu"): bsr_cpu_sddmm}


def default(op: str, target: str, feat: int):
    """The BSR schedule `sp.ops` runs for `op` at width `feat` (None where BSR has none).

    SpMM at a width that is a multiple of `TILE` (32, 128, 512: the usual ones) runs
    `bsr_cpu_spmm_fixed`, a kernel per width: with the row stride of C a constant, LLVM proves
    that the b rows of the tile's outputs do not overlap and keeps them in vector registers
    across the block row's stored blocks (with the width a run-time value they might overlap, so
    each stored block loads and stores C's b x `TILE` outputs again). Measured on bcsstk16, b = 3,
    one thread, CPU time of whole `sp.ops.spmm(..., out=out)` calls against the run-time width
    kernel (with the tile on the stack at width 32, `bsr_cpu_spmm`): 1.16 -> 0.87 ms at width 32,
    2.48 -> 1.48 ms at 128, 11.8 -> 6.9 ms at 512. Other widths keep one kernel for every width
    (a compile per width costs 3-7 s)."""
    if op == "spmm" and target == "cpu" and feat > 0 and feat % TILE == 0:
        return bsr_cpu_spmm_fixed
    return DEFAULT.get((op, target))
