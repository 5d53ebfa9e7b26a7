"""Compatibility with the library versions users have, applied once when the package is imported.

numpy 2.5 removed `np.row_stack` (an alias of `np.vstack` since numpy 1.x, deprecated in 2.0).
numba-cuda up to at least 0.30 registers an overload for it while loading its array typing, so
with numpy 2.5 every CUDA compilation fails with "module 'numpy' has no attribute 'row_stack'"
(seen on an H200 machine with numpy 2.5.2: every kernel of `make test-gpu`). Where the alias is
missing, `restore_numpy_aliases` puts it back as the same function numpy had; it changes nothing
where numpy still has it.
"""

from __future__ import annotations

import numpy as np

#: Aliases numpy removed that Numba's CUDA target still names: name -> the function it aliased.
REMOVED_NUMPY_ALIASES = {"row_stack": "vstack"}


def restore_numpy_aliases() -> list[str]:
    """Put back each alias of `REMOVED_NUMPY_ALIASES` that this numpy lacks; returns those put back."""
    restored = []
    for alias, target in REMOVED_NUMPY_ALIASES.items():
        if not hasattr(np, alias):
            setattr(np, alias, getattr(np, target))
            restored.append(alias)
    return restored


restore_numpy_aliases()
