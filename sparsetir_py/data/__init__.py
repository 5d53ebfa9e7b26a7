"""Small real sparse matrices shipped with the package, for tests, examples and the demo.

Each matrix is a scipy `.npz` file next to this module (sources and licences in ATTRIBUTION.md).
They are read through `importlib.resources`, so they load the same from a clone, an editable
install or a wheel. `load_matrix` also reads a matrix file of your own: a scipy `.npz` or a
Matrix Market `.mtx` (`.mtx.gz`, `.mtx.bz2`; suffixes in any case).

A file is input nobody checked: the loader reads the raw arrays of an `.npz` itself (never
unpickling) and checks them (the checks of `sp.ops`, in `sparsetir_py.inputs`) before any scipy
constructor sees them, since scipy's compiled code crashes the process or builds an invalid
matrix from broken arrays. A Matrix Market file's header and body are checked before scipy's
reader sees them: it reads `2,5` as 2 and runs past the end of a file that ends in `7.25E`. A
header that declares more than the file holds, or more than `MEMORY_LIMIT`, is refused before
anything of that size is allocated; so is a matrix whose shape or number of entries does not
fit the index dtype asked for. Every problem raises `sp.InputError` naming the file and the
offending value.

>>> import sparsetir_py as sp
>>> A = sp.data.load_matrix("karate")
>>> A.shape, A.nnz, A.dtype, A.indices.dtype
((34, 34), 156, dtype('float32'), dtype('int32'))
>>> "cora" in sp.data.available()
True
"""

from __future__ import annotations

import bz2
import gzip
import io
import os
import struct
import zipfile
import zlib
from importlib import resources
from pathlib import Path
from typing import BinaryIO

import numpy as np
import scipy.sparse

from ..errors import InputError
from ..inputs import (
    canonical,
    check_compressed,
    check_coo,
    check_dia,
    check_kind,
    check_shape,
    describe,
    half_the_memory,
    native,
)

__all__ = [
    "MATRIX_FILE_SUFFIXES",
    "MAX_DENSE_ENTRIES",
    "MEMORY_LIMIT",
    "available",
    "is_matrix_file",
    "load_matrix",
    "read_matrix_file",
]

_PACKAGE = "sparsetir_py.data"
_SUFFIX = ".npz"
_MATRIX_MARKET = (".mtx", ".mtx.gz", ".mtx.bz2")
#: Files `load_matrix` reads by path: scipy's `.npz` and Matrix Market (compared in lower case).
MATRIX_FILE_SUFFIXES = (_SUFFIX, *_MATRIX_MARKET)
#: The most entries a dense Matrix Market `array` file may declare (2 GiB of float64 values): a
#: header of two numbers would otherwise allocate any size before the values are read.
MAX_DENSE_ENTRIES = 2**28
#: The most bytes `load_matrix` allocates for what a file declares (a dense array, the entries
#: of a Matrix Market header, one `.npy` array, an indptr for the rows, the decompressed text);
#: None: half this machine's physical memory. A header of a few bytes may declare any size.
MEMORY_LIMIT: int | None = None
_INT64_MAX = int(np.iinfo(np.int64).max)
# Everything reading a broken file raises, from zipfile, zlib, gzip, bz2, numpy's .npy reader and
# scipy's Matrix Market reader; each becomes an InputError that names the file.
_READ_ERRORS = (
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    OSError,
    EOFError,
    OverflowError,
    MemoryError,
    RecursionError,
    NotImplementedError,
    RuntimeError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
)


def available() -> list[str]:
    """Names of the shipped matrices, sorted case-insensitively.

    >>> available()[:3]
    ['ash219', 'bcsstk16', 'ca-CondMat']
    """
    names = [
        entry.name.removesuffix(_SUFFIX)
        for entry in resources.files(_PACKAGE).iterdir()
        if entry.name.endswith(_SUFFIX)
    ]
    return sorted(names, key=str.lower)


def is_matrix_file(name: str | os.PathLike) -> bool:
    """Whether `name` ends with a suffix `load_matrix` reads as a file, in any case.

    >>> is_matrix_file("X.MTX"), is_matrix_file("web.Mtx.Gz"), is_matrix_file("karate")
    (True, True, False)
    """
    return os.fspath(name).lower().endswith(MATRIX_FILE_SUFFIXES)


