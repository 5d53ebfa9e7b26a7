"""Ready-made operators on scipy sparse matrices, compiled through the project's own pipeline.

    C = sp.ops.spmm(A, B)                  # A @ B, a numpy array
    S = sp.ops.sddmm(A, X, Y)              # A's structure, values A * (X @ Y.T) (explicit zeros kept)
    C = sp.ops.spgemm(A, B, mask=None)     # sparse @ sparse, an assembled canonical CSR matrix
    C = sp.ops.add(A, B, alpha=1, beta=1)  # alpha * A + beta * B (the union of the structures)
    C = sp.ops.multiply(A, B)              # A * B element-wise (the intersection)

Kernels are cached per (operator, format, value dtype, index dtype, target, schedule, and the
feature width on CUDA, where it is specialised), so calling again with new values does not
recompile.

Inputs are checked as stored, before any scipy routine that assumes a valid structure (format
conversion, `sum_duplicates`) sees them: a broken indptr, out-of-range indices, arrays of the
wrong length or dtype, or a shape the arrays do not fit raise `sp.InputError`, as does a shape
past 2**31 - 1 rows or columns (the kernels' sizes are int32). Unsorted or duplicated entries,
other scipy formats, explicit zeros, NaN values, any integer index dtype (cast to int32/int64)
and bool/integer/float16 values (cast to float64) are valid and give scipy's answer.
Duplicates are summed first (scipy's `sum_duplicates`): where B holds an inf, two duplicates of
opposite signs give +-inf, where scipy's product of the uncanonical matrix gives NaN. The O(nnz)
structure check runs once per matrix structure (`sparsetir_py.operands`); `data` is re-checked
(O(1)) on every call. Mutating `indptr`/`indices` in place afterwards is not detected.

Results never share memory with an input: `spmm` returns a new array, and `sddmm`'s matrix owns
copies of A's `indptr`/`indices` (as scipy's `A.multiply` does), so changing it in place
(`eliminate_zeros`, `sort_indices`) leaves A alone.

One concern a module: `operators` (the call path and the operator table), `scripts` (the
computations), `kernels` (the kernel cache), `repeat` (the repeated-call fast path), `auto`
(`format="auto"`), `parts` (composable formats), `threads` (how many threads a call runs on),
`coiteration` (sparse x sparse operators; their kernels are `sparsetir_py.coiteration`).
"""

from __future__ import annotations

from .coiteration import add, multiply, spgemm
from .operators import OPERATORS, sddmm, spmm
from .scripts import SCRIPTS, sddmm_script, spmm_script

__all__ = ["OPERATORS", "SCRIPTS", "add", "multiply", "sddmm", "sddmm_script", "spgemm", "spmm", "spmm_script"]
