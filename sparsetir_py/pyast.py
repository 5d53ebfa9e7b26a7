"""`ast.parse` behind one lock, for every parse of Python text the project makes (scripts,
co-iteration expressions).

On CPython 3.11 the AST constructor's recursion counter is interpreter state, shared by all
threads: two parses at once (Dask's worker threads building kernels side by side in
`sp.distributed`) can fail with "SystemError: AST constructor recursion depth mismatch"
(CPython gh-106905; seen here in the README's distributed block). One parse at a time costs
nothing measurable: a script parses in well under a millisecond."""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(text: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse(text, filename, mode)`, one thread at a time."""
    with _LOCK:
        return ast.parse(text, filename, mode)
