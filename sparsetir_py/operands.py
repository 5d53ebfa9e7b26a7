"""The operands of `sp.ops`' operators, checked and made canonical: what `sp.ops`, `sp.tune` and
`sp.distributed` accept, written once.

    csr = as_csr(A)                          # canonical CSR, the O(nnz) check once per structure
    dtype, (B,), feat = dense_operands("spmm", csr.shape, csr.dtype, (B,))

`as_csr` checks a matrix's raw arrays before any scipy routine sees them (`sp.inputs`), and
remembers a structure it checked in `STRUCTURES`: a record keyed on the identity of
`indptr`/`indices` (held weakly, dropped with them) and the shape. A later call with the same
arrays re-checks only `data` (O(1)). Mutating `indptr`/`indices` in place afterwards is not
detected. `dense_operands` checks the dense operands of an operator as its table (`OPERANDS`)
describes them: which of A's dimensions gives their rows, and that they share one width.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from .errors import InputError
from .inputs import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    canonical,
    check_kind,
    check_matrix,
    check_values,
    native,
    stored_dtype,
)

#: numpy dtype -> its name; `str(dtype)` runs Python code in numpy (~2.5 us), twice a call.
DTYPE_NAMES = {d: d.name for d in INDEX_DTYPES + VALUE_DTYPES}

#: operator -> its dense operands, each with the dimension of A that gives its rows.
OPERANDS: dict[str, tuple[tuple[str, int], ...]] = {"spmm": (("B", 1),), "sddmm": (("X", 0), ("Y", 1))}


class StructureCache:
    """Values remembered per sparse structure: keyed by the identity of a matrix's `indptr` and
    `indices` arrays (held weakly: an entry goes when either array does) and by whatever else the
    value depends on. Identity, not contents: hashing the arrays would cost the O(nnz) pass the
    cache is there to save. A numpy view's identity is the memory it reads: the array that owns
    that memory (held weakly), the view's first byte and its layout. So `A.T` (a CSC matrix whose
    `indices` is a new view of A's on every call) finds what the last `A.T` left, as the same
    array object would: the same bytes, read the same way."""

    def __init__(self) -> None:
        self._entries: dict[tuple, tuple] = {}

    def get(self, indptr, indices, *key: Hashable):
        """The value remembered for these arrays (or views of the same memory) and `key`, or None."""
        (o1, k1), (o2, k2) = _identity(indptr), _identity(indices)
        entry = self._entries.get((k1, k2, *key))
        if entry is None or entry[0]() is not o1 or entry[1]() is not o2:
            return None
        return entry[2]

    def put(self, indptr, indices, key: tuple, value) -> None:
        (o1, k1), (o2, k2) = _identity(indptr), _identity(indices)
        full = (k1, k2, *key)
        entries = self._entries

        def forget(_ref, full=full):
            # Drop the record once either array is gone: one record per live structure, not per call.
            entry = entries.get(full)
            if entry is not None and (entry[0]() is None or entry[1]() is None):
                del entries[full]

        entries[full] = (weakref.ref(o1, forget), weakref.ref(o2, forget), value)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


def _identity(array) -> tuple[object, tuple]:
    """(the object whose life an entry follows, the key it is found by) for a structure array:
    the array itself, or for a numpy view the array owning its memory and the view's first byte,
    shape, strides and dtype."""
    owner = array.base if isinstance(array, np.ndarray) else None
    if owner is None:
        return array, (id(array),)
    view = array
    while isinstance(owner, np.ndarray):
        array, owner = owner, owner.base
    where = view.__array_interface__["data"][0]
    return array, (id(array), where, view.shape, view.strides, view.dtype.str)


#: The structures `as_csr` checked (value True), by (indptr, indices, shape).
STRUCTURES = StructureCache()


def structure_checked(csr) -> bool:
    """Whether this exact structure (same indptr/indices objects, same shape) passed the check."""
    return STRUCTURES.get(csr.indptr, csr.indices, csr.shape) is not None


def remember_structure(csr) -> None:
    """Record that `csr`'s structure passed the check (the kernel's own, or `as_csr`'s)."""
    STRUCTURES.put(csr.indptr, csr.indices, (csr.shape,), True)