def load_matrix(name: str | os.PathLike, dtype=np.float32, index_dtype=np.int32) -> scipy.sparse.csr_matrix:
    """Load a shipped matrix, or a matrix file, as a canonical CSR matrix.

    `name` is a shipped matrix (`available()`), or the path of a scipy `.npz` file (any of scipy's
    csr, csc, bsr, coo and dia formats) or a Matrix Market `.mtx` file (also `.mtx.gz` /
    `.mtx.bz2`; symmetric and skew-symmetric ones are expanded and pattern ones get the value 1,
    as `scipy.io.mmread` reads them). Canonical means sorted column indices within each row and
    no duplicate entries (duplicates are summed). Values are cast to `dtype` (one past its range
    becomes inf, and numpy warns); `indptr` and `indices` are both of `index_dtype` (`int32` or
    `int64`), which scipy would otherwise narrow to int32 whenever the values fit.

    Raises `KeyError` naming the shipped matrices when `name` is neither one of them nor a matrix
    file, and `sp.InputError` naming the file and the value when a file is broken (see
    `read_matrix_file`), or its shape or number of entries does not fit `index_dtype`.

    >>> A = load_matrix("cora", dtype="float64", index_dtype="int64")
    >>> A.shape, A.nnz, A.data.dtype, A.indptr.dtype
    ((2708, 2708), 10556, dtype('float64'), dtype('int64'))
    """
    index_dtype = np.dtype(index_dtype)
    if index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"in `load_matrix`: expected index_dtype int32 or int64, but got {index_dtype}")
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise ValueError(f"in `load_matrix`: expected a real dtype (float, integer or bool), but got {dtype}")
    text = os.fspath(name)
    resource = resources.files(_PACKAGE) / f"{text}{_SUFFIX}"
    if is_matrix_file(text) and not resource.is_file():
        return _canonical_csr(read_matrix_file(text), Path(text).name, dtype, index_dtype)
    if not resource.is_file():
        raise KeyError(
            f"in `load_matrix`: no shipped matrix {text!r}; available: {', '.join(available())} "
            "(or the path of a .npz or .mtx file)"
        )
    with resource.open("rb") as f:
        matrix = _read_npz(f, f"{text}{_SUFFIX}")
    return _canonical_csr(matrix, text, dtype, index_dtype)


def read_matrix_file(path: str | os.PathLike) -> scipy.sparse.spmatrix:
    """A scipy `.npz` file (`scipy.sparse.save_npz`) or a Matrix Market file, as stored (COO for
    a Matrix Market or DIA file), with every array checked.

    Raises `KeyError` when the file does not exist and `sp.InputError` when it is not a
    real-valued 2-D sparse or dense matrix: an unreadable, truncated or corrupt file, a missing
    or malformed array (indptr not rising from 0 to the number of entries, an index outside the
    shape, arrays of mismatched lengths, a shape that is not two non-negative integers), complex
    values, or a header that declares more entries than the file holds or than fit in memory.

    >>> import tempfile, scipy.io, scipy.sparse
    >>> path = Path(tempfile.mkdtemp()) / "tiny.mtx"
    >>> scipy.io.mmwrite(path, scipy.sparse.csr_matrix([[0, 2.5], [1, 0]]))
    >>> read_matrix_file(path).toarray()
    array([[0. , 2.5],
           [1. , 0. ]])
    """
    file = Path(path)
    if not file.is_file():
        raise KeyError(f"in `load_matrix`: no matrix file {str(file)!r}")
    if file.name.lower().endswith(_MATRIX_MARKET):
        return _read_matrix_market(file)
    try:
        with file.open("rb") as f:
            return _read_npz(f, file.name)
    except OSError as e:
        raise InputError(f"in `load_matrix`: cannot read {file.name}: {e}") from None


