"""Checked writes at run time: the error flag a kernel sets and the `InputError` every engine raises.

A Stage I write that the verifier cannot prove lands on a stored coordinate (`CheckedWrite` in
`ir/verify.py`) is lowered to a search in the written buffer's structure
(`transform/checked_writes.py`). A miss has no storage to go to, so it is an error, the same one
from every engine:

- the Stage I interpreter raises `unstored_write_error` at the first miss, in iteration order;
- a kernel (CPU or CUDA) records the miss in a per-buffer error flag, a scratch array of int64
  `[missed, c0, c1, ...]` that the runtime allocates zeroed per call, and the host raises the same
  error after the call (`raise_if_missed`). The first miss in the kernel's own order records its
  coordinates: in a serial loop nest that is the interpreter's order. Threads that miss at the
  same moment race on the coordinate slots (plain stores, no atomics), so a parallel kernel with
  several misses names one of them, or in a rare race a mix of two; the flag itself is exact.

The function attribute `checked_writes` lists the flags: `((flag buffer name, written buffer
name), ...)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import InputError

ATTR = "checked_writes"


def unstored_write_error(buffer: str, coords: Sequence[int]) -> InputError:
    """The error of a write to `buffer` at `coords`, which its structure does not store."""
    point = tuple(int(c) for c in coords)
    return InputError(
        f"write to `{buffer}` at coordinates {point}, which its structure does not store "
        "(check the structure arrays of its axes)"
    )


def flags(func) -> tuple[tuple[str, str], ...]:
    """(flag buffer name, written buffer name) of every checked write target of `func`."""
    return tuple(tuple(pair) for pair in func.attrs.get(ATTR, ()))


def raise_if_missed(func, arrays: Mapping[str, np.ndarray]) -> None:
    """Raise `unstored_write_error` for the first flag (in `func`'s order) that a run set;
    `arrays` maps flag buffer names to the flag arrays of the run (host arrays)."""
    for flag, buffer in flags(func):
        values = arrays.get(flag)
        if values is not None and values.size and values[0] != 0:
            raise unstored_write_error(buffer, values[1:])
