"""`lower_sparse_iter`: Stage I (coordinate space) -> Stage II (position space), as SparseTIR.

Four steps:

1. Auxiliary buffer materialisation: every `indptr` becomes a flat buffer `J_indptr` and every
   `indices` a sparse buffer `J_indices` over the axis and its ancestors, with value-range hints.
2. Nested loop generation: one loop per iterator (one per fused group), serial, from 0. A new
   block starts where a loop's extent depends on an enclosing loop (a variable or attached axis),
   so iteration `N` lowers to blocks `N0`, `N1`, ... from the outermost in; the body goes in the
   innermost block. The init of a reduction goes in the outermost block that holds a reduction
   iterator; just outside that block's loops, a guard runs the init over the spatial points when
   the reduction domain is empty, so empty rows are still initialised. A fused group of spatial
   then reduction iterators (`T.fuse(I, J)` of SpMM, kinds "SR") is one reduction loop whose
   iterations update the same outputs: there the init runs first, in a loop nest of its own over
   the whole spatial domain (blocks `N_init0`, ...; fused members as plain loops, so rows with no
   stored point are initialised too), and the iteration's blocks have no init.
3. Coordinate translation: a buffer access indexed by the iterator of the buffer's own axis (under
   the same parent) becomes that iterator's position; any other coordinate is looked up with a
   binary search over the sorted coordinates of its row, and a miss reads the default value. A
   write the verifier cannot prove stored (a checked write) searches the same way, and a miss
   sets the buffer's error flag (`transform/checked_writes.py`) instead of writing.
   Fused axes recover their parents' positions by a binary search over indptr, done once in a
   preprocessing block into a scratch buffer.
4. Read/write region analysis for every block (`region_analysis`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..coiteration import assemble
from ..errors import LoweringError, VerifyError
from ..format.storage import n_positions
from ..ir import make as mk
from ..ir.axis import (
    DENSE_FIXED,
    DENSE_VARIABLE,
    SPARSE_FIXED,
    AttachedAxis,
    Axis,
    FusedAxis,
    IterAxis,
    base_axis,
)
from ..ir.buffer import FlatBuffer, SparseBuffer
from ..ir.expr import BinOp, BufferLoad, Call, IntImm, PrimExpr, Select, Var, const
from ..ir.func import IRModule, PrimFunc
from ..ir.node import FrozenDict
from ..ir.stmt import (
    AtomicAdd,
    Block,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    IterVar,
    SeqStmt,
    SparseIteration,
    Stmt,
    seq,
)
from ..ir.verify import checked_writes, verify_cached
from ..ir.visit import map_children, substitute
from . import checked_writes as checked
from . import coiterate
from .region import annotate_regions


@dataclass
class IterInfo:
    """Where a Stage I iterator stands in position space."""

    axis: Axis
    chain: tuple[PrimExpr, ...]  # position-space indices of the axis's tree: ancestors' then its own
    gpos: PrimExpr  # position over the whole level (indexes indptr/indices storage)
    coord: PrimExpr  # the coordinate


@dataclass
class Unit:
    """One generated loop: a single iterator, or a fused group walked by one loop."""

    members: list[int]  # iterator indices in the sparse iteration
    kind: str  # "S" or "R" (a fused group with a reduction member is "R")
    variable: bool  # the extent depends on an enclosing iterator


class NameGen:
    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def __call__(self, base: str) -> str:
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name


class Lowering:
    def __init__(self, func: PrimFunc):
        self.func = func
        taken = {p.name for p in func.params} | {a.name for a in func.axes} | {b.name for b in func.buffers}
        self.fresh = NameGen(taken)
        self.indptr: dict[Axis, FlatBuffer] = {}
        self.indices: dict[Axis, SparseBuffer] = {}
        self.scratch: list[FlatBuffer] = []
        self.aux_by_handle: dict[Var, object] = {}
        self.iters: dict[Var, IterInfo] = {}
        self.axis_iter: dict[Axis, Var] = {}
        self.block_names: set[str] = set()
        self.fused_scratch: dict[tuple[str, Axis], FlatBuffer] = {}  # (iteration name, member axis)
        # Writes the verifier cannot prove stored, and the error flag of each buffer they write.
        self.checked = self.checked_stores(func)
        self.flags: dict[SparseBuffer, FlatBuffer] = {}
        self.coiterations: dict[int, tuple[Stmt, coiterate.CoIteration]] = {}  # placeholder id -> merge
        self.block_allocs: list[FlatBuffer] = []  # scratch of the block being built (merge positions)

    # ---------------------------------------------------------------- step 1: auxiliary buffers
    def materialize(self) -> list:
        aux = []
        for a in self.func.axes:
            if a.indptr is not None:
                buf = self.aux_by_handle.get(a.indptr)
                if buf is None:
                    rows = mk.add(n_positions(a.parent), IntImm(1, a.parent.length.dtype))
                    buf = FlatBuffer(
                        self.fresh(f"{a.name}_indptr"), (rows,), a.idtype, a.indptr,
                        value_range=(IntImm(0, a.idtype), mk.cast(a.idtype, n_positions(a))),
                    )  # fmt: skip
                    self.aux_by_handle[a.indptr] = buf
                    aux.append(buf)
                self.indptr[a] = buf
            if a.indices is not None:
                buf = self.aux_by_handle.get(a.indices)
                if buf is None:
                    hi = mk.sub(mk.cast(a.idtype, a.length), IntImm(1, a.idtype))
                    buf = SparseBuffer(
                        self.fresh(f"{a.name}_indices"), (*a.ancestors(), a), a.idtype, a.indices,
                        value_range=(IntImm(0, a.idtype), hi),
                    )  # fmt: skip
                    self.aux_by_handle[a.indices] = buf
                    aux.append(buf)
                self.indices[a] = buf
        return aux

    @staticmethod
    def checked_stores(func: PrimFunc) -> set[Stmt]:
        """The stores the verifier could not prove stored (none when `func` is not valid Stage I:
        the pass is entered through `lower_sparse_iter`, which verifies first)."""
        if func.stage != 1:
            return set()
        try:
            return {c.store for c in checked_writes(func)}
        except VerifyError:
            return set()

    def indptr_at(self, a: Axis, gpos: PrimExpr) -> PrimExpr:
        return BufferLoad(self.indptr[a], (gpos,))

    def row_extent(self, a: Axis, parent_gpos: PrimExpr) -> PrimExpr:
        """Stored elements of `a` under the parent position `parent_gpos`."""
        if a.kind == SPARSE_FIXED:
            return mk.cast(a.idtype, a.nnz_cols)
        if a.kind == DENSE_FIXED:
            return mk.cast(a.idtype, a.length)
        one = IntImm(1, parent_gpos.dtype)
        return mk.sub(self.indptr_at(a, mk.add(parent_gpos, one)), self.indptr_at(a, parent_gpos))

    def row_end(self, a: Axis, parent_gpos: PrimExpr) -> PrimExpr:
        if a.kind == SPARSE_FIXED:
            return mk.add(self.row_start(a, parent_gpos), a.nnz_cols)
        return self.indptr_at(a, mk.add(parent_gpos, IntImm(1, parent_gpos.dtype)))

    def row_start(self, a: Axis, parent_gpos: PrimExpr) -> PrimExpr:
        if a.kind == SPARSE_FIXED:
            return mk.mul(mk.cast(a.idtype, parent_gpos), a.nnz_cols)
        return self.indptr_at(a, parent_gpos)

    # ---------------------------------------------------------------- iterators
    def parent_info(self, ia: IterAxis) -> tuple[tuple[PrimExpr, ...], PrimExpr]:
        """(position-space chain of the parent, parent's level position) for iterating `ia`."""
        a = base_axis(ia)
        if isinstance(ia, AttachedAxis):
            target = self.info_of_axis(ia.parent, a)
            row = mk.cast(a.idtype, target.coord)
            return (row,), row
        info = self.info_of_axis(a.parent, a)
        return info.chain, info.gpos

    def info_of_axis(self, parent: Axis, child: Axis) -> IterInfo:
        var = self.axis_iter.get(parent)
        if var is None:
            raise LoweringError(f"axis `{child.name}` is iterated without its parent `{parent.name}`")
        return self.iters[var]

    def extent_of(self, ia: IterAxis) -> PrimExpr:
        a = base_axis(ia)
        if a.kind == DENSE_FIXED:
            return mk.cast(a.idtype, a.length)
        if a.kind == SPARSE_FIXED:
            return mk.cast(a.idtype, a.nnz_cols)
        _, gpos = self.parent_info(ia)
        return self.row_extent(a, gpos)

    def bind_iterator(self, var: Var, ia: IterAxis, local: PrimExpr, gpos: PrimExpr | None = None) -> None:
        """Record where Stage I iterator `var` (over `ia`) is, given its local position (and its
        level position when the caller already has it, as a fused loop does)."""
        a = base_axis(ia)
        if a.kind == DENSE_FIXED:
            info = IterInfo(a, (local,), local, local)
        else:
            chain, pgpos = self.parent_info(ia)
            gpos = gpos if gpos is not None else mk.add(self.row_start(a, pgpos), local)
            chain = (*chain, local)
            coord = BufferLoad(self.indices[a], chain) if a.is_sparse else local
            info = IterInfo(a, chain, gpos, coord)
        self.iters[var] = info
        self.axis_iter[a] = var

    # ---------------------------------------------------------------- step 2: loops and blocks
    def units(self, it: SparseIteration) -> list[Unit]:
        out: list[Unit] = []
        k = 0
        while k < len(it.axes):
            ia = it.axes[k]
            if isinstance(ia, FusedAxis):
                n = len(ia.group)
                kinds = it.kinds[k : k + n]
                if "RS" in kinds and it.init is not None:
                    raise LoweringError(
                        f'sparse iteration `{it.name}`: a fused group of kinds "{kinds}" has a spatial member after '
                        "a reduction one, which cannot be lowered"
                    )
                if ia.group[0].kind != DENSE_FIXED:
                    raise LoweringError(f"sparse iteration `{it.name}`: a fused group must start at a root axis")
                out.append(Unit(list(range(k, k + n)), "R" if "R" in kinds else "S", False))
                k += n
                continue
            a = base_axis(ia)
            variable = isinstance(ia, AttachedAxis) or a.is_variable
            out.append(Unit([k], it.kinds[k], variable))
            k += 1
        return out

    def groups(self, units: list[Unit]) -> list[list[Unit]]:
        groups: list[list[Unit]] = []
        for u in units:
            if not groups or u.variable:
                groups.append([u])
            else:
                groups[-1].append(u)
        return groups

    def lower_iteration(self, it: SparseIteration) -> Stmt:
        co = coiterate.match(it)
        if co is not None:
            # Sparse operands met at a dense reduction iterator: the spatial iterators lower as
            # usual, the reduction becomes a merge of the operands' stored coordinates.
            placeholder = Evaluate(IntImm(0, "int32"))
            self.coiterations[id(placeholder)] = (placeholder, co)
            n = len(it.axes) - 1
            it = SparseIteration(it.name, it.axes[:n], it.kinds[:n], it.iter_vars[:n], placeholder, None, it.attrs)
        units = self.units(it)
        init_nest = None
        if it.init is not None and any(self.is_mixed(it, u) for u in units):
            init_nest = self.init_nest(it)
            it = it.replace(init=None)  # the nest above initialises; the blocks only accumulate
        groups = self.groups(units)
        first_r = next((g for g, grp in enumerate(groups) if any(u.kind == "R" for u in grp)), None)
        pre = [self.fuse_search(it, u) for u in units if len(u.members) > 1]
        saved = (dict(self.iters), dict(self.axis_iter))
        guard = self.empty_guard(it, groups, 0) if first_r == 0 else None
        body = self.lower_group(it, groups, 0, first_r)
        self.iters, self.axis_iter = saved
        return seq(init_nest, *pre, guard, body)

    @staticmethod
    def is_mixed(it: SparseIteration, u: Unit) -> bool:
        """A fused group of spatial and reduction iterators (one reduction loop over its points)."""
        return len({it.kinds[k] for k in u.members}) > 1

    def init_nest(self, it: SparseIteration) -> Stmt:
        """The init of `it` over its whole spatial domain, as the lowering of a sparse iteration
        `N_init` over the spatial iterators alone (fused members iterated as plain axes, so a row
        with no stored point is initialised too)."""
        spatial = [k for k, kind in enumerate(it.kinds) if kind == "S"]
        axes = tuple(it.axes[k].axis if isinstance(it.axes[k], FusedAxis) else it.axes[k] for k in spatial)
        # Fresh iterators named `i_init`, ...: the loops of the nest then read apart from the main ones.
        renamed = {it.iter_vars[k]: Var(f"{it.iter_vars[k].name}_init", it.iter_vars[k].dtype) for k in spatial}
        body = substitute(it.init, renamed)
        # The init's checked writes stay checked under the new iterators.
        self.checked |= {substitute(w, renamed) for w in self.checked}
        nest = SparseIteration(f"{it.name}_init", axes, "S" * len(spatial), tuple(renamed.values()), body)
        return self.lower_iteration(nest)

    def lower_group(self, it: SparseIteration, groups: list[list[Unit]], g: int, first_r: int | None) -> Stmt:
        """Loops of group `g`, its block, and inside it everything deeper."""
        group = groups[g]
        loops: list[tuple[Var, PrimExpr]] = []
        iter_vars: list[IterVar] = []
        for u in group:
            extent = self.unit_extent(it, u)
            loop_var = Var(self.fresh(self.unit_name(it, u)), extent.dtype)
            block_var = Var(self.fresh("v" + self.unit_name(it, u)), extent.dtype)
            loops.append((loop_var, extent))
            iter_vars.append(IterVar(block_var, extent, u.kind, loop_var))
            self.bind_unit(it, u, block_var)
        if g + 1 < len(groups):
            guard = self.empty_guard(it, groups, g + 1) if first_r == g + 1 else None
            inner = seq(guard, self.lower_group(it, groups, g + 1, first_r))
        else:
            inner = self.translate_stmt(it.body)
        init = None
        if it.init is not None and first_r == g:
            init = self.init_loops(it, groups, g + 1)
        elif it.init is not None and first_r is None and g == len(groups) - 1:
            inner = seq(self.translate_stmt(it.init), inner)  # no reduction: init then body per point
        name = f"{it.name}{g}"
        if name in self.block_names:
            raise LoweringError(f"two blocks would be named `{name}`: rename one of the sparse iterations")
        self.block_names.add(name)
        # Annotations of the sparse iteration (`sch.annotate` on its handle) go to every block it makes.
        allocs, self.block_allocs = tuple(self.block_allocs), []
        stmt: Stmt = Block(
            name, tuple(iter_vars), (), (), inner, init, alloc_buffers=allocs, annotations=FrozenDict(it.attrs)
        )
        for loop_var, extent in reversed(loops):
            stmt = For(loop_var, IntImm(0, extent.dtype), extent, "serial", stmt)
        return stmt

    def unit_name(self, it: SparseIteration, u: Unit) -> str:
        return "_".join(it.iter_vars[k].name for k in u.members)

    def unit_extent(self, it: SparseIteration, u: Unit) -> PrimExpr:
        if len(u.members) == 1:
            return self.extent_of(it.axes[u.members[0]])
        leaf = base_axis(it.axes[u.members[-1]])
        return mk.cast(leaf.idtype, n_positions(leaf))

    def bind_unit(self, it: SparseIteration, u: Unit, block_var: Var) -> None:
        if len(u.members) == 1:
            k = u.members[0]
            self.bind_iterator(it.iter_vars[k], it.axes[k], block_var)
            return
        # A fused group: the loop walks the leaf's positions; parents come from the search block.
        group = [base_axis(it.axes[k]) for k in u.members]
        gpos: list[PrimExpr] = [None] * len(group)
        gpos[-1] = block_var
        for level in range(len(group) - 1, 0, -1):
            gpos[level - 1] = BufferLoad(self.fused_scratch[(it.name, group[level])], (block_var,))
        for level, k in enumerate(u.members):
            a = group[level]
            if level == 0:
                local = mk.cast(a.idtype, gpos[0])
            else:
                local = mk.sub(gpos[level], self.row_start(a, gpos[level - 1]))
            self.bind_iterator(it.iter_vars[k], it.axes[k], local, gpos[level])

    def fuse_search(self, it: SparseIteration, u: Unit) -> Stmt:
        """A preprocessing loop: for every leaf position, the position of each fused ancestor."""
        group = [base_axis(it.axes[k]) for k in u.members]
        leaf = group[-1]
        extent = mk.cast(leaf.idtype, n_positions(leaf))
        p = Var(self.fresh("p"), extent.dtype)
        vp = Var(self.fresh("vp"), extent.dtype)
        stores = []
        child_pos: PrimExpr = vp
        for level in range(len(group) - 1, 0, -1):
            a, parent = group[level], group[level - 1]
            scratch = FlatBuffer(self.fresh(f"{parent.name}_of_{a.name}"), (extent,), parent.idtype)
            self.scratch.append(scratch)
            self.fused_scratch[(it.name, a)] = scratch
            if a.kind == SPARSE_FIXED:
                row = BinOp("//", child_pos, mk.cast(child_pos.dtype, a.nnz_cols))
            else:
                rows = mk.add(n_positions(parent), IntImm(1, parent.length.dtype))
                hi = mk.cast(a.idtype, rows)
                target = mk.add(child_pos, IntImm(1, child_pos.dtype))
                found = Call("lower_bound", (self.indptr[a], IntImm(0, a.idtype), hi, target), a.idtype)
                row = mk.sub(found, IntImm(1, a.idtype))
            stores.append(BufferStore(scratch, (vp,), mk.cast(parent.idtype, row)))
            child_pos = BufferLoad(scratch, (vp,))
        name = self.fresh(f"{it.name}_fuse_search")
        self.block_names.add(name)
        block = Block(name, (IterVar(vp, extent, "S", p),), (), (), seq(*stores))
        return For(p, IntImm(0, extent.dtype), extent, "serial", block)

    # ---------------------------------------------------------------- init placement
    def init_loops(self, it: SparseIteration, groups: list[list[Unit]], start: int) -> Stmt:
        """The init over every spatial point of groups `start`, `start + 1`, ...: plain loops with
        fresh variables (the enclosing iterators are already bound)."""
        saved = (dict(self.iters), dict(self.axis_iter))
        loops: list[tuple[Var, PrimExpr]] = []
        for grp in groups[start:]:
            for u in grp:
                if u.kind != "S":
                    continue
                extent = self.unit_extent(it, u)
                var = Var(self.fresh(self.unit_name(it, u) + "_init"), extent.dtype)
                loops.append((var, extent))
                self.bind_unit(it, u, var)
        body = self.translate_stmt(it.init)
        self.iters, self.axis_iter = saved
        for var, extent in reversed(loops):
            body = For(var, IntImm(0, extent.dtype), extent, "serial", body)
        return body

    def empty_guard(self, it: SparseIteration, groups: list[list[Unit]], g: int) -> Stmt | None:
        """Just outside the loops of group `g` (the first with a reduction iterator): when its
        reduction domain is empty the block never runs, so initialise its spatial points here."""
        if it.init is None:
            return None
        condition = None
        for u in groups[g]:
            if u.kind != "R":
                continue
            extent = self.unit_extent(it, u)
            if not (isinstance(extent, IntImm) and extent.value > 0):
                condition = mk.or_(condition, mk.cmp("==", extent, IntImm(0, extent.dtype)))
        if condition is None:
            return None
        return IfThenElse(condition, self.init_loops(it, groups, g))

    # ---------------------------------------------------------------- step 3: coordinate translation
    def translate_stmt(self, s: Stmt) -> Stmt:
        merge = self.coiterations.get(id(s))
        if merge is not None and merge[0] is s:
            return coiterate.lower(self, merge[1])
        if isinstance(s, SparseIteration):
            return self.lower_iteration(s)
        if isinstance(s, BufferStore | AtomicAdd):  # an atomic add is a store: positions, not coordinates
            indices, valid = self.translate_access(s.buffer, s.indices)
            store = type(s)(s.buffer, indices, self.translate_expr(s.value))
            if s in self.checked:
                return self.checked_store(s, store, valid)
            return store if valid is None else IfThenElse(valid, store)
        if isinstance(s, SeqStmt):
            return seq(*(self.translate_stmt(x) for x in s.stmts)) if s.stmts else s
        if isinstance(s, IfThenElse):
            else_case = self.translate_stmt(s.else_case) if s.else_case is not None else None
            return IfThenElse(self.translate_expr(s.condition), self.translate_stmt(s.then_case), else_case)
        return map_children(s, lambda n: self.translate_expr(n) if isinstance(n, PrimExpr) else n)

    def translate_expr(self, e: PrimExpr) -> PrimExpr:
        def rule(n):
            if isinstance(n, Var) and n in self.iters:
                return self.iters[n].coord
            return n

        def walk(n):
            if isinstance(n, BufferLoad):
                indices, valid = self.translate_access(n.buffer, n.indices)
                load = BufferLoad(n.buffer, indices)
                if valid is None:
                    return load
                return Select(valid, load, const(n.buffer.default_value, n.buffer.dtype))
            if isinstance(n, Var):
                return rule(n)
            return map_children(n, walk)

        return walk(e)

    def translate_access(self, buf, indices) -> tuple[tuple[PrimExpr, ...], PrimExpr | None]:
        """Coordinates -> position-space indices, and the condition that the structure stores them."""
        if not isinstance(buf, SparseBuffer):
            return tuple(self.translate_expr(i) for i in indices), None
        out: list[PrimExpr] = []
        valid = None
        gpos = None
        for a, e in zip(buf.axes, indices):
            info = self.iters.get(e) if isinstance(e, Var) else None
            if info is not None and info.axis is a and info.chain[:-1] == tuple(out):
                out.append(info.chain[-1])
                gpos = info.gpos
                continue
            c = mk.cast(a.idtype, self.translate_expr(e))
            if a.kind == DENSE_FIXED:
                out.append(c)
                gpos = c
                continue
            start = self.row_start(a, gpos)
            zero = IntImm(0, a.idtype)
            if a.kind == DENSE_VARIABLE:
                local = c
                ok = mk.and_(mk.cmp("<=", zero, c), mk.cmp("<", c, self.row_extent(a, gpos)))
            else:
                end = self.row_end(a, gpos)
                # An unsorted level is scanned: a binary search there finds the wrong position.
                search = "lower_bound" if a.sorted else "linear_find"
                found = Call(search, (self.indices[a], start, end, c), a.idtype)
                local = mk.sub(found, start)
                ok = mk.and_(mk.cmp("<", found, end), self.found_at(a, out, local, found, c))
            out.append(local)
            gpos = mk.add(start, local)
            valid = mk.and_(valid, ok)
        return tuple(out), valid

    def checked_store(self, s: BufferStore | AtomicAdd, store: Stmt, found: PrimExpr | None) -> Stmt:
        """A write the verifier could not prove stored (`transform/checked_writes.py`): the store
        where its dense indices are in range and the search finds it, else a miss in the flag."""
        flag = self.flags.get(s.buffer)
        if flag is None:
            flag = self.flags[s.buffer] = checked.flag_buffer(s.buffer, self.fresh)
        coords = [self.translate_expr(e) for e in s.indices]
        own = [isinstance(e, Var) and e in self.iters and self.iters[e].axis is a
               for a, e in zip(s.buffer.axes, s.indices)]  # fmt: skip
        bounds = checked.in_range(s.buffer, [None if o else c for o, c in zip(own, coords)])
        return checked.checked_store(store, found, bounds, checked.report_miss(flag, coords))

    def found_at(self, a: Axis, chain: list[PrimExpr], local: PrimExpr, found: PrimExpr, c: PrimExpr) -> PrimExpr:
        """Whether the search for `c` in `a`'s row found it at `found` (a position before the row's
        end). `a`'s indices may be declared by an axis of another tree that shares the arrays (more
        ancestors): then `chain` does not index them, and the test is done at the flat position
        (`lower_bound` over one element: `indices[found] < c + 1`, given `indices[found] >= c`)."""
        indices = self.indices[a]
        if len(indices.axes) == len(chain) + 1:
            return mk.cmp("==", BufferLoad(indices, (*chain, local)), c)
        if not a.sorted:
            return const(True)  # linear_find stops at `c` or at the end
        one = IntImm(1, a.idtype)
        after = Call("lower_bound", (indices, found, mk.add(found, one), mk.add(c, one)), a.idtype)
        return mk.cmp(">", after, found)

    # ---------------------------------------------------------------- the function
    def run(self) -> PrimFunc:
        aux = self.materialize()
        body = self.translate_stmt(self.func.body)
        buffers = (*self.func.buffers, *aux, *self.scratch, *self.flags.values())
        attrs = FrozenDict({**self.func.attrs, "stage": 2})
        out = PrimFunc(self.func.name, self.func.params, self.func.axes, buffers, body, attrs)
        return annotate_regions(checked.with_flags(out, self.flags))


def lower_sparse_iter(mod: PrimFunc | IRModule) -> IRModule:
    """Lower every Stage I function of `mod` to Stage II (position space); others pass through.

    >>> import sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> mod = sp.lower_sparse_iter(spmm_script())
    >>> mod["main"].stage
    2
    >>> sch = sp.Schedule(mod)
    >>> [len(sch.get_loops(sch.get_block(name))) for name in ("csrmm0", "csrmm1")]
    [1, 2]
    """
    mod = IRModule.from_any(mod)
    verify_cached(mod)  # a named error for ill-formed input, not a wrong lowering
    out = {}
    for name, func in mod.items():
        if func.stage == 1 and any(a.assemble for a in func.axes):
            # An assembled output: the symbolic and numeric kernels of `coiteration`, one function
            # each, that `build` runs in order with the host's prefix sum between them.
            out.update(assemble.lower(func))
            continue
        out[name] = Lowering(func).run() if func.stage == 1 else func
    return IRModule(FrozenDict(out))
