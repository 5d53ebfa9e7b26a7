"""The project's exceptions: one root, one subclass per stage of the pipeline."""

from __future__ import annotations

import re

#: How many characters of the offending line an error shows on each side of the offending one: a
#: text of one long line (a generated map of thousands of terms) would otherwise be quoted whole.
EXCERPT_RADIUS = 36
#: Script lines up to this length are shown whole in a `FrontendError` (a generated line is longer).
WHOLE_LINE = 240


def caret_window(line: str, start: int, end: int | None = None, *, whole: int = 0) -> str:
    r"""Two indented lines showing columns `[start, end)` of one source `line` (from 0; one column
    when `end` is None): the line and carets under the span. The one caret renderer of the project:
    `source_excerpt` (encodings, indexing maps) and `FrontendError` both call it.

    A line longer than `whole` characters is cut to EXCERPT_RADIUS characters either side of the
    span (at most 2 * EXCERPT_RADIUS of the span shown), with `...` where it is cut: a text of one
    long line (a generated map of thousands of terms) would otherwise be quoted whole. Characters
    that do not print (tabs, NULs) are shown as blanks, one for one, so that the carets stay under
    their characters.

    >>> print(caret_window("x = (1 + 2 ? 3)", 11))
    <BLANKLINE>
        x = (1 + 2 ? 3)
                   ^
    """
    end = max(start + 1, end or start + 1)
    if len(line) <= whole:
        lo, hi = 0, len(line)
    else:
        end = min(end, start + 2 * EXCERPT_RADIUS)
        lo, hi = max(0, start - EXCERPT_RADIUS), min(len(line), end + EXCERPT_RADIUS)
    shown = "".join(c if c.isprintable() else " " for c in line[lo:hi])
    head = "..." if lo > 0 else ""
    tail = "..." if hi < len(line) else ""
    if not tail:
        shown = shown.rstrip()  # the line's trailing blanks (and a `\r` before its `\n`)
    caret = " " * (len(head) + start - lo) + "^" * (end - start)
    return f"\n    {head}{shown}{tail}\n    {caret}"


def source_excerpt(text: str, position: int) -> tuple[int, int, str]:
    r"""The line and column (from 1) of `position` in `text`, and `caret_window` of its line.

    >>> line, column, excerpt = source_excerpt("x = (1 +\n  2 ? 3)", 13)
    >>> (line, column), excerpt.splitlines()[1:]
    ((2, 5), ['      2 ? 3)', '        ^'])
    """
    position = max(0, min(position, len(text)))
    line = text.count("\n", 0, position) + 1
    line_start = text.rfind("\n", 0, position) + 1
    line_end = text.find("\n", position)
    line_end = len(text) if line_end < 0 else line_end
    return line, position - line_start + 1, caret_window(text[line_start:line_end], position - line_start)


class SparseTIRError(Exception):
    """Root of every error this package raises on purpose."""


class FrontendError(SparseTIRError):
    """A mistake in a `@T.prim_func` script, reported with file:line:col and a caret."""

    def __init__(
        self,
        message: str,
        filename: str = "<script>",
        line: int = 0,
        col: int = 0,
        source_line: str = "",
        end_col: int | None = None,
    ):
        self.message = message
        self.filename = filename
        self.line = line
        self.col = col
        self.source_line = source_line
        text = f"{filename}:{line}:{col + 1}: error: {message}"
        if source_line:
            text += caret_window(source_line.rstrip(), col, end_col, whole=WHOLE_LINE)
        super().__init__(text)


class VerifyError(SparseTIRError):
    """An ill-formed function; each rule of `sp.verify` has its own subclass."""


class ScheduleError(SparseTIRError):
    """A schedule primitive's precondition does not hold."""


class LoweringError(SparseTIRError):
    """A lowering pass cannot handle its input."""


class CodegenError(SparseTIRError):
    """Code generation cannot render a construct for the chosen target."""


class FormatError(SparseTIRError):
    """A format rewrite rule that does not fit itself or the function it rewrites, or a matrix
    that cannot be converted to a format."""


class InputError(SparseTIRError):
    """Bad arrays or scalars passed to a kernel or to the interpreter; the message names the argument."""


class TargetError(InputError, CodegenError):
    """An unknown target ("cpu" and "cuda" are known): the caller's argument, so an `InputError`
    wherever it is given (`sp.ops`, `sp.tune`, a schedule), and a `CodegenError` as well, since
    `sp.build` raised that for it before."""


class InterpretError(SparseTIRError):
    """The reference interpreter met a script that reads or writes outside its buffers."""


#: A quoted token of a message (`name`, no blanks) longer than a reader needs: a 40 KB identifier is cut.
_LONG_QUOTE = re.compile(r"`([^`\s]{81,})`")


def _cut_quote(match: re.Match) -> str:
    quoted = match.group(1)
    return f"`{quoted[:40]}...` ({len(quoted)} characters)"


class PositionedError(SparseTIRError):
    """An error at a position of a piece of text. It has the `text`, the `position` in it (from
    0) and its `line` and `column` (from 1), and its message ends with a window of the offending
    line and a caret; errors with no text have None there. A long quoted token of the message is
    cut."""

    def __init__(self, message: str, text: str | None = None, position: int | None = None):
        message = _LONG_QUOTE.sub(_cut_quote, message)
        self.message = message
        self.text = text
        self.position = position
        self.line = self.column = None
        full = message
        if text is not None and position is not None:
            self.position = max(0, min(position, len(text)))
            self.line, self.column, excerpt = source_excerpt(text, self.position)
            full = f"{message} ({self._where()}){excerpt}"
        super().__init__(full)

    def _where(self) -> str:
        return f"line {self.line}, column {self.column}"


class EncodingError(PositionedError):
    """Malformed MLIR `#sparse_tensor.encoding` text (reported with its position and what was
    expected there), or a tensor that an encoding cannot store."""

    def _where(self) -> str:
        return f"at position {self.position}, line {self.line}, column {self.column}"


class DistributedError(SparseTIRError):
    """A distributed call (`sp.distributed`) that the cluster could not finish: no workers came,
    a wait ran past its timeout, or a task kept failing after the recoveries allowed."""