def as_csr(A, name: str = "A", values: bool = True) -> scipy.sparse.csr_matrix:
    """A canonical CSR form of `A`: sorted, no duplicates, native int32/int64 index arrays of one
    dtype, float32/float64 values; `A` itself when it already is one.

    A matrix whose structure passed an earlier call (`structure_checked`) only gets the O(1)
    checks of its values. Otherwise the raw arrays are checked first (`inputs.check_matrix`), so
    that no scipy routine that assumes a valid structure (conversion, `sum_duplicates`, written
    in C++) ever sees a broken one: those crash or answer wrongly instead of raising. A CSC, BSR
    or COO matrix, or a CSR one that is not canonical, is converted once per structure
    (`reordering`): a later call with the same structure arrays gets the same CSR structure
    arrays (so every cache keyed on them hits) and its values by one gather. `values=False`
    (with `reordering(A)` not None): the result's `data` is NaN, for a caller that takes A's
    values from `A.data` by `Reordered.take` itself."""
    if not scipy.sparse.issparse(A):
        raise InputError(f"`{name}` must be a scipy sparse matrix, got {type(A).__name__}")
    if A.format == "csr" and structure_checked(A):
        # The values may have been replaced since the structure was checked.
        check_values(A.data, len(A.indices), name)
        return A
    order = reordering(A, name)
    if order is not None:
        return order.matrix(A, name, values)
    if A.format == "csr" and structure_checked(A):  # `reordering` checked it, and it is canonical
        check_values(A.data, len(A.indices), name)
        return A
    return canonical(native(check_matrix(A, name)))


#: The canonical CSR structure of an input that is not one, by the input's structure arrays.
REORDERED = StructureCache()


@dataclass(eq=False)
class Reordered:
    """The canonical CSR form of a CSC, BSR, COO or non-canonical CSR input's structure, and where
    each of its values lies in the input's `data` (flattened): `csr.data = A.data.ravel()[take]`.
    Made when a structure is first seen (`reordering`); an input that stores an entry twice has
    none (its values are sums: converted per call)."""

    template: scipy.sparse.csr_matrix | scipy.sparse.csr_array  #: the structure (its data unused)
    take: np.ndarray | None  #: int32/int64, the flat position in `A.data` of each value; None: in order
    stored: int  #: the input's number of stored values (`A.data.size`)

    def matrix(self, A, name: str = "A", values: bool = True):
        """The canonical CSR form of `A` (of this structure): its values gathered by `take`, in
        `inputs.native`'s value dtype; `values=False` gives NaN values instead (no gather)."""
        data = A.data
        if not isinstance(data, np.ndarray) or data.size != self.stored:
            got = data.size if isinstance(data, np.ndarray) else type(data).__name__
            raise InputError(f"`{name}.data` has {got} entries, but the structure stores {self.stored}")
        check_kind(data.dtype, f"`{name}.data`")
        dtype = stored_dtype(data.dtype)
        nnz = len(self.template.indices)
        if not values:
            taken = np.broadcast_to(np.array(np.nan, dtype), (nnz,))
        elif self.take is None:
            taken = np.ascontiguousarray(data.reshape(-1)[:nnz], dtype=dtype)
        else:  # one compiled pass, on Numba's threads for a large A (1.4M values: np.take 2.4 ms)
            from .runtime.slots import gather

            flat = np.ascontiguousarray(data.reshape(-1), dtype=dtype)
            taken = gather(flat, self.take, np.empty(nnz, dtype), None) if nnz else np.empty(0, dtype)
        return with_data(self.template, taken)


def reordering(A, name: str = "A") -> Reordered | None:
    """`A`'s `Reordered` (made, after checking A, once per structure), or None: for a canonical
    CSR matrix (`STRUCTURES` serves it), a LIL/DOK/DIA one (converted per call: its arrays are
    made by the conversion), and one that stores an entry twice."""
    if A.format not in ("csr", "csc", "bsr", "coo"):
        return None
    arrays = tuple(A.coords if hasattr(A, "coords") else (A.row, A.col)) if A.format == "coo" else (A.indptr, A.indices)
    if len(arrays) != 2 or not all(isinstance(a, np.ndarray) for a in arrays):
        return None  # a COO array of more than two dimensions: `check_matrix` says what is wrong
    key = (A.format, A.shape, getattr(A, "blocksize", None), type(A))
    order = REORDERED.get(*arrays, *key)
    if order is None:
        order = _reordered(check_matrix(A, name)) or False
        REORDERED.put(*arrays, key, order)
    return order or None