# -------------------------------------------------------------------- canonical CSR
def _canonical_csr(matrix, label: str, dtype: np.dtype, index_dtype: np.dtype) -> scipy.sparse.csr_matrix:
    """A checked matrix as canonical CSR with `dtype` values and `index_dtype` indices."""
    limit = int(np.iinfo(index_dtype).max)
    hint = "; pass index_dtype='int64'" if index_dtype == np.int32 else ""
    check_shape(matrix.shape, label, limit, f"index_dtype {index_dtype.name}{hint}")
    # CSR stores one indptr entry per row (and the conversion another): refuse a row count the
    # memory cannot hold, however few entries the file stores.
    _check_allocation(label, f"{matrix.shape[0]} rows", (matrix.shape[0] + 1) * 16)
    csr = canonical(native(matrix))
    if csr.nnz > limit:
        raise InputError(
            f"in `load_matrix`: {label} stores {csr.nnz} entries, more than index_dtype {index_dtype.name} "
            f"holds (at most {limit}){hint}"
        )
    result = scipy.sparse.csr_matrix((csr.data.astype(dtype), csr.indices, csr.indptr), shape=csr.shape, copy=True)
    # Assigned after construction: the constructor would narrow int64 indices back to int32.
    result.indices = np.array(csr.indices, dtype=index_dtype)
    result.indptr = np.array(csr.indptr, dtype=index_dtype)
    result.has_sorted_indices = True
    result.has_canonical_format = True
    return result


def _check_allocation(label: str, what: str, nbytes: int) -> None:
    """Refuse to allocate more than the memory budget (`MEMORY_LIMIT`) for a file."""
    budget = _memory_budget()
    if nbytes > budget:
        raise InputError(
            f"in `load_matrix`: {label} declares {what}, which would take {nbytes / 2**30:.1f} GiB; "
            f"at most {budget / 2**30:.1f} GiB are allocated for a file (sp.data.MEMORY_LIMIT)"
        )


def _memory_budget() -> int:
    """`MEMORY_LIMIT`, or half this machine's physical memory."""
    return MEMORY_LIMIT if MEMORY_LIMIT is not None else half_the_memory()


# -------------------------------------------------------------------- scipy .npz
# The arrays each scipy format stores (`scipy.sparse.save_npz`), besides `format` and `shape`;
# a COO matrix stores `row` and `col`, or (newer scipy, n-D) `coords`.
_NPZ_ARRAYS = {
    "csr": ("data", "indices", "indptr"),
    "csc": ("data", "indices", "indptr"),
    "bsr": ("data", "indices", "indptr"),
    "coo": ("data",),
    "dia": ("data", "offsets"),
}


def _read_npz(source: BinaryIO, label: str):
    """The matrix of a scipy `.npz` file, built from arrays checked as stored."""
    try:
        with zipfile.ZipFile(source) as archive:
            arrays = _NpzArrays(archive, label)
            format = arrays.format()
            shape = arrays.shape()
            # The arrays are read only now that the format and shape are known good.
            if format == "coo" and "coords" in arrays and "row" not in arrays:
                coords = arrays["coords"]
                if coords.ndim != 2 or len(coords) != 2:
                    raise InputError(f"in `load_matrix`: `{label}.coords` must be 2 x nnz, got {describe(coords)}")
                found = {"data": arrays["data"], "row": coords[0], "col": coords[1]}
            else:
                names = _NPZ_ARRAYS[format] + (("row", "col") if format == "coo" else ())
                found = {name: arrays[name] for name in names}
    except _READ_ERRORS as e:
        raise InputError(f"in `load_matrix`: cannot read {label} as a scipy .npz matrix: {_reason(e)}") from None
    return _npz_matrix(format, shape, found, label)


def _npz_matrix(format: str, shape: tuple[int, int], arrays: dict[str, np.ndarray], label: str):
    """A scipy matrix of `format` from its arrays, each checked before scipy sees it; indices
    are cast to int64 and values other than float32/float64 to float64 (after the checks)."""
    data = arrays["data"]
    if format in ("csr", "csc", "bsr"):
        check_compressed(format, shape, arrays["indptr"], arrays["indices"], data, label)
        indptr, indices = (arrays[k].astype(np.int64) for k in ("indptr", "indices"))
        data = _values(data)
        if format == "bsr":
            return scipy.sparse.bsr_matrix((data, indices, indptr), shape=shape, blocksize=data.shape[1:])
        cls = scipy.sparse.csr_matrix if format == "csr" else scipy.sparse.csc_matrix
        return cls((data, indices, indptr), shape=shape)
    if format == "coo":
        check_coo(shape, (arrays["row"], arrays["col"]), data, label)
        row, col = (arrays[k].astype(np.int64) for k in ("row", "col"))
        return scipy.sparse.coo_matrix((_values(data), (row, col)), shape=shape)
    check_dia(shape, arrays["offsets"], data, label)
    return _dia_as_coo(shape, arrays["offsets"].astype(np.int64), _values(data))


