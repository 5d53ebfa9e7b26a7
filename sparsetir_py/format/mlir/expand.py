"""Sparse buffers declared by an MLIR encoding: `T.match_sparse_buffer(a, (I, J), dtype, encoding=enc)`.

The script names the tensor's dimensions (dense_fixed axes `I`, `J`) and computes over them, as
an MLIR kernel does; the encoding decides how the buffer is stored. The frontend runs this pass
on the function it parsed (a statement-rewriting pass, as TVM's lowering passes are): it expands
the declaration into the level axes the encoding implies and rewrites every sparse iteration
that reads (or writes) the buffer to walk those levels instead of the dimensions:

- leading `dense` levels above a sparse one are merged into one dense_fixed root (`i * n + jb`
  for 2:4, `slice * m + i` for ELL), since a sparse level's row is the position of all dense
  levels above it; a sparse top level (DCSR, COO, a sparse vector) hangs under a dense_fixed root
  of length 1;
- every other level becomes the axes its kind says (`format.mlir.levels.LEVEL_KINDS[...].expand`:
  `compressed` a sparse_variable axis (`<a>_pos<l>`, `<a>_crd<l>`, `<a>_nnz<l>`), `singleton`
  a sparse_fixed axis with one coordinate per parent (COO's column), `n_out_of_m(n, m)` /
  `block2_4` a sparse_fixed axis with `n` coordinates in a group of `m`, `dense` below a sparse
  level (BSR's block cells) a dense_fixed inner axis).

The new parameters are named by `format.mlir.argument_names`, so the output of
`sp.to_storage(A, enc, name="a")` is the kernel's keyword arguments for `a`. In the rewritten
iteration every use of a dimension iterator becomes that dimension's coordinate computed from
the level iterators (the encoding's inverse map), the buffer is read by the level iterators, and
a guard skips padding outside the shape (BSR cells past the last row, 2:4 padding past the last
column). Where a spatial dimension is not one dense level of its own (CSC, DCSR, COO, BSR, ELL,
2:4) the init moves to an iteration `<name>_init` over the old spatial axes, so every output
point is initialised once, also where no stored element lands.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...arith.interval import from_affine
from ...errors import EncodingError
from ...ir import make as mk
from ...ir.axis import DENSE_FIXED, Axis, base_axis
from ...ir.buffer import SparseBuffer
from ...ir.expr import BufferLoad, Cast, IntImm, PrimExpr, Var
from ...ir.func import PrimFunc
from ...ir.stmt import AtomicAdd, BufferStore, IfThenElse, SeqStmt, SparseIteration, Stmt, seq
from ...ir.visit import post_order_rewrite, substitute, walk
from . import SparseTensorEncoding, argument_names
from .levels import LevelAt, LevelCounter, SizeArith, largest_constant, level_size

__all__ = ["EncodedLayout", "encoded_layout", "expand_encoded_buffers"]

_INDEX_DTYPES = ("int32", "int64")


class EncodedLayout:
    """The level axes of one encoded buffer, and how to get level coordinates from their iterators.

    `groups[g]` lists the levels axis `axes[g]` holds (one level, several merged dense levels, or
    none for the root of length 1 above a compressed top level).
    """

    def __init__(self, buf: SparseBuffer, enc: SparseTensorEncoding, params: dict[str, Var]):
        self.buf = buf
        self.enc = enc
        self.params = params  # argument name -> parameter (existing or new)
        self.axes: list[Axis] = []
        self.groups: list[list[int]] = []
        self.sizes: list[PrimExpr] = []  # level sizes


def _check_dtypes(enc: SparseTensorEncoding) -> str:
    """The index dtype of the level axes: a script indexes positions and coordinates alike."""
    pos, crd = enc.pos_dtype, enc.crd_dtype
    has_pos = any(lt.has_positions for lt in enc.level_types)
    has_crd = any(lt.has_coordinates for lt in enc.level_types)
    used = {crd} if has_crd else set()
    used |= {pos} if has_pos else set()
    if not used:
        return "int64" if enc.crd_width in (0, 64) else crd
    if len(used) > 1 or not used <= set(_INDEX_DTYPES):
        raise EncodingError(
            f"a script's level axes index positions and coordinates with one dtype, int32 or int64, but "
            f"posWidth = {enc.pos_width} and crdWidth = {enc.crd_width} give {pos} and {crd}: use widths 0, 32 or 64"
        )
    return used.pop()


def _check_constants(enc: SparseTensorEncoding, idtype: str) -> None:
    """The encoding's integers become `IntImm`s of the level axes' dtype: one beyond it would wrap
    in the generated code."""
    limit = 2 ** (int(idtype.removeprefix("int")) - 1) - 1
    level_names = [enc.level_name(k) for k in range(enc.lvl_rank)]
    exprs = [(e, e.to_string(enc.dim_names, enc.symbol_names)) for e in enc.level_exprs]
    exprs += [(e, e.to_string(level_names, enc.symbol_names)) for e in enc.lvl_to_dim or ()]
    for e, text in exprs:
        if largest_constant(e) > limit:
            raise EncodingError(
                f"`{text}` holds {largest_constant(e)}, beyond the script's index dtype {idtype} (at most {limit}): "
                "use posWidth = crdWidth = 0 or 64"
            )
    for lt in enc.level_types:
        if lt.m > limit:  # n_out_of_m's group size (0 for the other kinds)
            raise EncodingError(f"`{lt}` holds {lt.m}, beyond the script's index dtype {idtype} (at most {limit})")


def _script_sizes(idtype: str) -> SizeArith:
    """`level_size` over a script's axis lengths: IR expressions of the level axes' dtype."""

    def refuse(e, sizes):
        raise EncodingError(
            f"in a script, a level expression must be `i`, `i floordiv c`, `i mod c` or a counting level, but got `{e}`"
        )

    return SizeArith(
        const=lambda c: IntImm(c, idtype),
        dim=lambda length: mk.cast(idtype, length),
        ceildiv=lambda size, c: mk.binop("//", mk.add(size, IntImm(c - 1, idtype)), IntImm(c, idtype)),
        other=refuse,
    )


def encoded_layout(
    buf: SparseBuffer, enc: SparseTensorEncoding, existing_params: Mapping[str, Var]
) -> tuple[EncodedLayout, list[Var]]:
    """The level axes of `buf` (declared over its dimension axes) under `enc`, and the new
    parameters they need (those `existing_params` does not already have)."""
    if len(buf.axes) != enc.dim_rank:
        raise EncodingError(
            f"`{buf.name}` is declared over {len(buf.axes)} axes, but the encoding has {enc.dim_rank} dimensions "
            f"({', '.join(enc.dim_names)})"
        )
    for a in buf.axes:
        if a.kind != DENSE_FIXED:
            raise EncodingError(
                f"an encoded buffer is declared over its dimensions, dense_fixed axes; `{a.name}` is {a.kind}"
            )
    if enc.dim_slices:
        raise EncodingError("dimension slices (`#sparse_tensor<slice(...)>`) are not supported in scripts")
    if enc.lvl_to_dim is None:
        raise EncodingError(f"the map of {enc} has no inverse, which a script needs to compute in dimensions")
    idtype = _check_dtypes(enc)
    _check_constants(enc, idtype)
    names = argument_names(buf.data.name, enc)
    new_params: list[Var] = []

    def param(key: str, dtype: str) -> Var:
        name = names[key]
        p = existing_params.get(name)
        if p is None:
            p = Var(name, dtype)
            new_params.append(p)
        elif p.dtype != dtype:
            raise EncodingError(f"parameter `{name}` must be T.{dtype}, but is declared T.{p.dtype}")
        return p

    lay = EncodedLayout(buf, enc, {})
    dim_lengths = [a.length for a in buf.axes]
    sizes = _script_sizes(idtype)
    lay.sizes = [level_size(e, dim_lengths, sizes) for e in enc.level_exprs]
    types = enc.level_types
    first_sparse = next((k for k, lt in enumerate(types) if lt.format != "dense"), None)
    prefix = f"{buf.name}_"

    def add(axis: Axis, group: list[int]) -> Axis:
        lay.axes.append(axis)
        lay.groups.append(group)
        return axis

    if first_sparse is None:  # all dense: one axis per level
        for k in range(len(types)):
            add(Axis(prefix + enc.level_name(k), DENSE_FIXED, lay.sizes[k], idtype=idtype), [k])
        return lay, new_params
    lead = list(range(first_sparse))
    if not lead:
        parent = add(Axis(prefix + "root", DENSE_FIXED, IntImm(1, idtype), idtype=idtype), [])
    else:
        size = lay.sizes[lead[0]]
        for k in lead[1:]:
            size = mk.mul(size, lay.sizes[k])
        name = prefix + "_".join(enc.level_name(k) for k in lead)
        parent = add(Axis(name, DENSE_FIXED, size, idtype=idtype), lead)
    inner_dense = False
    for k in range(first_sparse, len(types)):
        lt = types[k]
        if inner_dense and lt.format != "dense":
            raise EncodingError(
                f"level {k} ({lt}) lies below a dense level that lies below a sparse one; scripts support dense "
                "levels only above the first sparse level or at the bottom"
            )
        inner_dense |= lt.format == "dense"
        if lt.kind.expand is None:
            raise EncodingError(f"{lt.format} levels are not supported in scripts (to_storage stores them)")
        name = prefix + enc.level_name(k)
        for axis, group in lt.kind.expand(LevelAt(k, lt, lay.sizes[k]), name, parent, param, idtype):
            parent = add(axis, group)
    return lay, new_params


def _level_coords(lay: EncodedLayout, ivars: list[PrimExpr]) -> dict[int, PrimExpr]:
    """Each level's coordinate from the iterators of the level axes (merged roots split back)."""
    out: dict[int, PrimExpr] = {}
    for group, v in zip(lay.groups, ivars):
        if len(group) == 1:
            out[group[0]] = v
            continue
        inner = None  # product of the sizes of the levels after the current one in the group
        for k in reversed(group):
            q = v if inner is None else mk.binop("//", v, inner)
            out[k] = q if k == group[0] else mk.binop("%", q, lay.sizes[k])
            inner = lay.sizes[k] if inner is None else mk.mul(inner, lay.sizes[k])
    return out