def _reordered(A) -> Reordered | None:
    """`reordering` for a checked `A`: its values numbered 1, 2, ... (exact in float64) and
    converted as `as_csr` converts (`native`, `canonical`), so each CSR value names its source."""
    if not isinstance(A.data, np.ndarray):
        return None
    if A.format == "csr" and canonical(native(A)) is A:  # canonical already: checked, no numbering
        STRUCTURES.put(A.indptr, A.indices, (A.shape,), True)
        return None
    numbered = native(with_data(A, np.arange(1, A.data.size + 1, dtype=np.float64).reshape(A.data.shape)))
    csr = canonical(numbered)
    if csr.nnz != numbered.data.size:
        return None  # duplicates were summed
    # the smallest index dtype that holds A's positions (`runtime.slots.gather` reads it)
    take = csr.data.astype(np.int64 if A.data.size > np.iinfo(np.int32).max else np.int32) - 1
    if np.array_equal(take, np.arange(len(take))):
        take = None
    STRUCTURES.put(csr.indptr, csr.indices, (csr.shape,), True)
    csr.data = csr.data[:0]  # the numbers are in `take`: the template keeps the structure only
    return Reordered(csr, take, A.data.size)


def with_data(A, data: np.ndarray):
    """A shallow copy of the scipy matrix `A` holding `data` (its structure arrays shared)."""
    copy = object.__new__(type(A))
    copy.__dict__.update(A.__dict__)
    copy.data = data
    return copy


def read_array(X, name: str):
    """`X` as an array numpy can read (not yet checked); `InputError` for what it cannot."""
    if isinstance(X, np.ndarray) or scipy.sparse.issparse(X):
        return X
    try:
        return np.asarray(X)
    except (TypeError, ValueError) as e:  # ragged nested lists, objects numpy cannot read
        raise InputError(f"`{name}` cannot be read as an array: {e}") from None


def dense_operand(X, name: str) -> np.ndarray:
    """A dense operand as a 2-D array of real numbers (not yet converted); `InputError`."""
    if scipy.sparse.issparse(X):
        raise InputError(f"`{name}` must be a dense array, got a scipy sparse matrix")
    X = read_array(X, name)
    check_kind(X.dtype, f"`{name}`")
    if X.ndim != 2:
        raise InputError(f"`{name}` must be a 2-D array, got shape {X.shape}")
    return X


def check_dense(X: np.ndarray, name: str, rows: int, dtype: np.dtype) -> np.ndarray:
    """A checked operand as a C-contiguous array of `dtype` (a copy only where needed)."""
    if X.shape[0] != rows:
        raise InputError(f"`{name}` must have {rows} rows, got {X.shape[0]}")
    return np.ascontiguousarray(X, dtype=dtype)


def value_dtype(*dtypes: np.dtype) -> np.dtype:
    """float32 when every operand is float32, float64 otherwise (the kinds were checked before)."""
    if all(d == np.float32 for d in dtypes):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def dense_operands(
    op: str,
    shape: tuple[int, int],
    dtype: np.dtype,
    operands: Sequence,
    read: Callable = dense_operand,
    fit: Callable = check_dense,
) -> tuple[np.dtype, list, int]:
    """(the result's dtype, the operands cast to it, their width) for `op`'s dense operands, checked
    as `OPERANDS` describes them; `read` and `fit` check one operand (`dense_operand`,
    `check_dense` for numpy arrays; `sp.distributed` passes its own for dask arrays)."""
    spec = OPERANDS[op]
    read_ = [read(X, name) for X, (name, _) in zip(operands, spec)]
    dtype = value_dtype(dtype, *(X.dtype for X in read_))
    fitted = [fit(X, name, shape[dim], dtype) for X, (name, dim) in zip(read_, spec)]
    widths = [X.shape[1] for X in fitted]
    if len(set(widths)) > 1:
        names = " and ".join(f"`{name}`" for name, _ in spec)
        raise InputError(f"{names} must have the same number of columns, got {' and '.join(map(str, widths))}")
    return dtype, fitted, int(widths[0])
