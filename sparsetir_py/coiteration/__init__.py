"""Sparse x sparse operators whose kernels assemble their output's structure (`operators`), and
the Stage II scripts of those kernels (`kernels`). Iteration lattices live in `arith.lattice`;
the co-iteration of Stage I scripts in `transform.coiterate`."""
