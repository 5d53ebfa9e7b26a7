"""CPU schedules of SpMM and SDDMM with A in BSR (`format_rules.bsr`), for any block size.

`sp.ops` builds BSR kernels on the padded shape (`sp.transform.pad_shape`: C and B, or X and Y,
hold `m_bsr * b` and `n_bsr * b` rows), so no guard is left in the block product and the block
size `b` is a constant of the kernel (the rule specialises `block_size`). The Stage II function
then holds, per part `<it>_<rule>`, a nest of blocks `<it>_<rule>0` (a block row, loop `io`) and
`<it>_<rule>1` (loops `jo`, `ii`, `ji`, `k`: a stored block, its b x b cells, the features);
SpMM has one more nest before it, `<it>_init0`, which zeroes C.

SpMM (`bsr_cpu_spmm`), per block row and per stored block, for each feature `k`:

    C[io*b + ii, k] += sum_ji A[io, jo, ii, ji] * B[col*b + ji, k]     for ii, ji < b, unrolled

The feature loop is the innermost loop: it is vectorised, and (for b <= `WHOLE_BLOCK`) in each of
its iterations every element of the b rows of B is loaded once and used for b output rows (b^2 multiply-adds per
b loads of B and b updates of C, where CSR does one multiply-add per load of B). The b^2 values
of the block and its column are loaded once per block, before the feature loop
(`hoist_loop_invariants`). Block rows run in parallel, one range of equal blocks per thread
(`split_by` over the block row pointer).

SDDMM (`bsr_cpu_sddmm`), per stored block, the b x b dot products of b rows of X with b rows of Y
in one sweep over the features: each element of X's b rows is loaded once for b products (for
b <= `WHOLE_BLOCK` all b^2 sums live in registers; for larger blocks one row of the block at a
time, b sums).
"""

from __future__ import annotations

from sparsetir_py.schedule import LoopRV, Schedule, top_level_nests

from .common import fixed_width

#: Up to this block size the whole b x b block product is unrolled inside the feature loop; above
#: it, one row of the block at a time (b cells unrolled, the block's rows a loop around the
#: features): 36 or 64 unrolled cells take Numba 40-60 s to compile, and SDDMM's b^2 sums would
#: not fit the vector registers.
WHOLE_BLOCK = 4


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


def bsr_cpu_spmm(sch: Schedule) -> None:
    """SpMM over BSR parts (module docstring): C's init in parallel over rows; per part block rows
    in parallel (balanced by blocks), per stored block the features vectorised around the b x b
    block product, unrolled."""
    for nest in top_level_nests(sch.func):
        if nest.blocks and nest.blocks[0].endswith("_init0"):
            sch.parallel(nest.spatial[0])
    for outer, inner in _parts(sch):
        _block_rows(sch, outer)
        jo, ii, ji, k = sch.get_loops(sch.get_block(inner))
        if _extent(sch, ii) <= WHOLE_BLOCK:
            sch.reorder(jo, k, ii, ji)
            sch.unroll(ii)
        else:
            sch.reorder(jo, ii, k, ji)
        sch.unroll(ji)


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


def _extent(sch: Schedule, loop: LoopRV) -> int:
    """A loop's constant extent (0 when it is not a constant)."""
    return sch.loop_extent(loop) or 0


bsr_cpu_spmm_fixed = fixed_width(bsr_cpu_spmm)
bsr_cpu_sddmm_fixed = fixed_width(bsr_cpu_sddmm)

#: The default BSR schedule per operator and target (`sp.ops` with `format="bsr"`).
DEFAULT = {("spmm", "cpu"): bsr_cpu_spmm, ("sddmm", "cpu"): bsr_cpu_sddmm}
