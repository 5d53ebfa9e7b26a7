"""The project's exceptions: one root, one subclass per stage of the pipeline."""

from __future__ import annotations


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
            width = max(1, (end_col or col + 1) - col)
            caret = " " * col + "^" * width
            text += f"\n    {source_line.rstrip()}\n    {caret}"
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


class InterpretError(SparseTIRError):
    """The reference interpreter met a script that reads or writes outside its buffers."""


class EncodingError(SparseTIRError):
    """Malformed MLIR `#sparse_tensor.encoding` text (reported with its position and what was
    expected there), or a tensor that an encoding cannot store."""

    def __init__(self, message: str, text: str | None = None, position: int | None = None):
        self.message = message
        self.text = text
        self.position = position
        self.line = self.column = None
        full = message
        if text is not None and position is not None:
            position = max(0, min(position, len(text)))
            self.position = position
            self.line = text.count("\n", 0, position) + 1
            start = text.rfind("\n", 0, position) + 1
            end = text.find("\n", position)
            self.column = position - start + 1
            source_line = text[start : end if end >= 0 else len(text)]
            full = f"{message} (at position {position}, line {self.line}, column {self.column})"
            full += f"\n    {source_line.rstrip()}\n    {' ' * (position - start)}^"
        super().__init__(full)


class DistributedError(SparseTIRError):
    """A distributed call (`sp.distributed`) that the cluster could not finish: no workers came,
    a wait ran past its timeout, or a task kept failing after the recoveries allowed."""
