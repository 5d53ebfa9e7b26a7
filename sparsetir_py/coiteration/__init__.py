"""The Stage II scripts of the sparse x sparse kernels that assemble their output's structure
(`kernels`); the operators on them are `sp.ops.spgemm`, `sp.ops.add` and `sp.ops.multiply`
(`sparsetir_py/ops/coiteration.py`). Iteration lattices live in `arith.lattice`; the
co-iteration of Stage I scripts in `transform.coiterate`."""
