"""What the CUDA tests need to know about this machine."""

from __future__ import annotations

import functools


@functools.cache
def ptx_unavailable() -> str | None:
    """Why PTX cannot be compiled here (None when it can)."""
    import numba

    if numba.config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM is set: PTX needs the real numba-cuda"
    try:
        from numba import cuda

        cuda.compile_ptx(lambda a: None, (numba.float32[::1],), cc=(8, 0))
    except Exception as e:  # no NVVM / nvrtc wheels
        return f"numba-cuda cannot compile PTX here: {type(e).__name__}: {e}"
    return None
