"""A matrix split by format rules, part by part: which nonzeros each part holds, its arrays, its padding.

    d = sp.format.decompose(A, format_rules.hyb, num_col_parts=2, buckets=[1, 2, 4, 8])
    d.parts[0].matrix        # the nonzeros of A that part 0 stores, in A's coordinates (scipy CSR)
    d.parts[0].arrays        # its arguments: structure, sizes, values (the storage dump)
    d.parts[0].padding       # value slots that hold padding (0) rather than a nonzero
    d.reconstruct()          # the sum of the parts: A again (the rules partition A's nonzeros)

The parts are found the way `sp.ops` gathers values: the rules' conversion (`convert`) runs on
A's pattern with the values 1..nnz, so each slot of a part's value array names the nonzero of A it
holds (0: padding). That works for any rule, shipped or a user's, with a converter or inferred.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

from ..errors import FormatError
from .converters import canonical, convert
from .rule import FormatRewriteRule


@dataclass(eq=False)
class Part:
    """One rule's share of the matrix."""

    name: str  #: the rule's name (suffix of its parameters)
    rule: FormatRewriteRule
    source: scipy.sparse.csr_matrix = field(repr=False)  #: the matrix decomposed (canonical CSR)
    ids: np.ndarray = field(repr=False)  #: the nonzeros of `source` this part stores (sorted positions)
    arrays: dict[str, Any] = field(repr=False)  #: the part's arguments by renamed name (values in A's dtype)
    #: value argument -> where each slot's value comes from: 1 + its position in `source.data`, or 0
    #: for padding; a part's values for new values of A are `concat([0], A.data)[gathers[name]]`.
    gathers: dict[str, np.ndarray] = field(repr=False)
    slots: int  #: value slots of the part (stored nonzeros + padding)

    @functools.cached_property
    def matrix(self) -> scipy.sparse.csr_matrix:
        """The nonzeros this part stores, in A's shape and coordinates."""
        A, ids = self.source, self.ids
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))[ids]
        return scipy.sparse.csr_matrix((A.data[ids], (rows, A.indices[ids])), shape=A.shape)

    @property
    def structure(self) -> dict[str, Any]:
        """The part's arguments but its values: what stays when only A's values change."""
        return {k: v for k, v in self.arrays.items() if k not in self.gathers}

    @property
    def nnz(self) -> int:
        """Nonzeros of A stored in this part."""
        return len(self.ids)

    @property
    def padding(self) -> int:
        """Slots that hold padding (value 0, no nonzero of A)."""
        return self.slots - self.nnz

    @property
    def padding_ratio(self) -> float:
        """Padding slots / all slots (0 for an empty part)."""
        return self.padding / self.slots if self.slots else 0.0

    def __repr__(self) -> str:
        return f"Part({self.name!r}, nnz={self.nnz}, slots={self.slots})"


@dataclass
class Decomposition:
    """A matrix and its parts under a list of format rules (see the module docstring)."""

    A: scipy.sparse.csr_matrix
    parts: list[Part] = field(default_factory=list)

    @property
    def rules(self) -> list[FormatRewriteRule]:
        return [p.rule for p in self.parts]

    @property
    def slots(self) -> int:
        return sum(p.slots for p in self.parts)

    @property
    def padding(self) -> int:
        return sum(p.padding for p in self.parts)

    def reconstruct(self) -> scipy.sparse.csr_matrix:
        """The sum of the parts' matrices (equal to A when the rules partition its nonzeros)."""
        total = scipy.sparse.csr_matrix(self.A.shape, dtype=self.A.dtype)
        for p in self.parts:
            total = total + p.matrix
        return total.tocsr()

    def table(self) -> list[dict[str, Any]]:
        """One row per part: name, rows it touches, nonzeros, slots, padding and its share."""
        return [
            {
                "part": p.name,
                "rows": int(np.count_nonzero(np.diff(p.matrix.indptr))),
                "nnz": p.nnz,
                "slots": p.slots,
                "padding": p.padding,
                "padding %": round(100 * p.padding_ratio, 1),
            }
            for p in self.parts
        ]

    def __repr__(self) -> str:
        return (
            f"Decomposition({len(self.parts)} parts of a {self.A.shape[0]}x{self.A.shape[1]} matrix, "
            f"nnz={self.A.nnz}, slots={self.slots})"
        )

    def _repr_html_(self) -> str:
        from .. import display

        rows = [list(r.values()) for r in self.table()]
        dumps = "".join(
            display.details(f"{display.escape(p.name)}: arrays", display.arrays(p.arrays).markup) for p in self.parts
        )
        header = list(self.table()[0]) if self.parts else ["part"]
        share = 100 * self.padding / self.slots if self.slots else 0.0
        return display.section(
            "Decomposition",
            display.table(header, rows),
            dumps,
            subtitle=f"{self.A.shape[0]} x {self.A.shape[1]}, {self.A.nnz} nonzeros in {len(self.parts)} parts; "
            f"{self.slots} slots, {share:.1f}% padding",
        )


