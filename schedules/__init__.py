"""Schedule scripts for SpMM / SDDMM / BSR per target (added with the schedule primitives)."""
