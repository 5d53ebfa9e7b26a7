"""What `sparsetir-py` and `python -m bench` share on the command line: argparse option types and
the one line that reports an error (`prog: error: Type: message (file.py, line N)`).

A module of its own, below both: `bench` imports it without importing the `sparsetir-py`
command, which dispatches `sparsetir-py bench` to `bench`.
"""

from __future__ import annotations

import argparse
import math
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any


# -------------------------------------------------------------------- option types
def _option_type(convert: Callable[[str], Any], accept: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse type: `convert(text)` where `accept` holds; argparse names the option in its error."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


positive_int = _option_type(int, lambda v: v >= 1, "a positive integer")  # --repeat, --threads, ...
nonnegative_int = _option_type(int, lambda v: v >= 0, "a non-negative integer")  # --seed
positive_float = _option_type(float, lambda v: 0 < v < math.inf, "a positive number")  # --budget (seconds)


# -------------------------------------------------------------------- errors
def _text(value: object) -> str:
    """`str(value)`, or a stand-in when the object's own `__str__` fails (a user's exception)."""
    try:
        text = str(value)
    except BaseException:  # a broken __str__ of a user's object must not hide the error
        return f"<{type(value).__name__} that cannot be printed>"
    return text if isinstance(text, str) else type(value).__name__


def _where(e: BaseException, files: Sequence[str]) -> str:
    """`name.py, line N`: the deepest frame of the traceback in one of the user's `files`; "" when none."""
    wanted = {os.path.realpath(f) for f in files}
    found = ""
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        filename = frame.f_code.co_filename
        if os.path.realpath(filename) in wanted:
            found = f"{os.path.basename(filename)}, line {lineno}"
    return found


def error_message(e: BaseException, files: Sequence[str] = ()) -> str:
    """`Type: first line of the message (file.py, line N)`, on one line whatever the message.

    The place is the deepest line of a user's file (`files`) the error passed through, unless the
    message names it already."""
    if isinstance(e, SystemExit):
        code = e.code if e.code is None or type(e.code) in (int, bool) else _text(e.code)
        message = f"the code called sys.exit({code!r})"
    elif isinstance(e, KeyError) and e.args:
        message = _text(e.args[0])
    else:
        message = _text(e)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0] if lines else "(no message)"
    where = _where(e, files)
    if isinstance(e, SyntaxError):  # its message holds the file and line when it knows them
        where = "" if e.lineno else os.path.basename(files[0]) if files else ""
    if where and where.split(",")[0] + ":" not in first:
        first += f" ({where})"
    text = " ".join(f"{type(e).__name__}: {first}".splitlines())
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_line(prog: str, e: BaseException, files: Sequence[str] = ()) -> str:
    """The one line that reports `e`: `prog: error: Type: message (file.py, line N)`."""
    return f"{prog}: error: {error_message(e, files)}"


def debugging() -> bool:
    """Whether `SPARSETIR_DEBUG` asks for tracebacks (set, and not 0)."""
    return os.environ.get("SPARSETIR_DEBUG", "").strip() not in ("", "0")
