"""A `FrontendError` on a very long source line shows a window around the offending span, not the
whole line (a generated script of one 40 KB line would otherwise give a 40 KB message); a short
line is shown whole, with the caret under the span."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sparsetir_py.errors import EXCERPT_RADIUS, FrontendError


def test_short_line_is_shown_whole():
    message = str(FrontendError("bad", "f.py", 3, 4, "    xyz = 1", 7)).splitlines()
    assert message == ["f.py:3:5: error: bad", "        xyz = 1", "        ^^^"]


@pytest.mark.parametrize("col", [0, 10, 5000, 39_990])
def test_long_line_is_cut_around_the_span(col):
    line = "a" * col + "BAD" + "b" * (40_000 - col)
    _, shown, caret = str(FrontendError("bad", "f.py", 1, col, line, col + 3)).splitlines()
    assert len(shown) <= 4 + 2 * 3 + 2 * EXCERPT_RADIUS + 3
    assert shown[caret.index("^") : caret.rindex("^") + 1] == "BAD"


def test_a_long_span_is_capped():
    line = "x" * 10 + "y" * 9000
    _, shown, caret = str(FrontendError("bad", "f.py", 1, 10, line, 9010)).splitlines()
    assert caret.count("^") == 2 * EXCERPT_RADIUS and shown.endswith("...")


def test_a_script_with_a_long_line_reports_a_short_message():
    """End to end: a script whose offending line is a 20 KB expression, deeper than Python's own
    parser recurses. Run in a child process: on CPython 3.11 a RecursionError inside `ast.parse`
    leaves the interpreter's AST depth counter wrong, and later `ast.parse` calls in the same
    process fail ("AST constructor recursion depth mismatch")."""
    child = textwrap.dedent(
        """
        import sparsetir_py as sp
        filler = " + ".join(["1"] * 5000)
        source = (
            "from sparsetir_py import script as T\\n\\n@T.prim_func\\ndef f(a: T.handle, m: T.int32):\\n"
            f"    I = T.dense_fixed(m + {filler} + undefined_name)\\n"
        )
        try:
            sp.from_script(source)
        except sp.SparseTIRError as e:
            print(type(e).__name__, len(str(e)))
        """
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    name, length = out.stdout.split()
    assert name == "FrontendError" and int(length) < 2000
