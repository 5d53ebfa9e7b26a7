"""The `T` namespace: signatures of every script construct.

These functions are never called at run time: the frontend reads a `@T.prim_func` body with
`ast` and binds each `T.xxx(...)` call to the matching signature below, so a wrong arity is
reported against the user's source line. Calling one directly raises an error.
"""

from __future__ import annotations

from ..errors import SparseTIRError
from ..ir.op import INTRINSICS


def _only_in_script(name: str):
    raise SparseTIRError(f"T.{name} can only be used inside a @T.prim_func script")


class DType:
    """`T.int32` etc.: a parameter annotation, a constant (`T.float32(0)`) or a cast (`T.int64(i)`)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, value=None):
        _only_in_script(self.name)

    def __repr__(self) -> str:
        return f"T.{self.name}"


DTYPE_NAMES = (
    "handle",
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
DTYPES = {name: DType(name) for name in DTYPE_NAMES}


# ---------------------------------------------------------------- axes, buffers, functions
def dense_fixed(length, idtype="int32"):
    """A dense level of fixed `length` (a root of the axis forest)."""
    _only_in_script("dense_fixed")


def dense_variable(parent, shape, indptr, idtype="int32"):
    """A dense level whose row length varies: `shape=(max_length, nnz)`, rows given by `indptr`."""
    _only_in_script("dense_variable")


def sparse_fixed(parent, shape, indices, idtype="int32", sorted=True):
    """A compressed level with `nnz_cols` coordinates per parent position: `shape=(length, nnz_cols)`."""
    _only_in_script("sparse_fixed")


def sparse_variable(parent, shape, data, idtype="int32", sorted=True, assemble=False):
    """A compressed level (CSR's columns): `shape=(length, nnz)`, `data=(indptr, indices)`.

    `assemble=True` declares the level of an output whose structure the kernel assembles (a
    symbolic pass, a prefix sum, a numeric pass): the caller passes no indptr, indices, nnz or
    values for it and receives them from the kernel (the design card §3f)."""
    _only_in_script("sparse_variable")


def match_sparse_buffer(
    param, axes, dtype="float32", default_value=0, value_range=None, extra_storage=None, encoding=None
):
    """Values over `axes` passed as the handle parameter `param`.

    `extra_storage=e` (SparseTIR's keyword): `e` more elements stored after the axes' own, read by
    flat position (an `indptr` array over `[I]` holds `m + 1`: `J_indptr[vi + 1]`).

    With `encoding` (an MLIR `#sparse_tensor.encoding`: its text, a `T.encoding("...")`, or a
    parsed encoding captured from the enclosing scope), `axes` are the tensor's dimensions
    (dense_fixed) and the encoding decides the stored levels (`sparsetir_py.transform.expand_encoded_buffers`).
    """
    _only_in_script("match_sparse_buffer")


def encoding(text):
    """`T.encoding("#sparse_tensor.encoding<{...}>")`: an MLIR encoding for `match_sparse_buffer`."""
    _only_in_script("encoding")


def alloc_sparse_buffer(axes, dtype="float32", scope="global", extra_storage=None, value_range=None):
    """Scratch values over `axes` (`extra_storage` as for `match_sparse_buffer`)."""
    _only_in_script("alloc_sparse_buffer")


def match_buffer(param, shape, dtype="float32", scope="global", layout=None, value_range=None, strides=None):
    """A flat (dense) buffer passed as `param`.

    `strides=` (TVM's keyword) is accepted where it describes a compact layout: row-major (what
    TVM prints, `strides=[1]` for one dimension) or a permutation of it, which is that `layout`."""
    _only_in_script("match_buffer")


def alloc_buffer(shape, dtype="float32", scope="global", layout=None, strides=None, value_range=None):
    """A flat scratch buffer owned by the enclosing block (or the function); `strides=` as for
    `match_buffer`."""
    _only_in_script("alloc_buffer")


def assume_buffer_domain(buffer, domain):
    """SparseTIR's hint that every value stored in `buffer` lies in `domain = [lo, hi]`: the
    buffer's `value_range=(lo, hi)` (a function-level statement before the body)."""
    _only_in_script("assume_buffer_domain")


def allocate(shape, dtype="float32", scope="global", layout=None):
    """Scratch storage live in the rest of the enclosing statement list."""
    _only_in_script("allocate")


def layout(minor_to_major, tiles=(), tail_padding_alignment=1):
    """An XLA-style layout for `match_buffer`/`alloc_buffer`."""
    _only_in_script("layout")


def func_attr(attrs):
    _only_in_script("func_attr")


# ---------------------------------------------------------------- Stage I
def sp_iter(axes, kinds, name, attrs=None):
    """`with T.sp_iter([I, J, K], "SRS", "name") as [i, j, k]:` — a sparse iteration."""
    _only_in_script("sp_iter")


iter = sp_iter  # SparseTIR's spelling


def fuse(*axes):
    """Iterate a parent-child chain of axes as one loop over its stored points."""
    _only_in_script("fuse")


def attach(axis, parent):
    """Iterate `axis` with the coordinate of `parent`'s iterator as its row."""
    _only_in_script("attach")


def init():
    _only_in_script("init")


# ---------------------------------------------------------------- Stages II and III
def block(name):
    _only_in_script("block")


class axis:
    @staticmethod
    def spatial(extent, value):
        _only_in_script("axis.spatial")

    @staticmethod
    def reduce(extent, value):
        _only_in_script("axis.reduce")

    @staticmethod
    def remap(kinds, values):
        _only_in_script("axis.remap")


def reads(*regions):
    _only_in_script("reads")


def writes(*regions):
    _only_in_script("writes")


def where(condition):
    _only_in_script("where")


def block_attr(attrs):
    _only_in_script("block_attr")


def serial(start, stop=None, annotations=None):
    _only_in_script("serial")


def parallel(start, stop=None, annotations=None):
    _only_in_script("parallel")


def vectorized(start, stop=None, annotations=None):
    _only_in_script("vectorized")


def unroll(start, stop=None, annotations=None):
    _only_in_script("unroll")


def thread_binding(start, stop=None, thread=None, annotations=None):
    _only_in_script("thread_binding")


def grid(*extents):
    _only_in_script("grid")


def atomic_add(target, value):
    """`target += value`, atomic across threads."""
    _only_in_script("atomic_add")


def evaluate(value):
    _only_in_script("evaluate")


# ---------------------------------------------------------------- expressions
def min(a, b):
    _only_in_script("min")


def max(a, b):
    _only_in_script("max")


def floordiv(a, b):
    _only_in_script("floordiv")


def floormod(a, b):
    _only_in_script("floormod")


def if_then_else(cond, true_value, false_value):
    _only_in_script("if_then_else")


Select = if_then_else


def cast(value, dtype):
    _only_in_script("cast")


def min_value(dtype):
    """The smallest finite value of `dtype` (TVM's `tir.min_value`): a constant."""
    _only_in_script("min_value")


def max_value(dtype):
    """The largest finite value of `dtype` (TVM's `tir.max_value`): a constant."""
    _only_in_script("max_value")


def intrinsic(*args, dtype=None):
    """Signature shared by every intrinsic of `sparsetir_py.ir.op.INTRINSICS` (exp, sqrt, ...)."""
    _only_in_script("intrinsic")


def _make_intrinsic(name: str):
    def fn(*args, dtype=None):
        _only_in_script(name)

    fn.__name__ = name
    return fn


INTRINSIC_STUBS = {name: _make_intrinsic(name) for name in INTRINSICS}


def intrinsic_stub(name: str):
    """The stub of intrinsic `name`, also for one registered after this module was imported
    (`ir.op.register_intrinsic`); None if there is no such intrinsic."""
    if name not in INTRINSIC_STUBS and name in INTRINSICS:
        INTRINSIC_STUBS[name] = _make_intrinsic(name)
    return INTRINSIC_STUBS.get(name)
