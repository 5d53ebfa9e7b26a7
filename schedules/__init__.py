"""Schedule scripts shipped with the project, per operator and target.

A schedule is a function `fn(sch: Schedule) -> None` applied to the Stage II function that
`lower_sparse_iter` produced; `sp.ops` picks one by default and `schedule=` chooses another.
"""

from . import sddmm, spgemm, spmm

__all__ = ["sddmm", "spgemm", "spmm"]