def rules_of(format_or_rules, A, params: dict, dtype: str, idtype: str) -> list[FormatRewriteRule]:
    """A rule module's `rules(**params)` (given A, dtype, idtype where it takes them), or a list of
    rules, checked: a non-empty list of `FormatRewriteRule` with distinct names. A module's own
    `convert(A, **params)` becomes every rule's converter, as the README says (the file's `convert`
    when it has one). A `FormatError` names the format and what is wrong."""
    if isinstance(format_or_rules, FormatRewriteRule):
        format_or_rules = [format_or_rules]
    if isinstance(format_or_rules, list | tuple):
        if params:
            raise FormatError(f"parameters {', '.join(params)} need a rule module, not a list of rules")
        return _checked("the list of rules", format_or_rules)
    make = getattr(format_or_rules, "rules", None)
    if not callable(make):
        raise FormatError(
            f"expected a rule module (with `rules(**params)`) or a list of rules, got {type(format_or_rules).__name__}"
        )
    name = f"format `{getattr(format_or_rules, '__name__', type(format_or_rules).__name__)}`"
    call = _call_args(name, "rules", make, params, {"A": A, "dtype": dtype, "idtype": idtype})
    try:
        made = make(**call)
    except FormatError:
        raise
    except Exception as e:
        raise FormatError(f"{name}: rules({_shown(params)}) raised {type(e).__name__}: {e}") from e
    rules = _checked(f"{name}: rules({_shown(params)})", made)
    convert_fn = getattr(format_or_rules, "convert", None)
    if callable(convert_fn):
        given = _call_args(name, "convert", convert_fn, params, {"dtype": dtype, "idtype": idtype}, first="A")

        def converter(M, convert_fn=convert_fn, given=given):
            return convert_fn(M, **given)

        rules = [r.replace(converter=converter) for r in rules]
    return rules


def parameter_names(fn) -> list[str] | None:
    """The keyword parameters `fn` takes (None when it takes any, `**kwargs`)."""
    ps = inspect.signature(fn).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in ps):
        return None
    return [p.name for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _call_args(name: str, what: str, fn, params: dict, given: dict, first: str | None = None) -> dict:
    """`params` and those of `given` that `fn` takes, checked against its signature."""
    try:
        accepted = parameter_names(fn)
    except (TypeError, ValueError):
        accepted = None
    if accepted is not None and first is not None:
        accepted = accepted[1:]  # the matrix, passed first
    unknown = [k for k in params if accepted is not None and k not in accepted]
    if unknown:
        raise FormatError(
            f"{name}: {what}() got an unexpected keyword argument {', '.join(f'`{k}`' for k in unknown)} "
            f"(it takes {', '.join(f'`{k}`' for k in (accepted or [])) or 'none'})"
        )
    call = dict(params)
    call.update({k: v for k, v in given.items() if accepted is not None and k in accepted and k not in params})
    try:
        if first is not None:
            inspect.signature(fn).bind(None, **call)
        else:
            inspect.signature(fn).bind(**call)
    except (TypeError, ValueError) as e:
        raise FormatError(f"{name}: {what}({_shown(params)}): {e}") from None
    return call


def _checked(where: str, made) -> list[FormatRewriteRule]:
    if not isinstance(made, list | tuple):
        raise FormatError(f"{where} must return a list of FormatRewriteRule, got {type(made).__name__}")
    for r in made:
        if not isinstance(r, FormatRewriteRule):
            raise FormatError(f"{where} gave {r!r} ({type(r).__name__}), not a FormatRewriteRule")
    if not made:
        raise FormatError(f"{where} gave no rule")
    names = [r.name for r in made]
    if len(set(names)) != len(names):
        raise FormatError(f"{where} gave rules with the same name: {names}")
    return list(made)


def _shown(params: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def decompose(A, format_or_rules, **params) -> Decomposition:
    """Split `A` (any scipy sparse matrix) by a rule module (shipped, e.g. `format_rules.hyb`, or
    `format_rules.load(path)`) with its `params`, or by a list of `FormatRewriteRule`.

    >>> import format_rules, sparsetir_py as sp
    >>> A = sp.data.load_matrix("karate")
    >>> d = sp.format.decompose(A, format_rules.ell, buckets=[2, 8, 32])
    >>> [p.name for p in d.parts]
    ['ell2', 'ell8', 'ell32']
    >>> sum(p.nnz for p in d.parts) == A.nnz, (d.reconstruct() != A).nnz
    (True, 0)
    >>> d.parts[0].slots >= d.parts[0].nnz
    True
    """
    csr, itype = canonical(A)
    idtype = str(itype)
    numbered = scipy.sparse.csr_matrix(
        (np.arange(1, csr.nnz + 1, dtype=np.float64), csr.indices, csr.indptr), shape=csr.shape
    )
    rules = rules_of(format_or_rules, numbered, params, "float64", idtype)
    arrays = convert(numbered, rules)
    values_dtype = csr.dtype if csr.dtype.kind == "f" else np.dtype(np.float64)
    data = np.concatenate([np.zeros(1, values_dtype), csr.data.astype(values_dtype)])
    parts = []
    for rule in rules:
        desc = rule.new_format_desc
        names = [f"{p.name}_{rule.name}" for p in desc.params]
        value_names = {f"{b.data.name}_{rule.name}" for b in desc.buffers if b.data is not None}
        own: dict[str, Any] = {}
        gathers: dict[str, np.ndarray] = {}
        for name in names:
            if name not in arrays:
                continue
            value = arrays[name]
            if name in value_names:
                kind = np.asarray(value).dtype
                if kind.kind == "f" and csr.nnz >= 2 ** (np.finfo(kind).nmant + 1):
                    # The parts are found by numbering A's nonzeros 1..nnz; a narrower dtype rounds them.
                    raise FormatError(
                        f"rule `{rule.name}`: its values are {kind}, which cannot number {csr.nnz} nonzeros "
                        "exactly; decompose by the rule module (its rules are made float64 here) or float64 rules"
                    )
                where = np.rint(np.asarray(value, dtype=np.float64)).astype(np.int64)
                gathers[name] = where
                own[name] = data[where]
            else:
                own[name] = value
        stored = [where[where > 0] - 1 for where in gathers.values()]
        ids = np.sort(np.concatenate(stored)) if stored else np.zeros(0, np.int64)
        slots = sum(where.size for where in gathers.values())
        parts.append(Part(rule.name, rule, csr, ids, own, gathers, slots))
    return Decomposition(csr, parts)