def _dia_as_coo(shape: tuple[int, int], offsets: np.ndarray, data: np.ndarray) -> scipy.sparse.coo_matrix:
    """The entries of checked DIA arrays, as scipy's `tocoo` keeps them: column j of diagonal k
    at row j - offsets[k], inside the matrix, nonzero (DIA pads its diagonals). In numpy, in the
    size of `data`: scipy's conversion goes through CSR, an indptr of one entry per row."""
    m, n = shape
    columns = np.arange(min(data.shape[1], n))
    data = data[:, : len(columns)]
    rows = columns[None, :] - offsets[:, None]  # no overflow: the offsets lie in (-m, n)
    keep = (rows >= 0) & (rows < m) & (data != 0)
    return scipy.sparse.coo_matrix((data[keep], (rows[keep], np.broadcast_to(columns, rows.shape)[keep])), shape=shape)


def _values(data: np.ndarray) -> np.ndarray:
    """Checked values as float32/float64 in native byte order (scipy refuses float16 and others)."""
    if data.dtype.kind == "f" and data.dtype.newbyteorder("=") in (np.float32, np.float64):
        return data.astype(data.dtype.newbyteorder("="))
    return data.astype(np.float64)


class _NpzArrays:
    """The `.npy` members of an `.npz` archive, each read only after its header was checked
    against the member's size (a header may declare any shape) and never unpickled."""

    def __init__(self, archive: zipfile.ZipFile, label: str):
        self.archive = archive
        self.label = label
        self.members = {
            info.filename.removesuffix(".npy"): info for info in archive.infolist() if info.filename.endswith(".npy")
        }

    def __contains__(self, name: str) -> bool:
        return name in self.members

    def __getitem__(self, name: str) -> np.ndarray:
        info = self.members.get(name)
        if info is None:
            raise InputError(
                f"in `load_matrix`: {self.label} has no `{name}` array; it holds {sorted(self.members) or 'none'}"
            )
        where = f"`{self.label}.{name}`"
        with self.archive.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise InputError(f"in `load_matrix`: {where} is a .npy file of version {version}; expected 1.0 or 2.0")
            if dtype.hasobject:
                raise InputError(f"in `load_matrix`: {where} holds Python objects ({dtype}), which are not read")
            count = int(np.prod(shape, dtype=object)) if shape else 1
            nbytes = count * dtype.itemsize
            stored = info.file_size - f.tell()
            if nbytes != stored:
                raise InputError(
                    f"in `load_matrix`: {where} declares shape {shape} of {dtype} ({nbytes} bytes), "
                    f"but the file stores {stored} bytes of it"
                )
            _check_allocation(self.label, f"`{name}` of shape {shape} and dtype {dtype}", nbytes)
            buffer = bytearray(nbytes)  # writable, unlike the bytes f.read() returns
            if f.readinto(buffer) != nbytes:
                raise InputError(f"in `load_matrix`: {where} is cut short")
        array = np.frombuffer(buffer, dtype=dtype, count=count)
        return array.reshape(shape[::-1]).T if fortran_order else array.reshape(shape)

    def format(self) -> str:
        """The `format` entry: one of scipy's formats this loader reads."""
        entry = self["format"]
        if entry.shape != () or entry.dtype.kind not in "SU":
            raise InputError(f"in `load_matrix`: `{self.label}.format` must be a string, got {describe(entry)}")
        format = entry.item()
        if isinstance(format, bytes):
            format = format.decode("ascii", errors="replace")
        if format not in _NPZ_ARRAYS:
            raise InputError(
                f"in `load_matrix`: {self.label} stores a matrix of format {format!r}; "
                f"expected one of {', '.join(_NPZ_ARRAYS)}"
            )
        return format

    def shape(self) -> tuple[int, int]:
        """The `shape` entry: two non-negative integers (at most int64's largest)."""
        entry = self["shape"]
        if entry.ndim != 1 or entry.dtype.kind not in "iu":
            raise InputError(f"in `load_matrix`: `{self.label}.shape` must be integers, got {describe(entry)}")
        shape = tuple(int(n) for n in entry)
        check_shape(shape, self.label, _INT64_MAX, "indices are at most 64-bit")
        return shape


