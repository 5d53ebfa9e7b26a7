"""Sparse x sparse kernels whose output's structure they assemble.

* `kernels`: the Stage II scripts (SpGEMM's symbolic and numeric passes with dense or hash
  workspaces, masked SpGEMM, two- and k-operand merges, compaction);
* `host`: what runs between them (row chunks of equal work, the prefix sum, allocation,
  compaction) and `AssembledKernel`, what `sp.build` makes of a script with an assembled output;
* `assemble`: scripts with `T.sparse_variable(..., assemble=True)`: the presence semantics the
  interpreter runs (`densify`) and the match of a script onto the kernels (`match`, `lower`, called
  by `lower_sparse_iter`).

The operators on them are `sp.ops.spgemm`, `sp.ops.add` and `sp.ops.multiply`
(`sparsetir_py/ops/coiteration.py`). Iteration lattices live in `arith.lattice`; the co-iteration
of reductions in Stage I scripts in `transform.coiterate`."""
