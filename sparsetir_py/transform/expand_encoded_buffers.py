"""`expand_encoded_buffers`: buffers declared with an MLIR encoding move onto its levels.

The pass lives with the encodings it reads (`sparsetir_py.format.mlir.expand`), so that the
frontend, which runs it on every script that declares an encoding, depends on no pass.
"""

from ..format.mlir.expand import EncodedLayout, encoded_layout, expand_encoded_buffers

__all__ = ["EncodedLayout", "encoded_layout", "expand_encoded_buffers"]
