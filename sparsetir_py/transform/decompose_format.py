"""`decompose_format`: Stage I -> Stage I, one sparse matrix split into parts of simpler formats.

    mod = sp.decompose_format(csrmm, [rule_b4, rule_ell])   # also sp.format_decompose
    pre = sp.extract_preprocess(mod)                        # only the copy iterations
    mod = sp.remove_preprocess(mod)                         # only the computation

For each `FormatRewriteRule` (SparseTIR's composable formats):

1. The new format's parameters, axes and buffers join the function, renamed `<name>_<rule>`
   (`a_b4`, `IO_b4`, `A_b4`); callers pass the new arguments by these names.
2. A copy iteration `rewrite_<buffer>_<rule>` (attribute `preprocess`) over the new format's
   axes fills each rewritten buffer from the old one through `inv_idx_map`: a gather, so it
   writes only what the new structure stores; a cell whose old coordinate the old buffer does not
   store (or that lies outside the old shape: padding) gets the default value 0.
3. Every sparse iteration that reads a rewritten buffer becomes, when it has an init, one
   iteration `<iteration>_init` over its spatial axes running the init (each output point
   initialised once, rows that no part touches included), then one compute iteration
   `<iteration>_<rule>` per rule, without init, over the iteration's axes with the rewritten ones
   replaced by the rule's new axes (each new axis takes the kind of the old axis `axis_map` maps
   to it, except that a new axis `inv_idx_map` does not use, such as hyb's layers, is a
   reduction: several of its points land on one old point). Its body is the old body, with the
   rewritten buffer read through `idx_map` (directly by the new iterators when it was read by the
   old ones), every other use of an old iterator replaced by its coordinate
   `inv_idx_map(new iterators)`, and a guard that the coordinate lies in the old shape (padding
   rows and columns of a block format compute nothing).

The parts accumulate into the same outputs, so the decomposition computes what the original did
as long as the rules partition the stored nonzeros (each nonzero in exactly one part; the
converters guarantee it, and padding holds 0). A rewritten buffer that the iteration writes (the
output of SDDMM, over the same axes as its input) moves to the new format too: each part's
iteration keeps the init and writes its own copy, indexed by its own iterators, and the caller
maps the parts back to the old order (`sp.ops.sddmm` does).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..arith import dim
from ..arith.interval import from_affine
from ..errors import FormatError
from ..format.rule import FormatRewriteRule
from ..ir import make as mk
from ..ir.axis import DENSE_FIXED, AttachedAxis, Axis, FusedAxis, IterAxis, base_axis
from ..ir.buffer import SparseBuffer
from ..ir.expr import BufferLoad, PrimExpr, Var, const
from ..ir.func import IRModule, PrimFunc
from ..ir.node import FrozenDict
from ..ir.stmt import AtomicAdd, BufferStore, IfThenElse, SeqStmt, SparseIteration, Stmt, seq
from ..ir.verify import verify_cached
from ..ir.visit import post_order_rewrite, substitute, walk
from .horizontal_fusion import FUSE_ATTR

PREPROCESS = "preprocess"


def decompose_format(
    mod: PrimFunc | IRModule, rules: Sequence[FormatRewriteRule], include_format_rewrite_blks: bool = True
) -> IRModule:
    """Decompose the sparse buffers of every Stage I function of `mod` by `rules` (see the module
    docstring). With `include_format_rewrite_blks=False` the copy iterations are left out.

    >>> import format_rules, sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> mod = sp.decompose_format(spmm_script(), format_rules.bsr.rules(block_size=4))
    >>> [p.name for p in mod["main"].params][9:]
    ['a_bsr', 'indptr_bsr', 'indices_bsr', 'm_bsr', 'n_bsr', 'nnz_bsr']
    """
    mod = IRModule.from_any(mod)
    verify_cached(mod)
    rules = list(rules)
    if not rules:
        raise FormatError("decompose_format: expected at least one FormatRewriteRule, got none")
    for r in rules:
        if not isinstance(r, FormatRewriteRule):
            raise FormatError(f"decompose_format: expected FormatRewriteRule objects, got {type(r).__name__}")
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise FormatError(f"decompose_format: rule names must be unique, got {names}")
    out = {k: _Decomposition(f, rules).run(include_format_rewrite_blks) if f.stage == 1 else f for k, f in mod.items()}
    return IRModule(FrozenDict(out))


format_decompose = decompose_format  # SparseTIR's spelling


class _Part:
    """One rule placed in one function: the renamed parameters, axes and buffers of its format."""

    def __init__(self, func: PrimFunc, rule: FormatRewriteRule, taken: set[str]):
        self.rule = rule
        desc = rule.new_format_desc
        suffix = f"_{rule.name}"

        def fresh(name: str) -> str:
            new = name + suffix
            if new in taken:
                raise FormatError(f"rule `{rule.name}`: the new name `{new}` is already used in `{func.name}`")
            taken.add(new)
            return new

        given = {p.name: p for p in func.params}
        self.params = {}
        for p in desc.params:
            if p.name not in rule.shared_params:
                self.params[p] = Var(fresh(p.name), p.dtype)
                continue
            if p.name not in given or given[p.name].dtype != p.dtype:
                raise FormatError(
                    f"rule `{rule.name}`: shared parameter `{p.name}` ({p.dtype}) is not a parameter of "
                    f"`{func.name}` of that dtype"
                )
            self.params[p] = given[p.name]
        #: The new parameters the function takes for this part (the shared ones it has already).
        self.new_params = [v for p, v in self.params.items() if p.name not in rule.shared_params]
        self.axes: dict[Axis, Axis] = {}
        for a in desc.axes:  # parents come first
            self.axes[a] = a.replace(
                name=fresh(a.name),
                parent=self.axes.get(a.parent) if a.parent is not None else None,
                length=substitute(a.length, self.params),
                nnz=substitute(a.nnz, self.params) if a.nnz is not None else None,
                nnz_cols=substitute(a.nnz_cols, self.params) if a.nnz_cols is not None else None,
                indptr=self.params.get(a.indptr) if a.indptr is not None else None,
                indices=self.params.get(a.indices) if a.indices is not None else None,
            )
        self.buffers = {}
        for b in desc.buffers:
            if not isinstance(b, SparseBuffer):
                raise FormatError(f"rule `{rule.name}`: `{desc.name}` may declare sparse buffers only, got `{b.name}`")
            self.buffers[b.name] = b.replace(
                name=fresh(b.name), axes=tuple(self.axes[a] for a in b.axes), data=self.params.get(b.data)
            )
        self.by_name = {a.name: self.axes[a] for a in desc.axes}
        self.after = [self.by_name[n] for n in rule.axes_after_rewrite]


class _Decomposition:
    def __init__(self, func: PrimFunc, rules: list[FormatRewriteRule]):
        self.func = func
        self.rules = rules
        self.axes = {a.name: a for a in func.axes}
        self.buffers = {b.name: b for b in func.buffers}
        self.rewritten: dict[str, SparseBuffer] = {}
        for r in rules:
            self.check_rule(r)
        taken = {p.name for p in func.params} | set(self.axes) | set(self.buffers)
        taken |= {n.name for n in walk(func.body) if isinstance(n, SparseIteration)}
        self.parts = [_Part(func, r, taken) for r in rules]

    def fail(self, rule: FormatRewriteRule, message: str) -> FormatError:
        return FormatError(f"in `decompose_format` of `{self.func.name}`, rule `{rule.name}`: {message}")

    def check_rule(self, rule: FormatRewriteRule) -> None:
        for name in rule.axes_before_rewrite:
            if name not in self.axes:
                raise self.fail(rule, f"axes_before_rewrite names `{name}`, which `{self.func.name}` does not declare")
        for name in rule.buffers_to_rewrite:
            old = self.buffers.get(name)
            if not isinstance(old, SparseBuffer):
                raise self.fail(rule, f"buffers_to_rewrite names `{name}`, not a sparse buffer of `{self.func.name}`")
            new = rule.new_buffer(name)
            if new.dtype != old.dtype:
                raise self.fail(rule, f"the new format's `{name}` is {new.dtype}, but `{name}` is {old.dtype}")
            if [a.name for a in old.axes] != list(rule.axes_before_rewrite):
                raise self.fail(
                    rule,
                    f"`{name}` is over {[a.name for a in old.axes]}, but axes_before_rewrite is "
                    f"{list(rule.axes_before_rewrite)}",
                )
            prev = self.rewritten.setdefault(name, old)
            if prev is not old:  # pragma: no cover - names are unique in a function
                raise self.fail(rule, f"`{name}` is ambiguous")

    # ---------------------------------------------------------------- the function
    def run(self, include_copies: bool) -> PrimFunc:
        func = self.func
        body = self.rewrite(func.body)
        copies = [self.copy_iteration(part, name) for part in self.parts for name in part.rule.buffers_to_rewrite]
        params = list(func.params)
        axes = list(func.axes)
        buffers = list(func.buffers)
        for part in self.parts:
            params += part.new_params
            axes += part.axes.values()
            buffers += part.buffers.values()
        body = seq(*copies, body) if include_copies else body
        # One nest per part: `sp.compile` fuses them horizontally (transform/horizontal_fusion.py).
        attrs = FrozenDict({**func.attrs, FUSE_ATTR: True})
        return func.replace(params=tuple(params), axes=tuple(axes), buffers=tuple(buffers), body=body, attrs=attrs)

    def rewrite(self, s: Stmt) -> Stmt:
        if isinstance(s, SeqStmt):
            return seq(*(self.rewrite(x) for x in s.stmts))
        if not isinstance(s, SparseIteration):
            return s
        reads = {n.buffer.name for n in walk(s) if isinstance(n, BufferLoad) and n.buffer.name in self.rewritten}
        if not reads:
            return s
        stores = [n for n in walk(s) if isinstance(n, BufferStore | AtomicAdd) and n.buffer.name in self.rewritten]
        old_iters = [v for ia, v in zip(s.axes, s.iter_vars) if isinstance(ia, Axis)]
        for n in stores:
            if len(n.indices) != len(n.buffer.axes) or not all(isinstance(i, Var) for i in n.indices):
                raise FormatError(
                    f"in `decompose_format` of `{self.func.name}`: iteration `{s.name}` writes the rewritten "
                    f"buffer `{n.buffer.name}` at computed indices; a rewritten output must be written by the "
                    "iteration's own iterators"
                )
            if not set(n.indices) <= set(old_iters):  # pragma: no cover - the verifier's unstored-write rule
                raise FormatError(f"`{s.name}` writes `{n.buffer.name}` by iterators of another iteration")
        iterated = {base_axis(ia) for ia in s.axes if isinstance(ia, Axis)}
        for part in self.parts:
            missing = [n for n in part.rule.axes_before_rewrite if self.axes[n] not in iterated]
            if missing:
                raise self.fail(
                    part.rule,
                    f"iteration `{s.name}` reads a rewritten buffer but does not iterate {missing} as plain axes "
                    "(fused or attached axes cannot be rewritten)",
                )
        if stores:
            # The output itself moves to each part's format (SDDMM): every part initialises and
            # computes its own copy, in place; the caller maps the parts back to the old order.
            return seq(*(self.compute_iteration(s, part, keep_init=True) for part in self.parts))
        covering = next((p for p in self.parts if self.covers(s, p)), None) if s.init is not None else None
        if covering is not None:
            # One part iterates every output point once: it runs first and carries the init (an
            # empty row initialised as lowering does it), and no init iteration of its own is needed.
            rest = [p for p in self.parts if p is not covering]
            first = self.compute_iteration(s, covering, keep_init=True)
            return seq(first, *(self.compute_iteration(s, part) for part in rest))
        init = self.init_iteration(s) if s.init is not None else None
        return seq(init, *(self.compute_iteration(s, part) for part in self.parts))

    def covers(self, s: SparseIteration, part: _Part) -> bool:
        """Whether `part`'s computation visits every spatial point of `s` exactly once: each old
        axis it rewrites that `s` iterates spatially is a dense-fixed axis whose coordinate is a
        new dense-fixed axis of the very same length (a shared parameter: `shared_params`), and
        every new axis is one the old coordinates depend on (no layer adding up several points)."""
        rule = part.rule
        kinds = {base_axis(ia): k for ia, k in zip(s.axes, s.kinds)}
        used = set().union(*(e.dims_used() for e in rule.inv_idx_map.results))
        if any(k not in used for k in range(len(part.after))):
            return False
        for name, e in zip(rule.axes_before_rewrite, rule.inv_idx_map.results):
            old = self.axes[name]
            if kinds.get(old) != "S":
                continue
            slot = next((k for k in range(len(part.after)) if e == dim(k)), None)
            if slot is None or old.kind != DENSE_FIXED or old.parent is not None:
                return False
            new = part.after[slot]
            if new.kind != DENSE_FIXED or new.parent is not None or new.length != old.length:
                return False
        return True

    def init_iteration(self, s: SparseIteration) -> SparseIteration:
        """The init of `s` once per spatial point, over its spatial axes."""
        kept = [(ia, v) for ia, v, k in zip(s.axes, s.iter_vars, s.kinds) if k == "S"]
        fresh = {v: Var(v.name, v.dtype) for _, v in kept}
        return SparseIteration(
            f"{s.name}_init",
            tuple(ia for ia, _ in kept),
            "S" * len(kept),
            tuple(fresh[v] for _, v in kept),
            substitute(s.init, fresh),
            attrs=s.attrs,
        )

    def compute_iteration(self, s: SparseIteration, part: _Part, keep_init: bool = False) -> SparseIteration:
        rule = part.rule
        before = [self.axes[n] for n in rule.axes_before_rewrite]
        old_vars = {base_axis(ia): v for ia, v in zip(s.axes, s.iter_vars)}
        old_kinds = {base_axis(ia): k for ia, k in zip(s.axes, s.kinds)}
        new_vars = {a: Var(self.iter_name(a), a.idtype) for a in part.after}
        axes: list[IterAxis] = []
        kinds: list[str] = []
        ivars: list[Var] = []
        mapping: dict[Var, PrimExpr] = {}
        for ia, v, k in zip(s.axes, s.iter_vars, s.kinds):
            if isinstance(ia, FusedAxis | AttachedAxis):
                raise self.fail(rule, f"iteration `{s.name}` fuses or attaches axes; decompose it before fusing")
            if ia not in before:
                fresh = Var(v.name, v.dtype)
                mapping[v] = fresh
                axes.append(ia)
                kinds.append(k)
                ivars.append(fresh)
            elif not any(a in axes for a in part.after):  # the new axes go where the first old one was
                used = set().union(*(e.dims_used() for e in rule.inv_idx_map.results))
                for k, (name, a) in enumerate(zip(rule.axes_after_rewrite, part.after)):
                    axes.append(a)
                    # A new axis the old coordinates do not depend on (hyb's layers) adds up
                    # several points into one old point: a reduction, whatever it was mapped from.
                    kinds.append(old_kinds[self.axes[rule.source_axis(name)]] if k in used or keep_init else "R")
                    ivars.append(new_vars[a])
        dims = [new_vars[a] for a in part.after]
        coords = [
            mk.cast(old_vars[a].dtype, from_affine(e, dims, dtype=a.idtype))
            for a, e in zip(before, rule.inv_idx_map.results)
        ]
        for a, c in zip(before, coords):
            mapping[old_vars[a]] = c
        old_iters = tuple(old_vars[a] for a in before)

        def read(n):
            if isinstance(n, BufferStore | AtomicAdd) and n.buffer.name in self.rewritten:
                new_buf = part.buffers[n.buffer.name]
                return n.replace(buffer=new_buf, indices=tuple(new_vars[a] for a in new_buf.axes))
            if not (isinstance(n, BufferLoad) and n.buffer.name in self.rewritten):
                return n
            new_buf = part.buffers[n.buffer.name]
            if tuple(n.indices) == old_iters:
                return BufferLoad(new_buf, tuple(new_vars[a] for a in new_buf.axes))
            old_index = [substitute(i, mapping) for i in n.indices]
            results = rule.idx_map.results
            return BufferLoad(
                new_buf, tuple(from_affine(e, old_index, dtype=a.idtype) for a, e in zip(new_buf.axes, results))
            )

        body = substitute(post_order_rewrite(s.body, read), mapping)
        guard = self.in_shape(before, coords, {v: a for a, v in new_vars.items()})
        body = IfThenElse(guard, body) if guard is not None else body
        init = None
        if keep_init and s.init is not None:  # a rewritten output: each part initialises its own
            init = substitute(post_order_rewrite(s.init, read), mapping)
        return SparseIteration(
            f"{s.name}_{rule.name}", tuple(axes), "".join(kinds), tuple(ivars), body, init, attrs=s.attrs
        )

    @staticmethod
    def iter_name(a: Axis) -> str:
        return a.name.lower()

    @staticmethod
    def in_shape(axes: list[Axis], coords: list[PrimExpr], iterated: dict[Var, Axis]) -> PrimExpr | None:
        """`coord < length` for every old axis, except where the coordinate is an iterator of a new
        axis of the very same length: padding (block cells past the shape, ELL slots past a row)
        may lie outside the old shape, and there the part computes nothing."""
        cond = None
        for a, c in zip(axes, coords):
            if isinstance(c, Var) and c in iterated and iterated[c].length == a.length:
                continue
            cond = mk.and_(cond, mk.cmp("<", c, mk.cast(c.dtype, a.length)))
        return cond

    # ---------------------------------------------------------------- copies
    def copy_iteration(self, part: _Part, name: str) -> SparseIteration:
        """`rewrite_<buffer>_<rule>`: the new buffer gathered from the old one over its own structure."""
        rule = part.rule
        old = self.rewritten[name]
        new = part.buffers[name]
        iters = {a: Var(self.iter_name(a), a.idtype) for a in part.after}
        dims = [iters[a] for a in part.after]
        coords = [from_affine(e, dims, dtype=a.idtype) for a, e in zip(old.axes, rule.inv_idx_map.results)]
        target = tuple(iters[a] for a in new.axes)
        store = BufferStore(new, target, BufferLoad(old, tuple(coords)))
        guard = self.in_shape(list(old.axes), coords, {v: a for a, v in iters.items()})
        if guard is not None:
            store = IfThenElse(guard, store, BufferStore(new, target, const(old.default_value, old.dtype)))
        return SparseIteration(
            f"rewrite_{name}_{rule.name}",
            tuple(part.after),
            "S" * len(part.after),
            tuple(dims),
            store,
            attrs=FrozenDict({PREPROCESS: True}),
        )


# -------------------------------------------------------------------- preprocess split
def _is_preprocess(s: Stmt) -> bool:
    return isinstance(s, SparseIteration) and bool(s.attrs.get(PREPROCESS, False))


def _top_level(body: Stmt) -> list[Stmt]:
    return list(body.stmts) if isinstance(body, SeqStmt) else [body]


def extract_preprocess(mod: PrimFunc | IRModule) -> IRModule:
    """Only the copy iterations (attribute `preprocess`) of each function, same parameters: run
    it once to fill the new formats' buffers.

    >>> import format_rules, sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> mod = sp.decompose_format(spmm_script(), format_rules.bsr.rules(block_size=4))
    >>> pre = sp.extract_preprocess(mod)
    >>> [line.split('"')[3] for line in pre["main"].script().splitlines() if "T.sp_iter" in line]
    ['rewrite_A_bsr']
    """
    mod = IRModule.from_any(mod)
    out = {k: f.replace(body=seq(*(s for s in _top_level(f.body) if _is_preprocess(s)))) for k, f in mod.items()}
    return IRModule(FrozenDict(out))


def remove_preprocess(mod: PrimFunc | IRModule) -> IRModule:
    """Only the computation: the copy iterations removed, then the buffers, axes and parameters
    that nothing uses any more (callers look at `mod["main"].params`).

    >>> import format_rules, sparsetir_py as sp
    >>> from sparsetir_py.ops import spmm_script
    >>> mod = sp.remove_preprocess(sp.decompose_format(spmm_script(), format_rules.bsr.rules(block_size=4)))
    >>> [p.name for p in mod["main"].params]
    ['b', 'c', 'm', 'n', 'feat', 'a_bsr', 'indptr_bsr', 'indices_bsr', 'm_bsr', 'n_bsr', 'nnz_bsr']
    """
    mod = IRModule.from_any(mod)
    out = {}
    for k, f in mod.items():
        body = seq(*(s for s in _top_level(f.body) if not _is_preprocess(s)))
        out[k] = _prune(f.replace(body=body))
    return IRModule(FrozenDict(out))


def _prune(f: PrimFunc) -> PrimFunc:
    """Drop buffers the body does not touch, then axes no kept buffer or iteration uses (their
    parents stay), then parameters nothing refers to."""
    used_buffers = {n.buffer for n in walk(f.body) if isinstance(n, BufferLoad | BufferStore | AtomicAdd)}
    buffers = [b for b in f.buffers if b in used_buffers or b.data is None]
    used_axes: set[Axis] = set()
    for b in buffers:
        used_axes.update(getattr(b, "axes", ()))
    for n in walk(f.body):
        if isinstance(n, SparseIteration):
            for ia in n.axes:
                used_axes.update([base_axis(ia)] + ([ia.parent] if isinstance(ia, AttachedAxis) else []))
                if isinstance(ia, FusedAxis):
                    used_axes.update(ia.group)
    for a in list(used_axes):
        used_axes.update(a.ancestors())
    axes = [a for a in f.axes if a in used_axes]
    exprs: list = [f.body]
    for a in axes:
        exprs += [e for e in (a.length, a.nnz, a.nnz_cols, a.indptr, a.indices) if e is not None]
    for b in buffers:
        exprs += [b.data] if b.data is not None else []
        exprs += list(getattr(b, "shape", ()))
    referenced = {n for e in exprs for n in walk(e) if isinstance(n, Var)}
    params = [p for p in f.params if p in referenced]
    return f.replace(params=tuple(params), axes=tuple(axes), buffers=tuple(buffers))


__all__ = ["PREPROCESS", "decompose_format", "extract_preprocess", "format_decompose", "remove_preprocess"]
