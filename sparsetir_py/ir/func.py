"""Functions and modules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .axis import Axis
from .buffer import Buffer
from .expr import Var
from .node import FrozenDict, Node
from .stmt import Stmt


@dataclass(frozen=True, slots=True)
class PrimFunc(Node):
    """A function: parameters (handles and scalars), declared axes and buffers, a body.

    `attrs["stage"]` is 1 (coordinate space), 2 (position space) or 3 (flat buffers).
    `buffers` holds the function-level declarations (`T.match_sparse_buffer`,
    `T.alloc_sparse_buffer`, `T.match_buffer`) in order.
    """

    name: str
    params: tuple[Var, ...]
    axes: tuple[Axis, ...]
    buffers: tuple[Buffer, ...]
    body: Stmt
    attrs: FrozenDict = field(default_factory=FrozenDict)

    @property
    def stage(self) -> int:
        return int(self.attrs.get("stage", 1))

    @property
    def buffer_map(self) -> dict[Var, Buffer]:
        """Handle parameter -> the buffer matched to it."""
        return {b.data: b for b in self.buffers if b.data is not None}

    def param(self, name: str) -> Var:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def with_attr(self, key: str, value) -> PrimFunc:
        return self.replace(attrs=self.attrs.set(key, value))

    def specialize(self, values) -> PrimFunc:
        """Bind scalar parameters to constants: `f.specialize({"feat": 128})` (see `ir.specialize`)."""
        from .specialize import specialize

        return specialize(self, values)

    def script(self) -> str:
        """Python source of this function as a `@T.prim_func`; `sp.from_script` parses it back."""
        from .printer import script

        return script(self)

    def show(self) -> None:
        print(self.script())

    def __repr__(self) -> str:
        return f"PrimFunc({self.name!r}, stage={self.stage})"

    def _repr_html_(self) -> str:
        """Jupyter: the script, highlighted, under the function's name, stage and parameters."""
        from .. import display

        params = ", ".join(f"{p.name}: {p.dtype}" for p in self.params)
        return display.section(
            f"PrimFunc {self.name}", display.code(self.script()), subtitle=f"Stage {self.stage} · ({params})"
        )


@dataclass(frozen=True, slots=True)
class IRModule(Node):
    """A mapping name -> PrimFunc. Passes always return one; a lone function is `{"main": f}`."""

    functions: FrozenDict = field(default_factory=FrozenDict)

    def __getitem__(self, name: str) -> PrimFunc:
        return self.functions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.functions)

    def __len__(self) -> int:
        return len(self.functions)

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def items(self):
        return self.functions.items()

    def map_stage3(self, rewrite) -> IRModule:
        """This module with every Stage III function's body replaced by `rewrite(func)` (a Stage III
        pass over each function; the others are kept as they are)."""
        return IRModule(FrozenDict({n: f.replace(body=rewrite(f)) if f.stage == 3 else f for n, f in self.items()}))

    def with_function(self, name: str, func: PrimFunc) -> IRModule:
        return IRModule(self.functions.set(name, func))

    def script(self) -> str:
        from .printer import script

        return script(self)

    def show(self) -> None:
        print(self.script())

    @staticmethod
    def from_any(obj: PrimFunc | IRModule | Mapping[str, PrimFunc]) -> IRModule:
        """Wrap a lone PrimFunc as `{"main": f}`; pass modules through."""
        if isinstance(obj, IRModule):
            return obj
        if isinstance(obj, PrimFunc):
            return IRModule(FrozenDict({"main": obj}))
        if isinstance(obj, Mapping):
            return IRModule(FrozenDict(dict(obj)))
        raise TypeError(f"expected a PrimFunc or an IRModule, got {type(obj).__name__}")

    def __repr__(self) -> str:
        return f"IRModule({list(self.functions)})"

    def _repr_html_(self) -> str:
        """Jupyter: the module's script, highlighted, under its function names and stages."""
        from .. import display

        funcs = ", ".join(f"{name} (Stage {f.stage})" for name, f in self.items())
        return display.section("IRModule", display.code(self.script()), subtitle=funcs)