# -------------------------------------------------------------------- Matrix Market
# The body of a Matrix Market file, byte by byte: each byte has a class, and each pair of
# neighbouring classes is allowed or not. scipy's reader takes the longest number at the start
# of a token and drops the rest (`2,5` is 2, `0x10` is 0, an integer `1.5` is 1, `1-2` is 1,
# `1e` is 1) and runs past the end of a file that ends in `7.25E`, so the body is checked first.
_SPACE, _DIGIT, _DOT, _EXPONENT, _SIGN, _LETTER, _OTHER = range(7)
_CLASSES = {
    _SPACE: b" \t\r\n\v\f",
    _DIGIT: b"0123456789",
    _DOT: b".",
    _EXPONENT: b"eE",
    _SIGN: b"+-",
    _LETTER: b"nNaAiIfFtTyY",  # of nan, inf, infinity
}
# The classes each field allows (indices are digits); any other byte is _OTHER.
_FIELD_CLASSES = {
    "pattern": (_SPACE, _DIGIT),
    "integer": (_SPACE, _DIGIT, _SIGN),
    "real": (_SPACE, _DIGIT, _DOT, _EXPONENT, _SIGN, _LETTER),
    "double": (_SPACE, _DIGIT, _DOT, _EXPONENT, _SIGN, _LETTER),
}


def _class_table(field: str) -> np.ndarray:
    """byte -> its class, for the bytes `field` allows; _OTHER for the rest."""
    table = np.full(256, _OTHER, np.uint8)
    for c in _FIELD_CLASSES[field]:
        table[list(_CLASSES[c])] = c
    return table


def _pair_tables() -> tuple[np.ndarray, np.ndarray]:
    """(broken, starts), indexed by 8 * previous class + class: whether the pair breaks the grammar
    of a number, and whether it starts a token."""
    broken = np.zeros(64, bool)
    starts = np.zeros(64, bool)
    for before in range(7):
        for now in range(7):
            broken[8 * before + now] = (
                (now == _SIGN and before not in (_SPACE, _EXPONENT))  # a sign opens a number or its exponent
                or (now == _EXPONENT and before not in (_DIGIT, _DOT))  # an exponent follows the digits
                or (now == _LETTER and before in (_DIGIT, _DOT, _EXPONENT))  # nan and inf stand alone
                or (before == _LETTER and now in (_DIGIT, _DOT, _EXPONENT))
                or (now == _SPACE and before in (_EXPONENT, _SIGN))  # an exponent has digits
            )
            starts[8 * before + now] = before == _SPACE and now != _SPACE
    return broken, starts


_BROKEN_PAIR, _STARTS_TOKEN = _pair_tables()
_CHUNK = 1 << 22


def _read_matrix_market(file: Path):
    """The matrix of a Matrix Market file (COO), read by scipy once the file was checked: a real
    field, a square matrix where it is symmetric, a dense `array` of at most MAX_DENSE_ENTRIES,
    and a body of exactly the numbers the header declares, each made of the characters of its
    field, so that neither a lying header nor a mangled number reaches scipy's reader."""
    from scipy.io import mminfo, mmread

    label = file.name
    try:
        text = _file_bytes(file)
        if not text.endswith(b"\n"):
            # scipy's reader runs past the end of a file that ends inside a number (`7.25E`).
            text = bytes(text) + b"\n"
        # A stream, not the path: scipy's reader decompresses only after a lower-case suffix.
        rows, cols, entries, layout, field, symmetry = mminfo(io.BytesIO(text))
        banner = bytes(text[: text.find(b"\n")]).split()
        if len(banner) > 1 and banner[1].lower() != b"matrix":  # `mminfo` reads a vector as a matrix
            kind = banner[1].decode("ascii", errors="replace")
            raise InputError(f"in `load_matrix`: {label} holds a Matrix Market {kind!r}, not a matrix")
        numbers, per_line = _check_matrix_market_header(label, len(text), rows, cols, entries, layout, field, symmetry)
        _check_matrix_market_body(label, text, numbers, per_line, field)
        if numbers == 0:
            # scipy's reader divides by the row count of an empty dense array (the process dies).
            return scipy.sparse.coo_matrix((rows, cols))
        matrix = mmread(io.BytesIO(text))
    except _READ_ERRORS as e:
        raise InputError(f"in `load_matrix`: cannot read {label} as a matrix: {_reason(e)}") from None
    if scipy.sparse.issparse(matrix):
        # scipy's reader checked the indices against the shape; check them as everywhere else.
        matrix = scipy.sparse.coo_matrix(matrix)
        check_shape(matrix.shape, label, _INT64_MAX, "indices are at most 64-bit")
        check_coo(matrix.shape, (matrix.row, matrix.col), matrix.data, label)
        if symmetry == "skew-symmetric" and (matrix.row == matrix.col).any():
            row = int(matrix.row[np.argmax(matrix.row == matrix.col)])
            raise InputError(
                f"in `load_matrix`: {label} is skew-symmetric but stores the diagonal entry ({row + 1}, {row + 1})"
            )
        return matrix
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise InputError(f"in `load_matrix`: {label} holds a {matrix.ndim}-D array, not a matrix")
    check_kind(matrix.dtype, f"in `load_matrix`: {label}")
    return scipy.sparse.coo_matrix(matrix)


