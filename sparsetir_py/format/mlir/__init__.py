"""MLIR's sparse tensor encoding: the text, the level kinds, and a tensor stored under it.

`encoding` parses `#sparse_tensor.encoding<{...}>` (its level expressions with
`sparsetir_py.arith`'s parser) into a `SparseTensorEncoding`; `levels` holds what depends on the
kind of a level (dense, compressed, loose_compressed, singleton, n_out_of_m), one table entry per
kind: how it is stored, read back and expanded into a script's axes, and the one level-size
function; `storage` stores a tensor under an encoding (`to_storage`) and reads it back. The pass
that moves a script's encoded buffers onto their level axes is
`transform.expand_encoded_buffers`.
"""

from .encoding import DimSlice, LevelCounter, LevelType, SparseTensorEncoding, parse_encoding
from .storage import SparseTensorStorage, argument_names, to_storage

__all__ = [
    "DimSlice",
    "LevelCounter",
    "LevelType",
    "SparseTensorEncoding",
    "SparseTensorStorage",
    "argument_names",
    "parse_encoding",
    "to_storage",
]
