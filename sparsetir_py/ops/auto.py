"""`format="auto"`: the configuration `sparsetir_py.tuning` chose for A's structure and the width,
tuned once per structure (remembered here by the identity of A's arrays, on disk by their
fingerprint), timing candidates with the operator that asked."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import tuning
from ..errors import InputError
from ..inputs import check_kind
from ..operands import StructureCache, as_csr, dense_operand, read_array, value_dtype

#: The choices made, by (indptr, indices), shape, operator, width, target and values' dtype.
CHOICES = StructureCache()


def choose(op: str, run: Callable, A, dense, target: str, params: dict) -> dict:
    """Keyword arguments of `run` (`sp.ops.spmm` / `sp.ops.sddmm`) for this matrix and width."""
    if params:
        raise InputError(f"format 'auto' takes no parameters, got {', '.join(params)}")
    csr = as_csr(A, values=False)  # the structure and the values' dtype: no gather of a converted A's values
    name = "B" if op == "spmm" else "X"
    D = read_array(dense, name)
    if not isinstance(D, np.ndarray) or D.ndim != 1:  # a 1-D B (SpMV) is one column
        D = dense_operand(D, name)
    check_kind(D.dtype, f"`{name}`")
    feat = int(D.shape[1]) if D.ndim == 2 else 1
    dtype = value_dtype(csr.dtype, D.dtype)
    key = (csr.shape, op, feat, target, dtype.str)
    choice = CHOICES.get(csr.indptr, csr.indices, *key)
    if choice is None:  # the tuner runs its candidates on A's values
        choice = tuning.tune(op, as_csr(A), feat, target, run=run, progress=False, dtype=dtype).ops_kwargs()
        CHOICES.put(csr.indptr, csr.indices, key, choice)
    return choice