def _coords_to_axes(lay: EncodedLayout, coords: dict[int, PrimExpr]) -> tuple[PrimExpr, ...]:
    """Level coordinates -> the buffer's indices (merged roots linearised, the root of length 1 at 0)."""
    out = []
    for axis, group in zip(lay.axes, lay.groups):
        if not group:
            out.append(IntImm(0, axis.idtype))
            continue
        idx = coords[group[0]]
        for k in group[1:]:
            idx = mk.add(mk.mul(idx, lay.sizes[k]), coords[k])
        out.append(idx)
    return tuple(out)


class _Rewriter:
    def __init__(self, func: PrimFunc, layouts: dict[SparseBuffer, EncodedLayout]):
        self.func = func
        self.layouts = layouts
        self.new_buffers = {b: b.replace(axes=tuple(lay.axes)) for b, lay in layouts.items()}

    def run(self, s: Stmt) -> Stmt:
        if isinstance(s, SeqStmt):
            return seq(*(self.run(x) for x in s.stmts))
        if not isinstance(s, SparseIteration):
            return s
        touched = [
            n.buffer
            for n in walk(s)
            if isinstance(n, BufferLoad | BufferStore | AtomicAdd) and n.buffer in self.layouts
        ]
        if not touched:
            return s
        out = s
        for buf in dict.fromkeys(touched):
            out = self.rewrite(out, buf)
        return out

    def rewrite(self, s: Stmt, buf: SparseBuffer) -> Stmt:
        if isinstance(s, SeqStmt):  # an init split off by an earlier buffer
            return seq(*(self.rewrite(x, buf) if buf in _buffers_of(x) else x for x in s.stmts))
        lay = self.layouts[buf]
        enc = lay.enc
        new_buf = self.new_buffers[buf]
        dims = list(buf.axes)
        plain = [base_axis(ia) if isinstance(ia, Axis) else None for ia in s.axes]
        missing = [a.name for a in dims if a not in plain]
        if missing:
            raise EncodingError(
                f"iteration `{s.name}` uses `{buf.name}`, declared by an encoding over {[a.name for a in dims]}, "
                f"but does not iterate {missing} as plain axes"
            )
        old_var = {a: s.iter_vars[plain.index(a)] for a in dims}
        old_kind = {a: s.kinds[plain.index(a)] for a in dims}
        lvl_vars = [Var(a.name.lower(), a.idtype) for a in lay.axes]
        lvl_coord = _level_coords(lay, lvl_vars)
        dim_coord = [
            mk.cast(
                old_var[a].dtype,
                from_affine(e, [lvl_coord.get(k) for k in range(enc.lvl_rank)], dtype=lay.axes[0].idtype),
            )
            for a, e in zip(dims, enc.lvl_to_dim)
        ]
        # Kinds: a level axis is spatial when it carries a spatial dimension (the output index
        # depends on it, which the verifier asks of spatial iterators). COO's nonunique rows, ELL's
        # slices and 2:4's merged (row, group) axis are not one-to-one onto those dimensions:
        # a schedule must not parallelise them (the default lowering is serial).
        kinds = []
        for group in lay.groups:
            carried = set()
            for k in group:
                carried |= enc.level_exprs[k].dims_used()
            kinds.append("S" if any(old_kind[dims[d]] == "S" for d in carried) else "R")
        axes, kind_str, ivars = [], [], []
        placed = False
        for ia, v, k in zip(s.axes, s.iter_vars, s.kinds):
            if isinstance(ia, Axis) and ia in dims:
                if not placed:
                    axes += lay.axes
                    kind_str += kinds
                    ivars += lvl_vars
                    placed = True
                continue
            axes.append(ia)
            kind_str.append(k)
            ivars.append(v)
        mapping = {old_var[a]: c for a, c in zip(dims, dim_coord)}
        old_iters = tuple(old_var[a] for a in dims)
        own = tuple(lvl_vars)

        def access(n):
            if not (isinstance(n, BufferLoad | BufferStore | AtomicAdd) and n.buffer is buf):
                return n
            if tuple(n.indices) == old_iters:
                return n.replace(buffer=new_buf, indices=own)
            if isinstance(n, BufferStore | AtomicAdd):
                raise EncodingError(
                    f"iteration `{s.name}` writes `{buf.name}` (declared by an encoding) at indices other than its "
                    "own iterators; write it at `[i, j, ...]` of the iteration"
                )
            if not _one_to_one(lay):
                raise EncodingError(
                    f"iteration `{s.name}` reads `{buf.name}` at computed indices; a nonunique (COO) or counting "
                    "(ELL) level can only be read by the iteration's own iterators"
                )
            index = [mk.cast(lay.axes[0].idtype, substitute(i, mapping)) for i in n.indices]
            coords = {k: from_affine(e, index, dtype=lay.axes[0].idtype) for k, e in enumerate(enc.level_exprs)}
            return BufferLoad(new_buf, _coords_to_axes(lay, coords))

        body = substitute(post_order_rewrite(s.body, access), mapping)
        guard = None
        for a, c in zip(dims, dim_coord):
            if any(_strip(c) is v and _strip(ax.length) == _strip(a.length) for ax, v in zip(lay.axes, lvl_vars)):
                continue
            guard = mk.and_(guard, mk.cmp("<", c, mk.cast(c.dtype, a.length)))
        if guard is not None:
            body = IfThenElse(guard, body)
        init = s.init
        split_init = None
        if init is not None:
            if self.inline_init_ok(s, lay, kinds, dims, old_kind, guard) and _one_to_one(lay):
                init = substitute(post_order_rewrite(init, access), mapping)
            else:
                kept = [(ia, v) for ia, v, k in zip(s.axes, s.iter_vars, s.kinds) if k == "S"]
                fresh = {v: Var(v.name, v.dtype) for _, v in kept}
                split_init = SparseIteration(
                    f"{s.name}_init",
                    tuple(ia for ia, _ in kept),
                    "S" * len(kept),
                    tuple(fresh[v] for _, v in kept),
                    substitute(init, fresh),
                    attrs=s.attrs,
                )
                init = None
        compute = SparseIteration(s.name, tuple(axes), "".join(kind_str), tuple(ivars), body, init, attrs=s.attrs)
        return seq(split_init, compute)

    @staticmethod
    def inline_init_ok(s, lay, kinds, dims, old_kind, guard) -> bool:
        """The init may stay when each spatial dimension is one whole dense level axis of its own
        (CSR's rows) placed before every reduction level axis: then its points are all visited."""
        if guard is not None:
            return False
        seen_reduction = False
        for axis, group, kind in zip(lay.axes, lay.groups, kinds):
            if kind == "R":
                seen_reduction = True
                continue
            if len(group) != 1 or axis.kind != DENSE_FIXED or seen_reduction:
                return False
        carried_spatial = set()
        for group, kind in zip(lay.groups, kinds):
            if kind == "S":
                for k in group:
                    carried_spatial |= lay.enc.level_exprs[k].dims_used()
        return all(old_kind[a] != "S" or d in carried_spatial for d, a in enumerate(dims))