def _file_bytes(file: Path) -> bytearray | bytes:
    """The file's bytes, decompressed after a `.gz` / `.bz2` suffix (in any case), in chunks up
    to the memory budget: a small compressed file may expand to any size."""
    name = file.name.lower()
    budget = _memory_budget()
    if not name.endswith((".gz", ".bz2")):
        _check_allocation(file.name, f"{file.stat().st_size} bytes", file.stat().st_size)
        return file.read_bytes()
    opener = gzip.open if name.endswith(".gz") else bz2.open
    out = bytearray()
    with opener(file, "rb") as f:
        while chunk := f.read(_CHUNK):
            out += chunk
            if len(out) > budget:
                raise InputError(
                    f"in `load_matrix`: {file.name} decompresses to more than {budget / 2**30:.1f} GiB, "
                    "the most allocated for a file (sp.data.MEMORY_LIMIT)"
                )
    return out


def _check_matrix_market_header(
    label: str, size: int, rows: int, cols: int, entries: int, layout: str, field: str, symmetry: str
) -> tuple[int, int]:
    """How many numbers the body must hold, and how many on each line, once the header passed:
    a real field, a square matrix where it is symmetric, a dense array of at most
    MAX_DENSE_ENTRIES, and no more numbers than the file's `size` bytes or the memory hold."""
    if field == "complex" or symmetry == "hermitian":
        raise InputError(f"in `load_matrix`: {label} holds complex values; only real values are supported")
    if field not in _FIELD_CLASSES:
        raise InputError(f"in `load_matrix`: {label} has the field {field!r}; expected real, integer or pattern")
    if symmetry != "general" and rows != cols:
        raise InputError(f"in `load_matrix`: {label} is {symmetry} but not square ({rows} x {cols})")
    if layout == "array":
        if rows * cols > MAX_DENSE_ENTRIES:
            raise InputError(
                f"in `load_matrix`: {label} declares a dense {rows} x {cols} array ({rows * cols} entries); "
                f"at most {MAX_DENSE_ENTRIES} entries are read from a dense file (store it as coordinate)"
            )
        # A symmetric array stores the lower triangle, a skew-symmetric one without the diagonal.
        per_line = 1
        numbers = {"general": rows * cols, "symmetric": rows * (rows + 1) // 2}.get(symmetry, rows * (rows - 1) // 2)
        what, nbytes = f"a dense {rows} x {cols} array", rows * cols * 8
    else:
        per_line = 2 if field == "pattern" else 3
        numbers = entries * per_line
        what, nbytes = f"{entries} entries", entries * (1 if symmetry == "general" else 2) * 24
    # Each number takes a character and a separator: a header that promises more than the file
    # holds would make scipy's reader allocate them all before it finds out.
    if 2 * numbers - 1 > size:
        raise InputError(
            f"in `load_matrix`: {label} declares {what} ({numbers} numbers), but the file has only {size} bytes"
        )
    _check_allocation(label, what, nbytes)
    return numbers, per_line


def _check_matrix_market_body(label: str, text: bytes | bytearray, numbers: int, per_line: int, field: str) -> None:
    """The body (after the size line) holds `numbers` numbers, `per_line` on each line that is
    not blank (scipy's reader ignores the rest of a line), each made of the characters `field`
    allows, in the grammar of a number. With numpy, in chunks of whole lines."""
    classes = _class_table(field)
    view = np.frombuffer(text, np.uint8)
    tokens = 0
    at = _body_start(text)
    while at < len(view) and tokens <= numbers:
        end = text.find(b"\n", min(at + _CHUNK, len(view)))
        end = len(view) if end < 0 else end + 1
        tokens += _check_lines(label, text, at, classes[view[at:end]], per_line, field)
        at = end
    if tokens != numbers:
        more = "more" if tokens > numbers else f"only {tokens}"
        raise InputError(f"in `load_matrix`: {label} declares {numbers} numbers after its header, but holds {more}")


def _check_lines(label: str, text: bytes | bytearray, at: int, cls: np.ndarray, per_line: int, field: str) -> int:
    """The number of tokens in the whole lines of `text` from `at` whose byte classes are `cls`,
    after checking them; the error names the line."""
    other = cls == _OTHER
    if other.any():
        where = at + int(np.argmax(other))
        raise InputError(
            f"in `load_matrix`: {label} line {_line(text, where)}: unexpected character "
            f"{bytes(text[where : where + 1])!r} (field {field})"
        )
    pairs = np.empty(len(cls), np.uint8)
    pairs[0] = 8 * _SPACE + cls[0]  # a chunk begins a line
    pairs[1:] = cls[:-1] * np.uint8(8) + cls[1:]
    broken = _BROKEN_PAIR[pairs]
    first = np.flatnonzero(_STARTS_TOKEN[pairs])
    if not broken.any():
        broken = _twice_in_a_number(cls, first)
    if broken is not None and broken.any():
        where = at + int(np.argmax(broken))
        raise InputError(
            f"in `load_matrix`: {label} line {_line(text, where)}: malformed number {_token(text, where)!r}"
        )
    newlines = np.flatnonzero(np.frombuffer(text, np.uint8, len(cls), at) == ord("\n"))
    counts = np.bincount(np.searchsorted(newlines, first), minlength=len(newlines) + 1)
    wrong = (counts != 0) & (counts != per_line)
    if wrong.any():
        line = int(np.argmax(wrong))
        where = at + (int(newlines[line - 1]) + 1 if line else 0)
        raise InputError(
            f"in `load_matrix`: {label} line {_line(text, where)}: {counts[line]} numbers, "
            f"expected {per_line} on each line"
        )
    return len(first)


def _twice_in_a_number(cls: np.ndarray, first: np.ndarray) -> np.ndarray | None:
    """A mask of the dots and exponents that break a number (a second dot, a second exponent, a
    dot after the exponent), or None; `first` are the tokens' first bytes. Works on the positions
    of dots and exponents only: the token of each is found by binary search."""
    dots = np.flatnonzero(cls == _DOT)
    exponents = np.flatnonzero(cls == _EXPONENT)
    dot_token = np.searchsorted(first, dots, side="right")
    exponent_token = np.searchsorted(first, exponents, side="right")
    bad = list(dots[1:][dot_token[1:] == dot_token[:-1]])
    bad += list(exponents[1:][exponent_token[1:] == exponent_token[:-1]])
    last_exponent = np.searchsorted(exponents, dots) - 1  # the exponent before each dot, if any
    has_one = last_exponent >= 0
    bad += list(dots[has_one][exponent_token[last_exponent[has_one]] == dot_token[has_one]])
    if not bad:
        return None
    mask = np.zeros(len(cls), bool)
    mask[min(bad)] = True
    return mask


def _token(text: bytes | bytearray, where: int) -> str:
    """The whitespace-separated token of `text` around position `where`, for a message."""
    start = where
    while start > 0 and text[start - 1] not in _CLASSES[_SPACE]:
        start -= 1
    end = where
    while end < len(text) and text[end] not in _CLASSES[_SPACE] and end - start < 40:
        end += 1
    return bytes(text[start:end]).decode("ascii", errors="replace")


def _line(text: bytes | bytearray, where: int) -> int:
    return text.count(b"\n", 0, where) + 1


def _body_start(text: bytes | bytearray) -> int:
    """Where the entries begin: after the banner, the comment and blank lines, and the size line."""
    at = 0
    seen_banner = False
    while at < len(text):
        end = text.find(b"\n", at)
        end = len(text) if end < 0 else end + 1
        line = text[at:end].strip()
        at = end
        if not seen_banner:
            seen_banner = True
        elif line and not line.startswith(b"%"):
            return at  # the size line
    return at


def _reason(e: BaseException) -> str:
    """An exception's message, with its type when the message alone says little."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