def _one_to_one(lay: EncodedLayout) -> bool:
    """No level repeats a coordinate (nonunique) or counts (ELL)."""
    enc = lay.enc
    return all(lt.is_unique for lt in enc.level_types) and not any(isinstance(e, LevelCounter) for e in enc.level_exprs)


def _strip(e: PrimExpr) -> PrimExpr:
    """`e` without the casts around it (an int64 level iterator used as an int32 coordinate)."""
    while isinstance(e, Cast):
        e = e.value
    return e


def _buffers_of(s: Stmt) -> set:
    return {n.buffer for n in walk(s) if isinstance(n, BufferLoad | BufferStore | AtomicAdd)}


def expand_encoded_buffers(func: PrimFunc, encoded: Mapping[SparseBuffer, SparseTensorEncoding]) -> PrimFunc:
    """`func` with each buffer of `encoded` moved onto its encoding's level axes (see the module
    docstring): new parameters appended, level axes added, iterations rewritten."""
    if not encoded:
        return func
    existing = {p.name: p for p in func.params}
    params = list(func.params)
    layouts: dict[SparseBuffer, EncodedLayout] = {}
    for buf, enc in encoded.items():
        lay, new = encoded_layout(buf, enc, existing)
        for p in new:
            existing[p.name] = p
        params += new
        layouts[buf] = lay
    rw = _Rewriter(func, layouts)
    body = rw.run(func.body)
    axes = list(func.axes) + [a for lay in layouts.values() for a in lay.axes]
    buffers = tuple(rw.new_buffers.get(b, b) for b in func.buffers)
    return func.replace(params=tuple(params), axes=tuple(axes), buffers=buffers, body=body)
